//! Hesai decode throughput on the shared captures: every data packet of a capture pushed
//! through one [`ScanPipeline`] (decode + scan cutting + frame assembly). Not timed: pcap
//! parsing and pipeline construction (calibration, tables), done once before. Criterion
//! reports wall time per pass over the capture and points/s; before it, each model prints
//! on-CPU ns/packet and points/s (thread CPU time over 50 passes), the figures to trust on a
//! shared machine.
//!
//! Run: `cargo bench -p lidarxdp --bench hesai`.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lidarxdp::offline::udp_payloads;
use lidarxdp_core::sensor::{PipelineOptions, ScanPipeline, SensorConfig, SensorModel};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/hesai/");

/// `(capture folder, model, calibration, skip CRC)`; QT128 also runs with the CRC check off.
const CASES: [(&str, SensorModel, &str, bool); 7] = [
    ("pandar40p", SensorModel::Pandar40p, "Pandar40P.csv", false),
    ("pandar64", SensorModel::Pandar64, "Pandar64.csv", false),
    (
        "pandarqt64",
        SensorModel::PandarQt64,
        "PandarQT64.csv",
        false,
    ),
    (
        "pandarqt128",
        SensorModel::PandarQt128,
        "PandarQT128.csv",
        false,
    ),
    (
        "pandarqt128",
        SensorModel::PandarQt128,
        "PandarQT128.csv",
        true,
    ),
    (
        "pandarxt32",
        SensorModel::PandarXt32,
        "PandarXT32.csv",
        false,
    ),
    (
        "pandarxt32m",
        SensorModel::PandarXt32m,
        "PandarXT32M.csv",
        false,
    ),
];

/// CPU time of this thread, ns (`CLOCK_THREAD_CPUTIME_ID`): unlike wall time, not inflated
/// when the shared machine's other processes take the core.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

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

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("hesai_decode");
    g.sample_size(20);
    for (dir, model, csv, skip_crc) in CASES {
        let name = if skip_crc {
            format!("{dir}_nocrc")
        } else {
            dir.to_string()
        };
        let mut cfg = SensorConfig::new(0, model, format!("{DIR}{dir}/{csv}"));
        cfg.min_range_m = 0.05;
        let pcap = format!("{DIR}{dir}/{dir}_nebula.pcap");
        let packets: Vec<(Vec<u8>, u64)> = udp_payloads(Path::new(&pcap))
            .expect("pcap")
            .map(|d| {
                let d = d.expect("record");
                (d.payload, d.ts_ns)
            })
            .collect();
        let opts = PipelineOptions {
            hesai_skip_crc: skip_crc,
            ..Default::default()
        };
        let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts).expect("config");
        let points = run(&mut p, &packets);
        let t0 = thread_cpu_ns();
        let reps = 50;
        for _ in 0..reps {
            black_box(run(&mut p, &packets));
        }
        let ns = (thread_cpu_ns() - t0) as f64 / f64::from(reps);
        println!(
            "{name}: {} packets, {points} points; on-CPU {:.0} ns/packet, {:.1} M points/s",
            packets.len(),
            ns / packets.len() as f64,
            points as f64 / ns * 1e3
        );
        g.throughput(Throughput::Elements(points));
        g.bench_function(&name, |b| b.iter(|| black_box(run(&mut p, &packets))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
