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

/// `_LINUX_CAPABILITY_VERSION_3` (`include/uapi/linux/capability.h`): two 32-bit words per set.
const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

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
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: passwd is plain data, filled in by getpwnam_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call: the NUL-terminated name, the passwd struct,
    // the scratch buffer with its true length, and the result pointer.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no user named '{name}'"),
        ));
    }
    Ok(User {
        name: name.to_owned(),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    })
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

/// Drops every capability of the calling thread (see the module documentation), switching to
/// `user` on the way when given, and returns the resulting state. The bounding set is emptied
/// when the thread may (`CAP_SETPCAP`); otherwise it is left as the caller's supervisor set it.
///
/// # Errors
/// A failing `prctl`, `initgroups`, `setresgid`, `setresuid` or `capset`.
pub fn drop_all(user: Option<&User>) -> io::Result<CapState> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    check(
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) },
        "PR_SET_NO_NEW_PRIVS",
    )?;
    // SAFETY: as above. Fails with EINVAL only on kernels without ambient caps (< 4.3).
    let _ = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    let last_cap: libc::c_ulong = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    for cap in 0..=last_cap {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc < 0 {
            // EPERM: no CAP_SETPCAP; the bounding set stays as the supervisor set it.
            break;
        }
    }
    if let Some(u) = user {
        let cname = std::ffi::CString::new(u.name.as_str())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name contains NUL"))?;
        // SAFETY: a valid NUL-terminated name; initgroups reads it and sets this process's
        // supplementary groups.
        check(
            unsafe { libc::initgroups(cname.as_ptr(), u.gid as _) },
            "initgroups",
        )?;
        // SAFETY: integer arguments only; glibc applies it to every thread.
        check(unsafe { libc::setresgid(u.gid, u.gid, u.gid) }, "setresgid")?;
        // SAFETY: as above. Leaving uid 0 clears the permitted and effective sets too.
        check(unsafe { libc::setresuid(u.uid, u.uid, u.uid) }, "setresuid")?;
    }
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset(2) reads a v3 header and two data words from valid, properly laid out
    // (repr(C)) memory that outlives the call; pid 0 is the calling thread.
    check(
        unsafe {
            libc::syscall(
                libc::SYS_capset,
                &mut header as *mut CapHeader,
                data.as_ptr(),
            ) as libc::c_int
        },
        "capset",
    )?;
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
