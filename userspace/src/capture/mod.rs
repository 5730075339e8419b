//! The decoder thread: one per (interface, queue), and the capture backends that feed it.
//!
//! The thread takes packets in bursts from a [`PacketSource`], strips the Ethernet/IPv4/UDP
//! headers ([`lidarxdp_core::net`]) where the backend delivers whole frames, reassembles IPv4 fragments
//! ([`lidarxdp_core::reassembly`]; Ouster datagrams exceed a 1500-byte MTU), hands each sensor payload
//! to that sensor's [`ScanPipeline`] and pushes finished frames to the publisher through a
//! bounded lock-free queue ([`FrameSender`]). It takes no lock and never blocks on a
//! subscriber. When the source is empty it waits in the source's [`PacketSource::wait`] with a
//! timeout, which also closes a frame whose last packet is late
//! ([`ScanPipeline::poll_timeout`]).
//!
//! Backends (`lidarxdp run --backend`, [`Backend`]); everything after the source is shared:
//! - [`XdpSource`] — AF_XDP, the product: UMEM frames drained from the RX ring and recycled to
//!   the fill ring ([`crate::xsk`]), waits through io_uring (poll on the XSK fd);
//! - [`SocketSource`] — the common driver design: blocking `recvfrom` thread, mutex queue;
//! - [`RecvmmsgSource`] — batched `recvmmsg` with a large `SO_RCVBUF`;
//! - [`UringSource`] — io_uring multishot `recvmsg` into a provided buffer ring.
//!
//! The socket backends exist to measure the AF_XDP path against (issue 4, `cargo xtask
//! bench`); so does [`StallSchedule`], which injects decoder pauses.

use crossbeam_queue::ArrayQueue;
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::{
    publish::FrameSender,
    xsk::{SharedXdpStatisticsValues, XdpStatistics, XskCounters, XskCountersSnapshot},
};
use lidarxdp_core::{
    counters::CounterDesc,
    frame::Frame,
    net::{self, NetError, UdpDatagram},
    reassembly::{Fragment, Reassembler, ReassemblyConfig, SharedReassemblyCounters},
    sensor::SharedDecodeCounters,
    sensor::{DecodeCounters, ScanPipeline},
};

pub mod record;
mod recvmmsg;
mod socket;
mod source;
mod udp;
mod uring;
mod wait;
mod xdp;

pub use record::{RecordConfig, RecordTap, Recorder, RecordingCounters, SharedRecordingCounters};
pub use recvmmsg::RecvmmsgSource;
pub use socket::SocketSource;
pub use source::{Backend, BackendExit, Packet, PacketSource, thread_cpu_ns};
pub use udp::{RcvBuf, UdpSocketConfig};
pub use uring::{UringBuffers, UringSource};
pub use wait::{PollWaiter, WAIT_USEC_RANGE, WaitMode};
pub use xdp::XdpSource;

/// Descriptors taken from the RX ring per burst (DPDK-style burst of 64).
pub const RX_BURST: u32 = 64;

/// One sensor served by a capture thread: its UDP destination port, optional IPv4 source and
/// its decoding pipeline.
pub struct SensorSlot {
    /// UDP destination port the sensor sends data packets to.
    pub port: u16,
    /// A second destination port of the same sensor whose datagrams go to the same pipeline
    /// (RoboSense DIFOP on 7788, which carries the angle calibration), or `None`.
    pub extra_port: Option<u16>,
    /// IPv4 source address of the sensor, or `None` for any source.
    pub source: Option<[u8; 4]>,
    /// The sensor's decoder and scan assembler.
    pub pipeline: ScanPipeline,
    /// The return mode the configuration expects, or `None`. The first time the packets'
    /// own return mode is known and differs, a warning is logged (decoding follows the
    /// packets).
    pub expect_return_mode: Option<lidarxdp_core::sensor::ReturnMode>,
}

/// The capture thread's counters of one (interface, queue): `lidarxdp_capture_*{iface,queue}`.
pub const CAPTURE_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "capture",
    labels: &["iface", "queue"],
};

lidarxdp_core::counter_set! {
    /// A plain copy of a capture thread's [`CaptureCounters`].
    pub struct CaptureSnapshot in CAPTURE_COUNTERS;
    shared
    /// Counters of one capture thread, readable from any thread (relaxed atomics written only
    /// by the capture thread, once per burst or wake-up, so reads are at most one burst stale).
    pub struct CaptureCounters;
    {
        rx_frames: Counter "frames" "Frames taken from the AF_XDP RX ring.",
        rx_bytes: Counter "bytes" "Bytes (whole Ethernet frames) taken from the RX ring.",
        /// Reassembled ones included.
        sensor_datagrams: Counter "datagrams" "UDP datagrams handed to a sensor pipeline.",
        /// Frames or reassembled datagrams.
        not_udp: Counter "frames" "Frames that were not IPv4/UDP or had invalid headers.",
        /// Handed to reassembly (outcomes in [`CaptureStats::reassembly`]).
        fragments: Counter "fragments" "IPv4 fragments received.",
        unknown_sensor: Counter "datagrams" "UDP datagrams that matched no configured sensor.",
        /// They reached a sensor configured without a `source` from another IPv4 source than
        /// the one that sensor's stream comes from (two sensors sending to one port); see
        /// [`SOURCE_SILENCE_NS`]. The first one of each sensor is logged.
        mixed_sources: Counter "datagrams" "UDP datagrams dropped because a second IPv4 source sent to a sensor configured without a source.",
        waits: Counter "waits" "Idle waits in io_uring.",
        frames_out: Counter "frames" "Frames pushed to the publisher queue.",
        frames_dropped: Counter "frames" "Frames dropped because the publisher queue was full.",
        /// SIGHUP, [`Reload`].
        calibration_reloads: Counter "reloads" "Sensor calibrations reloaded on SIGHUP and applied by the capture thread.",
        /// Up to down and down to up, one each: the increase of sysfs `carrier_changes`
        /// (`Documentation/ABI/testing/sysfs-class-net`). Written by [`XdpSource`] when idle,
        /// at most every [`XDP_STATISTICS_PERIOD`]; 0 for the socket backends. An `ip link set
        /// IF down` followed by `up` counts 2.
        link_changes: Counter "transitions" "Carrier transitions of the interface since the AF_XDP socket was bound (sysfs carrier_changes).",
        /// `socket`, `recvmmsg`, `uring`: the datagram did not fit the receive buffer of
        /// `max_datagram` bytes (`MSG_TRUNC`, recv(2)). Written by the source
        /// ([`PacketSource::counters`]); 0 for AF_XDP.
        truncated: Counter "datagrams" "Datagrams longer than the receive buffer (MSG_TRUNC), counted and dropped by a socket backend.",
        /// `socket`: the receive thread found the hand-off queue full and waited for the
        /// decoder; `uring`: the provided buffer ring ran empty (`ENOBUFS`). The packets then
        /// wait in the socket buffer. Written by the source ([`PacketSource::counters`]); 0
        /// for AF_XDP and `recvmmsg`.
        backpressure: Counter "events" "Times a socket backend could not take packets because its hand-off queue or buffer ring was full.",
        /// Benchmarks only ([`StallSchedule`]); 0 otherwise.
        stalls: Counter "stalls" "Pauses injected into the capture thread by the stall schedule (benchmarks).",
    }
}

