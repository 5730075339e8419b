//! Strongest-return VLP-16 captures: frame and point counts derived by hand.
//!
//! Counting rules (checked with an independent Python script over the raw bytes):
//! a slot is a point when its raw distance is non-zero and 0.3 m < distance < 300 m (no slot
//! in these captures is non-zero but out of range); cut angle 0°, full field of view.
//!
//! `vlp16_strongest_84pkt.pcap`: 84 data packets × 384 slots = 32,256 slots, 626 with no return,
//! 31,630 points. Block azimuths wrap inside packet 26 (358.45° → 2.83°): frame 0 = packets
//! 0–25 plus the 125 points of packet 26 before 0° = 9,895 points; frame 1 = the 254 points of
//! packet 26 after 0° plus packets 27–83 = 21,735 points, closed by the flush at end of file.
//!
//! `vlp16_strongest_prodid0x21_with_position_pkts.pcap`: product-id byte 0x21 (HDL-32E) but
//! VLP-16 data; decoded as the configured VLP16. 84 data packets, 12,677 empty slots, 19,579
//! points; 16 position packets (512 B, port 8308) are `ignored`. The azimuth wraps *between*
//! packets 22 (355.37°) and 23 (0.17°), so packet 23 completes frame 0 and all its points move
//! to frame 1: frame 0 = packets 0–22 = 5,602 points, frame 1 = packets 23–83 = 13,977 points.

use std::path::Path;

use lidarxdp::offline::decode_pcap;
use lidarxdp_core::point::ReturnType;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vlp16/"
);

fn cfg() -> SensorConfig {
    SensorConfig::new(
        5,
        SensorModel::Vlp16,
        format!("{DIR}calibration/VLP16db.yaml"),
    )
}

#[test]
fn strongest_84pkt() {
    let (frames, c) = decode_pcap(
        Path::new(&format!("{DIR}vlp16_strongest_84pkt.pcap")),
        &cfg(),
        Some(2368),
    )
    .unwrap();
    assert_eq!(
        (c.packets, c.decoded, c.malformed, c.ignored),
        (84, 84, 0, 0)
    );
    assert_eq!((c.frames, c.points), (2, 31_630));
    let sizes: Vec<usize> = frames.iter().map(|f| f.points.len()).collect();
    assert_eq!(sizes, [9_895, 21_735]);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!((f.header.sensor_id, f.header.sequence), (5, i as u64));
        assert!(
            f.points
                .autoware()
                .iter()
                .all(|p| p.return_type == ReturnType::Strongest as u8)
        );
        assert!(
            f.points
                .autoware()
                .iter()
                .all(|p| p.distance > 0.3 && p.distance < 300.0)
        );
        // Channel = ring 0..15.
        assert!(f.points.autoware().iter().all(|p| p.channel < 16));
    }
    // Frame 0 ends just before 360°, frame 1 starts just after 0°.
    let last = frames[0]
        .points
        .autoware()
        .last()
        .unwrap()
        .azimuth
        .to_degrees();
    let first = frames[1].points.autoware()[0].azimuth.to_degrees();
    assert!(last > 359.0 && first < 1.0, "{last} {first}");
    // Packets: frame 0 got packets 0..=26 (27), starting at 234.24° with 4.76° per packet,
    // so ceil(234.24 / 4.76) = 50 packets before it are missing; frame 1 got packets 26..=83
    // (58) and ends at 271.06°: ceil(88.94 / 4.76) - 1 = 18 packets are still to come.
    let h: Vec<(u32, u32)> = frames
        .iter()
        .map(|f| (f.header.packets_received, f.header.packets_expected))
        .collect();
    assert_eq!(h, [(27, 77), (58, 76)]);
    // Time stamps: relative to the frame start, within one turn, and the frame-1 start is
    // packet 26's sensor time (596.414510 s past the hour).
    assert_eq!(
        frames[1].header.start_ns % 3_600_000_000_000,
        596_414_510_000
    );
    assert!(frames.iter().all(|f| {
        f.points
            .autoware()
            .iter()
            .all(|p| p.time_stamp < 110_000_000)
    }));
    let t_last = frames[1].points.autoware().last().unwrap().time_stamp;
    // Packet 83 is 57 packets after packet 26: 57·1327.1 µs + its last firing 1306.4 µs.
    assert!((75_000_000..77_000_000).contains(&t_last), "{t_last}");
}

#[test]
fn strongest_with_wrong_product_id_and_position_packets() {
    let path = format!("{DIR}vlp16_strongest_prodid0x21_with_position_pkts.pcap");
    // All UDP ports: the 16 position packets reach the pipeline and are read for their PPS
    // state (`auxiliary`), not decoded.
    let (frames, c) = decode_pcap(Path::new(&path), &cfg(), None).unwrap();
    assert_eq!(
        (c.packets, c.decoded, c.malformed, c.ignored, c.auxiliary),
        (100, 84, 0, 0, 16)
    );
    // The VLP-16 datasheet range (0, 100) m: 2 returns beyond 100 m are dropped (19,579
    // points with the former (0.3, 300) m default).
    assert_eq!((c.frames, c.points), (2, 19_577));
    // Every data packet's product byte says HDL-32E: decoded as the configured VLP-16, counted.
    assert_eq!(c.product_mismatches, 84);
    let sizes: Vec<usize> = frames.iter().map(|f| f.points.len()).collect();
    // Default (manual) rules: the last block of each packet is interpolated, so 3 more points
    // of the packet at the cut fall past 0° than under --nebula-compat (5_602, 13_975).
    assert_eq!(sizes, [5_599, 13_978]);
    // VLP-16 geometry, not HDL-32E: 16 rings.
    assert!(
        frames
            .iter()
            .all(|f| f.points.autoware().iter().all(|p| p.channel < 16))
    );
    // Filtering on the data port gives the same frames without the ignored packets.
    let (frames2, c2) = decode_pcap(Path::new(&path), &cfg(), Some(2368)).unwrap();
    assert_eq!(frames2, frames);
    assert_eq!((c2.packets, c2.ignored), (84, 0));
}
