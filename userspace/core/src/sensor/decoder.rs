//! [`Decoder`], one sensor's decoder: the four vendors' [`VendorDecoder`]s in a closed enum
//! (dispatch by `match`, as smoltcp holds its sockets: no trait object, no `Any`), and
//! [`Tables`], a vendor's calibration tables, the unit a reload swaps.
#![forbid(unsafe_code)]

use std::sync::Arc;

use super::hesai::{HesaiStream, HesaiTables};
use super::ouster::{OusterStream, OusterTables};
use super::robosense::{RobosenseStream, RobosenseTables};
use super::velodyne::{VelodyneStream, VelodyneTables};
use crate::HostTime;
use crate::frame::Frame;
use crate::layout::PointType;
use crate::msg::SyncSource;
use crate::scan::{BufferSource, Rejection};
use crate::vendor::{
    ConfigError, Family, PipelineOptions, ReturnMode, SensorConfig, TimeFaults, VendorDecoder,
};

/// One sensor's decoder and cut policy, of its model's vendor. `Clone` copies the stream
/// state (frame in progress, cut state, counters) and shares the calibration tables.
#[derive(Clone, Debug)]
// One per sensor, held inline by its pipeline and moved only when built: the variants' sizes
// (the streams' inline scratch arrays) cost nothing, a box would cost a pointer chase per
// packet.
#[allow(clippy::large_enum_variant)]
pub enum Decoder {
    /// Velodyne VLP-16, VLP-32C, HDL-32E, HDL-64E S2/S3, VLS-128.
    Velodyne(VelodyneStream),
    /// Hesai Pandar, PandarQT, PandarXT, OT128, AT128.
    Hesai(HesaiStream),
    /// Ouster OS0/OS1/OS2.
    Ouster(OusterStream),
    /// RoboSense RS-LiDAR-16/32, RS-Bpearl, RS-Helios.
    Robosense(RobosenseStream),
}

/// A vendor's calibration tables ([`VendorDecoder::Tables`]), shared: what
/// [`crate::sensor::ScanPipeline::reload`] hands to a running decoder.
#[derive(Clone, Debug)]
pub enum Tables {
    /// [`VelodyneTables`].
    Velodyne(Arc<VelodyneTables>),
    /// [`HesaiTables`].
    Hesai(Arc<HesaiTables>),
    /// [`OusterTables`].
    Ouster(Arc<OusterTables>),
    /// [`RobosenseTables`].
    Robosense(Arc<RobosenseTables>),
}

/// `$body` with `$d` bound to the vendor decoder inside `$decoder` (a `Decoder`, `&Decoder`
/// or `&mut Decoder`).
macro_rules! each {
    ($decoder:expr, $d:ident => $body:expr) => {
        match $decoder {
            Decoder::Velodyne($d) => $body,
            Decoder::Hesai($d) => $body,
            Decoder::Ouster($d) => $body,
            Decoder::Robosense($d) => $body,
        }
    };
}

impl Decoder {
    /// The decoder of `cfg.model`'s vendor, its tables built from `calibration` (the contents
    /// of the file `cfg.calibration` names).
    ///
    /// # Errors
    /// The vendor constructor's [`ConfigError`]: an invalid calibration (naming the file), or
    /// a model whose decoder is not available ([`ConfigError::Unsupported`]).
    pub fn new(
        cfg: &SensorConfig,
        calibration: &[u8],
        opts: PipelineOptions,
    ) -> Result<Self, ConfigError> {
        let mut d = match cfg.model.family() {
            Family::Velodyne => Decoder::Velodyne(VelodyneStream::new(cfg, calibration, opts)?),
            Family::Hesai => Decoder::Hesai(HesaiStream::new(cfg, calibration, opts)?),
            Family::Ouster => Decoder::Ouster(OusterStream::new(cfg, calibration, opts)?),
            Family::Robosense => Decoder::Robosense(RobosenseStream::new(cfg, calibration, opts)?),
        };
        d.set_point_type(cfg.point_type);
        Ok(d)
    }

    /// [`VendorDecoder::push`].
    ///
    /// # Errors
    /// The vendor's [`Rejection`].
    #[inline]
    pub fn push(
        &mut self,
        payload: &[u8],
        host: HostTime,
        out: &mut Vec<Frame>,
    ) -> Result<(), Rejection> {
        each!(self, d => d.push(payload, host, out))
    }

    /// [`VendorDecoder::poll_timeout`].
    pub fn poll_timeout(&mut self, now_mono_ns: u64, out: &mut Vec<Frame>) {
        each!(self, d => d.poll_timeout(now_mono_ns, out))
    }

    /// [`VendorDecoder::flush`].
    pub fn flush(&mut self, out: &mut Vec<Frame>) {
        each!(self, d => d.flush(out))
    }

