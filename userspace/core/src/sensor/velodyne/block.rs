//! One decoded Velodyne data block in structure-of-arrays form, and its consumers.
//!
//! The Velodyne decoders ([`super::Vlp16Decoder`], [`super::multi::MultiDecoder`]) compute a
//! whole block (32 slots, Velodyne manuals' "data block": 32 `[distance, reflectivity]`
//! records after the flag and azimuth) at a time into a [`BlockPoints`]: one array per point
//! field, indexed by slot, plus the mask of slots that carry a point. Array loops over 32
//! slots vectorise, and the consumers turn the kept slots into [`PointXYZIRCAEDT`] records
//! without a branch per slot ([`BlockPoints::append`], [`BlockPoints::append_timed`]) or one
//! at a time with their block and slot ([`BlockPoints::for_each`]).

use crate::layout::Layout;
use crate::point::PointXYZIRCAEDT;
use crate::point_buf::PointBuf;
use crate::simd::{Compactor, FillPoints};

use super::{DecodedPoint, SLOTS_PER_BLOCK};

/// Below this many kept slots a consumer walks the set bits of the mask; from it on it writes
/// every slot and advances only over the kept ones (a block of a single-return packet keeps
/// nearly all 32).
const DENSE_FROM: u32 = 12;

/// One block's slots, structure of arrays; slot `k` is valid when bit `k` of [`Self::mask`]
/// is set (the other entries hold stale values and are never published).
///
/// Cache-line aligned (64 bytes), so every 16-byte vector access to an array is aligned.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct BlockPoints<'a> {
    /// Bit `k` set when slot `k` carries a point that passed the range and field-of-view
    /// filters.
    pub mask: u32,
    /// Forward coordinate, m.
    pub x: [f32; SLOTS_PER_BLOCK],
    /// Left coordinate, m.
    pub y: [f32; SLOTS_PER_BLOCK],
    /// Up coordinate, m.
    pub z: [f32; SLOTS_PER_BLOCK],
    /// Range along the beam, m.
    pub distance: [f32; SLOTS_PER_BLOCK],
    /// Corrected azimuth, rad, [0, 2π).
    pub azimuth: [f32; SLOTS_PER_BLOCK],
    /// Corrected azimuth, 0.01°, 0..36000 (the scan assembler cuts on it).
    pub azimuth_cdeg: [u32; SLOTS_PER_BLOCK],
    /// Reflectivity (0–255), corrected where the model's calibration says so.
    pub intensity: [u8; SLOTS_PER_BLOCK],
    /// [`crate::point::ReturnType`] code.
    pub return_type: [u8; SLOTS_PER_BLOCK],
    /// Channel (ring) of each slot's laser.
    pub channel: &'a [u16; SLOTS_PER_BLOCK],
    /// Elevation of each slot's laser, rad.
    pub elevation: &'a [f32; SLOTS_PER_BLOCK],
    /// Firing time of each slot after its block's first firing, ns.
    pub slot_ns: &'a [u32; SLOTS_PER_BLOCK],
    /// Firing time of the block's first firing after the packet timestamp, ns.
    pub block_ns: u32,
    /// Block index in the packet (0..11).
    pub block: u8,
    /// Laser index of slot 0 (the bank origin: 0, 32, 64 or 96); [`DecodedPoint::slot`] is
    /// `first_laser + k`.
    pub first_laser: u8,
}

impl<'a> BlockPoints<'a> {
    /// An empty block (mask 0) whose per-laser fields are `channel`, `elevation`, `slot_ns`.
    pub fn new(
        channel: &'a [u16; SLOTS_PER_BLOCK],
        elevation: &'a [f32; SLOTS_PER_BLOCK],
        slot_ns: &'a [u32; SLOTS_PER_BLOCK],
    ) -> Self {
        Self {
            mask: 0,
            x: [0.0; SLOTS_PER_BLOCK],
            y: [0.0; SLOTS_PER_BLOCK],
            z: [0.0; SLOTS_PER_BLOCK],
            distance: [0.0; SLOTS_PER_BLOCK],
            azimuth: [0.0; SLOTS_PER_BLOCK],
            azimuth_cdeg: [0; SLOTS_PER_BLOCK],
            intensity: [0; SLOTS_PER_BLOCK],
            return_type: [0; SLOTS_PER_BLOCK],
            channel,
            elevation,
            slot_ns,
            block_ns: 0,
            block: 0,
            first_laser: 0,
        }
    }

    /// The point of slot `k` (`time_stamp` 0).
    #[inline(always)]
    fn point(&self, k: usize) -> PointXYZIRCAEDT {
        PointXYZIRCAEDT {
            x: self.x[k],
            y: self.y[k],
            z: self.z[k],
            intensity: self.intensity[k],
            return_type: self.return_type[k],
            channel: self.channel[k],
            azimuth: self.azimuth[k],
            elevation: self.elevation[k],
            distance: self.distance[k],
            time_stamp: 0,
        }
    }

