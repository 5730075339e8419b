//! `--mcap` recording: frames received by a subscriber are written as ROS 2
//! `sensor_msgs/msg/PointCloud2` (CDR) messages that read back with the `mcap` crate, with the
//! exact payload bytes and layout.

use std::sync::Arc;
use std::time::Duration;

use lidarxdp::publish::{BufferPool, Publisher, PublisherConfig};
use lidarxdp_client::Subscriber;
use lidarxdp_client::mcap::{McapOptions, McapRecorder, POINTCLOUD2_SCHEMA};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::protocol::{SensorEntry, Subscribe};

/// Minimal little-endian CDR reader for the checks below.
struct Rd<'a>(&'a [u8], usize);
impl Rd<'_> {
    fn align(&mut self, n: usize) {
        let body = self.1 - 4;
        self.1 += (n - body % n) % n;
    }
    fn u8(&mut self) -> u8 {
        self.1 += 1;
        self.0[self.1 - 1]
    }
    fn u32(&mut self) -> u32 {
        self.align(4);
        self.1 += 4;
        u32::from_le_bytes(self.0[self.1 - 4..self.1].try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u32() as usize;
        self.1 += n;
        assert_eq!(self.0[self.1 - 1], 0, "NUL terminator");
        String::from_utf8(self.0[self.1 - n..self.1 - 1].to_vec()).unwrap()
    }
}

#[test]
fn frames_record_as_pointcloud2_cdr() {
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        sensors: vec![SensorEntry {
            id: 4,
            name: "front".into(),
            model: "VLP16".into(),
        }],
        ..PublisherConfig::default()
    };
    let (publisher, sender) = Publisher::spawn(
        PublisherConfig {
            frame_queue: 4,
            ..cfg
        },
        Arc::new(BufferPool::new(8)),
    )
    .unwrap();
    let want = Subscribe {
        sensors: vec![],
        fields: vec!["x".into(), "y".into(), "z".into(), "intensity".into()],
        ..Subscribe::default()
    };
    let mut sub = Subscriber::connect_with(publisher.local_addr(), &want).unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let points: Vec<PointXYZIRCAEDT> = (0..5)
        .map(|i| PointXYZIRCAEDT {
            x: i as f32,
            y: 2.0,
            z: -1.0,
            intensity: 40 + i as u8,
            ..Default::default()
        })
        .collect();
    assert!(sender.send(Frame {
        header: FrameHeader {
            sensor_id: 4,
            sequence: 9,
            start_ns: 1_700_000_123_250_000_000,
            host_ns: 1_700_000_123_350_000_000,
            ..Default::default()
        },
        points: points.into(),
    }));
    let f = sub.next_frame().unwrap().unwrap();
    let path = std::env::temp_dir().join(format!("lidarxdp-test-{}.mcap", std::process::id()));
    let mut rec = McapRecorder::create(&path, McapOptions::default()).unwrap();
    rec.write(&f, "front", 1_700_000_123_400_000_000).unwrap();
    let files = rec.finish().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(
        (files[0].path.as_path(), files[0].messages),
        (path.as_path(), 1)
    );
    publisher.shutdown().unwrap();

    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let msgs: Vec<_> = mcap::MessageStream::new(&bytes)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    assert_eq!(m.channel.topic, "/lidar/front/points");
    assert_eq!(m.sequence, 9, "the frame's sequence number");
    // rosbag2's Jazzy storage format: the QoS the zenoh sink offers, as YAML with string
    // policies, and the RIHS01 type hash.
    assert_eq!(
        m.channel.metadata["offered_qos_profiles"],
        "- history: keep_last\n  depth: 5\n  reliability: best_effort\n  durability: volatile\n  \
         deadline:\n    sec: 9223372036\n    nsec: 854775807\n  lifespan:\n    sec: 9223372036\n    \
         nsec: 854775807\n  liveliness: automatic\n  liveliness_lease_duration:\n    \
         sec: 9223372036\n    nsec: 854775807\n  avoid_ros_namespace_conventions: false\n"
    );
    assert_eq!(
        m.channel.metadata["topic_type_hash"],
        "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5"
    );
    match mcap::read::LinearReader::new(&bytes).unwrap().next() {
        Some(Ok(mcap::records::Record::Header(h))) => assert_eq!(h.profile, "ros2"),
        r => panic!("first record {r:?}"),
    }
    let summary = mcap::Summary::read(&bytes).unwrap().expect("summary");
    assert_eq!(summary.chunk_indexes.len(), 1);
    assert_eq!(summary.stats.unwrap().message_count, 1);
    assert_eq!(m.channel.message_encoding, "cdr");
    let schema = m.channel.schema.as_ref().unwrap();
    assert_eq!(schema.name, "sensor_msgs/msg/PointCloud2");
    assert_eq!(schema.encoding, "ros2msg");
    assert_eq!(&schema.data[..], POINTCLOUD2_SCHEMA.as_bytes());
    assert_eq!(m.log_time, 1_700_000_123_400_000_000);
    assert_eq!(m.publish_time, 1_700_000_123_350_000_000);

    let d = &m.data[..];
    assert_eq!(&d[..4], &[0, 1, 0, 0], "CDR little-endian encapsulation");
    let mut r = Rd(d, 4);
    assert_eq!(r.u32(), 1_700_000_123); // stamp.sec
    assert_eq!(r.u32(), 250_000_000); // stamp.nanosec
    assert_eq!(r.string(), "front");
    assert_eq!((r.u32(), r.u32()), (1, 5)); // height, width
    assert_eq!(r.u32(), 4); // fields
    let mut fields = Vec::new();
    for _ in 0..4 {
        let name = r.string();
        let offset = r.u32();
        let datatype = r.u8();
        let count = r.u32();
        fields.push((name, offset, datatype, count));
    }
    assert_eq!(
        fields,
        vec![
            ("x".to_string(), 0, 7, 1),
            ("y".to_string(), 4, 7, 1),
            ("z".to_string(), 8, 7, 1),
            ("intensity".to_string(), 12, 2, 1)
        ]
    );
    assert_eq!(r.u8(), 0); // is_bigendian
    assert_eq!((r.u32(), r.u32()), (13, 65)); // point_step, row_step
    assert_eq!(r.u32(), 65); // data length
    let data = &d[r.1..r.1 + 65];
    assert_eq!(data, f.payload_bytes());
    // Point 4: x = 4.0, y = 2.0, z = -1.0, intensity 44.
    assert_eq!(
        &data[52..65],
        &[0, 0, 0x80, 0x40, 0, 0, 0, 0x40, 0, 0, 0x80, 0xbf, 44]
    );
    assert_eq!(d[r.1 + 65], 1); // is_dense
    assert_eq!(d.len(), r.1 + 66);
}
