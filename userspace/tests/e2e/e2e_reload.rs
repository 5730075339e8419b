//! SIGHUP reloads the sensors' calibration (issue 6): frames after the reload are decoded with
//! the new file, point for point as offline decoding with it, the frame sequence continues, and
//! a file that no longer parses keeps the loaded calibration. Privileged (namespaces, XDP).
use crate::common;

use std::time::Duration;

use common::{Daemon, NetnsPair, collect_frames, data, get, privileged};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

fn offline(calibration: &std::path::Path) -> Vec<lidarxdp_core::frame::Frame> {
    let cfg = SensorConfig::new(0, SensorModel::Vlp16, calibration);
    lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368))
        .unwrap()
        .0
}

/// The daemon's metrics text (`lidarxdp stats --raw` inside `ns`).
fn metrics_text(ns: &str, metrics_port: u16) -> String {
    let out = common::NetnsPair::exec(
        ns,
        &[
            env!("CARGO_BIN_EXE_lidarxdp"),
            "stats",
            &format!("127.0.0.1:{metrics_port}"),
            "--raw",
        ],
    )
    .output()
    .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls the daemon's metrics until the capture thread reports `n` reloads.
fn wait_reloads(ns: &str, metrics_port: u16, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let want = "lidarxdp_capture_calibration_reloads_total{";
    loop {
        let text = metrics_text(ns, metrics_port);
        let got = text
            .lines()
            .find(|l| l.starts_with(want))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok());
        if got == Some(n) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reloads never reached {n}: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_reloads_the_calibration_and_keeps_a_good_one_on_error() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("hup");
    let dir = std::env::temp_dir().join(format!("lidarxdp-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cal = dir.join("VLP16db.yaml");
    let original = std::fs::read_to_string(data(CALIB)).unwrap();
    std::fs::write(&cal, &original).unwrap();
    // Laser 1 tilted from 1.0 to 1.7 degrees: its points move, so frames tell the
    // calibrations apart (laser 0 returns nothing in this capture).
    let turned = original.replacen(
        "vert_correction: 0.017453292519943295,",
        "vert_correction: 0.03,",
        1,
    );
    assert_ne!(turned, original);
    let turned_file = dir.join("turned.yaml");
    std::fs::write(&turned_file, &turned).unwrap();

    let cal_s = cal.to_str().unwrap().to_owned();
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7671,
        &[
            "--sensor",
            "vlp16",
            "--port",
            "2368",
            "--calibration",
            &cal_s,
            "--metrics",
            "127.0.0.1:7672",
        ],
    );
    let subscriber = collect_frames(&net.host_ns, 7671);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        get(&common::replay(&net, DUAL, 2368, "3000"), &["sent"]),
        603
    );
    std::thread::sleep(Duration::from_millis(300));

    // A good new calibration: applied.
    std::fs::write(&cal, &turned).unwrap();
    daemon.signal(libc::SIGHUP);
    wait_reloads(&net.host_ns, 7672, 1);
    assert_eq!(
        get(&common::replay(&net, DUAL, 2368, "3000"), &["sent"]),
        603
    );
    std::thread::sleep(Duration::from_millis(300));

    // A broken file: the turned calibration stays in use.
    std::fs::write(&cal, "lasers: [oops").unwrap();
    daemon.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        get(&common::replay(&net, DUAL, 2368, "3000"), &["sent"]),
        603
    );
    std::thread::sleep(Duration::from_millis(300));
    // Per-subscriber metrics: the one subscriber got all 12 frames, none dropped.
    let sum = |text: &str, family: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics_text(&net.host_ns, 7672);
        if sum(&text, "lidarxdp_subscriber_frames_sent_total") == 12 {
            assert_eq!(sum(&text, "lidarxdp_subscriber_frames_dropped_total"), 0);
            assert_eq!(
                text.matches("lidarxdp_subscriber_frames_sent_total{")
                    .count(),
                1,
                "{text}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = daemon.stop();
    let live = subscriber.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 1809, "{stats}");
    assert_eq!(
        get(&stats, &["capture", "calibration_reloads"]),
        1,
        "{stats}"
    );
    let before = offline(&data(CALIB));
    let after = offline(&turned_file_path(&turned));
    let expect: Vec<_> = before.iter().chain(&after).chain(&after).collect();
    assert_eq!(live.len(), expect.len(), "frame count");
    for (i, ((h, pts), off)) in live.iter().zip(expect).enumerate() {
        assert_eq!(
            h.sequence, i as u64,
            "frame {i}: sequence continues across the reload"
        );
        assert_eq!(pts.len(), off.points.len(), "frame {i} point count");
        assert!(
            pts == off.points.autoware(),
            "frame {i}: points differ from offline decoding"
        );
    }
    assert!(
        before
            .iter()
            .zip(&after)
            .filter(|(b, a)| b.points != a.points)
            .count()
            >= 3,
        "the two calibrations must give different points"
    );
}

/// The turned calibration written to its own file again (the test's directory is gone).
fn turned_file_path(text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("lidarxdp-hup-turned-{}.yaml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}
