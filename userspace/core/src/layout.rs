//! The point layouts a sensor can publish ([`PointType`]): Autoware's `PointXYZIRCAEDT` (the
//! default, [`crate::point`]) and the layouts of the ROS drivers whose consumers expect them,
//! each exactly as its driver defines it (field names, offsets, datatypes, counts,
//! `point_step`, units, and the reference instant of its time field). The sources, file and
//! commit, are in `docs/sensors.md` ("Point layouts") and beside each field list below.
//!
//! The decoders produce each return as a [`PointXYZIRCAEDT`] value in registers, and the
//! frame's buffer (`crate::point_buf::PointBuf`) stores it once, in the chosen layout
//! ([`Layout::from_point`]): there is no pass over the finished frame and no second buffer per
//! frame, and a smaller layout writes fewer bytes.
//!
//! Time fields, for a frame whose header stamp is its `start_ns` (the first firing, the
//! stamp of every lidarxdp output):
//! - relative layouts (`autoware` u32 ns, `velodyne` f32 s, `ouster` u32 ns) hold the firing
//!   time minus the header stamp, so header stamp + point time is the firing time, which is
//!   what LIO-SAM and FAST-LIO compute;
//! - absolute layouts (f64 s since the Unix epoch, sensor clock, whatever the header stamp):
//!   `robosense` holds the firing time (packet time plus the firing offset, as rs_driver
//!   writes it), `hesai` the time stamp of the point's packet (Hesai's SDK gives every point of
//!   a packet that one time).
#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use bytemuck::{Pod, Zeroable};
use thiserror::Error;

use crate::point::{POINT_FIELDS, PointField, PointXYZIRCAEDT, datatype};

/// The layout of a sensor's points (configuration key `point_type`, flag `--point-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PointType {
    /// Autoware's `PointXYZIRCAEDT`, 32 bytes ([`PointXYZIRCAEDT`]). The default.
    #[default]
    Autoware = 0,
    /// Autoware's `PointXYZIRC`, 16 bytes ([`PointXYZIRC`]).
    AutowareXyzirc = 1,
    /// x, y, z, intensity as float32, 16 bytes ([`PointXYZI`]).
    Xyzi = 2,
    /// ros-drivers/velodyne's `velodyne_pointcloud` XYZIRT on ROS 2 ([`VelodynePoint`]).
    Velodyne = 3,
    /// ouster-ros's default point, `original` ([`OusterPoint`]).
    Ouster = 4,
    /// ouster-ros's `xyzir` ([`OusterXYZIR`]).
    OusterXyzir = 5,
    /// HesaiLidar_ROS_2.0's point ([`HesaiPoint`]).
    Hesai = 6,
    /// rslidar_sdk's XYZIRT ([`RoboSensePoint`]).
    Robosense = 7,
}

/// Every [`PointType`], in the order of their names in [`POINT_TYPE_NAMES`].
pub const POINT_TYPES: [PointType; 8] = [
    PointType::Autoware,
    PointType::AutowareXyzirc,
    PointType::Xyzi,
    PointType::Velodyne,
    PointType::Ouster,
    PointType::OusterXyzir,
    PointType::Hesai,
    PointType::Robosense,
];

/// The valid `point_type` names, comma separated (for error messages and help).
pub const POINT_TYPE_NAMES: &str =
    "autoware, autoware_xyzirc, xyzi, velodyne, ouster, ouster_xyzir, hesai, robosense";

/// A `point_type` name that is not one of [`POINT_TYPE_NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown point_type '{name}'; valid: {POINT_TYPE_NAMES}")]
pub struct UnknownPointType {
    /// The name as given.
    pub name: String,
}

/// Where and how a layout keeps each point's time ([`PointType::time`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeField {
    /// The layout has no per-point time.
    None,
    /// u32, ns after the header stamp.
    RelativeNs,
    /// f32, s after the header stamp.
    RelativeSecF32,
    /// f64, s since the Unix epoch (the firing time on the sensor clock).
    AbsoluteSecF64,
}

