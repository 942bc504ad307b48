//! The origin side: issuing operations (as requests to the target's service), and every
//! synchronisation call (fence, post/start/complete/wait/test, lock/unlock, lock_all,
//! the flush family, sync).
//!
//! Completion rests on one property of the core: messages from one process to another
//! on one communicator and tag are received in the order they were sent, and the target
//! applies requests in that order. So an acknowledged FLUSH, UNLOCK, or a COMPLETE
//! message, follows everything the origin sent before it. Answers (get data) come back in
//! request order too, into receives posted in that order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tsunagi_collectives::op::Op;
use tsunagi_core::datatype::{Builtin, TypeRef};
use tsunagi_core::group::Group;
use tsunagi_core::runtime::{Requests, Schedule};
use tsunagi_core::{ErrorClass, MpiResult, ReqId, Runtime, SendMode, PROC_NULL};

use crate::window::*;
use crate::wire::{self, Kind, Request};

/// An internal request of the origin that must complete before the epoch does.
pub(crate) struct Pending {
    target: usize,
    req: ReqId,
    /// What the request sends from, kept until it completes.
    _buf: Vec<u8>,
    /// An acknowledgement's buffer (its error count is read on completion).
    ack: Option<Box<[u8; wire::ACK]>>,
    /// Set on completion (request-based operations watch it).
    done: Option<Arc<AtomicBool>>,
}

/// Epoch bookkeeping of the origin (and of the target's exposure epochs).
pub(crate) struct OriginState {
    pending: Vec<Pending>,
    /// Operations sent to each target since its last acknowledged flush.
    dirty: Vec<bool>,
    /// Between fences (no MPI_MODE_NOSUCCEED).
    fence: bool,
    /// MPI_Win_start's group.
    access: Option<Vec<usize>>,
    /// MPI_Win_post's group size, as the running total of COMPLETEs to wait for.
    exposure: Option<u64>,
    expected_completes: u64,
    /// Lock held per target: 0 none, else LOCK_SHARED / LOCK_EXCLUSIVE (| NOCHECK bit).
    locks: Vec<i32>,
    lock_all: Option<bool>,
    /// Refused operations reported by acknowledgements, not yet raised.
    refused: u64,
    /// FENCE messages sent to each rank so far: two per MPI_Win_fence (see `fence`).
    fence_seq: u64,
}

const NOCHECK_BIT: i32 = 1 << 20;
/// The lock was taken directly on the segment's word (a target of this node).
const LOCAL_BIT: i32 = 1 << 21;

impl OriginState {
    pub(crate) fn new(n: usize) -> OriginState {
        OriginState {
            pending: Vec::new(),
            dirty: vec![false; n],
            fence: false,
            access: None,
            exposure: None,
            expected_completes: 0,
            locks: vec![0; n],
            lock_all: None,
            refused: 0,
            fence_seq: 0,
        }
    }

    /// Collect the completed pending requests that `filter` selects; true when none of
    /// them is left.
    fn reap(&mut self, reqs: &mut Requests<'_>, filter: &dyn Fn(&Pending) -> bool) -> bool {
        let mut all = true;
        let mut refused = 0u64;
        self.pending.retain(|p| {
            if !filter(p) {
                return true;
            }
            match reqs.test(p.req) {
                Ok(None) => {
                    all = false;
                    true
                }
                _ => {
                    if let Some(a) = &p.ack {
                        if let Ok((_, n)) = wire::decode_ack(&a[..]) {
                            refused += n as u64;
                        }
                    }
                    if let Some(d) = &p.done {
                        d.store(true, Ordering::Release);
                    }
                    false
                }
            }
        });
        self.refused += refused;
        all
    }
}

/// A one-sided operation's description.
pub struct Access<'a> {
    pub addr: *mut u8,
    pub count: i64,
    pub dtype: &'a TypeRef,
}

/// The request of a request-based operation: complete when its flag is.
struct RmaRequest {
    win: Arc<Window>,
    done: Option<Arc<AtomicBool>>,
}

impl Schedule for RmaRequest {
    fn advance(&mut self, _rt: &Runtime) -> MpiResult<bool> {
        let Some(d) = &self.done else { return Ok(true) };
        if d.load(Ordering::Acquire) {
            return Ok(true);
        }
        self.win.poll();
        Ok(d.load(Ordering::Acquire))
    }
}

