//! What the fuzz targets and their seed writer (`userspace/examples/fuzz_seeds.rs`, run by
//! `cargo xtask fuzz`) must agree on: the sensors and files of each decoder target, the option
//! bits of the selector byte, and the byte formats of the inputs. Pure data and encoders, no
//! fuzzing code: the seed writer includes this file with `#[path]`.
//!
//! # Decoder inputs (`velodyne`, `hesai`, `ouster`, `robosense`)
//! `selector, record*`. The selector's low nibble picks the sensor (index into the target's
//! table below, modulo its length), the high nibble holds option bits ([`OPT_A`]..[`OPT_D`],
//! meaning per target). A record is `len: u16 LE, gap: u16 LE, len bytes`: one UDP payload,
//! received `gap * GAP_UNIT_NS` after the previous one (a gap of 20,000 = 200 ms closes a frame
//! by timeout). A last record shorter than its `len` is pushed as it is.
//!
//! # Reassembly input
//! `config: 3 bytes, op*` (see [`reassembly_config`] and [`ReassemblyOp`]).
//!
//! # Protocol input
//! `mode, bytes` (see [`ProtocolMode`]).
use std::path::PathBuf;

use lidarxdp_core::sensor::SensorModel;

/// The shared captures, `../shared/data` from the repository root (both crates using this file
/// sit one level below it).
pub fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data"))
}

/// One sensor configuration of a decoder target.
#[derive(Clone, Copy, Debug)]
pub struct SensorEntry {
    /// The model.
    pub model: SensorModel,
    /// Calibration / metadata file under [`data_dir`]; `None`: a synthetic table the target
    /// writes itself (RoboSense 32-beam models, none of which has a capture here).
    pub calibration: Option<&'static str>,
    /// Captures under [`data_dir`] whose payloads seed this entry.
    pub captures: &'static [&'static str],
}

/// Selector option bit 4 (velodyne: manual flavor; hesai: CRC check off; ouster: field of
/// view; robosense: field of view).
pub const OPT_A: u8 = 0x10;
/// Selector option bit 5 (velodyne, hesai: field of view 270°..90°; robosense: cut at 180°;
/// ouster: a firmware 3.x profile, [`ouster_fw3_variant`]).
pub const OPT_B: u8 = 0x20;
/// Selector option bit 6 (velodyne: cut at 180°; ouster: a firmware 3.x profile,
/// [`ouster_fw3_variant`]).
pub const OPT_C: u8 = 0x40;
/// Selector option bit 7 (unused so far: selectors that differ only in it are the same).
pub const OPT_D: u8 = 0x80;

/// Host-time unit of a record's `gap`, ns (10 µs).
pub const GAP_UNIT_NS: u64 = 10_000;

/// The `velodyne` target's sensors.
pub const VELODYNE: &[SensorEntry] = &[
    SensorEntry {
        model: SensorModel::Vlp16,
        calibration: Some("velodyne/vlp16/calibration/VLP16db.yaml"),
        captures: &[
            "velodyne/vlp16/vlp16_strongest_84pkt.pcap",
            "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap",
            "velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap",
        ],
    },
    SensorEntry {
        model: SensorModel::Vlp32c,
        calibration: Some("velodyne/vlp32c/calibration/VLP32_nebula.yaml"),
        captures: &["velodyne/vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap"],
    },
    SensorEntry {
        model: SensorModel::Vls128,
        calibration: Some("velodyne/vls128/calibration/VLS128.yaml"),
        captures: &["velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap"],
    },
];

