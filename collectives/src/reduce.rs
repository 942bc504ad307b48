//! Reductions: MPI_Reduce, MPI_Allreduce, MPI_Reduce_scatter(_block), MPI_Scan and
//! MPI_Exscan.
//!
//! Algorithms work on packed streams (the user's buffer when the type is contiguous).
//! Non-commutative ops always combine the contribution of lower ranks on the left:
//! binomial trees are then rooted at rank 0 (the result is forwarded to the root),
//! recursive doubling and Rabenseifner pair aligned rank groups, and the ring and
//! node-first (hierarchical, when nodes are not consecutive rank ranges) algorithms,
//! which would reorder, fall back to an order-keeping one.

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime};

use crate::op::Op;
use crate::select::{choose, Coll};
use crate::util::{
    check_buf, check_count, check_counts, check_root, check_type, err, pof2_floor, tag, Ctx, Hier,
    Packed, SendBuf, Team,
};

/// What every algorithm needs to know about the data.
struct Red<'o> {
    dtype: TypeRef,
    esize: usize,
    op: &'o Op,
}

impl Red<'_> {
    /// `dst = src op dst` (src holds lower ranks) over `n` elements.
    ///
    /// # Safety
    /// Both ranges hold `n` packed elements and do not overlap.
    unsafe fn low_into(&self, src: *const u8, dst: *mut u8, n: usize) {
        // SAFETY: forwarded.
        unsafe { self.op.apply_packed(src, dst, n, &self.dtype) }
    }
    /// `dst = dst op src` (dst holds lower ranks).
    ///
    /// # Safety
    /// As [`Red::low_into`].
    unsafe fn high_into(&self, src: *const u8, dst: *mut u8, n: usize) {
        // SAFETY: forwarded.
        unsafe { self.op.combine_left(dst, src, n, &self.dtype) }
    }
}

/// The shared-memory area for a reduction whose count, type and op pass the checks of
/// [`common_checks`] (the ordinary path reports anything else), and the count.
fn shm_args(
    rt: &Runtime,
    comm: CommId,
    family: Coll,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<Option<(crate::shmcoll::NodeRef, usize)>> {
    if count <= 0 || !dtype.is_committed() || op.check("", dtype).is_err() {
        return Ok(None);
    }
    let bytes = count as usize * dtype.size();
    if bytes == 0 {
        return Ok(None);
    }
    Ok(crate::shmcoll::area(rt, comm, family, bytes)?.map(|n| (n, count as usize)))
}

pub(crate) fn common_checks(call: &str, count: i64, dtype: &TypeRef, op: &Op) -> MpiResult<usize> {
    let count = check_count(call, count)?;
    check_type(call, dtype)?;
    op.check(call, dtype)?;
    Ok(count)
}

/// Copy the packed stream of `count` elements at `src` into `dst` (packed).
///
/// # Safety
/// Source type map readable; `dst` has `count * size` writable bytes.
unsafe fn pack_into(src: *const u8, count: usize, dtype: &TypeRef, dst: *mut u8) {
    let n = count * dtype.size();
    if n == 0 {
        return;
    }
    // SAFETY: caller contract.
    unsafe { dtype.pack_range(src, count, 0, std::slice::from_raw_parts_mut(dst, n)) }
}

/// `MPI_Reduce`.
///
/// # Safety
/// `count` elements of `dtype` readable at `sendbuf` (unless in place at the root); at
/// the root room for them at `recvbuf` (which also holds the input when in place).
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    root: i32,
    comm: CommId,
) -> MpiResult<()> {
    // The shared-memory fast path first (an intercommunicator never has an area): for
    // arguments that pass the checks below; anything else goes the ordinary way.
    if let Some((node, n)) = shm_args(rt, comm, Coll::Reduce, count, dtype, op)? {
        let ok_buf = |b: *const u8| !b.is_null() || dtype.true_lb() != 0;
        if root >= 0 && (root as usize) < node.size() {
            let at_root = node.rank() == root as usize;
            let fine = match sendbuf {
                SendBuf::InPlace => at_root && ok_buf(recvbuf),
                SendBuf::Ptr(s) => ok_buf(s) && (!at_root || ok_buf(recvbuf)),
            };
            if fine {
                // SAFETY: forwarded caller contract; arguments checked as below.
                return unsafe { node.reduce(rt, sendbuf, recvbuf, n, dtype, op, root as usize) };
            }
        }
    }
    if crate::inter::is_inter(rt, "MPI_Reduce", comm)? {
        return unsafe {
            crate::inter::ireduce(
                rt,
                "MPI_Reduce",
                sendbuf,
                recvbuf,
                count,
                dtype,
                op,
                root,
                comm,
            )
        }?
        .wait(rt);
    }
    let call = "MPI_Reduce";
    let mut ctx = Ctx::new(rt, comm, call)?;
    let count = common_checks(call, count, dtype, op)?;
    let root = check_root(call, root, ctx.size)?;
    let is_root = ctx.rank == root;
    let bytes = count * dtype.size();
    let red = Red {
        dtype: dtype.clone(),
        esize: dtype.size(),
        op,
    };
    // Working stream: the root's receive buffer, elsewhere a copy of the send buffer.
    let mut own = Vec::new();
    let view = match (sendbuf, is_root) {
        (SendBuf::InPlace, false) => {
            return Err(err(
                ErrorClass::Buffer,
                format!("{call}: MPI_IN_PLACE is only allowed at the root"),
            ));
        }
        (SendBuf::InPlace, true) => {
            check_buf(call, "recvbuf", recvbuf, count, dtype)?;
            // SAFETY: the root's receive buffer holds the input and takes the result.
            Some(unsafe { Packed::new(recvbuf, count, dtype, true) })
        }
        (SendBuf::Ptr(s), true) => {
            check_buf(call, "recvbuf", recvbuf, count, dtype)?;
            // SAFETY: as above; then the input is copied in from the send buffer.
            let v = unsafe { Packed::new(recvbuf, count, dtype, false) };
            // SAFETY: send buffer readable, view writable for `bytes`.
            unsafe { pack_into(s, count, dtype, v.ptr) };
            Some(v)
        }
        (SendBuf::Ptr(s), false) => {
            own = vec![0u8; bytes];
            // SAFETY: send buffer readable.
            unsafe { pack_into(s, count, dtype, own.as_mut_ptr()) };
            None
        }
    };
    let w = match &view {
        Some(v) => v.ptr,
        None => own.as_mut_ptr(),
    };
    let sites = if ctx.size > 1 {
        crate::impi::sites(&ctx)?
    } else {
        None
    };
    let wan_done = match crate::wan::sites(&ctx)? {
        // SAFETY: `w` holds this rank's packed input (the root's: its receive view).
        Some(h) => unsafe { crate::wan::reduce(&ctx, &h, w, count, dtype, op, root)? },
        None => false,
    };
    if wan_done {
    } else if let Some(h) = sites {
        // SAFETY: `w` holds this rank's packed input (the root's: its receive view).
        unsafe { crate::impi::reduce(&ctx, &h, w, count, dtype, op, root)? };
    } else if ctx.size > 1 && bytes > 0 {
        let hier = ctx.is_hierarchical()?;
        let p = ctx.size;
        let alg = choose(Coll::Reduce, || {
            if hier {
                "hierarchical"
            } else if bytes >= 256 * 1024 && count >= pof2_floor(p) {
                "rabenseifner"
            } else {
                "binomial"
            }
        });
        let team = Team::all(&ctx);
        match alg {
            "rabenseifner" => {
                rabenseifner(&ctx, &team, &red, w, count, Some(root), tag::REDUCE + 8)?
            }
            "hierarchical" => {
                let nodes = ctx.nodes()?;
                let h = Hier::new(&nodes, ctx.rank);
                if op.is_commutative() || h.rank_ordered() {
                    let local = h.local_team();
                    reduce_binomial(&ctx, &local, &red, w, count, 0, tag::REDUCE + 16)?;
                    let root_node = h.node_of[root];
                    if h.is_leader() {
                        reduce_binomial(
                            &ctx,
                            &h.leader_team(),
                            &red,
                            w,
                            count,
                            root_node,
                            tag::REDUCE + 20,
                        )?;
                    }
                    let rl = h.leaders[root_node];
                    if rl != root {
                        // SAFETY: `w` has `bytes` bytes at the root's node leader and at the root.
                        unsafe {
                            if ctx.rank == rl {
                                ctx.send(w, bytes, root, tag::REDUCE + 24)?;
                            } else if is_root {
                                ctx.recv(w, bytes, rl, tag::REDUCE + 24)?;
                            }
                        }
                    }
                } else {
                    reduce_binomial(&ctx, &team, &red, w, count, root, tag::REDUCE)?;
                }
            }
            _ => reduce_binomial(&ctx, &team, &red, w, count, root, tag::REDUCE)?,
        }
    }
    if let Some(v) = view {
        // SAFETY: the root's receive buffer is writable.
        unsafe { v.finish() };
    }
    Ok(())
}

