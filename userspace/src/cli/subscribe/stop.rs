//! SIGINT/SIGTERM handling of `subscribe` ([`Stop`]: the flag the loops poll, the thread that
//! wakes a blocked TCP read) and why the stream ended ([`StopReason`]).
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

/// SIGINT/SIGTERM handling: a flag the loops poll, and a thread that shuts the TCP stream
/// down so that a blocked read returns at once.
pub(super) struct Stop {
    /// The signal number received, 0 while none.
    signal: Arc<AtomicUsize>,
    stream: Arc<Mutex<Option<TcpStream>>>,
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Stop {
    /// Installs the handlers. For each signal, in this order: exit at once with 128 + signal
    /// if a signal already came (signal-hook's conditional shutdown), record the signal, set
    /// the flag; the thread then wakes the reader.
    pub(super) fn install() -> Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        let signal = Arc::new(AtomicUsize::new(0));
        for sig in [SIGINT, SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, flag.clone())
                .context("install signal handler")?;
            signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
                .context("install signal handler")?;
            signal_hook::flag::register(sig, flag.clone()).context("install signal handler")?;
        }
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .context("install signal handler")?;
        let handle = signals.handle();
        let stream: Arc<Mutex<Option<TcpStream>>> = Arc::new(Mutex::new(None));
        let watched = stream.clone();
        let thread = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for _ in signals.forever() {
                    if let Some(s) = watched.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
            })
            .context("spawn the signal thread")?;
        Ok(Stop {
            signal,
            stream,
            handle,
            thread: Some(thread),
        })
    }

    /// The signal received, if any.
    pub(super) fn signal(&self) -> Option<StopReason> {
        match self.signal.load(Ordering::SeqCst) as i32 {
            0 => None,
            SIGINT => Some(StopReason::Signal("SIGINT")),
            SIGTERM => Some(StopReason::Signal("SIGTERM")),
            _ => Some(StopReason::Signal("signal")),
        }
    }

    /// Shuts `stream` down when a signal comes (at once if one already came).
    pub(super) fn watch(&self, stream: &TcpStream) -> Result<()> {
        let clone = stream.try_clone().context("clone the TCP stream")?;
        *self.stream.lock().unwrap_or_else(|e| e.into_inner()) = Some(clone);
        if self.signal().is_some() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        Ok(())
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why the stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StopReason {
    /// The server closed the connection between two frames.
    EndOfStream,
    /// `--frames` frames arrived.
    Frames,
    /// zenoh: `--idle-exit-ms` passed without a message.
    #[cfg_attr(not(feature = "zenoh"), allow(dead_code))]
    Idle,
    /// SIGINT or SIGTERM.
    Signal(&'static str),
    /// An error (reported after the summary).
    Error,
}

impl StopReason {
    pub(super) fn text(self) -> &'static str {
        match self {
            StopReason::EndOfStream => "end of stream",
            StopReason::Frames => "--frames",
            StopReason::Idle => "--idle-exit-ms",
            StopReason::Signal(s) => s,
            StopReason::Error => "error",
        }
    }
}
