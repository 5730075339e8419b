//! The suite's own test network (the test kit's [`NetnsPair`]), and the kernel counters read
//! around each run.
//!
//! ```text
//!  netns lxs-bench-<id>                      netns lxh-bench-<id>
//!  lxs<id> 10.77.N.1/24  <--- veth --->  lxh<id> 10.77.N.2/24   (daemon: XDP / UDP here)
//! ```
//! One RX and one TX queue per end (AF_XDP binds queue 0), permanent neighbour entries (no ARP
//! exchange at the start of a run). [`TestNet`] removes both namespaces (and so the veth pair)
//! and restores `net.core.rmem_max` when dropped, also on error and panic unwinding.
use std::process::Command;

use anyhow::Result;
use lidarxdp_testkit::{NetnsPair, PairSpec, exec_in, run};
use serde::Serialize;

/// The suite's namespaces and veth pair (dereferences to the kit's [`NetnsPair`]: names,
/// addresses, [`NetnsPair::reset_link`]); removed on drop.
#[derive(Debug)]
pub struct TestNet {
    net: NetnsPair,
    rmem: Option<RmemGuard>,
}

impl std::ops::Deref for TestNet {
    type Target = NetnsPair;
    fn deref(&self) -> &NetnsPair {
        &self.net
    }
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
    /// Creates the namespaces (names unique to this process, [`PairSpec::unique`]) and the veth
    /// pair between them.
    pub fn up() -> Result<Self> {
        Ok(TestNet {
            net: NetnsPair::create(PairSpec::unique("bench").static_neighbours())?,
            rmem: None,
        })
    }

    /// Raises `net.core.rmem_max` to `wanted` bytes in the init namespace and inside the host
    /// namespace (`ip netns exec ... sh -c 'echo > /proc/sys/...'`), recording which write took
    /// effect; the init value is restored on drop.
    pub fn raise_rmem_max(&mut self, wanted: u64) -> RmemReport {
        let host_ns = self.net.host_ns.clone();
        let host_read = || {
            run(exec_in(&host_ns).args(["cat", RMEM]))
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
        r.host_write_ok =
            run(exec_in(&self.host_ns).args(["sh", "-c", &format!("echo {wanted} > {RMEM}")]))
                .is_ok();
        r.host_after = host_read();
        r
    }

    /// Counters of the receiving side now.
    pub fn counters(&self) -> Counters {
        let snmp = run(exec_in(&self.host_ns).args(["cat", "/proc/net/snmp"]))
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
        // The namespaces go when `net` is dropped, right after this.
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
