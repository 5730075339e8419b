//! Writes the seed corpora of the fuzz targets in `fuzz/` (docs/fuzzing.md) from the shared
//! captures: real UDP payloads for the decoder targets (one payload per seed, and short runs of
//! consecutive payloads with their recorded spacing), real Ouster datagrams cut into
//! 1480-byte IPv4 fragments for the reassembler, and protocol messages built with this crate's
//! encoders (around frames decoded from the VLP-16 capture) for the protocol target. The input
//! formats are in `fuzz/src/shared.rs`, which this example includes.
//!
//! Run by `cargo xtask fuzz`; by hand:
//! `cargo run --release -p lidarxdp --example fuzz_seeds -- fuzz/corpus`.
//! Writes `<dir>/<target>/seed-*` (replacing earlier seeds) and prints the count per target.

#[allow(dead_code)]
#[path = "../../fuzz/src/shared.rs"]
mod shared;

use std::collections::HashMap;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use lidarxdp::replay::{CapturedDatagram, read_udp_datagrams};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::protocol::{
    FieldSet, Hello, SensorEntry as WireSensor, Subscribe, encode_error, encode_frame_header,
    encode_frame_header_fields, encode_hello, encode_subscribe, encode_subscribed, error_code,
};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};
use shared::{
    HESAI, OPT_A, OPT_B, OPT_C, OUSTER, ProtocolMode, REASSEMBLY_KEYS, ROBOSENSE, ReassemblyOp,
    SensorEntry, VELODYNE, data_dir, put_record,
};

/// Single-payload seeds per sensor entry with a capture, and multi-payload seeds per entry.
const SINGLES: usize = 90;
const RUNS: usize = 6;
const RUN_LEN: usize = 8;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Seeds of one target, written at the end.
struct Corpus {
    dir: PathBuf,
    seeds: Vec<(String, Vec<u8>)>,
}

impl Corpus {
    fn new(root: &Path, target: &str) -> Self {
        Corpus {
            dir: root.join(target),
            seeds: Vec::new(),
        }
    }

    fn add(&mut self, name: impl Into<String>, bytes: Vec<u8>) {
        self.seeds.push((name.into(), bytes));
    }

    /// Replaces the target's earlier `seed-*` files (inputs the fuzzer added stay).
    fn write(self) -> Result<usize> {
        fs::create_dir_all(&self.dir)?;
        for e in fs::read_dir(&self.dir)? {
            let path = e?.path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
            {
                fs::remove_file(path)?;
            }
        }
        for (name, bytes) in &self.seeds {
            fs::write(self.dir.join(format!("seed-{name}")), bytes)?;
        }
        Ok(self.seeds.len())
    }
}

/// Every UDP datagram of a shared capture.
fn datagrams(rel: &str) -> Result<Vec<CapturedDatagram>> {
    let path = data_dir().join(rel);
    let (d, _) = read_udp_datagrams(&path, None).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(d)
}

/// Gap from `a` to `b` in record units (10 µs), saturated.
fn gap(a: &CapturedDatagram, b: &CapturedDatagram) -> u16 {
    let ns = b.timestamp.saturating_sub(a.timestamp).as_nanos();
    (ns / u128::from(shared::GAP_UNIT_NS)).min(u128::from(u16::MAX)) as u16
}

/// `n` indices spread evenly over `0..len`.
fn spread(len: usize, n: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let n = n.min(len);
    (0..n).map(|i| i * len / n).collect()
}

/// Seeds of a decoder target: per entry, single payloads (always including the odd-sized ones:
/// position, DIFOP, IMU packets) and runs of consecutive payloads under varied option bits.
/// Entries without a capture of their own reuse a few payloads of the first entry's.
fn decoder_seeds(root: &Path, target: &str, entries: &[SensorEntry], opts: &[u8]) -> Result<usize> {
    decoder_corpus(root, target, entries, opts)?.write()
}

