//! MPI 4.1's `MPI_Buffer_flush` and `MPI_Buffer_iflush`: wait (or start a request that
//! waits) until every message buffered in the attached buffer has left, keeping the buffer
//! attached.

use super::{ReqId, Runtime, Schedule};
use crate::error::MpiResult;

/// The work of an `MPI_Buffer_iflush` request: done when no buffered send holds buffer
/// space any more.
struct Flush;

impl Schedule for Flush {
    fn advance(&mut self, rt: &Runtime) -> MpiResult<bool> {
        Ok(rt.lock().core.bsend_used == 0)
    }
}

impl Runtime {
    /// MPI_Buffer_flush: block until the buffered messages have left.
    pub fn buffer_flush(&self) -> MpiResult<()> {
        self.block_until(|e| Ok(e.core.bsend_used == 0))
    }

    /// MPI_Buffer_iflush: a request that completes when the buffered messages have left.
    pub fn buffer_iflush(&self) -> MpiResult<ReqId> {
        self.start_schedule(Box::new(Flush))
    }
}
