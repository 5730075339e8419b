//! glibc's allocator tuning: `mallopt(3)`.

use std::io;

/// Keeps memory freed by the process inside the process instead of handing it back to the
/// kernel, through glibc's `mallopt(3)`:
/// - `M_TRIM_THRESHOLD` = `trim_threshold` bytes: the top of the heap is returned to the kernel
///   (`brk`) only when at least this much is free there;
/// - `M_MMAP_THRESHOLD` = `mmap_threshold` bytes: only allocations at least this big get their
///   own `mmap` (unmapped again on `free`); smaller ones come from the heap and are reused.
///
/// Call it early on the main thread, before the allocations it is meant for. Setting either
/// threshold also turns off glibc's dynamic adjustment of both.
///
/// # Errors
/// `InvalidInput` when a value does not fit a C `int`, or when glibc rejects one (`mallopt`
/// returns 0 and sets no `errno`, e.g. for a `mmap_threshold` above the maximum of that
/// glibc version). `Unsupported` on targets other than Linux with glibc, where nothing is
/// changed.
pub fn keep_freed_memory(trim_threshold: usize, mmap_threshold: usize) -> io::Result<()> {
    let int = |what: &str, v: usize| {
        libc::c_int::try_from(v).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} {v} does not fit a C int"),
            )
        })
    };
    let trim = int("M_TRIM_THRESHOLD", trim_threshold)?;
    let mmap = int("M_MMAP_THRESHOLD", mmap_threshold)?;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        for (name, param, value) in [
            ("M_TRIM_THRESHOLD", libc::M_TRIM_THRESHOLD, trim),
            ("M_MMAP_THRESHOLD", libc::M_MMAP_THRESHOLD, mmap),
        ] {
            // SAFETY: mallopt takes two plain integers and only changes glibc's allocator
            // parameters (it takes the arena lock itself); it touches no caller memory, and a
            // value out of range is rejected with 0, not undefined behaviour.
            if unsafe { libc::mallopt(param, value) } == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("mallopt({name}, {value}) rejected by glibc"),
                ));
            }
        }
        Ok(())
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (trim, mmap);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "mallopt(3) is glibc's",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only values that never reach `mallopt`: changing the test process's allocator would
    /// affect the other tests.
    #[test]
    fn rejects_values_a_c_int_cannot_hold() {
        let e = keep_freed_memory(1 << 40, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = keep_freed_memory(1 << 20, usize::MAX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
