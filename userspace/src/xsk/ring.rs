//! Single-producer/single-consumer rings shared with the kernel.
//!
//! Each AF_XDP ring (`af_xdp.rst`, "Rings") is an mmapped area holding a `u32` producer
//! index, a `u32` consumer index, a `u32` flags word and a power-of-two array of
//! descriptors (`u64` UMEM addresses for the fill/completion rings, `struct xdp_desc` for
//! RX/TX). Indices are free-running `u32`s: they wrap at 2^32, the slot is `index & mask`,
//! and "entries in the ring" is `producer - consumer` in wrapping arithmetic.
//!
//! Memory ordering, as in libxdp's `xsk.h` and the kernel's `xsk_queue.h`:
//! - a producer writes descriptors, then publishes them with a **Release** store of the
//!   producer index; it learns which slots are free with an **Acquire** load of the
//!   consumer index (so the other side is done reading them);
//! - a consumer learns of new descriptors with an **Acquire** load of the producer index,
//!   reads them, then hands the slots back with a **Release** store of the consumer index.
//!
//! Like libxdp, each side caches the other side's index and reloads it only when the cache
//! says there is not enough room/data, so the shared cache line is touched about once per
//! burst. That bookkeeping is in [`ProdIndex`] / [`ConsIndex`], pure arithmetic without
//! pointers, unit-tested across the 2^32 wrap.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Producer-side index bookkeeping (we produce: the fill ring).
///
/// `cached_cons` holds the kernel's consumer index **plus the ring size**, so
/// `cached_cons - cached_prod` is the number of free slots (libxdp's trick).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProdIndex {
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
}

impl ProdIndex {
    /// Bookkeeping for a ring of `size` slots whose shared indices currently read
    /// `producer` and `consumer`.
    pub fn new(size: u32, producer: u32, consumer: u32) -> Self {
        debug_assert!(size.is_power_of_two());
        Self {
            size,
            cached_prod: producer,
            cached_cons: consumer.wrapping_add(size),
        }
    }

    /// Free slots, at least `want` if the ring has them. Calls `load_consumer` (an Acquire
    /// load of the shared consumer index) only when the cached count is below `want`.
    pub fn free(&mut self, want: u32, load_consumer: impl FnOnce() -> u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = load_consumer().wrapping_add(self.size);
        // A misbehaving peer cannot make us claim more than `size` slots.
        self.cached_cons
            .wrapping_sub(self.cached_prod)
            .min(self.size)
    }

    /// Reserves exactly `n` slots, returning the index of the first; `None` if fewer than
    /// `n` are free. The slots are `start, start+1, .. start+n-1` (wrapping).
    pub fn reserve(&mut self, n: u32, load_consumer: impl FnOnce() -> u32) -> Option<u32> {
        if self.free(n, load_consumer) < n {
            return None;
        }
        let start = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        Some(start)
    }

    /// The producer index to publish: everything reserved so far.
    pub fn producer(&self) -> u32 {
        self.cached_prod
    }
}

/// Consumer-side index bookkeeping (we consume: the RX and completion rings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsIndex {
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
}

impl ConsIndex {
    /// Bookkeeping for a ring of `size` slots whose shared indices currently read
    /// `producer` and `consumer`.
    pub fn new(size: u32, producer: u32, consumer: u32) -> Self {
        debug_assert!(size.is_power_of_two());
        Self {
            size,
            cached_prod: producer,
            cached_cons: consumer,
        }
    }

    /// Entries ready to read, at most `want`. Calls `load_producer` (an Acquire load of the
    /// shared producer index) only when fewer than `want` are cached.
    pub fn available(&mut self, want: u32, load_producer: impl FnOnce() -> u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n < want {
            self.cached_prod = load_producer();
            // A misbehaving peer cannot make us read more than `size` entries.
            n = self
                .cached_prod
                .wrapping_sub(self.cached_cons)
                .min(self.size);
        }
        n.min(want)
    }

    /// Takes up to `want` entries: returns `(start, n)`, the entries being
    /// `start .. start+n` (wrapping). They stay owned by us until the next
    /// [`ConsIndex::consumer`] value is published.
    pub fn peek(&mut self, want: u32, load_producer: impl FnOnce() -> u32) -> (u32, u32) {
        let n = self.available(want, load_producer);
        let start = self.cached_cons;
        self.cached_cons = self.cached_cons.wrapping_add(n);
        (start, n)
    }

