//! The request layer: requests, matching, and the eager/rendezvous protocols, all state
//! kept in one [`Engine`] that the runtime guards with one lock.
//!
//! The engine is two parts. [`Core`] is the protocol core, without I/O: events in (API
//! calls: post a send or a receive, probe, cancel, `post.rs`, `send.rs`; arrivals,
//! `core.rs`; a read's end, a full transport, `actions.rs`), actions out (send this, read
//! that: `Core::poll_action`; DATA chunks: `Core::stream_chunk`), requests' completions
//! as state. [`Engine`] is the thin driver over the router: it polls the transports,
//! feeds arrivals to the core inside their poll callbacks (which borrow the router), and
//! carries out the core's actions in [`Engine::flush`] right after. Only the lean path of
//! a small send (`Engine::send_eager_now`) writes without the core's action, and sends to
//! native devices are one device call (`device.rs`). `fabric_tests.rs` drives cores alone.

use std::collections::{HashMap, VecDeque};

use tsunagi_p2p::device::DataRep;
use tsunagi_p2p::{Header, P2pError, Rank, ReadId, Router};

mod actions;
mod bsend;
mod core;
mod device;
#[cfg(test)]
mod fabric_tests;
mod lean_recv;
mod matching;
mod placed;
mod post;
mod requests;
mod send;
mod tools_view;
pub(crate) use actions::{Action, ReadInto, ReadOutcome};
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

/// `repr(C)`, in this order: the status first, the 8-byte fields next, the small ones last.
/// In the order the compiler chose, `status` came right after the 4-byte payload of
/// `bsend_scope`, which a receive leaves undefined; building a receive copied the two as
/// one 28-byte block from the stack with 16-byte loads that straddled the narrower stores
/// just made there, and each such load stalls on store forwarding (~15 cycles, in
/// `MPI_Irecv` and `MPI_Recv`; measured with `perf annotate`).
#[repr(C)]
struct Request {
    status: Status,
    buf: Buf,
    count: usize,
    /// The datatype, or None for the predefined `builtin`, which is then borrowed from the
    /// process-wide table (`Datatype::builtin_ref`): a receive used to clone the `Arc` and
    /// drop it at collection, two atomic read-modify-writes per message on the lean path,
    /// each a full barrier (`runtime/engine_lock.rs` says what those cost). Read it with
    /// [`Request::dtype`]. Two fields rather than an enum of a borrow and an `Arc` (as
    /// c-abi's `DtRef`): the enum's tag would push the request past its two cache lines
    /// (the assertion below), where `builtin` fits in padding.
    dtype: Option<TypeRef>,
    /// Send side: packed copy of the data (non-contiguous rendezvous, buffered sends).
    packed: Option<Vec<u8>>,
    /// Buffered send: bytes of the attached buffer to give back at completion.
    bsend_bytes: usize,
    /// Receive side: bytes announced, bytes arrived (the buffer holds [`Request::bytes`]).
    expected: usize,
    received: usize,
    /// Buffered send: the buffer those bytes belong to.
    bsend_scope: BufferScope,
    comm: CommId,
    /// Peer in the communicator: destination, or source / ANY_SOURCE, or PROC_NULL.
    peer: i32,
    tag: i32,
    context: u32,
    op: Op,
    phase: Phase,
    persistent: bool,
    /// MPI_Request_free was called (or the request is internal): drop it at completion.
    detached: bool,
    /// The predefined type when `dtype` is None (anything otherwise).
    builtin: Builtin,
}

// Two cache lines: a window of posted receives is written (lean_recv's insert) and read
// (arrival, collect) a line pair per request. Keep it there.
const _: () = assert!(std::mem::size_of::<Request>() <= 128);

/// A request's `dtype` and `builtin` fields for `t`: borrowed from the builtin table when
/// `t` is that table's instance, else shared.
#[inline(always)]
fn req_type(t: &TypeRef) -> (Option<TypeRef>, Builtin) {
    if let Some(b) = t.is_builtin() {
        if std::sync::Arc::ptr_eq(Datatype::builtin_ref(b), t) {
            return (None, b);
        }
    }
    (Some(t.clone()), Builtin::Byte)
}

impl Request {
    /// The request's datatype.
    #[inline]
    fn dtype(&self) -> &TypeRef {
        match &self.dtype {
            Some(t) => t,
            None => Datatype::builtin_ref(self.builtin),
        }
    }

