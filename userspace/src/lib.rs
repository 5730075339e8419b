//! lidarxdp: a kernel-bypass LiDAR packet service.
//!
//! Layers, bottom-up (see `docs/architecture.md`):
//! - [`point`], [`frame`]: the published data types;
//! - [`sensor`]: sans-IO decoders, bytes in, points out;
//! - [`scan`]: scan (frame) assembly — cut angle, timeouts;
//! - [`net`]: sans-IO Ethernet/IPv4/UDP header parsing of received frames;
//! - [`xsk`]: AF_XDP socket, UMEM and rings (libc + memmap2);
//! - [`loader`]: loading and attaching the XDP program (aya);
//! - [`capture`]: the decoder thread per (interface, queue);
//! - [`protocol`], [`publish`], [`client`]: the TCP wire format, publisher and subscriber;
//! - [`replay`], [`offline`]: sending and decoding pcaps;
//! - [`privs`]: dropping capabilities once the daemon is set up.
//! - [`metrics`]: Prometheus text rendering of the counters.
#![warn(missing_docs)]

pub mod capture;
pub mod client;
pub mod frame;
pub mod loader;
pub mod metrics;
pub mod net;
pub mod offline;
pub mod pcd;
pub mod point;
pub mod privs;
pub mod protocol;
pub mod publish;
pub mod reassembly;
pub mod replay;
pub mod scan;
pub mod sensor;
pub mod sys;
pub mod xsk;
