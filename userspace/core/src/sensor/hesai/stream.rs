//! [`HesaiStream`], the Hesai [`VendorDecoder`]: decoder, per-channel scan cutter, the two
//! frame buffers and the frame accounting (head and tail estimates in 0.01° past the cut,
//! packets lost by UDP sequence, sensor-time gaps). The rules are in the module
//! documentation of [`super`].

#![forbid(unsafe_code)]

use std::f64::consts::PI;
use std::sync::Arc;

use crate::HostTime;
use crate::frame::Frame;
use crate::point_buf::PointBuf;
use crate::scan::{
    AZIMUTH_UNITS, Fov, FrameAccount, FrameBuilder, PacketRejection, PacketSequence, Rejection,
    TimeVerdict, turns_lost,
};
use crate::vendor::{ConfigError, PipelineOptions, ReturnMode, SensorConfig, VendorDecoder};

use super::convert::fast;
use super::cutter::{Cutter, TAU_F32, argmin, between, normalize};
use super::layout::{self, Layout};
use super::packet;
use super::{AngleCorrection, At128Correction, DUAL_RETURN_DISTANCE_THRESHOLD_M, return_mode_of};

// ---------------------------------------------------------------------------------------------
// Stream
// ---------------------------------------------------------------------------------------------

/// The azimuths (rad, `az[ch]`) of the channels the cutter has in frame buffer `x`
/// (`buf[ch] == x`), each as 0.01° past the cut `cut_cdeg` (0..36000).
pub(super) fn phased_in_buffer<'a>(
    az: &'a [f32],
    buf: &'a [u8],
    x: usize,
    cut_cdeg: u32,
) -> impl Iterator<Item = u32> + 'a {
    az.iter()
        .zip(buf)
        .filter(move |(_, b)| usize::from(**b) == x)
        .map(move |(&a, _)| {
            let cdeg = (a.to_degrees() * 100.0).round() as u32 % AZIMUTH_UNITS;
            (AZIMUTH_UNITS + cdeg - cut_cdeg) % AZIMUTH_UNITS
        })
}

