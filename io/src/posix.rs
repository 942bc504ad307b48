//! The file system below MPI-IO: positioned reads and writes that finish short transfers,
//! POSIX record locks (`fcntl`, honoured across processes and by NFS's lock manager), and
//! the mapping of `errno` to MPI's I/O error classes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use tsunagi_core::{ErrorClass, MpiError};

/// MPI's class for an operating-system error (MPI 4.0 §14.7).
pub(crate) fn class_of(e: &io::Error) -> ErrorClass {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => ErrorClass::NoSuchFile,
        Some(libc::EEXIST) => ErrorClass::FileExists,
        Some(libc::EACCES) | Some(libc::EPERM) => ErrorClass::Access,
        Some(libc::EROFS) | Some(libc::ETXTBSY) => ErrorClass::ReadOnly,
        Some(libc::ENOSPC) | Some(libc::EFBIG) => ErrorClass::NoSpace,
        Some(libc::EDQUOT) => ErrorClass::Quota,
        Some(libc::ENAMETOOLONG) | Some(libc::EISDIR) | Some(libc::ELOOP) => ErrorClass::BadFile,
        _ => ErrorClass::Io,
    }
}

/// An MPI error for OS error `e` while doing `what`.
pub(crate) fn os_err(what: &str, e: io::Error) -> MpiError {
    MpiError::new(class_of(&e), format!("{what}: {e}"))
}

/// Read as much of `buf` as the file holds from `off`: the bytes read (fewer only at the
/// end of the file).
pub(crate) fn pread_full(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Write all of `buf` at `off`.
pub(crate) fn pwrite_full(f: &File, buf: &[u8], off: u64) -> io::Result<()> {
    f.write_all_at(buf, off)
}

/// Most buffers one `pwritev`/`preadv` takes (Linux's `IOV_MAX`).
pub(crate) const IOV_MAX: usize = 1024;

/// Drop the first `n` bytes of `iov[*i..]` (after a short transfer).
fn advance(iov: &mut [libc::iovec], i: &mut usize, mut n: usize) {
    while n > 0 && *i < iov.len() {
        let v = &mut iov[*i];
        if n >= v.iov_len {
            n -= v.iov_len;
            *i += 1;
        } else {
            // SAFETY: n < iov_len, so the new base stays within the same buffer.
            v.iov_base = unsafe { (v.iov_base as *mut u8).add(n) } as *mut libc::c_void;
            v.iov_len -= n;
            n = 0;
        }
    }
    while *i < iov.len() && iov[*i].iov_len == 0 {
        *i += 1;
    }
}

/// The loop both vectored transfers share: `call(iov, n, off)` moves bytes for at most
/// [`IOV_MAX`] buffers from `off` and returns what the system call did; interrupted calls
/// are repeated, short ones continued; a call that moves nothing hands the buffers not yet
/// done to `at_zero`, whose answer ends the transfer.
fn vectored_full(
    iov: &mut [libc::iovec],
    mut off: u64,
    mut call: impl FnMut(*const libc::iovec, libc::c_int, libc::off_t) -> isize,
    at_zero: impl FnOnce(&[libc::iovec]) -> io::Result<()>,
) -> io::Result<()> {
    let mut i = 0;
    advance(iov, &mut i, 0);
    while i < iov.len() {
        let n = (iov.len() - i).min(IOV_MAX);
        let r = call(iov[i..].as_ptr(), n as libc::c_int, off as libc::off_t);
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return at_zero(&iov[i..]);
        }
        off += r as u64;
        advance(iov, &mut i, r as usize);
    }
    Ok(())
}

/// Write the buffers of `iov`, one after the other, to the file from `off`: `pwritev`
/// calls of at most [`IOV_MAX`] buffers, short writes finished.
///
/// # Safety
/// Every iovec describes readable memory that stays valid for the call.
pub(crate) unsafe fn pwritev_full(f: &File, iov: &mut [libc::iovec], off: u64) -> io::Result<()> {
    vectored_full(
        iov,
        off,
        // SAFETY: the descriptor is open (borrowed File); the `n` iovecs from `v` are valid
        // iovecs of readable memory (caller contract).
        |v, n, at| unsafe { libc::pwritev(f.as_raw_fd(), v, n, at) },
        |_| {
            Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ))
        },
    )
}

