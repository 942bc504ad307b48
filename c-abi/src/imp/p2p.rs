//! Point-to-point: sends in the four modes (blocking, non-blocking, persistent), receives,
//! probes, matched probes, and the attached buffer.

use std::ffi::{c_int, c_void};

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, SendMode};

use super::flag;
use super::request::put_status;
use crate::ffi::*;
use crate::handles::{self as h, err, InfoId};

fn send_mode(
    call: &'static str,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime(call)?;
    // SAFETY: MPI requires `buf` to hold `count` elements of `dt` for the call.
    unsafe {
        r.send(
            call,
            buf as *const u8,
            count as i64,
            dt,
            dest,
            tag,
            comm,
            mode,
        )
    }
}

pub(crate) fn send(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    send_mode(
        "MPI_Send",
        SendMode::Standard,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
    )
}
pub(crate) fn ssend(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    send_mode(
        "MPI_Ssend",
        SendMode::Synchronous,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
    )
}
pub(crate) fn rsend(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    send_mode(
        "MPI_Rsend",
        SendMode::Ready,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
    )
}
pub(crate) fn bsend(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
) -> MpiResult<()> {
    send_mode(
        "MPI_Bsend",
        SendMode::Buffered,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
    )
}

pub(crate) fn recv(
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    source: c_int,
    tag: c_int,
    comm: CommId,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Recv")?;
    // SAFETY: MPI requires room for `count` elements of `dt` at `buf` for the call.
    let st = unsafe {
        r.recv_raw(
            "MPI_Recv",
            buf as *mut u8,
            count as i64,
            dt,
            source,
            tag,
            comm,
        )?
    };
    put_status(status, &st);
    if st.error != 0 {
        return Err(err(
            ErrorClass::Truncate,
            format!(
                "message truncated: {count} elements of {} do not hold the message",
                dt.name()
            ),
        ));
    }
    Ok(())
}

fn isend_mode(
    call: &'static str,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime(call)?;
    // SAFETY: MPI requires `buf` to stay valid and unmodified until the request completes.
    let id = unsafe {
        r.isend(
            call,
            buf as *const u8,
            count as i64,
            dt,
            dest,
            tag,
            comm,
            mode,
        )?
    };
    *req = h::request_handle(id, false);
    Ok(())
}

