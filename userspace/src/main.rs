//! `lidarxdp`: the daemon and its companion commands.
//!
//! - `lidarxdp run`: attach the XDP program, bind an AF_XDP socket, decode, publish over TCP;
//! - `lidarxdp subscribe ADDR`: print one line per received frame, optionally write PCDs;
//! - `lidarxdp replay PCAP --to IP:PORT`: send a capture's UDP payloads with recorded timing;
//! - `lidarxdp decode PCAP`: decode a capture offline into frames (and PCDs).
mod cli;
mod daemon;

fn main() -> std::process::ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    match cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{}", error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// "outer: cause: root cause", skipping a cause whose text the message already contains (many
/// library errors print their source inside their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}
