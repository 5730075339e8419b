//! Pure helpers of the issue-4 benchmark: quantiles, VLP-16 timestamp rewriting, the latency
//! join and the marking of the summary's targets. No I/O; unit-tested with exact values.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Offset of the VLP-16 data packet's u32 timestamp, µs past the top of the hour,
/// little-endian (VLP-16 User Manual 63-9243, §9.3 "Data Packet Structure": bytes 1200..1204).
pub const VLP16_TIMESTAMP_OFFSET: usize = lidarxdp_core::sensor::velodyne::TIMESTAMP_OFFSET;
/// Size of a VLP-16 data packet (UDP payload), bytes.
pub const VLP16_DATA_LEN: usize = lidarxdp_core::sensor::velodyne::DATA_PACKET_LEN;
/// Microseconds in one hour (the VLP-16 timestamp wraps there).
pub const US_PER_HOUR: u64 = 3_600_000_000;

/// The VLP-16 timestamp field for a sensor time of `unix_ns` (ns since the Unix epoch):
/// whole µs past the top of the hour, in 0..3,600,000,000 (the hour wraps to 0).
pub fn vlp16_timestamp_us(unix_ns: u64) -> u32 {
    ((unix_ns / 1_000) % US_PER_HOUR) as u32
}

/// Writes the timestamp of `unix_ns` into a VLP-16 data packet (bytes 1200..1204, LE µs past
/// the hour). Returns `false` and leaves `payload` untouched when it is not a 1206-byte data
/// packet (position packets and other datagrams are sent as recorded).
pub fn rewrite_vlp16_timestamp(payload: &mut [u8], unix_ns: u64) -> bool {
    if payload.len() != VLP16_DATA_LEN {
        return false;
    }
    let ts = vlp16_timestamp_us(unix_ns).to_le_bytes();
    payload[VLP16_TIMESTAMP_OFFSET..VLP16_TIMESTAMP_OFFSET + 4].copy_from_slice(&ts);
    true
}

/// Azimuth of block 0 of a VLP-16 data packet, 0.01° units (bytes 2..4, LE), or `None` when
/// `payload` is not a 1206-byte data packet.
pub fn vlp16_azimuth(payload: &[u8]) -> Option<u16> {
    if payload.len() != VLP16_DATA_LEN {
        return None;
    }
    Some(u16::from_le_bytes([payload[2], payload[3]]))
}

/// The range `[first, last)` of packet indices between the first and the last azimuth wrap
/// (a packet whose block-0 azimuth is below its predecessor's), so that looping it repeats
/// whole rotations and the cut at 0° never sees a jump. `None` when fewer than two wraps
/// exist (loop the whole capture then). Non-data packets are skipped when comparing.
pub fn whole_rotations(azimuths: &[Option<u16>]) -> Option<(usize, usize)> {
    let mut prev: Option<u16> = None;
    let mut wraps = Vec::new();
    for (i, a) in azimuths.iter().enumerate() {
        if let Some(a) = *a {
            if prev.is_some_and(|p| a < p) {
                wraps.push(i);
            }
            prev = Some(a);
        }
    }
    match (wraps.first(), wraps.last()) {
        (Some(&f), Some(&l)) if l > f => Some((f, l)),
        _ => None,
    }
}

/// Quantile `q` in [0, 1] of `sorted` (ascending) by the nearest-rank method: the element at
/// index `ceil(q · n) − 1` (clamped to 0), so q = 0.5 of [1, 2, 3, 4] is 2 and q = 0 the
/// minimum. `None` for an empty slice.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = (q.clamp(0.0, 1.0) * n as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(n - 1)])
}

/// Median of unsorted values (the mean of the two middle ones for an even count); `None` when
/// empty. Used for the per-configuration median over repetitions.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Distribution of points per frame (the contention scenario's proxy for completeness).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of samples.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Minimum.
    pub min: f64,
    /// 0.1 % quantile (nearest rank).
    pub p0_1: f64,
    /// 1 % quantile.
    pub p1: f64,
    /// 10 % quantile.
    pub p10: f64,
    /// 50 % quantile.
    pub p50: f64,
}

