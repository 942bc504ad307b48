//! Attributes cached on datatypes (the core keeps attributes on communicators only): C
//! keyvals with their copy/delete callbacks, values per (datatype handle, keyval), copied
//! by MPI_Type_dup and deleted by MPI_Type_free.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use tsunagi_core::{ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err, lock, Table};

/// Type keyvals are `TYPE_KEYVAL | index`.
const TYPE_KEYVAL: c_int = 0x2800_0000;

#[derive(Clone, Copy)]
struct TypeKeyval {
    copy: MPI_Type_copy_attr_function,
    delete: MPI_Type_delete_attr_function,
    extra: usize,
    /// Freed by the program while attributes still used it: no longer nameable, but the
    /// attributes' callbacks still run; the keyval goes with the last of them.
    freed: bool,
}

static KEYVALS: Mutex<Table<TypeKeyval>> = Mutex::new(Table::new());
/// Attribute values by (datatype handle, keyval).
static VALUES: Mutex<BTreeMap<(MPI_Datatype, c_int), usize>> = Mutex::new(BTreeMap::new());

/// A keyval the program may name (made and not freed).
fn keyval(k: c_int) -> MpiResult<TypeKeyval> {
    match any_keyval(k)? {
        kv if kv.freed => Err(err(
            ErrorClass::Keyval,
            format!("type_keyval = {k:#x} was freed"),
        )),
        kv => Ok(kv),
    }
}

/// After an attribute of `k` went: deallocate `k` if it was freed and nothing uses it.
fn release_if_unused(k: c_int) {
    let in_use = lock(&VALUES).keys().any(|&(_, kk)| kk == k);
    let mut tab = lock(&KEYVALS);
    let ix = (k & !TYPE_KEYVAL) as u32;
    if !in_use && tab.get(ix).is_some_and(|kv| kv.freed) {
        tab.remove(ix);
    }
}

/// A keyval that still exists, freed by the program or not (for the callbacks).
fn any_keyval(k: c_int) -> MpiResult<TypeKeyval> {
    let ix = (k & !TYPE_KEYVAL) as u32;
    if k & TYPE_KEYVAL != TYPE_KEYVAL || k < 0 {
        return Err(err(
            ErrorClass::Keyval,
            format!("type_keyval = {k:#x} is not a datatype keyval"),
        ));
    }
    lock(&KEYVALS).get(ix).copied().ok_or_else(|| {
        err(
            ErrorClass::Keyval,
            format!("type_keyval = {k:#x} was freed"),
        )
    })
}

fn callback_rc(what: &str, rc: c_int) -> MpiResult<()> {
    if rc != MPI_SUCCESS {
        let class = ErrorClass::from_code(rc).unwrap_or(ErrorClass::Other);
        return Err(err(
            class,
            format!("the datatype attribute {what} callback returned error {rc}"),
        ));
    }
    Ok(())
}

fn run_delete(t: MPI_Datatype, k: c_int, kv: TypeKeyval, val: usize) -> MpiResult<()> {
    if let Some(f) = kv.delete {
        // SAFETY: a C function of type MPI_Type_delete_attr_function, called as MPI specifies.
        let rc = unsafe { f(t, k, val as *mut c_void, kv.extra as *mut c_void) };
        callback_rc("delete", rc)?;
    }
    Ok(())
}

pub(crate) fn type_create_keyval(
    copy: MPI_Type_copy_attr_function,
    delete: MPI_Type_delete_attr_function,
    k: &mut c_int,
    extra: *mut c_void,
) -> MpiResult<()> {
    let ix = lock(&KEYVALS).insert(TypeKeyval {
        copy,
        delete,
        extra: extra as usize,
        freed: false,
    });
    *k = TYPE_KEYVAL | ix as c_int;
    Ok(())
}

pub(crate) fn type_free_keyval(k: &mut c_int) -> MpiResult<()> {
    keyval(*k)?;
    if let Some(kv) = lock(&KEYVALS).get_mut((*k & !TYPE_KEYVAL) as u32) {
        kv.freed = true;
    }
    release_if_unused(*k);
    *k = MPI_KEYVAL_INVALID;
    Ok(())
}

pub(crate) fn type_set_attr(t: MPI_Datatype, k: c_int, val: *mut c_void) -> MpiResult<()> {
    h::dtype("datatype", t)?;
    let kv = keyval(k)?;
    let old = lock(&VALUES).get(&(t, k)).copied();
    if let Some(v) = old {
        run_delete(t, k, kv, v)?;
    }
    lock(&VALUES).insert((t, k), val as usize);
    Ok(())
}

pub(crate) fn type_get_attr(
    t: MPI_Datatype,
    k: c_int,
    out: *mut c_void,
    flag: &mut c_int,
) -> MpiResult<()> {
    h::dtype("datatype", t)?;
    keyval(k)?;
    if out.is_null() {
        return Err(err(ErrorClass::Arg, "argument attribute_val is NULL"));
    }
    match lock(&VALUES).get(&(t, k)).copied() {
        Some(v) => {
            *flag = 1;
            // SAFETY: attribute_val is the address of a `void *` (MPI's convention), non-NULL.
            unsafe { *(out as *mut *mut c_void) = v as *mut c_void };
        }
        None => *flag = 0,
    }
    Ok(())
}

pub(crate) fn type_delete_attr(t: MPI_Datatype, k: c_int) -> MpiResult<()> {
    h::dtype("datatype", t)?;
    let kv = keyval(k)?;
    let v = lock(&VALUES).get(&(t, k)).copied().ok_or_else(|| {
        err(
            ErrorClass::Keyval,
            format!("keyval {k:#x} has no value on this datatype"),
        )
    })?;
    run_delete(t, k, kv, v)?;
    lock(&VALUES).remove(&(t, k));
    release_if_unused(k);
    Ok(())
}

/// MPI_Type_dup: run the copy callbacks of `old`'s attributes for `new`.
pub(crate) fn copy_all(old: MPI_Datatype, new: MPI_Datatype) -> MpiResult<()> {
    let attrs: Vec<(c_int, usize)> = lock(&VALUES)
        .range((old, c_int::MIN)..=(old, c_int::MAX))
        .map(|(&(_, k), &v)| (k, v))
        .collect();
    for (k, v) in attrs {
        let Ok(kv) = any_keyval(k) else { continue };
        let Some(f) = kv.copy else { continue };
        let mut out: *mut c_void = std::ptr::null_mut();
        let mut flag: c_int = 0;
        // SAFETY: a C function of type MPI_Type_copy_attr_function, given pointers to locals.
        let rc = unsafe {
            f(
                old,
                k,
                kv.extra as *mut c_void,
                v as *mut c_void,
                &mut out as *mut _ as *mut c_void,
                &mut flag,
            )
        };
        callback_rc("copy", rc)?;
        if flag != 0 {
            lock(&VALUES).insert((new, k), out as usize);
        }
    }
    Ok(())
}

/// MPI_Type_free: run the delete callbacks of the datatype's attributes and drop them.
pub(crate) fn delete_all(t: MPI_Datatype) -> MpiResult<()> {
    let attrs: Vec<(c_int, usize)> = lock(&VALUES)
        .range((t, c_int::MIN)..=(t, c_int::MAX))
        .map(|(&(_, k), &v)| (k, v))
        .collect();
    for (k, v) in attrs {
        if let Ok(kv) = any_keyval(k) {
            run_delete(t, k, kv, v)?;
        }
        lock(&VALUES).remove(&(t, k));
        release_if_unused(k);
    }
    Ok(())
}
