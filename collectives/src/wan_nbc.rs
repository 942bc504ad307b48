//! Latency-aware non-blocking collectives across sites: schedules ([`crate::nbc`]) that
//! cross the wide-area link once, for `MPI_Ibarrier`, `MPI_Ibcast`, `MPI_Iallreduce`,
//! `MPI_Iscan` and `MPI_Iexscan` on a communicator that spans sites in the latency-aware
//! mode ([`crate::wan::mode`]).
//!
//! On small communicators with small messages (the blocking direct algorithms' bounds,
//! [`crate::wan::direct`]) every schedule is one round: every rank sends to every rank that
//! needs its data at once and reductions combine in rank order (any op). Otherwise the
//! barrier, bcast and a commutative allreduce go through one coordinator per site in three
//! rounds (into the coordinators, among them, out of them: one wide-area round, all site
//! pairs at once, linear inside the sites). Each function returns None where it does not
//! apply (one site, another mode, a non-commutative reduction beyond the direct bounds,
//! scans beyond them): the caller then builds its ordinary schedule.

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, MpiResult, Runtime};

use crate::nbc::{recv, send, CollRequest, Loc, Step};
use crate::op::Op;
use crate::util::{Ctx, Hier};

/// The site structure and whether the direct schedules apply, when the communicator spans
/// sites in the latency-aware mode.
fn sites(
    rt: &Runtime,
    comm: CommId,
    call: &'static str,
    bytes: usize,
) -> MpiResult<Option<(Hier, bool)>> {
    if crate::wan::mode() != crate::wan::Mode::Wan {
        return Ok(None);
    }
    let ctx = Ctx::new(rt, comm, call)?;
    Ok(crate::wan::sites(&ctx)?.map(|h| {
        let direct = crate::wan::direct(&ctx, bytes);
        (h, direct)
    }))
}

/// `TSUNAGI_WAN_TRACE`: rank 0 names the schedule it built.
fn trace(me: usize, call: &str, bytes: usize, direct: bool) {
    if me == 0 && std::env::var_os("TSUNAGI_WAN_TRACE").is_some() {
        let how = if direct { "direct" } else { "coordinators" };
        eprintln!("tsunagi: wan {call} of {bytes} bytes: {how}");
    }
}

/// This process's rank in the communicator.
fn rank_of(h: &Hier) -> usize {
    h.members[h.my_node][h.my_local]
}

/// `MPI_Ibarrier` across sites.
pub(crate) fn ibarrier(rt: &Runtime, comm: CommId) -> MpiResult<Option<CollRequest>> {
    let Some((h, direct)) = sites(rt, comm, "MPI_Ibarrier", 0)? else {
        return Ok(None);
    };
    let me = rank_of(&h);
    let n = h.node_of.len();
    trace(me, "MPI_Ibarrier", 0, direct);
    let mut r = CollRequest::new(rt, comm)?;
    let z = r.tmp(1);
    let zl = Loc::Tmp(z, 0);
    if direct {
        let rd = r.round();
        for p in (0..n).filter(|&p| p != me) {
            rd.comm.push(recv(zl, 0, p));
            rd.comm.push(send(zl, 0, p));
        }
        return Ok(Some(r));
    }
    let local = &h.members[h.my_node];
    if h.is_leader() {
        let rd = r.round();
        for &p in &local[1..] {
            rd.comm.push(recv(zl, 0, p));
        }
        let rd = r.round();
        for (s, &l) in h.leaders.iter().enumerate() {
            if s != h.my_node {
                rd.comm.push(recv(zl, 0, l));
                rd.comm.push(send(zl, 0, l));
            }
        }
        let rd = r.round();
        for &p in &local[1..] {
            rd.comm.push(send(zl, 0, p));
        }
    } else {
        r.round().comm.push(send(zl, 0, local[0]));
        r.round().comm.push(recv(zl, 0, local[0]));
    }
    Ok(Some(r))
}

