//! Least privilege: once the daemon holds every kernel object it needs (the attached XDP program
//! and its map fds, the bound AF_XDP socket on its hugepage UMEM, the listening TCP socket), it
//! needs no capability any more, so it drops them all (see `docs/deploy.md`):
//!
//! - `PR_SET_NO_NEW_PRIVS`: no later `execve` can gain privileges;
//! - the ambient set is cleared;
//! - the bounding set is emptied (needs `CAP_SETPCAP`, which root has; a daemon started with
//!   only the caps of `docs/lidarxdp.service` keeps the unit's `CapabilityBoundingSet=`, which
//!   `NoNewPrivileges=yes` makes inert anyway);
//! - with `--user NAME`: supplementary groups, gid and uid become the user's (`initgroups`,
//!   `setresgid`, `setresuid`), which needs `CAP_SETGID`/`CAP_SETUID` (root has them);
//! - the permitted, effective and inheritable sets are set to empty (`capset(2)`).
//!
//! One exception, only when asked ([`drop_all`]'s `keep`): `CAP_IPC_LOCK`, kept by the zenoh
//! sink when its shared memory needs more locked memory than `RLIMIT_MEMLOCK` allows
//! (`crate::ros2_zenoh::ShmPool`: zenoh locks every segment it creates or maps, and the
//! kernel counts the pool already locked against every later mlock(2)). It stays in the
//! bounding, permitted and effective sets, nothing else does. With a memory-lock limit that
//! covers the pool (systemd `LimitMEMLOCK=infinity`) nothing is kept.
//!
//! Capabilities are per thread: call [`drop_all`] on the main thread before any other thread is
//! started, and the threads spawned afterwards inherit the empty sets.
//!
//! What still works without capabilities: reading the XDP program's counters through the map
//! fds already held, `XDP_STATISTICS` on the own socket, io_uring, accepting subscribers,
//! detaching the program on exit (closing the BPF link fd). What does not: re-attaching or
//! re-binding after the interface goes away (`CAP_BPF`, `CAP_PERFMON`, `CAP_NET_ADMIN`,
//! `CAP_NET_RAW`, `CAP_IPC_LOCK`) — the
//! daemon then exits and its supervisor restarts it; and `SO_SNDBUFFORCE` (the publisher falls
//! back to `SO_SNDBUF`).
use std::io;

use crate::sys::{caps, sysfs};

/// The calling thread's capability state as the kernel reports it in `/proc/thread-self/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapState {
    /// `CapEff` mask.
    pub effective: u64,
    /// `CapPrm` mask.
    pub permitted: u64,
    /// `CapInh` mask.
    pub inheritable: u64,
    /// `CapBnd` mask.
    pub bounding: u64,
    /// `CapAmb` mask.
    pub ambient: u64,
    /// `NoNewPrivs` flag.
    pub no_new_privs: bool,
}

impl CapState {
    /// Parses the `Cap*:` and `NoNewPrivs:` lines of a `/proc/.../status` text.
    pub fn parse(status: &str) -> Option<CapState> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let mask = |name: &str| field(name).and_then(|v| u64::from_str_radix(v, 16).ok());
        Some(CapState {
            effective: mask("CapEff:")?,
            permitted: mask("CapPrm:")?,
            inheritable: mask("CapInh:")?,
            bounding: mask("CapBnd:")?,
            ambient: mask("CapAmb:")?,
            no_new_privs: field("NoNewPrivs:")? == "1",
        })
    }

    /// The calling thread's state.
    ///
    /// # Errors
    /// `/proc` not mounted or unreadable, or lines missing.
    pub fn current() -> io::Result<CapState> {
        let text = std::fs::read_to_string("/proc/thread-self/status")?;
        CapState::parse(&text).ok_or_else(|| io::Error::other("no Cap* lines in /proc status"))
    }
}

impl std::fmt::Display for CapState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CapEff={:016x} CapPrm={:016x} CapInh={:016x} CapBnd={:016x} CapAmb={:016x} NoNewPrivs={}",
            self.effective,
            self.permitted,
            self.inheritable,
            self.bounding,
            self.ambient,
            u8::from(self.no_new_privs)
        )
    }
}

/// A user to switch to, from the password database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

/// Looks `name` up in the password database (`getpwnam_r`).
///
/// # Errors
/// No such user, or the lookup failed.
pub fn lookup_user(name: &str) -> io::Result<User> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name contains NUL"))?;
    let (uid, gid) = caps::getpwnam(&cname)?.ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("no user named '{name}'"))
    })?;
    Ok(User {
        name: name.to_owned(),
        uid,
        gid,
    })
}

/// Adds `what` (the failing call) to an error's text, keeping its kind.
fn named(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Drops every capability of the calling thread except those of the `keep` mask
/// (`1 << CAP_*` bits; 0 in every case but the zenoh exception of the module documentation),
/// switching to `user` on the way when given, and returns the resulting state. The bounding set is emptied
/// when the thread may (`CAP_SETPCAP`); otherwise it is left as the caller's supervisor set it.
///
/// # Errors
/// A failing `prctl`, `initgroups`, `setresgid`, `setresuid` or `capset`.
pub fn drop_all(user: Option<&User>, keep: u64) -> io::Result<CapState> {
    caps::set_no_new_privs().map_err(named("PR_SET_NO_NEW_PRIVS"))?;
    // Fails with EINVAL only on kernels without ambient caps (< 4.3): nothing to clear then.
    let _ = caps::clear_ambient();
    let last_cap = sysfs::cap_last_cap().unwrap_or(63);
    for cap in (0..=last_cap).filter(|c| keep & (1u64 << c) == 0) {
        if caps::drop_bounding(cap).is_err() {
            // EPERM: no CAP_SETPCAP; the bounding set stays as the supervisor set it.
            break;
        }
    }
    if let Some(u) = user {
        let cname = std::ffi::CString::new(u.name.as_str())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name contains NUL"))?;
        caps::initgroups(&cname, u.gid).map_err(named("initgroups"))?;
        caps::setresgid(u.gid).map_err(named("setresgid"))?;
        if keep != 0 {
            caps::set_keepcaps().map_err(named("PR_SET_KEEPCAPS"))?;
        }
        // Leaving uid 0 clears the permitted and effective sets too.
        caps::setresuid(u.uid).map_err(named("setresuid"))?;
    }
    caps::capset(keep).map_err(named("capset"))?;
    CapState::current()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_status() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                 CapEff:\t0000000000003000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n\
                 NoNewPrivs:\t1\n";
        let c = CapState::parse(s).unwrap();
        assert_eq!(c.effective, 0x3000);
        assert_eq!(c.permitted, 0x1ff_ffff_ffff);
        assert!(c.no_new_privs);
        assert!(CapState::parse("Name:\tx\n").is_none());
    }
}
