//! `lidarxdp run --view`: the live 3D page in a real browser. The daemon runs in its own
//! namespace with `--view 127.0.0.1:PORT` while the real VLP-16 capture is replayed in a loop;
//! Debian's chromium, headless with software WebGL (SwiftShader), runs in the same namespace
//! (so 127.0.0.1 is the daemon's) and takes screenshots, decoded here with the `png` crate.
//!
//! - Before any frame, the page in `bare=1` mode (points only) has no pixel other than the
//!   background: the blank reference, so the point count below can fail.
//! - During the replay it has at least [`MIN_PIXELS_PER_POINT`] non-background pixels a point of
//!   the frame shown, and the page's panel (chromium's `--dump-dom`) names the sensor, its rate
//!   and the frames drawn.
//! - `GET /api/status` names the sensor with frames > 0; `GET /api/frame` is exactly
//!   `32 + points * 16` bytes, parsed here by the documented layout (not the daemon's decoder)
//!   and equal, point for point, to an offline decoding of the same capture.
//! - Every thread of the daemon, the view's included, holds no capability.
//!
//! `LIDARXDP_VIEW_SCREENSHOT=FILE` also saves the page with its panel (1280x800) to FILE:
//! `docs/img/view.png` is made so.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, Daemon, NetnsPair, data, in_netns, privileged};
use lidarxdp::privs::CapState;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

/// The VLP-16 dual-return capture (603 packets, 4 rotations).
const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
/// Its calibration.
const VLP16_CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";
/// The page's background, `#0d1117` (web/index.html, web/view.js).
const BACKGROUND: [u8; 3] = [0x0d, 0x11, 0x17];
/// A pixel is a point pixel when its R+G+B differ from the background's by more than this.
const PIXEL_TOLERANCE: u32 = 24;
/// Point pixels wanted a point of the frame: points are drawn 2x2 pixels at 1280x800, and
/// many overlap or hide each other from the default viewpoint; measured here about 0.8 a
/// point (11 700 pixels for a frame of 14 820 points), so a cloud drawn at all clears 0.25
/// by far, while the blank reference has none.
const MIN_PIXELS_PER_POINT: f64 = 0.25;
/// Chromium's window.
const WINDOW: &str = "1280,800";

/// Path of Debian's chromium (`LIDARXDP_CHROMIUM` overrides), or `None` (the test then
/// returns early, or fails under `LIDARXDP_REQUIRE_PRIVILEGED=1`).
fn chromium() -> Option<PathBuf> {
    let p = std::env::var_os("LIDARXDP_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
        "{} not found (cargo xtask setup installs Debian's chromium)",
        p.display()
    );
    eprintln!("skipping: {} not found", p.display());
    None
}

/// `GET target` from 127.0.0.1:`port` inside `ns` (HTTP/1.1, one request, connection
/// closed); returns the status code and the body.
fn http_get(ns: &str, port: u16, target: &str) -> (u16, Vec<u8>) {
    in_netns(ns, || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the view");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).expect("read the response");
        let end = buf
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("end of the response head");
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("status line: {head}"));
        (status, buf[end + 4..].to_vec())
    })
}

/// The status endpoint's JSON.
fn status(ns: &str, port: u16) -> Value {
    let (code, body) = http_get(ns, port, "/api/status");
    assert_eq!(code, 200);
    serde_json::from_slice(&body).expect("status JSON")
}

/// A folder of its own under the temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("lidarxdp-view-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch folder");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs headless chromium in `ns` on `url` with `mode` (`--screenshot=FILE` or `--dump-dom`),
/// letting the page run 6 s of virtual time first; returns its standard output. Killed after
/// 90 s.
fn chromium_run(exe: &Path, ns: &str, profile: &Path, mode: &str, url: &str) -> String {
    let mut child: Child = NetnsPair::exec(ns, &[exe.to_str().expect("UTF-8 path")])
        .args([
            "--headless",
            // Root in a namespace: chromium's sandbox needs an unprivileged user.
            "--no-sandbox",
            // Software WebGL: the machine has no GPU.
            "--use-angle=swiftshader",
            "--enable-unsafe-swiftshader",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-crash-reporter",
            "--virtual-time-budget=6000",
        ])
        .arg(format!("--window-size={WINDOW}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(mode)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromium");
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let st = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium still running after 90 s: {mode} {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(st.success(), "chromium {mode} {url}: {st}");
    reader.join().expect("chromium output")
}

/// Takes a screenshot of `url` into `file` and returns its pixels that differ from the
/// background (sum of |R|, |G|, |B| differences above [`PIXEL_TOLERANCE`]).
fn point_pixels(exe: &Path, ns: &str, profile: &Path, url: &str, file: &Path) -> usize {
    let _ = std::fs::remove_file(file);
    chromium_run(
        exe,
        ns,
        profile,
        &format!("--screenshot={}", file.display()),
        url,
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(file).expect("screenshot written"),
    ));
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("PNG pixels");
    assert_eq!(
        (info.width, info.height),
        (1280, 800),
        "screenshot size = the window's"
    );
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        t => panic!("screenshot colour type {t:?}"),
    };
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    buf[..info.buffer_size()]
        .chunks_exact(channels)
        .filter(|p| {
            let d: u32 = (0..3)
                .map(|c| u32::from(p[c].abs_diff(BACKGROUND[c])))
                .sum();
            d > PIXEL_TOLERANCE
        })
        .count()
}

