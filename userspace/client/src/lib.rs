//! lidarxdp-client: what a subscriber application needs to receive frames from the lidarxdp
//! publisher over TCP, and nothing of the daemon (no XDP, io_uring or libc).
//!
//! - [`reader`]: the blocking reader of the wire format over any [`std::io::Read`]
//!   (`docs/protocol.md`), driving the sans-IO codec in [`lidarxdp_core::protocol`];
//! - [`subscriber`]: [`Subscriber`] (connect, subscribe by sensor name and point fields, read
//!   frames) and [`ReceivedFrame`] with its typed zero-copy field views;
//! - [`pcd`]: writing and reading frames as PCD files (PCL's point cloud format, v0.7).
//!
//! A subscriber application depends on this crate and on `lidarxdp-core`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod pcd;
pub mod reader;
pub mod subscriber;

pub use reader::{FrameReader, ReadError};
pub use subscriber::{ClientError, FieldType, FieldView, ReceivedFrame, Subscriber};
