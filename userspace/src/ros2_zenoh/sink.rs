//! The zenoh sink: every frame of a configured sensor as one `sensor_msgs/msg/PointCloud2` put
//! on rmw_zenoh's key expression of the sensor's topic.
//!
//! # Design
//! - **Never stalls ingest**: [`ZenohSink::offer`] (on the publisher thread) is one
//!   `try_send` of the frame's `Arc` into a bounded queue of [`super::ZenohSettings::queue`]
//!   frames; a full queue drops the frame for this sink alone and counts it
//!   ([`ZenohCounters::dropped`]). The sink's own thread does the rest.
//! - **Best effort, drop under congestion**: each publisher is declared best effort with
//!   `CongestionControl::Drop` (zenoh drops a message for a peer whose link is full instead of
//!   waiting), which is what the QoS its token announces ([`lidarxdp_core::ros2::Qos::LIDAR`])
//!   means to a ROS 2 subscriber.
//! - **No copy of the points**: with a shared-memory pool ([`ShmPool`]) the decoder wrote the
//!   frame's points into a chunk of it, and the publisher sealed the message around them
//!   ([`super::shm::ShmFrames`]); the sink puts that chunk as it is
//!   ([`ZenohCounters::loaned`]). zenoh hands local peers that enabled shared memory a
//!   reference to the chunk, not the bytes; remote peers get the bytes over their link.
//! - **A frame that is not in the pool** (the pool was full when its decoder started it,
//!   [`ZenohCounters::loans_refused`], or no pool): the message is laid out once — CDR prefix,
//!   the points, suffix ([`lidarxdp_core::ros2::PointCloud2Prefix::write_into`]) — in a fresh
//!   chunk, or on the heap when the pool has no free chunk ([`ZenohCounters::shm_exhausted`]);
//!   those copies are counted in [`ZenohCounters::copied_bytes`].
//! - **Liveliness**: the node token (`NN`) and one publisher token (`MP`) per topic are declared
//!   before the first put and live as long as the sink (rmw_zenoh `liveliness_utils.cpp`), so
//!   `ros2 topic list -t` shows the topics with their type, and `ros2 topic info -v` their QoS.
//!   With a pool, a token `lidarxdp/<domain>/shm/<zid>/<protocol>/<segment>` announces its
//!   segment, which lidarxdp's subscribers map when they subscribe, not on their first message.
//! - **Attachment**: per message, rmw_zenoh's 33 bytes (`attachment_helpers.cpp`): sequence
//!   number from 1, source time (CLOCK_REALTIME, ns), and the publisher's GID, the XXH3-128
//!   hash of its liveliness token as rmw_zenoh derives it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use lidarxdp_core::ros2::{Attachment, NodeTokens, topic_key_expr};
use zenoh::Wait;
use zenoh::bytes::ZBytes;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::Publisher;
use zenoh::qos::{CongestionControl, Reliability};
use zenoh::shm::GarbageCollect;

use super::shm::{ChunkLayout, Layouts, ShmFrames, ShmPoints};
use super::{NODE_NAME, ShmPool, ZenohError, ZenohSettings};
use crate::publish::{BufferPool, FrameSink, QueueBytes, SharedFrame, SinkReceiver, SinkThread};

