//! `summary.md` and the SVG plots of the suite, from its rows.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;

use crate::stats::{self, Verdict};
use crate::suite::{BACKENDS, Row};

/// "median [min–max]" of `v`, with `digits` decimals; "–" when empty.
pub fn spread(v: &[f64], digits: usize) -> String {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let Some(m) = stats::median(&v) else {
        return "–".into();
    };
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() == 1 || lo == hi {
        format!("{m:.digits$}")
    } else {
        format!("{m:.digits$} [{lo:.digits$}–{hi:.digits$}]")
    }
}

fn rate(p: Option<u64>) -> String {
    p.map_or("max".into(), |p| p.to_string())
}

fn ok(r: &&Row) -> bool {
    r.error.is_empty()
}

fn order(label: &str) -> usize {
    BACKENDS
        .iter()
        .position(|b| b.label == label)
        .unwrap_or(usize::MAX)
}

/// Rows grouped by `key`, groups in backend order then key order.
fn group<'a, K: Ord + Clone>(
    rows: &[&'a Row],
    key: impl Fn(&Row) -> K,
) -> BTreeMap<(usize, String, K), Vec<&'a Row>> {
    let mut m: BTreeMap<(usize, String, K), Vec<&Row>> = BTreeMap::new();
    for r in rows {
        m.entry((order(&r.backend), r.config.clone(), key(r)))
            .or_default()
            .push(r);
    }
    m
}

fn where_lost(rs: &[&Row]) -> String {
    let med = |f: &dyn Fn(&Row) -> f64| {
        stats::median(&rs.iter().map(|r| f(r)).collect::<Vec<_>>()).unwrap_or(0.0)
    };
    let parts = [
        ("veth", med(&|r| r.veth_dropped as f64)),
        ("backlog", med(&|r| r.backlog_dropped as f64)),
        ("UDP RcvbufErrors", med(&|r| r.udp_rcvbuf_errors as f64)),
        (
            "UDP InErrors (other)",
            med(&|r| r.udp_in_errors.saturating_sub(r.udp_rcvbuf_errors) as f64),
        ),
        (
            "XSK rx_dropped",
            med(&|r| r.xsk_rx_dropped.unwrap_or(0) as f64),
        ),
        (
            "XSK rx_ring_full",
            med(&|r| r.xsk_rx_ring_full.unwrap_or(0) as f64),
        ),
        (
            "XSK fill_ring_empty",
            med(&|r| r.xsk_fill_ring_empty.unwrap_or(0) as f64),
        ),
        ("decoder rejected", med(&|r| r.decoder_rejected as f64)),
        ("unexplained", med(&|r| r.unexplained as f64)),
    ];
    let s: Vec<String> = parts
        .iter()
        .filter(|(_, v)| *v != 0.0)
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect();
    if s.is_empty() {
        "–".into()
    } else {
        s.join(", ")
    }
}

fn errors_note(rs: &[&Row]) -> String {
    let n = rs.iter().filter(|r| !r.error.is_empty()).count();
    if n == 0 {
        String::new()
    } else {
        format!("{n} failed")
    }
}

