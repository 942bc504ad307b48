//! Progress: the threaded engine's progress threads, one non-blocking step, and how a
//! blocking call waits (spin, yield, then sleep on the transports' event sources or on the
//! completion doorbell).

use super::*;
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
        // Poll, then spin and yield for a while before sleeping: a futex wake-up costs tens
        // of microseconds (far more in a VM), which is the whole latency budget.
        let mut idle: u32 = 0;
        while !stop.load(Ordering::Acquire) {
            let sleeping = idle >= self.thread_spin.saturating_add(self.thread_yields);
            let token = if sleeping {
                src.prepare()
            } else {
                (0, Duration::MAX)
            };
            let (n, busy, completed, deadline) = {
                let mut e = self.lock();
                let before = e.core.completions;
                let n = src.poll(&mut e).unwrap_or(0);
                let completed = e.core.completions != before;
                if completed || e.core.fault.is_some() {
                    self.completed.store(e.core.completions, Ordering::Release);
                    self.completion_bell.ring();
                }
                (n, e.core_has_outgoing(), completed, src.deadline(&e))
            };
            if n > 0 {
                idle = 0;
                if sleeping {
                    src.cancel();
                }
                if completed {
                    // Background services (RMA targets) answer now, not when the
                    // application next calls MPI: passive target progresses on its own.
                    // What they did (a counter an application thread waits on) is news too.
                    if self.advance_services() {
                        self.completion_bell.ring();
                    }
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
    /// then (polling engine) poll the transports. Returns the engine, locked.
    pub(super) fn step(&self) -> MpiResult<engine_lock::EngineGuard<'_>> {
        self.advance_schedules();
        let mut e = self.lock();
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        }
        Ok(e)
    }

    /// Block until `done` is true, making progress meanwhile.
    pub(super) fn block_until(
        &self,
        mut done: impl FnMut(&mut Engine) -> MpiResult<bool>,
    ) -> MpiResult<()> {
        let mut iter: u32 = 0;
        let threaded = self.mode == ProgressMode::Threaded;
        let multiple = self.thread_level == ThreadLevel::Multiple;
        // Read the clock only when stall reports are on: every blocking call comes here.
        let mut report_after = self.stall_report.map(|t| (Instant::now(), t));
        // When the passes and yields ran out (polling engine, `nap_yield` > 0).
        let mut yields_out: Option<Instant> = None;
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
            if threaded {
                if let Some(f) = &e.core.fault {
                    return Err(f.clone());
                }
            } else {
                e.progress()?;
            }
            if done(&mut e)? {
                return Ok(());
            }
            iter = iter.saturating_add(1);
            let (spin, yields) = if threaded {
                (0, 0)
            } else {
                (self.spin, self.yields)
            };
            if iter < spin {
                drop(e);
                // No pause instruction between passes unless other threads may want the
                // lock (MPI_THREAD_MULTIPLE: a pause leaves them a window to take it). It
                // costs ~25 ns on this machine's cores (more on recent Intel ones), half of
                // which adds to the latency of noticing a message, and the pass itself (a
                // lock, a look at every ring) paces the loop. Ranks that outnumber the
                // cores spin only a few passes.
                if multiple {
                    std::hint::spin_loop();
                } else if self.engine.is_serial() {
                    // Without the mutex's two locked instructions (`engine_lock.rs`) the
                    // pass is too fast: polling the ring line that the sender is writing
                    // takes it back before the sender's record is complete, and 8-byte
                    // ping-pong latency rose from 0.22 to 0.27 µs. One full fence per
                    // pass keeps the old pace.
                    std::sync::atomic::fence(Ordering::SeqCst);
                }
                continue;
            }
            if iter < spin.saturating_add(yields) {
                drop(e);
                std::thread::yield_now();
                continue;
            }
            if !threaded && !self.nap_yield.is_zero() {
                // A transport that no arrival wakes: yield on for as long as its nap.
                let since = *yields_out.get_or_insert_with(Instant::now);
                if since.elapsed() < self.nap_yield {
                    drop(e);
                    std::thread::yield_now();
                    continue;
                }
            }
            if threaded {
                // Wait for a progress thread to complete something: watch the counter
                // without the lock, yielding, and sleep on the completion doorbell only
                // after a while.
                let seen = self.completed.load(Ordering::Acquire);
                let token = self.completion_bell.prepare();
                if done(&mut e)? {
                    self.completion_bell.cancel();
                    return Ok(());
                }
                drop(e);
                let mut waited: u32 = 0;
                while self.completed.load(Ordering::Acquire) == seen && waited < self.yields {
                    std::thread::yield_now();
                    waited += 1;
                }
                if self.completed.load(Ordering::Acquire) == seen {
                    self.completion_bell.sleep(token, Duration::from_millis(20));
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
