//! The zenoh sink's IMU and `/diagnostics` publishers ([`ZenohAux`]), declared with the point
//! cloud publishers on the same session and node, and fed by the daemon's
//! [`crate::publish::AuxThread`]. Each is an rmw_zenoh publisher like the point clouds' (its
//! `MP` liveliness token and the 33-byte attachment on every message): IMU best effort,
//! keep last 5 (ROS 2 SensorDataQoS, as ouster-ros offers it); `/diagnostics` reliable, keep
//! last 10 ([`lidarxdp_core::ros2::Qos::DIAGNOSTICS`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use lidarxdp_core::ros2::{
    Attachment, DIAGNOSTIC_ARRAY, DIAGNOSTICS_TOPIC, DiagnosticStatus, IMU, MessageType,
    NodeTokens, Qos, key_expr,
};
use lidarxdp_core::sensor::ImuReading;
use zenoh::Wait;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::Publisher;
use zenoh::qos::{CongestionControl, Reliability};

use super::sink::{SharedZenohCounters, gid_of};
use super::{ZenohError, ZenohSettings};
use crate::publish::AuxSink;

/// One declared publisher and its per-message state.
pub(super) struct AuxTopic {
    publisher: Publisher<'static>,
    /// Keeps the `MP` token declared.
    _token: LivelinessToken,
    gid: [u8; 16],
    sequence: i64,
}

impl AuxTopic {
    /// Declares a publisher of `ty` on `topic` with id `publisher_id` of `node`, and its token.
    ///
    /// # Errors
    /// [`ZenohError::Session`] naming the key zenoh refused.
    pub(super) fn declare(
        session: &zenoh::Session,
        settings: &ZenohSettings,
        node: &NodeTokens<'_>,
        publisher_id: u64,
        (topic, ty, qos): (&str, MessageType, &Qos),
    ) -> Result<Self, ZenohError> {
        let decl = |what: &str, e: zenoh::Error| ZenohError::Session(format!("{what}: {e}"));
        let key = key_expr(settings.domain_id, topic, ty, settings.distro);
        let reliable = qos.reliability == lidarxdp_core::ros2::Reliability::Reliable;
        let publisher = session
            .declare_publisher(key.clone())
            .congestion_control(CongestionControl::Drop)
            .reliability(if reliable {
                Reliability::Reliable
            } else {
                Reliability::BestEffort
            })
            .express(true)
            .wait()
            .map_err(|e| decl(&format!("declare publisher {key}"), e))?;
        let token_key = node.publisher_of(publisher_id, topic, ty, settings.distro, qos);
        let token = session
            .liveliness()
            .declare_token(token_key.clone())
            .wait()
            .map_err(|e| decl(&format!("declare token {token_key}"), e))?;
        log::info!("zenoh: {topic} on key {key}");
        Ok(AuxTopic {
            publisher,
            _token: token,
            gid: gid_of(&token_key),
            sequence: 0,
        })
    }

    /// Puts `message` with rmw_zenoh's attachment (sequence from 1, source time now).
    fn put(&mut self, message: Vec<u8>) -> Result<(), zenoh::Error> {
        self.sequence += 1;
        let attachment = Attachment {
            sequence_number: self.sequence,
            source_timestamp_ns: i64::try_from(crate::sys::clock::realtime_ns())
                .unwrap_or(i64::MAX),
            gid: self.gid,
        }
        .encode();
        self.publisher
            .put(message)
            .attachment(attachment.to_vec())
            .wait()
    }
}

/// The IMU publishers (one per sensor with an IMU topic) and the `/diagnostics` publisher.
pub struct ZenohAux {
    pub(super) imu: Vec<(u16, String, AuxTopic)>,
    pub(super) diagnostics: AuxTopic,
    pub(super) counters: Arc<SharedZenohCounters>,
}

impl ZenohAux {
    /// Declares them, with publisher ids from `first_id` on.
    ///
    /// # Errors
    /// [`ZenohError::Session`] naming the key zenoh refused.
    pub(super) fn declare(
        session: &zenoh::Session,
        settings: &ZenohSettings,
        node: &NodeTokens<'_>,
        first_id: u64,
        counters: Arc<SharedZenohCounters>,
    ) -> Result<Self, ZenohError> {
        let mut id = first_id;
        let mut imu = Vec::new();
        for t in &settings.topics {
            if let Some(topic) = &t.imu_topic {
                let p = AuxTopic::declare(session, settings, node, id, (topic, IMU, &Qos::LIDAR))?;
                imu.push((t.sensor_id, t.imu_frame_id.clone(), p));
                id += 1;
            }
        }
        let diagnostics = AuxTopic::declare(
            session,
            settings,
            node,
            id,
            (DIAGNOSTICS_TOPIC, DIAGNOSTIC_ARRAY, &Qos::DIAGNOSTICS),
        )?;
        Ok(ZenohAux {
            imu,
            diagnostics,
            counters,
        })
    }
}

impl AuxSink for ZenohAux {
    fn name(&self) -> &str {
        "zenoh"
    }

    fn imu(&mut self, sensor_id: u16, r: &ImuReading) {
        let Some((_, frame_id, topic)) = self.imu.iter_mut().find(|t| t.0 == sensor_id) else {
            return;
        };
        let put = lidarxdp_core::ros2::imu_message(
            r.stamp_ns,
            frame_id,
            r.sample.angular_velocity(),
            r.sample.linear_acceleration(),
        )
        .map_err(|e| e.to_string())
        .and_then(|m| topic.put(m).map_err(|e| e.to_string()));
        match put {
            Ok(()) => self.counters.imu.fetch_add(1, Relaxed),
            Err(e) => {
                log::debug!("zenoh: IMU of sensor {sensor_id} not put: {e}");
                self.counters.aux_errors.fetch_add(1, Relaxed)
            }
        };
    }

    fn diagnostics(&mut self, stamp_ns: u64, status: &[DiagnosticStatus]) {
        let put = lidarxdp_core::ros2::diagnostic_array(stamp_ns, status)
            .map_err(|e| e.to_string())
            .and_then(|m| self.diagnostics.put(m).map_err(|e| e.to_string()));
        match put {
            Ok(()) => self.counters.diagnostics.fetch_add(1, Relaxed),
            Err(e) => {
                log::debug!("zenoh: /diagnostics not put: {e}");
                self.counters.aux_errors.fetch_add(1, Relaxed)
            }
        };
    }
}
