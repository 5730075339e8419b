//! Stage 2 of the Velodyne decoders for a dense block (single return: nearly every slot keeps
//! a point): every field of all 32 slots at once, in Nebula's arithmetic, bit for bit.
//!
//! Per slot `k` of a block with raw azimuth `az0` (0.01°), per-slot interpolation `t[k]`
//! (0.01°), and laser constants (`corr` m, `rot` 0.01° as f64, elevation cosine/sine):
//! * distance `d = raw·res (+ corr when raw·res > 1e-6)`, f32 ([`super::raw_distance`]);
//! * corrected azimuth `a = f32(f64(az0 + t[k]) − rot[k])`, lifted by a turn when negative,
//!   rounded half away from zero in f64 and brought into [0, 36000) (0.01°);
//! * `cos`, `sin`, rad of `a` from the shared [`super::TrigTable`];
//! * `x = d·cosv·cos a`, `y = −(d·cosv·sin a)`, `z = d·sinv` (m; x forward, y left, z up).
//!
//! x86-64: SSE2 (the x86-64 baseline), four slots per instruction, the two f64 steps two
//! slots per instruction, table entries gathered with one 8-byte load per slot and a
//! transpose ([`crate::simd::velodyne_dense_fill`]). Elsewhere: the same arithmetic in array
//! loops ([`fill_portable`]); a test checks the two give the same bits.

use super::{AZIMUTH_UNITS, BLOCK_LEN, BlockPoints, DATA_PACKET_LEN, SLOTS_PER_BLOCK, TrigTable};

/// Per-slot laser constants of a block (slot `k` fires the laser these arrays give at `k`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DenseLasers<'a> {
    /// `dist_correction`, m.
    pub corr: &'a [f32; SLOTS_PER_BLOCK],
    /// Cosine of the elevation.
    pub cos_vert: &'a [f32; SLOTS_PER_BLOCK],
    /// Sine of the elevation.
    pub sin_vert: &'a [f32; SLOTS_PER_BLOCK],
    /// `rot_correction`, 0.01°, f64 (Nebula's expression).
    pub rot: &'a [f64; SLOTS_PER_BLOCK],
    /// Range unit, m per count.
    pub res: f32,
    /// The shared sine/cosine table.
    pub trig: TrigTable,
}

