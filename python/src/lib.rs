//! `lidarxdp._lidarxdp`: the extension module of the Python package `lidarxdp` (PyO3, abi3
//! for CPython >= 3.9). A thin layer: the decoders are `lidarxdp-core`'s, the capture reader
//! and the settings rules `lidarxdp-client`'s (`offline::PcapFrames`,
//! `settings::DecodeSettings`), so a capture gives the frames `lidarxdp decode` gives, and bad
//! settings the sentences it prints.
//!
//! Points reach numpy without a copy: each frame's point buffer stays in Rust, in a
//! [`Points`] object that exposes numpy's array interface (version 3: `shape`, the
//! `PointXYZIRCAEDT` record `descr`, `data` = address and read-only flag); `numpy.asarray`
//! on it makes an array whose `base` keeps the buffer alive, and which refuses writes.
//!
//! Decoding releases the GIL (`Python::detach`): other Python threads run meanwhile.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use lidarxdp_client::offline::{DecodeSummary, PcapFrames};
use lidarxdp_client::settings::{DecodeSettings, SettingsError};
use lidarxdp_core::HostTime;
use lidarxdp_core::counters::CounterSet;
use lidarxdp_core::frame::{Frame as CoreFrame, FrameClock};
use lidarxdp_core::layout::{POINT_TYPE_NAMES, POINT_TYPES, PointType};
use lidarxdp_core::point::POINT_SIZE;
use lidarxdp_core::point_buf::PointBuf;
use lidarxdp_core::scan::BufferSource;
use lidarxdp_core::sensor::{ScanPipeline, SensorModel, Stamp};
use lidarxdp_core::valid::{Degrees, FovSetting, InvalidValue, Metres, UdpPort};

create_exception!(
    _lidarxdp,
    LidarxdpError,
    PyException,
    "A refused setting, an unreadable file or a capture that cannot be decoded; the message is \
     `lidarxdp decode`'s (the field, its value and its valid range, or the file)."
);

fn err(msg: impl ToString) -> PyErr {
    LidarxdpError::new_err(msg.to_string())
}

fn settings_err(e: SettingsError) -> PyErr {
    err(e)
}

/// The numpy dtype of one point of layout `t`: its fields (names, little-endian types, offsets)
/// and `itemsize` its `point_step`, the padding unnamed.
fn layout_dtype(py: Python<'_>, t: PointType) -> PyResult<Bound<'_, PyAny>> {
    let d = PyDict::new(py);
    let fields = t.fields();
    d.set_item("names", fields.iter().map(|f| f.name).collect::<Vec<_>>())?;
    d.set_item(
        "formats",
        fields
            .iter()
            .map(|f| numpy_code(f.datatype))
            .collect::<Vec<_>>(),
    )?;
    d.set_item(
        "offsets",
        fields.iter().map(|f| f.offset).collect::<Vec<_>>(),
    )?;
    d.set_item("itemsize", t.point_step())?;
    py.import("numpy")?.getattr("dtype")?.call1((d,))
}

/// The numpy type code of a PointField datatype (little-endian).
fn numpy_code(datatype: u8) -> &'static str {
    match datatype {
        1 => "|i1",
        2 => "|u1",
        3 => "<i2",
        4 => "<u2",
        5 => "<i4",
        6 => "<u4",
        7 => "<f4",
        _ => "<f8",
    }
}

/// The numpy `descr` of one point of layout `t` (docs/sensors.md, "Point layouts"):
/// its fields in offset order, little-endian, and the layout's padding as unnamed `|V<n>`
/// entries (numpy's array interface, version 3), so the record is `point_step` bytes.
fn descr(py: Python<'_>, t: PointType) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    let mut at = 0u32;
    let pad = |list: &Bound<'_, PyList>, n: u32| -> PyResult<()> {
        list.append(PyTuple::new(py, ["", &format!("|V{n}")])?)
    };
    for f in t.fields() {
        if f.offset > at {
            pad(&list, f.offset - at)?;
        }
        let code = numpy_code(f.datatype);
        list.append(PyTuple::new(py, [f.name, code])?)?;
        at = f.offset + lidarxdp_core::protocol::datatype_size(f.datatype) * f.count;
    }
    let step = t.point_step() as u32;
    if step > at {
        pad(&list, step - at)?;
    }
    Ok(list)
}

