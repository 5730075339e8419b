//! The sans-IO RoboSense point decoder [`RobosenseDecoder`]: an MSOP packet to
//! [`DecodedPoint`]s with rs_driver's arithmetic (integer 0.01° angles, f32 geometry in m,
//! the lens-centre offset, firing offsets in ns after the packet time).

#![forbid(unsafe_code)]

use crate::point::{PointXYZIRCAEDT, ReturnType};

use std::f64::consts::PI;

use crate::scan::Bound;
use crate::vendor::ReturnMode;

use super::angles::wrap_cdeg;
use super::{AngleTable, BLOCKS, CDEG_TO_RAD, CHANNELS, ModelSpec, MsopPacket, TURN_CDEG};

/// One decoded point plus what the scan assembler needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodedPoint {
    /// The point; `time_stamp` is left 0 (the assembler sets it).
    pub point: PointXYZIRCAEDT,
    /// Corrected azimuth, 0.01°, 0..35999.
    pub azimuth_cdeg: u16,
    /// Raw azimuth of the point's block, 0.01° (used for the frame cut).
    pub block_azimuth_cdeg: u16,
    /// Firing time after the packet timestamp, ns.
    pub offset_ns: u32,
    /// Block 0..11.
    pub block: u8,
    /// Channel 0..31 in the block.
    pub chan: u8,
}

/// Decoder settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecoderSettings {
    /// Points with distance `<= min_range_m` are dropped, m.
    pub min_range_m: f32,
    /// Points with distance `>= max_range_m` are dropped, m.
    pub max_range_m: f32,
    /// Field of view `(min, max)` on the corrected azimuth, 0.01°, inclusive; `min > max`
    /// wraps through 0°. `None` keeps everything.
    pub fov_cdeg: Option<crate::scan::Fov>,
}

/// The RoboSense point decoder: model constants, angle table, settings. Stateless between
/// packets except for what a DIFOP sets (angles, rpm).
#[derive(Clone)]
pub struct RobosenseDecoder {
    spec: &'static ModelSpec,
    pub(super) angles: AngleTable,
    user_chan: Vec<u16>,
    settings: DecoderSettings,
    /// The raw distances that pass the range gate (`min_range_m < raw · distance_res_m <
    /// max_range_m`, f32, exclusive as rs_driver; [`crate::scan::raw_window`]).
    range_raw: std::ops::Range<u32>,
    /// Nominal azimuth advance per block (firing), 0.01° (rs_driver `block_az_diff_`).
    nominal_az_diff: i32,
    /// `(cos, sin)` per 0.01°, f32 of the f64 value (rs_driver `Trigon`).
    trig: Box<[[f32; 2]]>,
    /// Per channel, `[single, dual]`: azimuth fraction `firing / T'` (rs_driver `CHAN_AZIS`,
    /// f32) and firing offset in ns.
    chan: [ChanTiming; 2],
    /// Per laser: `(cos v, sin v)` and the elevation in rad.
    laser_vert: Vec<([f32; 2], f32)>,
    /// Motor speed, rpm (600 until a DIFOP says otherwise).
    rpm: u16,
    /// Azimuths mirrored (`36000 − h`), Bpearl reversal flag.
    mirrored: bool,
}

/// Per-channel timing of one return mode (precomputed from [`ModelSpec::firing_us`]).
#[derive(Clone, Copy, Debug, Default)]
struct ChanTiming {
    azis: [f32; CHANNELS],
    ns: [u32; CHANNELS],
}

impl ChanTiming {
    fn new(spec: &ModelSpec, dual: bool) -> Self {
        let mut t = Self::default();
        for c in 0..CHANNELS {
            let (firing, div) = match (spec.rs16_layout, dual) {
                (true, false) => (spec.firing_us[c], spec.block_us * 2.0),
                (true, true) => (spec.firing_us[c % 16], spec.block_us),
                (false, _) => (spec.firing_us[c], spec.block_us),
            };
            t.azis[c] = firing / div;
            t.ns[c] = (f64::from(firing) * 1000.0).round() as u32;
        }
        t
    }
}

impl std::fmt::Debug for RobosenseDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobosenseDecoder")
            .field("model", &self.spec.model)
            .field("angles", &self.angles)
            .field("settings", &self.settings)
            .field("nominal_az_diff", &self.nominal_az_diff)
            .finish_non_exhaustive()
    }
}

/// The raw distances of `spec` (units of [`ModelSpec::distance_res_m`]) that pass the range
/// gate `min_range_m < distance < max_range_m` of `settings` (rs_driver's exclusive bounds), as
/// [`crate::scan::raw_window`] finds them.
fn range_window(spec: &ModelSpec, settings: &DecoderSettings) -> std::ops::Range<u32> {
    crate::scan::raw_window(
        1..1 << 16,
        |r| r as f32 * spec.distance_res_m,
        (settings.min_range_m, Bound::Exclusive),
        (settings.max_range_m, Bound::Exclusive),
    )
}

