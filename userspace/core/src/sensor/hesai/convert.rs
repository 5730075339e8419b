//! The Hesai point writer: a block group's returns to points (distance m, azimuth and
//! elevation f32 rad, Nebula's Hesai axes, `time_stamp` ns after the frame start), by the
//! general path ([`HesaiStream::convert_group`]) or the fast branch-free loops (`fast`), and
//! the range filter as a raw-value window (`raw_window`).

#![forbid(unsafe_code)]

use crate::point::{PointXYZIRCAEDT, ReturnType};
use crate::point_buf::PointBuf;
use crate::scan::Bound;
use crate::vendor::SensorModel;

use std::f64::consts::PI;

use super::cutter::{TAU_F32, argmin};
use super::packet::Packet;
use super::stream::HesaiStream;
use super::{AT128_UNITS, return_type};

impl HesaiStream {
    /// The fast conversion of a block group (single or dual return, every channel in one frame
    /// buffer, no field of view, not AT128, times within ±2^62 ns): the same points as
    /// [`Self::convert_group`], bit for bit and in the same order. False when it does not
    /// apply (nothing done).
    pub(super) fn convert_fast(
        &mut self,
        p: &Packet<&[u8]>,
        group: usize,
        n: usize,
        packet_ns: i64,
    ) -> bool {
        const SAFE: i64 = 1 << 62;
        if !self.fast || n > 2 || self.layout.channels > fast::MAX_CHANNELS {
            return false;
        }
        let Some(b) = self.cutter.state.as_ref().and_then(|s| s.uniform) else {
            return false;
        };
        let start = self.bufs[usize::from(b)].start_ns;
        if !(0..SAFE).contains(&packet_ns) || !(-SAFE..SAFE).contains(&start) {
            return false;
        }
        let l = self.layout;
        let c = l.channels;
        let bytes = p.as_bytes();
        let o0 = l.unit_offset(group, 0);
        let o1 = l.unit_offset(group + n - 1, 0);
        let (Some(b0), Some(b1)) = (
            bytes.get(o0..o0 + c * l.unit_len),
            bytes.get(o1..o1 + c * l.unit_len),
        ) else {
            return false;
        };
        let raw_az = p.azimuth(group);
        let a = &self.tables.angles;
        let (bs, bc) = a
            .blk_sc
            .get(usize::from(raw_az))
            .copied()
            .unwrap_or((0.0, 1.0));
        let g = Group {
            unit: f64::from(p.dis_unit_mm()) / 1000.0,
            window: (self.window.1, self.window.2),
            blk: a.blk_rad.get(usize::from(raw_az)).copied().unwrap_or(0.0),
            bs,
            bc,
            base_ns: packet_ns - start,
            threshold: self.dual_threshold_m,
            rt: self.rt_cache.1,
        };
        let tables = Tables {
            off_rad: &a.off_rad[..c],
            off_sin: &a.off_sin[..c],
            off_cos: &a.off_cos[..c],
            el_rad: &a.el_rad[..c],
            sin_el: &a.sin_el[..c],
            cos_el: &a.cos_el[..c],
            off0: &self.offsets[group * c..(group + 1) * c],
            off1: &self.offsets[(group + n - 1) * c..(group + n) * c],
        };
        let points = &mut self.bufs[usize::from(b)].points;
        let scratch = &mut self.fast_scratch;
        match (n, l.unit_len) {
            (1, 3) => fast::single::<3>(&g, &tables, b0, points, scratch),
            (1, _) => fast::single::<4>(&g, &tables, b0, points, scratch),
            (_, 3) => fast::dual::<3>(&g, &tables, b0, b1, points, scratch),
            _ => fast::dual::<4>(&g, &tables, b0, b1, points, scratch),
        }
        true
    }

