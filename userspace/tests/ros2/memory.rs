//! Memory that DDS discovery leaves behind in the daemon (issue 40).
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

use crate::common::{Daemon, NetnsPair, privileged};
use crate::dds::{Impl, Sub, subscribe};
use crate::probe::{Scratch, VLP16_CALIB};

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
