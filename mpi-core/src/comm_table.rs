//! The communicator table: which communicators exist in this process, by [`CommId`].
//!
//! Boundary: the table owns the [`CommData`] of every live communicator and hands out
//! their ids (slot reuse, never the two predefined ones). The runtime creates, changes and
//! frees communicators through [`CommTable::insert`], [`CommTable::get_mut`] and
//! [`CommTable::remove`]; the request layer (`engine/`) needs only three facts of a
//! communicator and asks for nothing else: its point-to-point context
//! ([`CommTable::context`]), the world rank behind a peer rank ([`CommTable::world_rank`])
//! and the peer rank of a world rank ([`CommTable::comm_rank`], for MPI_SOURCE). The table
//! sits under the runtime's one lock with the request layer, because arrivals translate
//! their source rank while a transport's poll runs: a second lock would cost every message.

use tsunagi_p2p::Rank;

use crate::comm::{CommData, CommId};

/// Live communicators by id; a freed id's slot is reused by a later communicator.
#[derive(Default)]
pub(crate) struct CommTable {
    slots: Vec<Option<CommData>>,
}

impl CommTable {
    /// The communicator `id`, if it is live.
    #[inline]
    pub(crate) fn get(&self, id: CommId) -> Option<&CommData> {
        self.slots.get(id.0 as usize).and_then(|c| c.as_ref())
    }

    /// The communicator `id`, to change (name, error handler, attributes).
    #[inline]
    pub(crate) fn get_mut(&mut self, id: CommId) -> Option<&mut CommData> {
        self.slots.get_mut(id.0 as usize).and_then(|c| c.as_mut())
    }

    /// Add a communicator in the lowest free slot (never one of the predefined ids 0 and
    /// 1, MPI_COMM_WORLD and MPI_COMM_SELF, which are made first).
    pub(crate) fn insert(&mut self, data: CommData) -> CommId {
        match self.slots.iter().skip(2).position(|c| c.is_none()) {
            Some(i) => {
                self.slots[i + 2] = Some(data);
                CommId(i as u32 + 2)
            }
            None => {
                self.slots.push(Some(data));
                CommId(self.slots.len() as u32 - 1)
            }
        }
    }

    /// Take communicator `id` out of the table; its id may be handed out again.
    pub(crate) fn remove(&mut self, id: CommId) -> Option<CommData> {
        self.slots.get_mut(id.0 as usize).and_then(|c| c.take())
    }

    /// Every live communicator.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &CommData> {
        self.slots.iter().flatten()
    }

    /// The point-to-point context id of communicator `id`.
    #[inline]
    pub(crate) fn context(&self, id: CommId) -> Option<u32> {
        self.get(id).map(|c| c.context)
    }

    /// The world rank of peer rank `peer` of communicator `id` (for an intercommunicator,
    /// a rank of the remote group); None if either is not valid.
    #[inline]
    pub(crate) fn world_rank(&self, id: CommId, peer: usize) -> Option<Rank> {
        self.get(id)?.peer_group().world_ranks().get(peer).copied()
    }

    /// The peer rank that world rank `world` has in communicator `id`, or -1 if it is not
    /// a member (of the remote group, for an intercommunicator).
    #[inline]
    pub(crate) fn comm_rank(&self, id: CommId, world: Rank) -> i32 {
        self.get(id)
            .and_then(|c| c.peer_group().rank_of(world))
            .map_or(-1, |r| r as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::ErrHandler;
    use crate::group::Group;
    use std::sync::Arc;

    fn comm(ranks: Vec<u32>, context: u32) -> CommData {
        let n = ranks.len();
        CommData {
            group: Arc::new(Group::new(ranks)),
            rank: 0,
            context,
            name: String::new(),
            errhandler: ErrHandler::Return,
            attrs: Default::default(),
            nodes: Arc::new(vec![0; n]),
            inter: None,
        }
    }

    #[test]
    fn ids_are_reused_but_never_the_predefined_ones() {
        let mut t = CommTable::default();
        assert_eq!(t.insert(comm(vec![0, 1, 2], 0)), CommId(0));
        assert_eq!(t.insert(comm(vec![1], 2)), CommId(1));
        let a = t.insert(comm(vec![2, 0], 4));
        let b = t.insert(comm(vec![1, 2], 6));
        assert_eq!((a, b), (CommId(2), CommId(3)));
        assert_eq!(t.remove(a).map(|c| c.context), Some(4));
        assert!(t.get(a).is_none() && t.remove(a).is_none());
        assert_eq!(t.insert(comm(vec![0], 8)), a, "the freed slot is reused");
        assert_eq!(t.insert(comm(vec![0], 10)), CommId(4));
        // Even with a predefined slot empty (only at finalize), user ids start at 2.
        t.remove(CommId(1));
        assert_eq!(t.insert(comm(vec![0], 12)), CommId(5));
        assert_eq!(t.iter().count(), 5);
    }

    #[test]
    fn ranks_translate_both_ways() {
        let mut t = CommTable::default();
        t.insert(comm(vec![0, 1, 2, 3], 0));
        t.insert(comm(vec![3], 2));
        let c = t.insert(comm(vec![3, 1], 4));
        assert_eq!(t.context(c), Some(4));
        assert_eq!(t.world_rank(c, 0), Some(3));
        assert_eq!(t.world_rank(c, 1), Some(1));
        assert_eq!(t.world_rank(c, 2), None, "past the group");
        assert_eq!(t.comm_rank(c, 1), 1);
        assert_eq!(t.comm_rank(c, 0), -1, "not a member");
        assert_eq!(t.comm_rank(CommId(9), 0), -1, "no such communicator");
        assert_eq!(t.context(CommId(9)), None);
    }
}
