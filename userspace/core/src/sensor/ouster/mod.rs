//! Ouster OS0/OS1/OS2 decoding: lidar packets of every supported UDP profile in, frames of
//! [`PointXYZIRCAEDT`] out. Sans-IO, no `unsafe`, no panics on any input.
//!
//! Sources: Ouster *Sensor Documentation* (firmware 2.x/3.x), "Lidar Data Packet Format",
//! "Lidar Range Data To XYZ Lidar Coordinate Frame" and "Sensor Metadata"; the OS1 *Software
//! User Manual* v1.13 (LEGACY format, fw 1.1x metadata); ouster-sdk 1.0.1 (`ouster_core`:
//! `parsing.cpp`, `xyzlut.cpp`, `metadata.cpp`, `lidar_frame.cpp` `FrameBatcher`), whose
//! digest files are the goldens in `tests/decode/decode_ouster_golden.rs`.
//!
//! Submodules: [`packet`] (profiles, bit layouts, the checked packet view), [`metadata`] (the
//! metadata JSON), [`lut`] (the XYZ table).
//!
//! ## Configuration
//! [`SensorConfig::calibration`] is the sensor's metadata JSON. `cut_angle` must be 0 (or
//! 360): an Ouster frame is the sensor's own (one `frame_id`, columns 0..w in the order the
//! encoder sweeps them); its boundary is moved on the sensor (`azimuth_window`), and any other
//! cut is refused with [`ConfigError::OutOfRange`]. [`PipelineOptions::fov`] keeps the
//! points whose beam azimuth (see below) lies inside `[min, max]` degrees (wrapping through 0
//! when `min > max`); [`PipelineOptions::flavor`] does not apply.
//!
//! ## Points
//! One point per pixel with a non-zero range (and per non-zero second return in the dual
//! profiles), in packet order: columns as received, rows 0..h inside a column, the first return
//! before the second.
//! * `x, y, z`: ouster-sdk's XYZ (see [`lut`]), sensor frame, m.
//! * `distance`: the range field in m (mm / 1000; RNG15 ranges, single and dual, are in 8 mm
//!   steps). Points with `distance` at the range gate's minimum or below, or at its maximum or
//!   above, are dropped, like the other decoders.
//! * `channel`: the beam row, 0 = top beam.
//! * `azimuth`, `elevation`: the beam direction in the sensor frame (rad), fixed per pixel.
//! * `intensity`: the calibrated reflectivity (u8). LEGACY carries 16 bits on fw 1.1x: values
//!   above 255 are saturated to 255.
//! * `return_type` (DESIGN.md section 3): single-return profiles report the strongest return, so
//!   3 `strongest`. Dual profiles (RNG19…_DUAL, FIVE_WORD_PIXEL, (FUSA_)RNG15_RFL8_NIR8_DUAL): the first return is the
//!   strongest, 3; the second is the second strongest, 8 `second-strongest`; when both ranges are
//!   equal (and non-zero) one point of type 6 `identical` is emitted. [`VendorDecoder::return_mode`]
//!   reports [`ReturnMode::Strongest`] or, for the dual profiles, [`ReturnMode::Dual`] (two
//!   returns; Ouster's pair is strongest + second strongest, not last + strongest).
//! * `time_stamp`: the column timestamp minus the frame start, ns.
//!
//! In the ouster-ros layouts ([`crate::layout::PointType::Ouster`] and
//! [`crate::layout::PointType::OusterXyzir`]) each point holds what ouster-ros fills from its
//! pixel: `intensity` = SIGNAL (0 in the RNG15 profiles, which have none), and in `ouster` also
//! `reflectivity` = REFLECTIVITY and `ambient` = NEAR_IR (RNG15's 8 bits × 16); a dual
//! profile's second return takes SIGNAL2 and REFLECTIVITY2 (NEAR_IR is shared), an
//! `identical` point the first return's. Each channel is read as ouster-sdk 1.0.1 reads it
//! (LEGACY REFLECTIVITY: the byte at 4, also on fw 1.1x where the sensor sent 16 bits, which
//! `intensity` above saturates instead). x, y, z, `t`, `ring` and `range` are those of the
//! generic conversion ([`crate::layout::Layout::from_point`]). Every other layout is written
//! straight from the column kernel, without this pass.
//!
//! ## Frames
//! A frame is all packets of one `frame_id` (LEGACY: the first column's frame_id). It is
//! published as soon as all packets the column window implies have arrived
//! ([`metadata::OusterMetadata::packets_per_frame`], 64 for 1024 columns of 16), after
//! frame timeout of silence (host time; on arrival the packet's column time too, so a pause
//! on the receiving side cuts no frame), on flush, or when the next frame has run for the
//! reorder window. `packets_expected` is always the full count, so a partial frame (stream
//! start or end, losses) shows its holes. Frame ids compare modulo 2^16, or 2^32 with the FUSA
//! packet header (32-bit frame ids), as ouster-sdk does
//! ([`packet::PacketFormat::frame_id_diff`]).
//! * **Reorder window**: when a packet of a newer frame arrives while the current frame is
//!   incomplete, the current frame is held open until `max(2, packets per frame / 8)` packets
//!   of the new frame have arrived (8 of 64: an eighth of the frame period); a late packet of
//!   the held frame lands in it ([`OusterStats::reordered`]), and the held frame is published
//!   as soon as it is complete, or when the window ends. At most one frame is held.
//! * **Stale**: a packet already seen in its frame (same first measurement_id) is dropped as
//!   `ignored` and counted in [`OusterStats::duplicates`]; a late packet of a frame already
//!   published, up to [`STALE_FRAMES`] ids back, is dropped as [`Rejection::Late`] (`late`)
//!   and counted in [`OusterStats::stale`].
//! * **Frame-id jumps**: a packet further back than that, or further ahead than the host time
//!   elapsed since the previous packet explains (`1 + AHEAD_SLACK_FRAMES + host_dt / period`,
//!   the period from the metadata's `lidar_data_format.fps` (fw 3.x) or else its `lidar_mode`,
//!   e.g. `1024x10` → 100 ms, else 50 ms), is
//!   dropped as [`Rejection::TimeJump`] (`time_jumps`); the frame around it stays whole.
//!   [`crate::scan::RESTART_AGREE`] consecutive packets agreeing on the new ids are a sensor
//!   restart: the frames in progress are published and the stream continues there (counted
//!   in `restarts`, logged once).
//! * **Lost frames**: frame ids skipped between the previous frame and a new one are whole
//!   frames lost: [`crate::frame::FrameHeader::frames_lost_before`] of the new frame.
//!
//! `start_ns` is the earliest valid column timestamp of the frame (sensor clock, ns: the
//! sensor's `timestamp_mode` decides the epoch; a frame without one valid column takes the
//! host wall time of its first packet and says [`crate::frame::FrameClock::Host`]), `host_ns` the
//! receive time (CLOCK_REALTIME) of its first packet; the silence and frame-id windows run on host
//! monotonic time. Packets out of order inside a frame are re-sorted by time at publication,
//! so `time_stamp` is non-decreasing per channel (in the dual profiles a column's first return
//! precedes its second at the same time).
//!
//! ## Rejections
//! A payload of exactly the metadata's packet size that fails [`packet::Packet::new_checked`]
//! (packet type ≠ 1, a measurement_id ≥ columns_per_frame) is `malformed`; so is a payload
//! whose size is within 25 % of it (a datagram cut short or padded: a lost fragment, a
//! firmware variant). Anything else (48-byte IMU packets, foreign traffic) is `ignored`. A packet whose
//! header serial number or init_id disagree with the metadata is decoded (the configured
//! metadata wins, as the configured model does for Velodyne) and counted in [`OusterStats`].
//!
//! **Footer CRC** (STANDARD header): firmware 3.x ends each packet with a CRC-64 of the rest
//! ([`packet`]); 2.x leaves zeros or a marker there. The stream learns which: until one packet's
//! CRC matches, each packet is decoded whatever its footer, and after [`CRC_PROBE_PACKETS`]
//! packets without a match the footer is no longer computed (the sensor sends no CRC). Once one
//! matched (a chance of 2^-64 otherwise), a packet whose CRC differs is `malformed` and counted
//! in [`OusterStats::crc_errors`]. New tables ([`VendorDecoder::set_tables`]) start over. The
//! FUSA header has no CRC.
//!
//! [`PointXYZIRCAEDT`]: crate::point::PointXYZIRCAEDT

