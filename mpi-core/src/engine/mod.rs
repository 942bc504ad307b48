//! The request layer: requests, matching, and the eager/rendezvous protocols, all state
//! kept in one [`Engine`] that the runtime guards with one lock.
//!
//! The engine is driven from two sides: API calls (post a send or a receive, probe,
//! cancel) and arrivals handed up by the transports during progress. Arrivals are handled
//! inside the transport's poll callback, which borrows the router; anything that needs to
//! *send* or *read remote memory* in response (CTS, FIN, SYNC_ACK, single-copy reads,
//! streamed chunks, sends that found no room) is queued in the core and carried out by
//! [`Engine::flush`] right after the poll returns. Starting a send works the same way: the
//! core chooses eager or rendezvous and queues the message (`send.rs`), the driver sends
//! it; only the lean path of a small send (`Engine::send_eager_now`) writes at once.

use std::collections::{HashMap, VecDeque};

use tsunagi_p2p::device::DataRep;
use tsunagi_p2p::{Header, P2pError, Rank, ReadId, Router};

mod bsend;
mod core;
mod device;
mod lean_recv;
mod matching;
mod requests;
mod send;
mod tools_view;
#[doc(hidden)]
pub use bsend::{BufferScope, ScopedBuffers};
use device::{DeviceArrival, DeviceRecv};
pub(crate) use lean_recv::RecvArgs;
use matching::Body;
pub use matching::{Arrived, Posted, Queues};
use send::SendAction;

pub(crate) use crate::slab::Slab;

use crate::comm::CommId;
use crate::comm_table::CommTable;
use crate::datatype::{Builtin, Datatype, TypeRef};
use crate::error::{ErrorClass, MpiError, MpiResult};
use crate::protocol::*;

/// MPI_ANY_SOURCE (MPICH value).
pub const ANY_SOURCE: i32 = -2;
/// MPI_ANY_TAG (MPICH value).
pub const ANY_TAG: i32 = -1;
/// MPI_PROC_NULL (MPICH value).
pub const PROC_NULL: i32 = -1;
/// MPI_BSEND_OVERHEAD: bytes of attached buffer each buffered send costs beyond its data.
pub const BSEND_OVERHEAD: usize = 96;

/// A world rank that stands for "any source" in the posted queue.
#[doc(hidden)]
pub const ANY_WORLD: Rank = Rank::MAX;

/// The result of a completed operation (what MPI_Status carries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// Source rank in the communicator (MPI_SOURCE).
    pub source: i32,
    /// Tag (MPI_TAG).
    pub tag: i32,
    /// Error code (MPI_ERROR): MPI_SUCCESS or e.g. MPI_ERR_TRUNCATE.
    pub error: i32,
    /// Bytes received (or sent).
    pub bytes: usize,
    /// True if the operation was cancelled.
    pub cancelled: bool,
}

impl Status {
    /// The "empty" status MPI defines (source ANY_SOURCE, tag ANY_TAG, count 0).
    pub const EMPTY: Status = Status {
        source: ANY_SOURCE,
        tag: ANY_TAG,
        error: 0,
        bytes: 0,
        cancelled: false,
    };
    /// Status of a receive from MPI_PROC_NULL.
    pub const PROC_NULL: Status = Status {
        source: PROC_NULL,
        tag: ANY_TAG,
        error: 0,
        bytes: 0,
        cancelled: false,
    };
}

impl Default for Status {
    fn default() -> Status {
        Status::EMPTY
    }
}

/// A handle to a request in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u32);

/// First id of the requests that are not in the table: an eager send that left this process
/// at once (the common case of a small message) keeps no state, and its id says how many
/// bytes it sent, `SENT_BASE + bytes`, so that a wait or test can give its status. Table ids
/// stay below (the C library's handles hold ids below 2^25).
pub const SENT_BASE: u32 = 0x01fe_0000;
/// The largest eager send that can complete without a request.
const SENT_MAX_BYTES: usize = 0xffff;

