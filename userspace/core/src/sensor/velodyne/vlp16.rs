//! The VLP-16 point decoder [`Vlp16Decoder`]: calibration + settings, no state between
//! packets; a 1206-byte data packet in, [`DecodedPoint`]s or [`BlockPoints`] (m, rad, 0.01°,
//! ns after the packet timestamp) out. Firing timing and interpolation as in the module docs of
//! [`super`] (VLP-16 User Manual, 63-9243, section 9; Nebula's `vlp16_decoder.cpp`).

#![forbid(unsafe_code)]

use std::f64::consts::PI;

use crate::point::ReturnType;
use crate::sensor::calibration::VelodyneCalibration;
use crate::vendor::{DecodeFlavor, ReturnMode};

use super::arith::{
    TrigTable, azimuth_rad, dual_type, f32_above, f32_below, raw_distance, raw_window, slot_mask,
    slot_view, trig_table, wrap_round_cdeg,
};
use super::{
    AZIMUTH_UNITS, BLOCK_LEN, BLOCKS, BlockPoints, DATA_PACKET_LEN, DecodedPoint, DecoderSettings,
    LASERS, Packet, SLOTS_PER_BLOCK, dense, firing_offset_ns, pick_advance,
};

/// The VLP-16 point decoder: calibration + settings, no state between packets.
#[derive(Clone)]
pub struct Vlp16Decoder {
    calib: VelodyneCalibration,
    settings: DecoderSettings,
    /// `(cos, sin)` of every azimuth unit, f32 (as Nebula's lookup tables), then the azimuth
    /// in rad (`cdeg · π/18000`, f64 rounded to f32) and padding.
    trig: TrigTable,
    /// Range gate of each slot as an inclusive window of raw distance values
    /// ([`raw_window`]); `(1, 0)` (empty) when the slot's laser is not in the calibration.
    raw_lo: [u16; SLOTS_PER_BLOCK],
    /// See `raw_lo`.
    raw_hi: [u16; SLOTS_PER_BLOCK],
    /// Firing time of each slot after its block's first firing, ns.
    slot_ns: [u32; SLOTS_PER_BLOCK],
    /// `rot_correction` of each slot's laser, 0.01° (f64, as Nebula computes it).
    slot_rot: [f64; SLOTS_PER_BLOCK],
    /// `dist_correction` of each slot's laser, m.
    slot_corr: [f32; SLOTS_PER_BLOCK],
    /// Cosine of each slot's laser elevation.
    slot_cos_vert: [f32; SLOTS_PER_BLOCK],
    /// Sine of each slot's laser elevation.
    slot_sin_vert: [f32; SLOTS_PER_BLOCK],
    /// Elevation of each slot's laser, rad.
    slot_vert: [f32; SLOTS_PER_BLOCK],
    /// Ring (channel) of each slot's laser.
    slot_ring: [u16; SLOTS_PER_BLOCK],
    /// Firing time of each slot in µs as Nebula's f32 expression `laser·2.304 + firing·55.296`.
    slot_us: [f32; SLOTS_PER_BLOCK],
    /// `frac[diff][slot] = diff · slot_us[slot] / 110.592` (f32, Nebula's expression) for every
    /// integer block advance `diff` in `0..FRAC_DIFFS`: the hot loop looks the interpolation
    /// up instead of dividing; larger advances (only across gaps) are computed directly.
    frac: Box<[[f32; SLOTS_PER_BLOCK]]>,
}

/// Block advances (0.01°) covered by the interpolation table: up to 2.55°, far above the
/// 0.4° of a VLP-16 at 20 Hz.
const FRAC_DIFFS: usize = 256;

/// One laser's constants, from which [`Vlp16Decoder::new`] builds the per-slot arrays (slot `k`
/// fires laser `k % 16`).
#[derive(Clone, Copy, Debug, Default)]
struct LaserConst {
    /// `rot_correction` in 0.01° units (f64, as Nebula computes it).
    rot_cdeg: f64,
    cos_vert: f32,
    sin_vert: f32,
    dist_correction: f32,
    vert: f32,
    ring: u16,
}

