//! Hesai decode throughput on the shared captures: every data packet of a capture pushed
//! through one [`ScanPipeline`] (validation + CRC + decode + scan cutting + frame assembly).
//! Not timed: pcap parsing and pipeline construction (calibration, tables), done once before.
//! Criterion reports wall time per pass over the capture and points/s; before it, each case
//! prints on-CPU ns/packet and points/s (thread CPU time over 50 passes), the figures to trust
//! on a shared machine.
//!
//! Every capture is dual return. The single-return rows run a stream made from it
//! ([`single_return`]): each output packet holds the first block of every return pair of two
//! consecutive dual packets (so it has the model's block count, each block a firing of its
//! own), with the tail of the first one, the return-mode byte set to 0x37 (strongest), the
//! header's return count (12-byte headers) set to 1, the UDP sequence renumbered
//! consecutively and the CRCs recomputed.
//!
//! Run: `cargo bench -p lidarxdp --bench hesai`. `HESAI_QUICK=1`: the on-CPU figures only (no
//! criterion runs); `HESAI_ONLY=pandar64_dual`: only the cases whose name holds that text;
//! `HESAI_REPS=n`: passes for the on-CPU figures (default 50). With `HESAI_DIGEST=1` it prints instead a
//! digest of every frame (header and every point field, bit for bit) per capture and setting
//! (README-like ranges, min 0.05 m, a limited field of view, single return), to check that a
//! decoder change keeps the output identical.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lidarxdp::offline::udp_payloads;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::hesai::layout::{self, HeaderKind};
use lidarxdp_core::sensor::hesai::packet::crc32_mpeg2;
use lidarxdp_core::sensor::{PipelineOptions, ScanPipeline, SensorConfig, SensorModel};
use lidarxdp_core::valid::{Degrees, Fov, RangeGate};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/hesai/");

/// `(capture folder, model, calibration)`.
const CAPTURES: [(&str, SensorModel, &str); 6] = [
    ("pandar40p", SensorModel::Pandar40p, "Pandar40P.csv"),
    ("pandar64", SensorModel::Pandar64, "Pandar64.csv"),
    ("pandarqt64", SensorModel::PandarQt64, "PandarQT64.csv"),
    ("pandarqt128", SensorModel::PandarQt128, "PandarQT128.csv"),
    ("pandarxt32", SensorModel::PandarXt32, "PandarXT32.csv"),
    ("pandarxt32m", SensorModel::PandarXt32m, "PandarXT32M.csv"),
];

/// One pass over the capture; returns the points published.
fn run(p: &mut ScanPipeline, packets: &[(Vec<u8>, u64)]) -> u64 {
    let before = p.counters().points;
    let mut out = Vec::with_capacity(8);
    for (d, t) in packets {
        p.push(d, *t, &mut out);
        out.clear();
    }
    p.flush(&mut out);
    p.counters().points - before
}

/// The capture's data packets with their pcap times.
fn load(dir: &str) -> Vec<(Vec<u8>, u64)> {
    let pcap = format!("{DIR}{dir}/{dir}_nebula.pcap");
    udp_payloads(Path::new(&pcap))
        .expect("pcap")
        .map(|d| {
            let d = d.expect("record");
            (d.payload, d.ts_ns)
        })
        .collect()
}

/// A single-return stream made from a dual-return one (see the crate documentation): output
/// packet `i` takes the first block of each return pair of dual packets `2i` and `2i + 1`.
fn single_return(model: SensorModel, dual: &[(Vec<u8>, u64)]) -> Vec<(Vec<u8>, u64)> {
    let l = layout::layout(model).expect("layout");
    let bl = l.block_len();
    let h = l.header_len();
    let t = l.tail_offset();
    let mut out = Vec::with_capacity(dual.len() / 2);
    for (i, pair) in dual.chunks_exact(2).enumerate() {
        let (a, b) = (&pair[0].0, &pair[1].0);
        let mut p = a.clone();
        let sources = (0..l.blocks).step_by(2).map(|g| (a, g));
        let sources = sources.chain((0..l.blocks).step_by(2).map(|g| (b, g)));
        for (k, (src, g)) in sources.enumerate() {
            let (o, s) = (h + k * bl, h + g * bl);
            p[o..o + bl].copy_from_slice(&src[s..s + bl]);
        }
        if l.header == HeaderKind::Long12 {
            p[10] = 1;
        }
        p[t + l.t_return_mode] = 0x37;
        let seq = l
            .t_udp_seq
            .map(|o| t + o)
            .or((p.len() == l.base_len() + 4).then_some(l.base_len()));
        if let Some(o) = seq {
            p[o..o + 4].copy_from_slice(&(i as u32 + 1).to_le_bytes());
        }
        if l.body_crc {
            let e = l.body_end();
            let c = crc32_mpeg2(&p[h..e]);
            p[e..e + 4].copy_from_slice(&c.to_le_bytes());
        }
        if let Some(c) = l.t_crc {
            let v = crc32_mpeg2(&p[t..t + c]);
            p[t + c..t + c + 4].copy_from_slice(&v.to_le_bytes());
        }
        out.push((p, pair[0].1));
    }
    out
}