lidarxdp_core::counter_set! {
    /// The capture thread's own per-sensor counters (group [`lidarxdp_core::sensor::SENSOR_COUNTERS`],
    /// beside the pipeline's [`DecodeCounters`]).
    pub struct SensorTraffic in lidarxdp_core::sensor::SENSOR_COUNTERS;
    shared
    /// [`SensorTraffic`] shared with other threads.
    pub struct SharedSensorTraffic;
    {
        /// Of the pipeline's `packets`.
        bytes: Counter "bytes" "UDP payload bytes of the datagrams handed to the sensor's pipeline.",
        /// Of the pipeline's `packets`.
        reassembled: Counter "datagrams" "Datagrams reassembled from IPv4 fragments.",
    }
}

/// One sensor's counters, published by the capture thread (relaxed atomics).
#[derive(Debug)]
pub struct SensorCounters {
    /// Bytes and reassembled datagrams.
    pub traffic: SharedSensorTraffic,
    /// The pipeline's counters (across calibration reloads).
    pub decode: SharedDecodeCounters,
    /// The vendor decoder's own counters ([`ScanPipeline::vendor_counter_descs`]), in the
    /// order of `vendor_descs` (across calibration reloads, like `decode`).
    pub vendor: Box<[AtomicU64]>,
    /// Descriptors of `vendor`.
    pub vendor_descs: &'static [CounterDesc],
}

impl SensorCounters {
    /// Zeroed counters for a sensor decoded by `pipeline`.
    pub fn new(pipeline: &ScanPipeline) -> Self {
        let vendor_descs = pipeline.vendor_counter_descs();
        SensorCounters {
            traffic: SharedSensorTraffic::default(),
            decode: SharedDecodeCounters::default(),
            vendor: vendor_descs.iter().map(|_| AtomicU64::new(0)).collect(),
            vendor_descs,
        }
    }

