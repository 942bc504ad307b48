//! The POSIX shared-memory object and its mapping.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tsunagi_p2p::P2pError;

/// A mapped segment. Shared (in an `Arc`) by the transport and its event source, so that a
/// progress thread sleeping on the doorbell keeps the memory mapped; unmapped on last drop.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    /// "/<name>" for shm_open/shm_unlink.
    path: CString,
    name: String,
    unlinked: AtomicBool,
}

// SAFETY: the mapping is plain shared memory; every structure other threads or processes
// write concurrently inside it is an atomic, and the pointer itself is immutable.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

fn shm_path(name: &str) -> Result<CString, P2pError> {
    if name.is_empty() || name.contains('/') || name.len() > 200 {
        return Err(P2pError::Other(format!(
            "shm segment name {name:?}: must be non-empty, at most 200 bytes, without '/'"
        )));
    }
    CString::new(format!("/{name}"))
        .map_err(|_| P2pError::Other(format!("shm segment name {name:?} contains NUL")))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Closes a file descriptor on drop.
struct Fd(i32);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and close it once.
        unsafe {
            libc::close(self.0);
        }
    }
}

fn map_fd(fd: &Fd, len: usize) -> Result<*mut u8, P2pError> {
    // SAFETY: mapping a descriptor we own with a length the object has; the result is
    // checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(P2pError::last_os("mmap"));
    }
    Ok(p as *mut u8)
}

impl Mapping {
    /// Create `/dev/shm/<name>` exclusively, mode 0600, `len` bytes of zeroes, and map it.
    pub fn create(name: &str, len: usize) -> Result<Mapping, P2pError> {
        let path = shm_path(name)?;
        // SAFETY: path is a valid C string; the flags and mode are plain integers.
        let fd = unsafe {
            libc::shm_open(
                path.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600 as libc::mode_t,
            )
        };
        if fd < 0 {
            return Err(P2pError::last_os("shm_open"));
        }
        let fd = Fd(fd);
        let fail = |e: P2pError| {
            // SAFETY: removing the name we just created; errors are irrelevant here.
            unsafe {
                libc::shm_unlink(path.as_ptr());
            }
            e
        };
        // The umask can only clear bits, but make the 0600 explicit anyway.
        // SAFETY: fchmod on our own descriptor.
        if unsafe { libc::fchmod(fd.0, 0o600) } != 0 {
            return Err(fail(P2pError::last_os("fchmod")));
        }
        // Reserve the memory now (tmpfs): running out later would be a SIGBUS in the middle
        // of a send; now it is an error at start-up. Fall back to a sparse ftruncate where
        // fallocate is not supported.
        // SAFETY: plain syscalls on our descriptor.
        let rc = unsafe { libc::posix_fallocate(fd.0, 0, len as libc::off_t) };
        if rc != 0 {
            if rc == libc::ENOSPC {
                return Err(fail(P2pError::Os {
                    call: "posix_fallocate",
                    errno: rc,
                }));
            }
            // SAFETY: as above.
            if unsafe { libc::ftruncate(fd.0, len as libc::off_t) } != 0 {
                return Err(fail(P2pError::last_os("ftruncate")));
            }
        }
        let base = map_fd(&fd, len).map_err(fail)?;
        Ok(Mapping {
            base,
            len,
            path,
            name: name.to_string(),
            unlinked: AtomicBool::new(false),
        })
    }

    /// Open and map an existing `/dev/shm/<name>`, retrying while it does not exist yet or
    /// is still empty (launch skew) until `deadline`. The object must belong to us and be
    /// mode 0600.
    pub fn open(name: &str, wait: Duration, min_len: usize) -> Result<Mapping, P2pError> {
        let path = shm_path(name)?;
        let deadline = Instant::now() + wait;
        let (fd, len) = loop {
            // SAFETY: path is a valid C string.
            let fd = unsafe { libc::shm_open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
            if fd < 0 {
                let e = errno();
                if e == libc::ENOENT && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                return Err(P2pError::Os {
                    call: "shm_open",
                    errno: e,
                });
            }
            let fd = Fd(fd);
            // SAFETY: stat buffer on our stack, filled by the kernel.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fstat on our descriptor into a valid buffer.
            if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
                return Err(P2pError::last_os("fstat"));
            }
            // SAFETY: geteuid cannot fail.
            let euid = unsafe { libc::geteuid() };
            if st.st_uid != euid || st.st_mode & 0o777 != 0o600 {
                return Err(P2pError::Other(format!(
                    "shm segment /dev/shm/{name} has owner {} mode {:o}; expected {} and 600",
                    st.st_uid,
                    st.st_mode & 0o777,
                    euid
                )));
            }
            let len = st.st_size as usize;
            if len < min_len {
                if Instant::now() < deadline {
                    drop(fd);
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                return Err(P2pError::Other(format!(
                    "shm segment /dev/shm/{name} is {len} bytes, too small"
                )));
            }
            break (fd, len);
        };
        let base = map_fd(&fd, len)?;
        Ok(Mapping {
            base,
            len,
            path,
            name: name.to_string(),
            unlinked: AtomicBool::new(false),
        })
    }

    /// Start of the mapping.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The segment name (without '/').
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Remove the name. Idempotent: once this mapping unlinked it, it never unlinks again
    /// (a later job could have created the same name). ENOENT counts as success.
    pub fn unlink(&self) -> Result<(), P2pError> {
        if self.unlinked.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        unlink_path(&self.path)
    }
}

fn unlink_path(path: &CString) -> Result<(), P2pError> {
    // SAFETY: path is a valid C string.
    if unsafe { libc::shm_unlink(path.as_ptr()) } != 0 {
        let e = errno();
        if e != libc::ENOENT {
            return Err(P2pError::Os {
                call: "shm_unlink",
                errno: e,
            });
        }
    }
    Ok(())
}

/// Remove `/dev/shm/<name>`, ignoring every error (cleanup paths).
pub fn unlink_name(name: &str) {
    if let Ok(p) = shm_path(name) {
        let _ = unlink_path(&p);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; the last Arc is gone, so nothing
        // references the memory any more.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}
