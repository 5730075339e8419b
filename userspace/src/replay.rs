//! Replays the UDP payloads of a pcap capture to a UDP address, at recorded timing, a fixed
//! packet rate, or as fast as possible.
//!
//! Pacing uses an absolute schedule against the monotonic clock: packet *i* is due at
//! `start + offset_i` (recorded offset, or `i / pps`), never at "previous send + gap", so send
//! jitter and sleep overshoot do not accumulate into drift. The sender sleeps until ~100 µs
//! before the deadline and spins the rest, which keeps per-packet error in the microseconds.
//! If the sender falls more than 1 ms behind the schedule it logs a warning (at most once a
//! second) and catches up by sending late packets back to back.
//!
//! Datagrams larger than the path MTU (Ouster lidar packets, 3–25 KB) are fragmented by the
//! kernel, never refused: see [`allow_fragmentation`].
//!
//! Captures are read with [`crate::offline::CaptureReader`], the same reader and frame parser
//! ([`lidarxdp_core::net`]) as `decode`: classic pcap and pcapng; Ethernet (VLAN tags), Linux cooked
//! (SLL, SLL2) and raw-IP link types; IPv4 fragments (captures of Ouster sensors recorded on a
//! 1500-byte MTU link) reassembled and sent as whole datagrams, timed at their last fragment.
//! Records that yield no datagram are counted as skipped.

use std::fmt;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::offline::{CaptureReader, DatagramFilter, OfflineError};
use thiserror::Error;

/// Sending rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// The capture's recorded inter-packet timing.
    Realtime,
    /// A fixed number of datagrams per second.
    Pps(u32),
    /// As fast as the socket accepts them.
    Max,
}

/// A rate that is not `realtime`, `max` or packets per second in 1..=4294967295 ([`Rate`]'s
/// `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rate {value:?}: expected `realtime`, `max` or packets per second (1..=4294967295)")]
pub struct RateError {
    /// The value as given.
    pub value: String,
}

impl FromStr for Rate {
    type Err = RateError;
    /// `realtime`, `max`, or a positive integer (packets per second).
    fn from_str(s: &str) -> Result<Self, RateError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "realtime" | "real" => Ok(Rate::Realtime),
            "max" => Ok(Rate::Max),
            n => match n.trim_end_matches("pps").parse::<u32>() {
                Ok(p) if p > 0 => Ok(Rate::Pps(p)),
                _ => Err(RateError {
                    value: s.to_owned(),
                }),
            },
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Realtime => f.write_str("realtime"),
            Rate::Pps(p) => write!(f, "{p}"),
            Rate::Max => f.write_str("max"),
        }
    }
}

/// What to replay, where, and how fast.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// Capture file (classic pcap or pcapng).
    pub pcap: PathBuf,
    /// Destination of the datagrams. Port 0 keeps each datagram's recorded destination port
    /// (so a sensor's data and calibration ports, e.g. RoboSense MSOP 6699 and DIFOP 7788,
    /// are replayed as recorded).
    pub to: SocketAddr,
    /// Sending rate.
    pub rate: Rate,
    /// Times to send the capture; 0 is treated as 1. With [`Rate::Realtime`], each loop starts
    /// one average inter-packet gap after the previous one's last packet.
    pub loops: u32,
    /// Only send datagrams whose UDP destination port in the capture equals this.
    pub udp_port_filter: Option<u16>,
}

/// Outcome of [`replay`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Datagrams sent.
    pub sent: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Time from the schedule's start (the first send) to after the last send.
    pub elapsed: Duration,
    /// Wall-clock time (CLOCK_REALTIME) of the schedule's start, ns since the Unix epoch: datagram
    /// *i* is due at this time plus its offset (to compare with receive timestamps).
    pub start_unix_ns: u64,
    /// Datagrams sent more than 1 ms after their scheduled time.
    pub late: u64,
    /// Largest lateness behind the schedule.
    pub max_lag: Duration,
    /// Sends that failed with a transient error (e.g. `ECONNREFUSED` from an earlier ICMP
    /// port-unreachable, `ENOBUFS`) and were skipped.
    pub send_errors: u64,
    /// Records skipped: not IPv4/UDP, truncated, fragments of a datagram that could not be
    /// reassembled, or filtered out by port.
    pub skipped: u64,
}