fn rma_sync(call: &str, what: &str) -> tsunagi_core::MpiError {
    err(ErrorClass::RmaSync, format!("{call}: {what}"))
}

/// The builtin whose elements a type is made of, for accumulates (None: mixed).
fn element_of(t: &TypeRef) -> Option<u8> {
    let p = t.homogeneous_primitive()?;
    Builtin::ALL
        .iter()
        .position(|b| b.primitive() == p)
        .map(|i| i as u8)
}

impl Window {
    fn check_rank(&self, call: &str, rank: i32) -> MpiResult<Option<usize>> {
        if rank == PROC_NULL {
            return Ok(None);
        }
        if rank < 0 || rank as usize >= self.nranks {
            return Err(err(
                ErrorClass::Rank,
                format!(
                    "{call}: target rank {rank} is not in the window (size {})",
                    self.nranks
                ),
            ));
        }
        Ok(Some(rank as usize))
    }

    fn check_type(call: &str, name: &str, t: &TypeRef) -> MpiResult<()> {
        if !t.is_committed() {
            return Err(err(
                ErrorClass::Type,
                format!("{call}: {name} is not committed"),
            ));
        }
        Ok(())
    }

    pub(crate) fn check_no_epoch(&self, call: &str) -> MpiResult<()> {
        let st = lock(&self.origin);
        if st.access.is_some() || st.exposure.is_some() {
            return Err(rma_sync(call, "an active-target epoch is still open"));
        }
        if st.lock_all.is_some() || st.locks.iter().any(|l| *l != 0) {
            return Err(rma_sync(
                call,
                "a passive-target epoch (lock) is still open",
            ));
        }
        Ok(())
    }

    /// Progress the origin's pending requests without blocking (request-based
    /// operations' completion).
    pub(crate) fn poll(&self) {
        let taken = std::mem::take(&mut lock(&self.origin).pending);
        let mut left = Vec::with_capacity(taken.len());
        let mut refused = 0;
        for p in taken {
            match self.rt.test_quiet(p.req) {
                Ok(None) => left.push(p),
                _ => {
                    if let Some(a) = &p.ack {
                        if let Ok((_, n)) = wire::decode_ack(&a[..]) {
                            refused += n as u64;
                        }
                    }
                    if let Some(d) = &p.done {
                        d.store(true, Ordering::Release);
                    }
                }
            }
        }
        let mut st = lock(&self.origin);
        st.refused += refused;
        left.append(&mut st.pending);
        st.pending = left;
    }

    /// Wait until every pending request `filter` selects is complete; then raise the
    /// refusals acknowledgements reported.
    pub(crate) fn wait_pending(
        &self,
        call: &str,
        filter: impl Fn(&Pending) -> bool,
    ) -> MpiResult<()> {
        self.rt
            .wait_until(|reqs| Ok(lock(&self.origin).reap(reqs, &filter)))?;
        let refused = std::mem::take(&mut lock(&self.origin).refused);
        if refused > 0 {
            return Err(err(
                ErrorClass::RmaRange,
                format!(
                    "{call}: {refused} operation(s) addressed memory outside the target's window and were not done"
                ),
            ));
        }
        Ok(())
    }

    fn send(
        &self,
        target: usize,
        tag: i32,
        data: Vec<u8>,
        done: Option<Arc<AtomicBool>>,
    ) -> MpiResult<()> {
        // SAFETY: the vector's heap buffer stays in `pending` until the send completes.
        let id = unsafe {
            self.rt.isend(
                "MPI_Win",
                data.as_ptr(),
                data.len() as i64,
                &self.byte,
                target as i32,
                tag,
                self.wcomm,
                SendMode::Standard,
            )?
        };
        lock(&self.origin).pending.push(Pending {
            target,
            req: id,
            _buf: data,
            ack: None,
            done,
        });
        Ok(())
    }

