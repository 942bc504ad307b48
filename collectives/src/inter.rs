//! Collectives on intercommunicators, as MPI defines them: rooted ones move data between
//! the root (`MPI_ROOT`) and the other group (which names the root by its rank in the root
//! group; the root's group mates pass `MPI_PROC_NULL` and take no part), all-to-all ones
//! give each group the other group's contributions.
//!
//! Each is a chain of schedules (`CollRequest::chain`): phases on the hidden local
//! intracommunicator (built with the intracommunicator schedules of [`crate::nbc`]) and
//! exactly one inter-group phase on the intercommunicator itself, so every member of both
//! groups takes the same non-blocking sequence numbers and tags match. The blocking forms
//! start the same chain and wait. Gather, scatter and the all-to-all family go directly
//! between the groups (one message per pair); reductions reduce within a group first
//! (rank order, so non-commutative ops are right), then the leaders swap the results, then
//! the result is spread in the receiving group. `MPI_IN_PLACE` is erroneous on
//! intercommunicators (MPI_ERR_ARG); scan and exscan are not defined on them
//! (MPI_ERR_COMM).

use tsunagi_core::comm::InterData;
use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime};

use crate::nbc::{self, CollRequest, Loc, Step};
use crate::op::Op;
use crate::util::{check_buf, check_count, check_counts, check_displs, check_type, err};
use crate::util::{RecvBuf, SendBuf};

/// `MPI_ROOT` (MPICH's value).
pub const ROOT: i32 = -3;
/// `MPI_PROC_NULL`.
const PROC_NULL: i32 = -1;

/// What this process is in a rooted intercommunicator collective.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// The root (`MPI_ROOT`).
    Root,
    /// In the root's group, not the root (`MPI_PROC_NULL`).
    Idle,
    /// In the other group; the root is this rank of the remote group.
    Leaf(usize),
}

struct Inter {
    data: InterData,
    me: usize,
    remote_n: usize,
}

fn inter(rt: &Runtime, call: &str, comm: CommId) -> MpiResult<Inter> {
    let data = rt.comm_inter(comm)?.ok_or_else(|| {
        err(
            ErrorClass::Intern,
            format!("{call}: not an intercommunicator"),
        )
    })?;
    Ok(Inter {
        remote_n: data.remote.size(),
        data,
        me: rt.comm_rank(comm)?,
    })
}

fn role(call: &str, root: i32, remote_n: usize) -> MpiResult<Role> {
    match root {
        ROOT => Ok(Role::Root),
        PROC_NULL => Ok(Role::Idle),
        r if r >= 0 && (r as usize) < remote_n => Ok(Role::Leaf(r as usize)),
        r => Err(err(
            ErrorClass::Root,
            format!("{call}: invalid root {r} on an intercommunicator (MPI_ROOT, MPI_PROC_NULL or a rank of the remote group of size {remote_n})"),
        )),
    }
}

fn no_in_place(call: &str, in_place: bool) -> MpiResult<()> {
    if in_place {
        return Err(err(
            ErrorClass::Arg,
            format!("{call}: MPI_IN_PLACE is not allowed on an intercommunicator"),
        ));
    }
    Ok(())
}

/// MPI_ERR_COMM for collectives MPI does not define on intercommunicators.
pub(crate) fn undefined(call: &str) -> tsunagi_core::MpiError {
    err(
        ErrorClass::Comm,
        format!("{call} is not defined on intercommunicators"),
    )
}

fn typed_send(at: *mut u8, count: usize, dtype: &TypeRef, peer: usize) -> Step {
    Step::Send {
        sub: 0,
        loc: Loc::User(at),
        count,
        dtype: Some(dtype.clone()),
        peer,
    }
}

fn typed_recv(at: *mut u8, count: usize, dtype: &TypeRef, peer: usize) -> Step {
    Step::Recv {
        sub: 0,
        loc: Loc::User(at),
        count,
        dtype: Some(dtype.clone()),
        peer,
    }
}

/// `base + i * extent` (wrapping: MPI displacements may point anywhere in the buffer).
fn at(base: *const u8, i: i64, dtype: &TypeRef) -> *mut u8 {
    (base as *mut u8).wrapping_offset((i as isize).wrapping_mul(dtype.extent()))
}

/// The inter-group phase: one round of the given transfers.
fn exchange(rt: &Runtime, comm: CommId, steps: Vec<Step>) -> MpiResult<CollRequest> {
    let mut r = CollRequest::new(rt, comm)?;
    if !steps.is_empty() {
        r.round().comm = steps;
    }
    Ok(r)
}

