//! Plumbing shared by the algorithms: argument checks, the per-call context (runtime,
//! communicator, rank, size, placement), byte-level point-to-point on the collective
//! context, teams (ordered subsets of a communicator), and packed views of user buffers.

use std::sync::Arc;

use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::{CommId, ErrorClass, MpiError, MpiResult, ReqId, Runtime};

/// A send-side buffer argument: the user's buffer or `MPI_IN_PLACE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendBuf {
    /// `MPI_IN_PLACE`: the data is taken from (and the result left in) the receive buffer.
    InPlace,
    Ptr(*const u8),
}

impl SendBuf {
    /// From a C pointer: MPICH's `MPI_IN_PLACE` is `(void *)-1`.
    pub fn from_c(p: *const u8) -> SendBuf {
        if p as usize == usize::MAX {
            SendBuf::InPlace
        } else {
            SendBuf::Ptr(p)
        }
    }
}

/// A receive-side buffer argument that may be `MPI_IN_PLACE` (the root of scatter(v)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvBuf {
    InPlace,
    Ptr(*mut u8),
}

impl RecvBuf {
    /// From a C pointer: `(void *)-1` is `MPI_IN_PLACE`.
    pub fn from_c(p: *mut u8) -> RecvBuf {
        if p as usize == usize::MAX {
            RecvBuf::InPlace
        } else {
            RecvBuf::Ptr(p)
        }
    }
}

pub(crate) fn err(class: ErrorClass, msg: String) -> MpiError {
    MpiError::new(class, msg)
}

pub(crate) fn check_count(call: &str, count: i64) -> MpiResult<usize> {
    if count < 0 {
        return Err(err(
            ErrorClass::Count,
            format!("{call}: count {count} is negative"),
        ));
    }
    Ok(count as usize)
}

pub(crate) fn check_counts(
    call: &str,
    what: &str,
    counts: &[i64],
    n: usize,
) -> MpiResult<Vec<usize>> {
    if counts.len() < n {
        return Err(err(
            ErrorClass::Arg,
            format!(
                "{call}: {what} has {} entries, the communicator has {n} ranks",
                counts.len()
            ),
        ));
    }
    counts[..n]
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            if c < 0 {
                Err(err(
                    ErrorClass::Count,
                    format!("{call}: {what}[{i}] = {c} is negative"),
                ))
            } else {
                Ok(c as usize)
            }
        })
        .collect()
}

