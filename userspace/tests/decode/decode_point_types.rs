//! Every point layout (`point_type`, docs/sensors.md "Point layouts") on every shared capture:
//! the same frames as the `autoware` decode of the same capture, x, y, z bit for bit, and
//! every other field by its layout's documented rule from that same decode. The layouts' field
//! lists themselves are checked against the drivers' definitions in `point_type_fields`.
use std::path::Path;

use lidarxdp::offline::decode_pcap;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::layout::{
    HesaiPoint, Layout, OusterPoint, OusterXYZIR, POINT_TYPES, PointType, PointXYZI, PointXYZIRC,
    RoboSensePoint, VelodynePoint,
};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::sensor::{Family, SensorConfig, SensorModel};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

/// Every shared capture: (capture, calibration, model), paths under `DATA`.
pub const CAPTURES: [(&str, &str, SensorModel); 17] = [
    (
        "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap",
        "velodyne/vlp16/calibration/VLP16db.yaml",
        SensorModel::Vlp16,
    ),
    (
        "velodyne/vlp16/vlp16_strongest_84pkt.pcap",
        "velodyne/vlp16/calibration/VLP16db.yaml",
        SensorModel::Vlp16,
    ),
    (
        "velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap",
        "velodyne/vlp16/calibration/VLP16db.yaml",
        SensorModel::Vlp16,
    ),
    (
        "velodyne/vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
        "velodyne/vlp32c/calibration/VeloView-VLP-32C.yaml",
        SensorModel::Vlp32c,
    ),
    (
        "velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap",
        "velodyne/vls128/calibration/VLS128.yaml",
        SensorModel::Vls128,
    ),
    (
        "hesai/pandar40p/pandar40p_nebula.pcap",
        "hesai/pandar40p/Pandar40P.csv",
        SensorModel::Pandar40p,
    ),
    (
        "hesai/pandar64/pandar64_nebula.pcap",
        "hesai/pandar64/Pandar64.csv",
        SensorModel::Pandar64,
    ),
    (
        "hesai/pandarqt64/pandarqt64_nebula.pcap",
        "hesai/pandarqt64/PandarQT64.csv",
        SensorModel::PandarQt64,
    ),
    (
        "hesai/pandarqt128/pandarqt128_nebula.pcap",
        "hesai/pandarqt128/PandarQT128.csv",
        SensorModel::PandarQt128,
    ),
    (
        "hesai/pandarxt32/pandarxt32_nebula.pcap",
        "hesai/pandarxt32/PandarXT32.csv",
        SensorModel::PandarXt32,
    ),
    (
        "hesai/pandarxt32m/pandarxt32m_nebula.pcap",
        "hesai/pandarxt32m/PandarXT32M.csv",
        SensorModel::PandarXt32m,
    ),
    (
        "ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.pcap",
        "ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.json",
        SensorModel::Ouster,
    ),
    (
        "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.pcap",
        "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.json",
        SensorModel::Ouster,
    ),
    (
        "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap",
        "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.json",
        SensorModel::Ouster,
    ),
    (
        "ouster/os1-64/os1-64_legacy_fw1.1x_3frames.pcap",
        "ouster/os1-64/os1-64_legacy_fw1.1x_3frames.json",
        SensorModel::Ouster,
    ),
    (
        "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.pcap",
        "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.json",
        SensorModel::Ouster,
    ),
    (
        "robosense/helios16p/helios16p_nebula_pr79.pcap",
        "robosense/helios16p/RobosenseHelios16P.csv",
        SensorModel::Helios16p,
    ),
];

/// The frames of `capture` decoded into layout `t`.
fn decode(capture: &str, calibration: &str, model: SensorModel, t: PointType) -> Vec<Frame> {
    let cfg = SensorConfig {
        point_type: t,
        ..SensorConfig::new(0, model, format!("{DATA}{calibration}"))
    };
    decode_pcap(Path::new(&format!("{DATA}{capture}")), &cfg, None)
        .unwrap_or_else(|e| panic!("{capture} as {t}: {e}"))
        .0
}

/// The largest distance of a firing from its packet's time stamp of any supported sensor, ns:
/// a VLP-16 single-return packet spans 24 firing sequences of 55.296 µs (1.33 ms) after it; a
/// Hesai packet's time stamp may be its last block's, its earlier blocks fired before it.
const MAX_FIRING_OFFSET_NS: f64 = 1_400_000.0;

