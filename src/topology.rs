//! Communicators, groups and processes.

use std::sync::Arc;

use tsunagi_core::{rt, CommId};

use crate::error::{Error, ErrorClass, Result};
use crate::point_to_point::{AnyProcess, Process};

/// How two groups or communicators relate: identical, congruent (same members in the
/// same order, different context), similar (same members, other order) or unequal.
pub use tsunagi_core::group::Comparison;

/// A rank in a communicator.
pub type Rank = i32;

/// Communicator operations common to every kind of communicator.
pub trait Communicator {
    /// The core's handle of the communicator.
    fn comm_id(&self) -> CommId;

    /// This process's rank (MPI_Comm_rank).
    fn rank(&self) -> Rank {
        rt("MPI_Comm_rank")
            .and_then(|r| r.comm_rank(self.comm_id()))
            .map_or(-1, |r| r as Rank)
    }
    /// Number of processes (MPI_Comm_size).
    fn size(&self) -> Rank {
        rt("MPI_Comm_size")
            .and_then(|r| r.comm_size(self.comm_id()))
            .map_or(0, |s| s as Rank)
    }
    /// Whether this is an intercommunicator (MPI_Comm_test_inter).
    fn is_inter(&self) -> bool {
        rt("MPI_Comm_test_inter")
            .and_then(|r| r.comm_test_inter(self.comm_id()))
            .unwrap_or(false)
    }
    /// Number of processes that point-to-point ranks and the per-process blocks of
    /// collectives refer to: the remote group's size on an intercommunicator, the size
    /// otherwise.
    fn peer_size(&self) -> Rank {
        rt("MPI_Comm_remote_size")
            .and_then(|r| r.comm_peer_size(self.comm_id()))
            .map_or(0, |s| s as Rank)
    }
    /// Rank and size, reporting errors (e.g. after MPI was finalized).
    fn try_rank_and_size(&self) -> Result<(Rank, Rank)> {
        let r = rt("MPI_Comm_rank")?;
        Ok((
            r.comm_rank(self.comm_id())? as Rank,
            r.comm_size(self.comm_id())? as Rank,
        ))
    }
    /// The process with rank `r` (checked when used).
    fn process_at_rank(&self, r: Rank) -> Process<'_, Self>
    where
        Self: Sized,
    {
        Process::new(self, r)
    }
    /// The null process (MPI_PROC_NULL): sends to it do nothing, receives from it return
    /// at once with an empty status.
    fn null_process(&self) -> Process<'_, Self>
    where
        Self: Sized,
    {
        Process::new(self, tsunagi_core::PROC_NULL)
    }
    /// Any process, for receiving (MPI_ANY_SOURCE).
    fn any_process(&self) -> AnyProcess<'_, Self>
    where
        Self: Sized,
    {
        AnyProcess::new(self)
    }
    /// This process.
    fn this_process(&self) -> Process<'_, Self>
    where
        Self: Sized,
    {
        let r = self.rank();
        Process::new(self, r)
    }
    /// A new communicator with the same group (MPI_Comm_dup; collective).
    fn duplicate(&self) -> Result<SimpleCommunicator> {
        let id = rt("MPI_Comm_dup")?.comm_dup(self.comm_id())?;
        Ok(SimpleCommunicator::owned(id))
    }
    /// Split by colour, ordering by rank in this communicator (MPI_Comm_split;
    /// collective). `None` for processes with [`Color::undefined`].
    fn split_by_color(&self, color: Color) -> Result<Option<SimpleCommunicator>> {
        let key = self.try_rank_and_size()?.0;
        self.split_by_color_with_key(color, key)
    }
    /// Split by colour, ordering by `key` then rank (MPI_Comm_split; collective).
    fn split_by_color_with_key(
        &self,
        color: Color,
        key: i32,
    ) -> Result<Option<SimpleCommunicator>> {
        let r = rt("MPI_Comm_split")?.comm_split(self.comm_id(), color.0, key)?;
        Ok(r.map(SimpleCommunicator::owned))
    }
    /// A communicator of the processes in `group`, a subgroup of this communicator's
    /// (MPI_Comm_create; collective over this communicator). `None` outside the group.
    fn split_by_subgroup_collective(&self, group: &Group) -> Result<Option<SimpleCommunicator>> {
        let r = rt("MPI_Comm_create")?.comm_create(self.comm_id(), &group.0)?;
        Ok(r.map(SimpleCommunicator::owned))
    }
    /// Split into one communicator per shared-memory node, ordered by `key` then rank
    /// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED; collective).
    fn split_shared(&self, key: i32) -> Result<SimpleCommunicator> {
        let r = rt("MPI_Comm_split_type")?;
        let nodes = r.comm_nodes(self.comm_id())?;
        let me = r.comm_rank(self.comm_id())?;
        let color = nodes[me] as i32;
        let c = r.comm_split(self.comm_id(), color, key)?;
        c.map(SimpleCommunicator::owned).ok_or_else(|| {
            Error::new(
                ErrorClass::Intern,
                "MPI_Comm_split_type: no communicator for my node",
            )
        })
    }
    /// How this communicator relates to `other` (MPI_Comm_compare).
    fn compare(&self, other: &impl Communicator) -> Result<Comparison> {
        Ok(rt("MPI_Comm_compare")?.comm_compare(self.comm_id(), other.comm_id())?)
    }
    /// The group of the communicator (MPI_Comm_group).
    fn group(&self) -> Result<Group> {
        Ok(Group(rt("MPI_Comm_group")?.comm_group(self.comm_id())?))
    }
    /// Block until every process of the communicator has called it (MPI_Barrier).
    fn barrier(&self) -> Result<()> {
        Ok(tsunagi_collectives::barrier(
            rt("MPI_Barrier")?,
            self.comm_id(),
        )?)
    }
    /// End the whole job with `code` (MPI_Abort). Never returns.
    fn abort(&self, code: i32) -> ! {
        match rt("MPI_Abort") {
            Ok(r) => r.abort(code, "MPI_Abort called from the Rust API"),
            Err(_) => std::process::exit(if code == 0 { 1 } else { code & 0xff }),
        }
    }
    /// The communicator's name (MPI_Comm_get_name).
    fn get_name(&self) -> Result<String> {
        Ok(rt("MPI_Comm_get_name")?.comm_get_name(self.comm_id())?)
    }
    /// Set the communicator's name (MPI_Comm_set_name).
    fn set_name(&self, name: &str) -> Result<()> {
        Ok(rt("MPI_Comm_set_name")?.comm_set_name(self.comm_id(), name)?)
    }
}

