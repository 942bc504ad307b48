//! MPI_Gather(v) and MPI_Scatter(v): binomial trees (blocks in root-relative order in a
//! packed buffer) and linear (the root talks to everyone, typed, no copies). The v forms
//! are linear: only the root knows the counts.

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime};

use crate::select::{choose, Coll};
use crate::util::{
    check_buf, check_count, check_counts, check_displs, check_root, check_type, copy_typed, err,
    tag, Ctx, RecvBuf, SendBuf,
};

/// `MPI_Gather`. `recvbuf`, `recvcount` and `recvtype` matter only at the root;
/// `MPI_IN_PLACE` is allowed only at the root.
///
/// # Safety
/// Buffers as MPI requires: `sendcount` elements of `sendtype` readable at `sendbuf`; at
/// the root room for `size * recvcount` elements of `recvtype` at `recvbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gather(
    rt: &Runtime,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<()> {
    // The shared-memory fast path when this thread has the area at hand: no engine lock
    // (the area's rank and size are the communicator's); the checks are the ones below.
    if let Some(node) = crate::shmcoll::lean(comm, Coll::Gather) {
        let call = "MPI_Gather";
        let root = check_root(call, root, node.size())?;
        let is_root = node.rank() == root;
        let (sc, rc) = gather_checks(
            call, is_root, sendbuf, sendcount, sendtype, recvcount, recvtype,
        )?;
        let block = if is_root {
            check_buf(call, "recvbuf", recvbuf, rc * node.size(), recvtype)?;
            rc * recvtype.size()
        } else {
            sc * sendtype.size()
        };
        if node.serves(block) {
            // SAFETY: caller contract (checked above).
            return unsafe { node.gather(rt, sendbuf, sc, sendtype, recvbuf, rc, recvtype, root) };
        }
    }
    if crate::inter::is_inter(rt, "MPI_Gather", comm)? {
        return unsafe {
            crate::inter::igatherv(
                rt,
                "MPI_Gather",
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
        }?
        .wait(rt);
    }
    let call = "MPI_Gather";
    let ctx = Ctx::new(rt, comm, call)?;
    let root = check_root(call, root, ctx.size)?;
    let is_root = ctx.rank == root;
    let (sc, rc) = gather_checks(
        call, is_root, sendbuf, sendcount, sendtype, recvcount, recvtype,
    )?;
    if is_root {
        check_buf(call, "recvbuf", recvbuf, rc * ctx.size, recvtype)?;
    }
    let p = ctx.size;
    let block = if is_root {
        rc * recvtype.size()
    } else {
        sc * sendtype.size()
    };
    // On one node, small blocks through the shared-memory area (`shmcoll.rs`).
    if p > 1 && block > 0 {
        if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Gather, block)? {
            // SAFETY: caller contract (checked above).
            return unsafe { node.gather(rt, sendbuf, sc, sendtype, recvbuf, rc, recvtype, root) };
        }
    }
    // Across sites: the IMPI-style algorithm (one message per site to the root).
    let sites = if p > 1 {
        crate::impi::sites(&ctx)?
    } else {
        None
    };
    let alg = choose(Coll::Gather, || {
        if sites.is_some() && block < crate::impi::xsize() {
            "sites"
        } else if sites.is_some() {
            "linear"
        } else if block * p < 64 * 1024 && p > 2 {
            "binomial"
        } else {
            "linear"
        }
    });
    if let (Some(h), "sites") = (&sites, alg) {
        let send = match sendbuf {
            SendBuf::Ptr(s) => Some(s),
            SendBuf::InPlace => None,
        };
        // SAFETY: caller contract (checked above).
        return unsafe {
            crate::impi::gather(&ctx, h, send, sc, sendtype, recvbuf, rc, recvtype, root)
        };
    }
    let rext = recvtype.extent();
    let rblock = |r: usize| recvbuf.wrapping_offset(r as isize * rc as isize * rext);
    if alg == "binomial" && p > 1 {
        let v = (ctx.rank + p - root) % p;
        let sub = if v == 0 {
            p
        } else {
            (v & v.wrapping_neg()).min(p - v)
        };
        let mut tmp = vec![0u8; sub * block];
        // SAFETY: the caller vouches for the send buffer / the root's own block.
        unsafe {
            match sendbuf {
                SendBuf::Ptr(s) => {
                    if sc * sendtype.size() != block {
                        return Err(err(
                            ErrorClass::Truncate,
                            format!("{call}: send and receive sizes differ at the root"),
                        ));
                    }
                    sendtype.pack_range(s, sc, 0, &mut tmp[..block]);
                }
                SendBuf::InPlace => recvtype.pack_range(rblock(root), rc, 0, &mut tmp[..block]),
            }
        }
        let mut reqs = Vec::new();
        let mut mask = 1;
        while mask < p {
            if v & mask == 0 {
                let child = v + mask;
                if child < p {
                    let nb = mask.min(p - child);
                    // SAFETY: [mask*block, (mask+nb)*block) lies inside tmp (mask+nb <= sub).
                    reqs.push(unsafe {
                        ctx.irecv(
                            tmp.as_mut_ptr().add(mask * block),
                            nb * block,
                            (child + root) % p,
                            tag::GATHER,
                        )?
                    });
                }
            } else {
                ctx.waitall(&mut reqs)?;
                // SAFETY: tmp outlives the blocking send.
                unsafe {
                    ctx.send(
                        tmp.as_ptr(),
                        sub * block,
                        (v - mask + root) % p,
                        tag::GATHER,
                    )?
                };
                return Ok(());
            }
            mask <<= 1;
        }
        ctx.waitall(&mut reqs)?;
        // Root: vrank j's block belongs to rank (j + root) % p.
        for j in 0..p {
            let r = (j + root) % p;
            if r == root && sendbuf == SendBuf::InPlace {
                continue;
            }
            // SAFETY: the root's receive buffer has room for every block.
            unsafe { recvtype.unpack_range(rblock(r), rc, 0, &tmp[j * block..(j + 1) * block]) };
        }
        return Ok(());
    }
    // Linear.
    if is_root {
        let mut reqs = Vec::new();
        for r in 0..p {
            if r != root {
                // SAFETY: the root's receive buffer has room for block r.
                reqs.push(unsafe { ctx.irecv_typed(rblock(r), rc, recvtype, r, tag::GATHER + 1)? });
            }
        }
        if let SendBuf::Ptr(s) = sendbuf {
            // SAFETY: caller contract.
            unsafe { copy_typed(call, s, sc, sendtype, rblock(root), rc, recvtype)? };
        }
        ctx.waitall(&mut reqs)
    } else if let SendBuf::Ptr(s) = sendbuf {
        // SAFETY: caller contract.
        let r = unsafe { ctx.isend_typed(s, sc, sendtype, root, tag::GATHER + 1)? };
        ctx.waitall(&mut vec![r])
    } else {
        unreachable!("checked")
    }
}

