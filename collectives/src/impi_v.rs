//! Gatherv, scatterv, alltoallv and alltoallw across sites (the IMPI collectives' v forms).
//!
//! LAM/MPI defines no IMPI algorithm for them, and the report's pages for them are lost, so
//! they follow the gather/scatter pattern of [`crate::impi`] with IMPI's XSIZE crossover
//! ([`crate::impi::xsize`]): a block shorter than XSIZE that crosses sites travels through
//! the site masters, bundled with the other short blocks of its site (one wide-area message
//! per site, or per pair of sites for all-to-all); a longer block, and every block inside
//! a site, goes directly between its two ranks, typed.
//!
//! The bundles carry the blocks in external32, each packed by its own rank with its own
//! type and unpacked by its own receiver with its own type: a master never needs to know
//! the members' types, and the bytes are canonical whatever the device's data
//! representation (the bundles cross as MPI_BYTE). Block sizes are external32 sizes, which
//! both ends of a block know (their type signatures match), so every rank takes the same
//! per-block decision. Only a site's master lacks its members' sizes: they send them
//! first, inside the site (one small message each, which overlaps the wide-area transfer).

use tsunagi_core::datatype::{external32_size, pack_external32, unpack_external32, TypeRef};
use tsunagi_core::MpiResult;

use crate::impi::itag;
use crate::util::{err, tag, Ctx, Hier};

/// Tags inside a site (Tsunagi's own range, never an IMPI tag): sizes to the master,
/// short blocks to or from the master, and direct typed blocks.
const V_SIZES: i32 = tag::GATHER + 97;
const V_DATA: i32 = tag::GATHER + 98;
const V_DIRECT: i32 = tag::GATHER + 99;

/// A block: address, count, type.
pub(crate) type Spec = (*mut u8, usize, TypeRef);

fn x32_size(call: &str, t: &TypeRef, count: usize) -> MpiResult<usize> {
    external32_size(t, count).map_err(|e| err(e.class, format!("{call}: {}", e.message)))
}

/// # Safety
/// The type map of `count` elements of `t` at `ptr` is readable.
unsafe fn pack_x32(call: &str, ptr: *const u8, count: usize, t: &TypeRef) -> MpiResult<Vec<u8>> {
    let mut out = Vec::new();
    // SAFETY: forwarded caller contract.
    unsafe { pack_external32(t, ptr, count, &mut out) }
        .map_err(|e| err(e.class, format!("{call}: {}", e.message)))?;
    Ok(out)
}

/// # Safety
/// The type map of `count` elements of `t` at `ptr` is writable.
unsafe fn unpack_x32(
    call: &str,
    data: &[u8],
    ptr: *mut u8,
    count: usize,
    t: &TypeRef,
) -> MpiResult<()> {
    // SAFETY: forwarded caller contract.
    unsafe { unpack_external32(t, data, ptr, count) }
        .map(|_| ())
        .map_err(|e| err(e.class, format!("{call}: {}", e.message)))
}

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn from_u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Ask every other member of this site for its sizes (`per` u64 each): returns them per
/// member in site order (this rank's own row from `mine`). Master only.
fn sizes_from_members(ctx: &Ctx, h: &Hier, per: usize, mine: &[u64]) -> MpiResult<Vec<Vec<u64>>> {
    let members = &h.members[h.my_node];
    let mut raw: Vec<Vec<u8>> = members.iter().map(|_| vec![0u8; per * 8]).collect();
    let mut reqs = Vec::new();
    for (k, &r) in members.iter().enumerate() {
        if r != ctx.rank {
            // SAFETY: `raw[k]` has `per * 8` bytes and outlives the waitall.
            reqs.push(unsafe { ctx.irecv(raw[k].as_mut_ptr(), per * 8, r, V_SIZES)? });
        }
    }
    ctx.waitall(&mut reqs)?;
    Ok(members
        .iter()
        .zip(raw)
        .map(|(&r, b)| {
            if r == ctx.rank {
                mine.to_vec()
            } else {
                from_u64s(&b)
            }
        })
        .collect())
}

