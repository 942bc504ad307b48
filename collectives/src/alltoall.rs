//! MPI_Alltoall(v,w): Bruck (small blocks, alltoall only), pairwise shift, linear (all
//! at once), and the 2-level ring of seed 003 §5.1: an outer ring over nodes, so that in
//! each phase every node sends to exactly one other node, and inside a phase a rotation
//! over the core pairs of the two nodes. Across nodes with small blocks (alltoall only),
//! `hierarchical`: gathered at the node leaders through the nodes' shared-memory areas,
//! one message per pair of nodes, scattered back (`split_alltoall`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU8, Ordering};

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime};

use crate::node_area::SLOT_BYTES;
use crate::nodesplit::Split;
use crate::select::{choose, Coll};
use crate::util::{
    check_count, check_counts, check_displs, check_type, copy_typed, err, tag, Ctx, Hier, SendBuf,
};

/// One peer's block: address, count, type (user layout).
type Spec = (*mut u8, usize, TypeRef);

/// Per phase of one rank's schedule: destinations in send order, and sources.
pub(crate) type Phases = Vec<(Vec<usize>, Vec<usize>)>;

/// The 2-level ring schedule of rank `me`: phase t pairs node n with node n + t (send)
/// and node n - t (receive); inside a phase, local index i sends to the destination
/// node's members starting at index i, rotating.
pub(crate) fn two_level_phases(nodes: &[u32], me: usize) -> Phases {
    let h = Hier::new(nodes, me);
    let nn = h.members.len();
    let n = h.my_node;
    let i = h.my_local;
    (0..nn)
        .map(|t| {
            let d = &h.members[(n + t) % nn];
            let s = &h.members[(n + nn - t) % nn];
            let dests = (0..d.len()).map(|u| d[(i + u) % d.len()]).collect();
            let srcs = (0..s.len())
                .map(|u| s[(i + s.len() - u % s.len()) % s.len()])
                .collect();
            (dests, srcs)
        })
        .collect()
}

fn pairwise_phases(p: usize, me: usize) -> Phases {
    (0..p)
        .map(|s| (vec![(me + s) % p], vec![(me + p - s) % p]))
        .collect()
}

fn linear_phases(p: usize, me: usize) -> Phases {
    vec![(
        (0..p).map(|s| (me + s) % p).collect(),
        (0..p).map(|s| (me + p - s) % p).collect(),
    )]
}

/// For a node map (node id of every rank), the 2-level ring all-to-all's schedule seen
/// from the nodes: per phase, per node (in order of first appearance in the map), the
/// set of destination node ids of that node's ranks. Every set has exactly one member.
pub fn two_level_ring_schedule(nodes: &[u32]) -> Vec<Vec<BTreeSet<u32>>> {
    node_view(nodes, |me| two_level_phases(nodes, me))
}

/// The same view of the plain ring (pairwise shift: in phase s rank r sends to r + s).
pub fn plain_ring_schedule(nodes: &[u32]) -> Vec<Vec<BTreeSet<u32>>> {
    node_view(nodes, |me| pairwise_phases(nodes.len(), me))
}

fn node_view(nodes: &[u32], phases_of: impl Fn(usize) -> Phases) -> Vec<Vec<BTreeSet<u32>>> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let h = Hier::new(nodes, 0);
    let mut out: Vec<Vec<BTreeSet<u32>>> = Vec::new();
    for r in 0..nodes.len() {
        for (t, (dests, _)) in phases_of(r).into_iter().enumerate() {
            if out.len() <= t {
                out.push(vec![BTreeSet::new(); h.members.len()]);
            }
            for d in dests {
                out[t][h.node_of[r]].insert(nodes[d]);
            }
        }
    }
    out
}

/// The algorithm the last blocking all-to-all of this process ran (index into
/// [`Coll::algorithms`] + 1; 0: none yet).
static LAST: AtomicU8 = AtomicU8::new(0);

