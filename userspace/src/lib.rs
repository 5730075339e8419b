//! lidarxdp: the kernel-bypass LiDAR packet daemon and its CLI.
//!
//! The decoding itself is sans-IO and lives in `lidarxdp-core` (points, frames, wire parsing,
//! reassembly, decoders, scan assembly, the protocol codec); the subscriber side lives in
//! `lidarxdp-client` (the TCP subscriber, PCD, MCAP recording and the zenoh reader). This
//! crate holds what touches the system (see `docs/architecture.md`):
//! - [`calibration`]: reading calibration / metadata files (bounded, `O_NONBLOCK`) for the
//!   core's parsers;
//! - [`xsk`]: AF_XDP socket, UMEM and rings (libc + memmap2);
//! - [`loader`]: loading and attaching the XDP program (aya);
//! - [`capture`]: the decoder thread per (interface, queue), and the socket baselines;
//! - [`publish`]: the TCP publisher (io_uring) and the sink seam;
//! - [`ros2_zenoh`]: frames as ROS 2 `PointCloud2` over zenoh (rmw_zenoh's keys, shared
//!   memory); the zenoh subscriber is `lidarxdp_client::zenoh`'s;
//! - [`foxglove`]: the Foxglove WebSocket server (`run --foxglove`): one PointCloud2 channel
//!   per sensor and a diagnostics channel, for Foxglove and Lichtblick;
//! - [`replay`], [`offline`]: sending and decoding pcap files;
//! - [`privs`]: dropping capabilities once the daemon is set up;
//! - [`sys`]: every raw libc call (socket options, AF_XDP syscalls, capabilities, CPU pinning,
//!   eventfd, sysfs), each behind a safe wrapper;
//! - [`metrics`]: Prometheus text rendering of the counters;
//! - [`process`]: the daemon process's memory and resource gauges, and the growth of its
//!   resident memory that `/diagnostics` judges;
//! - [`view`]: the live 3D view in a browser (`run --view`): embedded three.js page, HTTP
//!   server, latest frame per sensor.
#![warn(missing_docs)]

/// Calibration files and building a sensor's pipeline from them (one implementation, in
/// `lidarxdp-client`, shared with the Python package).
pub use lidarxdp_client::calibration;
pub mod capture;
#[cfg(feature = "foxglove")]
pub mod foxglove;
pub mod loader;
pub mod metrics;
/// Reading capture files and decoding them offline (one implementation, in `lidarxdp-client`,
/// shared with the Python package).
pub use lidarxdp_client::offline;
pub mod privs;
pub mod process;
pub mod publish;
pub mod replay;
pub mod ros2_dds;
pub mod ros2_zenoh;
pub mod sys;
#[cfg(feature = "view")]
pub mod view;
pub mod xsk;
