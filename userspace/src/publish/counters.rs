//! The publisher's counters: one set of relaxed atomics ([`Counters`], written by the
//! publisher thread and the [`super::FrameSender`]s) and its plain snapshot
//! ([`PublisherCounters`], reachable from [`super::PublisherHandle::counters`]). Every counter
//! the publisher keeps is in the snapshot, so an exporter needs nothing else.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::PoolCounters;

/// The publisher's counters: daemon-wide, no labels (`lidarxdp_publisher_*`).
pub const PUBLISHER_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "publisher",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Snapshot of every counter the publisher keeps (monotonic totals unless a gauge), the
    /// pool's included ([`PublisherCounters::pool`]).
    pub struct PublisherCounters in PUBLISHER_COUNTERS;
    shared
    /// Written by the publisher thread and the [`super::FrameSender`]s.
    pub(crate) struct Counters;
    {
        subscribers: Gauge "subscribers" "Currently connected subscribers.",
        subscribers_accepted: Counter "subscribers" "Subscribers accepted.",
        /// Because `max_subscribers` were connected.
        subscribers_rejected: Counter "connections" "Connections closed at once: the maximum number of subscribers was connected, or the publisher was stopping.",
        /// Hang-up, send error, stall, protocol error, shutdown.
        subscribers_disconnected: Counter "subscribers" "Subscribers removed.",
        subscribers_stalled: Counter "subscribers" "Subscribers disconnected because their send made no progress for the stall timeout.",
        /// Garbage, a wrong version, an unknown sensor or field.
        protocol_errors: Counter "subscribers" "Subscribers disconnected for a protocol violation.",
        subscriptions: Counter "requests" "Subscribe requests accepted.",
        /// By [`super::FrameSender`]s.
        frames_queued: Counter "frames" "Frames accepted into the publisher input queue.",
        frames_in: Counter "frames" "Frames taken from the input queue.",
        frames_sent: Counter "frames" "Frames completely sent, summed over subscribers.",
        frames_dropped_queue_full: Counter "frames" "Frames dropped from a subscriber's full queue, summed over subscribers.",
        /// By [`super::FrameSender`]s.
        frames_dropped_input_full: Counter "frames" "Frames dropped because the publisher input queue was full.",
        /// More than [`lidarxdp_core::protocol::MAX_POINT_COUNT`] points.
        frames_dropped_too_large: Counter "frames" "Frames dropped because they have too many points for the protocol.",
        /// One per distinct field set per frame, never one per subscriber.
        packed_encodings: Counter "encodings" "Packed copies made for subscribers that chose a subset of the point fields.",
        frames_alive: Gauge "frames" "Frame messages alive now (queued or being sent to someone).",
        frames_alive_high_water: Gauge "frames" "Largest number of frame messages alive at once.",
        /// `<= queue_depth` per sensor.
        queue_high_water: Gauge "frames" "Largest number of frames of one sensor ever waiting in one subscriber's queue.",
        /// By the [`super::ImuToTcp`] aux sink.
        imu_queued: Counter "messages" "IMU readings accepted into the publisher's IMU input queue.",
        /// By the [`super::ImuToTcp`] aux sink.
        imu_dropped_input_full: Counter "messages" "IMU readings dropped because the publisher's IMU input queue was full.",
        imu_sent: Counter "messages" "IMU messages completely sent, summed over subscribers.",
        /// Past [`super::IMU_QUEUE_PER_SUBSCRIBER`].
        imu_dropped_queue_full: Counter "messages" "IMU messages dropped from a subscriber's full IMU queue, summed over subscribers.",
        /// All messages.
        bytes_sent: Counter "bytes" "Bytes sent to subscribers.",
    }
    extra {
        /// The point-buffer pool.
        pub pool: PoolCounters,
    }
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}
