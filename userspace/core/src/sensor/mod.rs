//! Sans-IO sensor decoders: UDP payload bytes in, [`Frame`]s out.
//!
//! [`ScanPipeline`] is the per-sensor entry point used by every capture backend: it classifies
//! each payload, decodes data packets with the model's decoder ([`velodyne`]) and hands the
//! points to the [`crate::scan::ScanAssembler`], which cuts them into frames. It does no I/O,
//! never blocks, never panics, and allocates once per frame (its point buffer, pre-sized from
//! the previous frame).
//!
//! ## Vendors
//! Each family has its module implementing [`VendorDecoder`] (decoder + scan assembly):
//! [`velodyne`], [`hesai`], [`ouster`], [`robosense`]. [`SensorModel::family`] picks it.
//!
//! ## Compatibility with Tier IV Nebula
//! By default ([`DecodeFlavor::Manual`]) every Velodyne model follows its manufacturer's manual:
//! each laser's azimuth is interpolated with its own firing time over the firing-sequence
//! period, the last sequence of a packet reuses the previous advance, and `--fov` filters
//! every point on its corrected azimuth (`docs/sensors.md`, "Velodyne firing timing").
//! With [`DecodeFlavor::Nebula`] (`--nebula-compat`, config key `nebula_compat`) a Velodyne
//! stream decodes point-for-point as Tier IV Nebula's decoders do (verified against Nebula's
//! ground-truth PCDs, see `tests/decode/decode_vlp16_golden.rs`), except: `elevation` is the beam
//! angle in rad (Nebula stores its sine), `time_stamp` follows the manual's timing table on the
//! sensor clock (Nebula uses the host stamp of the packet), and a damaged packet is dropped
//! whole (Nebula keeps the blocks before a bad flag).
#![forbid(unsafe_code)]

pub mod calibration;
mod decoder;
pub mod hesai;
pub mod nmea;
pub mod ouster;
pub mod robosense;
pub mod velodyne;

use crate::HostTime;
use crate::frame::{Frame, FrameClock};
pub use crate::vendor::*;

/// Identifies the sensor model from one data packet, where the format names it:
///
/// - Velodyne: a 1206-byte data packet (12 blocks starting with flag `FF EE`) whose
///   product-id byte (offset 1205, VLP-16 user manual §9 "Factory bytes") names the model
///   ([`velodyne::multi::model_from_product_id`]: HDL-32E, VLP-16, VLP-32C, VLS-128; HDL-64E
///   packets carry a status byte there and are not identified);
/// - Hesai: by length and header ([`hesai::packet::detect_model`]).
///
/// `None` for anything else: Ouster packets do not name the model (its metadata JSON does),
/// RoboSense MSOP headers tell only the header family (RS-16/RS-32/Bpearl versus Helios), and
/// a firmware that writes a wrong product byte (seen on VLP-16s that say HDL-32E) is identified
/// wrongly; a configured model always wins.
pub fn detect_model(payload: &[u8]) -> Option<SensorModel> {
    if payload.len() == 1206 && payload.starts_with(&[0xFF, 0xEE]) {
        return payload
            .get(1205)
            .and_then(|&id| velodyne::multi::model_from_product_id(id));
    }
    hesai::packet::detect_model(payload)
}

/// Datagrams a [`ScanPipeline`] receives before it logs, once, that none of them decoded
/// (64: a fraction of a second for every model at its packet rate).
pub const REJECTION_DIAGNOSIS_PACKETS: u64 = 64;

/// What `payload` looks like, for a person reading a diagnosis: the model
/// [`detect_model`] names (Velodyne product byte at offset 1205, Hesai header), or a RoboSense
/// packet by its magic header (RS-LiDAR-16/32 and RS-Bpearl MSOP `55 AA 05 0A 5A A5 50 A0`,
/// RS-Helios MSOP `55 AA 05 5A`, DIFOP `A5 FF 00 5A 11 11 55 55`; RoboSense user manuals,
/// "MSOP"/"DIFOP" packet headers), or `None`. Ouster packets carry no magic and are never named.
pub fn describe_payload(payload: &[u8]) -> Option<String> {
    if let Some(m) = detect_model(payload) {
        return Some(format!("a {m} data packet"));
    }
    if payload.len() == robosense::PACKET_LEN {
        if payload.starts_with(&robosense::MSOP_MAGIC_V1) {
            return Some("a RoboSense RS-LiDAR-16/32 or RS-Bpearl MSOP packet".to_owned());
        }
        if payload.starts_with(&robosense::MSOP_MAGIC_HELIOS) {
            return Some("a RoboSense RS-Helios MSOP packet".to_owned());
        }
        if payload.starts_with(&robosense::DIFOP_MAGIC) {
            return Some("a RoboSense DIFOP packet".to_owned());
        }
    }
    None
}

pub use decoder::{Decoder, Tables};