    /// The consumer index to publish: everything peeked so far.
    pub fn consumer(&self) -> u32 {
        self.cached_cons
    }
}

/// Raw pointers into one ring's mapping.
///
/// Holds no ownership: whoever builds it keeps the mapping alive at least as long.
#[derive(Debug)]
pub struct RingPtrs<T> {
    /// Shared producer index (`xdp_ring_offset.producer`).
    pub producer: NonNull<AtomicU32>,
    /// Shared consumer index (`xdp_ring_offset.consumer`).
    pub consumer: NonNull<AtomicU32>,
    /// Shared flags (`xdp_ring_offset.flags`), e.g. `XDP_RING_NEED_WAKEUP`.
    pub flags: NonNull<AtomicU32>,
    /// First of `size` descriptors (`xdp_ring_offset.desc`).
    pub descs: NonNull<T>,
    /// Number of descriptors, a power of two.
    pub size: u32,
}

/// A ring we produce into (the fill ring).
#[derive(Debug)]
pub struct ProducerRing<T> {
    ptrs: RingPtrs<T>,
    mask: u32,
    idx: ProdIndex,
}

impl<T: Copy> ProducerRing<T> {
    /// Wraps a ring mapping.
    ///
    /// # Safety
    /// Every pointer in `ptrs` must be valid, suitably aligned, and stay so for the life of
    /// the returned value; `descs` must point to `ptrs.size` (a power of two) elements of
    /// `T`; the indices may be modified only by the one peer (kernel) consumer, through
    /// atomic operations; no other producer exists.
    pub unsafe fn new(ptrs: RingPtrs<T>) -> Self {
        assert!(ptrs.size.is_power_of_two());
        // SAFETY: the caller guarantees the index pointers are valid and aligned.
        let (p, c) = unsafe {
            (
                ptrs.producer.as_ref().load(Ordering::Relaxed),
                ptrs.consumer.as_ref().load(Ordering::Acquire),
            )
        };
        Self {
            mask: ptrs.size - 1,
            idx: ProdIndex::new(ptrs.size, p, c),
            ptrs,
        }
    }

    fn load_consumer(consumer: NonNull<AtomicU32>) -> u32 {
        // SAFETY: `new`'s contract: the pointer stays valid and aligned for our lifetime.
        unsafe { consumer.as_ref() }.load(Ordering::Acquire)
    }

    /// Free slots (at least `want` if available; refreshes from the kernel only if needed).
    pub fn free(&mut self, want: u32) -> u32 {
        let c = self.ptrs.consumer;
        self.idx.free(want, || Self::load_consumer(c))
    }

    /// Writes `n` descriptors produced by `next` and publishes them (Release). Returns
    /// `false`, writing nothing, if fewer than `n` slots are free.
    pub fn produce(&mut self, n: u32, mut next: impl FnMut() -> T) -> bool {
        let c = self.ptrs.consumer;
        let Some(start) = self.idx.reserve(n, || Self::load_consumer(c)) else {
            return false;
        };
        for i in 0..n {
            let slot = (start.wrapping_add(i) & self.mask) as usize;
            // SAFETY: slot < size (masked), `descs` points to `size` elements (`new`'s
            // contract); the slot lies between our producer and the kernel's consumer + size,
            // so the kernel does not read it until the Release store below.
            unsafe { self.ptrs.descs.as_ptr().add(slot).write(next()) };
        }
        // SAFETY: valid, aligned pointer (`new`'s contract).
        unsafe { self.ptrs.producer.as_ref() }.store(self.idx.producer(), Ordering::Release);
        true
    }

