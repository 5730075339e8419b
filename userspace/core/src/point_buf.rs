//! [`PointBuf`]: the point buffer of a frame, written once by the decoder in the sensor's
//! point layout ([`PointType`]), in memory that every sink and local subscriber reads.
//!
//! A frame's points live either on the heap or in a **loan**: a region of memory lent by a
//! pool outside this crate ([`PointMemory`]), which in the daemon is a chunk of zenoh's POSIX
//! shared-memory pool with room in front of the points for the `sensor_msgs/msg/PointCloud2`
//! CDR prefix and one byte behind them for its suffix. The decoders (through
//! [`crate::scan::FrameBuilder`]) push points into it as into a `Vec`; when the frame is
//! finished, [`PointBuf::seal`] lets the loan write the message around the points, and from
//! then on the points are only read ([`SealedPoints`]): the zenoh sink puts that chunk as it
//! is, the TCP publisher `writev`s the same bytes, the DDS sink hands the same bytes to its DDS
//! implementation. Nothing copies the points after the decoder wrote them.
//!
//! Layouts: a decoder hands each return as a [`PointXYZIRCAEDT`] built in registers (by value
//! to [`PointBuf::push`], or a block at a time through a block writer monomorphised for the
//! buffer's layout, `FillPoints`) and the buffer stores it once in its layout
//! ([`Layout::from_point`]; the SSE2 block kernels store `autoware`, `autoware_xyzirc` and
//! `xyzi` straight from their registers), `point_step` bytes per point, little-endian, packed
//! exactly as the layout's field list says: [`PointBuf::as_bytes`] is the PointCloud2 `data`
//! of the frame.
//!
//! Growth: a buffer that runs out of room grows like a `Vec` (at least doubling). A loan asks
//! its pool for a bigger region ([`PointMemory::grow`]) and moves the points written so far
//! into it (the decoder's own reallocation, as `Vec` would do; [`PointBuf::moves`] counts
//! them); a pool that has none left makes the buffer continue on the heap.

use std::any::Any;
use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::NonNull;

use crate::compact::{FillPoints, SpareRoom};
use crate::header::FrameHeader;
use crate::layout::{Layout, PointType, TimeBase, TimeField};
use crate::point::PointXYZIRCAEDT;
use crate::with_layout;

/// The smallest capacity, in points, a loaned buffer grows to: one allocation from the pool
/// per 32 KiB of `autoware` points at most while a first frame finds its size (later frames
/// start with the previous frame's size).
pub const MIN_LOAN_POINTS: usize = 1024;

/// The first point of a buffer without a region: dangling but aligned to 8 (a `u64`'s), so
/// that the empty slice of any layout made from it is aligned ([`PointBuf::typed`]).
const DANGLING: NonNull<u8> = NonNull::<u64>::dangling().cast::<u8>();

/// Memory lent to a [`PointBuf`] by a pool outside this crate (the daemon's zenoh
/// shared-memory pool).
///
/// # Safety
/// An implementation guarantees that [`PointMemory::region`] returns the same pointer and
/// length for the life of the value, and that the pointer is aligned to [`crate::layout::POINT_ALIGN`] and
/// valid for reads and writes of that many bytes that no one else reads or writes until
/// [`PointMemory::seal`] is called; after `seal`, valid for reads of the sealed points until
/// the value is dropped.
pub unsafe trait PointMemory: Send + Sync + 'static {
    /// The points' region: its first byte and its length in bytes.
    fn region(&mut self) -> (NonNull<u8>, usize);

    /// A new region of the same kind with room for at least `bytes` bytes of points, for a
    /// frame that outgrew this one; `None` when the pool has no room (the buffer continues on
    /// the heap).
    fn grow(&self, bytes: usize) -> Option<Box<dyn PointMemory>>;

    /// The frame is finished with `points` points of layout `point_type` written at the start
    /// of the region: the memory may now write what surrounds them (the CDR prefix and suffix)
    /// and make the whole shareable. Called once, by [`PointBuf::seal`]; nothing writes the
    /// points afterwards.
    fn seal(&mut self, header: &FrameHeader, point_type: PointType, points: usize);

    /// The concrete type, for the sink that knows it (the zenoh sink takes its chunk back).
    fn as_any(&self) -> &dyn Any;
}