/// A scratch buffer for `count` elements of `dtype` in user layout, and the address the
/// elements start at.
fn scratch(count: usize, dtype: &TypeRef) -> (Vec<u8>, *mut u8) {
    let span = if count == 0 {
        0
    } else {
        (count as isize - 1) * dtype.extent() + dtype.true_extent()
    };
    let mut v = vec![0u8; span.max(1) as usize];
    let p = v.as_mut_ptr().wrapping_offset(-dtype.true_lb());
    (v, p)
}

/// A phase on the local intracommunicator in which its rank 0 sends `blocks[i]` to local
/// rank `i` (itself included) and every member receives its block into `mine`. Built
/// here rather than with the intracommunicator schedules because those may read the
/// root's data when they are built, and this data arrives only in an earlier phase.
fn spread(
    rt: &Runtime,
    local: CommId,
    me: usize,
    blocks: Vec<(*mut u8, usize)>,
    mine: (*mut u8, usize),
    dtype: &TypeRef,
) -> MpiResult<CollRequest> {
    let mut steps = vec![typed_recv(mine.0, mine.1, dtype, 0)];
    if me == 0 {
        for (i, (a, c)) in blocks.into_iter().enumerate() {
            steps.push(typed_send(a, c, dtype, i));
        }
    }
    exchange(rt, local, steps)
}

/// A phase on the local intracommunicator in which its rank 0 sends the `count` elements
/// at `buf` to every other member, which receive them at their `buf`.
fn fan_out(
    rt: &Runtime,
    local: CommId,
    me: usize,
    n: usize,
    buf: *mut u8,
    count: usize,
    dtype: &TypeRef,
) -> MpiResult<CollRequest> {
    let steps = if me == 0 {
        (1..n).map(|i| typed_send(buf, count, dtype, i)).collect()
    } else {
        vec![typed_recv(buf, count, dtype, 0)]
    };
    exchange(rt, local, steps)
}

/// `MPI_Ibarrier` / `MPI_Barrier`.
pub(crate) fn ibarrier(rt: &Runtime, comm: CommId) -> MpiResult<CollRequest> {
    let x = inter(rt, "MPI_Ibarrier", comm)?;
    let local = x.data.local_comm;
    let mut tmps = vec![vec![0u8; 1]];
    let z = tmps[0].as_mut_ptr();
    let byte = crate::util::byte_type();
    let steps = if x.me == 0 {
        vec![typed_send(z, 0, &byte, 0), typed_recv(z, 0, &byte, 0)]
    } else {
        Vec::new()
    };
    let phases = vec![
        nbc::ibarrier(rt, local)?,
        exchange(rt, comm, steps)?,
        nbc::ibarrier(rt, local)?,
    ];
    Ok(CollRequest::chain(comm, phases, tmps))
}

/// `MPI_Ibcast` / `MPI_Bcast`.
///
/// # Safety
/// As [`crate::nbc::ibcast`].
pub(crate) unsafe fn ibcast(
    rt: &Runtime,
    call: &str,
    buf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let role = role(call, root, x.remote_n)?;
    let mut phases = Vec::new();
    let mut steps = Vec::new();
    if role != Role::Idle {
        let count = check_count(call, count)?;
        check_type(call, dtype)?;
        check_buf(call, "buffer", buf, count, dtype)?;
        match role {
            Role::Root => steps.push(typed_send(buf, count, dtype, 0)),
            Role::Leaf(r) if x.me == 0 => steps.push(typed_recv(buf, count, dtype, r)),
            _ => {}
        }
    }
    phases.push(exchange(rt, comm, steps)?);
    if let Role::Leaf(_) = role {
        let c = count.max(0) as usize;
        let n = rt.comm_size(comm)?;
        phases.push(fan_out(rt, x.data.local_comm, x.me, n, buf, c, dtype)?);
    }
    Ok(CollRequest::chain(comm, phases, Vec::new()))
}

