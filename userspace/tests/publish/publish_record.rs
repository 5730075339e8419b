//! `subscribe --mcap` recording a live daemon stream, stopped by SIGINT or SIGTERM in the
//! middle: the subscriber exits 0 and every file it wrote is a complete MCAP that the Python
//! `mcap` reader (CRCs validated, summary and chunk indexes) and `mcap-ros2-support` read back
//! (`mcap_check.py`), holding exactly the frames the subscriber reported, in order.
//!
//! The daemon uses the `socket` backend on 127.0.0.1 (no privileges, no namespace) and the
//! real VLP-16 dual-return capture is replayed to it in a loop at 400 datagrams/s (about 2.6
//! frames/s), so the signal lands while frames keep coming: it is sent once the subscriber
//! has printed enough frames, never after a fixed delay.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use lidarxdp_testkit::{python, python_available};
use serde_json::Value;

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";

/// rosbag2's Jazzy `offered_qos_profiles` of the zenoh sink's QoS (best effort, volatile,
/// keep last 5, infinite durations: `RMW_DURATION_INFINITE` = 9223372036 s 854775807 ns),
/// written out literally.
const QOS_YAML: &str = "- history: keep_last\n  depth: 5\n  reliability: best_effort\n  \
    durability: volatile\n  deadline:\n    sec: 9223372036\n    nsec: 854775807\n  lifespan:\n    \
    sec: 9223372036\n    nsec: 854775807\n  liveliness: automatic\n  liveliness_lease_duration:\n    \
    sec: 9223372036\n    nsec: 854775807\n  avoid_ros_namespace_conventions: false\n";

/// `[name, offset, datatype, count]` of the full point layout (sensor_msgs/PointField
/// datatypes: 2 UINT8, 4 UINT16, 6 UINT32, 7 FLOAT32).
const FIELDS: &str = r#"[["x",0,7,1],["y",4,7,1],["z",8,7,1],["intensity",12,2,1],
    ["return_type",13,2,1],["channel",14,4,1],["azimuth",16,7,1],["elevation",20,7,1],
    ["distance",24,7,1],["time_stamp",28,6,1]]"#;

/// A free port on 127.0.0.1 for UDP (`udp`) or TCP, found by binding port 0 and closing.
fn free_port(udp: bool) -> u16 {
    if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}

