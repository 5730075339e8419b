//! Hesai decoders: Pandar40P, Pandar64, PandarQT64, PandarQT128, PandarXT16, PandarXT32,
//! PandarXT32M, Pandar128E4X/OT128 and AT128. Sans-IO: UDP payload bytes in, [`Frame`]s out.
//!
//! Sources: the Hesai user manuals (packet layouts in [`layout`], firing times in `timing`)
//! and Tier IV Nebula's generic Hesai decoder (`hesai_decoder.hpp`, `scan_cutter.hpp`), whose
//! output this module reproduces point for point (see `tests/decode/decode_hesai_golden.rs`).
//!
//! ## Points
//! For each block group (1, 2 or 3 blocks, one per return) and each channel, in that order:
//! * distance = raw · `dis_unit` (m); raw 0 is no return; kept when inside both the model's
//!   range limits and the configured `[min_range_m, max_range_m]`, **inclusive** (as Nebula).
//! * azimuth = block azimuth + the channel's CSV azimuth offset, f32 rad in [0, 2π);
//!   elevation = the CSV elevation (rad).
//! * Nebula's Hesai axes: `x = d·cos(el)·sin(az)`, `y = d·cos(el)·cos(az)`, `z = d·sin(el)`.
//! * Multi-return: two returns with equal distance and reflectivity are one point of type
//!   [`ReturnType::Identical`] (the last of them is kept); a return closer than
//!   [`DUAL_RETURN_DISTANCE_THRESHOLD_M`] to another one of the same firing is dropped unless it
//!   is the last of the group. Types follow the return mode byte (0x39: the first block is
//!   last, `LastStrongest` if also strongest, the second `Strongest` or `SecondStrongest`; 0x3b
//!   first/last — swapped for XT16/XT32/OT128, whose blocks come in the other order; etc.).
//! * `time_stamp`: firing time (packet time + block and channel offsets from the manuals'
//!   firing tables) minus the frame start.
//!
//! ## Frames
//! The frame boundary is cut per channel, exactly as Nebula's `ScanCutter`: every channel goes
//! into one of two frame buffers, and switches buffer when its own corrected azimuth passes
//! the cut angle (`last ≤ cut < current`, cyclic). A frame is published when its last channel
//! has left it, i.e. when every channel of a block group is in the other buffer. Its start time
//! is the earliest firing of the block group whose first channel entered it. So every point is
//! in exactly one frame, frames are `[cut, cut + 360°)` per channel, and the 0/360 wrap needs no
//! special case. The first frame after start-up (or after a timeout) is published partial,
//! marked not whole: `packets_expected` adds the packets between the cut and its first packet
//! (from the azimuth of its channel furthest past the cut, in measured per-packet advances),
//! and a frame closed by a timeout or flush adds those from its channel furthest behind to
//! the cut.
//! The field of view (`PipelineOptions::fov_deg`, inclusive, may wrap) drops points outside
//! it; the cut must lie inside the field of view.
//! Deviations from Nebula: two consecutive blocks with the *same* azimuth, or a channel stepping
//! back by at most [`AZIMUTH_JITTER_CDEG`] (encoder jitter), never count as a crossing (Nebula
//! treats them as a full turn), an impossible cutter transition is ignored (Nebula throws), a
//! packet that arrived late (a few packets, [`TimeVerdict::Late`]) joins the frame buffers
//! without stepping the cutter if the cut has not passed since its azimuth (else it is counted
//! `late`), and a silence (host time past `frame_timeout_ns`, and on arrival the sensor time
//! too: [`FrameBuilder::silence_before`]) publishes the buffers as they are and restarts the
//! cutter. A frame whose cutter reset fell outside the
//! field of view (the first frame after start-up with `fov_deg`) starts at its first block
//! group, never at 0.
//!
//! ## Time
//! Packet time = tail date + µs ([`packet::Packet::date_seconds`]: the year byte in either
//! convention, or Unix seconds when the first date byte is 0). A packet whose date is no date
//! is decoded all the same and counted in `date_fallbacks` (a date never costs the sensor):
//! it is stamped on the stream's time line ([`crate::scan::StreamClock::extrapolate`]: the last accepted
//! sensor time plus the host time elapsed), or, while the stream has no valid time at all, on
//! host time, and then its frame says [`crate::frame::FrameClock::Host`]. Every packet then goes through the shared
//! [`crate::scan::StreamClock`]: a time jump is dropped (`time_jumps`) and the frame stays whole, a
//! sustained one is a restart, and a gap longer than one rotation period (measured from the
//! block azimuths) publishes the frames in progress, counting the packets missing up to the
//! cut and from it (in measured per-packet advances) and the whole turns in between
//! (`frames_lost_before` of the next frame). AT128 (mirror fields) has no gap rule.
//!
//! ## Packet accounting
//! `packets_received`: packets with at least one block group in the frame (under a field of
//! view: inside it; the head and tail estimates then count only its azimuths). `packets_expected`
//! adds the packets lost according to the tail's UDP sequence (gaps of 1..=65535; larger jumps
//! are a restart and count nothing), and around a sensor-time gap the estimate above. Models
//! and variants without a sequence count no other loss.
//! `packets_malformed`: damaged packets while the frame was being filled.
//!
//! ## CRC
//! QT128 and OT128 carry CRC-32/MPEG-2 checksums of the body and the tail; a mismatch is
//! malformed. `PipelineOptions::hesai_skip_crc` turns the check off (Nebula never checks).
//!
//! ## AT128
//! AT128E2X blocks carry a fine azimuth (0.01°/256) and its angles come from the binary
//! correction file ([`At128Correction`]): mirror fields, each mapping its encoder range onto
//! the ~120° field of view. Typical use: `fov_deg = (30, 150)`, cut 150° (Nebula's test
//! settings). No AT128 capture is available: it is verified on synthetic packets and a
//! synthetic correction file only, and its CRCs are not checked (convention unverified).
//! The cutter's lagging/leading channels are taken per block group (the corrected azimuths
//! depend on the encoder azimuth), as Nebula's correction-based angle corrector does.

pub mod crc;
pub mod layout;
pub mod packet;
mod timing;

use std::f64::consts::PI;
use std::path::Path;

use crate::HostTime;
use crate::frame::Frame;
use crate::point::{PointXYZIRCAEDT, ReturnType};
use crate::point_buf::PointBuf;
use crate::scan::{
    AZIMUTH_JITTER_CDEG, AZIMUTH_UNITS, Fov, FrameAccount, FrameBuilder, TimeVerdict, arc_in_view,
    turns_lost,
};

use self::layout::Layout;

/// Why a Hesai angle-correction file was refused: [`AngleCorrection::parse`] (CSV, lines
/// counted from 1 with the header) and [`At128Correction::parse`] (AT128 `.dat`, byte offsets
/// counted from the `EE FF` delimiter).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CorrectionError {
    /// A CSV line that is not `id,elevation,azimuth` with an integer id and two numbers.
    #[error("line {line}: expected `id,elevation,azimuth`: {text}")]
    BadLine {
        /// Line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// A CSV channel id outside `1..=channels`.
    #[error("line {line}: channel id {id} outside 1..={channels}")]
    ChannelId {
        /// Line number.
        line: usize,
        /// The id found.
        id: usize,
        /// The model's channel count.
        channels: usize,
    },
    /// A CSV elevation or azimuth outside ±180° (or not finite).
    #[error("line {line}: angle outside ±180°")]
    Angle {
        /// Line number.
        line: usize,
    },
    /// A CSV channel id given twice.
    #[error("line {line}: duplicate channel id {id}")]
    DuplicateChannel {
        /// Line number of the second occurrence.
        line: usize,
        /// The channel id.
        id: usize,
    },
    /// A channel the CSV does not list (the first one missing).
    #[error("channel {channel} missing (need {channels})")]
    MissingChannel {
        /// Channel id, from 1.
        channel: usize,
        /// The model's channel count.
        channels: usize,
    },
    /// No `EE FF` delimiter in the `.dat` file.
    #[error("no EE FF delimiter")]
    NoDelimiter,
    /// A `.dat` format version other than x.5.
    #[error("version {major}.{minor} unsupported (need x.5)")]
    Version {
        /// Major version byte.
        major: u8,
        /// Minor version byte.
        minor: u8,
    },
    /// The `.dat` file's channel count differs from the model's.
    #[error("{found} channels, model has {expected}")]
    ChannelCount {
        /// Channels in the file.
        found: u8,
        /// The model's channel count.
        expected: usize,
    },
    /// No mirror, or more than 8 mirrors or fields.
    #[error("{mirrors} mirrors / {fields} fields (max 8)")]
    Mirrors {
        /// Mirrors in the file.
        mirrors: u8,
        /// Fields (frames) in the file.
        fields: u8,
    },
    /// The `.dat` file ends before a table it announces.
    #[error("file ends at byte {len} (need {need})")]
    Truncated {
        /// Bytes from the delimiter to the end of the file.
        len: usize,
        /// Bytes the next table needs.
        need: usize,
    },
}
use self::packet::{Packet, Rejection, return_mode as rm};
use crate::vendor::{
    ConfigError, PipelineOptions, ReturnMode, SensorConfig, SensorModel, VendorDecoder,
};

/// Nebula's default `dual_return_distance_threshold`, m.
pub const DUAL_RETURN_DISTANCE_THRESHOLD_M: f32 = 0.1;

