//! Network interfaces and batched UDP receive: `if_nametoindex(3)`, the `SIOCGIFMTU` ioctl
//! (netdevice(7)), `poll(2)` and `recvmmsg(2)`.
//!
//! Interface lookups use the calling thread's network namespace (unlike `/sys/class/net`,
//! which shows the namespace sysfs was mounted in).

use std::{
    io,
    net::{Ipv4Addr, SocketAddrV4},
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    time::Duration,
};

/// The index of interface `ifname` (if_nametoindex(3)).
///
/// # Errors
/// `InvalidInput` for a name with a NUL byte; `ENODEV` when there is no such interface in this
/// network namespace.
pub fn if_nametoindex(ifname: &str) -> io::Result<u32> {
    let c = super::c_string("interface name", ifname)?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(idx)
}

/// The MTU of interface `ifname` in bytes: the largest IP packet it sends or receives, without
/// the Ethernet header (`SIOCGIFMTU` on a throwaway `AF_INET` datagram socket, netdevice(7)).
///
/// # Errors
/// `InvalidInput` for a name with a NUL byte or longer than `IFNAMSIZ - 1` (15) bytes;
/// `ENODEV` when there is no such interface in this network namespace.
pub fn if_mtu(ifname: &str) -> io::Result<u32> {
    let name = ifname.as_bytes();
    if name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "interface name {ifname:?}: 1..={} bytes without NUL",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    // SAFETY: plain syscall with constant arguments.
    let raw = super::cvt(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `raw` is a freshly created fd that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `ifreq` is plain data (a name array and a union of integers/sockaddrs), for
    // which all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &s) in req.ifr_name.iter_mut().zip(name) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name (zero-filled past it, shorter than
    // IFNAMSIZ) and writes one c_int into the union of the live `req`.
    super::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU as _, &raw mut req) })?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the `ifru_mtu` member; every union
    // member is plain data, so reading it is valid in any case.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// Waits up to `timeout` (millisecond resolution, capped at `i32::MAX` ms) for `fd` to become
/// readable (poll(2) with `POLLIN`). Returns whether it is; `EINTR` counts as not readable.
///
/// # Errors
/// The kernel's, e.g. `ENOMEM`.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one live, writable pollfd and the count 1.
    match super::cvt(unsafe { libc::poll(&mut pfd, 1, ms) }) {
        Ok(n) => Ok(n > 0 && pfd.revents & libc::POLLIN != 0),
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Bytes in TCP socket `fd`'s send queue: sent but not yet acknowledged, plus not yet sent
/// (`SIOCOUTQ`, tcp(7)).
///
/// # Errors
/// `EINVAL` for a listening socket, `EBADF`, `ENOTTY` (not a socket).
pub fn send_queue_len(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (= TIOCOUTQ) writes one c_int into the live `n`.
    super::cvt(unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &raw mut n) })?;
    Ok(n.max(0) as usize)
}

