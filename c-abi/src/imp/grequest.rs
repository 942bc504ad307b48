//! Generalized requests: the program's query, free and cancel functions as the core's
//! [`GrequestHooks`]; the request itself lives in the core's one request table.

use std::ffi::{c_int, c_void};

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
        match self.free {
            // SAFETY: the program's MPI_Grequest_free_function with its extra state.
            Some(f) => check("free", unsafe { f(self.extra) }),
            None => Ok(()),
        }
    }
    fn cancel(&mut self, complete: bool) -> MpiResult<()> {
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
    let id = r.grequest_start(Box::new(CHooks {
        query,
        free,
        cancel,
        extra,
    }))?;
    *request = h::request_handle(id, false);
    Ok(())
}

pub(crate) fn grequest_complete(request: MPI_Request) -> MpiResult<()> {
    let id = h::request("request", request)?
        .ok_or_else(|| err(ErrorClass::Request, "request is MPI_REQUEST_NULL"))?;
    h::runtime("MPI_Grequest_complete")?.grequest_complete(id)
}
