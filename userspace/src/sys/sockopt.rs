//! Socket options: `setsockopt(2)` and `getsockopt(2)` (socket(7), ip(7), tcp(7), and
//! `SOL_XDP` in `include/uapi/linux/if_xdp.h` / `Documentation/networking/af_xdp.rst`).
//!
//! One typed wrapper each ([`set`], [`get`]) over any [`Plain`] value; [`set_int`] and
//! [`get_int`] are the `c_int` shorthands most options use.

use std::{io, mem::size_of, os::fd::RawFd};

/// A plain-data option value: a `repr(C)` struct of integers (or an integer) for which every
/// bit pattern, all-zero included, is a valid value, and which has no padding the kernel could
/// leave uninitialised that Rust would then read.
///
/// # Safety
/// Implement only for such types; [`get`] starts from an all-zero value and lets the kernel
/// overwrite any prefix of its bytes.
pub unsafe trait Plain: Copy {}

// SAFETY: an integer: every bit pattern is valid.
unsafe impl Plain for libc::c_int {}
// SAFETY: an integer: every bit pattern is valid.
unsafe impl Plain for u32 {}
// SAFETY: `struct timeval`: two integers (`time_t`, `suseconds_t`) of the same width, no
// padding.
unsafe impl Plain for libc::timeval {}
// SAFETY: `struct xdp_umem_reg` (if_xdp.h): u64, u64, u32, u32, u32, u32 — integers only, no
// padding (8 + 8 + 4 * 4 = 32 bytes, 8-aligned).
unsafe impl Plain for libc::xdp_umem_reg {}
// SAFETY: `struct xdp_mmap_offsets`: four `xdp_ring_offset`s of four u64 each — integers only.
unsafe impl Plain for libc::xdp_mmap_offsets {}
// SAFETY: `struct xdp_options`: one u32.
unsafe impl Plain for libc::xdp_options {}
// SAFETY: `struct xdp_statistics`: six u64 — integers only.
unsafe impl Plain for libc::xdp_statistics {}

/// Sets option `name` at `level` (e.g. `SOL_SOCKET`/`SO_RCVBUF`, `SOL_XDP`/`XDP_UMEM_REG`) on
/// socket `fd` to `value`, passing `size_of::<T>()` as the option length (setsockopt(2)).
///
/// # Errors
/// The kernel's: `EBADF`/`ENOTSOCK` (not a socket), `ENOPROTOOPT` (unknown option), `EINVAL`
/// (bad length or value), `EPERM` (e.g. `SO_RCVBUFFORCE` without `CAP_NET_ADMIN`), `ENOMEM`/
/// `ENOBUFS` (`XDP_UMEM_REG` failing to pin pages).
pub fn set<T: Plain>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live, initialised T and the length passed is exactly its
    // size; the kernel only reads it during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    super::cvt(rc).map(drop)
}

/// Reads option `name` at `level` of socket `fd` into a zero-initialised `T`
/// (getsockopt(2)); returns it and the length the kernel wrote (shorter than `T` for older
/// kernels' versions of a struct, e.g. `XDP_MMAP_OFFSETS` before Linux 5.4; the rest stays
/// zero).
///
/// # Errors
/// The kernel's: `EBADF`/`ENOTSOCK`, `ENOPROTOOPT`, `EINVAL`.
pub fn get<T: Plain>(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<(T, usize)> {
    // SAFETY: `T: Plain`: the all-zero bit pattern is a valid T.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live, writable T of `len` bytes; the kernel writes at most `len`
    // bytes into it and stores the written length in `len` (a live socklen_t).
    let rc = unsafe { libc::getsockopt(fd, level, name, (&raw mut value).cast(), &mut len) };
    super::cvt(rc)?;
    Ok((value, (len as usize).min(size_of::<T>())))
}

/// [`set`] of a `c_int` option (`SO_RCVBUF`, `TCP_NODELAY`, `IP_MTU_DISCOVER`, ...).
///
/// # Errors
/// As [`set`].
pub fn set_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    set(fd, level, name, &value)
}

/// [`get`] of a `c_int` option (`SO_RCVBUF`, `SO_ERROR`, `IP_MTU_DISCOVER`, ...).
///
/// # Errors
/// As [`get`].
pub fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    get(fd, level, name).map(|(v, _)| v)
}

/// Sets the send timeout `SO_SNDTIMEO` (socket(7)) of socket `fd`: a blocking `send`/`write`
/// that can make no progress for `timeout` returns what it wrote so far, or fails with
/// `EAGAIN` (`io::ErrorKind::WouldBlock`) when it wrote nothing. Rounded to microseconds;
/// `Duration::ZERO` means no timeout (the default).
///
/// Set on a listening TCP socket, Linux copies it into every connection accepted from it
/// (unlike `SO_RCVTIMEO`, it does not also bound `accept(2)` itself).
///
/// # Errors
/// As [`set`]; `EDOM` when `timeout` is too large for the kernel's jiffies.
pub fn set_send_timeout(fd: RawFd, timeout: std::time::Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    set(fd, libc::SOL_SOCKET, libc::SO_SNDTIMEO, &tv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn int_option_round_trips_and_errors_carry_errno() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = s.as_raw_fd();
        set_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DONT,
        )
        .unwrap();
        assert_eq!(
            get_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER).unwrap(),
            libc::IP_PMTUDISC_DONT
        );
        assert_eq!(get_int(fd, libc::SOL_SOCKET, libc::SO_ERROR).unwrap(), 0);
        let e = get_int(-1, libc::SOL_SOCKET, libc::SO_ERROR).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        let e = set_int(fd, libc::SOL_SOCKET, 0x7fff, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOPROTOOPT));
    }
}
