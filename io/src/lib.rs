//! Tsunagi's MPI-IO.
//!
//! **Job.** Files opened collectively by a communicator ([`File::open`], access modes and
//! their errors), views made of any committed etype and filetype ([`view`]; the
//! filetype's layout is walked over the range accessed, never materialised), data
//! representations `native` and `external32` and registered ones ([`view::Datarep`]),
//! every access family through two functions ([`File::read`], [`File::write`] with a
//! [`Position`]: explicit offset, individual pointer, shared pointer, ordered), two-phase
//! collective buffering for the collective forms ([`twophase`]: aggregators, file
//! domains, rounds of `cb_buffer_size`), data sieving for independent non-contiguous
//! access ([`access`]), the shared file pointer in a small locked file (module `shared`),
//! atomic mode by POSIX record locks, and the info hints users know from ROMIO
//! ([`hints`]).
//!
//! **Boundary.** Below is `tsunagi-core` (communicators, datatypes: layout walking,
//! pack/unpack, external32) and `tsunagi-collectives` (all-to-all-v, broadcast, barrier on
//! a private duplicate of the file's communicator, so file traffic never matches the
//! program's). Above is the C ABI: it keeps the handle table, the file error handlers and
//! the requests. Non-blocking and split collective accesses run on the file's I/O thread
//! (module `worker`) as generalized requests of the core's one request table, so they
//! progress in the background. Functions return `MpiResult`; error handlers are the
//! caller's business.

pub mod access;
mod data;
pub mod flat;
pub mod hints;
mod mapped;
mod posix;
mod shared;
mod shm;
pub mod stats;
pub mod twophase;
pub mod view;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiError, MpiResult, Runtime};

pub use hints::{Hints, Switch};
pub use view::{Datarep, UserDatarep, View};

use posix::os_err;
use shared::SharedPointer;

/// Access modes (MPICH's values, as in mpi.h).
pub mod mode {
    pub const CREATE: i32 = 1;
    pub const RDONLY: i32 = 2;
    pub const WRONLY: i32 = 4;
    pub const RDWR: i32 = 8;
    pub const DELETE_ON_CLOSE: i32 = 16;
    pub const UNIQUE_OPEN: i32 = 32;
    pub const EXCL: i32 = 64;
    pub const APPEND: i32 = 128;
    pub const SEQUENTIAL: i32 = 256;
    pub const ALL: i32 = 511;
}

/// `MPI_SEEK_SET`, `MPI_SEEK_CUR`, `MPI_SEEK_END` (MPICH's values).
pub mod whence {
    pub const SET: i32 = 600;
    pub const CUR: i32 = 602;
    pub const END: i32 = 604;
}

/// Where an access starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// An explicit offset in etypes of the view.
    At(u64),
    /// The individual file pointer (advanced by the access).
    Individual,
    /// The shared file pointer (advanced atomically by the access).
    Shared,
    /// The shared file pointer, ranks in rank order (collective).
    Ordered,
}

fn err(class: ErrorClass, msg: impl Into<String>) -> MpiError {
    MpiError::new(class, msg)
}

struct State {
    view: View,
    /// The individual file pointer, in etypes.
    pos: u64,
    atomic: bool,
    hints: Hints,
    /// The mean piece length of the current view's filetypes over all ranks, agreed at
    /// `set_view` (None: the default view, or some rank's filetype is one piece, so the
    /// access's length decides). Lets automatic collective buffering route accesses to
    /// large pieces to the independent path without communicating.
    view_mean_piece: Option<u64>,
    /// Every rank's view flattened, all-gathered at `set_view` (None: the default view,
    /// or some rank's filetype is too large to flatten): collective accesses then learn
    /// every rank's file ranges from its stream position alone (module `flat`).
    peer_views: Option<Arc<Vec<flat::FlatView>>>,
    /// With every rank's view flattened: the most data bytes any rank's filetype tile
    /// holds, and the mean piece over all ranks' tiles (agreed at `set_view`; the
    /// small-read route of automatic collective reads needs no communication then).
    view_tiles: Option<(u64, u64)>,
    /// The info as the program last set it (hints we do not know are kept to report).
    info: Vec<(String, String)>,
}

