//! ROS 2 over zenoh, sans-IO: the `sensor_msgs/msg/PointCloud2` CDR encoding, and rmw_zenoh's
//! names (topic key expression, liveliness tokens, QoS string) and per-message attachment.
//!
//! Nothing here opens a session: a sink (MCAP recorder, zenoh publisher) lays out
//! [`PointCloud2Prefix`] + the points + [`POINTCLOUD2_SUFFIX`], and declares the key
//! expressions built here with its own transport.
//!
//! Sources:
//! - OMG DDS-XTypes 1.3, "Data Representation" (XCDR version 1, PLAIN_CDR): little-endian
//!   encapsulation identifier `CDR_LE` = `00 01` plus two option bytes `00 00`, each primitive
//!   aligned to its own size counted from the end of that 4-byte header, strings as a `uint32`
//!   length including the NUL terminator, then the bytes and the NUL, sequences as a `uint32`
//!   element count then the elements;
//! - ROS 2 `sensor_msgs/msg/PointCloud2.msg`, `sensor_msgs/msg/PointField.msg`,
//!   `std_msgs/msg/Header.msg`, `builtin_interfaces/msg/Time.msg` (common_interfaces);
//! - ros2/rmw_zenoh `docs/design.md` ("Graph Cache", "Namespaces", "Quality of Service") and
//!   `rmw_zenoh_cpp/src/detail/`: `liveliness_utils.cpp` (`TopicInfo`, `Entity`,
//!   `qos_to_keyexpr`, `mangle_name`), `qos.cpp` (the defaults), `attachment_helpers.cpp`
//!   (`AttachmentData::serialize_to_zbytes`), `rmw_node_data.cpp` and `rmw_publisher_data.cpp`
//!   (which ids go into a token, the sequence number starting at 1);
//! - zenoh `serialization.md` ("Zenoh serialization format": numbers little-endian, sequences
//!   and fixed-size arrays as a LEB128 length then the items);
//! - design.ros2.org "Topic and Service name mapping to DDS", section "ROS 2 Topic and Service
//!   Name Constraints".
#![forbid(unsafe_code)]

pub use crate::msg::{DiagnosticLevel, DiagnosticStatus};
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
struct Cdr<'a>(&'a mut Vec<u8>, usize);

impl Cdr<'_> {
    fn align(&mut self, n: usize) {
        let body = self.0.len() - self.1;
        let pad = (n - body % n) % n;
        self.0.resize(self.0.len() + pad, 0);
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.align(8);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn string(&mut self, s: &str) -> Result<(), CdrError> {
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
/// 8 from there): `orientation` x, y, z, w; `orientation_covariance` [9]; `angular_velocity`
/// x, y, z; `angular_velocity_covariance` [9]; `linear_acceleration` x, y, z;
/// `linear_acceleration_covariance` [9].
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

/// Why received bytes are not a `PointCloud2` lidarxdp can read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CdrReadError {
    /// The message ends before the field named.
    #[error("PointCloud2 message truncated at {field} (offset {offset} of {len} bytes)")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Its offset in the message.
        offset: usize,
        /// The message length.
        len: usize,
    },
    /// The encapsulation header is not `CDR_LE` (`00 01 00 00`): big-endian CDR or XCDR2.
    #[error("PointCloud2 encapsulation {0:02x?} is not little-endian XCDR1 (00 01 00 00)")]
    Encapsulation([u8; 4]),
    /// A string is not NUL-terminated UTF-8.
    #[error("PointCloud2 {0} is not a NUL-terminated UTF-8 string")]
    BadString(&'static str),
    /// `data` is not `width * height * point_step` bytes, or `row_step` disagrees.
    #[error(
        "PointCloud2 data is {data} bytes; width {width} x height {height} x point_step {point_step} disagrees"
    )]
    Shape {
        /// Bytes of `data`.
        data: usize,
        /// `width`.
        width: u32,
        /// `height`.
        height: u32,
        /// `point_step`.
        point_step: u32,
    },
}

/// A `sensor_msgs/msg/PointCloud2` read in place from little-endian CDR (the layout of
/// [`PointCloud2Prefix`]): borrowed strings and `data`, no copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointCloud2View<'a> {
    /// `header.stamp`, ns since the Unix epoch (`sec * 1e9 + nanosec`; negative seconds clamp
    /// to 0).
    pub stamp_ns: u64,
    /// `header.frame_id`.
    pub frame_id: &'a str,
    /// `height` (1 for lidarxdp's unorganised clouds).
    pub height: u32,
    /// `width`: points per row.
    pub width: u32,
    /// `fields`, each as name, byte offset, datatype code, count.
    pub fields: Vec<FieldRef<'a>>,
    /// `is_bigendian`.
    pub is_bigendian: bool,
    /// `point_step`, bytes per point.
    pub point_step: u32,
    /// `row_step`, bytes per row.
    pub row_step: u32,
    /// `data`: `width * height * point_step` bytes, starting at [`Self::data_offset`].
    pub data: &'a [u8],
    /// Offset of `data` in the message (a multiple of 4).
    pub data_offset: usize,
    /// `is_dense`.
    pub is_dense: bool,
}

