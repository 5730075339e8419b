//! RoboSense decode benchmarks (criterion): points/s and ns/packet, decode only (no I/O).
//!
//! * `helios16p/decode`: the 750 MSOP packets of `shared/data/robosense/helios16p`, decoded
//!   point by point by [`RobosenseDecoder`] (no frame assembly).
//! * `helios16p/pipeline`: the same packets through [`ScanPipeline`](lidarxdp_core::sensor::ScanPipeline) (decode + frame cut).
//! * `rs16|rs32/decode_synthetic`: no capture exists for these models; one synthetic packet
//!   with every channel returning (384 points), decoded repeatedly.
//!
//! Run: `cargo bench -p lidarxdp --bench robosense`. Figures: docs/benchmarks.md, "RoboSense".

use std::hint::black_box;
use std::path::Path;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use lidarxdp::offline::udp_payloads;
use lidarxdp_core::sensor::robosense::{
    self, AngleTable, BLOCK_LEN, DecoderSettings, HEADER_LEN, MSOP_MAGIC_V1, MsopPacket,
    PACKET_LEN, RobosenseDecoder,
};
use lidarxdp_core::sensor::{ReturnMode, SensorConfig, SensorModel};
use lidarxdp_core::valid::RangeGate;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/robosense/helios16p/"
);

fn settings() -> DecoderSettings {
    DecoderSettings {
        min_range_m: 0.2,
        max_range_m: 200.0,
        fov_cdeg: None,
    }
}

fn helios16p(c: &mut Criterion) {
    let pcap = format!("{DIR}helios16p_nebula_pr79.pcap");
    let csv = format!("{DIR}RobosenseHelios16P.csv");
    let msop: Vec<Vec<u8>> = udp_payloads(Path::new(&pcap))
        .unwrap()
        .map(Result::unwrap)
        .filter(|d| d.dst_port == 6699)
        .map(|d| d.payload)
        .collect();
    let spec = robosense::spec(SensorModel::Helios16p).unwrap();
    let dec = RobosenseDecoder::new(
        spec,
        AngleTable::from_bytes(
            &lidarxdp::calibration::read(Path::new(&csv)).unwrap(),
            16,
            Path::new(&csv),
        )
        .unwrap(),
        settings(),
    );
    let mut points = 0u64;
    for m in &msop {
        let p = MsopPacket::new_checked(&m[..], spec.header).unwrap();
        dec.decode(&p, ReturnMode::Strongest, |_| points += 1);
    }
    let mut g = c.benchmark_group("helios16p");
    g.throughput(Throughput::Elements(points));
    g.bench_function("decode", |b| {
        b.iter(|| {
            let mut acc = 0f32;
            for m in &msop {
                let p = MsopPacket::new_checked(&m[..], spec.header).unwrap();
                dec.decode(&p, ReturnMode::Strongest, |d| acc += d.point.x);
            }
            black_box(acc)
        })
    });
    let cfg = SensorConfig {
        range: RangeGate::from_m(0.2, 200.0).unwrap(),
        ..SensorConfig::new(0, SensorModel::Helios16p, csv)
    };
    // Pipeline construction (CSV read, trig table) is set-up, not measured.
    g.bench_function("pipeline", |b| {
        b.iter_batched(
            || lidarxdp::calibration::pipeline(&cfg).unwrap(),
            |mut p| {
                let mut out = Vec::new();
                for (i, m) in msop.iter().enumerate() {
                    p.push(m, i as u64 * 666_720, &mut out);
                }
                p.flush(&mut out);
                black_box(out.len())
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn synthetic(c: &mut Criterion) {
    let mut pkt = vec![0u8; PACKET_LEN];
    pkt[..8].copy_from_slice(&MSOP_MAGIC_V1);
    pkt[20..30].copy_from_slice(&[24, 2, 29, 12, 34, 56, 0, 0, 0, 0]);
    for blk in 0..12 {
        let o = HEADER_LEN + blk * BLOCK_LEN;
        pkt[o] = 0xFF;
        pkt[o + 1] = 0xEE;
        pkt[o + 2..o + 4].copy_from_slice(&(1000 + 20 * blk as u16).to_be_bytes());
        for ch in 0..32 {
            let d = 1000 + 37 * ch as u16 + blk as u16;
            pkt[o + 4 + 3 * ch..o + 6 + 3 * ch].copy_from_slice(&d.to_be_bytes());
            pkt[o + 6 + 3 * ch] = 50;
        }
    }
    let text: String = (0..32).map(|i| format!("{},{}\n", i - 16, 0)).collect();
    for (name, model) in [("rs16", SensorModel::Rs16), ("rs32", SensorModel::Rs32)] {
        let spec = robosense::spec(model).unwrap();
        let angles = AngleTable::from_csv_str(&text, spec.lasers, Path::new("synthetic")).unwrap();
        let dec = RobosenseDecoder::new(spec, angles, settings());
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Elements(384));
        g.bench_function("decode_synthetic", |b| {
            b.iter(|| {
                let p = MsopPacket::new_checked(black_box(&pkt[..]), spec.header).unwrap();
                let mut acc = 0f32;
                dec.decode(&p, ReturnMode::Strongest, |d| acc += d.point.x);
                black_box(acc)
            })
        });
        g.finish();
    }
}

criterion_group!(benches, helios16p, synthetic);
criterion_main!(benches);
