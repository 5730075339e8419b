//! Network namespaces joined by a veth pair (ip-netns(8), ip-link(8) `type veth`), and running
//! code or commands inside one (setns(2), `ip netns exec`).
//!
//! ```text
//!  netns <sensor_ns>                          netns <host_ns>
//!  <sensor_if> <sensor_ip>/24  <--- veth --->  <host_if> <host_ip>/24   (the daemon runs here)
//! ```
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

/// Runs `cmd`, returning its stdout; an error naming the command, its exit status and its
/// stderr when it fails.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("spawn {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `args[0] args[1..]`, returning its stdout; panics with its stderr when it fails.
pub fn sh(args: &[&str]) -> String {
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..]);
    run(&mut cmd).unwrap_or_else(|e| panic!("{e:#}"))
}

/// `ip netns exec <ns>` as a command to add the program and its arguments to.
pub fn exec_in(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    c
}

/// Deletes namespace `ns` (and the veth ends inside it); silent when it does not exist.
pub fn delete_netns(ns: &str) {
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Sets the MTU of interface `ifname` in namespace `ns` (`ip -n NS link set dev IF mtu N`).
pub fn set_mtu(ns: &str, ifname: &str, mtu: u32) -> Result<()> {
    run(Command::new("ip").args([
        "-n",
        ns,
        "link",
        "set",
        "dev",
        ifname,
        "mtu",
        &mtu.to_string(),
    ]))
    .map(drop)
}

/// Runs `f` on a new thread that has joined the network namespace `ns` (setns(2) with
/// `CLONE_NEWNET` changes only the calling thread) and returns its result; a panic in `f`
/// propagates unchanged. `f` may borrow from the caller (a scoped thread).
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(move || {
            use std::os::fd::AsRawFd;
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: the fd is an open namespace file for the duration of the call; setns only
            // changes the network namespace of this thread, which is ours and ends after `f`.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// What [`NetnsPair::create`] builds: names, addresses (IPv4, /24) and link settings.
#[derive(Clone, Debug)]
pub struct PairSpec {
    /// Sensor-side namespace.
    pub sensor_ns: String,
    /// Host-side namespace.
    pub host_ns: String,
    /// Sensor-side veth (at most 15 bytes, IFNAMSIZ - 1).
    pub sensor_if: String,
    /// Host-side veth (at most 15 bytes).
    pub host_if: String,
    /// Sensor-side address, dotted quad (a /24 is assigned).
    pub sensor_ip: String,
    /// Host-side address, dotted quad, in the same /24.
    pub host_ip: String,
    /// RX and TX queues on each end (AF_XDP binds queue 0 unless told otherwise).
    pub queues: u32,
    /// MTU of both ends, bytes; `None` keeps the veth default (1500).
    pub mtu: Option<u32>,
    /// MAC addresses `(sensor, host)`; `None` lets the kernel pick random ones.
    pub macs: Option<(String, String)>,
    /// Permanent neighbour entries for the peer on both ends, so no ARP exchange is needed
    /// (an XDP program that redirects everything would swallow ARP replies).
    pub static_neighbours: bool,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl PairSpec {
    /// Names unique to this process and call: namespaces `lxs-<tag>-<id>` / `lxh-<tag>-<id>`,
    /// veths `lxs<id>` / `lxh<id>` with `<id>` = (pid mod 100,000) followed by a per-process
    /// counter; addresses 10.77.N.1 (sensor) and 10.77.N.2 (host), N in 100..=249. One queue,
    /// default MTU, random MACs, no static neighbours.
    pub fn unique(tag: &str) -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let id = format!("{}{}", pid % 100_000, n);
        let subnet = 100 + (pid as usize * 7 + n as usize) % 150;
        Self::named(
            &format!("lxs-{tag}-{id}"),
            &format!("lxh-{tag}-{id}"),
            &format!("lxs{id}"),
            &format!("lxh{id}"),
            &format!("10.77.{subnet}.1"),
            &format!("10.77.{subnet}.2"),
        )
    }

    /// Fixed names and addresses (e.g. the demo's `lxd-sensor`/`lxd-host`); one queue, default
    /// MTU, random MACs, no static neighbours.
    pub fn named(
        sensor_ns: &str,
        host_ns: &str,
        sensor_if: &str,
        host_if: &str,
        sensor_ip: &str,
        host_ip: &str,
    ) -> Self {
        Self {
            sensor_ns: sensor_ns.into(),
            host_ns: host_ns.into(),
            sensor_if: sensor_if.into(),
            host_if: host_if.into(),
            sensor_ip: sensor_ip.into(),
            host_ip: host_ip.into(),
            queues: 1,
            mtu: None,
            macs: None,
            static_neighbours: false,
        }
    }

    /// This spec with `queues` RX/TX queues per end.
    pub fn queues(mut self, queues: u32) -> Self {
        self.queues = queues;
        self
    }

    /// This spec with MTU `mtu` bytes on both ends.
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// This spec with fixed MAC addresses (`aa:bb:cc:dd:ee:ff`).
    pub fn macs(mut self, sensor: &str, host: &str) -> Self {
        self.macs = Some((sensor.into(), host.into()));
        self
    }

    /// This spec with permanent neighbour entries on both ends.
    pub fn static_neighbours(mut self) -> Self {
        self.static_neighbours = true;
        self
    }
}

/// Two namespaces, "sensor" and "host", joined by a veth pair; both namespaces (and with them
/// every veth inside) are deleted on drop, also when a test panics, unless
/// [`NetnsPair::persist`] was called.
#[derive(Debug)]
pub struct NetnsPair {
    /// Sensor-side namespace name (the replayer or generator runs here).
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
    spec: PairSpec,
    keep: bool,
}

impl NetnsPair {
    /// Creates the namespaces and the veth pair of `spec`, loopback up in both. On error,
    /// whatever was created is removed again.
    pub fn create(spec: PairSpec) -> Result<Self> {
        let p = Self {
            sensor_ns: spec.sensor_ns.clone(),
            host_ns: spec.host_ns.clone(),
            sensor_if: spec.sensor_if.clone(),
            host_if: spec.host_if.clone(),
            sensor_ip: spec.sensor_ip.clone(),
            host_ip: spec.host_ip.clone(),
            spec,
            keep: false,
        };
        // From here on `p` is dropped (and cleans up) when a step fails.
        run(Command::new("ip").args(["netns", "add", &p.sensor_ns]))?;
        run(Command::new("ip").args(["netns", "add", &p.host_ns]))?;
        for ns in [&p.sensor_ns, &p.host_ns] {
            run(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]))?;
        }
        p.add_veth(&p.sensor_if, &p.host_if, &p.sensor_ip, &p.host_ip, true)?;
        Ok(p)
    }

    /// [`PairSpec::unique`] with one queue per end, created; panics when `ip` fails.
    pub fn new(tag: &str) -> Self {
        Self::with_queues(tag, 1)
    }

    /// [`NetnsPair::new`] with `queues` RX and TX queues on each end of the veth.
    pub fn with_queues(tag: &str, queues: u32) -> Self {
        Self::create(PairSpec::unique(tag).queues(queues)).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Adds a second veth pair between the same two namespaces (one queue each, addresses
    /// 10.79.N.1/24 on the sensor side and 10.79.N.2/24 on the host side, N the pair's third
    /// octet); returns `(sensor_if, host_if, sensor_ip, host_ip)`. Removed with the namespaces.
    pub fn add_link(&self) -> (String, String, String, String) {
        let subnet = self.host_ip.split('.').nth(2).expect("dotted quad");
        let (sif, hif) = (format!("{}b", self.sensor_if), format!("{}b", self.host_if));
        let (sip, hip) = (format!("10.79.{subnet}.1"), format!("10.79.{subnet}.2"));
        self.add_veth(&sif, &hif, &sip, &hip, false)
            .unwrap_or_else(|e| panic!("{e:#}"));
        (sif, hif, sip, hip)
    }

    /// Deletes and re-creates the main veth pair with the same settings (fresh counters, and no
    /// AF_XDP socket of an earlier daemon lingering on the queue, which would make the next
    /// bind fail with EBUSY).
    pub fn reset_link(&self) -> Result<()> {
        let _ = run(Command::new("ip").args(["-n", &self.host_ns, "link", "del", &self.host_if]));
        self.add_veth(
            &self.sensor_if,
            &self.host_if,
            &self.sensor_ip,
            &self.host_ip,
            true,
        )
    }

    /// Sets the MTU of both ends of the main veth pair, bytes.
    pub fn set_mtu(&self, mtu: u32) -> Result<()> {
        set_mtu(&self.sensor_ns, &self.sensor_if, mtu)?;
        set_mtu(&self.host_ns, &self.host_if, mtu)
    }

    /// Leaves the namespaces in place when this value is dropped (`cargo xtask netns up`);
    /// [`delete_netns`] removes them later.
    pub fn persist(mut self) {
        self.keep = true;
    }

    /// `ip netns exec <ns> args...` as a command.
    pub fn exec(ns: &str, args: &[&str]) -> Command {
        let mut c = exec_in(ns);
        c.args(args);
        c
    }

    /// A veth pair `sif` (sensor namespace, `sip`/24) <-> `hif` (host namespace, `hip`/24), both
    /// ends up; `main`: with the spec's queues, MTU, MACs and neighbour entries, else one queue
    /// and defaults.
    fn add_veth(&self, sif: &str, hif: &str, sip: &str, hip: &str, main: bool) -> Result<()> {
        let s = &self.spec;
        let q = if main { s.queues } else { 1 }.to_string();
        let macs = if main { s.macs.clone() } else { None };
        let end = |name: &str, ns: &str, mac: Option<&String>| {
            let mut a: Vec<String> = ["name", name, "numrxqueues", &q, "numtxqueues", &q]
                .map(str::to_owned)
                .into();
            if let Some(m) = mac {
                a.extend(["address".into(), m.clone()]);
            }
            a.extend(["netns".into(), ns.into()]);
            a
        };
        let mut cmd = Command::new("ip");
        cmd.args(["link", "add"])
            .args(end(sif, &self.sensor_ns, macs.as_ref().map(|m| &m.0)))
            .args(["type", "veth", "peer"])
            .args(end(hif, &self.host_ns, macs.as_ref().map(|m| &m.1)));
        run(&mut cmd)?;
        for (ns, ifname, ip) in [(&self.sensor_ns, sif, sip), (&self.host_ns, hif, hip)] {
            if let (true, Some(mtu)) = (main, s.mtu) {
                set_mtu(ns, ifname, mtu)?;
            }
            run(Command::new("ip").args([
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                ifname,
            ]))?;
            run(Command::new("ip").args(["-n", ns, "link", "set", ifname, "up"]))?;
        }
        if main && s.static_neighbours {
            for (ns, ifname, peer_ns, peer_if, peer_ip) in [
                (&self.sensor_ns, sif, &self.host_ns, hif, hip),
                (&self.host_ns, hif, &self.sensor_ns, sif, sip),
            ] {
                let j =
                    run(Command::new("ip")
                        .args(["-n", peer_ns, "-j", "link", "show", "dev", peer_if]))?;
                let v: serde_json::Value = serde_json::from_str(&j).context("ip -j link")?;
                let mac = v[0]["address"].as_str().context("veth MAC")?.to_owned();
                run(Command::new("ip").args([
                    "-n",
                    ns,
                    "neigh",
                    "replace",
                    peer_ip,
                    "lladdr",
                    &mac,
                    "dev",
                    ifname,
                    "nud",
                    "permanent",
                ]))?;
            }
        }
        Ok(())
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        if !self.keep {
            delete_netns(&self.sensor_ns);
            delete_netns(&self.host_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(ns: &str, ifname: &str) -> serde_json::Value {
        let j = sh(&["ip", "-n", ns, "-j", "link", "show", "dev", ifname]);
        serde_json::from_str::<serde_json::Value>(&j).unwrap()[0].clone()
    }

    fn namespaces() -> String {
        sh(&["ip", "netns", "list"])
    }

    #[test]
    fn unique_names_differ_per_call_and_fit_ifnamsiz() {
        let (a, b) = (PairSpec::unique("t"), PairSpec::unique("t"));
        assert_ne!(a.sensor_ns, b.sensor_ns);
        assert_ne!(a.host_if, b.host_if);
        for s in [&a, &b] {
            assert!(s.sensor_if.len() < 15 && s.host_if.len() < 15, "{s:?}");
            assert_eq!(s.queues, 1);
        }
    }

    /// Queues, MTU, MACs and neighbour entries as asked; both namespaces gone after drop.
    #[test]
    fn pair_has_the_spec_settings_and_is_removed_on_drop() {
        if !crate::privileged() {
            return;
        }
        let spec = PairSpec::unique("kit")
            .queues(2)
            .mtu(9000)
            .macs("02:00:00:77:00:01", "02:00:00:77:00:02")
            .static_neighbours();
        let p = NetnsPair::create(spec).unwrap();
        let h = link(&p.host_ns, &p.host_if);
        assert_eq!(h["mtu"], 9000);
        assert_eq!(h["address"], "02:00:00:77:00:02");
        assert_eq!(link(&p.sensor_ns, &p.sensor_if)["mtu"], 9000);
        let q = sh(&[
            "ip", "-n", &p.host_ns, "-d", "-j", "link", "show", "dev", &p.host_if,
        ]);
        let q: serde_json::Value = serde_json::from_str(&q).unwrap();
        assert_eq!(q[0]["num_rx_queues"], 2);
        let n = sh(&["ip", "-n", &p.host_ns, "neigh", "show", "dev", &p.host_if]);
        assert_eq!(
            n.trim(),
            format!("{} lladdr 02:00:00:77:00:01 PERMANENT", p.sensor_ip)
        );
        let seen = in_netns(&p.host_ns, || {
            std::net::UdpSocket::bind((p.host_ip.as_str(), 0)).is_ok()
        });
        assert!(seen, "host address not configured in the host namespace");
        p.reset_link().unwrap();
        assert_eq!(link(&p.host_ns, &p.host_if)["mtu"], 9000);
        let names = (p.sensor_ns.clone(), p.host_ns.clone());
        drop(p);
        let list = namespaces();
        assert!(
            !list.contains(&names.0) && !list.contains(&names.1),
            "{list}"
        );
    }

    /// `persist` keeps the namespaces after drop; `delete_netns` removes them.
    #[test]
    fn persisted_pair_outlives_the_value() {
        if !crate::privileged() {
            return;
        }
        let spec = PairSpec::unique("kitp");
        let (s, h) = (spec.sensor_ns.clone(), spec.host_ns.clone());
        NetnsPair::create(spec).unwrap().persist();
        let list = namespaces();
        delete_netns(&s);
        delete_netns(&h);
        assert!(list.contains(&s) && list.contains(&h), "{list}");
        let list = namespaces();
        assert!(!list.contains(&s) && !list.contains(&h), "{list}");
    }
}