/// Where a frame's points live: the decoder's buffer, or a message read from zenoh (in the
/// publisher's shared memory, or joined from fragments), kept whole while numpy views it.
/// Never read once [`Points`] took the address and count: it only keeps the memory alive.
#[expect(
    dead_code,
    reason = "held only to keep the points' memory alive, never read"
)]
enum Store {
    Buf(PointBuf),
    /// Behind a `Mutex` only because a pyclass must be `Sync`.
    Zenoh(Box<Mutex<lidarxdp_client::zenoh::ZenohFrame>>),
}

/// Frame buffers handed back when Python lets go of a frame's points (the frame and every
/// numpy view of them), for the decoder's next frames. A fresh buffer costs the kernel a page
/// fault and a zeroed page per 4 KiB of points (some 200 µs for an OS2-128 frame of 4 MB),
/// which reading a recording from Python paid on every frame while `lidarxdp decode`, which
/// frees each frame at once, reused the allocator's. Keeps at most [`RECYCLED_MAX`] buffers.
#[derive(Default)]
struct Recycled(Mutex<Vec<PointBuf>>);

/// Buffers [`Recycled`] keeps: the frames a loop over `read_pcap` holds at once (the one in
/// hand and the next), with room for a few kept a little longer.
const RECYCLED_MAX: usize = 4;

impl Recycled {
    fn give(&self, buf: PointBuf) {
        if let Ok(mut free) = self.0.lock()
            && free.len() < RECYCLED_MAX
        {
            free.push(buf);
        }
    }
}

impl BufferSource for Recycled {
    fn take_buffer(
        &self,
        _sensor_id: u16,
        _point_type: PointType,
        _capacity: usize,
    ) -> Option<PointBuf> {
        self.0.lock().ok()?.pop()
    }
}

/// One frame's points, owned by Rust and lent to numpy (module documentation).
#[pyclass(frozen, module = "lidarxdp")]
struct Points {
    /// Address of the first point: the bytes do not move while `_store` holds them.
    addr: usize,
    /// Points.
    len: usize,
    /// Their layout.
    point_type: PointType,
    _store: Store,
    /// Where the buffer goes when the points are dropped (decoded frames).
    recycle: Option<Arc<Recycled>>,
}

impl Drop for Points {
    fn drop(&mut self) {
        if let (Some(r), Store::Buf(b)) = (&self.recycle, &mut self._store) {
            r.give(std::mem::take(b));
        }
    }
}

impl Points {
    fn buf(buf: PointBuf, recycle: Option<Arc<Recycled>>) -> Self {
        Points {
            addr: buf.as_bytes().as_ptr() as usize,
            len: buf.len(),
            point_type: buf.point_type(),
            _store: Store::Buf(buf),
            recycle,
        }
    }

    /// The points of a zenoh message, taken from `points` (its points, found in place when
    /// the message was checked).
    fn zenoh(
        msg: lidarxdp_client::zenoh::ZenohFrame,
        points: (usize, usize),
        point_type: PointType,
    ) -> Self {
        Points {
            addr: points.0,
            len: points.1,
            point_type,
            _store: Store::Zenoh(Box::new(Mutex::new(msg))),
            recycle: None,
        }
    }

    fn slice(&self) -> (usize, usize) {
        (self.addr, self.len)
    }
}

