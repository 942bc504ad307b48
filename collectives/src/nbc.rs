//! Non-blocking collectives as schedules: a list of rounds, each a set of sends and
//! receives on the collective context followed by local steps (reductions, copies,
//! unpacking), advanced by [`CollRequest::test`] / [`CollRequest::wait`].
//!
//! Every non-blocking collective call on a communicator takes the next sequence number of
//! that communicator (kept as a cached attribute, so a freed communicator's successor
//! starts again at 0 everywhere) and tags its messages with it: several collectives may
//! be outstanding at once, and they never match the blocking collectives' messages
//! (different tag range). Within a round the transfers progress under either progress
//! engine; moving to the next round happens inside `test`/`wait` calls.

use std::sync::OnceLock;

use tsunagi_core::comm::Keyval;
use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, ReqId, Runtime};

use crate::op::Op;
use crate::util::{
    byte_type, check_buf, check_count, check_counts, check_displs, check_root, check_type,
    copy_typed, err, RecvBuf, SendBuf,
};

/// A place in memory: a user address, or an offset into one of the schedule's buffers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Loc {
    User(*mut u8),
    Tmp(usize, usize),
}

#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Send `count` elements of `dtype` (bytes when None) at `loc` to `peer`.
    Send {
        /// Tag offset inside the request's tag block (0..64).
        sub: i32,
        loc: Loc,
        count: usize,
        dtype: Option<TypeRef>,
        peer: usize,
    },
    Recv {
        sub: i32,
        loc: Loc,
        count: usize,
        dtype: Option<TypeRef>,
        peer: usize,
    },
    /// `dst = src op dst` (src_low) or `dst = dst op src`, over `count` packed elements.
    Reduce {
        src: Loc,
        dst: Loc,
        count: usize,
        src_low: bool,
    },
    /// Unpack `count` elements of `dtype` from packed `src` into user layout at `dst`.
    Unpack {
        src: Loc,
        dst: *mut u8,
        count: usize,
        dtype: TypeRef,
    },
}

#[derive(Default, Debug)]
pub(crate) struct Round {
    pub(crate) comm: Vec<Step>,
    pub(crate) local: Vec<Step>,
}

/// An outstanding non-blocking collective.
pub struct CollRequest {
    comm: CommId,
    tag: i32,
    rounds: Vec<Round>,
    cur: usize,
    started: bool,
    reqs: Vec<Option<ReqId>>,
    pub(crate) tmps: Vec<Vec<u8>>,
    pub(crate) op: Option<(Op, TypeRef)>,
    /// Collectives run after this one's rounds, in order (an intercommunicator
    /// collective's local and inter-group phases; see [`crate::inter`]).
    phases: Vec<CollRequest>,
    phase: usize,
    done: bool,
}

// SAFETY: the raw addresses a schedule holds are user buffers that MPI's rules keep
// valid and reserved until the request completes, on whichever thread completes it, and
// the schedule's own buffers move with it.
unsafe impl Send for CollRequest {}

impl Drop for CollRequest {
    /// Dropping an unfinished collective is erroneous in MPI (`MPI_Request_free` is not
    /// allowed on one); transfers may still be writing into the schedule's buffers, so
    /// those are leaked rather than freed.
    fn drop(&mut self) {
        if !self.done && (!self.reqs.is_empty() || self.phase < self.phases.len()) {
            std::mem::forget(std::mem::take(&mut self.tmps));
        }
    }
}

impl std::fmt::Debug for CollRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CollRequest {{ comm: {:?}, round: {}/{}, done: {} }}",
            self.comm,
            self.cur,
            self.rounds.len(),
            self.done
        )
    }
}

/// The core advances an outstanding collective on its one progress path (every wait, test
/// and blocking call of the process), through [`Runtime::start_schedule`].
impl tsunagi_core::runtime::Schedule for CollRequest {
    fn advance(&mut self, rt: &Runtime) -> MpiResult<bool> {
        self.test(rt)
    }
}

const NBC_TAG_BASE: i32 = 1 << 24;

fn next_tag(rt: &Runtime, comm: CommId) -> MpiResult<i32> {
    static KEYVAL: OnceLock<i32> = OnceLock::new();
    let kv = *KEYVAL.get_or_init(|| {
        rt.create_keyval(Keyval {
            copy: None,
            delete: None,
            extra: 0,
        })
    });
    let seq = rt.get_attr(comm, kv)?.unwrap_or(0);
    rt.set_attr(comm, kv, seq.wrapping_add(1))?;
    Ok(NBC_TAG_BASE + ((seq & 0xffff) as i32) * 64)
}

impl CollRequest {
    pub(crate) fn new(rt: &Runtime, comm: CommId) -> MpiResult<CollRequest> {
        Ok(CollRequest {
            comm,
            tag: next_tag(rt, comm)?,
            rounds: Vec::new(),
            cur: 0,
            started: false,
            reqs: Vec::new(),
            tmps: Vec::new(),
            op: None,
            phases: Vec::new(),
            phase: 0,
            done: false,
        })
    }

    /// A request with no rounds of its own and no tag, that runs `phases` in order; it
    /// owns `tmps`, which the phases address by pointer (a `Vec`'s heap buffer does not
    /// move when the `Vec` does).
    pub(crate) fn chain(comm: CommId, phases: Vec<CollRequest>, tmps: Vec<Vec<u8>>) -> CollRequest {
        CollRequest {
            comm,
            tag: 0,
            rounds: Vec::new(),
            cur: 0,
            started: false,
            reqs: Vec::new(),
            tmps,
            op: None,
            phases,
            phase: 0,
            done: false,
        }
    }

