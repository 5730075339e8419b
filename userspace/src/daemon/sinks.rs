//! The daemon's sinks as one set: what frames and packets flow to besides the TCP publisher
//! (zenoh, DDS, Foxglove, the live view, the packet recording) and the metrics endpoint. The
//! daemon binds them ([`Sinks::bind`], privileged), starts them ([`Bound::start`], after the
//! capabilities are dropped), reads their counters ([`Sinks::counters`]: each sink declares
//! its own) and stops them ([`Sinks::stop_recording`], then the publisher's shutdown drops
//! the frame sinks) as one; adding a sink is one field here and one arm in each of these.

use std::{
    net::{SocketAddr, TcpListener},
    sync::{Arc, mpsc::Receiver},
};

use anyhow::{Context, Result};
#[cfg(feature = "foxglove")]
use lidarxdp::foxglove::{FoxgloveHandle, FoxgloveServer, FoxgloveSettings, FoxgloveTopic};
#[cfg(feature = "dds")]
use lidarxdp::ros2_dds::{DdsHandle, DdsSettings, DdsSink};
#[cfg(any(feature = "zenoh", feature = "dds"))]
use lidarxdp::ros2_zenoh::TopicPlan;
#[cfg(feature = "zenoh")]
use lidarxdp::ros2_zenoh::{ShmPool, ZenohHandle, ZenohSettings, ZenohSink};
#[cfg(feature = "view")]
use lidarxdp::view::{ViewSensor, ViewSink, ViewState};
use lidarxdp::{
    capture::{RecordTap, Recorder, RecordingCounters},
    publish::{AuxSink, BufferPool, FrameSink, QueueBytes, SinkQueueCounters},
};
use lidarxdp_core::counters::{CounterDesc, CounterSet};

use super::config::Plan;
#[cfg(feature = "dds")]
use super::config::plan::DdsPlan;
#[cfg(feature = "zenoh")]
use super::config::plan::ZenohPlan;

/// The sinks' resources taken while the daemon still holds its capabilities: the listening
/// sockets (a privileged port works, a busy one fails the start-up) and zenoh's locked
/// shared-memory pool. No thread is running yet.
pub(super) struct Bound {
    metrics: Option<(SocketAddr, TcpListener)>,
    #[cfg(feature = "view")]
    view: Option<TcpListener>,
    #[cfg(feature = "foxglove")]
    foxglove: Option<FoxgloveServer>,
    #[cfg(feature = "zenoh")]
    shm: Option<ShmPool>,
}

/// The packet recording: running until the capture threads end, then its final counters.
enum Recording {
    Running(Recorder),
    Finished(RecordingCounters),
}

/// The running sinks, read and stopped together.
pub(super) struct Sinks {
    #[cfg(feature = "zenoh")]
    zenoh: Option<ZenohHandle>,
    #[cfg(feature = "dds")]
    dds: Option<DdsHandle>,
    #[cfg(feature = "foxglove")]
    foxglove: Option<FoxgloveHandle>,
    #[cfg(feature = "view")]
    view: Option<std::sync::Arc<ViewState>>,
    recording: Option<Recording>,
    metrics: Option<Receiver<super::http::Render>>,
    /// The IMU and `/diagnostics` publishers of zenoh, DDS and Foxglove, until
    /// [`Sinks::take_aux`].
    aux: Vec<Box<dyn AuxSink>>,
    /// The queued bytes of each frame sink with a queue, by its name.
    queues: Vec<(String, QueueBytes)>,
}

impl Sinks {
    /// The sinks' IMU and `/diagnostics` publishers, for the [`lidarxdp::publish::AuxThread`].
    pub(super) fn take_aux(&mut self) -> Vec<Box<dyn AuxSink>> {
        std::mem::take(&mut self.aux)
    }

