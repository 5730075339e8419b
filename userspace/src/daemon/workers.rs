//! The capture threads as the main thread sees them: building each sensor's pipeline from
//! its plan (calibration read through [`lidarxdp::calibration`]), starting one thread per
//! (interface, queue) on its source, and handing rebuilt pipelines over on SIGHUP.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use anyhow::{Context, Result};
use crossbeam_queue::ArrayQueue;
use lidarxdp::{
    capture::{
        CaptureExit, CaptureStats, CaptureWorker, PacketSource, RecordTap, Reload, SensorCounters,
        SensorSlot, StallSchedule,
    },
    publish::{AuxSender, FrameSender},
};
use lidarxdp_core::scan::BufferSource;
use lidarxdp_core::sensor::{ScanPipeline, SensorConfig};
use lidarxdp_core::valid::FrameTimeout;

use super::config::{Plan, SensorPlan};
use super::sources::Source;

/// A running capture thread and what the main thread knows of it.
pub(super) struct Worker {
    pub(super) iface: String,
    pub(super) queue: u32,
    /// The thread's sensors, in slot order (for reloads).
    pub(super) sensors: Vec<SensorPlan>,
    /// Where reloaded pipelines go.
    pub(super) reloads: Arc<ArrayQueue<Reload>>,
    pub(super) stats: Arc<CaptureStats>,
    pub(super) thread: Option<std::thread::JoinHandle<std::io::Result<CaptureExit>>>,
    pub(super) exit: Option<CaptureExit>,
}

/// Builds a sensor's decoding pipeline (reads its calibration).
pub(crate) fn pipeline(s: &SensorPlan) -> Result<ScanPipeline> {
    let cfg = SensorConfig {
        cut_angle: s.cut_angle,
        range: s.range,
        stamp: s.stamp,
        point_type: s.point_type,
        frame_timeout: s
            .settings
            .frame_timeout_ms
            .map_or(FrameTimeout::DEFAULT, FrameTimeout::from),
        ..SensorConfig::new(s.id, s.model, &s.calibration)
    };
    let opts = lidarxdp_core::sensor::PipelineOptions {
        fov: s.fov,
        hesai_skip_crc: s.hesai_skip_crc,
        flavor: lidarxdp_core::sensor::DecodeFlavor::from_nebula_compat(s.nebula_compat),
    };
    let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts)
        .with_context(|| format!("sensor {:?} ({})", s.name, s.model.name()))?;
    p.set_name(&s.name);
    Ok(p)
}

/// Every sensor's pipeline, per queue in plan order: every calibration is read before the
/// network is touched.
///
/// Errors: the first calibration that cannot be read or parsed, naming the sensor.
pub(super) fn pipelines(plan: &Plan) -> Result<Vec<Vec<ScanPipeline>>> {
    plan.queues
        .iter()
        .map(|q| q.sensors.iter().map(pipeline).collect())
        .collect()
}

/// Where the capture threads' output goes: frames to `sender`, point buffers from `buffers`
/// (the shared-memory pool or the publisher's heap pool), the sensors' datagrams also to
/// `record` (`--record-pcap`), IMU readings to `aux`.
pub(super) struct Outputs<'a> {
    pub(super) sender: &'a FrameSender,
    pub(super) buffers: &'a Arc<dyn BufferSource>,
    pub(super) record: Option<&'a RecordTap>,
    pub(super) aux: &'a AuxSender,
}

/// Starts one capture thread per queue on its source and pipelines, feeding `out`; `stop`
/// ends the threads.
///
/// Errors: a thread that cannot be spawned.
pub(super) fn start(
    plan: &Plan,
    sources: Vec<Source>,
    pipelines: Vec<Vec<ScanPipeline>>,
    out: &Outputs<'_>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<Worker>> {
    let mut workers = Vec::with_capacity(plan.queues.len());
    for ((q, source), pipes) in plan.queues.iter().zip(sources).zip(pipelines) {
        let slots: Vec<SensorSlot> = q
            .sensors
            .iter()
            .zip(pipes)
            .map(|(s, pipeline)| SensorSlot {
                port: s.port,
                extra_port: s.extra_port,
                source: s.source.as_ref().map(|a| a.ip()),
                pipeline,
                expect_return_mode: s.return_mode,
            })
            .collect();
        let stats = Arc::new(CaptureStats {
            sensors: slots
                .iter()
                .map(|s| SensorCounters::new(&s.pipeline))
                .collect(),
            ..CaptureStats::default()
        });
        let reloads = Arc::new(ArrayQueue::new(q.sensors.len().max(1)));
        let parts = WorkerParts {
            slots,
            reloads: reloads.clone(),
            sender: out.sender.clone(),
            buffers: out.buffers.clone(),
            stop: stop.clone(),
            stats: stats.clone(),
            stall: plan.capture.stall,
            record: out.record.cloned(),
            aux: out.aux.clone(),
            cpu: q.cpu,
            name: format!("capture-{}-{}", q.iface, q.queue),
        };
        let thread = match source {
            Source::Xdp(s) => parts.spawn(s)?,
            Source::Socket(s) => parts.spawn(s)?,
            Source::Recvmmsg(s) => parts.spawn(s)?,
            Source::Uring(s) => parts.spawn(s)?,
        };
        workers.push(Worker {
            iface: q.iface.clone(),
            queue: q.queue,
            sensors: q.sensors.clone(),
            reloads,
            stats,
            thread: Some(thread),
            exit: None,
        });
    }
    Ok(workers)
}

