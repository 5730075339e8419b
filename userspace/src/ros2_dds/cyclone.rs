//! The thin layer over Eclipse Cyclone DDS's C API (the `cyclors` crate, which vendors and
//! builds Cyclone DDS 11): every `unsafe` call of the DDS sink is here, each with the invariant
//! it relies on. Above it, [`Domain`], [`Participant`], [`Writer`] are owned handles that
//! delete their entity on drop.
//!
//! Sources: Cyclone DDS `dds/dds.h` (entities, QoS, statuses, `dds_writecdr`), `dds/ddsi/
//! ddsi_serdata.h` (`ddsi_serdata_from_ser_iov`), and cyclors' `cyclocut/src/cdds_blob.c`
//! (`cdds_create_blob_topic`: a sertype whose samples are the serialised bytes themselves, with
//! the 4-byte encapsulation header, so pre-serialised XCDR1 goes out as it is).

use std::ffi::{CStr, CString, c_void};

use cyclors as c;

/// A Cyclone DDS return code (negative `dds_return_t`) with the call that returned it.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {text} ({code})")]
pub struct DdsCallError {
    /// The C function.
    pub call: &'static str,
    /// The return code.
    pub code: i32,
    /// `dds_strretcode` of it.
    pub text: String,
}

/// Checks a `dds_return_t` / `dds_entity_t`: negative is an error.
fn check(call: &'static str, rc: i32) -> Result<i32, DdsCallError> {
    if rc >= 0 {
        return Ok(rc);
    }
    // SAFETY: dds_strretcode accepts any value and returns a pointer to a static
    // NUL-terminated string (never NULL: unknown codes map to a fixed text).
    let text = unsafe { CStr::from_ptr(c::dds_strretcode(rc)) }
        .to_string_lossy()
        .into_owned();
    Err(DdsCallError {
        call,
        code: rc,
        text,
    })
}

/// A text for C: refused when it holds a NUL byte (then the error names `what`).
fn cstring(what: &'static str, s: &str) -> Result<CString, DdsCallError> {
    CString::new(s).map_err(|_| DdsCallError {
        call: what,
        code: -1,
        text: format!("{s:?} contains a NUL byte"),
    })
}

/// An owned `dds_qos_t` (deleted on drop).
pub struct Qos(*mut c::dds_qos_t);

/// QoS reliability: best effort or reliable (DDS 1.4 §2.2.3.14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reliability {
    /// Samples are sent once; a lost fragment loses the sample.
    BestEffort,
    /// Samples are repaired; a writer may block up to 100 ms on a full history.
    Reliable,
}

/// QoS durability (DDS 1.4 §2.2.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Only readers present when a sample is written get it.
    Volatile,
    /// The writer keeps its last `depth` samples for readers that join later.
    TransientLocal,
}

/// One writer's QoS, as rmw_cyclonedds builds it (`create_readwrite_qos`): keep last `depth`,
/// the reliability and durability given, automatic liveliness, infinite deadline and lease,
/// no auto-dispose, XCDR1 data representation, and USER_DATA `user_data` when given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterQos {
    /// Reliability.
    pub reliability: Reliability,
    /// Durability.
    pub durability: Durability,
    /// History depth (keep last), 1..=i32::MAX.
    pub depth: i32,
    /// USER_DATA bytes (e.g. `typehash=RIHS01_...;`).
    pub user_data: Option<String>,
}

impl Qos {
    fn new() -> Self {
        // SAFETY: dds_create_qos has no preconditions; it returns a fresh QoS object (it
        // aborts on out-of-memory rather than returning NULL).
        Qos(unsafe { c::dds_create_qos() })
    }

    fn user_data(&mut self, data: &str) {
        // SAFETY: self.0 is a live QoS object we own; the pointer and length describe
        // `data`'s bytes, which Cyclone copies before returning.
        unsafe { c::dds_qset_userdata(self.0, data.as_ptr().cast::<c_void>(), data.len()) };
    }

    /// A participant's QoS: only USER_DATA.
    pub fn participant(user_data: &str) -> Self {
        let mut q = Qos::new();
        q.user_data(user_data);
        q
    }

