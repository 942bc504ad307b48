//! Info objects: ordered key/value pairs kept by the C ABI (the core takes none).

use std::ffi::{c_char, c_int};

use tsunagi_core::{ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err, lock, InfoId, INFOS};

fn check_key(key: &str) -> MpiResult<()> {
    if key.is_empty() || key.len() > MPI_MAX_INFO_KEY {
        return Err(err(
            ErrorClass::InfoKey,
            format!("key \"{key}\" is empty or longer than MPI_MAX_INFO_KEY"),
        ));
    }
    Ok(())
}

/// Run `f` on the pairs of an info object (MPI_INFO_ENV is empty).
fn with<T>(i: InfoId, f: impl FnOnce(&[(String, String)]) -> T) -> T {
    match i.0 {
        None => f(&[]),
        Some(ix) => f(lock(&INFOS).get(ix).map(|v| v.as_slice()).unwrap_or(&[])),
    }
}

fn get(i: InfoId, key: &str) -> Option<String> {
    with(i, |kv| {
        kv.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    })
}

/// The value of `key` in an info object (for the calls that read hints).
pub(crate) fn info_lookup(i: InfoId, key: &str) -> Option<String> {
    get(i, key)
}

pub(crate) fn info_create(info: &mut MPI_Info) -> MpiResult<()> {
    *info = h::new_info(Vec::new());
    Ok(())
}

pub(crate) fn info_set(i: InfoId, key: &str, value: &str) -> MpiResult<()> {
    check_key(key)?;
    if value.is_empty() || value.len() > MPI_MAX_INFO_VAL {
        return Err(err(
            ErrorClass::InfoValue,
            "value is empty or longer than MPI_MAX_INFO_VAL",
        ));
    }
    let ix =
        i.0.ok_or_else(|| err(ErrorClass::Info, "MPI_INFO_ENV is read-only"))?;
    let mut t = lock(&INFOS);
    let kv = t
        .get_mut(ix)
        .ok_or_else(|| err(ErrorClass::Info, "freed info object"))?;
    match kv.iter_mut().find(|(k, _)| k == key) {
        Some(p) => p.1 = value.to_string(),
        None => kv.push((key.to_string(), value.to_string())),
    }
    Ok(())
}

pub(crate) fn info_get(
    i: InfoId,
    key: &str,
    valuelen: c_int,
    value: *mut c_char,
    f: &mut c_int,
) -> MpiResult<()> {
    check_key(key)?;
    match get(i, key) {
        Some(v) => {
            *f = 1;
            // SAFETY: MPI requires room for valuelen + 1 bytes.
            unsafe { h::write_cstr("value", value, valuelen as usize + 1, &v)? };
        }
        None => *f = 0,
    }
    Ok(())
}

pub(crate) fn info_get_valuelen(
    i: InfoId,
    key: &str,
    len: &mut c_int,
    f: &mut c_int,
) -> MpiResult<()> {
    check_key(key)?;
    match get(i, key) {
        Some(v) => {
            *f = 1;
            *len = v.len() as c_int;
        }
        None => *f = 0,
    }
    Ok(())
}

pub(crate) fn info_get_nkeys(i: InfoId, n: &mut c_int) -> MpiResult<()> {
    *n = with(i, |kv| kv.len()) as c_int;
    Ok(())
}

pub(crate) fn info_get_nthkey(i: InfoId, n: c_int, key: *mut c_char) -> MpiResult<()> {
    let k = with(i, |kv| {
        usize::try_from(n)
            .ok()
            .and_then(|n| kv.get(n))
            .map(|p| p.0.clone())
    })
    .ok_or_else(|| {
        err(
            ErrorClass::Arg,
            format!("n = {n} is not the index of a key"),
        )
    })?;
    // SAFETY: MPI requires room for MPI_MAX_INFO_KEY + 1 bytes.
    unsafe { h::write_cstr("key", key, MPI_MAX_INFO_KEY + 1, &k)? };
    Ok(())
}

pub(crate) fn info_delete(i: InfoId, key: &str) -> MpiResult<()> {
    check_key(key)?;
    let ix =
        i.0.ok_or_else(|| err(ErrorClass::Info, "MPI_INFO_ENV is read-only"))?;
    let mut t = lock(&INFOS);
    let kv = t
        .get_mut(ix)
        .ok_or_else(|| err(ErrorClass::Info, "freed info object"))?;
    let pos = kv
        .iter()
        .position(|(k, _)| k == key)
        .ok_or_else(|| err(ErrorClass::InfoNokey, format!("key \"{key}\" is not set")))?;
    kv.remove(pos);
    Ok(())
}

/// The key/value pairs of an info object.
pub(crate) fn info_pairs(i: InfoId) -> Vec<(String, String)> {
    with(i, |kv| kv.to_vec())
}

pub(crate) fn info_dup(i: InfoId, new: &mut MPI_Info) -> MpiResult<()> {
    *new = h::new_info(with(i, |kv| kv.to_vec()));
    Ok(())
}

pub(crate) fn info_free(info: &mut MPI_Info) -> MpiResult<()> {
    let i = h::info("info", *info)?;
    let ix =
        i.0.ok_or_else(|| err(ErrorClass::Info, "MPI_INFO_ENV cannot be freed"))?;
    lock(&INFOS).remove(ix);
    *info = MPI_INFO_NULL;
    Ok(())
}

/// MPI_Info_get_string (MPI-4): `buflen` in is the room at `value` (with the NUL), out the
/// room the whole value needs; the value is truncated to fit.
pub(crate) fn info_get_string(
    i: InfoId,
    key: &str,
    buflen: &mut c_int,
    value: *mut c_char,
    f: &mut c_int,
) -> MpiResult<()> {
    check_key(key)?;
    match get(i, key) {
        Some(v) => {
            *f = 1;
            let room = (*buflen).max(0) as usize;
            if room > 0 {
                // SAFETY: MPI requires room for `buflen` bytes at `value`.
                unsafe { h::write_cstr("value", value, room, &v)? };
            }
            *buflen = (v.len() + 1).min(c_int::MAX as usize) as c_int;
        }
        None => *f = 0,
    }
    Ok(())
}

/// The value of `key` in info object `i`, if set (for other calls' info arguments).
pub(crate) fn info_value(i: InfoId, key: &str) -> Option<String> {
    get(i, key)
}
