//! The buffers of buffered sends: MPI 4.1's `MPI_Buffer_flush` and `MPI_Buffer_iflush`
//! (wait, or start a request that waits, until every message buffered in the attached
//! buffer has left, keeping the buffer attached), and the buffers attached to a
//! communicator or a session (`MPI_Comm_attach_buffer`, `MPI_Session_attach_buffer`, their
//! detach and flush calls; the accounting is `engine/bsend.rs`).

use super::{ReqId, Runtime, Schedule};
use crate::comm::CommId;
use crate::engine::{BufferScope, Engine};
use crate::error::{ErrorClass, MpiError, MpiResult};

/// Bytes of `scope`'s buffer held by buffered sends still on their way.
fn used(e: &Engine, scope: BufferScope) -> usize {
    match scope {
        BufferScope::Process => e.core.bsend_used,
        s => e.core.bsend_scoped.used(s),
    }
}

/// The work of an `MPI_Buffer_iflush` (or communicator / session iflush) request: done
/// when no buffered send holds space in the buffer any more.
struct Flush(BufferScope);

impl Schedule for Flush {
    fn advance(&mut self, rt: &Runtime) -> MpiResult<bool> {
        Ok(used(&rt.lock(), self.0) == 0)
    }
}

impl Runtime {
    /// MPI_Buffer_flush: block until the buffered messages have left.
    pub fn buffer_flush(&self) -> MpiResult<()> {
        self.buffer_flush_scoped(BufferScope::Process)
    }

    /// MPI_Buffer_iflush: a request that completes when the buffered messages have left.
    pub fn buffer_iflush(&self) -> MpiResult<ReqId> {
        self.buffer_iflush_scoped(BufferScope::Process)
    }

    /// MPI_Comm_flush_buffer / MPI_Session_flush_buffer (and MPI_Buffer_flush): block
    /// until the messages buffered in `scope`'s buffer have left.
    pub fn buffer_flush_scoped(&self, scope: BufferScope) -> MpiResult<()> {
        self.block_until(|e| Ok(used(e, scope) == 0))
    }

    /// MPI_Comm_iflush_buffer / MPI_Session_iflush_buffer.
    pub fn buffer_iflush_scoped(&self, scope: BufferScope) -> MpiResult<ReqId> {
        self.start_schedule(Box::new(Flush(scope)))
    }

    /// MPI_Comm_attach_buffer / MPI_Session_attach_buffer: `size` None is
    /// MPI_BUFFER_AUTOMATIC (no limit). `call` names the call in errors.
    pub fn buffer_attach_scoped(
        &self,
        call: &str,
        scope: BufferScope,
        addr: usize,
        size: Option<usize>,
    ) -> MpiResult<()> {
        if scope == BufferScope::Process {
            return self.buffer_attach(addr as *mut u8, size.unwrap_or(usize::MAX));
        }
        if !self.lock().core.bsend_scoped.attach(scope, addr, size) {
            return Err(MpiError::new(
                ErrorClass::Buffer,
                format!("{call}: a buffer is already attached (detach it first)"),
            ));
        }
        Ok(())
    }

    /// MPI_Comm_detach_buffer / MPI_Session_detach_buffer: wait until the messages
    /// buffered there have left, then give back the buffer's address and size (None:
    /// automatic). Nothing attached gives (0, Some(0)), as MPI_Buffer_detach does.
    pub fn buffer_detach_scoped(&self, scope: BufferScope) -> MpiResult<(usize, Option<usize>)> {
        if scope == BufferScope::Process {
            let (a, s) = self.buffer_detach()?;
            return Ok((a as usize, Some(s)));
        }
        self.block_until(|e| Ok(used(e, scope) == 0))?;
        Ok(self
            .lock()
            .core
            .bsend_scoped
            .detach(scope)
            .map_or((0, Some(0)), |b| (b.addr, b.size)))
    }

    /// Record that `comm` derives from session `session`: its buffered sends use the
    /// session's buffer when it has none of its own, and so do communicators made from it.
    pub fn set_comm_session(&self, comm: CommId, session: u32) {
        self.lock().core.bsend_scoped.set_session(comm, session);
    }

    /// The session `comm` derives from (None: the world model).
    pub fn comm_session(&self, comm: CommId) -> Option<u32> {
        self.lock().core.bsend_scoped.session_of(comm)
    }

    /// A communicator is being freed: wait until its buffered messages have left, then
    /// forget its buffer and session (its slot will be reused).
    pub fn buffer_comm_freed(&self, comm: CommId) -> MpiResult<()> {
        self.block_until(|e| Ok(used(e, BufferScope::Comm(comm)) == 0))?;
        self.lock().core.bsend_scoped.comm_freed(comm);
        Ok(())
    }

    /// A session is being finalized: wait until its buffered messages have left, then
    /// forget its buffer.
    pub fn buffer_session_freed(&self, session: u32) -> MpiResult<()> {
        self.block_until(|e| Ok(used(e, BufferScope::Session(session)) == 0))?;
        self.lock().core.bsend_scoped.session_freed(session);
        Ok(())
    }
}
