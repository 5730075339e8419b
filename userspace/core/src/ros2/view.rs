//! Reading a received `sensor_msgs/msg/PointCloud2` (CDR little-endian or big-endian) into a
//! borrowed view of its header, fields and point bytes ([`PointCloud2View`]).
#![forbid(unsafe_code)]

use super::cdr::CDR_LE_HEADER;

use super::cdr::FieldRef;

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
/// [`PointCloud2Prefix`](super::PointCloud2Prefix)): borrowed strings and `data`, no copy.
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
