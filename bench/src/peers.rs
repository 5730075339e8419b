//! `lidarxdp-bench peers` (issue 15): lidarxdp against the decoders users would otherwise
//! pick, on every Velodyne, Ouster and Hesai capture of `../shared/data`, in interleaved
//! rounds (run by `cargo xtask bench --peers`, which builds the binaries, the Python venv and
//! the Hesai SDK harness first).
//!
//! Per round and capture, in this order (lidarxdp, peer, lidarxdp, peer...):
//! 1. decode only, payloads in memory, thread CPU time: `lidarxdp-bench peers-decode`
//!    ([`crate::peers_decode`]) against `bench/peers/py/peer.py LIB decode` or the Hesai
//!    harness (`bench/peers/hesai/harness.cpp`);
//! 2. Velodyne and Ouster: end to end from a looped recording ([`crate::peers_input`]):
//!    `lidarxdp decode --pcap FILE --sensor M --calibration C` against `peer.py LIB e2e`,
//!    then `peer.py LIB imports` (the same interpreter and imports, nothing else), whose CPU
//!    time is subtracted from the `e2e` run of the same round. Whole-process CPU time (user +
//!    system, every thread) and peak RSS come from wait4(2) on the child.
//!
//! After the rounds, peak memory on recordings of 1, 10 and the end-to-end loop count.
//! Writes `peers.csv` (every run), `summary.md` and `peers_ratios.svg` into `--out`, and with
//! `--docs` rewrites the section between `<!-- peers:begin -->` and `<!-- peers:end -->`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::peers_input::{self, Capture, Loaded, Vendor};
use lidarxdp_core::layout::{POINT_TYPES, PointType};

/// Tool-name prefix of lidarxdp's decode-only rows in a layout other than `autoware`
/// (`lidarxdp:xyzi`, ...).
pub const LAYOUT_TOOL: &str = "lidarxdp:";
use crate::peers_report;

/// `peers` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The `lidarxdp` binary (release) whose `decode` runs end to end.
    #[arg(long)]
    pub daemon: PathBuf,
    /// Python of the peers' venv (velodyne-decoder, ouster-sdk).
    #[arg(long)]
    pub python: PathBuf,
    /// `bench/peers/py/peer.py`.
    #[arg(long)]
    pub script: PathBuf,
    /// The Hesai SDK harness binary; without it the Hesai rows are skipped.
    #[arg(long)]
    pub hesai_peer: Option<PathBuf>,
    /// Why the Hesai harness is missing (printed in the summary).
    #[arg(long, default_value = "")]
    pub hesai_missing: String,
    /// The captures (`../shared/data`).
    #[arg(long)]
    pub data: PathBuf,
    /// Scratch folder for payload files and looped recordings (under target/).
    #[arg(long)]
    pub work: PathBuf,
    /// Results folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Two rounds and small inputs (a smoke test, not for the docs).
    #[arg(long)]
    pub quick: bool,
    /// Rounds (default 7, 2 with --quick).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Only captures whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// End-to-end recordings: at least this many MB of Velodyne payloads (default 50; quick 8).
    #[arg(long)]
    pub velodyne_e2e_mb: Option<u64>,
    /// End-to-end recordings: at least this many MB of Ouster payloads (default 400; quick
    /// 32). ouster-sdk reads and decodes a file so fast that its Python start-up (about
    /// 0.6 s, varying by ±0.1 s) would otherwise dominate.
    #[arg(long)]
    pub ouster_e2e_mb: Option<u64>,
    /// Keep the looped recordings in `--work` (for profiling by hand).
    #[arg(long)]
    pub keep_recordings: bool,
    /// docs/benchmarks.md: rewrite its peers section (full runs).
    #[arg(long)]
    pub docs: Option<PathBuf>,
    /// Where the docs' copy of the plot goes (with --docs).
    #[arg(long)]
    pub docs_plot: Option<PathBuf>,
}

