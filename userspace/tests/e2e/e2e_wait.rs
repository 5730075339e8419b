//! Privileged end-to-end tests of the idle-wait modes (`lidarxdp run --wait`, issue 15): for
//! every mode, the AF_XDP and `recvmmsg` backends deliver every packet of the replayed
//! capture, exactly, and give the same frames as offline decoding. The replay runs at 7,540
//! datagrams/s (ten VLP-16s' worth), so packets arrive while the thread sleeps or sits in its
//! minimum wait, and once at the recorded rate (754/s), where the waits find one packet each.
use crate::common;

use std::time::Duration;

use common::{Daemon, NetnsPair, collect_frames, data, get, privileged};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

/// Replays the 603-packet capture at `rate` through `backend` waiting as `wait`; checks every
/// packet was received and decoded and the frames equal offline decoding.
fn replay_waiting(backend: &str, wait: &str, rate: &str, listen_port: u16) {
    let net = NetnsPair::new(&format!("wt{}", &backend[..2]));
    let mut args = vec!["--backend", backend, "--wait", wait];
    if backend == "recvmmsg" {
        args.extend_from_slice(&["--rcvbuf", "1048576"]);
    }
    let daemon = Daemon::start(&net.host_ns, &net.host_if, listen_port, &args);
    let subscriber = collect_frames(&net.host_ns, listen_port);
    std::thread::sleep(Duration::from_millis(200));
    let sent = get(&common::replay(&net, DUAL, 2368, rate), &["sent"]);
    assert_eq!(sent, 603);
    std::thread::sleep(Duration::from_millis(400));
    let stats = daemon.stop();
    let live = subscriber.join().unwrap();
    let what = format!("--backend {backend} --wait {wait} at {rate}: {stats}");
    assert_eq!(get(&stats, &["backend", "received"]), 603, "{what}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{what}");
    assert_eq!(get(&stats, &["capture", "sensor_datagrams"]), 603, "{what}");
    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(CALIB));
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368)).unwrap();
    common::assert_frames_equal(&live, &offline);
}

/// One setting of every `--wait` mode, for both backends.
const MODES: [&str; 4] = ["poll", "minwait:500", "paced:500", "busypoll:50"];

/// Every mode on AF_XDP, at 7,540/s and at the recorded rate.
#[test]
fn every_wait_mode_delivers_every_packet_over_af_xdp() {
    if !privileged() {
        return;
    }
    for (k, wait) in MODES.iter().enumerate() {
        replay_waiting("xdp", wait, "7540", 7681 + k as u16);
    }
    replay_waiting("xdp", "paced:1000", "realtime", 7685);
}

/// Every mode on `recvmmsg`, at 7,540/s.
#[test]
fn every_wait_mode_delivers_every_packet_over_recvmmsg() {
    if !privileged() {
        return;
    }
    for (k, wait) in MODES.iter().enumerate() {
        replay_waiting("recvmmsg", wait, "7540", 7686 + k as u16);
    }
}

/// A bad `--wait` is refused with the valid forms and range.
#[test]
fn a_bad_wait_mode_is_refused_with_the_valid_range() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args(["run", "--wait", "paced:5000", "--sensor", "vlp16"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "--wait \"paced:5000\": expected poll, minwait:USEC, paced:USEC or busypoll:USEC \
             with USEC in 10..=1000 (microseconds)"
        ),
        "{err}"
    );
}
