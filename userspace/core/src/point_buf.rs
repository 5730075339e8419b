//! [`PointBuf`]: the point buffer of a frame, written once by the decoder, in memory that every
//! sink and local subscriber reads.
//!
//! A frame's points live either on the heap (as a `Vec<PointXYZIRCAEDT>` would) or in a
//! **loan**: a region of memory lent by a pool outside this crate ([`PointMemory`]), which in
//! the daemon is a chunk of zenoh's POSIX shared-memory pool with room in front of the points
//! for the `sensor_msgs/msg/PointCloud2` CDR prefix and one byte behind them for its suffix. The
//! decoders (through [`crate::scan::FrameBuilder`]) push points into it exactly as into a
//! `Vec`; when the frame is finished, [`PointBuf::seal`] lets the loan write the message around
//! the points, and from then on the points are only read ([`SealedPoints`]): the zenoh sink
//! puts that chunk as it is, the TCP publisher `writev`s the same bytes, the DDS sink hands the
//! same bytes to its DDS implementation. Nothing copies the points after the decoder wrote them.
//!
//! Growth: a buffer that runs out of room grows like a `Vec` (at least doubling). A loan asks
//! its pool for a bigger region ([`PointMemory::grow`]) and moves the points written so far
//! into it (the decoder's own reallocation, as `Vec` would do; [`PointBuf::moves`] counts
//! them); a pool that has none left makes the buffer continue on the heap.
//!
//! Memory layout: points are [`PointXYZIRCAEDT`], 32 bytes each, little-endian
//! ([`crate::point`]); `as_bytes` gives the PointCloud2 `data` of the frame.

use std::any::Any;
use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::frame::FrameHeader;
use crate::point::PointXYZIRCAEDT;

/// The smallest capacity, in points, a loaned buffer grows to: one allocation from the pool
/// per 32 KiB of points at most while a first frame finds its size (later frames start with the
/// previous frame's size).
pub const MIN_LOAN_POINTS: usize = 1024;

/// Memory lent to a [`PointBuf`] by a pool outside this crate (the daemon's zenoh
/// shared-memory pool).
///
/// # Safety
/// An implementation guarantees that [`PointMemory::region`] returns the same pointer and
/// capacity for the life of the value, and that the pointer is aligned for
/// [`PointXYZIRCAEDT`] (4 bytes) and valid for reads and writes of `capacity` points that no
/// one else reads or writes until [`PointMemory::seal`] is called; after `seal`, valid for
/// reads of the sealed points until the value is dropped.
pub unsafe trait PointMemory: Send + Sync + 'static {
    /// The points' region: its first point and its capacity in points.
    fn region(&mut self) -> (NonNull<PointXYZIRCAEDT>, usize);

    /// A new region of the same kind with room for at least `points` points, for a frame that
    /// outgrew this one; `None` when the pool has no room (the buffer continues on the heap).
    fn grow(&self, points: usize) -> Option<Box<dyn PointMemory>>;

    /// The frame is finished with `points` points written at the start of the region: the
    /// memory may now write what surrounds them (the CDR prefix and suffix) and make the whole
    /// shareable. Called once, by [`PointBuf::seal`]; nothing writes the points afterwards.
    fn seal(&mut self, header: &FrameHeader, points: usize);

    /// The concrete type, for the sink that knows it (the zenoh sink takes its chunk back).
    fn as_any(&self) -> &dyn Any;
}

/// A growable buffer of points (module documentation): `Vec`-like on the heap or in a loan.
///
/// Dereferences to `[PointXYZIRCAEDT]`. Cloning copies the points to the heap.
pub struct PointBuf {
    /// First point: a `Vec`'s buffer (heap) or the loan's region.
    ptr: NonNull<PointXYZIRCAEDT>,
    /// Points written, `<= cap`; the first `len` are initialised.
    len: usize,
    /// Points the region holds.
    cap: usize,
    /// `None`: `ptr`/`cap` are the raw parts of a `Vec<PointXYZIRCAEDT>` this value owns.
    loan: Option<Box<dyn PointMemory>>,
    /// Times the points moved into a bigger region (growth).
    moves: u32,
}

// SAFETY: a `PointBuf` owns its region (a `Vec`'s buffer, or a loan that is `Send`) as a `Vec`
// does; the raw pointer is never shared outside `&self`/`&mut self` borrows.
unsafe impl Send for PointBuf {}
// SAFETY: `&PointBuf` only reads the points (plain data) and the loan, which is `Sync`.
unsafe impl Sync for PointBuf {}

impl PointBuf {
    /// An empty heap buffer (no allocation).
    pub const fn new() -> Self {
        PointBuf {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
            loan: None,
            moves: 0,
        }
    }

    /// An empty heap buffer with room for `capacity` points.
    pub fn with_capacity(capacity: usize) -> Self {
        Vec::with_capacity(capacity).into()
    }

