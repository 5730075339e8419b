//! Validated setting types: each range is checked once, here, when a flag or a TOML key is
//! parsed, with one message that gives the value and the valid range. clap prefixes it with
//! the flag (`invalid value '0' for '--port <PORT>': ...`), the TOML reader with the file's
//! line and key (`TOML parse error at line 5, column 13 | cut_angle = 400.0 | ...`).
//!
//! The bottom layer of the core: it imports no other module of the crate, so every layer (the
//! core's sensor configuration, the decoders, the daemon, the offline decode, Python) takes
//! these types as they are and checks nothing again. A rule between two values one type holds
//! is its constructor's ([`Fov::new`]: the ends differ, [`FovSetting`]: or span the full
//! circle, `0:360`, which is no field of view; [`RangeGate::new`]: `min < max`); the
//! rules that need a sensor model (its datasheet range:
//! [`crate::vendor::SensorModel::range_gate`]) or span the whole configuration (unique names
//! and ports, in the daemon's plan) name the field themselves.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value outside its valid range, or one that does not parse: the message a flag or key
/// is refused with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidValue {
    /// The value parsed, but is outside `valid`.
    #[error("{value} is out of range; valid {valid}")]
    OutOfRange {
        /// The value as given.
        value: String,
        /// The valid range, with its unit (`1..=1024`, `[0, 360] deg`).
        valid: String,
    },
    /// The text is not a value of the expected kind.
    #[error("{value:?} is not {expected}; valid {valid}")]
    NotA {
        /// The text as given.
        value: String,
        /// What was expected (`an integer`, `a number of degrees`).
        expected: &'static str,
        /// The valid range, with its unit.
        valid: String,
    },
}

/// An integer in `MIN..=MAX` (unit: the field's, named in its doc comment).
///
/// Parsed from a decimal integer (flags, environment variables) or a TOML integer.
///
/// # Errors
/// [`InvalidValue::OutOfRange`] outside `MIN..=MAX`; [`InvalidValue::NotA`] for text that is
/// not an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ranged<const MIN: u64, const MAX: u64>(u64);

impl<const MIN: u64, const MAX: u64> Ranged<MIN, MAX> {
    /// The valid range as the messages print it.
    pub fn valid() -> String {
        format!("{MIN}..={MAX}")
    }

    /// `v`, checked.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] outside `MIN..=MAX`.
    pub fn new(v: u64) -> Result<Self, InvalidValue> {
        if (MIN..=MAX).contains(&v) {
            Ok(Self(v))
        } else {
            Err(InvalidValue::OutOfRange {
                value: v.to_string(),
                valid: Self::valid(),
            })
        }
    }

    /// `v`, checked, from a signed value (TOML integers are signed).
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] below 0 or outside `MIN..=MAX`.
    pub fn from_i64(v: i64) -> Result<Self, InvalidValue> {
        u64::try_from(v)
            .map_err(|_| InvalidValue::OutOfRange {
                value: v.to_string(),
                valid: Self::valid(),
            })
            .and_then(Self::new)
    }

    /// The value.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl<const MIN: u64, const MAX: u64> Serialize for Ranged<MIN, MAX> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<const MIN: u64, const MAX: u64> fmt::Display for Ranged<MIN, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A UDP port, 1..=65535 (RFC 768; port 0 is not a destination).
pub type UdpPort = Ranged<1, 65535>;

/// An RX queue of an interface, below [`lidarxdp_common::XSK_MAP_CAPACITY`] (the XDP program's
/// XSKMAP has one slot per queue).
pub type RxQueue = Ranged<0, { lidarxdp_common::XSK_MAP_CAPACITY as u64 - 1 }>;

/// Largest ROS domain id (`--ros-domain-id`, `ROS_DOMAIN_ID`): ROS 2 "The ROS_DOMAIN_ID"
/// concept page gives 0..=232 as the range every RMW accepts. Re-exported as
/// [`crate::ros2::MAX_ROS_DOMAIN_ID`].
pub const MAX_ROS_DOMAIN_ID: u32 = 232;

