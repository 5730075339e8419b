//! Reserving 2 MiB huge pages for the UMEM.
//!
//! The kernel's hugetlb pool (`Documentation/admin-guide/mm/hugetlbpage.rst`): `/proc/meminfo`
//! reports `HugePages_Total`, `HugePages_Free` and `Hugepagesize` for the default huge page
//! size; writing `/proc/sys/vm/nr_hugepages` (root) resizes that pool. When the default size
//! is not 2 MiB, the 2 MiB pool is under `/sys/kernel/mm/hugepages/hugepages-2048kB/`
//! instead. Growing the pool can come up short when memory is fragmented, so the result is
//! re-read rather than assumed.

use std::fs;
use std::io;
use std::path::Path;

use crate::sys::sysfs::read_decimal;

/// Bytes in one huge page as used for the UMEM (`MAP_HUGE_2MB`).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

const MEMINFO: &str = "/proc/meminfo";
const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";
const SYSFS_2M_FREE: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";
const SYSFS_2M_NR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

/// 2 MiB pages needed for `bytes` bytes (rounded up).
pub fn huge_pages_for(bytes: usize) -> u32 {
    bytes.div_ceil(HUGE_PAGE_SIZE) as u32
}

/// The value of `key` in `/proc/meminfo` text (e.g. `HugePages_Free` → pages,
/// `Hugepagesize` → kB), or `None` if absent or unparsable.
pub fn parse_meminfo(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, rest) = line.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// (free, total) 2 MiB pages and the file that sets the total.
fn pool() -> io::Result<(u64, u64, &'static str)> {
    let text = fs::read_to_string(MEMINFO)?;
    let missing =
        |k: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{MEMINFO}: no {k}"));
    let size_kb = parse_meminfo(&text, "Hugepagesize").ok_or_else(|| missing("Hugepagesize"))?;
    if size_kb == (HUGE_PAGE_SIZE / 1024) as u64 {
        let free =
            parse_meminfo(&text, "HugePages_Free").ok_or_else(|| missing("HugePages_Free"))?;
        let total =
            parse_meminfo(&text, "HugePages_Total").ok_or_else(|| missing("HugePages_Total"))?;
        Ok((free, total, NR_HUGEPAGES))
    } else {
        let free = read_decimal(Path::new(SYSFS_2M_FREE))?;
        let total = read_decimal(Path::new(SYSFS_2M_NR))?;
        Ok((free, total, SYSFS_2M_NR))
    }
}

/// Makes sure at least `min_free` 2 MiB huge pages are free, growing the pool when fewer
/// are (needs root). Returns the number free afterwards, which can still be below
/// `min_free` if the kernel could not find contiguous memory: compare before relying on it.
///
/// # Errors
/// Reading `/proc/meminfo` (or the sysfs pool files) or writing
/// `/proc/sys/vm/nr_hugepages` failed (`EACCES`/`EPERM` when not root, `EROFS` in some
/// containers).
pub fn reserve_hugepages(min_free: u32) -> io::Result<u32> {
    let (free, total, knob) = pool()?;
    if free >= min_free as u64 {
        return Ok(free.min(u32::MAX as u64) as u32);
    }
    let want_total = total + (min_free as u64 - free);
    log::info!(
        "huge pages: {free} of 2 MiB free, need {min_free}; raising {knob} from {total} to {want_total}"
    );
    fs::write(knob, format!("{want_total}\n"))?;
    let (free, _, _) = pool()?;
    if free < min_free as u64 {
        log::warn!("huge pages: asked for {min_free} free, kernel could provide {free}");
    }
    Ok(free.min(u32::MAX as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "MemTotal:        8123456 kB\n\
        AnonHugePages:         0 kB\n\
        HugePages_Total:       8\n\
        HugePages_Free:        5\n\
        HugePages_Rsvd:        0\n\
        Hugepagesize:       2048 kB\n";

    #[test]
    fn parses_meminfo_fields() {
        assert_eq!(parse_meminfo(SAMPLE, "HugePages_Free"), Some(5));
        assert_eq!(parse_meminfo(SAMPLE, "HugePages_Total"), Some(8));
        assert_eq!(parse_meminfo(SAMPLE, "Hugepagesize"), Some(2048));
        assert_eq!(parse_meminfo(SAMPLE, "HugePages"), None);
        assert_eq!(parse_meminfo(SAMPLE, "Nope"), None);
    }

    #[test]
    fn pages_for_rounds_up() {
        assert_eq!(huge_pages_for(0), 0);
        assert_eq!(huge_pages_for(1), 1);
        assert_eq!(huge_pages_for(8 << 20), 4);
        assert_eq!(huge_pages_for((8 << 20) + 1), 5);
    }
}