#[pymethods]
impl Points {
    /// numpy's array interface, version 3: shape `(N,)`, records of the layout's
    /// `point_step` bytes whose fields are the layout's (`point_type`), data at this buffer's
    /// address, read-only.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (addr, len) = self.slice();
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (len,))?;
        d.set_item("typestr", format!("|V{}", self.point_type.point_step()))?;
        d.set_item("descr", descr(py, self.point_type)?)?;
        d.set_item("data", (addr, true))?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.slice().1
    }

    /// The layout's name (`autoware`, `xyzi`, ...).
    #[getter]
    fn point_type(&self) -> &'static str {
        self.point_type.name()
    }
}

/// A frame (scan): its header and its points.
///
/// `points`: numpy structured array, shape `(N,)`, fields `x y z` (float32, m), `intensity`
/// (uint8), `return_type` (uint8), `channel` (uint16, ring), `azimuth` `elevation` (float32,
/// rad), `distance` (float32, m), `time_stamp` (uint32, ns since `start_ns`); a read-only view
/// of the decoder's buffer. `xyz()`: the same memory as an `(N, 3)` float32 view.
#[pyclass(frozen, module = "lidarxdp")]
struct Frame {
    /// Per-sensor frame number, +1 per frame.
    #[pyo3(get)]
    seq: u64,
    /// The sensor's id (0 offline).
    #[pyo3(get)]
    sensor_id: u16,
    /// The sensor's name (offline: the model name, e.g. `VLP16`).
    #[pyo3(get)]
    sensor: String,
    /// Frame start, ns since the Unix epoch, on the clock `clock` names.
    #[pyo3(get)]
    start_ns: u64,
    /// Host receive time of the frame's first packet, ns (offline: its pcap record time).
    #[pyo3(get)]
    host_ns: u64,
    /// `"sensor"` or `"host"`.
    #[pyo3(get)]
    clock: &'static str,
    /// Data packets in the frame.
    #[pyo3(get)]
    packets: u32,
    /// Data packets the sensor sent for the frame.
    #[pyo3(get)]
    expected_packets: u32,
    /// Packets rejected as malformed while the frame was built.
    #[pyo3(get)]
    malformed: u32,
    /// Whole frames lost just before this one.
    #[pyo3(get)]
    frames_lost_before: u32,
    points: Py<Points>,
}

fn clock_name(c: FrameClock) -> &'static str {
    match c {
        FrameClock::Sensor => "sensor",
        FrameClock::Host => "host",
    }
}

fn frame(
    py: Python<'_>,
    f: CoreFrame,
    sensor: &str,
    recycle: Option<&Arc<Recycled>>,
) -> PyResult<Frame> {
    let h = f.header;
    Ok(Frame {
        seq: h.sequence,
        sensor_id: h.sensor_id,
        sensor: sensor.to_owned(),
        start_ns: h.start_ns,
        host_ns: h.host_ns,
        clock: clock_name(h.clock),
        packets: h.packets_received,
        expected_packets: h.packets_expected,
        malformed: h.packets_malformed,
        frames_lost_before: h.frames_lost_before,
        points: Py::new(py, Points::buf(f.points, recycle.cloned()))?,
    })
}

fn frames(
    py: Python<'_>,
    fs: Vec<CoreFrame>,
    sensor: &str,
    recycle: &Arc<Recycled>,
) -> PyResult<Vec<Frame>> {
    fs.into_iter()
        .map(|f| frame(py, f, sensor, Some(recycle)))
        .collect()
}

