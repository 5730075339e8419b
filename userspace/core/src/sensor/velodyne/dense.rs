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
//! slots per instruction, table entries gathered with one 16-byte load per slot and a 4×4
//! transpose. Elsewhere: the same arithmetic in array loops.

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
    fill_sse2(bp, buf, block, t, azf0, lasers);
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

/// The SSE2 [`fill`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fill_sse2(
    bp: &mut BlockPoints<'_>,
    buf: &[u8; DATA_PACKET_LEN],
    block: usize,
    t: &[f32; SLOTS_PER_BLOCK],
    azf0: f32,
    lasers: DenseLasers<'_>,
) {
    use core::arch::x86_64::{
        __m128i, _mm_add_pd, _mm_add_ps, _mm_and_ps, _mm_and_si128, _mm_andnot_ps,
        _mm_castsi128_ps, _mm_cmpgt_epi32, _mm_cmpgt_ps, _mm_cmplt_ps, _mm_cvtepi32_pd,
        _mm_cvtepi32_ps, _mm_cvtpd_ps, _mm_cvtps_pd, _mm_cvtsi128_si32, _mm_cvttpd_epi32,
        _mm_loadl_epi64, _mm_loadu_pd, _mm_loadu_ps, _mm_loadu_si128, _mm_movehl_ps, _mm_movelh_ps,
        _mm_movemask_epi8, _mm_mul_pd, _mm_mul_ps, _mm_or_ps, _mm_packs_epi32, _mm_packus_epi16,
        _mm_set_epi32, _mm_set1_epi32, _mm_set1_pd, _mm_set1_ps, _mm_setzero_si128, _mm_shuffle_ps,
        _mm_srli_epi32, _mm_storeu_ps, _mm_storeu_si128, _mm_sub_epi32, _mm_sub_pd,
        _mm_unpackhi_epi64, _mm_unpacklo_epi64, _mm_xor_ps,
    };
    if block >= super::BLOCKS {
        return;
    }
    // Slot `k`'s 3 bytes start at `100·block + 4 + 3k`; a 4-byte load there reads at most
    // up to byte `100·11 + 4 + 93 + 4 = 1201 <= 1206` of the packet.
    let base = block * BLOCK_LEN + 4;
    let word = |k: usize| -> i32 {
        let o = base + 3 * k;
        buf.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, i32::from_le_bytes)
    };
    // SAFETY: SSE2 is part of the x86-64 baseline, so every intrinsic is available. Every
    // load/store addresses elements `k..k + 4` (k = 0, 4, .., 28) of a 32-element array
    // (`loadu_pd` elements `k..k + 2` and `k + 2..k + 4` of the f64 array), or one 8-byte
    // `[f32; 2]` entry of the trig table at an index clamped below 36000; `loadu`/`storeu`
    // and `loadl_epi64` (an unaligned 8-byte read) need no alignment.
    unsafe {
        let az0 = _mm_set1_ps(azf0);
        let resv = _mm_set1_ps(lasers.res);
        let eps = _mm_set1_ps(1e-6);
        let neg_zero = _mm_set1_ps(-0.0);
        let turn_f = _mm_set1_ps(AZIMUTH_UNITS as f32);
        let half = _mm_set1_pd(0.5);
        let last = _mm_set1_epi32(AZIMUTH_UNITS as i32 - 1);
        let turn_i = _mm_set1_epi32(AZIMUTH_UNITS as i32);
        let low16 = _mm_set1_epi32(0xFFFF);
        let byte = _mm_set1_epi32(0xFF);
        for k in (0..SLOTS_PER_BLOCK).step_by(4) {
            let w = _mm_set_epi32(word(k + 3), word(k + 2), word(k + 1), word(k));
            let raw = _mm_and_si128(w, low16);
            let inten = _mm_and_si128(_mm_srli_epi32::<16>(w), byte);
            // Distance: raw·res, plus corr where that exceeds 1e-6, else plus -0.0.
            let x = _mm_mul_ps(_mm_cvtepi32_ps(raw), resv);
            let sel = _mm_cmpgt_ps(x, eps);
            let corr = _mm_loadu_ps(lasers.corr.as_ptr().add(k));
            let d = _mm_add_ps(
                x,
                _mm_or_ps(_mm_and_ps(sel, corr), _mm_andnot_ps(sel, neg_zero)),
            );
            // Azimuth: f32 interpolation, f64 correction, lift, f64 round, wrap.
            let a = _mm_add_ps(az0, _mm_loadu_ps(t.as_ptr().add(k)));
            let rot = lasers.rot.as_ptr().add(k);
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
                bp.azimuth_cdeg.as_mut_ptr().add(k).cast::<__m128i>(),
                wrapped,
            );
            if _mm_movemask_epi8(_mm_cmpgt_epi32(wrapped, last)) != 0 {
                // Only across a gap of more than a turn: reduce these four.
                for a in &mut bp.azimuth_cdeg[k..k + 4] {
                    *a %= AZIMUTH_UNITS;
                }
            }
            // Table entries [cos, sin] of the four azimuths, de-interleaved; the angle in rad
            // as f32(f64(cdeg) · π/18000), two lanes per f64 multiply.
            let entry = |j: usize| {
                let i = bp.azimuth_cdeg[k + j].min(AZIMUTH_UNITS - 1) as usize;
                _mm_castsi128_ps(_mm_loadl_epi64(lasers.trig[i].as_ptr().cast::<__m128i>()))
            };
            let e01 = _mm_movelh_ps(entry(0), entry(1));
            let e23 = _mm_movelh_ps(entry(2), entry(3));
            let cos = _mm_shuffle_ps::<0b10_00_10_00>(e01, e23);
            let sin = _mm_shuffle_ps::<0b11_01_11_01>(e01, e23);
            let azv = _mm_loadu_si128(bp.azimuth_cdeg.as_ptr().add(k).cast::<__m128i>());
            let per = _mm_set1_pd(super::RAD_PER_CDEG);
            let rad = _mm_movelh_ps(
                _mm_cvtpd_ps(_mm_mul_pd(_mm_cvtepi32_pd(azv), per)),
                _mm_cvtpd_ps(_mm_mul_pd(
                    _mm_cvtepi32_pd(_mm_unpackhi_epi64(azv, azv)),
                    per,
                )),
            );
            let xy = _mm_mul_ps(d, _mm_loadu_ps(lasers.cos_vert.as_ptr().add(k)));
            _mm_storeu_ps(bp.x.as_mut_ptr().add(k), _mm_mul_ps(xy, cos));
            _mm_storeu_ps(
                bp.y.as_mut_ptr().add(k),
                _mm_xor_ps(_mm_mul_ps(xy, sin), neg_zero),
            );
            _mm_storeu_ps(
                bp.z.as_mut_ptr().add(k),
                _mm_mul_ps(d, _mm_loadu_ps(lasers.sin_vert.as_ptr().add(k))),
            );
            _mm_storeu_ps(bp.distance.as_mut_ptr().add(k), d);
            _mm_storeu_ps(bp.azimuth.as_mut_ptr().add(k), rad);
            let bytes = _mm_packus_epi16(
                _mm_packs_epi32(inten, _mm_setzero_si128()),
                _mm_setzero_si128(),
            );
            let four = _mm_cvtsi128_si32(bytes).to_le_bytes();
            bp.intensity[k..k + 4].copy_from_slice(&four);
        }
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
            let a = run(fill_sse2, &case);
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
