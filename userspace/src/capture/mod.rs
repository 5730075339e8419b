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
//! Time: each burst is stamped once with both host clocks ([`crate::sys::clock::host_time`]).
//! Every timeout and interval (frame silence, duplicates, reassembly, source silence) runs on
//! CLOCK_MONOTONIC; CLOCK_REALTIME only stamps what is published (a frame's `host_ns`,
//! `--stamp host`, a Velodyne's hour) and the record times of `--record`. So a step of the
//! wall clock (PTP, chrony) neither closes every open frame nor keeps them open.
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
    HostTime,
    counters::CounterDesc,
    frame::Frame,
    net::{self, NetError, UdpDatagram},
    reassembly::{Fragment, Reassembler, ReassemblyConfig, SharedReassemblyCounters},
    sensor::ClockHealth,
    sensor::ScanPipeline,
    sensor::SharedDecodeCounters,
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
pub use udp::{RcvBuf, RcvBufError, UdpSocketConfig};
pub use uring::{UringBuffers, UringSource};
pub use wait::{PollWaiter, WAIT_USEC_RANGE, WaitMode, WaitModeError};
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
    /// IP source address of the sensor (IPv4, or IPv6 without its zone: the slot's
    /// interface is the zone), or `None` for any source.
    pub source: Option<std::net::IpAddr>,
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
        not_udp: Counter "frames" "Frames that were not IPv4 or IPv6 UDP or had invalid headers.",
        /// Handed to reassembly (outcomes in [`CaptureStats::reassembly`]).
        fragments: Counter "fragments" "IPv4 and IPv6 fragments received.",
        unknown_sensor: Counter "datagrams" "UDP datagrams that matched no configured sensor.",
        /// They reached a sensor configured without a `source` from another IPv4 source than
        /// the one that sensor's stream comes from (two sensors sending to one port); see
        /// [`SOURCE_SILENCE_NS`]. The first one of each sensor is logged.
        mixed_sources: Counter "datagrams" "UDP datagrams dropped because a second IP source sent to a sensor configured without a source.",
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
        reassembled: Counter "datagrams" "Datagrams reassembled from IPv4 or IPv6 fragments.",
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
    /// The pipeline's clock and sync health ([`ScanPipeline::clock_health`]).
    pub clock: SharedClockHealth,
}

/// The clock gauges of one sensor: `lidarxdp_clock_*{sensor,model}`, stats JSON
/// `sensors[i].clock`.
pub const CLOCK_GAUGES: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "clock",
    labels: lidarxdp_core::sensor::SENSOR_COUNTERS.labels,
};

lidarxdp_core::counter_set! {
    /// A [`ClockHealth`] as unsigned gauges (the exposition's values are counts here): the
    /// signed offset and drift as an ahead/behind pair, one of which is 0.
    pub struct ClockGauges in CLOCK_GAUGES;
    {
        /// 1 once an offset is measured (frames on the sensor clock).
        offset_known: Gauge "bool" "1 when the sensor-minus-host clock offset is measured.",
        /// Median over 10 s ([`lidarxdp_core::health::ClockOffset::offset_ns`]).
        offset_ahead_ns: Gauge "ns" "How far the sensor clock is ahead of the host's (median over 10 s; 0 when behind).",
        offset_behind_ns: Gauge "ns" "How far the sensor clock is behind the host's (median over 10 s; 0 when ahead).",
        /// 1 once the samples span 10 s.
        drift_known: Gauge "bool" "1 when the clock drift is measured.",
        /// Slope of the offset over the last minute, ppb (1,000 ppb = 1 ppm = 1 µs/s).
        drift_gain_ppb: Gauge "ppb" "How fast the sensor clock gains on the host's over the last minute (0 when it loses).",
        drift_loss_ppb: Gauge "ppb" "How fast the sensor clock loses on the host's over the last minute (0 when it gains).",
        sensor_clock: Gauge "bool" "1 when the last frame was stamped on the sensor clock, 0 on the host's.",
        sync_source: Gauge "code" "What the sensor clock follows: 0 unknown, 1 internal, 2 pps, 3 ptp.",
        sync_state: Gauge "code" "Its lock: 0 unknown, 1 free, 2 acquiring, 3 locked, 4 error.",
        sync_lost: Gauge "bool" "1 when the sync was locked and is not now.",
        nmea_valid: Gauge "code" "Velodyne GPRMC status: 0 no sentence, 1 invalid (V), 2 valid (A).",
    }
}

