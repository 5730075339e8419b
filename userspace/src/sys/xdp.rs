//! AF_XDP socket syscalls (`Documentation/networking/af_xdp.rst`, `include/uapi/linux/if_xdp.h`):
//! the socket, its bind, and the RX wake-up. The `SOL_XDP` options go through
//! [`super::sockopt`]; the ring and UMEM memory is mapped and used in [`crate::xsk`].

use std::{
    io,
    mem::size_of,
    os::fd::{FromRawFd, OwnedFd, RawFd},
    ptr,
};

/// A new `AF_XDP` raw socket, close-on-exec (socket(2), af_xdp.rst "Usage").
///
/// # Errors
/// `EPERM` without `CAP_NET_RAW`; `EAFNOSUPPORT` on a kernel without `CONFIG_XDP_SOCKETS`.
pub fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let raw =
        super::cvt(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `raw` is a freshly created fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Binds AF_XDP socket `fd` to queue `queue` of interface `ifindex` with `sockaddr_xdp` flags
/// `flags` (`XDP_COPY`, `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`, ...), bind(2) and af_xdp.rst
/// "XDP_{COPY,ZEROCOPY} bind flags". Needs the UMEM registered and the fill, completion and RX
/// rings sized first.
///
/// # Errors
/// `EBUSY` (the queue is held by another socket), `EINVAL` (no such queue, or rings missing),
/// `EOPNOTSUPP` (zero-copy forced on a driver without it), `ENETDOWN`.
pub fn bind(fd: RawFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    // SAFETY: `sa` is a live, initialised sockaddr_xdp and the length passed is its size; the
    // kernel only reads it.
    let rc = unsafe {
        libc::bind(
            fd,
            (&raw const sa).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    super::cvt(rc).map(drop)
}

/// Kicks the driver to process the fill ring: `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL,
/// NULL)`, as af_xdp.rst "XDP_USE_NEED_WAKEUP bind flag" prescribes when the fill ring has
/// `XDP_RING_NEED_WAKEUP`.
///
/// # Errors
/// The kernel's (`EAGAIN`, `ENETDOWN`, `ENOBUFS` are expected and harmless).
pub fn wake_rx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length NULL buffer and NULL address/length are valid for recvfrom; for
    // AF_XDP it only kicks the driver (`xsk_recvmsg`) and writes no memory.
    let rc = unsafe {
        libc::recvfrom(
            fd,
            ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    super::cvt_size(rc).map(drop)
}
