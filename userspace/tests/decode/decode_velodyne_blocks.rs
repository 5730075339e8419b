//! The three consumers of a decoded Velodyne block agree exactly, on every shared Velodyne
//! capture, for both decoder flavours, with and without a field of view:
//! * `decode` (one `DecodedPoint` per point, `BlockPoints::for_each`);
//! * `decode_blocks` + `BlockPoints::append` (dense SIMD compaction or the sparse walk);
//! * `decode_blocks` + `BlockPoints::append_timed` (points, azimuths and time stamps, the scan
//!   assembler's rule `packet + offset − start`, saturating).
//!
//! Data: `shared/data/velodyne/` (README of each folder): VLP-16 strongest (84 packets) and
//! dual (603), the VLP-16 capture whose product byte says HDL-32E, VLP-32C (379), VLS-128
//! (2193).

use std::path::Path;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::point_buf::PointBuf;
use lidarxdp_core::scan::PointBatch;
use lidarxdp_core::sensor::calibration::VelodyneCalibration;
use lidarxdp_core::sensor::velodyne::multi::{self, MultiDecoder};
use lidarxdp_core::sensor::velodyne::{
    self, BlockPoints, DecodedPoint, DecoderSettings, Packet, VelodyneFov, Vlp16Decoder,
};
use lidarxdp_core::sensor::{DecodeFlavor, SensorModel};
use lidarxdp_core::valid::Fov;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/velodyne/");

const CASES: [(SensorModel, &str, &str); 5] = [
    (
        SensorModel::Vlp16,
        "vlp16/vlp16_strongest_84pkt.pcap",
        "vlp16/calibration/VLP16db.yaml",
    ),
    (
        SensorModel::Vlp16,
        "vlp16/vlp16_dual_nebula_603pkt.pcap",
        "vlp16/calibration/VLP16_nebula.yaml",
    ),
    (
        SensorModel::Vlp16,
        "vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap",
        "vlp16/calibration/VLP16db.yaml",
    ),
    (
        SensorModel::Vlp32c,
        "vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
        "vlp32c/calibration/VLP32_nebula.yaml",
    ),
    (
        SensorModel::Vls128,
        "vls128/vls128_strongest_nebula_2193pkt.pcap",
        "vls128/calibration/VLS128_nebula.yaml",
    ),
];

enum Dec {
    Vlp16(Box<Vlp16Decoder>),
    Multi(MultiDecoder),
}

impl Dec {
    fn classify<'a>(&self, model: SensorModel, p: &'a [u8]) -> Option<Packet<&'a [u8]>> {
        match self {
            Dec::Vlp16(_) => velodyne::classify(p).ok(),
            Dec::Multi(_) => multi::classify_model(model, p).ok(),
        }
    }
    fn decode(&self, p: &Packet<&[u8]>, emit: impl FnMut(DecodedPoint)) {
        match self {
            Dec::Vlp16(d) => d.decode(p, emit),
            Dec::Multi(d) => d.decode(p, emit),
        }
    }
    fn blocks(&self, p: &Packet<&[u8]>, sink: impl FnMut(&BlockPoints<'_>)) {
        match self {
            Dec::Vlp16(d) => d.decode_blocks(p, sink),
            Dec::Multi(d) => d.decode_blocks(p, sink),
        }
    }
}

fn same_bits(a: &[PointXYZIRCAEDT], b: &[PointXYZIRCAEDT]) -> bool {
    bytemuck::cast_slice::<_, u8>(a) == bytemuck::cast_slice::<_, u8>(b)
}

#[test]
fn for_each_append_and_append_timed_agree_on_every_capture() {
    let fovs = [
        None,
        Some(VelodyneFov::from(Fov::from_deg(0.0, 359.0).unwrap())),
        Some(VelodyneFov::from(Fov::from_deg(270.0, 90.0).unwrap())),
    ];
    let mut total = 0usize;
    for (model, pcap, cal) in CASES {
        let calib = VelodyneCalibration::from_bytes(
            &lidarxdp::calibration::read(Path::new(&format!("{DATA}{cal}"))).unwrap(),
            multi::laser_count(model),
            Path::new(&format!("{DATA}{cal}")),
        )
        .unwrap();
        let payloads: Vec<Vec<u8>> = udp_payloads(Path::new(&format!("{DATA}{pcap}")))
            .unwrap()
            .map(|d| d.unwrap().payload)
            .collect();
        for flavor in [DecodeFlavor::Nebula, DecodeFlavor::Manual] {
            for fov in fovs {
                let settings = DecoderSettings {
                    min_range_m: 0.3,
                    max_range_m: 300.0,
                    fov,
                    flavor,
                };
                let dec = match model {
                    SensorModel::Vlp16 => {
                        Dec::Vlp16(Box::new(Vlp16Decoder::new(calib.clone(), settings)))
                    }
                    m => Dec::Multi(MultiDecoder::new(m, &calib, settings)),
                };
                let mut reference: Vec<DecodedPoint> = Vec::new();
                let mut appended = PointBuf::new();
                let (mut timed, mut azimuths) = (PointBuf::new(), Vec::new());
                let mut expected_times = Vec::new();
                for (i, p) in payloads.iter().enumerate() {
                    let Some(packet) = dec.classify(model, p) else {
                        continue;
                    };
                    let before = reference.len();
                    dec.decode(&packet, |d| reference.push(d));
                    dec.blocks(&packet, |b| b.append(&mut appended));
                    // Alternate a frame start before and after the packet time, and one
                    // far in the past, so every saturation branch runs.
                    let packet_ns = 1_000_000_000 + i as u64 * 1_000;
                    let start_ns = match i % 3 {
                        0 => packet_ns - 500,
                        1 => packet_ns + 20_000,
                        _ => 0,
                    };
                    let mut batch = PointBatch {
                        points: &mut timed,
                        azimuths: &mut azimuths,
                        times: None,
                        packet_ns,
                        start_ns,
                    };
                    dec.blocks(&packet, |b| b.append_timed(&mut batch));
                    expected_times.extend(reference[before..].iter().map(|d| {
                        (packet_ns + u64::from(d.offset_ns))
                            .saturating_sub(start_ns)
                            .min(u64::from(u32::MAX)) as u32
                    }));
                }
                let points: Vec<PointXYZIRCAEDT> = reference.iter().map(|d| d.point).collect();
                let what = format!("{pcap} {flavor:?} {fov:?}");
                assert!(!points.is_empty(), "{what}: no points");
                assert!(
                    same_bits(&points, appended.autoware()),
                    "{what}: append differs"
                );
                let mut with_times = points.clone();
                for (p, &t) in with_times.iter_mut().zip(&expected_times) {
                    p.time_stamp = t;
                }
                assert!(
                    same_bits(&with_times, timed.autoware()),
                    "{what}: append_timed differs"
                );
                let ref_az: Vec<u16> = reference.iter().map(|d| d.azimuth_cdeg).collect();
                assert_eq!(ref_az, azimuths, "{what}: azimuths differ");
                total += points.len();
            }
        }
    }
    // Every capture, both flavours, three fields of view.
    assert!(total > 5_000_000, "{total} points compared");
}