/// New calibration tables for a running [`ScanPipeline`] ([`ScanPipeline::reload`]), parsed
/// off the decoder's thread ([`ScanPipeline::into_calibration`]).
#[derive(Clone, Debug)]
pub struct Calibration {
    model: SensorModel,
    tables: Tables,
}

/// A 64-bit digest of a datagram for the duplicate check: its length, its first and last 64
/// bytes and one 8-byte word every 256 bytes between, mixed word by word (multiply-rotate).
/// Every vendor's packet time stamp, sequence number and frame id lie in the sampled bytes
/// (Velodyne's time stamp in its last 6 bytes, Hesai's tail, Ouster's packet and first column
/// headers, RoboSense's header), so two datagrams with the same digest are, but for a
/// collision of about 2^-64, copies of one another; the cost does not grow with the payload
/// (a 24 KB Ouster packet is about 110 words).
fn digest(payload: &[u8]) -> u64 {
    const K0: u64 = 0x9E37_79B9_7F4A_7C15;
    const K1: u64 = 0xC2B2_AE3D_27D4_EB4F;
    let mut h = (payload.len() as u64).wrapping_mul(K0);
    let mut mix = |w: u64| h = (h ^ w).wrapping_mul(K1).rotate_left(31);
    let word = |o: usize| match payload.get(o..o + 8).and_then(|w| w.first_chunk::<8>()) {
        Some(w) => u64::from_le_bytes(*w),
        None => {
            // The last, partial word of a short datagram.
            let mut b = [0u8; 8];
            let src = payload.get(o..).unwrap_or_default();
            let k = src.len().min(8);
            b[..k].copy_from_slice(&src[..k]);
            u64::from_le_bytes(b)
        }
    };
    let n = payload.len();
    if n <= 128 {
        (0..n).step_by(8).for_each(|o| mix(word(o)));
    } else {
        (0..64).step_by(8).for_each(|o| mix(word(o)));
        (64..n - 64).step_by(256).for_each(|o| mix(word(o)));
        (n - 64..n).step_by(8).for_each(|o| mix(word(o)));
    }
    h ^ (h >> 29)
}

/// The digests of the last [`crate::scan::DUPLICATE_WINDOW`] decoded datagrams, with their
/// host receive times (CLOCK_MONOTONIC ns).
#[derive(Clone, Debug)]
struct RecentDigests {
    digests: [u64; crate::scan::DUPLICATE_WINDOW],
    times: [u64; crate::scan::DUPLICATE_WINDOW],
    len: usize,
    next: usize,
}

impl Default for RecentDigests {
    fn default() -> Self {
        Self {
            digests: [0; crate::scan::DUPLICATE_WINDOW],
            times: [0; crate::scan::DUPLICATE_WINDOW],
            len: 0,
            next: 0,
        }
    }
}

impl RecentDigests {
    /// A datagram of digest `d` received at `mono_ns` (host CLOCK_MONOTONIC ns) is a copy of
    /// one decoded at most [`crate::scan::DUPLICATE_WINDOW_NS`] before (or after: a capture's
    /// record times may step back).
    fn contains(&self, d: u64, mono_ns: u64) -> bool {
        let n = self.len;
        // The digest scan first (a plain array compare), the time only on a match.
        self.digests[..n].contains(&d)
            && self.digests[..n]
                .iter()
                .zip(&self.times[..n])
                .any(|(&e, &t)| e == d && t.abs_diff(mono_ns) <= crate::scan::DUPLICATE_WINDOW_NS)
    }

    fn insert(&mut self, d: u64, mono_ns: u64) {
        let k = self.next % crate::scan::DUPLICATE_WINDOW;
        self.digests[k] = d;
        self.times[k] = mono_ns;
        self.next = (k + 1) % crate::scan::DUPLICATE_WINDOW;
        self.len = (self.len + 1).min(crate::scan::DUPLICATE_WINDOW);
    }
}

/// Applies `stamp` to frames just produced: with [`Stamp::Host`], `start_ns` becomes the host
/// receive time of the frame's first packet (`host_ns`, CLOCK_REALTIME) and `clock` [`FrameClock::Host`];
/// points' `time_stamp` (relative to the frame start) are unchanged. With [`Stamp::Sensor`] the
/// frames are left as the assembler made them (it may itself fall back to the host clock, and
/// says so in `clock`).
pub fn apply_stamp(stamp: Stamp, frames: &mut [Frame]) {
    if stamp == Stamp::Host {
        for f in frames {
            f.header.start_ns = f.header.host_ns;
            f.header.clock = FrameClock::Host;
        }
    }
}

