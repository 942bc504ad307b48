//! Communicators made without blocking the whole parent: MPI_Comm_idup (a schedule of the
//! core request table) and MPI_Comm_create_group (collective over the group's members
//! only). Both agree on a context pair with [`NewComm`], a state machine that exchanges
//! the members' free masks with non-blocking messages on the parent's collective context
//! and concludes each round with the [`comm::ContextAllocator`] like the blocking path.
//!
//! Each creation has its own tags (a per-communicator sequence number for idup, the
//! program's tag for create_group) and its own allocation identity (the parent context
//! with those numbers above it), so several may be in flight on one parent.

use std::sync::OnceLock;

use super::*;

/// Base of the internal tags of MPI_Comm_idup (round `r` of creation `s` uses
/// `IDUP_TAG - 64 s - r`).
const IDUP_TAG: i32 = -(1 << 22);
/// Base of the internal tags of MPI_Comm_create_group.
const CREATE_GROUP_TAG: i32 = -(1 << 28);

/// What to do with the new communicator when the agreement is done.
pub type NewCommDone = Box<dyn FnOnce(CommId) + Send>;

struct NewComm {
    call: &'static str,
    /// The communicator whose collective context carries the exchange.
    parent: CommId,
    /// The allocation's identity in the context allocator.
    identity: u32,
    /// Ranks in `parent` of the new communicator's members, in its order.
    members: Vec<usize>,
    /// This process's index in `members`.
    me: usize,
    group: Group,
    copy_attrs: bool,
    tag: i32,
    round: i32,
    posted: bool,
    mine: Vec<u8>,
    bufs: Vec<Vec<u8>>,
    reqs: Vec<Option<ReqId>>,
    done: Option<NewCommDone>,
}

impl NewComm {
    fn post(&mut self, rt: &Runtime) -> MpiResult<()> {
        let offer = rt
            .contexts
            .lock()
            .expect("contexts lock")
            .offer(self.identity);
        self.mine = offer.to_bytes();
        self.bufs = vec![vec![0u8; comm::OFFER_BYTES]; self.members.len()];
        self.reqs.clear();
        let tag = self.tag - (self.round % 64);
        let mut e = rt.lock();
        let byte = e.byte_type();
        let ctx = rt.check_comm(&e, self.call, self.parent)?.coll_context();
        for (i, &peer) in self.members.iter().enumerate() {
            if i == self.me {
                continue;
            }
            let r = e.new_request(
                None,
                Buf(self.bufs[i].as_mut_ptr()),
                comm::OFFER_BYTES,
                byte.clone(),
                self.parent,
                peer as i32,
                tag,
                false,
            );
            e.set_request_context(r, ctx);
            e.start(r)?;
            self.reqs.push(Some(r));
            let s = e.new_request(
                Some(SendMode::Standard),
                Buf(self.mine.as_ptr() as *mut u8),
                comm::OFFER_BYTES,
                byte.clone(),
                self.parent,
                peer as i32,
                tag,
                false,
            );
            e.set_request_context(s, ctx);
            e.start(s)?;
            self.reqs.push(Some(s));
        }
        self.posted = true;
        Ok(())
    }

    fn step(&mut self, rt: &Runtime) -> MpiResult<bool> {
        loop {
            if !self.posted {
                self.post(rt)?;
            }
            if rt.testall(self.call, &self.reqs)?.is_none() {
                return Ok(false);
            }
            self.bufs[self.me] = self.mine.clone();
            let offers: Vec<comm::Offer> = self
                .bufs
                .iter()
                .map(|b| comm::Offer::from_bytes(b).expect("whole offers"))
                .collect();
            let verdict = rt
                .contexts
                .lock()
                .expect("contexts lock")
                .conclude(self.identity, &offers);
            match verdict {
                comm::Agreed::Pair(k) => {
                    let group = std::mem::replace(&mut self.group, Group::empty());
                    let new = rt.insert_comm(self.parent, group, self.me, (2 * k) as u32)?;
                    if self.copy_attrs {
                        rt.copy_attrs(self.call, self.parent, new)?;
                    }
                    if let Some(done) = self.done.take() {
                        done(new);
                    }
                    return Ok(true);
                }
                comm::Agreed::Exhausted => {
                    return Err(MpiError::new(
                        ErrorClass::Other,
                        format!(
                            "{}: out of communicator context ids (too many communicators)",
                            self.call
                        ),
                    ))
                }
                comm::Agreed::Retry => {
                    self.round += 1;
                    self.posted = false;
                }
            }
        }
    }
}

impl Schedule for NewComm {
    fn advance(&mut self, rt: &Runtime) -> MpiResult<bool> {
        let r = self.step(rt);
        if r.is_err() {
            rt.contexts
                .lock()
                .expect("contexts lock")
                .abandon(self.identity);
        }
        r
    }
}