/// Mean, standard deviation, minimum and low quantiles of `values`; `None` when empty.
pub fn distribution(values: &[f64]) -> Option<Distribution> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    Some(Distribution {
        n: v.len(),
        mean,
        std: var.sqrt(),
        min: v[0],
        p0_1: quantile(&v, 0.001)?,
        p1: quantile(&v, 0.01)?,
        p10: quantile(&v, 0.10)?,
        p50: quantile(&v, 0.50)?,
    })
}

/// Frame-to-subscriber latencies joined from the generator's and the collector's records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencyJoin {
    /// One latency per (subscriber, frame) matched on `start_ns`, ns (receive − send).
    pub latencies_ns: Vec<i64>,
    /// Received frames with no generator frame of the same `start_ns` (e.g. closed by the
    /// daemon's timeout or partial).
    pub unmatched: usize,
}

/// Joins generator frames `(start_ns, send_ns)` (the send time of the packet during whose
/// decoding the frame completes) with received frames `(start_ns, recv_ns)` on `start_ns`.
/// Generator frames without a send time (completed only by the final flush) are ignored.
pub fn join_latency(sent: &[(u64, Option<u64>)], received: &[(u64, u64)]) -> LatencyJoin {
    let by_start: HashMap<u64, u64> = sent
        .iter()
        .filter_map(|&(s, t)| t.map(|t| (s, t)))
        .collect();
    let mut out = LatencyJoin::default();
    for &(start, recv) in received {
        match by_start.get(&start) {
            Some(&send) => out.latencies_ns.push(recv as i64 - send as i64),
            None => out.unmatched += 1,
        }
    }
    out
}

/// Whether a summary target was met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Met.
    Held,
    /// Not met.
    NotHeld,
    /// Not enough data (a backend missing or failing).
    NoData,
    /// Not met by the measured values, but the AF_XDP figure is only a lower bound (it
    /// absorbed the longest stall tested), so a longer test could still meet it.
    Inconclusive,
}

impl Verdict {
    /// The Markdown marking used in `summary.md`.
    pub fn mark(self) -> &'static str {
        match self {
            Verdict::Held => "**held**",
            Verdict::NotHeld => "**not held**",
            Verdict::NoData => "**no data**",
            Verdict::Inconclusive => "**inconclusive** (AF_XDP figure is a lower bound)",
        }
    }
}

/// "Zero loss on AF_XDP at every rate": `losses` are AF_XDP's lost packets per (rate, rep).
pub fn target_zero_loss(losses: &[u64]) -> Verdict {
    if losses.is_empty() {
        Verdict::NoData
    } else if losses.iter().all(|&l| l == 0) {
        Verdict::Held
    } else {
        Verdict::NotHeld
    }
}

/// "`value` ≤ `limit`" (issue 15's CPU targets); no data without a value.
pub fn target_at_most(value: Option<f64>, limit: f64) -> Verdict {
    match value {
        None => Verdict::NoData,
        Some(v) if v <= limit => Verdict::Held,
        Some(_) => Verdict::NotHeld,
    }
}

/// "`value` < `limit`" (issue 15's latency target); no data without a value.
pub fn target_below(value: Option<f64>, limit: f64) -> Verdict {
    match value {
        None => Verdict::NoData,
        Some(v) if v < limit => Verdict::Held,
        Some(_) => Verdict::NotHeld,
    }
}

/// Stall tolerance: the longest tested stall, ms, after which a configuration lost nothing,
/// given `(stall_ms, lost)` of every run; all runs of a stall length must be loss-free, and so
/// must all shorter tested stalls (a loss at a shorter stall caps the tolerance). 0 when the
/// shortest stall already lost; `None` without runs.
pub fn stall_tolerance(runs: &[(u64, u64)]) -> Option<u64> {
    if runs.is_empty() {
        return None;
    }
    let mut stalls: Vec<u64> = runs.iter().map(|r| r.0).collect();
    stalls.sort_unstable();
    stalls.dedup();
    let mut best = 0;
    for s in stalls {
        if runs.iter().filter(|r| r.0 == s).all(|r| r.1 == 0) {
            best = s;
        } else {
            break;
        }
    }
    Some(best)
}

