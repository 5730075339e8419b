//! A step of CLOCK_REALTIME while frames are open (PTP or chrony stepping a vehicle's clock)
//! cuts no frame and loses none: every timeout and interval runs on CLOCK_MONOTONIC.
//!
//! CLOCK_REALTIME cannot be namespaced (time_namespaces(7) virtualises only the monotonic and
//! boot-time clocks) and this machine's clock is never touched: the daemon runs under
//! libfaketime (Debian package `faketime`, installed by `cargo xtask setup`), which offsets the
//! wall clock it reads by the contents of a file the test rewrites mid-replay, and leaves
//! CLOCK_MONOTONIC alone (`DONT_FAKE_MONOTONIC=1`).
use crate::common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use common::{Daemon, NetnsPair, Staging, data, get, in_netns, privileged};
use lidarxdp_core::frame::FrameHeader;
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const HOUR_NS: i128 = 3_600_000_000_000;

/// `env` with libfaketime preloaded, the wall clock offset by the contents of `offset_file`
/// (re-read at every call), CLOCK_MONOTONIC left alone: a wrapper that execs its command.
fn faketime_env(offset_file: &Path) -> Vec<String> {
    vec![
        "env".into(),
        format!("LD_PRELOAD={LIBFAKETIME}"),
        "DONT_FAKE_MONOTONIC=1".into(),
        "FAKETIME_NO_CACHE=1".into(),
        format!("FAKETIME_TIMESTAMP_FILE={}", offset_file.display()),
    ]
}