/// The `hesai` target's sensors (the models with an angle-correction CSV in the shared data).
pub const HESAI: &[SensorEntry] = &[
    SensorEntry {
        model: SensorModel::Pandar40p,
        calibration: Some("hesai/pandar40p/Pandar40P.csv"),
        captures: &["hesai/pandar40p/pandar40p_nebula.pcap"],
    },
    SensorEntry {
        model: SensorModel::Pandar64,
        calibration: Some("hesai/pandar64/Pandar64.csv"),
        captures: &["hesai/pandar64/pandar64_nebula.pcap"],
    },
    SensorEntry {
        model: SensorModel::PandarQt64,
        calibration: Some("hesai/pandarqt64/PandarQT64.csv"),
        captures: &["hesai/pandarqt64/pandarqt64_nebula.pcap"],
    },
    SensorEntry {
        model: SensorModel::PandarQt128,
        calibration: Some("hesai/pandarqt128/PandarQT128.csv"),
        captures: &["hesai/pandarqt128/pandarqt128_nebula.pcap"],
    },
    SensorEntry {
        model: SensorModel::PandarXt32,
        calibration: Some("hesai/pandarxt32/PandarXT32.csv"),
        captures: &["hesai/pandarxt32/pandarxt32_nebula.pcap"],
    },
    SensorEntry {
        model: SensorModel::PandarXt32m,
        calibration: Some("hesai/pandarxt32m/PandarXT32M.csv"),
        captures: &["hesai/pandarxt32m/pandarxt32m_nebula.pcap"],
    },
];

/// The `ouster` target's sensors: one per metadata JSON in the shared data.
pub const OUSTER: &[SensorEntry] = &[
    SensorEntry {
        model: SensorModel::Ouster,
        calibration: Some("ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.json"),
        captures: &["ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.pcap"],
    },
    SensorEntry {
        model: SensorModel::Ouster,
        calibration: Some("ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.json"),
        captures: &["ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.pcap"],
    },
    SensorEntry {
        model: SensorModel::Ouster,
        calibration: Some("ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.json"),
        captures: &["ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.pcap"],
    },
    SensorEntry {
        model: SensorModel::Ouster,
        calibration: Some("ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.json"),
        captures: &["ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap"],
    },
    SensorEntry {
        model: SensorModel::Ouster,
        calibration: Some("ouster/os1-64/os1-64_legacy_fw1.1x_3frames.json"),
        captures: &["ouster/os1-64/os1-64_legacy_fw1.1x_3frames.pcap"],
    },
];

/// Ouster firmware 3.x variants of the `ouster` target's entries, by selector option bits:
/// `OPT_B` alone `RNG15_RFL8_NIR8_DUAL` (STANDARD header), `OPT_C` alone
/// `FUSA_RNG15_RFL8_NIR8_DUAL` (FUSA header by default), both `RNG15_RFL8_NIR8_DUAL` with
/// `header_type` FUSA; `None` without either bit.
pub fn ouster_fw3_variant(opts: u8) -> Option<(&'static str, &'static str)> {
    match (opts & OPT_B != 0, opts & OPT_C != 0) {
        (false, false) => None,
        (true, false) => Some(("RNG15_RFL8_NIR8_DUAL", "STANDARD")),
        (false, true) => Some(("FUSA_RNG15_RFL8_NIR8_DUAL", "FUSA")),
        (true, true) => Some(("RNG15_RFL8_NIR8_DUAL", "FUSA")),
    }
}

/// The entry's metadata `text` rewritten for the firmware 3.x variant of `opts`
/// ([`ouster_fw3_variant`]): its `udp_profile_lidar` (the one in `data_format`) replaced, and
/// the `header_type` beside it. `None` without a variant or for metadata without a profile
/// (LEGACY).
pub fn ouster_fw3_metadata(text: &str, opts: u8) -> Option<String> {
    let (profile, header) = ouster_fw3_variant(opts)?;
    let key = "\"udp_profile_lidar\": \"";
    let start = text.find(key)? + key.len();
    let end = start + text[start..].find('"')?;
    Some(format!(
        "{}{profile}\", \"header_type\": \"{header}{}",
        &text[..start],
        &text[end..]
    ))
}

