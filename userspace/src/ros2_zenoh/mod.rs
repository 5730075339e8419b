//! ROS 2 over zenoh: frames published as `sensor_msgs/msg/PointCloud2` the way ROS 2's
//! rmw_zenoh publishes them, so that `ros2 topic echo`, RViz and Autoware receive them with no
//! bridge, and local subscribers read them in place from shared memory.
//!
//! - [`ZenohSettings`] and [`open_session`]: the session, from zenoh's own JSON5 configuration
//!   file (`--zenoh-config`) or rmw_zenoh's defaults for a ROS 2 host ([`default_config`]).
//! - [`ZenohSink`]: a [`crate::publish::FrameSink`] beside the TCP server. Its thread builds
//!   each message (CDR prefix, points, suffix: [`lidarxdp_core::ros2`]) in a shared-memory
//!   buffer and puts it with rmw_zenoh's attachment, after declaring the node's and the
//!   publishers' liveliness tokens.
//! - [`subscribe`]: the reading side for `lidarxdp subscribe zenoh:/topic`, a zero-copy view of
//!   the points when the message arrived through shared memory.
//!
//! The key expressions, tokens, QoS string and attachment are built by
//! [`lidarxdp_core::ros2`], which cites rmw_zenoh's `docs/design.md` and
//! `rmw_zenoh_cpp/src/detail/liveliness_utils.cpp`.

mod shm;
mod sink;
mod subscribe;

pub use shm::ShmPool;
pub use sink::{ZENOH_COUNTERS, ZenohCounters, ZenohHandle, ZenohSink};
pub use subscribe::{ZenohFrame, ZenohFrameError, ZenohSubscriber, points_of};

use std::path::{Path, PathBuf};

use lidarxdp_core::ros2::{Distro, Qos};

/// Largest `--zenoh-config` file read, bytes (1 MiB): zenoh configurations are a few KB, so a
/// larger file is refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Default shared-memory pool of the sink, MiB (`--zenoh-shm-mb`): room for several 15 MB
/// frames (a 128-channel dual-return scan) in flight at once.
pub const DEFAULT_SHM_MB: u32 = 128;

/// Locked memory needed beyond the pool (16 MiB): zenoh's metadata segments and the
/// subscribers' segments it maps, which it locks too.
pub const LOCK_HEADROOM: u64 = 16 << 20;

/// Largest `--zenoh-shm-mb`, MiB (4 GiB).
pub const MAX_SHM_MB: u32 = 4096;

/// Frames that may wait for the zenoh sink's thread (two 10 Hz frames of each of two sensors):
/// past it the sink drops, never the capture.
pub const SINK_QUEUE: usize = 4;

/// Largest ROS domain id (`--ros-domain-id`, `ROS_DOMAIN_ID`): ROS 2 "The ROS_DOMAIN_ID"
/// concept page gives 0..=232 as the range every RMW accepts.
pub const MAX_ROS_DOMAIN_ID: u32 = 232;

/// The ROS domain id: `flag` (`--ros-domain-id`) when given, else the `ROS_DOMAIN_ID`
/// environment value `env` (blank counts as unset), else 0.
///
/// # Errors
/// The source named (`--ros-domain-id` or `ROS_DOMAIN_ID`) with its value and the valid range
/// 0..=[`MAX_ROS_DOMAIN_ID`]: not a number, or out of range.
pub fn domain_id(flag: Option<u32>, env: Option<&str>) -> Result<u32, String> {
    let env = env.map(str::trim).filter(|v| !v.is_empty());
    let (id, from) = match (flag, env) {
        (Some(d), _) => (d, "--ros-domain-id"),
        (None, Some(v)) => (
            v.parse::<u32>().map_err(|_| {
                format!(
                    "ROS_DOMAIN_ID: {v:?} is not a number; valid 0..={MAX_ROS_DOMAIN_ID} \
                     (or pass --ros-domain-id)"
                )
            })?,
            "ROS_DOMAIN_ID",
        ),
        (None, None) => (0, "ROS_DOMAIN_ID"),
    };
    if id > MAX_ROS_DOMAIN_ID {
        return Err(format!(
            "{from}: {id} is out of range; valid 0..={MAX_ROS_DOMAIN_ID}"
        ));
    }
    Ok(id)
}

/// The ROS 2 node name lidarxdp's liveliness tokens announce.
pub const NODE_NAME: &str = "lidarxdp";

/// One sensor's ROS 2 topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPlan {
    /// The frames' `sensor_id` (index in the configuration).
    pub sensor_id: u16,
    /// Fully qualified topic, e.g. `/lidar/front/points` (checked by
    /// [`lidarxdp_core::ros2::validate_topic`]).
    pub topic: String,
    /// `header.frame_id` of its messages.
    pub frame_id: String,
}

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
    /// `ZENOH_CONFIG_OVERRIDE` with the entry that has no `=` or an empty key.
    pub fn resolve(
        flag: Option<&Path>,
        uri: Option<&str>,
        overrides: Option<&str>,
    ) -> Result<Self, String> {
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
    pub fn from_env(flag: Option<&Path>) -> Result<Self, String> {
        Self::resolve(
            flag,
            std::env::var("ZENOH_SESSION_CONFIG_URI").ok().as_deref(),
            std::env::var("ZENOH_CONFIG_OVERRIDE").ok().as_deref(),
        )
    }
}