/// A ROS domain id, 0..=[`MAX_ROS_DOMAIN_ID`].
pub type DomainId = Ranged<0, { MAX_ROS_DOMAIN_ID as u64 }>;

/// Largest accepted `max_range_m`, m. Re-exported as [`crate::sensor::MAX_RANGE_M`].
pub const MAX_RANGE_M: f32 = 1000.0;

/// A power of two in 64..=65536: the UMEM frames of one AF_XDP socket (2 KiB each, kernel
/// doc `networking/af_xdp.rst`, "UMEM").
///
/// # Errors
/// [`InvalidValue::OutOfRange`] for anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmemFrames(u32);

impl UmemFrames {
    /// The default, 4096 frames (8 MiB).
    pub const DEFAULT: UmemFrames = UmemFrames(4096);

    /// `n`, checked.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] unless `n` is a power of two in 64..=65536.
    pub fn new(n: i64) -> Result<Self, InvalidValue> {
        match u32::try_from(n) {
            Ok(v) if (64..=65536).contains(&v) && v.is_power_of_two() => Ok(Self(v)),
            _ => Err(InvalidValue::OutOfRange {
                value: n.to_string(),
                valid: <Self as Checked>::valid(),
            }),
        }
    }

    /// The frame count.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Serialize for UmemFrames {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}

/// An azimuth in degrees, [0, 360] (360 ≡ 0): a cut angle, or one end of a field of view.
///
/// # Errors
/// [`InvalidValue::OutOfRange`] outside [0, 360] or not finite; [`InvalidValue::NotA`] for
/// text that is not a number.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Degrees(f64);

impl Degrees {
    const VALID: &str = "[0, 360] deg";

    /// `v` degrees, checked.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] outside [0, 360] or not finite.
    pub fn new(v: f64) -> Result<Self, InvalidValue> {
        if v.is_finite() && (0.0..=360.0).contains(&v) {
            Ok(Self(v))
        } else {
            Err(InvalidValue::OutOfRange {
                value: v.to_string(),
                valid: Self::VALID.into(),
            })
        }
    }

    /// The angle, degrees.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The angle in 0.01° (the unit of the packets' azimuths), rounded, 0..36000 (360° is 0).
    pub fn cdeg(self) -> u32 {
        ((self.0 * 100.0).round() as u32) % 36_000
    }
}

impl Default for Degrees {
    fn default() -> Self {
        Self(0.0)
    }
}

impl Serialize for Degrees {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl fmt::Display for Degrees {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A field of view: azimuths `min` to `max`, degrees, each in [0, 360]; `min > max` wraps
/// through 0° (`270:90` keeps the front half). The two ends differ at 0.01° modulo 360°
/// ([`Fov::new`]), so a field of view always holds more than one azimuth and less than the
/// full circle (no field of view keeps every azimuth). Read from a flag, a TOML key or Python
/// as a [`FovSetting`], which also takes the full circle `0:360`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fov {
    min: Degrees,
    max: Degrees,
}

impl Fov {
    /// The valid field-of-view settings as the refusals print them: every `MIN:MAX` they name
    /// is accepted by [`FovSetting`].
    const VALID: &str = "MIN:MAX with MIN and MAX in [0, 360] deg and MAX not equal to MIN \
                         modulo 360 at 0.01 deg (MIN > MAX wraps through 0), or 0:360 for the \
                         full circle (no field of view)";

    /// The field of view from `min` to `max`.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] when `max` equals `min` modulo 360° at 0.01°
    /// ([`Degrees::cdeg`]: `10:10`, `0:360`, `359.999:0`); `0:360` is the full circle, which
    /// [`FovSetting`] takes as no field of view.
    pub fn new(min: Degrees, max: Degrees) -> Result<Self, InvalidValue> {
        if min.cdeg() == max.cdeg() {
            return Err(InvalidValue::OutOfRange {
                value: format!("{min}:{max}"),
                valid: Self::VALID.into(),
            });
        }
        Ok(Self { min, max })
    }

