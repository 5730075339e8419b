//! Sans-IO parsing of received and captured frames: link layer (Ethernet II with up to two
//! 802.1Q / 802.1ad tags, Linux cooked capture SLL and SLL2, raw IP), IPv4, IPv6 with its
//! extension headers, UDP.
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
//! (IPv4), RFC 8200 (IPv6, its extension headers and fragmentation), RFC 7112 (the first
//! fragment holds the whole header chain), RFC 6946 (atomic fragments), RFC 768 (UDP),
//! tcpdump.org link-layer header types (`LINKTYPE_LINUX_SLL` 113, `LINKTYPE_LINUX_SLL2` 276,
//! `LINKTYPE_RAW` 101, `LINKTYPE_IPV4` 228, `LINKTYPE_IPV6` 229). Fragments of either family
//! are reported as [`NetError::Fragment`] so the caller can hand them to reassembly (see
//! [`parse_ip`]); the IPv4 header checksum is not verified.
//!
//! # IPv6 (RFC 8200)
//! The fixed 40-byte header is followed by a chain of extension headers, each naming the next
//! ([`walk_ipv6_chain`]). Walked: hop-by-hop options (0, only directly after the fixed header,
//! §4.3), routing (43), destination options (60), each `(hdr_ext_len + 1) * 8` bytes, and the
//! 8-byte fragment header (44, at most one, §4.5). Any other next header is the upper layer
//! (17 = UDP; 59 "no next header", ESP, TCP, ICMPv6... are "not UDP"). At most
//! [`MAX_IPV6_EXT_HEADERS`] extension headers are walked; more is
//! [`NetError::TooManyExtHeaders`]. A fragment header with offset 0 and M clear is an atomic
//! fragment (RFC 6946): the packet is whole and is parsed on past it, never reassembled. Any
//! other fragment stops the walk: its payload is the fragmentable part, starting with the
//! header the fragment header names; a first fragment (offset 0) must hold the rest of the
//! chain up to and including the UDP header (RFC 7112), otherwise it is
//! [`NetError::Truncated`] in [`Layer::Ipv6Ext`] or [`Layer::Udp`]. A payload length of 0
//! (a jumbogram, RFC 2675) is refused as [`NetError::BadPayloadLength`].
//!
//! # UDP checksum
//! Not verified, for either family (the link's CRC covers the frame and every decoder checks
//! its packets' own layout); in particular a zero UDP checksum over IPv6, which RFC 8200 §8.1
//! forbids a sender to emit, is accepted as it is over IPv4.
//!
//! Live frames are parsed with [`TotalLength::Strict`]. Captures use
//! [`TotalLength::CutAtCapture`]: a record may end before the IPv4 total length or the IPv6
//! payload length (a snap length, or a sensor whose position packets claim 1234 bytes of IPv4
//! in 540, as in `vlp16_strongest_prodid0x21_with_position_pkts.pcap`); the payload is then cut
//! at the record's end and the decoder sees (and counts) the short payload.
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType (TPID) of an IEEE 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType (TPID) of an IEEE 802.1ad service tag (outer tag of Q-in-Q), accepted like 0x8100.
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Most VLAN tags accepted in a row (802.1ad outer + 802.1Q inner).
pub const MAX_VLAN_TAGS: usize = 2;
/// IP protocol number (IPv6: next header) of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IPv6 next header: hop-by-hop options (RFC 8200 §4.3).
pub const IPPROTO_HOPOPTS: u8 = 0;
/// IPv6 next header: routing header (RFC 8200 §4.4).
pub const IPPROTO_ROUTING: u8 = 43;
/// IPv6 next header: fragment header (RFC 8200 §4.5).
pub const IPPROTO_FRAGMENT: u8 = 44;
/// IPv6 next header: destination options (RFC 8200 §4.6).
pub const IPPROTO_DSTOPTS: u8 = 60;
/// Most IPv6 extension headers walked in one packet (RFC 8200 §4.1 recommends each at most
/// once, destination options at most twice: 5; 8 leaves room for repeats).
pub const MAX_IPV6_EXT_HEADERS: usize = 8;

/// Ethernet II header length in bytes (no tag).
pub const ETH_HEADER_LEN: usize = 14;
/// 802.1Q tag length in bytes.
pub const VLAN_TAG_LEN: usize = 4;
/// Minimum (IHL 5) IPv4 header length in bytes.
pub const IPV4_MIN_HEADER_LEN: usize = 20;
/// IPv6 fixed header length in bytes (RFC 8200 §3).
pub const IPV6_HEADER_LEN: usize = 40;
/// IPv6 fragment header length in bytes (RFC 8200 §4.5).
pub const IPV6_FRAGMENT_HEADER_LEN: usize = 8;
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
    /// Raw IP (`LINKTYPE_RAW` 101 / `DLT_RAW`): the record starts with an IPv4 or IPv6 header
    /// (told apart by the version nibble).
    RawIp,
    /// Raw IPv4 (`LINKTYPE_IPV4` 228): the record starts with an IPv4 header.
    Ipv4,
    /// Raw IPv6 (`LINKTYPE_IPV6` 229): the record starts with an IPv6 header.
    Ipv6,
}

