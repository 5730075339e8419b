//! The crate's only `unsafe` code, behind safe functions whose signatures make misuse
//! impossible: every caller is safe code (`#![forbid(unsafe_code)]` holds in every other
//! module, see `lib.rs`).
//!
//! - [`Compactor`] / [`extend_compacted`]: writes values into a `Vec`'s spare capacity (no
//!   zero-fill first) at a write position that advances only past kept values, and sets the
//!   length once, to exactly the slots written. Used by the Velodyne block consumers
//!   (`sensor::velodyne::block`, dense blocks) and the Ouster column decoder.
//! - [`extend_masked`]: appends one value per set bit of a 32-bit slot mask the same way
//!   (Velodyne sparse blocks and azimuths).
//! - x86-64 only, SSE2 (part of the x86-64 baseline, so always available there; Intel 64 and
//!   IA-32 Architectures Software Developer's Manual, vol. 2, for each intrinsic): the
//!   Velodyne kernels over fixed-size arrays of one 32-slot data block:
//!   [`velodyne_slot_mask`] (stage 1: which slots carry a point), [`velodyne_dense_fill`]
//!   (stage 2 of a dense block: distance, azimuth, x/y/z, intensity of all 32 slots) and
//!   [`compact_block_points`] (the kept slots' 32-byte points, two 4×4 transposes per four
//!   slots). Their portable equivalents live beside their callers and are tested bit for bit
//!   against them.
//! - x86-64 with PCLMULQDQ and SSSE3, detected at run time: [`clmul_fold_msb`], the folding
//!   step of a most-significant-bit-first CRC-32 (Hesai's CRC-32/MPEG-2, `sensor::hesai::crc`)
//!   by carry-less multiplication, 64 bytes per step (Intel, "Fast CRC Computation for Generic
//!   Polynomials Using PCLMULQDQ Instruction", 2009, sections on folding).
//!
//! Every `unsafe` block states its invariant in a `// SAFETY:` comment. The intrinsics are
//! `#[target_feature(enable = "sse2")]` functions, which a function without that attribute
//! may call only in `unsafe` even though every x86-64 target enables SSE2; so each kernel is
//! one block, whose comment covers the feature and every pointer load and store.

#[cfg(test)]
pub(crate) use crate::compact::extend_compacted;
pub(crate) use crate::compact::{Compactor, FillPoints, extend_masked};

/// Slots of one data block, the lane count of the block kernels: the callers (the Velodyne
/// decoders, whose blocks have 32 channel slots) hand their per-slot arrays of this length.
pub(crate) const BLOCK_SLOTS: usize = 32;

/// Where [`velodyne_dense_fill`] writes one block's per-slot results (the caller's arrays).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct DenseOut<'a> {
    /// Forward coordinate, m.
    pub x: &'a mut [f32; BLOCK_SLOTS],
    /// Left coordinate, m.
    pub y: &'a mut [f32; BLOCK_SLOTS],
    /// Up coordinate, m.
    pub z: &'a mut [f32; BLOCK_SLOTS],
    /// Range, m.
    pub distance: &'a mut [f32; BLOCK_SLOTS],
    /// Corrected azimuth, rad.
    pub azimuth: &'a mut [f32; BLOCK_SLOTS],
    /// Corrected azimuth in the caller's units (0.01°), `0..turn`.
    pub azimuth_cdeg: &'a mut [u32; BLOCK_SLOTS],
    /// Reflectivity.
    pub intensity: &'a mut [u8; BLOCK_SLOTS],
}

/// What [`velodyne_dense_fill`] reads: the block's slot bytes and the caller's per-slot
/// constants, plain slices and numbers.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct DenseIn<'a> {
    /// The block's slots, 3 bytes each (`[distance lo, distance hi, reflectivity]`), slot `k`
    /// at byte `3k`; one byte past the last slot must be readable (it is read and ignored).
    pub slots: &'a [u8],
    /// Interpolation of each slot added to `azf0`, in azimuth units.
    pub t: &'a [f32; BLOCK_SLOTS],
    /// The block azimuth, in azimuth units.
    pub azf0: f32,
    /// Range correction of each slot's laser, m (added where `raw·res > 1e-6`).
    pub corr: &'a [f32; BLOCK_SLOTS],
    /// Cosine of each slot's elevation.
    pub cos_vert: &'a [f32; BLOCK_SLOTS],
    /// Sine of each slot's elevation.
    pub sin_vert: &'a [f32; BLOCK_SLOTS],
    /// Azimuth correction of each slot's laser, azimuth units, f64.
    pub rot: &'a [f64; BLOCK_SLOTS],
    /// Range unit, m per count.
    pub res: f32,
    /// `[cos, sin]` of every azimuth unit (`turn` entries).
    pub trig: &'a [[f32; 2]],
    /// Azimuth units per turn (36000 for 0.01°).
    pub turn: u32,
    /// rad per azimuth unit.
    pub rad_per_unit: f64,
}

/// What [`compact_block_points`] reads: one block's per-slot arrays and the kept-slot mask.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct CompactIn<'a> {
    /// Bit `k` set when slot `k` is kept.
    pub mask: u32,
    /// Coordinates, m.
    pub x: &'a [f32; BLOCK_SLOTS],
    /// See `x`.
    pub y: &'a [f32; BLOCK_SLOTS],
    /// See `x`.
    pub z: &'a [f32; BLOCK_SLOTS],
    /// Azimuth, rad.
    pub azimuth: &'a [f32; BLOCK_SLOTS],
    /// Elevation, rad.
    pub elevation: &'a [f32; BLOCK_SLOTS],
    /// Range, m.
    pub distance: &'a [f32; BLOCK_SLOTS],
    /// Reflectivity.
    pub intensity: &'a [u8; BLOCK_SLOTS],
    /// Return type code.
    pub return_type: &'a [u8; BLOCK_SLOTS],
    /// Channel (ring).
    pub channel: &'a [u16; BLOCK_SLOTS],
}

