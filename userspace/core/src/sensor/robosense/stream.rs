//! [`RobosenseStream`], the RoboSense [`VendorDecoder`]: the decoder, the DIFOP it applies
//! (rpm, angles, return mode) and the [`ScanAssembler`]; and its own counters
//! ([`ROBOSENSE_COUNTERS`]).

#![forbid(unsafe_code)]

use std::sync::Arc;

use crate::HostTime;
use crate::frame::Frame;
use crate::scan::{PacketInfo, ScanAssembler};
use crate::vendor::{
    ConfigError, PipelineOptions, Rejection, ReturnMode, SensorConfig, SensorModel, VendorDecoder,
};

use super::{
    AngleTable, BLOCKS, BPEARL_V4, BPEARL_V4_TYPE_MODEL, DecoderSettings, DifopPacket, MsopPacket,
    Payload, RobosenseDecoder, RobosenseTables, TURN_CDEG, classify, spec,
};

/// The RoboSense decoder's own counters: `lidarxdp_robosense_*{sensor,model}`.
pub const ROBOSENSE_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "robosense",
    labels: crate::vendor::SENSOR_COUNTERS.labels,
};

crate::counter_set! {
    /// RoboSense-specific counters (monotonic), beside the pipeline's [`crate::vendor::DecodeCounters`].
    pub struct RobosenseCounters in ROBOSENSE_COUNTERS;
    {
        /// They set the rpm, the return mode and (if valid) the angle table.
        difop_packets: Counter "packets" "RoboSense DIFOP (device information) packets applied.",
    }
}

/// A RoboSense sensor's decoder, return-mode state and [`ScanAssembler`]: the RoboSense
/// [`VendorDecoder`].
///
/// Return mode: from the DIFOP (offset 300); until a DIFOP arrives, dual return is inferred
/// for 32-channel models when blocks 0 and 1 share an azimuth, else single return
/// (strongest), as rs_driver's default.
#[derive(Clone, Debug)]
pub struct RobosenseStream {
    /// The calibration tables (the point decoder of the CSV's or the last DIFOP's angles),
    /// shared; what a DIFOP changes is written copy-on-write.
    decoder: Arc<RobosenseDecoder>,
    assembler: ScanAssembler,
    difop_mode: Option<ReturnMode>,
    return_mode: Option<ReturnMode>,
    /// The decoder's own counters (`difop_packets`).
    counters: RobosenseCounters,
    variant_checked: bool,
    /// MSOPs whose time field was invalid (stamped on the stream's time line, or host time).
    date_fallbacks: u64,
    /// The stream's time base is the host clock: no packet since it (re)started carried a
    /// valid header time.
    host_base: bool,
}

impl RobosenseStream {
    /// Builds the stream for `cfg`: model constants, the CSV angle table `calibration` (the
    /// contents of the file `cfg.calibration` names; overridden by the first DIFOP with a
    /// valid table), cut angle, ranges, FOV.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] for a non-RoboSense model; CSV errors of
    /// [`AngleTable::from_bytes`].
    pub fn new(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let spec = spec(cfg.model).ok_or_else(|| ConfigError::Unsupported {
            model: cfg.model,
            supported: "RS16, RS32, Bpearl, Helios, Helios16P".into(),
        })?;
        let angles = AngleTable::from_bytes(calibration, spec.lasers, &cfg.calibration)?;
        let settings = DecoderSettings {
            min_range_m: cfg.range.min().get(),
            max_range_m: cfg.range.max().get(),
            fov_cdeg: opts.fov.map(crate::scan::Fov::from),
        };
        let mut assembler = ScanAssembler::new(cfg.sensor_id, cfg.cut_angle, cfg.frame_timeout);
        assembler.set_fov(opts.fov.map(crate::scan::Fov::from));
        Ok(Self {
            decoder: Arc::new(RobosenseDecoder::new(spec, angles, settings)),
            assembler,
            difop_mode: None,
            return_mode: None,
            counters: RobosenseCounters::default(),
            variant_checked: false,
            date_fallbacks: 0,
            host_base: false,
        })
    }

    /// The point decoder (angle table in use, nominal advance).
    pub fn decoder(&self) -> &RobosenseDecoder {
        &self.decoder
    }

    /// DIFOP packets consumed so far.
    pub fn difop_packets(&self) -> u64 {
        self.counters.difop_packets
    }

    /// Applies a DIFOP: rpm, return mode and (if valid) the angle table.
    pub fn apply_difop(&mut self, d: &DifopPacket<&[u8]>) {
        self.counters.difop_packets += 1;
        let spec = self.decoder.spec();
        let tables = Arc::make_mut(&mut self.decoder);
        tables.set_rpm(d.rpm());
        if let Some(m) = spec.return_mode_of(d.return_mode_byte()) {
            self.difop_mode = Some(m);
        }
        if let Some(t) = d.angles(spec) {
            tables.set_angles(t);
        }
        if spec.model == SensorModel::Bpearl {
            tables.set_mirrored(d.bpearl_reversal());
        }
    }