/// Binomial-tree reduction of packed streams over a team to member `root` (for the IMPI
/// algorithms' phase inside a site).
#[allow(clippy::too_many_arguments)]
pub(crate) fn team_reduce(
    ctx: &Ctx,
    team: &Team,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
    root: usize,
    tag: i32,
) -> MpiResult<()> {
    let red = Red {
        dtype: dtype.clone(),
        esize: dtype.size(),
        op,
    };
    reduce_binomial(ctx, team, &red, w, count, root, tag)
}

/// Binomial-tree reduction over a team to member `root`; the result is left in the
/// root's `w` (other members' `w` are clobbered). Non-commutative: tree rooted at member
/// 0 (team order must be rank order), then forwarded.
fn reduce_binomial(
    ctx: &Ctx,
    team: &Team,
    red: &Red,
    w: *mut u8,
    count: usize,
    root: usize,
    tag: i32,
) -> MpiResult<()> {
    let n = team.len();
    if n <= 1 {
        return Ok(());
    }
    let bytes = count * red.esize;
    let comm = red.op.is_commutative();
    let troot = if comm { root } else { 0 };
    let v = (team.me + n - troot) % n;
    let real = |vr: usize| team.ranks[(vr + troot) % n];
    let mut tmp = vec![0u8; bytes];
    let mut mask = 1;
    while mask < n {
        if v & mask == 0 {
            let child = v | mask;
            if child < n {
                // SAFETY: tmp and w hold `bytes` bytes each and are disjoint.
                unsafe {
                    ctx.recv(tmp.as_mut_ptr(), bytes, real(child), tag)?;
                    red.high_into(tmp.as_ptr(), w, count);
                }
            }
        } else {
            // SAFETY: w holds `bytes` bytes.
            unsafe { ctx.send(w, bytes, real(v - mask), tag)? };
            break;
        }
        mask <<= 1;
    }
    if troot != root {
        // SAFETY: as above.
        unsafe {
            if team.me == troot {
                ctx.send(w, bytes, team.ranks[root], tag + 1)?;
            } else if team.me == root {
                ctx.recv(w, bytes, team.ranks[troot], tag + 1)?;
            }
        }
    }
    Ok(())
}

