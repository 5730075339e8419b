//! `lidarxdp subscribe` output for people and scripts, against an in-process publisher with
//! two sensors: frame lines and PCD files name the sensor, `--json` prints one object per frame
//! and a summary, the readable summary on stderr has one part per sensor, a server refusal
//! reads as a sentence; conflicting flags are refused before connecting.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lidarxdp::publish::{BufferPool, FrameSender, Publisher, PublisherConfig, PublisherHandle};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::protocol::SensorEntry;
use serde_json::{Value, json};

const HOST_NS: u64 = 1_700_000_000_500_000_000;

fn frame(sensor: u16, seq: u64, points: usize) -> Frame {
    Frame {
        header: FrameHeader {
            sensor_id: sensor,
            sequence: seq,
            start_ns: 1_700_000_000_000_000_000 + seq,
            host_ns: HOST_NS + seq,
            packets_received: 75,
            packets_expected: 76,
            ..Default::default()
        },
        points: vec![
            PointXYZIRCAEDT {
                x: 1.5,
                intensity: 9,
                ..Default::default()
            };
            points
        ]
        .into(),
    }
}

fn publisher() -> (PublisherHandle, FrameSender) {
    let sensor = |id: u16, name: &str| SensorEntry {
        id,
        name: name.into(),
        model: "VLP16".into(),
    };
    Publisher::spawn(
        PublisherConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            // Ids differ from the order of names: the output must name, not number.
            sensors: vec![sensor(7, "front"), sensor(3, "rear")],
            frame_queue: 16,
            ..PublisherConfig::default()
        },
        Arc::new(BufferPool::new(8)),
    )
    .unwrap()
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lidarxdp-sub-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn wait_file(p: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One subscriber prints JSON and writes PCDs, another prints text lines for `rear` only.
#[test]
fn subscribe_names_sensors_in_lines_json_and_files() {
    let (publisher, sender) = publisher();
    let dir = scratch("out");
    let pcd = dir.join("pcd");
    let addr = publisher.local_addr().to_string();
    let json_sub = Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args(["subscribe", &addr, "--json", "--frames", "4", "--pcd"])
        .arg(&pcd)
        .arg("--ready-file")
        .arg(dir.join("ready1"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text_sub = Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args(["subscribe", &addr, "--sensor", "rear", "--frames", "2"])
        .arg("--ready-file")
        .arg(dir.join("ready2"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_file(&dir.join("ready1"));
    wait_file(&dir.join("ready2"));
    for seq in 0..2 {
        assert!(sender.send(frame(7, seq, 100)));
        assert!(sender.send(frame(3, seq, 50)));
    }
    let out = json_sub.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let objects: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let f = |name: &str, seq: u64, points: u64| {
        json!({
            "sensor": name, "seq": seq, "start_ns": 1_700_000_000_000_000_000u64 + seq,
            "host_ns": HOST_NS + seq, "clock": "sensor", "points": points, "packets": 75,
            "expected_packets": 76, "malformed": 0, "frames_lost_before": 0,
        })
    };
    assert_eq!(
        objects,
        vec![
            f("front", 0, 100),
            f("rear", 0, 50),
            f("front", 1, 100),
            f("rear", 1, 50),
            json!({"summary": {
                "frames": 4, "points": 300, "gaps": 0, "stopped_by": "--frames",
                "sensors": {
                    "front": {"frames": 2, "points": 200, "gaps": 0},
                    "rear": {"frames": 2, "points": 100, "gaps": 0},
                },
            }}),
        ]
    );
    assert!(
        stderr.contains(&format!(
            "subscribe {addr}: 4 frames, 300 points, 0 gaps; front: 2 frames, 200 points, 0 \
             gaps; rear: 2 frames, 100 points, 0 gaps (stopped by --frames)"
        )),
        "{stderr}"
    );
    let mut pcds: Vec<String> = std::fs::read_dir(&pcd)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pcds.sort();
    assert_eq!(
        pcds,
        [
            "front_000000.pcd",
            "front_000001.pcd",
            "rear_000000.pcd",
            "rear_000001.pcd"
        ]
    );
    let rear = lidarxdp_client::pcd::read_points(&pcd.join("rear_000001.pcd")).unwrap();
    assert_eq!(rear.len(), 50);

    let out = text_sub.wait_with_output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [0u64, 1]
            .iter()
            .map(|s| format!(
                "frame sensor=rear seq={s} start_ns={} host_ns={} points=50 packets=75/76 \
                 malformed=0 frames_lost_before=0 clock=sensor",
                1_700_000_000_000_000_000u64 + s,
                HOST_NS + s
            ))
            .collect::<Vec<_>>()
    );
    publisher.shutdown().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sensor the server does not publish: the error is a sentence, not a Rust struct.
#[test]
fn subscribe_refusal_by_the_server_reads_as_a_sentence() {
    let (publisher, _sender) = publisher();
    let out = Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args(["subscribe", &publisher.local_addr().to_string()])
        .args(["--sensor", "side", "--fields", "x,y"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("subscribe to sensors side, fields x,y: "),
        "{stderr}"
    );
    assert!(stderr.contains("unknown sensor 'side'"), "{stderr}");
    assert!(!stderr.contains("Subscribe {"), "{stderr}");
    assert!(!stderr.contains("sensors: ["), "{stderr}");
    publisher.shutdown().unwrap();
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .arg("subscribe")
        .args(args)
        .output()
        .unwrap()
}

/// Conflicting or misplaced flags are refused before connecting: nothing listens on the
/// address, so a connection attempt would fail with "connect to"; the refusal names the flags.
#[test]
fn conflicting_flags_are_refused_before_connecting() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let dir = scratch("flags");
    let mcap = dir.join("r.mcap");
    let mcap = mcap.to_str().unwrap();
    let pcd = dir.join("pcd");
    let pcd = pcd.to_str().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--pcd", pcd, "--fields", "x,y,z"],
            &["--pcd and --fields x,y,z", "drop --fields"],
        ),
        (
            &["--split-size", "5"],
            &["--split-size", "only with --mcap"],
        ),
        (
            &["--split-duration", "60"],
            &["--split-duration", "only with --mcap"],
        ),
        (
            &["--mcap", mcap, "--split-size", "0"],
            &["--split-size 0: out of range 1..=1048576 (MB)"],
        ),
        (
            &["--mcap", mcap, "--split-duration", "604801"],
            &["--split-duration 604801: out of range 1..=604800 (seconds)"],
        ),
        (&["--json", "--stats"], &["--json", "--stats"]),
        (&["--ros-distro", "humble"], &["--ros-distro", "--mcap"]),
        (
            &["--idle-exit-ms", "5"],
            &["--idle-exit-ms", "zenoh:/TOPIC"],
        ),
        (&["--frames", "0"], &["--frames 0"]),
    ];
    for (args, wanted) in cases {
        let mut all = vec![addr.as_str()];
        all.extend_from_slice(args);
        let out = run(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        for w in *wanted {
            assert!(stderr.contains(w), "{args:?}: {stderr:?} lacks {w:?}");
        }
        assert!(
            !stderr.contains("connect"),
            "{args:?} connected first: {stderr}"
        );
    }
    // `--mcap` (and its split options) and `--pcd` apply to a zenoh topic too; `--sensor` does
    // not (one topic is one sensor), and is refused before anything is created.
    let zenoh = run(&[
        "zenoh:/lidar/front/points",
        "--mcap",
        mcap,
        "--split-size",
        "1",
        "--pcd",
        pcd,
        "--sensor",
        "front",
    ]);
    assert!(!zenoh.status.success());
    assert!(
        String::from_utf8_lossy(&zenoh.stderr).contains("--sensor: not available with a zenoh"),
        "{}",
        String::from_utf8_lossy(&zenoh.stderr)
    );
    assert!(!dir.join("r.mcap").exists() && !dir.join("pcd").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
