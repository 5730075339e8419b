//! The seam between the publisher and the places frames go: a [`FrameSink`] takes each finished
//! frame as a [`SharedFrame`]. The TCP server ([`super::fanout::Fanout`], driven by io_uring) is
//! always there; zenoh, DDS, Foxglove and the browser view are further sinks beside it, given
//! to [`super::Publisher::spawn_on`]. Every sink reads the same points, where the decoder wrote
//! them (a heap buffer, or the shared-memory chunk lent to the frame: [`lidarxdp_core::point_buf`]).
//!
//! # Queued bytes
//! Each sink with a queue exports the bytes of the frames waiting in it,
//! `lidarxdp_sink_queue_bytes{sink}` ([`SinkQueueCounters`], read through
//! [`FrameSink::queue_bytes`]): a [`QueueBytes`] atomic that [`SinkThread::offer`] adds a
//! frame's point bytes to before queueing it (taken off again when the queue refuses it) and
//! [`SinkReceiver`] takes off when the sink's thread receives it, or when the queue is dropped
//! with frames still in it. No lock is added on the publisher thread: one relaxed
//! `fetch_add` per queued frame, one `fetch_sub` per received one. A frame's bytes are its
//! point buffer's ([`PointBuf::as_bytes`]); a frame queued for several sinks counts in each
//! (they share one buffer). The TCP subscribers' queues are counted by the fan-out
//! ([`super::PublisherHandle::queue_bytes`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::BufferPool;
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point_buf::{PointBuf, PointMemory, SealedPoints};
use lidarxdp_core::ros2::{CdrError, PointCloud2Prefix};

/// The sinks' queues: one sample per sink with a queue, label `sink` (`lidarxdp_sink_*`;
/// stats JSON `sink_queues[]`).
pub const SINK_QUEUES: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "sink",
    labels: &["sink"],
};

lidarxdp_core::counter_set! {
    /// One sink's queue (module documentation, "Queued bytes").
    pub struct SinkQueueCounters in SINK_QUEUES;
    {
        /// [`QueueBytes::get`].
        queue_bytes: Gauge "bytes" "Bytes of the frames waiting in the sink's queue: their points (tcp: the frame messages held for subscribers); a frame queued for several sinks counts in each.",
    }
}

/// Bytes of the frames waiting in one sink's queue (module documentation, "Queued bytes"):
/// a relaxed atomic shared by its clones, added to when a frame is queued and taken off when
/// it leaves the queue.
#[derive(Clone, Debug, Default)]
pub struct QueueBytes(Arc<AtomicU64>);

impl QueueBytes {
    /// The bytes waiting now.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }

    /// `n` more bytes wait.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }

    /// `n` bytes left the queue. Every `sub` follows its `add`, so the value never wraps.
    pub fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Relaxed);
    }

    /// The counters of this queue now.
    pub fn counters(&self) -> SinkQueueCounters {
        SinkQueueCounters {
            queue_bytes: self.get(),
        }
    }
}

/// Frames per sensor a sink thread's queue holds: one being sent and one waiting.
pub const SINK_QUEUE_PER_SENSOR: usize = 2;

/// The queue, in frames, of a sink thread (zenoh, DDS, Foxglove) that serves `sensors`
/// sensors: [`SINK_QUEUE_PER_SENSOR`] frames each, at least 4. Sensors cut their frames at
/// about the same moment (each at its cut angle, all at 10 or 20 Hz), so a sink of `n` sensors
/// receives bursts of `n` frames, which a queue shorter than the burst would drop (10 VLP-16s
/// on a queue of 4 lost 18.7 % of the zenoh frames).
pub fn sink_queue(sensors: usize) -> usize {
    sensors.saturating_mul(SINK_QUEUE_PER_SENSOR).max(4)
}

/// A finished frame shared by every sink (through `Arc`) without a copy. When the last holder
/// drops it, its point buffer goes back to the [`BufferPool`] the decoders take from.
pub struct SharedFrame {
    header: FrameHeader,
    /// `None` only while dropping.
    points: Option<SealedPoints>,
    pool: Arc<BufferPool>,
}

impl std::fmt::Debug for SharedFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFrame")
            .field("header", &self.header)
            .field("points", &self.points().len())
            .finish_non_exhaustive()
    }
}