    fn mode_for(&self, p: &MsopPacket<&[u8]>) -> ReturnMode {
        if let Some(m) = self.difop_mode {
            return m;
        }
        if !self.decoder.spec().rs16_layout && p.azimuth(0) == p.azimuth(1) {
            ReturnMode::Dual
        } else {
            ReturnMode::Strongest
        }
    }
}

impl VendorDecoder for RobosenseStream {
    /// MSOP: decoded into the frame in progress. DIFOP: applied, counted `ignored`. Anything
    /// else per [`classify`].
    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection> {
        let p = match classify(payload, self.decoder.spec().header) {
            Ok(Payload::Msop(p)) => p,
            Ok(Payload::Difop(d)) => {
                self.apply_difop(&d);
                return Err(Rejection::Ignored);
            }
            Err(Rejection::Malformed) => {
                self.assembler.note_malformed();
                return Err(Rejection::Malformed);
            }
            Err(r) => return Err(r),
        };
        let mode = self.mode_for(&p);
        self.return_mode = Some(mode);
        let spec = self.decoder.spec();
        if !self.variant_checked {
            // rs_driver decides the Bpearl firmware variant on the first MSOP.
            self.variant_checked = true;
            if spec.model == SensorModel::Bpearl && p.lidar_type_model() == BPEARL_V4_TYPE_MODEL {
                Arc::make_mut(&mut self.decoder).set_spec(&BPEARL_V4);
            }
        }
        let spec = self.decoder.spec();
        let stamped = p.sensor_time_ns_as(spec.unix_time);
        // A header time that is no time: stamped on the stream's time line (last accepted
        // sensor time + host monotonic time elapsed, no jump, the frame stays on the sensor
        // clock), or on host wall time while the stream has no valid time yet (the frame then
        // says so; the host clock is then the stream's clock, and a step of it a restart).
        let on_host = stamped.is_none()
            && (self.host_base
                || self
                    .assembler
                    .stream_clock()
                    .extrapolate(host.mono_ns)
                    .is_none());
        let sensor_ns = match stamped {
            Some(t) => t,
            None if on_host => host.wall_ns,
            None => self
                .assembler
                .stream_clock()
                .extrapolate(host.mono_ns)
                .unwrap_or(host.wall_ns),
        };
        let dual = mode.returns() > 1;
        let span = |a: u16, b: u16| (i32::from(b) - i32::from(a)).rem_euclid(TURN_CDEG) as u32;
        let advance = if dual && !spec.rs16_layout {
            span(p.azimuth(0), p.azimuth(10)) * 6 / 5
        } else {
            span(p.azimuth(0), p.azimuth(11)) * 12 / 11
        };
        self.assembler.begin_packet(
            PacketInfo {
                host,
                sensor_ns,
                first_azimuth_cdeg: p.azimuth(0),
                last_azimuth_cdeg: p.azimuth(BLOCKS - 1),
                advance_cdeg: advance,
                interval_ns: if spec.rs16_layout && !dual {
                    (12.0
                        * self.decoder.sequences_per_block(&p)
                        * f64::from(spec.block_us)
                        * 1000.0)
                        .round() as u64
                } else {
                    spec.packet_interval_ns(mode)
                },
                sequence: p.packet_counter(),
            },
            out,
        )?;
        if stamped.is_none() {
            self.date_fallbacks += 1;
        }
        self.host_base = on_host;
        if on_host {
            self.assembler.mark_host_clock();
        }
        let asm = &mut self.assembler;
        self.decoder.decode(&p, mode, |d| {
            asm.add_point(d.point, d.block_azimuth_cdeg, d.offset_ns)
        });
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

    fn time_faults(&self) -> crate::vendor::TimeFaults {
        crate::vendor::TimeFaults {
            restarts: self.assembler.stream_clock().restarts(),
            clock_steps: self.assembler.stream_clock().steps(),
            date_fallbacks: self.date_fallbacks,
        }
    }

    fn in_progress(&self) -> bool {
        self.assembler.in_progress()
    }

    type Tables = RobosenseTables;

    fn tables(&self) -> &Arc<RobosenseTables> {
        &self.decoder
    }

    /// Takes `tables`: the point decoder built from the new CSV and the sensor's settings (a
    /// DIFOP with a valid angle table still overrides the CSV's when the next one arrives);
    /// what the DIFOPs and MSOPs said so far (motor speed, Bpearl reversal and firmware
    /// variant, and so the raw range window of its distance unit) is carried over.
    fn set_tables(&mut self, tables: Arc<RobosenseTables>) {
        let old = std::mem::replace(&mut self.decoder, tables);
        if !std::ptr::eq(old.spec(), self.decoder.spec())
            || old.rpm() != self.decoder.rpm()
            || old.mirrored() != self.decoder.mirrored()
        {
            let d = Arc::make_mut(&mut self.decoder);
            d.set_spec(old.spec());
            d.set_rpm(old.rpm());
            d.set_mirrored(old.mirrored());
        }
    }

    fn counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        <RobosenseCounters as crate::counters::CounterSet>::DESCS
    }

    fn visit_counters(&self, f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64)) {
        crate::counters::CounterSet::visit(&self.counters, f);
    }
}