    /// The vendor counters now, with their descriptors.
    pub fn vendor_snapshot(&self) -> Vec<(&'static CounterDesc, u64)> {
        self.vendor_descs
            .iter()
            .zip(self.vendor.iter())
            .map(|(d, v)| (d, v.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Everything the capture thread reports, shared with the main thread.
#[derive(Debug, Default)]
pub struct CaptureStats {
    /// Thread-level counters.
    pub capture: CaptureCounters,
    /// One entry per configured sensor, in [`SensorSlot`] order.
    pub sensors: Vec<SensorCounters>,
    /// IPv4 reassembly outcomes of this thread.
    pub reassembly: SharedReassemblyCounters,
    /// The socket's `XDP_STATISTICS`, refreshed by the capture thread when it goes idle (at
    /// most every [`XDP_STATISTICS_PERIOD`]) and at exit.
    pub xdp_statistics: SharedXdpStatistics,
}

/// Minimum interval between two `XDP_STATISTICS` reads by the capture thread.
pub const XDP_STATISTICS_PERIOD: Duration = Duration::from_millis(100);

/// The AF_XDP socket's counters shared with other threads: the kernel's [`XdpStatistics`] and
/// ours ([`XskCountersSnapshot`]), stored together by the capture thread; `valid` is set after
/// the first store (never for the socket backends).
#[derive(Debug, Default)]
pub struct SharedXdpStatistics {
    /// True once a snapshot has been stored.
    pub valid: AtomicBool,
    /// The kernel's counters.
    pub kernel: SharedXdpStatisticsValues,
    /// Ours.
    pub socket: XskCounters,
}

impl SharedXdpStatistics {
    /// Publishes a snapshot.
    pub fn store(&self, s: &XdpStatistics, ours: &XskCountersSnapshot) {
        self.kernel.store(s);
        self.socket.store(ours);
        self.valid.store(true, Ordering::Release);
    }

    /// Reads the last published snapshot, `None` before the first.
    pub fn load(&self) -> Option<(XdpStatistics, XskCountersSnapshot)> {
        if !self.valid.load(Ordering::Acquire) {
            return None;
        }
        Some((self.kernel.snapshot(), self.socket.snapshot()))
    }
}

/// What a capture thread reports when it ends.
#[derive(Clone, Debug, Default)]
pub struct CaptureExit {
    /// The socket's `XDP_STATISTICS` at exit (`None` for socket backends, or if the
    /// getsockopt failed).
    pub xdp_statistics: Option<XdpStatistics>,
    /// The AF_XDP socket's own RX counters at exit (zero for socket backends).
    pub xsk: XskCountersSnapshot,
    /// The backend's own report: datagrams received, receive buffer, thread CPU times (its
    /// counters are in [`CaptureStats::capture`]).
    pub backend: BackendExit,
}

/// A pause injected into the decoder thread to measure how long a stall each backend absorbs
/// without loss (issue 4, scenario 3): the thread sleeps `pause` once every `every`, the first
/// time `every` after it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallSchedule {
    /// Length of one pause.
    pub pause: Duration,
    /// Interval between the starts of two pauses (> `pause`).
    pub every: Duration,
}

impl std::str::FromStr for StallSchedule {
    type Err = String;
    /// `MS:EVERY_MS`, both integers in milliseconds, `1 <= MS < EVERY_MS <= 3_600_000`.
    fn from_str(s: &str) -> Result<Self, String> {
        let err = || {
            format!(
                "--stall {s:?}: expected MS:EVERY_MS in milliseconds with 1 <= MS < EVERY_MS <= 3600000"
            )
        };
        let (a, b) = s.split_once(':').ok_or_else(err)?;
        let pause: u64 = a.trim().parse().map_err(|_| err())?;
        let every: u64 = b.trim().parse().map_err(|_| err())?;
        if pause == 0 || pause >= every || every > 3_600_000 {
            return Err(err());
        }
        Ok(Self {
            pause: Duration::from_millis(pause),
            every: Duration::from_millis(every),
        })
    }
}

/// The state moved into the capture thread.
pub struct CaptureWorker<S: PacketSource> {
    /// Where packets come from: AF_XDP ([`XdpSource`]) or a socket baseline.
    pub source: S,
    /// Sensors expected on this queue.
    pub sensors: Vec<SensorSlot>,
    /// Where finished frames go.
    pub sender: FrameSender,
    /// Where the sensors' decoders take new frames' point buffers (the publisher's
    /// [`crate::publish::BufferPool`], which gets them back once the frames are sent); given to
    /// every pipeline of this thread, reloaded ones included.
    pub buffers: Arc<dyn lidarxdp_core::scan::BufferSource>,
    /// Idle wait before re-checking timeouts and the stop flag.
    pub idle_wait: Duration,
    /// Set by the main thread to make the worker flush and return.
    pub stop: Arc<AtomicBool>,
    /// Shared counters (must have one `sensors` entry per slot).
    pub stats: Arc<CaptureStats>,
    /// Injected decoder pauses (benchmarks), or `None`.
    pub stall: Option<StallSchedule>,
    /// New pipelines (calibration reloaded on SIGHUP) for this thread's sensor slots; the
    /// thread takes them between bursts ([`Reload`]). Capacity: one per slot is enough.
    pub reloads: Arc<ArrayQueue<Reload>>,
    /// `--record-pcap`: every datagram handed to a sensor's pipeline is also queued here, with
    /// the burst's receive time ([`record`] module documentation), or `None`.
    pub record: Option<RecordTap>,
}

/// A sensor pipeline rebuilt from a re-read calibration, for slot `slot` of a capture thread.
///
/// The reload applies at the sensor's next frame boundary (`CaptureWorker::apply_reloads`):
/// the old pipeline finishes its frame in progress, the new
/// one (which decoded the same datagrams meanwhile) continues with the next frame; counters
/// and the frame sequence carry over.
pub struct Reload {
    /// Index into [`CaptureWorker::sensors`].
    pub slot: usize,
    /// The replacement.
    pub pipeline: ScanPipeline,
}

/// Limits of the capture thread's IPv4 reassembler: the defaults (16 datagrams in flight, up
/// to 65,515-byte payloads, 1 s timeout), about 1 MiB allocated once when the thread starts.
pub const REASSEMBLY: ReassemblyConfig = ReassemblyConfig {
    max_datagrams: lidarxdp_core::reassembly::DEFAULT_MAX_DATAGRAMS,
    max_payload_len: lidarxdp_core::reassembly::MAX_PAYLOAD_LEN,
    timeout_ns: lidarxdp_core::reassembly::DEFAULT_TIMEOUT_NS,
};

/// CPUs a thread can be pinned to: `0..usable_cpus()` (the CPUs available to this process,
/// capped at `CPU_SETSIZE`; at least 1).
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(libc::CPU_SETSIZE as usize)
}

/// Pins the calling thread to CPU `cpu` (sched_setaffinity(2)).
///
/// Errors: `cpu` is not below this machine's CPU count (`InvalidInput`, naming the valid range),
/// or the call fails (e.g. the CPU is outside the process's cpuset).
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    let n = usable_cpus();
    if cpu >= n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "CPU {cpu} is out of range; valid 0..={} on this machine",
                n - 1
            ),
        ));
    }
    crate::sys::cpu::pin_current_thread(cpu)
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
    /// The thread's counters (`link_changes` is the source's, see [`CaptureWorker::store`]).
    c: CaptureSnapshot,
    /// Per sensor slot configured without a source: the source its stream comes from, the
    /// host time of its last datagram, and whether a second source was logged.
    stream_source: Vec<Option<StreamSource>>,
    /// Per sensor slot: bytes and reassembled datagrams.
    sensors: Vec<SensorTraffic>,
    /// Per sensor slot: the return mode was compared with the expected one.
    mode_checked: Vec<bool>,
    /// Per sensor slot: counters of the pipelines replaced by reloads (as published).
    retired: Vec<DecodeCounters>,
    /// Per sensor slot: the current pipeline's counters when it took over (the datagrams it
    /// decoded in the shadow of its predecessor, not published).
    discount: Vec<DecodeCounters>,
    /// Per sensor slot: the vendor counters ([`ScanPipeline::visit_vendor_counters`]) of the
    /// pipelines replaced by reloads, as published (empty: zeros).
    vendor_retired: Vec<Vec<u64>>,
    /// Per sensor slot: the current pipeline's vendor counters when it took over.
    vendor_discount: Vec<Vec<u64>>,
    /// Per sensor slot: a reloaded pipeline waiting for the current one's next frame
    /// boundary (see [`CaptureWorker::apply_reloads`]).
    pending: Vec<Option<ScanPipeline>>,
    /// Per sensor slot with a pending pipeline: (the current pipeline, the pending one) has
    /// emitted a frame since the reload. The swap waits for both (see [`dispatch`]).
    pending_emitted: Vec<(bool, bool)>,
    /// Per sensor slot: host time of the last datagram, ns (0 = none yet).
    last_rx_ns: Vec<u64>,
    /// Frames of pending pipelines (discarded).
    shadow_out: Vec<Frame>,
}