    /// The field of view from `min` to `max` degrees: [`Degrees::new`] of each, then
    /// [`Fov::new`].
    ///
    /// # Errors
    /// Those of [`Degrees::new`] and [`Fov::new`].
    pub fn from_deg(min: f64, max: f64) -> Result<Self, InvalidValue> {
        Fov::new(Degrees::new(min)?, Degrees::new(max)?)
    }

    /// Start azimuth, degrees.
    pub fn min(self) -> Degrees {
        self.min
    }

    /// End azimuth, degrees.
    pub fn max(self) -> Degrees {
        self.max
    }

    /// `(min, max)` in degrees.
    pub fn degrees(self) -> (f64, f64) {
        (self.min.get(), self.max.get())
    }
}

impl Serialize for Fov {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.min.0, self.max.0).serialize(s)
    }
}

/// A field-of-view setting as a flag (`--fov MIN:MAX`), a TOML key (`fov = [min, max]`) or
/// Python (`fov=(min, max)` or `"MIN:MAX"`) gives it: a [`Fov`], or the full circle, which is
/// no field of view ([`FovSetting::fov`] is `None`: every azimuth is kept, the frames are
/// those of no `--fov` at all). The full circle is exactly `0:360`, Nebula's default
/// (`cloud_min_angle` 0, `cloud_max_angle` 360); with each end in [0, 360] it is the only
/// `a:a+360`. Other equal ends modulo 360° (`10:10`, `360:0`, `0:359.999`) hold no azimuth
/// range and are refused, with a message whose valid range is what this type accepts.
///
/// # Errors
/// Those of [`Degrees`] for either end and of [`Fov::new`]; [`InvalidValue::NotA`] for text
/// that is not `MIN:MAX`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FovSetting(Option<Fov>);

impl FovSetting {
    /// No field of view: every azimuth.
    pub const FULL_CIRCLE: FovSetting = FovSetting(None);

    /// The setting from `min` to `max`: the full circle for exactly `0:360`, else
    /// [`Fov::new`].
    ///
    /// # Errors
    /// Those of [`Fov::new`].
    pub fn new(min: Degrees, max: Degrees) -> Result<Self, InvalidValue> {
        if min.get() == 0.0 && max.get() == 360.0 {
            return Ok(Self::FULL_CIRCLE);
        }
        Fov::new(min, max).map(|f| Self(Some(f)))
    }

    /// The setting from `min` to `max` degrees: [`Degrees::new`] of each, then
    /// [`FovSetting::new`].
    ///
    /// # Errors
    /// Those of [`Degrees::new`] and [`Fov::new`].
    pub fn from_deg(min: f64, max: f64) -> Result<Self, InvalidValue> {
        FovSetting::new(Degrees::new(min)?, Degrees::new(max)?)
    }

    /// The field of view, `None` for the full circle.
    pub fn fov(self) -> Option<Fov> {
        self.0
    }
}

impl FromStr for FovSetting {
    type Err = InvalidValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, b) = s.split_once(':').ok_or_else(|| InvalidValue::NotA {
            value: s.to_owned(),
            expected: "MIN:MAX in degrees (e.g. 270:90)",
            valid: Fov::VALID.into(),
        })?;
        FovSetting::new(a.parse()?, b.parse()?)
    }
}

/// `[min, max]` degrees as given; the full circle is `[0, 360]`.
impl Serialize for FovSetting {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(f) => f.serialize(s),
            None => (0.0f64, 360.0f64).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for FovSetting {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (a, b) = <(f64, f64)>::deserialize(d)?;
        let e = serde::de::Error::custom;
        FovSetting::new(Degrees::new(a).map_err(e)?, Degrees::new(b).map_err(e)?).map_err(e)
    }
}

/// A range gate distance, metres, [0, 1000] ([`MAX_RANGE_M`]); that a minimum lies below its
/// maximum is checked once, by [`RangeGate::new`] (with the model's datasheet range filling
/// an end that is not given: `crate::vendor::SensorModel::range_gate`).
///
/// # Errors
/// [`InvalidValue::OutOfRange`] outside [0, 1000] or not finite; [`InvalidValue::NotA`] for
/// text that is not a number.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Metres(f32);

