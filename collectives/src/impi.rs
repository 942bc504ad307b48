//! The IMPI collective algorithms, used for every communicator whose ranks are on more
//! than one site (IMPI client): each site has one *master*, its lowest rank in the
//! communicator (masters numbered in rank order); the collective runs among the masters
//! (linear up to [`MAXLINEAR`] masters, a hypercube or binomial tree above) and inside each
//! site with the site's own algorithms.
//!
//! Barrier, bcast, reduce and allreduce are wire-compatible with LAM/MPI 7.1.4's IMPI
//! module (`share/ssi/coll/impi/`), the one independent IMPI client: the same messages
//! between the same ranks with the same tags. Barrier and bcast travel on the
//! communicator's collective context (IMPI's "context id + 1"); LAM's reduce never
//! switches to it, so the inter-site reduce messages travel on the point-to-point context
//! with tag 190, as LAM's do (`TSUNAGI_IMPI_REDUCE_CONTEXT=coll` moves them to the
//! collective context, for jobs without LAM that want user receives with `MPI_ANY_TAG`
//! never to see them). Allreduce is reduce to rank 0 then bcast from rank 0, as in LAM.
//! Inter-site messages are typed (the device converts to its data representation); the
//! phases inside a site run on packed bytes with Tsunagi's own tags, which are multiples
//! of 256 and never equal an IMPI tag (110 to 230).
//!
//! LAM has no IMPI algorithms for the other collectives. Here: gather and scatter are
//! hierarchical (blocks meet at each site's master, one typed message per site crosses to
//! or from the root), and so is alltoall (one message per pair of sites and direction,
//! between their masters), for blocks shorter than IMPI's XSIZE (`xsize()`; longer blocks
//! go directly); gatherv, scatterv, alltoallv and alltoallw bundle their short blocks per
//! site the same way, in external32, deciding per block (`impi_v.rs`), allgather is
//! gather to rank 0 then bcast (as LAM's basic module), reduce_scatter is reduce to rank 0
//! then scatterv, and scan is a chain in rank order (tag 200) so that non-commutative ops
//! combine in order.

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{MpiResult, ReqId, SendMode};

use crate::op::{Op, Scratch};
use crate::util::{coll_irecv, coll_isend, copy_bytes, tag, Ctx, Hier, Packed};

/// Number of masters up to which the algorithms among masters are linear, by default
/// (IMPI's C_COLL_MAXLINEAR default; LAM compiles it in as `IMPI_MAX_LINEAR_*` and uses
/// `nmasters <= 4`).
pub const MAXLINEAR: usize = 4;

/// IMPI's default C_COLL_XSIZE: blocks of at least this many bytes take the "long"
/// protocols.
pub const XSIZE: usize = 1024;

/// The job's agreed C_COLL_MAXLINEAR (the join records it; [`MAXLINEAR`] without one).
pub(crate) fn maxlinear() -> usize {
    tsunagi_p2p::device::grid_coll_params().map_or(MAXLINEAR, |p| p.maxlinear)
}

/// The job's agreed C_COLL_XSIZE (the join records it; [`XSIZE`] without one).
///
/// The report defines only the label ("the minimum number of data bytes for which relevant
/// collective calls will use long protocols"), and LAM negotiates it but never uses it.
/// Here it is the crossover of the rooted and all-to-all collectives across sites: a
/// rank's block (in external32 bytes for the v forms, packed bytes otherwise) shorter than
/// XSIZE travels through the site masters, bundled with its site's other short blocks
/// (one wide-area message per site instead of one per rank); a block of XSIZE or more goes
/// straight between its two ranks, typed (bundling it would only add a copy and a hop).
/// Every rank decides per block from sizes both ends know, so all agree without a message.
pub(crate) fn xsize() -> usize {
    tsunagi_p2p::device::grid_coll_params().map_or(XSIZE, |p| p.xsize)
}

/// IMPI's collective tags (the final report and LAM's `impi.h`).
pub mod itag {
    pub const BARRIER: i32 = 110;
    pub const BCAST: i32 = 120;
    pub const GATHER: i32 = 130;
    pub const GATHERV: i32 = 140;
    pub const SCATTER: i32 = 150;
    pub const SCATTERV: i32 = 160;
    pub const ALLTOALL: i32 = 170;
    pub const ALLTOALLV: i32 = 180;
    pub const REDUCE: i32 = 190;
    pub const SCAN: i32 = 200;
}

/// Tags of the phases inside a site (Tsunagi's own range; never an IMPI tag).
const LOCAL_BARRIER: i32 = tag::BARRIER + 96;
const LOCAL_BCAST: i32 = tag::BCAST + 96;
const LOCAL_REDUCE: i32 = tag::REDUCE + 96;
const LOCAL_GATHER: i32 = tag::GATHER + 96;
const LOCAL_SCATTER: i32 = tag::SCATTER + 96;
const LOCAL_ALLTOALL: i32 = tag::ALLTOALL + 96;

