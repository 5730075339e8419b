//! Exact-value tests of the Hesai calibration parsers, firing times, return types and the
//! cutter's angle helpers (the parts that do not depend on how frames are cut or counted).

use std::path::Path;

use super::cutter::{TAU_F32, between, normalize};
use super::layout::{
    AT128, Layout, PANDAR40P, PANDAR64, PANDAR128E4X, PANDARQT64, PANDARQT128, PANDARXT16,
    PANDARXT32, PANDARXT32M,
};
use super::*;
use crate::vendor::ConfigError;

/// The Pandar40P angle-correction CSV shipped with the capture.
const P40_CSV: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/hesai/pandar40p/Pandar40P.csv"
);

/// The error message of [`AngleCorrection::parse`] on `text` for `channels` channels.
fn csv_err(text: &str, channels: usize) -> String {
    AngleCorrection::parse(text, channels)
        .expect_err(text)
        .to_string()
}

#[test]
fn angle_correction_parses_the_pandar40p_csv() {
    let text = std::fs::read_to_string(P40_CSV).unwrap();
    let c = AngleCorrection::parse(&text, 40).unwrap();
    assert_eq!((c.elevation_deg.len(), c.azimuth_deg.len()), (40, 40));
    assert_eq!((c.elevation_deg[0], c.azimuth_deg[0]), (14.794, -1.042));
    assert_eq!((c.elevation_deg[6], c.azimuth_deg[6]), (1.6, 3.125));
    assert_eq!((c.elevation_deg[7], c.azimuth_deg[7]), (1.263, -5.208));
    assert_eq!((c.elevation_deg[39], c.azimuth_deg[39]), (-24.985, -1.042));
    // Through `from_bytes` the same table; 41 channels: the 41st is missing.
    let path = Path::new("P40.csv");
    assert_eq!(
        AngleCorrection::from_bytes(text.as_bytes(), 40, path).unwrap(),
        c
    );
    match AngleCorrection::from_bytes(text.as_bytes(), 41, path) {
        Err(ConfigError::Calibration { path: p, message }) => {
            assert_eq!(
                (p.as_path(), message.as_str()),
                (path, "channel 41 missing (need 41)")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        AngleCorrection::from_bytes(&[0xFF, 0xFE], 1, path),
        Err(ConfigError::CalibrationIo { .. })
    ));
}

#[test]
fn angle_correction_rows_in_any_order_with_spaces_blank_lines_and_extra_columns() {
    // The first line is a header even when it looks like data; ids are 1-based.
    let text = "1,99,99\n 2 , -3.5 , 0.25 ,x\n\n1,180,-180\n";
    let c = AngleCorrection::parse(text, 2).unwrap();
    assert_eq!(c.elevation_deg, [180.0, -3.5]);
    assert_eq!(c.azimuth_deg, [-180.0, 0.25]);
}

#[test]
fn angle_correction_errors_name_the_line() {
    let h = "id,el,az\n";
    let bad = |row: &str| format!("line 2: expected `id,elevation,azimuth`: {row}");
    for row in ["1,abc,0", "1,0,x", "one,0,0", "-1,0,0", "1,2", "1"] {
        assert_eq!(csv_err(&format!("{h}{row}\n"), 2), bad(row), "{row}");
    }
    // Line numbers count the header and blank lines.
    assert_eq!(
        csv_err(&format!("{h}\n1,0,0\n3,0,0\n"), 2),
        "line 4: channel id 3 outside 1..=2"
    );
    assert_eq!(
        csv_err(&format!("{h}0,0,0\n"), 2),
        "line 2: channel id 0 outside 1..=2"
    );
    assert_eq!(
        csv_err(&format!("{h}1,0,0\n1,1,1\n"), 2),
        "line 3: duplicate channel id 1"
    );
    assert_eq!(
        csv_err(&format!("{h}2,0,0\n"), 3),
        "channel 1 missing (need 3)"
    );
    assert_eq!(csv_err(h, 1), "channel 1 missing (need 1)");
    for row in ["1,180.5,0", "1,0,-180.01", "1,NaN,0", "1,0,inf"] {
        assert_eq!(
            csv_err(&format!("{h}{row}\n"), 1),
            "line 2: angle outside ±180°",
            "{row}"
        );
    }
    // The id is checked before the angles, the angles before duplicates.
    assert_eq!(
        csv_err(&format!("{h}5,200,0\n"), 2),
        "line 2: channel id 5 outside 1..=2"
    );
    assert_eq!(
        csv_err(&format!("{h}1,0,0\n1,200,0\n"), 2),
        "line 3: angle outside ±180°"
    );
}

/// A synthetic AT128 correction file (format 1.5), serialised by [`Dat::bytes`].
struct Dat {
    /// Bytes before the `EE FF` delimiter.
    prefix: Vec<u8>,
    /// Version major, minor.
    version: (u8, u8),
    /// Channel count byte.
    channels: u8,
    /// Mirror count byte.
    mirrors: u8,
    /// Field (frame) count byte.
    fields: u8,
    /// Resolution byte.
    res: u8,
    /// Field start / end azimuths (one per mirror), raw.
    ranges: Vec<(u32, u32)>,
    /// Channel azimuths, raw.
    azimuth: Vec<i32>,
    /// Channel elevations, raw.
    elevation: Vec<i32>,
    /// Azimuth adjustments, 180 per channel.
    az_adj: Vec<i8>,
    /// Elevation adjustments, 180 per channel.
    el_adj: Vec<i8>,
}

impl Dat {
    /// Two channels, three mirrors and fields, resolution 1, adjustments 0: field 0 is
    /// `[1_000_000, 2_000_000]`, field 1 wraps `[8_000_000, 500_000]`, field 2 is
    /// `[2_500_000, 3_000_000]`; channel azimuths 12 800 / −25 600, elevations 0 / −256 000.
    fn new() -> Self {
        Self {
            prefix: vec![0x00, 0xEE, 0x11, 0xFF],
            version: (1, 5),
            channels: 2,
            mirrors: 3,
            fields: 3,
            res: 1,
            ranges: vec![
                (1_000_000, 2_000_000),
                (8_000_000, 500_000),
                (2_500_000, 3_000_000),
            ],
            azimuth: vec![12_800, -25_600],
            elevation: vec![0, -256_000],
            az_adj: vec![0; 360],
            el_adj: vec![0; 360],
        }
    }

    /// The file: prefix, 16-byte header, tables in file order, 32 bytes of SHA-256.
    fn bytes(&self) -> Vec<u8> {
        let mut b = self.prefix.clone();
        b.extend([0xEE, 0xFF, self.version.0, self.version.1]);
        b.extend([self.channels, self.mirrors, self.fields]);
        b.extend([0xA5; 8]);
        b.push(self.res);
        b.extend(self.ranges.iter().flat_map(|r| r.0.to_le_bytes()));
        b.extend(self.ranges.iter().flat_map(|r| r.1.to_le_bytes()));
        b.extend(self.azimuth.iter().flat_map(|v| v.to_le_bytes()));
        b.extend(self.elevation.iter().flat_map(|v| v.to_le_bytes()));
        b.extend(self.az_adj.iter().map(|&v| v as u8));
        b.extend(self.el_adj.iter().map(|&v| v as u8));
        b.extend([0x5A; 32]);
        b
    }
}

#[test]
fn at128_correction_fields_and_resolution_scaling() {
    let mut d = Dat::new();
    d.res = 2;
    d.fields = 2; // Fewer fields than mirrors: the third range is dropped.
    d.az_adj[0] = -128;
    d.az_adj[359] = 127;
    d.el_adj[180] = -1;
    let c = At128Correction::parse(&d.bytes(), 2).unwrap();
    assert_eq!(c.fields, [(2_000_000, 4_000_000), (16_000_000, 1_000_000)]);
    assert_eq!(c.azimuth, [25_600, -51_200]);
    assert_eq!(c.elevation, [0, -512_000]);
    assert_eq!(c.azimuth_adjust.len(), 360);
    assert_eq!(c.elevation_adjust.len(), 360);
    // The i8 adjustments are scaled in i32 (no wrapping).
    assert_eq!(
        (
            c.azimuth_adjust[0],
            c.azimuth_adjust[1],
            c.azimuth_adjust[359]
        ),
        (-256, 0, 254)
    );
    assert_eq!((c.elevation_adjust[179], c.elevation_adjust[180]), (0, -2));
    // Resolution 0 counts as 1; the SHA-256 is not needed.
    d.res = 0;
    let mut bytes = d.bytes();
    bytes.truncate(bytes.len() - 32);
    let c = At128Correction::parse(&bytes, 2).unwrap();
    assert_eq!(c.fields, [(1_000_000, 2_000_000), (8_000_000, 500_000)]);
    assert_eq!(c.azimuth, [12_800, -25_600]);
    assert_eq!(c.azimuth_adjust[0], -128);
}

#[test]
fn at128_corrected_angles() {
    let mut d = Dat::new();
    // Channel 1, entries 20 and 21 (encoder 1 024 000 and 1 075 200).
    d.az_adj[180 + 20] = 10;
    d.az_adj[180 + 21] = 11;
    d.el_adj[180 + 20] = -4;
    d.el_adj[180 + 21] = -7;
    let c = At128Correction::parse(&d.bytes(), 2).unwrap();
    // At an entry: no interpolation. (1 024 000 − 1 000 000)·2 + 25 600 + 10·256.
    assert_eq!(c.corrected(1, 1_024_000), Some((76_160, -257_024)));
    // Half way: 10.5 → 11, −5.5 → −6 (rounded away from zero).
    assert_eq!(
        c.corrected(1, 1_049_600),
        Some((99_200 + 25_600 + 11 * 256, -256_000 - 6 * 256))
    );
    // A quarter of the way: 10.25 → 10, −4.75 → −5.
    assert_eq!(
        c.corrected(1, 1_036_800),
        Some((73_600 + 25_600 + 10 * 256, -256_000 - 5 * 256))
    );
    // Channel 0 has no adjustments; its azimuth wraps below 0 into [0, AT128_UNITS).
    assert_eq!(c.corrected(0, 1_000_000), Some((AT128_UNITS - 12_800, 0)));
    assert_eq!(c.corrected(0, 2_000_000), Some((2_000_000 - 12_800, 0)));
    // The wrapping field [8 000 000, 500 000]: (100 000 − 8 000 000)·2 − 12 800 + 2·AT128_UNITS.
    assert_eq!(c.corrected(0, 100_000), Some((2_619_200, 0)));
    assert_eq!(c.corrected(0, 8_000_000), Some((AT128_UNITS - 12_800, 0)));
    assert_eq!(c.corrected(0, 2_600_000), Some((187_200, 0)));
    // Between the fields, and a channel the file does not have.
    assert_eq!(c.corrected(0, 2_000_001), None);
    assert_eq!(c.corrected(0, 7_999_999), None);
    assert_eq!(c.corrected(2, 1_000_000), None);
    // A field whose start equals its end is the whole turn.
    d.ranges[0] = (4_000_000, 4_000_000);
    let c = At128Correction::parse(&d.bytes(), 2).unwrap();
    assert_eq!(c.corrected(0, 7_000_000), Some((6_000_000 - 12_800, 0)));
}

#[test]
fn at128_correction_errors() {
    let parse = |d: &Dat, c: usize| {
        At128Correction::parse(&d.bytes(), c)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        At128Correction::parse(&[0xEE, 0x00, 0xFF, 0xEE], 2).unwrap_err(),
        CorrectionError::NoDelimiter
    );
    let mut d = Dat::new();
    d.version = (2, 4);
    assert_eq!(parse(&d, 2), "version 2.4 unsupported (need x.5)");
    d.version = (7, 5);
    assert!(At128Correction::parse(&d.bytes(), 2).is_ok());
    assert_eq!(parse(&d, 128), "2 channels, model has 128");
    d.mirrors = 0;
    assert_eq!(parse(&d, 2), "0 mirrors / 3 fields (max 8)");
    d.mirrors = 9;
    assert_eq!(parse(&d, 2), "9 mirrors / 3 fields (max 8)");
    d.mirrors = 3;
    d.fields = 9;
    assert_eq!(parse(&d, 2), "3 mirrors / 9 fields (max 8)");
    d.fields = 3;
    // Lengths count from the delimiter: header 16, ranges 24, angles 16, adjustments 720.
    let full = &d.bytes()[d.prefix.len()..];
    let cut = |n: usize| {
        At128Correction::parse(&full[..n], 2)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(cut(7), "file ends at byte 7 (need 16)");
    assert_eq!(cut(20), "file ends at byte 20 (need 24)");
    assert_eq!(cut(50), "file ends at byte 50 (need 52)");
    assert_eq!(cut(400), "file ends at byte 400 (need 416)");
    assert_eq!(cut(775), "file ends at byte 775 (need 776)");
    assert!(At128Correction::parse(&full[..776], 2).is_ok());
}

/// A zeroed packet of `layout`'s documented length with return-mode byte `mode`.
fn packet(layout: &Layout, mode: u8) -> Vec<u8> {
    let mut b = vec![0u8; layout.base_len()];
    b[layout.tail_offset() + layout.t_return_mode] = mode;
    b
}

/// [`firing_offset_ns`] of `(block, channel)` in payload `buf` read with `layout`.
fn fire(layout: &'static Layout, buf: &[u8], block: usize, channel: usize) -> Option<i64> {
    firing_offset_ns(&Packet::new_unchecked(buf, layout), block, channel)
}

#[test]
fn firing_offsets_of_the_spinning_models() {
    let (single, dual, triple) = (rm::STRONGEST, rm::LAST_STRONGEST, rm::TRIPLE);
    let p = packet(&PANDAR40P, single);
    assert_eq!(
        fire(&PANDAR40P, &p, 0, 0),
        Some(-28_580 - 9 * 55_560 - 42_220)
    );
    assert_eq!(fire(&PANDAR40P, &p, 9, 1), Some(-28_580 - 28_470));
    assert_eq!(fire(&PANDAR40P, &p, 0, 40), None);
    let p = packet(&PANDAR40P, dual);
    assert_eq!(fire(&PANDAR40P, &p, 0, 0), Some(-293_040));
    assert_eq!(fire(&PANDAR40P, &p, 1, 39), Some(-254_440));
    let p = packet(&PANDAR64, single);
    assert_eq!(fire(&PANDAR64, &p, 0, 0), Some(-343_560));
    assert_eq!(fire(&PANDAR64, &p, 5, 63), Some(-55_328));
    // QT64: channel 56 is 129 600 ns (Nebula's table drops a digit).
    let p = packet(&PANDARQT64, single);
    assert_eq!(fire(&PANDARQT64, &p, 3, 0), Some(538_020));
    assert_eq!(fire(&PANDARQT64, &p, 1, 0), Some(204_686));
    assert_eq!(fire(&PANDARQT64, &p, 0, 55), Some(155_310));
    let p = packet(&PANDARQT64, dual);
    assert_eq!(fire(&PANDARQT64, &p, 3, 0), Some(204_686));
    let p = packet(&PANDARXT32, single);
    assert_eq!(fire(&PANDARXT32, &p, 0, 31), Some(-297_128));
    assert_eq!(fire(&PANDARXT32, &p, 7, 0), Some(6_000));
    let p = packet(&PANDARXT32, dual);
    assert_eq!(fire(&PANDARXT32, &p, 0, 0), Some(-144_000));
    assert_eq!(fire(&PANDARXT32, &p, 7, 0), Some(6_000));
    let p = packet(&PANDARXT16, single);
    assert_eq!(fire(&PANDARXT16, &p, 7, 15), Some(51_360));
    // XT32M: channels fire in two groups of 16; triple return uses (5 − b) / 3.
    let p = packet(&PANDARXT32M, single);
    assert_eq!(fire(&PANDARXT32M, &p, 0, 17), Some(-341_112));
    let p = packet(&PANDARXT32M, triple);
    assert_eq!(fire(&PANDARXT32M, &p, 0, 16), Some(-44_000));
    assert_eq!(fire(&PANDARXT32M, &p, 3, 0), Some(6_000));
}

#[test]
fn firing_offsets_of_qt128_ot128_and_at128() {
    let l = &PANDARQT128;
    // Single return: even blocks fire loop 1, odd blocks loop 2.
    let p = packet(l, rm::STRONGEST);
    assert_eq!(fire(l, &p, 0, 32), Some(9_000 + 111_110 + 27_656));
    assert_eq!(fire(l, &p, 1, 0), Some(9_000 + 2_312));
    // Dual return: both blocks are one firing at 9 µs, the loop from the mode flag.
    let mut p = packet(l, rm::LAST_STRONGEST);
    assert_eq!(fire(l, &p, 0, 0), Some(11_312));
    assert_eq!(fire(l, &p, 1, 0), Some(11_312));
    p[l.tail_offset() + 5] = 1;
    assert_eq!(fire(l, &p, 0, 32), Some(36_656));
    assert_eq!(fire(l, &p, 1, 32), Some(36_656));
    assert_eq!(fire(l, &p, 0, 128), None);

    let l = &PANDAR128E4X;
    let state = l.tail_offset() + 9;
    let mut p = packet(l, rm::STRONGEST);
    // Standard resolution (operational state 1): the static table.
    p[state + 2] = 1;
    assert_eq!(fire(l, &p, 0, 0), Some(-55_556 + 43_346 + 49_758));
    assert_eq!(fire(l, &p, 1, 0), Some(43_346 + 49_758));
    // High resolution: block 0 in azimuth state 0, block 1 in state 1 (bits 13..12).
    p[state + 2] = 0;
    p[state..state + 2].copy_from_slice(&0x1000u16.to_le_bytes());
    assert_eq!(fire(l, &p, 0, 0), None);
    assert_eq!(fire(l, &p, 0, 4), Some(-55_556 + 43_346 + 21_980));
    assert_eq!(fire(l, &p, 0, 39), Some(-55_556 + 43_346));
    assert_eq!(fire(l, &p, 1, 0), Some(43_346 + 21_980));
    assert_eq!(fire(l, &p, 1, 4), None);
    let mut p = packet(l, rm::LAST_STRONGEST);
    p[state + 2] = 1;
    assert_eq!(fire(l, &p, 0, 0), Some(93_104));

    let l = &AT128;
    let p = packet(l, rm::STRONGEST);
    assert_eq!(fire(l, &p, 0, 2), Some(-9_249 - 2 * 41_666 + 8_240));
    assert_eq!(fire(l, &p, 1, 8), Some(-38_491));
    let p = packet(l, rm::LAST_STRONGEST);
    assert_eq!(fire(l, &p, 0, 8), Some(-38_491));
    assert_eq!(fire(l, &p, 1, 0), Some(-50_915));
}

/// Dual returns, the first stronger (reflectivity 50 vs 20).
const STRONG_FIRST: [(u16, u8); 2] = [(100, 50), (200, 20)];
/// Dual returns, the second stronger.
const WEAK_FIRST: [(u16, u8); 2] = [(100, 20), (200, 50)];
/// Dual returns of equal reflectivity, different distances.
const TIE: [(u16, u8); 2] = [(100, 30), (200, 30)];
/// Two identical returns.
const SAME: [(u16, u8); 2] = [(100, 30), (100, 30)];

/// `[return_type(model, mode, k, units) for k in 0..units.len()]`.
fn types(model: SensorModel, mode: u8, units: &[(u16, u8)]) -> Vec<ReturnType> {
    (0..units.len())
        .map(|k| return_type(model, mode, k, units))
        .collect()
}

#[test]
fn return_types_of_every_mode_byte() {
    use ReturnType::*;
    let m = SensorModel::Pandar64;
    let one = [(100, 10)];
    assert_eq!(types(m, rm::FIRST, &one), [First]);
    assert_eq!(types(m, rm::SECOND, &one), [Second]);
    assert_eq!(types(m, rm::STRONGEST, &one), [Strongest]);
    assert_eq!(types(m, rm::LAST, &one), [Last]);
    for unknown in [0x00, 0x35, 0x36, 0x3f, 0xff] {
        assert_eq!(types(m, unknown, &one), [Unknown]);
        assert_eq!(types(m, unknown, &SAME), [Identical, Identical]);
    }
    let ls = rm::LAST_STRONGEST;
    assert_eq!(
        types(m, ls, &STRONG_FIRST),
        [LastStrongest, SecondStrongest]
    );
    assert_eq!(types(m, ls, &WEAK_FIRST), [Last, Strongest]);
    assert_eq!(types(m, ls, &TIE), [LastStrongest, Strongest]);
    assert_eq!(types(m, ls, &SAME), [Identical, Identical]);
    let fs = rm::FIRST_STRONGEST;
    assert_eq!(
        types(m, fs, &STRONG_FIRST),
        [FirstStrongest, SecondStrongest]
    );
    assert_eq!(types(m, fs, &WEAK_FIRST), [First, Strongest]);
    assert_eq!(types(m, fs, &TIE), [FirstStrongest, Strongest]);
    assert_eq!(types(m, rm::FIRST_SECOND, &STRONG_FIRST), [First, Second]);
    assert_eq!(types(m, rm::FIRST_LAST, &STRONG_FIRST), [First, Last]);
    assert_eq!(types(m, rm::FIRST_LAST, &SAME), [Identical, Identical]);
    let ss = rm::STRONGEST_SECOND;
    assert_eq!(types(m, ss, &WEAK_FIRST), [Strongest, SecondStrongest]);
    let three = [(100, 10), (200, 20), (300, 30)];
    assert_eq!(types(m, rm::TRIPLE, &three), [First, Last, Strongest]);
    let echo = [(100, 10), (200, 20), (100, 10)];
    assert_eq!(types(m, rm::TRIPLE, &echo), [Identical, Last, Identical]);
}

#[test]
fn first_last_is_swapped_for_xt16_xt32_and_ot128_only() {
    use ReturnType::*;
    let swapped = [
        SensorModel::PandarXt16,
        SensorModel::PandarXt32,
        SensorModel::Pandar128e4x,
    ];
    for m in swapped {
        assert_eq!(
            types(m, rm::FIRST_LAST, &WEAK_FIRST),
            [Last, First],
            "{m:?}"
        );
        // Only 0x3b swaps: single first / last and the triple mode keep their types.
        assert_eq!(types(m, rm::FIRST, &[(1, 1)]), [First], "{m:?}");
        assert_eq!(types(m, rm::LAST, &[(1, 1)]), [Last], "{m:?}");
        assert_eq!(types(m, rm::FIRST_SECOND, &WEAK_FIRST), [First, Second]);
        let three = [(100, 10), (200, 20), (300, 30)];
        assert_eq!(types(m, rm::TRIPLE, &three), [First, Last, Strongest]);
    }
    for m in [
        SensorModel::Pandar40p,
        SensorModel::Pandar64,
        SensorModel::PandarQt64,
        SensorModel::PandarQt128,
        SensorModel::PandarXt32m,
        SensorModel::At128,
    ] {
        assert_eq!(
            types(m, rm::FIRST_LAST, &WEAK_FIRST),
            [First, Last],
            "{m:?}"
        );
    }
}

#[test]
fn return_mode_of_every_byte() {
    let known = [
        (0x33, ReturnMode::First),
        (0x34, ReturnMode::Last),
        (0x37, ReturnMode::Strongest),
        (0x38, ReturnMode::Last),
        (0x39, ReturnMode::Dual),
        (0x3a, ReturnMode::FirstLast),
        (0x3b, ReturnMode::FirstLast),
        (0x3c, ReturnMode::FirstStrongest),
        (0x3d, ReturnMode::Triple),
        (0x3e, ReturnMode::Dual),
    ];
    for byte in 0..=u8::MAX {
        let want = known.iter().find(|k| k.0 == byte).map(|k| k.1);
        assert_eq!(return_mode_of(byte), want, "{byte:#04x}");
    }
}

#[test]
fn normalize_values() {
    let t = TAU_F32;
    assert_eq!(t.to_bits(), 0x40C9_0FDB);
    assert_eq!(normalize(1.0, t), 1.0);
    assert_eq!(normalize(0.0, t), 0.0);
    assert_eq!(normalize(t, t), 0.0);
    assert_eq!(normalize(-1.0, t), 5.283_185_5);
    assert_eq!(normalize(-std::f32::consts::PI, t), std::f32::consts::PI);
    // A tiny negative angle rounds up to m itself, as Nebula's f64 formula does.
    assert_eq!(normalize(-1e-10, t), t);
    // Outside (−m, 2m): the f64 formula.
    assert_eq!(normalize(20.0, t), 1.150_443_6);
    assert_eq!(normalize(-20.0, t), 5.132_742);
    assert_eq!(normalize(725.0, 360.0), 5.0);
    assert_eq!(normalize(-365.0, 360.0), 355.0);
    assert_eq!(normalize(-360.0, 360.0), 0.0);
    assert_eq!(normalize(720.0, 360.0), 0.0);
    assert_eq!(normalize(1080.5, 360.0), 0.5);
}

#[test]
fn normalize_fast_path_is_nebulas_f64_formula_bit_for_bit() {
    let nebula = |a: f32, m: f32| {
        let (a, m) = (f64::from(a), f64::from(m));
        (a - (a / m).floor() * m) as f32
    };
    for m in [TAU_F32, 360.0] {
        for i in -30_000..60_000 {
            let a = i as f32 * (m / 20_000.0) + 1e-4;
            assert_eq!(
                normalize(a, m).to_bits(),
                nebula(a, m).to_bits(),
                "{a} mod {m}"
            );
        }
    }
}

#[test]
fn between_bounds_and_wrap() {
    // Ordinary sector [1, 2].
    assert!(between(1.0, 2.0, 1.5, false, false));
    assert!(!between(1.0, 2.0, 2.5, true, true));
    assert!(!between(1.0, 2.0, 0.5, true, true));
    assert!(between(1.0, 2.0, 1.0, true, false));
    assert!(!between(1.0, 2.0, 1.0, false, true));
    assert!(between(1.0, 2.0, 2.0, false, true));
    assert!(!between(1.0, 2.0, 2.0, true, false));
    // Sector through 0: [6, 1].
    assert!(between(6.0, 1.0, 0.5, false, false));
    assert!(between(6.0, 1.0, 6.2, false, false));
    assert!(between(6.0, 1.0, 6.0, true, false));
    assert!(!between(6.0, 1.0, 6.0, false, true));
    assert!(!between(6.0, 1.0, 1.0, true, false));
    assert!(!between(6.0, 1.0, 3.0, true, true));
    // s == e: the full circle, except the bound itself when both bounds are exclusive.
    assert!(between(1.0, 1.0, 4.0, false, false));
    assert!(!between(1.0, 1.0, 1.0, false, false));
    assert!(between(1.0, 1.0, 1.0, true, false));
    assert!(between(1.0, 1.0, 1.0, false, true));
}
