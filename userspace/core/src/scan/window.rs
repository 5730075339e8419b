//! The windows every vendor shares. Sans-IO.
//!
//! * The range window ([`raw_window`]): which raw distance values of a packet pass the range
//!   gate ([`crate::sensor::SensorConfig::range`]), found once per laser or model so that the
//!   per-point test is an integer compare, with each vendor's own float arithmetic and bounds.
//! * The field of view ([`Fov`]): an inclusive sector of azimuths, 0.01°, that may wrap through
//!   0° (Nebula's `cloud_min_angle` / `cloud_max_angle`; `--fov MIN:MAX`,
//!   [`crate::sensor::PipelineOptions::fov`]).
#![forbid(unsafe_code)]

use std::ops::Range;

use super::AZIMUTH_UNITS;

/// Whether the bound of a range gate itself passes: Hesai keeps both bounds (`<=`, as
/// Nebula's Hesai decoders), Velodyne, Ouster and RoboSense drop them (`<`, as Nebula,
/// ouster-sdk and rs_driver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// A distance equal to the bound passes.
    Inclusive,
    /// Only distances strictly inside pass.
    Exclusive,
}

/// Whether `a` lies in the cyclic sector from `start` to `end`, each bound inside or not
/// ([`Bound`]); `end < start` wraps through 0. The one azimuth test of every field of view (and
/// of Hesai's cut): units are the caller's (0.01° integers, f32 rad); a sector with
/// `start == end` holds only that azimuth here (Hesai's cutter gives it its own meaning first).
pub fn in_sector<T: PartialOrd>(start: T, end: T, a: T, bounds: (Bound, Bound)) -> bool {
    let after_start = match bounds.0 {
        Bound::Inclusive => start <= a,
        Bound::Exclusive => start < a,
    };
    let before_end = match bounds.1 {
        Bound::Inclusive => a <= end,
        Bound::Exclusive => a < end,
    };
    if end < start {
        after_start || before_end
    } else {
        after_start && before_end
    }
}

/// The raw distance values in `raws` whose distance passes the gate from `min` to `max` (m,
/// each with its [`Bound`]), as a window `lo..hi` (empty when none passes): `raw` passes the
/// float test `min < distance(raw) < max` (`<=` for an inclusive bound) exactly when
/// `(lo..hi).contains(&raw)`.
///
/// `distance` is the vendor's own raw-to-metres arithmetic (f32, bit for bit what its points
/// carry) and must not decrease as `raw` grows (a multiplication or division by a positive
/// constant, plus a constant, rounded to f32, is monotonic): then the passing values are one
/// interval, and its two ends are found by bisection (`2 × log2(raws.len())` evaluations).
pub fn raw_window(
    raws: Range<u32>,
    distance: impl Fn(u32) -> f32,
    min: (f32, Bound),
    max: (f32, Bound),
) -> Range<u32> {
    let above_min = |d: f32| match min.1 {
        Bound::Inclusive => d >= min.0,
        Bound::Exclusive => d > min.0,
    };
    let past_max = |d: f32| match max.1 {
        Bound::Inclusive => d > max.0,
        Bound::Exclusive => d >= max.0,
    };
    // The first value of `lo..hi` whose distance satisfies `pred` (false, then true), or `hi`.
    let first = |mut lo: u32, mut hi: u32, pred: &dyn Fn(f32) -> bool| {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(distance(mid)) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    let lo = first(raws.start, raws.end, &above_min);
    let hi = first(lo, raws.end, &past_max);
    lo..hi
}

/// A field of view `[min, max]`, 0.01° (0..36000), inclusive; `min > max` wraps through 0°.
/// Built from a validated [`crate::valid::Fov`], whose ends differ at 0.01°, so a field of
/// view always holds more than one azimuth and less than the full circle plus one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fov {
    /// First azimuth inside, 0.01°.
    pub min_cdeg: u32,
    /// Last azimuth inside, 0.01°.
    pub max_cdeg: u32,
}

impl Fov {
    /// Whether azimuth `az_cdeg` (0.01°, taken modulo 360°) lies inside (bounds included,
    /// [`in_sector`]).
    pub fn contains_cdeg(&self, az_cdeg: u32) -> bool {
        let inclusive = (Bound::Inclusive, Bound::Inclusive);
        in_sector(
            self.min_cdeg,
            self.max_cdeg,
            az_cdeg % AZIMUTH_UNITS,
            inclusive,
        )
    }

    /// Width of the field of view, 0.01° (the inclusive bound counts one unit).
    pub fn width_cdeg(&self) -> u32 {
        ((AZIMUTH_UNITS + self.max_cdeg - self.min_cdeg) % AZIMUTH_UNITS + 1).min(AZIMUTH_UNITS)
    }

    /// How much of the arc of `len_cdeg` (0.01°, at most a turn) that starts at azimuth
    /// `from_cdeg` and runs forward lies inside, 0.01°: the loss estimates of a frame that did
    /// not begin or end at the cut count only the packets the field of view would hold.
    pub fn arc_inside(&self, from_cdeg: u32, len_cdeg: u32) -> u32 {
        let u = i64::from(AZIMUTH_UNITS);
        let a0 = i64::from(from_cdeg % AZIMUTH_UNITS);
        let a1 = a0 + i64::from(len_cdeg.min(AZIMUTH_UNITS));
        let f0 = i64::from(self.min_cdeg);
        let f1 = f0 + i64::from(self.width_cdeg());
        let inside: i64 = (-1..=1)
            .map(|k| (a1.min(f1 + k * u) - a0.max(f0 + k * u)).max(0))
            .sum();
        inside.clamp(0, a1 - a0) as u32
    }
}