pub(crate) fn check_displs(call: &str, what: &str, displs: &[i64], n: usize) -> MpiResult<()> {
    if displs.len() < n {
        return Err(err(
            ErrorClass::Arg,
            format!(
                "{call}: {what} has {} entries, the communicator has {n} ranks",
                displs.len()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_type(call: &str, dtype: &TypeRef) -> MpiResult<()> {
    if !dtype.is_committed() {
        return Err(err(
            ErrorClass::Type,
            format!("{call}: datatype {} is not committed", dtype.describe()),
        ));
    }
    Ok(())
}

pub(crate) fn check_buf(
    call: &str,
    what: &str,
    buf: *const u8,
    count: usize,
    dtype: &TypeRef,
) -> MpiResult<()> {
    if buf.is_null() && count > 0 && dtype.size() > 0 && dtype.true_lb() == 0 {
        return Err(err(
            ErrorClass::Buffer,
            format!("{call}: {what} is NULL but count is {count}"),
        ));
    }
    Ok(())
}

pub(crate) fn check_root(call: &str, root: i32, size: usize) -> MpiResult<usize> {
    if root < 0 || root as usize >= size {
        return Err(err(
            ErrorClass::Root,
            format!("{call}: invalid root {root} (communicator size {size})"),
        ));
    }
    Ok(root as usize)
}

pub(crate) fn byte_type() -> TypeRef {
    Datatype::builtin(Builtin::Byte)
}

/// Tags on the collective context. Blocking collectives use fixed small tags (messages
/// of one collective call are matched in order per pair, and MPI orders collective calls
/// the same way everywhere); the core's own internal exchanges use negative tags.
pub(crate) mod tag {
    pub const BARRIER: i32 = 1 << 8;
    pub const BCAST: i32 = 2 << 8;
    pub const GATHER: i32 = 3 << 8;
    pub const SCATTER: i32 = 4 << 8;
    pub const ALLGATHER: i32 = 5 << 8;
    pub const ALLTOALL: i32 = 6 << 8;
    pub const REDUCE: i32 = 7 << 8;
    pub const ALLREDUCE: i32 = 8 << 8;
    pub const REDSCAT: i32 = 9 << 8;
    pub const SCAN: i32 = 10 << 8;
}

/// One collective call's context.
pub(crate) struct Ctx<'a> {
    pub rt: &'a Runtime,
    pub comm: CommId,
    pub rank: usize,
    pub size: usize,
    pub call: &'static str,
    byte: TypeRef,
    nodes: Option<Arc<Vec<u32>>>,
}

impl<'a> Ctx<'a> {
    pub fn new(rt: &'a Runtime, comm: CommId, call: &'static str) -> MpiResult<Ctx<'a>> {
        rt.check_comm_id(call, comm)?;
        Ok(Ctx {
            rt,
            comm,
            rank: rt.comm_rank(comm)?,
            size: rt.comm_size(comm)?,
            call,
            byte: byte_type(),
            nodes: None,
        })
    }

    /// Node id of every rank (placement).
    pub fn nodes(&mut self) -> MpiResult<Arc<Vec<u32>>> {
        if self.nodes.is_none() {
            self.nodes = Some(self.rt.comm_nodes(self.comm)?);
        }
        Ok(self.nodes.clone().expect("set"))
    }

    /// Whether the communicator spans several nodes with several ranks on at least one:
    /// the case where hierarchical algorithms pay off.
    pub fn is_hierarchical(&mut self) -> MpiResult<bool> {
        if crate::wan::flat_across_sites(self)? {
            return Ok(false);
        }
        let nodes = self.nodes()?;
        Ok(spans_nodes(&nodes))
    }

    /// Start a send of `len` bytes at `buf` to comm rank `dest`.
    ///
    /// # Safety
    /// `buf..buf+len` stays readable and unmodified until the request completes.
    pub unsafe fn isend(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
    ) -> MpiResult<ReqId> {
        // SAFETY: forwarded caller contract.
        unsafe { coll_isend(self.rt, buf, len, &self.byte, dest, tag, self.comm) }
    }

    /// Start a receive of `len` bytes into `buf` from comm rank `src`.
    ///
    /// # Safety
    /// `buf..buf+len` stays writable and untouched until the request completes.
    pub unsafe fn irecv(&self, buf: *mut u8, len: usize, src: usize, tag: i32) -> MpiResult<ReqId> {
        // SAFETY: forwarded caller contract.
        unsafe { coll_irecv(self.rt, buf, len, &self.byte, src, tag, self.comm) }
    }

    /// Typed send (the core packs derived types).
    ///
    /// # Safety
    /// The type map of `count` elements at `buf` stays readable until completion.
    pub unsafe fn isend_typed(
        &self,
        buf: *const u8,
        count: usize,
        dtype: &TypeRef,
        dest: usize,
        tag: i32,
    ) -> MpiResult<ReqId> {
        // SAFETY: forwarded caller contract.
        unsafe { coll_isend(self.rt, buf, count, dtype, dest, tag, self.comm) }
    }

    /// Typed receive.
    ///
    /// # Safety
    /// The type map of `count` elements at `buf` stays writable until completion.
    pub unsafe fn irecv_typed(
        &self,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        src: usize,
        tag: i32,
    ) -> MpiResult<ReqId> {
        // SAFETY: forwarded caller contract.
        unsafe { coll_irecv(self.rt, buf, count, dtype, src, tag, self.comm) }
    }

    /// Wait for all; a truncated receive (counts that differ between ranks) is an error.
    pub fn waitall(&self, reqs: &mut Vec<ReqId>) -> MpiResult<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        let ids: Vec<Option<ReqId>> = reqs.drain(..).map(Some).collect();
        let sts = self.rt.waitall(self.call, &ids)?;
        for st in sts {
            if st.error == ErrorClass::Truncate as i32 {
                return Err(err(
                    ErrorClass::Truncate,
                    format!(
                        "{}: message truncated (counts or types differ between ranks)",
                        self.call
                    ),
                ));
            } else if st.error != 0 {
                let class = ErrorClass::from_code(st.error).unwrap_or(ErrorClass::Other);
                return Err(err(
                    class,
                    format!("{}: a transfer failed (error {})", self.call, st.error),
                ));
            }
        }
        Ok(())
    }

    /// Blocking send.
    ///
    /// # Safety
    /// `buf..buf+len` readable.
    pub unsafe fn send(&self, buf: *const u8, len: usize, dest: usize, tag: i32) -> MpiResult<()> {
        // SAFETY: forwarded; we wait before returning.
        let r = unsafe { self.isend(buf, len, dest, tag)? };
        self.waitall(&mut vec![r])
    }

    /// Blocking receive.
    ///
    /// # Safety
    /// `buf..buf+len` writable.
    pub unsafe fn recv(&self, buf: *mut u8, len: usize, src: usize, tag: i32) -> MpiResult<()> {
        // SAFETY: forwarded; we wait before returning.
        let r = unsafe { self.irecv(buf, len, src, tag)? };
        self.waitall(&mut vec![r])
    }

    /// Send and receive at once (the ranges must not overlap).
    ///
    /// # Safety
    /// `sbuf..+slen` readable, `rbuf..+rlen` writable.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn sendrecv(
        &self,
        sbuf: *const u8,
        slen: usize,
        dest: usize,
        rbuf: *mut u8,
        rlen: usize,
        src: usize,
        tag: i32,
    ) -> MpiResult<()> {
        // SAFETY: forwarded; we wait before returning.
        let mut v = unsafe { self.start_sendrecv(sbuf, slen, dest, rbuf, rlen, src, tag)? };
        self.waitall(&mut v)
    }

    /// [`Ctx::sendrecv`]'s receive and send, posted (receive first); the caller waits on
    /// them, and may work meanwhile on memory neither touches.
    ///
    /// # Safety
    /// `sbuf..+slen` readable, `rbuf..+rlen` writable, both until the requests complete.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn start_sendrecv(
        &self,
        sbuf: *const u8,
        slen: usize,
        dest: usize,
        rbuf: *mut u8,
        rlen: usize,
        src: usize,
        tag: i32,
    ) -> MpiResult<Vec<ReqId>> {
        // SAFETY: forwarded caller contract.
        unsafe {
            Ok(vec![
                self.irecv(rbuf, rlen, src, tag)?,
                self.isend(sbuf, slen, dest, tag)?,
            ])
        }
    }
}

