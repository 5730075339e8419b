//! The per-packet decode of [`HesaiStream`]: each block group of a packet through the scan
//! cutter into the frame buffers (firing offsets ns, channel azimuths rad, the frame
//! accounting per group), and the checks that let a group skip the cutter.

#![forbid(unsafe_code)]

use crate::frame::Frame;
use crate::scan::AZIMUTH_UNITS;

use super::convert::{raw_window, return_types};
use super::cutter::{Actions, TAU_F32, normalize};
use super::firing_offset_ns;
use super::packet::Packet;
use super::stream::{HesaiStream, phased_in_buffer};

impl HesaiStream {
    pub(super) fn decode(
        &mut self,
        p: &Packet<&[u8]>,
        host_ns: u64,
        time_ns: u64,
        host_clock: bool,
        out: &mut Vec<Frame>,
    ) {
        let l = self.layout;
        let n = p.returns();
        let packet_ns = i64::try_from(time_ns).unwrap_or(i64::MAX);
        let shift = self.builder.clock().shift_ns();
        self.packet_serial += 1;
        // After a gap the head of the next frame is already estimated (pending_head_lost);
        // otherwise a frame the cutter opens at its (re)start is estimated from its first
        // packet's azimuth.
        let late = self.late;
        let head_known = self.pending_head_lost > 0 || late;
        let mut lost = if late {
            0
        } else {
            std::mem::take(&mut self.pending_head_lost)
        };
        if let Some(seq) = p.udp_sequence().filter(|_| !late) {
            // Packets lost since the previous one: exactly the sequence gap (scan module
            // documentation, "Sequence numbers").
            let az = (!l.fine_azimuth)
                .then(|| (u32::from(p.azimuth(0)), u32::from(p.azimuth(l.blocks - 1))));
            let step = self.step_cdeg();
            if let Some(gap) = self.seq.step(seq, az, step) {
                lost = lost.saturating_add(gap);
            }
        }
        let rm_byte = p.return_mode_byte();
        let key = (
            n,
            p.mode_flag() & 1,
            p.operational_state(),
            p.azimuth_state(0),
            p.azimuth_state(1),
        );
        if self.offsets_key != Some(key) {
            // QT128 alternates its firing loop packet by packet: keep the tables of the last
            // few keys instead of recomputing them.
            if let Some(old) = self.offsets_key.replace(key) {
                let e = (
                    old,
                    std::mem::take(&mut self.offsets),
                    std::mem::take(&mut self.group_earliest),
                );
                if self.offsets_cache.len() >= 4 {
                    self.offsets_cache.remove(0);
                }
                self.offsets_cache.push(e);
            }
            if let Some(i) = self.offsets_cache.iter().position(|e| e.0 == key) {
                let (_, o, g) = self.offsets_cache.remove(i);
                self.offsets = o;
                self.group_earliest = g;
            } else {
                self.fill_offsets(p);
            }
        }
        let unit = p.dis_unit_mm();
        if self.window.0 != unit {
            let (lo, span) = raw_window(unit, self.range);
            self.window = (unit, lo, span);
        }
        if self.rt_cache.0 != rm_byte {
            self.rt_cache = (rm_byte, return_types(self.layout.model, rm_byte));
        }
        for group in (0..l.blocks).step_by(n) {
            let raw_az = p.azimuth(group);
            let opening = self.cutter.state.is_none();
            let act = if late {
                // A late packet joins the buffers as they are: no cutter step.
                if self.tables.at128.is_some() && !self.at128_angles(p.azimuth_fine(group)) {
                    continue;
                }
                Actions::default()
            } else if self.can_skip_step(n, raw_az) {
                // No channel can cross the cut: the step would change nothing but `last_az`.
                self.last_raw = raw_az;
                self.last_az_stale = true;
                Actions::default()
            } else {
                if self.tables.at128.is_some() {
                    if !self.at128_angles(p.azimuth_fine(group)) {
                        continue;
                    }
                } else {
                    self.fill_az(raw_az);
                    self.sync_last_az();
                    self.last_raw = raw_az;
                }
                self.cutter.step(&self.az_scratch)
            };
            if opening && !head_known && self.tables.at128.is_none() {
                // Both frames the cutter opens began before this packet, not at a cut seen:
                // buffer 0 (the channels not yet past the cut) mid-turn, buffer 1 (the channels
                // just past it, when the packet straddles the cut) a little earlier. Each
                // misses the packets since its channel furthest past the cut crossed it.
                let cut = self.cut_cdeg;
                if let Some(st) = self.cutter.state.as_ref() {
                    for (x, buf) in self.bufs.iter_mut().enumerate() {
                        buf.head_phased = phased_in_buffer(&self.az_scratch, &st.buf, x, cut).max();
                    }
                }
            }
            let earliest = self.group_earliest.get(group).copied().unwrap_or(0);
            let group_start = packet_ns.saturating_add(earliest);
            if act.reset.iter().any(|&r| r) {
                for (i, r) in act.reset.iter().enumerate() {
                    if *r {
                        self.bufs[i].open(group_start, host_ns, shift);
                    }
                }
            }
            if let Some(e) = act.emit {
                self.emit(e, out);
            }
            let Some(st) = self.cutter.state.as_ref() else {
                continue;
            };
            for b in [st.buf[self.cutter.min_idx], st.buf[self.cutter.max_idx]] {
                let buf = &mut self.bufs[usize::from(b)];
                if !buf.started {
                    // The cutter's reset fell outside the field of view (or before start-up):
                    // the frame starts at its first block group.
                    buf.open(group_start, host_ns, shift);
                }
                buf.account.host_clock |= host_clock;
                // Under a field of view only packets with a block group inside it count.
                if buf.last_packet != self.packet_serial && self.cutter.block_in_fov() {
                    buf.last_packet = self.packet_serial;
                    buf.account.received = buf.account.received.saturating_add(1);
                    buf.account.lost = buf.account.lost.saturating_add(std::mem::take(&mut lost));
                    if late {
                        // Its gap was counted lost when the next packet arrived.
                        buf.account.lost = buf.account.lost.saturating_sub(1);
                    }
                }
            }
            if !self.cutter.block_in_fov() {
                continue;
            }
            for b in &mut self.bufs {
                b.points.set_packet_ns(packet_ns.max(0) as u64);
            }
            if !self.convert_fast(p, group, n, packet_ns) {
                if self.tables.at128.is_none() && self.scratch_raw != Some(raw_az) {
                    self.fill_az(raw_az);
                }
                self.convert_group(p, group, n, rm_byte, packet_ns);
            }
        }
    }

