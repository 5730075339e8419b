//! The decoder thread: one per (interface, queue).
//!
//! It drains the AF_XDP RX ring in bursts, strips the Ethernet/IPv4/UDP headers
//! ([`crate::net`]), hands each sensor payload to that sensor's [`ScanPipeline`], recycles the
//! UMEM frames to the fill ring (inside [`XskSocket::rx_burst`]) and pushes finished frames to
//! the publisher through a bounded lock-free queue ([`FrameSender`]). It takes no lock and never
//! blocks on a subscriber. When the RX ring is empty it sleeps in `io_uring_enter` on a poll of
//! the XSK socket with a timeout (`IORING_ENTER_EXT_ARG`), so it neither spins nor sleeps blindly;
//! the timeout also closes a frame whose last packet is late ([`ScanPipeline::poll_timeout`]).

use std::{
    os::fd::AsRawFd,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use io_uring::{IoUring, opcode, types};

use crate::{
    frame::Frame,
    net::{self, NetError},
    publish::FrameSender,
    sensor::ScanPipeline,
    xsk::{XdpStatistics, XskCountersSnapshot, XskSocket},
};

/// Descriptors taken from the RX ring per burst (DPDK-style burst of 64).
pub const RX_BURST: u32 = 64;

/// One sensor served by a capture thread: its UDP destination port, optional IPv4 source and
/// its decoding pipeline.
pub struct SensorSlot {
    /// UDP destination port the sensor sends data packets to.
    pub port: u16,
    /// IPv4 source address of the sensor, or `None` for any source.
    pub source: Option<[u8; 4]>,
    /// The sensor's decoder and scan assembler.
    pub pipeline: ScanPipeline,
}

/// Counters of one capture thread, readable from any thread (relaxed atomics written only by
/// the capture thread, once per burst or wake-up, so reads are at most one burst stale).
#[derive(Debug, Default)]
pub struct CaptureCounters {
    /// Frames taken from the RX ring.
    pub rx_frames: AtomicU64,
    /// Bytes taken from the RX ring (whole Ethernet frames).
    pub rx_bytes: AtomicU64,
    /// UDP datagrams handed to a sensor pipeline.
    pub sensor_datagrams: AtomicU64,
    /// Frames that were not IPv4/UDP or had invalid headers.
    pub not_udp: AtomicU64,
    /// IPv4 fragments (not reassembled yet; counted and dropped).
    pub fragments: AtomicU64,
    /// UDP datagrams whose port/source matched no configured sensor.
    pub unknown_sensor: AtomicU64,
    /// Times the thread went to sleep in io_uring waiting for packets.
    pub waits: AtomicU64,
    /// Frames (scans) pushed to the publisher queue.
    pub frames_out: AtomicU64,
    /// Frames dropped because the publisher queue was full.
    pub frames_dropped: AtomicU64,
}

/// Snapshot of the per-sensor decode counters, published by the capture thread.
#[derive(Debug, Default)]
pub struct SensorCounters {
    /// Data packets decoded.
    pub decoded: AtomicU64,
    /// Packets rejected as malformed.
    pub malformed: AtomicU64,
    /// Datagrams ignored (not data packets, e.g. position packets).
    pub ignored: AtomicU64,
    /// Frames produced.
    pub frames: AtomicU64,
    /// Points produced.
    pub points: AtomicU64,
}

/// Everything the capture thread reports, shared with the main thread.
#[derive(Debug, Default)]
pub struct CaptureStats {
    /// Thread-level counters.
    pub capture: CaptureCounters,
    /// One entry per configured sensor, in [`SensorSlot`] order.
    pub sensors: Vec<SensorCounters>,
}

/// What a capture thread reports when it ends.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptureExit {
    /// The socket's `XDP_STATISTICS` at exit (`None` if the getsockopt failed).
    pub xdp_statistics: Option<XdpStatistics>,
    /// The socket's own RX counters at exit.
    pub xsk: XskCountersSnapshot,
}

/// The state moved into the capture thread.
pub struct CaptureWorker {
    /// The bound AF_XDP socket of this (interface, queue).
    pub xsk: XskSocket,
    /// Sensors expected on this queue.
    pub sensors: Vec<SensorSlot>,
    /// Where finished frames go.
    pub sender: FrameSender,
    /// Idle wait before re-checking timeouts and the stop flag.
    pub idle_wait: Duration,
    /// Set by the main thread to make the worker flush and return.
    pub stop: Arc<AtomicBool>,
    /// Shared counters (must have one `sensors` entry per slot).
    pub stats: Arc<CaptureStats>,
}

/// Current CLOCK_REALTIME in ns since the Unix epoch.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[derive(Default)]
struct Local {
    rx_frames: u64,
    rx_bytes: u64,
    sensor_datagrams: u64,
    not_udp: u64,
    fragments: u64,
    unknown_sensor: u64,
    waits: u64,
    frames_out: u64,
    frames_dropped: u64,
}

