//! The sink's shared-memory pool: one POSIX shared-memory segment (`/dev/shm/<id>.zenoh`,
//! shm_open(3)) managed by zenoh's shared-memory provider, from which each frame's message is
//! allocated.
//!
//! **The decoder writes into it** ([`ShmFrames`]): each frame a decoder starts takes a chunk
//! of the pool as its point buffer ([`lidarxdp_core::point_buf::PointBuf`], through
//! [`lidarxdp_core::scan::BufferSource`]). The chunk has room in front of the points for the
//! message's CDR prefix (its length is fixed per sensor: it depends on the `frame_id` alone,
//! [`lidarxdp_core::ros2::points_prefix`]) and one byte behind them for the suffix. When the
//! frame is finished the publisher seals it: the prefix (stamp, point count) and suffix are
//! written around the points, the chunk is cut to the message's length and becomes an
//! immutable [`ZShm`], which the zenoh sink puts as it is. The TCP, DDS and view sinks read
//! the same points. Nothing copies the points after the decoder wrote them.
//!
//! Sizing: the pool must hold every message still referenced by a subscriber plus the one
//! being written. With `q` frames of at most `F` bytes kept by the slowest local subscriber
//! (zenoh keeps a chunk until every receiver dropped its sample), it needs about `(q + 2) * F`:
//! the default 128 MiB holds eight 15 MB frames (128-channel dual return) or a hundred 1 MB
//! ones. A frame's chunk holds its capacity (the previous frame's size and an eighth more),
//! not only its points. A frame whose decoder found no free chunk is decoded on the heap
//! (`zenoh.loans_refused`) and copied by the sink into a chunk, or built on the heap when there
//! is still none (`zenoh.shm_exhausted`), so a full pool costs a copy, never a frame.
//!
//! **Use** (`lidarxdp_zenoh_shm_pool_used_bytes`, `_free_bytes`, [`ShmPool::usage`]): zenoh's
//! POSIX backend (talc) does not report what it has free (`available()` is 0), so the
//! backend wrapper counts it: the bytes of the chunks it allocated and not yet freed. zenoh
//! frees a chunk only when it collects garbage (a chunk no one references any more, ours or a
//! subscriber's), which it does when an allocation fails; [`ShmPool::usage`] collects first,
//! so `used` is the bytes of chunks still referenced (the decoders' frames in progress, frames
//! queued or in flight, and what subscribers still hold) and `free` the pool's size less them.
//!
//! zenoh locks the segment in RAM (mlock(2)), which needs `CAP_IPC_LOCK` or an
//! `RLIMIT_MEMLOCK` above the pool: the daemon creates the pool during start-up, before it
//! drops its capabilities. Creating it spawns no thread, which [`ShmPool::create`] checks, so
//! no thread of zenoh's ever holds a capability. A subscriber maps the segment and locks it
//! too: its `RLIMIT_MEMLOCK` (`ulimit -l`, systemd `LimitMEMLOCK=`) must cover the pool, or
//! it must hold `CAP_IPC_LOCK`.

use std::any::Any;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use lidarxdp_core::frame::FrameHeader;
use lidarxdp_core::layout::{POINT_TYPES, PointType};
use lidarxdp_core::point_buf::{MIN_LOAN_POINTS, PointBuf, PointMemory};
use lidarxdp_core::ros2::{POINTCLOUD2_SUFFIX, points_prefix};
use lidarxdp_core::scan::BufferSource;
use zenoh::Wait;
use zenoh::shm::{
    AllocAlignment, ChunkAllocResult, ChunkDescriptor, GarbageCollect, MemoryLayout, OwnedShmBuf,
    PosixShmProviderBackend, ProtocolID, SegmentID, ShmProvider, ShmProviderBackend,
    ShmProviderBuilder, WithProtocolID, ZLayoutError, ZShm, ZShmMut,
};

use super::ZenohError;
use super::sink::SharedZenohCounters;
use crate::publish::BufferPool;

/// zenoh's POSIX backend, noting the segment its chunks come from, so that the sink can
/// announce it to subscribers ([`lidarxdp_client::zenoh::shm_segment_token`]).
#[derive(Debug)]
pub(super) struct Backend {
    inner: PosixShmProviderBackend,
    /// The segment of the last chunk allocated, `u64::MAX` before the first.
    segment: Arc<AtomicU64>,
    /// Bytes of the chunks allocated and not yet freed.
    used: Arc<AtomicU64>,
}