/// The corpus [`decoder_seeds`] writes.
fn decoder_corpus(
    root: &Path,
    target: &str,
    entries: &[SensorEntry],
    opts: &[u8],
) -> Result<Corpus> {
    let mut c = Corpus::new(root, target);
    let mut fallback: Vec<CapturedDatagram> = Vec::new();
    for (index, e) in entries.iter().enumerate() {
        let mut all = Vec::new();
        for rel in e.captures {
            all.extend(datagrams(rel)?);
        }
        let (all, singles) = if all.is_empty() {
            (fallback.clone(), 20)
        } else {
            (all, SINGLES)
        };
        if fallback.is_empty() {
            fallback = all.iter().take(200).cloned().collect();
        }
        let selector = index as u8;
        let mut sizes: HashMap<usize, usize> = HashMap::new();
        for d in &all {
            *sizes.entry(d.payload.len()).or_default() += 1;
        }
        let common = sizes.iter().max_by_key(|(_, n)| **n).map(|(l, _)| *l);
        let odd = all
            .iter()
            .enumerate()
            .filter(|(_, d)| Some(d.payload.len()) != common)
            .map(|(i, _)| i)
            .take(20);
        let mut picks = spread(all.len(), singles);
        picks.extend(odd);
        picks.sort_unstable();
        picks.dedup();
        for i in picks {
            let mut s = vec![selector];
            put_record(&mut s, 0, &all[i].payload);
            c.add(format!("{index}-{i:05}"), s);
        }
        for (r, start) in spread(all.len().saturating_sub(RUN_LEN), RUNS)
            .into_iter()
            .enumerate()
        {
            let mut s = vec![selector | opts[r % opts.len()]];
            let run = &all[start..(start + RUN_LEN).min(all.len())];
            for (k, d) in run.iter().enumerate() {
                put_record(
                    &mut s,
                    if k == 0 { 0 } else { gap(&run[k - 1], d) },
                    &d.payload,
                );
            }
            c.add(format!("{index}-run{r}"), s);
        }
    }
    Ok(c)
}

/// The `ouster` seeds: [`decoder_seeds`]'s, plus per entry with a UDP profile its firmware 3.x
/// variants (`OPT_B`, `OPT_C`, both: [`shared::ouster_fw3_variant`]): runs of its packets
/// re-encoded in the variant's profile and header ([`shared::ouster_fw3_payload`]), frame ids
/// near 2^16 and, with the FUSA header, past 2^16 and through 2^32.
fn ouster_seeds(root: &Path) -> Result<usize> {
    use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
    let mut c = decoder_corpus(root, "ouster", OUSTER, &[0, OPT_A])?;
    for (index, e) in OUSTER.iter().enumerate() {
        let Some(cal) = e.calibration else { continue };
        let path = data_dir().join(cal);
        let text = fs::read_to_string(&path)?;
        let from = OusterMetadata::from_json(&text)
            .map_err(|err| format!("{}: {err}", path.display()))?
            .format;
        let mut all = Vec::new();
        for rel in e.captures {
            all.extend(datagrams(rel)?);
        }
        for opts in [OPT_B, OPT_C, OPT_B | OPT_C] {
            let Some(fw3) = shared::ouster_fw3_metadata(&text, opts) else {
                continue;
            };
            let to = OusterMetadata::from_json(&fw3)
                .map_err(|err| format!("{} (fw 3.x): {err}", path.display()))?
                .format;
            let base: u32 = if to.max_frame_id() == u32::MAX {
                u32::MAX - 1
            } else {
                65_535
            };
            for (r, start) in spread(all.len().saturating_sub(RUN_LEN), 3)
                .into_iter()
                .enumerate()
            {
                let mut s = vec![index as u8 | opts];
                let run = &all[start..(start + RUN_LEN).min(all.len())];
                for (k, d) in run.iter().enumerate() {
                    // Two frames per run: the id steps up half way (and wraps).
                    let id = base.wrapping_add(u32::from(k >= RUN_LEN / 2));
                    if let Some(p) = shared::ouster_fw3_payload(&d.payload, from, to, id) {
                        put_record(&mut s, if k == 0 { 0 } else { gap(&run[k - 1], d) }, &p);
                    }
                }
                c.add(format!("{index}-fw3-{opts:02x}-run{r}"), s);
            }
        }
    }
    c.write()
}

