//! glibc's allocator: its tuning (`mallopt(3)`) and its statistics (`mallinfo2(3)`).

use std::io;

/// Keeps memory freed by the process inside the process instead of handing it back to the
/// kernel, through glibc's `mallopt(3)`:
/// - `M_TRIM_THRESHOLD` = `trim_threshold` bytes: the top of the heap is returned to the kernel
///   (`brk`) only when at least this much is free there;
/// - `M_MMAP_THRESHOLD` = `mmap_threshold` bytes: only allocations at least this big get their
///   own `mmap` (unmapped again on `free`); smaller ones come from the heap and are reused.
///
/// Call it early on the main thread, before the allocations it is meant for. Setting either
/// threshold also turns off glibc's dynamic adjustment of both.
///
/// # Errors
/// `InvalidInput` when a value does not fit a C `int`, or when glibc rejects one (`mallopt`
/// returns 0 and sets no `errno`, e.g. for a `mmap_threshold` above the maximum of that
/// glibc version). `Unsupported` on targets other than Linux with glibc, where nothing is
/// changed.
pub fn keep_freed_memory(trim_threshold: usize, mmap_threshold: usize) -> io::Result<()> {
    let int = |what: &str, v: usize| {
        libc::c_int::try_from(v).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} {v} does not fit a C int"),
            )
        })
    };
    let trim = int("M_TRIM_THRESHOLD", trim_threshold)?;
    let mmap = int("M_MMAP_THRESHOLD", mmap_threshold)?;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        for (name, param, value) in [
            ("M_TRIM_THRESHOLD", libc::M_TRIM_THRESHOLD, trim),
            ("M_MMAP_THRESHOLD", libc::M_MMAP_THRESHOLD, mmap),
        ] {
            // SAFETY: mallopt takes two plain integers and only changes glibc's allocator
            // parameters (it takes the arena lock itself); it touches no caller memory, and a
            // value out of range is rejected with 0, not undefined behaviour.
            if unsafe { libc::mallopt(param, value) } == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("mallopt({name}, {value}) rejected by glibc"),
                ));
            }
        }
        Ok(())
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (trim, mmap);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "mallopt(3) is glibc's",
        ))
    }
}

/// The heap as glibc's allocator counts it ([`heap_stats`]), bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes of allocations the process holds: `mallinfo2` `uordblks` (chunks in use in every
    /// arena, `brk` heap and the threads' `mmap`ped arenas) plus `hblkhd` (the chunks above
    /// `M_MMAP_THRESHOLD` that have their own `mmap`).
    pub in_use: u64,
    /// Bytes the allocator holds free, not handed back to the kernel: `fordblks` (free chunks
    /// in every arena, the top chunks included). Large and growing while `in_use` is flat
    /// means fragmentation.
    pub free: u64,
}

/// The heap in use and held free by glibc's allocator, from `mallinfo2(3)` (glibc 2.33+).
///
/// Cost: glibc walks every arena under its lock, visiting every free chunk in its bins, so
/// an allocation on another thread waits for that arena's walk, and the cost grows with the
/// free chunks. Measured (2-core VM, glibc 2.36): in `lidarxdp run` with every sink on (27
/// threads, 12 MiB of heap in use, 4 MiB free) 2 to 3.4 µs a call warm (1000 calls in a row),
/// 17 to 60 µs for a single call as the daemon makes it (cold caches); a synthetic heap of
/// 200,000 small blocks with holes over 24 threads, 1.4 ms. Call it at the metrics period,
/// never on a path that runs per packet or per frame.
///
/// # Errors
/// `Unsupported` on targets other than Linux with glibc.
pub fn heap_stats() -> io::Result<HeapStats> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no argument and returns a plain struct by value; it only
        // reads glibc's own arena state under the arenas' locks.
        let m = unsafe { libc::mallinfo2() };
        Ok(HeapStats {
            in_use: (m.uordblks as u64).saturating_add(m.hblkhd as u64),
            free: m.fordblks as u64,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "mallinfo2(3) is glibc's",
        ))
    }
}