#[allow(clippy::too_many_arguments)]
fn gather_checks(
    call: &str,
    is_root: bool,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvcount: i64,
    recvtype: &TypeRef,
) -> MpiResult<(usize, usize)> {
    let mut sc = 0;
    let mut rc = 0;
    match sendbuf {
        SendBuf::InPlace if !is_root => {
            return Err(err(
                ErrorClass::Buffer,
                format!("{call}: MPI_IN_PLACE is only allowed at the root"),
            ));
        }
        SendBuf::InPlace => {}
        SendBuf::Ptr(s) => {
            sc = check_count(call, sendcount)?;
            check_type(call, sendtype)?;
            check_buf(call, "sendbuf", s, sc, sendtype)?;
        }
    }
    if is_root {
        rc = check_count(call, recvcount)?;
        check_type(call, recvtype)?;
    }
    Ok((sc, rc))
}

/// `MPI_Gatherv` (linear; across sites the site algorithm of `impi_v.rs`). `recvcounts`
/// and `displs` (in elements of `recvtype`) matter
/// only at the root.
///
/// # Safety
/// As [`gather`], with the root's blocks at `recvbuf + displs[i] * extent`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gatherv(
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
) -> MpiResult<()> {
    // On one node: the shared-memory area (blocks too large for a slot go by
    // point-to-point inside it, so the choice does not depend on the counts, which only
    // the root knows); an intercommunicator never has an area.
    if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Gather, 1)? {
        let call = "MPI_Gatherv";
        let p = node.size();
        let root = check_root(call, root, p)?;
        let is_root = node.rank() == root;
        let (sc, _) = gather_checks(call, is_root, sendbuf, sendcount, sendtype, 0, recvtype)?;
        let counts = if is_root {
            let c = check_counts(call, "recvcounts", recvcounts, p)?;
            check_displs(call, "displs", displs, p)?;
            c
        } else {
            Vec::new()
        };
        // SAFETY: caller contract (checked above).
        return unsafe {
            node.gatherv(
                rt, sendbuf, sc, sendtype, recvbuf, &counts, displs, recvtype, root,
            )
        };
    }
    if crate::inter::is_inter(rt, "MPI_Gatherv", comm)? {
        return unsafe {
            crate::inter::igatherv(
                rt,
                "MPI_Gatherv",
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
        }?
        .wait(rt);
    }
    let call = "MPI_Gatherv";
    let ctx = Ctx::new(rt, comm, call)?;
    let root = check_root(call, root, ctx.size)?;
    let is_root = ctx.rank == root;
    let (sc, _) = gather_checks(call, is_root, sendbuf, sendcount, sendtype, 0, recvtype)?;
    // Across sites: short blocks bundled per site, long ones direct (IMPI's XSIZE).
    let sites = if ctx.size > 1 {
        crate::impi::sites(&ctx)?
    } else {
        None
    };
    if let (Some(h), "sites") = (&sites, choose(Coll::Gather, || "sites")) {
        let recv: Vec<crate::impi_v::Spec> = if is_root {
            let counts = check_counts(call, "recvcounts", recvcounts, ctx.size)?;
            check_displs(call, "displs", displs, ctx.size)?;
            let ext = recvtype.extent();
            counts
                .iter()
                .enumerate()
                .map(|(r, &c)| {
                    (
                        recvbuf.wrapping_offset(displs[r] as isize * ext),
                        c,
                        recvtype.clone(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        let send = match sendbuf {
            SendBuf::Ptr(s) => Some(s),
            SendBuf::InPlace => None,
        };
        // SAFETY: caller contract (checked above).
        return unsafe { crate::impi_v::gatherv(&ctx, h, send, sc, sendtype, &recv, root) };
    }
    if !is_root {
        if let SendBuf::Ptr(s) = sendbuf {
            // SAFETY: caller contract.
            let r = unsafe { ctx.isend_typed(s, sc, sendtype, root, tag::GATHER + 2)? };
            return ctx.waitall(&mut vec![r]);
        }
        unreachable!("checked");
    }
    let counts = check_counts(call, "recvcounts", recvcounts, ctx.size)?;
    check_displs(call, "displs", displs, ctx.size)?;
    let ext = recvtype.extent();
    let blk = |r: usize| recvbuf.wrapping_offset(displs[r] as isize * ext);
    let mut reqs = Vec::new();
    for (r, &c) in counts.iter().enumerate() {
        if r != root {
            // SAFETY: the caller vouches for the root's blocks.
            reqs.push(unsafe { ctx.irecv_typed(blk(r), c, recvtype, r, tag::GATHER + 2)? });
        }
    }
    if let SendBuf::Ptr(s) = sendbuf {
        // SAFETY: caller contract.
        unsafe { copy_typed(call, s, sc, sendtype, blk(root), counts[root], recvtype)? };
    }
    ctx.waitall(&mut reqs)
}

fn scatter_checks(
    call: &str,
    is_root: bool,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: &TypeRef,
) -> MpiResult<usize> {
    match recvbuf {
        RecvBuf::InPlace if !is_root => Err(err(
            ErrorClass::Buffer,
            format!("{call}: MPI_IN_PLACE is only allowed at the root"),
        )),
        RecvBuf::InPlace => Ok(0),
        RecvBuf::Ptr(p) => {
            let rc = check_count(call, recvcount)?;
            check_type(call, recvtype)?;
            check_buf(call, "recvbuf", p, rc, recvtype)?;
            Ok(rc)
        }
    }
}

/// `MPI_Scatter`. `sendbuf`, `sendcount` and `sendtype` matter only at the root;
/// `MPI_IN_PLACE` as `recvbuf` only at the root.
///
/// # Safety
/// At the root `size * sendcount` elements of `sendtype` readable at `sendbuf`; room for
/// `recvcount` elements of `recvtype` at `recvbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn scatter(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: RecvBuf,
    recvcount: i64,
    recvtype: &TypeRef,
    root: i32,
    comm: CommId,
) -> MpiResult<()> {
    // The shared-memory fast path when this thread has the area at hand (as in gather).
    if let Some(node) = crate::shmcoll::lean(comm, Coll::Scatter) {
        let call = "MPI_Scatter";
        let p = node.size();
        let root = check_root(call, root, p)?;
        let is_root = node.rank() == root;
        let rc = scatter_checks(call, is_root, recvbuf, recvcount, recvtype)?;
        let block = if is_root {
            let sc = check_count(call, sendcount)?;
            check_type(call, sendtype)?;
            check_buf(call, "sendbuf", sendbuf, sc * p, sendtype)?;
            sc * sendtype.size()
        } else {
            rc * recvtype.size()
        };
        if block > 0 && node.serves(p * block) {
            let sc = if is_root { sendcount as usize } else { 0 };
            let recv = match recvbuf {
                RecvBuf::Ptr(r) => Some(r),
                RecvBuf::InPlace => None,
            };
            // SAFETY: caller contract (checked above).
            return unsafe { node.scatter(rt, sendbuf, sc, sendtype, recv, rc, recvtype, root) };
        }
    }
    if crate::inter::is_inter(rt, "MPI_Scatter", comm)? {
        return unsafe {
            crate::inter::iscatterv(
                rt,
                "MPI_Scatter",
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
        }?
        .wait(rt);
    }
    let call = "MPI_Scatter";
    let ctx = Ctx::new(rt, comm, call)?;
    let root = check_root(call, root, ctx.size)?;
    let is_root = ctx.rank == root;
    let rc = scatter_checks(call, is_root, recvbuf, recvcount, recvtype)?;
    let mut sc = 0;
    if is_root {
        sc = check_count(call, sendcount)?;
        check_type(call, sendtype)?;
        check_buf(call, "sendbuf", sendbuf, sc * ctx.size, sendtype)?;
    }
    let p = ctx.size;
    let block = if is_root {
        sc * sendtype.size()
    } else {
        rc * recvtype.size()
    };
    // On one node, when every block fits one slot: the shared-memory area (`shmcoll.rs`).
    if p > 1 && block > 0 {
        if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Scatter, p * block)? {
            let recv = match recvbuf {
                RecvBuf::Ptr(r) => Some(r),
                RecvBuf::InPlace => None,
            };
            // SAFETY: caller contract (checked above).
            return unsafe { node.scatter(rt, sendbuf, sc, sendtype, recv, rc, recvtype, root) };
        }
    }
    // Across sites: the IMPI-style algorithm (one message per site from the root).
    let sites = if p > 1 {
        crate::impi::sites(&ctx)?
    } else {
        None
    };
    let alg = choose(Coll::Scatter, || {
        if sites.is_some() && block < crate::impi::xsize() {
            "sites"
        } else if sites.is_some() {
            "linear"
        } else if block * p < 64 * 1024 && p > 2 {
            "binomial"
        } else {
            "linear"
        }
    });
    if let (Some(h), "sites") = (&sites, alg) {
        let recv = match recvbuf {
            RecvBuf::Ptr(r) => Some(r),
            RecvBuf::InPlace => None,
        };
        // SAFETY: caller contract (checked above).
        return unsafe {
            crate::impi::scatter(&ctx, h, sendbuf, sc, sendtype, recv, rc, recvtype, root)
        };
    }
    let sext = sendtype.extent();
    let sblock = |r: usize| sendbuf.wrapping_offset(r as isize * sc as isize * sext);
    if alg == "binomial" && p > 1 {
        let v = (ctx.rank + p - root) % p;
        let sub = if v == 0 {
            p
        } else {
            (v & v.wrapping_neg()).min(p - v)
        };
        let mut tmp = vec![0u8; sub * block];
        let mut mask;
        if v == 0 {
            for j in 0..p {
                // SAFETY: the root's send buffer holds every block.
                unsafe {
                    sendtype.pack_range(
                        sblock((j + root) % p),
                        sc,
                        0,
                        &mut tmp[j * block..(j + 1) * block],
                    )
                };
            }
            mask = crate::util::pof2_floor(p - 1).max(1);
            if mask >= p {
                mask >>= 1;
            }
        } else {
            let low = v & v.wrapping_neg();
            // SAFETY: tmp holds `sub` blocks.
            unsafe {
                ctx.recv(
                    tmp.as_mut_ptr(),
                    sub * block,
                    (v - low + root) % p,
                    tag::SCATTER,
                )?
            };
            mask = low >> 1;
        }
        let mut reqs = Vec::new();
        while mask > 0 {
            let child = v + mask;
            if child < p {
                let nb = mask.min(p - child);
                // SAFETY: blocks [mask, mask+nb) of tmp; tmp lives until the waitall.
                reqs.push(unsafe {
                    ctx.isend(
                        tmp.as_ptr().add(mask * block),
                        nb * block,
                        (child + root) % p,
                        tag::SCATTER,
                    )?
                });
            }
            mask >>= 1;
        }
        ctx.waitall(&mut reqs)?;
        if let RecvBuf::Ptr(r) = recvbuf {
            if rc * recvtype.size() != block {
                return Err(err(
                    ErrorClass::Truncate,
                    format!("{call}: send and receive sizes differ"),
                ));
            }
            // SAFETY: the caller's receive buffer has room for `rc` elements.
            unsafe { recvtype.unpack_range(r, rc, 0, &tmp[..block]) };
        }
        return Ok(());
    }
    if is_root {
        let mut reqs = Vec::new();
        for r in 0..p {
            if r != root {
                // SAFETY: the root's send buffer holds block r.
                reqs.push(unsafe {
                    ctx.isend_typed(sblock(r), sc, sendtype, r, tag::SCATTER + 1)?
                });
            }
        }
        if let RecvBuf::Ptr(rb) = recvbuf {
            // SAFETY: caller contract.
            unsafe { copy_typed(call, sblock(root), sc, sendtype, rb, rc, recvtype)? };
        }
        ctx.waitall(&mut reqs)
    } else if let RecvBuf::Ptr(rb) = recvbuf {
        // SAFETY: caller contract.
        let r = unsafe { ctx.irecv_typed(rb, rc, recvtype, root, tag::SCATTER + 1)? };
        ctx.waitall(&mut vec![r])
    } else {
        unreachable!("checked")
    }
}

/// `MPI_Scatterv` (linear). `sendcounts` and `displs` matter only at the root.
///
/// # Safety
/// As [`scatter`], with the root's blocks at `sendbuf + displs[i] * extent`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn scatterv(
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
) -> MpiResult<()> {
    // On one node: the shared-memory area (as in gatherv: blocks that do not fit the
    // root's slot go by point-to-point inside it).
    if let Some(node) = crate::shmcoll::area(rt, comm, Coll::Scatter, 1)? {
        let call = "MPI_Scatterv";
        let p = node.size();
        let root = check_root(call, root, p)?;
        let is_root = node.rank() == root;
        let rc = scatter_checks(call, is_root, recvbuf, recvcount, recvtype)?;
        let counts = if is_root {
            check_type(call, sendtype)?;
            let c = check_counts(call, "sendcounts", sendcounts, p)?;
            check_displs(call, "displs", displs, p)?;
            c
        } else {
            Vec::new()
        };
        let recv = match recvbuf {
            RecvBuf::Ptr(r) => Some(r),
            RecvBuf::InPlace => None,
        };
        // SAFETY: caller contract (checked above).
        return unsafe {
            node.scatterv(
                rt, sendbuf, &counts, displs, sendtype, recv, rc, recvtype, root,
            )
        };
    }
    if crate::inter::is_inter(rt, "MPI_Scatterv", comm)? {
        return unsafe {
            crate::inter::iscatterv(
                rt,
                "MPI_Scatterv",
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
        }?
        .wait(rt);
    }
    let call = "MPI_Scatterv";
    let ctx = Ctx::new(rt, comm, call)?;
    let root = check_root(call, root, ctx.size)?;
    let is_root = ctx.rank == root;
    let rc = scatter_checks(call, is_root, recvbuf, recvcount, recvtype)?;
    // Across sites: short blocks bundled per site, long ones direct (IMPI's XSIZE).
    let sites = if ctx.size > 1 {
        crate::impi::sites(&ctx)?
    } else {
        None
    };
    if let (Some(h), "sites") = (&sites, choose(Coll::Scatter, || "sites")) {
        let send: Vec<crate::impi_v::Spec> = if is_root {
            check_type(call, sendtype)?;
            let counts = check_counts(call, "sendcounts", sendcounts, ctx.size)?;
            check_displs(call, "displs", displs, ctx.size)?;
            let ext = sendtype.extent();
            counts
                .iter()
                .enumerate()
                .map(|(r, &c)| {
                    (
                        sendbuf.wrapping_offset(displs[r] as isize * ext) as *mut u8,
                        c,
                        sendtype.clone(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        let recv = match recvbuf {
            RecvBuf::Ptr(r) => Some(r),
            RecvBuf::InPlace => None,
        };
        // SAFETY: caller contract (checked above).
        return unsafe { crate::impi_v::scatterv(&ctx, h, &send, recv, rc, recvtype, root) };
    }
    if !is_root {
        if let RecvBuf::Ptr(rb) = recvbuf {
            // SAFETY: caller contract.
            let r = unsafe { ctx.irecv_typed(rb, rc, recvtype, root, tag::SCATTER + 2)? };
            return ctx.waitall(&mut vec![r]);
        }
        unreachable!("checked");
    }
    check_type(call, sendtype)?;
    let counts = check_counts(call, "sendcounts", sendcounts, ctx.size)?;
    check_displs(call, "displs", displs, ctx.size)?;
    let ext = sendtype.extent();
    let blk = |r: usize| sendbuf.wrapping_offset(displs[r] as isize * ext);
    let mut reqs = Vec::new();
    for (r, &c) in counts.iter().enumerate() {
        if r != root {
            // SAFETY: the caller vouches for the root's blocks.
            reqs.push(unsafe { ctx.isend_typed(blk(r), c, sendtype, r, tag::SCATTER + 2)? });
        }
    }
    if let RecvBuf::Ptr(rb) = recvbuf {
        // SAFETY: caller contract.
        unsafe { copy_typed(call, blk(root), counts[root], sendtype, rb, rc, recvtype)? };
    }
    ctx.waitall(&mut reqs)
}