/// A packet of `from` re-encoded as `to` (a low-data-rate dual profile of the same geometry):
/// packet type 1 and `frame_id` in `to`'s header layout, the columns' time stamps,
/// measurement ids and status copied, each pixel's RANGE, REFLECTIVITY and NEAR_IR (RANGE2 and
/// REFLECTIVITY2 where `from` has them) written at the 8-byte pixel's bits, the STANDARD
/// footer CRC-64 filled. `None` if `payload` is not a valid packet of `from`.
pub fn ouster_fw3_payload(
    payload: &[u8],
    from: lidarxdp_core::sensor::ouster::packet::PacketFormat,
    to: lidarxdp_core::sensor::ouster::packet::PacketFormat,
    frame_id: u32,
) -> Option<Vec<u8>> {
    use lidarxdp_core::sensor::ouster::packet::{ChanField, HeaderType, Packet, crc64_xz};
    let src = Packet::new_checked(payload, from).ok()?;
    let mut b = vec![0u8; to.packet_len()];
    match to.header {
        HeaderType::Standard => {
            b[0] = 1;
            b[2..4].copy_from_slice(&(frame_id as u16).to_le_bytes());
        }
        HeaderType::Fusa => {
            b[0] = 1;
            b[4..8].copy_from_slice(&frame_id.to_le_bytes());
        }
    }
    let pb = to.profile.pixel_bytes();
    for col in 0..to.columns_per_packet.min(from.columns_per_packet) {
        let o = to.packet_header_len() + col * to.col_len();
        b[o..o + 8].copy_from_slice(&src.col_timestamp(col).to_le_bytes());
        b[o + 8..o + 10].copy_from_slice(&src.col_measurement_id(col).to_le_bytes());
        b[o + 10..o + 12].copy_from_slice(&(src.col_status(col) as u16).to_le_bytes());
        for row in 0..to.pixels_per_column.min(from.pixels_per_column) {
            let f = |c| src.field(c, col, row);
            let word = |r: u64, refl: u64, top: u64| {
                ((r / 8).min(0x7FFF) | refl << 16 | top.min(255) << 24) as u32
            };
            let w0 = word(
                f(ChanField::Range),
                f(ChanField::Reflectivity),
                f(ChanField::NearIr) >> 4,
            );
            let w1 = word(f(ChanField::Range2), f(ChanField::Reflectivity2), 0);
            let p = o + to.col_header_len() + row * pb;
            b[p..p + 4].copy_from_slice(&w0.to_le_bytes());
            b[p + 4..p + 8].copy_from_slice(&w1.to_le_bytes());
        }
    }
    if to.has_crc() {
        let n = b.len();
        let crc = crc64_xz(&b[..n - 8]);
        b[n - 8..].copy_from_slice(&crc.to_le_bytes());
    }
    Some(b)
}

/// The `robosense` target's sensors. Only the Helios-16P has a capture and a table; RS16
/// shares its 16-row table, the 32-beam models get a synthetic one (the first DIFOP with a
/// valid table replaces it in any case).
pub const ROBOSENSE: &[SensorEntry] = &[
    SensorEntry {
        model: SensorModel::Helios16p,
        calibration: Some("robosense/helios16p/RobosenseHelios16P.csv"),
        captures: &["robosense/helios16p/helios16p_nebula_pr79.pcap"],
    },
    SensorEntry {
        model: SensorModel::Rs16,
        calibration: Some("robosense/helios16p/RobosenseHelios16P.csv"),
        captures: &[],
    },
    SensorEntry {
        model: SensorModel::Rs32,
        calibration: None,
        captures: &[],
    },
    SensorEntry {
        model: SensorModel::Bpearl,
        calibration: None,
        captures: &[],
    },
    SensorEntry {
        model: SensorModel::Helios,
        calibration: None,
        captures: &[],
    },
];

