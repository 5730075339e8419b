//! Running the independent client `ros2_probe.py` in a namespace (always killed and reaped on
//! drop), scratch folders, and the checks of what it received against offline decoding.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{self, NetnsPair, ReceivedFrame, data, point_bytes};
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

/// The probe script, beside this file.
pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ros2/ros2_probe.py");

/// rmw_zenoh's key of `/lidar/vlp16/points` (the VLP-16's default topic) in ROS domain 0 with
/// the Jazzy type hash of `sensor_msgs/msg/PointCloud2`: `<domain>/<topic without the leading
/// '/'>/<DDS type name>/<RIHS01 hash>`.
pub const KEY_VLP16_JAZZY: &str = "0/lidar/vlp16/points/sensor_msgs::msg::dds_::PointCloud2_/\
RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5";

/// The VLP-16 dual-return capture (603 packets, 4 rotations).
pub const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
/// Its calibration.
pub const VLP16_CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

/// `PointXYZIRCAEDT`'s `PointField`s as the message must list them: (name, offset, datatype,
/// count), datatype codes of `sensor_msgs/msg/PointField` (2 UINT8, 4 UINT16, 6 UINT32,
/// 7 FLOAT32).
pub const FIELDS: [(&str, u32, u8, u32); 10] = [
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

/// One hour in ns: the span of the Velodyne "µs past the hour" packet time.
const HOUR_NS: u64 = 3_600_000_000_000;

/// Now, ns since the Unix epoch (CLOCK_REALTIME, as the attachment's source time).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

/// Offline decoding of a capture from the shared data, datagrams to UDP `port` only.
pub fn offline(pcap: &str, model: SensorModel, calib: &str, port: u16) -> Vec<Frame> {
    let cfg = SensorConfig::new(0, model, data(calib));
    lidarxdp::offline::decode_pcap(&data(pcap), &cfg, Some(port))
        .expect("offline decode")
        .0
}

/// A folder of its own under the temporary directory, removed on drop.
pub struct Scratch {
    /// The folder.
    pub dir: PathBuf,
}

impl Scratch {
    /// Creates `<tmp>/lidarxdp-zenoh-<pid>-<n>-<tag>`.
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lidarxdp-zenoh-{}-{}-{tag}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch folder");
        Self { dir }
    }

    /// Path of `name` inside the folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes `text` to `name` inside the folder and returns its path as a string.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write scratch file");
        p.to_str().expect("UTF-8 path").to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `listen` arguments that make a probe say on stdout when it has its `--expect` samples
/// ([`Probe::wait_notified`]), waiting at most 60 s.
pub const NOTIFY: [&str; 2] = ["--notify-within", "60"];

/// A zenoh JSON5 configuration for the daemon: a peer listening on `tcp/127.0.0.1:PORT`, no
/// multicast scouting.
pub fn peer_config(port: u16) -> String {
    format!(
        r#"{{ mode: "peer", listen: {{ endpoints: ["tcp/127.0.0.1:{port}"] }},
  scouting: {{ multicast: {{ enabled: false }} }} }}"#
    )
}

/// What a `listen` probe does.
pub struct Listen<'a> {
    /// Endpoint it connects to as a zenoh client, e.g. `tcp/127.0.0.1:7447`.
    pub connect: &'a str,
    /// Key expression it subscribes to.
    pub key: &'a str,
    /// Output path prefix: it writes `<out>.jsonl` and `<out>.bin`.
    pub out: &'a Path,
    /// Text of the liveliness token it waits for before it is ready.
    pub wait_token: &'a str,
    /// Messages to wait for after the stop (else: until none came for a second).
    pub expect: Option<usize>,
    /// Further arguments (e.g. `--no-shm`).
    pub extra: &'a [&'a str],
}

/// A running `ros2_probe.py`; killed (also when stopped with SIGSTOP) and reaped on drop.
pub struct Probe {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    reaped: bool,
}

impl Probe {
    /// Starts `python ros2_probe.py ARGS...` in namespace `ns` (through `ip netns exec`, which
    /// execs it: the pid is the interpreter's); `name` names it in messages.
    pub fn spawn(ns: &str, name: &str, args: &[&str]) -> Self {
        let python = common::python();
        let mut argv = vec![python.to_str().expect("UTF-8 path"), SCRIPT];
        argv.extend_from_slice(args);
        Self::spawn_exe(ns, name, &argv)
    }

