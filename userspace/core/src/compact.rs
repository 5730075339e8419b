//! Writing values into a buffer's spare capacity without zero-filling it first: the write
//! cursor [`Compactor`] (a branch-free compaction: every candidate is written, the kept ones
//! advance the position), [`extend_compacted_at`] and [`extend_masked`], over any
//! [`SpareRoom`] (`Vec<T>` and the frames' [`crate::point_buf::PointBuf`]). The bottom of the
//! stack, below the point buffer and the SIMD kernels (`simd`) that write through it; one of
//! the three modules allowed `unsafe` (`lib.rs`), each block with its `// SAFETY:` invariant.

use std::mem::MaybeUninit;

use crate::layout::{Layout, TimeBase};
use crate::point::PointXYZIRCAEDT;

/// A write cursor over `n >= 1` uninitialised slots at the end of a `Vec` (its spare
/// capacity), created by [`extend_compacted`].
///
/// Invariant: the first `min(written, n)` slots are initialised. [`Compactor::put`] writes the
/// slot at the write position (clamped to the last slot) before the position moves past it,
/// which keeps the invariant for any sequence of calls; [`extend_compacted`] then sets the
/// `Vec`'s length to include exactly those slots. A caller that puts at most `n` values (kept
/// or not) never has one overwritten: the write position is below the number of puts so far.
///
/// The fields are private to this module, so safe code elsewhere cannot break the invariant:
/// the SIMD kernels (`simd`) write through [`Compactor::raw_parts`] and move the position with
/// the `unsafe` [`Compactor::set_written`], whose contract is the invariant.
pub(crate) struct Compactor<'a, T> {
    spare: &'a mut [MaybeUninit<T>],
    written: usize,
    /// The frame start and packet time that a point layout's time field refers to
    /// ([`Compactor::put_point`]).
    time: TimeBase,
}

impl<T> Compactor<'_, T> {
    /// The slots' base pointer, their count and the write position, for a kernel that writes
    /// slots itself (then [`Self::set_written`]).
    #[inline(always)]
    pub(crate) fn raw_parts(&mut self) -> (*mut MaybeUninit<T>, usize, usize) {
        (self.spare.as_mut_ptr(), self.spare.len(), self.written)
    }

    /// The times a layout's time field refers to.
    #[inline(always)]
    pub(crate) fn time(&self) -> TimeBase {
        self.time
    }

    /// Moves the write position to `n`.
    ///
    /// # Safety
    /// `n <= ` the slot count, and the first `n` slots are initialised (the type's invariant).
    #[inline(always)]
    pub(crate) unsafe fn set_written(&mut self, n: usize) {
        self.written = n;
    }

    /// The slot at the write position; the last slot once all are written (overwriting it is
    /// the caller's logic error, never undefined behaviour).
    #[inline(always)]
    fn slot(&mut self) -> &mut MaybeUninit<T> {
        let last = self.spare.len().saturating_sub(1);
        &mut self.spare[self.written.min(last)]
    }

    /// Writes `v` at the write position and advances the position when `keep` (a
    /// branch-free compaction: the caller writes every candidate and keeps the ones it wants).
    #[inline(always)]
    pub(crate) fn put(&mut self, v: T, keep: bool) {
        self.slot().write(v);
        self.written += usize::from(keep);
    }
}

impl<L: Layout> Compactor<'_, L> {
    /// [`Compactor::put`] of the return `p` stored in layout `L` ([`Layout::from_point`]):
    /// built in registers, only the layout's bytes are written.
    #[inline(always)]
    pub(crate) fn put_point(&mut self, p: PointXYZIRCAEDT, keep: bool) {
        let v = L::from_point(&p, &self.time);
        self.put(v, keep);
    }
}

