//! The field list and `point_step` of every point layout, held against the struct or field
//! list of the driver that defines it, transcribed here from that driver's source (file and
//! commit beside each). `(name, offset, PointField datatype, count)`; datatypes: 2 UINT8,
//! 4 UINT16, 6 UINT32, 7 FLOAT32, 8 FLOAT64.
//!
//! Offsets come about in two ways (docs/sensors.md, "Point layouts"): a driver that adds its
//! fields one after another (`sensor_msgs::PointCloud2Modifier` / an `addPointField` helper)
//! packs them with no padding; a driver that converts a PCL struct (`pcl::toROSMsg`) keeps the
//! struct's padding (`PCL_ADD_POINT4D` is x, y, z and a pad float; `EIGEN_ALIGN16` rounds the
//! size up to 16).
use lidarxdp_core::layout::{POINT_TYPES, PointType};

type Field = (&'static str, u32, u8, u32);

/// Autoware `PointXYZIRCAEDT`: autowarefoundation/autoware_core @
/// 2d693b8229147fc81ce4807e630b5bcb7ac625a4,
/// `common/autoware_point_types/include/autoware/point_types/types.hpp` (struct
/// `PointXYZIRCAEDT`, its PCL registration; `memory.hpp` checks exactly these 10 fields).
const AUTOWARE: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 12, 2, 1),
        ("return_type", 13, 2, 1),
        ("channel", 14, 4, 1),
        ("azimuth", 16, 7, 1),
        ("elevation", 20, 7, 1),
        ("distance", 24, 7, 1),
        ("time_stamp", 28, 6, 1),
    ],
    32,
);

/// Autoware `PointXYZIRC`: the same file and commit as [`AUTOWARE`] (struct `PointXYZIRC`, a
/// plain 16-byte struct).
const AUTOWARE_XYZIRC: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 12, 2, 1),
        ("return_type", 13, 2, 1),
        ("channel", 14, 4, 1),
    ],
    16,
);

/// Packed x y z intensity, all float32: RoboSense-LiDAR/rslidar_sdk @
/// 78d2abb7f0c21f789a606d584475c631d5118dc3, `src/source/source_pointcloud_ros.hpp` (ROS 2
/// `toRosMsg`, its default `POINT_TYPE XYZI` build, `CMakeLists.txt`); the same bytes as
/// Autoware's `PointXYZI` (autoware_core, `types.hpp`) and ouster-ros's `o_xyzi`.
const XYZI: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 12, 7, 1),
    ],
    16,
);

/// ros-drivers/velodyne, branch `ros2` @ 04a7ca722eaed13fe902366e0831717e91f9f77a,
/// `velodyne_pointcloud/src/lib/pointcloudXYZIRT.cpp` (the six fields) and
/// `velodyne_pointcloud/include/velodyne_pointcloud/datacontainerbase.hpp` (offsets
/// accumulated without padding; `point_step` the last offset).
const VELODYNE: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 12, 7, 1),
        ("ring", 16, 4, 1),
        ("time", 18, 7, 1),
    ],
    22,
);

/// ouster-lidar/ouster-ros, branch `ros2` @ f5c4ef872684c748a018e9343958bc53f95f7845,
/// `ouster-ros/include/ouster_ros/os_point.h` (`ouster_ros::Point`: `PCL_ADD_POINT4D`, float
/// intensity, uint32 t, uint16 reflectivity, uint16 ring, uint16 ambient, uint32 range,
/// `EIGEN_ALIGN16`), converted by `pcl::toPCLPointCloud2` (`src/point_cloud_processor.h`).
const OUSTER: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 16, 7, 1),
        ("t", 20, 6, 1),
        ("reflectivity", 24, 4, 1),
        ("ring", 26, 4, 1),
        ("ambient", 28, 4, 1),
        ("range", 32, 6, 1),
    ],
    48,
);

/// The same repository and commit as [`OUSTER`],
/// `ouster-ros/include/ouster_ros/common_point_types.h` (`ouster_ros::PointXYZIR`:
/// `PCL_ADD_POINT4D`, float intensity, uint16 ring, `EIGEN_ALIGN16`).
const OUSTER_XYZIR: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 16, 7, 1),
        ("ring", 20, 4, 1),
    ],
    32,
);

/// HesaiTechnology/HesaiLidar_ROS_2.0 @ e7e112f0809f0eed5e3c81c55a1a0376474db234,
/// `src/manager/source_driver_ros2.hpp` (`ToRosMsg`: x, y, z, intensity float32, ring
/// uint16, timestamp float64, each added after the previous with no padding).
const HESAI: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 12, 7, 1),
        ("ring", 16, 4, 1),
        ("timestamp", 18, 8, 1),
    ],
    26,
);

/// RoboSense-LiDAR/rslidar_sdk @ 78d2abb7f0c21f789a606d584475c631d5118dc3,
/// `src/source/source_pointcloud_ros.hpp` (ROS 2 `toRosMsg` with `POINT_TYPE_XYZIRT`: x, y,
/// z, intensity float32, ring uint16, timestamp float64, no padding).
const ROBOSENSE: (&[Field], u32) = (
    &[
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("intensity", 12, 7, 1),
        ("ring", 16, 4, 1),
        ("timestamp", 18, 8, 1),
    ],
    26,
);

fn reference(t: PointType) -> (&'static [Field], u32) {
    match t {
        PointType::Autoware => AUTOWARE,
        PointType::AutowareXyzirc => AUTOWARE_XYZIRC,
        PointType::Xyzi => XYZI,
        PointType::Velodyne => VELODYNE,
        PointType::Ouster => OUSTER,
        PointType::OusterXyzir => OUSTER_XYZIR,
        PointType::Hesai => HESAI,
        PointType::Robosense => ROBOSENSE,
    }
}

/// Every layout's field list and `point_step` are exactly its driver's.
#[test]
fn field_lists_are_the_drivers() {
    for t in POINT_TYPES {
        let (fields, step) = reference(t);
        let ours: Vec<Field> = t
            .fields()
            .iter()
            .map(|f| (f.name, f.offset, f.datatype, f.count))
            .collect();
        assert_eq!(ours, fields, "{t}: fields");
        assert_eq!(t.point_step() as u32, step, "{t}: point_step");
        // A field list identifies its layout's bytes (hesai and robosense share theirs: their
        // time fields differ in meaning only).
        let back = PointType::from_fields(step, fields.iter().copied()).unwrap();
        assert_eq!(
            (back.fields(), back.point_step()),
            (t.fields(), t.point_step())
        );
    }
}
