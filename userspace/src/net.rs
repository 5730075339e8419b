//! Sans-IO parsing of received frames: Ethernet II (+ one optional 802.1Q tag), IPv4, UDP.
//!
//! smoltcp `wire` style: every length is checked once while parsing, the result holds plain
//! values and sub-slices, and nothing afterwards can panic. No indexing is used at all: each
//! header is taken with `split_first_chunk`, which returns `None` instead of panicking.
//!
//! References: IEEE 802.3 / 802.1Q (Ethernet II, TPID 0x8100), RFC 791 (IPv4), RFC 768
//! (UDP). IPv4 fragments are reported as [`NetError::Fragment`] so the caller can hand them
//! to reassembly (see [`parse_ipv4`]); the header checksum is not verified.

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType (TPID) of an IEEE 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType (TPID) of an IEEE 802.1ad service tag (outer tag of Q-in-Q), accepted like 0x8100.
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
/// IPv4 protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// Ethernet II header length in bytes (no tag).
pub const ETH_HEADER_LEN: usize = 14;
/// 802.1Q tag length in bytes.
pub const VLAN_TAG_LEN: usize = 4;
/// Minimum (IHL 5) IPv4 header length in bytes.
pub const IPV4_MIN_HEADER_LEN: usize = 20;
/// UDP header length in bytes.
pub const UDP_HEADER_LEN: usize = 8;

/// The header a length check failed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// 802.1Q tag.
    Vlan,
    /// IPv4 header (fixed part or options).
    Ipv4,
    /// UDP header.
    Udp,
}

/// Why a frame is not a complete, unfragmented IPv4 UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// The frame ends inside a header.
    #[error("frame truncated in the {layer:?} header: need {need} bytes, have {have}")]
    Truncated {
        /// Header being read.
        layer: Layer,
        /// Bytes that header needs.
        need: usize,
        /// Bytes left in the frame.
        have: usize,
    },
    /// EtherType (after any VLAN tag) is not IPv4.
    #[error("EtherType {0:#06x} is not IPv4")]
    NotIpv4(u16),
    /// IPv4 version nibble is not 4.
    #[error("IP version {0}, expected 4")]
    BadVersion(u8),
    /// IPv4 IHL below 5 (header shorter than 20 bytes).
    #[error("IPv4 IHL {0} < 5")]
    BadIhl(u8),
    /// IPv4 total length is shorter than the header or longer than the frame.
    #[error(
        "IPv4 total length {total} invalid: header {header_len} bytes, {available} bytes after Ethernet"
    )]
    BadTotalLength {
        /// The total length field, bytes.
        total: u16,
        /// Header length from IHL, bytes.
        header_len: usize,
        /// Bytes in the frame from the IPv4 header on.
        available: usize,
    },
    /// Not UDP.
    #[error("IP protocol {0} is not UDP")]
    NotUdp(u8),
    /// An IPv4 fragment (MF set or offset non-zero): needs reassembly first. Its id,
    /// offset and payload are available from [`parse_ipv4`].
    #[error("IPv4 fragment: needs reassembly")]
    Fragment,
    /// UDP length field shorter than the header or longer than the IPv4 payload.
    #[error("UDP length {len} invalid for an IPv4 payload of {available} bytes")]
    BadUdpLength {
        /// The UDP length field, bytes.
        len: u16,
        /// IPv4 payload bytes.
        available: usize,
    },
}

/// A parsed IPv4 packet, fragment or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<'a> {
    /// 802.1Q VLAN ID (12 bits) if the frame was tagged.
    pub vlan: Option<u16>,
    /// Source address.
    pub src_ip: [u8; 4],
    /// Destination address.
    pub dst_ip: [u8; 4],
    /// Protocol number (17 = UDP).
    pub protocol: u8,
    /// Identification field (fragments of one datagram share it).
    pub id: u16,
    /// Fragment offset in bytes.
    pub frag_offset: u16,
    /// More-fragments flag.
    pub more_fragments: bool,
    /// IPv4 payload: `total_length - ihl*4` bytes (Ethernet padding removed).
    pub payload: &'a [u8],
}

impl Ipv4Packet<'_> {
    /// This packet is a fragment (MF set or non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments || self.frag_offset != 0
    }
}