/// A frame response parsed by the layout documented in `userspace/src/view/wire.rs`:
/// (sequence, points in the frame, step, [(x, y, z, intensity, return type, channel)]).
type Parsed = (u64, u32, u32, Vec<(f32, f32, f32, u8, u8, u16)>);

fn parse_frame(b: &[u8]) -> Parsed {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let f32_at = |o: usize| f32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    assert!(b.len() >= 40, "frame response of {} bytes", b.len());
    assert_eq!(&b[0..4], b"LXV2");
    assert_eq!(u16::from_le_bytes([b[4], b[5]]), 40, "header length");
    assert_eq!(u32_at(32), 1, "flags: the layout has an intensity");
    assert_eq!(u16::from_le_bytes([b[6], b[7]]), 16, "stride");
    let seq = u64::from_le_bytes(b[8..16].try_into().unwrap());
    let n = u32_at(16) as usize;
    assert_eq!(b.len(), 40 + n * 16, "header + points * stride");
    let points = (0..n)
        .map(|i| {
            let o = 40 + 16 * i;
            (
                f32_at(o),
                f32_at(o + 4),
                f32_at(o + 8),
                b[o + 12],
                b[o + 13],
                u16::from_le_bytes([b[o + 14], b[o + 15]]),
            )
        })
        .collect();
    (seq, u32_at(20), u32_at(24), points)
}

/// Whether `p` holds exactly the points of `f` (x, y, z bit for bit, intensity, return type,
/// channel).
fn same_points(p: &Parsed, f: &Frame) -> bool {
    p.3.len() == f.points.len()
        && p.3.iter().zip(f.points.autoware()).all(|(a, q)| {
            a.0.to_bits() == q.x.to_bits()
                && a.1.to_bits() == q.y.to_bits()
                && a.2.to_bits() == q.z.to_bits()
                && (a.3, a.4, a.5) == (q.intensity, q.return_type, q.channel)
        })
}

/// Every thread of `pid` with its name and capability state.
fn threads(pid: u32) -> Vec<(String, CapState)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task folder")
        .flatten()
        .filter_map(|e| {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            Some((comm.trim().to_owned(), CapState::parse(&status)?))
        })
        .collect()
}