mod column;
pub mod imu;
pub mod lut;
pub mod metadata;
pub mod packet;

use std::sync::Arc;

use crate::HostTime;
use crate::frame::Frame;
use crate::point_buf::PointBuf;

use crate::scan::{Bound, FrameAccount, FrameBuilder, RESTART_AGREE, TimeVerdict, in_sector};
use crate::vendor::{
    ConfigError, PipelineOptions, Rejection, ReturnMode, SensorConfig, VendorDecoder,
};
use column::{ColumnReturns, decode_column, range_window_mm};
use lut::XyzLut;
use metadata::OusterMetadata;
use packet::{Packet, PacketFormat, Profile};

/// Packets of a STANDARD-header stream whose footer CRC is computed before the stream concludes
/// that the sensor sends none (module docs, "Footer CRC").
pub const CRC_PROBE_PACKETS: u32 = 64;

/// What a stream knows about its packets' footer CRC (module docs, "Footer CRC").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CrcState {
    /// No packet matched yet; this many did not.
    Probing(u32),
    /// A packet's CRC matched: the sensor sends them, every packet is checked.
    Sent,
    /// [`CRC_PROBE_PACKETS`] packets without a match, or a format without CRC.
    NotSent,
}

/// Late packets of up to this many frame ids before the current/last one are dropped as stale.
pub const STALE_FRAMES: i32 = 8;
/// Frame ids a packet may run ahead of the current frame beyond those the host time elapsed
/// since the previous packet explains (`diff ≤ 1 + AHEAD_SLACK_FRAMES + host_dt / period`);
/// further ahead is a frame-id jump.
pub const AHEAD_SLACK_FRAMES: i32 = 1;

/// Rotation period assumed when the metadata's `lidar_mode` names no rate, ns (20 Hz, the
/// fastest mode, so the jump rule never rejects a genuine frame).
const DEFAULT_PERIOD_NS: u64 = 50_000_000;

/// The Ouster decoder's own counters: `lidarxdp_ouster_*{sensor,model}`.
pub const OUSTER_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "ouster",
    labels: crate::vendor::SENSOR_COUNTERS.labels,
};

crate::counter_set! {
    /// Ouster-specific counters (monotonic), beside the pipeline's [`crate::vendor::DecodeCounters`].
    pub struct OusterStats in OUSTER_COUNTERS;
    {
        /// Same first measurement_id.
        duplicates: Counter "packets" "Packets dropped because their frame already had them.",
        stale: Counter "packets" "Late packets of a frame already published, dropped.",
        serial_mismatch: Counter "packets" "Decoded packets whose header prod_sn differs from the metadata's serial number.",
        init_id_mismatch: Counter "packets" "Decoded packets whose header init_id differs from the metadata's.",
        /// Outside the column window.
        invalid_columns: Counter "columns" "Columns skipped because their status bit 0 was clear.",
        /// Their time stamp lies more than [`MAX_COLUMN_SPREAD_NS`] from the first column time
        /// of their frame (a corrupt or stepped column clock): never a frame stamped in the
        /// past, never a saturated `time_stamp`.
        column_time_jumps: Counter "columns" "Valid columns skipped because their time stamp lies over 1 s from their frame's first column.",
        /// Also counted `malformed` (the footer CRC-64 of a STANDARD-header packet, firmware
        /// 3.x, once the stream has seen one match; module docs, "Footer CRC").
        crc_errors: Counter "packets" "Lidar packets dropped because their footer CRC-64 was wrong (the sensor sends CRCs).",
        /// They were added to their own frame.
        reordered: Counter "packets" "Packets of a frame held open in the reorder window that arrived after the next frame had begun.",
    }
}

#[derive(Clone, Debug)]
struct Building {
    frame_id: u32,
    /// The frame's account for the builder: its sensor start (the earliest column time),
    /// host time, packets received and malformed, whole frames lost before it; `lost` and
    /// `host_clock` are set when it is published.
    account: FrameAccount,
    /// Host monotonic time (CLOCK_MONOTONIC ns) of the frame's last packet.
    last_mono_ns: u64,
    last_col_ns: u64,
    /// One bit per packet slot of the frame (first measurement_id / columns_per_packet).
    seen: Vec<u64>,
    points: PointBuf,
    unordered: bool,
    has_time: bool,
    /// Time stamp of the frame's first valid column, ns (the reference for
    /// [`MAX_COLUMN_SPREAD_NS`]).
    first_col_ns: u64,
}

