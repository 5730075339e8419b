//! ROS 2 over DDS: frames published as `sensor_msgs/msg/PointCloud2` the way rmw_cyclonedds_cpp
//! and rmw_fastrtps_cpp publish them, so a stock ROS 2 machine (Fast DDS on Jazzy) or an
//! Autoware vehicle (Cyclone DDS) sees the topics with no change to its middleware and no
//! bridge.
//!
//! - The DDS implementation is Eclipse Cyclone DDS, vendored and built by the `cyclors` crate
//!   ([`cyclone`], the only `unsafe` code of the sink). It speaks standard RTPS 2.x, so Fast DDS
//!   and Cyclone DDS subscribers both match it (the tests run both).
//! - [`DdsSettings`] and [`domain_config`]: the domain's configuration, assembled as
//!   rmw_cyclonedds assembles it (`rmw_node.cpp`, `check_create_domain`): lidarxdp's defaults
//!   for large frames ([`LARGE_FRAME_CONFIG`]), then the discovery fragment of
//!   `ROS_AUTOMATIC_DISCOVERY_RANGE` / `ROS_STATIC_PEERS` ([`Discovery`]), then
//!   `$CYCLONEDDS_URI`, then `--dds-config`; later entries override earlier ones.
//! - [`DdsSink`]: a [`crate::publish::FrameSink`] beside the TCP server and the zenoh sink,
//!   with its own thread and bounded queue; the ROS 2 graph (`ros_discovery_info`) is announced
//!   once its writers exist.
//!
//! Names, USER_DATA and the graph message come from [`lidarxdp_core::ros2::dds`].

#[cfg(feature = "dds")]
pub mod cyclone;
#[cfg(feature = "dds")]
mod sink;

#[cfg(feature = "dds")]
pub use sink::{DDS_COUNTERS, DdsAux, DdsCounters, DdsHandle, DdsSink};

use std::path::{Path, PathBuf};

use lidarxdp_core::ros2::Distro;

use crate::ros2_zenoh::TopicPlan;

/// Frames that may wait for the DDS sink's thread with one or two sensors (two frames each;
/// the daemon gives more sensors [`crate::publish::sink_queue`]): past it the sink drops,
/// never the capture.
pub const SINK_QUEUE: usize = 4;

/// History depth of the point cloud writers: ROS 2's SensorDataQoS (`rmw_qos_profile_sensor_data`:
/// best effort, volatile, keep last 5).
pub const SENSOR_DATA_DEPTH: i32 = 5;

/// Largest `--dds-config` file read, bytes (1 MiB): Cyclone configurations are a few KB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The node name lidarxdp announces on `ros_discovery_info` (the same as over zenoh).
pub const NODE_NAME: &str = crate::ros2_zenoh::NODE_NAME;

