//! `lidarxdp subscribe` against an in-process publisher: sensor and field selection, `--stats`,
//! `--mcap`, `--pcd` and the JSON summary.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lidarxdp::publish::{BufferPool, Publisher, PublisherConfig};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::protocol::SensorEntry;

fn frame(sensor: u16, seq: u64) -> Frame {
    Frame {
        header: FrameHeader {
            sensor_id: sensor,
            sequence: seq,
            start_ns: 1_700_000_000_000_000_000 + seq,
            host_ns: lidarxdp::sys::clock::realtime_ns(),
            ..Default::default()
        },
        points: vec![
            PointXYZIRCAEDT {
                x: 1.5,
                intensity: 9,
                ..Default::default()
            };
            1000
        ]
        .into(),
    }
}

#[test]
fn subscribe_cli_selects_records_and_reports() {
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        sensors: vec![
            SensorEntry {
                id: 0,
                name: "front".into(),
                model: "VLP16".into(),
            },
            SensorEntry {
                id: 1,
                name: "rear".into(),
                model: "VLP16".into(),
            },
        ],
        ..PublisherConfig::default()
    };
    let (publisher, sender) = Publisher::spawn(
        PublisherConfig {
            frame_queue: 16,
            ..cfg
        },
        Arc::new(BufferPool::new(8)),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("lidarxdp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mcap, summary, ready) = (
        dir.join("rec.mcap"),
        dir.join("summary.json"),
        dir.join("ready"),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args(["subscribe", &publisher.local_addr().to_string()])
        .args(["--sensor", "rear", "--fields", "x,intensity", "--stats"])
        .args(["--frames", "3", "--mcap"])
        .arg(&mcap)
        .arg("--summary-json")
        .arg(&summary)
        .arg("--ready-file")
        .arg(&ready)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "subscriber never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    for seq in 0..3 {
        assert!(sender.send(frame(0, seq)));
        assert!(sender.send(frame(1, seq)));
        std::thread::sleep(Duration::from_millis(400));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    // Statistics lines only (one per second and one at the end), no per-frame lines.
    assert!(stdout.lines().count() >= 1, "{stdout}");
    assert!(
        stdout
            .lines()
            .all(|l| l.contains(" frames/s ") && l.contains("drops 0")),
        "{stdout}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["frames"], 3);
    assert_eq!(s["points"], 3000);
    assert_eq!(s["gaps"], 0);
    let bytes = std::fs::read(&mcap).unwrap();
    let msgs: Vec<_> = mcap::MessageStream::new(&bytes)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(msgs.len(), 3);
    assert!(msgs.iter().all(|m| m.channel.topic == "/lidar/rear/points"));
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.subscriptions, 1);
    assert_eq!(c.packed_encodings, 3, "only the rear frames are packed");
    std::fs::remove_dir_all(&dir).unwrap();
}