/// Children killed (and reaped) on drop, so a failing test leaves no process behind.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child we own and have not reaped (its pid cannot be reused yet).
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Lines of a child's stdout, read on a thread.
fn lines(child: &mut Child) -> Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs `mcap_check.py` on `files` and returns its JSON.
fn check_files(files: &[PathBuf]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/publish/mcap_check.py");
    let out = Command::new(python())
        .arg(script)
        .args(files)
        .output()
        .expect("run mcap_check.py");
    assert!(
        out.status.success(),
        "mcap_check.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("mcap_check.py JSON")
}

/// Starts the daemon (socket backend on loopback, VLP-16 named `VLP16`), a subscriber
/// recording to `<scratch>/rec.mcap` with `--json` and `extra` flags, and the looping replay;
/// sends `sig` once the subscriber printed `after` frames. Returns the frame objects it
/// printed, its summary object and the scratch folder.
fn record_and_stop(
    tag: &str,
    sig: i32,
    after: usize,
    extra: &[&str],
) -> (Vec<Value>, Value, PathBuf) {
    let exe = lidarxdp_testkit::daemon_exe();
    let dir = std::env::temp_dir().join(format!("lidarxdp-rec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (udp, listen) = (free_port(true), free_port(false));
    let listen_addr = format!("127.0.0.1:{listen}");
    let calib = lidarxdp_testkit::data("velodyne/vlp16/calibration/VLP16db.yaml");
    let mut kids = Children(Vec::new());
    kids.0.push(
        Command::new(&exe)
            .args(["run", "--backend", "socket", "--bind", "127.0.0.1"])
            .args(["--sensor", "vlp16", "--port", &udp.to_string()])
            .arg("--calibration")
            .arg(&calib)
            .args(["--listen", &listen_addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start daemon"),
    );
    let ready = dir.join("ready");
    kids.0.push(
        Command::new(&exe)
            .args([
                "subscribe",
                &listen_addr,
                "--connect-timeout-ms",
                "20000",
                "--json",
            ])
            .arg("--mcap")
            .arg(dir.join("rec.mcap"))
            .arg("--ready-file")
            .arg(&ready)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start subscriber"),
    );
    lidarxdp_testkit::wait_ready(
        &mut kids.0[1],
        "subscriber",
        Duration::from_secs(30),
        || ready.exists(),
    )
    .unwrap();
    let rx = lines(&mut kids.0[1]);
    kids.0.push(
        Command::new(&exe)
            .arg("replay")
            .arg(lidarxdp_testkit::data(DUAL))
            .args(["--to", &format!("127.0.0.1:{udp}"), "--rate", "400"])
            .args(["--loop", "100"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start replay"),
    );
    let mut printed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while printed.len() < after {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("{} frames before the signal: {e}", printed.len()));
        printed.push(line);
    }
    signal(&kids.0[1], sig);
    let status = lidarxdp_testkit::wait(&mut kids.0[1], 30);
    let mut stderr = String::new();
    if let Some(mut e) = kids.0[1].stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    assert_eq!(status.code(), Some(0), "subscriber exit: {stderr}");
    loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) => printed.push(l),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("subscriber stdout still open"),
        }
    }
    signal(&kids.0[2], libc::SIGTERM);
    signal(&kids.0[0], libc::SIGTERM);
    let daemon_status = lidarxdp_testkit::wait(&mut kids.0[0], 15);
    assert!(daemon_status.success(), "daemon exit {daemon_status}");
    drop(kids);
    let mut objects: Vec<Value> = printed
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let summary = objects.pop().expect("summary object");
    assert!(
        objects.iter().all(|o| o.get("summary").is_none()),
        "one summary, last"
    );
    let summary = summary["summary"].clone();
    let name = if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    assert_eq!(summary["stopped_by"], name, "{summary}");
    assert!(
        stderr.contains(&format!("(stopped by {name})")),
        "readable summary: {stderr}"
    );
    (objects, summary, dir)
}

/// Checks the files `summary` lists against `frames` (the frame objects the subscriber
/// printed) with the Python reader; returns the per-file message lists.
fn check_recording(frames: &[Value], summary: &Value) -> Vec<Vec<Value>> {
    let listed = summary["mcap"]
        .as_array()
        .expect("mcap files in the summary");
    let paths: Vec<PathBuf> = listed
        .iter()
        .map(|f| PathBuf::from(f["path"].as_str().unwrap()))
        .collect();
    let checked = check_files(&paths);
    let files = checked["files"].as_array().unwrap();
    assert_eq!(files.len(), listed.len());
    let n = frames.len() as u64;
    assert_eq!(summary["frames"], n, "{summary}");
    assert_eq!(
        summary["points"],
        frames
            .iter()
            .map(|f| f["points"].as_u64().unwrap())
            .sum::<u64>()
    );
    assert_eq!(summary["sensors"]["VLP16"]["frames"], n);
    let fields: Value = serde_json::from_str(FIELDS).unwrap();
    let mut all = Vec::new();
    let mut per_file = Vec::new();
    for (f, l) in files.iter().zip(listed) {
        assert_eq!(f["profile"], "ros2");
        assert_eq!(f["message_count"], l["messages"]);
        assert!(f["chunk_count"].as_u64().unwrap() >= 1, "{f}");
        assert_eq!(f["chunk_indexes"], f["chunk_count"]);
        let channels = f["channels"].as_array().unwrap();
        assert_eq!(channels.len(), 1);
        let c = &channels[0];
        assert_eq!(c["topic"], "/lidar/VLP16/points");
        assert_eq!(c["message_encoding"], "cdr");
        assert_eq!(c["schema"], "sensor_msgs/msg/PointCloud2");
        assert_eq!(c["schema_encoding"], "ros2msg");
        assert_eq!(c["metadata"]["offered_qos_profiles"], QOS_YAML);
        assert_eq!(
            c["metadata"]["topic_type_hash"],
            "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5"
        );
        let msgs = f["messages"].as_array().unwrap().clone();
        assert_eq!(msgs.len() as u64, l["messages"].as_u64().unwrap());
        all.extend(msgs.iter().cloned());
        per_file.push(msgs);
    }
    assert_eq!(
        all.len(),
        frames.len(),
        "messages recorded = frames reported"
    );
    for (i, (m, fr)) in all.iter().zip(frames).enumerate() {
        let points = fr["points"].as_u64().unwrap();
        assert!(points > 10_000, "frame {i}: {fr}");
        assert_eq!(m["topic"], "/lidar/VLP16/points", "message {i}");
        assert_eq!(m["sequence"], fr["seq"], "message {i}");
        assert_eq!(m["stamp_ns"], fr["start_ns"], "message {i}");
        assert_eq!(m["publish_time"], fr["host_ns"], "message {i}");
        assert_eq!(m["frame_id"], "VLP16", "message {i}");
        assert_eq!(m["height"], 1, "message {i}");
        assert_eq!(m["width"], points, "message {i}");
        assert_eq!(m["point_step"], 32, "message {i}");
        assert_eq!(m["row_step"], 32 * points, "message {i}");
        assert_eq!(m["data_len"], 32 * points, "message {i}");
        assert_eq!(m["fields"], fields, "message {i}");
        assert_eq!(m["is_bigendian"], false, "message {i}");
        assert_eq!(m["is_dense"], true, "message {i}");
    }
    per_file
}

/// SIGINT while frames keep coming: one complete `rec.mcap` with every frame reported.
#[test]
fn sigint_finishes_the_mcap_of_a_live_stream() {
    if !python_available() {
        return;
    }
    let (frames, summary, dir) = record_and_stop("int", libc::SIGINT, 3, &[]);
    let files = summary["mcap"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["path"], dir.join("rec.mcap").to_str().unwrap());
    check_recording(&frames, &summary);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGTERM with `--split-size 1`: several parts `rec_0.mcap`, `rec_1.mcap`, ..., each
/// complete; a part ends exactly before the frame that would take its messages over
/// 1 000 000 bytes, and the parts together hold every frame once, in order.
#[test]
fn sigterm_finishes_every_part_of_a_split_recording() {
    if !python_available() {
        return;
    }
    let (frames, summary, dir) = record_and_stop("term", libc::SIGTERM, 5, &["--split-size", "1"]);
    let per_file = check_recording(&frames, &summary);
    assert!(per_file.len() >= 3, "{} parts", per_file.len());
    for (i, f) in summary["mcap"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            f["path"],
            dir.join(format!("rec_{i}.mcap")).to_str().unwrap()
        );
    }
    assert!(!dir.join("rec.mcap").exists());
    let len = |m: &Value| m["cdr_len"].as_u64().unwrap();
    for (i, part) in per_file.iter().enumerate() {
        assert!(!part.is_empty(), "part {i} empty");
        let bytes: u64 = part.iter().map(len).sum();
        assert!(
            part.len() == 1 || bytes <= 1_000_000,
            "part {i}: {bytes} bytes"
        );
        if let Some(next) = per_file.get(i + 1) {
            assert!(bytes + len(&next[0]) > 1_000_000, "part {i} ended early");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `subscribe zenoh:/TOPIC --mcap` with `--split-size 1`: an in-process zenoh sink (the
/// daemon's, on a loopback peer) publishes frames of 25 000 points (800 KB of points each) on
/// `/lidar/front/points`; the subscriber records `--frames 4` of them as received and exits.
/// Every part is a complete MCAP that the Python `mcap` reader and `mcap-ros2-support` read
/// back (`mcap_check.py`), one message per part (two would pass 1 000 000 bytes), holding
/// exactly the messages the subscriber printed, in order: the topic's channel with rosbag2's
/// QoS metadata, rmw_zenoh's sequence number, the sink's `header.stamp` and `frame_id`, and
/// the full point layout.
#[test]
fn zenoh_subscription_records_split_mcap() {
    use std::sync::Arc;

    use lidarxdp::publish::{BufferPool, Publisher, PublisherConfig};
    use lidarxdp::ros2_zenoh::{SINK_QUEUE, SessionConfig, TopicPlan, ZenohSettings, ZenohSink};
    use lidarxdp_core::frame::{Frame, FrameHeader};
    use lidarxdp_core::point::PointXYZIRCAEDT;
    use lidarxdp_core::ros2::{Distro, Qos};

    if !python_available() {
        return;
    }
    const TOPIC: &str = "/lidar/front/points";
    const POINTS: usize = 25_000;
    let dir = std::env::temp_dir().join(format!("lidarxdp-rec-zenoh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port(false);
    let config = |name: &str, endpoints: &str| {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!(
                "{{ mode: 'peer', {endpoints}: {{ endpoints: ['tcp/127.0.0.1:{port}'] }}, \
                 scouting: {{ multicast: {{ enabled: false }} }} }}"
            ),
        )
        .unwrap();
        p
    };
    let (pub_cfg, sub_cfg) = (
        config("pub.json5", "listen"),
        config("sub.json5", "connect"),
    );
    let (sink, _handle) = ZenohSink::start(
        &ZenohSettings {
            session: SessionConfig {
                file: Some(pub_cfg),
                overrides: Vec::new(),
            },
            domain_id: 0,
            distro: Distro::Jazzy,
            qos: Qos::LIDAR,
            queue: SINK_QUEUE,
            topics: vec![TopicPlan {
                sensor_id: 0,
                topic: TOPIC.into(),
                frame_id: "front".into(),
                imu_topic: None,
                imu_frame_id: String::new(),
            }],
        },
        None,
    )
    .expect("start the zenoh sink");
    let (publisher, sender) = Publisher::spawn_on(
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        PublisherConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            frame_queue: 4,
            ..PublisherConfig::default()
        },
        Arc::new(BufferPool::new(8)),
        vec![Box::new(sink)],
    )
    .unwrap();

    let ready = dir.join("ready");
    let mut kids = Children(vec![
        Command::new(lidarxdp_testkit::daemon_exe())
            .args(["subscribe", &format!("zenoh:{TOPIC}"), "--zenoh-config"])
            .arg(&sub_cfg)
            .args(["--ros-domain-id", "0", "--frames", "4", "--json"])
            .args(["--split-size", "1", "--mcap"])
            .arg(dir.join("rec.mcap"))
            .arg("--ready-file")
            .arg(&ready)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start subscriber"),
    ]);
    lidarxdp_testkit::wait_ready(
        &mut kids.0[0],
        "subscriber",
        Duration::from_secs(30),
        || ready.exists(),
    )
    .unwrap();
    let rx = lines(&mut kids.0[0]);
    // zenoh delivers best effort and has no end of stream: frames keep coming (the first
    // ones may go before the subscriber's declaration reached the sink) until it exits.
    let mut printed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seq = 0u64;
    loop {
        let start_ns = 1_700_000_000_000_000_000 + seq * 100_000_000;
        let points = (0..POINTS)
            .map(|i| PointXYZIRCAEDT {
                x: i as f32,
                intensity: (i % 256) as u8,
                ..Default::default()
            })
            .collect();
        let _ = sender.send(Frame {
            header: FrameHeader {
                sensor_id: 0,
                sequence: seq,
                start_ns,
                host_ns: lidarxdp::sys::clock::realtime_ns(),
                ..Default::default()
            },
            points,
        });
        seq += 1;
        match rx.recv_timeout(Duration::from_millis(150)) {
            Ok(l) => printed.push(l),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        assert!(Instant::now() < deadline, "subscriber still running");
    }
    let status = lidarxdp_testkit::wait(&mut kids.0[0], 30);
    let mut stderr = String::new();
    if let Some(mut e) = kids.0[0].stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    assert_eq!(status.code(), Some(0), "subscriber exit: {stderr}");
    publisher.shutdown().unwrap();

    let mut objects: Vec<Value> = printed
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let summary = objects.pop().expect("summary object")["summary"].clone();
    assert_eq!(objects.len(), 4, "{printed:?}");
    assert_eq!(summary["frames"], 4, "{summary}");
    assert_eq!(summary["stopped_by"], "--frames", "{summary}");
    assert!(stderr.contains("recorded 4 frames in 4 files"), "{stderr}");
    let listed = summary["mcap"]
        .as_array()
        .expect("mcap files in the summary");
    assert_eq!(listed.len(), 4, "{summary}");
    let paths: Vec<PathBuf> = listed
        .iter()
        .map(|f| PathBuf::from(f["path"].as_str().unwrap()))
        .collect();
    for (i, p) in paths.iter().enumerate() {
        assert_eq!(p, &dir.join(format!("rec_{i}.mcap")));
    }
    let checked = check_files(&paths);
    let files = checked["files"].as_array().unwrap();
    assert_eq!(files.len(), 4);
    let fields: Value = serde_json::from_str(FIELDS).unwrap();
    for (i, (f, o)) in files.iter().zip(&objects).enumerate() {
        assert_eq!(f["profile"], "ros2", "part {i}");
        assert_eq!(f["message_count"], 1, "part {i}");
        assert_eq!(f["chunk_indexes"], f["chunk_count"], "part {i}");
        let c = &f["channels"].as_array().unwrap()[..];
        assert_eq!(c.len(), 1, "part {i}");
        assert_eq!(c[0]["topic"], TOPIC);
        assert_eq!(c[0]["message_encoding"], "cdr");
        assert_eq!(c[0]["schema"], "sensor_msgs/msg/PointCloud2");
        assert_eq!(c[0]["schema_encoding"], "ros2msg");
        assert_eq!(c[0]["metadata"]["offered_qos_profiles"], QOS_YAML);
        let m = &f["messages"][0];
        assert_eq!(m["topic"], TOPIC, "part {i}");
        assert_eq!(o["topic"], TOPIC, "part {i}");
        assert_eq!(
            m["sequence"], o["seq"],
            "part {i}: rmw_zenoh's sequence number"
        );
        assert_eq!(m["stamp_ns"], o["stamp_ns"], "part {i}");
        let stamp = o["stamp_ns"].as_u64().unwrap();
        assert_eq!(stamp % 100_000_000, 0, "part {i}: a frame's start_ns");
        assert_eq!(m["frame_id"], "front", "part {i}");
        assert_eq!(m["width"], POINTS, "part {i}");
        assert_eq!(m["height"], 1, "part {i}");
        assert_eq!(m["point_step"], 32, "part {i}");
        assert_eq!(m["data_len"], 32 * POINTS, "part {i}");
        assert_eq!(m["fields"], fields, "part {i}");
        let (log, publish) = (m["log_time"].as_u64().unwrap(), m["publish_time"].as_u64());
        assert!(publish.unwrap() <= log, "part {i}: put before received");
    }
    let seqs: Vec<u64> = objects.iter().map(|o| o["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