/// The zenoh sink's counters: daemon-wide, no labels (`lidarxdp_zenoh_*`; stats JSON `zenoh`).
pub const ZENOH_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "zenoh",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Snapshot of the zenoh sink's counters.
    pub struct ZenohCounters in ZENOH_COUNTERS;
    shared
    /// Written by the publisher thread (`dropped`) and the sink's thread.
    pub(crate) struct SharedZenohCounters;
    {
        /// One per frame and topic.
        published: Counter "frames" "Frames put on their zenoh topic.",
        /// Its thread was behind: ingest and the other sinks were not held up.
        dropped: Counter "frames" "Frames dropped because the zenoh sink's queue was full.",
        /// CDR `PointCloud2` messages, attachment excluded.
        bytes: Counter "bytes" "Message bytes put on zenoh.",
        shm_frames: Counter "frames" "Frames whose message was in the shared-memory pool.",
        /// The decoder wrote the points into the chunk: nothing copied them.
        loaned: Counter "frames" "Frames put from the shared-memory chunk their decoder wrote, with no copy.",
        /// 0 when every frame was `loaned`.
        copied_bytes: Counter "bytes" "Point bytes the sink copied into a message (frames not written into shared memory).",
        /// Frames of sensors with a topic, and their growth.
        loans: Counter "buffers" "Point buffers lent from the shared-memory pool to the decoders.",
        /// The decoder's own reallocation (a first frame finding its size); the points move,
        /// as a `Vec`'s do, before the frame is sealed.
        grown: Counter "buffers" "Lent point buffers that outgrew their chunk: the decoder moved the points into a bigger one.",
        /// Every chunk was still held by subscribers: the frame was decoded on the heap.
        loans_refused: Counter "buffers" "Point buffers the decoders took from the heap because the shared-memory pool was full.",
        /// Every chunk was still held by subscribers.
        shm_exhausted: Counter "frames" "Frames built on the heap because the shared-memory pool had no free chunk.",
        /// A frame of a sensor with no topic, more than 4 GiB of points, or a put zenoh refused.
        errors: Counter "frames" "Frames the zenoh sink could not publish.",
        imu: Counter "messages" "sensor_msgs/Imu messages put on the sensors' IMU topics.",
        diagnostics: Counter "messages" "diagnostic_msgs/DiagnosticArray messages put on /diagnostics.",
        aux_errors: Counter "messages" "IMU or diagnostics messages zenoh refused.",
        /// Read by [`ZenohHandle::counters`] ([`ShmPool::usage`]); 0 without a pool.
        shm_pool_used_bytes: Gauge "bytes" "Bytes of the shared-memory pool in chunks still referenced (frames being decoded, queued, or held by subscribers).",
        /// Read by [`ZenohHandle::counters`] ([`ShmPool::usage`]); 0 without a pool.
        shm_pool_free_bytes: Gauge "bytes" "Bytes of the shared-memory pool not in a referenced chunk.",
    }
}

/// How long a stopping sink waits for its zenoh session to close.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One topic's publisher and its per-message state.
struct Topic {
    sensor_id: u16,
    frame_id: String,
    publisher: Publisher<'static>,
    /// Keeps the `MP` token declared.
    _token: LivelinessToken,
    gid: [u8; 16],
    sequence: i64,
}

/// What the sink's thread owns.
struct Worker {
    session: zenoh::Session,
    /// Keeps the `NN` token declared.
    _node: LivelinessToken,
    /// Keeps the pool's segment announced, so subscribers map it when they subscribe
    /// ([`lidarxdp_client::zenoh::shm_segment_token`]).
    _segment: Option<LivelinessToken>,
    topics: Vec<Topic>,
    shm: Option<ShmPool>,
    counters: Arc<SharedZenohCounters>,
}

/// The [`FrameSink`] that publishes to zenoh (module documentation).
pub struct ZenohSink {
    thread: SinkThread,
    counters: Arc<SharedZenohCounters>,
    /// The IMU and `/diagnostics` publishers until [`ZenohSink::take_aux`].
    aux: Option<super::ZenohAux>,
}

/// What the daemon keeps of a started sink: its counters and its shared-memory pool.
#[derive(Clone)]
pub struct ZenohHandle {
    counters: Arc<SharedZenohCounters>,
    locators: Vec<String>,
    shm: Option<(ShmPool, Layouts)>,
}

impl ZenohHandle {
    /// The counters now, with the shared-memory pool's use ([`ShmPool::usage`], which collects
    /// the chunks no one references any more first: call it at the metrics period).
    pub fn counters(&self) -> ZenohCounters {
        let mut c = self.counters.snapshot();
        if let Some((pool, _)) = &self.shm {
            (c.shm_pool_used_bytes, c.shm_pool_free_bytes) = pool.usage();
        }
        c
    }