/// Largest distance of a column's time stamp from the first column time of its frame, ns
/// (1 s, ten times the longest Ouster frame period of 100 ms at 10 Hz). A column beyond it is
/// skipped and counted in [`OusterStats::column_time_jumps`]; so a frame's columns span at most
/// 2 s and no point `time_stamp` (ns since the frame start, u32) can saturate.
pub const MAX_COLUMN_SPREAD_NS: u64 = 1_000_000_000;

/// An Ouster sensor's calibration tables: everything derived from its metadata JSON (and the
/// field of view), immutable and shared (`Arc`) by every clone of the stream; a reload swaps
/// the whole of it ([`VendorDecoder::set_tables`]).
#[derive(Debug)]
pub struct OusterTables {
    /// The parsed metadata.
    meta: OusterMetadata,
    /// The UDP profile's packet format.
    format: PacketFormat,
    /// The XYZ lookup table.
    lut: XyzLut,
    /// Per pixel (column-major), inside the field of view; `None` without one.
    keep: Option<Vec<bool>>,
    /// Packets per frame.
    expected: u32,
    /// Packets of the next frame a frame stays open for: `max(2, packets per frame / 8)`.
    reorder_window: u32,
    /// Frame period from the metadata's `fps` or `lidar_mode` (`1024x10` → 100 ms), ns.
    period_ns: u64,
    /// Points of a full frame: the buffer capacity a frame starts with.
    point_capacity: usize,
}

/// Decoder + frame assembler for one Ouster sensor ([`VendorDecoder`]).
#[derive(Clone, Debug)]
pub struct OusterStream {
    /// The calibration tables, shared.
    tables: Arc<OusterTables>,
    /// The column kernel's input, reused from column to column.
    returns: Box<ColumnReturns>,
    /// Sequence, silence, buffers, the frame header.
    builder: FrameBuilder,
    /// Kept ranges, mm: `lo <= r < hi` ⇔ `min < r/1000 < max` of the range gate (f32).
    range_mm: (u32, u32),
    cur: Option<Building>,
    /// The previous frame, held open after the next one began (reorder window), with the
    /// packets of the current frame it still waits.
    prev: Option<(Building, u32)>,
    /// Host monotonic time (CLOCK_MONOTONIC ns) of the previous accepted packet.
    last_mono_ns: Option<u64>,
    /// A frame id far from the stream's, and how many consecutive packets agreed with it.
    candidate: Option<(u32, u32)>,
    /// Sustained frame-id jumps taken as a sensor restart.
    restarts: u64,
    last_published: Option<u32>,
    pending_malformed: u32,
    point_capacity: usize,
    /// The packet bitmap of the last published frame, reused by the next one.
    spare_seen: Vec<u64>,
    decoded_any: bool,
    /// The footer CRC verdict so far.
    crc: CrcState,
    stats: OusterStats,
}

