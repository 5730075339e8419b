//! The daemon's counters as Prometheus text exposition (format 0.0.4) and as the stats JSON,
//! both derived from the counter descriptors ([`lidarxdp_core::counters`]), sans-IO.
//!
//! A [`Snapshot`] (plain numbers gathered by `lidarxdp run` from the XDP program's maps, the
//! capture threads' atomics and the publisher) is walked with [`Snapshot::visit`], which yields
//! every counter once as `(scope, descriptor, value)`. [`render`] writes the walk as the text
//! served at `GET /metrics` (one family per descriptor, `# HELP` and `# TYPE` first; counters
//! end in `_total`); [`Snapshot::to_json`] writes the same walk as the stats JSON (`lidarxdp
//! run --stats-json`, the 10 s log line); [`parse`] reads exposition text back and [`table`]
//! prints it (`lidarxdp stats`).
//!
//! Scopes and their labels: daemon-wide (none: `xdp`, `publisher`, `publisher_pool`, the
//! sinks' groups, `process`); per queue `iface`, `queue` (`xsk`, `capture`, `reassembly`); per
//! sensor `sensor` (id) and `model` (`sensor`, and the vendor decoders' `ouster`, `velodyne`,
//! `robosense`); per sink `sink` (`sink`: each sink's queue); per subscriber `subscriber`
//! (slot) and `peer`.
//!
//! Memory (issue 40: a week-long run stays flat), where each number comes from:
//! - `lidarxdp_process_{resident_bytes,heap_bytes,heap_free_bytes,jemalloc_resident_bytes,threads,open_fds}`
//!   ([`crate::process::ProcessGauges`]): `VmRSS` of `/proc/self/status`; glibc's
//!   `mallinfo2(3)` `uordblks + hblkhd` (in use) and `fordblks` (held free); the entries of
//!   `/proc/self/task` and `/proc/self/fd`. Sampled when the snapshot is taken (a scrape, the
//!   10 s log tick, exit), never on the packet or frame path;
//! - `lidarxdp_zenoh_shm_pool_{used,free}_bytes` (zenoh sink on): the pool's chunks still
//!   referenced, counted by our wrapper of zenoh's backend after a garbage collection
//!   ([`crate::ros2_zenoh::ShmPool::usage`]; zenoh's POSIX backend reports no free bytes);
//! - `lidarxdp_sink_queue_bytes{sink}` ([`crate::publish::SinkQueueCounters`]): point bytes of
//!   the frames waiting in each sink's queue, an atomic added to on enqueue and taken off on
//!   dequeue (`zenoh`, `dds`, `foxglove`: their sink thread's queue,
//!   [`crate::publish::SinkThread`]; `tcp`: the frame messages the fan-out holds for its
//!   subscribers, queued or being sent, each encoding once). The live view keeps no queue (it
//!   reads each frame on the publisher thread) and the recording queues packets, not frames:
//!   neither has a sample.
use std::{collections::HashMap, fmt::Write};

use serde_json::{Map, Value};

use crate::{
    capture::{CaptureSnapshot, SensorTraffic},
    loader::ProgramCounters,
    process::ProcessGauges,
    publish::{
        PoolCounters, PublisherCounters, SinkQueueCounters, SubscriberCounters, SubscriberStats,
    },
    xsk::{XdpStatistics, XskCountersSnapshot},
};
use lidarxdp_core::{
    counters::{CounterDesc, CounterSet},
    reassembly::ReassemblyCounters,
    sensor::DecodeCounters,
};

/// One sensor's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SensorSnapshot {
    /// Sensor id (as in the subscriber protocol).
    pub id: u16,
    /// The sensor's name (`--name`, `name` in `[[sensors]]`): the `sensor` label.
    pub name: String,
    /// Model name, e.g. `VLP16`.
    pub model: String,
    /// The pipeline's counters.
    pub decode: DecodeCounters,
    /// The capture thread's bytes and reassembled datagrams of this sensor.
    pub traffic: SensorTraffic,
    /// The vendor decoder's own counters, with their descriptors
    /// ([`lidarxdp_core::sensor::ScanPipeline::vendor_counter_descs`]).
    pub vendor: Vec<(&'static CounterDesc, u64)>,
    /// The clock and sync gauges.
    pub clock: crate::capture::ClockGauges,
}