    /// Send a request message, as a `BIG` stub plus the message when it is too large for
    /// the target's buffer.
    fn send_request(&self, target: usize, msg: Vec<u8>) -> MpiResult<()> {
        if msg.len() <= REQ_BUF {
            return self.send(target, TAG_REQ, msg, None);
        }
        let mut stub = Request::control(Kind::Flush, wire::BIG);
        stub.payload_len = msg.len() as u64;
        self.send(target, TAG_REQ, stub.encode(&[]), None)?;
        self.send(target, TAG_DATA, msg, None)
    }

    /// Post the receive of an acknowledgement from `target`.
    fn expect_ack(&self, target: usize) -> MpiResult<()> {
        let mut buf = Box::new([0u8; wire::ACK]);
        // SAFETY: the box stays in `pending` until the receive completes.
        let id = unsafe {
            self.rt.irecv(
                "MPI_Win",
                buf.as_mut_ptr(),
                wire::ACK as i64,
                &self.byte,
                target as i32,
                TAG_ACK,
                self.wcomm,
            )?
        };
        lock(&self.origin).pending.push(Pending {
            target,
            req: id,
            _buf: Vec::new(),
            ack: Some(buf),
            done: None,
        });
        Ok(())
    }

    fn control(&self, target: usize, kind: Kind, flags: u8, ack: bool) -> MpiResult<()> {
        let _g = lock(&self.issuing);
        if ack {
            self.expect_ack(target)?;
        }
        self.send_request(target, Request::control(kind, flags).encode(&[]))
    }

