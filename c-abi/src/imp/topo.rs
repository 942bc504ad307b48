//! Process topologies: Cartesian grids, graphs and distributed graphs (the collectives
//! crate's `topo` module does the work; here are the C arrays and MPI_UNWEIGHTED).

use std::ffi::c_int;

use tsunagi_collectives::topo::{self, Topology};
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime};

use crate::ffi::*;
use crate::handles::{self as h, err, InfoId};

fn arr<'a>(name: &str, p: *const c_int, n: c_int) -> MpiResult<&'a [c_int]> {
    // SAFETY: MPI requires an array of `n` ints.
    unsafe { h::slice(name, p, n.max(0) as usize) }
}

fn arr_mut<'a>(name: &str, p: *mut c_int, n: usize) -> MpiResult<&'a mut [c_int]> {
    // SAFETY: MPI requires room for `n` ints.
    unsafe { h::slice_mut(name, p, n) }
}

fn out_comm(c: Option<CommId>) -> MPI_Comm {
    c.map(h::comm_handle).unwrap_or(MPI_COMM_NULL)
}

fn topology(r: &Runtime, call: &str, comm: CommId) -> MpiResult<std::sync::Arc<Topology>> {
    r.check_comm_id(call, comm)?;
    topo::topology(r, comm)?.ok_or_else(|| {
        err(
            ErrorClass::Topology,
            "the communicator has no process topology",
        )
    })
}

fn is_unweighted(p: *const c_int) -> bool {
    std::ptr::eq(p, crate::data::MPI_UNWEIGHTED.0)
}

fn is_weights_empty(p: *const c_int) -> bool {
    std::ptr::eq(p, crate::data::MPI_WEIGHTS_EMPTY.0)
}

/// A weights argument: None for MPI_UNWEIGHTED, empty for MPI_WEIGHTS_EMPTY.
fn weights<'a>(name: &str, p: *const c_int, n: c_int) -> MpiResult<Option<&'a [c_int]>> {
    if is_unweighted(p) {
        return Ok(None);
    }
    if is_weights_empty(p) {
        if n > 0 {
            return Err(err(
                ErrorClass::Arg,
                format!("{name} is MPI_WEIGHTS_EMPTY but there are {n} edges"),
            ));
        }
        return Ok(Some(&[]));
    }
    arr(name, p, n).map(Some)
}

pub(crate) fn dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> MpiResult<()> {
    let d = arr_mut("dims", dims, ndims as usize)?;
    topo::dims_create(nnodes, d)
}

pub(crate) fn cart_create(
    comm: CommId,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    reorder: c_int,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Cart_create")?;
    let d = arr("dims", dims, ndims)?;
    let p: Vec<bool> = arr("periods", periods, ndims)?
        .iter()
        .map(|&x| x != 0)
        .collect();
    *new = out_comm(topo::cart_create(r, comm, d, &p, reorder != 0)?);
    Ok(())
}

pub(crate) fn cart_get(
    comm: CommId,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Cart_get")?;
    r.check_comm_id("MPI_Cart_get", comm)?;
    let cart = topo::cart_of(r, "MPI_Cart_get", comm)?;
    let n = cart.ndims().min(maxdims as usize);
    let c = cart.coords(r.comm_rank(comm)? as c_int)?;
    arr_mut("dims", dims, n)?.copy_from_slice(&cart.dims[..n]);
    for (o, &p) in arr_mut("periods", periods, n)?
        .iter_mut()
        .zip(&cart.periods)
    {
        *o = c_int::from(p);
    }
    arr_mut("coords", coords, n)?.copy_from_slice(&c[..n]);
    Ok(())
}

pub(crate) fn cart_rank(comm: CommId, coords: *const c_int, rank: &mut c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Cart_rank")?;
    r.check_comm_id("MPI_Cart_rank", comm)?;
    let cart = topo::cart_of(r, "MPI_Cart_rank", comm)?;
    *rank = cart.rank(arr("coords", coords, cart.ndims() as c_int)?)?;
    Ok(())
}

pub(crate) fn cart_coords(
    comm: CommId,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Cart_coords")?;
    r.check_comm_id("MPI_Cart_coords", comm)?;
    let cart = topo::cart_of(r, "MPI_Cart_coords", comm)?;
    let c = cart.coords(rank)?;
    let n = c.len().min(maxdims as usize);
    arr_mut("coords", coords, n)?.copy_from_slice(&c[..n]);
    Ok(())
}

pub(crate) fn cart_shift(
    comm: CommId,
    direction: c_int,
    disp: c_int,
    source: &mut c_int,
    dest: &mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Cart_shift")?;
    r.check_comm_id("MPI_Cart_shift", comm)?;
    let cart = topo::cart_of(r, "MPI_Cart_shift", comm)?;
    let (s, d) = cart.shift_checked(r.comm_rank(comm)? as c_int, direction, disp)?;
    *source = s;
    *dest = d;
    Ok(())
}