/// "AF_XDP absorbs stalls ≥ `factor`× longer than `other`": both tolerances in ms. A baseline
/// that absorbs none of the tested stalls (0) is beaten by any AF_XDP tolerance of at least
/// `factor` × the shortest tested stall `shortest_ms`. When the ratio is not met but AF_XDP
/// absorbed the longest tested stall `longest_ms` (its tolerance is a lower bound), the verdict
/// is [`Verdict::Inconclusive`].
pub fn target_stall_ratio(
    xdp_ms: Option<u64>,
    other_ms: Option<u64>,
    factor: u64,
    shortest_ms: u64,
    longest_ms: u64,
) -> Verdict {
    let (Some(x), Some(o)) = (xdp_ms, other_ms) else {
        return Verdict::NoData;
    };
    let need = factor * if o == 0 { shortest_ms } else { o };
    if x >= need {
        Verdict::Held
    } else if x >= longest_ms {
        Verdict::Inconclusive
    } else {
        Verdict::NotHeld
    }
}

/// "In contention AF_XDP loses nothing where `socket` loses anything": `xdp_lost` and
/// `socket_lost` are the lost packets of the contention runs. Held when socket lost nothing
/// (the condition is vacuous) or AF_XDP lost nothing.
pub fn target_contention(xdp_lost: &[u64], socket_lost: &[u64]) -> Verdict {
    if xdp_lost.is_empty() || socket_lost.is_empty() {
        return Verdict::NoData;
    }
    let socket_loses = socket_lost.iter().any(|&l| l > 0);
    if !socket_loses || xdp_lost.iter().all(|&l| l == 0) {
        Verdict::Held
    } else {
        Verdict::NotHeld
    }
}

