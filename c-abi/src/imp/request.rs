//! Requests: completion (wait/test families), persistent requests, cancellation, and the
//! status accessors. Non-persistent requests become MPI_REQUEST_NULL when they complete.
//!
//! Requests of non-blocking collectives (see `handles::coll_index`) are schedules of the
//! collectives crate, not core requests: while any is outstanding, every wait and test
//! call (and blocking send, receive and send-receive) polls, advancing all of them, so
//! that arrays mixing both kinds complete and no schedule stalls while the program waits
//! for something else. Freeing or cancelling one is erroneous (MPI-3.1 §5.12).

use std::ffi::c_int;

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{ErrorClass, MpiResult, ReqId, Status};

use super::flag as flag_of;
use crate::ffi::*;
use crate::handles::{self as h, err};
use crate::imp::coll::{advance_all, coll_state, CollState};

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

fn status_bytes(s: &MPI_Status) -> u64 {
    (s.count_lo as u32 as u64) | (((s.count_hi_and_cancelled as u32) >> 1) as u64) << 32
}

fn truncated(s: &Status) -> MpiResult<()> {
    if s.error != 0 {
        let class = ErrorClass::from_code(s.error).unwrap_or(ErrorClass::Other);
        return Err(err(
            class,
            format!("message truncated ({} bytes arrived)", s.bytes),
        ));
    }
    Ok(())
}

/// Decode an array of request handles (core requests only).
fn decode_all(reqs: &[MPI_Request]) -> MpiResult<Vec<Option<ReqId>>> {
    reqs.iter()
        .enumerate()
        .map(|(i, &r)| h::element("array_of_requests", i, |name| h::request(name, r)))
        .collect()
}

/// Whether the polling paths are needed: a non-blocking collective is outstanding (it
/// must progress while the program waits for anything) or named in `reqs`.
fn colls_involved(reqs: &[MPI_Request]) -> bool {
    h::NCOLLS.load(std::sync::atomic::Ordering::Acquire) > 0
        || reqs.iter().any(|&r| h::coll_index(r).is_some())
}

/// Core request ids by position, and (position, slot) of the collective requests.
type Mixed = (Vec<Option<ReqId>>, Vec<(usize, usize)>);

/// Decode an array mixing core and collective requests: core ids (None for
/// MPI_REQUEST_NULL and for collective requests) and the collective slots by position.
fn decode_mixed(reqs: &[MPI_Request]) -> MpiResult<Mixed> {
    let mut ids = Vec::with_capacity(reqs.len());
    let mut colls = Vec::new();
    for (i, &r) in reqs.iter().enumerate() {
        if let Some(c) = h::coll_index(r) {
            colls.push((i, c));
            ids.push(None);
        } else {
            ids.push(h::element("array_of_requests", i, |name| {
                h::request(name, r)
            })?);
        }
    }
    Ok((ids, colls))
}

/// Poll until `f` gives a value, advancing every outstanding non-blocking collective on
/// each round (the core requests progress inside the core's test calls, or on the
/// progress threads).
fn poll_until<T>(
    r: &tsunagi_core::Runtime,
    mut f: impl FnMut() -> MpiResult<Option<T>>,
) -> MpiResult<T> {
    let mut spins = 0u32;
    loop {
        advance_all(r);
        if let Some(v) = f()? {
            return Ok(v);
        }
        spins = spins.saturating_add(1);
        if spins > 16 {
            std::thread::yield_now();
        }
    }
}

/// Collect a completed (or failed) collective request: its handle becomes
/// MPI_REQUEST_NULL.
fn retire_coll(slot: usize, handle: &mut MPI_Request, state: CollState) -> MpiResult<()> {
    h::remove_coll(slot);
    *handle = MPI_REQUEST_NULL;
    match state {
        CollState::Failed(e) => Err(e),
        _ => Ok(()),
    }
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
    if let Some(slot) = h::coll_index(*request) {
        let r = h::runtime("MPI_Wait")?;
        let st = poll_until(r, || {
            Ok(match coll_state(slot)? {
                CollState::Pending => None,
                s => Some(s),
            })
        })?;
        put_status(status, &Status::EMPTY);
        return retire_coll(slot, request, st);
    }
    let Some(id) = h::request("request", *request)? else {
        put_status(status, &Status::EMPTY);
        return Ok(());
    };
    let r = h::runtime("MPI_Wait")?;
    if colls_involved(&[]) {
        // Complete it while advancing the collectives; the wait below then returns at once.
        poll_until(r, || r.request_get_status(id).map(|s| s.map(|_| ())))?;
    }
    let res = r.wait_raw("MPI_Wait", id);
    retire(request);
    let st = res?;
    put_status(status, &st);
    truncated(&st)
}

