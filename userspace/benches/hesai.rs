//! Hesai decode throughput on the shared captures: every data packet of a capture pushed
//! through one [`ScanPipeline`] (decode + scan cutting + frame assembly). Not timed: pcap
//! parsing and pipeline construction (calibration, tables), done once before. Criterion
//! reports time per pass over the capture and points/s; ns/packet is printed per model.
//!
//! Run: `cargo bench -p lidarxdp --bench hesai`.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lidarxdp::offline::udp_payloads;
use lidarxdp::sensor::{ScanPipeline, SensorConfig, SensorModel};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/hesai/");

const CASES: [(&str, SensorModel, &str); 6] = [
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

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("hesai_decode");
    g.sample_size(20);
    for (dir, model, csv) in CASES {
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
        let mut p = ScanPipeline::new(&cfg).expect("config");
        let points = run(&mut p, &packets);
        let t0 = std::time::Instant::now();
        let reps = 20;
        for _ in 0..reps {
            black_box(run(&mut p, &packets));
        }
        let ns = t0.elapsed().as_nanos() as f64 / f64::from(reps);
        println!(
            "{dir}: {} packets, {points} points; {:.0} ns/packet, {:.1} M points/s",
            packets.len(),
            ns / packets.len() as f64,
            points as f64 / ns * 1e3
        );
        g.throughput(Throughput::Elements(points));
        g.bench_function(dir, |b| b.iter(|| black_box(run(&mut p, &packets))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