impl OusterStream {
    /// Parses `calibration`, the contents of the metadata JSON `cfg.calibration` names, and
    /// builds the stream.
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] for a `cut_angle` other than 0 or 360 (see the module
    /// docs); [`ConfigError::CalibrationIo`] / [`ConfigError::Calibration`] for metadata that
    /// is not UTF-8 or invalid.
    pub fn new(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let meta = OusterMetadata::from_bytes(calibration, &cfg.calibration)?;
        Self::with_metadata(cfg, opts, meta)
    }

    /// Builds the stream from parsed metadata (`cfg.calibration` is not read, only named in
    /// errors).
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] for a `cut_angle` other than 0 or 360;
    /// [`ConfigError::Calibration`] if the metadata breaks [`OusterMetadata::validate`].
    pub fn with_metadata(
        cfg: &SensorConfig,
        opts: PipelineOptions,
        meta: OusterMetadata,
    ) -> Result<Self, ConfigError> {
        if !(cfg.cut_angle.get() == 0.0 || cfg.cut_angle.get() == 360.0) {
            return Err(ConfigError::OutOfRange {
                field: "cut_angle".into(),
                value: cfg.cut_angle.to_string(),
                valid: "0 or 360 deg for Ouster (frames follow the sensor's frame_id; move the \
                        boundary with the sensor's azimuth_window)"
                    .into(),
            });
        }
        meta.validate().map_err(|e| ConfigError::Calibration {
            path: cfg.calibration.clone(),
            message: e.to_string(),
        })?;
        let lut = XyzLut::new(&meta);
        let keep = opts.fov.map(|f| {
            let (min, max) = f.degrees();
            let (min, max) = (min.to_radians() as f32, max.to_radians() as f32);
            (0..lut.w)
                .flat_map(|c| lut.column(c).azimuth.iter().take(lut.h))
                .map(|&a| in_sector(min, max, a, (Bound::Inclusive, Bound::Inclusive)))
                .collect()
        });
        let format = meta.format;
        let expected = meta.packets_per_frame() as u32;
        let point_capacity = meta.valid_columns_per_frame() * format.pixels_per_column;
        let hz = meta.fps.map(u64::from).or_else(|| {
            meta.lidar_mode
                .as_deref()
                .and_then(|m| m.split_once('x'))
                .and_then(|(_, hz)| hz.trim().parse::<u64>().ok())
                .filter(|hz| (1..=100).contains(hz))
        });
        let period_ns = hz.map_or(DEFAULT_PERIOD_NS, |hz| 1_000_000_000 / hz);
        Ok(Self {
            tables: Arc::new(OusterTables {
                format,
                lut,
                keep,
                expected,
                reorder_window: (expected / 8).max(2),
                period_ns,
                point_capacity,
                meta,
            }),
            builder: FrameBuilder::new(cfg.sensor_id, cfg.frame_timeout.ns()),
            range_mm: range_window_mm(cfg.range.min().get(), cfg.range.max().get()),
            cur: None,
            prev: None,
            last_mono_ns: None,
            candidate: None,
            restarts: 0,
            last_published: None,
            pending_malformed: 0,
            point_capacity,
            spare_seen: Vec::new(),
            decoded_any: false,
            crc: CrcState::Probing(0),
            stats: OusterStats::default(),
            returns: Box::new(ColumnReturns::new()),
        })
    }

    /// The parsed metadata.
    pub fn metadata(&self) -> &OusterMetadata {
        &self.tables.meta
    }

    /// The XYZ table.
    pub fn lut(&self) -> &XyzLut {
        &self.tables.lut
    }

    /// Ouster-specific counters.
    pub fn stats(&self) -> &OusterStats {
        &self.stats
    }

    /// Forgets the frame in progress (dropped, not published) and the last published frame
    /// id, so the next packet opens a frame whatever its id (after a sensor restart or
    /// reconfiguration; benchmarks replaying one capture). Counters and sequence numbers go on.
    pub fn reset(&mut self) {
        self.cur = None;
        self.prev = None;
        self.candidate = None;
        self.last_mono_ns = None;
        self.last_published = None;
        self.pending_malformed = 0;
    }

    /// Classifies a payload against the metadata's format (rules in the module docs).
    ///
    /// # Errors
    /// [`Rejection::Malformed`] or [`Rejection::Ignored`].
    pub fn classify<'a>(&self, payload: &'a [u8]) -> Result<Packet<&'a [u8]>, Rejection> {
        let expected = self.tables.format.packet_len();
        match Packet::new_checked(payload, self.tables.format) {
            Ok(p) => Ok(p),
            Err(packet::PacketError::Length { len, .. }) => {
                if len.abs_diff(expected) <= expected / 4 {
                    Err(Rejection::Malformed)
                } else {
                    Err(Rejection::Ignored)
                }
            }
            Err(_) => Err(Rejection::Malformed),
        }
    }

    /// The footer CRC rule (module docs, "Footer CRC"): false for a packet to drop.
    fn crc_ok(&mut self, p: &Packet<&[u8]>) -> bool {
        match self.crc {
            CrcState::NotSent => true,
            CrcState::Sent => p.crc_matches().unwrap_or(true),
            CrcState::Probing(misses) => {
                self.crc = match p.crc_matches() {
                    None => CrcState::NotSent,
                    Some(true) => CrcState::Sent,
                    Some(false) if misses + 1 >= CRC_PROBE_PACKETS => CrcState::NotSent,
                    Some(false) => CrcState::Probing(misses + 1),
                };
                true
            }
        }
    }

    /// Signed frame-id distance from `from` to `to`, modulo 2^16 or 2^32 (FUSA header).
    fn frame_id_diff(&self, from: u32, to: u32) -> i64 {
        self.tables.format.frame_id_diff(from, to)
    }

    /// Publishes the held previous frame, if any.
    fn publish_prev(&mut self, out: &mut Vec<Frame>) {
        if let Some((b, _)) = self.prev.take() {
            self.publish_building(b, out);
        }
    }

    /// Publishes the held previous frame, then the current one.
    fn publish(&mut self, out: &mut Vec<Frame>) {
        self.publish_prev(out);
        if let Some(b) = self.cur.take() {
            self.publish_building(b, out);
        }
    }

    fn publish_building(&mut self, mut b: Building, out: &mut Vec<Frame>) {
        if b.unordered {
            b.points.sort_by_time();
        }
        self.point_capacity = self.point_capacity.max(b.points.len());
        self.last_published = Some(b.frame_id);
        self.spare_seen = std::mem::take(&mut b.seen);
        // A frame without one valid column has no sensor time: host time, said so.
        let account = FrameAccount {
            start_ns: if b.has_time {
                b.account.start_ns
            } else {
                b.account.host_ns
            },
            lost: self.tables.expected.saturating_sub(b.account.received),
            host_clock: !b.has_time,
            shift_ns: if b.has_time { b.account.shift_ns } else { 0 },
            ..b.account
        };
        self.builder.emit(&account, 0, b.points, out);
    }

    fn open(&mut self, frame_id: u32, host: HostTime) {
        let slots = self.tables.format.packets_per_frame().div_ceil(64);
        let mut seen = std::mem::take(&mut self.spare_seen);
        seen.clear();
        seen.resize(slots, 0);
        self.cur = Some(Building {
            frame_id,
            account: FrameAccount {
                malformed: std::mem::take(&mut self.pending_malformed),
                ..self.builder.open_account(0, host.wall_ns)
            },
            last_mono_ns: host.mono_ns,
            last_col_ns: 0,
            seen,
            points: self.builder.take_points(self.point_capacity),
            unordered: false,
            has_time: false,
            first_col_ns: 0,
        });
    }

    /// Decides where a packet of `frame_id` received at `host` goes (rules in the module
    /// docs): `Ok(false)` the current frame (opening it, or a newer one, as needed),
    /// `Ok(true)` the previous frame held open in the reorder window.
    ///
    /// # Errors
    /// [`Rejection::Ignored`] for a stale packet, [`Rejection::TimeJump`] for a frame-id jump.
    fn route(
        &mut self,
        frame_id: u32,
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<bool, Rejection> {
        let Some(ref_id) = self
            .cur
            .as_ref()
            .map(|b| b.frame_id)
            .or(self.last_published)
        else {
            self.open(frame_id, host);
            return Ok(false);
        };
        if self
            .prev
            .as_ref()
            .is_some_and(|(b, _)| b.frame_id == frame_id)
        {
            self.candidate = None;
            return Ok(true);
        }
        let diff = self.frame_id_diff(ref_id, frame_id);
        let current = self.cur.is_some();
        if current && diff == 0 {
            self.candidate = None;
            return Ok(false);
        }
        // A stale packet: an older frame id than the one being built, or not newer than the
        // last published one.
        let stale_top = if current { -1 } else { 0 };
        if (-i64::from(STALE_FRAMES)..=stale_top).contains(&diff) {
            self.candidate = None;
            self.stats.stale += 1;
            return Err(Rejection::Late);
        }
        let host_dt = self
            .last_mono_ns
            .map_or(0, |h| host.mono_ns.saturating_sub(h));
        let ahead_max =
            i64::from(1 + AHEAD_SLACK_FRAMES) + (host_dt / self.tables.period_ns) as i64;
        if diff >= 1 && diff <= ahead_max {
            self.candidate = None;
            // A newer frame: the current one is held open for the reorder window (an older
            // held one is published first); skipped frame ids are lost frames.
            self.publish_prev(out);
            if let Some(b) = self.cur.take() {
                self.prev = Some((b, self.tables.reorder_window));
            }
            self.open(frame_id, host);
            if let Some(b) = self.cur.as_mut() {
                b.account.lost_before = u32::try_from(diff - 1).unwrap_or(u32::MAX);
            }
            return Ok(false);
        }
        // A frame-id jump (far back beyond the stale window, or far ahead): dropped, unless
        // RESTART_AGREE consecutive packets agree on the new frame ids.
        let agree = match self.candidate {
            Some((c, n))
                if (0..=i64::from(1 + AHEAD_SLACK_FRAMES))
                    .contains(&self.frame_id_diff(c, frame_id)) =>
            {
                n + 1
            }
            _ => 1,
        };
        if agree >= RESTART_AGREE {
            self.candidate = None;
            self.restarts += 1;
            if self.restarts == 1 {
                log::warn!(
                    "Ouster frame_id jumped from {ref_id} to {frame_id} and stayed there for \
                     {RESTART_AGREE} packets: taken as a sensor restart (new stream); further \
                     restarts are counted in `restarts` without a log line"
                );
            }
            // The frames in progress are published; the held candidates and this packet are
            // pushed again by the pipeline and open the new stream's frame.
            self.publish(out);
            self.last_published = None;
            return Err(Rejection::Restart);
        }
        self.candidate = Some((frame_id, agree));
        Err(Rejection::TimeJump)
    }

    /// Decodes the columns of a checked packet into the current frame's points (the held
    /// previous frame's with `into_prev`).
    fn decode_into(&mut self, p: &Packet<&[u8]>, into_prev: bool) {
        let b = if into_prev {
            self.prev.as_mut().map(|(b, _)| b)
        } else {
            self.cur.as_mut()
        };
        let Some(b) = b else { return };
        let f = self.tables.format;
        let h = f.pixels_per_column;
        let pb = f.profile.pixel_bytes();
        let bytes = p.as_bytes();
        let range_mm = self.range_mm;
        for col in 0..f.columns_per_packet {
            if p.col_status(col) & 1 == 0 {
                self.stats.invalid_columns += 1;
                continue;
            }
            let m_id = usize::from(p.col_measurement_id(col));
            // On the stream's time line: a frame that holds a clock step runs on.
            let ts = self.builder.clock().stream_ns(p.col_timestamp(col));
            if b.has_time && ts.abs_diff(b.first_col_ns) > MAX_COLUMN_SPREAD_NS {
                self.stats.column_time_jumps += 1;
                continue;
            }
            if !b.has_time {
                b.account.start_ns = ts;
                b.points.set_start_ns(ts);
                b.first_col_ns = ts;
                b.has_time = true;
            } else if ts < b.account.start_ns {
                b.points.rebase(ts);
                b.account.start_ns = ts;
                b.unordered = true;
            }
            if ts < b.last_col_ns {
                b.unordered = true;
            }
            b.last_col_ns = ts;
            let t = u32::try_from(ts - b.account.start_ns).unwrap_or(u32::MAX);
            b.points.set_packet_ns(ts);
            let start = p.col_offset(col) + f.col_header_len();
            let Some(pixels) = bytes.get(start..start + h * pb) else {
                continue;
            };
            let lut = self.tables.lut.column(m_id);
            let keep = self
                .tables
                .keep
                .as_deref()
                .and_then(|k| k.get(m_id * h..(m_id + 1) * h));
            let returns = &mut self.returns;
            decode_column(
                f.profile,
                pixels,
                lut,
                keep,
                t,
                range_mm,
                returns,
                &mut b.points,
            );
        }
    }
}