impl Metres {
    fn valid() -> String {
        format!("[0, {MAX_RANGE_M}] m")
    }

    /// `v` metres, checked.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] outside [0, 1000] or not finite.
    pub fn new(v: f32) -> Result<Self, InvalidValue> {
        if v.is_finite() && (0.0..=MAX_RANGE_M).contains(&v) {
            Ok(Self(v))
        } else {
            Err(InvalidValue::OutOfRange {
                value: v.to_string(),
                valid: Self::valid(),
            })
        }
    }

    /// The distance, metres.
    pub fn get(self) -> f32 {
        self.0
    }
}

impl Serialize for Metres {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f32(self.0)
    }
}

impl fmt::Display for Metres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A range gate, metres: the points a decoder keeps lie between `min` and `max` (each vendor
/// says whether a bound itself is kept), with `min < max`. Built by [`RangeGate::new`]; a
/// sensor's default is its datasheet range (`crate::vendor::SensorModel::range_gate`, which
/// names the flag or key at fault). Serialized as its two keys, `min_range` and `max_range`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeGate {
    min: Metres,
    max: Metres,
}

impl RangeGate {
    /// Every distance a gate can keep, [0, [`MAX_RANGE_M`]] m.
    pub const FULL: RangeGate = RangeGate {
        min: Metres(0.0),
        max: Metres(MAX_RANGE_M),
    };

    /// The gate from `min` to `max`.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] naming `max` and its valid range `(min, 1000] m` unless
    /// `min < max`.
    pub fn new(min: Metres, max: Metres) -> Result<Self, InvalidValue> {
        if min < max {
            Ok(Self { min, max })
        } else {
            Err(InvalidValue::OutOfRange {
                value: max.to_string(),
                valid: format!("(min_range = {min}, {MAX_RANGE_M}] m"),
            })
        }
    }

    /// The gate from `min` to `max` metres: [`Metres::new`] of each, then [`RangeGate::new`].
    ///
    /// # Errors
    /// Those of [`Metres::new`] and [`RangeGate::new`].
    pub fn from_m(min: f32, max: f32) -> Result<Self, InvalidValue> {
        RangeGate::new(Metres::new(min)?, Metres::new(max)?)
    }

    /// The lower bound, metres.
    pub fn min(self) -> Metres {
        self.min
    }

    /// The upper bound, metres.
    pub fn max(self) -> Metres {
        self.max
    }
}

impl Serialize for RangeGate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("RangeGate", 2)?;
        st.serialize_field("min_range", &self.min)?;
        st.serialize_field("max_range", &self.max)?;
        st.end()
    }
}

/// A frame timeout, ns, 1 ms..=60 s: the host-time silence after which a frame in progress is
/// published as it is. The daemon's `frame_timeout_ms` ([`FrameTimeoutMs`]) converts without a
/// check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrameTimeout(u64);

/// A frame timeout in whole milliseconds, 1..=60000 (the daemon's `frame_timeout_ms`).
pub type FrameTimeoutMs = Ranged<1, 60_000>;

impl FrameTimeout {
    /// The default, 200 ms (two turns of a 10 Hz sensor).
    pub const DEFAULT: FrameTimeout = FrameTimeout(200_000_000);
    /// The shortest, 1 ms, ns.
    pub const MIN_NS: u64 = 1_000_000;
    /// The longest, 60 s, ns.
    pub const MAX_NS: u64 = 60_000_000_000;

    /// `ns` nanoseconds, checked.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] outside 1 ms..=60 s.
    pub fn from_ns(ns: u64) -> Result<Self, InvalidValue> {
        if (Self::MIN_NS..=Self::MAX_NS).contains(&ns) {
            Ok(Self(ns))
        } else {
            Err(InvalidValue::OutOfRange {
                value: ns.to_string(),
                valid: format!("[{}, {}] ns (1 ms to 60 s)", Self::MIN_NS, Self::MAX_NS),
            })
        }
    }