    /// The endpoints the session listens on (e.g. `tcp/127.0.0.1:7447`), as it resolved them.
    pub fn locators(&self) -> &[String] {
        &self.locators
    }

    /// The decoders' point buffers ([`ShmFrames`]): a chunk of the sink's shared-memory pool
    /// for every frame of a sensor with a topic, else (and when the pool is full) a heap buffer
    /// from `heap`. `None` when the sink has no pool.
    pub fn buffer_source(&self, heap: Arc<BufferPool>) -> Option<ShmFrames> {
        let (pool, layouts) = self.shm.as_ref()?;
        Some(ShmFrames::new(
            pool.clone(),
            layouts.clone(),
            heap,
            self.counters.clone(),
        ))
    }
}

/// rmw_zenoh's publisher GID: the XXH3-128 hash of the publisher's liveliness token key, its
/// low 64 bits then its high 64 bits, each little-endian (`liveliness_utils.cpp`,
/// `hash_gid`).
pub(crate) fn gid_of(token_key: &str) -> [u8; 16] {
    let h = xxhash_rust::xxh3::xxh3_128(token_key.as_bytes());
    let mut gid = [0u8; 16];
    gid[..8].copy_from_slice(&(h as u64).to_le_bytes());
    gid[8..].copy_from_slice(&((h >> 64) as u64).to_le_bytes());
    gid
}

impl ZenohSink {
    /// Opens the session, declares the tokens and one
    /// publisher per topic, and starts the sink's thread, which writes messages into `shm`
    /// (or the heap when `None`). Call it after the capabilities are
    /// dropped: the session's runtime threads start here.
    ///
    /// # Errors
    /// [`ZenohError`]: the configuration file, the session, the pool or a declaration.
    pub fn start(
        settings: &ZenohSettings,
        shm: Option<ShmPool>,
    ) -> Result<(ZenohSink, ZenohHandle), ZenohError> {
        let shm_bytes = shm.as_ref().map_or(0, ShmPool::bytes);
        let layouts: Vec<(u16, Arc<ChunkLayout>)> = settings
            .topics
            .iter()
            .filter_map(|t| Some((t.sensor_id, Arc::new(ChunkLayout::new(&t.frame_id)?))))
            .collect();
        let session = super::open_session(&settings.session)?;
        let decl = |what: &str, e: zenoh::Error| ZenohError::Session(format!("{what}: {e}"));
        let zid = session.zid().to_string();
        let locators: Vec<String> = session
            .info()
            .locators()
            .wait()
            .iter()
            .map(ToString::to_string)
            .collect();
        let node = NodeTokens {
            domain_id: settings.domain_id,
            zid: &zid,
            node_id: 0,
            enclave: "/",
            namespace: "/",
            name: NODE_NAME,
        };
        let node_key = node.node();
        let node_token = session
            .liveliness()
            .declare_token(node_key.clone())
            .wait()
            .map_err(|e| decl(&format!("declare token {node_key}"), e))?;
        // The pool's segment, for subscribers to map before the first message.
        let segment_token = match shm.as_ref().and_then(ShmPool::segment) {
            Some((protocol, segment)) => {
                let key = lidarxdp_client::zenoh::shm_segment_token(
                    settings.domain_id,
                    &zid,
                    protocol,
                    segment,
                );
                Some(
                    session
                        .liveliness()
                        .declare_token(key.clone())
                        .wait()
                        .map_err(|e| decl(&format!("declare token {key}"), e))?,
                )
            }
            None => None,
        };
        let mut topics = Vec::with_capacity(settings.topics.len());
        for (i, t) in settings.topics.iter().enumerate() {
            let key = topic_key_expr(settings.domain_id, &t.topic, settings.distro);
            let publisher = session
                .declare_publisher(key.clone())
                .congestion_control(CongestionControl::Drop)
                .reliability(Reliability::BestEffort)
                // Sent at once, not held for zenoh's batching window (1 ms by default).
                .express(true)
                .wait()
                .map_err(|e| decl(&format!("declare publisher {key}"), e))?;
            let token_key = node.publisher(i as u64 + 1, &t.topic, settings.distro, &settings.qos);
            let token = session
                .liveliness()
                .declare_token(token_key.clone())
                .wait()
                .map_err(|e| decl(&format!("declare token {token_key}"), e))?;
            log::info!("zenoh: sensor {} as {} on key {key}", t.sensor_id, t.topic);
            topics.push(Topic {
                sensor_id: t.sensor_id,
                frame_id: t.frame_id.clone(),
                publisher,
                _token: token,
                gid: gid_of(&token_key),
                sequence: 0,
            });
        }
        let counters = Arc::new(SharedZenohCounters::default());
        let aux = super::ZenohAux::declare(
            &session,
            settings,
            &node,
            settings.topics.len() as u64 + 1,
            counters.clone(),
        )?;
        let shm_handle = shm.clone().map(|p| (p, layouts));
        let worker = Worker {
            session,
            _node: node_token,
            _segment: segment_token,
            topics,
            shm,
            counters: counters.clone(),
        };
        let thread = SinkThread::spawn("zenoh-sink", settings.queue, move |rx| worker.run(rx))
            .map_err(|e| ZenohError::Session(format!("spawn the sink thread: {e}")))?;
        log::info!(
            "zenoh: session {zid} listening on {locators:?}, domain {}, shared memory {} MiB",
            settings.domain_id,
            shm_bytes >> 20
        );
        Ok((
            ZenohSink {
                thread,
                counters: counters.clone(),
                aux: Some(aux),
            },
            ZenohHandle {
                counters,
                locators,
                shm: shm_handle,
            },
        ))
    }
}

