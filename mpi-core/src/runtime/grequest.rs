//! Generalized requests (MPI_Grequest_start / MPI_Grequest_complete): requests of the one
//! core request table whose work the program does itself (MPI 4.1 §13.2).
//!
//! When the program calls MPI_Grequest_complete, the request's slot in the engine becomes
//! done with a placeholder status ([`unqueried`]: not an error class, and the request's
//! serial number) and every waiter sees it complete. The program's functions run where the
//! standard puts them, never with the engine lock or this module's table lock held (they
//! may call MPI, e.g. MPI_Grequest_complete from the cancel function):
//! - query, then free: in the Wait/Test call that collects the request. Every collecting
//!   call of the runtime passes the statuses it collected through [`Runtime::settle`],
//!   after the engine lock is released; the placeholder's serial finds the hooks even if the
//!   request id has been reused since. A failing query (or free) becomes the request's
//!   error: the status carries its class, the message waits in the schedule errors like a
//!   failed collective's (so Waitall answers MPI_ERR_IN_STATUS).
//! - query alone: MPI_Request_get_status on a completed request.
//! - free alone: MPI_Request_free of a completed request, or, for a request freed before,
//!   MPI_Grequest_complete (whichever of the two calls comes last).
//! - cancel(complete): MPI_Cancel, with whether MPI_Grequest_complete has been called.
//!
//! Lock order: the engine lock, then the table's; the table's alone is fine too.

use super::*;
use std::sync::atomic::AtomicU64;

/// What the program supplies for a generalized request (MPI's query, free and cancel
/// functions with their extra state).
pub trait GrequestHooks: Send {
    /// The completed request's status (query_fn).
    fn query(&mut self) -> MpiResult<Status>;
    /// Release the program's resources (free_fn).
    fn free(&mut self) -> MpiResult<()>;
    /// Cancel (cancel_fn); `complete` is true if MPI_Grequest_complete was called.
    fn cancel(&mut self, complete: bool) -> MpiResult<()>;
}

type SharedHooks = Arc<Mutex<Box<dyn GrequestHooks>>>;

/// The `error` field of the placeholder status: no MPI error class has this value.
const UNQUERIED: i32 = i32::MIN + 0x4752;

/// Serial numbers of generalized requests (one runtime per process, so one counter).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The placeholder status a completed generalized request holds in the engine until it is
/// collected: [`UNQUERIED`], and the request's serial in the byte count.
fn unqueried(serial: u64) -> Status {
    Status {
        error: UNQUERIED,
        bytes: serial as usize,
        ..Status::EMPTY
    }
}

/// The serial number if `st` is a generalized request's placeholder status.
fn serial_of(st: &Status) -> Option<u64> {
    (st.error == UNQUERIED).then_some(st.bytes as u64)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Started; MPI_Grequest_complete not called yet.
    Pending,
    /// MPI_Request_free came first: the free function runs at MPI_Grequest_complete.
    Freed,
    /// MPI_Grequest_complete called: the engine holds the placeholder status until a
    /// Wait/Test collects it (or MPI_Request_free drops it).
    Complete,
}

/// A live generalized request in the runtime's table.
pub(super) struct GrequestEntry {
    id: ReqId,
    serial: u64,
    state: State,
    hooks: SharedHooks,
}

