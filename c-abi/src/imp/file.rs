//! MPI-IO: the file handle table (with what the C ABI keeps per file: the error handler
//! and a pending split collective), file error handlers (MPI_ERRORS_RETURN unless set;
//! MPI_FILE_NULL's handler serves MPI_File_open and MPI_File_delete), and one small
//! function per MPI_File_* call, each handing over to `tsunagi_io::File`.
//!
//! `MPI_File` is a pointer in MPICH's C interface: a handle is `(index + 1) << 4`, so the
//! Fortran INTEGER is `index + 1` (MPI_File_c2f / MPI_File_f2c) and MPI_FILE_NULL is 0
//! in both.

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrHandler, ErrorClass, MpiError, MpiResult, ReqId, Status};
use tsunagi_io::{Datarep, File, Position};

use super::request::put_status;
use crate::ffi::*;
use crate::handles::{self as h, err, lock, InfoId, Table, INFOS};

/// MPI_MAX_DATAREP_STRING (mpi.h).
const MAX_DATAREP_STRING: usize = 128;

struct FileEntry {
    file: Arc<File>,
    errhandler: MPI_Errhandler,
    /// The request of a split collective begun and not yet ended (or why it failed to
    /// start).
    split: Option<MpiResult<ReqId>>,
}

static FILES: Mutex<Table<FileEntry>> = Mutex::new(Table::new());
/// MPI_FILE_NULL's error handler (for MPI_File_open and MPI_File_delete).
static NULL_HANDLER: Mutex<MPI_Errhandler> = Mutex::new(MPI_ERRORS_RETURN);

fn index_of(name: &str, f: MPI_File) -> MpiResult<u32> {
    if f.is_null() {
        return Err(err(ErrorClass::File, format!("{name} is MPI_FILE_NULL")));
    }
    let v = f as usize;
    if v & 0xf != 0 || v >> 4 == 0 || v >> 4 > u32::MAX as usize {
        return Err(err(
            ErrorClass::File,
            format!("{name} = {f:p} is not a file handle"),
        ));
    }
    Ok((v >> 4) as u32 - 1)
}

fn handle_of(ix: u32) -> MPI_File {
    ((ix as usize + 1) << 4) as MPI_File
}

/// The file behind a handle (the generated entry points decode `MPI_File` with it).
pub(crate) fn file(name: &str, f: MPI_File) -> MpiResult<Arc<File>> {
    let ix = index_of(name, f)?;
    lock(&FILES)
        .get(ix)
        .map(|e| e.file.clone())
        .ok_or_else(|| err(ErrorClass::File, format!("{name} = {f:p} is a closed file")))
}