    pub(crate) fn tmp(&mut self, len: usize) -> usize {
        self.tmps.push(vec![0u8; len]);
        self.tmps.len() - 1
    }

    pub(crate) fn round(&mut self) -> &mut Round {
        self.rounds.push(Round::default());
        self.rounds.last_mut().expect("pushed")
    }

    fn addr(&mut self, l: Loc) -> *mut u8 {
        match l {
            Loc::User(p) => p,
            Loc::Tmp(i, off) => self.tmps[i].as_mut_ptr().wrapping_add(off),
        }
    }

    /// Whether the collective has completed (after which `test` returns true at once).
    pub fn is_complete(&self) -> bool {
        self.done
    }

    /// Advance the schedule as far as possible without blocking; true when complete.
    pub fn test(&mut self, rt: &Runtime) -> MpiResult<bool> {
        let byte = byte_type();
        while !self.done {
            if self.cur == self.rounds.len() {
                while let Some(p) = self.phases.get_mut(self.phase) {
                    if !p.test(rt)? {
                        return Ok(false);
                    }
                    self.phase += 1;
                }
                self.done = true;
                break;
            }
            if !self.started {
                let steps = self.rounds[self.cur].comm.clone();
                for s in steps {
                    let id = match s {
                        Step::Send {
                            sub,
                            loc,
                            count,
                            dtype,
                            peer,
                        } => {
                            let a = self.addr(loc);
                            let t = dtype.unwrap_or_else(|| byte.clone());
                            // SAFETY: user buffers are reserved until completion (MPI rules);
                            // schedule buffers live in `self` and are never resized.
                            unsafe {
                                crate::util::coll_isend(
                                    rt,
                                    a,
                                    count,
                                    &t,
                                    peer,
                                    self.tag + sub,
                                    self.comm,
                                )?
                            }
                        }
                        Step::Recv {
                            sub,
                            loc,
                            count,
                            dtype,
                            peer,
                        } => {
                            let a = self.addr(loc);
                            let t = dtype.unwrap_or_else(|| byte.clone());
                            // SAFETY: as above.
                            unsafe {
                                crate::util::coll_irecv(
                                    rt,
                                    a,
                                    count,
                                    &t,
                                    peer,
                                    self.tag + sub,
                                    self.comm,
                                )?
                            }
                        }
                        _ => unreachable!("only transfers in the comm part"),
                    };
                    self.reqs.push(Some(id));
                }
                self.started = true;
            }
            if !self.reqs.is_empty() {
                match rt.testall("non-blocking collective", &self.reqs)? {
                    None => return Ok(false),
                    Some(sts) => {
                        if let Some(st) = sts.iter().find(|s| s.error != 0) {
                            let class =
                                ErrorClass::from_code(st.error).unwrap_or(ErrorClass::Other);
                            return Err(err(class, "non-blocking collective: a transfer failed (counts or types differ between ranks?)".into()));
                        }
                    }
                }
                self.reqs.clear();
            }
            let steps = std::mem::take(&mut self.rounds[self.cur].local);
            for s in steps {
                self.local(s);
            }
            self.cur += 1;
            self.started = false;
        }
        Ok(true)
    }

    fn local(&mut self, s: Step) {
        match s {
            Step::Reduce {
                src,
                dst,
                count,
                src_low,
            } => {
                let (a, b) = (self.addr(src), self.addr(dst));
                let (op, t) = self.op.as_ref().expect("reduction schedule has an op");
                // SAFETY: both locations hold `count` packed elements in distinct buffers.
                unsafe {
                    if src_low {
                        op.apply_packed(a, b, count, t);
                    } else {
                        op.combine_left(b, a, count, t);
                    }
                }
            }
            Step::Unpack {
                src,
                dst,
                count,
                dtype,
            } => {
                let a = self.addr(src);
                // SAFETY: `a` holds the packed stream; `dst` is the user's receive buffer.
                unsafe {
                    dtype.unpack_range(
                        dst,
                        count,
                        0,
                        std::slice::from_raw_parts(a, count * dtype.size()),
                    )
                };
            }
            _ => unreachable!("transfers are not local steps"),
        }
    }

