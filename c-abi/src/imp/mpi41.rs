//! The calls MPI 4.1 added that have no better home: the status fields through calls
//! (MPI_Status_get/set_source/tag/error), the status of several requests without
//! completing them (MPI_Request_get_status_any/all/some), the value-index pair types
//! (MPI_Type_get_value_index), what this process runs on (MPI_Get_hw_resource_info), and
//! MPI 4.0's MPI_Status_set_elements_c (MPI_Session_c2f/f2c sit with the other handle conversions).

use std::ffi::c_int;

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{ErrorClass, MpiResult, ReqId, Status};

use super::request::{fill_status, put_status};
use crate::ffi::*;
use crate::handles::{self as h, err};

fn status_arg(status: Option<&mut MPI_Status>) -> MpiResult<&mut MPI_Status> {
    status.ok_or_else(|| {
        err(
            ErrorClass::Arg,
            "argument status is NULL or MPI_STATUS_IGNORE",
        )
    })
}

pub(crate) fn status_get_source(status: &MPI_Status, source: &mut c_int) -> MpiResult<()> {
    *source = status.MPI_SOURCE;
    Ok(())
}

pub(crate) fn status_set_source(status: Option<&mut MPI_Status>, source: c_int) -> MpiResult<()> {
    status_arg(status)?.MPI_SOURCE = source;
    Ok(())
}

pub(crate) fn status_get_tag(status: &MPI_Status, tag: &mut c_int) -> MpiResult<()> {
    *tag = status.MPI_TAG;
    Ok(())
}

pub(crate) fn status_set_tag(status: Option<&mut MPI_Status>, tag: c_int) -> MpiResult<()> {
    status_arg(status)?.MPI_TAG = tag;
    Ok(())
}

pub(crate) fn status_get_error(status: &MPI_Status, error: &mut c_int) -> MpiResult<()> {
    *error = status.MPI_ERROR;
    Ok(())
}

pub(crate) fn status_set_error(status: Option<&mut MPI_Status>, error: c_int) -> MpiResult<()> {
    status_arg(status)?.MPI_ERROR = error;
    Ok(())
}

pub(crate) fn status_set_elements_c(
    status: Option<&mut MPI_Status>,
    dtype: &TypeRef,
    count: MPI_Count,
) -> MpiResult<()> {
    super::status_set_elements_x(status, dtype, count)
}

/// The requests of a `Request_get_status_*` call (const: nothing is freed or changed).
fn decode(count: c_int, reqs: *const MPI_Request) -> MpiResult<Vec<Option<ReqId>>> {
    // SAFETY: MPI requires an array of `count` requests.
    let reqs = unsafe { h::slice("array_of_requests", reqs, count as usize)? };
    reqs.iter()
        .enumerate()
        .map(|(i, &r)| h::element("array_of_requests", i, |name| h::request(name, r)))
        .collect()
}

/// The error a single completed request reports through the call (as MPI_Test would).
fn single_error(s: &Status) -> MpiResult<()> {
    if s.error == 0 {
        return Ok(());
    }
    let class = ErrorClass::from_code(s.error).unwrap_or(ErrorClass::Other);
    Err(err(class, "the request failed (its status has the error)"))
}

pub(crate) fn request_get_status_any(
    count: c_int,
    reqs: *const MPI_Request,
    index: &mut c_int,
    flag: &mut c_int,
    status: Option<&mut MPI_Status>,
) -> MpiResult<()> {
    let ids = decode(count, reqs)?;
    let peeked = h::runtime("MPI_Request_get_status_any")?
        .request_get_statuses("MPI_Request_get_status_any", &ids)?;
    *index = MPI_UNDEFINED;
    if peeked.iter().all(Option::is_none) {
        // No active request: flag true and the empty status, as MPI_Testany.
        *flag = 1;
        put_status(status, &Status::EMPTY);
        return Ok(());
    }
    match peeked
        .iter()
        .enumerate()
        .find_map(|(i, p)| p.flatten().map(|s| (i, s)))
    {
        Some((i, st)) => {
            *flag = 1;
            *index = i as c_int;
            put_status(status, &st);
            single_error(&st)
        }
        None => {
            *flag = 0;
            Ok(())
        }
    }
}

pub(crate) fn request_get_status_all(
    count: c_int,
    reqs: *const MPI_Request,
    flag: &mut c_int,
    stats: *mut MPI_Status,
) -> MpiResult<()> {
    let ids = decode(count, reqs)?;
    let peeked = h::runtime("MPI_Request_get_status_all")?
        .request_get_statuses("MPI_Request_get_status_all", &ids)?;
    if peeked.iter().any(|p| matches!(p, Some(None))) {
        *flag = 0;
        return Ok(());
    }
    *flag = 1;
    let sts: Vec<Status> = peeked
        .iter()
        .map(|p| p.flatten().unwrap_or(Status::EMPTY))
        .collect();
    put_all(&sts, stats)
}

