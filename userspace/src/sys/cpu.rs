//! CPU placement and CPU time of the calling thread: `sched_setaffinity(2)`,
//! `clock_gettime(2)` with `CLOCK_THREAD_CPUTIME_ID`.

use std::io;

/// Pins the calling thread to CPU `cpu` (sched_setaffinity(2) with pid 0 and a one-CPU
/// `cpu_set_t`, CPU_SET(3)).
///
/// # Errors
/// `InvalidInput` when `cpu >= CPU_SETSIZE` (1024); the kernel's `EINVAL` when the CPU is
/// offline or outside the process's cpuset.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is not below CPU_SETSIZE {}", libc::CPU_SETSIZE),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array, for which all-zero is valid; CPU_ZERO/CPU_SET
    // write only inside it (`cpu` < CPU_SETSIZE, checked above); sched_setaffinity reads the
    // live set of the size passed, for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    super::cvt(rc).map(drop)
}

/// CPU time (user + system) consumed by the calling thread so far, in ns
/// (clock_gettime(2), `CLOCK_THREAD_CPUTIME_ID`).
///
/// # Errors
/// `EINVAL` when the clock is not supported.
pub fn thread_cpu_ns() -> io::Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec for the duration of the call.
    super::cvt(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) })?;
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_out_of_set_range_is_refused_before_the_call() {
        let e = pin_current_thread(libc::CPU_SETSIZE as usize).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("CPU 1024"), "{e}");
    }
}
