//! The Prometheus endpoint (`lidarxdp run --metrics`) and `lidarxdp stats`: live values over
//! HTTP inside the daemon's namespace after a replayed capture, 404 for other paths, and the
//! loopback-only rule. The first test is privileged (see `lidarxdp_testkit::privileged`).
use crate::common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    time::{Duration, Instant},
};

use common::{Daemon, NetnsPair, get, in_netns, privileged};

const PCAP: &str = "velodyne/vlp16/vlp16_strongest_84pkt.pcap";
const METRICS_PORT: u16 = 9751;

/// `GET path` on 127.0.0.1:9751 inside `ns`; returns (status line, body).
fn http_get(ns: &str, path: &str) -> (String, String) {
    let path = path.to_owned();
    in_netns(ns, move || {
        let mut s = TcpStream::connect(("127.0.0.1", METRICS_PORT)).expect("connect metrics");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let (head, body) = resp.split_once("\r\n\r\n").expect("HTTP response");
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    })
}

/// The value of the sample line starting with `series ` (name plus labels, exactly).
fn value(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} missing in\n{text}"))
        .parse()
        .unwrap()
}

/// The names (`comm`, proc(5)) of every thread of process `pid`.
fn named_threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim_end().to_owned())
        .collect()
}

#[test]
fn metrics_endpoint_reports_live_counters_of_a_replayed_capture() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("met");
    let addr = format!("127.0.0.1:{METRICS_PORT}");
    let daemon = Daemon::start(&net.host_ns, &net.host_if, 7611, &["--metrics", &addr]);

    assert_eq!(get(&common::replay(&net, PCAP, 2368, "max"), &["sent"]), 84);

    let q = format!(r#"{{iface="{}",queue="0"}}"#, net.host_if);
    let s = r#"{sensor="VLP16",model="VLP16"}"#;
    let want: Vec<(String, u64)> = vec![
        ("lidarxdp_xdp_redirected_total".to_owned(), 84),
        ("lidarxdp_xdp_no_socket_total".to_owned(), 0),
        (format!("lidarxdp_sensor_packets_total{s}"), 84),
        (format!("lidarxdp_sensor_decoded_total{s}"), 84),
        (format!("lidarxdp_sensor_bytes_total{s}"), 84 * 1206),
        (format!("lidarxdp_sensor_malformed_total{s}"), 0),
        (format!("lidarxdp_sensor_ignored_total{s}"), 0),
        (format!("lidarxdp_capture_rx_frames_total{q}"), 84),
        (format!("lidarxdp_capture_rx_bytes_total{q}"), 84 * 1248),
        (format!("lidarxdp_capture_sensor_datagrams_total{q}"), 84),
        (format!("lidarxdp_capture_unknown_sensor_total{q}"), 0),
        (format!("lidarxdp_reassembly_failed_total{q}"), 0),
        (format!("lidarxdp_xsk_rx_ring_full_total{q}"), 0),
        (format!("lidarxdp_xsk_rx_dropped_total{q}"), 0),
        (format!("lidarxdp_xsk_rx_fill_ring_empty_descs_total{q}"), 0),
        ("lidarxdp_publisher_subscribers".to_owned(), 0),
        // Series of counters that only the stats JSON (or nothing) exported before the
        // descriptors: our AF_XDP socket counters, the vendor decoder's, the buffer pool's.
        (format!("lidarxdp_xsk_packets_total{q}"), 84),
        (format!("lidarxdp_xsk_bytes_total{q}"), 84 * 1248),
        (format!("lidarxdp_reassembly_completed_bytes_total{q}"), 0),
        (format!("lidarxdp_velodyne_rate_mismatches_total{s}"), 0),
        ("lidarxdp_publisher_pool_cap".to_owned(), 8),
        ("lidarxdp_publisher_subscribers_stalled_total".to_owned(), 0),
    ];
    // The layers (XDP map, capture thread, sensors, XDP_STATISTICS) are read one after the
    // other while the capture thread may still be publishing the last burst: one scrape can
    // hold an older capture counter beside a newer sensor counter. The counters are final once
    // the replay has ended, so poll until one scrape shows every final value, then check them
    // all from that one scrape (a mismatch that persists for 10 s fails, naming the series).
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (status, body) = http_get(&net.host_ns, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        let settled = body.contains("lidarxdp_xsk_rx_ring_full_total")
            && want.iter().all(|(series, v)| {
                body.lines()
                    .find_map(|l| l.strip_prefix(series.as_str())?.strip_prefix(' '))
                    .and_then(|x| x.parse::<u64>().ok())
                    == Some(*v)
            });
        if settled || Instant::now() >= deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for (series, v) in &want {
        assert_eq!(value(&text, series), *v, "{series}\n{text}");
    }
    assert!(text.contains("# TYPE lidarxdp_xdp_redirected_total counter\n"));

    // The process gauges, read at the scrape: resident memory, a heap, every named thread
    // (main, publisher, capture, metrics server, aux), stdin/out/err and more, and the TCP
    // sink's queue (empty once every frame went out: no subscriber holds one).
    let resident = value(&text, "lidarxdp_process_resident_bytes");
    let heap = value(&text, "lidarxdp_process_heap_bytes");
    assert!(resident > 1 << 20, "{resident}");
    assert!(heap > 0, "{heap}");
    let _ = value(&text, "lidarxdp_process_heap_free_bytes");
    let threads = value(&text, "lidarxdp_process_threads");
    let named = named_threads(daemon.pid());
    // `comm` holds 15 bytes of a name.
    for t in ["lidarxdp-publis", "metrics-http", "aux-sink", "capture-"] {
        assert!(named.iter().any(|n| n.starts_with(t)), "{t} in {named:?}");
    }
    assert!(threads >= named.len() as u64, "{threads} < {named:?}");
    assert!(value(&text, "lidarxdp_process_open_fds") >= 3);
    assert_eq!(value(&text, r#"lidarxdp_sink_queue_bytes{sink="tcp"}"#), 0);

    let (status, _) = http_get(&net.host_ns, "/");
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    // `lidarxdp stats` prints the same series as a table.
    let out = NetnsPair::exec(&net.host_ns, &[env!("CARGO_BIN_EXE_lidarxdp"), "stats"])
        .output()
        .expect("run stats");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("lidarxdp_xdp_redirected_total "))
        .unwrap_or_else(|| panic!("no row in\n{table}"));
    assert!(row.ends_with(" 84"), "{row}");

    // `lidarxdp stats --json`: every counter as the stats JSON object, while the daemon runs.
    let out = NetnsPair::exec(
        &net.host_ns,
        &[env!("CARGO_BIN_EXE_lidarxdp"), "stats", "--json"],
    )
    .output()
    .expect("run stats --json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(common::get(&live, &["xdp", "redirected"]), 84, "{live}");
    assert_eq!(
        common::get(&live, &["sensors", "0", "decoded"]),
        84,
        "{live}"
    );
    assert_eq!(common::get(&live, &["capture", "rx_frames"]), 84, "{live}");

    let stats = daemon.stop();
    assert_eq!(common::get(&stats, &["xdp", "redirected"]), 84);
}

#[test]
fn stats_reports_an_unreachable_daemon() {
    // Port 1 on loopback: nothing listens there.
    let out = Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args(["stats", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connect to 127.0.0.1:1"), "{err}");
}
