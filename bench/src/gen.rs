//! `lidarxdp-bench gen`: the load generator.
//!
//! Loads a capture ([`lidarxdp::replay::read_udp_datagrams`]), keeps the whole rotations of a
//! VLP-16 capture (between its first and last azimuth wrap, so the loop seam never cuts a frame
//! short), loops it and sends it with `sendmmsg(2)` in batches of up to `--batch` datagrams.
//!
//! * Pacing: an absolute schedule against `CLOCK_MONOTONIC`: datagram *i* (counted over all
//!   sensors) is due at `start + i / pps`; the sender sleeps until ~50 µs before the next due
//!   time, spins the rest, then sends every datagram already due (up to a batch), so a late
//!   sender catches up back to back and never drifts. `--pps max` sends full batches as fast
//!   as the kernel takes them.
//! * Sensors: `--sensors N` copies of the stream on ports `base-port .. base-port + N − 1`,
//!   interleaved (datagram *i* goes to sensor `i mod N`); `--pps` is the total rate.
//! * Sensor time: each VLP-16 data packet's timestamp (bytes 1200..1204, LE µs past the hour,
//!   VLP-16 manual §9.3) is rewritten to the CLOCK_REALTIME time of its due slot, so sensor time
//!   advances with the send schedule across loops and never goes backwards.
//! * Accounting: `sent` counts datagrams `sendmmsg` reported as sent; a datagram it refused
//!   with a transient error (`ENOBUFS`, `EAGAIN`, ...) is retried up to `--retries` times and
//!   then counted in `not_sent`, so `sent` is exact.
//! * Frames (`--sensor MODEL --calibration FILE`, fixed `--pps`): before sending, the exact byte
//!   sequence of sensor 0 is decoded offline with [`lidarxdp_core::sensor::ScanPipeline`] to learn
//!   which datagram completes each frame; the report then carries each frame's `start_ns`,
//!   points, completing datagram index and that datagram's send time (CLOCK_REALTIME ns, taken
//!   just before the `sendmmsg` call that carried it).
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lidarxdp::sys::clock::realtime_ns;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};
use serde::Serialize;

use crate::stats;

/// Default capture: the bundled VLP-16 dual-return recording.
pub const DEFAULT_PCAP: &str = "../shared/data/velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
/// Default VLP-16 calibration.
pub const DEFAULT_CALIBRATION: &str = "../shared/data/velodyne/vlp16/calibration/VLP16db.yaml";
/// Spin (instead of sleeping) for the last this-many ns before a due time.
const SPIN_NS: u64 = 50_000;
/// A datagram sent more than this after its due time counts as late, ns.
const LATE_NS: u64 = 1_000_000;
/// Largest datagram the generator sends (bytes); longer payloads are refused at load time.
const MAX_DATAGRAM: usize = 65_507;

/// Rate: datagrams per second over all sensors, or as fast as possible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Pps {
    /// Fixed total rate, datagrams/s.
    Fixed(u64),
    /// As fast as `sendmmsg` accepts them.
    Max,
}

/// A `--pps` or `--duration` value outside its form or range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// `--pps` is neither `max` nor an integer in 1..=10,000,000.
    #[error("--pps: {0:?} is not valid; expected `max` or datagrams per second in 1..=10000000")]
    Pps(String),
    /// `--duration` is not a number of seconds in (0, 86400].
    #[error("--duration: {0:?} is not valid; expected seconds in (0, 86400]")]
    Duration(String),
}

/// Parses `--pps`: `max` or an integer in 1..=10,000,000.
///
/// # Errors
/// [`ArgError::Pps`].
pub fn parse_pps(s: &str) -> Result<Pps, ArgError> {
    if s.eq_ignore_ascii_case("max") {
        return Ok(Pps::Max);
    }
    match s.parse::<u64>() {
        Ok(p) if (1..=10_000_000).contains(&p) => Ok(Pps::Fixed(p)),
        _ => Err(ArgError::Pps(s.to_owned())),
    }
}

fn parse_duration(s: &str) -> Result<f64, ArgError> {
    match s.parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d <= 86_400.0 => Ok(d),
        _ => Err(ArgError::Duration(s.to_owned())),
    }
}

