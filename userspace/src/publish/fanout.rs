//! The TCP server's fan-out state machine: pure logic, no syscalls, no io_uring.
//!
//! It keeps, per subscriber, the messages to send (control messages, then frames in arrival
//! order), the batch in flight and how much of it is written, the handshake state and the
//! stall clock. The driver ([`super::uring`]) feeds it typed events (a connection accepted,
//! `n` bytes sent, bytes received, a hang-up, the send-queue length for the stall check) with
//! the time, and executes the [`Action`]s it returns: submit a send of [`Fanout::unsent`], arm
//! a receive, set a socket's send buffer, close a socket, release it.
//!
//! # Queues (per subscriber and sensor)
//! A subscriber's waiting frames are bounded per sensor: at most `queue_depth` frames of each
//! sensor wait behind the batch being sent. A new frame finding `queue_depth` frames of its
//! sensor waiting drops the oldest frame *of that sensor* (counted in
//! [`super::PublisherCounters::frames_dropped_queue_full`]), so frames that complete in a burst
//! at each cut (one per sensor) never push another sensor's frames out, and a subscriber that
//! keeps up in bandwidth gets every frame of every sensor it subscribed to.
//!
//! Memory bound: besides its batch (at most [`super::MAX_BATCH`] messages), a subscriber holds
//! at most `queue_depth × max(1, announced sensors)` frames. A frame of a sensor not announced
//! in the hello that finds the subscriber at that total drops the oldest frame of the sensor
//! with the most frames waiting (again never starving one sensor for another). Frames are
//! shared by all subscribers (one `Arc` per encoding), so the publisher holds at most that many
//! distinct frame messages per subscriber, plus the pool's cap of empty buffers.
//!
//! The bytes of the frame messages alive (header and payload, each encoding once however many
//! subscribers hold it, queued or in a batch) are the TCP sink's queue bytes,
//! `lidarxdp_sink_queue_bytes{sink="tcp"}` ([`Fanout::queue_bytes`]): added when a frame's
//! encoding is made, taken off when its last holder drops it.
//!
//! # In-flight operations
//! While a send is in flight for a subscriber, its batch is neither changed nor freed (the
//! kernel reads it); while a receive is in flight, the subscriber is not released (the driver
//! owns the receive buffer). A closed subscriber is released ([`Action::Release`]) only once
//! both have completed.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::counters::{Counters, add};
use super::sink::{FrameSink, QueueBytes, SharedFrame};
use super::{
    BATCH_BYTES, IMU_QUEUE_PER_SUBSCRIBER, MAX_BATCH, MAX_SNDBUF, SubscriberCounters,
    SubscriberStats,
};
use lidarxdp_core::layout::PointType;
use lidarxdp_core::protocol::{
    self, FieldSet, Hello, MAX_POINT_COUNT, Message, Parsed, ProtocolError, SensorEntry, Subscribe,
    error_code,
};

/// Settings of the fan-out (from [`super::PublisherConfig`]).
#[derive(Clone, Debug)]
pub(crate) struct FanoutConfig {
    /// Most subscribers served at once; more are rejected.
    pub max_subscribers: usize,
    /// Frames of one sensor that may wait per subscriber (at least 1).
    pub queue_depth: usize,
    /// A subscriber with a batch in flight that takes no byte for this long is disconnected.
    pub stall_timeout: Duration,
    /// Initial `SO_SNDBUF` target, bytes (0: leave the kernel's autotuning alone).
    pub sndbuf: usize,
    /// Sensors announced in the hello.
    pub sensors: Vec<SensorEntry>,
    /// Each sensor's point layout by id (a sensor not listed: `autoware`): the fields a
    /// subscriber may choose.
    pub point_types: Vec<(u16, PointType)>,
}

/// A subscriber: its slot (reused after a release) and the slot's generation (24 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SubId {
    /// Slot index.
    pub slot: u32,
    /// Generation of the slot's occupant, `< 2^24`.
    pub generation: u32,
}

/// What the driver must do, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Submit a send of [`Fanout::unsent`] for this subscriber.
    Send(SubId),
    /// Arm a receive on this subscriber's socket.
    Recv(SubId),
    /// Set this subscriber's socket send buffer to hold this many bytes.
    SetSndbuf(SubId, usize),
    /// Shut the socket down and cancel the operations still in flight on it.
    Close {
        /// The subscriber.
        sub: SubId,
        /// A send is in flight.
        cancel_send: bool,
        /// A receive is in flight.
        cancel_recv: bool,
    },
    /// No operation is in flight on this closed subscriber any more: drop its socket and
    /// buffers.
    Release(SubId),
}

/// Payload of a message.
enum Body {
    /// Control message (hello, acknowledgement, error): header only.
    None,
    /// All fields: the decoder's point buffer, sent as is.
    Points(Arc<SharedFrame>),
    /// A packed field subset ([`FieldSet::pack`]).
    Packed(Vec<u8>),
}

/// A message as sent: encoded header plus payload, shared by all subscribers through `Arc`.
pub(crate) struct Outgoing {
    header: Vec<u8>,
    body: Body,
    /// The frame's sensor; `None` for a control or IMU message.
    sensor: Option<u16>,
    /// An IMU message.
    imu: bool,
    counters: Arc<Counters>,
    /// A frame message's [`Fanout::queue_bytes`], which holds its length while it lives.
    queued: Option<QueueBytes>,
}

impl Outgoing {
    fn frame(
        header: Vec<u8>,
        body: Body,
        sensor: u16,
        counters: &Arc<Counters>,
        queued: &QueueBytes,
    ) -> Arc<Self> {
        let alive = counters.frames_alive.fetch_add(1, Relaxed) + 1;
        counters.frames_alive_high_water.fetch_max(alive, Relaxed);
        let o = Outgoing {
            header,
            body,
            sensor: Some(sensor),
            imu: false,
            counters: counters.clone(),
            queued: Some(queued.clone()),
        };
        queued.add(o.len() as u64);
        Arc::new(o)
    }

    /// A header-only message: a control message, or an IMU message when `imu`.
    fn header_only(header: Vec<u8>, imu: bool, counters: &Arc<Counters>) -> Arc<Self> {
        Arc::new(Outgoing {
            header,
            body: Body::None,
            sensor: None,
            imu,
            counters: counters.clone(),
            queued: None,
        })
    }

    fn control(header: Vec<u8>, counters: &Arc<Counters>) -> Arc<Self> {
        Self::header_only(header, false, counters)
    }

    fn payload(&self) -> &[u8] {
        match &self.body {
            Body::None => &[],
            Body::Points(f) => f.points().as_bytes(),
            Body::Packed(b) => b,
        }
    }

    fn len(&self) -> usize {
        self.header.len() + self.payload().len()
    }
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        if self.sensor.is_some() {
            self.counters.frames_alive.fetch_sub(1, Relaxed);
        }
        if let Some(q) = &self.queued {
            q.sub(self.len() as u64);
        }
    }
}

struct Sub {
    generation: u32,
    peer: String,
    /// Messages of the in-flight batch, in order; `written` bytes of them are sent.
    batch: Vec<Arc<Outgoing>>,
    written: usize,
    /// Control messages (hello, acknowledgement, error) to send before the waiting frames.
    control: VecDeque<Arc<Outgoing>>,
    /// Frames waiting behind the batch, in arrival order (at most `queue_depth` per sensor).
    queue: VecDeque<Arc<Outgoing>>,
    /// IMU messages waiting, in arrival order (at most [`IMU_QUEUE_PER_SUBSCRIBER`]); sent
    /// before the waiting frames.
    imu_queue: VecDeque<Arc<Outgoing>>,
    /// Takes IMU messages (the subscription's `flags` bit 0 clear).
    imu: bool,
    /// Bytes of an incomplete client message.
    rx_acc: Vec<u8>,
    send_pending: bool,
    recv_pending: bool,
    closing: bool,
    /// An error message is queued: close once it is sent.
    close_after_send: bool,
    /// Last time the socket took bytes, its send queue shrank, or the batch started.
    last_progress: Instant,
    /// Bytes in the socket's send queue at the last stall check.
    outq: usize,
    /// Subscribed sensor ids, ascending; `None` = all.
    sensors: Option<Vec<u16>>,
    /// The chosen fields, resolved for each layout among the subscribed sensors; empty = all
    /// fields of whatever layout.
    fields: Vec<FieldSet>,
    dropped: u64,
    frames_sent: u64,
}

