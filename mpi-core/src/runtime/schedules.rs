//! Requests whose work the core advances on behalf of the layers above: a non-blocking
//! collective's schedule today; generalized requests, RMA and I/O later. Also the
//! background services of those layers (the target side of one-sided communication):
//! work with no request of its own that must run on every progress step, so that a
//! process waiting for anything serves the requests of its peers.
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

/// Background work advanced on every progress step (see the module doc), e.g. the target
/// side of an RMA window answering its peers.
pub trait Service: Send + Sync {
    /// Do what can be done now without blocking; true if anything happened. Called with
    /// no runtime lock held, possibly from several threads and re-entrantly (a service
    /// that calls a progressing runtime function comes back here): a service guards itself,
    /// e.g. with `Mutex::try_lock`.
    fn advance(&self, rt: &Runtime) -> bool;
}

/// The registered services (the runtime is one per process, so one list is).
static SERVICES: Mutex<Vec<(u64, Arc<dyn Service>)>> = Mutex::new(Vec::new());
static NEXT_SERVICE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The request layer, locked, as seen by a [`Runtime::wait_until`] condition: tests that do
/// not make progress themselves (the wait loop does).
pub struct Requests<'a>(&'a mut Engine);

impl Requests<'_> {
    /// Some(status) and the request collected (freed) when `id` is complete.
    pub fn test(&mut self, id: ReqId) -> MpiResult<Option<Status>> {
        self.0.test(id)
    }
}

impl Runtime {
    /// Register a background service; it runs on every progress step until
    /// [`Runtime::remove_service`]. Returns its id.
    pub fn add_service(&self, service: Arc<dyn Service>) -> u64 {
        let id = NEXT_SERVICE.fetch_add(1, Ordering::Relaxed);
        SERVICES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, service));
        // Counted with the schedules: a polling waiter then does not sleep past a
        // completion (an arrival for the service) before the service saw it.
        self.nschedules.fetch_add(1, Ordering::AcqRel);
        id
    }

    /// Stop running the service `id`.
    pub fn remove_service(&self, id: u64) {
        let mut list = SERVICES.lock().unwrap_or_else(|p| p.into_inner());
        let before = list.len();
        list.retain(|(i, _)| *i != id);
        if list.len() != before {
            self.nschedules.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub(super) fn advance_services(&self) -> bool {
        let list: Vec<Arc<dyn Service>> = {
            let l = SERVICES.lock().unwrap_or_else(|p| p.into_inner());
            if l.is_empty() {
                return false;
            }
            l.iter().map(|(_, s)| s.clone()).collect()
        };
        let mut any = false;
        for s in list {
            any |= s.advance(self);
        }
        any
    }

    /// Block until `done` is true, making progress (and advancing schedules and services)
    /// meanwhile; the waiting policy of every blocking call (spin, yield, sleep). `done`
    /// runs with the request layer locked: it must not call the runtime.
    pub fn wait_until(
        &self,
        mut done: impl FnMut(&mut Requests<'_>) -> MpiResult<bool>,
    ) -> MpiResult<()> {
        self.block_until(|e| done(&mut Requests(e)))
    }

    /// MPI_Test without a progress step (for layers that are themselves called from the
    /// progress path): Some(status), the request collected, when `id` is complete.
    pub fn test_quiet(&self, id: ReqId) -> MpiResult<Option<Status>> {
        self.lock().test(id)
    }

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
        let served = self.advance_services();
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
        any || served
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