/// The name of the algorithm (one of `Coll::Alltoall.algorithms()`) that this process's
/// most recent blocking `MPI_Alltoall`/`Alltoallv`/`Alltoallw` ran, on any thread and any
/// communicator; `None` before the first. It is what actually ran: a forced `bruck` that
/// cannot run a v/w call shows as `pairwise`. Non-blocking all-to-alls are not recorded.
/// (A fabric-aware transport uses it to tell whether the shift pattern its addresses were
/// planned for is the one on the wire; see `tsunagi-fattree`.)
pub fn last_alltoall_algorithm() -> Option<&'static str> {
    let v = LAST.load(Ordering::Relaxed) as usize;
    Coll::Alltoall.algorithms().get(v.checked_sub(1)?).copied()
}

fn record(alg: &str) {
    if let Some(i) = Coll::Alltoall.algorithms().iter().position(|a| *a == alg) {
        LAST.store(i as u8 + 1, Ordering::Relaxed);
    }
}

/// `MPI_Alltoall`.
///
/// # Safety
/// `size * sendcount` elements of `sendtype` readable at `sendbuf` (unless in place);
/// room for `size * recvcount` elements of `recvtype` at `recvbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn alltoall(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<()> {
    // The shared-memory fast path when this thread has the area at hand (no engine
    // lock), for arguments that pass the checks below (anything else goes on).
    if let Some(node) = crate::shmcoll::lean(comm, Coll::Alltoall) {
        let p = node.size();
        let rc = recvcount.max(0) as usize;
        let block = rc * recvtype.size();
        let send = match sendbuf {
            SendBuf::InPlace => Some((recvbuf as *const u8, rc, recvtype)),
            SendBuf::Ptr(s) => (sendcount >= 0
                && sendtype.is_committed()
                && sendcount as usize * sendtype.size() == block)
                .then_some((s, sendcount as usize, sendtype)),
        };
        if let Some((s, sc, st)) = send {
            if recvcount > 0 && recvtype.is_committed() && node.serves(p * block) {
                record(crate::shmcoll::NAME);
                // SAFETY: forwarded caller contract (in place: the send blocks are the
                // receive blocks, which the area copies out before writing them).
                return unsafe { node.alltoall(rt, s, sc, st, recvbuf, rc, recvtype) };
            }
        }
    }
    if crate::inter::is_inter(rt, "MPI_Alltoall", comm)? {
        return unsafe {
            crate::inter::ialltoall(
                rt,
                "MPI_Alltoall",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                comm,
            )
        }?
        .wait(rt);
    }
    let call = "MPI_Alltoall";
    let mut ctx = Ctx::new(rt, comm, call)?;
    let p = ctx.size;
    let rc = check_count(call, recvcount)?;
    check_type(call, recvtype)?;
    // On one node, when all blocks of a rank fit one slot: the shared-memory area
    // (`shmcoll.rs`); a send side that fails the checks below goes the ordinary way.
    let block = rc * recvtype.size();
    if p > 1 && block > 0 {
        let send = match sendbuf {
            SendBuf::InPlace => Some((recvbuf as *const u8, rc, recvtype)),
            SendBuf::Ptr(s) => {
                let sc = check_count(call, sendcount)?;
                check_type(call, sendtype)?;
                (sc * sendtype.size() == block).then_some((s, sc, sendtype))
            }
        };
        if let Some((s, sc, st)) = send {
            if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Alltoall, p * block)? {
                record(crate::shmcoll::NAME);
                // SAFETY: forwarded caller contract (in place: the send blocks are the
                // receive blocks, which the area copies out before writing them).
                return unsafe { node.alltoall(rt, s, sc, st, recvbuf, rc, recvtype) };
            }
            // Across nodes, when a rank's blocks fit a slot: through the node leaders.
            if p * block <= SLOT_BYTES && ctx.is_hierarchical()? {
                let auto = match crate::select::forced(Coll::Alltoall) {
                    None => Some(true),
                    Some(i) if Coll::Alltoall.algorithms()[i] == "hierarchical" => Some(false),
                    Some(_) => None,
                };
                if let Some(auto) = auto {
                    if let Some(sp) = crate::nodesplit::split(&mut ctx)? {
                        if !auto || sp.max_local() * p * block <= SLOT_BYTES {
                            record("hierarchical");
                            // SAFETY: forwarded caller contract.
                            return unsafe {
                                split_alltoall(&ctx, &sp, s, sc, st, recvbuf, rc, recvtype)
                            };
                        }
                    }
                }
            }
        }
    }
    let rext = recvtype.extent();
    let recv: Vec<Spec> = (0..p)
        .map(|j| {
            (
                recvbuf.wrapping_offset(j as isize * rc as isize * rext),
                rc,
                recvtype.clone(),
            )
        })
        .collect();
    let send: Option<Vec<Spec>> = match sendbuf {
        SendBuf::InPlace => None,
        SendBuf::Ptr(s) => {
            let sc = check_count(call, sendcount)?;
            check_type(call, sendtype)?;
            if sc * sendtype.size() != rc * recvtype.size() {
                return Err(err(
                    ErrorClass::Truncate,
                    format!("{call}: send block size differs from receive block size"),
                ));
            }
            let sext = sendtype.extent();
            Some(
                (0..p)
                    .map(|j| {
                        (
                            s.wrapping_offset(j as isize * sc as isize * sext) as *mut u8,
                            sc,
                            sendtype.clone(),
                        )
                    })
                    .collect(),
            )
        }
    };
    // SAFETY: forwarded caller contract.
    unsafe { alltoall_impl(ctx, send, recv, true) }
}

