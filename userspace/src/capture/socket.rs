//! The `socket` baseline, built the way most LiDAR drivers are: one receive thread per socket
//! calls blocking `recvfrom(2)` once per packet, copies the datagram into its own `Vec`, and
//! pushes it onto a mutex-protected queue; the decoder thread pops packets under the same mutex
//! and sleeps on a condition variable when the queue is empty.
//!
//! The queue is bounded ([`HANDOFF_CAPACITY`] packets). When it is full the receive thread waits
//! for the decoder (counted in `lidarxdp_capture_backpressure_total`), so packets back up into
//! the socket's receive buffer and any loss shows where the kernel counts it
//! (`/proc/net/snmp` Udp `RcvbufErrors`) rather than inside the daemon.
//!
//! The receive threads start on the capture thread's first call, not when the sockets are
//! opened: the daemon opens its sources before it drops its capabilities, and a thread started
//! then would keep them (capabilities are per thread).

use std::{
    collections::VecDeque,
    io,
    net::UdpSocket,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use super::{
    BackendExit, CaptureExit, CaptureSnapshot, CaptureStats, Packet, PacketSource, UdpSocketConfig,
    thread_cpu_ns, udp,
};
use lidarxdp_core::net::UdpDatagram;

/// Packets the hand-off queue holds before the receive thread waits.
pub const HANDOFF_CAPACITY: usize = 1024;

/// How often a blocked `recvfrom` returns to check the stop flag (`SO_RCVTIMEO`).
const RECV_TIMEOUT: Duration = Duration::from_millis(100);

struct Queued {
    src_ip: std::net::IpAddr,
    src_port: u16,
    dst_port: u16,
    payload: Vec<u8>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Queued>>,
    /// Signalled when a packet is pushed.
    not_empty: Condvar,
    /// Signalled when the decoder took packets.
    not_full: Condvar,
    stop: AtomicBool,
    truncated: AtomicU64,
    backpressure: AtomicU64,
    receiver_cpu_ns: AtomicU64,
}

/// [`PacketSource`] for the `socket` baseline; see the module documentation.
pub struct SocketSource {
    shared: Arc<Shared>,
    /// Sockets whose receive thread has not started yet (until the first call).
    pending: Vec<(UdpSocket, u16)>,
    max_datagram: usize,
    threads: Vec<JoinHandle<()>>,
    local: VecDeque<Queued>,
    received: u64,
    rcvbuf_bytes: Option<u64>,
}

impl SocketSource {
    /// Opens the sockets; their receive threads (one per socket) start on the first
    /// [`PacketSource`] call (module documentation).
    ///
    /// Errors: opening the sockets (`capture::udp::open`), setting `SO_RCVTIMEO`.
    pub fn open(cfg: &UdpSocketConfig) -> io::Result<Self> {
        let socks = udp::open(cfg)?;
        let rcvbuf_bytes = socks.first().and_then(|(s, _)| udp::rcvbuf_bytes(s).ok());
        for (sock, _) in &socks {
            sock.set_read_timeout(Some(RECV_TIMEOUT))?;
        }
        Ok(Self {
            shared: Arc::new(Shared::default()),
            threads: Vec::with_capacity(socks.len()),
            pending: socks,
            max_datagram: cfg.max_datagram,
            local: VecDeque::with_capacity(HANDOFF_CAPACITY),
            received: 0,
            rcvbuf_bytes,
        })
    }
}

impl SocketSource {
    /// Starts the receive threads not started yet.
    ///
    /// Errors: spawning a thread.
    fn start_threads(&mut self) -> io::Result<()> {
        for (sock, port) in self.pending.drain(..) {
            let shared = self.shared.clone();
            let max = self.max_datagram;
            self.threads.push(
                std::thread::Builder::new()
                    .name(format!("recv-{port}"))
                    .spawn(move || receive_loop(&sock, port, max, &shared))?,
            );
        }
        Ok(())
    }
}

fn receive_loop(sock: &UdpSocket, port: u16, max: usize, shared: &Shared) {
    let mut buf = vec![0u8; max + 1];
    while !shared.stop.load(Ordering::Relaxed) {
        // recvfrom(2), one datagram per call (std's `recv_from` is that one syscall).
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => continue,
                _ => {
                    log::error!("recvfrom on port {port}: {e}");
                    break;
                }
            },
        };
        let (src_ip, src_port) = match from {
            std::net::SocketAddr::V4(a) => (std::net::IpAddr::V4(*a.ip()), a.port()),
            std::net::SocketAddr::V6(a) => (std::net::IpAddr::V6(*a.ip()).to_canonical(), a.port()),
        };
        if n > max {
            shared.truncated.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let q = Queued {
            src_ip,
            src_port,
            dst_port: port,
            payload: buf[..n].to_vec(),
        };
        let mut g = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if g.len() >= HANDOFF_CAPACITY {
            shared.backpressure.fetch_add(1, Ordering::Relaxed);
            while g.len() >= HANDOFF_CAPACITY && !shared.stop.load(Ordering::Relaxed) {
                g = shared
                    .not_full
                    .wait_timeout(g, RECV_TIMEOUT)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        g.push_back(q);
        drop(g);
        shared.not_empty.notify_one();
    }
    shared
        .receiver_cpu_ns
        .fetch_add(thread_cpu_ns(), Ordering::Relaxed);
}

impl PacketSource for SocketSource {
    fn recv_burst(&mut self, max: u32, f: &mut dyn FnMut(Packet<'_>)) -> io::Result<usize> {
        if !self.pending.is_empty() {
            self.start_threads()?;
        }
        if self.local.is_empty() {
            let mut g = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_empty() {
                return Ok(0);
            }
            std::mem::swap(&mut *g, &mut self.local);
            drop(g);
            self.shared.not_full.notify_all();
        }
        let mut n = 0usize;
        while n < max as usize {
            let Some(q) = self.local.pop_front() else {
                break;
            };
            f(Packet::Udp(UdpDatagram {
                src_ip: q.src_ip,
                dst_ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
                src_port: q.src_port,
                dst_port: q.dst_port,
                payload: &q.payload,
            }));
            n += 1;
        }
        self.received += n as u64;
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.start_threads()?;
        }
        if !self.local.is_empty() {
            return Ok(());
        }
        let g = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_empty() {
            let _ = self
                .shared
                .not_empty
                .wait_timeout(g, timeout)
                .unwrap_or_else(|p| p.into_inner());
        }
        Ok(())
    }

    fn counters(&self, c: &mut CaptureSnapshot) {
        c.truncated = self.shared.truncated.load(Ordering::Relaxed);
        c.backpressure = self.shared.backpressure.load(Ordering::Relaxed);
    }

    fn finish(&mut self, _stats: &CaptureStats) -> CaptureExit {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.not_full.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let s = &self.shared;
        CaptureExit {
            backend: BackendExit {
                name: "socket",
                received: self.received,
                rcvbuf_bytes: self.rcvbuf_bytes,
                receiver_cpu_ns: Some(s.receiver_cpu_ns.load(Ordering::Relaxed)),
                decoder_cpu_ns: 0,
                link_changes: 0,
            },
            ..CaptureExit::default()
        }
    }
}

impl Drop for SocketSource {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.not_full.notify_all();
    }
}