/// Fold a team to a power of two (the first `2 * rem` members pair up, the odd one of
/// each pair keeps the combined value). Returns (pof2, rem, new rank or None).
fn fold(
    ctx: &Ctx,
    team: &Team,
    red: &Red,
    w: *mut u8,
    count: usize,
    tag: i32,
) -> MpiResult<(usize, usize, Option<usize>)> {
    let n = team.len();
    let pof2 = pof2_floor(n);
    let rem = n - pof2;
    let me = team.me;
    let bytes = count * red.esize;
    if me < 2 * rem {
        if me.is_multiple_of(2) {
            // SAFETY: w holds `bytes` bytes.
            unsafe { ctx.send(w, bytes, team.ranks[me + 1], tag)? };
            Ok((pof2, rem, None))
        } else {
            let mut tmp = vec![0u8; bytes];
            // SAFETY: tmp is ours; w holds `bytes` bytes.
            unsafe {
                ctx.recv(tmp.as_mut_ptr(), bytes, team.ranks[me - 1], tag)?;
                red.low_into(tmp.as_ptr(), w, count);
            }
            Ok((pof2, rem, Some(me / 2)))
        }
    } else {
        Ok((pof2, rem, Some(me - rem)))
    }
}

/// Undo [`fold`]: the odd members hand the result back to their even partners.
fn unfold(ctx: &Ctx, team: &Team, rem: usize, w: *mut u8, bytes: usize, tag: i32) -> MpiResult<()> {
    let me = team.me;
    if me < 2 * rem {
        // SAFETY: w holds `bytes` bytes.
        unsafe {
            if me % 2 == 1 {
                ctx.send(w, bytes, team.ranks[me - 1], tag)?;
            } else {
                ctx.recv(w, bytes, team.ranks[me + 1], tag)?;
            }
        }
    }
    Ok(())
}

fn real_of(nr: usize, rem: usize) -> usize {
    if nr < rem {
        nr * 2 + 1
    } else {
        nr + rem
    }
}

/// Recursive-doubling allreduce over a team (team order = rank order).
fn allreduce_rd(
    ctx: &Ctx,
    team: &Team,
    red: &Red,
    w: *mut u8,
    count: usize,
    tag: i32,
) -> MpiResult<()> {
    if team.len() <= 1 {
        return Ok(());
    }
    let bytes = count * red.esize;
    let (pof2, rem, nr) = fold(ctx, team, red, w, count, tag)?;
    if let Some(nr) = nr {
        let mut tmp = vec![0u8; bytes];
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let dst = team.ranks[real_of(nd, rem)];
            // SAFETY: w and tmp hold `bytes` bytes each, disjoint.
            unsafe {
                ctx.sendrecv(w, bytes, dst, tmp.as_mut_ptr(), bytes, dst, tag + 1)?;
                if nd < nr {
                    red.low_into(tmp.as_ptr(), w, count);
                } else {
                    red.high_into(tmp.as_ptr(), w, count);
                }
            }
            mask <<= 1;
        }
    }
    unfold(ctx, team, rem, w, bytes, tag + 2)
}

