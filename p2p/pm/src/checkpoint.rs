//! Checkpointing a running job's PM (seed 000: pmSendStable, pmSaveContext,
//! pmRestoreContext, pmControlSend), coordinated among the ranks with markers on PM's own
//! ordered links.
//!
//! How a checkpoint is asked for ([`CheckpointConfig::from_env`], `TSUNAGI_PM_CHECKPOINT`):
//! `signal` — SIGUSR2 to any rank (or to mpirun, which forwards it to every rank); a whole
//! number — every that many milliseconds (SCore's gang scheduler quiesced every 100 ms);
//! both, comma-separated. A rank that receives a peer's marker for a checkpoint it has not
//! taken joins it, so one signalled rank checkpoints the whole job (every rank PM reaches,
//! directly or through others).
//!
//! Checkpoint `id` at one rank, inside the transport's `poll` (the request layer only sees
//! a poll that took longer):
//!
//! 1. **quiesce**: no new sends; send marker (`id`, 0) to every peer — on an ordered link
//!    it arrives after everything sent before it;
//! 2. **stable** (pmSendStable): drive the network until every peer's marker 0 arrived
//!    (all their data before it is in our rings) and our own sends are acknowledged;
//! 3. **save** (pmSaveContext): every queue context at once, encoded
//!    ([`crate::pm::PmContext::encode`]) and written to `TSUNAGI_PM_CHECKPOINT_DIR/pm-<rank>.img`
//!    when that is set;
//! 4. **restore** (pmRestoreContext): the running endpoint is replaced by a fresh one
//!    restored from the decoded image, so what runs on is what the image holds;
//! 5. send marker (`id`, 1) to every peer and wait for theirs, then **resume**
//!    (pmControlSend). Waiting keeps a peer's post-checkpoint data from reaching a rank
//!    that has not saved yet; a peer's marker 1 that arrives before our save is left out of
//!    our image ([`crate::pm::PmContext::forget_last_from`]), as it is out of the peer's.
//!
//! A rank that is to continue in a new process takes its image instead with
//! [`crate::transport::PmTransport::checkpoint_for_restart`]: after step 2 it sends marker
//! phase [`RESTARTING`] (which its peers count as its "saved"), takes its image and stops;
//! see [`crate::restart`].
//!
//! A peer that does not answer within [`PATIENCE`] (it finished, or computes outside MPI
//! for that long) makes the rank abandon the checkpoint and resume: nothing is lost, the
//! image is just not taken. A finishing rank answers markers while it lingers.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tsunagi_p2p::Rank;

/// How long a rank waits for its peers' markers before it abandons a checkpoint.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How long a signalled checkpoint may wait for an idle rank to notice the signal.
pub const SIGNAL_LATENCY: Duration = Duration::from_millis(100);

/// Marker phases.
pub const STABLE: u8 = 0;
pub const SAVED: u8 = 1;
/// The sender saved its context and stops: a new process restores it
/// ([`crate::restart`]). Counts as [`SAVED`] for the peers' wait.
pub const RESTARTING: u8 = 2;

/// What asks for checkpoints, and where images go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// SIGUSR2 asks for one.
    pub signal: bool,
    /// One every this long.
    pub every: Option<Duration>,
    /// Images are written here (`pm-<rank>.img`).
    pub dir: Option<PathBuf>,
}

impl CheckpointConfig {
    /// From `TSUNAGI_PM_CHECKPOINT` (`signal`, a period in milliseconds, or both joined by
    /// a comma) and `TSUNAGI_PM_CHECKPOINT_DIR`.
    pub fn from_env(getenv: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut c = CheckpointConfig {
            dir: getenv("TSUNAGI_PM_CHECKPOINT_DIR")
                .filter(|d| !d.trim().is_empty())
                .map(PathBuf::from),
            ..Default::default()
        };
        let Some(v) = getenv("TSUNAGI_PM_CHECKPOINT") else {
            return Ok(c);
        };
        for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "signal" | "sigusr2" => c.signal = true,
                ms => match ms.parse::<u64>() {
                    Ok(ms @ 1..=3_600_000) => c.every = Some(Duration::from_millis(ms)),
                    _ => {
                        return Err(format!(
                            "TSUNAGI_PM_CHECKPOINT={v}: expected 'signal' and/or a period in \
                             milliseconds (1..=3600000)"
                        ))
                    }
                },
            }
        }
        Ok(c)
    }

    /// Whether anything asks for checkpoints.
    pub fn enabled(&self) -> bool {
        self.signal || self.every.is_some()
    }
}