    /// Every one-sided operation: check, describe the target memory, send, and post the
    /// receive of the answer. Returns the request of a request-based operation.
    ///
    /// # Safety
    /// `origin` (read) and `result` (written) must hold their counts of their types and
    /// stay valid until the operation completes (the epoch ends, or the request does).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn operate(
        self: &Arc<Self>,
        call: &str,
        kind: Kind,
        origin: Option<Access<'_>>,
        compare: Option<*const u8>,
        result: Option<Access<'_>>,
        target_rank: i32,
        target_disp: isize,
        target_count: i64,
        target_type: &TypeRef,
        op: Option<&Op>,
        request: bool,
    ) -> MpiResult<Option<ReqId>> {
        let done_request = |rt: &Runtime, d: Option<Arc<AtomicBool>>| -> MpiResult<Option<ReqId>> {
            if !request {
                return Ok(None);
            }
            rt.start_schedule(Box::new(RmaRequest {
                win: self.clone(),
                done: d,
            }))
            .map(Some)
        };
        for (name, a) in [("origin_count", &origin), ("result_count", &result)] {
            if let Some(a) = a {
                if a.count < 0 {
                    return Err(err(
                        ErrorClass::Count,
                        format!("{call}: {name} = {} is negative", a.count),
                    ));
                }
                Self::check_type(call, &name.replace("count", "datatype"), a.dtype)?;
            }
        }
        if target_count < 0 {
            return Err(err(
                ErrorClass::Count,
                format!("{call}: target_count = {target_count} is negative"),
            ));
        }
        Self::check_type(call, "target_datatype", target_type)?;
        let Some(t) = self.check_rank(call, target_rank)? else {
            return done_request(self.rt, None);
        };
        {
            let st = lock(&self.origin);
            let open = st.fence
                || st.lock_all.is_some()
                || st.locks[t] != 0
                || st.access.as_ref().is_some_and(|g| g.contains(&t));
            if !open {
                return Err(rma_sync(
                    call,
                    &format!("no access epoch to rank {t} is open (call MPI_Win_fence, MPI_Win_start or MPI_Win_lock first)"),
                ));
            }
        }
        // The target memory as runs, checked against the target's window size here
        // (dynamic windows: the target checks attached memory).
        let runs: Vec<(i64, u64)> = target_type
            .runs(target_count as usize)
            .into_iter()
            .map(|(o, n)| (o as i64, n as u64))
            .collect();
        let total: u64 = runs.iter().map(|r| r.1).sum();
        // Nothing to move on either side: done, with no op/datatype check and no message,
        // as in MPICH (mpi4py's test_rma does a Get_accumulate of 0 MPI_BYTEs with MPI_SUM).
        let empty = |a: &Option<Access<'_>>| {
            a.as_ref()
                .is_none_or(|a| a.count == 0 || a.dtype.size() == 0)
        };
        if total == 0 && empty(&origin) && empty(&result) {
            return done_request(self.rt, None);
        }
        let base: i128 = if self.flavor == Flavor::Dynamic {
            target_disp as i128
        } else {
            target_disp as i128 * self.peers[t].disp_unit as i128
        };
        if self.flavor != Flavor::Dynamic {
            let size = self.peers[t].size as i128;
            for &(o, n) in &runs {
                let s = base + o as i128;
                if s < 0 || s + n as i128 > size {
                    return Err(err(
                        ErrorClass::RmaRange,
                        format!(
                            "{call}: target bytes [{s}, {}) are outside rank {t}'s window of {size} bytes",
                            s + n as i128
                        ),
                    ));
                }
            }
        }
        if base < 0 || base > u64::MAX as i128 {
            return Err(err(
                ErrorClass::Disp,
                format!("{call}: target_disp {target_disp} is out of range"),
            ));
        }
        let signature = |name: &str, a: &Access<'_>| -> MpiResult<()> {
            let n = a.dtype.size() as u64 * a.count as u64;
            if n != total {
                return Err(err(
                    ErrorClass::Type,
                    format!(
                        "{call}: the {name} buffer holds {n} bytes, the target datatype {total}"
                    ),
                ));
            }
            Ok(())
        };
        // No-op accumulates that fetch are gets.
        let kind = match (kind, op) {
            (Kind::GetAcc, Some(Op::NoOp)) => Kind::Get,
            (k, _) => k,
        };
        let mut head = Request {
            kind,
            op: 0,
            elem: 0,
            flags: 0,
            base: base as u64,
            payload_len: 0,
            runs,
        };
        // The origin data, packed (or sent in place when it is large and contiguous).
        let mut inline: Vec<u8> = Vec::new();
        let mut in_place: Option<(*const u8, usize)> = None;
        match kind {
            Kind::Put | Kind::Acc | Kind::GetAcc => {
                let o = origin
                    .as_ref()
                    .expect("operations with origin data pass it");
                signature("origin", o)?;
                if kind != Kind::Put {
                    let op = op.expect("accumulates pass an op");
                    if op.mpich_code().is_none() {
                        return Err(err(ErrorClass::Op, format!("{call}: only predefined operations may be used in one-sided accumulates")));
                    }
                    op.check_type(call, target_type)?;
                    op.check_type(call, o.dtype)?;
                    head.op = (op.mpich_code().expect("predefined") & 0xff) as u8;
                    head.elem = match element_of(target_type).or_else(|| element_of(o.dtype)) {
                        Some(e) => e,
                        None if matches!(op, Op::Replace | Op::NoOp) => wire::ELEM_BYTES,
                        None => {
                            return Err(err(
                                ErrorClass::Type,
                                format!(
                                    "{call}: the datatypes' basic elements are not all of one kind"
                                ),
                            ))
                        }
                    };
                }
                head.payload_len = total;
                let contiguous = o.dtype.contiguous_offset();
                let big = total as usize + wire::HEADER + head.runs.len() * 16 > REQ_BUF;
                match contiguous {
                    Some(off) if big && !request => {
                        in_place = Some((o.addr.wrapping_offset(off), total as usize));
                        head.flags |= wire::FOLLOWS;
                    }
                    _ => {
                        inline = o.dtype.pack(o.addr, o.count as usize);
                        if big {
                            head.flags |= wire::FOLLOWS;
                        }
                    }
                }
            }
            Kind::Cas => {
                let o = origin.as_ref().expect("CAS passes origin data");
                signature("origin", o)?;
                let p = o.dtype.homogeneous_primitive();
                if !p.is_some_and(|p| {
                    p.is_integer() || p.is_logical() || p == tsunagi_core::datatype::Primitive::Byte
                }) || o.count != 1
                {
                    return Err(err(ErrorClass::Type, format!("{call}: the datatype must be one predefined integer, logical or byte element")));
                }
                head.elem = element_of(o.dtype).unwrap_or(wire::ELEM_BYTES);
                inline = o.dtype.pack(o.addr, 1);
                inline.extend_from_slice(&o.dtype.pack(compare.expect("CAS passes compare"), 1));
                head.payload_len = 2 * total;
            }
            _ => {}
        }
        if let Some(r) = &result {
            signature("result", r)?;
        }
        if let Some((tbase, word)) = self.shared_target(t) {
            // A shared window: every rank's memory is mapped here, so the operation is
            // done now by direct access (accumulates under the target's lock word).
            let data: &[u8] = match in_place {
                // SAFETY: the origin buffer holds `n` contiguous bytes (caller contract).
                Some((p, n)) => std::slice::from_raw_parts(p, n),
                None => &inline,
            };
            let pieces: Vec<(*mut u8, usize)> = head
                .runs
                .iter()
                .map(|&(o, n)| {
                    (
                        tbase.wrapping_offset(head.base as isize + o as isize),
                        n as usize,
                    )
                })
                .collect();
            // SAFETY (gather/scatter): the pieces were checked against the target's size
            // above and lie in the mapped segment.
            let gather = || {
                let mut v = Vec::with_capacity(total as usize);
                for &(p, n) in &pieces {
                    v.extend_from_slice(std::slice::from_raw_parts(p, n));
                }
                v
            };
            let scatter = |bytes: &[u8]| {
                let mut at = 0;
                for &(p, n) in &pieces {
                    std::ptr::copy(bytes.as_ptr().add(at), p, n);
                    at += n;
                }
            };
            let deliver = |bytes: &[u8]| {
                let r = result
                    .as_ref()
                    .expect("fetching operations pass a result buffer");
                r.dtype.unpack_range(r.addr, r.count as usize, 0, bytes);
            };
            match kind {
                Kind::Put => scatter(data),
                Kind::Get => deliver(&gather()),
                Kind::Acc | Kind::GetAcc => {
                    let op = op.expect("accumulates pass an op");
                    let _held = SegmentLock::acquire(word);
                    let mut cur = gather();
                    if kind == Kind::GetAcc {
                        deliver(&cur);
                    }
                    if !crate::target::combine(op, head.elem, data, &mut cur) {
                        return Err(err(
                            ErrorClass::Op,
                            format!("{call}: {} is not defined on the datatype", op.name()),
                        ));
                    }
                    if !matches!(op, Op::NoOp) {
                        scatter(&cur);
                    }
                }
                Kind::Cas => {
                    let _held = SegmentLock::acquire(word);
                    let old = gather();
                    let (new, cmp) = data.split_at(total as usize);
                    if old == cmp {
                        scatter(new);
                    }
                    deliver(&old);
                }
                _ => {}
            }
            return done_request(self.rt, None);
        }
        let done = request.then(|| Arc::new(AtomicBool::new(false)));
        {
            let _g = lock(&self.issuing);
            if matches!(kind, Kind::Get | Kind::GetAcc | Kind::Cas) {
                let r = result
                    .as_ref()
                    .expect("fetching operations pass a result buffer");
                let id = self.rt.irecv(
                    call, r.addr, r.count, r.dtype, t as i32, TAG_REPLY, self.wcomm,
                )?;
                lock(&self.origin).pending.push(Pending {
                    target: t,
                    req: id,
                    _buf: Vec::new(),
                    ack: None,
                    done: done.clone(),
                });
            }
            if head.flags & wire::FOLLOWS != 0 {
                self.send_request(t, head.encode(&[]))?;
                match in_place {
                    Some((p, n)) => {
                        let id = self.rt.isend(
                            call,
                            p,
                            n as i64,
                            &self.byte,
                            t as i32,
                            TAG_DATA,
                            self.wcomm,
                            SendMode::Standard,
                        )?;
                        lock(&self.origin).pending.push(Pending {
                            target: t,
                            req: id,
                            _buf: Vec::new(),
                            ack: None,
                            done: None,
                        });
                    }
                    None => self.send(t, TAG_DATA, inline, None)?,
                }
            } else {
                self.send_request(t, head.encode(&inline))?;
            }
            lock(&self.origin).dirty[t] = true;
        }
        // Keep the pending list short in long epochs (eager sends are complete already).
        if lock(&self.origin).pending.len() > 256 {
            self.poll();
        }
        // Request-based puts and accumulates copied their data: complete locally now.
        let d = if matches!(kind, Kind::Get | Kind::GetAcc | Kind::Cas) {
            done
        } else {
            None
        };
        done_request(self.rt, d)
    }

    /// Send a FLUSH to every dirty target `filter` selects.
    fn flush_dirty(&self, select: impl Fn(usize) -> bool) -> MpiResult<()> {
        let targets: Vec<usize> = {
            let mut st = lock(&self.origin);
            (0..self.nranks)
                .filter(|&t| st.dirty[t] && select(t))
                .inspect(|_| {})
                .collect::<Vec<_>>()
                .into_iter()
                .inspect(|&t| st.dirty[t] = false)
                .collect()
        };
        for t in targets {
            self.control(t, Kind::Flush, 0, true)?;
        }
        Ok(())
    }

    /// `MPI_Win_fence`: two rounds of messages instead of flushes and a barrier. In each
    /// round every rank sends FENCE to every rank (itself included) and waits for
    /// everyone's. A FENCE from a rank is applied after everything that rank sent before
    /// it (order per pair), so when all of the first round have arrived every operation
    /// of the epoch *on this rank's window* is done. The second round makes that true of
    /// every window before anyone goes on. With one round, a rank whose FENCEs had all
    /// arrived could start its next epoch while another target still waited for one, and
    /// its next operation could overtake a third rank's accumulate to that target:
    /// `large.c`'s get after an accumulate on 3 ranks read 3 instead of 6 in 11 of 40
    /// runs. (A barrier of the collectives in place of the second round was cheaper,
    /// 1.12-1.50 µs against 1.71-1.84 for an 8-byte put with fence on 2 ranks, but its
    /// first use sets up a shared-memory area collectively on the window's communicator,
    /// and the threaded mpi4py suite once hung with one rank in `MPI_Win_free`'s exchange
    /// and the other in the next `MPI_Win_create`, likely that set-up's exchange matched
    /// with `MPI_Win_free`'s: the RMA protocol stays self-contained.)
    pub fn fence(&self, assert: i32) -> MpiResult<()> {
        let call = "MPI_Win_fence";
        Self::check_assert(call, assert)?;
        let seq = {
            let mut st = lock(&self.origin);
            if st.access.is_some()
                || st.exposure.is_some()
                || st.lock_all.is_some()
                || st.locks.iter().any(|l| *l != 0)
            {
                return Err(rma_sync(call, "another epoch (post/start or lock) is open"));
            }
            st.fence_seq += 2;
            st.dirty.iter_mut().for_each(|d| *d = false);
            st.fence_seq
        };
        for round in [seq - 1, seq] {
            for t in 0..self.nranks {
                self.control(t, Kind::Fence, 0, false)?;
            }
            let all_fenced = || {
                self.fences
                    .iter()
                    .all(|f| f.load(Ordering::Acquire) >= round)
            };
            self.rt
                .wait_until(|reqs| Ok(lock(&self.origin).reap(reqs, &|_| true) && all_fenced()))?;
        }
        lock(&self.origin).fence = assert & MODE_NOSUCCEED == 0;
        let refused = std::mem::take(&mut lock(&self.origin).refused);
        if refused > 0 {
            return Err(err(
                ErrorClass::RmaRange,
                format!("{call}: {refused} operation(s) addressed memory outside the target's window and were not done"),
            ));
        }
        Ok(())
    }

    /// `MPI_Win_start`: an access epoch to `group` (waits for their posts).
    pub fn start(&self, group: &Group, assert: i32) -> MpiResult<()> {
        let call = "MPI_Win_start";
        Self::check_assert(call, assert)?;
        let ranks = self.ranks_of(call, group)?;
        if lock(&self.origin).access.is_some() {
            return Err(rma_sync(
                call,
                "an access epoch (MPI_Win_start) is already open",
            ));
        }
        if assert & MODE_NOCHECK == 0 {
            self.rt.wait_until(|_| {
                Ok(ranks
                    .iter()
                    .all(|&r| self.posts[r].load(Ordering::Acquire) > 0))
            })?;
            for &r in &ranks {
                self.posts[r].fetch_sub(1, Ordering::AcqRel);
            }
        }
        lock(&self.origin).access = Some(ranks);
        Ok(())
    }

    /// `MPI_Win_complete`: end the access epoch of `start`.
    pub fn complete(&self) -> MpiResult<()> {
        let call = "MPI_Win_complete";
        let Some(ranks) = lock(&self.origin).access.take() else {
            return Err(rma_sync(call, "no access epoch (MPI_Win_start) is open"));
        };
        for &r in &ranks {
            lock(&self.origin).dirty[r] = false;
            self.control(r, Kind::Complete, 0, false)?;
        }
        self.wait_pending(call, |p| ranks.contains(&p.target))
    }

    /// `MPI_Win_post`: an exposure epoch to `group`.
    pub fn post(&self, group: &Group, assert: i32) -> MpiResult<()> {
        let call = "MPI_Win_post";
        Self::check_assert(call, assert)?;
        let ranks = self.ranks_of(call, group)?;
        {
            let mut st = lock(&self.origin);
            if st.exposure.is_some() {
                return Err(rma_sync(
                    call,
                    "an exposure epoch (MPI_Win_post) is already open",
                ));
            }
            st.expected_completes += ranks.len() as u64;
            st.exposure = Some(st.expected_completes);
        }
        if assert & MODE_NOCHECK == 0 {
            for &r in &ranks {
                self.control(r, Kind::Post, 0, false)?;
            }
        }
        Ok(())
    }

    /// `MPI_Win_wait`: end the exposure epoch once every origin completed.
    pub fn wait(&self) -> MpiResult<()> {
        let call = "MPI_Win_wait";
        let Some(expected) = lock(&self.origin).exposure else {
            return Err(rma_sync(call, "no exposure epoch (MPI_Win_post) is open"));
        };
        self.rt
            .wait_until(|_| Ok(self.completes.load(Ordering::Acquire) >= expected))?;
        lock(&self.origin).exposure = None;
        Ok(())
    }

    /// `MPI_Win_test`: like wait, without blocking; true when the epoch ended.
    pub fn test(&self) -> MpiResult<bool> {
        let call = "MPI_Win_test";
        let Some(expected) = lock(&self.origin).exposure else {
            return Err(rma_sync(call, "no exposure epoch (MPI_Win_post) is open"));
        };
        self.rt.progress()?;
        // The progress step may not have reached the services: wait once, for nothing.
        self.rt.wait_until(|_| Ok(true))?;
        if self.completes.load(Ordering::Acquire) >= expected {
            lock(&self.origin).exposure = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// `MPI_Win_lock`.
    pub fn lock(&self, lock_type: i32, rank: i32, assert: i32) -> MpiResult<()> {
        let call = "MPI_Win_lock";
        Self::check_assert(call, assert)?;
        if lock_type != LOCK_EXCLUSIVE && lock_type != LOCK_SHARED {
            return Err(err(ErrorClass::Locktype, format!("{call}: lock_type {lock_type} is neither MPI_LOCK_EXCLUSIVE nor MPI_LOCK_SHARED")));
        }
        let Some(t) = self.check_rank(call, rank)? else {
            return Ok(());
        };
        {
            let st = lock(&self.origin);
            if st.locks[t] != 0 || st.lock_all.is_some() {
                return Err(rma_sync(
                    call,
                    &format!("rank {t} is already locked by this process"),
                ));
            }
        }
        if assert & MODE_NOCHECK != 0 {
            lock(&self.origin).locks[t] = lock_type | NOCHECK_BIT;
            return Ok(());
        }
        if let Some(w) = self.lock_word(t) {
            // A target of this node: take its lock word, serving others while waiting.
            let excl = lock_type == LOCK_EXCLUSIVE;
            self.rt.wait_until(|_| Ok(RwWord::try_acquire(w, excl)))?;
            lock(&self.origin).locks[t] = lock_type | LOCAL_BIT;
            return Ok(());
        }
        let flags = if lock_type == LOCK_EXCLUSIVE {
            wire::EXCLUSIVE
        } else {
            0
        };
        self.control(t, Kind::Lock, flags, true)?;
        self.wait_pending(call, |p| p.target == t)?;
        lock(&self.origin).locks[t] = lock_type;
        Ok(())
    }

    /// `MPI_Win_unlock`: completes every operation to `rank` at the target.
    pub fn unlock(&self, rank: i32) -> MpiResult<()> {
        let call = "MPI_Win_unlock";
        let Some(t) = self.check_rank(call, rank)? else {
            return Ok(());
        };
        let held = lock(&self.origin).locks[t];
        if held == 0 {
            return Err(rma_sync(
                call,
                &format!("rank {t} is not locked by this process"),
            ));
        }
        lock(&self.origin).dirty[t] = false;
        if held & LOCAL_BIT != 0 {
            // Operations on a target of this node were done in place: nothing is pending.
            std::sync::atomic::fence(Ordering::SeqCst);
            RwWord::release(
                self.lock_word(t).expect("a local lock"),
                held & !LOCAL_BIT == LOCK_EXCLUSIVE,
            );
            lock(&self.origin).locks[t] = 0;
            return Ok(());
        }
        if held & NOCHECK_BIT != 0 {
            self.control(t, Kind::Flush, 0, true)?;
        } else {
            self.control(t, Kind::Unlock, 0, true)?;
        }
        let r = self.wait_pending(call, |p| p.target == t);
        lock(&self.origin).locks[t] = 0;
        r
    }

    /// `MPI_Win_lock_all`: a shared lock on every rank.
    pub fn lock_all(&self, assert: i32) -> MpiResult<()> {
        let call = "MPI_Win_lock_all";
        Self::check_assert(call, assert)?;
        {
            let st = lock(&self.origin);
            if st.lock_all.is_some() || st.locks.iter().any(|l| *l != 0) {
                return Err(rma_sync(call, "a lock is already held"));
            }
        }
        let nocheck = assert & MODE_NOCHECK != 0;
        if !nocheck {
            for t in 0..self.nranks {
                if self.lock_word(t).is_none() {
                    self.control(t, Kind::Lock, 0, true)?;
                }
            }
            for t in 0..self.nranks {
                if let Some(w) = self.lock_word(t) {
                    self.rt.wait_until(|_| Ok(RwWord::try_acquire(w, false)))?;
                }
            }
            self.wait_pending(call, |_| true)?;
        }
        lock(&self.origin).lock_all = Some(nocheck);
        Ok(())
    }

    /// `MPI_Win_unlock_all`.
    pub fn unlock_all(&self) -> MpiResult<()> {
        let call = "MPI_Win_unlock_all";
        let Some(nocheck) = lock(&self.origin).lock_all else {
            return Err(rma_sync(call, "MPI_Win_lock_all was not called"));
        };
        std::sync::atomic::fence(Ordering::SeqCst);
        for t in 0..self.nranks {
            lock(&self.origin).dirty[t] = false;
            match self.lock_word(t) {
                Some(_) if nocheck => {}
                Some(w) => RwWord::release(w, false),
                None => {
                    let kind = if nocheck { Kind::Flush } else { Kind::Unlock };
                    self.control(t, kind, 0, true)?;
                }
            }
        }
        let r = self.wait_pending(call, |_| true);
        lock(&self.origin).lock_all = None;
        r
    }

    fn check_passive(&self, call: &str, t: Option<usize>) -> MpiResult<()> {
        let st = lock(&self.origin);
        let ok = st.lock_all.is_some()
            || t.map_or(st.locks.iter().any(|l| *l != 0), |t| st.locks[t] != 0);
        if !ok {
            return Err(rma_sync(
                call,
                "no passive-target epoch (lock) is open to the target",
            ));
        }
        Ok(())
    }

    /// `MPI_Win_flush` / `MPI_Win_flush_local` (local completion is not weaker here:
    /// both complete the operations at the target).
    pub fn flush(&self, call: &str, rank: i32) -> MpiResult<()> {
        let Some(t) = self.check_rank(call, rank)? else {
            return Ok(());
        };
        self.check_passive(call, Some(t))?;
        self.flush_dirty(|r| r == t)?;
        self.wait_pending(call, |p| p.target == t)
    }

    /// `MPI_Win_flush_all` / `MPI_Win_flush_local_all`.
    pub fn flush_all(&self, call: &str) -> MpiResult<()> {
        self.check_passive(call, None)?;
        self.flush_dirty(|_| true)?;
        self.wait_pending(call, |_| true)
    }

    /// `MPI_Win_sync`: the public and private copies are one memory here; a full fence
    /// orders this process's loads and stores.
    pub fn sync(&self) -> MpiResult<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }
}