impl WithProtocolID for Backend {
    fn id(&self) -> ProtocolID {
        self.inner.id()
    }
}

impl ShmProviderBackend for Backend {
    fn alloc(&self, layout: &MemoryLayout) -> ChunkAllocResult {
        let chunk = self.inner.alloc(layout);
        if let Ok(c) = &chunk {
            self.segment.store(u64::from(c.descriptor.segment), Relaxed);
            self.used.fetch_add(c.descriptor.len.get() as u64, Relaxed);
        }
        chunk
    }
    fn free(&self, chunk: &ChunkDescriptor) {
        self.inner.free(chunk);
        self.used.fetch_sub(chunk.len.get() as u64, Relaxed);
    }
    fn defragment(&self) -> usize {
        self.inner.defragment()
    }
    fn available(&self) -> usize {
        self.inner.available()
    }
    fn layout_for(&self, layout: MemoryLayout) -> Result<MemoryLayout, ZLayoutError> {
        self.inner.layout_for(layout)
    }
}

/// A created and locked shared-memory pool (module documentation). Clones share it.
#[derive(Clone)]
pub struct ShmPool {
    pub(super) provider: Arc<ShmProvider<Backend>>,
    pub(super) bytes: usize,
    /// The backend's [`Backend::segment`].
    segment: Arc<AtomicU64>,
    /// The backend's [`Backend::used`].
    used: Arc<AtomicU64>,
    protocol: ProtocolID,
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
        // The segment's alignment bounds its chunks' (`CHUNK_ALIGN_POW`).
        let align = AllocAlignment::new(CHUNK_ALIGN_POW).map_err(|e| ZenohError::Shm {
            bytes,
            reason: format!("alignment: {e:?}"),
        })?;
        let segment = Arc::new(AtomicU64::new(u64::MAX));
        let used = Arc::new(AtomicU64::new(0));
        let mut protocol = 0;
        let provider = PosixShmProviderBackend::builder((bytes, align))
            .wait()
            .map(|inner| {
                protocol = inner.id();
                ShmProviderBuilder::backend(Backend {
                    inner,
                    segment: segment.clone(),
                    used: used.clone(),
                })
                .wait()
            })
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
        Ok(ShmPool {
            provider: Arc::new(provider),
            bytes,
            segment,
            used,
            protocol,
        })
    }

    /// Size of the pool, bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `(used, free)` bytes of the pool now (module documentation, "Use"): first frees the
    /// chunks no one references any more (zenoh's garbage collection, which walks the list of
    /// chunks lent under its lock), then reads the bytes of the chunks still allocated. Call
    /// it at the metrics period.
    pub fn usage(&self) -> (u64, u64) {
        self.provider.garbage_collect();
        let used = self.used.load(Relaxed);
        (used, (self.bytes as u64).saturating_sub(used))
    }

    /// The pool's protocol and segment (zenoh's POSIX backend has one segment), learnt from a
    /// chunk allocated and released here: call it after the capabilities are dropped (the
    /// first allocation starts zenoh's shared-memory threads). `None` when no chunk of 8 bytes
    /// can be allocated.
    pub(super) fn segment(&self) -> Option<(ProtocolID, SegmentID)> {
        if self.segment.load(Relaxed) == u64::MAX {
            let probe = self
                .provider
                .alloc(1usize << CHUNK_ALIGN_POW)
                .with_policy::<GarbageCollect>()
                .wait()
                .ok()?;
            drop(probe);
        }
        let segment = SegmentID::try_from(self.segment.load(Relaxed)).ok()?;
        Some((self.protocol, segment))
    }
}

/// Chunks are aligned to 8 bytes (2^3), so the points, at a multiple of 4 after the start
/// ([`lidarxdp_core::ros2::points_prefix`]), are aligned to
/// [`lidarxdp_core::layout::POINT_ALIGN`] for every layout.
const CHUNK_ALIGN_POW: u8 = 3;

/// What one sensor's chunks look like: its message's `frame_id` and the prefix length in front
/// of the points, bytes, for each point layout (the field list is part of the prefix).
#[derive(Debug)]
pub(super) struct ChunkLayout {
    pub(super) frame_id: String,
    headroom: [usize; POINT_TYPES.len()],
}