#[pymethods]
impl Frame {
    /// The points: a read-only numpy structured array viewing the Rust buffer (no copy).
    #[getter]
    fn points<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let np = py.import("numpy")?;
        let arr = np.getattr("asarray")?.call1((self.points.clone_ref(py),))?;
        // The array interface names a layout's padding `f3`, ...: view it as the layout's own
        // fields at their offsets (no copy), as `POINT_DTYPE` does for `autoware`.
        let t = self.points.borrow(py).point_type;
        arr.call_method1("view", (layout_dtype(py, t)?,))
    }

    /// `x`, `y`, `z` as an `(N, 3)` float32 array (m), a read-only view of the same memory
    /// (row stride 32 bytes).
    fn xyz<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let step = self.points.borrow(py).point_type.point_step();
        let points = self.points(py)?;
        let n = points.len()?;
        let x = points.get_item("x")?;
        let kw = PyDict::new(py);
        kw.set_item("shape", (n, 3))?;
        kw.set_item("strides", (step, 4))?;
        kw.set_item("writeable", false)?;
        py.import("numpy.lib.stride_tricks")?
            .getattr("as_strided")?
            .call((x,), Some(&kw))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.points.borrow(py).slice().1
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Frame(sensor={:?}, seq={}, start_ns={}, clock={:?}, points={}, packets={}/{}, \
             malformed={}, frames_lost_before={})",
            self.sensor,
            self.seq,
            self.start_ns,
            self.clock,
            self.__len__(py),
            self.packets,
            self.expected_packets,
            self.malformed,
            self.frames_lost_before
        )
    }
}

/// The keyword options every decoding entry point takes (those of `lidarxdp decode`).
#[allow(clippy::too_many_arguments)]
fn settings(
    sensor: Option<&str>,
    calibration: Option<PathBuf>,
    cut_angle: f64,
    fov: Option<&Bound<'_, PyAny>>,
    min_range: Option<f64>,
    max_range: Option<f64>,
    stamp: &str,
    source: Option<&str>,
    port: Option<i64>,
    nebula_compat: bool,
    hesai_skip_crc: bool,
    point_type: &str,
) -> PyResult<DecodeSettings> {
    let point_type =
        PointType::from_str(point_type).map_err(|e| err(format!("point_type: {e}")))?;
    let Some(calibration) = calibration else {
        return Err(err(
            "calibration: required (Velodyne YAML, Hesai CSV or DAT, Ouster metadata JSON, \
             RoboSense CSV)",
        ));
    };
    let sensor = sensor
        .map(SensorModel::from_str)
        .transpose()
        .map_err(|e| err(format!("sensor: {e}")))?;
    let cut_angle = Degrees::new(cut_angle).map_err(|e| err(format!("cut_angle: {e}")))?;
    let fov = match fov {
        None => None,
        Some(v) => {
            let fov_err = |e: InvalidValue| err(format!("fov: {e}"));
            match v.extract::<(f64, f64)>() {
                Ok((a, b)) => FovSetting::new(
                    Degrees::new(a).map_err(fov_err)?,
                    Degrees::new(b).map_err(fov_err)?,
                )
                .map_err(fov_err)?,
                // The caller's own text, "MIN:MAX" as the CLI takes it.
                Err(_) => match v.extract::<String>() {
                    Ok(text) => FovSetting::from_str(&text).map_err(fov_err)?,
                    Err(_) => {
                        return Err(err(format!(
                            "fov: {} is not (min, max) in degrees nor 'MIN:MAX'",
                            v.repr()?
                        )));
                    }
                },
            }
            .fov()
        }
    };
    let metres = |name: &str, v: Option<f64>| {
        v.map(|m| Metres::new(m as f32).map_err(|e| err(format!("{name}: {e}"))))
            .transpose()
    };
    let stamp = Stamp::from_str(stamp).map_err(|e| err(format!("stamp: {e}")))?;
    let port = port
        .map(|p| {
            UdpPort::from_i64(p)
                .map(|p| p.get() as u16)
                .map_err(|e| err(format!("port: {e}")))
        })
        .transpose()?;
    let source = source
        .map(|s| {
            lidarxdp_core::valid::SourceAddr::from_str(s)
                .map(|a| a.ip())
                .map_err(|e| err(format!("source: {e}")))
        })
        .transpose()?;
    Ok(DecodeSettings {
        sensor,
        calibration,
        cut_angle,
        fov,
        min_range: metres("min_range", min_range)?,
        max_range: metres("max_range", max_range)?,
        stamp,
        port,
        source,
        nebula_compat,
        hesai_skip_crc,
        point_type,
    })
}

