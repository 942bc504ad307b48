//! Start-up, shutdown and the environment queries.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use tsunagi_core::runtime::{library_version, VERSION};
use tsunagi_core::{ErrorClass, MpiResult, ThreadLevel};

use super::flag;
use crate::ffi::*;
use crate::handles::{self as h, err, InfoId};

fn level_from(v: c_int) -> MpiResult<ThreadLevel> {
    Ok(match v {
        0 => ThreadLevel::Single,
        1 => ThreadLevel::Funneled,
        2 => ThreadLevel::Serialized,
        3 => ThreadLevel::Multiple,
        _ => {
            return Err(err(
                ErrorClass::Arg,
                format!("required = {v} is not a thread level"),
            ))
        }
    })
}

/// The world model's state (MPI_Init / MPI_Finalize): the runtime may be running for
/// sessions without it (see `session.rs`).
static WORLD: AtomicU8 = AtomicU8::new(0);
const WORLD_NONE: u8 = 0;
const WORLD_ON: u8 = 1;
const WORLD_DONE: u8 = 2;

/// Start the process's runtime, or find it running (started by the other model): the
/// thread level it provides.
pub(crate) fn start_runtime(call: &str, level: ThreadLevel) -> MpiResult<ThreadLevel> {
    if tsunagi_core::initialized() && !tsunagi_core::finalized() {
        return Ok(h::runtime(call)?.thread_level());
    }
    let l = tsunagi_core::init(level, &tsunagi_transports::REGISTRY)?;
    let r = tsunagi_core::rt(call)?;
    if !super::tools::TOOLS_USED.load(Ordering::Acquire) {
        // SAFETY: a C program promises with the thread level it asked for (below
        // MPI_THREAD_MULTIPLE, else this does nothing) that its MPI calls never overlap and
        // are ordered by its own synchronisation; the threads of ours that use the runtime
        // share the engine before they start (the I/O thread, MPI_T_init_thread); we are
        // not inside a call of the runtime.
        unsafe { r.assume_serial_calls() };
    }
    h::set_running(Some(r));
    Ok(l)
}

/// End the runtime when neither the world model nor a session uses it any more.
pub(crate) fn end_runtime_if_unused() -> MpiResult<()> {
    if WORLD.load(Ordering::Acquire) != WORLD_ON && super::live_sessions() == 0 {
        tsunagi_core::finalize()?;
        h::set_running(None);
    }
    Ok(())
}

fn world_init(call: &str, level: ThreadLevel) -> MpiResult<ThreadLevel> {
    if WORLD.load(Ordering::Acquire) != WORLD_NONE || tsunagi_core::finalized() {
        // The core gives the error of a second MPI_Init (or one after MPI_Finalize).
        tsunagi_core::init(level, &tsunagi_transports::REGISTRY)?;
        return Err(err(
            ErrorClass::Other,
            format!("{call}: MPI was already initialized"),
        ));
    }
    let l = start_runtime(call, level)?;
    WORLD.store(WORLD_ON, Ordering::Release);
    super::connect_to_parent()?;
    Ok(l)
}

pub(crate) fn init(_argc: Option<&mut c_int>, _argv: *mut *mut *mut c_char) -> MpiResult<()> {
    world_init("MPI_Init", ThreadLevel::Single)?;
    Ok(())
}

pub(crate) fn init_thread(
    _argc: Option<&mut c_int>,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: &mut c_int,
) -> MpiResult<()> {
    let l = world_init("MPI_Init_thread", level_from(required)?)?;
    *provided = l as c_int;
    Ok(())
}

pub(crate) fn query_thread(provided: &mut c_int) -> MpiResult<()> {
    *provided = h::runtime("MPI_Query_thread")?.thread_level() as c_int;
    Ok(())
}

pub(crate) fn is_thread_main(f: &mut c_int) -> MpiResult<()> {
    *f = flag(h::runtime("MPI_Is_thread_main")?.is_thread_main());
    Ok(())
}

