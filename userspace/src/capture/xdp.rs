//! The AF_XDP backend: the RX ring of an [`XskSocket`], drained in bursts with no lock and no
//! syscall per packet; when it is empty the thread sleeps in `io_uring_enter` on a poll of the
//! XSK fd with a timeout (`IORING_ENTER_EXT_ARG`, kernel 5.11+), so it neither spins nor sleeps
//! blindly. On veth the fill ring never asks for a wakeup (copy mode), so waiting is by poll.
//!
//! When idle it also watches the interface's carrier ([`LinkWatch`]): an `ip link set IF down`
//! and `up` leaves the XDP program attached and the socket bound, and receiving resumes by
//! itself (measured on veth in copy mode, `tests/e2e/e2e_faults.rs`), so the daemon only has to
//! count the flap (`link_changes`) and log it. It has no capability left by then and needs none
//! for this: the counter is an ordinary sysfs file.
//!
//! Losing the interface is different: when the device is unregistered the kernel unbinds the
//! socket and sets its error to `ENETDOWN` (`xsk_notifier`, net/xdp/xsk.c). The idle check reads
//! it (`SO_ERROR`) and the next [`PacketSource::wait`] fails with an error naming the interface,
//! so the daemon exits non-zero and its supervisor restarts it (re-binding needs the
//! capabilities it dropped).

use std::{fs::File, io, os::fd::AsRawFd, time::Duration};

use super::{
    BackendExit, CaptureExit, CaptureStats, Packet, PacketSource, XDP_STATISTICS_PERIOD,
    wait::{PollWaiter, WaitMode, set_busy_poll},
};
use crate::{
    sys::{sockopt, sysfs},
    xsk::XskSocket,
};

/// [`PacketSource`] over a bound AF_XDP socket.
pub struct XdpSource {
    // Declared before `xsk`, so dropped first: the poll request goes before the fd.
    waiter: PollWaiter,
    xsk: XskSocket,
    last_statistics: Option<std::time::Instant>,
    /// Boxed: the source moves into its thread inside an enum of all backends (kept small).
    link: Option<Box<LinkWatch>>,
    /// The socket's pending error (`SO_ERROR`), seen when idle; returned by the next `wait`.
    failed: Option<io::Error>,
    /// Packets were taken since the last wait ([`WaitMode::Paced`]).
    took: bool,
}

/// Reads the interface's `carrier_changes` from sysfs (`/sys/class/net/IF/carrier_changes`,
/// `Documentation/ABI/testing/sysfs-class-net`: the number of times the carrier went up or
/// down, a decimal line). The file is opened once and re-read with `pread` at offset 0, which
/// makes sysfs regenerate it: no allocation, one syscall per check, no privilege.
///
/// It re-reads the interface's `mtu` the same way: an MTU raised above what a UMEM chunk holds
/// ([`crate::xsk::max_mtu`]) while the daemon runs makes the kernel drop the longer frames
/// (counted in `xsk.rx_dropped`), and that is logged as a warning.
#[derive(Debug)]
struct LinkWatch {
    ifname: String,
    carrier_changes: File,
    /// `carrier_changes` when the watch started (right after the socket was bound).
    base: u64,
    /// Transitions counted so far (`carrier_changes - base`).
    changes: u64,
    /// `/sys/class/net/IF/mtu`, when readable.
    mtu_file: Option<File>,
    /// The MTU last seen, bytes.
    mtu: u64,
    /// The largest MTU whose frames fit a UMEM chunk.
    max_mtu: u64,
}

