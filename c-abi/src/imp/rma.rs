//! One-sided communication: the window handle table (with what the C ABI keeps per window:
//! error handler, info, attributes, the values the predefined attributes point to) and one
//! small function per MPI call, each handing over to `tsunagi_rma::Window`.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::group::Group;
use tsunagi_core::{CommId, ErrHandler, ErrorClass, MpiError, MpiResult, ReqId};
use tsunagi_rma::{Access, Kind, Window};

use crate::ffi::*;
use crate::handles::{self as h, err, lock, InfoData, InfoId, Table, INFOS};

/// Window handles: MPICH's direct window kind.
const WIN_DIRECT: u32 = 0xa000_0000;
/// `MPI_WIN_NULL` (MPICH's value, as in mpi.h).
const MPI_WIN_NULL: MPI_Win = 0x2000_0000;
const KIND_MASK: u32 = 0xfc00_0000;
const INDEX_MASK: u32 = 0x03ff_ffff;
/// Window keyvals are `WIN_KEYVAL | index` (predefined attributes are 0x66000001..9).
const WIN_KEYVAL: c_int = 0x2c00_0000;

const MPI_WIN_BASE: c_int = 0x6600_0001;
const MPI_WIN_SIZE: c_int = 0x6600_0003;
const MPI_WIN_DISP_UNIT: c_int = 0x6600_0005;
const MPI_WIN_CREATE_FLAVOR: c_int = 0x6600_0007;
const MPI_WIN_MODEL: c_int = 0x6600_0009;

/// The values the predefined attributes point to (boxed: their addresses are handed out).
struct Predefined {
    size: MPI_Aint,
    disp_unit: c_int,
    flavor: c_int,
    model: c_int,
}

struct WinEntry {
    win: Arc<Window>,
    errhandler: MPI_Errhandler,
    info: InfoData,
    /// Attribute values with their keyval's callbacks (which outlive a freed keyval).
    attrs: BTreeMap<c_int, (usize, WinKeyval)>,
    predefined: Box<Predefined>,
}

static WINS: Mutex<Table<WinEntry>> = Mutex::new(Table::new());

#[derive(Clone, Copy)]
struct WinKeyval {
    /// Kept for completeness: windows are never duplicated, so it is never called.
    _copy: MPI_Win_copy_attr_function,
    delete: MPI_Win_delete_attr_function,
    extra: usize,
}

static KEYVALS: Mutex<Table<WinKeyval>> = Mutex::new(Table::new());

fn index_of(name: &str, w: MPI_Win) -> MpiResult<u32> {
    if w == MPI_WIN_NULL {
        return Err(err(ErrorClass::Win, format!("{name} is MPI_WIN_NULL")));
    }
    if w as u32 & KIND_MASK != WIN_DIRECT {
        return Err(err(
            ErrorClass::Win,
            format!("{name} = {w:#x} is not a window handle"),
        ));
    }
    Ok(w as u32 & INDEX_MASK)
}

/// The window behind a handle (the generated entry points decode `MPI_Win` with it).
pub(crate) fn win(name: &str, w: MPI_Win) -> MpiResult<Arc<Window>> {
    let ix = index_of(name, w)?;
    lock(&WINS).get(ix).map(|e| e.win.clone()).ok_or_else(|| {
        err(
            ErrorClass::Win,
            format!("{name} = {w:#x} is a freed window"),
        )
    })
}

fn with_entry<T>(w: &Arc<Window>, f: impl FnOnce(&mut WinEntry) -> T) -> MpiResult<T> {
    let mut t = lock(&WINS);
    let ix = t
        .find(|e| Arc::ptr_eq(&e.win, w))
        .ok_or_else(|| err(ErrorClass::Win, "the window was freed"))?;
    Ok(f(t.get_mut(ix).expect("found")))
}