    /// The ring's flags word (`XDP_RING_NEED_WAKEUP`, ...), read after a full fence so a
    /// preceding [`ProducerRing::produce`] is ordered before the check (libxdp pairs the
    /// kernel's `smp_mb` in `xsk_set_rx_need_wakeup` the same way).
    pub fn flags(&self) -> u32 {
        std::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: valid, aligned pointer (`new`'s contract).
        unsafe { self.ptrs.flags.as_ref() }.load(Ordering::Relaxed)
    }

    /// Ring size in descriptors.
    pub fn size(&self) -> u32 {
        self.ptrs.size
    }
}

/// A ring we consume from (RX, completion).
#[derive(Debug)]
pub struct ConsumerRing<T> {
    ptrs: RingPtrs<T>,
    mask: u32,
    idx: ConsIndex,
}

impl<T: Copy> ConsumerRing<T> {
    /// Wraps a ring mapping.
    ///
    /// # Safety
    /// As [`ProducerRing::new`], with the roles swapped: the kernel is the only producer,
    /// we are the only consumer.
    pub unsafe fn new(ptrs: RingPtrs<T>) -> Self {
        assert!(ptrs.size.is_power_of_two());
        // SAFETY: the caller guarantees the index pointers are valid and aligned.
        let (p, c) = unsafe {
            (
                ptrs.producer.as_ref().load(Ordering::Acquire),
                ptrs.consumer.as_ref().load(Ordering::Relaxed),
            )
        };
        Self {
            mask: ptrs.size - 1,
            idx: ConsIndex::new(ptrs.size, p, c),
            ptrs,
        }
    }

    /// Takes up to `want` descriptors: `(start, n)`. Read them with
    /// [`ConsumerRing::read`], then hand the slots back with [`ConsumerRing::release`].
    pub fn peek(&mut self, want: u32) -> (u32, u32) {
        let p = self.ptrs.producer;
        self.idx.peek(want, || {
            // SAFETY: `new`'s contract: valid, aligned for our lifetime.
            unsafe { p.as_ref() }.load(Ordering::Acquire)
        })
    }

    /// Reads the descriptor at ring index `i`, which must be within the last peeked range.
    pub fn read(&self, i: u32) -> T {
        let slot = (i & self.mask) as usize;
        // SAFETY: slot < size (masked) and `descs` points to `size` elements (`new`'s
        // contract). For an index from `peek` the kernel published the slot with a Release
        // store we observed with Acquire, and will not rewrite it before `release`. Any
        // other index reads a stale but initialised `T: Copy` (plain-old-data descriptors).
        unsafe { self.ptrs.descs.as_ptr().add(slot).read() }
    }

    /// Hands every peeked slot back to the kernel (Release store of the consumer index).
    pub fn release(&mut self) {
        // SAFETY: valid, aligned pointer (`new`'s contract).
        unsafe { self.ptrs.consumer.as_ref() }.store(self.idx.consumer(), Ordering::Release);
    }

    /// Ring size in descriptors.
    pub fn size(&self) -> u32 {
        self.ptrs.size
    }
}

/// Test helper: a ring laid out like a kernel mapping, in ordinary memory, to drive the ring
/// types.
#[cfg(test)]
pub(crate) struct FakeRing<T> {
    pub(crate) producer: Box<AtomicU32>,
    pub(crate) consumer: Box<AtomicU32>,
    pub(crate) flags: Box<AtomicU32>,
    pub(crate) descs: Vec<T>,
}

#[cfg(test)]
impl<T: Copy + Default> FakeRing<T> {
    /// `size` default descriptors, both indices at `start`.
    pub(crate) fn new(size: u32, start: u32) -> Self {
        Self::with(vec![T::default(); size as usize], start)
    }
}

#[cfg(test)]
impl<T: Copy> FakeRing<T> {
    /// The descriptors `descs` (a power-of-two count), both indices at `start`.
    pub(crate) fn with(descs: Vec<T>, start: u32) -> Self {
        Self {
            producer: Box::new(AtomicU32::new(start)),
            consumer: Box::new(AtomicU32::new(start)),
            flags: Box::new(AtomicU32::new(0)),
            descs,
        }
    }