/// Whether a node map has several nodes and several ranks on at least one of them. Cached
/// per map (a communicator's map is one shared vector), so the check costs O(p log p)
/// once per communicator rather than per call.
pub(crate) fn spans_nodes(nodes: &Arc<Vec<u32>>) -> bool {
    use std::cell::RefCell;
    use std::sync::Weak;
    thread_local! {
        static CACHE: RefCell<Vec<(Weak<Vec<u32>>, bool)>> = const { RefCell::new(Vec::new()) };
    }
    let hit = CACHE.with(|c| {
        c.borrow()
            .iter()
            .find(|(w, _)| w.upgrade().is_some_and(|a| Arc::ptr_eq(&a, nodes)))
            .map(|(_, b)| *b)
    });
    if let Some(b) = hit {
        return b;
    }
    let mut ids: Vec<u32> = nodes.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let b = ids.len() > 1 && ids.len() < nodes.len();
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|(w, _)| w.strong_count() > 0);
        if c.len() >= 16 {
            c.remove(0);
        }
        c.push((Arc::downgrade(nodes), b));
    });
    b
}

/// An ordered subset of a communicator's ranks: `ranks[i]` is member i's comm rank.
pub(crate) struct Team {
    pub ranks: Vec<usize>,
    /// This process's index in `ranks`.
    pub me: usize,
}

