//! MPI_Barrier: dissemination, and the hierarchical barrier of seed 004 (node-local
//! arrival at the node leader, dissemination among node leaders, node-local release; the
//! node-local steps through the node communicator's shared-memory area, `nodesplit.rs`);
//! on one node, the shared-memory area of `shmcoll.rs`.

use tsunagi_core::{CommId, MpiResult, Runtime};

use crate::select::{choose, Coll};
use crate::util::{tag, Ctx, Hier, Team};

/// `MPI_Barrier`.
pub fn barrier(rt: &Runtime, comm: CommId) -> MpiResult<()> {
    if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Barrier, 0)? {
        return node.barrier(rt);
    }
    if crate::inter::is_inter(rt, "MPI_Barrier", comm)? {
        return crate::inter::ibarrier(rt, comm)?.wait(rt);
    }
    let mut ctx = Ctx::new(rt, comm, "MPI_Barrier")?;
    if ctx.size == 1 {
        return Ok(());
    }
    if let Some(sites) = crate::wan::sites(&ctx)? {
        return crate::wan::barrier(&ctx, &sites);
    }
    if let Some(sites) = crate::impi::sites(&ctx)? {
        return crate::impi::barrier(&ctx, &sites);
    }
    let hier = ctx.is_hierarchical()?;
    let alg = choose(Coll::Barrier, || {
        if hier {
            "hierarchical"
        } else {
            "dissemination"
        }
    });
    match alg {
        "hierarchical" => {
            if let Some(s) = crate::nodesplit::split(&mut ctx)? {
                return split_barrier(rt, &s);
            }
            let nodes = ctx.nodes()?;
            let h = Hier::new(&nodes, ctx.rank);
            hierarchical(&ctx, &h)
        }
        _ => dissemination(&ctx, &Team::all(&ctx), tag::BARRIER),
    }
}

/// Dissemination barrier over a team: in round k each member signals member `me + 2^k`
/// and waits for member `me - 2^k`.
pub(crate) fn dissemination(ctx: &Ctx, team: &Team, tag: i32) -> MpiResult<()> {
    let n = team.len();
    let mut dist = 1;
    let mut round = 0;
    let mut z = [0u8; 2];
    while dist < n {
        let to = team.ranks[(team.me + dist) % n];
        let from = team.ranks[(team.me + n - dist) % n];
        // SAFETY: zero-byte transfers; `z` outlives the wait in sendrecv.
        unsafe {
            ctx.sendrecv(
                z.as_ptr(),
                0,
                to,
                z.as_mut_ptr().add(1),
                0,
                from,
                tag + round,
            )?
        };
        dist <<= 1;
        round += 1;
    }
    Ok(())
}

/// Hierarchical barrier on a node split: the node's ranks arrive at their leader (a
/// gather of one byte through the node's shared-memory area: a non-leader posts and goes
/// on), the leaders run a barrier, and each releases its node (a bcast of one byte, which
/// the non-leaders wait for on the area).
fn split_barrier(rt: &Runtime, s: &crate::nodesplit::Split) -> MpiResult<()> {
    let byte = crate::util::byte_type();
    let local = s.hier.members[s.hier.my_node].len();
    let mut one = [0u8; 1];
    let mut all = vec![0u8; if s.is_leader() { local } else { 0 }];
    // SAFETY: one byte sent from `one`; `all` has a byte per node rank at the leader
    // (the only rank that receives); `one` is the bcast's one-byte buffer.
    unsafe {
        crate::gather::gather(
            rt,
            crate::util::SendBuf::Ptr(one.as_ptr()),
            1,
            &byte,
            all.as_mut_ptr(),
            1,
            &byte,
            0,
            s.node,
        )?;
        if let Some(leaders) = s.leaders {
            barrier(rt, leaders)?;
        }
        crate::bcast::bcast(rt, one.as_mut_ptr(), 1, &byte, 0, s.node)
    }
}

fn hierarchical(ctx: &Ctx, h: &Hier) -> MpiResult<()> {
    let local = h.local_team();
    let leader = local.ranks[0];
    let mut z = [0u8; 2];
    if h.is_leader() {
        let mut reqs = Vec::new();
        for &r in &local.ranks[1..] {
            // SAFETY: zero bytes; `z` outlives the waitall.
            reqs.push(unsafe { ctx.irecv(z.as_mut_ptr(), 0, r, tag::BARRIER + 64)? });
        }
        ctx.waitall(&mut reqs)?;
        if h.leaders.len() > 1 {
            dissemination(ctx, &h.leader_team(), tag::BARRIER + 32)?;
        }
        for &r in &local.ranks[1..] {
            // SAFETY: zero bytes; `z` outlives the waitall.
            reqs.push(unsafe { ctx.isend(z.as_ptr(), 0, r, tag::BARRIER + 65)? });
        }
        ctx.waitall(&mut reqs)
    } else {
        // SAFETY: zero bytes; `z` outlives both blocking calls.
        unsafe {
            ctx.send(z.as_ptr(), 0, leader, tag::BARRIER + 64)?;
            ctx.recv(z.as_mut_ptr(), 0, leader, tag::BARRIER + 65)
        }
    }
}
