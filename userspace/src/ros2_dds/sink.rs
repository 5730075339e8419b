//! The DDS sink: every frame of a configured sensor written as one `sensor_msgs/msg/PointCloud2`
//! sample on DDS topic `rt<topic>`, announced in the ROS 2 graph as node `/lidarxdp`.
//!
//! # Design
//! - **Never stalls ingest**: [`DdsSink::offer`] (on the publisher thread) is one `try_send`
//!   of the frame's `Arc` into a bounded queue of [`super::DdsSettings::queue`] frames; a full
//!   queue drops the frame for this sink alone and counts it ([`DdsCounters::dropped`]).
//! - **The CDR prefix is the one the zenoh sink and MCAP use**
//!   ([`crate::publish::SharedFrame::pointcloud2_prefix`]); the sample is handed to Cyclone as
//!   three pieces (prefix, the points as the decoder wrote them, suffix), which Cyclone's blob
//!   sertype gathers into its own sample: the one copy DDS needs, since it sends and may
//!   resend from its own memory.
//! - **QoS** of the point cloud writers: ROS 2's SensorDataQoS (best effort, volatile, keep
//!   last [`super::SENSOR_DATA_DEPTH`]), XCDR1, USER_DATA `typehash=RIHS01_…;` on Jazzy.
//! - **Graph**: the participant carries `enclave=/;`; a `ros_discovery_info` writer (reliable,
//!   transient local, keep last 1, as rmw's; USER_DATA its type hash on Jazzy) publishes once, before the first frame, the
//!   `ParticipantEntitiesInfo` naming node `/lidarxdp` and its writers' GUIDs, so `ros2 node
//!   list` and `ros2 topic info -v` show them; late joiners get it from the writer's history.
//! - **Incompatible QoS**: a reader that asks for more than the writers offer (for example
//!   reliable) never matches; Cyclone counts it on the writer. The sink reads its writers'
//!   statuses at least once a second, counts the new ones
//!   ([`DdsCounters::incompatible_qos`]) and logs a warning naming the topic and the policy.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use lidarxdp_core::ros2::{
    POINTCLOUD2_SUFFIX, POINTCLOUD2_TYPE_HASH_RIHS01, POINTCLOUD2_TYPE_NAME,
    dds::{self, NodeEntities},
};

use super::cyclone::{
    CycloneError, Durability, Participant, Qos, Reliability, Writer, WriterQos, policy_name,
};
use super::{DdsError, DdsSettings, NODE_NAME, SENSOR_DATA_DEPTH};
use crate::publish::{FrameSink, QueueBytes, SharedFrame, SinkReceiver, SinkThread};