/// One (interface, queue): its capture thread, AF_XDP socket and reassembler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Interface name.
    pub iface: String,
    /// RX queue index.
    pub queue: u32,
    /// The socket's `XDP_STATISTICS` and our socket counters (`None` for the socket backends,
    /// and before the first read).
    pub xsk: Option<(XdpStatistics, XskCountersSnapshot)>,
    /// Capture thread counters.
    pub capture: CaptureSnapshot,
    /// IPv4 reassembly counters.
    pub reassembly: ReassemblyCounters,
}

/// Everything the daemon exports.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// XDP program counters, summed over interfaces (`None` if no map could be read).
    pub xdp: Option<ProgramCounters>,
    /// Per queue.
    pub queues: Vec<QueueSnapshot>,
    /// Per sensor.
    pub sensors: Vec<SensorSnapshot>,
    /// Publisher counters (with the pool's).
    pub publisher: PublisherCounters,
    /// The running sinks' counters (zenoh, DDS, Foxglove, the live view, the packet
    /// recording: each sink's own descriptors, daemon-wide), in the order the sinks declare
    /// them; a sink that is off has none.
    pub sinks: Vec<(&'static CounterDesc, u64)>,
    /// The process's memory and resources.
    pub process: ProcessGauges,
    /// Per sink with a queue: its name (the `sink` label: `tcp`, `zenoh`, `dds`, `foxglove`)
    /// and its queue's counters.
    pub sink_queues: Vec<(String, SinkQueueCounters)>,
    /// Per connected subscriber.
    pub subscribers: Vec<SubscriberStats>,
}

/// Where a sample belongs: its label values, and its place in the stats JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Daemon-wide, no labels; JSON `{group}.{name}`.
    Global,
    /// One capture queue, labels `iface`, `queue`; JSON `queues[index].{group}.{name}`.
    Queue {
        /// Index in [`Snapshot::queues`].
        index: usize,
        /// Interface.
        iface: &'a str,
        /// RX queue.
        queue: u32,
    },
    /// One sensor, labels `sensor`, `model`; JSON `sensors[index].{name}` for the group
    /// `sensor`, `sensors[index].{group}.{name}` for the vendor groups.
    Sensor {
        /// Index in [`Snapshot::sensors`].
        index: usize,
        /// Sensor id.
        id: u16,
        /// Sensor name (the `sensor` label).
        name: &'a str,
        /// Model name.
        model: &'a str,
    },
    /// One sink's queue, label `sink`; JSON `sink_queues[index].{name}`.
    Sink {
        /// Index in [`Snapshot::sink_queues`].
        index: usize,
        /// The sink's name.
        sink: &'a str,
    },
    /// One subscriber, labels `subscriber`, `peer`; JSON `subscribers[index].{name}`.
    Subscriber {
        /// Index in [`Snapshot::subscribers`].
        index: usize,
        /// Publisher slot.
        slot: usize,
        /// Peer address.
        peer: &'a str,
    },
}

impl Scope<'_> {
    /// `(label name, value)` pairs, in the order of the groups' [`lidarxdp_core::counters::Group::labels`].
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        match *self {
            Scope::Global => Vec::new(),
            Scope::Queue { iface, queue, .. } => {
                vec![("iface", iface.to_owned()), ("queue", queue.to_string())]
            }
            Scope::Sensor { name, model, .. } => {
                vec![("sensor", name.to_owned()), ("model", model.to_owned())]
            }
            Scope::Sink { sink, .. } => vec![("sink", sink.to_owned())],
            Scope::Subscriber { slot, peer, .. } => {
                vec![("subscriber", slot.to_string()), ("peer", peer.to_owned())]
            }
        }
    }

    /// The label set as written in exposition text, without braces (values escaped).
    pub fn prometheus_labels(&self) -> String {
        self.labels()
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The group whose counters sit directly in this scope's JSON object (not nested under
    /// the group's name).
    fn flat_group(&self) -> Option<&'static str> {
        match self {
            Scope::Sensor { .. } => Some("sensor"),
            Scope::Sink { .. } => Some("sink"),
            Scope::Subscriber { .. } => Some("subscriber"),
            _ => None,
        }
    }
}