impl VendorDecoder for OusterStream {
    fn sync_source(&self) -> crate::msg::SyncSource {
        self.tables.meta.sync_source()
    }

    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection> {
        let checked = self.classify(payload).and_then(|p| {
            if self.crc_ok(&p) {
                Ok(p)
            } else {
                self.stats.crc_errors += 1;
                Err(Rejection::Malformed)
            }
        });
        let p = match checked {
            Ok(p) => p,
            Err(Rejection::Malformed) => {
                match self.cur.as_mut() {
                    Some(b) => b.account.malformed += 1,
                    None => self.pending_malformed += 1,
                }
                return Err(Rejection::Malformed);
            }
            Err(r) => return Err(r),
        };
        // A silence (host time and column time both past the timeout; a pause on our side
        // with the columns in line is none) publishes the frames in progress, and then any
        // frame id is taken (a sensor or replay that restarted while quiet); skipped ids still
        // count as lost.
        let f = self.tables.format;
        let first_col = (0..f.columns_per_packet).find(|&c| p.col_status(c) & 1 == 1);
        let col_ns = first_col.map(|c| p.col_timestamp(c));
        let silent = self.builder.silence_before(host.mono_ns, col_ns);
        if silent {
            self.publish(out);
            self.builder.clock_mut().note_silence();
        }
        let frame_id = p.frame_id();
        if silent {
            // In line: a late packet (stale window) or a newer frame the silence explains.
            let in_window = self.last_published.is_some_and(|id| {
                let d = self.frame_id_diff(id, frame_id);
                let host_dt = self
                    .last_mono_ns
                    .map_or(0, |h| host.mono_ns.saturating_sub(h));
                d >= -i64::from(STALE_FRAMES)
                    && d <= i64::from(1 + AHEAD_SLACK_FRAMES)
                        + (host_dt / self.tables.period_ns) as i64
            });
            if !in_window && self.cur.is_none() && self.prev.is_none() {
                self.last_published = None;
                self.candidate = None;
            }
        }
        let into_prev = self.route(frame_id, host, out)?;
        if let (Some(c), false) = (first_col, into_prev) {
            // The column clock of a packet of the current frame (late and stale packets are
            // the frame ids' business), judged with the column's encoder position (its
            // measurement id as an azimuth): a clock step while the columns run on is taken
            // without a cut; a single far stamp is a jump (the packet is held).
            let m_id = u64::from(p.col_measurement_id(c));
            let w = f.columns_per_frame.max(1) as u64;
            let az = (m_id * u64::from(crate::scan::AZIMUTH_UNITS) / w) as u32;
            let t = p.col_timestamp(c);
            match self.builder.clock_mut().check(t, host.mono_ns, Some(az), 0) {
                TimeVerdict::Step => return Err(Rejection::ClockStep),
                TimeVerdict::Jump => return Err(Rejection::TimeJump),
                TimeVerdict::Restart => {
                    // The frame this packet opened holds nothing yet: dropped, not published.
                    if self.cur.as_ref().is_some_and(|b| b.account.received == 0) {
                        self.cur = None;
                    }
                    self.publish(out);
                    self.last_published = None;
                    self.candidate = None;
                    return Err(Rejection::Restart);
                }
                TimeVerdict::Late | TimeVerdict::InLine { .. } => {}
            }
        }
        self.last_mono_ns = Some(host.mono_ns);
        let slot = usize::from(p.col_measurement_id(0)) / self.tables.format.columns_per_packet;
        let b = if into_prev {
            self.prev.as_mut().map(|(b, _)| b)
        } else {
            self.cur.as_mut()
        };
        let Some(b) = b else {
            return Err(Rejection::Ignored);
        };
        let (word, bit) = (slot / 64, 1u64 << (slot % 64));
        match b.seen.get_mut(word) {
            Some(w) if *w & bit != 0 => {
                self.stats.duplicates += 1;
                return Err(Rejection::Ignored);
            }
            Some(w) => *w |= bit,
            None => {}
        }
        b.account.received += 1;
        b.last_mono_ns = host.mono_ns;
        if self.tables.format.profile != Profile::Legacy {
            if self.tables.meta.prod_sn.is_some_and(|sn| sn != p.prod_sn()) {
                self.stats.serial_mismatch += 1;
            }
            if self.tables.meta.init_id.is_some_and(|id| id != p.init_id()) {
                self.stats.init_id_mismatch += 1;
            }
        }
        self.decode_into(&p, into_prev);
        self.decoded_any = true;
        if into_prev {
            self.stats.reordered += 1;
            if self
                .prev
                .as_ref()
                .is_some_and(|(b, _)| b.account.received >= self.tables.expected)
            {
                self.publish_prev(out);
            }
        } else {
            // One more packet of the current frame: the held frame's window shrinks.
            if let Some((_, left)) = self.prev.as_mut() {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    self.publish_prev(out);
                }
            }
            if self
                .cur
                .as_ref()
                .is_some_and(|b| b.account.received >= self.tables.expected)
            {
                self.publish(out);
            }
        }
        Ok(())
    }

    fn poll_timeout(&mut self, now_mono_ns: u64, out: &mut Vec<Frame>) {
        if self.in_progress() && self.builder.silent_at(now_mono_ns) {
            self.publish(out);
        }
    }

    fn in_progress(&self) -> bool {
        self.cur.is_some() || self.prev.is_some()
    }

    type Tables = OusterTables;

    fn tables(&self) -> &Arc<OusterTables> {
        &self.tables
    }

    /// Takes `tables`: packet format, XYZ table, field-of-view table, packets per frame,
    /// frame period. A frame in progress goes on with the new tables (a column the new format
    /// does not have makes its packets malformed); the footer CRC rule starts over.
    fn set_tables(&mut self, tables: Arc<OusterTables>) {
        self.point_capacity = self.point_capacity.max(tables.point_capacity);
        self.crc = CrcState::Probing(0);
        self.tables = tables;
    }

    fn flush(&mut self, out: &mut Vec<Frame>) {
        self.publish(out);
    }

    fn return_mode(&self) -> Option<ReturnMode> {
        self.decoded_any
            .then_some(match self.tables.format.profile.returns() {
                2 => ReturnMode::Dual,
                _ => ReturnMode::Strongest,
            })
    }

    fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>) {
        self.builder.set_buffer_source(source);
    }

    fn set_point_type(&mut self, point_type: crate::layout::PointType) {
        self.builder.set_point_type(point_type);
        for b in self
            .cur
            .iter_mut()
            .chain(self.prev.iter_mut().map(|(b, _)| b))
        {
            self.builder.renew_if_empty(&mut b.points);
        }
    }

    fn time_faults(&self) -> crate::vendor::TimeFaults {
        crate::vendor::TimeFaults {
            restarts: self.restarts,
            clock_steps: self.builder.clock().steps(),
            date_fallbacks: 0,
        }
    }

    fn counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        <OusterStats as crate::counters::CounterSet>::DESCS
    }

    fn visit_counters(&self, f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64)) {
        crate::counters::CounterSet::visit(&self.stats, f);
    }
}