/// Appends one decoder-input record (`len`, `gap`, bytes); payloads over 65,535 bytes are cut.
pub fn put_record(out: &mut Vec<u8>, gap: u16, payload: &[u8]) {
    let payload = &payload[..payload.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    out.extend_from_slice(&gap.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Splits a decoder input's records (after the selector) into `(gap, payload)` pairs.
pub fn records(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let (head, rest) = data.split_first_chunk::<4>()?;
        let len = usize::from(u16::from_le_bytes([head[0], head[1]]));
        let gap = u16::from_le_bytes([head[2], head[3]]);
        let (payload, rest) = rest.split_at(len.min(rest.len()));
        data = rest;
        Some((gap, payload))
    })
}

/// Reassembler limits from the first three input bytes: `max_datagrams = 1 + (b0 & 3)`,
/// `max_payload_len` from `b1 & 3` (1480, 4096, 26,000 bytes or
/// [`lidarxdp_core::reassembly::MAX_IPV6_PAYLOAD_LEN`], under which IPv4's own 65,515 applies),
/// `timeout_ns = (1 + b2) ms`.
pub fn reassembly_config(b: [u8; 3]) -> lidarxdp_core::reassembly::ReassemblyConfig {
    lidarxdp_core::reassembly::ReassemblyConfig {
        max_datagrams: 1 + usize::from(b[0] & 3),
        max_payload_len: [
            1480,
            4096,
            26_000,
            lidarxdp_core::reassembly::MAX_IPV6_PAYLOAD_LEN,
        ][usize::from(b[1] & 3)],
        timeout_ns: (1 + u64::from(b[2])) * 1_000_000,
    }
}

/// One operation of a reassembly input.
///
/// Wire form: a tag byte, then
/// - tag bit 7 clear — a fragment: `offset: u16 LE` (bytes), `len: u16 LE`, `gap: u16 LE`
///   (clock advance in 10 µs units), `len` bytes of payload. Tag bits 0–1 and 3 pick one of
///   eight datagram keys ([`REASSEMBLY_KEYS`]; bit 3 set: the IPv6 ones), bit 2 is the
///   more-fragments flag.
/// - tag `0x80..=0xBF` — a raw Ethernet frame (IPv4 or IPv6) through `net::parse_ip`:
///   `len: u16 LE`,
///   `gap: u16 LE`, `len` bytes.
/// - tag `0xC0..=0xFF` — `poll_timeout` after advancing the clock by `gap: u16 LE` × 10 µs.
///
/// A truncated operation uses what is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReassemblyOp<'a> {
    /// Push a fragment of datagram `key` (0..8).
    Fragment {
        /// Key index.
        key: u8,
        /// Offset in bytes.
        offset: u16,
        /// More-fragments flag.
        more: bool,
        /// Clock advance, 10 µs units.
        gap: u16,
        /// Fragment payload.
        payload: &'a [u8],
    },
    /// Parse an Ethernet frame and push it if it is an IPv4 or IPv6 fragment.
    Raw {
        /// Clock advance, 10 µs units.
        gap: u16,
        /// The frame.
        frame: &'a [u8],
    },
    /// Advance the clock and expire datagrams.
    Poll {
        /// Clock advance, 10 µs units.
        gap: u16,
    },
}

impl ReassemblyOp<'_> {
    /// Appends the wire form of this operation.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let u16s = |out: &mut Vec<u8>, v: &[u16]| {
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
        match *self {
            ReassemblyOp::Fragment {
                key,
                offset,
                more,
                gap,
                payload,
            } => {
                out.push((key & 3) | ((key & 4) << 1) | if more { 4 } else { 0 });
                u16s(out, &[offset, payload.len() as u16, gap]);
                out.extend_from_slice(payload);
            }
            ReassemblyOp::Raw { gap, frame } => {
                out.push(0x80);
                u16s(out, &[frame.len() as u16, gap]);
                out.extend_from_slice(frame);
            }
            ReassemblyOp::Poll { gap } => {
                out.push(0xC0);
                u16s(out, &[gap]);
            }
        }
    }
}

