//! Throughput of the Velodyne decoders on the shared captures, two groups:
//! * `velodyne_decode`: decode only (packet bytes in, points out through `decode_blocks` and
//!   `BlockPoints::append` into a reused `Vec` that holds one turn: it is cleared when the
//!   block-0 azimuth wraps, as the daemon's pooled frame buffer is reused per frame;
//!   classification and validation included; no scan assembly, no I/O). One `Vec` for the
//!   whole capture would measure DRAM write bandwidth instead (VLS-128: 24.5 MB per pass);
//!   the `velodyne_pipeline` group has the real frame buffers;
//! * `velodyne_pipeline`: the whole [`VelodyneStream`] (classification, sensor clock, decode,
//!   scan assembly into frames) on payloads already in memory (no pcap I/O).
//!
//! Reports points/s (criterion "elements", the decoded point count of the capture) per capture;
//! ns/packet = time per iteration / packets. Figures in `docs/benchmarks.md`, section
//! "Velodyne".
//!
//! Time is the decoding thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: the
//! machine is shared, and a wall clock would count the time other processes hold the core.
//!
//! Rules: the default (manual firing timing); `LIDARXDP_BENCH_NEBULA=1` measures the
//! `--nebula-compat` rules instead.
//!
//! Run: `cargo bench -p lidarxdp --bench velodyne`.

use std::path::Path;

use std::time::Duration;

use common::ThreadCpu;
use criterion::measurement::WallTime;
use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use lidarxdp::offline::udp_payloads;
use lidarxdp_core::HostTime;
use lidarxdp_core::layout::{POINT_TYPES, PointType};
use lidarxdp_core::sensor::calibration::VelodyneCalibration;
use lidarxdp_core::sensor::velodyne::VelodyneStream;
use lidarxdp_core::sensor::velodyne::multi::{self, MultiDecoder};
use lidarxdp_core::sensor::velodyne::{self, DecoderSettings, Vlp16Decoder};
use lidarxdp_core::sensor::{
    DecodeFlavor, PipelineOptions, SensorConfig, SensorModel, VendorDecoder,
};

mod common;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/velodyne/");

fn payloads(file: &str) -> Vec<(u64, Vec<u8>)> {
    udp_payloads(Path::new(&format!("{DATA}{file}")))
        .unwrap()
        .map(|d| d.unwrap())
        .filter(|d| d.dst_port == 2368 && d.payload.len() == velodyne::DATA_PACKET_LEN)
        .map(|d| (d.ts_ns, d.payload))
        .collect()
}

/// The rules measured: the default, or Nebula's with `LIDARXDP_BENCH_NEBULA=1`.
fn flavor() -> DecodeFlavor {
    if std::env::var_os("LIDARXDP_BENCH_NEBULA").is_some_and(|v| v == "1") {
        DecodeFlavor::Nebula
    } else {
        DecodeFlavor::Manual
    }
}

fn settings() -> DecoderSettings {
    DecoderSettings {
        min_range_m: 0.3,
        max_range_m: 300.0,
        fov: None,
        flavor: flavor(),
    }
}

enum Dec {
    Vlp16(Box<Vlp16Decoder>),
    Multi(MultiDecoder),
}

impl Dec {
    fn new(model: SensorModel, cal: &str) -> Self {
        let calib = VelodyneCalibration::from_bytes(
            &lidarxdp::calibration::read(Path::new(&format!("{DATA}{cal}"))).unwrap(),
            multi::laser_count(model),
            Path::new(&format!("{DATA}{cal}")),
        )
        .unwrap();
        match model {
            SensorModel::Vlp16 => Dec::Vlp16(Box::new(Vlp16Decoder::new(calib, settings()))),
            m => Dec::Multi(MultiDecoder::new(m, &calib, settings())),
        }
    }

    /// Decodes `pkts` into `out`, cleared at every turn; returns the number of points.
    fn run(
        &self,
        model: SensorModel,
        pkts: &[(u64, Vec<u8>)],
        out: &mut lidarxdp_core::point_buf::PointBuf,
    ) -> usize {
        out.clear();
        let mut total = 0;
        let mut last_az = 0u16;
        for (_, p) in pkts {
            let az = u16::from_le_bytes([p[2], p[3]]);
            if az < last_az {
                total += out.len();
                out.clear();
            }
            last_az = az;
            match self {
                Dec::Vlp16(d) => {
                    if let Ok(p) = velodyne::classify(p) {
                        d.decode_blocks(&p, |b| b.append(out));
                    }
                }
                Dec::Multi(d) => {
                    if let Ok(p) = multi::classify_model(model, p) {
                        d.decode_blocks(&p, |b| b.append(out));
                    }
                }
            }
        }
        total + out.len()
    }
}

fn bench(c: &mut Criterion<ThreadCpu>) {
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
    let mut counts = Vec::new();
    let mut g = c.benchmark_group("velodyne_decode");
    for (name, model, pcap, cal) in cases {
        let pkts = payloads(pcap);
        let dec = Dec::new(model, cal);
        let mut out = lidarxdp_core::point_buf::PointBuf::with_capacity(pkts.len().min(1024) * 384);
        let points = dec.run(model, &pkts, &mut out) as u64;
        eprintln!(
            "{name}: {} packets, {points} points ({:.1} per packet)",
            pkts.len(),
            points as f64 / pkts.len() as f64
        );
        g.throughput(Throughput::Elements(points));
        g.bench_function(name, |b| {
            b.iter(|| black_box(dec.run(model, black_box(&pkts), &mut out)))
        });
        counts.push(points);
    }
    g.finish();

    // Pipeline: one stream per capture, reused across iterations; each iteration replays the
    // capture one hour of host time later (the sensor clock is µs past the hour, so it stays
    // continuous) and flushes the last frame.
    let mut g = c.benchmark_group("velodyne_pipeline");
    for ((name, model, pcap, cal), points) in cases.into_iter().zip(counts) {
        let pkts = payloads(pcap);
        let cfg = SensorConfig::new(0, model, format!("{DATA}{cal}"));
        let opts = PipelineOptions {
            flavor: flavor(),
            ..Default::default()
        };
        let mut stream = VelodyneStream::new(
            &cfg,
            &lidarxdp::calibration::read(&cfg.calibration).unwrap(),
            opts,
        )
        .unwrap();
        let mut frames = Vec::new();
        let mut hour = 0u64;
        g.throughput(Throughput::Elements(points));
        // Every point layout (issue 37): `autoware` keeps the historical name.
        for t in POINT_TYPES {
            stream.set_point_type(t);
            let layout = match t {
                PointType::Autoware => String::new(),
                _ => format!("_{t}"),
            };
            g.bench_function(format!("{name}{layout}"), |b| {
                b.iter(|| {
                    hour += 1;
                    let shift = hour * 3_600_000_000_000;
                    frames.clear();
                    for (ts, p) in black_box(&pkts) {
                        let _ = stream.push(p, HostTime::both(ts + shift), &mut frames);
                    }
                    stream.flush(&mut frames);
                    black_box(frames.len())
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(ThreadCpu(WallTime))
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
