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
use anyhow::Result;
use lidarxdp_testkit::{
    LinkDrops, NetnsPair, PairSpec, UdpCounters, exec_in, link_drops, run, udp_counters,
};
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
        let link = |ns: &str, ifname: &str| link_drops(ns, ifname).unwrap_or_default();
        Counters {
            udp: udp_counters(&self.host_ns).unwrap_or_default(),
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