/// Rabenseifner: fold to a power of two, reduce-scatter by recursive halving (partners
/// at distance 1, 2, 4... so that combined groups stay rank-contiguous), then either an
/// allgather by recursive doubling (`root = None`) or a gather of the pieces to `root`.
fn rabenseifner(
    ctx: &Ctx,
    team: &Team,
    red: &Red,
    w: *mut u8,
    count: usize,
    root: Option<usize>,
    tag: i32,
) -> MpiResult<()> {
    let n = team.len();
    if n <= 1 {
        return Ok(());
    }
    let es = red.esize;
    let bytes = count * es;
    let (pof2, rem, nr) = fold(ctx, team, red, w, count, tag)?;
    let cnt: Vec<usize> = (0..pof2)
        .map(|i| count / pof2 + usize::from(i < count % pof2))
        .collect();
    let mut disp = vec![0usize; pof2 + 1];
    for i in 0..pof2 {
        disp[i + 1] = disp[i] + cnt[i];
    }
    // The chunk range each new rank ends with, and the steps that led there.
    let halve = |nr: usize| -> Vec<(usize, usize)> {
        let (mut lo, mut hi) = (0, pof2);
        let mut ranges = vec![(lo, hi)];
        let mut mask = 1;
        while mask < pof2 {
            let mid = (lo + hi) / 2;
            if nr & mask == 0 {
                hi = mid;
            } else {
                lo = mid;
            }
            ranges.push((lo, hi));
            mask <<= 1;
        }
        ranges
    };
    if let Some(nr) = nr {
        let ranges = halve(nr);
        let mut tmp = vec![0u8; bytes.div_ceil(2).max(es)];
        let mut mask = 1;
        let mut step = 0;
        while mask < pof2 {
            let (plo, phi) = ranges[step];
            let (klo, khi) = ranges[step + 1];
            let (slo, shi) = if klo == plo { (khi, phi) } else { (plo, klo) };
            let nd = nr ^ mask;
            let dst = team.ranks[real_of(nd, rem)];
            let kn = disp[khi] - disp[klo];
            if tmp.len() < kn * es {
                tmp.resize(kn * es, 0);
            }
            // SAFETY: the send and keep ranges are disjoint parts of w; tmp is ours.
            unsafe {
                ctx.sendrecv(
                    w.add(disp[slo] * es),
                    (disp[shi] - disp[slo]) * es,
                    dst,
                    tmp.as_mut_ptr(),
                    kn * es,
                    dst,
                    tag + 1,
                )?;
                let kp = w.add(disp[klo] * es);
                if nd < nr {
                    red.low_into(tmp.as_ptr(), kp, kn);
                } else {
                    red.high_into(tmp.as_ptr(), kp, kn);
                }
            }
            mask <<= 1;
            step += 1;
        }
        if root.is_none() {
            // Allgather: retrace the halving steps backwards.
            while step > 0 {
                mask >>= 1;
                step -= 1;
                let (plo, phi) = ranges[step];
                let (klo, khi) = ranges[step + 1];
                let (olo, ohi) = if klo == plo { (khi, phi) } else { (plo, klo) };
                let dst = team.ranks[real_of(nr ^ mask, rem)];
                // SAFETY: disjoint ranges of w.
                unsafe {
                    ctx.sendrecv(
                        w.add(disp[klo] * es),
                        (disp[khi] - disp[klo]) * es,
                        dst,
                        w.add(disp[olo] * es),
                        (disp[ohi] - disp[olo]) * es,
                        dst,
                        tag + 2,
                    )?
                };
            }
        }
    }
    match root {
        None => unfold(ctx, team, rem, w, bytes, tag + 3),
        Some(root) => {
            // Gather the pieces: new rank k holds chunk range halve(k).last().
            let mut reqs = Vec::new();
            if team.me == root {
                for k in 0..pof2 {
                    let src = real_of(k, rem);
                    if src != root {
                        let (lo, hi) = *halve(k).last().expect("ranges");
                        // SAFETY: chunk ranges of w, disjoint across k.
                        reqs.push(unsafe {
                            ctx.irecv(
                                w.add(disp[lo] * es),
                                (disp[hi] - disp[lo]) * es,
                                team.ranks[src],
                                tag + 4,
                            )?
                        });
                    }
                }
            } else if let Some(nr) = nr {
                let (lo, hi) = *halve(nr).last().expect("ranges");
                // SAFETY: our chunk of w, alive until the waitall.
                reqs.push(unsafe {
                    ctx.isend(
                        w.add(disp[lo] * es),
                        (disp[hi] - disp[lo]) * es,
                        team.ranks[root],
                        tag + 4,
                    )?
                });
            }
            ctx.waitall(&mut reqs)
        }
    }
}

/// Ring allreduce (commutative ops): ring reduce-scatter of n chunks, ring allgather.
fn allreduce_ring(
    ctx: &Ctx,
    team: &Team,
    red: &Red,
    w: *mut u8,
    count: usize,
    tag: i32,
) -> MpiResult<()> {
    let n = team.len();
    let es = red.esize;
    let cnt: Vec<usize> = (0..n)
        .map(|i| count / n + usize::from(i < count % n))
        .collect();
    let mut disp = vec![0usize; n + 1];
    for i in 0..n {
        disp[i + 1] = disp[i] + cnt[i];
    }
    let me = team.me;
    let right = team.ranks[(me + 1) % n];
    let left = team.ranks[(me + n - 1) % n];
    let mut tmp = vec![0u8; cnt[0] * es];
    for s in 0..n - 1 {
        let sc = (me + n - s) % n;
        let rc = (me + 2 * n - s - 1) % n;
        // SAFETY: chunk sc of w and tmp (which holds the largest chunk) are disjoint.
        unsafe {
            ctx.sendrecv(
                w.add(disp[sc] * es),
                cnt[sc] * es,
                right,
                tmp.as_mut_ptr(),
                cnt[rc] * es,
                left,
                tag,
            )?;
            red.low_into(tmp.as_ptr(), w.add(disp[rc] * es), cnt[rc]);
        }
    }
    for s in 0..n - 1 {
        let sc = (me + 1 + n - s) % n;
        let rc = (me + n - s) % n;
        // SAFETY: distinct chunks of w.
        unsafe {
            ctx.sendrecv(
                w.add(disp[sc] * es),
                cnt[sc] * es,
                right,
                w.add(disp[rc] * es),
                cnt[rc] * es,
                left,
                tag + 1,
            )?
        };
    }
    Ok(())
}

