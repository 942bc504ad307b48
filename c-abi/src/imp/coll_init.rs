//! Persistent collectives (MPI-4 `MPI_Bcast_init` ... and the neighbourhood ones). Their
//! entry points are generated from the `persistent` lines of api.in (`build.rs`,
//! `gen_persistent`): the arguments are kept as given (`Captured`), and each MPI_Start
//! decodes them again and calls the matching non-blocking collective (`coll::i*`), whose
//! schedule the core runs as the work of the persistent request
//! (`Runtime::persistent_schedule`). MPI forbids changing the buffers and datatypes of a
//! persistent collective until it is freed, so decoding again gives what initialization
//! would have. The count, displacement and datatype arrays are copied at initialization
//! (`keep_array`), as MPICH does: mpi4py frees its arrays once `MPI_*_init` returns.
//!
//! The non-blocking functions hand their schedule to `started`; while a start builds one,
//! `divert` takes it instead of starting it as a request of its own.

use std::cell::RefCell;

use tsunagi_collectives::CollRequest;
use tsunagi_core::runtime::Schedule;
use tsunagi_core::{ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err};

thread_local! {
    /// Some while a persistent collective's start builds its schedule: where it goes.
    static CAPTURE: RefCell<Option<Option<CollRequest>>> = const { RefCell::new(None) };
}

/// The schedule of a non-blocking collective: None if a persistent start took it, else
/// given back to be started as a request of its own.
pub(crate) fn divert(req: CollRequest) -> Option<CollRequest> {
    CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some(slot) => {
            *slot = Some(req);
            None
        }
        None => Some(req),
    })
}

/// A persistent collective's arguments as the program gave them.
pub(crate) struct Captured<T>(pub(crate) T);

// SAFETY: the addresses are the program's buffers and arrays, which MPI keeps valid and
// unchanged until the persistent request is freed, whichever thread starts it.
unsafe impl<T> Send for Captured<T> {}

impl<T: Copy> Captured<T> {
    /// The arguments (taken through a method so that a closure captures the wrapper, not
    /// the raw pointers inside it).
    pub(crate) fn get(&self) -> T {
        self.0
    }
}

/// A copy of a persistent collective's array argument of `len` elements (None for a NULL
/// or empty one: the start passes the program's pointer then, which is not read).
///
/// # Safety
/// `p` is NULL or points to `len` readable elements.
pub(crate) unsafe fn keep_array<T: Copy>(p: *const T, len: usize) -> Option<Vec<T>> {
    if p.is_null() || len == 0 {
        return None;
    }
    // SAFETY: `len` readable elements (caller's contract).
    Some(unsafe { std::slice::from_raw_parts(p, len) }.to_vec())
}

/// Make the persistent request whose starts build their schedule with `build` (a call of
/// a non-blocking collective's implementation).
pub(crate) fn persistent(
    call: &'static str,
    request: &mut MPI_Request,
    mut build: impl FnMut(&mut MPI_Request) -> MpiResult<()> + Send + 'static,
) -> MpiResult<()> {
    let r = h::runtime(call)?;
    let id = r.persistent_schedule(Box::new(move |_rt| {
        CAPTURE.with(|c| *c.borrow_mut() = Some(None));
        let mut unused = MPI_REQUEST_NULL;
        let built = build(&mut unused);
        let schedule = CAPTURE.with(|c| c.borrow_mut().take()).flatten();
        built?;
        let schedule = schedule.ok_or_else(|| {
            err(
                ErrorClass::Intern,
                format!("{call}: the collective made no schedule"),
            )
        })?;
        Ok(Box::new(schedule) as Box<dyn Schedule>)
    }))?;
    *request = h::request_handle(id, true);
    Ok(())
}
