//! Tables, plot, targets and the docs section of `peers` (issue 15), from its CSV rows.
//!
//! Ratios are peer ÷ lidarxdp, paired within a round (both ran back to back), so > 1 means
//! lidarxdp is faster. Cells give the median over rounds and the spread [min–max].
//! * Decode only: ns per packet of the timed packets (thread CPU time).
//! * End to end: process CPU time (user + system); the peer's minus the CPU time of the same
//!   script doing only its imports in the same round (Python start-up subtracted).
//! * Python (issue 27): lidarxdp's Python package against the peer, both from Python in the
//!   peers' interpreter, file to numpy points, each net of its own imports-only run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Result, bail};
use plotters::prelude::*;

use crate::peers::{LAYOUT_TOOL, Row};

/// The tool name of lidarxdp's Python package rows.
const PY_TOOL: &str = "lidarxdp-python";

/// Markers of the generated section in docs/benchmarks.md.
pub const BEGIN: &str = "<!-- peers:begin -->";
/// End marker.
pub const END: &str = "<!-- peers:end -->";

/// The `point_step` of the layout called `name`, 0 for none.
fn layout_step(name: &str) -> usize {
    name.parse::<lidarxdp_core::layout::PointType>()
        .map_or(0, |t| t.point_step())
}

/// Median, min, max.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    /// Median.
    pub med: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

fn spread(v: &[f64]) -> Option<Spread> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Some(Spread {
        med,
        min: s[0],
        max: s[n - 1],
    })
}

fn fmt_ratio(s: Option<Spread>) -> String {
    match s {
        Some(s) => format!("**{:.2}×** [{:.2}–{:.2}]", s.med, s.min, s.max),
        None => "–".into(),
    }
}

fn med(v: &[f64]) -> Option<f64> {
    spread(v).map(|s| s.med)
}