impl Team {
    pub fn all(ctx: &Ctx) -> Team {
        Team {
            ranks: (0..ctx.size).collect(),
            me: ctx.rank,
        }
    }
    pub fn len(&self) -> usize {
        self.ranks.len()
    }
}

/// The node structure of a communicator: nodes in order of their lowest rank, each
/// node's ranks ascending; the leader of a node is its lowest rank.
pub(crate) struct Hier {
    /// Ranks of each node.
    pub members: Vec<Vec<usize>>,
    /// Node index of every rank.
    pub node_of: Vec<usize>,
    /// Leader (lowest rank) of every node.
    pub leaders: Vec<usize>,
    /// This rank's node index and its index inside the node.
    pub my_node: usize,
    pub my_local: usize,
}

impl Hier {
    pub fn new(nodes: &[u32], rank: usize) -> Hier {
        let mut ids: Vec<u32> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut node_of = vec![0; nodes.len()];
        for (r, n) in nodes.iter().enumerate() {
            let k = match ids.iter().position(|x| x == n) {
                Some(k) => k,
                None => {
                    ids.push(*n);
                    members.push(Vec::new());
                    ids.len() - 1
                }
            };
            members[k].push(r);
            node_of[r] = k;
        }
        let leaders = members.iter().map(|m| m[0]).collect();
        let my_node = node_of[rank];
        let my_local = members[my_node]
            .iter()
            .position(|&r| r == rank)
            .expect("member");
        Hier {
            members,
            node_of,
            leaders,
            my_node,
            my_local,
        }
    }

    /// True if every node's ranks are consecutive and nodes appear in rank order (so a
    /// node-then-leaders reduction keeps rank order for non-commutative ops).
    pub fn rank_ordered(&self) -> bool {
        let mut next = 0;
        for m in &self.members {
            for &r in m {
                if r != next {
                    return false;
                }
                next += 1;
            }
        }
        true
    }

    pub fn local_team(&self) -> Team {
        Team {
            ranks: self.members[self.my_node].clone(),
            me: self.my_local,
        }
    }

    /// The team of node leaders (only meaningful on a leader).
    pub fn leader_team(&self) -> Team {
        Team {
            ranks: self.leaders.clone(),
            me: self.my_node,
        }
    }

    /// Where a rooted operation meets inside this rank's node: the root itself if it is
    /// on this node, else the node's leader.
    pub fn local_root(&self, root: usize) -> usize {
        if self.node_of[root] == self.my_node {
            root
        } else {
            self.leaders[self.my_node]
        }
    }

    pub fn is_leader(&self) -> bool {
        self.my_local == 0
    }
}

/// A packed view of `count` elements of a datatype at a user address: the user memory
/// itself when the type is contiguous, else a scratch buffer (packed on creation for
/// input, unpacked by [`Packed::finish`] for output).
pub(crate) struct Packed {
    pub ptr: *mut u8,
    scratch: Option<Vec<u8>>,
    user: *mut u8,
    count: usize,
    dtype: TypeRef,
}

impl Packed {
    /// View for reading and/or writing. `load`: fill a scratch copy from the user data.
    ///
    /// # Safety
    /// The type map of `count` elements at `buf` must be readable (if `load`) and, for
    /// [`Packed::finish`], writable, for the life of the view.
    pub unsafe fn new(buf: *mut u8, count: usize, dtype: &TypeRef, load: bool) -> Packed {
        let len = count * dtype.size();
        match dtype.contiguous_offset() {
            Some(off) => Packed {
                ptr: buf.wrapping_offset(off),
                scratch: None,
                user: buf,
                count,
                dtype: dtype.clone(),
            },
            None => {
                let mut v = vec![0u8; len];
                if load {
                    // SAFETY: caller contract: the type map is readable.
                    unsafe { dtype.pack_range(buf, count, 0, &mut v) };
                }
                Packed {
                    ptr: v.as_mut_ptr(),
                    scratch: Some(v),
                    user: buf,
                    count,
                    dtype: dtype.clone(),
                }
            }
        }
    }