/// Fills `bp`'s distance, azimuth (0.01° and rad), x, y, z and intensity for all 32 slots of
/// block `block` (0..11) of the 1206-byte packet `buf`; `t[k]` is slot `k`'s interpolation
/// added to the block azimuth `azf0` (0.01°). The mask and the per-laser fields are left to
/// the caller.
#[inline(always)]
pub(crate) fn fill(
    bp: &mut BlockPoints<'_>,
    buf: &[u8; DATA_PACKET_LEN],
    block: usize,
    t: &[f32; SLOTS_PER_BLOCK],
    azf0: f32,
    lasers: DenseLasers<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if block < super::BLOCKS {
        // The kernel takes plain arrays and constants: the block's slot bytes (the rest of the
        // packet from its first slot: at least 97 bytes for block 11), our per-slot tables.
        let base = block * super::BLOCK_LEN + 4;
        crate::simd::velodyne_dense_fill(
            crate::simd::DenseOut {
                x: &mut bp.x,
                y: &mut bp.y,
                z: &mut bp.z,
                distance: &mut bp.distance,
                azimuth: &mut bp.azimuth,
                azimuth_cdeg: &mut bp.azimuth_cdeg,
                intensity: &mut bp.intensity,
            },
            crate::simd::DenseIn {
                slots: buf.get(base..).unwrap_or(&[]),
                t,
                azf0,
                corr: lasers.corr,
                cos_vert: lasers.cos_vert,
                sin_vert: lasers.sin_vert,
                rot: lasers.rot,
                res: lasers.res,
                trig: &lasers.trig[..],
                turn: AZIMUTH_UNITS,
                rad_per_unit: super::RAD_PER_CDEG,
            },
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    fill_portable(bp, buf, block, t, azf0, lasers);
}

/// The portable [`fill`].
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
pub(crate) fn fill_portable(
    bp: &mut BlockPoints<'_>,
    buf: &[u8; DATA_PACKET_LEN],
    block: usize,
    t: &[f32; SLOTS_PER_BLOCK],
    azf0: f32,
    lasers: DenseLasers<'_>,
) {
    let (blocks, _) = buf.as_chunks::<BLOCK_LEN>();
    let Some(blk) = blocks.get(block) else {
        return;
    };
    let slots = super::slot_view(blk);
    let mut past_turn = false;
    for ((a, &tk), &rot) in bp.azimuth_cdeg.iter_mut().zip(t).zip(lasers.rot) {
        let w = super::lift_round_cdeg((f64::from(azf0 + tk) - rot) as f32);
        let w = if w >= AZIMUTH_UNITS {
            w - AZIMUTH_UNITS
        } else {
            w
        };
        past_turn |= w >= AZIMUTH_UNITS;
        *a = w;
    }
    if past_turn {
        for a in &mut bp.azimuth_cdeg {
            *a %= AZIMUTH_UNITS;
        }
    }
    for (k, &[r0, r1, intensity]) in slots.iter().enumerate() {
        let d = super::raw_distance(u16::from_le_bytes([r0, r1]), lasers.res, lasers.corr[k]);
        let [c, s] = lasers.trig[bp.azimuth_cdeg[k].min(AZIMUTH_UNITS - 1) as usize];
        let rad = super::azimuth_rad(bp.azimuth_cdeg[k]);
        let xy = d * lasers.cos_vert[k];
        bp.distance[k] = d;
        bp.intensity[k] = intensity;
        bp.azimuth[k] = rad;
        bp.x[k] = xy * c;
        bp.y[k] = -(xy * s);
        bp.z[k] = d * lasers.sin_vert[k];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift64 generator.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn f32_in(&mut self, lo: f32, hi: f32) -> f32 {
            lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
        }
    }

    type FillFn =
        fn(&mut BlockPoints<'_>, &[u8; DATA_PACKET_LEN], usize, &[f32; 32], f32, DenseLasers<'_>);

    fn run(fill_fn: FillFn, case: &Case) -> BlockPoints<'static> {
        static RING: [u16; 32] = [0; 32];
        static VERT: [f32; 32] = [0.0; 32];
        static NS: [u32; 32] = [0; 32];
        let mut bp = BlockPoints::new(&RING, &VERT, &NS);
        let lasers = DenseLasers {
            corr: &case.corr,
            cos_vert: &case.cos,
            sin_vert: &case.sin,
            rot: &case.rot,
            res: case.res,
            trig: super::super::trig_table(),
        };
        fill_fn(&mut bp, &case.buf, case.block, &case.t, case.azf0, lasers);
        bp
    }

    struct Case {
        buf: [u8; DATA_PACKET_LEN],
        block: usize,
        t: [f32; 32],
        azf0: f32,
        res: f32,
        corr: [f32; 32],
        cos: [f32; 32],
        sin: [f32; 32],
        rot: [f64; 32],
    }

    /// The SSE2 fill and the portable fill give the same bits for every field, on random
    /// packets with random constants (including azimuths past a turn and negative corrected
    /// azimuths).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse2_fill_equals_portable_fill_bit_for_bit() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for i in 0..4000 {
            let mut buf = [0u8; DATA_PACKET_LEN];
            for b in buf.iter_mut() {
                *b = rng.next() as u8;
            }
            // Every few cases, small raw values (near the 1e-6 m branch) and big advances.
            let big = i % 7 == 0;
            let case = Case {
                buf,
                block: i % super::super::BLOCKS,
                t: std::array::from_fn(|_| rng.f32_in(0.0, if big { 60_000.0 } else { 40.0 })),
                azf0: (rng.next() % 36_000) as f32,
                res: if i % 5 == 0 {
                    1e-7
                } else {
                    rng.f32_in(0.001, 0.01)
                },
                corr: std::array::from_fn(|_| rng.f32_in(-2.0, 2.0)),
                cos: std::array::from_fn(|_| rng.f32_in(0.5, 1.0)),
                sin: std::array::from_fn(|_| rng.f32_in(-0.5, 0.5)),
                rot: std::array::from_fn(|_| f64::from(rng.f32_in(-18_000.0, 18_000.0))),
            };
            let a = run(fill, &case);
            let b = run(fill_portable, &case);
            let bits = |v: &[f32; 32]| v.map(f32::to_bits);
            assert_eq!(a.azimuth_cdeg, b.azimuth_cdeg, "case {i}");
            assert_eq!(bits(&a.distance), bits(&b.distance), "case {i}");
            assert_eq!(bits(&a.azimuth), bits(&b.azimuth), "case {i}");
            assert_eq!(bits(&a.x), bits(&b.x), "case {i}");
            assert_eq!(bits(&a.y), bits(&b.y), "case {i}");
            assert_eq!(bits(&a.z), bits(&b.z), "case {i}");
            assert_eq!(a.intensity, b.intensity, "case {i}");
            assert!(
                a.azimuth_cdeg.iter().all(|&c| c < AZIMUTH_UNITS),
                "case {i}"
            );
        }
    }
}
