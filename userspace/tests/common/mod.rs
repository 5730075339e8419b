//! Shared helpers for the privileged integration tests: throwaway network namespaces joined by a
//! veth pair, removed again on drop (even when the test panics).
#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// True when the tests run as root (CI does). Privileged tests return early with a message when
/// not root, unless `LIDARXDP_REQUIRE_PRIVILEGED=1` (set by `cargo xtask test`), where they fail.
pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        assert!(
            std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
            "privileged test needs root (LIDARXDP_REQUIRE_PRIVILEGED is set)"
        );
        eprintln!("skipping: needs root (run through `cargo xtask test`)");
    }
    root
}

/// Runs a command, panicking with its stderr when it fails.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces, "sensor" and "host", joined by a veth pair with one RX/TX queue each.
/// Addresses: sensor side 10.77.N.1/24, host side 10.77.N.2/24 (N unique per pair).
pub struct NetnsPair {
    /// Sensor-side namespace name.
    pub sensor_ns: String,
    /// Host-side namespace name (the daemon runs here).
    pub host_ns: String,
    /// Sensor-side veth name.
    pub sensor_if: String,
    /// Host-side veth name (the XDP program attaches here).
    pub host_if: String,
    /// Sensor-side IPv4 address.
    pub sensor_ip: String,
    /// Host-side IPv4 address.
    pub host_ip: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl NetnsPair {
    /// Creates the namespaces and veth pair with names unique to this process and call.
    pub fn new(tag: &str) -> Self {
        Self::with_queues(tag, 1)
    }

    /// [`NetnsPair::new`] with `queues` RX and TX queues on each end of the veth.
    pub fn with_queues(tag: &str, queues: u32) -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let id = format!("{}{}", pid % 100_000, n);
        let subnet = 100 + (pid as usize * 7 + n as usize) % 150;
        let p = Self {
            sensor_ns: format!("lxs-{tag}-{id}"),
            host_ns: format!("lxh-{tag}-{id}"),
            sensor_if: format!("lxs{id}"),
            host_if: format!("lxh{id}"),
            sensor_ip: format!("10.77.{subnet}.1"),
            host_ip: format!("10.77.{subnet}.2"),
        };
        sh(&["ip", "netns", "add", &p.sensor_ns]);
        sh(&["ip", "netns", "add", &p.host_ns]);
        p.veth(&p.sensor_if, &p.host_if, &p.sensor_ip, &p.host_ip, queues);
        for ns in [&p.sensor_ns, &p.host_ns] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        p
    }

    /// Adds a second veth pair between the same two namespaces (one queue each, addresses
    /// 10.79.N.1/24 on the sensor side and 10.79.N.2/24 on the host side); returns
    /// `(sensor_if, host_if, sensor_ip, host_ip)`. Removed with the namespaces.
    pub fn add_link(&self) -> (String, String, String, String) {
        let subnet = self.host_ip.split('.').nth(2).unwrap().to_string();
        let (sif, hif) = (format!("{}b", self.sensor_if), format!("{}b", self.host_if));
        let (sip, hip) = (format!("10.79.{subnet}.1"), format!("10.79.{subnet}.2"));
        self.veth(&sif, &hif, &sip, &hip, 1);
        (sif, hif, sip, hip)
    }

    /// A veth pair `sif` (sensor namespace, `sip`/24) <-> `hif` (host namespace, `hip`/24),
    /// `queues` RX/TX queues each (AF_XDP binds queue 0 unless told otherwise), both ends up.
    fn veth(&self, sif: &str, hif: &str, sip: &str, hip: &str, queues: u32) {
        let q = queues.to_string();
        let end = |name: &str, ns: &str| {
            [
                "name",
                name,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
                "netns",
                ns,
            ]
            .map(str::to_owned)
        };
        let mut args: Vec<String> = vec!["ip".into(), "link".into(), "add".into()];
        args.extend(end(sif, &self.sensor_ns));
        args.extend(["type".into(), "veth".into(), "peer".into()]);
        args.extend(end(hif, &self.host_ns));
        sh(&args.iter().map(String::as_str).collect::<Vec<_>>());
        for (ns, ifname, ip) in [(&self.sensor_ns, sif, sip), (&self.host_ns, hif, hip)] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                ifname,
            ]);
            sh(&["ip", "-n", ns, "link", "set", ifname, "up"]);
        }
    }

    /// `ip netns exec <ns> args...` as a Command.
    pub fn exec(ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.sensor_ns])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.host_ns])
            .status();
    }
}

/// Runs `f` on a new thread that has joined the network namespace `ns` (`setns(2)` with
/// `CLONE_NEWNET` affects only the calling thread), and returns its result.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        use std::os::fd::AsRawFd;
        // SAFETY: the fd is an open namespace file for the lifetime of this call; setns only
        // changes this thread's network namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread panicked")
}