impl From<ClockHealth> for ClockGauges {
    fn from(h: ClockHealth) -> Self {
        let o = h.offset_ns.unwrap_or(0);
        let d = h.drift_ppm.map_or(0, |d| (d * 1_000.0).round() as i64);
        ClockGauges {
            offset_known: u64::from(h.offset_ns.is_some()),
            offset_ahead_ns: o.max(0) as u64,
            offset_behind_ns: o.min(0).unsigned_abs(),
            drift_known: u64::from(h.drift_ppm.is_some()),
            drift_gain_ppb: d.max(0) as u64,
            drift_loss_ppb: d.min(0).unsigned_abs(),
            sensor_clock: u64::from(h.sensor_clock),
            sync_source: h.sync.source.code(),
            sync_state: h.sync.lock.code(),
            sync_lost: u64::from(h.sync.lost()),
            nmea_valid: match h.sync.nmea_valid {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            },
        }
    }
}

/// A [`ClockHealth`] shared with other threads: relaxed atomics written by the capture thread
/// with its counters, read whole by the main thread (each field on its own; a reader may see
/// the offset of one store beside the drift of the next).
#[derive(Debug)]
pub struct SharedClockHealth {
    /// The offset, ns; `i64::MIN` for none.
    offset_ns: std::sync::atomic::AtomicI64,
    /// The drift's `f64` bits; NaN for none.
    drift_bits: AtomicU64,
    /// Bits 0..8 source code, 8..16 lock code, bit 16 was locked, bits 17..19 NMEA (0 none,
    /// 1 invalid, 2 valid), bit 19 sensor clock.
    packed: AtomicU64,
}

impl Default for SharedClockHealth {
    fn default() -> Self {
        Self {
            offset_ns: std::sync::atomic::AtomicI64::new(i64::MIN),
            drift_bits: AtomicU64::new(f64::NAN.to_bits()),
            packed: AtomicU64::new(0),
        }
    }
}

impl SharedClockHealth {
    /// Publishes `h`.
    pub fn store(&self, h: &ClockHealth) {
        self.offset_ns
            .store(h.offset_ns.unwrap_or(i64::MIN), Ordering::Relaxed);
        self.drift_bits
            .store(h.drift_ppm.unwrap_or(f64::NAN).to_bits(), Ordering::Relaxed);
        let nmea = match h.sync.nmea_valid {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        };
        let packed = h.sync.source.code()
            | h.sync.lock.code() << 8
            | u64::from(h.sync.was_locked) << 16
            | nmea << 17
            | u64::from(h.sensor_clock) << 19;
        self.packed.store(packed, Ordering::Relaxed);
    }

