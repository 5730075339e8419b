//! Writing ROS 2 messages as CDR (XCDR1 little-endian, with the 4-byte encapsulation header):
//! `sensor_msgs/msg/PointCloud2` as a prefix laid out once per frame ([`PointCloud2Prefix`]),
//! `sensor_msgs/msg/Imu` and `diagnostic_msgs/msg/DiagnosticArray`; the `ros2msg` schema texts
//! an MCAP file carries. Sources: see [`super`].
#![forbid(unsafe_code)]

use crate::msg::DiagnosticStatus;
use crate::point::PointField;
use crate::protocol::WireField;

/// `ros2msg` definition of `sensor_msgs/msg/PointCloud2` with its dependencies, the schema text
/// an MCAP file carries for its messages (MCAP "Well-known schema encodings", `ros2msg`: the
/// `.msg` file followed by each dependency after a line of 80 `=` and `MSG: <type>`).
pub const POINTCLOUD2_SCHEMA: &str = "std_msgs/Header header\nuint32 height\nuint32 width\n\
PointField[] fields\nbool is_bigendian\nuint32 point_step\nuint32 row_step\nuint8[] data\nbool is_dense\n\
================================================================================\nMSG: std_msgs/Header\n\
builtin_interfaces/Time stamp\nstring frame_id\n\
================================================================================\nMSG: builtin_interfaces/Time\n\
int32 sec\nuint32 nanosec\n\
================================================================================\nMSG: sensor_msgs/PointField\n\
uint8 INT8=1\nuint8 UINT8=2\nuint8 INT16=3\nuint8 UINT16=4\nuint8 INT32=5\nuint8 UINT32=6\n\
uint8 FLOAT32=7\nuint8 FLOAT64=8\nstring name\nuint32 offset\nuint8 datatype\nuint32 count\n";

/// `ros2msg` definition of `diagnostic_msgs/msg/DiagnosticArray` with its dependencies (as
/// [`POINTCLOUD2_SCHEMA`]).
pub const DIAGNOSTIC_ARRAY_SCHEMA: &str = "std_msgs/Header header\nDiagnosticStatus[] status\n\
================================================================================\nMSG: std_msgs/Header\n\
builtin_interfaces/Time stamp\nstring frame_id\n\
================================================================================\nMSG: builtin_interfaces/Time\n\
int32 sec\nuint32 nanosec\n\
================================================================================\nMSG: diagnostic_msgs/DiagnosticStatus\n\
byte OK=0\nbyte WARN=1\nbyte ERROR=2\nbyte STALE=3\nbyte level\nstring name\nstring message\n\
string hardware_id\nKeyValue[] values\n\
================================================================================\nMSG: diagnostic_msgs/KeyValue\n\
string key\nstring value\n";

/// `ros2msg` definition of `sensor_msgs/msg/Imu` with its dependencies (as
/// [`POINTCLOUD2_SCHEMA`]).
pub const IMU_SCHEMA: &str = "std_msgs/Header header\ngeometry_msgs/Quaternion orientation\n\
float64[9] orientation_covariance\ngeometry_msgs/Vector3 angular_velocity\n\
float64[9] angular_velocity_covariance\ngeometry_msgs/Vector3 linear_acceleration\n\
float64[9] linear_acceleration_covariance\n\
================================================================================\nMSG: std_msgs/Header\n\
builtin_interfaces/Time stamp\nstring frame_id\n\
================================================================================\nMSG: builtin_interfaces/Time\n\
int32 sec\nuint32 nanosec\n\
================================================================================\nMSG: geometry_msgs/Quaternion\n\
float64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1\n\
================================================================================\nMSG: geometry_msgs/Vector3\n\
float64 x\nfloat64 y\nfloat64 z\n";

/// The XCDR1 little-endian encapsulation header (DDS-XTypes 1.3, "Encapsulation Identifier":
/// `CDR_LE` = `0x0001`, options `0x0000`), the first 4 bytes of every message.
pub const CDR_LE_HEADER: [u8; 4] = [0x00, 0x01, 0x00, 0x00];

/// The bytes that follow `data` in a `PointCloud2` message: `bool is_dense` = true (lidarxdp
/// clouds hold no invalid points). A `bool` needs no alignment, so this is always one byte.
pub const POINTCLOUD2_SUFFIX: [u8; 1] = [1];

/// One `sensor_msgs/msg/PointField` entry to encode (`PointField.msg`: `string name`,
/// `uint32 offset` in bytes inside a point, `uint8 datatype` code of
/// [`crate::point::datatype`], `uint32 count` of elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRef<'a> {
    /// Field name, e.g. `x`.
    pub name: &'a str,
    /// Byte offset inside a point.
    pub offset: u32,
    /// [`crate::point::datatype`] code (7 = FLOAT32).
    pub datatype: u8,
    /// Number of elements.
    pub count: u32,
}

