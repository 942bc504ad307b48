//! Generalized requests (MPI_Grequest_start / MPI_Grequest_complete): requests of the one
//! core request table whose work the program does itself.
//!
//! A generalized request is a [`Schedule`] that completes on the first progress step after
//! `grequest_complete`: that step calls the query hook (its status becomes the request's)
//! and then the free hook. Until then MPI_Cancel calls the cancel hook. MPI_Request_free on
//! an incomplete one lets it complete in the background and be forgotten. The hooks are
//! shared between the schedule and the runtime's table of live generalized requests, and
//! are never called with a runtime lock held (they may call MPI).

use super::*;
use std::sync::atomic::AtomicBool;

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

/// A live generalized request in the runtime's table.
pub(super) struct GrequestEntry {
    id: ReqId,
    complete: Arc<AtomicBool>,
    freed: Arc<AtomicBool>,
    hooks: SharedHooks,
}

struct Grequest {
    complete: Arc<AtomicBool>,
    freed: Arc<AtomicBool>,
    hooks: SharedHooks,
    status: Option<Status>,
}

/// Hooks after their free function ran: nothing may be called any more (MPI calls the free
/// function last; here it runs at completion, so a later MPI_Cancel of the completed,
/// not yet collected request must not reach the program's cancel function).
struct Released;

impl GrequestHooks for Released {
    fn query(&mut self) -> MpiResult<Status> {
        Ok(Status::EMPTY)
    }
    fn free(&mut self) -> MpiResult<()> {
        Ok(())
    }
    fn cancel(&mut self, _complete: bool) -> MpiResult<()> {
        Ok(())
    }
}

fn lock_hooks(h: &SharedHooks) -> std::sync::MutexGuard<'_, Box<dyn GrequestHooks>> {
    h.lock().unwrap_or_else(|p| p.into_inner())
}

impl Schedule for Grequest {
    fn advance(&mut self, _rt: &Runtime) -> MpiResult<bool> {
        if !self.complete.load(Ordering::Acquire) {
            return Ok(false);
        }
        let mut hooks = lock_hooks(&self.hooks);
        let queried = hooks.query();
        let freed = hooks.free();
        *hooks = Box::new(Released);
        let st = queried?;
        freed?;
        self.status = Some(st);
        Ok(true)
    }

    fn final_status(&mut self) -> Option<Status> {
        self.status.take()
    }

    fn collect_when_finished(&self) -> bool {
        self.freed.load(Ordering::Acquire)
    }
}

impl Runtime {
    fn grequests(&self) -> std::sync::MutexGuard<'_, Vec<GrequestEntry>> {
        self.grequests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// MPI_Grequest_start: a new active request that completes after
    /// [`Runtime::grequest_complete`].
    pub fn grequest_start(&self, hooks: Box<dyn GrequestHooks>) -> MpiResult<ReqId> {
        let complete = Arc::new(AtomicBool::new(false));
        let freed = Arc::new(AtomicBool::new(false));
        let hooks: SharedHooks = Arc::new(Mutex::new(hooks));
        // Registered before the schedule starts so that the table knows the id first; a
        // request id is reused only after its request is gone, so older entries with the
        // same id are stale.
        let schedule = Grequest {
            complete: complete.clone(),
            freed: freed.clone(),
            hooks: hooks.clone(),
            status: None,
        };
        let id = self.start_schedule(Box::new(schedule))?;
        let mut table = self.grequests();
        table.retain(|g| g.id != id);
        table.push(GrequestEntry {
            id,
            complete,
            freed,
            hooks,
        });
        Ok(id)
    }

    fn grequest_entry(&self, id: ReqId) -> Option<(Arc<AtomicBool>, Arc<AtomicBool>, SharedHooks)> {
        let mut table = self.grequests();
        // Entries of completed requests go as soon as someone looks.
        table.retain(|g| !g.complete.load(Ordering::Acquire) || self.lock().request_exists(g.id));
        table
            .iter()
            .find(|g| g.id == id)
            .map(|g| (g.complete.clone(), g.freed.clone(), g.hooks.clone()))
    }

    /// MPI_Grequest_complete.
    pub fn grequest_complete(&self, id: ReqId) -> MpiResult<()> {
        let (complete, _, _) = self.grequest_entry(id).ok_or_else(|| {
            MpiError::new(
                ErrorClass::Request,
                "MPI_Grequest_complete: the request is not a generalized request",
            )
        })?;
        if complete.swap(true, Ordering::AcqRel) {
            return Err(MpiError::new(
                ErrorClass::Request,
                "MPI_Grequest_complete: the request was already completed",
            ));
        }
        // Let the completion show now (a polling waiter may be asleep on the transports).
        self.advance_schedules();
        Ok(())
    }

    /// MPI_Cancel on a generalized request: Some(result) if `id` is one.
    pub(super) fn grequest_cancel(&self, id: ReqId) -> Option<MpiResult<()>> {
        let (complete, _, hooks) = self.grequest_entry(id)?;
        let done = complete.load(Ordering::Acquire);
        let result = lock_hooks(&hooks).cancel(done);
        Some(result)
    }

    /// MPI_Request_free on a generalized request: Some(result) if `id` is one.
    pub(super) fn grequest_free(&self, id: ReqId) -> Option<MpiResult<()>> {
        let (_, freed, _) = self.grequest_entry(id)?;
        freed.store(true, Ordering::Release);
        let mut e = self.lock();
        // Already finished: collect it now; otherwise its schedule does when it finishes.
        if e.request_exists(id) && e.is_done(id) {
            return Some(e.test(id).map(|_| ()));
        }
        Some(Ok(()))
    }
}