impl ChunkLayout {
    /// The layout of `frame_id`'s messages, `None` for a `frame_id` no message can carry (a
    /// NUL byte).
    pub(super) fn new(frame_id: &str) -> Option<Self> {
        let mut headroom = [0; POINT_TYPES.len()];
        for t in POINT_TYPES {
            headroom[t as usize] = points_prefix(0, frame_id, t, 0).ok()?.len();
        }
        Some(ChunkLayout {
            frame_id: frame_id.to_owned(),
            headroom,
        })
    }

    /// The prefix length in front of points of layout `t`, bytes.
    pub(super) fn headroom(&self, t: PointType) -> usize {
        self.headroom[t as usize]
    }
}

/// The chunk layout of each sensor with a zenoh topic, by `sensor_id`.
pub(super) type Layouts = Vec<(u16, Arc<ChunkLayout>)>;

/// The decoders' point buffers from the shared-memory pool (module documentation): a
/// [`BufferSource`] lending each frame of a sensor with a zenoh topic a chunk; other sensors,
/// and any frame when the pool is full, take heap buffers from the publisher's pool.
pub struct ShmFrames {
    pool: ShmPool,
    layouts: Vec<(u16, Arc<ChunkLayout>)>,
    heap: Arc<BufferPool>,
    counters: Arc<SharedZenohCounters>,
}

impl ShmFrames {
    pub(super) fn new(
        pool: ShmPool,
        layouts: Vec<(u16, Arc<ChunkLayout>)>,
        heap: Arc<BufferPool>,
        counters: Arc<SharedZenohCounters>,
    ) -> Self {
        ShmFrames {
            pool,
            layouts,
            heap,
            counters,
        }
    }
}

impl BufferSource for ShmFrames {
    fn take_buffer(
        &self,
        sensor_id: u16,
        point_type: PointType,
        capacity: usize,
    ) -> Option<PointBuf> {
        let Some((_, layout)) = self.layouts.iter().find(|(s, _)| *s == sensor_id) else {
            return self.heap.take();
        };
        let bytes = capacity
            .max(MIN_LOAN_POINTS)
            .saturating_mul(point_type.point_step());
        match ShmPoints::alloc(&self.pool, layout, point_type, bytes, &self.counters) {
            Some(m) => Some(PointBuf::in_memory(Box::new(m), point_type)),
            None => {
                self.counters.loans_refused.fetch_add(1, Relaxed);
                self.heap.take()
            }
        }
    }
}

/// The chunk of a frame: writable while the decoder fills it, shared once sealed.
enum Chunk {
    Writing(ZShmMut),
    Sealed(ZShm),
    /// Sealing failed (more than 4 GiB of points): the points stay readable, the chunk is
    /// never put.
    Unsendable {
        /// Kept: the points still live in it.
        _held: ZShmMut,
    },
}

/// One frame's chunk of the pool, lent to its [`PointBuf`].
pub struct ShmPoints {
    /// `None` only inside `seal`.
    chunk: Option<Chunk>,
    /// The chunk's first byte and its length: `seal` writes the prefix and suffix through
    /// it, so that no reference to the whole chunk is made while `points` is in use.
    base: NonNull<u8>,
    len: usize,
    /// The first point, `layout.headroom(point_type)` bytes into the chunk.
    points: NonNull<u8>,
    /// Bytes of points the chunk holds.
    capacity: usize,
    /// The layout the chunk was laid out for (its prefix length).
    point_type: PointType,
    layout: Arc<ChunkLayout>,
    pool: ShmPool,
    counters: Arc<SharedZenohCounters>,
}

// SAFETY: the chunk types are `Send + Sync` (zenoh's reference-counted buffers); `points`
// points into the chunk this value owns and is only written through `PointBuf` under its
// `&mut` borrow before `seal`, only read after.
unsafe impl Send for ShmPoints {}
// SAFETY: as above.
unsafe impl Sync for ShmPoints {}