impl<'a> From<&'a PointField> for FieldRef<'a> {
    fn from(f: &'a PointField) -> Self {
        FieldRef {
            name: f.name,
            offset: f.offset,
            datatype: f.datatype,
            count: f.count,
        }
    }
}

impl<'a> From<&'a WireField> for FieldRef<'a> {
    fn from(f: &'a WireField) -> Self {
        FieldRef {
            name: &f.name,
            offset: f.offset,
            datatype: f.datatype,
            count: f.count,
        }
    }
}

/// Why a `PointCloud2` cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CdrError {
    /// `point_count * point_step` does not fit the `uint32` CDR sequence length of `data`
    /// (nor `row_step`): at most 4294967295 bytes.
    #[error("PointCloud2 data of {bytes} bytes exceeds the CDR uint32 length (max 4294967295)")]
    DataTooLong {
        /// The data length asked for, in bytes.
        bytes: u64,
    },
    /// A string (`frame_id` or a field name) holds a NUL byte, which CDR strings cannot carry
    /// (their NUL terminator ends them).
    #[error("PointCloud2 string {0:?} contains a NUL byte, which a CDR string cannot carry")]
    NulInString(String),
    /// [`PointCloud2Prefix::write_message`] got `data` of another length than the prefix says.
    #[error("PointCloud2 data is {got} bytes but the prefix announces {want}")]
    DataLength {
        /// Bytes announced by the prefix.
        want: usize,
        /// Bytes given.
        got: usize,
    },
}

/// Little-endian CDR writer; alignment counts from the end of the 4-byte encapsulation header
/// (XCDR1, DDS-XTypes 1.3 "Data Representation", primitive type alignment).
pub(super) struct Cdr<'a>(pub(super) &'a mut Vec<u8>, pub(super) usize);

