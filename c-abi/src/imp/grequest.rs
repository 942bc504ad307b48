//! Generalized requests: the program's query, free and cancel functions as the core's
//! [`GrequestHooks`]; the request itself lives in the core's one request table.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tsunagi_core::runtime::GrequestHooks;
use tsunagi_core::{ErrorClass, MpiError, MpiResult, Status};

use super::request::status_from_c;
use crate::ffi::*;
use crate::handles::{self as h, err};

struct CHooks {
    query: MPI_Grequest_query_function,
    free: MPI_Grequest_free_function,
    cancel: MPI_Grequest_cancel_function,
    extra: *mut c_void,
    /// Set by `MPII_Grequest_set_lang_f77`: the functions are Fortran procedures of a
    /// program built with MPICH's Fortran binding (arguments by reference, ierror last;
    /// `extra` is the address of the program's extra state, passed on as it is).
    fortran: Arc<AtomicBool>,
}

type F77Query = unsafe extern "C" fn(*mut c_void, *mut MPI_Status, *mut c_int);
type F77Free = unsafe extern "C" fn(*mut c_void, *mut c_int);
type F77Cancel = unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int);

thread_local! {
    /// The generalized request this thread started last, for MPICH's Fortran binding,
    /// which marks it right after starting it.
    static LAST_STARTED: RefCell<Option<(MPI_Request, Arc<AtomicBool>)>> =
        const { RefCell::new(None) };
}

/// MPICH's libmpichfort calls this after MPI_Grequest_start on behalf of a Fortran
/// program: the request's functions are Fortran procedures.
#[no_mangle]
pub extern "C" fn MPII_Grequest_set_lang_f77(request: MPI_Request) {
    LAST_STARTED.with(|l| {
        if let Some((r, f)) = l.borrow_mut().take() {
            if r == request {
                f.store(true, Ordering::Release);
            }
        }
    });
}

// SAFETY: the extra state is the program's; MPI hands it to the callbacks on whichever
// thread completes or cancels the request, as MPI allows.
unsafe impl Send for CHooks {}

fn check(what: &str, rc: c_int) -> MpiResult<()> {
    if rc == MPI_SUCCESS {
        return Ok(());
    }
    let class = ErrorClass::from_code(rc).unwrap_or(ErrorClass::Other);
    Err(MpiError::new(
        class,
        format!("the generalized request's {what} function returned error {rc}"),
    ))
}

impl GrequestHooks for CHooks {
    fn query(&mut self) -> MpiResult<Status> {
        let mut st = MPI_Status::default();
        if self.fortran.load(Ordering::Acquire) {
            let mut ierror = MPI_SUCCESS;
            if let Some(f) = self.query {
                // SAFETY: a Fortran procedure (extra_state, status, ierror by reference);
                // MPICH's Fortran status is the C status.
                unsafe {
                    let f: F77Query = std::mem::transmute(f);
                    f(self.extra, &mut st, &mut ierror);
                }
            }
            check("query", ierror)?;
            let mut s = status_from_c(&st);
            s.error = st.MPI_ERROR;
            return Ok(s);
        }
        if let Some(f) = self.query {
            // SAFETY: the program's MPI_Grequest_query_function, given its extra state and
            // a status that lives for the call.
            check("query", unsafe { f(self.extra, &mut st) })?;
        }
        let mut s = status_from_c(&st);
        s.error = st.MPI_ERROR;
        Ok(s)
    }
    fn free(&mut self) -> MpiResult<()> {
        if self.fortran.load(Ordering::Acquire) {
            let mut ierror = MPI_SUCCESS;
            if let Some(f) = self.free {
                // SAFETY: a Fortran procedure (extra_state, ierror by reference).
                unsafe {
                    let f: F77Free = std::mem::transmute(f);
                    f(self.extra, &mut ierror);
                }
            }
            return check("free", ierror);
        }
        match self.free {
            // SAFETY: the program's MPI_Grequest_free_function with its extra state.
            Some(f) => check("free", unsafe { f(self.extra) }),
            None => Ok(()),
        }
    }
    fn cancel(&mut self, complete: bool) -> MpiResult<()> {
        if self.fortran.load(Ordering::Acquire) {
            let mut ierror = MPI_SUCCESS;
            let mut logical = c_int::from(complete);
            if let Some(f) = self.cancel {
                // SAFETY: a Fortran procedure (extra_state, complete, ierror by reference).
                unsafe {
                    let f: F77Cancel = std::mem::transmute(f);
                    f(self.extra, &mut logical, &mut ierror);
                }
            }
            return check("cancel", ierror);
        }
        match self.cancel {
            // SAFETY: the program's MPI_Grequest_cancel_function with its extra state.
            Some(f) => check("cancel", unsafe { f(self.extra, c_int::from(complete)) }),
            None => Ok(()),
        }
    }
}

pub(crate) fn grequest_start(
    query: MPI_Grequest_query_function,
    free: MPI_Grequest_free_function,
    cancel: MPI_Grequest_cancel_function,
    extra: *mut c_void,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Grequest_start")?;
    let fortran = Arc::new(AtomicBool::new(false));
    let id = r.grequest_start(Box::new(CHooks {
        query,
        free,
        cancel,
        extra,
        fortran: fortran.clone(),
    }))?;
    *request = h::request_handle(id, false);
    LAST_STARTED.with(|l| *l.borrow_mut() = Some((*request, fortran)));
    Ok(())
}

pub(crate) fn grequest_complete(request: MPI_Request) -> MpiResult<()> {
    let id = h::request("request", request)?
        .ok_or_else(|| err(ErrorClass::Request, "request is MPI_REQUEST_NULL"))?;
    h::runtime("MPI_Grequest_complete")?.grequest_complete(id)
}