/// Decoder + scan assembler for one sensor: the per-sensor entry point of every capture
/// backend. Dispatches to the model's [`VendorDecoder`] and keeps the [`DecodeCounters`].
///
/// `Clone` copies the stream state (frame in progress, counters) and shares the calibration
/// tables (`Arc`): cloning a freshly built pipeline is a cheaper way to get another one for
/// the same sensor than parsing its calibration file again (the fuzz targets in `fuzz/` do it
/// once per input).
#[derive(Clone, Debug)]
pub struct ScanPipeline {
    model: SensorModel,
    /// [`SensorConfig::sensor_id`].
    sensor_id: u16,
    decoder: Decoder,
    counters: DecodeCounters,
    stamp: Stamp,
    /// An implausible sensor time has been logged.
    warned_time: bool,
    /// The "every packet rejected" diagnosis has been made ([`REJECTION_DIAGNOSIS_PACKETS`]).
    diagnosed: bool,
    /// Name in log lines (the sensor's name in the daemon; default the model name).
    name: String,
    frame_timeout_ns: u64,
    /// Digests of the last decoded datagrams (duplicates).
    recent: RecentDigests,
    /// Payloads judged time jumps since the last accepted packet, with their host times: the
    /// candidates of a restart, pushed again once it is confirmed ([`Rejection::Restart`]).
    held: Vec<(Vec<u8>, HostTime)>,
    /// Buffers of released held payloads, reused.
    spare_held: Vec<Vec<u8>>,
    /// New calibration tables waiting for the next frame boundary ([`ScanPipeline::reload`]).
    pending: Option<Calibration>,
    /// Calibrations applied ([`ScanPipeline::reload`]).
    reloads: u64,
    /// Sensor-minus-host offset of the emitted frames ([`crate::time::ClockOffset`]).
    clock: crate::time::ClockOffset,
    /// The sensor's time sync as its packets or metadata say it.
    sync: crate::msg::SyncState,
    /// IMU readings decoded and not yet taken ([`ScanPipeline::take_imu`]), at most
    /// [`IMU_QUEUE`].
    imu: std::collections::VecDeque<ImuReading>,
    /// The last emitted frame was stamped on the sensor clock.
    last_sensor_clock: bool,
}

/// IMU readings a pipeline keeps for its caller to take ([`ScanPipeline::take_imu`]): 64,
/// more than half a second of Ouster IMU packets (100 Hz). The oldest is dropped beyond it.
pub const IMU_QUEUE: usize = 64;

pub use crate::msg::ImuReading;

/// A pipeline's clock and sync health ([`ScanPipeline::clock_health`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClockHealth {
    /// Median sensor-minus-host offset, ns ([`crate::time::ClockOffset::offset_ns`]).
    pub offset_ns: Option<i64>,
    /// Its drift, ppm ([`crate::time::ClockOffset::drift_ppm`]).
    pub drift_ppm: Option<f64>,
    /// The last frame was stamped on the sensor clock (not the host's).
    pub sensor_clock: bool,
    /// The sync state.
    pub sync: crate::msg::SyncState,
}

impl ScanPipeline {
    /// Builds the pipeline with default [`PipelineOptions`] (manual rules, full field of view)
    /// from `cfg` and `calibration`, the contents of the file `cfg.calibration` names (read by
    /// the caller: `lidarxdp::calibration::read` in the daemon).
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid calibration (naming `cfg.calibration`) or a setting the
    /// model's decoder refuses (an Ouster cut angle other than 0°, a Hesai cut angle outside
    /// its field of view).
    pub fn new(cfg: &SensorConfig, calibration: &[u8]) -> Result<Self, ConfigError> {
        Self::with_options(cfg, calibration, PipelineOptions::default())
    }

    /// Builds the pipeline with explicit options.
    ///
    /// # Errors
    /// As [`ScanPipeline::new`], plus [`ConfigError::Unsupported`] for a model whose decoder
    /// is not available yet.
    pub fn with_options(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let decoder = Decoder::new(cfg, calibration, opts)?;
        Ok(Self {
            model: cfg.model,
            sensor_id: cfg.sensor_id,
            counters: DecodeCounters::default(),
            stamp: cfg.stamp,
            warned_time: false,
            diagnosed: false,
            name: cfg.model.name().to_owned(),
            frame_timeout_ns: cfg.frame_timeout.ns(),
            recent: RecentDigests::default(),
            held: Vec::with_capacity(crate::scan::RESTART_AGREE as usize),
            spare_held: Vec::new(),
            pending: None,
            reloads: 0,
            clock: crate::time::ClockOffset::default(),
            sync: crate::msg::SyncState {
                source: decoder.sync_source(),
                ..Default::default()
            },
            imu: std::collections::VecDeque::new(),
            last_sensor_clock: false,
            decoder,
        })
    }

    /// This freshly built pipeline's calibration tables, to hand to a running pipeline of the
    /// same sensor with [`Self::reload`] (the daemon parses a re-read calibration file on its
    /// main thread, so the capture thread only swaps tables).
    pub fn into_calibration(self) -> Calibration {
        Calibration {
            model: self.model,
            tables: self.decoder.tables(),
        }
    }