/// `MPI_Igatherv` / `MPI_Igather` (`counts` None: `recvcount` from each) and blocking.
///
/// # Safety
/// As [`crate::nbc::igatherv`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn igatherv(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    counts_displs: Option<(&[i64], &[i64])>,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let role = role(call, root, x.remote_n)?;
    let mut steps = Vec::new();
    match role {
        Role::Root => {
            check_type(call, recvtype)?;
            let n = x.remote_n;
            let (counts, displs) = match counts_displs {
                Some((c, d)) => {
                    check_displs(call, "displs", d, n)?;
                    (check_counts(call, "recvcounts", c, n)?, d[..n].to_vec())
                }
                None => {
                    let c = check_count(call, recvcount)?;
                    (vec![c; n], (0..n as i64).map(|i| i * c as i64).collect())
                }
            };
            for i in 0..n {
                steps.push(typed_recv(
                    at(recvbuf, displs[i], recvtype),
                    counts[i],
                    recvtype,
                    i,
                ));
            }
        }
        Role::Leaf(r) => {
            let SendBuf::Ptr(sb) = sendbuf else {
                return no_in_place(call, true).map(|_| unreachable!());
            };
            let c = check_count(call, sendcount)?;
            check_type(call, sendtype)?;
            check_buf(call, "sendbuf", sb, c, sendtype)?;
            steps.push(typed_send(sb as *mut u8, c, sendtype, r));
        }
        Role::Idle => {}
    }
    Ok(CollRequest::chain(
        comm,
        vec![exchange(rt, comm, steps)?],
        Vec::new(),
    ))
}

/// `MPI_Iscatterv` / `MPI_Iscatter` (`counts_displs` None: `sendcount` to each).
///
/// # Safety
/// As [`crate::nbc::iscatterv`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iscatterv(
    rt: &Runtime,
    call: &str,
    sendbuf: *const u8,
    sendcount: i64,
    counts_displs: Option<(&[i64], &[i64])>,
    sendtype: &TypeRef,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let role = role(call, root, x.remote_n)?;
    let mut steps = Vec::new();
    match role {
        Role::Root => {
            check_type(call, sendtype)?;
            let n = x.remote_n;
            let (counts, displs) = match counts_displs {
                Some((c, d)) => {
                    check_displs(call, "displs", d, n)?;
                    (check_counts(call, "sendcounts", c, n)?, d[..n].to_vec())
                }
                None => {
                    let c = check_count(call, sendcount)?;
                    (vec![c; n], (0..n as i64).map(|i| i * c as i64).collect())
                }
            };
            for i in 0..n {
                steps.push(typed_send(
                    at(sendbuf, displs[i], sendtype),
                    counts[i],
                    sendtype,
                    i,
                ));
            }
        }
        Role::Leaf(r) => {
            let RecvBuf::Ptr(rb) = recvbuf else {
                return no_in_place(call, true).map(|_| unreachable!());
            };
            let c = check_count(call, recvcount)?;
            check_type(call, recvtype)?;
            check_buf(call, "recvbuf", rb, c, recvtype)?;
            steps.push(typed_recv(rb, c, recvtype, r));
        }
        Role::Idle => {}
    }
    Ok(CollRequest::chain(
        comm,
        vec![exchange(rt, comm, steps)?],
        Vec::new(),
    ))
}

/// Per-peer blocks of an all-to-all family call on one side: (address, count, type).
type Blocks = Vec<(*mut u8, usize, TypeRef)>;

fn uniform(base: *const u8, count: i64, dtype: &TypeRef, n: usize) -> Blocks {
    (0..n)
        .map(|i| {
            (
                at(base, i as i64 * count, dtype),
                count.max(0) as usize,
                dtype.clone(),
            )
        })
        .collect()
}

/// The all-to-all family on an intercommunicator: `send[j]` goes to remote rank `j`,
/// `recv[j]` comes from it.
fn pairwise(
    rt: &Runtime,
    call: &str,
    comm: CommId,
    send: Blocks,
    recv: Blocks,
) -> MpiResult<CollRequest> {
    let mut steps = Vec::new();
    for (j, (a, c, t)) in recv.iter().enumerate() {
        check_type(call, t)?;
        steps.push(typed_recv(*a, *c, t, j));
    }
    for (j, (a, c, t)) in send.iter().enumerate() {
        check_type(call, t)?;
        steps.push(typed_send(*a, *c, t, j));
    }
    Ok(CollRequest::chain(
        comm,
        vec![exchange(rt, comm, steps)?],
        Vec::new(),
    ))
}

