//! Memory that subscribers coming and going leave behind in the daemon (issue 40): DDS
//! discovery, and a storm of zenoh sessions.
//!
//! Every remote participant that joins or leaves sends discovery messages (SPDP, SEDP) that
//! Cyclone's receive threads read into their receive buffers and hand on to its delivery
//! queue. A message handed on keeps its bytes in the buffer, so each one walks further into it
//! and touches pages for the first time. With Cyclone's default 1 MiB buffers, the daemon's
//! resident memory grew with every reader that came and went until the buffers had been walked
//! once, for tens of minutes in a soak. The daemon now asks for 128 KiB buffers
//! (`lidarxdp::ros2_dds::LARGE_FRAME_CONFIG`).
//!
//! The test lets a Fast DDS reader (Debian's Fast DDS 2.9, `dds_sub_fastdds.cpp`) join, match
//! the daemon's writer and leave, over and over, and reads the daemon's `VmRSS` after the
//! warm-up and after each reader of the measured round. Its measure is the largest climb over
//! the round: the most any reading sits above an earlier one. A receive buffer walked to its
//! end is given back whole and a new one is walked from its start, so the readings are a
//! sawtooth whose teeth are one buffer high, and the climb finds a tooth wherever the round
//! starts in it; a plain end-minus-start difference can land across a drop and read nothing
//! (seen: -36 kB over 72 readers with 1 MiB buffers, against 12 kB a reader before the drop).
//! It runs the same churn against a daemon given Cyclone's default buffers back through
//! `--dds-config`, which must climb by more than the bound: so the test can tell the two apart
//! on this machine (measured here: 648 kB with 1 MiB buffers, 44 kB with 128 KiB ones).

use std::time::Duration;

use crate::common::{Daemon, NetnsPair, privileged};
use crate::dds::{Impl, Sub, subscribe};
use crate::probe::{Scratch, VLP16_CALIB, peer_config};

/// Readers that come and go before the first reading.
const WARMUP: usize = 24;
/// Readers in the measured round, one reading after each. Long enough that the round holds a
/// climb of half its readers whatever the phase of a 1 MiB buffer's tooth (about 12 kB a
/// reader here, so some 85 readers a tooth).
const MEASURED: usize = 72;
/// The most the daemon's resident memory may climb over the measured round, bytes: one
/// receive buffer of the new size.
const BOUND: u64 = 128 << 10;

/// Cyclone's own receive buffer sizes (its `defconfig.c`), given back by an operator file.
const CYCLONE_DEFAULT_BUFFERS: &str = "<CycloneDDS><Domain id=\"any\"><Sizing>\
<ReceiveBufferSize>1MiB</ReceiveBufferSize><ReceiveBufferChunkSize>128KiB\
</ReceiveBufferChunkSize></Sizing></Domain></CycloneDDS>";

fn vm_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("daemon status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb << 10
}

/// The largest climb of `readings`: the most any reading sits above an earlier (or the same)
/// one, in their unit; 0 for a sequence that never rises.
fn largest_climb(readings: &[u64]) -> u64 {
    let mut low = u64::MAX;
    let mut climb = 0;
    for &r in readings {
        low = low.min(r);
        climb = climb.max(r - low);
    }
    climb
}

/// The daemon's largest resident climb, bytes, over `MEASURED` readers coming and going after
/// `WARMUP` of them, with `extra` daemon arguments.
fn churn_climb(tag: &str, port: u16, extra: &[&str]) -> u64 {
    let net = NetnsPair::new(tag);
    let scratch = Scratch::new(tag);
    let calib = crate::common::data(VLP16_CALIB);
    let mut args = vec![
        "--sensor",
        "vlp16",
        "--name",
        "vlp16",
        "--port",
        "2368",
        "--calibration",
        calib.to_str().expect("UTF-8 path"),
        "--dds",
    ];
    args.extend_from_slice(extra);
    let daemon = Daemon::start_wrapped(
        &net.host_ns,
        &["env", "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST"],
        &net.host_if,
        port,
        &args,
    );
    let out = scratch.path("reader");
    let round = |n: usize| {
        for _ in 0..n {
            let reader = subscribe(
                &net.host_ns,
                &Sub {
                    which: Impl::FastDds,
                    out: &out,
                    expect: None,
                    reliable: false,
                    localhost: true,
                },
            );
            reader.finish();
        }
    };
    round(WARMUP);
    let mut readings = vec![vm_rss(daemon.pid())];
    for _ in 0..MEASURED {
        round(1);
        readings.push(vm_rss(daemon.pid()));
    }
    daemon.stop();
    let kb: Vec<u64> = readings.iter().map(|r| r >> 10).collect();
    eprintln!("{tag}: VmRSS after the warm-up and after each reader, kB: {kb:?}");
    largest_climb(&readings)
}