    /// Block until complete.
    pub fn wait(&mut self, rt: &Runtime) -> MpiResult<()> {
        let mut spins = 0u32;
        while !self.test(rt)? {
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

pub(crate) fn send(loc: Loc, len: usize, peer: usize) -> Step {
    Step::Send {
        sub: 0,
        loc,
        count: len,
        dtype: None,
        peer,
    }
}
pub(crate) fn recv(loc: Loc, len: usize, peer: usize) -> Step {
    Step::Recv {
        sub: 0,
        loc,
        count: len,
        dtype: None,
        peer,
    }
}

/// `MPI_Ibarrier` (dissemination).
pub fn ibarrier(rt: &Runtime, comm: CommId) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ibarrier", comm)? {
        return crate::inter::ibarrier(rt, comm);
    }
    rt.check_comm_id("MPI_Ibarrier", comm)?;
    if let Some(r) = crate::wan_nbc::ibarrier(rt, comm)? {
        return Ok(r); // across sites (wan_nbc.rs)
    }
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let mut r = CollRequest::new(rt, comm)?;
    let z = r.tmp(1);
    let mut d = 1;
    while d < n {
        let rd = r.round();
        rd.comm.push(send(Loc::Tmp(z, 0), 0, (me + d) % n));
        rd.comm.push(recv(Loc::Tmp(z, 0), 0, (me + n - d) % n));
        d <<= 1;
    }
    Ok(r)
}

/// Binomial broadcast rounds of `len` bytes at `loc` from `root` (receive, then sends).
fn bcast_rounds(r: &mut CollRequest, me: usize, n: usize, loc: Loc, len: usize, root: usize) {
    let v = (me + n - root) % n;
    let mut mask = 1;
    while mask < n {
        if v & mask != 0 {
            r.round().comm.push(recv(loc, len, (v - mask + root) % n));
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let rd = r.round();
    while mask > 0 {
        if v + mask < n {
            rd.comm.push(send(loc, len, (v + mask + root) % n));
        }
        mask >>= 1;
    }
}

/// `MPI_Ibcast` (binomial).
///
/// # Safety
/// As [`crate::bcast()`], with the buffer reserved until completion.
pub unsafe fn ibcast(
    rt: &Runtime,
    buf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ibcast", comm)? {
        return unsafe { crate::inter::ibcast(rt, "MPI_Ibcast", buf, count, dtype, root, comm) };
    }
    let call = "MPI_Ibcast";
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let count = check_count(call, count)?;
    check_type(call, dtype)?;
    let root = check_root(call, root, n)?;
    check_buf(call, "buffer", buf, count, dtype)?;
    let len = count * dtype.size();
    if n > 1 && len > 0 {
        // SAFETY: forwarded caller contract (checked above).
        if let Some(r) = unsafe { crate::wan_nbc::ibcast(rt, comm, buf, count, dtype, root)? } {
            return Ok(r); // across sites (wan_nbc.rs)
        }
    }
    let mut r = CollRequest::new(rt, comm)?;
    if n == 1 || len == 0 {
        return Ok(r);
    }
    match dtype.contiguous_offset() {
        Some(off) => bcast_rounds(
            &mut r,
            me,
            n,
            Loc::User(buf.wrapping_offset(off)),
            len,
            root,
        ),
        None => {
            let t = r.tmp(len);
            if me == root {
                // SAFETY: the root's buffer holds `count` elements.
                unsafe { dtype.pack_range(buf, count, 0, &mut r.tmps[t]) };
            }
            bcast_rounds(&mut r, me, n, Loc::Tmp(t, 0), len, root);
            if me != root {
                r.round().local.push(Step::Unpack {
                    src: Loc::Tmp(t, 0),
                    dst: buf,
                    count,
                    dtype: dtype.clone(),
                });
            }
        }
    }
    Ok(r)
}

/// `MPI_Igather` (linear).
///
/// # Safety
/// As [`crate::gather()`], buffers reserved until completion.
pub unsafe fn igather(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Igather", comm)? {
        return unsafe {
            crate::inter::igatherv(
                rt,
                "MPI_Igather",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcount,
                None,
                recvtype,
                root,
                comm,
            )
        };
    }
    let n = rt.comm_size(comm)?;
    let rc = if rt.comm_rank(comm)? == root.max(0) as usize {
        check_count("MPI_Igather", recvcount)?
    } else {
        0
    };
    let counts = vec![rc as i64; n];
    let displs: Vec<i64> = (0..n).map(|i| (i * rc) as i64).collect();
    // SAFETY: forwarded.
    unsafe {
        igatherv_impl(
            "MPI_Igather",
            rt,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            &counts,
            &displs,
            recvtype,
            root,
            comm,
        )
    }
}

/// `MPI_Igatherv` (linear).
///
/// # Safety
/// As [`crate::gatherv()`], buffers reserved until completion.
pub unsafe fn igatherv(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Igatherv", comm)? {
        return unsafe {
            crate::inter::igatherv(
                rt,
                "MPI_Igatherv",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                0,
                Some((recvcounts, displs)),
                recvtype,
                root,
                comm,
            )
        };
    }
    // SAFETY: forwarded.
    unsafe {
        igatherv_impl(
            "MPI_Igatherv",
            rt,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcounts,
            displs,
            recvtype,
            root,
            comm,
        )
    }
}

unsafe fn igatherv_impl(
    call: &str,
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let root = check_root(call, root, n)?;
    let mut r = CollRequest::new(rt, comm)?;
    let sc = match sendbuf {
        SendBuf::InPlace if me != root => {
            return Err(err(
                ErrorClass::Buffer,
                format!("{call}: MPI_IN_PLACE is only allowed at the root"),
            ));
        }
        SendBuf::InPlace => 0,
        SendBuf::Ptr(_) => {
            check_type(call, sendtype)?;
            check_count(call, sendcount)?
        }
    };
    if me != root {
        if let SendBuf::Ptr(s) = sendbuf {
            r.round().comm.push(Step::Send {
                sub: 0,
                loc: Loc::User(s as *mut u8),
                count: sc,
                dtype: Some(sendtype.clone()),
                peer: root,
            });
        }
        return Ok(r);
    }
    check_type(call, recvtype)?;
    let counts = check_counts(call, "recvcounts", recvcounts, n)?;
    check_displs(call, "displs", displs, n)?;
    let ext = recvtype.extent();
    let blk = |i: usize| recvbuf.wrapping_offset(displs[i] as isize * ext);
    if let SendBuf::Ptr(s) = sendbuf {
        // SAFETY: caller contract (local part done at once).
        unsafe { copy_typed(call, s, sc, sendtype, blk(root), counts[root], recvtype)? };
    }
    let rd = r.round();
    for (i, &c) in counts.iter().enumerate() {
        if i != root {
            rd.comm.push(Step::Recv {
                sub: 0,
                loc: Loc::User(blk(i)),
                count: c,
                dtype: Some(recvtype.clone()),
                peer: i,
            });
        }
    }
    Ok(r)
}