/// An open file.
pub struct File {
    rt: &'static Runtime,
    /// A private duplicate of the communicator given to open.
    comm: CommId,
    rank: usize,
    size: usize,
    path: PathBuf,
    file: std::fs::File,
    amode: i32,
    shared: SharedPointer,
    state: Mutex<State>,
    /// Two-phase buffers kept between collective accesses.
    buffers: Mutex<Vec<Vec<u8>>>,
    /// The memory the ranks of one node share for two-phase I/O (module `shm`), made at
    /// the first access that needs it.
    shm: Mutex<Option<Arc<shm::Segment>>>,
    /// The I/O thread of non-blocking accesses (started with the first).
    worker: Mutex<Option<worker::Worker>>,
    pending: worker::Pending,
}

/// Check an access mode (MPI 4.0 §14.2.1): exactly one of RDONLY / RDWR / WRONLY; no
/// CREATE or EXCL with RDONLY; no SEQUENTIAL with RDWR.
pub fn check_amode(call: &str, amode: i32) -> MpiResult<()> {
    use mode::*;
    let bad = |why: &str| err(ErrorClass::Amode, format!("{call}: amode {amode}: {why}"));
    if amode & !ALL != 0 {
        return Err(bad("unknown bits"));
    }
    let rw = [RDONLY, RDWR, WRONLY]
        .iter()
        .filter(|&&m| amode & m != 0)
        .count();
    if rw != 1 {
        return Err(bad(
            "exactly one of MPI_MODE_RDONLY, MPI_MODE_RDWR and MPI_MODE_WRONLY is required",
        ));
    }
    if amode & RDONLY != 0 && amode & (CREATE | EXCL) != 0 {
        return Err(bad("MPI_MODE_CREATE and MPI_MODE_EXCL need write access"));
    }
    if amode & RDWR != 0 && amode & SEQUENTIAL != 0 {
        return Err(bad(
            "MPI_MODE_SEQUENTIAL cannot be combined with MPI_MODE_RDWR",
        ));
    }
    Ok(())
}

fn class_code(r: &MpiResult<()>) -> u32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.class as u32,
    }
}

fn first_error(call: &str, codes: &[Vec<u8>], what: &str) -> MpiResult<()> {
    for (rank, c) in codes.iter().enumerate() {
        let code = u32::from_le_bytes(c[..4].try_into().expect("4 bytes"));
        if code != 0 {
            let class = ErrorClass::from_code(code as i32).unwrap_or(ErrorClass::Io);
            let detail = String::from_utf8_lossy(&c[4..]).into_owned();
            return Err(err(
                class,
                format!("{call}: {what} failed on rank {rank}: {detail}"),
            ));
        }
    }
    Ok(())
}

fn code_bytes(r: &MpiResult<()>) -> Vec<u8> {
    let mut v = class_code(r).to_le_bytes().to_vec();
    if let Err(e) = r {
        v.extend_from_slice(e.message.as_bytes());
    }
    v
}

impl File {
    /// MPI_File_open: collective over `comm`. Rank 0 creates the file (and the shared
    /// pointer's file) first, then every rank opens it; an error anywhere is every
    /// rank's error (the first failing rank's class).
    pub fn open(
        rt: &'static Runtime,
        comm: CommId,
        path: &str,
        amode: i32,
        info: &[(String, String)],
    ) -> MpiResult<Arc<File>> {
        let call = "MPI_File_open";
        check_amode(call, amode)?;
        // ROMIO accepts a "ufs:" / "nfs:" prefix naming the file system.
        let path = ["ufs:", "nfs:", "lustre:", "gpfs:"]
            .iter()
            .find_map(|p| path.strip_prefix(p))
            .unwrap_or(path);
        if path.is_empty() {
            return Err(err(
                ErrorClass::BadFile,
                format!("{call}: the file name is empty"),
            ));
        }
        let path = PathBuf::from(path);
        let comm = rt.comm_dup(comm)?;
        match Self::open_on(rt, comm, &path, amode, info) {
            Ok(f) => Ok(f),
            Err(e) => {
                let _ = rt.comm_free(comm);
                Err(e)
            }
        }
    }