/// One process run (one CSV row).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Round (0-based); rounds beyond the timed ones are the memory series.
    pub round: usize,
    /// Capture name.
    pub capture: String,
    /// `velodyne`, `ouster`, `hesai`.
    pub vendor: String,
    /// `decode` (in memory), `e2e` (from the file), `startup` (imports only), `memory`.
    pub kind: String,
    /// `lidarxdp` or the peer's name.
    pub tool: String,
    /// Loops of the capture in the input.
    pub loops: u64,
    /// Input size, MB (payload bytes for decode; file size otherwise).
    pub input_mb: f64,
    /// Packets timed (decode only).
    pub packets: u64,
    /// Frames (scans) the tool completed.
    pub frames: u64,
    /// Points the tool returned (peers: every slot or pixel they emit).
    pub points: u64,
    /// Decode: thread CPU ns of the timed packets. Others: the process's user + system ns.
    pub cpu_ns: u64,
    /// Wall time of the process, ns.
    pub wall_ns: u64,
    /// Peak RSS of the process, KiB (wait4's ru_maxrss).
    pub maxrss_kb: u64,
    /// lidarxdp's decode only: the memory copy bandwidth of the same process right after
    /// the timed packets, bytes per ns (= GB/s; thread CPU time); 0 otherwise. ÷ 32 it is the
    /// rate at which the machine can write 32-byte points, the bound of any decoder.
    pub copy_gbs: f64,
    /// Empty, or why the run failed.
    pub error: String,
}

/// What one child process did.
struct Proc {
    stdout: String,
    stderr: String,
    cpu_ns: u64,
    wall_ns: u64,
    maxrss_kb: u64,
    ok: bool,
}