/// The site structure of the call's communicator when it spans several sites: sites in
/// the order of their lowest rank (the master order), each site's ranks ascending.
pub(crate) fn sites(ctx: &Ctx) -> MpiResult<Option<Hier>> {
    if crate::wan::mode() == crate::wan::Mode::Flat {
        return Ok(None); // TSUNAGI_WAN_COLL=flat: the ordinary algorithms (collectives/src/wan.rs)
    }
    let map = ctx.rt.site_map();
    if map.iter().all(|&s| s == map[0]) {
        return Ok(None);
    }
    let group = ctx.rt.comm_group(ctx.comm)?;
    let of_rank: Vec<u32> = group
        .world_ranks()
        .iter()
        .map(|&w| map[w as usize])
        .collect();
    if of_rank.iter().all(|&s| s == of_rank[0]) {
        return Ok(None);
    }
    Ok(Some(Hier::new(&of_rank, ctx.rank)))
}

/// Whether a communicator spans sites (the IMPI algorithms apply).
pub(crate) fn spans_sites(ctx: &Ctx) -> MpiResult<bool> {
    Ok(sites(ctx)?.is_some())
}

/// Smallest `d` with `2^d >= n` (LAM's `lam_cubedim`).
fn cubedim(n: usize) -> u32 {
    let mut d = 0;
    while (1usize << d) < n {
        d += 1;
    }
    d
}

/// Index of the highest bit of `v` below bit `dim`, or -1 (LAM's `lam_hibit`).
fn hibit(v: usize, dim: u32) -> i32 {
    (0..dim as i32)
        .rev()
        .find(|&i| v & (1 << i) != 0)
        .unwrap_or(-1)
}

/// Where inter-site reduce messages travel.
fn reduce_on_pt2pt() -> bool {
    !matches!(
        std::env::var("TSUNAGI_IMPI_REDUCE_CONTEXT").as_deref(),
        Ok("coll")
    )
}

/// Typed inter-site transfers: on the collective context, or (reduce, as LAM) on the
/// point-to-point one.
struct Wire<'a, 'c> {
    ctx: &'a Ctx<'c>,
    pt2pt: bool,
}

impl Wire<'_, '_> {
    /// # Safety
    /// The type map of `count` elements at `buf` stays readable until completion.
    unsafe fn isend(
        &self,
        buf: *const u8,
        count: usize,
        dtype: &TypeRef,
        dest: usize,
        tag: i32,
    ) -> MpiResult<ReqId> {
        let c = self.ctx;
        // SAFETY: forwarded caller contract.
        unsafe {
            if self.pt2pt {
                let (buf, count) = nonempty(buf, count, dtype);
                c.rt.isend(
                    c.call,
                    buf,
                    count as i64,
                    dtype,
                    dest as i32,
                    tag,
                    c.comm,
                    SendMode::Standard,
                )
            } else {
                coll_isend(c.rt, buf, count, dtype, dest, tag, c.comm)
            }
        }
    }

    /// # Safety
    /// The type map of `count` elements at `buf` stays writable until completion.
    unsafe fn irecv(
        &self,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        src: usize,
        tag: i32,
    ) -> MpiResult<ReqId> {
        let c = self.ctx;
        // SAFETY: forwarded caller contract.
        unsafe {
            if self.pt2pt {
                let (buf, count) = nonempty(buf, count, dtype);
                c.rt.irecv(c.call, buf, count as i64, dtype, src as i32, tag, c.comm)
            } else {
                coll_irecv(c.rt, buf, count, dtype, src, tag, c.comm)
            }
        }
    }

    /// Send `count` packed elements at `w` as `count` elements of `dtype`.
    ///
    /// # Safety
    /// `w` holds `count * dtype.size()` readable bytes.
    unsafe fn send_packed(
        &self,
        w: *const u8,
        count: usize,
        dtype: &TypeRef,
        dest: usize,
        tag: i32,
    ) -> MpiResult<()> {
        let mut scratch;
        let base = match dtype.contiguous_offset() {
            // A contiguous type's packed stream is its memory layout shifted by `off`.
            Some(off) => w.wrapping_offset(-off),
            None => {
                scratch = Scratch::new(count, dtype);
                let n = count * dtype.size();
                // SAFETY: `w` has `n` bytes; the scratch spans the type map.
                unsafe {
                    dtype.unpack_range(scratch.base(), count, 0, std::slice::from_raw_parts(w, n))
                };
                scratch.base() as *const u8
            }
        };
        // SAFETY: `base` is the type map of the data (user memory or scratch), alive until
        // the wait below.
        let r = unsafe { self.isend(base, count, dtype, dest, tag)? };
        self.ctx.waitall(&mut vec![r])
    }