impl Runtime {
    /// MPI_Comm_idup: a request that completes when the new communicator exists; `done`
    /// gets it then (attributes copied as by MPI_Comm_dup). An intercommunicator is
    /// duplicated at once (blocking) and the request is complete.
    pub fn comm_idup(&self, comm: CommId, done: NewCommDone) -> MpiResult<ReqId> {
        let call = "MPI_Comm_idup";
        if self.comm_test_inter(comm)? {
            let new = self.comm_dup(comm)?;
            done(new);
            return self.start_schedule(Box::new(Finished));
        }
        static SEQ_KEYVAL: OnceLock<i32> = OnceLock::new();
        let kv = *SEQ_KEYVAL.get_or_init(|| {
            self.create_keyval(Keyval {
                copy: None,
                delete: None,
                extra: 0,
            })
        });
        let seq = self.get_attr(comm, kv)?.unwrap_or(0);
        self.set_attr(comm, kv, seq.wrapping_add(1))?;
        let (group, rank, size, ctx) = self.with_comm(call, comm, |c| {
            ((*c.group).clone(), c.rank, c.size(), c.coll_context())
        })?;
        let seq = (seq & 0x1fff) as u32;
        self.start_schedule(Box::new(NewComm {
            call,
            parent: comm,
            identity: (1 << 29) | (seq << 12) | ctx,
            members: (0..size).collect(),
            me: rank,
            group,
            copy_attrs: true,
            tag: IDUP_TAG - 64 * (seq as i32 & 0x3ff),
            round: 0,
            posted: false,
            mine: Vec::new(),
            bufs: Vec::new(),
            reqs: Vec::new(),
            done: Some(done),
        }))
    }

    /// MPI_Comm_create_group: collective over the members of `group` only (a subgroup of
    /// `comm`'s group, or of its local group for an intercommunicator; the result is an
    /// intracommunicator); `tag` tells apart concurrent creations on one communicator.
    pub fn comm_create_group(
        &self,
        comm: CommId,
        group: &Group,
        tag: i32,
    ) -> MpiResult<Option<CommId>> {
        let call = "MPI_Comm_create_group";
        Self::check_tag(call, tag, false)?;
        let (parent_group, inter) =
            self.with_comm(call, comm, |c| (c.group.clone(), c.inter.clone()))?;
        let mut members = Vec::with_capacity(group.size());
        for &w in group.world_ranks() {
            match parent_group.rank_of(w) {
                Some(r) => members.push(r),
                None => {
                    return Err(MpiError::new(
                        ErrorClass::Group,
                        format!("{call}: the group contains world rank {w}, which is not in the communicator"),
                    ))
                }
            }
        }
        let Some(me) = group.rank_of(self.rank) else {
            return Err(MpiError::new(
                ErrorClass::Group,
                format!("{call}: the calling process is not in the group"),
            ));
        };
        // On an intercommunicator the members talk over its local intracommunicator.
        let parent = inter.map_or(comm, |i| i.local_comm);
        let ctx = self.comm_coll_context(parent)?;
        let made = Arc::new(Mutex::new(None));
        let out = made.clone();
        let t = (tag & 0x3fff) as u32;
        let id = self.start_schedule(Box::new(NewComm {
            call,
            parent,
            identity: (1 << 30) | (t << 12) | ctx,
            members,
            me,
            group: group.clone(),
            copy_attrs: false,
            tag: CREATE_GROUP_TAG - 64 * (tag & 0xffff),
            round: 0,
            posted: false,
            mine: Vec::new(),
            bufs: Vec::new(),
            reqs: Vec::new(),
            done: Some(Box::new(move |c| *out.lock().expect("result") = Some(c))),
        }))?;
        self.wait(call, id)?;
        let new = made.lock().expect("result").take();
        if let Some(new) = new {
            // The new communicator takes the error handler of `comm`, not of the local one.
            let eh = self.with_comm(call, comm, |c| c.errhandler.clone())?;
            if let Some(c) = self.lock().comms_mut().get_mut(new) {
                c.errhandler = eh;
            }
        }
        Ok(new)
    }
}

impl Runtime {
    /// MPI_Comm_create_from_group (MPI-4) without sessions: `group` is a group of world
    /// processes (e.g. from MPI_COMM_WORLD's group), the members agree over MPI_COMM_WORLD
    /// as MPI_Comm_create_group does, with `stringtag` (hashed) telling concurrent
    /// creations apart.
    pub fn comm_create_from_group(&self, group: &Group, stringtag: &str) -> MpiResult<CommId> {
        // FNV-1a: the same on every process, spread over the tag range.
        let mut h: u32 = 0x811c_9dc5;
        for b in stringtag.bytes() {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
        let tag = (h & 0x7fff_ffff) as i32;
        match self.comm_create_group(CommId::WORLD, group, tag) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(MpiError::new(
                ErrorClass::Group,
                "MPI_Comm_create_from_group: the group is empty",
            )),
            Err(mut e) => {
                e.message = e
                    .message
                    .replace("MPI_Comm_create_group", "MPI_Comm_create_from_group");
                Err(e)
            }
        }
    }
}

/// A schedule that is complete at once (an operation done before its request was made).
struct Finished;

impl Schedule for Finished {
    fn advance(&mut self, _rt: &Runtime) -> MpiResult<bool> {
        Ok(true)
    }
}
