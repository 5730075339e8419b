//! LIFO pool of point buffers shared by the decoder thread(s) and the publisher thread.
//!
//! # Design
//! - **LIFO**: [`BufferPool::take`] returns the most recently returned buffer, whose pages are
//!   the most likely to still be in the CPU caches and TLB (a FIFO would hand out the coldest).
//! - **Capped**: at most `cap` buffers are kept; a buffer returned to a full pool is freed and
//!   counted ([`PoolCounters::discarded`]), so the pool's memory is bounded by
//!   `cap * largest frame`.
//! - **Never blocks the decoder**: the stack is a `Mutex<Vec<_>>` that the decoder side only
//!   ever `try_lock`s. The publisher holds the lock for one `Vec::push` (a few ns) at 10–20 Hz,
//!   so contention is rare; when it happens `take` returns `None` and the decoder allocates (and
//!   `give` from the publisher side simply waits those few ns). No spinning, no syscalls.
//! - A buffer goes back to the pool when the **last** subscriber has finished writing the frame
//!   (the publisher drops its last `Arc` to the message); see [`crate::publish`].
//!
//! Counters are relaxed atomics (statistics, not synchronisation).

use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;

use lidarxdp_core::point_buf::PointBuf;

/// The point-buffer pool's counters: daemon-wide, no labels (`lidarxdp_publisher_pool_*`).
pub const POOL_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "publisher_pool",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Snapshot of a [`BufferPool`]'s counters.
    pub struct PoolCounters in POOL_COUNTERS;
    shared
    /// Written by [`BufferPool`] (`len` and `cap` are read from the pool itself).
    struct SharedPoolCounters;
    {
        /// `<= cap`.
        len: Gauge "buffers" "Point buffers in the pool now.",
        cap: Gauge "buffers" "Most point buffers the pool keeps.",
        /// `<= cap`.
        high_water: Gauge "buffers" "Largest number of point buffers the pool held.",
        hits: Counter "takes" "Buffer takes that returned a pooled buffer.",
        /// Or busy.
        misses: Counter "takes" "Buffer takes that found the pool empty: the decoder allocated.",
        returned: Counter "buffers" "Buffers returned to the pool and kept.",
        discarded: Counter "buffers" "Buffers returned to a full pool and freed.",
    }
}

/// A capped LIFO stack of empty point buffers (see the module documentation).
#[derive(Debug)]
pub struct BufferPool {
    stack: Mutex<Vec<PointBuf>>,
    cap: usize,
    c: SharedPoolCounters,
}

impl BufferPool {
    /// An empty pool keeping at most `cap` buffers (`cap` 0 keeps none).
    pub fn new(cap: usize) -> Self {
        BufferPool {
            stack: Mutex::new(Vec::with_capacity(cap)),
            cap,
            c: SharedPoolCounters::default(),
        }
    }

    /// The most recently returned buffer (empty, with its capacity), or `None` if the pool is
    /// empty or momentarily locked by the other side. Never blocks.
    pub fn take(&self) -> Option<PointBuf> {
        let v = match self.stack.try_lock() {
            Ok(mut s) => s.pop(),
            Err(_) => None,
        };
        match &v {
            Some(_) => self.c.hits.fetch_add(1, Relaxed),
            None => self.c.misses.fetch_add(1, Relaxed),
        };
        v
    }

    /// Whether the pool keeps `v` at all: a heap buffer with capacity (a loan of shared memory
    /// goes back to its own pool).
    fn keeps(v: &PointBuf) -> bool {
        v.capacity() > 0 && v.memory().is_none()
    }

    /// Returns a buffer: cleared and kept if the pool has room, freed otherwise. Buffers with
    /// no capacity, and loans of shared memory (they go back to their own pool), are not kept
    /// (and not counted).
    pub fn give(&self, mut v: PointBuf) {
        if !Self::keeps(&v) {
            return;
        }
        v.clear();
        let mut s = self.stack.lock().unwrap_or_else(|e| e.into_inner());
        if s.len() < self.cap {
            s.push(v);
            let len = s.len() as u64;
            drop(s);
            self.c.returned.fetch_add(1, Relaxed);
            self.c.high_water.fetch_max(len, Relaxed);
        } else {
            drop(s);
            self.c.discarded.fetch_add(1, Relaxed);
        }
    }

    /// Like [`give`](Self::give) but never blocks (for the decoder side): if the pool is
    /// momentarily locked the buffer is freed and counted as discarded. Returns whether it was
    /// kept.
    pub fn try_give(&self, mut v: PointBuf) -> bool {
        if !Self::keeps(&v) {
            return false;
        }
        v.clear();
        let kept = match self.stack.try_lock() {
            Ok(mut s) if s.len() < self.cap => {
                s.push(v);
                let len = s.len() as u64;
                drop(s);
                self.c.high_water.fetch_max(len, Relaxed);
                true
            }
            _ => false,
        };
        if kept {
            self.c.returned.fetch_add(1, Relaxed);
        } else {
            self.c.discarded.fetch_add(1, Relaxed);
        }
        kept
    }

    /// Buffers in the pool now.
    pub fn len(&self) -> usize {
        self.stack.lock().map_or(0, |s| s.len())
    }

    /// Whether the pool holds no buffer now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Counter snapshot.
    pub fn counters(&self) -> PoolCounters {
        PoolCounters {
            len: self.len() as u64,
            cap: self.cap as u64,
            ..self.c.snapshot()
        }
    }
}

impl lidarxdp_core::scan::BufferSource for BufferPool {
    fn take_buffer(
        &self,
        _sensor_id: u16,
        _point_type: lidarxdp_core::layout::PointType,
        _capacity: usize,
    ) -> Option<PointBuf> {
        self.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifo_capped_and_counted() {
        let p = BufferPool::new(2);
        assert!(p.take().is_none());
        p.give(Vec::with_capacity(10).into());
        p.give(Vec::with_capacity(20).into());
        let mut full = Vec::with_capacity(30);
        full.push(lidarxdp_core::point::PointXYZIRCAEDT::default());
        p.give(full.into()); // over the cap: freed
        p.give(Vec::new().into()); // no capacity: ignored
        assert_eq!(p.len(), 2);
        let a = p.take().unwrap();
        assert_eq!(a.capacity(), 20, "most recently returned first");
        assert!(a.is_empty());
        assert_eq!(p.take().unwrap().capacity(), 10);
        let c = p.counters();
        assert_eq!(
            (
                c.len,
                c.cap,
                c.high_water,
                c.hits,
                c.misses,
                c.returned,
                c.discarded
            ),
            (0, 2, 2, 2, 1, 2, 1)
        );
    }
}
