//! The point layout published by lidarxdp: Autoware's `PointXYZIRCAEDT`.
//!
//! 32 bytes per point, little-endian, no padding, compatible with a ROS
//! `sensor_msgs/PointCloud2` whose `fields` are [`POINT_FIELDS`] and `point_step` is 32.
//! Source: Autoware `autoware_point_types` (`PointXYZIRCAEDT`), ROS `sensor_msgs/PointField`.
//! Axes: x forward, y left, z up (ROS REP 103).
#![forbid(unsafe_code)]

use bytemuck::{Pod, Zeroable};

/// One LiDAR return.
///
/// | field | type | offset | unit |
/// |---|---|---|---|
/// | `x`,`y`,`z` | f32 | 0, 4, 8 | m |
/// | `intensity` | u8 | 12 | sensor units (0–255) |
/// | `return_type` | u8 | 13 | [`ReturnType`] as u8 |
/// | `channel` | u16 | 14 | laser ring index |
/// | `azimuth` | f32 | 16 | rad, [0, 2π) |
/// | `elevation` | f32 | 20 | rad |
/// | `distance` | f32 | 24 | m |
/// | `time_stamp` | u32 | 28 | ns since the frame's start time |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct PointXYZIRCAEDT {
    /// Forward coordinate, m.
    pub x: f32,
    /// Left coordinate, m.
    pub y: f32,
    /// Up coordinate, m.
    pub z: f32,
    /// Calibrated reflectivity / intensity as reported by the sensor (0–255).
    pub intensity: u8,
    /// [`ReturnType`] code.
    pub return_type: u8,
    /// Channel (ring / laser id) in the sensor's numbering.
    pub channel: u16,
    /// Horizontal angle, rad, [0, 2π).
    pub azimuth: f32,
    /// Vertical angle, rad.
    pub elevation: f32,
    /// Range along the beam, m.
    pub distance: f32,
    /// Time of this firing, ns after the frame's start time ([`crate::frame::FrameHeader::start_ns`]).
    pub time_stamp: u32,
}

/// Size of [`PointXYZIRCAEDT`] in bytes (the PointCloud2 `point_step`).
pub const POINT_SIZE: usize = 32;
const _: () = assert!(core::mem::size_of::<PointXYZIRCAEDT>() == POINT_SIZE);

/// Return type codes (Autoware / Nebula `ReturnType`), stored in [`PointXYZIRCAEDT::return_type`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnType {
    /// Not known.
    Unknown = 0,
    /// Last return.
    Last = 1,
    /// First return.
    First = 2,
    /// Strongest return.
    Strongest = 3,
    /// First return that is weaker than another return.
    FirstWeak = 4,
    /// Last return that is weaker than another return.
    LastWeak = 5,
    /// Two returns of a dual-return pair that are identical, merged into one point.
    Identical = 6,
    /// Second return.
    Second = 7,
    /// Second-strongest return.
    SecondStrongest = 8,
    /// First return that is also the strongest.
    FirstStrongest = 9,
    /// Last return that is also the strongest.
    LastStrongest = 10,
}

/// PointCloud2 `PointField.datatype` codes (ROS `sensor_msgs/PointField`).
pub mod datatype {
    /// int8
    pub const INT8: u8 = 1;
    /// uint8
    pub const UINT8: u8 = 2;
    /// int16
    pub const INT16: u8 = 3;
    /// uint16
    pub const UINT16: u8 = 4;
    /// int32
    pub const INT32: u8 = 5;
    /// uint32
    pub const UINT32: u8 = 6;
    /// float32
    pub const FLOAT32: u8 = 7;
    /// float64
    pub const FLOAT64: u8 = 8;
}

/// One entry of a PointCloud2-style field list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointField {
    /// Field name as in the PCD / PointCloud2 header.
    pub name: &'static str,
    /// Byte offset inside the point.
    pub offset: u32,
    /// [`datatype`] code.
    pub datatype: u8,
    /// Number of elements (always 1 here).
    pub count: u32,
}

/// Field list of [`PointXYZIRCAEDT`], in offset order.
pub const POINT_FIELDS: [PointField; 10] = [
    PointField {
        name: "x",
        offset: 0,
        datatype: datatype::FLOAT32,
        count: 1,
    },
    PointField {
        name: "y",
        offset: 4,
        datatype: datatype::FLOAT32,
        count: 1,
    },
    PointField {
        name: "z",
        offset: 8,
        datatype: datatype::FLOAT32,
        count: 1,
    },
    PointField {
        name: "intensity",
        offset: 12,
        datatype: datatype::UINT8,
        count: 1,
    },
    PointField {
        name: "return_type",
        offset: 13,
        datatype: datatype::UINT8,
        count: 1,
    },
    PointField {
        name: "channel",
        offset: 14,
        datatype: datatype::UINT16,
        count: 1,
    },
    PointField {
        name: "azimuth",
        offset: 16,
        datatype: datatype::FLOAT32,
        count: 1,
    },
    PointField {
        name: "elevation",
        offset: 20,
        datatype: datatype::FLOAT32,
        count: 1,
    },
    PointField {
        name: "distance",
        offset: 24,
        datatype: datatype::FLOAT32,
        count: 1,
    },
    PointField {
        name: "time_stamp",
        offset: 28,
        datatype: datatype::UINT32,
        count: 1,
    },
];
