//! A finished scan (frame): header plus points, the unit that crosses from the decoder
//! thread to the publisher.

use crate::point::PointXYZIRCAEDT;

/// Metadata of one frame. All times are ns; counts are packets of this frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameHeader {
    /// Index of the sensor in the daemon configuration (the filter map's `sensor_id`).
    pub sensor_id: u16,
    /// Per-sensor frame sequence number, starting at 0, +1 per published frame.
    pub sequence: u64,
    /// Frame start time, ns since the Unix epoch on the sensor clock (the time of the first
    /// firing in the frame; [`PointXYZIRCAEDT::time_stamp`] is relative to it).
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
}

/// A finished scan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    /// Metadata.
    pub header: FrameHeader,
    /// Points in firing order.
    pub points: Vec<PointXYZIRCAEDT>,
}