/// `MPI_Ibcast` across sites (`buf` checked by the caller, `count * dtype.size() > 0`).
///
/// # Safety
/// As [`crate::nbc::ibcast`].
pub(crate) unsafe fn ibcast(
    rt: &Runtime,
    comm: CommId,
    buf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    root: usize,
) -> MpiResult<Option<CollRequest>> {
    let len = count * dtype.size();
    let Some((h, direct)) = sites(rt, comm, "MPI_Ibcast", len)? else {
        return Ok(None);
    };
    let me = rank_of(&h);
    let n = h.node_of.len();
    trace(me, "MPI_Ibcast", len, direct);
    let mut r = CollRequest::new(rt, comm)?;
    let (loc, packed) = match dtype.contiguous_offset() {
        Some(off) => (Loc::User(buf.wrapping_offset(off)), None),
        None => {
            let t = r.tmp(len);
            if me == root {
                // SAFETY: the root's buffer holds `count` elements (caller contract).
                unsafe { dtype.pack_range(buf, count, 0, &mut r.tmps[t]) };
            }
            (Loc::Tmp(t, 0), Some(t))
        }
    };
    let rs = h.node_of[root];
    if direct {
        let rd = r.round();
        if me == root {
            for p in (0..n).filter(|&p| p != root) {
                rd.comm.push(send(loc, len, p));
            }
        } else {
            rd.comm.push(recv(loc, len, root));
        }
    } else if me == root {
        // Remote sites' coordinators first (the long path), then the root's own site.
        let rd = r.round();
        for (s, &l) in h.leaders.iter().enumerate() {
            if s != rs {
                rd.comm.push(send(loc, len, l));
            }
        }
        for &p in h.members[rs].iter().filter(|&&p| p != root) {
            rd.comm.push(send(loc, len, p));
        }
    } else if h.my_node == rs {
        r.round().comm.push(recv(loc, len, root));
    } else if h.is_leader() {
        r.round().comm.push(recv(loc, len, root));
        let rd = r.round();
        for &p in &h.members[h.my_node][1..] {
            rd.comm.push(send(loc, len, p));
        }
    } else {
        r.round().comm.push(recv(loc, len, h.leaders[h.my_node]));
    }
    if let (Some(t), true) = (packed, me != root) {
        r.round().local.push(Step::Unpack {
            src: Loc::Tmp(t, 0),
            dst: buf,
            count,
            dtype: dtype.clone(),
        });
    }
    Ok(Some(r))
}

/// Local steps combining `k` packed contributions of `bytes` bytes at `Tmp(t, i * bytes)`,
/// in index order, into slot 0: `((x0 op x1) op x2) ...` (the association of a chain, so
/// any associative op).
fn combine_into_first(rd: &mut crate::nbc::Round, t: usize, k: usize, bytes: usize, count: usize) {
    for i in 1..k {
        rd.local.push(Step::Reduce {
            src: Loc::Tmp(t, i * bytes),
            dst: Loc::Tmp(t, 0),
            count,
            src_low: false,
        });
    }
}

