//! [`VelodyneStream`], the Velodyne [`VendorDecoder`]: the point decoder for the configured
//! model ([`super::Vlp16Decoder`] or [`super::multi::MultiDecoder`]), the sensor clock (µs past
//! the top of the hour, resolved to ns against the host clock) and the [`ScanAssembler`]; and
//! its own counters ([`VELODYNE_COUNTERS`]).

#![forbid(unsafe_code)]

use std::sync::Arc;

use crate::sensor::calibration::VelodyneCalibration;

use super::{
    AZIMUTH_UNITS, BLOCKS, BlockPoints, DecoderSettings, MAX_ADVANCE_CDEG, Packet, VelodyneFov,
    Vlp16Decoder, classify, multi, packet_interval_ns,
};
use crate::HostTime;
use crate::frame::Frame;
use crate::scan::{PacketInfo, PacketRejection, Rejection, ScanAssembler};
use crate::vendor::{
    ConfigError, DecodeFlavor, PipelineOptions, ReturnMode, SensorConfig, SensorModel,
    VendorDecoder,
};

// ---------------------------------------------------------------------------------------------
// The stream: decoder + sensor clock + scan assembler, as a `VendorDecoder`.
// ---------------------------------------------------------------------------------------------

const HOUR_NS: i128 = 3_600_000_000_000;

/// f32 → f64 through the shortest decimal, so `0.3f32` compares as the `0.3` the user wrote.
fn decimal_f64(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// A Velodyne sensor's decoder, sensor clock and [`ScanAssembler`]: the Velodyne
/// [`VendorDecoder`].
///
/// ## Sensor clock
/// A Velodyne stamps each packet with µs past the top of the hour (manual section 9). The hour
/// comes from the host: for the first packet, the hour whose `top + µs` is nearest to the
/// packet's host wall time (CLOCK_REALTIME, [`HostTime::wall_ns`]: so a sensor clock within
/// ±30 min of the host resolves correctly across an hour boundary, as ros-drivers/velodyne
/// does); afterwards, the hour nearest to `previous sensor time + host time elapsed`, elapsed
/// on CLOCK_MONOTONIC ([`HostTime::mono_ns`]), so neither an unsynchronised sensor clock nor a
/// step of the host's wall clock (PTP, chrony) makes the stream jump by an hour.
#[derive(Clone, Debug)]
pub struct VelodyneStream {
    engine: Arc<VelodyneTables>,
    /// The firing state learned from the packets (VLS-128 firmware period, a single-sequence
    /// packet's advance), handed to the tables' decoder with each packet.
    firing: multi::Firing,
    model: SensorModel,
    assembler: ScanAssembler,
    /// Last `(host monotonic ns, sensor ns)` pair, for resolving the hour of the sensor clock.
    clock: Option<(u64, u64)>,
    return_mode: Option<ReturnMode>,
    product_mismatches: u64,
    last_product_id: Option<u8>,
    /// Sensor id, for log lines.
    sensor_id: u16,
    /// The decoder's own counters (`rate_mismatches`).
    counters: VelodyneCounters,
    /// First-block azimuth (0.01°) and sensor time (ns) of the previous data packet.
    prev_packet: Option<(u16, u64)>,
}

/// The Velodyne decoder's own counters: `lidarxdp_velodyne_*{sensor,model}` (the product-id
/// check is in [`crate::vendor::DecodeCounters::product_mismatches`]).
pub const VELODYNE_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "velodyne",
    labels: crate::vendor::SENSOR_COUNTERS.labels,
};

crate::counter_set! {
    /// Velodyne-specific counters (monotonic), beside the pipeline's [`crate::vendor::DecodeCounters`].
    pub struct VelodyneCounters in VELODYNE_COUNTERS;
    {
        /// See [`VelodyneStream::rate_mismatches`].
        rate_mismatches: Counter "packets" "Velodyne data packets whose sensor-time spacing fits no multiple of the configured model's packet interval.",
    }
}

/// Packets with a spacing foreign to the configured model before the warning
/// ([`VelodyneStream::rate_mismatches`]).
const RATE_WARN_AFTER: u64 = 16;

/// Sensor rotation rate assumed when a single-sequence packet (VLS-128 dual return) has no
/// previous packet to measure it from: 600 rpm (10 Hz), the factory default of every
/// Velodyne model; 0.01° per ns is `36000 / 100 ms`.
const NOMINAL_TURN_NS: u64 = 100_000_000;