/// IMPI-style gatherv across sites. `send` is `None` for MPI_IN_PLACE at the root; at the
/// root `recv[r]` is rank r's block.
///
/// # Safety
/// `send` holds `sc` elements of `sendtype`; at the root every `recv` block is writable.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gatherv(
    ctx: &Ctx,
    h: &Hier,
    send: Option<*const u8>,
    sc: usize,
    sendtype: &TypeRef,
    recv: &[Spec],
    root: usize,
) -> MpiResult<()> {
    let call = ctx.call;
    let me = ctx.rank;
    let xs = crate::impi::xsize();
    let root_site = h.node_of[root];
    let site = h.my_node;
    if me == root {
        let sizes: Vec<usize> = recv
            .iter()
            .map(|(_, c, t)| x32_size(call, t, *c))
            .collect::<MpiResult<_>>()?;
        let mut reqs = Vec::new();
        for (r, (ptr, c, t)) in recv.iter().enumerate() {
            if r != root && (h.node_of[r] == root_site || sizes[r] >= xs) {
                // SAFETY: caller contract: block r is writable until the waitall.
                reqs.push(unsafe { ctx.irecv_typed(*ptr, *c, t, r, V_DIRECT)? });
            }
        }
        let mut bundles = Vec::new();
        for (s, ranks) in h.members.iter().enumerate() {
            let short: Vec<usize> = ranks.iter().copied().filter(|&r| sizes[r] < xs).collect();
            if s == root_site || short.is_empty() {
                continue;
            }
            let total: usize = short.iter().map(|&r| sizes[r]).sum();
            let mut b = vec![0u8; total];
            // SAFETY: `b` has `total` bytes and stays alive (in `bundles`) until the waitall.
            reqs.push(unsafe { ctx.irecv(b.as_mut_ptr(), total, h.leaders[s], itag::GATHERV)? });
            bundles.push((b, short));
        }
        if let Some(s) = send {
            let (ptr, c, t) = &recv[root];
            // SAFETY: caller contract; the root's own block, sizes checked by the copy.
            unsafe { crate::util::copy_typed(call, s, sc, sendtype, *ptr, *c, t)? };
        }
        ctx.waitall(&mut reqs)?;
        for (b, short) in &bundles {
            let mut at = 0;
            for &r in short {
                let (ptr, c, t) = &recv[r];
                // SAFETY: block r is writable (caller contract).
                unsafe { unpack_x32(call, &b[at..at + sizes[r]], *ptr, *c, t)? };
                at += sizes[r];
            }
        }
        return Ok(());
    }
    let Some(s) = send else {
        unreachable!("MPI_IN_PLACE is checked to be the root's")
    };
    let mine = x32_size(call, sendtype, sc)?;
    if site == root_site || mine >= xs {
        // SAFETY: caller contract.
        let r = unsafe { ctx.isend_typed(s, sc, sendtype, root, V_DIRECT)? };
        if site == root_site {
            return ctx.waitall(&mut vec![r]);
        }
        let mut reqs = vec![r];
        if h.is_leader() {
            // The master still bundles its site's short blocks.
            let out = bundle_gathered(ctx, h, mine as u64, None, xs)?;
            if let Some(out) = out {
                // SAFETY: `out` outlives the waitall.
                reqs.push(unsafe { ctx.isend(out.as_ptr(), out.len(), root, itag::GATHERV)? });
                ctx.waitall(&mut reqs)?;
                return Ok(());
            }
        } else {
            let size = u64s(&[mine as u64]);
            // SAFETY: `size` outlives the blocking send.
            unsafe { ctx.send(size.as_ptr(), 8, h.leaders[site], V_SIZES)? };
        }
        return ctx.waitall(&mut reqs);
    }
    // SAFETY: caller contract.
    let packed = unsafe { pack_x32(call, s, sc, sendtype)? };
    if !h.is_leader() {
        let size = u64s(&[mine as u64]);
        let master = h.leaders[site];
        // SAFETY: both buffers outlive the waitall.
        let mut reqs = unsafe {
            vec![
                ctx.isend(size.as_ptr(), 8, master, V_SIZES)?,
                ctx.isend(packed.as_ptr(), packed.len(), master, V_DATA)?,
            ]
        };
        return ctx.waitall(&mut reqs);
    }
    let out = bundle_gathered(ctx, h, mine as u64, Some(packed), xs)?.expect("own block");
    // SAFETY: `out` outlives the blocking send.
    unsafe { ctx.send(out.as_ptr(), out.len(), root, itag::GATHERV) }
}

