//! The interface every capture backend implements, so the AF_XDP path and the socket baselines
//! share the decoder thread, the scan assembly and the publisher (issue 4): only the way packets
//! reach the decoder differs.

use std::{io, time::Duration};

use crate::capture::CaptureStats;
use lidarxdp_core::net::UdpDatagram;

/// How packets reach the decoder thread (`lidarxdp run --backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// AF_XDP: the XDP program redirects the sensors' packets into UMEM frames on hugepages,
    /// drained by the decoder thread without a syscall per packet ([`super::XdpSource`]).
    #[default]
    Xdp,
    /// The common driver design: a receive thread calls blocking `recvfrom(2)` once per
    /// packet and hands each packet, copied into its own buffer, to the decoder thread through
    /// a mutex-protected queue ([`super::SocketSource`]).
    Socket,
    /// Batched `recvmmsg(2)` on a non-blocking socket in the decoder thread itself, with
    /// `SO_RCVBUF` as large as the system allows ([`super::RecvmmsgSource`]).
    Recvmmsg,
    /// io_uring multishot `recvmsg` into a provided buffer ring ([`super::UringSource`]).
    Uring,
}

impl Backend {
    /// Lower-case name as on the command line (`xdp`, `socket`, `recvmmsg`, `uring`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Xdp => "xdp",
            Backend::Socket => "socket",
            Backend::Recvmmsg => "recvmmsg",
            Backend::Uring => "uring",
        }
    }
}

/// One received packet as a backend delivers it.
#[derive(Clone, Copy, Debug)]
pub enum Packet<'a> {
    /// A whole Ethernet frame (AF_XDP): the decoder thread parses Ethernet/IPv4 or IPv6/UDP
    /// itself ([`lidarxdp_core::net::parse_ip`]) and reassembles fragments of either family.
    Ethernet(&'a [u8]),
    /// A UDP datagram whose headers (and fragments) the kernel already handled. `dst_ip` is
    /// 0.0.0.0 (sockets bound to the wildcard address do not learn it without `IP_PKTINFO`).
    Udp(UdpDatagram<'a>),
}

/// A capture backend, driven by one decoder thread ([`super::CaptureWorker`]).
///
/// The decoder thread calls [`recv_burst`](Self::recv_burst) until it returns 0, then
/// [`on_idle`](Self::on_idle) and [`wait`](Self::wait), and [`finish`](Self::finish) once at
/// the end. Implementations must not block in `recv_burst`.
pub trait PacketSource {
    /// Hands up to `max` received packets to `f`, in arrival order; returns how many. The
    /// slices are valid only during the call of `f`.
    ///
    /// Errors: a receive syscall failing with anything but `EAGAIN`/`EINTR`.
    fn recv_burst(&mut self, max: u32, f: &mut dyn FnMut(Packet<'_>)) -> io::Result<usize>;

    /// Sleeps until a packet may be ready or `timeout` passed (spurious wake-ups allowed).
    ///
    /// Errors: the wait syscall failing with anything but a timeout or `EINTR`.
    fn wait(&mut self, timeout: Duration) -> io::Result<()>;

    /// Called when the source ran dry, before [`wait`](Self::wait): refresh the live counters
    /// in `stats` (AF_XDP: `XDP_STATISTICS`, at most every
    /// [`super::XDP_STATISTICS_PERIOD`]).
    fn on_idle(&mut self, _stats: &CaptureStats) {}

    /// Writes the counters the source keeps itself into `c` (`truncated`, `backpressure`);
    /// called by the capture thread each time it publishes its counters. The default keeps
    /// none.
    fn counters(&self, _c: &mut super::CaptureSnapshot) {}

    /// Stops the backend's own threads (if any) and reports its final counters. The decoder
    /// thread fills in [`BackendExit::decoder_cpu_ns`].
    fn finish(&mut self, stats: &CaptureStats) -> super::CaptureExit;
}

/// A backend's final report, written into `lidarxdp run --stats-json` as `backend`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendExit {
    /// [`Backend::name`].
    pub name: &'static str,
    /// Packets the backend handed to the decoder (Ethernet frames for AF_XDP, datagrams for
    /// the sockets).
    pub received: u64,
    /// Effective `SO_RCVBUF` of the socket(s) in bytes as `getsockopt(2)` reports it (the
    /// kernel doubles the requested value, socket(7)); `None` for AF_XDP.
    pub rcvbuf_bytes: Option<u64>,
    /// CPU time (user + system) of the thread(s) that receive packets, ns
    /// (`CLOCK_THREAD_CPUTIME_ID`). For AF_XDP, `recvmmsg` and `uring` this is the decoder
    /// thread itself; for `socket`, the receive threads.
    pub receiver_cpu_ns: Option<u64>,
    /// CPU time of the decoder thread, ns (`CLOCK_THREAD_CPUTIME_ID`).
    pub decoder_cpu_ns: u64,
    /// AF_XDP: carrier transitions of the interface while the socket was bound (the increase
    /// of sysfs `/sys/class/net/IF/carrier_changes`; `ip link set IF down` then `up` counts 2).
    /// The socket stays bound through them and keeps receiving (veth, copy mode; see
    /// `docs/deploy.md`, "Link down/up"). 0 for the socket backends, and when the daemon's
    /// `/sys` belongs to another network namespace than the interface.
    pub link_changes: u64,
}

/// CPU time consumed by the calling thread so far, ns (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`,
/// clock_gettime(2)); 0 if the clock cannot be read.
pub fn thread_cpu_ns() -> u64 {
    crate::sys::cpu::thread_cpu_ns().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let before = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > before);
    }

    #[test]
    fn backend_names_match_the_cli() {
        use clap::ValueEnum;
        for b in Backend::value_variants() {
            let pv = b.to_possible_value().unwrap();
            assert_eq!(pv.get_name(), b.name());
        }
    }
}