impl ReqId {
    /// The id of a completed eager send of `bytes` (at most [`SENT_MAX_BYTES`]).
    fn sent(bytes: usize) -> ReqId {
        debug_assert!(bytes <= SENT_MAX_BYTES);
        ReqId(SENT_BASE + bytes as u32)
    }

    /// Bytes of a completed eager send that kept no request, or None for a table id.
    #[inline]
    pub fn sent_bytes(self) -> Option<usize> {
        (self.0 >= SENT_BASE && self.0 <= SENT_BASE + SENT_MAX_BYTES as u32)
            .then(|| (self.0 - SENT_BASE) as usize)
    }
}

/// The status a completed send reports.
fn sent_status(bytes: usize) -> Status {
    Status {
        bytes,
        ..Status::EMPTY
    }
}

/// A handle to a message taken off the queues by MPI_Mprobe/MPI_Improbe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MsgId(pub u32);

/// A raw user buffer address, carried by requests while the operation runs.
#[derive(Clone, Copy, Debug)]
pub struct Buf(pub *mut u8);
// SAFETY: a Buf is only an address; the MPI contract (the caller keeps the buffer alive and
// untouched until the request completes) is what makes dereferencing it sound, on any
// thread, and all dereferences happen under the engine lock.
unsafe impl Send for Buf {}

/// MPI's send modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    Standard,
    Synchronous,
    Ready,
    Buffered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A persistent request not started (or completed and collected).
    Inactive,
    Active,
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send(SendMode),
    Recv,
    /// Work advanced outside the engine (a non-blocking collective's schedule, see
    /// `Runtime::start_schedule`): the request only records its completion.
    Scheduled,
}

struct Request {
    op: Op,
    phase: Phase,
    persistent: bool,
    /// MPI_Request_free was called (or the request is internal): drop it at completion.
    detached: bool,
    status: Status,
    buf: Buf,
    count: usize,
    dtype: TypeRef,
    comm: CommId,
    /// Peer in the communicator: destination, or source / ANY_SOURCE, or PROC_NULL.
    peer: i32,
    tag: i32,
    context: u32,
    /// Send side: packed copy of the data (non-contiguous rendezvous, buffered sends).
    packed: Option<Vec<u8>>,
    /// Buffered send: bytes of the attached buffer to give back at completion.
    bsend_bytes: usize,
    /// Buffered send: the buffer those bytes belong to.
    bsend_scope: BufferScope,
    /// Receive side: bytes the buffer holds, bytes announced, bytes arrived.
    capacity: usize,
    expected: usize,
    received: usize,
}

impl Request {
    fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }
}

/// A message waiting for room in a transport.
struct Outgoing {
    hdr: Header,
    payload: Vec<u8>,
}

/// A rendezvous send streaming its data after a CTS.
struct Stream {
    send: ReqId,
    recv_cookie: u64,
    peer: Rank,
    offset: usize,
}

/// A single-copy read to carry out after the poll.
struct CmaRead {
    recv: ReqId,
    peer: Rank,
    addr: u64,
    len: usize,
    sender_cookie: u64,
}

/// Everything the request layer owns, except the router.
pub(crate) struct Core {
    pub me: Rank,
    reqs: Slab<Request>,
    queues: Vec<Queues>,
    msgs: Slab<(CommId, Arrived)>,
    pending: Vec<VecDeque<Outgoing>>,
    pending_peers: usize,
    /// Sends the core started, for the driver to carry out at once (`engine/send.rs`):
    /// empty whenever the engine lock is free.
    outbox: Vec<SendAction>,
    ctrl: Vec<(Rank, Header)>,
    cma: Vec<CmaRead>,
    streams: Vec<Stream>,
    scratch: Vec<u8>,
    pool: Vec<Vec<u8>>,
    /// Live communicators; the request layer asks it only for contexts and rank
    /// translations (`comm_table.rs`).
    comms: CommTable,
    /// The first transport failure; every later call reports it.
    pub fault: Option<MpiError>,
    /// Bumped whenever a request completes (threaded waits watch it).
    pub completions: u64,
    /// A message to self was queued and awaits delivery by `flush`.
    self_dirty: bool,
    /// Attached buffer for buffered sends: (address, size), and bytes in use.
    pub bsend_buffer: Option<(usize, usize)>,
    pub bsend_used: usize,
    /// The communicators' and sessions' buffers (MPI 4.1).
    pub bsend_scoped: ScopedBuffers,
    byte_type: TypeRef,
    /// Native devices: arrivals matched since the last flush (device, arrival id), to
    /// accept after the poll; matched receives whose data is still coming in; each
    /// device's data representation.
    dev_accepts: Vec<(u8, u64)>,
    dev_recvs: HashMap<(u8, u64), DeviceRecv>,
    dev_reps: Vec<DataRep>,
}