/// An unfragmented UDP datagram over IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// IPv4 source address.
    pub src_ip: [u8; 4],
    /// IPv4 destination address.
    pub dst_ip: [u8; 4],
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP payload: `udp_length - 8` bytes.
    pub payload: &'a [u8],
}

fn take<const N: usize>(buf: &[u8], layer: Layer) -> Result<(&[u8; N], &[u8]), NetError> {
    buf.split_first_chunk::<N>().ok_or(NetError::Truncated {
        layer,
        need: N,
        have: buf.len(),
    })
}

fn be16(b: [u8; 2]) -> u16 {
    u16::from_be_bytes(b)
}

/// Parses Ethernet II (+ one optional 802.1Q or 802.1ad tag, as the XDP program does) and an
/// IPv4 header, fragments included.
///
/// # Errors
/// [`NetError::Truncated`], [`NetError::NotIpv4`], [`NetError::BadVersion`],
/// [`NetError::BadIhl`], [`NetError::BadTotalLength`].
pub fn parse_ipv4(frame: &[u8]) -> Result<Ipv4Packet<'_>, NetError> {
    let (eth, rest) = take::<ETH_HEADER_LEN>(frame, Layer::Ethernet)?;
    let [.., t0, t1] = *eth;
    let mut ethertype = be16([t0, t1]);
    let mut rest = rest;
    let mut vlan = None;
    if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        let (tag, r) = take::<VLAN_TAG_LEN>(rest, Layer::Vlan)?;
        let [c0, c1, e0, e1] = *tag;
        vlan = Some(be16([c0, c1]) & 0x0fff);
        ethertype = be16([e0, e1]);
        rest = r;
    }
    if ethertype != ETHERTYPE_IPV4 {
        return Err(NetError::NotIpv4(ethertype));
    }

    let ip = rest;
    let (h, _) = take::<IPV4_MIN_HEADER_LEN>(ip, Layer::Ipv4)?;
    let [
        vihl,
        _tos,
        l0,
        l1,
        i0,
        i1,
        f0,
        f1,
        _ttl,
        protocol,
        _c0,
        _c1,
        s0,
        s1,
        s2,
        s3,
        d0,
        d1,
        d2,
        d3,
    ] = *h;
    let version = vihl >> 4;
    if version != 4 {
        return Err(NetError::BadVersion(version));
    }
    let ihl = vihl & 0x0f;
    if ihl < 5 {
        return Err(NetError::BadIhl(ihl));
    }
    let header_len = ihl as usize * 4;
    if ip.len() < header_len {
        return Err(NetError::Truncated {
            layer: Layer::Ipv4,
            need: header_len,
            have: ip.len(),
        });
    }
    let total = be16([l0, l1]);
    let bad_total = NetError::BadTotalLength {
        total,
        header_len,
        available: ip.len(),
    };
    let packet = ip.get(..total as usize).ok_or(bad_total)?;
    let payload = packet.get(header_len..).ok_or(bad_total)?;
    let frag = be16([f0, f1]);
    Ok(Ipv4Packet {
        vlan,
        src_ip: [s0, s1, s2, s3],
        dst_ip: [d0, d1, d2, d3],
        protocol,
        id: be16([i0, i1]),
        frag_offset: (frag & 0x1fff) * 8,
        more_fragments: frag & 0x2000 != 0,
        payload,
    })
}

