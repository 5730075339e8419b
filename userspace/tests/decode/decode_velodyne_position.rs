//! Velodyne position packets of the shared VLP-16 capture that holds them (issue 26): the
//! manual's fields, values read independently from the bytes (offsets 198, 202, 206).

use std::path::Path;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::sensor::velodyne::position::{self, PpsStatus};

const CAPTURE: &str = "velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap";

/// 16 position packets on port 8308, 512 bytes each (the older layout): no GPS connected, so
/// PPS absent and no NMEA sentence; the time stamps are the sensor's µs past the hour, rising.
#[test]
fn position_packets_of_the_vlp16_capture() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(CAPTURE);
    let mut times = Vec::new();
    for d in udp_payloads(&path).unwrap() {
        let d = d.unwrap();
        if d.dst_port != 8308 {
            continue;
        }
        assert_eq!(d.payload.len(), 512);
        let p = position::parse(&d.payload).unwrap();
        assert_eq!(p.pps, PpsStatus::Absent);
        assert_eq!(p.nmea, "");
        times.push(p.top_of_hour_us);
    }
    assert_eq!(times.len(), 16);
    // The first two, read by hand from bytes 198..202: 61 f9 d7 13 and ad 33 d8 13.
    assert_eq!(&times[..2], &[332_921_185, 332_936_109]);
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
}
