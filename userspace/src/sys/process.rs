//! The process's own resource use as procfs states it (proc(5)): resident memory
//! (`/proc/self/status` `VmRSS`), threads (`/proc/self/task`) and open file descriptors
//! (`/proc/self/fd`). Each read is one small file or directory listing: call them at the
//! metrics period, not per packet.

use std::io;

/// Resident memory of the process, bytes: `VmRSS` of `/proc/self/status` (kB, i.e. KiB, as
/// proc(5) writes it), times 1024. It sums anonymous, file-backed and shared-memory pages
/// resident now (zenoh's locked pool counts once its pages are touched).
///
/// # Errors
/// The file cannot be read, or has no parsable `VmRSS` line (`InvalidData`).
pub fn resident_bytes() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    vm_rss_bytes(&status).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "/proc/self/status: no VmRSS line",
        )
    })
}

/// `VmRSS` of a `/proc/PID/status` text, bytes (`VmRSS:\t  1234 kB` is 1234 × 1024); `None`
/// when there is no such line or its value is not `N kB`.
pub fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kb.checked_mul(1024)
}

/// Threads of the process now: the entries of `/proc/self/task`.
///
/// # Errors
/// The directory cannot be listed.
pub fn threads() -> io::Result<u64> {
    Ok(std::fs::read_dir("/proc/self/task")?.count() as u64)
}

/// Open file descriptors of the process now: the entries of `/proc/self/fd`, less the one
/// the listing itself holds open while it reads the directory.
///
/// # Errors
/// The directory cannot be listed.
pub fn open_fds() -> io::Result<u64> {
    let n = std::fs::read_dir("/proc/self/fd")?.count() as u64;
    Ok(n.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tlidarxdp\nVmPeak:\t  99 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 1 kB\n";
        assert_eq!(vm_rss_bytes(status), Some(12345 * 1024));
        assert_eq!(vm_rss_bytes("Name:\tx\n"), None);
        assert_eq!(vm_rss_bytes("VmRSS:\t12 MB\n"), None);
        assert!(resident_bytes().unwrap() > 0);
    }

    /// A descriptor opened here is one more in the count, and one fewer once closed (other
    /// tests open and close descriptors meanwhile, so the difference is checked over several
    /// tries until one sees it undisturbed).
    #[test]
    fn open_fds_counts_a_new_descriptor() {
        let seen = (0..100).any(|_| {
            let before = open_fds().unwrap();
            let f = std::fs::File::open("/proc/self/status").unwrap();
            let during = open_fds().unwrap();
            drop(f);
            let after = open_fds().unwrap();
            during == before + 1 && after == before
        });
        assert!(seen);
        assert!(threads().unwrap() >= 1);
    }
}
