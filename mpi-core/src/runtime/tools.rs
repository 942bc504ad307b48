//! The runtime's settings and queue state as the tools interface (MPI_T) reads them: the
//! live values, not the environment they came from.

use std::time::Duration;

use super::Runtime;

/// The waiting policy a runtime runs with (`TSUNAGI_SPIN`, `TSUNAGI_YIELDS`,
/// `TSUNAGI_THREAD_SPIN`, `TSUNAGI_THREAD_YIELDS` or their defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    pub spin: u32,
    pub yields: u32,
    pub thread_spin: u32,
    pub thread_yields: u32,
}

impl Runtime {
    /// Whether this process runs the threaded progress engine (else the polling one).
    pub fn threaded_progress(&self) -> bool {
        self.mode == tsunagi_p2p::ProgressMode::Threaded
    }

    /// The waiting policy.
    pub fn wait_policy(&self) -> WaitPolicy {
        WaitPolicy {
            spin: self.spin,
            yields: self.yields,
            thread_spin: self.thread_spin,
            thread_yields: self.thread_yields,
        }
    }

    /// `TSUNAGI_STALL_REPORT`: after how long a stalled wait prints what it waits for.
    pub fn stall_report_after(&self) -> Option<Duration> {
        self.stall_report
    }

    /// Receives posted and not matched, and messages arrived and not received:
    /// `(posted, unexpected)`, over every communicator.
    pub fn queue_lengths(&self) -> (usize, usize) {
        self.lock().core.queue_lengths()
    }

    /// The eager limit of each transport this process uses, by transport name.
    pub fn eager_limits(&self) -> Vec<(&'static str, usize)> {
        let mut e = self.lock();
        e.router
            .transports()
            .iter()
            .map(|t| (t.name(), t.eager_limit()))
            .collect()
    }
}