/// A growable buffer of points in one layout (module documentation): `Vec`-like on the heap or
/// in a loan. Cloning copies the points to the heap.
pub struct PointBuf {
    /// First byte: a `Vec<MaybeUninit<u64>>`'s buffer (heap, 8-aligned) or the loan's region.
    ptr: NonNull<u8>,
    /// Points written, `<= cap`; the first `len * step` bytes are initialised.
    len: usize,
    /// Points the region holds.
    cap: usize,
    /// The layout (its `point_step` is [`PointType::point_step`]).
    point_type: PointType,
    /// The frame's start and the current packet's time (ns since the Unix epoch), the
    /// references of the layouts' stored times.
    time: TimeBase,
    /// `None`: `ptr` is the buffer of a `Vec<MaybeUninit<u64>>` of `heap_words` capacity this
    /// value owns.
    loan: Option<Box<dyn PointMemory>>,
    heap_words: usize,
    /// Times the points moved into a bigger region (growth).
    moves: u32,
}

// SAFETY: a `PointBuf` owns its region (a `Vec`'s buffer, or a loan that is `Send`) as a `Vec`
// does; the raw pointer is never shared outside `&self`/`&mut self` borrows.
unsafe impl Send for PointBuf {}
// SAFETY: `&PointBuf` only reads the points (plain data) and the loan, which is `Sync`.
unsafe impl Sync for PointBuf {}

impl PointBuf {
    /// An empty `autoware` heap buffer (no allocation).
    pub const fn new() -> Self {
        Self::empty(PointType::Autoware)
    }

    const fn empty(point_type: PointType) -> Self {
        PointBuf {
            ptr: DANGLING,
            len: 0,
            cap: 0,
            point_type,
            time: TimeBase {
                start_ns: 0,
                packet_ns: 0,
            },
            loan: None,
            heap_words: 0,
            moves: 0,
        }
    }

