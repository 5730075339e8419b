//! Many sensors and capture threads from one configuration file (issue 6): two sensors on one
//! interface and queue, demultiplexed by port in userspace; two interfaces, one capture thread
//! each, pinned with `--cpus`; `lidarxdp check-config` on good and bad files. The privileged
//! tests run in throwaway namespaces (root, `cargo xtask test`).
use crate::common;

use std::time::Duration;

use common::{Daemon, NetnsPair, collect_frames, data, get, privileged};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const STRONGEST: &str = "velodyne/vlp16/vlp16_strongest_84pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("lidarxdp-{name}-{}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

fn sensor_toml(name: &str, port: u16, extra: &str) -> String {
    format!(
        "[[sensors]]\nname = \"{name}\"\nmodel = \"vlp16\"\ncalibration = \"{}\"\nport = {port}\n{extra}\n",
        data(CALIB).display()
    )
}

fn offline(pcap: &str) -> (usize, usize) {
    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(CALIB));
    let (frames, _) = lidarxdp::offline::decode_pcap(&data(pcap), &cfg, None).unwrap();
    (frames.len(), frames.iter().map(|f| f.points.len()).sum())
}

/// Two VLP-16s on ports 2368 and 2369 of one interface and queue: one capture thread, each
/// packet to its own sensor, each sensor's frames carrying its id, nothing unknown.
#[test]
fn two_sensors_share_one_queue() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("cfg2");
    let text = format!(
        "{}{}",
        sensor_toml("front", 2368, ""),
        sensor_toml("rear", 2369, "")
    );
    let cfg = write_config("two", &text);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7641,
        &["--config", cfg.to_str().unwrap()],
    );
    let subscriber = collect_frames(&net.host_ns, 7641);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        get(&common::replay(&net, DUAL, 2368, "3000"), &["sent"]),
        603
    );
    assert_eq!(
        get(&common::replay(&net, STRONGEST, 2369, "3000"), &["sent"]),
        84
    );
    std::thread::sleep(Duration::from_millis(400));
    let stats = daemon.stop();
    let frames = subscriber.join().unwrap();
    let _ = std::fs::remove_file(&cfg);

    assert_eq!(stats["queues"].as_array().unwrap().len(), 1, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{stats}");
    assert_eq!(get(&stats, &["sensors", "1", "decoded"]), 84, "{stats}");
    assert_eq!(get(&stats, &["capture", "unknown_sensor"]), 0, "{stats}");
    assert_eq!(get(&stats, &["xdp", "redirected"]), 687, "{stats}");
    for (id, pcap) in [(0u16, DUAL), (1, STRONGEST)] {
        let (n, points) = offline(pcap);
        let mine: Vec<_> = frames.iter().filter(|(h, _)| h.sensor_id == id).collect();
        assert_eq!(mine.len(), n, "sensor {id} frames");
        assert_eq!(
            mine.iter().map(|(_, p)| p.len()).sum::<usize>(),
            points,
            "sensor {id} points"
        );
    }
}

/// Two interfaces (two veth pairs), one sensor each: two capture threads, pinned with
/// `--cpus 0,1`, each bound to its own interface; every packet decoded by its own thread.
#[test]
fn two_interfaces_get_a_capture_thread_each() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("cfgif");
    let (_sif, hif, _sip, hip) = net.add_link();
    let text = format!(
        "{}{}",
        sensor_toml("a", 2368, ""),
        sensor_toml("b", 2368, &format!("iface = \"{hif}\""))
    );
    let cfg = write_config("ifaces", &text);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7642,
        &["--config", cfg.to_str().unwrap(), "--cpus", "0,1"],
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        get(&common::replay(&net, DUAL, 2368, "3000"), &["sent"]),
        603
    );
    assert_eq!(
        get(
            &common::replay_to(&net, STRONGEST, &hip, 2368, "3000"),
            &["sent"]
        ),
        84
    );
    std::thread::sleep(Duration::from_millis(400));
    let stats = daemon.stop();
    let _ = std::fs::remove_file(&cfg);

    let queues = stats["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2, "{stats}");
    assert_eq!(queues[0]["iface"], net.host_if.as_str());
    assert_eq!(queues[1]["iface"], hif.as_str());
    assert_eq!(get(&queues[0], &["capture", "sensor_datagrams"]), 603);
    assert_eq!(get(&queues[1], &["capture", "sensor_datagrams"]), 84);
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{stats}");
    assert_eq!(get(&stats, &["sensors", "1", "decoded"]), 84, "{stats}");
    let ifs = stats["interfaces"].as_array().unwrap();
    assert_eq!(ifs.len(), 2);
    assert_eq!(get(&ifs[1], &["xdp", "redirected"]), 84);
}