/// Hands the allocator's free pages back to the kernel: glibc's `malloc_trim(0)` (glibc 2.8+
/// walks every arena, not only the main heap's top, and `madvise(MADV_DONTNEED)`s every whole
/// free page). Live allocations are not touched; a freed page that is used again later is
/// faulted in again, zero-filled. Returns whether any memory was released.
///
/// Why (issue 40): memory that a burst of work allocated on many threads and freed again
/// stays with glibc's per-thread arenas. After 1,000 zenoh sessions that opened, subscribed
/// and closed within 10 s, the daemon's heap in use was back within 0.7 MB of where it was,
/// but its resident memory stayed 9.3 MB higher.
///
/// Cost: like [`heap_stats`], one arena at a time under its lock, plus one `madvise` per free
/// run of pages; call it at the housekeeping period (the daemon: once a minute), never on a
/// per-packet or per-frame path.
///
/// # Errors
/// `Unsupported` on targets other than Linux with glibc.
pub fn trim() -> io::Result<bool> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a plain integer (the bytes to leave at the top of the
        // main heap) and only changes the allocator's own free memory, under its arena locks;
        // no caller memory is read or written.
        Ok(unsafe { libc::malloc_trim(0) } == 1)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "malloc_trim(3) is glibc's",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only values that never reach `mallopt`: changing the test process's allocator would
    /// affect the other tests.
    #[test]
    fn rejects_values_a_c_int_cannot_hold() {
        let e = keep_freed_memory(1 << 40, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = keep_freed_memory(1 << 20, usize::MAX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// A 256 MiB allocation (its own `mmap`, counted in `hblkhd`) is in `in_use` while
    /// held and leaves it when freed. Other tests allocate on other threads meanwhile: the
    /// slack (64 MiB) is far above what they hold at once, far below the allocation.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn heap_stats_count_a_held_allocation() {
        const N: u64 = 256 << 20;
        const SLACK: u64 = 64 << 20;
        let before = heap_stats().unwrap();
        // calloc'd by mmap: nothing is written, so this costs no memory traffic.
        let held = std::hint::black_box(vec![0u8; N as usize]);
        let during = heap_stats().unwrap();
        drop(held);
        let after = heap_stats().unwrap();
        assert!(
            during.in_use + SLACK >= before.in_use + N,
            "{before:?} {during:?}"
        );
        assert!(
            after.in_use + N <= during.in_use + SLACK,
            "{during:?} {after:?}"
        );
    }

    /// Memory freed on a thread of its own stays with that thread's arena until [`trim`]
    /// hands it back: 32 MiB of holes between live 64 KiB blocks (below the mmap threshold,
    /// so in the arena, and kept apart so free cannot merge them into a top it trims itself).
    ///
    /// The resident memory is the whole process's, so the measurement runs in a copy of this
    /// test binary running this test alone (`--exact`, one test thread): other tests allocating
    /// or freeing between the two readings (the 256 MiB of `heap_stats_count_a_held_allocation`)
    /// would move them. Before this, one CI run read 22.5 of the 32 MiB back and failed.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_returns_the_holes_an_arena_keeps() {
        const ALONE: &str = "LIDARXDP_TRIM_TEST_ALONE";
        if std::env::var_os(ALONE).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "sys::malloc::tests::trim_returns_the_holes_an_arena_keeps",
                ])
                .args(["--test-threads", "1"])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "the test alone: {}\n{stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        const BLOCK: usize = 64 << 10;
        const BLOCKS: usize = 1024;
        const HOLES: u64 = (BLOCKS / 2 * BLOCK) as u64;
        let rss = || crate::sys::process::resident_bytes().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let mut blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|_| vec![1u8; BLOCK]).collect();
            // Every other block freed: 512 holes of 64 KiB between live ones.
            let mut i = 0;
            blocks.retain(|_| {
                i += 1;
                i % 2 == 0
            });
            held_tx.send(()).unwrap();
            rx.recv().unwrap();
            drop(blocks);
        });
        held_rx.recv().unwrap();
        let before = rss();
        assert!(trim().unwrap());
        let after = rss();
        tx.send(()).unwrap();
        t.join().unwrap();
        // Each hole gives back all its whole pages but the one holding its chunk header.
        assert!(
            before >= after + HOLES * 3 / 4,
            "resident {before} B before trim, {after} B after: less than 3/4 of {HOLES} B back"
        );
    }
}