/// `MPI_Iscatter` (linear).
///
/// # Safety
/// As [`crate::scatter()`], buffers reserved until completion.
pub unsafe fn iscatter(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Iscatter", comm)? {
        return unsafe {
            crate::inter::iscatterv(
                rt,
                "MPI_Iscatter",
                sendbuf,
                sendcount,
                None,
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                root,
                comm,
            )
        };
    }
    let n = rt.comm_size(comm)?;
    let sc = if rt.comm_rank(comm)? == root.max(0) as usize {
        check_count("MPI_Iscatter", sendcount)?
    } else {
        0
    };
    let counts = vec![sc as i64; n];
    let displs: Vec<i64> = (0..n).map(|i| (i * sc) as i64).collect();
    // SAFETY: forwarded.
    unsafe {
        iscatterv_impl(
            "MPI_Iscatter",
            rt,
            sendbuf,
            &counts,
            &displs,
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            root,
            comm,
        )
    }
}

/// `MPI_Iscatterv` (linear).
///
/// # Safety
/// As [`crate::scatterv()`], buffers reserved until completion.
pub unsafe fn iscatterv(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcounts: &[i64],
    displs: &[i64],
    sendtype: &TypeRef,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Iscatterv", comm)? {
        return unsafe {
            crate::inter::iscatterv(
                rt,
                "MPI_Iscatterv",
                sendbuf,
                0,
                Some((sendcounts, displs)),
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                root,
                comm,
            )
        };
    }
    // SAFETY: forwarded.
    unsafe {
        iscatterv_impl(
            "MPI_Iscatterv",
            rt,
            sendbuf,
            sendcounts,
            displs,
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            root,
            comm,
        )
    }
}

unsafe fn iscatterv_impl(
    call: &str,
    rt: &Runtime,
    sendbuf: *const u8,
    sendcounts: &[i64],
    displs: &[i64],
    sendtype: &TypeRef,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let root = check_root(call, root, n)?;
    let mut r = CollRequest::new(rt, comm)?;
    let rc = match recvbuf {
        RecvBuf::InPlace if me != root => {
            return Err(err(
                ErrorClass::Buffer,
                format!("{call}: MPI_IN_PLACE is only allowed at the root"),
            ));
        }
        RecvBuf::InPlace => 0,
        RecvBuf::Ptr(_) => {
            check_type(call, recvtype)?;
            check_count(call, recvcount)?
        }
    };
    if me != root {
        if let RecvBuf::Ptr(p) = recvbuf {
            r.round().comm.push(Step::Recv {
                sub: 0,
                loc: Loc::User(p),
                count: rc,
                dtype: Some(recvtype.clone()),
                peer: root,
            });
        }
        return Ok(r);
    }
    check_type(call, sendtype)?;
    let counts = check_counts(call, "sendcounts", sendcounts, n)?;
    check_displs(call, "displs", displs, n)?;
    let ext = sendtype.extent();
    let blk = |i: usize| sendbuf.wrapping_offset(displs[i] as isize * ext) as *mut u8;
    if let RecvBuf::Ptr(p) = recvbuf {
        // SAFETY: caller contract (local part done at once).
        unsafe { copy_typed(call, blk(root), counts[root], sendtype, p, rc, recvtype)? };
    }
    let rd = r.round();
    for (i, &c) in counts.iter().enumerate() {
        if i != root {
            rd.comm.push(Step::Send {
                sub: 0,
                loc: Loc::User(blk(i)),
                count: c,
                dtype: Some(sendtype.clone()),
                peer: i,
            });
        }
    }
    Ok(r)
}

/// `MPI_Iallgather` (every rank sends its block to every other, one round).
///
/// # Safety
/// As [`crate::allgather()`], buffers reserved until completion.
pub unsafe fn iallgather(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Iallgather", comm)? {
        return unsafe {
            crate::inter::iallgatherv(
                rt,
                "MPI_Iallgather",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcount,
                None,
                recvtype,
                comm,
            )
        };
    }
    let n = rt.comm_size(comm)?;
    let rc = check_count("MPI_Iallgather", recvcount)?;
    let counts = vec![rc as i64; n];
    let displs: Vec<i64> = (0..n).map(|i| (i * rc) as i64).collect();
    // SAFETY: forwarded.
    unsafe {
        iallgatherv_impl(
            "MPI_Iallgather",
            rt,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            &counts,
            &displs,
            recvtype,
            comm,
        )
    }
}

/// `MPI_Iallgatherv`.
///
/// # Safety
/// As [`crate::allgatherv()`], buffers reserved until completion.
pub unsafe fn iallgatherv(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Iallgatherv", comm)? {
        return unsafe {
            crate::inter::iallgatherv(
                rt,
                "MPI_Iallgatherv",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                0,
                Some((recvcounts, displs)),
                recvtype,
                comm,
            )
        };
    }
    // SAFETY: forwarded.
    unsafe {
        iallgatherv_impl(
            "MPI_Iallgatherv",
            rt,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcounts,
            displs,
            recvtype,
            comm,
        )
    }
}