    /// An empty `autoware` heap buffer with room for `capacity` points.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_type(PointType::Autoware, capacity)
    }

    /// An empty heap buffer of layout `point_type` with room for `capacity` points.
    pub fn with_type(point_type: PointType, capacity: usize) -> Self {
        let mut b = Self::empty(point_type);
        b.reserve(capacity);
        b
    }

    /// An empty buffer of layout `point_type` in the loaned `memory`.
    pub fn in_memory(mut memory: Box<dyn PointMemory>, point_type: PointType) -> Self {
        let (ptr, bytes) = memory.region();
        let step = point_type.point_step();
        PointBuf {
            ptr,
            len: 0,
            cap: bytes / step,
            point_type,
            time: TimeBase {
                start_ns: 0,
                packet_ns: 0,
            },
            loan: Some(memory),
            heap_words: 0,
            moves: 0,
        }
    }

    /// The layout of the points.
    #[inline(always)]
    pub fn point_type(&self) -> PointType {
        self.point_type
    }

    /// Bytes per point (the layout's `point_step`).
    #[inline(always)]
    pub fn point_step(&self) -> usize {
        self.step()
    }

    #[inline(always)]
    fn step(&self) -> usize {
        self.point_type.point_step()
    }

    /// Makes this empty buffer hold layout `point_type` (its room in bytes stays, so its
    /// capacity in points changes); a pooled buffer is reused for any sensor this way. A
    /// buffer that holds points keeps its layout and returns `false`.
    pub fn set_point_type(&mut self, point_type: PointType) -> bool {
        if !self.is_empty() {
            return self.point_type == point_type;
        }
        let bytes = self.cap * self.step();
        self.point_type = point_type;
        self.cap = bytes / self.step();
        true
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

    /// The frame start (ns since the Unix epoch) the points' times refer to.
    pub fn start_ns(&self) -> u64 {
        self.time.start_ns
    }

    /// Sets the sensor time (ns since the Unix epoch) of the packet (Ouster: the column) whose
    /// points are pushed next: the `hesai` layout stores it as every such point's time.
    #[inline(always)]
    pub fn set_packet_ns(&mut self, packet_ns: u64) {
        self.time.packet_ns = packet_ns;
    }

    /// Sets the frame start (ns since the Unix epoch) that the `time_stamp` of the points
    /// pushed from now on is relative to; the absolute-time layouts (`hesai`, `robosense`)
    /// store `start_ns + time_stamp`. Points already written are unchanged (see
    /// [`PointBuf::rebase`] to move them with it).
    #[inline(always)]
    pub fn set_start_ns(&mut self, start_ns: u64) {
        self.time.start_ns = start_ns;
    }

    /// Moves the frame start to `start_ns`, earlier than the current one, keeping every
    /// written point's time: relative times grow by the difference (saturating), absolute
    /// times stay. A frame whose first column arrived after a later one (Ouster) needs it.
    /// Relative f32 seconds are read back rounded to the ns before they move.
    pub fn rebase(&mut self, start_ns: u64) {
        let old = self.time.start_ns;
        let delta = old.saturating_sub(start_ns);
        if delta > 0 && self.point_type.time() != TimeField::AbsoluteSecF64 {
            with_layout!(self.point_type, L => {
                let new = start_ns;
                for p in self.typed_mut_unchecked::<L>() {
                    if let Some(t) = p.time_ns(old) {
                        let t = t.saturating_add(delta).min(u64::from(u32::MAX)) as u32;
                        p.set_time_ns(t, new);
                    }
                }
            });
        }
        self.time.start_ns = start_ns;
    }

    /// Moves the frame start by `shift_ns` (ns, saturating) keeping every point's time
    /// relative to it: the absolute-time layouts (`hesai`, `robosense`) move each point's time
    /// with it, the relative ones only the start. A frame decoded on the stream's time line
    /// is published on the sensor's clock this way after a clock step
    /// ([`crate::scan::FrameBuilder::emit`]).
    pub fn shift_start(&mut self, shift_ns: i64) {
        let old = self.time.start_ns;
        let new = old.saturating_add_signed(shift_ns);
        if self.point_type.time() == TimeField::AbsoluteSecF64 {
            with_layout!(self.point_type, L => {
                for p in self.typed_mut_unchecked::<L>() {
                    if let Some(t) = p.time_ns(old) {
                        p.set_time_ns(t.min(u64::from(u32::MAX)) as u32, new);
                    }
                }
            });
        }
        self.time.start_ns = new;
        self.time.packet_ns = self.time.packet_ns.saturating_add_signed(shift_ns);
    }

    /// Appends `p` (its `time_stamp` relative to [`PointBuf::start_ns`]), stored in the
    /// buffer's layout, growing when full.
    #[inline(always)]
    pub fn push(&mut self, p: PointXYZIRCAEDT) {
        with_layout!(self.point_type, L => {
            let v = L::from_point(&p, &self.time);
            self.push_as(v)
        })
    }

    /// Appends a point already in the buffer's layout (a decoder that fills a layout's own
    /// fields, such as Ouster's signal and near-infrared).
    ///
    /// # Panics
    /// When `L` is not the buffer's layout.
    #[inline(always)]
    pub fn push_as<L: Layout>(&mut self, v: L) {
        assert_eq!(L::TYPE, self.point_type, "point layout");
        if self.len == self.cap {
            self.grow_for(1);
        }
        // SAFETY: `len < cap` now; the region is valid for writes of `cap * step` bytes and
        // ours alone (the `PointMemory` contract, or the `Vec` we own), and `step` is
        // `size_of::<L>()` (the assertion above); the write is unaligned.
        unsafe {
            self.ptr
                .as_ptr()
                .add(self.len * size_of::<L>())
                .cast::<L>()
                .write_unaligned(v)
        };
        self.len += 1;
    }

    /// Appends every point of `points` (times relative to [`PointBuf::start_ns`]).
    pub fn extend_points(&mut self, points: &[PointXYZIRCAEDT]) {
        self.reserve(points.len());
        with_layout!(self.point_type, L => {
            let time = self.time;
            let spare = self.spare_typed::<L>();
            for (slot, p) in spare.iter_mut().zip(points) {
                slot.write(L::from_point(p, &time));
            }
        });
        self.len += points.len();
    }

    /// Reserves room for `n` more points and lets `f` write them, each built in registers and
    /// stored once in the buffer's layout (monomorphised per layout: [`FillPoints`]); keeps
    /// the ones it kept (at most `n`).
    #[inline(always)]
    pub(crate) fn extend_compacted_with<F: FillPoints>(&mut self, n: usize, f: F) {
        let time = self.time;
        with_layout!(self.point_type, L => {
            crate::compact::extend_compacted_at(&mut Typed::<L>::new(self), n, time, |c| f.fill(c))
        })
    }

    /// Appends `value(k)` for every set bit `k` of `mask`, in bit order, each stored once in
    /// the buffer's layout.
    #[inline(always)]
    pub(crate) fn extend_masked(
        &mut self,
        mask: u32,
        mut value: impl FnMut(usize) -> PointXYZIRCAEDT,
    ) {
        let time = self.time;
        with_layout!(self.point_type, L => {
            crate::compact::extend_masked(&mut Typed::<L>::new(self), mask, |k| {
                L::from_point(&value(k), &time)
            })
        })
    }

    /// Sets the number of points to `len`: new points are copies of `value` (stored in the
    /// layout), extra points are removed.
    pub fn resize(&mut self, len: usize, value: PointXYZIRCAEDT) {
        if len <= self.len {
            self.len = len;
            return;
        }
        let n = len - self.len;
        self.reserve(n);
        with_layout!(self.point_type, L => {
            let v = L::from_point(&value, &self.time);
            for slot in &mut self.spare_typed::<L>()[..n] {
                slot.write(v);
            }
        });
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

    /// The points as PointCloud2 `data` bytes (`point_step` per point, in the layout).
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the first `len * step` bytes of the region are initialised and valid for
        // reads while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len * self.step()) }
    }

    /// The points as layout `L`, `None` when the buffer has another layout.
    pub fn typed<L: Layout>(&self) -> Option<&[L]> {
        (L::TYPE == self.point_type).then(|| {
            // SAFETY: the layout is `L`, so the first `len` points are initialised `L`s
            // (`size_of::<L>() == step`); the region is aligned to `POINT_ALIGN`, which is at
            // least `align_of::<L>()` for every layout (asserted in `crate::layout`).
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<L>(), self.len) }
        })
    }

    /// The points as layout `L`, mutable, `None` when the buffer has another layout.
    pub fn typed_mut<L: Layout>(&mut self) -> Option<&mut [L]> {
        (L::TYPE == self.point_type).then(|| self.typed_mut_unchecked::<L>())
    }

    /// The points of an `autoware` buffer, `None` for another layout.
    pub fn try_autoware(&self) -> Option<&[PointXYZIRCAEDT]> {
        self.typed()
    }

    /// The points of an `autoware` buffer: the view every decoder test uses.
    ///
    /// # Panics
    /// When the buffer has another layout (a reader that does not know the layout reads
    /// [`PointBuf::as_bytes`] with [`PointType::fields`]).
    pub fn autoware(&self) -> &[PointXYZIRCAEDT] {
        match self.typed() {
            Some(p) => p,
            None => panic!("points are {}, not autoware", self.point_type),
        }
    }

    /// [`PointBuf::autoware`], mutable.
    ///
    /// # Panics
    /// When the buffer has another layout.
    pub fn autoware_mut(&mut self) -> &mut [PointXYZIRCAEDT] {
        let t = self.point_type;
        match self.typed_mut() {
            Some(p) => p,
            None => panic!("points are {t}, not autoware"),
        }
    }

    /// The time of point `i`, ns after [`PointBuf::start_ns`]; `None` past the end or when the
    /// layout keeps no time.
    pub fn time_ns(&self, i: usize) -> Option<u64> {
        if i >= self.len {
            return None;
        }
        with_layout!(self.point_type, L => {
            let p: L = bytemuck::pod_read_unaligned(&self.as_bytes()[i * self.step()..][..self.step()]);
            p.time_ns(self.time.start_ns)
        })
    }

    /// Sorts the points by time (stable); a layout without time keeps its order.
    pub fn sort_by_time(&mut self) {
        let start = self.time.start_ns;
        with_layout!(self.point_type, L => {
            self.typed_mut_unchecked::<L>()
                .sort_by_key(|p| p.time_ns(start).unwrap_or(0));
        })
    }

    /// Moves the points from `from` on to the end of `next` (same layout), their relative times
    /// moved from this buffer's start to `next`'s: a point `t` ns after this start is `t −
    /// shift` after `next`'s (saturating at 0), where `shift` is `next.start_ns() −
    /// self.start_ns()`; absolute times stay as they are.
    /// `times`, when given, are the points' times after this start (the scan assembler's own
    /// record, for the layouts that keep none). This buffer keeps the points before `from`.
    pub fn move_tail(&mut self, from: usize, next: &mut PointBuf, times: Option<&[u32]>) {
        debug_assert_eq!(self.point_type, next.point_type);
        let from = from.min(self.len);
        let n = self.len - from;
        let shift = next.time.start_ns.saturating_sub(self.time.start_ns);
        let (old, new) = (self.time.start_ns, next.time.start_ns);
        let relative = self.point_type.time() != TimeField::AbsoluteSecF64;
        next.reserve(n);
        with_layout!(self.point_type, L => {
            let src = &self.typed_mut_unchecked::<L>()[from..];
            let spare = next.spare_typed::<L>();
            for (k, (slot, p)) in spare.iter_mut().zip(src).enumerate() {
                let mut p = *p;
                let t = times.and_then(|t| t.get(k).map(|&t| u64::from(t)));
                if let Some(t) = t.or_else(|| p.time_ns(old)).filter(|_| relative) {
                    p.set_time_ns(t.saturating_sub(shift).min(u64::from(u32::MAX)) as u32, new);
                }
                slot.write(p);
            }
        });
        next.len += n;
        self.len = from;
    }

    /// The points of an `autoware` heap buffer as a `Vec` (a loan's, or another layout's,
    /// converted: another layout's fields that `autoware` has are kept, the rest zero).
    pub fn into_vec(self) -> Vec<PointXYZIRCAEDT> {
        match self.typed::<PointXYZIRCAEDT>() {
            Some(p) => p.to_vec(),
            None => Vec::new(),
        }
    }

    /// Finishes the frame with header `header`: a loan writes the message around the points
    /// ([`PointMemory::seal`]); the points are read-only from here on.
    pub fn seal(mut self, header: &FrameHeader) -> SealedPoints {
        let (len, t) = (self.len, self.point_type);
        if let Some(m) = self.loan.as_mut() {
            m.seal(header, t, len);
        }
        SealedPoints(self)
    }

    /// The points as `L` without checking the layout (the caller dispatched on it).
    fn typed_mut_unchecked<L: Layout>(&mut self) -> &mut [L] {
        debug_assert_eq!(L::TYPE, self.point_type);
        assert_eq!(size_of::<L>(), self.step(), "point layout");
        // SAFETY: `step == size_of::<L>()` (asserted), the first `len` points are initialised
        // and ours alone for writes until sealed (a sealed buffer is a `SealedPoints`, which
        // gives no `&mut`); the region is aligned to `POINT_ALIGN >= align_of::<L>()`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<L>(), self.len) }
    }

    /// The uninitialised room after the points as `L` slots (`capacity - len`).
    #[inline(always)]
    fn spare_typed<L: Layout>(&mut self) -> &mut [MaybeUninit<L>] {
        assert_eq!(size_of::<L>(), self.step(), "point layout");
        // SAFETY: slots `len..cap` lie in the region (valid for writes, ours alone), `step ==
        // size_of::<L>()` (asserted) and the region is aligned for `L`; as `MaybeUninit` they
        // need no initialisation.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr
                    .as_ptr()
                    .add(self.len * self.step())
                    .cast::<MaybeUninit<L>>(),
                self.cap - self.len,
            )
        }
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
            Some(m) => m.grow(want.max(MIN_LOAN_POINTS).saturating_mul(self.step())),
            None => {
                let len = self.len;
                let mut v = self.take_heap_vec();
                let words = (want * self.step()).div_ceil(8);
                v.reserve_exact(words - v.len());
                self.set_heap_vec(v);
                self.len = len;
                return;
            }
        };
        let mut next = match bigger {
            Some(mem) => PointBuf::in_memory(mem, self.point_type),
            None => PointBuf::with_type(self.point_type, want),
        };
        if next.cap < need {
            next = PointBuf::with_type(self.point_type, want);
        }
        next.time = self.time;
        next.copy_from(self);
        next.moves = self.moves.saturating_add(1);
        *self = next;
    }

    /// Appends a copy of `other`'s points (same layout, room reserved by the caller or here).
    fn copy_from(&mut self, other: &PointBuf) {
        debug_assert_eq!(self.step(), other.step());
        self.reserve(other.len);
        let bytes = other.as_bytes();
        // SAFETY: `reserve` made room for `other.len` more points (`bytes.len()` bytes) after
        // ours; `other` is a different buffer (borrowed shared while we are borrowed
        // mutably), so the ranges cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(self.len * self.step()),
                bytes.len(),
            );
        }
        self.len += other.len;
    }

    /// The heap `Vec` of words with the points' bytes (this buffer is left empty, without a
    /// region); its length is the words the points fill.
    fn take_heap_vec(&mut self) -> Vec<MaybeUninit<u64>> {
        debug_assert!(self.loan.is_none());
        let words = (self.len * self.step()).div_ceil(8);
        // SAFETY: with no loan, `ptr` is the buffer of a `Vec<MaybeUninit<u64>>` of
        // `heap_words` capacity we own (or dangling with 0), and `words <= heap_words` (the
        // points fit in it); `MaybeUninit` words need no initialisation. `self` forgets the
        // buffer below, so it is owned once.
        let v = unsafe {
            Vec::from_raw_parts(
                self.ptr.as_ptr().cast::<MaybeUninit<u64>>(),
                words,
                self.heap_words,
            )
        };
        self.ptr = DANGLING;
        self.len = 0;
        self.cap = 0;
        self.heap_words = 0;
        v
    }

    /// Takes `v`'s buffer as this heap buffer's region (the current one must be empty); the
    /// points are the bytes of its words, as many whole points as they hold.
    fn set_heap_vec(&mut self, v: Vec<MaybeUninit<u64>>) {
        let mut v = ManuallyDrop::new(v);
        // `Vec::as_mut_ptr` is never null (dangling when unallocated).
        self.ptr = NonNull::new(v.as_mut_ptr().cast::<u8>()).unwrap_or(DANGLING);
        self.len = v.len() * 8 / self.step();
        self.cap = v.capacity() * 8 / self.step();
        self.heap_words = v.capacity();
    }
}

