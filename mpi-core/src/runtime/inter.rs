//! Intercommunicators: MPI_Intercomm_create and MPI_Intercomm_merge, the remote group, and
//! dup, split and create on intercommunicators.
//!
//! An intercommunicator's context pair is agreed by all members of both groups: each group
//! ANDs its members' free masks over its local intracommunicator, the two leaders swap the
//! results (over the peer communicator, or the parent intercommunicator), each leader
//! hands the other group's answer to its group, and every member concludes the round with
//! its group's offers plus the other group's combined offer, so all members of both
//! groups reach one verdict. Each intercommunicator also owns a hidden intracommunicator
//! over its local group (`InterData::local_comm`) for the local phases of its collectives
//! and of the next intercommunicator made from it.

use super::*;
use crate::comm::InterData;

/// Internal tags of the intercommunicator protocols (below zero: never a user's).
const TAG_LEN: i32 = -120;
const TAG_DATA: i32 = -121;

/// Which context of a communicator a leader-to-leader swap uses.
#[derive(Clone, Copy)]
enum Lane {
    /// The point-to-point context with the user's tag (MPI_Intercomm_create's peer_comm).
    PointToPoint(i32),
    /// The collective context with internal tags.
    Collective,
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

fn bytes_of(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

impl Runtime {
    /// The intercommunicator data of `comm`, None for an intracommunicator.
    pub fn comm_inter(&self, comm: CommId) -> MpiResult<Option<InterData>> {
        self.with_comm("intercommunicator query", comm, |c| c.inter.clone())
    }

    /// MPI_Comm_test_inter.
    pub fn comm_test_inter(&self, comm: CommId) -> MpiResult<bool> {
        self.comm_is_inter("MPI_Comm_test_inter", comm)
    }

    /// Whether `comm`, an argument of `call` (named by the error if it is not a live
    /// communicator), is an intercommunicator.
    pub fn comm_is_inter(&self, call: &str, comm: CommId) -> MpiResult<bool> {
        self.with_comm(call, comm, |c| c.inter.is_some())
    }

    fn need_inter(&self, call: &str, comm: CommId) -> MpiResult<InterData> {
        self.with_comm(call, comm, |c| c.inter.clone())?
            .ok_or_else(|| {
                MpiError::new(
                    ErrorClass::Comm,
                    format!("{call}: the communicator is not an intercommunicator"),
                )
            })
    }

    /// MPI_Comm_remote_size.
    pub fn comm_remote_size(&self, comm: CommId) -> MpiResult<usize> {
        Ok(self.need_inter("MPI_Comm_remote_size", comm)?.remote.size())
    }

    /// MPI_Comm_remote_group.
    pub fn comm_remote_group(&self, comm: CommId) -> MpiResult<Arc<Group>> {
        Ok(self.need_inter("MPI_Comm_remote_group", comm)?.remote)
    }

    /// Size of the group that point-to-point ranks on `comm` name (the remote group of an
    /// intercommunicator).
    pub fn comm_peer_size(&self, comm: CommId) -> MpiResult<usize> {
        self.with_comm("communicator query", comm, |c| c.peer_size())
    }

    /// Send `mine` to `peer` of `comm` and receive what it sends (any length).
    fn swap_bytes(
        &self,
        call: &str,
        comm: CommId,
        peer: usize,
        lane: Lane,
        mine: &[u8],
    ) -> MpiResult<Vec<u8>> {
        let len = (mine.len() as u64).to_ne_bytes();
        let mut their_len = [0u8; 8];
        self.swap_fixed(call, comm, peer, lane, TAG_LEN, &len, &mut their_len)?;
        let mut theirs = vec![0u8; u64::from_ne_bytes(their_len) as usize];
        self.swap_fixed(call, comm, peer, lane, TAG_DATA, mine, &mut theirs)?;
        Ok(theirs)
    }

    #[allow(clippy::too_many_arguments)]
    fn swap_fixed(
        &self,
        call: &str,
        comm: CommId,
        peer: usize,
        lane: Lane,
        internal_tag: i32,
        mine: &[u8],
        theirs: &mut [u8],
    ) -> MpiResult<()> {
        let reqs = {
            let mut e = self.lock();
            let c = self.check_comm(&e, call, comm)?;
            if peer >= c.peer_size() {
                return Err(MpiError::new(
                    ErrorClass::Rank,
                    format!(
                        "{call}: leader rank {peer} outside the communicator (size {})",
                        c.peer_size()
                    ),
                ));
            }
            let (ctx, tag) = match lane {
                Lane::PointToPoint(t) => (c.context, t),
                Lane::Collective => (c.coll_context(), internal_tag),
            };
            let byte = e.byte_type();
            let r = e.new_request(
                None,
                Buf(theirs.as_mut_ptr()),
                theirs.len(),
                byte.clone(),
                comm,
                peer as i32,
                tag,
                false,
            );
            e.set_request_context(r, ctx);
            e.start(r)?;
            let s = e.new_request(
                Some(SendMode::Standard),
                Buf(mine.as_ptr() as *mut u8),
                mine.len(),
                byte,
                comm,
                peer as i32,
                tag,
                false,
            );
            e.set_request_context(s, ctx);
            e.start(s)?;
            [Some(r), Some(s)]
        };
        let st = self.waitall(call, &reqs)?;
        if st[0].error != 0 {
            return Err(MpiError::new(
                ErrorClass::Intern,
                format!("{call}: the other group's leader sent a malformed message"),
            ));
        }
        Ok(())
    }

    /// Leader swap plus hand-out: every member of `local` gets what the other group's
    /// leader sent (`exchange` runs on the local leader only).
    pub(super) fn leaders_swap(
        &self,
        call: &str,
        local: CommId,
        is_leader: bool,
        mine: &[u8],
        exchange: &dyn Fn(&[u8]) -> MpiResult<Vec<u8>>,
    ) -> MpiResult<Vec<u8>> {
        let theirs = if is_leader {
            exchange(mine)?
        } else {
            Vec::new()
        };
        // The leader's answer reaches the group by an all-gather in which only it speaks.
        let all = self.allgather_bytes(call, local, &theirs)?;
        Ok(all.into_iter().find(|b| !b.is_empty()).unwrap_or_default())
    }

    /// Agree on a context pair free in every member of both groups (see the module doc).
    pub(super) fn inter_context(
        &self,
        call: &str,
        local: CommId,
        is_leader: bool,
        exchange: &dyn Fn(&[u8]) -> MpiResult<Vec<u8>>,
    ) -> MpiResult<u32> {
        let parent = self.comm_coll_context(local)?;
        loop {
            let offer = self.contexts.lock().expect("contexts lock").offer(parent);
            let all = match self.allgather_bytes(call, local, &offer.to_bytes()) {
                Ok(a) => a,
                Err(e) => {
                    self.contexts.lock().expect("contexts lock").abandon(parent);
                    return Err(e);
                }
            };
            let mut offers: Vec<comm::Offer> = all
                .iter()
                .map(|b| comm::Offer::from_bytes(b).expect("members send whole offers"))
                .collect();
            let combined = comm::combine(&offers);
            let theirs = self.leaders_swap(call, local, is_leader, &combined.to_bytes(), exchange);
            let theirs = match theirs {
                Ok(t) => t,
                Err(e) => {
                    self.contexts.lock().expect("contexts lock").abandon(parent);
                    return Err(e);
                }
            };
            let other = comm::Offer::from_bytes(&theirs).ok_or_else(|| {
                self.contexts.lock().expect("contexts lock").abandon(parent);
                MpiError::new(
                    ErrorClass::Intern,
                    format!("{call}: malformed context offer from the other group"),
                )
            })?;
            offers.push(other);
            let verdict = self
                .contexts
                .lock()
                .expect("contexts lock")
                .conclude(parent, &offers);
            match verdict {
                comm::Agreed::Pair(k) => return Ok((2 * k) as u32),
                comm::Agreed::Exhausted => {
                    return Err(MpiError::new(
                        ErrorClass::Other,
                        format!("{call}: out of communicator context ids (too many communicators)"),
                    ))
                }
                comm::Agreed::Retry => std::thread::yield_now(),
            }
        }
    }

    /// A hidden intracommunicator over `group` (this process's rank `rank`), made
    /// collectively over `parent` whose members are exactly `group`'s.
    pub(super) fn hidden_local(&self, call: &str, parent: CommId) -> MpiResult<CommId> {
        let (context, _) = self.new_context(call, parent, &[])?;
        let (group, rank) = self.with_comm(call, parent, |c| ((*c.group).clone(), c.rank))?;
        let id = self.insert_comm(parent, group, rank, context)?;
        self.lock().comms_mut().get_mut(id).expect("just made").name =
            format!("{call} local group");
        Ok(id)
    }

    pub(super) fn insert_inter(
        &self,
        parent: CommId,
        local: CommId,
        remote: Group,
        context: u32,
    ) -> MpiResult<CommId> {
        let (group, rank) = self.with_comm("intercommunicator creation", local, |c| {
            ((*c.group).clone(), c.rank)
        })?;
        let id = self.insert_comm(parent, group, rank, context)?;
        self.lock()
            .comms_mut()
            .get_mut(id)
            .expect("just made")
            .inter = Some(InterData {
            remote: Arc::new(remote),
            local_comm: local,
        });
        Ok(id)
    }

    /// MPI_Intercomm_create: collective over `local_comm`; the leaders also talk over
    /// `peer_comm` with `tag` (peer_comm and remote_leader matter at the leader only).
    pub fn intercomm_create(
        &self,
        local_comm: CommId,
        local_leader: i32,
        peer_comm: CommId,
        remote_leader: i32,
        tag: i32,
    ) -> MpiResult<CommId> {
        let call = "MPI_Intercomm_create";
        let (size, me, group, inter) = self.with_comm(call, local_comm, |c| {
            (c.size(), c.rank, c.group.clone(), c.inter.is_some())
        })?;
        if inter {
            return Err(MpiError::new(
                ErrorClass::Comm,
                format!("{call}: local_comm must be an intracommunicator"),
            ));
        }
        if local_leader < 0 || local_leader as usize >= size {
            return Err(MpiError::new(
                ErrorClass::Rank,
                format!("{call}: invalid local_leader {local_leader} (local_comm size {size})"),
            ));
        }
        let is_leader = me == local_leader as usize;
        if is_leader {
            let n = self.comm_peer_size(peer_comm)?;
            if remote_leader < 0 || remote_leader as usize >= n {
                return Err(MpiError::new(
                    ErrorClass::Rank,
                    format!("{call}: invalid remote_leader {remote_leader} (peer_comm size {n})"),
                ));
            }
            Self::check_tag(call, tag, false)?;
        }
        // Leaders talk with rank 0 of the hand-out all-gather being the leader's answer;
        // the local leader may be any rank, so hand-outs use the leader's entry.
        let exchange = |mine: &[u8]| {
            self.swap_bytes(
                call,
                peer_comm,
                remote_leader as usize,
                Lane::PointToPoint(tag),
                mine,
            )
        };
        let remote = self.leaders_swap(
            call,
            local_comm,
            is_leader,
            &bytes_of(group.world_ranks()),
            &exchange,
        )?;
        let remote = u32s(&remote);
        if remote.is_empty() || remote.iter().any(|&w| w as usize >= self.size) {
            return Err(MpiError::new(
                ErrorClass::Intern,
                format!("{call}: malformed remote group from the other leader"),
            ));
        }
        if remote.iter().any(|&w| group.rank_of(w).is_some()) {
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!("{call}: the local and remote groups overlap"),
            ));
        }
        let context = self.inter_context(call, local_comm, is_leader, &exchange)?;
        let local = self.hidden_local(call, local_comm)?;
        self.insert_inter(local_comm, local, Group::new(remote), context)
    }