    /// Starts the program `argv[0]` with the arguments `argv[1..]` in namespace `ns`, stdin
    /// and stdout piped (the DDS tests' compiled subscribers speak the same "ready" / "stop"
    /// protocol as the Python probe).
    pub fn spawn_exe(ns: &str, name: &str, argv: &[&str]) -> Self {
        let mut cmd = NetnsPair::exec(ns, argv);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({}): {e}", argv[0]));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Self {
            name: name.to_owned(),
            child,
            stdin,
            stdout,
            reaped: false,
        }
    }

    /// `listen` in `ns` as `l` says; returns once it printed "ready", which it does after its
    /// subscriber is declared and a liveliness token containing `l.wait_token` (the daemon's
    /// publisher) is visible.
    pub fn listen(ns: &str, name: &str, l: &Listen) -> Self {
        let out = l.out.to_str().expect("UTF-8 path");
        let expect = l.expect.map(|n| n.to_string());
        let mut args = vec![
            "listen",
            "--connect",
            l.connect,
            "--key",
            l.key,
            "--out",
            out,
            "--wait-token",
            l.wait_token,
        ];
        if let Some(n) = &expect {
            args.extend(["--expect", n.as_str()]);
        }
        args.extend_from_slice(l.extra);
        let mut p = Self::spawn(ns, name, &args);
        p.wait_ready();
        p
    }

    /// A zenoh router in `ns` listening on `endpoint` (`extra`: further probe arguments, e.g.
    /// its TLS certificate), ready to route.
    pub fn router(ns: &str, endpoint: &str, extra: &[&str]) -> Self {
        let mut args = vec!["router", "--listen", endpoint];
        args.extend_from_slice(extra);
        let mut p = Self::spawn(ns, "router", &args);
        p.wait_ready();
        p
    }

    /// Reads stdout until the line "ready"; panics with the exit status when the probe ends
    /// first (its stderr, inherited, says why).
    pub fn wait_ready(&mut self) {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read probe stdout");
            if n == 0 {
                let status = self.child.wait().expect("wait probe");
                self.reaped = true;
                panic!("{} exited before it was ready: {status}", self.name);
            }
            if line.trim() == "ready" {
                return;
            }
        }
    }

    /// Sends `sig` to the probe.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on a child we own and have not reaped (its pid cannot have been
        // reused); `sig` is a signal number chosen by the caller.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill {} {sig}", self.name);
    }

    /// Waits for the line a `listen` probe started with `--notify-within` ([`NOTIFY`]) prints: "have N" once
    /// its `--expect` samples are in (true), or "short N" when its wait ran out (false).
    /// Panics when the probe ends first.
    pub fn wait_notified(&mut self) -> bool {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read probe stdout");
            assert!(
                n > 0,
                "{} ended before it said how many samples it has",
                self.name
            );
            match line.split_whitespace().next().unwrap_or_default() {
                "have" => return true,
                "short" => return false,
                _ => {}
            }
        }
    }

    /// Tells the probe to stop (the line "stop", then end of stdin), waits for it to exit (at
    /// most 120 s: it waits for late samples itself) and returns the rest of its stdout.
    /// Panics unless it exits with status 0.
    pub fn finish(mut self) -> String {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        let mut rest = String::new();
        self.stdout
            .read_to_string(&mut rest)
            .expect("read probe stdout");
        let status = common::wait(&mut self.child, 120);
        self.reaped = true;
        assert!(
            status.success(),
            "{} exited with {status}: {rest}",
            self.name
        );
        rest
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.reaped {
            // SIGKILL also ends a process stopped with SIGSTOP.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `liveliness` in `ns` as a client of `connect`, querying until `count` tokens contain
/// `contains`, and returns its JSON (`zid`, `peers`, `routers`, `tokens`).
pub fn liveliness(ns: &str, connect: &str, contains: &str, count: usize) -> serde_json::Value {
    let n = count.to_string();
    let mut p = Probe::spawn(
        ns,
        "liveliness probe",
        &[
            "liveliness",
            "--connect",
            connect,
            "--wait-contains",
            contains,
            "--wait-count",
            &n,
        ],
    );
    p.stdin.take();
    let mut out = String::new();
    p.stdout
        .read_to_string(&mut out)
        .expect("read probe stdout");
    let status = common::wait(&mut p.child, 120);
    p.reaped = true;
    assert!(status.success(), "liveliness probe exited with {status}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("probe JSON {out:?}: {e}"))
}

/// One message as the probe decoded it with rosbags, and its attachment.
#[derive(Debug, serde::Deserialize)]
pub struct Msg {
    /// Key expression it arrived on.
    pub key: String,
    /// Whole payload, bytes.
    pub payload_len: usize,
    /// First 4 payload bytes, hex (the CDR encapsulation header).
    pub cdr_header: String,
    /// `header.stamp.sec`.
    pub sec: i64,
    /// `header.stamp.nanosec`.
    pub nanosec: u64,
    /// `header.frame_id`.
    pub frame_id: String,
    /// `height`.
    pub height: u64,
    /// `width`.
    pub width: u64,
    /// `fields` as (name, offset, datatype, count).
    pub fields: Vec<(String, u32, u8, u32)>,
    /// `is_bigendian`.
    pub is_bigendian: bool,
    /// `point_step`.
    pub point_step: u64,
    /// `row_step`.
    pub row_step: u64,
    /// `is_dense`.
    pub is_dense: bool,
    /// Where `data` starts in the `.bin` file.
    pub data_offset: usize,
    /// `data` length.
    pub data_len: usize,
    /// The attachment, hex, if any.
    pub attachment: Option<String>,
    /// Attachment sequence number (when it is 33 bytes).
    pub seq: Option<i64>,
    /// Attachment source time, ns.
    pub time_ns: Option<i64>,
    /// Attachment byte 16 (the GID's length).
    pub gid_len: Option<u8>,
    /// Attachment GID, hex.
    pub gid: Option<String>,
    /// The DDS sample's source time, ns since the Unix epoch (DDS subscribers only).
    #[serde(default)]
    pub source_timestamp_ns: Option<i64>,
    /// `data`, filled from the `.bin` file.
    #[serde(skip)]
    pub data: Vec<u8>,
}

/// Reads the probe's `out`.jsonl and `out`.bin.
pub fn read_messages(out: &Path) -> Vec<Msg> {
    let with = |ext: &str| {
        let mut p = out.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    let text = std::fs::read_to_string(with(".jsonl")).expect("probe .jsonl");
    let bin = std::fs::read(with(".bin")).expect("probe .bin");
    text.lines()
        .map(|l| {
            let mut m: Msg = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            m.data = bin[m.data_offset..m.data_offset + m.data_len].to_vec();
            m
        })
        .collect()
}

/// Length of a CDR little-endian (XCDR1) `sensor_msgs/msg/PointCloud2` with `frame_id`,
/// [`FIELDS`] and `data_len` data bytes: the 4-byte encapsulation header, then the members,
/// each primitive aligned to its size counted from the end of that header.
pub fn pointcloud2_len(frame_id: &str, data_len: usize) -> usize {
    let a4 = |n: usize| n.div_ceil(4) * 4;
    let mut n = 8; // stamp: int32 sec, uint32 nanosec
    n += 4 + frame_id.len() + 1; // string: uint32 length (with NUL), bytes, NUL
    n = a4(n) + 4 + 4 + 4; // height, width, fields count
    for (name, ..) in FIELDS {
        n = a4(n) + 4 + name.len() + 1; // name
        n = a4(n) + 4; // offset
        n += 1; // datatype
        n = a4(n) + 4; // count
    }
    n += 1; // is_bigendian
    n = a4(n) + 4 + 4 + 4; // point_step, row_step, data length
    n += data_len + 1; // data, is_dense
    4 + n
}

/// Asserts the daemon's `zenoh` counters after `frames` frames all went through the
/// shared-memory pool without a drop, an error or a copy (each decoded into its chunk), `msgs` (what a subscriber received) adding
/// up to the message bytes it put.
pub fn assert_zenoh_counters(stats: &serde_json::Value, frames: usize, msgs: &[Msg]) {
    let z = |k: &str| common::get(stats, &["zenoh", k]);
    let n = frames as u64;
    assert_eq!(
        (z("published"), z("dropped"), z("errors")),
        (n, 0, 0),
        "zenoh published, dropped, errors: {stats}"
    );
    assert_eq!(
        (z("shm_frames"), z("shm_exhausted")),
        (n, 0),
        "zenoh shm_frames, shm_exhausted: {stats}"
    );
    // Every frame was decoded into a chunk of the pool and put as it is: no copy.
    assert_eq!(
        (z("loaned"), z("copied_bytes"), z("loans_refused")),
        (n, 0, 0),
        "zenoh loaned, copied_bytes, loans_refused: {stats}"
    );
    let bytes: u64 = msgs.iter().map(|m| m.payload_len as u64).sum();
    assert_eq!(
        z("bytes"),
        bytes,
        "zenoh bytes vs the payloads received: {stats}"
    );
}

/// Asserts the probe's messages are exactly the frames of the capture: one message per
/// offline frame, in order, on `key`, each [`assert_pointcloud2_equal`] to its offline frame
/// and stamped with the frame start time the TCP subscriber saw (`tcp`, already checked equal
/// to `offline`), whose attachment is rmw_zenoh's 33 bytes with sequence numbers
/// 1, 2, ..., one non-zero GID, and source times inside `[t0, t1]` ns that never go back.
pub fn assert_messages_equal_offline(
    msgs: &[Msg],
    offline: &[Frame],
    tcp: &[ReceivedFrame],
    key: &str,
    frame_id: &str,
    (t0, t1): (u64, u64),
) {
    assert_eq!(
        msgs.len(),
        offline.len(),
        "zenoh messages vs offline frames"
    );
    assert_eq!(tcp.len(), offline.len(), "TCP frames vs offline frames");
    let gid = msgs[0].gid.clone().expect("attachment GID");
    assert_eq!(gid.len(), 32, "GID hex {gid}");
    assert_ne!(gid, "0".repeat(32), "GID is all zeros");
    let mut last_time = 0;
    for (i, ((m, off), (tcp_h, _))) in msgs.iter().zip(offline).zip(tcp).enumerate() {
        assert_eq!(m.key, key, "message {i} key");
        assert_pointcloud2_equal(i, m, off, tcp_h.start_ns, frame_id);
        assert_eq!(
            m.attachment.as_ref().map(String::len),
            Some(66),
            "message {i} attachment: 33 bytes"
        );
        assert_eq!(m.seq, Some(i as i64 + 1), "message {i} sequence number");
        assert_eq!(m.gid_len, Some(16), "message {i} attachment byte 16");
        assert_eq!(m.gid.as_ref(), Some(&gid), "message {i} GID");
        let t = m.time_ns.expect("source time") as u64;
        assert!(
            (t0..=t1).contains(&t) && t >= last_time,
            "message {i} source time {t} outside [{t0}, {t1}] or before {last_time}"
        );
        last_time = t;
    }
}

/// Asserts message `i` is a well-formed PointCloud2 of the offline frame `off` (CDR LE
/// header, `frame_id`, height 1, width = points, [`FIELDS`], little-endian, point_step 32,
/// row_step = 32 × width, dense, no trailing bytes, `data` equal byte for byte) stamped
/// `start_ns` (the frame start time a TCP subscriber saw), whose time past the hour is the
/// offline frame's.
pub fn assert_pointcloud2_equal(i: usize, m: &Msg, off: &Frame, start_ns: u64, frame_id: &str) {
    let fields: Vec<(String, u32, u8, u32)> = FIELDS
        .iter()
        .map(|&(n, o, d, c)| (n.to_owned(), o, d, c))
        .collect();
    let n = off.points.len() as u64;
    assert_eq!(m.cdr_header, "00010000", "message {i} CDR LE encapsulation");
    assert_eq!(m.frame_id, frame_id, "message {i} frame_id");
    assert_eq!(
        (m.height, m.width, m.point_step, m.row_step),
        (1, n, 32, 32 * n),
        "message {i} height, width, point_step, row_step"
    );
    assert_eq!(m.fields, fields, "message {i} fields");
    assert!(!m.is_bigendian, "message {i} is_bigendian");
    assert!(m.is_dense, "message {i} is_dense");
    assert_eq!(
        m.payload_len,
        pointcloud2_len(frame_id, 32 * n as usize),
        "message {i} payload length"
    );
    let want = point_bytes(off.points.autoware());
    if m.data != want {
        let p = (0..off.points.len())
            .find(|&p| m.data.get(p * 32..p * 32 + 32) != Some(&want[p * 32..p * 32 + 32]))
            .unwrap_or(0);
        panic!(
            "message {i}: data differs from offline decoding ({} vs {} bytes), first at \
             point {p}: {:?}",
            m.data.len(),
            want.len(),
            off.points.autoware()[p]
        );
    }
    let stamp = m.sec as u64 * 1_000_000_000 + m.nanosec;
    assert!(
        m.nanosec < 1_000_000_000,
        "message {i} nanosec {}",
        m.nanosec
    );
    assert_eq!(stamp, start_ns, "message {i} stamp vs the frame start time");
    assert_eq!(
        stamp % HOUR_NS,
        off.header.start_ns % HOUR_NS,
        "message {i} stamp past the hour vs offline decoding"
    );
}
