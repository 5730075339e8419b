//! rmw_zenoh's per-entity names and per-message data: the QoS string of a liveliness token,
//! the node and publisher tokens, and the attachment each sample carries (ros2/rmw_zenoh
//! `docs/design.md`, `liveliness_utils.cpp`, `attachment_helpers.cpp`).
#![forbid(unsafe_code)]

use super::names::{Distro, MessageType, POINTCLOUD2, mangle_name};

/// QoS reliability (`rmw/types.h`, `rmw_qos_reliability_policy_e`; the number is the one
/// rmw_zenoh prints).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reliability {
    /// `RMW_QOS_POLICY_RELIABILITY_RELIABLE` = 1 (rmw_zenoh's default).
    Reliable = 1,
    /// `RMW_QOS_POLICY_RELIABILITY_BEST_EFFORT` = 2.
    BestEffort = 2,
}

/// QoS durability (`rmw/types.h`, `rmw_qos_durability_policy_e`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `RMW_QOS_POLICY_DURABILITY_TRANSIENT_LOCAL` = 1.
    TransientLocal = 1,
    /// `RMW_QOS_POLICY_DURABILITY_VOLATILE` = 2 (rmw_zenoh's default).
    Volatile = 2,
}

/// QoS history (`rmw/types.h`, `rmw_qos_history_policy_e`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    /// `RMW_QOS_POLICY_HISTORY_KEEP_LAST` = 1 (rmw_zenoh's default).
    KeepLast = 1,
    /// `RMW_QOS_POLICY_HISTORY_KEEP_ALL` = 2.
    KeepAll = 2,
}

/// The QoS of a publisher as its liveliness token advertises it. Deadline, lifespan and
/// liveliness are rmw_zenoh's defaults (infinite, infinite, automatic with an infinite lease),
/// which it leaves empty in the string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qos {
    /// Reliability.
    pub reliability: Reliability,
    /// Durability.
    pub durability: Durability,
    /// History kind.
    pub history: History,
    /// History depth (samples).
    pub depth: u32,
}

/// rmw_zenoh's default depth (`qos.cpp`, `RMW_ZENOH_DEFAULT_HISTORY_DEPTH` = 42), left empty
/// in the QoS string when equal.
pub const RMW_ZENOH_DEFAULT_DEPTH: u32 = 42;

impl Qos {
    /// `/diagnostics`: reliable, volatile, keep last 10 (a best-effort publisher would match
    /// no reliable subscriber under DDS, and `diagnostic_aggregator` subscribes reliably),
    /// string `::,10:,:,:,,`.
    pub const DIAGNOSTICS: Qos = Qos {
        reliability: Reliability::Reliable,
        durability: Durability::Volatile,
        history: History::KeepLast,
        depth: 10,
    };

    /// lidarxdp's point cloud QoS: best effort, volatile, keep last 5 (a slow subscriber loses
    /// frames rather than stalling the publisher), string `2::,5:,:,:,,`.
    pub const LIDAR: Qos = Qos {
        reliability: Reliability::BestEffort,
        durability: Durability::Volatile,
        history: History::KeepLast,
        depth: 5,
    };

    /// The QoS chunk of a liveliness token (rmw_zenoh `liveliness_utils.cpp`,
    /// `qos_to_keyexpr`): `<reliability>:<durability>:<history>,<depth>:<deadline s>,<ns>:
    /// <lifespan s>,<ns>:<liveliness>,<lease s>,<ns>`, each value written as its decimal
    /// number only when it differs from rmw_zenoh's default (`qos.cpp`: reliable, volatile,
    /// keep last, depth 42, the rest infinite/automatic), else left empty. [`Qos::LIDAR`] is
    /// `2::,5:,:,:,,`.
    pub fn key_chunk(&self) -> String {
        let opt = |differs: bool, v: u32| {
            if differs {
                v.to_string()
            } else {
                String::new()
            }
        };
        format!(
            "{}:{}:{},{}:,:,:,,",
            opt(
                self.reliability != Reliability::Reliable,
                self.reliability as u32
            ),
            opt(
                self.durability != Durability::Volatile,
                self.durability as u32
            ),
            opt(self.history != History::KeepLast, self.history as u32),
            opt(self.depth != RMW_ZENOH_DEFAULT_DEPTH, self.depth),
        )
    }
}

/// The admin space prefix of every rmw_zenoh liveliness token (`liveliness_utils.cpp`,
/// `ADMIN_SPACE`).
pub const ADMIN_SPACE: &str = "@ros2_lv";