fn handle_of(w: &Arc<Window>) -> MPI_Win {
    lock(&WINS)
        .find(|e| Arc::ptr_eq(&e.win, w))
        .map_or(MPI_WIN_NULL, |ix| (WIN_DIRECT | ix) as c_int)
}

/// Route an error of `call` on window handle `w` through the window's handler: Ok(code)
/// to return, or Err when `w` is no window (the caller uses MPI_COMM_WORLD's handler).
pub(crate) fn win_error(call: &str, w: MPI_Win, mut e: MpiError) -> Result<c_int, MpiError> {
    if !e.message.starts_with("MPI_") {
        e.message = format!("{call}: {}", e.message);
    }
    let Ok(ix) = index_of("win", w) else {
        return Err(e);
    };
    let Some(eh) = lock(&WINS).get(ix).map(|x| x.errhandler) else {
        return Err(e);
    };
    let code = e.class as c_int;
    match eh {
        MPI_ERRORS_RETURN => Ok(code),
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => Err(e),
        user => {
            if let Some(Some(f)) = h::errhandler_fn(user) {
                let mut handle = w;
                let mut c = code;
                // SAFETY: a C function of type MPI_Win_errhandler_function, given pointers
                // to locals that live for the call.
                unsafe { f(&mut handle, &mut c) };
            }
            Ok(code)
        }
    }
}

fn register(win: Arc<Window>, info: Option<InfoId>) -> MPI_Win {
    let info = info
        .and_then(|i| i.0)
        .and_then(|ix| lock(&INFOS).get(ix).cloned())
        .unwrap_or_default();
    let predefined = Box::new(Predefined {
        size: win.size() as MPI_Aint,
        disp_unit: win.disp_unit() as c_int,
        flavor: win.flavor() as c_int,
        model: tsunagi_rma::MODEL_UNIFIED,
    });
    let ix = lock(&WINS).insert(WinEntry {
        win,
        errhandler: MPI_ERRORS_ARE_FATAL,
        info,
        attrs: BTreeMap::new(),
        predefined,
    });
    (WIN_DIRECT | ix) as c_int
}

fn size_arg(size: MPI_Aint) -> MpiResult<usize> {
    if size < 0 {
        return Err(err(ErrorClass::Size, format!("size = {size} is negative")));
    }
    Ok(size as usize)
}

pub(crate) fn win_create(
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: c_int,
    info: Option<InfoId>,
    comm: CommId,
    w: &mut MPI_Win,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Win_create")?;
    let size = size_arg(size)?;
    if size > 0 && base.is_null() {
        return Err(err(ErrorClass::Base, "base is NULL but size is not 0"));
    }
    // SAFETY: MPI requires the memory to stay valid for the window's life.
    let win = unsafe { Window::create(r, comm, base as *mut u8, size, disp_unit as i64)? };
    *w = register(win, info);
    Ok(())
}

fn allocate(
    shared: bool,
    size: MPI_Aint,
    disp_unit: c_int,
    info: Option<InfoId>,
    comm: CommId,
    baseptr: *mut c_void,
    w: &mut MPI_Win,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Win_allocate")?;
    let size = size_arg(size)?;
    if baseptr.is_null() {
        return Err(err(ErrorClass::Arg, "argument baseptr is NULL"));
    }
    let win = if shared {
        Window::allocate_shared(r, comm, size, disp_unit as i64)?
    } else {
        Window::allocate(r, comm, size, disp_unit as i64)?
    };
    // SAFETY: baseptr is the address of a `void *` (MPI's convention), checked non-NULL.
    unsafe { *(baseptr as *mut *mut c_void) = win.base() as *mut c_void };
    *w = register(win, info);
    Ok(())
}

pub(crate) fn win_allocate(
    size: MPI_Aint,
    disp_unit: c_int,
    info: Option<InfoId>,
    comm: CommId,
    baseptr: *mut c_void,
    w: &mut MPI_Win,
) -> MpiResult<()> {
    allocate(false, size, disp_unit, info, comm, baseptr, w)
}

