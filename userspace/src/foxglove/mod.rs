//! The Foxglove WebSocket server (`lidarxdp run --foxglove ADDR`): Foxglove and Lichtblick
//! connect to the daemon itself and show the clouds live, with no ROS installation.
//!
//! The protocol is the Foxglove SDK's (`foxglove` crate, `WebSocketServer`): the WebSocket
//! subprotocols `foxglove.sdk.v1.1` and `foxglove.sdk.v1` (the SDK's names of the protocol
//! `foxglove/ws-protocol` specified as `foxglove.websocket.v1`; Lichtblick offers
//! `foxglove.sdk.v1` beside the old name since its pull request 819). A client offering only
//! the old name `foxglove.websocket.v1` is refused at the handshake (HTTP 400) by the SDK.
//!
//! # Channels
//! - one per sensor, on the sensor's ROS topic (default `/lidar/<name>/points`, `--topic`),
//!   schema `sensor_msgs/msg/PointCloud2` in encoding `ros2msg`
//!   ([`lidarxdp_core::ros2::POINTCLOUD2_SCHEMA`]), messages in encoding `cdr`: the bytes the
//!   zenoh sink puts ([`lidarxdp_core::ros2::PointCloud2Prefix`] + the points as the decoder
//!   wrote them + the suffix), `header.stamp` = the frame's `start_ns` (its clock is
//!   `--stamp`'s), `header.frame_id` = the sensor's frame id. The message's log time is the
//!   frame's `host_ns` (CLOCK_REALTIME receive time of its first packet), so every sensor's
//!   messages and the diagnostics are on one clock;
//! - [`DIAGNOSTICS_TOPIC`], JSON (schema [`DIAGNOSTICS_SCHEMA`], encoding `jsonschema`) about
//!   once per [`DIAGNOSTICS_PERIOD`]: per sensor frame rate, points, packets received/expected,
//!   loss, frames lost, malformed packets ([`Diagnostics`]).
//!
//! # Threads and privileges
//! [`FoxgloveServer::bind`] runs before the capabilities are dropped: it builds a
//! current-thread tokio runtime (which starts no thread) and, on the calling thread, binds the
//! listening socket, so a privileged or busy port fails the start-up like the publisher's.
//! [`FoxgloveServer::start`] runs after the drop and starts the two threads, which therefore
//! hold no capability: `foxglove-ws` drives the runtime (accepting clients, the WebSocket I/O),
//! `foxglove-sink` encodes and logs the messages.
//!
//! # Never stalls ingest
//! [`FoxgloveSink::offer`] (on the publisher thread) is one `try_send` of the frame's `Arc`
//! into a queue of [`crate::publish::sink_queue`] frames (2 per sensor); a full queue drops the frame for this sink alone
//! ([`FoxgloveCounters::dropped`]). A frame is encoded only when a client is subscribed to its
//! channel (the SDK's `RawChannel::has_sinks`); else it is counted
//! ([`FoxgloveCounters::unwatched`]) and costs nothing more. The SDK copies each message into
//! every subscribed client's queue of [`CLIENT_BACKLOG`] messages without waiting; a slow client
//! loses its oldest queued messages (counted by no one: the SDK does not report them).

mod diagnostics;

pub use diagnostics::{DIAGNOSTICS_SCHEMA, Diagnostics, SensorInfo, WINDOW_FRAMES};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::RecvTimeoutError;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ::foxglove::websocket::{ChannelView, Client, ServerListener};
use ::foxglove::{
    ChannelBuilder, Context, PartialMetadata, RawChannel, Schema, WebSocketServer,
    WebSocketServerHandle,
};
use lidarxdp_core::ros2::POINTCLOUD2_SCHEMA;

use crate::publish::{FrameSink, QueueBytes, SharedFrame, SinkReceiver, SinkThread};

