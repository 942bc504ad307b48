//! MPI_Bcast: binomial tree, scatter + ring allgather (van de Geijn), pipelined chain,
//! and hierarchical (root to the node leaders, then each leader inside its node); on one
//! node, small messages through the shared-memory area of `shmcoll.rs`.

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, MpiResult, Runtime};

use crate::select::{choose, Coll};
use crate::util::{check_buf, check_count, check_root, check_type, tag, Ctx, Hier, Packed, Team};

/// Segment size of the pipelined chain.
const CHAIN_SEGMENT: usize = 64 * 1024;

/// `MPI_Bcast`.
///
/// # Safety
/// `buf` must hold (root) or have room for (others) `count` elements of `dtype`.
pub unsafe fn bcast(
    rt: &Runtime,
    buf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<()> {
    // The shared-memory fast path first (an intercommunicator never has an area: no
    // engine lock here), for arguments that pass the checks below (anything else goes
    // the ordinary way, which reports the error).
    if count > 0 && dtype.is_committed() && (!buf.is_null() || dtype.true_lb() != 0) {
        let bytes = count as usize * dtype.size();
        if bytes > 0 {
            if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Bcast, bytes)? {
                if root >= 0 && (root as usize) < node.size() {
                    // SAFETY: forwarded caller contract; the root is valid.
                    return unsafe { node.bcast(rt, buf, count as usize, dtype, root as usize) };
                }
            }
        }
    }
    if crate::inter::is_inter(rt, "MPI_Bcast", comm)? {
        return unsafe { crate::inter::ibcast(rt, "MPI_Bcast", buf, count, dtype, root, comm) }?
            .wait(rt);
    }
    let call = "MPI_Bcast";
    let mut ctx = Ctx::new(rt, comm, call)?;
    let count = check_count(call, count)?;
    check_type(call, dtype)?;
    let root = check_root(call, root, ctx.size)?;
    check_buf(call, "buffer", buf, count, dtype)?;
    let bytes = count * dtype.size();
    if ctx.size == 1 {
        return Ok(());
    }
    if let Some(sites) = crate::wan::sites(&ctx)? {
        // SAFETY: forwarded caller contract.
        return unsafe { crate::wan::bcast(&ctx, &sites, buf, count, dtype, root) };
    }
    if let Some(sites) = crate::impi::sites(&ctx)? {
        // SAFETY: forwarded caller contract.
        return unsafe { crate::impi::bcast(&ctx, &sites, buf, count, dtype, root) };
    }
    if bytes == 0 {
        return Ok(());
    }
    let hier = ctx.is_hierarchical()?;
    let p = ctx.size;
    let alg = choose(Coll::Bcast, || {
        if hier && p > 2 {
            "hierarchical"
        } else if bytes < 12 * 1024 || p <= 3 {
            "binomial"
        } else if bytes >= (1 << 20) && p <= 4 {
            "chain"
        } else {
            "scatter_allgather"
        }
    });
    // SAFETY: caller contract; the view is written back below.
    let view = unsafe { Packed::new(buf, count, dtype, ctx.rank == root) };
    let team = Team::all(&ctx);
    match alg {
        "scatter_allgather" => scatter_allgather(&ctx, &team, view.ptr, bytes, root)?,
        "chain" => chain(&ctx, &team, view.ptr, bytes, root)?,
        "hierarchical" => {
            let nodes = ctx.nodes()?;
            hierarchical(&ctx, &Hier::new(&nodes, ctx.rank), view.ptr, bytes, root)?
        }
        _ => binomial(&ctx, &team, view.ptr, bytes, root, tag::BCAST)?,
    }
    if ctx.rank != root {
        // SAFETY: caller contract.
        unsafe { view.finish() };
    }
    Ok(())
}

