//! Privileged end-to-end tests of `lidarxdp run --record-pcap` (issue 14): the real VLP-16
//! capture of the demo replayed into a daemon in throwaway namespaces, through AF_XDP (whole
//! Ethernet frames recorded) and through a socket backend (headers synthesized); the recording
//! decodes (`lidarxdp::offline` and `lidarxdp decode --pcap REC --json`) to exactly the frames
//! a TCP subscriber received, holds every sent datagram's payload in order, and rotates into
//! parts whose packets add up to what was sent.
use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Daemon, NetnsPair, collect_frames, daemon_exe, data, get, privileged};
use lidarxdp::privs::CapState;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

/// The demo's capture: 603 packets of a real VLP-16 in dual-return mode.
const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

/// A fresh folder for one test's recordings, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("lidarxdp-rec-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every UDP payload of a capture to port 2368, in order, with the record times (ns).
fn payloads(path: &Path) -> Vec<(Vec<u8>, u128)> {
    let (d, _) = lidarxdp::replay::read_udp_datagrams(path, Some(2368)).unwrap();
    d.into_iter()
        .map(|d| (d.payload, d.timestamp.as_nanos()))
        .collect()
}

/// The capability state of every thread of `pid`, by thread name.
fn thread_caps(pid: u32) -> Vec<(String, CapState)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| {
            let t = t.unwrap().path();
            let status = std::fs::read_to_string(t.join("status")).unwrap();
            let name = std::fs::read_to_string(t.join("comm")).unwrap();
            (name.trim().to_owned(), CapState::parse(&status).unwrap())
        })
        .collect()
}

/// Runs a daemon on `backend` recording to DIR/rec.pcap, replays the demo's capture at its
/// recorded rate, stops the daemon, and checks the recording against what the subscriber got.
fn record_and_compare(backend: &str, listen_port: u16) {
    let net = NetnsPair::new(&format!("rec{}", &backend[..2]));
    let dir = TempDir::new(backend);
    let rec = dir.0.join("rec.pcap");
    let rec_arg = rec.to_str().unwrap();
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        listen_port,
        &["--backend", backend, "--record-pcap", rec_arg],
    );
    // The writer thread, like every other, holds no capability. (The publisher's socket
    // accepts before the threads start: wait for the writer.)
    let mut threads = thread_caps(daemon.child.id());
    for _ in 0..250 {
        if threads.iter().any(|(n, _)| n == "record-pcap") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        threads = thread_caps(daemon.child.id());
    }
    assert!(
        threads.iter().any(|(n, _)| n == "record-pcap"),
        "{threads:?}"
    );
    for (name, caps) in &threads {
        assert_eq!(
            (caps.effective, caps.permitted, caps.ambient),
            (0, 0, 0),
            "thread {name}"
        );
    }
    let subscriber = collect_frames(&net.host_ns, listen_port);
    std::thread::sleep(Duration::from_millis(200));
    let sent = get(&common::replay(&net, DUAL, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 603);
    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    let live = subscriber.join().unwrap();

    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{stats}");
    assert_eq!(get(&stats, &["recording", "packets"]), sent, "{stats}");
    assert_eq!(get(&stats, &["recording", "dropped"]), 0, "{stats}");
    assert_eq!(get(&stats, &["recording", "files"]), 1, "{stats}");
    assert_eq!(get(&stats, &["recording", "errors"]), 0, "{stats}");
    // Ethernet frames of a 1206-byte payload: 14 + 20 + 8 + 1206 bytes each.
    assert_eq!(get(&stats, &["recording", "bytes"]), 603 * 1248, "{stats}");

    // The recording holds the sent payloads in order, stamped with non-decreasing receive
    // times (the host clock, not the capture's).
    let original = payloads(&data(DUAL));
    let recorded = payloads(&rec);
    assert_eq!(recorded.len(), original.len());
    for (i, (r, o)) in recorded.iter().zip(&original).enumerate() {
        assert!(r.0 == o.0, "payload {i} differs");
    }
    assert!(recorded.windows(2).all(|w| w[0].1 <= w[1].1));
    assert!(
        recorded[0].1 > original[602].1,
        "receive times, not the capture's"
    );

    // Decoded offline, the recording gives exactly the published frames, their host times
    // (the recorded receive times) included.
    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(CALIB));
    let (offline, _) = lidarxdp::offline::decode_pcap(&rec, &cfg, Some(2368)).unwrap();
    assert_eq!(live.len(), 4);
    common::assert_frames_equal(&live, &offline);
    for (i, ((h, _), off)) in live.iter().zip(&offline).enumerate() {
        assert_eq!(h.host_ns, off.header.host_ns, "frame {i}");
        assert_eq!(h.start_ns, off.header.start_ns, "frame {i}");
    }

    // And so does the command line.
    let calib = data(CALIB);
    let out = std::process::Command::new(daemon_exe())
        .args(["decode", "--pcap", rec_arg, "--sensor", "vlp16", "--json"])
        .arg("--calibration")
        .arg(&calib)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "decode: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frames: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("summary").is_none())
        .collect();
    assert_eq!(frames.len(), live.len());
    for ((h, pts), f) in live.iter().zip(&frames) {
        assert_eq!(f["seq"], h.sequence, "{f}");
        assert_eq!(f["points"], pts.len(), "{f}");
        assert_eq!(f["packets"], h.packets_received, "{f}");
        assert_eq!(f["host_ns"], h.host_ns, "{f}");
    }
}

