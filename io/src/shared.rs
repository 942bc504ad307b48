//! The shared file pointer: eight bytes (little-endian, in etypes) in a small hidden file
//! beside the data file, read and updated under a POSIX record lock. Every rank reaches
//! it through the file system, so it needs no process to serve it and works wherever the
//! data file does (a shared file system across hosts included, with its lock manager).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tsunagi_core::MpiResult;

use crate::posix::{os_err, pread_full, pwrite_full, RangeLock};

pub(crate) struct SharedPointer {
    file: File,
    path: PathBuf,
    /// Record locks do not exclude threads of one process: this does.
    guard: Mutex<()>,
}

impl SharedPointer {
    /// The pointer file's name for data file `data` (unique per open: `tag`).
    pub(crate) fn path_for(data: &Path, tag: &str) -> PathBuf {
        let name = data
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        let dir = data.parent().filter(|p| !p.as_os_str().is_empty());
        let own = format!(".{name}.{tag}.shfp");
        match dir {
            Some(d) => d.join(own),
            None => PathBuf::from(own),
        }
    }

    /// Create the pointer file (one rank does, before the others open it), holding `start`.
    pub(crate) fn create(path: &Path, start: u64) -> MpiResult<()> {
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| os_err("creating the shared file pointer", e))?;
        pwrite_full(&f, &start.to_le_bytes(), 0)
            .map_err(|e| os_err("initialising the shared file pointer", e))
    }

    pub(crate) fn open(path: &Path) -> MpiResult<SharedPointer> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| os_err("opening the shared file pointer", e))?;
        Ok(SharedPointer {
            file,
            path: path.to_path_buf(),
            guard: Mutex::new(()),
        })
    }

    fn read(&self) -> MpiResult<u64> {
        let mut b = [0u8; 8];
        let n = pread_full(&self.file, &mut b, 0)
            .map_err(|e| os_err("reading the shared file pointer", e))?;
        Ok(if n == 8 { u64::from_le_bytes(b) } else { 0 })
    }

    fn write(&self, v: u64) -> MpiResult<()> {
        pwrite_full(&self.file, &v.to_le_bytes(), 0)
            .map_err(|e| os_err("writing the shared file pointer", e))
    }

    fn locked<T>(&self, f: impl FnOnce() -> MpiResult<T>) -> MpiResult<T> {
        let _g = self.guard.lock().unwrap_or_else(|p| p.into_inner());
        let _l = RangeLock::new(&self.file, 0, 8, true)
            .map_err(|e| os_err("locking the shared file pointer", e))?;
        f()
    }

    /// Add `n` etypes; the value before.
    pub(crate) fn fetch_add(&self, n: u64) -> MpiResult<u64> {
        self.locked(|| {
            let v = self.read()?;
            self.write(v + n)?;
            Ok(v)
        })
    }

    pub(crate) fn get(&self) -> MpiResult<u64> {
        self.locked(|| self.read())
    }

    pub(crate) fn set(&self, v: u64) -> MpiResult<()> {
        self.locked(|| self.write(v))
    }

    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_add_is_atomic_across_processes_of_one_file() {
        let dir = std::env::temp_dir();
        let p = SharedPointer::path_for(&dir.join("data.bin"), &format!("t{}", std::process::id()));
        assert!(p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".data.bin."));
        SharedPointer::create(&p, 5).unwrap();
        let a = SharedPointer::open(&p).unwrap();
        let b = SharedPointer::open(&p).unwrap();
        assert_eq!(a.fetch_add(3).unwrap(), 5);
        assert_eq!(b.fetch_add(2).unwrap(), 8);
        assert_eq!(a.get().unwrap(), 10);
        b.set(1).unwrap();
        assert_eq!(a.get().unwrap(), 1);
        a.remove();
        assert!(!p.exists());
    }
}