/// Two RX queues of one interface, one sensor each: two AF_XDP sockets and two capture threads
/// on one XDP program. The sender side steers each replay to its TX queue with XPS (tx-0 on
/// CPU 0, tx-1 on CPU 1) and `taskset`; veth delivers TX queue n to the peer's RX queue n.
#[test]
fn two_queues_of_one_interface_get_a_capture_thread_each() {
    if !privileged() {
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipping: needs 2 CPUs to steer the replays to two queues");
        return;
    }
    let net = NetnsPair::with_queues("cfgq", 2);
    for (q, mask) in [(0, "1"), (1, "2")] {
        common::sh(&[
            "ip",
            "netns",
            "exec",
            &net.sensor_ns,
            "sh",
            "-c",
            &format!(
                "echo {mask} > /sys/class/net/{}/queues/tx-{q}/xps_cpus",
                net.sensor_if
            ),
        ]);
    }
    let text = format!(
        "{}{}",
        sensor_toml("q0", 2368, "queue = 0"),
        sensor_toml("q1", 2369, "queue = 1")
    );
    let cfg = write_config("queues", &text);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7643,
        &["--config", cfg.to_str().unwrap()],
    );
    std::thread::sleep(Duration::from_millis(200));
    for (cpu, pcap, port, n) in [("0", DUAL, 2368, 603), ("1", STRONGEST, 2369, 84)] {
        let out = NetnsPair::exec(
            &net.sensor_ns,
            &[
                "taskset",
                "-c",
                cpu,
                env!("CARGO_BIN_EXE_lidarxdp"),
                "replay",
            ],
        )
        .arg(data(pcap))
        .args(["--to", &format!("{}:{port}", net.host_ip)])
        .args(["--rate", "3000", "--json"])
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(get(&r, &["sent"]), n);
    }
    std::thread::sleep(Duration::from_millis(400));
    let stats = daemon.stop();
    let _ = std::fs::remove_file(&cfg);

    let queues = stats["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2, "{stats}");
    for (k, (q, n)) in [(0u64, 603u64), (1, 84)].into_iter().enumerate() {
        assert_eq!(get(&queues[k], &["queue"]), q);
        assert_eq!(
            get(&queues[k], &["capture", "sensor_datagrams"]),
            n,
            "{stats}"
        );
        assert_eq!(
            get(&queues[k], &["capture", "unknown_sensor"]),
            0,
            "{stats}"
        );
    }
    assert_eq!(stats["interfaces"].as_array().unwrap().len(), 1);
    assert_eq!(get(&stats, &["xdp", "redirected"]), 687, "{stats}");
}

fn check_config(text: &str) -> (bool, String, String) {
    let cfg = write_config(&format!("check{}", text.len()), text);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&cfg);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `check-config` prints the effective configuration of a good file, every section with its
