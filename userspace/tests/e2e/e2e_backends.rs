//! Privileged end-to-end tests of the socket baselines (`lidarxdp run --backend socket |
//! recvmmsg | uring`, issue 4): the same replayed capture through each backend, in throwaway
//! namespaces, gives the same frames as offline decoding, and each backend reports what it
//! received. Run as root by `cargo xtask test`.
use crate::common;

use std::time::Duration;

use common::{Daemon, NetnsPair, collect_frames, data, get, privileged};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

/// Replays the 603-packet dual-return capture at its recorded rate through `backend` and checks
/// counters and frames exactly.
fn replay_through(backend: &str, listen_port: u16, extra: &[&str]) -> serde_json::Value {
    let net = NetnsPair::new(&format!("bk{}", &backend[..2]));
    let mut args = vec!["--backend", backend];
    args.extend_from_slice(extra);
    let daemon = Daemon::start(&net.host_ns, &net.host_if, listen_port, &args);
    let subscriber = collect_frames(&net.host_ns, listen_port);
    std::thread::sleep(Duration::from_millis(200));
    let sent = get(&common::replay(&net, DUAL, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 603);
    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    let live = subscriber.join().unwrap();

    assert_eq!(get(&stats, &["backend", "received"]), 603, "{stats}");
    assert_eq!(get(&stats, &["backend", "truncated"]), 0, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{stats}");
    assert_eq!(
        get(&stats, &["capture", "sensor_datagrams"]),
        603,
        "{stats}"
    );
    assert!(
        stats["xdp"].is_null(),
        "no XDP program for {backend}: {stats}"
    );
    assert_eq!(stats["backend"]["name"], backend);
    assert!(get(&stats, &["backend", "decoder_cpu_ns"]) > 0);
    assert!(get(&stats, &["backend", "receiver_cpu_ns"]) > 0);

    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(CALIB));
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368)).unwrap();
    common::assert_frames_equal(&live, &offline);
    stats
}

/// `socket`: blocking recvfrom thread + mutex queue, default SO_RCVBUF (212,992 bytes here).
#[test]
fn socket_backend_equals_offline_decode() {
    if !privileged() {
        return;
    }
    let stats = replay_through("socket", 7631, &[]);
    let rmem_default: u64 = std::fs::read_to_string("/proc/sys/net/core/rmem_default")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // getsockopt reports twice the value set (socket(7)); the default is reported as is.
    assert_eq!(
        get(&stats, &["backend", "rcvbuf_bytes"]),
        rmem_default,
        "{stats}"
    );
}

/// `recvmmsg`: batched, SO_RCVBUF = rmem_max (reported doubled).
#[test]
fn recvmmsg_backend_equals_offline_decode() {
    if !privileged() {
        return;
    }
    let stats = replay_through("recvmmsg", 7632, &["--rcvbuf", "1048576"]);
    assert_eq!(get(&stats, &["backend", "rcvbuf_bytes"]), 2 * 1_048_576);
}

/// `uring`: multishot recvmsg into a provided buffer ring.
#[test]
fn uring_backend_equals_offline_decode() {
    if !privileged() {
        return;
    }
    let stats = replay_through("uring", 7633, &[]);
    assert_eq!(get(&stats, &["backend", "backpressure"]), 0, "{stats}");
}

/// Injected decoder stalls are counted, and AF_XDP rings sized from `--umem-frames` hold the
/// packets that arrive during a stall: 603 packets at the recorded rate (~0.4 s) with a 150 ms
/// pause every 200 ms still all arrive.
#[test]
fn xdp_backend_absorbs_injected_stalls() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("bkst");
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7634,
        &["--stall", "150:200", "--umem-frames", "1024"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let sent = get(&common::replay(&net, DUAL, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 603);
    std::thread::sleep(Duration::from_millis(400));
    let stats = daemon.stop();
    assert!(get(&stats, &["backend", "stalls"]) >= 2, "{stats}");
    assert_eq!(
        get(&stats, &["capture", "stalls"]),
        get(&stats, &["backend", "stalls"]),
        "the live counter and the exit report: {stats}"
    );
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{stats}");
    assert_eq!(get(&stats, &["xsk", "rx_ring_full"]), 0, "{stats}");
    assert_eq!(get(&stats, &["backend", "received"]), 603, "{stats}");
    assert_eq!(stats["backend"]["name"], "xdp");
}

/// Bad backend flags are refused before anything is set up, naming the flag and the range.
#[test]
fn bad_backend_flags_are_refused() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
            .arg("run")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cal = data(CALIB);
    let cal = cal.to_str().unwrap();
    let e = run(&["--backend", "socket", "--rcvbuf", "0", "--sensor", "vlp16"]);
    assert!(
        e.contains("--rcvbuf") && e.contains("1..=1073741824"),
        "{e}"
    );
    let e = run(&["--backend", "udp", "--sensor", "vlp16"]);
    assert!(e.contains("--backend") && e.contains("recvmmsg"), "{e}");
    let e = run(&["--stall", "500:100", "--sensor", "vlp16"]);
    assert!(e.contains("--stall") && e.contains("MS < EVERY_MS"), "{e}");
    let e = run(&["--sensor", "vlp16", "--calibration", cal]);
    assert!(e.contains("--iface") && e.contains("--backend xdp"), "{e}");
}
