//! The sink's shared-memory pool: one POSIX shared-memory segment (`/dev/shm/<id>.zenoh`,
//! shm_open(3)) managed by zenoh's shared-memory provider, from which each message is
//! allocated.
//!
//! Sizing: the pool must hold every message still referenced by a subscriber plus the one
//! being written. With `q` frames of at most `F` bytes kept by the slowest local subscriber
//! (zenoh keeps a chunk until every receiver dropped its sample), it needs about `(q + 2) * F`:
//! the default 128 MiB holds eight 15 MB frames (128-channel dual return) or a hundred 1 MB
//! ones. A message that finds no free chunk is built on the heap instead and counted
//! (`zenoh.shm_exhausted`), so a full pool costs a copy, never a frame.
//!
//! zenoh locks the segment in RAM (mlock(2)), which needs `CAP_IPC_LOCK` or an
//! `RLIMIT_MEMLOCK` above the pool: the daemon creates the pool during start-up, before it
//! drops its capabilities. Creating it spawns no thread, which [`ShmPool::create`] checks, so
//! no thread of zenoh's ever holds a capability. A subscriber maps the segment and locks it
//! too: its `RLIMIT_MEMLOCK` (`ulimit -l`, systemd `LimitMEMLOCK=`) must cover the pool, or
//! it must hold `CAP_IPC_LOCK`.

use zenoh::Wait;
use zenoh::shm::{PosixShmProviderBackend, ShmProvider, ShmProviderBuilder};

use super::ZenohError;

/// A created and locked shared-memory pool (module documentation).
pub struct ShmPool {
    pub(super) provider: ShmProvider<PosixShmProviderBackend>,
    pub(super) bytes: usize,
}

/// Threads of this process now (`/proc/self/task` entries, proc(5)).
fn thread_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
}

impl ShmPool {
    /// Creates and locks a pool of `bytes` bytes.
    ///
    /// # Errors
    /// [`ZenohError::Shm`]: the segment cannot be created or locked (the message gives
    /// `RLIMIT_MEMLOCK`), or zenoh started a thread while creating it (which would keep the
    /// start-up capabilities: refused rather than run so).
    pub fn create(bytes: usize) -> Result<ShmPool, ZenohError> {
        let before = thread_count();
        let provider = ShmProviderBuilder::default_backend(bytes)
            .wait()
            .map_err(|e| {
                // A segment whose lock failed stays behind in /dev/shm; remove what no live
                // process holds.
                zenoh::shm::cleanup_orphaned_shm_segments();
                ZenohError::Shm {
                    bytes,
                    reason: format!(
                        "{e} (zenoh locks the pool in RAM: needs CAP_IPC_LOCK or an \
                         RLIMIT_MEMLOCK above it, now {} bytes; lower --zenoh-shm-mb, or 0 \
                         for none)",
                        crate::sys::rlimit::memlock().map_or(0, |l| l.0)
                    ),
                }
            })?;
        let after = thread_count();
        if before != after {
            return Err(ZenohError::Shm {
                bytes,
                reason: format!(
                    "creating the pool started a thread ({before:?} -> {after:?} threads), \
                     which would keep the start-up capabilities"
                ),
            });
        }
        Ok(ShmPool { provider, bytes })
    }

    /// Size of the pool, bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
