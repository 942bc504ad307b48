//! Attribute caching on communicators: C copy/delete callbacks wrapped as core keyvals,
//! and MPICH's predefined keys (MPI_TAG_UB, ...), whose value is returned as a pointer to
//! a static int.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use tsunagi_core::runtime::PredefinedAttr;
use tsunagi_core::{CommId, ErrorClass, Keyval, MpiError, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err};

/// The predefined keys and where get_attr stores their values (stable addresses).
static PREDEFINED: [(c_int, PredefinedAttr); 7] = [
    (MPI_TAG_UB, PredefinedAttr::TagUb),
    (MPI_HOST, PredefinedAttr::Host),
    (MPI_IO, PredefinedAttr::Io),
    (MPI_WTIME_IS_GLOBAL, PredefinedAttr::WtimeIsGlobal),
    (MPI_UNIVERSE_SIZE, PredefinedAttr::UniverseSize),
    (MPI_LASTUSEDCODE, PredefinedAttr::LastUsedCode),
    (MPI_APPNUM, PredefinedAttr::AppNum),
];
static VALUES: [AtomicI32; 7] = [const { AtomicI32::new(0) }; 7];

fn callback_error(what: &str, rc: c_int) -> MpiError {
    let class = tsunagi_core::ErrorClass::from_code(rc).unwrap_or(ErrorClass::Other);
    err(
        class,
        format!("the attribute {what} callback returned error {rc}"),
    )
}

pub(crate) fn comm_create_keyval(
    copy: MPI_Comm_copy_attr_function,
    delete: MPI_Comm_delete_attr_function,
    keyval: &mut c_int,
    extra: *mut c_void,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Comm_create_keyval")?;
    let copy = copy.map(|f| {
        Arc::new(move |old: CommId, kv: i32, extra: usize, val: usize| {
            let mut out: *mut c_void = std::ptr::null_mut();
            let mut fl: c_int = 0;
            // SAFETY: a C function of type MPI_Comm_copy_attr_function, called as MPI
            // specifies, with pointers to locals that live for the call.
            let rc = unsafe {
                f(
                    h::comm_handle(old),
                    kv,
                    extra as *mut c_void,
                    val as *mut c_void,
                    &mut out as *mut _ as *mut c_void,
                    &mut fl,
                )
            };
            if rc != 0 {
                return Err(callback_error("copy", rc));
            }
            Ok((fl != 0).then_some(out as usize))
        }) as Arc<tsunagi_core::comm::CopyAttrFn>
    });
    let delete = delete.map(|f| {
        Arc::new(move |comm: CommId, kv: i32, val: usize, extra: usize| {
            // SAFETY: a C function of type MPI_Comm_delete_attr_function, called as MPI
            // specifies.
            let rc = unsafe {
                f(
                    h::comm_handle(comm),
                    kv,
                    val as *mut c_void,
                    extra as *mut c_void,
                )
            };
            if rc != 0 {
                return Err(callback_error("delete", rc));
            }
            Ok(())
        }) as Arc<tsunagi_core::comm::DeleteAttrFn>
    });
    *keyval = r.create_keyval(Keyval {
        copy,
        delete,
        extra: extra as usize,
    });
    Ok(())
}

pub(crate) fn comm_free_keyval(keyval: &mut c_int) -> MpiResult<()> {
    if PREDEFINED.iter().any(|p| p.0 == *keyval) {
        return Err(err(
            ErrorClass::Keyval,
            "a predefined keyval cannot be freed",
        ));
    }
    h::runtime("MPI_Comm_free_keyval")?.free_keyval(*keyval)?;
    *keyval = MPI_KEYVAL_INVALID;
    Ok(())
}

pub(crate) fn comm_set_attr(comm: CommId, keyval: c_int, val: *mut c_void) -> MpiResult<()> {
    if PREDEFINED.iter().any(|p| p.0 == keyval) {
        return Err(err(
            ErrorClass::Keyval,
            "predefined attributes cannot be set",
        ));
    }
    h::runtime("MPI_Comm_set_attr")?.set_attr(comm, keyval, val as usize)
}

