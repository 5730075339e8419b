//! Reading a `PointCloud2` topic from zenoh: `lidarxdp subscribe zenoh:/lidar/front/points`.
//!
//! A message that came through shared memory is read in place: [`ZenohFrame::points`] is a
//! view of the chunk the daemon's sink wrote, mapped into this process (zenoh's POSIX
//! shared-memory client maps the publisher's segment read-only-by-convention; the chunk stays
//! allocated until every holder drops its sample). A message that came over a network link is
//! one contiguous buffer in this process, read in place as well; only a message zenoh
//! delivered in several fragments is joined into one buffer first.

use std::borrow::Cow;
use std::time::Duration;

use lidarxdp_core::point::{POINT_FIELDS, POINT_SIZE, PointXYZIRCAEDT};
use lidarxdp_core::ros2::{
    Attachment, CdrReadError, Distro, FieldRef, PointCloud2View, topic_key_expr,
};
use zenoh::Wait;
use zenoh::handlers::FifoChannelHandler;
use zenoh::pubsub::Subscriber;
use zenoh::sample::Sample;

use super::ZenohError;

/// A subscription to one `PointCloud2` topic.
pub struct ZenohSubscriber {
    /// Kept open while the subscriber lives.
    _session: zenoh::Session,
    subscriber: Subscriber<FifoChannelHandler<Sample>>,
    key: String,
}

impl ZenohSubscriber {
    /// Opens a session configured by `source` ([`super::session_config`]) and subscribes to
    /// `topic` (a fully qualified ROS 2 topic such as `/lidar/front/points`) in `domain_id`
    /// with `distro`'s type hash.
    ///
    /// # Errors
    /// [`ZenohError`]: the configuration file, the session, or the declaration.
    pub fn open(
        source: &super::SessionConfig,
        domain_id: u32,
        topic: &str,
        distro: Distro,
    ) -> Result<Self, ZenohError> {
        let session = super::open_session(source)?;
        let key = topic_key_expr(domain_id, topic, distro);
        let subscriber = session
            .declare_subscriber(key.clone())
            .wait()
            .map_err(|e| ZenohError::Session(format!("declare subscriber {key}: {e}")))?;
        Ok(ZenohSubscriber {
            _session: session,
            subscriber,
            key,
        })
    }

    /// The key expression subscribed to.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The next message, waiting at most `timeout`; `None` if none came.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<ZenohFrame> {
        self.subscriber
            .recv_timeout(timeout)
            .ok()
            .flatten()
            .map(ZenohFrame::new)
    }
}

/// Why a received message is not a lidarxdp point cloud.
#[derive(Debug, thiserror::Error)]
pub enum ZenohFrameError {
    /// Not a readable `PointCloud2`.
    #[error(transparent)]
    Cdr(#[from] CdrReadError),
    /// A `PointCloud2` with other point fields than lidarxdp's 32-byte `PointXYZIRCAEDT`.
    #[error(
        "PointCloud2 fields are not PointXYZIRCAEDT (point_step {point_step}, {fields} fields)"
    )]
    Layout {
        /// Its `point_step`.
        point_step: u32,
        /// Its number of fields.
        fields: usize,
    },
}

/// One received message.
pub struct ZenohFrame {
    sample: Sample,
    /// The joined bytes, only when zenoh delivered the payload in several fragments.
    joined: Option<Vec<u8>>,
}

impl ZenohFrame {
    fn new(sample: Sample) -> Self {
        let joined = match sample.payload().to_bytes() {
            Cow::Borrowed(_) => None,
            Cow::Owned(v) => Some(v),
        };
        ZenohFrame { sample, joined }
    }

    /// The whole CDR message.
    pub fn bytes(&self) -> &[u8] {
        if let Some(v) = &self.joined {
            return v;
        }
        match self.sample.payload().to_bytes() {
            Cow::Borrowed(b) => b,
            // A payload is immutable: one that was one slice at construction still is.
            Cow::Owned(_) => &[],
        }
    }

    /// Whether the message is read in place from the publisher's shared memory.
    pub fn in_shared_memory(&self) -> bool {
        self.joined.is_none() && self.sample.payload().as_shm().is_some()
    }

    /// Whether the bytes were joined from fragments (a copy in this process).
    pub fn joined(&self) -> bool {
        self.joined.is_some()
    }

    /// The rmw_zenoh attachment (sequence number, source time, GID), if present and well
    /// formed.
    pub fn attachment(&self) -> Option<Attachment> {
        self.sample
            .attachment()
            .and_then(|a| Attachment::decode(&a.to_bytes()))
    }

    /// The message read in place.
    ///
    /// # Errors
    /// [`CdrReadError`] if it is not a well-formed little-endian `PointCloud2`.
    pub fn view(&self) -> Result<PointCloud2View<'_>, CdrReadError> {
        PointCloud2View::parse(self.bytes())
    }

    /// The points, in place (no copy), when the cloud has lidarxdp's layout.
    ///
    /// # Errors
    /// [`ZenohFrameError`]: not a `PointCloud2`, or other fields than `PointXYZIRCAEDT`.
    pub fn points(&self) -> Result<&[PointXYZIRCAEDT], ZenohFrameError> {
        points_of(&self.view()?)
    }
}

/// The points of a parsed message, in place, when the cloud has lidarxdp's layout (for a
/// caller that also reads the header, so the message is parsed once).
///
/// # Errors
/// [`ZenohFrameError::Layout`]: other fields than `PointXYZIRCAEDT`, or misaligned data.
pub fn points_of<'a>(v: &PointCloud2View<'a>) -> Result<&'a [PointXYZIRCAEDT], ZenohFrameError> {
    let ours = v.point_step as usize == POINT_SIZE
        && !v.is_bigendian
        && v.fields.len() == POINT_FIELDS.len()
        && v.fields
            .iter()
            .zip(POINT_FIELDS.iter())
            .all(|(a, b)| *a == FieldRef::from(b));
    if !ours {
        return Err(ZenohFrameError::Layout {
            point_step: v.point_step,
            fields: v.fields.len(),
        });
    }
    // `data` starts at a multiple of 4 in the message (its length word is 4-aligned), and
    // zenoh's buffers start 8-aligned, so the cast to 4-aligned points holds; a buffer
    // that breaks this would be refused here rather than misread.
    bytemuck::try_cast_slice(v.data).map_err(|_| ZenohFrameError::Layout {
        point_step: v.point_step,
        fields: v.fields.len(),
    })
}
