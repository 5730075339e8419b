//! The `uring` baseline: one io_uring multishot `recvmsg` per socket (`IORING_OP_RECVMSG` with
//! `IORING_RECV_MULTISHOT`, kernel 6.0+) receiving into a provided buffer ring
//! (`IORING_REGISTER_PBUF_RING`, kernel 5.19+; io_uring_register_buf_ring(3),
//! io_uring_recvmsg_out(3)). The decoder thread reaps completions from the shared completion
//! ring without a syscall, hands each datagram to the decoder and gives the buffer back by
//! advancing the buffer ring's tail; it enters the kernel only to re-arm a finished multishot
//! request or to sleep when the completion ring is empty.
//!
//! Each provided buffer holds an `io_uring_recvmsg_out` header (16 bytes), the source
//! `sockaddr_in` (16 bytes) and the payload. When every buffer is in use the kernel ends the
//! multishot request with `ENOBUFS` (counted in `lidarxdp_capture_backpressure_total`) and the
//! packets wait in the socket's receive buffer until it is re-armed.

use std::{
    io,
    net::UdpSocket,
    os::fd::AsRawFd,
    sync::atomic::{AtomicU16, Ordering},
    time::Duration,
};

use io_uring::{IoUring, cqueue, opcode, types};

use super::{
    BackendExit, CaptureExit, CaptureSnapshot, CaptureStats, Packet, PacketSource, UdpSocketConfig,
    udp,
};
use lidarxdp_core::net::UdpDatagram;

/// Buffer group id of the provided buffer ring.
const BGID: u16 = 0;
/// Bytes of `struct io_uring_recvmsg_out` at the start of every buffer.
const RECVMSG_OUT_LEN: usize = 16;
/// Bytes of `struct io_uring_buf` (one buffer ring entry: addr u64, len u32, bid u16, resv u16).
const BUF_ENTRY_LEN: usize = 16;
/// Byte offset of the ring's tail (`__u16`, aliasing entry 0's `resv`).
const TAIL_OFFSET: usize = 14;

/// Provided buffers: how many (a power of two, at most 32,768) and the payload each holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringBuffers {
    /// Number of buffers (and ring entries); power of two in 2..=32768.
    pub count: u16,
}

impl Default for UringBuffers {
    /// 4,096 buffers.
    fn default() -> Self {
        Self { count: 4096 }
    }
}

/// [`PacketSource`] for the `uring` baseline; see the module documentation.
pub struct UringSource {
    // Declared first, so the ring (and with it the kernel's use of the buffer ring, the
    // buffers and the msghdr) goes away before the memory below.
    ring: IoUring,
    socks: Vec<(UdpSocket, u16)>,
    /// Buffer ring entries (page-aligned, as the kernel requires).
    entries: memmap2::MmapMut,
    bufs: Vec<u8>,
    buf_len: usize,
    count: u16,
    /// Our copy of the ring tail (the kernel only reads it).
    tail: u16,
    /// The msghdr template of the multishot requests (only name and control lengths are used).
    msghdr: Box<libc::msghdr>,
    /// Per socket: the multishot request must be (re-)submitted.
    rearm: Vec<bool>,
    max_datagram: usize,
    received: u64,
    truncated: u64,
    enobufs: u64,
    rcvbuf_bytes: Option<u64>,
}

// SAFETY: the raw pointers inside `msghdr` are null; the buffer ring and buffers are owned by
// the struct and used only by the thread that owns it.
unsafe impl Send for UringSource {}

