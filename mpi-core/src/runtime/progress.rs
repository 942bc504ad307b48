//! Progress: the threaded engine's progress threads, one non-blocking step, and how a
//! blocking call waits (spin, yield, then sleep on the transports' event sources or on the
//! completion doorbell).

use super::*;
use std::sync::atomic::{AtomicU32, AtomicU64};
use tsunagi_p2p::futex::DoorbellWords;
use tsunagi_p2p::registry::EventRegistry;

impl Runtime {
    pub(super) fn start_progress_threads(&'static self) {
        if self.mode != ProgressMode::Threaded {
            return;
        }
        let mut threads = self.threads.lock().expect("threads lock");
        if let Some(registry) = &self.registry {
            // One thread waits on every transport at once and polls them all.
            let stop = self.stop_threads.clone();
            let h = std::thread::Builder::new()
                .name("tsunagi-progress".into())
                .spawn(move || self.progress_thread(Waiter::All(registry), stop))
                .expect("spawn progress thread");
            threads.push(h);
            return;
        }
        for (idx, src) in self.sources.iter().cloned() {
            let stop = self.stop_threads.clone();
            let h = std::thread::Builder::new()
                .name(format!("tsunagi-progress-{idx}"))
                .spawn(move || self.progress_thread(Waiter::One(idx, src), stop))
                .expect("spawn progress thread");
            threads.push(h);
        }
    }

    /// Threaded engine: a progress thread for a device added after start-up (dynamic
    /// processes), `idx` its index in the router's event sources. The polling engine needs
    /// none: such a device states a timer deadline, which bounds every sleep.
    pub(super) fn start_device_thread(&'static self, idx: usize, src: Arc<dyn EventSource>) {
        if self.mode != ProgressMode::Threaded {
            return;
        }
        let stop = self.stop_threads.clone();
        let h = std::thread::Builder::new()
            .name(format!("tsunagi-progress-{idx}"))
            .spawn(move || self.progress_thread(Waiter::One(idx, src), stop))
            .expect("spawn progress thread");
        self.threads.lock().expect("threads lock").push(h);
    }