/// Rows an Ouster column can have (metadata `pixels_per_column`, validated to 1..=256).
pub(crate) const OUSTER_MAX_ROWS: usize = 256;

/// One column of the table, as the decoder walks it: per row, structure of arrays, each
/// [`XyzLut::stride`](crate::sensor::ouster::lut::XyzLut::stride) long (rows `h..stride` are zero padding, so a kernel can read rows in
/// groups of four; empty slices outside the table).
#[derive(Clone, Copy, Debug)]
pub struct Column<'a> {
    /// Direction × 0.001 (m per mm of range), x.
    pub dx: &'a [f32],
    /// Direction × 0.001, y.
    pub dy: &'a [f32],
    /// Direction × 0.001, z.
    pub dz: &'a [f32],
    /// Beam azimuth in the sensor frame, rad, [0, 2π).
    pub azimuth: &'a [f32],
    /// Beam elevation, rad.
    pub elevation: &'a [f32],
    /// Column offset `C/1000`, m.
    pub offset: [f32; 3],
    /// Beam-origin distance `n`, mm.
    pub n_mm: f32,
}

/// One Ouster column for [`ouster_column_points`] (and its portable equivalent,
/// `sensor::ouster::column_points_portable`): the column's returns, extracted from its pixels,
/// and its row of the XYZ table (`sensor::ouster::lut`).
pub(crate) struct OusterColumnIn<'a> {
    /// Rows (beams) of the column, `<= OUSTER_MAX_ROWS`.
    pub rows: usize,
    /// Range per row of the first (`[0]`) and second (`[1]`, dual-return profiles) return, mm;
    /// 0 for none, for a row outside the field of view, and past `rows`.
    pub range: &'a [[u32; OUSTER_MAX_ROWS]; 2],
    /// Reflectivity per row of each return.
    pub intensity: &'a [[u8; OUSTER_MAX_ROWS]; 2],
    /// Two returns per pixel (the second is emitted only when it differs from the first,
    /// which is then `Identical`).
    pub dual: bool,
    /// The column of the XYZ table, its arrays at least `rows` rounded up to 4 long (zero
    /// padded).
    pub lut: Column<'a>,
    /// The column's `time_stamp`, ns after the frame start.
    pub t: u32,
    /// Kept ranges: `lo <= range < hi`, mm; a range of 0 (no return, outside the field of
    /// view, past `rows`) is never kept, whatever `lo`.
    pub lo: u32,
    /// See `lo`.
    pub hi: u32,
}

impl OusterColumnIn<'_> {
    /// Candidate points the column writes: its rows rounded up to 4 (the kernel's groups),
    /// twice for a dual profile. The room a caller reserves.
    pub(crate) fn candidates(&self) -> usize {
        self.rows.min(OUSTER_MAX_ROWS).next_multiple_of(4) * if self.dual { 2 } else { 1 }
    }
}

/// How an Ouster profile lays out the first two 32-bit words of a pixel, the ones holding its
/// ranges and reflectivities (`sensor::ouster::packet`, the firmware user manual's "lidar
/// data packet format").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OusterLayout {
    /// `RNG15_RFL8_NIR8` (4 bytes): range in 8 mm units in bits 0..15 of word 0, reflectivity
    /// in byte 2.
    Rng15,
    /// `RNG19_RFL8_SIG16_NIR16` (12 bytes): range bits 0..19 of word 0, reflectivity byte 4.
    Rng19,
    /// Legacy (12 bytes): range bits 0..20 of word 0, reflectivity the u16 at byte 4, capped
    /// at 255.
    Legacy,
    /// `RNG19_RFL8_SIG16_NIR16_DUAL` (16 bytes) and `FIVE_WORD_PIXEL` (20 bytes): first and
    /// second range in bits 0..19 of words 0 and 1, their reflectivities in bytes 3 and 7.
    Dual,
    /// `RNG15_RFL8_NIR8_DUAL` and `FUSA_RNG15_RFL8_NIR8_DUAL` (8 bytes): first and second
    /// range in 8 mm units in bits 0..15 of words 0 and 1, their reflectivities in bytes 2 and
    /// 6.
    Rng15Dual,
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{
    compact_block_points, ouster_column_points, ouster_extract, velodyne_dense_fill,
    velodyne_slot_mask,
};

/// Folds the whole 16-byte blocks at the start of `data` into one 128-bit residue for a
/// most-significant-bit-first CRC-32 whose register starts at `init`: returns `(residue,
/// used)`, `used` = `data.len()` rounded down to a multiple of 16, and `residue` 16 bytes
/// such that a CRC register started at 0 and run over `residue`, then over `data[used..]`,
/// ends at the CRC of `data` from `init` (as polynomials over GF(2): `residue ≡ data[..used]`
/// with `init` xored into its first four bytes, modulo the generator).
///
/// `k` = `[x^576, x^512, x^192, x^128]`, each modulo the generator (degree < 32): the factors
/// that move a 128-bit block's high and low halves by 512 bits (four blocks in flight) and by
/// 128 bits.
///
/// `None`, and nothing done, when `data` is shorter than 16 bytes or the CPU lacks PCLMULQDQ
/// or SSSE3 (checked at run time, `is_x86_feature_detected!`), or off x86-64.
pub(crate) fn clmul_fold_msb(init: u32, data: &[u8], k: &[u64; 4]) -> Option<([u8; 16], usize)> {
    #[cfg(target_arch = "x86_64")]
    {
        if data.len() >= 16
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("ssse3")
        {
            // SAFETY: both target features of `fold_pclmul` were detected on this CPU just
            // above; `data` holds at least one 16-byte block, as it requires.
            return Some(unsafe { clmul::fold_pclmul(init, data, k) });
        }
    }
    let _ = (init, data, k);
    None
}

