//! lidarxdp-core: the sans-IO heart of lidarxdp. Bytes in, points and frames out; no sockets,
//! no files, no threads, no system calls.
//!
//! The modules form a stack: each imports only modules listed before it (bottom first), never
//! one above it. `tests/layers.rs` reads the three layer lines below and every module's
//! `crate::` paths, and fails on an import that points up or sideways to a later module. See
//! `docs/architecture.md` for the picture.
//!
//! - **bottom**: `valid`, `counters`, `time`, `header`, `msg`, `point`, `layout`, `compact`, `point_buf`, `frame`
//! - **middle**: `net`, `reassembly`, `simd`, `scan`, `vendor`, `sensor`
//! - **top**: `protocol`, `ros2`, `health`
//!
//! Bottom, the data every layer speaks:
//! - [`valid`]: validated configuration values (ranges, angles, names), checked once where
//!   they are read;
//! - [`counters`]: counter descriptors ([`counter_set!`]), every counter declared once;
//! - [`time`]: [`HostTime`], the host's monotonic (intervals) and wall (stamps) clocks, the
//!   sensor-minus-host [`time::ClockOffset`], and the calendar of packets' dates
//!   ([`time::days_from_civil`]);
//! - [`header`]: a frame's metadata ([`header::FrameHeader`]) and its clock;
//! - [`msg`]: the neutral messages (an IMU reading, the sensor's sync state, a diagnostic
//!   status and its level);
//! - [`point`], [`layout`]: the published points (Autoware's PointXYZIRCAEDT, 32 bytes) and the
//!   layouts a sensor can publish ([`layout::PointType`]);
//! - `compact` (private): writing into a buffer's spare capacity without zero-filling it;
//! - [`point_buf`]: a frame's point buffer, on the heap or in memory lent by a pool (the
//!   daemon's shared memory), written once by the decoder;
//! - [`frame`]: a finished scan, header plus points.
//!
//! Middle, parsing and frame building:
//! - [`net`]: Ethernet/VLAN/SLL/IPv4/IPv6/UDP header parsing of received frames, IPv6 extension
//!   headers included (RFC 791, RFC 8200, RFC 768);
//! - [`reassembly`]: IPv4 and IPv6 fragment reassembly (RFC 791, RFC 815, RFC 8200, RFC 5722);
//! - `simd` (private): the SSE2 and PCLMULQDQ kernels behind safe functions;
//! - [`scan`]: scan (frame) assembly: the one frame builder, cut angle, field of view,
//!   timeouts, the stream clock;
//! - [`vendor`]: the neutral types every vendor shares (models, configuration, options, return
//!   modes, errors, counters, the [`vendor::VendorDecoder`] contract);
//! - [`sensor`]: the decoders per vendor and their calibration parsers, the scan pipeline.
//!
//! Top, encoders and judgements:
//! - [`protocol`]: the lidarxdp TCP wire codec (`docs/protocol.md`);
//! - [`ros2`]: ROS 2 `sensor_msgs/msg/PointCloud2` CDR encoding and rmw_zenoh naming;
//! - [`health`]: the per-sensor health assessment published on `/diagnostics`.
//!
//! Its dependency tree has no aya, io-uring, libc, clap or mcap (`cargo tree -p lidarxdp-core`).
//! The daemon (`lidarxdp`) drives it from AF_XDP and socket capture; the client
//! (`lidarxdp-client`) reads the wire format; the fuzz targets depend on this crate alone.
//!
//! No `unsafe` outside three modules: the crate root denies `unsafe_code`, every other public
//! module forbids it (`#![forbid(unsafe_code)]` at its top, which no item inside can relax),
//! and only the private `compact` (the spare-capacity writer) and `simd` (SSE2 kernels)
//! modules and [`point_buf`] (a `Vec`-like buffer over a heap or lent region) allow it, each
//! `unsafe` block with its `// SAFETY:` invariant.
#![warn(missing_docs)]
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod compact;
pub mod counters;
pub mod frame;
pub mod header;
pub mod health;
pub mod layout;
pub mod msg;
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