    /// Receive `count` elements of `dtype` into the packed stream at `w`.
    ///
    /// # Safety
    /// `w` holds `count * dtype.size()` writable bytes.
    unsafe fn recv_packed(
        &self,
        w: *mut u8,
        count: usize,
        dtype: &TypeRef,
        src: usize,
        tag: i32,
    ) -> MpiResult<()> {
        match dtype.contiguous_offset() {
            Some(off) => {
                // SAFETY: as in send_packed.
                let r = unsafe { self.irecv(w.wrapping_offset(-off), count, dtype, src, tag)? };
                self.ctx.waitall(&mut vec![r])
            }
            None => {
                let mut scratch = Scratch::new(count, dtype);
                // SAFETY: the scratch spans the type map of `count` elements.
                let r = unsafe { self.irecv(scratch.base(), count, dtype, src, tag)? };
                self.ctx.waitall(&mut vec![r])?;
                let n = count * dtype.size();
                // SAFETY: `w` has `n` writable bytes.
                unsafe {
                    dtype.pack_range(
                        scratch.base(),
                        count,
                        0,
                        std::slice::from_raw_parts_mut(w, n),
                    )
                };
                Ok(())
            }
        }
    }
}

/// A valid address for an empty point-to-point transfer (MPI lets empty buffers be NULL).
fn nonempty<T>(buf: *const T, count: usize, dtype: &TypeRef) -> (*mut u8, usize) {
    if count == 0 || dtype.size() == 0 {
        (std::ptr::NonNull::<u128>::dangling().as_ptr() as *mut u8, 0)
    } else {
        (buf as *mut u8, count)
    }
}

/// IMPI barrier (report 4.10, LAM `lam_ssi_coll_impi_barrier`): site barrier; masters
/// linear through master 0 (up to MAXLINEAR) or a hypercube, zero-byte messages with
/// tag 110 on the collective context; site barrier.
pub(crate) fn barrier(ctx: &Ctx, h: &Hier) -> MpiResult<()> {
    let local = h.local_team();
    crate::barrier::dissemination(ctx, &local, LOCAL_BARRIER)?;
    if h.is_leader() {
        let masters = &h.leaders;
        let nm = masters.len();
        let me = h.my_node;
        let mut z = [0u8; 2];
        let zs = z.as_ptr();
        let zr = z.as_mut_ptr().wrapping_add(1);
        // SAFETY (every transfer below): zero bytes at addresses inside `z`.
        if nm <= maxlinear() {
            if me == 0 {
                for &m in &masters[1..] {
                    unsafe { ctx.recv(zr, 0, m, itag::BARRIER)? };
                }
                for &m in &masters[1..] {
                    unsafe { ctx.send(zs, 0, m, itag::BARRIER)? };
                }
            } else {
                unsafe {
                    ctx.send(zs, 0, masters[0], itag::BARRIER)?;
                    ctx.recv(zr, 0, masters[0], itag::BARRIER)?;
                }
            }
        } else {
            let dim = cubedim(nm) as i32;
            let hb = hibit(me, dim as u32);
            // Children: me | 2^i for i above my high bit.
            for i in ((hb + 1)..dim).rev() {
                let peer = me | (1 << i);
                if peer < nm {
                    unsafe { ctx.recv(zr, 0, masters[peer], itag::BARRIER)? };
                }
            }
            if me > 0 {
                let parent = masters[me & !(1 << hb)];
                unsafe {
                    ctx.send(zs, 0, parent, itag::BARRIER)?;
                    ctx.recv(zr, 0, parent, itag::BARRIER)?;
                }
            }
            // LAM computes these children from its comm rank instead of its master
            // number (`myrank | mask`); the same for the masters of MPI_COMM_WORLD only
            // when every client has one process. This is the report's version.
            for i in (hb + 1)..dim {
                let peer = me | (1 << i);
                if peer < nm {
                    unsafe { ctx.send(zs, 0, masters[peer], itag::BARRIER)? };
                }
            }
        }
    }
    crate::barrier::dissemination(ctx, &local, LOCAL_BARRIER)
}

