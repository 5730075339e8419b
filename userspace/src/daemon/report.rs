//! The daemon's counters read now, for `/metrics` and the stats JSON (both derived from the
//! counter descriptors, [`lidarxdp::metrics`]), plus what is not a counter: each interface's
//! program counters and each capture thread's exit report.

use lidarxdp::{
    loader::{ProgramCounters, XdpProgram},
    publish::PublisherCounters,
};
use lidarxdp_core::counters::CounterDesc;

use super::workers::Worker;

/// The counters [`lidarxdp::metrics::render`] and the stats JSON export, read now. The XDP
/// program counters are summed over the interfaces; the process gauges are sampled here
/// ([`lidarxdp::process::ProcessGauges::sample`]: /proc/self and one `mallinfo2`), so only at
/// the metrics period.
pub(super) fn metrics_snapshot(
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    publisher: &PublisherCounters,
    sinks: Vec<(&'static CounterDesc, u64)>,
    sink_queues: Vec<(String, lidarxdp::publish::SinkQueueCounters)>,
    subscribers: Vec<lidarxdp::publish::SubscriberStats>,
) -> lidarxdp::metrics::Snapshot {
    use lidarxdp::metrics::{QueueSnapshot, SensorSnapshot, Snapshot};
    let mut xdp: Option<ProgramCounters> = None;
    for (_, p) in programs {
        if let Ok(c) = p.counters() {
            xdp.get_or_insert_with(ProgramCounters::default).add(&c);
        }
    }
    let mut sensors: Vec<_> = workers
        .iter()
        .flat_map(|w| {
            w.stats
                .sensors
                .iter()
                .zip(&w.sensors)
                .map(|(s, plan)| SensorSnapshot {
                    id: plan.id,
                    name: plan.name.clone(),
                    model: plan.model.name().to_owned(),
                    decode: s.decode.snapshot(),
                    traffic: s.traffic.snapshot(),
                    vendor: s.vendor_snapshot(),
                    clock: s.clock.load().into(),
                })
        })
        .collect();
    sensors.sort_by_key(|s| s.id);
    Snapshot {
        xdp,
        queues: workers
            .iter()
            .map(|w| QueueSnapshot {
                iface: w.iface.clone(),
                queue: w.queue,
                xsk: w.stats.xdp_statistics.load(),
                capture: w.stats.capture.snapshot(),
                reassembly: w.stats.reassembly.snapshot(),
            })
            .collect(),
        sensors,
        publisher: *publisher,
        sinks,
        process: lidarxdp::process::ProcessGauges::sample(),
        sink_queues,
        subscribers,
    }
}

/// A capture thread's exit report (`backend` in the stats JSON; `{}` while it runs): the
/// backend's own measurements at exit (name, datagrams received, receive buffer, thread CPU
/// times, link changes) and, for the readers of this object, the final values of the live
/// counters `capture.{truncated,backpressure,stalls}`.
fn backend_json(w: &Worker) -> serde_json::Value {
    use serde_json::json;
    match &w.exit {
        Some(e) => {
            let c = w.stats.capture.snapshot();
            json!({
                "name": e.backend.name, "received": e.backend.received,
                "rcvbuf_bytes": e.backend.rcvbuf_bytes,
                "receiver_cpu_ns": e.backend.receiver_cpu_ns,
                "decoder_cpu_ns": e.backend.decoder_cpu_ns,
                "truncated": c.truncated, "backpressure": c.backpressure,
                "stalls": c.stalls, "link_changes": e.backend.link_changes,
            })
        }
        None => json!({}),
    }
}

/// All counters of `snap` (taken by [`metrics_snapshot`]) as one JSON object, derived from
/// the descriptors
/// ([`lidarxdp::metrics::Snapshot::to_json`]: `xdp` summed over interfaces, `queues[]`,
/// the first queue's `xsk`, `capture`, `reassembly` also at top level, `sensors[]`,
/// `publisher`, `publisher_pool`, each running sink's group (`zenoh`, `dds`, `foxglove`,
/// `view`, `recording`), `process`, `sink_queues[]`, `subscribers[]`), plus `interfaces[]` (each interface's
/// XDP program counters) and each queue's `backend` exit report (the first one's also at top
/// level).
pub(super) fn stats_json(
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    snap: lidarxdp::metrics::Snapshot,
) -> serde_json::Value {
    use serde_json::{Value, json};
    let mut v = snap.to_json();
    v["interfaces"] = programs
        .iter()
        .map(|(i, p)| {
            let xdp = match p.counters() {
                Ok(c) => lidarxdp::metrics::counters_json(&c),
                Err(e) => json!({ "error": e.to_string() }),
            };
            json!({ "iface": i, "xdp": xdp })
        })
        .collect::<Vec<_>>()
        .into();
    if let Some(queues) = v["queues"].as_array_mut() {
        for (q, w) in queues.iter_mut().zip(workers) {
            q["backend"] = backend_json(w);
        }
    }
    v["backend"] = workers.first().map_or(Value::Null, backend_json);
    v
}

/// The daemon's exit report for an operator: a few lines, not every counter (those are in
/// `--stats-json` and, while it runs, `lidarxdp stats`). First the datagrams received and
/// decoded, then what was lost at each layer (the kernel's socket or RX ring, the capture
/// thread's filters, IPv4 reassembly, the decoders, whole frames, the publisher's queues),
/// then one line per sensor.
pub(super) fn exit_summary(snap: &lidarxdp::metrics::Snapshot) -> Vec<String> {
    let mut c = lidarxdp::capture::CaptureSnapshot::default();
    let mut r = lidarxdp_core::reassembly::ReassemblyCounters::default();
    for q in &snap.queues {
        c.add(&q.capture);
        r.add(&q.reassembly);
    }
    let xsk: u64 = (snap.queues.iter())
        .filter_map(|q| q.xsk.as_ref())
        .map(|(x, _)| x.rx_dropped + x.rx_ring_full + x.rx_invalid_descs)
        .sum();
    let kernel = xsk + c.truncated;
    let capture = c.not_udp + c.unknown_sensor + c.mixed_sources;
    let reassembly = r.failed();
    let (received, frames_dropped) = (c.rx_frames, c.frames_dropped);
    let mut d = lidarxdp_core::sensor::DecodeCounters::default();
    for s in &snap.sensors {
        d.add(&s.decode);
    }
    let p = &snap.publisher;
    let mut out = vec![
        format!(
            "exit: {received} packets received, {} handed to the sensors, {} decoded; {} frames \
             made, {} sent to subscribers",
            d.packets, d.decoded, d.frames, p.frames_sent
        ),
        format!(
            "exit: lost: kernel {kernel} (socket or RX ring full), capture {capture} (not \
             UDP, no sensor, second source), reassembly {reassembly}, decoder {} (malformed \
             {}, time jumps {}, late {}), whole frames {}, publisher {} (queue full: capture \
             {frames_dropped}, subscribers {})",
            d.malformed + d.time_jumps + d.late,
            d.malformed,
            d.time_jumps,
            d.late,
            d.frames_lost,
            frames_dropped + p.frames_dropped_input_full + p.frames_dropped_queue_full,
            p.frames_dropped_queue_full
        ),
    ];
    for s in &snap.sensors {
        out.push(format!(
            "exit: sensor {} ({}): {} packets, {} decoded, {} malformed, {} frames, {} points, \
             {} whole frames lost",
            s.name,
            s.model,
            s.decode.packets,
            s.decode.decoded,
            s.decode.malformed,
            s.decode.frames,
            s.decode.points,
            s.decode.frames_lost
        ));
    }
    out
}

/// What the daemon's log says about the counters: nothing when nothing changed (the counters
/// themselves are for `lidarxdp stats` and `/metrics`), one line per sensor when its stream
/// starts, stops or resumes, or when it had faults in the last period (malformed packets,
/// time jumps, whole frames lost), and one line per queue whose socket dropped packets.
#[derive(Default)]
pub(super) struct ChangeLog {
    /// Per sensor id: (counters at the last call, receiving during the last period).
    sensors: std::collections::HashMap<u16, (lidarxdp_core::sensor::DecodeCounters, bool)>,
    /// Per (iface, queue): the socket's kernel drop count at the last call.
    queues: std::collections::HashMap<(String, u32), u64>,
}

impl ChangeLog {
    /// The lines for the period since the last call (`period_s` long, seconds); empty when
    /// nothing changed.
    pub(super) fn lines(
        &mut self,
        snap: &lidarxdp::metrics::Snapshot,
        period_s: u64,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for s in &snap.sensors {
            let now = s.decode;
            let (before, was_receiving) = self.sensors.get(&s.id).copied().unwrap_or_default();
            let receiving = now.packets > before.packets;
            match (was_receiving, receiving) {
                (false, true) if before.packets == 0 => {
                    out.push(format!("{}: receiving ({})", s.name, s.model));
                }
                (false, true) => out.push(format!("{}: receiving again", s.name)),
                (true, false) => {
                    out.push(format!("{}: no datagram for {period_s} s", s.name));
                }
                _ => {}
            }
            let faults: Vec<String> = [
                (now.malformed - before.malformed, "malformed"),
                (now.time_jumps - before.time_jumps, "time jumps"),
                (now.frames_lost - before.frames_lost, "whole frames lost"),
            ]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
            if !faults.is_empty() {
                out.push(format!(
                    "{}: in the last {period_s} s: {}",
                    s.name,
                    faults.join(", ")
                ));
            }
            self.sensors.insert(s.id, (now, receiving));
        }
        for q in &snap.queues {
            let Some((x, _)) = &q.xsk else { continue };
            let dropped = x.rx_dropped + x.rx_ring_full + x.rx_invalid_descs;
            let key = (q.iface.clone(), q.queue);
            let before = self.queues.insert(key, dropped).unwrap_or(0);
            if dropped > before {
                out.push(format!(
                    "{}:{}: the kernel dropped {} packets in the last {period_s} s (RX ring \
                     full: the decoder fell behind; see lidarxdp stats)",
                    q.iface,
                    q.queue,
                    dropped - before
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lidarxdp::metrics::{SensorSnapshot, Snapshot};
    use lidarxdp_core::sensor::DecodeCounters;

    fn snap(packets: u64, malformed: u64, frames_lost: u64) -> Snapshot {
        Snapshot {
            sensors: vec![SensorSnapshot {
                id: 3,
                name: "front".into(),
                model: "VLP16".into(),
                decode: DecodeCounters {
                    packets,
                    malformed,
                    frames_lost,
                    ..DecodeCounters::default()
                },
                traffic: Default::default(),
                vendor: Vec::new(),
                clock: Default::default(),
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn exit_summary_is_a_few_lines_with_every_layer() {
        let mut s = snap(603, 2, 1);
        s.sensors[0].decode.decoded = 600;
        s.sensors[0].decode.frames = 4;
        s.sensors[0].decode.points = 59_374;
        s.publisher.frames_sent = 8;
        assert_eq!(
            exit_summary(&s),
            [
                "exit: 0 packets received, 603 handed to the sensors, 600 decoded; 4 frames \
                 made, 8 sent to subscribers",
                "exit: lost: kernel 0 (socket or RX ring full), capture 0 (not UDP, no sensor, \
                 second source), reassembly 0, decoder 2 (malformed 2, time jumps 0, late 0), \
                 whole frames 1, publisher 0 (queue full: capture 0, subscribers 0)",
                "exit: sensor front (VLP16): 603 packets, 600 decoded, 2 malformed, 4 frames, \
                 59374 points, 1 whole frames lost",
            ]
        );
    }

    #[test]
    fn change_log_says_nothing_when_nothing_changed() {
        let mut log = ChangeLog::default();
        assert!(log.lines(&snap(0, 0, 0), 10).is_empty());
        assert_eq!(
            log.lines(&snap(100, 0, 0), 10),
            ["front: receiving (VLP16)"]
        );
        assert!(log.lines(&snap(200, 0, 0), 10).is_empty());
        assert_eq!(
            log.lines(&snap(300, 2, 1), 10),
            ["front: in the last 10 s: 2 malformed, 1 whole frames lost"]
        );
        assert!(log.lines(&snap(400, 2, 1), 10).is_empty());
        assert_eq!(
            log.lines(&snap(400, 2, 1), 10),
            ["front: no datagram for 10 s"]
        );
        assert!(log.lines(&snap(400, 2, 1), 10).is_empty());
        assert_eq!(log.lines(&snap(401, 2, 1), 10), ["front: receiving again"]);
    }
}