/// The request layer and the router, guarded together by the runtime's lock.
pub(crate) struct Engine {
    pub router: Router,
    pub core: Core,
}

fn mpi_err(class: ErrorClass, msg: String) -> MpiError {
    MpiError::new(class, msg)
}

fn p2p_fault(e: P2pError) -> MpiError {
    match e {
        P2pError::PeerFailed { .. } => mpi_err(ErrorClass::ProcAborted, e.to_string()),
        other => mpi_err(ErrorClass::Other, format!("transport error: {other}")),
    }
}

impl Engine {
    pub(crate) fn new(me: Rank, size: usize, mut router: Router) -> Engine {
        let dev_reps = router.devices().iter().map(|d| d.caps().data_rep).collect();
        Engine {
            router,
            core: Core {
                me,
                reqs: Slab::default(),
                queues: Vec::new(),
                msgs: Slab::default(),
                pending: (0..size).map(|_| VecDeque::new()).collect(),
                pending_peers: 0,
                outbox: Vec::new(),
                ctrl: Vec::new(),
                cma: Vec::new(),
                streams: Vec::new(),
                scratch: Vec::new(),
                pool: Vec::new(),
                comms: CommTable::default(),
                fault: None,
                completions: 0,
                self_dirty: false,
                bsend_buffer: None,
                bsend_used: 0,
                bsend_scoped: ScopedBuffers::default(),
                byte_type: Datatype::builtin(Builtin::Byte),
                dev_accepts: Vec::new(),
                dev_recvs: HashMap::new(),
                dev_reps,
            },
        }
    }

    /// One polling-engine step over every transport, then the deferred work.
    pub(crate) fn progress(&mut self) -> MpiResult<usize> {
        let Engine { router, core } = self;
        let mut n = match router.poll_all(&mut |src, h, p| core.on_arrival(src, h, p)) {
            Ok(n) => n,
            Err(e) => return Err(core.set_fault(p2p_fault(e))),
        };
        if self.router.has_devices() {
            n += match self.poll_devices() {
                Ok(n) => n,
                Err(e) => return Err(self.core.set_fault(e)),
            };
        }
        // Most passes owe nothing (a receive completed by an eager message): skip the
        // flush's checks then.
        if self.core.has_deferred() {
            self.flush()?;
        }
        Ok(n)
    }

    /// Poll only transport `idx` (a threaded-engine progress thread), then deferred work.
    /// Indices past the transports name devices (as in `Router::event_sources`).
    pub(crate) fn progress_one(&mut self, idx: usize) -> MpiResult<usize> {
        let ntransports = self.router.len();
        if idx >= ntransports {
            let n = match self.poll_device(idx - ntransports) {
                Ok(n) => n,
                Err(e) => return Err(self.core.set_fault(e)),
            };
            self.flush()?;
            return Ok(n);
        }
        let Engine { router, core } = self;
        let n = match router.transports()[idx].poll(&mut |src, h, p| core.on_arrival(src, h, p)) {
            Ok(n) => n,
            Err(e) => return Err(core.set_fault(p2p_fault(e))),
        };
        self.flush()?;
        Ok(n)
    }