pub(crate) fn cart_sub(comm: CommId, remain: *const c_int, new: &mut MPI_Comm) -> MpiResult<()> {
    let r = h::runtime("MPI_Cart_sub")?;
    r.check_comm_id("MPI_Cart_sub", comm)?;
    let cart = topo::cart_of(r, "MPI_Cart_sub", comm)?;
    let keep: Vec<bool> = arr("remain_dims", remain, cart.ndims() as c_int)?
        .iter()
        .map(|&x| x != 0)
        .collect();
    *new = h::comm_handle(topo::cart_sub(r, comm, &keep)?);
    Ok(())
}

pub(crate) fn cart_map(
    comm: CommId,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    newrank: &mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Cart_map")?;
    r.check_comm_id("MPI_Cart_map", comm)?;
    let d = arr("dims", dims, ndims)?;
    let p: Vec<bool> = arr("periods", periods, ndims)?
        .iter()
        .map(|&x| x != 0)
        .collect();
    let cart = topo::Cart::new("MPI_Cart_map", d, &p)?;
    let size = r.comm_size(comm)? as i64;
    if cart.size() > size {
        return Err(err(
            ErrorClass::Arg,
            format!(
                "a grid of {} processes needs more than the {size} in the communicator",
                cart.size()
            ),
        ));
    }
    *newrank = topo::cart_map(d, r.comm_rank(comm)? as c_int);
    Ok(())
}

pub(crate) fn cartdim_get(comm: CommId, ndims: &mut c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Cartdim_get")?;
    r.check_comm_id("MPI_Cartdim_get", comm)?;
    *ndims = topo::cart_of(r, "MPI_Cartdim_get", comm)?.ndims() as c_int;
    Ok(())
}

fn graph_arrays<'a>(
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
) -> MpiResult<(&'a [c_int], &'a [c_int])> {
    let idx = arr("index", index, nnodes)?;
    let nedges = idx.last().copied().unwrap_or(0);
    if nedges < 0 {
        return Err(err(
            ErrorClass::Arg,
            format!("index[{}] = {nedges} is negative", nnodes - 1),
        ));
    }
    Ok((idx, arr("edges", edges, nedges)?))
}

pub(crate) fn graph_create(
    comm: CommId,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    reorder: c_int,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Graph_create")?;
    let (idx, e) = graph_arrays(nnodes, index, edges)?;
    *new = out_comm(topo::graph_create(r, comm, idx, e, reorder != 0)?);
    Ok(())
}

fn graph_of(r: &Runtime, call: &str, comm: CommId) -> MpiResult<(Vec<c_int>, Vec<c_int>)> {
    match &*topology(r, call, comm)? {
        Topology::Graph { index, edges } => Ok((index.clone(), edges.clone())),
        _ => Err(err(
            ErrorClass::Topology,
            "the communicator has no graph topology",
        )),
    }
}

pub(crate) fn graph_get(
    comm: CommId,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Graph_get")?;
    let (idx, e) = graph_of(r, "MPI_Graph_get", comm)?;
    let ni = idx.len().min(maxindex as usize);
    let ne = e.len().min(maxedges as usize);
    arr_mut("index", index, ni)?.copy_from_slice(&idx[..ni]);
    arr_mut("edges", edges, ne)?.copy_from_slice(&e[..ne]);
    Ok(())
}

pub(crate) fn graph_map(
    comm: CommId,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    newrank: &mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Graph_map")?;
    r.check_comm_id("MPI_Graph_map", comm)?;
    graph_arrays(nnodes, index, edges)?;
    if nnodes as usize > r.comm_size(comm)? {
        return Err(err(
            ErrorClass::Arg,
            format!("nnodes = {nnodes} exceeds the communicator size"),
        ));
    }
    *newrank = topo::graph_map(nnodes, r.comm_rank(comm)? as c_int);
    Ok(())
}

fn graph_neighbours(r: &Runtime, call: &str, comm: CommId, rank: c_int) -> MpiResult<Vec<c_int>> {
    let t = topology(r, call, comm)?;
    let n = match &*t {
        Topology::Graph { index, .. } => index.len(),
        _ => {
            return Err(err(
                ErrorClass::Topology,
                "the communicator has no graph topology",
            ))
        }
    };
    if rank < 0 || rank as usize >= n {
        return Err(err(
            ErrorClass::Rank,
            format!("rank {rank} is not a node of the graph of {n}"),
        ));
    }
    Ok(t.graph_neighbors(rank).unwrap_or_default())
}

pub(crate) fn graph_neighbors(
    comm: CommId,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Graph_neighbors")?;
    let v = graph_neighbours(r, "MPI_Graph_neighbors", comm, rank)?;
    let n = v.len().min(maxneighbors as usize);
    arr_mut("neighbors", neighbors, n)?.copy_from_slice(&v[..n]);
    Ok(())
}