    /// A writer's QoS from `w`.
    pub fn writer(w: &WriterQos) -> Self {
        let mut q = Qos::new();
        let (kind, block) = match w.reliability {
            Reliability::BestEffort => (c::dds_reliability_kind_DDS_RELIABILITY_BEST_EFFORT, 0),
            Reliability::Reliable => (
                c::dds_reliability_kind_DDS_RELIABILITY_RELIABLE,
                100_000_000, // 100 ms, ns
            ),
        };
        let xcdr1 = [c::DDS_DATA_REPRESENTATION_XCDR1 as c::dds_data_representation_id_t];
        // SAFETY: q.0 is a live QoS object we own; every value is a valid enumerator or
        // duration; `xcdr1` outlives the call, which copies it.
        unsafe {
            c::dds_qset_writer_data_lifecycle(q.0, false);
            c::dds_qset_history(q.0, c::dds_history_kind_DDS_HISTORY_KEEP_LAST, w.depth);
            c::dds_qset_reliability(q.0, kind, block);
            c::dds_qset_liveliness(
                q.0,
                c::dds_liveliness_kind_DDS_LIVELINESS_AUTOMATIC,
                i64::MAX, // DDS_INFINITY
            );
            c::dds_qset_data_representation(q.0, 1, xcdr1.as_ptr());
            match w.durability {
                Durability::Volatile => {
                    c::dds_qset_durability(q.0, c::dds_durability_kind_DDS_DURABILITY_VOLATILE)
                }
                Durability::TransientLocal => {
                    c::dds_qset_durability(
                        q.0,
                        c::dds_durability_kind_DDS_DURABILITY_TRANSIENT_LOCAL,
                    );
                    // What the writer retains for late joiners is its durability service
                    // history (rmw_cyclonedds does the same): keep last `depth`.
                    c::dds_qset_durability_service(
                        q.0,
                        0,
                        c::dds_history_kind_DDS_HISTORY_KEEP_LAST,
                        w.depth,
                        -1, // DDS_LENGTH_UNLIMITED
                        -1,
                        -1,
                    );
                }
            }
        }
        if let Some(u) = &w.user_data {
            q.user_data(u);
        }
        q
    }
}

impl Drop for Qos {
    fn drop(&mut self) {
        // SAFETY: self.0 came from dds_create_qos and is deleted exactly once, here.
        unsafe { c::dds_delete_qos(self.0) };
    }
}

/// A Cyclone DDS domain created with an explicit configuration (`dds_create_domain`): its
/// threads (receive, lease, garbage collection, event) start here. Deleted on drop, with
/// every participant in it.
pub struct Domain(c::dds_entity_t);

impl Domain {
    /// Creates domain `id` configured by `config`: Cyclone's comma-separated list of XML
    /// fragments and `file://` URIs, later entries overriding earlier ones (the syntax of
    /// `CYCLONEDDS_URI`, Cyclone DDS "Configuration" guide).
    ///
    /// # Errors
    /// [`DdsCallError`]: Cyclone refused the configuration (it logs the offending element on
    /// stderr), the domain exists already, or its sockets could not be opened.
    pub fn create(id: u32, config: &str) -> Result<Self, DdsCallError> {
        let cfg = cstring("dds_create_domain config", config)?;
        // SAFETY: `cfg` is a NUL-terminated string that outlives the call; Cyclone parses it
        // and keeps no pointer to it.
        let h = check("dds_create_domain", unsafe {
            c::dds_create_domain(id, cfg.as_ptr())
        })?;
        Ok(Domain(h))
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: self.0 is the live domain handle returned by dds_create_domain; deleting a
        // domain deletes its participants and stops its threads. Deleted exactly once.
        unsafe { c::dds_delete(self.0) };
    }
}

/// A domain participant. Deleted on drop (with its topics and writers).
pub struct Participant(c::dds_entity_t);

/// A writer of serialised samples on a blob topic; deleted with its participant.
pub struct Writer {
    handle: c::dds_entity_t,
    sertype: *const c::ddsi_sertype,
}