/// The median of `v` with `digits` decimals, "–" without values.
fn med_text(v: &[f64], digits: usize) -> String {
    med(v).map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// Peak RSS samples: `(loops, MB of input, MiB)`.
type RssSamples = Vec<(u64, f64, f64)>;
/// One plotted series: label, colour, x offset, the ratios it takes from a capture.
type PlotSeries = (&'static str, RGBColor, f64, fn(&Cap) -> &Vec<f64>);

/// Per-capture figures.
#[derive(Default)]
struct Cap {
    vendor: String,
    peer: String,
    // decode only
    ours_ns_pkt: Vec<f64>,
    peer_ns_pkt: Vec<f64>,
    ours_mpts: Vec<f64>,
    /// The write bound of 32-byte points in the same process and round, M points/s.
    limit_mpts: Vec<f64>,
    peer_mpts: Vec<f64>,
    dec_ratio: Vec<f64>,
    dec_counts: Option<(u64, u64, u64, u64, u64)>,
    /// Decode only into each point layout: M points/s, and its ratio to `autoware` in the
    /// same round (> 1: faster), by layout name.
    layout_mpts: BTreeMap<String, Vec<f64>>,
    layout_ratio: BTreeMap<String, Vec<f64>>,
    // end to end
    ours_e2e_s: Vec<f64>,
    peer_raw_s: Vec<f64>,
    peer_startup_s: Vec<f64>,
    peer_net_s: Vec<f64>,
    e2e_ratio: Vec<f64>,
    e2e_mb: f64,
    e2e_loops: u64,
    e2e_counts: Option<(u64, u64, u64, u64)>,
    ours_rss: Vec<(u64, f64, f64)>,
    peer_rss: Vec<(u64, f64, f64)>,
    // Python API, end to end, net of start-up
    py_net_s: Vec<f64>,
    py_ratio: Vec<f64>,
    errors: usize,
}

/// Everything the summary and docs need.
pub struct Report {
    caps: Vec<(String, Cap)>,
    inputs: Vec<(String, String)>,
    env: Vec<String>,
    notes: Vec<String>,
}

impl Report {
    /// Groups the rows.
    pub fn new(
        rows: &[Row],
        inputs: &[(String, String)],
        env: Vec<String>,
        notes: Vec<String>,
    ) -> Self {
        let mut order: Vec<String> = Vec::new();
        let mut caps: BTreeMap<String, Cap> = BTreeMap::new();
        for r in rows {
            if !order.contains(&r.capture) {
                order.push(r.capture.clone());
            }
            let c = caps.entry(r.capture.clone()).or_default();
            c.vendor = r.vendor.clone();
            if r.tool != "lidarxdp" && r.tool != PY_TOOL && !r.tool.starts_with(LAYOUT_TOOL) {
                c.peer = r.tool.clone();
            }
            if !r.error.is_empty() {
                c.errors += 1;
            }
        }
        let find = |round: usize, cap: &str, kind: &str, ours: bool| {
            rows.iter().find(|r| {
                r.round == round
                    && r.capture == cap
                    && r.kind == kind
                    && (r.tool == "lidarxdp") == ours
                    && !r.tool.starts_with(LAYOUT_TOOL)
                    && r.error.is_empty()
            })
        };
        let py = |round: usize, cap: &str, kind: &str| {
            rows.iter().find(|r| {
                r.round == round
                    && r.capture == cap
                    && r.kind == kind
                    && r.tool == PY_TOOL
                    && r.error.is_empty()
            })
        };
        let rounds = rows
            .iter()
            .filter(|r| r.kind == "decode")
            .map(|r| r.round + 1)
            .max()
            .unwrap_or(0);
        for name in &order {
            let c = caps.get_mut(name).expect("grouped");
            for round in 0..rounds {
                if let (Some(o), Some(p)) = (
                    find(round, name, "decode", true),
                    find(round, name, "decode", false),
                ) && o.packets > 0
                    && p.packets > 0
                    && o.cpu_ns > 0
                    && p.cpu_ns > 0
                {
                    let on = o.cpu_ns as f64 / o.packets as f64;
                    let pn = p.cpu_ns as f64 / p.packets as f64;
                    c.ours_ns_pkt.push(on);
                    c.peer_ns_pkt.push(pn);
                    c.ours_mpts.push(o.points as f64 / o.cpu_ns as f64 * 1e3);
                    if o.copy_gbs > 0.0 {
                        c.limit_mpts.push(o.copy_gbs / 32.0 * 1e3);
                    }
                    c.peer_mpts.push(p.points as f64 / p.cpu_ns as f64 * 1e3);
                    c.dec_ratio.push(pn / on);
                    c.dec_counts = Some((o.packets, o.frames, o.points, p.frames, p.points));
                }
                let mpts = |r: &Row| r.points as f64 / r.cpu_ns.max(1) as f64 * 1e3;
                if let Some(aw) = find(round, name, "decode", true).filter(|o| o.cpu_ns > 0) {
                    c.layout_mpts
                        .entry("autoware".into())
                        .or_default()
                        .push(mpts(aw));
                    for r in rows.iter().filter(|r| {
                        r.round == round
                            && r.capture == *name
                            && r.kind == "decode"
                            && r.tool.starts_with(LAYOUT_TOOL)
                            && r.error.is_empty()
                            && r.cpu_ns > 0
                    }) {
                        let t = r.tool[LAYOUT_TOOL.len()..].to_owned();
                        c.layout_mpts.entry(t.clone()).or_default().push(mpts(r));
                        c.layout_ratio
                            .entry(t)
                            .or_default()
                            .push(mpts(r) / mpts(aw));
                    }
                }
                if let (Some(o), Some(os), Some(p), Some(s)) = (
                    py(round, name, "py-e2e"),
                    py(round, name, "py-startup"),
                    find(round, name, "e2e", false),
                    find(round, name, "startup", false),
                ) {
                    let net = |a: &Row, b: &Row| (a.cpu_ns as f64 - b.cpu_ns as f64) / 1e9;
                    c.py_net_s.push(net(o, os));
                    c.py_ratio.push(net(p, s) / net(o, os));
                }
                if let (Some(o), Some(p), Some(s)) = (
                    find(round, name, "e2e", true),
                    find(round, name, "e2e", false),
                    find(round, name, "startup", false),
                ) {
                    let os = o.cpu_ns as f64 / 1e9;
                    let raw = p.cpu_ns as f64 / 1e9;
                    let st = s.cpu_ns as f64 / 1e9;
                    c.ours_e2e_s.push(os);
                    c.peer_raw_s.push(raw);
                    c.peer_startup_s.push(st);
                    c.peer_net_s.push(raw - st);
                    c.e2e_ratio.push((raw - st) / os);
                    c.e2e_mb = o.input_mb;
                    c.e2e_loops = o.loops;
                    c.e2e_counts = Some((o.frames, o.points, p.frames, p.points));
                }
            }
            for r in rows.iter().filter(|r| {
                r.capture == *name && (r.kind == "memory" || r.kind == "e2e") && r.error.is_empty()
            }) {
                let v = (r.loops, r.input_mb, r.maxrss_kb as f64 / 1024.0);
                if r.tool == "lidarxdp" {
                    c.ours_rss.push(v);
                } else {
                    c.peer_rss.push(v);
                }
            }
        }
        let caps = order
            .into_iter()
            .map(|n| {
                let c = caps.remove(&n).expect("grouped");
                (n, c)
            })
            .collect();
        Report {
            caps,
            inputs: inputs.to_vec(),
            env,
            notes,
        }
    }

    /// Largest peak RSS per loop count: `(loops, MB of input, MiB)`, sorted by loops.
    fn rss_by_loops(v: &[(u64, f64, f64)]) -> Vec<(u64, f64, f64)> {
        let mut m: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for &(l, mb, rss) in v {
            let e = m.entry(l).or_insert((mb, 0.0));
            e.1 = e.1.max(rss);
        }
        m.into_iter().map(|(l, (mb, r))| (l, mb, r)).collect()
    }

    fn vendor_caps<'a>(&'a self, vendor: &'a str) -> impl Iterator<Item = &'a (String, Cap)> {
        self.caps.iter().filter(move |(_, c)| c.vendor == vendor)
    }

    /// `(target, verdict, basis)` rows.
    fn targets(&self) -> Vec<(String, String, String)> {
        let mut t = Vec::new();
        let ratio_target = |vendor: &str, kind: &str, min: f64, what: String| {
            let mut all = true;
            let mut any = false;
            let mut parts = Vec::new();
            for (n, c) in self.vendor_caps(vendor) {
                let r = match kind {
                    "e2e" => &c.e2e_ratio,
                    "py" => &c.py_ratio,
                    _ => &c.dec_ratio,
                };
                match med(r) {
                    Some(m) => {
                        any = true;
                        if m < min {
                            all = false;
                        }
                        parts.push(format!("{n} {m:.2}×"));
                    }
                    None => {
                        all = false;
                        parts.push(format!("{n} not measured"));
                    }
                }
            }
            let verdict = if !any {
                "not measured".to_owned()
            } else if all {
                "**held**".to_owned()
            } else {
                "**not held**".to_owned()
            };
            (what, verdict, format!("medians: {}", parts.join(", ")))
        };
        t.push(ratio_target(
            "velodyne",
            "e2e",
            4.0,
            "every Velodyne capture ≥ 4× velodyne-decoder end to end".into(),
        ));
        t.push(ratio_target(
            "ouster",
            "e2e",
            3.0,
            "every Ouster capture ≥ 3× ouster-sdk end to end (start-up subtracted)".into(),
        ));
        t.push(ratio_target(
            "velodyne",
            "py",
            4.0,
            "every Velodyne capture ≥ 4× velodyne-decoder, both from Python (issue 27)".into(),
        ));
        t.push(ratio_target(
            "ouster",
            "py",
            3.0,
            "every Ouster capture ≥ 3× ouster-sdk, both from Python (issue 27)".into(),
        ));
        let ours: Vec<(String, RssSamples)> = self
            .caps
            .iter()
            .filter(|(_, c)| !c.ours_rss.is_empty())
            .map(|(n, c)| (n.clone(), Self::rss_by_loops(&c.ours_rss)))
            .collect();
        let max = ours
            .iter()
            .flat_map(|(_, v)| v.iter().map(|x| x.2))
            .fold(0.0f64, f64::max);
        let series: Vec<String> = ours
            .iter()
            .map(|(n, v)| {
                format!(
                    "{n} {}",
                    v.iter()
                        .map(|(l, _, r)| format!("{l}×: {r:.0}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        t.push((
            "lidarxdp peak memory < 100 MB on recordings of any length".into(),
            if ours.is_empty() {
                "not measured".into()
            } else if max < 100.0 {
                "**held**".into()
            } else {
                "**not held**".into()
            },
            format!(
                "largest peak RSS {max:.0} MiB; flat with length (MiB by loops): {}",
                series.join("; ")
            ),
        ));
        t.push(ratio_target(
            "hesai",
            "decode",
            4.0,
            "Hesai ≥ 4× the vendor SDK per packet (decode only)".into(),
        ));
        // Issue 37: a smaller layout writes fewer bytes, so it decodes faster.
        let layout = |caps: &[&str], layouts: &[&str], min: f64, what: String| {
            let mut parts = Vec::new();
            let mut all = true;
            let mut any = false;
            for (n, c) in self.caps.iter().filter(|(n, _)| caps.contains(&n.as_str())) {
                for l in layouts {
                    match c.layout_ratio.get(*l).and_then(|v| med(v)) {
                        Some(m) => {
                            any = true;
                            all &= m >= min;
                            if m < min || layouts.len() == 1 {
                                parts.push(format!("{n} {l} {m:.2}×"));
                            }
                        }
                        None => {
                            all = false;
                            parts.push(format!("{n} {l} not measured"));
                        }
                    }
                }
            }
            let verdict = match (any, all) {
                (false, _) => "not measured",
                (true, true) => "**held**",
                (true, false) => "**not held**",
            };
            let basis = if parts.is_empty() {
                "every median at or above".to_owned()
            } else {
                format!("medians: {}", parts.join(", "))
            };
            (what, verdict.to_owned(), basis)
        };
        t.push(layout(
            &["os2-128", "os0-128"],
            &["xyzi"],
            1.5,
            "`xyzi` ≥ 1.5× `autoware` points/s decoding OS2-128 and OS0-128".into(),
        ));
        let others: Vec<&str> = lidarxdp_core::layout::POINT_TYPES[1..]
            .iter()
            .map(|t| t.name())
            .collect();
        let caps: Vec<&str> = self.caps.iter().map(|(n, _)| n.as_str()).collect();
        t.push(layout(
            &caps,
            &others,
            1.0,
            "no layout decodes slower than `autoware` (points/s, every capture)".into(),
        ));
        t
    }

    fn decode_table(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "| capture | lidarxdp ns/packet | lidarxdp M points/s | limit M points/s (memcpy ÷ 32) | of limit | peer | peer ns/packet | peer M points/s | peer ÷ lidarxdp | timed packets; frames, points (lidarxdp / peer) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        for (n, c) in &self.caps {
            let m = med_text;
            let counts = c.dec_counts.map_or("–".into(), |(p, of, op, pf, pp)| {
                format!("{p}; {of}, {op} / {pf}, {pp}")
            });
            let of_limit = match (med(&c.ours_mpts), med(&c.limit_mpts)) {
                (Some(o), Some(l)) if l > 0.0 => format!("{:.0} %", 100.0 * o / l),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {n} | {} | {} | {} | {of_limit} | {} | {} | {} | {} | {counts} |",
                m(&c.ours_ns_pkt, 0),
                m(&c.ours_mpts, 1),
                m(&c.limit_mpts, 0),
                c.peer,
                m(&c.peer_ns_pkt, 0),
                m(&c.peer_mpts, 1),
                fmt_ratio(spread(&c.dec_ratio)),
            );
        }
    }

    /// Decode only into each point layout: M points/s and the ratio to `autoware`.
    fn layout_table(&self, s: &mut String) {
        let names: Vec<&str> = lidarxdp_core::layout::POINT_TYPES
            .iter()
            .map(|t| t.name())
            .collect();
        let _ = writeln!(
            s,
            "| capture | {} |",
            names
                .iter()
                .map(|n| format!("{n} ({} B)", layout_step(n)))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(s, "|---|{}", "---|".repeat(names.len()));
        for (n, c) in &self.caps {
            let cells: Vec<String> = names
                .iter()
                .map(|t| {
                    let m = c.layout_mpts.get(*t).map_or("–".into(), |v| med_text(v, 1));
                    match c.layout_ratio.get(*t).and_then(|v| spread(v)) {
                        Some(r) => format!("{m} ({:.2}× [{:.2}–{:.2}])", r.med, r.min, r.max),
                        None => m,
                    }
                })
                .collect();
            let _ = writeln!(s, "| {n} | {} |", cells.join(" | "));
        }
    }

    fn e2e_table(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "| capture | recording | lidarxdp CPU s | peer | peer CPU s: whole − start-up = net | peer net ÷ lidarxdp | frames, points (lidarxdp / peer) | peak RSS MiB (lidarxdp / peer) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for (n, c) in &self.caps {
            if c.ours_e2e_s.is_empty() {
                continue;
            }
            let m = |v: &[f64]| med_text(v, 2);
            let counts = c.e2e_counts.map_or("–".into(), |(of, op, pf, pp)| {
                format!("{of}, {op} / {pf}, {pp}")
            });
            let rss = |v: &[(u64, f64, f64)]| {
                Self::rss_by_loops(v)
                    .last()
                    .map_or("–".into(), |x| format!("{:.0}", x.2))
            };
            let _ = writeln!(
                s,
                "| {n} | {} loops, {:.0} MB | {} | {} | {} − {} = {} | {} | {counts} | {} / {} |",
                c.e2e_loops,
                c.e2e_mb,
                m(&c.ours_e2e_s),
                c.peer,
                m(&c.peer_raw_s),
                m(&c.peer_startup_s),
                m(&c.peer_net_s),
                fmt_ratio(spread(&c.e2e_ratio)),
                rss(&c.ours_rss),
                rss(&c.peer_rss),
            );
        }
    }

    fn python_table(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "| capture | recording | lidarxdp (Python) net CPU s | peer | peer net CPU s | peer ÷ lidarxdp (Python) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for (n, c) in &self.caps {
            if c.py_net_s.is_empty() {
                continue;
            }
            let m = |v: &[f64]| med_text(v, 2);
            let _ = writeln!(
                s,
                "| {n} | {} loops, {:.0} MB | {} | {} | {} | {} |",
                c.e2e_loops,
                c.e2e_mb,
                m(&c.py_net_s),
                c.peer,
                m(&c.peer_net_s),
                fmt_ratio(spread(&c.py_ratio)),
            );
        }
    }

    fn memory_table(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "| capture | peak RSS MiB by recording length, lidarxdp | peer |"
        );
        let _ = writeln!(s, "|---|---|---|");
        for (n, c) in &self.caps {
            if c.ours_rss.is_empty() {
                continue;
            }
            let f = |v: &[(u64, f64, f64)]| {
                Self::rss_by_loops(v)
                    .iter()
                    .map(|(l, mb, r)| format!("{l}× ({mb:.1} MB): {r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                s,
                "| {n} | {} | {}: {} |",
                f(&c.ours_rss),
                c.peer,
                f(&c.peer_rss)
            );
        }
    }

    fn targets_table(&self, s: &mut String) {
        let _ = writeln!(s, "| target (issue 15) | verdict | basis |");
        let _ = writeln!(s, "|---|---|---|");
        for (t, v, b) in self.targets() {
            let _ = writeln!(s, "| {t} | {v} | {b} |");
        }
    }

    fn body(&self, s: &mut String, plot: &str) {
        for l in &self.env {
            let _ = writeln!(s, "- {l}");
        }
        for l in &self.notes {
            let _ = writeln!(s, "- **{l}**");
        }
        let errors: usize = self.caps.iter().map(|(_, c)| c.errors).sum();
        if errors > 0 {
            let _ = writeln!(
                s,
                "- **{errors} runs failed** (their rows in peers.csv say why; left out of the medians)"
            );
        }
        let _ = writeln!(s, "\n![peer ÷ lidarxdp per capture]({plot})\n");
        let _ = writeln!(s, "### Targets\n");
        self.targets_table(s);
        let _ = writeln!(
            s,
            "\n### Decode only (payloads in memory, one thread, thread CPU time)\n"
        );
        self.decode_table(s);
        let _ = writeln!(
            s,
            "\n### Decode only into each point layout (issue 37; M points/s, medians; in \
             brackets the ratio to `autoware` in the same round, median [min–max])\n"
        );
        self.layout_table(s);
        let _ = writeln!(
            s,
            "\n### End to end from the file (whole process CPU time, medians)\n"
        );
        self.e2e_table(s);
        let _ = writeln!(
            s,
            "\n### Python: file to numpy points, both from Python (process CPU time net of each \
             one's imports, medians)\n"
        );
        self.python_table(s);
        let _ = writeln!(s, "\n### Peak memory (max RSS of the process)\n");
        self.memory_table(s);
        let _ = writeln!(s, "\n### Inputs\n");
        for (n, i) in &self.inputs {
            let _ = writeln!(s, "- {n}: {i}");
        }
    }

    /// `summary.md` of the results folder.
    pub fn summary_md(&self, plot: &str) -> String {
        let mut s =
            String::from("# Peers: lidarxdp against the decoders users would pick (issue 15)\n\n");
        s += "Written by `cargo xtask bench --peers`; method in docs/benchmarks.md (\"Peers\") and \
              bench/src/peers.rs. Ratios are peer ÷ lidarxdp in the same round (> 1: lidarxdp \
              faster); median [min–max] over rounds.\n\n";
        self.body(&mut s, plot);
        s
    }

    /// The generated part of the docs section (between the markers).
    pub fn docs_section(&self, plot: &str, results: &str) -> String {
        let mut s = format!(
            "Generated by the last full `cargo xtask bench --peers` (raw rows, summary and plot \
             in `{results}`). Ratios are peer ÷ lidarxdp, paired in the same round (> 1: \
             lidarxdp faster); median [min–max] over the rounds.\n\n"
        );
        self.body(&mut s, plot);
        s
    }

    /// Ratio per capture, decode only and end to end, median with min–max bars.
    pub fn plot(&self, path: &Path) -> Result<()> {
        let names: Vec<&str> = self.caps.iter().map(|(n, _)| n.as_str()).collect();
        let n = names.len().max(1);
        let ymax = self
            .caps
            .iter()
            .flat_map(|(_, c)| c.dec_ratio.iter().chain(&c.e2e_ratio))
            .copied()
            .filter(|x| x.is_finite())
            .fold(1.0f64, f64::max)
            * 1.3;
        let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "peer time ÷ lidarxdp time per capture (median, bars: min–max over rounds)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0f64..ymax)?;
        let label = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names
                    .get(i as usize)
                    .map_or(String::new(), |s| s.to_string())
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&label)
            .x_desc("capture")
            .y_desc("peer ÷ lidarxdp (> 1: lidarxdp faster)")
            .disable_x_mesh()
            .draw()?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(-0.5, 1.0), (n as f64 - 0.5, 1.0)],
            BLACK.mix(0.5),
        )))?;
        let series: [PlotSeries; 2] = [
            ("decode only (per packet)", BLUE, -0.12, |c| &c.dec_ratio),
            ("end to end, start-up subtracted", RED, 0.12, |c| {
                &c.e2e_ratio
            }),
        ];
        for (label, color, dx, get) in series {
            let pts: Vec<(f64, Spread)> = self
                .caps
                .iter()
                .enumerate()
                .filter_map(|(i, (_, c))| spread(get(c)).map(|s| (i as f64 + dx, s)))
                .collect();
            chart
                .draw_series(
                    pts.iter()
                        .map(|(x, s)| Circle::new((*x, s.med), 5, color.filled())),
                )?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
            chart.draw_series(pts.iter().map(|(x, s)| {
                PathElement::new(vec![(*x, s.min), (*x, s.max)], color.stroke_width(2))
            }))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperMiddle)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()?;
        root.present()?;
        Ok(())
    }
}

/// `text` with the part between [`BEGIN`] and [`END`] replaced by `section`.
pub fn replace_section(text: &str, section: &str) -> Result<String> {
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        bail!("no {BEGIN} … {END} markers");
    };
    if e < b {
        bail!("{END} comes before {BEGIN}");
    }
    Ok(format!(
        "{}{BEGIN}\n{}\n{}",
        &text[..b],
        section.trim_end(),
        &text[e..]
    ))
}