    /// Reloads the calibration in place: `calibration` (of the same model, from
    /// [`Self::into_calibration`]) replaces the decoder's tables at the next frame boundary:
    /// at once if no frame is in progress, else right after the push, timeout or flush that
    /// emits the frame in progress. The stream goes on: frame sequence numbers stay
    /// continuous, counters keep counting. (The points of the packet that completes a frame
    /// and lie past the cut, carried into the next frame, were decoded with the old tables.)
    /// A newer reload replaces one still waiting.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] when `calibration` is for another model (nothing changes).
    pub fn reload(&mut self, calibration: Calibration) -> Result<(), ConfigError> {
        if calibration.model != self.model {
            return Err(ConfigError::Unsupported {
                model: calibration.model,
                supported: format!("a calibration for this pipeline's model, {}", self.model),
            });
        }
        self.pending = Some(calibration);
        if !self.decoder.in_progress() {
            self.apply_reload();
        }
        Ok(())
    }

    /// Calibrations applied so far by [`Self::reload`].
    pub fn reloads(&self) -> u64 {
        self.reloads
    }

    /// A reload is waiting for the next frame boundary.
    pub fn reload_pending(&self) -> bool {
        self.pending.is_some()
    }

    fn apply_reload(&mut self) {
        if let Some(c) = self.pending.take() {
            if self.decoder.set_tables(c.tables).is_err() {
                // `reload` took only tables of this pipeline's model, so of its vendor.
                debug_assert!(false, "tables of another vendor reached apply_reload");
                return;
            }
            self.reloads += 1;
            let source = self.decoder.sync_source();
            if source != crate::msg::SyncSource::Unknown {
                self.sync.source = source;
            }
        }
    }

    /// Payloads judged time jumps and held as the candidates of a restart (at most
    /// [`crate::scan::RESTART_AGREE`] − 1), not yet in [`DecodeCounters::time_jumps`].
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Sets the name this pipeline's log lines give the sensor (default: the model name).
    pub fn set_name(&mut self, name: &str) {
        self.name = name.to_owned();
    }

    /// The name the log lines give the sensor ([`ScanPipeline::set_name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configured model.
    pub fn model(&self) -> SensorModel {
        self.model
    }

    /// The sensor id the frames carry ([`SensorConfig::sensor_id`]).
    pub fn sensor_id(&self) -> u16 {
        self.sensor_id
    }

    /// The configured frame timeout ([`SensorConfig::frame_timeout`]), ns.
    pub fn frame_timeout_ns(&self) -> u64 {
        self.frame_timeout_ns
    }

    /// Return mode of the last decoded data packet, if any.
    pub fn return_mode(&self) -> Option<ReturnMode> {
        self.decoder.return_mode()
    }

    /// Pushes one UDP payload received at `host`: a live capture's [`HostTime`] (its
    /// CLOCK_MONOTONIC time measures every interval: duplicates window, silences, time-jump
    /// tolerance; its CLOCK_REALTIME time stamps the frame's `host_ns`, `--stamp host` and a
    /// Velodyne's hour), or offline a bare pcap record time (ns since the Unix epoch), which
    /// serves as both ([`HostTime::both`]). Frames completed by this payload are appended to
    /// `out`.
    ///
    /// Never panics: anything that is not a valid data packet is counted `malformed` or
    /// `ignored` (rules in the vendor module) and leaves the frame in progress untouched apart
    /// from its malformed count.
    pub fn push(&mut self, payload: &[u8], host: impl Into<HostTime>, out: &mut Vec<Frame>) {
        let host = host.into();
        self.counters.packets += 1;
        if self.auxiliary(payload, host) {
            self.counters.auxiliary += 1;
            return;
        }
        let before = out.len();
        let d = digest(payload);
        if self.recent.contains(d, host.mono_ns) {
            self.counters.duplicates += 1;
        } else {
            match self.decoder.push(payload, host, out) {
                Err(Rejection::TimeJump) => self.hold(payload, host),
                Err(Rejection::Restart | Rejection::ClockStep) => {
                    // The held candidates first, then this packet, onto the new time base.
                    // (The vectors keep their capacity: a warm pipeline allocates nothing.)
                    let mut held = std::mem::take(&mut self.held);
                    for (p, h) in &held {
                        let r = self.decoder.push(p, *h, out);
                        self.count(r, digest(p), *h);
                    }
                    self.spare_held.extend(held.drain(..).map(|(p, _)| p));
                    self.held = held;
                    let r = self.decoder.push(payload, host, out);
                    self.count(r, d, host);
                }
                r => {
                    if !matches!(r, Err(Rejection::Ignored | Rejection::Malformed)) {
                        self.release_held();
                    }
                    self.count(r, d, host);
                }
            }
        }
        if !self.diagnosed && self.counters.decoded == 0 {
            self.diagnose_rejections(payload);
        }
        let t = self.decoder.time_faults();
        self.counters.restarts = t.restarts;
        self.counters.clock_steps = t.clock_steps;
        self.counters.date_fallbacks = t.date_fallbacks;
        self.count_frames(before, out);
    }