/// lidarxdp's Cyclone settings for frames of 1–15 MB, applied before every other fragment
/// (an operator's `CYCLONEDDS_URI` or `--dds-config` overrides any of them):
///
/// - `General/MaxMessageSize` 14720 B, `General/FragmentSize` 1344 B: a 15 MB sample goes out
///   as DATA_FRAG submessages of 1344 bytes packed into UDP datagrams of at most 14,720 bytes.
///   On loopback (MTU 65,536) each datagram is one packet; on a 1500-byte link each becomes 10
///   IPv4 fragments, reassembled by the receiving kernel, which holds at most
///   `net.ipv4.ipfrag_high_thresh` (4 MiB by default) of them: far above one datagram, so
///   nothing needs raising there. Datagrams of 64 KB would need 44 fragments each, and a
///   single lost fragment would cost 64 KB of the frame.
/// - `Internal/SocketSendBufferSize` up to 16 MB (`max`, so a smaller `net.core.wmem_max`
///   is not an error): a whole 15 MB frame fits the send buffer, so `dds_writecdr` returns
///   without waiting for the kernel to drain it.
/// - `Internal/SocketReceiveBufferSize` up to 16 MB likewise (the daemon receives only
///   discovery traffic; the subscriber's receive buffer is what a frame needs, see
///   docs/deploy.md: a best-effort reader must hold a whole frame in its socket buffer, so
///   subscribers raise `net.core.rmem_max` and their own buffer to at least the frame size).
/// - `Sizing/ReceiveBufferSize` 128 KiB and `Sizing/ReceiveBufferChunkSize` 64 KiB (Cyclone's
///   defaults: 1 MiB and 128 KiB), so the daemon's memory reaches its plateau within minutes
///   (issue 40). Each receive thread reads datagrams into a receive buffer
///   (`ddsi_radmin.c`), and a message handed on to Cyclone's delivery queue, as every
///   discovery message is, keeps its bytes there: the next one goes in behind it. The thread
///   thus walks through the buffer and touches its pages for the first time one message after
///   another. Only when the buffer is used up does it take a new one, and malloc hands back a
///   freed one. With 1 MiB buffers and two remote participants, that walk added 94 kB a
///   minute to the daemon's resident memory for the first 10 minutes and more. With 128 KiB
///   buffers it ends within the first minutes. A chunk of 64 KiB still takes the largest
///   UDP datagram whole (Cyclone reads at most `min(chunk, 64 KiB)`), and the daemon receives
///   only discovery and acknowledgements.
pub const LARGE_FRAME_CONFIG: &str = "<CycloneDDS><Domain id=\"any\"><General>\
<MaxMessageSize>14720B</MaxMessageSize><FragmentSize>1344B</FragmentSize></General>\
<Internal><SocketSendBufferSize min=\"default\" max=\"16MB\"/>\
<SocketReceiveBufferSize min=\"default\" max=\"16MB\"/></Internal>\
<Sizing><ReceiveBufferSize>128KiB</ReceiveBufferSize>\
<ReceiveBufferChunkSize>64KiB</ReceiveBufferChunkSize></Sizing></Domain></CycloneDDS>";

/// `ROS_AUTOMATIC_DISCOVERY_RANGE` (ROS 2 Jazzy, REP 2019 / rmw `discovery_options.h`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiscoveryRange {
    /// `SUBNET` (the default): multicast discovery on the chosen interfaces, plus static
    /// peers.
    #[default]
    Subnet,
    /// `LOCALHOST`: no multicast; the peers are `localhost` and the static peers.
    Localhost,
    /// `OFF`: no discovery at all (a domain tag unique to the process).
    Off,
    /// `SYSTEM_DEFAULT`: Cyclone's own discovery settings, untouched.
    SystemDefault,
}

/// Discovery as ROS 2 configures it: [`DiscoveryRange`] and `ROS_STATIC_PEERS`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Discovery {
    /// The range.
    pub range: DiscoveryRange,
    /// Static peers (host names or addresses), `;`-separated in `ROS_STATIC_PEERS`.
    pub static_peers: Vec<String>,
}

/// Longest static peer address (`RMW_DISCOVERY_OPTIONS_STATIC_PEERS_MAX_LENGTH`).
pub const MAX_PEER_LEN: usize = 256;

impl Discovery {
    /// From the environment values as ROS 2 Jazzy's rcl reads them: `range`
    /// (`ROS_AUTOMATIC_DISCOVERY_RANGE`: `SUBNET`, `LOCALHOST`, `OFF`, `SYSTEM_DEFAULT`; unset
    /// or blank is `SUBNET`, or `LOCALHOST` when the deprecated `ROS_LOCALHOST_ONLY` is `1`)
    /// and `peers` (`ROS_STATIC_PEERS`, `;`-separated; blanks are skipped).
    ///
    /// # Errors
    /// [`DiscoveryError`], naming the variable, its value and what is valid: an unknown range
    /// ([`DiscoveryError::Range`]), a peer ([`DiscoveryError::Peer`]) over
    /// [`MAX_PEER_LEN`] bytes or holding a character outside host names and addresses
    /// (letters, digits, `.`, `-`, `:`, `_`, `[`, `]`).
    pub fn from_env(
        range: Option<&str>,
        peers: Option<&str>,
        localhost_only: Option<&str>,
    ) -> Result<Self, DiscoveryError> {
        let range = match range.map(str::trim).filter(|s| !s.is_empty()) {
            None if localhost_only.map(str::trim) == Some("1") => DiscoveryRange::Localhost,
            None => DiscoveryRange::Subnet,
            Some("SUBNET") => DiscoveryRange::Subnet,
            Some("LOCALHOST") => DiscoveryRange::Localhost,
            Some("OFF") => DiscoveryRange::Off,
            Some("SYSTEM_DEFAULT") => DiscoveryRange::SystemDefault,
            Some(other) => {
                return Err(DiscoveryError::Range {
                    value: other.to_owned(),
                });
            }
        };
        let mut static_peers = Vec::new();
        for p in peers.unwrap_or("").split(';').map(str::trim) {
            if p.is_empty() {
                continue;
            }
            let ok = p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:_[]".contains(&b));
            if p.len() > MAX_PEER_LEN || !ok {
                return Err(DiscoveryError::Peer { peer: p.to_owned() });
            }
            static_peers.push(p.to_owned());
        }
        Ok(Discovery {
            range,
            static_peers,
        })
    }

