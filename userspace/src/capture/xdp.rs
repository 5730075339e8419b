//! The AF_XDP backend: the RX ring of an [`XskSocket`], drained in bursts with no lock and no
//! syscall per packet; when it is empty the thread sleeps in `io_uring_enter` on a poll of the
//! XSK fd with a timeout (`IORING_ENTER_EXT_ARG`, kernel 5.11+), so it neither spins nor sleeps
//! blindly. On veth the fill ring never asks for a wakeup (copy mode), so waiting is by poll.

use std::{io, os::fd::AsRawFd, time::Duration};

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
}

impl XdpSource {
    /// Wraps a bound socket.
    ///
    /// Errors: `io_uring_setup(2)` failing (e.g. `ENOSYS`, `EPERM` under a seccomp policy).
    pub fn new(xsk: XskSocket) -> io::Result<Self> {
        Ok(Self {
            waiter: PollWaiter::new(1)?,
            xsk,
            last_statistics: None,
        })
    }

    /// The socket.
    pub fn socket(&self) -> &XskSocket {
        &self.xsk
    }
}

impl PacketSource for XdpSource {
    fn recv_burst(&mut self, max: u32, f: &mut dyn FnMut(Packet<'_>)) -> io::Result<usize> {
        Ok(self.xsk.rx_burst(max, |bytes| f(Packet::Ethernet(bytes))))
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
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
        CaptureExit {
            xdp_statistics,
            xsk,
            backend: BackendExit {
                name: "xdp",
                received: xsk.packets,
                ..BackendExit::default()
            },
            stalls: 0,
        }
    }
}
