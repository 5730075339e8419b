//! The `recvmmsg` baseline: the decoder thread itself takes up to a burst of datagrams per
//! `recvmmsg(2)` call (`MSG_DONTWAIT`) from each of its non-blocking sockets, and sleeps in
//! `io_uring_enter` on a poll of the sockets with a timeout when all are empty. No second
//! thread, no lock, one syscall per burst instead of per packet.

use std::{
    io,
    net::UdpSocket,
    os::fd::{AsRawFd, RawFd},
    time::Duration,
};

use super::{
    BackendExit, CaptureExit, CaptureSnapshot, CaptureStats, Packet, PacketSource, UdpSocketConfig,
    udp,
    wait::{PollWaiter, WaitMode, set_busy_poll},
};
use crate::sys::net::RecvBatch;
use lidarxdp_core::net::UdpDatagram;

/// Messages per `recvmmsg` call (the capture thread's burst).
const BATCH: usize = super::RX_BURST as usize;

/// [`PacketSource`] for the `recvmmsg` baseline; see the module documentation.
pub struct RecvmmsgSource {
    // Declared first, so dropped before the sockets it polls.
    waiter: PollWaiter,
    socks: Vec<(UdpSocket, u16)>,
    fds: Vec<RawFd>,
    /// `BATCH` receive buffers of `cfg.max_datagram + 1` bytes with their headers.
    batch: RecvBatch,
    /// Socket to read first next time (round robin, so one busy sensor cannot starve another).
    next: usize,
    received: u64,
    truncated: u64,
    rcvbuf_bytes: Option<u64>,
    /// Datagrams were taken since the last wait ([`WaitMode::Paced`]).
    took: bool,
}

impl RecvmmsgSource {
    /// Opens the sockets (non-blocking) and allocates `BATCH` buffers of
    /// `cfg.max_datagram + 1` bytes.
    ///
    /// Errors: opening the sockets (`capture::udp::open`), `io_uring_setup(2)`.
    pub fn open(cfg: &UdpSocketConfig) -> io::Result<Self> {
        Self::open_with_wait(cfg, WaitMode::Poll)
    }

    /// As [`Self::open`], waiting as `wait` says (`lidarxdp run --wait`).
    ///
    /// Errors: as [`Self::open`].
    pub fn open_with_wait(cfg: &UdpSocketConfig, wait: WaitMode) -> io::Result<Self> {
        let socks = udp::open(cfg)?;
        for (s, _) in &socks {
            s.set_nonblocking(true)?;
            if let WaitMode::BusyPoll(usec) = wait {
                set_busy_poll(s.as_raw_fd(), usec);
            }
        }
        let rcvbuf_bytes = socks.first().and_then(|(s, _)| udp::rcvbuf_bytes(s).ok());
        Ok(Self {
            waiter: PollWaiter::with_mode(socks.len(), wait)?,
            fds: socks.iter().map(|(s, _)| s.as_raw_fd()).collect(),
            socks,
            batch: RecvBatch::new(BATCH, cfg.max_datagram + 1),
            next: 0,
            received: 0,
            truncated: 0,
            rcvbuf_bytes,
            took: false,
        })
    }

    /// The wait mode in effect (after any fall-back, see [`PollWaiter::with_mode`]).
    pub fn wait_mode(&self) -> WaitMode {
        self.waiter.mode()
    }

    /// One `recvmmsg` on socket `k`; returns the messages received.
    fn recv_one(
        &mut self,
        k: usize,
        max: usize,
        f: &mut dyn FnMut(Packet<'_>),
    ) -> io::Result<usize> {
        let (sock, port) = &self.socks[k];
        let r = match self.batch.recv(sock.as_raw_fd(), max) {
            Ok(r) => r,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut delivered = 0;
        for i in 0..r {
            let m = self.batch.get(i);
            if m.truncated {
                self.truncated += 1;
                continue;
            }
            f(Packet::Udp(UdpDatagram {
                src_ip: (*m.source.ip()).into(),
                dst_ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
                src_port: m.source.port(),
                dst_port: *port,
                payload: m.payload,
            }));
            delivered += 1;
        }
        self.received += delivered as u64;
        Ok(r)
    }
}

impl PacketSource for RecvmmsgSource {
    fn recv_burst(&mut self, max: u32, f: &mut dyn FnMut(Packet<'_>)) -> io::Result<usize> {
        let n = self.socks.len();
        let mut total = 0usize;
        for j in 0..n {
            let k = (self.next + j) % n;
            let left = max as usize - total;
            if left == 0 {
                break;
            }
            total += self.recv_one(k, left, f)?;
        }
        self.next = (self.next + 1) % n.max(1);
        self.took |= total > 0;
        Ok(total)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let took = std::mem::take(&mut self.took);
        self.waiter.wait(&self.fds, timeout, took)
    }

    fn counters(&self, c: &mut CaptureSnapshot) {
        c.truncated = self.truncated;
    }

    fn finish(&mut self, _stats: &CaptureStats) -> CaptureExit {
        CaptureExit {
            backend: BackendExit {
                name: "recvmmsg",
                received: self.received,
                rcvbuf_bytes: self.rcvbuf_bytes,
                ..BackendExit::default()
            },
            ..CaptureExit::default()
        }
    }
}