/// A master's share of [`gatherv`]: its members' sizes, then their short blocks, bundled in
/// site order with its own (`own`, if short). `None` if the site has no short block.
fn bundle_gathered(
    ctx: &Ctx,
    h: &Hier,
    own_size: u64,
    own: Option<Vec<u8>>,
    xs: usize,
) -> MpiResult<Option<Vec<u8>>> {
    let sizes = sizes_from_members(ctx, h, 1, &[own_size])?;
    let members = &h.members[h.my_node];
    let mut parts: Vec<Vec<u8>> = Vec::with_capacity(members.len());
    let mut reqs = Vec::new();
    let mut any = false;
    for (k, &r) in members.iter().enumerate() {
        let n = sizes[k][0] as usize;
        if n >= xs {
            parts.push(Vec::new());
            continue;
        }
        any = true;
        if r == ctx.rank {
            parts.push(own.clone().unwrap_or_default());
        } else {
            parts.push(vec![0u8; n]);
            // SAFETY: `parts[k]` has `n` bytes; no push reallocates an inner buffer.
            reqs.push(unsafe { ctx.irecv(parts[k].as_mut_ptr(), n, r, V_DATA)? });
        }
    }
    ctx.waitall(&mut reqs)?;
    Ok(any.then(|| parts.concat()))
}