    /// The timeout, ns.
    pub fn ns(self) -> u64 {
        self.0
    }
}

impl Default for FrameTimeout {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl From<FrameTimeoutMs> for FrameTimeout {
    fn from(ms: FrameTimeoutMs) -> Self {
        Self(ms.get() * 1_000_000)
    }
}

/// A percentage, [0, 100].
///
/// # Errors
/// [`InvalidValue::OutOfRange`] outside [0, 100] or not finite; [`InvalidValue::NotA`] for
/// text that is not a number.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Percent(f64);

impl Percent {
    /// `v` %, checked.
    ///
    /// # Errors
    /// [`InvalidValue::OutOfRange`] outside [0, 100] or not finite.
    pub fn new(v: f64) -> Result<Self, InvalidValue> {
        if v.is_finite() && (0.0..=100.0).contains(&v) {
            Ok(Self(v))
        } else {
            Err(InvalidValue::OutOfRange {
                value: v.to_string(),
                valid: "[0, 100] %".into(),
            })
        }
    }

    /// The percentage.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Serialize for Percent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl Checked for Percent {
    type Raw = f64;
    const EXPECTED: &'static str = "a percentage";
    fn valid() -> String {
        "[0, 100] %".into()
    }
    fn check(raw: f64) -> Result<Self, InvalidValue> {
        Self::new(raw)
    }
}

/// A sensor's source address, as a flag (`--source`) or a TOML string (`source = "..."`):
/// IPv4 `a.b.c.d`, IPv6 (RFC 4291 text, e.g. `fd00::201`), or a link-local IPv6 address with
/// the interface it is on, `fe80::1%eth0` (RFC 4007 section 11 zone index; an interface name,
/// at most 15 bytes, `IFNAMSIZ - 1`). An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the
/// IPv4 address. Unspecified (`0.0.0.0`, `::`) and multicast addresses are refused (no sensor
/// sends from one; 0 means "any source" in the XDP filter), and so is a zone on an address
/// that is not link-local (`fe80::/10`). A link-local address without a zone is on the
/// sensor's own interface; one with a zone must name that interface (checked where the
/// interface is known: the daemon's plan; offline decoding has none and ignores it).
///
/// # Errors
/// [`InvalidValue::NotA`], giving the value and [`SourceAddr::VALID`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceAddr {
    ip: std::net::IpAddr,
    zone: Option<String>,
}

impl SourceAddr {
    /// The valid forms as the messages print them.
    pub const VALID: &'static str = "an IPv4 address a.b.c.d, an IPv6 address such as fd00::201, \
                                     or a link-local IPv6 address with its interface, \
                                     fe80::201%eth0 (not unspecified, not multicast)";

    /// `ip` (and the interface of a link-local IPv6 address), checked.
    ///
    /// # Errors
    /// [`InvalidValue::NotA`] for an unspecified or multicast address, a zone on an address
    /// that is not IPv6 link-local, or a zone that is empty, longer than 15 bytes, or holds
    /// `/`, `%` or white space.
    pub fn new(ip: std::net::IpAddr, zone: Option<&str>) -> Result<Self, InvalidValue> {
        let ip = ip.to_canonical();
        let link_local = matches!(ip, std::net::IpAddr::V6(a) if a.is_unicast_link_local());
        let zone_ok = |z: &str| {
            !z.is_empty()
                && z.len() <= 15
                && !z.chars().any(|c| c == '/' || c == '%' || c.is_whitespace())
        };
        let ok = !ip.is_unspecified()
            && !ip.is_multicast()
            && zone.is_none_or(|z| link_local && zone_ok(z));
        if !ok {
            let value = match zone {
                Some(z) => format!("{ip}%{z}"),
                None => ip.to_string(),
            };
            return Err(Self::invalid(value));
        }
        Ok(Self {
            ip,
            zone: zone.map(str::to_owned),
        })
    }