impl PointType {
    /// The configuration name (`autoware`, `xyzi`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            PointType::Autoware => "autoware",
            PointType::AutowareXyzirc => "autoware_xyzirc",
            PointType::Xyzi => "xyzi",
            PointType::Velodyne => "velodyne",
            PointType::Ouster => "ouster",
            PointType::OusterXyzir => "ouster_xyzir",
            PointType::Hesai => "hesai",
            PointType::Robosense => "robosense",
        }
    }

    /// The PointCloud2 field list, in offset order.
    pub const fn fields(self) -> &'static [PointField] {
        match self {
            PointType::Autoware => &POINT_FIELDS,
            PointType::AutowareXyzirc => &XYZIRC_FIELDS,
            PointType::Xyzi => &XYZI_FIELDS,
            PointType::Velodyne => &VELODYNE_FIELDS,
            PointType::Ouster => &OUSTER_FIELDS,
            PointType::OusterXyzir => &OUSTER_XYZIR_FIELDS,
            PointType::Hesai => &HESAI_FIELDS,
            PointType::Robosense => &ROBOSENSE_FIELDS,
        }
    }

    /// Bytes per point (the PointCloud2 `point_step`), padding included.
    pub const fn point_step(self) -> usize {
        match self {
            PointType::Autoware => size_of::<PointXYZIRCAEDT>(),
            PointType::AutowareXyzirc => size_of::<PointXYZIRC>(),
            PointType::Xyzi => size_of::<PointXYZI>(),
            PointType::Velodyne => size_of::<VelodynePoint>(),
            PointType::Ouster => size_of::<OusterPoint>(),
            PointType::OusterXyzir => size_of::<OusterXYZIR>(),
            PointType::Hesai => size_of::<HesaiPoint>(),
            PointType::Robosense => size_of::<RoboSensePoint>(),
        }
    }

    /// The per-point time this layout keeps.
    pub const fn time(self) -> TimeField {
        match self {
            PointType::Autoware | PointType::Ouster => TimeField::RelativeNs,
            PointType::Velodyne => TimeField::RelativeSecF32,
            PointType::Hesai | PointType::Robosense => TimeField::AbsoluteSecF64,
            PointType::AutowareXyzirc | PointType::Xyzi | PointType::OusterXyzir => TimeField::None,
        }
    }

    /// The field called `name`, if the layout has one.
    pub fn field(self, name: &str) -> Option<PointField> {
        self.fields().iter().find(|f| f.name == name).copied()
    }

    /// The layout's field names, comma separated (for error messages).
    pub fn field_names(self) -> String {
        let names: Vec<&str> = self.fields().iter().map(|f| f.name).collect();
        names.join(", ")
    }

    /// The layout whose field list and `point_step` are exactly these, if any.
    pub fn from_fields<'a>(
        point_step: u32,
        fields: impl IntoIterator<Item = (&'a str, u32, u8, u32)> + Clone,
    ) -> Option<PointType> {
        POINT_TYPES.into_iter().find(|t| {
            t.point_step() as u32 == point_step
                && fields.clone().into_iter().count() == t.fields().len()
                && fields
                    .clone()
                    .into_iter()
                    .zip(t.fields())
                    .all(|((n, o, d, c), f)| {
                        n == f.name && o == f.offset && d == f.datatype && c == f.count
                    })
        })
    }
}

/// The alignment, bytes, of the first point of a frame's buffer (`crate::point_buf`): every
/// layout's fields are aligned to it (packed layouts need none), and a loaned region must be.
pub const POINT_ALIGN: usize = 4;

// Every layout's alignment is at most `POINT_ALIGN`, so a buffer's bytes can be viewed as a
// slice of the layout.
const _: () = {
    assert!(align_of::<PointXYZIRCAEDT>() <= POINT_ALIGN);
    assert!(align_of::<PointXYZIRC>() <= POINT_ALIGN);
    assert!(align_of::<PointXYZI>() <= POINT_ALIGN);
    assert!(align_of::<VelodynePoint>() <= POINT_ALIGN);
    assert!(align_of::<OusterPoint>() <= POINT_ALIGN);
    assert!(align_of::<OusterXYZIR>() <= POINT_ALIGN);
    assert!(align_of::<HesaiPoint>() <= POINT_ALIGN);
    assert!(align_of::<RoboSensePoint>() <= POINT_ALIGN);
};