fn summary_dict<'py>(py: Python<'py>, s: &DecodeSummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let mut r = Ok(());
    s.counters.visit(&mut |desc, v| {
        if r.is_ok() {
            r = d.set_item(desc.name, v);
        }
    });
    r?;
    d.set_item("records", s.records)?;
    d.set_item("datagrams", s.datagrams)?;
    d.set_item("skipped_records", s.skipped.total())?;
    Ok(d)
}

/// The frames of a capture file, as they close ([`read_pcap`]).
#[pyclass(module = "lidarxdp")]
struct PcapReader {
    frames: Mutex<PcapFrames>,
    sensor: String,
    recycle: Arc<Recycled>,
}

#[pymethods]
impl PcapReader {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        let next = py.detach(|| match self.frames.lock() {
            Ok(mut f) => f.next(),
            Err(_) => None,
        });
        match next {
            None => Ok(None),
            Some(Ok(f)) => Ok(Some(frame(py, f, &self.sensor, Some(&self.recycle))?)),
            Some(Err(e)) => Err(err(e)),
        }
    }

    /// What was read and decoded so far (everything once the iteration ended): `records`,
    /// `datagrams`, `skipped_records` and every decoder counter (`packets`, `decoded`,
    /// `malformed`, `ignored`, `frames`, `points`, ...), as `lidarxdp decode --json`'s
    /// summary.
    #[getter]
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self
            .frames
            .lock()
            .map_err(|_| err("reader poisoned"))?
            .summary();
        summary_dict(py, &s)
    }

    /// The model decoded (detected when `sensor` was not given), e.g. `"VLP16"`.
    #[getter]
    fn sensor(&self) -> &str {
        &self.sensor
    }
}

/// Decodes the capture at `path`, yielding frames as they close.
#[pyfunction]
#[pyo3(signature = (path, sensor=None, calibration=None, *, cut_angle=0.0, fov=None,
    min_range=None, max_range=None, stamp="sensor", source=None, port=None,
    nebula_compat=false, hesai_skip_crc=false, point_type="autoware"))]
#[allow(clippy::too_many_arguments)]
fn read_pcap(
    path: PathBuf,
    sensor: Option<&str>,
    calibration: Option<PathBuf>,
    cut_angle: f64,
    fov: Option<&Bound<'_, PyAny>>,
    min_range: Option<f64>,
    max_range: Option<f64>,
    stamp: &str,
    source: Option<&str>,
    port: Option<i64>,
    nebula_compat: bool,
    hesai_skip_crc: bool,
    point_type: &str,
) -> PyResult<PcapReader> {
    let s = settings(
        sensor,
        calibration,
        cut_angle,
        fov,
        min_range,
        max_range,
        stamp,
        source,
        port,
        nebula_compat,
        hesai_skip_crc,
        point_type,
    )?;
    let (model, notes) = s.model(&path).map_err(settings_err)?;
    for n in notes {
        log_note(&n);
    }
    let (cfg, opts) = s.resolve(model).map_err(settings_err)?;
    let mut frames = PcapFrames::open(&path, &cfg, &opts).map_err(err)?;
    let recycle = Arc::new(Recycled::default());
    frames.set_buffer_source(recycle.clone());
    Ok(PcapReader {
        frames: Mutex::new(frames),
        sensor: model.name().to_owned(),
        recycle,
    })
}

/// A note for the user (what was detected), on stderr as `lidarxdp decode` prints it.
fn log_note(n: &str) {
    eprintln!("lidarxdp: {n}");
}

/// A decoder for packets from anywhere: a socket, a bag of packets, a custom reader.
#[pyclass(module = "lidarxdp")]
struct Decoder {
    pipeline: Mutex<ScanPipeline>,
    sensor: String,
    recycle: Arc<Recycled>,
}