/// Splits `ZENOH_CONFIG_OVERRIDE` into `(key, value)` pairs (see [`SessionConfig::resolve`]).
fn parse_overrides(s: &str) -> Result<Vec<(String, String)>, String> {
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
            _ => {
                return Err(format!(
                    "ZENOH_CONFIG_OVERRIDE: {e:?} is not key=value (entries are separated by \
                     ';', values are JSON5, e.g. mode=\"client\";connect/endpoints=[\"tcp/\
                     10.0.0.1:7447\"])"
                ));
            }
        }
    }
    Ok(out)
}

/// Everything the zenoh sink needs, validated.
#[derive(Clone, Debug)]
pub struct ZenohSettings {
    /// The session's configuration: file (`--zenoh-config` or `$ZENOH_SESSION_CONFIG_URI`)
    /// or [`default_config`], and `$ZENOH_CONFIG_OVERRIDE`.
    pub session: SessionConfig,
    /// ROS domain id, 0..=[`MAX_ROS_DOMAIN_ID`]: the first chunk of every key expression.
    pub domain_id: u32,
    /// Which distribution's type hash the keys carry.
    pub distro: Distro,
    /// QoS announced in the publishers' tokens (the sink always publishes best effort and
    /// drops under congestion, matching [`Qos::LIDAR`]).
    pub qos: Qos,
    /// Frames that may wait for the sink's thread; a frame finding the queue full is dropped
    /// for this sink alone and counted ([`ZenohCounters::dropped`]).
    pub queue: usize,
    /// One entry per sensor.
    pub topics: Vec<TopicPlan>,
}

/// Errors of the zenoh sink's start-up.
#[derive(Debug, thiserror::Error)]
pub enum ZenohError {
    /// `--zenoh-config` could not be read, is over [`MAX_CONFIG_BYTES`], or zenoh refused it.
    #[error("--zenoh-config {path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The session could not be opened (e.g. a `listen` endpoint in use), or a declaration
    /// failed.
    #[error("zenoh: {0}")]
    Session(String),
    /// The shared-memory pool could not be created (`/dev/shm` too small or absent).
    #[error("zenoh shared memory ({bytes} bytes, --zenoh-shm-mb): {reason}")]
    Shm {
        /// Requested pool size.
        bytes: usize,
        /// zenoh's error.
        reason: String,
    },
}

/// The configuration a session uses when no file is given: rmw_zenoh's default session
/// configuration for a ROS 2 host (rmw_zenoh `DEFAULT_RMW_ZENOH_SESSION_CONFIG.json5`): peer
/// mode, listening on loopback only ([`DEFAULT_LISTEN`]), connected to the `rmw_zenohd`
/// router at `tcp/localhost:7447` (retried for ever if it is not up yet), no multicast
/// scouting, shared memory on.
///
/// # Errors
/// None in practice: the keys are zenoh's own; an error names the key zenoh refused.
pub fn default_config() -> Result<zenoh::Config, ZenohError> {
    let mut c = zenoh::Config::default();
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
pub fn load_config(path: &Path) -> Result<zenoh::Config, ZenohError> {
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
    zenoh::Config::from_json5(&text).map_err(|e| err(e.to_string()))
}

/// The zenoh configuration of `source`: the file or [`default_config`], then the overrides
/// in order, then [`DEFAULT_LISTEN`] when neither set `listen/endpoints`.
///
/// # Errors
/// [`ZenohError::Config`] for the file; [`ZenohError::Session`] naming
/// `ZENOH_CONFIG_OVERRIDE` and the key zenoh refused.
pub fn session_config(source: &SessionConfig) -> Result<zenoh::Config, ZenohError> {
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
fn listen_is_set(config: &zenoh::Config) -> bool {
    let default = zenoh::Config::default().get_json("listen/endpoints").ok();
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
pub fn open_session(source: &SessionConfig) -> Result<zenoh::Session, ZenohError> {
    use zenoh::Wait;
    let mut config = session_config(source)?;
    // lidarxdp writes its messages into its own locked pool (`ShmPool`), created before the
    // capabilities are dropped; zenoh's implicit copy of large payloads into a second pool
    // (16 MiB, locked when the session opens, after the drop) is not wanted.
    config
        .insert_json5(
            "transport/shared_memory/transport_optimization/enabled",
            "false",
        )
        .map_err(|e| ZenohError::Session(format!("configure shared memory: {e}")))?;
    zenoh::open(config)
        .wait()
        .map_err(|e| ZenohError::Session(format!("open session: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen(c: &zenoh::Config) -> String {
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
        let e = SessionConfig::resolve(None, None, Some("mode")).unwrap_err();
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