/// IMPI bcast (report 4.11, LAM `lam_ssi_coll_impi_bcast`): the root and the masters of
/// the other sites (linear from the root, or a binomial tree over master numbers relative
/// to the root's site, the root standing in for its site's master), typed, tag 120 on
/// the collective context; then inside each site from the root (its own site) or the
/// master.
///
/// # Safety
/// `buf` holds (root) or has room for `count` elements of `dtype`.
pub(crate) unsafe fn bcast(
    ctx: &Ctx,
    h: &Hier,
    buf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    root: usize,
) -> MpiResult<()> {
    let me = ctx.rank;
    let local_to_root = h.node_of[me] == h.node_of[root];
    if me == root || (h.is_leader() && !local_to_root) {
        // SAFETY: forwarded caller contract.
        unsafe { master_bcast(ctx, h, buf, count, dtype, root)? };
    }
    let local = h.local_team();
    let local_root = h.local_root(root);
    let bytes = count * dtype.size();
    if local.len() > 1 && bytes > 0 {
        let idx = local
            .ranks
            .iter()
            .position(|&r| r == local_root)
            .expect("member");
        // SAFETY: caller contract; the local root's buffer holds the data by now.
        let view = unsafe { Packed::new(buf, count, dtype, me == local_root) };
        crate::bcast::binomial(ctx, &local, view.ptr, bytes, idx, LOCAL_BCAST)?;
        if me != local_root {
            // SAFETY: caller contract.
            unsafe { view.finish() };
        }
    }
    Ok(())
}

/// # Safety
/// As [`bcast`].
unsafe fn master_bcast(
    ctx: &Ctx,
    h: &Hier,
    buf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    root: usize,
) -> MpiResult<()> {
    let wire = Wire { ctx, pt2pt: false };
    let masters = &h.leaders;
    let nm = masters.len();
    let me = ctx.rank;
    let rootnum = h.node_of[root];
    let mut reqs = Vec::new();
    if nm <= maxlinear() {
        if me == root {
            for (i, &m) in masters.iter().enumerate() {
                if i != rootnum {
                    // SAFETY: caller contract; waited for below.
                    reqs.push(unsafe { wire.isend(buf, count, dtype, m, itag::BCAST)? });
                }
            }
        } else {
            // SAFETY: caller contract.
            reqs.push(unsafe { wire.irecv(buf, count, dtype, root, itag::BCAST)? });
        }
        return ctx.waitall(&mut reqs);
    }
    let mynum = h.my_node;
    let vnum = (mynum + nm - rootnum) % nm;
    let dim = cubedim(nm) as i32;
    let hb = hibit(vnum, dim as u32);
    if vnum > 0 {
        let pnum = ((vnum & !(1 << hb)) + rootnum) % nm;
        let parent = if pnum == rootnum { root } else { masters[pnum] };
        // SAFETY: caller contract.
        let r = unsafe { wire.irecv(buf, count, dtype, parent, itag::BCAST)? };
        ctx.waitall(&mut vec![r])?;
    }
    for i in (hb + 1)..dim {
        let peer = vnum | (1 << i);
        if peer < nm {
            let child = masters[(peer + rootnum) % nm];
            // SAFETY: caller contract; waited for below.
            reqs.push(unsafe { wire.isend(buf, count, dtype, child, itag::BCAST)? });
        }
    }
    ctx.waitall(&mut reqs)
}

