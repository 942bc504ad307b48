//! MPI_Allgather(v): recursive doubling (powers of two), Bruck, ring, and hierarchical
//! (gather to the node leader, ring among leaders, broadcast inside the node). All work
//! on the packed blocks of the receive buffer (the buffer itself when it is contiguous).

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime};

use crate::select::{choose, Coll};
use crate::util::{
    check_buf, check_count, check_counts, check_displs, check_type, err, tag, Blocks, Ctx, Hier,
    SendBuf, Team,
};

/// `MPI_Allgather`.
///
/// # Safety
/// `sendcount` elements of `sendtype` readable at `sendbuf` (unless in place); room for
/// `size * recvcount` elements of `recvtype` at `recvbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn allgather(
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
    if let Some(node) = crate::shmcoll::lean(comm, Coll::Allgather) {
        let rc = recvcount.max(0) as usize;
        let block = rc * recvtype.size();
        let send_ok = match sendbuf {
            SendBuf::InPlace => true,
            SendBuf::Ptr(s) => {
                sendcount >= 0
                    && sendtype.is_committed()
                    && sendcount as usize * sendtype.size() == block
                    && (!s.is_null() || sendtype.true_lb() != 0)
            }
        };
        if recvcount > 0
            && recvtype.is_committed()
            && !recvbuf.is_null()
            && send_ok
            && node.serves(block)
        {
            let sc = sendcount.max(0) as usize;
            // SAFETY: forwarded caller contract.
            return unsafe { node.allgather(rt, sendbuf, sc, sendtype, recvbuf, rc, recvtype) };
        }
    }
    if crate::inter::is_inter(rt, "MPI_Allgather", comm)? {
        return unsafe {
            crate::inter::iallgatherv(
                rt,
                "MPI_Allgather",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcount,
                None,
                recvtype,
                comm,
            )
        }?
        .wait(rt);
    }
    let call = "MPI_Allgather";
    let ctx = Ctx::new(rt, comm, call)?;
    let rc = check_count(call, recvcount)?;
    // On one node, small blocks through the shared-memory area (`shmcoll.rs`); arguments
    // that fail the checks go the ordinary way, which reports them.
    let block = rc * recvtype.size();
    if ctx.size > 1 && block > 0 && recvtype.is_committed() && !recvbuf.is_null() {
        let send = match sendbuf {
            SendBuf::InPlace => Some(0),
            SendBuf::Ptr(s) => {
                let sc = check_count(call, sendcount)?;
                (sendtype.is_committed()
                    && sc * sendtype.size() == block
                    && (!s.is_null() || sendtype.true_lb() != 0))
                    .then_some(sc)
            }
        };
        if let Some(sc) = send {
            if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Allgather, block)? {
                // SAFETY: forwarded caller contract.
                return unsafe { node.allgather(rt, sendbuf, sc, sendtype, recvbuf, rc, recvtype) };
            }
        }
    }
    if let Some(h) = crate::wan::sites(&ctx)? {
        check_type(call, recvtype)?;
        // SAFETY: forwarded caller contract.
        return unsafe {
            crate::wan::allgather_buffers(
                &ctx, &h, sendbuf, sendcount, sendtype, recvbuf, rc, recvtype,
            )
        };
    }
    if ctx.size > 1 && crate::impi::spans_sites(&ctx)? {
        // Across sites: gather to rank 0, then bcast from rank 0 (both the IMPI forms).
        check_type(call, recvtype)?;
        let (me, p) = (ctx.rank, ctx.size);
        let (send, scount, stype) = match sendbuf {
            SendBuf::InPlace if me != 0 => (
                SendBuf::Ptr(
                    recvbuf.wrapping_offset(me as isize * rc as isize * recvtype.extent()),
                ),
                recvcount,
                recvtype,
            ),
            other => (other, sendcount, sendtype),
        };
        drop(ctx);
        // SAFETY: forwarded caller contract (the receive buffer has room for every block).
        unsafe {
            crate::gather::gather(
                rt, send, scount, stype, recvbuf, recvcount, recvtype, 0, comm,
            )?;
            return crate::bcast::bcast(rt, recvbuf, (p * rc) as i64, recvtype, 0, comm);
        }
    }
    let counts = vec![rc as i64; ctx.size];
    let displs: Vec<i64> = (0..ctx.size).map(|i| (i * rc) as i64).collect();
    // SAFETY: forwarded caller contract (same layout as the v form with these counts).
    unsafe {
        allgather_impl(
            ctx, call, sendbuf, sendcount, sendtype, recvbuf, &counts, &displs, recvtype,
        )
    }
}

