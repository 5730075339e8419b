//! Privilege calls for [`crate::privs`]: `prctl(2)` (`PR_SET_NO_NEW_PRIVS`, `PR_CAP_AMBIENT`,
//! `PR_CAPBSET_DROP`), `capset(2)`, `initgroups(3)`, `setresgid(2)`, `setresuid(2)` and the
//! password database (`getpwnam_r(3)`). Capabilities are per thread (capabilities(7)); the
//! uid/gid calls go through glibc, which applies them to every thread of the process.

use std::{ffi::CStr, io};

/// `_LINUX_CAPABILITY_VERSION_3` (`include/uapi/linux/capability.h`): two 32-bit words per set.
const CAP_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct` (capability.h).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct` (capability.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Sets the calling thread's `no_new_privs` bit: no later `execve` can gain privileges
/// (`PR_SET_NO_NEW_PRIVS`, prctl(2); inherited by threads created afterwards).
///
/// # Errors
/// `EINVAL` on kernels before 3.5.
pub fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    super::cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}

/// Clears the calling thread's ambient capability set (`PR_CAP_AMBIENT_CLEAR_ALL`, prctl(2)).
///
/// # Errors
/// `EINVAL` on kernels without ambient capabilities (before 4.3).
pub fn clear_ambient() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    super::cvt(rc).map(drop)
}

/// Drops capability number `cap` from the calling thread's bounding set (`PR_CAPBSET_DROP`,
/// prctl(2)).
///
/// # Errors
/// `EPERM` without `CAP_SETPCAP`; `EINVAL` for a number above `kernel.cap_last_cap`.
pub fn drop_bounding(cap: libc::c_ulong) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    super::cvt(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) }).map(drop)
}

/// Sets the process's supplementary groups to those of user `name` plus `gid`
/// (initgroups(3)).
///
/// # Errors
/// `EPERM` without `CAP_SETGID`; `ENOMEM`.
pub fn initgroups(name: &CStr, gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call; initgroups
    // only reads it.
    super::cvt(unsafe { libc::initgroups(name.as_ptr(), gid) }).map(drop)
}

/// Sets the real, effective and saved group id to `gid` (setresgid(2); glibc applies it to
/// every thread).
///
/// # Errors
/// `EPERM` without `CAP_SETGID`.
pub fn setresgid(gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: integer arguments only.
    super::cvt(unsafe { libc::setresgid(gid, gid, gid) }).map(drop)
}

/// Sets the real, effective and saved user id to `uid` (setresuid(2); glibc applies it to
/// every thread). Leaving uid 0 clears the permitted and effective capability sets.
///
/// # Errors
/// `EPERM` without `CAP_SETUID`; `EAGAIN` when `RLIMIT_NPROC` would be exceeded.
pub fn setresuid(uid: libc::uid_t) -> io::Result<()> {
    // SAFETY: integer arguments only.
    super::cvt(unsafe { libc::setresuid(uid, uid, uid) }).map(drop)
}

/// `CAP_IPC_LOCK` (`linux/capability.h`): lock memory beyond `RLIMIT_MEMLOCK`.
pub const CAP_IPC_LOCK: u32 = 14;

/// Sets the calling thread's permitted and effective capability sets to `keep` (a mask of
/// `1 << CAP_*` bits, `linux/capability.h`) and empties its inheritable set (capset(2) with a
/// version-3 header, pid 0 = the calling thread). `keep` 0 drops every capability.
///
/// # Errors
/// `EPERM` when `keep` holds a capability the thread does not have; `EINVAL` (version
/// refused).
pub fn capset(keep: u64) -> io::Result<()> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    for (i, d) in data.iter_mut().enumerate() {
        let word = (keep >> (32 * i)) as u32;
        d.effective = word;
        d.permitted = word;
    }
    // SAFETY: capset reads a version-3 header and two data words from valid, repr(C) memory
    // that outlives the call; it writes nothing back for pid 0 and a known version.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    super::cvt(rc as libc::c_int).map(drop)
}

/// Keeps the permitted capabilities across a change from uid 0 to another uid
/// (prctl(2) `PR_SET_KEEPCAPS` = 1; the effective set is still cleared by the change).
///
/// # Errors
/// `EINVAL` on kernels without it (none since 2.2.18).
pub fn set_keepcaps() -> io::Result<()> {
    // SAFETY: integer arguments only.
    super::cvt(unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) }).map(drop)
}

/// Looks `name` up in the password database (getpwnam_r(3)); returns its `(uid, gid)`, or
/// `None` when there is no such user.
///
/// # Errors
/// The lookup failing (`EIO`, `ERANGE` for an entry above 16 KiB, `ENOMEM`, ...).
pub fn getpwnam(name: &CStr) -> io::Result<Option<(libc::uid_t, libc::gid_t)>> {
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: `passwd` is plain data (integers and pointers), for which all-zero is valid.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: the NUL-terminated name, the passwd struct,
    // the scratch buffer with its true length, and the result pointer. `pw`'s string fields
    // point into `buf`, which is not read after it is dropped (only the integers are kept).
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok((!result.is_null()).then_some((pw.pw_uid, pw.pw_gid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_uid_0_and_unknown_users_are_none() {
        assert_eq!(getpwnam(c"root").unwrap(), Some((0, 0)));
        assert_eq!(getpwnam(c"lxdp-no-such-user").unwrap(), None);
    }
}