    fn invalid(value: String) -> InvalidValue {
        InvalidValue::NotA {
            value,
            expected: "a sensor's unicast source address",
            valid: Self::VALID.into(),
        }
    }

    /// The address (IPv4, or IPv6 without its zone).
    pub fn ip(&self) -> std::net::IpAddr {
        self.ip
    }

    /// The interface a link-local IPv6 address was given with (`eth0` of `fe80::1%eth0`).
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }
}

impl From<std::net::Ipv4Addr> for SourceAddr {
    /// An IPv4 address (no check: callers pass sensor addresses).
    fn from(ip: std::net::Ipv4Addr) -> Self {
        Self {
            ip: ip.into(),
            zone: None,
        }
    }
}

impl FromStr for SourceAddr {
    type Err = InvalidValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let (addr, zone) = match t.split_once('%') {
            Some((a, z)) => (a, Some(z)),
            None => (t, None),
        };
        let ip = addr
            .parse::<std::net::IpAddr>()
            .map_err(|_| Self::invalid(s.to_owned()))?;
        Self::new(ip, zone).map_err(|_| Self::invalid(s.to_owned()))
    }
}

impl fmt::Display for SourceAddr {
    /// `a.b.c.d`, `fd00::201` or `fe80::201%eth0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.zone {
            Some(z) => write!(f, "{}%{z}", self.ip),
            None => write!(f, "{}", self.ip),
        }
    }
}

impl<'de> Deserialize<'de> for SourceAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for SourceAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A validated type read from one number: the flag's text and the TOML value are both read as
/// `Raw`, then checked by `check`, so the two share one rule and one message.
trait Checked: Sized {
    /// The number as read.
    type Raw: FromStr + for<'de> Deserialize<'de>;
    /// What the text must be (`an integer`, `a number of degrees`).
    const EXPECTED: &'static str;
    /// The valid range as the messages print it.
    fn valid() -> String;
    /// The value, checked.
    fn check(raw: Self::Raw) -> Result<Self, InvalidValue>;
}

