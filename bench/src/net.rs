//! The suite's own test network, and the kernel counters read around each run.
//!
//! ```text
//!  netns lxb-<pid>-s                         netns lxb-<pid>-h
//!  lxb<pid>s 10.78.X.1/24  <--- veth --->  lxb<pid>h 10.78.X.2/24   (daemon: XDP / UDP here)
//! ```
//! One RX and one TX queue per end (AF_XDP binds queue 0). [`TestNet`] removes both namespaces
//! (and so the veth pair) and restores `net.core.rmem_max` when dropped, also on error and
//! panic unwinding.
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::Serialize;

fn run(cmd: &mut Command) -> Result<String> {
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

/// The suite's namespaces and veth pair; removed on drop.
#[derive(Debug)]
pub struct TestNet {
    /// Sensor-side namespace (the generator runs here).
    pub sensor_ns: String,
    /// Host-side namespace (the daemon and the collector run here).
    pub host_ns: String,
    /// Sensor-side veth.
    pub sensor_if: String,
    /// Host-side veth (XDP is attached here).
    pub host_if: String,
    /// Sensor-side address.
    pub sensor_ip: String,
    /// Host-side address: the only destination the generator is given.
    pub host_ip: String,
    rmem: Option<RmemGuard>,
}

/// `net.core.rmem_max` as raised by the suite (bytes), and where the write took effect.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RmemReport {
    /// Value written, bytes.
    pub wanted: u64,
    /// Init namespace: value before, bytes.
    pub init_before: Option<u64>,
    /// Init namespace: value after writing, bytes.
    pub init_after: Option<u64>,
    /// Host namespace: value before (as seen by the daemon), bytes.
    pub host_before: Option<u64>,
    /// Host namespace: value after writing in the init namespace, bytes.
    pub host_after_init_write: Option<u64>,
    /// Host namespace: whether writing inside it succeeded.
    pub host_write_ok: bool,
    /// Host namespace: value after both writes (what `--rcvbuf max` gets), bytes.
    pub host_after: Option<u64>,
}

#[derive(Debug)]
struct RmemGuard {
    init_old: Option<u64>,
}

const RMEM: &str = "/proc/sys/net/core/rmem_max";

fn read_u64(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

impl TestNet {
    /// Creates the namespaces `lxb-<pid>-s`/`-h` and the veth pair between them.
    pub fn up() -> Result<Self> {
        let pid = std::process::id();
        let x = pid % 250 + 1;
        let net = TestNet {
            sensor_ns: format!("lxb-{pid}-s"),
            host_ns: format!("lxb-{pid}-h"),
            sensor_if: format!("lxb{pid}s"),
            host_if: format!("lxb{pid}h"),
            sensor_ip: format!("10.78.{x}.1"),
            host_ip: format!("10.78.{x}.2"),
            rmem: None,
        };
        net.remove();
        run(Command::new("ip").args(["netns", "add", &net.sensor_ns]))?;
        run(Command::new("ip").args(["netns", "add", &net.host_ns]))?;
        net.add_link()?;
        Ok(net)
    }

    fn add_link(&self) -> Result<()> {
        run(Command::new("ip").args([
            "link",
            "add",
            &self.sensor_if,
            "numrxqueues",
            "1",
            "numtxqueues",
            "1",
            "netns",
            &self.sensor_ns,
            "type",
            "veth",
            "peer",
            "name",
            &self.host_if,
            "numrxqueues",
            "1",
            "numtxqueues",
            "1",
            "netns",
            &self.host_ns,
        ]))?;
        for (ns, ifname, ip) in [
            (&self.sensor_ns, &self.sensor_if, &self.sensor_ip),
            (&self.host_ns, &self.host_if, &self.host_ip),
        ] {
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
            run(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]))?;
        }
        // Static neighbour entries: no ARP exchange at the start of a run.
        for (ns, ifname, peer_ns, peer_if, ip) in [
            (
                &self.sensor_ns,
                &self.sensor_if,
                &self.host_ns,
                &self.host_if,
                &self.host_ip,
            ),
            (
                &self.host_ns,
                &self.host_if,
                &self.sensor_ns,
                &self.sensor_if,
                &self.sensor_ip,
            ),
        ] {
            let mac = run(
                Command::new("ip").args(["-n", peer_ns, "-j", "link", "show", "dev", peer_if])
            )?;
            let v: serde_json::Value = serde_json::from_str(&mac).context("ip -j link")?;
            let mac = v[0]["address"].as_str().context("veth MAC")?.to_owned();
            run(Command::new("ip").args([
                "-n",
                ns,
                "neigh",
                "replace",
                ip,
                "lladdr",
                &mac,
                "dev",
                ifname,
                "nud",
                "permanent",
            ]))?;
        }
        Ok(())
    }

    /// Deletes and re-creates the veth pair (fresh counters, no AF_XDP socket lingering on the
    /// queue from the previous daemon, which would make the next bind fail with EBUSY).
    pub fn reset_link(&self) -> Result<()> {
        let _ = run(Command::new("ip").args(["-n", &self.host_ns, "link", "del", &self.host_if]));
        self.add_link()
    }

    /// Raises `net.core.rmem_max` to `wanted` bytes in the init namespace and inside the host
    /// namespace (`ip netns exec ... sh -c 'echo > /proc/sys/...'`), recording which write took
    /// effect; the init value is restored on drop.
    pub fn raise_rmem_max(&mut self, wanted: u64) -> RmemReport {
        let host_read = || {
            run(Command::new("ip").args(["netns", "exec", &self.host_ns, "cat", RMEM]))
                .ok()
                .and_then(|s| read_u64(&s))
        };
        let mut r = RmemReport {
            wanted,
            init_before: std::fs::read_to_string(RMEM)
                .ok()
                .and_then(|s| read_u64(&s)),
            host_before: host_read(),
            ..RmemReport::default()
        };
        if self.rmem.is_none() {
            self.rmem = Some(RmemGuard {
                init_old: r.init_before,
            });
        }
        let _ = std::fs::write(RMEM, wanted.to_string());
        r.init_after = std::fs::read_to_string(RMEM)
            .ok()
            .and_then(|s| read_u64(&s));
        r.host_after_init_write = host_read();
        r.host_write_ok = run(Command::new("ip").args([
            "netns",
            "exec",
            &self.host_ns,
            "sh",
            "-c",
            &format!("echo {wanted} > {RMEM}"),
        ]))
        .is_ok();
        r.host_after = host_read();
        r
    }

    fn remove(&self) {
        for ns in [&self.sensor_ns, &self.host_ns] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// `ip netns exec <ns>` as a command prefix.
    pub fn exec(ns: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        c
    }

    /// Counters of the receiving side now.
    pub fn counters(&self) -> Counters {
        let snmp = run(Self::exec(&self.host_ns).args(["cat", "/proc/net/snmp"]))
            .ok()
            .map(|s| parse_snmp_udp(&s))
            .unwrap_or_default();
        let link = |ns: &str, ifname: &str| {
            run(Command::new("ip").args(["-n", ns, "-s", "-j", "link", "show", "dev", ifname]))
                .ok()
                .and_then(|s| parse_link_drops(&s))
                .unwrap_or_default()
        };
        Counters {
            udp: snmp,
            host_link: link(&self.host_ns, &self.host_if),
            sensor_link: link(&self.sensor_ns, &self.sensor_if),
        }
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        self.remove();
        if let Some(g) = &self.rmem
            && let Some(old) = g.init_old
        {
            let _ = std::fs::write(RMEM, old.to_string());
        }
    }
}

