//! Issue 26 through zenoh and DDS, checked by independent clients (the Python probe on
//! eclipse-zenoh, and Debian's Fast DDS subscriber, both decoding with rosbags):
//! the Ouster's IMU on `/lidar/<name>/imu` equals the IMU packets of the capture as Python's
//! `struct` reads them at Ouster's documented offsets (with ouster-ros's unit conversion) and
//! as ouster-sdk (pinned in bench/peers/py/requirements.txt) parses them, and
//! `/diagnostics` says OK while packets flow and ERROR once none came for the silence
//! threshold.
use std::process::Command;
use std::time::Duration;

use crate::common::{self, Daemon, NetnsPair, get, privileged, python_available};
use crate::probe::{Listen, Probe, SCRIPT, Scratch, now_ns, peer_config};

const OS0_32: &str = "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10";
/// Passes of the capture (0.1 s and 10 IMU packets each): two seconds of traffic.
const LOOPS: u64 = 20;
const IMU_KEY: &str = "0/lidar/os/imu/sensor_msgs::msg::dds_::Imu_/\
RIHS01_7d9a00ff131080897a5ec7e26e315954b8eae3353c3f995c55faf71574000b5b";
const DIAG_KEY: &str = "0/diagnostics/diagnostic_msgs::msg::dds_::DiagnosticArray_/\
RIHS01_5a8a36efb05fb25070fa0fb3810290c0e6cd4862b54a8fb975a1ee8dc55a333e";

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path.with_extension("jsonl"))
        .expect("probe output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

fn stamp_ns(m: &serde_json::Value) -> u64 {
    m["sec"].as_u64().unwrap() * 1_000_000_000 + m["nanosec"].as_u64().unwrap()
}

/// Where the IMU and `/diagnostics` messages are read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The Python probe subscribed to the daemon's zenoh peer, decoding with rosbags.
    Zenoh,
    /// The Fast DDS subscriber (`dds_sub_fastdds --raw-type`) in the other namespace, across
    /// the veth; its samples decoded afterwards with rosbags.
    Dds,
}

/// A subscriber of one topic and where its records end up (`<out>.jsonl`, one record per
/// message as `ros2_probe.py listen --type` writes them).
struct Reader {
    probe: Probe,
    raw: Option<(std::path::PathBuf, &'static str)>,
    out: std::path::PathBuf,
}

impl Reader {
    fn start(via: Via, net: &NetnsPair, s: &Scratch, topic: &str, ty: &'static str) -> Self {
        let name = topic.trim_start_matches('/').replace('/', "_");
        let out = s.path(&name);
        let ros_type = match ty {
            "imu" => "sensor_msgs/msg/Imu",
            _ => "diagnostic_msgs/msg/DiagnosticArray",
        };
        match via {
            Via::Zenoh => {
                let (key, token) = match ty {
                    "imu" => (IMU_KEY, "/MP/%/%/lidarxdp/%lidar%os%imu/"),
                    _ => (DIAG_KEY, "/MP/%/%/lidarxdp/%diagnostics/"),
                };
                let probe = Probe::listen(
                    &net.host_ns,
                    "subscriber",
                    &Listen {
                        connect: "tcp/127.0.0.1:17451",
                        key,
                        out: &out,
                        wait_token: token,
                        expect: None,
                        extra: &["--type", ros_type],
                    },
                );
                Reader {
                    probe,
                    raw: None,
                    out,
                }
            }
            Via::Dds => {
                let raw = s.path(&format!("{name}-raw"));
                let dds_type = match ty {
                    "imu" => "sensor_msgs::msg::dds_::Imu_",
                    _ => "diagnostic_msgs::msg::dds_::DiagnosticArray_",
                };
                let exe = crate::dds::checkers().fastdds.clone();
                let mut probe = Probe::spawn_exe(
                    &net.sensor_ns,
                    "Fast DDS subscriber",
                    &[
                        exe.to_str().unwrap(),
                        "--topic",
                        &format!("rt{topic}"),
                        "--out",
                        raw.to_str().unwrap(),
                        "--raw-type",
                        dds_type,
                        "--timeout-s",
                        "60",
                    ],
                );
                probe.wait_ready();
                Reader {
                    probe,
                    raw: Some((raw, ros_type)),
                    out,
                }
            }
        }
    }