    /// Carry out what arrivals and API calls queued: sends that waited for room, control
    /// messages, single-copy reads and streamed chunks.
    pub(crate) fn flush(&mut self) -> MpiResult<()> {
        if let Some(f) = &self.core.fault {
            return Err(f.clone());
        }
        let r = self.flush_inner();
        if let Err(e) = r {
            return Err(self.core.set_fault(e));
        }
        Ok(())
    }

    fn flush_inner(&mut self) -> MpiResult<()> {
        if self.core.pending_peers > 0 {
            self.retry_pending()?;
        }
        // Messages to self are delivered here, at once, so that no progress thread or
        // later poll is needed for them (the self path has no thread of its own).
        while self.core.self_dirty {
            self.core.self_dirty = false;
            let Engine { router, core } = self;
            if let Some(i) = router.route_of(core.me) {
                router.transports()[i]
                    .poll(&mut |src, h, p| core.on_arrival(src, h, p))
                    .map_err(p2p_fault)?;
            }
            self.flush_control()?;
        }
        self.flush_control()
    }

    fn flush_control(&mut self) -> MpiResult<()> {
        if !self.core.dev_accepts.is_empty() {
            self.flush_device_accepts()?;
        }
        while !self.core.ctrl.is_empty() {
            let ctrl = std::mem::take(&mut self.core.ctrl);
            for (peer, hdr) in ctrl {
                self.send_or_queue(peer, hdr, &[])?;
            }
        }
        if !self.core.cma.is_empty() {
            let reads = std::mem::take(&mut self.core.cma);
            self.do_cma_reads(reads)?;
        }
        if !self.core.streams.is_empty() {
            self.push_streams()?;
        }
        Ok(())
    }

    fn retry_pending(&mut self) -> MpiResult<()> {
        let Engine { router, core } = self;
        for peer in 0..core.pending.len() {
            let q = &mut core.pending[peer];
            if q.is_empty() {
                continue;
            }
            let t = router
                .to(peer as Rank)
                .expect("pending messages only for routed peers");
            while let Some(o) = q.front() {
                if t.try_send(peer as Rank, &o.hdr, &o.payload)
                    .map_err(p2p_fault)?
                {
                    let o = q.pop_front().expect("front exists");
                    core.pool.push(o.payload);
                } else {
                    break;
                }
            }
            if q.is_empty() {
                core.pending_peers -= 1;
            }
        }
        Ok(())
    }

    /// Send now if the peer's queue is empty and the transport has room, else queue a copy
    /// (keeping per-peer order).
    fn send_or_queue(&mut self, peer: Rank, hdr: Header, payload: &[u8]) -> MpiResult<()> {
        let Engine { router, core } = self;
        if peer == core.me {
            core.self_dirty = true;
        }
        let q = &mut core.pending[peer as usize];
        if q.is_empty() {
            let t = router.to(peer).ok_or_else(|| no_route(peer))?;
            if t.try_send(peer, &hdr, payload).map_err(p2p_fault)? {
                return Ok(());
            }
            core.pending_peers += 1;
        }
        let mut buf = core.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        core.pending[peer as usize].push_back(Outgoing { hdr, payload: buf });
        Ok(())
    }

    /// Carry out single-copy reads, all in flight at once where the transport reads
    /// without blocking (`Transport::start_read`), each answered by a FIN when done, or
    /// by a CTS (the sender streams instead) when the transport refuses it.
    fn do_cma_reads(&mut self, reads: Vec<CmaRead>) -> MpiResult<()> {
        let mut flying = Vec::with_capacity(reads.len());
        for r in reads {
            match self.start_cma_read(&r)? {
                Ok(id) => flying.push((r, id)),
                Err(_) => self.finish_cma_read(r, false)?,
            }
        }
        let mut idle_rounds = 0u32;
        while !flying.is_empty() {
            let mut i = 0;
            let mut finished = false;
            while i < flying.len() {
                let (peer, id) = (flying[i].0.peer, flying[i].1);
                let t = self.router.to(peer).ok_or_else(|| no_route(peer))?;
                match t.test_read(id) {
                    Ok(false) => i += 1,
                    done => {
                        let (r, _) = flying.swap_remove(i);
                        self.finish_cma_read(r, done.is_ok())?;
                        finished = true;
                    }
                }
            }
            if !finished {
                idle_rounds = idle_rounds.wrapping_add(1);
                if idle_rounds.is_multiple_of(64) {
                    // On an oversubscribed node the peers may need this CPU to answer.
                    std::thread::yield_now();
                }
            }
        }
        Ok(())
    }