impl Local {
    fn new(sensors: usize) -> Self {
        Local {
            sensors: vec![SensorTraffic::default(); sensors],
            mode_checked: vec![false; sensors],
            retired: vec![DecodeCounters::default(); sensors],
            discount: vec![DecodeCounters::default(); sensors],
            vendor_retired: vec![Vec::new(); sensors],
            vendor_discount: vec![Vec::new(); sensors],
            pending: vec![None; sensors],
            pending_emitted: vec![(false, false); sensors],
            last_rx_ns: vec![0; sensors],
            ..Local::default()
        }
    }

    /// The counters published for slot `i`: its pipeline's minus its shadow work, plus its
    /// retired predecessors'.
    fn published(&self, i: usize, pipeline: &ScanPipeline) -> DecodeCounters {
        let d = self.discount.get(i).copied().unwrap_or_default();
        let mut p = pipeline.counters().minus(&d);
        p.add(&self.retired.get(i).copied().unwrap_or_default());
        p
    }

    /// Calls `f(k, value)` for each vendor counter `k` of slot `i` as published, as
    /// [`Self::published`] does for the [`DecodeCounters`].
    fn published_vendor(&self, i: usize, pipeline: &ScanPipeline, f: &mut dyn FnMut(usize, u64)) {
        let at = |v: Option<&Vec<u64>>, k: usize| v.and_then(|v| v.get(k)).copied().unwrap_or(0);
        let (d, r) = (self.vendor_discount.get(i), self.vendor_retired.get(i));
        let mut k = 0;
        pipeline.visit_vendor_counters(&mut |_, v| {
            f(k, v.saturating_sub(at(d, k)).wrapping_add(at(r, k)));
            k += 1;
        });
    }

    /// Swaps slot `i`'s pending pipeline in (at a frame boundary of the current one).
    fn take_over(&mut self, i: usize, slot: &mut SensorSlot) {
        let Some(new) = self.pending.get_mut(i).and_then(Option::take) else {
            return;
        };
        let mut retired = Vec::new();
        self.published_vendor(i, &slot.pipeline, &mut |_, v| retired.push(v));
        let mut shadow = Vec::new();
        new.visit_vendor_counters(&mut |_, v| shadow.push(v));
        if let (Some(r), Some(d)) = (
            self.vendor_retired.get_mut(i),
            self.vendor_discount.get_mut(i),
        ) {
            (*r, *d) = (retired, shadow);
        }
        let published = self.published(i, &slot.pipeline);
        if let Some(r) = self.retired.get_mut(i) {
            *r = published;
        }
        if let Some(d) = self.discount.get_mut(i) {
            *d = *new.counters();
        }
        slot.pipeline = new;
        self.c.calibration_reloads += 1;
    }

    /// Renumbers `frames` just emitted by slot `i`'s pipeline: after its predecessors' frames,
    /// not counting the frames it emitted in their shadow.
    fn renumber(&self, i: usize, frames: &mut [Frame]) {
        let retired = self.retired.get(i).map_or(0, |r| r.frames);
        let shadow = self.discount.get(i).map_or(0, |d| d.frames);
        if retired != 0 || shadow != 0 {
            for f in frames {
                f.header.sequence = f.header.sequence.saturating_sub(shadow) + retired;
            }
        }
    }
}

/// The slot a datagram to `port` from `src` belongs to, as the XDP program decides: a sensor
/// bound to this exact source first, else the first one taking any source. One pass over the
/// slots' `(port, extra_port, source)`.
fn find_slot(
    keys: impl Iterator<Item = (u16, Option<u16>, Option<[u8; 4]>)>,
    port: u16,
    src: [u8; 4],
) -> Option<usize> {
    let mut any = None;
    for (i, (p, extra, source)) in keys.enumerate() {
        if p != port && extra != Some(port) {
            continue;
        }
        match source {
            Some(ip) if ip == src => return Some(i),
            None if any.is_none() => any = Some(i),
            _ => {}
        }
    }
    any
}