    /// Raw pointers for [`ProducerRing::new`] / [`ConsumerRing::new`]; valid while `self`
    /// lives.
    pub(crate) fn ptrs(&mut self) -> RingPtrs<T> {
        RingPtrs {
            producer: NonNull::from(&*self.producer),
            consumer: NonNull::from(&*self.consumer),
            flags: NonNull::from(&*self.flags),
            descs: NonNull::new(self.descs.as_mut_ptr()).unwrap(),
            size: self.descs.len() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prod_index_counts_free_slots_and_refreshes_lazily() {
        let mut p = ProdIndex::new(8, 0, 0);
        let mut loads = 0;
        assert_eq!(
            p.free(8, || {
                loads += 1;
                0
            }),
            8
        );
        assert_eq!(loads, 0, "cache says 8 free: no reload");
        assert_eq!(p.reserve(6, || unreachable!()), Some(0));
        assert_eq!(p.producer(), 6);
        // Only 2 cached free; kernel has consumed 4 meanwhile.
        assert_eq!(p.reserve(5, || 4), Some(6));
        assert_eq!(p.producer(), 11);
        // 8 - (11 - 4) = 1 free
        assert_eq!(p.reserve(2, || 4), None);
        assert_eq!(p.free(1, || unreachable!()), 1);
    }

    #[test]
    fn prod_index_wraps_at_u32_max() {
        let start = u32::MAX - 2;
        let mut p = ProdIndex::new(4, start, start);
        assert_eq!(p.reserve(4, || unreachable!()), Some(start));
        assert_eq!(p.producer(), 1, "wrapped: MAX-2 + 4 = 1");
        assert_eq!(p.free(1, || start), 0, "kernel has consumed nothing");
        // Kernel consumed 3 entries across the wrap.
        assert_eq!(p.free(1, || start.wrapping_add(3)), 3);
        assert_eq!(p.reserve(3, || unreachable!()), Some(1));
        assert_eq!(p.producer(), 4);
    }

    #[test]
    fn prod_index_clamps_bogus_consumer() {
        let mut p = ProdIndex::new(4, 0, 0);
        p.reserve(4, || 0).unwrap();
        // A consumer index "ahead" of our producer would claim > size free slots.
        assert_eq!(p.free(5, || 1000), 4);
    }

    #[test]
    fn cons_index_peeks_and_wraps() {
        let start = u32::MAX - 1;
        let mut c = ConsIndex::new(8, start, start);
        assert_eq!(c.peek(4, || start), (start, 0), "empty");
        // Kernel produced 5 across the wrap.
        let prod = start.wrapping_add(5);
        assert_eq!(c.peek(3, || prod), (start, 3));
        assert_eq!(c.consumer(), 1);
        let mut loads = 0;
        // 2 cached, want 2: no reload
        assert_eq!(
            c.peek(2, || {
                loads += 1;
                prod
            }),
            (1, 2)
        );
        assert_eq!(loads, 0);
        assert_eq!(c.consumer(), 3);
        assert_eq!(c.peek(64, || prod), (3, 0));
    }

    #[test]
    fn cons_index_clamps_bogus_producer() {
        let mut c = ConsIndex::new(8, 0, 0);
        assert_eq!(c.peek(64, || 1_000_000), (0, 8));
    }

    #[test]
    fn producer_ring_publishes_with_wrap() {
        let start = u32::MAX - 1;
        let mut fake = FakeRing::<u64>::new(4, start);
        // SAFETY: `fake` outlives `ring` and nothing else produces into it.
        let mut ring = unsafe { ProducerRing::new(fake.ptrs()) };
        let mut next = 100u64;
        assert!(ring.produce(3, || {
            next += 1;
            next
        }));
        assert!(!ring.produce(2, || 0), "only 1 free");
        assert_eq!(fake.producer.load(Ordering::Relaxed), 1);
        // slots: MAX-1 & 3 = 2, MAX & 3 = 3, 0 & 3 = 0
        assert_eq!(fake.descs, vec![103, 0, 101, 102]);
    }

    #[test]
    fn consumer_ring_reads_and_releases_with_wrap() {
        let start = u32::MAX;
        let mut fake = FakeRing::<u64>::new(4, start);
        fake.descs = vec![10, 11, 12, 13];
        // Kernel "produced" 3 entries: slots 3, 0, 1.
        fake.producer
            .store(start.wrapping_add(3), Ordering::Release);
        // SAFETY: `fake` outlives `ring`; we are its only consumer.
        let mut ring = unsafe { ConsumerRing::new(fake.ptrs()) };
        let (s, n) = ring.peek(8);
        assert_eq!((s, n), (start, 3));
        let got: Vec<u64> = (0..n).map(|i| ring.read(s.wrapping_add(i))).collect();
        assert_eq!(got, vec![13, 10, 11]);
        assert_eq!(
            fake.consumer.load(Ordering::Relaxed),
            start,
            "not yet released"
        );
        ring.release();
        assert_eq!(fake.consumer.load(Ordering::Relaxed), 2);
    }
}
