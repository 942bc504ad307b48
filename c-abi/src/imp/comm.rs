//! Communicators and groups.

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use tsunagi_core::group::{Group, UNDEFINED};
use tsunagi_core::{CommId, ErrorClass, MpiResult};

use super::flag;
use crate::ffi::*;
use crate::handles::{self as h, err, InfoId};

pub(crate) fn comm_size(comm: CommId, size: &mut c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Comm_size")?;
    // The predefined communicators never change: no need for the engine lock.
    *size = match comm {
        CommId::WORLD => r.world_size(),
        CommId::SELF => 1,
        _ => r.comm_size(comm)?,
    } as c_int;
    Ok(())
}

pub(crate) fn comm_rank(comm: CommId, rank: &mut c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Comm_rank")?;
    *rank = match comm {
        CommId::WORLD => r.world_rank(),
        CommId::SELF => 0,
        _ => r.comm_rank(comm)?,
    } as c_int;
    Ok(())
}

fn out_comm(c: Option<CommId>) -> MPI_Comm {
    c.map(h::comm_handle).unwrap_or(MPI_COMM_NULL)
}

pub(crate) fn comm_dup(comm: CommId, new: &mut MPI_Comm) -> MpiResult<()> {
    *new = h::comm_handle(h::runtime("MPI_Comm_dup")?.comm_dup(comm)?);
    Ok(())
}

pub(crate) fn comm_dup_with_info(
    comm: CommId,
    _info: Option<InfoId>,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    comm_dup(comm, new)
}

pub(crate) fn comm_split(
    comm: CommId,
    color: c_int,
    key: c_int,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    *new = out_comm(h::runtime("MPI_Comm_split")?.comm_split(comm, color, key)?);
    Ok(())
}

pub(crate) fn comm_split_type(
    comm: CommId,
    split_type: c_int,
    key: c_int,
    info: Option<InfoId>,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Comm_split_type")?;
    let node = || -> MpiResult<c_int> {
        let nodes = r.comm_nodes(comm)?;
        Ok(nodes[r.comm_rank(comm)?] as c_int)
    };
    let color = match split_type {
        MPI_UNDEFINED => UNDEFINED,
        MPI_COMM_TYPE_SHARED => node()?,
        // The one hardware resource Tsunagi knows is the node (shared memory); any other
        // resource type gives MPI_COMM_NULL, as MPI-4 says for unrecognised values.
        MPI_COMM_TYPE_HW_GUIDED => {
            let kind = info.and_then(|i| super::info_value(i, "mpi_hw_resource_type"));
            match kind.as_deref() {
                Some("mpi_shared_memory") => node()?,
                _ => UNDEFINED,
            }
        }
        // MPI 4.1: the resource an info key names; a hardware resource type as for
        // MPI_COMM_TYPE_HW_GUIDED, or the process sets every process has
        // (`mpi_pset_name`: mpi://WORLD, mpi://SELF). Anything else: MPI_COMM_NULL.
        MPI_COMM_TYPE_RESOURCE_GUIDED => {
            let key = |k| info.and_then(|i| super::info_value(i, k));
            match (
                key("mpi_hw_resource_type").as_deref(),
                key("mpi_pset_name").as_deref(),
            ) {
                (Some("mpi_shared_memory"), _) => node()?,
                (_, Some("mpi://WORLD")) => 0,
                (_, Some("mpi://SELF")) => r.comm_rank(comm)? as c_int,
                _ => UNDEFINED,
            }
        }
        // A resource strictly smaller than the communicator: the node, if it spans more.
        MPI_COMM_TYPE_HW_UNGUIDED => {
            let nodes = r.comm_nodes(comm)?;
            if nodes.iter().all(|&n| n == nodes[0]) {
                UNDEFINED
            } else {
                node()?
            }
        }
        other => {
            return Err(err(
                ErrorClass::Arg,
                format!(
                    "split_type = {other} is not supported (MPI_COMM_TYPE_SHARED, MPI_COMM_TYPE_HW_GUIDED, MPI_COMM_TYPE_HW_UNGUIDED, MPI_COMM_TYPE_RESOURCE_GUIDED or MPI_UNDEFINED)"
                ),
            ))
        }
    };
    *new = out_comm(r.comm_split(comm, color, key)?);
    Ok(())
}

pub(crate) fn comm_create(comm: CommId, group: &Arc<Group>, new: &mut MPI_Comm) -> MpiResult<()> {
    *new = out_comm(h::runtime("MPI_Comm_create")?.comm_create(comm, group)?);
    Ok(())
}

pub(crate) fn comm_free(comm: &mut MPI_Comm) -> MpiResult<()> {
    let id = h::comm("comm", *comm)?;
    let r = h::runtime("MPI_Comm_free")?;
    // MPI 4.1: messages buffered in the communicator's buffer leave before it is freed.
    r.buffer_comm_freed(id)?;
    r.comm_free(id)?;
    *comm = MPI_COMM_NULL;
    Ok(())
}