/// Why one frame (counted in `errors`) or one IMU or diagnostics message (counted in
/// `aux_errors`) was not written; logged at debug level.
#[derive(Debug, thiserror::Error)]
enum PublishError {
    /// The frame's sensor has no topic.
    #[error("sensor {0} has no topic")]
    NoTopic(u16),
    /// The message cannot be encoded (too long, a NUL in its frame_id).
    #[error(transparent)]
    Encode(#[from] lidarxdp_core::ros2::CdrError),
    /// Cyclone refused the write, or the sink has stopped ([`CycloneError::Closed`]).
    #[error(transparent)]
    Write(#[from] CycloneError),
}

/// The DDS sink's counters: daemon-wide, no labels (`lidarxdp_dds_*`; stats JSON `dds`).
pub const DDS_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "dds",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Snapshot of the DDS sink's counters.
    pub struct DdsCounters in DDS_COUNTERS;
    shared
    /// Written by the publisher thread (`dropped`) and the sink's thread.
    pub(crate) struct SharedDdsCounters;
    {
        /// One per frame and topic.
        published: Counter "frames" "Frames written as PointCloud2 samples on their DDS topic.",
        /// Its thread was behind: ingest and the other sinks were not held up.
        dropped: Counter "frames" "Frames dropped because the DDS sink's queue was full.",
        /// Serialised samples, encapsulation header included.
        bytes: Counter "bytes" "PointCloud2 sample bytes written to DDS.",
        /// A frame of a sensor with no topic, a frame_id that cannot be encoded, or a write
        /// Cyclone refused.
        errors: Counter "frames" "Frames the DDS sink could not write.",
        /// Read from the writers at least once a second.
        subscribers: Gauge "readers" "DDS readers matched with the point cloud writers now.",
        /// Such a reader never gets a frame; the log names its topic and the policy.
        incompatible_qos: Counter "readers" "DDS readers that asked for a QoS the point cloud writers do not offer (e.g. reliable).",
        imu: Counter "messages" "sensor_msgs/Imu samples written on the sensors' IMU topics.",
        diagnostics: Counter "messages" "diagnostic_msgs/DiagnosticArray samples written on /diagnostics.",
        aux_errors: Counter "messages" "IMU or diagnostics samples Cyclone refused.",
    }
}

/// How often the sink reads its writers' statuses when no frame comes.
const STATUS_PERIOD: Duration = Duration::from_secs(1);

/// One topic's writer.
struct Topic {
    sensor_id: u16,
    name: String,
    frame_id: String,
    writer: Writer,
    /// `incompatible_total` last seen.
    incompatible: u32,
}

/// What the sink's thread owns. When it is dropped (the thread ends, or unwinds from a panic)
/// its participant is dropped, which deletes the participant, its writers and its domain and
/// closes the [`DdsAux`] writers (their writes then fail with [`CycloneError::Closed`]).
struct Worker {
    topics: Vec<Topic>,
    _graph: Writer,
    _participant: Participant,
    counters: Arc<SharedDdsCounters>,
}

/// The [`FrameSink`] that writes to DDS (module documentation).
pub struct DdsSink {
    thread: SinkThread,
    counters: Arc<SharedDdsCounters>,
    /// The IMU and `/diagnostics` writers until [`DdsSink::take_aux`].
    aux: Option<DdsAux>,
}

/// What the daemon keeps of a started sink: its counters.
#[derive(Clone)]
pub struct DdsHandle {
    counters: Arc<SharedDdsCounters>,
}

impl DdsHandle {
    /// The counters now.
    pub fn counters(&self) -> DdsCounters {
        self.counters.snapshot()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl DdsSink {
    /// Creates the domain (its threads start here: call it after the capabilities are
    /// dropped), the participant, one writer per topic and the graph writer, publishes the
    /// graph, and starts the sink's thread.
    ///
    /// # Errors
    /// [`DdsError`]: `--dds-config`, a configuration Cyclone refused (Cyclone logs the
    /// element on stderr), an entity it could not create, a name that cannot be encoded.
    pub fn start(settings: &DdsSettings) -> Result<(DdsSink, DdsHandle), DdsError> {
        let (worker, aux, gid) = open(settings)?;
        let counters = worker.counters.clone();
        let thread = SinkThread::spawn("dds-sink", settings.queue, move |rx| worker.run(rx))
            .map_err(DdsError::Spawn)?;
        log::info!(
            "DDS: participant {} in domain {}, node /{NODE_NAME}",
            hex(&gid),
            settings.domain_id
        );
        Ok((
            DdsSink {
                thread,
                counters: counters.clone(),
                aux: Some(aux),
            },
            DdsHandle { counters },
        ))
    }
}

/// [`DdsSink::start`] up to its thread: the domain and participant, the writers, the graph
/// published; returns what the thread will own, the IMU and diagnostics writers, and the
/// participant's GUID.
fn open(settings: &DdsSettings) -> Result<(Worker, DdsAux, [u8; 16]), DdsError> {
    let config = super::domain_config(settings, std::process::id())?;
    log::debug!("DDS: domain {} configuration {config}", settings.domain_id);
    let participant = Participant::create(
        settings.domain_id,
        &config,
        &Qos::participant(&dds::participant_user_data("/")),
    )?;
    let data_qos = Qos::writer(&WriterQos {
        reliability: Reliability::BestEffort,
        durability: Durability::Volatile,
        depth: SENSOR_DATA_DEPTH,
        user_data: dds::endpoint_user_data(settings.distro, POINTCLOUD2_TYPE_HASH_RIHS01),
    });
    let mut topics = Vec::with_capacity(settings.topics.len());
    for t in &settings.topics {
        let name = dds::topic_name(&t.topic);
        let writer = participant.writer(&name, POINTCLOUD2_TYPE_NAME, &data_qos)?;
        log::info!(
            "DDS: sensor {} as {} on DDS topic {name} (writer {})",
            t.sensor_id,
            t.topic,
            hex(&writer.guid()?)
        );
        topics.push(Topic {
            sensor_id: t.sensor_id,
            name,
            frame_id: t.frame_id.clone(),
            writer,
            incompatible: 0,
        });
    }
    // The graph: rmw's `ros_discovery_info` writer QoS (rmw_cyclonedds `rmw_node.cpp`).
    let graph = participant.writer(
        dds::ROS_DISCOVERY_INFO_TOPIC,
        dds::PARTICIPANT_ENTITIES_INFO_TYPE_NAME,
        &Qos::writer(&WriterQos {
            reliability: Reliability::Reliable,
            durability: Durability::TransientLocal,
            depth: 1,
            user_data: dds::endpoint_user_data(
                settings.distro,
                dds::PARTICIPANT_ENTITIES_INFO_TYPE_HASH_RIHS01,
            ),
        }),
    )?;
    let counters = Arc::new(SharedDdsCounters::default());
    let aux = DdsAux::create(&participant, settings, counters.clone())?;
    let gid = participant.guid()?;
    let writers = topics
        .iter()
        .map(|t| &t.writer)
        .chain(aux.imu.iter().map(|t| &t.2))
        .chain(std::iter::once(&aux.diagnostics))
        .map(Writer::guid)
        .collect::<Result<Vec<_>, _>>()?;
    let info = dds::participant_entities_info(
        &gid,
        &[NodeEntities {
            namespace: "/",
            name: NODE_NAME,
            readers: &[],
            writers: &writers,
        }],
        settings.distro,
    )?;
    graph.write_cdr(&[&info])?;
    let worker = Worker {
        topics,
        _graph: graph,
        _participant: participant,
        counters,
    };
    Ok((worker, aux, gid))
}

impl DdsSink {
    /// The IMU and `/diagnostics` writers, for the daemon's [`crate::publish::AuxThread`]
    /// (once; `None` after).
    pub fn take_aux(&mut self) -> Option<DdsAux> {
        self.aux.take()
    }
}

/// The DDS sink's IMU writers (one per sensor with an IMU topic: best effort, volatile, keep
/// last 5, as the point clouds) and its `/diagnostics` writer (reliable, volatile, keep last
/// 10: `diagnostic_aggregator` reads reliably), on the sink's participant and in its graph.
/// They share the participant's guard ([`super::cyclone`]): once the sink's thread has ended
/// (stopped, or unwound from a panic), writes fail with [`CycloneError::Closed`] and are counted
/// in `aux_errors`; they never reach a deleted entity.
pub struct DdsAux {
    imu: Vec<(u16, String, Writer)>,
    diagnostics: Writer,
    counters: Arc<SharedDdsCounters>,
}

impl DdsAux {
    fn create(
        participant: &Participant,
        settings: &DdsSettings,
        counters: Arc<SharedDdsCounters>,
    ) -> Result<Self, DdsError> {
        use lidarxdp_core::ros2::{DIAGNOSTIC_ARRAY, DIAGNOSTICS_TOPIC, IMU};
        let hash = |ty: lidarxdp_core::ros2::MessageType| {
            dds::endpoint_user_data(settings.distro, ty.rihs01)
        };
        let imu_qos = Qos::writer(&WriterQos {
            reliability: Reliability::BestEffort,
            durability: Durability::Volatile,
            depth: SENSOR_DATA_DEPTH,
            user_data: hash(IMU),
        });
        let mut imu = Vec::new();
        for t in &settings.topics {
            if let Some(topic) = &t.imu_topic {
                let name = dds::topic_name(topic);
                let w = participant.writer(&name, IMU.name, &imu_qos)?;
                log::info!(
                    "DDS: sensor {} IMU as {topic} on DDS topic {name}",
                    t.sensor_id
                );
                imu.push((t.sensor_id, t.imu_frame_id.clone(), w));
            }
        }
        let diagnostics = participant.writer(
            &dds::topic_name(DIAGNOSTICS_TOPIC),
            DIAGNOSTIC_ARRAY.name,
            &Qos::writer(&WriterQos {
                reliability: Reliability::Reliable,
                durability: Durability::Volatile,
                depth: 10,
                user_data: hash(DIAGNOSTIC_ARRAY),
            }),
        )?;
        Ok(DdsAux {
            imu,
            diagnostics,
            counters,
        })
    }

    /// Writes IMU reading `r` of `sensor_id` on its IMU topic; `None` when the sensor has no
    /// IMU topic.
    fn write_imu(
        &self,
        sensor_id: u16,
        r: &lidarxdp_core::sensor::ImuReading,
    ) -> Option<Result<(), PublishError>> {
        let (_, frame_id, writer) = self.imu.iter().find(|t| t.0 == sensor_id)?;
        Some(
            lidarxdp_core::ros2::imu_message(
                r.stamp_ns,
                frame_id,
                r.sample.angular_velocity(),
                r.sample.linear_acceleration(),
            )
            .map_err(PublishError::from)
            .and_then(|m| writer.write_cdr(&[&m]).map_err(PublishError::from)),
        )
    }

    /// Writes one `diagnostic_msgs/msg/DiagnosticArray` of `status` stamped `stamp_ns` (ns
    /// since the Unix epoch) on `/diagnostics`.
    fn write_diagnostics(
        &self,
        stamp_ns: u64,
        status: &[lidarxdp_core::ros2::DiagnosticStatus],
    ) -> Result<(), PublishError> {
        let m = lidarxdp_core::ros2::diagnostic_array(stamp_ns, status)?;
        self.diagnostics.write_cdr(&[&m])?;
        Ok(())
    }

    /// Counts a write's outcome: in `ok`, or in `aux_errors` with a debug line naming `what`.
    fn count(&self, r: Result<(), PublishError>, ok: &std::sync::atomic::AtomicU64, what: &str) {
        match r {
            Ok(()) => ok.fetch_add(1, Relaxed),
            Err(e) => {
                log::debug!("DDS: {what} not written: {e}");
                self.counters.aux_errors.fetch_add(1, Relaxed)
            }
        };
    }
}

impl crate::publish::AuxSink for DdsAux {
    fn name(&self) -> &str {
        "dds"
    }

    fn imu(&mut self, sensor_id: u16, r: &lidarxdp_core::sensor::ImuReading) {
        if let Some(res) = self.write_imu(sensor_id, r) {
            self.count(res, &self.counters.imu, "IMU");
        }
    }

    fn diagnostics(&mut self, stamp_ns: u64, status: &[lidarxdp_core::ros2::DiagnosticStatus]) {
        let res = self.write_diagnostics(stamp_ns, status);
        self.count(res, &self.counters.diagnostics, "/diagnostics");
    }
}

impl FrameSink for DdsSink {
    fn name(&self) -> &str {
        "dds"
    }

    fn offer(&mut self, frame: &Arc<SharedFrame>, _now: Instant) {
        self.thread
            .offer_counted(frame, &self.counters.dropped, &self.counters.errors);
    }

    fn queue_bytes(&self) -> Option<QueueBytes> {
        Some(self.thread.queue_bytes())
    }
}

impl Worker {
    fn run(mut self, rx: SinkReceiver) {
        let mut last_status = Instant::now();
        self.poll_status();
        loop {
            match rx.recv_timeout(STATUS_PERIOD) {
                Ok(frame) => {
                    if let Err(e) = self.publish(&frame) {
                        self.counters.errors.fetch_add(1, Relaxed);
                        log::debug!("DDS: frame {} not written: {e}", frame.header().sequence);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if last_status.elapsed() >= STATUS_PERIOD {
                last_status = Instant::now();
                self.poll_status();
            }
        }
        self.poll_status();
    }

    /// Reads every writer's statuses: the matched readers into the `subscribers` gauge, new
    /// incompatible readers into `incompatible_qos` and a warning.
    fn poll_status(&mut self) {
        let mut matched = 0u64;
        for t in &mut self.topics {
            let Ok(s) = t.writer.status() else { continue };
            matched += u64::from(s.matched);
            if s.incompatible_total > t.incompatible {
                let new = s.incompatible_total - t.incompatible;
                t.incompatible = s.incompatible_total;
                self.counters
                    .incompatible_qos
                    .fetch_add(u64::from(new), Relaxed);
                log::warn!(
                    "DDS: {new} reader(s) of {} asked for an incompatible {} QoS and get no \
                     frames; the point clouds are offered best effort, volatile, keep last \
                     {SENSOR_DATA_DEPTH} (ROS 2 SensorDataQoS): subscribe with \
                     rclcpp::SensorDataQoS() / qos_profile_sensor_data",
                    t.name,
                    policy_name(s.last_policy_id)
                );
            }
        }
        self.counters.subscribers.store(matched, Relaxed);
    }

    fn publish(&mut self, frame: &SharedFrame) -> Result<(), PublishError> {
        let h = frame.header();
        let Some(topic) = self.topics.iter().find(|t| t.sensor_id == h.sensor_id) else {
            return Err(PublishError::NoTopic(h.sensor_id));
        };
        let prefix = frame.pointcloud2_prefix(&topic.frame_id)?;
        let points: &[u8] = frame.points().as_bytes();
        topic
            .writer
            .write_cdr(&[prefix.as_bytes(), points, &POINTCLOUD2_SUFFIX])?;
        self.counters.published.fetch_add(1, Relaxed);
        self.counters
            .bytes
            .fetch_add(prefix.message_len() as u64, Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lidarxdp_core::ros2::{
        DIAGNOSTIC_ARRAY, DIAGNOSTICS_TOPIC, DiagnosticLevel, DiagnosticStatus, Distro, IMU,
    };
    use lidarxdp_core::sensor::{ImuReading, ouster::imu::ImuSample};

    use super::super::cyclone::testing;
    use super::*;
    use crate::publish::{AuxMessage, AuxSink, AuxThread};
    use crate::ros2_dds::{Discovery, DiscoveryRange};
    use crate::ros2_zenoh::TopicPlan;

    /// One sensor (id 3) with an IMU topic, on a test domain of its own: discovery off, the
    /// loopback interface alone ([`testing`]).
    fn settings() -> DdsSettings {
        DdsSettings {
            config_file: None,
            cyclonedds_uri: Some(testing::LOOPBACK_ONLY.into()),
            domain_id: testing::domain_id(),
            distro: Distro::Jazzy,
            discovery: Discovery {
                range: DiscoveryRange::Off,
                static_peers: vec![],
            },
            queue: 4,
            topics: vec![TopicPlan {
                sensor_id: 3,
                topic: "/lidar/front/points".into(),
                frame_id: "front".into(),
                imu_topic: Some("/lidar/front/imu".into()),
                imu_frame_id: "front_imu".into(),
            }],
        }
    }

    fn status() -> Vec<DiagnosticStatus> {
        vec![DiagnosticStatus {
            level: DiagnosticLevel::Warn,
            name: "lidarxdp: front".into(),
            message: "frames late".into(),
            hardware_id: "OS-1-64 192.0.2.10".into(),
            values: vec![("frames".into(), "10".into())],
        }]
    }

    fn reading() -> ImuReading {
        ImuReading {
            sample: ImuSample {
                sys_ts_ns: 1,
                accel_ts_ns: 2,
                gyro_ts_ns: 3,
                accel_g: [0.0, 0.0, 1.0],
                gyro_dps: [90.0, 0.0, 0.0],
            },
            stamp_ns: 1_700_000_000_000_000_003,
            host_ns: 1_700_000_000_000_000_004,
            clock: lidarxdp_core::frame::FrameClock::Sensor,
        }
    }

    /// (diagnostics, imu, aux_errors).
    /// Both aux writers (diagnostics, and the IMU of sensor 3) answer `Closed`.
    fn assert_writes_closed(aux: &DdsAux) {
        let r = aux.write_diagnostics(1, &status());
        assert!(
            matches!(r, Err(PublishError::Write(CycloneError::Closed))),
            "{r:?}"
        );
        let r = aux.write_imu(3, &reading());
        assert!(
            matches!(r, Some(Err(PublishError::Write(CycloneError::Closed)))),
            "{r:?}"
        );
    }

    fn aux_counts(h: &DdsHandle) -> (u64, u64, u64) {
        let c = h.counters();
        (c.diagnostics, c.imu, c.aux_errors)
    }

    #[test]
    fn aux_writes_after_the_sink_stopped_fail_closed_and_are_counted() {
        let (mut sink, handle) = DdsSink::start(&settings()).expect("sink on a test domain");
        let mut aux = sink.take_aux().expect("the aux writers, once");
        assert!(sink.take_aux().is_none());
        aux.diagnostics(1_700_000_000_123_456_789, &status());
        aux.imu(3, &reading());
        aux.imu(9, &reading()); // no IMU topic: not written, not counted
        assert_eq!(aux_counts(&handle), (1, 1, 0));

        drop(sink);
        assert_writes_closed(&aux);
        assert!(aux.write_imu(9, &reading()).is_none());
        aux.diagnostics(2, &status());
        aux.imu(3, &reading());
        assert_eq!(aux_counts(&handle), (1, 1, 2));
    }

    #[test]
    fn aux_writers_on_the_aux_thread_after_the_sink_stopped_count_errors() {
        let (mut sink, handle) = DdsSink::start(&settings()).expect("sink on a test domain");
        let aux = sink.take_aux().expect("the aux writers");
        let (thread, tx) = AuxThread::spawn(vec![Box::new(aux)]).expect("aux thread");
        drop(sink);
        tx.send(AuxMessage::Diagnostics {
            stamp_ns: 5,
            status: status().into(),
        });
        tx.send(AuxMessage::Imu {
            sensor_id: 3,
            reading: reading(),
        });
        assert_eq!(tx.dropped(), 0);
        drop(tx);
        thread.join();
        assert_eq!(aux_counts(&handle), (0, 0, 2));
    }

    #[test]
    fn a_panic_on_the_sink_thread_closes_the_aux_writers() {
        let s = settings();
        let (worker, aux, gid) = open(&s).expect("sink on a test domain");
        assert_ne!(gid, [0; 16]);
        let diagnostics = worker
            ._participant
            .reader(&dds::topic_name(DIAGNOSTICS_TOPIC), DIAGNOSTIC_ARRAY.name)
            .expect("reader");
        let imu = worker
            ._participant
            .reader("rt/lidar/front/imu", IMU.name)
            .expect("reader");
        // Read back: the exact CDR of the messages.
        assert!(matches!(aux.write_diagnostics(7, &status()), Ok(())));
        assert_eq!(
            diagnostics.take(),
            Ok(Some(
                lidarxdp_core::ros2::diagnostic_array(7, &status()).unwrap()
            ))
        );
        assert!(matches!(aux.write_imu(3, &reading()), Some(Ok(()))));
        let r = reading();
        assert_eq!(
            imu.take(),
            Ok(Some(
                lidarxdp_core::ros2::imu_message(
                    r.stamp_ns,
                    "front_imu",
                    r.sample.angular_velocity(),
                    r.sample.linear_acceleration()
                )
                .unwrap()
            ))
        );

        let t = SinkThread::spawn("dds-sink", 1, move |_rx| {
            let _owned = worker;
            panic!("the DDS sink thread panics (expected by the test)");
        })
        .expect("thread");
        drop(t); // joins, logging the panic

        assert_writes_closed(&aux);
        assert_eq!(diagnostics.take(), Err(CycloneError::Closed));
    }
}