    /// Reads a datagram that carries no points but what the sensor says besides (its second
    /// port's stream): a Velodyne position packet (512 or 554 bytes, [`velodyne::position`]:
    /// PPS state and the `$GPRMC` sentence) or an Ouster IMU packet (48 bytes,
    /// [`ouster::imu`]). `false` for anything else, which goes to the decoder.
    fn auxiliary(&mut self, payload: &[u8], host: HostTime) -> bool {
        use crate::msg::{SyncLock, SyncSource};
        match self.model.family() {
            Family::Velodyne => {
                let Ok(p) = velodyne::position::parse(payload) else {
                    return false;
                };
                let (source, lock) = match p.pps {
                    velodyne::position::PpsStatus::Absent => (SyncSource::Internal, SyncLock::Free),
                    velodyne::position::PpsStatus::Synchronizing => {
                        (SyncSource::Pps, SyncLock::Acquiring)
                    }
                    velodyne::position::PpsStatus::Locked => (SyncSource::Pps, SyncLock::Locked),
                    velodyne::position::PpsStatus::Error => (SyncSource::Pps, SyncLock::Error),
                    velodyne::position::PpsStatus::Unknown(_) => {
                        (SyncSource::Unknown, SyncLock::Unknown)
                    }
                };
                self.sync.source = source;
                self.sync.set_lock(lock);
                self.sync.nmea_valid = nmea::rmc_valid(p.nmea);
                true
            }
            Family::Ouster if payload.len() == ouster::imu::IMU_PACKET_LEN => {
                let Ok(sample) = ouster::imu::parse(payload) else {
                    return false;
                };
                if self.imu.len() >= IMU_QUEUE {
                    self.imu.pop_front();
                }
                self.imu.push_back(ImuReading {
                    sample,
                    stamp_ns: match self.stamp {
                        Stamp::Sensor => sample.gyro_ts_ns,
                        Stamp::Host => host.wall_ns,
                    },
                    host_ns: host.wall_ns,
                    clock: match self.stamp {
                        Stamp::Sensor => crate::frame::FrameClock::Sensor,
                        Stamp::Host => crate::frame::FrameClock::Host,
                    },
                });
                true
            }
            _ => false,
        }
    }

    /// Takes the oldest IMU reading not taken yet (Ouster, from its IMU packets).
    pub fn take_imu(&mut self) -> Option<ImuReading> {
        self.imu.pop_front()
    }

    /// The clock and sync health now.
    pub fn clock_health(&self) -> ClockHealth {
        ClockHealth {
            offset_ns: self.clock.offset_ns(),
            drift_ppm: self.clock.drift_ppm(),
            sensor_clock: self.last_sensor_clock,
            sync: self.sync,
        }
    }

    /// Counts what the decoder did with a payload of digest `d` received at `host` (a
    /// decoded one is remembered for the duplicate check, on monotonic time).
    fn count(&mut self, r: Result<(), Rejection>, d: u64, host: HostTime) {
        match r {
            Ok(()) => {
                self.counters.decoded += 1;
                self.counters.product_mismatches = self.decoder.product_mismatches();
                self.recent.insert(d, host.mono_ns);
            }
            Err(Rejection::Ignored) => self.counters.ignored += 1,
            Err(Rejection::Malformed) => self.counters.malformed += 1,
            Err(Rejection::TimeJump | Rejection::Restart | Rejection::ClockStep) => {
                self.counters.time_jumps += 1
            }
            Err(Rejection::Late) => self.counters.late += 1,
        }
    }

    /// Holds a payload judged a time jump: it may be the first of a restart. Beyond
    /// [`crate::scan::RESTART_AGREE`] − 1 held, the oldest is counted a time jump.
    fn hold(&mut self, payload: &[u8], host: HostTime) {
        let keep = crate::scan::RESTART_AGREE.saturating_sub(1) as usize;
        if keep == 0 {
            self.counters.time_jumps += 1;
            return;
        }
        if self.held.len() >= keep {
            let (p, _) = self.held.remove(0);
            self.spare_held.push(p);
            self.counters.time_jumps += 1;
        }
        let mut buf = self.spare_held.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        self.held.push((buf, host));
    }

    /// The held payloads were no restart: counted as time jumps.
    fn release_held(&mut self) {
        self.counters.time_jumps += self.held.len() as u64;
        self.spare_held.extend(self.held.drain(..).map(|(p, _)| p));
    }

    /// Once [`REJECTION_DIAGNOSIS_PACKETS`] datagrams arrived and none decoded, logs (once) why
    /// the likely cause is the configuration: what the last payload looks like
    /// ([`describe_payload`]) against the configured model.
    fn diagnose_rejections(&mut self, last: &[u8]) {
        let c = &self.counters;
        if c.packets < REJECTION_DIAGNOSIS_PACKETS {
            return;
        }
        self.diagnosed = true;
        let looks = match describe_payload(last) {
            Some(d) => format!("looks like {d}"),
            None => "matches no known data packet".to_owned(),
        };
        log::warn!(
            "{}: none of the first {} datagrams decoded as {} ({} malformed, {} ignored, {} time \
             jumps); the last one ({} bytes) {looks}. Likely cause: the wrong model (--sensor) or \
             a port that carries another stream (--port). Counted in malformed/ignored; logged once",
            self.name,
            c.packets,
            self.model,
            c.malformed,
            c.ignored,
            c.time_jumps,
            last.len()
        );
    }