    /// [`VendorDecoder::return_mode`].
    pub fn return_mode(&self) -> Option<ReturnMode> {
        each!(self, d => d.return_mode())
    }

    /// [`VendorDecoder::set_buffer_source`].
    pub fn set_buffer_source(&mut self, source: Arc<dyn BufferSource>) {
        each!(self, d => d.set_buffer_source(source))
    }

    /// [`VendorDecoder::set_point_type`].
    pub fn set_point_type(&mut self, point_type: PointType) {
        each!(self, d => d.set_point_type(point_type))
    }

    /// [`VendorDecoder::product_mismatches`].
    pub fn product_mismatches(&self) -> u64 {
        each!(self, d => d.product_mismatches())
    }

    /// [`VendorDecoder::counter_descs`].
    pub fn counter_descs(&self) -> &'static [crate::counters::CounterDesc] {
        each!(self, d => d.counter_descs())
    }

    /// [`VendorDecoder::visit_counters`].
    pub fn visit_counters(&self, f: &mut dyn FnMut(&'static crate::counters::CounterDesc, u64)) {
        each!(self, d => d.visit_counters(f))
    }

    /// [`VendorDecoder::sync_source`].
    pub fn sync_source(&self) -> SyncSource {
        each!(self, d => d.sync_source())
    }

    /// [`VendorDecoder::time_faults`].
    pub fn time_faults(&self) -> TimeFaults {
        each!(self, d => d.time_faults())
    }

    /// [`VendorDecoder::in_progress`].
    pub fn in_progress(&self) -> bool {
        each!(self, d => d.in_progress())
    }

    /// The calibration tables in use, shared.
    pub fn tables(&self) -> Tables {
        match self {
            Decoder::Velodyne(d) => Tables::Velodyne(d.tables().clone()),
            Decoder::Hesai(d) => Tables::Hesai(d.tables().clone()),
            Decoder::Ouster(d) => Tables::Ouster(d.tables().clone()),
            Decoder::Robosense(d) => Tables::Robosense(d.tables().clone()),
        }
    }

    /// Decodes with `tables` from now on ([`VendorDecoder::set_tables`]): the type-checked
    /// swap of a reload.
    ///
    /// # Errors
    /// `tables` back, untouched, when they are another vendor's.
    pub fn set_tables(&mut self, tables: Tables) -> Result<(), Tables> {
        match (self, tables) {
            (Decoder::Velodyne(d), Tables::Velodyne(t)) => d.set_tables(t),
            (Decoder::Hesai(d), Tables::Hesai(t)) => d.set_tables(t),
            (Decoder::Ouster(d), Tables::Ouster(t)) => d.set_tables(t),
            (Decoder::Robosense(d), Tables::Robosense(t)) => d.set_tables(t),
            (_, t) => return Err(t),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vendor::SensorModel;

    const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/");

    fn build(model: SensorModel, cal: &str) -> Decoder {
        let path = format!("{DATA}{cal}");
        let bytes = std::fs::read(&path).unwrap();
        let cfg = SensorConfig::new(0, model, &path);
        Decoder::new(&cfg, &bytes, PipelineOptions::default()).unwrap()
    }

    fn vlp16() -> Decoder {
        build(
            SensorModel::Vlp16,
            "velodyne/vlp16/calibration/VLP16db.yaml",
        )
    }

    fn pandar64() -> Decoder {
        build(SensorModel::Pandar64, "hesai/pandar64/Pandar64.csv")
    }

    fn same(a: &Tables, b: &Tables) -> bool {
        match (a, b) {
            (Tables::Velodyne(a), Tables::Velodyne(b)) => Arc::ptr_eq(a, b),
            (Tables::Hesai(a), Tables::Hesai(b)) => Arc::ptr_eq(a, b),
            (Tables::Ouster(a), Tables::Ouster(b)) => Arc::ptr_eq(a, b),
            (Tables::Robosense(a), Tables::Robosense(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    #[test]
    fn clones_share_the_tables() {
        let a = pandar64();
        let b = a.clone();
        assert!(same(&a.tables(), &b.tables()));
        assert!(!same(&a.tables(), &pandar64().tables()));
    }

    #[test]
    fn tables_swap_only_within_a_vendor() {
        let mut d = vlp16();
        let before = d.tables();
        let hesai = pandar64().tables();
        let back = d.set_tables(hesai.clone()).unwrap_err();
        assert!(same(&back, &hesai));
        assert!(same(&d.tables(), &before));
        let fresh = vlp16().tables();
        assert!(d.set_tables(fresh.clone()).is_ok());
        assert!(same(&d.tables(), &fresh));
        assert!(!same(&d.tables(), &before));
    }
}