/// AF_XDP: the whole Ethernet frames from the UMEM are recorded.
#[test]
fn xdp_recording_decodes_to_the_published_frames() {
    if !privileged() {
        return;
    }
    record_and_compare("xdp", 7691);
}

/// A socket backend: IPv4 and UDP headers synthesized around each payload.
#[test]
fn socket_recording_decodes_to_the_published_frames() {
    if !privileged() {
        return;
    }
    record_and_compare("recvmmsg", 7692);
}

/// `--record-split-size 1`: the capture replayed three times (1,809 packets, 2.3 MB of records)
/// fills parts `rec_0.pcap`, `rec_1.pcap`, ... of at most 10^6 bytes each, whose packets add
/// up to the sent ones and follow each other in order.
#[test]
fn recording_rotates_into_parts() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("recsp");
    let dir = TempDir::new("split");
    let rec = dir.0.join("rec.pcap");
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7693,
        &[
            "--record-pcap",
            rec.to_str().unwrap(),
            "--record-split-size",
            "1",
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    let exe = daemon_exe();
    let out = NetnsPair::exec(&net.sensor_ns, &[exe.to_str().unwrap(), "replay"])
        .arg(data(DUAL))
        .args(["--to", &format!("{}:2368", net.host_ip)])
        .args(["--rate", "5000", "--loop", "3", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = get(&serde_json::from_slice(&out.stdout).unwrap(), &["sent"]);
    assert_eq!(sent, 3 * 603);
    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    assert_eq!(get(&stats, &["recording", "packets"]), sent, "{stats}");
    assert_eq!(get(&stats, &["recording", "dropped"]), 0, "{stats}");
    // 1,264 bytes per record (16 + 1,248): 791 records fit 10^6 - 24 bytes.
    assert_eq!(get(&stats, &["recording", "files"]), 3, "{stats}");
    assert!(!rec.exists(), "the unsplit name is not written");
    let original = payloads(&data(DUAL));
    let mut all = Vec::new();
    for n in 0..3 {
        let part = dir.0.join(format!("rec_{n}.pcap"));
        assert!(std::fs::metadata(&part).unwrap().len() <= 1_000_000);
        let p = payloads(&part);
        assert_eq!(
            p.len(),
            if n < 2 { 791 } else { 1809 - 2 * 791 },
            "part {n}"
        );
        all.extend(p);
    }
    assert!(!dir.0.join("rec_3.pcap").exists());
    assert_eq!(all.len(), 1809);
    for (i, (r, o)) in all.iter().zip(original.iter().cycle()).enumerate() {
        assert!(r.0 == o.0, "payload {i} differs");
    }
}

/// Bad recording flags are refused before anything is set up, naming the flag and the range.
#[test]
fn bad_record_flags_are_refused() {
    let cal = data(CALIB);
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(daemon_exe())
            .args(["run", "--backend", "socket", "--sensor", "vlp16"])
            .arg("--calibration")
            .arg(&cal)
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{extra:?} accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&["--record-pcap", "/tmp/x.pcap", "--record-split-size", "0"]);
    assert!(
        e.contains(
            "invalid value '0' for '--record-split-size <MB>': 0 is out of range; valid \
             1..=1048576"
        ),
        "{e}"
    );
    let e = run(&[
        "--record-pcap",
        "/tmp/x.pcap",
        "--record-split-duration",
        "604801",
    ]);
    assert!(
        e.contains(
            "invalid value '604801' for '--record-split-duration <S>': 604801 is out of range; \
             valid 1..=604800"
        ),
        "{e}"
    );
    let e = run(&["--record-split-duration", "60"]);
    assert!(e.contains("need --record-pcap FILE"), "{e}");
    assert!(!Path::new("/tmp/x.pcap").exists());
}

/// A recording file that cannot be created fails the start-up, naming the flag and the file.
#[test]
fn an_uncreatable_recording_fails_the_start_up() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("recbad");
    let exe = daemon_exe();
    let cal = data(CALIB);
    let out = NetnsPair::exec(&net.host_ns, &[exe.to_str().unwrap(), "run"])
        .args(["--backend", "socket", "--sensor", "vlp16", "--listen"])
        .arg("127.0.0.1:7694")
        .arg("--calibration")
        .arg(&cal)
        .args(["--record-pcap", "/proc/no-such-dir/rec.pcap"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--record-pcap") && e.contains("/proc/no-such-dir/rec.pcap"),
        "{e}"
    );
}