pub(crate) fn graph_neighbors_count(
    comm: CommId,
    rank: c_int,
    nneighbors: &mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Graph_neighbors_count")?;
    *nneighbors = graph_neighbours(r, "MPI_Graph_neighbors_count", comm, rank)?.len() as c_int;
    Ok(())
}

pub(crate) fn graphdims_get(comm: CommId, nnodes: &mut c_int, nedges: &mut c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Graphdims_get")?;
    let (idx, e) = graph_of(r, "MPI_Graphdims_get", comm)?;
    *nnodes = idx.len() as c_int;
    *nedges = e.len() as c_int;
    Ok(())
}

pub(crate) fn dist_graph_create(
    comm: CommId,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights_p: *const c_int,
    _info: Option<InfoId>,
    reorder: c_int,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Dist_graph_create")?;
    let s = arr("sources", sources, n)?;
    let d = arr("degrees", degrees, n)?;
    if let Some((i, x)) = d.iter().enumerate().find(|(_, x)| **x < 0) {
        return Err(err(
            ErrorClass::Arg,
            format!("degrees[{i}] = {x} is negative"),
        ));
    }
    let total: i64 = d.iter().map(|&x| x as i64).sum();
    let total = c_int::try_from(total)
        .map_err(|_| err(ErrorClass::Arg, "the degrees add up to more than an int"))?;
    let dst = arr("destinations", destinations, total)?;
    let w = weights("weights", weights_p, total)?;
    *new = h::comm_handle(topo::dist_graph_create(
        r,
        comm,
        s,
        d,
        dst,
        w,
        reorder != 0,
    )?);
    Ok(())
}

pub(crate) fn dist_graph_create_adjacent(
    comm: CommId,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    _info: Option<InfoId>,
    reorder: c_int,
    new: &mut MPI_Comm,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Dist_graph_create_adjacent")?;
    let s = arr("sources", sources, indegree)?;
    let sw = weights("sourceweights", sourceweights, indegree)?;
    let d = arr("destinations", destinations, outdegree)?;
    let dw = weights("destweights", destweights, outdegree)?;
    *new = h::comm_handle(topo::dist_graph_create_adjacent(
        r,
        comm,
        s,
        sw,
        d,
        dw,
        reorder != 0,
    )?);
    Ok(())
}

/// In- and out-neighbours with weights (None: unweighted) of this process.
type Adjacency = (
    Vec<c_int>,
    Option<Vec<c_int>>,
    Vec<c_int>,
    Option<Vec<c_int>>,
);

fn adjacency(r: &Runtime, call: &str, comm: CommId) -> MpiResult<Adjacency> {
    let t = topology(r, call, comm)?;
    Ok(match &*t {
        Topology::DistGraph {
            sources,
            sourceweights,
            destinations,
            destweights,
        } => (
            sources.clone(),
            sourceweights.clone(),
            destinations.clone(),
            destweights.clone(),
        ),
        other => {
            let (i, o) = other.neighbors(r.comm_rank(comm)? as c_int);
            (i, None, o, None)
        }
    })
}

pub(crate) fn dist_graph_neighbors_count(
    comm: CommId,
    indegree: &mut c_int,
    outdegree: &mut c_int,
    weighted: &mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Dist_graph_neighbors_count")?;
    let (s, sw, d, _) = adjacency(r, "MPI_Dist_graph_neighbors_count", comm)?;
    *indegree = s.len() as c_int;
    *outdegree = d.len() as c_int;
    *weighted = c_int::from(sw.is_some());
    Ok(())
}

pub(crate) fn dist_graph_neighbors(
    comm: CommId,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> MpiResult<()> {
    let r = h::runtime("MPI_Dist_graph_neighbors")?;
    let (s, sw, d, dw) = adjacency(r, "MPI_Dist_graph_neighbors", comm)?;
    let ni = s.len().min(maxindegree as usize);
    let no = d.len().min(maxoutdegree as usize);
    arr_mut("sources", sources, ni)?.copy_from_slice(&s[..ni]);
    arr_mut("destinations", destinations, no)?.copy_from_slice(&d[..no]);
    if let Some(w) = sw {
        if !is_unweighted(sourceweights) && !is_weights_empty(sourceweights) {
            arr_mut("sourceweights", sourceweights, ni)?.copy_from_slice(&w[..ni]);
        }
    }
    if let Some(w) = dw {
        if !is_unweighted(destweights) && !is_weights_empty(destweights) {
            arr_mut("destweights", destweights, no)?.copy_from_slice(&w[..no]);
        }
    }
    Ok(())
}

pub(crate) fn topo_test(comm: CommId, status: &mut c_int) -> MpiResult<()> {
    let r = h::runtime("MPI_Topo_test")?;
    r.check_comm_id("MPI_Topo_test", comm)?;
    *status = match topo::topo_test(r, comm)? {
        Some(k) => k as c_int,
        None => MPI_UNDEFINED,
    };
    Ok(())
}
