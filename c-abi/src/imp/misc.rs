//! Errors and error handlers, user operations, handle conversions.

use std::ffi::c_int;

use tsunagi_core::{CommId, ErrHandler, ErrorClass, MpiError, MpiResult};

use super::flag;
use crate::ffi::*;
use crate::handles::{self as h, err, OpDef};

pub(crate) fn comm_set_errhandler(comm: CommId, e: ErrHandler) -> MpiResult<()> {
    h::runtime("MPI_Comm_set_errhandler")?.set_errhandler(comm, e)
}

pub(crate) fn comm_get_errhandler(comm: CommId, e: &mut MPI_Errhandler) -> MpiResult<()> {
    *e = h::errhandler_handle(&h::runtime("MPI_Comm_get_errhandler")?.get_errhandler(comm)?);
    Ok(())
}

pub(crate) fn errhandler_set(comm: CommId, e: ErrHandler) -> MpiResult<()> {
    comm_set_errhandler(comm, e)
}

pub(crate) fn errhandler_get(comm: CommId, e: &mut MPI_Errhandler) -> MpiResult<()> {
    comm_get_errhandler(comm, e)
}

pub(crate) fn comm_create_errhandler(
    f: MPI_Comm_errhandler_function,
    e: &mut MPI_Errhandler,
) -> MpiResult<()> {
    if f.is_none() {
        return Err(err(ErrorClass::Arg, "comm_errhandler_fn is NULL"));
    }
    *e = h::new_errhandler(f);
    Ok(())
}

pub(crate) fn errhandler_create(
    f: MPI_Comm_errhandler_function,
    e: &mut MPI_Errhandler,
) -> MpiResult<()> {
    comm_create_errhandler(f, e)
}

pub(crate) fn comm_call_errhandler(comm: CommId, code: c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Comm_call_errhandler")?;
    r.check_comm_id("MPI_Comm_call_errhandler", comm)?;
    let mut class = ErrorClass::Other as c_int;
    super::error_class(code, &mut class)?;
    let class = ErrorClass::from_code(class).unwrap_or(ErrorClass::Other);
    // The handler runs with the code itself (a user code too), or the job aborts; the
    // call itself succeeds.
    r.call_errhandler(
        Some(comm),
        code,
        &MpiError::new(
            class,
            format!("MPI_Comm_call_errhandler: error code {code}"),
        ),
    );
    Ok(())
}

pub(crate) fn errhandler_free(e: &mut MPI_Errhandler) -> MpiResult<()> {
    h::free_errhandler(e)
}

pub(crate) fn op_create(f: MPI_User_function, commute: c_int, op: &mut MPI_Op) -> MpiResult<()> {
    if f.is_none() {
        return Err(err(ErrorClass::Arg, "user_fn is NULL"));
    }
    *op = h::new_op(OpDef::User {
        func: f,
        commute: commute != 0,
    });
    Ok(())
}

pub(crate) fn op_create_c(
    f: MPI_User_function_c,
    commute: c_int,
    op: &mut MPI_Op,
) -> MpiResult<()> {
    if f.is_none() {
        return Err(err(ErrorClass::Arg, "user_fn is NULL"));
    }
    *op = h::new_op(OpDef::UserC {
        func: f,
        commute: commute != 0,
    });
    Ok(())
}

pub(crate) fn op_free(op: &mut MPI_Op) -> MpiResult<()> {
    h::free_op(op)
}

pub(crate) fn op_commutative(op: OpDef, commute: &mut c_int) -> MpiResult<()> {
    *commute = flag(match op {
        OpDef::Builtin(_) => true,
        OpDef::User { commute, .. } | OpDef::UserC { commute, .. } => commute,
    });
    Ok(())
}

// Handle conversions: MPICH's Fortran handles are the C values.
pub(crate) fn comm_c2f(h: MPI_Comm) -> MPI_Fint {
    h
}
pub(crate) fn comm_f2c(h: MPI_Fint) -> MPI_Comm {
    h
}
pub(crate) fn type_c2f(h: MPI_Datatype) -> MPI_Fint {
    h
}
pub(crate) fn type_f2c(h: MPI_Fint) -> MPI_Datatype {
    h
}
pub(crate) fn group_c2f(h: MPI_Group) -> MPI_Fint {
    h
}
pub(crate) fn group_f2c(h: MPI_Fint) -> MPI_Group {
    h
}
pub(crate) fn request_c2f(h: MPI_Request) -> MPI_Fint {
    h
}
pub(crate) fn request_f2c(h: MPI_Fint) -> MPI_Request {
    h
}
pub(crate) fn op_c2f(h: MPI_Op) -> MPI_Fint {
    h
}
pub(crate) fn op_f2c(h: MPI_Fint) -> MPI_Op {
    h
}
pub(crate) fn info_c2f(h: MPI_Info) -> MPI_Fint {
    h
}
pub(crate) fn info_f2c(h: MPI_Fint) -> MPI_Info {
    h
}
pub(crate) fn errhandler_c2f(h: MPI_Errhandler) -> MPI_Fint {
    h
}
pub(crate) fn errhandler_f2c(h: MPI_Fint) -> MPI_Errhandler {
    h
}
pub(crate) fn message_c2f(h: MPI_Message) -> MPI_Fint {
    h
}
pub(crate) fn message_f2c(h: MPI_Fint) -> MPI_Message {
    h
}
pub(crate) fn win_c2f(h: MPI_Win) -> MPI_Fint {
    h
}
pub(crate) fn win_f2c(h: MPI_Fint) -> MPI_Win {
    h
}
pub(crate) fn session_c2f(h: MPI_Session) -> MPI_Fint {
    h
}
pub(crate) fn session_f2c(h: MPI_Fint) -> MPI_Session {
    h
}

pub(crate) fn status_c2f(c: &MPI_Status, f: *mut MPI_Fint) -> MpiResult<()> {
    // SAFETY: MPI requires room for MPI_STATUS_SIZE integers.
    let out = unsafe { h::slice_mut("f_status", f, 5)? };
    out.copy_from_slice(&[
        c.count_lo,
        c.count_hi_and_cancelled,
        c.MPI_SOURCE,
        c.MPI_TAG,
        c.MPI_ERROR,
    ]);
    Ok(())
}

pub(crate) fn status_f2c(f: *const MPI_Fint, c: Option<&mut MPI_Status>) -> MpiResult<()> {
    // SAFETY: MPI requires MPI_STATUS_SIZE integers.
    let v = unsafe { h::slice("f_status", f, 5)? };
    let c = c.ok_or_else(|| err(ErrorClass::Arg, "c_status is NULL or MPI_STATUS_IGNORE"))?;
    *c = MPI_Status {
        count_lo: v[0],
        count_hi_and_cancelled: v[1],
        MPI_SOURCE: v[2],
        MPI_TAG: v[3],
        MPI_ERROR: v[4],
    };
    Ok(())
}