/// The Foxglove sink's counters: daemon-wide, no labels (`lidarxdp_foxglove_*`; stats JSON
/// `foxglove`).
pub const FOXGLOVE_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "foxglove",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Snapshot of the Foxglove sink's counters.
    pub struct FoxgloveCounters in FOXGLOVE_COUNTERS;
    shared
    /// Written by the publisher thread (`dropped`), the sink's thread and the server's.
    pub(crate) struct SharedFoxgloveCounters;
    {
        /// One per frame, whatever the number of subscribed clients.
        frames: Counter "frames" "Frames encoded and sent to the Foxglove clients subscribed to their channel.",
        /// No encoding was done for them.
        unwatched: Counter "frames" "Frames not encoded because no Foxglove client was subscribed to their channel.",
        /// Its thread was behind: ingest and the other sinks were not held up.
        dropped: Counter "frames" "Frames dropped because the Foxglove sink's queue was full.",
        /// Once per message, whatever the number of clients.
        bytes: Counter "bytes" "PointCloud2 message bytes handed to the Foxglove server.",
        diagnostics: Counter "messages" "Diagnostics messages sent to subscribed Foxglove clients.",
        /// Sent only while a client subscribes to it.
        ros_diagnostics: Counter "messages" "diagnostic_msgs/DiagnosticArray messages logged on the /diagnostics channel.",
        connections: Counter "clients" "Foxglove clients that connected.",
        clients: Gauge "clients" "Foxglove clients connected now.",
        /// A frame of a sensor with no channel, or more than 4 GiB of points.
        errors: Counter "frames" "Frames the Foxglove sink could not encode.",
    }
}

/// Topic of the diagnostics channel.
pub const DIAGNOSTICS_TOPIC: &str = "/lidarxdp/diagnostics";

/// Name the server gives itself in its `serverInfo` message.
pub const SERVER_NAME: &str = "lidarxdp";

/// Frames that may wait for the sink's thread with one or two sensors (two frames each; more
/// sensors: [`crate::publish::sink_queue`]): past it the sink drops, never the capture.
pub const SINK_QUEUE: usize = 4;

/// Messages the SDK queues per client before it drops that client's oldest (its default,
/// 1024, would let one slow client hold 1024 clouds: about 500 MB of VLP-16 dual-return
/// frames of 476 KB). Bounds a client's memory at 16 messages.
pub const CLIENT_BACKLOG: usize = 16;

/// How often the diagnostics message is sent.
pub const DIAGNOSTICS_PERIOD: Duration = Duration::from_secs(1);

/// How long a stopping server waits for its clients' connections to close.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// One sensor's channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoxgloveTopic {
    /// Frames' `sensor_id`.
    pub sensor_id: u16,
    /// Sensor name.
    pub name: String,
    /// Model name, e.g. `VLP16`.
    pub model: String,
    /// Channel topic (the sensor's ROS topic).
    pub topic: String,
    /// `header.frame_id` of its messages.
    pub frame_id: String,
}

/// What the server serves.
#[derive(Clone, Debug)]
pub struct FoxgloveSettings {
    /// Listening address (`--foxglove`), already checked to be loopback; port 0 picks a free
    /// one.
    pub addr: SocketAddr,
    /// One channel per sensor, in this order.
    pub topics: Vec<FoxgloveTopic>,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum FoxgloveError {
    /// The tokio runtime could not be built.
    #[error("--foxglove: tokio runtime: {0}")]
    Runtime(std::io::Error),
    /// The listening socket could not be bound (address in use, permission denied).
    #[error("--foxglove: bind {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The SDK's error.
        error: String,
    },
    /// A channel could not be created.
    #[error("--foxglove: channel {topic}: {error}")]
    Channel {
        /// Its topic.
        topic: String,
        /// The SDK's error.
        error: String,
    },
    /// A thread could not be started.
    #[error("--foxglove: spawn the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
}

/// Counts the clients (the SDK calls it on its thread; the SDK itself logs each client's
/// address as it registers and unregisters it).
struct Listener {
    counters: Arc<SharedFoxgloveCounters>,
}

impl ServerListener for Listener {
    fn on_client_connect(&self) {
        self.counters.connections.fetch_add(1, Relaxed);
        let now = self.counters.clients.fetch_add(1, Relaxed) + 1;
        log::debug!("foxglove: a client connected ({now} connected)");
    }