struct CdrIn<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> CdrIn<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], CdrReadError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(CdrReadError::Truncated {
                field,
                offset: self.at,
                len: self.b.len(),
            });
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn align(&mut self, n: usize, field: &'static str) -> Result<(), CdrReadError> {
        let body = self.at - CDR_LE_HEADER.len();
        self.take((n - body % n) % n, field).map(|_| ())
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, CdrReadError> {
        Ok(self.take(1, field)?[0])
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, CdrReadError> {
        self.align(4, field)?;
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self, field: &'static str) -> Result<&'a str, CdrReadError> {
        let n = self.u32(field)? as usize;
        let b = self.take(n, field)?;
        match b.split_last() {
            Some((0, s)) => std::str::from_utf8(s).map_err(|_| CdrReadError::BadString(field)),
            _ => Err(CdrReadError::BadString(field)),
        }
    }
}

impl<'a> PointCloud2View<'a> {
    /// Reads a whole message (encapsulation header included), as a subscriber receives it.
    ///
    /// # Errors
    /// [`CdrReadError`]: not `CDR_LE`, truncated, a bad string, or `data` of another size than
    /// `width * height * point_step` (or `row_step * height`).
    pub fn parse(b: &'a [u8]) -> Result<Self, CdrReadError> {
        let mut r = CdrIn { b, at: 0 };
        let enc = r.take(4, "encapsulation")?;
        if enc != CDR_LE_HEADER {
            return Err(CdrReadError::Encapsulation([
                enc[0], enc[1], enc[2], enc[3],
            ]));
        }
        let sec = r.u32("header.stamp.sec")? as i32;
        let nanosec = r.u32("header.stamp.nanosec")?;
        let frame_id = r.string("header.frame_id")?;
        let height = r.u32("height")?;
        let width = r.u32("width")?;
        let n = r.u32("fields")? as usize;
        let mut fields = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let name = r.string("fields.name")?;
            let offset = r.u32("fields.offset")?;
            let datatype = r.u8("fields.datatype")?;
            let count = r.u32("fields.count")?;
            fields.push(FieldRef {
                name,
                offset,
                datatype,
                count,
            });
        }
        let is_bigendian = r.u8("is_bigendian")? != 0;
        let point_step = r.u32("point_step")?;
        let row_step = r.u32("row_step")?;
        let len = r.u32("data")? as usize;
        let data_offset = r.at;
        let data = r.take(len, "data")?;
        let is_dense = r.u8("is_dense")? != 0;
        let want = u64::from(width) * u64::from(height) * u64::from(point_step);
        if want != len as u64 || u64::from(row_step) * u64::from(height) != len as u64 {
            return Err(CdrReadError::Shape {
                data: len,
                width,
                height,
                point_step,
            });
        }
        Ok(PointCloud2View {
            stamp_ns: u64::try_from(sec).unwrap_or(0) * 1_000_000_000 + u64::from(nanosec),
            frame_id,
            height,
            width,
            fields,
            is_bigendian,
            point_step,
            row_step,
            data,
            data_offset,
            is_dense,
        })
    }
}

/// The DDS type name of `sensor_msgs/msg/PointCloud2` as rmw_zenoh puts it in key expressions
/// (`MessageTypeSupport::get_name`, rmw_zenoh `type_support_common.cpp`:
/// `<package>::msg::dds_::<Type>_`).
pub const POINTCLOUD2_TYPE_NAME: &str = "sensor_msgs::msg::dds_::PointCloud2_";

/// The RIHS01 type hash of `sensor_msgs/msg/PointCloud2` (REP 2016 "ROS Interface Hashes",
/// as printed by `rosidl_stringify_type_hash`), identical on Jazzy, Kilted and Rolling.
pub const POINTCLOUD2_TYPE_HASH_RIHS01: &str =
    "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5";

/// A ROS 2 message type as rmw_zenoh's keys and DDS name it: its DDS type name and its
/// RIHS01 type hash (REP 2016, as `rosidl_generator_c` writes it in the package's
/// `*__description.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageType {
    /// `<package>::msg::dds_::<Type>_`.
    pub name: &'static str,
    /// `RIHS01_<64 hex digits>` (Jazzy and later).
    pub rihs01: &'static str,
}

impl MessageType {
    /// The type hash string for `distro` ([`TYPE_HASH_NOT_SUPPORTED`] on Humble).
    pub fn type_hash(self, distro: Distro) -> &'static str {
        match distro {
            Distro::Humble => TYPE_HASH_NOT_SUPPORTED,
            Distro::Jazzy => self.rihs01,
        }
    }
}

/// `sensor_msgs/msg/PointCloud2`.
pub const POINTCLOUD2: MessageType = MessageType {
    name: POINTCLOUD2_TYPE_NAME,
    rihs01: POINTCLOUD2_TYPE_HASH_RIHS01,
};

/// `sensor_msgs/msg/Imu` (RIHS01 from `sensor_msgs/msg/detail/imu__functions.c`, Jazzy).
pub const IMU: MessageType = MessageType {
    name: IMU_TYPE_NAME,
    rihs01: "RIHS01_7d9a00ff131080897a5ec7e26e315954b8eae3353c3f995c55faf71574000b5b",
};

/// `diagnostic_msgs/msg/DiagnosticArray` (RIHS01 from
/// `diagnostic_msgs/msg/detail/diagnostic_array__functions.c`, Jazzy).
pub const DIAGNOSTIC_ARRAY: MessageType = MessageType {
    name: DIAGNOSTIC_ARRAY_TYPE_NAME,
    rihs01: "RIHS01_5a8a36efb05fb25070fa0fb3810290c0e6cd4862b54a8fb975a1ee8dc55a333e",
};

/// The ROS 2 topic lidarxdp publishes its sensors' health on (REP 107's diagnostics topic,
/// which Autoware's and ROS's diagnostic aggregators read).
pub const DIAGNOSTICS_TOPIC: &str = "/diagnostics";

/// The default IMU topic of sensor `name`: `/lidar/<name>/imu`.
pub fn default_imu_topic(sensor_name: &str) -> String {
    format!("/lidar/{sensor_name}/imu")
}

/// The type hash rmw_zenoh's Humble branch writes in place of a RIHS01 hash, Humble's rosidl
/// having no type hashes.
pub const TYPE_HASH_NOT_SUPPORTED: &str = "TypeHashNotSupported";

/// The ROS 2 distribution whose rmw_zenoh the names must match; it picks the type hash part of
/// the key expressions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Distro {
    /// Humble: [`TYPE_HASH_NOT_SUPPORTED`].
    Humble,
    /// Jazzy and later: [`POINTCLOUD2_TYPE_HASH_RIHS01`].
    #[default]
    Jazzy,
}

impl Distro {
    /// `humble` or `jazzy`, as the flag and the configuration file write it.
    pub fn name(self) -> &'static str {
        match self {
            Distro::Humble => "humble",
            Distro::Jazzy => "jazzy",
        }
    }

    /// The type hash string of `PointCloud2` for this distribution.
    pub fn pointcloud2_type_hash(self) -> &'static str {
        match self {
            Distro::Humble => TYPE_HASH_NOT_SUPPORTED,
            Distro::Jazzy => POINTCLOUD2_TYPE_HASH_RIHS01,
        }
    }
}

/// A name that is not a ROS 2 distribution [`Distro`] knows ([`Distro`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a ROS 2 distribution; valid: humble, jazzy (also kilted, rolling)")]
pub struct UnknownDistro {
    /// The name as given.
    pub name: String,
}

impl std::str::FromStr for Distro {
    type Err = UnknownDistro;

    /// `humble`, or `jazzy` (also `kilted` and `rolling`, which share Jazzy's RIHS01 hash of
    /// `PointCloud2`).
    ///
    /// # Errors
    /// [`UnknownDistro`] for any other text; its message lists the valid names.
    fn from_str(s: &str) -> Result<Self, UnknownDistro> {
        match s {
            "humble" => Ok(Distro::Humble),
            "jazzy" | "kilted" | "rolling" => Ok(Distro::Jazzy),
            _ => Err(UnknownDistro { name: s.to_owned() }),
        }
    }
}