/// Packets missing at the head of a frame that opened at `head_phased` (0.01° past the cut)
/// instead of at the cut, with the sensor turning `step_cdeg` (0.01°) per packet: the packets
/// between the cut and the frame's first one. 0 when unknown (no azimuth, no step measured yet)
/// or when the frame opened at the cut.
/// With a field of view, only the packets inside it between the cut (`cut_cdeg`) and the
/// frame's first one count, and of those only the azimuths the sensor sends (`seq`,
/// [`PacketSequence::arc_sent_by`], its sector moved by `offset_cdeg`, the largest channel
/// azimuth offset: the channel furthest past the cut).
fn head_missing(
    head_phased: Option<u32>,
    step_cdeg: u32,
    seq: &PacketSequence,
    fov: Option<Fov>,
    cut_cdeg: u32,
    offset_cdeg: i32,
) -> u32 {
    match head_phased {
        Some(ph) if step_cdeg > 0 => seq.arc_sent_by(fov, cut_cdeg, ph, offset_cdeg) / step_cdeg,
        _ => 0,
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Buffer {
    pub(super) points: PointBuf,
    /// The frame's account for the builder: its published start (`start_ns` clamped at 0),
    /// host time, packets received, lost and malformed, host-clock flag.
    pub(super) account: FrameAccount,
    /// Sensor time of the frame's first firing, ns since the Unix epoch, signed: the base of
    /// the points' relative times.
    pub(super) start_ns: i64,
    /// Serial of the last packet counted in `received`.
    pub(super) last_packet: u64,
    /// `start_ns` is set (by the cutter's reset, or by the first block group that adds to
    /// this buffer when the reset fell outside the field of view).
    pub(super) started: bool,
    /// The frame opened at start-up (or after a timeout or restart), not at the cut: the
    /// phased azimuth (0.01° past the cut) of its first packet, from which the packets missing
    /// between the cut and it are estimated when it is published.
    pub(super) head_phased: Option<u32>,
}

impl Buffer {
    /// Opens the frame at the first firing `start_ns` (stream time, ns since the Unix epoch)
    /// of a packet received at host wall time `host_ns` (CLOCK_REALTIME ns), on a stream whose
    /// clock steps add up to `shift_ns` ([`FrameAccount::shift_ns`]).
    pub(super) fn open(&mut self, start_ns: i64, host_ns: u64, shift_ns: i64) {
        self.start_ns = start_ns;
        self.account.start_ns = start_ns.max(0) as u64;
        self.account.host_ns = host_ns;
        self.account.shift_ns = shift_ns;
        self.points.set_start_ns(self.account.start_ns);
        self.started = true;
    }
}

/// A Hesai sensor's calibration tables: the angles of its angle-correction CSV (or the
/// AT128 correction file) and what is derived from them once, immutable and shared (`Arc`) by
/// every clone of the stream; a reload swaps the whole of it ([`VendorDecoder::set_tables`]).
#[derive(Debug)]
pub struct HesaiTables {
    /// Per-channel and per-azimuth trigonometry.
    pub(super) angles: Angles,
    /// AT128 correction file (models with a fine azimuth), else `None`.
    pub(super) at128: Option<At128Correction>,
    /// Channels with the smallest and the largest azimuth offset (the cutter's view of a
    /// block group, models without a fine azimuth).
    pub(super) min_idx: usize,
    /// See `min_idx`.
    pub(super) max_idx: usize,
}

/// Per-model constants derived from the calibration.
#[derive(Debug)]
pub(super) struct Angles {
    pub(super) el_rad: Vec<f32>,
    pub(super) cos_el: Vec<f32>,
    pub(super) sin_el: Vec<f32>,
    pub(super) off_rad: Vec<f32>,
    /// `(sin, cos)` of each channel's azimuth offset, f64.
    pub(super) off_sc: Vec<(f64, f64)>,
    /// The same, as two arrays.
    pub(super) off_sin: Vec<f64>,
    pub(super) off_cos: Vec<f64>,
    /// `(sin, cos)` of every block azimuth (0.01°), f64.
    pub(super) blk_sc: Box<[(f64, f64)]>,
    /// Block azimuth in rad as Nebula stores it (f64 → f32).
    pub(super) blk_rad: Box<[f32]>,
    /// Smallest and largest channel azimuth offset, 0.01° (rounded outwards).
    pub(super) off_cdeg: (f64, f64),
}

/// A cached firing-offset table: `(key, offsets, group_earliest)` (see [`HesaiStream`]).
type OffsetsEntry = ((usize, u8, u8, u8, u8), Vec<i64>, Vec<i64>);

/// A Hesai sensor's decoder, per-channel scan cutter and frame buffers: the Hesai
/// [`VendorDecoder`]. See the module documentation for the rules.
#[derive(Clone, Debug)]
pub struct HesaiStream {
    pub(super) layout: &'static Layout,
    check_crc: bool,
    pub(super) range: (f32, f32),
    /// Sequence, time base, timeout, buffers, the frame header.
    pub(super) builder: FrameBuilder,
    /// The calibration tables, shared.
    pub(super) tables: Arc<HesaiTables>,
    pub(super) cutter: Cutter,
    pub(super) bufs: [Buffer; 2],
    pub(super) packet_serial: u64,
    /// The tail's UDP sequence: packets lost between two packets, the sector the sensor
    /// sends ([`PacketSequence`]).
    pub(super) seq: PacketSequence,
    /// The packet being decoded arrived late ([`TimeVerdict::Late`]): the cutter is not
    /// stepped, the UDP sequence not advanced.
    pub(super) late: bool,
    return_mode: Option<ReturnMode>,
    pub(super) az_scratch: Vec<f32>,
    pub(super) dual_threshold_m: f32,
    /// AT128 per-channel angles of the current block group: `[sin az, cos az, el rad, sin el,
    /// cos el]`.
    pub(super) at128_trig: Vec<[f32; 5]>,
    /// Firing offsets (ns, `i64::MIN` = no firing) of every `(block, channel)` for the packet
    /// properties in `offsets_key` (return count, QT128 mode flag, OT128 states): they change
    /// rarely, so they are computed once per change, not per point.
    pub(super) offsets: Vec<i64>,
    pub(super) offsets_key: Option<(usize, u8, u8, u8, u8)>,
    /// `(key, offsets, group_earliest)` of up to four other keys seen recently.
    pub(super) offsets_cache: Vec<OffsetsEntry>,
    /// Cut angle, 0.01°, for the lost-turn estimate.
    pub(super) cut_cdeg: u32,
    /// The configured field of view: the loss estimates around the cut count only its packets.
    fov: Option<Fov>,
    /// Phased azimuth (0.01°) of the previous accepted packet's first block group.
    last_phased: Option<u32>,
    /// Packets with an invalid date (stamped from the stream's clock, or with host time).
    date_fallbacks: u64,
    /// The stream's time base is the host clock: the packets since it (re)started carried no
    /// valid date.
    host_base: bool,
    /// Packets missing before the cut of the frame the next packet opens (after a gap).
    pub(super) pending_head_lost: u32,
    /// Block groups may take the fast path (not AT128, no field of view): no per-channel
    /// cutter step when no channel can reach the cut, and the specialised conversion loops.
    pub(super) fast: bool,
    /// The cut angle (f32 rad, as the cutter holds it) in 0.01°.
    pub(super) cut_cdeg_f: f64,
    /// Raw block azimuth (0.01°) of the block group the cutter last stepped (not AT128).
    pub(super) last_raw: u16,
    /// `cutter.state.last_az` is out of date: its values are those of `last_raw` (the fast
    /// path skipped writing them); [`Self::sync_last_az`] writes them when needed.
    pub(super) last_az_stale: bool,
    /// `az_scratch` holds the corrected azimuths of this raw block azimuth (not AT128).
    pub(super) scratch_raw: Option<u16>,
    /// Earliest firing offset (ns) of each block group (index: first block), for the
    /// `offsets_key` in force; 0 when no channel fires.
    pub(super) group_earliest: Vec<i64>,
    /// Integer range window for distance unit `.0` (mm): a raw distance `r` is kept when
    /// `r − .1 < .2` (u32 wrapping), exactly the points whose f32 distance passes `range`.
    pub(super) window: (u8, u32, u32),
    /// Return types (as u8) for return-mode byte `.0`: single return, then dual return k = 0
    /// (not strongest, strongest), k = 1 (not strongest, strongest).
    pub(super) rt_cache: (u8, [u8; 5]),
    /// The fast conversion's stage-1 arrays.
    pub(super) fast_scratch: Box<fast::Scratch>,
}

impl HesaiStream {
    /// Builds the stream for `cfg.model` with `calibration`, the contents of the
    /// angle-correction CSV (AT128: `.dat`) `cfg.calibration` names.
    ///
    /// # Errors
    /// [`ConfigError::CalibrationIo`] / [`ConfigError::Calibration`] for an invalid (or not
    /// UTF-8) angle-correction CSV (AT128: correction `.dat`) in `calibration`,
    /// [`ConfigError::OutOfRange`] for a cut angle outside the field of view,
    /// [`ConfigError::Unsupported`] for a model that is not Hesai's.
    pub fn new(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let layout = layout::layout(cfg.model).ok_or_else(|| ConfigError::Unsupported {
            model: cfg.model,
            supported: layout::ALL
                .iter()
                .map(|l| l.model.name())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        let (cal, at128) = if layout.fine_azimuth {
            let c = At128Correction::from_bytes(calibration, layout.channels, &cfg.calibration)?;
            let zero = vec![0.0; layout.channels];
            let cal = AngleCorrection {
                elevation_deg: zero.clone(),
                azimuth_deg: zero,
            };
            (cal, Some(c))
        } else {
            (
                AngleCorrection::from_bytes(calibration, layout.channels, &cfg.calibration)?,
                None,
            )
        };
        let deg = (PI / 180.0) as f32;
        let el_rad: Vec<f32> = cal.elevation_deg.iter().map(|e| e * deg).collect();
        let off_rad: Vec<f32> = cal.azimuth_deg.iter().map(|a| a * deg).collect();
        let blk_rad: Box<[f32]> = (0..36_000)
            .map(|i| (f64::from(i) / 100.0 * (PI / 180.0)) as f32)
            .collect();
        let blk_sc = (0..36_000)
            .map(|i| (f64::from(i) / 100.0).to_radians().sin_cos())
            .collect();
        let off_sc: Vec<(f64, f64)> = off_rad.iter().map(|&o| f64::from(o).sin_cos()).collect();
        let min_idx = argmin(&off_rad, |a, b| a < b);
        let max_idx = argmin(&off_rad, |a, b| a > b);
        let to_cdeg = |r: f32| f64::from(r) * (18_000.0 / PI);
        let off_cdeg = (
            to_cdeg(off_rad.get(min_idx).copied().unwrap_or(0.0)).floor(),
            to_cdeg(off_rad.get(max_idx).copied().unwrap_or(0.0)).ceil(),
        );
        let to_rad = |d: f64| normalize((d * (PI / 180.0)) as f32, TAU_F32);
        let cut = to_rad(cfg.cut_angle.get());
        let fov = match opts.fov {
            Some(f) => (to_rad(f.min().get()), to_rad(f.max().get())),
            None => (0.0, 0.0),
        };
        if fov.0 != fov.1 && (!between(fov.0, fov.1, cut, true, true) || cut == fov.0) {
            let (min, max) = opts.fov.map_or((0.0, 0.0), |f| f.degrees());
            return Err(ConfigError::OutOfRange {
                field: "cut_angle".into(),
                value: cfg.cut_angle.to_string(),
                valid: format!(
                    "({min}, {max}] deg, inside the field of view (fov = {min}:{max}) and not \
                     at its start"
                ),
            });
        }
        // The model's own limits (Nebula `SensorT::min_range/max_range`), inclusive.
        let (lo, hi) = layout.model.datasheet_range_m();
        Ok(Self {
            layout,
            check_crc: !opts.hesai_skip_crc,
            range: (lo.max(cfg.range.min().get()), hi.min(cfg.range.max().get())),
            builder: FrameBuilder::new(cfg.sensor_id, cfg.frame_timeout.ns()),
            tables: Arc::new(HesaiTables {
                angles: Angles {
                    cos_el: el_rad.iter().map(|e| e.cos()).collect(),
                    sin_el: el_rad.iter().map(|e| e.sin()).collect(),
                    el_rad,
                    off_rad,
                    off_sin: off_sc.iter().map(|v: &(f64, f64)| v.0).collect(),
                    off_cos: off_sc.iter().map(|v: &(f64, f64)| v.1).collect(),
                    off_sc,
                    blk_sc,
                    blk_rad,
                    off_cdeg,
                },
                at128,
                min_idx,
                max_idx,
            }),
            cutter: Cutter {
                cut,
                fov,
                min_idx,
                max_idx,
                state: None,
                spare: None,
            },
            bufs: Default::default(),
            packet_serial: 0,
            seq: PacketSequence::default(),
            late: false,
            return_mode: None,
            az_scratch: Vec::with_capacity(layout.channels),
            dual_threshold_m: DUAL_RETURN_DISTANCE_THRESHOLD_M,
            at128_trig: vec![[0.0; 5]; layout.channels],
            offsets: vec![0; layout.blocks * layout.channels],
            offsets_key: None,
            offsets_cache: Vec::new(),
            cut_cdeg: cfg.cut_angle.cdeg(),
            last_phased: None,
            fov: opts.fov.map(Fov::from),
            date_fallbacks: 0,
            host_base: false,
            pending_head_lost: 0,
            fast: !layout.fine_azimuth && fov.0 == fov.1,
            cut_cdeg_f: to_cdeg(cut),
            last_raw: 0,
            last_az_stale: false,
            scratch_raw: None,
            group_earliest: vec![0; layout.blocks],
            window: (0, 0, 0),
            rt_cache: (0, [0; 5]),
            fast_scratch: fast::Scratch::boxed(),
        })
    }

    /// The model's packet layout.
    pub fn layout(&self) -> &'static Layout {
        self.layout
    }

    /// The measured azimuth advance per packet, 0.01° (0: none yet).
    pub(super) fn step_cdeg(&self) -> u32 {
        self.builder.clock().step_cdeg()
    }

    pub(super) fn emit(&mut self, b: u8, out: &mut Vec<Frame>) {
        let buf = std::mem::take(&mut self.bufs[usize::from(b)]);
        if buf.account.received == 0 && buf.points.is_empty() {
            return;
        }
        let cap = buf.points.len() + buf.points.len() / 8;
        self.bufs[usize::from(b)].points = self.builder.take_points(cap);
        let account = buf.account;
        let step = self.builder.clock().step_cdeg();
        let max_offset = self.tables.angles.off_cdeg.1 as i32;
        let head = head_missing(
            buf.head_phased,
            step,
            &self.seq,
            self.fov,
            self.cut_cdeg,
            max_offset,
        );
        self.builder.emit(&account, head, buf.points, out);
    }

    /// Timeout / flush (the stream stops, not at a cut): the frames in progress are published
    /// marked not whole. A frame ends when its last channel crosses the cut, so each one misses
    /// the packets its channel furthest behind needs to reach the cut (its last corrected
    /// azimuth, in measured per-packet advances; nothing is estimated before an advance is
    /// measured, nor for AT128, whose azimuths are mirror fields).
    fn close_partial(&mut self, out: &mut Vec<Frame>) {
        self.sync_last_az();
        let step = self.builder.clock().step_cdeg();
        if step > 0
            && self.tables.at128.is_none()
            && let Some(st) = &self.cutter.state
        {
            let cut = self.cut_cdeg;
            for (x, buf) in self.bufs.iter_mut().enumerate() {
                let behind = phased_in_buffer(&st.last_az, &st.buf, x, cut).min();
                if let (Some(ph), false) = (behind, buf.points.is_empty()) {
                    // Measured on the channel furthest behind: the smallest azimuth offset.
                    let to_cut = self.seq.arc_sent_by(
                        self.fov,
                        (cut + ph) % AZIMUTH_UNITS,
                        AZIMUTH_UNITS - ph,
                        self.tables.angles.off_cdeg.0 as i32,
                    );
                    let tail = to_cut.div_ceil(step).saturating_sub(1);
                    buf.account.lost = buf.account.lost.saturating_add(tail);
                }
            }
        }
        self.close_all(out);
    }

    /// Publishes the buffers that hold points (current first), drops the rest (e.g. packets
    /// outside a limited field of view after the last cut).
    fn close_all(&mut self, out: &mut Vec<Frame>) {
        let cur = self.cutter.state.as_ref().map_or(0, |s| s.current);
        for b in [cur, cur ^ 1] {
            if self.bufs[usize::from(b)].points.is_empty() {
                self.bufs[usize::from(b)] = Buffer::default();
            } else {
                self.emit(b, out);
            }
        }
        self.cutter.spare = self.cutter.state.take();
        self.seq.forget();
    }
}

impl VendorDecoder for HesaiStream {
    /// Classifies with [`packet::classify`]; a host-time gap (monotonic) longer than the frame
    /// timeout publishes the frames in progress before this packet is decoded.
    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection> {
        let p = match packet::classify(payload, self.layout, self.check_crc) {
            Ok(p) => p,
            Err(PacketRejection::Ignored) => return Err(Rejection::Ignored),
            Err(PacketRejection::Malformed(_)) => {
                let cur = self.cutter.state.as_ref().map_or(0, |s| s.current);
                let b = &mut self.bufs[usize::from(cur)];
                b.account.malformed = b.account.malformed.saturating_add(1);
                return Err(Rejection::Malformed);
            }
        };
        // A packet whose date is no date is stamped on the stream's own time line: the last
        // accepted sensor time plus the host monotonic time elapsed since (so one bad date
        // neither jumps nor mixes the host clock into a sensor-clock frame); only a stream with
        // no valid time yet runs on the host wall clock, and its frames say so.
        let (time_ns, host_clock) = match p.sensor_time_ns() {
            Some(t) => (t, false),
            None => {
                self.date_fallbacks += 1;
                match self.builder.clock().extrapolate(host.mono_ns) {
                    Some(t) if !self.host_base => (t, false),
                    _ => {
                        self.host_base = true;
                        (host.wall_ns, true)
                    }
                }
            }
        };
        // A silence (both clocks) closes the frames in progress, after the time guard has had
        // its say (so a gap's lost packets and turns are still counted).
        let timed_out = self.builder.silence_before(host.mono_ns, Some(time_ns));
        if timed_out {
            self.builder.clock_mut().note_silence();
        }
        // The packet's first block azimuth for the rotation period (AT128: none, its encoder
        // azimuth maps onto mirror fields).
        let az = (!self.layout.fine_azimuth).then(|| u32::from(p.azimuth(0)));
        let phased =
            az.map(|a| (AZIMUTH_UNITS + a % AZIMUTH_UNITS - self.cut_cdeg) % AZIMUTH_UNITS);
        let verdict = self.builder.clock_mut().check(time_ns, host.mono_ns, az, 0);
        // Judged and stamped in stream time from here on: a clock step cuts no turn.
        let time_ns = self.builder.clock().stream_ns(time_ns);
        match verdict {
            TimeVerdict::Step => return Err(Rejection::ClockStep),
            TimeVerdict::Jump => {
                if timed_out {
                    self.close_partial(out);
                }
                return Err(Rejection::TimeJump);
            }
            TimeVerdict::Restart => {
                self.close_all(out);
                return Err(Rejection::Restart);
            }
            TimeVerdict::Late => {
                // It belongs to the frames in progress if the cut has not passed since its
                // azimuth: at or behind the last packet's, less than a quarter turn back.
                let fits = match (self.last_phased, phased) {
                    (Some(last), Some(now)) => now <= last && last - now < AZIMUTH_UNITS / 4,
                    _ => false,
                };
                if !fits || self.cutter.state.is_none() {
                    return Err(Rejection::Late);
                }
                self.late = true;
                self.return_mode = return_mode_of(p.return_mode_byte());
                self.decode(&p, host.wall_ns, time_ns, host_clock, out);
                self.late = false;
                return Ok(());
            }
            TimeVerdict::InLine { gap_ns: Some(gap) } => {
                // The frame in progress misses its packets up to the cut, the next one those
                // from the cut to this packet (in packet advances), whole turns in between are
                // lost frames.
                let step = self.builder.clock().step_cdeg();
                if let (Some(from), true) = (self.last_phased, step > 0) {
                    let to_cut = self.seq.arc_sent(
                        self.fov,
                        (self.cut_cdeg + from) % AZIMUTH_UNITS,
                        AZIMUTH_UNITS - from,
                    );
                    let tail = to_cut.div_ceil(step).saturating_sub(1);
                    let cur = self.cutter.state.as_ref().map_or(0, |s| s.current);
                    let b = &mut self.bufs[usize::from(cur)];
                    b.account.lost = b.account.lost.saturating_add(tail);
                }
                self.close_all(out);
                if let (Some(from), Some(to)) = (self.last_phased, phased) {
                    let period = self.builder.clock().period_ns();
                    self.builder.lose_frames(turns_lost(from, to, gap, period));
                    if step > 0 {
                        self.pending_head_lost = self
                            .seq
                            .arc_sent(self.fov, self.cut_cdeg, to)
                            .div_ceil(step);
                    }
                }
            }
            TimeVerdict::InLine { gap_ns: None } => {
                if timed_out {
                    self.close_partial(out);
                }
            }
        }
        self.last_phased = phased;
        if p.sensor_time_ns().is_some() {
            self.host_base = false;
        }
        self.return_mode = return_mode_of(p.return_mode_byte());
        self.decode(&p, host.wall_ns, time_ns, host_clock, out);
        Ok(())
    }

    fn poll_timeout(&mut self, now_mono_ns: u64, out: &mut Vec<Frame>) {
        if self.cutter.state.is_some() && self.builder.silent_at(now_mono_ns) {
            self.close_partial(out);
            self.builder.clock_mut().note_silence();
        }
    }

    fn in_progress(&self) -> bool {
        self.bufs
            .iter()
            .any(|b| !b.points.is_empty() || b.account.received > 0)
    }

    type Tables = HesaiTables;

    fn tables(&self) -> &Arc<HesaiTables> {
        &self.tables
    }

    /// Takes `tables` (CSV or AT128 correction) and re-derives the cutter's view of the last
    /// block group from them.
    fn set_tables(&mut self, tables: Arc<HesaiTables>) {
        self.cutter.min_idx = tables.min_idx;
        self.cutter.max_idx = tables.max_idx;
        self.tables = tables;
        self.scratch_raw = None;
        if self.tables.at128.is_none() && self.cutter.state.is_some() {
            self.last_az_stale = true;
            self.sync_last_az();
        }
    }

    fn flush(&mut self, out: &mut Vec<Frame>) {
        self.close_partial(out);
    }

    fn return_mode(&self) -> Option<ReturnMode> {
        self.return_mode
    }

    fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>) {
        self.builder.set_buffer_source(source);
        // The frames in progress that hold no point yet take theirs from the source too.
        for b in &mut self.bufs {
            self.builder.renew_if_empty(&mut b.points);
        }
    }

    fn set_point_type(&mut self, point_type: crate::layout::PointType) {
        self.builder.set_point_type(point_type);
        for b in &mut self.bufs {
            self.builder.renew_if_empty(&mut b.points);
            b.points.set_start_ns(b.account.start_ns);
        }
    }

    fn time_faults(&self) -> crate::vendor::TimeFaults {
        crate::vendor::TimeFaults {
            restarts: self.builder.clock().restarts(),
            clock_steps: self.builder.clock().steps(),
            date_fallbacks: self.date_fallbacks,
        }
    }
}