    /// Threaded engine: block on this transport's event source (or on the registry of all
    /// of them), then handle the events under the engine lock.
    fn progress_thread(&self, src: Waiter<'_>, stop: Arc<AtomicBool>) {
        let below = if self.progress_below_app {
            BelowApplication::enter()
        } else {
            None
        };
        // Poll, then spin and yield for a while before sleeping: a futex wake-up costs tens
        // of microseconds (far more in a VM), which is the whole latency budget.
        let mut idle: u32 = 0;
        while !stop.load(Ordering::Acquire) {
            // An application thread polls for itself: keep off the lock and the rings.
            if self.handoff.should_back_off() {
                self.handoff.back_off(&stop);
                idle = 0;
                continue;
            }
            let sleeping = idle >= self.thread_spin.saturating_add(self.thread_yields);
            let token = if sleeping {
                src.prepare()
            } else {
                (0, Duration::MAX)
            };
            // At the application's level while the engine lock may be held (see
            // `BelowApplication`), the background services included.
            let raised = below.as_ref().map(BelowApplication::raise);
            let (n, busy, completed, deadline) = {
                let mut e = self.lock();
                let before = e.core.completions;
                let n = src.poll(&mut e).unwrap_or(0);
                let completed = e.core.completions != before;
                self.publish(&e, before);
                (n, e.core_has_outgoing(), completed, src.deadline(&e))
            };
            // Background services (RMA targets) answer now, not when the application next
            // calls MPI: passive target progresses on its own. Not only after this
            // thread's completions: an application thread that polled in a wait (while
            // this one backed off) may have completed a service's receive in the pass that
            // ended its wait, and gone to compute without running the services.
            // What they did (a counter an application thread waits on) is news too.
            let served = self.take_services_due() && self.advance_services();
            drop(raised);
            if served {
                self.completion_bell.ring();
            }
            if n > 0 || served {
                idle = 0;
                if sleeping {
                    src.cancel();
                }
                if completed {
                    // An application thread may be waiting for this: let it run now
                    // rather than after this thread's next spins (they may share a core).
                    std::thread::yield_now();
                }
                continue;
            }
            idle = idle.saturating_add(1);
            if !sleeping {
                if idle < self.thread_spin {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            let t = if busy {
                Duration::from_micros(50)
            } else {
                Duration::from_millis(20)
            };
            src.sleep(token, until_deadline(t, deadline));
        }
    }

    /// Run one non-blocking progress step (MPI_Test-style calls use it).
    pub fn progress(&self) -> MpiResult<()> {
        let e = self.step()?;
        if let Some(f) = &e.core.fault {
            return Err(f.clone());
        }
        Ok(())
    }

    /// One non-blocking step of the one progress path: advance the outstanding schedules,
    /// then poll the transports (polling engine, or threaded engine whose progress threads
    /// back off while an application thread waits: see [`Handoff`]). Returns the engine,
    /// locked.
    pub(super) fn step(&self) -> MpiResult<engine_lock::EngineGuard<'_>> {
        self.advance_schedules();
        let mut e = self.lock();
        if self.steps_poll() {
            self.poll_here(&mut e)?;
        }
        Ok(e)
    }

    /// Whether a non-blocking step (MPI_Test, MPI_Iprobe, a collective's idle round) polls
    /// the transports itself: always under the polling engine; under the threaded engine
    /// while the progress threads nap, and always where they run below the application's
    /// real-time priority (a step that spins at the application's level could otherwise
    /// keep them from ever running and wait for them forever).
    #[inline]
    pub(super) fn steps_poll(&self) -> bool {
        self.mode == ProgressMode::Polling || self.progress_below_app || self.handoff.napping()
    }

    /// Poll every transport and do the deferred work from this (application) thread.
    /// Under the threaded engine, completions are published as the progress threads
    /// publish theirs.
    #[inline]
    pub(super) fn poll_here(&self, e: &mut Engine) -> MpiResult<usize> {
        if self.mode == ProgressMode::Polling {
            return e.progress();
        }
        let before = e.core.completions;
        let n = e.progress();
        self.publish(e, before);
        n
    }

    /// Threaded engine: tell the threads parked on the completion doorbell that requests
    /// completed since the engine's counter read `before` (or that the engine failed).
    /// The counter is stored before the ring: a parked thread reads it after announcing
    /// itself on the doorbell, so it sees the new value or is woken (`futex.rs`).
    ///
    /// Any completion may be what a background service (RMA target) waits for: it makes
    /// the services due for the progress threads ([`Runtime::take_services_due`]). Stored
    /// under the engine lock after the completion, so a service run after taking the flag
    /// sees the request complete; a completion after the take sets it again.
    #[inline]
    pub(super) fn publish(&self, e: &Engine, before: u64) {
        if e.core.completions != before || e.core.fault.is_some() {
            self.completed.store(e.core.completions, Ordering::Release);
            self.services_due.store(true, Ordering::Release);
            self.completion_bell.ring();
        }
    }

    /// Threaded engine, progress thread: whether requests completed (by any thread) since
    /// the last call, so that the background services must run. Clears the flag.
    #[inline]
    fn take_services_due(&self) -> bool {
        self.services_due.load(Ordering::Relaxed) && self.services_due.swap(false, Ordering::AcqRel)
    }

    /// Block until `done` is true, making progress meanwhile.
    ///
    /// Both engines poll from this thread first (spin, then yield). The polling engine then
    /// sleeps on the transports; the threaded engine parks: it leaves the transports to the
    /// progress threads (which back off while a waiter polls, see [`Handoff`]) and sleeps on
    /// the completion doorbell they ring.
    pub(super) fn block_until(
        &self,
        mut done: impl FnMut(&mut Engine) -> MpiResult<bool>,
    ) -> MpiResult<()> {
        let mut iter: u32 = 0;
        let multiple = self.thread_level == ThreadLevel::Multiple;
        // Read the clock only when stall reports are on: every blocking call comes here.
        let mut report_after = self.stall_report.map(|t| (Instant::now(), t));
        // When the passes and yields ran out (polling engine, `nap_yield` > 0).
        let mut yields_out: Option<Instant> = None;
        let mut ticket =
            (self.mode == ProgressMode::Threaded).then(|| WaitTicket::enter(&self.handoff));
        // A parked waiter whose sleep ended without a completion polls once itself, so a
        // wait never depends only on the progress threads getting a core (they may run
        // below the application's real-time priority, `progress_below_app`). There it
        // sleeps 1 ms at a time: with more ranks than cores, application threads spinning
        // at their level keep every progress thread off the cores, and a parked rank then
        // answers its peers (a single-copy read, a schedule's next step) only at these
        // polls (the C suite's nonblocking collectives on 4 ranks on 2 cores, forced below:
        // over 60 s with 20 ms sleeps).
        let mut poll_once = false;
        let parked_sleep = if self.progress_below_app {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(20)
        };
        loop {
            // Schedules advance outside the engine lock (they make requests of their own).
            self.advance_schedules();
            let mut e = self.lock();
            // Completions seen by the schedules just advanced: any later one may let a
            // schedule go on, so the polling engine must not sleep past it.
            let advanced_at = e.core.completions;
            if let Some((since, _)) = report_after.filter(|(since, t)| since.elapsed() > *t) {
                report_after = None;
                eprintln!(
                    "tsunagi: rank {} has waited {:?}:\n{}",
                    self.rank,
                    since.elapsed(),
                    e.core.stall_report()
                );
            }
            if ticket.as_ref().is_some_and(|t| t.parked) && !std::mem::take(&mut poll_once) {
                if let Some(f) = &e.core.fault {
                    return Err(f.clone());
                }
            } else {
                self.poll_here(&mut e)?;
            }
            if done(&mut e)? {
                return Ok(());
            }
            iter = iter.saturating_add(1);
            if iter < self.spin {
                drop(e);
                // Between passes: a pause under MPI_THREAD_MULTIPLE (it leaves other
                // threads a window to take the lock); in serial mode a fence and a pause
                // that pace the loop (below); otherwise nothing, the mutex's locked
                // instructions pace it. A pause costs ~25 ns on this machine's cores (more
                // on recent Intel ones), up to half of which adds to the latency of
                // noticing a message. Ranks that outnumber the cores spin only a few
                // passes.
                if multiple {
                    std::hint::spin_loop();
                } else if self.engine.is_serial() {
                    // Without the mutex's two locked instructions (`engine_lock.rs`) the
                    // pass is too fast: polling the ring line that the sender is writing
                    // takes it back before the sender's record is complete, and 8-byte
                    // ping-pong latency rose from 0.22 to 0.27 µs. One full fence per
                    // pass kept the old pace; once MPI_Send and MPI_Recv lost their
                    // store-forwarding stalls (c-abi's borrowing entry closures, the
                    // request's field order) that pace was too fast again (0.21-0.26 µs,
                    // bimodal), and a fence and a pause per pass gave 0.19-0.20 µs.
                    std::sync::atomic::fence(Ordering::SeqCst);
                    std::hint::spin_loop();
                }
                continue;
            }
            if iter < self.spin.saturating_add(self.yields) {
                drop(e);
                std::thread::yield_now();
                continue;
            }
            if ticket.is_none() && !self.nap_yield.is_zero() {
                // A transport that no arrival wakes: yield on for as long as its nap.
                let since = *yields_out.get_or_insert_with(Instant::now);
                if since.elapsed() < self.nap_yield {
                    drop(e);
                    std::thread::yield_now();
                    continue;
                }
            }
            if let Some(ticket) = &mut ticket {
                // Threaded engine, idle for a while: hand the transports to the progress
                // threads (the last poller to leave wakes them) and sleep until one of them
                // (or another application thread) completes something. Under the lock no
                // completion can happen between `done` above and reading `seen`; one after
                // the unlock stores the counter before it rings, and we announced ourselves
                // on the doorbell before reading the counter again: we see the new value or
                // the ring ends the sleep.
                ticket.park();
                let seen = self.completed.load(Ordering::Acquire);
                let token = self.completion_bell.prepare();
                drop(e);
                if self.completed.load(Ordering::Acquire) == seen {
                    self.completion_bell.sleep(token, parked_sleep);
                    poll_once = self.completed.load(Ordering::Acquire) == seen;
                } else {
                    self.completion_bell.cancel();
                }
                continue;
            }
            // Polling engine, idle for a while: sleep on the transports.
            if self.sources.is_empty() {
                drop(e);
                std::thread::yield_now();
                continue;
            }
            if let Some(registry) = &self.registry {
                // One wait over every transport.
                let limit = registry.prepare();
                let n = e.progress()?;
                let finished = done(&mut e)?;
                if n > 0 || finished {
                    registry.cancel();
                    if finished {
                        return Ok(());
                    }
                    continue;
                }
                if self.nschedules.load(Ordering::Acquire) > 0 && e.core.completions != advanced_at
                {
                    registry.cancel();
                    continue;
                }
                let timeout = if e.core_has_outgoing() {
                    Duration::from_micros(50)
                } else {
                    Duration::from_millis(20)
                };
                let deadline = e.router.next_deadline();
                drop(e);
                registry.sleep(until_deadline(timeout, deadline).min(limit));
                continue;
            }
            let tokens: Vec<u64> = self.sources.iter().map(|(_, s)| s.prepare()).collect();
            let n = e.progress()?;
            // Ask `done` once: it may collect what it finds (waitall does), so a second
            // call right after a `true` can answer `false` and the wait would go on forever.
            let finished = done(&mut e)?;
            if n > 0 || finished {
                for (_, s) in &self.sources {
                    s.cancel();
                }
                if finished {
                    return Ok(());
                }
                continue;
            }
            if self.nschedules.load(Ordering::Acquire) > 0 && e.core.completions != advanced_at {
                for (_, s) in &self.sources {
                    s.cancel();
                }
                continue;
            }
            let busy = e.core_has_outgoing();
            let deadline = e.router.next_deadline();
            drop(e);
            // One thread can block on one event source only. With several transports
            // (shared memory's futex, a socket's epoll) take turns, with short sleeps, so
            // that an arrival on any of them is seen within ~100 µs.
            let n = self.sources.len();
            let timeout = if busy {
                Duration::from_micros(50)
            } else if n > 1 {
                Duration::from_micros(100)
            } else {
                Duration::from_millis(20)
            };
            let turn = self.sleep_turn.fetch_add(1, Ordering::Relaxed) % n;
            self.sources[turn]
                .1
                .sleep(tokens[turn], until_deadline(timeout, deadline));
            for (i, (_, s)) in self.sources.iter().enumerate() {
                if i != turn {
                    s.cancel();
                }
            }
        }
    }
}

/// A sleep of at most `timeout` that also ends at a transport's timer deadline.
fn until_deadline(timeout: Duration, deadline: Option<Instant>) -> Duration {
    match deadline {
        None => timeout,
        Some(d) => timeout.min(d.saturating_duration_since(Instant::now())),
    }
}

/// The calling thread's real-time priority: `Some((policy, level))` under `SCHED_RR` or
/// `SCHED_FIFO`, None under the normal policies.
pub(super) fn realtime_priority() -> Option<(libc::c_int, libc::c_int)> {
    // SAFETY: both calls ask about the calling thread (pid 0) and write only into
    // `param`, a valid `sched_param` on our stack.
    unsafe {
        let policy = libc::sched_getscheduler(0);
        if policy != libc::SCHED_RR && policy != libc::SCHED_FIFO {
            return None;
        }
        let mut param: libc::sched_param = std::mem::zeroed();
        if libc::sched_getparam(0, &mut param) != 0 {
            return None;
        }
        Some((policy, param.sched_priority))
    }
}

/// A progress thread's two real-time levels when it runs below the application
/// (`progress_below_app` in `runtime/mod.rs`, which decides that there is a level below):
/// it waits, sleeps and spins one level below, and holds the engine lock at the
/// application's level.
///
/// Why the lock at the application's level: a progress thread preempted while it holds
/// the lock would keep it for as long as threads at the application's level fill the cores,
/// and its own application thread would sleep on the lock all that time. With more ranks
/// than cores, the other ranks' application threads spinning in `MPI_Test` loops can fill
/// them for good: the C suite's nonblocking collectives on 4 ranks on 2 cores over Open MPI
/// hung that way, one application thread asleep on the lock and its progress thread
/// runnable and never run. The kernel's priority inheritance would do the same for a
/// `PTHREAD_PRIO_INHERIT` mutex; two system calls per pass of a thread that runs only on
/// cores the application leaves idle cost less than every lock of the application going
/// through one.
struct BelowApplication {
    policy: libc::c_int,
    app: libc::c_int,
}

impl BelowApplication {
    /// In a progress thread: move it one level below the application's (the level it was
    /// started at). None, and the thread where it was, without a real-time policy or
    /// where the change fails: the priority is a matter of speed.
    fn enter() -> Option<BelowApplication> {
        let (policy, app) = realtime_priority()?;
        let below = BelowApplication { policy, app };
        below.set(app - 1).then_some(below)
    }