/// Azimuth advance (0.01°) of a packet holding one firing sequence: the first-block azimuth
/// `az0` minus the previous packet's, when that packet's sensor time is between 0.5 and 1.5
/// packet intervals before `sensor_ns` (the packet just before) and the advance is at most
/// [`MAX_ADVANCE_CDEG`]; otherwise the nominal advance at 600 rpm over `interval_ns`.
fn single_sequence_advance(
    prev: Option<(u16, u64)>,
    az0: u16,
    sensor_ns: u64,
    interval_ns: u64,
) -> u32 {
    if let Some((paz, pns)) = prev {
        let dt = sensor_ns.wrapping_sub(pns);
        let advance = (AZIMUTH_UNITS + u32::from(az0) - u32::from(paz)) % AZIMUTH_UNITS;
        if sensor_ns >= pns
            && dt >= interval_ns / 2
            && dt <= interval_ns + interval_ns / 2
            && advance as f32 <= MAX_ADVANCE_CDEG
        {
            return advance;
        }
    }
    ((u64::from(AZIMUTH_UNITS) * interval_ns + NOMINAL_TURN_NS / 2) / NOMINAL_TURN_NS) as u32
}

/// A Velodyne sensor's calibration tables: the point decoder of its model, built once from
/// the calibration YAML and the range and field-of-view settings, immutable and shared
/// (`Arc`) by every clone of the stream; a reload swaps the whole of it
/// ([`VendorDecoder::set_tables`]).
#[derive(Debug)]
// Allocated once, behind an `Arc`: the variants' sizes cost nothing.
#[allow(clippy::large_enum_variant)]
pub enum VelodyneTables {
    /// VLP-16: [`Vlp16Decoder`].
    Vlp16(Vlp16Decoder),
    /// The 32/64/128-laser models: [`multi::MultiDecoder`].
    Multi(multi::MultiDecoder),
}

impl VelodyneStream {
    /// Builds the stream for `cfg` (model, cut angle, ranges) and `calibration`, the contents
    /// of the calibration YAML `cfg.calibration` names.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid calibration, or a Velodyne model whose decoder is not
    /// available yet ([`ConfigError::Unsupported`]).
    pub fn new(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let lasers = multi::laser_count(cfg.model);
        if lasers == 0 {
            return Err(ConfigError::Unsupported {
                model: cfg.model,
                supported: "VLP16, VLP32C, HDL32E, HDL64E_S2, HDL64E_S3, VLS128".into(),
            });
        }
        let fov = opts.fov.map(VelodyneFov::from);
        let calib = VelodyneCalibration::from_bytes(calibration, lasers, &cfg.calibration)?;
        let settings = DecoderSettings {
            min_range_m: decimal_f64(cfg.range.min().get()),
            max_range_m: decimal_f64(cfg.range.max().get()),
            fov,
            flavor: opts.flavor,
        };
        let mut assembler = ScanAssembler::new(cfg.sensor_id, cfg.cut_angle, cfg.frame_timeout);
        assembler.set_fov(opts.fov.map(crate::scan::Fov::from));
        let engine = if cfg.model == SensorModel::Vlp16 {
            VelodyneTables::Vlp16(Vlp16Decoder::new(calib, settings))
        } else {
            // Nebula's VLP-32/HDL decoder never carries points past the cut into the next
            // frame (its phase test is not taken modulo 360°): the cut falls between packets.
            if opts.flavor == DecodeFlavor::Nebula && cfg.model != SensorModel::Vls128 {
                assembler.set_carry_limit_cdeg(0);
            }
            VelodyneTables::Multi(multi::MultiDecoder::new(cfg.model, &calib, settings))
        };
        Ok(Self {
            engine: Arc::new(engine),
            firing: multi::Firing::nominal(cfg.model),
            model: cfg.model,
            assembler,
            clock: None,
            return_mode: None,
            product_mismatches: 0,
            last_product_id: None,
            sensor_id: cfg.sensor_id,
            counters: VelodyneCounters::default(),
            prev_packet: None,
        })
    }

    /// Data packets whose product-id byte (offset 1205) names another model than the
    /// configured one ([`multi::model_from_product_id`]). The configured model wins: such
    /// packets are decoded as configured, counted here and logged once.
    pub fn product_mismatches(&self) -> u64 {
        self.product_mismatches
    }

    /// Consecutive data packets whose sensor-time spacing is more than 10 % away from every
    /// multiple (1 to 3) of the configured model's packet interval in the packet's return mode
    /// (the manuals' firing tables: e.g. VLP-16 1327.1 µs single, HDL-32E 552.96 µs): the
    /// packets come from another model than configured (a VLP-16 decoded as an HDL-32E with a
    /// 32-laser calibration is caught here). Spacings of 4 intervals or more (loss, a
    /// sensor-side field of view) are not judged; HDL-64E is not checked (its per-laser
    /// timing is not taken from a manual). Logged once, at the 16th such packet.
    pub fn rate_mismatches(&self) -> u64 {
        self.counters.rate_mismatches
    }