impl fmt::Display for PointType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for PointType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for PointType {
    /// # Errors
    /// [`UnknownPointType`] (naming the valid set) as the deserializer's error.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for PointType {
    type Err = UnknownPointType;

    /// # Errors
    /// [`UnknownPointType`], naming the valid set, for any other name (exact, lower case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        POINT_TYPES
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| UnknownPointType { name: s.to_owned() })
    }
}

/// The instants a point's stored time refers to: the frame start and the sensor time of the
/// packet (Ouster: the column) the point came from, both ns since the Unix epoch on the sensor
/// clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeBase {
    /// The frame's start (its header stamp).
    pub start_ns: u64,
    /// The current packet's (or column's) own time stamp.
    pub packet_ns: u64,
}

/// One point in a layout: built from the decoder's [`PointXYZIRCAEDT`] and the frame's start
/// time, and read back for the few operations that touch a stored point's time (the rare
/// re-stamp of a frame whose start moved, the time sort of a frame whose columns arrived out of
/// order, the scan assembler's carry across a cut).
pub trait Layout: Pod {
    /// The layout's [`PointType`].
    const TYPE: PointType;

    /// The point of return `p`, whose `time_stamp` is ns after `t.start_ns`.
    fn from_point(p: &PointXYZIRCAEDT, t: &TimeBase) -> Self;

    /// The point's time in ns after `start_ns`, `None` when the layout keeps none. Relative
    /// f32 seconds are rounded to the nearest ns.
    fn time_ns(&self, start_ns: u64) -> Option<u64>;

    /// Sets the point's time to `rel_ns` after `start_ns` (a no-op for a layout without time);
    /// callers never re-stamp an absolute time (it stays true whatever the frame start).
    fn set_time_ns(&mut self, rel_ns: u32, start_ns: u64);
}

/// Seconds, f32, of `ns` ns: computed in f64 and rounded once to f32.
#[inline(always)]
fn sec_f32(ns: u32) -> f32 {
    (f64::from(ns) * 1e-9) as f32
}

/// Seconds since the Unix epoch, f64, of `start_ns + rel_ns`.
#[inline(always)]
fn abs_sec(start_ns: u64, rel_ns: u32) -> f64 {
    (start_ns + u64::from(rel_ns)) as f64 * 1e-9
}

/// The ns after `start_ns` of an absolute time `sec` (s since the Unix epoch), rounded.
fn rel_of_abs(sec: f64, start_ns: u64) -> Option<u64> {
    let ns = (sec * 1e9).round();
    (ns.is_finite() && ns >= 0.0).then(|| (ns as u64).saturating_sub(start_ns))
}

impl Layout for PointXYZIRCAEDT {
    const TYPE: PointType = PointType::Autoware;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, _: &TimeBase) -> Self {
        *p
    }
    fn time_ns(&self, _: u64) -> Option<u64> {
        Some(u64::from(self.time_stamp))
    }
    fn set_time_ns(&mut self, rel_ns: u32, _: u64) {
        self.time_stamp = rel_ns;
    }
}

const fn f(name: &'static str, offset: u32, dt: u8) -> PointField {
    PointField {
        name,
        offset,
        datatype: dt,
        count: 1,
    }
}

/// Autoware's `PointXYZIRC`: what Autoware's preprocessing emits, 16 bytes.
///
/// | field | type | offset | value |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m |
/// | `intensity` | u8 | 12 | as [`PointXYZIRCAEDT::intensity`] |
/// | `return_type` | u8 | 13 | as [`PointXYZIRCAEDT::return_type`] |
/// | `channel` | u16 | 14 | as [`PointXYZIRCAEDT::channel`] |
///
/// Source: autowarefoundation/autoware_core, `common/autoware_point_types/include/
/// autoware/point_types/types.hpp` (`PointXYZIRC`); docs/sensors.md cites the commit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct PointXYZIRC {
    /// Forward, m.
    pub x: f32,
    /// Left, m.
    pub y: f32,
    /// Up, m.
    pub z: f32,
    /// 0–255.
    pub intensity: u8,
    /// Return type code ([`crate::point::ReturnType`]).
    pub return_type: u8,
    /// Channel (ring).
    pub channel: u16,
}