    fn on_client_disconnect(&self) {
        let before = self
            .counters
            .clients
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)))
            .unwrap_or(0);
        log::debug!(
            "foxglove: a client disconnected ({} connected)",
            before.saturating_sub(1)
        );
    }

    fn on_subscribe(&self, _client: Client, channel: ChannelView) {
        log::debug!("foxglove: a client subscribed to {}", channel.topic());
    }
}

/// One sensor's channel and message state, on the sink's thread.
struct PointsChannel {
    sensor_id: u16,
    frame_id: String,
    channel: Arc<RawChannel>,
}

/// The server's ROS 2 `/diagnostics` channel (`diagnostic_msgs/msg/DiagnosticArray`, schema
/// encoding `ros2msg`, messages `cdr`: the bytes the zenoh sink puts), fed by the daemon's
/// [`crate::publish::AuxThread`]. The SDK drops a message no client subscribed to.
pub struct FoxgloveAux {
    channel: Arc<RawChannel>,
    counters: Arc<SharedFoxgloveCounters>,
}

impl crate::publish::AuxSink for FoxgloveAux {
    fn name(&self) -> &str {
        "foxglove"
    }

    fn imu(&mut self, _sensor_id: u16, _reading: &lidarxdp_core::sensor::ImuReading) {}

    fn diagnostics(&mut self, stamp_ns: u64, status: &[lidarxdp_core::ros2::DiagnosticStatus]) {
        if !self.channel.has_sinks() {
            return;
        }
        match lidarxdp_core::ros2::diagnostic_array(stamp_ns, status) {
            Ok(m) => {
                self.channel.log_with_meta(
                    &m,
                    PartialMetadata {
                        log_time: Some(stamp_ns),
                    },
                );
                self.counters.ros_diagnostics.fetch_add(1, Relaxed);
            }
            Err(e) => log::debug!("foxglove: /diagnostics not encoded: {e}"),
        }
    }
}

/// The server bound, before its threads start ([`FoxgloveServer::bind`]).
pub struct FoxgloveServer {
    /// `/diagnostics` until [`FoxgloveServer::take_aux`].
    aux: Option<FoxgloveAux>,
    runtime: tokio::runtime::Runtime,
    server: WebSocketServerHandle,
    addr: SocketAddr,
    worker: Worker,
}

impl std::fmt::Debug for FoxgloveServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoxgloveServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// What the sink's thread owns.
struct Worker {
    /// Keeps the channels registered (the server holds it weakly).
    _context: Arc<Context>,
    points: Vec<PointsChannel>,
    diag_channel: Arc<RawChannel>,
    diagnostics: Diagnostics,
    counters: Arc<SharedFoxgloveCounters>,
    /// The message being encoded, reused.
    buf: Vec<u8>,
}

impl FoxgloveServer {
    /// The ROS 2 `/diagnostics` channel, for the daemon's [`crate::publish::AuxThread`]
    /// (once; `None` after).
    pub fn take_aux(&mut self) -> Option<FoxgloveAux> {
        self.aux.take()
    }
}

