//! Sans-IO parsing of received and captured frames: link layer (Ethernet II with up to two
//! 802.1Q / 802.1ad tags, Linux cooked capture SLL and SLL2, raw IPv4), IPv4, UDP.
//!
//! This is the one parser of the project: the capture thread, the offline reader
//! (`lidarxdp::offline`, behind `decode` and `replay`) and the reassembler
//! ([`crate::reassembly::Reassembled::udp`]) all go through it.
//!
//! smoltcp `wire` style: every length is checked once while parsing, the result holds plain
//! values and sub-slices, and nothing afterwards can panic. No indexing is used at all: each
//! header is taken with `split_first_chunk`, which returns `None` instead of panicking.
//!
//! References: IEEE 802.3 / 802.1Q (Ethernet II, TPID 0x8100; 802.1ad TPID 0x88A8), RFC 791
//! (IPv4), RFC 768 (UDP), tcpdump.org link-layer header types (`LINKTYPE_LINUX_SLL` 113,
//! `LINKTYPE_LINUX_SLL2` 276, `LINKTYPE_RAW` 101, `LINKTYPE_IPV4` 228). IPv4 fragments are
//! reported as [`NetError::Fragment`] so the caller can hand them to reassembly (see
//! [`parse_ipv4`]); the header checksum is not verified.
//!
//! Live frames are parsed with [`TotalLength::Strict`]. Captures use
//! [`TotalLength::CutAtCapture`]: a record may end before the IPv4 total length (a snap length,
//! or a sensor whose position packets claim 1234 bytes of IPv4 in 540, as in
//! `vlp16_strongest_prodid0x21_with_position_pkts.pcap`); the payload is then cut at the
//! record's end and the decoder sees (and counts) the short payload.
#![forbid(unsafe_code)]

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType (TPID) of an IEEE 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType (TPID) of an IEEE 802.1ad service tag (outer tag of Q-in-Q), accepted like 0x8100.
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
/// EtherType of IPv6 (reported for an IPv6 packet on a raw-IP link).
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Most VLAN tags accepted in a row (802.1ad outer + 802.1Q inner).
pub const MAX_VLAN_TAGS: usize = 2;
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
/// Linux cooked capture v1 header length (`LINKTYPE_LINUX_SLL`): protocol at bytes 14..16.
pub const SLL_HEADER_LEN: usize = 16;
/// Linux cooked capture v2 header length (`LINKTYPE_LINUX_SLL2`): protocol at bytes 0..2.
pub const SLL2_HEADER_LEN: usize = 20;

/// Link-layer framing of a frame, from a capture's link type (live frames are Ethernet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II (`LINKTYPE_ETHERNET` 1), with up to [`MAX_VLAN_TAGS`] 802.1Q/802.1ad tags.
    Ethernet,
    /// Linux cooked capture v1 (`LINKTYPE_LINUX_SLL` 113, `tcpdump -i any`): 16-byte header.
    LinuxSll,
    /// Linux cooked capture v2 (`LINKTYPE_LINUX_SLL2` 276): 20-byte header.
    LinuxSll2,
    /// Raw IP (`LINKTYPE_RAW` 101 / `DLT_RAW`): the record starts with an IPv4 or IPv6 header.
    RawIp,
    /// Raw IPv4 (`LINKTYPE_IPV4` 228): the record starts with an IPv4 header.
    Ipv4,
}

/// What an IPv4 total length larger than the frame means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TotalLength {
    /// An error ([`NetError::BadTotalLength`]): live frames are whole.
    #[default]
    Strict,
    /// The capture cut the packet: the IPv4 payload ends with the record
    /// ([`Ipv4Packet::cut`]); a UDP length beyond it cuts the UDP payload there too.
    CutAtCapture,
}