#[pymethods]
impl Decoder {
    #[new]
    #[pyo3(signature = (sensor, calibration, *, cut_angle=0.0, fov=None, min_range=None,
        max_range=None, stamp="sensor", nebula_compat=false, hesai_skip_crc=false,
        point_type="autoware"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        sensor: &str,
        calibration: PathBuf,
        cut_angle: f64,
        fov: Option<&Bound<'_, PyAny>>,
        min_range: Option<f64>,
        max_range: Option<f64>,
        stamp: &str,
        nebula_compat: bool,
        hesai_skip_crc: bool,
        point_type: &str,
    ) -> PyResult<Self> {
        let s = settings(
            Some(sensor),
            Some(calibration),
            cut_angle,
            fov,
            min_range,
            max_range,
            stamp,
            None,
            None,
            nebula_compat,
            hesai_skip_crc,
            point_type,
        )?;
        let model = s.sensor.unwrap_or(SensorModel::Vlp16);
        let (cfg, opts) = s.resolve(model).map_err(settings_err)?;
        let mut pipeline = lidarxdp_client::calibration::pipeline_with_options(&cfg, opts.pipeline)
            .map_err(err)?;
        let recycle = Arc::new(Recycled::default());
        pipeline.set_buffer_source(recycle.clone());
        Ok(Decoder {
            pipeline: Mutex::new(pipeline),
            sensor: model.name().to_owned(),
            recycle,
        })
    }

    /// Decodes one UDP payload received at `host_ns` (ns since the Unix epoch); returns the
    /// frames it closed (usually none). A malformed packet is counted and dropped.
    fn push(&self, py: Python<'_>, payload: &[u8], host_ns: u64) -> PyResult<Vec<Frame>> {
        let out = py.detach(|| {
            let mut out = Vec::new();
            if let Ok(mut p) = self.pipeline.lock() {
                p.push(payload, HostTime::both(host_ns), &mut out);
            }
            out
        });
        frames(py, out, &self.sensor, &self.recycle)
    }

    /// Closes the frame in progress; returns it (if it holds any packet).
    fn flush(&self, py: Python<'_>) -> PyResult<Vec<Frame>> {
        let mut out = Vec::new();
        if let Ok(mut p) = self.pipeline.lock() {
            p.flush(&mut out);
        }
        frames(py, out, &self.sensor, &self.recycle)
    }

    /// The decoder's counters (`packets`, `decoded`, `malformed`, `ignored`, `frames`,
    /// `points`, ...), as in `lidarxdp decode --json`'s summary, and `held`: data packets
    /// after a time jump waiting to be judged a sensor restart. Every datagram is counted once:
    /// `packets == decoded + malformed + ignored + auxiliary + time_jumps + duplicates + late +
    /// held`.
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = self.pipeline.lock().map_err(|_| err("decoder poisoned"))?;
        let d = summary_dict(
            py,
            &DecodeSummary {
                counters: *p.counters(),
                ..DecodeSummary::default()
            },
        )?;
        d.set_item("held", p.held())?;
        Ok(d)
    }

    /// The model, e.g. `"OS-0-32"`'s family `"Ouster"`.
    #[getter]
    fn sensor(&self) -> &str {
        &self.sensor
    }
}

/// How long one wait of a subscription lasts without the GIL before Python's signals are
/// checked (so Ctrl-C raises `KeyboardInterrupt` within it).
const SIGNAL_STEP: std::time::Duration = std::time::Duration::from_millis(100);

/// Repeats `step` (a wait of at most [`SIGNAL_STEP`]) without the GIL, checking Python's
/// signals after each, until it gives a value.
fn wait_interruptibly<T: Send>(py: Python<'_>, step: impl Fn() -> Option<T> + Sync) -> PyResult<T> {
    loop {
        let got = py.detach(&step);
        py.check_signals()?;
        if let Some(v) = got {
            return Ok(v);
        }
    }
}

/// The frames of a running daemon's TCP publisher ([`subscribe`]).
#[pyclass(module = "lidarxdp")]
struct Subscription {
    sub: Mutex<lidarxdp_client::Subscriber>,
    names: std::collections::HashMap<u16, String>,
    addr: String,
}

