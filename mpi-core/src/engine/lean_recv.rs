//! The lean receive path: a non-persistent receive whose arguments the runtime has checked
//! is made active at once (one insertion into the request table, whose freed slots are
//! reused, so no allocation per receive), matched against the unexpected queue or posted,
//! and nothing else; the general path (`new_request` + `start`) does the same in three
//! steps with two more lookups and a flush check. Arrivals complete such a receive in
//! `Core::arrive_matchable` like any other (the eager data is copied straight from the
//! transport's buffer, for the shared-memory transport the ring cell, into the user's
//! buffer), and collecting it is one table removal.

use super::*;

/// What the lean path needs to know about a receive, resolved by the caller (the
/// communicator looked up once, the source as a world rank).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvArgs {
    pub buf: Buf,
    pub count: usize,
    pub comm: CommId,
    /// Source rank in the communicator, or ANY_SOURCE.
    pub peer: i32,
    /// The source's world rank, or [`ANY_WORLD`].
    pub src_world: Rank,
    pub tag: i32,
    pub context: u32,
}

impl Engine {
    /// Post a checked receive (never from MPI_PROC_NULL) and match it against what already
    /// arrived. Returns its request, complete when the message was already there.
    ///
    /// Always inlined into its caller: called, it took `a` by pointer and copied it with
    /// 16-byte loads over the caller's 8-byte stores, a store-forwarding stall per receive.
    #[inline(always)]
    pub(crate) fn post_recv(&mut self, a: RecvArgs, dtype: &TypeRef) -> MpiResult<ReqId> {
        debug_assert!(a.peer != PROC_NULL);
        let core = &mut self.core;
        let (dt, builtin) = req_type(dtype);
        let raw = core.reqs.insert_with(|| Request {
            op: Op::Recv,
            phase: Phase::Active,
            persistent: false,
            detached: false,
            status: Status::EMPTY,
            buf: a.buf,
            count: a.count,
            dtype: dt,
            builtin,
            comm: a.comm,
            peer: a.peer,
            tag: a.tag,
            context: a.context,
            packed: None,
            bsend_bytes: 0,
            bsend_scope: BufferScope::Process,
            expected: 0,
            received: 0,
        });
        assert!(raw < SENT_BASE, "request table full");
        let id = ReqId(raw);
        let q = core.queue(a.context);
        if !q.unexpected.is_empty() {
            if let Some(pos) = q.find_unexpected(a.src_world, a.tag) {
                let m = q.take_unexpected(pos).expect("position is valid");
                core.consume(id, m);
                // A synchronous sender's ack, a CTS or a single-copy read may be due.
                if core.has_deferred() {
                    if let Err(e) = self.flush() {
                        self.detach(id);
                        return Err(e);
                    }
                }
                return Ok(id);
            }
        }
        q.post(Posted {
            id,
            src: a.src_world,
            tag: a.tag,
        });
        Ok(id)
    }

    /// Collect a completed request in one table lookup: its status, or None while it is
    /// still active (then nothing changed). For the completion loops of the wait and test
    /// families, which otherwise ask `request_exists`, `is_done` and `test` in turn.
    /// `Err` only for an id that names no request.
    #[inline]
    pub(crate) fn collect(&mut self, id: ReqId) -> Result<Option<Status>, ()> {
        if let Some(bytes) = id.sent_bytes() {
            return Ok(Some(sent_status(bytes)));
        }
        let req = self.core.reqs.get_mut(id.0).ok_or(())?;
        match req.phase {
            Phase::Active => Ok(None),
            Phase::Done if req.persistent => {
                req.phase = Phase::Inactive;
                Ok(Some(req.status))
            }
            Phase::Done => {
                let st = req.status;
                self.core.reqs.delete(id.0);
                Ok(Some(st))
            }
            Phase::Inactive => Ok(Some(Status::EMPTY)),
        }
    }
}