    /// An empty buffer in the loaned `memory`.
    pub fn in_memory(mut memory: Box<dyn PointMemory>) -> Self {
        let (ptr, cap) = memory.region();
        PointBuf {
            ptr,
            len: 0,
            cap,
            loan: Some(memory),
            moves: 0,
        }
    }

    /// Points written.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// No point written.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Points the buffer holds without growing.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The loan the points live in, `None` on the heap.
    pub fn memory(&self) -> Option<&dyn PointMemory> {
        self.loan.as_deref()
    }

    /// Times the points moved into a bigger region since the buffer was made (0 for a buffer
    /// that was big enough from the start).
    pub fn moves(&self) -> u32 {
        self.moves
    }

    /// Appends `p`, growing when full.
    #[inline(always)]
    pub fn push(&mut self, p: PointXYZIRCAEDT) {
        if self.len == self.cap {
            self.grow_for(1);
        }
        // SAFETY: `len < cap` now; the region is valid for writes of `cap` points and ours
        // alone (the `PointMemory` contract, or the `Vec` we own).
        unsafe { self.ptr.as_ptr().add(self.len).write(p) };
        self.len += 1;
    }

    /// Appends every point of `points`.
    pub fn extend_from_slice(&mut self, points: &[PointXYZIRCAEDT]) {
        self.reserve(points.len());
        // SAFETY: `reserve` made room for `points.len()` more; `points` cannot overlap our
        // spare capacity (it is borrowed while we are borrowed mutably).
        unsafe {
            std::ptr::copy_nonoverlapping(
                points.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                points.len(),
            );
        }
        self.len += points.len();
    }

    /// Sets the number of points to `len`: new points are copies of `value`, extra points are
    /// removed.
    pub fn resize(&mut self, len: usize, value: PointXYZIRCAEDT) {
        if len <= self.len {
            self.len = len;
            return;
        }
        let n = len - self.len;
        self.reserve(n);
        for slot in &mut self.spare_capacity_mut()[..n] {
            slot.write(value);
        }
        self.len = len;
    }

    /// Removes every point (the capacity stays).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` points (no effect when there are fewer).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes room for at least `additional` more points.
    #[inline(always)]
    pub fn reserve(&mut self, additional: usize) {
        if self.cap - self.len < additional {
            self.grow_for(additional);
        }
    }

    /// The uninitialised room after the points (`capacity - len` slots).
    #[inline(always)]
    pub fn spare_capacity_mut(&mut self) -> &mut [MaybeUninit<PointXYZIRCAEDT>] {
        // SAFETY: slots `len..cap` lie in the region (valid for writes, ours alone); as
        // `MaybeUninit` they need no initialisation.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr
                    .as_ptr()
                    .add(self.len)
                    .cast::<MaybeUninit<PointXYZIRCAEDT>>(),
                self.cap - self.len,
            )
        }
    }

    /// Sets the number of points to `len`.
    ///
    /// # Safety
    /// `len <= capacity()`, and the first `len` slots are initialised (written through
    /// [`PointBuf::spare_capacity_mut`] or before).
    #[inline(always)]
    pub unsafe fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.cap);
        self.len = len;
    }

    /// The points as PointCloud2 `data` bytes (32 per point, [`crate::point`]).
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }

    /// The points, copied into a `Vec` when they live in a loan.
    pub fn into_vec(self) -> Vec<PointXYZIRCAEDT> {
        if self.loan.is_some() {
            return self.to_vec();
        }
        // The emptied buffer left behind owns nothing.
        let mut me = self;
        me.take_heap_vec()
    }

    /// Finishes the frame with header `header`: a loan writes the message around the points
    /// ([`PointMemory::seal`]); the points are read-only from here on.
    pub fn seal(mut self, header: &FrameHeader) -> SealedPoints {
        let len = self.len;
        if let Some(m) = self.loan.as_mut() {
            m.seal(header, len);
        }
        SealedPoints(self)
    }

    /// Grows the region to hold `len + additional` points (at least double, and at least
    /// [`MIN_LOAN_POINTS`] for a loan), moving the points written so far.
    #[cold]
    #[inline(never)]
    fn grow_for(&mut self, additional: usize) {
        let need = self
            .len
            .checked_add(additional)
            .expect("point buffer capacity overflow");
        let want = need.max(self.cap.saturating_mul(2));
        let bigger = match &self.loan {
            Some(m) => m.grow(want.max(MIN_LOAN_POINTS)),
            None => {
                let mut v = self.take_heap_vec();
                let extra = want - v.len();
                v.reserve_exact(extra);
                self.set_heap_vec(v);
                return;
            }
        };
        let mut next = match bigger {
            Some(mem) => PointBuf::in_memory(mem),
            None => PointBuf::with_capacity(want),
        };
        if next.cap < need {
            next = PointBuf::with_capacity(want);
        }
        next.extend_from_slice(self);
        next.moves = self.moves.saturating_add(1);
        *self = next;
    }

    /// The heap `Vec` (this buffer is left empty, without a region).
    fn take_heap_vec(&mut self) -> Vec<PointXYZIRCAEDT> {
        debug_assert!(self.loan.is_none());
        // SAFETY: with no loan, `ptr`/`cap` are the raw parts of a `Vec` we own, whose first
        // `len` points are initialised; `self` forgets them below, so they are owned once.
        let v = unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) };
        self.ptr = NonNull::dangling();
        self.len = 0;
        self.cap = 0;
        v
    }

    /// Takes `v`'s buffer as this heap buffer's region (the current one must be empty).
    fn set_heap_vec(&mut self, v: Vec<PointXYZIRCAEDT>) {
        let mut v = ManuallyDrop::new(v);
        // `Vec::as_mut_ptr` is never null (dangling when unallocated).
        self.ptr = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
        self.len = v.len();
        self.cap = v.capacity();
    }
}