/// A replay failure.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The capture could not be opened.
    #[error("open {path}: {source}")]
    Open {
        /// File.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// The capture is not valid pcap/pcapng.
    #[error("read {path}: {source}")]
    Pcap {
        /// File.
        path: PathBuf,
        /// Cause.
        source: pcap_file::PcapError,
    },
    /// Socket setup or a non-transient send error.
    #[error("UDP socket to {to}: {source}")]
    Socket {
        /// Destination.
        to: SocketAddr,
        /// Cause.
        source: io::Error,
    },
}

/// One UDP datagram from a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedDatagram {
    /// Record time (since the Unix epoch, as stored in the capture).
    pub timestamp: Duration,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP payload.
    pub payload: Vec<u8>,
}

/// Reads the UDP/IPv4 datagrams of a capture, in file order (a fragmented datagram at the
/// position of its last fragment, reassembled), with [`CaptureReader`]. Returns them and the
/// number of records skipped (every reason of [`crate::offline::SkipCounts`], including
/// datagrams not matching `dst_port_filter`).
///
/// # Errors
/// [`ReplayError::Open`] when the file cannot be opened or read, [`ReplayError::Pcap`] when it
/// is not pcap/pcapng or a record is damaged.
pub fn read_udp_datagrams(
    path: &Path,
    dst_port_filter: Option<u16>,
) -> Result<(Vec<CapturedDatagram>, u64), ReplayError> {
    let err = |e: OfflineError| match e {
        OfflineError::Pcap { path, source } => ReplayError::Pcap { path, source },
        OfflineError::Io { path, source } => ReplayError::Open { path, source },
        other => ReplayError::Open {
            path: path.to_owned(),
            source: io::Error::other(other.to_string()),
        },
    };
    let mut reader = CaptureReader::open(
        path,
        DatagramFilter {
            port: dst_port_filter,
            source: None,
        },
    )
    .map_err(err)?;
    let mut out = Vec::new();
    for d in reader.by_ref() {
        let d = d.map_err(err)?;
        out.push(CapturedDatagram {
            timestamp: Duration::from_nanos(d.ts_ns),
            src_port: d.src_port,
            dst_port: d.dst_port,
            payload: d.payload,
        });
    }
    Ok((out, reader.skipped()))
}

/// Sends the capture's UDP payloads to `cfg.to` from an ephemeral UDP socket.
///
/// The whole capture is loaded into memory first, so file reading never disturbs the pacing.
pub fn replay(cfg: &ReplayConfig) -> Result<ReplayStats, ReplayError> {
    let (datagrams, skipped) = read_udp_datagrams(&cfg.pcap, cfg.udp_port_filter)?;
    if datagrams.is_empty() {
        log::warn!(
            "replay: {} has no matching IPv4/UDP datagrams",
            cfg.pcap.display()
        );
    }
    let sock_err = |source| ReplayError::Socket { to: cfg.to, source };
    let bind: SocketAddr = if cfg.to.is_ipv4() {
        "0.0.0.0:0".parse()
    } else {
        "[::]:0".parse()
    }
    .expect("literal address");
    let sock = UdpSocket::bind(bind).map_err(sock_err)?;
    if cfg.to.is_ipv4() {
        allow_fragmentation(&sock).map_err(sock_err)?;
    }
    let keep_ports = cfg.to.port() == 0;
    if !keep_ports {
        sock.connect(cfg.to).map_err(sock_err)?;
    }
    let schedule = Schedule::new(cfg.rate, &datagrams);
    let loops = cfg.loops.max(1);
    let mut stats = ReplayStats {
        skipped,
        ..ReplayStats::default()
    };
    let mut last_warn: Option<Instant> = None;
    let start = Instant::now();
    stats.start_unix_ns = crate::sys::clock::realtime_ns();
    let mut i: u64 = 0;
    for l in 0..loops {
        for (j, d) in datagrams.iter().enumerate() {
            if let Some(due) = schedule.offset(l, j, i) {
                let due = start + due;
                let lag = wait_until(due);
                if lag > Duration::from_millis(1) {
                    stats.late += 1;
                    if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        last_warn = Some(Instant::now());
                        log::warn!(
                            "replay: {:.3} ms behind schedule at datagram {i}",
                            lag.as_secs_f64() * 1e3
                        );
                    }
                }
                stats.max_lag = stats.max_lag.max(lag);
            }
            let dest = keep_ports.then(|| SocketAddr::new(cfg.to.ip(), d.dst_port));
            match send(&sock, dest, &d.payload) {
                Ok(()) => {
                    stats.sent += 1;
                    stats.bytes += d.payload.len() as u64;
                }
                Err(e) if transient(&e) => {
                    stats.send_errors += 1;
                    log::debug!("replay: send: {e}");
                }
                Err(e) => return Err(sock_err(e)),
            }
            i += 1;
        }
    }
    stats.elapsed = start.elapsed();
    if stats.late > 0 {
        log::warn!(
            "replay: {} of {} datagrams were > 1 ms late (max {:.3} ms)",
            stats.late,
            stats.sent,
            stats.max_lag.as_secs_f64() * 1e3
        );
    }
    Ok(stats)
}

