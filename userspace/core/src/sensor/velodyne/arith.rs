//! The arithmetic both Velodyne decoders ([`super::Vlp16Decoder`],
//! [`super::multi::MultiDecoder`]) share, in Nebula's f32/f64 expressions: range gates as
//! raw-value windows ([`raw_window`], m), the dual-return labelling table ([`DUAL_TYPES`],
//! [`ReturnType`] codes), stage 1 of a block ([`slot_mask`]), the shared `[cos, sin]` table of
//! every 0.01° azimuth ([`TrigTable`]) and the azimuth rounding helpers (0.01° units,
//! [0, 36000)).

#![forbid(unsafe_code)]

use std::f64::consts::PI;

use crate::point::ReturnType;
use crate::scan::Bound;

use super::{AZIMUTH_UNITS, BLOCK_LEN, SLOTS_PER_BLOCK};

/// Radians per 0.01° (`π / 18000`).
pub(crate) const RAD_PER_CDEG: f64 = PI / 18_000.0;

/// The largest f32 `F` with `f64::from(F) <= m`, so that for every f32 `x`,
/// `f64::from(x) > m` iff `x > F` (NaN `m`: NaN, both sides always false).
pub(crate) fn f32_above(m: f64) -> f32 {
    let c = m as f32;
    if f64::from(c) > m { c.next_down() } else { c }
}

/// The smallest f32 `G` with `f64::from(G) >= m`, so that for every f32 `x`,
/// `f64::from(x) < m` iff `x < G` (NaN `m`: NaN, both sides always false).
pub(crate) fn f32_below(m: f64) -> f32 {
    let c = m as f32;
    if f64::from(c) < m { c.next_up() } else { c }
}

/// Distance in m of raw value `raw` (units of `res` m) with the laser's `dist_correction`
/// `corr` m, in Nebula's f32 arithmetic: `raw·res`, plus `corr` unless the product is
/// `<= 1e-6` (no return).
#[inline(always)]
pub(crate) fn raw_distance(raw: u16, res: f32, corr: f32) -> f32 {
    let x = f32::from(raw) * res;
    // `x + (-0.0)` is `x`, bit for bit: a select of the addend, not a branch.
    x + if x > 1e-6 { corr } else { -0.0 }
}

/// The range gate `raw != 0 && min_f < raw_distance(raw) < max_f` (exclusive, as Nebula) as an
/// inclusive window `(lo, hi)` of raw values (`lo > hi`: nothing passes), so the decoder's
/// per-slot test is two integer compares. Exact for `res > 1e-6` m (every real sensor: 2 mm or
/// 4 mm): then `raw·res > 1e-6` for every `raw >= 1`, so `raw_distance` is `raw·res + corr`,
/// non-decreasing in `raw`, and the window is the one search of every vendor
/// ([`crate::scan::raw_window`]). For a smaller `res` (the calibration loader accepts down to
/// any positive value) `raw_distance` is not monotonic: the window is the hull of the passing
/// values, found by a scan, and may pass a few raw values the float test would not.
pub(crate) fn raw_window(res: f32, corr: f32, min_f: f32, max_f: f32) -> (u16, u16) {
    if res <= 1e-6 {
        let pass = |r: u16| {
            let d = raw_distance(r, res, corr);
            d > min_f && d < max_f
        };
        let lo = (1..=u16::MAX).find(|&r| pass(r));
        let hi = (1..=u16::MAX).rev().find(|&r| pass(r));
        return lo.zip(hi).unwrap_or((1, 0));
    }
    let w = crate::scan::raw_window(
        1..1 << 16,
        |r| raw_distance(r as u16, res, corr),
        (min_f, Bound::Exclusive),
        (max_f, Bound::Exclusive),
    );
    if w.is_empty() {
        return (1, 0);
    }
    (w.start as u16, (w.end - 1) as u16)
}

/// Dual-return point type by `[identical][first][strongest]`, index
/// `identical·4 + first·2 + strongest` ([`ReturnType`] codes).
pub(crate) const DUAL_TYPES: [u8; 8] = [
    ReturnType::LastWeak as u8,
    ReturnType::LastStrongest as u8,
    ReturnType::FirstWeak as u8,
    ReturnType::FirstStrongest as u8,
    ReturnType::Identical as u8,
    ReturnType::Identical as u8,
    ReturnType::Identical as u8,
    ReturnType::Identical as u8,
];

/// Dual-return type of a point with raw range `raw` and reflectivity `intensity` whose
/// partner return (the other block of the pair) has `other` and `other_i`: a partner without a
/// return (0) or with the same range makes it `identical`; otherwise first/last by range
/// (`nebula`: the larger range counts as first, see [`DecodeFlavor`]) and strongest/weak by
/// reflectivity (a tie makes the last one the strongest). Returns a [`ReturnType`] code.
#[inline(always)]
pub(crate) fn dual_type(raw: u16, intensity: u8, other: u16, other_i: u8, nebula: bool) -> u8 {
    // Identical partners are the common case in real captures: a predictable branch.
    if other == 0 || other == raw {
        return ReturnType::Identical as u8;
    }
    let first = if nebula { raw > other } else { raw < other };
    let strongest = (intensity > other_i) | ((intensity == other_i) & !first);
    DUAL_TYPES[usize::from(first) * 2 + usize::from(strongest)]
}

