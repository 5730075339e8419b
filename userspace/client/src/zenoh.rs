//! Reading a ROS 2 `PointCloud2` topic from zenoh (feature `zenoh`), and the zenoh session
//! configuration shared with the daemon's publisher (`lidarxdp run --zenoh`).
//!
//! - [`SessionConfig`], [`session_config`] and [`open_session`]: a session from zenoh's own
//!   JSON5 configuration file (`--zenoh-config`, else `$ZENOH_SESSION_CONFIG_URI`) or
//!   rmw_zenoh's defaults for a ROS 2 host ([`default_config`]), then
//!   `$ZENOH_CONFIG_OVERRIDE`, resolved as rmw_zenoh resolves them;
//! - [`ZenohSubscriber`]: one topic, e.g. `lidarxdp subscribe zenoh:/lidar/front/points`,
//!   under rmw_zenoh's key expression ([`lidarxdp_core::ros2::topic_key_expr`]);
//!   [`ZenohFrame`] one message, [`ZenohFrame::points`] its points in place.
//!
//! A message that came through shared memory is read in place: [`ZenohFrame::points`] is a
//! view of the chunk the daemon's sink wrote, mapped into this process (zenoh's POSIX
//! shared-memory client maps the publisher's segment read-only-by-convention; the chunk stays
//! allocated until every holder drops its sample). A message that came over a network link is
//! one contiguous buffer in this process, read in place as well; only a message zenoh
//! delivered in several fragments is joined into one buffer first.
//!
//! zenoh locks the publisher's segments it maps (mlock(2)): a process reading large frames
//! through shared memory may need `RLIMIT_MEMLOCK` raised (the `lidarxdp subscribe` CLI raises
//! its soft limit to the hard one).
//!
//! **Mapped at subscribe time.** zenoh maps (and locks) a publisher's segment when the first
//! message from it arrives, which made that first message the tail of the latency (hundreds of
//! ms for a 128 MiB pool with 16 subscribers on 2 cores). The daemon's sink announces its
//! segment as a liveliness token ([`shm_segment_token`]); [`ZenohSubscriber::open`] asks for
//! those tokens and for the topic's rmw_zenoh publisher tokens right after it subscribed, and
//! maps the segments of the sessions that publish its topic (no other: each mapping is locked
//! against its `RLIMIT_MEMLOCK`), through its own POSIX shared-memory client
//! ([`PremappedPosixClient`]), which zenoh later asks for the segment of the first message. A
//! daemon that starts later is mapped when its tokens appear; one that goes away is forgotten.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::zenoh::Wait;
use ::zenoh::handlers::FifoChannelHandler;
use ::zenoh::pubsub::Subscriber;
use ::zenoh::sample::Sample;
use ::zenoh::shm::{
    PosixShmClient, ProtocolID, SegmentID, ShmClient, ShmClientStorage, ShmSegment, WithProtocolID,
};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::ros2::{Attachment, CdrReadError, Distro, PointCloud2View, topic_key_expr};

/// Largest `--zenoh-config` file read, bytes (1 MiB): zenoh configurations are a few KB, so a
/// larger file is refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Where a session's configuration comes from, resolved as rmw_zenoh resolves it
/// (rmw_zenoh `zenoh_config.cpp` and its README, "Configuration"): a JSON5 file — lidarxdp's
/// `--zenoh-config`, else `$ZENOH_SESSION_CONFIG_URI` — or [`default_config`]; then the
/// `$ZENOH_CONFIG_OVERRIDE` entries, applied in order over it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionConfig {
    /// The JSON5 file, or `None` for [`default_config`].
    pub file: Option<PathBuf>,
    /// `(key, JSON5 value)` pairs, e.g. `("mode", "\"client\"")`.
    pub overrides: Vec<(String, String)>,
}

/// The default listen endpoint of lidarxdp's sessions, rmw_zenoh's own
/// (`DEFAULT_RMW_ZENOH_SESSION_CONFIG.json5`): loopback, a port the kernel picks. Used whenever
/// neither the file nor an override sets `listen/endpoints`, so a session never listens on
/// every interface (zenoh's own peer default, `tcp/[::]:0`) unless a configuration asks.
pub const DEFAULT_LISTEN: &str = r#"["tcp/localhost:0"]"#;