    /// Fills `az_scratch`, `at128_trig` and the cutter's min/max channels for AT128 encoder
    /// azimuth `a`; false if `a` lies in no field of the correction file.
    pub(super) fn at128_angles(&mut self, a: u32) -> bool {
        let Some(c) = self.tables.at128.as_ref() else {
            return false;
        };
        let n = AT128_UNITS as f32;
        let pi = std::f32::consts::PI;
        self.scratch_raw = None;
        self.az_scratch.clear();
        for (ch, trig) in self.at128_trig.iter_mut().enumerate() {
            let Some((az, el)) = c.corrected(ch, a) else {
                return false;
            };
            self.az_scratch
                .push((az as f64 / 25_600.0 * (PI / 180.0)) as f32);
            let el_n = el.rem_euclid(AT128_UNITS) as f32;
            let az_f = 2.0 * az as f32 * pi / n;
            let el_f = 2.0 * el_n * pi / n;
            *trig = [
                az_f.sin(),
                az_f.cos(),
                (2.0 * el as f64 * PI / AT128_UNITS as f64) as f32,
                el_f.sin(),
                el_f.cos(),
            ];
        }
        self.cutter.min_idx = argmin(&self.az_scratch, |x, y| x < y);
        self.cutter.max_idx = argmin(&self.az_scratch, |x, y| x > y);
        true
    }

    pub(super) fn convert_group(
        &mut self,
        p: &Packet<&[u8]>,
        group: usize,
        n: usize,
        rm_byte: u8,
        packet_ns: i64,
    ) {
        let Some(st) = self.cutter.state.as_ref() else {
            return;
        };
        let unit = f64::from(p.dis_unit_mm()) / 1000.0;
        let raw_az = usize::from(p.azimuth(group));
        let (bs, bc) = self
            .tables
            .angles
            .blk_sc
            .get(raw_az)
            .copied()
            .unwrap_or((0.0, 1.0));
        let model = self.layout.model;
        let (lo, hi) = self.range;
        for ch in 0..self.layout.channels {
            let mut units = [(0u16, 0u8); 3];
            for (k, u) in units.iter_mut().enumerate().take(n) {
                *u = (p.distance_raw(group + k, ch), p.reflectivity(group + k, ch));
            }
            let units = &units[..n];
            if !st.in_fov[ch] {
                continue;
            }
            for k in 0..n {
                let (raw, refl) = units[k];
                let distance = (f64::from(raw) * unit) as f32;
                if raw == 0 || distance < lo || distance > hi {
                    continue;
                }
                let rt = return_type(model, rm_byte, k, units);
                if k != n - 1 {
                    if rt == ReturnType::Identical {
                        continue;
                    }
                    let close = units.iter().enumerate().any(|(j, &(r, _))| {
                        j != k
                            && ((f64::from(r) * unit) as f32 - distance).abs()
                                < self.dual_threshold_m
                    });
                    if close {
                        continue;
                    }
                }
                let offset = self
                    .offsets
                    .get((group + k) * self.layout.channels + ch)
                    .copied()
                    .unwrap_or(i64::MIN);
                if offset == i64::MIN {
                    continue;
                }
                let a = &self.tables.angles;
                let (sin_az, cos_az, el_rad, sin_el, cos_el) = if self.tables.at128.is_some() {
                    let [sa, ca, e, se, ce] = self.at128_trig[ch];
                    (sa, ca, e, se, ce)
                } else {
                    let (os, oc) = a.off_sc[ch];
                    (
                        (bs * oc + bc * os) as f32,
                        (bc * oc - bs * os) as f32,
                        a.el_rad[ch],
                        a.sin_el[ch],
                        a.cos_el[ch],
                    )
                };
                let xy = distance * cos_el;
                let b = usize::from(st.buf[ch]);
                let buf = &mut self.bufs[b];
                let t = packet_ns
                    .saturating_add(offset)
                    .saturating_sub(buf.start_ns);
                buf.points.push(PointXYZIRCAEDT {
                    x: xy * sin_az,
                    y: xy * cos_az,
                    z: distance * sin_el,
                    intensity: refl,
                    return_type: rt as u8,
                    channel: ch as u16,
                    azimuth: self.az_scratch[ch],
                    elevation: el_rad,
                    distance,
                    time_stamp: t.clamp(0, i64::from(u32::MAX)) as u32,
                });
            }
        }
    }
}

