//! Collective operations: the blocking collectives, their non-blocking forms (kept in the
//! collective request table of `handles` and advanced by the wait/test family), the
//! neighbourhood collectives and `MPI_Reduce_local`. The algorithms are the collectives
//! crate's; here C arguments become its arguments: `MPI_IN_PLACE` (`(void *)-1`) becomes
//! `SendBuf::InPlace` / `RecvBuf::InPlace`, `int` counts and displacements `i64`, op
//! handles [`Op`]s (user functions wrapped as closures), and arguments MPI declares
//! significant only at the root (or ignored with `MPI_IN_PLACE`) are decoded only where
//! they are significant.

use std::ffi::{c_int, c_void};

use tsunagi_collectives as coll;
use tsunagi_collectives::{CollRequest, Op, RecvBuf, SendBuf};
use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime};

use crate::ffi::*;
use crate::handles::{self as h, err, DtRef, OpDef};

const MPI_BYTE: MPI_Datatype = 0x4c00_010d;
/// `MPI_ROOT`: the root of a rooted collective on an intercommunicator.
pub(crate) const MPI_ROOT: c_int = tsunagi_collectives::inter::ROOT;

// ----- argument helpers -----

/// The collectives crate's op for a decoded `MPI_Op`.
pub(crate) fn coll_op(d: OpDef) -> MpiResult<Op> {
    match d {
        OpDef::Builtin(i) => Op::from_mpich_index(i)
            .ok_or_else(|| err(ErrorClass::Op, format!("op index {i} is not predefined"))),
        OpDef::User { func, commute } => {
            let f = func.ok_or_else(|| err(ErrorClass::Op, "user op without a function"))?;
            Ok(Op::user(
                move |inp: *const u8, inout: *mut u8, count: usize, dt: &TypeRef| {
                    let mut handle = h::dtype_handle(dt);
                    let ext = dt.extent();
                    let mut done = 0usize;
                    while done < count {
                        let n = (count - done).min(c_int::MAX as usize);
                        let mut len = n as c_int;
                        let off = done as isize * ext;
                        // SAFETY: a C function of type MPI_User_function (checked non-NULL
                        // by MPI_Op_create), called on `n` elements of `dt` in user layout
                        // that the collectives crate holds for the call; `len` and
                        // `handle` are locals that live for the call.
                        unsafe {
                            f(
                                inp.wrapping_offset(off) as *mut c_void,
                                inout.wrapping_offset(off) as *mut c_void,
                                &mut len,
                                &mut handle,
                            )
                        };
                        done += n;
                    }
                },
                commute,
            ))
        }
        OpDef::UserC { func, commute } => {
            let f = func.ok_or_else(|| err(ErrorClass::Op, "user op without a function"))?;
            Ok(Op::user(
                move |inp: *const u8, inout: *mut u8, count: usize, dt: &TypeRef| {
                    let mut handle = h::dtype_handle(dt);
                    let mut len = count as MPI_Count;
                    // SAFETY: a C function of type MPI_User_function_c (checked non-NULL by
                    // MPI_Op_create_c), called on `count` elements of `dt` in user layout
                    // that the collectives crate holds for the call; `len` and `handle`
                    // are locals that live for the call.
                    unsafe {
                        f(
                            inp as *mut c_void,
                            inout as *mut c_void,
                            &mut len,
                            &mut handle,
                        )
                    };
                },
                commute,
            ))
        }
    }
}

/// A datatype argument that matters only when `needed` (a placeholder otherwise).
fn dt_if(name: &str, d: MPI_Datatype, needed: bool) -> MpiResult<DtRef> {
    if needed {
        h::dtype(name, d)
    } else {
        h::dtype(name, MPI_BYTE)
    }
}

/// `n` C ints at `p` as i64 (counts and displacements).
fn ints(name: &str, p: *const c_int, n: usize) -> MpiResult<Vec<i64>> {
    // SAFETY: MPI requires an array of `n` ints (one per process or neighbour).
    let s = unsafe { h::slice(name, p, n)? };
    Ok(s.iter().map(|&x| x as i64).collect())
}

