//! Property tests: no input makes an Ouster decoder panic or read out of bounds, for every
//! profile (the four captured ones and a synthetic FIVE_WORD_PIXEL metadata), and every point it
//! emits is finite and inside the metadata's geometry.

use std::path::Path;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::HostTime;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::ouster::OusterStream;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::{PipelineOptions, Rejection, SensorConfig, SensorModel, VendorDecoder};
use lidarxdp_core::valid::Fov;
use proptest::prelude::*;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/ouster/");
const CAPTURES: [&str; 5] = [
    "os2-128/OS-2-128-U1_v2.3.0_1024x10",
    "os0-128/OS-0-128-U1_v2.3.0_1024x10",
    "os0-32/OS-0-32-U1_v2.2.0_1024x10",
    "os1-32/OS-1-32-G_v2.1.1_1024x10",
    "os1-64/os1-64_legacy_fw1.1x_3frames",
];

fn metas() -> Vec<OusterMetadata> {
    let mut v: Vec<OusterMetadata> = CAPTURES
        .iter()
        .map(|c| {
            OusterMetadata::from_bytes(
                &lidarxdp::calibration::read(Path::new(&format!("{DIR}{c}.json"))).unwrap(),
                Path::new(&format!("{DIR}{c}.json")),
            )
            .unwrap()
        })
        .collect();
    let mut five = v[2].clone();
    five.format.profile = lidarxdp_core::sensor::ouster::packet::Profile::FiveWordPixel;
    v.push(five);
    v
}

#[test]
fn hand_built_metadata_is_validated_not_trusted() {
    let cfg = SensorConfig::new(0, SensorModel::Ouster, "hand.json");
    let base = metas().remove(0);
    for (edit, needle) in [
        (
            Box::new(|m: &mut OusterMetadata| m.format.columns_per_packet = 0)
                as Box<dyn Fn(&mut OusterMetadata)>,
            "columns_per_packet = 0",
        ),
        (
            Box::new(|m: &mut OusterMetadata| m.format.pixels_per_column = 64),
            "beam angle arrays",
        ),
        (
            Box::new(|m: &mut OusterMetadata| m.column_window = (0, 1024)),
            "column_window",
        ),
        (
            Box::new(|m: &mut OusterMetadata| m.format.columns_per_frame = 100),
            "columns_per_frame = 100",
        ),
    ] {
        let mut m = base.clone();
        edit(&mut m);
        let e = OusterStream::with_metadata(&cfg, PipelineOptions::default(), m)
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle) && e.contains("hand.json"), "{e}");
    }
}

fn stream(meta: &OusterMetadata) -> OusterStream {
    let cfg = SensorConfig::new(0, SensorModel::Ouster, "unused.json");
    let opts = PipelineOptions {
        fov: Some(Fov::from_deg(300.0, 60.0).unwrap()),
        ..Default::default()
    };
    OusterStream::with_metadata(&cfg, opts, meta.clone()).unwrap()
}

fn first_packet(i: usize) -> Vec<u8> {
    let c = CAPTURES[i.min(4)];
    udp_payloads(Path::new(&format!("{DIR}{c}.pcap")))
        .unwrap()
        .map(Result::unwrap)
        .find(|d| d.dst_port == 7502)
        .unwrap()
        .payload
}

fn check(meta: &OusterMetadata, frames: &[Frame]) {
    for f in frames {
        assert!(f.header.packets_received <= f.header.packets_expected);
        for p in f.points.autoware() {
            assert!(p.x.is_finite() && p.y.is_finite() && p.z.is_finite());
            assert!(usize::from(p.channel) < meta.format.pixels_per_column);
            assert!(p.distance > 0.3 && p.distance < 300.0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Arbitrary datagrams of any size, including exactly the packet size.
    #[test]
    fn arbitrary_bytes_never_panic(
        which in 0usize..6,
        datagrams in prop::collection::vec(
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..2048),
                (any::<u8>(), 0usize..6).prop_map(|(b, k)| vec![b; [48, 3328, 6464, 8448, 12608, 24832][k]]),
            ],
            1..6,
        ),
    ) {
        let metas = metas();
        let meta = &metas[which];
        let mut s = stream(meta);
        let mut out = Vec::new();
        let mut n = 0;
        for (i, d) in datagrams.iter().enumerate() {
            let r = s.push(d, HostTime::both(i as u64 * 1_000_000), &mut out);
            prop_assert!(matches!(r, Ok(()) | Err(Rejection::Ignored | Rejection::Malformed)));
            n += 1;
        }
        s.poll_timeout(u64::MAX, &mut out);
        s.flush(&mut out);
        prop_assert_eq!(n, datagrams.len());
        check(meta, &out);
    }

    /// Real packets with random bytes overwritten, cut or extended, and random frame and
    /// measurement ids: decoded or rejected, never a panic.
    #[test]
    fn mutated_real_packets_never_panic(
        which in 0usize..5,
        edits in prop::collection::vec((any::<u16>(), any::<u8>()), 0..64),
        cut in prop_oneof![Just(None), (0usize..64).prop_map(Some)],
        extend in 0usize..8,
        repeats in 1usize..4,
    ) {
        let metas = metas();
        let meta = &metas[which];
        let mut pkt = first_packet(which);
        let len = pkt.len();
        for (pos, val) in &edits {
            let i = usize::from(*pos) % len;
            pkt[i] = *val;
        }
        if let Some(c) = cut {
            pkt.truncate(len - c);
        }
        pkt.extend(std::iter::repeat_n(0xEE, extend));
        let mut s = stream(meta);
        let mut out = Vec::new();
        for r in 0..repeats {
            let _ = s.push(&pkt, HostTime::both(r as u64 * 300_000_000), &mut out);
        }
        s.flush(&mut out);
        check(meta, &out);
        if cut.is_none_or(|c| c == 0) && extend == 0 && edits.is_empty() {
            prop_assert!(!out.is_empty());
        }
    }
}
