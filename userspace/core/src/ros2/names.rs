//! ROS 2 names: message type names and hashes, the default topics and frame ids, the ROS 2
//! distribution, rmw_zenoh's key expressions and name mangling, the domain id and the topic
//! name rules (design.ros2.org, "Topic and Service name mapping to DDS").
#![forbid(unsafe_code)]

use super::cdr::{DIAGNOSTIC_ARRAY_TYPE_NAME, IMU_TYPE_NAME};

/// The DDS type name of `sensor_msgs/msg/PointCloud2` as rmw_zenoh puts it in key expressions
/// (`MessageTypeSupport::get_name`, rmw_zenoh `type_support_common.cpp`:
/// `<package>::msg::dds_::<Type>_`).
pub const POINTCLOUD2_TYPE_NAME: &str = "sensor_msgs::msg::dds_::PointCloud2_";

/// The RIHS01 type hash of `sensor_msgs/msg/PointCloud2` (REP 2016 "ROS Interface Hashes",
/// as printed by `rosidl_stringify_type_hash`), identical on Jazzy, Kilted and Rolling.
pub const POINTCLOUD2_TYPE_HASH_RIHS01: &str =
    "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5";

/// A ROS 2 message type as rmw_zenoh's keys and DDS name it: its DDS type name and its
/// RIHS01 type hash (REP 2016, as `rosidl_generator_c` writes it in the package's
/// `*__description.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageType {
    /// `<package>::msg::dds_::<Type>_`.
    pub name: &'static str,
    /// `RIHS01_<64 hex digits>` (Jazzy and later).
    pub rihs01: &'static str,
}

impl MessageType {
    /// The type hash string for `distro` ([`TYPE_HASH_NOT_SUPPORTED`] on Humble).
    pub fn type_hash(self, distro: Distro) -> &'static str {
        match distro {
            Distro::Humble => TYPE_HASH_NOT_SUPPORTED,
            Distro::Jazzy => self.rihs01,
        }
    }
}

/// `sensor_msgs/msg/PointCloud2`.
pub const POINTCLOUD2: MessageType = MessageType {
    name: POINTCLOUD2_TYPE_NAME,
    rihs01: POINTCLOUD2_TYPE_HASH_RIHS01,
};

/// `sensor_msgs/msg/Imu` (RIHS01 from `sensor_msgs/msg/detail/imu__functions.c`, Jazzy).
pub const IMU: MessageType = MessageType {
    name: IMU_TYPE_NAME,
    rihs01: "RIHS01_7d9a00ff131080897a5ec7e26e315954b8eae3353c3f995c55faf71574000b5b",
};

/// `diagnostic_msgs/msg/DiagnosticArray` (RIHS01 from
/// `diagnostic_msgs/msg/detail/diagnostic_array__functions.c`, Jazzy).
pub const DIAGNOSTIC_ARRAY: MessageType = MessageType {
    name: DIAGNOSTIC_ARRAY_TYPE_NAME,
    rihs01: "RIHS01_5a8a36efb05fb25070fa0fb3810290c0e6cd4862b54a8fb975a1ee8dc55a333e",
};

/// The ROS 2 topic lidarxdp publishes its sensors' health on (REP 107's diagnostics topic,
/// which Autoware's and ROS's diagnostic aggregators read).
pub const DIAGNOSTICS_TOPIC: &str = "/diagnostics";

/// The default IMU topic of sensor `name`: `/lidar/<name>/imu`.
pub fn default_imu_topic(sensor_name: &str) -> String {
    format!("/lidar/{sensor_name}/imu")
}

/// The type hash rmw_zenoh's Humble branch writes in place of a RIHS01 hash, Humble's rosidl
/// having no type hashes.
pub const TYPE_HASH_NOT_SUPPORTED: &str = "TypeHashNotSupported";

/// The ROS 2 distribution whose rmw_zenoh the names must match; it picks the type hash part of
/// the key expressions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Distro {
    /// Humble: [`TYPE_HASH_NOT_SUPPORTED`].
    Humble,
    /// Jazzy and later: [`POINTCLOUD2_TYPE_HASH_RIHS01`].
    #[default]
    Jazzy,
}

impl Distro {
    /// `humble` or `jazzy`, as the flag and the configuration file write it.
    pub fn name(self) -> &'static str {
        match self {
            Distro::Humble => "humble",
            Distro::Jazzy => "jazzy",
        }
    }

    /// The type hash string of `PointCloud2` for this distribution.
    pub fn pointcloud2_type_hash(self) -> &'static str {
        match self {
            Distro::Humble => TYPE_HASH_NOT_SUPPORTED,
            Distro::Jazzy => POINTCLOUD2_TYPE_HASH_RIHS01,
        }
    }
}

/// A name that is not a ROS 2 distribution [`Distro`] knows ([`Distro`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a ROS 2 distribution; valid: humble, jazzy (also kilted, rolling)")]
pub struct UnknownDistro {
    /// The name as given.
    pub name: String,
}

impl std::str::FromStr for Distro {
    type Err = UnknownDistro;

    /// `humble`, or `jazzy` (also `kilted` and `rolling`, which share Jazzy's RIHS01 hash of
    /// `PointCloud2`).
    ///
    /// # Errors
    /// [`UnknownDistro`] for any other text; its message lists the valid names.
    fn from_str(s: &str) -> Result<Self, UnknownDistro> {
        match s {
            "humble" => Ok(Distro::Humble),
            "jazzy" | "kilted" | "rolling" => Ok(Distro::Jazzy),
            _ => Err(UnknownDistro { name: s.to_owned() }),
        }
    }
}

