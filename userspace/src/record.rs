//! Recording received frames as ROS 2 `sensor_msgs/msg/PointCloud2` messages (CDR) in an MCAP
//! file, which Foxglove Studio opens as-is.
//!
//! Each sensor gets a channel `/lidarxdp/<sensor name>` (schema encoding `ros2msg`, message
//! encoding `cdr`). A message is an unorganised cloud (`height` 1, `width` = point count) whose
//! `fields`, `point_step` and `data` are the frame's wire layout and payload bytes unchanged
//! (so a field-subset subscription records only those fields); `header.stamp` is the frame's
//! `start_ns`, `header.frame_id` the sensor name. MCAP `log_time` is the local receive time,
//! `publish_time` the frame's `host_ns`. The encoding is `lidarxdp_core::ros2`'s (ROS 2
//! `sensor_msgs/msg/PointCloud2.msg`, OMG XCDR1 little-endian), shared with the zenoh sink.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use lidarxdp_client::ReceivedFrame;
use lidarxdp_core::ros2::{CdrError, FieldRef, PointCloud2Prefix};

pub use lidarxdp_core::ros2::POINTCLOUD2_SCHEMA;

/// Encodes `frame` as a CDR `sensor_msgs/msg/PointCloud2` with `frame_id`: the
/// [`PointCloud2Prefix`] of the frame's header, fields and point count, then its payload bytes
/// and the suffix (`lidarxdp_core::ros2` has the layout).
///
/// # Errors
/// [`lidarxdp_core::ros2::CdrError`]: a payload over 4 GiB, a NUL byte in `frame_id`.
pub fn pointcloud2_cdr(frame: &ReceivedFrame, frame_id: &str) -> Result<Vec<u8>, CdrError> {
    let prefix = PointCloud2Prefix::new(
        frame.header().start_ns,
        frame_id,
        frame.fields().iter().map(FieldRef::from),
        frame.point_step() as u32,
        frame.point_count() as u32,
    )?;
    let mut out = Vec::new();
    prefix.write_message(frame.payload_bytes(), &mut out)?;
    Ok(out)
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
        let data = pointcloud2_cdr(frame, sensor_name)?;
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