/// The field of view in degrees, each end rounded to 0.01° ([`crate::valid::Degrees::cdeg`]).
impl From<crate::valid::Fov> for Fov {
    fn from(f: crate::valid::Fov) -> Self {
        Fov {
            min_cdeg: f.min().cdeg(),
            max_cdeg: f.max().cdeg(),
        }
    }
}

/// The part of an arc inside `fov`, or all of it without a field of view (see
/// [`Fov::arc_inside`]).
pub fn arc_in_view(fov: Option<Fov>, from_cdeg: u32, len_cdeg: u32) -> u32 {
    match fov {
        Some(f) => f.arc_inside(from_cdeg, len_cdeg),
        None => len_cdeg.min(AZIMUTH_UNITS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each bound in or out, plain and wrapping, integers and floats.
    #[test]
    fn sectors() {
        let (i, x) = (Bound::Inclusive, Bound::Exclusive);
        assert!(in_sector(10, 20, 10, (i, x)) && !in_sector(10, 20, 10, (x, i)));
        assert!(in_sector(10, 20, 20, (x, i)) && !in_sector(10, 20, 20, (i, x)));
        assert!(in_sector(10, 20, 15, (x, x)) && !in_sector(10, 20, 25, (i, i)));
        assert!(in_sector(350, 10, 0, (x, x)) && in_sector(350, 10, 355, (x, x)));
        assert!(in_sector(350, 10, 350, (i, x)) && !in_sector(350, 10, 350, (x, i)));
        assert!(!in_sector(350, 10, 10, (i, x)) && !in_sector(350, 10, 180, (i, i)));
        assert!(in_sector(6.0f32, 1.0, 0.5, (x, x)) && !in_sector(6.0f32, 1.0, f32::NAN, (i, i)));
        assert!(in_sector(5, 5, 5, (i, i)) && !in_sector(5, 5, 6, (i, i)));
    }

    /// The window holds exactly the raw values the float test keeps, for each kind of bound,
    /// with a distance that rounds (several raw values per f32 near the bounds).
    #[test]
    fn the_window_is_the_float_test() {
        let dist = |r: u32| r as f32 * 0.002 + 0.0123;
        for (min, max) in [
            (0.3f32, 100.0f32),
            (0.0, 1000.0),
            (2.5, 2.502),
            (50.0, 49.0),
        ] {
            for mb in [Bound::Inclusive, Bound::Exclusive] {
                for xb in [Bound::Inclusive, Bound::Exclusive] {
                    let w = raw_window(1..1 << 16, dist, (min, mb), (max, xb));
                    for r in 1..1u32 << 16 {
                        let d = dist(r);
                        let above = if mb == Bound::Inclusive {
                            d >= min
                        } else {
                            d > min
                        };
                        let below = if xb == Bound::Inclusive {
                            d <= max
                        } else {
                            d < max
                        };
                        assert_eq!(w.contains(&r), above && below, "{min} {max} {r}");
                    }
                }
            }
        }
        // Exact ends, 2 mm steps over (0.3, 100) m: 150 · 0.002 is 0.3 in f32 (kept only by an
        // inclusive bound), 50_000 · 0.002 rounds above 100 (dropped by either).
        let mm2 = |r: u32| r as f32 * 0.002;
        let ex = (Bound::Exclusive, Bound::Exclusive);
        assert_eq!(
            raw_window(1..1 << 16, mm2, (0.3, ex.0), (100.0, ex.1)),
            151..50_000
        );
        let inc = Bound::Inclusive;
        assert_eq!(
            raw_window(1..1 << 16, mm2, (0.3, inc), (100.0, inc)),
            150..50_000
        );
        assert!(raw_window(1..1 << 16, mm2, (200.0, inc), (300.0, inc)).is_empty());
    }

    fn fov(min: f64, max: f64) -> Fov {
        let d = |v| crate::valid::Degrees::new(v).unwrap();
        crate::valid::Fov::new(d(min), d(max)).unwrap().into()
    }

    #[test]
    fn arcs_inside_a_plain_and_a_wrapping_field_of_view() {
        let plain = fov(40.0, 310.0);
        assert_eq!(
            (plain.min_cdeg, plain.max_cdeg, plain.width_cdeg()),
            (4_000, 31_000, 27_001)
        );
        assert!(plain.contains_cdeg(4_000) && plain.contains_cdeg(31_000));
        assert!(!plain.contains_cdeg(3_999) && !plain.contains_cdeg(31_001));
        // From the cut at 310° round to 100°: only 40°..100° is inside.
        assert_eq!(plain.arc_inside(31_000, 15_000), 6_000 + 1);
        assert_eq!(plain.arc_inside(0, 36_000), 27_001);
        assert_eq!(plain.arc_inside(32_000, 1_000), 0);
        let wrap = fov(270.0, 90.0);
        assert_eq!(wrap.width_cdeg(), 18_001);
        assert!(wrap.contains_cdeg(0) && wrap.contains_cdeg(35_999) && !wrap.contains_cdeg(18_000));
        // From the cut at 0° to 270°: 0°..90° inside.
        assert_eq!(wrap.arc_inside(0, 27_000), 9_001);
        // From 300° to the cut at 0°: all inside.
        assert_eq!(wrap.arc_inside(30_000, 6_000), 6_000);
        assert_eq!(arc_in_view(None, 123, 40_000), 36_000);
        assert_eq!(arc_in_view(Some(wrap), 9_001, 17_999), 0);
        assert_eq!(fov(0.0, 359.99).max_cdeg, 35_999);
    }
}