/// Field list of [`PointXYZIRC`].
pub const XYZIRC_FIELDS: [PointField; 6] = [
    f("x", 0, datatype::FLOAT32),
    f("y", 4, datatype::FLOAT32),
    f("z", 8, datatype::FLOAT32),
    f("intensity", 12, datatype::UINT8),
    f("return_type", 13, datatype::UINT8),
    f("channel", 14, datatype::UINT16),
];

impl Layout for PointXYZIRC {
    const TYPE: PointType = PointType::AutowareXyzirc;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, _: &TimeBase) -> Self {
        PointXYZIRC {
            x: p.x,
            y: p.y,
            z: p.z,
            intensity: p.intensity,
            return_type: p.return_type,
            channel: p.channel,
        }
    }
    fn time_ns(&self, _: u64) -> Option<u64> {
        None
    }
    fn set_time_ns(&mut self, _: u32, _: u64) {}
}

/// x, y, z and intensity, all float32, 16 bytes, packed: the `XYZI` cloud of
/// ros-drivers/velodyne's ROS 2 `velodyne_pointcloud` (its `PointcloudXYZI` container) and of
/// the other drivers' plain clouds.
///
/// | field | type | offset | value |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m |
/// | `intensity` | f32 | 12 | the sensor's 0–255 intensity as a float |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct PointXYZI {
    /// Forward, m.
    pub x: f32,
    /// Left, m.
    pub y: f32,
    /// Up, m.
    pub z: f32,
    /// 0.0–255.0.
    pub intensity: f32,
}

/// Field list of [`PointXYZI`].
pub const XYZI_FIELDS: [PointField; 4] = [
    f("x", 0, datatype::FLOAT32),
    f("y", 4, datatype::FLOAT32),
    f("z", 8, datatype::FLOAT32),
    f("intensity", 12, datatype::FLOAT32),
];

impl Layout for PointXYZI {
    const TYPE: PointType = PointType::Xyzi;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, _: &TimeBase) -> Self {
        PointXYZI {
            x: p.x,
            y: p.y,
            z: p.z,
            intensity: f32::from(p.intensity),
        }
    }
    fn time_ns(&self, _: u64) -> Option<u64> {
        None
    }
    fn set_time_ns(&mut self, _: u32, _: u64) {}
}

/// ros-drivers/velodyne's ROS 2 `velodyne_pointcloud` XYZIRT point, packed (the driver builds
/// its fields with `PointCloud2Modifier`, which adds no padding): 22 bytes.
///
/// | field | type | offset | value |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m |
/// | `intensity` | f32 | 12 | 0–255 as a float |
/// | `ring` | u16 | 16 | the laser's ring (0 = lowest elevation), our `channel` |
/// | `time` | f32 | 18 | s after the header stamp |
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct VelodynePoint {
    /// Forward, m.
    pub x: f32,
    /// Left, m.
    pub y: f32,
    /// Up, m.
    pub z: f32,
    /// 0.0–255.0.
    pub intensity: f32,
    /// Ring.
    pub ring: u16,
    /// s after the header stamp.
    pub time: f32,
}

/// Field list of [`VelodynePoint`].
pub const VELODYNE_FIELDS: [PointField; 6] = [
    f("x", 0, datatype::FLOAT32),
    f("y", 4, datatype::FLOAT32),
    f("z", 8, datatype::FLOAT32),
    f("intensity", 12, datatype::FLOAT32),
    f("ring", 16, datatype::UINT16),
    f("time", 18, datatype::FLOAT32),
];

