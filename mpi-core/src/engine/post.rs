//! The program's side of the protocol core: requests made, started, matched against what
//! arrived, probed, cancelled and collected. None of it needs a transport; what a start
//! leaves to carry out (a synchronous sender's ack, a CTS, a single-copy read) is queued
//! as actions (`actions.rs`). Sends start in `send.rs` (the driver tells the core the
//! transport's eager limit and whether it offers single copy).

use super::*;

impl Core {
    /// Create an inactive request (persistent, or about to be started) on `context`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_request(
        &mut self,
        send: Option<SendMode>,
        buf: Buf,
        count: usize,
        dtype: TypeRef,
        comm: CommId,
        peer: i32,
        tag: i32,
        context: u32,
        persistent: bool,
    ) -> ReqId {
        let id = self.reqs.insert(Request {
            op: match send {
                Some(m) => Op::Send(m),
                None => Op::Recv,
            },
            phase: Phase::Inactive,
            persistent,
            detached: false,
            status: Status::EMPTY,
            buf,
            count,
            dtype: Some(dtype),
            builtin: Builtin::Byte,
            comm,
            peer,
            tag,
            context,
            packed: None,
            bsend_bytes: 0,
            bsend_scope: BufferScope::Process,
            expected: 0,
            received: 0,
        });
        assert!(id < SENT_BASE, "request table full");
        ReqId(id)
    }

    /// Make an inactive request active (MPI_Start): what it is, for the caller to start.
    pub(super) fn activate(&mut self, id: ReqId) -> MpiResult<Op> {
        let req = self
            .reqs
            .get_mut(id.0)
            .ok_or_else(|| bad_request("MPI_Start", id))?;
        if req.phase == Phase::Active {
            return Err(mpi_err(
                ErrorClass::Request,
                "MPI_Start: request is already active".into(),
            ));
        }
        req.phase = Phase::Active;
        req.status = Status::EMPTY;
        req.received = 0;
        req.expected = 0;
        Ok(req.op)
    }

    /// Start receive `id` (active): the earliest unexpected message it accepts meets it
    /// now, else it is posted. MPI_PROC_NULL completes at once.
    pub(crate) fn start_recv(&mut self, id: ReqId) {
        let req = self.reqs.get_mut(id.0).expect("live request");
        if req.peer == PROC_NULL {
            req.status = Status::PROC_NULL;
            self.complete(id);
            return;
        }
        let (comm_id, peer, tag, context) = (req.comm, req.peer, req.tag, req.context);
        let src = if peer == ANY_SOURCE {
            ANY_WORLD
        } else {
            self.comms
                .world_rank(comm_id, peer as usize)
                .expect("checked by the API")
        };
        let q = self.queue(context);
        if let Some(pos) = q.find_unexpected(src, tag) {
            let a = q.take_unexpected(pos).expect("position is valid");
            self.consume(id, a);
            return;
        }
        q.post(Posted { id, src, tag });
    }

    /// MPI_Mrecv / MPI_Imrecv: the message taken by mprobe meets receive `id`.
    pub(crate) fn start_mrecv(&mut self, id: ReqId, msg: MsgId) -> MpiResult<()> {
        let (_, a) = self.msgs.remove(msg.0).ok_or_else(|| {
            mpi_err(
                ErrorClass::Request,
                "MPI_Mrecv: invalid message handle".into(),
            )
        })?;
        let req = self.reqs.get_mut(id.0).expect("live request");
        req.phase = Phase::Active;
        self.consume(id, a);
        Ok(())
    }

    /// The status of the earliest unexpected message that a receive from `peer` (or
    /// ANY_SOURCE) with `tag` (or ANY_TAG) on `comm` would take (MPI_Iprobe); with `take`,
    /// the message leaves the queue for a later MPI_Mrecv (MPI_Improbe).
    pub(crate) fn probe(
        &mut self,
        comm: CommId,
        peer: i32,
        tag: i32,
        take: bool,
    ) -> Option<(Status, Option<MsgId>)> {
        let src = if peer == ANY_SOURCE {
            ANY_WORLD
        } else {
            self.comms
                .world_rank(comm, peer as usize)
                .expect("checked by the API")
        };
        let context = self.comms.context(comm).expect("checked by the API");
        let q = self.queue(context);
        let pos = q.find_unexpected(src, tag)?;
        let a = &q.unexpected[pos];
        let (asrc, atag, alen) = (a.src, a.tag, a.len);
        let source = self.comm_rank_of(comm, asrc);
        let status = Status {
            source,
            tag: atag,
            error: 0,
            bytes: alen,
            cancelled: false,
        };
        if take {
            let a = self.queue(context).take_unexpected(pos).expect("valid");
            let m = self.msgs.insert((comm, a));
            return Some((status, Some(MsgId(m))));
        }
        Some((status, None))
    }

    /// Has the request completed? Its status if so (a non-persistent request is released,
    /// a persistent one made inactive).
    pub(crate) fn test(&mut self, id: ReqId) -> MpiResult<Option<Status>> {
        if let Some(bytes) = id.sent_bytes() {
            return Ok(Some(sent_status(bytes)));
        }
        let req = self
            .reqs
            .get_mut(id.0)
            .ok_or_else(|| bad_request("MPI_Test", id))?;
        match req.phase {
            Phase::Done => {
                let st = req.status;
                if req.persistent {
                    req.phase = Phase::Inactive;
                } else {
                    self.reqs.remove(id.0);
                }
                Ok(Some(st))
            }
            Phase::Inactive => Ok(Some(Status::EMPTY)),
            Phase::Active => Ok(None),
        }
    }

    /// The world rank an active send to a peer goes to (None for receives, MPI_PROC_NULL
    /// and requests that are not active).
    pub(super) fn send_dest(&self, id: ReqId) -> Option<Rank> {
        let req = self.reqs.get(id.0)?;
        match req.op {
            Op::Send(_) if req.phase == Phase::Active && req.peer != PROC_NULL => {
                self.comms.world_rank(req.comm, req.peer as usize)
            }
            _ => None,
        }
    }

    /// MPI_Cancel over byte movers. A receive still in the posted queue is cancelled; a
    /// send is cancelled if its first message (EAGER or RTS) still waits for room in this
    /// process; otherwise the operation completes normally and MPI_Test_cancelled reports
    /// false.
    pub(crate) fn cancel(&mut self, id: ReqId) -> MpiResult<()> {
        if id.sent_bytes().is_some() {
            // The message has left this process: the send completes normally.
            return Ok(());
        }
        let req = self
            .reqs
            .get(id.0)
            .ok_or_else(|| bad_request("MPI_Cancel", id))?;
        if req.op == Op::Scheduled {
            // MPI-3.1 §5.12: cancelling a non-blocking collective is erroneous.
            return Err(mpi_err(
                ErrorClass::Request,
                "MPI_Cancel: a non-blocking collective request cannot be cancelled".into(),
            ));
        }
        if req.phase != Phase::Active {
            return Ok(());
        }
        match req.op {
            Op::Recv => {
                let context = req.context;
                let q = self.queue(context);
                if let Some(pos) = q.posted.iter().position(|p| p.id == id) {
                    q.posted.remove(pos);
                    let req = self.reqs.get_mut(id.0).expect("live");
                    req.status = Status::EMPTY;
                    req.status.cancelled = true;
                    self.complete(id);
                }
            }
            Op::Send(_) => {
                let Some(dest) = self.send_dest(id) else {
                    return Ok(());
                };
                let q = &mut self.pending[dest as usize];
                // The last envelope with this cookie: earlier ones belong to completed
                // eager sends whose request id this one reuses (they are still queued
                // behind a full transport, but their senders were told they are done).
                if let Some(pos) = q.iter().rposition(|o| {
                    (o.hdr.kind == EAGER || o.hdr.kind == RTS) && o.hdr.cookie == id.0 as u64
                }) {
                    let o = q.remove(pos).expect("position is valid");
                    if q.is_empty() {
                        self.pending_peers -= 1;
                    }
                    self.pool.push(o.payload);
                    self.cancelled(id);
                }
            }
            Op::Scheduled => unreachable!("refused above"),
        }
        Ok(())
    }
}