/// IMPI-style scatterv across sites, the mirror of [`gatherv`]. At the root `send[r]` is
/// rank r's block; `recv` is `None` for MPI_IN_PLACE at the root.
///
/// # Safety
/// At the root every `send` block is readable; `recv` has room for `rc` elements of
/// `recvtype`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatterv(
    ctx: &Ctx,
    h: &Hier,
    send: &[Spec],
    recv: Option<*mut u8>,
    rc: usize,
    recvtype: &TypeRef,
    root: usize,
) -> MpiResult<()> {
    let call = ctx.call;
    let me = ctx.rank;
    let xs = crate::impi::xsize();
    let root_site = h.node_of[root];
    let site = h.my_node;
    if me == root {
        let sizes: Vec<usize> = send
            .iter()
            .map(|(_, c, t)| x32_size(call, t, *c))
            .collect::<MpiResult<_>>()?;
        let mut reqs = Vec::new();
        let mut bundles = Vec::new();
        for (s, ranks) in h.members.iter().enumerate() {
            let short: Vec<usize> = ranks.iter().copied().filter(|&r| sizes[r] < xs).collect();
            if s == root_site || short.is_empty() {
                continue;
            }
            let mut b = Vec::new();
            for &r in &short {
                let (ptr, c, t) = &send[r];
                // SAFETY: caller contract: block r is readable.
                b.extend(unsafe { pack_x32(call, *ptr, *c, t)? });
            }
            bundles.push((b, h.leaders[s]));
        }
        for (b, master) in &bundles {
            // SAFETY: `b` outlives the waitall.
            reqs.push(unsafe { ctx.isend(b.as_ptr(), b.len(), *master, itag::SCATTERV)? });
        }
        for (r, (ptr, c, t)) in send.iter().enumerate() {
            if r != root && (h.node_of[r] == root_site || sizes[r] >= xs) {
                // SAFETY: caller contract: block r is readable until the waitall.
                reqs.push(unsafe { ctx.isend_typed(*ptr, *c, t, r, V_DIRECT)? });
            }
        }
        if let Some(rp) = recv {
            let (ptr, c, t) = &send[root];
            // SAFETY: caller contract; the root's own block.
            unsafe { crate::util::copy_typed(call, *ptr, *c, t, rp, rc, recvtype)? };
        }
        return ctx.waitall(&mut reqs);
    }
    let Some(rp) = recv else {
        unreachable!("MPI_IN_PLACE is checked to be the root's")
    };
    let mine = x32_size(call, recvtype, rc)?;
    let mut reqs = Vec::new();
    if site == root_site || mine >= xs {
        // SAFETY: caller contract.
        reqs.push(unsafe { ctx.irecv_typed(rp, rc, recvtype, root, V_DIRECT)? });
        if site == root_site {
            return ctx.waitall(&mut reqs);
        }
    }
    if !h.is_leader() {
        let size = u64s(&[mine as u64]);
        // SAFETY: `size` outlives the waitall.
        reqs.push(unsafe { ctx.isend(size.as_ptr(), 8, h.leaders[site], V_SIZES)? });
        let mut got = vec![0u8; if mine < xs { mine } else { 0 }];
        if mine < xs {
            // SAFETY: `got` has `mine` bytes and outlives the waitall.
            reqs.push(unsafe { ctx.irecv(got.as_mut_ptr(), mine, h.leaders[site], V_DATA)? });
        }
        ctx.waitall(&mut reqs)?;
        if mine < xs {
            // SAFETY: caller contract.
            unsafe { unpack_x32(call, &got, rp, rc, recvtype)? };
        }
        return Ok(());
    }
    // Master: the short blocks of the site arrive in one bundle, in site order.
    let sizes = sizes_from_members(ctx, h, 1, &[mine as u64])?;
    let members = &h.members[site];
    let short: Vec<(usize, usize)> = members
        .iter()
        .zip(&sizes)
        .map(|(&r, v)| (r, v[0] as usize))
        .filter(|&(_, n)| n < xs)
        .collect();
    if !short.is_empty() {
        let total: usize = short.iter().map(|&(_, n)| n).sum();
        let mut b = vec![0u8; total];
        // SAFETY: `b` has `total` bytes.
        unsafe { ctx.recv(b.as_mut_ptr(), total, root, itag::SCATTERV)? };
        let mut at = 0;
        let mut sends = Vec::new();
        for &(r, n) in &short {
            if r == me {
                // SAFETY: caller contract.
                unsafe { unpack_x32(call, &b[at..at + n], rp, rc, recvtype)? };
            } else {
                // SAFETY: `b` outlives the waitall below.
                sends.push(unsafe { ctx.isend(b.as_ptr().add(at), n, r, V_DATA)? });
            }
            at += n;
        }
        ctx.waitall(&mut sends)?;
    }
    ctx.waitall(&mut reqs)
}

