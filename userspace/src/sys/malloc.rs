//! The process's two allocators, their statistics and their purge:
//! - jemalloc 5.3 ([`tikv_jemallocator`]), the `lidarxdp` binary's Rust allocator (its
//!   `#[global_allocator]`, configured by [`JEMALLOC_CONF`]): every Rust allocation, zenoh's and
//!   the sinks' included. Statistics and controls through `mallctl` (jemalloc(3), "MALLCTL
//!   NAMESPACE"), [`tikv_jemalloc_ctl`];
//! - glibc's `malloc`, for the C libraries (Cyclone DDS, vendored) and for Rust code in a
//!   binary without that allocator (the test binaries): its statistics (`mallinfo2(3)`) and
//!   `malloc_trim(3)`.
//!
//! [`heap_stats`] and [`trim`] cover both, so they are right whichever one a binary uses.

use std::io;

/// jemalloc's configuration in the `lidarxdp` binary (its `malloc_conf`, jemalloc(3) "TUNING"),
/// a C string:
/// - a page left unused by a free goes back to the kernel (`MADV_DONTNEED`) at once
///   (`dirty_decay_ms:0`; default 10 s) and is never parked as an `MADV_FREE` page
///   (`muzzy_decay_ms:0`), which the kernel reclaims only under memory pressure and which
///   counts as resident until then;
/// - no per-thread cache (`tcache:false`): every allocation and free goes to the thread's
///   arena. A thread cache is flushed only by its own thread's allocations (jemalloc 5.3
///   counts them as events), so a zenoh worker that went idle after a burst kept the objects it
///   had cached, and the pages under them, for good.
///
/// Why (issue 40): after 1,000 zenoh sessions had opened and closed in 10 s, glibc's arenas
/// kept 3.1 and 3.3 MB more resident a minute later (two 20-minute soaks, `malloc_trim` once a
/// minute; the heap in use +0.07 MB): the live chunks of the steady work were spread over the
/// pages the burst had grown. A daemon with one zenoh subscriber, after the same burst and 65 s:
/// +2,532 kB with jemalloc and its thread caches (allocator free bytes +3.8 MB), +876 and
/// +892 kB without them (free bytes back to within 165 kB; 368 kB of it the binary's code run
/// for the first time, the rest new threads' stacks). In the soak (10 sensors, every sink, a
/// subscriber of each sink connecting every second or three) a 1 s decay held the pages the
/// churn had just freed: VmRSS sampled every 5 s spread over 1.9 MB (jemalloc's resident pages
/// 41.3 to 43.7 MB for a heap in use of 34.2 to 34.7 MB); with no decay, over 184 kB.
///
/// The cost, an arena lock per allocation and an `madvise` per whole page freed, is paid per
/// frame and per subscriber, not per packet: a warm decoder thread does not allocate
/// (`tests/publish_alloc.rs`).
pub const JEMALLOC_CONF: &[u8; 47] = b"dirty_decay_ms:0,muzzy_decay_ms:0,tcache:false\0";

/// jemalloc's `MALLCTL_ARENAS_ALL`: the arena index of `arena.<i>.*` that means every arena.
const ARENAS_ALL: usize = 4096;

/// The heap as the process's allocators count it ([`heap_stats`]): jemalloc's and glibc's,
/// added, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes of allocations the process holds: jemalloc's `stats.allocated`, plus glibc's
    /// `mallinfo2` `uordblks` (chunks in use in every arena, `brk` heap and the threads'
    /// `mmap`ped arenas) and `hblkhd` (the chunks above `M_MMAP_THRESHOLD` that have their own
    /// `mmap`).
    pub in_use: u64,
    /// Bytes the allocators hold beyond the allocations: jemalloc's `stats.resident` minus
    /// `stats.allocated` (pages freed and not yet purged, the unused part of its slabs, its
    /// metadata: all resident), plus glibc's `fordblks` (free chunks in every arena, the top
    /// chunks included, resident or not). Large and growing while `in_use` is flat means
    /// fragmentation.
    pub free: u64,
    /// Bytes of resident pages jemalloc holds (`stats.resident`: its allocations, freed pages
    /// not yet purged, its metadata); 0 in a binary where jemalloc allocates nothing.
    pub jemalloc_resident: u64,
}

