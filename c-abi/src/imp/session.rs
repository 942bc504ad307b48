//! Sessions (MPI 4.0): `MPI_Session_init`/`finalize`, the process sets `mpi://WORLD` and
//! `mpi://SELF`, groups from them (for `MPI_Comm_create_from_group`), session info and
//! session error handlers.
//!
//! The sessions model and the world model share the one runtime of the process: the first
//! of MPI_Init and MPI_Session_init starts it, the last of MPI_Finalize and
//! MPI_Session_finalize ends it (a runtime cannot start again afterwards).

use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, Weak};

use tsunagi_core::comm::ErrHandler;
use tsunagi_core::group::Group;
use tsunagi_core::{ErrorClass, MpiError, MpiResult, ThreadLevel};

use crate::ffi::*;
use crate::handles::{self as h, err, InfoId};

struct Session {
    errhandler: MPI_Errhandler,
    /// The info given to MPI_Session_init (copied), returned by MPI_Session_get_info.
    info: Vec<(String, String)>,
}

static SESSIONS: Mutex<Vec<Option<Session>>> = Mutex::new(Vec::new());

fn lock() -> std::sync::MutexGuard<'static, Vec<Option<Session>>> {
    SESSIONS.lock().unwrap_or_else(|e| e.into_inner())
}

const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

fn handle_of(i: usize) -> MPI_Session {
    MPI_SESSION_NULL | (i as c_int + 1)
}

fn index_of(s: MPI_Session) -> Option<usize> {
    if s & !0xff_ffff != MPI_SESSION_NULL {
        return None;
    }
    ((s & 0xff_ffff) as usize).checked_sub(1)
}

/// The live sessions.
pub(crate) fn live_sessions() -> usize {
    lock().iter().filter(|s| s.is_some()).count()
}

fn check(name: &str, s: MPI_Session) -> MpiResult<usize> {
    index_of(s)
        .filter(|&i| lock().get(i).is_some_and(Option::is_some))
        .ok_or_else(|| {
            let what = if s == MPI_SESSION_NULL {
                "MPI_SESSION_NULL".to_string()
            } else {
                format!("{s:#x}, not a live session")
            };
            err(ErrorClass::Session, format!("{name} is {what}"))
        })
}

/// The index of a live session (its buffer's `BufferScope::Session`).
pub(crate) fn session_index(name: &str, s: MPI_Session) -> MpiResult<usize> {
    check(name, s)
}

/// The groups made by MPI_Group_from_session_pset, with their session's index: a
/// communicator made from one (MPI_Comm_create_from_group) derives from that session.
static SESSION_GROUPS: Mutex<Vec<(Weak<Group>, usize)>> = Mutex::new(Vec::new());

/// The session `group` came from (MPI_Group_from_session_pset), if any.
pub(crate) fn session_of_group(group: &Arc<Group>) -> Option<u32> {
    let t = SESSION_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    t.iter()
        .find(|(g, _)| std::ptr::eq(g.as_ptr(), Arc::as_ptr(group)))
        .map(|&(_, s)| s as u32)
}

/// Report `e` through `session`'s error handler: the code to return, or None when
/// `session` is not a live session (the caller then uses the default path).
pub(crate) fn session_error(session: MPI_Session, e: &MpiError) -> Option<c_int> {
    let i = index_of(session)?;
    let errh = lock().get(i)?.as_ref()?.errhandler;
    let code = e.class as c_int;
    match errh {
        MPI_ERRORS_RETURN => Some(code),
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => {
            eprintln!("Tsunagi: fatal error: {e}");
            match h::runtime("MPI_Session") {
                Ok(r) => r.abort(code, &e.to_string()),
                Err(_) => std::process::exit(code & 0xff),
            }
        }
        user => {
            let f = h::errhandler_fn(user).flatten()?;
            let (mut s, mut c) = (session, code);
            // SAFETY: a C function of the MPI_Session_errhandler_function type (same shape
            // as the communicator's), given pointers to locals that live for the call.
            unsafe { f(&mut s, &mut c) };
            Some(code)
        }
    }
}

pub(crate) fn session_init(
    info: Option<InfoId>,
    errhandler: MPI_Errhandler,
    session: *mut MPI_Session,
) -> MpiResult<()> {
    // SAFETY: checked for NULL; valid per MPI's contract otherwise.
    let session = unsafe { h::out_mut("session", session)? };
    h::errhandler("errhandler", errhandler)?;
    let info = match info {
        Some(i) => super::info_pairs(i),
        None => Vec::new(),
    };
    super::start_runtime("MPI_Session_init", ThreadLevel::Multiple)?;
    let mut t = lock();
    let slot = match t.iter().position(Option::is_none) {
        Some(k) => k,
        None => {
            t.push(None);
            t.len() - 1
        }
    };
    t[slot] = Some(Session { errhandler, info });
    *session = handle_of(slot);
    Ok(())
}

pub(crate) fn session_finalize(session: *mut MPI_Session) -> MpiResult<()> {
    // SAFETY: checked for NULL; valid per MPI's contract otherwise.
    let s = unsafe { h::out_mut("session", session)? };
    let i = check("session", *s)?;
    // Buffered messages sent through the session's buffer leave before it goes.
    h::runtime("MPI_Session_finalize")?.buffer_session_freed(i as u32)?;
    SESSION_GROUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(g, s)| *s != i && g.strong_count() > 0);
    lock()[i] = None;
    *s = MPI_SESSION_NULL;
    super::end_runtime_if_unused()
}