/// What an IPv4 total length (IPv6: 40 + payload length) larger than the frame means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TotalLength {
    /// An error ([`NetError::BadTotalLength`], [`NetError::BadPayloadLength`]): live frames
    /// are whole.
    #[default]
    Strict,
    /// The capture cut the packet: the IP payload ends with the record ([`IpPacket::cut`]); a
    /// UDP length beyond it cuts the UDP payload there too.
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
    /// IPv6 fixed header (40 bytes).
    Ipv6,
    /// An IPv6 extension header (its first 2 bytes, or its whole `(hdr_ext_len + 1) * 8`
    /// bytes; the fragment header's 8).
    Ipv6Ext,
    /// UDP header.
    Udp,
}

/// Why a frame is not a complete, unfragmented UDP datagram over IPv4 or IPv6.
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
    /// EtherType (after any VLAN tag, or the cooked header's protocol) is neither IPv4
    /// (0x0800) nor IPv6 (0x86DD).
    #[error("EtherType {0:#06x} is neither IPv4 nor IPv6")]
    NotIp(u16),
    /// More than [`MAX_VLAN_TAGS`] VLAN tags in a row.
    #[error("more than {MAX_VLAN_TAGS} VLAN tags")]
    TooManyVlanTags,
    /// The version nibble is not the one the EtherType or link type announced (4 or 6), or
    /// neither on a raw-IP link.
    #[error("IP version {0} does not match the link (4 for IPv4, 6 for IPv6)")]
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
    /// IPv6 payload length is 0 (a jumbogram, RFC 2675, not supported) or longer than the
    /// frame after the 40-byte header (an extension header beyond it is
    /// [`NetError::Truncated`] in [`Layer::Ipv6Ext`]).
    #[error("IPv6 payload length {len} invalid: {available} bytes after the fixed header")]
    BadPayloadLength {
        /// The payload length field, bytes.
        len: u16,
        /// Bytes in the frame after the fixed IPv6 header.
        available: usize,
    },
    /// More than [`MAX_IPV6_EXT_HEADERS`] IPv6 extension headers.
    #[error("more than {MAX_IPV6_EXT_HEADERS} IPv6 extension headers")]
    TooManyExtHeaders,
    /// An IPv6 extension header where RFC 8200 §4.1 forbids it: hop-by-hop options (0) not
    /// directly after the fixed header, or a second fragment header (44).
    #[error("IPv6 extension header {0} out of place")]
    BadExtHeader(u8),
    /// Not UDP.
    #[error("IP protocol {0} is not UDP")]
    NotUdp(u8),
    /// A fragment (IPv4: MF set or offset non-zero; IPv6: a fragment header that is not
    /// atomic): needs reassembly first. Its id, offset and payload are available from
    /// [`parse_ip`].
    #[error("IP fragment: needs reassembly")]
    Fragment,
    /// UDP length field shorter than the header or longer than the IP payload.
    #[error("UDP length {len} invalid for an IP payload of {available} bytes")]
    BadUdpLength {
        /// The UDP length field, bytes.
        len: u16,
        /// IP payload bytes.
        available: usize,
    },
}

/// A parsed IPv4 or IPv6 packet, fragment or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPacket<'a> {
    /// 802.1Q VLAN ID (12 bits) if the frame was tagged.
    pub vlan: Option<u16>,
    /// Source address.
    pub src_ip: IpAddr,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// IPv4: the protocol field. IPv6: the upper-layer next header after the extension
    /// headers, or for a fragment the fragment header's next header (17 = UDP).
    pub protocol: u8,
    /// Identification: IPv4's 16-bit field, IPv6's fragment header's 32-bit one (0 without a
    /// fragment header). Fragments of one datagram share it.
    pub id: u32,
    /// Fragment offset in bytes.
    pub frag_offset: u16,
    /// More-fragments flag (IPv4 MF, IPv6 M).
    pub more_fragments: bool,
    /// IP payload. IPv4: `total_length - ihl*4` bytes (Ethernet padding removed). IPv6: the
    /// bytes after the extension headers, up to `40 + payload_length`; for a fragment, the
    /// bytes after the fragment header (the fragment's share of the fragmentable part). When
    /// [`IpPacket::cut`], everything the frame holds from there on.
    pub payload: &'a [u8],
    /// The frame ended before the IP length (only with [`TotalLength::CutAtCapture`]):
    /// `payload` is what the capture kept.
    pub cut: bool,
}

impl IpPacket<'_> {
    /// This packet is a fragment (MF/M set or non-zero offset; an IPv6 atomic fragment is
    /// not, RFC 6946).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments || self.frag_offset != 0
    }
}

/// An unfragmented (or reassembled) UDP datagram over IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// IP source address.
    pub src_ip: IpAddr,
    /// IP destination address.
    pub dst_ip: IpAddr,
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

/// Parses Ethernet II (+ up to two 802.1Q / 802.1ad tags) and an IPv4 or IPv6 header (with
/// IPv6's extension headers), fragments included, strictly ([`TotalLength::Strict`]). The
/// live path's parser.
///
/// # Errors
/// [`NetError::Truncated`], [`NetError::NotIp`], [`NetError::TooManyVlanTags`],
/// [`NetError::BadVersion`], [`NetError::BadIhl`], [`NetError::BadTotalLength`],
/// [`NetError::BadPayloadLength`], [`NetError::TooManyExtHeaders`],
/// [`NetError::BadExtHeader`].
pub fn parse_ip(frame: &[u8]) -> Result<IpPacket<'_>, NetError> {
    parse_ip_link(frame, LinkType::Ethernet, TotalLength::Strict)
}