pub(crate) fn request_get_status_some(
    incount: c_int,
    reqs: *const MPI_Request,
    outcount: &mut c_int,
    indices: *mut c_int,
    stats: *mut MPI_Status,
) -> MpiResult<()> {
    let ids = decode(incount, reqs)?;
    let peeked = h::runtime("MPI_Request_get_status_some")?
        .request_get_statuses("MPI_Request_get_status_some", &ids)?;
    if peeked.iter().all(Option::is_none) {
        *outcount = MPI_UNDEFINED;
        return Ok(());
    }
    let done: Vec<(usize, Status)> = peeked
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.flatten().map(|s| (i, s)))
        .collect();
    *outcount = done.len() as c_int;
    // SAFETY: MPI requires room for `incount` indices (done.len() <= incount).
    let idx = unsafe { h::slice_mut("array_of_indices", indices, done.len())? };
    for (k, (i, _)) in done.iter().enumerate() {
        idx[k] = *i as c_int;
    }
    let sts: Vec<Status> = done.iter().map(|(_, s)| *s).collect();
    put_all(&sts, stats)
}

/// The statuses of a multiple call; MPI_ERR_IN_STATUS if any failed (then every MPI_ERROR
/// field is set, as MPI_Testall sets them).
fn put_all(sts: &[Status], stats: *mut MPI_Status) -> MpiResult<()> {
    let failed = sts.iter().any(|s| s.error != 0);
    if !(stats.is_null() || stats as usize == 1) {
        // SAFETY: MPI requires an array of a status per reported request unless
        // MPI_STATUSES_IGNORE.
        let out = unsafe { h::slice_mut("array_of_statuses", stats, sts.len())? };
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

/// The predefined datatype named `name`.
fn builtin(name: &str) -> MPI_Datatype {
    BUILTIN_TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| *h)
        .expect("a predefined datatype")
}

pub(crate) fn type_get_value_index(
    value: MPI_Datatype,
    index: MPI_Datatype,
    pair: &mut MPI_Datatype,
) -> MpiResult<()> {
    h::dtype("value_type", value)?;
    h::dtype("index_type", index)?;
    let is = |h: MPI_Datatype, name: &str| h == builtin(name);
    // The predefined pair types of MPI_MINLOC/MPI_MAXLOC (MPI 4.1 §6.9.4): C's pairs with
    // an int index, Fortran's pairs of two equal types. No other pair is predefined, and
    // then the answer is MPI_DATATYPE_NULL.
    let c_pairs = [
        ("MPI_FLOAT", "MPI_FLOAT_INT"),
        ("MPI_DOUBLE", "MPI_DOUBLE_INT"),
        ("MPI_LONG", "MPI_LONG_INT"),
        ("MPI_SHORT", "MPI_SHORT_INT"),
        ("MPI_INT", "MPI_2INT"),
        ("MPI_LONG_DOUBLE", "MPI_LONG_DOUBLE_INT"),
    ];
    let fortran_pairs = [
        ("MPI_INTEGER", "MPI_2INTEGER"),
        ("MPI_REAL", "MPI_2REAL"),
        ("MPI_DOUBLE_PRECISION", "MPI_2DOUBLE_PRECISION"),
    ];
    *pair = MPI_DATATYPE_NULL;
    if is(index, "MPI_INT") {
        if let Some((_, p)) = c_pairs.iter().find(|(v, _)| is(value, v)) {
            *pair = builtin(p);
        }
    } else if value == index {
        if let Some((_, p)) = fortran_pairs.iter().find(|(v, _)| is(value, v)) {
            *pair = builtin(p);
        }
    }
    Ok(())
}

/// MPI_Get_hw_resource_info: a new info object with what this process runs on, as the
/// operating system reports it now: the hardware resource type MPI_COMM_TYPE_HW_GUIDED and
/// MPI_COMM_TYPE_RESOURCE_GUIDED know (`mpi_hw_resource_type`), the host, and the
/// processors this process may run on (its affinity) beside those online.
pub(crate) fn get_hw_resource_info(info: &mut MPI_Info) -> MpiResult<()> {
    let mut keys: Vec<(String, String)> =
        vec![("mpi_hw_resource_type".into(), "mpi_shared_memory".into())];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        keys.push(("tsunagi_host".into(), host.trim().to_string()));
    }
    if let Ok(n) = std::thread::available_parallelism() {
        keys.push(("tsunagi_cpus_allowed".into(), n.to_string()));
    }
    if let Ok(online) = std::fs::read_to_string("/sys/devices/system/cpu/online") {
        keys.push(("tsunagi_cpus_online".into(), online.trim().to_string()));
    }
    *info = h::new_info(keys);
    Ok(())
}