pub(crate) fn win_allocate_shared(
    size: MPI_Aint,
    disp_unit: c_int,
    info: Option<InfoId>,
    comm: CommId,
    baseptr: *mut c_void,
    w: &mut MPI_Win,
) -> MpiResult<()> {
    allocate(true, size, disp_unit, info, comm, baseptr, w)
}

pub(crate) fn win_create_dynamic(
    info: Option<InfoId>,
    comm: CommId,
    w: &mut MPI_Win,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Win_create_dynamic")?;
    *w = register(Window::create_dynamic(r, comm)?, info);
    Ok(())
}

pub(crate) fn win_attach(w: &Arc<Window>, base: *mut c_void, size: MPI_Aint) -> MpiResult<()> {
    let size = size_arg(size)?;
    if size > 0 && base.is_null() {
        return Err(err(ErrorClass::Base, "base is NULL"));
    }
    // SAFETY: MPI requires the memory to stay valid until detached.
    unsafe { w.attach(base as *mut u8, size) }
}

pub(crate) fn win_detach(w: &Arc<Window>, base: *const c_void) -> MpiResult<()> {
    w.detach(base as *const u8)
}

pub(crate) fn win_free(w: &mut MPI_Win) -> MpiResult<()> {
    let ix = index_of("win", *w)?;
    let win = win("win", *w)?;
    // Attribute delete callbacks run first, as on communicators.
    let attrs: Vec<(c_int, (usize, WinKeyval))> =
        with_entry(&win, |e| e.attrs.iter().map(|(k, v)| (*k, *v)).collect())?;
    for (k, (v, kv)) in attrs {
        run_delete(*w, k, kv, v)?;
    }
    win.free()?;
    lock(&WINS).remove(ix);
    *w = MPI_WIN_NULL;
    Ok(())
}

pub(crate) fn win_fence(assert: c_int, w: &Arc<Window>) -> MpiResult<()> {
    w.fence(assert)
}

pub(crate) fn win_start(g: &Arc<Group>, assert: c_int, w: &Arc<Window>) -> MpiResult<()> {
    w.start(g, assert)
}

pub(crate) fn win_complete(w: &Arc<Window>) -> MpiResult<()> {
    w.complete()
}

pub(crate) fn win_post(g: &Arc<Group>, assert: c_int, w: &Arc<Window>) -> MpiResult<()> {
    w.post(g, assert)
}

pub(crate) fn win_wait(w: &Arc<Window>) -> MpiResult<()> {
    w.wait()
}

pub(crate) fn win_test(w: &Arc<Window>, flag: &mut c_int) -> MpiResult<()> {
    *flag = c_int::from(w.test()?);
    Ok(())
}

pub(crate) fn win_lock(
    lock_type: c_int,
    rank: c_int,
    assert: c_int,
    w: &Arc<Window>,
) -> MpiResult<()> {
    w.lock(lock_type, rank, assert)
}

pub(crate) fn win_unlock(rank: c_int, w: &Arc<Window>) -> MpiResult<()> {
    w.unlock(rank)
}

pub(crate) fn win_lock_all(assert: c_int, w: &Arc<Window>) -> MpiResult<()> {
    w.lock_all(assert)
}

pub(crate) fn win_unlock_all(w: &Arc<Window>) -> MpiResult<()> {
    w.unlock_all()
}

pub(crate) fn win_flush(rank: c_int, w: &Arc<Window>) -> MpiResult<()> {
    w.flush("MPI_Win_flush", rank)
}

pub(crate) fn win_flush_all(w: &Arc<Window>) -> MpiResult<()> {
    w.flush_all("MPI_Win_flush_all")
}

pub(crate) fn win_flush_local(rank: c_int, w: &Arc<Window>) -> MpiResult<()> {
    w.flush("MPI_Win_flush_local", rank)
}