#[pymethods]
impl Subscription {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next frame; `StopIteration` when the daemon closes the connection. Waits in steps
    /// of 100 ms without the GIL, so Ctrl-C (`KeyboardInterrupt`) is seen between them.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        wait_interruptibly(py, || match self.sub.lock() {
            Ok(s) => s
                .wait_for_data(SIGNAL_STEP)
                .map(|ready| ready.then_some(()))
                .transpose(),
            Err(_) => Some(Err(std::io::Error::other("subscription poisoned"))),
        })?
        .map_err(|e| err(format!("receive from {}: {e}", self.addr)))?;
        let got = py.detach(|| match self.sub.lock() {
            Ok(mut s) => s.next_frame(),
            Err(_) => Err(std::io::Error::other("subscription poisoned").into()),
        });
        match got {
            Ok(None) => Ok(None),
            Ok(Some(f)) => {
                let f = f.into_frame();
                let name = self
                    .names
                    .get(&f.header.sensor_id)
                    .cloned()
                    .unwrap_or_else(|| format!("sensor{}", f.header.sensor_id));
                Ok(Some(frame(py, f, &name, None)?))
            }
            Err(e) => Err(err(format!("receive from {}: {e}", self.addr))),
        }
    }

    /// The sensors the daemon announced: `{id: name}`.
    #[getter]
    fn sensors(&self) -> std::collections::HashMap<u16, String> {
        self.names.clone()
    }
}

/// A ROS 2 `PointCloud2` topic of the daemon over zenoh ([`subscribe`] with `zenoh:/TOPIC`).
#[pyclass(module = "lidarxdp")]
struct ZenohSubscription {
    sub: Mutex<lidarxdp_client::zenoh::ZenohSubscriber>,
    topic: String,
}

#[pymethods]
impl ZenohSubscription {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next message of the topic, waiting without the GIL in steps of 100 ms (Ctrl-C is
    /// seen between them); a topic never ends. A message that is not a cloud of lidarxdp's
    /// layout raises `LidarxdpError`. `seq` is the publisher's sequence number, `start_ns`
    /// `header.stamp`, `host_ns` the publication time, `sensor` `header.frame_id`; the packet
    /// counts are not in a `PointCloud2` (0).
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        let msg = wait_interruptibly(py, || match self.sub.lock() {
            Ok(s) => s.recv_timeout(SIGNAL_STEP),
            Err(_) => None,
        })?;
        let view = msg
            .view()
            .map_err(|e| err(format!("{}: not a PointCloud2: {e}", self.topic)))?;
        let (point_type, pts) = lidarxdp_client::zenoh::layout_points_of(&view)
            .map_err(|e| err(format!("{}: {e}", self.topic)))?;
        let points = (pts.as_ptr() as usize, pts.len() / point_type.point_step());
        let (stamp, sensor) = (view.stamp_ns, view.frame_id.to_owned());
        let att = msg.attachment();
        Ok(Some(Frame {
            seq: att.map_or(0, |a| a.sequence_number.max(0) as u64),
            sensor_id: 0,
            sensor,
            start_ns: stamp,
            host_ns: att.map_or(0, |a| a.source_timestamp_ns.max(0) as u64),
            clock: "sensor",
            packets: 0,
            expected_packets: 0,
            malformed: 0,
            frames_lost_before: 0,
            points: Py::new(py, Points::zenoh(msg, points, point_type))?,
        }))
    }
}