    fn check_packet_rate(&mut self, dt: u64, interval: u64, mode: ReturnMode) {
        if interval == 0
            || dt == 0
            || dt >= 4 * interval
            || matches!(self.model, SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3)
        {
            return;
        }
        let nearest = (1..=3)
            .map(|m| dt.abs_diff(m * interval))
            .min()
            .unwrap_or(u64::MAX);
        if nearest * 10 <= interval {
            return;
        }
        self.counters.rate_mismatches += 1;
        if self.counters.rate_mismatches == RATE_WARN_AFTER {
            log::warn!(
                "sensor {}: data packets arrive {} µs apart on the sensor clock, but a {} in \
                 {mode} return mode sends one every {:.1} µs: the packets are probably from \
                 another model (check --sensor and the calibration; counted in \
                 rate_mismatches)",
                self.sensor_id,
                dt / 1000,
                self.model,
                interval as f64 / 1000.0
            );
        }
    }

    /// Firing-sequence period in use for the 32/64/128-laser models, ns (for a VLS-128 it
    /// follows the firmware variant detected from the packet spacing); `None` for a VLP-16.
    pub fn firing_sequence_ns(&self) -> Option<u32> {
        match *self.engine {
            VelodyneTables::Vlp16(_) => None,
            VelodyneTables::Multi(_) => Some(self.firing.sequence_ns),
        }
    }

    /// The model named by the product-id byte of the last decoded packet, if any
    /// (auto-detection; `None` for HDL-64E, whose byte 1205 is a status byte).
    pub fn detected_model(&self) -> Option<SensorModel> {
        self.last_product_id.and_then(multi::model_from_product_id)
    }

    /// Resolves a µs-past-the-hour stamp to ns since the Unix epoch (see the type docs).
    pub(super) fn sensor_time_ns(&mut self, toh_us: u32, host: HostTime) -> u64 {
        let reference: i128 = match self.clock {
            Some((m, s)) => i128::from(s) + (i128::from(host.mono_ns) - i128::from(m)),
            None => i128::from(host.wall_ns),
        };
        let t = reference.div_euclid(HOUR_NS) * HOUR_NS + i128::from(toh_us) * 1000;
        let best = [t - HOUR_NS, t, t + HOUR_NS]
            .into_iter()
            .min_by_key(|c| (c - reference).abs())
            .unwrap_or(t);
        let ns = best.clamp(0, i128::from(u64::MAX)) as u64;
        self.clock = Some((host.mono_ns, ns));
        ns
    }
}