/// IMPI reduce (report 4.16, LAM `lam_ssi_coll_impi_reduce`).
///
/// Commutative: reduce inside each site (to the root in its site, else to the master);
/// then among the root and the other sites' masters, linear (the root receives from each
/// master in master order) or a binomial tree over master numbers relative to the root's
/// site. Non-commutative: every rank sends its input to the root, which combines them in
/// rank order. Inter-site messages: typed, tag 190, on the point-to-point context (LAM).
///
/// `w` is this rank's packed input, and at the root receives the packed result.
///
/// # Safety
/// `w` holds `count * dtype.size()` readable and writable bytes; `input` (non-commutative
/// only: the user's send data, in user layout) is readable.
pub(crate) unsafe fn reduce(
    ctx: &Ctx,
    h: &Hier,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
    root: usize,
) -> MpiResult<()> {
    let wire = Wire {
        ctx,
        pt2pt: reduce_on_pt2pt(),
    };
    let me = ctx.rank;
    let bytes = count * dtype.size();
    if !op.is_commutative() {
        if me != root {
            // SAFETY: `w` holds this rank's packed input.
            return unsafe { wire.send_packed(w, count, dtype, root, itag::REDUCE) };
        }
        // Root: acc = input(p-1), then acc = input(i) op acc for i = p-2 down to 0.
        let p = ctx.size;
        let mut mine = vec![0u8; bytes];
        // SAFETY: `w` has `bytes` bytes (and may be NULL only when there are none).
        unsafe { copy_bytes(w, mine.as_mut_ptr(), bytes) };
        let mut tmp = vec![0u8; bytes];
        if root != p - 1 {
            // SAFETY: `w` has room for `bytes`.
            unsafe { wire.recv_packed(w, count, dtype, p - 1, itag::REDUCE)? };
        }
        for i in (0..p - 1).rev() {
            let input = if i == root {
                mine.as_ptr()
            } else {
                // SAFETY: `tmp` has `bytes` bytes.
                unsafe { wire.recv_packed(tmp.as_mut_ptr(), count, dtype, i, itag::REDUCE)? };
                tmp.as_ptr()
            };
            // SAFETY: both streams hold `count` packed elements, disjoint.
            unsafe { op.apply_packed(input, w, count, dtype) };
        }
        return Ok(());
    }
    // Local phase (the site's own algorithm), into the root or the site's master.
    let local_to_root = h.node_of[me] == h.node_of[root];
    let local = h.local_team();
    let local_root = h.local_root(root);
    if local.len() > 1 {
        let idx = local
            .ranks
            .iter()
            .position(|&r| r == local_root)
            .expect("member");
        crate::reduce::team_reduce(ctx, &local, w, count, dtype, op, idx, LOCAL_REDUCE)?;
    }
    if !(me == root || (h.is_leader() && !local_to_root)) {
        return Ok(());
    }
    let masters = &h.leaders;
    let nm = masters.len();
    let rootnum = h.node_of[root];
    let mut tmp = vec![0u8; bytes];
    if nm <= maxlinear() {
        if me == root {
            for (i, &m) in masters.iter().enumerate() {
                if i == rootnum {
                    continue;
                }
                // SAFETY: `tmp` and `w` hold `bytes` bytes each, disjoint.
                unsafe {
                    wire.recv_packed(tmp.as_mut_ptr(), count, dtype, m, itag::REDUCE)?;
                    op.apply_packed(tmp.as_ptr(), w, count, dtype);
                }
            }
            Ok(())
        } else {
            // SAFETY: `w` holds the site's partial result.
            unsafe { wire.send_packed(w, count, dtype, root, itag::REDUCE) }
        }
    } else {
        let mynum = h.my_node;
        let vnum = (mynum + nm - rootnum) % nm;
        let dim = cubedim(nm);
        for i in 0..dim {
            let mask = 1usize << i;
            if vnum & mask != 0 {
                let pnum = ((vnum & !mask) + rootnum) % nm;
                let peer = if pnum == rootnum { root } else { masters[pnum] };
                // SAFETY: `w` holds the partial result.
                return unsafe { wire.send_packed(w, count, dtype, peer, itag::REDUCE) };
            }
            let child = vnum | mask;
            if child >= nm {
                continue;
            }
            let peer = masters[(child + rootnum) % nm];
            // SAFETY: as in the linear case.
            unsafe {
                wire.recv_packed(tmp.as_mut_ptr(), count, dtype, peer, itag::REDUCE)?;
                op.apply_packed(tmp.as_ptr(), w, count, dtype);
            }
        }
        Ok(())
    }
}

