//! One Ouster measurement column to points: the pixel readers of each packet profile
//! (legacy, RNG19, RNG15, dual, low-data-rate dual; ranges in mm, signal/reflectivity/near-IR channels), the
//! range filter as an integer window in mm, the XYZ lookup ([`super::lut::XyzLut`], m) and the point
//! writers of each point layout (SSE2 on x86-64, a portable form elsewhere).

#![forbid(unsafe_code)]

use crate::layout::{Layout, OusterPoint, OusterXYZIR, PointType};
use crate::point::{PointXYZIRCAEDT, ReturnType};
use crate::point_buf::PointBuf;
use crate::scan::Bound;
use crate::simd::{Compactor, FillPoints, OUSTER_MAX_ROWS, OusterColumnIn, OusterLayout};

use super::lut::{self, Column};
use super::packet::Profile;

/// The integer form of the exclusive range filter ([`crate::scan::raw_window`]): the smallest
/// range (mm, >= 1) whose `distance = r as f32 / 1000` exceeds `min_m`, and the smallest whose
/// distance reaches `max_m` (f32 division is monotonic in `r`, so the two filters agree
/// exactly).
pub(super) fn range_window_mm(min_m: f32, max_m: f32) -> (u32, u32) {
    const LIMIT: u32 = 1 << 20; // above any 20-bit range
    let w = crate::scan::raw_window(
        1..LIMIT,
        |r| r as f32 / 1000.0,
        (min_m, Bound::Exclusive),
        (max_m, Bound::Exclusive),
    );
    (w.start, w.end)
}

/// A pixel's returns as `(range_mm, reflectivity)`, first then second (0, 0 when absent).
pub(super) type Returns = ((u32, u8), (u32, u8));

#[inline(always)]
fn le32(px: &[u8], o: usize) -> u32 {
    match px.get(o..o + 4) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// One column's returns, extracted from its pixels, as the column kernel reads them: range
/// (mm) and reflectivity of the first (`[0]`) and second (`[1]`, dual profiles) return per
/// row; 0 for none, outside the field of view and past the column's rows.
#[derive(Clone, Debug)]
pub(super) struct ColumnReturns {
    pub(super) range: [[u32; OUSTER_MAX_ROWS]; 2],
    pub(super) intensity: [[u8; OUSTER_MAX_ROWS]; 2],
}

impl ColumnReturns {
    pub(super) fn new() -> Self {
        ColumnReturns {
            range: [[0; OUSTER_MAX_ROWS]; 2],
            intensity: [[0; OUSTER_MAX_ROWS]; 2],
        }
    }
}

/// The channels of one return of a pixel that ouster-ros's points carry besides the range, as
/// ouster-sdk 1.0.1 decodes them (`ouster_core/src/parsing.cpp`, the per-profile
/// `FieldDecodeInfo` tables; bit layouts in [`packet`]) and ouster-ros copies them into its
/// `ouster_ros::Point` (`src/point_transform.h`: `intensity` ← SIGNAL, `ambient` ← NEAR_IR,
/// `reflectivity` ← REFLECTIVITY; the second return of a dual profile takes SIGNAL2 and
/// REFLECTIVITY2 and the shared NEAR_IR, `Profile_*_DUAL_2ND_RETURN` in
/// `include/ouster_ros/sensor_point_types.h`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PixelChannels {
    /// SIGNAL (SIGNAL2), photons, 0..=65535; 0 for a profile without it (RNG15_RFL8_NIR8).
    pub(super) signal: u16,
    /// REFLECTIVITY (REFLECTIVITY2), the calibrated reflectivity, 0..=255 (ouster-sdk reads 8
    /// bits in every profile, LEGACY included).
    pub(super) reflectivity: u8,
    /// NEAR_IR, photons (RNG15_RFL8_NIR8: its 8 bits × 16, as ouster-sdk scales them).
    pub(super) near_ir: u16,
}

/// An ouster-ros layout whose signal, reflectivity and near-IR the decoder fills from the
/// pixel ([`push_ouster_points`]).
pub(super) trait OusterRosPoint: Layout {
    /// Overwrites the generic conversion's intensity-derived fields with `ch`.
    fn set_channels(&mut self, ch: PixelChannels);
}

impl OusterRosPoint for OusterPoint {
    #[inline(always)]
    fn set_channels(&mut self, ch: PixelChannels) {
        self.intensity = f32::from(ch.signal);
        self.reflectivity = u16::from(ch.reflectivity);
        self.ambient = ch.near_ir;
    }
}

impl OusterRosPoint for OusterXYZIR {
    #[inline(always)]
    fn set_channels(&mut self, ch: PixelChannels) {
        self.intensity = f32::from(ch.signal);
    }
}