/// jemalloc's statistics, refreshed (`epoch`): (`stats.allocated`, `stats.resident`), bytes.
fn jemalloc_stats() -> io::Result<(u64, u64)> {
    use tikv_jemalloc_ctl::{epoch, stats};
    let e = |e: tikv_jemalloc_ctl::Error| io::Error::other(format!("jemalloc mallctl: {e}"));
    epoch::advance().map_err(e)?;
    Ok((
        stats::allocated::read().map_err(e)? as u64,
        stats::resident::read().map_err(e)? as u64,
    ))
}

/// The heap in use and held free by the process's allocators ([`HeapStats`]): jemalloc's
/// `stats.*` after an `epoch` refresh, and glibc's `mallinfo2(3)` (glibc 2.33+).
///
/// Cost: jemalloc merges its per-arena statistics at the `epoch` write (each arena under its
/// statistics lock; microseconds). glibc walks every arena under its lock, visiting every free
/// chunk in its bins, so an allocation on another thread waits for that arena's walk, and the
/// cost grows with the free chunks. Measured (2-core VM, glibc 2.36, before the daemon used
/// jemalloc): in `lidarxdp run` with every sink on (27 threads, 12 MiB of heap in use, 4 MiB
/// free) 2 to 3.4 µs a call warm (1000 calls in a row), 17 to 60 µs for a single call as the
/// daemon makes it (cold caches); a synthetic heap of 200,000 small blocks with holes over 24
/// threads, 1.4 ms. Call it at the metrics period, never on a path that runs per packet or
/// per frame.
///
/// # Errors
/// A `mallctl` error of jemalloc (`Other`, naming it); `Unsupported` on targets other than
/// Linux with glibc.
pub fn heap_stats() -> io::Result<HeapStats> {
    let (allocated, resident) = jemalloc_stats()?;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no argument and returns a plain struct by value; it only
        // reads glibc's own arena state under the arenas' locks.
        let m = unsafe { libc::mallinfo2() };
        Ok(HeapStats {
            in_use: allocated
                .saturating_add(m.uordblks as u64)
                .saturating_add(m.hblkhd as u64),
            free: resident
                .saturating_sub(allocated)
                .saturating_add(m.fordblks as u64),
            jemalloc_resident: resident,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (allocated, resident);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "mallinfo2(3) is glibc's",
        ))
    }
}