/// Makes the kernel fragment datagrams larger than the path MTU, as a sensor does, instead of
/// failing with `EMSGSIZE`: sets `IP_MTU_DISCOVER` to `IP_PMTUDISC_DONT` (ip(7)), so DF is never
/// set and path-MTU discovery never makes a send fail. Linux's usual default
/// (`IP_PMTUDISC_WANT`) also fragments, but the default is a sysctl
/// (`net.ipv4.ip_no_pmtu_disc`) and a socket policy can differ; setting it makes replaying Ouster
/// datagrams (3–25 KB) over a 1500-byte MTU independent of both. IPv4 sockets only.
///
/// Errors: the `setsockopt` failure.
pub fn allow_fragmentation(sock: &UdpSocket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    crate::sys::sockopt::set_int(
        sock.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DONT,
    )
}

fn send(sock: &UdpSocket, to: Option<SocketAddr>, payload: &[u8]) -> io::Result<()> {
    loop {
        let sent = match to {
            Some(addr) => sock.send_to(payload, addr),
            None => sock.send(payload),
        };
        match sent {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::ENOBUFS
                | libc::EAGAIN
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
        )
    )
}

/// Sleeps until ~100 µs before `due`, then spins; returns how late we are at return.
fn wait_until(due: Instant) -> Duration {
    const SPIN: Duration = Duration::from_micros(100);
    let now = Instant::now();
    if now >= due {
        return now - due;
    }
    if due - now > SPIN {
        std::thread::sleep(due - now - SPIN);
    }
    loop {
        let now = Instant::now();
        if now >= due {
            return now - due;
        }
        std::hint::spin_loop();
    }
}

/// Per-datagram send offsets from the replay start.
enum Schedule {
    Max,
    Pps(u32),
    /// Recorded offsets from the first datagram, and the period of one loop.
    Recorded {
        offsets: Vec<Duration>,
        period: Duration,
    },
}

impl Schedule {
    fn new(rate: Rate, d: &[CapturedDatagram]) -> Self {
        match rate {
            Rate::Max => Schedule::Max,
            Rate::Pps(p) => Schedule::Pps(p.max(1)),
            Rate::Realtime => {
                let t0 = d.first().map_or(Duration::ZERO, |x| x.timestamp);
                // Non-monotonic record times (re-ordered captures) are clamped, never negative.
                let mut last = Duration::ZERO;
                let offsets: Vec<Duration> = d
                    .iter()
                    .map(|x| {
                        last = last.max(x.timestamp.saturating_sub(t0));
                        last
                    })
                    .collect();
                let span = offsets.last().copied().unwrap_or_default();
                let gap = if offsets.len() > 1 {
                    span / (offsets.len() as u32 - 1)
                } else {
                    Duration::ZERO
                };
                Schedule::Recorded {
                    offsets,
                    period: span + gap,
                }
            }
        }
    }

    /// Offset of datagram `j` of loop `l` (`i` overall), or `None` for "now".
    fn offset(&self, l: u32, j: usize, i: u64) -> Option<Duration> {
        match self {
            Schedule::Max => None,
            Schedule::Pps(p) => {
                let ns = u128::from(i) * 1_000_000_000 / u128::from(*p);
                Some(Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64))
            }
            Schedule::Recorded { offsets, period } => Some(*period * l + offsets[j]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth_udp(vlan: bool, payload: &[u8], frag: u16) -> Vec<u8> {
        let mut v = vec![0xff; 12];
        if vlan {
            v.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        v.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 8 + payload.len()) as u16;
        v.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            (frag >> 8) as u8,
            frag as u8,
            64,
            17,
            0,
            0,
        ]);
        v.extend_from_slice(&[192, 168, 1, 201, 192, 168, 1, 100]);
        let ul = (8 + payload.len()) as u16;
        v.extend_from_slice(&[0x09, 0x40, 0x09, 0x40, (ul >> 8) as u8, ul as u8, 0, 0]);
        v.extend_from_slice(payload);
        v.extend_from_slice(&[0, 0, 0, 0]); // Ethernet padding / FCS must be ignored
        v
    }