/// UDP counters of `/proc/net/snmp` (proc(5); RFC 4113 udpInErrors and Linux's RcvbufErrors).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UdpCounters {
    /// `Udp: InDatagrams`.
    pub in_datagrams: u64,
    /// `Udp: InErrors` (includes RcvbufErrors).
    pub in_errors: u64,
    /// `Udp: RcvbufErrors`: datagrams dropped because the socket receive buffer was full.
    pub rcvbuf_errors: u64,
    /// `Udp: NoPorts`.
    pub no_ports: u64,
}

/// Drop counters of one interface (`ip -s -j link`, i.e. rtnetlink IFLA_STATS64).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LinkDrops {
    /// Packets received.
    pub rx_packets: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Sent packets dropped.
    pub tx_dropped: u64,
}

/// The receiver-side kernel counters read before and after a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Host namespace UDP counters.
    pub udp: UdpCounters,
    /// Host-side veth.
    pub host_link: LinkDrops,
    /// Sensor-side veth.
    pub sensor_link: LinkDrops,
}

/// Parses the `Udp:` header/value line pair of `/proc/net/snmp` (proc(5)).
pub fn parse_snmp_udp(text: &str) -> UdpCounters {
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(h), Some(v)) = (lines.next(), lines.next()) else {
        return UdpCounters::default();
    };
    let mut c = UdpCounters::default();
    for (k, v) in h.split_whitespace().zip(v.split_whitespace()).skip(1) {
        let v = v.parse().unwrap_or(0);
        match k {
            "InDatagrams" => c.in_datagrams = v,
            "InErrors" => c.in_errors = v,
            "RcvbufErrors" => c.rcvbuf_errors = v,
            "NoPorts" => c.no_ports = v,
            _ => {}
        }
    }
    c
}

/// Parses `ip -s -j link show dev X` output.
pub fn parse_link_drops(json: &str) -> Option<LinkDrops> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let s = &v[0]["stats64"];
    let g = |a: &str, b: &str| s[a][b].as_u64().unwrap_or(0);
    Some(LinkDrops {
        rx_packets: g("rx", "packets"),
        rx_dropped: g("rx", "dropped"),
        tx_packets: g("tx", "packets"),
        tx_dropped: g("tx", "dropped"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_udp_line() {
        let t = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                 Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
                 Udp: 100 3 7 0 5 0 0 0 0\nUdpLite: InDatagrams\nUdpLite: 0\n";
        assert_eq!(
            parse_snmp_udp(t),
            UdpCounters {
                in_datagrams: 100,
                in_errors: 7,
                rcvbuf_errors: 5,
                no_ports: 3
            }
        );
    }

    #[test]
    fn link_json() {
        let j = r#"[{"ifname":"x","stats64":{"rx":{"packets":10,"dropped":2},"tx":{"packets":9,"dropped":1}}}]"#;
        assert_eq!(
            parse_link_drops(j),
            Some(LinkDrops {
                rx_packets: 10,
                rx_dropped: 2,
                tx_packets: 9,
                tx_dropped: 1
            })
        );
    }
}