/// The page shows the replayed VLP-16 (module docs).
#[test]
fn view_shows_the_replayed_vlp16_in_chromium() {
    if !privileged() {
        return;
    }
    let Some(exe) = chromium() else { return };
    let offline = {
        let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(VLP16_CALIB));
        lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368))
            .expect("offline decode")
            .0
    };
    assert_eq!(offline.len(), 4, "frames of the dual-return capture");
    let net = NetnsPair::new("lv");
    let scratch = Scratch::new();
    let profile = scratch.0.join("profile");
    let view_port = 18080;
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7721,
        &["--view", &format!("127.0.0.1:{view_port}")],
    );
    let ns = net.host_ns.as_str();
    let base = format!("http://127.0.0.1:{view_port}");

    // Before any frame: the sensor is listed with none, the frame endpoint has nothing newer,
    // and the bare page is the background only.
    let st = status(ns, view_port);
    assert_eq!(st["sensors"].as_array().map(Vec::len), Some(1), "{st}");
    assert_eq!(st["sensors"][0]["name"], "VLP16");
    assert_eq!(st["sensors"][0]["model"], "VLP16");
    assert_eq!(st["sensors"][0]["frames"], 0);
    assert_eq!(st["max_points"], 300_000);
    assert_eq!(http_get(ns, view_port, "/api/frame?sensor=VLP16").0, 204);
    let blank = point_pixels(
        &exe,
        ns,
        &profile,
        &format!("{base}/?bare=1"),
        &scratch.0.join("blank.png"),
    );
    assert_eq!(blank, 0, "point pixels with no frame");
    let dom = chromium_run(&exe, ns, &profile, "--dump-dom", &format!("{base}/"));
    assert!(dom.contains("waiting for the first frame"), "{dom}");

    // The capture in a loop at its recorded rate (0.4 s a pass): frames for about 40 s.
    let replay = {
        let exe = common::daemon_exe();
        NetnsPair::exec(
            &net.sensor_ns,
            &[exe.to_str().expect("UTF-8 path"), "replay"],
        )
        .arg(data(DUAL))
        .args(["--to", &format!("{}:2368", net.host_ip)])
        .args(["--rate", "realtime", "--loop", "100"])
        .stdout(Stdio::null())
        // "behind schedule" warnings of a busy machine.
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn replay")
    };
    struct Reap(Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _replay = Reap(replay);
    let deadline = Instant::now() + Duration::from_secs(20);
    while status(ns, view_port)["sensors"][0]["frames"].as_u64() < Some(5) {
        assert!(Instant::now() < deadline, "no frames in 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = status(ns, view_port);
    let s = &st["sensors"][0];
    assert_eq!(s["name"], "VLP16");
    assert!(s["frames"].as_u64() >= Some(5), "{st}");
    assert!(s["fps"].as_f64() > Some(0.0), "{st}");
    assert!(s["points"].as_u64() > Some(0), "{st}");

    // Frames by the documented layout: whole (no decimation under 300 000 points), sequences
    // increasing, and one equal point for point to an offline frame (a full rotation of the
    // capture; the frames across the loop's seam differ).
    let mut after: Option<u64> = None;
    let mut matched = None;
    for _ in 0..200 {
        let target = match after {
            Some(a) => format!("/api/frame?sensor=VLP16&after={a}"),
            None => "/api/frame?sensor=VLP16".to_owned(),
        };
        let (code, body) = http_get(ns, view_port, &target);
        if code == 204 {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        assert_eq!(code, 200);
        let p = parse_frame(&body);
        assert!(
            after.is_none_or(|a| p.0 > a),
            "sequence {} after {after:?}",
            p.0
        );
        assert_eq!(p.1 as usize, p.3.len(), "points in the frame = points sent");
        assert_eq!(p.2, 1, "step");
        after = Some(p.0);
        if let Some(i) = offline.iter().position(|f| same_points(&p, f)) {
            matched = Some((i, p.3.len()));
            break;
        }
    }
    let (index, points) = matched.expect("a frame equal to an offline frame");
    eprintln!("frame equal to offline frame {index} ({points} points)");

    // The page during the replay: points drawn, and its panel filled in.
    let st = status(ns, view_port);
    let shown = st["sensors"][0]["points"].as_u64().expect("points") as f64;
    let pixels = point_pixels(
        &exe,
        ns,
        &profile,
        &format!("{base}/?bare=1"),
        &scratch.0.join("points.png"),
    );
    eprintln!("{pixels} point pixels for a frame of {shown} points");
    assert!(
        pixels as f64 >= MIN_PIXELS_PER_POINT * shown,
        "{pixels} point pixels for {shown} points"
    );
    let dom = chromium_run(&exe, ns, &profile, "--dump-dom", &format!("{base}/"));
    assert!(
        dom.contains(r#"<span id="sensor-name" class="v">VLP16</span>"#),
        "{dom}"
    );
    assert!(dom.contains(" Hz</span>"), "{dom}");
    assert!(!dom.contains("waiting for the first frame"), "{dom}");
    let drawn = dom
        .split("data-frames-drawn=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(drawn >= Some(1), "frames drawn: {drawn:?}");
    if let Some(out) = std::env::var_os("LIDARXDP_VIEW_SCREENSHOT") {
        chromium_run(
            &exe,
            ns,
            &profile,
            &format!("--screenshot={}", PathBuf::from(out).display()),
            &format!("{base}/"),
        );
    }

    // Every thread, the view's `view-http` among them, holds no capability.
    let threads = threads(daemon.child.id());
    assert!(threads.iter().any(|(n, _)| n == "view-http"), "{threads:?}");
    for (name, caps) in &threads {
        assert_eq!(
            (
                caps.effective,
                caps.permitted,
                caps.ambient,
                caps.no_new_privs
            ),
            (0, 0, 0, true),
            "thread {name}"
        );
    }

    drop(_replay);
    let stats = daemon.stop();
    assert!(
        common::get(&stats, &["capture", "frames_out"]) >= 5,
        "{stats}"
    );
}