/// Hands one UDP datagram to the sensor it belongs to, or counts it as unknown. Returns
/// whether a sensor's pipeline took it.
fn dispatch(
    sensors: &mut [SensorSlot],
    local: &mut Local,
    d: &UdpDatagram<'_>,
    reassembled: bool,
    now: u64,
    out: &mut Vec<Frame>,
) -> bool {
    let keys = sensors.iter().map(|s| (s.port, s.extra_port, s.source));
    match find_slot(keys, d.dst_port, d.src_ip) {
        Some(i) if sensors[i].source.is_none() && !one_source(local, i, d, now) => {
            local.c.mixed_sources += 1;
            false
        }
        Some(i) => {
            local.c.sensor_datagrams += 1;
            if let Some(t) = local.sensors.get_mut(i) {
                t.reassembled += u64::from(reassembled);
                t.bytes += d.payload.len() as u64;
            }
            let s = &mut sensors[i];
            let from = out.len();
            s.pipeline.push(d.payload, now, out);
            local.renumber(i, &mut out[from..]);
            if let Some(Some(p)) = local.pending.get_mut(i) {
                // The reloaded pipeline decodes in the shadow. It takes over once the current
                // pipeline has published the frame the reload arrived in and the reloaded one
                // has emitted (and discarded) its own first frame, which began mid-frame: then
                // its frame in progress is the next one, whole, and no frame is published
                // twice. Velodyne and RoboSense end both frames at the same packet; an Ouster
                // frame that completes early is published by the current pipeline while the
                // reloaded one holds its partial copy open for the reorder window.
                p.push(d.payload, now, &mut local.shadow_out);
                let new_emitted = !local.shadow_out.is_empty();
                local.shadow_out.clear();
                if let Some(e) = local.pending_emitted.get_mut(i) {
                    e.0 |= out.len() > from;
                    e.1 |= new_emitted;
                    if *e == (true, true) {
                        local.take_over(i, s);
                    }
                }
            }
            if let Some(t) = local.last_rx_ns.get_mut(i) {
                *t = now;
            }
            if let (Some(want), Some(false)) = (s.expect_return_mode, local.mode_checked.get(i))
                && let Some(got) = s.pipeline.return_mode()
            {
                local.mode_checked[i] = true;
                if got != want {
                    log::warn!(
                        "sensor on port {}: packets are in return mode {got}, the configuration \
                         expects {want}; decoding follows the packets",
                        s.port
                    );
                }
            }
            true
        }
        None => {
            local.c.unknown_sensor += 1;
            false
        }
    }
}

/// Host time without a datagram from a sensor's source after which a sensor configured without
/// a `source` accepts a new one (the sensor was re-addressed or replaced): 1 s, ns.
pub const SOURCE_SILENCE_NS: u64 = 1_000_000_000;

/// The source a sensor configured without one is receiving from.
#[derive(Clone, Copy, Debug)]
struct StreamSource {
    ip: [u8; 4],
    last_ns: u64,
    warned: bool,
}

/// For slot `i` (configured without a source): whether `d` continues the slot's stream. The
/// first datagram fixes the stream's source; a datagram from another source is refused (two
/// sensors on one port must never be mixed into one frame), and the first such datagram is
/// logged, unless the stream's source has been silent for [`SOURCE_SILENCE_NS`], in which case
/// the new source takes over (logged).
fn one_source(local: &mut Local, i: usize, d: &UdpDatagram<'_>, now: u64) -> bool {
    if local.stream_source.len() <= i {
        local.stream_source.resize(i + 1, None);
    }
    let Some(entry) = local.stream_source.get_mut(i) else {
        return true;
    };
    let ip = |a: [u8; 4]| std::net::Ipv4Addr::from(a);
    match entry {
        None => {
            *entry = Some(StreamSource {
                ip: d.src_ip,
                last_ns: now,
                warned: false,
            });
            true
        }
        Some(s) if s.ip == d.src_ip => {
            s.last_ns = now;
            true
        }
        Some(s) if now.saturating_sub(s.last_ns) >= SOURCE_SILENCE_NS => {
            log::warn!(
                "sensor on port {}: its source changed from {} (silent for {} ms) to {}",
                d.dst_port,
                ip(s.ip),
                now.saturating_sub(s.last_ns) / 1_000_000,
                ip(d.src_ip)
            );
            *s = StreamSource {
                ip: d.src_ip,
                last_ns: now,
                warned: false,
            };
            true
        }
        Some(s) => {
            if !s.warned {
                s.warned = true;
                log::warn!(
                    "sensor on port {}: datagrams from a second source {} while {} is sending; \
                     they are dropped (counter mixed_sources): configure `source` for each \
                     sensor on this port",
                    d.dst_port,
                    ip(d.src_ip),
                    ip(s.ip)
                );
            }
            false
        }
    }
}

/// Swaps slot `i`'s pending pipeline in if the sensor sent nothing for its frame timeout (its
/// frame in progress, if any, is closed first).
fn take_over_if_idle(
    local: &mut Local,
    i: usize,
    slot: &mut SensorSlot,
    now: u64,
    out: &mut Vec<Frame>,
) {
    let idle = local
        .last_rx_ns
        .get(i)
        .is_none_or(|&t| t == 0 || now.saturating_sub(t) > slot.pipeline.frame_timeout_ns());
    if idle && local.pending.get(i).is_some_and(Option::is_some) {
        let from = out.len();
        slot.pipeline.flush(out);
        local.renumber(i, &mut out[from..]);
        // The reloaded pipeline's own copy of that frame is discarded, so it is not published
        // a second time by the reloaded pipeline's next timeout or flush.
        if let Some(Some(p)) = local.pending.get_mut(i) {
            p.flush(&mut local.shadow_out);
            local.shadow_out.clear();
        }
        local.take_over(i, slot);
    }
}

/// Upper bound on the datagrams drained from the source after `stop` is set, so a sender that
/// keeps sending cannot keep the thread from exiting.
const FINAL_DRAIN_MAX: u64 = 1 << 20;