/// Builds the decoder for a Hesai model.
///
/// # Errors
/// [`ConfigError::CalibrationIo`] / [`ConfigError::Calibration`] for an invalid (or not
/// UTF-8) angle-correction CSV (AT128: correction `.dat`) in `calibration`,
/// [`ConfigError::OutOfRange`] for a cut angle outside the field of view.
pub fn build(
    cfg: &SensorConfig,
    calibration: &[u8],
    opts: PipelineOptions,
) -> Result<Box<dyn VendorDecoder>, ConfigError> {
    Ok(Box::new(HesaiStream::new(cfg, calibration, opts)?))
}

// ---------------------------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------------------------

/// Angle-correction table: per channel, elevation and azimuth offset, degrees.
///
/// File format (Hesai "angle correction" CSV, as shipped with the sensors and in Nebula's
/// `calibration/` folder): one header line, then one row per channel
/// `id,elevation_deg,azimuth_offset_deg` with `id` 1-based. Extra columns are ignored.
#[derive(Clone, Debug, PartialEq)]
pub struct AngleCorrection {
    /// Elevation of each channel, degrees.
    pub elevation_deg: Vec<f32>,
    /// Azimuth offset of each channel, degrees (added to the block azimuth).
    pub azimuth_deg: Vec<f32>,
}

impl AngleCorrection {
    /// Parses CSV text for `channels` channels.
    ///
    /// # Errors
    /// A message naming the first bad line: unparsable numbers, an id outside `1..=channels`,
    /// a duplicate id, a missing channel, or an angle outside ±180°.
    pub fn parse(text: &str, channels: usize) -> Result<Self, CorrectionError> {
        let mut el = vec![f32::NAN; channels];
        let mut az = vec![f32::NAN; channels];
        for (i, line) in text.lines().enumerate().skip(1) {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            let bad = || CorrectionError::BadLine {
                line: i + 1,
                text: line.to_owned(),
            };
            let (Some(id), Some(e), Some(a)) = (cols.first(), cols.get(1), cols.get(2)) else {
                return Err(bad());
            };
            let id: usize = id.parse().map_err(|_| bad())?;
            let e: f32 = e.parse().map_err(|_| bad())?;
            let a: f32 = a.parse().map_err(|_| bad())?;
            if !(1..=channels).contains(&id) {
                return Err(CorrectionError::ChannelId {
                    line: i + 1,
                    id,
                    channels,
                });
            }
            if !(e.abs() <= 180.0 && a.abs() <= 180.0) {
                return Err(CorrectionError::Angle { line: i + 1 });
            }
            if !el[id - 1].is_nan() {
                return Err(CorrectionError::DuplicateChannel { line: i + 1, id });
            }
            el[id - 1] = e;
            az[id - 1] = a;
        }
        if let Some(missing) = el.iter().position(|v| v.is_nan()) {
            return Err(CorrectionError::MissingChannel {
                channel: missing + 1,
                channels,
            });
        }
        Ok(Self {
            elevation_deg: el,
            azimuth_deg: az,
        })
    }

    /// Parses a CSV file's contents; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::CalibrationIo`] (not UTF-8) or [`ConfigError::Calibration`] (see
    /// [`Self::parse`]).
    pub fn from_bytes(bytes: &[u8], channels: usize, source: &Path) -> Result<Self, ConfigError> {
        let text = crate::vendor::calibration_text(bytes, source)?;
        Self::parse(text, channels).map_err(|e| ConfigError::Calibration {
            path: source.to_path_buf(),
            message: e.to_string(),
        })
    }
}

/// AT128 angle-correction file (binary, the `.dat` the sensor serves; format version 1.5), as
/// read by Nebula's `HesaiCorrection::load_from_bytes` and Hesai's SDK:
///
/// | offset (from `EE FF`) | size | field |
/// |---|---|---|
/// | 0 | 2 | delimiter `EE FF` |
/// | 2, 3 | 1 + 1 | version major, minor (5) |
/// | 4 | 1 | channel count C (128) |
/// | 5 | 1 | mirror count M (≤ 8) |
/// | 6 | 1 | frame (field) count F (≤ 8) |
/// | 7 | 8 | frame config |
/// | 15 | 1 | resolution R (multiplies every value below) |
/// | 16 | 4·M | field start azimuths, u32 LE, 0.01°/256 |
/// | .. | 4·M | field end azimuths, u32 LE |
/// | .. | 4·C | channel azimuth, i32 LE, 0.01°/256 |
/// | .. | 4·C | channel elevation, i32 LE, 0.01°/256 |
/// | .. | 180·C | azimuth adjustment, i8, 0.01° (per channel, per 2° of encoder azimuth) |
/// | .. | 180·C | elevation adjustment, i8, 0.01° |
/// | .. | 32 | SHA-256 |
///
/// Corrected azimuth of channel c at encoder azimuth a (field f with start ≤ a ≤ end):
/// `(a − start_f)·2 − azimuth_c + adj_az(c, a)·256`, elevation `elevation_c + adj_el(c, a)·256`,
/// both in 0.01°/256; `adj(c, a)` interpolates linearly between the entries `⌊a/51200⌋` and the
/// next one, rounded (Nebula `get_azimuth_adjust_v3`). Deviation: Nebula multiplies the i8
/// adjustments by R in i8 (wrapping for R > 1); we do it in i32.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At128Correction {
    /// Field start / end encoder azimuths, 0.01°/256.
    pub fields: Vec<(i64, i64)>,
    /// Channel azimuth, 0.01°/256.
    pub azimuth: Vec<i32>,
    /// Channel elevation, 0.01°/256.
    pub elevation: Vec<i32>,
    /// Azimuth adjustments, 0.01° (180 per channel).
    pub azimuth_adjust: Vec<i32>,
    /// Elevation adjustments, 0.01° (180 per channel).
    pub elevation_adjust: Vec<i32>,
}

/// Encoder azimuth units per turn for AT128 (360° in 0.01°/256).
pub const AT128_UNITS: i64 = 360 * 25_600;

