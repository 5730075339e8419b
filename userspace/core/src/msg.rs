//! The neutral messages every layer may speak, below the decoders and the encoders: an IMU
//! sample and the stamp it is published with, the sensor's time synchronisation as it states it,
//! and a `diagnostic_msgs/msg/DiagnosticStatus` with its level. Plain data: no parsing, no
//! encoding (the vendors parse into these, [`crate::ros2`] and [`crate::protocol`] encode them).
#![forbid(unsafe_code)]

use crate::header::FrameClock;

/// Standard gravity, m/s² per g (ISO 80000-3; the conversion ouster-ros applies).
pub const STANDARD_GRAVITY: f64 = 9.806_65;

/// One IMU sample as the sensor sends it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImuSample {
    /// Diagnostic system time stamp, ns.
    pub sys_ts_ns: u64,
    /// Accelerometer read time, ns on the sensor clock.
    pub accel_ts_ns: u64,
    /// Gyroscope read time, ns on the sensor clock.
    pub gyro_ts_ns: u64,
    /// Linear acceleration x, y, z, g (sensor frame).
    pub accel_g: [f32; 3],
    /// Angular velocity x, y, z, °/s (sensor frame).
    pub gyro_dps: [f32; 3],
}

impl ImuSample {
    /// Linear acceleration, m/s² (× [`STANDARD_GRAVITY`]).
    pub fn linear_acceleration(&self) -> [f64; 3] {
        self.accel_g.map(|g| f64::from(g) * STANDARD_GRAVITY)
    }

    /// Angular velocity, rad/s.
    pub fn angular_velocity(&self) -> [f64; 3] {
        self.gyro_dps.map(|d| f64::from(d).to_radians())
    }
}

/// One IMU sample and the stamp it is published with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImuReading {
    /// The sample as the sensor sent it ([`crate::sensor::ouster::imu`]).
    pub sample: ImuSample,
    /// `header.stamp`, ns: the gyroscope read time on the sensor clock with
    /// [`crate::vendor::Stamp::Sensor`], the host receive time (CLOCK_REALTIME) with [`crate::vendor::Stamp::Host`].
    pub stamp_ns: u64,
    /// Host receive time, ns since the Unix epoch (CLOCK_REALTIME).
    pub host_ns: u64,
    /// The clock of `stamp_ns`.
    pub clock: FrameClock,
}

/// What a sensor's clock is synchronised to, as the sensor says it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SyncSource {
    /// Nothing the sensor said tells (Hesai, RoboSense: their data packets carry no sync
    /// state; a Velodyne before its first position packet).
    #[default]
    Unknown,
    /// Its own oscillator, free running (Ouster `TIME_FROM_INTERNAL_OSC`; a Velodyne whose
    /// PPS input is absent).
    Internal,
    /// A pulse per second input (Velodyne PPS; Ouster `TIME_FROM_SYNC_PULSE_IN`).
    Pps,
    /// IEEE 1588 PTP (Ouster `TIME_FROM_PTP_1588`).
    Ptp,
}

impl SyncSource {
    /// `unknown`, `internal`, `pps` or `ptp`: the `/diagnostics` value and the metrics label.
    pub fn name(self) -> &'static str {
        match self {
            SyncSource::Unknown => "unknown",
            SyncSource::Internal => "internal",
            SyncSource::Pps => "pps",
            SyncSource::Ptp => "ptp",
        }
    }

    /// The gauge value: 0 unknown, 1 internal, 2 pps, 3 ptp.
    pub fn code(self) -> u64 {
        self as u64
    }
}

/// Whether the sensor's clock is locked to its [`SyncSource`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SyncLock {
    /// The sensor does not say (a metadata setting, not a live state; or nothing said yet).
    #[default]
    Unknown,
    /// Free running: nothing to lock to.
    Free,
    /// Locking (Velodyne PPS "synchronizing").
    Acquiring,
    /// Locked (Velodyne PPS "locked").
    Locked,
    /// The source is there but not usable (Velodyne PPS "error").
    Error,
}

impl SyncLock {
    /// `unknown`, `free`, `acquiring`, `locked` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            SyncLock::Unknown => "unknown",
            SyncLock::Free => "free",
            SyncLock::Acquiring => "acquiring",
            SyncLock::Locked => "locked",
            SyncLock::Error => "error",
        }
    }

    /// The gauge value: 0 unknown, 1 free, 2 acquiring, 3 locked, 4 error.
    pub fn code(self) -> u64 {
        self as u64
    }
}

/// A sensor's time synchronisation as its packets or metadata say it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SyncState {
    /// What the clock follows.
    pub source: SyncSource,
    /// Whether it is locked to it now.
    pub lock: SyncLock,
    /// It has been [`SyncLock::Locked`] since the daemon started: a later state other than
    /// locked is a sync **lost**.
    pub was_locked: bool,
    /// Velodyne: whether the last position packet's `$GPRMC` sentence said its fix valid
    /// (status `A`) or not (`V`); `None` without a sentence (no GPS receiver attached).
    pub nmea_valid: Option<bool>,
}

impl SyncState {
    /// The sync was locked and is not now.
    pub fn lost(&self) -> bool {
        self.was_locked && self.lock != SyncLock::Locked
    }

    /// Sets the lock state, remembering a lock.
    pub fn set_lock(&mut self, lock: SyncLock) {
        self.lock = lock;
        self.was_locked |= lock == SyncLock::Locked;
    }
}

/// `diagnostic_msgs/msg/DiagnosticStatus` levels (the message's `byte` constants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum DiagnosticLevel {
    /// `OK` = 0.
    Ok = 0,
    /// `WARN` = 1.
    Warn = 1,
    /// `ERROR` = 2.
    Error = 2,
    /// `STALE` = 3.
    Stale = 3,
}

/// One `diagnostic_msgs/msg/DiagnosticStatus`: a level, a name (`lidarxdp: <sensor>`), a
/// message, a hardware id and key/value pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiagnosticStatus {
    /// The level.
    pub level: DiagnosticLevel,
    /// What it is about, e.g. `lidarxdp: front`.
    pub name: String,
    /// One line for a person.
    pub message: String,
    /// The hardware it describes (a serial number, or the sensor's model and address).
    pub hardware_id: String,
    /// `diagnostic_msgs/msg/KeyValue` pairs, in order.
    pub values: Vec<(String, String)>,
}
