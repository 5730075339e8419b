//! lidarxdp-client: what a subscriber application needs to receive frames from the lidarxdp
//! publisher, and nothing of the daemon (no XDP, io_uring or libc with the default features).
//!
//! - [`reader`]: the blocking reader of the wire format over any [`std::io::Read`]
//!   (`docs/protocol.md`), driving the sans-IO codec in [`lidarxdp_core::protocol`];
//! - [`subscriber`]: [`Subscriber`] (connect over TCP, subscribe by sensor name and point
//!   fields, read frames) and [`ReceivedFrame`] with its typed zero-copy field views;
//! - [`pcd`]: writing and reading frames as PCD files (PCL's point cloud format, v0.7);
//! - `mcap` (feature `mcap`): recording frames as ROS 2 `sensor_msgs/msg/PointCloud2` in MCAP
//!   files that rosbag2 and Foxglove open, optionally split by size or duration;
//! - `zenoh` (feature `zenoh`): reading the daemon's ROS 2 topic over zenoh (rmw_zenoh's key
//!   expressions), in place from shared memory on the same host, and the zenoh session
//!   configuration the daemon's publisher uses too (zenoh brings tokio and libc).
//!
//! A subscriber application depends on this crate and on `lidarxdp-core`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "mcap")]
pub mod mcap;
pub mod pcd;
pub mod reader;
pub mod subscriber;
#[cfg(feature = "zenoh")]
pub mod zenoh;

pub use reader::{FrameReader, ReadError};
pub use subscriber::{
    ClientError, FieldType, FieldView, IMU_KEPT, ReceivedFrame, ReceivedImu, Subscriber,
};