/// The integer form of the range filter for distance unit `unit_mm`: `(lo, span)` such that a
/// raw distance `r` passes (`r ≠ 0` and `range.0 ≤ (r·unit as f32) ≤ range.1`, the f32
/// comparisons of [`HesaiStream::convert_group`]) exactly when `r.wrapping_sub(lo) < span`.
/// The f32 distance never decreases with `r`, so both bounds are found by bisection.
pub(super) fn raw_window(unit_mm: u8, range: (f32, f32)) -> (u32, u32) {
    let unit = f64::from(unit_mm) / 1000.0;
    let w = crate::scan::raw_window(
        1..65_536,
        |r| (f64::from(r) * unit) as f32,
        (range.0, Bound::Inclusive),
        (range.1, Bound::Inclusive),
    );
    (w.start, w.end - w.start)
}

/// Return types (u8) under return-mode byte `mode` (see [`HesaiStream::rt_cache`]), from
/// [`return_type`] on representative returns: single; dual k = 0 with the other return
/// stronger / not; dual k = 1 likewise. (An identical pair is [`ReturnType::Identical`].)
pub(super) fn return_types(model: SensorModel, mode: u8) -> [u8; 5] {
    let rt = |k: usize, u: &[(u16, u8)]| return_type(model, mode, k, u) as u8;
    [
        rt(0, &[(1, 1)]),
        rt(0, &[(1, 4), (2, 5)]),
        rt(0, &[(1, 5), (2, 4)]),
        rt(1, &[(1, 5), (2, 4)]),
        rt(1, &[(1, 4), (2, 5)]),
    ]
}

/// Per-block-group constants of the fast conversion.
struct Group {
    /// Distance unit, m.
    unit: f64,
    /// Raw range window `(lo, span)` ([`raw_window`]).
    window: (u32, u32),
    /// Block azimuth, f32 rad.
    blk: f32,
    /// sin / cos of the block azimuth.
    bs: f64,
    bc: f64,
    /// Packet time minus the frame's start time, ns.
    base_ns: i64,
    /// Dual-return distance threshold, m.
    threshold: f32,
    /// [`return_types`].
    rt: [u8; 5],
}

/// Per-channel tables of the fast conversion (each `channels` long; `off0`/`off1`: firing
/// offsets of the group's first / last block, ns, `i64::MIN` = no firing).
struct Tables<'a> {
    off_rad: &'a [f32],
    off_sin: &'a [f64],
    off_cos: &'a [f64],
    el_rad: &'a [f32],
    sin_el: &'a [f32],
    cos_el: &'a [f32],
    off0: &'a [i64],
    off1: &'a [i64],
}

/// The fast conversion loops: per channel every candidate point is computed and written to
/// the frame's spare capacity, the write position advancing only for kept points (no branch
/// on the data). Same arithmetic as [`HesaiStream::convert_group`], so the same bits.
pub(super) mod fast {
    use super::{Group, PointBuf, PointXYZIRCAEDT, ReturnType, TAU_F32, Tables};
    use crate::layout::Layout;
    use crate::simd::{Compactor, FillPoints};

    /// `normalize(blk + off)` for `blk` in [0, 2π) and `off` in [−π, π] (always its single
    /// add / subtract case).
    #[inline(always)]
    fn azimuth(blk: f32, off: f32) -> f32 {
        let a = blk + off;
        let a = if a < 0.0 { a + TAU_F32 } else { a };
        if a >= TAU_F32 { a - TAU_F32 } else { a }
    }

    #[inline(always)]
    fn time(base: i64, off: i64) -> u32 {
        base.wrapping_add(off).clamp(0, i64::from(u32::MAX)) as u32
    }

    #[inline(always)]
    fn unit<const UL: usize>(block: &[u8], ch: usize) -> (u16, u8) {
        let u = &block[ch * UL..ch * UL + 3];
        (u16::from_le_bytes([u[0], u[1]]), u[2])
    }