/// `lidarxdp-bench gen` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Capture to loop (pcap or pcapng).
    #[arg(long, default_value = DEFAULT_PCAP)]
    pub pcap: PathBuf,
    /// Destination IPv4 address (inside a namespace you created, or loopback).
    #[arg(long)]
    pub to: Ipv4Addr,
    /// Number of sensors (copies of the stream on consecutive ports), 1..=256 (the XDP
    /// filter map holds 256 entries).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub sensors: u16,
    /// UDP port of sensor 0; sensor s uses base-port + s (1..=65535 − sensors).
    #[arg(long, default_value_t = 2368, value_parser = clap::value_parser!(u16).range(1..))]
    pub base_port: u16,
    /// Total rate over all sensors, datagrams/s (1..=10000000), or `max`.
    #[arg(long, value_parser = parse_pps)]
    pub pps: Pps,
    /// Send for this many seconds, (0, 86400].
    #[arg(long, value_parser = parse_duration, conflicts_with = "packets")]
    pub duration: Option<f64>,
    /// Send exactly this many datagrams (over all sensors), 1..=10^10.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000_000))]
    pub packets: Option<u64>,
    /// Datagrams per sendmmsg call, 1..=1024.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub batch: u16,
    /// Retries of a datagram refused with a transient error before it counts as not sent, 0..=1000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub retries: u32,
    /// Pin the sending thread to this CPU.
    #[arg(long)]
    pub pin_cpu: Option<usize>,
    /// Write the report (JSON) to this file; it is always printed to stdout as well.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Decode the sent byte sequence offline with this model to record frame completions.
    #[arg(long)]
    pub sensor: Option<SensorModel>,
    /// Calibration for `--sensor`.
    #[arg(long, default_value = DEFAULT_CALIBRATION)]
    pub calibration: PathBuf,
    /// Loop the whole capture instead of its whole rotations.
    #[arg(long)]
    pub no_trim: bool,
}

/// A frame of sensor 0 as the offline decoder sees the sent byte sequence.
#[derive(Clone, Debug, Serialize)]
pub struct FrameRecord {
    /// Frame start, ns since the Unix epoch on the (rewritten) sensor clock.
    pub start_ns: u64,
    /// Points in the frame.
    pub points: u64,
    /// Index (over all sensors) of the datagram during whose decoding the frame was emitted;
    /// `null` when only the final flush closes it.
    pub completing_packet: Option<u64>,
    /// CLOCK_REALTIME ns just before the `sendmmsg` call carrying that datagram; `null` when it
    /// was not sent.
    pub send_ns: Option<u64>,
}

/// What the generator sent (the `--report` JSON).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Capture file.
    pub pcap: String,
    /// Datagrams of one loop (after trimming to whole rotations).
    pub loop_len: usize,
    /// Destination address.
    pub to: String,
    /// Target rate, datagrams/s over all sensors (`null` = max).
    pub pps_target: Option<u64>,
    /// Datagrams sent, per sensor port: `[[port, count], ...]`.
    pub per_port: Vec<(u16, u64)>,
    /// Datagrams sent in total (sum of `per_port`).
    pub sent: u64,
    /// Datagrams given up after `--retries` transient errors (not sent, not in `sent`).
    pub not_sent: u64,
    /// UDP payload bytes sent.
    pub bytes: u64,
    /// Transient send errors seen (each retry that failed counts once).
    pub send_errors: u64,
    /// errno values of the transient errors, with counts.
    pub errors_by_errno: Vec<(i32, u64)>,
    /// `sendmmsg` calls.
    pub syscalls: u64,
    /// Datagrams sent more than 1 ms after their due time.
    pub late: u64,
    /// Largest lag behind the schedule, ns.
    pub max_lag_ns: u64,
    /// CLOCK_REALTIME ns at the start of sending.
    pub start_ns: u64,
    /// CLOCK_REALTIME ns after the last datagram.
    pub end_ns: u64,
    /// Achieved rate, datagrams/s (sent / (end − start)).
    pub achieved_pps: f64,
    /// Frames of sensor 0 (only with `--sensor`).
    pub frames: Vec<FrameRecord>,
}