/// `MPI_Allgatherv` (`displs` in elements of `recvtype`).
///
/// # Safety
/// As [`allgather`], block i at `recvbuf + displs[i] * extent`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn allgatherv(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<()> {
    // On one node, when every block fits a slot (all ranks know all counts, so they
    // decide alike): the shared-memory area; other arguments go the ordinary way.
    let max_block = recvcounts.iter().copied().max().unwrap_or(0).max(0) as usize * recvtype.size();
    if recvcounts.iter().all(|&c| c >= 0)
        && max_block > 0
        && recvtype.is_committed()
        && (!recvbuf.is_null() || recvtype.true_lb() != 0)
    {
        if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Allgather, max_block)? {
            let (me, p) = (node.rank(), node.size());
            if recvcounts.len() >= p && displs.len() >= p {
                let counts: Vec<usize> = recvcounts[..p].iter().map(|&c| c as usize).collect();
                let send_ok = match sendbuf {
                    SendBuf::InPlace => true,
                    SendBuf::Ptr(s) => {
                        sendcount >= 0
                            && sendtype.is_committed()
                            && sendcount as usize * sendtype.size() == counts[me] * recvtype.size()
                            && (!s.is_null() || sendtype.true_lb() != 0 || sendcount == 0)
                    }
                };
                if send_ok {
                    let sc = sendcount.max(0) as usize;
                    // SAFETY: forwarded caller contract (checked above).
                    return unsafe {
                        node.allgatherv(
                            rt, sendbuf, sc, sendtype, recvbuf, &counts, displs, recvtype,
                        )
                    };
                }
            }
        }
    }
    if crate::inter::is_inter(rt, "MPI_Allgatherv", comm)? {
        return unsafe {
            crate::inter::iallgatherv(
                rt,
                "MPI_Allgatherv",
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                0,
                Some((recvcounts, displs)),
                recvtype,
                comm,
            )
        }?
        .wait(rt);
    }
    let call = "MPI_Allgatherv";
    let ctx = Ctx::new(rt, comm, call)?;
    // SAFETY: forwarded caller contract.
    unsafe {
        allgather_impl(
            ctx, call, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn allgather_impl(
    mut ctx: Ctx,
    call: &'static str,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
) -> MpiResult<()> {
    let p = ctx.size;
    check_type(call, recvtype)?;
    let counts = check_counts(call, "recvcounts", recvcounts, p)?;
    check_displs(call, "displs", displs, p)?;
    let ext = recvtype.extent();
    let user: Vec<_> = (0..p)
        .map(|i| {
            (
                recvbuf.wrapping_offset(displs[i] as isize * ext),
                counts[i],
                recvtype.clone(),
            )
        })
        .collect();
    let mut blocks = Blocks::new(user);
    let me = ctx.rank;
    let total = blocks.total();
    let hier = p > 1 && ctx.is_hierarchical()?;
    let alg = if p > 1 {
        choose(Coll::Allgather, || {
            if hier {
                "hierarchical"
            } else if p.is_power_of_two() && total < 512 * 1024 {
                "recursive_doubling"
            } else if total < 80 * 1024 {
                "bruck"
            } else {
                "ring"
            }
        })
    } else {
        ""
    };
    // Recursive doubling and the ring send only our own block in their first exchange:
    // that block may leave straight from the send buffer, and its copy into the receive
    // buffer is made while the exchange is under way (as Open MPI's allgatherv does).
    // Copying first delayed the first message by the copy (~10 µs for CG.A's 56 KB
    // blocks, cold after the matrix-vector product), and with the vendor's rendezvous
    // every later step waited that much longer (docs/vendor-mpi.md, session 11).
    // Only from a contiguous send type: the block goes as bytes, like every other step of
    // these algorithms, since a device that converts typed data between sites (external32
    // over IMPI) must see bytes at both ends of a message; a typed send met by a byte
    // receive arrives converted.
    let first_sends_own =
        p > 1 && (alg == "recursive_doubling" && p.is_power_of_two() || alg == "ring");
    let mut own_first = None;
    match sendbuf {
        // SAFETY: the caller's receive block `me` is readable.
        SendBuf::InPlace => unsafe { blocks.load(me) },
        SendBuf::Ptr(s) => {
            let sc = check_count(call, sendcount)?;
            check_type(call, sendtype)?;
            check_buf(call, "sendbuf", s, sc, sendtype)?;
            if sc * sendtype.size() != blocks.len[me] {
                return Err(err(
                    ErrorClass::Truncate,
                    format!("{call}: send size differs from the receive count of this rank"),
                ));
            }
            match sendtype.contiguous_offset() {
                Some(off) if first_sends_own => {
                    own_first = Some(Own {
                        buf: s.wrapping_offset(off),
                        len: blocks.len[me],
                    })
                }
                _ => {
                    // SAFETY: the caller's send buffer is readable.
                    let filled = unsafe { blocks.fill_from(me, s, sc, sendtype) };
                    debug_assert!(filled, "the sizes agree (checked above)");
                }
            }
        }
    }
    if p > 1 {
        let team = Team::all(&ctx);
        match alg {
            "recursive_doubling" if p.is_power_of_two() => {
                recursive_doubling(&ctx, &team, &mut blocks, own_first, tag::ALLGATHER)?
            }
            "recursive_doubling" | "bruck" => bruck(&ctx, &blocks)?,
            "hierarchical" => {
                let nodes = ctx.nodes()?;
                hierarchical(&ctx, &Hier::new(&nodes, me), &blocks)?
            }
            _ => {
                if let Some(own) = own_first {
                    let n = team.len();
                    let (right, left) = (team.ranks[(me + 1) % n], team.ranks[(me + n - 1) % n]);
                    // SAFETY: forwarded caller contract; the ring's first step sends block
                    // `me` right and receives block `me - 1` (not `me`: p > 1) from the left.
                    unsafe {
                        first_from_own(
                            &ctx,
                            &mut blocks,
                            own,
                            me,
                            right,
                            left,
                            (me + n - 1) % n,
                            tag::ALLGATHER + 1,
                        )?
                    };
                }
                ring(
                    &ctx,
                    &team,
                    blocks.base,
                    &blocks.off,
                    &blocks.len,
                    own_first.is_some() as usize,
                    tag::ALLGATHER + 1,
                )?
            }
        }
    }
    for i in 0..p {
        if i != me || sendbuf != SendBuf::InPlace {
            // SAFETY: the caller's receive blocks are writable.
            unsafe { blocks.store(i) };
        }
    }
    Ok(())
}

/// Ring allgather over a team: member i's block is at `base + off[i]`, `len[i]` bytes;
/// steps from `from` on (the first `from` steps done by the caller).
pub(crate) fn ring(
    ctx: &Ctx,
    team: &Team,
    base: *mut u8,
    off: &[usize],
    len: &[usize],
    from: usize,
    tag: i32,
) -> MpiResult<()> {
    let n = team.len();
    let me = team.me;
    let right = team.ranks[(me + 1) % n];
    let left = team.ranks[(me + n - 1) % n];
    for s in from..n.saturating_sub(1) {
        let sb = (me + n - s) % n;
        let rb = (me + 2 * n - s - 1) % n;
        // SAFETY: distinct blocks of the working buffer.
        unsafe {
            ctx.sendrecv(
                base.add(off[sb]),
                len[sb],
                right,
                base.add(off[rb]),
                len[rb],
                left,
                tag,
            )?
        };
    }
    Ok(())
}

/// Our block in the caller's send buffer, `len` contiguous bytes at `buf`, not yet in the
/// working buffer: the first exchange sends it from there.
#[derive(Clone, Copy)]
struct Own {
    buf: *const u8,
    len: usize,
}

/// A first exchange that sends only our block `me`: from the caller's send buffer to
/// `dest`, block `rb` from `src` into the working buffer, and meanwhile our block's copy
/// into the working buffer (the ring's first step: right and left; recursive doubling's:
/// the partner both ways).
///
/// # Safety
/// `own`'s bytes readable until the exchange ends; the working buffer's blocks ours;
/// `rb != me`.
#[allow(clippy::too_many_arguments)]
unsafe fn first_from_own(
    ctx: &Ctx,
    b: &mut Blocks,
    own: Own,
    me: usize,
    dest: usize,
    src: usize,
    rb: usize,
    tag: i32,
) -> MpiResult<()> {
    // SAFETY: block `rb` of the working buffer is written by this receive only (nothing
    // else runs on it until the wait); the send reads the caller's send buffer.
    let mut reqs =
        unsafe { ctx.start_sendrecv(own.buf, own.len, dest, b.ptr(rb), b.len[rb], src, tag)? };
    if own.len > 0 {
        // SAFETY: the send buffer's `len` bytes are readable (caller contract); block `me`
        // of the working buffer (`len[me] == own.len` bytes, checked by the caller) is
        // disjoint from block `rb` and from the send buffer, and not touched by the
        // exchange.
        unsafe { std::ptr::copy_nonoverlapping(own.buf, b.ptr(me), own.len) };
    }
    ctx.waitall(&mut reqs)
}

fn recursive_doubling(
    ctx: &Ctx,
    team: &Team,
    b: &mut Blocks,
    own: Option<Own>,
    tag: i32,
) -> MpiResult<()> {
    let n = team.len();
    let me = team.me;
    let mut mask = 1;
    if let Some(own) = own {
        // The first step exchanges single blocks with partner me ^ 1.
        let partner = me ^ 1;
        // SAFETY: forwarded caller contract; block `partner` differs from `me`.
        unsafe {
            first_from_own(
                ctx,
                b,
                own,
                me,
                team.ranks[partner],
                team.ranks[partner],
                partner,
                tag,
            )?
        };
        mask = 2;
    }
    while mask < n {
        let partner = me ^ mask;
        let mine = me & !(mask - 1);
        let theirs = partner & !(mask - 1);
        // SAFETY: disjoint block groups of the working buffer.
        unsafe {
            ctx.sendrecv(
                b.ptr(mine),
                b.span(mine, mine + mask),
                team.ranks[partner],
                b.ptr(theirs),
                b.span(theirs, theirs + mask),
                team.ranks[partner],
                tag,
            )?
        };
        mask <<= 1;
    }
    Ok(())
}

/// Bruck: blocks in rank-relative order in a scratch buffer, log2(p) rounds of sending the
/// first k blocks to rank - k, then rotate into place.
fn bruck(ctx: &Ctx, b: &Blocks) -> MpiResult<()> {
    let p = ctx.size;
    let me = ctx.rank;
    let order: Vec<usize> = (0..p).map(|j| (me + j) % p).collect();
    let mut toff = Vec::with_capacity(p);
    let mut acc = 0;
    for &r in &order {
        toff.push(acc);
        acc += b.len[r];
    }
    let mut t = vec![0u8; acc];
    // SAFETY: block `me` of the working buffer is `len[me]` readable bytes.
    unsafe { crate::util::copy_bytes(b.ptr(me), t.as_mut_ptr(), b.len[me]) };
    let span = |a: usize, c: usize| -> usize { (a..a + c).map(|j| b.len[order[j]]).sum() };
    let mut k = 1;
    while k < p {
        let cnt = k.min(p - k);
        let dst = (me + p - k) % p;
        let src = (me + k) % p;
        let sl = span(0, cnt);
        let rl = span(k, cnt);
        let tp = t.as_mut_ptr();
        // SAFETY: blocks [0, cnt) and [k, k+cnt) of t are disjoint (cnt <= k).
        unsafe { ctx.sendrecv(tp, sl, dst, tp.add(toff[k]), rl, src, tag::ALLGATHER + 2)? };
        k <<= 1;
    }
    for (j, &r) in order.iter().enumerate() {
        if r != me {
            // SAFETY: block r of the working buffer has len[r] bytes; t is ours.
            unsafe { crate::util::copy_bytes(t.as_ptr().add(toff[j]), b.ptr(r), b.len[r]) };
        }
    }
    Ok(())
}

/// Gather to the node leader, ring among leaders over whole nodes, then broadcast the
/// full result inside each node.
fn hierarchical(ctx: &Ctx, h: &Hier, b: &Blocks) -> MpiResult<()> {
    let local = &h.members[h.my_node];
    let leader = local[0];
    if !h.is_leader() {
        // SAFETY: our block of the working buffer; blocking send.
        unsafe { ctx.send(b.ptr(ctx.rank), b.len[ctx.rank], leader, tag::ALLGATHER + 3)? };
    } else {
        let mut reqs = Vec::new();
        for &r in &local[1..] {
            // SAFETY: block r of the working buffer, untouched until the wait.
            reqs.push(unsafe { ctx.irecv(b.ptr(r), b.len[r], r, tag::ALLGATHER + 3)? });
        }
        ctx.waitall(&mut reqs)?;
        let nn = h.members.len();
        if nn > 1 {
            // Node aggregates: node k's blocks in member order, nodes in order.
            let mut noff = Vec::with_capacity(nn);
            let mut nlen = Vec::with_capacity(nn);
            let mut acc = 0;
            for m in &h.members {
                noff.push(acc);
                let l: usize = m.iter().map(|&r| b.len[r]).sum();
                nlen.push(l);
                acc += l;
            }
            let mut agg = vec![0u8; acc];
            let copy_node = |agg: &mut [u8], k: usize, into_agg: bool| {
                let mut pos = noff[k];
                for &r in &h.members[k] {
                    // SAFETY: block r of the working buffer and a disjoint slice of agg.
                    unsafe {
                        if into_agg {
                            crate::util::copy_bytes(b.ptr(r), agg.as_mut_ptr().add(pos), b.len[r]);
                        } else {
                            crate::util::copy_bytes(agg.as_ptr().add(pos), b.ptr(r), b.len[r]);
                        }
                    }
                    pos += b.len[r];
                }
            };
            copy_node(&mut agg, h.my_node, true);
            ring(
                ctx,
                &h.leader_team(),
                agg.as_mut_ptr(),
                &noff,
                &nlen,
                0,
                tag::ALLGATHER + 4,
            )?;
            for k in 0..nn {
                if k != h.my_node {
                    copy_node(&mut agg, k, false);
                }
            }
        }
    }
    let team = h.local_team();
    crate::bcast::binomial(ctx, &team, b.base, b.total(), 0, tag::ALLGATHER + 5)
}