    /// Hold the application's level until the guard is dropped.
    fn raise(&self) -> RaisedToApplication<'_> {
        self.set(self.app);
        RaisedToApplication(self)
    }

    fn set(&self, level: libc::c_int) -> bool {
        let param = libc::sched_param {
            sched_priority: level,
        };
        // SAFETY: changes only the calling thread (Linux applies it per thread) and reads
        // `param`, a valid `sched_param` on our stack.
        unsafe { libc::sched_setscheduler(0, self.policy, &param) == 0 }
    }
}

/// A progress thread at the application's level ([`BelowApplication::raise`]); one level
/// below again when dropped.
struct RaisedToApplication<'a>(&'a BelowApplication);

impl Drop for RaisedToApplication<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.app - 1);
    }
}

/// What a progress thread waits on and polls: one transport (or device) by its index in
/// the router's event sources, or every one of them through the registry.
enum Waiter<'a> {
    One(usize, Arc<dyn EventSource>),
    All(&'a EventRegistry),
}

impl Waiter<'_> {
    /// Announce the wait: a token for `sleep` and the longest it may last.
    fn prepare(&self) -> (u64, Duration) {
        match self {
            Waiter::One(_, s) => (s.prepare(), Duration::MAX),
            Waiter::All(r) => (0, r.prepare()),
        }
    }

    fn cancel(&self) {
        match self {
            Waiter::One(_, s) => s.cancel(),
            Waiter::All(r) => r.cancel(),
        }
    }

    fn sleep(&self, (token, limit): (u64, Duration), timeout: Duration) {
        match self {
            Waiter::One(_, s) => s.sleep(token, timeout),
            Waiter::All(r) => r.sleep(timeout.min(limit)),
        }
    }

    /// Poll what this thread serves, then do the deferred work.
    fn poll(&self, e: &mut Engine) -> MpiResult<usize> {
        match self {
            Waiter::One(idx, _) => e.progress_one(*idx),
            Waiter::All(_) => e.progress(),
        }
    }

    /// The next timer deadline of what this thread serves.
    fn deadline(&self, e: &Engine) -> Option<Instant> {
        match self {
            Waiter::One(idx, _) => e.router.deadline_of(*idx),
            Waiter::All(_) => e.router.next_deadline(),
        }
    }
}