/// `n` MPI_Aint at `p` as i64.
fn aints(name: &str, p: *const MPI_Aint, n: usize) -> MpiResult<Vec<i64>> {
    // SAFETY: MPI requires an array of `n` addresses.
    let s = unsafe { h::slice(name, p, n)? };
    Ok(s.to_vec())
}

/// `n` datatype handles at `p`; those with a zero count may be anything.
fn dtypes(name: &str, p: *const MPI_Datatype, counts: &[i64]) -> MpiResult<Vec<TypeRef>> {
    // SAFETY: MPI requires an array of one datatype per process or neighbour.
    let s = unsafe { h::slice(name, p, counts.len())? };
    s.iter()
        .zip(counts)
        .enumerate()
        .map(|(i, (&d, &c))| {
            let t = h::element(name, i, |n| dt_if(n, d, c != 0))?;
            Ok(TypeRef::clone(&t))
        })
        .collect()
}

/// This process's rank and the number of ranks the per-process arrays of a rooted
/// collective have (the remote group's size on an intercommunicator).
fn rank_size(r: &Runtime, comm: CommId) -> MpiResult<(usize, usize)> {
    Ok((r.comm_rank(comm)?, r.comm_peer_size(comm)?))
}

/// [`rank_size`] and [`is_root_of`] together; with no engine lock when this thread has
/// the communicator's shared-memory area at hand (an intracommunicator on one node).
fn rank_size_root(r: &Runtime, comm: CommId, root: c_int) -> MpiResult<(usize, usize, bool)> {
    if let Some((me, n)) = coll::lean_rank_size(comm) {
        return Ok((me, n, root >= 0 && me == root as usize));
    }
    let (me, n) = rank_size(r, comm)?;
    Ok((me, n, is_root_of(r, comm, root, me)?))
}

/// Whether this process is the root of a rooted collective: `root` is its rank, or
/// `MPI_ROOT` on an intercommunicator.
fn is_root_of(r: &Runtime, comm: CommId, root: c_int, me: usize) -> MpiResult<bool> {
    if root == MPI_ROOT {
        return r.comm_test_inter(comm);
    }
    Ok(root >= 0 && me == root as usize && !r.comm_test_inter(comm)?)
}

fn sbuf(p: *const c_void) -> SendBuf {
    SendBuf::from_c(p as *const u8)
}

/// In- and out-degree of a communicator with a topology (for the neighbourhood
/// collectives' arrays); MPI_ERR_TOPOLOGY without one.
fn degrees(r: &Runtime, call: &str, comm: CommId) -> MpiResult<(usize, usize)> {
    let t = coll::topo::topology(r, comm)?.ok_or_else(|| {
        err(
            ErrorClass::Topology,
            format!("{call}: the communicator has no topology"),
        )
    })?;
    let (i, o) = t.neighbors(r.comm_rank(comm)? as i32);
    Ok((i.len(), o.len()))
}

// ----- non-blocking requests -----

/// Register a new request and start its first round.
fn started(r: &Runtime, req: MpiResult<CollRequest>, out: &mut MPI_Request) -> MpiResult<()> {
    // A persistent collective's start takes the schedule instead (see `coll_init`).
    let Some(req) = super::coll_init::divert(req?) else {
        return Ok(());
    };
    let id = r.start_schedule(Box::new(req))?;
    *out = h::request_handle(id, false);
    Ok(())
}

// ----- blocking collectives -----

pub(crate) fn bcast(
    buf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Bcast")?;
    // SAFETY: MPI requires `count` elements of `dtype` at `buf` on every process.
    unsafe { coll::bcast(r, buf as *mut u8, count as i64, dtype, root, comm) }
}

/// Decoded arguments of the gather family.
struct GatherArgs {
    sendbuf: SendBuf,
    sendtype: DtRef,
    recvtype: DtRef,
}

