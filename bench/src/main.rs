//! `lidarxdp-bench`: benchmark harness.
//!
//! `lidarxdp-bench publish`: frames of a given size at a given rate to N subscribers on
//! loopback, through the lidarxdp publisher (io_uring, shared buffers, batched SendMsg) and
//! through a baseline that copies each frame into a `Vec` and writes it with one blocking
//! `write()` per subscriber. Reports delivered MB/s and per-subscriber latency (p50, p99, max:
//! local time when the frame is completely received minus the time it was handed to the
//! sender, both CLOCK_REALTIME on this machine), next to this machine's memcpy bandwidth
//! measured in the same run. Output: a Markdown table on stdout, optionally JSON lines.
//! (The AF_XDP vs socket comparison of issue 4 will be another subcommand.)

mod publish;

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
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Publish(a) => publish::run(a),
    }
}