impl Sub {
    /// The fields this subscriber takes of a frame in layout `t`.
    fn fields_of(&self, t: PointType) -> FieldSet {
        self.fields
            .iter()
            .find(|f| f.point_type() == t)
            .copied()
            .unwrap_or(FieldSet::all(t))
    }

    /// Takes new frames of `sensor`.
    fn takes(&self, sensor: u16) -> bool {
        !self.closing
            && !self.close_after_send
            && self
                .sensors
                .as_ref()
                .is_none_or(|s| s.binary_search(&sensor).is_ok())
    }
}

/// The fan-out state machine (see the module documentation).
pub(crate) struct Fanout {
    cfg: FanoutConfig,
    counters: Arc<Counters>,
    subs: Vec<Option<Sub>>,
    free: Vec<usize>,
    /// Subscribers not closing.
    active: usize,
    next_generation: u32,
    /// Current `SO_SNDBUF` target of subscriber sockets, bytes.
    sndbuf: usize,
    stopping: bool,
    actions: Vec<Action>,
    /// Per-frame scratch: the frame's encoding per field set.
    encodings: Vec<(FieldSet, Arc<Outgoing>)>,
    /// Bytes of the frame messages alive (module documentation).
    queued: QueueBytes,
}

impl Fanout {
    /// A fan-out with no subscriber.
    pub(crate) fn new(mut cfg: FanoutConfig, counters: Arc<Counters>) -> Self {
        cfg.queue_depth = cfg.queue_depth.max(1);
        cfg.max_subscribers = cfg.max_subscribers.max(1);
        let sndbuf = cfg.sndbuf.min(MAX_SNDBUF);
        Fanout {
            cfg,
            counters,
            subs: Vec::new(),
            free: Vec::new(),
            active: 0,
            next_generation: 0,
            sndbuf,
            stopping: false,
            actions: Vec::new(),
            encodings: Vec::new(),
            queued: QueueBytes::default(),
        }
    }

    /// The bytes of the frame messages alive: queued for a subscriber or in its batch, each
    /// encoding once (module documentation).
    pub(crate) fn queue_bytes(&self) -> QueueBytes {
        self.queued.clone()
    }

    /// Moves the actions produced so far to the end of `out`.
    pub(crate) fn drain_actions(&mut self, out: &mut Vec<Action>) {
        out.append(&mut self.actions);
    }

    /// Subscribers connected and not closing.
    #[cfg(test)]
    pub(crate) fn active(&self) -> usize {
        self.active
    }

    /// Whether any subscriber (closing ones included) is still held.
    pub(crate) fn has_subscribers(&self) -> bool {
        self.subs.iter().any(Option::is_some)
    }

    fn id(slot: usize, sub: &Sub) -> SubId {
        SubId {
            slot: slot as u32,
            generation: sub.generation,
        }
    }

    /// Most frames one subscriber may have waiting, all sensors together.
    fn total_cap(&self) -> usize {
        self.cfg.queue_depth * self.cfg.sensors.len().max(1)
    }