fn lock_hooks(h: &SharedHooks) -> std::sync::MutexGuard<'_, Box<dyn GrequestHooks>> {
    h.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    fn grequests(&self) -> std::sync::MutexGuard<'_, Vec<GrequestEntry>> {
        self.grequests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// MPI_Grequest_start: a new active request that completes at
    /// [`Runtime::grequest_complete`].
    pub fn grequest_start(&self, hooks: Box<dyn GrequestHooks>) -> MpiResult<ReqId> {
        let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
        let mut e = self.lock();
        let id = e.new_scheduled();
        self.grequests().push(GrequestEntry {
            id,
            serial,
            state: State::Pending,
            hooks: Arc::new(Mutex::new(hooks)),
        });
        Ok(id)
    }

    /// The table index of the generalized request that request `id` is now, with whether
    /// MPI_Grequest_complete was called for it; None if `id` is no (live, uncollected)
    /// generalized request. An entry whose request was collected but not yet settled may
    /// share its id with a newer request: an active engine request is a pending entry's
    /// (an id is reused only after collection), a done one is a complete entry's if it
    /// holds that entry's placeholder.
    fn grequest_now(e: &Engine, table: &[GrequestEntry], id: ReqId) -> Option<(usize, bool)> {
        table.iter().enumerate().find_map(|(i, g)| {
            if g.id != id {
                return None;
            }
            match g.state {
                State::Pending | State::Freed => Some((i, false)),
                State::Complete => {
                    let holds =
                        matches!(e.peek(id), Ok(Some(st)) if serial_of(&st) == Some(g.serial));
                    holds.then_some((i, true))
                }
            }
        })
    }

    /// MPI_Grequest_complete. For a request freed before, its free function runs now and
    /// its error is this call's.
    pub fn grequest_complete(&self, id: ReqId) -> MpiResult<()> {
        let freed_hooks = {
            let mut e = self.lock();
            let mut table = self.grequests();
            let Some((i, done)) = Self::grequest_now(&e, &table, id) else {
                return Err(MpiError::new(
                    ErrorClass::Request,
                    "MPI_Grequest_complete: the request is not a generalized request",
                ));
            };
            if done {
                return Err(MpiError::new(
                    ErrorClass::Request,
                    "MPI_Grequest_complete: the request was already completed",
                ));
            }
            let hooks = if table[i].state == State::Freed {
                // Detached at MPI_Request_free: completing it removes it from the engine.
                e.finish_scheduled_with(id, Status::EMPTY);
                Some(table.swap_remove(i).hooks)
            } else {
                table[i].state = State::Complete;
                e.finish_scheduled_with(id, unqueried(table[i].serial));
                None
            };
            drop(table);
            // A waiter of the threaded engine sleeps on the completion doorbell.
            self.completed.store(e.core.completions, Ordering::Release);
            self.completion_bell.ring();
            hooks
        };
        match freed_hooks {
            Some(h) => lock_hooks(&h).free(),
            None => Ok(()),
        }
    }

    /// MPI_Cancel on a generalized request: Some(result of its cancel function) if `id` is
    /// one.
    pub(super) fn grequest_cancel(&self, id: ReqId) -> Option<MpiResult<()>> {
        let (hooks, complete) = {
            let e = self.lock();
            let table = self.grequests();
            let (i, complete) = Self::grequest_now(&e, &table, id)?;
            (table[i].hooks.clone(), complete)
        };
        let result = lock_hooks(&hooks).cancel(complete);
        Some(result)
    }

    /// MPI_Request_free on a generalized request: Some(result) if `id` is one. A completed
    /// one is dropped and its free function runs now; otherwise it runs at
    /// MPI_Grequest_complete.
    pub(super) fn grequest_free(&self, id: ReqId) -> Option<MpiResult<()>> {
        let hooks = {
            let mut e = self.lock();
            let mut table = self.grequests();
            let (i, complete) = Self::grequest_now(&e, &table, id)?;
            if !complete {
                table[i].state = State::Freed;
                e.detach(id);
                return Some(Ok(()));
            }
            let _ = e.test(id);
            table.swap_remove(i).hooks
        };
        let result = lock_hooks(&hooks).free();
        Some(result)
    }

    /// MPI_Request_get_status: a completed generalized request's status from its query
    /// function (the request stays); other statuses as they are.
    pub(super) fn grequest_peek(&self, st: Status) -> MpiResult<Status> {
        let Some(serial) = serial_of(&st) else {
            return Ok(st);
        };
        let Some(hooks) = self
            .grequests()
            .iter()
            .find(|g| g.serial == serial)
            .map(|g| g.hooks.clone())
        else {
            return Ok(Status::EMPTY);
        };
        let queried = lock_hooks(&hooks).query();
        queried
            .map_err(|e| MpiError::new(e.class, format!("MPI_Request_get_status: {}", e.message)))
    }

    /// Whether `st`, just collected, is a generalized request's placeholder that
    /// [`Runtime::settle`] must replace.
    pub(super) fn needs_settling(st: &Status) -> bool {
        serial_of(st).is_some()
    }

    /// The status a Wait/Test call returns for a request it collected with status `st`: a
    /// generalized request's comes from its query function, then its free function runs
    /// (their errors become the status's error class, with the message kept for the call,
    /// see [`Runtime::schedule_error`]). Called with no lock held, by every collecting call.
    pub(super) fn settle(&self, id: ReqId, st: Status) -> Status {
        let Some(serial) = serial_of(&st) else {
            return st;
        };
        let hooks = {
            let mut table = self.grequests();
            match table.iter().position(|g| g.serial == serial) {
                Some(i) => table.swap_remove(i).hooks,
                None => return Status::EMPTY,
            }
        };
        let (queried, freed) = {
            let mut h = lock_hooks(&hooks);
            let q = h.query();
            (q, h.free())
        };
        let failed = match (queried, freed) {
            (Ok(st), Ok(())) => return st,
            (Err(e), _) => (Status::EMPTY, e),
            (Ok(st), Err(e)) => (st, e),
        };
        let (mut st, err) = failed;
        st.error = err.class as i32;
        let mut errs = self
            .schedule_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        errs.retain(|(i, _)| *i != id);
        errs.push((id, err));
        st
    }
}