/// The Markdown summary: environment, one table per scenario, the targets.
pub fn summary(rows: &[Row], env: &[String], stall_ms: &[u64]) -> String {
    let mut s = String::new();
    let all: Vec<&Row> = rows.iter().collect();
    let sc =
        |name: &str| -> Vec<&Row> { all.iter().copied().filter(|r| r.scenario == name).collect() };
    let _ = writeln!(s, "# AF_XDP vs socket baselines (issue 4)\n");
    for l in env {
        let _ = writeln!(s, "- {l}");
    }
    let _ = writeln!(
        s,
        "\nLoss = generator `sent` − the daemon's `decoded`, summed over its sensors. Cells: median [min–max] over \
         repetitions; \"where\" gives the median of each non-zero counter (veth drops, the input \
         backlog's drops from /proc/net/softnet_stat, UDP RcvbufErrors / other InErrors from \
         /proc/net/snmp, XDP_STATISTICS; fill_ring_empty overlaps rx_dropped and is not summed; \
         with native XDP the veth also counts the redirects the AF_XDP socket dropped, so the \
         larger of the two is summed; \"unexplained\" = lost − the summed counters). Failed runs are listed, never counted \
         as zero loss.\n"
    );

    // 1. Rate ladder.
    let ladder = sc("ladder");
    let _ = writeln!(s, "## 1. Rate ladder\n");
    let _ = writeln!(
        s,
        "Aggregated sensors: 754 pps is one real-time VLP-16; 7,540 pps is 10 and 75,400 pps and \
         `max` are 100 VLP-16s, each on its own UDP port (one daemon configuration with that \
         many `[[sensors]]`, demultiplexed by port); `max` is as fast as the generator gets. \
         AF_XDP runs use a 65,536-frame UMEM (128 MiB), the memory of the sockets' largest \
         SO_RCVBUF.\n"
    );
    let _ = writeln!(
        s,
        "| backend | target pps | achieved pps | sent | decoded | lost | lost % | where | runs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for ((_, cfg, p), rs) in group(&ladder, |r| r.pps_target.unwrap_or(u64::MAX)) {
        let good: Vec<&Row> = rs.iter().copied().filter(ok).collect();
        let f = |g: &dyn Fn(&Row) -> f64| good.iter().map(|r| g(r)).collect::<Vec<_>>();
        let _ = writeln!(
            s,
            "| {cfg} | {} | {} | {} | {} | {} | {} | {} | {} ok {} |",
            rate((p != u64::MAX).then_some(p)),
            spread(&f(&|r| r.achieved_pps), 0),
            spread(&f(&|r| r.sent as f64), 0),
            spread(&f(&|r| r.decoded as f64), 0),
            spread(&f(&|r| r.lost as f64), 0),
            spread(&f(&|r| r.lost_pct), 3),
            where_lost(&good),
            good.len(),
            errors_note(&rs)
        );
    }

    // 2. Contention.
    let cont = sc("contention");
    let _ = writeln!(s, "\n## 2. Contention\n");
    let _ = writeln!(
        s,
        "7,540 pps; decoder pinned to core 0 together with a busy-loop process and the collector \
         (8 subscribers). Points per frame over all subscribers' frames (medians over \
         repetitions).\n"
    );
    let _ = writeln!(
        s,
        "| backend | lost | lost % | frames recv | mean | std | min | 0.1 % | 1 % | 10 % | 50 % | incomplete frames % | where | runs |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for ((_, cfg, _), rs) in group(&cont, |_| 0) {
        let good: Vec<&Row> = rs.iter().copied().filter(ok).collect();
        let f =
            |g: &dyn Fn(&Row) -> Option<f64>| good.iter().filter_map(|r| g(r)).collect::<Vec<_>>();
        let _ = writeln!(
            s,
            "| {cfg} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ok {} |",
            spread(&f(&|r| Some(r.lost as f64)), 0),
            spread(&f(&|r| Some(r.lost_pct)), 3),
            spread(&f(&|r| r.sub_frames.map(|x| x as f64)), 0),
            spread(&f(&|r| r.points_mean), 1),
            spread(&f(&|r| r.points_std), 1),
            spread(&f(&|r| r.points_min), 0),
            spread(&f(&|r| r.points_p0_1), 0),
            spread(&f(&|r| r.points_p1), 0),
            spread(&f(&|r| r.points_p10), 0),
            spread(&f(&|r| r.points_p50), 0),
            spread(&f(&|r| r.frames_incomplete_pct), 2),
            where_lost(&good),
            good.len(),
            errors_note(&rs)
        );
    }

    // 3. Stalls.
    let stall = sc("stall");
    let _ = writeln!(s, "\n## 3. Stalls\n");
    let _ = writeln!(
        s,
        "36,000 pps; the decoder sleeps MS every 1,000 ms (`--stall MS:1000`; MS:2×MS for \
         stalls of 1,000 ms and more, as the daemon requires MS < EVERY_MS). Lost packets per \
         stall length (\"–\": not run, a shorter stall already lost in every repetition). \
         Tolerance = the longest stall absorbed with zero loss in every repetition, with every \
         shorter stall also loss-free (0 = none of the tested stalls).\n"
    );
    let _ = write!(s, "| configuration |");
    for ms in stall_ms {
        let _ = write!(s, " {ms} ms |");
    }
    let _ = writeln!(s, " tolerance ms |");
    let _ = writeln!(s, "|---|{}---|", "---|".repeat(stall_ms.len()));
    let mut tol: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for ((_, cfg, _), rs) in group(&stall, |_| 0) {
        let _ = write!(s, "| {cfg} |");
        for ms in stall_ms {
            let at: Vec<&Row> = rs
                .iter()
                .copied()
                .filter(|r| r.stall_ms == Some(*ms))
                .collect();
            let good: Vec<f64> = at
                .iter()
                .copied()
                .filter(ok)
                .map(|r| r.lost as f64)
                .collect();
            let e = errors_note(&at);
            let _ = write!(
                s,
                " {}{} |",
                if at.is_empty() {
                    "–".into()
                } else {
                    spread(&good, 0)
                },
                if e.is_empty() {
                    String::new()
                } else {
                    format!(" ({e})")
                }
            );
        }
        let runs: Vec<(u64, u64)> = rs
            .iter()
            .copied()
            .filter(ok)
            .filter_map(|r| Some((r.stall_ms?, r.lost.max(0) as u64)))
            .collect();
        let t = stats::stall_tolerance(&runs);
        tol.insert(cfg.clone(), t);
        let _ = writeln!(s, " {} |", t.map_or("–".into(), |t| t.to_string()));
    }

    // 4. CPU.
    let cpu: Vec<&Row> = ladder
        .iter()
        .copied()
        .filter(|r| r.pps_target == Some(7_540))
        .collect();
    let _ = writeln!(s, "\n## 4. CPU cost at 7,540 pps\n");
    let _ = writeln!(
        s,
        "From the ladder's 7,540 pps runs. Daemon process CPU (utime + stime of all threads, \
         /proc/PID/task/*/stat, 10 ms ticks) while sending, per decoded datagram; receiver and \
         decoder threads from the stats JSON's `backend` object when the daemon reports it. \
         Kernel work done in softirq context on behalf of the daemon (veth NAPI, generic XDP, \
         UDP delivery) is charged to whichever task was interrupted and is not in these figures.\n"
    );
    let _ = writeln!(
        s,
        "| backend | process CPU ns/packet | receiver ns/packet | decoder ns/packet | runs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    let mut cpu_med: BTreeMap<String, Option<f64>> = BTreeMap::new();
    for ((_, cfg, _), rs) in group(&cpu, |_| 0) {
        let good: Vec<&Row> = rs.iter().copied().filter(ok).collect();
        let f =
            |g: &dyn Fn(&Row) -> Option<f64>| good.iter().filter_map(|r| g(r)).collect::<Vec<_>>();
        let c = f(&|r| r.cpu_ns_per_pkt);
        cpu_med.insert(cfg.clone(), stats::median(&c));
        let _ = writeln!(
            s,
            "| {cfg} | {} | {} | {} | {} ok {} |",
            spread(&c, 0),
            spread(&f(&|r| r.receiver_ns_per_pkt), 0),
            spread(&f(&|r| r.decoder_ns_per_pkt), 0),
            good.len(),
            errors_note(&rs)
        );
    }

    // 5. Latency.
    let lat = sc("latency");
    let _ = writeln!(s, "\n## 5. Latency\n");
    let _ = writeln!(
        s,
        "754 pps (one real-time VLP-16), one subscriber. From the send of the datagram that \
         completes a frame (generator, CLOCK_REALTIME just before its sendmmsg) to the frame \
         being completely received by the subscriber, joined on the frame's `start_ns`; \
         quantiles over all frames of all repetitions, µs.\n"
    );
    let _ = writeln!(
        s,
        "| backend | frames joined | unmatched | p50 µs | p99 µs | max µs | runs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for ((_, cfg, _), rs) in group(&lat, |_| 0) {
        let good: Vec<&Row> = rs.iter().copied().filter(ok).collect();
        let mut l: Vec<f64> = good
            .iter()
            .flat_map(|r| r.latencies().iter().map(|&x| x as f64 / 1e3))
            .collect();
        l.sort_by(f64::total_cmp);
        let q = |p: f64| stats::quantile(&l, p).map_or("–".into(), |v| format!("{v:.0}"));
        let _ = writeln!(
            s,
            "| {cfg} | {} | {} | {} | {} | {} | {} ok {} |",
            l.len(),
            good.iter().filter_map(|r| r.lat_unmatched).sum::<u64>(),
            q(0.5),
            q(0.99),
            l.last().map_or("–".into(), |v| format!("{v:.0}")),
            good.len(),
            errors_note(&rs)
        );
    }

    wakeups(&mut s, &ladder, &lat);

    // Targets.
    let xdp_losses: Vec<u64> = ladder
        .iter()
        .copied()
        .filter(|r| r.backend.starts_with("xdp"))
        .filter(ok)
        .map(|r| r.lost.max(0) as u64)
        .collect();
    let xdp_failed = ladder
        .iter()
        .filter(|r| r.backend.starts_with("xdp") && !r.error.is_empty())
        .count();
    let t1 = if xdp_failed > 0 && stats::target_zero_loss(&xdp_losses) == Verdict::Held {
        Verdict::NoData
    } else {
        stats::target_zero_loss(&xdp_losses)
    };
    let shortest = stall_ms.iter().copied().min().unwrap_or(10);
    let longest = stall_ms.iter().copied().max().unwrap_or(10);
    let best_xdp = tol
        .iter()
        .filter(|(k, _)| k.starts_with("xdp"))
        .filter_map(|(_, v)| *v)
        .max();
    let find = |c: &str| tol.get(c).copied().flatten();
    let t2 = stats::target_stall_ratio(
        best_xdp,
        find("socket rcvbuf=default"),
        10,
        shortest,
        longest,
    );
    let t3 = stats::target_stall_ratio(best_xdp, find("socket rcvbuf=max"), 2, shortest, longest);
    let lost_of = |pred: &dyn Fn(&Row) -> bool| -> Vec<u64> {
        cont.iter()
            .copied()
            .filter(ok)
            .filter(|r| pred(r))
            .map(|r| r.lost.max(0) as u64)
            .collect()
    };
    let t4 = stats::target_contention(
        &lost_of(&|r| r.backend.starts_with("xdp")),
        &lost_of(&|r| r.backend == "socket"),
    );
    let best_cpu = cpu_med
        .iter()
        .filter(|(k, _)| k.starts_with("xdp"))
        .filter_map(|(_, v)| *v)
        .reduce(f64::min);
    let t5 = stats::target_cpu(best_cpu, cpu_med.get("recvmmsg").copied().flatten());
    let _ = writeln!(s, "\n## Targets\n");
    let _ = writeln!(s, "| target | result | basis |");
    let _ = writeln!(s, "|---|---|---|");
    let _ = writeln!(
        s,
        "| zero loss on AF_XDP at every rate | {} | {} AF_XDP ladder runs, {} failed, total lost {} |",
        t1.mark(),
        xdp_losses.len(),
        xdp_failed,
        xdp_losses.iter().sum::<u64>()
    );
    let o = |v: Option<u64>| v.map_or("–".into(), |v| format!("{v} ms"));
    let _ = writeln!(
        s,
        "| AF_XDP absorbs stalls ≥ 10× longer than socket at default SO_RCVBUF | {} | AF_XDP {}, socket default {} |",
        t2.mark(),
        o(best_xdp),
        o(find("socket rcvbuf=default"))
    );
    let _ = writeln!(
        s,
        "| AF_XDP absorbs stalls ≥ 2× longer than socket at the largest SO_RCVBUF | {} | AF_XDP {}, socket max {} |",
        t3.mark(),
        o(best_xdp),
        o(find("socket rcvbuf=max"))
    );
    let _ = writeln!(
        s,
        "| in contention AF_XDP loses nothing where `socket` loses anything | {} | AF_XDP lost {:?}, socket lost {:?} |",
        t4.mark(),
        lost_of(&|r| r.backend.starts_with("xdp")),
        lost_of(&|r| r.backend == "socket")
    );
    let _ = writeln!(
        s,
        "| AF_XDP CPU/packet ≤ recvmmsg's | {} | AF_XDP {} ns, recvmmsg {} ns |",
        t5.mark(),
        best_cpu.map_or("–".into(), |v| format!("{v:.0}")),
        cpu_med
            .get("recvmmsg")
            .copied()
            .flatten()
            .map_or("–".into(), |v| format!("{v:.0}"))
    );
    let _ = writeln!(
        s,
        "\nStall tolerance at the longest tested stall is a lower bound. Plots: \
         [loss vs rate](loss_vs_rate.svg), [stall tolerance](stall_tolerance.svg). Raw rows: \
         ladder.csv, contention.csv, stall.csv, latency.csv, cpu.csv; per-run files in raw/."
    );

    let failed: Vec<&Row> = all
        .iter()
        .copied()
        .filter(|r| !r.error.is_empty())
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "\n## Failed runs\n");
        let mut seen = std::collections::BTreeSet::new();
        for r in failed {
            let e: String = r.error.chars().take(300).collect();
            if seen.insert((r.config.clone(), e.clone())) {
                let _ = writeln!(s, "- {} / {}: {}", r.scenario, r.config, e);
            }
        }
    }
    s
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plot: {e}")
}