    /// The Cyclone XML fragment rmw_cyclonedds_cpp (Jazzy, `check_create_domain`) builds for
    /// these options, or `None` for `SYSTEM_DEFAULT`:
    /// - `SUBNET`: participant index `auto` with at most 32 per host, and the static peers;
    /// - `LOCALHOST`: as `SUBNET` with multicast off and `localhost` first among the peers,
    ///   and (lidarxdp's addition) the loopback interface `127.0.0.1` as the one interface;
    /// - `OFF`: multicast off, participant index `none`, and the domain tag
    ///   `ros_discovery_off_<pid>`, so that nothing else discovers the participant.
    pub fn cyclone_fragment(&self, pid: u32) -> Option<String> {
        let (localhost, peers, no_multicast) = match self.range {
            DiscoveryRange::SystemDefault => return None,
            DiscoveryRange::Subnet => (false, true, false),
            DiscoveryRange::Localhost => (true, true, true),
            DiscoveryRange::Off => (false, false, true),
        };
        let mut x = String::from("<CycloneDDS><Domain id=\"any\">");
        if localhost {
            // lidarxdp's addition to rmw_cyclonedds's fragment: the participant also lives on
            // the loopback interface, so it reaches peers that advertise loopback locators only
            // (rmw_fastrtps in LOCALHOST mode whitelists 127.0.0.1), which Cyclone on a
            // non-loopback interface would not send to.
            x += "<General><Interfaces><NetworkInterface address=\"127.0.0.1\"/></Interfaces>\
                  <AllowMulticast>false</AllowMulticast></General>";
        } else if no_multicast {
            x += "<General><AllowMulticast>false</AllowMulticast></General>";
        }
        if no_multicast && !localhost && !peers {
            x += &format!(
                "<Discovery><ParticipantIndex>none</ParticipantIndex>\
                 <Tag>ros_discovery_off_{pid}</Tag>"
            );
        } else {
            x += "<Discovery><ParticipantIndex>auto</ParticipantIndex>\
                  <MaxAutoParticipantIndex>32</MaxAutoParticipantIndex>";
        }
        let listed: Vec<&str> = localhost
            .then_some("localhost")
            .into_iter()
            .chain(
                self.static_peers
                    .iter()
                    .map(String::as_str)
                    .filter(|_| peers),
            )
            .collect();
        if !listed.is_empty() {
            x += "<Peers>";
            for p in listed {
                x += &format!("<Peer address=\"{p}\"/>");
            }
            x += "</Peers>";
        }
        x += "</Discovery></Domain></CycloneDDS>";
        Some(x)
    }
}

/// Everything the DDS sink needs, validated.
#[derive(Clone, Debug)]
pub struct DdsSettings {
    /// Cyclone's XML configuration file (`--dds-config`), applied last.
    pub config_file: Option<PathBuf>,
    /// `$CYCLONEDDS_URI` as found at start-up (XML or `file://` URIs), applied before
    /// `config_file`.
    pub cyclonedds_uri: Option<String>,
    /// ROS domain id (= DDS domain id), 0..=232.
    pub domain_id: u32,
    /// Which distribution's USER_DATA and GID size to announce.
    pub distro: Distro,
    /// `ROS_AUTOMATIC_DISCOVERY_RANGE` and `ROS_STATIC_PEERS`.
    pub discovery: Discovery,
    /// Frames that may wait for the sink's thread.
    pub queue: usize,
    /// One entry per sensor: its ROS topic (DDS topic `rt<topic>`) and `frame_id`.
    pub topics: Vec<TopicPlan>,
}