/// Threaded engine: who polls the transports, the progress threads or the application
/// threads that wait.
///
/// An application thread blocked in a wait polls the transports itself for a bounded time
/// (spin, then yield: the polling engine's policy) and only then hands the wait over to the
/// progress threads and sleeps on the completion doorbell. While it polls, the progress
/// threads back off: they nap on [`Handoff::bell`] instead of spinning on the engine lock
/// and the rings, so the two threads of a rank neither take turns on one core for every
/// message (a context switch each way) nor bounce the engine's cache lines between cores.
/// A napping progress thread comes back when the waiter hands over (it rings the bell) or
/// when no application thread entered a wait during a whole nap (the program computes:
/// asynchronous progress resumes within one or two naps). Meanwhile MPI_Test and the other
/// non-blocking steps poll the transports themselves, as under the polling engine.
///
/// Completions that an application thread makes while it polls are published like the
/// progress threads' ([`Runtime::publish`]), so another thread parked on the doorbell
/// (MPI_THREAD_MULTIPLE) hears of them.
///
/// Aligned to its own cache lines: every wait writes `waiting`, which must not share a
/// line with the engine's mutex or the counters the progress threads write.
#[repr(align(128))]
#[derive(Default)]
pub(super) struct Handoff {
    /// Low 32 bits: application threads polling in a wait now. High 32 bits: how many
    /// waits were entered (wrapping), so that a progress thread can tell a quiet nap from
    /// one during which the program kept calling MPI.
    waiting: AtomicU64,
    /// Application threads that handed their wait over and sleep on the completion
    /// doorbell: the progress threads must run for them.
    parked: AtomicU32,
    /// Progress threads backing off now. While any does, non-blocking steps poll.
    napping: AtomicU32,
    /// Where backed-off progress threads nap; rung when a wait is handed over and at
    /// finalize.
    bell: DoorbellWords,
}