impl ZenohSink {
    /// The IMU and `/diagnostics` publishers, for the daemon's [`crate::publish::AuxThread`]
    /// (once; `None` after).
    pub fn take_aux(&mut self) -> Option<super::ZenohAux> {
        self.aux.take()
    }
}

impl FrameSink for ZenohSink {
    fn name(&self) -> &str {
        "zenoh"
    }

    fn offer(&mut self, frame: &Arc<SharedFrame>, _now: Instant) {
        self.thread
            .offer_counted(frame, &self.counters.dropped, &self.counters.errors);
    }

    fn queue_bytes(&self) -> Option<QueueBytes> {
        Some(self.thread.queue_bytes())
    }
}

impl Worker {
    fn run(mut self, rx: SinkReceiver) {
        while let Ok(frame) = rx.recv() {
            if let Err(e) = self.publish(&frame) {
                self.counters.errors.fetch_add(1, Relaxed);
                log::debug!(
                    "zenoh: frame {} not published: {e}",
                    frame.header().sequence
                );
            }
        }
        let Worker {
            session,
            _node,
            _segment,
            topics,
            ..
        } = self;
        drop(topics);
        drop(_segment);
        drop(_node);
        // zenoh waits up to 10 s for a peer that does not read (a stopped subscriber) before
        // it gives up closing; a stopping daemon waits at most CLOSE_WAIT for it.
        let (tx, rx) = std::sync::mpsc::channel();
        let closer = std::thread::Builder::new()
            .name("zenoh-close".into())
            .spawn(move || {
                let _ = tx.send(session.close().wait());
            });
        match closer.map(|_| rx.recv_timeout(CLOSE_WAIT)) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => log::warn!("zenoh: closing the session: {e}"),
            Ok(Err(_)) => log::warn!(
                "zenoh: the session had not closed after {CLOSE_WAIT:?} (a peer is not \
                 reading); exiting without waiting"
            ),
            Err(e) => log::warn!("zenoh: closing the session: spawn: {e}"),
        }
    }

    fn publish(&mut self, frame: &SharedFrame) -> Result<(), PublishError> {
        let h = frame.header();
        let Some(i) = self.topics.iter().position(|t| t.sensor_id == h.sensor_id) else {
            return Err(PublishError::NoTopic(h.sensor_id));
        };
        let frame_id = &self.topics[i].frame_id;
        let loaned = frame
            .memory()
            .and_then(|m| m.as_any().downcast_ref::<ShmPoints>())
            .and_then(|m| m.message(frame_id));
        let (payload, len): (ZBytes, usize) = match loaned {
            Some(message) => {
                self.counters.loaned.fetch_add(1, Relaxed);
                self.counters.shm_frames.fetch_add(1, Relaxed);
                (message.clone().into(), message.len())
            }
            None => self.copy_message(frame, frame_id)?,
        };
        let topic = &mut self.topics[i];
        topic.sequence += 1;
        let attachment = Attachment {
            sequence_number: topic.sequence,
            // A published stamp: CLOCK_REALTIME.
            source_timestamp_ns: i64::try_from(crate::sys::clock::realtime_ns())
                .unwrap_or(i64::MAX),
            gid: topic.gid,
        }
        .encode();
        topic
            .publisher
            .put(payload)
            .attachment(attachment.to_vec())
            .wait()
            .map_err(|e| PublishError::Put(e.to_string()))?;
        self.counters.published.fetch_add(1, Relaxed);
        self.counters.bytes.fetch_add(len as u64, Relaxed);
        Ok(())
    }
}