impl Cdr<'_> {
    pub(super) fn align(&mut self, n: usize) {
        let body = self.0.len() - self.1;
        let pad = (n - body % n) % n;
        self.0.resize(self.0.len() + pad, 0);
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn i32(&mut self, v: i32) {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn f64(&mut self, v: f64) {
        self.align(8);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn string(&mut self, s: &str) -> Result<(), CdrError> {
        if s.as_bytes().contains(&0) {
            return Err(CdrError::NulInString(s.to_owned()));
        }
        let len = u32::try_from(s.len() + 1).map_err(|_| CdrError::DataTooLong {
            bytes: s.len() as u64 + 1,
        })?;
        self.u32(len);
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        Ok(())
    }
}

/// The serialised bytes of a `sensor_msgs/msg/PointCloud2` up to, not including, its `data`
/// bytes: built once per frame, then reused by every sink (zenoh payload, MCAP message), which
/// writes prefix + points + [`POINTCLOUD2_SUFFIX`] without copying the points twice.
///
/// Layout (offsets from the message start; `B` = 4, the end of the encapsulation header):
/// `00 01 00 00`; `header.stamp.sec` `int32` at 4, `header.stamp.nanosec` `uint32` at 8;
/// `header.frame_id` string at 12 (`uint32` length with NUL, bytes, NUL); then, each `uint32`
/// aligned to 4 from `B`: `height` = 1, `width` = point count, `fields` count, and per field
/// `name` string, `offset` `uint32`, `datatype` `uint8`, `count` `uint32`; `is_bigendian`
/// `uint8` = 0; `point_step`, `row_step` = `data` length, `data` length (`uint32` each). The
/// `data` bytes start at [`PointCloud2Prefix::len`] with no padding (`uint8[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointCloud2Prefix {
    bytes: Vec<u8>,
    data_len: usize,
}

impl PointCloud2Prefix {
    /// Encodes the prefix of an unorganised cloud (`height` 1, `width` = `point_count`) of
    /// `point_count` points of `point_step` bytes described by `fields`, stamped `stamp_ns`
    /// (ns since the Unix epoch: `sec` = `stamp_ns / 1e9` saturated to `i32::MAX`,
    /// `nanosec` = `stamp_ns % 1e9`) in frame `frame_id`.
    ///
    /// # Errors
    /// [`CdrError::DataTooLong`] if `point_count * point_step` exceeds `u32::MAX` bytes;
    /// [`CdrError::NulInString`] if `frame_id` or a field name holds a NUL byte.
    pub fn new<'f, I>(
        stamp_ns: u64,
        frame_id: &str,
        fields: I,
        point_step: u32,
        point_count: u32,
    ) -> Result<Self, CdrError>
    where
        I: IntoIterator<Item = FieldRef<'f>>,
        I::IntoIter: ExactSizeIterator,
    {
        let bytes = u64::from(point_count) * u64::from(point_step);
        let data_len = u32::try_from(bytes).map_err(|_| CdrError::DataTooLong { bytes })?;
        let fields = fields.into_iter();
        let mut out = Vec::with_capacity(64 + frame_id.len() + 24 * fields.len());
        out.extend_from_slice(&CDR_LE_HEADER);
        let mut c = Cdr(&mut out, CDR_LE_HEADER.len());
        c.i32((stamp_ns / 1_000_000_000).min(i32::MAX as u64) as i32);
        c.u32((stamp_ns % 1_000_000_000) as u32);
        c.string(frame_id)?;
        c.u32(1); // height
        c.u32(point_count); // width
        c.u32(fields.len() as u32);
        for f in fields {
            c.string(f.name)?;
            c.u32(f.offset);
            c.u8(f.datatype);
            c.u32(f.count);
        }
        c.u8(0); // is_bigendian
        c.u32(point_step);
        c.u32(data_len); // row_step: one row
        c.u32(data_len); // data: sequence length
        Ok(PointCloud2Prefix {
            bytes: out,
            data_len: data_len as usize,
        })
    }

    /// The prefix bytes, starting with [`CDR_LE_HEADER`].
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Length of the prefix in bytes: the offset of `data` in the message.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a prefix holds at least the encapsulation header and the fixed fields.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The `data` length the prefix announces (`point_count * point_step` bytes).
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// Length of the whole message: prefix + data + [`POINTCLOUD2_SUFFIX`].
    pub fn message_len(&self) -> usize {
        self.bytes.len() + self.data_len + POINTCLOUD2_SUFFIX.len()
    }

    /// Appends the whole message (prefix, `data`, suffix) to `out`, reserving
    /// [`Self::message_len`] bytes first.
    ///
    /// # Errors
    /// [`CdrError::DataLength`] if `data` is not [`Self::data_len`] bytes; `out` is unchanged.
    pub fn write_message(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CdrError> {
        if data.len() != self.data_len {
            return Err(CdrError::DataLength {
                want: self.data_len,
                got: data.len(),
            });
        }
        out.reserve(self.message_len());
        out.extend_from_slice(&self.bytes);
        out.extend_from_slice(data);
        out.extend_from_slice(&POINTCLOUD2_SUFFIX);
        Ok(())
    }

    /// Writes the whole message (prefix, `data`, suffix) into `out`, which must be exactly
    /// [`Self::message_len`] bytes: the one copy of the points into a buffer the sink does not
    /// own, such as a shared-memory chunk.
    ///
    /// # Errors
    /// [`CdrError::DataLength`] if `data` is not [`Self::data_len`] bytes, or `out` is not
    /// [`Self::message_len`] bytes (then `want`/`got` are the message lengths); `out` is
    /// unchanged.
    pub fn write_into(&self, data: &[u8], out: &mut [u8]) -> Result<(), CdrError> {
        if data.len() != self.data_len {
            return Err(CdrError::DataLength {
                want: self.data_len,
                got: data.len(),
            });
        }
        if out.len() != self.message_len() {
            return Err(CdrError::DataLength {
                want: self.message_len(),
                got: out.len(),
            });
        }
        let (head, rest) = out.split_at_mut(self.bytes.len());
        let (body, tail) = rest.split_at_mut(self.data_len);
        head.copy_from_slice(&self.bytes);
        body.copy_from_slice(data);
        tail.copy_from_slice(&POINTCLOUD2_SUFFIX);
        Ok(())
    }
}

/// The prefix of a frame of `points` points of layout `point_type` (its field list and
/// `point_step`, [`crate::layout`]) stamped `stamp_ns` (the frame's `start_ns`) in frame
/// `frame_id`: the one prefix every sink and the shared-memory loan write. Its length depends
/// on `frame_id` and the layout alone (a multiple of 4: the `data` bytes start 4-aligned), not
/// on the stamp or the count.
///
/// # Errors
/// [`CdrError::DataTooLong`] above `u32::MAX` bytes of points; [`CdrError::NulInString`] for a
/// NUL in `frame_id`.
pub fn points_prefix(
    stamp_ns: u64,
    frame_id: &str,
    point_type: crate::layout::PointType,
    points: usize,
) -> Result<PointCloud2Prefix, CdrError> {
    let step = point_type.point_step();
    let count = u32::try_from(points).map_err(|_| CdrError::DataTooLong {
        bytes: (points as u64).saturating_mul(step as u64),
    })?;
    PointCloud2Prefix::new(
        stamp_ns,
        frame_id,
        point_type.fields().iter().map(FieldRef::from),
        step as u32,
        count,
    )
}

/// The interface name of `sensor_msgs/msg/Imu` (MCAP and Foxglove schema name).
pub const IMU_SCHEMA_NAME: &str = "sensor_msgs/msg/Imu";

/// The type name of `sensor_msgs/msg/Imu` in rmw_zenoh keys and DDS (`sensor_msgs::msg::dds_::Imu_`).
pub const IMU_TYPE_NAME: &str = "sensor_msgs::msg::dds_::Imu_";

/// A `sensor_msgs/msg/Imu` message, CDR little-endian with its encapsulation header, stamped
/// `stamp_ns` (ns since the Unix epoch, split as [`PointCloud2Prefix::new`] splits it) in frame
/// `frame_id`: orientation unknown (quaternion 0, 0, 0, 1 and `orientation_covariance[0]` =
/// −1, as REP 145 asks of a sensor without one), `angular_velocity` (rad/s) and
/// `linear_acceleration` (m/s²) given, their covariances 0 (unknown).
///
/// Layout after the header (offsets from the body start, 4 bytes in; each `float64` aligned to
/// 8 from there): `orientation` x, y, z, w; `orientation_covariance` \[9\]; `angular_velocity`
/// x, y, z; `angular_velocity_covariance` \[9\]; `linear_acceleration` x, y, z;
/// `linear_acceleration_covariance` \[9\].
///
/// # Errors
/// [`CdrError::NulInString`] for a NUL in `frame_id`.
pub fn imu_message(
    stamp_ns: u64,
    frame_id: &str,
    angular_velocity: [f64; 3],
    linear_acceleration: [f64; 3],
) -> Result<Vec<u8>, CdrError> {
    let mut out = Vec::with_capacity(360 + frame_id.len());
    out.extend_from_slice(&CDR_LE_HEADER);
    let mut c = Cdr(&mut out, CDR_LE_HEADER.len());
    c.i32((stamp_ns / 1_000_000_000).min(i32::MAX as u64) as i32);
    c.u32((stamp_ns % 1_000_000_000) as u32);
    c.string(frame_id)?;
    for v in [0.0, 0.0, 0.0, 1.0] {
        c.f64(v);
    }
    c.f64(-1.0);
    (0..8).for_each(|_| c.f64(0.0));
    angular_velocity.into_iter().for_each(|v| c.f64(v));
    (0..9).for_each(|_| c.f64(0.0));
    linear_acceleration.into_iter().for_each(|v| c.f64(v));
    (0..9).for_each(|_| c.f64(0.0));
    Ok(out)
}

/// The type name of `diagnostic_msgs/msg/DiagnosticArray` in rmw_zenoh keys and DDS.
pub const DIAGNOSTIC_ARRAY_TYPE_NAME: &str = "diagnostic_msgs::msg::dds_::DiagnosticArray_";

/// A `diagnostic_msgs/msg/DiagnosticArray` message, CDR little-endian with its encapsulation
/// header, stamped `stamp_ns` (ns since the Unix epoch) with an empty `frame_id`: the header,
/// then the `status` sequence (`uint32` count), each status as `level` (`uint8`), `name`,
/// `message`, `hardware_id` (strings) and `values` (`uint32` count, then `key`, `value`
/// strings), every `uint32` aligned to 4 from the body start.
///
/// # Errors
/// [`CdrError::NulInString`] for a NUL in any string; [`CdrError::DataTooLong`] for a
/// sequence or string longer than `u32::MAX`.
pub fn diagnostic_array(stamp_ns: u64, status: &[DiagnosticStatus]) -> Result<Vec<u8>, CdrError> {
    let count = |n: usize| u32::try_from(n).map_err(|_| CdrError::DataTooLong { bytes: n as u64 });
    let mut out = Vec::with_capacity(64 + 128 * status.len());
    out.extend_from_slice(&CDR_LE_HEADER);
    let mut c = Cdr(&mut out, CDR_LE_HEADER.len());
    c.i32((stamp_ns / 1_000_000_000).min(i32::MAX as u64) as i32);
    c.u32((stamp_ns % 1_000_000_000) as u32);
    c.string("")?;
    c.u32(count(status.len())?);
    for s in status {
        c.u8(s.level as u8);
        c.string(&s.name)?;
        c.string(&s.message)?;
        c.string(&s.hardware_id)?;
        c.u32(count(s.values.len())?);
        for (k, v) in &s.values {
            c.string(k)?;
            c.string(v)?;
        }
    }
    Ok(out)
}
