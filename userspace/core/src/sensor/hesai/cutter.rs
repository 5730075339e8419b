//! The per-channel scan cutter, with Nebula's `ScanCutter` semantics in f32 radians: each
//! channel switches frame buffer when its corrected azimuth passes the cut angle (see the
//! module documentation of [`super`], section Frames), restricted to the field of view.

#![forbid(unsafe_code)]

use crate::scan::{AZIMUTH_JITTER_CDEG, Bound, in_sector};

// ---------------------------------------------------------------------------------------------
// Scan cutter (Nebula ScanCutter semantics, f32 radians)
// ---------------------------------------------------------------------------------------------

pub(super) const TAU_F32: f32 = std::f32::consts::TAU;
/// [`AZIMUTH_JITTER_CDEG`] in rad.
const JITTER_RAD: f32 = AZIMUTH_JITTER_CDEG as f32 * (std::f32::consts::PI / 18_000.0);

/// Nebula `normalize_angle`: `a - floor(a / m)·m` computed in f64. For `a` in `(-m, 2m)`
/// a single f32 add/subtract gives the same value (exact by Sterbenz's lemma above `m`,
/// correctly rounded below 0), so that is the fast path.
pub(super) fn normalize(a: f32, m: f32) -> f32 {
    if (0.0..m).contains(&a) {
        a
    } else if a < 0.0 && a > -m {
        a + m
    } else if a >= m && a < 2.0 * m {
        a - m
    } else {
        let (a, m) = (f64::from(a), f64::from(m));
        (a - (a / m).floor() * m) as f32
    }
}

/// Nebula `angle_is_between`: is `a` in the cyclic sector `[s, e]` (bounds optionally
/// exclusive; `s == e` is the full circle), the sector test of every vendor
/// ([`crate::scan::in_sector`]) but for that full circle.
pub(super) fn between(s: f32, e: f32, a: f32, s_inc: bool, e_inc: bool) -> bool {
    if s == e && s == a {
        return s_inc || e_inc;
    }
    if s == e {
        return true;
    }
    let bound = |inc: bool| {
        if inc {
            Bound::Inclusive
        } else {
            Bound::Exclusive
        }
    };
    in_sector(s, e, a, (bound(s_inc), bound(e_inc)))
}

/// What a cutter step asks the frame buffers to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Actions {
    /// Set the start time of these buffers from the current block group.
    pub(super) reset: [bool; 2],
    /// Publish this buffer (before the block group is added).
    pub(super) emit: Option<u8>,
}

#[derive(Clone, Debug)]
pub(super) struct CutState {
    pub(super) current: u8,
    pub(super) last_az: Vec<f32>,
    pub(super) buf: Vec<u8>,
    pub(super) in_fov: Vec<bool>,
    /// `Some(b)`: the first and last channels by azimuth offset (every channel, right after
    /// the first step) are in buffer b; `None`: split.
    buffers_same: Option<u8>,
    fov_same: Option<bool>,
    /// `Some(b)`: every channel is in buffer b.
    pub(super) uniform: Option<u8>,
}

/// `Some(b)` when every entry of `buf` is `b`.
fn uniform(buf: &[u8]) -> Option<u8> {
    let first = buf.first().copied()?;
    buf.iter().all(|&b| b == first).then_some(first)
}

#[derive(Clone, Debug)]
pub(super) struct Cutter {
    pub(super) cut: f32,
    pub(super) fov: (f32, f32),
    pub(super) min_idx: usize,
    pub(super) max_idx: usize,
    pub(super) state: Option<CutState>,
    /// The state of the previous stream (after a timeout, gap or restart), for its vectors.
    pub(super) spare: Option<CutState>,
}

impl Cutter {
    fn in_fov(&self, a: f32) -> bool {
        self.fov.0 == self.fov.1 || between(self.fov.0, self.fov.1, a, true, true)
    }

    fn after_cut(&self, a: f32) -> bool {
        let end = normalize(self.cut + TAU_F32 / 2.0, TAU_F32);
        between(self.cut, end, a, false, true)
    }