impl Worker {
    /// The message of a frame the decoder did not write into the pool: prefix, the points
    /// (copied, counted in `copied_bytes`), suffix, in a fresh chunk or on the heap.
    fn copy_message(
        &self,
        frame: &SharedFrame,
        frame_id: &str,
    ) -> Result<(ZBytes, usize), PublishError> {
        let points: &[u8] = frame.points().as_bytes();
        let prefix = frame.pointcloud2_prefix(frame_id)?;
        let len = prefix.message_len();
        let chunk = self
            .shm
            .as_ref()
            .map(|p| p.provider.alloc(len).with_policy::<GarbageCollect>().wait());
        let payload: ZBytes = match chunk {
            Some(Ok(mut buf)) => {
                prefix.write_into(points, &mut buf[..])?;
                self.counters.shm_frames.fetch_add(1, Relaxed);
                buf.into()
            }
            other => {
                if other.is_some() {
                    self.counters.shm_exhausted.fetch_add(1, Relaxed);
                }
                let mut v = Vec::new();
                prefix.write_message(points, &mut v)?;
                v.into()
            }
        };
        self.counters
            .copied_bytes
            .fetch_add(points.len() as u64, Relaxed);
        Ok((payload, len))
    }
}

/// Why one frame was not published (logged and counted in `errors`; the sink goes on).
#[derive(Debug, thiserror::Error)]
enum PublishError {
    /// The frame's sensor id is not in the plan's topics.
    #[error("sensor {0} has no topic")]
    NoTopic(u16),
    /// The PointCloud2 CDR could not be written (a frame_id over the CDR string limit).
    #[error(transparent)]
    Cdr(#[from] lidarxdp_core::ros2::CdrError),
    /// zenoh refused the put (its message).
    #[error("put: {0}")]
    Put(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GID is XXH3-128 of the token key, low half then high half, little-endian: the
    /// published test vector of XXH3-128 for the empty input with seed 0 is
    /// 0x99aa06d3014798d86001c324468d497f (xxHash `XXH3_128bits` self-test).
    #[test]
    fn gid_is_xxh3_128_low_then_high_little_endian() {
        let gid = gid_of("");
        assert_eq!(
            gid,
            [
                0x7f, 0x49, 0x8d, 0x46, 0x24, 0xc3, 0x01, 0x60, 0xd8, 0x98, 0x47, 0x01, 0xd3, 0x06,
                0xaa, 0x99
            ]
        );
        assert_ne!(gid_of("a"), gid_of("b"));
    }
}
