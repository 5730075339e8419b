//! `lidarxdp decode PCAP`: offline decoding, one line per frame, optional PCDs.
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use lidarxdp::sensor::{SensorConfig, SensorModel};

/// `lidarxdp decode` arguments.
#[derive(clap::Args)]
pub struct DecodeArgs {
    /// Capture to decode.
    #[arg(value_name = "PCAP")]
    pcap: PathBuf,
    /// Sensor model (wins over the packet's product byte). Without it the model is identified
    /// from the capture's first 200 datagrams where the packets name it (Velodyne product byte,
    /// Hesai header); Ouster and RoboSense need `--sensor`.
    #[arg(long)]
    sensor: Option<SensorModel>,
    /// Calibration file: Velodyne ros-drivers/Nebula YAML; Hesai angle-correction CSV (AT128:
    /// binary `.dat`); Ouster sensor metadata JSON; RoboSense angle CSV (replaced by DIFOP).
    #[arg(long)]
    calibration: PathBuf,
    /// Hesai: do not check the packets' CRCs (by default a CRC failure is counted malformed).
    #[arg(long)]
    hesai_skip_crc: bool,
    /// Cut angle in degrees, [0, 360].
    #[arg(long, default_value_t = 0.0)]
    cut_angle: f64,
    /// Field of view `MIN:MAX` in degrees (each in [0, 360]; `MIN > MAX` wraps through 0°).
    #[arg(long, value_name = "MIN:MAX", value_parser = super::parse_fov)]
    fov: Option<(f64, f64)>,
    /// Only decode datagrams to this UDP destination port.
    #[arg(long)]
    port: Option<u16>,
    /// Write every frame as `<DIR>/<sequence>.pcd`.
    #[arg(long, value_name = "DIR")]
    pcd: Option<PathBuf>,
    /// Velodyne: decode as Tier IV Nebula does, bit for bit, instead of by the manuals'
    /// firing timing (docs/sensors.md, "Velodyne firing timing").
    #[arg(long)]
    nebula_compat: bool,
}

/// Decodes the capture and prints one line per frame (and writes PCDs with `--pcd`).
pub fn decode(a: DecodeArgs) -> Result<()> {
    let model = match a.sensor {
        Some(m) => m,
        None => {
            // The calibration's laser count must agree with the product byte (Velodyne).
            let (m, warning) =
                lidarxdp::sensor::velodyne::confirm_detected_model(detect(&a)?, &a.calibration)?;
            if let Some(w) = warning {
                eprintln!("decode: warning: {w}");
            }
            m
        }
    };
    let cfg = SensorConfig {
        cut_angle_deg: a.cut_angle,
        ..SensorConfig::new(0, model, a.calibration)
    };
    let opts = lidarxdp::sensor::PipelineOptions {
        fov_deg: a.fov,
        hesai_skip_crc: a.hesai_skip_crc,
        flavor: flavor(a.nebula_compat),
    };
    let (frames, counters) =
        lidarxdp::offline::decode_pcap_with_options(&a.pcap, &cfg, a.port, opts)?;
    if let Some(dir) = &a.pcd {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    let mut listening = true;
    for f in &frames {
        let h = &f.header;
        use std::io::Write;
        // A closed pipe (`| head`) stops the listing, not the PCD output.
        if listening
            && let Err(e) = writeln!(
                stdout,
                "frame seq={} start_ns={} points={} packets={}/{} malformed={}",
                h.sequence,
                h.start_ns,
                f.points.len(),
                h.packets_received,
                h.packets_expected,
                h.packets_malformed
            )
        {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                return Err(e).context("write to stdout");
            }
            listening = false;
        }
        if let Some(dir) = &a.pcd {
            let path = dir.join(format!("{:06}.pcd", h.sequence));
            lidarxdp::pcd::write_pcd(&path, &f.points)
                .with_context(|| format!("write {}", path.display()))?;
        }
    }
    eprintln!("decode: {counters:?}");
    Ok(())
}

/// The Velodyne rules `--nebula-compat` (or config `nebula_compat`) selects.
pub fn flavor(nebula_compat: bool) -> lidarxdp::sensor::DecodeFlavor {
    if nebula_compat {
        lidarxdp::sensor::DecodeFlavor::Nebula
    } else {
        lidarxdp::sensor::DecodeFlavor::Manual
    }
}

/// Datagrams looked at by [`detect`].
const DETECT_DATAGRAMS: usize = 200;

/// The model most of the capture's first datagrams name ([`lidarxdp::sensor::detect_model`]).
fn detect(a: &DecodeArgs) -> Result<SensorModel> {
    let mut votes: Vec<(SensorModel, usize)> = Vec::new();
    let mut seen = 0usize;
    for d in lidarxdp::offline::udp_payloads(&a.pcap)? {
        let d = d?;
        if a.port.is_some_and(|p| p != d.dst_port) {
            continue;
        }
        seen += 1;
        if let Some(m) = lidarxdp::sensor::detect_model(&d.payload) {
            match votes.iter_mut().find(|(v, _)| *v == m) {
                Some((_, n)) => *n += 1,
                None => votes.push((m, 1)),
            }
        }
        if seen >= DETECT_DATAGRAMS {
            break;
        }
    }
    let Some(&(model, n)) = votes.iter().max_by_key(|(_, n)| *n) else {
        bail!(
            "--sensor: none of the first {seen} datagrams of {} names its model (Ouster and \
             RoboSense packets never do); give --sensor MODEL",
            a.pcap.display()
        );
    };
    eprintln!(
        "decode: --sensor not given; {n} of the first {seen} datagrams say {} (pass --sensor to \
         override)",
        model.name()
    );
    Ok(model)
}