impl Snapshot {
    /// Calls `f` once per exported counter: daemon-wide XDP counters, then per queue (`xsk`,
    /// `capture`, `reassembly`), per sensor (`sensor`, vendor groups), the publisher and its
    /// pool, the sinks, the process, per sink queue, per subscriber.
    pub fn visit(&self, f: &mut dyn FnMut(&Scope<'_>, &'static CounterDesc, u64)) {
        if let Some(x) = &self.xdp {
            x.visit(&mut |d, v| f(&Scope::Global, d, v));
        }
        for (index, q) in self.queues.iter().enumerate() {
            let sc = Scope::Queue {
                index,
                iface: &q.iface,
                queue: q.queue,
            };
            let mut g = |d: &'static CounterDesc, v| f(&sc, d, v);
            if let Some((kernel, ours)) = &q.xsk {
                kernel.visit(&mut g);
                ours.visit(&mut g);
            }
            q.capture.visit(&mut g);
            q.reassembly.visit(&mut g);
        }
        for (index, s) in self.sensors.iter().enumerate() {
            let sc = Scope::Sensor {
                index,
                id: s.id,
                name: &s.name,
                model: &s.model,
            };
            let mut g = |d: &'static CounterDesc, v| f(&sc, d, v);
            s.decode.visit(&mut g);
            s.traffic.visit(&mut g);
            for &(d, v) in &s.vendor {
                g(d, v);
            }
            s.clock.visit(&mut g);
        }
        self.publisher.visit(&mut |d, v| f(&Scope::Global, d, v));
        self.publisher
            .pool
            .visit(&mut |d, v| f(&Scope::Global, d, v));
        for &(d, v) in &self.sinks {
            f(&Scope::Global, d, v);
        }
        self.process.visit(&mut |d, v| f(&Scope::Global, d, v));
        for (index, (sink, c)) in self.sink_queues.iter().enumerate() {
            let sc = Scope::Sink { index, sink };
            c.visit(&mut |d, v| f(&sc, d, v));
        }
        for (index, c) in self.subscribers.iter().enumerate() {
            let sc = Scope::Subscriber {
                index,
                slot: c.slot,
                peer: &c.peer,
            };
            c.counters.visit(&mut |d, v| f(&sc, d, v));
        }
    }

    /// The stats JSON: every counter of [`Snapshot::visit`] at its scope's place — `xdp`,
    /// `publisher`, `publisher_pool` objects; `queues[]` (`iface`, `queue`, and `xsk`,
    /// `capture`, `reassembly` objects), the first queue's objects also at top level;
    /// `sensors[]` (`id`, `model`, the `sensor` counters, and `ouster` / `velodyne` /
    /// `robosense` objects); the sinks' objects (`zenoh`, ...) and `process`;
    /// `sink_queues[]` (`sink`, `queue_bytes`); `subscribers[]` (`slot`, `peer`, counters).
    /// Keys are the descriptors' names.
    pub fn to_json(&self) -> Value {
        let obj = |pairs: Vec<(&str, Value)>| -> Map<String, Value> {
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
        };
        let mut root = Map::new();
        let mut queues: Vec<_> = self
            .queues
            .iter()
            .map(|q| {
                obj(vec![
                    ("iface", q.iface.clone().into()),
                    ("queue", q.queue.into()),
                ])
            })
            .collect();
        let mut sensors: Vec<_> = self
            .sensors
            .iter()
            .map(|s| {
                obj(vec![
                    ("id", s.id.into()),
                    ("name", s.name.clone().into()),
                    ("model", s.model.clone().into()),
                ])
            })
            .collect();
        let mut sink_queues: Vec<_> = self
            .sink_queues
            .iter()
            .map(|(sink, _)| obj(vec![("sink", sink.clone().into())]))
            .collect();
        let mut subs: Vec<_> = self
            .subscribers
            .iter()
            .map(|c| {
                obj(vec![
                    ("slot", c.slot.into()),
                    ("peer", c.peer.clone().into()),
                ])
            })
            .collect();
        self.visit(&mut |scope, d, v| {
            let target = match *scope {
                Scope::Global => Some(&mut root),
                Scope::Queue { index, .. } => queues.get_mut(index),
                Scope::Sensor { index, .. } => sensors.get_mut(index),
                Scope::Sink { index, .. } => sink_queues.get_mut(index),
                Scope::Subscriber { index, .. } => subs.get_mut(index),
            };
            let Some(target) = target else { return };
            let target = if scope.flat_group() == Some(d.group) {
                target
            } else {
                match target
                    .entry(d.group)
                    .or_insert_with(|| Value::Object(Map::new()))
                {
                    Value::Object(m) => m,
                    _ => return,
                }
            };
            target.insert(d.name.to_owned(), v.into());
        });
        if let Some(first) = queues.first() {
            for (k, v) in first {
                if v.is_object() {
                    root.insert(k.clone(), v.clone());
                }
            }
        }
        let arr =
            |v: Vec<Map<String, Value>>| Value::Array(v.into_iter().map(Value::Object).collect());
        root.insert("queues".into(), arr(queues));
        root.insert("sensors".into(), arr(sensors));
        root.insert("sink_queues".into(), arr(sink_queues));
        root.insert("subscribers".into(), arr(subs));
        Value::Object(root)
    }
}