impl UringSource {
    /// Opens the sockets, registers the buffer ring with all buffers and arms one multishot
    /// `recvmsg` per socket.
    ///
    /// Errors: opening the sockets, `io_uring_setup(2)`, the registration (`EINVAL` on kernels
    /// before 5.19), `mmap(2)`.
    pub fn open(cfg: &UdpSocketConfig, buffers: UringBuffers) -> io::Result<Self> {
        let count = buffers.count;
        if !(2..=32768).contains(&count) || !count.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("uring buffers: {count} is not a power of two in 2..=32768"),
            ));
        }
        let socks = udp::open(cfg)?;
        let rcvbuf_bytes = socks.first().and_then(|(s, _)| udp::rcvbuf_bytes(s).ok());
        let name_len = std::mem::size_of::<libc::sockaddr_in>();
        let buf_len = RECVMSG_OUT_LEN + name_len + cfg.max_datagram + 1;
        let ring = IoUring::builder()
            .setup_cqsize(u32::from(count) * 2)
            .build(16.max((socks.len() as u32 * 2).next_power_of_two()))?;
        let entries = memmap2::MmapMut::map_anon(usize::from(count) * BUF_ENTRY_LEN)?;
        // SAFETY: msghdr is plain old data; all-zero is valid (null pointers, zero lengths).
        let mut msghdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        msghdr.msg_namelen = name_len as libc::socklen_t;
        let mut me = Self {
            rearm: vec![true; socks.len()],
            ring,
            socks,
            entries,
            bufs: vec![0u8; buf_len * usize::from(count)],
            buf_len,
            count,
            tail: 0,
            msghdr,
            max_datagram: cfg.max_datagram,
            received: 0,
            truncated: 0,
            enobufs: 0,
            rcvbuf_bytes,
        };
        // SAFETY: `entries` is a page-aligned mapping of `count` entries that lives as long as
        // the ring (field order above); it is unregistered implicitly when the ring is closed.
        unsafe {
            me.ring.submitter().register_buf_ring_with_flags(
                me.entries.as_ptr() as u64,
                count,
                BGID,
                0,
            )?;
        }
        for bid in 0..count {
            me.push_buffer(bid);
        }
        me.publish_tail();
        me.arm()?;
        Ok(me)
    }

    /// Writes buffer `bid` into the next ring slot (made visible by [`Self::publish_tail`]).
    fn push_buffer(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (self.count - 1));
        let addr = self.bufs.as_ptr() as u64 + u64::from(bid) * self.buf_len as u64;
        let e = &mut self.entries[slot * BUF_ENTRY_LEN..(slot + 1) * BUF_ENTRY_LEN];
        e[0..8].copy_from_slice(&addr.to_ne_bytes());
        e[8..12].copy_from_slice(&(self.buf_len as u32).to_ne_bytes());
        e[12..14].copy_from_slice(&bid.to_ne_bytes());
        // bytes 14..16 of slot 0 are the tail: never written here.
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the tail with release ordering, so the kernel sees the entries written before.
    fn publish_tail(&mut self) {
        // SAFETY: TAIL_OFFSET is inside the mapping, 2-byte aligned (the mapping is
        // page-aligned); the kernel reads the u16 there atomically (io_uring_buf_ring_advance).
        let tail = unsafe { &*(self.entries.as_mut_ptr().add(TAIL_OFFSET) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    /// Submits the multishot requests that need (re-)arming, without waiting.
    fn arm(&mut self) -> io::Result<()> {
        let mut any = false;
        for (k, (sock, _)) in self.socks.iter().enumerate() {
            if !self.rearm[k] {
                continue;
            }
            let sqe = opcode::RecvMsgMulti::new(types::Fd(sock.as_raw_fd()), &*self.msghdr, BGID)
                .build()
                .user_data(k as u64);
            // SAFETY: the msghdr is boxed and owned by self (it outlives the ring: field
            // order); the socket stays open as long as the ring.
            unsafe { self.ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            self.rearm[k] = false;
            any = true;
        }
        if any {
            self.ring.submit()?;
        }
        Ok(())
    }
}

impl PacketSource for UringSource {
    fn recv_burst(&mut self, max: u32, f: &mut dyn FnMut(Packet<'_>)) -> io::Result<usize> {
        let mut n = 0usize;
        let mut recycled = false;
        // Collect first: the completion queue borrows the ring mutably.
        let mut cqes: [(u64, i32, u32); super::RX_BURST as usize] =
            [(0, 0, 0); super::RX_BURST as usize];
        let mut taken = 0;
        for cqe in self.ring.completion().take((max as usize).min(cqes.len())) {
            cqes[taken] = (cqe.user_data(), cqe.result(), cqe.flags());
            taken += 1;
        }
        for &(k, res, flags) in &cqes[..taken] {
            let k = k as usize;
            if !cqueue::more(flags)
                && let Some(r) = self.rearm.get_mut(k)
            {
                *r = true;
            }
            if res < 0 {
                if res == -libc::ENOBUFS {
                    self.enobufs += 1;
                } else if res != -libc::EINTR {
                    log::warn!("uring recvmsg: {}", io::Error::from_raw_os_error(-res));
                }
                continue;
            }
            let Some(bid) = cqueue::buffer_select(flags) else {
                continue;
            };
            if bid >= self.count {
                continue;
            }
            let start = usize::from(bid) * self.buf_len;
            let len = (res as usize).min(self.buf_len);
            let port = self.socks.get(k).map_or(0, |s| s.1);
            {
                let buf = &self.bufs[start..start + len];
                match types::RecvMsgOut::parse(buf, &self.msghdr) {
                    Ok(out)
                        if !out.is_payload_truncated()
                            && out.payload_data().len() <= self.max_datagram =>
                    {
                        let p = out.payload_data();
                        let src = udp::sockaddr_in_ip(out.name_data()).unwrap_or([0; 4]);
                        let sport = out
                            .name_data()
                            .get(2..4)
                            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
                        f(Packet::Udp(UdpDatagram {
                            src_ip: src.into(),
                            dst_ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
                            src_port: sport,
                            dst_port: port,
                            payload: p,
                        }));
                        n += 1;
                    }
                    _ => self.truncated += 1,
                }
            }
            self.push_buffer(bid);
            recycled = true;
        }
        if recycled {
            self.publish_tail();
        }
        self.received += n as u64;
        if self.rearm.iter().any(|&r| r) {
            self.arm()?;
        }
        Ok(taken)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.arm()?;
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn counters(&self, c: &mut CaptureSnapshot) {
        c.truncated = self.truncated;
        c.backpressure = self.enobufs;
    }

    fn finish(&mut self, _stats: &CaptureStats) -> CaptureExit {
        CaptureExit {
            backend: BackendExit {
                name: "uring",
                received: self.received,
                rcvbuf_bytes: self.rcvbuf_bytes,
                ..BackendExit::default()
            },
            ..CaptureExit::default()
        }
    }
}