/// Runs `cmd` to the end; CPU time and peak RSS from wait4(2).
fn measure(cmd: &mut Command) -> Result<Proc> {
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {cmd:?}"))?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let _ = out.read_to_string(&mut stdout);
    let stderr = err_reader.join().unwrap_or_default();
    let pid = child.id() as libc::pid_t;
    let mut status = 0i32;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (std's Child only reaps in wait/try_wait,
    // which are never called on it); `status` and `ru` are valid, writable.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall_ns = t0.elapsed().as_nanos() as u64;
    if rc != pid {
        bail!("wait4 {cmd:?}: {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Ok(Proc {
        stdout,
        stderr,
        cpu_ns: tv(ru.ru_utime) + tv(ru.ru_stime),
        wall_ns,
        maxrss_kb: ru.ru_maxrss as u64,
        ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    })
}

/// The last line of `s` that parses as a JSON object.
fn last_json(s: &str) -> Option<serde_json::Value> {
    s.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .filter(|v| v.is_object())
}

/// Frames and points from `lidarxdp decode`'s summary line on stderr
/// (`decode: … 12 frames, 345 points; …`).
fn decode_summary(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr.lines().rev().find(|l| l.starts_with("decode: "))?;
    let num_before = |word: &str| -> Option<u64> {
        let i = line.find(word)?;
        line[..i].trim_end().rsplit(' ').next()?.parse().ok()
    };
    Some((num_before(" frames,")?, num_before(" points")?))
}

/// Prepared inputs of one capture.
struct Inputs {
    c: Capture,
    payloads: PathBuf,
    dec_loops: u64,
    warmup: u64,
    dec_mb: f64,
    e2e: Option<(PathBuf, u64, f64)>,
    memory: Vec<(PathBuf, u64, f64)>,
}

impl Args {
    fn data(&self, rel: &str) -> PathBuf {
        self.data.join(rel)
    }

    fn base_row(&self, round: usize, inp: &Inputs, kind: &str, tool: &str) -> Row {
        Row {
            round,
            capture: inp.c.name.to_owned(),
            vendor: inp.c.vendor.name().to_owned(),
            kind: kind.to_owned(),
            tool: tool.to_owned(),
            loops: 0,
            input_mb: 0.0,
            packets: 0,
            frames: 0,
            points: 0,
            cpu_ns: 0,
            wall_ns: 0,
            maxrss_kb: 0,
            copy_gbs: 0.0,
            error: String::new(),
        }
    }

    /// `peer.py LIB` in the peers' interpreter, in the environment every Python run shares:
    /// no stray warnings in the measured output, no byte-code written next to the script, and
    /// one OpenBLAS thread (`OPENBLAS_NUM_THREADS=1` starts no pool thread). numpy starts
    /// OpenBLAS's thread pool at import, and an idle pool thread spins on the other core for
    /// about 0.1 s before it sleeps. Neither decoder calls BLAS, so the spin measures numpy,
    /// not the decoder, and the subtraction of the import-only run does not cancel it: it
    /// cost an import-only run 0.08–0.11 s and a decoding run 0.12–0.14 s (the 2-core machine
    /// of docs/benchmarks.md), which left 0.03–0.04 s of it in each net time.
    fn python_cmd(&self, lib: &str) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script)
            .arg(lib)
            .env("PYTHONWARNINGS", "ignore")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("OPENBLAS_NUM_THREADS", "1");
        cmd
    }

    fn peer_cmd(&self, c: &Capture, mode: &str) -> Command {
        let mut cmd = self.python_cmd(c.vendor.name());
        cmd.arg(mode);
        match c.vendor {
            Vendor::Velodyne => {
                cmd.arg("--model")
                    .arg(c.vd_model)
                    .arg("--calibration")
                    .arg(self.data(c.calibration));
            }
            _ => {
                cmd.arg("--meta").arg(self.data(c.calibration));
            }
        }
        cmd
    }

    /// Fills a row from a decode-only JSON line.
    fn decode_row(&self, mut row: Row, p: Result<Proc>, inp: &Inputs) -> Row {
        row.loops = inp.dec_loops;
        row.input_mb = inp.dec_mb;
        match p {
            Ok(p) => {
                row.wall_ns = p.wall_ns;
                row.maxrss_kb = p.maxrss_kb;
                match (p.ok, last_json(&p.stdout)) {
                    (true, Some(v)) => {
                        let g = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
                        row.packets = g("packets");
                        row.frames = g("frames");
                        row.points = g("points");
                        row.cpu_ns = g("ns");
                        row.copy_gbs = v.get("copy_gbs").and_then(|x| x.as_f64()).unwrap_or(0.0);
                    }
                    _ => row.error = failure(&p),
                }
            }
            Err(e) => row.error = format!("{e:#}"),
        }
        row
    }

    /// lidarxdp's decode only into layout `t`: tool `lidarxdp` for `autoware` (the row
    /// compared with the peer), `lidarxdp:<layout>` for the others (compared with it).
    fn ours_decode(&self, round: usize, inp: &Inputs, t: PointType) -> Row {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("lidarxdp-bench"));
        let p = measure(
            Command::new(exe)
                .arg("peers-decode")
                .arg("--payloads")
                .arg(&inp.payloads)
                .arg("--warmup")
                .arg(inp.warmup.to_string())
                .arg("--sensor")
                .arg(inp.c.model.name())
                .arg("--calibration")
                .arg(self.data(inp.c.calibration))
                .arg("--point-type")
                .arg(t.name()),
        );
        let tool = match t {
            PointType::Autoware => "lidarxdp".to_owned(),
            _ => format!("{LAYOUT_TOOL}{t}"),
        };
        self.decode_row(self.base_row(round, inp, "decode", &tool), p, inp)
    }

    fn peer_decode(&self, round: usize, inp: &Inputs) -> Option<Row> {
        let c = &inp.c;
        let p = match c.vendor {
            Vendor::Hesai => {
                let h = self.hesai_peer.as_ref()?;
                measure(
                    Command::new(h)
                        .arg(&inp.payloads)
                        .arg(self.data(c.calibration))
                        .arg(inp.warmup.to_string()),
                )
            }
            _ => measure(
                self.peer_cmd(c, "decode")
                    .arg("--payloads")
                    .arg(&inp.payloads)
                    .arg("--warmup")
                    .arg(inp.warmup.to_string()),
            ),
        };
        Some(self.decode_row(self.base_row(round, inp, "decode", c.vendor.peer()), p, inp))
    }

    /// `lidarxdp decode` of a whole file.
    fn ours_file(&self, round: usize, inp: &Inputs, kind: &str, f: &(PathBuf, u64, f64)) -> Row {
        let mut row = self.base_row(round, inp, kind, "lidarxdp");
        row.loops = f.1;
        row.input_mb = f.2;
        let p = measure(
            Command::new(&self.daemon)
                .arg("decode")
                .arg("--pcap")
                .arg(&f.0)
                .arg("--sensor")
                .arg(inp.c.model.name())
                .arg("--calibration")
                .arg(self.data(inp.c.calibration)),
        );
        match p {
            Ok(p) => {
                row.cpu_ns = p.cpu_ns;
                row.wall_ns = p.wall_ns;
                row.maxrss_kb = p.maxrss_kb;
                match (p.ok, decode_summary(&p.stderr)) {
                    (true, Some((frames, points))) => {
                        row.frames = frames;
                        row.points = points;
                    }
                    _ => row.error = failure(&p),
                }
            }
            Err(e) => row.error = format!("{e:#}"),
        }
        row
    }

    /// lidarxdp's Python package reading a whole file (`py-e2e`: `peer.py lidarxdp e2e`) or
    /// its imports only (`py-startup`), in the peers' interpreter.
    fn py_file(&self, round: usize, inp: &Inputs, f: Option<&(PathBuf, u64, f64)>) -> Row {
        let kind = if f.is_some() { "py-e2e" } else { "py-startup" };
        let mut row = self.base_row(round, inp, kind, "lidarxdp-python");
        let mut cmd = self.python_cmd("lidarxdp");
        match f {
            Some(f) => {
                row.loops = f.1;
                row.input_mb = f.2;
                cmd.arg("e2e")
                    .arg("--pcap")
                    .arg(&f.0)
                    .arg("--model")
                    .arg(inp.c.model.name())
                    .arg("--calibration")
                    .arg(self.data(inp.c.calibration));
            }
            None => {
                cmd.arg("imports");
            }
        }
        self.python_row(row, measure(&mut cmd))
    }

    /// Fills `row` from a Python run's process figures and its last JSON line.
    fn python_row(&self, mut row: Row, p: Result<Proc>) -> Row {
        match p {
            Ok(p) => {
                row.cpu_ns = p.cpu_ns;
                row.wall_ns = p.wall_ns;
                row.maxrss_kb = p.maxrss_kb;
                match (p.ok, last_json(&p.stdout)) {
                    (true, Some(v)) => {
                        let g = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
                        row.frames = g("frames");
                        row.points = g("points");
                    }
                    _ => row.error = failure(&p),
                }
            }
            Err(e) => row.error = format!("{e:#}"),
        }
        row
    }

    /// The peer's read-and-decode of a whole file (`e2e`) or its imports only (`startup`).
    fn peer_file(
        &self,
        round: usize,
        inp: &Inputs,
        kind: &str,
        f: Option<&(PathBuf, u64, f64)>,
    ) -> Row {
        let c = &inp.c;
        let mut row = self.base_row(round, inp, kind, c.vendor.peer());
        let p = match f {
            Some(f) => {
                row.loops = f.1;
                row.input_mb = f.2;
                measure(self.peer_cmd(c, "e2e").arg("--pcap").arg(&f.0))
            }
            None => measure(self.python_cmd(c.vendor.name()).arg("imports")),
        };
        self.python_row(row, p)
    }
}