/// One entered wait (the low half of [`Handoff::waiting`]) plus one entry (the high half).
const ENTER: u64 = (1 << 32) | 1;
/// First and longest nap of a backed-off progress thread.
const NAP_MIN: Duration = Duration::from_micros(50);
const NAP_MAX: Duration = Duration::from_micros(800);

fn polling_now(waiting: u64) -> u32 {
    waiting as u32
}

impl Handoff {
    /// Whether a progress thread should back off: an application thread polls for itself.
    #[inline]
    fn should_back_off(&self) -> bool {
        polling_now(self.waiting.load(Ordering::Relaxed)) > 0
    }

    /// Whether the progress threads are backed off, so that a non-blocking step must poll.
    #[inline]
    pub(super) fn napping(&self) -> bool {
        self.napping.load(Ordering::Relaxed) > 0
    }

    /// Nap until an application thread hands a wait over, or no application thread
    /// entered a wait during a whole nap and none polls now, or `stop`.
    ///
    /// No lost hand-over: the parking thread increments `parked`, then decrements
    /// `waiting`, and the thread that takes `waiting`'s low half to zero rings the bell if
    /// `parked` is non-zero (SeqCst throughout). Here: announce on the bell (its `sleeping`
    /// word), read its count as token, then read `waiting` and `parked`. If these reads
    /// miss the last decrement, it comes later in the single total order than the token
    /// read, and so does the ring's count increment: the futex wait returns at once (count
    /// differs from the token) or the ringer sees our announcement and wakes us. If they
    /// see it, they also see `parked` (incremented before it, by the parking thread; or,
    /// when another poller left last, read by it after its decrement, which follows the
    /// parking thread's in `waiting`'s modification order) and we return without sleeping.
    fn back_off(&self, stop: &AtomicBool) {
        self.back_off_naps(stop, NAP_MIN, NAP_MAX)
    }

