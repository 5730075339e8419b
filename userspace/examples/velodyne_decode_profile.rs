//! Profiling driver for the Velodyne decoders (for `valgrind --tool=callgrind`): decodes one
//! shared capture `N` times into a reused `Vec`, no criterion overhead.
//!
//! Run: `cargo run --release -p lidarxdp --example velodyne_decode_profile -- vlp16_strongest 20`.

use std::path::Path;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::point_buf::PointBuf;
use lidarxdp_core::sensor::calibration::VelodyneCalibration;
use lidarxdp_core::sensor::velodyne::multi::{self, MultiDecoder};
use lidarxdp_core::sensor::velodyne::{self, DecoderSettings, Vlp16Decoder};
use lidarxdp_core::sensor::{DecodeFlavor, SensorModel};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/velodyne/");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("vlp16_strongest", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let (model, pcap, cal) = match name {
        "vlp16_dual" => (
            SensorModel::Vlp16,
            "vlp16/vlp16_dual_nebula_603pkt.pcap",
            "vlp16/calibration/VLP16_nebula.yaml",
        ),
        "vlp32c_strongest" => (
            SensorModel::Vlp32c,
            "vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
            "vlp32c/calibration/VLP32_nebula.yaml",
        ),
        "vls128_strongest" => (
            SensorModel::Vls128,
            "vls128/vls128_strongest_nebula_2193pkt.pcap",
            "vls128/calibration/VLS128_nebula.yaml",
        ),
        _ => (
            SensorModel::Vlp16,
            "vlp16/vlp16_strongest_84pkt.pcap",
            "vlp16/calibration/VLP16db.yaml",
        ),
    };
    let pkts: Vec<Vec<u8>> = udp_payloads(Path::new(&format!("{DATA}{pcap}")))
        .expect("pcap")
        .filter_map(Result::ok)
        .filter(|d| d.dst_port == 2368 && d.payload.len() == velodyne::DATA_PACKET_LEN)
        .map(|d| d.payload)
        .collect();
    let calib = VelodyneCalibration::from_bytes(
        &lidarxdp::calibration::read(Path::new(&format!("{DATA}{cal}"))).unwrap(),
        multi::laser_count(model),
        Path::new(&format!("{DATA}{cal}")),
    )
    .expect("calibration");
    let settings = DecoderSettings {
        min_range_m: 0.3,
        max_range_m: 300.0,
        fov: None,
        // The default rules; `LIDARXDP_BENCH_NEBULA=1`: the `--nebula-compat` rules.
        flavor: if std::env::var_os("LIDARXDP_BENCH_NEBULA").is_some_and(|v| v == "1") {
            DecodeFlavor::Nebula
        } else {
            DecodeFlavor::Manual
        },
    };
    let mut out = PointBuf::with_capacity(pkts.len() * 384);
    let mut total = 0usize;
    if model == SensorModel::Vlp16 {
        let d = Vlp16Decoder::new(calib, settings);
        for _ in 0..n {
            out.clear();
            for p in &pkts {
                if let Ok(p) = velodyne::classify(p) {
                    d.decode_blocks(&p, |b| b.append(&mut out));
                }
            }
            total += std::hint::black_box(out.len());
        }
    } else {
        let d = MultiDecoder::new(model, &calib, settings);
        for _ in 0..n {
            out.clear();
            for p in &pkts {
                if let Ok(p) = multi::classify_model(model, p) {
                    d.decode_blocks(&p, |b| b.append(&mut out));
                }
            }
            total += std::hint::black_box(out.len());
        }
    }
    println!("{name}: {} packets x {n}, {total} points", pkts.len());
}