/// Inline, as [`scatter_args`]: returned through memory, the tuple was stored field by
/// field and copied on with 16-byte loads, a store-forwarding stall in every call (8-byte
/// `MPI_Gather` on 2 ranks: 0.115 µs per call out of line, 0.100 inline; `MPI_Scatter`
/// 0.118 and 0.108; session 15).
#[inline(always)]
fn gather_args(
    r: &Runtime,
    comm: CommId,
    root: c_int,
    sendbuf: *const c_void,
    sendtype: MPI_Datatype,
    recvtype: MPI_Datatype,
) -> MpiResult<(GatherArgs, bool, usize)> {
    let (_, n, is_root) = rank_size_root(r, comm, root)?;
    let sb = sbuf(sendbuf);
    let sendtype = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    let recvtype = dt_if("recvtype", recvtype, is_root)?;
    Ok((
        GatherArgs {
            sendbuf: sb,
            sendtype,
            recvtype,
        },
        is_root,
        n,
    ))
}

pub(crate) fn gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Gather")?;
    let (a, _, _) = gather_args(r, comm, root, sendbuf, sendtype, recvtype)?;
    // SAFETY: MPI's buffer rules for MPI_Gather, which the caller follows.
    unsafe {
        coll::gather(
            r,
            a.sendbuf,
            sendcount as i64,
            &a.sendtype,
            recvbuf as *mut u8,
            recvcount as i64,
            &a.recvtype,
            root,
            comm,
        )
    }
}

pub(crate) fn gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Gatherv")?;
    let (a, is_root, n) = gather_args(r, comm, root, sendbuf, sendtype, recvtype)?;
    let m = if is_root { n } else { 0 };
    let (rc, d) = (
        ints("recvcounts", recvcounts, m)?,
        ints("displs", displs, m)?,
    );
    // SAFETY: MPI's buffer rules for MPI_Gatherv.
    unsafe {
        coll::gatherv(
            r,
            a.sendbuf,
            sendcount as i64,
            &a.sendtype,
            recvbuf as *mut u8,
            &rc,
            &d,
            &a.recvtype,
            root,
            comm,
        )
    }
}

#[inline(always)]
fn scatter_args(
    r: &Runtime,
    comm: CommId,
    root: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvtype: MPI_Datatype,
) -> MpiResult<(DtRef, RecvBuf, DtRef, bool, usize)> {
    let (_, n, is_root) = rank_size_root(r, comm, root)?;
    let rb = RecvBuf::from_c(recvbuf as *mut u8);
    let st = dt_if("sendtype", sendtype, is_root)?;
    let rt = dt_if("recvtype", recvtype, rb != RecvBuf::InPlace)?;
    Ok((st, rb, rt, is_root, n))
}

pub(crate) fn scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Scatter")?;
    let (st, rb, rt, _, _) = scatter_args(r, comm, root, sendtype, recvbuf, recvtype)?;
    // SAFETY: MPI's buffer rules for MPI_Scatter.
    unsafe {
        coll::scatter(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            &st,
            rb,
            recvcount as i64,
            &rt,
            root,
            comm,
        )
    }
}

pub(crate) fn scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Scatterv")?;
    let (st, rb, rt, is_root, n) = scatter_args(r, comm, root, sendtype, recvbuf, recvtype)?;
    let m = if is_root { n } else { 0 };
    let (sc, d) = (
        ints("sendcounts", sendcounts, m)?,
        ints("displs", displs, m)?,
    );
    // SAFETY: MPI's buffer rules for MPI_Scatterv.
    unsafe {
        coll::scatterv(
            r,
            sendbuf as *const u8,
            &sc,
            &d,
            &st,
            rb,
            recvcount as i64,
            &rt,
            root,
            comm,
        )
    }
}

pub(crate) fn allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Allgather")?;
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    // SAFETY: MPI's buffer rules for MPI_Allgather.
    unsafe {
        coll::allgather(
            r,
            sb,
            sendcount as i64,
            &st,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    }
}