fn failure(p: &Proc) -> String {
    let tail: Vec<&str> = p.stderr.lines().rev().take(3).collect();
    let mut s = format!(
        "failed: {}",
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    );
    s.truncate(300);
    s.replace(['\n', ','], " ")
}

/// Writes the inputs of one capture into `work`.
fn prepare(a: &Args, c: &Capture) -> Result<Inputs> {
    let l: Loaded = peers_input::load(&a.data, c)?;
    // Decode only: one warm-up loop, then at least 24 MiB (quick: 4 MiB) of payloads and 2
    // loops. End to end: see `Args`, and at least 10 loops.
    let dec_bytes: u64 = if a.quick { 4 << 20 } else { 24 << 20 };
    let e2e_mb = match c.vendor {
        Vendor::Ouster => a.ouster_e2e_mb.unwrap_or(if a.quick { 32 } else { 400 }),
        _ => a.velodyne_e2e_mb.unwrap_or(if a.quick { 8 } else { 50 }),
    };
    let e2e_bytes = e2e_mb * 1_000_000;
    let timed = peers_input::loops_for(&l, dec_bytes, 2);
    let dec_loops = timed + 1;
    let payloads = peers_input::work_file(&a.work, c, "payloads.bin");
    let (_, per_loop) = l.write_payloads(&payloads, dec_loops)?;
    let dec_mb = (l.data_bytes * timed) as f64 / 1e6;
    let (e2e, memory) = if c.vendor == Vendor::Hesai {
        (None, Vec::new())
    } else {
        let e2e_loops = peers_input::loops_for(&l, e2e_bytes, 10);
        let write = |loops: u64| -> Result<(PathBuf, u64, f64)> {
            let p = peers_input::work_file(&a.work, c, &format!("x{loops}.pcap"));
            let size = l.write_pcap(&p, loops)?;
            Ok((p, loops, size as f64 / 1e6))
        };
        let e2e = write(e2e_loops)?;
        // Peak memory: 1, 10 and 50 loops besides the end-to-end length (quick: 1 and 10).
        let lengths: &[u64] = if a.quick { &[1, 10] } else { &[1, 10, 50] };
        let mut memory = Vec::new();
        for &loops in lengths.iter().filter(|l| **l != e2e_loops) {
            memory.push(write(loops)?);
        }
        (Some(e2e), memory)
    };
    Ok(Inputs {
        c: c.clone(),
        payloads,
        dec_loops: timed,
        warmup: per_loop,
        dec_mb,
        e2e,
        memory,
    })
}