    /// Counts the frames appended to `out` since `before` (points, lost turns, implausible
    /// sensor times), then applies [`Stamp`] to them.
    fn count_frames(&mut self, before: usize, out: &mut [Frame]) {
        self.reload_at_boundary(before, out);
        let new = out.get_mut(before..).unwrap_or_default();
        for f in new.iter() {
            let h = &f.header;
            self.counters.frames += 1;
            self.counters.points += f.points.len() as u64;
            self.counters.frames_lost += u64::from(h.frames_lost_before);
            self.counters.packets_expected += u64::from(h.packets_expected);
            self.counters.packets_framed += u64::from(h.packets_received);
            if h.clock == crate::frame::FrameClock::Sensor {
                self.clock.observe(h.host_ns, h.start_ns);
            }
            self.last_sensor_clock =
                h.clock == crate::frame::FrameClock::Sensor && self.stamp == Stamp::Sensor;
            if h.clock == crate::frame::FrameClock::Sensor
                && (h.start_ns < PLAUSIBLE_EPOCH_NS
                    || h.start_ns.abs_diff(h.host_ns) > IMPLAUSIBLE_CLOCK_OFFSET_NS)
            {
                self.counters.implausible_time += 1;
                if !self.warned_time {
                    self.warned_time = true;
                    log::warn!(
                        "{} ({}): frame {} starts at sensor time {} ns, {} s from the host receive time {} ns: \
                         the sensor clock is implausible (not synchronised, years off, or an \
                         hour taken from the host); counted in implausible_time, logged once",
                        self.name,
                        self.model,
                        h.sequence,
                        h.start_ns,
                        (h.start_ns as i128 - h.host_ns as i128) / 1_000_000_000,
                        h.host_ns
                    );
                }
            }
        }
        apply_stamp(self.stamp, new);
    }

    /// Closes the frame in progress if no data packet arrived for more than
    /// `frame_timeout_ns` of host monotonic time before `now` (its [`HostTime::mono_ns`],
    /// CLOCK_MONOTONIC; offline a bare record time serves as both clocks): a step of the wall
    /// clock closes nothing.
    pub fn poll_timeout(&mut self, now: impl Into<HostTime>, out: &mut Vec<Frame>) {
        let before = out.len();
        self.decoder.poll_timeout(now.into().mono_ns, out);
        self.count_frames(before, out);
    }

    /// Applies a waiting reload if the frames just appended to `out` (from `before`) ended the
    /// frame in progress, or none is in progress.
    fn reload_at_boundary(&mut self, before: usize, out: &[Frame]) {
        if self.pending.is_some() && (out.len() > before || !self.decoder.in_progress()) {
            self.apply_reload();
        }
    }

    /// Closes the frame in progress (end of a pcap, shutdown). A frame that holds only the
    /// points carried past the last cut, with no packet of its own, is dropped.
    pub fn flush(&mut self, out: &mut Vec<Frame>) {
        let before = out.len();
        self.decoder.flush(out);
        self.release_held();
        self.count_frames(before, out);
    }