#[inline(always)]
fn le16(px: &[u8], o: usize) -> u16 {
    match px.get(o..o + 2) {
        Some(&[a, b]) => u16::from_le_bytes([a, b]),
        _ => 0,
    }
}

/// The channels of a LEGACY or `RNG19_RFL8_SIG16_NIR16` pixel (12 bytes, one return):
/// REFLECTIVITY byte 4, SIGNAL u16 at byte 6, NEAR_IR u16 at byte 8. (LEGACY on fw 1.1x sent a
/// 16-bit reflectivity at byte 4; ouster-sdk 1.0.1 and ouster-ros read its low byte.)
pub(super) fn channels_sig16(px: &[u8; 12], _second: bool) -> PixelChannels {
    PixelChannels {
        signal: le16(px, 6),
        reflectivity: px[4],
        near_ir: le16(px, 8),
    }
}

/// The channels of an `RNG15_RFL8_NIR8` pixel (4 bytes): no SIGNAL (0), REFLECTIVITY byte 2,
/// NEAR_IR byte 3 × 16.
pub(super) fn channels_rng15(px: &[u8; 4], _second: bool) -> PixelChannels {
    PixelChannels {
        signal: 0,
        reflectivity: px[2],
        near_ir: u16::from(px[3]) << 4,
    }
}

/// The channels of a dual-return pixel (`RNG19_RFL8_SIG16_NIR16_DUAL`, 16 bytes, and
/// `FIVE_WORD_PIXEL`, 20 bytes, the same fields in bytes 0..14): the first return's
/// REFLECTIVITY byte 3 and SIGNAL u16 at byte 8, the second's REFLECTIVITY2 byte 7 and SIGNAL2
/// u16 at byte 10; NEAR_IR u16 at byte 12 for both.
pub(super) fn channels_dual<const PB: usize>(px: &[u8; PB], second: bool) -> PixelChannels {
    let (refl, sig) = if second { (7, 10) } else { (3, 8) };
    PixelChannels {
        signal: le16(px, sig),
        reflectivity: px.get(refl).copied().unwrap_or(0),
        near_ir: le16(px, 12),
    }
}

/// Writes the kept points of column `c` in the ouster-ros layout `L`: the column kernel
/// stores each kept candidate straight into the buffer (the generic conversion,
/// [`Layout::from_point`], of the point the other layouts store), then each point just written
/// takes the signal, reflectivity and near-IR of its own pixel and return, read by `channels`.
/// The kept candidates are walked in the kernel's order (per row the first return, then a dual
/// profile's second unless identical, each when its range is in the window), so the `k`-th
/// kept candidate is the `k`-th point written.
#[inline(never)]
fn push_ouster_points<const PB: usize, L: OusterRosPoint>(
    c: &OusterColumnIn<'_>,
    pixels: &[[u8; PB]],
    out: &mut PointBuf,
    channels: impl Fn(&[u8; PB], bool) -> PixelChannels,
) {
    let first = out.len();
    out.extend_compacted_with(c.candidates(), ColumnFill(c));
    let Some(written) = out.typed_mut::<L>().and_then(|w| w.get_mut(first..)) else {
        return;
    };
    let window = |r: u32| c.lo.max(1) <= r && r < c.hi;
    let mut points = written.iter_mut();
    for row in 0..c.rows.min(OUSTER_MAX_ROWS) {
        let (r1, r2) = (c.range[0][row], c.range[1][row]);
        let px = pixels.get(row);
        let mut set = |second: bool| {
            if let Some(p) = points.next() {
                p.set_channels(px.map_or(PixelChannels::default(), |px| channels(px, second)));
            }
        };
        if window(r1) {
            set(false);
        }
        if c.dual && r1 != r2 && window(r2) {
            set(true);
        }
    }
}

/// One candidate point of `c`'s row `row`: range `range_mm` (mm), reflectivity `intensity`.
#[inline(always)]
fn point(
    c: &OusterColumnIn<'_>,
    row: usize,
    range_mm: u32,
    intensity: u8,
    return_type: ReturnType,
) -> PointXYZIRCAEDT {
    let [x, y, z] = c.lut.xyz(row, range_mm);
    PointXYZIRCAEDT {
        x,
        y,
        z,
        intensity,
        return_type: return_type as u8,
        channel: row as u16,
        azimuth: lut::at(c.lut.azimuth, row),
        elevation: lut::at(c.lut.elevation, row),
        distance: range_mm as f32 / 1000.0,
        time_stamp: c.t,
    }
}

