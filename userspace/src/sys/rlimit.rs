//! Resource limits of the process: `getrlimit(2)`/`setrlimit(2)` for `RLIMIT_MEMLOCK`.

use std::io;

/// Bytes of memory the process may lock (`RLIMIT_MEMLOCK`, getrlimit(2)): `(soft, hard)`,
/// `u64::MAX` for `RLIM_INFINITY`.
///
/// # Errors
/// The kernel's error (none expected for this resource).
pub fn memlock() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable `struct rlimit` that outlives the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    super::cvt(rc)?;
    Ok((r.rlim_cur, r.rlim_max))
}

/// Sets the soft `RLIMIT_MEMLOCK` to the hard one (no privilege needed, setrlimit(2)) and
/// returns it: the most a subscriber process may lock to map zenoh's shared memory.
///
/// # Errors
/// The kernel's error (none expected).
pub fn memlock_to_hard() -> io::Result<u64> {
    let (_, hard) = memlock()?;
    let r = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: `r` is a valid `struct rlimit` read by the kernel during the call only.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &r) };
    super::cvt(rc)?;
    Ok(hard)
}
