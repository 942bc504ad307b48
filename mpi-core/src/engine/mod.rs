//! The request layer: requests, matching, and the eager/rendezvous protocols, all state
//! kept in one [`Engine`] that the runtime guards with one lock.
//!
//! The engine is driven from two sides: API calls (post a send or a receive, probe,
//! cancel) and arrivals handed up by the transports during progress. Arrivals are handled
//! inside the transport's poll callback, which borrows the router; anything that needs to
//! *send* or *read remote memory* in response (CTS, FIN, SYNC_ACK, single-copy reads,
//! streamed chunks, sends that found no room) is queued in the core and carried out by
//! [`Engine::flush`] right after the poll returns.

use std::collections::{HashMap, VecDeque};

use tsunagi_p2p::device::DataRep;
use tsunagi_p2p::{Header, P2pError, Rank, Router};

mod core;
mod device;
mod lean_recv;
mod matching;
mod requests;
mod tools_view;
use device::{DeviceArrival, DeviceRecv};
pub(crate) use lean_recv::RecvArgs;
use matching::Body;
#[doc(hidden)]
pub use matching::{Arrived, Posted, Queues};

pub(crate) use crate::slab::Slab;

use crate::comm::{CommData, CommId};
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
    ctrl: Vec<(Rank, Header)>,
    cma: Vec<CmaRead>,
    streams: Vec<Stream>,
    scratch: Vec<u8>,
    pool: Vec<Vec<u8>>,
    pub comms: Vec<Option<CommData>>,
    /// The first transport failure; every later call reports it.
    pub fault: Option<MpiError>,
    /// Bumped whenever a request completes (threaded waits watch it).
    pub completions: u64,
    /// A message to self was queued and awaits delivery by `flush`.
    self_dirty: bool,
    /// Attached buffer for buffered sends: (address, size), and bytes in use.
    pub bsend_buffer: Option<(usize, usize)>,
    pub bsend_used: usize,
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
                ctrl: Vec::new(),
                cma: Vec::new(),
                streams: Vec::new(),
                scratch: Vec::new(),
                pool: Vec::new(),
                comms: Vec::new(),
                fault: None,
                completions: 0,
                self_dirty: false,
                bsend_buffer: None,
                bsend_used: 0,
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
        self.flush()?;
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

    /// Carry out what arrivals and API calls queued: control messages, single-copy reads,
    /// streamed chunks, and sends that waited for room.
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
            for r in reads {
                self.do_cma_read(r)?;
            }
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

    fn do_cma_read(&mut self, r: CmaRead) -> MpiResult<()> {
        let Engine { router, core } = self;
        let req = core
            .reqs
            .get_mut(r.recv.0)
            .expect("cma read for a live request");
        let take = r.len.min(req.capacity);
        let t = router.to(r.peer).ok_or_else(|| no_route(r.peer))?;
        let contiguous = req.dtype.contiguous_offset();
        let result = match contiguous {
            Some(off) => {
                let dst: &mut [u8] = if take == 0 {
                    &mut []
                } else {
                    // SAFETY: the receive buffer holds `capacity` bytes from `buf + off` (MPI
                    // contract for a contiguous type); `take <= capacity`.
                    unsafe { std::slice::from_raw_parts_mut(req.buf.0.offset(off), take) }
                };
                t.read_remote(r.peer, r.addr, dst)
            }
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
                res
            }
        };
        match result {
            Ok(()) => {
                req.received = r.len;
                let hdr = Header {
                    kind: FIN,
                    src: core.me,
                    cookie: r.sender_cookie,
                    ..Header::default()
                };
                core.complete(r.recv);
                self.send_or_queue(r.peer, hdr, &[])
            }
            Err(_) => {
                // Single copy refused (e.g. ptrace restrictions): fall back to streaming.
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
        let context = self.core.comm(comm).map(|c| c.context).unwrap_or(0);
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
        let context = self.core.comm(comm).map(|c| c.context).unwrap_or(0);
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

    fn start_send(&mut self, id: ReqId, mode: SendMode) -> MpiResult<()> {
        let req = self.core.reqs.get_mut(id.0).expect("live request");
        if req.peer == PROC_NULL {
            req.status = Status::PROC_NULL;
            self.core.complete(id);
            return Ok(());
        }
        let (comm_id, peer) = (req.comm, req.peer);
        let context = req.context;
        let (tag, bytes) = (req.tag, req.bytes());
        let comm = self.core.comm(comm_id).expect("checked by the API");
        let dest = comm.peer_group().world_rank(peer as usize);
        let me = self.core.me;
        let device = self.router.device_of(dest);
        let (eager_limit, single_copy) = if device.is_some() {
            (usize::MAX, false)
        } else {
            let t = self.router.to(dest).ok_or_else(|| no_route(dest))?;
            let eager_limit = t.eager_limit();
            // Asked only for rendezvous: eager messages (the latency-bound case) never
            // need it.
            (eager_limit, bytes > eager_limit && t.single_copy(dest))
        };

        if mode == SendMode::Buffered {
            let req = self.core.reqs.get_mut(id.0).expect("live request");
            let need = bytes + BSEND_OVERHEAD;
            let (_, size) = self.core.bsend_buffer.unwrap_or((0, 0));
            if self.core.bsend_used + need > size {
                let free = size.saturating_sub(self.core.bsend_used);
                req.phase = Phase::Done;
                return Err(mpi_err(
                    ErrorClass::Buffer,
                    format!(
                        "MPI_Bsend: insufficient buffer space: the message needs {need} bytes \
                         (data + MPI_BSEND_OVERHEAD), {free} of {size} attached bytes are free"
                    ),
                ));
            }
            self.core.bsend_used += need;
            let mut packed = vec![0u8; bytes];
            // SAFETY: the send buffer holds `count` elements of `dtype` (MPI contract).
            unsafe { req.dtype.pack_range(req.buf.0, req.count, 0, &mut packed) };
            // A buffered send completes locally: the copy travels as an internal request
            // (standard mode, eager or rendezvous) that gives the attached-buffer space
            // back when it is done, and the user's request completes now.
            let (comm, peer, context) = (req.comm, req.peer, req.context);
            req.status.bytes = bytes;
            let byte = self.core.byte_type.clone();
            let copy = self.new_request(
                Some(SendMode::Standard),
                Buf(packed.as_mut_ptr()),
                bytes,
                byte,
                comm,
                peer,
                tag,
                false,
            );
            let creq = self.core.reqs.get_mut(copy.0).expect("just made");
            creq.context = context;
            creq.packed = Some(packed);
            creq.bsend_bytes = need;
            creq.detached = true;
            creq.phase = Phase::Active;
            self.core.complete(id);
            return self.start_send(copy, SendMode::Standard);
        }

        if let Some(dev) = device {
            return self.start_device_send(id, mode, dev, dest);
        }
        let req = self.core.reqs.get_mut(id.0).expect("live request");
        if bytes <= eager_limit {
            let sync = mode == SendMode::Synchronous;
            let hdr = Header {
                kind: EAGER,
                flags: if sync { FLAG_SYNC } else { 0 },
                src: me,
                tag,
                context,
                len: bytes as u64,
                cookie: id.0 as u64,
                ..Header::default()
            };
            if let Some(p) = req.packed.take() {
                self.send_or_queue(dest, hdr, &p)?;
            } else if let Some(off) = req.dtype.contiguous_offset() {
                let data: &[u8] = if bytes == 0 {
                    // A zero-byte message may come from a NULL buffer: no slice from it.
                    &[]
                } else {
                    // SAFETY: the send buffer holds `bytes` bytes from `buf + off`.
                    unsafe { std::slice::from_raw_parts(req.buf.0.offset(off), bytes) }
                };
                self.send_or_queue(dest, hdr, data)?;
            } else {
                let mut tmp = std::mem::take(&mut self.core.scratch);
                tmp.resize(bytes, 0);
                // SAFETY: the send buffer holds `count` elements of `dtype`.
                unsafe { req.dtype.pack_range(req.buf.0, req.count, 0, &mut tmp) };
                let r = self.send_or_queue(dest, hdr, &tmp);
                self.core.scratch = tmp;
                r?;
            }
            let req = self.core.reqs.get_mut(id.0).expect("live request");
            req.status.bytes = bytes;
            if !sync {
                self.core.complete(id);
            }
            return Ok(());
        }

        // Rendezvous.
        let mut payload = [0u8; 8];
        let mut flags = 0;
        if single_copy {
            let addr = if let Some(p) = &req.packed {
                Some(p.as_ptr() as u64)
            } else if let Some(off) = req.dtype.contiguous_offset() {
                // SAFETY: pointer arithmetic within the user's buffer (MPI contract).
                Some(unsafe { req.buf.0.offset(off) } as u64)
            } else {
                let mut packed = vec![0u8; bytes];
                // SAFETY: the send buffer holds `count` elements of `dtype`.
                unsafe { req.dtype.pack_range(req.buf.0, req.count, 0, &mut packed) };
                let a = packed.as_ptr() as u64;
                req.packed = Some(packed);
                Some(a)
            };
            if let Some(a) = addr {
                // The transport may announce another address (PM: a registered region).
                let t = self.router.to(dest).ok_or_else(|| no_route(dest))?;
                // SAFETY: the send buffer (or the request's packed copy) stays valid and
                // untouched until the receiver answers with FIN or CTS (MPI contract).
                if let Ok(announced) = unsafe { t.expose(dest, a as *const u8, bytes) } {
                    payload = announced.to_ne_bytes();
                    flags = FLAG_CMA;
                }
            }
        }
        req.status.bytes = bytes;
        let hdr = Header {
            kind: RTS,
            flags,
            src: me,
            tag,
            context,
            len: bytes as u64,
            cookie: id.0 as u64,
            ..Header::default()
        };
        let body: &[u8] = if flags & FLAG_CMA != 0 { &payload } else { &[] };
        self.send_or_queue(dest, hdr, body)
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
        let comm = core.comm(comm_id).expect("checked by the API");
        let src = if peer == ANY_SOURCE {
            ANY_WORLD
        } else {
            comm.peer_group().world_rank(peer as usize)
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
        let c = core.comm(comm).expect("checked by the API");
        let src = if peer == ANY_SOURCE {
            ANY_WORLD
        } else {
            c.peer_group().world_rank(peer as usize)
        };
        let context = c.context;
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
    /// Internal use: a byte type for packed buffers.
    pub(crate) fn byte_type(&self) -> TypeRef {
        self.core.byte_type.clone()
    }
}