pub(crate) fn finalize() -> MpiResult<()> {
    // First, as if MPI_COMM_SELF were freed: its attributes' delete callbacks, newest
    // first, while the whole library still works.
    let r = h::runtime("MPI_Finalize")?;
    if WORLD.load(Ordering::Acquire) != WORLD_ON {
        return Err(err(
            ErrorClass::Other,
            "MPI_Finalize: MPI_Init was not called (sessions end with MPI_Session_finalize)",
        ));
    }
    r.delete_self_attrs()?;
    WORLD.store(WORLD_DONE, Ordering::Release);
    let r = end_runtime_if_unused();
    super::at_finalize();
    r
}

pub(crate) fn initialized(f: &mut c_int) -> MpiResult<()> {
    *f = flag(WORLD.load(Ordering::Acquire) != WORLD_NONE);
    Ok(())
}

pub(crate) fn finalized(f: &mut c_int) -> MpiResult<()> {
    *f = flag(WORLD.load(Ordering::Acquire) == WORLD_DONE);
    Ok(())
}

pub(crate) fn abort(comm: tsunagi_core::CommId, code: c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Abort")?;
    r.check_comm_id("MPI_Abort", comm)?;
    r.abort(code, "the program called MPI_Abort")
}

fn epoch() -> std::time::Instant {
    static E: OnceLock<std::time::Instant> = OnceLock::new();
    *E.get_or_init(std::time::Instant::now)
}

pub(crate) fn wtime() -> f64 {
    match tsunagi_core::rt("MPI_Wtime") {
        Ok(r) => r.wtime(),
        Err(_) => epoch().elapsed().as_secs_f64(),
    }
}

pub(crate) fn wtick() -> f64 {
    1e-9
}

pub(crate) fn get_processor_name(name: *mut c_char, len: &mut c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Get_processor_name")?;
    // SAFETY: MPI requires room for MPI_MAX_PROCESSOR_NAME bytes.
    *len = unsafe { h::write_cstr("name", name, MPI_MAX_PROCESSOR_NAME, r.processor_name())? }
        as c_int;
    Ok(())
}

pub(crate) fn get_version(version: &mut c_int, subversion: &mut c_int) -> MpiResult<()> {
    *version = VERSION.0;
    *subversion = VERSION.1;
    Ok(())
}

pub(crate) fn get_library_version(v: *mut c_char, len: &mut c_int) -> MpiResult<()> {
    // SAFETY: MPI requires room for MPI_MAX_LIBRARY_VERSION_STRING bytes.
    *len = unsafe {
        h::write_cstr(
            "version",
            v,
            MPI_MAX_LIBRARY_VERSION_STRING,
            &library_version(),
        )?
    } as c_int;
    Ok(())
}

pub(crate) fn alloc_mem(
    size: MPI_Aint,
    _info: Option<InfoId>,
    baseptr: *mut c_void,
) -> MpiResult<()> {
    if size < 0 {
        return Err(err(ErrorClass::Arg, format!("size = {size} is negative")));
    }
    if baseptr.is_null() {
        return Err(err(ErrorClass::Arg, "argument baseptr is NULL"));
    }
    // SAFETY: malloc of at least one byte; the result is checked below.
    let p = unsafe { libc::malloc((size as usize).max(1)) };
    if p.is_null() {
        return Err(err(
            ErrorClass::NoMem,
            format!("cannot allocate {size} bytes"),
        ));
    }
    // SAFETY: baseptr is the address of a `void *` (MPI's convention), checked non-NULL.
    unsafe { *(baseptr as *mut *mut c_void) = p };
    Ok(())
}

pub(crate) fn free_mem(base: *mut c_void) -> MpiResult<()> {
    // SAFETY: `base` came from MPI_Alloc_mem (malloc) or is NULL, as MPI requires.
    unsafe { libc::free(base) };
    Ok(())
}

pub(crate) fn pcontrol(_level: c_int) -> MpiResult<()> {
    Ok(())
}