impl<S: PacketSource> CaptureWorker<S> {
    /// Runs the capture loop until `stop` is set, drains what the source still holds (up to
    /// 2^20 datagrams), flushes the frames in progress and returns the final counters.
    ///
    /// Errors: those of the source's receive and wait calls (e.g. `io_uring_setup`, `recvmmsg`).
    pub fn run(mut self) -> std::io::Result<CaptureExit> {
        // Frames' point buffers come from the publisher's pool (no allocation once warm).
        for s in &mut self.sensors {
            s.pipeline.set_buffer_source(self.buffers.clone());
        }
        let mut local = Local::new(self.sensors.len());
        let mut reasm = Reassembler::new(REASSEMBLY);
        let mut out: Vec<Frame> = Vec::with_capacity(4);
        let mut next_stall = self.stall.map(|s| std::time::Instant::now() + s.every);
        while !self.stop.load(Ordering::Relaxed) {
            if let (Some(s), Some(due)) = (self.stall, next_stall.as_mut())
                && std::time::Instant::now() >= *due
            {
                std::thread::sleep(s.pause);
                local.c.stalls += 1;
                *due += s.every;
            }
            if !self.reloads.is_empty() {
                self.apply_reloads(&mut local, &mut out);
            }
            let now = realtime_ns();
            let n = self.burst(&mut local, &mut reasm, now, &mut out)?;
            if n == 0 {
                for (i, s) in self.sensors.iter_mut().enumerate() {
                    let from = out.len();
                    s.pipeline.poll_timeout(now, &mut out);
                    local.renumber(i, &mut out[from..]);
                    take_over_if_idle(&mut local, i, s, now, &mut out);
                }
                reasm.poll_timeout(now);
                self.publish(&mut out, &mut local);
                self.store(&local, &reasm);
                self.source.on_idle(&self.stats);
                local.c.waits += 1;
                self.source.wait(self.idle_wait)?;
            } else if !out.is_empty() {
                self.publish(&mut out, &mut local);
                self.store(&local, &reasm);
            } else if local.c.rx_frames % 1024 < n as u64 {
                reasm.poll_timeout(now);
                self.store(&local, &reasm);
            }
        }
        let drained_from = local.c.rx_frames;
        while local.c.rx_frames - drained_from < FINAL_DRAIN_MAX {
            let now = realtime_ns();
            if self.burst(&mut local, &mut reasm, now, &mut out)? == 0 {
                break;
            }
            self.publish(&mut out, &mut local);
        }
        for (i, s) in self.sensors.iter_mut().enumerate() {
            let from = out.len();
            s.pipeline.flush(&mut out);
            local.renumber(i, &mut out[from..]);
        }
        self.publish(&mut out, &mut local);
        let mut exit = self.source.finish(&self.stats);
        // After `finish`: the socket backend's receive threads have stopped counting.
        self.store(&local, &reasm);
        exit.backend.decoder_cpu_ns = thread_cpu_ns();
        if exit.backend.receiver_cpu_ns.is_none() {
            exit.backend.receiver_cpu_ns = Some(exit.backend.decoder_cpu_ns);
        }
        Ok(exit)
    }

    /// Takes the reloaded pipelines waiting in [`Self::reloads`]. A reload applies at the
    /// sensor's next frame boundary, never cutting the frame in progress: the new pipeline
    /// waits in the slot and decodes the same datagrams in the shadow of the current one (its
    /// frames discarded) until the current pipeline emits a frame; then it takes over, with
    /// the next frame already in progress under the new calibration. A sensor that sent
    /// nothing for its frame timeout (or ever) has no frame in progress: its reload applies at
    /// once. A newer reload replaces one still waiting. Frame sequence numbers and the
    /// published counters continue across the swap (shadow work is not counted).
    fn apply_reloads(&mut self, local: &mut Local, out: &mut Vec<Frame>) {
        let now = realtime_ns();
        while let Some(r) = self.reloads.pop() {
            let (Some(slot), Some(pending)) =
                (self.sensors.get_mut(r.slot), local.pending.get_mut(r.slot))
            else {
                log::warn!("calibration reload for unknown sensor slot {}", r.slot);
                continue;
            };
            let mut pipeline = r.pipeline;
            pipeline.set_buffer_source(self.buffers.clone());
            *pending = Some(pipeline);
            if let Some(e) = local.pending_emitted.get_mut(r.slot) {
                *e = (false, false);
            }
            take_over_if_idle(local, r.slot, slot, now, out);
        }
        self.publish(out, local);
    }

    /// Takes one burst from the source and dispatches it; returns the packets taken.
    fn burst(
        &mut self,
        local: &mut Local,
        reasm: &mut Reassembler,
        now: u64,
        out: &mut Vec<Frame>,
    ) -> std::io::Result<usize> {
        let sensors = &mut self.sensors;
        let record = self.record.as_ref();
        self.source
            .recv_burst(RX_BURST, &mut |packet| match packet {
                Packet::Udp(d) => {
                    local.c.rx_frames += 1;
                    local.c.rx_bytes += d.payload.len() as u64;
                    if dispatch(sensors, local, &d, false, now, out)
                        && let Some(r) = record
                    {
                        r.datagram(now, &d, &[0; 12]);
                    }
                }
                Packet::Ethernet(bytes) => {
                    local.c.rx_frames += 1;
                    local.c.rx_bytes += bytes.len() as u64;
                    match net::parse_udp_ipv4(bytes) {
                        Ok(d) => {
                            if dispatch(sensors, local, &d, false, now, out)
                                && let Some(r) = record
                            {
                                r.ethernet(now, bytes);
                            }
                        }
                        Err(NetError::Fragment) => {
                            local.c.fragments += 1;
                            let ip = net::parse_ipv4(bytes);
                            let frag = ip.as_ref().ok().and_then(Fragment::from_ipv4);
                            // Failures are counted by the reassembler.
                            if let Some(f) = frag
                                && let Ok(Some(whole)) = reasm.push(&f, now)
                            {
                                match whole.udp() {
                                    Ok(d) => {
                                        if dispatch(sensors, local, &d, true, now, out)
                                            && let Some(r) = record
                                        {
                                            // The last fragment's MAC addresses.
                                            let macs = bytes
                                                .first_chunk::<12>()
                                                .copied()
                                                .unwrap_or([0; 12]);
                                            r.datagram(now, &d, &macs);
                                        }
                                    }
                                    Err(_) => local.c.not_udp += 1,
                                }
                            }
                        }
                        Err(_) => local.c.not_udp += 1,
                    }
                }
            })
    }