    /// [`Handoff::back_off`] with naps from `first` doubling up to `longest`.
    fn back_off_naps(&self, stop: &AtomicBool, first: Duration, longest: Duration) {
        self.napping.fetch_add(1, Ordering::SeqCst);
        let mut seen = None;
        let mut nap = first;
        loop {
            let token = self.bell.prepare();
            // Finalize sets `stop`, then rings: we see it here, or the ring comes after
            // our token and the sleep below returns at once.
            if stop.load(Ordering::Acquire) {
                self.bell.cancel();
                break;
            }
            let now = self.waiting.load(Ordering::SeqCst);
            let quiet = seen == Some(now);
            if polling_now(now) == 0 && (quiet || self.parked.load(Ordering::SeqCst) > 0) {
                self.bell.cancel();
                break;
            }
            seen = Some(now);
            self.bell.sleep(token, nap);
            nap = (nap * 2).min(longest);
        }
        self.napping.fetch_sub(1, Ordering::SeqCst);
    }

    /// Ring the bell: a parked waiter needs the progress threads.
    fn ring(&self) {
        self.bell.ring();
    }

    /// Finalize: napping progress threads return (after `stop` is set) to see `stop`.
    pub(super) fn stop(&self) {
        self.bell.ring();
    }
}

/// An application thread's wait under the threaded engine: polling for itself (counted in
/// [`Handoff::waiting`]), or parked on the completion doorbell (counted in
/// [`Handoff::parked`]). Dropping it (the wait ended, or returned an error) uncounts it.
struct WaitTicket<'a> {
    handoff: &'a Handoff,
    parked: bool,
}

impl<'a> WaitTicket<'a> {
    fn enter(handoff: &'a Handoff) -> Self {
        handoff.waiting.fetch_add(ENTER, Ordering::SeqCst);
        WaitTicket {
            handoff,
            parked: false,
        }
    }

    /// Stop polling and leave the transports to the progress threads.
    fn park(&mut self) {
        if !self.parked {
            self.parked = true;
            self.handoff.parked.fetch_add(1, Ordering::SeqCst);
            self.leave_polling();
        }
    }

    /// Uncount this poller; the last one out wakes the progress threads if a waiter is
    /// parked (ordering: see [`Handoff::back_off`]).
    fn leave_polling(&self) {
        let before = self.handoff.waiting.fetch_sub(1, Ordering::SeqCst);
        if polling_now(before) == 1 && self.handoff.parked.load(Ordering::SeqCst) > 0 {
            self.handoff.ring();
        }
    }
}

