//! NMEA 0183 `RMC` sentences as a Velodyne position packet carries them (`$GPRMC`, VLP-16 user
//! manual, "Position Packet"): the fix status and the UTC time of day.
#![forbid(unsafe_code)]

/// The status field of an NMEA `RMC` sentence (`$GPRMC`, `$GNRMC`, ...: NMEA 0183, the
/// third comma-separated field): `Some(true)` for `A` (valid fix), `Some(false)` for `V`,
/// `None` for any other sentence or field.
pub fn rmc_valid(sentence: &str) -> Option<bool> {
    let mut fields = sentence.split(',');
    let talker = fields.next()?;
    if !(talker.len() == 6 && talker.starts_with('$') && talker.ends_with("RMC")) {
        return None;
    }
    match fields.nth(1)? {
        "A" => Some(true),
        "V" => Some(false),
        _ => None,
    }
}

/// The UTC time of day of an NMEA `RMC` sentence (its second field, `hhmmss` or
/// `hhmmss.ss`), as seconds since midnight; `None` for another sentence or an empty or
/// malformed time.
pub fn rmc_time_of_day_s(sentence: &str) -> Option<f64> {
    let mut fields = sentence.split(',');
    let talker = fields.next()?;
    if !(talker.len() == 6 && talker.starts_with('$') && talker.ends_with("RMC")) {
        return None;
    }
    let t = fields.next()?;
    let (hh, mm, ss) = (t.get(0..2)?, t.get(2..4)?, t.get(4..)?);
    let (h, m, s): (u32, u32, f64) = (hh.parse().ok()?, mm.parse().ok()?, ss.parse().ok()?);
    (h < 24 && m < 60 && (0.0..61.0).contains(&s)).then(|| f64::from(h * 3600 + m * 60) + s)
}
