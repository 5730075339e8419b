//! The counts of `subscribe`: the per-second `--stats` window ([`Window`]) and the frames,
//! points and sequence gaps of each sensor or topic for the summary ([`Tally`], [`Totals`]).
use std::collections::BTreeMap;

use super::output::Out;

/// Per-second statistics of `--stats`.
#[derive(Default)]
pub(super) struct Window {
    pub(super) frames: u64,
    pub(super) bytes: u64,
    /// Frame age at receipt: local receive time minus the frame's `host_ns` (first packet), µs.
    pub(super) ages_us: Vec<u64>,
}

impl Window {
    pub(super) fn report(
        &mut self,
        out: &mut Out,
        secs: f64,
        gaps_total: u64,
        gaps_before: &mut u64,
    ) {
        self.ages_us.sort_unstable();
        let q = |p: f64| {
            self.ages_us
                .get(((self.ages_us.len() as f64 - 1.0) * p).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        out.line(&format!(
            "{:.1} frames/s  {:.1} MB/s  drops {}  latency since first packet p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            self.frames as f64 / secs,
            self.bytes as f64 / secs / 1e6,
            gaps_total - *gaps_before,
            q(0.5) as f64 / 1e3,
            q(0.99) as f64 / 1e3,
            self.ages_us.last().copied().unwrap_or(0) as f64 / 1e3,
        ));
        *gaps_before = gaps_total;
        *self = Window::default();
    }
}

/// Frames, points and sequence gaps of one sensor (or topic).
#[derive(Clone, Copy, Default)]
pub(super) struct Tally {
    pub(super) frames: u64,
    pub(super) points: u64,
    pub(super) gaps: u64,
    last_seq: Option<u64>,
}

impl Tally {
    pub(super) fn add(&mut self, seq: u64, points: u64) {
        if let Some(prev) = self.last_seq
            && seq > prev.saturating_add(1)
        {
            self.gaps += seq - prev - 1;
        }
        self.last_seq = Some(seq);
        self.frames += 1;
        self.points += points;
    }
}

/// The tallies of every sensor, by name.
#[derive(Default)]
pub(super) struct Totals(BTreeMap<String, Tally>);

impl Totals {
    /// Counts a frame of `key` (sensor or topic).
    pub(super) fn add(&mut self, key: &str, seq: u64, points: u64) {
        match self.0.get_mut(key) {
            Some(t) => t.add(seq, points),
            None => self.0.entry(key.to_owned()).or_default().add(seq, points),
        }
    }

    pub(super) fn sum(&self) -> Tally {
        self.0.values().fold(Tally::default(), |a, t| Tally {
            frames: a.frames + t.frames,
            points: a.points + t.points,
            gaps: a.gaps + t.gaps,
            last_seq: None,
        })
    }

    pub(super) fn json(&self) -> serde_json::Value {
        self.0
            .iter()
            .map(|(k, t)| {
                (
                    k.clone(),
                    serde_json::json!({"frames": t.frames, "points": t.points, "gaps": t.gaps}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// `12 frames, 178068 points, 0 gaps`, then `; front: ...; rear: ...` with several.
    pub(super) fn text(&self) -> String {
        let t = self.sum();
        let mut s = format!("{} frames, {} points, {} gaps", t.frames, t.points, t.gaps);
        if self.0.len() > 1 {
            for (name, t) in &self.0 {
                s.push_str(&format!(
                    "; {name}: {} frames, {} points, {} gaps",
                    t.frames, t.points, t.gaps
                ));
            }
        }
        s
    }
}