    /// The leader swap over an existing intercommunicator: local rank 0 with remote rank 0.
    fn over_inter<'a>(
        &'a self,
        call: &'a str,
        inter: CommId,
    ) -> impl Fn(&[u8]) -> MpiResult<Vec<u8>> + 'a {
        move |mine: &[u8]| self.swap_bytes(call, inter, 0, Lane::Collective, mine)
    }

    /// MPI_Intercomm_merge: an intracommunicator over both groups, the group that passed
    /// `high = false` first (equal `high`: the group of the lower leader world rank first).
    pub fn intercomm_merge(&self, inter: CommId, high: bool) -> MpiResult<CommId> {
        let call = "MPI_Intercomm_merge";
        let data = self.need_inter(call, inter)?;
        let (group, me) = self.with_comm(call, inter, |c| (c.group.clone(), c.rank))?;
        let is_leader = me == 0;
        let exchange = self.over_inter(call, inter);
        // The leaders swap `high` and a random nonce each, and hand out both nonces: with
        // equal `high`, groups of one world order by their leaders' world ranks, groups
        // of two worlds (dynamic processes: the remote ranks are this side's virtual
        // ones) by the nonces, which both sides compare alike.
        let mut mine = vec![high as u8];
        mine.extend_from_slice(&super::dynamic::process_nonce().to_le_bytes());
        let both = |m: &[u8]| -> MpiResult<Vec<u8>> {
            let mut t = exchange(m)?;
            t.extend_from_slice(m);
            Ok(t)
        };
        let theirs = self.leaders_swap(call, data.local_comm, is_leader, &mine, &both)?;
        if theirs.len() != 18 {
            return Err(MpiError::new(
                ErrorClass::Intern,
                format!("{call}: malformed answer from the other group's leader"),
            ));
        }
        let their_high = theirs[0] != 0;
        let nonce = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let (their_nonce, my_nonce) = (nonce(&theirs[1..9]), nonce(&theirs[10..18]));
        let low_first = if high != their_high {
            !high
        } else if self.is_own_world_rank(data.remote.world_rank(0)) {
            group.world_rank(0) < data.remote.world_rank(0)
        } else {
            my_nonce < their_nonce
        };
        let context = self.inter_context(call, data.local_comm, is_leader, &exchange)?;
        let (first, second) = if low_first {
            (&*group, &*data.remote)
        } else {
            (&*data.remote, &*group)
        };
        let ranks: Vec<u32> = first
            .world_ranks()
            .iter()
            .chain(second.world_ranks())
            .copied()
            .collect();
        let merged = Group::new(ranks);
        let rank = merged.rank_of(self.rank).expect("a member of my own group");
        self.insert_comm(inter, merged, rank, context)
    }

    /// MPI_Comm_dup on an intercommunicator (attributes are copied by the caller).
    pub(super) fn inter_dup(&self, call: &str, comm: CommId) -> MpiResult<CommId> {
        let data = self.need_inter(call, comm)?;
        let me = self.comm_rank(comm)?;
        let exchange = self.over_inter(call, comm);
        let context = self.inter_context(call, data.local_comm, me == 0, &exchange)?;
        let local = self.hidden_local(call, data.local_comm)?;
        self.insert_inter(comm, local, (*data.remote).clone(), context)
    }

    /// MPI_Comm_split on an intercommunicator: the members of one colour on both sides
    /// form a new intercommunicator (local and remote ranks ordered by key, then by old
    /// rank); MPI_COMM_NULL for MPI_UNDEFINED or when the other side has no member of the
    /// colour. MPI_Comm_create on an intercommunicator is this with colour 0 for the
    /// members of the group (key: rank in the group).
    pub fn inter_split(
        &self,
        call: &str,
        comm: CommId,
        color: i32,
        key: i32,
    ) -> MpiResult<Option<CommId>> {
        let data = self.need_inter(call, comm)?;
        let me = self.comm_rank(comm)?;
        let mut mine = Vec::with_capacity(8);
        mine.extend_from_slice(&color.to_ne_bytes());
        mine.extend_from_slice(&key.to_ne_bytes());
        let local_all = self.allgather_bytes(call, data.local_comm, &mine)?;
        for (r, b) in local_all.iter().enumerate() {
            let c = i32::from_ne_bytes(b[0..4].try_into().expect("4 bytes"));
            if c < 0 && c != crate::group::UNDEFINED {
                return Err(MpiError::new(
                    ErrorClass::Arg,
                    format!("{call}: invalid color {c} (given by rank {r}; colors must be >= 0 or MPI_UNDEFINED)"),
                ));
            }
        }
        let exchange = self.over_inter(call, comm);
        let flat: Vec<u8> = local_all.concat();
        let remote_all = self.leaders_swap(call, data.local_comm, me == 0, &flat, &exchange)?;
        if remote_all.len() != 8 * data.remote.size() {
            return Err(MpiError::new(
                ErrorClass::Intern,
                format!("{call}: malformed colours from the other group"),
            ));
        }
        let pick = |entries: &[u8], g: &Group| -> Vec<u32> {
            let mut m: Vec<(i32, usize)> = entries
                .chunks_exact(8)
                .enumerate()
                .filter_map(|(r, b)| {
                    let c = i32::from_ne_bytes(b[0..4].try_into().expect("4 bytes"));
                    let k = i32::from_ne_bytes(b[4..8].try_into().expect("4 bytes"));
                    (c == color).then_some((k, r))
                })
                .collect();
            m.sort();
            m.iter().map(|&(_, r)| g.world_rank(r)).collect()
        };
        // Every member takes part in the agreement and the local split, whatever its
        // colour: both are collective over all members.
        let context = self.inter_context(call, data.local_comm, me == 0, &exchange)?;
        let local = self.comm_split(data.local_comm, color, key)?;
        let remote = pick(&remote_all, &data.remote);
        match local {
            Some(local) if color != crate::group::UNDEFINED && !remote.is_empty() => {
                self.lock()
                    .comms_mut()
                    .get_mut(local)
                    .expect("just made")
                    .name = format!("{call} local group");
                self.insert_inter(comm, local, Group::new(remote), context)
                    .map(Some)
            }
            other => {
                self.release_context(context);
                if let Some(l) = other {
                    self.comm_free(l)?;
                }
                Ok(None)
            }
        }
    }
}

