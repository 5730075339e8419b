//! `lidarxdp`: the daemon and its companion commands.
//!
//! - `lidarxdp run`: attach the XDP program, bind an AF_XDP socket, decode, publish over TCP;
//! - `lidarxdp subscribe ADDR`: print one line per received frame, optionally write PCDs;
//! - `lidarxdp replay PCAP --to IP:PORT`: send a capture's UDP payloads with recorded timing;
//! - `lidarxdp decode PCAP`: decode a capture offline into frames (and PCDs).
mod cli;
mod daemon;

fn main() -> std::process::ExitCode {
    // The daemon's log has timestamps (journald, files); the other commands talk to a person
    // at a terminal: `warning: ...` without a timestamp or module path.
    let daemon = std::env::args().nth(1).as_deref() == Some("run");
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if daemon {
        logger.format_timestamp_millis();
    } else {
        logger.format(|buf, record| {
            use std::io::Write;
            let level = match record.level() {
                log::Level::Error => "error",
                log::Level::Warn => "warning",
                log::Level::Info => "info",
                log::Level::Debug => "debug",
                log::Level::Trace => "trace",
            };
            writeln!(buf, "{level}: {}", record.args())
        });
    }
    logger.init();
    match cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A person reads this: no timestamp, no log level, no Rust `Debug` form.
            eprintln!("error: {}", error_chain(&e));
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