pub(crate) fn comm_compare(a: CommId, b: CommId, result: &mut c_int) -> MpiResult<()> {
    *result = h::runtime("MPI_Comm_compare")?
        .comm_compare(a, b)?
        .as_mpich();
    Ok(())
}

pub(crate) fn comm_group(comm: CommId, group: &mut MPI_Group) -> MpiResult<()> {
    *group = h::new_group(h::runtime("MPI_Comm_group")?.comm_group(comm)?);
    Ok(())
}

pub(crate) fn comm_set_name(comm: CommId, name: &str) -> MpiResult<()> {
    let name: String = name.chars().take(MPI_MAX_OBJECT_NAME - 1).collect();
    h::runtime("MPI_Comm_set_name")?.comm_set_name(comm, &name)
}

pub(crate) fn comm_get_name(
    comm: Option<CommId>,
    name: *mut c_char,
    len: &mut c_int,
) -> MpiResult<()> {
    // MPI 4.1: the null communicator is named too.
    let n = match comm {
        Some(comm) => h::runtime("MPI_Comm_get_name")?.comm_get_name(comm)?,
        None => "MPI_COMM_NULL".to_string(),
    };
    // SAFETY: MPI requires room for MPI_MAX_OBJECT_NAME bytes.
    *len = unsafe { h::write_cstr("comm_name", name, MPI_MAX_OBJECT_NAME, &n)? } as c_int;
    Ok(())
}

pub(crate) fn comm_test_inter(comm: CommId, f: &mut c_int) -> MpiResult<()> {
    *f = flag(h::runtime("MPI_Comm_test_inter")?.comm_test_inter(comm)?);
    Ok(())
}

pub(crate) fn comm_remote_size(comm: CommId, size: &mut c_int) -> MpiResult<()> {
    *size = h::runtime("MPI_Comm_remote_size")?.comm_remote_size(comm)? as c_int;
    Ok(())
}

pub(crate) fn comm_remote_group(comm: CommId, group: &mut MPI_Group) -> MpiResult<()> {
    *group = h::new_group(h::runtime("MPI_Comm_remote_group")?.comm_remote_group(comm)?);
    Ok(())
}

pub(crate) fn intercomm_create(
    local_comm: CommId,
    local_leader: c_int,
    peer_comm: Option<CommId>,
    remote_leader: c_int,
    tag: c_int,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Intercomm_create")?;
    // peer_comm matters at the local leader only; elsewhere it may be MPI_COMM_NULL.
    let is_leader = r.comm_rank(local_comm)? as c_int == local_leader;
    let peer = match peer_comm {
        Some(p) => p,
        None if !is_leader => CommId::SELF,
        None => {
            return Err(err(
                ErrorClass::Comm,
                "peer_comm is MPI_COMM_NULL at the local leader",
            ))
        }
    };
    *new =
        h::comm_handle(r.intercomm_create(local_comm, local_leader, peer, remote_leader, tag)?);
    Ok(())
}

pub(crate) fn intercomm_merge(comm: CommId, high: c_int, new: &mut MPI_Comm) -> MpiResult<()> {
    *new = h::comm_handle(h::runtime("MPI_Intercomm_merge")?.intercomm_merge(comm, high != 0)?);
    Ok(())
}

pub(crate) fn comm_set_info(comm: CommId, _info: InfoId) -> MpiResult<()> {
    h::runtime("MPI_Comm_set_info")?.check_comm_id("MPI_Comm_set_info", comm)
}

pub(crate) fn comm_get_info(comm: CommId, info: &mut MPI_Info) -> MpiResult<()> {
    h::runtime("MPI_Comm_get_info")?.check_comm_id("MPI_Comm_get_info", comm)?;
    *info = h::new_info(Vec::new());
    Ok(())
}

pub(crate) fn barrier(comm: CommId) -> MpiResult<()> {
    tsunagi_collectives::barrier(h::runtime("MPI_Barrier")?, comm)
}

// ----- groups -----

pub(crate) fn group_size(g: &Arc<Group>, size: &mut c_int) -> MpiResult<()> {
    *size = g.size() as c_int;
    Ok(())
}

pub(crate) fn group_rank(g: &Arc<Group>, rank: &mut c_int) -> MpiResult<()> {
    let me = h::runtime("MPI_Group_rank")?.world_rank() as u32;
    *rank = g.rank_of(me).map(|r| r as c_int).unwrap_or(MPI_UNDEFINED);
    Ok(())
}

fn ranks<'a>(name: &str, p: *const c_int, n: c_int) -> MpiResult<&'a [c_int]> {
    // SAFETY: MPI requires an array of `n` ranks.
    unsafe { h::slice(name, p, n as usize) }
}

fn triples<'a>(p: *mut [c_int; 3], n: c_int) -> MpiResult<&'a [[c_int; 3]]> {
    // SAFETY: MPI requires an array of `n` (first, last, stride) triples.
    unsafe { h::slice("ranges", p as *const [c_int; 3], n as usize) }
}

fn made(g: MpiResult<Group>, out: &mut MPI_Group) -> MpiResult<()> {
    *out = h::new_group(Arc::new(g?));
    Ok(())
}