/// The header a length check failed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// 802.1Q tag.
    Vlan,
    /// Linux cooked capture (SLL or SLL2) header.
    LinuxCooked,
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
    /// EtherType (after any VLAN tag, or the cooked header's protocol) is not IPv4; an IPv6
    /// packet on a raw-IP link reports [`ETHERTYPE_IPV6`].
    #[error("EtherType {0:#06x} is not IPv4")]
    NotIpv4(u16),
    /// More than [`MAX_VLAN_TAGS`] VLAN tags in a row.
    #[error("more than {MAX_VLAN_TAGS} VLAN tags")]
    TooManyVlanTags,
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
    /// IPv4 payload: `total_length - ihl*4` bytes (Ethernet padding removed), or everything
    /// after the header when [`Ipv4Packet::cut`].
    pub payload: &'a [u8],
    /// The frame ended before the IPv4 total length (only with [`TotalLength::CutAtCapture`]):
    /// `payload` is what the capture kept.
    pub cut: bool,
}

impl Ipv4Packet<'_> {
    /// This packet is a fragment (MF set or non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments || self.frag_offset != 0
    }
}

/// An unfragmented (or reassembled) UDP datagram over IPv4.
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
    /// UDP payload: `udp_length - 8` bytes (fewer when the capture cut the packet, see
    /// [`TotalLength::CutAtCapture`]).
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

/// Parses Ethernet II (+ up to two 802.1Q / 802.1ad tags) and an IPv4 header, fragments
/// included, strictly ([`TotalLength::Strict`]). The live path's parser.
///
/// # Errors
/// [`NetError::Truncated`], [`NetError::NotIpv4`], [`NetError::TooManyVlanTags`],
/// [`NetError::BadVersion`], [`NetError::BadIhl`], [`NetError::BadTotalLength`].
pub fn parse_ipv4(frame: &[u8]) -> Result<Ipv4Packet<'_>, NetError> {
    parse_ipv4_link(frame, LinkType::Ethernet, TotalLength::Strict)
}

/// The IPv4 bytes of a frame of link type `link`, and the outer VLAN ID if tagged.
fn link_payload(frame: &[u8], link: LinkType) -> Result<(&[u8], Option<u16>), NetError> {
    match link {
        LinkType::Ethernet => {
            let (eth, rest) = take::<ETH_HEADER_LEN>(frame, Layer::Ethernet)?;
            let [.., t0, t1] = *eth;
            let mut ethertype = be16([t0, t1]);
            let mut rest = rest;
            let mut vlan = None;
            let mut tags = 0;
            while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
                if tags == MAX_VLAN_TAGS {
                    return Err(NetError::TooManyVlanTags);
                }
                let (tag, r) = take::<VLAN_TAG_LEN>(rest, Layer::Vlan)?;
                let [c0, c1, e0, e1] = *tag;
                vlan = vlan.or(Some(be16([c0, c1]) & 0x0fff));
                ethertype = be16([e0, e1]);
                rest = r;
                tags += 1;
            }
            if ethertype != ETHERTYPE_IPV4 {
                return Err(NetError::NotIpv4(ethertype));
            }
            Ok((rest, vlan))
        }
        LinkType::LinuxSll => {
            let (h, rest) = take::<SLL_HEADER_LEN>(frame, Layer::LinuxCooked)?;
            let [.., p0, p1] = *h;
            match be16([p0, p1]) {
                ETHERTYPE_IPV4 => Ok((rest, None)),
                other => Err(NetError::NotIpv4(other)),
            }
        }
        LinkType::LinuxSll2 => {
            let (h, rest) = take::<SLL2_HEADER_LEN>(frame, Layer::LinuxCooked)?;
            let [p0, p1, ..] = *h;
            match be16([p0, p1]) {
                ETHERTYPE_IPV4 => Ok((rest, None)),
                other => Err(NetError::NotIpv4(other)),
            }
        }
        LinkType::RawIp => match frame.first().map(|b| b >> 4) {
            Some(6) => Err(NetError::NotIpv4(ETHERTYPE_IPV6)),
            _ => Ok((frame, None)),
        },
        LinkType::Ipv4 => Ok((frame, None)),
    }
}