impl Layout for VelodynePoint {
    const TYPE: PointType = PointType::Velodyne;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, _: &TimeBase) -> Self {
        VelodynePoint {
            x: p.x,
            y: p.y,
            z: p.z,
            intensity: f32::from(p.intensity),
            ring: p.channel,
            time: sec_f32(p.time_stamp),
        }
    }
    fn time_ns(&self, _: u64) -> Option<u64> {
        let t = self.time;
        Some((f64::from(t) * 1e9).round().max(0.0) as u64)
    }
    fn set_time_ns(&mut self, rel_ns: u32, _: u64) {
        self.time = sec_f32(rel_ns);
    }
}

/// ouster-ros's default point (`original`, `ouster_ros::Point`): PCL's padded `x y z` quad,
/// then its own fields, aligned to 16 bytes: 48 bytes.
///
/// | field | type | offset | value |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m (12..16 padding) |
/// | `intensity` | f32 | 16 | the signal (photon count); other vendors: their intensity |
/// | `t` | u32 | 20 | ns after the header stamp (the column's time) |
/// | `reflectivity` | u16 | 24 | calibrated reflectivity |
/// | `ring` | u16 | 26 | beam (row) index, 0 = top beam |
/// | `ambient` | u16 | 28 | near-infrared photons; 0 where a vendor has none |
/// | `range` | u32 | 32 | mm, the distance rounded (36..48 padding) |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct OusterPoint {
    /// Forward, m.
    pub x: f32,
    /// Left, m.
    pub y: f32,
    /// Up, m.
    pub z: f32,
    /// PCL's padding of `x y z`.
    pub pad0: f32,
    /// Signal photons (Ouster), intensity otherwise.
    pub intensity: f32,
    /// ns after the header stamp.
    pub t: u32,
    /// Reflectivity.
    pub reflectivity: u16,
    /// Beam index.
    pub ring: u16,
    /// Near-infrared photons.
    pub ambient: u16,
    /// Padding.
    pub pad1: u16,
    /// mm.
    pub range: u32,
    /// Padding to 16-byte alignment.
    pub pad2: [u32; 3],
}

/// Field list of [`OusterPoint`].
pub const OUSTER_FIELDS: [PointField; 9] = [
    f("x", 0, datatype::FLOAT32),
    f("y", 4, datatype::FLOAT32),
    f("z", 8, datatype::FLOAT32),
    f("intensity", 16, datatype::FLOAT32),
    f("t", 20, datatype::UINT32),
    f("reflectivity", 24, datatype::UINT16),
    f("ring", 26, datatype::UINT16),
    f("ambient", 28, datatype::UINT16),
    f("range", 32, datatype::UINT32),
];

/// Range in mm of `distance` m, rounded half up (`round` for the non-negative ranges;
/// without SSE4.1's `roundsd`, `f64::round` is a library call), saturating at 0 and u32::MAX.
#[inline(always)]
fn range_mm(distance: f32) -> u32 {
    (f64::from(distance) * 1000.0 + 0.5) as u32
}

impl Layout for OusterPoint {
    const TYPE: PointType = PointType::Ouster;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, _: &TimeBase) -> Self {
        OusterPoint {
            x: p.x,
            y: p.y,
            z: p.z,
            intensity: f32::from(p.intensity),
            t: p.time_stamp,
            reflectivity: u16::from(p.intensity),
            ring: p.channel,
            range: range_mm(p.distance),
            ..Default::default()
        }
    }
    fn time_ns(&self, _: u64) -> Option<u64> {
        Some(u64::from(self.t))
    }
    fn set_time_ns(&mut self, rel_ns: u32, _: u64) {
        self.t = rel_ns;
    }
}

/// ouster-ros's `xyzir` point (`ouster_ros::PointXYZIR`): PCL's padded `x y z` quad, then the
/// intensity and the ring, aligned to 16 bytes: 32 bytes.
///
/// | field | type | offset | value |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m (12..16 padding) |
/// | `intensity` | f32 | 16 | the signal (Ouster), intensity otherwise |
/// | `ring` | u16 | 20 | beam (row) index, 0 = top beam (22..32 padding) |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct OusterXYZIR {
    /// Forward, m.
    pub x: f32,
    /// Left, m.
    pub y: f32,
    /// Up, m.
    pub z: f32,
    /// PCL's padding of `x y z`.
    pub pad0: f32,
    /// Signal photons (Ouster), intensity otherwise.
    pub intensity: f32,
    /// Beam index.
    pub ring: u16,
    /// Padding to 16-byte alignment.
    pub pad1: [u16; 5],
}