/// Splits a reassembly input's operations (after the 3 config bytes).
pub fn reassembly_ops(mut data: &[u8]) -> impl Iterator<Item = ReassemblyOp<'_>> {
    fn u16_at(d: &[u8], i: usize) -> u16 {
        u16::from_le_bytes([
            d.get(i).copied().unwrap_or(0),
            d.get(i + 1).copied().unwrap_or(0),
        ])
    }
    std::iter::from_fn(move || {
        let (&tag, rest) = data.split_first()?;
        let op = match tag {
            0..=0x7F => {
                let (offset, len, gap) = (u16_at(rest, 0), u16_at(rest, 2), u16_at(rest, 4));
                let body = rest.get(6..).unwrap_or_default();
                let (payload, tail) = body.split_at(usize::from(len).min(body.len()));
                data = tail;
                ReassemblyOp::Fragment {
                    key: (tag & 3) | ((tag & 8) >> 1),
                    offset,
                    more: tag & 4 != 0,
                    gap,
                    payload,
                }
            }
            0x80..=0xBF => {
                let (len, gap) = (u16_at(rest, 0), u16_at(rest, 2));
                let body = rest.get(4..).unwrap_or_default();
                let (frame, tail) = body.split_at(usize::from(len).min(body.len()));
                data = tail;
                ReassemblyOp::Raw { gap, frame }
            }
            _ => {
                data = rest.get(2..).unwrap_or_default();
                ReassemblyOp::Poll {
                    gap: u16_at(rest, 0),
                }
            }
        };
        Some(op)
    })
}

/// The eight datagram keys of reassembly fragments: four IPv4 (differing in id, protocol and
/// source), then four IPv6 (protocol 0, RFC 8200's key; one with IPv4 key 0's id, one with a
/// 32-bit id, one from a link-local source).
pub const REASSEMBLY_KEYS: [lidarxdp_core::reassembly::FragmentKey; 8] = {
    use lidarxdp_core::reassembly::FragmentKey;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let k = FragmentKey {
        src_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 201)),
        dst_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 100)),
        id: 0x1234,
        protocol: 17,
    };
    let k6 = FragmentKey {
        src_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x201)),
        dst_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100)),
        id: 0x1234,
        protocol: 0,
    };
    [
        k,
        FragmentKey { id: 0x1235, ..k },
        FragmentKey { protocol: 6, ..k },
        FragmentKey {
            src_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 202)),
            ..k
        },
        k6,
        FragmentKey {
            id: 0xdead_1234,
            ..k6
        },
        FragmentKey {
            src_ip: IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x201)),
            ..k6
        },
        FragmentKey {
            dst_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x101)),
            ..k6
        },
    ]
};

/// First byte of a protocol input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolMode {
    /// The bytes as they are, to `parse_header` (mode byte `0`, and any value past 7).
    Raw,
    /// A valid prefix for message type `1..=6` (mode byte = the type for `1..=5`, `7` for the
    /// IMU message, type 6) with `header_len` the
    /// bytes' length plus 12, rounded up to 8 and at most 4096; the bytes follow it (zero
    /// padded), so the type's own parser runs on them.
    Body(u16),
    /// A stream of messages (mode byte `6`), walked with `parse_header`.
    Stream,
}

impl ProtocolMode {
    /// The mode of a mode byte.
    pub fn from_byte(b: u8) -> Self {
        match b {
            1..=5 => ProtocolMode::Body(u16::from(b)),
            6 => ProtocolMode::Stream,
            7 => ProtocolMode::Body(6),
            _ => ProtocolMode::Raw,
        }
    }

    /// The mode byte.
    pub fn byte(self) -> u8 {
        match self {
            ProtocolMode::Raw => 0,
            ProtocolMode::Body(6) => 7,
            ProtocolMode::Body(t) => t as u8,
            ProtocolMode::Stream => 6,
        }
    }
}
