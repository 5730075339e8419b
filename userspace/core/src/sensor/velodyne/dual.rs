//! Stage 2 of the VLP-16 decoder for a dual-return block, packed: only the kept slots are
//! computed, into consecutive entries of the [`BlockPoints`] ([`BlockPoints::packed`]).
//!
//! A dual-return block keeps few of its 32 slots (the capture's VLP-16: about 14 of an even
//! "last return" block, whose upward beams see nothing, and 2–3 of an odd "strongest" block,
//! whose returns mostly equal the partner's and are merged), so computing every slot (the
//! single-return [`super::dense`] path) wastes most lanes, and walking the kept slots one at a
//! time leaves the arithmetic scalar. Here the kept slots are gathered first (their raw
//! record, interpolation and laser constants, walking the mask once; the return type is
//! decided on the way), then the arithmetic of [`super::dense`] runs on the gathered lanes,
//! four per instruction (x86-64 SSE2: [`crate::simd::velodyne_packed_fill`]; elsewhere
//! [`fill_portable`], which a test checks gives the same bits), and the consumers copy the
//! entries out without a mask walk.

use super::{
    AZIMUTH_UNITS, BLOCK_LEN, BlockPoints, DATA_PACKET_LEN, SLOTS_PER_BLOCK, TrigTable,
    dense::DenseLasers,
};

/// Per-slot constants of the VLP-16 decoder (slot `k` fires laser `k % 16`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotConsts<'a> {
    /// Channel (ring) of each slot's laser.
    pub ring: &'a [u16; SLOTS_PER_BLOCK],
    /// Elevation of each slot's laser, rad.
    pub vert: &'a [f32; SLOTS_PER_BLOCK],
    /// Firing time of each slot after its block's first firing, ns.
    pub ns: &'a [u32; SLOTS_PER_BLOCK],
    /// `dist_correction`, m.
    pub corr: &'a [f32; SLOTS_PER_BLOCK],
    /// Cosine of the elevation.
    pub cos_vert: &'a [f32; SLOTS_PER_BLOCK],
    /// Sine of the elevation.
    pub sin_vert: &'a [f32; SLOTS_PER_BLOCK],
    /// `rot_correction`, 0.01°, f64.
    pub rot: &'a [f64; SLOTS_PER_BLOCK],
    /// Range unit, m per count.
    pub res: f32,
    /// The shared sine/cosine table.
    pub trig: TrigTable,
}

/// The gathered inputs of the kept slots, one lane per entry; reused across blocks (lanes past
/// a block's entries hold an earlier block's values, computed and never published).
#[derive(Clone, Debug)]
pub(crate) struct Gathered {
    /// `distance lo | distance hi << 8 | reflectivity << 16 | next byte << 24`.
    words: [i32; SLOTS_PER_BLOCK],
    /// Interpolation added to the block azimuth, 0.01°.
    t: [f32; SLOTS_PER_BLOCK],
    rot: [f64; SLOTS_PER_BLOCK],
    corr: [f32; SLOTS_PER_BLOCK],
    cos_vert: [f32; SLOTS_PER_BLOCK],
    sin_vert: [f32; SLOTS_PER_BLOCK],
}

impl Gathered {
    /// Empty lanes.
    pub(crate) fn new() -> Self {
        Self {
            words: [0; SLOTS_PER_BLOCK],
            t: [0.0; SLOTS_PER_BLOCK],
            rot: [0.0; SLOTS_PER_BLOCK],
            corr: [0.0; SLOTS_PER_BLOCK],
            cos_vert: [0.0; SLOTS_PER_BLOCK],
            sin_vert: [0.0; SLOTS_PER_BLOCK],
        }
    }
}

/// Fills `bp` in packed form with the kept slots (bits of `mask`) of block `block` (0..11) of
/// the 1206-byte packet `buf`, in slot order: entry `i` gets its slot, per-laser fields,
/// return type (against the same slot of the partner block `block ^ 1`,
/// [`super::dual_type`], `nebula` as there), distance, azimuth (0.01° and rad), x, y, z and
/// intensity, computed as the single-return path computes a slot (`t[k]`: slot `k`'s
/// interpolation added to the block azimuth `azf0`, 0.01°). Returns the number of entries
/// (`mask.count_ones()`); `bp.mask` is left to the caller.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn fill(
    bp: &mut BlockPoints<'_>,
    g: &mut Gathered,
    buf: &[u8; DATA_PACKET_LEN],
    block: usize,
    mask: u32,
    t: &[f32; SLOTS_PER_BLOCK],
    azf0: f32,
    c: &SlotConsts<'_>,
    nebula: bool,
) -> usize {
    // Slot `k`'s record is the 4 bytes at `100·block + 4 + 3k` (the 4th byte belongs to the
    // next record and is ignored): at most byte `1100 + 4 + 93 + 4 = 1201 <= 1206`.
    let (base, pbase) = (block * BLOCK_LEN + 4, (block ^ 1) * BLOCK_LEN + 4);
    let word = |o: usize| -> u32 {
        buf.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes)
    };
    let mut m = mask;
    let mut i = 0usize;
    while m != 0 {
        let s = m.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
        m &= m - 1;
        let e = i & (SLOTS_PER_BLOCK - 1);
        let w = word(base + 3 * s);
        let pw = word(pbase + 3 * s);
        let (raw, intensity) = (w as u16, (w >> 16) as u8);
        g.words[e] = w as i32;
        g.t[e] = t[s];
        g.rot[e] = c.rot[s];
        g.corr[e] = c.corr[s];
        g.cos_vert[e] = c.cos_vert[s];
        g.sin_vert[e] = c.sin_vert[s];
        bp.return_type[e] = super::dual_type(raw, intensity, pw as u16, (pw >> 16) as u8, nebula);
        bp.slot[e] = s as u8;
        bp.packed_channel[e] = c.ring[s];
        bp.packed_elevation[e] = c.vert[s];
        bp.packed_slot_ns[e] = c.ns[s];
        i += 1;
    }
    bp.packed = true;
    let lasers = DenseLasers {
        corr: &g.corr,
        cos_vert: &g.cos_vert,
        sin_vert: &g.sin_vert,
        rot: &g.rot,
        res: c.res,
        trig: c.trig,
    };
    #[cfg(target_arch = "x86_64")]
    crate::simd::velodyne_packed_fill(bp, &g.words, &g.t, azf0, lasers, i);
    #[cfg(not(target_arch = "x86_64"))]
    fill_portable(bp, &g.words, &g.t, azf0, lasers, i);
    i
}