/// Checks point `p` of layout `t` (its bytes) against the `autoware` point `r` of the same
/// decode, in a frame starting at `start_ns`, by the layout's rule.
fn check(t: PointType, family: Family, p: &[u8], r: &PointXYZIRCAEDT, start_ns: u64, at: &str) {
    fn read<L: Layout>(p: &[u8]) -> L {
        bytemuck::pod_read_unaligned(p)
    }
    let bits = |x: f32| x.to_bits();
    let xyz = |x: f32, y: f32, z: f32| {
        assert_eq!(
            (bits(x), bits(y), bits(z)),
            (bits(r.x), bits(r.y), bits(r.z)),
            "{at}: x y z"
        )
    };
    let inten = f32::from(r.intensity);
    match t {
        PointType::Autoware => assert_eq!(&read::<PointXYZIRCAEDT>(p), r, "{at}"),
        PointType::AutowareXyzirc => {
            let q = read::<PointXYZIRC>(p);
            xyz(q.x, q.y, q.z);
            assert_eq!(
                (q.intensity, q.return_type, q.channel),
                (r.intensity, r.return_type, r.channel),
                "{at}"
            );
        }
        PointType::Xyzi => {
            let q = read::<PointXYZI>(p);
            xyz(q.x, q.y, q.z);
            assert_eq!(q.intensity, inten, "{at}");
        }
        PointType::Velodyne => {
            let q = read::<VelodynePoint>(p);
            let (x, y, z, i, ring, time) = (q.x, q.y, q.z, q.intensity, q.ring, q.time);
            xyz(x, y, z);
            assert_eq!((i, ring), (inten, r.channel), "{at}");
            assert_eq!(
                time,
                (f64::from(r.time_stamp) * 1e-9) as f32,
                "{at}: time, s"
            );
        }
        PointType::Ouster => {
            let q = read::<OusterPoint>(p);
            xyz(q.x, q.y, q.z);
            let range = (f64::from(r.distance) * 1000.0).round() as u32;
            assert_eq!(
                (q.t, q.ring, q.range),
                (r.time_stamp, r.channel, range),
                "{at}"
            );
            if family != Family::Ouster {
                // Other vendors have no signal or near-infrared channel.
                assert_eq!(
                    (q.intensity, q.reflectivity, q.ambient),
                    (inten, u16::from(r.intensity), 0),
                    "{at}"
                );
            }
        }
        PointType::OusterXyzir => {
            let q = read::<OusterXYZIR>(p);
            xyz(q.x, q.y, q.z);
            assert_eq!(q.ring, r.channel, "{at}");
            if family != Family::Ouster {
                assert_eq!(q.intensity, inten, "{at}");
            }
        }
        PointType::Hesai => {
            let q = read::<HesaiPoint>(p);
            let (x, y, z, i, ring, ts) = (q.x, q.y, q.z, q.intensity, q.ring, q.timestamp);
            xyz(x, y, z);
            assert_eq!((i, ring), (inten, r.channel), "{at}");
            // The packet's time: within a packet's span of the firing.
            let firing = (start_ns + u64::from(r.time_stamp)) as f64;
            let off = firing - ts * 1e9;
            assert!(
                off.abs() < MAX_FIRING_OFFSET_NS,
                "{at}: timestamp {ts} s is {off} ns from the firing"
            );
        }
        PointType::Robosense => {
            let q = read::<RoboSensePoint>(p);
            let (x, y, z, i, ring, ts) = (q.x, q.y, q.z, q.intensity, q.ring, q.timestamp);
            xyz(x, y, z);
            assert_eq!((i, ring), (inten, r.channel), "{at}");
            let firing = (start_ns + u64::from(r.time_stamp)) as f64 * 1e-9;
            assert_eq!(ts, firing, "{at}: timestamp, s since the epoch");
        }
    }
}

/// Every layout on every capture: the same frames (headers, point counts) as `autoware`, x, y,
/// z bit for bit, the other fields by rule; `point_step` bytes per point.
#[test]
fn every_layout_on_every_capture() {
    for (capture, calibration, model) in CAPTURES {
        let reference = decode(capture, calibration, model, PointType::Autoware);
        let points: usize = reference.iter().map(|f| f.points.len()).sum();
        assert!(points > 1000, "{capture}: {points} points");
        for t in POINT_TYPES {
            let frames = decode(capture, calibration, model, t);
            assert_eq!(frames.len(), reference.len(), "{capture} as {t}: frames");
            for (f, r) in frames.iter().zip(&reference) {
                assert_eq!(f.header, r.header, "{capture} as {t}: header");
                assert_eq!(f.points.point_type(), t);
                let step = t.point_step();
                let bytes = f.points.as_bytes();
                assert_eq!(
                    bytes.len(),
                    r.points.len() * step,
                    "{capture} as {t}: bytes"
                );
                for (k, (p, q)) in bytes
                    .chunks_exact(step)
                    .zip(r.points.autoware())
                    .enumerate()
                {
                    let at = format!("{capture} as {t}: frame {} point {k}", f.header.sequence);
                    check(t, model.family(), p, q, r.header.start_ns, &at);
                }
            }
        }
    }
}

/// The Hesai layout carries its packet's time: every point of a Hesai packet the same value, so
/// a frame holds about as many distinct times as packets, not one per firing.
#[test]
fn hesai_layout_times_are_packet_times() {
    let (capture, calibration, model) = CAPTURES[6];
    let frames = decode(capture, calibration, model, PointType::Hesai);
    let f = &frames[1];
    let mut times: Vec<u64> = f
        .points
        .typed::<HesaiPoint>()
        .unwrap()
        .iter()
        .map(|p| {
            let t = p.timestamp;
            t.to_bits()
        })
        .collect();
    times.sort_unstable();
    times.dedup();
    let packets = f.header.packets_received as usize;
    assert!(
        (packets / 2..=packets + 1).contains(&times.len()),
        "{} distinct times for {packets} packets",
        times.len()
    );
}