    /// Bytes of the buffer (a receive's capacity).
    #[inline]
    fn bytes(&self) -> usize {
        self.count * self.dtype().size()
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
pub(crate) struct CmaRead {
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
    outbox: VecDeque<SendAction>,
    ctrl: VecDeque<(Rank, Header)>,
    cma: Vec<CmaRead>,
    /// Single-copy reads started and not yet over (a transport that reads without
    /// blocking, `Transport::start_read`), tested at every flush until each ends.
    reads_in_flight: Vec<(CmaRead, ReadId)>,
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
            core: Core::new(me, size, dev_reps),
        }
    }

    /// One polling-engine step over every transport, then the deferred work.
    pub(crate) fn progress(&mut self) -> MpiResult<usize> {
        let Engine { router, core } = self;
        let mut n = match router.poll_all_placing(core) {
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
        let n = match router.poll_one_placing(idx, core) {
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
        if self.core.blocked_peers() > 0 {
            self.retry_pending()?;
        }
        // Messages to self are delivered here, at once, so that no progress thread or
        // later poll is needed for them (the self path has no thread of its own). The
        // control step may itself send to self (a synchronous send's ack when a receive
        // matched a message from self), so the delivery is tried again after it: under
        // the threaded engine nothing else would ever poll the self path.
        loop {
            if self.core.self_dirty {
                self.core.self_dirty = false;
                let Engine { router, core } = self;
                if let Some(i) = router.route_of(core.me) {
                    router.transports()[i]
                        .poll(&mut |src, h, p| core.on_arrival(src, h, p))
                        .map_err(p2p_fault)?;
                }
            }
            self.flush_control()?;
            if !self.core.self_dirty {
                return Ok(());
            }
        }
    }

    fn flush_control(&mut self) -> MpiResult<()> {
        if !self.core.dev_accepts.is_empty() {
            self.flush_device_accepts()?;
        }
        if self.core.has_actions() || !self.core.reads_in_flight.is_empty() {
            self.carry_actions()?;
        }
        if self.core.stream_count() > 0 {
            self.push_streams()?;
        }
        Ok(())
    }

    /// Carry out the core's actions until it has none: sends, control messages and
    /// single-copy reads, all reads in flight at once where the transport reads without
    /// blocking (`Transport::start_read`); each read's end is told to the core, which
    /// answers with a FIN (done) or a CTS (refused: the sender streams instead).
    ///
    /// Reads that have not ended stay in flight (`Core::reads_in_flight`) and are tested
    /// again at the next flush, instead of being waited for here. Why: a read over the
    /// vendor needs the peer to answer, and a wait here would spin under the engine lock
    /// at the caller's priority, outside the waiting policy. With more ranks than cores, or
    /// with the threaded engine's progress threads below the application's real-time
    /// priority, the peer that must answer may then never get the core it needs (CG.A on 4
    /// ranks on 2 cores did not finish: docs/vendor-mpi.md, session 13). The request whose
    /// bytes are coming stays incomplete, so its waiter goes on through the waiting policy
    /// (spin, yield, sleep), and each of its passes tests the reads.
    pub(super) fn carry_actions(&mut self) -> MpiResult<()> {
        let mut flying = std::mem::take(&mut self.core.reads_in_flight);
        let r = self.carry_actions_with(&mut flying);
        // Kept after an error too: the buffers stay lent to the transport (the fault ends
        // the job, and nothing reuses the requests).
        self.core.reads_in_flight = flying;
        r
    }

    fn carry_actions_with(&mut self, flying: &mut Vec<(CmaRead, ReadId)>) -> MpiResult<()> {
        loop {
            while let Some(a) = self.core.poll_action() {
                match a {
                    Action::Send(a) => self.send_action(a)?,
                    Action::Control { peer, hdr } => self.send_or_queue(peer, hdr, &[])?,
                    Action::Read(r) => self.start_read(r, flying)?,
                }
            }
            // A read that ended may have queued its FIN or CTS: carry those out too.
            if flying.is_empty() || !self.test_reads(flying)? {
                return Ok(());
            }
        }
    }

    /// Test every read in `flying` once, telling the core of each that ended (and taking
    /// it out); whether any did.
    fn test_reads(&mut self, flying: &mut Vec<(CmaRead, ReadId)>) -> MpiResult<bool> {
        let mut finished = false;
        let mut i = 0;
        while i < flying.len() {
            let (peer, id) = (flying[i].0.peer(), flying[i].1);
            let t = self.router.to(peer).ok_or_else(|| no_route(peer))?;
            match t.test_read(id) {
                Ok(false) => i += 1,
                done => {
                    // Order among the reads does not matter: each names its request.
                    let (r, _) = flying.swap_remove(i);
                    let outcome = if done.is_ok() {
                        ReadOutcome::Done
                    } else {
                        ReadOutcome::Refused
                    };
                    self.core.read_finished(r, outcome);
                    finished = true;
                }
            }
        }
        Ok(finished)
    }

    /// Start read `r` where the core wants its bytes: in flight (added to `flying`), or
    /// over at once (a read into a staging buffer, for a non-contiguous receive, or one
    /// the transport refused), told to the core.
    fn start_read(&mut self, r: CmaRead, flying: &mut Vec<(CmaRead, ReadId)>) -> MpiResult<()> {
        let Engine { router, core } = self;
        let (into, take) = core.read_target(&r);
        let t = router.to(r.peer()).ok_or_else(|| no_route(r.peer()))?;
        match into {
            // SAFETY: `read_target` gives `take` writable bytes of the receive buffer
            // (MPI contract), untouched by anyone else until the core hears the read ended.
            ReadInto::Direct(dst) => match unsafe { t.start_read(r.peer(), r.addr(), dst, take) } {
                Ok(id) => flying.push((r, id)),
                Err(_) => core.read_finished(r, ReadOutcome::Refused),
            },
            ReadInto::Staged => {
                let mut staged = std::mem::take(&mut core.scratch);
                staged.resize(take, 0);
                match t.read_remote(r.peer(), r.addr(), &mut staged[..take]) {
                    Ok(()) => core.read_finished(r, ReadOutcome::Staged(&staged[..take])),
                    Err(_) => core.read_finished(r, ReadOutcome::Refused),
                }
                core.scratch = staged;
            }
        }
        Ok(())
    }

    /// Send what waited for room, peer by peer, while the transports take it.
    fn retry_pending(&mut self) -> MpiResult<()> {
        let Engine { router, core } = self;
        for peer in 0..core.pending.len() as Rank {
            let Some((hdr, payload)) = core.parked(peer) else {
                continue;
            };
            let t = router
                .to(peer)
                .expect("pending messages only for routed peers");
            let mut sent = t.try_send(peer, hdr, payload).map_err(p2p_fault)?;
            while sent {
                core.unpark(peer);
                sent = match core.parked(peer) {
                    Some((hdr, payload)) => t.try_send(peer, hdr, payload).map_err(p2p_fault)?,
                    None => false,
                };
            }
        }
        Ok(())
    }

    /// Send now if nothing waits before it for `peer` and the transport has room, else
    /// park a copy in the core (keeping per-peer order).
    fn send_or_queue(&mut self, peer: Rank, hdr: Header, payload: &[u8]) -> MpiResult<()> {
        let Engine { router, core } = self;
        if peer == core.me {
            core.self_dirty = true;
        }
        if !core.is_blocked(peer) {
            let t = router.to(peer).ok_or_else(|| no_route(peer))?;
            if t.try_send(peer, &hdr, payload).map_err(p2p_fault)? {
                return Ok(());
            }
        }
        core.park(peer, hdr, payload);
        Ok(())
    }

    /// Send the DATA chunks of streaming sends while the transports take them.
    fn push_streams(&mut self) -> MpiResult<()> {
        let Engine { router, core } = self;
        let mut i = 0;
        while i < core.stream_count() {
            let peer = core.stream_peer(i);
            let t = router.to(peer).ok_or_else(|| no_route(peer))?;
            let max = t.max_payload();
            loop {
                let Some((hdr, data)) = core.stream_chunk(i, max) else {
                    core.end_stream(i);
                    break;
                };
                let n = data.len();
                if !t.try_send(peer, &hdr, data).map_err(p2p_fault)? {
                    i += 1;
                    break;
                }
                core.chunk_sent(i, n);
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
    #[inline]
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
        self.core.new_request(
            send, buf, count, dtype, comm, peer, tag, context, persistent,
        )
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
        match self.core.activate(id)? {
            Op::Send(mode) => self.start_send(id, mode)?,
            Op::Recv => {
                self.core.start_recv(id);
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

    /// MPI_Mrecv / MPI_Imrecv: receive a message taken by mprobe into a started request.
    pub(crate) fn start_mrecv(&mut self, id: ReqId, msg: MsgId) -> MpiResult<()> {
        self.core.start_mrecv(id, msg)?;
        self.flush()
    }

    /// Look for a matching message without receiving it (MPI_Iprobe); with `take`, remove
    /// it from the queue for a later MPI_Mrecv (MPI_Improbe).
    #[inline]
    pub(crate) fn probe(
        &mut self,
        comm: CommId,
        peer: i32,
        tag: i32,
        take: bool,
    ) -> MpiResult<Option<(Status, Option<MsgId>)>> {
        Ok(self.core.probe(comm, peer, tag, take))
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
