//! The procfs and sysfs files the daemon reads: `/sys/class/net/IF/{ifindex,carrier_changes,
//! mtu,operstate}` (`Documentation/ABI/testing/sysfs-class-net`), `/proc/sys/net/core/rmem_max`
//! (`Documentation/admin-guide/sysctl/net.rst`) and `/proc/sys/kernel/cap_last_cap`
//! (`Documentation/admin-guide/sysctl/kernel.rst`).
//!
//! `/sys/class/net` lists the interfaces of the network namespace sysfs was mounted in, which
//! need not be the calling thread's: callers check [`net_ifindex`] against the index from
//! [`super::net::if_nametoindex`].

use std::{
    fs::File,
    io,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

/// `/sys/class/net/IFNAME`.
pub fn net_dir(ifname: &str) -> PathBuf {
    Path::new("/sys/class/net").join(ifname)
}

/// Parses the first decimal number of a file's text (surrounding white space allowed).
fn parse_decimal<T: std::str::FromStr>(path: &Path, text: &str) -> io::Result<T> {
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a decimal number: {text:?}", path.display()),
        )
    })
}

/// Reads a file holding one decimal number.
///
/// # Errors
/// The file cannot be read (`NotFound`, ...), or `InvalidData` naming it.
pub fn read_decimal<T: std::str::FromStr>(path: &Path) -> io::Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    parse_decimal(path, &text)
}

/// Re-reads an open sysfs/procfs file holding one decimal number from offset 0 (pread(2)),
/// which makes sysfs regenerate its text: no allocation, one syscall. At most 31 bytes are
/// read.
///
/// # Errors
/// The read failing (e.g. `ENODEV` once the device is gone), or `InvalidData`.
pub fn reread_decimal(f: &File) -> io::Result<u64> {
    let mut buf = [0u8; 32];
    let n = f.read_at(&mut buf, 0)?;
    let text = std::str::from_utf8(&buf[..n])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))?;
    parse_decimal(Path::new("(open file)"), text)
}

/// `/sys/class/net/IFNAME/ifindex`: the interface index as the mounted sysfs sees it.
///
/// # Errors
/// No such interface in sysfs's namespace (`NotFound`), or `InvalidData`.
pub fn net_ifindex(ifname: &str) -> io::Result<u32> {
    read_decimal(&net_dir(ifname).join("ifindex"))
}

/// Opens `/sys/class/net/IFNAME/ATTR` for [`reread_decimal`]: `carrier_changes` (carrier
/// up/down transitions since the device was created), `mtu` (bytes), ...
///
/// # Errors
/// No such file (`NotFound`).
pub fn open_net_attr(ifname: &str, attr: &str) -> io::Result<File> {
    File::open(net_dir(ifname).join(attr))
}

/// `/sys/class/net/IFNAME/operstate` (RFC 2863 state: `up`, `down`, `lowerlayerdown`, ...).
///
/// # Errors
/// No such interface in sysfs's namespace (`NotFound`).
pub fn net_operstate(ifname: &str) -> io::Result<String> {
    Ok(std::fs::read_to_string(net_dir(ifname).join("operstate"))?
        .trim()
        .to_owned())
}

/// `net.core.rmem_max` (bytes): the largest `SO_RCVBUF` an unprivileged socket may set, in the
/// calling process's network namespace.
///
/// # Errors
/// The file cannot be read, or `InvalidData`.
pub fn rmem_max() -> io::Result<u32> {
    read_decimal(Path::new("/proc/sys/net/core/rmem_max"))
}

/// `kernel.cap_last_cap`: the highest capability number this kernel knows.
///
/// # Errors
/// The file cannot be read, or `InvalidData`.
pub fn cap_last_cap() -> io::Result<libc::c_ulong> {
    read_decimal(Path::new("/proc/sys/kernel/cap_last_cap"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_decimal_file_again_from_the_start() {
        let path = std::env::temp_dir().join(format!("lidarxdp-decimal-{}", std::process::id()));
        std::fs::write(&path, "7\n").unwrap();
        let f = File::open(&path).unwrap();
        assert_eq!(reread_decimal(&f).unwrap(), 7);
        std::fs::write(&path, "12\n").unwrap();
        assert_eq!(reread_decimal(&f).unwrap(), 12);
        std::fs::write(&path, "not a number\n").unwrap();
        assert_eq!(
            reread_decimal(&f).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            read_decimal::<u32>(&path).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            read_decimal::<u32>(&path).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