/// IMPI-style gather across sites: the blocks of each site meet, packed, at the site's
/// master (the root itself in the root's site) over the site's own transports; then each
/// other site's master sends its site's blocks to the root as one typed message (tag 130
/// on the collective context), so the wide-area link is crossed once per site instead of
/// once per rank. `send` is `None` for MPI_IN_PLACE at the root.
///
/// # Safety
/// `send` holds `sc` elements of `sendtype` (every rank but an in-place root); at the root
/// `recvbuf` has room for `size * rc` elements of `recvtype`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gather(
    ctx: &Ctx,
    h: &Hier,
    send: Option<*const u8>,
    sc: usize,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    rc: usize,
    recvtype: &TypeRef,
    root: usize,
) -> MpiResult<()> {
    let me = ctx.rank;
    let is_root = me == root;
    let site = h.my_node;
    let members = &h.members[site];
    let local_root = h.local_root(root);
    // Bytes per rank: the same everywhere (matching type signatures).
    let block = if is_root {
        rc * recvtype.size()
    } else {
        sc * sendtype.size()
    };
    let rext = recvtype.extent();
    let rblock = |r: usize| recvbuf.wrapping_offset(r as isize * rc as isize * rext);
    let mut mine = vec![0u8; block];
    match send {
        // SAFETY: caller contract: `s` holds `sc` elements of `sendtype`, and `block` is
        // their packed size (checked at the root against its receive size).
        Some(s) if sc * sendtype.size() == block => unsafe {
            sendtype.pack_range(s, sc, 0, &mut mine)
        },
        Some(_) => {
            return Err(crate::util::err(
                tsunagi_core::ErrorClass::Truncate,
                "MPI_Gather: send and receive sizes differ at the root".into(),
            ))
        }
        // SAFETY: in place at the root: its block is already in `recvbuf`.
        None => unsafe { recvtype.pack_range(rblock(root), rc, 0, &mut mine) },
    }
    if me != local_root {
        // SAFETY: `mine` holds `block` bytes and outlives the blocking send.
        return unsafe { ctx.send(mine.as_ptr(), block, local_root, LOCAL_GATHER) };
    }
    // This site's blocks, in its rank order.
    let n = members.len();
    let mut site_blocks = vec![0u8; n * block];
    let mut reqs = Vec::new();
    for (j, &r) in members.iter().enumerate() {
        if r == me {
            site_blocks[j * block..(j + 1) * block].copy_from_slice(&mine);
        } else {
            // SAFETY: slot j of `site_blocks`, alive until the waitall below.
            reqs.push(unsafe {
                ctx.irecv(
                    site_blocks.as_mut_ptr().add(j * block),
                    block,
                    r,
                    LOCAL_GATHER,
                )?
            });
        }
    }
    ctx.waitall(&mut reqs)?;
    let wire = Wire { ctx, pt2pt: false };
    if !is_root {
        // SAFETY: `site_blocks` holds `n * sc` packed elements of `sendtype`.
        return unsafe {
            wire.send_packed(site_blocks.as_ptr(), n * sc, sendtype, root, itag::GATHER)
        };
    }
    let place = |blocks: &[u8], ranks: &[usize]| {
        for (j, &r) in ranks.iter().enumerate() {
            if r == root && send.is_none() {
                continue;
            }
            // SAFETY: the root's receive buffer has room for block r.
            unsafe { recvtype.unpack_range(rblock(r), rc, 0, &blocks[j * block..(j + 1) * block]) };
        }
    };
    place(&site_blocks, members);
    for (s, ranks) in h.members.iter().enumerate() {
        if s == site {
            continue;
        }
        let mut blocks = vec![0u8; ranks.len() * block];
        // SAFETY: `blocks` has room for `ranks.len() * rc` packed elements.
        unsafe {
            wire.recv_packed(
                blocks.as_mut_ptr(),
                ranks.len() * rc,
                recvtype,
                h.leaders[s],
                itag::GATHER,
            )?
        };
        place(&blocks, ranks);
    }
    Ok(())
}

/// IMPI-style scatter across sites, the mirror of [`gather`]: the root sends each other
/// site's blocks to its master as one typed message (tag 150, collective context), and the
/// blocks go on to their ranks inside each site. `recv` is `None` for MPI_IN_PLACE at the
/// root.
///
/// # Safety
/// At the root `sendbuf` holds `size * sc` elements of `sendtype`; `recv` has room for
/// `rc` elements of `recvtype`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatter(
    ctx: &Ctx,
    h: &Hier,
    sendbuf: *const u8,
    sc: usize,
    sendtype: &TypeRef,
    recv: Option<*mut u8>,
    rc: usize,
    recvtype: &TypeRef,
    root: usize,
) -> MpiResult<()> {
    let me = ctx.rank;
    let is_root = me == root;
    let site = h.my_node;
    let members = &h.members[site];
    let local_root = h.local_root(root);
    let block = if is_root {
        sc * sendtype.size()
    } else {
        rc * recvtype.size()
    };
    let deliver = |bytes: &[u8]| -> MpiResult<()> {
        if let Some(r) = recv {
            if rc * recvtype.size() != bytes.len() {
                return Err(crate::util::err(
                    tsunagi_core::ErrorClass::Truncate,
                    "MPI_Scatter: send and receive sizes differ at the root".into(),
                ));
            }
            // SAFETY: caller contract: `r` has room for `rc` elements.
            unsafe { recvtype.unpack_range(r, rc, 0, bytes) };
        }
        Ok(())
    };
    if me != local_root {
        let mut mine = vec![0u8; block];
        // SAFETY: `mine` has `block` bytes.
        unsafe { ctx.recv(mine.as_mut_ptr(), block, local_root, LOCAL_SCATTER)? };
        return deliver(&mine);
    }
    let wire = Wire { ctx, pt2pt: false };
    let n = members.len();
    let mut site_blocks = vec![0u8; n * block];
    if is_root {
        let sext = sendtype.extent();
        let sblock = |r: usize| sendbuf.wrapping_offset(r as isize * sc as isize * sext);
        let pack = |ranks: &[usize], out: &mut [u8]| {
            for (j, &r) in ranks.iter().enumerate() {
                // SAFETY: the root's send buffer holds every rank's block.
                unsafe {
                    sendtype.pack_range(sblock(r), sc, 0, &mut out[j * block..(j + 1) * block])
                };
            }
        };
        let mut bufs = Vec::new();
        let mut reqs = Vec::new();
        for (s, ranks) in h.members.iter().enumerate() {
            if s == site {
                continue;
            }
            let mut blocks = vec![0u8; ranks.len() * block];
            pack(ranks, &mut blocks);
            bufs.push(blocks);
        }
        let mut k = 0;
        for (s, ranks) in h.members.iter().enumerate() {
            if s == site {
                continue;
            }
            let data = &bufs[k];
            k += 1;
            let base = match sendtype.contiguous_offset() {
                Some(off) => data.as_ptr().wrapping_offset(-off),
                None => {
                    // A non-contiguous type goes blocking, through a scratch of its layout.
                    // SAFETY: `data` holds `ranks.len() * sc` packed elements.
                    unsafe {
                        wire.send_packed(
                            data.as_ptr(),
                            ranks.len() * sc,
                            sendtype,
                            h.leaders[s],
                            itag::SCATTER,
                        )?
                    };
                    continue;
                }
            };
            // SAFETY: `base` is the type map over `data`, which outlives the waitall.
            reqs.push(unsafe {
                wire.isend(
                    base,
                    ranks.len() * sc,
                    sendtype,
                    h.leaders[s],
                    itag::SCATTER,
                )?
            });
        }
        pack(members, &mut site_blocks);
        ctx.waitall(&mut reqs)?;
    } else {
        // SAFETY: `site_blocks` has room for `n * rc` packed elements.
        unsafe {
            wire.recv_packed(
                site_blocks.as_mut_ptr(),
                n * rc,
                recvtype,
                root,
                itag::SCATTER,
            )?
        };
    }
    let mut reqs = Vec::new();
    for (j, &r) in members.iter().enumerate() {
        if r != me {
            // SAFETY: slot j of `site_blocks`, alive until the waitall below.
            reqs.push(unsafe {
                ctx.isend(site_blocks.as_ptr().add(j * block), block, r, LOCAL_SCATTER)?
            });
        }
    }
    let j = h.my_local;
    let r = deliver(&site_blocks[j * block..(j + 1) * block]);
    ctx.waitall(&mut reqs)?;
    r
}