/// Field list of [`OusterXYZIR`].
pub const OUSTER_XYZIR_FIELDS: [PointField; 5] = [
    f("x", 0, datatype::FLOAT32),
    f("y", 4, datatype::FLOAT32),
    f("z", 8, datatype::FLOAT32),
    f("intensity", 16, datatype::FLOAT32),
    f("ring", 20, datatype::UINT16),
];

impl Layout for OusterXYZIR {
    const TYPE: PointType = PointType::OusterXyzir;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, _: &TimeBase) -> Self {
        OusterXYZIR {
            x: p.x,
            y: p.y,
            z: p.z,
            intensity: f32::from(p.intensity),
            ring: p.channel,
            ..Default::default()
        }
    }
    fn time_ns(&self, _: u64) -> Option<u64> {
        None
    }
    fn set_time_ns(&mut self, _: u32, _: u64) {}
}

/// HesaiLidar_ROS_2.0's point, packed (fields added one after another without padding): 26
/// bytes.
///
/// | field | type | offset | value |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m |
/// | `intensity` | f32 | 12 | 0–255 as a float |
/// | `ring` | u16 | 16 | channel: the 0-based hardware channel in packet order |
/// | `timestamp` | f64 | 18 | s since the Unix epoch: the time stamp of the point's packet (the same for every point of a packet, as Hesai's driver writes it), sensor clock |
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct HesaiPoint {
    /// Forward, m.
    pub x: f32,
    /// Left, m.
    pub y: f32,
    /// Up, m.
    pub z: f32,
    /// 0.0–255.0.
    pub intensity: f32,
    /// Channel.
    pub ring: u16,
    /// s since the Unix epoch.
    pub timestamp: f64,
}

/// Field list of [`HesaiPoint`].
pub const HESAI_FIELDS: [PointField; 6] = [
    f("x", 0, datatype::FLOAT32),
    f("y", 4, datatype::FLOAT32),
    f("z", 8, datatype::FLOAT32),
    f("intensity", 12, datatype::FLOAT32),
    f("ring", 16, datatype::UINT16),
    f("timestamp", 18, datatype::FLOAT64),
];

impl Layout for HesaiPoint {
    const TYPE: PointType = PointType::Hesai;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, t: &TimeBase) -> Self {
        HesaiPoint {
            x: p.x,
            y: p.y,
            z: p.z,
            intensity: f32::from(p.intensity),
            ring: p.channel,
            timestamp: t.packet_ns as f64 * 1e-9,
        }
    }
    fn time_ns(&self, start_ns: u64) -> Option<u64> {
        let t = self.timestamp;
        rel_of_abs(t, start_ns)
    }
    fn set_time_ns(&mut self, rel_ns: u32, start_ns: u64) {
        self.timestamp = abs_sec(start_ns, rel_ns);
    }
}

/// rslidar_sdk's XYZIRT point on ROS 2, packed (fields added one after another without
/// padding): 26 bytes.
///
/// | field | type | offset | value |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m |
/// | `intensity` | f32 | 12 | 0–255 as a float |
/// | `ring` | u16 | 16 | the laser's ring |
/// | `timestamp` | f64 | 18 | s since the Unix epoch: the firing time, sensor clock |
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct RoboSensePoint {
    /// Forward, m.
    pub x: f32,
    /// Left, m.
    pub y: f32,
    /// Up, m.
    pub z: f32,
    /// 0.0–255.0.
    pub intensity: f32,
    /// Ring.
    pub ring: u16,
    /// s since the Unix epoch.
    pub timestamp: f64,
}

/// Field list of [`RoboSensePoint`].
pub const ROBOSENSE_FIELDS: [PointField; 6] = [
    f("x", 0, datatype::FLOAT32),
    f("y", 4, datatype::FLOAT32),
    f("z", 8, datatype::FLOAT32),
    f("intensity", 12, datatype::FLOAT32),
    f("ring", 16, datatype::UINT16),
    f("timestamp", 18, datatype::FLOAT64),
];