/// The zenoh key expression of a `PointCloud2` topic (rmw_zenoh `liveliness_utils.cpp`,
/// `TopicInfo`): `<domain>/<topic without its leading and trailing '/'>/<type name>/<type hash>`,
/// e.g. domain 0, `/lidar/front/points`, Jazzy:
/// `0/lidar/front/points/sensor_msgs::msg::dds_::PointCloud2_/RIHS01_9198…e2b5`.
/// `topic` is expected to have passed [`validate_topic`].
pub fn topic_key_expr(domain_id: u32, topic: &str, distro: Distro) -> String {
    key_expr(domain_id, topic, POINTCLOUD2, distro)
}

/// [`topic_key_expr`] for a topic of any [`MessageType`].
pub fn key_expr(domain_id: u32, topic: &str, ty: MessageType, distro: Distro) -> String {
    let t = topic.strip_prefix('/').unwrap_or(topic);
    let t = t.strip_suffix('/').unwrap_or(t);
    format!("{domain_id}/{t}/{}/{}", ty.name, ty.type_hash(distro))
}

/// rmw_zenoh's escaping of a name put in one chunk of a liveliness key expression
/// (`liveliness_utils.cpp`, `mangle_name`): every `/` becomes `%`, nothing else changes
/// (`/` → `%`, `/lidar/front/points` → `%lidar%front%points`).
pub fn mangle_name(name: &str) -> String {
    name.replace('/', "%")
}

/// The default topic of a sensor: `/lidar/<sensor name>/points`. Check it with
/// [`validate_topic`]: a sensor name that is not a valid ROS 2 name token makes it invalid.
pub fn default_topic(sensor_name: &str) -> String {
    format!("/lidar/{sensor_name}/points")
}

/// The default `header.frame_id` of a sensor: its name.
pub fn default_frame_id(sensor_name: &str) -> String {
    sensor_name.to_owned()
}

pub use crate::valid::MAX_ROS_DOMAIN_ID;

/// A ROS domain id that is not a number or is out of 0..=[`MAX_ROS_DOMAIN_ID`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DomainIdError {
    /// `ROS_DOMAIN_ID` is not a decimal number.
    #[error(
        "ROS_DOMAIN_ID: {0:?} is not a number; valid 0..={MAX_ROS_DOMAIN_ID} (or pass --ros-domain-id)"
    )]
    NotANumber(String),
    /// The id is over [`MAX_ROS_DOMAIN_ID`].
    #[error("{from}: {id} is out of range; valid 0..={MAX_ROS_DOMAIN_ID}")]
    OutOfRange {
        /// Where it came from: `--ros-domain-id` or `ROS_DOMAIN_ID`.
        from: &'static str,
        /// The id given.
        id: u32,
    },
}

/// The ROS domain id: `flag` (`--ros-domain-id`) when given, else the `ROS_DOMAIN_ID`
/// environment value `env` (blank counts as unset), else 0.
///
/// # Errors
/// [`DomainIdError`] naming the source (`--ros-domain-id` or `ROS_DOMAIN_ID`) with its value
/// and the valid range 0..=[`MAX_ROS_DOMAIN_ID`]: not a number, or out of range.
pub fn domain_id(flag: Option<u32>, env: Option<&str>) -> Result<u32, DomainIdError> {
    let env = env.map(str::trim).filter(|v| !v.is_empty());
    let (id, from) = match (flag, env) {
        (Some(d), _) => (d, "--ros-domain-id"),
        (None, Some(v)) => (
            v.parse::<u32>()
                .map_err(|_| DomainIdError::NotANumber(v.to_owned()))?,
            "ROS_DOMAIN_ID",
        ),
        (None, None) => (0, "ROS_DOMAIN_ID"),
    };
    if id > MAX_ROS_DOMAIN_ID {
        return Err(DomainIdError::OutOfRange { from, id });
    }
    Ok(id)
}

/// A topic name that breaks a ROS 2 name rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field} = {name:?}: {rule} (ROS 2 \"Topic and Service name mapping to DDS\", name constraints)"
)]
pub struct NameError {
    /// The configuration field or flag that holds the name, e.g. `sensors.front.topic`.
    pub field: String,
    /// The offending name.
    pub name: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

/// Checks that `topic` is a fully qualified ROS 2 topic name (design.ros2.org "Topic and
/// Service name mapping to DDS", "ROS 2 Topic and Service Name Constraints", with the
/// substitutions `~` and `{}` refused, the daemon having no node namespace to expand them
/// against): it starts with `/`, holds only `A-Z a-z 0-9 _ /`, no token (text between
/// slashes) starts with a digit, it has no `//` and no `__`, and it does not end with `/`.
///
/// # Errors
/// [`NameError`] naming `field`, the topic and the first rule broken.
pub fn validate_topic(field: &str, topic: &str) -> Result<(), NameError> {
    let err = |rule| {
        Err(NameError {
            field: field.to_owned(),
            name: topic.to_owned(),
            rule,
        })
    };
    if topic.is_empty() {
        return err("must not be empty");
    }
    if !topic.starts_with('/') {
        return err("must be fully qualified: start with '/'");
    }
    if topic
        .chars()
        .any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '/'))
    {
        return err("may contain only alphanumerics, '_' and '/'");
    }
    if topic.contains("//") {
        return err("must not contain repeated '/'");
    }
    if topic.contains("__") {
        return err("must not contain repeated '_'");
    }
    if topic.ends_with('/') {
        return err("must not end with '/'");
    }
    if topic[1..]
        .split('/')
        .any(|t| t.starts_with(|c: char| c.is_ascii_digit()))
    {
        return err("no token (text between '/') may start with a digit");
    }
    Ok(())
}