// SAFETY: Cyclone DDS entity handles are integers valid from any thread (its API is
// thread-safe, Cyclone DDS "API reference": all entity operations may be called concurrently);
// the sertype pointer is owned by the topic, which lives as long as the writer, and is only
// passed back to Cyclone.
unsafe impl Send for Writer {}
// SAFETY: as for `Writer`: a participant handle is a thread-safe integer handle.
unsafe impl Send for Participant {}
// SAFETY: as for `Writer`.
unsafe impl Send for Domain {}

impl Participant {
    /// Creates a participant in domain `domain_id` (whose [`Domain`] must exist) with `qos`.
    ///
    /// # Errors
    /// [`DdsCallError`] from `dds_create_participant`.
    pub fn create(domain_id: u32, qos: &Qos) -> Result<Self, DdsCallError> {
        // SAFETY: qos.0 is a live QoS object; a NULL listener is allowed.
        let h = check("dds_create_participant", unsafe {
            c::dds_create_participant(domain_id, qos.0, std::ptr::null())
        })?;
        Ok(Participant(h))
    }

    /// The participant's GUID: its RTPS GUID prefix and entity id, 16 bytes in network order
    /// (`dds_get_guid`), which rmw uses as the participant's GID.
    ///
    /// # Errors
    /// [`DdsCallError`] from `dds_get_guid`.
    pub fn guid(&self) -> Result<[u8; 16], DdsCallError> {
        guid_of(self.0)
    }

    /// Creates a keyless blob topic `topic` of DDS type `type_name` and a writer on it with
    /// `qos`.
    ///
    /// # Errors
    /// [`DdsCallError`]: a NUL in a name, or Cyclone refused the topic (another type under
    /// the same name) or the writer.
    pub fn writer(&self, topic: &str, type_name: &str, qos: &Qos) -> Result<Writer, DdsCallError> {
        let t = cstring("topic name", topic)?;
        let ty = cstring("type name", type_name)?;
        // SAFETY: self.0 is a live participant; both strings are NUL-terminated and outlive
        // the call (cdds_create_blob_topic copies the type name into its sertype, and
        // dds_create_topic_sertype copies the topic name). The C function takes `char *` but
        // does not write through it.
        let topic_h = check("cdds_create_blob_topic", unsafe {
            c::cdds_create_blob_topic(self.0, t.as_ptr().cast_mut(), ty.as_ptr().cast_mut(), true)
        })?;
        // SAFETY: topic_h is the live topic just created, qos.0 a live QoS; NULL listener.
        let handle = check("dds_create_writer", unsafe {
            c::dds_create_writer(self.0, topic_h, qos.0, std::ptr::null())
        })?;
        let mut sertype: *const c::ddsi_sertype = std::ptr::null();
        // SAFETY: handle is a live writer; `sertype` is a valid out-pointer. The sertype
        // returned is owned by the topic, which lives as long as the writer.
        check("dds_get_entity_sertype", unsafe {
            c::dds_get_entity_sertype(handle, &mut sertype)
        })?;
        Ok(Writer { handle, sertype })
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        // SAFETY: self.0 is a live participant; deleting it deletes its topics and writers.
        // Deleted exactly once.
        unsafe { c::dds_delete(self.0) };
    }
}

fn guid_of(h: c::dds_entity_t) -> Result<[u8; 16], DdsCallError> {
    let mut g = c::dds_guid_t { v: [0; 16] };
    // SAFETY: `h` is a live entity and `g` a valid out-pointer of the right type.
    check("dds_get_guid", unsafe { c::dds_get_guid(h, &mut g) })?;
    Ok(g.v)
}

/// A writer's statuses of interest (`dds_get_*_status`, which also reset the change counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStatus {
    /// Readers matched now (`publication_matched.current_count`).
    pub matched: u32,
    /// Readers ever found with an incompatible QoS (`offered_incompatible_qos.total_count`).
    pub incompatible_total: u32,
    /// The policy id of the last incompatibility (`last_policy_id`, [`policy_name`]: 11
    /// reliability, 2 durability, ...), 0 when none.
    pub last_policy_id: u32,
}