/// The PCLMULQDQ folding kernel of [`clmul_fold_msb`].
#[cfg(target_arch = "x86_64")]
mod clmul {
    use core::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_loadu_si128, _mm_set_epi8, _mm_set_epi64x,
        _mm_shuffle_epi8, _mm_storeu_si128, _mm_xor_si128,
    };

    /// The 16 bytes of `x` in reverse order (`pshufb`): from memory order to the
    /// polynomial's, where byte 0's most significant bit is the coefficient of x^127, and back.
    #[inline]
    #[target_feature(enable = "pclmulqdq,ssse3")]
    fn byte_reverse(x: __m128i) -> __m128i {
        _mm_shuffle_epi8(
            x,
            _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        )
    }

    /// Block `i` (bytes `16 i .. 16 i + 16` of `data`) as a 128-bit polynomial
    /// ([`byte_reverse`] of the little-endian load).
    #[inline]
    #[target_feature(enable = "pclmulqdq,ssse3")]
    fn block(data: &[u8], i: usize) -> __m128i {
        let b: &[u8; 16] = data[16 * i..16 * i + 16].try_into().unwrap_or(&[0; 16]);
        // SAFETY: `b` is 16 initialised, readable bytes; `_mm_loadu_si128` has no alignment
        // requirement.
        byte_reverse(unsafe { _mm_loadu_si128(b.as_ptr().cast::<__m128i>()) })
    }

    /// `x · x^n mod P` in the form `hi · k.hi ⊕ lo · k.lo` (64 × 32-bit carry-less products,
    /// under 95 bits each), where `k` holds `x^(n+64) mod P` (high lane) and `x^n mod P` (low).
    #[inline]
    #[target_feature(enable = "pclmulqdq,ssse3")]
    fn fold(x: __m128i, k: __m128i) -> __m128i {
        _mm_xor_si128(
            _mm_clmulepi64_si128::<0x11>(x, k),
            _mm_clmulepi64_si128::<0x00>(x, k),
        )
    }

    /// See [`super::clmul_fold_msb`]; `data.len() >= 16`.
    #[target_feature(enable = "pclmulqdq,ssse3")]
    pub(super) fn fold_pclmul(init: u32, data: &[u8], k: &[u64; 4]) -> ([u8; 16], usize) {
        let blocks = data.len() / 16;
        let k4 = _mm_set_epi64x(k[0] as i64, k[1] as i64);
        let k1 = _mm_set_epi64x(k[2] as i64, k[3] as i64);
        // The register's start value enters as an xor into the first four bytes.
        let init = _mm_set_epi64x((u64::from(init) << 32) as i64, 0);
        let (mut acc, mut i) = if blocks >= 8 {
            let mut x = [
                block(data, 0),
                block(data, 1),
                block(data, 2),
                block(data, 3),
            ];
            x[0] = _mm_xor_si128(x[0], init);
            let mut i = 4;
            while i + 4 <= blocks {
                for (j, xj) in x.iter_mut().enumerate() {
                    *xj = _mm_xor_si128(fold(*xj, k4), block(data, i + j));
                }
                i += 4;
            }
            let mut acc = x[0];
            for xj in &x[1..] {
                acc = _mm_xor_si128(fold(acc, k1), *xj);
            }
            (acc, i)
        } else {
            (_mm_xor_si128(block(data, 0), init), 1)
        };
        while i < blocks {
            acc = _mm_xor_si128(fold(acc, k1), block(data, i));
            i += 1;
        }
        let mut out = [0u8; 16];
        // SAFETY: `out` is 16 writable bytes; `_mm_storeu_si128` has no alignment requirement.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast::<__m128i>(), byte_reverse(acc)) };
        (out, 16 * blocks)
    }
}