/// Stage 1 of the Velodyne decoders: bit `k` of the result is set when slot `k`'s raw range
/// (bytes 0-1 of `[distance lo, distance hi, reflectivity]`) lies in `[lo[k], hi[k]]` and,
/// with a `partner` block (the first block of a dual-return pair), differs from the partner
/// slot's raw range (identical returns are merged into the partner's point).
///
/// x86-64: SSE2 (part of the x86-64 baseline), eight slots per instruction
/// ([`crate::simd::velodyne_slot_mask`]): an unsigned window test as two saturating
/// subtractions, the partner test as an equality, packed to one byte per slot and collected
/// with `movemask`. Elsewhere: the same test per slot.
#[inline(always)]
pub(crate) fn slot_mask(
    slots: &[[u8; 3]; SLOTS_PER_BLOCK],
    lo: &[u16; SLOTS_PER_BLOCK],
    hi: &[u16; SLOTS_PER_BLOCK],
    partner: Option<&[[u8; 3]; SLOTS_PER_BLOCK]>,
) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        crate::simd::velodyne_slot_mask(slots, lo, hi, partner)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut mask = 0u32;
        for k in 0..SLOTS_PER_BLOCK {
            let raw = u16::from_le_bytes([slots[k][0], slots[k][1]]);
            let same = partner.is_some_and(|p| u16::from_le_bytes([p[k][0], p[k][1]]) == raw);
            let keep = (raw >= lo[k]) & (raw <= hi[k]) & !same;
            mask |= u32::from(keep) << k;
        }
        mask
    }
}

/// [`AZIMUTH_UNITS`] as an index bound.
pub(crate) const AZ_USIZE: usize = AZIMUTH_UNITS as usize;

/// `[cos, sin]` of every azimuth unit (0.01°), in f32 of the f32 angle (as Nebula's lookup
/// tables). A fixed-size array, so an index reduced modulo 36000 needs no bounds check.
/// Shared by every Velodyne decoder of the process (288 KiB, built once): a daemon serving many
/// sensors keeps one copy in cache instead of one per sensor. The angle in rad is computed
/// ([`azimuth_rad`]), not stored: the table stays small enough for the L2 cache.
pub(crate) type TrigTable = &'static [[f32; 2]; AZ_USIZE];

/// An azimuth in 0.01° as rad: `cdeg · π/18000` in f64, rounded to f32.
#[inline(always)]
pub(crate) fn azimuth_rad(cdeg: u32) -> f32 {
    (f64::from(cdeg) * RAD_PER_CDEG) as f32
}

/// The [`TrigTable`], built on first use.
pub(crate) fn trig_table() -> TrigTable {
    static TABLE: std::sync::OnceLock<Box<[[f32; 2]; AZ_USIZE]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let v: Vec<[f32; 2]> = (0..AZIMUTH_UNITS)
            .map(|i| {
                let rad = (f64::from(i) * 0.01 * PI / 180.0) as f32;
                [rad.cos(), rad.sin()]
            })
            .collect();
        v.into_boxed_slice()
            .try_into()
            .unwrap_or_else(|_| unreachable!("36000 entries"))
    })
}

/// `round()` of a non-negative f32 without a libm call: exact, since `x + 0.5` is exact in f64
/// for every f32 `x`, and truncation of a non-negative value is `floor`. Equals `f32::round`
/// (half away from zero) for `0 <= x < 2^31` (azimuths in 0.01° are far below). The
/// conversion goes through `i32` because SSE2 converts f64 lanes to i32 (not u32) in one
/// instruction, so array loops over it vectorise.
#[inline(always)]
pub(super) fn round_pos(x: f32) -> u32 {
    (f64::from(x) + 0.5) as i32 as u32
}

/// A corrected azimuth `azf` in 0.01° (possibly negative, at most one turn off) rounded to the
/// nearest 0.01° and brought into [0, 36000) (Nebula's rounding: negative values are lifted by a
/// turn before rounding).
#[inline(always)]
pub(super) fn wrap_round_cdeg(azf: f32) -> u32 {
    wrap_cdeg(lift_round_cdeg(azf))
}

/// A corrected azimuth `azf` in 0.01° lifted by a turn when negative and rounded to the
/// nearest 0.01° (Nebula's rounding), not yet brought into [0, 36000).
#[inline(always)]
pub(crate) fn lift_round_cdeg(azf: f32) -> u32 {
    round_pos(
        azf + if azf < 0.0 {
            AZIMUTH_UNITS as f32
        } else {
            -0.0
        },
    )
}

/// `azc` (0.01°) brought into [0, 36000); the division only runs for the rare value past a turn.
#[inline(always)]
pub(super) fn wrap_cdeg(azc: u32) -> u32 {
    if azc >= AZIMUTH_UNITS {
        azc % AZIMUTH_UNITS
    } else {
        azc
    }
}
/// The 32 `[distance lo, distance hi, reflectivity]` slots of a block.
#[inline(always)]
pub(super) fn slot_view(blk: &[u8; BLOCK_LEN]) -> &[[u8; 3]; SLOTS_PER_BLOCK] {
    let (_, body) = blk.split_first_chunk::<4>().unwrap_or((&[0; 4], &[]));
    let (slots, _) = body.as_chunks::<3>();
    <&[[u8; 3]; SLOTS_PER_BLOCK]>::try_from(slots).unwrap_or(&[[0; 3]; SLOTS_PER_BLOCK])
}