fn set_offset(file: &Path, offset: &str) {
    // Written whole to a temporary file and renamed: libfaketime never reads half a line.
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{offset}\n")).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

fn real_now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// Fails with a clear message unless libfaketime is installed and really moves the wall clock
/// of a program run under [`faketime_env`]: `date +%s` an hour ahead.
fn assert_libfaketime_steps(dir: &Path) {
    assert!(
        Path::new(LIBFAKETIME).is_file(),
        "{LIBFAKETIME} is missing: install the Debian package faketime (cargo xtask setup)"
    );
    let f = dir.join("check-offset");
    set_offset(&f, "+3600");
    let env = faketime_env(&f);
    let out = Command::new(&env[0])
        .args(&env[1..])
        .args(["date", "+%s"])
        .output()
        .expect("run date under libfaketime");
    let faked: i128 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let real = real_now_ns() / 1_000_000_000;
    assert!(
        (faked - real - 3600).abs() <= 5,
        "libfaketime does not step the wall clock: `date +%s` says {faked} under it, {real} \
         without ({})",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The daemon (XDP, AF_XDP) receives the VLP-16 dual-return capture replayed at 500 packets/s
/// (about 0.3 s a frame) while its wall clock is stepped an hour forward as soon as the first
/// frame arrives, and two hours back (an hour behind the real clock) as soon as the second
/// arrives: so frames are open across both steps. The subscriber gets exactly the frames of
/// offline decoding (count, sequence, packets received and expected, points bit for bit), no
/// frame lost, no time jump, no restart, no late packet; the published `host_ns` stamps show
/// both steps (the daemon really saw them). On the old capture loop (timeouts on
/// CLOCK_REALTIME) the forward step closes the open frame by timeout and the Velodyne hour
/// jumps (lost turns), the backward step makes the sensor hour jump back (time jumps, a
/// restart).
#[test]
fn wall_clock_steps_cut_and_lose_no_frame() {
    if !privileged() {
        return;
    }
    let dir = Staging::new("clock-step");
    assert_libfaketime_steps(&dir.dir);
    let offset: PathBuf = dir.dir.join("offset");
    set_offset(&offset, "+0");
    let wrapper = faketime_env(&offset);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();

    let net = NetnsPair::new("clk");
    let calib = data(CALIB);
    let daemon = Daemon::start_wrapped(
        &net.host_ns,
        &wrapper,
        &net.host_if,
        7611,
        &[
            "--sensor",
            "vlp16",
            "--port",
            "2368",
            "--calibration",
            calib.to_str().unwrap(),
        ],
    );
    // The subscriber steps the daemon's wall clock as the frames arrive.
    let ns = net.host_ns.clone();
    let step_file = offset.clone();
    let subscriber = std::thread::spawn(move || {
        in_netns(&ns, move || {
            let addr = "127.0.0.1:7611".parse().unwrap();
            let mut sub = lidarxdp_client::Subscriber::connect(addr).expect("subscribe");
            let mut frames: Vec<(FrameHeader, Vec<PointXYZIRCAEDT>, i128)> = Vec::new();
            while let Some(f) = sub.next_frame().expect("frame") {
                frames.push((*f.header(), f.points().to_vec(), real_now_ns()));
                match frames.len() {
                    1 => set_offset(&step_file, "+3600"),
                    2 => set_offset(&step_file, "-3600"),
                    _ => {}
                }
            }
            frames
        })
    });
    std::thread::sleep(Duration::from_millis(200));
    let sent = get(&common::replay(&net, DUAL, 2368, "500"), &["sent"]);
    assert_eq!(sent, 603);
    std::thread::sleep(Duration::from_millis(500));
    let stats = daemon.stop();
    let live = subscriber.join().unwrap();

    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(CALIB));
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368)).unwrap();
    assert!(offline.len() >= 4, "the capture spans at least 4 frames");
    let s0 = |k: &str| get(&stats, &["sensors", "0", k]);
    assert_eq!(s0("decoded"), 603, "{stats}");
    for k in [
        "time_jumps",
        "restarts",
        "frames_lost",
        "late",
        "duplicates",
        "malformed",
    ] {
        assert_eq!(s0(k), 0, "{k}: {stats}");
    }
    assert_eq!(s0("frames"), offline.len() as u64, "{stats}");
    assert_eq!(
        get(&stats, &["capture", "frames_out"]),
        offline.len() as u64,
        "{stats}"
    );
    common::assert_no_xsk_loss(&stats);

    // Exactly the frames of offline decoding: nothing cut early (a timeout would split a turn
    // in two), nothing merged, nothing lost.
    assert_eq!(live.len(), offline.len(), "frame count");
    for (i, ((h, pts, _), off)) in live.iter().zip(&offline).enumerate() {
        let o = &off.header;
        assert_eq!(
            (
                h.sequence,
                h.packets_received,
                h.packets_expected,
                h.frames_lost_before
            ),
            (
                o.sequence,
                o.packets_received,
                o.packets_expected,
                o.frames_lost_before
            ),
            "frame {i}"
        );
        assert_eq!(pts.len(), off.points.len(), "frame {i} point count");
        assert!(
            pts == off.points.autoware(),
            "frame {i}: points differ from offline"
        );
    }

    // The steps happened mid-stream: the first frame is stamped on the real clock, a later one
    // an hour ahead, and the last ones an hour behind (each `host_ns` against the real clock
    // when the subscriber got the frame, within 60 s).
    let era = |h: &FrameHeader, got: i128| -> i128 {
        let d = h.host_ns as i128 - got;
        let e = (d + HOUR_NS / 2).div_euclid(HOUR_NS);
        assert!(
            (d - e * HOUR_NS).abs() < 60_000_000_000,
            "frame {} host_ns {} is not a whole hour from the real clock {got}",
            h.sequence,
            h.host_ns
        );
        e
    };
    let eras: Vec<i128> = live.iter().map(|(h, _, got)| era(h, *got)).collect();
    assert_eq!(eras.first(), Some(&0), "eras {eras:?}");
    assert!(
        eras.contains(&1),
        "no frame after the forward step: {eras:?}"
    );
    assert_eq!(
        eras.last(),
        Some(&-1),
        "no frame after the backward step: {eras:?}"
    );
    assert!(
        eras.windows(2)
            .all(|w| w[0] == w[1] || (w[0], w[1]) == (0, 1) || (w[0], w[1]) == (1, -1)),
        "eras out of order: {eras:?}"
    );
}