    /// Computes `offsets` and `group_earliest` for packet `p`'s key.
    fn fill_offsets(&mut self, p: &Packet<&[u8]>) {
        let l = self.layout;
        let n = p.returns();
        self.offsets.clear();
        for b in 0..l.blocks {
            for c in 0..l.channels {
                self.offsets
                    .push(firing_offset_ns(p, b, c).unwrap_or(i64::MIN));
            }
        }
        self.group_earliest.clear();
        self.group_earliest.resize(l.blocks, 0);
        for group in (0..l.blocks).step_by(n) {
            self.group_earliest[group] = (group..group + n)
                .flat_map(|b| self.offsets.iter().skip(b * l.channels).take(l.channels))
                .copied()
                .filter(|&o| o != i64::MIN)
                .min()
                .unwrap_or(0);
        }
    }

    /// Corrected azimuth of every channel (`az_scratch`) for raw block azimuth `raw` (0.01°).
    fn fill_az(&mut self, raw: u16) {
        let blk = self
            .tables
            .angles
            .blk_rad
            .get(usize::from(raw))
            .copied()
            .unwrap_or(0.0);
        self.az_scratch.clear();
        self.az_scratch.extend(
            self.tables
                .angles
                .off_rad
                .iter()
                .map(|&o| normalize(blk + o, TAU_F32)),
        );
        self.scratch_raw = Some(raw);
    }

    /// Writes the cutter's `last_az` when the fast path left it out of date.
    pub(super) fn sync_last_az(&mut self) {
        if !std::mem::take(&mut self.last_az_stale) {
            return;
        }
        let Some(st) = self.cutter.state.as_mut() else {
            return;
        };
        let blk = self
            .tables
            .angles
            .blk_rad
            .get(usize::from(self.last_raw))
            .copied()
            .unwrap_or(0.0);
        for (l, &o) in st.last_az.iter_mut().zip(&self.tables.angles.off_rad) {
            *l = normalize(blk + o, TAU_F32);
        }
    }

    /// The cutter's step for the block group at raw azimuth `raw` may be skipped: fast path,
    /// every channel in one frame buffer, and no channel's corrected azimuth can pass the cut
    /// since the last step. Every channel moved forward by the block advance `d` (≤ 10°), so
    /// its azimuths lie in `[last + off_min − 1, raw + off_max + 1]` (0.01°, cyclic; the 0.01°
    /// margin is far above the f32 rounding of the corrected azimuths), which must not hold
    /// the cut. With no field of view every channel stays in it.
    fn can_skip_step(&self, n: usize, raw: u16) -> bool {
        if !self.fast || n > 2 {
            return false;
        }
        let Some(st) = self.cutter.state.as_ref() else {
            return false;
        };
        if st.uniform.is_none() {
            return false;
        }
        let d = (u32::from(raw) + AZIMUTH_UNITS - u32::from(self.last_raw)) % AZIMUTH_UNITS;
        if d > 1_000 {
            return false;
        }
        let (omin, omax) = self.tables.angles.off_cdeg;
        let start = f64::from(self.last_raw) + omin - 1.0;
        let width = f64::from(d) + (omax - omin) + 2.0;
        let rel = (self.cut_cdeg_f - start).rem_euclid(f64::from(AZIMUTH_UNITS));
        width < f64::from(AZIMUTH_UNITS) / 2.0 && rel > width
    }
}
