//! Privileged end-to-end tests of least privilege (`docs/deploy.md`): once set up, the daemon
//! holds no capability at all in any thread, has `NoNewPrivs` set, and still captures, decodes,
//! reads its XDP counters and `XDP_STATISTICS`, and detaches its program on exit. And the
//! start-up capability set of `docs/lidarxdp.service` is exactly what a non-root daemon needs:
//! it starts as `nobody` with those ambient capabilities and fails without any one of them.
use crate::common;

use std::time::Duration;

use common::{Daemon, NetnsPair, Staging, data, get, privileged, xdp_attached};
use lidarxdp::privs::CapState;

const PCAP: &str = "velodyne/vlp16/vlp16_strongest_84pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

/// The capabilities `docs/lidarxdp.service` grants at start, in `setpriv` spelling.
const START_CAPS: [&str; 5] = ["bpf", "perfmon", "net_admin", "net_raw", "ipc_lock"];

fn replay(net: &NetnsPair) -> u64 {
    get(&common::replay(net, PCAP, 2368, "max"), &["sent"])
}

/// The capability state of every thread of `pid`.
fn thread_caps(pid: u32) -> Vec<(String, CapState)> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let status = std::fs::read_to_string(t.join("status")).unwrap();
        let name = std::fs::read_to_string(t.join("comm")).unwrap();
        v.push((
            name.trim().to_owned(),
            CapState::parse(&status).expect("Cap lines"),
        ));
    }
    v
}

/// No capability at all, in every set, in every thread; NoNewPrivs set.
const DROPPED: CapState = CapState {
    effective: 0,
    permitted: 0,
    inheritable: 0,
    bounding: 0,
    ambient: 0,
    no_new_privs: true,
};

/// Replays the 84-packet capture into a running daemon, stops it and checks it all arrived,
/// the XDP counters were readable and the program is detached afterwards.
fn capture_84(net: &NetnsPair, daemon: Daemon) {
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(replay(net), 84);
    std::thread::sleep(Duration::from_millis(500));
    let stats = daemon.stop();
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 84, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "malformed"]), 0, "{stats}");
    // Program counters through the map fd and XDP_STATISTICS, both after the drop.
    assert_eq!(get(&stats, &["xdp", "redirected"]), 84, "{stats}");
    assert_eq!(get(&stats, &["xsk", "rx_dropped"]), 0, "{stats}");
    assert!(
        !xdp_attached(&net.host_ns, &net.host_if),
        "XDP program still attached after exit"
    );
}

/// Started as root: after set-up every thread of the daemon has empty CapEff, CapPrm, CapInh,
/// CapBnd, CapAmb and NoNewPrivs 1, and the daemon still receives and decodes all 84 packets.
#[test]
fn root_daemon_drops_every_capability_and_still_captures() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("prv");
    let calib = data(CALIB);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7621,
        &[
            "--sensor",
            "vlp16",
            "--calibration",
            calib.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:9753",
        ],
    );
    let pid = daemon.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let main = CapState::parse(&status).unwrap();
    assert_eq!(main, DROPPED, "{status}");
    let threads = thread_caps(pid);
    assert!(
        threads.len() >= 4,
        "main, publisher, capture, metrics HTTP: {threads:?}"
    );
    for (name, caps) in &threads {
        assert_eq!(caps, &DROPPED, "thread {name}");
    }
    capture_84(&net, daemon);
}

fn setpriv_args(caps: &[&str]) -> Vec<String> {
    let list: String = caps.iter().map(|c| format!(",+{c}")).collect();
    vec![
        // 64 KiB of RLIMIT_MEMLOCK: the UMEM only fits with CAP_IPC_LOCK, whatever the
        // limit the tests inherit.
        "prlimit".into(),
        "--memlock=65536:65536".into(),
        "setpriv".into(),
        "--reuid=nobody".into(),
        "--regid=nogroup".into(),
        "--init-groups".into(),
        format!("--inh-caps=-all{list}"),
        format!("--ambient-caps=-all{list}"),
        format!("--bounding-set=-all{list}"),
    ]
}