pub(crate) fn win_flush_local_all(w: &Arc<Window>) -> MpiResult<()> {
    w.flush_all("MPI_Win_flush_local_all")
}

pub(crate) fn win_sync(w: &Arc<Window>) -> MpiResult<()> {
    w.sync()
}

pub(crate) fn win_shared_query(
    w: &Arc<Window>,
    rank: c_int,
    size: &mut MPI_Aint,
    disp_unit: &mut c_int,
    baseptr: *mut c_void,
) -> MpiResult<()> {
    if baseptr.is_null() {
        return Err(err(ErrorClass::Arg, "argument baseptr is NULL"));
    }
    let r = if rank == MPI_PROC_NULL {
        None
    } else if rank < 0 {
        return Err(err(ErrorClass::Rank, format!("rank {rank} is negative")));
    } else {
        Some(rank as usize)
    };
    let (s, d, p) = w.shared_query(r)?;
    *size = s as MPI_Aint;
    *disp_unit = d as c_int;
    // SAFETY: baseptr is the address of a `void *` (MPI's convention), checked non-NULL.
    unsafe { *(baseptr as *mut *mut c_void) = p as *mut c_void };
    Ok(())
}

pub(crate) fn win_get_group(w: &Arc<Window>, g: &mut MPI_Group) -> MpiResult<()> {
    *g = h::new_group(w.group());
    Ok(())
}

pub(crate) fn win_set_name(w: &Arc<Window>, name: &str) -> MpiResult<()> {
    if name.len() >= MPI_MAX_OBJECT_NAME {
        return Err(err(
            ErrorClass::Arg,
            "win_name is longer than MPI_MAX_OBJECT_NAME - 1",
        ));
    }
    w.set_name(name);
    Ok(())
}

/// MPI_Win_get_name; the handle comes undecoded because MPI 4.1 names MPI_WIN_NULL too.
pub(crate) fn win_get_name(w: MPI_Win, name: *mut c_char, len: &mut c_int) -> MpiResult<()> {
    let n = if w == MPI_WIN_NULL {
        "MPI_WIN_NULL".to_string()
    } else {
        win("win", w)?.name()
    };
    // SAFETY: MPI requires room for MPI_MAX_OBJECT_NAME bytes.
    *len = unsafe { h::write_cstr("win_name", name, MPI_MAX_OBJECT_NAME, &n)? } as c_int;
    Ok(())
}

pub(crate) fn win_set_info(w: &Arc<Window>, info: InfoId) -> MpiResult<()> {
    let pairs = info
        .0
        .and_then(|ix| lock(&INFOS).get(ix).cloned())
        .unwrap_or_default();
    with_entry(w, |e| {
        for (k, v) in pairs {
            match e.info.iter_mut().find(|(k2, _)| *k2 == k) {
                Some(p) => p.1 = v,
                None => e.info.push((k, v)),
            }
        }
    })
}

pub(crate) fn win_get_info(w: &Arc<Window>, info: &mut MPI_Info) -> MpiResult<()> {
    let pairs = with_entry(w, |e| e.info.clone())?;
    *info = h::new_info(pairs);
    Ok(())
}

// ----- attributes -----

fn keyval(k: c_int) -> MpiResult<WinKeyval> {
    if k & WIN_KEYVAL != WIN_KEYVAL || k < 0 {
        return Err(err(
            ErrorClass::Keyval,
            format!("win_keyval = {k:#x} is not a window keyval"),
        ));
    }
    lock(&KEYVALS)
        .get((k & !WIN_KEYVAL) as u32)
        .copied()
        .ok_or_else(|| err(ErrorClass::Keyval, format!("win_keyval = {k:#x} was freed")))
}