unsafe fn iallgatherv_impl(
    call: &str,
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    check_type(call, recvtype)?;
    let counts = check_counts(call, "recvcounts", recvcounts, n)?;
    check_displs(call, "displs", displs, n)?;
    let ext = recvtype.extent();
    let blk = |i: usize| recvbuf.wrapping_offset(displs[i] as isize * ext);
    if let SendBuf::Ptr(s) = sendbuf {
        check_type(call, sendtype)?;
        let sc = check_count(call, sendcount)?;
        // SAFETY: caller contract (local part done at once).
        unsafe { copy_typed(call, s, sc, sendtype, blk(me), counts[me], recvtype)? };
    }
    let mut r = CollRequest::new(rt, comm)?;
    let rd = r.round();
    for i in 1..n {
        let to = (me + i) % n;
        let from = (me + n - i) % n;
        rd.comm.push(Step::Recv {
            sub: 0,
            loc: Loc::User(blk(from)),
            count: counts[from],
            dtype: Some(recvtype.clone()),
            peer: from,
        });
        rd.comm.push(Step::Send {
            sub: 0,
            loc: Loc::User(blk(me)),
            count: counts[me],
            dtype: Some(recvtype.clone()),
            peer: to,
        });
    }
    Ok(r)
}

/// `MPI_Ialltoall` (one round of all pairs).
///
/// # Safety
/// As [`crate::alltoall()`], buffers reserved until completion.
pub unsafe fn ialltoall(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ialltoall", comm)? {
        return unsafe {
            crate::inter::ialltoall(
                rt,
                "MPI_Ialltoall",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                comm,
            )
        };
    }
    let n = rt.comm_size(comm)?;
    let sc = check_count("MPI_Ialltoall", sendcount).unwrap_or(0);
    let rc = check_count("MPI_Ialltoall", recvcount)?;
    let s = vec![sc as i64; n];
    let sd: Vec<i64> = (0..n)
        .map(|i| (i * sc) as i64 * sendtype.extent() as i64)
        .collect();
    let rcs = vec![rc as i64; n];
    let rd: Vec<i64> = (0..n)
        .map(|i| (i * rc) as i64 * recvtype.extent() as i64)
        .collect();
    let st = vec![sendtype.clone(); n];
    let rt_ = vec![recvtype.clone(); n];
    // SAFETY: forwarded (byte displacements of the same blocks).
    unsafe {
        ialltoallw_impl(
            "MPI_Ialltoall",
            rt,
            sendbuf,
            &s,
            &sd,
            &st,
            recvbuf,
            &rcs,
            &rd,
            &rt_,
            comm,
        )
    }
}

/// `MPI_Ialltoallv`.
///
/// # Safety
/// As [`crate::alltoallv()`], buffers reserved until completion.
pub unsafe fn ialltoallv(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcounts: &[i64],
    sdispls: &[i64],
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    rdispls: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ialltoallv", comm)? {
        return unsafe {
            crate::inter::ialltoallv(
                rt,
                "MPI_Ialltoallv",
                sendbuf,
                sendcounts,
                sdispls,
                sendtype,
                recvbuf,
                recvcounts,
                rdispls,
                recvtype,
                comm,
            )
        };
    }
    let n = rt.comm_size(comm)?;
    let call = "MPI_Ialltoallv";
    check_displs(call, "rdispls", rdispls, n)?;
    let se = sendtype.extent() as i64;
    let re = recvtype.extent() as i64;
    let sd: Vec<i64> = if sendbuf == SendBuf::InPlace {
        vec![0; n]
    } else {
        check_displs(call, "sdispls", sdispls, n)?;
        sdispls[..n].iter().map(|d| d * se).collect()
    };
    let rd: Vec<i64> = rdispls[..n].iter().map(|d| d * re).collect();
    let st = vec![sendtype.clone(); n];
    let rt_ = vec![recvtype.clone(); n];
    // SAFETY: forwarded.
    unsafe {
        ialltoallw_impl(
            call, rt, sendbuf, sendcounts, &sd, &st, recvbuf, recvcounts, &rd, &rt_, comm,
        )
    }
}

/// `MPI_Ialltoallw` (byte displacements).
///
/// # Safety
/// As [`crate::alltoallw()`], buffers reserved until completion.
pub unsafe fn ialltoallw(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcounts: &[i64],
    sdispls: &[i64],
    sendtypes: &[TypeRef],
    recvbuf: *mut u8,
    recvcounts: &[i64],
    rdispls: &[i64],
    recvtypes: &[TypeRef],
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ialltoallw", comm)? {
        return unsafe {
            crate::inter::ialltoallw(
                rt,
                "MPI_Ialltoallw",
                sendbuf,
                sendcounts,
                sdispls,
                sendtypes,
                recvbuf,
                recvcounts,
                rdispls,
                recvtypes,
                comm,
            )
        };
    }
    // SAFETY: forwarded.
    unsafe {
        ialltoallw_impl(
            "MPI_Ialltoallw",
            rt,
            sendbuf,
            sendcounts,
            sdispls,
            sendtypes,
            recvbuf,
            recvcounts,
            rdispls,
            recvtypes,
            comm,
        )
    }
}