/// `MPI_Iallgather(v)`: every member receives each remote member's block.
///
/// # Safety
/// As [`crate::nbc::iallgatherv`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iallgatherv(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    counts_displs: Option<(&[i64], &[i64])>,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let SendBuf::Ptr(sb) = sendbuf else {
        return no_in_place(call, true).map(|_| unreachable!());
    };
    let n = x.remote_n;
    let sc = check_count(call, sendcount)?;
    let recv: Blocks = match counts_displs {
        Some((c, d)) => {
            check_displs(call, "displs", d, n)?;
            let c = check_counts(call, "recvcounts", c, n)?;
            (0..n)
                .map(|i| (at(recvbuf, d[i], recvtype), c[i], recvtype.clone()))
                .collect()
        }
        None => {
            check_count(call, recvcount)?;
            uniform(recvbuf, recvcount, recvtype, n)
        }
    };
    let send = vec![(sb as *mut u8, sc, sendtype.clone()); n];
    pairwise(rt, call, comm, send, recv)
}

/// `MPI_Ialltoall` on an intercommunicator.
///
/// # Safety
/// As [`crate::nbc::ialltoall`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ialltoall(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let SendBuf::Ptr(sb) = sendbuf else {
        return no_in_place(call, true).map(|_| unreachable!());
    };
    check_count(call, sendcount)?;
    check_count(call, recvcount)?;
    let n = x.remote_n;
    pairwise(
        rt,
        call,
        comm,
        uniform(sb, sendcount, sendtype, n),
        uniform(recvbuf, recvcount, recvtype, n),
    )
}

/// `MPI_Ialltoallw` (byte displacements, a type per peer) on an intercommunicator; the v
/// form comes here with displacements in elements scaled by the caller.
///
/// # Safety
/// As [`crate::nbc::ialltoallw`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ialltoallw(
    rt: &Runtime,
    call: &str,
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
    let x = inter(rt, call, comm)?;
    let SendBuf::Ptr(sb) = sendbuf else {
        return no_in_place(call, true).map(|_| unreachable!());
    };
    let n = x.remote_n;
    let sc = check_counts(call, "sendcounts", sendcounts, n)?;
    let rc = check_counts(call, "recvcounts", recvcounts, n)?;
    check_displs(call, "sdispls", sdispls, n)?;
    check_displs(call, "rdispls", rdispls, n)?;
    if sendtypes.len() < n || recvtypes.len() < n {
        return Err(err(
            ErrorClass::Arg,
            format!("{call}: fewer datatypes than remote ranks ({n})"),
        ));
    }
    let send = (0..n)
        .map(|j| {
            (
                (sb as *mut u8).wrapping_offset(sdispls[j] as isize),
                sc[j],
                sendtypes[j].clone(),
            )
        })
        .collect();
    let recv = (0..n)
        .map(|j| {
            (
                recvbuf.wrapping_offset(rdispls[j] as isize),
                rc[j],
                recvtypes[j].clone(),
            )
        })
        .collect();
    pairwise(rt, call, comm, send, recv)
}

/// `MPI_Ialltoallv` on an intercommunicator (displacements in elements).
///
/// # Safety
/// As [`crate::nbc::ialltoallv`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ialltoallv(
    rt: &Runtime,
    call: &str,
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
    let scale =
        |d: &[i64], t: &TypeRef| -> Vec<i64> { d.iter().map(|&x| x * t.extent() as i64).collect() };
    let n = sendcounts.len().max(recvcounts.len());
    // SAFETY: forwarded.
    unsafe {
        ialltoallw(
            rt,
            call,
            sendbuf,
            sendcounts,
            &scale(sdispls, sendtype),
            &vec![sendtype.clone(); n],
            recvbuf,
            recvcounts,
            &scale(rdispls, recvtype),
            &vec![recvtype.clone(); n],
            comm,
        )
    }
}

/// `MPI_Ireduce` on an intercommunicator: the leaf group reduces to its rank 0, which
/// sends the result to the root.
///
/// # Safety
/// As [`crate::nbc::ireduce`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ireduce(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    root: i32,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let role = role(call, root, x.remote_n)?;
    let mut phases = Vec::new();
    let mut tmps = Vec::new();
    let mut steps = Vec::new();
    match role {
        Role::Root => {
            let c = check_count(call, count)?;
            check_type(call, dtype)?;
            check_buf(call, "recvbuf", recvbuf, c, dtype)?;
            steps.push(typed_recv(recvbuf, c, dtype, 0));
        }
        Role::Leaf(r) => {
            no_in_place(call, sendbuf == SendBuf::InPlace)?;
            let c = check_count(call, count)?;
            let (v, p) = scratch(c, dtype);
            tmps.push(v);
            // SAFETY: forwarded; the scratch buffer lives in the chain.
            phases.push(unsafe {
                nbc::ireduce(rt, sendbuf, p, count, dtype, op, 0, x.data.local_comm)?
            });
            if x.me == 0 {
                steps.push(typed_send(p, c, dtype, r));
            }
        }
        Role::Idle => {}
    }
    phases.push(exchange(rt, comm, steps)?);
    Ok(CollRequest::chain(comm, phases, tmps))
}