/// An intra-communicator. Communicators made by [`Communicator::duplicate`] and the
/// splits are freed (MPI_Comm_free) when dropped; MPI_COMM_WORLD and MPI_COMM_SELF are not.
#[derive(Debug)]
pub struct SimpleCommunicator {
    id: CommId,
    owned: bool,
}

impl SimpleCommunicator {
    /// MPI_COMM_WORLD.
    pub fn world() -> SimpleCommunicator {
        SimpleCommunicator {
            id: CommId::WORLD,
            owned: false,
        }
    }
    /// MPI_COMM_SELF.
    pub fn self_comm() -> SimpleCommunicator {
        SimpleCommunicator {
            id: CommId::SELF,
            owned: false,
        }
    }
    pub(crate) fn owned(id: CommId) -> SimpleCommunicator {
        SimpleCommunicator { id, owned: true }
    }
}

impl Communicator for SimpleCommunicator {
    fn comm_id(&self) -> CommId {
        self.id
    }
}

impl<C: Communicator + ?Sized> Communicator for &C {
    fn comm_id(&self) -> CommId {
        (**self).comm_id()
    }
}

impl Drop for SimpleCommunicator {
    fn drop(&mut self) {
        if self.owned {
            if let Ok(r) = rt("MPI_Comm_free") {
                if let Err(e) = r.comm_free(self.id) {
                    eprintln!("tsunagi: freeing a communicator failed: {e}");
                }
            }
        }
    }
}