    /// Takes new frames' point buffers from `source` (e.g. the publisher's
    /// `lidarxdp::publish::BufferPool`) from now on, instead of allocating them.
    pub fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>) {
        self.decoder.set_buffer_source(source);
    }

    /// The counters.
    pub fn counters(&self) -> &DecodeCounters {
        &self.counters
    }

    /// The vendor decoder's own counter descriptors ([`VendorDecoder::counter_descs`]).
    pub fn vendor_counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        self.decoder.counter_descs()
    }

    /// Visits the vendor decoder's own counters ([`VendorDecoder::visit_counters`]).
    pub fn visit_vendor_counters(
        &self,
        f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64),
    ) {
        self.decoder.visit_counters(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_and_mode_parse_and_display() {
        for s in ["VLP16", "vlp16", "VLP-16", "vlp_16"] {
            assert_eq!(s.parse::<SensorModel>().unwrap(), SensorModel::Vlp16);
        }
        assert_eq!(SensorModel::Vlp16.to_string(), "VLP16");
        let e = "HDL31".parse::<SensorModel>().unwrap_err().to_string();
        assert!(e.contains("HDL31") && e.contains("VLP16"), "{e}");
        for m in SensorModel::ALL {
            assert_eq!(m.name().parse::<SensorModel>().unwrap(), *m);
        }
        assert_eq!(
            "ot128".parse::<SensorModel>().unwrap(),
            SensorModel::Pandar128e4x
        );
        assert_eq!("dual".parse::<ReturnMode>().unwrap(), ReturnMode::Dual);
        assert_eq!(
            ReturnMode::Last.to_string().parse::<ReturnMode>().unwrap(),
            ReturnMode::Last
        );
        let m: SensorModel = serde_yaml::from_str("VLP-16").unwrap();
        assert_eq!(m, SensorModel::Vlp16);
    }

    const DB: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
    );

    fn cfg() -> SensorConfig {
        SensorConfig::new(3, SensorModel::Vlp16, DB)
    }

    fn cal() -> Vec<u8> {
        std::fs::read(DB).unwrap()
    }

    #[test]
    fn rejections_are_diagnosed_once_after_64_datagrams() {
        let mut p = ScanPipeline::new(&cfg(), &cal()).unwrap();
        p.set_name("front");
        assert_eq!(p.name(), "front");
        // RS-Helios MSOP packets on a VLP-16 pipeline: all malformed (wrong size), never decoded.
        let mut helios = vec![0u8; robosense::PACKET_LEN];
        helios[..4].copy_from_slice(&robosense::MSOP_MAGIC_HELIOS);
        let mut out = Vec::new();
        for _ in 0..REJECTION_DIAGNOSIS_PACKETS - 1 {
            p.push(&helios, 1, &mut out);
        }
        assert!(!p.diagnosed);
        p.push(&helios, 1, &mut out);
        assert!(p.diagnosed);
        assert_eq!(p.counters().decoded, 0);
        assert_eq!(
            describe_payload(&helios).as_deref(),
            Some("a RoboSense RS-Helios MSOP packet")
        );
        let mut v1 = helios.clone();
        v1[..8].copy_from_slice(&robosense::MSOP_MAGIC_V1);
        assert_eq!(
            describe_payload(&v1).as_deref(),
            Some("a RoboSense RS-LiDAR-16/32 or RS-Bpearl MSOP packet")
        );
        let mut vlp32 = vec![0u8; 1206];
        vlp32[..2].copy_from_slice(&[0xFF, 0xEE]);
        vlp32[1205] = 0x28;
        assert_eq!(
            describe_payload(&vlp32).as_deref(),
            Some("a VLP32C data packet")
        );
        assert_eq!(describe_payload(&[0u8; 100]), None);
    }

    #[test]
    fn calibration_that_is_not_utf8_is_refused_naming_the_file() {
        // Contents that are not UTF-8 are refused naming the file.
        let mut c = cfg();
        c.calibration = "/some/cal.yaml".into();
        let e = ScanPipeline::new(&c, &[0xFF, 0xFE]).unwrap_err();
        assert!(matches!(e, ConfigError::CalibrationIo { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "cannot read calibration file /some/cal.yaml: invalid utf-8 sequence of 1 bytes \
             from index 0"
        );
        assert!(ScanPipeline::new(&cfg(), &cal()).is_ok());
    }

    /// A VLP-16 strongest-return data packet: every block flagged, azimuth `az0 + 20·b`, every
    /// slot 10 m, time stamp `us` past the hour.
    fn vlp16_packet(az0: u16, us: u32) -> Vec<u8> {
        let mut b = vec![0u8; 1206];
        for blk in 0..12 {
            let o = blk * 100;
            b[o..o + 2].copy_from_slice(&[0xFF, 0xEE]);
            let az = (u32::from(az0) + 20 * blk as u32) % 36_000;
            b[o + 2..o + 4].copy_from_slice(&(az as u16).to_le_bytes());
            for k in 0..32 {
                b[o + 4 + 3 * k..o + 6 + 3 * k].copy_from_slice(&5000u16.to_le_bytes());
            }
        }
        b[1200..1204].copy_from_slice(&us.to_le_bytes());
        b[1204] = 0x37;
        b[1205] = 0x22;
        b
    }

    /// A datagram identical to one of the last 64 decoded, within 50 ms of it, is a duplicate;
    /// the same bytes later (a capture looped) decode again.
    #[test]
    fn duplicates_within_the_window_are_dropped_and_counted() {
        let mut p = ScanPipeline::new(&cfg(), &cal()).unwrap();
        let mut out = Vec::new();
        let hour = 3_600_000_000_000u64 * 400_000;
        let a = vlp16_packet(100, 1_000);
        let b = vlp16_packet(340, 2_327);
        p.push(&a, hour + 1_000_000, &mut out);
        p.push(&a, hour + 1_000_000, &mut out);
        p.push(&b, hour + 2_327_000, &mut out);
        p.push(
            &a,
            hour + 1_000_000 + crate::scan::DUPLICATE_WINDOW_NS,
            &mut out,
        );
        let c = *p.counters();
        assert_eq!((c.packets, c.decoded, c.duplicates), (4, 2, 2));
        // 50 ms + 1 ns after the copy: no duplicate, decoded (its time is in line).
        p.push(
            &b,
            hour + 2_327_001 + crate::scan::DUPLICATE_WINDOW_NS,
            &mut out,
        );
        let c = *p.counters();
        assert_eq!((c.packets, c.decoded, c.duplicates, c.late), (5, 3, 2, 0));
        assert_eq!(c.accounted() + p.held() as u64, c.packets);
    }

    #[test]
    fn push_counts_and_never_panics() {
        let mut p = ScanPipeline::new(&cfg(), &cal()).unwrap();
        let mut out = Vec::new();
        for len in [
            0usize, 1, 2, 100, 512, 554, 1142, 1205, 1206, 1207, 1270, 1271, 1500, 9000,
        ] {
            p.push(&vec![0xFFu8; len], 1, &mut out);
        }
        let c = *p.counters();
        assert_eq!(c.packets, 14);
        // 0xFF-filled: starts with FF but not FF EE; near-1206 sizes are malformed, 1206 has bad flags.
        assert_eq!((c.decoded, c.malformed, c.ignored), (0, 5, 9));
        assert!(out.is_empty());
    }

    /// Pushes `n` VLP-16 packets 1.327 ms apart (150 a turn), each with a poll between
    /// packets, at the host times `at(i, t)` of packet `i` received at `t` (ns since the
    /// epoch); returns the frames, flushed.
    fn run_vlp16(n: u64, at: impl Fn(u64, u64) -> HostTime) -> (Vec<Frame>, DecodeCounters) {
        let mut p = ScanPipeline::new(&cfg(), &cal()).unwrap();
        let hour = 3_600_000_000_000u64 * 400_000;
        let mut out = Vec::new();
        for i in 0..n {
            let us = 1_000 + (i * 1_327) as u32;
            let t = hour + u64::from(us) * 1_000;
            p.poll_timeout(at(i, t), &mut out);
            p.push(
                &vlp16_packet(((i * 240) % 36_000) as u16, us),
                at(i, t),
                &mut out,
            );
        }
        p.flush(&mut out);
        (out, *p.counters())
    }

    /// Steps of CLOCK_REALTIME (an hour forward mid-frame, then two hours back) while
    /// CLOCK_MONOTONIC runs on: the frames are cut exactly as with no step (same points, same
    /// counts, sensor start times, no time jump, no restart); only the published `host_ns`
    /// follows the wall clock. An idle poll on a stepped wall clock closes nothing; one past the
    /// timeout on the monotonic clock does.
    #[test]
    fn a_wall_clock_step_cuts_no_frame() {
        let hour = 3_600_000_000_000u64;
        let mono0 = 5_000_000_000u64; // CLOCK_MONOTONIC's own origin
        let (base, base_c) = run_vlp16(400, |_, t| HostTime::both(t));
        let wall = |i: u64, t: u64| match i {
            0..200 => t,
            200..260 => t + hour,
            _ => t - hour,
        };
        let start = 400_000 * hour + 1_000_000;
        let (stepped, c) = run_vlp16(400, |i, t| HostTime::new(t - start + mono0, wall(i, t)));
        // The frame opened on the stepped wall clock starts an hour from its `host_ns`: the
        // sensor clock is now an hour from the host's, which `implausible_time` says.
        assert_eq!((base_c.implausible_time, c.implausible_time), (0, 1));
        assert_eq!(
            DecodeCounters {
                implausible_time: 0,
                ..c
            },
            base_c
        );
        assert_eq!(
            (
                c.packets,
                c.decoded,
                c.frames,
                c.time_jumps,
                c.restarts,
                c.frames_lost
            ),
            (400, 400, 3, 0, 0, 0)
        );
        assert_eq!(base.len(), 3);
        let sizes: Vec<usize> = stepped.iter().map(|f| f.points.len()).collect();
        assert_eq!(sizes, [57_600, 57_600, 38_400]);
        for (a, b) in base.iter().zip(&stepped) {
            assert_eq!(a.points, b.points);
            let mut h = b.header;
            h.host_ns = a.header.host_ns;
            assert_eq!(h, a.header);
        }
        // Both steps fall inside frame 1 (packets 150..300). host_ns is the wall time of each
        // frame's first packet: frame 1 opened before the forward step, frame 2 after the
        // backward one.
        let hosts: Vec<u64> = stepped.iter().map(|f| f.header.host_ns).collect();
        assert_eq!(
            hosts,
            [start, start + 199_050_000, start + 398_100_000 - hour]
        );

        // An idle poll: the wall clock an hour ahead says nothing; the monotonic clock decides.
        let mut p = ScanPipeline::new(&cfg(), &cal()).unwrap();
        let mut out = Vec::new();
        let t0 = 400_000 * hour + 1_000_000;
        p.push(&vlp16_packet(0, 1_000), HostTime::new(mono0, t0), &mut out);
        let timeout = p.frame_timeout_ns();
        p.poll_timeout(HostTime::new(mono0 + timeout, t0 + hour), &mut out);
        p.poll_timeout(HostTime::new(mono0 + timeout, t0 - hour), &mut out);
        assert!(out.is_empty());
        p.poll_timeout(HostTime::new(mono0 + timeout + 1, t0), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].header.host_ns, t0);
    }
}