    pub(super) fn step(&mut self, az: &[f32]) -> Actions {
        let mut act = Actions::default();
        let (lo, hi) = (self.min_idx, self.max_idx);
        let Some(st) = self.state.as_mut() else {
            // First block group: which channels already lie past the cut? (The vectors of the
            // previous state are reused: a restart allocates nothing.)
            let mut spare = self.spare.take();
            let mut in_fov = spare
                .as_mut()
                .map(|s| std::mem::take(&mut s.in_fov))
                .unwrap_or_default();
            in_fov.clear();
            in_fov.extend(az.iter().map(|&a| self.in_fov(a)));
            let region = (
                normalize(self.cut - TAU_F32 / 4.0, TAU_F32),
                normalize(self.cut + TAU_F32 / 4.0, TAU_F32),
            );
            let mm = [az[lo], az[hi]];
            let near_cut = mm
                .iter()
                .all(|&a| between(region.0, region.1, a, true, true));
            let n_after = mm.iter().filter(|&&a| self.after_cut(a)).count();
            let straddles = near_cut && n_after == 1;
            let mut buf = spare
                .as_mut()
                .map(|s| std::mem::take(&mut s.buf))
                .unwrap_or_default();
            buf.clear();
            if straddles {
                buf.extend(az.iter().map(|&a| u8::from(self.after_cut(a))));
            } else {
                buf.resize(az.len(), 0);
            }
            let mut last_az = spare.map(|s| s.last_az).unwrap_or_default();
            last_az.clear();
            last_az.extend_from_slice(az);
            for (b, f) in buf.iter().zip(&in_fov) {
                if *f {
                    act.reset[usize::from(*b)] = true;
                }
            }
            let first = buf.first().copied().unwrap_or(0);
            let f0 = in_fov.first().copied().unwrap_or(true);
            self.state = Some(CutState {
                current: 0,
                last_az,
                buffers_same: buf.iter().all(|&b| b == first).then_some(first),
                fov_same: in_fov.iter().all(|&f| f == f0).then_some(f0),
                uniform: uniform(&buf),
                buf,
                in_fov,
            });
            return act;
        };
        let before = st.buffers_same;
        for (ch, &a) in az.iter().enumerate() {
            st.in_fov[ch] =
                self.fov.0 == self.fov.1 || between(self.fov.0, self.fov.1, a, true, true);
            let last = st.last_az[ch];
            // A step back of at most AZIMUTH_JITTER_CDEG is encoder jitter, not a turn (Nebula
            // would take it for one): the furthest azimuth reached stays the reference.
            let back = normalize(last - a, TAU_F32);
            if back > 0.0 && back <= JITTER_RAD {
                continue;
            }
            if last != a && between(last, a, self.cut, true, false) {
                st.buf[ch] ^= 1;
            }
            st.last_az[ch] = a;
        }
        st.buffers_same = (st.buf[lo] == st.buf[hi]).then_some(st.buf[lo]);
        st.uniform = uniform(&st.buf);
        st.fov_same = (st.in_fov[lo] == st.in_fov[hi]).then_some(st.in_fov[lo]);
        // Nebula FsmCutInFov: F0, C0_1, F1, C1_0.
        #[derive(PartialEq, Clone, Copy)]
        enum S {
            F(u8),
            C(u8),
        }
        let s = |b: Option<u8>| b.map_or(S::C(st.current), S::F);
        match (s(before), s(st.buffers_same)) {
            (x, y) if x == y => {}
            (S::F(f), S::C(c)) if c == f => act.reset[usize::from(f ^ 1)] = true,
            (S::F(f), S::F(g)) if g != f => {
                act.reset[usize::from(g)] = true;
                act.emit = Some(f);
            }
            (S::C(c), S::F(g)) if g != c => act.emit = Some(c),
            _ => {}
        }
        if act.emit.is_some() {
            st.current ^= 1;
        }
        act
    }

    pub(super) fn block_in_fov(&self) -> bool {
        self.state
            .as_ref()
            .is_none_or(|s| s.fov_same.unwrap_or(true))
    }
}

pub(super) fn argmin(v: &[f32], better: impl Fn(f32, f32) -> bool) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if better(x, v[best]) {
            best = i;
        }
    }
    best
}