unsafe fn ialltoallw_impl(
    call: &str,
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcounts: &[i64],
    sdispls: &[i64],
    sendtypes: &[TypeRef],
    recvbuf: *mut u8,
    recvcounts: &[i64],
    rdispls: &[i64],
    recvtypes: &[TypeRef],
    comm: CommId,
) -> MpiResult<CollRequest> {
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let rcs = check_counts(call, "recvcounts", recvcounts, n)?;
    check_displs(call, "rdispls", rdispls, n)?;
    if recvtypes.len() < n {
        return Err(err(
            ErrorClass::Arg,
            format!("{call}: {} receive types for {n} ranks", recvtypes.len()),
        ));
    }
    for t in &recvtypes[..n] {
        check_type(call, t)?;
    }
    let rblk = |i: usize| recvbuf.wrapping_offset(rdispls[i] as isize);
    let mut r = CollRequest::new(rt, comm)?;
    // What goes to peer j: (location, count, type); in place, a packed copy of the
    // receive blocks taken now.
    let mut out: Vec<(Loc, usize, Option<TypeRef>)> = Vec::with_capacity(n);
    match sendbuf {
        SendBuf::InPlace => {
            // A copy of the memory each block spans, sent with the block's own type (so a
            // converting device sees the receiver's type, not bytes).
            for j in 0..n {
                // SAFETY: the receive blocks are readable.
                let (copy, at) = unsafe { recvtypes[j].copy_span(rblk(j), rcs[j]) };
                let t = r.tmp(copy.len());
                r.tmps[t].copy_from_slice(&copy);
                out.push((Loc::Tmp(t, at), rcs[j], Some(recvtypes[j].clone())));
            }
        }
        SendBuf::Ptr(s) => {
            let scs = check_counts(call, "sendcounts", sendcounts, n)?;
            check_displs(call, "sdispls", sdispls, n)?;
            if sendtypes.len() < n {
                return Err(err(
                    ErrorClass::Arg,
                    format!("{call}: {} send types for {n} ranks", sendtypes.len()),
                ));
            }
            for j in 0..n {
                check_type(call, &sendtypes[j])?;
                out.push((
                    Loc::User(s.wrapping_offset(sdispls[j] as isize) as *mut u8),
                    scs[j],
                    Some(sendtypes[j].clone()),
                ));
            }
        }
    }
    // Own block now.
    {
        let (l, c, t) = out[me].clone();
        let src = r.addr(l);
        let t = t.unwrap_or_else(byte_type);
        // SAFETY: caller contract / our packed copy.
        unsafe { copy_typed(call, src, c, &t, rblk(me), rcs[me], &recvtypes[me])? };
    }
    let rd = r.round();
    for i in 1..n {
        let to = (me + i) % n;
        let from = (me + n - i) % n;
        rd.comm.push(Step::Recv {
            sub: 0,
            loc: Loc::User(rblk(from)),
            count: rcs[from],
            dtype: Some(recvtypes[from].clone()),
            peer: from,
        });
        let (l, c, t) = out[to].clone();
        rd.comm.push(Step::Send {
            sub: 0,
            loc: l,
            count: c,
            dtype: t,
            peer: to,
        });
    }
    Ok(r)
}

/// Reduction rounds over packed `w` (count elements) to `root`, binomial, rank order kept
/// for non-commutative ops (tree rooted at 0, then forwarded).
fn reduce_rounds(
    r: &mut CollRequest,
    me: usize,
    n: usize,
    w: Loc,
    count: usize,
    esize: usize,
    root: usize,
    commutative: bool,
) {
    let bytes = count * esize;
    let troot = if commutative { root } else { 0 };
    let v = (me + n - troot) % n;
    let real = |x: usize| (x + troot) % n;
    let mut children = Vec::new();
    let mut parent = None;
    let mut mask = 1;
    while mask < n {
        if v & mask == 0 {
            if v | mask < n {
                children.push(real(v | mask));
            }
        } else {
            parent = Some(real(v - mask));
            break;
        }
        mask <<= 1;
    }
    if !children.is_empty() {
        let bufs: Vec<usize> = children.iter().map(|_| r.tmp(bytes)).collect();
        let rd = r.round();
        for (c, b) in children.iter().zip(&bufs) {
            rd.comm.push(recv(Loc::Tmp(*b, 0), bytes, *c));
        }
        for b in &bufs {
            rd.local.push(Step::Reduce {
                src: Loc::Tmp(*b, 0),
                dst: w,
                count,
                src_low: false,
            });
        }
    }
    if let Some(p) = parent {
        r.round().comm.push(send(w, bytes, p));
    }
    if troot != root {
        if me == troot {
            r.round().comm.push(send(w, bytes, root));
        } else if me == root {
            r.round().comm.push(recv(w, bytes, troot));
        }
    }
}

pub(crate) fn red_checks(call: &str, count: i64, dtype: &TypeRef, op: &Op) -> MpiResult<usize> {
    let c = check_count(call, count)?;
    check_type(call, dtype)?;
    op.check(call, dtype)?;
    Ok(c)
}

/// The packed working copy of a reduction's input in a schedule buffer.
///
/// # Safety
/// The input type map is readable.
unsafe fn load_input(r: &mut CollRequest, src: *const u8, count: usize, dtype: &TypeRef) -> usize {
    let t = r.tmp(count * dtype.size());
    if count * dtype.size() > 0 {
        // SAFETY: caller contract.
        unsafe { dtype.pack_range(src, count, 0, &mut r.tmps[t]) };
    }
    t
}

/// `MPI_Ireduce` (binomial).
///
/// # Safety
/// As [`crate::reduce()`], buffers reserved until completion.
pub unsafe fn ireduce(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ireduce", comm)? {
        return unsafe {
            crate::inter::ireduce(
                rt,
                "MPI_Ireduce",
                sendbuf,
                recvbuf,
                count,
                dtype,
                op,
                root,
                comm,
            )
        };
    }
    let call = "MPI_Ireduce";
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let count = red_checks(call, count, dtype, op)?;
    let root = check_root(call, root, n)?;
    let src = match sendbuf {
        SendBuf::InPlace if me != root => {
            return Err(err(
                ErrorClass::Buffer,
                format!("{call}: MPI_IN_PLACE is only allowed at the root"),
            ));
        }
        SendBuf::InPlace => recvbuf as *const u8,
        SendBuf::Ptr(s) => s,
    };
    let mut r = CollRequest::new(rt, comm)?;
    r.op = Some((op.clone(), dtype.clone()));
    // SAFETY: caller contract.
    let w = unsafe { load_input(&mut r, src, count, dtype) };
    if count * dtype.size() > 0 {
        reduce_rounds(
            &mut r,
            me,
            n,
            Loc::Tmp(w, 0),
            count,
            dtype.size(),
            root,
            op.is_commutative(),
        );
    }
    if me == root {
        r.round().local.push(Step::Unpack {
            src: Loc::Tmp(w, 0),
            dst: recvbuf,
            count,
            dtype: dtype.clone(),
        });
    }
    Ok(r)
}

