//! The last MPI 4.0 calls: `MPI_Type_get_contents_c` (the large-count contents: Tsunagi's
//! `_c` constructors build the `int` forms' types, so there are no large counts),
//! `MPI_Info_create_env` and the conversions of the Fortran 2008 status, whose
//! `TYPE(MPI_Status)` has the C layout (fortran/mpi_f08.f90). `MPI_Op_create_c` is in
//! misc.rs, `MPI_Type_create_darray_c` a `narrow` line of api.in.

use std::ffi::{c_char, c_int, CStr};

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err};

/// `v` (a max_* argument) as an int: larger values are clamped (no type has that many).
fn clamp(v: MPI_Count) -> c_int {
    v.clamp(0, c_int::MAX as MPI_Count) as c_int
}

pub(crate) fn type_get_contents_c(
    t: &TypeRef,
    max_i: MPI_Count,
    max_a: MPI_Count,
    _max_l: MPI_Count,
    max_d: MPI_Count,
    ints_out: *mut c_int,
    addrs_out: *mut MPI_Aint,
    _large_out: *mut MPI_Count,
    types_out: *mut MPI_Datatype,
) -> MpiResult<()> {
    super::type_get_contents(
        t,
        clamp(max_i),
        clamp(max_a),
        clamp(max_d),
        ints_out,
        addrs_out,
        types_out,
    )
}

/// MPI_Info_create_env (MPI 4.0 §11.2.1): how the process was started, callable before
/// MPI_Init. `argc`/`argv` are main's (or 0/NULL): `command` and `argv` come from them.
pub(crate) fn info_create_env(
    argc: c_int,
    argv: *mut *mut c_char,
    info: &mut MPI_Info,
) -> MpiResult<()> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    if argc > 0 && !argv.is_null() {
        let mut words = Vec::new();
        for i in 0..argc as usize {
            // SAFETY: main's argv has argc entries (the MPI contract for this call).
            let p = unsafe { *argv.add(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: a NUL-terminated string of main's argv.
            words.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
        if let Some((cmd, rest)) = words.split_first() {
            pairs.push(("command".into(), cmd.clone()));
            if !rest.is_empty() {
                pairs.push(("argv".into(), rest.join(" ")));
            }
        }
    } else if argc < 0 {
        return Err(err(ErrorClass::Arg, format!("argc = {argc} is negative")));
    }
    // The launcher's numbers when MPI runs (MPI_Init or a session); nothing else before.
    if let Ok(r) = h::runtime("MPI_Info_create_env") {
        if let Ok(n) = r.comm_size(tsunagi_core::CommId::WORLD) {
            pairs.push(("maxprocs".into(), n.to_string()));
        }
        let level = match r.thread_level() {
            tsunagi_core::ThreadLevel::Single => "MPI_THREAD_SINGLE",
            tsunagi_core::ThreadLevel::Funneled => "MPI_THREAD_FUNNELED",
            tsunagi_core::ThreadLevel::Serialized => "MPI_THREAD_SERIALIZED",
            tsunagi_core::ThreadLevel::Multiple => "MPI_THREAD_MULTIPLE",
        };
        pairs.push(("thread_level".into(), level.into()));
    }
    if let Ok(d) = std::env::current_dir() {
        pairs.push(("wdir".into(), d.display().to_string()));
    }
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        pairs.push(("host".into(), host.trim().to_string()));
    }
    pairs.push(("arch".into(), std::env::consts::ARCH.into()));
    *info = h::new_info(pairs);
    Ok(())
}

fn f08_in<'a>(name: &str, p: *const MPI_F08_status) -> MpiResult<&'a MPI_F08_status> {
    // SAFETY: checked for NULL; the caller's status otherwise (MPI contract).
    unsafe { p.as_ref() }.ok_or_else(|| err(ErrorClass::Arg, format!("{name} is NULL")))
}

fn f08_out<'a>(name: &str, p: *mut MPI_F08_status) -> MpiResult<&'a mut MPI_F08_status> {
    // SAFETY: checked for NULL; the caller's status otherwise (MPI contract).
    unsafe { p.as_mut() }.ok_or_else(|| err(ErrorClass::Arg, format!("{name} is NULL")))
}

pub(crate) fn status_c2f08(c: &MPI_Status, f08: *mut MPI_F08_status) -> MpiResult<()> {
    *f08_out("f08_status", f08)? = *c;
    Ok(())
}

pub(crate) fn status_f082c(
    f08: *const MPI_F08_status,
    c: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let v = *f08_in("f08_status", f08)?;
    let c = c.ok_or_else(|| err(ErrorClass::Arg, "c_status is NULL or MPI_STATUS_IGNORE"))?;
    *c = v;
    Ok(())
}

pub(crate) fn status_f082f(f08: *const MPI_F08_status, f: *mut MPI_Fint) -> MpiResult<()> {
    super::status_c2f(f08_in("f08_status", f08)?, f)
}

pub(crate) fn status_f2f08(f: *const MPI_Fint, f08: *mut MPI_F08_status) -> MpiResult<()> {
    super::status_f2c(f, Some(f08_out("f08_status", f08)?))
}