    /// Write a scratch copy back to the user buffer.
    ///
    /// # Safety
    /// The user type map must be writable (see [`Packed::new`]).
    pub unsafe fn finish(self) {
        if let Some(v) = &self.scratch {
            // SAFETY: caller contract.
            unsafe { self.dtype.unpack_range(self.user, self.count, 0, v) };
        }
    }
}

/// `p` blocks laid out back to back (block i at `off[i]`, `len[i]` bytes) in one packed
/// working buffer: the user's memory when it already is that (contiguous types, blocks
/// adjacent in rank order), else a scratch buffer that [`Blocks::load`] and
/// [`Blocks::store`] copy from and to the user's blocks.
pub(crate) struct Blocks {
    pub base: *mut u8,
    pub off: Vec<usize>,
    pub len: Vec<usize>,
    user: Vec<(*mut u8, usize, TypeRef)>,
    scratch: Option<Vec<u8>>,
}

impl Blocks {
    /// `user[i]` = (address, count, type) of block i.
    pub fn new(user: Vec<(*mut u8, usize, TypeRef)>) -> Blocks {
        let len: Vec<usize> = user.iter().map(|(_, c, t)| c * t.size()).collect();
        let mut off = Vec::with_capacity(len.len());
        let mut acc = 0;
        for l in &len {
            off.push(acc);
            acc += l;
        }
        let total = acc;
        // Direct if every block is contiguous and starts where the previous ended.
        let mut direct = true;
        let mut start: Option<*mut u8> = None;
        for (i, (p, _, t)) in user.iter().enumerate() {
            match t.contiguous_offset() {
                Some(o) => {
                    let s = p.wrapping_offset(o);
                    match start {
                        None => start = Some(s),
                        Some(b) => {
                            if s != b.wrapping_add(off[i]) {
                                direct = false;
                            }
                        }
                    }
                }
                None => direct = false,
            }
        }
        if direct && !user.is_empty() {
            return Blocks {
                base: start.expect("non-empty"),
                off,
                len,
                user,
                scratch: None,
            };
        }
        let mut v = vec![0u8; total];
        Blocks {
            base: v.as_mut_ptr(),
            off,
            len,
            user,
            scratch: Some(v),
        }
    }

    pub fn ptr(&self, i: usize) -> *mut u8 {
        self.base.wrapping_add(self.off[i])
    }

    /// Bytes of blocks `[a, b)` (contiguous in the working buffer).
    pub fn span(&self, a: usize, b: usize) -> usize {
        if a >= b {
            0
        } else {
            self.off[b - 1] + self.len[b - 1] - self.off[a]
        }
    }

    pub fn total(&self) -> usize {
        self.span(0, self.len.len())
    }

    /// Copy user block `i` into the working buffer (no-op when direct).
    ///
    /// # Safety
    /// The user block must be readable.
    pub unsafe fn load(&mut self, i: usize) {
        if self.scratch.is_some() && self.len[i] > 0 {
            let (p, c, t) = &self.user[i];
            // SAFETY: `ptr(i)..+len[i]` lies in our scratch; the user block is readable.
            unsafe {
                let out = std::slice::from_raw_parts_mut(self.ptr(i), self.len[i]);
                t.pack_range(*p, *c, 0, out);
            }
        }
    }

    /// Copy working block `i` out to the user block (no-op when direct).
    ///
    /// # Safety
    /// The user block must be writable and not overlap the scratch.
    pub unsafe fn store(&self, i: usize) {
        if self.scratch.is_some() && self.len[i] > 0 {
            let (p, c, t) = &self.user[i];
            // SAFETY: as in load, reversed.
            unsafe {
                let inp = std::slice::from_raw_parts(self.ptr(i) as *const u8, self.len[i]);
                t.unpack_range(*p, *c, 0, inp);
            }
        }
    }