/// IMPI-style alltoallv / alltoallw across sites: `send[j]` and `recv[j]` are the blocks to
/// and from rank j. Blocks inside a site and blocks of XSIZE or more go directly, typed;
/// the short ones that cross sites meet at their site's master, cross once per ordered
/// pair of sites (master to master, all pairs at once), and are handed out by the other
/// site's master.
///
/// # Safety
/// Every send block is readable and every receive block writable for its elements.
pub(crate) unsafe fn alltoallv(ctx: &Ctx, h: &Hier, send: &[Spec], recv: &[Spec]) -> MpiResult<()> {
    let call = ctx.call;
    let p = ctx.size;
    let me = ctx.rank;
    let xs = crate::impi::xsize();
    let site = h.my_node;
    let ssize: Vec<usize> = send
        .iter()
        .map(|(_, c, t)| x32_size(call, t, *c))
        .collect::<MpiResult<_>>()?;
    let rsize: Vec<usize> = recv
        .iter()
        .map(|(_, c, t)| x32_size(call, t, *c))
        .collect::<MpiResult<_>>()?;
    let bundled = |a: usize, b: usize, n: usize| h.node_of[a] != h.node_of[b] && n < xs;
    // Direct blocks first (all non-blocking), the own block by a local copy.
    let mut reqs = Vec::new();
    for j in 0..p {
        if j == me {
            continue;
        }
        if !bundled(j, me, rsize[j]) {
            let (ptr, c, t) = &recv[j];
            // SAFETY: caller contract: receive block j is writable until the waitall.
            reqs.push(unsafe { ctx.irecv_typed(*ptr, *c, t, j, V_DIRECT)? });
        }
    }
    for j in 0..p {
        if j != me && !bundled(me, j, ssize[j]) {
            let (ptr, c, t) = &send[j];
            // SAFETY: caller contract: send block j is readable until the waitall.
            reqs.push(unsafe { ctx.isend_typed(*ptr, *c, t, j, V_DIRECT)? });
        }
    }
    {
        let (sp, scount, st) = &send[me];
        let (rp, rcount, rt) = &recv[me];
        // SAFETY: caller contract: the own blocks (disjoint: in place sends from copies).
        unsafe { crate::util::copy_typed(call, *sp, *scount, st, *rp, *rcount, rt)? };
    }
    // My short cross-site blocks, packed in destination order.
    let mut out = Vec::new();
    for j in 0..p {
        if j != me && bundled(me, j, ssize[j]) {
            let (ptr, c, t) = &send[j];
            // SAFETY: caller contract.
            out.extend(unsafe { pack_x32(call, *ptr, *c, t)? });
        }
    }
    let incoming: usize = (0..p)
        .filter(|&j| j != me && bundled(j, me, rsize[j]))
        .map(|j| rsize[j])
        .sum();
    let master = h.leaders[site];
    let mut got = vec![0u8; incoming];
    if me != master {
        let sizes: Vec<u64> = ssize.iter().chain(&rsize).map(|&n| n as u64).collect();
        let sizes = u64s(&sizes);
        // SAFETY: the buffers outlive the waitall.
        unsafe {
            reqs.push(ctx.isend(sizes.as_ptr(), sizes.len(), master, V_SIZES)?);
            reqs.push(ctx.isend(out.as_ptr(), out.len(), master, V_DATA)?);
            reqs.push(ctx.irecv(got.as_mut_ptr(), incoming, master, V_DATA + 256)?);
        }
        ctx.waitall(&mut reqs)?;
    } else {
        let mine: Vec<u64> = ssize.iter().chain(&rsize).map(|&n| n as u64).collect();
        got = relay_as_master(ctx, h, &mine, out, xs)?;
        ctx.waitall(&mut reqs)?;
    }
    let mut at = 0;
    for j in 0..p {
        if j != me && bundled(j, me, rsize[j]) {
            let (ptr, c, t) = &recv[j];
            // SAFETY: caller contract: receive block j is writable.
            unsafe { unpack_x32(call, &got[at..at + rsize[j]], *ptr, *c, t)? };
            at += rsize[j];
        }
    }
    Ok(())
}