/// The zenoh key expression of a `PointCloud2` topic (rmw_zenoh `liveliness_utils.cpp`,
/// `TopicInfo`): `<domain>/<topic without its leading and trailing '/'>/<type name>/<type hash>`,
/// e.g. domain 0, `/lidar/front/points`, Jazzy:
/// `0/lidar/front/points/sensor_msgs::msg::dds_::PointCloud2_/RIHS01_9198…e2b5`.
/// `topic` is expected to have passed [`validate_topic`].
pub fn topic_key_expr(domain_id: u32, topic: &str, distro: Distro) -> String {
    key_expr(domain_id, topic, POINTCLOUD2, distro)
}

/// [`topic_key_expr`] for a topic of any [`MessageType`].
pub fn key_expr(domain_id: u32, topic: &str, ty: MessageType, distro: Distro) -> String {
    let t = topic.strip_prefix('/').unwrap_or(topic);
    let t = t.strip_suffix('/').unwrap_or(t);
    format!("{domain_id}/{t}/{}/{}", ty.name, ty.type_hash(distro))
}

/// rmw_zenoh's escaping of a name put in one chunk of a liveliness key expression
/// (`liveliness_utils.cpp`, `mangle_name`): every `/` becomes `%`, nothing else changes
/// (`/` → `%`, `/lidar/front/points` → `%lidar%front%points`).
pub fn mangle_name(name: &str) -> String {
    name.replace('/', "%")
}

/// ROS 2 over DDS (rmw_cyclonedds_cpp, rmw_fastrtps_cpp, rmw_dds_common; Jazzy branches):
/// the names, USER_DATA strings and the graph message a DDS sink announces itself with.
///
/// - topic: `rt` + the fully qualified ROS name (design.ros2.org "Topic and Service name
///   mapping to DDS": prefix `rt` for topics; rmw_cyclonedds `make_fqtopic(ROS_TOPIC_PREFIX,
///   ...)`), e.g. `/lidar/front/points` → `rt/lidar/front/points`;
/// - type: [`POINTCLOUD2_TYPE_NAME`];
/// - participant USER_DATA: `enclave=<enclave>;` (rmw_cyclonedds `rmw_node.cpp`,
///   `rmw_context_impl_s::init`; rmw_fastrtps `participant.cpp`, `create_participant`);
/// - endpoint USER_DATA on Jazzy and later: `typehash=<RIHS01 string>;` (rmw_dds_common
///   `qos.cpp`, `encode_type_hash_for_user_data_qos`); Humble's RMWs put none;
/// - the graph: `rmw_dds_common/msg/ParticipantEntitiesInfo` on topic `ros_discovery_info`
///   (reliable, transient local, keep last 1: rmw_cyclonedds `rmw_node.cpp`, the
///   `pubsub_qos` of `common.pub`), whose GIDs are DDS GUIDs (16 bytes; rmw_cyclonedds
///   `convert_guid_to_gid`, rmw_fastrtps `copy_from_fastrtps_guid_to_byte_array`).
pub mod dds {
    use super::{CDR_LE_HEADER, Cdr, CdrError, Distro};

    /// The DDS topic of the ROS graph (rmw_dds_common `graph_cache.hpp`; rmw_cyclonedds and
    /// rmw_fastrtps create it under this exact name, outside the `rt` prefix).
    pub const ROS_DISCOVERY_INFO_TOPIC: &str = "ros_discovery_info";

    /// The DDS type name of `rmw_dds_common/msg/ParticipantEntitiesInfo`.
    pub const PARTICIPANT_ENTITIES_INFO_TYPE_NAME: &str =
        "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_";

    /// The RIHS01 type hash of `rmw_dds_common/msg/ParticipantEntitiesInfo` on Jazzy (REP 2011
    /// "Type description distribution": SHA-256 of the type description JSON with its
    /// referenced types `rmw_dds_common/msg/Gid` (`uint8[16] data`, msg `char` being `uint8`)
    /// and `NodeEntitiesInfo` (`string<=256`, two `Gid[]`), as `rosidl_generator_type_description`
    /// serialises it; the same computation gives [`super::POINTCLOUD2_TYPE_HASH_RIHS01`] for
    /// `PointCloud2`, and zenoh's ROS 2/DDS bridge announces this value).
    pub const PARTICIPANT_ENTITIES_INFO_TYPE_HASH_RIHS01: &str =
        "RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e";

    /// Longest node name and namespace `NodeEntitiesInfo` carries (`string<=256`).
    pub const MAX_NODE_NAME: usize = 256;

    /// The DDS topic name of a ROS topic: `rt` + `topic` (`/lidar/front/points` →
    /// `rt/lidar/front/points`). `topic` is expected to have passed
    /// [`super::validate_topic`], so it starts with `/`.
    pub fn topic_name(topic: &str) -> String {
        format!("rt{topic}")
    }

    /// The participant's USER_DATA: `enclave=<enclave>;` (e.g. `enclave=/;`).
    pub fn participant_user_data(enclave: &str) -> String {
        format!("enclave={enclave};")
    }

    /// An endpoint's USER_DATA for a type whose RIHS01 hash is `hash`: `typehash=<hash>;` on
    /// Jazzy and later, `None` on Humble (whose RMWs send no USER_DATA on endpoints).
    pub fn endpoint_user_data(distro: Distro, hash: &str) -> Option<String> {
        match distro {
            Distro::Humble => None,
            Distro::Jazzy => Some(format!("typehash={hash};")),
        }
    }

    /// Bytes of a GID in `rmw_dds_common/msg/Gid`: `char[16] data` on Jazzy and later,
    /// `char[24] data` on Humble (the DDS GUID's 16 bytes, then zeros).
    pub fn gid_len(distro: Distro) -> usize {
        match distro {
            Distro::Humble => 24,
            Distro::Jazzy => 16,
        }
    }