/// Series `(label, points)` as lines with markers on log-x axes, into an SVG file.
fn plot(
    path: &Path,
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, 0.0f64, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        x0 = 1.0;
        x1 = 10.0;
    }
    let (x0, x1) = ((x0 / 2.0).max(0.5), (x1 * 2.0).max(x0 * 4.0));
    let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x0..x1).log_scale(), 0.0..y1)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc(xlabel)
        .y_desc(ylabel)
        .draw()
        .map_err(err)?;
    for (i, (label, p)) in series.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        c.draw_series(LineSeries::new(p.iter().copied(), col.stroke_width(2)))
            .map_err(err)?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col));
        c.draw_series(p.iter().map(|&(x, y)| Circle::new((x, y), 4, col.filled())))
            .map_err(err)?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Loss (% of sent, median over repetitions) against the achieved rate, per backend.
pub fn plot_loss_vs_rate(rows: &[Row], path: &Path) -> Result<()> {
    let ladder: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == "ladder" && r.error.is_empty())
        .collect();
    let mut series = Vec::new();
    let mut by: BTreeMap<(usize, String), BTreeMap<u64, Vec<&Row>>> = BTreeMap::new();
    for r in ladder {
        by.entry((order(&r.backend), r.config.clone()))
            .or_default()
            .entry(r.pps_target.unwrap_or(u64::MAX))
            .or_default()
            .push(r);
    }
    for ((_, cfg), m) in by {
        let p: Vec<(f64, f64)> = m
            .values()
            .filter_map(|rs| {
                let x = stats::median(&rs.iter().map(|r| r.achieved_pps).collect::<Vec<_>>())?;
                let y = stats::median(&rs.iter().map(|r| r.lost_pct).collect::<Vec<_>>())?;
                Some((x.max(1.0), y.max(0.0)))
            })
            .collect();
        series.push((cfg, p));
    }
    plot(
        path,
        "Loss vs rate (median over repetitions)",
        "achieved rate, datagrams/s (log)",
        "lost, % of sent",
        &series,
    )
}

