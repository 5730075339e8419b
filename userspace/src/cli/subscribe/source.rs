//! Where `subscribe` reads frames from ([`FrameSource`]): the daemon's TCP publisher
//! (`lidarxdp_client`'s [`Subscriber`], [`open_tcp`]) or a ROS 2 topic over zenoh
//! (`lidarxdp_client::zenoh`'s reader, [`open_zenoh`]), each frame yielded as a [`Got`].
use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lidarxdp_client::mcap::{McapError, McapRecorder};
#[cfg(feature = "zenoh")]
use lidarxdp_client::zenoh::{
    SessionConfig, ZenohFrame, ZenohFrameError, ZenohSubscriber, layout_points_of,
};
use lidarxdp_client::{ReceivedFrame, Subscriber};
#[cfg(feature = "zenoh")]
use lidarxdp_core::layout::PointType;
use lidarxdp_core::protocol::Subscribe;
#[cfg(feature = "zenoh")]
use lidarxdp_core::ros2::PointCloud2View;

use super::SubscribeArgs;
use super::output::describe;
use super::stop::{Stop, StopReason};

/// The receive time of a frame, ns since the Unix epoch: the one clock of `subscribe`.
fn receive_time_ns() -> u64 {
    lidarxdp::sys::clock::realtime_ns()
}

/// Where [`run`] reads frames from.
///
/// [`run`]: super::run::run
pub(super) enum FrameSource {
    /// The daemon's TCP publisher: `lidarxdp_client`'s [`Subscriber`], with the sensor names
    /// of its hello (`sensor<id>` for an id it did not name), and the frame it reads into.
    Tcp {
        sub: Box<Subscriber>,
        addr: SocketAddr,
        names: HashMap<u16, String>,
        frame: ReceivedFrame,
    },
    /// A ROS 2 topic over zenoh: `lidarxdp_client::zenoh`'s reader, the message last read
    /// (its points are read in place), `--idle-exit-ms`, and the summary's own values:
    /// messages read from shared memory, `delivery_us` (receive time minus the publisher's
    /// put time in the rmw_zenoh attachment) and `age_us` (receive time minus `header.stamp`).
    #[cfg(feature = "zenoh")]
    Zenoh {
        sub: Box<ZenohSubscriber>,
        topic: String,
        current: Option<ZenohFrame>,
        idle: Option<Duration>,
        last_msg: Option<Instant>,
        in_shm: u64,
        delivery_us: Vec<u64>,
        age_us: Vec<u64>,
    },
}

/// One frame, whichever the source: what the outputs need, its points in place.
pub(super) struct Got<'a> {
    /// The summary's key: the sensor name (TCP) or the topic (zenoh).
    pub(super) key: &'a str,
    pub(super) seq: u64,
    pub(super) points: usize,
    /// Bytes received (`--stats` MB/s).
    pub(super) bytes: usize,
    /// `--stats` latency, µs: receive time minus the frame's `host_ns` (its first packet at
    /// the daemon; TCP) or minus the publisher's put time (zenoh).
    pub(super) latency_us: u64,
    pub(super) received_ns: u64,
    pub(super) from: GotFrom<'a>,
}