pub(crate) fn comm_get_attr(
    comm: CommId,
    keyval: c_int,
    out: *mut c_void,
    f: &mut c_int,
) -> MpiResult<()> {
    if out.is_null() {
        return Err(err(ErrorClass::Arg, "argument attribute_val is NULL"));
    }
    let r = h::runtime("MPI_Comm_get_attr")?;
    let val: Option<*mut c_void> = if let Some(i) = PREDEFINED.iter().position(|p| p.0 == keyval) {
        r.check_comm_id("MPI_Comm_get_attr", comm)?;
        let v = match PREDEFINED[i].1 {
            // User codes are the C library's (MPI_Add_error_code).
            PredefinedAttr::LastUsedCode => Some(super::last_used_code()),
            which => r.predefined_attr(which),
        };
        v.map(|v| {
            VALUES[i].store(v, Ordering::Relaxed);
            VALUES[i].as_ptr() as *mut c_void
        })
    } else {
        r.get_attr(comm, keyval)?.map(|v| v as *mut c_void)
    };
    *f = c_int::from(val.is_some());
    if let Some(v) = val {
        // SAFETY: attribute_val is the address of a `void *` (MPI's convention), non-NULL.
        unsafe { *(out as *mut *mut c_void) = v };
    }
    Ok(())
}

pub(crate) fn comm_delete_attr(comm: CommId, keyval: c_int) -> MpiResult<()> {
    if PREDEFINED.iter().any(|p| p.0 == keyval) {
        return Err(err(
            ErrorClass::Keyval,
            "predefined attributes cannot be deleted",
        ));
    }
    h::runtime("MPI_Comm_delete_attr")?.delete_attr(comm, keyval)
}

pub(crate) fn keyval_create(
    copy: MPI_Copy_function,
    delete: MPI_Delete_function,
    keyval: &mut c_int,
    extra: *mut c_void,
) -> MpiResult<()> {
    comm_create_keyval(copy, delete, keyval, extra)
}

pub(crate) fn keyval_free(keyval: &mut c_int) -> MpiResult<()> {
    comm_free_keyval(keyval)
}

pub(crate) fn attr_put(comm: CommId, keyval: c_int, val: *mut c_void) -> MpiResult<()> {
    comm_set_attr(comm, keyval, val)
}

pub(crate) fn attr_get(
    comm: CommId,
    keyval: c_int,
    out: *mut c_void,
    f: &mut c_int,
) -> MpiResult<()> {
    comm_get_attr(comm, keyval, out, f)
}

pub(crate) fn attr_delete(comm: CommId, keyval: c_int) -> MpiResult<()> {
    comm_delete_attr(comm, keyval)
}

/// `MPI_COMM_DUP_FN` / `MPI_DUP_FN` (MPICH's symbol name): copy the value, set the flag.
///
/// # Safety
/// `out` must point to a `void *` and `flag` to an int, as MPI guarantees for copy callbacks.
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _old: MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    val_in: *mut c_void,
    val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes the address of the new value and of the flag.
    unsafe {
        *(val_out as *mut *mut c_void) = val_in;
        *flag = 1;
    }
    MPI_SUCCESS
}

/// MPI_DUP_FN called by its name (mpi.h makes it a macro for [`MPIR_Dup_fn`]).
pub(crate) fn dup_fn(
    old: MPI_Comm,
    keyval: c_int,
    extra: *mut c_void,
    val_in: *mut c_void,
    val_out: *mut c_void,
    flag: &mut c_int,
) -> MpiResult<()> {
    if val_out.is_null() {
        return Err(err(ErrorClass::Arg, "attribute_val_out is NULL"));
    }
    // SAFETY: val_out is the address of the new value (checked non-NULL), flag a valid
    // reference; MPIR_Dup_fn writes only those two.
    unsafe { MPIR_Dup_fn(old, keyval, extra, val_in, val_out, flag) };
    Ok(())
}
