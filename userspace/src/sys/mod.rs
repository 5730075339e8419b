//! The daemon's system layer: every raw `libc` call outside io_uring submission and the
//! memory shared with the kernel through mmapped rings (the AF_XDP rings and UMEM in
//! [`crate::xsk`], the provided-buffer ring of the `uring` baseline).
//!
//! Each function here is safe to call: it takes Rust types (slices, `&CStr`, plain structs),
//! returns `io::Result` with the `errno` of the failing call, and names its man page or kernel
//! document. The `unsafe` blocks inside each state the invariant they rely on (`// SAFETY:`).
//! File descriptors are passed as [`RawFd`](std::os::fd::RawFd): a descriptor that is not
//! open, or not a socket, makes the kernel answer `EBADF`/`ENOTSOCK`; memory safety never
//! depends on it.
//!
//! One module per concern:
//! - [`sockopt`]: `setsockopt(2)`/`getsockopt(2)`, one typed wrapper each;
//! - [`caps`]: `prctl(2)`, `capset(2)`, `initgroups(3)`, `setresuid(2)`/`setresgid(2)`,
//!   `getpwnam_r(3)`: what [`crate::privs`] needs to drop privileges;
//! - [`clock`]: `clock_gettime(2)` of CLOCK_MONOTONIC (every interval) and CLOCK_REALTIME
//!   (published stamps only): the one place the daemon reads the time;
//! - [`cpu`]: `sched_setaffinity(2)` and `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`;
//! - [`event`]: the eventfd(2) wake-up between threads;
//! - [`net`]: interface lookups (`if_nametoindex(3)`, `SIOCGIFMTU`, netdevice(7)), `poll(2)`,
//!   the batched `recvmmsg(2)` of the socket baseline, and the TCP socket queries of the
//!   publisher (`shutdown(2)`, `SIOCOUTQ`, `getpeername(2)`);
//! - [`xdp`]: the AF_XDP socket: `socket(AF_XDP)`, `bind(sockaddr_xdp)` and the RX wake-up
//!   (`Documentation/networking/af_xdp.rst`);
//! - [`malloc`]: glibc's `mallopt(3)` (keeping freed frame buffers in the process) and
//!   `mallinfo2(3)` (the heap in use and held free, for the metrics);
//! - [`process`]: the process's resident memory, threads and open descriptors (proc(5));
//! - [`rlimit`]: `getrlimit(2)`/`setrlimit(2)` of `RLIMIT_MEMLOCK` (zenoh's locked shared
//!   memory);
//! - [`sysfs`]: the procfs/sysfs files the daemon reads (`/sys/class/net/IF/*`,
//!   `net.core.rmem_max`, `kernel.cap_last_cap`).

pub mod caps;
pub mod clock;
pub mod cpu;
pub mod event;
pub mod malloc;
pub mod net;
pub mod process;
pub mod rlimit;
pub mod sockopt;
pub mod sysfs;
pub mod xdp;

use std::io;

/// A libc return value: `-1` (any negative) means failure with `errno` set.
fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// [`cvt`] for `ssize_t` results (byte and message counts).
fn cvt_size(rc: libc::ssize_t) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// `name` as a C string, or `InvalidInput` naming `what` when it contains a NUL byte.
fn c_string(what: &str, name: &str) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {name:?} contains a NUL byte"),
        )
    })
}
