//! Intercommunicators: a communicator between two disjoint groups. Point-to-point ranks
//! name the other (remote) group; [`Communicator::rank`] and [`Communicator::size`] are
//! those of this process's own (local) group, [`Communicator::peer_size`] the remote
//! group's size.
//!
//! Collectives have MPI's intercommunicator meaning: the all-to-all ones
//! ([`CommunicatorCollectives`](crate::collective::CommunicatorCollectives)) give each
//! group the other group's contributions, and their per-process buffer blocks are one per
//! remote process; the rooted ones ([`Root`](crate::collective::Root)) move data between
//! the root and the other group: the root calls them on
//! [`InterCommunicator::root_process`], its group mates on
//! [`Communicator::null_process`] (they take no part), and the other group on
//! `process_at_rank(root's rank in its group)`.
//!
//! ```no_run
//! use tsunagi::intercomm::InterCommunicator;
//! use tsunagi::traits::*;
//!
//! let universe = tsunagi::initialize().unwrap();
//! let world = universe.world();
//! let even = world.rank() % 2 == 0;
//! let local = world
//!     .split_by_color(tsunagi::topology::Color::with_value(world.rank() % 2))
//!     .unwrap()
//!     .unwrap();
//! let inter = InterCommunicator::create(&local, 0, &world, if even { 1 } else { 0 }, 7).unwrap();
//! let mut x = 0;
//! if even && local.rank() == 0 {
//!     x = 42;
//!     inter.root_process().broadcast_into(&mut x).unwrap();
//! } else if even {
//!     inter.null_process().broadcast_into(&mut x).unwrap();
//! } else {
//!     inter.process_at_rank(0).broadcast_into(&mut x).unwrap();
//! }
//! ```

use tsunagi_core::{rt, CommId};

use crate::error::Result;
use crate::point_to_point::{Process, Tag};
use crate::topology::{Color, Communicator, Group, Rank, SimpleCommunicator};

/// `MPI_ROOT`: the root's own "rank" in a rooted intercommunicator collective.
pub const ROOT: Rank = -3;
/// Not the root (a rank no process has): for the root checks of the Root trait.
pub(crate) const NOT_A_ROOT: Rank = -4;

/// An intercommunicator, freed (MPI_Comm_free) when dropped.
#[derive(Debug)]
pub struct InterCommunicator {
    id: CommId,
}

impl InterCommunicator {
    /// MPI_Intercomm_create: collective over `local`; its rank `local_leader` talks to
    /// rank `remote_leader` of `peer` (significant at the leader only) with `tag`.
    pub fn create(
        local: &impl Communicator,
        local_leader: Rank,
        peer: &impl Communicator,
        remote_leader: Rank,
        tag: Tag,
    ) -> Result<InterCommunicator> {
        let id = rt("MPI_Intercomm_create")?.intercomm_create(
            local.comm_id(),
            local_leader,
            peer.comm_id(),
            remote_leader,
            tag,
        )?;
        Ok(InterCommunicator { id })
    }

    /// Size of the remote group (MPI_Comm_remote_size).
    pub fn remote_size(&self) -> Rank {
        self.peer_size()
    }

    /// The remote group (MPI_Comm_remote_group).
    pub fn remote_group(&self) -> Result<Group> {
        Ok(Group::from_core(
            rt("MPI_Comm_remote_group")?.comm_remote_group(self.id)?,
        ))
    }

    /// The root's side of a rooted collective (MPI_ROOT).
    pub fn root_process(&self) -> Process<'_, Self> {
        Process::new(self, ROOT)
    }

    /// MPI_Intercomm_merge: an intracommunicator over both groups; the group passing
    /// `high = false` comes first (the same everywhere: the group of the lower world rank
    /// of the leaders).
    pub fn merge(&self, high: bool) -> Result<SimpleCommunicator> {
        let id = rt("MPI_Intercomm_merge")?.intercomm_merge(self.id, high)?;
        Ok(SimpleCommunicator::owned(id))
    }

    /// MPI_Comm_dup: a new intercommunicator between the same groups.
    pub fn duplicate(&self) -> Result<InterCommunicator> {
        let id = rt("MPI_Comm_dup")?.comm_dup(self.id)?;
        Ok(InterCommunicator { id })
    }

    /// MPI_Comm_split: the processes of one colour on both sides, ordered by `key`; None
    /// for the undefined colour or when the other group has no process of the colour.
    pub fn split_by_color_with_key(
        &self,
        color: Color,
        key: Rank,
    ) -> Result<Option<InterCommunicator>> {
        let r = rt("MPI_Comm_split")?.comm_split(self.id, color.value(), key)?;
        Ok(r.map(|id| InterCommunicator { id }))
    }

    /// MPI_Comm_create: `group` is a subgroup of the local group (each side gives its
    /// own); None outside it or when the other side's group is empty.
    pub fn split_by_subgroup_collective(&self, group: &Group) -> Result<Option<InterCommunicator>> {
        let r = rt("MPI_Comm_create")?.comm_create(self.id, group.core())?;
        Ok(r.map(|id| InterCommunicator { id }))
    }
}

impl Communicator for InterCommunicator {
    fn comm_id(&self) -> CommId {
        self.id
    }
}

impl Drop for InterCommunicator {
    fn drop(&mut self) {
        if let Ok(r) = rt("MPI_Comm_free") {
            if let Err(e) = r.comm_free(self.id) {
                eprintln!("tsunagi: freeing an intercommunicator failed: {e}");
            }
        }
    }
}