/// Runs everything and writes the results.
pub fn run(a: Args) -> Result<()> {
    let t_start = Instant::now();
    std::fs::create_dir_all(&a.work).with_context(|| format!("create {}", a.work.display()))?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    for (what, p) in [
        ("lidarxdp binary", &a.daemon),
        ("Python", &a.python),
        ("peer script", &a.script),
    ] {
        if !p.exists() {
            bail!("{what} {} is missing", p.display());
        }
    }
    let rounds = a.rounds.unwrap_or(if a.quick { 2 } else { 7 });
    let mut notes = Vec::new();
    if a.hesai_peer.is_none() {
        notes.push(format!("Hesai rows skipped: {}", a.hesai_missing));
    }
    let mut inputs = Vec::new();
    for c in peers_input::CAPTURES {
        if a.only.as_deref().is_some_and(|o| !c.name.contains(o)) {
            continue;
        }
        if c.vendor == Vendor::Hesai && a.hesai_peer.is_none() {
            continue;
        }
        let t = Instant::now();
        let inp = prepare(&a, c).with_context(|| format!("prepare {}", c.name))?;
        eprintln!(
            "peers: {}: decode input {} loops ({:.1} MB){} in {:.1} s",
            c.name,
            inp.dec_loops,
            inp.dec_mb,
            inp.e2e
                .as_ref()
                .map(|e| format!(", recording {} loops ({:.1} MB)", e.1, e.2))
                .unwrap_or_default(),
            t.elapsed().as_secs_f64()
        );
        inputs.push(inp);
    }
    let mut rows: Vec<Row> = Vec::new();
    let push = |rows: &mut Vec<Row>, r: Row| {
        if !r.error.is_empty() {
            eprintln!(
                "peers: round {} {} {} {}: {}",
                r.round, r.capture, r.kind, r.tool, r.error
            );
        }
        rows.push(r);
    };
    for round in 0..rounds {
        let t = Instant::now();
        for inp in &inputs {
            // Every layout, autoware first, back to back in the round (issue 37's table).
            for t in POINT_TYPES {
                push(&mut rows, a.ours_decode(round, inp, t));
            }
            if let Some(r) = a.peer_decode(round, inp) {
                push(&mut rows, r);
            }
            if let Some(f) = &inp.e2e {
                push(&mut rows, a.ours_file(round, inp, "e2e", f));
                push(&mut rows, a.peer_file(round, inp, "e2e", Some(f)));
                push(&mut rows, a.peer_file(round, inp, "startup", None));
                push(&mut rows, a.py_file(round, inp, Some(f)));
                push(&mut rows, a.py_file(round, inp, None));
            }
        }
        eprintln!(
            "peers: round {}/{rounds} in {:.0} s",
            round + 1,
            t.elapsed().as_secs_f64()
        );
    }
    // Peak memory on the shorter recordings (the longest is the end-to-end one above).
    for inp in &inputs {
        for f in &inp.memory {
            push(&mut rows, a.ours_file(rounds, inp, "memory", f));
            push(&mut rows, a.peer_file(rounds, inp, "memory", Some(f)));
        }
    }
    // The looped recordings are large; the payload files are kept (small, reused by hand).
    for inp in inputs.iter().filter(|_| !a.keep_recordings) {
        for f in inp.memory.iter().chain(&inp.e2e) {
            let _ = std::fs::remove_file(&f.0);
        }
    }
    let csv_path = a.out.join("peers.csv");
    let mut w = csv::Writer::from_path(&csv_path)
        .with_context(|| format!("create {}", csv_path.display()))?;
    for r in &rows {
        w.serialize(r)?;
    }
    w.flush()?;
    let env = environment(&a, rounds, t_start.elapsed().as_secs_f64());
    let report = peers_report::Report::new(&rows, &inputs_summary(&inputs), env, notes);
    let plot = a.out.join("peers_ratios.svg");
    report.plot(&plot)?;
    std::fs::write(
        a.out.join("summary.md"),
        report.summary_md("peers_ratios.svg"),
    )
    .with_context(|| format!("write {}", a.out.display()))?;
    if let Some(docs) = &a.docs {
        let plot_rel = match &a.docs_plot {
            Some(p) => {
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d)?;
                }
                std::fs::copy(&plot, p).with_context(|| format!("copy to {}", p.display()))?;
                relative(p, docs.parent().unwrap_or(Path::new(".")))
            }
            None => relative(&plot, docs.parent().unwrap_or(Path::new("."))),
        };
        let text =
            std::fs::read_to_string(docs).with_context(|| format!("read {}", docs.display()))?;
        let section = report.docs_section(
            &plot_rel,
            &relative(&a.out, docs.parent().unwrap_or(Path::new("."))),
        );
        let new = peers_report::replace_section(&text, &section)
            .with_context(|| format!("{}: peers markers", docs.display()))?;
        std::fs::write(docs, new).with_context(|| format!("write {}", docs.display()))?;
        eprintln!("peers: rewrote the peers section of {}", docs.display());
    }
    eprintln!(
        "peers: {} runs in {:.0} s; results in {}",
        rows.len(),
        t_start.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}