    /// One `rmw_dds_common/msg/NodeEntitiesInfo`: a node and the GUIDs of its DDS readers
    /// and writers.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NodeEntities<'a> {
        /// `node_namespace`, e.g. `/`, at most [`MAX_NODE_NAME`] bytes.
        pub namespace: &'a str,
        /// `node_name`, e.g. `lidarxdp`, at most [`MAX_NODE_NAME`] bytes.
        pub name: &'a str,
        /// `reader_gid_seq`: DDS GUIDs of the node's readers (16 bytes each).
        pub readers: &'a [[u8; 16]],
        /// `writer_gid_seq`: DDS GUIDs of the node's writers.
        pub writers: &'a [[u8; 16]],
    }

    /// XCDR1 little-endian `rmw_dds_common/msg/ParticipantEntitiesInfo` (`Gid gid`,
    /// `NodeEntitiesInfo[] node_entities_info_seq`), with GIDs of [`gid_len`] bytes for
    /// `distro`: the encapsulation header, the participant GUID `gid` (zero-padded on Humble),
    /// the node count, then per node its namespace and name (CDR strings), and its reader and
    /// writer GID sequences (`uint32` count, then the GIDs; `char` arrays need no alignment).
    ///
    /// # Errors
    /// [`CdrError::NulInString`] for a name with a NUL byte; [`CdrError::DataTooLong`] for a
    /// name over [`MAX_NODE_NAME`] bytes (`bytes` is its length).
    pub fn participant_entities_info(
        gid: &[u8; 16],
        nodes: &[NodeEntities<'_>],
        distro: Distro,
    ) -> Result<Vec<u8>, CdrError> {
        let pad = gid_len(distro) - 16;
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&CDR_LE_HEADER);
        let mut c = Cdr(&mut out, CDR_LE_HEADER.len());
        fn gid_out(c: &mut Cdr<'_>, g: &[u8; 16], pad: usize) {
            c.0.extend_from_slice(g);
            c.0.resize(c.0.len() + pad, 0);
        }
        gid_out(&mut c, gid, pad);
        c.u32(nodes.len() as u32);
        for n in nodes {
            for s in [n.namespace, n.name] {
                if s.len() > MAX_NODE_NAME {
                    return Err(CdrError::DataTooLong {
                        bytes: s.len() as u64,
                    });
                }
                c.string(s)?;
            }
            for seq in [n.readers, n.writers] {
                c.u32(seq.len() as u32);
                for g in seq {
                    gid_out(&mut c, g, pad);
                }
            }
        }
        Ok(out)
    }
}

/// QoS reliability (`rmw/types.h`, `rmw_qos_reliability_policy_e`; the number is the one
/// rmw_zenoh prints).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reliability {
    /// `RMW_QOS_POLICY_RELIABILITY_RELIABLE` = 1 (rmw_zenoh's default).
    Reliable = 1,
    /// `RMW_QOS_POLICY_RELIABILITY_BEST_EFFORT` = 2.
    BestEffort = 2,
}

/// QoS durability (`rmw/types.h`, `rmw_qos_durability_policy_e`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `RMW_QOS_POLICY_DURABILITY_TRANSIENT_LOCAL` = 1.
    TransientLocal = 1,
    /// `RMW_QOS_POLICY_DURABILITY_VOLATILE` = 2 (rmw_zenoh's default).
    Volatile = 2,
}

/// QoS history (`rmw/types.h`, `rmw_qos_history_policy_e`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    /// `RMW_QOS_POLICY_HISTORY_KEEP_LAST` = 1 (rmw_zenoh's default).
    KeepLast = 1,
    /// `RMW_QOS_POLICY_HISTORY_KEEP_ALL` = 2.
    KeepAll = 2,
}

/// The QoS of a publisher as its liveliness token advertises it. Deadline, lifespan and
/// liveliness are rmw_zenoh's defaults (infinite, infinite, automatic with an infinite lease),
/// which it leaves empty in the string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qos {
    /// Reliability.
    pub reliability: Reliability,
    /// Durability.
    pub durability: Durability,
    /// History kind.
    pub history: History,
    /// History depth (samples).
    pub depth: u32,
}

/// rmw_zenoh's default depth (`qos.cpp`, `RMW_ZENOH_DEFAULT_HISTORY_DEPTH` = 42), left empty
/// in the QoS string when equal.
pub const RMW_ZENOH_DEFAULT_DEPTH: u32 = 42;

impl Qos {
    /// `/diagnostics`: reliable, volatile, keep last 10 (a best-effort publisher would match
    /// no reliable subscriber under DDS, and `diagnostic_aggregator` subscribes reliably),
    /// string `::,10:,:,:,,`.
    pub const DIAGNOSTICS: Qos = Qos {
        reliability: Reliability::Reliable,
        durability: Durability::Volatile,
        history: History::KeepLast,
        depth: 10,
    };

    /// lidarxdp's point cloud QoS: best effort, volatile, keep last 5 (a slow subscriber loses
    /// frames rather than stalling the publisher), string `2::,5:,:,:,,`.
    pub const LIDAR: Qos = Qos {
        reliability: Reliability::BestEffort,
        durability: Durability::Volatile,
        history: History::KeepLast,
        depth: 5,
    };

    /// The QoS chunk of a liveliness token (rmw_zenoh `liveliness_utils.cpp`,
    /// `qos_to_keyexpr`): `<reliability>:<durability>:<history>,<depth>:<deadline s>,<ns>:
    /// <lifespan s>,<ns>:<liveliness>,<lease s>,<ns>`, each value written as its decimal
    /// number only when it differs from rmw_zenoh's default (`qos.cpp`: reliable, volatile,
    /// keep last, depth 42, the rest infinite/automatic), else left empty. [`Qos::LIDAR`] is
    /// `2::,5:,:,:,,`.
    pub fn key_chunk(&self) -> String {
        let opt = |differs: bool, v: u32| {
            if differs {
                v.to_string()
            } else {
                String::new()
            }
        };
        format!(
            "{}:{}:{},{}:,:,:,,",
            opt(
                self.reliability != Reliability::Reliable,
                self.reliability as u32
            ),
            opt(
                self.durability != Durability::Volatile,
                self.durability as u32
            ),
            opt(self.history != History::KeepLast, self.history as u32),
            opt(self.depth != RMW_ZENOH_DEFAULT_DEPTH, self.depth),
        )
    }
}

/// The admin space prefix of every rmw_zenoh liveliness token (`liveliness_utils.cpp`,
/// `ADMIN_SPACE`).
pub const ADMIN_SPACE: &str = "@ros2_lv";

/// The ROS 2 node that owns lidarxdp's publishers, as its liveliness tokens name it.
///
/// Token chunks (rmw_zenoh `liveliness_utils.cpp`, `KeyexprIndex` and `Entity::Entity`):
/// `@ros2_lv/<domain>/<zid>/<nid>/<eid>/<kind>/<enclave>/<namespace>/<node name>` for a node
/// (`NN`, `eid` = `nid`, `rmw_node_data.cpp`), followed by
/// `/<topic>/<type name>/<type hash>/<qos>` for a publisher (`MP`, `eid` = the publisher's
/// id within the session, `rmw_publisher_data.cpp`); enclave, namespace, node name, topic,
/// type and hash pass through [`mangle_name`]. `zid` is the zenoh session id as the session
/// prints it (`Entity::make` takes `zenoh::Id::to_string`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeTokens<'a> {
    /// ROS domain id (`ROS_DOMAIN_ID`).
    pub domain_id: u32,
    /// The zenoh session id string.
    pub zid: &'a str,
    /// The node's id, unique among the entities of the session (rmw_zenoh's `nid`).
    pub node_id: u64,
    /// Security enclave, `/` by default.
    pub enclave: &'a str,
    /// Node namespace, `/` for the root namespace.
    pub namespace: &'a str,
    /// Node name, e.g. `lidarxdp`.
    pub name: &'a str,
}

