//! Decode-only throughput of the Velodyne decoders on the shared captures (packet bytes in,
//! points in a reused `Vec` out; no scan assembly, no I/O). Reports points/s (criterion
//! "elements") per capture; ns/packet = time per iteration / packets. Figures in
//! `docs/benchmarks.md`, section "Velodyne".
//!
//! Run: `cargo bench -p lidarxdp --bench velodyne`.

use std::path::Path;

use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use lidarxdp::offline::udp_payloads;
use lidarxdp::point::PointXYZIRCAEDT;
use lidarxdp::sensor::calibration::VelodyneCalibration;
use lidarxdp::sensor::velodyne::multi::{self, MultiDecoder};
use lidarxdp::sensor::velodyne::{self, DecoderSettings, Vlp16Decoder};
use lidarxdp::sensor::{DecodeFlavor, SensorModel};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/velodyne/");

fn payloads(file: &str) -> Vec<Vec<u8>> {
    udp_payloads(Path::new(&format!("{DATA}{file}")))
        .unwrap()
        .map(|d| d.unwrap())
        .filter(|d| d.dst_port == 2368 && d.payload.len() == velodyne::DATA_PACKET_LEN)
        .map(|d| d.payload)
        .collect()
}

fn settings() -> DecoderSettings {
    DecoderSettings {
        min_range_m: 0.3,
        max_range_m: 300.0,
        fov: None,
        flavor: DecodeFlavor::Nebula,
    }
}

enum Dec {
    Vlp16(Vlp16Decoder),
    Multi(MultiDecoder),
}

impl Dec {
    fn new(model: SensorModel, cal: &str) -> Self {
        let calib = VelodyneCalibration::from_file(
            Path::new(&format!("{DATA}{cal}")),
            multi::laser_count(model),
        )
        .unwrap();
        match model {
            SensorModel::Vlp16 => Dec::Vlp16(Vlp16Decoder::new(calib, settings())),
            m => Dec::Multi(MultiDecoder::new(m, &calib, settings())),
        }
    }

    fn run(&self, model: SensorModel, pkts: &[Vec<u8>], out: &mut Vec<PointXYZIRCAEDT>) {
        out.clear();
        for p in pkts {
            match self {
                Dec::Vlp16(d) => {
                    if let Ok(p) = velodyne::classify(p) {
                        d.decode(&p, |dp| out.push(dp.point));
                    }
                }
                Dec::Multi(d) => {
                    if let Ok(p) = multi::classify_model(model, p) {
                        d.decode(&p, |dp| out.push(dp.point));
                    }
                }
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let cases = [
        (
            "vlp16_strongest",
            SensorModel::Vlp16,
            "vlp16/vlp16_strongest_84pkt.pcap",
            "vlp16/calibration/VLP16db.yaml",
        ),
        (
            "vlp16_dual",
            SensorModel::Vlp16,
            "vlp16/vlp16_dual_nebula_603pkt.pcap",
            "vlp16/calibration/VLP16_nebula.yaml",
        ),
        (
            "vlp32c_strongest",
            SensorModel::Vlp32c,
            "vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
            "vlp32c/calibration/VLP32_nebula.yaml",
        ),
        (
            "vls128_strongest",
            SensorModel::Vls128,
            "vls128/vls128_strongest_nebula_2193pkt.pcap",
            "vls128/calibration/VLS128_nebula.yaml",
        ),
    ];
    let mut g = c.benchmark_group("velodyne_decode");
    for (name, model, pcap, cal) in cases {
        let pkts = payloads(pcap);
        let dec = Dec::new(model, cal);
        let mut out = Vec::with_capacity(pkts.len() * 384);
        dec.run(model, &pkts, &mut out);
        let points = out.len() as u64;
        eprintln!(
            "{name}: {} packets, {points} points ({:.1} per packet)",
            pkts.len(),
            points as f64 / pkts.len() as f64
        );
        g.throughput(Throughput::Elements(points));
        g.bench_function(name, |b| {
            b.iter(|| {
                dec.run(model, black_box(&pkts), &mut out);
                black_box(out.len())
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
