//! Requests: completion (wait/test families), persistent requests, cancellation, and the
//! status accessors. Non-persistent requests become MPI_REQUEST_NULL when they complete.
//!
//! Requests of non-blocking collectives are requests of the core's one request table too
//! (their schedules advance on the core's one progress path, see
//! `tsunagi_core::runtime::Schedule`), so every call here treats all requests alike.
//! Freeing or cancelling a collective's request is erroneous (MPI-3.1 §5.12); the core
//! refuses it.

use std::ffi::c_int;

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{ErrorClass, MpiResult, ReqId, Status};

use crate::ffi::*;
use crate::handles::{self as h, err};

/// Store a core status in a C status (MPICH's layout: the count's high bits shifted left
/// by one beside the cancelled bit). Single-completion calls leave MPI_ERROR as it was,
/// as MPICH does (MPI sets it only for MPI_ERR_IN_STATUS); the empty status has
/// MPI_SUCCESS.
pub(crate) fn put_status(out: Option<&mut MPI_Status>, s: &Status) {
    if let Some(o) = out {
        fill_status(o, s, *s == Status::EMPTY);
    }
}

pub(crate) fn fill_status(o: &mut MPI_Status, s: &Status, set_error: bool) {
    let bytes = s.bytes as u64;
    o.count_lo = bytes as u32 as c_int;
    o.count_hi_and_cancelled = (((bytes >> 32) << 1) as u32 | u32::from(s.cancelled)) as c_int;
    o.MPI_SOURCE = s.source;
    o.MPI_TAG = s.tag;
    if set_error {
        o.MPI_ERROR = s.error;
    }
}

/// A C status as a core status (MPI_ERROR left out).
pub(crate) fn status_from_c(s: &MPI_Status) -> Status {
    Status {
        source: s.MPI_SOURCE,
        tag: s.MPI_TAG,
        error: 0,
        bytes: status_bytes(s) as usize,
        cancelled: s.count_hi_and_cancelled & 1 != 0,
    }
}

pub(crate) fn status_bytes(s: &MPI_Status) -> u64 {
    (s.count_lo as u32 as u64) | (((s.count_hi_and_cancelled as u32) >> 1) as u64) << 32
}

/// The error a completed request reports: a truncation, or the failure of a
/// non-blocking collective (with its message, from the core).
fn completion_error(r: &tsunagi_core::Runtime, id: Option<ReqId>, s: &Status) -> MpiResult<()> {
    if s.error == 0 {
        return Ok(());
    }
    let class = ErrorClass::from_code(s.error).unwrap_or(ErrorClass::Other);
    if class == ErrorClass::Truncate {
        return Err(err(
            class,
            format!("message truncated ({} bytes arrived)", s.bytes),
        ));
    }
    Err(id
        .and_then(|id| r.schedule_error(id))
        .unwrap_or_else(|| err(class, "the operation failed".to_string())))
}

/// Decode an array of request handles (core requests only).
fn decode_all(reqs: &[MPI_Request]) -> MpiResult<Vec<Option<ReqId>>> {
    reqs.iter()
        .enumerate()
        .map(|(i, &r)| h::element("array_of_requests", i, |name| h::request(name, r)))
        .collect()
}

/// After completion: a non-persistent request's handle becomes MPI_REQUEST_NULL.
fn retire(r: &mut MPI_Request) {
    if !h::is_persistent(*r) {
        *r = MPI_REQUEST_NULL;
    }
}

/// The statuses array of the multiple-completion calls (None for MPI_STATUSES_IGNORE).
fn statuses<'a>(p: *mut MPI_Status, n: usize) -> MpiResult<Option<&'a mut [MPI_Status]>> {
    if p as usize == 1 || p.is_null() {
        return Ok(None);
    }
    // SAFETY: MPI requires an array of `n` statuses unless MPI_STATUSES_IGNORE.
    unsafe { h::slice_mut("array_of_statuses", p, n) }.map(Some)
}

pub(crate) fn wait(request: &mut MPI_Request, status: Option<&mut MPI_Status>) -> MpiResult<()> {
    let Some(id) = h::request("request", *request)? else {
        put_status(status, &Status::EMPTY);
        return Ok(());
    };
    let r = h::runtime("MPI_Wait")?;
    let res = r.wait_raw("MPI_Wait", id);
    retire(request);
    let st = res?;
    put_status(status, &st);
    completion_error(r, Some(id), &st)
}