/// Implements `FromStr` and `Deserialize` of each type through its [`Checked`].
macro_rules! checked_parsers {
    ($( [$($g:tt)*] $t:ty ),* $(,)?) => {$(
        impl<$($g)*> FromStr for $t {
            type Err = InvalidValue;
            fn from_str(s: &str) -> Result<Self, InvalidValue> {
                let raw = s.trim().parse().map_err(|_| InvalidValue::NotA {
                    value: s.to_owned(),
                    expected: <$t as Checked>::EXPECTED,
                    valid: <$t as Checked>::valid(),
                })?;
                <$t as Checked>::check(raw)
            }
        }

        impl<'de, $($g)*> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = <<$t as Checked>::Raw>::deserialize(d)?;
                <$t as Checked>::check(raw).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

checked_parsers!(
    [const MIN: u64, const MAX: u64] Ranged<MIN, MAX>,
    [] UmemFrames,
    [] Degrees,
    [] Metres,
    [] Percent,
);

impl<const MIN: u64, const MAX: u64> Checked for Ranged<MIN, MAX> {
    type Raw = i64;
    const EXPECTED: &'static str = "an integer";
    fn valid() -> String {
        Self::valid()
    }
    fn check(raw: i64) -> Result<Self, InvalidValue> {
        Self::from_i64(raw)
    }
}

impl Checked for UmemFrames {
    type Raw = i64;
    const EXPECTED: &'static str = "an integer";
    fn valid() -> String {
        "a power of two in 64..=65536".into()
    }
    fn check(raw: i64) -> Result<Self, InvalidValue> {
        Self::new(raw)
    }
}

impl Checked for Degrees {
    type Raw = f64;
    const EXPECTED: &'static str = "a number of degrees";
    fn valid() -> String {
        Self::VALID.into()
    }
    fn check(raw: f64) -> Result<Self, InvalidValue> {
        Self::new(raw)
    }
}

impl Checked for Metres {
    type Raw = f32;
    const EXPECTED: &'static str = "a number of metres";
    fn valid() -> String {
        Self::valid()
    }
    fn check(raw: f32) -> Result<Self, InvalidValue> {
        Self::new(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_names_the_value_and_the_valid_range() {
        let e = |r: Result<(), InvalidValue>| r.unwrap_err().to_string();
        assert_eq!(
            e("0".parse::<UdpPort>().map(drop)),
            "0 is out of range; valid 1..=65535"
        );
        assert_eq!(
            e("-1".parse::<Ranged<1, 64>>().map(drop)),
            "-1 is out of range; valid 1..=64"
        );
        assert_eq!(
            e("x".parse::<Ranged<1, 64>>().map(drop)),
            "\"x\" is not an integer; valid 1..=64"
        );
        assert_eq!("64".parse::<Ranged<1, 64>>().unwrap().get(), 64);
        assert_eq!(
            e("100".parse::<UmemFrames>().map(drop)),
            "100 is out of range; valid a power of two in 64..=65536"
        );
        assert_eq!("8192".parse::<UmemFrames>().unwrap().get(), 8192);
        assert_eq!(
            e("400".parse::<Degrees>().map(drop)),
            "400 is out of range; valid [0, 360] deg"
        );
        assert_eq!(
            e("NaN".parse::<Degrees>().map(drop)),
            "NaN is out of range; valid [0, 360] deg"
        );
        let fov = |s: &str| s.parse::<FovSetting>().map(|f| f.fov().map(Fov::degrees));
        assert_eq!(
            e(fov("270-90").map(drop)),
            "\"270-90\" is not MIN:MAX in degrees (e.g. 270:90); valid MIN:MAX with MIN and \
             MAX in [0, 360] deg and MAX not equal to MIN modulo 360 at 0.01 deg (MIN > MAX \
             wraps through 0), or 0:360 for the full circle (no field of view)"
        );
        assert_eq!(fov("270:90"), Ok(Some((270.0, 90.0))));
        // The full circle (Nebula's default 0..360) is no field of view.
        assert_eq!(fov("0:360"), Ok(None));
        assert_eq!(
            FovSetting::from_deg(0.0, 360.0),
            Ok(FovSetting::FULL_CIRCLE)
        );
        // Other equal ends hold nothing: refused, with a valid range that holds.
        for empty in ["10:10", "360:0", "359.999:0", "0:359.999", "360:360", "0:0"] {
            let (a, b) = empty.split_once(':').unwrap();
            let (a, b) = (a.parse::<f64>().unwrap(), b.parse::<f64>().unwrap());
            assert_eq!(
                e(fov(empty).map(drop)),
                format!(
                    "{a}:{b} is out of range; valid MIN:MAX with MIN and MAX in [0, 360] deg \
                     and MAX not equal to MIN modulo 360 at 0.01 deg (MIN > MAX wraps through \
                     0), or 0:360 for the full circle (no field of view)"
                )
            );
        }
        assert_eq!(
            e(fov("10:370").map(drop)),
            "370 is out of range; valid [0, 360] deg"
        );
        assert_eq!(fov("10:10.01"), Ok(Some((10.0, 10.01))));
        assert_eq!(fov("0:359.99"), Ok(Some((0.0, 359.99))));
        assert_eq!(Degrees::new(359.996).unwrap().cdeg(), 0);
        assert_eq!(Degrees::new(90.004).unwrap().cdeg(), 9_000);
        let m = |v| Metres::new(v).unwrap();
        assert_eq!(
            e(RangeGate::new(m(5.0), m(5.0)).map(drop)),
            "5 is out of range; valid (min_range = 5, 1000] m"
        );
        let g = RangeGate::new(m(0.5), m(100.0)).unwrap();
        assert_eq!((g.min().get(), g.max().get()), (0.5, 100.0));
        assert_eq!(
            e(FrameTimeout::from_ns(999_999).map(drop)),
            "999999 is out of range; valid [1000000, 60000000000] ns (1 ms to 60 s)"
        );
        assert_eq!(
            e(FrameTimeout::from_ns(60_000_000_001).map(drop)),
            "60000000001 is out of range; valid [1000000, 60000000000] ns (1 ms to 60 s)"
        );
        assert_eq!(FrameTimeout::from_ns(1_000_000).unwrap().ns(), 1_000_000);
        let ms: FrameTimeoutMs = "60000".parse().unwrap();
        assert_eq!(FrameTimeout::from(ms).ns(), FrameTimeout::MAX_NS);
        assert_eq!(FrameTimeout::DEFAULT.ns(), 200_000_000);
        assert_eq!(
            e("1001".parse::<Metres>().map(drop)),
            "1001 is out of range; valid [0, 1000] m"
        );
    }

    #[test]
    fn toml_keys_are_checked_by_the_same_types() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct T {
            fov: Option<FovSetting>,
            port: Option<UdpPort>,
        }
        let e = toml::from_str::<T>("fov = [270.0, 361.0]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fov = [270.0, 361.0]")
                && e.contains("361 is out of range; valid [0, 360] deg"),
            "{e}"
        );
        let e = toml::from_str::<T>("fov = [10, 10]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fov = [10, 10]")
                && e.contains("10:10 is out of range; valid MIN:MAX with MIN and MAX in [0, 360]"),
            "{e}"
        );
        let t: T = toml::from_str("fov = [0, 360]").unwrap();
        assert_eq!(t.fov, Some(FovSetting::FULL_CIRCLE));
        let e = toml::from_str::<T>("port = 70000").unwrap_err().to_string();
        assert!(
            e.contains("port = 70000") && e.contains("70000 is out of range; valid 1..=65535"),
            "{e}"
        );
        let t: T = toml::from_str("fov = [270, 90]\nport = 2368").unwrap();
        assert_eq!(t.fov.unwrap().fov().unwrap().degrees(), (270.0, 90.0));
        assert_eq!(t.port.unwrap().get(), 2368);
    }
    #[test]
    fn source_addresses() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let ok = |s: &str| s.parse::<SourceAddr>().unwrap();
        let a = ok("192.168.1.201");
        assert_eq!((a.ip(), a.zone()), (IpAddr::from([192, 168, 1, 201]), None));
        let a = ok("fd00::201");
        assert_eq!(
            a.ip(),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x201))
        );
        let a = ok(" fe80::1%eth0 ");
        assert_eq!(
            (a.ip(), a.zone()),
            (
                IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
                Some("eth0")
            )
        );
        assert_eq!(a.to_string(), "fe80::1%eth0");
        // Link-local without a zone: the sensor's interface.
        assert_eq!(ok("fe80::1").zone(), None);
        // IPv4-mapped is the IPv4 address.
        assert_eq!(
            ok("::ffff:10.0.0.1").ip(),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
        );
        for bad in [
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "ff02::1",
            "fd00::1%eth0",
            "10.0.0.1%eth0",
            "fe80::1%",
            "fe80::1%a/b",
            "fe80::1%0123456789abcdef",
            "fe80::1%eth0%eth1",
            "300.1.1.1",
            "fe80::g",
            "",
        ] {
            assert_eq!(
                bad.parse::<SourceAddr>(),
                Err(InvalidValue::NotA {
                    value: bad.to_owned(),
                    expected: "a sensor's unicast source address",
                    valid: SourceAddr::VALID.into(),
                }),
                "{bad}"
            );
        }
        let e = "fd00::1%eth0"
            .parse::<SourceAddr>()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "\"fd00::1%eth0\" is not a sensor's unicast source address; valid {}",
                SourceAddr::VALID
            )
        );
        #[derive(Deserialize, Debug)]
        struct T {
            #[allow(dead_code)]
            source: SourceAddr,
        }
        let e = toml::from_str::<T>("source = \"ff02::1\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("source") && e.contains(SourceAddr::VALID), "{e}");
        let t: T = toml::from_str("source = \"fe80::201%veth0\"").unwrap();
        assert_eq!(t.source.zone(), Some("veth0"));
    }
}
