//! A finished scan (frame): header plus points, the unit that crosses from the decoder
//! thread to the publisher.
#![forbid(unsafe_code)]

pub use crate::header::{FrameClock, FrameHeader};
use crate::point_buf::PointBuf;

/// A finished scan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    /// Metadata.
    pub header: FrameHeader,
    /// Points in firing order, except those of a packet that arrived late into its frame
    /// (a few packets late: `crate::scan::TimeVerdict::Late`), which follow the points of the
    /// packets that overtook it. [`crate::point::PointXYZIRCAEDT`], 32 bytes each, on the heap
    /// or in shared memory lent by the daemon's pool ([`crate::point_buf`]).
    pub points: PointBuf,
}