pub(crate) fn test(
    request: &mut MPI_Request,
    f: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let Some(id) = h::request("request", *request)? else {
        *f = 1;
        put_status(status, &Status::EMPTY);
        return Ok(());
    };
    let r = h::runtime("MPI_Test")?;
    match r.test("MPI_Test", id) {
        Ok(Some(st)) => {
            *f = 1;
            retire(request);
            put_status(status, &st);
            Ok(())
        }
        Ok(None) => {
            *f = 0;
            Ok(())
        }
        Err(e) => {
            // A truncated receive or a failed collective was collected all the same; an
            // invalid request (MPI_ERR_REQUEST) was not.
            if e.class != ErrorClass::Request {
                *f = 1;
                retire(request);
            }
            Err(e)
        }
    }
}

/// Store the statuses of a multiple completion; MPI_ERR_IN_STATUS if any failed (then
/// every MPI_ERROR field is set, otherwise none is, as in MPICH).
fn finish_all(sts: &[Status], out: Option<&mut [MPI_Status]>) -> MpiResult<()> {
    let failed = sts.iter().any(|s| s.error != 0);
    if let Some(out) = out {
        for (o, s) in out.iter_mut().zip(sts) {
            fill_status(o, s, failed);
        }
    }
    if failed {
        return Err(err(
            ErrorClass::InStatus,
            "a request failed (see the statuses)",
        ));
    }
    Ok(())
}

pub(crate) fn waitall(
    count: c_int,
    reqs: *mut MPI_Request,
    stats: *mut MPI_Status,
) -> MpiResult<()> {
    let n = count as usize;
    // SAFETY: MPI requires an array of `count` requests.
    let reqs = unsafe { h::slice_mut("array_of_requests", reqs, n)? };
    let r = h::runtime("MPI_Waitall")?;
    // Every handle is checked before anything is collected; then the core reads them from
    // the caller's array and the statuses go straight into the caller's array (no copies,
    // no allocation).
    if !reqs.iter().all(|&q| h::is_request(q)) {
        for (i, &q) in reqs.iter().enumerate() {
            h::element("array_of_requests", i, |name| h::request(name, q))?;
        }
    }
    let mut out = statuses(stats, n)?;
    // Indices of failed requests (rare): MPI_ERR_IN_STATUS then sets every MPI_ERROR.
    let mut failed: Vec<usize> = Vec::new();
    r.waitall_with(
        "MPI_Waitall",
        n,
        |i| h::request("array_of_requests", reqs[i]).ok().flatten(),
        |i, st| {
            if st.error != 0 {
                failed.push(i);
            }
            if let Some(o) = out.as_deref_mut() {
                fill_status(&mut o[i], &st, st.error != 0);
            }
        },
    )?;
    reqs.iter_mut().for_each(retire);
    if failed.is_empty() {
        return Ok(());
    }
    if let Some(o) = out {
        for (i, s) in o.iter_mut().enumerate() {
            if !failed.contains(&i) {
                s.MPI_ERROR = 0;
            }
        }
    }
    Err(err(
        ErrorClass::InStatus,
        "a request failed (see the statuses)",
    ))
}

pub(crate) fn testall(
    count: c_int,
    reqs: *mut MPI_Request,
    f: &mut c_int,
    stats: *mut MPI_Status,
) -> MpiResult<()> {
    let n = count as usize;
    // SAFETY: MPI requires an array of `count` requests.
    let reqs = unsafe { h::slice_mut("array_of_requests", reqs, n)? };
    let r = h::runtime("MPI_Testall")?;
    let ids = decode_all(reqs)?;
    match r.testall("MPI_Testall", &ids)? {
        Some(sts) => {
            *f = 1;
            reqs.iter_mut().for_each(retire);
            finish_all(&sts, statuses(stats, n)?)
        }
        None => {
            *f = 0;
            Ok(())
        }
    }
}

