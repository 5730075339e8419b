//! The daemon's counters read now, for `/metrics` and the stats JSON (both derived from the
//! counter descriptors, [`lidarxdp::metrics`]), plus what is not a counter: each interface's
//! program counters and each capture thread's exit report.

use lidarxdp::{
    loader::{ProgramCounters, XdpProgram},
    publish::PublisherCounters,
    ros2_zenoh::ZenohCounters,
};

use super::workers::Worker;

/// The counters [`lidarxdp::metrics::render`] and the stats JSON export, read now. The XDP
/// program counters are summed over the interfaces.
pub(super) fn metrics_snapshot(
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    publisher: &PublisherCounters,
    zenoh: Option<ZenohCounters>,
    recording: Option<lidarxdp::capture::RecordingCounters>,
    foxglove: Option<lidarxdp::foxglove::FoxgloveCounters>,
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
                .zip(&w.models)
                .map(|(s, (id, model))| SensorSnapshot {
                    id: *id,
                    model: (*model).to_owned(),
                    decode: s.decode.snapshot(),
                    traffic: s.traffic.snapshot(),
                    vendor: s.vendor_snapshot(),
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
        zenoh,
        recording,
        foxglove,
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

/// All counters as one JSON object, derived from the descriptors
/// ([`lidarxdp::metrics::Snapshot::to_json`]: `xdp` summed over interfaces, `queues[]`,
/// the first queue's `xsk`, `capture`, `reassembly` also at top level, `sensors[]`,
/// `publisher`, `publisher_pool`, `zenoh` when on, `subscribers[]`), plus `interfaces[]` (each interface's
/// XDP program counters) and each queue's `backend` exit report (the first one's also at top
/// level).
pub(super) fn stats_json(
    programs: &[(String, XdpProgram)],
    workers: &[Worker],
    publisher: &PublisherCounters,
    zenoh: Option<ZenohCounters>,
    recording: Option<lidarxdp::capture::RecordingCounters>,
    foxglove: Option<lidarxdp::foxglove::FoxgloveCounters>,
    subscribers: Vec<lidarxdp::publish::SubscriberStats>,
) -> serde_json::Value {
    use serde_json::{Value, json};
    let mut v = metrics_snapshot(
        programs,
        workers,
        publisher,
        zenoh,
        recording,
        foxglove,
        subscribers,
    )
    .to_json();
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
