//! The publisher's counters: one set of relaxed atomics ([`Counters`], written by the
//! publisher thread and the [`super::FrameSender`]s) and its plain snapshot
//! ([`PublisherCounters`], reachable from [`super::PublisherHandle::counters`]). Every counter
//! the publisher keeps is in the snapshot, so an exporter needs nothing else.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::BufferPool;

/// Snapshot of every counter the publisher keeps: monotonic totals unless marked as a gauge.
/// Units are in each field's name or doc (frames, subscribers, bytes, buffers, messages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublisherCounters {
    /// Currently connected subscribers (a gauge; subscribers).
    pub subscribers: u64,
    /// Subscribers accepted since start (subscribers).
    pub subscribers_accepted: u64,
    /// Connections closed at once because `max_subscribers` were connected (connections).
    pub subscribers_rejected: u64,
    /// Subscribers removed: hang-up, send error, stall, protocol error, shutdown (subscribers).
    pub subscribers_disconnected: u64,
    /// Subscribers disconnected because their socket took no byte for the stall timeout
    /// ([`super::PublisherConfig::stall_timeout`]; subscribers).
    pub subscribers_stalled: u64,
    /// Subscribers disconnected for a protocol violation: garbage, unknown sensor or field,
    /// a message only servers send (subscribers).
    pub protocol_errors: u64,
    /// Subscribe requests accepted (requests).
    pub subscriptions: u64,
    /// Frames the [`super::FrameSender`]s put into the input queue (frames).
    pub frames_queued: u64,
    /// Frames dropped by [`super::FrameSender`]s because the input queue was full (frames).
    pub frames_dropped_input_full: u64,
    /// Frames the publisher thread took from the input queue (frames).
    pub frames_in: u64,
    /// Frames completely sent, summed over subscribers (frames).
    pub frames_sent: u64,
    /// Frames dropped from a subscriber's full per-sensor queue, summed over subscribers
    /// (frames).
    pub frames_dropped_queue_full: u64,
    /// Frames dropped because they have more than [`lidarxdp_core::protocol::MAX_POINT_COUNT`] points
    /// (frames).
    pub frames_dropped_too_large: u64,
    /// Packed copies made for subscribers that chose a subset of the fields: one per distinct
    /// field set per frame, never one per subscriber (encodings).
    pub packed_encodings: u64,
    /// Frame messages alive now, queued or being sent to someone (a gauge; messages).
    pub frames_alive: u64,
    /// Largest `frames_alive` seen (messages).
    pub frames_alive_high_water: u64,
    /// Largest number of frames of one sensor ever waiting in one subscriber's queue
    /// (frames, `<= queue_depth`).
    pub queue_high_water: u64,
    /// Bytes sent, all messages, summed over subscribers (bytes).
    pub bytes_sent: u64,
    /// Point buffers in the pool now (a gauge; buffers, `<= pool_cap`).
    pub pool_len: u64,
    /// The pool's cap: most buffers it keeps (buffers).
    pub pool_cap: u64,
    /// Largest `pool_len` seen (buffers).
    pub pool_high_water: u64,
    /// Buffer requests the pool served (requests).
    pub pool_hits: u64,
    /// Buffer requests that found the pool empty or busy: the decoder allocated (requests).
    pub pool_misses: u64,
    /// Buffers returned to the pool and kept (buffers).
    pub pool_returned: u64,
    /// Buffers returned to a full pool and freed (buffers).
    pub pool_discarded: u64,
}

/// Counters of the [`super::FrameSender`]s of one publisher (shared by all clones): the
/// sender's side of [`PublisherCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderCounters {
    /// Frames accepted into the queue ([`PublisherCounters::frames_queued`]).
    pub sent: u64,
    /// Frames dropped because the queue was full
    /// ([`PublisherCounters::frames_dropped_input_full`]).
    pub dropped_queue_full: u64,
}

/// The live counters: relaxed atomics (statistics, not synchronisation), each written by one
/// side (the senders, or the publisher thread).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) subscribers: AtomicU64,
    pub(crate) subscribers_accepted: AtomicU64,
    pub(crate) subscribers_rejected: AtomicU64,
    pub(crate) subscribers_disconnected: AtomicU64,
    pub(crate) subscribers_stalled: AtomicU64,
    pub(crate) protocol_errors: AtomicU64,
    pub(crate) subscriptions: AtomicU64,
    pub(crate) frames_queued: AtomicU64,
    pub(crate) frames_dropped_input_full: AtomicU64,
    pub(crate) frames_in: AtomicU64,
    pub(crate) frames_sent: AtomicU64,
    pub(crate) frames_dropped_queue_full: AtomicU64,
    pub(crate) frames_dropped_too_large: AtomicU64,
    pub(crate) packed_encodings: AtomicU64,
    pub(crate) frames_alive: AtomicU64,
    pub(crate) frames_alive_high_water: AtomicU64,
    pub(crate) queue_high_water: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

impl Counters {
    /// The snapshot, with `pool`'s counters.
    pub(crate) fn snapshot(&self, pool: &BufferPool) -> PublisherCounters {
        let p = pool.counters();
        PublisherCounters {
            subscribers: self.subscribers.load(Relaxed),
            subscribers_accepted: self.subscribers_accepted.load(Relaxed),
            subscribers_rejected: self.subscribers_rejected.load(Relaxed),
            subscribers_disconnected: self.subscribers_disconnected.load(Relaxed),
            subscribers_stalled: self.subscribers_stalled.load(Relaxed),
            protocol_errors: self.protocol_errors.load(Relaxed),
            subscriptions: self.subscriptions.load(Relaxed),
            frames_queued: self.frames_queued.load(Relaxed),
            frames_dropped_input_full: self.frames_dropped_input_full.load(Relaxed),
            frames_in: self.frames_in.load(Relaxed),
            frames_sent: self.frames_sent.load(Relaxed),
            frames_dropped_queue_full: self.frames_dropped_queue_full.load(Relaxed),
            frames_dropped_too_large: self.frames_dropped_too_large.load(Relaxed),
            packed_encodings: self.packed_encodings.load(Relaxed),
            frames_alive: self.frames_alive.load(Relaxed),
            frames_alive_high_water: self.frames_alive_high_water.load(Relaxed),
            queue_high_water: self.queue_high_water.load(Relaxed),
            bytes_sent: self.bytes_sent.load(Relaxed),
            pool_len: p.len,
            pool_cap: p.cap,
            pool_high_water: p.high_water,
            pool_hits: p.hits,
            pool_misses: p.misses,
            pool_returned: p.returned,
            pool_discarded: p.discarded,
        }
    }

    /// The senders' share.
    pub(crate) fn sender(&self) -> SenderCounters {
        SenderCounters {
            sent: self.frames_queued.load(Relaxed),
            dropped_queue_full: self.frames_dropped_input_full.load(Relaxed),
        }
    }
}