pub(crate) fn allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Allgatherv")?;
    let n = match coll::lean_rank_size(comm) {
        Some((_, n)) => n,
        None => r.comm_peer_size(comm)?,
    };
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    let (rc, d) = (
        ints("recvcounts", recvcounts, n)?,
        ints("displs", displs, n)?,
    );
    // SAFETY: MPI's buffer rules for MPI_Allgatherv.
    unsafe {
        coll::allgatherv(
            r,
            sb,
            sendcount as i64,
            &st,
            recvbuf as *mut u8,
            &rc,
            &d,
            recvtype,
            comm,
        )
    }
}

pub(crate) fn alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Alltoall")?;
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    // SAFETY: MPI's buffer rules for MPI_Alltoall.
    unsafe {
        coll::alltoall(
            r,
            sb,
            sendcount as i64,
            &st,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    }
}

/// Send-side count and displacement arrays of the v/w forms (empty with MPI_IN_PLACE).
fn send_arrays(
    sb: SendBuf,
    counts: *const c_int,
    displs: *const c_int,
    n: usize,
) -> MpiResult<(Vec<i64>, Vec<i64>)> {
    let m = if sb == SendBuf::InPlace { 0 } else { n };
    let mut c = ints("sendcounts", counts, m)?;
    let mut d = ints("sdispls", displs, m)?;
    if m == 0 {
        c = vec![0; n];
        d = vec![0; n];
    }
    Ok((c, d))
}

pub(crate) fn alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Alltoallv")?;
    let n = r.comm_peer_size(comm)?;
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    let (sc, sd) = send_arrays(sb, sendcounts, sdispls, n)?;
    let (rc, rd) = (
        ints("recvcounts", recvcounts, n)?,
        ints("rdispls", rdispls, n)?,
    );
    // SAFETY: MPI's buffer rules for MPI_Alltoallv.
    unsafe {
        coll::alltoallv(
            r,
            sb,
            &sc,
            &sd,
            &st,
            recvbuf as *mut u8,
            &rc,
            &rd,
            recvtype,
            comm,
        )
    }
}

/// Decoded arguments of the w forms.
struct WArgs {
    sb: SendBuf,
    sc: Vec<i64>,
    sd: Vec<i64>,
    st: Vec<TypeRef>,
    rc: Vec<i64>,
    rd: Vec<i64>,
    rt: Vec<TypeRef>,
}

fn w_args(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const MPI_Datatype,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const MPI_Datatype,
    n: usize,
) -> MpiResult<WArgs> {
    let sb = sbuf(sendbuf);
    let (sc, sd) = send_arrays(sb, sendcounts, sdispls, n)?;
    let st = if sb == SendBuf::InPlace {
        vec![TypeRef::clone(&*h::dtype("sendtypes", MPI_BYTE)?); n]
    } else {
        dtypes("sendtypes", sendtypes, &sc)?
    };
    let rc = ints("recvcounts", recvcounts, n)?;
    let rd = ints("rdispls", rdispls, n)?;
    let rt = dtypes("recvtypes", recvtypes, &rc)?;
    Ok(WArgs {
        sb,
        sc,
        sd,
        st,
        rc,
        rd,
        rt,
    })
}

pub(crate) fn alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const MPI_Datatype,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Alltoallw")?;
    let n = r.comm_peer_size(comm)?;
    let w = w_args(
        sendbuf, sendcounts, sdispls, sendtypes, recvcounts, rdispls, recvtypes, n,
    )?;
    // SAFETY: MPI's buffer rules for MPI_Alltoallw.
    unsafe {
        coll::alltoallw(
            r,
            w.sb,
            &w.sc,
            &w.sd,
            &w.st,
            recvbuf as *mut u8,
            &w.rc,
            &w.rd,
            &w.rt,
            comm,
        )
    }
}

