//! One event registry that every progress engine waits on: an epoll set holding each event
//! source's descriptor ([`EventSource::wait_fd`]), so that a rank with several transports
//! (shared memory and TCP) sleeps in one system call and wakes for an arrival on any of
//! them, instead of taking turns with short sleeps on one source at a time.
//!
//! The wait keeps the sources' no-lost-wake-up protocol: [`EventRegistry::prepare`]
//! announces the wait to every source (`prepare_wait`), the caller polls its transports once
//! more, and only then [`EventRegistry::sleep`]s (or [`EventRegistry::cancel`]s); a message
//! published after `prepare` makes its source's descriptor readable, so the sleep returns.
//! The timeout has nanosecond resolution (`epoll_pwait2`): a 50 µs sleep is not a
//! millisecond one.
//!
//! A source whose arrivals show on no descriptor (the vendor MPI's) joins as a polled
//! source: its descriptor only carries [`EventSource::notify`], and its `prepare_wait`
//! bounds every wait to its polling interval.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::EventSource;

/// Several event sources behind one epoll descriptor.
pub struct EventRegistry {
    epfd: OwnedFd,
    sources: Vec<Arc<dyn EventSource>>,
}

impl EventRegistry {
    /// A registry over `sources`, or `None` when one of them has no descriptor to wait on
    /// (then waiters take turns on the sources) or epoll refuses one.
    pub fn new(sources: Vec<Arc<dyn EventSource>>) -> Option<EventRegistry> {
        let fds: Vec<_> = sources.iter().map(|s| s.wait_fd()).collect::<Option<_>>()?;
        // SAFETY: plain system call; the result is checked before use.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return None;
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let epfd = unsafe { OwnedFd::from_raw_fd(raw) };
        for (i, fd) in fds.into_iter().enumerate() {
            // Level-triggered: a descriptor stays readable until its source consumed the
            // event (in `end_wait` or its own poll), so a wake-up cannot be missed by
            // waiting again before the transport ran.
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            // SAFETY: valid epoll descriptor and event; `fd` is kept open by its source,
            // which the registry holds (an Arc) for as long as the epoll set lives.
            let r = unsafe { libc::epoll_ctl(epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
            // One source registered twice (a transport serving both reaches, such as the
            // vendor's) has one descriptor: it is in the set already.
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                return None;
            }
        }
        Some(EventRegistry { epfd, sources })
    }

    /// The sources, in the order given to [`EventRegistry::new`].
    pub fn sources(&self) -> &[Arc<dyn EventSource>] {
        &self.sources
    }

    /// Announce a wait to every source; returns the longest the wait may last (zero when a
    /// source has something pending). Follow with a last poll of the transports, then
    /// [`EventRegistry::sleep`] or [`EventRegistry::cancel`].
    pub fn prepare(&self) -> Duration {
        self.sources
            .iter()
            .map(|s| s.prepare_wait())
            .min()
            .unwrap_or(Duration::MAX)
    }

    /// Wait until a source may have an event, or `timeout`; ends the wait announced by
    /// [`EventRegistry::prepare`].
    pub fn sleep(&self, timeout: Duration) {
        if !timeout.is_zero() {
            let ts = libc::timespec {
                tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
            // SAFETY: valid epoll descriptor, an event array of the length passed, and a
            // timespec on our stack. Any failure (EINTR) reads as "woke up": callers poll
            // again anyway. epoll_pwait2 (Linux 5.11) takes a nanosecond timeout.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.epfd.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                // An older kernel: millisecond resolution, rounded up so that a short
                // sleep does not become a busy poll.
                let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
                // SAFETY: as above.
                unsafe {
                    libc::epoll_wait(
                        self.epfd.as_raw_fd(),
                        events.as_mut_ptr(),
                        events.len() as libc::c_int,
                        ms,
                    )
                };
            }
        }
        self.cancel();
    }

    /// End the wait announced by [`EventRegistry::prepare`] without sleeping.
    pub fn cancel(&self) {
        for s in &self.sources {
            s.end_wait();
        }
    }

    /// Wake a sleeper (to stop a progress thread).
    pub fn notify(&self) {
        for s in &self.sources {
            s.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    /// An eventfd as a source: readable once written.
    struct EventFd {
        fd: OwnedFd,
        announced: AtomicBool,
    }

    impl EventFd {
        fn new() -> Arc<EventFd> {
            // SAFETY: plain system call, checked.
            let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            assert!(raw >= 0);
            Arc::new(EventFd {
                // SAFETY: a fresh descriptor.
                fd: unsafe { OwnedFd::from_raw_fd(raw) },
                announced: AtomicBool::new(false),
            })
        }
    }

    impl EventSource for EventFd {
        fn prepare(&self) -> u64 {
            0
        }
        fn sleep(&self, _token: u64, _timeout: Duration) {}
        fn cancel(&self) {}
        fn notify(&self) {
            let one = 1u64;
            // SAFETY: writes 8 bytes from `one`.
            unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
            Some(self.fd.as_raw_fd())
        }
        fn prepare_wait(&self) -> Duration {
            self.announced.store(true, Ordering::SeqCst);
            Duration::MAX
        }
        fn end_wait(&self) {
            self.announced.store(false, Ordering::SeqCst);
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into `v`; non-blocking.
            unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
    }

    /// A source without a descriptor.
    struct NoFd;
    impl EventSource for NoFd {
        fn prepare(&self) -> u64 {
            0
        }
        fn sleep(&self, _token: u64, _timeout: Duration) {}
        fn cancel(&self) {}
        fn notify(&self) {}
    }

    #[test]
    fn a_source_without_descriptor_means_no_registry() {
        let a = EventFd::new();
        assert!(EventRegistry::new(vec![a, Arc::new(NoFd)]).is_none());
    }

    #[test]
    fn a_source_given_twice_joins_once() {
        let a = EventFd::new();
        let reg = EventRegistry::new(vec![a.clone(), a.clone()]).expect("registry");
        reg.prepare();
        a.notify();
        let t = Instant::now();
        reg.sleep(Duration::from_secs(10));
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the event was not seen"
        );
    }

    #[test]
    fn an_event_on_either_source_ends_one_wait() {
        let (a, b) = (EventFd::new(), EventFd::new());
        let reg = EventRegistry::new(vec![a.clone(), b.clone()]).expect("registry");
        for (i, src) in [a, b].into_iter().enumerate() {
            assert_eq!(reg.prepare(), Duration::MAX);
            let h = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                src.notify();
            });
            let t = Instant::now();
            reg.sleep(Duration::from_secs(10));
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "source {i} did not wake"
            );
            h.join().unwrap();
        }
    }

    #[test]
    fn an_event_before_sleep_is_not_lost_and_is_consumed() {
        let (a, b) = (EventFd::new(), EventFd::new());
        let reg = EventRegistry::new(vec![a.clone(), b]).expect("registry");
        reg.prepare();
        a.notify();
        let t = Instant::now();
        reg.sleep(Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
        // Consumed by `end_wait`: the next wait times out.
        reg.prepare();
        let t = Instant::now();
        reg.sleep(Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn short_timeouts_are_not_rounded_to_milliseconds() {
        let reg = EventRegistry::new(vec![EventFd::new(), EventFd::new()]).expect("registry");
        // A sleep rounded up to a millisecond never takes less; on a loaded machine a
        // single 50 µs sleep may take longer, but not every one of twenty.
        let shortest = (0..20)
            .map(|_| {
                reg.prepare();
                let t = Instant::now();
                reg.sleep(Duration::from_micros(50));
                t.elapsed()
            })
            .min()
            .unwrap();
        assert!(shortest < Duration::from_micros(900), "{shortest:?}");
    }
}