/// A discovery setting from the environment that rcl would refuse ([`Discovery::from_env`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// `ROS_AUTOMATIC_DISCOVERY_RANGE` is not one of the ranges.
    #[error(
        "ROS_AUTOMATIC_DISCOVERY_RANGE: {value:?} is not a range; valid SUBNET (default), \
         LOCALHOST, OFF, SYSTEM_DEFAULT"
    )]
    Range {
        /// The value, trimmed.
        value: String,
    },
    /// A `ROS_STATIC_PEERS` entry over [`MAX_PEER_LEN`] bytes or with a character outside
    /// host names and addresses.
    #[error(
        "ROS_STATIC_PEERS: {peer:?} is not a host name or address (at most {MAX_PEER_LEN} bytes \
         of letters, digits, '.', '-', ':', '_', '[', ']'; peers are separated by ';')"
    )]
    Peer {
        /// The entry, trimmed.
        peer: String,
    },
}

/// Errors of the DDS sink's start-up.
#[derive(Debug, thiserror::Error)]
pub enum DdsError {
    /// `--dds-config` is unreadable, over [`MAX_CONFIG_BYTES`], or not UTF-8.
    #[error("--dds-config {path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Cyclone refused the configuration or an entity (its message names the call).
    #[cfg(feature = "dds")]
    #[error("DDS: {0}")]
    Dds(#[from] cyclone::CycloneError),
    /// The graph message (`ros_discovery_info`) cannot be encoded.
    #[error("DDS: {0}")]
    Encode(#[from] lidarxdp_core::ros2::CdrError),
    /// The sink thread could not be started.
    #[error("DDS: spawn the sink thread: {0}")]
    Spawn(std::io::Error),
}

/// Checks `--dds-config`: a regular file of at most [`MAX_CONFIG_BYTES`] (refused before it
/// is read), returned as Cyclone's `file://` URI of its absolute path (Cyclone reads it).
///
/// # Errors
/// [`DdsError::Config`] naming the file.
pub fn config_uri(path: &Path) -> Result<String, DdsError> {
    let err = |reason: String| DdsError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("not a file".into()));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(err(format!(
            "{} bytes; a Cyclone DDS configuration is at most {MAX_CONFIG_BYTES} bytes (1 MiB)",
            meta.len()
        )));
    }
    let abs = std::path::absolute(path).map_err(|e| err(e.to_string()))?;
    let s = abs
        .to_str()
        .ok_or_else(|| err("the path is not UTF-8".into()))?;
    if s.contains(',') {
        return Err(err(
            "the path holds a ',' (Cyclone separates configuration entries with commas)".into(),
        ));
    }
    Ok(format!("file://{s}"))
}