/// The IP bytes of a frame of link type `link`, the IP version its link layer announces (4 or
/// 6), and the outer VLAN ID if tagged.
fn link_payload(frame: &[u8], link: LinkType) -> Result<(&[u8], u8, Option<u16>), NetError> {
    let version = |ethertype: u16| match ethertype {
        ETHERTYPE_IPV4 => Ok(4),
        ETHERTYPE_IPV6 => Ok(6),
        other => Err(NetError::NotIp(other)),
    };
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
            Ok((rest, version(ethertype)?, vlan))
        }
        LinkType::LinuxSll => {
            let (h, rest) = take::<SLL_HEADER_LEN>(frame, Layer::LinuxCooked)?;
            let [.., p0, p1] = *h;
            Ok((rest, version(be16([p0, p1]))?, None))
        }
        LinkType::LinuxSll2 => {
            let (h, rest) = take::<SLL2_HEADER_LEN>(frame, Layer::LinuxCooked)?;
            let [p0, p1, ..] = *h;
            Ok((rest, version(be16([p0, p1]))?, None))
        }
        LinkType::RawIp => match frame.first().map(|b| b >> 4) {
            Some(6) => Ok((frame, 6, None)),
            _ => Ok((frame, 4, None)),
        },
        LinkType::Ipv4 => Ok((frame, 4, None)),
        LinkType::Ipv6 => Ok((frame, 6, None)),
    }
}

/// Parses the link layer `link` and an IPv4 or IPv6 header, fragments included. With
/// [`TotalLength::CutAtCapture`], a length beyond the frame is accepted and the payload cut
/// at the frame's end ([`IpPacket::cut`]).
///
/// # Errors
/// As [`parse_ip`].
pub fn parse_ip_link(
    frame: &[u8],
    link: LinkType,
    policy: TotalLength,
) -> Result<IpPacket<'_>, NetError> {
    let (ip, version, vlan) = link_payload(frame, link)?;
    match version {
        6 => parse_ipv6(ip, vlan, policy),
        _ => parse_ipv4(ip, vlan, policy),
    }
}

/// The IPv4 header at the start of `ip` (RFC 791).
fn parse_ipv4(ip: &[u8], vlan: Option<u16>, policy: TotalLength) -> Result<IpPacket<'_>, NetError> {
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
    Ok(IpPacket {
        vlan,
        src_ip: IpAddr::V4(Ipv4Addr::new(s0, s1, s2, s3)),
        dst_ip: IpAddr::V4(Ipv4Addr::new(d0, d1, d2, d3)),
        protocol,
        id: u32::from(be16([i0, i1])),
        frag_offset: (frag & 0x1fff) * 8,
        more_fragments: frag & 0x2000 != 0,
        payload,
        cut,
    })
}

/// An IPv6 fragment header's fields (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6FragmentHeader {
    /// Next header: the first header of the fragmentable part.
    pub next_header: u8,
    /// Fragment offset in bytes (the 13-bit field × 8).
    pub offset: u16,
    /// M flag: more fragments follow.
    pub more_fragments: bool,
    /// Identification.
    pub id: u32,
}

/// Where [`walk_ipv6_chain`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Chain<'a> {
    /// The upper-layer next header (or, when stopped at a non-atomic fragment header, that
    /// header's next header).
    pub next_header: u8,
    /// The bytes after the last header walked.
    pub rest: &'a [u8],
    /// The fragment header walked, if any (atomic or not).
    pub fragment: Option<Ipv6FragmentHeader>,
    /// The walk stopped at a non-atomic fragment header: `rest` is the fragment's data.
    pub stopped_at_fragment: bool,
}

/// Walks IPv6 extension headers (RFC 8200 §4) starting with header type `next` at the start of
/// `bytes`, up to the upper-layer header or a non-atomic fragment header; see the module docs
/// for the headers walked. `after_fixed_header`: `bytes` follows the fixed header directly, so
/// a hop-by-hop header may come first (false for a reassembled fragmentable part).
///
/// # Errors
/// [`NetError::Truncated`] in [`Layer::Ipv6Ext`], [`NetError::TooManyExtHeaders`] past
/// [`MAX_IPV6_EXT_HEADERS`], [`NetError::BadExtHeader`] for hop-by-hop not first or a second
/// fragment header.
pub fn walk_ipv6_chain(
    mut next: u8,
    mut bytes: &[u8],
    after_fixed_header: bool,
) -> Result<Ipv6Chain<'_>, NetError> {
    let mut fragment = None;
    for i in 0..=MAX_IPV6_EXT_HEADERS {
        match next {
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS | IPPROTO_FRAGMENT
                if i == MAX_IPV6_EXT_HEADERS =>
            {
                return Err(NetError::TooManyExtHeaders);
            }
            IPPROTO_HOPOPTS if !(after_fixed_header && i == 0) => {
                return Err(NetError::BadExtHeader(next));
            }
            IPPROTO_HOPOPTS | IPPROTO_ROUTING | IPPROTO_DSTOPTS => {
                let ([nh, hlen], _) = take::<2>(bytes, Layer::Ipv6Ext).map(|(h, r)| (*h, r))?;
                let len = (usize::from(hlen) + 1) * 8;
                bytes = bytes.get(len..).ok_or(NetError::Truncated {
                    layer: Layer::Ipv6Ext,
                    need: len,
                    have: bytes.len(),
                })?;
                next = nh;
            }
            IPPROTO_FRAGMENT => {
                if fragment.is_some() {
                    return Err(NetError::BadExtHeader(next));
                }
                let (h, rest) = take::<IPV6_FRAGMENT_HEADER_LEN>(bytes, Layer::Ipv6Ext)?;
                let [nh, _reserved, o0, o1, i0, i1, i2, i3] = *h;
                let off = be16([o0, o1]);
                let f = Ipv6FragmentHeader {
                    next_header: nh,
                    offset: off & 0xfff8,
                    more_fragments: off & 1 != 0,
                    id: u32::from_be_bytes([i0, i1, i2, i3]),
                };
                fragment = Some(f);
                bytes = rest;
                next = nh;
                if f.offset != 0 || f.more_fragments {
                    return Ok(Ipv6Chain {
                        next_header: nh,
                        rest,
                        fragment,
                        stopped_at_fragment: true,
                    });
                }
            }
            _ => break,
        }
    }
    Ok(Ipv6Chain {
        next_header: next,
        rest: bytes,
        fragment,
        stopped_at_fragment: false,
    })
}