/// A block writer that writes its candidate points in any layout: the Velodyne, Hesai and
/// Ouster block kernels, handed to `PointBuf::extend_compacted_with`, which monomorphises
/// [`FillPoints::fill`] for the buffer's layout.
pub(crate) trait FillPoints {
    /// Writes the block's candidates through `out` (as many as were reserved at most).
    fn fill<L: Layout>(self, out: &mut Compactor<'_, L>);
}

/// A growable buffer whose spare capacity [`extend_compacted`] and [`extend_masked`] write
/// into: `Vec<T>`, and the frames' `PointBuf` (directly for `autoware`, else its staging
/// block).
pub(crate) trait SpareRoom<T> {
    /// Values written.
    fn len(&self) -> usize;
    /// Makes room for at least `n` more values.
    fn reserve(&mut self, n: usize);
    /// The uninitialised slots after the values.
    fn spare_capacity_mut(&mut self) -> &mut [MaybeUninit<T>];
    /// Sets the number of values.
    ///
    /// # Safety
    /// `len` is at most the capacity and the first `len` slots are initialised.
    unsafe fn set_len(&mut self, len: usize);
}

impl<T> SpareRoom<T> for Vec<T> {
    #[inline(always)]
    fn len(&self) -> usize {
        Vec::len(self)
    }
    #[inline(always)]
    fn reserve(&mut self, n: usize) {
        Vec::reserve(self, n);
    }
    #[inline(always)]
    fn spare_capacity_mut(&mut self) -> &mut [MaybeUninit<T>] {
        Vec::spare_capacity_mut(self)
    }
    #[inline(always)]
    unsafe fn set_len(&mut self, len: usize) {
        // SAFETY: the caller's contract is `Vec::set_len`'s.
        unsafe { Vec::set_len(self, len) }
    }
}

/// Reserves room for `n` more values in `out`, lets `fill` write them through a
/// [`Compactor`] over that spare capacity, and grows `out` by the number of values the
/// compactor kept (at most `n`). Nothing is done, and `fill` is not called, when `n` is 0.
#[cfg(test)]
#[inline(always)]
pub(crate) fn extend_compacted<T, O: SpareRoom<T> + ?Sized>(
    out: &mut O,
    n: usize,
    fill: impl FnOnce(&mut Compactor<'_, T>),
) {
    extend_compacted_at(out, n, TimeBase::default(), fill);
}

/// [`extend_compacted`] with the compactor's [`TimeBase`] (the times a layout's time field
/// refers to).
#[inline(always)]
pub(crate) fn extend_compacted_at<T, O: SpareRoom<T> + ?Sized>(
    out: &mut O,
    n: usize,
    time: TimeBase,
    fill: impl FnOnce(&mut Compactor<'_, T>),
) {
    if n == 0 {
        return;
    }
    out.reserve(n);
    let base = out.len();
    let Some(spare) = out.spare_capacity_mut().get_mut(..n) else {
        return;
    };
    let mut c = Compactor {
        spare,
        written: 0,
        time,
    };
    fill(&mut c);
    let kept = c.written.min(n);
    // SAFETY: `reserve(n)` made the capacity at least `base + n` and `kept <= n`; the first
    // `kept` spare slots are initialised (the `Compactor` invariant: a slot is written before
    // the write position moves past it, and the position is clamped to the `n` slots).
    unsafe { out.set_len(base + kept) };
}

/// Appends `value(k)` for every set bit `k` of `mask`, in bit order (bit 0 first), to `out`:
/// the compaction of a 32-slot block's kept slots, written straight into the spare capacity
/// (one store per kept slot, no capacity check per value).
#[inline(always)]
pub(crate) fn extend_masked<T, O: SpareRoom<T> + ?Sized>(
    out: &mut O,
    mask: u32,
    mut value: impl FnMut(usize) -> T,
) {
    if mask == 0 {
        return;
    }
    out.reserve(32);
    let base = out.len();
    let Some(spare) = out.spare_capacity_mut().first_chunk_mut::<32>() else {
        return;
    };
    let mut n = 0usize;
    let mut m = mask;
    while m != 0 {
        let k = m.trailing_zeros() as usize & 31;
        m &= m - 1;
        spare[n & 31].write(value(k));
        n += 1;
    }
    // SAFETY: the loop wrote spare slots `0..n` in order, once per set bit of `mask`, so
    // `n = popcount(mask) <= 32` and no index wrapped; `reserve(32)` made the capacity at
    // least `base + 32 >= base + n`.
    unsafe { out.set_len(base + n) };
}