/// Parses the link layer `link` and an IPv4 header, fragments included. With
/// [`TotalLength::CutAtCapture`], a total length beyond the frame is accepted and the payload
/// cut at the frame's end ([`Ipv4Packet::cut`]).
///
/// # Errors
/// As [`parse_ipv4`].
pub fn parse_ipv4_link(
    frame: &[u8],
    link: LinkType,
    policy: TotalLength,
) -> Result<Ipv4Packet<'_>, NetError> {
    let (ip, vlan) = link_payload(frame, link)?;
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
    if (total as usize) < header_len {
        return Err(bad_total);
    }
    let cut = policy == TotalLength::CutAtCapture && total as usize > ip.len();
    let packet = if cut {
        ip
    } else {
        ip.get(..total as usize).ok_or(bad_total)?
    };
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
        cut,
    })
}

/// Parses an unfragmented UDP-over-IPv4 frame starting at its Ethernet header, strictly
/// ([`TotalLength::Strict`]): the live path's parser.
///
/// Uses the IPv4 total length (dropping Ethernet padding) and the UDP length field
/// (which must fit in the IPv4 payload). The UDP checksum is not verified.
///
/// # Errors
/// Everything [`parse_ipv4`] returns, then [`NetError::Fragment`] for any fragment,
/// [`NetError::NotUdp`], [`NetError::Truncated`] in the UDP header,
/// [`NetError::BadUdpLength`].
pub fn parse_udp_ipv4(frame: &[u8]) -> Result<UdpDatagram<'_>, NetError> {
    parse_udp_link(frame, LinkType::Ethernet, TotalLength::Strict)
}

/// [`parse_udp_ipv4`] for any link type and total-length policy.
///
/// # Errors
/// As [`parse_udp_ipv4`].
pub fn parse_udp_link(
    frame: &[u8],
    link: LinkType,
    policy: TotalLength,
) -> Result<UdpDatagram<'_>, NetError> {
    udp_of_ipv4(&parse_ipv4_link(frame, link, policy)?)
}

/// The UDP datagram in an unfragmented IPv4 packet.
///
/// # Errors
/// [`NetError::Fragment`] for any fragment, then as [`parse_udp`].
pub fn udp_of_ipv4<'a>(ip: &Ipv4Packet<'a>) -> Result<UdpDatagram<'a>, NetError> {
    if ip.is_fragment() {
        return Err(NetError::Fragment);
    }
    parse_udp(ip.src_ip, ip.dst_ip, ip.protocol, ip.payload, ip.cut)
}