#[test]
fn largest_climb_finds_a_tooth_across_a_drop() {
    assert_eq!(largest_climb(&[5, 7, 9, 1, 2, 4]), 4);
    assert_eq!(largest_climb(&[9, 8, 7]), 0);
    assert_eq!(largest_climb(&[3, 1, 6, 2, 4]), 5);
    assert_eq!(largest_climb(&[]), 0);
}

#[test]
fn dds_readers_coming_and_going_leave_no_resident_memory_behind() {
    if !privileged() {
        return;
    }
    let _alone = crate::one_at_a_time();
    crate::dds::checkers();
    let scratch = Scratch::new("dds-mem-ctl");
    let cyclone_default = scratch.write("cyclone-default.xml", CYCLONE_DEFAULT_BUFFERS);
    let control = churn_climb("dmc", 7716, &["--dds-config", &cyclone_default]);
    let climb = churn_climb("dmf", 7717, &[]);
    eprintln!(
        "largest resident climb over {MEASURED} readers: {climb} B (Cyclone's 1 MiB buffers: \
         {control} B)"
    );
    assert!(
        control > BOUND,
        "with Cyclone's 1 MiB receive buffers the daemon climbed {control} B over {MEASURED} \
         readers: the test cannot tell the fix from its absence on this machine"
    );
    assert!(
        climb <= BOUND,
        "the daemon's resident memory climbed {climb} B over {MEASURED} readers coming and \
         going (bound {BOUND} B; with Cyclone's 1 MiB receive buffers: {control} B)"
    );
}

/// zenoh sessions of the storm, and the threads that open them.
const STORM_SESSIONS: u64 = 1000;
const STORM_THREADS: u64 = 64;
/// Sessions of the warm-up storm (every code path run once before the first reading).
const WARM_SESSIONS: u64 = 40;
/// Wait after a storm before reading the daemon's memory: its runtime's idle threads exit after
/// 10 s (tokio's blocking pool), and jemalloc hands freed pages back within 1 s.
const SETTLE: Duration = Duration::from_secs(15);
/// The most the daemon's resident memory may stay above its reading before the storm, bytes.
/// Measured here: 0.66 to 1.15 MB (code run for the first time, new threads' stacks), and 5.4
/// to 6.6 MB with jemalloc's thread caches.
const STORM_BOUND: u64 = 2 << 20;
/// Set (to `CONFIG_FILE,SESSIONS,THREADS`) in the copy of this test binary that runs the storm
/// inside the daemon's namespace.
const STORM_ENV: &str = "LIDARXDP_TEST_ZENOH_STORM";
/// This test's path in the binary, to run it again as the storm.
const STORM_TEST: &str = "memory::a_zenoh_session_storm_leaves_no_resident_memory_behind";

/// The storm, in the copy of this binary that [`run_storm`] starts inside the daemon's
/// namespace: `sessions` zenoh sessions, each opened as `lidarxdp subscribe zenoh:` opens it
/// (the configuration `config`), declaring a subscriber of the daemon's points and closing,
/// shared by `threads` threads. Panics when one fails.
fn storm_here(config: &str, sessions: u64, threads: u64) {
    use lidarxdp_client::zenoh::{SessionConfig, open_session};
    use zenoh::Wait;
    let source = SessionConfig {
        file: Some(config.into()),
        overrides: Vec::new(),
    };
    let key = lidarxdp_core::ros2::topic_key_expr(
        0,
        "/lidar/VLP16/points",
        lidarxdp_core::ros2::Distro::Jazzy,
    );
    let next = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < sessions {
                    let session = open_session(&source).expect("open a zenoh session");
                    let sub = session.declare_subscriber(key.as_str()).wait();
                    sub.expect("declare a subscriber");
                    session.close().wait().expect("close the session");
                }
            });
        }
    });
}