/// The ROS 2 node that owns lidarxdp's publishers, as its liveliness tokens name it.
///
/// Token chunks (rmw_zenoh `liveliness_utils.cpp`, `KeyexprIndex` and `Entity::Entity`):
/// `@ros2_lv/<domain>/<zid>/<nid>/<eid>/<kind>/<enclave>/<namespace>/<node name>` for a node
/// (`NN`, `eid` = `nid`, `rmw_node_data.cpp`), followed by
/// `/<topic>/<type name>/<type hash>/<qos>` for a publisher (`MP`, `eid` = the publisher's
/// id within the session, `rmw_publisher_data.cpp`); enclave, namespace, node name, topic,
/// type and hash pass through [`mangle_name`]. `zid` is the zenoh session id as the session
/// prints it (`Entity::make` takes `zenoh::Id::to_string`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeTokens<'a> {
    /// ROS domain id (`ROS_DOMAIN_ID`).
    pub domain_id: u32,
    /// The zenoh session id string.
    pub zid: &'a str,
    /// The node's id, unique among the entities of the session (rmw_zenoh's `nid`).
    pub node_id: u64,
    /// Security enclave, `/` by default.
    pub enclave: &'a str,
    /// Node namespace, `/` for the root namespace.
    pub namespace: &'a str,
    /// Node name, e.g. `lidarxdp`.
    pub name: &'a str,
}

impl NodeTokens<'_> {
    fn head(&self, eid: u64, kind: &str) -> String {
        format!(
            "{ADMIN_SPACE}/{}/{}/{}/{eid}/{kind}/{}/{}/{}",
            self.domain_id,
            self.zid,
            self.node_id,
            mangle_name(self.enclave),
            mangle_name(self.namespace),
            mangle_name(self.name),
        )
    }

    /// The node's token (`NN`), e.g.
    /// `@ros2_lv/0/<zid>/0/0/NN/%/%/lidarxdp`.
    pub fn node(&self) -> String {
        self.head(self.node_id, "NN")
    }

    /// The token of this node's `PointCloud2` publisher `publisher_id` on `topic` (`MP`), e.g.
    /// `@ros2_lv/0/<zid>/0/1/MP/%/%/lidarxdp/%lidar%front%points/sensor_msgs::msg::dds_::PointCloud2_/RIHS01_…/2::,5:,:,:,,`.
    pub fn publisher(&self, publisher_id: u64, topic: &str, distro: Distro, qos: &Qos) -> String {
        self.publisher_of(publisher_id, topic, POINTCLOUD2, distro, qos)
    }

    /// [`Self::publisher`] for a topic of any [`MessageType`].
    pub fn publisher_of(
        &self,
        publisher_id: u64,
        topic: &str,
        ty: MessageType,
        distro: Distro,
        qos: &Qos,
    ) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.head(publisher_id, "MP"),
            mangle_name(topic),
            mangle_name(ty.name),
            mangle_name(ty.type_hash(distro)),
            qos.key_chunk()
        )
    }
}

/// The attachment rmw_zenoh puts on every published sample (`attachment_helpers.cpp`,
/// `AttachmentData::serialize_to_zbytes`, in zenoh's serialization format): 33 bytes,
/// `sequence_number` `i64` little-endian at 0 (rmw_zenoh starts at 1, +1 per message),
/// `source_timestamp` `i64` little-endian at 8 (ns since the Unix epoch), the LEB128 length 16
/// (`0x10`) at 16 (zenoh serialises a fixed-size array as a sequence), the 16-byte publisher
/// GID at 17.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// Per-publisher message counter.
    pub sequence_number: i64,
    /// Publication time, ns since the Unix epoch.
    pub source_timestamp_ns: i64,
    /// The publisher's GID (`RMW_GID_STORAGE_SIZE` = 16 bytes). rmw_zenoh derives it as the
    /// XXH3-128 hash of the publisher's liveliness key (low 64 bits then high 64 bits, each
    /// little-endian); subscribers only compare it, so any stable unique 16 bytes serve.
    pub gid: [u8; 16],
}

/// Encoded length of an [`Attachment`].
pub const ATTACHMENT_LEN: usize = 33;

impl Attachment {
    /// The 33 attachment bytes.
    pub fn encode(&self) -> [u8; ATTACHMENT_LEN] {
        let mut b = [0u8; ATTACHMENT_LEN];
        b[0..8].copy_from_slice(&self.sequence_number.to_le_bytes());
        b[8..16].copy_from_slice(&self.source_timestamp_ns.to_le_bytes());
        b[16] = 16;
        b[17..33].copy_from_slice(&self.gid);
        b
    }

    /// Parses attachment bytes; `None` unless they are exactly 33 bytes with `0x10` at 16.
    pub fn decode(b: &[u8]) -> Option<Attachment> {
        if b.len() != ATTACHMENT_LEN || b[16] != 16 {
            return None;
        }
        Some(Attachment {
            sequence_number: i64::from_le_bytes(b[0..8].try_into().ok()?),
            source_timestamp_ns: i64::from_le_bytes(b[8..16].try_into().ok()?),
            gid: b[17..33].try_into().ok()?,
        })
    }
}