    /// A new connection from `peer`: queues the hello and returns the subscriber, or `None`
    /// (counted as rejected; the driver closes the socket) when `max_subscribers` are
    /// connected or the publisher is stopping. `server_time_ns` goes into the hello (ns since
    /// the Unix epoch).
    pub(crate) fn accept(
        &mut self,
        now: Instant,
        server_time_ns: u64,
        peer: String,
    ) -> Option<SubId> {
        if self.stopping || self.active >= self.cfg.max_subscribers {
            add(&self.counters.subscribers_rejected, 1);
            log::info!(
                "publisher: rejecting subscriber {peer} (max_subscribers = {})",
                self.cfg.max_subscribers
            );
            return None;
        }
        let mut hello = Vec::with_capacity(128);
        protocol::encode_hello(
            &Hello {
                server_name: concat!("lidarxdp/", env!("CARGO_PKG_VERSION")).into(),
                max_subscribers: self.cfg.max_subscribers as u32,
                queue_depth: self.cfg.queue_depth as u32,
                server_time_ns,
                min_version: protocol::MIN_VERSION,
                sensors: self.cfg.sensors.clone(),
            },
            &mut hello,
        );
        self.next_generation = (self.next_generation + 1) & 0xff_ffff;
        let sub = Sub {
            generation: self.next_generation,
            peer,
            batch: Vec::with_capacity(MAX_BATCH),
            written: 0,
            control: VecDeque::from([Outgoing::control(hello, &self.counters)]),
            queue: VecDeque::new(),
            imu_queue: VecDeque::new(),
            imu: true,
            rx_acc: Vec::new(),
            send_pending: false,
            recv_pending: false,
            closing: false,
            close_after_send: false,
            last_progress: now,
            outq: 0,
            sensors: None,
            fields: Vec::new(),
            dropped: 0,
            frames_sent: 0,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.subs[s] = Some(sub);
                s
            }
            None => {
                self.subs.push(Some(sub));
                self.subs.len() - 1
            }
        };
        self.active += 1;
        add(&self.counters.subscribers, 1);
        add(&self.counters.subscribers_accepted, 1);
        let id = SubId {
            slot: slot as u32,
            generation: self.next_generation,
        };
        log::info!(
            "publisher: subscriber {slot} connected ({} active)",
            self.active
        );
        if self.sndbuf > 0 {
            self.actions.push(Action::SetSndbuf(id, self.sndbuf));
        }
        self.start_batch(slot, now);
        self.arm_recv(slot);
        Some(id)
    }

    /// The unsent bytes of the subscriber's batch, as at most `2 × MAX_BATCH` non-empty slices
    /// (the header and payload iovecs of each message, the first one advanced past what is
    /// already written). Empty for an unknown subscriber.
    pub(crate) fn unsent(&self, id: SubId) -> impl Iterator<Item = &[u8]> {
        let sub = self
            .subs
            .get(id.slot as usize)
            .and_then(Option::as_ref)
            .filter(|s| s.generation == id.generation);
        let mut skip = sub.map_or(0, |s| s.written);
        sub.into_iter()
            .flat_map(|s| s.batch.iter())
            .flat_map(|m| [&m.header[..], m.payload()])
            .filter_map(move |part| {
                if skip >= part.len() {
                    skip -= part.len();
                    return None;
                }
                let rest = &part[skip..];
                skip = 0;
                Some(rest)
            })
    }

    /// If the subscriber is idle, moves up to [`MAX_BATCH`] waiting messages (control first,
    /// then IMU messages, then frames, each in arrival order, while under [`BATCH_BYTES`]) into
    /// its batch and asks for the send.
    fn start_batch(&mut self, slot: usize, now: Instant) {
        let Some(sub) = self.subs[slot].as_mut() else {
            return;
        };
        if !sub.batch.is_empty() || sub.send_pending || sub.closing {
            return;
        }
        let mut bytes = 0;
        while sub.batch.len() < MAX_BATCH && bytes < BATCH_BYTES {
            let next = (sub.control.pop_front())
                .or_else(|| sub.imu_queue.pop_front())
                .or_else(|| sub.queue.pop_front());
            match next {
                Some(m) => {
                    bytes += m.len();
                    sub.batch.push(m);
                }
                None => break,
            }
        }
        if sub.batch.is_empty() {
            return;
        }
        sub.written = 0;
        sub.last_progress = now;
        sub.send_pending = true;
        let id = Self::id(slot, sub);
        self.actions.push(Action::Send(id));
    }

    fn arm_recv(&mut self, slot: usize) {
        if let Some(sub) = self.subs[slot].as_mut() {
            sub.recv_pending = true;
            let id = Self::id(slot, sub);
            self.actions.push(Action::Recv(id));
        }
    }

    /// A send completed: `Ok(n)` bytes written (0: the peer is gone), or the error
    /// (`Interrupted` / `WouldBlock` retry the send; anything else disconnects).
    pub(crate) fn on_send(&mut self, id: SubId, now: Instant, res: io::Result<usize>) {
        let slot = id.slot as usize;
        let Some(sub) = sub_mut(&mut self.subs, id) else {
            return;
        };
        sub.send_pending = false;
        if sub.closing {
            self.maybe_release(slot);
            return;
        }
        let n = match res {
            Ok(n) if n > 0 => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                sub.send_pending = true;
                self.actions.push(Action::Send(id));
                return;
            }
            other => {
                match other {
                    Err(e) => log::info!(
                        "publisher: subscriber {slot} ({}): send failed: {e}; disconnecting",
                        sub.peer
                    ),
                    Ok(_) => log::info!(
                        "publisher: subscriber {slot} ({}): sent 0 bytes, disconnecting",
                        sub.peer
                    ),
                }
                self.close(slot);
                return;
            }
        };
        add(&self.counters.bytes_sent, n as u64);
        sub.written += n;
        sub.last_progress = now;
        // Retire the fully sent messages at the front of the batch.
        let mut done = 0;
        while let Some(m) = sub.batch.get(done) {
            if sub.written < m.len() {
                break;
            }
            sub.written -= m.len();
            if m.sensor.is_some() {
                sub.frames_sent += 1;
                add(&self.counters.frames_sent, 1);
            } else if m.imu {
                add(&self.counters.imu_sent, 1);
            }
            done += 1;
        }
        sub.batch.drain(..done); // a frame's last Arc: its buffer goes back to the pool
        if !sub.batch.is_empty() {
            sub.send_pending = true; // partial send: resume
            self.actions.push(Action::Send(id));
        } else if sub.close_after_send && sub.control.is_empty() {
            self.close(slot);
        } else if !sub.control.is_empty() || !sub.queue.is_empty() || !sub.imu_queue.is_empty() {
            self.start_batch(slot, now);
        } else if self.stopping {
            self.close(slot);
        }
    }

    /// A receive completed: `Ok(bytes)` (empty: the peer hung up), or the error (`Interrupted`
    /// / `WouldBlock` re-arm; anything else disconnects).
    pub(crate) fn on_recv(&mut self, id: SubId, now: Instant, res: io::Result<&[u8]>) {
        let slot = id.slot as usize;
        let Some(sub) = sub_mut(&mut self.subs, id) else {
            return;
        };
        sub.recv_pending = false;
        if sub.closing {
            self.maybe_release(slot);
            return;
        }
        let bytes = match res {
            Ok(b) if !b.is_empty() => b,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                self.arm_recv(slot);
                return;
            }
            Ok(_) => {
                log::info!("publisher: subscriber {slot} ({}) hung up", sub.peer);
                self.close(slot);
                return;
            }
            Err(e) => {
                log::info!(
                    "publisher: subscriber {slot} ({}): receive failed: {e}; disconnecting",
                    sub.peer
                );
                self.close(slot);
                return;
            }
        };
        if sub.close_after_send {
            return; // already rejected: ignore further input, stop receiving
        }
        sub.rx_acc.extend_from_slice(bytes);
        loop {
            let Some(sub) = self.subs[slot].as_mut() else {
                return;
            };
            match protocol::parse_header(&sub.rx_acc) {
                Ok(Parsed::Incomplete { .. }) => break,
                Ok(Parsed::Complete {
                    message,
                    header_len,
                    ..
                }) => {
                    sub.rx_acc.drain(..header_len);
                    match message {
                        Message::Subscribe(req) => {
                            if !self.subscribe(slot, req, now) {
                                return;
                            }
                        }
                        other => {
                            let e = ProtocolError::UnexpectedMessage {
                                expected: "subscribe",
                                found: other.kind(),
                            };
                            return self.reject(slot, e.code(), &e.to_string(), now);
                        }
                    }
                }
                Err(e) => return self.reject(slot, e.code(), &e.to_string(), now),
            }
        }
        self.arm_recv(slot);
    }

    /// Applies a subscribe request; `false` if it was rejected.
    fn subscribe(&mut self, slot: usize, req: Subscribe, now: Instant) -> bool {
        let mut ids = Vec::with_capacity(req.sensors.len());
        for name in &req.sensors {
            match self.cfg.sensors.iter().find(|s| &s.name == name) {
                Some(s) => ids.push(s.id),
                None => {
                    let known: Vec<&str> =
                        self.cfg.sensors.iter().map(|s| s.name.as_str()).collect();
                    let reason = format!(
                        "unknown sensor '{name}'; this server has: {}",
                        known.join(", ")
                    );
                    self.reject(slot, error_code::UNKNOWN_SENSOR, &reason, now);
                    return false;
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let all_ids: Vec<u16> = self.cfg.sensors.iter().map(|s| s.id).collect();
        let chosen = if ids.is_empty() { &all_ids } else { &ids };
        // Every field asked must be one of every chosen sensor's layout.
        let mut sets: Vec<FieldSet> = Vec::new();
        for &id in chosen {
            let t = self.point_type_of(id);
            match FieldSet::from_names(t, &req.fields) {
                Ok(f) if !sets.contains(&f) => sets.push(f),
                Ok(_) => {}
                Err(e) => {
                    let name = self.cfg.sensors.iter().find(|s| s.id == id);
                    let reason = format!(
                        "sensor '{}': {e}",
                        name.map_or(String::new(), |s| s.name.clone())
                    );
                    self.reject(slot, error_code::UNKNOWN_FIELD, &reason, now);
                    return false;
                }
            }
        }
        let first = chosen
            .first()
            .map_or(PointType::Autoware, |&id| self.point_type_of(id));
        let ack_fields = sets.first().copied().unwrap_or(FieldSet::all(first));
        let mut ack = Vec::with_capacity(256);
        protocol::encode_subscribed(chosen, ack_fields, !req.no_imu, &mut ack);
        let ack = Outgoing::control(ack, &self.counters);
        let Some(sub) = self.subs[slot].as_mut() else {
            return false;
        };
        let all = || vec!["*".to_string()];
        log::info!(
            "publisher: subscriber {slot} ({}) subscribed to sensors {:?}, fields {:?}",
            sub.peer,
            if req.sensors.is_empty() {
                all()
            } else {
                req.sensors.clone()
            },
            if req.fields.is_empty() {
                all()
            } else {
                req.fields.clone()
            }
        );
        sub.sensors = (!ids.is_empty()).then_some(ids);
        sub.fields = if req.fields.is_empty() {
            Vec::new()
        } else {
            sets
        };
        sub.imu = !req.no_imu;
        // Frames already waiting follow the old choice: drop them; the acknowledgement marks
        // where the new choice starts.
        sub.queue.clear();
        sub.imu_queue.clear();
        sub.control.push_back(ack);
        add(&self.counters.subscriptions, 1);
        self.start_batch(slot, now);
        true
    }

    /// The point layout of sensor `id` (`autoware` when not configured).
    fn point_type_of(&self, id: u16) -> PointType {
        self.cfg
            .point_types
            .iter()
            .find(|(s, _)| *s == id)
            .map_or(PointType::Autoware, |&(_, t)| t)
    }

    /// Logs a protocol violation, queues an error message and closes the connection once it
    /// is sent (or when the stall timeout expires).
    fn reject(&mut self, slot: usize, code: u16, reason: &str, now: Instant) {
        let mut m = Vec::with_capacity(64 + reason.len());
        protocol::encode_error(code, reason, &mut m);
        let m = Outgoing::control(m, &self.counters);
        let Some(sub) = self.subs[slot].as_mut() else {
            return;
        };
        log::warn!(
            "publisher: subscriber {slot} ({}): protocol error {code}: {reason}; disconnecting",
            sub.peer
        );
        add(&self.counters.protocol_errors, 1);
        sub.queue.clear();
        sub.imu_queue.clear();
        sub.control.clear();
        sub.control.push_back(m);
        sub.close_after_send = true;
        sub.rx_acc = Vec::new();
        self.start_batch(slot, now);
    }

    /// Disconnects subscribers whose peer has taken no byte for the stall timeout. Progress is
    /// a completed (partial) send or a shrinking kernel send queue (`outq(sub)`, bytes, from
    /// `SIOCOUTQ`): the kernel wakes a blocked send only once a third of the send buffer is
    /// free, which a slow but live reader of a large buffer may take longer than the timeout
    /// to free.
    pub(crate) fn check_stalls(&mut self, now: Instant, mut outq: impl FnMut(SubId) -> usize) {
        for slot in 0..self.subs.len() {
            let Some(sub) = self.subs[slot].as_mut() else {
                continue;
            };
            if sub.closing || sub.batch.is_empty() {
                continue;
            }
            let q = outq(Self::id(slot, sub));
            if q < sub.outq {
                sub.last_progress = now;
            }
            sub.outq = q;
            if now.duration_since(sub.last_progress) < self.cfg.stall_timeout {
                continue;
            }
            log::warn!(
                "publisher: subscriber {slot} ({}) stalled: took no byte for {:?}; disconnecting ({} frames sent, {} dropped)",
                sub.peer,
                self.cfg.stall_timeout,
                sub.frames_sent,
                sub.dropped
            );
            add(&self.counters.subscribers_stalled, 1);
            self.close(slot);
        }
    }

    /// Stops taking subscribers: idle ones are closed now, busy ones once their queue is sent.
    pub(crate) fn begin_stop(&mut self) {
        self.stopping = true;
        for slot in 0..self.subs.len() {
            if self.subs[slot].as_ref().is_some_and(|s| s.batch.is_empty()) {
                self.close(slot);
            }
        }
    }

    /// Closes every subscriber (the linger time is over).
    pub(crate) fn close_all(&mut self) {
        for slot in 0..self.subs.len() {
            self.close(slot);
        }
    }

    /// Starts removing a subscriber: asks for its socket to be shut down and its operations
    /// cancelled; it is released once they have completed.
    fn close(&mut self, slot: usize) {
        let Some(sub) = self.subs[slot].as_mut() else {
            return;
        };
        if sub.closing {
            return;
        }
        sub.closing = true;
        sub.queue.clear();
        sub.control.clear();
        self.active -= 1;
        self.counters.subscribers.fetch_sub(1, Relaxed);
        add(&self.counters.subscribers_disconnected, 1);
        log::info!(
            "publisher: subscriber {slot} ({}) disconnected: {} frames sent, {} dropped",
            sub.peer,
            sub.frames_sent,
            sub.dropped
        );
        self.actions.push(Action::Close {
            sub: Self::id(slot, sub),
            cancel_send: sub.send_pending,
            cancel_recv: sub.recv_pending,
        });
        self.maybe_release(slot);
    }

    fn maybe_release(&mut self, slot: usize) {
        let Some(sub) = self.subs[slot].as_ref() else {
            return;
        };
        if sub.closing && !sub.send_pending && !sub.recv_pending {
            let id = Self::id(slot, sub);
            self.subs[slot] = None; // drops the batch: buffers back to the pool
            self.free.push(slot);
            self.actions.push(Action::Release(id));
        }
    }

    /// Every live subscriber's counters, in slot order.
    pub(crate) fn subscriber_stats(&self) -> Vec<SubscriberStats> {
        self.subs
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| {
                let s = s.as_ref()?;
                (!s.closing).then(|| SubscriberStats {
                    slot,
                    peer: s.peer.clone(),
                    counters: SubscriberCounters {
                        frames_sent: s.frames_sent,
                        frames_dropped: s.dropped,
                        queued_frames: s.queue.len() as u64,
                    },
                })
            })
            .collect()
    }

    /// Forgets every subscriber without dropping it: for a driver that exits with operations
    /// still in flight, whose kernel side may still read the batches.
    pub(crate) fn leak(&mut self) {
        std::mem::forget(std::mem::take(&mut self.subs));
    }

    /// The shared encoding of the current frame for `fields`, packed on first use.
    fn encoding(&mut self, frame: &SharedFrame, fields: FieldSet) {
        if self.encodings.iter().any(|(f, _)| *f == fields) {
            return;
        }
        let points = frame.points();
        let mut header = Vec::with_capacity(protocol::FRAME_HEADER_LEN);
        protocol::encode_frame_header_fields(
            frame.header(),
            fields,
            points.len() as u32,
            &mut header,
        );
        let mut packed = Vec::with_capacity(points.len() * fields.point_step() as usize);
        fields.pack(points.as_bytes(), &mut packed);
        add(&self.counters.packed_encodings, 1);
        let o = Outgoing::frame(
            header,
            Body::Packed(packed),
            frame.header().sensor_id,
            &self.counters,
            &self.queued,
        );
        self.encodings.push((fields, o));
    }

    /// Encodes an IMU reading of `sensor` once ([`protocol::encode_imu`]) and queues it for
    /// every subscriber that takes `sensor` and IMU messages, dropping its oldest waiting IMU
    /// message past [`IMU_QUEUE_PER_SUBSCRIBER`].
    pub(crate) fn offer_imu(
        &mut self,
        sensor: u16,
        reading: &lidarxdp_core::sensor::ImuReading,
        now: Instant,
    ) {
        let mut msg = None;
        for slot in 0..self.subs.len() {
            let Some(sub) = self.subs[slot]
                .as_mut()
                .filter(|s| s.imu && s.takes(sensor))
            else {
                continue;
            };
            let m = msg.get_or_insert_with(|| {
                let mut header = Vec::with_capacity(protocol::IMU_LEN);
                protocol::encode_imu(sensor, reading, &mut header);
                Outgoing::header_only(header, true, &self.counters)
            });
            if sub.imu_queue.len() >= IMU_QUEUE_PER_SUBSCRIBER {
                sub.imu_queue.pop_front();
                add(&self.counters.imu_dropped_queue_full, 1);
            }
            sub.imu_queue.push_back(m.clone());
            self.start_batch(slot, now);
        }
    }

    /// Queues `out` (a frame of `sensor`) for the subscriber in `slot`, dropping the oldest
    /// frame of the same sensor past `queue_depth` (see the module documentation).
    fn enqueue(&mut self, slot: usize, sensor: u16, out: Arc<Outgoing>, now: Instant) {
        let depth = self.cfg.queue_depth;
        let cap = self.total_cap();
        let Some(sub) = self.subs[slot].as_mut() else {
            return;
        };
        let mut same = sub.queue.iter().filter(|m| m.sensor == Some(sensor));
        let (count, oldest) = match same.next() {
            Some(first) => (1 + same.count(), Some(Arc::as_ptr(first))),
            None => (0, None),
        };
        let victim = if count >= depth {
            oldest
        } else if sub.queue.len() >= cap {
            most_waiting_oldest(&sub.queue)
        } else {
            None
        };
        if let Some(v) = victim
            && let Some(i) = sub.queue.iter().position(|m| Arc::as_ptr(m) == v)
        {
            sub.queue.remove(i);
            sub.dropped += 1;
            add(&self.counters.frames_dropped_queue_full, 1);
        }
        sub.queue.push_back(out);
        let waiting = sub
            .queue
            .iter()
            .filter(|m| m.sensor == Some(sensor))
            .count();
        self.counters
            .queue_high_water
            .fetch_max(waiting as u64, Relaxed);
        self.start_batch(slot, now);
    }
}

/// The subscriber `id` if its slot still holds that generation.
fn sub_mut(subs: &mut [Option<Sub>], id: SubId) -> Option<&mut Sub> {
    subs.get_mut(id.slot as usize)
        .and_then(Option::as_mut)
        .filter(|s| s.generation == id.generation)
}

/// The oldest waiting frame of the sensor with the most frames waiting (ties: the sensor whose
/// oldest frame is the oldest).
fn most_waiting_oldest(queue: &VecDeque<Arc<Outgoing>>) -> Option<*const Outgoing> {
    let mut counts: Vec<(Option<u16>, usize, *const Outgoing)> = Vec::new();
    for m in queue {
        match counts.iter_mut().find(|(s, _, _)| *s == m.sensor) {
            Some(c) => c.1 += 1,
            None => counts.push((m.sensor, 1, Arc::as_ptr(m))),
        }
    }
    // `max_by_key` keeps the last maximum; iterate in reverse so ties go to the oldest.
    counts
        .iter()
        .rev()
        .max_by_key(|(_, n, _)| *n)
        .map(|&(_, _, p)| p)
}

impl FrameSink for Fanout {
    fn name(&self) -> &str {
        "tcp"
    }

    /// Encodes the frame once per distinct field set among the subscribers that take its
    /// sensor (the all-fields encoding shares the decoder's buffer) and queues it for each.
    /// A frame with more than [`MAX_POINT_COUNT`] points is dropped and counted.
    fn offer(&mut self, frame: &Arc<SharedFrame>, now: Instant) {
        let points = frame.points().len();
        if points > MAX_POINT_COUNT as usize {
            add(&self.counters.frames_dropped_too_large, 1);
            log::warn!(
                "publisher: dropping frame seq {} with {points} points (> {MAX_POINT_COUNT})",
                frame.header().sequence,
            );
            return;
        }
        let sensor = frame.header().sensor_id;
        let point_type = frame.points().point_type();
        self.encodings.clear();
        let mut wants_all = false;
        for slot in 0..self.subs.len() {
            let fields = match self.subs[slot].as_ref() {
                Some(sub) if sub.takes(sensor) => sub.fields_of(point_type),
                _ => continue,
            };
            if fields.is_all() {
                wants_all = true;
            } else {
                self.encoding(frame, fields);
            }
        }
        if wants_all {
            let msg_len = protocol::FRAME_HEADER_LEN + points * point_type.point_step();
            if self.sndbuf > 0 && msg_len > self.sndbuf && self.sndbuf < MAX_SNDBUF {
                self.sndbuf = msg_len.next_power_of_two().min(MAX_SNDBUF);
                for (slot, s) in self.subs.iter().enumerate() {
                    if let Some(s) = s.as_ref().filter(|s| !s.closing) {
                        self.actions
                            .push(Action::SetSndbuf(Self::id(slot, s), self.sndbuf));
                    }
                }
            }
            let mut header = Vec::with_capacity(protocol::FRAME_HEADER_LEN);
            protocol::encode_frame_header(frame.header(), point_type, points as u32, &mut header);
            let o = Outgoing::frame(
                header,
                Body::Points(frame.clone()),
                sensor,
                &self.counters,
                &self.queued,
            );
            self.encodings.push((FieldSet::all(point_type), o));
        }
        for slot in 0..self.subs.len() {
            let out = match self.subs[slot].as_ref() {
                Some(sub) if sub.takes(sensor) => self
                    .encodings
                    .iter()
                    .find(|(f, _)| *f == sub.fields_of(point_type))
                    .map(|(_, o)| o.clone()),
                _ => None,
            };
            if let Some(out) = out {
                self.enqueue(slot, sensor, out, now);
            }
        }
        self.encodings.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::BufferPool;
    use lidarxdp_core::frame::{Frame, FrameHeader};
    use lidarxdp_core::layout::PointType;
    use lidarxdp_core::point::PointXYZIRCAEDT;

    const DEPTH: usize = 3;

    /// A fan-out with `sensors` announced sensors (ids 0..sensors, names `s0`, `s1`, ...).
    struct Rig {
        f: Fanout,
        counters: Arc<Counters>,
        pool: Arc<BufferPool>,
        t0: Instant,
        actions: Vec<Action>,
    }

    impl Rig {
        fn new(depth: usize, sensors: u16) -> Rig {
            let counters = Arc::new(Counters::default());
            let cfg = FanoutConfig {
                max_subscribers: 4,
                queue_depth: depth,
                stall_timeout: Duration::from_secs(5),
                sndbuf: 0,
                sensors: (0..sensors)
                    .map(|id| SensorEntry {
                        id,
                        name: format!("s{id}"),
                        model: "VLP16".into(),
                    })
                    .collect(),
                point_types: Vec::new(),
            };
            Rig {
                f: Fanout::new(cfg, counters.clone()),
                counters,
                pool: Arc::new(BufferPool::new(64)),
                t0: Instant::now(),
                actions: Vec::new(),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        fn take(&mut self) -> Vec<Action> {
            self.f.drain_actions(&mut self.actions);
            std::mem::take(&mut self.actions)
        }

        /// Connects a subscriber and lets it receive the hello.
        fn connect(&mut self) -> SubId {
            let id = self.f.accept(self.t0, 1, "peer".into()).unwrap();
            assert_eq!(self.take(), [Action::Send(id), Action::Recv(id)]);
            let hello = self.unsent_len(id);
            self.f.on_send(id, self.t0, Ok(hello));
            assert_eq!(self.take(), []);
            id
        }

        fn unsent_len(&self, id: SubId) -> usize {
            self.f.unsent(id).map(<[u8]>::len).sum()
        }

        /// A frame of `sensor` with `points` points in a buffer of that capacity.
        fn frame(&self, sensor: u16, seq: u64, points: usize) -> Arc<SharedFrame> {
            let mut v = Vec::with_capacity(points);
            v.resize(
                points,
                PointXYZIRCAEDT {
                    x: seq as f32,
                    ..Default::default()
                },
            );
            SharedFrame::new(
                Frame {
                    header: FrameHeader {
                        sensor_id: sensor,
                        sequence: seq,
                        ..Default::default()
                    },
                    points: v.into(),
                },
                self.pool.clone(),
            )
        }

        fn offer(&mut self, sensor: u16, seq: u64, points: usize) {
            let f = self.frame(sensor, seq, points);
            self.f.offer(&f, self.t0);
        }

        /// Completes the subscriber's in-flight send in full; returns the `(sensor, sequence)`
        /// of the frames it carried.
        fn complete(&mut self, id: SubId) -> Vec<(u16, u64)> {
            let bytes: Vec<u8> = self.f.unsent(id).flatten().copied().collect();
            self.f.on_send(id, self.t0, Ok(bytes.len()));
            frames_in(&bytes)
        }

        /// Completes sends until the subscriber has nothing left; every frame sent, in order.
        fn drain(&mut self, id: SubId) -> Vec<(u16, u64)> {
            let mut got = Vec::new();
            while self.unsent_len(id) > 0 {
                got.extend(self.complete(id));
            }
            self.take();
            got
        }

        fn queued(&self, id: SubId) -> Vec<(u16, u64)> {
            let sub = self.f.subs[id.slot as usize].as_ref().unwrap();
            sub.queue.iter().map(|m| frames_in(&m.header)[0]).collect()
        }
    }

    /// The `(sensor, sequence)` of every frame message in `bytes` (whole messages).
    fn frames_in(mut bytes: &[u8]) -> Vec<(u16, u64)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            match protocol::parse_header(bytes).unwrap() {
                Parsed::Complete {
                    message,
                    header_len,
                    payload_len,
                } => {
                    if let Message::Frame(f) = message {
                        out.push((f.header.sensor_id, f.header.sequence));
                    }
                    bytes = &bytes[(header_len + payload_len).min(bytes.len())..];
                }
                Parsed::Incomplete { .. } => break,
            }
        }
        out
    }

    fn subscribe_bytes(sensors: &[&str], fields: &[&str]) -> Vec<u8> {
        let mut v = Vec::new();
        protocol::encode_subscribe(
            &Subscribe {
                sensors: sensors.iter().map(|s| (*s).into()).collect(),
                fields: fields.iter().map(|s| (*s).into()).collect(),
                ..Subscribe::default()
            },
            &mut v,
        );
        v
    }

    #[test]
    fn accept_queues_the_hello_and_arms_a_receive() {
        let mut r = Rig::new(DEPTH, 2);
        let id = r.f.accept(r.t0, 42, "10.0.0.1:5000".into()).unwrap();
        assert_eq!(
            id,
            SubId {
                slot: 0,
                generation: 1
            }
        );
        assert_eq!(r.take(), [Action::Send(id), Action::Recv(id)]);
        let hello: Vec<u8> = r.f.unsent(id).flatten().copied().collect();
        match protocol::parse_header(&hello).unwrap() {
            Parsed::Complete {
                message: Message::Hello(h),
                header_len,
                ..
            } => {
                assert_eq!(header_len, hello.len());
                assert_eq!(
                    (h.queue_depth, h.max_subscribers, h.server_time_ns),
                    (3, 4, 42)
                );
                assert_eq!(h.sensors.len(), 2);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.counters.subscribers.load(Relaxed), 1);
        assert_eq!(r.counters.subscribers_accepted.load(Relaxed), 1);
    }

    #[test]
    fn subscribers_over_the_limit_are_rejected_and_slots_reused() {
        let mut r = Rig::new(DEPTH, 1);
        let ids: Vec<SubId> = (0..4).map(|_| r.connect()).collect();
        assert_eq!(r.f.accept(r.t0, 0, "fifth".into()), None);
        assert_eq!(r.counters.subscribers_rejected.load(Relaxed), 1);
        // A hang-up frees slot 1 once its receive completed; the next subscriber takes it
        // with a new generation.
        r.f.on_recv(ids[1], r.t0, Ok(&[]));
        let closed = Action::Close {
            sub: ids[1],
            cancel_send: false,
            cancel_recv: false,
        };
        assert_eq!(r.take(), [closed, Action::Release(ids[1])]);
        let again = r.f.accept(r.t0, 0, "again".into()).unwrap();
        assert_eq!(
            again,
            SubId {
                slot: 1,
                generation: 5
            }
        );
        // A completion for the old generation is ignored.
        r.take();
        r.f.on_send(ids[1], r.t0, Ok(1));
        assert_eq!(r.take(), []);
        assert_eq!(r.f.active(), 4);
    }

    #[test]
    fn partial_writes_advance_through_the_header_and_payload_iovecs() {
        let mut r = Rig::new(DEPTH, 1);
        let id = r.connect();
        let before = r.counters.bytes_sent.load(Relaxed);
        r.offer(0, 9, 10); // header 232 B + payload 320 B
        assert_eq!(r.take(), [Action::Send(id)]);
        let lens = |r: &Rig| r.f.unsent(id).map(<[u8]>::len).collect::<Vec<_>>();
        assert_eq!(lens(&r), [232, 320]);
        r.f.on_send(id, r.t0, Ok(100));
        assert_eq!(r.take(), [Action::Send(id)], "partial: resume");
        assert_eq!(lens(&r), [132, 320]);
        r.f.on_send(id, r.t0, Ok(132));
        r.take();
        assert_eq!(lens(&r), [320]);
        r.f.on_send(id, r.t0, Ok(300));
        r.take();
        assert_eq!(lens(&r), [20]);
        // The resumed iovec is the tail of the payload: the last 20 bytes of point 9.
        let tail: Vec<u8> = r.f.unsent(id).flatten().copied().collect();
        let p = PointXYZIRCAEDT {
            x: 9.0,
            ..Default::default()
        };
        assert_eq!(tail, bytemuck::bytes_of(&p)[12..]);
        assert_eq!(r.counters.frames_sent.load(Relaxed), 0);
        // A retryable error resubmits without losing the position.
        r.f.on_send(id, r.t0, Err(io::ErrorKind::WouldBlock.into()));
        assert_eq!(r.take(), [Action::Send(id)]);
        assert_eq!(lens(&r), [20]);
        r.f.on_send(id, r.t0, Ok(20));
        assert_eq!(r.take(), []);
        assert_eq!(r.counters.frames_sent.load(Relaxed), 1);
        assert_eq!(r.counters.bytes_sent.load(Relaxed) - before, 552);
    }

    #[test]
    fn small_messages_are_batched_up_to_max_batch() {
        let mut r = Rig::new(8, 1);
        let id = r.connect();
        r.offer(0, 0, 1); // starts a batch of one
        r.take();
        for seq in 1..7 {
            r.offer(0, seq, 1);
        }
        assert_eq!(r.take(), []);
        assert_eq!(r.complete(id), [(0, 0)]);
        assert_eq!(r.take(), [Action::Send(id)]);
        assert_eq!(r.f.unsent(id).count(), 2 * MAX_BATCH);
        assert_eq!(r.complete(id), [(0, 1), (0, 2), (0, 3), (0, 4)]);
        r.take();
        assert_eq!(r.complete(id), [(0, 5), (0, 6)]);
    }

    #[test]
    fn a_full_queue_drops_the_oldest_frame_of_that_sensor() {
        let mut r = Rig::new(DEPTH, 1);
        let id = r.connect();
        r.offer(0, 0, 40_000); // in flight: 1.28 MB, a batch of its own
        for seq in 1..=5 {
            r.offer(0, seq, 40_000);
        }
        assert_eq!(r.queued(id), [(0, 3), (0, 4), (0, 5)]);
        assert_eq!(r.counters.frames_dropped_queue_full.load(Relaxed), 2);
        assert_eq!(r.counters.queue_high_water.load(Relaxed), 3);
        assert_eq!(r.f.subscriber_stats()[0].counters.frames_dropped, 2);
        assert_eq!(r.f.subscriber_stats()[0].counters.queued_frames, 3);
        // The TCP sink's queue bytes: the frame in flight and the three waiting, header and
        // points (32 bytes each); the two dropped ones are gone.
        let message = (protocol::FRAME_HEADER_LEN + 40_000 * 32) as u64;
        assert_eq!(r.f.queue_bytes().get(), 4 * message);
        assert_eq!(r.drain(id), [(0, 0), (0, 3), (0, 4), (0, 5)]);
        assert_eq!(r.f.queue_bytes().get(), 0);
    }

    #[test]
    fn a_burst_of_ten_sensors_is_delivered_whole_at_depth_3() {
        // Every sensor completes a frame at the same cut: ten 30,000-point frames in one
        // burst, each a batch of its own. A subscriber that keeps up gets all of them, in
        // arrival order, cut after cut.
        let mut r = Rig::new(DEPTH, 10);
        let id = r.connect();
        let mut want = Vec::new();
        for cut in 0..5 {
            for sensor in 0..10 {
                r.offer(sensor, cut, 30_000);
                want.push((sensor, cut));
            }
            let got = r.drain(id);
            assert_eq!(got, want[want.len() - 10..]);
        }
        assert_eq!(r.counters.frames_dropped_queue_full.load(Relaxed), 0);
        assert_eq!(r.counters.frames_sent.load(Relaxed), 50);
        assert_eq!(r.counters.queue_high_water.load(Relaxed), 1);
    }

    #[test]
    fn a_slow_subscriber_drops_per_sensor_keeping_each_sensors_newest() {
        let mut r = Rig::new(DEPTH, 10);
        let fast = r.connect();
        let slow = r.connect();
        r.take();
        for cut in 0..5u64 {
            for sensor in 0..10 {
                r.offer(sensor, cut, 30_000);
            }
            r.drain(fast);
        }
        // The slow one still has (0, 0) in flight; of the 49 frames after it, each sensor
        // keeps its 3 newest: cuts 2, 3, 4 (sensor 0's cut 1 was dropped too).
        let mut want = Vec::new();
        for cut in 2..5 {
            for sensor in 0..10 {
                want.push((sensor, cut));
            }
        }
        assert_eq!(r.queued(slow), want);
        assert_eq!(r.f.subscriber_stats()[1].counters.frames_dropped, 49 - 30);
        assert_eq!(r.f.subscriber_stats()[0].counters.frames_dropped, 0);
        assert_eq!(r.counters.frames_dropped_queue_full.load(Relaxed), 19);
        assert_eq!(r.counters.queue_high_water.load(Relaxed), 3);
        assert_eq!(r.complete(slow), [(0, 0)]);
        let mut rest = vec![(0, 0)];
        rest.extend(r.drain(slow));
        assert_eq!(rest[1..], want[..]);
    }

    #[test]
    fn unannounced_sensors_share_the_total_bound_fairly() {
        // No sensor announced: the total bound is DEPTH frames; the sensor with the most
        // frames waiting loses its oldest first.
        let mut r = Rig::new(DEPTH, 0);
        let id = r.connect();
        r.offer(7, 0, 40_000); // in flight
        r.offer(7, 1, 10);
        r.offer(7, 2, 10);
        r.offer(8, 0, 10); // total 3 = bound
        assert_eq!(r.queued(id), [(7, 1), (7, 2), (8, 0)]);
        r.offer(9, 0, 10); // sensor 7 has the most: its oldest goes
        assert_eq!(r.queued(id), [(7, 2), (8, 0), (9, 0)]);
        r.offer(8, 1, 10); // a tie of one each: the oldest sensor's frame goes
        assert_eq!(r.queued(id), [(8, 0), (9, 0), (8, 1)]);
        assert_eq!(r.counters.frames_dropped_queue_full.load(Relaxed), 2);
    }

    #[test]
    fn buffers_return_to_the_pool_when_every_subscriber_is_done() {
        let mut r = Rig::new(DEPTH, 1);
        let a = r.connect();
        let b = r.connect();
        r.take();
        r.offer(0, 0, 500);
        assert_eq!(r.counters.frames_alive.load(Relaxed), 1);
        assert_eq!(r.complete(a), [(0, 0)]);
        assert_eq!(r.pool.len(), 0, "b still sends it");
        // b takes it in two parts.
        r.f.on_send(b, r.t0, Ok(1000));
        assert_eq!(r.pool.len(), 0);
        let rest = r.unsent_len(b);
        r.f.on_send(b, r.t0, Ok(rest));
        assert_eq!(r.pool.len(), 1);
        assert_eq!(r.pool.take().unwrap().capacity(), 500);
        assert_eq!(r.counters.frames_alive.load(Relaxed), 0);
        assert_eq!(r.counters.frames_alive_high_water.load(Relaxed), 1);
        // Nobody wants it: straight back.
        let mut r = Rig::new(DEPTH, 1);
        r.offer(0, 1, 64);
        assert_eq!(r.pool.counters().returned, 1);
        // A dropped frame goes back as soon as it is dropped.
        let mut r = Rig::new(1, 1);
        let id = r.connect();
        r.offer(0, 0, 40_000);
        r.offer(0, 1, 64);
        r.offer(0, 2, 64);
        assert_eq!(r.queued(id), [(0, 2)]);
        assert_eq!(r.pool.take().unwrap().capacity(), 64);
    }

    #[test]
    fn a_closed_subscriber_is_released_only_after_its_operations_complete() {
        let mut r = Rig::new(DEPTH, 1);
        let id = r.connect();
        r.offer(0, 0, 40_000);
        r.take();
        r.f.on_send(id, r.t0, Err(io::Error::from_raw_os_error(libc::EPIPE)));
        // The send completed (with an error); the receive is still in flight.
        assert_eq!(
            r.take(),
            [Action::Close {
                sub: id,
                cancel_send: false,
                cancel_recv: true
            }]
        );
        assert_eq!(r.pool.len(), 0);
        r.f.on_recv(id, r.t0, Err(io::Error::from_raw_os_error(libc::ECANCELED)));
        assert_eq!(r.take(), [Action::Release(id)]);
        assert_eq!(r.pool.len(), 1, "the batch is freed with the subscriber");
        assert_eq!(r.counters.subscribers.load(Relaxed), 0);
        assert_eq!(r.counters.subscribers_disconnected.load(Relaxed), 1);
    }

    #[test]
    fn a_subscriber_that_takes_no_byte_is_cut_off_after_the_stall_timeout() {
        let mut r = Rig::new(DEPTH, 1);
        let id = r.connect();
        r.offer(0, 0, 100_000);
        r.take();
        // The kernel's send queue shrinks at 3 s: progress.
        r.f.check_stalls(r.at(1000), |_| 500_000);
        r.f.check_stalls(r.at(3000), |_| 400_000);
        r.f.check_stalls(r.at(7999), |_| 400_000);
        assert_eq!(r.take(), []);
        r.f.check_stalls(r.at(8000), |_| 400_000);
        assert_eq!(
            r.take(),
            [Action::Close {
                sub: id,
                cancel_send: true,
                cancel_recv: true
            }]
        );
        assert_eq!(r.counters.subscribers_stalled.load(Relaxed), 1);
        r.f.on_send(
            id,
            r.at(8001),
            Err(io::Error::from_raw_os_error(libc::ECANCELED)),
        );
        assert_eq!(r.take(), []);
        r.f.on_recv(
            id,
            r.at(8001),
            Err(io::Error::from_raw_os_error(libc::ECANCELED)),
        );
        assert_eq!(r.take(), [Action::Release(id)]);
        // An idle subscriber (nothing to send) never stalls.
        let idle = r.connect();
        r.f.check_stalls(r.at(60_000), |_| 0);
        assert_eq!(r.take(), []);
        assert_eq!(r.f.subscriber_stats()[0].slot, idle.slot as usize);
    }

    /// Every whole message in `bytes` as `frame S:SEQ` or `imu S:GYRO_TS`.
    fn kinds_in(mut bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(Parsed::Complete {
            message,
            header_len,
            payload_len,
        }) = protocol::parse_header(bytes)
        {
            match message {
                Message::Frame(f) => out.push(format!(
                    "frame {}:{}",
                    f.header.sensor_id, f.header.sequence
                )),
                Message::Imu(m) => out.push(format!(
                    "imu {}:{}",
                    m.sensor_id, m.reading.sample.gyro_ts_ns
                )),
                other => out.push(other.kind().to_owned()),
            }
            bytes = &bytes[(header_len + payload_len).min(bytes.len())..];
        }
        out
    }

    fn imu_reading(gyro_ts_ns: u64) -> lidarxdp_core::sensor::ImuReading {
        let mut sample = lidarxdp_core::sensor::ouster::imu::parse(&[0; 48]).unwrap();
        sample.gyro_ts_ns = gyro_ts_ns;
        lidarxdp_core::sensor::ImuReading {
            sample,
            stamp_ns: gyro_ts_ns,
            host_ns: gyro_ts_ns + 1,
            clock: lidarxdp_core::frame::FrameClock::Sensor,
        }
    }

    /// Sends everything the subscriber has, batch by batch; the messages, in order.
    fn drain_kinds(r: &mut Rig, id: SubId) -> Vec<String> {
        let mut got = Vec::new();
        while r.unsent_len(id) > 0 {
            let bytes: Vec<u8> = r.f.unsent(id).flatten().copied().collect();
            r.f.on_send(id, r.t0, Ok(bytes.len()));
            got.extend(kinds_in(&bytes));
        }
        r.take();
        got
    }

    /// An IMU reading reaches each subscriber of its sensor that did not opt out (`flags`
    /// bit 0), encoded once, ahead of the frames waiting; at most 64 wait per subscriber.
    #[test]
    fn imu_reaches_subscribers_that_take_it_ahead_of_waiting_frames() {
        let mut r = Rig::new(DEPTH, 2);
        let all = r.connect();
        let (quiet, other) = (r.connect(), r.connect());
        for (id, req) in [
            (quiet, {
                let mut v = Vec::new();
                protocol::encode_subscribe(
                    &Subscribe {
                        no_imu: true,
                        ..Subscribe::default()
                    },
                    &mut v,
                );
                v
            }),
            (other, subscribe_bytes(&["s1"], &[])),
        ] {
            r.f.on_recv(id, r.t0, Ok(&req));
            r.take();
            let ack: Vec<u8> = r.f.unsent(id).flatten().copied().collect();
            match protocol::parse_header(&ack).unwrap() {
                Parsed::Complete {
                    message: Message::Subscribed(a),
                    ..
                } => assert_eq!(a.imu, id == other),
                x => panic!("{x:?}"),
            }
            r.complete(id);
        }
        r.take();
        r.offer(0, 0, 10); // in flight at once
        r.offer(0, 1, 10); // waits
        r.f.offer_imu(0, &imu_reading(5), r.t0);
        assert_eq!(
            drain_kinds(&mut r, all),
            ["frame 0:0", "imu 0:5", "frame 0:1"]
        );
        assert_eq!(drain_kinds(&mut r, quiet), ["frame 0:0", "frame 0:1"]);
        assert_eq!(drain_kinds(&mut r, other), Vec::<String>::new());
        assert_eq!(r.counters.imu_sent.load(Relaxed), 1);
        assert_eq!(r.counters.frames_sent.load(Relaxed), 4);

        // A subscriber that does not read: 70 readings, the oldest 6 dropped.
        r.offer(0, 2, 10);
        for t in 0..70 {
            r.f.offer_imu(0, &imu_reading(100 + t), r.t0);
        }
        assert_eq!(
            r.counters.imu_dropped_queue_full.load(Relaxed),
            6,
            "only `all` takes IMU readings of sensor 0"
        );
        let got = drain_kinds(&mut r, all);
        assert_eq!(got.len(), 1 + IMU_QUEUE_PER_SUBSCRIBER);
        assert_eq!(got[0], "frame 0:2");
        assert_eq!(got[1], "imu 0:106");
        assert_eq!(got[64], "imu 0:169");
    }

    #[test]
    fn subscribe_chooses_sensors_and_fields_and_packs_once_per_field_set() {
        let mut r = Rig::new(DEPTH, 3);
        let all = r.connect();
        let a = r.connect();
        let b = r.connect();
        r.take();
        let req = subscribe_bytes(&["s2"], &["x", "z"]);
        // Split over two receives: the first half is incomplete.
        r.f.on_recv(a, r.t0, Ok(&req[..10]));
        assert_eq!(r.take(), [Action::Recv(a)]);
        r.f.on_recv(a, r.t0, Ok(&req[10..]));
        assert_eq!(r.take(), [Action::Send(a), Action::Recv(a)]);
        let ack: Vec<u8> = r.f.unsent(a).flatten().copied().collect();
        match protocol::parse_header(&ack).unwrap() {
            Parsed::Complete {
                message: Message::Subscribed(s),
                ..
            } => assert_eq!((s.sensor_ids, s.point_step), (vec![2], 8)),
            other => panic!("{other:?}"),
        }
        r.complete(a);
        r.f.on_recv(b, r.t0, Ok(&req));
        r.take();
        r.complete(b);
        r.take();
        assert_eq!(r.counters.subscriptions.load(Relaxed), 2);
        r.offer(1, 0, 100);
        r.offer(2, 0, 100);
        assert_eq!(r.counters.packed_encodings.load(Relaxed), 1);
        assert_eq!(r.drain(all), [(1, 0), (2, 0)]);
        let lens: Vec<usize> = r.f.unsent(a).map(<[u8]>::len).collect();
        assert_eq!(lens[1], 100 * 8, "x and z: 8 bytes per point");
        assert_eq!(r.drain(a), [(2, 0)]);
        assert_eq!(r.drain(b), [(2, 0)]);
    }

    #[test]
    fn protocol_errors_are_answered_then_closed() {
        for (bytes, code) in [
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), error_code::MALFORMED),
            (subscribe_bytes(&["rear"], &[]), error_code::UNKNOWN_SENSOR),
            (subscribe_bytes(&[], &["colour"]), error_code::UNKNOWN_FIELD),
        ] {
            let mut r = Rig::new(DEPTH, 1);
            let id = r.connect();
            r.f.on_recv(id, r.t0, Ok(&bytes));
            assert_eq!(r.take(), [Action::Send(id)], "no receive re-armed");
            let msg: Vec<u8> = r.f.unsent(id).flatten().copied().collect();
            match protocol::parse_header(&msg).unwrap() {
                Parsed::Complete {
                    message: Message::Error(e),
                    ..
                } => assert_eq!(e.code, code, "{}", e.reason),
                other => panic!("{other:?}"),
            }
            // No frame follows the error.
            r.offer(0, 0, 10);
            assert_eq!(r.take(), []);
            r.f.on_send(id, r.t0, Ok(msg.len()));
            assert_eq!(
                r.take(),
                [
                    Action::Close {
                        sub: id,
                        cancel_send: false,
                        cancel_recv: false
                    },
                    Action::Release(id)
                ]
            );
            assert_eq!(r.counters.protocol_errors.load(Relaxed), 1);
        }
    }

    /// A frame of sensor `sensor` in layout `t` with `points` points.
    fn frame_as(r: &Rig, sensor: u16, t: PointType, points: usize) -> Arc<SharedFrame> {
        let mut b = lidarxdp_core::point_buf::PointBuf::with_type(t, points);
        b.extend((0..points).map(|i| PointXYZIRCAEDT {
            x: i as f32,
            intensity: 7,
            channel: 3,
            time_stamp: 1_000,
            ..Default::default()
        }));
        SharedFrame::new(
            Frame {
                header: FrameHeader {
                    sensor_id: sensor,
                    ..Default::default()
                },
                points: b,
            },
            r.pool.clone(),
        )
    }

    /// Each sensor's frames go out in its own layout: the whole layout from the decoder's
    /// buffer, a field subset packed from it; a field one chosen sensor's layout lacks is
    /// refused with UNKNOWN_FIELD naming the sensor, its layout and its fields.
    #[test]
    fn frames_carry_their_sensors_layout() {
        let mut r = Rig::new(DEPTH, 2);
        r.f.cfg.point_types = vec![(1, PointType::Velodyne)];
        // All fields of both sensors.
        let all = r.connect();
        // `x,intensity` exists in both layouts (u8 in autoware, f32 in velodyne).
        let sub = r.connect();
        r.f.on_recv(sub, r.t0, Ok(&subscribe_bytes(&[], &["x", "intensity"])));
        r.drain(sub);
        r.f.offer(&frame_as(&r, 1, PointType::Velodyne, 3), r.t0);
        assert_eq!(r.take(), [Action::Send(all), Action::Send(sub)]);
        let bytes: Vec<u8> = r.f.unsent(all).flatten().copied().collect();
        let Parsed::Complete {
            message: Message::Frame(info),
            header_len,
            payload_len,
        } = protocol::parse_header(&bytes).unwrap()
        else {
            panic!("a frame message");
        };
        assert_eq!(info.point_type(), Some(PointType::Velodyne));
        assert_eq!((info.point_step, payload_len), (22, 66));
        // Point 2: x 2.0, intensity 7.0, ring 3, time 1 µs.
        let p = &bytes[header_len + 44..header_len + 66];
        assert_eq!(&p[0..4], &2.0f32.to_le_bytes());
        assert_eq!(&p[12..16], &7.0f32.to_le_bytes());
        assert_eq!(&p[16..18], &[3, 0]);
        assert_eq!(&p[18..22], &1e-6f32.to_le_bytes());
        let packed: Vec<u8> = r.f.unsent(sub).flatten().copied().collect();
        let Parsed::Complete {
            message: Message::Frame(info),
            header_len,
            ..
        } = protocol::parse_header(&packed).unwrap()
        else {
            panic!("a frame message");
        };
        let f: Vec<(String, u32, u8)> = info
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.offset, f.datatype))
            .collect();
        assert_eq!(f, [("x".into(), 0, 7), ("intensity".into(), 4, 7)]);
        assert_eq!(
            &packed[header_len + 16..header_len + 24],
            &[0, 0, 0, 0x40, 0, 0, 0xe0, 0x40]
        );
        // `ring` is velodyne's, not autoware's: refused for all sensors, accepted for s1.
        let bad = r.connect();
        r.f.on_recv(bad, r.t0, Ok(&subscribe_bytes(&[], &["ring"])));
        assert_eq!(r.take(), [Action::Send(bad)]);
        let msg: Vec<u8> = r.f.unsent(bad).flatten().copied().collect();
        match protocol::parse_header(&msg).unwrap() {
            Parsed::Complete {
                message: Message::Error(e),
                ..
            } => {
                assert_eq!(e.code, error_code::UNKNOWN_FIELD);
                assert_eq!(
                    e.reason,
                    "sensor 's0': unknown field 'ring' for point_type autoware; valid: x, y, \
                     z, intensity, return_type, channel, azimuth, elevation, distance, \
                     time_stamp"
                );
            }
            other => panic!("{other:?}"),
        }
        let ok = r.connect();
        r.f.on_recv(ok, r.t0, Ok(&subscribe_bytes(&["s1"], &["ring"])));
        let ack: Vec<u8> = r.f.unsent(ok).flatten().copied().collect();
        assert!(matches!(
            protocol::parse_header(&ack).unwrap(),
            Parsed::Complete {
                message: Message::Subscribed(_),
                ..
            }
        ));
    }

    #[test]
    fn too_large_frames_are_dropped_and_counted() {
        let mut r = Rig::new(DEPTH, 1);
        let id = r.connect();
        r.offer(0, 0, MAX_POINT_COUNT as usize + 1);
        assert_eq!(r.take(), []);
        assert_eq!(r.queued(id), []);
        assert_eq!(r.counters.frames_dropped_too_large.load(Relaxed), 1);
        assert_eq!(r.pool.counters().returned, 1);
    }

    #[test]
    fn stopping_closes_idle_subscribers_now_and_busy_ones_when_sent() {
        let mut r = Rig::new(DEPTH, 1);
        let idle = r.connect();
        let busy = r.connect();
        r.offer(0, 0, 10);
        assert_eq!(r.complete(idle), [(0, 0)]);
        r.take();
        r.f.begin_stop();
        let closed = |sub| Action::Close {
            sub,
            cancel_send: false,
            cancel_recv: true,
        };
        assert_eq!(r.take(), [closed(idle)]);
        assert_eq!(r.f.active(), 1);
        assert_eq!(r.f.accept(r.t0, 0, "late".into()), None);
        assert_eq!(r.complete(busy), [(0, 0)]);
        assert_eq!(r.take(), [closed(busy)]);
        assert_eq!(r.f.active(), 0);
        assert!(r.f.has_subscribers(), "receives still in flight");
    }
}