/// Started as `nobody` with exactly [`START_CAPS`] as ambient capabilities (what
/// `docs/lidarxdp.service` grants): the daemon starts, drops them all (its bounding set stays
/// the five, as it lacks CAP_SETPCAP to empty it) and captures all 84 packets.
#[test]
fn nobody_with_the_unit_capabilities_starts_drops_and_captures() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("prn");
    // `nobody` reads the calibration and runs the binary from a world-readable copy, whatever
    // the permissions of the checkout.
    let staging = Staging::new("prn");
    let exe = staging.daemon();
    let calib = staging.copy(&data(CALIB), "VLP16db.yaml", 0o644);
    let wrapper = setpriv_args(&START_CAPS);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let daemon = Daemon::start_exe(
        &exe,
        &net.host_ns,
        &wrapper,
        &net.host_if,
        7622,
        &[
            "--sensor",
            "vlp16",
            "--calibration",
            calib.to_str().unwrap(),
        ],
    );
    // CAP_NET_ADMIN 12, CAP_NET_RAW 13, CAP_IPC_LOCK 14, CAP_PERFMON 38, CAP_BPF 39.
    let unit_bounding = (1u64 << 12) | (1 << 13) | (1 << 14) | (1 << 38) | (1 << 39);
    for (name, caps) in thread_caps(daemon.child.id()) {
        assert_eq!(
            caps,
            CapState {
                bounding: unit_bounding,
                ..DROPPED
            },
            "thread {name}"
        );
    }
    capture_84(&net, daemon);
}

/// Without any one of [`START_CAPS`], the non-root daemon fails at start-up; the message of
/// each failure is printed (recorded in `docs/deploy.md`).
#[test]
fn nobody_without_any_one_unit_capability_fails_to_start() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("prf");
    // World-readable copies, so that the only thing missing is the capability.
    let staging = Staging::new("prf");
    let exe = staging.daemon();
    let calib = staging.copy(&data(CALIB), "VLP16db.yaml", 0o644);
    for missing in START_CAPS {
        let caps: Vec<&str> = START_CAPS
            .iter()
            .copied()
            .filter(|c| *c != missing)
            .collect();
        let mut args = vec!["timeout".to_string(), "20".into()];
        args.extend(setpriv_args(&caps));
        args.extend(
            [
                exe.to_str().unwrap(),
                "run",
                "--iface",
                &net.host_if,
                "--listen",
                "127.0.0.1:7623",
                "--sensor",
                "vlp16",
                "--calibration",
                calib.to_str().unwrap(),
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = NetnsPair::exec(&net.host_ns, &args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("without cap_{missing}: {stderr}");
        assert_eq!(
            out.status.code(),
            Some(1),
            "without cap_{missing} the daemon must fail at start-up: {stderr}"
        );
        assert!(
            !xdp_attached(&net.host_ns, &net.host_if),
            "without cap_{missing}: program left attached"
        );
    }
}

/// Started as root with `--user nobody`: after set-up every thread runs as uid/gid 65534 with
/// no capability (bounding set empty, NoNewPrivs 1), and the daemon still captures all 84
/// packets and writes its counters as `nobody` on exit.
#[test]
fn root_daemon_switches_to_user_and_still_captures() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("pru");
    // A calibration `nobody` can read again after the switch (SIGHUP reload), whatever the
    // permissions of the checkout.
    let staging = Staging::new("pru");
    let calib = staging.copy(&data(CALIB), "VLP16db.yaml", 0o644);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7624,
        &[
            "--sensor",
            "vlp16",
            "--calibration",
            calib.to_str().unwrap(),
            "--user",
            "nobody",
        ],
    );
    let pid = daemon.child.id();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        assert_eq!(CapState::parse(&status).unwrap(), DROPPED, "{status}");
        for (key, want) in [
            ("Uid:", "65534\t65534\t65534\t65534"),
            ("Gid:", "65534\t65534\t65534\t65534"),
            ("Groups:", "65534"),
        ] {
            let line = status.lines().find_map(|l| l.strip_prefix(key)).unwrap();
            assert_eq!(line.trim(), want, "{key} {status}");
        }
    }
    capture_84(&net, daemon);
}

