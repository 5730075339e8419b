//! lidarxdp-core: the sans-IO heart of lidarxdp. Bytes in, points and frames out; no sockets,
//! no files, no threads, no system calls.
//!
//! Layers, bottom-up (see `docs/architecture.md`):
//! - [`point`], [`layout`], [`frame`]: the published data types (Autoware's PointXYZIRCAEDT,
//!   32 bytes, the decoders' product; the layouts a sensor can publish, [`layout::PointType`]);
//! - [`point_buf`]: a frame's point buffer, on the heap or in memory lent by a pool (the
//!   daemon's shared memory), written once by the decoder;
//! - [`net`]: Ethernet/VLAN/SLL/IPv4/UDP header parsing of received frames (RFC 791, RFC 768);
//! - [`reassembly`]: IPv4 fragment reassembly (RFC 791, RFC 815);
//! - [`vendor`]: the neutral types every vendor shares (models, configuration, options, return
//!   modes, errors, counters, the [`vendor::VendorDecoder`] contract);
//! - [`sensor`]: the decoders per vendor and their calibration parsers, the scan pipeline;
//! - [`scan`]: scan (frame) assembly: cut angle, field of view, timeouts, the stream clock;
//! - [`protocol`]: the lidarxdp TCP wire codec (`docs/protocol.md`);
//! - [`time`]: [`HostTime`], the host's monotonic (intervals) and wall (stamps) clocks;
//! - [`ros2`]: ROS 2 `sensor_msgs/msg/PointCloud2` CDR encoding and rmw_zenoh naming.
//!
//! Its dependency tree has no aya, io-uring, libc, clap or mcap (`cargo tree -p lidarxdp-core`).
//! The daemon (`lidarxdp`) drives it from AF_XDP and socket capture; the client
//! (`lidarxdp-client`) reads the wire format; the fuzz targets depend on this crate alone.
//!
//! No `unsafe` outside two modules: the crate root denies `unsafe_code`, every other public
//! module forbids it (`#![forbid(unsafe_code)]` at its top, which no item inside can relax),
//! and only the private `simd` module (SSE2 kernels and a spare-capacity writer behind safe
//! functions) and [`point_buf`] (a `Vec`-like buffer over a heap or lent region) allow it,
//! each `unsafe` block with its `// SAFETY:` invariant.
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod counters;
pub mod frame;
pub mod health;
pub mod layout;
pub mod net;
pub mod point;
#[allow(unsafe_code)]
pub mod point_buf;
pub mod protocol;
pub mod reassembly;
pub mod ros2;
pub mod scan;
pub mod sensor;
#[allow(unsafe_code)]
mod simd;
pub mod time;
pub mod valid;
pub mod vendor;

pub use time::HostTime;