    fn open_on(
        rt: &'static Runtime,
        comm: CommId,
        path: &Path,
        amode: i32,
        info: &[(String, String)],
    ) -> MpiResult<Arc<File>> {
        let call = "MPI_File_open";
        let rank = rt.comm_rank(comm)?;
        let size = rt.comm_size(comm)?;
        // Phase 1: rank 0 creates the file and the shared pointer; everyone learns the
        // outcome, the pointer file's name and rank 0's access mode.
        let tag = format!(
            "{}-{:x}",
            std::process::id(),
            rt.wtime().to_bits() ^ path_hash(path)
        );
        let shfp = SharedPointer::path_for(path, &tag);
        let mut mine = amode.to_le_bytes().to_vec();
        if rank == 0 {
            let r = Self::create(path, amode).and_then(|start| SharedPointer::create(&shfp, start));
            mine.extend(code_bytes(&r));
            if r.is_ok() {
                mine.extend((shfp.as_os_str().len() as u32).to_le_bytes());
                mine.extend(shfp.as_os_str().as_encoded_bytes());
            }
        }
        let all = rt.allgather_bytes(call, comm, &mine)?;
        let root = &all[0];
        if all.iter().any(|m| m[..4] != root[..4]) {
            return Err(err(
                ErrorClass::NotSame,
                format!("{call}: the ranks gave different access modes"),
            ));
        }
        let code = u32::from_le_bytes(root[4..8].try_into().expect("4 bytes"));
        // Rank 0's record: amode, code, message (code != 0) or name length and name.
        if code != 0 {
            first_error(call, &[root[4..].to_vec()], "creating the file")?;
        }
        let nlen = u32::from_le_bytes(root[8..12].try_into().expect("4 bytes")) as usize;
        let shfp = PathBuf::from(String::from_utf8_lossy(&root[12..12 + nlen]).into_owned());
        // Phase 2: everyone opens; any failure is everyone's.
        let opened = Self::open_file(path, amode);
        let ptr = opened.as_ref().ok().map(|_| SharedPointer::open(&shfp));
        let r: MpiResult<()> = match (&opened, &ptr) {
            (Err(e), _) => Err(e.clone()),
            (_, Some(Err(e))) => Err(e.clone()),
            _ => Ok(()),
        };
        let codes = rt.allgather_bytes(call, comm, &code_bytes(&r))?;
        if let Err(e) = first_error(call, &codes, "opening the file") {
            if rank == 0 {
                let _ = std::fs::remove_file(&shfp);
            }
            return Err(e);
        }
        let file = opened.expect("checked");
        let shared = ptr.expect("opened").expect("checked");
        let nodes = {
            let mut n = rt.comm_nodes(comm)?.as_ref().clone();
            n.sort_unstable();
            n.dedup();
            n.len()
        };
        let mut hints = Hints::defaults(size, nodes);
        // TSUNAGI_IO_HINTS="key=value,key=value": defaults for every file (as ROMIO_HINTS
        // gives from a file), under the program's info.
        if let Ok(env) = std::env::var("TSUNAGI_IO_HINTS") {
            hints.apply(&hints::parse_list(&env), size);
        }
        hints.apply(info, size);
        let mut pos = 0;
        if amode & mode::APPEND != 0 {
            pos = file.metadata().map(|m| m.len()).unwrap_or(0);
        }
        Ok(Arc::new(File {
            rt,
            comm,
            rank,
            size,
            path: path.to_path_buf(),
            file,
            amode,
            shared,
            state: Mutex::new(State {
                view: View::bytes(),
                pos,
                atomic: false,
                view_mean_piece: None,
                peer_views: None,
                view_tiles: None,
                hints,
                info: info.to_vec(),
            }),
            buffers: Mutex::new(Vec::new()),
            shm: Mutex::new(None),
            worker: Mutex::new(None),
            pending: worker::Pending::default(),
        }))
    }

