//! Requests whose work the core advances on behalf of the layers above: a non-blocking
//! collective's schedule today; generalized requests, RMA and I/O later.
//!
//! They live in the one request table (an engine request of kind `Scheduled` records the
//! completion, so every wait and test call takes them like point-to-point requests), and
//! they advance on the one progress path: every blocking wait, every test and every
//! progress step advances every outstanding schedule, so that a program waiting for
//! anything keeps all its collectives moving. The C library and the Rust API keep no
//! request table or progress loop of their own.
//!
//! A schedule advances without the engine lock (it makes point-to-point requests of its
//! own): it is taken out of the list, advanced, and put back or completed, so two threads
//! never advance one schedule at once and the list lock is never held across a call.

use super::*;

/// Work that completes a request by being advanced now and then.
pub trait Schedule: Send {
    /// Advance as far as possible without blocking; `Ok(true)` when complete. Called with
    /// no runtime lock held; may start and test requests of its own.
    fn advance(&mut self, rt: &Runtime) -> MpiResult<bool>;

    /// The status the completed request reports (asked once, after `advance` returned
    /// true); None: the empty status.
    fn final_status(&mut self) -> Option<Status> {
        None
    }

    /// True when nobody will wait for the request (it was freed): the core collects it
    /// itself when it finishes.
    fn collect_when_finished(&self) -> bool {
        false
    }
}

impl Runtime {
    /// Register `schedule` as a new active request, advance it once (its first round
    /// starts now), and return the request.
    pub fn start_schedule(&self, schedule: Box<dyn Schedule>) -> MpiResult<ReqId> {
        let id = self.lock().new_scheduled();
        self.run_schedule(id, schedule);
        Ok(id)
    }

    /// Run `schedule` as the work of active request `id` (new, or a persistent one just
    /// started): advance it once, then on every progress step until it completes.
    pub(super) fn run_schedule(&self, id: ReqId, mut schedule: Box<dyn Schedule>) {
        // An error of an earlier request with this id that nobody collected.
        self.schedule_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| *i != id);
        self.nschedules.fetch_add(1, Ordering::AcqRel);
        match schedule.advance(self) {
            Ok(false) => self
                .schedules
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((id, schedule)),
            done => self.finish_schedule(id, done, schedule.as_mut()),
        }
    }

    /// The error that ended the schedule of request `id`, once (with its message; the
    /// request's status has its class).
    pub fn schedule_error(&self, id: ReqId) -> Option<MpiError> {
        let mut errs = self
            .schedule_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let pos = errs.iter().position(|(i, _)| *i == id)?;
        Some(errs.swap_remove(pos).1)
    }

    /// Advance every outstanding schedule once. Returns true when any completed.
    pub(super) fn advance_schedules(&self) -> bool {
        if self.nschedules.load(Ordering::Acquire) == 0 {
            return false;
        }
        let taken = std::mem::take(&mut *self.schedules.lock().unwrap_or_else(|p| p.into_inner()));
        let mut left = Vec::with_capacity(taken.len());
        let mut any = false;
        for (id, mut s) in taken {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.advance(self)))
                .unwrap_or_else(|_| {
                    Err(MpiError::new(
                        ErrorClass::Intern,
                        "internal error while advancing a non-blocking collective",
                    ))
                });
            match res {
                Ok(false) => left.push((id, s)),
                done => {
                    self.finish_schedule(id, done, s.as_mut());
                    any = true;
                }
            }
        }
        if !left.is_empty() {
            self.schedules
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&mut left);
        }
        any
    }

    fn finish_schedule(&self, id: ReqId, result: MpiResult<bool>, schedule: &mut dyn Schedule) {
        let code = match result {
            Ok(_) => 0,
            Err(e) => {
                // A status carries only the class; the message waits for the wait or test
                // that collects this request (`Runtime::schedule_error`).
                let code = e.class as i32;
                self.schedule_errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((id, e));
                code
            }
        };
        let mut status = schedule.final_status().unwrap_or(Status::EMPTY);
        if code != 0 {
            status.error = code;
        }
        let mut e = self.lock();
        e.finish_scheduled_with(id, status);
        if schedule.collect_when_finished() {
            let _ = e.test(id);
        }
        drop(e);
        self.nschedules.fetch_sub(1, Ordering::AcqRel);
    }
}