impl VendorDecoder for VelodyneStream {
    /// A 1206-byte payload is validated once by [`Packet::new_checked`]; anything else is
    /// rejected by [`classify`]. A host-time gap (monotonic) longer than the frame timeout
    /// closes the frame in progress before this packet is decoded.
    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection> {
        let classified = match *self.engine {
            VelodyneTables::Vlp16(_) => classify(payload),
            VelodyneTables::Multi(_) => multi::classify_model(self.model, payload),
        };
        let packet: Packet<&[u8]> = match classified {
            Ok(p) => p,
            Err(PacketRejection::Ignored) => return Err(Rejection::Ignored),
            Err(PacketRejection::Malformed(_)) => {
                self.assembler.note_malformed();
                return Err(Rejection::Malformed);
            }
        };
        let model = self.model;
        if !matches!(model, SensorModel::Hdl64eS2 | SensorModel::Hdl64eS3) {
            let id = packet.product_id();
            self.last_product_id = Some(id);
            if multi::model_from_product_id(id).is_some_and(|m| m != model) {
                if self.product_mismatches == 0 {
                    log::warn!(
                        "sensor {}: product id {id:#04x} (byte 1205) names {:?} but the sensor \
                         is configured as {model} and its calibration has {} lasers, as a \
                         {model}; decoding as {model} (counted in product_mismatches; some \
                         VLP-16 firmware sends 0x21, HDL-32E)",
                        self.sensor_id,
                        multi::model_from_product_id(id),
                        multi::laser_count(model),
                    );
                }
                self.product_mismatches += 1;
            }
        }
        let (mode, interval, first_block, seqs) = match *self.engine {
            VelodyneTables::Vlp16(_) => {
                let m = packet.return_mode();
                let seqs = if m == ReturnMode::Dual { 6 } else { 12 };
                (
                    m,
                    packet_interval_ns(m),
                    1 + usize::from(m == ReturnMode::Dual),
                    seqs,
                )
            }
            VelodyneTables::Multi(_) => {
                let m = multi::return_mode(model, &packet);
                let bps = multi::blocks_per_sequence_in(model, m);
                (
                    m,
                    self.firing.packet_interval_ns(model, m),
                    bps,
                    multi::data_blocks(model, m) / bps,
                )
            }
        };
        self.return_mode = Some(mode);
        let prev_sensor_ns = self.clock.map(|(_, s)| s);
        let mut sensor_ns = self.sensor_time_ns(packet.timestamp_us(), host);
        // VLS-128 firmware variants differ in firing-sequence period: pick the timing table
        // from the spacing of consecutive single-return packets.
        if model == SensorModel::Vls128
            && mode != ReturnMode::Dual
            && let Some(prev) = prev_sensor_ns
            && let Some(seq) = multi::vls128_sequence_from_spacing(sensor_ns.saturating_sub(prev))
        {
            self.firing.sequence_ns = seq;
        }
        if let Some(prev) = prev_sensor_ns {
            self.check_packet_rate(sensor_ns.wrapping_sub(prev), interval, mode);
        }
        if model == SensorModel::Vls128 {
            sensor_ns = sensor_ns.saturating_sub(multi::VLS128_STAMP_LEAD_NS);
        }
        let span = |a: u16, b: u16| (AZIMUTH_UNITS + u32::from(b) - u32::from(a)) % AZIMUTH_UNITS;
        let az0 = packet.azimuth(0);
        // Azimuth turned per packet: first to last firing sequence, scaled by seqs/(seqs-1);
        // a packet of one sequence (VLS-128 dual) uses the turn since the previous packet.
        let advance = if seqs >= 2 {
            let last_seq_block = first_block * (seqs - 1);
            let steps = (seqs - 1) as u32;
            span(az0, packet.azimuth(last_seq_block)) * seqs as u32 / steps
        } else {
            single_sequence_advance(self.prev_packet, az0, sensor_ns, interval)
        };
        self.prev_packet = Some((az0, sensor_ns));
        if seqs < 2 {
            self.firing.packet_advance_cdeg = advance.min(u32::from(u16::MAX)) as u16;
        }
        // The last block that holds data (a VLS-128 dual packet's padding blocks 8..11 are
        // not looked at).
        let last_block = (first_block * seqs.max(1)).clamp(1, BLOCKS) - 1;
        self.assembler.begin_packet(
            PacketInfo {
                host,
                sensor_ns,
                first_azimuth_cdeg: az0,
                last_azimuth_cdeg: packet.azimuth(last_block),
                advance_cdeg: advance,
                interval_ns: interval,
                // Velodyne packets carry no sequence number: losses are estimated.
                sequence: None,
            },
            out,
        )?;
        let mut b = self.assembler.batch();
        let sink = |blk: &BlockPoints<'_>| blk.append_timed(&mut b);
        match &*self.engine {
            VelodyneTables::Vlp16(d) => d.decode_blocks(&packet, sink),
            VelodyneTables::Multi(d) => d.decode_blocks_with(&packet, self.firing, sink),
        }
        self.assembler.end_packet(out);
        Ok(())
    }

    fn poll_timeout(&mut self, now_mono_ns: u64, out: &mut Vec<Frame>) {
        self.assembler.poll_timeout(now_mono_ns, out);
    }

    fn flush(&mut self, out: &mut Vec<Frame>) {
        self.assembler.flush(out);
    }

    fn return_mode(&self) -> Option<ReturnMode> {
        self.return_mode
    }

    fn set_buffer_source(&mut self, source: std::sync::Arc<dyn crate::scan::BufferSource>) {
        self.assembler.set_buffer_source(source);
    }

    fn set_point_type(&mut self, point_type: crate::layout::PointType) {
        self.assembler.set_point_type(point_type);
    }

    fn product_mismatches(&self) -> u64 {
        self.product_mismatches
    }

    fn time_faults(&self) -> crate::vendor::TimeFaults {
        crate::vendor::TimeFaults {
            restarts: self.assembler.stream_clock().restarts(),
            clock_steps: self.assembler.stream_clock().steps(),
            date_fallbacks: 0,
        }
    }

    fn in_progress(&self) -> bool {
        self.assembler.in_progress()
    }

    type Tables = VelodyneTables;

    fn tables(&self) -> &Arc<VelodyneTables> {
        &self.engine
    }

    /// The point decoder (calibration, range gates, trig tables) of `tables`; the firing
    /// state learned from the packets stays.
    fn set_tables(&mut self, tables: Arc<VelodyneTables>) {
        self.engine = tables;
    }

    fn counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        <VelodyneCounters as crate::counters::CounterSet>::DESCS
    }

    fn visit_counters(&self, f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64)) {
        crate::counters::CounterSet::visit(&self.counters, f);
    }
}