/// A UDP datagram (header + payload) as it travels inside IPv4.
fn udp_bytes(d: &CapturedDatagram) -> Vec<u8> {
    let len = (8 + d.payload.len()) as u16;
    let mut v = Vec::with_capacity(usize::from(len));
    for x in [d.src_port, d.dst_port, len, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(&d.payload);
    v
}

/// `(offset, more, bytes)` of `data` cut into `chunk`-byte fragments (a 1500-byte MTU: 1480).
fn fragments(data: &[u8], chunk: usize) -> Vec<(u16, bool, &[u8])> {
    let n = data.len().div_ceil(chunk);
    data.chunks(chunk)
        .enumerate()
        .map(|(i, c)| ((i * chunk) as u16, i + 1 < n, c))
        .collect()
}

/// An Ethernet II + IPv4 frame carrying one fragment of datagram `key` (checksum filled in),
/// or for an IPv6 key an Ethernet II + IPv6 frame with a hop-by-hop header, then the fragment
/// header (offset 0 with `more` clear: an atomic fragment).
fn ethernet_fragment(key: usize, offset: u16, more: bool, payload: &[u8]) -> Vec<u8> {
    let k = REASSEMBLY_KEYS[key];
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (k.src_ip, k.dst_ip) else {
        let mut f = vec![0xFF; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&((16 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 64]);
        for a in [k.src_ip, k.dst_ip] {
            if let IpAddr::V6(a) = a {
                f.extend_from_slice(&a.octets());
            }
        }
        f.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0, 17, 0]);
        f.extend_from_slice(&(offset | u16::from(more)).to_be_bytes());
        f.extend_from_slice(&k.id.to_be_bytes());
        f.extend_from_slice(payload);
        return f;
    };
    let mut f = vec![0xFF; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let total = (20 + payload.len()) as u16;
    let flags_off = (offset / 8) | if more { 0x2000 } else { 0 };
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&(k.id as u16).to_be_bytes());
    ip.extend_from_slice(&flags_off.to_be_bytes());
    ip.extend_from_slice(&[64, k.protocol, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xFFFF) + (sum >> 16);
    let sum = !(((sum & 0xFFFF) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(payload);
    f
}

/// Reassembly seeds from real Ouster datagrams: in order, reversed, two interleaved, a
/// duplicate, an overlap, a lost fragment then a timeout, too many at once, too big, raw
/// Ethernet frames, and a whole (unfragmented) datagram.
fn reassembly_seeds(root: &Path) -> Result<usize> {
    let mut c = Corpus::new(root, "reassembly");
    let frag =
        |key: u8, (offset, more, payload): (u16, bool, &[u8]), gap: u16, out: &mut Vec<u8>| {
            ReassemblyOp::Fragment {
                key,
                offset,
                more,
                gap,
                payload,
            }
            .encode(out)
        };
    for (n, e) in OUSTER.iter().enumerate() {
        let all: Vec<CapturedDatagram> = datagrams(e.captures[0])?
            .into_iter()
            .filter(|d| d.payload.len() > 1472)
            .collect();
        let (Some(a), Some(b)) = (all.first(), all.get(all.len() / 2)) else {
            continue;
        };
        let (ua, ub) = (udp_bytes(a), udp_bytes(b));
        let (fa, fb) = (fragments(&ua, 1480), fragments(&ub, 1480));
        // 4 slots, 65,515-byte datagrams, 256 ms timeout unless said otherwise.
        let seed = |cfg: [u8; 3], body: &dyn Fn(&mut Vec<u8>)| {
            let mut s = cfg.to_vec();
            body(&mut s);
            s
        };
        let big = [3, 3, 255];
        c.add(
            format!("{n}-in-order"),
            seed(big, &|s| fa.iter().for_each(|&f| frag(0, f, 2, s))),
        );
        c.add(
            format!("{n}-reversed"),
            seed(big, &|s| fa.iter().rev().for_each(|&f| frag(0, f, 2, s))),
        );
        c.add(
            format!("{n}-interleaved"),
            seed(big, &|s| {
                for (x, y) in fa.iter().zip(fb.iter()) {
                    frag(0, *x, 1, s);
                    frag(1, *y, 1, s);
                }
                fa.iter().skip(fb.len()).for_each(|&f| frag(0, f, 1, s));
                fb.iter().skip(fa.len()).for_each(|&f| frag(1, f, 1, s));
            }),
        );
        c.add(
            format!("{n}-duplicate"),
            seed(big, &|s| {
                frag(0, fa[0], 1, s);
                frag(0, fa[0], 1, s);
                fa.iter().skip(1).for_each(|&f| frag(0, f, 1, s));
            }),
        );
        c.add(
            format!("{n}-overlap"),
            seed(big, &|s| {
                frag(0, fa[0], 1, s);
                let (o, m, p) = fa[1];
                frag(0, (o - 8, m, p), 1, s);
                fa.iter().skip(1).for_each(|&f| frag(0, f, 1, s));
            }),
        );
        c.add(
            format!("{n}-lost-then-timeout"),
            seed([3, 3, 10], &|s| {
                fa.iter().skip(1).for_each(|&f| frag(0, f, 1, s));
                ReassemblyOp::Poll { gap: 2_000 }.encode(s);
                fb.iter().for_each(|&f| frag(2, f, 1, s));
            }),
        );
        c.add(
            format!("{n}-too-many"),
            seed([0, 3, 255], &|s| {
                frag(0, fa[0], 1, s);
                fb.iter().for_each(|&f| frag(3, f, 1, s));
                fa.iter().skip(1).for_each(|&f| frag(0, f, 1, s));
            }),
        );
        c.add(
            format!("{n}-too-big"),
            seed([1, 1, 255], &|s| fa.iter().for_each(|&f| frag(0, f, 1, s))),
        );
        c.add(
            format!("{n}-ipv6-interleaved-with-ipv4"),
            seed(big, &|s| {
                for (x, y) in fa.iter().zip(fb.iter()) {
                    frag(4, *x, 1, s);
                    frag(0, *x, 1, s);
                    frag(6, *y, 1, s);
                }
                fa.iter().skip(fb.len()).for_each(|&f| frag(4, f, 1, s));
                fa.iter().skip(fb.len()).for_each(|&f| frag(0, f, 1, s));
                fb.iter().skip(fa.len()).for_each(|&f| frag(6, f, 1, s));
            }),
        );
        c.add(
            format!("{n}-ipv6-ethernet"),
            seed(big, &|s| {
                for &(o, m, p) in fa.iter().rev() {
                    let frame = ethernet_fragment(5, o, m, p);
                    ReassemblyOp::Raw {
                        gap: 1,
                        frame: &frame,
                    }
                    .encode(s);
                }
            }),
        );
        c.add(
            format!("{n}-ethernet"),
            seed(big, &|s| {
                for &(o, m, p) in fa.iter().rev() {
                    let frame = ethernet_fragment(0, o, m, p);
                    ReassemblyOp::Raw {
                        gap: 1,
                        frame: &frame,
                    }
                    .encode(s);
                }
            }),
        );
    }
    let vlp = datagrams(VELODYNE[0].captures[0])?;
    if let Some(d) = vlp.first() {
        let u = udp_bytes(d);
        let mut s = vec![3, 3, 255];
        frag(0, (0, false, &u), 0, &mut s);
        let frame = ethernet_fragment(1, 0, false, &u);
        ReassemblyOp::Raw {
            gap: 0,
            frame: &frame,
        }
        .encode(&mut s);
        c.add("whole-datagram", s);
    }
    c.write()
}

/// Frames decoded from the VLP-16 capture, for real frame headers and points.
fn vlp16_frames() -> Result<Vec<Frame>> {
    let e = &VELODYNE[0];
    let cfg = SensorConfig::new(
        0,
        SensorModel::Vlp16,
        data_dir().join(e.calibration.unwrap_or_default()),
    );
    let mut p = lidarxdp::calibration::pipeline(&cfg)?;
    let mut out = Vec::new();
    for d in datagrams(e.captures[1])? {
        let ns = u64::try_from(d.timestamp.as_nanos()).unwrap_or(u64::MAX);
        p.push(&d.payload, ns, &mut out);
    }
    p.flush(&mut out);
    Ok(out)
}

/// Protocol seeds: every message kind built by the encoders (each as a raw message and as the
/// body after its prefix), and streams of a whole subscription.
fn protocol_seeds(root: &Path) -> Result<usize> {
    let mut c = Corpus::new(root, "protocol");
    let frames = vlp16_frames()?;
    let sensors: Vec<WireSensor> = VELODYNE
        .iter()
        .chain(HESAI)
        .chain(ROBOSENSE)
        .chain(OUSTER.iter().take(1))
        .enumerate()
        .map(|(i, e)| WireSensor {
            id: i as u16,
            name: format!("sensor{i}"),
            model: e.model.name().into(),
        })
        .collect();
    let hello = |n: usize| {
        let mut out = Vec::new();
        encode_hello(
            &Hello {
                server_name: "lidarxdp/0.1.0".into(),
                max_subscribers: 16,
                queue_depth: 4,
                server_time_ns: 1_673_400_472_138_016_708,
                min_version: 2,
                sensors: sensors.iter().take(n).cloned().collect(),
            },
            &mut out,
        );
        out
    };
    let sets: Vec<FieldSet> = [0x3ff, 0x007, 0x00f, 0x001, 0x200, 0x155, 0x2aa]
        .iter()
        .filter_map(|&b| FieldSet::from_bits(lidarxdp_core::layout::PointType::Autoware, b))
        .collect();
    let header = frames
        .first()
        .map(|f| f.header)
        .unwrap_or(FrameHeader::default());
    let mut messages: Vec<(String, Vec<u8>)> = vec![
        ("hello-0".into(), hello(0)),
        ("hello-1".into(), hello(1)),
        ("hello-all".into(), hello(sensors.len())),
    ];
    for (i, set) in sets.iter().enumerate() {
        let mut out = Vec::new();
        encode_frame_header_fields(&header, *set, 3, &mut out);
        messages.push((format!("frame-{i}"), out));
        let mut out = Vec::new();
        encode_subscribed(&[0, 2, 5], *set, true, &mut out);
        messages.push((format!("subscribed-{i}"), out));
    }
    for (i, s) in [
        Subscribe::default(),
        Subscribe {
            sensors: vec!["sensor0".into(), "sensor2".into()],
            fields: vec!["x".into(), "y".into(), "z".into()],
            ..Subscribe::default()
        },
        Subscribe {
            sensors: Vec::new(),
            fields: lidarxdp_core::point::POINT_FIELDS
                .iter()
                .map(|f| f.name.into())
                .collect(),
            ..Subscribe::default()
        },
    ]
    .iter()
    .enumerate()
    {
        let mut out = Vec::new();
        encode_subscribe(s, &mut out);
        messages.push((format!("subscribe-{i}"), out));
    }
    for code in [
        error_code::MALFORMED,
        error_code::UNSUPPORTED_VERSION,
        error_code::UNKNOWN_SENSOR,
        error_code::UNKNOWN_FIELD,
        error_code::UNEXPECTED_MESSAGE,
        error_code::STALLED,
    ] {
        let mut out = Vec::new();
        encode_error(code, "unknown sensor 'rear'", &mut out);
        messages.push((format!("error-{code}"), out));
    }
    for (i, payload) in [[0u8; 48], [0x5a; 48]].iter().enumerate() {
        let reading = lidarxdp_core::sensor::ImuReading {
            sample: lidarxdp_core::sensor::ouster::imu::parse(payload).unwrap(),
            stamp_ns: 1_700_000_000_000_000_000,
            host_ns: 1_700_000_000_000_250_000,
            clock: lidarxdp_core::frame::FrameClock::Sensor,
        };
        let mut out = Vec::new();
        lidarxdp_core::protocol::encode_imu(i as u16, &reading, &mut out);
        messages.push((format!("imu-{i}"), out));
    }
    for (name, m) in &messages {
        let mut raw = vec![ProtocolMode::Raw.byte()];
        raw.extend_from_slice(m);
        c.add(format!("{name}-raw"), raw);
        let t = u16::from_le_bytes([m[6], m[7]]);
        let mut body = vec![ProtocolMode::Body(t).byte()];
        body.extend_from_slice(&m[12..]);
        c.add(format!("{name}-body"), body);
    }
    // Streams: hello, acknowledgement, frames with a few real points each, then an error.
    for (i, set) in sets.iter().enumerate() {
        let mut s = vec![ProtocolMode::Stream.byte()];
        s.extend_from_slice(&hello(3));
        encode_subscribed(&[0], *set, false, &mut s);
        for f in frames.iter().take(3) {
            let points = &f.points.autoware()[..f.points.len().min(16)];
            if set.is_all() {
                encode_frame_header(
                    &f.header,
                    lidarxdp_core::layout::PointType::Autoware,
                    points.len() as u32,
                    &mut s,
                );
                s.extend_from_slice(bytemuck::cast_slice(points));
            } else {
                encode_frame_header_fields(&f.header, *set, points.len() as u32, &mut s);
                set.pack(bytemuck::cast_slice(points), &mut s);
            }
        }
        if i % 2 == 0 {
            encode_error(error_code::STALLED, "bye", &mut s);
        }
        c.add(format!("stream-{i}"), s);
    }
    c.write()
}

fn main() -> Result<()> {
    let root = PathBuf::from(
        std::env::args_os()
            .nth(1)
            .ok_or("usage: fuzz_seeds CORPUS_DIR")?,
    );
    let counts = [
        (
            "velodyne",
            decoder_seeds(&root, "velodyne", VELODYNE, &[0, OPT_A, OPT_B, OPT_C])?,
        ),
        (
            "hesai",
            decoder_seeds(&root, "hesai", HESAI, &[0, OPT_A, OPT_B])?,
        ),
        ("ouster", ouster_seeds(&root)?),
        (
            "robosense",
            decoder_seeds(&root, "robosense", ROBOSENSE, &[0, OPT_A, OPT_B])?,
        ),
        ("reassembly", reassembly_seeds(&root)?),
        ("protocol", protocol_seeds(&root)?),
    ];
    for (t, n) in counts {
        println!("fuzz_seeds: {n} seeds in {}", root.join(t).display());
    }
    Ok(())
}