/// IMPI-style all-to-all across sites for equal blocks of `b` bytes (one send type and
/// count, one receive type and count): each rank hands its packed blocks to its site's
/// master; masters exchange, per pair of sites, one typed message with the blocks from
/// the one site's ranks to the other's (tag 170, collective context; pairs in a fixed
/// order, so blocking transfers cannot wait on each other in a cycle); each master hands
/// every rank of its site its `p` blocks. The wide-area link carries one message per
/// pair of sites and direction instead of one per pair of ranks.
///
/// `send[j]` and `recv[j]` are block `j` as (address, count, type).
///
/// # Safety
/// Every send block is readable and every receive block writable for its elements.
pub(crate) unsafe fn alltoall(
    ctx: &Ctx,
    h: &Hier,
    send: &[(*mut u8, usize, TypeRef)],
    recv: &[(*mut u8, usize, TypeRef)],
    b: usize,
) -> MpiResult<()> {
    let p = ctx.size;
    let me = ctx.rank;
    let site = h.my_node;
    let members = &h.members[site];
    let master = h.leaders[site];
    let n = members.len();
    let mut mine = vec![0u8; p * b];
    for (j, (ptr, c, t)) in send.iter().enumerate() {
        // SAFETY: caller contract: send block j is readable; its packed size is `b`.
        unsafe { t.pack_range(*ptr, *c, 0, &mut mine[j * b..(j + 1) * b]) };
    }
    let unpack_all = |blocks: &[u8]| {
        for (i, (ptr, c, t)) in recv.iter().enumerate() {
            // SAFETY: caller contract: receive block i is writable.
            unsafe { t.unpack_range(*ptr, *c, 0, &blocks[i * b..(i + 1) * b]) };
        }
    };
    if me != master {
        let mut got = vec![0u8; p * b];
        // SAFETY: both buffers hold `p * b` bytes and outlive the waitall.
        let mut reqs = unsafe {
            vec![
                ctx.irecv(got.as_mut_ptr(), p * b, master, LOCAL_ALLTOALL + 1)?,
                ctx.isend(mine.as_ptr(), p * b, master, LOCAL_ALLTOALL)?,
            ]
        };
        ctx.waitall(&mut reqs)?;
        unpack_all(&got);
        return Ok(());
    }
    // The site's blocks: member k's p blocks at k * p * b.
    let mut site_blocks = vec![0u8; n * p * b];
    let mut reqs = Vec::new();
    for (k, &r) in members.iter().enumerate() {
        if r == me {
            site_blocks[k * p * b..(k + 1) * p * b].copy_from_slice(&mine);
        } else {
            // SAFETY: member k's slot, alive until the waitall.
            reqs.push(unsafe {
                ctx.irecv(
                    site_blocks.as_mut_ptr().add(k * p * b),
                    p * b,
                    r,
                    LOCAL_ALLTOALL,
                )?
            });
        }
    }
    ctx.waitall(&mut reqs)?;
    let (_, sc, sendtype) = &send[0];
    let (_, rc, recvtype) = &recv[0];
    let wire = Wire { ctx, pt2pt: false };
    // From every other site: its ranks' blocks for this site's ranks, source-major.
    let mut from: Vec<Vec<u8>> = vec![Vec::new(); h.members.len()];
    for (s, theirs) in h.members.iter().enumerate() {
        if s == site {
            continue;
        }
        let mut out = Vec::with_capacity(n * theirs.len() * b);
        for k in 0..n {
            for &j in theirs {
                let at = k * p * b + j * b;
                out.extend_from_slice(&site_blocks[at..at + b]);
            }
        }
        let mut inb = vec![0u8; theirs.len() * n * b];
        let peer = h.leaders[s];
        // SAFETY: `out` holds `n * |theirs| * sc` packed elements of the send type, `inb`
        // has room for `|theirs| * n * rc` of the receive type.
        unsafe {
            if site < s {
                wire.send_packed(
                    out.as_ptr(),
                    n * theirs.len() * sc,
                    sendtype,
                    peer,
                    itag::ALLTOALL,
                )?;
                wire.recv_packed(
                    inb.as_mut_ptr(),
                    theirs.len() * n * rc,
                    recvtype,
                    peer,
                    itag::ALLTOALL,
                )?;
            } else {
                wire.recv_packed(
                    inb.as_mut_ptr(),
                    theirs.len() * n * rc,
                    recvtype,
                    peer,
                    itag::ALLTOALL,
                )?;
                wire.send_packed(
                    out.as_ptr(),
                    n * theirs.len() * sc,
                    sendtype,
                    peer,
                    itag::ALLTOALL,
                )?;
            }
        }
        from[s] = inb;
    }
    // Every member's p blocks, in source rank order.
    let mut outs: Vec<Vec<u8>> = Vec::with_capacity(n);
    for l in 0..n {
        let j = members[l];
        let mut v = vec![0u8; p * b];
        for i in 0..p {
            let s = h.node_of[i];
            let src = if s == site {
                let k = members.iter().position(|&r| r == i).expect("member");
                &site_blocks[k * p * b + j * b..k * p * b + (j + 1) * b]
            } else {
                let ii = h.members[s].iter().position(|&r| r == i).expect("member");
                &from[s][(ii * n + l) * b..(ii * n + l + 1) * b]
            };
            v[i * b..(i + 1) * b].copy_from_slice(src);
        }
        outs.push(v);
    }
    let mut reqs = Vec::new();
    for (l, &r) in members.iter().enumerate() {
        if r != me {
            // SAFETY: `outs[l]` holds `p * b` bytes and outlives the waitall.
            reqs.push(unsafe { ctx.isend(outs[l].as_ptr(), p * b, r, LOCAL_ALLTOALL + 1)? });
        }
    }
    unpack_all(&outs[h.my_local]);
    ctx.waitall(&mut reqs)
}