impl SharedFrame {
    /// Shares `frame`, sealing its points ([`lidarxdp_core::point_buf::PointBuf::seal`]: a
    /// shared-memory loan writes the PointCloud2 message around them); a heap buffer returns
    /// to `pool` when the last `Arc` is dropped, a loan to its shared-memory pool once every
    /// reader let go.
    pub fn new(frame: Frame, pool: Arc<BufferPool>) -> Arc<Self> {
        Arc::new(SharedFrame {
            points: Some(frame.points.seal(&frame.header)),
            header: frame.header,
            pool,
        })
    }

    /// The frame header.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// The points, in the sensor's layout ([`PointBuf::point_type`]).
    pub fn points(&self) -> &PointBuf {
        static EMPTY: PointBuf = PointBuf::new();
        self.points.as_ref().map_or(&EMPTY, |p| p.buf())
    }

    /// Bytes of the frame's points ([`PointBuf::as_bytes`]): what a queued frame counts in
    /// [`QueueBytes`].
    pub fn point_bytes(&self) -> u64 {
        self.points().as_bytes().len() as u64
    }

    /// The shared-memory loan the points live in (`None` on the heap): the zenoh sink puts its
    /// chunk as it is.
    pub fn memory(&self) -> Option<&dyn PointMemory> {
        self.points.as_ref().and_then(|p| p.memory())
    }

    /// The CDR prefix of this frame as a ROS 2 `sensor_msgs/msg/PointCloud2` with `frame_id`
    /// (stamp = `start_ns`, the sensor's point layout), for the sinks that publish it
    /// (zenoh, Foxglove); the points follow it unchanged ([`lidarxdp_core::ros2`]).
    ///
    /// # Errors
    /// [`CdrError::DataTooLong`] above `u32::MAX` points or bytes; [`CdrError::NulInString`]
    /// for a NUL in `frame_id`.
    pub fn pointcloud2_prefix(&self, frame_id: &str) -> Result<PointCloud2Prefix, CdrError> {
        let p = self.points();
        lidarxdp_core::ros2::points_prefix(self.header.start_ns, frame_id, p.point_type(), p.len())
    }
}

impl Drop for SharedFrame {
    fn drop(&mut self) {
        if let Some(buf) = self.points.take().and_then(SealedPoints::into_reusable) {
            self.pool.give(buf);
        }
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
    /// The bytes of the frames waiting in the sink's queue, for the metrics; `None` for a
    /// sink without a queue (the default).
    fn queue_bytes(&self) -> Option<QueueBytes> {
        None
    }
}

/// What [`SinkThread::offer`] did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offered {
    /// Queued for the sink's thread.
    Queued,
    /// The queue was full: the frame is not sent by this sink (the caller counts it).
    Full,
    /// The sink's thread has ended: nothing is sent any more (the caller counts it).
    Closed,
}

/// The usual shape of a sink that must not block the publisher: [`FrameSink::offer`] is one
/// `try_send` into a bounded queue, and a thread of its own does the slow work (encoding,
/// network). Dropping it (or [`SinkThread::close`]) ends the queue, lets the thread finish the
/// frames already queued, and joins it.
pub struct SinkThread {
    name: String,
    tx: Option<std::sync::mpsc::SyncSender<Arc<SharedFrame>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    queued: QueueBytes,
}

/// The sink thread's end of a [`SinkThread`]'s queue: an `mpsc` receiver that takes each
/// frame's bytes off the queue's [`QueueBytes`] as it hands the frame out, and those of the
/// frames still queued when it is dropped.
pub struct SinkReceiver {
    rx: std::sync::mpsc::Receiver<Arc<SharedFrame>>,
    queued: QueueBytes,
}

impl SinkReceiver {
    fn taken(&self, frame: Arc<SharedFrame>) -> Arc<SharedFrame> {
        self.queued.sub(frame.point_bytes());
        frame
    }

    /// The next frame, waiting for it ([`std::sync::mpsc::Receiver::recv`]).
    ///
    /// # Errors
    /// The queue is empty and closed.
    pub fn recv(&self) -> Result<Arc<SharedFrame>, std::sync::mpsc::RecvError> {
        self.rx.recv().map(|f| self.taken(f))
    }

    /// The next frame, waiting at most `timeout`
    /// ([`std::sync::mpsc::Receiver::recv_timeout`]).
    ///
    /// # Errors
    /// Nothing came within `timeout`, or the queue is empty and closed.
    pub fn recv_timeout(
        &self,
        timeout: Duration,
    ) -> Result<Arc<SharedFrame>, std::sync::mpsc::RecvTimeoutError> {
        self.rx.recv_timeout(timeout).map(|f| self.taken(f))
    }
}