/// Recursive-doubling allreduce rounds over schedule buffer `w`, as the blocking
/// algorithm: fold to a power of two, exchange with partners at distance 1, 2, 4...
/// combining in rank order, unfold. (A round's local steps run only after all its
/// transfers completed, so sending `w` and combining into it in one round is safe.)
fn allreduce_rd_rounds(
    r: &mut CollRequest,
    me: usize,
    n: usize,
    w: usize,
    count: usize,
    esize: usize,
) {
    let bytes = count * esize;
    let pof2 = crate::util::pof2_floor(n);
    let rem = n - pof2;
    let wl = Loc::Tmp(w, 0);
    let nr = if me < 2 * rem {
        if me.is_multiple_of(2) {
            r.round().comm.push(send(wl, bytes, me + 1));
            None
        } else {
            let t = r.tmp(bytes);
            let rd = r.round();
            rd.comm.push(recv(Loc::Tmp(t, 0), bytes, me - 1));
            rd.local.push(Step::Reduce {
                src: Loc::Tmp(t, 0),
                dst: wl,
                count,
                src_low: true,
            });
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    };
    if let Some(nr) = nr {
        let real = |x: usize| if x < rem { 2 * x + 1 } else { x + rem };
        let t = r.tmp(bytes);
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let rd = r.round();
            rd.comm.push(recv(Loc::Tmp(t, 0), bytes, real(nd)));
            rd.comm.push(send(wl, bytes, real(nd)));
            rd.local.push(Step::Reduce {
                src: Loc::Tmp(t, 0),
                dst: wl,
                count,
                src_low: nd < nr,
            });
            mask <<= 1;
        }
    }
    if me < 2 * rem {
        if me % 2 == 1 {
            r.round().comm.push(send(wl, bytes, me - 1));
        } else {
            r.round().comm.push(recv(wl, bytes, me + 1));
        }
    }
}

/// `MPI_Iallreduce` (recursive doubling).
///
/// # Safety
/// As [`crate::allreduce()`], buffers reserved until completion.
pub unsafe fn iallreduce(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Iallreduce", comm)? {
        return unsafe {
            crate::inter::iallreduce(
                rt,
                "MPI_Iallreduce",
                sendbuf,
                recvbuf,
                count,
                dtype,
                op,
                comm,
            )
        };
    }
    let call = "MPI_Iallreduce";
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let count = red_checks(call, count, dtype, op)?;
    let src = match sendbuf {
        SendBuf::InPlace => recvbuf as *const u8,
        SendBuf::Ptr(s) => s,
    };
    if n > 1 {
        // SAFETY: forwarded caller contract (checked above).
        if let Some(r) =
            unsafe { crate::wan_nbc::iallreduce(rt, comm, src, recvbuf, count, dtype, op)? }
        {
            return Ok(r); // across sites (wan_nbc.rs)
        }
    }
    let mut r = CollRequest::new(rt, comm)?;
    r.op = Some((op.clone(), dtype.clone()));
    // SAFETY: caller contract.
    let w = unsafe { load_input(&mut r, src, count, dtype) };
    let bytes = count * dtype.size();
    if bytes > 0 && n > 1 {
        allreduce_rd_rounds(&mut r, me, n, w, count, dtype.size());
    }
    r.round().local.push(Step::Unpack {
        src: Loc::Tmp(w, 0),
        dst: recvbuf,
        count,
        dtype: dtype.clone(),
    });
    Ok(r)
}

/// `MPI_Ireduce_scatter_block`.
///
/// # Safety
/// As [`crate::reduce_scatter_block()`], buffers reserved until completion.
pub unsafe fn ireduce_scatter_block(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    recvcount: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ireduce_scatter_block", comm)? {
        return unsafe {
            crate::inter::ireduce_scatter_block(
                rt,
                "MPI_Ireduce_scatter_block",
                sendbuf,
                recvbuf,
                recvcount,
                dtype,
                op,
                comm,
            )
        };
    }
    let n = rt.comm_size(comm)?;
    let rc = red_checks("MPI_Ireduce_scatter_block", recvcount, dtype, op)?;
    // SAFETY: forwarded.
    unsafe {
        ireduce_scatter_impl(
            "MPI_Ireduce_scatter_block",
            rt,
            sendbuf,
            recvbuf,
            &vec![rc as i64; n],
            dtype,
            op,
            comm,
        )
    }
}

/// `MPI_Ireduce_scatter` (reduce to rank 0, then scatter the pieces).
///
/// # Safety
/// As [`crate::reduce_scatter()`], buffers reserved until completion.
pub unsafe fn ireduce_scatter(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Ireduce_scatter", comm)? {
        return unsafe {
            crate::inter::ireduce_scatter(
                rt,
                "MPI_Ireduce_scatter",
                sendbuf,
                recvbuf,
                recvcounts,
                dtype,
                op,
                comm,
            )
        };
    }
    // SAFETY: forwarded.
    unsafe {
        ireduce_scatter_impl(
            "MPI_Ireduce_scatter",
            rt,
            sendbuf,
            recvbuf,
            recvcounts,
            dtype,
            op,
            comm,
        )
    }
}