/// Inclusive scan across sites: a chain in rank order (rank r receives the prefix of ranks
/// below it from r - 1, typed with tag 200, combines, and passes it on), so that any op
/// combines in rank order.
///
/// # Safety
/// `w` holds this rank's packed input (`count * dtype.size()` bytes) and receives the
/// packed result.
pub(crate) unsafe fn scan(
    ctx: &Ctx,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<()> {
    let wire = Wire { ctx, pt2pt: false };
    let me = ctx.rank;
    let bytes = count * dtype.size();
    if me > 0 {
        let mut prefix = vec![0u8; bytes];
        // SAFETY: `prefix` and `w` hold `bytes` bytes each, disjoint.
        unsafe {
            wire.recv_packed(prefix.as_mut_ptr(), count, dtype, me - 1, itag::SCAN)?;
            op.apply_packed(prefix.as_ptr(), w, count, dtype);
        }
    }
    if me + 1 < ctx.size {
        // SAFETY: `w` holds the prefix up to this rank.
        unsafe { wire.send_packed(w, count, dtype, me + 1, itag::SCAN)? };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cube_helpers_match_lam() {
        assert_eq!(cubedim(1), 0);
        assert_eq!(cubedim(2), 1);
        assert_eq!(cubedim(5), 3);
        assert_eq!(cubedim(8), 3);
        assert_eq!(hibit(0, 3), -1);
        assert_eq!(hibit(5, 3), 2);
        assert_eq!(hibit(6, 2), 1);
    }
}