    /// Stops the subscriber and returns its records (decoding the DDS samples with rosbags).
    fn finish(self) -> Vec<serde_json::Value> {
        self.probe.finish();
        if let Some((raw, ty)) = &self.raw {
            let r = Command::new(common::python())
                .args([SCRIPT, "decode-raw", "--type", ty, "--input"])
                .arg(raw.with_extension("jsonl"))
                .arg("--out")
                .arg(&self.out)
                .output()
                .expect("run decode-raw");
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        }
        lines(&self.out)
    }
}

/// The daemon decodes an Ouster with its IMU port on by default (7503 beside the default
/// data port 7502). Every IMU packet of 20 passes of the OS0-32 capture arrives on
/// `/lidar/os/imu` as a `sensor_msgs/msg/Imu` whose stamp is the gyroscope time and whose
/// values equal Python's reading of the same bytes to 1e-12 (f32 widened the same way) and
/// ouster-sdk's to 1e-6 (its float32 conversion); orientation unknown (covariance[0] = -1),
/// frame `os_imu`. `/diagnostics` has one status `lidarxdp: os`, OK while the replay runs
/// (loss and offset judged at 100 % and never, so only the silence rule can fire), then ERROR
/// "no packet for ..." no later than 2.1 s after the last packet (1 s of silence, the 1 s
/// period, the 50 ms main loop). Through zenoh ([`imu_and_diagnostics_through_zenoh`]) and
/// through DDS ([`imu_and_diagnostics_through_dds`]).
fn imu_and_diagnostics(via: Via) {
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new(if via == Via::Zenoh { "zh" } else { "dh" });
    let s = Scratch::new("health");
    let cfg = s.write("zenoh.json5", &peer_config(17451));
    let json = common::data(&format!("{OS0_32}.json"));
    let mut args = vec![
        "--sensor",
        "ouster",
        "--calibration",
        json.to_str().unwrap(),
        "--name",
        "os",
        "--health-loss-warn",
        "100",
        "--health-loss-error",
        "100",
        "--health-offset-ms",
        "0",
    ];
    match via {
        Via::Zenoh => args.extend(["--zenoh", "--zenoh-config", &cfg]),
        Via::Dds => args.push("--dds"),
    }
    let daemon = Daemon::start_with(&net.host_ns, &net.host_if, 7711, &args);
    // A TCP subscriber recording to MCAP (the protocol's `imu` messages on /lidar/os/imu).
    let mcap = s.path("rec.mcap");
    let ready = s.path("subscriber-ready");
    let mut recorder = (via == Via::Zenoh).then(|| {
        let exe = common::daemon_exe();
        let mut child = NetnsPair::exec(&net.host_ns, &[exe.to_str().unwrap(), "subscribe"])
            .args(["127.0.0.1:7711", "--json", "--mcap"])
            .arg(&mcap)
            .arg("--ready-file")
            .arg(&ready)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start lidarxdp subscribe");
        lidarxdp_testkit::wait_ready(&mut child, "subscriber", Duration::from_secs(30), || {
            ready.exists()
        })
        .unwrap();
        child
    });
    let imu = Reader::start(via, &net, &s, "/lidar/os/imu", "imu");
    let diag = Reader::start(via, &net, &s, "/diagnostics", "diagnostics");
    std::thread::sleep(Duration::from_millis(500));
    let exe = common::daemon_exe();
    let pcap = common::data(&format!("{OS0_32}.pcap"));
    let out = NetnsPair::exec(&net.sensor_ns, &[exe.to_str().unwrap(), "replay"])
        .arg(&pcap)
        .args(["--to", &format!("{}:0", net.host_ip)])
        .args(["--rate", "realtime", "--loop", &LOOPS.to_string(), "--json"])
        .output()
        .expect("run replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replay_end = now_ns();
    std::thread::sleep(Duration::from_millis(3_500));
    let stats = daemon.stop();
    let got = imu.finish();
    let diags = diag.finish();
    let recorded = recorder.take().map(|child| {
        // The daemon's shutdown ended the connection: the subscriber finishes the file.
        let out = child
            .wait_with_output()
            .expect("wait for lidarxdp subscribe");
        assert!(
            out.status.success(),
            "subscribe: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/publish/mcap_check.py");
        let r = Command::new(common::python())
            .arg(script)
            .arg(&mcap)
            .output()
            .expect("run mcap_check.py");
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        let f = &v["files"][0];
        let imu_channel = f["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["topic"] == "/lidar/os/imu")
            .cloned()
            .expect("an IMU channel");
        assert_eq!(
            imu_channel["schema"], "sensor_msgs/msg/Imu",
            "{imu_channel}"
        );
        assert_eq!(imu_channel["schema_encoding"], "ros2msg");
        let imu: Vec<serde_json::Value> = f["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["topic"] == "/lidar/os/imu")
            .cloned()
            .collect();
        for (i, m) in imu.iter().enumerate() {
            assert_eq!(m["sequence"], i as u64, "{m}");
        }
        imu
    });
    let sink = if via == Via::Zenoh { "zenoh" } else { "dds" };

    assert_eq!(got.len() as u64, 10 * LOOPS, "{stats}");
    assert_eq!(get(&stats, &[sink, "imu"]), 10 * LOOPS, "{stats}");
    assert_eq!(
        get(&stats, &["sensors", "0", "auxiliary"]),
        10 * LOOPS,
        "{stats}"
    );
    check_imu(OS0_32, &got);
    if let Some(imu) = recorded {
        assert_eq!(
            imu.len() as u64,
            10 * LOOPS,
            "IMU messages in the MCAP: {stats}"
        );
        assert_eq!(
            get(&stats, &["publisher", "imu_sent"]),
            10 * LOOPS,
            "{stats}"
        );
        let imu: Vec<serde_json::Value> = imu
            .into_iter()
            .map(|mut m| {
                // mcap_check.py's stamp in the probe's shape.
                let ns = m["stamp_ns"].as_u64().unwrap();
                m["sec"] = (ns / 1_000_000_000).into();
                m["nanosec"] = (ns % 1_000_000_000).into();
                m
            })
            .collect();
        check_imu(OS0_32, &imu);
    }

    let statuses: Vec<(u64, u64, String)> = diags
        .iter()
        .map(|m| {
            let st = &m["status"];
            // The sensor's status, then the daemon's memory (no growth verdict in a run this
            // short: OK).
            assert_eq!(st.as_array().unwrap().len(), 2, "{m}");
            assert_memory_ok(&st[1]);
            assert_eq!(st[0]["name"], "lidarxdp: os");
            assert_eq!(st[0]["hardware_id"], "Ouster udp:7502");
            let keys: Vec<&str> = st[0]["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|kv| kv[0].as_str().unwrap())
                .collect();
            assert_eq!(
                keys,
                [
                    "rate_hz",
                    "frame_rate_hz",
                    "loss_percent",
                    "frames_lost",
                    "malformed",
                    "silence_s",
                    "clock",
                    "sync_source",
                    "sync_state",
                    "nmea_valid",
                    "offset_ms",
                    "drift_ppm"
                ]
            );
            (
                stamp_ns(m),
                st[0]["level"].as_u64().unwrap(),
                st[0]["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        statuses.iter().any(|s| s.1 == 0 && s.2 == "OK"),
        "no OK while the replay ran: {statuses:?}"
    );
    let first_error = statuses
        .iter()
        .find(|s| s.0 > replay_end && s.1 == 2)
        .unwrap_or_else(|| panic!("no ERROR after the replay: {statuses:?}"));
    assert!(first_error.2.starts_with("no packet for "), "{statuses:?}");
    eprintln!(
        "IMU test: ERROR {} ms after the last packet",
        (first_error.0 - replay_end) / 1_000_000
    );
    assert!(
        first_error.0 - replay_end <= 2_100_000_000,
        "ERROR {} ms after the replay: {statuses:?}",
        (first_error.0 - replay_end) / 1_000_000
    );
    assert!(get(&stats, &[sink, "diagnostics"]) >= 4, "{stats}");
    assert_eq!(get(&stats, &[sink, "aux_errors"]), 0, "{stats}");
}

/// Checks IMU messages (as the probe or `mcap_check.py` decoded them, frame `os_imu`) against
/// the IMU packets of `capture`, repeated: message `i` is packet `i % 10`. References: Python's
/// `struct` at Ouster's offsets with ouster-ros's conversion (1e-12), and ouster-sdk's parse
/// (its values are float32: 1e-6 relative), when the peers' venv is there.
fn check_imu(capture: &str, got: &[serde_json::Value]) {
    let pcap = common::data(&format!("{capture}.pcap"));
    let r = Command::new(common::python())
        .args([SCRIPT, "pcap-imu", pcap.to_str().unwrap()])
        .output()
        .expect("run pcap-imu");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let reference: Vec<serde_json::Value> = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(reference.len(), 10, "{capture}");
    assert!(
        !got.is_empty() && got.len().is_multiple_of(10),
        "{capture}: {}",
        got.len()
    );
    let mut refs = vec![(reference, 1e-12, "Python")];
    if let Some(peers) = common::peers_python() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ros2/ouster_imu_ref.py");
        let r = Command::new(peers)
            .args([script, common::data(capture).to_str().unwrap()])
            .output()
            .expect("run ouster_imu_ref.py");
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let sdk: Vec<serde_json::Value> = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(sdk.len(), 10, "{capture}");
        refs.push((sdk, 1e-6, "ouster-sdk"));
    }
    for (want, tol, who) in &refs {
        for (i, m) in got.iter().enumerate() {
            let want = &want[i % 10];
            assert_eq!(
                stamp_ns(m),
                want["gyro_ts"].as_u64().unwrap(),
                "{capture} IMU {i}"
            );
            assert_eq!(m["frame_id"], "os_imu");
            assert_eq!(m["orientation"], serde_json::json!([0.0, 0.0, 0.0, 1.0]));
            assert_eq!(m["orientation_covariance"][0], -1.0);
            for field in ["linear_acceleration", "angular_velocity"] {
                for k in 0..3 {
                    let (a, b) = (
                        m[field][k].as_f64().unwrap(),
                        want[field][k].as_f64().unwrap(),
                    );
                    assert!(
                        (a - b).abs() <= tol * b.abs().max(1.0),
                        "{capture} IMU {i} {field}[{k}]: {a} vs {who} {b}"
                    );
                }
            }
        }
    }
}

/// The other two Ouster captures with IMU packets (OS0-128, OS2-128: 10 each), one pass each,
/// through zenoh and DDS: every reading arrives and equals Python's and ouster-sdk's.
fn imu_of_the_other_ouster_captures(via: Via) {
    let _alone = crate::one_at_a_time();
    for (i, capture) in [
        "ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10",
        "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10",
    ]
    .into_iter()
    .enumerate()
    {
        let tag = format!("{}{i}", if via == Via::Zenoh { "zi" } else { "di" });
        let net = NetnsPair::new(&tag);
        let s = Scratch::new(&format!("imu{i}"));
        let cfg = s.write("zenoh.json5", &peer_config(17451));
        let json = common::data(&format!("{capture}.json"));
        let mut args = vec![
            "--sensor",
            "ouster",
            "--calibration",
            json.to_str().unwrap(),
            "--name",
            "os",
        ];
        match via {
            Via::Zenoh => args.extend(["--zenoh", "--zenoh-config", &cfg]),
            Via::Dds => args.push("--dds"),
        }
        let daemon = Daemon::start_with(&net.host_ns, &net.host_if, 7712, &args);
        let imu = Reader::start(via, &net, &s, "/lidar/os/imu", "imu");
        std::thread::sleep(Duration::from_millis(500));
        let exe = common::daemon_exe();
        let pcap = common::data(&format!("{capture}.pcap"));
        let out = NetnsPair::exec(&net.sensor_ns, &[exe.to_str().unwrap(), "replay"])
            .arg(&pcap)
            .args(["--to", &format!("{}:0", net.host_ip)])
            .args(["--rate", "realtime", "--json"])
            .output()
            .expect("run replay");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
        let stats = daemon.stop();
        let got = imu.finish();
        assert_eq!(got.len(), 10, "{capture}: {stats}");
        check_imu(capture, &got);
    }
}

#[test]
fn imu_of_the_other_ouster_captures_through_zenoh() {
    if !privileged() || !python_available() {
        return;
    }
    imu_of_the_other_ouster_captures(Via::Zenoh);
}

#[test]
fn imu_of_the_other_ouster_captures_through_dds() {
    if !privileged() || !python_available() {
        return;
    }
    imu_of_the_other_ouster_captures(Via::Dds);
}

#[test]
fn imu_and_diagnostics_through_zenoh() {
    if !privileged() || !python_available() {
        return;
    }
    imu_and_diagnostics(Via::Zenoh);
}

#[test]
fn imu_and_diagnostics_through_dds() {
    if !privileged() || !python_available() {
        return;
    }
    imu_and_diagnostics(Via::Dds);
}

/// The daemon's `lidarxdp: memory` status of a short run: OK, its keys in order, resident and
/// heap bytes above 0, no growth verdict yet (under 10 minutes of samples), the default
/// threshold.
fn assert_memory_ok(st: &serde_json::Value) {
    assert_eq!(st["name"], "lidarxdp: memory", "{st}");
    assert_eq!(
        (st["level"].as_u64(), st["message"].as_str()),
        (Some(0), Some("OK")),
        "{st}"
    );
    let kv: Vec<(&str, &str)> = st["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (kv[0].as_str().unwrap(), kv[1].as_str().unwrap()))
        .collect();
    let keys: Vec<&str> = kv.iter().map(|p| p.0).collect();
    assert_eq!(
        keys,
        [
            "resident_bytes",
            "heap_bytes",
            "heap_free_bytes",
            "growth_mib_per_hour",
            "window_min",
            "warn_mib_per_hour"
        ]
    );
    assert!(kv[0].1.parse::<u64>().unwrap() > 0, "{st}");
    assert!(kv[1].1.parse::<u64>().unwrap() > 0, "{st}");
    assert_eq!(
        &kv[3..],
        [
            ("growth_mib_per_hour", "unknown"),
            ("window_min", "0.0"),
            ("warn_mib_per_hour", "16")
        ]
    );
}

/// One status as the probe decoded it: stamp (ns), level, message, key/values.
type Status = (u64, u64, String, Vec<(String, String)>);

/// The statuses of a diagnostics probe's output: `(stamp ns, level, message, values)`, each
/// array holding one status named `lidarxdp: <name>` and the memory status after it.
fn statuses(out: &std::path::Path, name: &str) -> Vec<Status> {
    lines(out)
        .iter()
        .map(|m| {
            let st = &m["status"];
            assert_eq!(st.as_array().unwrap().len(), 2, "{m}");
            assert_memory_ok(&st[1]);
            assert_eq!(st[0]["name"], format!("lidarxdp: {name}"));
            let values = st[0]["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|kv| {
                    (
                        kv[0].as_str().unwrap().to_owned(),
                        kv[1].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            (
                stamp_ns(m),
                st[0]["level"].as_u64().unwrap(),
                st[0]["message"].as_str().unwrap().to_owned(),
                values,
            )
        })
        .collect()
}

fn value<'a>(values: &'a [(String, String)], key: &str) -> &'a str {
    &values.iter().find(|kv| kv.0 == key).expect(key).1
}

/// A VLP-16 with its position port on by default (8308 beside data port 2368). The shared
/// capture's position packets, read in Python at the VLP-16 manual's offsets, say PPS absent
/// and no NMEA sentence: the daemon reports the clock free running on its own oscillator
/// (`sync_source` internal, `sync_state` free, `nmea_valid` none) on `/diagnostics` and in the
/// clock gauges, and counts every position packet `auxiliary`. Then a replay of the dual-return
/// capture with every 20th data packet removed (5 %) turns the level to WARN "packet loss", with
/// a loss between the WARN and ERROR thresholds (0.1 and 10 %), and the silence after it to
/// ERROR.
#[test]
fn velodyne_sync_state_and_loss_on_diagnostics() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("zp");
    let s = Scratch::new("health-vlp");
    let cfg = s.write("zenoh.json5", &peer_config(17452));
    let python = |args: &[&str]| -> serde_json::Value {
        let r = Command::new(common::python())
            .arg(SCRIPT)
            .args(args)
            .output()
            .expect("run ros2_probe.py");
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        serde_json::from_slice(&r.stdout).unwrap()
    };
    let position_pcap =
        common::data("velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap");
    let positions = python(&["pcap-position", position_pcap.to_str().unwrap()]);
    let positions = positions.as_array().unwrap();
    assert_eq!(positions.len(), 16);
    // The manual's states: PPS absent = the sensor's own clock, free running.
    let pps: std::collections::BTreeSet<&str> = positions
        .iter()
        .map(|p| p["pps"].as_str().unwrap())
        .collect();
    let (source, state, source_code, state_code) = match pps.iter().copied().collect::<Vec<_>>()[..]
    {
        ["absent"] => ("internal", "free", 1, 1),
        ["locked"] => ("pps", "locked", 2, 3),
        ref other => panic!("the capture's PPS states {other:?}"),
    };
    let rmc = positions.last().unwrap()["rmc_status"]
        .as_str()
        .map(|s| s == "A");
    let lossy = s.path("lossy.pcap");
    let dual = common::data(crate::probe::DUAL);
    let dropped = python(&[
        "pcap-drop",
        dual.to_str().unwrap(),
        "--out",
        lossy.to_str().unwrap(),
        "--port",
        "2368",
        "--every",
        "20",
    ]);
    assert_eq!(dropped["dropped"], 30);

    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7712,
        &["--health-offset-ms", "0", "--zenoh", "--zenoh-config", &cfg],
    );
    let diag_out = s.path("diag");
    let diag = Probe::listen(
        &net.host_ns,
        "subscriber",
        &Listen {
            connect: "tcp/127.0.0.1:17452",
            key: DIAG_KEY,
            out: &diag_out,
            wait_token: "/MP/%/%/lidarxdp/%diagnostics/",
            expect: None,
            extra: &["--type", "diagnostic_msgs/msg/DiagnosticArray"],
        },
    );
    let exe = common::daemon_exe();
    let replay = |pcap: &std::path::Path, port: u16, loops: u32| {
        let out = NetnsPair::exec(&net.sensor_ns, &[exe.to_str().unwrap(), "replay"])
            .arg(pcap)
            .args(["--to", &format!("{}:{port}", net.host_ip)])
            .args(["--rate", "realtime", "--loop", &loops.to_string(), "--json"])
            .output()
            .expect("run replay");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    // Position and data packets to their recorded ports (2368, 8308), 1.2 s.
    replay(&position_pcap, 0, 10);
    let lossy_start = now_ns();
    let sent = replay(&lossy, 2368, 6);
    assert_eq!(get(&sent, &["sent"]), 6 * 573);
    let lossy_end = now_ns();
    std::thread::sleep(Duration::from_millis(3_000));
    let stats = daemon.stop();
    diag.finish();

    assert_eq!(get(&stats, &["sensors", "0", "auxiliary"]), 160, "{stats}");
    let gauge = |k| get(&stats, &["sensors", "0", "clock", k]);
    assert_eq!(
        (
            gauge("sync_source"),
            gauge("sync_state"),
            gauge("nmea_valid")
        ),
        (source_code, state_code, rmc.map_or(0, |v| 1 + u64::from(v))),
        "{stats}"
    );
    let all = statuses(&diag_out, "VLP16");
    let last = &all.last().expect("statuses").3;
    assert_eq!(value(last, "sync_source"), source, "{all:?}");
    assert_eq!(value(last, "sync_state"), state, "{all:?}");
    assert_eq!(
        value(last, "nmea_valid"),
        rmc.map_or("none".to_owned(), |v| v.to_string()),
        "{all:?}"
    );
    let warn: Vec<_> = all
        .iter()
        .filter(|s| s.0 > lossy_start && s.0 <= lossy_end + 200_000_000)
        .filter(|s| s.1 == 1 && s.2.starts_with("packet loss "))
        .collect();
    assert!(!warn.is_empty(), "no WARN during the lossy replay: {all:?}");
    for w in &warn {
        let loss: f64 = value(&w.3, "loss_percent").parse().unwrap();
        assert!(loss > 0.1 && loss <= 10.0, "{w:?}");
    }
    let error = all
        .iter()
        .find(|s| s.0 > lossy_end && s.1 == 2)
        .unwrap_or_else(|| panic!("no ERROR after the replay: {all:?}"));
    assert!(error.2.starts_with("no packet for "), "{error:?}");
    assert!(error.0 - lossy_end <= 2_100_000_000, "{error:?}");
    eprintln!(
        "lossy replay: WARN losses {:?} %; ERROR {} ms after the last packet",
        warn.iter()
            .map(|w| value(&w.3, "loss_percent"))
            .collect::<Vec<_>>(),
        (error.0 - lossy_end) / 1_000_000
    );
}