/// The buffer as the spare room of the block writers in its layout `L`.
struct Typed<'a, L>(&'a mut PointBuf, std::marker::PhantomData<L>);

impl<'a, L: Layout> Typed<'a, L> {
    /// The buffer, whose layout must be `L` (the caller dispatched on it).
    #[inline(always)]
    fn new(b: &'a mut PointBuf) -> Self {
        debug_assert_eq!(L::TYPE, b.point_type);
        Typed(b, std::marker::PhantomData)
    }
}

impl<L: Layout> SpareRoom<L> for Typed<'_, L> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len
    }
    #[inline(always)]
    fn reserve(&mut self, n: usize) {
        self.0.reserve(n);
    }
    #[inline(always)]
    fn spare_capacity_mut(&mut self) -> &mut [MaybeUninit<L>] {
        self.0.spare_typed::<L>()
    }
    #[inline(always)]
    unsafe fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.0.cap);
        self.0.len = len;
    }
}

impl Drop for PointBuf {
    fn drop(&mut self) {
        if self.loan.is_none() {
            drop(self.take_heap_vec());
        }
        // A loan is dropped with its field; the points need no drop (plain data).
    }
}

impl Default for PointBuf {
    fn default() -> Self {
        PointBuf::new()
    }
}

impl From<Vec<PointXYZIRCAEDT>> for PointBuf {
    /// An `autoware` heap buffer of `v`'s points, with at least `v`'s capacity.
    fn from(v: Vec<PointXYZIRCAEDT>) -> Self {
        let mut b = PointBuf::with_capacity(v.capacity());
        b.extend_points(&v);
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

impl Clone for PointBuf {
    fn clone(&self) -> Self {
        let mut b = PointBuf::with_type(self.point_type, self.len);
        b.time = self.time;
        b.copy_from(self);
        b
    }
}

impl PartialEq for PointBuf {
    fn eq(&self, other: &Self) -> bool {
        self.point_type == other.point_type && self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<Vec<PointXYZIRCAEDT>> for PointBuf {
    fn eq(&self, other: &Vec<PointXYZIRCAEDT>) -> bool {
        self.try_autoware() == Some(&other[..])
    }
}

impl PartialEq<PointBuf> for Vec<PointXYZIRCAEDT> {
    fn eq(&self, other: &PointBuf) -> bool {
        other == self
    }
}

impl fmt::Debug for PointBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PointBuf")
            .field("point_type", &self.point_type)
            .field("len", &self.len)
            .field("capacity", &self.cap)
            .field("loaned", &self.loan.is_some())
            .finish()
    }
}

/// The points of a finished frame ([`PointBuf::seal`]): read-only, shared by every sink.
pub struct SealedPoints(PointBuf);

impl SealedPoints {
    /// The points' buffer (read-only).
    pub fn buf(&self) -> &PointBuf {
        &self.0
    }

    /// The layout.
    pub fn point_type(&self) -> PointType {
        self.0.point_type
    }

    /// Points.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// No point.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The points as PointCloud2 `data` bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
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
    use crate::compact::Compactor;
    use crate::layout::{HesaiPoint, POINT_TYPES, PointXYZI, VelodynePoint};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    fn pt(i: u32) -> PointXYZIRCAEDT {
        PointXYZIRCAEDT {
            x: i as f32,
            intensity: (i % 256) as u8,
            channel: (i % 7) as u16,
            distance: i as f32 * 0.5,
            time_stamp: i * 1000,
            ..Default::default()
        }
    }

    /// A loan on the heap that records what was asked of it.
    struct TestLoan {
        buf: Box<[u64]>,
        room: Arc<AtomicUsize>,
        sealed: Option<(u64, PointType, usize)>,
    }

    // SAFETY: `buf` is owned, boxed (stable address), 8-aligned and `8 * buf.len()` bytes long.
    unsafe impl PointMemory for TestLoan {
        fn region(&mut self) -> (NonNull<u8>, usize) {
            (
                NonNull::new(self.buf.as_mut_ptr().cast()).unwrap(),
                self.buf.len() * 8,
            )
        }
        fn grow(&self, bytes: usize) -> Option<Box<dyn PointMemory>> {
            // The pool has `room` bytes left in all.
            let left = self.room.load(Relaxed);
            (bytes <= left).then(|| {
                self.room.store(left - bytes, Relaxed);
                Box::new(TestLoan {
                    buf: vec![0u64; bytes.div_ceil(8)].into_boxed_slice(),
                    room: self.room.clone(),
                    sealed: None,
                }) as Box<dyn PointMemory>
            })
        }
        fn seal(&mut self, header: &FrameHeader, t: PointType, points: usize) {
            self.sealed = Some((header.sequence, t, points));
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn loan(t: PointType, points: usize, room_bytes: usize) -> PointBuf {
        let bytes = points * t.point_step();
        PointBuf::in_memory(
            Box::new(TestLoan {
                buf: vec![0u64; bytes / 8].into_boxed_slice(),
                room: Arc::new(AtomicUsize::new(room_bytes)),
                sealed: None,
            }),
            t,
        )
    }

    /// An empty buffer of any layout, made or emptied, views as an aligned empty slice (its
    /// dangling pointer is 8-aligned).
    #[test]
    fn empty_buffers_view_aligned() {
        for t in POINT_TYPES {
            let mut b = PointBuf::with_type(t, 0);
            with_layout!(t, L => {
                let v = b.typed::<L>().unwrap();
                assert!(v.is_empty());
                assert_eq!(v.as_ptr() as usize % align_of::<L>(), 0, "{t}");
            });
            b.reserve(3);
            let mut w = b.clone();
            w.truncate(0);
            let _ = b.take_heap_vec();
            assert_eq!(b.as_bytes().as_ptr() as usize % 8, 0, "{t}");
            assert_eq!(w.as_bytes().as_ptr() as usize % 4, 0, "{t}");
        }
    }

    /// Heap buffers behave as `Vec`: push, extend, clear, truncate, into_vec, growth.
    #[test]
    fn heap_buffer_is_a_vec() {
        let mut b = PointBuf::new();
        assert_eq!((b.len(), b.capacity()), (0, 0));
        for i in 0..100 {
            b.push(pt(i));
        }
        assert_eq!(b.len(), 100);
        assert!(b.capacity() >= 100);
        assert_eq!(b.autoware()[57], pt(57));
        b.extend_points(&[pt(1000), pt(1001)]);
        assert_eq!(b.len(), 102);
        assert_eq!(b.autoware()[101], pt(1001));
        b.truncate(50);
        assert_eq!(b.len(), 50);
        let cap = b.capacity();
        let v = b.clone().into_vec();
        assert_eq!(v, (0..50).map(pt).collect::<Vec<_>>());
        assert_eq!(b, v);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.capacity(), cap);
        assert!(b.memory().is_none());
        assert_eq!(PointBuf::from(v.clone()).into_vec(), v);
        assert_eq!(b.as_bytes().len(), 0);
    }

    /// Every layout stores exactly `Layout::from_point` of each pushed point, at `point_step`
    /// bytes per point, through `push`, `extend_points`, the staged block writers and growth
    /// (heap and loan alike).
    #[test]
    fn every_layout_stores_its_conversion() {
        let start = 1_700_000_000_000_000_000;
        for t in POINT_TYPES {
            let pts: Vec<_> = (0..3000).map(pt).collect();
            let tb = TimeBase {
                start_ns: start,
                packet_ns: start + 77,
            };
            let want: Vec<u8> = with_layout!(t, L => pts
                .iter()
                .flat_map(|p| bytemuck::bytes_of(&L::from_point(p, &tb)).to_vec())
                .collect());
            for mut b in [PointBuf::with_type(t, 0), loan(t, 16, 1 << 20)] {
                b.set_start_ns(start);
                b.set_packet_ns(start + 77);
                for p in &pts[..1000] {
                    b.push(*p);
                }
                b.extend_points(&pts[1000..2000]);
                for chunk in pts[2000..].chunks(32) {
                    b.extend_masked(u32::MAX >> (32 - chunk.len()), |k| chunk[k]);
                }
                assert_eq!(b.point_step(), t.point_step());
                assert_eq!(b.as_bytes(), &want[..], "{t}");
                assert!(b.moves() > 0 || b.memory().is_none(), "{t}: the loan grew");
            }
        }
    }

    /// A block writer that puts `n` candidates and keeps those `keep` says.
    struct Candidates {
        n: u32,
        keep: fn(u32) -> bool,
    }

    impl FillPoints for Candidates {
        fn fill<L: Layout>(self, out: &mut Compactor<'_, L>) {
            for i in 0..self.n {
                out.put_point(pt(i), (self.keep)(i));
            }
        }
    }

    /// The compacted block writer keeps exactly the points `put` kept, in every layout.
    #[test]
    fn compacted_blocks_keep_the_kept_points() {
        for t in [PointType::Autoware, PointType::Xyzi] {
            let mut b = PointBuf::with_type(t, 0);
            b.extend_compacted_with(
                600,
                Candidates {
                    n: 600,
                    keep: |i| i % 3 == 0,
                },
            );
            b.extend_compacted_with(
                10,
                Candidates {
                    n: 10,
                    keep: |i| i % 2 == 1,
                },
            );
            let kept: Vec<u32> = (0..600)
                .filter(|i| i % 3 == 0)
                .chain([1, 3, 5, 7, 9])
                .collect();
            assert_eq!(b.len(), kept.len(), "{t}");
            for (k, &i) in kept.iter().enumerate() {
                assert_eq!(
                    b.time_ns(k),
                    (t == PointType::Autoware).then_some(u64::from(i) * 1000)
                );
            }
            if t == PointType::Xyzi {
                let x = b.typed::<PointXYZI>().unwrap();
                assert_eq!(x[5].x, 15.0);
                assert_eq!(x[201].x, 3.0);
            }
        }
    }

    /// A rebase keeps every point's time; a tail moves to the next frame with its times moved
    /// to the next start; a sort orders by time.
    #[test]
    fn rebase_move_tail_and_sort_keep_times() {
        let start = 5_000_000_000u64;
        for t in [
            PointType::Autoware,
            PointType::Velodyne,
            PointType::Robosense,
        ] {
            let mut b = PointBuf::with_type(t, 0);
            b.set_start_ns(start);
            b.extend_points(&[pt(3), pt(1), pt(2)]);
            b.rebase(start - 500);
            assert_eq!(b.start_ns(), start - 500);
            // Read back exactly: f32 s of whole µs round to the ns, and f64 s near 5 s hold
            // the ns exactly.
            assert_eq!(
                (0..3).map(|i| b.time_ns(i).unwrap()).collect::<Vec<_>>(),
                vec![3500, 1500, 2500],
                "{t}"
            );
            b.sort_by_time();
            assert_eq!(b.time_ns(0), Some(1500), "{t}");
            let mut next = PointBuf::with_type(t, 0);
            next.set_start_ns(start + 1000);
            b.move_tail(1, &mut next, None);
            assert_eq!((b.len(), next.len()), (1, 2));
            assert_eq!(
                next.time_ns(0),
                Some(1000),
                "{t}: 2500 after start-500 is 1000 after start+1000"
            );
            assert_eq!(next.time_ns(1), Some(2000), "{t}");
        }
        let h = {
            let mut b = PointBuf::with_type(PointType::Hesai, 1);
            b.set_start_ns(start);
            b.set_packet_ns(start + 40);
            b.push(pt(1));
            b.typed::<HesaiPoint>().unwrap()[0]
        };
        let ts = h.timestamp;
        assert_eq!(ts, (start + 40) as f64 * 1e-9, "hesai: the packet's time");
        let mut v = PointBuf::with_type(PointType::Velodyne, 1);
        v.push(pt(2));
        let vt = v.typed::<VelodynePoint>().unwrap()[0].time;
        assert_eq!(vt, 2e-6_f32);
        // A layout without time moves its points with the assembler's own times.
        let mut x = PointBuf::with_type(PointType::Xyzi, 0);
        x.extend_points(&[pt(1), pt(2)]);
        let mut nx = PointBuf::with_type(PointType::Xyzi, 0);
        x.move_tail(0, &mut nx, Some(&[10, 20]));
        assert_eq!(nx.typed::<PointXYZI>().unwrap()[1].x, 2.0);
        assert_eq!(nx.time_ns(0), None);
    }

    /// Points pushed into a loan stay at the loan's address; growth asks the pool for a
    /// bigger region (at least MIN_LOAN_POINTS) and moves the points once; a pool with no room
    /// moves them to the heap.
    #[test]
    fn loan_grows_from_its_pool_then_the_heap() {
        let mut b = loan(PointType::Autoware, 4, 1024 * 32);
        let addr = b.as_bytes().as_ptr();
        for i in 0..4 {
            b.push(pt(i));
        }
        assert_eq!(b.as_bytes().as_ptr(), addr, "written in place");
        assert_eq!(b.moves(), 0);
        b.push(pt(4));
        assert!(b.memory().is_some(), "a bigger loan from the pool");
        assert_eq!((b.capacity(), b.moves()), (MIN_LOAN_POINTS, 1));
        assert_eq!(b.autoware(), &(0..5).map(pt).collect::<Vec<_>>()[..]);
        // The pool is now empty: the next growth goes to the heap.
        b.reserve(MIN_LOAN_POINTS);
        assert!(b.memory().is_none());
        assert_eq!(b.moves(), 2);
        assert_eq!(b.capacity(), 2 * MIN_LOAN_POINTS, "doubled on the heap");
        assert_eq!(&b.autoware()[..5], &(0..5).map(pt).collect::<Vec<_>>()[..]);
    }

    /// Sealing tells the loan the header, layout and point count once; a sealed heap buffer
    /// comes back empty for reuse, a sealed loan does not.
    #[test]
    fn seal_reaches_the_loan_and_only_heap_buffers_are_reused() {
        let mut b = loan(PointType::Xyzi, 8, 0);
        b.extend_points(&[pt(1), pt(2), pt(3)]);
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
        assert_eq!(l.sealed, Some((42, PointType::Xyzi, 3)));
        assert_eq!(s.as_bytes().len(), 48);
        assert!(s.into_reusable().is_none());
        let mut heap = PointBuf::with_capacity(16);
        heap.push(pt(9));
        let back = heap.seal(&h).into_reusable().unwrap();
        assert_eq!((back.len(), back.capacity()), (0, 16));
    }
}