/// The candidate points of a column (the portable form of `simd::ouster_column_points`, which
/// x86-64 uses; a test holds them equal bit for bit): per row the first return, kept when
/// `max(lo, 1) <= range < hi` (`Identical` when a dual profile's second return has the same range,
/// else `Strongest`), then for a dual profile the second (`SecondStrongest`, kept when in the
/// window and not identical), written at the write position, which advances past kept ones.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(super) fn column_points_portable<L: Layout>(
    c: &OusterColumnIn<'_>,
    out: &mut Compactor<'_, L>,
) {
    let window = |r: u32| c.lo.max(1) <= r && r < c.hi;
    for row in 0..c.rows.min(OUSTER_MAX_ROWS) {
        let (r1, r2) = (c.range[0][row], c.range[1][row]);
        let identical = c.dual && r1 == r2;
        let rt1 = if identical {
            ReturnType::Identical
        } else {
            ReturnType::Strongest
        };
        out.put_point(point(c, row, r1, c.intensity[0][row], rt1), window(r1));
        if c.dual {
            let p = point(c, row, r2, c.intensity[1][row], ReturnType::SecondStrongest);
            out.put_point(p, !identical && window(r2));
        }
    }
}

/// The candidate points of a column in layout `L`: SSE2 on x86-64, portable elsewhere, each
/// point built in registers and written once.
#[inline(always)]
pub(super) fn column_points<L: Layout>(c: &OusterColumnIn<'_>, out: &mut Compactor<'_, L>) {
    #[cfg(target_arch = "x86_64")]
    crate::simd::ouster_column_points(c, out);
    #[cfg(not(target_arch = "x86_64"))]
    column_points_portable(c, out);
}

/// A column's candidates as a [`FillPoints`] writer, for the layouts without Ouster's own
/// channels.
struct ColumnFill<'a, 'b>(&'a OusterColumnIn<'b>);

impl FillPoints for ColumnFill<'_, '_> {
    #[inline(always)]
    fn fill<L: Layout>(self, out: &mut Compactor<'_, L>) {
        column_points(self.0, out);
    }
}

/// Decodes one column's pixels (`h × PB` bytes) with its table column: `extract` reads each
/// pixel's returns into the column's arrays (a row outside the field of view gets none), then
/// [`column_points`] writes every row's candidate point(s) into slots reserved at the end of
/// `out`, of which only the kept ones stay.
#[allow(clippy::too_many_arguments)]
fn decode_column_with<const PB: usize, const DUAL: bool>(
    pixels: &[u8],
    lut: Column<'_>,
    keep: Option<&[bool]>,
    t: u32,
    (lo, hi): (u32, u32),
    returns: &mut ColumnReturns,
    out: &mut PointBuf,
    (layout, extract, channels): (
        OusterLayout,
        impl Fn(&[u8; PB]) -> Returns,
        impl Fn(&[u8; PB], bool) -> PixelChannels,
    ),
) {
    let (chunks, _) = pixels.as_chunks::<PB>();
    let rows = chunks.len().min(lut.dx.len()).min(OUSTER_MAX_ROWS);
    let ColumnReturns { range, intensity } = returns;
    // The rows the kernel reads past `rows` (up to a multiple of 4) hold no return, whatever
    // an earlier column of another row count left there (a recalibration). SSE2 reads
    // the rows in groups of four as far as it can (`simd::ouster_extract`, equal to `extract`
    // by a test), `extract` the rest.
    for r in &mut range[..] {
        r[rows..rows.next_multiple_of(4).min(OUSTER_MAX_ROWS)].fill(0);
    }
    #[cfg(target_arch = "x86_64")]
    let done = crate::simd::ouster_extract(pixels, PB, layout, rows, range, intensity);
    #[cfg(not(target_arch = "x86_64"))]
    let done = {
        let _ = layout;
        0
    };
    for (row, px) in chunks.iter().enumerate().take(rows).skip(done) {
        let ((r1, i1), (r2, i2)) = extract(px);
        range[0][row] = r1;
        intensity[0][row] = i1;
        if DUAL {
            range[1][row] = r2;
            intensity[1][row] = i2;
        }
    }
    if let Some(k) = keep {
        let [first, second] = range;
        for (row, (r1, r2)) in first
            .iter_mut()
            .zip(second.iter_mut())
            .take(rows)
            .enumerate()
        {
            if !k.get(row).copied().unwrap_or(false) {
                (*r1, *r2) = (0, 0);
            }
        }
    }
    let c = OusterColumnIn {
        rows,
        range,
        intensity,
        dual: DUAL,
        lut,
        t,
        lo,
        hi,
    };
    match out.point_type() {
        PointType::Ouster => push_ouster_points::<PB, OusterPoint>(&c, chunks, out, channels),
        PointType::OusterXyzir => push_ouster_points::<PB, OusterXYZIR>(&c, chunks, out, channels),
        _ => out.extend_compacted_with(c.candidates(), ColumnFill(&c)),
    }
}

