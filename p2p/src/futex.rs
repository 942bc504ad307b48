//! Futex-based doorbells: the sleeping half of "spin briefly, then sleep".
//!
//! A [`DoorbellWords`] is two 32-bit words, a ring counter and a sleeper flag, which may live in
//! process-private memory or in a shared-memory segment (the futex calls below are the
//! shared, non-`PRIVATE` kind so that they work across processes).
//!
//! Ordering: a waker publishes its message, then `ring()`s: a SeqCst increment of `count`
//! followed by a SeqCst load of `sleeping`, and a FUTEX_WAKE only if someone sleeps. A
//! sleeper stores `sleeping = 1` (SeqCst), loads `count` (SeqCst) as its token, polls once
//! more, then waits while `count == token`. With both sides SeqCst, either the waker sees
//! the sleeper's flag or the sleeper's last poll sees the message: no lost wake-up, and the
//! common case (nobody asleep) costs the sender one atomic add and no system call.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::EventSource;

/// Wait on the futex word at `word` while it equals `expected`, at most `timeout`.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned AtomicU32 for the duration of the call; the kernel
    // only reads it. The timespec lives on our stack. EINTR/EAGAIN/ETIMEDOUT are all fine:
    // callers treat any return as "maybe something happened".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wake up to `n` waiters on the futex word at `word`.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a valid AtomicU32; FUTEX_WAKE does not access memory through it.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n);
    }
}

/// The two words of a doorbell, laid out for placement in shared memory.
#[repr(C)]
#[derive(Default)]
pub struct DoorbellWords {
    /// Incremented by every ring.
    pub count: AtomicU32,
    /// Number of threads that announced they are about to sleep.
    pub sleeping: AtomicU32,
}

impl DoorbellWords {
    /// Ring: make a sleeper (if any) return. Call after publishing the event.
    #[inline]
    pub fn ring(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) != 0 {
            futex_wake(&self.count, i32::MAX);
        }
    }

    /// Announce the intent to sleep; returns the token for [`DoorbellWords::sleep`].
    #[inline]
    pub fn prepare(&self) -> u64 {
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        self.count.load(Ordering::SeqCst) as u64
    }

    /// Sleep while no ring happened since `prepare` returned `token`; withdraws the intent.
    pub fn sleep(&self, token: u64, timeout: Duration) {
        if self.count.load(Ordering::SeqCst) as u64 == token {
            futex_wait(&self.count, token as u32, timeout);
        }
        self.sleeping.fetch_sub(1, Ordering::SeqCst);
    }

    /// Withdraw the intent to sleep.
    #[inline]
    pub fn cancel(&self) {
        self.sleeping.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A process-private doorbell usable as an [`EventSource`].
#[derive(Default)]
pub struct LocalDoorbell {
    words: DoorbellWords,
}

impl LocalDoorbell {
    /// A new doorbell in an `Arc`, ready to hand out as an event source.
    pub fn new() -> Arc<LocalDoorbell> {
        Arc::new(LocalDoorbell::default())
    }
    /// Ring it.
    pub fn ring(&self) {
        self.words.ring()
    }
}

impl EventSource for LocalDoorbell {
    fn prepare(&self) -> u64 {
        self.words.prepare()
    }
    fn sleep(&self, token: u64, timeout: Duration) {
        self.words.sleep(token, timeout)
    }
    fn cancel(&self) {
        self.words.cancel()
    }
    fn notify(&self) {
        self.words.ring()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn ring_before_sleep_returns_at_once() {
        let d = LocalDoorbell::new();
        let t = d.prepare();
        d.ring();
        let start = Instant::now();
        d.sleep(t, Duration::from_secs(5));
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn ring_from_other_thread_wakes_sleeper() {
        let d = LocalDoorbell::new();
        let d2 = d.clone();
        let t = d.prepare();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            d2.ring();
        });
        let start = Instant::now();
        d.sleep(t, Duration::from_secs(10));
        assert!(start.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
    }

    #[test]
    fn sleep_times_out_without_ring() {
        let d = LocalDoorbell::new();
        let t = d.prepare();
        let start = Instant::now();
        d.sleep(t, Duration::from_millis(30));
        assert!(start.elapsed() >= Duration::from_millis(25));
    }
}