/// Lost datagrams (median) against the stall length, per configuration.
pub fn plot_stalls(rows: &[Row], path: &Path) -> Result<()> {
    let mut by: BTreeMap<(usize, String), BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.scenario == "stall" && r.error.is_empty())
    {
        if let Some(ms) = r.stall_ms {
            by.entry((order(&r.backend), r.config.clone()))
                .or_default()
                .entry(ms)
                .or_default()
                .push(r.lost_pct);
        }
    }
    let series: Vec<(String, Vec<(f64, f64)>)> = by
        .into_iter()
        .map(|((_, cfg), m)| {
            let p = m
                .into_iter()
                .filter_map(|(ms, v)| Some((ms as f64, stats::median(&v)?.max(0.0))))
                .collect();
            (cfg, p)
        })
        .collect();
    plot(
        path,
        "Stall tolerance at 36,000 pps (--stall MS:1000)",
        "decoder stall, ms (log)",
        "lost, % of sent",
        &series,
    )
}

/// Section 6, the wake-ups of issue 15: per configuration (backend, UMEM, `--wait`), the
/// decoder thread's CPU per received datagram (`backend.decoder_cpu_ns`, thread CPU time) and
/// idle waits per datagram at 7,540 and 75,400 pps (ladder), the latency scenario's p50/p99,
/// and the three targets (≤ 5 µs at 7,540, ≤ 3 µs at 75,400, p99 < 1.5 ms) per
/// configuration. Nothing is written when the ladder has neither rate.
fn wakeups(s: &mut String, ladder: &[&Row], lat: &[&Row]) {
    const RATES: [(u64, f64); 2] = [(7_540, 5_000.0), (75_400, 3_000.0)];
    let rows: Vec<&Row> = ladder
        .iter()
        .copied()
        .filter(|r| RATES.iter().any(|(p, _)| r.pps_target == Some(*p)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## 6. Wake-ups (issue 15)\n");
    let _ = writeln!(
        s,
        "Decoder thread CPU (CLOCK_THREAD_CPUTIME_ID over the daemon's life, from the stats \
         JSON) per received datagram and idle waits per datagram, ladder runs (median \
         [min–max] over repetitions); latency p50/p99 of the latency scenario (754 pps). \
         Targets: ≤ 5,000 ns at 7,540 pps, ≤ 3,000 ns at 75,400 pps, p99 < 1,500 µs.\n"
    );
    let _ = writeln!(
        s,
        "| configuration | ns/pkt 7,540 | waits/pkt 7,540 | ns/pkt 75,400 | waits/pkt 75,400 | \
         latency p50 / p99 µs | ≤ 5 µs | ≤ 3 µs | p99 < 1.5 ms | runs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    let mut cfgs: Vec<(usize, String)> = rows
        .iter()
        .map(|r| (order(&r.backend), r.config.clone()))
        .collect();
    cfgs.sort();
    cfgs.dedup();
    for (_, cfg) in cfgs {
        let mut cells = Vec::new();
        let mut marks = Vec::new();
        let mut runs = Vec::new();
        for (pps, limit) in RATES {
            let rs: Vec<&Row> = rows
                .iter()
                .copied()
                .filter(|r| r.config == cfg && r.pps_target == Some(pps))
                .collect();
            let good: Vec<&Row> = rs.iter().copied().filter(ok).collect();
            let ns: Vec<f64> = good.iter().filter_map(|r| r.decoder_ns_per_pkt).collect();
            let w: Vec<f64> = good.iter().filter_map(|r| r.waits_per_pkt).collect();
            cells.push(spread(&ns, 0));
            cells.push(spread(&w, 3));
            marks.push(stats::target_at_most(stats::median(&ns), limit).mark());
            runs.push(
                format!("{} ok {}", good.len(), errors_note(&rs))
                    .trim()
                    .to_owned(),
            );
        }
        let lr: Vec<&Row> = lat
            .iter()
            .copied()
            .filter(|r| r.config == cfg)
            .filter(ok)
            .collect();
        let mut l: Vec<f64> = lr
            .iter()
            .flat_map(|r| r.latencies().iter().map(|&x| x as f64 / 1e3))
            .collect();
        l.sort_by(f64::total_cmp);
        let p99 = stats::quantile(&l, 0.99);
        let q = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
        let _ = writeln!(
            s,
            "| {cfg} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} / {} / {} latency |",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            q(stats::quantile(&l, 0.5)),
            q(p99),
            marks[0],
            marks[1],
            stats::target_below(p99, 1_500.0).mark(),
            runs[0],
            runs[1],
            lr.len()
        );
    }
}
