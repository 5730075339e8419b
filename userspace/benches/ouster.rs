//! Ouster decode throughput on the shared captures (decode + frame assembly, no I/O).
//!
//! One iteration pushes every lidar packet of a capture's frame through an [`OusterStream`] and
//! flushes it, once per point layout (`_xyzi`, ...; none: `autoware`). Throughput is reported in pixels (`pixels_per_column × columns`, every pixel
//! whether or not it holds a return); divide the time by the packet count for ns/packet.
//! Time is the decoding thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, as the Velodyne
//! benchmark). Run: `cargo bench -p lidarxdp --bench ouster`. Figures: docs/benchmarks.md,
//! "Ouster".

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use common::ThreadCpu;
use criterion::measurement::WallTime;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lidarxdp::offline::udp_payloads;
use lidarxdp_core::HostTime;
use lidarxdp_core::layout::{POINT_TYPES, PointType};
use lidarxdp_core::sensor::ouster::OusterStream;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::{PipelineOptions, SensorConfig, SensorModel, VendorDecoder};
use lidarxdp_core::valid::RangeGate;

mod common;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/ouster/");

fn bench(c: &mut Criterion<ThreadCpu>) {
    let mut g = c.benchmark_group("ouster_decode");
    g.measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    for (name, base) in [
        ("os2-128_RNG19", "os2-128/OS-2-128-U1_v2.3.0_1024x10"),
        ("os0-128_RNG15", "os0-128/OS-0-128-U1_v2.3.0_1024x10"),
        ("os0-32_RNG19_DUAL", "os0-32/OS-0-32-U1_v2.2.0_1024x10"),
        ("os1-32_LEGACY", "os1-32/OS-1-32-G_v2.1.1_1024x10"),
        ("os1-64_LEGACY_fw1", "os1-64/os1-64_legacy_fw1.1x_3frames"),
    ] {
        let json = format!("{DIR}{base}.json");
        let meta = OusterMetadata::from_bytes(
            &lidarxdp::calibration::read(Path::new(&json)).unwrap(),
            Path::new(&json),
        )
        .unwrap();
        let len = meta.format.packet_len();
        let packets: Vec<(Vec<u8>, u64)> = udp_payloads(Path::new(&format!("{DIR}{base}.pcap")))
            .unwrap()
            .map(Result::unwrap)
            .filter(|d| d.dst_port == 7502 && d.payload.len() == len)
            .map(|d| (d.payload, d.ts_ns))
            .collect();
        let pixels =
            (packets.len() * meta.format.columns_per_packet * meta.format.pixels_per_column) as u64;
        // The range filter the figures in docs/benchmarks.md were measured with.
        let cfg = SensorConfig {
            range: RangeGate::from_m(0.3, 300.0).unwrap(),
            ..SensorConfig::new(0, SensorModel::Ouster, json)
        };
        let mut s = OusterStream::new(
            &cfg,
            &lidarxdp::calibration::read(&cfg.calibration).unwrap(),
            PipelineOptions::default(),
        )
        .unwrap();
        let mut out = Vec::with_capacity(4);
        g.throughput(Throughput::Elements(pixels));
        // Every point layout (issue 37): `autoware` keeps the historical name.
        for t in POINT_TYPES {
            s.set_point_type(t);
            let layout = match t {
                PointType::Autoware => String::new(),
                _ => format!("_{t}"),
            };
            g.bench_function(format!("{name}_{}pkts{layout}", packets.len()), |b| {
                b.iter(|| {
                    out.clear();
                    s.reset();
                    for (p, t) in &packets {
                        let _ = s.push(black_box(p), HostTime::both(*t), &mut out);
                    }
                    s.flush(&mut out);
                    black_box(out.len())
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu(WallTime));
    targets = bench
}
criterion_main!(benches);
