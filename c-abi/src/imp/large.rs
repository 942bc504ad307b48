//! The large-count (`_c`) functions of MPI 4.0. Queries (MPI_Get_count_c, MPI_Type_size_c,
//! extents) give the full MPI_Count range; the communication calls run their `int`
//! counterpart, so a count above INT_MAX is refused with MPI_ERR_COUNT (the core's
//! requests take such counts, but the calls below have not been widened yet).

use std::ffi::{c_int, c_void};

use tsunagi_core::{CommId, ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{err, DtRef, OpDef};

/// `v` as an `int` count, or MPI_ERR_COUNT.
pub(crate) fn small(name: &str, v: MPI_Count) -> MpiResult<c_int> {
    c_int::try_from(v).map_err(|_| {
        err(
            ErrorClass::Count,
            format!(
                "{name} = {v} is above INT_MAX, which Tsunagi's large-count calls do not take yet"
            ),
        )
    })
}

/// MPI_Send_c: MPI_Send with an MPI_Count count.
pub(crate) fn send_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::send(buf, count, datatype, dest, tag, comm)
}

/// MPI_Ssend_c: MPI_Ssend with an MPI_Count count.
pub(crate) fn ssend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::ssend(buf, count, datatype, dest, tag, comm)
}

/// MPI_Rsend_c: MPI_Rsend with an MPI_Count count.
pub(crate) fn rsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::rsend(buf, count, datatype, dest, tag, comm)
}

/// MPI_Bsend_c: MPI_Bsend with an MPI_Count count.
pub(crate) fn bsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::bsend(buf, count, datatype, dest, tag, comm)
}

/// MPI_Recv_c: MPI_Recv with an MPI_Count count.
pub(crate) fn recv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    source: c_int,
    tag: c_int,
    comm: CommId,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::recv(buf, count, datatype, source, tag, comm, status)
}

/// MPI_Isend_c: MPI_Isend with an MPI_Count count.
pub(crate) fn isend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::isend(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Issend_c: MPI_Issend with an MPI_Count count.
pub(crate) fn issend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::issend(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Irsend_c: MPI_Irsend with an MPI_Count count.
pub(crate) fn irsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::irsend(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Ibsend_c: MPI_Ibsend with an MPI_Count count.
pub(crate) fn ibsend_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::ibsend(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Irecv_c: MPI_Irecv with an MPI_Count count.
pub(crate) fn irecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    source: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::irecv(buf, count, datatype, source, tag, comm, request)
}

/// MPI_Send_init_c: MPI_Send_init with an MPI_Count count.
pub(crate) fn send_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::send_init(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Ssend_init_c: MPI_Ssend_init with an MPI_Count count.
pub(crate) fn ssend_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::ssend_init(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Rsend_init_c: MPI_Rsend_init with an MPI_Count count.
pub(crate) fn rsend_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::rsend_init(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Bsend_init_c: MPI_Bsend_init with an MPI_Count count.
pub(crate) fn bsend_init_c(
    buf: *const c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::bsend_init(buf, count, datatype, dest, tag, comm, request)
}

/// MPI_Recv_init_c: MPI_Recv_init with an MPI_Count count.
pub(crate) fn recv_init_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    source: c_int,
    tag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::recv_init(buf, count, datatype, source, tag, comm, request)
}

/// MPI_Sendrecv_c: MPI_Sendrecv with an MPI_Count count.
pub(crate) fn sendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: &DtRef,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: &DtRef,
    source: c_int,
    recvtag: c_int,
    comm: CommId,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let sendcount = small("sendcount", sendcount)?;
    let recvcount = small("recvcount", recvcount)?;
    super::sendrecv(
        sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
        comm, status,
    )
}

/// MPI_Sendrecv_replace_c: MPI_Sendrecv_replace with an MPI_Count count.
pub(crate) fn sendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: CommId,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::sendrecv_replace(
        buf, count, datatype, dest, sendtag, source, recvtag, comm, status,
    )
}

/// MPI_Mrecv_c: MPI_Mrecv with an MPI_Count count.
pub(crate) fn mrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    message: &mut MPI_Message,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::mrecv(buf, count, datatype, message, status)
}

/// MPI_Imrecv_c: MPI_Imrecv with an MPI_Count count.
pub(crate) fn imrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    message: &mut MPI_Message,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::imrecv(buf, count, datatype, message, request)
}

/// MPI_Get_count_c: MPI_Get_count with an MPI_Count count.
pub(crate) fn get_count_c(
    status: &MPI_Status,
    datatype: &DtRef,
    count: &mut MPI_Count,
) -> MpiResult<()> {
    let (n, _) = datatype.count_for_bytes(super::status_bytes(status) as usize);
    *count = n.map_or(MPI_UNDEFINED as MPI_Count, |n| n as MPI_Count);
    Ok(())
}

/// MPI_Get_elements_c: MPI_Get_elements with an MPI_Count count.
pub(crate) fn get_elements_c(
    status: &MPI_Status,
    datatype: &DtRef,
    count: &mut MPI_Count,
) -> MpiResult<()> {
    super::get_elements_x(status, datatype, count)
}

/// MPI_Type_size_c: MPI_Type_size with an MPI_Count count.
pub(crate) fn type_size_c(datatype: &DtRef, size: &mut MPI_Count) -> MpiResult<()> {
    super::type_size_x(datatype, size)
}

/// MPI_Type_get_extent_c: MPI_Type_get_extent with an MPI_Count count.
pub(crate) fn type_get_extent_c(
    datatype: &DtRef,
    lb: &mut MPI_Count,
    extent: &mut MPI_Count,
) -> MpiResult<()> {
    super::type_get_extent_x(datatype, lb, extent)
}

/// MPI_Type_get_true_extent_c: MPI_Type_get_true_extent with an MPI_Count count.
pub(crate) fn type_get_true_extent_c(
    datatype: &DtRef,
    true_lb: &mut MPI_Count,
    true_extent: &mut MPI_Count,
) -> MpiResult<()> {
    super::type_get_true_extent_x(datatype, true_lb, true_extent)
}

/// MPI_Bcast_c: MPI_Bcast with an MPI_Count count.
pub(crate) fn bcast_c(
    buffer: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::bcast(buffer, count, datatype, root, comm)
}

/// MPI_Ibcast_c: MPI_Ibcast with an MPI_Count count.
pub(crate) fn ibcast_c(
    buffer: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::ibcast(buffer, count, datatype, root, comm, request)
}

/// MPI_Reduce_c: MPI_Reduce with an MPI_Count count.
pub(crate) fn reduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    op: OpDef,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::reduce(sendbuf, recvbuf, count, datatype, op, root, comm)
}

/// MPI_Allreduce_c: MPI_Allreduce with an MPI_Count count.
pub(crate) fn allreduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    op: OpDef,
    comm: CommId,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::allreduce(sendbuf, recvbuf, count, datatype, op, comm)
}

/// MPI_Ireduce_c: MPI_Ireduce with an MPI_Count count.
pub(crate) fn ireduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    op: OpDef,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request)
}

/// MPI_Iallreduce_c: MPI_Iallreduce with an MPI_Count count.
pub(crate) fn iallreduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    op: OpDef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request)
}

/// MPI_Reduce_local_c: MPI_Reduce_local with an MPI_Count count.
pub(crate) fn reduce_local_c(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: MPI_Count,
    datatype: &DtRef,
    op: OpDef,
) -> MpiResult<()> {
    let count = small("count", count)?;
    super::reduce_local(inbuf, inoutbuf, count, datatype, op)
}