/// Binomial-tree broadcast of `len` bytes at `buf` over a team from member `root`.
pub(crate) fn binomial(
    ctx: &Ctx,
    team: &Team,
    buf: *mut u8,
    len: usize,
    root: usize,
    tag: i32,
) -> MpiResult<()> {
    let n = team.len();
    if n <= 1 {
        return Ok(());
    }
    let v = (team.me + n - root) % n;
    let mut mask = 1;
    while mask < n {
        if v & mask != 0 {
            let src = team.ranks[(v - mask + root) % n];
            // SAFETY: `buf` has `len` writable bytes (caller of the collective).
            unsafe { ctx.recv(buf, len, src, tag)? };
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let mut reqs = Vec::new();
    while mask > 0 {
        if v + mask < n {
            let dst = team.ranks[(v + mask + root) % n];
            // SAFETY: `buf` stays valid and unmodified until the waitall below.
            reqs.push(unsafe { ctx.isend(buf, len, dst, tag)? });
        }
        mask >>= 1;
    }
    ctx.waitall(&mut reqs)
}

/// van de Geijn: binomial scatter of `n` chunks, then a ring allgather of the chunks.
fn scatter_allgather(
    ctx: &Ctx,
    team: &Team,
    buf: *mut u8,
    len: usize,
    root: usize,
) -> MpiResult<()> {
    let n = team.len();
    let v = (team.me + n - root) % n;
    let chunk = len.div_ceil(n);
    let range = |first: usize, cnt: usize| -> (usize, usize) {
        let a = (first * chunk).min(len);
        let b = ((first + cnt) * chunk).min(len);
        (a, b - a)
    };
    let real = |vr: usize| team.ranks[(vr + root) % n];
    // Scatter: vrank v receives chunks [v, v + subtree) from its parent.
    let mut mask = 1;
    while mask < n {
        if v & mask != 0 {
            let (a, l) = range(v, mask.min(n - v));
            // SAFETY: [a, a+l) lies inside the caller's `len` bytes.
            unsafe { ctx.recv(buf.add(a), l, real(v - mask), tag::BCAST + 1)? };
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if v + mask < n {
            let (a, l) = range(v + mask, mask.min(n - v - mask));
            // SAFETY: as above; blocking send.
            unsafe { ctx.send(buf.add(a), l, real(v + mask), tag::BCAST + 1)? };
        }
        mask >>= 1;
    }
    // Ring allgather of chunk i (held by vrank i).
    let right = real((v + 1) % n);
    let left = real((v + n - 1) % n);
    for s in 0..n - 1 {
        let send_c = (v + n - s) % n;
        let recv_c = (v + 2 * n - s - 1) % n;
        let (sa, sl) = range(send_c, 1);
        let (ra, rl) = range(recv_c, 1);
        // SAFETY: distinct chunks of the caller's buffer.
        unsafe {
            ctx.sendrecv(
                buf.add(sa),
                sl,
                right,
                buf.add(ra),
                rl,
                left,
                tag::BCAST + 2,
            )?
        };
    }
    Ok(())
}

/// Pipelined chain in root-relative order, in segments.
fn chain(ctx: &Ctx, team: &Team, buf: *mut u8, len: usize, root: usize) -> MpiResult<()> {
    let n = team.len();
    let v = (team.me + n - root) % n;
    let prev = (v > 0).then(|| team.ranks[(v - 1 + root) % n]);
    let next = (v + 1 < n).then(|| team.ranks[(v + 1 + root) % n]);
    let mut reqs = Vec::new();
    let mut off = 0;
    while off < len {
        let l = CHAIN_SEGMENT.min(len - off);
        // SAFETY: segments of the caller's buffer; sends complete before we return.
        unsafe {
            if let Some(p) = prev {
                ctx.recv(buf.add(off), l, p, tag::BCAST + 3)?;
            }
            if let Some(nx) = next {
                reqs.push(ctx.isend(buf.add(off), l, nx, tag::BCAST + 3)?);
            }
        }
        off += l;
    }
    ctx.waitall(&mut reqs)
}

/// Root to the node leaders (the root stands in for its node's leader), then inside
/// every node from its leader.
fn hierarchical(ctx: &Ctx, h: &Hier, buf: *mut u8, len: usize, root: usize) -> MpiResult<()> {
    let root_node = h.node_of[root];
    // The node's representative: the root on its node, the leader elsewhere.
    let rep = |k: usize| if k == root_node { root } else { h.leaders[k] };
    let reps: Vec<usize> = (0..h.members.len()).map(rep).collect();
    if ctx.rank == reps[h.my_node] {
        let team = Team {
            ranks: reps.clone(),
            me: h.my_node,
        };
        binomial(ctx, &team, buf, len, root_node, tag::BCAST + 4)?;
    }
    let local = &h.members[h.my_node];
    let team = Team {
        ranks: local.clone(),
        me: h.my_local,
    };
    let lroot = local
        .iter()
        .position(|&r| r == reps[h.my_node])
        .expect("rep is local");
    binomial(ctx, &team, buf, len, lroot, tag::BCAST + 5)
}