impl Runtime {
    /// MPI_Intercomm_create_from_groups (MPI 4.0): collective over both groups (world
    /// processes, from MPI_COMM_WORLD's group or a session's process set). Each group
    /// makes its local communicator as MPI_Comm_create_from_group does, the two leaders a
    /// communicator of their own, and MPI_Intercomm_create joins them; the helpers are
    /// freed again (the intercommunicator keeps a hidden copy of the local one).
    pub fn intercomm_create_from_groups(
        &self,
        local: &Group,
        local_leader: i32,
        remote: &Group,
        remote_leader: i32,
        stringtag: &str,
    ) -> MpiResult<CommId> {
        let call = "MPI_Intercomm_create_from_groups";
        let me = local.rank_of(self.rank).ok_or_else(|| {
            MpiError::new(
                ErrorClass::Group,
                format!("{call}: the calling process is not in local_group"),
            )
        })?;
        for (what, g, r) in [
            ("local_leader", local, local_leader),
            ("remote_leader", remote, remote_leader),
        ] {
            if r < 0 || r as usize >= g.size() {
                return Err(MpiError::new(
                    ErrorClass::Rank,
                    format!("{call}: invalid {what} {r} (group size {})", g.size()),
                ));
            }
        }
        if remote
            .world_ranks()
            .iter()
            .any(|&w| local.rank_of(w).is_some())
        {
            return Err(MpiError::new(
                ErrorClass::Group,
                format!("{call}: local_group and remote_group overlap"),
            ));
        }
        let lw = local.world_rank(local_leader as usize);
        let rw = remote.world_rank(remote_leader as usize);
        let local_comm = self
            .comm_create_from_group(local, &format!("{stringtag}\u{1}local\u{1}{lw}"))
            .map_err(|e| with_call(call, e))?;
        let is_leader = me == local_leader as usize;
        let peer = if is_leader {
            let pair = Group::new(vec![lw.min(rw), lw.max(rw)]);
            Some(
                self.comm_create_from_group(&pair, &format!("{stringtag}\u{1}leaders"))
                    .map_err(|e| with_call(call, e))?,
            )
        } else {
            None
        };
        let r = self.intercomm_create(
            local_comm,
            local_leader,
            peer.unwrap_or(CommId::WORLD),
            i32::from(rw > lw),
            0,
        );
        if let Some(p) = peer {
            self.comm_free(p)?;
        }
        self.comm_free(local_comm)?;
        r
    }
}