impl SessionConfig {
    /// Resolves the configuration from `--zenoh-config` (`flag`), and the environment values
    /// `uri` (`ZENOH_SESSION_CONFIG_URI`, a file path; blank is unset) and `overrides`
    /// (`ZENOH_CONFIG_OVERRIDE`: `key=value` entries separated by `;`, each value JSON5, e.g.
    /// `mode="client";connect/endpoints=["tcp/192.168.0.3:7447"]`; a `;` inside quotes or
    /// brackets does not separate).
    ///
    /// # Errors
    /// [`OverrideError`]: the `ZENOH_CONFIG_OVERRIDE` entry that has no `=` or an empty key.
    pub fn resolve(
        flag: Option<&Path>,
        uri: Option<&str>,
        overrides: Option<&str>,
    ) -> Result<Self, OverrideError> {
        let file = flag.map(Path::to_path_buf).or_else(|| {
            uri.map(str::trim)
                .filter(|u| !u.is_empty())
                .map(|u| PathBuf::from(u.strip_prefix("file://").unwrap_or(u)))
        });
        Ok(SessionConfig {
            file,
            overrides: parse_overrides(overrides.unwrap_or(""))?,
        })
    }

    /// From `flag` and this process's environment ([`Self::resolve`]).
    ///
    /// # Errors
    /// As [`Self::resolve`].
    pub fn from_env(flag: Option<&Path>) -> Result<Self, OverrideError> {
        Self::resolve(
            flag,
            std::env::var("ZENOH_SESSION_CONFIG_URI").ok().as_deref(),
            std::env::var("ZENOH_CONFIG_OVERRIDE").ok().as_deref(),
        )
    }
}

/// Splits `ZENOH_CONFIG_OVERRIDE` into `(key, value)` pairs (see [`SessionConfig::resolve`]).
fn parse_overrides(s: &str) -> Result<Vec<(String, String)>, OverrideError> {
    let mut entries = Vec::new();
    let (mut depth, mut quote, mut escaped, mut start) = (0i32, None, false, 0);
    for (i, ch) in s.char_indices() {
        match (quote, ch) {
            (Some(_), '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), c) if c == q && !escaped => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(ch),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, ';') if depth == 0 => {
                entries.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        escaped = false;
    }
    entries.push(&s[start..]);
    let mut out = Vec::new();
    for e in entries.into_iter().map(str::trim).filter(|e| !e.is_empty()) {
        match e.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                out.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            _ => return Err(OverrideError(e.to_owned())),
        }
    }
    Ok(out)
}

/// Errors opening a zenoh session or declaring on it.
#[derive(Debug, thiserror::Error)]
pub enum ZenohError {
    /// `--zenoh-config` could not be read, is over [`MAX_CONFIG_BYTES`], or zenoh refused it.
    #[error("--zenoh-config {}: {reason}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The session could not be opened (e.g. a `listen` endpoint in use), a configuration
    /// key was refused, or a declaration failed.
    #[error("zenoh: {0}")]
    Session(String),
}

/// A `$ZENOH_CONFIG_OVERRIDE` entry that is not `key=value`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "ZENOH_CONFIG_OVERRIDE: {0:?} is not key=value (entries are separated by ';', values are \
     JSON5, e.g. mode=\"client\";connect/endpoints=[\"tcp/10.0.0.1:7447\"])"
)]
pub struct OverrideError(pub String);

