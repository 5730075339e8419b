//! Wake-ups between threads through an eventfd (eventfd(2)): a 64-bit counter the kernel keeps,
//! readable (and pollable, e.g. by io_uring) while it is non-zero.

use std::{
    io,
    os::fd::{FromRawFd, OwnedFd, RawFd},
};

/// A new eventfd with counter 0, non-blocking and close-on-exec (`EFD_NONBLOCK |
/// EFD_CLOEXEC`, eventfd(2)).
///
/// # Errors
/// `EMFILE`/`ENFILE` (no fd left), `ENOMEM`.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let raw = super::cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `raw` is a freshly created fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Adds `n` (at most `u64::MAX - 1`) to eventfd `fd`'s counter: one 8-byte `write(2)`.
///
/// # Errors
/// `EAGAIN` when the counter would overflow (a non-blocking eventfd; a wake-up is then
/// pending anyway), `EINVAL` for `n == u64::MAX`, `EBADF`.
pub fn eventfd_add(fd: RawFd, n: u64) -> io::Result<()> {
    // SAFETY: writes 8 bytes from a live u64; the kernel only reads them.
    let rc = unsafe { libc::write(fd, (&raw const n).cast(), 8) };
    super::cvt_size(rc).map(drop)
}

/// Reads and resets eventfd `fd`'s counter: one 8-byte `read(2)`; returns the value.
///
/// # Errors
/// `EAGAIN` when the counter is 0 (a non-blocking eventfd), `EBADF`.
pub fn eventfd_take(fd: RawFd) -> io::Result<u64> {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live, writable u64.
    let rc = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
    super::cvt_size(rc).map(|_| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn counter_adds_up_and_resets() {
        let fd = eventfd().unwrap();
        let e = eventfd_take(fd.as_raw_fd()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        eventfd_add(fd.as_raw_fd(), 1).unwrap();
        eventfd_add(fd.as_raw_fd(), 2).unwrap();
        assert_eq!(eventfd_take(fd.as_raw_fd()).unwrap(), 3);
        assert!(eventfd_take(fd.as_raw_fd()).is_err());
    }
}