/// Hands the allocators' free pages back to the kernel: jemalloc's `arena.<all>.purge` (every
/// arena's unused dirty pages, `MADV_DONTNEED`; with [`JEMALLOC_CONF`] there are none, only
/// with a decay given back through `_RJEM_MALLOC_CONF`) and glibc's `malloc_trim(0)` (glibc 2.8+ walks every arena, not only the main heap's top,
/// and `madvise(MADV_DONTNEED)`s every whole free page). Live allocations are not touched; a
/// freed page that is used again later is faulted in again, zero-filled. Returns whether glibc
/// released any memory (jemalloc's purge does not say).
///
/// Why (issue 40): memory that a burst of work allocated on many threads and freed again
/// stays with the allocator. After 1,000 zenoh sessions that opened, subscribed and closed
/// within 10 s, the daemon's heap in use (then all glibc's) was back within 0.7 MB of where it
/// was, but its resident memory stayed 9.3 MB higher; `malloc_trim` returned 4.2 MB of it.
///
/// Cost: one arena at a time under its lock, plus one `madvise` per free run of pages; call it
/// at the housekeeping period (the daemon: once a minute), never on a per-packet or
/// per-frame path.
///
/// # Errors
/// A `mallctl` error of jemalloc (`Other`); `Unsupported` on targets other than Linux with
/// glibc.
pub fn trim() -> io::Result<bool> {
    let name = format!("arena.{ARENAS_ALL}.purge\0");
    // SAFETY: `name` is NUL-terminated; `arena.<i>.purge` takes neither an old nor a new
    // value (jemalloc refuses any with EPERM), so every pointer is null and nothing of ours
    // is read or written.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::other(format!(
            "jemalloc mallctl {}: {}",
            name.trim_end_matches('\0'),
            io::Error::from_raw_os_error(rc)
        )));
    }
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

    /// The trim tests' blocks: `BLOCKS` of `BLOCK` bytes, every other one freed, `HOLES` bytes
    /// of holes between live blocks.
    const BLOCK: usize = 64 << 10;
    const BLOCKS: usize = 1024;
    const HOLES: u64 = (BLOCKS / 2 * BLOCK) as u64;

    /// The process's resident memory, bytes.
    fn rss() -> u64 {
        crate::sys::process::resident_bytes().unwrap()
    }

    /// Whether the calling test, `name` (its full path), is to measure here: true in a copy of
    /// this test binary that runs `name` alone (`--exact`, one test thread); otherwise that
    /// copy is run, must pass, and false is returned. A test that reads the whole process's
    /// resident memory measures alone: other tests allocating or freeing between its readings
    /// (the 256 MiB of `heap_stats_count_a_held_allocation`) would move them.
    fn alone(name: &str) -> bool {
        const ALONE: &str = "LIDARXDP_MALLOC_TEST_ALONE";
        if std::env::var_os(ALONE).is_some() {
            return true;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads", "1"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{name} alone: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        false
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

    /// jemalloc's side, through its allocator directly (this test binary's global allocator is
    /// glibc's): an allocation is counted in `in_use` while held, and the pages of 32 MiB of
    /// freed 64 KiB blocks between live ones (freed pages wait for the 10 s decay of a binary
    /// without [`JEMALLOC_CONF`]) go back to the kernel at [`trim`]. Measured alone
    /// ([`alone`]).
    #[test]
    fn jemalloc_is_counted_and_purged() {
        if !alone("sys::malloc::tests::jemalloc_is_counted_and_purged") {
            return;
        }
        use std::alloc::{GlobalAlloc, Layout};
        let je = tikv_jemallocator::Jemalloc;
        let layout = Layout::from_size_align(BLOCK, 16).unwrap();
        let (allocated_before, _) = jemalloc_stats().unwrap();
        // SAFETY: a non-zero layout; each block is written within its size and freed once
        // below with the same layout.
        let blocks: Vec<*mut u8> = (0..BLOCKS)
            .map(|_| unsafe {
                let p = je.alloc(layout);
                assert!(!p.is_null());
                p.write_bytes(1, BLOCK);
                p
            })
            .collect();
        let (allocated_held, _) = jemalloc_stats().unwrap();
        assert!(
            allocated_held >= allocated_before + (BLOCKS * BLOCK) as u64,
            "{allocated_before} -> {allocated_held}"
        );
        for p in blocks.iter().step_by(2) {
            // SAFETY: allocated above with `layout`, freed once.
            unsafe { je.dealloc(*p, layout) };
        }
        let before = rss();
        trim().unwrap();
        let after = rss();
        for p in blocks.iter().skip(1).step_by(2) {
            // SAFETY: as above, the other half.
            unsafe { je.dealloc(*p, layout) };
        }
        assert!(
            before >= after + HOLES * 3 / 4,
            "resident {before} B before trim, {after} B after: less than 3/4 of {HOLES} B back"
        );
    }

    /// Memory freed on a thread of its own stays with that thread's arena until [`trim`]
    /// hands it back: 32 MiB of holes between live 64 KiB blocks (below the mmap threshold,
    /// so in the arena, and kept apart so free cannot merge them into a top it trims itself).
    ///
    /// Measured alone ([`alone`]). Before that, one CI run read 22.5 of the 32 MiB back and
    /// failed.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_returns_the_holes_an_arena_keeps() {
        if !alone("sys::malloc::tests::trim_returns_the_holes_an_arena_keeps") {
            return;
        }
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
