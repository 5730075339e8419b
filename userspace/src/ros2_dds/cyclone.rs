//! The thin layer over Eclipse Cyclone DDS's C API (the `cyclors` crate, which vendors and
//! builds Cyclone DDS 11): every `unsafe` call of the DDS sink is here, each with the invariant
//! it relies on.
//!
//! # Ownership
//! A [`Participant`] owns its domain and every entity created under it (topics, writers, their
//! sertypes) through one shared guard, an `Arc` of the entities' handles behind a `RwLock`.
//! Each [`Writer`] holds a clone of that `Arc`, so the guard outlives every writer. Dropping
//! the [`Participant`] (on any thread, also while a panic unwinds) takes the lock for writing,
//! deletes the participant and its domain, and marks the guard closed; every writer call takes
//! the lock for reading and checks it first, so a writer used after that returns
//! [`CycloneError::Closed`] and never reaches a deleted entity or its freed sertype, whatever
//! the drop order and whichever thread the writer was moved to.
//!
//! Sources: Cyclone DDS `dds/dds.h` (entities, QoS, statuses, `dds_writecdr`,
//! `dds_get_entity_sertype`: the sertype lives at least as long as the entity), `dds/ddsi/
//! ddsi_serdata.h` (`ddsi_serdata_from_ser_iov`), and cyclors' `cyclocut/src/cdds_blob.c`
//! (`cdds_create_blob_topic`: a sertype whose samples are the serialised bytes themselves, with
//! the 4-byte encapsulation header, so pre-serialised XCDR1 goes out as it is).

use std::ffi::{CStr, CString, c_void};
use std::sync::{Arc, PoisonError, RwLock};

use cyclors as c;

/// Why a call of this layer failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CycloneError {
    /// A Cyclone DDS call returned an error (a negative `dds_return_t`).
    #[error("{call}: {text} ({code})")]
    Call {
        /// The C function.
        call: &'static str,
        /// The return code, negative (`DDS_RETCODE_*`, `dds/ddsrt/retcode.h`).
        code: i32,
        /// `dds_strretcode` of it.
        text: String,
    },
    /// A name or configuration for C holds a NUL byte.
    #[error("{what} {value:?} contains a NUL byte")]
    Nul {
        /// What the text is (e.g. `topic name`).
        what: &'static str,
        /// The text.
        value: String,
    },
    /// Cyclone could not make a sample of the serialised bytes (`ddsi_serdata_from_ser_iov`
    /// returned NULL).
    #[error("ddsi_serdata_from_ser_iov: no sample of {size} bytes")]
    NoSample {
        /// The sample's size, bytes.
        size: usize,
    },
    /// The [`Participant`] has been dropped (its sink has stopped): its entities are deleted and
    /// nothing is written.
    #[error("the DDS participant is closed (its sink has stopped)")]
    Closed,
}

/// Checks a `dds_return_t` / `dds_entity_t`: negative is an error.
fn check(call: &'static str, rc: i32) -> Result<i32, CycloneError> {
    if rc >= 0 {
        return Ok(rc);
    }
    // SAFETY: dds_strretcode accepts any value and returns a pointer to a static
    // NUL-terminated string (never NULL: unknown codes map to a fixed text).
    let text = unsafe { CStr::from_ptr(c::dds_strretcode(rc)) }
        .to_string_lossy()
        .into_owned();
    Err(CycloneError::Call {
        call,
        code: rc,
        text,
    })
}