impl LinkWatch {
    /// Starts watching `ifname`, or returns `None` (logged) when its sysfs directory is absent
    /// or shows another device: sysfs lists the interfaces of the network namespace it was
    /// mounted in, which need not be the calling thread's.
    fn open(ifname: &str, ifindex: u32, max_mtu: u32) -> Option<Self> {
        let dir = sysfs::net_dir(ifname);
        let seen = sysfs::net_ifindex(ifname).ok();
        if seen != Some(ifindex) {
            log::info!(
                "{}: not the interface with ifindex {ifindex} (sysfs shows {seen:?}; another \
                 network namespace?); link down/up will not be counted",
                dir.display()
            );
            return None;
        }
        let carrier_changes = sysfs::open_net_attr(ifname, "carrier_changes")
            .map_err(|e| {
                log::info!(
                    "{}/carrier_changes: {e}; link changes not counted",
                    dir.display()
                )
            })
            .ok()?;
        let base = sysfs::reread_decimal(&carrier_changes).ok()?;
        let mtu_file = sysfs::open_net_attr(ifname, "mtu").ok();
        let mtu = mtu_file
            .as_ref()
            .and_then(|f| sysfs::reread_decimal(f).ok())
            .unwrap_or(0);
        Some(Self {
            ifname: ifname.to_owned(),
            carrier_changes,
            base,
            changes: 0,
            mtu_file,
            mtu,
            max_mtu: u64::from(max_mtu),
        })
    }

    /// Re-reads the MTU; returns `(old, new)` when it changed (and logs it: a warning when the
    /// new MTU no longer fits a UMEM chunk).
    fn check_mtu(&mut self) -> Option<(u64, u64)> {
        let now = sysfs::reread_decimal(self.mtu_file.as_ref()?).ok()?;
        if now == self.mtu {
            return None;
        }
        let old = std::mem::replace(&mut self.mtu, now);
        if now > self.max_mtu {
            log::warn!(
                "{}: MTU changed from {old} to {now} while running; frames longer than a UMEM \
                 chunk holds (MTU {}) are dropped by the kernel and counted in xsk.rx_dropped \
                 (see docs/deploy.md, \"MTU\")",
                self.ifname,
                self.max_mtu
            );
        } else {
            log::info!("{}: MTU changed from {old} to {now}", self.ifname);
        }
        Some((old, now))
    }

    /// Re-reads the counter; logs and returns the new total when it moved. A failed read (the
    /// device being removed) keeps the last value.
    fn check(&mut self) -> u64 {
        self.check_mtu();
        if let Ok(now) = sysfs::reread_decimal(&self.carrier_changes) {
            let changes = now.saturating_sub(self.base);
            if changes != self.changes {
                let state = sysfs::net_operstate(&self.ifname).unwrap_or_else(|e| e.to_string());
                log::warn!(
                    "{}: carrier changed {} time(s) (total since bind {changes}), operstate {state}; \
                     the AF_XDP socket stays bound and receives again once the link is up",
                    sysfs::net_dir(&self.ifname).display(),
                    changes - self.changes.min(changes),
                );
                self.changes = changes;
            }
        }
        self.changes
    }
}

impl XdpSource {
    /// Wraps a bound socket and starts counting the interface's carrier changes from now;
    /// waits as [`WaitMode::Poll`].
    ///
    /// Errors: `io_uring_setup(2)` failing (e.g. `ENOSYS`, `EPERM` under a seccomp policy).
    pub fn new(xsk: XskSocket) -> io::Result<Self> {
        Self::with_wait(xsk, WaitMode::Poll)
    }

    /// As [`Self::new`], waiting as `wait` says (`lidarxdp run --wait`). For
    /// [`WaitMode::BusyPoll`] the socket's busy-poll options are set here, while the process
    /// still has `CAP_NET_ADMIN`.
    ///
    /// Errors: `io_uring_setup(2)` failing (e.g. `ENOSYS`, `EPERM` under a seccomp policy).
    pub fn with_wait(xsk: XskSocket, wait: WaitMode) -> io::Result<Self> {
        let max_mtu = xsk.max_mtu();
        let link = LinkWatch::open(xsk.ifname(), xsk.ifindex(), max_mtu).map(Box::new);
        if let WaitMode::BusyPoll(usec) = wait {
            set_busy_poll(xsk.as_raw_fd(), usec);
        }
        Ok(Self {
            waiter: PollWaiter::with_mode(1, wait)?,
            xsk,
            last_statistics: None,
            link,
            failed: None,
            took: false,
        })
    }

    /// The wait mode in effect (after any fall-back, see [`PollWaiter::with_mode`]).
    pub fn wait_mode(&self) -> WaitMode {
        self.waiter.mode()
    }

    /// The socket.
    pub fn socket(&self) -> &XskSocket {
        &self.xsk
    }