/// One loop of the stream: the payloads, with which of them are VLP-16 data packets.
fn load(args: &Args) -> Result<Vec<Vec<u8>>> {
    let (d, _skipped) = lidarxdp::replay::read_udp_datagrams(&args.pcap, None)
        .with_context(|| format!("--pcap {}", args.pcap.display()))?;
    let mut payloads: Vec<Vec<u8>> = d.into_iter().map(|d| d.payload).collect();
    if payloads.is_empty() {
        bail!(
            "--pcap {}: no IPv4/UDP datagrams in the capture",
            args.pcap.display()
        );
    }
    if let Some(p) = payloads.iter().find(|p| p.len() > MAX_DATAGRAM) {
        bail!(
            "--pcap: a datagram of {} bytes exceeds the UDP maximum {MAX_DATAGRAM}",
            p.len()
        );
    }
    if !args.no_trim {
        let az: Vec<Option<u16>> = payloads.iter().map(|p| stats::vlp16_azimuth(p)).collect();
        if let Some((a, b)) = stats::whole_rotations(&az) {
            payloads = payloads[a..b].to_vec();
        }
    }
    Ok(payloads)
}

/// Offset of datagram `i` from the start, ns, at a fixed total rate `pps`.
fn due_offset_ns(i: u64, pps: u64) -> u64 {
    ((i as u128 * 1_000_000_000) / pps as u128) as u64
}

/// The payload of datagram `i` (over all sensors) at sensor time `unix_ns`, into `buf`.
fn fill(buf: &mut Vec<u8>, stream: &[Vec<u8>], sensors: u64, i: u64, unix_ns: u64) {
    let k = i / sensors;
    let src = &stream[(k % stream.len() as u64) as usize];
    buf.clear();
    buf.extend_from_slice(src);
    stats::rewrite_vlp16_timestamp(buf, unix_ns);
}

/// Decodes sensor 0's datagrams offline; returns its frames (send times still unset).
fn offline_frames(
    args: &Args,
    model: SensorModel,
    stream: &[Vec<u8>],
    total: u64,
    pps: u64,
    start_real: u64,
) -> Result<Vec<FrameRecord>> {
    let cfg = SensorConfig::new(0, model, args.calibration.clone());
    let mut p = lidarxdp::calibration::pipeline(&cfg).context("--sensor/--calibration")?;
    let sensors = u64::from(args.sensors);
    let mut out: Vec<Frame> = Vec::new();
    let mut frames = Vec::new();
    let mut buf = Vec::with_capacity(2048);
    for i in (0..total).step_by(sensors as usize) {
        let t = start_real + due_offset_ns(i, pps);
        fill(&mut buf, stream, sensors, i, t);
        out.clear();
        p.push(&buf, t, &mut out);
        for f in &out {
            frames.push(FrameRecord {
                start_ns: f.header.start_ns,
                points: f.points.len() as u64,
                completing_packet: Some(i),
                send_ns: None,
            });
        }
    }
    out.clear();
    p.flush(&mut out);
    for f in &out {
        frames.push(FrameRecord {
            start_ns: f.header.start_ns,
            points: f.points.len() as u64,
            completing_packet: None,
            send_ns: None,
        });
    }
    Ok(frames)
}

/// Pins the calling thread to `cpu` (sched_setaffinity(2)).
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    lidarxdp::capture::pin_to_cpu(cpu).map_err(|e| anyhow::anyhow!("--pin-cpu {cpu}: {e}"))
}

/// Sleeps until `due` minus [`SPIN_NS`], then spins; returns the lag at return, ns.
fn wait_until(due: Instant) -> u64 {
    let now = Instant::now();
    if now >= due {
        return (now - due).as_nanos() as u64;
    }
    let left = due - now;
    if left > Duration::from_nanos(SPIN_NS) {
        std::thread::sleep(left - Duration::from_nanos(SPIN_NS));
    }
    loop {
        let now = Instant::now();
        if now >= due {
            return (now - due).as_nanos() as u64;
        }
        std::hint::spin_loop();
    }
}

fn transient(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOBUFS
            | libc::EAGAIN
            | libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EINTR
            | libc::ENOMEM
    )
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Runs the generator; prints the report as JSON on stdout.
pub fn run(args: Args) -> Result<()> {
    let report = generate(&args)?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.report {
        std::fs::write(path, &json).with_context(|| format!("--report {}", path.display()))?;
    }
    println!("{json}");
    Ok(())
}