pub(crate) fn isend(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    isend_mode(
        "MPI_Isend",
        SendMode::Standard,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}
pub(crate) fn issend(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    isend_mode(
        "MPI_Issend",
        SendMode::Synchronous,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}
pub(crate) fn irsend(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    isend_mode(
        "MPI_Irsend",
        SendMode::Ready,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}
pub(crate) fn ibsend(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    isend_mode(
        "MPI_Ibsend",
        SendMode::Buffered,
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}

pub(crate) fn irecv(
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    source: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Irecv")?;
    // SAFETY: MPI requires `buf` to stay valid and untouched until the request completes.
    let id = unsafe {
        r.irecv(
            "MPI_Irecv",
            buf as *mut u8,
            count as i64,
            dt,
            source,
            tag,
            comm,
        )?
    };
    *req = h::request_handle(id, false);
    Ok(())
}

fn persistent(
    call: &'static str,
    mode: Option<SendMode>,
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    peer: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime(call)?;
    // SAFETY: MPI requires `buf` to stay valid for every start of the request until freed.
    let id = unsafe {
        r.persistent(
            call,
            mode,
            buf as *mut u8,
            count as i64,
            dt,
            peer,
            tag,
            comm,
        )?
    };
    *req = h::request_handle(id, true);
    Ok(())
}

pub(crate) fn send_init(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    persistent(
        "MPI_Send_init",
        Some(SendMode::Standard),
        buf as *mut c_void,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}
pub(crate) fn ssend_init(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    persistent(
        "MPI_Ssend_init",
        Some(SendMode::Synchronous),
        buf as *mut c_void,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}
pub(crate) fn rsend_init(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    persistent(
        "MPI_Rsend_init",
        Some(SendMode::Ready),
        buf as *mut c_void,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}
pub(crate) fn bsend_init(
    buf: *const c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    persistent(
        "MPI_Bsend_init",
        Some(SendMode::Buffered),
        buf as *mut c_void,
        count,
        dt,
        dest,
        tag,
        comm,
        req,
    )
}
pub(crate) fn recv_init(
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    source: c_int,
    tag: c_int,
    comm: CommId,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    persistent(
        "MPI_Recv_init",
        None,
        buf,
        count,
        dt,
        source,
        tag,
        comm,
        req,
    )
}

pub(crate) fn sendrecv(
    sbuf: *const c_void,
    scount: c_int,
    stype: &TypeRef,
    dest: c_int,
    stag: c_int,
    rbuf: *mut c_void,
    rcount: c_int,
    rtype: &TypeRef,
    source: c_int,
    rtag: c_int,
    comm: CommId,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Sendrecv")?;
    // SAFETY: MPI requires both buffers valid for the call (and not overlapping).
    let st = unsafe {
        r.sendrecv(
            sbuf as *const u8,
            scount as i64,
            stype,
            dest,
            stag,
            rbuf as *mut u8,
            rcount as i64,
            rtype,
            source,
            rtag,
            comm,
        )?
    };
    put_status(status, &st);
    Ok(())
}

pub(crate) fn sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    stag: c_int,
    source: c_int,
    rtag: c_int,
    comm: CommId,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Sendrecv_replace")?;
    // SAFETY: MPI requires `buf` to hold `count` elements of `dt` for the call.
    let st = unsafe {
        r.sendrecv_replace(
            buf as *mut u8,
            count as i64,
            dt,
            dest,
            stag,
            source,
            rtag,
            comm,
        )?
    };
    put_status(status, &st);
    Ok(())
}

// The work is in buffer.rs (MPI_BUFFER_AUTOMATIC, the communicator and session buffers).
pub(crate) fn buffer_attach(buffer: *mut c_void, size: c_int) -> MpiResult<()> {
    super::process_buffer_attach(buffer, size.into())
}

pub(crate) fn buffer_detach(addr: *mut c_void, size: &mut c_int) -> MpiResult<()> {
    *size = super::process_buffer_detach(addr)? as c_int;
    Ok(())
}

pub(crate) fn buffer_flush() -> MpiResult<()> {
    h::runtime("MPI_Buffer_flush")?.buffer_flush()
}

pub(crate) fn buffer_iflush(request: &mut MPI_Request) -> MpiResult<()> {
    let id = h::runtime("MPI_Buffer_iflush")?.buffer_iflush()?;
    *request = h::request_handle(id, false);
    Ok(())
}

pub(crate) fn probe(
    source: c_int,
    tag: c_int,
    comm: CommId,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let (st, _) = h::runtime("MPI_Probe")?.probe("MPI_Probe", source, tag, comm, false)?;
    put_status(status, &st);
    Ok(())
}

pub(crate) fn iprobe(
    source: c_int,
    tag: c_int,
    comm: CommId,
    f: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let res = h::runtime("MPI_Iprobe")?.iprobe("MPI_Iprobe", source, tag, comm, false)?;
    *f = flag(res.is_some());
    if let Some((st, _)) = res {
        put_status(status, &st);
    }
    Ok(())
}

pub(crate) fn mprobe(
    source: c_int,
    tag: c_int,
    comm: CommId,
    message: &mut MPI_Message,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let (st, m) = h::runtime("MPI_Mprobe")?.probe("MPI_Mprobe", source, tag, comm, true)?;
    *message = h::message_handle(m);
    put_status(status, &st);
    Ok(())
}

pub(crate) fn improbe(
    source: c_int,
    tag: c_int,
    comm: CommId,
    f: &mut c_int,
    message: &mut MPI_Message,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let res = h::runtime("MPI_Improbe")?.iprobe("MPI_Improbe", source, tag, comm, true)?;
    *f = flag(res.is_some());
    if let Some((st, m)) = res {
        *message = h::message_handle(m);
        put_status(status, &st);
    }
    Ok(())
}

pub(crate) fn mrecv(
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    message: &mut MPI_Message,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let m = h::message("message", *message)?;
    let r = h::runtime("MPI_Mrecv")?;
    // SAFETY: MPI requires room for `count` elements of `dt` at `buf`.
    let id = unsafe { r.imrecv("MPI_Mrecv", buf as *mut u8, count as i64, dt, m)? };
    *message = MPI_MESSAGE_NULL;
    let st = r.wait_raw("MPI_Mrecv", id)?;
    put_status(status, &st);
    if st.error != 0 {
        return Err(err(ErrorClass::Truncate, "message truncated"));
    }
    Ok(())
}

pub(crate) fn imrecv(
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    message: &mut MPI_Message,
    req: &mut MPI_Request,
) -> MpiResult<()> {
    let m = h::message("message", *message)?;
    let r = h::runtime("MPI_Imrecv")?;
    // SAFETY: MPI requires `buf` valid and untouched until the request completes.
    let id = unsafe { r.imrecv("MPI_Imrecv", buf as *mut u8, count as i64, dt, m)? };
    *message = MPI_MESSAGE_NULL;
    *req = h::request_handle(id, false);
    Ok(())
}

pub(crate) fn isendrecv(
    sbuf: *const c_void,
    scount: c_int,
    st: &TypeRef,
    dest: c_int,
    stag: c_int,
    rbuf: *mut c_void,
    rcount: c_int,
    rt: &TypeRef,
    source: c_int,
    rtag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Isendrecv")?;
    // SAFETY: MPI requires both buffers to stay valid until the request completes.
    let id = unsafe {
        r.isendrecv(
            sbuf as *const u8,
            scount as i64,
            st,
            dest,
            stag,
            rbuf as *mut u8,
            rcount as i64,
            rt,
            source,
            rtag,
            comm,
        )?
    };
    *request = h::request_handle(id, false);
    Ok(())
}

pub(crate) fn isendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    dt: &TypeRef,
    dest: c_int,
    stag: c_int,
    source: c_int,
    rtag: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Isendrecv_replace")?;
    // SAFETY: MPI requires `buf` to stay valid until the request completes.
    let id = unsafe {
        r.isendrecv_replace(
            buf as *mut u8,
            count as i64,
            dt,
            dest,
            stag,
            source,
            rtag,
            comm,
        )?
    };
    *request = h::request_handle(id, false);
    Ok(())
}

pub(crate) fn psend_init(
    buf: *const c_void,
    partitions: c_int,
    count: MPI_Count,
    dt: &TypeRef,
    dest: c_int,
    tag: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Psend_init")?;
    // SAFETY: MPI requires `buf` to hold partitions × count elements until the request is
    // freed.
    let id = unsafe {
        r.partitioned_init(
            "MPI_Psend_init",
            true,
            buf as *mut u8,
            partitions,
            count,
            dt,
            dest,
            tag,
            comm,
        )?
    };
    *request = h::request_handle(id, true);
    Ok(())
}

pub(crate) fn precv_init(
    buf: *mut c_void,
    partitions: c_int,
    count: MPI_Count,
    dt: &TypeRef,
    source: c_int,
    tag: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Precv_init")?;
    // SAFETY: as in psend_init.
    let id = unsafe {
        r.partitioned_init(
            "MPI_Precv_init",
            false,
            buf as *mut u8,
            partitions,
            count,
            dt,
            source,
            tag,
            comm,
        )?
    };
    *request = h::request_handle(id, true);
    Ok(())
}

fn partitioned_request(request: MPI_Request) -> MpiResult<tsunagi_core::ReqId> {
    h::request("request", request)?
        .ok_or_else(|| err(ErrorClass::Request, "request is MPI_REQUEST_NULL"))
}

pub(crate) fn pready(partition: c_int, request: MPI_Request) -> MpiResult<()> {
    let id = partitioned_request(request)?;
    h::runtime("MPI_Pready")?.pready("MPI_Pready", id, &[partition])
}

pub(crate) fn pready_range(low: c_int, high: c_int, request: MPI_Request) -> MpiResult<()> {
    let id = partitioned_request(request)?;
    if high < low {
        return Err(err(
            ErrorClass::Arg,
            format!("partition_high {high} is below partition_low {low}"),
        ));
    }
    let parts: Vec<c_int> = (low..=high).collect();
    h::runtime("MPI_Pready_range")?.pready("MPI_Pready_range", id, &parts)
}

pub(crate) fn pready_list(
    length: c_int,
    parts: *const c_int,
    request: MPI_Request,
) -> MpiResult<()> {
    let id = partitioned_request(request)?;
    // SAFETY: MPI requires `length` ints at `array_of_partitions`.
    let parts = unsafe { h::slice("array_of_partitions", parts, length as usize)? };
    h::runtime("MPI_Pready_list")?.pready("MPI_Pready_list", id, parts)
}

pub(crate) fn parrived(request: MPI_Request, partition: c_int, f: &mut c_int) -> MpiResult<()> {
    let id = partitioned_request(request)?;
    *f = c_int::from(h::runtime("MPI_Parrived")?.parrived(id, partition)?);
    Ok(())
}