fn run_delete(w: MPI_Win, k: c_int, kv: WinKeyval, val: usize) -> MpiResult<()> {
    if let Some(f) = kv.delete {
        // SAFETY: a C function of type MPI_Win_delete_attr_function, called as MPI specifies.
        let rc = unsafe { f(w, k, val as *mut c_void, kv.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            let class = ErrorClass::from_code(rc).unwrap_or(ErrorClass::Other);
            return Err(err(
                class,
                format!("the window attribute delete callback returned error {rc}"),
            ));
        }
    }
    Ok(())
}

pub(crate) fn win_create_keyval(
    copy: MPI_Win_copy_attr_function,
    delete: MPI_Win_delete_attr_function,
    k: &mut c_int,
    extra: *mut c_void,
) -> MpiResult<()> {
    let ix = lock(&KEYVALS).insert(WinKeyval {
        _copy: copy,
        delete,
        extra: extra as usize,
    });
    *k = WIN_KEYVAL | ix as c_int;
    Ok(())
}

pub(crate) fn win_free_keyval(k: &mut c_int) -> MpiResult<()> {
    keyval(*k)?;
    lock(&KEYVALS).remove((*k & !WIN_KEYVAL) as u32);
    *k = MPI_KEYVAL_INVALID;
    Ok(())
}

pub(crate) fn win_set_attr(w: &Arc<Window>, k: c_int, val: *mut c_void) -> MpiResult<()> {
    let kv = keyval(k)?;
    if let Some((old, okv)) = with_entry(w, |e| e.attrs.get(&k).copied())? {
        run_delete(handle_of(w), k, okv, old)?;
    }
    with_entry(w, |e| e.attrs.insert(k, (val as usize, kv))).map(|_| ())
}

pub(crate) fn win_get_attr(
    w: &Arc<Window>,
    k: c_int,
    out: *mut c_void,
    flag: &mut c_int,
) -> MpiResult<()> {
    if out.is_null() {
        return Err(err(ErrorClass::Arg, "argument attribute_val is NULL"));
    }
    let val: Option<*mut c_void> = with_entry(w, |e| {
        let p = &*e.predefined;
        match k {
            MPI_WIN_BASE => Ok(Some(e.win.base() as *mut c_void)),
            MPI_WIN_SIZE => Ok(Some(&p.size as *const MPI_Aint as *mut c_void)),
            MPI_WIN_DISP_UNIT => Ok(Some(&p.disp_unit as *const c_int as *mut c_void)),
            MPI_WIN_CREATE_FLAVOR => Ok(Some(&p.flavor as *const c_int as *mut c_void)),
            MPI_WIN_MODEL => Ok(Some(&p.model as *const c_int as *mut c_void)),
            _ => keyval(k).map(|_| e.attrs.get(&k).map(|v| v.0 as *mut c_void)),
        }
    })??;
    *flag = c_int::from(val.is_some());
    if let Some(v) = val {
        // SAFETY: attribute_val is the address of a `void *` (MPI's convention), non-NULL;
        // the predefined values are boxed in the table entry and live as long as the window.
        unsafe { *(out as *mut *mut c_void) = v };
    }
    Ok(())
}

pub(crate) fn win_delete_attr(w: &Arc<Window>, k: c_int) -> MpiResult<()> {
    keyval(k)?;
    let (v, kv) = with_entry(w, |e| e.attrs.get(&k).copied())?.ok_or_else(|| {
        err(
            ErrorClass::Keyval,
            format!("keyval {k:#x} has no value on this window"),
        )
    })?;
    run_delete(handle_of(w), k, kv, v)?;
    with_entry(w, |e| e.attrs.remove(&k)).map(|_| ())
}

// ----- error handlers -----

pub(crate) fn win_create_errhandler(
    f: MPI_Win_errhandler_function,
    e: &mut MPI_Errhandler,
) -> MpiResult<()> {
    if f.is_none() {
        return Err(err(ErrorClass::Arg, "win_errhandler_fn is NULL"));
    }
    *e = h::new_errhandler(f);
    Ok(())
}

pub(crate) fn win_set_errhandler(w: &Arc<Window>, e: ErrHandler) -> MpiResult<()> {
    let raw = h::errhandler_handle(&e);
    with_entry(w, |x| x.errhandler = raw)
}

pub(crate) fn win_get_errhandler(w: &Arc<Window>, e: &mut MPI_Errhandler) -> MpiResult<()> {
    *e = with_entry(w, |x| x.errhandler)?;
    Ok(())
}

pub(crate) fn win_call_errhandler(w: &Arc<Window>, code: c_int) -> MpiResult<()> {
    let class = ErrorClass::from_code(code).unwrap_or(ErrorClass::Other);
    let e = MpiError::new(class, format!("MPI_Win_call_errhandler: error code {code}"));
    match win_error("MPI_Win_call_errhandler", handle_of(w), e) {
        // The handler ran (or MPI_ERRORS_RETURN): the call itself succeeds.
        Ok(_) => Ok(()),
        // Fatal: the entry point aborts the job with this error.
        Err(e) => Err(e),
    }
}

// ----- operations -----

fn access(addr: *const c_void, count: c_int, dtype: &TypeRef) -> Access<'_> {
    Access {
        addr: addr as *mut u8,
        count: count as i64,
        dtype,
    }
}