impl std::fmt::Debug for Vlp16Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The 36,000-entry trig table is left out.
        f.debug_struct("Vlp16Decoder")
            .field("calib", &self.calib)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Vlp16Decoder {
    /// Builds a decoder. `calib` must have 16 lasers (as [`VelodyneCalibration::from_bytes`]
    /// with 16 enforces); missing lasers decode with zero corrections.
    pub fn new(calib: VelodyneCalibration, settings: DecoderSettings) -> Self {
        let trig = trig_table();
        let mut lasers = [LaserConst::default(); LASERS];
        let (min_f, max_f) = (
            f32_above(settings.min_range_m),
            f32_below(settings.max_range_m),
        );
        let res = calib.distance_resolution_m;
        let mut windows = [(1u16, 0u16); LASERS];
        for ((lc, w), l) in lasers.iter_mut().zip(&mut windows).zip(&calib.lasers) {
            *w = raw_window(res, l.dist_correction, min_f, max_f);
            *lc = LaserConst {
                rot_cdeg: f64::from(l.rot_correction) * 180.0 / PI * 100.0,
                cos_vert: l.cos_vert,
                sin_vert: l.sin_vert,
                dist_correction: l.dist_correction,
                vert: l.vert_correction,
                ring: l.ring,
            };
        }
        let slot_us = std::array::from_fn(|slot| {
            (slot % LASERS) as f32 * 2.304f32 + (slot / LASERS) as f32 * 55.296f32
        });
        let frac = (0..FRAC_DIFFS)
            .map(|d| std::array::from_fn(|slot| d as f32 * slot_us[slot] / 110.592f32))
            .collect();
        Self {
            calib,
            settings,
            trig,
            raw_lo: std::array::from_fn(|slot| windows[slot % LASERS].0),
            raw_hi: std::array::from_fn(|slot| windows[slot % LASERS].1),
            slot_rot: std::array::from_fn(|slot| lasers[slot % LASERS].rot_cdeg),
            slot_corr: std::array::from_fn(|slot| lasers[slot % LASERS].dist_correction),
            slot_cos_vert: std::array::from_fn(|slot| lasers[slot % LASERS].cos_vert),
            slot_sin_vert: std::array::from_fn(|slot| lasers[slot % LASERS].sin_vert),
            slot_vert: std::array::from_fn(|slot| lasers[slot % LASERS].vert),
            slot_ring: std::array::from_fn(|slot| lasers[slot % LASERS].ring),
            slot_ns: std::array::from_fn(|slot| firing_offset_ns(ReturnMode::Strongest, 0, slot)),
            slot_us,
            frac,
        }
    }

    /// The decoder settings.
    pub fn settings(&self) -> &DecoderSettings {
        &self.settings
    }

    /// Block azimuth and per-block azimuth advance (0.01° units) used for interpolation, from
    /// the packet's 12 block azimuths `azimuths` (0.01°).
    #[inline(always)]
    fn block_azimuth(&self, azimuths: &[u16; BLOCKS], dual: bool, block: usize) -> (u16, f32) {
        let rot = |b: usize| azimuths[b.min(BLOCKS - 1)];
        let diff = |a: u16, b: u16| {
            (AZIMUTH_UNITS
                .wrapping_add(u32::from(b))
                .wrapping_sub(u32::from(a))
                % AZIMUTH_UNITS) as f32
        };
        match (self.settings.flavor, dual) {
            // Nebula `Vlp16Decoder::unpack`, reproduced exactly. The azimuth of block b > 0 is
            // the value cached as "next" while decoding block b-1: rot[b] in single mode but
            // rot[b+1] in dual mode, so an odd (second-return) block takes the *next* pair's
            // azimuth. The advance is rot[b+step] - az(b) while b+step < 12 (step 1 single,
            // 2 dual); block 12-step gets 0 (no interpolation), and in dual mode block 11 reuses
            // the advance of block 9, rot[11] - rot[10] (0 for well-formed pairs).
            (DecodeFlavor::Nebula, false) => {
                let az = rot(block);
                let d = if block < BLOCKS - 1 {
                    diff(az, rot(block + 1))
                } else {
                    0.0
                };
                (az, d)
            }
            (DecodeFlavor::Nebula, true) => {
                let az = if block == 0 { rot(0) } else { rot(block + 1) };
                let d = if block < BLOCKS - 2 {
                    diff(az, rot(block + 2))
                } else if block == BLOCKS - 2 {
                    0.0
                } else {
                    // Block 11 reuses the advance computed for block 9: rot[11] - rot[10].
                    diff(rot(10), rot(11))
                };
                (az, d)
            }
            // VLP-16 manual: interpolate between this block (pair) and the next one; the last
            // block (pair) reuses the previous advance; a jump over [`MAX_ADVANCE_CDEG`] is a
            // pause in firing, not rotation ([`pick_advance`]).
            (DecodeFlavor::Manual, dual) => {
                let step = 1 + usize::from(dual);
                let first = block - block % step;
                let az = rot(first);
                let fwd = (first + step < BLOCKS).then(|| diff(az, rot(first + step)));
                let back = || (first >= step).then(|| diff(rot(first - step), az));
                (az, pick_advance(fwd, back))
            }
        }
    }

    /// Decodes one validated packet, calling `emit` for every point that survives the range and
    /// field-of-view filters, in packet order: block, firing sequence, laser; except dual
    /// return under [`DecodeFlavor::Manual`], which emits each block pair `(2p, 2p+1)` per
    /// firing sequence (block 2p slots 0..15, block 2p+1 slots 0..15, then slots 16..31 of
    /// each), so every laser's firing times are non-decreasing.
    ///
    /// Rules (Nebula-compatible): a zero distance is "no return"; distance = raw·resolution
    /// (+ `dist_correction` when non-zero), kept when `min_range < d < max_range`. Dual mode:
    /// a point of an odd block (strongest) whose raw distance equals the even block's (last)
    /// is the same return and is skipped; the even-block point is then [`ReturnType::Identical`],
    /// as is any point whose partner slot has no return. Otherwise the type combines
    /// first/last (by distance) and strongest/weak (by reflectivity; on a tie the "last" one
    /// is strongest); see [`DecodeFlavor`] for which distance counts as "first".
    pub fn decode(&self, p: &Packet<&[u8]>, mut emit: impl FnMut(DecodedPoint)) {
        self.decode_blocks(p, |b| b.for_each(&mut emit));
    }

    /// Decodes one validated packet block by block (the rules of [`Self::decode`]): `sink`
    /// gets each block that keeps at least one point as a [`BlockPoints`], in packet order.
    ///
    /// Hot loop: the packet is viewed as 12 fixed-size `[u8; 100]` blocks so no byte access is
    /// bounds-checked; the slots that carry a point come from one SIMD pass (`slot_mask`);
    /// sines/cosines, per-laser constants and the interpolation `diff · t / 110.592`
    /// (Nebula's f32 expression, bit-exact) are tables: no division per point. Single return
    /// (nearly every slot kept) computes every field for all 32 slots in array loops that
    /// vectorise; dual return (about a quarter kept) computes only the kept slots.
    pub fn decode_blocks(&self, p: &Packet<&[u8]>, sink: impl FnMut(&BlockPoints<'_>)) {
        // Two monomorphised loops: the single-return one carries no dual-return code.
        if p.return_mode() == ReturnMode::Dual {
            self.decode_mode::<true>(p, sink);
        } else {
            self.decode_mode::<false>(p, sink);
        }
    }

    #[inline(always)]
    fn decode_mode<const DUAL: bool>(
        &self,
        p: &Packet<&[u8]>,
        mut sink: impl FnMut(&BlockPoints<'_>),
    ) {
        let Ok(buf) = <&[u8; DATA_PACKET_LEN]>::try_from(p.as_bytes()) else {
            return;
        };
        let (blocks, _) = buf.as_chunks::<BLOCK_LEN>();
        let mode = p.return_mode();
        let s = &self.settings;
        let res = self.calib.distance_resolution_m;
        let nebula = s.flavor == DecodeFlavor::Nebula;
        let single_type = match mode {
            ReturnMode::Last => ReturnType::Last,
            ReturnMode::First => ReturnType::First,
            _ => ReturnType::Strongest,
        } as u8;
        let empty = [0u8; BLOCK_LEN];
        let azimuths: [u16; BLOCKS] = std::array::from_fn(|b| {
            blocks
                .get(b)
                .map_or(0, |k| u16::from_le_bytes([k[2], k[3]]))
        });
        let mut bp = BlockPoints::new(&self.slot_ring, &self.slot_vert, &self.slot_ns);
        if !DUAL {
            bp.return_type = [single_type; SLOTS_PER_BLOCK];
        }
        // Computes block `$block` into `$bp` and gives its mask of kept slots (0: nothing to
        // emit). A macro, not a function: both loops below get it inlined with their own
        // `BlockPoints`, as one loop did before.
        macro_rules! fill {
            ($bp:ident, $block:expr) => {{
                let block: usize = $block;
                let bp = &mut $bp;
                'fill: {
                    let Some(blk) = blocks.get(block) else {
                        break 'fill 0;
                    };
                    let (az, diff) = self.block_azimuth(&azimuths, DUAL, block);
                    if nebula
                        && let Some(fov) = s.fov
                        && !fov.block_passes(az)
                    {
                        break 'fill 0;
                    }
                    let pblk = if DUAL {
                        blocks.get(block ^ 1).unwrap_or(&empty)
                    } else {
                        &empty
                    };
                    let odd = DUAL && block % 2 == 1;
                    let slots = slot_view(blk);
                    let pslots = slot_view(pblk);
                    // Stage 1: the slots carrying a point: raw range inside the slot's window
                    // (non-zero, inside the range filter, laser in the calibration; [`raw_window`])
                    // and, in an odd dual block, different from the partner's (identical returns are
                    // merged).
                    let mut mask = slot_mask(slots, &self.raw_lo, &self.raw_hi, odd.then_some(pslots));
                    if mask == 0 {
                        break 'fill 0;
                    }
                    let azf0 = f32::from(az);
                    // `diff` is an integer number of 0.01° (a difference of u16 azimuths).
                    let computed: [f32; SLOTS_PER_BLOCK];
                    let table = match self.frac.get(diff as usize) {
                        Some(t) => t,
                        None => {
                            computed =
                                std::array::from_fn(|slot| diff * self.slot_us[slot] / 110.592f32);
                            &computed
                        }
                    };
                    bp.block = block as u8;
                    bp.block_ns = firing_offset_ns(mode, block, 0);
                    if DUAL {
                        // Stage 2, kept slots only.
                        let mut m = mask;
                        while m != 0 {
                            let slot = m.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
                            m &= m - 1;
                            let [r0, r1, intensity] = slots[slot];
                            let raw = u16::from_le_bytes([r0, r1]);
                            let distance = raw_distance(raw, res, self.slot_corr[slot]);
                            let azc = wrap_round_cdeg(
                                (f64::from(azf0 + table[slot]) - self.slot_rot[slot]) as f32,
                            );
                            let [cos_az, sin_az] = self.trig[azc.min(AZIMUTH_UNITS - 1) as usize];
                            let az_rad = azimuth_rad(azc);
                            let xy = distance * self.slot_cos_vert[slot];
                            let [o0, o1, other_i] = pslots[slot];
                            bp.x[slot] = xy * cos_az;
                            bp.y[slot] = -(xy * sin_az);
                            bp.z[slot] = distance * self.slot_sin_vert[slot];
                            bp.distance[slot] = distance;
                            bp.azimuth[slot] = az_rad;
                            bp.azimuth_cdeg[slot] = azc;
                            bp.intensity[slot] = intensity;
                            bp.return_type[slot] = dual_type(
                                raw,
                                intensity,
                                u16::from_le_bytes([o0, o1]),
                                other_i,
                                nebula,
                            );
                        }
                    } else {
                        // Stage 2, all 32 slots at once ([`dense::fill`]).
                        dense::fill(
                            bp,
                            buf,
                            block,
                            table,
                            azf0,
                            dense::DenseLasers {
                                corr: &self.slot_corr,
                                cos_vert: &self.slot_cos_vert,
                                sin_vert: &self.slot_sin_vert,
                                rot: &self.slot_rot,
                                res,
                                trig: self.trig,
                            },
                        );
                    }
                    if let Some(fov) = s.fov {
                        let mut m = mask;
                        while m != 0 {
                            let slot = m.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
                            m &= m - 1;
                            if !fov.point.contains_cdeg(bp.azimuth_cdeg[slot]) {
                                mask &= !(1 << slot);
                            }
                        }
                    }
                    mask
                }
            }};
        }
        if DUAL && !nebula {
            // Default rules, dual return: the two blocks of a pair are emitted per firing
            // sequence (even block slots 0..15, odd block slots 0..15, then slots 16..31 of
            // each), so every channel's time stamps are non-decreasing.
            const LOW: u32 = (1 << LASERS) - 1;
            let mut odd = BlockPoints::new(&self.slot_ring, &self.slot_vert, &self.slot_ns);
            for pair in 0..BLOCKS / 2 {
                let me = fill!(bp, 2 * pair);
                let mo = fill!(odd, 2 * pair + 1);
                // Block order is already sequence order when the even block has no point of
                // the second sequence or the odd block none of the first: two sinks, not four.
                let halves: &[(bool, u32)] = if me & !LOW == 0 || mo & LOW == 0 {
                    &[(true, u32::MAX), (false, u32::MAX)]
                } else {
                    &[(true, LOW), (false, LOW), (true, !LOW), (false, !LOW)]
                };
                for &(first, m) in halves {
                    let part = if first { &mut bp } else { &mut odd };
                    part.mask = m & if first { me } else { mo };
                    if part.mask != 0 {
                        sink(part);
                    }
                }
            }
        } else {
            for block in 0..BLOCKS {
                let mask = fill!(bp, block);
                if mask != 0 {
                    bp.mask = mask;
                    sink(&bp);
                }
            }
        }
    }
}
