//! Kernel counters read around a test or benchmark run, in a namespace: the UDP MIB of
//! `/proc/net/snmp` (proc(5)) and an interface's IFLA_STATS64 as `ip -s -j link` prints it
//! (ip-link(8)). One reader and one parser of each, for the tests and the bench.

use std::process::Command;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::netns::{exec_in, run};

/// UDP counters of `/proc/net/snmp` (proc(5); RFC 4113 udpInDatagrams, udpNoPorts,
/// udpInErrors, and Linux's RcvbufErrors).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UdpCounters {
    /// `Udp: InDatagrams`: datagrams delivered to a socket.
    pub in_datagrams: u64,
    /// `Udp: InErrors` (includes RcvbufErrors).
    pub in_errors: u64,
    /// `Udp: RcvbufErrors`: datagrams dropped because the socket receive buffer was full.
    pub rcvbuf_errors: u64,
    /// `Udp: NoPorts`: datagrams to a port no socket is bound to.
    pub no_ports: u64,
}

/// Packet and drop counters of one interface (`ip -s -j link`, i.e. rtnetlink IFLA_STATS64).
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

/// Parses the `Udp:` header/value line pair of `/proc/net/snmp` (proc(5)); counters it does
/// not find (or cannot parse) are 0.
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

/// Parses `ip -s -j link show dev X` output (its first interface's `stats64`); `None` if it
/// is not JSON.
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

/// The UDP MIB of namespace `ns` now (`ip netns exec NS cat /proc/net/snmp`).
///
/// Errors: the command failing (no such namespace, not root).
pub fn udp_counters(ns: &str) -> Result<UdpCounters> {
    Ok(parse_snmp_udp(&run(
        exec_in(ns).args(["cat", "/proc/net/snmp"])
    )?))
}

/// The counters of interface `ifname` in namespace `ns` now (`ip -n NS -s -j link show dev IF`).
///
/// Errors: the command failing (no such namespace or interface), output that is not JSON.
pub fn link_drops(ns: &str, ifname: &str) -> Result<LinkDrops> {
    let text = run(Command::new("ip").args(["-n", ns, "-s", "-j", "link", "show", "dev", ifname]))?;
    parse_link_drops(&text).with_context(|| format!("ip -s -j link show dev {ifname}: {text}"))
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
        assert_eq!(parse_link_drops("not json"), None);
    }
}
