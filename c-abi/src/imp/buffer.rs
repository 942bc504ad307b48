//! The buffers of buffered sends (MPI 4.1 §3.6): the process's (`MPI_Buffer_attach` ...,
//! whose calls live with point-to-point in p2p.rs and come here for MPI_BUFFER_AUTOMATIC),
//! a communicator's (`MPI_Comm_attach_buffer`, `_detach_buffer`, `_flush_buffer`,
//! `_iflush_buffer`) and a session's (`MPI_Session_*_buffer`). A buffered send uses its
//! communicator's buffer, else its session's, else the process's (the engine's
//! `BufferScope`).
//!
//! `MPI_BUFFER_AUTOMATIC` (`(void *)2`, as MPICH 4.2 and Open MPI 5 define it) attaches a
//! buffer without a size limit: the data of a buffered send always travels in a copy the
//! library allocates, so the attached memory is only accounting.

use std::ffi::{c_int, c_void};

use tsunagi_core::{BufferScope, CommId, ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err};

/// `MPI_BUFFER_AUTOMATIC` in C.
pub(crate) const BUFFER_AUTOMATIC: usize = 2;

/// The size to account for a buffer at `addr` given as `size` bytes (None: automatic).
fn limit(addr: *mut c_void, size: i64) -> Option<usize> {
    (addr as usize != BUFFER_AUTOMATIC).then_some(size.max(0) as usize)
}

fn attach(call: &str, scope: BufferScope, buffer: *mut c_void, size: i64) -> MpiResult<()> {
    if buffer.is_null() && size > 0 {
        return Err(err(
            ErrorClass::Buffer,
            format!("{call}: argument buffer is NULL with size {size}"),
        ));
    }
    h::runtime(call)?.buffer_attach_scoped(call, scope, buffer as usize, limit(buffer, size))
}

/// Detach `scope`'s buffer: its address goes to `*addr` (a `void **` in MPI's convention),
/// its size is returned (0 for an automatic buffer or none).
fn detach(call: &str, scope: BufferScope, addr: *mut c_void) -> MpiResult<i64> {
    if addr.is_null() {
        return Err(err(
            ErrorClass::Arg,
            format!("{call}: argument buffer_addr is NULL"),
        ));
    }
    let (a, size) = h::runtime(call)?.buffer_detach_scoped(scope)?;
    // SAFETY: buffer_addr is the address of a `void *` (MPI's convention), checked non-NULL.
    unsafe { *(addr as *mut *mut c_void) = a as *mut c_void };
    Ok(size.map_or(0, |s| s.min(i64::MAX as usize) as i64))
}

fn size_out(call: &str, size: i64, out: &mut c_int) -> MpiResult<()> {
    *out = c_int::try_from(size).map_err(|_| {
        err(
            ErrorClass::Count,
            format!("{call}: the buffer's size {size} does not fit an int (use the _c form)"),
        )
    })?;
    Ok(())
}

/// MPI_Buffer_attach's work (p2p.rs): MPI_BUFFER_AUTOMATIC is a buffer without limit.
pub(crate) fn process_buffer_attach(buffer: *mut c_void, size: i64) -> MpiResult<()> {
    attach("MPI_Buffer_attach", BufferScope::Process, buffer, size)
}

/// MPI_Buffer_detach's work (p2p.rs): the size is 0 for MPI_BUFFER_AUTOMATIC.
pub(crate) fn process_buffer_detach(addr: *mut c_void) -> MpiResult<i64> {
    let size = detach("MPI_Buffer_detach", BufferScope::Process, addr)?;
    // SAFETY: detach checked addr and wrote the address there.
    let a = unsafe { *(addr as *mut *mut c_void) } as usize;
    Ok(if a == BUFFER_AUTOMATIC { 0 } else { size })
}

pub(crate) fn comm_attach_buffer(comm: CommId, buffer: *mut c_void, size: c_int) -> MpiResult<()> {
    attach(
        "MPI_Comm_attach_buffer",
        BufferScope::Comm(comm),
        buffer,
        size.into(),
    )
}

pub(crate) fn comm_attach_buffer_c(
    comm: CommId,
    buffer: *mut c_void,
    size: MPI_Count,
) -> MpiResult<()> {
    h::check_count("size", size)?;
    attach(
        "MPI_Comm_attach_buffer_c",
        BufferScope::Comm(comm),
        buffer,
        size,
    )
}

pub(crate) fn comm_detach_buffer(
    comm: CommId,
    addr: *mut c_void,
    size: &mut c_int,
) -> MpiResult<()> {
    let call = "MPI_Comm_detach_buffer";
    let s = detach(call, BufferScope::Comm(comm), addr)?;
    size_out(call, s, size)
}

pub(crate) fn comm_detach_buffer_c(
    comm: CommId,
    addr: *mut c_void,
    size: &mut MPI_Count,
) -> MpiResult<()> {
    *size = detach("MPI_Comm_detach_buffer_c", BufferScope::Comm(comm), addr)?;
    Ok(())
}

pub(crate) fn comm_flush_buffer(comm: CommId) -> MpiResult<()> {
    h::runtime("MPI_Comm_flush_buffer")?.buffer_flush_scoped(BufferScope::Comm(comm))
}

pub(crate) fn comm_iflush_buffer(comm: CommId, request: &mut MPI_Request) -> MpiResult<()> {
    let id = h::runtime("MPI_Comm_iflush_buffer")?.buffer_iflush_scoped(BufferScope::Comm(comm))?;
    *request = h::request_handle(id, false);
    Ok(())
}

fn session_scope(session: MPI_Session) -> MpiResult<BufferScope> {
    Ok(BufferScope::Session(
        super::session_index("session", session)? as u32,
    ))
}

pub(crate) fn session_attach_buffer(
    session: MPI_Session,
    buffer: *mut c_void,
    size: c_int,
) -> MpiResult<()> {
    let scope = session_scope(session)?;
    attach("MPI_Session_attach_buffer", scope, buffer, size.into())
}

pub(crate) fn session_attach_buffer_c(
    session: MPI_Session,
    buffer: *mut c_void,
    size: MPI_Count,
) -> MpiResult<()> {
    h::check_count("size", size)?;
    let scope = session_scope(session)?;
    attach("MPI_Session_attach_buffer_c", scope, buffer, size)
}

pub(crate) fn session_detach_buffer(
    session: MPI_Session,
    addr: *mut c_void,
    size: &mut c_int,
) -> MpiResult<()> {
    let call = "MPI_Session_detach_buffer";
    let s = detach(call, session_scope(session)?, addr)?;
    size_out(call, s, size)
}

pub(crate) fn session_detach_buffer_c(
    session: MPI_Session,
    addr: *mut c_void,
    size: &mut MPI_Count,
) -> MpiResult<()> {
    *size = detach("MPI_Session_detach_buffer_c", session_scope(session)?, addr)?;
    Ok(())
}

pub(crate) fn session_flush_buffer(session: MPI_Session) -> MpiResult<()> {
    let scope = session_scope(session)?;
    h::runtime("MPI_Session_flush_buffer")?.buffer_flush_scoped(scope)
}

pub(crate) fn session_iflush_buffer(
    session: MPI_Session,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let scope = session_scope(session)?;
    let id = h::runtime("MPI_Session_iflush_buffer")?.buffer_iflush_scoped(scope)?;
    *request = h::request_handle(id, false);
    Ok(())
}
