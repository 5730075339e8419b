//! Recording received frames as ROS 2 `sensor_msgs/msg/PointCloud2` messages (CDR) in an MCAP
//! file, which Foxglove Studio opens as-is.
//!
//! Each sensor gets a channel `/lidarxdp/<sensor name>` (schema encoding `ros2msg`, message
//! encoding `cdr`). A message is an unorganised cloud (`height` 1, `width` = point count) whose
//! `fields`, `point_step` and `data` are the frame's wire layout and payload bytes unchanged
//! (so a field-subset subscription records only those fields); `header.stamp` is the frame's
//! `start_ns`, `header.frame_id` the sensor name. MCAP `log_time` is the local receive time,
//! `publish_time` the frame's `host_ns`. Sources: ROS 2 `sensor_msgs/msg/PointCloud2.msg` and
//! `PointField.msg`; OMG XCDR1 little-endian encapsulation (`00 01 00 00`), each primitive
//! aligned to its size relative to the end of the encapsulation header.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use lidarxdp_client::ReceivedFrame;

/// `ros2msg` definition of `sensor_msgs/msg/PointCloud2` with its dependencies.
pub const POINTCLOUD2_SCHEMA: &str = "std_msgs/Header header\nuint32 height\nuint32 width\n\
PointField[] fields\nbool is_bigendian\nuint32 point_step\nuint32 row_step\nuint8[] data\nbool is_dense\n\
================================================================================\nMSG: std_msgs/Header\n\
builtin_interfaces/Time stamp\nstring frame_id\n\
================================================================================\nMSG: builtin_interfaces/Time\n\
int32 sec\nuint32 nanosec\n\
================================================================================\nMSG: sensor_msgs/PointField\n\
uint8 INT8=1\nuint8 UINT8=2\nuint8 INT16=3\nuint8 UINT16=4\nuint8 INT32=5\nuint8 UINT32=6\n\
uint8 FLOAT32=7\nuint8 FLOAT64=8\nstring name\nuint32 offset\nuint8 datatype\nuint32 count\n";

/// Little-endian CDR writer (alignment relative to the start of the body).
struct Cdr(Vec<u8>);

impl Cdr {
    fn align(&mut self, n: usize) {
        let body = self.0.len() - 4;
        self.0.resize(self.0.len() + (n - body % n) % n, 0);
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn string(&mut self, s: &str) {
        self.u32(s.len() as u32 + 1);
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
    }
}

/// Encodes `frame` as a CDR `sensor_msgs/msg/PointCloud2` with `frame_id`.
pub fn pointcloud2_cdr(frame: &ReceivedFrame, frame_id: &str) -> Vec<u8> {
    let data = frame.payload_bytes();
    let mut c = Cdr(Vec::with_capacity(data.len() + 512));
    c.0.extend_from_slice(&[0, 1, 0, 0]); // CDR_LE encapsulation
    let t = frame.header().start_ns;
    c.i32((t / 1_000_000_000).min(i32::MAX as u64) as i32);
    c.u32((t % 1_000_000_000) as u32);
    c.string(frame_id);
    c.u32(1); // height
    c.u32(frame.point_count() as u32); // width
    c.u32(frame.fields().len() as u32);
    for f in frame.fields() {
        c.string(&f.name);
        c.u32(f.offset);
        c.u8(f.datatype);
        c.u32(f.count);
    }
    c.u8(0); // is_bigendian
    c.u32(frame.point_step() as u32);
    c.u32(data.len() as u32); // row_step
    c.u32(data.len() as u32);
    c.0.extend_from_slice(data);
    c.u8(1); // is_dense
    c.0
}

/// Errors of the recorder: file I/O or MCAP encoding.
pub type RecordError = Box<dyn std::error::Error + Send + Sync>;

/// Writes received frames into an MCAP file (uncompressed chunks).
pub struct McapRecorder {
    writer: mcap::Writer<BufWriter<File>>,
    schema: u16,
    channels: HashMap<u16, u16>,
    sequence: u32,
}

impl std::fmt::Debug for McapRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McapRecorder")
            .field("messages", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl McapRecorder {
    /// Creates (truncates) `path`.
    ///
    /// # Errors
    /// File creation or MCAP header errors.
    pub fn create(path: &Path) -> Result<Self, RecordError> {
        let file = BufWriter::new(File::create(path)?);
        let mut writer = mcap::Writer::new(file)?;
        let schema = writer.add_schema(
            "sensor_msgs/msg/PointCloud2",
            "ros2msg",
            POINTCLOUD2_SCHEMA.as_bytes(),
        )?;
        Ok(McapRecorder {
            writer,
            schema,
            channels: HashMap::new(),
            sequence: 0,
        })
    }

    /// Appends `frame` on the channel of its sensor, named `sensor_name`; `log_time_ns` is
    /// the local receive time (ns since the Unix epoch).
    ///
    /// # Errors
    /// MCAP encoding or I/O errors.
    pub fn write(
        &mut self,
        frame: &ReceivedFrame,
        sensor_name: &str,
        log_time_ns: u64,
    ) -> Result<(), RecordError> {
        let id = frame.header().sensor_id;
        let channel = match self.channels.get(&id) {
            Some(&c) => c,
            None => {
                let c = self.writer.add_channel(
                    self.schema,
                    &format!("/lidarxdp/{sensor_name}"),
                    "cdr",
                    &BTreeMap::new(),
                )?;
                self.channels.insert(id, c);
                c
            }
        };
        let data = pointcloud2_cdr(frame, sensor_name);
        self.writer.write_to_known_channel(
            &mcap::records::MessageHeader {
                channel_id: channel,
                sequence: self.sequence,
                log_time: log_time_ns,
                publish_time: frame.header().host_ns,
            },
            &data,
        )?;
        self.sequence += 1;
        Ok(())
    }

    /// Writes the summary and closes the file.
    ///
    /// # Errors
    /// MCAP or I/O errors.
    pub fn finish(mut self) -> Result<(), RecordError> {
        self.writer.finish()?;
        Ok(())
    }
}