impl Drop for WaitTicket<'_> {
    fn drop(&mut self) {
        if self.parked {
            self.handoff.parked.fetch_sub(1, Ordering::SeqCst);
        } else {
            self.leave_polling();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    const LONG: Duration = Duration::from_secs(30);

    /// Run `back_off_naps` on a thread; returns its handle.
    fn napper(
        h: &Arc<Handoff>,
        stop: &Arc<AtomicBool>,
        first: Duration,
        longest: Duration,
    ) -> std::thread::JoinHandle<Duration> {
        let (h, stop) = (h.clone(), stop.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            h.back_off_naps(&stop, first, longest);
            t.elapsed()
        })
    }

    fn wait_napping(h: &Handoff) {
        let t = Instant::now();
        while !h.napping() {
            assert!(t.elapsed() < Duration::from_secs(10), "never backed off");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_parked_waiter_ends_the_back_off_at_once() {
        let h = Arc::new(Handoff::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut ticket = WaitTicket::enter(&h);
        // Naps of 30 s: only the hand-over's ring can end this back-off in time.
        let j = napper(&h, &stop, LONG, LONG);
        wait_napping(&h);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!j.is_finished(), "backed off only while a waiter polls");
        ticket.park();
        let took = j.join().unwrap();
        assert!(took < Duration::from_secs(10), "hand-over lost: {took:?}");
        assert!(!h.napping());
        drop(ticket);
        assert_eq!(h.waiting.load(Ordering::SeqCst) as u32, 0);
        assert_eq!(h.parked.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_last_poller_out_wakes_the_progress_threads_for_a_parked_one() {
        let h = Arc::new(Handoff::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut parked = WaitTicket::enter(&h);
        let polling = WaitTicket::enter(&h);
        let j = napper(&h, &stop, LONG, LONG);
        wait_napping(&h);
        // Another thread still polls for everyone: no need for the progress threads yet.
        parked.park();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!j.is_finished(), "resumed while a waiter still polls");
        drop(polling);
        let took = j.join().unwrap();
        assert!(took < Duration::from_secs(10), "hand-over lost: {took:?}");
        drop(parked);
    }

    #[test]
    fn back_off_lasts_while_the_program_keeps_waiting_and_ends_when_it_computes() {
        let h = Arc::new(Handoff::default());
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = WaitTicket::enter(&h);
        let j = napper(
            &h,
            &stop,
            Duration::from_millis(1),
            Duration::from_millis(4),
        );
        wait_napping(&h);
        drop(t0);
        // Short waits, 0.5 ms apart, for 100 ms: every nap sees a new one.
        let busy = Instant::now();
        while busy.elapsed() < Duration::from_millis(100) {
            drop(WaitTicket::enter(&h));
            std::thread::sleep(Duration::from_micros(500));
        }
        assert!(!j.is_finished(), "resumed while the program kept waiting");
        // Then no wait at all: a quiet nap (4 ms, twice at most) ends the back-off.
        let quiet = Instant::now();
        j.join().unwrap();
        assert!(quiet.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn stop_ends_the_back_off() {
        let h = Arc::new(Handoff::default());
        let stop = Arc::new(AtomicBool::new(false));
        let _ticket = WaitTicket::enter(&h);
        let j = napper(&h, &stop, LONG, LONG);
        wait_napping(&h);
        stop.store(true, Ordering::Release);
        h.stop();
        assert!(j.join().unwrap() < Duration::from_secs(10));
    }

    /// The hand-over race, many times: a progress thread that backs off whenever a waiter
    /// polls, with naps long enough that a lost ring shows as a hang.
    #[test]
    fn no_hand_over_is_lost() {
        let h = Arc::new(Handoff::default());
        let stop = Arc::new(AtomicBool::new(false));
        let resumed = Arc::new(AtomicUsize::new(0));
        let progress = {
            let (h, stop, resumed) = (h.clone(), stop.clone(), resumed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    if h.should_back_off() {
                        h.back_off_naps(&stop, LONG, LONG);
                        resumed.fetch_add(1, Ordering::SeqCst);
                    } else {
                        std::thread::yield_now();
                    }
                }
            })
        };
        for _ in 0..2000 {
            let before = resumed.load(Ordering::SeqCst);
            let mut t = WaitTicket::enter(&h);
            wait_napping(&h);
            t.park();
            let since = Instant::now();
            while resumed.load(Ordering::SeqCst) == before {
                assert!(since.elapsed() < Duration::from_secs(10), "hand-over lost");
                std::thread::yield_now();
            }
            drop(t);
        }
        stop.store(true, Ordering::Release);
        h.stop();
        progress.join().unwrap();
    }
}
