//! The engine's lock, which takes no atomic read-modify-write while the program promises
//! that its MPI calls never overlap.
//!
//! A `std::sync::Mutex` costs two locked instructions per MPI call (the compare-exchange
//! that takes it and the exchange that releases it). Besides their own ~20 cycles, each is
//! a full barrier: the store buffer drains before it completes. A small send stores its
//! record into a ring line that the receiving core holds (it spins on it), so the release
//! right after the send waited for that line to come over, once per message: a
//! stand-alone producer/consumer test on this 2-core VM streamed 64-byte records at
//! 270 M/s, and at 18.5 M/s with one uncontended lock/unlock pair after each record
//! (docs/performance.md, "Session 10: message rate and small-message bandwidth").
//!
//! MPI_THREAD_SINGLE, FUNNELED and SERIALIZED promise exactly what a lock would give:
//! no two MPI calls at once, and the program orders the calls of different threads
//! (SERIALIZED) with its own synchronisation, which also orders their memory accesses. So
//! while [`EngineLock::serial`] is set (the C interface sets it, through the unsafe
//! [`super::Runtime::assume_serial_calls`], for a polling engine below MPI_THREAD_MULTIPLE),
//! `lock` hands out the engine with plain loads and stores. Threads of Tsunagi's own that
//! use the runtime (the threaded engine's progress threads, a file's I/O thread, a tool
//! reading performance variables) turn it off for good before they exist
//! ([`super::Runtime::share_engine`]); from then on every lock is the mutex.
//!
//! `held` is a misuse check, not a lock: plain stores of a flag that a second
//! simultaneous caller (a program that broke its thread-level promise) most likely sees,
//! which then fails loudly instead of corrupting the queues.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::engine::Engine;

pub(super) struct EngineLock {
    mutex: Mutex<()>,
    engine: UnsafeCell<Engine>,
    /// The callers are serialised by the program and no thread of ours uses the runtime:
    /// `lock` takes no mutex. Set once after start-up, cleared at most once, never set again.
    serial: AtomicBool,
    /// Serial mode: a guard is alive (misuse check, module doc).
    held: AtomicBool,
}

// SAFETY: the engine is reached only through `lock`, which either holds the mutex or runs
// in serial mode, where the program guarantees (the contract of `assume_serial`) that no two
// threads call it at once and orders their calls; `Engine` is `Send`, so handing it from
// one thread to the next that way is sound.
unsafe impl Sync for EngineLock {}

/// The Sync argument above needs the engine to be `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Engine>();
};

/// The engine, borrowed from [`EngineLock::lock`].
pub(crate) struct EngineGuard<'a> {
    lock: &'a EngineLock,
    /// The mutex held; None in serial mode (`Drop` then clears `held`).
    mutex: Option<MutexGuard<'a, ()>>,
}

impl EngineLock {
    pub(super) fn new(engine: Engine) -> EngineLock {
        EngineLock {
            mutex: Mutex::new(()),
            engine: UnsafeCell::new(engine),
            serial: AtomicBool::new(false),
            held: AtomicBool::new(false),
        }
    }

    #[inline]
    pub(super) fn lock(&self) -> EngineGuard<'_> {
        // Relaxed: the flag changes only on a thread that may call MPI at that moment
        // (serial mode's promise), before any thread of ours that locks exists; program
        // order and thread spawning order the change before every later lock.
        if self.serial.load(Ordering::Relaxed) {
            if self.held.load(Ordering::Relaxed) {
                misuse();
            }
            self.held.store(true, Ordering::Relaxed);
            return EngineGuard {
                lock: self,
                mutex: None,
            };
        }
        // A panic while holding the lock leaves the engine in an unknown state; MPI has no
        // recovery, so keep going with what is there (the job will most likely abort).
        let g = self.mutex.lock().unwrap_or_else(|p| p.into_inner());
        EngineGuard {
            lock: self,
            mutex: Some(g),
        }
    }

    /// Enter serial mode.
    ///
    /// # Safety
    /// Until [`EngineLock::share`] is called, no two threads call `lock` at once, and
    /// the program orders (happens-before) every call of one thread before the next call of
    /// another. No guard may be alive.
    pub(super) unsafe fn assume_serial(&self) {
        self.serial.store(true, Ordering::Relaxed);
    }

    /// Leave serial mode for good: from now on `lock` takes the mutex. Called on a thread
    /// that may call MPI now, before a thread of ours that locks starts; not while this
    /// thread holds a guard (serial mode would then have one caller inside without the
    /// mutex while the next takes it).
    pub(super) fn share(&self) {
        if self.serial.load(Ordering::Relaxed) {
            assert!(
                !self.held.load(Ordering::Relaxed),
                "the engine was shared while this thread holds it"
            );
            self.serial.store(false, Ordering::Relaxed);
        }
    }

    /// Whether `lock` runs without the mutex (for tests and diagnostics).
    pub(super) fn is_serial(&self) -> bool {
        self.serial.load(Ordering::Relaxed)
    }
}

#[cold]
#[inline(never)]
fn misuse() -> ! {
    panic!(
        "two threads are inside MPI at once, which the thread level provided \
         (below MPI_THREAD_MULTIPLE) does not allow; ask MPI_Init_thread for \
         MPI_THREAD_MULTIPLE, or set TSUNAGI_ENGINE_LOCK=1"
    )
}

impl Deref for EngineGuard<'_> {
    type Target = Engine;
    #[inline]
    fn deref(&self) -> &Engine {
        // SAFETY: this guard holds the mutex, or serial mode's promise makes it the only
        // guard alive (EngineLock's Sync argument).
        unsafe { &*self.lock.engine.get() }
    }
}

impl DerefMut for EngineGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Engine {
        // SAFETY: as in `deref`; `&mut self` makes this borrow unique among the guard's.
        unsafe { &mut *self.lock.engine.get() }
    }
}

impl Drop for EngineGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.mutex.is_none() {
            self.lock.held.store(false, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> EngineLock {
        EngineLock::new(Engine::new(0, 2, tsunagi_p2p::Router::new(2)))
    }

    #[test]
    fn serial_mode_hands_out_the_engine_and_shares_for_good() {
        let l = lock();
        assert!(!l.is_serial());
        // SAFETY: one thread, no guard alive.
        unsafe { l.assume_serial() };
        assert!(l.is_serial());
        {
            let g = l.lock();
            assert!(g.mutex.is_none());
        }
        l.share();
        assert!(!l.is_serial());
        let g = l.lock();
        assert!(g.mutex.is_some());
        drop(g);
        // A second share changes nothing.
        l.share();
        assert!(l.lock().mutex.is_some());
    }

    #[test]
    #[should_panic(expected = "two threads are inside MPI at once")]
    fn a_second_guard_in_serial_mode_fails_loudly() {
        let l = lock();
        // SAFETY: one thread; the second lock below is the misuse the check must catch.
        unsafe { l.assume_serial() };
        let _a = l.lock();
        let _b = l.lock();
    }

    #[test]
    #[should_panic(expected = "shared while this thread holds it")]
    fn sharing_while_holding_fails() {
        let l = lock();
        // SAFETY: one thread, no guard alive.
        unsafe { l.assume_serial() };
        let _a = l.lock();
        l.share();
    }
}