impl CaptureWorker {
    /// Runs the capture loop until `stop` is set, then flushes the frames in progress and
    /// returns the socket's final counters.
    ///
    /// Errors: creating the io_uring instance (`io_uring_setup`) or waiting on it.
    pub fn run(mut self) -> std::io::Result<CaptureExit> {
        // Frames' point buffers come from the publisher's pool (no allocation once warm).
        let _buffers = crate::scan::install_buffer_source(self.sender.buffer_source());
        let mut ring = IoUring::new(8)?;
        let fd = types::Fd(self.xsk.as_raw_fd());
        let mut poll_armed = false;
        let mut local = Local::default();
        let mut out: Vec<Frame> = Vec::with_capacity(4);
        let wait = types::Timespec::from(self.idle_wait);
        while !self.stop.load(Ordering::Relaxed) {
            let now = realtime_ns();
            let sensors = &mut self.sensors;
            let n = self.xsk.rx_burst(RX_BURST, |bytes| {
                local.rx_frames += 1;
                local.rx_bytes += bytes.len() as u64;
                match net::parse_udp_ipv4(bytes) {
                    Ok(d) => {
                        let slot = sensors.iter_mut().find(|s| {
                            s.port == d.dst_port && s.source.is_none_or(|ip| ip == d.src_ip)
                        });
                        match slot {
                            Some(s) => {
                                local.sensor_datagrams += 1;
                                s.pipeline.push(d.payload, now, &mut out);
                            }
                            None => local.unknown_sensor += 1,
                        }
                    }
                    Err(NetError::Fragment) => local.fragments += 1,
                    Err(_) => local.not_udp += 1,
                }
            });
            if n == 0 {
                for s in self.sensors.iter_mut() {
                    s.pipeline.poll_timeout(now, &mut out);
                }
                self.publish(&mut out, &mut local);
                self.store(&local);
                if !poll_armed {
                    let sqe = opcode::PollAdd::new(fd, libc::POLLIN as u32)
                        .build()
                        .user_data(1);
                    // SAFETY: PollAdd references no user memory; the XSK fd stays open for
                    // the ring's lifetime because `self.xsk` outlives `ring` in this function.
                    unsafe { ring.submission().push(&sqe) }
                        .map_err(|_| std::io::Error::other("io_uring submission queue full"))?;
                    poll_armed = true;
                }
                local.waits += 1;
                let args = types::SubmitArgs::new().timespec(&wait);
                match ring.submitter().submit_with_args(1, &args) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) => return Err(e),
                }
                for cqe in ring.completion() {
                    if cqe.user_data() == 1 {
                        poll_armed = false;
                    }
                }
            } else if !out.is_empty() {
                self.publish(&mut out, &mut local);
                self.store(&local);
            } else if local.rx_frames % 1024 < n as u64 {
                self.store(&local);
            }
        }
        for s in self.sensors.iter_mut() {
            s.pipeline.flush(&mut out);
        }
        self.publish(&mut out, &mut local);
        self.store(&local);
        let xdp_statistics = match self.xsk.statistics() {
            Ok(s) => Some(s),
            Err(e) => {
                log::warn!("XDP_STATISTICS: {e}");
                None
            }
        };
        Ok(CaptureExit {
            xdp_statistics,
            xsk: self.xsk.counters().snapshot(),
        })
    }

    fn publish(&mut self, out: &mut Vec<Frame>, local: &mut Local) {
        for frame in out.drain(..) {
            if self.sender.send(frame) {
                local.frames_out += 1;
            } else {
                local.frames_dropped += 1;
            }
        }
    }

    fn store(&self, l: &Local) {
        let c = &self.stats.capture;
        c.rx_frames.store(l.rx_frames, Ordering::Relaxed);
        c.rx_bytes.store(l.rx_bytes, Ordering::Relaxed);
        c.sensor_datagrams
            .store(l.sensor_datagrams, Ordering::Relaxed);
        c.not_udp.store(l.not_udp, Ordering::Relaxed);
        c.fragments.store(l.fragments, Ordering::Relaxed);
        c.unknown_sensor.store(l.unknown_sensor, Ordering::Relaxed);
        c.waits.store(l.waits, Ordering::Relaxed);
        c.frames_out.store(l.frames_out, Ordering::Relaxed);
        c.frames_dropped.store(l.frames_dropped, Ordering::Relaxed);
        for (slot, sc) in self.sensors.iter().zip(self.stats.sensors.iter()) {
            let d = slot.pipeline.counters();
            sc.decoded.store(d.decoded, Ordering::Relaxed);
            sc.malformed.store(d.malformed, Ordering::Relaxed);
            sc.ignored.store(d.ignored, Ordering::Relaxed);
            sc.frames.store(d.frames, Ordering::Relaxed);
            sc.points.store(d.points, Ordering::Relaxed);
        }
    }
}