    /// Binds every configured listener and creates zenoh's shared-memory pool (mlock(2), so
    /// while `CAP_IPC_LOCK` is held; creating it starts no thread).
    ///
    /// Errors: an address that cannot be bound (named with its flag), the pool.
    pub(super) fn bind(plan: &Plan) -> Result<Bound> {
        let s = &plan.sinks;
        let metrics = match s.metrics {
            Some(addr) => Some((
                addr,
                TcpListener::bind(addr).with_context(|| format!("--metrics: bind {addr}"))?,
            )),
            None => None,
        };
        #[cfg(feature = "view")]
        let view = match s.view {
            Some(addr) => {
                Some(TcpListener::bind(addr).with_context(|| format!("--view: bind {addr}"))?)
            }
            None => None,
        };
        #[cfg(feature = "foxglove")]
        let foxglove = match s.foxglove {
            Some(addr) => Some(FoxgloveServer::bind(&foxglove_settings(plan, addr))?),
            None => None,
        };
        #[cfg(feature = "zenoh")]
        let shm = match &s.zenoh {
            Some(z) if z.shm_mb > 0 => Some(ShmPool::create((z.shm_mb as usize) << 20)?),
            _ => None,
        };
        Ok(Bound {
            metrics,
            #[cfg(feature = "view")]
            view,
            #[cfg(feature = "foxglove")]
            foxglove,
            #[cfg(feature = "zenoh")]
            shm,
        })
    }

    /// Where the decoders take their frames' point buffers: chunks of zenoh's shared-memory
    /// pool (the sink then puts them with no copy) when it has one, else `heap`.
    pub(super) fn buffer_source(
        &self,
        heap: &Arc<BufferPool>,
    ) -> Arc<dyn lidarxdp_core::scan::BufferSource> {
        #[cfg(feature = "zenoh")]
        if let Some(frames) = self
            .zenoh
            .as_ref()
            .and_then(|z| z.buffer_source(heap.clone()))
        {
            return Arc::new(frames);
        }
        heap.clone()
    }

    /// The packet recording's tap for the capture threads, when `--record-pcap` is on.
    pub(super) fn record_tap(&self) -> Option<RecordTap> {
        match &self.recording {
            Some(Recording::Running(r)) => Some(r.tap()),
            _ => None,
        }
    }

    /// The metrics endpoint's requests, when `--metrics` is on: each carries the channel its
    /// reply (the Prometheus text) goes to.
    pub(super) fn metrics_requests(&self) -> Option<&Receiver<super::http::Render>> {
        self.metrics.as_ref()
    }

    /// Every running sink's counters now, each sink's own descriptors in its declaration
    /// order (zenoh, DDS, Foxglove, view, recording).
    pub(super) fn counters(&self) -> Vec<(&'static CounterDesc, u64)> {
        let mut out = Vec::new();
        let mut add = |set: &dyn CounterSetDyn| set.visit_dyn(&mut |d, v| out.push((d, v)));
        #[cfg(feature = "zenoh")]
        if let Some(z) = &self.zenoh {
            add(&z.counters());
        }
        #[cfg(feature = "dds")]
        if let Some(d) = &self.dds {
            add(&d.counters());
        }
        #[cfg(feature = "foxglove")]
        if let Some(f) = &self.foxglove {
            add(&f.counters());
        }
        #[cfg(feature = "view")]
        if let Some(v) = &self.view {
            add(&v.counters());
        }
        match &self.recording {
            Some(Recording::Running(r)) => add(&r.counters()),
            Some(Recording::Finished(c)) => add(c),
            None => {}
        }
        out
    }

    /// Every frame sink's queue now, by name (`zenoh`, `dds`, `foxglove`: the sinks with a
    /// queue, in the order they were started); the TCP publisher's is the publisher's.
    pub(super) fn queue_counters(&self) -> Vec<(String, SinkQueueCounters)> {
        self.queues
            .iter()
            .map(|(name, q)| (name.clone(), q.counters()))
            .collect()
    }

    /// Finishes the packet recording once every capture thread has ended (what they queued is
    /// written, the file closed); its final counters stay readable.
    pub(super) fn stop_recording(&mut self) {
        if let Some(Recording::Running(r)) = self.recording.take() {
            self.recording = Some(Recording::Finished(r.finish()));
        }
    }
}

