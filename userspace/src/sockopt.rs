//! `setsockopt(2)` of an integer option, shared by the publisher's TCP sockets and the capture
//! baselines' UDP sockets.

use std::{io, os::fd::RawFd};

/// Sets the `c_int` option `name` at `level` (e.g. `SOL_SOCKET`/`SO_RCVBUF`,
/// `IPPROTO_TCP`/`TCP_NODELAY`) on `fd`.
///
/// Errors: the kernel's (`EPERM` for `SO_RCVBUFFORCE` without `CAP_NET_ADMIN`, `EBADF`, ...).
pub fn set_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
