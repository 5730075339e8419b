//! Profiling driver for the whole per-sensor pipeline (for `valgrind --tool=callgrind`):
//! pushes every datagram of one shared capture through a fresh [`ScanPipeline`](lidarxdp_core::sensor::ScanPipeline) `N` times
//! (decode, sensor clock and time checks, scan cut, frame assembly), no criterion overhead.
//! Host time is the pcap record time. Range gate (0.3, 300) m for every model, so runs before
//! and after a change of the default ranges do the same work.
//!
//! Run: `cargo run --release -p lidarxdp --example pipeline_profile -- pandar64 10`; the
//! instructions of one pass are (count at N − count at M) / (N − M).

use std::path::Path;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};
use lidarxdp_core::valid::RangeGate;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("vlp16_dual", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let (model, pcap, cal) = match name {
        "vls128" => (
            SensorModel::Vls128,
            "velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap",
            "velodyne/vls128/calibration/VLS128_nebula.yaml",
        ),
        "pandar64" => (
            SensorModel::Pandar64,
            "hesai/pandar64/pandar64_nebula.pcap",
            "hesai/pandar64/Pandar64.csv",
        ),
        "pandarqt128" => (
            SensorModel::PandarQt128,
            "hesai/pandarqt128/pandarqt128_nebula.pcap",
            "hesai/pandarqt128/PandarQT128.csv",
        ),
        "os2_128" => (
            SensorModel::Ouster,
            "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.pcap",
            "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.json",
        ),
        "helios16p" => (
            SensorModel::Helios16p,
            "robosense/helios16p/helios16p_nebula_pr79.pcap",
            "robosense/helios16p/RobosenseHelios16P.csv",
        ),
        _ => (
            SensorModel::Vlp16,
            "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap",
            "velodyne/vlp16/calibration/VLP16_nebula.yaml",
        ),
    };
    let port = model.default_data_port();
    let pkts: Vec<(Vec<u8>, u64)> = udp_payloads(Path::new(&format!("{DATA}{pcap}")))
        .expect("pcap")
        .filter_map(Result::ok)
        .filter(|d| d.dst_port == port)
        .map(|d| (d.payload, d.ts_ns))
        .collect();
    let mut cfg = SensorConfig::new(0, model, format!("{DATA}{cal}"));
    cfg.range = RangeGate::from_m(0.3, 300.0).unwrap();
    let proto = lidarxdp::calibration::pipeline(&cfg).expect("pipeline");
    let mut out: Vec<Frame> = Vec::new();
    let mut points = 0usize;
    for _ in 0..n {
        let mut p = proto.clone();
        for (payload, t) in &pkts {
            p.push(payload, *t, &mut out);
            for f in out.drain(..) {
                points += f.points.len();
            }
        }
        p.flush(&mut out);
        for f in out.drain(..) {
            points += f.points.len();
        }
    }
    println!(
        "{name}: {} datagrams, {n} passes, {points} points",
        pkts.len()
    );
}