unsafe fn ireduce_scatter_impl(
    call: &str,
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    check_type(call, dtype)?;
    op.check(call, dtype)?;
    let counts = check_counts(call, "recvcounts", recvcounts, n)?;
    let total: usize = counts.iter().sum();
    let es = dtype.size();
    let mut disp = vec![0usize; n + 1];
    for i in 0..n {
        disp[i + 1] = disp[i] + counts[i];
    }
    let src = match sendbuf {
        SendBuf::InPlace => recvbuf as *const u8,
        SendBuf::Ptr(s) => s,
    };
    let mut r = CollRequest::new(rt, comm)?;
    r.op = Some((op.clone(), dtype.clone()));
    // SAFETY: caller contract.
    let w = unsafe { load_input(&mut r, src, total, dtype) };
    if total * es > 0 && n > 1 {
        reduce_rounds(
            &mut r,
            me,
            n,
            Loc::Tmp(w, 0),
            total,
            es,
            0,
            op.is_commutative(),
        );
        let rd = r.round();
        if me == 0 {
            for i in 1..n {
                rd.comm
                    .push(send(Loc::Tmp(w, disp[i] * es), counts[i] * es, i));
            }
        } else {
            rd.comm
                .push(recv(Loc::Tmp(w, disp[me] * es), counts[me] * es, 0));
        }
    }
    r.round().local.push(Step::Unpack {
        src: Loc::Tmp(w, disp[me] * es),
        dst: recvbuf,
        count: counts[me],
        dtype: dtype.clone(),
    });
    Ok(r)
}

/// `MPI_Iscan` (a chain in rank order).
///
/// # Safety
/// As [`crate::scan()`], buffers reserved until completion.
pub unsafe fn iscan(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Iscan", comm)? {
        return Err(crate::inter::undefined("MPI_Iscan"));
    }
    // SAFETY: forwarded.
    unsafe {
        iscan_impl(
            "MPI_Iscan",
            rt,
            sendbuf,
            recvbuf,
            count,
            dtype,
            op,
            comm,
            false,
        )
    }
}

/// `MPI_Iexscan` (a chain in rank order; rank 0's receive buffer is untouched).
///
/// # Safety
/// As [`crate::exscan()`], buffers reserved until completion.
pub unsafe fn iexscan(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    if crate::inter::is_inter(rt, "MPI_Iexscan", comm)? {
        return Err(crate::inter::undefined("MPI_Iexscan"));
    }
    // SAFETY: forwarded.
    unsafe {
        iscan_impl(
            "MPI_Iexscan",
            rt,
            sendbuf,
            recvbuf,
            count,
            dtype,
            op,
            comm,
            true,
        )
    }
}

unsafe fn iscan_impl(
    call: &str,
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
    exclusive: bool,
) -> MpiResult<CollRequest> {
    rt.check_comm_id(call, comm)?;
    let (me, n) = (rt.comm_rank(comm)?, rt.comm_size(comm)?);
    let count = red_checks(call, count, dtype, op)?;
    let src = match sendbuf {
        SendBuf::InPlace => recvbuf as *const u8,
        SendBuf::Ptr(s) => s,
    };
    if n > 1 {
        // SAFETY: forwarded caller contract (checked above).
        if let Some(r) =
            unsafe { crate::wan_nbc::iscan(rt, comm, src, recvbuf, count, dtype, op, exclusive)? }
        {
            return Ok(r); // across sites (wan_nbc.rs)
        }
    }
    let mut r = CollRequest::new(rt, comm)?;
    r.op = Some((op.clone(), dtype.clone()));
    let bytes = count * dtype.size();
    // SAFETY: caller contract.
    let mine = unsafe { load_input(&mut r, src, count, dtype) };
    let prev = r.tmp(bytes);
    if me > 0 {
        let rd = r.round();
        rd.comm.push(recv(Loc::Tmp(prev, 0), bytes, me - 1));
        // mine = prev op mine: the inclusive prefix.
        rd.local.push(Step::Reduce {
            src: Loc::Tmp(prev, 0),
            dst: Loc::Tmp(mine, 0),
            count,
            src_low: true,
        });
    }
    if me + 1 < n {
        r.round().comm.push(send(Loc::Tmp(mine, 0), bytes, me + 1));
    }
    let result = if exclusive { prev } else { mine };
    if !(exclusive && me == 0) {
        r.round().local.push(Step::Unpack {
            src: Loc::Tmp(result, 0),
            dst: recvbuf,
            count,
            dtype: dtype.clone(),
        });
    }
    Ok(r)
}

/// One transfer of a single-round schedule: `count` elements of `dtype` at `ptr` to or
/// from `peer`, with tag offset `sub` (0..64).
pub(crate) struct Xfer {
    pub ptr: *mut u8,
    pub count: usize,
    pub dtype: TypeRef,
    pub peer: usize,
    pub sub: i32,
}

/// A request of one round: all receives and sends at once.
pub(crate) fn one_round(
    rt: &Runtime,
    comm: CommId,
    recvs: Vec<Xfer>,
    sends: Vec<Xfer>,
) -> MpiResult<CollRequest> {
    let mut r = CollRequest::new(rt, comm)?;
    let rd = r.round();
    for x in recvs {
        rd.comm.push(Step::Recv {
            sub: x.sub,
            loc: Loc::User(x.ptr),
            count: x.count,
            dtype: Some(x.dtype),
            peer: x.peer,
        });
    }
    for x in sends {
        rd.comm.push(Step::Send {
            sub: x.sub,
            loc: Loc::User(x.ptr),
            count: x.count,
            dtype: Some(x.dtype),
            peer: x.peer,
        });
    }
    Ok(r)
}
