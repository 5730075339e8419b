//! A frame's metadata ([`FrameHeader`]) and the clock of its stamp ([`FrameClock`]): the
//! bottom of the stack, below the point buffer that seals a header into shared memory and the
//! [`crate::frame::Frame`] that carries both.
#![forbid(unsafe_code)]

/// Metadata of one frame. All times are ns; counts are packets of this frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameHeader {
    /// Index of the sensor in the daemon configuration (the filter map's `sensor_id`).
    pub sensor_id: u16,
    /// Per-sensor frame sequence number, starting at 0, +1 per published frame.
    pub sequence: u64,
    /// Frame start time, ns since the Unix epoch on the sensor clock (the time of the first
    /// firing in the frame; [`crate::point::PointXYZIRCAEDT::time_stamp`] is relative to it).
    pub start_ns: u64,
    /// Host receive time of the frame's first packet, ns since the Unix epoch (CLOCK_REALTIME),
    /// or the pcap record time when decoding offline.
    pub host_ns: u64,
    /// Data packets that contributed to this frame.
    pub packets_received: u32,
    /// Data packets the sensor sent for this frame (from azimuth coverage / sequence numbers;
    /// equals `packets_received` when the frame is complete).
    pub packets_expected: u32,
    /// Packets rejected as malformed while this frame was being built.
    pub packets_malformed: u32,
    /// Whole frames (turns) the sensor sent between the previous published frame of this
    /// sensor and this one that never arrived (a sensor-time gap of whole rotation periods);
    /// 0 when nothing was lost or no earlier frame exists.
    pub frames_lost_before: u32,
    /// Which clock [`FrameHeader::start_ns`] is on.
    pub clock: FrameClock,
}

/// The clock of a frame's [`FrameHeader::start_ns`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameClock {
    /// The sensor's own clock (its packet time stamps, PTP/GPS or free-running), ns since the
    /// Unix epoch.
    #[default]
    Sensor = 0,
    /// The host's CLOCK_REALTIME at the receipt of the frame's first packet (or the pcap record
    /// time offline): chosen by `stamp = "host"`, or the fallback when the sensor time is
    /// implausible.
    Host = 1,
}

/// Packet loss, %: `100 (expected − received) / expected` over frames' summed
/// [`FrameHeader::packets_expected`] and [`FrameHeader::packets_received`]; 0 when nothing was
/// expected, and a sum with more packets received than expected counts as no loss.
pub fn loss_percent(expected: u64, received: u64) -> f64 {
    if expected == 0 {
        return 0.0;
    }
    100.0 * expected.saturating_sub(received) as f64 / expected as f64
}