/// [`CounterSet::visit`] through a trait object (the sets differ by type).
trait CounterSetDyn {
    fn visit_dyn(&self, f: &mut dyn FnMut(&'static CounterDesc, u64));
}

impl<T: CounterSet> CounterSetDyn for T {
    fn visit_dyn(&self, f: &mut dyn FnMut(&'static CounterDesc, u64)) {
        self.visit(f);
    }
}

impl Bound {
    /// The capabilities to keep: none without zenoh's shared-memory pool.
    #[cfg(not(feature = "zenoh"))]
    pub(super) fn keep_caps(&self) -> u64 {
        0
    }

    /// The capabilities the zenoh shared-memory pool needs kept (`lidarxdp::privs`): none
    /// when `RLIMIT_MEMLOCK`, raised to its hard limit, covers the pool and the segments zenoh
    /// locks later; else `CAP_IPC_LOCK`, said in the log.
    #[cfg(feature = "zenoh")]
    pub(super) fn keep_caps(&self) -> u64 {
        let Some(pool) = &self.shm else { return 0 };
        let need = pool.bytes() as u64 + lidarxdp::ros2_zenoh::LOCK_HEADROOM;
        match lidarxdp::sys::rlimit::memlock_to_hard() {
            Ok(limit) if limit >= need => 0,
            limit => {
                log::warn!(
                    "zenoh shared memory: keeping CAP_IPC_LOCK (and no other capability): zenoh \
                     locks its segments and RLIMIT_MEMLOCK ({}) is below the {need} bytes \
                     needed; raise it (systemd LimitMEMLOCK=infinity) to drop it too",
                    limit.map_or_else(|e| e.to_string(), |l| format!("{l} bytes"))
                );
                1 << lidarxdp::sys::caps::CAP_IPC_LOCK
            }
        }
    }

    /// Starts every sink's threads, as the daemon's final identity: the metrics server, the
    /// packet recording (its first file created), zenoh's runtime, Cyclone DDS's threads, the
    /// Foxglove server, the live view. Returns the set and the frame sinks the publisher
    /// thread offers each frame to.
    ///
    /// Errors: any sink that cannot start, naming it.
    pub(super) fn start(self, plan: &Plan) -> Result<(Sinks, Vec<Box<dyn FrameSink>>)> {
        let s = &plan.sinks;
        #[allow(unused_mut)] // Built without the optional sinks, nothing is pushed.
        let mut frame_sinks: Vec<Box<dyn FrameSink>> = Vec::new();
        #[allow(unused_mut)]
        let mut aux: Vec<Box<dyn AuxSink>> = Vec::new();
        let metrics = match self.metrics {
            Some((addr, listener)) => {
                let (tx, rx) = std::sync::mpsc::channel();
                super::http::spawn_server(listener, tx)?;
                log::info!("metrics at http://{addr}/metrics");
                Some(rx)
            }
            None => None,
        };
        let recording = match &s.recording {
            Some(r) => {
                let rec = Recorder::start(r.config.clone()).context("--record-pcap")?;
                log::info!("recording the sensors' packets to {}", r.pcap.display());
                Some(Recording::Running(rec))
            }
            None => None,
        };
        #[cfg(feature = "zenoh")]
        let zenoh = match &s.zenoh {
            Some(z) => {
                let (mut sink, handle) = ZenohSink::start(&zenoh_settings(plan, z), self.shm)?;
                aux.extend(sink.take_aux().map(|a| Box::new(a) as Box<dyn AuxSink>));
                frame_sinks.push(Box::new(sink));
                Some(handle)
            }
            None => None,
        };
        #[cfg(feature = "dds")]
        let dds = match &s.dds {
            Some(d) => {
                let (mut sink, handle) = DdsSink::start(&dds_settings(plan, d))?;
                aux.extend(sink.take_aux().map(|a| Box::new(a) as Box<dyn AuxSink>));
                frame_sinks.push(Box::new(sink));
                Some(handle)
            }
            None => None,
        };
        #[cfg(feature = "foxglove")]
        let foxglove = match self.foxglove {
            Some(mut server) => {
                aux.extend(server.take_aux().map(|a| Box::new(a) as Box<dyn AuxSink>));
                let (sink, handle) = server.start()?;
                frame_sinks.push(Box::new(sink));
                Some(handle)
            }
            None => None,
        };
        #[cfg(feature = "view")]
        let view = match self.view {
            Some(listener) => {
                let addr = listener.local_addr().context("--view: local address")?;
                let sensors = plan
                    .sensors()
                    .map(|s| ViewSensor {
                        id: s.id,
                        name: s.name.clone(),
                        model: s.model.name().to_owned(),
                    })
                    .collect();
                let sink = ViewSink::start(listener, sensors)?;
                let state = sink.state().clone();
                frame_sinks.push(Box::new(sink));
                log::info!("live view at http://{addr}/");
                Some(state)
            }
            None => None,
        };
        let queues = frame_sinks
            .iter()
            .filter_map(|s| Some((s.name().to_owned(), s.queue_bytes()?)))
            .collect();
        Ok((
            Sinks {
                #[cfg(feature = "zenoh")]
                zenoh,
                #[cfg(feature = "dds")]
                dds,
                #[cfg(feature = "foxglove")]
                foxglove,
                #[cfg(feature = "view")]
                view,
                recording,
                metrics,
                aux,
                queues,
            },
            frame_sinks,
        ))
    }
}

#[cfg(feature = "foxglove")]
/// The Foxglove server's settings: one channel per sensor, on its ROS topic, from the plan.
fn foxglove_settings(plan: &Plan, addr: SocketAddr) -> FoxgloveSettings {
    FoxgloveSettings {
        addr,
        topics: plan
            .sensors()
            .map(|s| FoxgloveTopic {
                sensor_id: s.id,
                name: s.name.clone(),
                model: s.model.name().to_owned(),
                topic: s.topic.clone(),
                frame_id: s.frame_id.clone(),
            })
            .collect(),
    }
}

#[cfg(feature = "zenoh")]
/// The zenoh sink's settings: one topic per sensor, from the plan.
fn zenoh_settings(plan: &Plan, z: &ZenohPlan) -> ZenohSettings {
    ZenohSettings {
        session: lidarxdp::ros2_zenoh::SessionConfig {
            file: z.config.clone(),
            overrides: z.overrides.clone(),
        },
        domain_id: z.ros_domain_id,
        distro: z.ros_distro,
        qos: lidarxdp_core::ros2::Qos::LIDAR,
        queue: lidarxdp::publish::sink_queue(plan.sensors().count()),
        topics: topic_plans(plan),
    }
}

#[cfg(feature = "dds")]
/// The DDS sink's settings: one topic per sensor, from the plan.
fn dds_settings(plan: &Plan, d: &DdsPlan) -> DdsSettings {
    DdsSettings {
        config_file: d.config.clone(),
        cyclonedds_uri: d.cyclonedds_uri.clone(),
        domain_id: d.ros_domain_id,
        distro: d.ros_distro,
        discovery: d.discovery.clone(),
        queue: lidarxdp::publish::sink_queue(plan.sensors().count()),
        topics: topic_plans(plan),
    }
}

#[cfg(any(feature = "zenoh", feature = "dds"))]
/// One ROS topic per sensor, from the plan (zenoh and DDS alike).
fn topic_plans(plan: &Plan) -> Vec<TopicPlan> {
    plan.sensors()
        .map(|s| TopicPlan {
            sensor_id: s.id,
            topic: s.topic.clone(),
            frame_id: s.frame_id.clone(),
            imu_topic: s.imu_topic.clone(),
            imu_frame_id: s.imu_frame_id.clone(),
        })
        .collect()
}

#[cfg(all(test, feature = "zenoh", feature = "dds"))]
mod tests {
    use super::super::config::{Ros2Env, Settings, build};
    use super::*;

    /// A plan with `n` VLP-16s and the zenoh and DDS sinks on.
    fn plan(n: u16) -> Plan {
        let mut s: Settings = toml::from_str(&format!(
            "[capture]\niface = \"eth0\"\n[zenoh]\nenabled = true\n[dds]\nenabled = true\n{}",
            (0..n)
                .map(|i| format!(
                    "[[sensors]]\nname = \"s{i}\"\nmodel = \"VLP16\"\ncalibration = \"c.yaml\"\n\
                     port = {}\n",
                    2368 + i
                ))
                .collect::<String>()
        ))
        .unwrap();
        s.capture.iface = Some("eth0".into());
        build(s, None, &Ros2Env::default()).unwrap()
    }

    /// The zenoh and DDS sink threads queue two frames per sensor, at least four: ten sensors
    /// cutting at once fit (a queue of 4 dropped 18.7 % of their frames).
    #[test]
    fn sink_queues_hold_two_frames_per_sensor() {
        for (n, queue) in [(1, 4), (2, 4), (3, 6), (10, 20)] {
            let p = plan(n);
            let z = zenoh_settings(&p, p.sinks.zenoh.as_ref().unwrap());
            let d = dds_settings(&p, p.sinks.dds.as_ref().unwrap());
            assert_eq!(
                (z.queue, d.queue, z.topics.len()),
                (queue, queue, n as usize)
            );
        }
    }
}
