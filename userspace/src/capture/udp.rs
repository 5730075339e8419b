//! UDP sockets for the socket baselines: bound to the sensors' ports, with the receive buffer
//! (`SO_RCVBUF`, socket(7)) chosen on the command line.

use std::{
    io,
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::AsRawFd,
    str::FromStr,
};

use crate::sys::{sockopt, sysfs::rmem_max};

/// Requested receive buffer of a baseline socket (`lidarxdp run --rcvbuf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RcvBuf {
    /// Leave the kernel's default (`net.core.rmem_default`, 212,992 bytes on Debian 12).
    Default,
    /// The largest the system allows an unprivileged `SO_RCVBUF`: `net.core.rmem_max` as read
    /// from `/proc/sys/net/core/rmem_max` in the daemon's network namespace.
    Max,
    /// This many bytes (1..=1 GiB); above `rmem_max` it is set with `SO_RCVBUFFORCE`, which
    /// needs `CAP_NET_ADMIN`.
    Bytes(u32),
}

/// Largest accepted `--rcvbuf BYTES` (1 GiB; the kernel doubles it and caps at `INT_MAX`).
pub const RCVBUF_MAX_BYTES: u32 = 1 << 30;

/// A `--rcvbuf` value that is not `default`, `max` or a byte count in
/// 1..=`RCVBUF_MAX_BYTES` (2^30) ([`RcvBuf`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--rcvbuf {value:?}: expected `default`, `max` or bytes in 1..={RCVBUF_MAX_BYTES}")]
pub struct RcvBufError {
    /// The value as given.
    pub value: String,
}

impl FromStr for RcvBuf {
    type Err = RcvBufError;
    /// `default`, `max`, or a byte count in 1..=1073741824.
    fn from_str(s: &str) -> Result<Self, RcvBufError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "default" => Ok(RcvBuf::Default),
            "max" => Ok(RcvBuf::Max),
            n => match n.parse::<u32>() {
                Ok(b) if (1..=RCVBUF_MAX_BYTES).contains(&b) => Ok(RcvBuf::Bytes(b)),
                _ => Err(RcvBufError {
                    value: s.to_owned(),
                }),
            },
        }
    }
}

impl<'de> serde::Deserialize<'de> for RcvBuf {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u32),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => RcvBuf::from_str(&n.to_string()),
            Raw::S(s) => RcvBuf::from_str(&s),
        }
        .map_err(serde::de::Error::custom)
    }
}

/// How the baseline sockets are opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpSocketConfig {
    /// Local address to bind (usually `0.0.0.0`).
    pub bind: Ipv4Addr,
    /// UDP ports, one socket each (a sensor's data port and, for RoboSense, its DIFOP port).
    pub ports: Vec<u16>,
    /// Receive buffer.
    pub rcvbuf: RcvBuf,
    /// Largest datagram a receive buffer holds, bytes; longer ones are truncated, counted in
    /// [`super::CaptureSnapshot::truncated`] and dropped.
    pub max_datagram: usize,
}

fn setsockopt_int(sock: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    sockopt::set_int(sock.as_raw_fd(), libc::SOL_SOCKET, opt, v)
}

/// The socket's effective `SO_RCVBUF` in bytes (twice the value set, socket(7)).
///
/// Errors: `getsockopt(2)` failing.
pub fn rcvbuf_bytes(sock: &UdpSocket) -> io::Result<u64> {
    sockopt::get_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v.max(0) as u64)
}

/// Opens and binds one socket per port, applying the receive buffer; returns them with their
/// bound ports (port 0 binds an ephemeral port, for tests).
///
/// Errors: the bind (e.g. `EADDRINUSE`), reading `rmem_max`
/// ([`crate::sys::sysfs::rmem_max`]), or setting the buffer.
pub fn open(cfg: &UdpSocketConfig) -> io::Result<Vec<(UdpSocket, u16)>> {
    let mut out = Vec::with_capacity(cfg.ports.len());
    for &port in &cfg.ports {
        let sock = UdpSocket::bind(SocketAddrV4::new(cfg.bind, port))
            .map_err(|e| io::Error::new(e.kind(), format!("bind {}:{port}: {e}", cfg.bind)))?;
        match cfg.rcvbuf {
            RcvBuf::Default => {}
            RcvBuf::Max => {
                let max = rmem_max()?.min(i32::MAX as u32);
                setsockopt_int(&sock, libc::SO_RCVBUF, max as libc::c_int)?;
            }
            RcvBuf::Bytes(b) => {
                if setsockopt_int(&sock, libc::SO_RCVBUFFORCE, b as libc::c_int).is_err() {
                    log::warn!(
                        "--rcvbuf {b}: SO_RCVBUFFORCE refused (no CAP_NET_ADMIN); \
                         set with SO_RCVBUF, capped at net.core.rmem_max"
                    );
                    setsockopt_int(&sock, libc::SO_RCVBUF, b as libc::c_int)?;
                }
            }
        }
        let bound = sock.local_addr()?.port();
        out.push((sock, bound));
    }
    Ok(out)
}

/// Parses a `sockaddr_in` (family, port, address: socket(7), ip(7)) into the IPv4 source
/// address; `None` when shorter than 8 bytes or not `AF_INET`.
pub fn sockaddr_in_ip(raw: &[u8]) -> Option<[u8; 4]> {
    let fam = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
    if fam != libc::AF_INET as u16 {
        return None;
    }
    raw.get(4..8)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcvbuf_parses_and_refuses_out_of_range() {
        assert_eq!("default".parse(), Ok(RcvBuf::Default));
        assert_eq!("MAX".parse(), Ok(RcvBuf::Max));
        assert_eq!("425984".parse(), Ok(RcvBuf::Bytes(425_984)));
        let e = "0".parse::<RcvBuf>().unwrap_err().to_string();
        assert!(
            e.contains("--rcvbuf") && e.contains("1..=1073741824"),
            "{e}"
        );
        assert!("1073741825".parse::<RcvBuf>().is_err());
        assert!("lots".parse::<RcvBuf>().is_err());
    }

    #[test]
    fn sockaddr_in_source_address() {
        let mut raw = [0u8; 16];
        raw[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        raw[2..4].copy_from_slice(&2368u16.to_be_bytes());
        raw[4..8].copy_from_slice(&[10, 78, 0, 1]);
        assert_eq!(sockaddr_in_ip(&raw), Some([10, 78, 0, 1]));
        assert_eq!(sockaddr_in_ip(&raw[..7]), None);
        raw[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        assert_eq!(sockaddr_in_ip(&raw), None);
    }

    #[test]
    fn max_rcvbuf_is_applied_doubled() {
        let cfg = UdpSocketConfig {
            bind: Ipv4Addr::LOCALHOST,
            ports: vec![0],
            rcvbuf: RcvBuf::Max,
            max_datagram: 2048,
        };
        let socks = open(&cfg).unwrap();
        let want = u64::from(rmem_max().unwrap()) * 2;
        assert_eq!(rcvbuf_bytes(&socks[0].0).unwrap(), want);
    }
}