/// A colour for [`Communicator::split_by_color`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Color(i32);

impl Color {
    /// A colour value; must be non-negative.
    pub fn with_value(value: i32) -> Color {
        Color(value)
    }
    pub(crate) fn value(self) -> i32 {
        self.0
    }
    /// Take no part in the new communicators (MPI_UNDEFINED).
    pub fn undefined() -> Color {
        Color(tsunagi_core::group::UNDEFINED)
    }
}

/// A group of processes (MPI_Group).
#[derive(Clone, Debug)]
pub struct Group(Arc<tsunagi_core::group::Group>);

impl Group {
    pub(crate) fn from_core(g: Arc<tsunagi_core::group::Group>) -> Group {
        Group(g)
    }
    pub(crate) fn core(&self) -> &tsunagi_core::group::Group {
        &self.0
    }
    /// Number of processes in the group.
    pub fn size(&self) -> Rank {
        self.0.size() as Rank
    }
    /// This process's rank in the group, `None` if it is not a member.
    pub fn rank(&self) -> Option<Rank> {
        let me = rt("MPI_Group_rank").ok()?.world_rank() as u32;
        self.0.rank_of(me).map(|r| r as Rank)
    }
    /// The group of the processes with ranks `ranks` in this group, in that order
    /// (MPI_Group_incl).
    pub fn include(&self, ranks: &[Rank]) -> Result<Group> {
        Ok(Group(Arc::new(self.0.incl(ranks)?)))
    }
    /// This group without the processes with ranks `ranks` (MPI_Group_excl).
    pub fn exclude(&self, ranks: &[Rank]) -> Result<Group> {
        Ok(Group(Arc::new(self.0.excl(ranks)?)))
    }
    /// The processes of the rank ranges `[first, last, stride]` (MPI_Group_range_incl).
    pub fn range_include(&self, ranges: &[[Rank; 3]]) -> Result<Group> {
        Ok(Group(Arc::new(self.0.range_incl(ranges)?)))
    }
    /// Members of either group, this group's first (MPI_Group_union).
    pub fn union(&self, other: &Group) -> Group {
        Group(Arc::new(self.0.union(&other.0)))
    }
    /// Members of both groups, in this group's order (MPI_Group_intersection).
    pub fn intersection(&self, other: &Group) -> Group {
        Group(Arc::new(self.0.intersection(&other.0)))
    }
    /// Members of this group that are not in `other` (MPI_Group_difference).
    pub fn difference(&self, other: &Group) -> Group {
        Group(Arc::new(self.0.difference(&other.0)))
    }
    /// The ranks in `other` of the processes with `ranks` in this group;
    /// [`Group::UNDEFINED_RANK`] for those not in `other` (MPI_Group_translate_ranks).
    pub fn translate_ranks(&self, ranks: &[Rank], other: &Group) -> Result<Vec<Rank>> {
        Ok(self.0.translate_ranks(ranks, &other.0)?)
    }
    /// How this group relates to `other` (MPI_Group_compare).
    pub fn compare(&self, other: &Group) -> Comparison {
        self.0.compare(&other.0)
    }
    /// The rank [`Group::translate_ranks`] gives for a process not in the other group.
    pub const UNDEFINED_RANK: Rank = tsunagi_core::group::UNDEFINED;
    /// The core's group.
    pub fn as_raw(&self) -> &tsunagi_core::group::Group {
        &self.0
    }
}

pub(crate) fn same_comm(call: &str, a: CommId, b: CommId) -> Result<()> {
    if a != b {
        return Err(Error::new(
            ErrorClass::Comm,
            format!("{call}: the destination and the source belong to different communicators"),
        ));
    }
    Ok(())
}
