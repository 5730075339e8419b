//! `lidarxdp-bench peers-decode`: lidarxdp's decode-only measurement of `peers` (issue 15).
//!
//! Loads a payload file (records of `[u64 LE pcap time ns][u32 LE length][UDP payload]`,
//! written by [`crate::peers_input`]) into memory, builds one [`ScanPipeline`] as `lidarxdp
//! decode` does (same model, calibration, datasheet range limits), pushes the first
//! `--warmup` packets untimed, then times every other packet through it (decode, scan cut,
//! frame assembly with time stamps) with this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`),
//! as `userspace/benches/{velodyne,ouster,hesai}.rs` do. The last, open frame is not
//! flushed (the peers do not flush theirs either). Prints one JSON object: timed `packets`,
//! `frames` completed, `points` published and `ns` (in the `--point-type` layout, default
//! `autoware`); and `copy_gbs`, the memory copy
//! bandwidth measured right after in the same thread ([`copy_bandwidth`]), the write bound of
//! 32-byte points on this machine in this run.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};
use lidarxdp_core::valid::RangeGate;

/// `peers-decode` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// Payload file.
    #[arg(long)]
    payloads: PathBuf,
    /// Packets decoded untimed first.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Sensor model.
    #[arg(long)]
    sensor: SensorModel,
    /// Calibration (as `lidarxdp decode --calibration`).
    #[arg(long)]
    calibration: PathBuf,
    /// The point layout the decoder writes (as `lidarxdp decode --point-type`).
    #[arg(long, default_value = "autoware")]
    point_type: lidarxdp_core::layout::PointType,
}

/// Reads a payload file: `(pcap time ns, payload)` per record.
pub fn read_payloads(path: &std::path::Path) -> Result<Vec<(u64, Vec<u8>)>> {
    let data = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + 12 <= data.len() {
        let ts = u64::from_le_bytes(data[off..off + 8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(data[off + 8..off + 12].try_into().expect("4 bytes")) as usize;
        off += 12;
        if off + len > data.len() {
            break;
        }
        out.push((ts, data[off..off + len].to_vec()));
        off += len;
    }
    if off != data.len() {
        bail!("{}: truncated record at byte {off}", path.display());
    }
    Ok(out)
}

/// Runs the measurement and prints its JSON line.
pub fn run(a: Args) -> Result<()> {
    let packets = read_payloads(&a.payloads)?;
    if a.warmup >= packets.len() {
        bail!(
            "--warmup {} leaves none of the {} packets to time",
            a.warmup,
            packets.len()
        );
    }
    let (min, max) = a.sensor.datasheet_range_m();
    let cfg = SensorConfig {
        range: RangeGate::from_m(min, max).unwrap(),
        point_type: a.point_type,
        ..SensorConfig::new(0, a.sensor, &a.calibration)
    };
    let mut p = lidarxdp::calibration::pipeline(&cfg)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.calibration.display()))?;
    let mut out = Vec::with_capacity(8);
    for (t, d) in &packets[..a.warmup] {
        p.push(d, *t, &mut out);
        out.clear();
    }
    let points0 = p.counters().points;
    let mut frames = 0usize;
    let t0 = lidarxdp::capture::thread_cpu_ns();
    for (t, d) in &packets[a.warmup..] {
        p.push(d, *t, &mut out);
        frames += out.len();
        out.clear();
    }
    let ns = lidarxdp::capture::thread_cpu_ns() - t0;
    let copy_gbs = copy_bandwidth();
    println!(
        "{}",
        serde_json::json!({
            "packets": packets.len() - a.warmup,
            "frames": frames,
            "points": p.counters().points - points0,
            "ns": ns,
            "copy_gbs": copy_gbs,
        })
    );
    Ok(())
}

/// Bytes per ns (GB/s) `memcpy` moves from one 64 MiB buffer to another (both far larger than
/// the caches) on this thread: four copies timed with the thread's CPU time after one untimed
/// copy that faults the pages in. Divided by 32 it is how many points per ns this machine can
/// write at most: the "limit" column of docs/benchmarks.md.
pub fn copy_bandwidth() -> f64 {
    const BYTES: usize = 64 << 20;
    const COPIES: usize = 4;
    let src = vec![0x5au8; BYTES];
    let mut dst = vec![0u8; BYTES];
    dst.copy_from_slice(&src);
    let t0 = lidarxdp::capture::thread_cpu_ns();
    for _ in 0..COPIES {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    let ns = lidarxdp::capture::thread_cpu_ns().saturating_sub(t0).max(1);
    (COPIES * BYTES) as f64 / ns as f64
}