pub(crate) fn session_get_num_psets(
    session: MPI_Session,
    _info: Option<InfoId>,
    n: &mut c_int,
) -> MpiResult<()> {
    check("session", session)?;
    *n = PSETS.len() as c_int;
    Ok(())
}

pub(crate) fn session_get_nth_pset(
    session: MPI_Session,
    _info: Option<InfoId>,
    n: c_int,
    pset_len: &mut c_int,
    pset_name: *mut c_char,
) -> MpiResult<()> {
    check("session", session)?;
    let name = usize::try_from(n)
        .ok()
        .and_then(|n| PSETS.get(n))
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                format!("n = {n} is not in 0..{}", PSETS.len()),
            )
        })?;
    // MPI 4.0: a length of 0 asks for the length needed (with the NUL); otherwise the
    // name is copied, cut to fit.
    if *pset_len <= 0 || pset_name.is_null() {
        *pset_len = name.len() as c_int + 1;
        return Ok(());
    }
    let k = name.len().min(*pset_len as usize - 1);
    // SAFETY: the caller gives `*pset_len` bytes at pset_name and k < *pset_len.
    unsafe {
        std::ptr::copy_nonoverlapping(name.as_ptr().cast::<c_char>(), pset_name, k);
        *pset_name.add(k) = 0;
    }
    *pset_len = k as c_int + 1;
    Ok(())
}

fn pset_group(name: &str) -> MpiResult<Arc<Group>> {
    let r = h::runtime("MPI_Group_from_session_pset")?;
    match name {
        "mpi://WORLD" => r.comm_group(tsunagi_core::CommId::WORLD),
        "mpi://SELF" => r.comm_group(tsunagi_core::CommId::SELF),
        other => Err(err(
            ErrorClass::Arg,
            format!("pset_name = \"{other}\" is not a process set (mpi://WORLD, mpi://SELF)"),
        )),
    }
}

pub(crate) fn session_get_pset_info(
    session: MPI_Session,
    pset_name: &str,
    info: &mut MPI_Info,
) -> MpiResult<()> {
    check("session", session)?;
    let g = pset_group(pset_name)?;
    *info = h::new_info(vec![("mpi_size".into(), g.size().to_string())]);
    Ok(())
}

pub(crate) fn session_get_info(session: MPI_Session, info_used: &mut MPI_Info) -> MpiResult<()> {
    let i = check("session", session)?;
    let mut pairs = lock()[i].as_ref().expect("checked").info.clone();
    let level = h::runtime("MPI_Session_get_info")?.thread_level();
    let level = match level {
        ThreadLevel::Single => "MPI_THREAD_SINGLE",
        ThreadLevel::Funneled => "MPI_THREAD_FUNNELED",
        ThreadLevel::Serialized => "MPI_THREAD_SERIALIZED",
        ThreadLevel::Multiple => "MPI_THREAD_MULTIPLE",
    };
    pairs.retain(|(k, _)| k != "thread_level");
    pairs.push(("thread_level".into(), level.into()));
    *info_used = h::new_info(pairs);
    Ok(())
}

pub(crate) fn group_from_session_pset(
    session: MPI_Session,
    pset_name: &str,
    newgroup: &mut MPI_Group,
) -> MpiResult<()> {
    let i = check("session", session)?;
    // A group of its own (not the world communicator's), so that communicators made from
    // it are known to derive from this session.
    let g = Arc::new((*pset_group(pset_name)?).clone());
    {
        let mut t = SESSION_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|(g, _)| g.strong_count() > 0);
        t.push((Arc::downgrade(&g), i));
    }
    *newgroup = h::new_group(g);
    Ok(())
}

pub(crate) fn session_create_errhandler(
    f: MPI_Session_errhandler_function,
    errhandler: &mut MPI_Errhandler,
) -> MpiResult<()> {
    if f.is_none() {
        return Err(err(ErrorClass::Arg, "session_errhandler_fn is NULL"));
    }
    *errhandler = h::new_errhandler(f);
    Ok(())
}

pub(crate) fn session_set_errhandler(
    session: MPI_Session,
    errhandler: MPI_Errhandler,
) -> MpiResult<()> {
    let i = check("session", session)?;
    h::errhandler("errhandler", errhandler)?;
    lock()[i].as_mut().expect("checked").errhandler = errhandler;
    Ok(())
}

pub(crate) fn session_get_errhandler(
    session: MPI_Session,
    errhandler: &mut MPI_Errhandler,
) -> MpiResult<()> {
    let i = check("session", session)?;
    let e = lock()[i].as_ref().expect("checked").errhandler;
    // As MPI_Comm_get_errhandler: a user handler's handle gains a reference.
    *errhandler = match h::errhandler("errhandler", e)? {
        ErrHandler::User(..) => h::errhandler_handle(&h::errhandler("errhandler", e)?),
        _ => e,
    };
    Ok(())
}

pub(crate) fn session_call_errhandler(session: MPI_Session, errorcode: c_int) -> MpiResult<()> {
    let i = check("session", session)?;
    let e = lock()[i].as_ref().expect("checked").errhandler;
    if e == MPI_ERRORS_RETURN {
        return Ok(());
    }
    let mut class = ErrorClass::Other as c_int;
    super::error_class(errorcode, &mut class)?;
    let error = MpiError::new(
        ErrorClass::from_code(class).unwrap_or(ErrorClass::Other),
        format!("MPI_Session_call_errhandler: error code {errorcode}"),
    );
    session_error(session, &error);
    Ok(())
}