    /// Start the read `r` into its receive buffer. A non-contiguous receive is read into
    /// the scratch buffer and unpacked at once (the scratch is one for all reads).
    fn start_cma_read(&mut self, r: &CmaRead) -> MpiResult<Result<ReadId, P2pError>> {
        let Engine { router, core } = self;
        let req = core
            .reqs
            .get_mut(r.recv.0)
            .expect("cma read for a live request");
        let take = r.len.min(req.capacity);
        let t = router.to(r.peer).ok_or_else(|| no_route(r.peer))?;
        Ok(match req.dtype.contiguous_offset() {
            // SAFETY: the receive buffer holds `capacity` bytes from `buf + off` (MPI
            // contract for a contiguous type), `take <= capacity`; the request stays
            // incomplete, so its buffer untouched by anyone else, until the read is done
            // (`finish_cma_read`).
            Some(off) => unsafe { t.start_read(r.peer, r.addr, req.buf.0.offset(off), take) },
            None => {
                core.scratch.resize(take, 0);
                let res = t.read_remote(r.peer, r.addr, &mut core.scratch[..take]);
                if res.is_ok() {
                    // SAFETY: the buffer holds `count` elements of `dtype` (MPI contract);
                    // `take <= count * size` bytes of packed data.
                    unsafe {
                        req.dtype
                            .unpack_range(req.buf.0, req.count, 0, &core.scratch[..take])
                    };
                }
                res.map(|()| ReadId::DONE)
            }
        })
    }

    /// The read `r` is over: done (complete the receive, FIN to the sender) or refused
    /// (single copy impossible, e.g. ptrace restrictions: ask the sender to stream).
    fn finish_cma_read(&mut self, r: CmaRead, done: bool) -> MpiResult<()> {
        let core = &mut self.core;
        if done {
            let req = core
                .reqs
                .get_mut(r.recv.0)
                .expect("cma read for a live request");
            req.received = r.len;
            let hdr = Header {
                kind: FIN,
                src: core.me,
                cookie: r.sender_cookie,
                ..Header::default()
            };
            core.complete(r.recv);
            self.send_or_queue(r.peer, hdr, &[])
        } else {
            let hdr = Header {
                kind: CTS,
                src: core.me,
                cookie: r.sender_cookie,
                len: r.recv.0 as u64,
                ..Header::default()
            };
            self.send_or_queue(r.peer, hdr, &[])
        }
    }