    /// Firing time of slot `k` after the packet timestamp, ns.
    #[inline(always)]
    pub fn offset_ns(&self, k: usize) -> u32 {
        self.block_ns + self.slot_ns[k & (SLOTS_PER_BLOCK - 1)]
    }

    /// Calls `emit` for every kept slot, in slot order, with its block and laser index.
    pub fn for_each(&self, mut emit: impl FnMut(DecodedPoint)) {
        let mut mask = self.mask;
        while mask != 0 {
            let k = mask.trailing_zeros() as usize & (SLOTS_PER_BLOCK - 1);
            mask &= mask - 1;
            emit(DecodedPoint {
                point: self.point(k),
                azimuth_cdeg: self.azimuth_cdeg[k] as u16,
                offset_ns: self.offset_ns(k),
                block: self.block,
                slot: self.first_laser.wrapping_add(k as u8),
            });
        }
    }

    /// Appends the kept slots' points to `out` in slot order, `time_stamp` 0.
    #[inline]
    pub fn append(&self, out: &mut PointBuf) {
        self.append_points(out, None);
    }

    /// Appends the kept slots' points to the batch's `points`, their azimuths (0.01°) to its
    /// `azimuths` and, when it keeps them, their times to its `times`, in slot order, with `time_stamp = packet_ns + offset − start_ns` (ns, saturating at 0
    /// and at `u32::MAX`): the scan assembler's rule ([`crate::scan::ScanAssembler::add_point`]).
    #[inline]
    pub fn append_timed(&self, b: &mut crate::scan::PointBatch<'_>) {
        let (packet_ns, start_ns) = (b.packet_ns, b.start_ns);
        let mask = self.mask;
        if mask == 0 {
            return;
        }
        let times: [u32; SLOTS_PER_BLOCK] = if packet_ns >= start_ns {
            // The common case, as a u32 array loop that vectorises: `min(x + s, MAX)` with
            // `x = min(packet − start + block_ns, MAX)` is `x.saturating_add(s)`.
            let x = (packet_ns - start_ns)
                .saturating_add(u64::from(self.block_ns))
                .min(u64::from(u32::MAX)) as u32;
            std::array::from_fn(|k| x.saturating_add(self.slot_ns[k]))
        } else {
            std::array::from_fn(|k| {
                let t = packet_ns
                    .saturating_add(u64::from(self.offset_ns(k)))
                    .saturating_sub(start_ns);
                t.min(u64::from(u32::MAX)) as u32
            })
        };
        self.append_points(b.points, Some(&times));
        crate::simd::extend_masked(b.azimuths, mask, |k| self.azimuth_cdeg[k] as u16);
        if let Some(kept) = b.times.as_deref_mut() {
            crate::simd::extend_masked(kept, mask, |k| times[k]);
        }
    }

    /// The shared compaction of the kept slots' points into `out` (`times`: the points'
    /// `time_stamp`, else 0), in its layout. Dense blocks write every slot at the current
    /// output position and advance only past kept ones (no branch per slot; x86-64: SSE2 4×4
    /// transposes per four slots, every layout stored from the registers); sparse
    /// blocks walk the mask's set bits.
    #[inline(always)]
    fn append_points(&self, out: &mut PointBuf, times: Option<&[u32; SLOTS_PER_BLOCK]>) {
        let mask = self.mask;
        if mask == 0 {
            return;
        }
        let time = |k: usize| times.map_or(0, |t| t[k]);
        if mask.count_ones() >= DENSE_FROM {
            out.extend_compacted_with(SLOTS_PER_BLOCK, DenseBlock { bp: self, times });
        } else {
            out.extend_masked(mask, |k| {
                let mut p = self.point(k);
                p.time_stamp = time(k);
                p
            });
        }
    }
}

/// A dense block's slots as a [`FillPoints`] writer: every slot written at the write
/// position, kept ones by the block's mask, in the buffer's layout.
struct DenseBlock<'a, 'b> {
    bp: &'a BlockPoints<'b>,
    times: Option<&'a [u32; SLOTS_PER_BLOCK]>,
}

impl FillPoints for DenseBlock<'_, '_> {
    #[inline(always)]
    fn fill<L: Layout>(self, out: &mut Compactor<'_, L>) {
        let (bp, mask) = (self.bp, self.bp.mask);
        #[cfg(target_arch = "x86_64")]
        {
            crate::simd::compact_block_points(
                crate::simd::CompactIn {
                    mask,
                    x: &bp.x,
                    y: &bp.y,
                    z: &bp.z,
                    azimuth: &bp.azimuth,
                    elevation: bp.elevation,
                    distance: &bp.distance,
                    intensity: &bp.intensity,
                    return_type: &bp.return_type,
                    channel: bp.channel,
                },
                self.times,
                out,
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        for k in 0..SLOTS_PER_BLOCK {
            let mut p = bp.point(k);
            p.time_stamp = self.times.map_or(0, |t| t[k]);
            out.put_point(p, (mask >> k) & 1 == 1);
        }
    }
}