fn request_out(id: Option<ReqId>, request: Option<&mut MPI_Request>) {
    if let (Some(id), Some(r)) = (id, request) {
        *r = h::request_handle(id, false);
    }
}

#[allow(clippy::too_many_arguments)]
fn put_get(
    call: &str,
    kind: Kind,
    addr: *const c_void,
    ocount: c_int,
    odt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    w: &Arc<Window>,
    request: Option<&mut MPI_Request>,
) -> MpiResult<()> {
    let a = access(addr, ocount, odt);
    let (origin, result) = if kind == Kind::Put {
        (Some(a), None)
    } else {
        (None, Some(a))
    };
    // SAFETY: MPI requires the buffers to stay valid until the operation completes.
    let id = unsafe {
        w.operate(
            call,
            kind,
            origin,
            None,
            result,
            trank,
            tdisp as isize,
            tcount as i64,
            tdt,
            None,
            request.is_some(),
        )?
    };
    request_out(id, request);
    Ok(())
}

pub(crate) fn put(
    addr: *const c_void,
    ocount: c_int,
    odt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    w: &Arc<Window>,
) -> MpiResult<()> {
    put_get(
        "MPI_Put",
        Kind::Put,
        addr,
        ocount,
        odt,
        trank,
        tdisp,
        tcount,
        tdt,
        w,
        None,
    )
}

pub(crate) fn get(
    addr: *mut c_void,
    ocount: c_int,
    odt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    w: &Arc<Window>,
) -> MpiResult<()> {
    put_get(
        "MPI_Get",
        Kind::Get,
        addr,
        ocount,
        odt,
        trank,
        tdisp,
        tcount,
        tdt,
        w,
        None,
    )
}

pub(crate) fn rput(
    addr: *const c_void,
    ocount: c_int,
    odt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    w: &Arc<Window>,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    put_get(
        "MPI_Rput",
        Kind::Put,
        addr,
        ocount,
        odt,
        trank,
        tdisp,
        tcount,
        tdt,
        w,
        Some(req),
    )
}

pub(crate) fn rget(
    addr: *mut c_void,
    ocount: c_int,
    odt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    w: &Arc<Window>,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    put_get(
        "MPI_Rget",
        Kind::Get,
        addr,
        ocount,
        odt,
        trank,
        tdisp,
        tcount,
        tdt,
        w,
        Some(req),
    )
}