/// One counter set as a JSON object `{name: value}` (e.g. one interface's XDP program).
pub fn counters_json<T: CounterSet>(c: &T) -> Value {
    let mut m = Map::new();
    c.visit(&mut |d, v| {
        m.insert(d.name.to_owned(), v.into());
    });
    Value::Object(m)
}

/// The descriptors of the sinks this binary was built with ([`Snapshot::sinks`]), by counter
/// set, in the order the daemon's sinks declare them.
pub const SINK_DESCRIPTORS: &[&[CounterDesc]] = &[
    #[cfg(feature = "zenoh")]
    crate::ros2_zenoh::ZenohCounters::DESCS,
    #[cfg(feature = "dds")]
    crate::ros2_dds::DdsCounters::DESCS,
    #[cfg(feature = "foxglove")]
    crate::foxglove::FoxgloveCounters::DESCS,
    #[cfg(feature = "view")]
    crate::view::ViewCounters::DESCS,
    crate::capture::RecordingCounters::DESCS,
];

/// Every descriptor the daemon exports, by counter set (for checks and documentation), the
/// sinks' ([`SINK_DESCRIPTORS`]) last.
pub fn all_descriptors() -> impl Iterator<Item = &'static CounterDesc> {
    const CORE: &[&[CounterDesc]] = &[
        ProgramCounters::DESCS,
        XdpStatistics::DESCS,
        XskCountersSnapshot::DESCS,
        CaptureSnapshot::DESCS,
        ReassemblyCounters::DESCS,
        DecodeCounters::DESCS,
        SensorTraffic::DESCS,
        lidarxdp_core::sensor::ouster::OusterStats::DESCS,
        lidarxdp_core::sensor::velodyne::VelodyneCounters::DESCS,
        lidarxdp_core::sensor::robosense::RobosenseCounters::DESCS,
        crate::capture::ClockGauges::DESCS,
        PublisherCounters::DESCS,
        PoolCounters::DESCS,
        ProcessGauges::DESCS,
        SinkQueueCounters::DESCS,
        SubscriberCounters::DESCS,
    ];
    CORE.iter().chain(SINK_DESCRIPTORS).flat_map(|s| s.iter())
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the snapshot as Prometheus text exposition format 0.0.4: one family per descriptor
/// (in the order [`Snapshot::visit`] first meets them), `# HELP` and `# TYPE` before its
/// samples; a family without samples is left out.
pub fn render(s: &Snapshot) -> String {
    let mut families: Vec<(&'static CounterDesc, Vec<(String, u64)>)> = Vec::new();
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    s.visit(&mut |scope, d, v| {
        let i = *index.entry((d.group, d.name)).or_insert_with(|| {
            families.push((d, Vec::new()));
            families.len() - 1
        });
        families[i].1.push((scope.prometheus_labels(), v));
    });
    let mut out = String::with_capacity(16384);
    for (d, samples) in families {
        let name = d.metric_name();
        let _ = writeln!(out, "# HELP {name} {}", d.help);
        let _ = writeln!(out, "# TYPE {name} {}", d.kind.as_str());
        for (labels, v) in samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {v}");
            }
        }
    }
    out
}

/// One sample read back from exposition text.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// The label set as written, without braces (empty when none).
    pub labels: String,
    /// The value.
    pub value: f64,
}

