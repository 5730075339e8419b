//! lidarxdp-client: what a subscriber application needs to receive frames from the lidarxdp
//! publisher, and nothing of the daemon (no XDP, io_uring or libc with the default features).
//!
//! - [`reader`]: the blocking reader of the wire format over any [`std::io::Read`]
//!   (`docs/protocol.md`), driving the sans-IO codec in [`lidarxdp_core::protocol`];
//! - [`subscriber`]: [`Subscriber`] (connect over TCP, subscribe by sensor name and point
//!   fields, read frames) and [`ReceivedFrame`] with its typed zero-copy field views;
//! - [`pcd`]: writing and reading frames as PCD files (PCL's point cloud format, v0.7);
//! - `offline` and `calibration` (feature `pcap`): reading pcap/pcapng captures (IPv4
//!   reassembly included) and decoding them into frames, with the calibration files read;
//! - `mcap` (feature `mcap`): recording frames as ROS 2 `sensor_msgs/msg/PointCloud2` in MCAP
//!   files that rosbag2 and Foxglove open, optionally split by size or duration;
//! - `zenoh` (feature `zenoh`): reading the daemon's ROS 2 topic over zenoh (rmw_zenoh's key
//!   expressions), in place from shared memory on the same host, and the zenoh session
//!   configuration the daemon's publisher uses too (zenoh brings tokio and libc).
//!
//! A subscriber application depends on this crate and on `lidarxdp-core`.
#![warn(missing_docs)]
// Only `offline` maps capture files (memmap2); every other module is safe code.
#![deny(unsafe_code)]

#[cfg(feature = "pcap")]
pub mod calibration;
#[cfg(feature = "mcap")]
pub mod mcap;
#[cfg(feature = "pcap")]
#[allow(unsafe_code)]
pub mod offline;
pub mod pcd;
pub mod reader;
#[cfg(feature = "pcap")]
pub mod settings;
pub mod subscriber;
#[cfg(feature = "zenoh")]
pub mod zenoh;

pub use reader::{FrameReader, ReadError};
pub use subscriber::{
    ClientError, FieldType, FieldView, IMU_KEPT, ReceivedFrame, ReceivedImu, Subscriber,
};