#[cfg(test)]
mod tests {
    use super::column::*;
    use super::lut::Column;
    use super::*;
    use crate::layout::{Layout, OusterPoint, OusterXYZIR, PointType};
    use crate::point::{PointXYZIRCAEDT, ReturnType};
    use crate::simd::{Compactor, OUSTER_MAX_ROWS, OusterColumnIn, OusterLayout};
    use proptest::prelude::*;

    /// The candidate points `column_points` keeps for `c` (SSE2 on x86-64), and those of the
    /// portable form, as bytes.
    fn both(c: &OusterColumnIn<'_>) -> (Vec<u8>, Vec<u8>) {
        let run = |f: fn(&OusterColumnIn<'_>, &mut Compactor<'_, PointXYZIRCAEDT>)| {
            let mut out: Vec<PointXYZIRCAEDT> = Vec::new();
            crate::simd::extend_compacted(&mut out, c.candidates(), |o| f(c, o));
            bytemuck::cast_slice::<_, u8>(&out).to_vec()
        };
        (run(column_points), run(column_points_portable))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// The SIMD column kernel equals the portable code bit for bit: any row count (not
        /// only multiples of 4), either profile kind, ranges inside and outside the window,
        /// equal returns, any table.
        #[test]
        fn column_kernel_equals_the_portable_code(
            rows in 1usize..=OUSTER_MAX_ROWS,
            dual in any::<bool>(),
            ranges in prop::collection::vec((0u32..(1 << 20), any::<bool>(), any::<bool>()), OUSTER_MAX_ROWS),
            intensity in prop::collection::vec(any::<[u8; 2]>(), OUSTER_MAX_ROWS),
            table in prop::collection::vec(-1e-3f32..1e-3, 5 * OUSTER_MAX_ROWS),
            offset in any::<[i16; 3]>(),
            n_mm in 0f32..50.0,
            t in any::<u32>(),
            (lo, hi) in (0u32..2000, 0u32..(1 << 20)),
        ) {
            let mut range = [[0u32; OUSTER_MAX_ROWS]; 2];
            let mut inten = [[0u8; OUSTER_MAX_ROWS]; 2];
            for row in 0..rows {
                let (r, same, none) = ranges[row];
                range[0][row] = if none { 0 } else { r };
                range[1][row] = if same { range[0][row] } else { r / 3 };
                inten[0][row] = intensity[row][0];
                inten[1][row] = intensity[row][1];
            }
            let stride = rows.next_multiple_of(4);
            let col = |i: usize| {
                let mut v = table[i * OUSTER_MAX_ROWS..(i + 1) * OUSTER_MAX_ROWS].to_vec();
                v.truncate(stride);
                v[rows..].fill(0.0);
                v
            };
            let (dx, dy, dz, az, el) = (col(0), col(1), col(2), col(3), col(4));
            let c = OusterColumnIn {
                rows,
                range: &range,
                intensity: &inten,
                dual,
                lut: Column {
                    dx: &dx,
                    dy: &dy,
                    dz: &dz,
                    azimuth: &az,
                    elevation: &el,
                    offset: offset.map(|o| f32::from(o) * 1e-3),
                    n_mm,
                },
                t,
                lo,
                hi,
            };
            let (kernel, portable) = both(&c);
            prop_assert_eq!(kernel.len(), portable.len());
            prop_assert!(kernel == portable);
        }
    }