/// Starts the daemon in `net` with `--zenoh`, a zenoh configuration listening on loopback
/// `zenoh_port` inside the namespace, and a shared-memory pool of `shm_mb` MiB.
fn zenoh_daemon(net: &NetnsPair, listen_port: u16, zenoh_port: u16, shm_mb: &str) -> Daemon {
    let calib = data(CALIB);
    let cfg = common::content_file(
        "json5",
        format!(
            "{{ mode: 'peer', listen: {{ endpoints: ['tcp/127.0.0.1:{zenoh_port}'] }}, \
             scouting: {{ multicast: {{ enabled: false }} }} }}"
        )
        .as_bytes(),
    );
    Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        listen_port,
        &[
            "--sensor",
            "vlp16",
            "--calibration",
            calib.to_str().unwrap(),
            "--zenoh",
            "--zenoh-config",
            cfg.to_str().unwrap(),
            "--zenoh-shm-mb",
            shm_mb,
        ],
    )
}

/// The threads of `pid` once there is one named each of `names` (the daemon's TCP listener
/// accepts before the start-up ends, so readiness alone does not mean every thread exists
/// yet). Panics after 20 s.
fn threads_once(pid: u32, names: &[&str]) -> Vec<(String, CapState)> {
    let t = std::time::Instant::now();
    loop {
        let v = thread_caps(pid);
        if names.iter().all(|name| v.iter().any(|(n, _)| n == name)) {
            return v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "not every thread of {names:?} after 20 s: {v:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The zenoh sink's threads start after the drop: with `--zenoh` and no shared-memory pool,
/// every thread of the daemon (zenoh's runtime threads and the sink's among them) holds no
/// capability at all, and the daemon still captures everything.
#[test]
fn zenoh_threads_hold_no_capability() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("prz");
    let daemon = zenoh_daemon(&net, 7624, 17451, "0");
    let threads = threads_once(daemon.child.id(), &["zenoh-sink"]);
    let names: Vec<&str> = threads.iter().map(|(n, _)| n.as_str()).collect();
    // zenoh's runtime threads (`rx-0`, `tx-0`, `net-0`, `acc-0`, `app-0`, ...) exist too.
    assert!(threads.len() >= 6, "{names:?}");
    for (name, caps) in &threads {
        assert_eq!(caps, &DROPPED, "thread {name}");
    }
    capture_84(&net, daemon);
}

/// The DDS sink's threads start after the drop: with `--dds`, every thread of the daemon
/// (Cyclone DDS's receive, event, lease and garbage-collection threads, and the sink's) holds
/// no capability at all, and the daemon still captures everything.
#[test]
fn dds_threads_hold_no_capability() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("prd");
    let calib = data(CALIB);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7626,
        &[
            "--sensor",
            "vlp16",
            "--calibration",
            calib.to_str().unwrap(),
            "--dds",
        ],
    );
    // Cyclone DDS names its threads: `gc` (garbage collection), `tev` (timed events), `recv`
    // (and `recvUC`/`recvMC` for the unicast and multicast sockets), `dq.builtins`, `lease`.
    // It starts them as it goes (`dq.builtins` after the sink's thread at times): the sample
    // is taken once every one of them is there.
    let threads = threads_once(daemon.child.id(), &["dds-sink", "gc", "tev", "dq.builtins"]);
    for (name, caps) in &threads {
        assert_eq!(caps, &DROPPED, "thread {name}");
    }
    capture_84(&net, daemon);
}

/// With the shared-memory pool, zenoh locks every segment it creates or maps later, so when
/// `RLIMIT_MEMLOCK` cannot cover the pool the daemon keeps `CAP_IPC_LOCK` and nothing else:
/// in every thread CapEff = CapPrm = CapBnd = bit 14 alone (or, with a limit that covers it,
/// nothing at all).
#[test]
fn zenoh_shared_memory_keeps_at_most_ipc_lock() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("prm");
    let daemon = zenoh_daemon(&net, 7625, 17452, "64");
    let limit = std::fs::read_to_string(format!("/proc/{}/limits", daemon.child.id())).unwrap();
    let hard: Option<u64> = limit
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse().ok());
    // The pool (64 MiB) plus 16 MiB of headroom; "unlimited" does not parse: covered.
    let kept = if hard.is_some_and(|h| h < (80 << 20)) {
        1u64 << 14
    } else {
        0
    };
    let want = CapState {
        effective: kept,
        permitted: kept,
        bounding: kept,
        ..DROPPED
    };
    let threads = threads_once(daemon.child.id(), &["zenoh-sink"]);
    for (name, caps) in &threads {
        assert_eq!(caps, &want, "thread {name} (RLIMIT_MEMLOCK hard {hard:?})");
    }
    capture_84(&net, daemon);
}
