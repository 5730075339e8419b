//! The point fields a frame carries on the wire: one field's description ([`WireField`]), the
//! subset a subscriber chose of a layout's fields ([`FieldSet`]), and a parsed frame header
//! ([`FrameInfo`]); `docs/protocol.md`, "Fields".
#![forbid(unsafe_code)]

use super::ProtocolError;
use crate::frame::FrameHeader;
use crate::layout::PointType;
use crate::point::{POINT_FIELDS, POINT_SIZE, PointField};
use thiserror::Error;

/// One entry of a decoded field list (owned counterpart of [`PointField`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireField {
    /// Field name.
    pub name: String,
    /// Byte offset inside a point.
    pub offset: u32,
    /// [`crate::point::datatype`] code.
    pub datatype: u8,
    /// Number of elements.
    pub count: u32,
}

impl WireField {
    /// Whether this entry equals a static [`PointField`].
    pub fn matches(&self, f: &PointField) -> bool {
        self.name == f.name
            && self.offset == f.offset
            && self.datatype == f.datatype
            && self.count == f.count
    }
}

/// A point field name that the layout does not have ([`FieldSet::from_names`]).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown field '{name}' for point_type {point_type}; valid: {valid}")]
pub struct UnknownField {
    /// The name as given.
    pub name: String,
    /// The layout asked.
    pub point_type: PointType,
    /// The layout's field names, comma separated.
    pub valid: String,
}

/// A subset of the fields of a point layout ([`PointType::fields`]): bit `i` selects field
/// `i` of the layout.
///
/// The wire layout of a set is its fields in the layout's order, packed without padding (e.g.
/// `x,y,z` = 12-byte points). The set of all fields ([`FieldSet::all`]) is exactly the layout's
/// struct, padding included, sent from the decoder's buffer without any copy; any other set
/// is packed once per frame and shared by every subscriber that chose that set (see
/// `lidarxdp::publish`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldSet {
    point_type: PointType,
    bits: u16,
}

/// Bytes of one value of PointField datatype `d` (1 to 8; 0 for an unknown code).
pub const fn datatype_size(d: u8) -> u32 {
    match d {
        crate::point::datatype::INT8 | crate::point::datatype::UINT8 => 1,
        crate::point::datatype::INT16 | crate::point::datatype::UINT16 => 2,
        crate::point::datatype::INT32
        | crate::point::datatype::UINT32
        | crate::point::datatype::FLOAT32 => 4,
        crate::point::datatype::FLOAT64 => 8,
        _ => 0,
    }
}

fn field_size(f: &PointField) -> u32 {
    datatype_size(f.datatype) * f.count
}

impl FieldSet {
    /// Every field of `point_type` (the default subscription).
    pub const fn all(point_type: PointType) -> FieldSet {
        let n = point_type.fields().len();
        FieldSet {
            point_type,
            bits: ((1u32 << n) - 1) as u16,
        }
    }

    /// The set of `point_type`'s fields with these bits (bit `i` = field `i`); `None` if empty
    /// or a bit past the layout's fields is set.
    pub fn from_bits(point_type: PointType, bits: u16) -> Option<FieldSet> {
        let all = Self::all(point_type).bits;
        (bits != 0 && bits & !all == 0).then_some(FieldSet { point_type, bits })
    }

    /// The layout the set selects from.
    pub fn point_type(self) -> PointType {
        self.point_type
    }

    /// The bits.
    pub fn bits(self) -> u16 {
        self.bits
    }

    /// The set of these field names of `point_type`; an empty list is all of them.
    ///
    /// # Errors
    /// [`UnknownField`]: the first name the layout does not have, with the valid names.
    pub fn from_names<S: AsRef<str>>(
        point_type: PointType,
        names: &[S],
    ) -> Result<FieldSet, UnknownField> {
        if names.is_empty() {
            return Ok(FieldSet::all(point_type));
        }
        let mut bits = 0u16;
        for n in names {
            let n = n.as_ref();
            match point_type.fields().iter().position(|f| f.name == n) {
                Some(i) => bits |= 1 << i,
                None => {
                    return Err(UnknownField {
                        name: n.to_owned(),
                        point_type,
                        valid: point_type.field_names(),
                    });
                }
            }
        }
        Ok(FieldSet { point_type, bits })
    }