/// The configuration a session uses when no file is given: rmw_zenoh's default session
/// configuration for a ROS 2 host (rmw_zenoh `DEFAULT_RMW_ZENOH_SESSION_CONFIG.json5`): peer
/// mode, listening on loopback only ([`DEFAULT_LISTEN`]), connected to the `rmw_zenohd`
/// router at `tcp/localhost:7447` (retried for ever if it is not up yet), no multicast
/// scouting, shared memory on.
///
/// # Errors
/// None in practice: the keys are zenoh's own; an error names the key zenoh refused.
pub fn default_config() -> Result<::zenoh::Config, ZenohError> {
    let mut c = ::zenoh::Config::default();
    for (key, value) in [
        ("mode", r#""peer""#),
        ("listen/endpoints", DEFAULT_LISTEN),
        ("connect/endpoints", r#"["tcp/localhost:7447"]"#),
        ("scouting/multicast/enabled", "false"),
        ("transport/shared_memory/enabled", "true"),
    ] {
        c.insert_json5(key, value)
            .map_err(|e| ZenohError::Session(format!("default configuration key {key}: {e}")))?;
    }
    Ok(c)
}

/// Reads zenoh's JSON5 configuration file, refusing a file over [`MAX_CONFIG_BYTES`] before
/// reading it.
///
/// # Errors
/// [`ZenohError::Config`] naming the file: unreadable, too big, or refused by zenoh (whose
/// message names the key).
pub fn load_config(path: &Path) -> Result<::zenoh::Config, ZenohError> {
    let err = |reason: String| ZenohError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(err(format!(
            "{} bytes; a zenoh configuration is at most {MAX_CONFIG_BYTES} bytes (1 MiB)",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    ::zenoh::Config::from_json5(&text).map_err(|e| err(e.to_string()))
}

/// The zenoh configuration of `source`: the file or [`default_config`], then the overrides
/// in order, then [`DEFAULT_LISTEN`] when neither set `listen/endpoints`.
///
/// # Errors
/// [`ZenohError::Config`] for the file; [`ZenohError::Session`] naming
/// `ZENOH_CONFIG_OVERRIDE` and the key zenoh refused.
pub fn session_config(source: &SessionConfig) -> Result<::zenoh::Config, ZenohError> {
    let mut config = match &source.file {
        Some(p) => load_config(p)?,
        None => default_config()?,
    };
    for (key, value) in &source.overrides {
        config.insert_json5(key, value).map_err(|e| {
            ZenohError::Session(format!("ZENOH_CONFIG_OVERRIDE: {key}={value}: {e}"))
        })?;
    }
    if !listen_is_set(&config) {
        config
            .insert_json5("listen/endpoints", DEFAULT_LISTEN)
            .map_err(|e| ZenohError::Session(format!("default listen endpoint: {e}")))?;
    }
    Ok(config)
}

/// Whether `listen/endpoints` was given (an empty list counts as given: no listener at all).
/// A configuration that does not set it still holds zenoh's mode-dependent default (peer
/// `tcp/[::]:0`, router `tcp/[::]:7447`), so "not given" is "equal to that default".
fn listen_is_set(config: &::zenoh::Config) -> bool {
    let default = ::zenoh::Config::default().get_json("listen/endpoints").ok();
    match config.get_json("listen/endpoints") {
        Ok(v) => v.trim() != "null" && !v.trim().is_empty() && Some(&v) != default.as_ref(),
        Err(_) => false,
    }
}

/// Opens a zenoh session configured by `source` ([`session_config`]; this spawns zenoh's
/// runtime threads: call it after the capabilities are dropped, so that none of them holds
/// one).
///
/// # Errors
/// [`ZenohError::Config`] or [`ZenohError::Session`].
pub fn open_session(source: &SessionConfig) -> Result<::zenoh::Session, ZenohError> {
    open_session_with(source, None)
}

/// [`open_session`] reading shared memory through `clients` (zenoh's default POSIX client
/// when `None`).
fn open_session_with(
    source: &SessionConfig,
    clients: Option<Arc<ShmClientStorage>>,
) -> Result<::zenoh::Session, ZenohError> {
    let mut config = session_config(source)?;
    // The daemon writes its messages into its own locked pool, created before the capabilities
    // are dropped, and a subscriber publishes nothing: zenoh's implicit copy of large payloads
    // into a second pool (16 MiB, locked when the session opens) is not wanted.
    config
        .insert_json5(
            "transport/shared_memory/transport_optimization/enabled",
            "false",
        )
        .map_err(|e| ZenohError::Session(format!("configure shared memory: {e}")))?;
    let open = ::zenoh::open(config);
    match clients {
        Some(c) => open.with_shm_clients(c).wait(),
        None => open.wait(),
    }
    .map_err(|e| ZenohError::Session(format!("open session: {e}")))
}

/// The liveliness token by which a publisher of session `zid` announces shared-memory segment
/// `segment` of protocol `protocol` (zenoh's POSIX protocol: `PosixShmClient.id()`) in ROS
/// domain `domain_id`: `lidarxdp/<domain>/shm/<zid>/<protocol>/<segment>`, outside rmw_zenoh's
/// `@ros2_lv` space so ROS 2 tools never list it.
pub fn shm_segment_token(
    domain_id: u32,
    zid: &str,
    protocol: ProtocolID,
    segment: SegmentID,
) -> String {
    format!("lidarxdp/{domain_id}/shm/{zid}/{protocol}/{segment}")
}

/// The key expression of every [`shm_segment_token`] of `domain_id`.
pub fn shm_segment_tokens(domain_id: u32) -> String {
    format!("lidarxdp/{domain_id}/shm/**")
}

/// The session id, protocol and segment a [`shm_segment_token`] announces, `None` for
/// another key.
pub fn parse_shm_segment_token(key: &str) -> Option<(&str, ProtocolID, SegmentID)> {
    let mut parts = key.split('/');
    let (_, _, shm, zid) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let protocol = parts.next()?.parse().ok()?;
    let segment = parts.next()?.parse().ok()?;
    (shm == "shm" && parts.next().is_none()).then_some((zid, protocol, segment))
}

/// The key expression of every rmw_zenoh publisher token (`MP`) of `topic` in `domain_id`
/// (`@ros2_lv/<domain>/<zid>/<node>/<entity>/MP/<enclave>/<namespace>/<node name>/<topic>/..`,
/// rmw_zenoh `liveliness_utils.cpp`), whatever its node, type and QoS.
fn topic_publishers(domain_id: u32, topic: &str) -> String {
    format!(
        "@ros2_lv/{domain_id}/*/*/*/MP/*/*/*/{}/**",
        lidarxdp_core::ros2::mangle_name(topic)
    )
}

/// The session id of a liveliness token of rmw_zenoh's (`@ros2_lv/<domain>/<zid>/...`).
fn token_zid(key: &str) -> Option<&str> {
    key.split('/').nth(2)
}

/// Which announced segments a subscriber maps: those of sessions that publish its topic
/// (module documentation). Another daemon's pool, or one of another topic, is never mapped:
/// each mapping is locked, against the subscriber's `RLIMIT_MEMLOCK`.
#[derive(Default)]
struct PremapState {
    /// Sessions with a publisher token of the topic.
    publishers: HashSet<String>,
    /// Announced POSIX segments, by session.
    segments: HashMap<String, Vec<SegmentID>>,
}

/// [`PremapState`] and the client it maps through, shared with the liveliness callbacks.
struct Premap {
    client: Arc<PremappedPosixClient>,
    state: Mutex<PremapState>,
}

impl Premap {
    /// A segment token appeared (`put`) or went away.
    fn segment(&self, key: &str, put: bool) {
        let Some((zid, protocol, segment)) = parse_shm_segment_token(key) else {
            return;
        };
        if protocol != PosixShmClient.id() {
            return;
        }
        let map_now = {
            let mut st = self.lock();
            let list = st.segments.entry(zid.to_owned()).or_default();
            list.retain(|s| *s != segment);
            if put {
                list.push(segment);
            }
            put && st.publishers.contains(zid)
        };
        if map_now {
            self.map(segment);
        } else if !put {
            self.client.forget(segment);
        }
    }

    /// A publisher token of the topic appeared (`put`) or went away.
    fn publisher(&self, key: &str, put: bool) {
        let Some(zid) = token_zid(key) else { return };
        let segments = {
            let mut st = self.lock();
            if !put {
                st.publishers.remove(zid);
                return;
            }
            st.publishers.insert(zid.to_owned());
            st.segments.get(zid).cloned().unwrap_or_default()
        };
        for s in segments {
            self.map(s);
        }
    }

    fn map(&self, segment: SegmentID) {
        if let Err(e) = self.client.premap(segment) {
            log::warn!("zenoh: shared-memory segment {segment} not mapped yet: {e}");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PremapState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// zenoh's POSIX shared-memory client, keeping every segment it mapped (module
/// documentation): [`PremappedPosixClient::premap`] maps a segment before a message needs it,
/// and zenoh's own [`ShmClient::attach`] for that segment then returns the same mapping.
#[derive(Debug, Default)]
pub struct PremappedPosixClient {
    segments: Mutex<HashMap<SegmentID, Arc<dyn ShmSegment>>>,
}

impl PremappedPosixClient {
    /// Maps and locks `segment` now, unless it is already.
    ///
    /// # Errors
    /// zenoh's message: the segment does not exist, or cannot be mapped or locked
    /// (`RLIMIT_MEMLOCK`).
    pub fn premap(&self, segment: SegmentID) -> ::zenoh::Result<()> {
        self.attach(segment).map(|_| ())
    }

    /// Segments mapped so far (and not forgotten).
    pub fn mapped(&self) -> usize {
        self.segments.lock().map_or(0, |m| m.len())
    }

    /// Drops this client's mapping of `segment` (its publisher went away); zenoh's own
    /// reference, if it read a message from it, stays until zenoh lets go.
    pub fn forget(&self, segment: SegmentID) {
        if let Ok(mut m) = self.segments.lock() {
            m.remove(&segment);
        }
    }
}

impl WithProtocolID for PremappedPosixClient {
    fn id(&self) -> ProtocolID {
        PosixShmClient.id()
    }
}

impl ShmClient for PremappedPosixClient {
    fn attach(&self, segment: SegmentID) -> ::zenoh::Result<Arc<dyn ShmSegment>> {
        let known = |c: &Self| {
            c.segments
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&segment)
                .cloned()
        };
        if let Some(s) = known(self) {
            return Ok(s);
        }
        // Mapped and locked outside the lock (tens of ms for a large pool); a racing attach of
        // the same segment keeps the first mapping stored.
        let s = PosixShmClient.attach(segment)?;
        let mut segments = self
            .segments
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(segments.entry(segment).or_insert(s).clone())
    }
}

/// How long [`ZenohSubscriber::open`] waits for the publishers' segment tokens.
const PREMAP_WAIT: Duration = Duration::from_secs(1);

/// A subscription to one `PointCloud2` topic.
pub struct ZenohSubscriber {
    /// Kept open while the subscriber lives.
    _session: zenoh::Session,
    subscriber: Subscriber<FifoChannelHandler<Sample>>,
    /// Maps the segments of publishers that appear later, forgets those that go away.
    _watch: [Option<Subscriber<()>>; 2],
    client: Arc<PremappedPosixClient>,
    key: String,
}

impl ZenohSubscriber {
    /// Opens a session configured by `source` ([`session_config`]) and subscribes to
    /// `topic` (a fully qualified ROS 2 topic such as `/lidar/front/points`) in `domain_id`
    /// with `distro`'s type hash; then maps the shared-memory segments announced by the
    /// sessions that publish `topic` (module documentation), waiting at most 1 s for each of
    /// the two token queries. A segment that cannot be mapped is logged; its first message
    /// maps it, as zenoh would.
    ///
    /// # Errors
    /// [`ZenohError`]: the configuration file, the session, or the declaration.
    pub fn open(
        source: &SessionConfig,
        domain_id: u32,
        topic: &str,
        distro: Distro,
    ) -> Result<Self, ZenohError> {
        let client = Arc::new(PremappedPosixClient::default());
        let storage = ShmClientStorage::builder()
            .with_client(client.clone() as Arc<dyn ShmClient>)
            .build();
        let session = open_session_with(source, Some(Arc::new(storage)))?;
        let key = topic_key_expr(domain_id, topic, distro);
        let subscriber = session
            .declare_subscriber(key.clone())
            .wait()
            .map_err(|e| ZenohError::Session(format!("declare subscriber {key}: {e}")))?;
        let premap = Arc::new(Premap {
            client: client.clone(),
            state: Mutex::new(PremapState::default()),
        });
        // Later tokens (a daemon started or restarted after this subscriber) through two
        // liveliness subscribers; the ones alive now through two queries, publishers first.
        let watch = |key: String, on: fn(&Premap, &str, bool)| {
            let premap = premap.clone();
            session
                .liveliness()
                .declare_subscriber(key)
                .callback(move |s: Sample| {
                    on(
                        &premap,
                        s.key_expr().as_str(),
                        s.kind() == ::zenoh::sample::SampleKind::Put,
                    )
                })
                .wait()
                .ok()
        };
        let publishers = topic_publishers(domain_id, topic);
        let tokens = shm_segment_tokens(domain_id);
        let later = [
            watch(publishers.clone(), Premap::publisher),
            watch(tokens.clone(), Premap::segment),
        ];
        for (key, on) in [
            (publishers, Premap::publisher as fn(&Premap, &str, bool)),
            (tokens, Premap::segment),
        ] {
            if let Ok(replies) = session.liveliness().get(key).timeout(PREMAP_WAIT).wait() {
                while let Ok(reply) = replies.recv() {
                    if let Ok(s) = reply.result() {
                        on(&premap, s.key_expr().as_str(), true);
                    }
                }
            }
        }
        Ok(ZenohSubscriber {
            _session: session,
            subscriber,
            _watch: later,
            client,
            key,
        })
    }

    /// Shared-memory segments mapped so far (announced ones, and those messages came from).
    pub fn segments_mapped(&self) -> usize {
        self.client.mapped()
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
    /// A `PointCloud2` with other point fields than the layout asked (`PointXYZIRCAEDT` for
    /// [`points_of`], any lidarxdp layout for [`layout_points_of`]).
    #[error(
        "PointCloud2 fields are not a lidarxdp point layout of the kind asked (point_step \
         {point_step}, {fields} fields)"
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
    let data = match layout_points_of(v)? {
        (lidarxdp_core::layout::PointType::Autoware, data) => data,
        _ => {
            return Err(ZenohFrameError::Layout {
                point_step: v.point_step,
                fields: v.fields.len(),
            });
        }
    };
    // `data` starts at a multiple of 4 in the message (its length word is 4-aligned), and
    // zenoh's buffers start 8-aligned, so the cast to 4-aligned points holds; a buffer
    // that breaks this would be refused here rather than misread.
    bytemuck::try_cast_slice(data).map_err(|_| ZenohFrameError::Layout {
        point_step: v.point_step,
        fields: v.fields.len(),
    })
}

/// The layout and the `data` bytes of a parsed message, in place, when the cloud is one of
/// the point layouts lidarxdp publishes ([`lidarxdp_core::layout::PointType::from_fields`]:
/// exactly its field list and `point_step`, little-endian).
///
/// # Errors
/// [`ZenohFrameError::Layout`]: fields of no lidarxdp layout, or `data` not a whole number
/// of points.
pub fn layout_points_of<'a>(
    v: &PointCloud2View<'a>,
) -> Result<(lidarxdp_core::layout::PointType, &'a [u8]), ZenohFrameError> {
    let bad = || ZenohFrameError::Layout {
        point_step: v.point_step,
        fields: v.fields.len(),
    };
    let t = lidarxdp_core::layout::PointType::from_fields(
        v.point_step,
        v.fields
            .iter()
            .map(|f| (f.name, f.offset, f.datatype, f.count)),
    )
    .filter(|_| !v.is_bigendian)
    .ok_or_else(bad)?;
    if !v.data.len().is_multiple_of(t.point_step()) {
        return Err(bad());
    }
    Ok((t, v.data))
}

#[cfg(test)]
mod tests {

    /// The segment tokens the sink declares parse back; other keys do not; rmw_zenoh tokens
    /// give their session id; the topic's publisher key matches any node, type and QoS.
    #[test]
    fn segment_and_publisher_tokens() {
        let key = shm_segment_token(7, "abc123", 0, 4_000_000_001);
        assert_eq!(key, "lidarxdp/7/shm/abc123/0/4000000001");
        assert_eq!(
            parse_shm_segment_token(&key),
            Some(("abc123", 0, 4_000_000_001))
        );
        assert_eq!(parse_shm_segment_token("lidarxdp/7/shm/abc123/0"), None);
        assert_eq!(parse_shm_segment_token("lidarxdp/7/shm/abc123/0/1/2"), None);
        assert_eq!(parse_shm_segment_token("lidarxdp/7/xyz/abc123/0/1"), None);
        assert_eq!(parse_shm_segment_token("lidarxdp/7/shm/abc123/x/1"), None);
        assert_eq!(
            token_zid("@ros2_lv/0/f00d/0/1/MP/%/%/lidarxdp/%lidar%front%points/T/H/Q"),
            Some("f00d")
        );
        assert_eq!(
            topic_publishers(3, "/lidar/front/points"),
            "@ros2_lv/3/*/*/*/MP/*/*/*/%lidar%front%points/**"
        );
        assert_eq!(shm_segment_tokens(3), "lidarxdp/3/shm/**");
    }

    use super::*;

    fn listen(c: &::zenoh::Config) -> String {
        c.get_json("listen/endpoints").unwrap()
    }

    /// With no file, or a file that does not say where to listen, a session listens on
    /// loopback only (rmw_zenoh's default); a file or an override that says so is obeyed.
    #[test]
    fn sessions_listen_on_loopback_unless_configured() {
        let c = session_config(&SessionConfig::default()).unwrap();
        assert_eq!(listen(&c), r#"["tcp/localhost:0"]"#);
        let dir = std::env::temp_dir().join(format!("lidarxdp-zcfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("z.json5");
        std::fs::write(
            &f,
            r#"{ mode: "client", connect: { endpoints: ["tcp/10.0.0.1:7447"] } }"#,
        )
        .unwrap();
        let from_file = SessionConfig {
            file: Some(f.clone()),
            overrides: vec![],
        };
        assert_eq!(
            listen(&session_config(&from_file).unwrap()),
            r#"["tcp/localhost:0"]"#
        );
        std::fs::write(&f, r#"{ listen: { endpoints: ["tcp/0.0.0.0:7450"] } }"#).unwrap();
        assert_eq!(
            listen(&session_config(&from_file).unwrap()),
            r#"["tcp/0.0.0.0:7450"]"#
        );
        let over = SessionConfig::resolve(
            None,
            None,
            Some(r#"listen/endpoints=["tcp/192.0.2.1:0"];mode="client""#),
        )
        .unwrap();
        let c = session_config(&over).unwrap();
        assert_eq!(listen(&c), r#"["tcp/192.0.2.1:0"]"#);
        assert_eq!(c.get_json("mode").unwrap(), r#""client""#);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// rmw_zenoh's precedence: `--zenoh-config`, else `ZENOH_SESSION_CONFIG_URI`; overrides
    /// split on `;` outside quotes and brackets.
    #[test]
    fn session_config_resolution_and_overrides() {
        let r = SessionConfig::resolve(Some(Path::new("/etc/a.json5")), Some("/etc/b.json5"), None)
            .unwrap();
        assert_eq!(r.file.as_deref(), Some(Path::new("/etc/a.json5")));
        let r = SessionConfig::resolve(None, Some("file:///etc/b.json5"), Some(" ")).unwrap();
        assert_eq!(r.file.as_deref(), Some(Path::new("/etc/b.json5")));
        assert!(r.overrides.is_empty());
        let r = SessionConfig::resolve(
            None,
            Some("  "),
            Some(r#"connect/endpoints=["tcp/10.0.0.3:7447";"tcp/[::1]:7447"]; mode = "a;b" ;"#),
        )
        .unwrap();
        assert_eq!(r.file, None);
        assert_eq!(
            r.overrides,
            [
                (
                    "connect/endpoints".to_owned(),
                    r#"["tcp/10.0.0.3:7447";"tcp/[::1]:7447"]"#.to_owned()
                ),
                ("mode".to_owned(), r#""a;b""#.to_owned()),
            ]
        );
        let e = SessionConfig::resolve(None, None, Some("mode"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("ZENOH_CONFIG_OVERRIDE: \"mode\" is not key=value"),
            "{e}"
        );
        assert!(SessionConfig::resolve(None, None, Some("=1")).is_err());
    }

    /// An override zenoh refuses names the variable and the key.
    #[test]
    fn a_refused_override_names_the_key() {
        let s = SessionConfig::resolve(None, None, Some("mode=42")).unwrap();
        let e = session_config(&s).unwrap_err().to_string();
        assert!(
            e.starts_with("zenoh: ZENOH_CONFIG_OVERRIDE: mode=42: "),
            "{e}"
        );
    }
}
