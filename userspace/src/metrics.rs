//! Prometheus text exposition (format 0.0.4) of the daemon's counters, sans-IO.
//!
//! [`render`] turns a [`Snapshot`] (plain numbers gathered by `lidarxdp run` from the XDP
//! program's maps, the capture thread's atomics and the publisher) into the text served at
//! `GET /metrics`; [`parse`] reads such text back (for `lidarxdp stats`). Every family gets a
//! `# HELP` and a `# TYPE` line; counters end in `_total`.
//!
//! Labels: per queue `iface`, `queue` (AF_XDP `XDP_STATISTICS`, capture thread, reassembly);
//! per sensor `sensor` (id) and `model`. XDP program and publisher counters are daemon-wide.
use std::fmt::Write;

use crate::{loader::ProgramCounters, publish::PublisherCounters, xsk::XdpStatistics};
use lidarxdp_core::reassembly::ReassemblyCounters;

/// The capture thread's own counters (see [`crate::capture::CaptureCounters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureSnapshot {
    /// Frames taken from the RX ring.
    pub rx_frames: u64,
    /// Bytes taken from the RX ring.
    pub rx_bytes: u64,
    /// UDP datagrams handed to a sensor pipeline.
    pub sensor_datagrams: u64,
    /// Frames that were not IPv4/UDP.
    pub not_udp: u64,
    /// IPv4 fragments received.
    pub fragments: u64,
    /// Datagrams that matched no sensor.
    pub unknown_sensor: u64,
    /// Datagrams dropped: a second IPv4 source sending to a sensor configured without a source.
    pub mixed_sources: u64,
    /// Idle waits in io_uring.
    pub waits: u64,
    /// Frames pushed to the publisher.
    pub frames_out: u64,
    /// Frames dropped because the publisher queue was full.
    pub frames_dropped: u64,
    /// Calibration reloads (SIGHUP) applied to this thread's sensors.
    pub calibration_reloads: u64,
    /// Carrier transitions of the interface since the socket was bound (sysfs
    /// `carrier_changes`; down then up counts 2).
    pub link_changes: u64,
}

/// One sensor's counters (see [`crate::capture::SensorCounters`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SensorSnapshot {
    /// Sensor id (as in the subscriber protocol).
    pub id: u16,
    /// Model name, e.g. `VLP16`.
    pub model: String,
    /// UDP datagrams handed to the sensor's pipeline.
    pub packets: u64,
    /// UDP payload bytes of those datagrams.
    pub bytes: u64,
    /// Data packets decoded.
    pub decoded: u64,
    /// Packets rejected as malformed.
    pub malformed: u64,
    /// Datagrams ignored (not data packets).
    pub ignored: u64,
    /// Datagrams that were reassembled from IPv4 fragments.
    pub reassembled: u64,
    /// Frames (scans) produced.
    pub frames: u64,
    /// Points produced.
    pub points: u64,
    /// Data packets dropped because their time / frame id jumped away from the stream.
    pub time_jumps: u64,
    /// Sustained time jumps taken as a sensor restart.
    pub restarts: u64,
    /// Whole frames (turns) lost.
    pub frames_lost: u64,
    /// Data packets with an invalid date, stamped with host time.
    pub date_fallbacks: u64,
    /// Frames whose sensor start time is implausible (before 2000, or over 60 s from host time).
    pub implausible_time: u64,
    /// Velodyne data packets whose product-id byte names another model than the configured
    /// one (decoded as configured; logged once).
    pub product_mismatches: u64,
}

/// One (interface, queue): its capture thread, AF_XDP socket and reassembler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Interface name.
    pub iface: String,
    /// RX queue index.
    pub queue: u32,
    /// The socket's `XDP_STATISTICS` (`None` before the first read or if it failed).
    pub xsk: Option<XdpStatistics>,
    /// Capture thread counters.
    pub capture: CaptureSnapshot,
    /// IPv4 reassembly counters.
    pub reassembly: ReassemblyCounters,
}