impl Drop for SinkReceiver {
    fn drop(&mut self) {
        while let Ok(f) = self.rx.try_recv() {
            self.queued.sub(f.point_bytes());
        }
    }
}

impl SinkThread {
    /// Starts thread `name` running `work` on the receiving end of a queue of `depth` frames
    /// (at least 1).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn spawn<W>(name: &str, depth: usize, work: W) -> std::io::Result<Self>
    where
        W: FnOnce(SinkReceiver) + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(depth.max(1));
        let queued = QueueBytes::default();
        let rx = SinkReceiver {
            rx,
            queued: queued.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || work(rx))?;
        Ok(SinkThread {
            name: name.to_owned(),
            tx: Some(tx),
            thread: Some(thread),
            queued,
        })
    }

    /// The bytes of the frames waiting in the queue ([`FrameSink::queue_bytes`]).
    pub fn queue_bytes(&self) -> QueueBytes {
        self.queued.clone()
    }

    /// Hands `frame` to the thread without waiting. Its bytes count in
    /// [`Self::queue_bytes`] from before it is queued (so the thread never takes off what was
    /// not yet added) until the thread receives it.
    pub fn offer(&self, frame: &Arc<SharedFrame>) -> Offered {
        use std::sync::mpsc::TrySendError;
        let bytes = frame.point_bytes();
        self.queued.add(bytes);
        let r = match self.tx.as_ref().map(|tx| tx.try_send(frame.clone())) {
            Some(Ok(())) => return Offered::Queued,
            Some(Err(TrySendError::Full(_))) => Offered::Full,
            Some(Err(TrySendError::Disconnected(_))) | None => Offered::Closed,
        };
        self.queued.sub(bytes);
        r
    }

    /// [`Self::offer`], counting a frame the queue had no room for in `dropped` and one the
    /// ended thread can no longer take in `errors` (the sinks' `dropped` / `errors` counters).
    pub fn offer_counted(
        &self,
        frame: &Arc<SharedFrame>,
        dropped: &std::sync::atomic::AtomicU64,
        errors: &std::sync::atomic::AtomicU64,
    ) {
        match self.offer(frame) {
            Offered::Queued => {}
            Offered::Full => {
                dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Offered::Closed => {
                errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Ends the queue and waits until the thread has finished what was queued; logs a panic of
    /// the thread. Idempotent.
    pub fn close(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            log::error!("{}: the sink thread panicked", self.name);
        }
    }
}

impl Drop for SinkThread {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lidarxdp_core::point::PointXYZIRCAEDT;

    fn frame(points: usize, pool: &Arc<BufferPool>) -> Arc<SharedFrame> {
        SharedFrame::new(
            Frame {
                header: FrameHeader::default(),
                points: vec![PointXYZIRCAEDT::default(); points].into(),
            },
            pool.clone(),
        )
    }

    /// A sink thread's queue bytes: each queued frame's points (32 bytes a point) from its
    /// `offer` until the thread receives it; a frame the full queue refused never counts; the
    /// frames left in the queue when the thread ends leave the count with it.
    #[test]
    fn queue_bytes_follow_the_frames_in_the_queue() {
        let pool = Arc::new(BufferPool::new(4));
        let (go, wait) = std::sync::mpsc::channel::<usize>();
        let (took, taken) = std::sync::mpsc::channel::<u64>();
        let mut t = SinkThread::spawn("test-sink", 3, move |rx| {
            // Receives as many frames as told, each time, then ends (dropping the rest).
            while let Ok(n) = wait.recv() {
                for _ in 0..n {
                    let f = rx.recv().unwrap();
                    took.send(f.point_bytes()).unwrap();
                }
            }
        })
        .unwrap();
        let q = t.queue_bytes();
        assert_eq!(q.get(), 0);
        let frames = [
            frame(100, &pool),
            frame(10, &pool),
            frame(1, &pool),
            frame(7, &pool),
        ];
        assert_eq!(t.offer(&frames[0]), Offered::Queued);
        assert_eq!(t.offer(&frames[1]), Offered::Queued);
        assert_eq!(t.offer(&frames[2]), Offered::Queued);
        assert_eq!(t.offer(&frames[3]), Offered::Full);
        assert_eq!(q.get(), 111 * 32);
        go.send(1).unwrap();
        assert_eq!(taken.recv().unwrap(), 100 * 32);
        assert_eq!(q.get(), 11 * 32);
        drop(go);
        t.close();
        assert_eq!(q.get(), 0);
    }
}
