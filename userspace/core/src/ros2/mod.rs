//! ROS 2 over zenoh, sans-IO: the `sensor_msgs/msg/PointCloud2` CDR encoding, and rmw_zenoh's
//! names (topic key expression, liveliness tokens, QoS string) and per-message attachment.
//!
//! Nothing here opens a session: a sink (MCAP recorder, zenoh publisher) lays out
//! [`PointCloud2Prefix`] + the points + [`POINTCLOUD2_SUFFIX`], and declares the key
//! expressions built here with its own transport.
//!
//! Sources:
//! - OMG DDS-XTypes 1.3, "Data Representation" (XCDR version 1, PLAIN_CDR): little-endian
//!   encapsulation identifier `CDR_LE` = `00 01` plus two option bytes `00 00`, each primitive
//!   aligned to its own size counted from the end of that 4-byte header, strings as a `uint32`
//!   length including the NUL terminator, then the bytes and the NUL, sequences as a `uint32`
//!   element count then the elements;
//! - ROS 2 `sensor_msgs/msg/PointCloud2.msg`, `sensor_msgs/msg/PointField.msg`,
//!   `std_msgs/msg/Header.msg`, `builtin_interfaces/msg/Time.msg` (common_interfaces);
//! - ros2/rmw_zenoh `docs/design.md` ("Graph Cache", "Namespaces", "Quality of Service") and
//!   `rmw_zenoh_cpp/src/detail/`: `liveliness_utils.cpp` (`TopicInfo`, `Entity`,
//!   `qos_to_keyexpr`, `mangle_name`), `qos.cpp` (the defaults), `attachment_helpers.cpp`
//!   (`AttachmentData::serialize_to_zbytes`), `rmw_node_data.cpp` and `rmw_publisher_data.cpp`
//!   (which ids go into a token, the sequence number starting at 1);
//! - zenoh `serialization.md` ("Zenoh serialization format": numbers little-endian, sequences
//!   and fixed-size arrays as a LEB128 length then the items);
//! - design.ros2.org "Topic and Service name mapping to DDS", section "ROS 2 Topic and Service
//!   Name Constraints".
#![forbid(unsafe_code)]

pub use crate::msg::{DiagnosticLevel, DiagnosticStatus};

mod cdr;
pub mod dds;
mod names;
mod view;
mod zenoh;

pub use cdr::*;
pub use names::*;
pub use view::*;
pub use zenoh::*;

#[cfg(test)]
mod tests {

    /// A DiagnosticArray of one status with one key/value, byte for byte.
    #[test]
    fn diagnostic_array_layout() {
        let m = diagnostic_array(
            2_000_000_005,
            &[DiagnosticStatus {
                level: DiagnosticLevel::Warn,
                name: "lidarxdp: f".into(),
                message: "loss".into(),
                hardware_id: "".into(),
                values: vec![("k".into(), "vv".into())],
            }],
        )
        .unwrap();
        let mut want = CDR_LE_HEADER.to_vec();
        want.extend_from_slice(&2i32.to_le_bytes());
        want.extend_from_slice(&5u32.to_le_bytes());
        want.extend_from_slice(&[1, 0, 0, 0, 0]); // frame_id "" (length 1: the NUL)
        want.extend_from_slice(&[0, 0, 0]); // pad to 4 (body offset 12)
        want.extend_from_slice(&1u32.to_le_bytes()); // one status
        want.push(1); // WARN
        want.extend_from_slice(&[0, 0, 0]); // pad (body 17 -> 20)
        want.extend_from_slice(&12u32.to_le_bytes());
        want.extend_from_slice(b"lidarxdp: f\0");
        want.extend_from_slice(&5u32.to_le_bytes());
        want.extend_from_slice(b"loss\0");
        want.extend_from_slice(&[0, 0, 0]); // pad (body 41 -> 44)
        want.extend_from_slice(&1u32.to_le_bytes());
        want.push(0); // hardware_id ""
        want.extend_from_slice(&[0, 0, 0]); // pad (body 49 -> 52)
        want.extend_from_slice(&1u32.to_le_bytes()); // one key/value
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(b"k\0");
        want.extend_from_slice(&[0, 0]); // pad (body 62 -> 64)
        want.extend_from_slice(&3u32.to_le_bytes());
        want.extend_from_slice(b"vv\0");
        assert_eq!(m, want);
    }