/// Digest of every frame: header and each point's fields, bit for bit.
fn digest(frames: &[Frame]) -> u64 {
    let mut s = DefaultHasher::new();
    for f in frames {
        format!("{:?}", f.header).hash(&mut s);
        f.points.len().hash(&mut s);
        for q in f.points.autoware() {
            (q.x.to_bits(), q.y.to_bits(), q.z.to_bits()).hash(&mut s);
            (q.intensity, q.return_type, q.channel).hash(&mut s);
            (q.azimuth.to_bits(), q.elevation.to_bits()).hash(&mut s);
            (q.distance.to_bits(), q.time_stamp).hash(&mut s);
        }
    }
    s.finish()
}

/// A digest setting: `(name, min range m, max range m (negative: default), field of view,
/// cut angle °)`.
type Setting = (&'static str, f32, f32, Option<(f64, f64)>, f64);

/// Prints a digest per capture and setting (`HESAI_DIGEST=1`).
fn digests() {
    for (dir, model, csv) in CAPTURES {
        let dual = load(dir);
        let single = single_return(model, &dual);
        let settings: [Setting; 5] = [
            ("default", -1.0, -1.0, None, 0.0),
            ("min0.05", 0.05, -1.0, None, 0.0),
            ("range2-30,cut250", 2.0, 30.0, None, 250.0),
            ("fov20-200", 0.05, -1.0, Some((20.0, 200.0)), 100.0),
            ("fov300-60", 1.0, -1.0, Some((300.0, 60.0)), 10.0),
        ];
        for (input, packets) in [("dual", &dual), ("single", &single)] {
            for (name, min, max, fov, cut) in settings {
                let mut cfg = SensorConfig::new(0, model, format!("{DIR}{dir}/{csv}"));
                if min >= 0.0 {
                    cfg.range = RangeGate::from_m(min, cfg.range.max().get()).unwrap();
                }
                if max >= 0.0 {
                    cfg.range = RangeGate::from_m(cfg.range.min().get(), max).unwrap();
                }
                cfg.cut_angle = Degrees::new(cut).unwrap();
                let opts = PipelineOptions {
                    fov: fov.map(|(a, b)| Fov::from_deg(a, b).unwrap()),
                    ..Default::default()
                };
                let mut p =
                    lidarxdp::calibration::pipeline_with_options(&cfg, opts).expect("config");
                let mut frames = Vec::new();
                for (d, t) in packets.iter() {
                    p.push(d, *t, &mut frames);
                }
                p.flush(&mut frames);
                let pts: usize = frames.iter().map(|f| f.points.len()).sum();
                println!(
                    "{dir} {input} {name}: {} frames, {pts} points, digest {:016x}",
                    frames.len(),
                    digest(&frames)
                );
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    if std::env::var_os("HESAI_DIGEST").is_some() {
        digests();
        return;
    }
    let only = std::env::var("HESAI_ONLY").ok();
    let quick = std::env::var_os("HESAI_QUICK").is_some();
    let mut g = c.benchmark_group("hesai_decode");
    g.sample_size(20);
    for (dir, model, csv) in CAPTURES {
        let dual = load(dir);
        let single = single_return(model, &dual);
        let skip = [false, true];
        for (input, packets) in [("dual", &dual), ("single", &single)] {
            // QT128 also runs with the CRC check off.
            let n = if model == SensorModel::PandarQt128 {
                2
            } else {
                1
            };
            for &skip_crc in &skip[..n] {
                let name = format!("{dir}_{input}{}", if skip_crc { "_nocrc" } else { "" });
                if only.as_deref().is_some_and(|o| !name.contains(o)) {
                    continue;
                }
                let mut cfg = SensorConfig::new(0, model, format!("{DIR}{dir}/{csv}"));
                cfg.range = RangeGate::from_m(0.05, cfg.range.max().get()).unwrap();
                let opts = PipelineOptions {
                    hesai_skip_crc: skip_crc,
                    ..Default::default()
                };
                let mut p =
                    lidarxdp::calibration::pipeline_with_options(&cfg, opts).expect("config");
                let points = run(&mut p, packets);
                let t0 = lidarxdp::capture::thread_cpu_ns();
                let reps = std::env::var("HESAI_REPS")
                    .ok()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(50);
                for _ in 0..reps {
                    black_box(run(&mut p, packets));
                }
                let ns = (lidarxdp::capture::thread_cpu_ns() - t0) as f64 / f64::from(reps);
                println!(
                    "{name}: {} packets, {points} points; on-CPU {:.0} ns/packet, {:.1} M points/s",
                    packets.len(),
                    ns / packets.len() as f64,
                    points as f64 / ns * 1e3
                );
                if quick {
                    continue;
                }
                g.throughput(Throughput::Elements(points));
                g.bench_function(&name, |b| b.iter(|| black_box(run(&mut p, packets))));
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
