//! The daemon under test: where its binary is, starting `lidarxdp run` in a namespace and
//! waiting until it is ready, stopping it, replaying a capture with `lidarxdp replay`, and
//! reading its stats JSON (the `--stats-json` file; fields as in docs/deploy.md).
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::Staging;
use crate::netns::NetnsPair;

/// Path of the `lidarxdp` binary under test: `$CARGO_BIN_EXE_lidarxdp` when set at run time
/// (cargo sets it for the integration tests of the `lidarxdp` package), else `lidarxdp` in the
/// folder above the running executable's (`target/<profile>/deps/<test>` ->
/// `target/<profile>/lidarxdp`, where cargo puts it when building those tests). Panics when
/// neither exists.
pub fn daemon_exe() -> PathBuf {
    if let Some(p) = std::env::var_os("CARGO_BIN_EXE_lidarxdp") {
        return p.into();
    }
    let me = std::env::current_exe().expect("current_exe");
    me.parent()
        .and_then(Path::parent)
        .map(|d| d.join("lidarxdp"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "lidarxdp binary not found beside {} (set CARGO_BIN_EXE_lidarxdp)",
                me.display()
            )
        })
}

/// Waits up to `timeout` until `ready()` returns true, polling every 20 ms; fails when `child`
/// exits first (with its status) or on timeout (`what` names the process in the message).
pub fn wait_ready(
    child: &mut Child,
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait()? {
            anyhow::bail!("{what} exited during start-up: {s}");
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!("{what} not ready after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The socket a daemon under test reports its readiness to, as a service manager's
/// `$NOTIFY_SOCKET` (sd_notify(3)): a datagram socket in its own [`Staging`] folder, mode 0666
/// so that a daemon that switched to `nobody` can still send.
pub struct NotifySocket {
    sock: UnixDatagram,
    /// The socket's path, for `NOTIFY_SOCKET`.
    pub path: PathBuf,
    /// Every line received so far, in order.
    lines: Vec<String>,
    _dir: Staging,
}

impl NotifySocket {
    /// Binds a fresh socket (non-blocking). Panics when it cannot.
    pub fn new() -> Self {
        let dir = Staging::new("notify");
        let path = dir.dir.join("notify");
        let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
        sock.set_nonblocking(true)
            .expect("non-blocking notify socket");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .expect("chmod the notify socket");
        Self {
            sock,
            path,
            lines: Vec::new(),
            _dir: dir,
        }
    }

    /// Every line received so far, in order (reads every queued datagram first).
    pub fn lines(&mut self) -> &[String] {
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.sock.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]);
            self.lines.extend(text.lines().map(str::to_owned));
        }
        &self.lines
    }

    /// Whether a `READY=1` line has arrived so far.
    pub fn ready(&mut self) -> bool {
        self.lines().iter().any(|l| l == "READY=1")
    }
}

impl Default for NotifySocket {
    fn default() -> Self {
        Self::new()
    }
}

/// A daemon started in a namespace; killed (and reaped) on drop if still running.
pub struct Daemon {
    /// The `ip netns exec` child (which has exec'd into the daemon: same pid).
    pub child: Child,
    /// Where the daemon writes its final counters (unique per daemon of the process).
    pub stats_path: PathBuf,
    /// Its `$NOTIFY_SOCKET`.
    notify: NotifySocket,
}

impl Daemon {
    /// Starts `lidarxdp run` in `ns` on `iface`, VLP-16 on UDP port 2368 with the shared
    /// VLP16db.yaml, publisher on 127.0.0.1:`listen_port` inside `ns`, plus `extra` arguments.
    /// Waits until the publisher accepts connections.
    pub fn start(ns: &str, iface: &str, listen_port: u16, extra: &[&str]) -> Self {
        let calib = crate::data("velodyne/vlp16/calibration/VLP16db.yaml");
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
        Self::start_exe(&daemon_exe(), ns, wrapper, iface, listen_port, args)
    }

