//! Command-line interface (clap). One module per command.
mod decode;
mod run;
mod subscribe;

use std::{net::SocketAddr, path::PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Kernel-bypass LiDAR packet service: XDP + AF_XDP capture, decoding, TCP publishing.
#[derive(Parser)]
#[command(name = "lidarxdp", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the daemon: attach the XDP program, capture through AF_XDP, decode, publish.
    Run(Box<run::RunArgs>),
    /// Validate a `run --config` file (ranges, names, ports, calibration files) and print the
    /// effective configuration as TOML; touches no network interface.
    CheckConfig {
        /// The TOML configuration file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Connect to a daemon and print one line per frame.
    Subscribe(subscribe::SubscribeArgs),
    /// Send a pcap's UDP payloads to IP:PORT with the recorded timing.
    Replay(ReplayArgs),
    /// Decode a capture offline into frames, one line (or JSON object) per frame as it closes,
    /// optionally as PCD files.
    Decode(decode::DecodeArgs),
    /// Fetch a running daemon's metrics (`run --metrics`) and print them as a table.
    Stats(StatsArgs),
}

/// `lidarxdp stats` arguments.
#[derive(clap::Args)]
struct StatsArgs {
    /// Address of the daemon's metrics endpoint (`lidarxdp run --metrics ADDR`).
    #[arg(value_name = "ADDR", default_value = "127.0.0.1:9751")]
    addr: SocketAddr,
    /// Print the raw Prometheus text instead of the table.
    #[arg(long, conflicts_with = "json")]
    raw: bool,
    /// Print every counter as one JSON object (the layout of `run --stats-json`).
    #[arg(long)]
    json: bool,
}

/// `lidarxdp replay` arguments.
#[derive(clap::Args)]
struct ReplayArgs {
    /// Capture to send: classic pcap or pcapng; Ethernet (VLAN tags), Linux cooked (SLL, SLL2)
    /// or raw-IP link types; IPv4 fragments are reassembled. Same as `--pcap FILE`.
    #[arg(
        value_name = "PCAP",
        required_unless_present = "pcap",
        conflicts_with = "pcap"
    )]
    capture: Option<PathBuf>,
    /// The capture to send (the same as the positional `PCAP`).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Destination address; port 0 keeps each datagram's recorded destination port.
    #[arg(long, value_name = "IP:PORT")]
    to: SocketAddr,
    /// `realtime` (recorded timing), a packets-per-second number, or `max`.
    #[arg(long, default_value = "realtime")]
    rate: lidarxdp::replay::Rate,
    /// Times to send the capture (1 = once).
    #[arg(long = "loop", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    loops: u32,
    /// Only send datagrams whose UDP destination port in the capture is this one.
    #[arg(long)]
    port: Option<u16>,
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Parses the command line and runs the command.
pub fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Run(args) => run::run(*args),
        Cmd::CheckConfig { file } => run::check_config(file),
        Cmd::Subscribe(args) => subscribe::subscribe(args),
        Cmd::Decode(args) => decode::decode(args),
        Cmd::Stats(a) => {
            if a.json {
                println!("{}", crate::daemon::http::get(a.addr, "/stats.json")?);
                return Ok(());
            }
            let text = crate::daemon::http::get(a.addr, "/metrics")?;
            if a.raw {
                print!("{text}");
            } else {
                print!(
                    "{}",
                    lidarxdp::metrics::table(&lidarxdp::metrics::parse(&text))
                );
            }
            Ok(())
        }
        Cmd::Replay(a) => {
            let stats = lidarxdp::replay::replay(&lidarxdp::replay::ReplayConfig {
                pcap: a.pcap.or(a.capture).unwrap_or_default(),
                to: a.to,
                rate: a.rate,
                loops: a.loops,
                udp_port_filter: a.port,
            })?;
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "sent": stats.sent,
                        "bytes": stats.bytes,
                        "elapsed_s": stats.elapsed.as_secs_f64(),
                        "skipped_records": stats.skipped,
                    })
                );
            } else {
                eprintln!(
                    "replay: sent {} datagrams, {} bytes in {:.3} s; {} records skipped",
                    stats.sent,
                    stats.bytes,
                    stats.elapsed.as_secs_f64(),
                    stats.skipped
                );
            }
            Ok(())
        }
    }
}
