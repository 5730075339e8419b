//! ROS 2 over DDS (rmw_cyclonedds_cpp, rmw_fastrtps_cpp, rmw_dds_common; Jazzy branches):
//! the names, USER_DATA strings and the graph message a DDS sink announces itself with.
//!
//! - topic: `rt` + the fully qualified ROS name (design.ros2.org "Topic and Service name
//!   mapping to DDS": prefix `rt` for topics; rmw_cyclonedds `make_fqtopic(ROS_TOPIC_PREFIX,
//!   ...)`), e.g. `/lidar/front/points` → `rt/lidar/front/points`;
//! - type: [`POINTCLOUD2_TYPE_NAME`](super::POINTCLOUD2_TYPE_NAME);
//! - participant USER_DATA: `enclave=<enclave>;` (rmw_cyclonedds `rmw_node.cpp`,
//!   `rmw_context_impl_s::init`; rmw_fastrtps `participant.cpp`, `create_participant`);
//! - endpoint USER_DATA on Jazzy and later: `typehash=<RIHS01 string>;` (rmw_dds_common
//!   `qos.cpp`, `encode_type_hash_for_user_data_qos`); Humble's RMWs put none;
//! - the graph: `rmw_dds_common/msg/ParticipantEntitiesInfo` on topic `ros_discovery_info`
//!   (reliable, transient local, keep last 1: rmw_cyclonedds `rmw_node.cpp`, the
//!   `pubsub_qos` of `common.pub`), whose GIDs are DDS GUIDs (16 bytes; rmw_cyclonedds
//!   `convert_guid_to_gid`, rmw_fastrtps `copy_from_fastrtps_guid_to_byte_array`).
#![forbid(unsafe_code)]

use super::cdr::{CDR_LE_HEADER, Cdr, CdrError};
use super::names::Distro;

/// The DDS topic of the ROS graph (rmw_dds_common `graph_cache.hpp`; rmw_cyclonedds and
/// rmw_fastrtps create it under this exact name, outside the `rt` prefix).
pub const ROS_DISCOVERY_INFO_TOPIC: &str = "ros_discovery_info";

/// The DDS type name of `rmw_dds_common/msg/ParticipantEntitiesInfo`.
pub const PARTICIPANT_ENTITIES_INFO_TYPE_NAME: &str =
    "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_";

/// The RIHS01 type hash of `rmw_dds_common/msg/ParticipantEntitiesInfo` on Jazzy (REP 2011
/// "Type description distribution": SHA-256 of the type description JSON with its
/// referenced types `rmw_dds_common/msg/Gid` (`uint8[16] data`, msg `char` being `uint8`)
/// and `NodeEntitiesInfo` (`string<=256`, two `Gid[]`), as `rosidl_generator_type_description`
/// serialises it; the same computation gives [`super::POINTCLOUD2_TYPE_HASH_RIHS01`] for
/// `PointCloud2`, and zenoh's ROS 2/DDS bridge announces this value).
pub const PARTICIPANT_ENTITIES_INFO_TYPE_HASH_RIHS01: &str =
    "RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e";

/// Longest node name and namespace `NodeEntitiesInfo` carries (`string<=256`).
pub const MAX_NODE_NAME: usize = 256;

/// The DDS topic name of a ROS topic: `rt` + `topic` (`/lidar/front/points` →
/// `rt/lidar/front/points`). `topic` is expected to have passed
/// [`super::validate_topic`], so it starts with `/`.
pub fn topic_name(topic: &str) -> String {
    format!("rt{topic}")
}

/// The participant's USER_DATA: `enclave=<enclave>;` (e.g. `enclave=/;`).
pub fn participant_user_data(enclave: &str) -> String {
    format!("enclave={enclave};")
}

/// An endpoint's USER_DATA for a type whose RIHS01 hash is `hash`: `typehash=<hash>;` on
/// Jazzy and later, `None` on Humble (whose RMWs send no USER_DATA on endpoints).
pub fn endpoint_user_data(distro: Distro, hash: &str) -> Option<String> {
    match distro {
        Distro::Humble => None,
        Distro::Jazzy => Some(format!("typehash={hash};")),
    }
}

/// Bytes of a GID in `rmw_dds_common/msg/Gid`: `char[16] data` on Jazzy and later,
/// `char[24] data` on Humble (the DDS GUID's 16 bytes, then zeros).
pub fn gid_len(distro: Distro) -> usize {
    match distro {
        Distro::Humble => 24,
        Distro::Jazzy => 16,
    }
}

/// One `rmw_dds_common/msg/NodeEntitiesInfo`: a node and the GUIDs of its DDS readers
/// and writers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEntities<'a> {
    /// `node_namespace`, e.g. `/`, at most [`MAX_NODE_NAME`] bytes.
    pub namespace: &'a str,
    /// `node_name`, e.g. `lidarxdp`, at most [`MAX_NODE_NAME`] bytes.
    pub name: &'a str,
    /// `reader_gid_seq`: DDS GUIDs of the node's readers (16 bytes each).
    pub readers: &'a [[u8; 16]],
    /// `writer_gid_seq`: DDS GUIDs of the node's writers.
    pub writers: &'a [[u8; 16]],
}

/// XCDR1 little-endian `rmw_dds_common/msg/ParticipantEntitiesInfo` (`Gid gid`,
/// `NodeEntitiesInfo[] node_entities_info_seq`), with GIDs of [`gid_len`] bytes for
/// `distro`: the encapsulation header, the participant GUID `gid` (zero-padded on Humble),
/// the node count, then per node its namespace and name (CDR strings), and its reader and
/// writer GID sequences (`uint32` count, then the GIDs; `char` arrays need no alignment).
///
/// # Errors
/// [`CdrError::NulInString`] for a name with a NUL byte; [`CdrError::DataTooLong`] for a
/// name over [`MAX_NODE_NAME`] bytes (`bytes` is its length).
pub fn participant_entities_info(
    gid: &[u8; 16],
    nodes: &[NodeEntities<'_>],
    distro: Distro,
) -> Result<Vec<u8>, CdrError> {
    let pad = gid_len(distro) - 16;
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&CDR_LE_HEADER);
    let mut c = Cdr(&mut out, CDR_LE_HEADER.len());
    fn gid_out(c: &mut Cdr<'_>, g: &[u8; 16], pad: usize) {
        c.0.extend_from_slice(g);
        c.0.resize(c.0.len() + pad, 0);
    }
    gid_out(&mut c, gid, pad);
    c.u32(nodes.len() as u32);
    for n in nodes {
        for s in [n.namespace, n.name] {
            if s.len() > MAX_NODE_NAME {
                return Err(CdrError::DataTooLong {
                    bytes: s.len() as u64,
                });
            }
            c.string(s)?;
        }
        for seq in [n.readers, n.writers] {
            c.u32(seq.len() as u32);
            for g in seq {
                gid_out(&mut c, g, pad);
            }
        }
    }
    Ok(out)
}