/// Fill the buffers of `iov`, one after the other, from the file at `off`: `preadv` calls
/// of at most [`IOV_MAX`] buffers; what lies past the end of the file is zeroed.
///
/// # Safety
/// Every iovec describes writable memory that nothing else accesses during the call.
pub(crate) unsafe fn preadv_full(f: &File, iov: &mut [libc::iovec], off: u64) -> io::Result<()> {
    vectored_full(
        iov,
        off,
        // SAFETY: as for pwritev_full; the memory is writable (caller contract).
        |v, n, at| unsafe { libc::preadv(f.as_raw_fd(), v, n, at) },
        |rest| {
            // The end of the file: the rest reads as zeros.
            for v in rest {
                // SAFETY: writable memory of iov_len bytes (caller contract).
                unsafe { std::ptr::write_bytes(v.iov_base as *mut u8, 0, v.iov_len) };
            }
            Ok(())
        },
    )
}

/// A POSIX record lock on `[start, start + len)` of a file, released on drop. Locks of
/// one process do not exclude each other (POSIX semantics), which is right here: MPI-IO's
/// atomicity and sieving are about other processes.
pub(crate) struct RangeLock<'a> {
    file: &'a File,
    start: u64,
    len: u64,
}

impl<'a> RangeLock<'a> {
    /// Wait for a lock of the range: `write` exclusive, else shared.
    pub(crate) fn new(file: &'a File, start: u64, len: u64, write: bool) -> io::Result<Self> {
        let kind = if write { libc::F_WRLCK } else { libc::F_RDLCK };
        fcntl_lock(file, kind, start, len)?;
        Ok(RangeLock { file, start, len })
    }
}

impl Drop for RangeLock<'_> {
    fn drop(&mut self) {
        // An unlock fails only for a bad descriptor, which the borrow rules out.
        let _ = fcntl_lock(self.file, libc::F_UNLCK, self.start, self.len);
    }
}

fn fcntl_lock(file: &File, kind: libc::c_int, start: u64, len: u64) -> io::Result<()> {
    // SAFETY: `flock` is plain old data; all-zero is a valid value before we fill it.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    // Length 0 means "to the end of the file, however it grows": ask for at least one byte.
    fl.l_len = len.max(1) as libc::off_t;
    loop {
        // SAFETY: the descriptor is open (borrowed from a live File) and `fl` is a valid
        // flock structure that outlives the call; F_SETLKW only reads it.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLKW, &fl) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_maps_to_the_io_classes() {
        let c = |n| class_of(&io::Error::from_raw_os_error(n));
        assert_eq!(c(libc::ENOENT), ErrorClass::NoSuchFile);
        assert_eq!(c(libc::EEXIST), ErrorClass::FileExists);
        assert_eq!(c(libc::EACCES), ErrorClass::Access);
        assert_eq!(c(libc::EROFS), ErrorClass::ReadOnly);
        assert_eq!(c(libc::ENOSPC), ErrorClass::NoSpace);
        assert_eq!(c(libc::EIO), ErrorClass::Io);
    }

    #[test]
    fn short_reads_stop_at_the_end_of_the_file() {
        let dir = std::env::temp_dir().join(format!("tsunagi-io-posix-{}", std::process::id()));
        std::fs::write(&dir, b"0123456789").unwrap();
        let f = File::options().read(true).write(true).open(&dir).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(pread_full(&f, &mut buf, 6).unwrap(), 4);
        assert_eq!(&buf[..4], b"6789");
        pwrite_full(&f, b"ab", 12).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 14);
        {
            let _l = RangeLock::new(&f, 0, 14, true).unwrap();
            let _r = RangeLock::new(&f, 0, 0, false).unwrap();
        }
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn vectored_io_gathers_scatters_and_zeroes_past_the_end() {
        let path = std::env::temp_dir().join(format!("tsunagi-io-posixv-{}", std::process::id()));
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        // More buffers than one call takes, with empty ones among them.
        let pieces: Vec<Vec<u8>> = (0..IOV_MAX + 300)
            .map(|k| vec![(k % 251) as u8; k % 3])
            .collect();
        let mut iov: Vec<libc::iovec> = pieces
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: the iovecs point into `pieces`, alive and unmodified during the call.
        unsafe { pwritev_full(&f, &mut iov, 5).unwrap() };
        let want: Vec<u8> = pieces.concat();
        assert_eq!(f.metadata().unwrap().len(), 5 + want.len() as u64);
        let mut a = vec![9u8; want.len() / 2];
        let mut b = vec![9u8; want.len() - want.len() / 2 + 7];
        let mut iov = [
            libc::iovec {
                iov_base: a.as_mut_ptr() as *mut libc::c_void,
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            },
        ];
        // SAFETY: the iovecs cover `a` and `b`, not otherwise touched during the call.
        unsafe { preadv_full(&f, &mut iov, 5).unwrap() };
        assert_eq!(a[..], want[..a.len()]);
        assert_eq!(b[..b.len() - 7], want[a.len()..]);
        assert_eq!(b[b.len() - 7..], [0u8; 7], "past the end reads as zeros");
        std::fs::remove_file(&path).unwrap();
    }
}