/// Path of a capture in the shared data folder (read in place, never copied).
pub fn data(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(rel)
}

/// A fresh folder under the system temporary directory holding copies of the daemon binary and
/// of data files, readable (and the binary executable) by every user; removed on drop.
///
/// Tests that run the daemon as another user (`nobody`) use it, so that they do not depend on
/// the permissions of the folder the repository was cloned into (a checkout under a 0700 home
/// folder is unreachable for `nobody`). The copies live only as long as the test.
pub struct Staging {
    /// The folder (mode 0755).
    pub dir: std::path::PathBuf,
}

impl Staging {
    /// Creates `<tmp>/lidarxdp-<tag>-<pid>` (mode 0755), whose every ancestor must be
    /// searchable by all users (`/tmp` is, mode 1777).
    pub fn new(tag: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("lidarxdp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create staging folder");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for a in dir.ancestors().skip(1) {
            let mode = std::fs::metadata(a)
                .expect("stat ancestor")
                .permissions()
                .mode();
            assert!(
                mode & 0o001 != 0,
                "{} (mode {mode:o}) is not searchable by other users: set TMPDIR to a folder \
                 that is",
                a.display()
            );
        }
        Self { dir }
    }

    /// Copies `src` into the folder as `name` with `mode` (e.g. 0o644, 0o755); returns the
    /// copy's path.
    pub fn copy(&self, src: &std::path::Path, name: &str, mode: u32) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dst = self.dir.join(name);
        std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode)).unwrap();
        dst
    }

    /// A copy of the `lidarxdp` binary under test, mode 0755.
    pub fn daemon(&self) -> std::path::PathBuf {
        self.copy(
            std::path::Path::new(env!("CARGO_BIN_EXE_lidarxdp")),
            "lidarxdp",
            0o755,
        )
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A daemon started in a namespace; killed on drop if still running.
pub struct Daemon {
    /// The `ip netns exec` child (which has exec'd into the daemon: same pid).
    pub child: std::process::Child,
    /// Where the daemon writes its final counters.
    pub stats_path: std::path::PathBuf,
}

impl Daemon {
    /// Starts `lidarxdp run` in `ns` on `iface`, VLP-16 on UDP port 2368, publisher on
    /// 127.0.0.1:`listen_port` inside `ns`. Waits until the publisher accepts connections.
    pub fn start(ns: &str, iface: &str, listen_port: u16, extra: &[&str]) -> Self {
        let calib = data("velodyne/vlp16/calibration/VLP16db.yaml");
        let calib = calib.to_str().expect("UTF-8 path");
        let mut args = vec![
            "--sensor",
            "vlp16",
            "--port",
            "2368",
            "--calibration",
            calib,
        ];
        args.extend_from_slice(extra);
        Self::start_with(ns, iface, listen_port, &args)
    }

    /// Starts `lidarxdp run --iface IFACE --listen 127.0.0.1:PORT --stats-json F ARGS...` in
    /// `ns` and waits until the publisher accepts connections.
    pub fn start_with(ns: &str, iface: &str, listen_port: u16, args: &[&str]) -> Self {
        Self::start_wrapped(ns, &[], iface, listen_port, args)
    }

    /// [`Daemon::start_with`] with the daemon run through `wrapper` (e.g. `setpriv ...`), which
    /// must exec it (the pid stays the daemon's).
    pub fn start_wrapped(
        ns: &str,
        wrapper: &[&str],
        iface: &str,
        listen_port: u16,
        args: &[&str],
    ) -> Self {
        Self::start_exe(
            std::path::Path::new(env!("CARGO_BIN_EXE_lidarxdp")),
            ns,
            wrapper,
            iface,
            listen_port,
            args,
        )
    }

    /// [`Daemon::start_wrapped`] with the daemon binary at `exe` (e.g. a copy in a
    /// [`Staging`] folder that an unprivileged user can reach).
    pub fn start_exe(
        exe: &std::path::Path,
        ns: &str,
        wrapper: &[&str],
        iface: &str,
        listen_port: u16,
        args: &[&str],
    ) -> Self {
        let exe = exe.to_str().expect("UTF-8 path");
        let stats_path = std::env::temp_dir().join(format!(
            "lidarxdp-test-{}-{listen_port}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&stats_path);
        let mut cmd_args = wrapper.to_vec();
        cmd_args.extend_from_slice(&[exe, "run", "--iface", iface]);
        let child = NetnsPair::exec(ns, &cmd_args)
            .arg("--listen")
            .arg(format!("127.0.0.1:{listen_port}"))
            .arg("--stats-json")
            .arg(&stats_path)
            .args(args)
            .spawn()
            .expect("spawn daemon");
        let mut d = Self { child, stats_path };
        let ns2 = ns.to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(s) = d.child.try_wait().unwrap() {
                panic!("daemon exited during start-up: {s}");
            }
            let ns3 = ns2.clone();
            let ok = in_netns(&ns3, move || {
                std::net::TcpStream::connect(("127.0.0.1", listen_port)).is_ok()
            });
            if ok {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "daemon not ready in 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        d
    }

    /// Sends `sig` to the daemon.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on a child we own and have not reaped; `sig` is a valid signal.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGTERM, wait for a clean exit, and return the final counters.
    pub fn stop(mut self) -> serde_json::Value {
        self.signal(libc::SIGTERM);
        let status = wait(&mut self.child, 15);
        assert!(status.success(), "daemon exited with {status}");
        let text = std::fs::read(&self.stats_path).expect("daemon stats file");
        let _ = std::fs::remove_file(&self.stats_path);
        serde_json::from_slice(&text).expect("stats JSON")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits up to `secs` for a child, panicking on timeout.
pub fn wait(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process still running after {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Reads a u64 at a path of keys/indices in a JSON value (panics when absent).
pub fn get(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for p in path {
        cur = match p.parse::<usize>() {
            Ok(i) if cur.is_array() => &cur[i],
            _ => &cur[*p],
        };
    }
    cur.as_u64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

/// Runs `lidarxdp replay PCAP --to HOST_IP:PORT --rate RATE --json` in the sensor namespace
/// (`port` 0: each datagram's recorded port), asserts it succeeded and returns its JSON result
/// (`sent`, `bytes`, ...).
pub fn replay(net: &NetnsPair, pcap: &str, port: u16, rate: &str) -> serde_json::Value {
    replay_to(net, pcap, &net.host_ip, port, rate)
}

/// [`replay`] to another address inside the pair's host namespace (e.g. a second link's).
pub fn replay_to(
    net: &NetnsPair,
    pcap: &str,
    ip: &str,
    port: u16,
    rate: &str,
) -> serde_json::Value {
    let out = NetnsPair::exec(&net.sensor_ns, &[env!("CARGO_BIN_EXE_lidarxdp"), "replay"])
        .arg(data(pcap))
        .args(["--to", &format!("{ip}:{port}")])
        .args(["--rate", rate, "--json"])
        .output()
        .expect("run replay");
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("replay JSON")
}

/// Whether an XDP program is attached to `iface` in namespace `ns` (per `ip -d link`).
pub fn xdp_attached(ns: &str, iface: &str) -> bool {
    let out = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", "dev", iface])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// A received frame: header and points.
pub type ReceivedFrame = (
    lidarxdp_core::frame::FrameHeader,
    Vec<lidarxdp_core::point::PointXYZIRCAEDT>,
);

/// Subscribes to the daemon at 127.0.0.1:`port` inside `ns` on a new thread and collects every
/// frame until the stream ends (the daemon stops).
pub fn collect_frames(ns: &str, port: u16) -> std::thread::JoinHandle<Vec<ReceivedFrame>> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        in_netns(&ns, move || {
            let addr = format!("127.0.0.1:{port}").parse().unwrap();
            let mut sub = lidarxdp_client::Subscriber::connect(addr).unwrap();
            let mut frames = Vec::new();
            while let Some(f) = sub.next_frame().unwrap() {
                frames.push((*f.header(), f.points().to_vec()));
            }
            frames
        })
    })
}

/// Asserts the frames a subscriber received equal offline decoding of the same capture: same
/// count, and per frame the same sequence, packets received and points (bit for bit).
pub fn assert_frames_equal(live: &[ReceivedFrame], offline: &[lidarxdp_core::frame::Frame]) {
    assert_eq!(live.len(), offline.len(), "frame count");
    for (i, ((h, pts), off)) in live.iter().zip(offline).enumerate() {
        assert_eq!(h.sequence, off.header.sequence, "frame {i}");
        assert_eq!(h.packets_received, off.header.packets_received, "frame {i}");
        assert_eq!(pts.len(), off.points.len(), "frame {i} point count");
        assert!(
            pts == &off.points,
            "frame {i}: points differ from offline decoding"
        );
    }
}

/// Asserts the four receive-loss counters of `XDP_STATISTICS` in the stats JSON are 0.
pub fn assert_no_xsk_loss(stats: &serde_json::Value) {
    for field in [
        "rx_dropped",
        "rx_invalid_descs",
        "rx_ring_full",
        "rx_fill_ring_empty_descs",
    ] {
        assert_eq!(
            get(stats, &["xsk", field]),
            0,
            "XDP_STATISTICS {field}: {stats}"
        );
    }
}
