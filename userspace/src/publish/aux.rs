//! What the sensors say besides their points, on its way to the ROS 2 sinks: IMU readings
//! from the capture threads and the `/diagnostics` array from the main thread, carried as
//! [`AuxMessage`]s through one bounded queue to one thread ([`AuxThread`]) that hands each to
//! every [`AuxSink`] (zenoh, DDS, Foxglove). The capture threads only `try_send`: a full
//! queue drops the message (counted in [`AuxSender::dropped`]), it never stalls ingest.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
    mpsc::{Receiver, SyncSender, TrySendError},
};

use lidarxdp_core::{ros2::DiagnosticStatus, sensor::ImuReading};

/// Messages the queue holds: four seconds of one Ouster's IMU at 100 Hz.
pub const AUX_QUEUE: usize = 400;

/// One message for the auxiliary sinks.
#[derive(Clone, Debug)]
pub enum AuxMessage {
    /// An IMU reading of sensor `sensor_id` (`sensor_msgs/msg/Imu` on its IMU topic).
    Imu {
        /// The sensor's id.
        sensor_id: u16,
        /// The reading and its stamp.
        reading: ImuReading,
    },
    /// The daemon's health: one status per sensor (`diagnostic_msgs/msg/DiagnosticArray` on
    /// `/diagnostics`), stamped `stamp_ns` (CLOCK_REALTIME ns).
    Diagnostics {
        /// `header.stamp`, ns since the Unix epoch.
        stamp_ns: u64,
        /// The statuses, in sensor order.
        status: Arc<[DiagnosticStatus]>,
    },
}

/// A destination of [`AuxMessage`]s, called on the [`AuxThread`]. Publishing must not wait
/// long (best effort, or reliable with a short blocking time): every sink shares the thread.
pub trait AuxSink: Send {
    /// Short name for logs.
    fn name(&self) -> &str;
    /// Publishes one IMU reading of `sensor_id` (nothing when the sensor has no IMU topic).
    fn imu(&mut self, sensor_id: u16, reading: &ImuReading);
    /// Publishes one diagnostics array.
    fn diagnostics(&mut self, stamp_ns: u64, status: &[DiagnosticStatus]);
}

/// The sending end, cloned into every capture thread and the main thread.
#[derive(Clone, Debug)]
pub struct AuxSender {
    tx: SyncSender<AuxMessage>,
    dropped: Arc<AtomicU64>,
}

impl AuxSender {
    /// Queues `msg` without waiting; a full queue (or an ended thread) drops it, counted.
    pub fn send(&self, msg: AuxMessage) {
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Messages dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
}

/// The thread that hands every [`AuxMessage`] to every [`AuxSink`]. It ends when every
/// [`AuxSender`] is dropped; [`AuxThread::join`] waits for that.
pub struct AuxThread {
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AuxThread {
    /// Starts the thread (`aux-sink`) with `sinks`; returns it and the sender.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn spawn(sinks: Vec<Box<dyn AuxSink>>) -> std::io::Result<(AuxThread, AuxSender)> {
        let (tx, rx) = std::sync::mpsc::sync_channel(AUX_QUEUE);
        let thread = std::thread::Builder::new()
            .name("aux-sink".into())
            .spawn(move || run(rx, sinks))?;
        Ok((
            AuxThread {
                thread: Some(thread),
            },
            AuxSender {
                tx,
                dropped: Arc::new(AtomicU64::new(0)),
            },
        ))
    }

    /// Waits for the thread, once every sender is gone; logs a panic.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            log::error!("aux-sink: the thread panicked");
        }
    }
}

fn run(rx: Receiver<AuxMessage>, mut sinks: Vec<Box<dyn AuxSink>>) {
    while let Ok(msg) = rx.recv() {
        for s in &mut sinks {
            match &msg {
                AuxMessage::Imu { sensor_id, reading } => s.imu(*sensor_id, reading),
                AuxMessage::Diagnostics { stamp_ns, status } => s.diagnostics(*stamp_ns, status),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Log(Arc<Mutex<Vec<String>>>);

    impl AuxSink for Log {
        fn name(&self) -> &str {
            "log"
        }
        fn imu(&mut self, sensor_id: u16, reading: &ImuReading) {
            self.0
                .lock()
                .unwrap()
                .push(format!("imu {sensor_id} {}", reading.stamp_ns));
        }
        fn diagnostics(&mut self, stamp_ns: u64, status: &[DiagnosticStatus]) {
            self.0
                .lock()
                .unwrap()
                .push(format!("diag {stamp_ns} {}", status.len()));
        }
    }

    /// Every message reaches every sink, in order; the thread ends with its last sender.
    #[test]
    fn every_message_reaches_every_sink_in_order() {
        let (a, b) = (Arc::default(), Arc::default());
        let (thread, tx) = AuxThread::spawn(vec![
            Box::new(Log(Arc::clone(&a))),
            Box::new(Log(Arc::clone(&b))),
        ])
        .unwrap();
        let reading = ImuReading {
            sample: lidarxdp_core::sensor::ouster::imu::parse(&[0; 48]).unwrap(),
            stamp_ns: 7,
            host_ns: 8,
            clock: lidarxdp_core::frame::FrameClock::Sensor,
        };
        tx.send(AuxMessage::Imu {
            sensor_id: 3,
            reading,
        });
        tx.send(AuxMessage::Diagnostics {
            stamp_ns: 9,
            status: Arc::from(Vec::new()),
        });
        assert_eq!(tx.dropped(), 0);
        drop(tx);
        thread.join();
        for log in [a, b] {
            assert_eq!(*log.lock().unwrap(), ["imu 3 7", "diag 9 0"]);
        }
    }
}
