//! The shared-memory object and its mapping: a named POSIX object in /dev/shm, or an
//! anonymous memfd that other processes open through `/proc/<pid>/fd/<fd>` (no name ever
//! exists, so nothing can be left behind however the job dies).

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tsunagi_p2p::P2pError;

/// A mapped segment. Shared (in an `Arc`) by the transport and its event source, so that a
/// progress thread sleeping on the doorbell keeps the memory mapped; unmapped on last drop.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    /// "/<name>" for shm_open/shm_unlink; None for a memfd.
    path: Option<CString>,
    name: String,
    unlinked: AtomicBool,
    /// A memfd creator's descriptor, the way in for the others until `unlink` closes it.
    memfd: std::sync::Mutex<Option<Fd>>,
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
            path: Some(path),
            name: name.to_string(),
            unlinked: AtomicBool::new(false),
            memfd: std::sync::Mutex::new(None),
        })
    }

    /// Create an anonymous segment (memfd, mode 0600) of `len` bytes of zeroes and map it.
    /// Others reach it through [`Mapping::card`] until [`Mapping::unlink`] closes the way.
    pub fn create_memfd(label: &str, len: usize) -> Result<Mapping, P2pError> {
        let cname = CString::new(label)
            .map_err(|_| P2pError::Other(format!("shm label {label:?} contains NUL")))?;
        // SAFETY: a valid C string and plain flags.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(P2pError::last_os("memfd_create"));
        }
        let fd = Fd(fd);
        // SAFETY: fchmod on our own descriptor.
        if unsafe { libc::fchmod(fd.0, 0o600) } != 0 {
            return Err(P2pError::last_os("fchmod"));
        }
        // Reserve the memory now, as for a named segment (see `create`).
        // SAFETY: plain syscalls on our descriptor.
        let rc = unsafe { libc::posix_fallocate(fd.0, 0, len as libc::off_t) };
        if rc != 0 {
            if rc == libc::ENOSPC {
                return Err(P2pError::Os {
                    call: "posix_fallocate",
                    errno: rc,
                });
            }
            // SAFETY: as above.
            if unsafe { libc::ftruncate(fd.0, len as libc::off_t) } != 0 {
                return Err(P2pError::last_os("ftruncate"));
            }
        }
        let base = map_fd(&fd, len)?;
        Ok(Mapping {
            base,
            len,
            path: None,
            name: label.to_string(),
            unlinked: AtomicBool::new(false),
            memfd: std::sync::Mutex::new(Some(fd)),
        })
    }

    /// How another process of this user opens a memfd segment: `<pid>:<fd>`; None for a
    /// named segment or once [`Mapping::unlink`] closed the descriptor.
    pub fn card(&self) -> Option<String> {
        let fd = self.memfd.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: getpid cannot fail.
        fd.as_ref()
            .map(|fd| format!("{}:{}", unsafe { libc::getpid() }, fd.0))
    }

    /// Open and map the memfd segment another process created, given its
    /// [`Mapping::card`]. The object must belong to us and be mode 0600.
    pub fn open_card(card: &str, min_len: usize) -> Result<Mapping, P2pError> {
        let bad = || P2pError::Other(format!("shm card {card:?}: expected <pid>:<fd>"));
        let (pid, fd) = card.split_once(':').ok_or_else(bad)?;
        let pid: u32 = pid.parse().map_err(|_| bad())?;
        let fd: u32 = fd.parse().map_err(|_| bad())?;
        let proc_path = format!("/proc/{pid}/fd/{fd}");
        let cpath = CString::new(proc_path.clone()).map_err(|_| bad())?;
        // SAFETY: a valid C string; opening the creator's descriptor reopens the memfd.
        let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(P2pError::Other(format!(
                "shm segment {proc_path}: {} (did the node leader die?)",
                std::io::Error::last_os_error()
            )));
        }
        let fd = Fd(fd);
        let len = check_owned(&fd, &proc_path, min_len)?;
        let base = map_fd(&fd, len)?;
        Ok(Mapping {
            base,
            len,
            path: None,
            name: proc_path,
            unlinked: AtomicBool::new(false),
            memfd: std::sync::Mutex::new(None),
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
            let what = format!("/dev/shm/{name}");
            // Until the deadline anything short of a sized object of ours is retried: the
            // creator sets the mode (`fchmod`, after a umask may have cleared bits), then
            // the size. The error returned is the one this look saw: built from one look
            // and returned on a second that found the object sized, it failed a test with
            // "0 bytes, too small".
            let seen = owned_len(&fd, &what).and_then(|len| {
                if len >= min_len {
                    Ok(len)
                } else {
                    Err(too_small(&what, len))
                }
            });
            match seen {
                Ok(len) => break (fd, len),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => {}
            }
            drop(fd);
            std::thread::sleep(Duration::from_millis(1));
        };
        let base = map_fd(&fd, len)?;
        Ok(Mapping {
            base,
            len,
            path: Some(path),
            name: name.to_string(),
            unlinked: AtomicBool::new(false),
            memfd: std::sync::Mutex::new(None),
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

    /// Remove the name (a memfd: close the creator's descriptor, the way in). Idempotent:
    /// once this mapping unlinked it, it never unlinks again (a later job could have
    /// created the same name). ENOENT counts as success.
    pub fn unlink(&self) -> Result<(), P2pError> {
        if self.unlinked.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.memfd.lock().unwrap_or_else(|p| p.into_inner()).take();
        match &self.path {
            Some(p) => unlink_path(p),
            None => Ok(()),
        }
    }
}

/// Check that the object behind `fd` (called `what` in messages) is ours, mode 0600, and
/// at least `min_len` bytes; returns its size.
fn check_owned(fd: &Fd, what: &str, min_len: usize) -> Result<usize, P2pError> {
    let len = owned_len(fd, what)?;
    if len < min_len {
        return Err(too_small(what, len));
    }
    Ok(len)
}

/// Check that the object behind `fd` (called `what` in messages) is ours and mode 0600;
/// returns its size.
fn owned_len(fd: &Fd, what: &str) -> Result<usize, P2pError> {
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
            "shm segment {what} has owner {} mode {:o}; expected {} and 600",
            st.st_uid,
            st.st_mode & 0o777,
            euid
        )));
    }
    Ok(st.st_size as usize)
}