/// SIGHUP: re-reads every sensor's calibration and hands the rebuilt pipelines to the capture
/// threads. A sensor whose file no longer parses keeps its loaded calibration (error logged);
/// the others are reloaded. Runs on the main thread, which holds no capability by now, so the
/// files must be readable by the daemon's user.
pub(super) fn reload_calibrations(workers: &[Worker]) {
    let (mut ok, mut failed) = (0usize, 0usize);
    for w in workers {
        for (slot, s) in w.sensors.iter().enumerate() {
            match pipeline(s) {
                Ok(p) => {
                    let reload = Reload {
                        slot,
                        calibration: p.into_calibration(),
                    };
                    if w.reloads.push(reload).is_err() {
                        log::warn!(
                            "SIGHUP: sensor {:?}: the previous reload is not applied yet; \
                             skipped",
                            s.name
                        );
                        failed += 1;
                    } else {
                        ok += 1;
                    }
                }
                Err(e) => {
                    failed += 1;
                    log::error!("SIGHUP: {e:#}; keeping the loaded calibration");
                }
            }
        }
    }
    log::info!("SIGHUP: calibration reloaded for {ok} sensor(s), {failed} kept as they were");
}

/// Everything but the source that the capture thread is started with.
struct WorkerParts {
    slots: Vec<SensorSlot>,
    reloads: Arc<ArrayQueue<Reload>>,
    sender: FrameSender,
    buffers: Arc<dyn BufferSource>,
    stop: Arc<AtomicBool>,
    stats: Arc<CaptureStats>,
    stall: Option<StallSchedule>,
    record: Option<RecordTap>,
    aux: AuxSender,
    cpu: Option<usize>,
    name: String,
}

impl WorkerParts {
    fn spawn<S: PacketSource + Send + 'static>(
        self,
        source: S,
    ) -> Result<std::thread::JoinHandle<std::io::Result<CaptureExit>>> {
        let worker = CaptureWorker {
            source,
            sensors: self.slots,
            sender: self.sender,
            buffers: self.buffers,
            idle_wait: Duration::from_millis(20),
            stop: self.stop,
            stats: self.stats,
            stall: self.stall,
            reloads: self.reloads,
            record: self.record,
            aux: Some(self.aux),
        };
        let cpu = self.cpu;
        Ok(std::thread::Builder::new().name(self.name).spawn(move || {
            if let Some(cpu) = cpu {
                pin_to_cpu(cpu);
            }
            worker.run()
        })?)
    }
}

fn pin_to_cpu(cpu: usize) {
    if let Err(e) = lidarxdp::capture::pin_to_cpu(cpu) {
        log::warn!("pinning the capture thread to CPU {cpu}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::config::{Ros2Env, Settings, build};

    /// The first `n` data packets of the demo's VLP-16 capture, with their record times (ns).
    fn first_packets(n: usize) -> Vec<(Vec<u8>, u64)> {
        let pcap = lidarxdp_testkit::data("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap");
        let filter = lidarxdp::offline::DatagramFilter {
            port: Some(2368),
            source: None,
        };
        lidarxdp::offline::CaptureReader::open(&pcap, filter)
            .unwrap()
            .take(n)
            .map(|d| d.map(|d| (d.payload, d.ts_ns)).unwrap())
            .collect()
    }

    /// The pipeline of one VLP-16 configured from `toml` (a `[[sensors]]` table's keys).
    fn pipeline_of(toml: &str) -> ScanPipeline {
        let cal = lidarxdp_testkit::data("velodyne/vlp16/calibration/VLP16db.yaml");
        let text = format!(
            "[capture]\niface = \"eth0\"\n[[sensors]]\nmodel = \"vlp16\"\ncalibration = {:?}\n{toml}",
            cal.display().to_string()
        );
        let settings: Settings = toml::from_str(&text).unwrap();
        let plan = build(settings, None, &Ros2Env::default()).unwrap();
        pipeline(plan.sensors().next().unwrap()).unwrap()
    }

    /// Frames closed by the idle poll `after_ms` after the last of 20 packets (a quarter turn).
    fn closed_after(toml: &str, after_ms: u64) -> usize {
        let mut p = pipeline_of(toml);
        let mut out = Vec::new();
        let mut last = 0;
        for (payload, t) in first_packets(20) {
            p.push(&payload, t, &mut out);
            last = t;
        }
        assert!(out.is_empty(), "a quarter turn closes no frame by itself");
        p.poll_timeout(last + after_ms * 1_000_000, &mut out);
        out.len()
    }

    /// `frame_timeout_ms` reaches the pipeline: the open frame is published after that much
    /// silence, not before; the default is 200 ms.
    #[test]
    fn frame_timeout_ms_sets_the_silence_that_publishes_an_open_frame() {
        assert_eq!(closed_after("frame_timeout_ms = 50", 40), 0);
        assert_eq!(closed_after("frame_timeout_ms = 50", 60), 1);
        assert_eq!(closed_after("", 150), 0);
        assert_eq!(closed_after("", 250), 1);
        assert_eq!(closed_after("frame_timeout_ms = 1000", 250), 0);
        assert_eq!(closed_after("frame_timeout_ms = 1000", 1100), 1);
    }
}
