//! The idle wait shared by the backends whose packets arrive on file descriptors (AF_XDP,
//! `recvmmsg`): one io_uring `IORING_OP_POLL_ADD` per fd, kept armed until it fires, and one
//! `io_uring_enter` with a timeout (`IORING_ENTER_EXT_ARG`, kernel 5.11+) that returns when any
//! fd is readable or the timeout passed. The thread neither spins nor sleeps blindly.

use std::{io, os::fd::RawFd, time::Duration};

use io_uring::{IoUring, opcode, types};

/// Poll-with-timeout on a fixed set of fds, in the order given to [`PollWaiter::wait`].
pub struct PollWaiter {
    ring: IoUring,
    /// Per fd: a poll request is in flight.
    armed: Vec<bool>,
}

impl PollWaiter {
    /// A waiter for `fds` file descriptors.
    ///
    /// Errors: `io_uring_setup(2)` failing (e.g. `ENOSYS`, or `EPERM` under a seccomp policy or
    /// `kernel.io_uring_disabled`).
    pub fn new(fds: usize) -> io::Result<Self> {
        Ok(Self {
            ring: IoUring::new(8.max((fds as u32 * 2).next_power_of_two()))?,
            armed: vec![false; fds],
        })
    }

    /// Arms a poll for every fd that has none in flight, then sleeps until one is readable or
    /// `timeout` passed. `fds` must be the same fds, in the same order, on every call, and must
    /// stay open while this waiter exists.
    ///
    /// Errors: the submission queue is full (more fds than at construction) or
    /// `io_uring_enter(2)` fails with anything but a timeout or `EINTR`.
    pub fn wait(&mut self, fds: &[RawFd], timeout: Duration) -> io::Result<()> {
        for (k, &fd) in fds.iter().enumerate() {
            if self.armed.get(k).copied().unwrap_or(true) {
                continue;
            }
            let sqe = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
                .build()
                .user_data(k as u64);
            // SAFETY: PollAdd references no user memory; the caller keeps the fd open while
            // this waiter (and so the ring holding the request) exists.
            unsafe { self.ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            self.armed[k] = true;
        }
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        for cqe in self.ring.completion() {
            if let Some(a) = self.armed.get_mut(cqe.user_data() as usize) {
                *a = false;
            }
        }
        Ok(())
    }
}