/// The reduction family's three phases: reduce `count` elements of each group's data to
/// its rank 0, swap the results between the leaders, then `spread` the other group's
/// result (at the returned address) within the group.
///
/// # Safety
/// `sendbuf` holds `count` elements of `dtype`.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_swap(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
    x: &Inter,
    into: Option<*mut u8>,
    spread: impl FnOnce(*mut u8) -> MpiResult<CollRequest>,
) -> MpiResult<CollRequest> {
    no_in_place(call, sendbuf == SendBuf::InPlace)?;
    check_type(call, dtype)?;
    let local = x.data.local_comm;
    let (mine, pm) = scratch(count, dtype);
    let mut tmps = vec![mine];
    let theirs = match into {
        Some(p) => p,
        None => {
            let (v, p) = scratch(count, dtype);
            tmps.push(v);
            p
        }
    };
    // SAFETY: forwarded; the scratch buffers live in the chain.
    let first = unsafe { nbc::ireduce(rt, sendbuf, pm, count as i64, dtype, op, 0, local)? };
    let steps = if x.me == 0 {
        vec![
            typed_recv(theirs, count, dtype, 0),
            typed_send(pm, count, dtype, 0),
        ]
    } else {
        Vec::new()
    };
    let phases = vec![first, exchange(rt, comm, steps)?, spread(theirs)?];
    Ok(CollRequest::chain(comm, phases, tmps))
}

/// `MPI_Iallreduce` on an intercommunicator: each group gets the other group's reduction.
///
/// # Safety
/// As [`crate::nbc::iallreduce`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iallreduce(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let c = check_count(call, count)?;
    check_buf(call, "recvbuf", recvbuf, c, dtype)?;
    let (local, me, n) = (x.data.local_comm, x.me, rt.comm_size(comm)?);
    // SAFETY: forwarded.
    unsafe {
        reduce_swap(
            rt,
            call,
            sendbuf,
            c,
            dtype,
            op,
            comm,
            &x,
            Some(recvbuf),
            |p| {
                // The leader received into its own receive buffer.
                fan_out(rt, local, me, n, p, c, dtype)
            },
        )
    }
}

/// `MPI_Ireduce_scatter(_block)` on an intercommunicator: the other group's reduction of
/// `sum(recvcounts)` elements is scattered over this group by `recvcounts`.
///
/// # Safety
/// As [`crate::nbc::ireduce_scatter`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ireduce_scatter(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let x = inter(rt, call, comm)?;
    let n = rt.comm_size(comm)?;
    let counts = check_counts(call, "recvcounts", recvcounts, n)?;
    let total: usize = counts.iter().sum();
    let mut displs = Vec::with_capacity(n);
    let mut d = 0i64;
    for &c in &counts {
        displs.push(d);
        d += c as i64;
    }
    let (local, me) = (x.data.local_comm, x.me);
    check_buf(call, "recvbuf", recvbuf, counts[me], dtype)?;
    // SAFETY: forwarded.
    unsafe {
        reduce_swap(rt, call, sendbuf, total, dtype, op, comm, &x, None, |p| {
            let blocks = (0..n)
                .map(|i| (at(p, displs[i], dtype), counts[i]))
                .collect();
            spread(rt, local, me, blocks, (recvbuf, counts[me]), dtype)
        })
    }
}

/// `MPI_Ireduce_scatter_block` on an intercommunicator.
///
/// # Safety
/// As [`crate::nbc::ireduce_scatter_block`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ireduce_scatter_block(
    rt: &Runtime,
    call: &str,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    recvcount: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<CollRequest> {
    check_count(call, recvcount)?;
    let n = rt.comm_size(comm)?;
    // SAFETY: forwarded.
    unsafe {
        ireduce_scatter(
            rt,
            call,
            sendbuf,
            recvbuf,
            &vec![recvcount; n],
            dtype,
            op,
            comm,
        )
    }
}

/// True when `comm` (checked as an argument of `call`) is an intercommunicator.
pub(crate) fn is_inter(rt: &Runtime, call: &str, comm: CommId) -> MpiResult<bool> {
    rt.comm_is_inter(call, comm)
}