/// The portable stage 2 of lanes `0..n` (the arithmetic of [`super::dense::fill_portable`],
/// lane `k` reading its record from `words[k]`): distance, azimuth (0.01° and rad), x, y, z,
/// intensity.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
pub(crate) fn fill_portable(
    bp: &mut BlockPoints<'_>,
    words: &[i32; SLOTS_PER_BLOCK],
    t: &[f32; SLOTS_PER_BLOCK],
    azf0: f32,
    lasers: DenseLasers<'_>,
    n: usize,
) {
    for k in 0..n.min(SLOTS_PER_BLOCK) {
        let [r0, r1, intensity, _] = words[k].to_le_bytes();
        let w = super::lift_round_cdeg((f64::from(azf0 + t[k]) - lasers.rot[k]) as f32);
        let w = if w >= AZIMUTH_UNITS {
            w - AZIMUTH_UNITS
        } else {
            w
        };
        let azc = w % AZIMUTH_UNITS;
        let d = super::raw_distance(u16::from_le_bytes([r0, r1]), lasers.res, lasers.corr[k]);
        let [ca, sa] = lasers.trig[azc as usize];
        let xy = d * lasers.cos_vert[k];
        bp.azimuth_cdeg[k] = azc;
        bp.distance[k] = d;
        bp.intensity[k] = intensity;
        bp.azimuth[k] = super::azimuth_rad(azc);
        bp.x[k] = xy * ca;
        bp.y[k] = -(xy * sa);
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

    /// The SSE2 packed fill and the portable one give the same bits for every field of every
    /// computed lane, on random records and constants (azimuths past a turn, negative
    /// corrected azimuths, raw values near the 1e-6 m branch), for every lane count.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse2_packed_fill_equals_portable_fill_bit_for_bit() {
        static RING: [u16; 32] = [0; 32];
        static VERT: [f32; 32] = [0.0; 32];
        static NS: [u32; 32] = [0; 32];
        let trig = super::super::trig_table();
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        for i in 0..4000 {
            let n = i % 33;
            let big = i % 7 == 0;
            let words: [i32; 32] = std::array::from_fn(|_| rng.next() as i32);
            let t: [f32; 32] =
                std::array::from_fn(|_| rng.f32_in(0.0, if big { 60_000.0 } else { 40.0 }));
            let corr: [f32; 32] = std::array::from_fn(|_| rng.f32_in(-2.0, 2.0));
            let cos: [f32; 32] = std::array::from_fn(|_| rng.f32_in(0.5, 1.0));
            let sin: [f32; 32] = std::array::from_fn(|_| rng.f32_in(-0.5, 0.5));
            let rot: [f64; 32] =
                std::array::from_fn(|_| f64::from(rng.f32_in(-18_000.0, 18_000.0)));
            let azf0 = (rng.next() % 36_000) as f32;
            let res = if i % 5 == 0 {
                1e-7
            } else {
                rng.f32_in(0.001, 0.01)
            };
            let lasers = DenseLasers {
                corr: &corr,
                cos_vert: &cos,
                sin_vert: &sin,
                rot: &rot,
                res,
                trig,
            };
            let mut a = BlockPoints::new(&RING, &VERT, &NS);
            let mut b = BlockPoints::new(&RING, &VERT, &NS);
            crate::simd::velodyne_packed_fill(&mut a, &words, &t, azf0, lasers, n);
            fill_portable(&mut b, &words, &t, azf0, lasers, n);
            let bits = |v: &[f32; 32]| v.map(f32::to_bits)[..n].to_vec();
            assert_eq!(a.azimuth_cdeg[..n], b.azimuth_cdeg[..n], "case {i}");
            assert_eq!(bits(&a.distance), bits(&b.distance), "case {i}");
            assert_eq!(bits(&a.azimuth), bits(&b.azimuth), "case {i}");
            assert_eq!(bits(&a.x), bits(&b.x), "case {i}");
            assert_eq!(bits(&a.y), bits(&b.y), "case {i}");
            assert_eq!(bits(&a.z), bits(&b.z), "case {i}");
            assert_eq!(a.intensity[..n], b.intensity[..n], "case {i}");
            assert!(
                a.azimuth_cdeg[..n].iter().all(|&c| c < AZIMUTH_UNITS),
                "case {i}"
            );
        }
    }
}