/// The handle MPI_File_close's argument points to, for error reporting (NULL: none).
pub(crate) fn file_handle_at(p: *mut MPI_File) -> MPI_File {
    if p.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a non-NULL `MPI_File *` from the C caller points to its handle (MPI's
    // contract for MPI_File_close); it is read once, here.
    unsafe { *p }
}

fn with_entry<T>(f: &Arc<File>, g: impl FnOnce(&mut FileEntry) -> T) -> MpiResult<T> {
    let mut t = lock(&FILES);
    let ix = t
        .find(|e| Arc::ptr_eq(&e.file, f))
        .ok_or_else(|| err(ErrorClass::File, "the file was closed"))?;
    Ok(g(t.get_mut(ix).expect("found")))
}

fn handle_for(f: &Arc<File>) -> MPI_File {
    lock(&FILES)
        .find(|e| Arc::ptr_eq(&e.file, f))
        .map_or(std::ptr::null_mut(), handle_of)
}

/// MPI_File_c2f.
pub(crate) fn file_c2f(f: MPI_File) -> MPI_Fint {
    MPI_Fint::try_from(f as usize >> 4).unwrap_or(0)
}

/// MPI_File_f2c.
pub(crate) fn file_f2c(f: MPI_Fint) -> MPI_File {
    (usize::try_from(f).unwrap_or(0) << 4) as MPI_File
}

/// Route an error of `call` on file handle `fh` through the file's handler (MPI_FILE_NULL's
/// when `fh` is no open file): the code to return. Fatal handlers end the job here.
pub(crate) fn file_error(call: &str, fh: MPI_File, mut e: MpiError) -> c_int {
    if !e.message.starts_with("MPI_") {
        e.message = format!("{call}: {}", e.message);
    }
    let known = index_of("fh", fh)
        .ok()
        .and_then(|ix| lock(&FILES).get(ix).map(|x| x.errhandler));
    let (eh, mut handle) = match known {
        Some(eh) => (eh, fh),
        None => (*lock(&NULL_HANDLER), std::ptr::null_mut()),
    };
    let code = e.class as c_int;
    match eh {
        MPI_ERRORS_RETURN => code,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => match h::runtime(call) {
            Ok(r) => {
                eprintln!("Tsunagi: fatal error on rank {}: {e}", r.world_rank());
                let msg = format!("fatal error in {} ({})", e.message, e.class.description());
                r.abort(code.clamp(1, 255), &msg)
            }
            Err(_) => {
                eprintln!("Tsunagi: fatal error: {e}");
                std::process::exit(1)
            }
        },
        user => {
            if let Some(Some(f)) = h::errhandler_fn(user) {
                let mut c = code;
                // SAFETY: the handler was registered by MPI_File_create_errhandler as an
                // MPI_File_errhandler_function (stored in the shared table under the
                // communicator handler's type); it is called with its own signature, with
                // pointers to locals that live for the call.
                unsafe {
                    let f: unsafe extern "C" fn(*mut MPI_File, *mut c_int, ...) =
                        std::mem::transmute(f);
                    f(&mut handle, &mut c)
                };
            }
            code
        }
    }
}

fn info_pairs(info: Option<InfoId>) -> Vec<(String, String)> {
    info.and_then(|i| i.0)
        .and_then(|ix| lock(&INFOS).get(ix).cloned())
        .unwrap_or_default()
}

pub(crate) fn file_open(
    comm: CommId,
    filename: &str,
    amode: c_int,
    info: Option<InfoId>,
    fh: &mut MPI_File,
) -> MpiResult<()> {
    let r = h::runtime("MPI_File_open")?;
    let f = File::open(r, comm, filename, amode, &info_pairs(info))?;
    let ix = lock(&FILES).insert(FileEntry {
        file: f,
        errhandler: *lock(&NULL_HANDLER),
        split: None,
    });
    *fh = handle_of(ix);
    Ok(())
}

pub(crate) fn file_close(fh: &mut MPI_File) -> MpiResult<()> {
    let ix = index_of("fh", *fh)?;
    let f = file("fh", *fh)?;
    f.close()?;
    lock(&FILES).remove(ix);
    *fh = std::ptr::null_mut();
    Ok(())
}

pub(crate) fn file_delete(filename: &str, _info: Option<InfoId>) -> MpiResult<()> {
    h::runtime("MPI_File_delete")?;
    File::delete(filename)
}

fn offset_arg(name: &str, v: MPI_Offset) -> MpiResult<u64> {
    u64::try_from(v).map_err(|_| err(ErrorClass::Arg, format!("{name} = {v} is negative")))
}

pub(crate) fn file_set_size(f: &Arc<File>, size: MPI_Offset) -> MpiResult<()> {
    f.set_size(size)
}

pub(crate) fn file_preallocate(f: &Arc<File>, size: MPI_Offset) -> MpiResult<()> {
    f.preallocate(size)
}

pub(crate) fn file_get_size(f: &Arc<File>, size: &mut MPI_Offset) -> MpiResult<()> {
    *size = f.size()? as MPI_Offset;
    Ok(())
}

pub(crate) fn file_get_group(f: &Arc<File>, group: &mut MPI_Group) -> MpiResult<()> {
    *group = h::new_group(f.group()?);
    Ok(())
}

pub(crate) fn file_get_amode(f: &Arc<File>, amode: &mut c_int) -> MpiResult<()> {
    *amode = f.amode();
    Ok(())
}

pub(crate) fn file_set_info(f: &Arc<File>, info: Option<InfoId>) -> MpiResult<()> {
    f.set_info(&info_pairs(info))
}

pub(crate) fn file_get_info(f: &Arc<File>, info_used: &mut MPI_Info) -> MpiResult<()> {
    *info_used = h::new_info(f.info());
    Ok(())
}

/// A conversion function of the program's: the `int`-count form (MPI_Register_datarep) or
/// the `MPI_Count` form (MPI_Register_datarep_c).
#[derive(Clone, Copy)]
pub(crate) enum Conversion {
    Int(MPI_Datarep_conversion_function),
    Count(MPI_Datarep_conversion_function_c),
}

impl Conversion {
    /// Call it on `count` elements of `dtype` at `buf` and the file bytes at `file`; None
    /// when the program gave no function.
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype`, `file` their file bytes (or room for them).
    unsafe fn call(
        self,
        buf: *mut c_void,
        dtype: &TypeRef,
        count: usize,
        file: *mut c_void,
        extra: usize,
    ) -> Option<c_int> {
        let d = h::dtype_handle(dtype);
        let extra = extra as *mut c_void;
        // SAFETY: the program's conversion function, given what the caller vouches for and
        // its own extra_state; position 0 because every call converts a whole request.
        Some(unsafe {
            match self {
                Conversion::Int(f) => f?(buf, d, count as c_int, file, 0, extra),
                Conversion::Count(f) => f?(buf, d, count as MPI_Count, file, 0, extra),
            }
        })
    }
}

/// A data representation the program registered: its C functions.
struct CDatarep {
    name: String,
    read: Conversion,
    write: Conversion,
    extent: MPI_Datarep_extent_function,
    /// The program's `extra_state` pointer, handed back to every call.
    extra: usize,
}

fn conversion_error(what: &str, name: &str, rc: c_int) -> MpiError {
    let class = ErrorClass::from_code(rc).unwrap_or(ErrorClass::Conversion);
    err(
        class,
        format!("the {what} function of datarep \"{name}\" returned {rc}"),
    )
}

impl tsunagi_io::UserDatarep for CDatarep {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn file_extent(&self, dtype: &TypeRef) -> MpiResult<usize> {
        let Some(f) = self.extent else {
            return Ok(dtype.extent().max(0) as usize);
        };
        let mut ext: MPI_Aint = 0;
        // SAFETY: the program's MPI_Datarep_extent_function, given a valid datatype
        // handle, a pointer to a local and its own extra_state.
        let rc = unsafe { f(h::dtype_handle(dtype), &mut ext, self.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            return Err(conversion_error("extent", &self.name, rc));
        }
        usize::try_from(ext).map_err(|_| conversion_error("extent", &self.name, ext as c_int))
    }

    unsafe fn read(
        &self,
        buf: *mut u8,
        dtype: &TypeRef,
        count: usize,
        file: &[u8],
    ) -> Option<MpiResult<()>> {
        // SAFETY: `buf` holds `count` elements of `dtype` (the caller's contract), `file`
        // their file bytes; a read conversion only reads `file`.
        let rc = unsafe {
            self.read.call(
                buf as *mut c_void,
                dtype,
                count,
                file.as_ptr() as *mut c_void,
                self.extra,
            )
        }?;
        Some(if rc == MPI_SUCCESS {
            Ok(())
        } else {
            Err(conversion_error("read conversion", &self.name, rc))
        })
    }

    unsafe fn write(
        &self,
        buf: *const u8,
        dtype: &TypeRef,
        count: usize,
        file: &mut [u8],
    ) -> Option<MpiResult<()>> {
        // SAFETY: `buf` holds `count` elements of `dtype` (the caller's contract), `file`
        // has room for their file bytes.
        let rc = unsafe {
            self.write.call(
                buf as *mut c_void,
                dtype,
                count,
                file.as_mut_ptr() as *mut c_void,
                self.extra,
            )
        }?;
        Some(if rc == MPI_SUCCESS {
            Ok(())
        } else {
            Err(conversion_error("write conversion", &self.name, rc))
        })
    }
}

/// MPI_Register_datarep and MPI_Register_datarep_c (`call` names which).
pub(crate) fn register_datarep_of(
    call: &str,
    name: &str,
    read: Conversion,
    write: Conversion,
    extent: MPI_Datarep_extent_function,
    extra: *mut c_void,
) -> MpiResult<()> {
    register_user_datarep(
        call,
        name,
        Arc::new(CDatarep {
            name: name.to_string(),
            read,
            write,
            extent,
            extra: extra as usize,
        }),
    )
}

/// MPI_Register_datarep.
pub(crate) fn register_datarep(
    name: &str,
    read: MPI_Datarep_conversion_function,
    write: MPI_Datarep_conversion_function,
    extent: MPI_Datarep_extent_function,
    extra: *mut c_void,
) -> MpiResult<()> {
    register_datarep_of(
        "MPI_Register_datarep",
        name,
        Conversion::Int(read),
        Conversion::Int(write),
        extent,
        extra,
    )
}

/// Register a data representation of the program's (MPI_Register_datarep, and the large-
/// count form in imp/datarep_c.rs).
pub(crate) fn register_user_datarep(
    call: &str,
    name: &str,
    rep: Arc<dyn tsunagi_io::UserDatarep>,
) -> MpiResult<()> {
    h::runtime(call)?;
    if name.is_empty() || name.len() >= MAX_DATAREP_STRING {
        return Err(err(
            ErrorClass::Arg,
            format!("datarep name \"{name}\" is empty or too long"),
        ));
    }
    let mut reps = lock(&DATAREPS);
    if matches!(name, "native" | "internal" | "external32") || reps.iter().any(|d| d.name() == name)
    {
        return Err(err(
            ErrorClass::DupDatarep,
            format!("datarep \"{name}\" is already defined"),
        ));
    }
    reps.push(rep);
    Ok(())
}

/// Registered data representations (MPI_Register_datarep).
static DATAREPS: Mutex<Vec<Arc<dyn tsunagi_io::UserDatarep>>> = Mutex::new(Vec::new());

fn datarep(call: &str, name: &str) -> MpiResult<Datarep> {
    match name {
        "native" | "internal" => Ok(Datarep::Native),
        "external32" => Ok(Datarep::External32),
        other => lock(&DATAREPS)
            .iter()
            .find(|d| d.name() == other)
            .map(|d| Datarep::User(d.clone()))
            .ok_or_else(|| {
                err(
                    ErrorClass::UnsupportedDatarep,
                    format!("{call}: data representation \"{other}\" is not known"),
                )
            }),
    }
}

pub(crate) fn file_set_view(
    f: &Arc<File>,
    disp: MPI_Offset,
    etype: &TypeRef,
    filetype: &TypeRef,
    rep: &str,
    info: Option<InfoId>,
) -> MpiResult<()> {
    let d = datarep("MPI_File_set_view", rep)?;
    f.set_view(disp, etype, filetype, d, &info_pairs(info))
}

pub(crate) fn file_get_view(
    f: &Arc<File>,
    disp: &mut MPI_Offset,
    etype: &mut MPI_Datatype,
    filetype: &mut MPI_Datatype,
    rep: *mut c_char,
) -> MpiResult<()> {
    let v = f.view();
    // SAFETY: MPI requires room for MPI_MAX_DATAREP_STRING bytes.
    unsafe { h::write_cstr("datarep", rep, MAX_DATAREP_STRING, &v.datarep.name())? };
    *disp = v.disp as MPI_Offset;
    *etype = h::dtype_handle_ref(&v.etype);
    *filetype = h::dtype_handle_ref(&v.filetype);
    Ok(())
}

// ----- data access -----

fn check_buf(call: &str, buf: *const c_void, count: i64, dt: &TypeRef) -> MpiResult<usize> {
    let count = usize::try_from(count).map_err(|_| {
        err(
            ErrorClass::Count,
            format!("{call}: count {count} is negative"),
        )
    })?;
    if buf.is_null() && count > 0 && dt.size() > 0 && dt.true_lb() == 0 {
        return Err(err(ErrorClass::Buffer, format!("{call}: buf is NULL")));
    }
    Ok(count)
}

fn read_op(
    call: &str,
    f: &File,
    at: Position,
    coll: bool,
    buf: *mut c_void,
    count: impl Into<i64>,
    dt: &TypeRef,
) -> MpiResult<Status> {
    let count = check_buf(call, buf, count.into(), dt)?;
    // SAFETY: MPI requires `buf` to have room for `count` elements of `dt`.
    unsafe { f.read(call, at, coll, buf as *mut u8, count, dt) }
}

fn write_op(
    call: &str,
    f: &File,
    at: Position,
    coll: bool,
    buf: *const c_void,
    count: impl Into<i64>,
    dt: &TypeRef,
) -> MpiResult<Status> {
    let count = check_buf(call, buf, count.into(), dt)?;
    // SAFETY: MPI requires `buf` to hold `count` elements of `dt`.
    unsafe { f.write(call, at, coll, buf as *const u8, count, dt) }
}

fn done(st: MpiResult<Status>, out: Option<&mut MPI_Status>) -> MpiResult<()> {
    put_status(out, &st?);
    Ok(())
}

fn iread_op(
    call: &'static str,
    f: &Arc<File>,
    at: Position,
    coll: bool,
    buf: *mut c_void,
    count: impl Into<i64>,
    dt: &TypeRef,
) -> MpiResult<ReqId> {
    let count = check_buf(call, buf, count.into(), dt)?;
    // SAFETY: MPI requires `buf` to have room for `count` elements of `dt` and leaves it
    // to the library until the request completes.
    unsafe { f.iread(call, at, coll, buf as *mut u8, count, dt) }
}

fn iwrite_op(
    call: &'static str,
    f: &Arc<File>,
    at: Position,
    coll: bool,
    buf: *const c_void,
    count: impl Into<i64>,
    dt: &TypeRef,
) -> MpiResult<ReqId> {
    let count = check_buf(call, buf, count.into(), dt)?;
    // SAFETY: MPI requires `buf` to hold `count` elements of `dt`, unmodified until the
    // request completes.
    unsafe { f.iwrite(call, at, coll, buf as *const u8, count, dt) }
}

fn request(id: MpiResult<ReqId>, req: &mut MPI_Request) -> MpiResult<()> {
    *req = h::request_handle(id?, false);
    Ok(())
}

fn at(name: &str, o: MPI_Offset) -> MpiResult<Position> {
    Ok(Position::At(offset_arg(name, o)?))
}

macro_rules! blocking_read {
    ($name:ident, $call:literal, $coll:expr, $pos:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            buf: *mut c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            status: Option<&mut MPI_Status>,
        ) -> MpiResult<()> {
            done(read_op($call, f, $pos, $coll, buf, count, dt), status)
        }
    };
}

macro_rules! blocking_write {
    ($name:ident, $call:literal, $coll:expr, $pos:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            buf: *const c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            status: Option<&mut MPI_Status>,
        ) -> MpiResult<()> {
            done(write_op($call, f, $pos, $coll, buf, count, dt), status)
        }
    };
}

macro_rules! nonblocking_read {
    ($name:ident, $call:literal, $coll:expr, $pos:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            buf: *mut c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            req: &mut MPI_Request,
        ) -> MpiResult<()> {
            request(iread_op($call, f, $pos, $coll, buf, count, dt), req)
        }
    };
}

macro_rules! nonblocking_write {
    ($name:ident, $call:literal, $coll:expr, $pos:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            buf: *const c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            req: &mut MPI_Request,
        ) -> MpiResult<()> {
            request(iwrite_op($call, f, $pos, $coll, buf, count, dt), req)
        }
    };
}

macro_rules! explicit {
    ($name:ident, $call:literal, read, $coll:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            offset: MPI_Offset,
            buf: *mut c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            status: Option<&mut MPI_Status>,
        ) -> MpiResult<()> {
            done(
                read_op($call, f, at("offset", offset)?, $coll, buf, count, dt),
                status,
            )
        }
    };
    ($name:ident, $call:literal, write, $coll:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            offset: MPI_Offset,
            buf: *const c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            status: Option<&mut MPI_Status>,
        ) -> MpiResult<()> {
            done(
                write_op($call, f, at("offset", offset)?, $coll, buf, count, dt),
                status,
            )
        }
    };
    ($name:ident, $call:literal, iread, $coll:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            offset: MPI_Offset,
            buf: *mut c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            req: &mut MPI_Request,
        ) -> MpiResult<()> {
            request(
                iread_op($call, f, at("offset", offset)?, $coll, buf, count, dt),
                req,
            )
        }
    };
    ($name:ident, $call:literal, iwrite, $coll:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            offset: MPI_Offset,
            buf: *const c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
            req: &mut MPI_Request,
        ) -> MpiResult<()> {
            request(
                iwrite_op($call, f, at("offset", offset)?, $coll, buf, count, dt),
                req,
            )
        }
    };
}

explicit!(file_read_at, "MPI_File_read_at", read, false);
explicit!(file_read_at_all, "MPI_File_read_at_all", read, true);
explicit!(file_write_at, "MPI_File_write_at", write, false);
explicit!(file_write_at_all, "MPI_File_write_at_all", write, true);
explicit!(file_iread_at, "MPI_File_iread_at", iread, false);
explicit!(file_iread_at_all, "MPI_File_iread_at_all", iread, true);
explicit!(file_iwrite_at, "MPI_File_iwrite_at", iwrite, false);
explicit!(file_iwrite_at_all, "MPI_File_iwrite_at_all", iwrite, true);

blocking_read!(file_read, "MPI_File_read", false, Position::Individual);
blocking_read!(
    file_read_all,
    "MPI_File_read_all",
    true,
    Position::Individual
);
blocking_write!(file_write, "MPI_File_write", false, Position::Individual);
blocking_write!(
    file_write_all,
    "MPI_File_write_all",
    true,
    Position::Individual
);
nonblocking_read!(file_iread, "MPI_File_iread", false, Position::Individual);
nonblocking_read!(
    file_iread_all,
    "MPI_File_iread_all",
    true,
    Position::Individual
);
nonblocking_write!(file_iwrite, "MPI_File_iwrite", false, Position::Individual);
nonblocking_write!(
    file_iwrite_all,
    "MPI_File_iwrite_all",
    true,
    Position::Individual
);

blocking_read!(
    file_read_shared,
    "MPI_File_read_shared",
    false,
    Position::Shared
);
blocking_write!(
    file_write_shared,
    "MPI_File_write_shared",
    false,
    Position::Shared
);
nonblocking_read!(
    file_iread_shared,
    "MPI_File_iread_shared",
    false,
    Position::Shared
);
nonblocking_write!(
    file_iwrite_shared,
    "MPI_File_iwrite_shared",
    false,
    Position::Shared
);
blocking_read!(
    file_read_ordered,
    "MPI_File_read_ordered",
    true,
    Position::Ordered
);
blocking_write!(
    file_write_ordered,
    "MPI_File_write_ordered",
    true,
    Position::Ordered
);

// ----- split collectives: _begin starts the access in the background, _end waits -----

fn begin(call: &str, f: &Arc<File>, st: impl FnOnce() -> MpiResult<ReqId>) -> MpiResult<()> {
    if with_entry(f, |e| e.split.is_some())? {
        return Err(err(
            ErrorClass::Other,
            format!("{call}: a split collective is already active on this file"),
        ));
    }
    let r = st();
    with_entry(f, |e| e.split = Some(r))
}

fn end(call: &str, f: &Arc<File>, status: Option<&mut MPI_Status>) -> MpiResult<()> {
    let r = with_entry(f, |e| e.split.take())?.ok_or_else(|| {
        err(
            ErrorClass::Other,
            format!("{call}: no split collective was begun on this file"),
        )
    })?;
    let st = h::runtime(call)?.wait(call, r?);
    done(st, status)
}

pub(crate) fn file_read_at_all_begin(
    f: &Arc<File>,
    offset: MPI_Offset,
    buf: *mut c_void,
    count: impl Into<i64>,
    dt: &TypeRef,
) -> MpiResult<()> {
    let c = "MPI_File_read_at_all_begin";
    let p = at("offset", offset)?;
    begin(c, f, || iread_op(c, f, p, true, buf, count, dt))
}

pub(crate) fn file_write_at_all_begin(
    f: &Arc<File>,
    offset: MPI_Offset,
    buf: *const c_void,
    count: impl Into<i64>,
    dt: &TypeRef,
) -> MpiResult<()> {
    let c = "MPI_File_write_at_all_begin";
    let p = at("offset", offset)?;
    begin(c, f, || iwrite_op(c, f, p, true, buf, count, dt))
}

macro_rules! split_begin {
    ($name:ident, $call:literal, read, $pos:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            buf: *mut c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
        ) -> MpiResult<()> {
            begin($call, f, || iread_op($call, f, $pos, true, buf, count, dt))
        }
    };
    ($name:ident, $call:literal, write, $pos:expr) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            buf: *const c_void,
            count: impl Into<i64>,
            dt: &TypeRef,
        ) -> MpiResult<()> {
            begin($call, f, || iwrite_op($call, f, $pos, true, buf, count, dt))
        }
    };
}

split_begin!(
    file_read_all_begin,
    "MPI_File_read_all_begin",
    read,
    Position::Individual
);
split_begin!(
    file_write_all_begin,
    "MPI_File_write_all_begin",
    write,
    Position::Individual
);
split_begin!(
    file_read_ordered_begin,
    "MPI_File_read_ordered_begin",
    read,
    Position::Ordered
);
split_begin!(
    file_write_ordered_begin,
    "MPI_File_write_ordered_begin",
    write,
    Position::Ordered
);

macro_rules! split_end {
    ($name:ident, $call:literal, $ptr:ty) => {
        pub(crate) fn $name(
            f: &Arc<File>,
            _buf: $ptr,
            status: Option<&mut MPI_Status>,
        ) -> MpiResult<()> {
            end($call, f, status)
        }
    };
}

split_end!(
    file_read_at_all_end,
    "MPI_File_read_at_all_end",
    *mut c_void
);
split_end!(
    file_write_at_all_end,
    "MPI_File_write_at_all_end",
    *const c_void
);
split_end!(file_read_all_end, "MPI_File_read_all_end", *mut c_void);
split_end!(file_write_all_end, "MPI_File_write_all_end", *const c_void);
split_end!(
    file_read_ordered_end,
    "MPI_File_read_ordered_end",
    *mut c_void
);
split_end!(
    file_write_ordered_end,
    "MPI_File_write_ordered_end",
    *const c_void
);

// ----- pointers -----

pub(crate) fn file_seek(f: &Arc<File>, offset: MPI_Offset, whence: c_int) -> MpiResult<()> {
    f.seek(offset, whence)
}

pub(crate) fn file_get_position(f: &Arc<File>, offset: &mut MPI_Offset) -> MpiResult<()> {
    *offset = f.position()? as MPI_Offset;
    Ok(())
}

pub(crate) fn file_get_byte_offset(
    f: &Arc<File>,
    offset: MPI_Offset,
    disp: &mut MPI_Offset,
) -> MpiResult<()> {
    *disp = f.byte_offset(offset)? as MPI_Offset;
    Ok(())
}

pub(crate) fn file_seek_shared(f: &Arc<File>, offset: MPI_Offset, whence: c_int) -> MpiResult<()> {
    f.seek_shared(offset, whence)
}

pub(crate) fn file_get_position_shared(f: &Arc<File>, offset: &mut MPI_Offset) -> MpiResult<()> {
    *offset = f.position_shared()? as MPI_Offset;
    Ok(())
}

pub(crate) fn file_get_type_extent(
    f: &Arc<File>,
    dt: &TypeRef,
    extent: &mut MPI_Aint,
) -> MpiResult<()> {
    *extent = f.type_extent(dt)? as MPI_Aint;
    Ok(())
}

pub(crate) fn file_set_atomicity(f: &Arc<File>, flag: c_int) -> MpiResult<()> {
    f.set_atomicity(flag != 0)
}

pub(crate) fn file_get_atomicity(f: &Arc<File>, flag: &mut c_int) -> MpiResult<()> {
    *flag = c_int::from(f.atomicity());
    Ok(())
}

pub(crate) fn file_sync(f: &Arc<File>) -> MpiResult<()> {
    f.sync()
}

// ----- error handlers -----

pub(crate) fn file_create_errhandler(
    func: MPI_File_errhandler_function,
    e: &mut MPI_Errhandler,
) -> MpiResult<()> {
    let Some(func) = func else {
        return Err(err(ErrorClass::Arg, "file_errhandler_fn is NULL"));
    };
    // SAFETY: both are `unsafe extern "C"` function pointers of one size; the shared
    // table stores every handler under the communicator type, and `file_error` calls it
    // back with its own (file) signature.
    let stored: unsafe extern "C" fn(*mut MPI_Comm, *mut c_int, ...) =
        unsafe { std::mem::transmute(func) };
    *e = h::new_errhandler(Some(stored));
    Ok(())
}

fn errhandler_value(e: &ErrHandler) -> MPI_Errhandler {
    h::errhandler_handle(e)
}

pub(crate) fn file_set_errhandler(fh: MPI_File, e: ErrHandler) -> MpiResult<()> {
    let raw = errhandler_value(&e);
    if fh.is_null() {
        *lock(&NULL_HANDLER) = raw;
        return Ok(());
    }
    let f = file("file", fh)?;
    with_entry(&f, |x| x.errhandler = raw)
}

pub(crate) fn file_get_errhandler(fh: MPI_File, e: &mut MPI_Errhandler) -> MpiResult<()> {
    let raw = if fh.is_null() {
        *lock(&NULL_HANDLER)
    } else {
        let f = file("file", fh)?;
        with_entry(&f, |x| x.errhandler)?
    };
    // The program frees what it gets: a user handler gains a reference.
    *e = match h::errhandler("errhandler", raw) {
        Ok(eh) => h::errhandler_handle(&eh),
        Err(_) => raw,
    };
    Ok(())
}

pub(crate) fn file_call_errhandler(f: &Arc<File>, code: c_int) -> MpiResult<()> {
    let class = ErrorClass::from_code(code).unwrap_or(ErrorClass::Other);
    let e = MpiError::new(
        class,
        format!("MPI_File_call_errhandler: error code {code}"),
    );
    // The handler runs (or the job ends); the call itself succeeds.
    file_error("MPI_File_call_errhandler", handle_for(f), e);
    Ok(())
}

// ----- large counts: the same functions (their count is any integer up to MPI_Count) -----

pub(crate) use {
    file_iread as file_iread_c, file_iread_all as file_iread_all_c,
    file_iread_at as file_iread_at_c, file_iread_at_all as file_iread_at_all_c,
    file_iread_shared as file_iread_shared_c, file_iwrite as file_iwrite_c,
    file_iwrite_all as file_iwrite_all_c, file_iwrite_at as file_iwrite_at_c,
    file_iwrite_at_all as file_iwrite_at_all_c, file_iwrite_shared as file_iwrite_shared_c,
    file_read as file_read_c, file_read_all as file_read_all_c,
    file_read_all_begin as file_read_all_begin_c, file_read_at as file_read_at_c,
    file_read_at_all as file_read_at_all_c, file_read_at_all_begin as file_read_at_all_begin_c,
    file_read_ordered as file_read_ordered_c, file_read_ordered_begin as file_read_ordered_begin_c,
    file_read_shared as file_read_shared_c, file_write as file_write_c,
    file_write_all as file_write_all_c, file_write_all_begin as file_write_all_begin_c,
    file_write_at as file_write_at_c, file_write_at_all as file_write_at_all_c,
    file_write_at_all_begin as file_write_at_all_begin_c,
    file_write_ordered as file_write_ordered_c,
    file_write_ordered_begin as file_write_ordered_begin_c,
    file_write_shared as file_write_shared_c,
};

/// MPI_File_get_type_extent_c.
pub(crate) fn file_get_type_extent_c(
    f: &Arc<File>,
    dt: &TypeRef,
    extent: &mut MPI_Count,
) -> MpiResult<()> {
    *extent = f.type_extent(dt)? as MPI_Count;
    Ok(())
}