    /// Channels per block the fast path handles (the largest model has 128).
    pub(super) const MAX_CHANNELS: usize = 128;

    /// One block's candidate points, structure of arrays (stage 1).
    #[derive(Clone)]
    struct Soa {
        d: [f32; MAX_CHANNELS],
        x: [f32; MAX_CHANNELS],
        y: [f32; MAX_CHANNELS],
        z: [f32; MAX_CHANNELS],
        r: [u16; MAX_CHANNELS],
        f: [u8; MAX_CHANNELS],
    }

    impl Soa {
        /// Channel `ch`'s candidate point, with the fields that are not the block's own.
        #[inline(always)]
        fn point(
            &self,
            ch: usize,
            return_type: u8,
            azimuth: f32,
            elevation: f32,
            time_stamp: u32,
        ) -> PointXYZIRCAEDT {
            PointXYZIRCAEDT {
                x: self.x[ch],
                y: self.y[ch],
                z: self.z[ch],
                intensity: self.f[ch],
                return_type,
                channel: ch as u16,
                azimuth,
                elevation,
                distance: self.d[ch],
                time_stamp,
            }
        }

        /// Gathers block `blk`'s units and computes distance and x/y/z (array loops the
        /// compiler vectorises).
        #[inline(always)]
        fn fill<const UL: usize>(&mut self, g: &Group, t: &Tables, ab: &Azimuths, blk: &[u8]) {
            let c = t.off_rad.len();
            for (ch, (r, f)) in self.r[..c].iter_mut().zip(&mut self.f[..c]).enumerate() {
                (*r, *f) = unit::<UL>(blk, ch);
            }
            for (d, &r) in self.d[..c].iter_mut().zip(&self.r[..c]) {
                *d = (f64::from(r) * g.unit) as f32;
            }
            for ch in 0..c {
                let d = self.d[ch];
                let xy = d * t.cos_el[ch];
                self.x[ch] = xy * ab.sin[ch];
                self.y[ch] = xy * ab.cos[ch];
                self.z[ch] = d * t.sin_el[ch];
            }
        }
    }

    /// The corrected azimuth of every channel of the group and its sin / cos (stage 1).
    #[derive(Clone)]
    struct Azimuths {
        az: [f32; MAX_CHANNELS],
        sin: [f32; MAX_CHANNELS],
        cos: [f32; MAX_CHANNELS],
    }

    impl Azimuths {
        /// Fills the first `channels` entries for group `g`.
        #[inline(always)]
        fn fill(&mut self, g: &Group, t: &Tables) {
            let c = t.off_rad.len();
            for ch in 0..c {
                let (os, oc) = (t.off_sin[ch], t.off_cos[ch]);
                self.sin[ch] = (g.bs * oc + g.bc * os) as f32;
                self.cos[ch] = (g.bc * oc - g.bs * os) as f32;
                self.az[ch] = azimuth(g.blk, t.off_rad[ch]);
            }
        }
    }

    /// The stage-1 arrays of one block group, kept by the stream (about 6.4 KB) so that they
    /// are not zeroed again for every group: each loop writes the first `channels` entries
    /// before it reads them.
    #[derive(Clone)]
    pub(crate) struct Scratch {
        az: Azimuths,
        s0: Soa,
        s1: Soa,
    }

    impl Scratch {
        pub(crate) fn boxed() -> Box<Self> {
            let soa = Soa {
                d: [0.0; MAX_CHANNELS],
                x: [0.0; MAX_CHANNELS],
                y: [0.0; MAX_CHANNELS],
                z: [0.0; MAX_CHANNELS],
                r: [0; MAX_CHANNELS],
                f: [0; MAX_CHANNELS],
            };
            Box::new(Self {
                az: Azimuths {
                    az: [0.0; MAX_CHANNELS],
                    sin: [0.0; MAX_CHANNELS],
                    cos: [0.0; MAX_CHANNELS],
                },
                s0: soa.clone(),
                s1: soa,
            })
        }
    }

