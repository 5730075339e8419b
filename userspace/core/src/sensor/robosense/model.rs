//! The constants of each RoboSense model ([`ModelSpec`], rs_driver `getConstParam` /
//! `calcParam`): lasers, distance unit, firing and block times (µs), angle defaults, the
//! DIFOP field layout; looked up by [`spec`].

#![forbid(unsafe_code)]

use crate::vendor::{ReturnMode, SensorModel};

use super::{CHANNELS, HeaderKind};

/// Constants of one RoboSense model (rs_driver `getConstParam` / `calcParam`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelSpec {
    /// The model.
    pub model: SensorModel,
    /// MSOP header family.
    pub header: HeaderKind,
    /// Lasers (rows of the angle table): 16 or 32.
    pub lasers: usize,
    /// 16-laser layout (laser = channel % 16, two sequences per block in single return).
    pub rs16_layout: bool,
    /// Distance unit, m (0.005 or 0.0025).
    pub distance_res_m: f32,
    /// Block (firing) duration `T`, µs.
    pub block_us: f32,
    /// Firing offset of channel 0..31 inside its block, µs.
    pub firing_us: [f32; CHANNELS],
    /// Optical centre offset along x, m.
    pub rx_m: f32,
    /// Optical centre offset along z, m.
    pub rz_m: f32,
    /// The timestamp is Unix seconds (u48) + µs (u32) rather than calendar fields.
    pub unix_time: bool,
}

const HELIOS_FIRING: [f32; 32] = [
    0.00, 1.73, 3.46, 5.19, 6.92, 8.65, 10.38, 12.11, 13.84, 15.57, 17.3, 19.03, 20.76, 22.49,
    24.22, 25.95, 27.68, 29.41, 31.14, 32.87, 34.6, 36.33, 38.06, 39.79, 41.52, 43.25, 44.98,
    46.71, 48.44, 50.17, 51.9, 53.63,
];

static SPECS: [ModelSpec; 5] = [
    ModelSpec {
        model: SensorModel::Rs16,
        header: HeaderKind::V1,
        lasers: 16,
        rs16_layout: true,
        distance_res_m: 0.005,
        block_us: 55.50,
        firing_us: [
            0.00, 2.80, 5.60, 8.40, 11.20, 14.00, 16.80, 19.60, 22.40, 25.20, 28.00, 30.80, 33.60,
            36.40, 39.20, 42.00, 55.50, 58.30, 61.10, 63.90, 66.70, 69.50, 72.30, 75.10, 77.90,
            80.70, 83.50, 86.30, 89.10, 91.90, 94.70, 97.50,
        ],
        rx_m: 0.03825,
        rz_m: 0.0,
        unix_time: false,
    },
    ModelSpec {
        model: SensorModel::Rs32,
        header: HeaderKind::V1,
        lasers: 32,
        rs16_layout: false,
        distance_res_m: 0.005,
        block_us: 55.52,
        firing_us: [
            0.00, 2.88, 5.76, 8.64, 11.52, 14.40, 17.28, 20.16, 23.04, 25.92, 28.80, 31.68, 34.56,
            37.44, 40.32, 44.64, 1.44, 4.32, 7.20, 10.08, 12.96, 15.84, 18.72, 21.60, 24.48, 27.36,
            30.24, 33.12, 36.00, 38.88, 41.76, 46.08,
        ],
        rx_m: 0.03997,
        rz_m: 0.0,
        unix_time: false,
    },
    ModelSpec {
        model: SensorModel::Bpearl,
        header: HeaderKind::V1,
        lasers: 32,
        rs16_layout: false,
        distance_res_m: 0.005,
        block_us: 55.52,
        firing_us: [
            0.00, 2.56, 5.12, 7.68, 10.24, 12.80, 15.36, 17.92, 25.68, 28.24, 30.80, 33.36, 35.92,
            38.48, 41.04, 43.60, 1.28, 3.84, 6.40, 8.96, 11.52, 14.08, 16.64, 19.20, 26.96, 29.52,
            32.08, 34.64, 37.20, 39.76, 42.32, 44.88,
        ],
        rx_m: 0.01473,
        rz_m: 0.09427,
        unix_time: false,
    },
    ModelSpec {
        model: SensorModel::Helios,
        header: HeaderKind::Helios,
        lasers: 32,
        rs16_layout: false,
        distance_res_m: 0.0025,
        block_us: 55.56,
        firing_us: HELIOS_FIRING,
        rx_m: 0.03498,
        rz_m: 0.0,
        unix_time: true,
    },
    ModelSpec {
        model: SensorModel::Helios16p,
        header: HeaderKind::Helios,
        lasers: 16,
        rs16_layout: true,
        distance_res_m: 0.0025,
        block_us: 55.56,
        firing_us: HELIOS_FIRING,
        rx_m: 0.03498,
        rz_m: 0.0,
        unix_time: true,
    },
];

/// RS-Bpearl V4 firmware (MSOP V1 header with lidar type 0x03 at byte 31 and lidar model 0x04
/// at byte 32, rs_driver `DecoderRSBP`): 2.5 mm distance unit, Unix timestamp, 55.56 µs
/// blocks, its own firing table and optical centre. Chosen per stream from the first MSOP.
pub static BPEARL_V4: ModelSpec = ModelSpec {
    model: SensorModel::Bpearl,
    header: HeaderKind::V1,
    lasers: 32,
    rs16_layout: false,
    distance_res_m: 0.0025,
    block_us: 55.56,
    firing_us: [
        0.00, 1.67, 3.34, 5.00, 6.67, 8.34, 10.01, 11.68, 13.34, 15.01, 16.68, 18.35, 20.02, 21.68,
        23.35, 25.02, 26.69, 28.36, 30.02, 31.69, 33.36, 35.03, 36.70, 38.36, 40.03, 41.70, 43.37,
        45.04, 46.70, 48.37, 50.04, 51.71,
    ],
    rx_m: 0.01619,
    rz_m: 0.09571,
    unix_time: true,
};

/// Byte 31 (lidar type) and 32 (lidar model) of a V1 MSOP header marking a Bpearl V4.
pub const BPEARL_V4_TYPE_MODEL: (u8, u8) = (0x03, 0x04);

/// The constants of a RoboSense model, `None` for other families.
pub fn spec(model: SensorModel) -> Option<&'static ModelSpec> {
    SPECS.iter().find(|s| s.model == model)
}

impl ModelSpec {
    /// Return mode of a DIFOP return-mode byte (offset 300), `None` for an unknown value.
    pub fn return_mode_of(&self, byte: u8) -> Option<ReturnMode> {
        match (self.header, byte) {
            (_, 0) => Some(ReturnMode::Dual),
            (HeaderKind::V1, 1) | (HeaderKind::Helios, 4) => Some(ReturnMode::Strongest),
            (HeaderKind::V1, 2) | (HeaderKind::Helios, 5) => Some(ReturnMode::Last),
            (HeaderKind::Helios, 6) => Some(ReturnMode::First),
            _ => None,
        }
    }

    /// Nominal packet interval, ns, in `mode` (12 firings single / 6 dual for 32-channel models;
    /// 24 sequences single / 12 dual for 16-laser models).
    pub fn packet_interval_ns(&self, mode: ReturnMode) -> u64 {
        let dual = mode.returns() > 1;
        let blocks = match (self.rs16_layout, dual) {
            (true, false) => 24.0,
            (false, true) => 6.0,
            _ => 12.0,
        };
        (f64::from(self.block_us) * blocks * 1000.0).round() as u64
    }
}