pub(crate) fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    root: c_int,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Reduce")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules for MPI_Reduce.
    unsafe {
        coll::reduce(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            root,
            comm,
        )
    }
}

pub(crate) fn allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Allreduce")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules for MPI_Allreduce.
    unsafe {
        coll::allreduce(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            comm,
        )
    }
}

pub(crate) fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
) -> MpiResult<()> {
    let op = coll_op(op)?;
    // SAFETY: MPI requires `count` elements of `dtype` at both buffers.
    unsafe {
        coll::reduce_local(
            inbuf as *const u8,
            inoutbuf as *mut u8,
            count as i64,
            dtype,
            &op,
        )
    }
}

pub(crate) fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Reduce_scatter")?;
    let n = match coll::lean_rank_size(comm) {
        Some((_, n)) => n,
        None => r.comm_size(comm)?,
    };
    let rc = ints("recvcounts", recvcounts, n)?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules for MPI_Reduce_scatter.
    unsafe { coll::reduce_scatter(r, sbuf(sendbuf), recvbuf as *mut u8, &rc, dtype, &op, comm) }
}

pub(crate) fn reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Reduce_scatter_block")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules for MPI_Reduce_scatter_block.
    unsafe {
        coll::reduce_scatter_block(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            recvcount as i64,
            dtype,
            &op,
            comm,
        )
    }
}

pub(crate) fn scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Scan")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules for MPI_Scan.
    unsafe {
        coll::scan(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            comm,
        )
    }
}

pub(crate) fn exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Exscan")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules for MPI_Exscan.
    unsafe {
        coll::exscan(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            comm,
        )
    }
}

// ----- non-blocking collectives -----

pub(crate) fn ibarrier(comm: CommId, request: &mut MPI_Request) -> MpiResult<()> {
    let r = h::runtime("MPI_Ibarrier")?;
    started(r, coll::ibarrier(r, comm), request)
}

pub(crate) fn ibcast(
    buf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ibcast")?;
    // SAFETY: MPI's buffer rules; the buffer stays reserved until the request completes.
    let q = unsafe { coll::ibcast(r, buf as *mut u8, count as i64, dtype, root, comm) };
    started(r, q, request)
}