    /// Whether this is every field of the layout (sent as the layout itself, padding
    /// included).
    pub fn is_all(self) -> bool {
        self == FieldSet::all(self.point_type)
    }

    fn selected(self) -> impl Iterator<Item = &'static PointField> {
        self.point_type
            .fields()
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.bits & (1 << i) != 0)
            .map(|(_, f)| f)
    }

    /// Bytes per point on the wire: the layout's `point_step` for all fields, else the packed
    /// sizes of the chosen fields.
    pub fn point_step(self) -> u32 {
        if self.is_all() {
            return self.point_type.point_step() as u32;
        }
        self.selected().map(field_size).sum()
    }

    /// The wire field list: the layout's own for all fields, else the chosen fields at their
    /// packed offsets.
    pub fn fields(self) -> impl Iterator<Item = PointField> {
        let all = self.is_all();
        let mut off = 0;
        self.selected().map(move |f| {
            let packed = PointField {
                offset: if all { f.offset } else { off },
                ..*f
            };
            off += field_size(f);
            packed
        })
    }

    /// Appends the packed encoding of `points` (bytes in the layout, `point_step` each) to
    /// `out`: `points.len() / point_step * self.point_step()` bytes.
    pub fn pack(self, points: &[u8], out: &mut Vec<u8>) {
        let step = self.point_type.point_step();
        let runs = self.runs();
        out.reserve(points.len() / step * self.point_step() as usize);
        for p in points.chunks_exact(step) {
            for &(from, len) in &runs {
                out.extend_from_slice(&p[from..from + len]);
            }
        }
    }

    /// Contiguous source byte runs (offset, length) of the selected fields, merged.
    fn runs(self) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for f in self.selected() {
            let (o, l) = (f.offset as usize, field_size(f) as usize);
            match runs.last_mut() {
                Some(r) if r.0 + r.1 == o => r.1 += l,
                _ => runs.push((o, l)),
            }
        }
        runs
    }
}

/// The decoded header of a frame message.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameInfo {
    /// Frame metadata.
    pub header: FrameHeader,
    /// Number of points in the payload.
    pub point_count: u32,
    /// Bytes per point.
    pub point_step: u32,
    /// Field list describing a point.
    pub fields: Vec<WireField>,
}

impl FrameInfo {
    /// Whether the layout is exactly [`crate::point::PointXYZIRCAEDT`] ([`POINT_FIELDS`], step 32).
    ///
    /// # Errors
    /// [`ProtocolError::UnsupportedLayout`] saying what differs.
    pub fn check_layout(&self) -> Result<(), ProtocolError> {
        check_full_layout(self.point_step, &self.fields)
    }

    /// The point layout whose field list and `point_step` these are exactly, if any (every
    /// frame of a lidarxdp server has one; a subset of fields has none).
    pub fn point_type(&self) -> Option<PointType> {
        PointType::from_fields(
            self.point_step,
            self.fields
                .iter()
                .map(|f| (f.name.as_str(), f.offset, f.datatype, f.count)),
        )
    }

    /// Payload length in bytes.
    pub fn payload_len(&self) -> usize {
        self.point_count as usize * self.point_step as usize
    }
}

/// Whether `point_step` and `fields` are exactly the [`crate::point::PointXYZIRCAEDT`] layout.
///
/// # Errors
/// [`ProtocolError::UnsupportedLayout`] saying what differs.
pub fn check_full_layout(point_step: u32, fields: &[WireField]) -> Result<(), ProtocolError> {
    if point_step as usize != POINT_SIZE {
        return Err(ProtocolError::UnsupportedLayout {
            detail: format!("point_step {point_step} != {POINT_SIZE}"),
        });
    }
    if fields.len() != POINT_FIELDS.len()
        || !fields
            .iter()
            .zip(POINT_FIELDS.iter())
            .all(|(a, b)| a.matches(b))
    {
        return Err(ProtocolError::UnsupportedLayout {
            detail: format!("field list {fields:?} differs from POINT_FIELDS"),
        });
    }
    Ok(())
}