/// Parses exposition text into samples (comments and blank lines skipped; lines that are
/// not `name[{labels}] value` are skipped too).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (head, value) = l.trim_end().rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (head, ""),
            };
            Some(Sample {
                name: name.to_owned(),
                labels: labels.to_owned(),
                value,
            })
        })
        .collect()
}

/// Formats samples as an aligned table: `METRIC  LABELS  VALUE`, values right-aligned.
pub fn table(samples: &[Sample]) -> String {
    let w0 = samples
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .max(6);
    let w1 = samples
        .iter()
        .map(|s| s.labels.len())
        .max()
        .unwrap_or(0)
        .max(6);
    let vals: Vec<String> = samples.iter().map(|s| s.value.to_string()).collect();
    let w2 = vals.iter().map(String::len).max().unwrap_or(0).max(5);
    let mut out = format!("{:w0$}  {:w1$}  {:>w2$}\n", "METRIC", "LABELS", "VALUE");
    for (s, v) in samples.iter().zip(&vals) {
        let _ = writeln!(out, "{:w0$}  {:w1$}  {v:>w2$}", s.name, s.labels);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lidarxdp_core::sensor::{
        ouster::OusterStats, robosense::RobosenseCounters, velodyne::VelodyneCounters,
    };

    fn snapshot() -> Snapshot {
        Snapshot {
            xdp: Some(ProgramCounters {
                seen: 90,
                redirected: 84,
                passed: 6,
                ..ProgramCounters::default()
            }),
            queues: vec![QueueSnapshot {
                iface: "eth\"0".into(),
                queue: 3,
                xsk: Some((
                    XdpStatistics {
                        rx_ring_full: 7,
                        ..XdpStatistics::default()
                    },
                    XskCountersSnapshot {
                        packets: 84,
                        ..XskCountersSnapshot::default()
                    },
                )),
                capture: CaptureSnapshot {
                    rx_frames: 84,
                    ..CaptureSnapshot::default()
                },
                reassembly: ReassemblyCounters::default(),
            }],
            sensors: vec![SensorSnapshot {
                id: 0,
                name: "front".into(),
                model: "VLP16".into(),
                decode: DecodeCounters {
                    packets: 84,
                    decoded: 84,
                    frames: 1,
                    points: 12_345,
                    ..DecodeCounters::default()
                },
                traffic: SensorTraffic {
                    bytes: 101_976,
                    reassembled: 0,
                },
                vendor: VelodyneCounters::DESCS.iter().map(|d| (d, 2)).collect(),
                clock: Default::default(),
            }],
            publisher: PublisherCounters {
                subscribers: 2,
                frames_in: 1,
                pool: PoolCounters {
                    cap: 8,
                    ..PoolCounters::default()
                },
                ..PublisherCounters::default()
            },
            sinks: Vec::new(),
            process: ProcessGauges {
                resident_bytes: 41_943_040,
                heap_bytes: 9_437_184,
                heap_free_bytes: 1_048_576,
                jemalloc_resident_bytes: 8_388_608,
                threads: 9,
                open_fds: 23,
            },
            sink_queues: vec![
                (
                    "tcp".into(),
                    SinkQueueCounters {
                        queue_bytes: 290_240,
                    },
                ),
                ("zenoh".into(), SinkQueueCounters { queue_bytes: 0 }),
            ],
            subscribers: vec![
                SubscriberStats {
                    slot: 0,
                    peer: "127.0.0.1:40000".into(),
                    counters: SubscriberCounters {
                        frames_sent: 9,
                        frames_dropped: 0,
                        queued_frames: 1,
                    },
                },
                SubscriberStats {
                    slot: 3,
                    peer: "10.0.0.7:51515".into(),
                    counters: SubscriberCounters {
                        frames_sent: 4,
                        frames_dropped: 5,
                        queued_frames: 3,
                    },
                },
            ],
        }
    }

    /// A snapshot whose every counter (of two queues, two sensors of two vendors, two
    /// subscribers) holds a distinct value.
    fn distinct_snapshot() -> Snapshot {
        let mut n = 1000;
        let mut next = |_: &'static CounterDesc| {
            n += 1;
            n
        };
        let queue =
            |iface: &str, queue, next: &mut dyn FnMut(&'static CounterDesc) -> u64| QueueSnapshot {
                iface: iface.into(),
                queue,
                xsk: Some((
                    XdpStatistics::from_fn(next),
                    XskCountersSnapshot::from_fn(next),
                )),
                capture: CaptureSnapshot::from_fn(next),
                reassembly: ReassemblyCounters::from_fn(next),
            };
        let sensor = |id,
                      model: &str,
                      vendor: &'static [CounterDesc],
                      next: &mut dyn FnMut(&'static CounterDesc) -> u64| {
            SensorSnapshot {
                id,
                name: format!("s{id}"),
                model: model.into(),
                decode: DecodeCounters::from_fn(next),
                traffic: SensorTraffic::from_fn(next),
                vendor: vendor.iter().map(|d| (d, next(d))).collect(),
                clock: crate::capture::ClockGauges::from_fn(next),
            }
        };
        let subscriber =
            |slot, peer: &str, next: &mut dyn FnMut(&'static CounterDesc) -> u64| SubscriberStats {
                slot,
                peer: peer.into(),
                counters: SubscriberCounters::from_fn(next),
            };
        Snapshot {
            xdp: Some(ProgramCounters::from_fn(&mut next)),
            queues: vec![queue("eth0", 0, &mut next), queue("eth1", 2, &mut next)],
            sensors: vec![
                sensor(0, "VLP16", VelodyneCounters::DESCS, &mut next),
                sensor(1, "OS1_64", OusterStats::DESCS, &mut next),
                sensor(2, "HELIOS", RobosenseCounters::DESCS, &mut next),
            ],
            publisher: PublisherCounters {
                pool: PoolCounters::from_fn(&mut next),
                ..PublisherCounters::from_fn(&mut next)
            },
            sinks: SINK_DESCRIPTORS
                .iter()
                .flat_map(|descs| descs.iter())
                .map(|d| (d, next(d)))
                .collect(),
            process: ProcessGauges::from_fn(&mut next),
            sink_queues: vec![
                ("tcp".into(), SinkQueueCounters::from_fn(&mut next)),
                ("dds".into(), SinkQueueCounters::from_fn(&mut next)),
            ],
            subscribers: vec![
                subscriber(0, "127.0.0.1:1", &mut next),
                subscriber(4, "127.0.0.1:2", &mut next),
            ],
        }
    }

    #[test]
    fn json_and_prometheus_agree_value_for_value() {
        let snap = distinct_snapshot();
        let prom: HashMap<(String, String), f64> = parse(&render(&snap))
            .into_iter()
            .map(|s| ((s.name, s.labels), s.value))
            .collect();
        let json = snap.to_json();
        let mut visited = 0;
        let mut values = std::collections::HashSet::new();
        snap.visit(&mut |scope, d, v| {
            visited += 1;
            values.insert(v);
            let key = (d.metric_name(), scope.prometheus_labels());
            assert_eq!(prom.get(&key), Some(&(v as f64)), "Prometheus {key:?}");
            let labels: Vec<&str> = scope.labels().iter().map(|(k, _)| *k).collect();
            assert_eq!(labels, d.labels, "labels of {}", d.metric_name());
            let place = match *scope {
                Scope::Global => &json,
                Scope::Queue { index, .. } => &json["queues"][index],
                Scope::Sensor { index, .. } => &json["sensors"][index],
                Scope::Sink { index, .. } => &json["sink_queues"][index],
                Scope::Subscriber { index, .. } => &json["subscribers"][index],
            };
            let got = if scope.flat_group() == Some(d.group) {
                &place[d.name]
            } else {
                &place[d.group][d.name]
            };
            assert_eq!(got.as_u64(), Some(v), "JSON {} {scope:?}", d.metric_name());
        });
        // Nothing else is exported: every Prometheus sample and every JSON number (outside
        // the first queue's copy at top level and the scopes' own ids) is one visited counter.
        assert_eq!(prom.len(), visited);
        fn numbers(v: &Value, skip: &[&str]) -> usize {
            match v {
                Value::Number(_) => 1,
                Value::Array(a) => a.iter().map(|x| numbers(x, skip)).sum(),
                Value::Object(m) => m
                    .iter()
                    .filter(|(k, _)| !skip.contains(&k.as_str()))
                    .map(|(_, x)| numbers(x, skip))
                    .sum(),
                _ => 0,
            }
        }
        let first_queue = numbers(&json["queues"][0], &["queue"]);
        let ids = snap.queues.len() + snap.sensors.len() + snap.subscribers.len();
        assert_eq!(numbers(&json, &[]), visited + first_queue + ids);
        for k in ["xsk", "capture", "reassembly"] {
            assert_eq!(json[k], json["queues"][0][k], "{k}");
        }
        // Every stored counter got its own value (derived ones are sums of them).
        let derived = snap.queues.len(); // reassembly `failed`
        assert!(
            values.len() >= visited - derived,
            "{} of {visited}",
            values.len()
        );
    }

    #[test]
    fn every_descriptor_is_exported_under_a_unique_name() {
        let snap = distinct_snapshot();
        let mut visited = std::collections::HashSet::new();
        snap.visit(&mut |_, d, _| {
            visited.insert(d.metric_name());
        });
        let mut names = std::collections::HashSet::new();
        for d in all_descriptors() {
            let name = d.metric_name();
            assert!(names.insert(name.clone()), "{name} declared twice");
            assert!(visited.contains(&name), "{name} is never exported");
            assert!(
                !d.help.is_empty() && !d.help.contains('\n') && !d.unit.is_empty(),
                "{name}"
            );
            assert!(
                d.group
                    .bytes()
                    .chain(d.name.bytes())
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
        }
        assert_eq!(names, visited);
    }

    #[test]
    fn docs_list_every_metric() {
        let docs =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploy.md"))
                .unwrap();
        // Names as the docs write them: `lidarxdp_a_{b,c}_total` stands for two.
        let mut documented = std::collections::HashSet::new();
        for token in docs.split(|c: char| !(c.is_ascii_alphanumeric() || "_{},".contains(c))) {
            let Some(start) = token.find("lidarxdp_") else {
                continue;
            };
            let token = &token[start..];
            match (token.find('{'), token.find('}')) {
                (Some(a), Some(b)) if a < b => {
                    for alt in token[a + 1..b].split(',') {
                        documented.insert(format!("{}{alt}{}", &token[..a], &token[b + 1..]));
                    }
                }
                _ => {
                    documented.insert(token.trim_end_matches(',').to_owned());
                }
            }
        }
        for d in all_descriptors() {
            let name = d.metric_name();
            assert!(
                documented.contains(&name),
                "{name} is not in docs/deploy.md"
            );
        }
    }

    #[test]
    fn renders_exact_text() {
        let text = render(&snapshot());
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/metrics_expected.txt"
        );
        if std::env::var_os("LIDARXDP_BLESS").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        let expected = std::fs::read_to_string(path).unwrap();
        assert_eq!(text, expected, "LIDARXDP_BLESS=1 rewrites {path}");
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let text = render(&snapshot());
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(kind == "counter" || kind == "gauge", "{line}");
                assert!(
                    text.contains(&format!("# HELP {name} ")),
                    "no HELP for {name}"
                );
                assert!(declared.insert(name.to_owned()), "{name} declared twice");
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "{name}");
                }
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(declared.contains(name), "{name} sampled before TYPE");
            }
        }
    }

    #[test]
    fn parse_reads_back_what_render_writes() {
        let samples = parse(&render(&snapshot()));
        let find = |name: &str| {
            samples
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        assert_eq!(find("lidarxdp_xdp_redirected_total").value, 84.0);
        let s = find("lidarxdp_xsk_rx_ring_full_total");
        assert_eq!(s.labels, r#"iface="eth\"0",queue="3""#);
        assert_eq!(s.value, 7.0);
        assert_eq!(find("lidarxdp_publisher_subscribers").value, 2.0);
        assert_eq!(find("lidarxdp_publisher_pool_cap").value, 8.0);
        assert_eq!(find("lidarxdp_velodyne_rate_mismatches_total").value, 2.0);
    }

    #[test]
    fn table_is_aligned() {
        let t = table(&parse(
            "# HELP a x\na 1\nlong_name{l=\"v\"} 12345\n\nbad line\n",
        ));
        assert_eq!(
            t,
            "METRIC     LABELS  VALUE\n\
             a                      1\n\
             long_name  l=\"v\"   12345\n"
        );
    }
}
