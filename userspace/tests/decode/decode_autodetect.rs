//! Model auto-detection (`lidarxdp_core::sensor::detect_model`, `lidarxdp decode` without
//! `--sensor`) on every real capture: the packets that name their model give the right one,
//! those that cannot (Ouster, RoboSense) give none, and the VLP-16 capture whose product byte
//! says HDL-32E is identified as HDL-32E (so the configured model must win there).
use lidarxdp_core::sensor::{SensorModel, detect_model};
use lidarxdp_testkit::data;

/// (identified model, datagrams identified, datagrams looked at) over a capture's datagrams.
fn detect_all(rel: &str) -> (Option<SensorModel>, usize, usize) {
    let mut found: Option<SensorModel> = None;
    let (mut hits, mut total) = (0, 0);
    for d in lidarxdp::offline::udp_payloads(&data(rel)).unwrap() {
        let d = d.unwrap();
        total += 1;
        if let Some(m) = detect_model(&d.payload) {
            assert!(found.is_none_or(|f| f == m), "{rel}: {m:?} after {found:?}");
            found = Some(m);
            hits += 1;
        }
    }
    (found, hits, total)
}

#[test]
fn every_capture_is_identified_where_its_packets_name_the_model() {
    use SensorModel::*;
    for (rel, want, hits, total) in [
        (
            "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap",
            Some(Vlp16),
            603,
            603,
        ),
        (
            "velodyne/vlp16/vlp16_strongest_84pkt.pcap",
            Some(Vlp16),
            84,
            84,
        ),
        (
            "velodyne/vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
            Some(Vlp32c),
            379,
            379,
        ),
        (
            "velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap",
            Some(Vls128),
            2193,
            2193,
        ),
        (
            "hesai/pandar64/pandar64_nebula.pcap",
            Some(Pandar64),
            2400,
            2400,
        ),
        (
            "hesai/pandarqt128/pandarqt128_nebula.pcap",
            Some(PandarQt128),
            1800,
            1800,
        ),
    ] {
        assert_eq!(detect_all(rel), (want, hits, total), "{rel}");
    }
}

#[test]
fn a_wrong_product_byte_is_reported_as_what_it_says() {
    let (m, hits, _) =
        detect_all("velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap");
    assert_eq!(m, Some(SensorModel::Hdl32e));
    assert!(hits > 0);
}

#[test]
fn ouster_and_robosense_packets_do_not_name_their_model() {
    for rel in [
        "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap",
        "robosense/helios16p/helios16p_nebula_pr79.pcap",
    ] {
        let p = data(rel);
        if !p.exists() {
            panic!("{rel} missing");
        }
        assert_eq!(detect_all(rel).0, None, "{rel}");
    }
}