pub(crate) fn igather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Igather")?;
    let (a, _, _) = gather_args(r, comm, root, sendbuf, sendtype, recvtype)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::igather(
            r,
            a.sendbuf,
            sendcount as i64,
            &a.sendtype,
            recvbuf as *mut u8,
            recvcount as i64,
            &a.recvtype,
            root,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn igatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Igatherv")?;
    let (a, is_root, n) = gather_args(r, comm, root, sendbuf, sendtype, recvtype)?;
    let m = if is_root { n } else { 0 };
    let (rc, d) = (
        ints("recvcounts", recvcounts, m)?,
        ints("displs", displs, m)?,
    );
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::igatherv(
            r,
            a.sendbuf,
            sendcount as i64,
            &a.sendtype,
            recvbuf as *mut u8,
            &rc,
            &d,
            &a.recvtype,
            root,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn iscatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Iscatter")?;
    let (st, rb, rt, _, _) = scatter_args(r, comm, root, sendtype, recvbuf, recvtype)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::iscatter(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            &st,
            rb,
            recvcount as i64,
            &rt,
            root,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn iscatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Iscatterv")?;
    let (st, rb, rt, is_root, n) = scatter_args(r, comm, root, sendtype, recvbuf, recvtype)?;
    let m = if is_root { n } else { 0 };
    let (sc, d) = (
        ints("sendcounts", sendcounts, m)?,
        ints("displs", displs, m)?,
    );
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::iscatterv(
            r,
            sendbuf as *const u8,
            &sc,
            &d,
            &st,
            rb,
            recvcount as i64,
            &rt,
            root,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn iallgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Iallgather")?;
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::iallgather(
            r,
            sb,
            sendcount as i64,
            &st,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn iallgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Iallgatherv")?;
    let n = r.comm_peer_size(comm)?;
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    let (rc, d) = (
        ints("recvcounts", recvcounts, n)?,
        ints("displs", displs, n)?,
    );
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::iallgatherv(
            r,
            sb,
            sendcount as i64,
            &st,
            recvbuf as *mut u8,
            &rc,
            &d,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ialltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ialltoall")?;
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::ialltoall(
            r,
            sb,
            sendcount as i64,
            &st,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ialltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ialltoallv")?;
    let n = r.comm_peer_size(comm)?;
    let sb = sbuf(sendbuf);
    let st = dt_if("sendtype", sendtype, sb != SendBuf::InPlace)?;
    let (sc, sd) = send_arrays(sb, sendcounts, sdispls, n)?;
    let (rc, rd) = (
        ints("recvcounts", recvcounts, n)?,
        ints("rdispls", rdispls, n)?,
    );
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::ialltoallv(
            r,
            sb,
            &sc,
            &sd,
            &st,
            recvbuf as *mut u8,
            &rc,
            &rd,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ialltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const MPI_Datatype,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ialltoallw")?;
    let n = r.comm_peer_size(comm)?;
    let w = w_args(
        sendbuf, sendcounts, sdispls, sendtypes, recvcounts, rdispls, recvtypes, n,
    )?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::ialltoallw(
            r,
            w.sb,
            &w.sc,
            &w.sd,
            &w.st,
            recvbuf as *mut u8,
            &w.rc,
            &w.rd,
            &w.rt,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    root: c_int,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ireduce")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::ireduce(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            root,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Iallreduce")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::iallreduce(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ireduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ireduce_scatter")?;
    let rc = ints("recvcounts", recvcounts, r.comm_size(comm)?)?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::ireduce_scatter(r, sbuf(sendbuf), recvbuf as *mut u8, &rc, dtype, &op, comm)
    };
    started(r, q, request)
}

pub(crate) fn ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ireduce_scatter_block")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::ireduce_scatter_block(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            recvcount as i64,
            dtype,
            &op,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn iscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Iscan")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::iscan(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn iexscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: &DtRef,
    op: OpDef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Iexscan")?;
    let op = coll_op(op)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::iexscan(
            r,
            sbuf(sendbuf),
            recvbuf as *mut u8,
            count as i64,
            dtype,
            &op,
            comm,
        )
    };
    started(r, q, request)
}

// ----- neighbourhood collectives -----

pub(crate) fn neighbor_allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Neighbor_allgather")?;
    // SAFETY: MPI's buffer rules for MPI_Neighbor_allgather.
    unsafe {
        coll::topo::neighbor_allgather(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            sendtype,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    }
}

pub(crate) fn neighbor_allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_allgatherv";
    let r = h::runtime(call)?;
    let (indeg, _) = degrees(r, call, comm)?;
    let (rc, d) = (
        ints("recvcounts", recvcounts, indeg)?,
        ints("displs", displs, indeg)?,
    );
    // SAFETY: MPI's buffer rules for MPI_Neighbor_allgatherv.
    unsafe {
        coll::topo::neighbor_allgatherv(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            sendtype,
            recvbuf as *mut u8,
            &rc,
            &d,
            recvtype,
            comm,
        )
    }
}

pub(crate) fn neighbor_alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Neighbor_alltoall")?;
    // SAFETY: MPI's buffer rules for MPI_Neighbor_alltoall.
    unsafe {
        coll::topo::neighbor_alltoall(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            sendtype,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    }
}

pub(crate) fn neighbor_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_alltoallv";
    let r = h::runtime(call)?;
    let (indeg, outdeg) = degrees(r, call, comm)?;
    let (sc, sd) = (
        ints("sendcounts", sendcounts, outdeg)?,
        ints("sdispls", sdispls, outdeg)?,
    );
    let (rc, rd) = (
        ints("recvcounts", recvcounts, indeg)?,
        ints("rdispls", rdispls, indeg)?,
    );
    // SAFETY: MPI's buffer rules for MPI_Neighbor_alltoallv.
    unsafe {
        coll::topo::neighbor_alltoallv(
            r,
            sendbuf as *const u8,
            &sc,
            &sd,
            sendtype,
            recvbuf as *mut u8,
            &rc,
            &rd,
            recvtype,
            comm,
        )
    }
}

pub(crate) fn neighbor_alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_alltoallw";
    let r = h::runtime(call)?;
    let (indeg, outdeg) = degrees(r, call, comm)?;
    let sc = ints("sendcounts", sendcounts, outdeg)?;
    let sd = aints("sdispls", sdispls, outdeg)?;
    let st = dtypes("sendtypes", sendtypes, &sc)?;
    let rc = ints("recvcounts", recvcounts, indeg)?;
    let rd = aints("rdispls", rdispls, indeg)?;
    let rt = dtypes("recvtypes", recvtypes, &rc)?;
    // SAFETY: MPI's buffer rules for MPI_Neighbor_alltoallw.
    unsafe {
        coll::topo::neighbor_alltoallw(
            r,
            sendbuf as *const u8,
            &sc,
            &sd,
            &st,
            recvbuf as *mut u8,
            &rc,
            &rd,
            &rt,
            comm,
        )
    }
}

pub(crate) fn ineighbor_allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ineighbor_allgather")?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::topo::ineighbor_allgather(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            sendtype,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ineighbor_allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let call = "MPI_Ineighbor_allgatherv";
    let r = h::runtime(call)?;
    let (indeg, _) = degrees(r, call, comm)?;
    let (rc, d) = (
        ints("recvcounts", recvcounts, indeg)?,
        ints("displs", displs, indeg)?,
    );
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::topo::ineighbor_allgatherv(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            sendtype,
            recvbuf as *mut u8,
            &rc,
            &d,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ineighbor_alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Ineighbor_alltoall")?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::topo::ineighbor_alltoall(
            r,
            sendbuf as *const u8,
            sendcount as i64,
            sendtype,
            recvbuf as *mut u8,
            recvcount as i64,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ineighbor_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: &DtRef,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: &DtRef,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let call = "MPI_Ineighbor_alltoallv";
    let r = h::runtime(call)?;
    let (indeg, outdeg) = degrees(r, call, comm)?;
    let (sc, sd) = (
        ints("sendcounts", sendcounts, outdeg)?,
        ints("sdispls", sdispls, outdeg)?,
    );
    let (rc, rd) = (
        ints("recvcounts", recvcounts, indeg)?,
        ints("rdispls", rdispls, indeg)?,
    );
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::topo::ineighbor_alltoallv(
            r,
            sendbuf as *const u8,
            &sc,
            &sd,
            sendtype,
            recvbuf as *mut u8,
            &rc,
            &rd,
            recvtype,
            comm,
        )
    };
    started(r, q, request)
}

pub(crate) fn ineighbor_alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: CommId,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let call = "MPI_Ineighbor_alltoallw";
    let r = h::runtime(call)?;
    let (indeg, outdeg) = degrees(r, call, comm)?;
    let sc = ints("sendcounts", sendcounts, outdeg)?;
    let sd = aints("sdispls", sdispls, outdeg)?;
    let st = dtypes("sendtypes", sendtypes, &sc)?;
    let rc = ints("recvcounts", recvcounts, indeg)?;
    let rd = aints("rdispls", rdispls, indeg)?;
    let rt = dtypes("recvtypes", recvtypes, &rc)?;
    // SAFETY: MPI's buffer rules; buffers reserved until completion.
    let q = unsafe {
        coll::topo::ineighbor_alltoallw(
            r,
            sendbuf as *const u8,
            &sc,
            &sd,
            &st,
            recvbuf as *mut u8,
            &rc,
            &rd,
            &rt,
            comm,
        )
    };
    started(r, q, request)
}