/// Everything [`render`] exposes.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// XDP program counters (`None` if the map could not be read).
    pub xdp: Option<ProgramCounters>,
    /// Per queue.
    pub queues: Vec<QueueSnapshot>,
    /// Per sensor.
    pub sensors: Vec<SensorSnapshot>,
    /// Publisher counters.
    pub publisher: PublisherCounters,
    /// Per connected subscriber.
    pub subscribers: Vec<crate::publish::SubscriberStats>,
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one metric family: HELP, TYPE and one sample per `(labels, value)`.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, u64)]) {
    if samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// Renders the snapshot as Prometheus text exposition format 0.0.4.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(8192);
    if let Some(x) = &s.xdp {
        let xdp: [(&str, &str, u64); 9] = [
            ("seen", "Frames the XDP program ran on.", x.seen),
            (
                "redirected",
                "Frames redirected into an AF_XDP socket.",
                x.redirected,
            ),
            ("passed", "Frames passed to the kernel stack.", x.passed),
            (
                "malformed",
                "Frames with truncated or invalid headers (passed).",
                x.malformed,
            ),
            (
                "no_socket",
                "Sensor frames passed because no AF_XDP socket was bound on their queue.",
                x.no_socket,
            ),
            (
                "frag_tracked",
                "First IPv4 fragments of sensor datagrams tracked.",
                x.frag_tracked,
            ),
            (
                "frag_redirected",
                "IPv4 fragments redirected into an AF_XDP socket.",
                x.frag_redirected,
            ),
            (
                "frag_passed",
                "Later IPv4 fragments passed (no tracked datagram).",
                x.frag_passed,
            ),
            (
                "frag_track_failed",
                "First fragments whose tracking entry could not be written.",
                x.frag_track_failed,
            ),
        ];
        for (n, help, v) in xdp {
            family(
                &mut out,
                &format!("lidarxdp_xdp_{n}_total"),
                "counter",
                help,
                &[(String::new(), v)],
            );
        }
    }

    let ql = |q: &QueueSnapshot| format!("iface=\"{}\",queue=\"{}\"", escape(&q.iface), q.queue);
    type QField = (&'static str, &'static str, fn(&XdpStatistics) -> u64);
    let xsk: [QField; 6] = [
        (
            "rx_dropped",
            "XDP_STATISTICS: RX packets dropped for other reasons.",
            |x| x.rx_dropped,
        ),
        (
            "rx_invalid_descs",
            "XDP_STATISTICS: RX packets dropped for invalid fill descriptors.",
            |x| x.rx_invalid_descs,
        ),
        (
            "tx_invalid_descs",
            "XDP_STATISTICS: invalid TX descriptors.",
            |x| x.tx_invalid_descs,
        ),
        (
            "rx_ring_full",
            "XDP_STATISTICS: RX packets dropped because the RX ring was full.",
            |x| x.rx_ring_full,
        ),
        (
            "rx_fill_ring_empty_descs",
            "XDP_STATISTICS: packets that found the fill ring empty.",
            |x| x.rx_fill_ring_empty_descs,
        ),
        (
            "tx_ring_empty_descs",
            "XDP_STATISTICS: TX ring found empty.",
            |x| x.tx_ring_empty_descs,
        ),
    ];
    for (n, help, f) in xsk {
        let samples: Vec<_> = s
            .queues
            .iter()
            .filter_map(|q| q.xsk.as_ref().map(|x| (ql(q), f(x))))
            .collect();
        family(
            &mut out,
            &format!("lidarxdp_xsk_{n}_total"),
            "counter",
            help,
            &samples,
        );
    }

    type CField = (&'static str, &'static str, fn(&CaptureSnapshot) -> u64);
    let cap: [CField; 12] = [
        ("rx_frames", "Frames taken from the AF_XDP RX ring.", |c| {
            c.rx_frames
        }),
        (
            "rx_bytes",
            "Bytes (whole Ethernet frames) taken from the RX ring.",
            |c| c.rx_bytes,
        ),
        (
            "sensor_datagrams",
            "UDP datagrams handed to a sensor pipeline.",
            |c| c.sensor_datagrams,
        ),
        (
            "not_udp",
            "Frames that were not IPv4/UDP or had invalid headers.",
            |c| c.not_udp,
        ),
        ("fragments", "IPv4 fragments received.", |c| c.fragments),
        (
            "unknown_sensor",
            "UDP datagrams that matched no configured sensor.",
            |c| c.unknown_sensor,
        ),
        (
            "mixed_sources",
            "UDP datagrams dropped because a second IPv4 source sent to a sensor configured without a source.",
            |c| c.mixed_sources,
        ),
        ("waits", "Idle waits in io_uring.", |c| c.waits),
        ("frames_out", "Frames pushed to the publisher queue.", |c| {
            c.frames_out
        }),
        (
            "frames_dropped",
            "Frames dropped because the publisher queue was full.",
            |c| c.frames_dropped,
        ),
        (
            "calibration_reloads",
            "Sensor calibrations reloaded on SIGHUP and applied by the capture thread.",
            |c| c.calibration_reloads,
        ),
        (
            "link_changes",
            "Carrier transitions of the interface since the AF_XDP socket was bound (sysfs carrier_changes).",
            |c| c.link_changes,
        ),
    ];
    for (n, help, f) in cap {
        let samples: Vec<_> = s.queues.iter().map(|q| (ql(q), f(&q.capture))).collect();
        family(
            &mut out,
            &format!("lidarxdp_capture_{n}_total"),
            "counter",
            help,
            &samples,
        );
    }

    type RField = (&'static str, &'static str, fn(&ReassemblyCounters) -> u64);
    let ra: [RField; 10] = [
        ("fragments", "IPv4 fragments handed to reassembly.", |r| {
            r.fragments
        }),
        ("completed", "Datagrams reassembled.", |r| r.completed),
        ("failed", "Datagrams whose reassembly failed.", |r| {
            r.failed()
        }),
        ("timed_out", "Datagrams that timed out incomplete.", |r| {
            r.timed_out
        }),
        (
            "overlaps",
            "Datagrams failed by overlapping fragments.",
            |r| r.overlaps,
        ),
        ("duplicates", "Duplicate fragments.", |r| r.duplicates),
        ("too_big", "Datagrams larger than the limit.", |r| r.too_big),
        ("too_many", "Datagrams beyond the in-flight limit.", |r| {
            r.too_many
        }),
        ("malformed", "Malformed fragments.", |r| r.malformed),
        ("dropped_fragments", "Fragments dropped.", |r| {
            r.dropped_fragments
        }),
    ];
    for (n, help, f) in ra {
        let samples: Vec<_> = s.queues.iter().map(|q| (ql(q), f(&q.reassembly))).collect();
        family(
            &mut out,
            &format!("lidarxdp_reassembly_{n}_total"),
            "counter",
            help,
            &samples,
        );
    }

    let sl = |x: &SensorSnapshot| format!("sensor=\"{}\",model=\"{}\"", x.id, escape(&x.model));
    type SField = (&'static str, &'static str, fn(&SensorSnapshot) -> u64);
    let sen: [SField; 14] = [
        (
            "packets",
            "UDP datagrams handed to the sensor's pipeline.",
            |x| x.packets,
        ),
        ("bytes", "UDP payload bytes of those datagrams.", |x| {
            x.bytes
        }),
        ("decoded", "Data packets decoded.", |x| x.decoded),
        ("malformed", "Packets rejected as malformed.", |x| {
            x.malformed
        }),
        ("ignored", "Datagrams ignored (not data packets).", |x| {
            x.ignored
        }),
        (
            "reassembled",
            "Datagrams reassembled from IPv4 fragments.",
            |x| x.reassembled,
        ),
        ("frames", "Frames (scans) produced.", |x| x.frames),
        ("points", "Points produced.", |x| x.points),
        (
            "time_jumps",
            "Data packets dropped: their time or frame id jumped away from the stream.",
            |x| x.time_jumps,
        ),
        (
            "restarts",
            "Sustained time jumps taken as a sensor restart.",
            |x| x.restarts,
        ),
        ("frames_lost", "Whole frames (turns) lost.", |x| {
            x.frames_lost
        }),
        (
            "date_fallbacks",
            "Data packets with an invalid date, stamped with host time.",
            |x| x.date_fallbacks,
        ),
        (
            "implausible_time",
            "Frames whose sensor start time is implausible (before 2000, or over 60 s from host time).",
            |x| x.implausible_time,
        ),
        (
            "product_mismatches",
            "Velodyne data packets whose product-id byte names another model than the configured one.",
            |x| x.product_mismatches,
        ),
    ];
    for (n, help, f) in sen {
        let samples: Vec<_> = s.sensors.iter().map(|x| (sl(x), f(x))).collect();
        family(
            &mut out,
            &format!("lidarxdp_sensor_{n}_total"),
            "counter",
            help,
            &samples,
        );
    }

    let p = &s.publisher;
    family(
        &mut out,
        "lidarxdp_publisher_subscribers",
        "gauge",
        "Currently connected subscribers.",
        &[(String::new(), p.subscribers)],
    );
    let pubc: [(&str, &str, u64); 7] = [
        (
            "subscribers_accepted",
            "Subscribers accepted.",
            p.subscribers_accepted,
        ),
        (
            "subscribers_disconnected",
            "Subscribers removed.",
            p.subscribers_disconnected,
        ),
        (
            "frames_in",
            "Frames taken from the input queue.",
            p.frames_in,
        ),
        (
            "frames_sent",
            "Frames completely sent, summed over subscribers.",
            p.frames_sent,
        ),
        (
            "frames_dropped_queue_full",
            "Frames dropped from a subscriber's full queue, summed over subscribers.",
            p.frames_dropped_queue_full,
        ),
        (
            "frames_dropped_input_full",
            "Frames dropped because the publisher input queue was full.",
            p.frames_dropped_input_full,
        ),
        ("bytes_sent", "Bytes sent to subscribers.", p.bytes_sent),
    ];
    for (n, help, v) in pubc {
        family(
            &mut out,
            &format!("lidarxdp_publisher_{n}_total"),
            "counter",
            help,
            &[(String::new(), v)],
        );
    }
    let sl = |c: &crate::publish::SubscriberStats| {
        format!("subscriber=\"{}\",peer=\"{}\"", c.slot, escape(&c.peer))
    };
    type SubField = fn(&crate::publish::SubscriberStats) -> u64;
    let subs: [(&str, &str, &str, SubField); 3] = [
        (
            "frames_sent_total",
            "counter",
            "Frames completely sent to this subscriber.",
            |c| c.frames_sent,
        ),
        (
            "frames_dropped_total",
            "counter",
            "Frames dropped from this subscriber's full queue (it reads too slowly).",
            |c| c.frames_dropped,
        ),
        (
            "queued_frames",
            "gauge",
            "Frames waiting in this subscriber's queue.",
            |c| c.queued,
        ),
    ];
    for (n, kind, help, f) in subs {
        let samples: Vec<_> = s.subscribers.iter().map(|c| (sl(c), f(c))).collect();
        family(
            &mut out,
            &format!("lidarxdp_subscriber_{n}"),
            kind,
            help,
            &samples,
        );
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
                xsk: Some(XdpStatistics {
                    rx_ring_full: 7,
                    ..XdpStatistics::default()
                }),
                capture: CaptureSnapshot {
                    rx_frames: 84,
                    ..CaptureSnapshot::default()
                },
                reassembly: ReassemblyCounters::default(),
            }],
            sensors: vec![SensorSnapshot {
                id: 0,
                model: "VLP16".into(),
                packets: 84,
                bytes: 101_976,
                decoded: 84,
                frames: 1,
                points: 12_345,
                ..SensorSnapshot::default()
            }],
            publisher: PublisherCounters {
                subscribers: 2,
                frames_in: 1,
                ..PublisherCounters::default()
            },
            subscribers: vec![
                crate::publish::SubscriberStats {
                    slot: 0,
                    peer: "127.0.0.1:40000".into(),
                    frames_sent: 9,
                    frames_dropped: 0,
                    queued: 1,
                },
                crate::publish::SubscriberStats {
                    slot: 3,
                    peer: "10.0.0.7:51515".into(),
                    frames_sent: 4,
                    frames_dropped: 5,
                    queued: 3,
                },
            ],
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