    /// [`Daemon::start_wrapped`] with the daemon binary at `exe` (e.g. a copy in a
    /// [`Staging`] folder that an unprivileged user can reach). Returns once the daemon has
    /// sent `READY=1` to its `$NOTIFY_SOCKET` (a [`NotifySocket`]): every thread runs, with
    /// its final identity and capabilities. Panics when the daemon exits first or is not ready
    /// within 30 s.
    pub fn start_exe(
        exe: &Path,
        ns: &str,
        wrapper: &[&str],
        iface: &str,
        listen_port: u16,
        args: &[&str],
    ) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let exe = exe.to_str().expect("UTF-8 path");
        let stats_path = std::env::temp_dir().join(format!(
            "lidarxdp-test-{}-{listen_port}-{}.json",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&stats_path);
        let notify = NotifySocket::new();
        let mut cmd_args = wrapper.to_vec();
        cmd_args.extend_from_slice(&[exe, "run", "--iface", iface]);
        let child = NetnsPair::exec(ns, &cmd_args)
            .arg("--listen")
            .arg(format!("127.0.0.1:{listen_port}"))
            .arg("--stats-json")
            .arg(&stats_path)
            .args(args)
            // The domain of the zenoh and DDS tests is the flag's or 0, and their middleware
            // configuration the test's, never the caller's (a test sets one through a wrapper
            // such as `env ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`).
            .env_remove("ROS_DOMAIN_ID")
            .env_remove("CYCLONEDDS_URI")
            .env_remove("ROS_AUTOMATIC_DISCOVERY_RANGE")
            .env_remove("ROS_STATIC_PEERS")
            .env_remove("ROS_LOCALHOST_ONLY")
            .env_remove("ZENOH_SESSION_CONFIG_URI")
            .env_remove("ZENOH_CONFIG_OVERRIDE")
            .env("NOTIFY_SOCKET", &notify.path)
            .spawn()
            .expect("spawn daemon");
        let mut d = Self {
            child,
            stats_path,
            notify,
        };
        // The publisher accepts connections before the capabilities are dropped and the
        // capture threads start: only READY=1 says that start-up is over.
        let notify = &mut d.notify;
        wait_ready(&mut d.child, "daemon", Duration::from_secs(30), || {
            notify.ready()
        })
        .unwrap_or_else(|e| panic!("{e:#}"));
        d
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to the daemon.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on a child we own and have not reaped (so the pid cannot have been
        // reused); `sig` is a signal number chosen by the caller.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGTERM, wait (up to 15 s) for a clean exit, and return the final counters. Panics
    /// unless the daemon exited with status 0 having sent exactly `READY=1`, then
    /// `STOPPING=1`, to its `$NOTIFY_SOCKET`.
    pub fn stop(mut self) -> serde_json::Value {
        self.signal(libc::SIGTERM);
        let status = wait(&mut self.child, 15);
        assert!(status.success(), "daemon exited with {status}");
        assert_eq!(self.notify.lines(), ["READY=1", "STOPPING=1"], "sd_notify");
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

/// Waits up to `secs` seconds for a child to exit, panicking on timeout.
pub fn wait(child: &mut Child, secs: u64) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "process still running after {secs} s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a u64 at a path of keys / array indices in a JSON value (panics when absent).
pub fn get(v: &serde_json::Value, path: &[&str]) -> u64 {
    lookup(v, path).unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

/// The u64 at a path of keys / array indices (`"0"` indexes an array) in a JSON value, `None`
/// when absent or not an unsigned integer.
pub fn lookup(v: &serde_json::Value, path: &[&str]) -> Option<u64> {
    let mut cur = v;
    for p in path {
        cur = match p.parse::<usize>() {
            Ok(i) if cur.is_array() => &cur[i],
            _ => &cur[*p],
        };
    }
    cur.as_u64()
}

/// Runs `lidarxdp replay <data(pcap)> --to HOST_IP:PORT --rate RATE --json` in the pair's
/// sensor namespace (`port` 0: each datagram's recorded port), asserts it succeeded and returns
/// its JSON result (`sent`, `bytes`, ...).
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
    let exe = daemon_exe();
    let out = NetnsPair::exec(
        &net.sensor_ns,
        &[exe.to_str().expect("UTF-8 path"), "replay"],
    )
    .arg(crate::data(pcap))
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

/// Whether an XDP program is attached to `iface` in namespace `ns` (`prog/xdp` in
/// `ip -d link show`).
pub fn xdp_attached(ns: &str, iface: &str) -> bool {
    let out = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", "dev", iface])
        .output()
        .expect("run ip");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// Asserts the four receive-loss counters of `XDP_STATISTICS` (kernel
/// Documentation/networking/af_xdp.rst) in the stats JSON's `xsk` object are 0.
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
