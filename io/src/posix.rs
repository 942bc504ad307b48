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
}