/// The return of a legacy pixel (12 bytes): range bits 0..20 of word 0, reflectivity the u16
/// at byte 4, capped at 255.
pub(super) fn legacy(px: &[u8; 12]) -> Returns {
    let refl = u16::from_le_bytes([px[4], px[5]]).min(255) as u8;
    ((le32(px, 0) & 0xF_FFFF, refl), (0, 0))
}

/// The return of an `RNG19_RFL8_SIG16_NIR16` pixel (12 bytes): range bits 0..19 of word 0,
/// reflectivity byte 4.
pub(super) fn rng19(px: &[u8; 12]) -> Returns {
    ((le32(px, 0) & 0x7_FFFF, px[4]), (0, 0))
}

/// The return of an `RNG15_RFL8_NIR8` pixel (4 bytes): range in 8 mm units in bits 0..15,
/// reflectivity byte 2.
pub(super) fn rng15(px: &[u8; 4]) -> Returns {
    let r = (u32::from(u16::from_le_bytes([px[0], px[1]])) & 0x7FFF) * 8;
    ((r, px[2]), (0, 0))
}

/// The returns of a low-data-rate dual-return pixel (`RNG15_RFL8_NIR8_DUAL` and
/// `FUSA_RNG15_RFL8_NIR8_DUAL`, 8 bytes): ranges in 8 mm units in bits 0..15 of words 0 and
/// 1, reflectivities in bytes 2 and 6.
pub(super) fn rng15_dual(px: &[u8; 8]) -> Returns {
    let r = |o: usize| (u32::from(u16::from_le_bytes([px[o], px[o + 1]])) & 0x7FFF) * 8;
    ((r(0), px[2]), (r(4), px[6]))
}

/// The channels of a low-data-rate dual-return pixel (8 bytes): no SIGNAL (0), REFLECTIVITY
/// byte 2 (REFLECTIVITY2 byte 6 for the second return), NEAR_IR byte 3 × 16 for both.
pub(super) fn channels_rng15_dual(px: &[u8; 8], second: bool) -> PixelChannels {
    PixelChannels {
        signal: 0,
        reflectivity: if second { px[6] } else { px[2] },
        near_ir: u16::from(px[3]) << 4,
    }
}

/// The returns of a dual-return pixel (`PB` = 16 or 20 bytes): ranges in words 0 and 1,
/// reflectivities in bytes 3 and 7.
pub(super) fn dual<const PB: usize>(px: &[u8; PB]) -> Returns {
    (
        (le32(px, 0) & 0x7_FFFF, px[3]),
        (le32(px, 4) & 0x7_FFFF, px[7]),
    )
}

/// Decodes one column's pixels with its table column (profile dispatch, layouts in [`packet`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn decode_column(
    profile: Profile,
    pixels: &[u8],
    lut: Column<'_>,
    keep: Option<&[bool]>,
    t: u32,
    range: (u32, u32),
    returns: &mut ColumnReturns,
    out: &mut PointBuf,
) {
    match profile {
        Profile::Legacy => {
            let read = (OusterLayout::Legacy, legacy, channels_sig16);
            decode_column_with::<12, false>(pixels, lut, keep, t, range, returns, out, read)
        }
        Profile::Rng19Rfl8Sig16Nir16 => {
            let read = (OusterLayout::Rng19, rng19, channels_sig16);
            decode_column_with::<12, false>(pixels, lut, keep, t, range, returns, out, read)
        }
        Profile::Rng15Rfl8Nir8 => {
            let read = (OusterLayout::Rng15, rng15, channels_rng15);
            decode_column_with::<4, false>(pixels, lut, keep, t, range, returns, out, read)
        }
        Profile::Rng19Rfl8Sig16Nir16Dual => {
            let read = (OusterLayout::Dual, dual::<16>, channels_dual::<16>);
            decode_column_with::<16, true>(pixels, lut, keep, t, range, returns, out, read)
        }
        Profile::FiveWordPixel => {
            let read = (OusterLayout::Dual, dual::<20>, channels_dual::<20>);
            decode_column_with::<20, true>(pixels, lut, keep, t, range, returns, out, read)
        }
        Profile::Rng15Rfl8Nir8Dual | Profile::FusaRng15Rfl8Nir8Dual => {
            let read = (OusterLayout::Rng15Dual, rng15_dual, channels_rng15_dual);
            decode_column_with::<8, true>(pixels, lut, keep, t, range, returns, out, read)
        }
    }
}