impl Writer {
    /// The writer's GUID (its GID for rmw).
    ///
    /// # Errors
    /// [`DdsCallError`] from `dds_get_guid`.
    pub fn guid(&self) -> Result<[u8; 16], DdsCallError> {
        guid_of(self.handle)
    }

    /// Writes one serialised sample made of `parts` (concatenated: XCDR1 encapsulation header
    /// first), `size` bytes in all. Cyclone copies the bytes into its own sample
    /// (`ddsi_serdata_from_ser_iov` of the blob sertype), then sends it (fragmented as its
    /// `FragmentSize` says) before returning; a best-effort writer never waits for a reader.
    ///
    /// # Errors
    /// [`DdsCallError`]: no memory for the sample, or `dds_writecdr` failed.
    pub fn write_cdr(&self, parts: &[&[u8]]) -> Result<(), DdsCallError> {
        let iov: Vec<c::ddsrt_iovec_t> = parts
            .iter()
            .map(|p| c::ddsrt_iovec_t {
                iov_base: p.as_ptr().cast_mut().cast::<c_void>(),
                iov_len: p.len() as _,
            })
            .collect();
        let size: usize = parts.iter().map(|p| p.len()).sum();
        // SAFETY: self.sertype is the blob sertype of this writer's topic (alive as long as
        // the writer); `iov` describes `iov.len()` readable buffers of `size` bytes in all,
        // which the blob sertype copies and does not write to.
        let sd = unsafe {
            c::ddsi_serdata_from_ser_iov(
                self.sertype,
                c::ddsi_serdata_kind_SDK_DATA,
                iov.len() as _,
                iov.as_ptr(),
                size,
            )
        };
        if sd.is_null() {
            return Err(DdsCallError {
                call: "ddsi_serdata_from_ser_iov",
                code: -1,
                text: format!("no sample of {size} bytes"),
            });
        }
        // SAFETY: self.handle is a live writer and `sd` a serdata of its sertype; dds_writecdr
        // takes over our reference to `sd` whether it succeeds or not.
        check("dds_writecdr", unsafe { c::dds_writecdr(self.handle, sd) })?;
        Ok(())
    }

    /// The writer's matched-reader and incompatible-QoS statuses now.
    ///
    /// # Errors
    /// [`DdsCallError`] from the status calls.
    pub fn status(&self) -> Result<WriterStatus, DdsCallError> {
        // SAFETY: all-zero is a valid value of these plain C structs (integers and a handle).
        let mut m: c::dds_publication_matched_status_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut q: c::dds_offered_incompatible_qos_status_t = unsafe { std::mem::zeroed() };
        // SAFETY: self.handle is a live writer; both out-pointers are valid and of the types
        // the calls write.
        unsafe {
            check(
                "dds_get_publication_matched_status",
                c::dds_get_publication_matched_status(self.handle, &mut m),
            )?;
            check(
                "dds_get_offered_incompatible_qos_status",
                c::dds_get_offered_incompatible_qos_status(self.handle, &mut q),
            )?;
        }
        Ok(WriterStatus {
            matched: m.current_count,
            incompatible_total: q.total_count,
            last_policy_id: q.last_policy_id,
        })
    }
}

/// The name of a DDS QoS policy id (Cyclone `dds_qos_policy_id_t`, `dds_public_qosdefs.h`), as an
/// operator reads it in a log line.
pub fn policy_name(id: u32) -> &'static str {
    match id {
        1 => "USER_DATA",
        2 => "DURABILITY",
        3 => "PRESENTATION",
        4 => "DEADLINE",
        5 => "LATENCY_BUDGET",
        6 => "OWNERSHIP",
        8 => "LIVELINESS",
        9 => "TIME_BASED_FILTER",
        10 => "PARTITION",
        11 => "RELIABILITY",
        12 => "DESTINATION_ORDER",
        13 => "HISTORY",
        14 => "RESOURCE_LIMITS",
        21 => "LIFESPAN",
        22 => "DURABILITY_SERVICE",
        24 => "TYPE_CONSISTENCY_ENFORCEMENT",
        25 => "DATA_REPRESENTATION",
        _ => "another policy",
    }
}