/// Sends the stream as configured and returns what was sent.
pub fn generate(args: &Args) -> Result<Report> {
    if u32::from(args.base_port) + u32::from(args.sensors) - 1 > 65_535 {
        bail!(
            "--base-port: {} + {} sensors exceeds port 65535",
            args.base_port,
            args.sensors
        );
    }
    if args.duration.is_none() && args.packets.is_none() {
        bail!("give --duration SECONDS or --packets N");
    }
    if let Some(cpu) = args.pin_cpu {
        pin_to_cpu(cpu)?;
    }
    let stream = load(args)?;
    let sensors = u64::from(args.sensors);
    let total: Option<u64> = match (args.packets, args.duration, args.pps) {
        (Some(n), _, _) => Some(n),
        (None, Some(d), Pps::Fixed(p)) => Some((d * p as f64).round().max(1.0) as u64),
        _ => None,
    };
    let deadline = args.duration.map(Duration::from_secs_f64);

    // Start on a CLOCK_REALTIME instant chosen ahead, so offline decoding can use the exact
    // sensor times of the sent bytes.
    let mut frames = Vec::new();
    let margin_ns = 200_000_000 + total.unwrap_or(0).min(10_000_000) * 20_000 / sensors.max(1);
    let start_real = realtime_ns() + margin_ns;
    if let Some(model) = args.sensor {
        let (Pps::Fixed(pps), Some(n)) = (args.pps, total) else {
            bail!("--sensor needs a fixed --pps (not max) to know the schedule in advance");
        };
        frames = offline_frames(args, model, &stream, n, pps, start_real)?;
    }
    let now = realtime_ns();
    if now > start_real {
        bail!(
            "offline decoding took longer than the start margin ({} ms); send fewer --packets",
            margin_ns / 1_000_000
        );
    }
    std::thread::sleep(Duration::from_nanos(start_real - now));
    let start = Instant::now();
    let start_ns = realtime_ns();

    // SAFETY: socket(2) with constant, valid arguments; the fd is checked and closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        bail!("socket: {}", std::io::Error::last_os_error());
    }
    struct Fd(i32);
    impl Drop for Fd {
        fn drop(&mut self) {
            // SAFETY: the fd was returned by socket(2), is owned here and closed once.
            unsafe { libc::close(self.0) };
        }
    }
    let fd = Fd(fd);
    let addrs: Vec<libc::sockaddr_in> = (0..args.sensors)
        .map(|s| sockaddr(args.to, args.base_port + s))
        .collect();

    let batch = usize::from(args.batch);
    let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| Vec::with_capacity(2048)).collect();
    let mut iovs: Vec<libc::iovec> = vec![
        libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0
        };
        batch
    ];
    // SAFETY: mmsghdr is plain data for which all-zero is a valid (empty) value.
    let mut msgs: Vec<libc::mmsghdr> = (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();

    let mut rep = Report {
        pcap: args.pcap.display().to_string(),
        loop_len: stream.len(),
        to: args.to.to_string(),
        pps_target: match args.pps {
            Pps::Fixed(p) => Some(p),
            Pps::Max => None,
        },
        per_port: addrs
            .iter()
            .map(|a| (u16::from_be(a.sin_port), 0))
            .collect(),
        start_ns,
        ..Report::default()
    };
    let mut errnos: std::collections::BTreeMap<i32, u64> = Default::default();
    // Completing datagrams in increasing index order (offline frames are in send order).
    let completions: Vec<(u64, usize)> = frames
        .iter()
        .enumerate()
        .filter_map(|(fi, f)| f.completing_packet.map(|p| (p, fi)))
        .collect();
    let mut next_completion = 0usize;

    let mut i: u64 = 0; // next datagram index
    let mut retries_left = args.retries;
    loop {
        if total.is_some_and(|n| i >= n) {
            break;
        }
        if deadline.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        // How many datagrams to send now, and their sensor times.
        let mut n = batch as u64;
        if let Some(t) = total {
            n = n.min(t - i);
        }
        let (count, times): (usize, Vec<u64>) = match args.pps {
            Pps::Fixed(pps) => {
                let lag = wait_until(start + Duration::from_nanos(due_offset_ns(i, pps)));
                rep.max_lag_ns = rep.max_lag_ns.max(lag);
                let elapsed = start.elapsed().as_nanos() as u64;
                let mut c = 1u64;
                while c < n && due_offset_ns(i + c, pps) <= elapsed {
                    c += 1;
                }
                // Sensor time = the scheduled slot (as the offline decode assumed), not the
                // actual send time.
                let times = (0..c)
                    .map(|k| start_real + due_offset_ns(i + k, pps))
                    .collect();
                for k in 0..c {
                    if elapsed.saturating_sub(due_offset_ns(i + k, pps)) > LATE_NS {
                        rep.late += 1;
                    }
                }
                (c as usize, times)
            }
            Pps::Max => {
                let t = realtime_ns();
                (n as usize, vec![t; n as usize])
            }
        };
        for k in 0..count {
            let idx = i + k as u64;
            fill(&mut bufs[k], &stream, sensors, idx, times[k]);
            iovs[k] = libc::iovec {
                iov_base: bufs[k].as_mut_ptr().cast(),
                iov_len: bufs[k].len(),
            };
            let a = &addrs[(idx % sensors) as usize];
            let h = &mut msgs[k].msg_hdr;
            h.msg_name = (a as *const libc::sockaddr_in).cast_mut().cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut iovs[k];
            h.msg_iovlen = 1;
            msgs[k].msg_len = 0;
        }
        let send_ns = realtime_ns();
        rep.syscalls += 1;
        // SAFETY: `msgs[..count]` are initialised mmsghdrs whose msg_name points into `addrs`
        // and whose single iovec points into `bufs[k]`; both outlive the call and are not
        // touched until it returns. `count` ≤ msgs.len() and fits in c_uint (≤ 1024).
        let rc = unsafe { libc::sendmmsg(fd.0, msgs.as_mut_ptr(), count as libc::c_uint, 0) };
        let sent = if rc < 0 {
            let e = std::io::Error::last_os_error();
            let errno = e.raw_os_error().unwrap_or(0);
            if !transient(errno) {
                bail!("sendmmsg to {}: {e}", args.to);
            }
            rep.send_errors += 1;
            *errnos.entry(errno).or_default() += 1;
            if retries_left == 0 {
                // Give up on the first datagram of the batch: counted, never silent.
                rep.not_sent += 1;
                retries_left = args.retries;
                i += 1;
            } else {
                retries_left -= 1;
                std::thread::yield_now();
            }
            0
        } else {
            rc as usize
        };
        for (k, buf) in bufs.iter().enumerate().take(sent) {
            let idx = i + k as u64;
            rep.per_port[(idx % sensors) as usize].1 += 1;
            rep.bytes += buf.len() as u64;
            while next_completion < completions.len() && completions[next_completion].0 < idx {
                next_completion += 1; // a completing datagram that was given up
            }
            if next_completion < completions.len() && completions[next_completion].0 == idx {
                frames[completions[next_completion].1].send_ns = Some(send_ns);
                next_completion += 1;
            }
        }
        if sent > 0 {
            retries_left = args.retries;
        }
        rep.sent += sent as u64;
        i += sent as u64;
    }
    rep.end_ns = realtime_ns();
    let secs = (rep.end_ns.saturating_sub(rep.start_ns)) as f64 / 1e9;
    rep.achieved_pps = if secs > 0.0 {
        rep.sent as f64 / secs
    } else {
        0.0
    };
    rep.errors_by_errno = errnos.into_iter().collect();
    rep.frames = frames;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_absolute() {
        assert_eq!(due_offset_ns(0, 754), 0);
        assert_eq!(due_offset_ns(754, 754), 1_000_000_000);
        assert_eq!(due_offset_ns(1, 3), 333_333_333);
        assert_eq!(due_offset_ns(3_000_000_000, 3), 1_000_000_000_000_000_000);
    }

    #[test]
    fn pps_flag() {
        assert_eq!(parse_pps("max"), Ok(Pps::Max));
        assert_eq!(parse_pps("7540"), Ok(Pps::Fixed(7540)));
        assert!(parse_pps("0").unwrap_err().to_string().contains("--pps"));
        assert!(parse_pps("fast").is_err());
        assert!(
            parse_duration("0")
                .unwrap_err()
                .to_string()
                .contains("--duration")
        );
        assert_eq!(parse_duration("2.5"), Ok(2.5));
    }

    #[test]
    fn interleaved_fill() {
        let stream = vec![vec![1u8; 1206], vec![2u8; 1206], vec![3u8; 10]];
        let mut b = Vec::new();
        // 2 sensors: datagrams 0,1 are packet 0 of each sensor; 4,5 packet 2; 6 wraps to 0.
        fill(&mut b, &stream, 2, 5, 1_000_000_000);
        assert_eq!(b, vec![3u8; 10]);
        fill(&mut b, &stream, 2, 6, 5_000);
        assert_eq!(b[0], 1);
        assert_eq!(&b[1200..1204], &5u32.to_le_bytes());
    }
}