#[allow(clippy::too_many_arguments)]
fn acc(
    call: &str,
    origin: Option<Access<'_>>,
    result: Option<Access<'_>>,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    op: OpDefArg,
    w: &Arc<Window>,
    request: Option<&mut MPI_Request>,
) -> MpiResult<()> {
    let op = super::coll_op(op)?;
    let kind = if result.is_some() {
        Kind::GetAcc
    } else {
        Kind::Acc
    };
    // SAFETY: MPI requires the buffers to stay valid until the operation completes.
    let id = unsafe {
        w.operate(
            call,
            kind,
            origin,
            None,
            result,
            trank,
            tdisp as isize,
            tcount as i64,
            tdt,
            Some(&op),
            request.is_some(),
        )?
    };
    request_out(id, request);
    Ok(())
}

type OpDefArg = crate::handles::OpDef;

pub(crate) fn accumulate(
    addr: *const c_void,
    ocount: c_int,
    odt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    op: OpDefArg,
    w: &Arc<Window>,
) -> MpiResult<()> {
    let o = access(addr, ocount, odt);
    acc(
        "MPI_Accumulate",
        Some(o),
        None,
        trank,
        tdisp,
        tcount,
        tdt,
        op,
        w,
        None,
    )
}

pub(crate) fn raccumulate(
    addr: *const c_void,
    ocount: c_int,
    odt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    op: OpDefArg,
    w: &Arc<Window>,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    let o = access(addr, ocount, odt);
    acc(
        "MPI_Raccumulate",
        Some(o),
        None,
        trank,
        tdisp,
        tcount,
        tdt,
        op,
        w,
        Some(req),
    )
}

pub(crate) fn get_accumulate(
    addr: *const c_void,
    ocount: c_int,
    odt: &TypeRef,
    raddr: *mut c_void,
    rcount: c_int,
    rdt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    op: OpDefArg,
    w: &Arc<Window>,
) -> MpiResult<()> {
    let o = access(addr, ocount, odt);
    let r = access(raddr, rcount, rdt);
    acc(
        "MPI_Get_accumulate",
        Some(o),
        Some(r),
        trank,
        tdisp,
        tcount,
        tdt,
        op,
        w,
        None,
    )
}

pub(crate) fn rget_accumulate(
    addr: *const c_void,
    ocount: c_int,
    odt: &TypeRef,
    raddr: *mut c_void,
    rcount: c_int,
    rdt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    tcount: c_int,
    tdt: &TypeRef,
    op: OpDefArg,
    w: &Arc<Window>,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    let o = access(addr, ocount, odt);
    let r = access(raddr, rcount, rdt);
    acc(
        "MPI_Rget_accumulate",
        Some(o),
        Some(r),
        trank,
        tdisp,
        tcount,
        tdt,
        op,
        w,
        Some(req),
    )
}

pub(crate) fn fetch_and_op(
    addr: *const c_void,
    raddr: *mut c_void,
    dt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    op: OpDefArg,
    w: &Arc<Window>,
) -> MpiResult<()> {
    let o = access(addr, 1, dt);
    let r = access(raddr, 1, dt);
    acc(
        "MPI_Fetch_and_op",
        Some(o),
        Some(r),
        trank,
        tdisp,
        1,
        dt,
        op,
        w,
        None,
    )
}

pub(crate) fn compare_and_swap(
    addr: *const c_void,
    caddr: *const c_void,
    raddr: *mut c_void,
    dt: &TypeRef,
    trank: c_int,
    tdisp: MPI_Aint,
    w: &Arc<Window>,
) -> MpiResult<()> {
    let call = "MPI_Compare_and_swap";
    if caddr.is_null() || addr.is_null() || raddr.is_null() {
        return Err(err(ErrorClass::Buffer, "a buffer argument is NULL"));
    }
    // SAFETY: MPI requires the buffers to stay valid until the operation completes.
    unsafe {
        w.operate(
            call,
            Kind::Cas,
            Some(access(addr, 1, dt)),
            Some(caddr as *const u8),
            Some(access(raddr, 1, dt)),
            trank,
            tdisp as isize,
            1,
            dt,
            None,
            false,
        )?
    };
    Ok(())
}