impl NodeTokens<'_> {
    fn head(&self, eid: u64, kind: &str) -> String {
        format!(
            "{ADMIN_SPACE}/{}/{}/{}/{eid}/{kind}/{}/{}/{}",
            self.domain_id,
            self.zid,
            self.node_id,
            mangle_name(self.enclave),
            mangle_name(self.namespace),
            mangle_name(self.name),
        )
    }

    /// The node's token (`NN`), e.g.
    /// `@ros2_lv/0/<zid>/0/0/NN/%/%/lidarxdp`.
    pub fn node(&self) -> String {
        self.head(self.node_id, "NN")
    }

    /// The token of this node's `PointCloud2` publisher `publisher_id` on `topic` (`MP`), e.g.
    /// `@ros2_lv/0/<zid>/0/1/MP/%/%/lidarxdp/%lidar%front%points/sensor_msgs::msg::dds_::PointCloud2_/RIHS01_…/2::,5:,:,:,,`.
    pub fn publisher(&self, publisher_id: u64, topic: &str, distro: Distro, qos: &Qos) -> String {
        self.publisher_of(publisher_id, topic, POINTCLOUD2, distro, qos)
    }

    /// [`Self::publisher`] for a topic of any [`MessageType`].
    pub fn publisher_of(
        &self,
        publisher_id: u64,
        topic: &str,
        ty: MessageType,
        distro: Distro,
        qos: &Qos,
    ) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.head(publisher_id, "MP"),
            mangle_name(topic),
            mangle_name(ty.name),
            mangle_name(ty.type_hash(distro)),
            qos.key_chunk()
        )
    }
}

/// The attachment rmw_zenoh puts on every published sample (`attachment_helpers.cpp`,
/// `AttachmentData::serialize_to_zbytes`, in zenoh's serialization format): 33 bytes,
/// `sequence_number` `i64` little-endian at 0 (rmw_zenoh starts at 1, +1 per message),
/// `source_timestamp` `i64` little-endian at 8 (ns since the Unix epoch), the LEB128 length 16
/// (`0x10`) at 16 (zenoh serialises a fixed-size array as a sequence), the 16-byte publisher
/// GID at 17.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// Per-publisher message counter.
    pub sequence_number: i64,
    /// Publication time, ns since the Unix epoch.
    pub source_timestamp_ns: i64,
    /// The publisher's GID (`RMW_GID_STORAGE_SIZE` = 16 bytes). rmw_zenoh derives it as the
    /// XXH3-128 hash of the publisher's liveliness key (low 64 bits then high 64 bits, each
    /// little-endian); subscribers only compare it, so any stable unique 16 bytes serve.
    pub gid: [u8; 16],
}

/// Encoded length of an [`Attachment`].
pub const ATTACHMENT_LEN: usize = 33;

impl Attachment {
    /// The 33 attachment bytes.
    pub fn encode(&self) -> [u8; ATTACHMENT_LEN] {
        let mut b = [0u8; ATTACHMENT_LEN];
        b[0..8].copy_from_slice(&self.sequence_number.to_le_bytes());
        b[8..16].copy_from_slice(&self.source_timestamp_ns.to_le_bytes());
        b[16] = 16;
        b[17..33].copy_from_slice(&self.gid);
        b
    }

    /// Parses attachment bytes; `None` unless they are exactly 33 bytes with `0x10` at 16.
    pub fn decode(b: &[u8]) -> Option<Attachment> {
        if b.len() != ATTACHMENT_LEN || b[16] != 16 {
            return None;
        }
        Some(Attachment {
            sequence_number: i64::from_le_bytes(b[0..8].try_into().ok()?),
            source_timestamp_ns: i64::from_le_bytes(b[8..16].try_into().ok()?),
            gid: b[17..33].try_into().ok()?,
        })
    }
}

/// The default topic of a sensor: `/lidar/<sensor name>/points`. Check it with
/// [`validate_topic`]: a sensor name that is not a valid ROS 2 name token makes it invalid.
pub fn default_topic(sensor_name: &str) -> String {
    format!("/lidar/{sensor_name}/points")
}

/// The default `header.frame_id` of a sensor: its name.
pub fn default_frame_id(sensor_name: &str) -> String {
    sensor_name.to_owned()
}

/// Largest ROS domain id (`--ros-domain-id`, `ROS_DOMAIN_ID`): ROS 2 "The ROS_DOMAIN_ID"
/// concept page gives 0..=232 as the range every RMW accepts.
pub const MAX_ROS_DOMAIN_ID: u32 = 232;

/// A ROS domain id that is not a number or is out of 0..=[`MAX_ROS_DOMAIN_ID`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DomainIdError {
    /// `ROS_DOMAIN_ID` is not a decimal number.
    #[error(
        "ROS_DOMAIN_ID: {0:?} is not a number; valid 0..={MAX_ROS_DOMAIN_ID} (or pass --ros-domain-id)"
    )]
    NotANumber(String),
    /// The id is over [`MAX_ROS_DOMAIN_ID`].
    #[error("{from}: {id} is out of range; valid 0..={MAX_ROS_DOMAIN_ID}")]
    OutOfRange {
        /// Where it came from: `--ros-domain-id` or `ROS_DOMAIN_ID`.
        from: &'static str,
        /// The id given.
        id: u32,
    },
}

/// The ROS domain id: `flag` (`--ros-domain-id`) when given, else the `ROS_DOMAIN_ID`
/// environment value `env` (blank counts as unset), else 0.
///
/// # Errors
/// [`DomainIdError`] naming the source (`--ros-domain-id` or `ROS_DOMAIN_ID`) with its value
/// and the valid range 0..=[`MAX_ROS_DOMAIN_ID`]: not a number, or out of range.
pub fn domain_id(flag: Option<u32>, env: Option<&str>) -> Result<u32, DomainIdError> {
    let env = env.map(str::trim).filter(|v| !v.is_empty());
    let (id, from) = match (flag, env) {
        (Some(d), _) => (d, "--ros-domain-id"),
        (None, Some(v)) => (
            v.parse::<u32>()
                .map_err(|_| DomainIdError::NotANumber(v.to_owned()))?,
            "ROS_DOMAIN_ID",
        ),
        (None, None) => (0, "ROS_DOMAIN_ID"),
    };
    if id > MAX_ROS_DOMAIN_ID {
        return Err(DomainIdError::OutOfRange { from, id });
    }
    Ok(id)
}