pub(crate) fn group_incl(
    g: &Arc<Group>,
    n: c_int,
    r: *const c_int,
    new: &mut MPI_Group,
) -> MpiResult<()> {
    made(g.incl(ranks("ranks", r, n)?), new)
}

pub(crate) fn group_excl(
    g: &Arc<Group>,
    n: c_int,
    r: *const c_int,
    new: &mut MPI_Group,
) -> MpiResult<()> {
    made(g.excl(ranks("ranks", r, n)?), new)
}

pub(crate) fn group_range_incl(
    g: &Arc<Group>,
    n: c_int,
    r: *mut [c_int; 3],
    new: &mut MPI_Group,
) -> MpiResult<()> {
    made(g.range_incl(triples(r, n)?), new)
}

pub(crate) fn group_range_excl(
    g: &Arc<Group>,
    n: c_int,
    r: *mut [c_int; 3],
    new: &mut MPI_Group,
) -> MpiResult<()> {
    made(g.range_excl(triples(r, n)?), new)
}

pub(crate) fn group_union(a: &Arc<Group>, b: &Arc<Group>, new: &mut MPI_Group) -> MpiResult<()> {
    made(Ok(a.union(b)), new)
}

pub(crate) fn group_intersection(
    a: &Arc<Group>,
    b: &Arc<Group>,
    new: &mut MPI_Group,
) -> MpiResult<()> {
    made(Ok(a.intersection(b)), new)
}

pub(crate) fn group_difference(
    a: &Arc<Group>,
    b: &Arc<Group>,
    new: &mut MPI_Group,
) -> MpiResult<()> {
    made(Ok(a.difference(b)), new)
}

pub(crate) fn group_translate_ranks(
    a: &Arc<Group>,
    n: c_int,
    r1: *const c_int,
    b: &Arc<Group>,
    r2: *mut c_int,
) -> MpiResult<()> {
    let out = a.translate_ranks(ranks("ranks1", r1, n)?, b)?;
    // SAFETY: MPI requires room for `n` ranks.
    let dst = unsafe { h::slice_mut("ranks2", r2, n as usize)? };
    dst.copy_from_slice(&out);
    Ok(())
}

pub(crate) fn group_compare(a: &Arc<Group>, b: &Arc<Group>, result: &mut c_int) -> MpiResult<()> {
    *result = a.compare(b).as_mpich();
    Ok(())
}

pub(crate) fn group_free(g: &mut MPI_Group) -> MpiResult<()> {
    h::free_group(g)
}

/// Where MPI_Comm_idup writes the new communicator when it exists.
struct NewCommSlot(*mut MPI_Comm);

// SAFETY: MPI requires the `newcomm` argument of MPI_Comm_idup to stay valid and untouched
// until the request completes; the core writes it once, on whichever thread completes it.
unsafe impl Send for NewCommSlot {}

impl NewCommSlot {
    fn put(&self, c: CommId) {
        // SAFETY: see the Send impl: a valid MPI_Comm location reserved for this write.
        unsafe { *self.0 = h::comm_handle(c) };
    }
}

pub(crate) fn comm_idup(
    comm: CommId,
    new: &mut MPI_Comm,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let slot = NewCommSlot(new as *mut MPI_Comm);
    let id = h::runtime("MPI_Comm_idup")?.comm_idup(comm, Box::new(move |c| slot.put(c)))?;
    *request = h::request_handle(id, false);
    Ok(())
}

pub(crate) fn comm_idup_with_info(
    comm: CommId,
    _info: Option<InfoId>,
    new: &mut MPI_Comm,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    comm_idup(comm, new, request)
}

pub(crate) fn comm_create_group(
    comm: CommId,
    group: &Arc<Group>,
    tag: c_int,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    *new = out_comm(h::runtime("MPI_Comm_create_group")?.comm_create_group(comm, group, tag)?);
    Ok(())
}

pub(crate) fn comm_create_from_group(
    group: &Arc<Group>,
    stringtag: &str,
    _info: Option<InfoId>,
    errhandler: tsunagi_core::comm::ErrHandler,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Comm_create_from_group")?;
    let id = r.comm_create_from_group(group, stringtag)?;
    if let Some(s) = super::session_of_group(group) {
        r.set_comm_session(id, s);
    }
    r.set_errhandler(id, errhandler)?;
    *new = h::comm_handle(id);
    Ok(())
}

pub(crate) fn intercomm_create_from_groups(
    local_group: &Arc<Group>,
    local_leader: c_int,
    remote_group: &Arc<Group>,
    remote_leader: c_int,
    stringtag: &str,
    _info: Option<InfoId>,
    errhandler: tsunagi_core::comm::ErrHandler,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Intercomm_create_from_groups")?;
    let id = r.intercomm_create_from_groups(
        local_group,
        local_leader,
        remote_group,
        remote_leader,
        stringtag,
    )?;
    if let Some(s) = super::session_of_group(local_group) {
        r.set_comm_session(id, s);
    }
    r.set_errhandler(id, errhandler)?;
    *new = h::comm_handle(id);
    Ok(())
}