/// The master's part of [`alltoallv`]: collect the members' sizes (send sizes then receive
/// sizes, `2p` each) and short blocks, exchange one bundle with every other site's master,
/// hand each member its short blocks (by source rank), and return the master's own.
fn relay_as_master(
    ctx: &Ctx,
    h: &Hier,
    mine: &[u64],
    own_out: Vec<u8>,
    xs: usize,
) -> MpiResult<Vec<u8>> {
    let p = ctx.size;
    let site = h.my_node;
    let members = &h.members[site];
    let n = members.len();
    let sizes = sizes_from_members(ctx, h, 2 * p, mine)?;
    let short = |a: usize, b: usize, len: u64| h.node_of[a] != h.node_of[b] && (len as usize) < xs;
    // Each member's outgoing short blocks (destination order).
    let mut outs: Vec<Vec<u8>> = Vec::with_capacity(n);
    let mut reqs = Vec::new();
    for (k, &r) in members.iter().enumerate() {
        if r == ctx.rank {
            outs.push(own_out.clone());
            continue;
        }
        let len: u64 = (0..p)
            .filter(|&j| short(r, j, sizes[k][j]))
            .map(|j| sizes[k][j])
            .sum();
        outs.push(vec![0u8; len as usize]);
        // SAFETY: `outs[k]` has `len` bytes; later pushes move only the outer vector.
        reqs.push(unsafe { ctx.irecv(outs[k].as_mut_ptr(), len as usize, r, V_DATA)? });
    }
    ctx.waitall(&mut reqs)?;
    // Offsets of block (member k -> rank j) inside outs[k].
    let offset = |k: usize, j: usize| -> usize {
        let r = members[k];
        (0..j)
            .filter(|&x| short(r, x, sizes[k][x]))
            .map(|x| sizes[k][x] as usize)
            .sum()
    };
    // One bundle per other site: for each of our members (site order), its blocks for the
    // other site's ranks (their site order); and the bundle we receive from it, whose
    // length our members' receive sizes tell.
    let mut to_send = Vec::new();
    let mut to_recv = Vec::new();
    for (s, theirs) in h.members.iter().enumerate() {
        if s == site {
            continue;
        }
        let mut b = Vec::new();
        for (k, &r) in members.iter().enumerate() {
            for &j in theirs {
                let len = sizes[k][j] as usize;
                if short(r, j, sizes[k][j]) {
                    let at = offset(k, j);
                    b.extend_from_slice(&outs[k][at..at + len]);
                }
            }
        }
        let mut inlen = 0usize;
        for &i in theirs {
            for (k, &r) in members.iter().enumerate() {
                let len = sizes[k][p + i];
                if short(i, r, len) {
                    inlen += len as usize;
                }
            }
        }
        to_send.push((b, h.leaders[s]));
        to_recv.push((vec![0u8; inlen], h.leaders[s], s));
    }
    let mut reqs = Vec::new();
    for (b, m, _) in to_recv.iter_mut() {
        let len = b.len();
        // SAFETY: each bundle buffer outlives the waitall.
        reqs.push(unsafe { ctx.irecv(b.as_mut_ptr(), len, *m, itag::ALLTOALLV)? });
    }
    for (b, m) in &to_send {
        // SAFETY: as above.
        reqs.push(unsafe { ctx.isend(b.as_ptr(), b.len(), *m, itag::ALLTOALLV)? });
    }
    ctx.waitall(&mut reqs)?;
    // Received bundles, source-site-major: for each source rank i (its site order), for
    // each of our members k: block i -> k. Cut them up per member, by source rank.
    let mut pieces: Vec<Vec<(usize, Vec<u8>)>> = vec![Vec::new(); n];
    for (b, _, s) in &to_recv {
        let mut at = 0;
        for &i in &h.members[*s] {
            for (k, &r) in members.iter().enumerate() {
                let len = sizes[k][p + i];
                if short(i, r, len) {
                    pieces[k].push((i, b[at..at + len as usize].to_vec()));
                    at += len as usize;
                }
            }
        }
    }
    let mut deliveries: Vec<Vec<u8>> = Vec::with_capacity(n);
    for mut ps in pieces {
        ps.sort_by_key(|(i, _)| *i);
        deliveries.push(ps.into_iter().flat_map(|(_, v)| v).collect());
    }
    let mut reqs = Vec::new();
    let mut own = Vec::new();
    for (k, &r) in members.iter().enumerate() {
        if r == ctx.rank {
            own = std::mem::take(&mut deliveries[k]);
        } else {
            let d = &deliveries[k];
            // SAFETY: `deliveries` outlives the waitall and is not modified meanwhile.
            reqs.push(unsafe { ctx.isend(d.as_ptr(), d.len(), r, V_DATA + 256)? });
        }
    }
    ctx.waitall(&mut reqs)?;
    Ok(own)
}
