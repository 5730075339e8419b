//! The seam between the publisher and the places frames go: a [`FrameSink`] takes each finished
//! frame as a [`SharedFrame`]. The TCP server ([`super::fanout::Fanout`], driven by io_uring) is
//! the one sink today; a zenoh publisher or a WebSocket view would be further sinks beside it,
//! given to [`super::Publisher::spawn_on`].

use std::sync::Arc;
use std::time::Instant;

use super::BufferPool;
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;

/// A finished frame shared by every sink (through `Arc`) without a copy. When the last holder
/// drops it, its point buffer goes back to the [`BufferPool`] the decoders take from.
pub struct SharedFrame {
    header: FrameHeader,
    points: Vec<PointXYZIRCAEDT>,
    pool: Arc<BufferPool>,
}

impl std::fmt::Debug for SharedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFrame")
            .field("header", &self.header)
            .field("points", &self.points.len())
            .finish_non_exhaustive()
    }
}

impl SharedFrame {
    /// Shares `frame`; its buffer returns to `pool` when the last `Arc` is dropped.
    pub fn new(frame: Frame, pool: Arc<BufferPool>) -> Arc<Self> {
        Arc::new(SharedFrame {
            header: frame.header,
            points: frame.points,
            pool,
        })
    }

    /// The frame header.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// The points (Autoware `PointXYZIRCAEDT`, 32 bytes each).
    pub fn points(&self) -> &[PointXYZIRCAEDT] {
        &self.points
    }
}

impl Drop for SharedFrame {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.points));
    }
}

/// A destination of finished frames, run on the publisher thread.
///
/// Contract: [`offer`](Self::offer) is called once per frame taken from the input queue, in
/// queue order, and must not block (it runs on the thread that serves every subscriber); a
/// sink that needs to wait hands the frame to its own thread or queue. A sink may keep the
/// `Arc` as long as it needs the points; the buffer returns to the pool when every sink has
/// dropped it.
pub trait FrameSink: Send {
    /// Short name for logs (`tcp`, ...).
    fn name(&self) -> &str;
    /// Takes one frame; `now` is the publisher thread's monotonic time of the hand-over.
    fn offer(&mut self, frame: &Arc<SharedFrame>, now: Instant);
}