    /// The socket's pending error (`getsockopt(SO_ERROR)`, which also clears it), `None` when
    /// there is none or it cannot be read. For AF_XDP only the device's unregistration sets one
    /// (`ENETDOWN`).
    fn socket_error(&self) -> Option<io::Error> {
        let err = sockopt::get_int(self.xsk.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ERROR).ok()?;
        (err != 0).then(|| io::Error::from_raw_os_error(err))
    }
}

impl PacketSource for XdpSource {
    fn recv_burst(&mut self, max: u32, f: &mut dyn FnMut(Packet<'_>)) -> io::Result<usize> {
        let n = self.xsk.rx_burst(max, |bytes| f(Packet::Ethernet(bytes)));
        self.took |= n > 0;
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "AF_XDP socket on {} queue {}: {e}: the interface is gone (unregistered) and \
                     the socket unbound; re-binding needs the capabilities dropped at start-up, \
                     so the daemon exits for its supervisor to restart it",
                    self.xsk.ifname(),
                    self.xsk.queue()
                ),
            ));
        }
        let took = std::mem::take(&mut self.took);
        self.waiter.wait(&[self.xsk.as_raw_fd()], timeout, took)
    }

    fn on_idle(&mut self, stats: &CaptureStats) {
        if self
            .last_statistics
            .is_none_or(|t| t.elapsed() >= XDP_STATISTICS_PERIOD)
        {
            self.last_statistics = Some(std::time::Instant::now());
            if let Ok(s) = self.xsk.statistics() {
                stats
                    .xdp_statistics
                    .store(&s, &self.xsk.counters().snapshot());
            }
            if let Some(e) = self.socket_error() {
                self.failed = Some(e);
            }
            if let Some(l) = self.link.as_mut() {
                let n = l.check();
                stats
                    .capture
                    .link_changes
                    .store(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    fn finish(&mut self, stats: &CaptureStats) -> CaptureExit {
        let xsk = self.xsk.counters().snapshot();
        let xdp_statistics = match self.xsk.statistics() {
            Ok(s) => {
                stats.xdp_statistics.store(&s, &xsk);
                Some(s)
            }
            Err(e) => {
                log::warn!("XDP_STATISTICS: {e}");
                None
            }
        };
        let link_changes = self.link.as_mut().map_or(0, |l| l.check());
        stats
            .capture
            .link_changes
            .store(link_changes, std::sync::atomic::Ordering::Relaxed);
        CaptureExit {
            xdp_statistics,
            xsk,
            backend: BackendExit {
                name: "xdp",
                received: xsk.packets,
                link_changes,
                ..BackendExit::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_watched_or_refused_without_panicking() {
        // In a container /sys may belong to another namespace: either outcome is fine, only
        // the ifindex check decides.
        if let Some(mut w) = LinkWatch::open("lo", 1, 1774) {
            assert_eq!(w.check(), 0);
        }
        assert!(LinkWatch::open("lo", u32::MAX, 1774).is_none());
        assert!(LinkWatch::open("lxdp-no-such0", 1, 1774).is_none());
    }

    #[test]
    fn mtu_changes_are_seen_once() {
        let dir = std::env::temp_dir();
        let path = |n: &str| dir.join(format!("lidarxdp-linkwatch-{}-{n}", std::process::id()));
        std::fs::write(path("carrier"), "3\n").unwrap();
        std::fs::write(path("mtu"), "1500\n").unwrap();
        let mut w = LinkWatch {
            ifname: "test0".into(),
            carrier_changes: File::open(path("carrier")).unwrap(),
            base: 3,
            changes: 0,
            mtu_file: Some(File::open(path("mtu")).unwrap()),
            mtu: 1500,
            max_mtu: 1774,
        };
        assert_eq!(w.check_mtu(), None);
        std::fs::write(path("mtu"), "9000\n").unwrap();
        assert_eq!(w.check_mtu(), Some((1500, 9000)));
        assert_eq!(w.check_mtu(), None, "logged once");
        std::fs::write(path("carrier"), "5\n").unwrap();
        assert_eq!(w.check(), 2);
        for n in ["carrier", "mtu"] {
            std::fs::remove_file(path(n)).unwrap();
        }
    }
}