/// The IPv6 header at the start of `ip` and its extension headers (RFC 8200).
fn parse_ipv6(ip: &[u8], vlan: Option<u16>, policy: TotalLength) -> Result<IpPacket<'_>, NetError> {
    // The version first, so an IPv4 header under IPv6's EtherType says so whatever its length.
    if let Some(v) = ip.first().map(|b| b >> 4)
        && v != 6
    {
        return Err(NetError::BadVersion(v));
    }
    let (h, after) = take::<IPV6_HEADER_LEN>(ip, Layer::Ipv6)?;
    let (fixed, addrs) = h.split_first_chunk::<8>().ok_or(NetError::Truncated {
        layer: Layer::Ipv6,
        need: IPV6_HEADER_LEN,
        have: ip.len(),
    })?;
    let [_, _, _, _, l0, l1, next, _hop] = *fixed;
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    let (s, d) = addrs.split_at(16);
    src.copy_from_slice(s);
    dst.copy_from_slice(d);
    let len = be16([l0, l1]);
    let bad = NetError::BadPayloadLength {
        len,
        available: after.len(),
    };
    if len == 0 {
        return Err(bad);
    }
    let cut = policy == TotalLength::CutAtCapture && usize::from(len) > after.len();
    let body = if cut {
        after
    } else {
        after.get(..usize::from(len)).ok_or(bad)?
    };
    let chain = walk_ipv6_chain(next, body, true)?;
    let (offset, more, id) = chain
        .fragment
        .map_or((0, false, 0), |f| (f.offset, f.more_fragments, f.id));
    if chain.stopped_at_fragment && offset == 0 {
        // RFC 7112: the first fragment holds every header up to and including UDP's.
        let upper = walk_ipv6_chain(chain.next_header, chain.rest, false)?;
        if upper.next_header == IPPROTO_UDP {
            take::<UDP_HEADER_LEN>(upper.rest, Layer::Udp)?;
        }
    }
    Ok(IpPacket {
        vlan,
        src_ip: IpAddr::V6(Ipv6Addr::from(src)),
        dst_ip: IpAddr::V6(Ipv6Addr::from(dst)),
        protocol: chain.next_header,
        id,
        frag_offset: offset,
        more_fragments: more,
        payload: chain.rest,
        cut,
    })
}

/// Parses an unfragmented UDP-over-IP frame starting at its Ethernet header, strictly
/// ([`TotalLength::Strict`]): the live path's parser.
///
/// Uses the IPv4 total length or IPv6 payload length (dropping Ethernet padding) and the UDP
/// length field (which must fit in the IP payload). The UDP checksum is not verified.
///
/// # Errors
/// Everything [`parse_ip`] returns, then [`NetError::Fragment`] for any fragment,
/// [`NetError::NotUdp`], [`NetError::Truncated`] in the UDP header,
/// [`NetError::BadUdpLength`].
pub fn parse_udp_frame(frame: &[u8]) -> Result<UdpDatagram<'_>, NetError> {
    parse_udp_link(frame, LinkType::Ethernet, TotalLength::Strict)
}

/// [`parse_udp_frame`] for any link type and total-length policy.
///
/// # Errors
/// As [`parse_udp_frame`].
pub fn parse_udp_link(
    frame: &[u8],
    link: LinkType,
    policy: TotalLength,
) -> Result<UdpDatagram<'_>, NetError> {
    udp_of_ip(&parse_ip_link(frame, link, policy)?)
}

/// The UDP datagram in an unfragmented IP packet.
///
/// # Errors
/// [`NetError::Fragment`] for any fragment, then as [`parse_udp`].
pub fn udp_of_ip<'a>(ip: &IpPacket<'a>) -> Result<UdpDatagram<'a>, NetError> {
    if ip.is_fragment() {
        return Err(NetError::Fragment);
    }
    parse_udp(ip.src_ip, ip.dst_ip, ip.protocol, ip.payload, ip.cut)
}