/// `MPI_Iallreduce` across sites (`src`: the input, packed by this function;
/// arguments checked by the caller).
///
/// # Safety
/// As [`crate::nbc::iallreduce`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iallreduce(
    rt: &Runtime,
    comm: CommId,
    src: *const u8,
    recvbuf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<Option<CollRequest>> {
    let bytes = count * dtype.size();
    if bytes == 0 {
        return Ok(None);
    }
    let Some((h, direct)) = sites(rt, comm, "MPI_Iallreduce", bytes)? else {
        return Ok(None);
    };
    if !direct && !op.is_commutative() {
        return Ok(None);
    }
    let me = rank_of(&h);
    let n = h.node_of.len();
    trace(me, "MPI_Iallreduce", bytes, direct);
    let mut r = CollRequest::new(rt, comm)?;
    r.op = Some((op.clone(), dtype.clone()));
    let result;
    if direct {
        // Slot p holds rank p's input; everyone's to everyone at once.
        let parts = r.tmp(n * bytes);
        // SAFETY: caller contract: `src` holds `count` elements.
        unsafe {
            dtype.pack_range(
                src,
                count,
                0,
                &mut r.tmps[parts][me * bytes..(me + 1) * bytes],
            )
        };
        let rd = r.round();
        for p in (0..n).filter(|&p| p != me) {
            rd.comm.push(recv(Loc::Tmp(parts, p * bytes), bytes, p));
            rd.comm.push(send(Loc::Tmp(parts, me * bytes), bytes, p));
        }
        combine_into_first(rd, parts, n, bytes, count);
        result = parts;
    } else {
        // Into the coordinator (slot i: local rank i's input), among the coordinators
        // (slot s: site s's partial, combined in site order everywhere: the same bits at
        // every site), out of it.
        let local = h.members[h.my_node].clone();
        let k = local.len();
        let ns = h.members.len();
        let mine = r.tmp(k * bytes);
        let at = h.my_local * bytes;
        // SAFETY: as above.
        unsafe { dtype.pack_range(src, count, 0, &mut r.tmps[mine][at..at + bytes]) };
        if h.is_leader() {
            let rd = r.round();
            for (i, &p) in local.iter().enumerate().skip(1) {
                rd.comm.push(recv(Loc::Tmp(mine, i * bytes), bytes, p));
            }
            combine_into_first(rd, mine, k, bytes, count);
            let sitesum = r.tmp(ns * bytes);
            // The slot of my site's partial; its address stays valid (a schedule buffer is
            // never resized).
            let slot = r.tmps[sitesum].as_mut_ptr().wrapping_add(h.my_node * bytes);
            let rd = r.round();
            for (s, &l) in h.leaders.iter().enumerate() {
                if s != h.my_node {
                    rd.comm.push(recv(Loc::Tmp(sitesum, s * bytes), bytes, l));
                    rd.comm.push(send(Loc::Tmp(mine, 0), bytes, l));
                }
            }
            // My site's partial into its slot: a copy, as an unpack of bytes (a local
            // step: it runs after this round's sends, which read `mine`, are complete).
            rd.local.push(Step::Unpack {
                src: Loc::Tmp(mine, 0),
                dst: slot,
                count: bytes,
                dtype: crate::util::byte_type(),
            });
            combine_into_first(rd, sitesum, ns, bytes, count);
            let rd = r.round();
            for &p in &local[1..] {
                rd.comm.push(send(Loc::Tmp(sitesum, 0), bytes, p));
            }
            result = sitesum;
        } else {
            r.round()
                .comm
                .push(send(Loc::Tmp(mine, at), bytes, local[0]));
            r.round()
                .comm
                .push(recv(Loc::Tmp(mine, 0), bytes, local[0]));
            result = mine;
        }
    }
    r.round().local.push(Step::Unpack {
        src: Loc::Tmp(result, 0),
        dst: recvbuf,
        count,
        dtype: dtype.clone(),
    });
    Ok(Some(r))
}

/// `MPI_Iscan` / `MPI_Iexscan` across sites, direct only: every rank sends its input to
/// every higher rank at once and combines the prefix in rank order (arguments checked by
/// the caller).
///
/// # Safety
/// As [`crate::nbc::iscan`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn iscan(
    rt: &Runtime,
    comm: CommId,
    src: *const u8,
    recvbuf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
    exclusive: bool,
) -> MpiResult<Option<CollRequest>> {
    let bytes = count * dtype.size();
    if bytes == 0 {
        return Ok(None);
    }
    let call = if exclusive {
        "MPI_Iexscan"
    } else {
        "MPI_Iscan"
    };
    let Some((h, true)) = sites(rt, comm, call, bytes)? else {
        return Ok(None);
    };
    let me = rank_of(&h);
    let n = h.node_of.len();
    trace(me, call, bytes, true);
    let mut r = CollRequest::new(rt, comm)?;
    r.op = Some((op.clone(), dtype.clone()));
    let parts = r.tmp((me + 1) * bytes);
    // SAFETY: caller contract: `src` holds `count` elements.
    unsafe {
        dtype.pack_range(
            src,
            count,
            0,
            &mut r.tmps[parts][me * bytes..(me + 1) * bytes],
        )
    };
    let rd = r.round();
    for p in 0..me {
        rd.comm.push(recv(Loc::Tmp(parts, p * bytes), bytes, p));
    }
    for p in me + 1..n {
        rd.comm.push(send(Loc::Tmp(parts, me * bytes), bytes, p));
    }
    let upto = if exclusive { me } else { me + 1 };
    if upto == 0 {
        return Ok(Some(r)); // exscan at rank 0: the receive buffer is untouched
    }
    combine_into_first(rd, parts, upto, bytes, count);
    r.round().local.push(Step::Unpack {
        src: Loc::Tmp(parts, 0),
        dst: recvbuf,
        count,
        dtype: dtype.clone(),
    });
    Ok(Some(r))
}