    fn publish(&mut self, out: &mut Vec<Frame>, local: &mut Local) {
        for frame in out.drain(..) {
            if self.sender.send(frame) {
                local.c.frames_out += 1;
            } else {
                local.c.frames_dropped += 1;
            }
        }
    }

    /// Publishes the thread's counters and the source's own ([`PacketSource::counters`]; the
    /// source's `link_changes` stays as the source stored it).
    fn store(&self, l: &Local, reasm: &Reassembler) {
        let c = &self.stats.capture;
        let mut snap = CaptureSnapshot {
            link_changes: c.link_changes.load(Ordering::Relaxed),
            ..l.c
        };
        self.source.counters(&mut snap);
        c.store(&snap);
        self.stats.reassembly.store(reasm.counters());
        for (i, ((slot, sc), t)) in self
            .sensors
            .iter()
            .zip(self.stats.sensors.iter())
            .zip(l.sensors.iter())
            .enumerate()
        {
            sc.traffic.store(t);
            sc.decode.store(&l.published(i, &slot.pipeline));
            l.published_vendor(i, &slot.pipeline, &mut |k, v| {
                if let Some(a) = sc.vendor.get(k) {
                    a.store(v, Ordering::Relaxed);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Local, SOURCE_SILENCE_NS, SensorSlot, dispatch, find_slot, one_source, take_over_if_idle,
    };
    use lidarxdp_core::frame::Frame;
    use lidarxdp_core::net::UdpDatagram;
    use lidarxdp_core::sensor::{ScanPipeline, SensorConfig, SensorModel};

    #[test]
    fn a_second_source_on_a_sourceless_sensor_is_refused_and_counted_once_warned() {
        let d = |src| UdpDatagram {
            src_ip: src,
            dst_ip: [10, 0, 0, 1],
            src_port: 2368,
            dst_port: 2368,
            payload: &[],
        };
        const A: [u8; 4] = [192, 168, 1, 201];
        const B: [u8; 4] = [192, 168, 1, 202];
        let mut l = Local::default();
        let ms = 1_000_000;
        assert!(one_source(&mut l, 1, &d(A), 0));
        assert!(!one_source(&mut l, 1, &d(B), ms));
        assert!(one_source(&mut l, 1, &d(A), 2 * ms));
        assert!(!one_source(&mut l, 1, &d(B), 3 * ms));
        assert!(l.stream_source[1].unwrap().warned);
        // Slot 0 has its own stream.
        assert!(one_source(&mut l, 0, &d(B), 3 * ms));
        // A silent for the whole window: B takes over, and A is now the foreign one.
        assert!(!one_source(
            &mut l,
            1,
            &d(B),
            2 * ms + SOURCE_SILENCE_NS - 1
        ));
        assert!(one_source(&mut l, 1, &d(B), 2 * ms + SOURCE_SILENCE_NS));
        assert!(!one_source(&mut l, 1, &d(A), 3 * ms + SOURCE_SILENCE_NS));
    }

    fn vlp16(max_range_m: f32) -> ScanPipeline {
        let mut c = SensorConfig::new(
            0,
            SensorModel::Vlp16,
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
            ),
        );
        c.max_range_m = max_range_m;
        crate::calibration::pipeline(&c).unwrap()
    }

    /// The shared VLP-16 dual-return capture's payloads with their pcap times (ns).
    fn vlp16_dual() -> Vec<(Vec<u8>, u64)> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap"
        );
        let (d, _) = crate::replay::read_udp_datagrams(path.as_ref(), None).unwrap();
        d.into_iter()
            .map(|d| (d.payload, d.timestamp.as_nanos() as u64))
            .collect()
    }

    /// A VLP-16 slot on port 2368, any source, range gate (0, 300) m.
    fn vlp16_slot() -> SensorSlot {
        SensorSlot {
            port: 2368,
            extra_port: None,
            source: None,
            pipeline: vlp16(300.0),
            expect_return_mode: None,
        }
    }

    /// Pushes `payloads` (host time = pcap time) through `dispatch`, as the capture loop does.
    fn feed(slot: &mut [SensorSlot], local: &mut Local, payloads: &[(Vec<u8>, u64)]) -> Vec<Frame> {
        let mut out = Vec::new();
        for (p, t) in payloads {
            let d = UdpDatagram {
                src_ip: [192, 168, 1, 201],
                dst_ip: [192, 168, 1, 100],
                src_port: 2368,
                dst_port: 2368,
                payload: p,
            };
            dispatch(slot, local, &d, false, *t, &mut out);
        }
        out
    }

    /// A reload arriving mid-frame applies at the next frame boundary: the frame in progress
    /// is finished by the old pipeline (whole, as without a reload), every later frame is the
    /// new pipeline's (as decoding with it from the start), sequence and counters continue.
    #[test]
    fn reload_applies_at_the_next_frame_boundary() {
        let payloads = vlp16_dual();
        // Offline references: all old (300 m), all new (a 10 m range: fewer points).
        let decode = |mut p: ScanPipeline| {
            let mut out = Vec::new();
            for (x, t) in &payloads {
                p.push(x, *t, &mut out);
            }
            p.flush(&mut out);
            out
        };
        let old = decode(vlp16(300.0));
        let new = decode(vlp16(10.0));
        assert_eq!(old.len(), 4);
        assert!(new[2].points.len() < old[2].points.len());
        // Frame 1 closes at packet 302 (its completing packet); the reload arrives at 250.
        let mut slots = vec![vlp16_slot()];
        let mut local = Local::new(1);
        // As if an earlier reload had retired a pipeline with 7 rate mismatches.
        local.vendor_retired[0] = vec![7];
        let mut got = feed(&mut slots, &mut local, &payloads[..250]);
        assert_eq!(got.len(), 1);
        local.pending[0] = Some(vlp16(10.0));
        let mut out = Vec::new();
        take_over_if_idle(
            &mut local,
            0,
            &mut slots[0],
            payloads[249].1 + 1_000,
            &mut out,
        );
        assert!(
            out.is_empty() && local.c.calibration_reloads == 0,
            "not idle"
        );
        got.extend(feed(&mut slots, &mut local, &payloads[250..]));
        assert_eq!(local.c.calibration_reloads, 1);
        slots[0].pipeline.flush(&mut out);
        local.renumber(0, &mut out);
        got.extend(out);
        let seq: Vec<u64> = got.iter().map(|f| f.header.sequence).collect();
        assert_eq!(seq, vec![0, 1, 2, 3]);
        // Frames 0 and 1 as the old pipeline, 2 and 3 as the new one, each whole.
        assert_eq!(got[0], old[0]);
        assert_eq!(got[1], old[1]);
        for k in 2..4 {
            let mut want = new[k].clone();
            want.header.sequence = k as u64;
            assert_eq!(got[k], want, "frame {k}");
        }
        // Published counters: every datagram once, frames as published.
        let c = local.published(0, &slots[0].pipeline);
        assert_eq!((c.packets, c.decoded, c.frames), (603, 603, 4));
        let points: usize = got.iter().map(|f| f.points.len()).sum();
        assert_eq!(c.points, points as u64);
        // The vendor counters (Velodyne `rate_mismatches`) carry over the swap too.
        let mut vendor = Vec::new();
        local.published_vendor(0, &slots[0].pipeline, &mut |k, v| vendor.push((k, v)));
        assert_eq!(vendor, [(0, 7)]);
        assert_eq!(
            (&local.vendor_retired[0], &local.vendor_discount[0]),
            (&vec![7], &vec![0])
        );
    }

    /// A sensor that sent nothing for its frame timeout takes its reload at once.
    #[test]
    fn reload_of_an_idle_sensor_applies_at_once() {
        let mut slot = vlp16_slot();
        let mut local = Local::new(1);
        local.pending[0] = Some(vlp16(10.0));
        let mut out = Vec::new();
        take_over_if_idle(&mut local, 0, &mut slot, 1_000_000_000, &mut out);
        assert_eq!(local.c.calibration_reloads, 1);
        assert!(local.pending[0].is_none() && out.is_empty());
    }

    /// A reload that arrives mid-frame, then silence: the current pipeline's partial frame is
    /// published once at the take-over, and the reloaded pipeline's shadow copy of it is never
    /// published (neither by its timeout nor by its flush).
    #[test]
    fn reload_then_silence_publishes_the_partial_frame_once() {
        let payloads = vlp16_dual();
        let mut slots = vec![vlp16_slot()];
        let mut local = Local::new(1);
        // As if an earlier reload had retired a pipeline with 7 rate mismatches.
        local.vendor_retired[0] = vec![7];
        let mut got = feed(&mut slots, &mut local, &payloads[..250]);
        assert_eq!(got.len(), 1);
        local.pending[0] = Some(vlp16(10.0));
        got.extend(feed(&mut slots, &mut local, &payloads[250..270]));
        assert_eq!((got.len(), local.c.calibration_reloads), (1, 0));
        let last = payloads[269].1;
        let mut out = Vec::new();
        take_over_if_idle(&mut local, 0, &mut slots[0], last + 1_000_000_000, &mut out);
        assert_eq!(local.c.calibration_reloads, 1);
        // Exactly the old pipeline's frame 1 closed partial after packet 269, as decoding the
        // first 270 packets alone gives it.
        let mut alone = vlp16(300.0);
        let mut want = Vec::new();
        for (x, t) in &payloads[..270] {
            alone.push(x, *t, &mut want);
        }
        alone.flush(&mut want);
        assert_eq!(want.len(), 2);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0], want[1]);
        let n = out.len();
        slots[0]
            .pipeline
            .poll_timeout(last + 2_000_000_000, &mut out);
        slots[0].pipeline.flush(&mut out);
        assert_eq!(out.len(), n, "the shadow copy was published");
        // Packets after the silence decode with the new pipeline, numbered on.
        let after = feed(&mut slots, &mut local, &payloads[270..]);
        assert!(!after.is_empty());
        assert_eq!(after[0].header.sequence, 2);
    }

    #[test]
    fn exact_source_wins_over_any_source_whatever_the_order() {
        const A: [u8; 4] = [192, 168, 1, 201];
        const B: [u8; 4] = [192, 168, 1, 202];
        let keys = [
            (2368, None, None),
            (2368, None, Some(A)),
            (2369, Some(7788), Some(B)),
        ];
        let find = |port, src| find_slot(keys.iter().copied(), port, src);
        assert_eq!(find(2368, A), Some(1));
        assert_eq!(find(2368, B), Some(0));
        assert_eq!(find(2369, B), Some(2));
        assert_eq!(find(7788, B), Some(2));
        assert_eq!(find(7788, A), None);
        assert_eq!(find(2370, A), None);
    }
}