/// `MPI_Allreduce`.
///
/// # Safety
/// `count` elements of `dtype` readable at `sendbuf` (unless in place) and room for them
/// at `recvbuf`.
pub unsafe fn allreduce(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<()> {
    // The shared-memory fast path first (an intercommunicator never has an area): for
    // arguments that pass the checks below; anything else goes the ordinary way.
    if let Some((node, n)) = shm_args(rt, comm, Coll::Allreduce, count, dtype, op)? {
        let ok_buf = |b: *const u8| !b.is_null() || dtype.true_lb() != 0;
        let fine = ok_buf(recvbuf)
            && match sendbuf {
                SendBuf::InPlace => true,
                SendBuf::Ptr(s) => ok_buf(s),
            };
        if fine {
            // SAFETY: forwarded caller contract; arguments checked as below.
            return unsafe { node.allreduce(rt, sendbuf, recvbuf, n, dtype, op) };
        }
    }
    if crate::inter::is_inter(rt, "MPI_Allreduce", comm)? {
        return unsafe {
            crate::inter::iallreduce(
                rt,
                "MPI_Allreduce",
                sendbuf,
                recvbuf,
                count,
                dtype,
                op,
                comm,
            )
        }?
        .wait(rt);
    }
    let call = "MPI_Allreduce";
    let mut ctx = Ctx::new(rt, comm, call)?;
    let count = common_checks(call, count, dtype, op)?;
    check_buf(call, "recvbuf", recvbuf, count, dtype)?;
    let bytes = count * dtype.size();
    // Small vectors across nodes: the node steps through the nodes' shared-memory areas
    // (`nodesplit.rs`), when the automatic choice or the setting is `hierarchical`.
    if ctx.size > 1
        && bytes > 0
        && bytes <= crate::node_area::SLOT_BYTES
        && ctx.is_hierarchical()?
        && choose(Coll::Allreduce, || "hierarchical") == "hierarchical"
    {
        if let Some(s) = crate::nodesplit::split(&mut ctx)? {
            if op.is_commutative() || s.hier.rank_ordered() {
                if let SendBuf::Ptr(sp) = sendbuf {
                    check_buf(call, "sendbuf", sp, count, dtype)?;
                }
                // SAFETY: forwarded caller contract (buffers checked above).
                return unsafe { split_allreduce(rt, &s, sendbuf, recvbuf, count, dtype, op) };
            }
        }
    }
    // SAFETY: caller contract; written back by finish.
    let view = unsafe { Packed::new(recvbuf, count, dtype, sendbuf == SendBuf::InPlace) };
    if let SendBuf::Ptr(s) = sendbuf {
        check_buf(call, "sendbuf", s, count, dtype)?;
        // SAFETY: send buffer readable; view has `bytes` writable bytes.
        unsafe { pack_into(s, count, dtype, view.ptr) };
    }
    let w = view.ptr;
    let red = Red {
        dtype: dtype.clone(),
        esize: dtype.size(),
        op,
    };
    let p = ctx.size;
    if let Some(h) = crate::wan::sites(&ctx)? {
        // SAFETY: `w` holds this rank's packed input; the receive buffer is writable.
        if unsafe { crate::wan::allreduce(&ctx, &h, w, count, dtype, op)? } {
            // SAFETY: as above.
            unsafe { view.finish() };
            return Ok(());
        }
    }
    if p > 1 {
        if let Some(h) = crate::impi::sites(&ctx)? {
            // As LAM: reduce to rank 0, then bcast from rank 0.
            // SAFETY: `w` holds this rank's packed input; the receive buffer is writable.
            unsafe {
                crate::impi::reduce(&ctx, &h, w, count, dtype, op, 0)?;
                if ctx.rank == 0 {
                    view.finish();
                }
                return crate::impi::bcast(&ctx, &h, recvbuf, count, dtype, 0);
            }
        }
    }
    if p > 1 && bytes > 0 {
        let hier = ctx.is_hierarchical()?;
        let commutative = op.is_commutative();
        let alg = choose(Coll::Allreduce, || {
            if hier {
                "hierarchical"
            } else if bytes <= 16 * 1024 || count < pof2_floor(p) {
                "recursive_doubling"
            } else if commutative && bytes >= (4 << 20) {
                "ring"
            } else {
                "rabenseifner"
            }
        });
        let team = Team::all(&ctx);
        let tg = tag::ALLREDUCE;
        match alg {
            "rabenseifner" => rabenseifner(&ctx, &team, &red, w, count, None, tg + 8)?,
            "ring" if commutative => allreduce_ring(&ctx, &team, &red, w, count, tg + 16)?,
            "ring" => rabenseifner(&ctx, &team, &red, w, count, None, tg + 8)?,
            "binomial" => {
                reduce_binomial(&ctx, &team, &red, w, count, 0, tg + 24)?;
                crate::bcast::binomial(&ctx, &team, w, bytes, 0, tg + 26)?;
            }
            "hierarchical" => {
                let nodes = ctx.nodes()?;
                let h = Hier::new(&nodes, ctx.rank);
                if commutative || h.rank_ordered() {
                    let local = h.local_team();
                    reduce_binomial(&ctx, &local, &red, w, count, 0, tg + 32)?;
                    if h.is_leader() {
                        allreduce_rd(&ctx, &h.leader_team(), &red, w, count, tg + 36)?;
                    }
                    crate::bcast::binomial(&ctx, &local, w, bytes, 0, tg + 40)?;
                } else {
                    allreduce_rd(&ctx, &team, &red, w, count, tg)?;
                }
            }
            _ => allreduce_rd(&ctx, &team, &red, w, count, tg)?,
        }
    }
    // SAFETY: receive buffer writable.
    unsafe { view.finish() };
    Ok(())
}

/// Hierarchical allreduce on a node split: reduce to the leader inside the node (its
/// shared-memory area), allreduce among the leaders, bcast inside the node. In rank order
/// when the nodes hold consecutive ranks in order (the caller checks, for
/// non-commutative ops): the node reduce folds its ranks in order and the leaders'
/// allreduce the nodes in order.
///
/// # Safety
/// As [`allreduce`]; `count` elements of `dtype` at `recvbuf` (and at `sendbuf` unless
/// in place), checked.
unsafe fn split_allreduce(
    rt: &Runtime,
    s: &crate::nodesplit::Split,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<()> {
    let n = count as i64;
    // SAFETY (all three calls): the caller's buffers, checked by it; the leader reduces
    // into its receive buffer, which the bcast then sends from.
    unsafe {
        if let Some(leaders) = s.leaders {
            reduce(rt, sendbuf, recvbuf, n, dtype, op, 0, s.node)?;
            allreduce(rt, SendBuf::InPlace, recvbuf, n, dtype, op, leaders)?;
        } else {
            // In place, a non-leader's input is its receive buffer.
            let input = match sendbuf {
                SendBuf::InPlace => SendBuf::Ptr(recvbuf as *const u8),
                p => p,
            };
            reduce(rt, input, recvbuf, n, dtype, op, 0, s.node)?;
        }
        crate::bcast::bcast(rt, recvbuf, n, dtype, 0, s.node)
    }
}

/// `MPI_Reduce_scatter_block`.
///
/// # Safety
/// `size * recvcount` elements readable at `sendbuf` (in place: at `recvbuf`); room for
/// `recvcount` elements at `recvbuf`.
pub unsafe fn reduce_scatter_block(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    recvcount: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<()> {
    if crate::inter::is_inter(rt, "MPI_Reduce_scatter_block", comm)? {
        return unsafe {
            crate::inter::ireduce_scatter_block(
                rt,
                "MPI_Reduce_scatter_block",
                sendbuf,
                recvbuf,
                recvcount,
                dtype,
                op,
                comm,
            )
        }?
        .wait(rt);
    }
    let call = "MPI_Reduce_scatter_block";
    let ctx = Ctx::new(rt, comm, call)?;
    let rc = common_checks(call, recvcount, dtype, op)?;
    // On one node, when a rank's whole input fits one slot: the shared-memory area.
    let block = rc * dtype.size();
    if ctx.size > 1 && block > 0 {
        let input = match sendbuf {
            SendBuf::InPlace => recvbuf as *const u8,
            SendBuf::Ptr(s) => s,
        };
        check_buf(call, "sendbuf", input, rc * ctx.size, dtype)?;
        check_buf(call, "recvbuf", recvbuf, rc, dtype)?;
        let bytes = ctx.size * block;
        if let Some(node) = crate::shmcoll::area(rt, comm, Coll::ReduceScatter, bytes)? {
            // SAFETY: forwarded caller contract (checked above).
            return unsafe { node.reduce_scatter_block(rt, input, recvbuf, rc, dtype, op) };
        }
    }
    let counts = vec![rc; ctx.size];
    // Across sites (latency-aware mode): small totals by one wide-area allreduce.
    // SAFETY: forwarded caller contract.
    if ctx.size > 1
        && crate::impi::spans_sites(&ctx)?
        && unsafe {
            crate::wan::reduce_scatter(rt, comm, ctx.rank, sendbuf, recvbuf, &counts, dtype, op)?
        }
    {
        return Ok(());
    }
    // SAFETY: forwarded.
    unsafe { reduce_scatter_impl(ctx, sendbuf, recvbuf, &counts, dtype, op) }
}

/// `MPI_Reduce_scatter`.
///
/// # Safety
/// `sum(recvcounts)` elements readable at `sendbuf` (in place: at `recvbuf`); room for
/// `recvcounts[rank]` elements at `recvbuf`.
pub unsafe fn reduce_scatter(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<()> {
    // On one node, when a rank's whole input fits a slot (all ranks know all counts):
    // the shared-memory area; other arguments go the ordinary way.
    let total = recvcounts.iter().map(|&c| c.max(0) as usize).sum::<usize>();
    let bytes = total * dtype.size();
    if recvcounts.iter().all(|&c| c >= 0)
        && bytes > 0
        && dtype.is_committed()
        && op.check("", dtype).is_ok()
    {
        if let Some(node) = crate::shmcoll::area(rt, comm, Coll::ReduceScatter, bytes)? {
            let (me, p) = (node.rank(), node.size());
            let input = match sendbuf {
                SendBuf::InPlace => recvbuf as *const u8,
                SendBuf::Ptr(s) => s,
            };
            let ok_buf = |b: *const u8| !b.is_null() || dtype.true_lb() != 0;
            if recvcounts.len() == p && ok_buf(input) && (recvcounts[me] == 0 || ok_buf(recvbuf)) {
                let counts: Vec<usize> = recvcounts.iter().map(|&c| c as usize).collect();
                // SAFETY: forwarded caller contract (checked above).
                return unsafe { node.reduce_scatter(rt, input, recvbuf, &counts, dtype, op) };
            }
        }
    }
    if crate::inter::is_inter(rt, "MPI_Reduce_scatter", comm)? {
        return unsafe {
            crate::inter::ireduce_scatter(
                rt,
                "MPI_Reduce_scatter",
                sendbuf,
                recvbuf,
                recvcounts,
                dtype,
                op,
                comm,
            )
        }?
        .wait(rt);
    }
    let call = "MPI_Reduce_scatter";
    let ctx = Ctx::new(rt, comm, call)?;
    check_type(call, dtype)?;
    op.check(call, dtype)?;
    let counts = check_counts(call, "recvcounts", recvcounts, ctx.size)?;
    if ctx.size > 1 && crate::impi::spans_sites(&ctx)? {
        // Across sites: the IMPI reduce to rank 0, then scatterv from rank 0.
        let total: usize = counts.iter().sum();
        let src = match sendbuf {
            SendBuf::InPlace => recvbuf as *const u8,
            SendBuf::Ptr(s) => s,
        };
        check_buf(call, "sendbuf", src, total, dtype)?;
        let mut whole = crate::op::Scratch::new(total, dtype);
        let mut displs = Vec::with_capacity(counts.len());
        let mut acc = 0i64;
        for &c in recvcounts {
            displs.push(acc);
            acc += c;
        }
        let me = ctx.rank;
        drop(ctx);
        // SAFETY: forwarded caller contract.
        if unsafe {
            crate::wan::reduce_scatter(rt, comm, me, sendbuf, recvbuf, &counts, dtype, op)?
        } {
            return Ok(());
        }
        // SAFETY: the input holds `total` elements; `whole` spans their type map at rank 0.
        unsafe {
            reduce(
                rt,
                SendBuf::Ptr(src),
                whole.base(),
                total as i64,
                dtype,
                op,
                0,
                comm,
            )?;
            return crate::gather::scatterv(
                rt,
                whole.base(),
                recvcounts,
                &displs,
                dtype,
                crate::util::RecvBuf::Ptr(recvbuf),
                counts[me] as i64,
                dtype,
                0,
                comm,
            );
        }
    }
    // SAFETY: forwarded.
    unsafe { reduce_scatter_impl(ctx, sendbuf, recvbuf, &counts, dtype, op) }
}

unsafe fn reduce_scatter_impl(
    ctx: Ctx,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    counts: &[usize],
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<()> {
    let call = ctx.call;
    let p = ctx.size;
    let me = ctx.rank;
    let total: usize = counts.iter().sum();
    let es = dtype.size();
    let mut disp = vec![0usize; p + 1];
    for i in 0..p {
        disp[i + 1] = disp[i] + counts[i];
    }
    let mut w = vec![0u8; total * es];
    let src = match sendbuf {
        SendBuf::InPlace => recvbuf as *const u8,
        SendBuf::Ptr(s) => s,
    };
    check_buf(call, "sendbuf", src, total, dtype)?;
    // SAFETY: the input (send buffer, or receive buffer in place) holds `total` elements.
    unsafe { pack_into(src, total, dtype, w.as_mut_ptr()) };
    let red = Red {
        dtype: dtype.clone(),
        esize: es,
        op,
    };
    let wp = w.as_mut_ptr();
    if p > 1 && total * es > 0 {
        let commutative = op.is_commutative();
        let alg = choose(Coll::ReduceScatter, || {
            if commutative {
                "ring"
            } else {
                "reduce_scatterv"
            }
        });
        let team = Team::all(&ctx);
        if alg == "ring" && commutative {
            let right = (me + 1) % p;
            let left = (me + p - 1) % p;
            let mut tmp = vec![0u8; counts.iter().max().copied().unwrap_or(0) * es];
            for s in 0..p - 1 {
                let sc = (me + 2 * p - s - 1) % p;
                let rc = (me + 2 * p - s - 2) % p;
                // SAFETY: chunk sc of w and tmp are disjoint and sized.
                unsafe {
                    ctx.sendrecv(
                        wp.add(disp[sc] * es),
                        counts[sc] * es,
                        right,
                        tmp.as_mut_ptr(),
                        counts[rc] * es,
                        left,
                        tag::REDSCAT,
                    )?;
                    red.low_into(tmp.as_ptr(), wp.add(disp[rc] * es), counts[rc]);
                }
            }
        } else {
            // Reduce everything to rank 0 (rank order), then scatter the pieces.
            reduce_binomial(&ctx, &team, &red, wp, total, 0, tag::REDSCAT + 4)?;
            let mut reqs = Vec::new();
            if me == 0 {
                for r in 1..p {
                    // SAFETY: chunk r of w, alive until the waitall.
                    reqs.push(unsafe {
                        ctx.isend(wp.add(disp[r] * es), counts[r] * es, r, tag::REDSCAT + 6)?
                    });
                }
            } else {
                // SAFETY: chunk `me` of w.
                reqs.push(unsafe {
                    ctx.irecv(wp.add(disp[me] * es), counts[me] * es, 0, tag::REDSCAT + 6)?
                });
            }
            ctx.waitall(&mut reqs)?;
        }
    }
    check_buf(call, "recvbuf", recvbuf, counts[me], dtype)?;
    // SAFETY: the receive buffer has room for counts[me] elements.
    unsafe { dtype.unpack_range(recvbuf, counts[me], 0, &w[disp[me] * es..disp[me + 1] * es]) };
    Ok(())
}

/// `MPI_Scan` (inclusive prefix reduction in rank order).
///
/// # Safety
/// As [`allreduce`].
pub unsafe fn scan(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<()> {
    // SAFETY: this function's contract is scan_or_exscan's.
    unsafe {
        scan_or_exscan(
            "MPI_Scan", rt, sendbuf, recvbuf, count, dtype, op, comm, false,
        )
    }
}

/// `MPI_Exscan` (exclusive prefix; rank 0's receive buffer is left untouched).
///
/// # Safety
/// As [`allreduce`].
pub unsafe fn exscan(
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
) -> MpiResult<()> {
    // SAFETY: this function's contract is scan_or_exscan's.
    unsafe {
        scan_or_exscan(
            "MPI_Exscan",
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

/// Scan or exscan: the shared-memory area at hand first (no engine lock), then the
/// intercommunicator check (neither is defined there), then the general algorithm.
///
/// # Safety
/// As [`allreduce`].
#[allow(clippy::too_many_arguments)]
unsafe fn scan_or_exscan(
    call: &'static str,
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
    exclusive: bool,
) -> MpiResult<()> {
    // SAFETY: this function's caller guarantees what scan_lean needs (the same contract).
    if let Some(done) = unsafe {
        scan_lean(
            call, rt, sendbuf, recvbuf, count, dtype, op, comm, exclusive,
        )
    } {
        return done;
    }
    if crate::inter::is_inter(rt, call, comm)? {
        return Err(crate::inter::undefined(call));
    }
    // SAFETY: as for scan_lean: the caller's buffers and arguments, unchanged.
    unsafe {
        scan_impl(
            call, rt, sendbuf, recvbuf, count, dtype, op, comm, exclusive,
        )
    }
}

/// Scan or exscan through this thread's shared-memory area at hand (no engine lock), if
/// it serves the call: the checks are [`scan_impl`]'s.
///
/// # Safety
/// As [`allreduce`].
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn scan_lean(
    call: &'static str,
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
    exclusive: bool,
) -> Option<MpiResult<()>> {
    let node = crate::shmcoll::lean(comm, Coll::Scan)?;
    let checked = common_checks(call, count, dtype, op)
        .and_then(|count| check_buf(call, "recvbuf", recvbuf, count, dtype).map(|_| count));
    let count = match checked {
        Ok(c) => c,
        Err(e) => return Some(Err(e)),
    };
    if !node.serves(count * dtype.size()) {
        return None;
    }
    // SAFETY: forwarded caller contract (checked above).
    Some(unsafe { node.scan(rt, sendbuf, recvbuf, count, dtype, op, exclusive) })
}

#[allow(clippy::too_many_arguments)]
unsafe fn scan_impl(
    call: &'static str,
    rt: &Runtime,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
    comm: CommId,
    exclusive: bool,
) -> MpiResult<()> {
    let ctx = Ctx::new(rt, comm, call)?;
    let count = common_checks(call, count, dtype, op)?;
    check_buf(call, "recvbuf", recvbuf, count, dtype)?;
    let es = dtype.size();
    let bytes = count * es;
    // On one node, small vectors through the shared-memory area (`shmcoll.rs`).
    if ctx.size > 1 && bytes > 0 {
        if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Scan, bytes)? {
            // SAFETY: forwarded caller contract (checked above).
            return unsafe { node.scan(rt, sendbuf, recvbuf, count, dtype, op, exclusive) };
        }
    }
    let red = Red {
        dtype: dtype.clone(),
        esize: es,
        op,
    };
    // `mine`: this rank's contribution, packed.
    let mut mine = vec![0u8; bytes];
    let src = match sendbuf {
        SendBuf::InPlace => recvbuf as *const u8,
        SendBuf::Ptr(s) => s,
    };
    // SAFETY: the input holds `count` elements.
    unsafe { pack_into(src, count, dtype, mine.as_mut_ptr()) };
    let p = ctx.size;
    let me = ctx.rank;
    // Across sites, small: every rank's input to every higher rank at once (wan.rs).
    if let Some(prefix) = crate::wan::scan(&ctx, &mine, count, dtype, op, exclusive)? {
        if let Some(v) = prefix {
            // SAFETY: the receive buffer holds `count` elements (checked above).
            unsafe { dtype.unpack_range(recvbuf, count, 0, &v) };
        }
        return Ok(());
    }
    // `result`: the prefix to store (None until something is known, for exscan).
    if p > 1 && !exclusive && crate::impi::spans_sites(&ctx)? {
        // SAFETY: `mine` holds the packed input; the receive buffer is writable.
        unsafe {
            crate::impi::scan(&ctx, mine.as_mut_ptr(), count, dtype, op)?;
            if bytes > 0 {
                dtype.unpack_range(recvbuf, count, 0, &mine);
            }
        }
        return Ok(());
    }
    let mut result: Option<Vec<u8>> = if exclusive { None } else { Some(mine.clone()) };
    if p > 1 && bytes > 0 {
        let alg = choose(Coll::Scan, || "recursive_doubling");
        if alg == "linear" {
            let mut tmp = vec![0u8; bytes];
            if me > 0 {
                // SAFETY: tmp is ours.
                unsafe { ctx.recv(tmp.as_mut_ptr(), bytes, me - 1, tag::SCAN)? };
            }
            // prefix including me = tmp op mine.
            let mut incl = mine.clone();
            if me > 0 {
                // SAFETY: tmp and incl are ours, `bytes` each.
                unsafe { red.low_into(tmp.as_ptr(), incl.as_mut_ptr(), count) };
            }
            if me + 1 < p {
                // SAFETY: incl is ours.
                unsafe { ctx.send(incl.as_ptr(), bytes, me + 1, tag::SCAN)? };
            }
            result = if exclusive {
                (me > 0).then_some(tmp)
            } else {
                Some(incl)
            };
        } else {
            // partial: reduction over the aligned group seen so far (all ranks of it).
            let mut partial = mine.clone();
            let mut tmp = vec![0u8; bytes];
            let mut mask = 1;
            while mask < p {
                let dst = me ^ mask;
                if dst < p {
                    // SAFETY: our own buffers.
                    unsafe {
                        ctx.sendrecv(
                            partial.as_ptr(),
                            bytes,
                            dst,
                            tmp.as_mut_ptr(),
                            bytes,
                            dst,
                            tag::SCAN + 1,
                        )?;
                        if dst < me {
                            red.low_into(tmp.as_ptr(), partial.as_mut_ptr(), count);
                            match &mut result {
                                Some(r) => red.low_into(tmp.as_ptr(), r.as_mut_ptr(), count),
                                None => result = Some(tmp.clone()),
                            }
                        } else {
                            red.high_into(tmp.as_ptr(), partial.as_mut_ptr(), count);
                        }
                    }
                }
                mask <<= 1;
            }
        }
    }
    if let Some(r) = result {
        if !(exclusive && me == 0) {
            // SAFETY: receive buffer has room for `count` elements.
            unsafe { dtype.unpack_range(recvbuf, count, 0, &r) };
        }
    }
    Ok(())
}
