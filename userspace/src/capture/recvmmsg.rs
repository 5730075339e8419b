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
    BackendExit, CaptureExit, CaptureStats, Packet, PacketSource, UdpSocketConfig, udp,
    wait::PollWaiter,
};
use lidarxdp_core::net::UdpDatagram;

/// Messages per `recvmmsg` call (the capture thread's burst).
const BATCH: usize = super::RX_BURST as usize;

/// [`PacketSource`] for the `recvmmsg` baseline; see the module documentation.
pub struct RecvmmsgSource {
    // Declared first, so dropped before the sockets it polls.
    waiter: PollWaiter,
    socks: Vec<(UdpSocket, u16)>,
    fds: Vec<RawFd>,
    /// `BATCH` receive buffers of `slot` bytes each, back to back.
    bufs: Vec<u8>,
    slot: usize,
    names: Vec<libc::sockaddr_in>,
    iovecs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Socket to read first next time (round robin, so one busy sensor cannot starve another).
    next: usize,
    received: u64,
    truncated: u64,
    rcvbuf_bytes: Option<u64>,
}

// SAFETY: the raw pointers inside `iovecs`/`msgs` point into `bufs`/`names`, which are owned
// by the same struct and move with it (heap allocations do not move); nothing is shared.
unsafe impl Send for RecvmmsgSource {}

impl RecvmmsgSource {
    /// Opens the sockets (non-blocking) and allocates `BATCH` buffers of
    /// `cfg.max_datagram + 1` bytes.
    ///
    /// Errors: opening the sockets (`capture::udp::open`), `io_uring_setup(2)`.
    pub fn open(cfg: &UdpSocketConfig) -> io::Result<Self> {
        let socks = udp::open(cfg)?;
        for (s, _) in &socks {
            s.set_nonblocking(true)?;
        }
        let rcvbuf_bytes = socks.first().and_then(|(s, _)| udp::rcvbuf_bytes(s).ok());
        let slot = cfg.max_datagram + 1;
        let n = socks.len();
        let mut me = Self {
            waiter: PollWaiter::new(n)?,
            fds: socks.iter().map(|(s, _)| s.as_raw_fd()).collect(),
            socks,
            bufs: vec![0u8; slot * BATCH],
            slot,
            // SAFETY: sockaddr_in is plain old data; all-zero bytes are a valid value.
            names: vec![unsafe { std::mem::zeroed() }; BATCH],
            iovecs: Vec::with_capacity(BATCH),
            msgs: Vec::with_capacity(BATCH),
            next: 0,
            received: 0,
            truncated: 0,
            rcvbuf_bytes,
        };
        let base = me.bufs.as_mut_ptr();
        for i in 0..BATCH {
            me.iovecs.push(libc::iovec {
                // SAFETY: i * slot + slot <= bufs.len(), so the offset stays inside `bufs`.
                iov_base: unsafe { base.add(i * slot) }.cast(),
                iov_len: slot,
            });
        }
        for i in 0..BATCH {
            // SAFETY: mmsghdr is plain old data; all-zero is valid (null pointers, zero lengths).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = (&mut me.names[i] as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_iov = &mut me.iovecs[i];
            m.msg_hdr.msg_iovlen = 1;
            me.msgs.push(m);
        }
        Ok(me)
    }

    /// One `recvmmsg` on socket `k`; returns the messages received.
    fn recv_one(
        &mut self,
        k: usize,
        max: usize,
        f: &mut dyn FnMut(Packet<'_>),
    ) -> io::Result<usize> {
        let want = max.min(BATCH);
        for m in &mut self.msgs[..want] {
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        let fd = self.socks[k].0.as_raw_fd();
        let port = self.socks[k].1;
        // SAFETY: `msgs[..want]` are initialised mmsghdrs whose name and iovec pointers point
        // into `names` and `bufs` (owned by self, alive and not otherwise borrowed during the
        // call); the fd is owned by `self.socks`; a null timeout means none.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        let r = r as usize;
        let mut delivered = 0;
        for i in 0..r {
            let m = &self.msgs[i];
            let len = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len >= self.slot {
                self.truncated += 1;
                continue;
            }
            let name = &self.names[i];
            let payload = &self.bufs[i * self.slot..i * self.slot + len];
            f(Packet::Udp(UdpDatagram {
                src_ip: name.sin_addr.s_addr.to_ne_bytes(),
                dst_ip: [0; 4],
                src_port: u16::from_be(name.sin_port),
                dst_port: port,
                payload,
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
        Ok(total)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.waiter.wait(&self.fds, timeout)
    }

    fn finish(&mut self, _stats: &CaptureStats) -> CaptureExit {
        CaptureExit {
            backend: BackendExit {
                name: "recvmmsg",
                received: self.received,
                rcvbuf_bytes: self.rcvbuf_bytes,
                truncated: self.truncated,
                ..BackendExit::default()
            },
            ..CaptureExit::default()
        }
    }
}