/// SIGUSR2s received by this process.
static SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_sigusr2(_: libc::c_int) {
    // Async-signal-safe: one lock-free atomic add.
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Install the SIGUSR2 handler (once per process). Without SA_RESTART, so that a rank
/// asleep in poll(2) wakes up to take the checkpoint.
pub fn install_signal_handler() -> Result<(), String> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut r = Ok(());
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with our handler, an empty mask and no flags is valid;
        // the handler only does an atomic add.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigusr2 as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()) != 0 {
                r = Err(format!(
                    "pm: installing the SIGUSR2 checkpoint handler: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    });
    r
}

/// The coordination state of one rank.
#[derive(Debug)]
pub struct Coordinator {
    pub cfg: CheckpointConfig,
    /// The last checkpoint id taken or abandoned.
    pub last: u32,
    /// A checkpoint asked for and not yet begun.
    pub requested: Option<u32>,
    next_at: Option<Instant>,
    signals_seen: u32,
    /// Markers received per checkpoint id: (peers quiesced, peers saved).
    marks: HashMap<u32, (HashSet<Rank>, HashSet<Rank>)>,
    pub taken: u64,
    pub abandoned: u64,
}

impl Coordinator {
    pub fn new(cfg: CheckpointConfig) -> Coordinator {
        let next_at = cfg.every.map(|e| Instant::now() + e);
        Coordinator {
            cfg,
            last: 0,
            requested: None,
            next_at,
            signals_seen: SIGNALS.load(Ordering::Relaxed),
            marks: HashMap::new(),
            taken: 0,
            abandoned: 0,
        }
    }

    /// Ask for the next checkpoint.
    pub fn request(&mut self) {
        let next = self.last.wrapping_add(1);
        self.requested = Some(self.requested.map_or(next, |r| r.max(next)));
    }

    /// Take note of a marker; one for a checkpoint not taken yet asks for it.
    pub fn note(&mut self, from: Rank, id: u32, phase: u8) {
        let e = self.marks.entry(id).or_default();
        if phase == STABLE {
            e.0.insert(from);
        } else {
            e.1.insert(from);
        }
        if id > self.last {
            self.requested = Some(self.requested.map_or(id, |r| r.max(id)));
        }
    }

    /// Check the signal count and the period; returns the checkpoint to take now, if any.
    pub fn due(&mut self, now: Instant) -> Option<u32> {
        if self.cfg.signal {
            let s = SIGNALS.load(Ordering::Relaxed);
            if s != self.signals_seen {
                self.signals_seen = s;
                self.request();
            }
        }
        if let (Some(at), Some(every)) = (self.next_at, self.cfg.every) {
            if now >= at {
                self.next_at = Some(now + every);
                self.request();
            }
        }
        self.requested
    }

    /// When a sleeping rank must look again: a checkpoint asked for, the next period, and
    /// with signals every [`SIGNAL_LATENCY`] (a signal may interrupt another thread's
    /// sleep, not the one that would take the checkpoint).
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        if self.requested.is_some() {
            return Some(now);
        }
        let signal = self.cfg.signal.then(|| now + SIGNAL_LATENCY);
        match (self.next_at, signal) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Peers whose marker of `phase` for `id` arrived.
    pub fn heard(&self, id: u32, phase: u8) -> Option<&HashSet<Rank>> {
        self.marks
            .get(&id)
            .map(|(s, v)| if phase == STABLE { s } else { v })
    }

    /// A process restored from the image of checkpoint `id`: that one and those before it
    /// are over (late markers of the peers for it ask for nothing).
    pub fn restored_from(&mut self, id: u32) {
        self.last = self.last.max(id);
        self.requested = None;
        self.marks.clear();
    }

    /// Checkpoint `id` is over (taken or abandoned).
    pub fn finish(&mut self, id: u32, taken: bool) {
        self.last = self.last.max(id);
        if self.requested.is_some_and(|r| r <= self.last) {
            self.requested = None;
        }
        self.marks.retain(|&k, _| k > id);
        if taken {
            self.taken += 1;
        } else {
            self.abandoned += 1;
        }
        if let Some(every) = self.cfg.every {
            self.next_at = Some(Instant::now() + every);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_and_coordination() {
        let env = |v: &'static str| move |k: &str| (k == "TSUNAGI_PM_CHECKPOINT").then(|| v.into());
        let c = CheckpointConfig::from_env(env("signal, 50")).unwrap();
        assert!(c.signal && c.every == Some(Duration::from_millis(50)) && c.enabled());
        assert!(!CheckpointConfig::from_env(|_| None).unwrap().enabled());
        for bad in ["often", "0", "signal,x"] {
            let e = CheckpointConfig::from_env(env(bad)).unwrap_err();
            assert!(e.starts_with("TSUNAGI_PM_CHECKPOINT="), "{e}");
        }
        let now = Instant::now();
        let mut k = Coordinator::new(c);
        let d = k.next_deadline(now).unwrap();
        assert!(
            d <= now + SIGNAL_LATENCY && d > now,
            "signals are looked for when idle"
        );
        k.request();
        assert_eq!(
            k.next_deadline(now),
            Some(now),
            "a requested checkpoint is due now"
        );
        let mut k = Coordinator::new(CheckpointConfig::default());
        assert_eq!(k.next_deadline(now), None);
        assert_eq!(k.due(Instant::now()), None);
        // A peer's marker asks for its checkpoint.
        k.note(3, 1, STABLE);
        assert_eq!(k.due(Instant::now()), Some(1));
        k.note(3, 1, SAVED);
        assert!(k.heard(1, STABLE).unwrap().contains(&3));
        assert!(k.heard(1, SAVED).unwrap().contains(&3));
        k.finish(1, true);
        assert_eq!((k.requested, k.taken, k.heard(1, STABLE)), (None, 1, None));
        k.request();
        assert_eq!(k.requested, Some(2));
        k.finish(2, false);
        assert_eq!((k.requested, k.abandoned), (None, 1));
    }
}