    fn push_streams(&mut self) -> MpiResult<()> {
        let Engine { router, core } = self;
        let mut i = 0;
        while i < core.streams.len() {
            let s = &mut core.streams[i];
            let t = router.to(s.peer).ok_or_else(|| no_route(s.peer))?;
            let chunk_max = t.max_payload();
            let req = core.reqs.get(s.send.0).expect("streaming a live send");
            let total = req.bytes();
            let mut finished = s.offset >= total;
            while !finished {
                let n = chunk_max.min(total - s.offset);
                let hdr = Header {
                    kind: DATA,
                    src: core.me,
                    len: s.offset as u64,
                    cookie: s.recv_cookie,
                    ..Header::default()
                };
                let sent = if let Some(p) = &req.packed {
                    t.try_send(s.peer, &hdr, &p[s.offset..s.offset + n])
                } else if let Some(off) = req.dtype.contiguous_offset() {
                    // SAFETY: the send buffer holds `total` bytes from `buf + off`.
                    let data = unsafe {
                        std::slice::from_raw_parts(req.buf.0.offset(off).add(s.offset), n)
                    };
                    t.try_send(s.peer, &hdr, data)
                } else {
                    core.scratch.resize(n, 0);
                    // SAFETY: the send buffer holds `count` elements of `dtype`.
                    unsafe {
                        req.dtype
                            .pack_range(req.buf.0, req.count, s.offset, &mut core.scratch[..n])
                    };
                    t.try_send(s.peer, &hdr, &core.scratch[..n])
                }
                .map_err(p2p_fault)?;
                if !sent {
                    break;
                }
                s.offset += n;
                finished = s.offset >= total;
            }
            if finished {
                let send = s.send;
                core.streams.swap_remove(i);
                core.complete(send);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    // ----- requests posted by the API -----

    /// Create an inactive request (persistent, or about to be started).
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
        persistent: bool,
    ) -> ReqId {
        let context = self.core.comms.context(comm).unwrap_or(0);
        self.new_request_on(
            send, buf, count, dtype, comm, peer, tag, context, persistent,
        )
    }

    /// [`Engine::new_request`] with the communicator's context already looked up.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_request_on(
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
        let capacity = count * dtype.size();
        let id = self.core.reqs.insert(Request {
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
            dtype,
            comm,
            peer,
            tag,
            context,
            packed: None,
            bsend_bytes: 0,
            bsend_scope: BufferScope::Process,
            capacity,
            expected: 0,
            received: 0,
        });
        assert!(id < SENT_BASE, "request table full");
        ReqId(id)
    }

    /// The lean path of a small standard or ready send: when `data` fits the eager limit
    /// of the transport that reaches world rank `dest`, nothing waits before it for that
    /// peer (order), no device serves the peer and the transport has room, the message
    /// goes out now and the send is complete: returns its request-less id. Otherwise
    /// nothing happened and the caller takes the general path.
    pub(crate) fn send_eager_now(
        &mut self,
        dest: Rank,
        tag: i32,
        context: u32,
        data: &[u8],
    ) -> MpiResult<Option<ReqId>> {
        let core = &mut self.core;
        if data.len() > SENT_MAX_BYTES
            || dest == core.me
            || core.fault.is_some()
            || core
                .pending
                .get(dest as usize)
                .is_none_or(|q| !q.is_empty())
            || self.router.device_of(dest).is_some()
        {
            return Ok(None);
        }
        let Some(t) = self.router.to(dest) else {
            return Ok(None);
        };
        if data.len() > t.eager_limit() {
            return Ok(None);
        }
        let hdr = Header {
            kind: EAGER,
            src: core.me,
            tag,
            context,
            len: data.len() as u64,
            ..Header::default()
        };
        match t.try_send(dest, &hdr, data) {
            Ok(true) => {
                // A completion like any other for whoever watches the counter (the
                // threaded engine's progress threads advance services on it).
                core.completions = core.completions.wrapping_add(1);
                Ok(Some(ReqId::sent(data.len())))
            }
            Ok(false) => Ok(None),
            Err(e) => Err(core.set_fault(p2p_fault(e))),
        }
    }

    /// Start a request made by [`Engine::new_request`] (MPI_Start for persistent ones).
    pub(crate) fn start(&mut self, id: ReqId) -> MpiResult<()> {
        let req = self
            .core
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
        match req.op {
            Op::Send(mode) => self.start_send(id, mode)?,
            Op::Recv => {
                self.start_recv(id)?;
                // A receive that was only posted left nothing to carry out.
                if !self.core.has_deferred() {
                    return Ok(());
                }
            }
            Op::Scheduled => return Ok(()),
        }
        self.flush()
    }

    /// The communicator of a message taken by mprobe.
    pub(crate) fn msg_comm(&self, m: MsgId) -> Option<CommId> {
        self.core.msgs.get(m.0).map(|(c, _)| *c)
    }

    /// Re-home a not yet started request on another communicator.
    pub(crate) fn set_request_comm(&mut self, id: ReqId, comm: CommId) {
        let context = self.core.comms.context(comm).unwrap_or(0);
        if let Some(r) = self.core.reqs.get_mut(id.0) {
            r.comm = comm;
            r.context = context;
        }
    }

    /// Put a not yet started request on another context (internal collective traffic).
    pub(crate) fn set_request_context(&mut self, id: ReqId, context: u32) {
        if let Some(r) = self.core.reqs.get_mut(id.0) {
            r.context = context;
        }
    }

    fn start_recv(&mut self, id: ReqId) -> MpiResult<()> {
        let core = &mut self.core;
        let req = core.reqs.get_mut(id.0).expect("live request");
        if req.peer == PROC_NULL {
            req.status = Status::PROC_NULL;
            core.complete(id);
            return Ok(());
        }
        let (comm_id, peer, tag, context) = (req.comm, req.peer, req.tag, req.context);
        let src = if peer == ANY_SOURCE {
            ANY_WORLD
        } else {
            core.comms
                .world_rank(comm_id, peer as usize)
                .expect("checked by the API")
        };
        let q = core.queue(context);
        if let Some(pos) = q.find_unexpected(src, tag) {
            let a = q.take_unexpected(pos).expect("position is valid");
            core.consume(id, a);
            return self.flush();
        }
        q.post(Posted { id, src, tag });
        Ok(())
    }

    /// MPI_Mrecv / MPI_Imrecv: receive a message taken by mprobe into a started request.
    pub(crate) fn start_mrecv(&mut self, id: ReqId, msg: MsgId) -> MpiResult<()> {
        let (_, a) = self.core.msgs.remove(msg.0).ok_or_else(|| {
            mpi_err(
                ErrorClass::Request,
                "MPI_Mrecv: invalid message handle".into(),
            )
        })?;
        let req = self.core.reqs.get_mut(id.0).expect("live request");
        req.phase = Phase::Active;
        self.core.consume(id, a);
        self.flush()
    }

    /// Look for a matching message without receiving it (MPI_Iprobe); with `take`, remove
    /// it from the queue for a later MPI_Mrecv (MPI_Improbe).
    pub(crate) fn probe(
        &mut self,
        comm: CommId,
        peer: i32,
        tag: i32,
        take: bool,
    ) -> MpiResult<Option<(Status, Option<MsgId>)>> {
        let core = &mut self.core;
        let src = if peer == ANY_SOURCE {
            ANY_WORLD
        } else {
            core.comms
                .world_rank(comm, peer as usize)
                .expect("checked by the API")
        };
        let context = core.comms.context(comm).expect("checked by the API");
        let q = core.queue(context);
        let Some(pos) = q.find_unexpected(src, tag) else {
            return Ok(None);
        };
        let a = &q.unexpected[pos];
        let (asrc, atag, alen) = (a.src, a.tag, a.len);
        let source = core.comm_rank_of(comm, asrc);
        let status = Status {
            source,
            tag: atag,
            error: 0,
            bytes: alen,
            cancelled: false,
        };
        if take {
            let a = core.queue(context).take_unexpected(pos).expect("valid");
            let m = core.msgs.insert((comm, a));
            return Ok(Some((status, Some(MsgId(m)))));
        }
        Ok(Some((status, None)))
    }
}

fn no_route(peer: Rank) -> MpiError {
    mpi_err(
        ErrorClass::Intern,
        format!("no transport reaches world rank {peer}"),
    )
}

fn bad_request(call: &str, id: ReqId) -> MpiError {
    mpi_err(
        ErrorClass::Request,
        format!(
            "{call}: request {} is not a valid active or inactive request",
            id.0
        ),
    )
}

impl Engine {
    /// The communicator table (the runtime's view: every field of every communicator).
    #[inline]
    pub(crate) fn comms(&self) -> &CommTable {
        &self.core.comms
    }

    /// The communicator table, to add, change or remove communicators.
    #[inline]
    pub(crate) fn comms_mut(&mut self) -> &mut CommTable {
        &mut self.core.comms
    }

    /// Internal use: a byte type for packed buffers.
    pub(crate) fn byte_type(&self) -> TypeRef {
        self.core.byte_type.clone()
    }
}