/// Parses an unfragmented UDP-over-IPv4 frame starting at its Ethernet header.
///
/// Uses the IPv4 total length (dropping Ethernet padding) and the UDP length field
/// (which must fit in the IPv4 payload). The UDP checksum is not verified.
///
/// # Errors
/// Everything [`parse_ipv4`] returns, then [`NetError::Fragment`] for any fragment,
/// [`NetError::NotUdp`], [`NetError::Truncated`] in the UDP header,
/// [`NetError::BadUdpLength`].
pub fn parse_udp_ipv4(frame: &[u8]) -> Result<UdpDatagram<'_>, NetError> {
    let ip = parse_ipv4(frame)?;
    if ip.is_fragment() {
        return Err(NetError::Fragment);
    }
    if ip.protocol != IPPROTO_UDP {
        return Err(NetError::NotUdp(ip.protocol));
    }
    let (h, _) = take::<UDP_HEADER_LEN>(ip.payload, Layer::Udp)?;
    let [sp0, sp1, dp0, dp1, l0, l1, _c0, _c1] = *h;
    let len = be16([l0, l1]);
    let bad = NetError::BadUdpLength {
        len,
        available: ip.payload.len(),
    };
    let payload = ip
        .payload
        .get(..len as usize)
        .and_then(|d| d.get(UDP_HEADER_LEN..))
        .ok_or(bad)?;
    Ok(UdpDatagram {
        src_ip: ip.src_ip,
        dst_ip: ip.dst_ip,
        src_port: be16([sp0, sp1]),
        dst_port: be16([dp0, dp1]),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10.0.0.1:7502 -> 10.0.0.2:7503, payload "hello", untagged, IHL 5, with 2 bytes of
    /// trailing Ethernet padding.
    #[rustfmt::skip]
    const PLAIN: &[u8] = &[
        // Ethernet: dst, src, type
        0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,
        // IPv4: v4 ihl5, tos, total 33, id 0x1234, DF, ttl 64, UDP, csum, src, dst
        0x45, 0, 0, 33, 0x12, 0x34, 0x40, 0x00, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        // UDP: 7502 -> 7503, len 13, csum
        0x1d, 0x4e, 0x1d, 0x4f, 0, 13, 0, 0,
        b'h', b'e', b'l', b'l', b'o',
        // padding
        0xee, 0xee,
    ];

    #[test]
    fn plain_udp() {
        let d = parse_udp_ipv4(PLAIN).unwrap();
        assert_eq!(
            d,
            UdpDatagram {
                src_ip: [10, 0, 0, 1],
                dst_ip: [10, 0, 0, 2],
                src_port: 7502,
                dst_port: 7503,
                payload: b"hello",
            }
        );
        let ip = parse_ipv4(PLAIN).unwrap();
        assert_eq!(ip.vlan, None);
        assert_eq!(ip.id, 0x1234);
        assert!(!ip.is_fragment(), "DF alone is not a fragment");
        assert_eq!(ip.payload.len(), 13);
    }

    #[test]
    fn vlan_tagged_udp() {
        let mut f = PLAIN[..12].to_vec();
        f.extend_from_slice(&[0x81, 0x00, 0x20, 0x64]); // TPID, PCP 1, VID 100
        f.extend_from_slice(&PLAIN[12..]);
        let d = parse_udp_ipv4(&f).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.dst_port, 7503);
        assert_eq!(parse_ipv4(&f).unwrap().vlan, Some(100));
        // The same with an 802.1ad service tag, which the XDP program also steers.
        f[12..14].copy_from_slice(&[0x88, 0xA8]);
        let d = parse_udp_ipv4(&f).unwrap();
        assert_eq!((d.payload, d.dst_port), (&b"hello"[..], 7503));
        assert_eq!(parse_ipv4(&f).unwrap().vlan, Some(100));
    }

    #[test]
    fn ihl6_with_options() {
        #[rustfmt::skip]
        let f: &[u8] = &[
            0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,
            // IHL 6, total 20 + 4 + 8 + 3 = 35
            0x46, 0, 0, 35, 0, 1, 0, 0, 64, 17, 0, 0, 192, 168, 1, 201, 192, 168, 1, 100,
            // option: 4 bytes (NOP NOP NOP EOL)
            1, 1, 1, 0,
            0x09, 0x40, 0x09, 0x41, 0, 11, 0, 0,
            1, 2, 3,
        ];
        let d = parse_udp_ipv4(f).unwrap();
        assert_eq!(d.src_ip, [192, 168, 1, 201]);
        assert_eq!(d.dst_ip, [192, 168, 1, 100]);
        assert_eq!((d.src_port, d.dst_port), (2368, 2369));
        assert_eq!(d.payload, &[1, 2, 3]);
    }

    #[test]
    fn truncated_at_each_layer() {
        assert_eq!(
            parse_udp_ipv4(&PLAIN[..13]),
            Err(NetError::Truncated {
                layer: Layer::Ethernet,
                need: 14,
                have: 13
            })
        );
        let mut tagged = PLAIN[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64, 0x08]); // TPID + 3 of 4 tag bytes
        assert_eq!(
            parse_udp_ipv4(&tagged),
            Err(NetError::Truncated {
                layer: Layer::Vlan,
                need: 4,
                have: 3
            })
        );
        assert_eq!(
            parse_udp_ipv4(&PLAIN[..14 + 19]),
            Err(NetError::Truncated {
                layer: Layer::Ipv4,
                need: 20,
                have: 19
            })
        );
        // IHL 15 (60-byte header) in a 47-byte IP part.
        let mut big_ihl = PLAIN.to_vec();
        big_ihl[14] = 0x4f;
        assert_eq!(
            parse_udp_ipv4(&big_ihl),
            Err(NetError::Truncated {
                layer: Layer::Ipv4,
                need: 60,
                have: 35
            })
        );
        // Total length says 33 but the frame ends after 30 IP bytes.
        assert_eq!(
            parse_udp_ipv4(&PLAIN[..14 + 30]),
            Err(NetError::BadTotalLength {
                total: 33,
                header_len: 20,
                available: 30
            })
        );
        // IPv4 claims only 5 payload bytes: UDP header cut.
        let mut short = PLAIN.to_vec();
        short[17] = 25;
        assert_eq!(
            parse_udp_ipv4(&short),
            Err(NetError::Truncated {
                layer: Layer::Udp,
                need: 8,
                have: 5
            })
        );
    }

    #[test]
    fn bad_lengths_and_types() {
        let mut f = PLAIN.to_vec();
        f[17] = 19; // total < header
        assert!(matches!(
            parse_udp_ipv4(&f),
            Err(NetError::BadTotalLength { total: 19, .. })
        ));

        let mut f = PLAIN.to_vec();
        f[14 + 20 + 5] = 14; // UDP length 14 > 13 payload bytes
        assert_eq!(
            parse_udp_ipv4(&f),
            Err(NetError::BadUdpLength {
                len: 14,
                available: 13
            })
        );
        f[14 + 20 + 5] = 7; // < 8
        assert!(matches!(
            parse_udp_ipv4(&f),
            Err(NetError::BadUdpLength { len: 7, .. })
        ));

        let mut f = PLAIN.to_vec();
        f[12] = 0x86;
        f[13] = 0xdd;
        assert_eq!(parse_udp_ipv4(&f), Err(NetError::NotIpv4(0x86dd)));

        let mut f = PLAIN.to_vec();
        f[14] = 0x65;
        assert_eq!(parse_udp_ipv4(&f), Err(NetError::BadVersion(6)));

        let mut f = PLAIN.to_vec();
        f[14] = 0x44;
        assert_eq!(parse_udp_ipv4(&f), Err(NetError::BadIhl(4)));

        let mut f = PLAIN.to_vec();
        f[14 + 9] = 6;
        assert_eq!(parse_udp_ipv4(&f), Err(NetError::NotUdp(6)));
    }

    #[test]
    fn fragments_are_a_distinct_error() {
        // First fragment: MF set, offset 0.
        let mut first = PLAIN.to_vec();
        first[20] = 0x20;
        first[21] = 0x00;
        assert_eq!(parse_udp_ipv4(&first), Err(NetError::Fragment));
        let ip = parse_ipv4(&first).unwrap();
        assert_eq!(
            (ip.id, ip.frag_offset, ip.more_fragments),
            (0x1234, 0, true)
        );
        // Last fragment: MF clear, offset 185 * 8 = 1480.
        let mut last = PLAIN.to_vec();
        last[20] = 0x00;
        last[21] = 185;
        assert_eq!(parse_udp_ipv4(&last), Err(NetError::Fragment));
        let ip = parse_ipv4(&last).unwrap();
        assert_eq!(
            (ip.id, ip.frag_offset, ip.more_fragments),
            (0x1234, 1480, false)
        );
        assert!(ip.is_fragment());
        assert_eq!(ip.payload.len(), 13);
    }

    #[test]
    fn never_panics_on_any_prefix_or_garbage() {
        for n in 0..=PLAIN.len() {
            let _ = parse_udp_ipv4(&PLAIN[..n]);
        }
        let mut x = 0x1234_5678u32;
        let mut buf = [0u8; 64];
        for _ in 0..20_000 {
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            buf[12] = 0x08;
            buf[13] = 0x00;
            buf[14] = 0x40 | (buf[14] & 0x0f);
            let n = (x as usize) % buf.len();
            let _ = parse_udp_ipv4(&buf[..n]);
        }
    }
}