/// `path` relative to `base` when it is below it (else as given), with `/` separators.
fn relative(path: &Path, base: &Path) -> String {
    let p = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let b = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    if let Ok(r) = p.strip_prefix(&b) {
        return r.to_string_lossy().into_owned();
    }
    // One level up (docs/ -> bench/results/...).
    if let Some(parent) = b.parent()
        && let Ok(r) = p.strip_prefix(parent)
    {
        return format!("../{}", r.to_string_lossy());
    }
    path.to_string_lossy().into_owned()
}

/// One line per capture: its inputs.
fn inputs_summary(inputs: &[Inputs]) -> Vec<(String, String)> {
    inputs
        .iter()
        .map(|i| {
            let mut s = format!(
                "decode: {} loops after 1 warm-up loop ({:.1} MB of payloads)",
                i.dec_loops, i.dec_mb
            );
            if let Some(e) = &i.e2e {
                s += &format!("; end to end: {} loops, {:.1} MB pcap", e.1, e.2);
            }
            (i.c.name.to_owned(), s)
        })
        .collect()
}

/// The run's conditions, for the summary.
fn environment(a: &Args, rounds: usize, secs: f64) -> Vec<String> {
    let sh = |c: &str, args: &[&str]| {
        Command::new(c)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    let py_versions = sh(
        a.python.to_str().unwrap_or("python3"),
        &[
            "-c",
            "import importlib.metadata as m, sys; print(sys.version.split()[0], \
             'velodyne-decoder', m.version('velodyne-decoder'), 'ouster-sdk', \
             m.version('ouster-sdk'), 'numpy', m.version('numpy'))",
        ],
    );
    vec![
        format!(
            "{} on {} CPUs ({cpu}), load average at the end {}",
            sh("uname", &["-sr"]),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        ),
        format!(
            "commit {}; {}; {rounds} interleaved rounds; {:.0} s",
            sh("git", &["describe", "--always", "--dirty"]),
            py_versions,
            secs
        ),
        format!(
            "finished {} UTC{}",
            sh("date", &["-u", "+%Y-%m-%d %H:%M"]),
            if a.quick { "; --quick" } else { "" }
        ),
    ]
}