    /// The returns of `px` read by the profile's reader for `layout` and pixel size `pb`.
    #[cfg(target_arch = "x86_64")]
    fn read_pixel(layout: OusterLayout, pb: usize, px: &[u8]) -> Returns {
        match (layout, pb) {
            (OusterLayout::Legacy, 12) => legacy(px.try_into().unwrap()),
            (OusterLayout::Rng19, 12) => rng19(px.try_into().unwrap()),
            (OusterLayout::Rng15, 4) => rng15(px.try_into().unwrap()),
            (OusterLayout::Dual, 16) => dual::<16>(px.try_into().unwrap()),
            (OusterLayout::Dual, 20) => dual::<20>(px.try_into().unwrap()),
            (OusterLayout::Rng15Dual, 8) => rng15_dual(px.try_into().unwrap()),
            other => panic!("no profile {other:?}"),
        }
    }

    #[cfg(target_arch = "x86_64")]
    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// The SSE2 pixel reader equals each profile's reader on every row it reads, and reads
        /// every whole group of four rows whose loads stay inside the pixels.
        #[test]
        fn simd_pixel_reader_equals_the_profile_readers(
            profile in 0usize..6,
            rows in 1usize..=OUSTER_MAX_ROWS,
            extra in 0usize..24,
            seed in any::<u64>(),
        ) {
            let (layout, pb) = [
                (OusterLayout::Legacy, 12),
                (OusterLayout::Rng19, 12),
                (OusterLayout::Rng15, 4),
                (OusterLayout::Dual, 16),
                (OusterLayout::Dual, 20),
                (OusterLayout::Rng15Dual, 8),
            ][profile];
            // The column's pixels and `extra` bytes after them (the next column, the footer),
            // or, one time in three, the last pixel cut short.
            let len = (rows * pb + extra).saturating_sub(if extra % 3 == 0 { pb / 2 } else { 0 });
            let mut x = seed | 1;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let mut range = [[0u32; OUSTER_MAX_ROWS]; 2];
            let mut intensity = [[0u8; OUSTER_MAX_ROWS]; 2];
            // As the decoder calls it: only whole pixels are rows.
            let rows = rows.min(len / pb);
            let done = crate::simd::ouster_extract(&bytes, pb, layout, rows, &mut range, &mut intensity);
            prop_assert!(done.is_multiple_of(4) && done <= rows);
            let load_end = |g: usize| if pb == 4 { 16 * g + 16 } else { (4 * g + 3) * pb + 16 };
            // Every group read, and the next one (if whole) would read past the bytes.
            prop_assert!(done == 0 || load_end(done / 4 - 1) <= len);
            prop_assert!(done + 4 > rows || load_end(done / 4) > len);
            for row in 0..done {
                let ((r1, i1), (r2, i2)) = read_pixel(layout, pb, &bytes[row * pb..(row + 1) * pb]);
                prop_assert_eq!((range[0][row], intensity[0][row]), (r1, i1), "row {}", row);
                if matches!(layout, OusterLayout::Dual | OusterLayout::Rng15Dual) {
                    prop_assert_eq!((range[1][row], intensity[1][row]), (r2, i2), "row {}", row);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Each profile's channel reader reads what `packet::field_spec` (the field tables the
        /// goldens check against ouster-sdk's digests) reads, for either return: SIGNAL(2)
        /// (0 where the profile has none), REFLECTIVITY(2), NEAR_IR.
        #[test]
        fn channel_readers_equal_the_field_specs(
            profile in 0usize..Profile::ALL.len(),
            px in any::<[u8; 20]>(),
            second in any::<bool>(),
        ) {
            use packet::{ChanField, field_spec};
            let profile = Profile::ALL[profile];
            let second = second && profile.returns() == 2;
            let got = match profile {
                Profile::Legacy | Profile::Rng19Rfl8Sig16Nir16 => {
                    channels_sig16(px[..12].try_into().unwrap(), second)
                }
                Profile::Rng15Rfl8Nir8 => channels_rng15(px[..4].try_into().unwrap(), second),
                Profile::Rng19Rfl8Sig16Nir16Dual => {
                    channels_dual::<16>(px[..16].try_into().unwrap(), second)
                }
                Profile::FiveWordPixel => channels_dual::<20>(&px, second),
                Profile::Rng15Rfl8Nir8Dual | Profile::FusaRng15Rfl8Nir8Dual => {
                    channels_rng15_dual(px[..8].try_into().unwrap(), second)
                }
            };
            let pixel = &px[..profile.pixel_bytes()];
            let get = |f| field_spec(profile, f).map_or(0, |s| s.get(pixel));
            let (sig, refl) = if second {
                (ChanField::Signal2, ChanField::Reflectivity2)
            } else {
                (ChanField::Signal, ChanField::Reflectivity)
            };
            let want = PixelChannels {
                signal: get(sig) as u16,
                reflectivity: get(refl) as u8,
                near_ir: get(ChanField::NearIr) as u16,
            };
            prop_assert_eq!(got, want, "{:?} second {}", profile, second);
        }
    }

    /// In the ouster-ros layouts a column's points are the generic conversion of the same
    /// points with their own pixel's signal, reflectivity and near-IR (per return); the other
    /// layouts are the generic conversion.
    #[test]
    fn ouster_layouts_take_each_pixels_channels() {
        let rows: usize = 8;
        let table = vec![0.001f32; rows];
        let lut = Column {
            dx: &table,
            dy: &table,
            dz: &table,
            azimuth: &table,
            elevation: &table,
            offset: [0.0; 3],
            n_mm: 0.0,
        };
        for profile in Profile::ALL {
            let pb = profile.pixel_bytes();
            // Row r: ranges 1000 + r (second: 2000 + r, equal to the first in row 3, none in
            // row 5), every other byte distinct.
            let mut px = vec![0u8; rows * pb];
            for (row, p) in px.chunks_mut(pb).enumerate() {
                for (i, b) in p.iter_mut().enumerate() {
                    *b = (17 * row + 5 * i + 1) as u8;
                }
                let r = 1000 + row as u32 * 8;
                let r2 = match row {
                    3 => r,
                    5 => 0,
                    _ => 2000 + row as u32 * 8,
                };
                match profile {
                    Profile::Legacy => p[..4].copy_from_slice(&r.to_le_bytes()),
                    Profile::Rng19Rfl8Sig16Nir16 => p[..4].copy_from_slice(&r.to_le_bytes()),
                    Profile::Rng15Rfl8Nir8 => {
                        p[..2].copy_from_slice(&((r / 8) as u16).to_le_bytes())
                    }
                    Profile::Rng19Rfl8Sig16Nir16Dual | Profile::FiveWordPixel => {
                        p[..3].copy_from_slice(&r.to_le_bytes()[..3]);
                        p[4..7].copy_from_slice(&r2.to_le_bytes()[..3]);
                    }
                    Profile::Rng15Rfl8Nir8Dual | Profile::FusaRng15Rfl8Nir8Dual => {
                        p[..2].copy_from_slice(&((r / 8) as u16).to_le_bytes());
                        p[4..6].copy_from_slice(&((r2 / 8) as u16).to_le_bytes());
                    }
                }
            }
            let mut generic = PointBuf::with_type(PointType::Autoware, 0);
            let mut returns = ColumnReturns::new();
            let window = (1, 1 << 20);
            decode_column(
                profile,
                &px,
                lut,
                None,
                9,
                window,
                &mut returns,
                &mut generic,
            );
            let pts = generic.autoware().to_vec();
            assert!(pts.len() >= rows, "{profile:?}");
            for t in [PointType::Ouster, PointType::OusterXyzir] {
                let mut out = PointBuf::with_type(t, 0);
                decode_column(profile, &px, lut, None, 9, window, &mut returns, &mut out);
                assert_eq!(out.len(), pts.len(), "{profile:?} {t}");
                for (k, p) in pts.iter().enumerate() {
                    let row = usize::from(p.channel);
                    let pixel = &px[row * pb..(row + 1) * pb];
                    let second = p.return_type == ReturnType::SecondStrongest as u8;
                    let field = |f| packet::field_spec(profile, f).map_or(0, |s| s.get(pixel));
                    use packet::ChanField::*;
                    let (sig, refl) = if second {
                        (field(Signal2), field(Reflectivity2))
                    } else {
                        (field(Signal), field(Reflectivity))
                    };
                    let tb = crate::layout::TimeBase::default();
                    if t == PointType::Ouster {
                        let mut want = OusterPoint::from_point(p, &tb);
                        want.intensity = sig as f32;
                        want.reflectivity = refl as u16;
                        want.ambient = field(NearIr) as u16;
                        assert_eq!(out.typed::<OusterPoint>().unwrap()[k], want, "{profile:?}");
                    } else {
                        let mut want = OusterXYZIR::from_point(p, &tb);
                        want.intensity = sig as f32;
                        assert_eq!(out.typed::<OusterXYZIR>().unwrap()[k], want, "{profile:?}");
                    }
                }
            }
        }
    }

    /// The rows the kernel reads past a column's (up to a multiple of 4) make no point, even
    /// when a column with more rows (before a recalibration) left returns there.
    #[test]
    fn rows_past_the_column_make_no_point_whatever_was_left_there() {
        let rows: usize = 30;
        let table = vec![0.001f32; rows.next_multiple_of(4)];
        let lut = Column {
            dx: &table,
            dy: &table,
            dz: &table,
            azimuth: &table,
            elevation: &table,
            offset: [0.0; 3],
            n_mm: 0.0,
        };
        // Every row of this column has range 0: no return.
        let pixels = vec![0u8; rows * 16];
        for (profile, pb) in [
            (Profile::Rng19Rfl8Sig16Nir16, 12),
            (Profile::Rng19Rfl8Sig16Nir16Dual, 16),
            (Profile::Rng15Rfl8Nir8Dual, 8),
        ] {
            let mut returns = ColumnReturns {
                range: [[5000; OUSTER_MAX_ROWS]; 2],
                intensity: [[7; OUSTER_MAX_ROWS]; 2],
            };
            let mut out = PointBuf::default();
            let px = &pixels[..rows * pb];
            let window = (1, 1 << 20);
            decode_column(profile, px, lut, None, 0, window, &mut returns, &mut out);
            assert_eq!(out.len(), 0, "{profile:?}");
        }
    }

    #[test]
    fn integer_range_window_matches_the_float_filter() {
        assert_eq!(range_window_mm(0.3, 300.0), (301, 300_000));
        assert_eq!(range_window_mm(0.0, 1000.0), (1, 1_000_000));
        for (min, max) in [(0.3f32, 300.0f32), (0.0, 1000.0), (1.234, 56.789)] {
            let (lo, hi) = range_window_mm(min, max);
            for r in (1u32..(1 << 20)).step_by(7).chain([lo - 1, lo, hi - 1, hi]) {
                let d = r as f32 / 1000.0;
                assert_eq!((lo..hi).contains(&r), d > min && d < max, "{r} {min} {max}");
            }
        }
    }
}