/// The SSE2 kernels (x86-64 baseline).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::{
        __m128, __m128i, _mm_add_pd, _mm_add_ps, _mm_and_ps, _mm_and_si128, _mm_andnot_ps,
        _mm_andnot_si128, _mm_castsi128_ps, _mm_cmpeq_epi16, _mm_cmpgt_epi32, _mm_cmpgt_ps,
        _mm_cmplt_ps, _mm_cvtepi32_pd, _mm_cvtepi32_ps, _mm_cvtpd_ps, _mm_cvtps_pd,
        _mm_cvtsi32_si128, _mm_cvtsi128_si32, _mm_cvttpd_epi32, _mm_loadl_epi64, _mm_loadu_pd,
        _mm_loadu_ps, _mm_loadu_si128, _mm_movehl_ps, _mm_movelh_ps, _mm_movemask_epi8, _mm_mul_pd,
        _mm_mul_ps, _mm_or_ps, _mm_or_si128, _mm_packs_epi16, _mm_packs_epi32, _mm_packus_epi16,
        _mm_set_epi16, _mm_set_epi32, _mm_set1_epi32, _mm_set1_pd, _mm_set1_ps, _mm_setzero_si128,
        _mm_shuffle_ps, _mm_srli_epi32, _mm_storeu_ps, _mm_storeu_si128, _mm_sub_epi32, _mm_sub_pd,
        _mm_subs_epu16, _mm_unpackhi_epi64, _mm_unpackhi_ps, _mm_unpacklo_epi8, _mm_unpacklo_epi16,
        _mm_unpacklo_epi64, _mm_unpacklo_ps, _mm_xor_ps,
    };
    use core::arch::x86_64::{
        _mm_add_epi32, _mm_castps_si128, _mm_cmpeq_epi32, _mm_cmplt_epi32, _mm_div_ps,
        _mm_movemask_ps, _mm_slli_epi32, _mm_sub_ps,
    };

    use super::{
        BLOCK_SLOTS as SLOTS_PER_BLOCK, CompactIn, Compactor, DenseIn, DenseOut, OUSTER_MAX_ROWS,
        OusterColumnIn, OusterLayout,
    };
    use crate::layout::{Layout, PointType, TimeBase};
    use crate::point::{PointXYZIRCAEDT, ReturnType};
    use std::mem::MaybeUninit;

    // The point stores below write an `autoware` point as two 16-byte halves, the
    // `autoware_xyzirc` and `xyzi` points as one.
    const _: () = assert!(std::mem::size_of::<PointXYZIRCAEDT>() == 32);
    const _: () = assert!(std::mem::size_of::<crate::layout::PointXYZIRC>() == 16);
    const _: () = assert!(std::mem::size_of::<crate::layout::PointXYZI>() == 16);

    /// Velodyne stage 1 (`sensor::velodyne::slot_mask`): bit `k` set when slot `k`'s raw range
    /// (bytes 0-1 of `[distance lo, distance hi, reflectivity]`) lies in `[lo[k], hi[k]]` and,
    /// with a `partner` block, differs from the partner slot's. Eight slots per instruction:
    /// the window test as two saturating subtractions, the partner test as an equality,
    /// packed to one byte per slot and collected with `movemask`.
    #[inline(always)]
    pub(crate) fn velodyne_slot_mask(
        slots: &[[u8; 3]; SLOTS_PER_BLOCK],
        lo: &[u16; SLOTS_PER_BLOCK],
        hi: &[u16; SLOTS_PER_BLOCK],
        partner: Option<&[[u8; 3]; SLOTS_PER_BLOCK]>,
    ) -> u32 {
        // SAFETY: SSE2 is part of the x86-64 baseline (enabled on every x86_64 target), so
        // every intrinsic here is available; the only memory access is `_mm_loadu_si128` of
        // one `[u16; 8]` (16 initialised, readable bytes), which has no alignment requirement.
        unsafe {
            let raws8 = |s: &[[u8; 3]; SLOTS_PER_BLOCK], b: usize| {
                let r = |k: usize| i16::from_le_bytes([s[b + k][0], s[b + k][1]]);
                _mm_set_epi16(r(7), r(6), r(5), r(4), r(3), r(2), r(1), r(0))
            };
            let load8 = |a: &[u16; SLOTS_PER_BLOCK], b: usize| {
                let chunk: &[u16; 8] = a[b..b + 8].try_into().unwrap_or(&[0; 8]);
                _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>())
            };
            let ok8 = |b: usize| {
                let r = raws8(slots, b);
                let outside = _mm_or_si128(
                    _mm_subs_epu16(r, load8(hi, b)),
                    _mm_subs_epu16(load8(lo, b), r),
                );
                let ok = _mm_cmpeq_epi16(outside, _mm_setzero_si128());
                match partner {
                    Some(p) => _mm_andnot_si128(_mm_cmpeq_epi16(r, raws8(p, b)), ok),
                    None => ok,
                }
            };
            let low = _mm_movemask_epi8(_mm_packs_epi16(ok8(0), ok8(8))) as u32;
            let high = _mm_movemask_epi8(_mm_packs_epi16(ok8(16), ok8(24))) as u32;
            low | (high << 16)
        }
    }

    /// Velodyne stage 2 of a dense block (`sensor::velodyne::dense::fill`, whose portable
    /// version gives the same bits): fills `o`'s distance, azimuth (0.01° and rad), x, y, z
    /// and intensity for all 32 slots of the block whose slot bytes `i.slots` holds; `i.t[k]`
    /// is slot `k`'s interpolation added to the block azimuth `i.azf0` (0.01°). Four slots per
    /// instruction, the two f64 steps two slots per instruction, table entries gathered with
    /// one 8-byte load per slot and a transpose.
    #[inline(always)]
    pub(crate) fn velodyne_dense_fill(o: DenseOut<'_>, i: DenseIn<'_>) {
        let DenseIn {
            slots,
            t,
            azf0,
            corr,
            cos_vert,
            sin_vert,
            rot,
            res,
            trig,
            turn,
            rad_per_unit,
        } = i;
        // Slot `k`'s 3 bytes start at `3k`; a 4-byte load there reads bytes `3k..3k + 4`
        // (a slot past the end of `slots` reads 0).
        let word = |k: usize| -> i32 {
            let o = 3 * k;
            slots
                .get(o..o + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, i32::from_le_bytes)
        };
        let turn_u = turn.max(1);
        // SAFETY: SSE2 is part of the x86-64 baseline, so every intrinsic is available. `k`
        // is 0, 4, .., 28, so every load/store addresses elements `k..k + 4` of a 32-element
        // array (`loadu_pd`: elements `k..k + 2` and `k + 2..k + 4` of the `[f64; 32]`), or
        // one `[f32; 2]` (8 bytes): an entry of `trig` got by a checked index, or a local;
        // `loadu`/`storeu` and `loadl_epi64` (an unaligned 8-byte read) need no alignment.
        unsafe {
            let az0 = _mm_set1_ps(azf0);
            let resv = _mm_set1_ps(res);
            let eps = _mm_set1_ps(1e-6);
            let neg_zero = _mm_set1_ps(-0.0);
            let turn_f = _mm_set1_ps(turn_u as f32);
            let half = _mm_set1_pd(0.5);
            let last = _mm_set1_epi32(turn_u as i32 - 1);
            let turn_i = _mm_set1_epi32(turn_u as i32);
            let low16 = _mm_set1_epi32(0xFFFF);
            let byte = _mm_set1_epi32(0xFF);
            let per = _mm_set1_pd(rad_per_unit);
            for k in (0..SLOTS_PER_BLOCK).step_by(4) {
                let w = _mm_set_epi32(word(k + 3), word(k + 2), word(k + 1), word(k));
                let raw = _mm_and_si128(w, low16);
                let inten = _mm_and_si128(_mm_srli_epi32::<16>(w), byte);
                // Distance: raw·res, plus corr where that exceeds 1e-6, else plus -0.0.
                let x = _mm_mul_ps(_mm_cvtepi32_ps(raw), resv);
                let sel = _mm_cmpgt_ps(x, eps);
                let corr = _mm_loadu_ps(corr.as_ptr().add(k));
                let d = _mm_add_ps(
                    x,
                    _mm_or_ps(_mm_and_ps(sel, corr), _mm_andnot_ps(sel, neg_zero)),
                );
                // Azimuth: f32 interpolation, f64 correction, lift, f64 round, wrap.
                let a = _mm_add_ps(az0, _mm_loadu_ps(t.as_ptr().add(k)));
                let rot = rot.as_ptr().add(k);
                let lo = _mm_sub_pd(_mm_cvtps_pd(a), _mm_loadu_pd(rot));
                let hi = _mm_sub_pd(_mm_cvtps_pd(_mm_movehl_ps(a, a)), _mm_loadu_pd(rot.add(2)));
                let azf = _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
                let neg = _mm_cmplt_ps(azf, _mm_set1_ps(0.0));
                let lifted = _mm_add_ps(
                    azf,
                    _mm_or_ps(_mm_and_ps(neg, turn_f), _mm_andnot_ps(neg, neg_zero)),
                );
                let rlo = _mm_cvttpd_epi32(_mm_add_pd(_mm_cvtps_pd(lifted), half));
                let rhi = _mm_cvttpd_epi32(_mm_add_pd(
                    _mm_cvtps_pd(_mm_movehl_ps(lifted, lifted)),
                    half,
                ));
                let r = _mm_unpacklo_epi64(rlo, rhi);
                let over = _mm_cmpgt_epi32(r, last);
                let wrapped = _mm_sub_epi32(r, _mm_and_si128(over, turn_i));
                _mm_storeu_si128(
                    o.azimuth_cdeg.as_mut_ptr().add(k).cast::<__m128i>(),
                    wrapped,
                );
                if _mm_movemask_epi8(_mm_cmpgt_epi32(wrapped, last)) != 0 {
                    // Only across a gap of more than a turn: reduce these four.
                    for a in &mut o.azimuth_cdeg[k..k + 4] {
                        *a %= turn_u;
                    }
                }
                // Table entries [cos, sin] of the four azimuths, de-interleaved; the angle in
                // rad as f32(f64(cdeg) · π/18000), two lanes per f64 multiply.
                let entry = |j: usize| {
                    let e = o.azimuth_cdeg[k + j].min(turn_u - 1) as usize;
                    let entry: &[f32; 2] = trig.get(e).unwrap_or(&[1.0, 0.0]);
                    _mm_castsi128_ps(_mm_loadl_epi64(entry.as_ptr().cast::<__m128i>()))
                };
                let e01 = _mm_movelh_ps(entry(0), entry(1));
                let e23 = _mm_movelh_ps(entry(2), entry(3));
                let cos = _mm_shuffle_ps::<0b10_00_10_00>(e01, e23);
                let sin = _mm_shuffle_ps::<0b11_01_11_01>(e01, e23);
                let azv = _mm_loadu_si128(o.azimuth_cdeg.as_ptr().add(k).cast::<__m128i>());
                let rad = _mm_movelh_ps(
                    _mm_cvtpd_ps(_mm_mul_pd(_mm_cvtepi32_pd(azv), per)),
                    _mm_cvtpd_ps(_mm_mul_pd(
                        _mm_cvtepi32_pd(_mm_unpackhi_epi64(azv, azv)),
                        per,
                    )),
                );
                let xy = _mm_mul_ps(d, _mm_loadu_ps(cos_vert.as_ptr().add(k)));
                _mm_storeu_ps(o.x.as_mut_ptr().add(k), _mm_mul_ps(xy, cos));
                _mm_storeu_ps(
                    o.y.as_mut_ptr().add(k),
                    _mm_xor_ps(_mm_mul_ps(xy, sin), neg_zero),
                );
                _mm_storeu_ps(
                    o.z.as_mut_ptr().add(k),
                    _mm_mul_ps(d, _mm_loadu_ps(sin_vert.as_ptr().add(k))),
                );
                _mm_storeu_ps(o.distance.as_mut_ptr().add(k), d);
                _mm_storeu_ps(o.azimuth.as_mut_ptr().add(k), rad);
                let bytes = _mm_packus_epi16(
                    _mm_packs_epi32(inten, _mm_setzero_si128()),
                    _mm_setzero_si128(),
                );
                let four = _mm_cvtsi128_si32(bytes).to_le_bytes();
                o.intensity[k..k + 4].copy_from_slice(&four);
            }
        }
    }

    /// The 4×4 transpose of the rows `a`, `b`, `c`, `d`: element `j` of the result is
    /// `[a[j], b[j], c[j], d[j]]`.
    #[inline(always)]
    fn transpose4(a: __m128, b: __m128, c: __m128, d: __m128) -> [__m128; 4] {
        // SAFETY: SSE is part of the x86-64 baseline; the intrinsics only move register lanes.
        unsafe {
            let t0 = _mm_unpacklo_ps(a, b);
            let t1 = _mm_unpacklo_ps(c, d);
            let t2 = _mm_unpackhi_ps(a, b);
            let t3 = _mm_unpackhi_ps(c, d);
            [
                _mm_movelh_ps(t0, t1),
                _mm_movehl_ps(t1, t0),
                _mm_movelh_ps(t2, t3),
                _mm_movehl_ps(t3, t2),
            ]
        }
    }

    /// The register halves of four points in layout `L`, from `lo = [x, y, z, intensity |
    /// return_type << 8 | channel << 16]` and `hi = [azimuth, elevation, distance,
    /// time_stamp]`, four lanes each: element `j` of the first array is point `j`'s bytes
    /// 0..16, of the second its bytes 16..32 (the `autoware` point's halves). `autoware` and
    /// the layouts written point by point: both transposed; `autoware_xyzirc`: `lo`
    /// transposed; `xyzi`: x y z and the intensity as f32, transposed.
    #[inline(always)]
    fn lanes4<L: Layout>(lo: [__m128; 4], hi: [__m128; 4]) -> ([__m128; 4], [__m128; 4]) {
        // SAFETY: SSE2 is part of the x86-64 baseline; the intrinsics only move and convert
        // register lanes.
        unsafe {
            match L::TYPE {
                PointType::AutowareXyzirc => (transpose4(lo[0], lo[1], lo[2], lo[3]), hi),
                PointType::Xyzi => {
                    let i = _mm_and_si128(_mm_castps_si128(lo[3]), _mm_set1_epi32(0xff));
                    (transpose4(lo[0], lo[1], lo[2], _mm_cvtepi32_ps(i)), hi)
                }
                _ => (
                    transpose4(lo[0], lo[1], lo[2], lo[3]),
                    transpose4(hi[0], hi[1], hi[2], hi[3]),
                ),
            }
        }
    }

    /// Writes one point of [`lanes4`] (`a` its bytes 0..16, `b` its bytes 16..32) at `p`:
    /// `autoware` both halves, `autoware_xyzirc` and `xyzi` the first; any other layout the
    /// conversion ([`Layout::from_point`], with `time`) of the `autoware` point they make.
    ///
    /// # Safety
    /// `p` is a writable slot of `size_of::<L>()` bytes that no one else reads or writes.
    #[inline(always)]
    unsafe fn store_lane<L: Layout>(p: *mut MaybeUninit<L>, a: __m128, b: __m128, time: &TimeBase) {
        // SAFETY: the caller's contract; `storeu` needs no alignment; `autoware` slots are 32
        // bytes, `autoware_xyzirc` and `xyzi` 16 (asserted at the top of the module). The
        // lanes are f32/u32 data, a valid value of the layout (`Pod`), so the slot is
        // initialised whole; another layout's slot is written whole by `write`.
        unsafe {
            match L::TYPE {
                PointType::Autoware => {
                    let p = p.cast::<f32>();
                    _mm_storeu_ps(p, a);
                    _mm_storeu_ps(p.add(4), b);
                }
                PointType::AutowareXyzirc | PointType::Xyzi => _mm_storeu_ps(p.cast::<f32>(), a),
                _ => {
                    let mut q = [0f32; 8];
                    _mm_storeu_ps(q.as_mut_ptr(), a);
                    _mm_storeu_ps(q.as_mut_ptr().add(4), b);
                    let point: PointXYZIRCAEDT = bytemuck::cast(q);
                    (*p).write(L::from_point(&point, time));
                }
            }
        }
    }

    /// Dense compaction of a Velodyne block's kept slots (bit `k` of `bp.mask`) into `out`,
    /// in slot order, `time_stamp` from `times` (0 without), in layout `L`: per four slots,
    /// the lanes of `x y z [intensity return_type channel]` and `azimuth elevation distance
    /// time_stamp` are stored by [`store_lane`] at the write position, which advances by the
    /// slot's mask bit (every slot is written, only kept ones stay). Writes nothing unless
    /// `out` has 32 free slots (the caller reserves 32 per block).
    #[inline(always)]
    pub(crate) fn compact_block_points<L: Layout>(
        bp: CompactIn<'_>,
        times: Option<&[u32; SLOTS_PER_BLOCK]>,
        out: &mut Compactor<'_, L>,
    ) {
        let mask = bp.mask;
        let zeros = [0u32; SLOTS_PER_BLOCK];
        let times = times.unwrap_or(&zeros);
        let (dst, slots, mut n) = out.raw_parts();
        if slots.saturating_sub(n) < SLOTS_PER_BLOCK {
            return;
        }
        let time = out.time();
        // SAFETY: SSE2 is part of the x86-64 baseline, so every intrinsic is available. `k` is
        // 0, 4, .., 28: the loads read elements `k..k + 4` of the 32-element `f32`/`u32`
        // arrays (16 bytes) and of the `[u16; 32]` channels (8 bytes), all in bounds;
        // `loadu`/`loadl_epi64` need no alignment. `store_lane` writes slot `n` of the
        // compactor's `spare`, where `n` is `written` plus the kept slots before `k + j`, so
        // `n <= written + 31 < spare.len()` (checked above); `L` is one of its layouts
        // (checked above).
        unsafe {
            for k in (0..SLOTS_PER_BLOCK).step_by(4) {
                let ld = |a: &[f32; SLOTS_PER_BLOCK]| _mm_loadu_ps(a.as_ptr().add(k));
                let t = _mm_castsi128_ps(_mm_loadu_si128(times.as_ptr().add(k).cast::<__m128i>()));
                // [intensity | return_type << 8 | channel << 16] per slot.
                let int4 = _mm_cvtsi32_si128(i32::from_le_bytes(
                    bp.intensity[k..k + 4].try_into().unwrap_or([0; 4]),
                ));
                let rt4 = _mm_cvtsi32_si128(i32::from_le_bytes(
                    bp.return_type[k..k + 4].try_into().unwrap_or([0; 4]),
                ));
                let ir = _mm_unpacklo_epi8(int4, rt4);
                let ch = _mm_loadl_epi64(bp.channel.as_ptr().add(k).cast::<__m128i>());
                let packed = _mm_castsi128_ps(_mm_unpacklo_epi16(ir, ch));
                let (a, b) = lanes4::<L>(
                    [ld(bp.x), ld(bp.y), ld(bp.z), packed],
                    [ld(bp.azimuth), ld(bp.elevation), ld(bp.distance), t],
                );
                for j in 0..4 {
                    store_lane(dst.add(n), a[j], b[j], &time);
                    n += ((mask >> (k + j)) & 1) as usize;
                }
            }
        }
        // SAFETY: every slot below `n` was written by `store_lane` above (the position moves
        // only past a slot just written), and `n <= written + 32 <= slots` (checked above).
        unsafe { out.set_written(n) };
    }

    /// The candidate points of one Ouster column, four rows at a time, written at the
    /// compactor's write position, which advances past the kept ones: per row the first
    /// return (kept when `lo <= range < hi`; `Identical` when a dual profile's second return
    /// has the same range, else `Strongest`), then, for a dual profile, the second
    /// (`SecondStrongest`, kept when in the window and not identical). x y z are
    /// `(range − n)·d + C` and `distance` `range / 1000`, each operation rounded to f32 as the
    /// portable code rounds it, so the two agree bit for bit; the two 16-byte halves of each
    /// point come from two 4×4 transposes, as in [`compact_block_points`]. Rows past `rows` up
    /// to the next multiple of 4 are written and never kept. Writes nothing unless `out` has
    /// room for every candidate and the table columns are long enough (the caller reserves
    /// `rows` rounded up to 4, times 2 for a dual profile).
    #[inline(always)]
    pub(crate) fn ouster_column_points<L: Layout>(
        c: &OusterColumnIn<'_>,
        out: &mut Compactor<'_, L>,
    ) {
        let groups = c.rows.min(OUSTER_MAX_ROWS).div_ceil(4);
        let need = c.candidates();
        let l = &c.lut;
        let table = [l.dx, l.dy, l.dz, l.azimuth, l.elevation];
        let (dst, slots, mut n) = out.raw_parts();
        debug_assert!(
            table.iter().all(|v| v.len() >= groups * 4),
            "short table column"
        );
        if table.iter().any(|v| v.len() < groups * 4) || slots.saturating_sub(n) < need {
            return;
        }
        let time = out.time();
        let strongest = (ReturnType::Strongest as i32) << 8;
        let identical = (ReturnType::Identical as i32) << 8;
        let second = (ReturnType::SecondStrongest as i32) << 8;
        // SAFETY: SSE2 is part of the x86-64 baseline, so every intrinsic is available. For
        // group `g < groups`, `k = 4·g <= OUSTER_MAX_ROWS − 4` (groups <= 64): the loads read
        // elements `k..k + 4` of the 256-element range and intensity arrays and of the table
        // columns, whose length is at least `4·groups` (checked above); `loadu`/`storeu` need
        // no alignment. Each pair of stores goes to `p`, slot `n` of the compactor's `spare`:
        // `n` is `written` plus the kept candidates before this one, below `written + need <=
        // spare.len()` (checked above). Each slot is one `MaybeUninit<PointXYZIRCAEDT>` of 32
        // writable bytes, and the two stores fill it whole with f32/u32 lanes, which make a
        // valid point (`Pod`), so the slot is initialised before the write position moves past
        // it.
        unsafe {
            let n_mm = _mm_set1_ps(l.n_mm);
            let [ox, oy, oz] = l.offset.map(|v| _mm_set1_ps(v));
            let thousand = _mm_set1_ps(1000.0);
            let t = _mm_castsi128_ps(_mm_set1_epi32(c.t as i32));
            // `max(lo, 1) <= r` as `r > max(lo, 1) − 1` (signed; ranges are below 2^20).
            let lo_m1 = _mm_set1_epi32(c.lo.max(1) as i32 - 1);
            let hi = _mm_set1_epi32(c.hi.min(i32::MAX as u32) as i32);
            let lanes = _mm_set_epi32(3, 2, 1, 0);
            let zero = _mm_setzero_si128();
            for g in 0..groups {
                let k = 4 * g;
                let ld = |v: &[f32]| _mm_loadu_ps(v.as_ptr().add(k));
                let (dx, dy, dz, az, el) =
                    (ld(l.dx), ld(l.dy), ld(l.dz), ld(l.azimuth), ld(l.elevation));
                let channel = _mm_slli_epi32(_mm_add_epi32(_mm_set1_epi32(k as i32), lanes), 16);
                let range =
                    |ret: usize| _mm_loadu_si128(c.range[ret].as_ptr().add(k).cast::<__m128i>());
                // The two 16-byte halves of the four rows' points of return `ret` with the
                // return types `rt` (already << 8), and the in-window lanes.
                let points = |ret: usize, r: __m128i, rt: __m128i| {
                    let window = _mm_and_si128(_mm_cmpgt_epi32(r, lo_m1), _mm_cmplt_epi32(r, hi));
                    let rf = _mm_cvtepi32_ps(r);
                    let rr = _mm_sub_ps(rf, n_mm);
                    let x = _mm_add_ps(_mm_mul_ps(rr, dx), ox);
                    let y = _mm_add_ps(_mm_mul_ps(rr, dy), oy);
                    let z = _mm_add_ps(_mm_mul_ps(rr, dz), oz);
                    let distance = _mm_div_ps(rf, thousand);
                    let bytes =
                        i32::from_le_bytes(c.intensity[ret][k..k + 4].try_into().unwrap_or([0; 4]));
                    let inten =
                        _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(bytes), zero), zero);
                    let packed = _mm_castsi128_ps(_mm_or_si128(_mm_or_si128(inten, rt), channel));
                    let (lo, hi) = lanes4::<L>([x, y, z, packed], [az, el, distance, t]);
                    (lo, hi, window)
                };
                // Writes a candidate at the write position; keeps it when `keep` lane `j` is set.
                let mut put = |lo: &[__m128; 4], hi: &[__m128; 4], keep: i32, j: usize| {
                    store_lane(dst.add(n), lo[j], hi[j], &time);
                    n += ((keep >> j) & 1) as usize;
                };
                let r1 = range(0);
                if c.dual {
                    let r2 = range(1);
                    let same = _mm_cmpeq_epi32(r1, r2);
                    let rt1 = _mm_or_si128(
                        _mm_and_si128(same, _mm_set1_epi32(identical)),
                        _mm_andnot_si128(same, _mm_set1_epi32(strongest)),
                    );
                    let (lo1, hi1, w1) = points(0, r1, rt1);
                    let (lo2, hi2, w2) = points(1, r2, _mm_set1_epi32(second));
                    let keep1 = _mm_movemask_ps(_mm_castsi128_ps(w1));
                    let keep2 = _mm_movemask_ps(_mm_castsi128_ps(_mm_andnot_si128(same, w2)));
                    for j in 0..4 {
                        put(&lo1, &hi1, keep1, j);
                        put(&lo2, &hi2, keep2, j);
                    }
                } else {
                    let (lo1, hi1, w1) = points(0, r1, _mm_set1_epi32(strongest));
                    let keep1 = _mm_movemask_ps(_mm_castsi128_ps(w1));
                    for j in 0..4 {
                        put(&lo1, &hi1, keep1, j);
                    }
                }
            }
        }
        // SAFETY: every slot below `n` was written by `put` above (the position moves only
        // past a slot just written), and `n <= written + need <= slots` (checked above).
        unsafe { out.set_written(n) };
    }

    /// Reads the ranges (mm) and reflectivities of an Ouster column's pixels (`pb` bytes each,
    /// laid out as `layout`), four rows at a time, into `range` and `intensity` (`[1]` only
    /// for [`OusterLayout::Dual`] and [`OusterLayout::Rng15Dual`]), exactly as the portable extractors of
    /// `sensor::ouster::decode_column` read them. Each group of four rows is four 16-byte loads
    /// (one for 4-byte pixels) and a 4×4 transpose into the rows' words 0 and 1. Returns the rows
    /// read: the groups of four whose loads stay inside `pixels` (`rows` rounded down to 4, or
    /// fewer near its end); the caller reads the rest.
    #[inline(always)]
    pub(crate) fn ouster_extract(
        pixels: &[u8],
        pb: usize,
        layout: OusterLayout,
        rows: usize,
        range: &mut [[u32; OUSTER_MAX_ROWS]; 2],
        intensity: &mut [[u8; OUSTER_MAX_ROWS]; 2],
    ) -> usize {
        let rows = rows.min(OUSTER_MAX_ROWS);
        let pb = pb.max(4);
        // A group's last load starts at the first byte of its fourth row (of its only row of 4
        // bytes for 4-byte pixels).
        let last_load = |g: usize| if pb == 4 { 16 * g } else { (4 * g + 3) * pb };
        let mut groups = rows / 4;
        while groups > 0 && last_load(groups - 1) + 16 > pixels.len() {
            groups -= 1;
        }
        let p = pixels.as_ptr();
        // SAFETY: SSE2 is part of the x86-64 baseline, so every intrinsic is available. For
        // `g < groups` every load reads 16 bytes at an offset `<= last_load(g)` and
        // `last_load(g) + 16 <= pixels.len()` (the loop above; `last_load` grows with `g`), so
        // all loads are inside `pixels`; `loadu`/`storeu` need no alignment. The stores write
        // elements `4g..4g + 4` of the 256-element arrays, in bounds since `4g + 4 <= rows <=
        // 256`.
        unsafe {
            let ld = |o: usize| _mm_loadu_si128(p.add(o).cast::<__m128i>());
            let zero = _mm_setzero_si128();
            let bytes = |v: __m128i| {
                _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(v, zero), zero)).to_le_bytes()
            };
            for g in 0..groups {
                let k = 4 * g;
                let [w0, w1] = if pb == 4 {
                    [ld(16 * g), zero]
                } else {
                    let row = |j: usize| _mm_castsi128_ps(ld((k + j) * pb));
                    // Words 0 and 1 of the four rows (the compiler drops the unused half).
                    let [w0, w1, _, _] = transpose4(row(0), row(1), row(2), row(3));
                    [_mm_castps_si128(w0), _mm_castps_si128(w1)]
                };
                let mask = |m: i32| _mm_set1_epi32(m);
                let (r1, i1, second) = match layout {
                    OusterLayout::Rng15 => (
                        _mm_slli_epi32(_mm_and_si128(w0, mask(0x7FFF)), 3),
                        _mm_and_si128(_mm_srli_epi32(w0, 16), mask(0xFF)),
                        None,
                    ),
                    OusterLayout::Rng19 => (
                        _mm_and_si128(w0, mask(0x7_FFFF)),
                        _mm_and_si128(w1, mask(0xFF)),
                        None,
                    ),
                    OusterLayout::Legacy => {
                        let v = _mm_and_si128(w1, mask(0xFFFF));
                        let over = _mm_cmpgt_epi32(v, mask(255));
                        (
                            _mm_and_si128(w0, mask(0xF_FFFF)),
                            _mm_or_si128(_mm_and_si128(over, mask(255)), _mm_andnot_si128(over, v)),
                            None,
                        )
                    }
                    OusterLayout::Dual => (
                        _mm_and_si128(w0, mask(0x7_FFFF)),
                        _mm_srli_epi32(w0, 24),
                        Some((_mm_and_si128(w1, mask(0x7_FFFF)), _mm_srli_epi32(w1, 24))),
                    ),
                    OusterLayout::Rng15Dual => {
                        let r = |w: __m128i| _mm_slli_epi32(_mm_and_si128(w, mask(0x7FFF)), 3);
                        let i = |w: __m128i| _mm_and_si128(_mm_srli_epi32(w, 16), mask(0xFF));
                        (r(w0), i(w0), Some((r(w1), i(w1))))
                    }
                };
                _mm_storeu_si128(range[0].as_mut_ptr().add(k).cast::<__m128i>(), r1);
                intensity[0][k..k + 4].copy_from_slice(&bytes(i1));
                if let Some((r2, i2)) = second {
                    _mm_storeu_si128(range[1].as_mut_ptr().add(k).cast::<__m128i>(), r2);
                    intensity[1][k..k + 4].copy_from_slice(&bytes(i2));
                }
            }
        }
        4 * groups
    }
}