/// All-to-all of small blocks through the node leaders: every rank's `p` blocks go to its
/// leader (a gather through the node's shared-memory area), each leader sends every other
/// leader, in one message, the blocks its node's ranks have for that node's ranks and
/// receives theirs, then hands every rank of its node its `p` blocks (a scatter through
/// the area). One message per pair of nodes crosses the network instead of one per pair
/// of ranks (or Bruck's `log p` rounds); the ranks that are not leaders only post to and
/// wait on the area.
///
/// # Safety
/// `p * sc` elements of `st` readable at `s` (the receive buffer itself when in place: it
/// is read by the gather before the scatter writes it); room for `p * rc` elements of
/// `rt_` at `recvbuf`; `sc * st.size() == rc * rt_.size()`.
#[allow(clippy::too_many_arguments)]
unsafe fn split_alltoall(
    ctx: &Ctx,
    sp: &Split,
    s: *const u8,
    sc: usize,
    st: &TypeRef,
    recvbuf: *mut u8,
    rc: usize,
    rt_: &TypeRef,
) -> MpiResult<()> {
    let rt = ctx.rt;
    let p = ctx.size;
    let b = rc * rt_.size();
    let row = p * b;
    let h = &sp.hier;
    let mine = &h.members[h.my_node];
    let nl = mine.len();
    let byte = crate::util::byte_type();
    // The node's rows (rank i of the node's `p` blocks at `i * row`), at the leader.
    let mut rows = vec![0u8; if sp.is_leader() { nl * row } else { 0 }];
    // SAFETY: caller contract for `s`; `rows` holds `nl` rows at the leader.
    unsafe {
        crate::gather::gather(
            rt,
            SendBuf::Ptr(s),
            (p * sc) as i64,
            st,
            rows.as_mut_ptr(),
            row as i64,
            &byte,
            0,
            sp.node,
        )?;
    }
    let mut out = vec![0u8; if sp.is_leader() { nl * row } else { 0 }];
    if sp.is_leader() {
        let nn = h.members.len();
        // To node j: for each of our ranks i (in order), the blocks for j's ranks (in
        // order). From node j: for each of its ranks k, the blocks for our ranks.
        let mut sbufs: Vec<Vec<u8>> = Vec::with_capacity(nn);
        let mut rbufs: Vec<Vec<u8>> = Vec::with_capacity(nn);
        for (j, theirs) in h.members.iter().enumerate() {
            if j == h.my_node {
                sbufs.push(Vec::new());
                rbufs.push(Vec::new());
                continue;
            }
            let mut v = Vec::with_capacity(nl * theirs.len() * b);
            for i in 0..nl {
                for &r in theirs {
                    v.extend_from_slice(&rows[i * row + r * b..i * row + (r + 1) * b]);
                }
            }
            sbufs.push(v);
            rbufs.push(vec![0u8; theirs.len() * nl * b]);
        }
        let mut reqs = Vec::with_capacity(2 * nn);
        for (j, r) in rbufs.iter_mut().enumerate() {
            if j != h.my_node {
                // SAFETY: `rbufs[j]` is not touched until the waitall.
                reqs.push(unsafe {
                    ctx.irecv(r.as_mut_ptr(), r.len(), h.leaders[j], tag::ALLTOALL + 40)?
                });
            }
        }
        for (j, v) in sbufs.iter().enumerate() {
            if j != h.my_node {
                // SAFETY: `sbufs[j]` lives, unchanged, until the waitall.
                reqs.push(unsafe {
                    ctx.isend(v.as_ptr(), v.len(), h.leaders[j], tag::ALLTOALL + 40)?
                });
            }
        }
        // Our own node's blocks meanwhile: rank i's block from our rank k.
        for i in 0..nl {
            for (k, &src) in mine.iter().enumerate() {
                let from = k * row + mine[i] * b;
                out[i * row + src * b..i * row + (src + 1) * b]
                    .copy_from_slice(&rows[from..from + b]);
            }
        }
        ctx.waitall(&mut reqs)?;
        for (j, theirs) in h.members.iter().enumerate() {
            if j == h.my_node {
                continue;
            }
            let v = &rbufs[j];
            for (k, &src) in theirs.iter().enumerate() {
                for i in 0..nl {
                    let from = (k * nl + i) * b;
                    out[i * row + src * b..i * row + (src + 1) * b]
                        .copy_from_slice(&v[from..from + b]);
                }
            }
        }
    }
    // SAFETY: `out` holds `nl` rows at the leader; room for `p * rc` elements at recvbuf.
    unsafe {
        crate::gather::scatter(
            rt,
            out.as_ptr(),
            row as i64,
            &byte,
            crate::util::RecvBuf::Ptr(recvbuf),
            (p * rc) as i64,
            rt_,
            0,
            sp.node,
        )
    }
}