    /// Copy `count` elements of `dtype` at `src` (user layout) into working block `i`.
    ///
    /// # Safety
    /// The source type map must be readable; its packed size must be `len[i]`.
    pub unsafe fn fill_from(
        &mut self,
        i: usize,
        src: *const u8,
        count: usize,
        dtype: &TypeRef,
    ) -> bool {
        if count * dtype.size() != self.len[i] {
            return false;
        }
        if self.len[i] == 0 {
            // Nothing to copy (and the addresses may be NULL).
            return true;
        }
        // SAFETY: `ptr(i)..+len[i]` is inside the working buffer (user memory we may
        // write, or scratch); the source is readable per the contract. When direct, the
        // source is the caller's send buffer, distinct from the receive buffer.
        unsafe {
            let out = std::slice::from_raw_parts_mut(self.ptr(i), self.len[i]);
            dtype.pack_range(src, count, 0, out);
        }
        true
    }
}

/// Copy `count` elements of `st` at `src` into `rcount` elements of `rt` at `dst`
/// (matching signatures; the local part of gather, scatter, alltoall...).
///
/// # Safety
/// The source type map readable, the destination type map writable, disjoint.
pub(crate) unsafe fn copy_typed(
    call: &str,
    src: *const u8,
    count: usize,
    st: &TypeRef,
    dst: *mut u8,
    rcount: usize,
    rt: &TypeRef,
) -> MpiResult<()> {
    let n = count * st.size();
    if n > rcount * rt.size() {
        return Err(err(
            ErrorClass::Truncate,
            format!("{call}: {n} bytes sent locally do not fit the receive buffer"),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    // SAFETY: caller contract.
    unsafe {
        if let (Some(a), Some(b)) = (st.contiguous_offset(), rt.contiguous_offset()) {
            std::ptr::copy(src.wrapping_offset(a), dst.wrapping_offset(b), n);
        } else {
            let v = st.pack(src, count);
            rt.unpack_range(dst, rcount, 0, &v);
        }
    }
    Ok(())
}

/// Largest power of two <= n (n >= 1).
pub(crate) fn pof2_floor(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// `copy_nonoverlapping` of `n` bytes that does nothing for `n == 0` (when the addresses
/// may be NULL, as MPI allows for empty buffers).
///
/// # Safety
/// For `n > 0`: `src` readable and `dst` writable for `n` bytes, not overlapping.
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    if n > 0 {
        // SAFETY: caller contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) }
    }
}

/// A non-null, aligned address for empty transfers: MPI lets empty buffers be NULL, but
/// the core makes a (zero-length) slice of the buffer, which must not be NULL.
fn empty_addr() -> *mut u8 {
    std::ptr::NonNull::<u128>::dangling().as_ptr() as *mut u8
}

/// `Runtime::coll_isend`, with empty messages sent as zero bytes from a valid address.
///
/// # Safety
/// As `Runtime::coll_isend`.
pub(crate) unsafe fn coll_isend(
    rt: &Runtime,
    buf: *const u8,
    count: usize,
    dtype: &TypeRef,
    dest: usize,
    tag: i32,
    comm: CommId,
) -> MpiResult<ReqId> {
    // SAFETY: forwarded caller contract; an empty message reads nothing.
    unsafe {
        if count == 0 || dtype.size() == 0 {
            rt.coll_isend(empty_addr(), 0, &byte_type(), dest, tag, comm)
        } else {
            rt.coll_isend(buf, count, dtype, dest, tag, comm)
        }
    }
}

/// `Runtime::coll_irecv`, with empty receives posted as zero bytes at a valid address.
///
/// # Safety
/// As `Runtime::coll_irecv`.
pub(crate) unsafe fn coll_irecv(
    rt: &Runtime,
    buf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    src: usize,
    tag: i32,
    comm: CommId,
) -> MpiResult<ReqId> {
    // SAFETY: forwarded caller contract; a receive of capacity 0 writes nothing.
    unsafe {
        if count == 0 || dtype.size() == 0 {
            rt.coll_irecv(empty_addr(), 0, &byte_type(), src, tag, comm)
        } else {
            rt.coll_irecv(buf, count, dtype, src, tag, comm)
        }
    }
}