impl Drop for PointBuf {
    fn drop(&mut self) {
        if self.loan.is_none() {
            drop(self.take_heap_vec());
        }
        // A loan is dropped with its field; the points need no drop (`Copy`).
    }
}

impl Default for PointBuf {
    fn default() -> Self {
        PointBuf::new()
    }
}

impl From<Vec<PointXYZIRCAEDT>> for PointBuf {
    fn from(v: Vec<PointXYZIRCAEDT>) -> Self {
        let mut b = PointBuf::new();
        b.set_heap_vec(v);
        b
    }
}

impl FromIterator<PointXYZIRCAEDT> for PointBuf {
    fn from_iter<I: IntoIterator<Item = PointXYZIRCAEDT>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<_>>().into()
    }
}

impl Extend<PointXYZIRCAEDT> for PointBuf {
    fn extend<I: IntoIterator<Item = PointXYZIRCAEDT>>(&mut self, iter: I) {
        for p in iter {
            self.push(p);
        }
    }
}

impl<'a> IntoIterator for &'a PointBuf {
    type Item = &'a PointXYZIRCAEDT;
    type IntoIter = std::slice::Iter<'a, PointXYZIRCAEDT>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut PointBuf {
    type Item = &'a mut PointXYZIRCAEDT;
    type IntoIter = std::slice::IterMut<'a, PointXYZIRCAEDT>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl Deref for PointBuf {
    type Target = [PointXYZIRCAEDT];
    #[inline(always)]
    fn deref(&self) -> &[PointXYZIRCAEDT] {
        // SAFETY: the first `len` points of the region are initialised and the region is valid
        // for reads while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PointBuf {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [PointXYZIRCAEDT] {
        // SAFETY: as `deref`, and the region is ours alone for writes until sealed (a sealed
        // buffer is a `SealedPoints`, which gives no `&mut`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for PointBuf {
    fn clone(&self) -> Self {
        self.to_vec().into()
    }
}

impl PartialEq for PointBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<PointXYZIRCAEDT>> for PointBuf {
    fn eq(&self, other: &Vec<PointXYZIRCAEDT>) -> bool {
        **self == **other
    }
}

impl PartialEq<PointBuf> for Vec<PointXYZIRCAEDT> {
    fn eq(&self, other: &PointBuf) -> bool {
        **self == **other
    }
}

impl fmt::Debug for PointBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PointBuf")
            .field("len", &self.len)
            .field("capacity", &self.cap)
            .field("loaned", &self.loan.is_some())
            .finish()
    }
}

/// The points of a finished frame ([`PointBuf::seal`]): read-only, shared by every sink.
pub struct SealedPoints(PointBuf);

impl SealedPoints {
    /// The points.
    pub fn points(&self) -> &[PointXYZIRCAEDT] {
        &self.0
    }

    /// The loan the points live in, `None` on the heap.
    pub fn memory(&self) -> Option<&dyn PointMemory> {
        self.0.memory()
    }

    /// The heap buffer, emptied, to be reused for another frame; `None` for a loan (it goes
    /// back to its pool when dropped, once every reader let go).
    pub fn into_reusable(self) -> Option<PointBuf> {
        let mut b = self.0;
        if b.loan.is_some() {
            return None;
        }
        b.clear();
        Some(b)
    }
}

