//! `lidarxdp run --foxglove`: the Foxglove WebSocket server checked at the protocol level by
//! `foxglove_client.py`, an independent client (Python `websockets`; the clouds decoded with
//! `mcap_ros2` from the advertised schema and with rosbags) run in the daemon's namespace, so
//! that 127.0.0.1 is the daemon's loopback.
//!
//! The expected values are written out literally (topics, schema names, encodings, the
//! `PointField` list) or computed here from the frames the daemon published to a TCP subscriber
//! and from offline decoding of the same capture, never with the daemon's own encoder.
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{
    self, Daemon, NetnsPair, ReceivedFrame, collect_frames, data, get, point_bytes, privileged,
    python_available,
};
use lidarxdp::privs::CapState;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

/// The client script, beside this file.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/live/foxglove_client.py");
/// The VLP-16 dual-return capture (603 packets, 4 rotations).
const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
/// Its calibration.
const VLP16_CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";
/// The VLP-16's default topic when it is named `vlp16`.
const POINTS_TOPIC: &str = "/lidar/vlp16/points";
/// The diagnostics channel's topic.
const DIAG_TOPIC: &str = "/lidarxdp/diagnostics";
/// What Lichtblick offers since its pull request 819: the SDK's name, then the old one.
const LICHTBLICK: &str = "foxglove.sdk.v1,foxglove.websocket.v1";
/// What the Foxglove app offers: the schema-table revision first.
const FOXGLOVE_APP: &str = "foxglove.sdk.v1.1,foxglove.sdk.v1";

/// `PointXYZIRCAEDT`'s `PointField`s: (name, offset, datatype, count), datatype codes of
/// `sensor_msgs/msg/PointField` (2 UINT8, 4 UINT16, 6 UINT32, 7 FLOAT32).
const FIELDS: [(&str, u32, u8, u32); 10] = [
    ("x", 0, 7, 1),
    ("y", 4, 7, 1),
    ("z", 8, 7, 1),
    ("intensity", 12, 2, 1),
    ("return_type", 13, 2, 1),
    ("channel", 14, 4, 1),
    ("azimuth", 16, 7, 1),
    ("elevation", 20, 7, 1),
    ("distance", 24, 7, 1),
    ("time_stamp", 28, 6, 1),
];

/// No capability at all, in every set; NoNewPrivs set.
const DROPPED: CapState = CapState {
    effective: 0,
    permitted: 0,
    inheritable: 0,
    bounding: 0,
    ambient: 0,
    no_new_privs: true,
};

/// Offline decoding of the dual-return capture (UDP port 2368).
fn offline() -> Vec<Frame> {
    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(VLP16_CALIB));
    lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368))
        .expect("offline decode")
        .0
}