/// `subscribe("zenoh:/TOPIC", ...)`.
fn subscribe_zenoh(
    py: Python<'_>,
    topic: &str,
    domain_id: Option<u32>,
    zenoh_config: Option<PathBuf>,
    distro: &str,
) -> PyResult<ZenohSubscription> {
    lidarxdp_core::ros2::validate_topic("topic", topic).map_err(err)?;
    let domain =
        lidarxdp_core::ros2::domain_id(domain_id, std::env::var("ROS_DOMAIN_ID").ok().as_deref())
            .map_err(err)?;
    let distro =
        lidarxdp_core::ros2::Distro::from_str(distro).map_err(|e| err(format!("distro: {e}")))?;
    let source =
        lidarxdp_client::zenoh::SessionConfig::from_env(zenoh_config.as_deref()).map_err(err)?;
    let sub = py
        .detach(|| lidarxdp_client::zenoh::ZenohSubscriber::open(&source, domain, topic, distro))
        .map_err(|e| err(format!("subscribe zenoh:{topic}: {e}")))?;
    Ok(ZenohSubscription {
        sub: Mutex::new(sub),
        topic: topic.to_owned(),
    })
}

/// Subscribes to a running daemon and iterates over its frames: `"HOST:PORT"` (default
/// `127.0.0.1:7510`) its TCP publisher, every sensor, every point field; `"zenoh:/TOPIC"` its
/// ROS 2 topic over zenoh (`--zenoh`), read in place from shared memory on the same host, in
/// ROS domain `domain_id` (default `$ROS_DOMAIN_ID`, else 0), the session configured by
/// `zenoh_config` (default rmw_zenoh's environment variables), keys of `distro`.
#[pyfunction]
#[pyo3(signature = (address="127.0.0.1:7510", *, connect_timeout=5.0, domain_id=None,
    zenoh_config=None, distro="jazzy"))]
fn subscribe(
    py: Python<'_>,
    address: &str,
    connect_timeout: f64,
    domain_id: Option<u32>,
    zenoh_config: Option<PathBuf>,
    distro: &str,
) -> PyResult<Py<PyAny>> {
    if let Some(topic) = address.strip_prefix("zenoh:") {
        let s = subscribe_zenoh(py, topic, domain_id, zenoh_config, distro)?;
        return Ok(Py::new(py, s)?.into_any());
    }
    Ok(Py::new(py, subscribe_tcp(py, address, connect_timeout)?)?.into_any())
}

/// `subscribe("HOST:PORT")`.
fn subscribe_tcp(py: Python<'_>, address: &str, connect_timeout: f64) -> PyResult<Subscription> {
    use std::net::ToSocketAddrs;
    let addr = address
        .to_socket_addrs()
        .map_err(|e| err(format!("address: {address:?} is not HOST:PORT ({e})")))?
        .next()
        .ok_or_else(|| err(format!("address: {address:?} resolves to nothing")))?;
    if !(connect_timeout.is_finite() && connect_timeout > 0.0) {
        return Err(err(format!(
            "connect_timeout: {connect_timeout} is out of range; valid (0, inf) s"
        )));
    }
    let timeout = std::time::Duration::from_secs_f64(connect_timeout);
    let sub = py
        .detach(|| lidarxdp_client::Subscriber::connect_timeout(&addr, timeout))
        .map_err(|e| err(format!("subscribe {address}: {e}")))?;
    let names = sub
        .hello()
        .sensors
        .iter()
        .map(|s| (s.id, s.name.clone()))
        .collect();
    Ok(Subscription {
        sub: Mutex::new(sub),
        names,
        addr: address.to_owned(),
    })
}

/// The extension module.
#[pymodule]
fn _lidarxdp(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("LidarxdpError", m.py().get_type::<LidarxdpError>())?;
    m.add_class::<Frame>()?;
    m.add_class::<Points>()?;
    m.add_class::<PcapReader>()?;
    m.add_class::<Decoder>()?;
    m.add_function(wrap_pyfunction!(read_pcap, m)?)?;
    m.add_function(wrap_pyfunction!(subscribe, m)?)?;
    m.add_class::<Subscription>()?;
    m.add_class::<ZenohSubscription>()?;
    m.add("POINT_SIZE", POINT_SIZE)?;
    m.add(
        "POINT_TYPES",
        POINT_TYPES.iter().map(|t| t.name()).collect::<Vec<_>>(),
    )?;
    let _ = POINT_TYPE_NAMES;
    Ok(())
}