impl fmt::Debug for SealedPoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SealedPoints").field(&self.0).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    fn pt(i: u32) -> PointXYZIRCAEDT {
        PointXYZIRCAEDT {
            x: i as f32,
            time_stamp: i,
            ..Default::default()
        }
    }

    /// A loan on the heap that records what was asked of it.
    struct TestLoan {
        buf: Box<[PointXYZIRCAEDT]>,
        room: Arc<AtomicUsize>,
        sealed: Option<(u64, usize)>,
    }

    // SAFETY: `buf` is owned, boxed (stable address), aligned and `buf.len()` points long.
    unsafe impl PointMemory for TestLoan {
        fn region(&mut self) -> (NonNull<PointXYZIRCAEDT>, usize) {
            (NonNull::new(self.buf.as_mut_ptr()).unwrap(), self.buf.len())
        }
        fn grow(&self, points: usize) -> Option<Box<dyn PointMemory>> {
            // The pool has `room` points left in all.
            let left = self.room.load(Relaxed);
            (points <= left).then(|| {
                self.room.store(left - points, Relaxed);
                Box::new(TestLoan {
                    buf: vec![PointXYZIRCAEDT::default(); points].into_boxed_slice(),
                    room: self.room.clone(),
                    sealed: None,
                }) as Box<dyn PointMemory>
            })
        }
        fn seal(&mut self, header: &FrameHeader, points: usize) {
            self.sealed = Some((header.sequence, points));
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn loan(points: usize, room: usize) -> PointBuf {
        PointBuf::in_memory(Box::new(TestLoan {
            buf: vec![PointXYZIRCAEDT::default(); points].into_boxed_slice(),
            room: Arc::new(AtomicUsize::new(room)),
            sealed: None,
        }))
    }

    /// Heap buffers behave as `Vec`: push, extend, clear, truncate, into_vec, spare capacity.
    #[test]
    fn heap_buffer_is_a_vec() {
        let mut b = PointBuf::new();
        assert_eq!((b.len(), b.capacity()), (0, 0));
        for i in 0..100 {
            b.push(pt(i));
        }
        assert_eq!(b.len(), 100);
        assert!(b.capacity() >= 100);
        assert_eq!(b[57], pt(57));
        b.extend_from_slice(&[pt(1000), pt(1001)]);
        assert_eq!(b.len(), 102);
        assert_eq!(b[101], pt(1001));
        b.truncate(50);
        assert_eq!(b.len(), 50);
        b.resize(52, pt(7));
        assert_eq!((b.len(), b[51]), (52, pt(7)));
        b.resize(50, pt(0));
        let cap = b.capacity();
        let spare = b.spare_capacity_mut().len();
        assert_eq!(spare, cap - 50);
        let v = b.clone().into_vec();
        assert_eq!(v, (0..50).map(pt).collect::<Vec<_>>());
        assert_eq!(b, v);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.capacity(), cap);
        assert!(b.memory().is_none());
        assert_eq!(PointBuf::from(v.clone()).into_vec(), v);
    }

    /// Points pushed into a loan stay at the loan's address; growth asks the pool for a
    /// bigger region (at least MIN_LOAN_POINTS) and moves the points once; a pool with no room
    /// moves them to the heap.
    #[test]
    fn loan_grows_from_its_pool_then_the_heap() {
        let mut b = loan(4, 1024);
        let addr = b.as_ptr();
        for i in 0..4 {
            b.push(pt(i));
        }
        assert_eq!(b.as_ptr(), addr, "written in place");
        assert_eq!(b.moves(), 0);
        b.push(pt(4));
        assert!(b.memory().is_some(), "a bigger loan from the pool");
        assert_eq!((b.capacity(), b.moves()), (MIN_LOAN_POINTS, 1));
        assert_eq!(&b[..], &(0..5).map(pt).collect::<Vec<_>>()[..]);
        // The pool is now empty: the next growth goes to the heap.
        b.reserve(MIN_LOAN_POINTS);
        assert!(b.memory().is_none());
        assert_eq!(b.moves(), 2);
        assert_eq!(b.capacity(), 2 * MIN_LOAN_POINTS, "doubled on the heap");
        assert_eq!(&b[..5], &(0..5).map(pt).collect::<Vec<_>>()[..]);
    }

    /// Sealing tells the loan the header and point count once; a sealed heap buffer comes back
    /// empty for reuse, a sealed loan does not.
    #[test]
    fn seal_reaches_the_loan_and_only_heap_buffers_are_reused() {
        let mut b = loan(8, 0);
        b.extend_from_slice(&[pt(1), pt(2), pt(3)]);
        let h = FrameHeader {
            sequence: 42,
            ..Default::default()
        };
        let s = b.seal(&h);
        let l = s
            .memory()
            .unwrap()
            .as_any()
            .downcast_ref::<TestLoan>()
            .unwrap();
        assert_eq!(l.sealed, Some((42, 3)));
        assert_eq!(s.points(), &[pt(1), pt(2), pt(3)]);
        assert!(s.into_reusable().is_none());
        let mut heap = PointBuf::with_capacity(16);
        heap.push(pt(9));
        let back = heap.seal(&h).into_reusable().unwrap();
        assert_eq!((back.len(), back.capacity()), (0, 16));
    }
}