impl FoxgloveServer {
    /// Creates the channels and binds the listening socket on the calling thread, starting no
    /// thread (call it before the capabilities drop; connections wait in the backlog until
    /// [`Self::start`]).
    ///
    /// # Errors
    /// [`FoxgloveError`]: the runtime, a channel, or the bind (naming the address).
    pub fn bind(settings: &FoxgloveSettings) -> Result<Self, FoxgloveError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(FoxgloveError::Runtime)?;
        let context = Context::new();
        let channel_err = |topic: &str, e: ::foxglove::FoxgloveError| FoxgloveError::Channel {
            topic: topic.to_owned(),
            error: e.to_string(),
        };
        let mut points = Vec::with_capacity(settings.topics.len());
        for t in &settings.topics {
            let channel = ChannelBuilder::new(&t.topic)
                .context(&context)
                .message_encoding("cdr")
                .schema(Schema::new(
                    "sensor_msgs/msg/PointCloud2",
                    "ros2msg",
                    POINTCLOUD2_SCHEMA.as_bytes(),
                ))
                .build_raw()
                .map_err(|e| channel_err(&t.topic, e))?;
            points.push(PointsChannel {
                sensor_id: t.sensor_id,
                frame_id: t.frame_id.clone(),
                channel,
            });
        }
        let diag_channel = ChannelBuilder::new(DIAGNOSTICS_TOPIC)
            .context(&context)
            .message_encoding("json")
            .schema(Schema::new(
                "lidarxdp.Diagnostics",
                "jsonschema",
                DIAGNOSTICS_SCHEMA.as_bytes(),
            ))
            .build_raw()
            .map_err(|e| channel_err(DIAGNOSTICS_TOPIC, e))?;
        let counters = Arc::new(SharedFoxgloveCounters::default());
        let ros_topic = lidarxdp_core::ros2::DIAGNOSTICS_TOPIC;
        let aux = FoxgloveAux {
            channel: ChannelBuilder::new(ros_topic)
                .context(&context)
                .message_encoding("cdr")
                .schema(Schema::new(
                    "diagnostic_msgs/msg/DiagnosticArray",
                    "ros2msg",
                    lidarxdp_core::ros2::DIAGNOSTIC_ARRAY_SCHEMA.as_bytes(),
                ))
                .build_raw()
                .map_err(|e| channel_err(ros_topic, e))?,
            counters: counters.clone(),
        };
        // An IPv6 host needs its brackets: the SDK binds "{host}:{port}", parsed as an address
        // (no name lookup, which would start a blocking thread).
        let host = match settings.addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        let server = WebSocketServer::new()
            .name(SERVER_NAME)
            .bind(host, settings.addr.port())
            .context(&context)
            .message_backlog_size(CLIENT_BACKLOG)
            .listener(Arc::new(Listener {
                counters: counters.clone(),
            }));
        // Inside the runtime, the server takes it as its own (the SDK's `Handle::try_current`).
        let server = runtime
            .block_on(server.start())
            .map_err(|e| FoxgloveError::Bind {
                addr: settings.addr,
                error: e.to_string(),
            })?;
        let addr = SocketAddr::new(settings.addr.ip(), server.port());
        let sensors: Vec<SensorInfo> = settings
            .topics
            .iter()
            .map(|t| SensorInfo {
                id: t.sensor_id,
                name: t.name.clone(),
                model: t.model.clone(),
                topic: t.topic.clone(),
            })
            .collect();
        Ok(FoxgloveServer {
            aux: Some(aux),
            runtime,
            server,
            addr,
            worker: Worker {
                _context: context,
                points,
                diag_channel,
                diagnostics: Diagnostics::new(&sensors),
                counters,
                buf: Vec::new(),
            },
        })
    }

    /// The bound address (with the port chosen when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts the `foxglove-ws` thread (the server's runtime) and the `foxglove-sink` thread.
    /// Call it after the capabilities are dropped.
    ///
    /// # Errors
    /// [`FoxgloveError::Thread`]: a thread could not be spawned.
    pub fn start(self) -> Result<(FoxgloveSink, FoxgloveHandle), FoxgloveError> {
        let FoxgloveServer {
            runtime,
            server,
            addr,
            worker,
            ..
        } = self;
        let counters = worker.counters.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let ws = std::thread::Builder::new()
            .name("foxglove-ws".into())
            .spawn(move || {
                // Serves until the sink is dropped (or the sender is gone).
                let _ = runtime.block_on(stop_rx);
                let shutdown = server.stop();
                // The timer is made inside the runtime, whose time driver it needs.
                let waited = runtime
                    .block_on(async { tokio::time::timeout(STOP_WAIT, shutdown.wait()).await });
                if waited.is_err() {
                    log::warn!(
                        "foxglove: clients still connected after {STOP_WAIT:?}; closing anyway"
                    );
                }
            })
            .map_err(|e| FoxgloveError::Thread("foxglove-ws", e))?;
        let queue = crate::publish::sink_queue(worker.points.len());
        let sink_thread = SinkThread::spawn("foxglove-sink", queue, move |rx| worker.run(rx));
        let sink_thread = match sink_thread {
            Ok(t) => t,
            Err(e) => {
                let _ = stop_tx.send(());
                let _ = ws.join();
                return Err(FoxgloveError::Thread("foxglove-sink", e));
            }
        };
        log::info!("foxglove: serving ws://{addr} (open it in Foxglove or Lichtblick)");
        Ok((
            FoxgloveSink {
                counters: counters.clone(),
                sink_thread,
                stop: Some(stop_tx),
                ws_thread: Some(ws),
            },
            FoxgloveHandle { counters },
        ))
    }
}