impl RobosenseDecoder {
    /// Builds a decoder for `spec` with `angles` (as many rows as `spec.lasers`; missing rows
    /// decode with 0° angles).
    pub fn new(spec: &'static ModelSpec, angles: AngleTable, settings: DecoderSettings) -> Self {
        let trig = (0..TURN_CDEG)
            .map(|i| {
                let rad = f64::from(i) * 0.01 * PI / 180.0;
                [rad.cos() as f32, rad.sin() as f32]
            })
            .collect();
        let mut d = Self {
            spec,
            user_chan: Vec::new(),
            angles: AngleTable {
                vert_cdeg: Vec::new(),
                horiz_cdeg: Vec::new(),
            },
            range_raw: range_window(spec, &settings),
            settings,
            nominal_az_diff: 0,
            trig,
            chan: [ChanTiming::new(spec, false), ChanTiming::new(spec, true)],
            laser_vert: Vec::new(),
            rpm: 600,
            mirrored: false,
        };
        d.set_angles(angles);
        d.set_rpm(600);
        d
    }

    /// The model constants.
    pub fn spec(&self) -> &'static ModelSpec {
        self.spec
    }

    /// The angle table in use.
    pub fn angles(&self) -> &AngleTable {
        &self.angles
    }

    /// Replaces the angle table (from a DIFOP).
    pub fn set_angles(&mut self, mut angles: AngleTable) {
        angles.vert_cdeg.resize(self.spec.lasers, 0);
        angles.horiz_cdeg.resize(self.spec.lasers, 0);
        self.user_chan = angles.user_channels();
        self.laser_vert = angles
            .vert_cdeg
            .iter()
            .map(|&v| (self.trig(v), (f64::from(v) * 0.01 * PI / 180.0) as f32))
            .collect();
        self.angles = angles;
    }

    /// Mirrors every azimuth (`h → 36000 − h`, before the geometry), as rs_driver does for a
    /// Bpearl whose DIFOP sets the reversal flag.
    pub fn set_mirrored(&mut self, mirrored: bool) {
        self.mirrored = mirrored;
    }

    /// Switches to another spec of the same model (a firmware variant such as
    /// [`BPEARL_V4`](super::BPEARL_V4)), keeping the angle table, settings and rpm; the raw
    /// range window follows the spec's distance unit.
    pub fn set_spec(&mut self, spec: &'static ModelSpec) {
        self.spec = spec;
        // The variant's distance unit (Bpearl V4: 2.5 mm) moves the raw range window.
        self.range_raw = range_window(spec, &self.settings);
        self.chan = [ChanTiming::new(spec, false), ChanTiming::new(spec, true)];
        self.set_rpm(self.rpm);
    }

    /// Motor speed in use, rpm ([`Self::set_rpm`]).
    pub fn rpm(&self) -> u16 {
        self.rpm
    }

    /// Azimuths are mirrored ([`Self::set_mirrored`]).
    pub fn mirrored(&self) -> bool {
        self.mirrored
    }

    /// Sets the motor speed (rpm; below 60 means 600, as rs_driver): the nominal block advance
    /// becomes `round(36000 · rps · T)` 0.01°.
    pub fn set_rpm(&mut self, rpm: u16) {
        self.rpm = rpm;
        let rps = match rpm / 60 {
            0 => 10,
            r => r,
        };
        let t = f64::from(self.spec.block_us) / 1e6;
        self.nominal_az_diff = (f64::from(TURN_CDEG) * f64::from(rps) * t).round() as i32;
    }

    /// Nominal azimuth advance per block, 0.01°.
    pub fn nominal_az_diff(&self) -> i32 {
        self.nominal_az_diff
    }

    fn trig(&self, cdeg: i32) -> [f32; 2] {
        self.trig
            .get(wrap_cdeg(cdeg) as usize)
            .copied()
            .unwrap_or([1.0, 0.0])
    }

    /// Firing sequences per block of a 16-laser single-return packet: 2 (rs_driver) unless the
    /// blocks advance by less than 1.5 nominal firings on average, as in the Helios-16P capture
    /// of `shared/data` (0.20° per block at 600 rpm, 1500 packets/s): then 1, so that packet
    /// times and point times stay consistent (rs_driver would place the blocks 111 µs apart
    /// while the packets are 667 µs apart, and points of consecutive packets would interleave).
    pub fn sequences_per_block(&self, p: &MsopPacket<&[u8]>) -> f64 {
        let span =
            (i32::from(p.azimuth(BLOCKS - 1)) - i32::from(p.azimuth(0))).rem_euclid(TURN_CDEG);
        if 2 * span >= 3 * self.nominal_az_diff * (BLOCKS as i32 - 1) {
            2.0
        } else {
            1.0
        }
    }

    /// `(az_diff, block time offset µs)` of block `b` (rs_driver block iterators).
    fn block_timing(&self, p: &MsopPacket<&[u8]>, dual: bool, b: usize) -> (i32, f64) {
        let s = self.spec;
        let t = f64::from(s.block_us);
        let (step, per_block, nominal) = match (s.rs16_layout, dual) {
            (true, false) => (1, self.sequences_per_block(p) * t, 2 * self.nominal_az_diff),
            (true, true) => (1, t, self.nominal_az_diff),
            (false, false) => (1, t, self.nominal_az_diff),
            (false, true) => (2, t, self.nominal_az_diff),
        };
        let first = b - b % step;
        let idx = first / step;
        let diff = if first + step < BLOCKS {
            let d = (i32::from(p.azimuth(first + step)) - i32::from(p.azimuth(first)))
                .rem_euclid(TURN_CDEG);
            if d > 100 { nominal } else { d }
        } else {
            nominal
        };
        (diff, idx as f64 * per_block)
    }

    /// Decodes one validated packet in `mode`, calling `emit` for every point that survives the
    /// range and FOV filters, in packet order (block, channel).
    ///
    /// Dual return: the two returns of a laser (channels c and c+16 of a block for 16-laser
    /// models, the same channel of blocks 2k and 2k+1 otherwise) with equal raw distance are
    /// one point of type [`ReturnType::Identical`] (emitted once, from the first slot), as is a
    /// return whose partner slot is empty; otherwise the shorter is "first", the longer "last",
    /// and the one with the higher intensity (the first on a tie) "strongest"
    /// (`FirstStrongest`, `LastWeak`, ...).
    pub fn decode(
        &self,
        p: &MsopPacket<&[u8]>,
        mode: ReturnMode,
        mut emit: impl FnMut(DecodedPoint),
    ) {
        let s = self.spec;
        let dual = mode.returns() > 1;
        let set = &self.settings;
        let single_type = match mode {
            ReturnMode::Last => ReturnType::Last,
            ReturnMode::First => ReturnType::First,
            _ => ReturnType::Strongest,
        };
        let timing = &self.chan[usize::from(dual)];
        for block in 0..BLOCKS {
            let (az_diff, block_off_us) = self.block_timing(p, dual, block);
            let block_off_ns = (block_off_us * 1000.0).round() as u32;
            let block_az = i32::from(p.azimuth(block));
            for chan in 0..CHANNELS {
                let raw = p.distance_raw(block, chan);
                if raw == 0 {
                    continue;
                }
                // Partner slot in dual mode, and whether this is the second slot.
                let (partner, second) = match (dual, s.rs16_layout) {
                    (false, _) => (None, false),
                    (true, true) => (Some((block, chan ^ 16)), chan >= 16),
                    (true, false) => (Some((block ^ 1, chan)), block % 2 == 1),
                };
                let other = partner.map_or(0, |(b, c)| p.distance_raw(b, c));
                if second && other == raw {
                    continue;
                }
                if !self.range_raw.contains(&u32::from(raw)) {
                    continue;
                }
                let distance = f32::from(raw) * s.distance_res_m;
                let laser = if s.rs16_layout { chan % 16 } else { chan };
                let mut h = block_az + (az_diff as f32 * timing.azis[chan]) as i32;
                let (Some(&dh), Some(&([cos_v, sin_v], elevation))) = (
                    self.angles.horiz_cdeg.get(laser),
                    self.laser_vert.get(laser),
                ) else {
                    continue;
                };
                let mut hf = h + dh;
                if self.mirrored {
                    hf = TURN_CDEG - hf;
                    h = TURN_CDEG - h;
                }
                let az_c = wrap_cdeg(hf);
                if let Some(fov) = set.fov_cdeg
                    && !fov.contains_cdeg(az_c as u32)
                {
                    continue;
                }
                let [cos_hf, sin_hf] = self.trig(hf);
                let [cos_h, sin_h] = self.trig(h);
                let x = distance * cos_v * cos_hf + s.rx_m * cos_h;
                let y = -distance * cos_v * sin_hf - s.rx_m * sin_h;
                let z = distance * sin_v + s.rz_m;
                let intensity = p.intensity(block, chan);
                let return_type = match partner {
                    None => single_type,
                    Some((pb, pc)) => {
                        if other == 0 || other == raw {
                            ReturnType::Identical
                        } else {
                            let oi = p.intensity(pb, pc);
                            let first = raw < other;
                            let strongest = if oi == intensity {
                                !second
                            } else {
                                intensity > oi
                            };
                            match (first, strongest) {
                                (true, true) => ReturnType::FirstStrongest,
                                (true, false) => ReturnType::FirstWeak,
                                (false, true) => ReturnType::LastStrongest,
                                (false, false) => ReturnType::LastWeak,
                            }
                        }
                    }
                };
                emit(DecodedPoint {
                    point: PointXYZIRCAEDT {
                        x,
                        y,
                        z,
                        intensity,
                        return_type: return_type as u8,
                        channel: self.user_chan.get(laser).copied().unwrap_or(laser as u16),
                        azimuth: (f64::from(az_c) * CDEG_TO_RAD) as f32,
                        elevation,
                        distance,
                        time_stamp: 0,
                    },
                    azimuth_cdeg: az_c as u16,
                    block_azimuth_cdeg: block_az as u16,
                    offset_ns: block_off_ns + timing.ns[chan],
                    block: block as u8,
                    chan: chan as u8,
                });
            }
        }
    }
}