/// Parses the UDP header at the start of a whole IPv4 payload (RFC 768): ports, and the UDP
/// length field, which must be at least 8 and fit in `ip_payload` unless `cut` (the capture
/// ended early: the UDP payload then ends with `ip_payload`). The checksum is not verified.
///
/// # Errors
/// [`NetError::NotUdp`] when `protocol` is not 17, [`NetError::Truncated`] in the UDP header,
/// [`NetError::BadUdpLength`].
pub fn parse_udp(
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    protocol: u8,
    ip_payload: &[u8],
    cut: bool,
) -> Result<UdpDatagram<'_>, NetError> {
    if protocol != IPPROTO_UDP {
        return Err(NetError::NotUdp(protocol));
    }
    let (h, _) = take::<UDP_HEADER_LEN>(ip_payload, Layer::Udp)?;
    let [sp0, sp1, dp0, dp1, l0, l1, _c0, _c1] = *h;
    let len = be16([l0, l1]);
    let bad = NetError::BadUdpLength {
        len,
        available: ip_payload.len(),
    };
    if (len as usize) < UDP_HEADER_LEN {
        return Err(bad);
    }
    let end = if cut {
        (len as usize).min(ip_payload.len())
    } else {
        len as usize
    };
    let payload = ip_payload
        .get(..end)
        .and_then(|d| d.get(UDP_HEADER_LEN..))
        .ok_or(bad)?;
    Ok(UdpDatagram {
        src_ip,
        dst_ip,
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
    fn linux_cooked_raw_ip_and_qinq_links() {
        let ip = &PLAIN[14..];
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(ip);
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        sll2.extend_from_slice(ip);
        let want = parse_udp_ipv4(PLAIN).unwrap();
        for (link, f) in [
            (LinkType::LinuxSll, &sll[..]),
            (LinkType::LinuxSll2, &sll2[..]),
            (LinkType::RawIp, ip),
            (LinkType::Ipv4, ip),
        ] {
            assert_eq!(
                parse_udp_link(f, link, TotalLength::Strict),
                Ok(want),
                "{link:?}"
            );
        }
        assert_eq!(
            parse_udp_link(&sll[..15], LinkType::LinuxSll, TotalLength::Strict),
            Err(NetError::Truncated {
                layer: Layer::LinuxCooked,
                need: 16,
                have: 15
            })
        );
        sll[14..16].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(
            parse_ipv4_link(&sll, LinkType::LinuxSll, TotalLength::Strict),
            Err(NetError::NotIpv4(0x86dd))
        );
        sll2[0..2].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            parse_ipv4_link(&sll2, LinkType::LinuxSll2, TotalLength::Strict),
            Err(NetError::NotIpv4(0x0806))
        );
        let v6 = [0x60u8; 40];
        assert_eq!(
            parse_ipv4_link(&v6, LinkType::RawIp, TotalLength::Strict),
            Err(NetError::NotIpv4(ETHERTYPE_IPV6))
        );
        assert_eq!(
            parse_ipv4_link(&v6, LinkType::Ipv4, TotalLength::Strict),
            Err(NetError::BadVersion(6))
        );
        // 802.1ad outer + 802.1Q inner: the outer VID is reported; a third tag is refused.
        let mut qinq = PLAIN[..12].to_vec();
        qinq.extend_from_slice(&[0x88, 0xA8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x64]);
        qinq.extend_from_slice(&PLAIN[12..]);
        assert_eq!(parse_udp_ipv4(&qinq), Ok(want));
        assert_eq!(parse_ipv4(&qinq).unwrap().vlan, Some(7));
        let mut three = PLAIN[..12].to_vec();
        for _ in 0..3 {
            three.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        three.extend_from_slice(&PLAIN[12..]);
        assert_eq!(parse_udp_ipv4(&three), Err(NetError::TooManyVlanTags));
    }

    #[test]
    fn cut_at_capture_keeps_what_the_record_holds() {
        // IPv4 claims 1234 bytes and UDP 1214; the record holds 33 + 2 bytes of padding.
        let mut f = PLAIN.to_vec();
        f[16..18].copy_from_slice(&1234u16.to_be_bytes());
        f[38..40].copy_from_slice(&1214u16.to_be_bytes());
        assert!(matches!(
            parse_udp_ipv4(&f),
            Err(NetError::BadTotalLength { total: 1234, .. })
        ));
        let ip = parse_ipv4_link(&f, LinkType::Ethernet, TotalLength::CutAtCapture).unwrap();
        assert!(ip.cut);
        assert_eq!(ip.payload.len(), 8 + 5 + 2);
        let d = udp_of_ipv4(&ip).unwrap();
        assert_eq!(d.payload, b"hello\xee\xee");
        // A whole packet is not cut, and its padding is still trimmed.
        let ip = parse_ipv4_link(PLAIN, LinkType::Ethernet, TotalLength::CutAtCapture).unwrap();
        assert!(!ip.cut);
        assert_eq!(udp_of_ipv4(&ip).unwrap().payload, b"hello");
        // A UDP length beyond an uncut IPv4 payload stays an error.
        let mut f = PLAIN.to_vec();
        f[38..40].copy_from_slice(&14u16.to_be_bytes());
        assert_eq!(
            parse_udp_link(&f, LinkType::Ethernet, TotalLength::CutAtCapture),
            Err(NetError::BadUdpLength {
                len: 14,
                available: 13
            })
        );
        // The total length below the header is an error in both modes.
        let mut f = PLAIN.to_vec();
        f[17] = 19;
        assert!(matches!(
            parse_ipv4_link(&f, LinkType::Ethernet, TotalLength::CutAtCapture),
            Err(NetError::BadTotalLength { total: 19, .. })
        ));
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
