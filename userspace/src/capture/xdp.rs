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

use std::{
    fs::File,
    io,
    os::{fd::AsRawFd, unix::fs::FileExt},
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    BackendExit, CaptureExit, CaptureStats, Packet, PacketSource, XDP_STATISTICS_PERIOD,
    wait::PollWaiter,
};
use crate::xsk::XskSocket;

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
}

/// Reads the interface's `carrier_changes` from sysfs (`/sys/class/net/IF/carrier_changes`,
/// `Documentation/ABI/testing/sysfs-class-net`: the number of times the carrier went up or
/// down, a decimal line). The file is opened once and re-read with `pread` at offset 0, which
/// makes sysfs regenerate it: no allocation, one syscall per check, no privilege.
#[derive(Debug)]
struct LinkWatch {
    dir: PathBuf,
    carrier_changes: File,
    /// `carrier_changes` when the watch started (right after the socket was bound).
    base: u64,
    /// Transitions counted so far (`carrier_changes - base`).
    changes: u64,
}

impl LinkWatch {
    /// Starts watching `ifname`, or returns `None` (logged) when its sysfs directory is absent
    /// or shows another device: sysfs lists the interfaces of the network namespace it was
    /// mounted in, which need not be the calling thread's.
    fn open(ifname: &str, ifindex: u32) -> Option<Self> {
        let dir = Path::new("/sys/class/net").join(ifname);
        let seen = std::fs::read_to_string(dir.join("ifindex"))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        if seen != Some(ifindex) {
            log::info!(
                "{}: not the interface with ifindex {ifindex} (sysfs shows {seen:?}; another \
                 network namespace?); link down/up will not be counted",
                dir.display()
            );
            return None;
        }
        let carrier_changes = File::open(dir.join("carrier_changes"))
            .map_err(|e| {
                log::info!(
                    "{}/carrier_changes: {e}; link changes not counted",
                    dir.display()
                )
            })
            .ok()?;
        let base = read_decimal(&carrier_changes)?;
        Some(Self {
            dir,
            carrier_changes,
            base,
            changes: 0,
        })
    }

    /// Re-reads the counter; logs and returns the new total when it moved. A failed read (the
    /// device being removed) keeps the last value.
    fn check(&mut self) -> u64 {
        if let Some(now) = read_decimal(&self.carrier_changes) {
            let changes = now.saturating_sub(self.base);
            if changes != self.changes {
                let state = std::fs::read_to_string(self.dir.join("operstate"))
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_else(|e| e.to_string());
                log::warn!(
                    "{}: carrier changed {} time(s) (total since bind {changes}), operstate {state}; \
                     the AF_XDP socket stays bound and receives again once the link is up",
                    self.dir.display(),
                    changes - self.changes.min(changes),
                );
                self.changes = changes;
            }
        }
        self.changes
    }
}

/// Parses a sysfs file holding one decimal number (re-read from offset 0).
fn read_decimal(f: &File) -> Option<u64> {
    let mut buf = [0u8; 32];
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(buf.get(..n)?).ok()?.trim().parse().ok()
}

impl XdpSource {
    /// Wraps a bound socket and starts counting the interface's carrier changes from now.
    ///
    /// Errors: `io_uring_setup(2)` failing (e.g. `ENOSYS`, `EPERM` under a seccomp policy).
    pub fn new(xsk: XskSocket) -> io::Result<Self> {
        let link = LinkWatch::open(xsk.ifname(), xsk.ifindex()).map(Box::new);
        Ok(Self {
            waiter: PollWaiter::new(1)?,
            xsk,
            last_statistics: None,
            link,
            failed: None,
        })
    }

    /// The socket.
    pub fn socket(&self) -> &XskSocket {
        &self.xsk
    }

    /// The socket's pending error (`getsockopt(SO_ERROR)`, which also clears it), `None` when
    /// there is none or it cannot be read. For AF_XDP only the device's unregistration sets one
    /// (`ENETDOWN`).
    fn socket_error(&self) -> Option<io::Error> {
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the fd is open for `self`'s lifetime; `err` is a writable c_int and `len`
        // holds its size, which the kernel does not exceed.
        let rc = unsafe {
            libc::getsockopt(
                self.xsk.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (rc == 0 && err != 0).then(|| io::Error::from_raw_os_error(err))
    }
}

impl PacketSource for XdpSource {
    fn recv_burst(&mut self, max: u32, f: &mut dyn FnMut(Packet<'_>)) -> io::Result<usize> {
        Ok(self.xsk.rx_burst(max, |bytes| f(Packet::Ethernet(bytes))))
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
        self.waiter.wait(&[self.xsk.as_raw_fd()], timeout)
    }

    fn on_idle(&mut self, stats: &CaptureStats) {
        if self
            .last_statistics
            .is_none_or(|t| t.elapsed() >= XDP_STATISTICS_PERIOD)
        {
            self.last_statistics = Some(std::time::Instant::now());
            if let Ok(s) = self.xsk.statistics() {
                stats.xdp_statistics.store(&s);
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
        let xdp_statistics = match self.xsk.statistics() {
            Ok(s) => {
                stats.xdp_statistics.store(&s);
                Some(s)
            }
            Err(e) => {
                log::warn!("XDP_STATISTICS: {e}");
                None
            }
        };
        let xsk = self.xsk.counters().snapshot();
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
            stalls: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_decimal_file_again_from_the_start() {
        let path = std::env::temp_dir().join(format!("lidarxdp-decimal-{}", std::process::id()));
        std::fs::write(&path, "7\n").unwrap();
        let f = File::open(&path).unwrap();
        assert_eq!(read_decimal(&f), Some(7));
        std::fs::write(&path, "12\n").unwrap();
        assert_eq!(read_decimal(&f), Some(12));
        std::fs::write(&path, "not a number\n").unwrap();
        assert_eq!(read_decimal(&f), None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn loopback_is_watched_or_refused_without_panicking() {
        // In a container /sys may belong to another namespace: either outcome is fine, only
        // the ifindex check decides.
        if let Some(mut w) = LinkWatch::open("lo", 1) {
            assert_eq!(w.check(), 0);
        }
        assert!(LinkWatch::open("lo", u32::MAX).is_none());
        assert!(LinkWatch::open("lxdp-no-such0", 1).is_none());
    }
}