/// `MPI_Alltoallv` (displacements in elements of the respective type).
///
/// # Safety
/// Block j of the send buffer at `sendbuf + sdispls[j] * extent` readable (unless in
/// place), of the receive buffer at `recvbuf + rdispls[j] * extent` writable.
#[allow(clippy::too_many_arguments)]
pub unsafe fn alltoallv(
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
) -> MpiResult<()> {
    if crate::inter::is_inter(rt, "MPI_Alltoallv", comm)? {
        return unsafe {
            crate::inter::ialltoallv(
                rt,
                "MPI_Alltoallv",
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
        }?
        .wait(rt);
    }
    let call = "MPI_Alltoallv";
    let ctx = Ctx::new(rt, comm, call)?;
    let p = ctx.size;
    check_type(call, recvtype)?;
    let rcs = check_counts(call, "recvcounts", recvcounts, p)?;
    check_displs(call, "rdispls", rdispls, p)?;
    let rext = recvtype.extent();
    let recv: Vec<Spec> = (0..p)
        .map(|j| {
            (
                recvbuf.wrapping_offset(rdispls[j] as isize * rext),
                rcs[j],
                recvtype.clone(),
            )
        })
        .collect();
    let send = match sendbuf {
        SendBuf::InPlace => None,
        SendBuf::Ptr(s) => {
            check_type(call, sendtype)?;
            let scs = check_counts(call, "sendcounts", sendcounts, p)?;
            check_displs(call, "sdispls", sdispls, p)?;
            let sext = sendtype.extent();
            Some(
                (0..p)
                    .map(|j| {
                        (
                            s.wrapping_offset(sdispls[j] as isize * sext) as *mut u8,
                            scs[j],
                            sendtype.clone(),
                        )
                    })
                    .collect(),
            )
        }
    };
    // SAFETY: forwarded caller contract.
    unsafe { alltoall_impl(ctx, send, recv, false) }
}

/// `MPI_Alltoallw` (displacements in bytes, one type per peer).
///
/// # Safety
/// As [`alltoallv`] with byte displacements.
#[allow(clippy::too_many_arguments)]
pub unsafe fn alltoallw(
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
) -> MpiResult<()> {
    if crate::inter::is_inter(rt, "MPI_Alltoallw", comm)? {
        return unsafe {
            crate::inter::ialltoallw(
                rt,
                "MPI_Alltoallw",
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
        }?
        .wait(rt);
    }
    let call = "MPI_Alltoallw";
    let ctx = Ctx::new(rt, comm, call)?;
    let p = ctx.size;
    let rcs = check_counts(call, "recvcounts", recvcounts, p)?;
    check_displs(call, "rdispls", rdispls, p)?;
    if recvtypes.len() < p {
        return Err(err(
            ErrorClass::Arg,
            format!(
                "{call}: recvtypes has {} entries for {p} ranks",
                recvtypes.len()
            ),
        ));
    }
    for t in &recvtypes[..p] {
        check_type(call, t)?;
    }
    let recv: Vec<Spec> = (0..p)
        .map(|j| {
            (
                recvbuf.wrapping_offset(rdispls[j] as isize),
                rcs[j],
                recvtypes[j].clone(),
            )
        })
        .collect();
    let send = match sendbuf {
        SendBuf::InPlace => None,
        SendBuf::Ptr(s) => {
            let scs = check_counts(call, "sendcounts", sendcounts, p)?;
            check_displs(call, "sdispls", sdispls, p)?;
            if sendtypes.len() < p {
                return Err(err(
                    ErrorClass::Arg,
                    format!(
                        "{call}: sendtypes has {} entries for {p} ranks",
                        sendtypes.len()
                    ),
                ));
            }
            for t in &sendtypes[..p] {
                check_type(call, t)?;
            }
            Some(
                (0..p)
                    .map(|j| {
                        (
                            s.wrapping_offset(sdispls[j] as isize) as *mut u8,
                            scs[j],
                            sendtypes[j].clone(),
                        )
                    })
                    .collect(),
            )
        }
    };
    // SAFETY: forwarded caller contract.
    unsafe { alltoall_impl(ctx, send, recv, false) }
}

/// The common body: `send = None` means in place (send what the receive blocks hold).
unsafe fn alltoall_impl(
    mut ctx: Ctx,
    send: Option<Vec<Spec>>,
    recv: Vec<Spec>,
    uniform: bool,
) -> MpiResult<()> {
    let p = ctx.size;
    let me = ctx.rank;
    let call = ctx.call;
    // In place: copy every receive block first (the memory its elements span, so that it
    // travels with its own datatype), and send from those copies.
    let mut keep: Vec<Vec<u8>> = Vec::new();
    let send: Vec<Spec> = match send {
        Some(s) => s,
        None => {
            let mut out = Vec::with_capacity(p);
            for (ptr, c, t) in recv.iter() {
                // SAFETY: the caller's receive blocks are readable.
                let (mut copy, at) = unsafe { t.copy_span(*ptr, *c) };
                out.push((copy.as_mut_ptr().wrapping_add(at), *c, t.clone()));
                keep.push(copy);
            }
            out
        }
    };
    // The automatic choice must be the same on every rank: it may depend on the block
    // size only when all blocks are equal (alltoall); the v/w forms use placement alone.
    let block = recv[0].1 * recv[0].2.size();
    let hier = ctx.is_hierarchical()?;
    // Across sites: short blocks through the sites' masters (one message per pair of
    // sites), blocks of XSIZE or more directly (IMPI's crossover; per block for the v/w
    // forms, see `impi_v`).
    let sites = if p > 1 {
        crate::impi::sites(&ctx)?
    } else {
        None
    };
    // The latency-aware mode (collectives/src/wan.rs) sends every pair directly: one step,
    // where the masters' algorithm adds a gather and a scatter inside each site.
    let wan_direct = sites.is_some() && crate::wan::mode() == crate::wan::Mode::Wan;
    let alg = choose(Coll::Alltoall, || {
        if sites.is_some() && !wan_direct && (!uniform || block < crate::impi::xsize()) {
            "sites"
        } else if sites.is_some() {
            "linear"
        } else if uniform && block <= 256 && p >= 8 {
            "bruck"
        } else if hier {
            "two_level_ring"
        } else if !uniform || block <= 1024 {
            "linear"
        } else {
            "pairwise"
        }
    });
    if let (Some(h), "sites", false) = (&sites, alg, uniform) {
        record("sites");
        // SAFETY: forwarded caller contract (in place: `send` points into `keep`).
        let r = unsafe { crate::impi_v::alltoallv(&ctx, h, &send, &recv) };
        drop(keep);
        return r;
    }
    if let (Some(h), "sites", true) = (&sites, alg, uniform) {
        record("sites");
        // SAFETY: forwarded caller contract (in place: `send` points into `keep`).
        let r = unsafe { crate::impi::alltoall(&ctx, h, &send, &recv, block) };
        drop(keep);
        return r;
    }
    if alg == "bruck" && uniform && p > 1 {
        record("bruck");
        let r = bruck(&ctx, &send, &recv, block);
        drop(keep);
        return r;
    }
    let phases = match alg {
        "two_level_ring" => {
            let nodes = ctx.nodes()?;
            record("two_level_ring");
            two_level_phases(&nodes, me)
        }
        "linear" => {
            record("linear");
            linear_phases(p, me)
        }
        _ => {
            record("pairwise");
            pairwise_phases(p, me)
        }
    };
    // The local block is copied while the first phase with transfers is in flight.
    let mut self_copy = false;
    for (dests, srcs) in phases {
        let mut reqs = Vec::new();
        for &s in &srcs {
            if s != me {
                let (ptr, c, t) = &recv[s];
                // SAFETY: receive block s is writable until the waitall.
                reqs.push(unsafe { ctx.irecv_typed(*ptr, *c, t, s, tag::ALLTOALL)? });
            }
        }
        for &d in &dests {
            if d == me {
                self_copy = true;
            } else {
                let (ptr, c, t) = &send[d];
                // SAFETY: send block d is readable until the waitall.
                reqs.push(unsafe { ctx.isend_typed(*ptr, *c, t, d, tag::ALLTOALL)? });
            }
        }
        if self_copy && (!reqs.is_empty() || p == 1) {
            self_copy = false;
            let (sp, sc, st) = &send[me];
            let (rp, rc, rt) = &recv[me];
            // SAFETY: the caller's own blocks (in place: from our packed copy); no
            // transfer touches them.
            unsafe { copy_typed(call, *sp, *sc, st, *rp, *rc, rt)? };
        }
        ctx.waitall(&mut reqs)?;
    }
    if self_copy {
        let (sp, sc, st) = &send[me];
        let (rp, rc, rt) = &recv[me];
        // SAFETY: as above.
        unsafe { copy_typed(call, *sp, *sc, st, *rp, *rc, rt)? };
    }
    drop(keep);
    Ok(())
}

/// Bruck's all-to-all for equal blocks of `b` bytes: rotate, log2(p) rounds of sending
/// the blocks whose index has bit k set to rank + k, rotate back.
fn bruck(ctx: &Ctx, send: &[Spec], recv: &[Spec], b: usize) -> MpiResult<()> {
    let p = ctx.size;
    let me = ctx.rank;
    let mut t = vec![0u8; p * b];
    for j in 0..p {
        let (ptr, c, ty) = &send[(me + j) % p];
        // SAFETY: send blocks are readable; the slice is inside t.
        unsafe { ty.pack_range(*ptr, *c, 0, &mut t[j * b..(j + 1) * b]) };
    }
    let mut k = 1;
    let mut sbuf = Vec::new();
    let mut rbuf = Vec::new();
    while k < p {
        let idx: Vec<usize> = (0..p).filter(|j| j & k != 0).collect();
        sbuf.clear();
        for &j in &idx {
            sbuf.extend_from_slice(&t[j * b..(j + 1) * b]);
        }
        rbuf.resize(sbuf.len(), 0);
        // SAFETY: our own buffers, alive across the blocking call.
        unsafe {
            ctx.sendrecv(
                sbuf.as_ptr(),
                sbuf.len(),
                (me + k) % p,
                rbuf.as_mut_ptr(),
                rbuf.len(),
                (me + p - k) % p,
                tag::ALLTOALL + 1,
            )?
        };
        for (n, &j) in idx.iter().enumerate() {
            t[j * b..(j + 1) * b].copy_from_slice(&rbuf[n * b..(n + 1) * b]);
        }
        k <<= 1;
    }
    for j in 0..p {
        let (ptr, c, ty) = &recv[(me + p - j) % p];
        // SAFETY: receive blocks are writable.
        unsafe { ty.unpack_range(*ptr, *c, 0, &t[j * b..(j + 1) * b]) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_complete(nodes: &[u32], phases_of: impl Fn(usize) -> Phases) {
        // Every (src, dst) pair appears exactly once on both sides.
        let p = nodes.len();
        let mut sent = vec![vec![0; p]; p];
        let mut recvd = vec![vec![0; p]; p];
        for r in 0..p {
            for (d, s) in phases_of(r) {
                for x in d {
                    sent[r][x] += 1;
                }
                for x in s {
                    recvd[x][r] += 1;
                }
            }
        }
        assert!(
            sent.iter().flatten().all(|&c| c == 1),
            "{nodes:?}: sends {sent:?}"
        );
        assert_eq!(sent, recvd, "{nodes:?}");
        // Phase t of the sender matches phase t of the receiver.
        for r in 0..p {
            for (t, (d, _)) in phases_of(r).into_iter().enumerate() {
                for x in d {
                    assert!(
                        phases_of(x)[t].1.contains(&r),
                        "{nodes:?}: {r}->{x} phase {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn two_level_ring_one_destination_node_per_phase() {
        for nodes in [
            vec![0, 0, 1, 1, 2, 2, 3, 3],
            vec![0, 0, 0, 1, 1, 1, 2, 2, 2],
            vec![0, 1, 0, 1, 2],
            vec![5, 5, 5, 5],
            vec![0],
            vec![0, 0, 1, 1, 1, 2],
        ] {
            let s = two_level_ring_schedule(&nodes);
            for phase in &s {
                for dests in phase {
                    assert_eq!(dests.len(), 1, "{nodes:?}: {s:?}");
                }
            }
            check_complete(&nodes, |r| two_level_phases(&nodes, r));
            check_complete(&nodes, |r| pairwise_phases(nodes.len(), r));
        }
        // The plain ring under 4 nodes x 2 ranks talks to two nodes in odd phases.
        let nodes = [0, 0, 1, 1, 2, 2, 3, 3];
        let plain = plain_ring_schedule(&nodes);
        assert!(plain.iter().any(|ph| ph.iter().any(|d| d.len() == 2)));
        // Rotation inside a phase: in sub-step u, the two nodes' cores are paired off.
        let ph = two_level_phases(&nodes, 2);
        // Recording: names round-trip through the index.
        record("linear");
        assert_eq!(last_alltoall_algorithm(), Some("linear"));
        record("two_level_ring");
        assert_eq!(last_alltoall_algorithm(), Some("two_level_ring"));
        assert_eq!(ph[1].0, vec![4, 5]);
        assert_eq!(two_level_phases(&nodes, 3)[1].0, vec![5, 4]);
    }
}