/// The source's own view of a [`Got`] frame.
pub(super) enum GotFrom<'a> {
    Tcp(&'a ReceivedFrame),
    #[cfg(feature = "zenoh")]
    Zenoh {
        msg: &'a ZenohFrame,
        view: PointCloud2View<'a>,
        /// The cloud's layout and its `data` bytes.
        points: (PointType, &'a [u8]),
        /// rmw_zenoh's sequence number (0 without an attachment).
        seq: i64,
        /// The publisher's put time, ns (the attachment's; else the receive time).
        publish_ns: u64,
    },
}

/// Connects (retrying for `--connect-timeout-ms`) and subscribes as `--sensor` and `--fields`
/// ask; `Ok(Err(why))` when a signal came first.
pub(super) fn open_tcp(
    a: &SubscribeArgs,
    addr: SocketAddr,
    stop: &Stop,
) -> Result<Result<FrameSource, StopReason>> {
    let want = Subscribe {
        sensors: a.sensors.clone(),
        fields: a.fields.clone(),
        ..Subscribe::default()
    };
    let deadline = Instant::now() + Duration::from_millis(a.connect_timeout_ms);
    let stream = loop {
        if let Some(why) = stop.signal() {
            return Ok(Err(why));
        }
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                log::debug!("connect {addr}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("connect to {addr}")),
        }
    };
    stop.watch(&stream)?;
    let stopped = || Ok(Err(stop.signal().unwrap_or(StopReason::Error)));
    let mut sub = match Subscriber::from_stream(stream) {
        Ok(s) => s,
        Err(_) if stop.signal().is_some() => return stopped(),
        Err(e) => return Err(e).with_context(|| format!("connect to {addr}")),
    };
    let mut names: HashMap<u16, String> = (sub.hello().sensors.iter())
        .map(|s| (s.id, s.name.clone()))
        .collect();
    if want != Subscribe::default() {
        let ack = match sub.subscribe(&want) {
            Ok(ack) => ack,
            Err(_) if stop.signal().is_some() => return stopped(),
            Err(e) => return Err(e).with_context(|| format!("subscribe to {}", describe(&want))),
        };
        let chosen: Vec<String> = (ack.sensor_ids.iter())
            .map(|&id| name_of(&mut names, id).clone())
            .collect();
        log::info!(
            "subscribed to {addr}: sensors {}, {}-byte points",
            chosen.join(", "),
            ack.point_step
        );
    } else {
        log::info!("subscribed to {addr}");
    }
    Ok(Ok(FrameSource::Tcp {
        sub: Box::new(sub),
        addr,
        names,
        frame: ReceivedFrame::default(),
    }))
}

/// The name of sensor `id`: the hello's, else `sensor<id>`.
fn name_of(names: &mut HashMap<u16, String>, id: u16) -> &String {
    names.entry(id).or_insert_with(|| format!("sensor{id}"))
}

/// Resolves the domain id and the session configuration (`--zenoh-config`, rmw_zenoh's
/// environment variables) and subscribes to `topic`.
#[cfg(feature = "zenoh")]
pub(super) fn open_zenoh(a: &SubscribeArgs, topic: &str) -> Result<FrameSource> {
    let domain = lidarxdp_core::ros2::domain_id(
        a.ros_domain_id,
        std::env::var("ROS_DOMAIN_ID").ok().as_deref(),
    )?;
    // zenoh locks the publisher's segments it maps (mlock(2)): allow up to the hard limit.
    if let Err(e) = lidarxdp::sys::rlimit::memlock_to_hard() {
        log::debug!("RLIMIT_MEMLOCK: {e}");
    }
    let source = SessionConfig::from_env(a.zenoh_config.as_deref())?;
    let sub = ZenohSubscriber::open(&source, domain, topic, a.ros_distro.unwrap_or_default())?;
    log::info!("subscribed to {topic} (zenoh key {})", sub.key());
    Ok(FrameSource::Zenoh {
        sub: Box::new(sub),
        topic: topic.to_owned(),
        current: None,
        idle: a.idle_exit_ms.map(Duration::from_millis),
        last_msg: None,
        in_shm: 0,
        delivery_us: Vec::new(),
        age_us: Vec::new(),
    })
}

impl FrameSource {
    /// Records the IMU readings received since the last call (TCP: protocol message `imu`)
    /// on their sensors' IMU channels; returns how many. Nothing for zenoh (one topic).
    pub(super) fn record_imu(&mut self, mcap: &mut McapRecorder) -> Result<u64, McapError> {
        match self {
            FrameSource::Tcp { sub, names, .. } => {
                let mut n = 0;
                for imu in sub.take_imu() {
                    let name = name_of(names, imu.message.sensor_id);
                    mcap.write_imu(&imu.message, name, imu.received_ns)?;
                    n += 1;
                }
                Ok(n)
            }
            #[cfg(feature = "zenoh")]
            FrameSource::Zenoh { .. } => Ok(0),
        }
    }

    /// Waits for the next frame: `Err(Ok(why))` when the stream ended or a stop condition
    /// came (signal, `--idle-exit-ms`), `Err(Err(e))` on an error.
    pub(super) fn next(
        &mut self,
        stop: &Stop,
    ) -> Result<Got<'_>, Result<StopReason, anyhow::Error>> {
        match self {
            FrameSource::Tcp {
                sub,
                addr,
                names,
                frame,
            } => {
                match sub.next_frame_into(frame) {
                    Ok(true) => {}
                    Ok(false) => return Err(Ok(stop.signal().unwrap_or(StopReason::EndOfStream))),
                    Err(e) => {
                        return Err(stop.signal().ok_or_else(|| {
                            anyhow::Error::new(e).context(format!("receive from {addr}"))
                        }));
                    }
                }
                let received_ns = receive_time_ns();
                let h = frame.header();
                Ok(Got {
                    key: name_of(names, h.sensor_id),
                    seq: h.sequence,
                    points: frame.point_count(),
                    bytes: frame.payload_bytes().len(),
                    latency_us: received_ns.saturating_sub(h.host_ns) / 1000,
                    received_ns,
                    from: GotFrom::Tcp(&*frame),
                })
            }
            #[cfg(feature = "zenoh")]
            FrameSource::Zenoh {
                sub,
                topic,
                current,
                idle,
                last_msg,
                in_shm,
                delivery_us,
                age_us,
            } => {
                let msg = loop {
                    if let Some(why) = stop.signal() {
                        return Err(Ok(why));
                    }
                    if let Some(msg) = sub.recv_timeout(Duration::from_millis(50)) {
                        break msg;
                    }
                    if let (Some(idle), Some(t)) = (*idle, *last_msg)
                        && t.elapsed() >= idle
                    {
                        return Err(Ok(StopReason::Idle));
                    }
                };
                *last_msg = Some(Instant::now());
                let received_ns = receive_time_ns();
                let msg: &ZenohFrame = current.insert(msg);
                let on = |e: ZenohFrameError| {
                    Err::<StopReason, _>(
                        anyhow::Error::new(e).context(format!("message on {topic}")),
                    )
                };
                let view = msg.view().map_err(|e| on(e.into()))?;
                let points = layout_points_of(&view).map_err(on)?;
                let att = msg.attachment();
                let publish_ns = att.map_or(received_ns, |t| t.source_timestamp_ns.max(0) as u64);
                let seq = att.map_or(0, |t| t.sequence_number);
                let latency_us = att.map_or(0, |_| received_ns.saturating_sub(publish_ns) / 1000);
                *in_shm += u64::from(msg.in_shared_memory());
                delivery_us.push(latency_us);
                age_us.push(received_ns.saturating_sub(view.stamp_ns) / 1000);
                Ok(Got {
                    key: topic.as_str(),
                    seq: seq.max(0) as u64,
                    points: points.1.len() / points.0.point_step(),
                    bytes: msg.bytes().len(),
                    latency_us,
                    received_ns,
                    from: GotFrom::Zenoh {
                        msg,
                        view,
                        points,
                        seq,
                        publish_ns,
                    },
                })
            }
        }
    }

    /// Adds the source's own values to the summary object; returns the text that follows the
    /// counts in the readable summary.
    #[cfg(not(feature = "zenoh"))]
    pub(super) fn summarize(&mut self, _summary: &mut serde_json::Value) -> String {
        String::new()
    }

    /// Adds the source's own values to the summary object; returns the text that follows the
    /// counts in the readable summary.
    #[cfg(feature = "zenoh")]
    pub(super) fn summarize(&mut self, summary: &mut serde_json::Value) -> String {
        let FrameSource::Zenoh {
            in_shm,
            delivery_us,
            age_us,
            ..
        } = self
        else {
            return String::new();
        };
        summary["shm_frames"] = (*in_shm).into();
        summary["delivery_us"] = percentiles(delivery_us);
        summary["age_us"] = percentiles(age_us);
        format!(", {in_shm} read in place from shared memory")
    }
}

/// `{"p50", "p99", "max"}` of `v` (nearest rank), nulls when empty.
#[cfg(feature = "zenoh")]
fn percentiles(v: &mut [u64]) -> serde_json::Value {
    v.sort_unstable();
    let q = |p: f64| {
        v.get(((v.len() as f64 - 1.0) * p).round() as usize)
            .copied()
    };
    serde_json::json!({"p50": q(0.5), "p99": q(0.99), "max": v.last().copied()})
}