pub(crate) fn waitany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    // SAFETY: MPI requires an array of `count` requests.
    let reqs = unsafe { h::slice_mut("array_of_requests", reqs, count as usize)? };
    let r = h::runtime("MPI_Waitany")?;
    let ids = decode_all(reqs)?;
    match r.waitany("MPI_Waitany", &ids)? {
        Some((i, st)) => {
            *index = i as c_int;
            retire(&mut reqs[i]);
            put_status(status, &st);
            completion_error(r, ids[i], &st)
        }
        None => {
            *index = MPI_UNDEFINED;
            put_status(status, &Status::EMPTY);
            Ok(())
        }
    }
}

pub(crate) fn testany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: &mut c_int,
    f: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    // SAFETY: MPI requires an array of `count` requests.
    let reqs = unsafe { h::slice_mut("array_of_requests", reqs, count as usize)? };
    let r = h::runtime("MPI_Testany")?;
    let ids = decode_all(reqs)?;
    match r.testany("MPI_Testany", &ids)? {
        Ok(Some((i, st))) => {
            *index = i as c_int;
            *f = 1;
            retire(&mut reqs[i]);
            put_status(status, &st);
            completion_error(r, ids[i], &st)
        }
        Ok(None) => {
            *index = MPI_UNDEFINED;
            *f = 0;
            Ok(())
        }
        Err(()) => {
            *index = MPI_UNDEFINED;
            *f = 1;
            put_status(status, &Status::EMPTY);
            Ok(())
        }
    }
}

fn some_done(
    done: Option<Vec<(usize, Status)>>,
    reqs: &mut [MPI_Request],
    outcount: &mut c_int,
    indices: *mut c_int,
    stats: *mut MPI_Status,
) -> MpiResult<()> {
    let Some(done) = done else {
        *outcount = MPI_UNDEFINED;
        return Ok(());
    };
    *outcount = done.len() as c_int;
    // SAFETY: MPI requires room for `incount` indices (done.len() <= incount).
    let idx = unsafe { h::slice_mut("array_of_indices", indices, done.len())? };
    let mut sts = Vec::with_capacity(done.len());
    for (k, (i, st)) in done.iter().enumerate() {
        idx[k] = *i as c_int;
        retire(&mut reqs[*i]);
        sts.push(*st);
    }
    finish_all(&sts, statuses(stats, done.len())?)
}

pub(crate) fn waitsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: &mut c_int,
    indices: *mut c_int,
    stats: *mut MPI_Status,
) -> MpiResult<()> {
    // SAFETY: MPI requires an array of `incount` requests.
    let reqs = unsafe { h::slice_mut("array_of_requests", reqs, incount as usize)? };
    let r = h::runtime("MPI_Waitsome")?;
    let ids = decode_all(reqs)?;
    let done = r.waitsome("MPI_Waitsome", &ids)?;
    some_done(done, reqs, outcount, indices, stats)
}

pub(crate) fn testsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: &mut c_int,
    indices: *mut c_int,
    stats: *mut MPI_Status,
) -> MpiResult<()> {
    // SAFETY: MPI requires an array of `incount` requests.
    let reqs = unsafe { h::slice_mut("array_of_requests", reqs, incount as usize)? };
    let r = h::runtime("MPI_Testsome")?;
    let ids = decode_all(reqs)?;
    let done = r.testsome("MPI_Testsome", &ids)?;
    some_done(done, reqs, outcount, indices, stats)
}

pub(crate) fn start(request: &mut MPI_Request) -> MpiResult<()> {
    let id = h::request("request", *request)?
        .ok_or_else(|| err(ErrorClass::Request, "request is MPI_REQUEST_NULL"))?;
    if !h::is_persistent(*request) {
        return Err(err(
            ErrorClass::Request,
            "request is not a persistent request",
        ));
    }
    h::runtime("MPI_Start")?.start(id)
}

pub(crate) fn startall(count: c_int, reqs: *mut MPI_Request) -> MpiResult<()> {
    // SAFETY: MPI requires an array of `count` requests.
    let reqs = unsafe { h::slice_mut("array_of_requests", reqs, count as usize)? };
    for r in reqs.iter_mut() {
        start(r)?;
    }
    Ok(())
}