/// "AF_XDP CPU/packet ≤ recvmmsg's": medians in ns per packet.
pub fn target_cpu(xdp_ns: Option<f64>, recvmmsg_ns: Option<f64>) -> Verdict {
    match (xdp_ns, recvmmsg_ns) {
        (Some(x), Some(r)) if x.is_finite() && r.is_finite() => {
            if x <= r {
                Verdict::Held
            } else {
                Verdict::NotHeld
            }
        }
        _ => Verdict::NoData,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_wraps_at_the_hour() {
        let hour_ns = US_PER_HOUR * 1_000;
        // 10 h, 59 min, 59.999999 s past the epoch's hour: the last µs of an hour.
        let t = 10 * hour_ns + hour_ns - 1_000;
        assert_eq!(vlp16_timestamp_us(t), 3_599_999_999);
        assert_eq!(vlp16_timestamp_us(t + 1_000), 0);
        assert_eq!(vlp16_timestamp_us(t + 1_999), 0);
        assert_eq!(vlp16_timestamp_us(t + 2_000), 1);
        let mut p = vec![0u8; VLP16_DATA_LEN];
        assert!(rewrite_vlp16_timestamp(&mut p, t));
        assert_eq!(&p[1200..1204], &3_599_999_999u32.to_le_bytes());
        assert!(rewrite_vlp16_timestamp(&mut p, t + 1_000 + 1_234_000));
        assert_eq!(&p[1200..1204], &1_234u32.to_le_bytes());
        assert!(p[..1200].iter().chain(&p[1204..]).all(|&b| b == 0));
        let mut short = vec![7u8; 512];
        assert!(!rewrite_vlp16_timestamp(&mut short, t));
        assert!(short.iter().all(|&b| b == 7));
    }

    #[test]
    fn rotations_between_wraps() {
        let a = |v: &[u16]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
        assert_eq!(
            whole_rotations(&a(&[100, 20000, 35000, 50, 18000, 35900, 10, 9000])),
            Some((3, 6))
        );
        assert_eq!(whole_rotations(&a(&[100, 20000, 35000, 50, 9000])), None);
        let mut m = a(&[30000, 10, 20000, 5]);
        m.insert(2, None);
        assert_eq!(whole_rotations(&m), Some((1, 4)));
    }

    #[test]
    fn quantiles_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 0.5), Some(2.0));
        assert_eq!(quantile(&v, 0.51), Some(3.0));
        assert_eq!(quantile(&v, 0.99), Some(4.0));
        assert_eq!(quantile(&v, 1.0), Some(4.0));
        assert_eq!(quantile(&[], 0.5), None);
        let big: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&big, 0.001), Some(1.0));
        assert_eq!(quantile(&big, 0.01), Some(10.0));
        assert_eq!(quantile(&big, 0.10), Some(100.0));
        assert_eq!(quantile(&big, 0.99), Some(990.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN]), None);
    }

    #[test]
    fn distribution_exact() {
        let d = distribution(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(d.n, 8);
        assert_eq!(d.mean, 5.0);
        assert_eq!(d.std, 2.0);
        assert_eq!(d.min, 2.0);
        assert_eq!(d.p0_1, 2.0);
        assert_eq!(d.p10, 2.0);
        assert_eq!(d.p50, 4.0);
        assert_eq!(distribution(&[]), None);
    }

    #[test]
    fn latency_join_on_start_ns() {
        let sent = [(100, Some(1_000)), (200, Some(2_000)), (300, None)];
        let recv = [
            (100, 1_500),
            (200, 2_250),
            (100, 1_700),
            (300, 9_000),
            (400, 1),
        ];
        let j = join_latency(&sent, &recv);
        assert_eq!(j.latencies_ns, vec![500, 250, 700]);
        assert_eq!(j.unmatched, 2);
    }

    #[test]
    fn targets_marked() {
        assert_eq!(target_zero_loss(&[0, 0, 0]), Verdict::Held);
        assert_eq!(target_zero_loss(&[0, 1]), Verdict::NotHeld);
        assert_eq!(target_zero_loss(&[]), Verdict::NoData);

        assert_eq!(
            stall_tolerance(&[(10, 0), (50, 0), (200, 3), (500, 0)]),
            Some(50)
        );
        assert_eq!(stall_tolerance(&[(10, 0), (10, 1)]), Some(0));
        assert_eq!(stall_tolerance(&[]), None);
        assert_eq!(target_at_most(Some(5_000.0), 5_000.0), Verdict::Held);
        assert_eq!(target_at_most(Some(5_000.5), 5_000.0), Verdict::NotHeld);
        assert_eq!(target_at_most(None, 5_000.0), Verdict::NoData);
        assert_eq!(target_below(Some(1_499.0), 1_500.0), Verdict::Held);
        assert_eq!(target_below(Some(1_500.0), 1_500.0), Verdict::NotHeld);
        assert_eq!(target_below(None, 1_500.0), Verdict::NoData);

        assert_eq!(
            target_stall_ratio(Some(500), Some(50), 10, 10, 2000),
            Verdict::Held
        );
        assert_eq!(
            target_stall_ratio(Some(200), Some(50), 10, 10, 2000),
            Verdict::NotHeld
        );
        assert_eq!(
            target_stall_ratio(Some(100), Some(0), 10, 10, 2000),
            Verdict::Held
        );
        assert_eq!(
            target_stall_ratio(Some(50), Some(0), 10, 10, 2000),
            Verdict::NotHeld
        );
        // Quick run: one 200 ms stall, absorbed by both: AF_XDP's 200 is only a lower bound.
        assert_eq!(
            target_stall_ratio(Some(200), Some(200), 2, 200, 200),
            Verdict::Inconclusive
        );
        assert_eq!(
            target_stall_ratio(Some(200), Some(0), 10, 200, 200),
            Verdict::Inconclusive
        );
        assert_eq!(
            target_stall_ratio(None, Some(0), 2, 10, 10),
            Verdict::NoData
        );

        assert_eq!(target_contention(&[0], &[5]), Verdict::Held);
        assert_eq!(target_contention(&[1], &[5]), Verdict::NotHeld);
        assert_eq!(target_contention(&[1], &[0]), Verdict::Held);
        assert_eq!(target_contention(&[], &[0]), Verdict::NoData);

        assert_eq!(target_cpu(Some(800.0), Some(900.0)), Verdict::Held);
        assert_eq!(target_cpu(Some(901.0), Some(900.0)), Verdict::NotHeld);
        assert_eq!(target_cpu(Some(1.0), None), Verdict::NoData);
        assert_eq!(Verdict::NotHeld.mark(), "**not held**");
    }
}