    /// The Imu message's fields at their CDR offsets: the header as PointCloud2's, then
    /// float64s aligned to 8 from the body start.
    #[test]
    fn imu_message_layout() {
        let m = imu_message(
            1_700_000_000_250_000_000,
            "os_imu",
            [0.1, 0.2, 0.3],
            [1.0, 2.0, 9.5],
        )
        .unwrap();
        assert_eq!(&m[..4], &CDR_LE_HEADER);
        assert_eq!(
            i32::from_le_bytes(m[4..8].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(
            u32::from_le_bytes(m[8..12].try_into().unwrap()),
            250_000_000
        );
        assert_eq!(u32::from_le_bytes(m[12..16].try_into().unwrap()), 7);
        assert_eq!(&m[16..23], b"os_imu\0");
        // Body offset 19 is the string's end; the first float64 is at body 24 (message 28).
        let f = |i: usize| f64::from_le_bytes(m[28 + 8 * i..36 + 8 * i].try_into().unwrap());
        assert_eq!([f(0), f(1), f(2), f(3)], [0.0, 0.0, 0.0, 1.0]);
        assert_eq!(f(4), -1.0, "orientation unknown");
        assert_eq!([f(13), f(14), f(15)], [0.1, 0.2, 0.3]);
        assert_eq!([f(25), f(26), f(27)], [1.0, 2.0, 9.5]);
        assert_eq!(m.len(), 28 + 8 * 37);
        assert!(matches!(
            imu_message(0, "a\0b", [0.0; 3], [0.0; 3]),
            Err(CdrError::NulInString(_))
        ));
    }

    /// The flag wins over `ROS_DOMAIN_ID`, a blank variable is unset, and each refusal names
    /// its source, the value and the valid range.
    #[test]
    fn domain_id_sources_and_refusals() {
        use super::{DomainIdError, domain_id};
        assert_eq!(domain_id(None, None), Ok(0));
        assert_eq!(domain_id(None, Some(" 7 ")), Ok(7));
        assert_eq!(domain_id(None, Some("  ")), Ok(0));
        assert_eq!(domain_id(Some(3), Some("x")), Ok(3));
        assert_eq!(domain_id(Some(232), None), Ok(232));
        let e = domain_id(None, Some("x")).unwrap_err();
        assert_eq!(e, DomainIdError::NotANumber("x".into()));
        assert_eq!(
            e.to_string(),
            "ROS_DOMAIN_ID: \"x\" is not a number; valid 0..=232 (or pass --ros-domain-id)"
        );
        assert_eq!(
            domain_id(Some(233), None).unwrap_err().to_string(),
            "--ros-domain-id: 233 is out of range; valid 0..=232"
        );
        assert_eq!(
            domain_id(None, Some("300")).unwrap_err().to_string(),
            "ROS_DOMAIN_ID: 300 is out of range; valid 0..=232"
        );
    }

    /// `ParticipantEntitiesInfo` byte for byte, written out from the XCDR1 rules: GID (16
    /// bytes on Jazzy), node count, the strings with their NUL and padding to 4, the GID
    /// sequences; on Humble every GID is 24 bytes.
    #[test]
    fn participant_entities_info_is_xcdr1_le() {
        use dds::{NodeEntities, participant_entities_info};
        let p = [0x11u8; 16];
        let w = [0x22u8; 16];
        let b = participant_entities_info(
            &p,
            &[NodeEntities {
                namespace: "/",
                name: "lidarxdp",
                readers: &[],
                writers: &[w],
            }],
            Distro::Jazzy,
        )
        .unwrap();
        let mut want = vec![0, 1, 0, 0];
        want.extend_from_slice(&p);
        want.extend_from_slice(&1u32.to_le_bytes()); // one node
        want.extend_from_slice(&2u32.to_le_bytes()); // "/" + NUL
        want.extend_from_slice(b"/\0\0\0"); // padded to 4
        want.extend_from_slice(&9u32.to_le_bytes());
        want.extend_from_slice(b"lidarxdp\0\0\0\0"); // 9 bytes, padded to 12
        want.extend_from_slice(&0u32.to_le_bytes()); // no reader
        want.extend_from_slice(&1u32.to_le_bytes()); // one writer
        want.extend_from_slice(&w);
        assert_eq!(b, want);
        let h = participant_entities_info(&p, &[], Distro::Humble).unwrap();
        let mut want = vec![0, 1, 0, 0];
        want.extend_from_slice(&p);
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(h, want);
        let long = "n".repeat(257);
        assert_eq!(
            participant_entities_info(
                &p,
                &[NodeEntities {
                    namespace: "/",
                    name: &long,
                    readers: &[],
                    writers: &[],
                }],
                Distro::Jazzy
            ),
            Err(CdrError::DataTooLong { bytes: 257 })
        );
    }

    /// The DDS names and USER_DATA strings as rmw_cyclonedds and rmw_fastrtps write them.
    #[test]
    fn dds_names_and_user_data() {
        assert_eq!(
            dds::topic_name("/lidar/front/points"),
            "rt/lidar/front/points"
        );
        assert_eq!(dds::participant_user_data("/"), "enclave=/;");
        assert_eq!(
            dds::endpoint_user_data(Distro::Jazzy, POINTCLOUD2_TYPE_HASH_RIHS01).as_deref(),
            Some(
                "typehash=RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5;"
            )
        );
        assert_eq!(dds::endpoint_user_data(Distro::Humble, "x"), None);
    }
    use super::*;
    use crate::point::POINT_FIELDS;

    #[test]
    fn prefix_bytes_of_a_two_field_cloud() {
        let fields = [
            FieldRef {
                name: "x",
                offset: 0,
                datatype: 7,
                count: 1,
            },
            FieldRef {
                name: "intensity",
                offset: 4,
                datatype: 2,
                count: 1,
            },
        ];
        let p = PointCloud2Prefix::new(3_000_000_007, "ab", fields, 5, 3).unwrap();
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[0, 1, 0, 0][..],
            &[3, 0, 0, 0], &[7, 0, 0, 0],             // stamp 3 s, 7 ns
            &[3, 0, 0, 0], b"ab\0", &[0],             // frame_id "ab", pad to 4
            &[1, 0, 0, 0], &[3, 0, 0, 0],             // height 1, width 3
            &[2, 0, 0, 0],                            // 2 fields
            &[2, 0, 0, 0], b"x\0", &[0, 0],           // "x", pad
            &[0, 0, 0, 0], &[7], &[0, 0, 0], &[1, 0, 0, 0], // offset 0, FLOAT32, pad, count 1
            &[10, 0, 0, 0], b"intensity\0", &[0, 0],  // "intensity", pad
            &[4, 0, 0, 0], &[2], &[0, 0, 0], &[1, 0, 0, 0], // offset 4, UINT8, pad, count 1
            &[0], &[0, 0, 0],                         // is_bigendian, pad
            &[5, 0, 0, 0], &[15, 0, 0, 0], &[15, 0, 0, 0], // point_step, row_step, data len
        ]
        .concat();
        assert_eq!(p.as_bytes(), &want[..]);
        assert_eq!((p.len(), p.data_len(), p.message_len()), (96, 15, 112));
        let data: Vec<u8> = (0..15).collect();
        let mut msg = vec![0xaa];
        p.write_message(&data, &mut msg).unwrap();
        assert_eq!(msg.len(), 113);
        assert_eq!(&msg[1..97], &want[..]);
        assert_eq!(&msg[97..112], &data[..]);
        assert_eq!(msg[112], 1); // is_dense
    }

    #[test]
    fn view_reads_back_what_the_prefix_wrote_and_refuses_damage() {
        let p = PointCloud2Prefix::new(
            3_000_000_007,
            "front",
            POINT_FIELDS.iter().map(FieldRef::from),
            32,
            2,
        )
        .unwrap();
        let data: Vec<u8> = (0..64).collect();
        let mut msg = Vec::new();
        p.write_message(&data, &mut msg).unwrap();
        let v = PointCloud2View::parse(&msg).unwrap();
        assert_eq!(v.stamp_ns, 3_000_000_007);
        assert_eq!(v.frame_id, "front");
        assert_eq!(
            (v.height, v.width, v.point_step, v.row_step),
            (1, 2, 32, 64)
        );
        assert_eq!(v.fields.len(), POINT_FIELDS.len());
        assert_eq!(v.fields[0], FieldRef::from(&POINT_FIELDS[0]));
        assert_eq!(v.data, &data[..]);
        assert_eq!(v.data_offset, p.len());
        assert_eq!(v.data_offset % 4, 0);
        assert!(!v.is_bigendian && v.is_dense);
        // Every truncation is an error, never a panic.
        for cut in 0..msg.len() {
            assert!(PointCloud2View::parse(&msg[..cut]).is_err(), "cut {cut}");
        }
        let mut be = msg.clone();
        be[1] = 0;
        assert_eq!(
            PointCloud2View::parse(&be),
            Err(CdrReadError::Encapsulation([0, 0, 0, 0]))
        );
        // width 3 with 64 bytes of data.
        let mut wide = msg.clone();
        let w = 4 + 8 + 4 + 6 + 2 + 4; // encapsulation, stamp, len, "front\0", pad, height
        assert_eq!(&wide[w..w + 4], &2u32.to_le_bytes());
        wide[w] = 3;
        assert_eq!(
            PointCloud2View::parse(&wide),
            Err(CdrReadError::Shape {
                data: 64,
                width: 3,
                height: 1,
                point_step: 32
            })
        );
    }

    #[test]
    fn write_into_fills_an_exact_buffer_and_refuses_other_lengths() {
        let p =
            PointCloud2Prefix::new(5, "f", POINT_FIELDS.iter().map(FieldRef::from), 32, 1).unwrap();
        let data = [7u8; 32];
        let mut via_vec = Vec::new();
        p.write_message(&data, &mut via_vec).unwrap();
        let mut out = vec![0u8; p.message_len()];
        p.write_into(&data, &mut out).unwrap();
        assert_eq!(out, via_vec);
        let mut short = vec![0u8; p.message_len() - 1];
        assert_eq!(
            p.write_into(&data, &mut short),
            Err(CdrError::DataLength {
                want: p.message_len(),
                got: p.message_len() - 1
            })
        );
        assert!(short.iter().all(|&b| b == 0));
        assert_eq!(
            p.write_into(&data[..31], &mut out),
            Err(CdrError::DataLength { want: 32, got: 31 })
        );
    }

    #[test]
    fn prefix_of_the_full_point_is_32_byte_steps() {
        let p = PointCloud2Prefix::new(1, "front", POINT_FIELDS.iter().map(FieldRef::from), 32, 2)
            .unwrap();
        let b = p.as_bytes();
        assert_eq!(&b[b.len() - 12..], &[32, 0, 0, 0, 64, 0, 0, 0, 64, 0, 0, 0]);
        assert_eq!(&b[4..12], &[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(p.data_len(), 64);
    }

    #[test]
    fn prefix_errors() {
        let none: [FieldRef; 0] = [];
        assert_eq!(
            PointCloud2Prefix::new(0, "f", none, 65536, 65536),
            Err(CdrError::DataTooLong { bytes: 1 << 32 })
        );
        assert_eq!(
            PointCloud2Prefix::new(0, "a\0b", none, 1, 1),
            Err(CdrError::NulInString("a\0b".into()))
        );
        let p = PointCloud2Prefix::new(0, "f", none, 4, 2).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            p.write_message(&[0; 7], &mut out),
            Err(CdrError::DataLength { want: 8, got: 7 })
        );
        assert!(out.is_empty());
    }

    #[test]
    fn stamp_seconds_saturate() {
        let p = PointCloud2Prefix::new(u64::MAX, "", [], 0, 0).unwrap();
        assert_eq!(&p.as_bytes()[4..8], &i32::MAX.to_le_bytes());
        assert_eq!(&p.as_bytes()[8..12], &709_551_615u32.to_le_bytes());
    }

    #[test]
    fn topic_key_expressions() {
        assert_eq!(
            topic_key_expr(0, "/lidar/front/points", Distro::Jazzy),
            "0/lidar/front/points/sensor_msgs::msg::dds_::PointCloud2_/\
             RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5"
        );
        assert_eq!(
            topic_key_expr(42, "/points", Distro::Humble),
            "42/points/sensor_msgs::msg::dds_::PointCloud2_/TypeHashNotSupported"
        );
    }

    #[test]
    fn qos_chunks() {
        assert_eq!(Qos::LIDAR.key_chunk(), "2::,5:,:,:,,");
        let default = Qos {
            reliability: Reliability::Reliable,
            durability: Durability::Volatile,
            history: History::KeepLast,
            depth: 42,
        };
        assert_eq!(default.key_chunk(), "::,:,:,:,,");
        let other = Qos {
            reliability: Reliability::Reliable,
            durability: Durability::TransientLocal,
            history: History::KeepAll,
            depth: 10,
        };
        assert_eq!(other.key_chunk(), ":1:2,10:,:,:,,");
    }

    #[test]
    fn liveliness_tokens() {
        let n = NodeTokens {
            domain_id: 7,
            zid: "a1b2c3d4e5f60718293a4b5c6d7e8f90",
            node_id: 0,
            enclave: "/",
            namespace: "/",
            name: "lidarxdp",
        };
        assert_eq!(
            n.node(),
            "@ros2_lv/7/a1b2c3d4e5f60718293a4b5c6d7e8f90/0/0/NN/%/%/lidarxdp"
        );
        assert_eq!(
            n.publisher(1, "/lidar/front/points", Distro::Jazzy, &Qos::LIDAR),
            "@ros2_lv/7/a1b2c3d4e5f60718293a4b5c6d7e8f90/0/1/MP/%/%/lidarxdp/\
             %lidar%front%points/sensor_msgs::msg::dds_::PointCloud2_/\
             RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5/2::,5:,:,:,,"
        );
        let ns = NodeTokens {
            namespace: "/robot/sensing",
            ..n
        };
        assert_eq!(
            ns.publisher(3, "/points", Distro::Humble, &Qos::LIDAR),
            "@ros2_lv/7/a1b2c3d4e5f60718293a4b5c6d7e8f90/0/3/MP/%/%robot%sensing/lidarxdp/\
             %points/sensor_msgs::msg::dds_::PointCloud2_/TypeHashNotSupported/2::,5:,:,:,,"
        );
    }

    #[test]
    fn attachment_bytes() {
        let a = Attachment {
            sequence_number: 1,
            source_timestamp_ns: 1_700_000_000_123_456_789,
            gid: core::array::from_fn(|i| 0xf0 + i as u8),
        };
        let b = a.encode();
        #[rustfmt::skip]
        let want: [u8; 33] = [
            1, 0, 0, 0, 0, 0, 0, 0,
            0x15, 0xcd, 0x85, 0x3d, 0xfe, 0x9c, 0x97, 0x17, // 1_700_000_000_123_456_789 LE
            0x10,
            0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,
            0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,
        ];
        assert_eq!(b, want);
        assert_eq!(Attachment::decode(&b), Some(a));
        assert_eq!(Attachment::decode(&b[..32]), None);
        let mut bad = b;
        bad[16] = 17;
        assert_eq!(Attachment::decode(&bad), None);
    }

    #[test]
    fn defaults_and_topic_rules() {
        assert_eq!(default_topic("front"), "/lidar/front/points");
        assert_eq!(default_frame_id("front"), "front");
        assert_eq!(validate_topic("topic", "/lidar/front/points"), Ok(()));
        assert_eq!(validate_topic("topic", "/a_b/C9"), Ok(()));
        let rule = |t: &str| validate_topic("sensors.front.topic", t).unwrap_err().rule;
        assert_eq!(rule(""), "must not be empty");
        assert_eq!(
            rule("lidar/points"),
            "must be fully qualified: start with '/'"
        );
        assert_eq!(
            rule(&default_topic("front-left")),
            "may contain only alphanumerics, '_' and '/'"
        );
        assert_eq!(rule("/~/x"), "may contain only alphanumerics, '_' and '/'");
        assert_eq!(rule("/a//b"), "must not contain repeated '/'");
        assert_eq!(rule("/a__b"), "must not contain repeated '_'");
        assert_eq!(rule("/a/"), "must not end with '/'");
        assert_eq!(rule("/"), "must not end with '/'");
        assert_eq!(
            rule(&default_topic("2nd")),
            "no token (text between '/') may start with a digit"
        );
        let e = validate_topic("--topic", "x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--topic = \"x\": must be fully qualified: start with '/' \
             (ROS 2 \"Topic and Service name mapping to DDS\", name constraints)"
        );
    }
}
