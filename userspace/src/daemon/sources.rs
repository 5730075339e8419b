//! Opening what the capture threads read from: per interface the XDP program, per (interface,
//! queue) the AF_XDP socket registered in the program's maps, or for the socket baselines the
//! bound UDP sockets. Runs while the daemon still holds its start-up capabilities.

use std::time::Duration;

use anyhow::{Context, Result};
use lidarxdp::{
    capture::{
        Backend, RcvBuf, RecvmmsgSource, SocketSource, UdpSocketConfig, UringBuffers, UringSource,
        XdpSource,
    },
    loader::XdpProgram,
    xsk::{BindMode, UmemConfig, XskConfig, XskSocket},
};
use lidarxdp_core::sensor::{Family, SensorModel};

use super::config::Plan;

/// The capture thread's packet source, one variant per `--backend`.
pub(super) enum Source {
    Xdp(XdpSource),
    Socket(SocketSource),
    Recvmmsg(RecvmmsgSource),
    Uring(UringSource),
}

/// An interface's name and the XDP program attached to it.
pub(super) type Program = (String, XdpProgram);

/// Opens every queue's source in plan order, attaching the XDP program once per interface.
/// Returns the programs (detached when dropped) and one source per queue.
///
/// Errors: the first attach, socket, bind or map update that fails, naming the interface,
/// queue or ports.
pub(super) fn open(plan: &Plan) -> Result<(Vec<Program>, Vec<Source>)> {
    let backend = plan.capture.backend;
    let mut programs: Vec<Program> = Vec::new();
    let mut sources: Vec<Source> = Vec::with_capacity(plan.queues.len());
    for q in &plan.queues {
        let mut ports: Vec<u16> = Vec::new();
        for s in &q.sensors {
            for p in std::iter::once(s.port).chain(s.extra_port) {
                if !ports.contains(&p) {
                    ports.push(p);
                }
            }
        }
        match backend {
            Backend::Xdp => {
                let k = match programs.iter().position(|(i, _)| *i == q.iface) {
                    Some(k) => k,
                    None => {
                        // Before attaching: frames longer than a UMEM chunk would be dropped.
                        lidarxdp::xsk::check_mtu(&q.iface, UmemConfig::default().frame_size)?;
                        programs.push((q.iface.clone(), attach_program(plan, &q.iface)?));
                        programs.len() - 1
                    }
                };
                let program = &mut programs[k].1;
                let xsk = open_xsk(&q.iface, q.queue, q.umem_frames)?;
                program.bind_socket(q.queue, &xsk)?;
                for s in &q.sensors {
                    for p in std::iter::once(s.port).chain(s.extra_port) {
                        program.add_sensor(p, s.source.as_ref().map(|a| a.ip()), s.id)?;
                    }
                }
                sources.push(Source::Xdp(
                    XdpSource::with_wait(xsk, plan.capture.wait)
                        .context("io_uring for the capture thread")?,
                ));
            }
            other => {
                let models = || q.sensors.iter().map(|s| s.model);
                let ucfg = UdpSocketConfig {
                    bind: plan.capture.bind,
                    ports: ports.clone(),
                    rcvbuf: plan.capture.rcvbuf.unwrap_or(match other {
                        Backend::Socket => RcvBuf::Default,
                        _ => RcvBuf::Max,
                    }),
                    max_datagram: models().map(max_datagram).max().unwrap_or(2048),
                };
                let what = || format!("--backend {}: UDP sockets on ports {ports:?}", other.name());
                let source = match other {
                    Backend::Socket => {
                        Source::Socket(SocketSource::open(&ucfg).with_context(what)?)
                    }
                    Backend::Recvmmsg => Source::Recvmmsg(
                        RecvmmsgSource::open_with_wait(&ucfg, plan.capture.wait)
                            .with_context(what)?,
                    ),
                    _ => {
                        let buffers = models()
                            .map(uring_buffers)
                            .min_by_key(|b| b.count)
                            .unwrap_or_default();
                        Source::Uring(UringSource::open(&ucfg, buffers).with_context(what)?)
                    }
                };
                log::info!(
                    "--backend {}: UDP sockets bound to {}:{ports:?}, SO_RCVBUF {:?}",
                    other.name(),
                    ucfg.bind,
                    ucfg.rcvbuf
                );
                sources.push(source);
            }
        }
    }
    Ok((programs, sources))
}

/// Largest datagram the socket backends receive, bytes: Ouster lidar packets reach 25 KB (IPv4
/// reassembles them before the socket), every other family's packets fit in 2 KiB.
fn max_datagram(model: SensorModel) -> usize {
    match model.family() {
        Family::Ouster => 65_507,
        _ => 2048,
    }
}

/// Provided buffers of the `uring` backend: 4,096 of ~2 KiB, or 512 of ~64 KiB for Ouster
/// (about 8 MiB and 32 MiB).
fn uring_buffers(model: SensorModel) -> UringBuffers {
    match model.family() {
        Family::Ouster => UringBuffers { count: 512 },
        _ => UringBuffers::default(),
    }
}

/// Loads the XDP program and attaches it to `iface` (`--xdp-mode`, `--bpf-object`).
fn attach_program(plan: &Plan, iface: &str) -> Result<XdpProgram> {
    let object = match &plan.capture.bpf_object {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("read {}", p.display()))?),
        None => None,
    };
    let program = XdpProgram::load_and_attach(object.as_deref(), iface, plan.capture.xdp_mode)?;
    log::info!(
        "XDP program attached to {iface} ({:?} mode)",
        program.mode()
    );
    Ok(program)
}

/// Opens and binds the AF_XDP socket of (`iface`, `queue`) on a UMEM of `umem_frames` frames.
fn open_xsk(iface: &str, queue: u32, umem_frames: u32) -> Result<XskSocket> {
    // Fill and RX rings as large as the UMEM, so every frame can wait on the RX ring while
    // the decoder is busy (the stall a UMEM absorbs is then frame_count packets).
    let umem = UmemConfig {
        frame_count: umem_frames,
        fill_size: umem_frames,
        rx_size: umem_frames,
        ..UmemConfig::default()
    };
    let xcfg = XskConfig {
        ifname: iface.to_owned(),
        queue,
        mode: BindMode::Auto,
        need_wakeup: true,
        bind_retry: Duration::from_secs(10),
    };
    let xsk = XskSocket::open(&umem, &xcfg)
        .with_context(|| format!("AF_XDP socket on {iface} queue {queue}"))?;
    log::info!(
        "AF_XDP socket bound to {iface} queue {queue}: {:?} mode, UMEM {} frames on {}",
        xsk.bound_mode(),
        umem_frames,
        if xsk.uses_huge_pages() {
            "2 MiB hugepages"
        } else {
            "normal pages"
        }
    );
    Ok(xsk)
}
