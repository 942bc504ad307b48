//! Communicators: queries, the internal all-gather and point-to-point on the collective
//! context, context-id agreement, dup, split, create, free, compare.

use super::*;

/// Communicators the program freed while operations were pending on them (see
/// `comm_free`). One runtime per process, so process-wide.
static FREED_WITH_PENDING: Mutex<Vec<CommId>> = Mutex::new(Vec::new());

/// The last step of freeing a communicator: empty its slot in the table (and its hidden
/// local communicator's, for an intercommunicator); returns the context ids for
/// `release_context` (called without the engine lock).
fn take_comm_slot(e: &mut Engine, comm: CommId) -> Vec<u32> {
    let Some(c) = e.comms_mut().remove(comm) else {
        return Vec::new();
    };
    let mut contexts = vec![c.context];
    if let Some(inter) = &c.inter {
        if let Some(l) = e.comms_mut().remove(inter.local_comm) {
            contexts.push(l.context);
        }
    }
    for d in e.router.devices() {
        for &x in &contexts {
            d.comm_freed(x);
        }
    }
    contexts
}

fn lock_zombies() -> std::sync::MutexGuard<'static, Vec<CommId>> {
    FREED_WITH_PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    pub(super) fn with_comm<T>(
        &self,
        call: &str,
        comm: CommId,
        f: impl FnOnce(&CommData) -> T,
    ) -> MpiResult<T> {
        let e = self.lock();
        let c = self.check_comm(&e, call, comm)?;
        Ok(f(c))
    }

    /// MPI_Comm_size.
    pub fn comm_size(&self, comm: CommId) -> MpiResult<usize> {
        self.with_comm("MPI_Comm_size", comm, |c| c.size())
    }
    /// MPI_Comm_rank.
    pub fn comm_rank(&self, comm: CommId) -> MpiResult<usize> {
        self.with_comm("MPI_Comm_rank", comm, |c| c.rank)
    }
    /// MPI_Comm_group.
    pub fn comm_group(&self, comm: CommId) -> MpiResult<Arc<Group>> {
        self.with_comm("MPI_Comm_group", comm, |c| c.group.clone())
    }
    /// Node id of each rank of the communicator.
    pub fn comm_nodes(&self, comm: CommId) -> MpiResult<Arc<Vec<u32>>> {
        self.with_comm("MPI_Comm_split_type", comm, |c| c.nodes.clone())
    }
    /// The collective context of a communicator (for the collectives layer).
    pub fn comm_coll_context(&self, comm: CommId) -> MpiResult<u32> {
        self.with_comm("collective", comm, |c| c.coll_context())
    }
    /// Check that `comm` is a live communicator.
    pub fn check_comm_id(&self, call: &str, comm: CommId) -> MpiResult<()> {
        self.with_comm(call, comm, |_| ())
    }
    /// MPI_Comm_get_name.
    pub fn comm_get_name(&self, comm: CommId) -> MpiResult<String> {
        self.with_comm("MPI_Comm_get_name", comm, |c| c.name.clone())
    }
    /// MPI_Comm_set_name.
    pub fn comm_set_name(&self, comm: CommId, name: &str) -> MpiResult<()> {
        let mut e = self.lock();
        self.check_comm(&e, "MPI_Comm_set_name", comm)?;
        e.comms_mut().get_mut(comm).expect("checked").name = name.to_string();
        Ok(())
    }

    /// Internal all-gather of byte blocks over `comm`'s collective context (used to make
    /// communicators; the collectives layer has the fast algorithms).
    pub fn allgather_bytes(
        &self,
        call: &str,
        comm: CommId,
        mine: &[u8],
    ) -> MpiResult<Vec<Vec<u8>>> {
        let (ctx_comm, size, rank, group) = {
            let e = self.lock();
            let c = self.check_comm(&e, call, comm)?;
            (comm, c.size(), c.rank, c.group.clone())
        };
        let _ = group;
        // Lengths first, then data, both as all-to-all of point-to-point messages on the
        // collective context (tag space below zero is reserved for internal traffic).
        let lens = self.exchange(
            ctx_comm,
            size,
            rank,
            -100,
            &(mine.len() as u64).to_ne_bytes(),
            |_| 8,
        )?;
        let lens: Vec<usize> = lens
            .iter()
            .map(|b| u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")) as usize)
            .collect();
        self.exchange(ctx_comm, size, rank, -101, mine, |r| lens[r])
    }

    /// Send `mine` to every other member and receive theirs, on the collective context.
    pub(super) fn exchange(
        &self,
        comm: CommId,
        size: usize,
        rank: usize,
        tag: i32,
        mine: &[u8],
        len_of: impl Fn(usize) -> usize,
    ) -> MpiResult<Vec<Vec<u8>>> {
        self.exchange_among(comm, size, rank, tag, mine, len_of, |_| true)
    }

    /// MPI_Finalize of a job that spans sites: IMPI's finalize barrier on MPI_COMM_WORLD,
    /// the IMPI barrier algorithm as LAM's `IMPI_Finalize` runs it (`MPI_Barrier` over
    /// the world with LAM's IMPI collectives): a barrier inside this site; the sites'
    /// masters (each site's lowest world rank) exchange zero-byte messages with tag 110 on
    /// the world's collective context, through master 0 up to four masters, a hypercube
    /// above; a barrier inside this site. (The collectives crate's `impi` module has the
    /// same algorithm for MPI_Barrier; the core cannot call up into it.)
    pub(super) fn impi_finalize_barrier(&self) -> MpiResult<()> {
        const IMPI_BARRIER_TAG: i32 = 110;
        const MAXLINEAR: usize = 4;
        self.site_barrier_internal()?;
        let sites = self.site_map();
        let me = self.rank as usize;
        let mut seen: Vec<u32> = Vec::new();
        let mut masters = Vec::new();
        for (r, s) in sites.iter().enumerate() {
            if !seen.contains(s) {
                seen.push(*s);
                masters.push(r);
            }
        }
        if let Some(mynum) = masters.iter().position(|&m| m == me) {
            let byte = self.lock().byte_type();
            let z = [0u8; 2];
            let zero = |to: usize, send: bool| -> MpiResult<()> {
                // SAFETY: zero-byte transfers at an address inside `z`, which outlives the
                // wait below.
                let id = unsafe {
                    if send {
                        self.coll_isend(z.as_ptr(), 0, &byte, to, IMPI_BARRIER_TAG, CommId::WORLD)?
                    } else {
                        let p = z.as_ptr().wrapping_add(1) as *mut u8;
                        self.coll_irecv(p, 0, &byte, to, IMPI_BARRIER_TAG, CommId::WORLD)?
                    }
                };
                self.waitall("MPI_Finalize", &[Some(id)]).map(|_| ())
            };
            let nm = masters.len();
            if nm <= MAXLINEAR {
                if mynum == 0 {
                    for &m in &masters[1..] {
                        zero(m, false)?;
                    }
                    for &m in &masters[1..] {
                        zero(m, true)?;
                    }
                } else {
                    zero(masters[0], true)?;
                    zero(masters[0], false)?;
                }
            } else {
                let dim = usize::BITS - (nm - 1).leading_zeros();
                let hibit = (0..dim as i32)
                    .rev()
                    .find(|&i| mynum & (1 << i) != 0)
                    .unwrap_or(-1);
                for i in ((hibit + 1)..dim as i32).rev() {
                    if mynum | (1 << i) < nm {
                        zero(masters[mynum | (1 << i)], false)?;
                    }
                }
                if mynum > 0 {
                    let parent = masters[mynum & !(1 << hibit)];
                    zero(parent, true)?;
                    zero(parent, false)?;
                }
                for i in (hibit + 1)..dim as i32 {
                    if mynum | (1 << i) < nm {
                        zero(masters[mynum | (1 << i)], true)?;
                    }
                }
            }
        }
        self.site_barrier_internal()
    }

    /// A barrier of the world ranks on this process's site only.
    pub(super) fn site_barrier_internal(&self) -> MpiResult<()> {
        let me = self.rank as usize;
        let sites = self.site_map();
        self.exchange_among(
            CommId::WORLD,
            self.size,
            me,
            -102,
            &[],
            |_| 0,
            |r| sites[r] == sites[me],
        )
        .map(|_| ())
    }

    /// [`Runtime::exchange`] with the members for which `member` holds only.
    #[allow(clippy::too_many_arguments)]
    fn exchange_among(
        &self,
        comm: CommId,
        size: usize,
        rank: usize,
        tag: i32,
        mine: &[u8],
        len_of: impl Fn(usize) -> usize,
        member: impl Fn(usize) -> bool,
    ) -> MpiResult<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = (0..size).map(|r| vec![0u8; len_of(r)]).collect();
        out[rank] = mine.to_vec();
        let mut reqs = Vec::new();
        {
            let mut e = self.lock();
            let byte = e.byte_type();
            let ctx = e.comms().get(comm).expect("checked").coll_context();
            for (r, buf) in out.iter_mut().enumerate() {
                if r == rank || !member(r) {
                    continue;
                }
                let id = e.new_request(
                    None,
                    Buf(buf.as_mut_ptr()),
                    buf.len(),
                    byte.clone(),
                    comm,
                    r as i32,
                    tag,
                    false,
                );
                e.set_request_context(id, ctx);
                e.start(id)?;
                reqs.push(Some(id));
            }
            for r in 0..size {
                if r == rank || !member(r) {
                    continue;
                }
                let id = e.new_request(
                    Some(SendMode::Standard),
                    Buf(mine.as_ptr() as *mut u8),
                    mine.len(),
                    byte.clone(),
                    comm,
                    r as i32,
                    tag,
                    false,
                );
                e.set_request_context(id, ctx);
                e.start(id)?;
                reqs.push(Some(id));
            }
        }
        self.waitall("internal exchange", &reqs)?;
        Ok(out)
    }

    /// Non-blocking send on `comm`'s collective context, for the collectives layer and
    /// internal protocols: any tag (negative ones are reserved for internal use), no
    /// user-argument checks beyond the communicator and the rank.
    ///
    /// # Safety
    /// As [`Runtime::isend`].
    pub unsafe fn coll_isend(
        &self,
        buf: *const u8,
        count: usize,
        dtype: &TypeRef,
        dest: usize,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        self.coll_request(
            Some(SendMode::Standard),
            buf as *mut u8,
            count,
            dtype,
            dest,
            tag,
            comm,
        )
    }

    /// Non-blocking receive on `comm`'s collective context (see [`Runtime::coll_isend`]).
    ///
    /// # Safety
    /// As [`Runtime::irecv`].
    pub unsafe fn coll_irecv(
        &self,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        source: usize,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        self.coll_request(None, buf, count, dtype, source, tag, comm)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn coll_request(
        &self,
        send: Option<SendMode>,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        peer: usize,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        let c = self.check_comm(&e, "collective", comm)?;
        if peer >= c.peer_size() {
            return Err(MpiError::new(
                ErrorClass::Rank,
                format!(
                    "collective: rank {peer} outside communicator of size {}",
                    c.peer_size()
                ),
            ));
        }
        let ctx = c.coll_context();
        let id = e.new_request(
            send,
            Buf(buf),
            count,
            dtype.clone(),
            comm,
            peer as i32,
            tag,
            false,
        );
        e.set_request_context(id, ctx);
        e.start(id)?;
        Ok(id)
    }

    /// Internal barrier over `comm`.
    pub fn barrier_internal(&self, comm: CommId) -> MpiResult<()> {
        self.allgather_bytes("MPI_Barrier", comm, &[]).map(|_| ())
    }

    /// Agree with the members of `comm` on a context pair free in all of them (collective
    /// over `comm`; see [`comm::ContextAllocator`] for why it may take several rounds).
    /// `extra` rides along the first exchange; returns every member's `extra`.
    pub(super) fn new_context(
        &self,
        call: &str,
        comm: CommId,
        extra: &[u8],
    ) -> MpiResult<(u32, Vec<Vec<u8>>)> {
        let parent = self.comm_coll_context(comm)?;
        // IMPI's rule ("max + 1") on communicators that span sites, the mask rule inside
        // one (see `comm::ContextAllocator::conclude_above_max`).
        let across_sites = {
            let members = self.with_comm(call, comm, |c| c.group.world_ranks().to_vec())?;
            members
                .iter()
                .any(|&w| self.sites.get(w as usize) != self.sites.get(members[0] as usize))
        };
        let mut extras: Option<Vec<Vec<u8>>> = None;
        loop {
            let offer = self.contexts.lock().expect("contexts lock").offer(parent);
            let mut mine = offer.to_bytes();
            if extras.is_none() {
                mine.extend_from_slice(extra);
            }
            let all = match self.allgather_bytes(call, comm, &mine) {
                Ok(all) => all,
                Err(e) => {
                    self.contexts.lock().expect("contexts lock").abandon(parent);
                    return Err(e);
                }
            };
            let offers: Vec<comm::Offer> = all
                .iter()
                .map(|b| comm::Offer::from_bytes(b).expect("members send whole offers"))
                .collect();
            if extras.is_none() {
                extras = Some(
                    all.into_iter()
                        .map(|b| b[comm::OFFER_BYTES..].to_vec())
                        .collect(),
                );
            }
            let verdict = {
                let mut alloc = self.contexts.lock().expect("contexts lock");
                if across_sites {
                    alloc.conclude_above_max(parent, &offers)
                } else {
                    alloc.conclude(parent, &offers)
                }
            };
            match verdict {
                comm::Agreed::Pair(k) => return Ok(((2 * k) as u32, extras.unwrap_or_default())),
                comm::Agreed::Exhausted => {
                    return Err(MpiError::new(
                        ErrorClass::Other,
                        format!("{call}: out of communicator context ids (too many communicators)"),
                    ))
                }
                // Another thread's allocation holds the mask somewhere: let it finish.
                comm::Agreed::Retry => std::thread::yield_now(),
            }
        }
    }

    pub(super) fn insert_comm(
        &self,
        parent: CommId,
        group: Group,
        rank: usize,
        context: u32,
    ) -> MpiResult<CommId> {
        self.reap_freed_comms();
        let mut e = self.lock();
        let (errhandler, world_nodes) = {
            let p = self.check_comm(&e, "communicator creation", parent)?;
            (p.errhandler.clone(), self.nodes.clone())
        };
        let ranks = group.world_ranks();
        let nodes = Arc::new(if ranks.iter().all(|&w| (w as usize) < world_nodes.len()) {
            ranks.iter().map(|&w| world_nodes[w as usize]).collect()
        } else {
            // Processes of several worlds (dynamic processes): each world knows only its
            // own placement, and the members must agree on one, or the hierarchical
            // collectives would pick different teams: every member is a node of its own.
            (0..ranks.len() as u32).collect()
        });
        if e.router.has_devices() {
            // Devices with per-communicator state (collectives, context agreement) learn
            // of it here.
            let members = group.world_ranks().to_vec();
            for d in e.router.devices() {
                d.comm_created(context, &members);
            }
        }
        let data = CommData {
            group: Arc::new(group),
            rank,
            context,
            name: String::new(),
            errhandler,
            attrs: Default::default(),
            nodes,
            inter: None,
        };
        let id = e.comms_mut().insert(data);
        // A reused slot starts without a buffer; a communicator derived from a session's
        // keeps using that session's buffer.
        e.core.bsend_scoped.comm_freed(id);
        if let Some(s) = e.core.bsend_scoped.session_of(parent) {
            e.core.bsend_scoped.set_session(id, s);
        }
        Ok(id)
    }

    /// MPI_Comm_dup (attributes copied through their keyvals' copy callbacks).
    pub fn comm_dup(&self, comm: CommId) -> MpiResult<CommId> {
        let call = "MPI_Comm_dup";
        let new = if self.comm_test_inter(comm)? {
            self.inter_dup(call, comm)?
        } else {
            let (context, _) = self.new_context(call, comm, &[])?;
            let (group, rank) = self.with_comm(call, comm, |c| ((*c.group).clone(), c.rank))?;
            self.insert_comm(comm, group, rank, context)?
        };
        self.copy_attrs(call, comm, new)?;
        Ok(new)
    }

    /// Copy `old`'s attributes to `new` through their keyvals' copy callbacks.
    pub(super) fn copy_attrs(&self, call: &str, comm: CommId, new: CommId) -> MpiResult<()> {
        let attrs = self.with_comm(call, comm, |c| c.attrs.clone())?;
        // Copy callbacks run without the engine lock: they may call MPI.
        for (kv, val) in attrs {
            let keyval = self
                .keyvals
                .lock()
                .expect("keyvals")
                .get(kv_index(kv))
                .cloned();
            if let Some(Keyval {
                copy: Some(f),
                extra,
                ..
            }) = keyval
            {
                if let Some(v) = f(comm, kv, extra, val)? {
                    let mut e = self.lock();
                    e.comms_mut()
                        .get_mut(new)
                        .expect("just made")
                        .attrs
                        .insert(kv, v);
                }
            }
        }
        Ok(())
    }

    /// MPI_Comm_split: None for MPI_UNDEFINED colour (MPI_COMM_NULL).
    pub fn comm_split(&self, comm: CommId, color: i32, key: i32) -> MpiResult<Option<CommId>> {
        let call = "MPI_Comm_split";
        if self.comm_test_inter(comm)? {
            return self.inter_split(call, comm, color, key);
        }
        let mut mine = Vec::with_capacity(8);
        mine.extend_from_slice(&color.to_ne_bytes());
        mine.extend_from_slice(&key.to_ne_bytes());
        let (context, all) = self.new_context(call, comm, &mine)?;
        // The colours are checked after the exchange, so that every member sees the same
        // verdict and nobody is left waiting for a rank that gave up early.
        for (r, b) in all.iter().enumerate() {
            let c = i32::from_ne_bytes(b[0..4].try_into().expect("4 bytes"));
            if c < 0 && c != crate::group::UNDEFINED {
                self.release_context(context);
                return Err(MpiError::new(
                    ErrorClass::Arg,
                    format!("{call}: invalid color {c} (given by rank {r}; colors must be >= 0 or MPI_UNDEFINED)"),
                ));
            }
        }
        if color == crate::group::UNDEFINED {
            self.release_context(context);
            return Ok(None);
        }
        let parent = self.comm_group(comm)?;
        let mut members: Vec<(i32, usize)> = all
            .iter()
            .enumerate()
            .filter_map(|(r, b)| {
                let c = i32::from_ne_bytes(b[0..4].try_into().expect("4 bytes"));
                let k = i32::from_ne_bytes(b[4..8].try_into().expect("4 bytes"));
                (c == color).then_some((k, r))
            })
            .collect();
        members.sort();
        let my_parent_rank = self.comm_rank(comm)?;
        let ranks: Vec<u32> = members.iter().map(|&(_, r)| parent.world_rank(r)).collect();
        let rank = members
            .iter()
            .position(|&(_, r)| r == my_parent_rank)
            .expect("a member with my colour is me");
        self.insert_comm(comm, Group::new(ranks), rank, context)
            .map(Some)
    }

    /// MPI_Comm_create: None for processes outside `group`.
    pub fn comm_create(&self, comm: CommId, group: &Group) -> MpiResult<Option<CommId>> {
        let call = "MPI_Comm_create";
        let parent = self.comm_group(comm)?;
        if self.comm_test_inter(comm)? {
            // The group is a subgroup of the local group; each side gives its own.
            let (color, key) = match group.rank_of(self.rank) {
                Some(r) => (0, r as i32),
                None => (crate::group::UNDEFINED, 0),
            };
            for &w in group.world_ranks() {
                if parent.rank_of(w).is_none() {
                    return Err(MpiError::new(
                        ErrorClass::Group,
                        format!("{call}: the group contains world rank {w}, which is not in the local group"),
                    ));
                }
            }
            return self.inter_split(call, comm, color, key);
        }
        for &w in group.world_ranks() {
            if parent.rank_of(w).is_none() {
                return Err(MpiError::new(
                    ErrorClass::Group,
                    format!("{call}: the group contains world rank {w}, which is not in the communicator"),
                ));
            }
        }
        let (context, _) = self.new_context(call, comm, &[])?;
        match group.rank_of(self.rank) {
            Some(rank) => self
                .insert_comm(comm, group.clone(), rank, context)
                .map(Some),
            None => {
                self.release_context(context);
                Ok(None)
            }
        }
    }

    pub(super) fn release_context(&self, context: u32) {
        self.contexts
            .lock()
            .expect("contexts lock")
            .release((context / 2) as usize);
    }

    /// MPI_Comm_free (attribute delete callbacks run first).
    pub fn comm_free(&self, comm: CommId) -> MpiResult<()> {
        let call = "MPI_Comm_free";
        if comm == CommId::WORLD || comm == CommId::SELF {
            return Err(MpiError::new(
                ErrorClass::Comm,
                format!("{call}: MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed"),
            ));
        }
        let attrs = self.with_comm(call, comm, |c| c.attrs.clone())?;
        for (&kv, &val) in &attrs {
            self.run_delete(comm, kv, val)?;
        }
        let mut e = self.lock();
        e.comms_mut().get_mut(comm).expect("checked").attrs.clear();
        // Operations still pending on the communicator complete normally (MPI 4.1
        // §7.4.3): its slot and context stay taken until the last of them is gone, so
        // that no new communicator gets its context id (and their messages) or its id.
        if e.requests_on_comm(comm) {
            drop(e); // lock order: the list, then the engine (reap_freed_comms)
            lock_zombies().push(comm);
        } else {
            let contexts = take_comm_slot(&mut e, comm);
            drop(e);
            for c in contexts {
                self.release_context(c);
            }
        }
        self.attrs_dropped(attrs.into_keys());
        self.reap_freed_comms();
        Ok(())
    }

    /// Release the communicators freed while operations were pending on them whose
    /// operations are now all gone (run when communicators are freed or made).
    pub(super) fn reap_freed_comms(&self) {
        let mut zombies = lock_zombies();
        if zombies.is_empty() {
            return;
        }
        let mut e = self.lock();
        let mut released = Vec::new();
        zombies.retain(|&id| {
            if e.requests_on_comm(id) {
                return true;
            }
            released.extend(take_comm_slot(&mut e, id));
            false
        });
        drop(e);
        drop(zombies);
        for context in released {
            self.release_context(context);
        }
    }

    /// MPI_Comm_compare.
    pub fn comm_compare(&self, a: CommId, b: CommId) -> MpiResult<crate::group::Comparison> {
        use crate::group::Comparison;
        let call = "MPI_Comm_compare";
        let e = self.lock();
        let ca = self.check_comm(&e, call, a)?;
        let cb = self.check_comm(&e, call, b)?;
        if a == b {
            return Ok(Comparison::Ident);
        }
        let local = ca.group.compare(&cb.group);
        let both = match (&ca.inter, &cb.inter) {
            (None, None) => local,
            // Intercommunicators: both the local and the remote groups count (the weaker
            // relation of the two).
            (Some(x), Some(y)) => match (local, x.remote.compare(&y.remote)) {
                (Comparison::Unequal, _) | (_, Comparison::Unequal) => Comparison::Unequal,
                (Comparison::Similar, _) | (_, Comparison::Similar) => Comparison::Similar,
                _ => Comparison::Ident,
            },
            _ => Comparison::Unequal,
        };
        Ok(match both {
            Comparison::Ident => Comparison::Congruent,
            other => other,
        })
    }
}