/// The receive state of `recvmmsg(2)` for IPv4 UDP sockets: `count` buffers of `slot` bytes
/// back to back, one `sockaddr_in`, `iovec` and `mmsghdr` each, allocated once.
///
/// The header array points into the buffers; the allocations are never resized, so the
/// pointers stay valid when the value moves.
pub struct RecvBatch {
    bufs: Vec<u8>,
    slot: usize,
    names: Vec<libc::sockaddr_in>,
    /// Referenced by `msgs`; never read directly.
    _iovecs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside `_iovecs`/`msgs` point into `bufs`/`names`/`_iovecs`, heap
// allocations owned by the same value that do not move with it; nothing is shared with
// another owner, so moving the batch to another thread is sound.
unsafe impl Send for RecvBatch {}

/// One message of a [`RecvBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    /// The datagram's bytes (at most the slot size).
    pub payload: &'a [u8],
    /// The datagram did not fit the slot (`MSG_TRUNC`, or it filled the slot exactly).
    pub truncated: bool,
    /// The sender (IPv4 address and port, from the `sockaddr_in`).
    pub source: SocketAddrV4,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("count", &self.msgs.len())
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl RecvBatch {
    /// `count` (at least 1) slots of `slot` bytes. A datagram is delivered whole when it is
    /// shorter than `slot`: make `slot` one byte more than the largest accepted datagram.
    pub fn new(count: usize, slot: usize) -> Self {
        let count = count.max(1);
        let slot = slot.max(1);
        let mut bufs = vec![0u8; slot * count];
        // SAFETY: sockaddr_in is plain data; all-zero bytes are a valid value.
        let mut names: Vec<libc::sockaddr_in> = vec![unsafe { std::mem::zeroed() }; count];
        let mut iovecs: Vec<libc::iovec> = bufs
            .chunks_exact_mut(slot)
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: slot,
            })
            .collect();
        let msgs = names
            .iter_mut()
            .zip(iovecs.iter_mut())
            .map(|(name, iov)| {
                // SAFETY: mmsghdr is plain data; all-zero is valid (null pointers, zero
                // lengths).
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = (name as *mut libc::sockaddr_in).cast();
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        Self {
            bufs,
            slot,
            names,
            _iovecs: iovecs,
            msgs,
        }
    }

    /// Slots in the batch.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// One `recvmmsg(fd, .., min(max, capacity), MSG_DONTWAIT, NULL)` (recvmmsg(2)); returns
    /// the number of messages received, readable with [`RecvBatch::get`] until the next call.
    ///
    /// # Errors
    /// The kernel's: `EAGAIN` when nothing is queued, `EINTR`, `EBADF`, ...
    pub fn recv(&mut self, fd: RawFd, max: usize) -> io::Result<usize> {
        let want = max.min(self.msgs.len());
        for m in &mut self.msgs[..want] {
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: `msgs[..want]` are initialised mmsghdrs whose name and iovec pointers point
        // into `names`, `_iovecs` and `bufs`, owned by `self`, alive and not otherwise
        // borrowed during the call (`&mut self`); each iovec covers exactly its slot. A null
        // timeout means none.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        super::cvt(r).map(|n| n as usize)
    }

    /// Message `i` of the last [`RecvBatch::recv`] (`i` below what it returned).
    ///
    /// # Panics
    /// When `i >= capacity()`.
    pub fn get(&self, i: usize) -> Received<'_> {
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(self.slot);
        let name = &self.names[i];
        Received {
            payload: &self.bufs[i * self.slot..i * self.slot + len],
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len >= self.slot,
            source: SocketAddrV4::new(
                Ipv4Addr::from(name.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(name.sin_port),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_lookups() {
        assert_eq!(if_nametoindex("lo").unwrap(), 1);
        assert_eq!(if_mtu("lo").unwrap(), 65536);
        let e = if_mtu("lxdp-no-such0").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
        let e = if_nametoindex("lxdp-no-such0").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
        assert_eq!(
            if_mtu("sixteen-bytes-xx").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn tcp_send_queue_len() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(send_queue_len(s.as_raw_fd()).unwrap(), 0);
        drop(c);
        assert_eq!(
            send_queue_len(l.as_raw_fd()).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn batch_receives_whole_and_truncated_datagrams() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        tx.send(b"abc").unwrap();
        tx.send(b"0123456789").unwrap();
        let mut b = RecvBatch::new(4, 8);
        assert!(poll_readable(rx.as_raw_fd(), Duration::from_secs(5)).unwrap());
        let mut got = Vec::new();
        while got.len() < 2 {
            let n = b.recv(rx.as_raw_fd(), 4).unwrap();
            for i in 0..n {
                let m = b.get(i);
                got.push((m.payload.to_vec(), m.truncated, m.source.port()));
            }
        }
        let port = tx.local_addr().unwrap().port();
        assert_eq!(
            got,
            vec![
                (b"abc".to_vec(), false, port),
                (b"01234567".to_vec(), true, port)
            ]
        );
        let e = b.recv(rx.as_raw_fd(), 4).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    }
}
