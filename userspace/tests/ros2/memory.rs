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
//! the daemon's writer and leave, over and over, and reads the daemon's resident memory outside
//! its Rust allocator (jemalloc; Cyclone allocates with glibc) after a warm-up and after the
//! measured round. It runs the same churn against a daemon given
//! Cyclone's default buffers back through `--dds-config`, which must grow by more than the
//! bound: so the test can tell the two apart on this machine.

use crate::common::{Daemon, NetnsPair, privileged};
use crate::dds::{Impl, Sub, subscribe};
use crate::probe::{Scratch, VLP16_CALIB};

/// Readers that come and go before the first reading, and between the readings.
const WARMUP: usize = 48;
const MEASURED: usize = 24;
/// The most the daemon's resident memory may grow over the measured round, bytes: one
/// receive buffer of the new size.
const BOUND: u64 = 128 << 10;

/// The daemon's metrics endpoint, inside its namespace.
const METRICS: &str = "127.0.0.1:9751";

/// Cyclone's own receive buffer sizes (its `defconfig.c`), given back by an operator file.
const CYCLONE_DEFAULT_BUFFERS: &str = "<CycloneDDS><Domain id=\"any\"><Sizing>\
<ReceiveBufferSize>1MiB</ReceiveBufferSize><ReceiveBufferChunkSize>128KiB\
</ReceiveBufferChunkSize></Sizing></Domain></CycloneDDS>";

/// The daemon's resident memory outside its Rust allocator, bytes: `resident_bytes` (VmRSS)
/// minus `jemalloc_resident_bytes`, both from one sample of its stats (`lidarxdp stats --json`
/// in its namespace). Cyclone DDS allocates with glibc, so its receive buffers are in it; the
/// pages jemalloc holds for a while after the churn frees them, and its metadata, are not.
fn resident_outside_jemalloc(ns: &str) -> u64 {
    let out = NetnsPair::exec(
        ns,
        &[env!("CARGO_BIN_EXE_lidarxdp"), "stats", "--json", METRICS],
    )
    .output()
    .expect("run lidarxdp stats");
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    let rss = crate::common::get(&v, &["process", "resident_bytes"]);
    let je = crate::common::get(&v, &["process", "jemalloc_resident_bytes"]);
    assert!(je > 0 && rss > je, "resident {rss} B, jemalloc {je} B");
    rss - je
}

/// The daemon's resident growth, bytes, over `MEASURED` readers coming and going after
/// `WARMUP` of them, with `extra` daemon arguments.
fn churn_growth(tag: &str, port: u16, extra: &[&str]) -> i64 {
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
        "--metrics",
        METRICS,
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
    let before = resident_outside_jemalloc(&net.host_ns);
    round(MEASURED);
    let after = resident_outside_jemalloc(&net.host_ns);
    daemon.stop();
    after as i64 - before as i64
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
    let control = churn_growth("dmc", 7716, &["--dds-config", &cyclone_default]);
    let growth = churn_growth("dmf", 7717, &[]);
    eprintln!(
        "resident growth over {MEASURED} readers: {growth} B (Cyclone's 1 MiB buffers: {control} B)"
    );
    assert!(
        control > BOUND as i64,
        "with Cyclone's 1 MiB receive buffers the daemon grew {control} B over {MEASURED} \
         readers: the test cannot tell the fix from its absence on this machine"
    );
    assert!(
        growth <= BOUND as i64,
        "the daemon's resident memory grew {growth} B over {MEASURED} readers coming and going \
         (bound {BOUND} B; with Cyclone's 1 MiB receive buffers: {control} B)"
    );
}