    impl std::fmt::Debug for Scratch {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Scratch")
        }
    }

    /// Single return: block `b0`'s units of the group.
    pub(super) fn single<const UL: usize>(
        g: &Group,
        t: &Tables,
        b0: &[u8],
        points: &mut PointBuf,
        scratch: &mut Scratch,
    ) {
        let c = t.off_rad.len().min(MAX_CHANNELS);
        let Scratch { az: ab, s0: s, .. } = scratch;
        ab.fill(g, t);
        s.fill::<UL>(g, t, ab, b0);
        points.extend_compacted_with(c, Single { g, t, ab, s, c });
    }

    /// The channels of a single-return block as a [`FillPoints`] writer (any layout).
    struct Single<'a> {
        g: &'a Group,
        t: &'a Tables<'a>,
        ab: &'a Azimuths,
        s: &'a Soa,
        c: usize,
    }

    impl FillPoints for Single<'_> {
        #[inline(always)]
        fn fill<L: Layout>(self, out: &mut Compactor<'_, L>) {
            let Single { g, t, ab, s, c } = self;
            let rt = g.rt[0];
            for ch in 0..c {
                let off = t.off0[ch];
                let keep =
                    u32::from(s.r[ch]).wrapping_sub(g.window.0) < g.window.1 && off != i64::MIN;
                let p = s.point(ch, rt, ab.az[ch], t.el_rad[ch], time(g.base_ns, off));
                out.put_point(p, keep);
            }
        }
    }

    /// Dual return: blocks `b0` (k = 0) and `b1` (k = 1, the last) of the group, per channel
    /// return 0 then return 1.
    pub(super) fn dual<const UL: usize>(
        g: &Group,
        t: &Tables,
        b0: &[u8],
        b1: &[u8],
        points: &mut PointBuf,
        scratch: &mut Scratch,
    ) {
        let c = t.off_rad.len().min(MAX_CHANNELS);
        let Scratch { az: ab, s0, s1 } = scratch;
        ab.fill(g, t);
        s0.fill::<UL>(g, t, ab, b0);
        s1.fill::<UL>(g, t, ab, b1);
        points.extend_compacted_with(
            2 * c,
            Dual {
                g,
                t,
                ab,
                s0,
                s1,
                c,
            },
        );
    }

    /// The channels of a dual-return block pair as a [`FillPoints`] writer (any layout).
    struct Dual<'a> {
        g: &'a Group,
        t: &'a Tables<'a>,
        ab: &'a Azimuths,
        s0: &'a Soa,
        s1: &'a Soa,
        c: usize,
    }

    impl FillPoints for Dual<'_> {
        #[inline(always)]
        fn fill<L: Layout>(self, out: &mut Compactor<'_, L>) {
            let Dual {
                g,
                t,
                ab,
                s0,
                s1,
                c,
            } = self;
            for ch in 0..c {
                let (r0, f0, r1, f1) = (s0.r[ch], s0.f[ch], s1.r[ch], s1.f[ch]);
                let (d0, d1) = (s0.d[ch], s1.d[ch]);
                let (off0, off1) = (t.off0[ch], t.off1[ch]);
                let identical = r0 == r1 && f0 == f1;
                let keep0 = u32::from(r0).wrapping_sub(g.window.0) < g.window.1
                    && !identical
                    && (d1 - d0).abs() >= g.threshold
                    && off0 != i64::MIN;
                let keep1 = u32::from(r1).wrapping_sub(g.window.0) < g.window.1 && off1 != i64::MIN;
                let rt0 = g.rt[1 + usize::from(f1 <= f0)];
                let rt1 = if identical {
                    ReturnType::Identical as u8
                } else {
                    g.rt[3 + usize::from(f0 <= f1)]
                };
                let (az, el) = (ab.az[ch], t.el_rad[ch]);
                out.put_point(s0.point(ch, rt0, az, el, time(g.base_ns, off0)), keep0);
                out.put_point(s1.point(ch, rt1, az, el, time(g.base_ns, off1)), keep1);
            }
        }
    }
}