/// A text for C: refused when it holds a NUL byte (then the error names `what`).
fn cstring(what: &'static str, s: &str) -> Result<CString, CycloneError> {
    CString::new(s).map_err(|_| CycloneError::Nul {
        what,
        value: s.to_owned(),
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

/// The handles of a participant and of the domain it owns, while they exist.
#[derive(Clone, Copy, Debug)]
struct Live {
    domain: c::dds_entity_t,
    participant: c::dds_entity_t,
}

/// Creates the blob topic `topic` of type `type_name` in `l`'s participant (Cyclone's
/// `cdds_create_blob_topic`: samples are serialised bytes, the sertype named `type_name`).
/// Called only inside [`Entities::with`], so the participant is live.
///
/// # Errors
/// [`CycloneError::Call`] when Cyclone refuses the topic.
fn blob_topic(
    l: Live,
    topic: &CString,
    type_name: &CString,
) -> Result<c::dds_entity_t, CycloneError> {
    // SAFETY: l.participant is live (the caller holds the guard's read lock); both strings are
    // NUL-terminated and outlive the call (cdds_create_blob_topic copies the type name into its
    // sertype, and dds_create_topic_sertype copies the topic name). The C function takes
    // `char *` but does not write through it.
    check("cdds_create_blob_topic", unsafe {
        c::cdds_create_blob_topic(
            l.participant,
            topic.as_ptr().cast_mut(),
            type_name.as_ptr().cast_mut(),
            true,
        )
    })
}

/// The guard a [`Participant`] shares with its [`Writer`]s (module documentation): `Some`
/// while the entities exist, `None` once [`Entities::close`] has deleted them. Every use of an
/// entity handle or of a sertype pointer of this participant happens under the read lock after
/// seeing `Some`; deletion happens only under the write lock.
#[derive(Debug)]
struct Entities {
    live: RwLock<Option<Live>>,
}

impl Entities {
    /// Runs `f` with the live handles, holding the read lock for all of `f` so that no entity
    /// is deleted meanwhile.
    ///
    /// # Errors
    /// [`CycloneError::Closed`] once the entities are deleted, else what `f` returns.
    fn with<R>(&self, f: impl FnOnce(Live) -> Result<R, CycloneError>) -> Result<R, CycloneError> {
        // A poisoned lock only means a thread panicked while holding it; the `Option` it
        // guards is always consistent (it is written in one assignment), so use it as is.
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        match *live {
            Some(l) => f(l),
            None => Err(CycloneError::Closed),
        }
    }

    /// Deletes the participant and its domain (with every topic and writer in them) once:
    /// waits for the writes in progress, and every later use sees [`CycloneError::Closed`].
    fn close(&self) {
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = live.take() {
            // SAFETY: both handles are live (they leave `live` only here, under the write
            // lock, so no other thread is using them or a sertype of theirs now). Deleting the
            // participant deletes its topics and writers; deleting the domain stops its
            // threads. Each is deleted exactly once: `live` is `None` from now on.
            unsafe {
                c::dds_delete(l.participant);
                c::dds_delete(l.domain);
            }
        }
    }
}

impl Drop for Entities {
    fn drop(&mut self) {
        // Normally already done by `Participant::drop`; kept so that the entities cannot
        // outlive the last holder of the guard in any case.
        self.close();
    }
}

/// A domain participant in a Cyclone DDS domain of its own (`dds_create_domain`, then
/// `dds_create_participant`): the domain's threads (receive, lease, garbage collection, event)
/// start with it. Dropping it deletes the participant, its topics and writers, and the domain,
/// and closes every [`Writer`] created from it (module documentation).
#[derive(Debug)]
pub struct Participant {
    entities: Arc<Entities>,
}

/// A writer of serialised samples on a blob topic. It keeps its participant's guard alive:
/// once the [`Participant`] is dropped, every call returns [`CycloneError::Closed`].
#[derive(Debug)]
pub struct Writer {
    entities: Arc<Entities>,
    handle: c::dds_entity_t,
    /// The blob sertype of the writer's topic (`dds_get_entity_sertype`): valid as long as
    /// the writer entity, i.e. while `entities` is live.
    sertype: *const c::ddsi_sertype,
}

// SAFETY: `Writer` is not `Send` by default only because of `sertype`. Entity handles are
// integers that Cyclone DDS accepts from any thread (its API is thread-safe: entity operations
// may be called concurrently, `dds/dds.h`). `sertype` is never dereferenced by Rust: it is only
// passed to Cyclone, always inside `Entities::with`, i.e. under the participant guard's read
// lock after checking that the writer (and so the topic that owns the sertype) has not been
// deleted; deletion happens only under the write lock (`Entities::close`). The sertype is
// immutable after creation apart from its atomic reference count, so using it from the thread
// a writer was moved to is sound.
unsafe impl Send for Writer {}

impl Participant {
    /// Creates domain `domain_id` configured by `config` and a participant in it with `qos`.
    /// `config` is Cyclone's comma-separated list of XML fragments and `file://` URIs, later
    /// entries overriding earlier ones (the syntax of `CYCLONEDDS_URI`, Cyclone DDS
    /// "Configuration" guide).
    ///
    /// # Errors
    /// [`CycloneError::Nul`]: a NUL byte in `config`. [`CycloneError::Call`]: Cyclone refused
    /// the configuration (it logs the offending element on stderr), the domain exists already
    /// in this process, its sockets could not be opened, or the participant was refused.
    pub fn create(domain_id: u32, config: &str, qos: &Qos) -> Result<Self, CycloneError> {
        let cfg = cstring("dds_create_domain config", config)?;
        // SAFETY: `cfg` is a NUL-terminated string that outlives the call; Cyclone parses it
        // and keeps no pointer to it.
        let domain = check("dds_create_domain", unsafe {
            c::dds_create_domain(domain_id, cfg.as_ptr())
        })?;
        // SAFETY: qos.0 is a live QoS object; a NULL listener is allowed. The domain
        // `domain_id` exists (just created), so the participant joins it.
        let participant = check("dds_create_participant", unsafe {
            c::dds_create_participant(domain_id, qos.0, std::ptr::null())
        });
        let participant = match participant {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `domain` is the live domain just created, owned by nobody else;
                // deleted exactly once, here.
                unsafe { c::dds_delete(domain) };
                return Err(e);
            }
        };
        Ok(Participant {
            entities: Arc::new(Entities {
                live: RwLock::new(Some(Live {
                    domain,
                    participant,
                })),
            }),
        })
    }

    /// The participant's GUID: its RTPS GUID prefix and entity id, 16 bytes in network order
    /// (`dds_get_guid`), which rmw uses as the participant's GID.
    ///
    /// # Errors
    /// [`CycloneError::Call`] from `dds_get_guid`.
    pub fn guid(&self) -> Result<[u8; 16], CycloneError> {
        self.entities.with(|l| guid_of(l.participant))
    }

    /// Creates a keyless blob topic `topic` of DDS type `type_name` and a writer on it with
    /// `qos`. Both are deleted with the participant.
    ///
    /// # Errors
    /// [`CycloneError::Nul`]: a NUL in a name. [`CycloneError::Call`]: Cyclone refused the
    /// topic or the writer (e.g. an inconsistent QoS).
    pub fn writer(&self, topic: &str, type_name: &str, qos: &Qos) -> Result<Writer, CycloneError> {
        let t = cstring("topic name", topic)?;
        let ty = cstring("type name", type_name)?;
        self.entities.with(|l| {
            let topic_h = blob_topic(l, &t, &ty)?;
            // SAFETY: topic_h is the live topic just created, qos.0 a live QoS; NULL listener.
            let handle = check("dds_create_writer", unsafe {
                c::dds_create_writer(l.participant, topic_h, qos.0, std::ptr::null())
            })?;
            let mut sertype: *const c::ddsi_sertype = std::ptr::null();
            // SAFETY: handle is a live writer; `sertype` is a valid out-pointer. The sertype
            // returned lives at least as long as the writer entity (`dds_get_entity_sertype`),
            // which lives until `Entities::close`.
            check("dds_get_entity_sertype", unsafe {
                c::dds_get_entity_sertype(handle, &mut sertype)
            })?;
            Ok(Writer {
                entities: self.entities.clone(),
                handle,
                sertype,
            })
        })
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        self.entities.close();
    }
}

/// `h`'s GUID. The caller holds the guard of `h`'s participant.
fn guid_of(h: c::dds_entity_t) -> Result<[u8; 16], CycloneError> {
    let mut g = c::dds_guid_t { v: [0; 16] };
    // SAFETY: `h` is a live entity (the caller holds its participant's guard) and `g` a valid
    // out-pointer of the right type.
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
    /// The writer's GUID (its GID for rmw), 16 bytes (`dds_get_guid`).
    ///
    /// # Errors
    /// [`CycloneError::Closed`] after the participant is dropped; [`CycloneError::Call`] from
    /// `dds_get_guid`.
    pub fn guid(&self) -> Result<[u8; 16], CycloneError> {
        self.entities.with(|_| guid_of(self.handle))
    }

    /// Writes one serialised sample made of `parts` (concatenated: XCDR1 encapsulation header
    /// first). Cyclone copies the bytes into its own sample (`ddsi_serdata_from_ser_iov` of the
    /// blob sertype), then sends it (fragmented as its `FragmentSize` says) and delivers it to
    /// the readers in this process before returning; a best-effort writer never waits for a
    /// reader, a reliable one at most its `max_blocking_time` (100 ms, [`WriterQos`]).
    ///
    /// # Errors
    /// [`CycloneError::Closed`] after the participant is dropped (nothing is written);
    /// [`CycloneError::NoSample`]: no memory for the sample; [`CycloneError::Call`]:
    /// `dds_writecdr` failed.
    pub fn write_cdr(&self, parts: &[&[u8]]) -> Result<(), CycloneError> {
        let iov: Vec<c::ddsrt_iovec_t> = parts
            .iter()
            .map(|p| c::ddsrt_iovec_t {
                iov_base: p.as_ptr().cast_mut().cast::<c_void>(),
                iov_len: p.len() as _,
            })
            .collect();
        let size: usize = parts.iter().map(|p| p.len()).sum();
        self.entities.with(|_| {
            // SAFETY: we hold the guard and it is live, so the writer and its topic exist and
            // self.sertype (the topic's blob sertype) is valid; `iov` describes `iov.len()`
            // readable buffers of `size` bytes in all, which the blob sertype copies and does
            // not write to.
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
                return Err(CycloneError::NoSample { size });
            }
            // SAFETY: self.handle is a live writer (guard held) and `sd` a serdata of its
            // sertype; dds_writecdr takes over our reference to `sd` whether it succeeds or
            // not.
            check("dds_writecdr", unsafe { c::dds_writecdr(self.handle, sd) })?;
            Ok(())
        })
    }

    /// The writer's matched-reader and incompatible-QoS statuses now.
    ///
    /// # Errors
    /// [`CycloneError::Closed`] after the participant is dropped; [`CycloneError::Call`] from
    /// the status calls.
    pub fn status(&self) -> Result<WriterStatus, CycloneError> {
        // SAFETY: all-zero is a valid value of these plain C structs (integers and a handle).
        let mut m: c::dds_publication_matched_status_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut q: c::dds_offered_incompatible_qos_status_t = unsafe { std::mem::zeroed() };
        self.entities.with(|_| {
            // SAFETY: self.handle is a live writer (guard held); both out-pointers are valid
            // and of the types the calls write.
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
            Ok(())
        })?;
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

/// A reader of serialised samples on a blob topic, for the tests' read-back: like a [`Writer`],
/// it holds its participant's guard and returns [`CycloneError::Closed`] once it is dropped.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Reader {
    entities: Arc<Entities>,
    handle: c::dds_entity_t,
}

#[cfg(test)]
impl Participant {
    /// Creates a blob topic `topic` of type `type_name` (the same sertype as a writer's of that
    /// name and type) and a reader on it: best effort, volatile, keep last 16, XCDR1.
    pub(crate) fn reader(&self, topic: &str, type_name: &str) -> Result<Reader, CycloneError> {
        let t = cstring("topic name", topic)?;
        let ty = cstring("type name", type_name)?;
        let q = Qos::new();
        let xcdr1 = [c::DDS_DATA_REPRESENTATION_XCDR1 as c::dds_data_representation_id_t];
        // SAFETY: q.0 is a live QoS object we own; the values are valid enumerators; `xcdr1`
        // outlives the call, which copies it.
        unsafe {
            c::dds_qset_history(q.0, c::dds_history_kind_DDS_HISTORY_KEEP_LAST, 16);
            c::dds_qset_data_representation(q.0, 1, xcdr1.as_ptr());
        }
        self.entities.with(|l| {
            let topic_h = blob_topic(l, &t, &ty)?;
            // SAFETY: l.participant and topic_h are live (guard held), q.0 a live QoS; NULL
            // listener.
            let handle = check("dds_create_reader", unsafe {
                c::dds_create_reader(l.participant, topic_h, q.0, std::ptr::null())
            })?;
            Ok(Reader {
                entities: self.entities.clone(),
                handle,
            })
        })
    }
}

#[cfg(test)]
impl Reader {
    /// Takes the oldest sample there is: its serialised bytes, encapsulation header included
    /// (`dds_takecdr`, then `ddsi_serdata_to_ser_ref` of the blob serdata); `None` when the
    /// reader holds none.
    pub(crate) fn take(&self) -> Result<Option<Vec<u8>>, CycloneError> {
        self.entities.with(|_| {
            let mut sd: *mut c::ddsi_serdata = std::ptr::null_mut();
            // SAFETY: all-zero is a valid value of this plain C struct (integers, a bool).
            let mut si: c::dds_sample_info_t = unsafe { std::mem::zeroed() };
            // SAFETY: self.handle is a live reader (guard held); `sd` and `si` are valid
            // out-pointers for one sample each (maxs 1).
            let n = check("dds_takecdr", unsafe {
                c::dds_takecdr(self.handle, &mut sd, 1, &mut si, c::DDS_ANY_STATE)
            })?;
            if n == 0 {
                return Ok(None);
            }
            // SAFETY: dds_takecdr returned one sample, so `sd` is a serdata we hold one
            // reference to.
            let size = unsafe { c::ddsi_serdata_size(sd) } as usize;
            let mut iov = c::ddsrt_iovec_t {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            };
            // SAFETY: `sd` is a live serdata of `size` serialised bytes; `iov` is a valid
            // out-pointer. The blob serdata points `iov` at its payload and returns a new
            // reference to itself, which keeps the payload alive until the unref below.
            let r = unsafe { c::ddsi_serdata_to_ser_ref(sd, 0, size, &mut iov) };
            // SAFETY: `iov` describes `iov_len` readable bytes of the payload, alive while `r`
            // is referenced.
            let bytes =
                unsafe { std::slice::from_raw_parts(iov.iov_base.cast::<u8>(), iov.iov_len) }
                    .to_vec();
            // SAFETY: `r` and `iov` are what ddsi_serdata_to_ser_ref returned, released once;
            // `sd` is the reference dds_takecdr gave us, released once. Neither is used after.
            unsafe {
                c::ddsi_serdata_to_ser_unref(r, &iov);
                c::ddsi_serdata_unref(sd);
            }
            Ok(Some(bytes))
        })
    }
}

/// What the tests of this layer and of the sink use to run Cyclone DDS in the test process
/// without reaching anything outside it.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

    /// A Cyclone fragment that puts the domain on the loopback interface alone, with no
    /// multicast. With [`crate::ros2_dds::DiscoveryRange::Off`] (no peers, participant index
    /// `none`, a domain tag of this process) nothing is sent to any address.
    pub(crate) const LOOPBACK_ONLY: &str = "<CycloneDDS><Domain id=\"any\"><General><Interfaces>\
<NetworkInterface address=\"127.0.0.1\"/></Interfaces><AllowMulticast>false</AllowMulticast>\
</General></Domain></CycloneDDS>";

    /// A domain id no other test of this process uses (a domain id exists once per process),
    /// from 160 up (at most 232, the largest Cyclone's port mapping takes; there are far fewer
    /// tests).
    pub(crate) fn domain_id() -> u32 {
        static NEXT: AtomicU32 = AtomicU32::new(160);
        let id = NEXT.fetch_add(1, Relaxed);
        assert!(id <= 232, "out of test domain ids");
        id
    }

    /// The configuration of a test domain: discovery off as rmw_cyclonedds configures it for
    /// `ROS_AUTOMATIC_DISCOVERY_RANGE=OFF`, then [`LOOPBACK_ONLY`].
    pub(crate) fn config() -> String {
        let off = crate::ros2_dds::Discovery {
            range: crate::ros2_dds::DiscoveryRange::Off,
            static_peers: vec![],
        }
        .cyclone_fragment(std::process::id())
        .expect("OFF has a fragment");
        format!("{off},{LOOPBACK_ONLY}")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    const TOPIC: &str = "rt/lidarxdp_unit";
    const TYPE: &str = "lidarxdp::msg::dds_::Unit_";
    /// A sample: the XCDR1 little-endian encapsulation header, then 4 payload bytes.
    const SAMPLE: [&[u8]; 2] = [&[0, 1, 0, 0], &[0xde, 0xad, 0xbe, 0xef]];

    fn participant(id: u32) -> Participant {
        Participant::create(id, &testing::config(), &Qos::participant("enclave=/;"))
            .expect("participant on a loopback-only test domain")
    }

    fn best_effort() -> Qos {
        Qos::writer(&WriterQos {
            reliability: Reliability::BestEffort,
            durability: Durability::Volatile,
            depth: 5,
            user_data: None,
        })
    }

    fn writer(p: &Participant) -> Writer {
        p.writer(TOPIC, TYPE, &best_effort()).expect("writer")
    }

    /// Creating the domain again succeeds only once the previous one is deleted: the proof
    /// that dropping the participant deleted its domain.
    fn assert_domain_deleted(id: u32) {
        drop(participant(id));
    }

    #[test]
    fn a_writer_used_after_its_participant_is_dropped_gets_closed() {
        let id = testing::domain_id();
        let p = participant(id);
        let w = writer(&p);
        assert_eq!(w.write_cdr(&SAMPLE), Ok(()));
        assert_eq!(w.status().map(|s| s.matched), Ok(0));
        assert_eq!(w.guid().map(|g| g.len()), Ok(16));
        drop(p);
        assert_eq!(w.write_cdr(&SAMPLE), Err(CycloneError::Closed));
        assert_eq!(w.status(), Err(CycloneError::Closed));
        assert_eq!(w.guid(), Err(CycloneError::Closed));
        assert_eq!(
            CycloneError::Closed.to_string(),
            "the DDS participant is closed (its sink has stopped)"
        );
        // The domain is gone even though `w` still holds the guard, and a new domain of the
        // same id does not revive the old writer.
        let p2 = participant(id);
        assert_eq!(w.write_cdr(&SAMPLE), Err(CycloneError::Closed));
        drop(p2);
        drop(w);
        assert_domain_deleted(id);
    }

    #[test]
    fn a_writer_moved_to_another_thread_gets_closed_after_the_participant_is_dropped() {
        let id = testing::domain_id();
        let p = participant(id);
        let w = writer(&p);
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let before = w.write_cdr(&SAMPLE);
            go_rx.recv().expect("the test thread signals");
            (before, w.write_cdr(&SAMPLE), w.status())
        });
        drop(p);
        go_tx.send(()).unwrap();
        let (before, after, status) = t.join().expect("the writer thread does not panic");
        // `before` ran either before or after the drop (no order is forced between them).
        assert!(
            before == Ok(()) || before == Err(CycloneError::Closed),
            "{before:?}"
        );
        assert_eq!(after, Err(CycloneError::Closed));
        assert_eq!(status, Err(CycloneError::Closed));
        assert_domain_deleted(id);
    }

    #[test]
    fn writes_racing_the_drop_of_the_participant_end_closed() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let id = testing::domain_id();
        let p = participant(id);
        let w = writer(&p);
        let dropped = Arc::new(AtomicBool::new(false));
        let (first_tx, first_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn({
            let dropped = dropped.clone();
            move || {
                let mut ok = 0u64;
                loop {
                    // Read before the write: when true, the drop has returned already.
                    let after_drop = dropped.load(SeqCst);
                    match w.write_cdr(&SAMPLE) {
                        Ok(()) if after_drop => return Err(ok),
                        Ok(()) => ok += 1,
                        Err(e) => return Ok((ok, e, w.write_cdr(&SAMPLE))),
                    }
                    if ok == 1 {
                        first_tx.send(()).unwrap();
                    }
                }
            }
        });
        first_rx.recv().unwrap();
        drop(p);
        dropped.store(true, SeqCst);
        let r = t.join().expect("the writer thread does not panic");
        let Ok((ok, first_err, next)) = r else {
            panic!("a write succeeded after the participant was dropped: {r:?}");
        };
        assert!(ok >= 1);
        // Once closed, closed for good: no write reaches a deleted writer.
        assert_eq!(first_err, CycloneError::Closed);
        assert_eq!(next, Err(CycloneError::Closed));
        assert_domain_deleted(id);
    }

    #[test]
    fn a_panic_on_the_participant_thread_closes_its_writers() {
        let id = testing::domain_id();
        let p = participant(id);
        let w = writer(&p);
        let t = std::thread::spawn(move || {
            let _owned = p;
            panic!("the sink thread panics (expected by the test)");
        });
        assert!(t.join().is_err());
        assert_eq!(w.write_cdr(&SAMPLE), Err(CycloneError::Closed));
        drop(w);
        assert_domain_deleted(id);
    }

    #[test]
    fn every_drop_order_runs_clean() {
        // Writer first, then participant.
        let id = testing::domain_id();
        let p = participant(id);
        let w = writer(&p);
        drop(w);
        // The participant is still open after its writer went.
        let w2 = writer(&p);
        assert_eq!(w2.write_cdr(&SAMPLE), Ok(()));
        drop(w2);
        drop(p);
        assert_domain_deleted(id);

        // Participant first, then the writers (one of them on another thread).
        let id = testing::domain_id();
        let p = participant(id);
        let (w, other) = (writer(&p), writer(&p));
        drop(p);
        std::thread::spawn(move || drop(other)).join().unwrap();
        drop(w);
        assert_domain_deleted(id);

        // A writer that outlives everything else, including a later domain of the same id.
        let id = testing::domain_id();
        let p = participant(id);
        let w = writer(&p);
        drop(p);
        let p2 = participant(id);
        let w_new = writer(&p2);
        assert_eq!(w_new.write_cdr(&SAMPLE), Ok(()));
        drop(p2);
        assert_eq!(w_new.write_cdr(&SAMPLE), Err(CycloneError::Closed));
        drop(w);
        drop(w_new);
        assert_domain_deleted(id);
    }

    #[test]
    fn a_reader_in_the_process_gets_the_exact_bytes_written() {
        let id = testing::domain_id();
        let p = participant(id);
        let w = writer(&p);
        let r = p.reader(TOPIC, TYPE).expect("reader");
        // Local readers match at creation and get samples during the write (Cyclone's
        // `ddsi_match_reader_with_local_writers`, `ddsi_deliver_locally_allinsync`).
        assert_eq!(w.status().map(|s| s.matched), Ok(1));
        assert_eq!(r.take(), Ok(None));
        assert_eq!(w.write_cdr(&SAMPLE), Ok(()));
        let payload: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        assert_eq!(
            w.write_cdr(&[&[0, 1, 0, 0], &payload[..3], &payload[3..]]),
            Ok(())
        );
        assert_eq!(r.take(), Ok(Some(vec![0, 1, 0, 0, 0xde, 0xad, 0xbe, 0xef])));
        let mut big = vec![0, 1, 0, 0];
        big.extend_from_slice(&payload);
        assert_eq!(r.take(), Ok(Some(big)));
        assert_eq!(r.take(), Ok(None));
        drop(p);
        assert_eq!(r.take(), Err(CycloneError::Closed));
        drop((w, r));
        assert_domain_deleted(id);
    }

    #[test]
    fn refusals_name_the_call_and_the_reason() {
        let id = testing::domain_id();
        let p = participant(id);
        assert_eq!(
            p.writer("rt/a\0b", TYPE, &best_effort()).unwrap_err(),
            CycloneError::Nul {
                what: "topic name",
                value: "rt/a\0b".into()
            }
        );
        // A history of depth 0 is not a QoS.
        let bad = Qos::writer(&WriterQos {
            reliability: Reliability::BestEffort,
            durability: Durability::Volatile,
            depth: 0,
            user_data: None,
        });
        let e = p.writer(TOPIC, TYPE, &bad).unwrap_err();
        assert_eq!(
            e,
            CycloneError::Call {
                call: "dds_create_writer",
                code: -3,
                text: "Bad Parameter".into()
            },
            "{e}"
        );
        // A second domain of an id this process already has.
        let e = Participant::create(id, &testing::config(), &Qos::participant("")).unwrap_err();
        assert_eq!(
            e,
            CycloneError::Call {
                call: "dds_create_domain",
                code: -4,
                text: "Precondition Not Met".into()
            },
            "{e}"
        );
        assert_eq!(policy_name(11), "RELIABILITY");
        assert_eq!(policy_name(2), "DURABILITY");
        assert_eq!(policy_name(99), "another policy");
    }
}