    /// The last published health.
    pub fn load(&self) -> ClockHealth {
        use lidarxdp_core::health::{SyncLock, SyncSource, SyncState};
        let offset = self.offset_ns.load(Ordering::Relaxed);
        let drift = f64::from_bits(self.drift_bits.load(Ordering::Relaxed));
        let p = self.packed.load(Ordering::Relaxed);
        let source = match p & 0xff {
            1 => SyncSource::Internal,
            2 => SyncSource::Pps,
            3 => SyncSource::Ptp,
            _ => SyncSource::Unknown,
        };
        let lock = match (p >> 8) & 0xff {
            1 => SyncLock::Free,
            2 => SyncLock::Acquiring,
            3 => SyncLock::Locked,
            4 => SyncLock::Error,
            _ => SyncLock::Unknown,
        };
        ClockHealth {
            offset_ns: (offset != i64::MIN).then_some(offset),
            drift_ppm: (!drift.is_nan()).then_some(drift),
            sensor_clock: p >> 19 & 1 == 1,
            sync: SyncState {
                source,
                lock,
                was_locked: p >> 16 & 1 == 1,
                nmea_valid: match p >> 17 & 3 {
                    1 => Some(false),
                    2 => Some(true),
                    _ => None,
                },
            },
        }
    }
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
            clock: SharedClockHealth::default(),
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

/// A `--stall` value that is not `MS:EVERY_MS` with `1 <= MS < EVERY_MS <= 3_600_000`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--stall {0:?}: expected MS:EVERY_MS in milliseconds with 1 <= MS < EVERY_MS <= 3600000")]
pub struct StallScheduleError(String);

impl std::str::FromStr for StallSchedule {
    type Err = StallScheduleError;
    /// `MS:EVERY_MS`, both integers in milliseconds, `1 <= MS < EVERY_MS <= 3_600_000`.
    fn from_str(s: &str) -> Result<Self, StallScheduleError> {
        let err = || StallScheduleError(s.to_owned());
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
    /// Where the sensors' IMU readings go (`None`: they are dropped as they are decoded),
    /// with each slot's sensor id.
    pub aux: Option<crate::publish::AuxSender>,
}

/// Calibration tables parsed from a re-read calibration file, for slot `slot` of a capture
/// thread. The thread hands them to the slot's pipeline ([`ScanPipeline::reload`]), which
/// swaps them in at the sensor's next frame boundary; the stream, its frame sequence and its
/// counters go on.
pub struct Reload {
    /// Index into [`CaptureWorker::sensors`].
    pub slot: usize,
    /// The new tables ([`ScanPipeline::into_calibration`]).
    pub calibration: lidarxdp_core::sensor::Calibration,
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

#[derive(Default)]
struct Local {
    /// The thread's counters (`link_changes` is the source's, see [`CaptureWorker::store`]).
    c: CaptureSnapshot,
    /// Per sensor slot configured without a source: the source its stream comes from, the
    /// host monotonic time of its last datagram, and whether a second source was logged.
    stream_source: Vec<Option<StreamSource>>,
    /// Per sensor slot: bytes and reassembled datagrams.
    sensors: Vec<SensorTraffic>,
    /// Per sensor slot: the return mode was compared with the expected one.
    mode_checked: Vec<bool>,
}

impl Local {
    fn new(sensors: usize) -> Self {
        Local {
            sensors: vec![SensorTraffic::default(); sensors],
            mode_checked: vec![false; sensors],
            ..Local::default()
        }
    }
}

/// The slot a datagram to `port` from `src` belongs to, as the XDP program decides: a sensor
/// bound to this exact source first, else the first one taking any source. One pass over the
/// slots' `(port, extra_port, source)`.
fn find_slot(
    keys: impl Iterator<Item = (u16, Option<u16>, Option<std::net::IpAddr>)>,
    port: u16,
    src: std::net::IpAddr,
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
    now: HostTime,
    out: &mut Vec<Frame>,
) -> bool {
    let keys = sensors.iter().map(|s| (s.port, s.extra_port, s.source));
    match find_slot(keys, d.dst_port, d.src_ip) {
        Some(i) if sensors[i].source.is_none() && !one_source(local, i, d, now.mono_ns) => {
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
            s.pipeline.push(d.payload, now, out);
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

/// Host time (CLOCK_MONOTONIC) without a datagram from a sensor's source after which a sensor
/// configured without a `source` accepts a new one (the sensor was re-addressed or replaced):
/// 1 s, ns.
pub const SOURCE_SILENCE_NS: u64 = 1_000_000_000;

/// The source a sensor configured without one is receiving from.
#[derive(Clone, Copy, Debug)]
struct StreamSource {
    ip: std::net::IpAddr,
    /// Host CLOCK_MONOTONIC ns of the stream's last datagram.
    last_ns: u64,
    warned: bool,
}

/// For slot `i` (configured without a source): whether `d` continues the slot's stream. The
/// first datagram fixes the stream's source; a datagram from another source is refused (two
/// sensors on one port must never be mixed into one frame), and the first such datagram is
/// logged, unless the stream's source has been silent for [`SOURCE_SILENCE_NS`], in which case
/// the new source takes over (logged). `now`: host CLOCK_MONOTONIC, ns.
fn one_source(local: &mut Local, i: usize, d: &UdpDatagram<'_>, now: u64) -> bool {
    if local.stream_source.len() <= i {
        local.stream_source.resize(i + 1, None);
    }
    let Some(entry) = local.stream_source.get_mut(i) else {
        return true;
    };
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
                s.ip,
                now.saturating_sub(s.last_ns) / 1_000_000,
                d.src_ip
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
                    d.src_ip,
                    s.ip
                );
            }
            false
        }
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
                self.apply_reloads();
            }
            let now = crate::sys::clock::host_time();
            let n = self.burst(&mut local, &mut reasm, now, &mut out)?;
            self.forward_imu();
            if n == 0 {
                for s in &mut self.sensors {
                    s.pipeline.poll_timeout(now, &mut out);
                }
                reasm.poll_timeout(now.mono_ns);
                self.publish(&mut out, &mut local);
                self.store(&local, &reasm);
                self.source.on_idle(&self.stats);
                local.c.waits += 1;
                self.source.wait(self.idle_wait)?;
            } else if !out.is_empty() {
                self.publish(&mut out, &mut local);
                self.store(&local, &reasm);
            } else if local.c.rx_frames % 1024 < n as u64 {
                reasm.poll_timeout(now.mono_ns);
                self.store(&local, &reasm);
            }
        }
        let drained_from = local.c.rx_frames;
        while local.c.rx_frames - drained_from < FINAL_DRAIN_MAX {
            let now = crate::sys::clock::host_time();
            if self.burst(&mut local, &mut reasm, now, &mut out)? == 0 {
                break;
            }
            self.publish(&mut out, &mut local);
        }
        for s in &mut self.sensors {
            s.pipeline.flush(&mut out);
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

    /// Hands the calibrations waiting in [`Self::reloads`] to their slots' pipelines
    /// ([`ScanPipeline::reload`]: swapped in at the sensor's next frame boundary, at once if
    /// it has no frame in progress). A newer reload replaces one still waiting.
    fn apply_reloads(&mut self) {
        while let Some(r) = self.reloads.pop() {
            let Some(slot) = self.sensors.get_mut(r.slot) else {
                log::warn!("calibration reload for unknown sensor slot {}", r.slot);
                continue;
            };
            if let Err(e) = slot.pipeline.reload(r.calibration) {
                log::warn!("calibration reload for sensor slot {}: {e}", r.slot);
            }
        }
    }

    /// Takes one burst from the source and dispatches it, all received at `now`; returns the
    /// packets taken.
    fn burst(
        &mut self,
        local: &mut Local,
        reasm: &mut Reassembler,
        now: HostTime,
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
                        r.datagram(now.wall_ns, &d, &[0; 12]);
                    }
                }
                Packet::Ethernet(bytes) => {
                    local.c.rx_frames += 1;
                    local.c.rx_bytes += bytes.len() as u64;
                    // The IP header (IPv4, or IPv6 and its extension headers) is parsed once:
                    // a whole datagram's UDP header is read from it, a fragment goes to
                    // reassembly as parsed.
                    let ip = match net::parse_ip(bytes) {
                        Ok(ip) => ip,
                        Err(_) => {
                            local.c.not_udp += 1;
                            return;
                        }
                    };
                    match net::udp_of_ip(&ip) {
                        Ok(d) => {
                            if dispatch(sensors, local, &d, false, now, out)
                                && let Some(r) = record
                            {
                                r.ethernet(now.wall_ns, bytes);
                            }
                        }
                        Err(NetError::Fragment) => {
                            local.c.fragments += 1;
                            // Failures are counted by the reassembler.
                            if let Some(f) = Fragment::from_ip(&ip)
                                && let Ok(Some(whole)) = reasm.push(&f, now.mono_ns)
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
                                            r.datagram(now.wall_ns, &d, &macs);
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

    /// Hands the IMU readings the pipelines decoded to [`Self::aux`] (or drops them).
    fn forward_imu(&mut self) {
        for s in &mut self.sensors {
            while let Some(reading) = s.pipeline.take_imu() {
                if let Some(aux) = &self.aux {
                    aux.send(crate::publish::AuxMessage::Imu {
                        sensor_id: s.pipeline.sensor_id(),
                        reading,
                    });
                }
            }
        }
    }

    /// Publishes the thread's counters and the source's own ([`PacketSource::counters`]; the
    /// source's `link_changes` stays as the source stored it).
    fn store(&self, l: &Local, reasm: &Reassembler) {
        let c = &self.stats.capture;
        let mut snap = CaptureSnapshot {
            link_changes: c.link_changes.load(Ordering::Relaxed),
            calibration_reloads: self.sensors.iter().map(|s| s.pipeline.reloads()).sum(),
            ..l.c
        };
        self.source.counters(&mut snap);
        c.store(&snap);
        self.stats.reassembly.store(reasm.counters());
        for ((slot, sc), t) in self
            .sensors
            .iter()
            .zip(self.stats.sensors.iter())
            .zip(l.sensors.iter())
        {
            sc.traffic.store(t);
            sc.decode.store(slot.pipeline.counters());
            sc.clock.store(&slot.pipeline.clock_health());
            let mut k = 0;
            slot.pipeline.visit_vendor_counters(&mut |_, v| {
                if let Some(a) = sc.vendor.get(k) {
                    a.store(v, Ordering::Relaxed);
                }
                k += 1;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Local, SOURCE_SILENCE_NS, SensorSlot, dispatch, find_slot, one_source};
    use lidarxdp_core::HostTime;
    use lidarxdp_core::frame::Frame;
    use lidarxdp_core::net::UdpDatagram;
    use lidarxdp_core::sensor::{ScanPipeline, SensorConfig, SensorModel};
    use lidarxdp_core::valid::RangeGate;

    #[test]
    fn a_second_source_on_a_sourceless_sensor_is_refused_and_counted_once_warned() {
        let d = |src| UdpDatagram {
            src_ip: std::net::IpAddr::from(src),
            dst_ip: [10, 0, 0, 1].into(),
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
        c.range = RangeGate::from_m(c.range.min().get(), max_range_m).unwrap();
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
                src_ip: [192, 168, 1, 201].into(),
                dst_ip: [192, 168, 1, 100].into(),
                src_port: 2368,
                dst_port: 2368,
                payload: p,
            };
            dispatch(slot, local, &d, false, HostTime::both(*t), &mut out);
        }
        out
    }

    /// A reload arriving mid-frame applies at the next frame boundary, in place: the frame in
    /// progress is finished with the old tables (whole, as without a reload); the frame after
    /// the next one is exactly the new tables' (as decoding with them from the start); the one
    /// between holds the points carried past the cut from the old tables and the rest from the
    /// new; sequence numbers and counters run on.
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
        let mut got = feed(&mut slots, &mut local, &payloads[..250]);
        assert_eq!(got.len(), 1);
        slots[0]
            .pipeline
            .reload(vlp16(10.0).into_calibration())
            .unwrap();
        assert!(slots[0].pipeline.reload_pending());
        got.extend(feed(&mut slots, &mut local, &payloads[250..]));
        assert_eq!(slots[0].pipeline.reloads(), 1);
        let mut out = Vec::new();
        slots[0].pipeline.flush(&mut out);
        got.extend(out);
        let seq: Vec<u64> = got.iter().map(|f| f.header.sequence).collect();
        assert_eq!(seq, vec![0, 1, 2, 3]);
        assert_eq!(got[0], old[0]);
        assert_eq!(got[1], old[1]);
        assert_eq!(got[3], new[3]);
        // Frame 2: the carried points (old tables) first, then exactly the new tables' rest.
        assert_eq!(got[2].header, new[2].header);
        let suffix = got[2]
            .points
            .autoware()
            .iter()
            .rev()
            .zip(new[2].points.autoware().iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        // All but the points carried past the cut (at most one packet: 384) are the new ones'.
        assert!(suffix > 0, "{suffix}");
        assert!(got[2].points.len() - suffix <= 384 && new[2].points.len() - suffix <= 384);
        // Counters: every datagram once, frames as published.
        let c = *slots[0].pipeline.counters();
        assert_eq!((c.packets, c.decoded, c.frames), (603, 603, 4));
        let points: usize = got.iter().map(|f| f.points.len()).sum();
        assert_eq!(c.points, points as u64);
    }

    /// A sensor with no frame in progress takes its reload at once; one of another model is
    /// refused and changes nothing.
    #[test]
    fn reload_of_an_idle_sensor_applies_at_once() {
        let mut slot = vlp16_slot();
        slot.pipeline
            .reload(vlp16(10.0).into_calibration())
            .unwrap();
        assert_eq!(slot.pipeline.reloads(), 1);
        assert!(!slot.pipeline.reload_pending());
        let mut c = SensorConfig::new(
            0,
            SensorModel::Vlp32c,
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
            ),
        );
        c.range = RangeGate::from_m(c.range.min().get(), 100.0).unwrap();
        if let Ok(other) = crate::calibration::pipeline(&c) {
            let e = slot.pipeline.reload(other.into_calibration()).unwrap_err();
            assert!(e.to_string().contains("VLP16"), "{e}");
            assert_eq!(slot.pipeline.reloads(), 1);
        }
    }

    #[test]
    fn exact_source_wins_over_any_source_whatever_the_order() {
        use std::net::{IpAddr, Ipv6Addr};
        let a = IpAddr::from([192, 168, 1, 201]);
        let b = IpAddr::from([192, 168, 1, 202]);
        let c = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x201));
        // The IPv4-mapped form of `a` is another source (the parser never yields it).
        let mapped = IpAddr::V6(std::net::Ipv4Addr::new(192, 168, 1, 201).to_ipv6_mapped());
        let keys = [
            (2368, None, None),
            (2368, None, Some(a)),
            (2369, Some(7788), Some(b)),
            (2368, None, Some(c)),
        ];
        let find = |port, src| find_slot(keys.iter().copied(), port, src);
        assert_eq!(find(2368, a), Some(1));
        assert_eq!(find(2368, b), Some(0));
        assert_eq!(find(2368, c), Some(3));
        assert_eq!(find(2368, mapped), Some(0));
        assert_eq!(find(2369, b), Some(2));
        assert_eq!(find(7788, b), Some(2));
        assert_eq!(find(7788, a), None);
        assert_eq!(find(7788, c), None);
        assert_eq!(find(2370, a), None);
    }
}