    /// Rank 0's part of open: create the file if asked; the shared pointer's start.
    fn create(path: &Path, amode: i32) -> MpiResult<u64> {
        if amode & mode::CREATE != 0 {
            let mut o = std::fs::File::options();
            o.write(true);
            if amode & mode::EXCL != 0 {
                o.create_new(true);
            } else {
                o.create(true);
            }
            o.open(path)
                .map_err(|e| os_err(&format!("creating {}", path.display()), e))?;
        } else if amode & mode::EXCL != 0 && path.exists() {
            return Err(err(
                ErrorClass::FileExists,
                format!("{} exists and MPI_MODE_EXCL was given", path.display()),
            ));
        }
        if amode & mode::APPEND != 0 {
            // The shared pointer starts at the end (the default view counts bytes).
            return Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0));
        }
        Ok(0)
    }

    fn open_file(path: &Path, amode: i32) -> MpiResult<std::fs::File> {
        let mut o = std::fs::File::options();
        if amode & mode::RDONLY != 0 {
            o.read(true);
        } else if amode & mode::WRONLY != 0 {
            o.write(true);
        } else {
            o.read(true).write(true);
        }
        o.open(path)
            .map_err(|e| os_err(&format!("opening {}", path.display()), e))
    }

    /// MPI_File_close (collective): everything written is in the file system; the
    /// shared pointer's file goes, and the file too with MPI_MODE_DELETE_ON_CLOSE.
    pub fn close(&self) -> MpiResult<()> {
        self.quiesce()?;
        self.stop_worker();
        tsunagi_collectives::barrier(self.rt, self.comm)?;
        if self.rank == 0 {
            self.shared.remove();
            if self.amode & mode::DELETE_ON_CLOSE != 0 {
                std::fs::remove_file(&self.path)
                    .map_err(|e| os_err("MPI_File_close: deleting the file", e))?;
            }
        }
        self.rt.comm_free(self.comm)
    }

    /// MPI_File_delete.
    pub fn delete(path: &str) -> MpiResult<()> {
        let path = ["ufs:", "nfs:"]
            .iter()
            .find_map(|p| path.strip_prefix(p))
            .unwrap_or(path);
        std::fs::remove_file(path).map_err(|e| os_err(&format!("MPI_File_delete: {path}"), e))
    }

    pub fn comm(&self) -> CommId {
        self.comm
    }

    pub fn amode(&self) -> i32 {
        self.amode
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// MPI_File_get_size.
    pub fn size(&self) -> MpiResult<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| os_err("MPI_File_get_size", e))
    }

    fn check_writable(&self, call: &str) -> MpiResult<()> {
        if self.amode & mode::RDONLY != 0 {
            return Err(err(
                ErrorClass::ReadOnly,
                format!("{call}: the file was opened MPI_MODE_RDONLY"),
            ));
        }
        Ok(())
    }

    fn check_readable(&self, call: &str) -> MpiResult<()> {
        if self.amode & mode::WRONLY != 0 {
            return Err(err(
                ErrorClass::Access,
                format!("{call}: the file was opened MPI_MODE_WRONLY"),
            ));
        }
        Ok(())
    }

    fn check_not_sequential(&self, call: &str) -> MpiResult<()> {
        if self.amode & mode::SEQUENTIAL != 0 {
            return Err(err(
                ErrorClass::UnsupportedOperation,
                format!("{call}: the file was opened MPI_MODE_SEQUENTIAL (shared pointer only)"),
            ));
        }
        Ok(())
    }

    /// MPI_File_set_size (collective): truncate or extend.
    pub fn set_size(&self, size: i64) -> MpiResult<()> {
        self.quiesce()?;
        let call = "MPI_File_set_size";
        if size < 0 {
            return Err(err(
                ErrorClass::Arg,
                format!("{call}: size {size} is negative"),
            ));
        }
        self.check_writable(call)?;
        self.check_not_sequential(call)?;
        // The ranks' earlier calls (a get_size, a write) come before the change.
        tsunagi_collectives::barrier(self.rt, self.comm)?;
        let r = if self.rank == 0 {
            self.file.set_len(size as u64).map_err(|e| os_err(call, e))
        } else {
            Ok(())
        };
        self.agree(call, r)
    }

    /// MPI_File_preallocate (collective): storage for at least `size` bytes.
    pub fn preallocate(&self, size: i64) -> MpiResult<()> {
        self.quiesce()?;
        let call = "MPI_File_preallocate";
        if size < 0 {
            return Err(err(
                ErrorClass::Arg,
                format!("{call}: size {size} is negative"),
            ));
        }
        self.check_writable(call)?;
        self.check_not_sequential(call)?;
        // The ranks' earlier calls (a get_size, a write) come before the change.
        tsunagi_collectives::barrier(self.rt, self.comm)?;
        let r = if self.rank == 0 && size > 0 {
            use std::os::fd::AsRawFd;
            // SAFETY: the descriptor is open for the File's life; the call only reads it.
            let rc =
                unsafe { libc::posix_fallocate(self.file.as_raw_fd(), 0, size as libc::off_t) };
            if rc == 0 || rc == libc::EOPNOTSUPP || rc == libc::EINVAL {
                // A file system that cannot preallocate: extend the file instead.
                if rc != 0 && self.size()? < size as u64 {
                    self.file.set_len(size as u64).map_err(|e| os_err(call, e))
                } else {
                    Ok(())
                }
            } else {
                Err(os_err(call, std::io::Error::from_raw_os_error(rc)))
            }
        } else {
            Ok(())
        };
        self.agree(call, r)
    }

    /// MPI_File_sync (collective): data on storage, and visible to every rank after.
    pub fn sync(&self) -> MpiResult<()> {
        self.quiesce()?;
        let call = "MPI_File_sync";
        let r = if self.amode & mode::RDONLY != 0 {
            Ok(())
        } else {
            self.file.sync_data().map_err(|e| os_err(call, e))
        };
        self.agree(call, r)
    }

    /// Every rank learns whether any rank failed (collective calls fail together).
    fn agree(&self, call: &str, r: MpiResult<()>) -> MpiResult<()> {
        let codes = self.rt.allgather_bytes(call, self.comm, &code_bytes(&r))?;
        first_error(call, &codes, call)
    }

    /// MPI_File_get_group.
    pub fn group(&self) -> MpiResult<Arc<tsunagi_core::group::Group>> {
        self.rt.comm_group(self.comm)
    }

    /// MPI_File_set_info (collective): hints apply, the info is kept.
    pub fn set_info(&self, info: &[(String, String)]) -> MpiResult<()> {
        self.quiesce()?;
        let mut st = self.state();
        st.hints.apply(info, self.size);
        for (k, v) in info {
            match st.info.iter_mut().find(|(k2, _)| k2 == k) {
                Some(p) => p.1 = v.clone(),
                None => st.info.push((k.clone(), v.clone())),
            }
        }
        Ok(())
    }

    /// MPI_File_get_info: the hints in effect (and other keys the program set).
    pub fn info(&self) -> Vec<(String, String)> {
        let st = self.state();
        let mut out = st.hints.to_info();
        for (k, v) in &st.info {
            if !out.iter().any(|(k2, _)| k2 == k) {
                out.push((k.clone(), v.clone()));
            }
        }
        out
    }

    pub fn hints(&self) -> Hints {
        self.state().hints.clone()
    }

    /// MPI_File_set_view (collective): both file pointers go back to 0.
    pub fn set_view(
        &self,
        disp: i64,
        etype: &TypeRef,
        filetype: &TypeRef,
        datarep: Datarep,
        info: &[(String, String)],
    ) -> MpiResult<()> {
        let call = "MPI_File_set_view";
        self.quiesce()?;
        const DISPLACEMENT_CURRENT: i64 = -54278278;
        let disp = if disp == DISPLACEMENT_CURRENT && self.amode & mode::SEQUENTIAL != 0 {
            self.shared.get()? * self.state().view.esize()
        } else if disp < 0 {
            return Err(err(
                ErrorClass::Arg,
                format!("{call}: disp {disp} is negative"),
            ));
        } else {
            disp as u64
        };
        View::check(call, etype, filetype)?;
        if let Datarep::External32 = datarep {
            for (name, t) in [("etype", etype), ("filetype", filetype)] {
                let ext = tsunagi_core::datatype::external32_size(t, 1)?;
                if ext != t.size() {
                    return Err(err(
                        ErrorClass::UnsupportedDatarep,
                        format!(
                            "{call}: the {name} takes {ext} bytes in external32 but {} in \
                             memory (only types of equal size are supported)",
                            t.size()
                        ),
                    ));
                }
            }
        }
        if let Datarep::User(u) = &datarep {
            let ext = u.file_extent(etype)?;
            if ext != etype.size() {
                return Err(err(
                    ErrorClass::UnsupportedDatarep,
                    format!(
                        "{call}: datarep {}: the file extent of the etype ({ext}) differs \
                         from its size ({})",
                        u.name(),
                        etype.size()
                    ),
                ));
            }
        }
        {
            let mut st = self.state();
            st.view = View {
                disp,
                etype: etype.clone(),
                filetype: filetype.clone(),
                datarep,
            };
            st.pos = 0;
            st.hints.apply(info, self.size);
        }
        // Every rank's filetype pieces (a tile, at most 16 MiB of it walked) and, when it
        // is small enough, the tile itself flattened; the all-gather also orders every
        // rank's earlier use of the shared pointer before its reset (as a barrier would).
        let v = self.state().view.clone();
        let runs = v.runs(0, v.filetype.size().min(16 << 20));
        let pieces = runs.len() as u64;
        let bytes = runs.iter().map(|r| r.1 as u64).sum::<u64>();
        drop(runs);
        let mut mine = pieces.to_le_bytes().to_vec();
        mine.extend(bytes.to_le_bytes());
        // TSUNAGI_IO_NO_FLAT=1: not flattened (the ranges are exchanged at every access;
        // for measuring what flattening saves).
        let flatten = std::env::var_os("TSUNAGI_IO_NO_FLAT").is_none();
        if let Some(f) = flatten.then(|| flat::FlatView::of(&v)).flatten() {
            f.encode(&mut mine);
        }
        let all = self.rt.allgather_bytes(call, self.comm, &mine)?;
        let field = |b: &Vec<u8>, k: usize| {
            u64::from_le_bytes(b[8 * k..8 * k + 8].try_into().expect("8 bytes"))
        };
        let single = all.iter().any(|b| field(b, 0) <= 1);
        let total_pieces: u64 = all.iter().map(|b| field(b, 0)).sum();
        let total_bytes: u64 = all.iter().map(|b| field(b, 1)).sum();
        // Every rank decodes the same bytes, so all agree on whether the views are known.
        let peers: Option<Vec<flat::FlatView>> = all
            .iter()
            .map(|b| flat::FlatView::decode(&b[16..]))
            .collect();
        {
            let mut st = self.state();
            st.view_mean_piece = (!single).then(|| total_bytes / total_pieces.max(1));
            let max_tile = all.iter().map(|b| field(b, 1)).max().unwrap_or(0);
            st.view_tiles = peers
                .is_some()
                .then(|| (max_tile, total_bytes / total_pieces.max(1)));
            st.peer_views = peers.map(Arc::new);
        }
        if self.rank == 0 {
            self.shared.set(0)?;
        }
        tsunagi_collectives::barrier(self.rt, self.comm)
    }

    /// The mean piece of the view's filetypes over all ranks (see `State`).
    pub(crate) fn view_mean_piece(&self) -> Option<u64> {
        self.state().view_mean_piece
    }

    /// Every rank's view flattened at `set_view`, if all could be (see `State`).
    pub(crate) fn peer_views(&self) -> Option<Arc<Vec<flat::FlatView>>> {
        self.state().peer_views.clone()
    }

    /// The agreed tile facts of the current view (see `State::view_tiles`).
    pub(crate) fn view_tiles(&self) -> Option<(u64, u64)> {
        self.state().view_tiles
    }

    /// MPI_File_get_view.
    pub fn view(&self) -> View {
        self.state().view.clone()
    }

    /// MPI_File_set_atomicity (collective).
    pub fn set_atomicity(&self, atomic: bool) -> MpiResult<()> {
        self.quiesce()?;
        self.state().atomic = atomic;
        tsunagi_collectives::barrier(self.rt, self.comm)
    }

    pub fn atomicity(&self) -> bool {
        self.state().atomic
    }

    /// MPI_File_seek on the individual pointer.
    pub fn seek(&self, offset: i64, whence: i32) -> MpiResult<()> {
        let call = "MPI_File_seek";
        self.check_not_sequential(call)?;
        let cur = self.state().pos;
        let new = self.seek_target(call, cur, offset, whence)?;
        self.state().pos = new;
        Ok(())
    }

    fn seek_target(&self, call: &str, cur: u64, offset: i64, whence: i32) -> MpiResult<u64> {
        let base = match whence {
            whence::SET => 0,
            whence::CUR => cur as i64,
            whence::END => {
                let v = self.view();
                (v.stream_before(self.size()?) / v.esize()) as i64
            }
            _ => {
                return Err(err(
                    ErrorClass::Arg,
                    format!("{call}: whence {whence} is not MPI_SEEK_SET, _CUR or _END"),
                ))
            }
        };
        let new = base
            .checked_add(offset)
            .filter(|&n| n >= 0)
            .ok_or_else(|| {
                err(
                    ErrorClass::Arg,
                    format!("{call}: the new position ({base} + {offset}) is negative"),
                )
            })?;
        Ok(new as u64)
    }

    /// MPI_File_get_position (etypes).
    pub fn position(&self) -> MpiResult<u64> {
        self.check_not_sequential("MPI_File_get_position")?;
        Ok(self.state().pos)
    }

    /// MPI_File_get_byte_offset.
    pub fn byte_offset(&self, offset: i64) -> MpiResult<u64> {
        let call = "MPI_File_get_byte_offset";
        self.check_not_sequential(call)?;
        if offset < 0 {
            return Err(err(
                ErrorClass::Arg,
                format!("{call}: offset {offset} is negative"),
            ));
        }
        let v = self.view();
        Ok(v.byte_offset(offset as u64 * v.esize()))
    }

    /// MPI_File_seek_shared (collective).
    pub fn seek_shared(&self, offset: i64, whence: i32) -> MpiResult<()> {
        self.quiesce()?;
        let call = "MPI_File_seek_shared";
        // Every rank's earlier use of the pointer comes first.
        tsunagi_collectives::barrier(self.rt, self.comm)?;
        let r = if self.rank == 0 {
            self.shared
                .get()
                .and_then(|cur| self.seek_target(call, cur, offset, whence))
                .and_then(|new| self.shared.set(new))
        } else {
            // Every rank checks its arguments, so a bad one fails everywhere alike.
            self.seek_target(call, 0, offset.max(0), whence).map(|_| ())
        };
        self.agree(call, r)
    }

    /// MPI_File_get_position_shared (etypes).
    pub fn position_shared(&self) -> MpiResult<u64> {
        self.shared.get()
    }

    /// MPI_File_get_type_extent: bytes one element of `dtype` takes in the file.
    pub fn type_extent(&self, dtype: &TypeRef) -> MpiResult<i64> {
        Ok(match self.view().datarep {
            Datarep::Native => dtype.extent() as i64,
            Datarep::External32 => {
                let ext = tsunagi_core::datatype::external32_size(dtype, 1)?;
                if ext == dtype.size() {
                    dtype.extent() as i64
                } else {
                    ext as i64
                }
            }
            Datarep::User(u) => u.file_extent(dtype)? as i64,
        })
    }

    pub(crate) fn os_file(&self) -> &std::fs::File {
        &self.file
    }

    pub(crate) fn runtime(&self) -> &'static Runtime {
        self.rt
    }

    pub(crate) fn rank_and_size(&self) -> (usize, usize) {
        (self.rank, self.size)
    }

    /// A buffer of at least `len` bytes for two-phase I/O, from the file's pool (kept
    /// between calls: a collective access does not fault in fresh pages every time).
    pub(crate) fn take_buffer(&self, len: usize) -> Vec<u8> {
        let mut pool = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        match pool.iter().position(|b| b.len() >= len) {
            Some(i) => pool.swap_remove(i),
            None => {
                drop(pool);
                vec![0u8; len]
            }
        }
    }

    /// The shared two-phase memory of the file, if made (module `shm`).
    pub(crate) fn shm_segment(&self) -> Option<Arc<shm::Segment>> {
        self.shm.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_shm_segment(&self, s: Option<Arc<shm::Segment>>) {
        *self.shm.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    /// Give a buffer back to the pool (which keeps the two largest).
    pub(crate) fn give_buffer(&self, b: Vec<u8>) {
        let mut pool = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        pool.push(b);
        pool.sort_by_key(|b| std::cmp::Reverse(b.len()));
        pool.truncate(2);
    }
}

fn path_hash(p: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    p.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_modes_are_checked() {
        use mode::*;
        let class = |m| check_amode("t", m).unwrap_err().class;
        check_amode("t", RDWR | CREATE).unwrap();
        check_amode("t", WRONLY | CREATE | EXCL | APPEND | SEQUENTIAL).unwrap();
        assert_eq!(class(0), ErrorClass::Amode);
        assert_eq!(class(RDONLY | RDWR), ErrorClass::Amode);
        assert_eq!(class(RDONLY | CREATE), ErrorClass::Amode);
        assert_eq!(class(RDONLY | EXCL), ErrorClass::Amode);
        assert_eq!(class(RDWR | SEQUENTIAL), ErrorClass::Amode);
        assert_eq!(class(RDWR | 4096), ErrorClass::Amode);
    }
}