/// Parses the UDP header at the start of a whole IP payload (RFC 768): ports, and the UDP
/// length field, which must be at least 8 and fit in `ip_payload` unless `cut` (the capture
/// ended early: the UDP payload then ends with `ip_payload`). The checksum is not verified.
///
/// # Errors
/// [`NetError::NotUdp`] when `protocol` is not 17, [`NetError::Truncated`] in the UDP header,
/// [`NetError::BadUdpLength`].
pub fn parse_udp(
    src_ip: IpAddr,
    dst_ip: IpAddr,
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
        let d = parse_udp_frame(PLAIN).unwrap();
        assert_eq!(
            d,
            UdpDatagram {
                src_ip: IpAddr::from([10, 0, 0, 1]),
                dst_ip: IpAddr::from([10, 0, 0, 2]),
                src_port: 7502,
                dst_port: 7503,
                payload: b"hello",
            }
        );
        let ip = parse_ip(PLAIN).unwrap();
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
        let d = parse_udp_frame(&f).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.dst_port, 7503);
        assert_eq!(parse_ip(&f).unwrap().vlan, Some(100));
        // The same with an 802.1ad service tag, which the XDP program also steers.
        f[12..14].copy_from_slice(&[0x88, 0xA8]);
        let d = parse_udp_frame(&f).unwrap();
        assert_eq!((d.payload, d.dst_port), (&b"hello"[..], 7503));
        assert_eq!(parse_ip(&f).unwrap().vlan, Some(100));
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
        let d = parse_udp_frame(f).unwrap();
        assert_eq!(d.src_ip, IpAddr::from([192, 168, 1, 201]));
        assert_eq!(d.dst_ip, IpAddr::from([192, 168, 1, 100]));
        assert_eq!((d.src_port, d.dst_port), (2368, 2369));
        assert_eq!(d.payload, &[1, 2, 3]);
    }

    #[test]
    fn truncated_at_each_layer() {
        assert_eq!(
            parse_udp_frame(&PLAIN[..13]),
            Err(NetError::Truncated {
                layer: Layer::Ethernet,
                need: 14,
                have: 13
            })
        );
        let mut tagged = PLAIN[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64, 0x08]); // TPID + 3 of 4 tag bytes
        assert_eq!(
            parse_udp_frame(&tagged),
            Err(NetError::Truncated {
                layer: Layer::Vlan,
                need: 4,
                have: 3
            })
        );
        assert_eq!(
            parse_udp_frame(&PLAIN[..14 + 19]),
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
            parse_udp_frame(&big_ihl),
            Err(NetError::Truncated {
                layer: Layer::Ipv4,
                need: 60,
                have: 35
            })
        );
        // Total length says 33 but the frame ends after 30 IP bytes.
        assert_eq!(
            parse_udp_frame(&PLAIN[..14 + 30]),
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
            parse_udp_frame(&short),
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
            parse_udp_frame(&f),
            Err(NetError::BadTotalLength { total: 19, .. })
        ));

        let mut f = PLAIN.to_vec();
        f[14 + 20 + 5] = 14; // UDP length 14 > 13 payload bytes
        assert_eq!(
            parse_udp_frame(&f),
            Err(NetError::BadUdpLength {
                len: 14,
                available: 13
            })
        );
        f[14 + 20 + 5] = 7; // < 8
        assert!(matches!(
            parse_udp_frame(&f),
            Err(NetError::BadUdpLength { len: 7, .. })
        ));

        let mut f = PLAIN.to_vec();
        f[12] = 0x86;
        f[13] = 0xdd;
        // IPv6's EtherType over an IPv4 header: the version nibble disagrees.
        assert_eq!(parse_udp_frame(&f), Err(NetError::BadVersion(4)));
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(parse_udp_frame(&f), Err(NetError::NotIp(0x0806)));

        let mut f = PLAIN.to_vec();
        f[14] = 0x65;
        assert_eq!(parse_udp_frame(&f), Err(NetError::BadVersion(6)));

        let mut f = PLAIN.to_vec();
        f[14] = 0x44;
        assert_eq!(parse_udp_frame(&f), Err(NetError::BadIhl(4)));

        let mut f = PLAIN.to_vec();
        f[14 + 9] = 6;
        assert_eq!(parse_udp_frame(&f), Err(NetError::NotUdp(6)));
    }

    #[test]
    fn fragments_are_a_distinct_error() {
        // First fragment: MF set, offset 0.
        let mut first = PLAIN.to_vec();
        first[20] = 0x20;
        first[21] = 0x00;
        assert_eq!(parse_udp_frame(&first), Err(NetError::Fragment));
        let ip = parse_ip(&first).unwrap();
        assert_eq!(
            (ip.id, ip.frag_offset, ip.more_fragments),
            (0x1234, 0, true)
        );
        // Last fragment: MF clear, offset 185 * 8 = 1480.
        let mut last = PLAIN.to_vec();
        last[20] = 0x00;
        last[21] = 185;
        assert_eq!(parse_udp_frame(&last), Err(NetError::Fragment));
        let ip = parse_ip(&last).unwrap();
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
        let want = parse_udp_frame(PLAIN).unwrap();
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
            parse_ip_link(&sll, LinkType::LinuxSll, TotalLength::Strict),
            Err(NetError::BadVersion(4))
        );
        sll2[0..2].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            parse_ip_link(&sll2, LinkType::LinuxSll2, TotalLength::Strict),
            Err(NetError::NotIp(0x0806))
        );
        let v6 = [0x60u8; 40];
        assert_eq!(
            parse_ip_link(&v6, LinkType::RawIp, TotalLength::Strict),
            Err(NetError::BadPayloadLength {
                len: 0x6060,
                available: 0
            })
        );
        assert_eq!(
            parse_ip_link(&v6, LinkType::Ipv4, TotalLength::Strict),
            Err(NetError::BadVersion(6))
        );
        // 802.1ad outer + 802.1Q inner: the outer VID is reported; a third tag is refused.
        let mut qinq = PLAIN[..12].to_vec();
        qinq.extend_from_slice(&[0x88, 0xA8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x64]);
        qinq.extend_from_slice(&PLAIN[12..]);
        assert_eq!(parse_udp_frame(&qinq), Ok(want));
        assert_eq!(parse_ip(&qinq).unwrap().vlan, Some(7));
        let mut three = PLAIN[..12].to_vec();
        for _ in 0..3 {
            three.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        three.extend_from_slice(&PLAIN[12..]);
        assert_eq!(parse_udp_frame(&three), Err(NetError::TooManyVlanTags));
    }

    #[test]
    fn cut_at_capture_keeps_what_the_record_holds() {
        // IPv4 claims 1234 bytes and UDP 1214; the record holds 33 + 2 bytes of padding.
        let mut f = PLAIN.to_vec();
        f[16..18].copy_from_slice(&1234u16.to_be_bytes());
        f[38..40].copy_from_slice(&1214u16.to_be_bytes());
        assert!(matches!(
            parse_udp_frame(&f),
            Err(NetError::BadTotalLength { total: 1234, .. })
        ));
        let ip = parse_ip_link(&f, LinkType::Ethernet, TotalLength::CutAtCapture).unwrap();
        assert!(ip.cut);
        assert_eq!(ip.payload.len(), 8 + 5 + 2);
        let d = udp_of_ip(&ip).unwrap();
        assert_eq!(d.payload, b"hello\xee\xee");
        // A whole packet is not cut, and its padding is still trimmed.
        let ip = parse_ip_link(PLAIN, LinkType::Ethernet, TotalLength::CutAtCapture).unwrap();
        assert!(!ip.cut);
        assert_eq!(udp_of_ip(&ip).unwrap().payload, b"hello");
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
            parse_ip_link(&f, LinkType::Ethernet, TotalLength::CutAtCapture),
            Err(NetError::BadTotalLength { total: 19, .. })
        ));
    }

    #[test]
    fn never_panics_on_any_prefix_or_garbage() {
        for n in 0..=PLAIN.len() {
            let _ = parse_udp_frame(&PLAIN[..n]);
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
            let _ = parse_udp_frame(&buf[..n]);
        }
    }
    /// An IPv6 frame fe80::1 -> fe80::2 (Ethernet, EtherType 0x86DD) whose payload is the
    /// extension headers `ext` (each `(type, bytes)`, the bytes' first byte overwritten with the
    /// next header) followed by `upper` bytes of protocol `proto`, with `pad` bytes of trailing
    /// Ethernet padding.
    fn v6(ext: &[(u8, Vec<u8>)], proto: u8, upper: &[u8], pad: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let mut body = Vec::new();
        for (i, (_, b)) in ext.iter().enumerate() {
            let next = ext.get(i + 1).map_or(proto, |e| e.0);
            let mut b = b.clone();
            b[0] = next;
            body.extend_from_slice(&b);
        }
        body.extend_from_slice(upper);
        let first = ext.first().map_or(proto, |e| e.0);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(body.len() as u16).to_be_bytes());
        f.extend_from_slice(&[first, 64]);
        f.extend_from_slice(&Ipv6Addr::from(LL1).octets());
        f.extend_from_slice(&Ipv6Addr::from(LL2).octets());
        f.extend_from_slice(&body);
        f.extend(std::iter::repeat_n(0xee, pad));
        f
    }

    const LL1: [u16; 8] = [0xfe80, 0, 0, 0, 0, 0, 0, 1];
    const LL2: [u16; 8] = [0xfe80, 0, 0, 0, 0, 0, 0, 2];
    /// UDP 7502 -> 7503, length 13, checksum 0 (accepted, see the module docs), "hello".
    const UDP_HELLO: &[u8] = &[
        0x1d, 0x4e, 0x1d, 0x4f, 0, 13, 0, 0, b'h', b'e', b'l', b'l', b'o',
    ];

    fn opts(t: u8, len8: usize) -> (u8, Vec<u8>) {
        let mut b = vec![0u8; len8 * 8];
        b[1] = (len8 - 1) as u8;
        // PadN covering the rest of the header (RFC 8200 §4.2).
        b[2] = 1;
        b[3] = (len8 * 8 - 4) as u8;
        (t, b)
    }

    fn frag_hdr(offset: u16, more: bool, id: u32) -> (u8, Vec<u8>) {
        let mut b = vec![0u8, 0];
        b.extend_from_slice(&(offset | u16::from(more)).to_be_bytes());
        b.extend_from_slice(&id.to_be_bytes());
        (IPPROTO_FRAGMENT, b)
    }

    fn hello_v6() -> UdpDatagram<'static> {
        UdpDatagram {
            src_ip: IpAddr::V6(Ipv6Addr::from(LL1)),
            dst_ip: IpAddr::V6(Ipv6Addr::from(LL2)),
            src_port: 7502,
            dst_port: 7503,
            payload: b"hello",
        }
    }

    #[test]
    fn ipv6_plain_udp() {
        let f = v6(&[], IPPROTO_UDP, UDP_HELLO, 2);
        assert_eq!(parse_udp_frame(&f), Ok(hello_v6()));
        let ip = parse_ip(&f).unwrap();
        assert_eq!(
            (
                ip.protocol,
                ip.id,
                ip.frag_offset,
                ip.more_fragments,
                ip.cut
            ),
            (17, 0, 0, false, false)
        );
        assert_eq!(
            ip.payload, UDP_HELLO,
            "padding trimmed by the payload length"
        );
        // VLAN-tagged, Linux cooked and raw IPv6 links reach the same datagram.
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(parse_udp_frame(&tagged), Ok(hello_v6()));
        assert_eq!(parse_ip(&tagged).unwrap().vlan, Some(100));
        let ip6 = &f[14..];
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x86, 0xdd];
        sll.extend_from_slice(ip6);
        for (link, bytes) in [
            (LinkType::RawIp, ip6),
            (LinkType::Ipv6, ip6),
            (LinkType::LinuxSll, &sll[..]),
        ] {
            assert_eq!(
                parse_udp_link(bytes, link, TotalLength::Strict),
                Ok(hello_v6()),
                "{link:?}"
            );
        }
        assert_eq!(
            parse_udp_link(ip6, LinkType::Ipv4, TotalLength::Strict),
            Err(NetError::BadVersion(6))
        );
    }

    #[test]
    fn ipv6_each_extension_header_is_walked() {
        type Case = (&'static str, Vec<(u8, Vec<u8>)>, usize);
        let cases: [Case; 6] = [
            ("hop-by-hop", vec![opts(IPPROTO_HOPOPTS, 1)], 8),
            ("routing", vec![opts(IPPROTO_ROUTING, 2)], 16),
            ("destination options", vec![opts(IPPROTO_DSTOPTS, 3)], 24),
            ("atomic fragment", vec![frag_hdr(0, false, 0x0102_0304)], 8),
            (
                "all four",
                vec![
                    opts(IPPROTO_HOPOPTS, 1),
                    opts(IPPROTO_DSTOPTS, 1),
                    opts(IPPROTO_ROUTING, 1),
                    frag_hdr(0, false, 7),
                    opts(IPPROTO_DSTOPTS, 2),
                ],
                48,
            ),
            (
                "eight",
                (0..8).map(|_| opts(IPPROTO_DSTOPTS, 1)).collect(),
                64,
            ),
        ];
        for (name, ext, ext_len) in cases {
            let f = v6(&ext, IPPROTO_UDP, UDP_HELLO, 0);
            assert_eq!(f.len(), 14 + 40 + ext_len + 13, "{name}");
            assert_eq!(parse_udp_frame(&f), Ok(hello_v6()), "{name}");
            let ip = parse_ip(&f).unwrap();
            assert!(!ip.is_fragment(), "{name}: an atomic fragment is whole");
            assert_eq!((ip.protocol, ip.payload), (17, UDP_HELLO), "{name}");
        }
        let atomic = v6(
            &[frag_hdr(0, false, 0x0102_0304)],
            IPPROTO_UDP,
            UDP_HELLO,
            0,
        );
        assert_eq!(parse_ip(&atomic).unwrap().id, 0x0102_0304);
    }

    #[test]
    fn ipv6_fragments_are_a_distinct_error() {
        // First fragment: offset 0, M set; the payload is the fragmentable part's first bytes.
        let mut first_part = UDP_HELLO.to_vec();
        first_part.truncate(8);
        let first = v6(
            &[frag_hdr(0, true, 0xdead_beef)],
            IPPROTO_UDP,
            &first_part,
            0,
        );
        assert_eq!(parse_udp_frame(&first), Err(NetError::Fragment));
        let ip = parse_ip(&first).unwrap();
        assert_eq!(
            (ip.id, ip.frag_offset, ip.more_fragments, ip.protocol),
            (0xdead_beef, 0, true, 17)
        );
        assert_eq!(ip.payload, &UDP_HELLO[..8]);
        assert_eq!(ip.src_ip, IpAddr::V6(Ipv6Addr::from(LL1)));
        // Last fragment: offset 1448, M clear, after a hop-by-hop header.
        let last = v6(
            &[opts(IPPROTO_HOPOPTS, 1), frag_hdr(1448, false, 0xdead_beef)],
            IPPROTO_UDP,
            b"lo",
            0,
        );
        assert_eq!(parse_udp_frame(&last), Err(NetError::Fragment));
        let ip = parse_ip(&last).unwrap();
        assert_eq!(
            (ip.id, ip.frag_offset, ip.more_fragments, ip.payload),
            (0xdead_beef, 1448, false, &b"lo"[..])
        );
        // A first fragment whose fragmentable part starts with destination options keeps them
        // in its payload (reassembly walks them); its protocol is the header they start with.
        let mut part = opts(IPPROTO_DSTOPTS, 1).1;
        part[0] = IPPROTO_UDP;
        part.extend_from_slice(&UDP_HELLO[..8]);
        let f = v6(&[frag_hdr(0, true, 1)], IPPROTO_DSTOPTS, &part, 0);
        let ip = parse_ip(&f).unwrap();
        assert_eq!((ip.protocol, ip.payload), (IPPROTO_DSTOPTS, &part[..]));
        // RFC 7112: a first fragment that ends inside the header chain or the UDP header.
        let f = v6(&[frag_hdr(0, true, 1)], IPPROTO_DSTOPTS, &part[..6], 0);
        assert_eq!(
            parse_ip(&f),
            Err(NetError::Truncated {
                layer: Layer::Ipv6Ext,
                need: 8,
                have: 6
            })
        );
        let f = v6(&[frag_hdr(0, true, 1)], IPPROTO_UDP, &UDP_HELLO[..6], 0);
        assert_eq!(
            parse_ip(&f),
            Err(NetError::Truncated {
                layer: Layer::Udp,
                need: 8,
                have: 6
            })
        );
    }

    #[test]
    fn ipv6_malformed_headers_are_errors() {
        let hbh = opts(IPPROTO_HOPOPTS, 1);
        let dst = opts(IPPROTO_DSTOPTS, 1);
        // Hop-by-hop after another extension header.
        let f = v6(&[dst.clone(), hbh.clone()], IPPROTO_UDP, UDP_HELLO, 0);
        assert_eq!(parse_udp_frame(&f), Err(NetError::BadExtHeader(0)));
        // Two fragment headers (the first atomic).
        let f = v6(
            &[frag_hdr(0, false, 1), frag_hdr(0, false, 2)],
            IPPROTO_UDP,
            UDP_HELLO,
            0,
        );
        assert_eq!(parse_udp_frame(&f), Err(NetError::BadExtHeader(44)));
        // Nine extension headers.
        let nine: Vec<_> = (0..9).map(|_| dst.clone()).collect();
        let f = v6(&nine, IPPROTO_UDP, UDP_HELLO, 0);
        assert_eq!(parse_udp_frame(&f), Err(NetError::TooManyExtHeaders));
        // A destination options header claiming 16 bytes with 8 in the packet.
        let mut long = dst.clone();
        long.1[1] = 1;
        let f = v6(&[long], IPPROTO_UDP, &[], 0);
        assert_eq!(
            parse_udp_frame(&f),
            Err(NetError::Truncated {
                layer: Layer::Ipv6Ext,
                need: 16,
                have: 8
            })
        );
        // Fragment header cut after 5 bytes.
        let mut f = v6(&[], IPPROTO_FRAGMENT, &[17, 0, 0, 0, 0], 0);
        assert_eq!(
            parse_udp_frame(&f),
            Err(NetError::Truncated {
                layer: Layer::Ipv6Ext,
                need: 8,
                have: 5
            })
        );
        // Fixed header cut; payload length 0 (jumbogram); longer than the frame.
        assert_eq!(
            parse_udp_frame(&f[..14 + 39]),
            Err(NetError::Truncated {
                layer: Layer::Ipv6,
                need: 40,
                have: 39
            })
        );
        f[18..20].copy_from_slice(&[0, 0]);
        assert_eq!(
            parse_udp_frame(&f),
            Err(NetError::BadPayloadLength {
                len: 0,
                available: 5
            })
        );
        f[18..20].copy_from_slice(&[0, 6]);
        assert_eq!(
            parse_udp_frame(&f),
            Err(NetError::BadPayloadLength {
                len: 6,
                available: 5
            })
        );
        // Upper layers that are not UDP: ESP, "no next header", ICMPv6.
        for p in [50u8, 59, 58] {
            let f = v6(std::slice::from_ref(&hbh), p, UDP_HELLO, 0);
            assert_eq!(parse_udp_frame(&f), Err(NetError::NotUdp(p)));
        }
        // Version 4 nibble under IPv6's EtherType.
        let mut f = v6(&[], IPPROTO_UDP, UDP_HELLO, 0);
        f[14] = 0x45;
        assert_eq!(parse_udp_frame(&f), Err(NetError::BadVersion(4)));
        // UDP length beyond the IPv6 payload.
        let mut f = v6(&[], IPPROTO_UDP, UDP_HELLO, 0);
        f[14 + 40 + 5] = 14;
        assert_eq!(
            parse_udp_frame(&f),
            Err(NetError::BadUdpLength {
                len: 14,
                available: 13
            })
        );
    }

    #[test]
    fn ipv6_cut_at_capture() {
        let mut f = v6(&[opts(IPPROTO_DSTOPTS, 1)], IPPROTO_UDP, UDP_HELLO, 0);
        // Payload length 1242 (8 + 1234), the frame holds 8 + 13.
        f[18..20].copy_from_slice(&1242u16.to_be_bytes());
        f[14 + 48 + 4..14 + 48 + 6].copy_from_slice(&1234u16.to_be_bytes());
        assert_eq!(
            parse_udp_frame(&f),
            Err(NetError::BadPayloadLength {
                len: 1242,
                available: 21
            })
        );
        let ip = parse_ip_link(&f, LinkType::Ethernet, TotalLength::CutAtCapture).unwrap();
        assert!(ip.cut);
        assert_eq!(udp_of_ip(&ip).unwrap().payload, b"hello");
    }

    #[test]
    fn ipv6_never_panics_on_any_prefix_or_garbage() {
        let f = v6(
            &[
                opts(IPPROTO_HOPOPTS, 1),
                opts(IPPROTO_ROUTING, 2),
                frag_hdr(0, true, 9),
                opts(IPPROTO_DSTOPTS, 1),
            ],
            IPPROTO_UDP,
            UDP_HELLO,
            0,
        );
        for n in 0..=f.len() {
            let _ = parse_udp_frame(&f[..n]);
            let _ = parse_ip_link(&f[..n], LinkType::Ethernet, TotalLength::CutAtCapture);
        }
        let mut x = 0x8765_4321u32;
        let mut buf = [0u8; 160];
        for _ in 0..20_000 {
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            buf[12] = 0x86;
            buf[13] = 0xdd;
            buf[14] = 0x60;
            // Mostly extension headers and UDP as next headers, with small lengths.
            for at in [20usize, 54, 62, 70, 78] {
                buf[at] = [0, 43, 44, 60, 17][(x as usize >> (at % 7)) % 5];
                buf[at + 1] &= 3;
            }
            let n = (x as usize) % buf.len();
            let _ = parse_udp_frame(&buf[..n]);
            let _ = parse_ip_link(&buf[..n], LinkType::Ethernet, TotalLength::CutAtCapture);
        }
    }
}