/// Runs [`storm_here`] in a copy of this test binary inside `ns` (a zenoh session's threads
/// are its runtime's, which a `setns` of one thread would not move).
fn run_storm(ns: &str, config: &str, sessions: u64) {
    let exe = std::env::current_exe().expect("the test binary");
    let threads = STORM_THREADS.min(sessions);
    let out = NetnsPair::exec(
        ns,
        &[
            "env",
            &format!("{STORM_ENV}={config},{sessions},{threads}"),
            exe.to_str().expect("UTF-8 path"),
            "--exact",
            STORM_TEST,
            "--test-threads",
            "1",
        ],
    )
    .output()
    .expect("run the storm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the storm of {sessions} sessions: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How far the daemon's `VmRSS` stays above its reading before a storm of [`STORM_SESSIONS`]
/// zenoh sessions, [`SETTLE`] after it, bytes (negative: below), its jemalloc run with `conf`
/// added to its own (`_RJEM_MALLOC_CONF`, read after the binary's `malloc_conf`).
fn storm_growth(tag: &str, port: u16, zport: u16, conf: &str) -> i64 {
    let net = NetnsPair::new(tag);
    let scratch = Scratch::new(tag);
    let daemon_cfg = scratch.write("daemon.json5", &peer_config(zport));
    let client_cfg = scratch.write(
        "client.json5",
        &format!(
            r#"{{ mode: "peer", connect: {{ endpoints: ["tcp/127.0.0.1:{zport}"] }},
  listen: {{ endpoints: [] }}, scouting: {{ multicast: {{ enabled: false }} }} }}"#
        ),
    );
    let calib = crate::common::data(VLP16_CALIB);
    // The sensor's name defaults to its model's: topic `/lidar/VLP16/points`.
    let daemon = Daemon::start_wrapped(
        &net.host_ns,
        &["env", &format!("_RJEM_MALLOC_CONF={conf}")],
        &net.host_if,
        port,
        &[
            "--sensor",
            "vlp16",
            "--port",
            "2368",
            "--calibration",
            calib.to_str().expect("UTF-8 path"),
            "--zenoh",
            "--zenoh-config",
            &daemon_cfg,
        ],
    );
    run_storm(&net.host_ns, &client_cfg, WARM_SESSIONS);
    std::thread::sleep(SETTLE);
    let before = vm_rss(daemon.pid());
    run_storm(&net.host_ns, &client_cfg, STORM_SESSIONS);
    std::thread::sleep(SETTLE);
    let after = vm_rss(daemon.pid());
    daemon.stop();
    eprintln!(
        "{tag} ({conf}): VmRSS {} kB before the storm, {} kB after",
        before >> 10,
        after >> 10
    );
    after as i64 - before as i64
}

/// 1,000 zenoh sessions that open, declare a subscriber of the daemon's points and close (a
/// subscriber crashing in a restart loop; the soak's zenoh storm) leave at most
/// [`STORM_BOUND`] resident behind once their threads are gone. With jemalloc's thread caches
/// back on (`tcache:true`, the control), the zenoh workers that served the storm and went idle
/// keep what they cached, and the daemon stays above the bound: so the test tells the
/// daemon's allocator settings (`lidarxdp::sys::malloc::JEMALLOC_CONF`) from jemalloc's
/// defaults on this machine.
#[test]
fn a_zenoh_session_storm_leaves_no_resident_memory_behind() {
    if let Ok(v) = std::env::var(STORM_ENV) {
        let mut f = v.split(',');
        let (Some(config), Some(sessions), Some(threads)) = (f.next(), f.next(), f.next()) else {
            panic!("{STORM_ENV}={v}: CONFIG,SESSIONS,THREADS");
        };
        storm_here(
            config,
            sessions.parse().expect("sessions"),
            threads.parse().expect("threads"),
        );
        return;
    }
    if !privileged() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let control = storm_growth("zsc", 7718, 17451, "tcache:true");
    let growth = storm_growth("zsf", 7719, 17452, "");
    eprintln!(
        "resident memory left by {STORM_SESSIONS} zenoh sessions: {growth} B (with jemalloc's \
         thread caches: {control} B)"
    );
    assert!(
        control > STORM_BOUND as i64,
        "with jemalloc's thread caches the daemon kept {control} B after the storm: the test \
         cannot tell the daemon's settings from jemalloc's defaults on this machine"
    );
    assert!(
        growth <= STORM_BOUND as i64,
        "the daemon kept {growth} B resident after {STORM_SESSIONS} zenoh sessions (bound \
         {STORM_BOUND} B; with jemalloc's thread caches: {control} B)"
    );
}
