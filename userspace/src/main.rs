//! `lidarxdp`: the daemon and its companion commands.
//!
//! - `lidarxdp run`: attach the XDP program, bind an AF_XDP socket, decode, publish over TCP;
//! - `lidarxdp subscribe ADDR`: print one line per received frame, optionally write PCDs;
//! - `lidarxdp replay PCAP --to IP:PORT`: send a capture's UDP payloads with recorded timing;
//! - `lidarxdp decode PCAP`: decode a capture offline into frames (and PCDs).
mod cli;
mod daemon;

/// Every Rust allocation of the daemon and its commands goes to jemalloc (issue 40; why:
/// `lidarxdp::sys::malloc::JEMALLOC_CONF`). C libraries (Cyclone DDS) keep glibc's `malloc`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's `malloc_conf` (jemalloc(3), "TUNING"), read at its first allocation, before
/// `main`: [`lidarxdp::sys::malloc::JEMALLOC_CONF`]. jemalloc defines the symbol weak; this one
/// replaces it. A `&[u8; N]` is a plain pointer, the `const char *` jemalloc reads.
// SAFETY: the symbol is jemalloc's `const char *malloc_conf` (prefixed `_rjem_` by the crate):
// a pointer to a NUL-terminated string that lives for the whole process, never written.
#[used]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 47] = lidarxdp::sys::malloc::JEMALLOC_CONF;

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

#[cfg(test)]
mod tests {
    /// jemalloc runs with our `malloc_conf`, and this binary's allocations are its.
    #[test]
    fn jemalloc_is_the_allocator_with_our_configuration() {
        use tikv_jemalloc_ctl::raw;
        // SAFETY: both options are `ssize_t` (jemalloc(3)), read as isize.
        let dirty: isize = unsafe { raw::read(b"opt.dirty_decay_ms\0") }.unwrap();
        // SAFETY: as above.
        let muzzy: isize = unsafe { raw::read(b"opt.muzzy_decay_ms\0") }.unwrap();
        assert_eq!((dirty, muzzy), (0, 0));
        // SAFETY: `opt.tcache` is a `bool` (jemalloc(3)).
        let tcache: bool = unsafe { raw::read(b"opt.tcache\0") }.unwrap();
        assert!(!tcache, "jemalloc's thread caches are on");
        tikv_jemalloc_ctl::epoch::advance().unwrap();
        let before = tikv_jemalloc_ctl::stats::allocated::read().unwrap();
        let held = std::hint::black_box(vec![1u8; 64 << 20]);
        tikv_jemalloc_ctl::epoch::advance().unwrap();
        let during = tikv_jemalloc_ctl::stats::allocated::read().unwrap();
        drop(held);
        assert!(during >= before + (64 << 20), "{before} -> {during}");
    }
}