/// The [`FrameSink`] that feeds the Foxglove server (module documentation). Dropping it lets
/// its thread finish the queued frames, then stops the server.
pub struct FoxgloveSink {
    counters: Arc<SharedFoxgloveCounters>,
    sink_thread: SinkThread,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    ws_thread: Option<JoinHandle<()>>,
}

/// What the daemon keeps of a started server: its counters.
#[derive(Clone)]
pub struct FoxgloveHandle {
    counters: Arc<SharedFoxgloveCounters>,
}

impl FoxgloveHandle {
    /// The counters now.
    pub fn counters(&self) -> FoxgloveCounters {
        self.counters.snapshot()
    }
}

impl FrameSink for FoxgloveSink {
    fn name(&self) -> &str {
        "foxglove"
    }

    fn offer(&mut self, frame: &Arc<SharedFrame>, _now: Instant) {
        self.sink_thread
            .offer_counted(frame, &self.counters.dropped, &self.counters.errors);
    }

    fn queue_bytes(&self) -> Option<QueueBytes> {
        Some(self.sink_thread.queue_bytes())
    }
}

impl Drop for FoxgloveSink {
    fn drop(&mut self) {
        self.sink_thread.close();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.ws_thread.take()
            && t.join().is_err()
        {
            log::error!("foxglove: the server thread panicked");
        }
    }
}

impl Worker {
    fn run(mut self, rx: SinkReceiver) {
        let mut next = Instant::now() + DIAGNOSTICS_PERIOD;
        loop {
            match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(frame) => self.frame(&frame),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = Instant::now();
            if now >= next {
                self.send_diagnostics();
                next = now + DIAGNOSTICS_PERIOD;
            }
        }
    }

    /// Counts `frame` in the diagnostics and, when a client is subscribed to its channel,
    /// encodes and logs it.
    fn frame(&mut self, frame: &SharedFrame) {
        let h = frame.header();
        self.diagnostics.add(h, frame.points().len());
        let Some(p) = self.points.iter().find(|p| p.sensor_id == h.sensor_id) else {
            self.counters.errors.fetch_add(1, Relaxed);
            return;
        };
        if !p.channel.has_sinks() {
            self.counters.unwatched.fetch_add(1, Relaxed);
            return;
        }
        let points: &[u8] = frame.points().as_bytes();
        let encoded = frame.pointcloud2_prefix(&p.frame_id).and_then(|prefix| {
            self.buf.clear();
            prefix.write_message(points, &mut self.buf)
        });
        if let Err(e) = encoded {
            log::debug!("foxglove: frame {} not encoded: {e}", h.sequence);
            self.counters.errors.fetch_add(1, Relaxed);
            return;
        }
        p.channel.log_with_meta(
            &self.buf,
            PartialMetadata {
                log_time: Some(h.host_ns),
            },
        );
        self.counters.frames.fetch_add(1, Relaxed);
        self.counters
            .bytes
            .fetch_add(self.buf.len() as u64, Relaxed);
    }

    /// Sends the diagnostics message when a client is subscribed to it.
    fn send_diagnostics(&mut self) {
        if !self.diag_channel.has_sinks() {
            return;
        }
        let now = crate::sys::clock::realtime_ns();
        let msg = self.diagnostics.to_json(now).to_string();
        self.diag_channel.log_with_meta(
            msg.as_bytes(),
            PartialMetadata {
                log_time: Some(now),
            },
        );
        self.counters.diagnostics.fetch_add(1, Relaxed);
    }
}