impl ShmPoints {
    /// A chunk for `points` bytes of points of layout `point_type` of `layout`'s sensor, or
    /// `None` when the pool has no room (after a garbage collection of the chunks every reader
    /// let go).
    fn alloc(
        pool: &ShmPool,
        layout: &Arc<ChunkLayout>,
        point_type: PointType,
        points: usize,
        counters: &Arc<SharedZenohCounters>,
    ) -> Option<Self> {
        let headroom = layout.headroom(point_type);
        let bytes = points
            .checked_add(headroom + POINTCLOUD2_SUFFIX.len())?
            // zenoh's layouts are whole multiples of their alignment.
            .checked_next_multiple_of(1 << CHUNK_ALIGN_POW)?;
        let align = AllocAlignment::new(CHUNK_ALIGN_POW).ok()?;
        let mut chunk = pool
            .provider
            .alloc((bytes, align))
            .with_policy::<GarbageCollect>()
            .wait()
            .ok()?;
        let len = chunk.len();
        let base = chunk.as_mut_ptr();
        // The points start `headroom` (a multiple of 4) bytes into an 8-aligned chunk.
        // SAFETY: `headroom < bytes`, the chunk's length, so the offset stays inside it.
        let first = unsafe { base.add(headroom) };
        if !(first as usize).is_multiple_of(lidarxdp_core::layout::POINT_ALIGN) {
            return None;
        }
        counters.loans.fetch_add(1, Relaxed);
        Some(ShmPoints {
            chunk: Some(Chunk::Writing(chunk)),
            base: NonNull::new(base)?,
            len,
            points: NonNull::new(first)?,
            capacity: points,
            point_type,
            layout: layout.clone(),
            pool: pool.clone(),
            counters: counters.clone(),
        })
    }

    /// The sealed message (prefix, points, suffix) for topic frame `frame_id`: `None` when
    /// the chunk was laid out for another `frame_id`, or not sealed.
    pub(super) fn message(&self, frame_id: &str) -> Option<&ZShm> {
        match &self.chunk {
            Some(Chunk::Sealed(m)) if self.layout.frame_id == frame_id => Some(m),
            _ => None,
        }
    }
}

// SAFETY: `points` is 4-aligned (checked in `alloc`) and `capacity` bytes long inside the
// chunk (`alloc` sized it `headroom + capacity + 1`), which this value owns and keeps
// alive; zenoh shares the chunk with no one before `seal` makes it a `ZShm`, and the chunk's
// memory stays mapped until it is dropped. `seal` writes only outside the points.
unsafe impl PointMemory for ShmPoints {
    fn region(&mut self) -> (NonNull<u8>, usize) {
        (self.points, self.capacity)
    }

    fn grow(&self, bytes: usize) -> Option<Box<dyn PointMemory>> {
        self.counters.grown.fetch_add(1, Relaxed);
        let next = ShmPoints::alloc(
            &self.pool,
            &self.layout,
            self.point_type,
            bytes,
            &self.counters,
        );
        if next.is_none() {
            self.counters.loans_refused.fetch_add(1, Relaxed);
        }
        next.map(|m| Box::new(m) as Box<dyn PointMemory>)
    }

    fn seal(&mut self, header: &FrameHeader, point_type: PointType, points: usize) {
        let Some(Chunk::Writing(mut chunk)) = self.chunk.take() else {
            return;
        };
        let h = self.layout.headroom(self.point_type);
        let end = h + points
            .saturating_mul(point_type.point_step())
            .min(self.capacity);
        let prefix = points_prefix(header.start_ns, &self.layout.frame_id, point_type, points);
        let sealed = match prefix {
            Ok(prefix) if prefix.len() == h && end + POINTCLOUD2_SUFFIX.len() <= self.len => {
                // SAFETY: `base` is the chunk's first byte and the chunk is `len` bytes long,
                // owned by this value and not yet shared (`Writing`); the prefix goes to
                // `0..h` and the suffix to `end`, below `len`, neither overlapping the points
                // (`h..end`), which stay as the decoder wrote them.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        prefix.as_bytes().as_ptr(),
                        self.base.as_ptr(),
                        h,
                    );
                    std::ptr::copy_nonoverlapping(
                        POINTCLOUD2_SUFFIX.as_ptr(),
                        self.base.as_ptr().add(end),
                        POINTCLOUD2_SUFFIX.len(),
                    );
                }
                NonZeroUsize::new(end + POINTCLOUD2_SUFFIX.len())
                    .and_then(|len| chunk.try_resize(len))
            }
            _ => None,
        };
        self.chunk = Some(match sealed {
            Some(()) => Chunk::Sealed(chunk.into()),
            None => Chunk::Unsendable { _held: chunk },
        });
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