/// A folder of its own under the temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lidarxdp-live-{}-{}-{tag}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch folder");
        Self(dir)
    }

    /// `<dir>/<name>` as a string (the client appends `.json` / `.bin`).
    fn out(&self, name: &str) -> String {
        self.0.join(name).to_str().expect("UTF-8 path").to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The client started in namespace `ns` with `args`; killed and reaped on drop.
struct Client {
    child: Child,
    reaped: bool,
}

impl Client {
    fn command(ns: &str, args: &[&str]) -> Command {
        let python = common::python();
        let mut cmd = NetnsPair::exec(ns, &[python.to_str().expect("UTF-8 path"), SCRIPT]);
        cmd.args(args).stderr(Stdio::inherit());
        cmd
    }

    /// `watch`: returns once the client printed "ready" (subscribed, first diagnostics in).
    fn watch(ns: &str, url: &str, out: &str, channels: usize, frames: usize) -> Self {
        let (channels, frames) = (channels.to_string(), frames.to_string());
        let mut child = Self::command(
            ns,
            &[
                "watch",
                "--url",
                url,
                "--protocols",
                LICHTBLICK,
                "--channels",
                &channels,
                "--topics",
                &format!("{POINTS_TOPIC},{DIAG_TOPIC}"),
                "--expect-frames",
                &frames,
                "--wait-diagnostics",
                "--out",
                out,
            ],
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn foxglove_client.py");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read client stdout");
        let mut c = Client {
            child,
            reaped: false,
        };
        if line.trim() != "ready" {
            let status = common::wait(&mut c.child, 60);
            c.reaped = true;
            panic!("client exited before it was ready: {status}");
        }
        c
    }

    /// Waits (at most 120 s) for a clean exit and returns what it wrote to `out`.json.
    fn finish(mut self, out: &str) -> Value {
        let status = common::wait(&mut self.child, 120);
        self.reaped = true;
        assert!(status.success(), "client exited with {status}");
        read_json(out)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_json(out: &str) -> Value {
    let text = std::fs::read(format!("{out}.json")).expect("client output");
    serde_json::from_slice(&text).expect("client JSON")
}

/// `handshake` in `ns` offering `protocols`, waiting for `channels` advertised channels.
fn handshake(ns: &str, url: &str, protocols: &str, channels: usize, out: &str) -> Value {
    let n = channels.to_string();
    let status = Client::command(
        ns,
        &[
            "handshake",
            "--url",
            url,
            "--protocols",
            protocols,
            "--channels",
            &n,
            "--out",
            out,
        ],
    )
    .status()
    .expect("run foxglove_client.py");
    assert!(status.success(), "handshake client exited with {status}");
    read_json(out)
}

/// The advertised channels without their ids, sorted by topic, the schema text cut to its
/// first line.
fn channel_summary(result: &Value) -> Vec<Value> {
    let mut v: Vec<Value> = result["channels"]
        .as_array()
        .expect("channels")
        .iter()
        .map(|c| {
            json!({
                "topic": c["topic"],
                "encoding": c["encoding"],
                "schemaName": c["schemaName"],
                "schemaEncoding": c["schemaEncoding"],
                "schema_first_line": c["schema"].as_str().and_then(|s| s.lines().next()),
            })
        })
        .collect();
    v.sort_by(|a, b| a["topic"].as_str().cmp(&b["topic"].as_str()));
    v
}

/// Exactly one PointCloud2 channel for the one sensor and the diagnostics channel.
fn expected_channels() -> Vec<Value> {
    vec![
        json!({
            "topic": "/diagnostics", "encoding": "cdr",
            "schemaName": "diagnostic_msgs/msg/DiagnosticArray", "schemaEncoding": "ros2msg",
            "schema_first_line": "std_msgs/Header header",
        }),
        json!({
            "topic": POINTS_TOPIC, "encoding": "cdr",
            "schemaName": "sensor_msgs/msg/PointCloud2", "schemaEncoding": "ros2msg",
            "schema_first_line": "std_msgs/Header header",
        }),
        json!({
            "topic": DIAG_TOPIC, "encoding": "json",
            "schemaName": "lidarxdp.Diagnostics", "schemaEncoding": "jsonschema",
            "schema_first_line": "{",
        }),
    ]
}

/// The capability state of every thread of `pid` once threads named `names` all exist
/// (panics after 20 s).
fn threads_once(pid: u32, names: &[&str]) -> Vec<(String, CapState)> {
    let t = std::time::Instant::now();
    loop {
        let mut v = Vec::new();
        for e in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task folder") {
            let p = e.expect("task").path();
            // A thread may end between the listing and the reads.
            let (Ok(status), Ok(name)) = (
                std::fs::read_to_string(p.join("status")),
                std::fs::read_to_string(p.join("comm")),
            ) else {
                continue;
            };
            v.push((
                name.trim().to_owned(),
                CapState::parse(&status).expect("Cap lines"),
            ));
        }
        if names.iter().all(|n| v.iter().any(|(t, _)| t == n)) {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "threads {v:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each cloud the client decoded is the frame the TCP subscriber got, in order: width = its
/// point count, stamp = its `start_ns`, log time = its `host_ns`, the point bytes offline
/// decoding gives.
fn assert_clouds(result: &Value, bin: &[u8], tcp: &[ReceivedFrame], offline: &[Frame]) {
    let clouds = result["clouds"].as_array().expect("clouds");
    assert_eq!(clouds.len(), tcp.len(), "clouds received");
    let fields: Vec<Value> = FIELDS
        .iter()
        .map(|&(n, o, d, c)| json!([n, o, d, c]))
        .collect();
    for (i, ((c, (h, pts)), off)) in clouds.iter().zip(tcp).zip(offline).enumerate() {
        let n = pts.len() as u64;
        assert_eq!(n, off.points.len() as u64, "frame {i}: TCP vs offline");
        let want = json!({
            "topic": POINTS_TOPIC,
            "cdr_header": "00010000",
            "sec": h.start_ns / 1_000_000_000,
            "nanosec": h.start_ns % 1_000_000_000,
            "frame_id": "vlp16",
            "height": 1,
            "width": n,
            "fields": fields,
            "is_bigendian": false,
            "point_step": 32,
            "row_step": 32 * n,
            "is_dense": true,
            "log_time": h.host_ns,
            "data_len": 32 * n,
        });
        let got: serde_json::Map<String, Value> = c
            .as_object()
            .expect("cloud")
            .iter()
            .filter(|(k, _)| want.get(k.as_str()).is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(Value::Object(got), want, "cloud {i}");
        let at = c["data_offset"].as_u64().expect("offset") as usize;
        assert!(
            bin[at..at + 32 * n as usize] == point_bytes(off.points.autoware())[..],
            "cloud {i}: points differ from offline decoding"
        );
    }
}

/// The last diagnostics message, value for value, from the TCP frames' headers: frame rate
/// `(n - 1) / (last start_ns - first start_ns)` over the (at most 10) frames, their packet
/// counts and loss.
fn assert_diagnostics(result: &Value, tcp: &[ReceivedFrame]) {
    let all = result["diagnostics"].as_array().expect("diagnostics");
    // The first came before the replay: nothing yet.
    let first = &all[0]["sensors"][0];
    assert_eq!(
        (&first["totals"]["frames"], &first["frame_rate_hz"]),
        (&json!(0), &Value::Null)
    );
    let last = all.last().expect("a diagnostics message");
    let sum = |f: &dyn Fn(&ReceivedFrame) -> u32| tcp.iter().map(|x| u64::from(f(x))).sum::<u64>();
    let received = sum(&|x| x.0.packets_received);
    let expected = sum(&|x| x.0.packets_expected);
    let malformed = sum(&|x| x.0.packets_malformed);
    let lost = sum(&|x| x.0.frames_lost_before);
    let loss = if expected == 0 {
        0.0
    } else {
        100.0 * expected.saturating_sub(received) as f64 / expected as f64
    };
    let (f0, fl) = (&tcp[0].0, &tcp[tcp.len() - 1].0);
    let rate = (tcp.len() - 1) as f64 * 1e9 / (fl.start_ns - f0.start_ns) as f64;
    let points: u64 = tcp.iter().map(|x| x.1.len() as u64).sum();
    let counts = json!({
        "frames": tcp.len(),
        "packets_received": received,
        "packets_expected": expected,
        "packets_malformed": malformed,
        "frames_lost": lost,
        "loss_percent": loss,
    });
    let mut totals = counts.clone();
    totals["points"] = points.into();
    let want = json!({
        "name": "vlp16",
        "model": "VLP16",
        "topic": POINTS_TOPIC,
        "sequence": fl.sequence,
        "last_host_ns": fl.host_ns,
        "points": tcp[tcp.len() - 1].1.len(),
        "frame_rate_hz": rate,
        "window": counts,
        "totals": totals,
    });
    assert_eq!(last["window_frames"], 10);
    assert_eq!(last["sensors"].as_array().map(Vec::len), Some(1));
    assert_eq!(last["sensors"][0], want, "diagnostics {last}");
    // Its log time is when it was made.
    assert_eq!(last["log_time"], last["time_ns"]);
}

/// The daemon in its namespace (VLP-16 named `vlp16`, TCP publisher on 7711, Foxglove on
/// 127.0.0.1:18765): an old client offering only `foxglove.websocket.v1` is refused at the
/// handshake; the Foxglove app's and Lichtblick's offers are accepted with serverInfo
/// (`lidarxdp`, no capability) and exactly the sensor's PointCloud2 channel and the
/// diagnostics channel. The watching client then gets each frame of the replayed capture as a
/// PointCloud2 equal to the TCP subscriber's frame and to offline decoding, and diagnostics
/// equal to what the frame headers give. Every thread of the daemon, the server's among them,
/// holds no capability.
#[test]
fn foxglove_client_gets_every_frame_and_the_diagnostics() {
    if !privileged() || !python_available() {
        return;
    }
    let offline = offline();
    assert_eq!(offline.len(), 4, "frames of the dual-return capture");
    let net = NetnsPair::new("fx");
    let s = Scratch::new("fox");
    let url = "ws://127.0.0.1:18765";
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7711,
        &["--name", "vlp16", "--foxglove", "127.0.0.1:18765"],
    );
    let threads = threads_once(daemon.child.id(), &["foxglove-ws", "foxglove-sink"]);
    for (name, caps) in &threads {
        assert_eq!(caps, &DROPPED, "thread {name}");
    }

    let old = handshake(&net.host_ns, url, "foxglove.websocket.v1", 2, &s.out("old"));
    assert_eq!(
        old,
        json!({"refused": 400}),
        "an offer of foxglove.websocket.v1 alone"
    );
    let app = handshake(&net.host_ns, url, FOXGLOVE_APP, 2, &s.out("app"));
    assert_eq!(app["subprotocol"], "foxglove.sdk.v1.1");
    assert_eq!(channel_summary(&app), expected_channels());

    let tcp = collect_frames(&net.host_ns, 7711);
    let out = s.out("watch");
    let client = Client::watch(&net.host_ns, url, &out, 2, offline.len());
    let sent = get(&common::replay(&net, DUAL, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 603);
    let result = client.finish(&out);
    let stats = daemon.stop();
    let tcp = tcp.join().expect("TCP subscriber");

    common::assert_no_xsk_loss(&stats);
    common::assert_frames_equal(&tcp, &offline);
    assert_eq!(result["subprotocol"], "foxglove.sdk.v1");
    let info = &result["serverInfo"];
    assert_eq!(
        (&info["name"], &info["capabilities"]),
        (&json!("lidarxdp"), &json!([])),
        "serverInfo {info}"
    );
    assert_eq!(channel_summary(&result), expected_channels());
    let bin = std::fs::read(format!("{out}.bin")).expect("client .bin");
    assert_clouds(&result, &bin, &tcp, &offline);
    assert_diagnostics(&result, &tcp);

    let f = |k: &str| get(&stats, &["foxglove", k]);
    let bytes: u64 = result["clouds"]
        .as_array()
        .expect("clouds")
        .iter()
        .map(|c| c["payload_len"].as_u64().expect("payload_len"))
        .sum();
    assert_eq!(
        (f("frames"), f("unwatched"), f("dropped"), f("errors")),
        (4, 0, 0, 0),
        "{stats}"
    );
    assert_eq!(f("bytes"), bytes, "message bytes");
    // The Foxglove app's handshake and the watching client; the refused one never connected.
    assert_eq!(f("connections"), 2, "{stats}");
    let received = result["diagnostics"].as_array().map_or(0, Vec::len) as u64;
    assert!(f("diagnostics") >= received, "{stats}");
}

/// With no client subscribed, no frame is encoded: each is counted `unwatched`, and a client
/// that connects and leaves changes nothing but the connection count.
#[test]
fn foxglove_encodes_nothing_while_nobody_subscribes() {
    if !privileged() || !python_available() {
        return;
    }
    let net = NetnsPair::new("fn");
    let s = Scratch::new("idle");
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7712,
        &["--name", "vlp16", "--foxglove", "127.0.0.1:18766"],
    );
    let hello = handshake(
        &net.host_ns,
        "ws://127.0.0.1:18766",
        LICHTBLICK,
        2,
        &s.out("hello"),
    );
    assert_eq!(hello["subprotocol"], "foxglove.sdk.v1");
    let sent = get(&common::replay(&net, DUAL, 2368, "max"), &["sent"]);
    assert_eq!(sent, 603);
    let stats = daemon.stop();
    assert_eq!(get(&stats, &["capture", "frames_out"]), 4, "{stats}");
    let f = |k: &str| get(&stats, &["foxglove", k]);
    assert_eq!(
        [
            f("frames"),
            f("unwatched"),
            f("dropped"),
            f("bytes"),
            f("diagnostics"),
            f("connections"),
            f("errors")
        ],
        [0, 4, 0, 0, 0, 1, 0],
        "{stats}"
    );
}
