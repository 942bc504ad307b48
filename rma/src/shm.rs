//! The memory of a shared window (`MPI_Win_allocate_shared`): one anonymous memfd per
//! window made by the communicator's first rank and mapped by every rank of the node, the
//! way the shared-memory transport makes its segment. The creator's card is `<pid>:<fd>`;
//! the others open `/proc/<pid>/fd/<fd>`, so the segment never has a name in /dev/shm and
//! nothing is left behind however the job ends.

use std::ffi::CString;

use tsunagi_core::{ErrorClass, MpiError, MpiResult};

/// A mapping of the window's segment in this process.
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
    /// The creator's descriptor, open until every rank has mapped the segment.
    fd: Option<libc::c_int>,
}

// SAFETY: the mapping is plain shared memory; the pointer is only an address, and every
// access to the memory goes through the window's own synchronisation (or the program's,
// for direct load/store, as MPI's shared-memory model prescribes).
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

fn os_err(call: &str, what: &str) -> MpiError {
    MpiError::new(
        ErrorClass::RmaShared,
        format!("{call}: {what}: {}", std::io::Error::last_os_error()),
    )
}

fn map(call: &str, fd: libc::c_int, len: usize) -> MpiResult<*mut u8> {
    // SAFETY: mapping a file descriptor we own, with a length the file has; the kernel
    // picks the address, so no existing mapping is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err(call, "mmap of the shared window"));
    }
    Ok(p as *mut u8)
}

impl Segment {
    /// Create a zeroed segment of `len` bytes (at least one page is mapped).
    pub fn create(call: &str, len: usize) -> MpiResult<Segment> {
        let len = len.max(1);
        let name = CString::new("tsunagi-win").expect("no NUL");
        // SAFETY: a valid C string; the call only creates a descriptor.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_err(call, "memfd_create"));
        }
        // SAFETY: `fd` is the memfd just created.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            let e = os_err(call, "ftruncate");
            // SAFETY: closing our own descriptor.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let base = match map(call, fd, len) {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: closing our own descriptor.
                unsafe { libc::close(fd) };
                return Err(e);
            }
        };
        Ok(Segment {
            base,
            len,
            fd: Some(fd),
        })
    }

    /// The card others attach with.
    pub fn card(&self) -> String {
        format!("{}:{}", std::process::id(), self.fd.unwrap_or(-1))
    }

    /// Map the segment another process of this node created, from its card.
    pub fn attach(call: &str, card: &str, len: usize) -> MpiResult<Segment> {
        let len = len.max(1);
        let bad = || {
            MpiError::new(
                ErrorClass::RmaShared,
                format!("{call}: bad shared-window card {card:?}"),
            )
        };
        let (pid, fd) = card.split_once(':').ok_or_else(bad)?;
        let pid: u32 = pid.parse().map_err(|_| bad())?;
        let fd: i32 = fd.parse().map_err(|_| bad())?;
        let path = CString::new(format!("/proc/{pid}/fd/{fd}")).expect("no NUL");
        // SAFETY: a valid C string.
        let my = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if my < 0 {
            return Err(os_err(call, "opening the node leader's window segment"));
        }
        let base = map(call, my, len);
        // SAFETY: the mapping keeps the memory; our descriptor is no longer needed.
        unsafe { libc::close(my) };
        Ok(Segment {
            base: base?,
            len,
            fd: None,
        })
    }

    /// Close the creator's descriptor (every rank has mapped the segment).
    pub fn seal(&mut self) {
        if let Some(fd) = self.fd.take() {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(fd) };
        }
    }

    pub fn base(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.seal();
        // SAFETY: unmapping our own mapping of `len` bytes, once; the window that owned
        // it is gone, so no pointer into it is used any more by this library.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
