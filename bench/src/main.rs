//! `lidarxdp-bench`: benchmark harness.
//!
//! * `publish`: frames of a given size at a given rate to N subscribers on loopback, through
//!   the lidarxdp publisher (io_uring, shared buffers, batched SendMsg) and through a baseline
//!   that copies each frame into a `Vec` and writes it with one blocking `write()` per
//!   subscriber (issue 5), and through the zenoh, iceoryx2 and DDS sinks to subscriber
//!   processes (issues 13, 22). Reports delivered MB/s, per-subscriber latency, drops and CPU
//!   per frame.
//! * `gen`, `collect`, `suite` (issue 4): the AF_XDP path against socket baselines. `gen` is a
//!   paced sendmmsg(2) load generator looping a capture, `collect` records the frames K
//!   subscribers receive, `suite` runs both around the daemon in its own namespaces for every
//!   backend and scenario and writes CSV, `summary.md` and SVG plots (`docs/benchmarks.md`).
//! * `peers` (issue 15): lidarxdp against velodyne-decoder, ouster-sdk and Hesai's SDK on the
//!   shared captures, decode only and end to end, in interleaved rounds.
//! * `soak-client` (issue 40): the churning, stalled and storming subscribers of `cargo xtask
//!   soak`.

mod collect;
mod r#gen;
mod iox2;
mod net;
mod peers;
mod peers_decode;
mod peers_input;
mod peers_report;
mod publish;
mod report;
mod soak_client;
mod stats;
mod suite;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "lidarxdp-bench", about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Publisher fan-out over loopback against a copy + write() baseline.
    Publish(publish::Args),
    /// Paced sendmmsg load generator looping a capture (issue 4).
    Gen(r#gen::Args),
    /// K subscribers recording every received frame (issue 4).
    Collect(collect::Args),
    /// AF_XDP vs socket baselines: every backend and scenario (issue 4; root).
    Suite(suite::Args),
    /// lidarxdp against velodyne-decoder, ouster-sdk and the Hesai SDK (issue 15; run by
    /// `cargo xtask bench --peers`).
    Peers(peers::Args),
    /// lidarxdp's decode-only measurement of `peers` (one payload file).
    #[command(hide = true, name = "peers-decode")]
    PeersDecode(peers_decode::Args),
    /// A churning, stalled or storming subscriber of `cargo xtask soak` (issue 40).
    #[command(name = "soak-client")]
    SoakClient(soak_client::Args),
    /// One iceoryx2 subscriber process of `publish --imp iox2`.
    #[command(hide = true, name = "iox2-sub")]
    Iox2Sub(iox2::SubArgs),
    /// Busy loop until killed (the suite's CPU hog).
    #[command(hide = true)]
    Hog,
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Publish(a) => publish::run(a),
        Cmd::Gen(a) => r#gen::run(a),
        Cmd::Collect(a) => collect::run(a),
        Cmd::Suite(a) => suite::run(a),
        Cmd::Peers(a) => peers::run(a),
        Cmd::PeersDecode(a) => peers_decode::run(a),
        Cmd::Iox2Sub(a) => iox2::sub_main(a),
        Cmd::SoakClient(a) => soak_client::run(a),
        Cmd::Hog => {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
    }
}
