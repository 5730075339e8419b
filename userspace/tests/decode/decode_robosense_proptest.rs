//! Property tests: arbitrary bytes into every RoboSense decoder never panic, never read out of
//! bounds (the views are slice-checked, and a panic fails the test), keep the counters
//! consistent, and produce only points inside the configured range with azimuths in [0, 2π).

use std::path::PathBuf;

use lidarxdp_core::sensor::robosense::{
    self, AngleTable, BLOCK_LEN, DIFOP_MAGIC, DecoderSettings, DifopPacket, HEADER_LEN, HeaderKind,
    MSOP_MAGIC_HELIOS, MSOP_MAGIC_V1, MsopPacket, PACKET_LEN, RobosenseDecoder,
};
use lidarxdp_core::sensor::{ReturnMode, SensorConfig, SensorModel};
use proptest::prelude::*;

const MODELS: [SensorModel; 5] = [
    SensorModel::Rs16,
    SensorModel::Rs32,
    SensorModel::Bpearl,
    SensorModel::Helios,
    SensorModel::Helios16p,
];

fn csv() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("lidarxdp-rsp-{}.csv", std::process::id()));
        let text: String = (0..32)
            .map(|i| format!("{}.5,{}\n", i - 20, i % 5))
            .collect();
        std::fs::write(&p, text).unwrap();
        p
    })
    .clone()
}

/// Forces the structure of a valid MSOP packet onto arbitrary bytes (magic, flags, azimuths).
fn shape(mut b: Vec<u8>, v1: bool) -> Vec<u8> {
    b.resize(PACKET_LEN, 0);
    if v1 {
        b[..8].copy_from_slice(&MSOP_MAGIC_V1);
    } else {
        b[..4].copy_from_slice(&MSOP_MAGIC_HELIOS);
    }
    for blk in 0..12 {
        let o = HEADER_LEN + blk * BLOCK_LEN;
        b[o] = 0xFF;
        b[o + 1] = 0xEE;
        let az = u16::from_be_bytes([b[o + 2], b[o + 3]]) % 36_000;
        b[o + 2..o + 4].copy_from_slice(&az.to_be_bytes());
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_payloads_never_panic(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1400), 1..8),
        model in 0usize..5,
        prefix in 0usize..4,
    ) {
        let mut p = lidarxdp::calibration::pipeline(&SensorConfig::new(0, MODELS[model], csv())).unwrap();
        let mut out = Vec::new();
        for (i, mut pl) in payloads.into_iter().enumerate() {
            // Steer some payloads into the RoboSense paths: magics on random lengths.
            let magic: &[u8] = match prefix {
                0 => &MSOP_MAGIC_V1,
                1 => &MSOP_MAGIC_HELIOS,
                2 => &DIFOP_MAGIC,
                _ => &[],
            };
            if pl.len() >= magic.len() {
                pl[..magic.len()].copy_from_slice(magic);
            }
            p.push(&pl, i as u64 * 1_000_000, &mut out);
        }
        p.flush(&mut out);
        let c = *p.counters();
        prop_assert_eq!(c.packets, c.accounted());
    }

    #[test]
    fn well_formed_random_packets_decode_in_range(
        body in proptest::collection::vec(any::<u8>(), PACKET_LEN),
        model in 0usize..5,
        mode in 0usize..4,
        difop in proptest::collection::vec(any::<u8>(), PACKET_LEN),
    ) {
        let spec = robosense::spec(MODELS[model]).unwrap();
        let v1 = spec.header == HeaderKind::V1;
        let pkt = shape(body, v1);
        let angles = AngleTable::from_bytes(&lidarxdp::calibration::read(&csv()).unwrap(), spec.lasers, &csv()).unwrap();
        let mut d = RobosenseDecoder::new(spec, angles, DecoderSettings {
            min_range_m: 0.3,
            max_range_m: 150.0,
            fov_cdeg: None,
        });
        // Random DIFOP contents: any table it yields must be in range.
        let mut difop = difop;
        difop[..8].copy_from_slice(&DIFOP_MAGIC);
        let dp = DifopPacket::new_checked(&difop[..]).unwrap();
        if let Some(t) = dp.angles(spec) {
            prop_assert!(t.vert_cdeg.iter().chain(&t.horiz_cdeg).all(|a| (-9000..18000).contains(a)));
            d.set_angles(t);
        }
        d.set_rpm(dp.rpm());
        let p = MsopPacket::new_checked(&pkt[..], spec.header).unwrap();
        let _ = p.sensor_time_ns();
        let m = [ReturnMode::Strongest, ReturnMode::Last, ReturnMode::First, ReturnMode::Dual][mode];
        let mut n = 0usize;
        d.decode(&p, m, |x| {
            n += 1;
            assert!(x.point.distance > 0.3 && x.point.distance < 150.0);
            assert!(x.azimuth_cdeg < 36_000);
            assert!((0.0..std::f32::consts::TAU).contains(&x.point.azimuth));
            assert!(x.point.x.is_finite() && x.point.y.is_finite() && x.point.z.is_finite());
        });
        prop_assert!(n <= 12 * 32);
    }
}