/// The domain's configuration list for Cyclone's `dds_create_domain`: [`LARGE_FRAME_CONFIG`],
/// the discovery fragment ([`Discovery::cyclone_fragment`]), `$CYCLONEDDS_URI` as given, and
/// `--dds-config` as a `file://` URI, joined by commas (empty entries are skipped), later ones
/// overriding earlier ones, as rmw_cyclonedds does with `$CYCLONEDDS_URI`.
///
/// # Errors
/// [`DdsError::Config`] for `--dds-config` ([`config_uri`]).
pub fn domain_config(s: &DdsSettings, pid: u32) -> Result<String, DdsError> {
    let mut parts = vec![LARGE_FRAME_CONFIG.to_owned()];
    parts.extend(s.discovery.cyclone_fragment(pid));
    if let Some(uri) = s.cyclonedds_uri.as_deref().map(str::trim)
        && !uri.is_empty()
    {
        parts.push(uri.to_owned());
    }
    if let Some(p) = &s.config_file {
        parts.push(config_uri(p)?);
    }
    Ok(parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rmw_cyclonedds_cpp's fragments for each range, written out from its `rmw_node.cpp`.
    #[test]
    fn discovery_fragments_match_rmw_cyclonedds() {
        let d = |r: Option<&str>, p: Option<&str>| Discovery::from_env(r, p, None).unwrap();
        assert_eq!(
            d(None, None).cyclone_fragment(7).unwrap(),
            "<CycloneDDS><Domain id=\"any\"><Discovery><ParticipantIndex>auto</ParticipantIndex>\
             <MaxAutoParticipantIndex>32</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
        );
        assert_eq!(
            d(Some("LOCALHOST"), Some("10.0.0.2; ;host-b"))
                .cyclone_fragment(7)
                .unwrap(),
            "<CycloneDDS><Domain id=\"any\"><General><Interfaces>\
             <NetworkInterface address=\"127.0.0.1\"/></Interfaces>\
             <AllowMulticast>false</AllowMulticast></General><Discovery>\
             <ParticipantIndex>auto</ParticipantIndex>\
             <MaxAutoParticipantIndex>32</MaxAutoParticipantIndex><Peers>\
             <Peer address=\"localhost\"/><Peer address=\"10.0.0.2\"/>\
             <Peer address=\"host-b\"/></Peers></Discovery></Domain></CycloneDDS>"
        );
        assert_eq!(
            d(Some("SUBNET"), Some("192.168.1.7"))
                .cyclone_fragment(7)
                .unwrap(),
            "<CycloneDDS><Domain id=\"any\"><Discovery><ParticipantIndex>auto</ParticipantIndex>\
             <MaxAutoParticipantIndex>32</MaxAutoParticipantIndex><Peers>\
             <Peer address=\"192.168.1.7\"/></Peers></Discovery></Domain></CycloneDDS>"
        );
        assert_eq!(
            d(Some("OFF"), Some("10.0.0.2"))
                .cyclone_fragment(42)
                .unwrap(),
            "<CycloneDDS><Domain id=\"any\"><General><AllowMulticast>false</AllowMulticast>\
             </General><Discovery><ParticipantIndex>none</ParticipantIndex>\
             <Tag>ros_discovery_off_42</Tag></Discovery></Domain></CycloneDDS>"
        );
        assert_eq!(d(Some("SYSTEM_DEFAULT"), None).cyclone_fragment(7), None);
        assert_eq!(
            Discovery::from_env(None, None, Some("1")).unwrap().range,
            DiscoveryRange::Localhost
        );
        assert_eq!(
            Discovery::from_env(Some("SUBNET"), None, Some("1"))
                .unwrap()
                .range,
            DiscoveryRange::Subnet
        );
    }

    #[test]
    fn bad_discovery_settings_are_refused_with_the_variable() {
        assert_eq!(
            Discovery::from_env(Some("lan"), None, None)
                .unwrap_err()
                .to_string(),
            "ROS_AUTOMATIC_DISCOVERY_RANGE: \"lan\" is not a range; valid SUBNET (default), \
             LOCALHOST, OFF, SYSTEM_DEFAULT"
        );
        let e = Discovery::from_env(None, Some("a\"/><x"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("ROS_STATIC_PEERS: \"a\\\"/><x\" is not a host name"),
            "{e}"
        );
        let long = "a".repeat(257);
        assert!(Discovery::from_env(None, Some(&long), None).is_err());
        assert!(Discovery::from_env(None, Some(&"a".repeat(256)), None).is_ok());
    }

    #[test]
    fn domain_config_orders_defaults_discovery_env_file() {
        let dir = std::env::temp_dir().join(format!("lidarxdp-dds-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cyclone.xml");
        std::fs::write(&file, "<CycloneDDS/>").unwrap();
        let s = DdsSettings {
            config_file: Some(file.clone()),
            cyclonedds_uri: Some("file:///etc/cyclone.xml".into()),
            domain_id: 0,
            distro: Distro::Jazzy,
            discovery: Discovery {
                range: DiscoveryRange::SystemDefault,
                static_peers: vec![],
            },
            queue: 4,
            topics: vec![],
        };
        assert_eq!(
            domain_config(&s, 1).unwrap(),
            format!(
                "{LARGE_FRAME_CONFIG},file:///etc/cyclone.xml,file://{}",
                file.display()
            )
        );
        std::fs::write(&file, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = domain_config(&s, 1).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "1048577 bytes; a Cyclone DDS configuration is at most 1048576 bytes (1 MiB)"
            ),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