/// A topic name that breaks a ROS 2 name rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field} = {name:?}: {rule} (ROS 2 \"Topic and Service name mapping to DDS\", name constraints)"
)]
pub struct NameError {
    /// The configuration field or flag that holds the name, e.g. `sensors.front.topic`.
    pub field: String,
    /// The offending name.
    pub name: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

/// Checks that `topic` is a fully qualified ROS 2 topic name (design.ros2.org "Topic and
/// Service name mapping to DDS", "ROS 2 Topic and Service Name Constraints", with the
/// substitutions `~` and `{}` refused, the daemon having no node namespace to expand them
/// against): it starts with `/`, holds only `A-Z a-z 0-9 _ /`, no token (text between
/// slashes) starts with a digit, it has no `//` and no `__`, and it does not end with `/`.
///
/// # Errors
/// [`NameError`] naming `field`, the topic and the first rule broken.
pub fn validate_topic(field: &str, topic: &str) -> Result<(), NameError> {
    let err = |rule| {
        Err(NameError {
            field: field.to_owned(),
            name: topic.to_owned(),
            rule,
        })
    };
    if topic.is_empty() {
        return err("must not be empty");
    }
    if !topic.starts_with('/') {
        return err("must be fully qualified: start with '/'");
    }
    if topic
        .chars()
        .any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '/'))
    {
        return err("may contain only alphanumerics, '_' and '/'");
    }
    if topic.contains("//") {
        return err("must not contain repeated '/'");
    }
    if topic.contains("__") {
        return err("must not contain repeated '_'");
    }
    if topic.ends_with('/') {
        return err("must not end with '/'");
    }
    if topic[1..]
        .split('/')
        .any(|t| t.starts_with(|c: char| c.is_ascii_digit()))
    {
        return err("no token (text between '/') may start with a digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    /// A DiagnosticArray of one status with one key/value, byte for byte.
    #[test]
    fn diagnostic_array_layout() {
        let m = diagnostic_array(
            2_000_000_005,
            &[DiagnosticStatus {
                level: DiagnosticLevel::Warn,
                name: "lidarxdp: f".into(),
                message: "loss".into(),
                hardware_id: "".into(),
                values: vec![("k".into(), "vv".into())],
            }],
        )
        .unwrap();
        let mut want = CDR_LE_HEADER.to_vec();
        want.extend_from_slice(&2i32.to_le_bytes());
        want.extend_from_slice(&5u32.to_le_bytes());
        want.extend_from_slice(&[1, 0, 0, 0, 0]); // frame_id "" (length 1: the NUL)
        want.extend_from_slice(&[0, 0, 0]); // pad to 4 (body offset 12)
        want.extend_from_slice(&1u32.to_le_bytes()); // one status
        want.push(1); // WARN
        want.extend_from_slice(&[0, 0, 0]); // pad (body 17 -> 20)
        want.extend_from_slice(&12u32.to_le_bytes());
        want.extend_from_slice(b"lidarxdp: f\0");
        want.extend_from_slice(&5u32.to_le_bytes());
        want.extend_from_slice(b"loss\0");
        want.extend_from_slice(&[0, 0, 0]); // pad (body 41 -> 44)
        want.extend_from_slice(&1u32.to_le_bytes());
        want.push(0); // hardware_id ""
        want.extend_from_slice(&[0, 0, 0]); // pad (body 49 -> 52)
        want.extend_from_slice(&1u32.to_le_bytes()); // one key/value
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(b"k\0");
        want.extend_from_slice(&[0, 0]); // pad (body 62 -> 64)
        want.extend_from_slice(&3u32.to_le_bytes());
        want.extend_from_slice(b"vv\0");
        assert_eq!(m, want);
    }

    /// The Imu message's fields at their CDR offsets: the header as PointCloud2's, then
    /// float64s aligned to 8 from the body start.
    #[test]
    fn imu_message_layout() {
        let m = imu_message(
            1_700_000_000_250_000_000,
            "os_imu",
            [0.1, 0.2, 0.3],
            [1.0, 2.0, 9.5],
        )
        .unwrap();
        assert_eq!(&m[..4], &CDR_LE_HEADER);
        assert_eq!(
            i32::from_le_bytes(m[4..8].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(
            u32::from_le_bytes(m[8..12].try_into().unwrap()),
            250_000_000
        );
        assert_eq!(u32::from_le_bytes(m[12..16].try_into().unwrap()), 7);
        assert_eq!(&m[16..23], b"os_imu\0");
        // Body offset 19 is the string's end; the first float64 is at body 24 (message 28).
        let f = |i: usize| f64::from_le_bytes(m[28 + 8 * i..36 + 8 * i].try_into().unwrap());
        assert_eq!([f(0), f(1), f(2), f(3)], [0.0, 0.0, 0.0, 1.0]);
        assert_eq!(f(4), -1.0, "orientation unknown");
        assert_eq!([f(13), f(14), f(15)], [0.1, 0.2, 0.3]);
        assert_eq!([f(25), f(26), f(27)], [1.0, 2.0, 9.5]);
        assert_eq!(m.len(), 28 + 8 * 37);
        assert!(matches!(
            imu_message(0, "a\0b", [0.0; 3], [0.0; 3]),
            Err(CdrError::NulInString(_))
        ));
    }

    /// The flag wins over `ROS_DOMAIN_ID`, a blank variable is unset, and each refusal names
    /// its source, the value and the valid range.
    #[test]
    fn domain_id_sources_and_refusals() {
        use super::{DomainIdError, domain_id};
        assert_eq!(domain_id(None, None), Ok(0));
        assert_eq!(domain_id(None, Some(" 7 ")), Ok(7));
        assert_eq!(domain_id(None, Some("  ")), Ok(0));
        assert_eq!(domain_id(Some(3), Some("x")), Ok(3));
        assert_eq!(domain_id(Some(232), None), Ok(232));
        let e = domain_id(None, Some("x")).unwrap_err();
        assert_eq!(e, DomainIdError::NotANumber("x".into()));
        assert_eq!(
            e.to_string(),
            "ROS_DOMAIN_ID: \"x\" is not a number; valid 0..=232 (or pass --ros-domain-id)"
        );
        assert_eq!(
            domain_id(Some(233), None).unwrap_err().to_string(),
            "--ros-domain-id: 233 is out of range; valid 0..=232"
        );
        assert_eq!(
            domain_id(None, Some("300")).unwrap_err().to_string(),
            "ROS_DOMAIN_ID: 300 is out of range; valid 0..=232"
        );
    }

    /// `ParticipantEntitiesInfo` byte for byte, written out from the XCDR1 rules: GID (16
    /// bytes on Jazzy), node count, the strings with their NUL and padding to 4, the GID
    /// sequences; on Humble every GID is 24 bytes.
    #[test]
    fn participant_entities_info_is_xcdr1_le() {
        use dds::{NodeEntities, participant_entities_info};
        let p = [0x11u8; 16];
        let w = [0x22u8; 16];
        let b = participant_entities_info(
            &p,
            &[NodeEntities {
                namespace: "/",
                name: "lidarxdp",
                readers: &[],
                writers: &[w],
            }],
            Distro::Jazzy,
        )
        .unwrap();
        let mut want = vec![0, 1, 0, 0];
        want.extend_from_slice(&p);
        want.extend_from_slice(&1u32.to_le_bytes()); // one node
        want.extend_from_slice(&2u32.to_le_bytes()); // "/" + NUL
        want.extend_from_slice(b"/\0\0\0"); // padded to 4
        want.extend_from_slice(&9u32.to_le_bytes());
        want.extend_from_slice(b"lidarxdp\0\0\0\0"); // 9 bytes, padded to 12
        want.extend_from_slice(&0u32.to_le_bytes()); // no reader
        want.extend_from_slice(&1u32.to_le_bytes()); // one writer
        want.extend_from_slice(&w);
        assert_eq!(b, want);
        let h = participant_entities_info(&p, &[], Distro::Humble).unwrap();
        let mut want = vec![0, 1, 0, 0];
        want.extend_from_slice(&p);
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(h, want);
        let long = "n".repeat(257);
        assert_eq!(
            participant_entities_info(
                &p,
                &[NodeEntities {
                    namespace: "/",
                    name: &long,
                    readers: &[],
                    writers: &[],
                }],
                Distro::Jazzy
            ),
            Err(CdrError::DataTooLong { bytes: 257 })
        );
    }

    /// The DDS names and USER_DATA strings as rmw_cyclonedds and rmw_fastrtps write them.
    #[test]
    fn dds_names_and_user_data() {
        assert_eq!(
            dds::topic_name("/lidar/front/points"),
            "rt/lidar/front/points"
        );
        assert_eq!(dds::participant_user_data("/"), "enclave=/;");
        assert_eq!(
            dds::endpoint_user_data(Distro::Jazzy, POINTCLOUD2_TYPE_HASH_RIHS01).as_deref(),
            Some(
                "typehash=RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5;"
            )
        );
        assert_eq!(dds::endpoint_user_data(Distro::Humble, "x"), None);
    }
    use super::*;
    use crate::point::POINT_FIELDS;

    #[test]
    fn prefix_bytes_of_a_two_field_cloud() {
        let fields = [
            FieldRef {
                name: "x",
                offset: 0,
                datatype: 7,
                count: 1,
            },
            FieldRef {
                name: "intensity",
                offset: 4,
                datatype: 2,
                count: 1,
            },
        ];
        let p = PointCloud2Prefix::new(3_000_000_007, "ab", fields, 5, 3).unwrap();
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[0, 1, 0, 0][..],
            &[3, 0, 0, 0], &[7, 0, 0, 0],             // stamp 3 s, 7 ns
            &[3, 0, 0, 0], b"ab\0", &[0],             // frame_id "ab", pad to 4
            &[1, 0, 0, 0], &[3, 0, 0, 0],             // height 1, width 3
            &[2, 0, 0, 0],                            // 2 fields
            &[2, 0, 0, 0], b"x\0", &[0, 0],           // "x", pad
            &[0, 0, 0, 0], &[7], &[0, 0, 0], &[1, 0, 0, 0], // offset 0, FLOAT32, pad, count 1
            &[10, 0, 0, 0], b"intensity\0", &[0, 0],  // "intensity", pad
            &[4, 0, 0, 0], &[2], &[0, 0, 0], &[1, 0, 0, 0], // offset 4, UINT8, pad, count 1
            &[0], &[0, 0, 0],                         // is_bigendian, pad
            &[5, 0, 0, 0], &[15, 0, 0, 0], &[15, 0, 0, 0], // point_step, row_step, data len
        ]
        .concat();
        assert_eq!(p.as_bytes(), &want[..]);
        assert_eq!((p.len(), p.data_len(), p.message_len()), (96, 15, 112));
        let data: Vec<u8> = (0..15).collect();
        let mut msg = vec![0xaa];
        p.write_message(&data, &mut msg).unwrap();
        assert_eq!(msg.len(), 113);
        assert_eq!(&msg[1..97], &want[..]);
        assert_eq!(&msg[97..112], &data[..]);
        assert_eq!(msg[112], 1); // is_dense
    }

    #[test]
    fn view_reads_back_what_the_prefix_wrote_and_refuses_damage() {
        let p = PointCloud2Prefix::new(
            3_000_000_007,
            "front",
            POINT_FIELDS.iter().map(FieldRef::from),
            32,
            2,
        )
        .unwrap();
        let data: Vec<u8> = (0..64).collect();
        let mut msg = Vec::new();
        p.write_message(&data, &mut msg).unwrap();
        let v = PointCloud2View::parse(&msg).unwrap();
        assert_eq!(v.stamp_ns, 3_000_000_007);
        assert_eq!(v.frame_id, "front");
        assert_eq!(
            (v.height, v.width, v.point_step, v.row_step),
            (1, 2, 32, 64)
        );
        assert_eq!(v.fields.len(), POINT_FIELDS.len());
        assert_eq!(v.fields[0], FieldRef::from(&POINT_FIELDS[0]));
        assert_eq!(v.data, &data[..]);
        assert_eq!(v.data_offset, p.len());
        assert_eq!(v.data_offset % 4, 0);
        assert!(!v.is_bigendian && v.is_dense);
        // Every truncation is an error, never a panic.
        for cut in 0..msg.len() {
            assert!(PointCloud2View::parse(&msg[..cut]).is_err(), "cut {cut}");
        }
        let mut be = msg.clone();
        be[1] = 0;
        assert_eq!(
            PointCloud2View::parse(&be),
            Err(CdrReadError::Encapsulation([0, 0, 0, 0]))
        );
        // width 3 with 64 bytes of data.
        let mut wide = msg.clone();
        let w = 4 + 8 + 4 + 6 + 2 + 4; // encapsulation, stamp, len, "front\0", pad, height
        assert_eq!(&wide[w..w + 4], &2u32.to_le_bytes());
        wide[w] = 3;
        assert_eq!(
            PointCloud2View::parse(&wide),
            Err(CdrReadError::Shape {
                data: 64,
                width: 3,
                height: 1,
                point_step: 32
            })
        );
    }

    #[test]
    fn write_into_fills_an_exact_buffer_and_refuses_other_lengths() {
        let p =
            PointCloud2Prefix::new(5, "f", POINT_FIELDS.iter().map(FieldRef::from), 32, 1).unwrap();
        let data = [7u8; 32];
        let mut via_vec = Vec::new();
        p.write_message(&data, &mut via_vec).unwrap();
        let mut out = vec![0u8; p.message_len()];
        p.write_into(&data, &mut out).unwrap();
        assert_eq!(out, via_vec);
        let mut short = vec![0u8; p.message_len() - 1];
        assert_eq!(
            p.write_into(&data, &mut short),
            Err(CdrError::DataLength {
                want: p.message_len(),
                got: p.message_len() - 1
            })
        );
        assert!(short.iter().all(|&b| b == 0));
        assert_eq!(
            p.write_into(&data[..31], &mut out),
            Err(CdrError::DataLength { want: 32, got: 31 })
        );
    }

    #[test]
    fn prefix_of_the_full_point_is_32_byte_steps() {
        let p = PointCloud2Prefix::new(1, "front", POINT_FIELDS.iter().map(FieldRef::from), 32, 2)
            .unwrap();
        let b = p.as_bytes();
        assert_eq!(&b[b.len() - 12..], &[32, 0, 0, 0, 64, 0, 0, 0, 64, 0, 0, 0]);
        assert_eq!(&b[4..12], &[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(p.data_len(), 64);
    }

    #[test]
    fn prefix_errors() {
        let none: [FieldRef; 0] = [];
        assert_eq!(
            PointCloud2Prefix::new(0, "f", none, 65536, 65536),
            Err(CdrError::DataTooLong { bytes: 1 << 32 })
        );
        assert_eq!(
            PointCloud2Prefix::new(0, "a\0b", none, 1, 1),
            Err(CdrError::NulInString("a\0b".into()))
        );
        let p = PointCloud2Prefix::new(0, "f", none, 4, 2).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            p.write_message(&[0; 7], &mut out),
            Err(CdrError::DataLength { want: 8, got: 7 })
        );
        assert!(out.is_empty());
    }

    #[test]
    fn stamp_seconds_saturate() {
        let p = PointCloud2Prefix::new(u64::MAX, "", [], 0, 0).unwrap();
        assert_eq!(&p.as_bytes()[4..8], &i32::MAX.to_le_bytes());
        assert_eq!(&p.as_bytes()[8..12], &709_551_615u32.to_le_bytes());
    }

    #[test]
    fn topic_key_expressions() {
        assert_eq!(
            topic_key_expr(0, "/lidar/front/points", Distro::Jazzy),
            "0/lidar/front/points/sensor_msgs::msg::dds_::PointCloud2_/\
             RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5"
        );
        assert_eq!(
            topic_key_expr(42, "/points", Distro::Humble),
            "42/points/sensor_msgs::msg::dds_::PointCloud2_/TypeHashNotSupported"
        );
    }

    #[test]
    fn qos_chunks() {
        assert_eq!(Qos::LIDAR.key_chunk(), "2::,5:,:,:,,");
        let default = Qos {
            reliability: Reliability::Reliable,
            durability: Durability::Volatile,
            history: History::KeepLast,
            depth: 42,
        };
        assert_eq!(default.key_chunk(), "::,:,:,:,,");
        let other = Qos {
            reliability: Reliability::Reliable,
            durability: Durability::TransientLocal,
            history: History::KeepAll,
            depth: 10,
        };
        assert_eq!(other.key_chunk(), ":1:2,10:,:,:,,");
    }

    #[test]
    fn liveliness_tokens() {
        let n = NodeTokens {
            domain_id: 7,
            zid: "a1b2c3d4e5f60718293a4b5c6d7e8f90",
            node_id: 0,
            enclave: "/",
            namespace: "/",
            name: "lidarxdp",
        };
        assert_eq!(
            n.node(),
            "@ros2_lv/7/a1b2c3d4e5f60718293a4b5c6d7e8f90/0/0/NN/%/%/lidarxdp"
        );
        assert_eq!(
            n.publisher(1, "/lidar/front/points", Distro::Jazzy, &Qos::LIDAR),
            "@ros2_lv/7/a1b2c3d4e5f60718293a4b5c6d7e8f90/0/1/MP/%/%/lidarxdp/\
             %lidar%front%points/sensor_msgs::msg::dds_::PointCloud2_/\
             RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5/2::,5:,:,:,,"
        );
        let ns = NodeTokens {
            namespace: "/robot/sensing",
            ..n
        };
        assert_eq!(
            ns.publisher(3, "/points", Distro::Humble, &Qos::LIDAR),
            "@ros2_lv/7/a1b2c3d4e5f60718293a4b5c6d7e8f90/0/3/MP/%/%robot%sensing/lidarxdp/\
             %points/sensor_msgs::msg::dds_::PointCloud2_/TypeHashNotSupported/2::,5:,:,:,,"
        );
    }

    #[test]
    fn attachment_bytes() {
        let a = Attachment {
            sequence_number: 1,
            source_timestamp_ns: 1_700_000_000_123_456_789,
            gid: core::array::from_fn(|i| 0xf0 + i as u8),
        };
        let b = a.encode();
        #[rustfmt::skip]
        let want: [u8; 33] = [
            1, 0, 0, 0, 0, 0, 0, 0,
            0x15, 0xcd, 0x85, 0x3d, 0xfe, 0x9c, 0x97, 0x17, // 1_700_000_000_123_456_789 LE
            0x10,
            0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,
            0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
        ];
        assert_eq!(b, want);
        assert_eq!(Attachment::decode(&b), Some(a));
        assert_eq!(Attachment::decode(&b[..32]), None);
        let mut bad = b;
        bad[16] = 17;
        assert_eq!(Attachment::decode(&bad), None);
    }

    #[test]
    fn defaults_and_topic_rules() {
        assert_eq!(default_topic("front"), "/lidar/front/points");
        assert_eq!(default_frame_id("front"), "front");
        assert_eq!(validate_topic("topic", "/lidar/front/points"), Ok(()));
        assert_eq!(validate_topic("topic", "/a_b/C9"), Ok(()));
        let rule = |t: &str| validate_topic("sensors.front.topic", t).unwrap_err().rule;
        assert_eq!(rule(""), "must not be empty");
        assert_eq!(
            rule("lidar/points"),
            "must be fully qualified: start with '/'"
        );
        assert_eq!(
            rule(&default_topic("front-left")),
            "may contain only alphanumerics, '_' and '/'"
        );
        assert_eq!(rule("/~/x"), "may contain only alphanumerics, '_' and '/'");
        assert_eq!(rule("/a//b"), "must not contain repeated '/'");
        assert_eq!(rule("/a__b"), "must not contain repeated '_'");
        assert_eq!(rule("/a/"), "must not end with '/'");
        assert_eq!(rule("/"), "must not end with '/'");
        assert_eq!(
            rule(&default_topic("2nd")),
            "no token (text between '/') may start with a digit"
        );
        let e = validate_topic("--topic", "x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--topic = \"x\": must be fully qualified: start with '/' \
             (ROS 2 \"Topic and Service name mapping to DDS\", name constraints)"
        );
    }
}