/// defaults filled in, and names the field, value and valid range of a bad one; it touches no
/// interface.
#[test]
fn check_config_prints_every_section_and_names_bad_fields() {
    let good = format!(
        "[capture]\niface = \"eth9\"\n[tcp]\nmax_subscribers = 4\n[metrics]\n\
         listen = \"127.0.0.1:9751\"\n[foxglove]\nlisten = \"127.0.0.1:8765\"\n\
         [recording]\npcap = \"/tmp/lxcheck.pcap\"\nsplit_size_mb = 100\n{}{}[[queues]]\n\
         queue = 1\numem_frames = 8192\n",
        sensor_toml("front", 2368, ""),
        sensor_toml("rear", 2369, "queue = 1\ncut_angle = 90.0")
    );
    let (ok, out, err) = check_config(&good);
    assert!(ok, "{err}");
    let plan: toml::Value = toml::from_str(&out).unwrap();
    assert_eq!(plan["capture"]["backend"].as_str(), Some("xdp"));
    assert_eq!(plan["capture"]["wait"].as_str(), Some("paced:1000"));
    assert_eq!(plan["capture"]["frame_queue"].as_integer(), Some(16));
    assert_eq!(plan["process"]["keep_caps"].as_bool(), Some(false));
    assert_eq!(
        plan["process"]["memory_growth_warn_mb_per_hour"].as_integer(),
        Some(16)
    );
    let sinks = &plan["sinks"];
    assert_eq!(sinks["tcp"]["listen"].as_str(), Some("127.0.0.1:7510"));
    assert_eq!(sinks["tcp"]["max_subscribers"].as_integer(), Some(4));
    assert_eq!(sinks["tcp"]["subscriber_queue"].as_integer(), Some(3));
    assert_eq!(sinks["metrics"].as_str(), Some("127.0.0.1:9751"));
    assert_eq!(sinks["foxglove"].as_str(), Some("127.0.0.1:8765"));
    assert_eq!(
        sinks["recording"]["pcap"].as_str(),
        Some("/tmp/lxcheck.pcap")
    );
    assert_eq!(sinks["recording"]["split_size_mb"].as_integer(), Some(100));
    for off in ["zenoh", "dds", "view"] {
        assert_eq!(sinks[off].as_str(), Some("off"), "{out}");
    }
    let queues = plan["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2);
    assert_eq!(queues[0]["iface"].as_str(), Some("eth9"));
    assert_eq!(queues[0]["umem_frames"].as_integer(), Some(4096));
    assert_eq!(queues[1]["queue"].as_integer(), Some(1));
    assert_eq!(queues[1]["umem_frames"].as_integer(), Some(8192));
    let rear = &queues[1]["sensors"].as_array().unwrap()[0];
    assert_eq!(rear["name"].as_str(), Some("rear"));
    assert_eq!(rear["id"].as_integer(), Some(1));
    assert_eq!(rear["cut_angle"].as_float(), Some(90.0));
    assert_eq!(rear["stamp"].as_str(), Some("sensor"));
    assert!(err.contains("2 sensor(s) on 2 capture thread(s)"), "{err}");

    // A range: the file's line and key, the value, the valid range.
    let (ok, _, err) = check_config(&format!(
        "[capture]\niface = \"eth9\"\n{}",
        sensor_toml("front", 2368, "cut_angle = 400.0")
    ));
    assert!(!ok);
    assert!(
        err.contains("cut_angle = 400.0")
            && err.contains("400 is out of range; valid [0, 360] deg"),
        "{err}"
    );
    let (ok, _, err) =
        check_config("[capture]\niface = \"eth9\"\n[[sensors]]\nmodel = \"vlp16\"\nport = 2368\n");
    assert!(!ok);
    assert!(err.contains("sensors[0].calibration: required"), "{err}");
    // The old flat layout is refused with the key named.
    let (ok, _, err) = check_config(&format!(
        "iface = \"eth9\"\n{}",
        sensor_toml("front", 2368, "")
    ));
    assert!(!ok);
    assert!(err.contains("unknown field `iface`"), "{err}");
    let (ok, _, err) = check_config(&format!(
        "[capture]\niface = \"eth9\"\n{}",
        sensor_toml("front", 2368, "calibration = \"/nonexistent.yaml\"").replacen(
            &format!("calibration = \"{}\"\n", data(CALIB).display()),
            "",
            1
        )
    ));
    assert!(!ok);
    assert!(err.contains("/nonexistent.yaml"), "{err}");
    let (ok, _, err) = check_config(&format!(
        "[capture]\niface = \"eth9\"\n[process]\nmemory_growth_warn_mb_per_hour = 70000\n{}",
        sensor_toml("front", 2368, "")
    ));
    assert!(!ok);
    assert!(
        err.contains("memory_growth_warn_mb_per_hour = 70000")
            && err.contains("70000 is out of range; valid 0..=65536"),
        "{err}"
    );
    // The process settings `run` refuses are refused here too.
    let (ok, _, err) = check_config(&format!(
        "[capture]\niface = \"eth9\"\n[process]\nuser = \"no_such_user_lxq\"\n{}",
        sensor_toml("front", 2368, "")
    ));
    assert!(!ok);
    assert!(err.contains("--user no_such_user_lxq"), "{err}");
    let (ok, _, err) = check_config(&format!(
        "[capture]\niface = \"eth9\"\n[metrics]\nlisten = \"0.0.0.0:9751\"\n{}",
        sensor_toml("front", 2368, "")
    ));
    assert!(!ok);
    assert!(
        err.contains("--metrics (metrics.listen): 0.0.0.0:9751 is not a loopback address"),
        "{err}"
    );
    // A file too big to be a configuration is refused before it is read.
    let (ok, _, err) = check_config(&format!("# {}\n", "x".repeat(1 << 20)));
    assert!(!ok);
    assert!(
        err.contains("bytes is larger than the 1048576 bytes a configuration file may have"),
        "{err}"
    );
}

/// A relative calibration path in the file is relative to the file's folder, whatever the
/// working directory (systemd starts the daemon in `/`).
#[test]
fn relative_paths_in_the_file_are_relative_to_the_file() {
    let dir = std::env::temp_dir().join(format!("lidarxdp-rel-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("cal")).unwrap();
    std::fs::copy(data(CALIB), dir.join("cal/VLP16db.yaml")).unwrap();
    let cfg = dir.join("lidarxdp.toml");
    std::fs::write(
        &cfg,
        "[capture]\niface = \"eth9\"\n[[sensors]]\nmodel = \"vlp16\"\ncalibration = \"cal/VLP16db.yaml\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .arg("check-config")
        .arg(&cfg)
        .current_dir("/")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "calibration = \"{}\"",
            dir.join("cal/VLP16db.yaml").display()
        )),
        "{text}"
    );
}
