//! Read-only views of the request layer for the tools interface (MPI_T), in a child module
//! so that they reach the private queues without widening their visibility.

use super::Core;

impl Core {
    /// Receives posted and not yet matched, and messages arrived and not yet received, over
    /// all contexts: `(posted, unexpected)`.
    pub(crate) fn queue_lengths(&self) -> (usize, usize) {
        self.queues.iter().fold((0, 0), |(p, u), q| {
            (p + q.posted.len(), u + q.unexpected.len())
        })
    }
}