impl At128Correction {
    /// Parses the binary file contents for `channels` channels.
    ///
    /// # Errors
    /// A message: no `EE FF` delimiter, version other than 1.5, channel count mismatch, more
    /// than 8 mirrors/fields, or the file ends early.
    pub fn parse(buf: &[u8], channels: usize) -> Result<Self, CorrectionError> {
        let start = buf
            .windows(2)
            .position(|w| w == [0xEE, 0xFF])
            .ok_or(CorrectionError::NoDelimiter)?;
        let b = &buf[start..];
        let get = |o: usize, n: usize| {
            b.get(o..o + n).ok_or(CorrectionError::Truncated {
                len: b.len(),
                need: o + n,
            })
        };
        let hdr = get(0, 16)?;
        let (minor, ch, mirrors, frames, res) = (hdr[3], hdr[4], hdr[5], hdr[6], hdr[15]);
        if minor != 5 {
            return Err(CorrectionError::Version {
                major: hdr[2],
                minor,
            });
        }
        if usize::from(ch) != channels {
            return Err(CorrectionError::ChannelCount {
                found: ch,
                expected: channels,
            });
        }
        if mirrors == 0 || mirrors > 8 || frames > 8 {
            return Err(CorrectionError::Mirrors {
                mirrors,
                fields: frames,
            });
        }
        let (m, c, r) = (usize::from(mirrors), channels, i64::from(res.max(1)));
        let word = |o: usize| -> Result<u32, CorrectionError> {
            let w = get(o, 4)?;
            Ok(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        };
        let mut o = 16;
        let mut starts = Vec::with_capacity(m);
        for k in 0..m {
            starts.push(i64::from(word(o + 4 * k)?) * r);
        }
        o += 4 * m;
        let mut fields = Vec::with_capacity(m);
        for (k, s) in starts.into_iter().enumerate() {
            fields.push((s, i64::from(word(o + 4 * k)?) * r));
        }
        fields.truncate(usize::from(frames).min(m));
        o += 4 * m;
        let ints = |o: usize| -> Result<Vec<i32>, CorrectionError> {
            (0..c)
                .map(|k| Ok((word(o + 4 * k)? as i32).wrapping_mul(res.max(1).into())))
                .collect()
        };
        let azimuth = ints(o)?;
        let elevation = ints(o + 4 * c)?;
        o += 8 * c;
        let bytes = |o: usize| -> Result<Vec<i32>, CorrectionError> {
            Ok(get(o, 180 * c)?
                .iter()
                .map(|&v| i32::from(v as i8) * i32::from(res.max(1)))
                .collect())
        };
        Ok(Self {
            fields,
            azimuth,
            elevation,
            azimuth_adjust: bytes(o)?,
            elevation_adjust: bytes(o + 180 * c)?,
        })
    }

    /// Parses a `.dat` file's contents; `source` names the file in errors.
    ///
    /// # Errors
    /// [`ConfigError::Calibration`] (see [`Self::parse`]).
    pub fn from_bytes(bytes: &[u8], channels: usize, source: &Path) -> Result<Self, ConfigError> {
        Self::parse(bytes, channels).map_err(|e| ConfigError::Calibration {
            path: source.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Interpolated adjustment (0.01°) of channel `ch` at encoder azimuth `a` (0.01°/256).
    fn adjust(table: &[i32], ch: usize, a: u32) -> i32 {
        const STEP: u32 = 200 * 256;
        let i = (a as f32 / STEP as f32).floor() as u32;
        let k = a.saturating_sub(i * STEP) as f32 / STEP as f32;
        let at = |j: u32| table.get(ch * 180 + j as usize).copied().unwrap_or(0) as f32;
        ((1.0 - k) * at(i) + k * at(i + 1)).round() as i32
    }

    /// The field (mirror) whose encoder range holds `a`.
    fn field(&self, a: u32) -> Option<(i64, i64)> {
        let a = i64::from(a);
        self.fields.iter().copied().find(|&(s, e)| {
            if s == e {
                true
            } else if e < s {
                a <= e || s <= a
            } else {
                s <= a && a <= e
            }
        })
    }

    /// Corrected `(azimuth, elevation)` of channel `ch` at encoder azimuth `a`, 0.01°/256;
    /// azimuth in `[0, AT128_UNITS)`. `None` when `a` is in no field.
    pub fn corrected(&self, ch: usize, a: u32) -> Option<(i64, i64)> {
        let (start, _) = self.field(a)?;
        let az = (i64::from(a) - start) * 2 - i64::from(*self.azimuth.get(ch)?)
            + i64::from(Self::adjust(&self.azimuth_adjust, ch, a)) * 256;
        let el = i64::from(*self.elevation.get(ch)?)
            + i64::from(Self::adjust(&self.elevation_adjust, ch, a)) * 256;
        Some((az.rem_euclid(AT128_UNITS), el))
    }
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

/// Firing time of (`block`, `channel`) relative to the packet timestamp, ns (may be negative:
/// several models stamp the packet at its end). `None` where the channel does not fire (OT128
/// high-resolution mode). Formulas from the manuals' timing appendices, as Nebula, except
/// PandarQT128 in multi-return mode: both blocks are the same firing, so both get the block
/// offset 9 µs (Nebula computes `111110·1/2` ns for block 0, which puts a channel's first
/// return 55.6 µs after its second and makes `time_stamp` go backwards).
pub fn firing_offset_ns<T: AsRef<[u8]>>(
    p: &Packet<T>,
    block: usize,
    channel: usize,
) -> Option<i64> {
    use timing::*;
    let n = p.returns() as i64;
    let b = block as i64;
    let ch = channel;
    let at = |t: &[i32]| t.get(ch).map(|&v| i64::from(v));
    let v = match p.layout().model {
        SensorModel::Pandar40p => -28_580 - 55_560 * ((9 - b) / n) + at(&P40_FIRING_NS)?,
        SensorModel::Pandar64 => -42_580 - 55_560 * ((5 - b) / n) + at(&P64_FIRING_NS)?,
        SensorModel::PandarQt64 => 25_710 + (500_000 * (b / n)) / 3 + at(&QT64_FIRING_NS)?,
        SensorModel::PandarXt16 => 5_632 - 50_000 * ((7 - b) / n) + 368 + 3_024 * ch as i64,
        SensorModel::PandarXt32 => 5_632 - 50_000 * ((7 - b) / n) + 368 + 1_512 * ch as i64,
        SensorModel::PandarXt32m => {
            let blk = if n < 3 { (7 - b) / n } else { (5 - b) / 3 };
            5_632 - 50_000 * blk + 368 + 2_888 * (ch % 16) as i64
        }
        SensorModel::PandarQt128 => {
            let loop1 = if n == 1 {
                block.is_multiple_of(2)
            } else {
                p.mode_flag() & 1 == 1
            };
            let t = if loop1 {
                &QT128_LOOP1_NS
            } else {
                &QT128_LOOP2_NS
            };
            9_000 + 111_110 * ((1 - b).max(0) / n) + at(t)?
        }
        SensorModel::Pandar128e4x => {
            let blk = if n == 1 { -27_778 * 2 * (1 - b) } else { 0 };
            let t = if p.operational_state() != 0 {
                &OT128_STATIC_NS
            } else if p.azimuth_state(block) == 0 {
                &OT128_AS0_NS
            } else {
                &OT128_AS1_NS
            };
            let c = at(t)?;
            if c < 0 {
                return None;
            }
            blk + 43_346 + c
        }
        SensorModel::At128 => {
            let blk = if n == 1 {
                -9_249 - 41_666 * (2 - b)
            } else {
                -9_249 - 41_666
            };
            blk + at(&AT128_FIRING_NS)?
        }
        _ => 0,
    };
    Some(v)
}

// ---------------------------------------------------------------------------------------------
// Scan cutter (Nebula ScanCutter semantics, f32 radians)
// ---------------------------------------------------------------------------------------------

const TAU_F32: f32 = std::f32::consts::TAU;
/// [`AZIMUTH_JITTER_CDEG`] in rad.
const JITTER_RAD: f32 = AZIMUTH_JITTER_CDEG as f32 * (std::f32::consts::PI / 18_000.0);

/// Nebula `normalize_angle`: `a - floor(a / m)·m` computed in f64. For `a` in `(-m, 2m)`
/// a single f32 add/subtract gives the same value (exact by Sterbenz's lemma above `m`,
/// correctly rounded below 0), so that is the fast path.
fn normalize(a: f32, m: f32) -> f32 {
    if (0.0..m).contains(&a) {
        a
    } else if a < 0.0 && a > -m {
        a + m
    } else if a >= m && a < 2.0 * m {
        a - m
    } else {
        let (a, m) = (f64::from(a), f64::from(m));
        (a - (a / m).floor() * m) as f32
    }
}

/// Nebula `angle_is_between`: is `a` in the cyclic sector `[s, e]` (bounds optionally
/// exclusive; `s == e` is the full circle).
fn between(s: f32, e: f32, a: f32, s_inc: bool, e_inc: bool) -> bool {
    if s == e && s == a {
        return s_inc || e_inc;
    }
    if s == e {
        return true;
    }
    if (!s_inc && a == s) || (!e_inc && a == e) {
        return false;
    }
    if e < s {
        a <= e || s <= a
    } else {
        s <= a && a <= e
    }
}

/// What a cutter step asks the frame buffers to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Actions {
    /// Set the start time of these buffers from the current block group.
    reset: [bool; 2],
    /// Publish this buffer (before the block group is added).
    emit: Option<u8>,
}

#[derive(Clone, Debug)]
struct CutState {
    current: u8,
    last_az: Vec<f32>,
    buf: Vec<u8>,
    in_fov: Vec<bool>,
    /// `Some(b)`: the first and last channels by azimuth offset (every channel, right after
    /// the first step) are in buffer b; `None`: split.
    buffers_same: Option<u8>,
    fov_same: Option<bool>,
    /// `Some(b)`: every channel is in buffer b.
    uniform: Option<u8>,
}

/// `Some(b)` when every entry of `buf` is `b`.
fn uniform(buf: &[u8]) -> Option<u8> {
    let first = buf.first().copied()?;
    buf.iter().all(|&b| b == first).then_some(first)
}

#[derive(Clone, Debug)]
struct Cutter {
    cut: f32,
    fov: (f32, f32),
    min_idx: usize,
    max_idx: usize,
    state: Option<CutState>,
    /// The state of the previous stream (after a timeout, gap or restart), for its vectors.
    spare: Option<CutState>,
}

impl Cutter {
    fn in_fov(&self, a: f32) -> bool {
        self.fov.0 == self.fov.1 || between(self.fov.0, self.fov.1, a, true, true)
    }

    fn after_cut(&self, a: f32) -> bool {
        let end = normalize(self.cut + TAU_F32 / 2.0, TAU_F32);
        between(self.cut, end, a, false, true)
    }

    fn step(&mut self, az: &[f32]) -> Actions {
        let mut act = Actions::default();
        let (lo, hi) = (self.min_idx, self.max_idx);
        let Some(st) = self.state.as_mut() else {
            // First block group: which channels already lie past the cut? (The vectors of the
            // previous state are reused: a restart allocates nothing.)
            let mut spare = self.spare.take();
            let mut in_fov = spare
                .as_mut()
                .map(|s| std::mem::take(&mut s.in_fov))
                .unwrap_or_default();
            in_fov.clear();
            in_fov.extend(az.iter().map(|&a| self.in_fov(a)));
            let region = (
                normalize(self.cut - TAU_F32 / 4.0, TAU_F32),
                normalize(self.cut + TAU_F32 / 4.0, TAU_F32),
            );
            let mm = [az[lo], az[hi]];
            let near_cut = mm
                .iter()
                .all(|&a| between(region.0, region.1, a, true, true));
            let n_after = mm.iter().filter(|&&a| self.after_cut(a)).count();
            let straddles = near_cut && n_after == 1;
            let mut buf = spare
                .as_mut()
                .map(|s| std::mem::take(&mut s.buf))
                .unwrap_or_default();
            buf.clear();
            if straddles {
                buf.extend(az.iter().map(|&a| u8::from(self.after_cut(a))));
            } else {
                buf.resize(az.len(), 0);
            }
            let mut last_az = spare.map(|s| s.last_az).unwrap_or_default();
            last_az.clear();
            last_az.extend_from_slice(az);
            for (b, f) in buf.iter().zip(&in_fov) {
                if *f {
                    act.reset[usize::from(*b)] = true;
                }
            }
            let first = buf.first().copied().unwrap_or(0);
            let f0 = in_fov.first().copied().unwrap_or(true);
            self.state = Some(CutState {
                current: 0,
                last_az,
                buffers_same: buf.iter().all(|&b| b == first).then_some(first),
                fov_same: in_fov.iter().all(|&f| f == f0).then_some(f0),
                uniform: uniform(&buf),
                buf,
                in_fov,
            });
            return act;
        };
        let before = st.buffers_same;
        for (ch, &a) in az.iter().enumerate() {
            st.in_fov[ch] =
                self.fov.0 == self.fov.1 || between(self.fov.0, self.fov.1, a, true, true);
            let last = st.last_az[ch];
            // A step back of at most AZIMUTH_JITTER_CDEG is encoder jitter, not a turn (Nebula
            // would take it for one): the furthest azimuth reached stays the reference.
            let back = normalize(last - a, TAU_F32);
            if back > 0.0 && back <= JITTER_RAD {
                continue;
            }
            if last != a && between(last, a, self.cut, true, false) {
                st.buf[ch] ^= 1;
            }
            st.last_az[ch] = a;
        }
        st.buffers_same = (st.buf[lo] == st.buf[hi]).then_some(st.buf[lo]);
        st.uniform = uniform(&st.buf);
        st.fov_same = (st.in_fov[lo] == st.in_fov[hi]).then_some(st.in_fov[lo]);
        // Nebula FsmCutInFov: F0, C0_1, F1, C1_0.
        #[derive(PartialEq, Clone, Copy)]
        enum S {
            F(u8),
            C(u8),
        }
        let s = |b: Option<u8>| b.map_or(S::C(st.current), S::F);
        match (s(before), s(st.buffers_same)) {
            (x, y) if x == y => {}
            (S::F(f), S::C(c)) if c == f => act.reset[usize::from(f ^ 1)] = true,
            (S::F(f), S::F(g)) if g != f => {
                act.reset[usize::from(g)] = true;
                act.emit = Some(f);
            }
            (S::C(c), S::F(g)) if g != c => act.emit = Some(c),
            _ => {}
        }
        if act.emit.is_some() {
            st.current ^= 1;
        }
        act
    }

    fn block_in_fov(&self) -> bool {
        self.state
            .as_ref()
            .is_none_or(|s| s.fov_same.unwrap_or(true))
    }
}

// ---------------------------------------------------------------------------------------------
// Stream
// ---------------------------------------------------------------------------------------------

/// The azimuths (rad, `az[ch]`) of the channels the cutter has in frame buffer `x`
/// (`buf[ch] == x`), each as 0.01° past the cut `cut_cdeg` (0..36000).
fn phased_in_buffer<'a>(
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
/// frame's first one count.
fn head_missing(head_phased: Option<u32>, step_cdeg: u32, fov: Option<Fov>, cut_cdeg: u32) -> u32 {
    match head_phased {
        Some(ph) if step_cdeg > 0 => arc_in_view(fov, cut_cdeg, ph) / step_cdeg,
        _ => 0,
    }
}

#[derive(Clone, Debug, Default)]
struct Buffer {
    points: PointBuf,
    start_ns: i64,
    /// Host wall time (CLOCK_REALTIME ns) of the frame's first packet: the header's `host_ns`.
    host_ns: u64,
    received: u32,
    lost: u32,
    malformed: u32,
    /// Serial of the last packet counted in `received`.
    last_packet: u64,
    /// `start_ns` is set (by the cutter's reset, or by the first block group that adds to
    /// this buffer when the reset fell outside the field of view).
    started: bool,
    /// A packet of this frame was stamped with host time (invalid date, no valid time in the
    /// stream before it).
    host_clock: bool,
    /// The frame opened at start-up (or after a timeout or restart), not at the cut: the
    /// phased azimuth (0.01° past the cut) of its first packet, from which the packets missing
    /// between the cut and it are estimated when it is published.
    head_phased: Option<u32>,
}

/// Per-model constants derived from the calibration.
#[derive(Debug, Clone)]
struct Angles {
    el_rad: Vec<f32>,
    cos_el: Vec<f32>,
    sin_el: Vec<f32>,
    off_rad: Vec<f32>,
    /// `(sin, cos)` of each channel's azimuth offset, f64.
    off_sc: Vec<(f64, f64)>,
    /// The same, as two arrays.
    off_sin: Vec<f64>,
    off_cos: Vec<f64>,
    /// `(sin, cos)` of every block azimuth (0.01°), f64.
    blk_sc: Box<[(f64, f64)]>,
    /// Block azimuth in rad as Nebula stores it (f64 → f32).
    blk_rad: Box<[f32]>,
    /// Smallest and largest channel azimuth offset, 0.01° (rounded outwards).
    off_cdeg: (f64, f64),
}

/// A cached firing-offset table: `(key, offsets, group_earliest)` (see [`HesaiStream`]).
type OffsetsEntry = ((usize, u8, u8, u8, u8), Vec<i64>, Vec<i64>);

/// A Hesai sensor's decoder, per-channel scan cutter and frame buffers: the Hesai
/// [`VendorDecoder`]. See the module documentation for the rules.
#[derive(Clone, Debug)]
pub struct HesaiStream {
    layout: &'static Layout,
    check_crc: bool,
    range: (f32, f32),
    /// Sequence, time base, timeout, buffers, the frame header.
    builder: FrameBuilder,
    angles: Angles,
    cutter: Cutter,
    bufs: [Buffer; 2],
    packet_serial: u64,
    last_seq: Option<u32>,
    /// The packet being decoded arrived late ([`TimeVerdict::Late`]): the cutter is not
    /// stepped, the UDP sequence not advanced.
    late: bool,
    return_mode: Option<ReturnMode>,
    az_scratch: Vec<f32>,
    dual_threshold_m: f32,
    /// AT128 correction file (models with a fine azimuth), else `None`.
    at128: Option<At128Correction>,
    /// AT128 per-channel angles of the current block group: `[sin az, cos az, el rad, sin el,
    /// cos el]`.
    at128_trig: Vec<[f32; 5]>,
    /// Firing offsets (ns, `i64::MIN` = no firing) of every `(block, channel)` for the packet
    /// properties in `offsets_key` (return count, QT128 mode flag, OT128 states): they change
    /// rarely, so they are computed once per change, not per point.
    offsets: Vec<i64>,
    offsets_key: Option<(usize, u8, u8, u8, u8)>,
    /// `(key, offsets, group_earliest)` of up to four other keys seen recently.
    offsets_cache: Vec<OffsetsEntry>,
    /// Cut angle, 0.01°, for the lost-turn estimate.
    cut_cdeg: u32,
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
    pending_head_lost: u32,
    /// Block groups may take the fast path (not AT128, no field of view): no per-channel
    /// cutter step when no channel can reach the cut, and the specialised conversion loops.
    fast: bool,
    /// The cut angle (f32 rad, as the cutter holds it) in 0.01°.
    cut_cdeg_f: f64,
    /// Raw block azimuth (0.01°) of the block group the cutter last stepped (not AT128).
    last_raw: u16,
    /// `cutter.state.last_az` is out of date: its values are those of `last_raw` (the fast
    /// path skipped writing them); [`Self::sync_last_az`] writes them when needed.
    last_az_stale: bool,
    /// `az_scratch` holds the corrected azimuths of this raw block azimuth (not AT128).
    scratch_raw: Option<u16>,
    /// Earliest firing offset (ns) of each block group (index: first block), for the
    /// `offsets_key` in force; 0 when no channel fires.
    group_earliest: Vec<i64>,
    /// Integer range window for distance unit `.0` (mm): a raw distance `r` is kept when
    /// `r − .1 < .2` (u32 wrapping), exactly the points whose f32 distance passes `range`.
    window: (u8, u32, u32),
    /// Return types (as u8) for return-mode byte `.0`: single return, then dual return k = 0
    /// (not strongest, strongest), k = 1 (not strongest, strongest).
    rt_cache: (u8, [u8; 5]),
    /// The fast conversion's stage-1 arrays.
    fast_scratch: Box<fast::Scratch>,
}

impl HesaiStream {
    /// Builds the stream for `cfg.model` with `calibration`, the contents of the
    /// angle-correction CSV (AT128: `.dat`) `cfg.calibration` names.
    ///
    /// # Errors
    /// As [`build`].
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
        let cut = to_rad(cfg.cut_angle_deg);
        let fov = match opts.fov_deg {
            Some((a, b)) => (to_rad(a), to_rad(b)),
            None => (0.0, 0.0),
        };
        if fov.0 != fov.1 && (!between(fov.0, fov.1, cut, true, true) || cut == fov.0) {
            return Err(ConfigError::OutOfRange {
                field: "cut_angle_deg".into(),
                value: cfg.cut_angle_deg.to_string(),
                valid: "inside the field of view (fov_deg), not equal to its start".into(),
            });
        }
        // The model's own limits (Nebula `SensorT::min_range/max_range`), inclusive.
        let (lo, hi) = layout.model.datasheet_range_m();
        Ok(Self {
            layout,
            check_crc: !opts.hesai_skip_crc,
            range: (lo.max(cfg.min_range_m), hi.min(cfg.max_range_m)),
            builder: FrameBuilder::new(cfg.sensor_id, cfg.frame_timeout_ns),
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
            last_seq: None,
            late: false,
            return_mode: None,
            az_scratch: Vec::with_capacity(layout.channels),
            dual_threshold_m: DUAL_RETURN_DISTANCE_THRESHOLD_M,
            at128,
            at128_trig: vec![[0.0; 5]; layout.channels],
            offsets: vec![0; layout.blocks * layout.channels],
            offsets_key: None,
            offsets_cache: Vec::new(),
            cut_cdeg: ((cfg.cut_angle_deg.rem_euclid(360.0) * 100.0).round() as u32)
                % AZIMUTH_UNITS,
            last_phased: None,
            fov: Fov::from_deg(opts.fov_deg),
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

    fn emit(&mut self, b: u8, out: &mut Vec<Frame>) {
        let buf = std::mem::take(&mut self.bufs[usize::from(b)]);
        if buf.received == 0 && buf.points.is_empty() {
            return;
        }
        let cap = buf.points.len() + buf.points.len() / 8;
        self.bufs[usize::from(b)].points = self.builder.take_points(cap);
        let account = FrameAccount {
            start_ns: buf.start_ns.max(0) as u64,
            host_ns: buf.host_ns,
            received: buf.received,
            lost: buf.lost,
            malformed: buf.malformed,
            lost_before: 0,
            host_clock: buf.host_clock,
        };
        let step = self.builder.clock().step_cdeg();
        let head = head_missing(buf.head_phased, step, self.fov, self.cut_cdeg);
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
            && self.at128.is_none()
            && let Some(st) = &self.cutter.state
        {
            let cut = self.cut_cdeg;
            for (x, buf) in self.bufs.iter_mut().enumerate() {
                let behind = phased_in_buffer(&st.last_az, &st.buf, x, cut).min();
                if let (Some(ph), false) = (behind, buf.points.is_empty()) {
                    let to_cut =
                        arc_in_view(self.fov, (cut + ph) % AZIMUTH_UNITS, AZIMUTH_UNITS - ph);
                    let tail = to_cut.div_ceil(step).saturating_sub(1);
                    buf.lost = buf.lost.saturating_add(tail);
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
        self.last_seq = None;
    }

    fn decode(
        &mut self,
        p: &Packet<&[u8]>,
        host_ns: u64,
        time_ns: u64,
        host_clock: bool,
        out: &mut Vec<Frame>,
    ) {
        let l = self.layout;
        let n = p.returns();
        let packet_ns = i64::try_from(time_ns).unwrap_or(i64::MAX);
        self.packet_serial += 1;
        // After a gap the head of the next frame is already estimated (pending_head_lost);
        // otherwise a frame the cutter opens at its (re)start is estimated from its first
        // packet's azimuth.
        let late = self.late;
        let head_known = self.pending_head_lost > 0 || late;
        let mut lost = if late {
            0
        } else {
            std::mem::take(&mut self.pending_head_lost)
        };
        if let Some(seq) = p.udp_sequence().filter(|_| !late) {
            if let Some(prev) = self.last_seq {
                let gap = seq.wrapping_sub(prev.wrapping_add(1));
                if gap <= 65_535 {
                    lost = lost.saturating_add(gap);
                }
            }
            self.last_seq = Some(seq);
        }
        let rm_byte = p.return_mode_byte();
        let key = (
            n,
            p.mode_flag() & 1,
            p.operational_state(),
            p.azimuth_state(0),
            p.azimuth_state(1),
        );
        if self.offsets_key != Some(key) {
            // QT128 alternates its firing loop packet by packet: keep the tables of the last
            // few keys instead of recomputing them.
            if let Some(old) = self.offsets_key.replace(key) {
                let e = (
                    old,
                    std::mem::take(&mut self.offsets),
                    std::mem::take(&mut self.group_earliest),
                );
                if self.offsets_cache.len() >= 4 {
                    self.offsets_cache.remove(0);
                }
                self.offsets_cache.push(e);
            }
            if let Some(i) = self.offsets_cache.iter().position(|e| e.0 == key) {
                let (_, o, g) = self.offsets_cache.remove(i);
                self.offsets = o;
                self.group_earliest = g;
            } else {
                self.fill_offsets(p);
            }
        }
        let unit = p.dis_unit_mm();
        if self.window.0 != unit {
            let (lo, span) = raw_window(unit, self.range);
            self.window = (unit, lo, span);
        }
        if self.rt_cache.0 != rm_byte {
            self.rt_cache = (rm_byte, return_types(self.layout.model, rm_byte));
        }
        for group in (0..l.blocks).step_by(n) {
            let raw_az = p.azimuth(group);
            let opening = self.cutter.state.is_none();
            let act = if late {
                // A late packet joins the buffers as they are: no cutter step.
                if self.at128.is_some() && !self.at128_angles(p.azimuth_fine(group)) {
                    continue;
                }
                Actions::default()
            } else if self.can_skip_step(n, raw_az) {
                // No channel can cross the cut: the step would change nothing but `last_az`.
                self.last_raw = raw_az;
                self.last_az_stale = true;
                Actions::default()
            } else {
                if self.at128.is_some() {
                    if !self.at128_angles(p.azimuth_fine(group)) {
                        continue;
                    }
                } else {
                    self.fill_az(raw_az);
                    self.sync_last_az();
                    self.last_raw = raw_az;
                }
                self.cutter.step(&self.az_scratch)
            };
            if opening && !head_known && self.at128.is_none() {
                // Both frames the cutter opens began before this packet, not at a cut seen:
                // buffer 0 (the channels not yet past the cut) mid-turn, buffer 1 (the channels
                // just past it, when the packet straddles the cut) a little earlier. Each
                // misses the packets since its channel furthest past the cut crossed it.
                let cut = self.cut_cdeg;
                if let Some(st) = self.cutter.state.as_ref() {
                    for (x, buf) in self.bufs.iter_mut().enumerate() {
                        buf.head_phased = phased_in_buffer(&self.az_scratch, &st.buf, x, cut).max();
                    }
                }
            }
            let earliest = self.group_earliest.get(group).copied().unwrap_or(0);
            let group_start = packet_ns.saturating_add(earliest);
            if act.reset.iter().any(|&r| r) {
                for (i, r) in act.reset.iter().enumerate() {
                    if *r {
                        self.bufs[i].start_ns = group_start;
                        self.bufs[i].points.set_start_ns(group_start.max(0) as u64);
                        self.bufs[i].host_ns = host_ns;
                        self.bufs[i].started = true;
                    }
                }
            }
            if let Some(e) = act.emit {
                self.emit(e, out);
            }
            let Some(st) = self.cutter.state.as_ref() else {
                continue;
            };
            for b in [st.buf[self.cutter.min_idx], st.buf[self.cutter.max_idx]] {
                let buf = &mut self.bufs[usize::from(b)];
                if !buf.started {
                    // The cutter's reset fell outside the field of view (or before start-up):
                    // the frame starts at its first block group.
                    buf.started = true;
                    buf.start_ns = group_start;
                    buf.points.set_start_ns(group_start.max(0) as u64);
                    buf.host_ns = host_ns;
                }
                buf.host_clock |= host_clock;
                // Under a field of view only packets with a block group inside it count.
                if buf.last_packet != self.packet_serial && self.cutter.block_in_fov() {
                    buf.last_packet = self.packet_serial;
                    buf.received = buf.received.saturating_add(1);
                    buf.lost = buf.lost.saturating_add(std::mem::take(&mut lost));
                    if late {
                        // Its gap was counted lost when the next packet arrived.
                        buf.lost = buf.lost.saturating_sub(1);
                    }
                }
            }
            if !self.cutter.block_in_fov() {
                continue;
            }
            for b in &mut self.bufs {
                b.points.set_packet_ns(packet_ns.max(0) as u64);
            }
            if !self.convert_fast(p, group, n, packet_ns) {
                if self.at128.is_none() && self.scratch_raw != Some(raw_az) {
                    self.fill_az(raw_az);
                }
                self.convert_group(p, group, n, rm_byte, packet_ns);
            }
        }
    }

    /// Computes `offsets` and `group_earliest` for packet `p`'s key.
    fn fill_offsets(&mut self, p: &Packet<&[u8]>) {
        let l = self.layout;
        let n = p.returns();
        self.offsets.clear();
        for b in 0..l.blocks {
            for c in 0..l.channels {
                self.offsets
                    .push(firing_offset_ns(p, b, c).unwrap_or(i64::MIN));
            }
        }
        self.group_earliest.clear();
        self.group_earliest.resize(l.blocks, 0);
        for group in (0..l.blocks).step_by(n) {
            self.group_earliest[group] = (group..group + n)
                .flat_map(|b| self.offsets.iter().skip(b * l.channels).take(l.channels))
                .copied()
                .filter(|&o| o != i64::MIN)
                .min()
                .unwrap_or(0);
        }
    }

    /// Corrected azimuth of every channel (`az_scratch`) for raw block azimuth `raw` (0.01°).
    fn fill_az(&mut self, raw: u16) {
        let blk = self
            .angles
            .blk_rad
            .get(usize::from(raw))
            .copied()
            .unwrap_or(0.0);
        self.az_scratch.clear();
        self.az_scratch.extend(
            self.angles
                .off_rad
                .iter()
                .map(|&o| normalize(blk + o, TAU_F32)),
        );
        self.scratch_raw = Some(raw);
    }

    /// Writes the cutter's `last_az` when the fast path left it out of date.
    fn sync_last_az(&mut self) {
        if !std::mem::take(&mut self.last_az_stale) {
            return;
        }
        let Some(st) = self.cutter.state.as_mut() else {
            return;
        };
        let blk = self
            .angles
            .blk_rad
            .get(usize::from(self.last_raw))
            .copied()
            .unwrap_or(0.0);
        for (l, &o) in st.last_az.iter_mut().zip(&self.angles.off_rad) {
            *l = normalize(blk + o, TAU_F32);
        }
    }

    /// The cutter's step for the block group at raw azimuth `raw` may be skipped: fast path,
    /// every channel in one frame buffer, and no channel's corrected azimuth can pass the cut
    /// since the last step. Every channel moved forward by the block advance `d` (≤ 10°), so
    /// its azimuths lie in `[last + off_min − 1, raw + off_max + 1]` (0.01°, cyclic; the 0.01°
    /// margin is far above the f32 rounding of the corrected azimuths), which must not hold
    /// the cut. With no field of view every channel stays in it.
    fn can_skip_step(&self, n: usize, raw: u16) -> bool {
        if !self.fast || n > 2 {
            return false;
        }
        let Some(st) = self.cutter.state.as_ref() else {
            return false;
        };
        if st.uniform.is_none() {
            return false;
        }
        let d = (u32::from(raw) + AZIMUTH_UNITS - u32::from(self.last_raw)) % AZIMUTH_UNITS;
        if d > 1_000 {
            return false;
        }
        let (omin, omax) = self.angles.off_cdeg;
        let start = f64::from(self.last_raw) + omin - 1.0;
        let width = f64::from(d) + (omax - omin) + 2.0;
        let rel = (self.cut_cdeg_f - start).rem_euclid(f64::from(AZIMUTH_UNITS));
        width < f64::from(AZIMUTH_UNITS) / 2.0 && rel > width
    }

    /// The fast conversion of a block group (single or dual return, every channel in one frame
    /// buffer, no field of view, not AT128, times within ±2^62 ns): the same points as
    /// [`Self::convert_group`], bit for bit and in the same order. False when it does not
    /// apply (nothing done).
    fn convert_fast(&mut self, p: &Packet<&[u8]>, group: usize, n: usize, packet_ns: i64) -> bool {
        const SAFE: i64 = 1 << 62;
        if !self.fast || n > 2 || self.layout.channels > fast::MAX_CHANNELS {
            return false;
        }
        let Some(b) = self.cutter.state.as_ref().and_then(|s| s.uniform) else {
            return false;
        };
        let start = self.bufs[usize::from(b)].start_ns;
        if !(0..SAFE).contains(&packet_ns) || !(-SAFE..SAFE).contains(&start) {
            return false;
        }
        let l = self.layout;
        let c = l.channels;
        let bytes = p.as_bytes();
        let o0 = l.unit_offset(group, 0);
        let o1 = l.unit_offset(group + n - 1, 0);
        let (Some(b0), Some(b1)) = (
            bytes.get(o0..o0 + c * l.unit_len),
            bytes.get(o1..o1 + c * l.unit_len),
        ) else {
            return false;
        };
        let raw_az = p.azimuth(group);
        let a = &self.angles;
        let (bs, bc) = a
            .blk_sc
            .get(usize::from(raw_az))
            .copied()
            .unwrap_or((0.0, 1.0));
        let g = Group {
            unit: f64::from(p.dis_unit_mm()) / 1000.0,
            window: (self.window.1, self.window.2),
            blk: a.blk_rad.get(usize::from(raw_az)).copied().unwrap_or(0.0),
            bs,
            bc,
            base_ns: packet_ns - start,
            threshold: self.dual_threshold_m,
            rt: self.rt_cache.1,
        };
        let tables = Tables {
            off_rad: &a.off_rad[..c],
            off_sin: &a.off_sin[..c],
            off_cos: &a.off_cos[..c],
            el_rad: &a.el_rad[..c],
            sin_el: &a.sin_el[..c],
            cos_el: &a.cos_el[..c],
            off0: &self.offsets[group * c..(group + 1) * c],
            off1: &self.offsets[(group + n - 1) * c..(group + n) * c],
        };
        let points = &mut self.bufs[usize::from(b)].points;
        let scratch = &mut self.fast_scratch;
        match (n, l.unit_len) {
            (1, 3) => fast::single::<3>(&g, &tables, b0, points, scratch),
            (1, _) => fast::single::<4>(&g, &tables, b0, points, scratch),
            (_, 3) => fast::dual::<3>(&g, &tables, b0, b1, points, scratch),
            _ => fast::dual::<4>(&g, &tables, b0, b1, points, scratch),
        }
        true
    }

    /// Fills `az_scratch`, `at128_trig` and the cutter's min/max channels for AT128 encoder
    /// azimuth `a`; false if `a` lies in no field of the correction file.
    fn at128_angles(&mut self, a: u32) -> bool {
        let Some(c) = self.at128.as_ref() else {
            return false;
        };
        let n = AT128_UNITS as f32;
        let pi = std::f32::consts::PI;
        self.scratch_raw = None;
        self.az_scratch.clear();
        for (ch, trig) in self.at128_trig.iter_mut().enumerate() {
            let Some((az, el)) = c.corrected(ch, a) else {
                return false;
            };
            self.az_scratch
                .push((az as f64 / 25_600.0 * (PI / 180.0)) as f32);
            let el_n = el.rem_euclid(AT128_UNITS) as f32;
            let az_f = 2.0 * az as f32 * pi / n;
            let el_f = 2.0 * el_n * pi / n;
            *trig = [
                az_f.sin(),
                az_f.cos(),
                (2.0 * el as f64 * PI / AT128_UNITS as f64) as f32,
                el_f.sin(),
                el_f.cos(),
            ];
        }
        self.cutter.min_idx = argmin(&self.az_scratch, |x, y| x < y);
        self.cutter.max_idx = argmin(&self.az_scratch, |x, y| x > y);
        true
    }

    fn convert_group(
        &mut self,
        p: &Packet<&[u8]>,
        group: usize,
        n: usize,
        rm_byte: u8,
        packet_ns: i64,
    ) {
        let Some(st) = self.cutter.state.as_ref() else {
            return;
        };
        let unit = f64::from(p.dis_unit_mm()) / 1000.0;
        let raw_az = usize::from(p.azimuth(group));
        let (bs, bc) = self
            .angles
            .blk_sc
            .get(raw_az)
            .copied()
            .unwrap_or((0.0, 1.0));
        let model = self.layout.model;
        let (lo, hi) = self.range;
        for ch in 0..self.layout.channels {
            let mut units = [(0u16, 0u8); 3];
            for (k, u) in units.iter_mut().enumerate().take(n) {
                *u = (p.distance_raw(group + k, ch), p.reflectivity(group + k, ch));
            }
            let units = &units[..n];
            if !st.in_fov[ch] {
                continue;
            }
            for k in 0..n {
                let (raw, refl) = units[k];
                let distance = (f64::from(raw) * unit) as f32;
                if raw == 0 || distance < lo || distance > hi {
                    continue;
                }
                let rt = return_type(model, rm_byte, k, units);
                if k != n - 1 {
                    if rt == ReturnType::Identical {
                        continue;
                    }
                    let close = units.iter().enumerate().any(|(j, &(r, _))| {
                        j != k
                            && ((f64::from(r) * unit) as f32 - distance).abs()
                                < self.dual_threshold_m
                    });
                    if close {
                        continue;
                    }
                }
                let offset = self
                    .offsets
                    .get((group + k) * self.layout.channels + ch)
                    .copied()
                    .unwrap_or(i64::MIN);
                if offset == i64::MIN {
                    continue;
                }
                let a = &self.angles;
                let (sin_az, cos_az, el_rad, sin_el, cos_el) = if self.at128.is_some() {
                    let [sa, ca, e, se, ce] = self.at128_trig[ch];
                    (sa, ca, e, se, ce)
                } else {
                    let (os, oc) = a.off_sc[ch];
                    (
                        (bs * oc + bc * os) as f32,
                        (bc * oc - bs * os) as f32,
                        a.el_rad[ch],
                        a.sin_el[ch],
                        a.cos_el[ch],
                    )
                };
                let xy = distance * cos_el;
                let b = usize::from(st.buf[ch]);
                let buf = &mut self.bufs[b];
                let t = packet_ns
                    .saturating_add(offset)
                    .saturating_sub(buf.start_ns);
                buf.points.push(PointXYZIRCAEDT {
                    x: xy * sin_az,
                    y: xy * cos_az,
                    z: distance * sin_el,
                    intensity: refl,
                    return_type: rt as u8,
                    channel: ch as u16,
                    azimuth: self.az_scratch[ch],
                    elevation: el_rad,
                    distance,
                    time_stamp: t.clamp(0, i64::from(u32::MAX)) as u32,
                });
            }
        }
    }
}

/// The integer form of the range filter for distance unit `unit_mm`: `(lo, span)` such that a
/// raw distance `r` passes (`r ≠ 0` and `range.0 ≤ (r·unit as f32) ≤ range.1`, the f32
/// comparisons of [`HesaiStream::convert_group`]) exactly when `r.wrapping_sub(lo) < span`.
/// The f32 distance never decreases with `r`, so both bounds are found by bisection.
fn raw_window(unit_mm: u8, range: (f32, f32)) -> (u32, u32) {
    let unit = f64::from(unit_mm) / 1000.0;
    let d = |r: u32| (f64::from(r) * unit) as f32;
    // First r in [lo, hi) for which `pred` holds (hi if none); `pred` false then true.
    let first = |mut lo: u32, mut hi: u32, pred: &dyn Fn(u32) -> bool| {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    let lo = first(1, 65_536, &|r| {
        d(r).partial_cmp(&range.0) != Some(std::cmp::Ordering::Less)
    });
    let end = first(lo, 65_536, &|r| d(r) > range.1);
    (lo, end - lo)
}

/// Return types (u8) under return-mode byte `mode` (see [`HesaiStream::rt_cache`]), from
/// [`return_type`] on representative returns: single; dual k = 0 with the other return
/// stronger / not; dual k = 1 likewise. (An identical pair is [`ReturnType::Identical`].)
fn return_types(model: SensorModel, mode: u8) -> [u8; 5] {
    let rt = |k: usize, u: &[(u16, u8)]| return_type(model, mode, k, u) as u8;
    [
        rt(0, &[(1, 1)]),
        rt(0, &[(1, 4), (2, 5)]),
        rt(0, &[(1, 5), (2, 4)]),
        rt(1, &[(1, 5), (2, 4)]),
        rt(1, &[(1, 4), (2, 5)]),
    ]
}

/// Per-block-group constants of the fast conversion.
struct Group {
    /// Distance unit, m.
    unit: f64,
    /// Raw range window `(lo, span)` ([`raw_window`]).
    window: (u32, u32),
    /// Block azimuth, f32 rad.
    blk: f32,
    /// sin / cos of the block azimuth.
    bs: f64,
    bc: f64,
    /// Packet time minus the frame's start time, ns.
    base_ns: i64,
    /// Dual-return distance threshold, m.
    threshold: f32,
    /// [`return_types`].
    rt: [u8; 5],
}

/// Per-channel tables of the fast conversion (each `channels` long; `off0`/`off1`: firing
/// offsets of the group's first / last block, ns, `i64::MIN` = no firing).
struct Tables<'a> {
    off_rad: &'a [f32],
    off_sin: &'a [f64],
    off_cos: &'a [f64],
    el_rad: &'a [f32],
    sin_el: &'a [f32],
    cos_el: &'a [f32],
    off0: &'a [i64],
    off1: &'a [i64],
}

/// The fast conversion loops: per channel every candidate point is computed and written to
/// the frame's spare capacity, the write position advancing only for kept points (no branch
/// on the data). Same arithmetic as [`HesaiStream::convert_group`], so the same bits.
mod fast {
    use super::{Group, PointBuf, PointXYZIRCAEDT, ReturnType, TAU_F32, Tables};
    use crate::layout::Layout;
    use crate::simd::{Compactor, FillPoints};

    /// `normalize(blk + off)` for `blk` in [0, 2π) and `off` in [−π, π] (always its single
    /// add / subtract case).
    #[inline(always)]
    fn azimuth(blk: f32, off: f32) -> f32 {
        let a = blk + off;
        let a = if a < 0.0 { a + TAU_F32 } else { a };
        if a >= TAU_F32 { a - TAU_F32 } else { a }
    }

    #[inline(always)]
    fn time(base: i64, off: i64) -> u32 {
        base.wrapping_add(off).clamp(0, i64::from(u32::MAX)) as u32
    }

    #[inline(always)]
    fn unit<const UL: usize>(block: &[u8], ch: usize) -> (u16, u8) {
        let u = &block[ch * UL..ch * UL + 3];
        (u16::from_le_bytes([u[0], u[1]]), u[2])
    }

    /// Channels per block the fast path handles (the largest model has 128).
    pub(super) const MAX_CHANNELS: usize = 128;

    /// One block's candidate points, structure of arrays (stage 1).
    #[derive(Clone)]
    struct Soa {
        d: [f32; MAX_CHANNELS],
        x: [f32; MAX_CHANNELS],
        y: [f32; MAX_CHANNELS],
        z: [f32; MAX_CHANNELS],
        r: [u16; MAX_CHANNELS],
        f: [u8; MAX_CHANNELS],
    }

    impl Soa {
        /// Channel `ch`'s candidate point, with the fields that are not the block's own.
        #[inline(always)]
        fn point(
            &self,
            ch: usize,
            return_type: u8,
            azimuth: f32,
            elevation: f32,
            time_stamp: u32,
        ) -> PointXYZIRCAEDT {
            PointXYZIRCAEDT {
                x: self.x[ch],
                y: self.y[ch],
                z: self.z[ch],
                intensity: self.f[ch],
                return_type,
                channel: ch as u16,
                azimuth,
                elevation,
                distance: self.d[ch],
                time_stamp,
            }
        }

        /// Gathers block `blk`'s units and computes distance and x/y/z (array loops the
        /// compiler vectorises).
        #[inline(always)]
        fn fill<const UL: usize>(&mut self, g: &Group, t: &Tables, ab: &Azimuths, blk: &[u8]) {
            let c = t.off_rad.len();
            for (ch, (r, f)) in self.r[..c].iter_mut().zip(&mut self.f[..c]).enumerate() {
                (*r, *f) = unit::<UL>(blk, ch);
            }
            for (d, &r) in self.d[..c].iter_mut().zip(&self.r[..c]) {
                *d = (f64::from(r) * g.unit) as f32;
            }
            for ch in 0..c {
                let d = self.d[ch];
                let xy = d * t.cos_el[ch];
                self.x[ch] = xy * ab.sin[ch];
                self.y[ch] = xy * ab.cos[ch];
                self.z[ch] = d * t.sin_el[ch];
            }
        }
    }

    /// The corrected azimuth of every channel of the group and its sin / cos (stage 1).
    #[derive(Clone)]
    struct Azimuths {
        az: [f32; MAX_CHANNELS],
        sin: [f32; MAX_CHANNELS],
        cos: [f32; MAX_CHANNELS],
    }

    impl Azimuths {
        /// Fills the first `channels` entries for group `g`.
        #[inline(always)]
        fn fill(&mut self, g: &Group, t: &Tables) {
            let c = t.off_rad.len();
            for ch in 0..c {
                let (os, oc) = (t.off_sin[ch], t.off_cos[ch]);
                self.sin[ch] = (g.bs * oc + g.bc * os) as f32;
                self.cos[ch] = (g.bc * oc - g.bs * os) as f32;
                self.az[ch] = azimuth(g.blk, t.off_rad[ch]);
            }
        }
    }

    /// The stage-1 arrays of one block group, kept by the stream (about 6.4 KB) so that they
    /// are not zeroed again for every group: each loop writes the first `channels` entries
    /// before it reads them.
    #[derive(Clone)]
    pub(super) struct Scratch {
        az: Azimuths,
        s0: Soa,
        s1: Soa,
    }

    impl Scratch {
        pub(super) fn boxed() -> Box<Self> {
            let soa = Soa {
                d: [0.0; MAX_CHANNELS],
                x: [0.0; MAX_CHANNELS],
                y: [0.0; MAX_CHANNELS],
                z: [0.0; MAX_CHANNELS],
                r: [0; MAX_CHANNELS],
                f: [0; MAX_CHANNELS],
            };
            Box::new(Self {
                az: Azimuths {
                    az: [0.0; MAX_CHANNELS],
                    sin: [0.0; MAX_CHANNELS],
                    cos: [0.0; MAX_CHANNELS],
                },
                s0: soa.clone(),
                s1: soa,
            })
        }
    }

    impl std::fmt::Debug for Scratch {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Scratch")
        }
    }

    /// Single return: block `b0`'s units of the group.
    pub(super) fn single<const UL: usize>(
        g: &Group,
        t: &Tables,
        b0: &[u8],
        points: &mut PointBuf,
        scratch: &mut Scratch,
    ) {
        let c = t.off_rad.len().min(MAX_CHANNELS);
        let Scratch { az: ab, s0: s, .. } = scratch;
        ab.fill(g, t);
        s.fill::<UL>(g, t, ab, b0);
        points.extend_compacted_with(c, Single { g, t, ab, s, c });
    }

    /// The channels of a single-return block as a [`FillPoints`] writer (any layout).
    struct Single<'a> {
        g: &'a Group,
        t: &'a Tables<'a>,
        ab: &'a Azimuths,
        s: &'a Soa,
        c: usize,
    }

    impl FillPoints for Single<'_> {
        #[inline(always)]
        fn fill<L: Layout>(self, out: &mut Compactor<'_, L>) {
            let Single { g, t, ab, s, c } = self;
            let rt = g.rt[0];
            for ch in 0..c {
                let off = t.off0[ch];
                let keep =
                    u32::from(s.r[ch]).wrapping_sub(g.window.0) < g.window.1 && off != i64::MIN;
                let p = s.point(ch, rt, ab.az[ch], t.el_rad[ch], time(g.base_ns, off));
                out.put_point(p, keep);
            }
        }
    }

    /// Dual return: blocks `b0` (k = 0) and `b1` (k = 1, the last) of the group, per channel
    /// return 0 then return 1.
    pub(super) fn dual<const UL: usize>(
        g: &Group,
        t: &Tables,
        b0: &[u8],
        b1: &[u8],
        points: &mut PointBuf,
        scratch: &mut Scratch,
    ) {
        let c = t.off_rad.len().min(MAX_CHANNELS);
        let Scratch { az: ab, s0, s1 } = scratch;
        ab.fill(g, t);
        s0.fill::<UL>(g, t, ab, b0);
        s1.fill::<UL>(g, t, ab, b1);
        points.extend_compacted_with(
            2 * c,
            Dual {
                g,
                t,
                ab,
                s0,
                s1,
                c,
            },
        );
    }

    /// The channels of a dual-return block pair as a [`FillPoints`] writer (any layout).
    struct Dual<'a> {
        g: &'a Group,
        t: &'a Tables<'a>,
        ab: &'a Azimuths,
        s0: &'a Soa,
        s1: &'a Soa,
        c: usize,
    }

    impl FillPoints for Dual<'_> {
        #[inline(always)]
        fn fill<L: Layout>(self, out: &mut Compactor<'_, L>) {
            let Dual {
                g,
                t,
                ab,
                s0,
                s1,
                c,
            } = self;
            for ch in 0..c {
                let (r0, f0, r1, f1) = (s0.r[ch], s0.f[ch], s1.r[ch], s1.f[ch]);
                let (d0, d1) = (s0.d[ch], s1.d[ch]);
                let (off0, off1) = (t.off0[ch], t.off1[ch]);
                let identical = r0 == r1 && f0 == f1;
                let keep0 = u32::from(r0).wrapping_sub(g.window.0) < g.window.1
                    && !identical
                    && (d1 - d0).abs() >= g.threshold
                    && off0 != i64::MIN;
                let keep1 = u32::from(r1).wrapping_sub(g.window.0) < g.window.1 && off1 != i64::MIN;
                let rt0 = g.rt[1 + usize::from(f1 <= f0)];
                let rt1 = if identical {
                    ReturnType::Identical as u8
                } else {
                    g.rt[3 + usize::from(f0 <= f1)]
                };
                let (az, el) = (ab.az[ch], t.el_rad[ch]);
                out.put_point(s0.point(ch, rt0, az, el, time(g.base_ns, off0)), keep0);
                out.put_point(s1.point(ch, rt1, az, el, time(g.base_ns, off1)), keep1);
            }
        }
    }
}

fn argmin(v: &[f32], better: impl Fn(f32, f32) -> bool) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if better(x, v[best]) {
            best = i;
        }
    }
    best
}

/// Return type of return `k` of a firing whose returns are `units` (`(raw distance,
/// reflectivity)` per block of the group), under return-mode byte `mode` (Nebula
/// `HesaiSensor::get_return_type`, with the first/last swap of XT16/XT32/OT128).
pub fn return_type(model: SensorModel, mode: u8, k: usize, units: &[(u16, u8)]) -> ReturnType {
    let me = units.get(k).copied().unwrap_or_default();
    let others = || units.iter().enumerate().filter(move |(j, _)| *j != k);
    if others().any(|(_, u)| *u == me) {
        return ReturnType::Identical;
    }
    let strongest = others().all(|(_, u)| u.1 <= me.1);
    let t = match mode {
        rm::FIRST => ReturnType::First,
        rm::SECOND => ReturnType::Second,
        rm::STRONGEST => ReturnType::Strongest,
        rm::LAST => ReturnType::Last,
        rm::LAST_STRONGEST => match (strongest, k == 0) {
            (true, true) => ReturnType::LastStrongest,
            (true, false) => ReturnType::Strongest,
            (false, true) => ReturnType::Last,
            (false, false) => ReturnType::SecondStrongest,
        },
        rm::FIRST_SECOND => [ReturnType::First, ReturnType::Second][k.min(1)],
        rm::FIRST_LAST => [ReturnType::First, ReturnType::Last][k.min(1)],
        rm::FIRST_STRONGEST => match (strongest, k == 0) {
            (true, true) => ReturnType::FirstStrongest,
            (true, false) => ReturnType::Strongest,
            (false, true) => ReturnType::First,
            (false, false) => ReturnType::SecondStrongest,
        },
        rm::STRONGEST_SECOND => [ReturnType::Strongest, ReturnType::SecondStrongest][k.min(1)],
        rm::TRIPLE => [ReturnType::First, ReturnType::Last, ReturnType::Strongest][k.min(2)],
        _ => ReturnType::Unknown,
    };
    let swaps = matches!(
        model,
        SensorModel::PandarXt16 | SensorModel::PandarXt32 | SensorModel::Pandar128e4x
    );
    match (swaps && mode == rm::FIRST_LAST, t) {
        (true, ReturnType::First) => ReturnType::Last,
        (true, ReturnType::Last) => ReturnType::First,
        _ => t,
    }
}

/// The shared [`ReturnMode`] nearest to a Hesai return-mode byte (second / second-strongest
/// modes have no exact counterpart: 0x34 maps to `Last`, 0x3a to `FirstLast`, 0x3e to `Dual`).
pub fn return_mode_of(byte: u8) -> Option<ReturnMode> {
    Some(match byte {
        rm::FIRST => ReturnMode::First,
        rm::SECOND | rm::LAST => ReturnMode::Last,
        rm::STRONGEST => ReturnMode::Strongest,
        rm::LAST_STRONGEST | rm::STRONGEST_SECOND => ReturnMode::Dual,
        rm::FIRST_SECOND | rm::FIRST_LAST => ReturnMode::FirstLast,
        rm::FIRST_STRONGEST => ReturnMode::FirstStrongest,
        rm::TRIPLE => ReturnMode::Triple,
        _ => return None,
    })
}

impl VendorDecoder for HesaiStream {
    /// Classifies with [`packet::classify`]; a host-time gap (monotonic) longer than the frame
    /// timeout publishes the frames in progress before this packet is decoded.
    fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), crate::vendor::Rejection> {
        let p = match packet::classify(payload, self.layout, self.check_crc) {
            Ok(p) => p,
            Err(Rejection::Ignored) => return Err(crate::vendor::Rejection::Ignored),
            Err(Rejection::Malformed(_)) => {
                let cur = self.cutter.state.as_ref().map_or(0, |s| s.current);
                let b = &mut self.bufs[usize::from(cur)];
                b.malformed = b.malformed.saturating_add(1);
                return Err(crate::vendor::Rejection::Malformed);
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
        match self.builder.clock_mut().check(time_ns, host.mono_ns, az, 0) {
            TimeVerdict::Jump => {
                if timed_out {
                    self.close_partial(out);
                }
                return Err(crate::vendor::Rejection::TimeJump);
            }
            TimeVerdict::Restart => {
                self.close_all(out);
                return Err(crate::vendor::Rejection::Restart);
            }
            TimeVerdict::Late => {
                // It belongs to the frames in progress if the cut has not passed since its
                // azimuth: at or behind the last packet's, less than a quarter turn back.
                let fits = match (self.last_phased, phased) {
                    (Some(last), Some(now)) => now <= last && last - now < AZIMUTH_UNITS / 4,
                    _ => false,
                };
                if !fits || self.cutter.state.is_none() {
                    return Err(crate::vendor::Rejection::Late);
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
                    let to_cut = arc_in_view(
                        self.fov,
                        (self.cut_cdeg + from) % AZIMUTH_UNITS,
                        AZIMUTH_UNITS - from,
                    );
                    let tail = to_cut.div_ceil(step).saturating_sub(1);
                    let cur = self.cutter.state.as_ref().map_or(0, |s| s.current);
                    let b = &mut self.bufs[usize::from(cur)];
                    b.lost = b.lost.saturating_add(tail);
                }
                self.close_all(out);
                if let (Some(from), Some(to)) = (self.last_phased, phased) {
                    let period = self.builder.clock().period_ns();
                    self.builder.lose_frames(turns_lost(from, to, gap, period));
                    if step > 0 {
                        self.pending_head_lost =
                            arc_in_view(self.fov, self.cut_cdeg, to).div_ceil(step);
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
            .any(|b| !b.points.is_empty() || b.received > 0)
    }

    /// Takes the fresh stream's angle tables (CSV or AT128 correction) and re-derives the
    /// cutter's view of the last block group from them.
    fn recalibrate(&mut self, fresh: Box<dyn VendorDecoder>) {
        let Ok(f) = fresh.into_any().downcast::<HesaiStream>() else {
            return;
        };
        let f = *f;
        self.angles = f.angles;
        self.at128 = f.at128;
        self.cutter.min_idx = f.cutter.min_idx;
        self.cutter.max_idx = f.cutter.max_idx;
        self.scratch_raw = None;
        if self.at128.is_none() && self.cutter.state.is_some() {
            self.last_az_stale = true;
            self.sync_last_az();
        }
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }

    fn flush(&mut self, out: &mut Vec<Frame>) {
        self.close_partial(out);
    }

    fn return_mode(&self) -> Option<ReturnMode> {
        self.return_mode
    }

    fn clone_box(&self) -> Box<dyn VendorDecoder> {
        Box::new(self.clone())
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
            b.points.set_start_ns(b.start_ns.max(0) as u64);
        }
    }

    fn time_faults(&self) -> crate::vendor::TimeFaults {
        crate::vendor::TimeFaults {
            restarts: self.builder.clock().restarts(),
            date_fallbacks: self.date_fallbacks,
        }
    }
}
#[cfg(test)]
mod tests;