fn too_small(what: &str, len: usize) -> P2pError {
    P2pError::Other(format!("shm segment {what} is {len} bytes, too small"))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An object that exists but is still empty (the creator between `shm_open` and
    /// `fallocate`) is waited for, not reported as too small; one that stays too small
    /// is reported once the wait is over.
    #[test]
    fn open_waits_for_the_creator_to_size_the_object() {
        let name = format!("tsunagi-unit-open-{}", std::process::id());
        let path = shm_path(&name).unwrap();
        // SAFETY: a valid C string; flags and mode are plain integers.
        let fd = unsafe {
            libc::shm_open(
                path.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600 as libc::mode_t,
            )
        };
        assert!(fd >= 0, "shm_open: {}", std::io::Error::last_os_error());
        let fd = Fd(fd);
        // SAFETY: fchmod on our descriptor (the umask may have cleared bits).
        assert_eq!(unsafe { libc::fchmod(fd.0, 0o600) }, 0);

        let too_short = Mapping::open(&name, Duration::from_millis(30), 4096);
        let err = too_short.err().expect("an empty object must not open");
        assert!(err.to_string().contains("0 bytes, too small"), "{err}");

        let opener = {
            let name = name.clone();
            std::thread::spawn(move || Mapping::open(&name, Duration::from_secs(10), 4096))
        };
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: ftruncate on our descriptor.
        assert_eq!(unsafe { libc::ftruncate(fd.0, 8192) }, 0);
        let map = opener
            .join()
            .unwrap()
            .expect("open after the object was sized");
        assert_eq!(map.len(), 8192);
        unlink_name(&name);
    }
}