impl Layout for RoboSensePoint {
    const TYPE: PointType = PointType::Robosense;
    #[inline(always)]
    fn from_point(p: &PointXYZIRCAEDT, t: &TimeBase) -> Self {
        RoboSensePoint {
            x: p.x,
            y: p.y,
            z: p.z,
            intensity: f32::from(p.intensity),
            ring: p.channel,
            timestamp: abs_sec(t.start_ns, p.time_stamp),
        }
    }
    fn time_ns(&self, start_ns: u64) -> Option<u64> {
        let t = self.timestamp;
        rel_of_abs(t, start_ns)
    }
    fn set_time_ns(&mut self, rel_ns: u32, start_ns: u64) {
        self.timestamp = abs_sec(start_ns, rel_ns);
    }
}

/// Calls `$body` with `$L` bound to the [`Layout`] type of `$t` (a [`PointType`]): the one
/// dispatch from a run-time layout to monomorphised code.
#[macro_export]
#[doc(hidden)]
macro_rules! with_layout {
    ($t:expr, $L:ident => $body:expr) => {
        match $t {
            $crate::layout::PointType::Autoware => {
                type $L = $crate::point::PointXYZIRCAEDT;
                $body
            }
            $crate::layout::PointType::AutowareXyzirc => {
                type $L = $crate::layout::PointXYZIRC;
                $body
            }
            $crate::layout::PointType::Xyzi => {
                type $L = $crate::layout::PointXYZI;
                $body
            }
            $crate::layout::PointType::Velodyne => {
                type $L = $crate::layout::VelodynePoint;
                $body
            }
            $crate::layout::PointType::Ouster => {
                type $L = $crate::layout::OusterPoint;
                $body
            }
            $crate::layout::PointType::OusterXyzir => {
                type $L = $crate::layout::OusterXYZIR;
                $body
            }
            $crate::layout::PointType::Hesai => {
                type $L = $crate::layout::HesaiPoint;
                $body
            }
            $crate::layout::PointType::Robosense => {
                type $L = $crate::layout::RoboSensePoint;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout's Rust struct has exactly the field list's offsets and size, and the
    /// `with_layout!` dispatch names the struct of the same type.
    #[test]
    fn structs_match_field_lists() {
        fn check<L: Layout>(offsets: &[(&str, usize)]) {
            let t = L::TYPE;
            assert_eq!(t.point_step(), size_of::<L>(), "{t}");
            assert_eq!(t.fields().len(), offsets.len(), "{t}");
            for (fl, (n, o)) in t.fields().iter().zip(offsets) {
                assert_eq!((fl.name, fl.offset as usize), (*n, *o), "{t}");
            }
        }
        use std::mem::offset_of as o;
        type A = PointXYZIRCAEDT;
        check::<A>(&[
            ("x", o!(A, x)),
            ("y", o!(A, y)),
            ("z", o!(A, z)),
            ("intensity", o!(A, intensity)),
            ("return_type", o!(A, return_type)),
            ("channel", o!(A, channel)),
            ("azimuth", o!(A, azimuth)),
            ("elevation", o!(A, elevation)),
            ("distance", o!(A, distance)),
            ("time_stamp", o!(A, time_stamp)),
        ]);
        type C = PointXYZIRC;
        check::<C>(&[
            ("x", o!(C, x)),
            ("y", o!(C, y)),
            ("z", o!(C, z)),
            ("intensity", o!(C, intensity)),
            ("return_type", o!(C, return_type)),
            ("channel", o!(C, channel)),
        ]);
        type I = PointXYZI;
        check::<I>(&[
            ("x", o!(I, x)),
            ("y", o!(I, y)),
            ("z", o!(I, z)),
            ("intensity", o!(I, intensity)),
        ]);
        type V = VelodynePoint;
        check::<V>(&[
            ("x", o!(V, x)),
            ("y", o!(V, y)),
            ("z", o!(V, z)),
            ("intensity", o!(V, intensity)),
            ("ring", o!(V, ring)),
            ("time", o!(V, time)),
        ]);
        type O = OusterPoint;
        check::<O>(&[
            ("x", o!(O, x)),
            ("y", o!(O, y)),
            ("z", o!(O, z)),
            ("intensity", o!(O, intensity)),
            ("t", o!(O, t)),
            ("reflectivity", o!(O, reflectivity)),
            ("ring", o!(O, ring)),
            ("ambient", o!(O, ambient)),
            ("range", o!(O, range)),
        ]);
        type R = OusterXYZIR;
        check::<R>(&[
            ("x", o!(R, x)),
            ("y", o!(R, y)),
            ("z", o!(R, z)),
            ("intensity", o!(R, intensity)),
            ("ring", o!(R, ring)),
        ]);
        type H = HesaiPoint;
        check::<H>(&[
            ("x", o!(H, x)),
            ("y", o!(H, y)),
            ("z", o!(H, z)),
            ("intensity", o!(H, intensity)),
            ("ring", o!(H, ring)),
            ("timestamp", o!(H, timestamp)),
        ]);
        type S = RoboSensePoint;
        check::<S>(&[
            ("x", o!(S, x)),
            ("y", o!(S, y)),
            ("z", o!(S, z)),
            ("intensity", o!(S, intensity)),
            ("ring", o!(S, ring)),
            ("timestamp", o!(S, timestamp)),
        ]);
        for t in POINT_TYPES {
            assert_eq!(with_layout!(t, L => L::TYPE), t);
        }
    }

    /// Names parse back to their type; anything else is refused naming the valid set.
    #[test]
    fn names_round_trip_and_unknown_is_refused() {
        for t in POINT_TYPES {
            assert_eq!(t.name().parse::<PointType>(), Ok(t));
            assert!(POINT_TYPE_NAMES.contains(t.name()));
        }
        let e = "XYZI".parse::<PointType>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown point_type 'XYZI'; valid: autoware, autoware_xyzirc, xyzi, velodyne, \
             ouster, ouster_xyzir, hesai, robosense"
        );
    }

    /// The conversion rules: intensity as float, ring = channel, relative and absolute times,
    /// range in mm; times read back.
    #[test]
    fn conversion_rules() {
        let p = PointXYZIRCAEDT {
            x: 1.5,
            y: -2.25,
            z: 0.125,
            intensity: 200,
            return_type: 3,
            channel: 17,
            azimuth: 1.0,
            elevation: -0.1,
            distance: 12.3456,
            time_stamp: 54_321_000,
        };
        let start = 1_700_000_000_123_456_789u64;
        let tb = TimeBase {
            start_ns: start,
            packet_ns: start + 54_000_000,
        };
        let v = VelodynePoint::from_point(&p, &tb);
        let (ring, time, inten) = (v.ring, v.time, v.intensity);
        assert_eq!((ring, inten), (17, 200.0));
        assert_eq!(time, 0.054321_f32);
        assert_eq!(
            v.time_ns(start),
            Some(54_320_998),
            "f32 s read back, rounded to ns"
        );
        let o = OusterPoint::from_point(&p, &tb);
        assert_eq!(
            (o.t, o.range, o.ring, o.reflectivity),
            (54_321_000, 12_346, 17, 200)
        );
        let h = HesaiPoint::from_point(&p, &tb);
        let ts = h.timestamp;
        assert_eq!(ts, (start + 54_000_000) as f64 * 1e-9, "the packet's time");
        let r = RoboSensePoint::from_point(&p, &tb);
        let ts = r.timestamp;
        assert_eq!(ts, (start + 54_321_000) as f64 * 1e-9, "the firing time");
        assert_eq!(
            r.time_ns(start),
            Some(54_320_875),
            "f64 s since the epoch read back: 238 ns steps"
        );
        let mut r = r;
        r.set_time_ns(7, start);
        let ts = r.timestamp;
        assert_eq!(ts, (start + 7) as f64 * 1e-9);
        assert_eq!(PointXYZI::from_point(&p, &tb).time_ns(0), None);
    }
}