    /// Ethernet + IPv4 fragment (id, flags/offset field) carrying `ip_payload`.
    fn eth_frag(id: u16, frag: u16, ip_payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0xff; 12];
        v.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        v.extend_from_slice(&((20 + ip_payload.len()) as u16).to_be_bytes());
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(&frag.to_be_bytes());
        v.extend_from_slice(&[64, 17, 0, 0, 192, 168, 1, 201, 192, 168, 1, 100]);
        v.extend_from_slice(ip_payload);
        v
    }

    #[test]
    fn fragmented_records_are_reassembled() {
        // Datagram A: 3000 payload bytes to port 7502, fragments 1480 + 1480 + 48 recorded out of
        // order; B: a whole datagram to 2368; C: only the first of two fragments.
        let a_payload: Vec<u8> = (0..3000u32).map(|i| (i % 253) as u8).collect();
        let mut a = vec![0x1d, 0x4e, 0x1d, 0x4e, 0x0b, 0xc0, 0, 0]; // length 3008
        a.extend_from_slice(&a_payload);
        let b = eth_udp(false, b"whole", 0);
        let mut c = vec![0x1d, 0x4e, 0x1d, 0x4e, 0x07, 0xd0, 0, 0]; // length 2000
        c.resize(2000, 7);
        let records: Vec<(u64, Vec<u8>)> = vec![
            (1, eth_frag(5, 370, &a[2960..])),              // offset 2960, last
            (2, eth_frag(5, 0x2000, &a[..1480])),           // offset 0, MF
            (3, eth_frag(9, 0x2000, &c[..1480])),           // C's first fragment only
            (4, eth_frag(5, 0x2000 | 185, &a[1480..2960])), // offset 1480, MF
            (5, b),
        ];
        let path =
            std::env::temp_dir().join(format!("lidarxdp-replay-frag-{}.pcap", std::process::id()));
        {
            let mut w =
                pcap_file::pcap::PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
            for (ms, data) in &records {
                let p = pcap_file::pcap::PcapPacket::new(
                    Duration::from_millis(*ms),
                    data.len() as u32,
                    data,
                );
                w.write_packet(&p).unwrap();
            }
        }
        let (all, skipped) = read_udp_datagrams(&path, None).unwrap();
        assert_eq!(skipped, 1, "C's lone fragment");
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].timestamp, all[0].dst_port, all[0].payload.as_slice()),
            (Duration::from_millis(4), 7502, a_payload.as_slice())
        );
        assert_eq!(
            (all[1].dst_port, all[1].payload.as_slice()),
            (2368, &b"whole"[..])
        );
        let (only, skipped) = read_udp_datagrams(&path, Some(2368)).unwrap();
        assert_eq!(
            (only.len(), skipped),
            (1, 4),
            "A's 3 fragments filtered, C's skipped"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn replay_socket_lets_the_kernel_fragment() {
        use std::os::fd::AsRawFd;
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        allow_fragmentation(&sock).unwrap();
        let val =
            crate::sys::sockopt::get_int(sock.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
                .unwrap();
        assert_eq!(val, libc::IP_PMTUDISC_DONT);
    }

    #[test]
    fn rate_parses() {
        assert_eq!("realtime".parse::<Rate>(), Ok(Rate::Realtime));
        assert_eq!("MAX".parse::<Rate>(), Ok(Rate::Max));
        assert_eq!("1000".parse::<Rate>(), Ok(Rate::Pps(1000)));
        assert!("0".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
    }

    #[test]
    fn schedules_are_absolute() {
        let d: Vec<CapturedDatagram> = [10u64, 11, 13, 12]
            .iter()
            .map(|&ms| CapturedDatagram {
                timestamp: Duration::from_millis(ms),
                src_port: 1,
                dst_port: 2,
                payload: vec![],
            })
            .collect();
        let s = Schedule::new(Rate::Realtime, &d);
        let ms = |l, j| s.offset(l, j, 0).unwrap().as_millis();
        assert_eq!([ms(0, 0), ms(0, 1), ms(0, 2), ms(0, 3)], [0, 1, 3, 3]);
        assert_eq!(ms(1, 0), 4); // period = span 3 + mean gap 1
        let s = Schedule::new(Rate::Pps(3), &d);
        assert_eq!(s.offset(0, 0, 3).unwrap(), Duration::from_secs(1));
        assert_eq!(
            s.offset(0, 0, 1).unwrap(),
            Duration::from_nanos(333_333_333)
        );
    }
}
