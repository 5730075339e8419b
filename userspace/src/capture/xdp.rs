//! The AF_XDP backend: the RX ring of an [`XskSocket`], drained in bursts with no lock and no
//! syscall per packet; when it is empty the thread sleeps in `io_uring_enter` on a poll of the
//! XSK fd with a timeout (`IORING_ENTER_EXT_ARG`, kernel 5.11+), so it neither spins nor sleeps
//! blindly. On veth the fill ring never asks for a wakeup (copy mode), so waiting is by poll.

use std::{io, os::fd::AsRawFd, time::Duration};

use io_uring::{IoUring, opcode, types};

use super::{BackendExit, CaptureExit, CaptureStats, Packet, PacketSource, XDP_STATISTICS_PERIOD};
use crate::xsk::XskSocket;

/// user_data of the poll request.
const POLL_TAG: u64 = 1;

/// [`PacketSource`] over a bound AF_XDP socket.
pub struct XdpSource {
    // Declared before `xsk`, so dropped first (see the SAFETY comment in `wait`).
    ring: IoUring,
    xsk: XskSocket,
    poll_armed: bool,
    last_statistics: Option<std::time::Instant>,
}

impl XdpSource {
    /// Wraps a bound socket.
    ///
    /// Errors: `io_uring_setup(2)` failing (e.g. `ENOSYS`, `EPERM` under a seccomp policy).
    pub fn new(xsk: XskSocket) -> io::Result<Self> {
        Ok(Self {
            ring: IoUring::new(8)?,
            xsk,
            poll_armed: false,
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
        if !self.poll_armed {
            let fd = types::Fd(self.xsk.as_raw_fd());
            let sqe = opcode::PollAdd::new(fd, libc::POLLIN as u32)
                .build()
                .user_data(POLL_TAG);
            // SAFETY: PollAdd references no user memory; the XSK fd stays open for the ring's
            // lifetime because both are fields of `self` and `ring` is dropped first.
            unsafe { self.ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            self.poll_armed = true;
        }
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        for cqe in self.ring.completion() {
            if cqe.user_data() == POLL_TAG {
                self.poll_armed = false;
            }
        }
        Ok(())
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