pub(crate) fn test(
    request: &mut MPI_Request,
    f: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    if let Some(slot) = h::coll_index(*request) {
        advance_all(h::runtime("MPI_Test")?);
        return match coll_state(slot)? {
            CollState::Pending => {
                *f = 0;
                Ok(())
            }
            st => {
                *f = 1;
                put_status(status, &Status::EMPTY);
                retire_coll(slot, request, st)
            }
        };
    }
    let Some(id) = h::request("request", *request)? else {
        *f = 1;
        put_status(status, &Status::EMPTY);
        return Ok(());
    };
    let r = h::runtime("MPI_Test")?;
    advance_all(r);
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
            if e.class == ErrorClass::Truncate {
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
    if colls_involved(reqs) {
        let (ids, colls) = decode_mixed(reqs)?;
        poll_until(r, || {
            for &(_, c) in &colls {
                if let CollState::Pending = coll_state(c)? {
                    return Ok(None);
                }
            }
            for id in ids.iter().flatten() {
                if r.request_get_status(*id)?.is_none() {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })?;
        let mut first_err = None;
        for &(i, c) in &colls {
            let st = coll_state(c)?;
            if let Err(e) = retire_coll(c, &mut reqs[i], st) {
                first_err.get_or_insert(e);
            }
        }
        let sts = r.waitall("MPI_Waitall", &ids)?;
        reqs.iter_mut().for_each(retire);
        if let Some(e) = first_err {
            return Err(e);
        }
        return finish_all(&sts, statuses(stats, n)?);
    }
    let ids = decode_all(reqs)?;
    let sts = r.waitall("MPI_Waitall", &ids)?;
    reqs.iter_mut().for_each(retire);
    finish_all(&sts, statuses(stats, n)?)
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
    advance_all(r);
    let (ids, colls) = decode_mixed(reqs)?;
    for &(_, c) in &colls {
        if let CollState::Pending = coll_state(c)? {
            *f = 0;
            return Ok(());
        }
    }
    let res = r.testall("MPI_Testall", &ids)?;
    if res.is_some() {
        let mut first_err = None;
        for &(i, c) in &colls {
            let st = coll_state(c)?;
            if let Err(e) = retire_coll(c, &mut reqs[i], st) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            reqs.iter_mut().for_each(retire);
            *f = 1;
            return Err(e);
        }
    }
    match res {
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
    if colls_involved(reqs) {
        let (ids, colls) = decode_mixed(reqs)?;
        let (i, st) = poll_until(r, || any_mixed(r, "MPI_Waitany", &ids, &colls))?;
        return finish_any(i, st, reqs, &colls, index, status);
    }
    let ids = decode_all(reqs)?;
    match r.waitany("MPI_Waitany", &ids)? {
        Some((i, st)) => {
            *index = i as c_int;
            retire(&mut reqs[i]);
            put_status(status, &st);
            truncated(&st)
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
    if colls_involved(reqs) {
        advance_all(r);
        let (ids, colls) = decode_mixed(reqs)?;
        return match any_mixed(r, "MPI_Testany", &ids, &colls)? {
            None => {
                *index = MPI_UNDEFINED;
                *f = 0;
                Ok(())
            }
            Some((i, st)) => {
                *f = 1;
                finish_any(i, st, reqs, &colls, index, status)
            }
        };
    }
    let ids = decode_all(reqs)?;
    match r.testany("MPI_Testany", &ids)? {
        Ok(Some((i, st))) => {
            *index = i as c_int;
            *f = 1;
            retire(&mut reqs[i]);
            put_status(status, &st);
            truncated(&st)
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

/// One completed request among a mixed array (collected), `Some((None, _))` when no
/// request is active (MPI_UNDEFINED), None when none is complete yet.
#[allow(clippy::type_complexity)]
fn any_mixed(
    r: &tsunagi_core::Runtime,
    call: &str,
    ids: &[Option<ReqId>],
    colls: &[(usize, usize)],
) -> MpiResult<Option<(Option<usize>, Result<Status, CollState>)>> {
    for &(i, c) in colls {
        match coll_state(c)? {
            CollState::Pending => {}
            st => return Ok(Some((Some(i), Err(st)))),
        }
    }
    match r.testany(call, ids)? {
        Ok(Some((i, st))) => Ok(Some((Some(i), Ok(st)))),
        Ok(None) => Ok(None),
        Err(()) if colls.is_empty() => Ok(Some((None, Ok(Status::EMPTY)))),
        Err(()) => Ok(None),
    }
}

/// Store the outcome of [`any_mixed`] (a core status, or a collective's state).
#[allow(clippy::type_complexity)]
fn finish_any(
    i: Option<usize>,
    st: Result<Status, CollState>,
    reqs: &mut [MPI_Request],
    colls: &[(usize, usize)],
    index: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let Some(i) = i else {
        *index = MPI_UNDEFINED;
        put_status(status, &Status::EMPTY);
        return Ok(());
    };
    *index = i as c_int;
    match st {
        Ok(st) => {
            retire(&mut reqs[i]);
            put_status(status, &st);
            truncated(&st)
        }
        Err(cs) => {
            put_status(status, &Status::EMPTY);
            let slot = colls
                .iter()
                .find(|(k, _)| *k == i)
                .map(|&(_, c)| c)
                .expect("a collective position");
            retire_coll(slot, &mut reqs[i], cs)
        }
    }
}

/// The completed requests among a mixed array (collectives collected here, core ones
/// by the core); None when no request is active.
fn some_mixed(
    r: &tsunagi_core::Runtime,
    call: &str,
    ids: &[Option<ReqId>],
    colls: &[(usize, usize)],
    reqs: &mut [MPI_Request],
) -> MpiResult<Option<Vec<(usize, Status)>>> {
    let mut done = Vec::new();
    for &(i, c) in colls {
        match coll_state(c)? {
            CollState::Pending => {}
            CollState::Done => {
                h::remove_coll(c);
                reqs[i] = MPI_REQUEST_NULL;
                done.push((i, Status::EMPTY));
            }
            CollState::Failed(e) => {
                h::remove_coll(c);
                reqs[i] = MPI_REQUEST_NULL;
                return Err(e);
            }
        }
    }
    match r.testsome(call, ids)? {
        Some(d) => done.extend(d),
        None if colls.is_empty() => return Ok(None),
        None => {}
    }
    done.sort_by_key(|(i, _)| *i);
    Ok(Some(done))
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
    if colls_involved(reqs) {
        let (ids, colls) = decode_mixed(reqs)?;
        let done = poll_until(r, || {
            let d = some_mixed(r, "MPI_Waitsome", &ids, &colls, reqs)?;
            Ok(match &d {
                Some(v) if v.is_empty() => None,
                _ => Some(d),
            })
        })?;
        return some_done(done, reqs, outcount, indices, stats);
    }
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
    if colls_involved(reqs) {
        advance_all(r);
        let (ids, colls) = decode_mixed(reqs)?;
        let done = some_mixed(r, "MPI_Testsome", &ids, &colls, reqs)?;
        return some_done(done, reqs, outcount, indices, stats);
    }
    let ids = decode_all(reqs)?;
    let done = r.testsome("MPI_Testsome", &ids)?;
    some_done(done, reqs, outcount, indices, stats)
}

pub(crate) fn start(request: &mut MPI_Request) -> MpiResult<()> {
    if h::coll_index(*request).is_some() {
        return Err(err(
            ErrorClass::Request,
            "request is not a persistent request",
        ));
    }
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
    if h::coll_index(*request).is_some() {
        // MPI-3.1 §5.12 (and MPICH refuses it too).
        return Err(err(
            ErrorClass::Request,
            "freeing a non-blocking collective request is erroneous (complete it instead)",
        ));
    }
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
    if let Some(slot) = h::coll_index(request) {
        advance_all(h::runtime("MPI_Request_get_status")?);
        *f = flag_of(!matches!(coll_state(slot)?, CollState::Pending));
        if *f != 0 {
            put_status(status, &Status::EMPTY);
        }
        return Ok(());
    }
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
    if h::coll_index(*request).is_some() {
        return Err(err(
            ErrorClass::Request,
            "a non-blocking collective request cannot be cancelled",
        ));
    }
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