pub(crate) fn request_free(request: &mut MPI_Request) -> MpiResult<()> {
    let id = h::request("request", *request)?
        .ok_or_else(|| err(ErrorClass::Request, "request is MPI_REQUEST_NULL"))?;
    h::runtime("MPI_Request_free")?.request_free(id)?;
    *request = MPI_REQUEST_NULL;
    Ok(())
}

pub(crate) fn request_get_status(
    request: MPI_Request,
    f: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let Some(id) = h::request("request", request)? else {
        *f = 1;
        put_status(status, &Status::EMPTY);
        return Ok(());
    };
    match h::runtime("MPI_Request_get_status")?.request_get_status(id)? {
        Some(st) => {
            *f = 1;
            put_status(status, &st);
        }
        None => *f = 0,
    }
    Ok(())
}

pub(crate) fn cancel(request: &mut MPI_Request) -> MpiResult<()> {
    let id = h::request("request", *request)?
        .ok_or_else(|| err(ErrorClass::Request, "request is MPI_REQUEST_NULL"))?;
    h::runtime("MPI_Cancel")?.cancel(id)
}

pub(crate) fn test_cancelled(status: &MPI_Status, f: &mut c_int) -> MpiResult<()> {
    *f = status.count_hi_and_cancelled & 1;
    Ok(())
}

pub(crate) fn get_count(status: &MPI_Status, dtype: &TypeRef, count: &mut c_int) -> MpiResult<()> {
    let (n, _) = dtype.count_for_bytes(status_bytes(status) as usize);
    *count = match n {
        Some(n) if n <= c_int::MAX as usize => n as c_int,
        _ => MPI_UNDEFINED,
    };
    Ok(())
}

fn elements(status: &MPI_Status, dtype: &TypeRef) -> i64 {
    let bytes = status_bytes(status) as usize;
    if dtype.size() == 0 {
        return 0;
    }
    dtype.count_for_bytes(bytes).1 as i64
}

pub(crate) fn get_elements(
    status: &MPI_Status,
    dtype: &TypeRef,
    count: &mut c_int,
) -> MpiResult<()> {
    let n = elements(status, dtype);
    *count = if n > c_int::MAX as i64 {
        MPI_UNDEFINED
    } else {
        n as c_int
    };
    Ok(())
}

pub(crate) fn get_elements_x(
    status: &MPI_Status,
    dtype: &TypeRef,
    count: &mut MPI_Count,
) -> MpiResult<()> {
    *count = elements(status, dtype);
    Ok(())
}

fn set_elements(status: &mut MPI_Status, dtype: &TypeRef, count: i64) {
    let per = dtype.basic_elements().max(1) as i64;
    let bytes = (count * dtype.size() as i64 / per) as u64;
    let cancelled = status.count_hi_and_cancelled & 1;
    status.count_lo = bytes as u32 as c_int;
    status.count_hi_and_cancelled = (((bytes >> 32) << 1) as u32) as c_int | cancelled;
}

pub(crate) fn status_set_elements(
    status: Option<&mut MPI_Status>,
    dtype: &TypeRef,
    count: c_int,
) -> MpiResult<()> {
    let s = status.ok_or_else(|| {
        err(
            ErrorClass::Arg,
            "argument status is NULL or MPI_STATUS_IGNORE",
        )
    })?;
    set_elements(s, dtype, count as i64);
    Ok(())
}

pub(crate) fn status_set_elements_x(
    status: Option<&mut MPI_Status>,
    dtype: &TypeRef,
    count: MPI_Count,
) -> MpiResult<()> {
    let s = status.ok_or_else(|| {
        err(
            ErrorClass::Arg,
            "argument status is NULL or MPI_STATUS_IGNORE",
        )
    })?;
    set_elements(s, dtype, count);
    Ok(())
}

pub(crate) fn status_set_cancelled(status: Option<&mut MPI_Status>, f: c_int) -> MpiResult<()> {
    let s = status.ok_or_else(|| {
        err(
            ErrorClass::Arg,
            "argument status is NULL or MPI_STATUS_IGNORE",
        )
    })?;
    s.count_hi_and_cancelled = (s.count_hi_and_cancelled & !1) | c_int::from(f != 0);
    Ok(())
}
