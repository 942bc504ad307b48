//! Process topologies: Cartesian grids, graphs and distributed graphs (pure functions
//! for the C ABI: `MPI_Dims_create`, `MPI_Cart_coords/rank/shift/sub/map`, graph
//! queries), the communicator constructors that attach them (`MPI_Cart_create`,
//! `MPI_Cart_sub`, `MPI_Graph_create`, `MPI_Dist_graph_create(_adjacent)`), and the
//! blocking neighbourhood collectives.
//!
//! A communicator's topology is cached as an attribute (an `Arc<Topology>`), so
//! `MPI_Comm_dup` carries it over and `MPI_Comm_free` drops it.

#![allow(clippy::needless_range_loop)]

use std::sync::{Arc, OnceLock};

use tsunagi_core::comm::Keyval;
use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::group::UNDEFINED;
use tsunagi_core::{CommId, ErrorClass, MpiResult, Runtime, PROC_NULL};

use crate::nbc::{one_round, CollRequest, Xfer};
use crate::util::{check_count, check_counts, check_displs, check_type, err, Ctx, SendBuf};

/// `MPI_GRAPH`, `MPI_CART`, `MPI_DIST_GRAPH` with MPICH's values.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopoKind {
    Graph = 1,
    Cart = 2,
    DistGraph = 3,
}

/// A Cartesian grid (row-major rank order, as MPI specifies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cart {
    pub dims: Vec<i32>,
    pub periods: Vec<bool>,
}

/// A topology attached to a communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    Cart(Cart),
    /// `MPI_Graph_create`'s arguments: cumulative degrees and the edge list.
    Graph {
        index: Vec<i32>,
        edges: Vec<i32>,
    },
    /// This process's in- and out-neighbours (weights None = `MPI_UNWEIGHTED`).
    DistGraph {
        sources: Vec<i32>,
        sourceweights: Option<Vec<i32>>,
        destinations: Vec<i32>,
        destweights: Option<Vec<i32>>,
    },
}

impl Topology {
    pub fn kind(&self) -> TopoKind {
        match self {
            Topology::Cart(_) => TopoKind::Cart,
            Topology::Graph { .. } => TopoKind::Graph,
            Topology::DistGraph { .. } => TopoKind::DistGraph,
        }
    }

    /// In-neighbours and out-neighbours of `rank` in the order the neighbourhood
    /// collectives use (Cartesian: per dimension the -1 then the +1 neighbour, possibly
    /// `MPI_PROC_NULL`).
    pub fn neighbors(&self, rank: i32) -> (Vec<i32>, Vec<i32>) {
        match self {
            Topology::Cart(c) => {
                let mut v = Vec::new();
                for d in 0..c.dims.len() {
                    let (lo, hi) = c.shift(rank, d, 1);
                    v.push(lo);
                    v.push(hi);
                }
                (v.clone(), v)
            }
            Topology::Graph { .. } => {
                let n = self.graph_neighbors(rank).unwrap_or_default();
                (n.clone(), n)
            }
            Topology::DistGraph {
                sources,
                destinations,
                ..
            } => (sources.clone(), destinations.clone()),
        }
    }

    /// `MPI_Graph_neighbors` of `rank` (graph topologies).
    pub fn graph_neighbors(&self, rank: i32) -> Option<Vec<i32>> {
        match self {
            Topology::Graph { index, edges } => {
                let r = rank as usize;
                let lo = if r == 0 { 0 } else { index[r - 1] as usize };
                Some(edges[lo..index[r] as usize].to_vec())
            }
            _ => None,
        }
    }
}

fn bad(class: ErrorClass, call: &str, msg: String) -> tsunagi_core::MpiError {
    err(class, format!("{call}: {msg}"))
}

/// `MPI_Dims_create`: fill the zero entries of `dims` so that the product is `nnodes`,
/// as balanced as possible and non-increasing.
pub fn dims_create(nnodes: i32, dims: &mut [i32]) -> MpiResult<()> {
    let call = "MPI_Dims_create";
    if nnodes < 0 {
        return Err(bad(
            ErrorClass::Arg,
            call,
            format!("nnodes {nnodes} is negative"),
        ));
    }
    let mut fixed: i64 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d < 0 {
            return Err(bad(
                ErrorClass::Dims,
                call,
                format!("dims[{i}] = {d} is negative"),
            ));
        }
        if d > 0 {
            fixed *= d as i64;
        }
    }
    let free_slots: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == 0).collect();
    if nnodes == 0 {
        return if free_slots.is_empty() && fixed == 0 {
            Ok(())
        } else {
            Err(bad(ErrorClass::Dims, call, "nnodes is 0".into()))
        };
    }
    if nnodes as i64 % fixed != 0 {
        return Err(bad(
            ErrorClass::Dims,
            call,
            format!(
                "the product of the given dimensions ({fixed}) does not divide nnodes {nnodes}"
            ),
        ));
    }
    let mut rest = nnodes as i64 / fixed;
    if free_slots.is_empty() {
        return if rest == 1 {
            Ok(())
        } else {
            Err(bad(
                ErrorClass::Dims,
                call,
                format!("dimensions multiply to {fixed}, not {nnodes}"),
            ))
        };
    }
    // Prime factors, largest first, each to the currently smallest slot.
    let mut primes = Vec::new();
    let mut f = 2;
    while f * f <= rest {
        while rest % f == 0 {
            primes.push(f);
            rest /= f;
        }
        f += 1;
    }
    if rest > 1 {
        primes.push(rest);
    }
    primes.sort_unstable_by(|a, b| b.cmp(a));
    let mut slots = vec![1i64; free_slots.len()];
    for p in primes {
        let i = (0..slots.len())
            .min_by_key(|&i| (slots[i], i))
            .expect("slots");
        slots[i] *= p;
    }
    slots.sort_unstable_by(|a, b| b.cmp(a));
    for (k, &i) in free_slots.iter().enumerate() {
        dims[i] = slots[k] as i32;
    }
    Ok(())
}

impl Cart {
    /// Check and build (`dims` > 0, as many periods as dims).
    pub fn new(call: &str, dims: &[i32], periods: &[bool]) -> MpiResult<Cart> {
        if dims.len() != periods.len() {
            return Err(bad(
                ErrorClass::Arg,
                call,
                "dims and periods differ in length".into(),
            ));
        }
        if let Some((i, d)) = dims.iter().enumerate().find(|(_, d)| **d <= 0) {
            return Err(bad(
                ErrorClass::Dims,
                call,
                format!("dims[{i}] = {d} is not positive"),
            ));
        }
        Ok(Cart {
            dims: dims.to_vec(),
            periods: periods.to_vec(),
        })
    }

    pub fn ndims(&self) -> usize {
        self.dims.len()
    }

    /// Number of grid points.
    pub fn size(&self) -> i64 {
        self.dims.iter().map(|&d| d as i64).product()
    }

    /// `MPI_Cart_coords`.
    pub fn coords(&self, rank: i32) -> MpiResult<Vec<i32>> {
        if rank < 0 || rank as i64 >= self.size() {
            return Err(bad(
                ErrorClass::Rank,
                "MPI_Cart_coords",
                format!("rank {rank} outside the grid of {}", self.size()),
            ));
        }
        let mut r = rank;
        let mut c = vec![0; self.ndims()];
        for d in (0..self.ndims()).rev() {
            c[d] = r % self.dims[d];
            r /= self.dims[d];
        }
        Ok(c)
    }

    /// `MPI_Cart_rank`: periodic dimensions wrap; others must be in range.
    pub fn rank(&self, coords: &[i32]) -> MpiResult<i32> {
        if coords.len() < self.ndims() {
            return Err(bad(
                ErrorClass::Arg,
                "MPI_Cart_rank",
                "too few coordinates".into(),
            ));
        }
        let mut r: i32 = 0;
        for d in 0..self.ndims() {
            let mut c = coords[d];
            let n = self.dims[d];
            if self.periods[d] {
                c = c.rem_euclid(n);
            } else if c < 0 || c >= n {
                return Err(bad(
                    ErrorClass::Arg,
                    "MPI_Cart_rank",
                    format!("coordinate {c} of dimension {d} outside 0..{n}"),
                ));
            }
            r = r * n + c;
        }
        Ok(r)
    }

    /// `MPI_Cart_shift`: (source, destination) for a shift of `disp` along `dim`;
    /// `MPI_PROC_NULL` off the edge of a non-periodic dimension.
    pub fn shift(&self, rank: i32, dim: usize, disp: i32) -> (i32, i32) {
        let Ok(c) = self.coords(rank) else {
            return (PROC_NULL, PROC_NULL);
        };
        let at = |delta: i32| {
            let mut cc = c.clone();
            let v = cc[dim] + delta;
            if !self.periods[dim] && (v < 0 || v >= self.dims[dim]) {
                return PROC_NULL;
            }
            cc[dim] = v;
            self.rank(&cc).unwrap_or(PROC_NULL)
        };
        (at(-disp), at(disp))
    }

    /// Checked `MPI_Cart_shift`.
    pub fn shift_checked(&self, rank: i32, dim: i32, disp: i32) -> MpiResult<(i32, i32)> {
        if dim < 0 || dim as usize >= self.ndims() {
            return Err(bad(
                ErrorClass::Dims,
                "MPI_Cart_shift",
                format!("direction {dim} outside 0..{}", self.ndims()),
            ));
        }
        Ok(self.shift(rank, dim as usize, disp))
    }

    /// The sub-grid kept by `remain` (`MPI_Cart_sub`), and this rank's (color, key) for
    /// the split that makes it.
    pub fn sub(&self, rank: i32, remain: &[bool]) -> MpiResult<(Cart, i32, i32)> {
        if remain.len() < self.ndims() {
            return Err(bad(
                ErrorClass::Arg,
                "MPI_Cart_sub",
                "remain_dims is too short".into(),
            ));
        }
        let c = self.coords(rank)?;
        let (mut color, mut key) = (0i32, 0i32);
        let mut dims = Vec::new();
        let mut periods = Vec::new();
        for d in 0..self.ndims() {
            if remain[d] {
                key = key * self.dims[d] + c[d];
                dims.push(self.dims[d]);
                periods.push(self.periods[d]);
            } else {
                color = color * self.dims[d] + c[d];
            }
        }
        Ok((Cart { dims, periods }, color, key))
    }
}

/// `MPI_Cart_map`: the rank this process gets in a grid of `dims` (identity placement),
/// or `MPI_UNDEFINED` if the grid is smaller than `rank`.
pub fn cart_map(dims: &[i32], rank: i32) -> i32 {
    let n: i64 = dims.iter().map(|&d| d as i64).product();
    if (rank as i64) < n {
        rank
    } else {
        UNDEFINED
    }
}

/// `MPI_Graph_map` (identity placement).
pub fn graph_map(nnodes: i32, rank: i32) -> i32 {
    if rank < nnodes {
        rank
    } else {
        UNDEFINED
    }
}

fn keyval(rt: &Runtime) -> i32 {
    static KV: OnceLock<i32> = OnceLock::new();
    *KV.get_or_init(|| {
        rt.create_keyval(Keyval {
            copy: Some(Arc::new(|_, _, _, v| {
                // SAFETY: the value is an `Arc<Topology>` pointer made by `set_topology`;
                // we add one strong count for the copy.
                unsafe { Arc::increment_strong_count(v as *const Topology) };
                Ok(Some(v))
            })),
            delete: Some(Arc::new(|_, _, v, _| {
                // SAFETY: as above; this releases the count the attribute held.
                unsafe { drop(Arc::from_raw(v as *const Topology)) };
                Ok(())
            })),
            extra: 0,
        })
    })
}

/// Attach a topology to a communicator (replacing any).
/// Topologies are defined on intracommunicators only (MPI_ERR_COMM otherwise).
fn no_intercomm(rt: &Runtime, call: &str, comm: CommId) -> MpiResult<()> {
    if rt.comm_test_inter(comm)? {
        return Err(tsunagi_core::MpiError::new(
            ErrorClass::Comm,
            format!("{call}: process topologies cannot be made on an intercommunicator"),
        ));
    }
    Ok(())
}

pub fn set_topology(rt: &Runtime, comm: CommId, topo: Topology) -> MpiResult<()> {
    let kv = keyval(rt);
    rt.set_attr(comm, kv, Arc::into_raw(Arc::new(topo)) as usize)
}

/// The topology of a communicator (`MPI_Topo_test` is its kind).
pub fn topology(rt: &Runtime, comm: CommId) -> MpiResult<Option<Arc<Topology>>> {
    let kv = keyval(rt);
    Ok(rt.get_attr(comm, kv)?.map(|v| {
        // SAFETY: the attribute holds one strong count of an `Arc<Topology>`; we take
        // another for the caller.
        unsafe {
            Arc::increment_strong_count(v as *const Topology);
            Arc::from_raw(v as *const Topology)
        }
    }))
}

/// `MPI_Topo_test`: None is `MPI_UNDEFINED`.
pub fn topo_test(rt: &Runtime, comm: CommId) -> MpiResult<Option<TopoKind>> {
    Ok(topology(rt, comm)?.map(|t| t.kind()))
}

/// `MPI_Cart_create` (ranks keep their order; `reorder` is allowed to be ignored).
/// None for processes outside the grid (`MPI_COMM_NULL`).
pub fn cart_create(
    rt: &Runtime,
    comm: CommId,
    dims: &[i32],
    periods: &[bool],
    _reorder: bool,
) -> MpiResult<Option<CommId>> {
    let call = "MPI_Cart_create";
    rt.check_comm_id(call, comm)?;
    no_intercomm(rt, call, comm)?;
    let cart = Cart::new(call, dims, periods)?;
    let size = rt.comm_size(comm)?;
    if cart.size() > size as i64 {
        return Err(bad(
            ErrorClass::Arg,
            call,
            format!(
                "a grid of {} processes needs more than the {size} in the communicator",
                cart.size()
            ),
        ));
    }
    let rank = rt.comm_rank(comm)? as i32;
    let color = if (rank as i64) < cart.size() {
        0
    } else {
        UNDEFINED
    };
    let new = rt.comm_split(comm, color, rank)?;
    if let Some(c) = new {
        set_topology(rt, c, Topology::Cart(cart))?;
    }
    Ok(new)
}

/// `MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`: one communicator per node (as
/// the placement map says, so `TSUNAGI_NODE_MAP` pretend nodes count), ordered by `key`
/// then rank.
pub fn split_type_shared(rt: &Runtime, comm: CommId, key: i32) -> MpiResult<CommId> {
    let call = "MPI_Comm_split_type";
    rt.check_comm_id(call, comm)?;
    let nodes = rt.comm_nodes(comm)?;
    let me = rt.comm_rank(comm)?;
    let color = (nodes[me] & 0x3fff_ffff) as i32;
    rt.comm_split(comm, color, key)?.ok_or_else(|| {
        bad(
            ErrorClass::Intern,
            call,
            "split gave no communicator".into(),
        )
    })
}

/// The Cartesian topology of `comm`, or MPI_ERR_TOPOLOGY naming `call`.
pub fn cart_of(rt: &Runtime, call: &str, comm: CommId) -> MpiResult<Cart> {
    match topology(rt, comm)?.as_deref() {
        Some(Topology::Cart(c)) => Ok(c.clone()),
        _ => Err(bad(
            ErrorClass::Topology,
            call,
            "communicator has no Cartesian topology".into(),
        )),
    }
}

/// `MPI_Cart_sub`.
pub fn cart_sub(rt: &Runtime, comm: CommId, remain: &[bool]) -> MpiResult<CommId> {
    let call = "MPI_Cart_sub";
    let cart = cart_of(rt, call, comm)?;
    let (sub, color, key) = cart.sub(rt.comm_rank(comm)? as i32, remain)?;
    let new = rt.comm_split(comm, color, key)?.ok_or_else(|| {
        bad(
            ErrorClass::Intern,
            call,
            "split gave no communicator".into(),
        )
    })?;
    set_topology(rt, new, Topology::Cart(sub))?;
    Ok(new)
}

/// `MPI_Graph_create` (identity placement). None outside the graph.
pub fn graph_create(
    rt: &Runtime,
    comm: CommId,
    index: &[i32],
    edges: &[i32],
    _reorder: bool,
) -> MpiResult<Option<CommId>> {
    let call = "MPI_Graph_create";
    rt.check_comm_id(call, comm)?;
    no_intercomm(rt, call, comm)?;
    let size = rt.comm_size(comm)?;
    let nnodes = index.len();
    if nnodes > size {
        return Err(bad(
            ErrorClass::Arg,
            call,
            format!("{nnodes} nodes exceed the communicator size {size}"),
        ));
    }
    let mut prev = 0;
    for (i, &x) in index.iter().enumerate() {
        if x < prev {
            return Err(bad(
                ErrorClass::Arg,
                call,
                format!("index[{i}] = {x} decreases"),
            ));
        }
        prev = x;
    }
    if prev as usize != edges.len() {
        return Err(bad(
            ErrorClass::Arg,
            call,
            format!("index ends at {prev} but there are {} edges", edges.len()),
        ));
    }
    if let Some(e) = edges.iter().find(|&&e| e < 0 || e as usize >= nnodes) {
        return Err(bad(
            ErrorClass::Rank,
            call,
            format!("edge to {e} outside the {nnodes} nodes"),
        ));
    }
    let rank = rt.comm_rank(comm)?;
    let color = if rank < nnodes { 0 } else { UNDEFINED };
    let new = rt.comm_split(comm, color, rank as i32)?;
    if let Some(c) = new {
        set_topology(
            rt,
            c,
            Topology::Graph {
                index: index.to_vec(),
                edges: edges.to_vec(),
            },
        )?;
    }
    Ok(new)
}

/// `MPI_Dist_graph_create_adjacent` (weights None = `MPI_UNWEIGHTED`).
pub fn dist_graph_create_adjacent(
    rt: &Runtime,
    comm: CommId,
    sources: &[i32],
    sourceweights: Option<&[i32]>,
    destinations: &[i32],
    destweights: Option<&[i32]>,
    _reorder: bool,
) -> MpiResult<CommId> {
    let call = "MPI_Dist_graph_create_adjacent";
    rt.check_comm_id(call, comm)?;
    no_intercomm(rt, call, comm)?;
    let size = rt.comm_size(comm)? as i32;
    if let Some(r) = sources
        .iter()
        .chain(destinations)
        .find(|&&r| r < 0 || r >= size)
    {
        return Err(bad(
            ErrorClass::Rank,
            call,
            format!("neighbour {r} outside the communicator of {size}"),
        ));
    }
    let new = rt.comm_dup(comm)?;
    set_topology(
        rt,
        new,
        Topology::DistGraph {
            sources: sources.to_vec(),
            sourceweights: sourceweights.map(|w| w.to_vec()),
            destinations: destinations.to_vec(),
            destweights: destweights.map(|w| w.to_vec()),
        },
    )?;
    Ok(new)
}

/// `MPI_Dist_graph_create`: this process names edges `sources[i] -> destinations[..]`
/// (`degrees[i]` of them each); every process learns its own in- and out-edges.
pub fn dist_graph_create(
    rt: &Runtime,
    comm: CommId,
    sources: &[i32],
    degrees: &[i32],
    destinations: &[i32],
    weights: Option<&[i32]>,
    _reorder: bool,
) -> MpiResult<CommId> {
    let call = "MPI_Dist_graph_create";
    rt.check_comm_id(call, comm)?;
    no_intercomm(rt, call, comm)?;
    let size = rt.comm_size(comm)?;
    let total: i64 = degrees.iter().map(|&d| d as i64).sum();
    if degrees.len() < sources.len()
        || degrees.iter().any(|&d| d < 0)
        || (destinations.len() as i64) < total
    {
        return Err(bad(
            ErrorClass::Arg,
            call,
            "degrees and destinations do not match".into(),
        ));
    }
    // Records (kind, source, destination, weight) routed to both ends: kind 0 = an
    // out-edge of the receiver, 1 = an in-edge.
    let mut out: Vec<Vec<i32>> = vec![Vec::new(); size];
    let mut k = 0;
    for (i, &s) in sources.iter().enumerate() {
        for _ in 0..degrees[i] {
            let d = destinations[k];
            let w = weights.map_or(1, |w| w[k]);
            k += 1;
            if s < 0 || s as usize >= size || d < 0 || d as usize >= size {
                return Err(bad(
                    ErrorClass::Rank,
                    call,
                    format!("edge {s} -> {d} outside the communicator of {size}"),
                ));
            }
            out[s as usize].extend_from_slice(&[0, s, d, w]);
            out[d as usize].extend_from_slice(&[1, s, d, w]);
        }
    }
    let int = Datatype::builtin(Builtin::Int);
    let scounts: Vec<i64> = out.iter().map(|v| v.len() as i64).collect();
    let mut rcounts = vec![0i64; size];
    // SAFETY: one i64 per rank each way.
    unsafe {
        crate::alltoall(
            rt,
            SendBuf::Ptr(scounts.as_ptr() as *const u8),
            1,
            &Datatype::builtin(Builtin::Int64),
            rcounts.as_mut_ptr() as *mut u8,
            1,
            &Datatype::builtin(Builtin::Int64),
            comm,
        )?
    };
    let flat: Vec<i32> = out.concat();
    let mut sd = vec![0i64; size];
    let mut rd = vec![0i64; size];
    for i in 1..size {
        sd[i] = sd[i - 1] + scounts[i - 1];
        rd[i] = rd[i - 1] + rcounts[i - 1];
    }
    let mut got = vec![0i32; rcounts.iter().sum::<i64>() as usize];
    // SAFETY: buffers sized from the counts.
    unsafe {
        crate::alltoallv(
            rt,
            SendBuf::Ptr(flat.as_ptr() as *const u8),
            &scounts,
            &sd,
            &int,
            got.as_mut_ptr() as *mut u8,
            &rcounts,
            &rd,
            &int,
            comm,
        )?
    };
    let (mut srcs, mut sw, mut dsts, mut dw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rec in got.chunks_exact(4) {
        if rec[0] == 0 {
            dsts.push(rec[2]);
            dw.push(rec[3]);
        } else {
            srcs.push(rec[1]);
            sw.push(rec[3]);
        }
    }
    let weighted = weights.is_some();
    let new = rt.comm_dup(comm)?;
    set_topology(
        rt,
        new,
        Topology::DistGraph {
            sources: srcs,
            sourceweights: weighted.then_some(sw),
            destinations: dsts,
            destweights: weighted.then_some(dw),
        },
    )?;
    Ok(new)
}

/// Neighbour lists of `comm` for a neighbourhood collective named `call`.
fn neighbor_lists(
    rt: &Runtime,
    call: &str,
    comm: CommId,
) -> MpiResult<(Topology, Vec<i32>, Vec<i32>)> {
    let t = topology(rt, comm)?.ok_or_else(|| {
        bad(
            ErrorClass::Topology,
            call,
            "communicator has no topology".into(),
        )
    })?;
    let (i, o) = t.neighbors(rt.comm_rank(comm)? as i32);
    Ok(((*t).clone(), i, o))
}

/// Tags: on a Cartesian grid a message travelling in direction (d, -) carries tag 2d and
/// one travelling (d, +) tag 2d+1, so that when both neighbours of a dimension are the
/// same process the blocks still land in the right slots. Graphs use one tag (order of
/// posting matches the edge order).
fn nb_tags(t: &Topology, k: usize) -> (i32, i32) {
    const BASE: i32 = 11 << 8;
    let (r, s) = nb_sub(t, k);
    (BASE + r, BASE + s)
}

/// (receive, send) tag offsets of neighbour slot k (see [`nb_tags`]); below 64 for up to
/// 32 Cartesian dimensions.
fn nb_sub(t: &Topology, k: usize) -> (i32, i32) {
    match t {
        // Slot k (sources): k even = the -1 neighbour, whose message travelled +.
        Topology::Cart(_) => ((k as i32 ^ 1) & 63, k as i32 & 63),
        _ => (0, 0),
    }
}

/// `MPI_Neighbor_allgather`.
///
/// # Safety
/// `sendcount` elements of `sendtype` readable at `sendbuf`; room for indegree *
/// `recvcount` elements of `recvtype` at `recvbuf`.
pub unsafe fn neighbor_allgather(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_allgather";
    let (_, ins, _) = neighbor_lists(rt, call, comm)?;
    let rc = check_count(call, recvcount)? as i64;
    let counts = vec![rc; ins.len()];
    let displs: Vec<i64> = (0..ins.len() as i64).map(|i| i * rc).collect();
    // SAFETY: forwarded.
    unsafe {
        neighbor_allgatherv(
            rt, sendbuf, sendcount, sendtype, recvbuf, &counts, &displs, recvtype, comm,
        )
    }
}

/// `MPI_Neighbor_allgatherv`.
///
/// # Safety
/// As [`neighbor_allgather`], block i at `recvbuf + displs[i] * extent`.
pub unsafe fn neighbor_allgatherv(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_allgatherv";
    let ctx = Ctx::new(rt, comm, call)?;
    let (t, ins, outs) = neighbor_lists(rt, call, comm)?;
    let sc = check_count(call, sendcount)?;
    check_type(call, sendtype)?;
    check_type(call, recvtype)?;
    let rcs = check_counts(call, "recvcounts", recvcounts, ins.len())?;
    check_displs(call, "displs", displs, ins.len())?;
    let ext = recvtype.extent();
    let mut reqs = Vec::new();
    for (k, &s) in ins.iter().enumerate() {
        if s != PROC_NULL {
            // SAFETY: receive block k is writable until the waitall.
            reqs.push(unsafe {
                ctx.irecv_typed(
                    recvbuf.wrapping_offset(displs[k] as isize * ext),
                    rcs[k],
                    recvtype,
                    s as usize,
                    nb_tags(&t, k).0,
                )?
            });
        }
    }
    for (k, &d) in outs.iter().enumerate() {
        if d != PROC_NULL {
            // SAFETY: the send buffer is readable until the waitall.
            reqs.push(unsafe {
                ctx.isend_typed(sendbuf, sc, sendtype, d as usize, nb_tags(&t, k).1)?
            });
        }
    }
    ctx.waitall(&mut reqs)
}

/// `MPI_Neighbor_alltoall`.
///
/// # Safety
/// Outdegree * `sendcount` elements readable at `sendbuf`; room for indegree *
/// `recvcount` at `recvbuf`.
pub unsafe fn neighbor_alltoall(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_alltoall";
    let (_, ins, outs) = neighbor_lists(rt, call, comm)?;
    let sc = check_count(call, sendcount)? as i64;
    let rc = check_count(call, recvcount)? as i64;
    let se = sendtype.extent() as i64;
    let re = recvtype.extent() as i64;
    let scs = vec![sc; outs.len()];
    let sds: Vec<i64> = (0..outs.len() as i64).map(|i| i * sc * se).collect();
    let rcs = vec![rc; ins.len()];
    let rds: Vec<i64> = (0..ins.len() as i64).map(|i| i * rc * re).collect();
    // SAFETY: forwarded (byte displacements of the same blocks).
    unsafe {
        neighbor_alltoallw(
            rt,
            sendbuf,
            &scs,
            &sds,
            &vec![sendtype.clone(); outs.len()],
            recvbuf,
            &rcs,
            &rds,
            &vec![recvtype.clone(); ins.len()],
            comm,
        )
    }
}

/// `MPI_Neighbor_alltoallv` (displacements in elements).
///
/// # Safety
/// As [`neighbor_alltoall`] with the given blocks.
pub unsafe fn neighbor_alltoallv(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcounts: &[i64],
    sdispls: &[i64],
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    rdispls: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_alltoallv";
    let (_, ins, outs) = neighbor_lists(rt, call, comm)?;
    check_displs(call, "sdispls", sdispls, outs.len())?;
    check_displs(call, "rdispls", rdispls, ins.len())?;
    let se = sendtype.extent() as i64;
    let re = recvtype.extent() as i64;
    let sds: Vec<i64> = sdispls[..outs.len()].iter().map(|d| d * se).collect();
    let rds: Vec<i64> = rdispls[..ins.len()].iter().map(|d| d * re).collect();
    // SAFETY: forwarded.
    unsafe {
        neighbor_alltoallw(
            rt,
            sendbuf,
            sendcounts,
            &sds,
            &vec![sendtype.clone(); outs.len()],
            recvbuf,
            recvcounts,
            &rds,
            &vec![recvtype.clone(); ins.len()],
            comm,
        )
    }
}

/// `MPI_Neighbor_alltoallw` (byte displacements, a type per neighbour).
///
/// # Safety
/// As [`neighbor_alltoall`] with the given blocks.
pub unsafe fn neighbor_alltoallw(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcounts: &[i64],
    sdispls: &[i64],
    sendtypes: &[TypeRef],
    recvbuf: *mut u8,
    recvcounts: &[i64],
    rdispls: &[i64],
    recvtypes: &[TypeRef],
    comm: CommId,
) -> MpiResult<()> {
    let call = "MPI_Neighbor_alltoallw";
    let ctx = Ctx::new(rt, comm, call)?;
    let (t, ins, outs) = neighbor_lists(rt, call, comm)?;
    let scs = check_counts(call, "sendcounts", sendcounts, outs.len())?;
    let rcs = check_counts(call, "recvcounts", recvcounts, ins.len())?;
    check_displs(call, "sdispls", sdispls, outs.len())?;
    check_displs(call, "rdispls", rdispls, ins.len())?;
    if sendtypes.len() < outs.len() || recvtypes.len() < ins.len() {
        return Err(bad(ErrorClass::Arg, call, "too few datatypes".into()));
    }
    let mut reqs = Vec::new();
    for (k, &s) in ins.iter().enumerate() {
        check_type(call, &recvtypes[k])?;
        if s != PROC_NULL {
            // SAFETY: receive block k is writable until the waitall.
            reqs.push(unsafe {
                ctx.irecv_typed(
                    recvbuf.wrapping_offset(rdispls[k] as isize),
                    rcs[k],
                    &recvtypes[k],
                    s as usize,
                    nb_tags(&t, k).0,
                )?
            });
        }
    }
    for (k, &d) in outs.iter().enumerate() {
        check_type(call, &sendtypes[k])?;
        if d != PROC_NULL {
            // SAFETY: send block k is readable until the waitall.
            reqs.push(unsafe {
                ctx.isend_typed(
                    sendbuf.wrapping_offset(sdispls[k] as isize),
                    scs[k],
                    &sendtypes[k],
                    d as usize,
                    nb_tags(&t, k).1,
                )?
            });
        }
    }
    ctx.waitall(&mut reqs)
}

/// `MPI_Ineighbor_allgather`.
///
/// # Safety
/// As [`neighbor_allgather`], buffers reserved until completion.
pub unsafe fn ineighbor_allgather(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let call = "MPI_Ineighbor_allgather";
    let (_, ins, _) = neighbor_lists(rt, call, comm)?;
    let rc = check_count(call, recvcount)? as i64;
    let counts = vec![rc; ins.len()];
    let displs: Vec<i64> = (0..ins.len() as i64).map(|i| i * rc).collect();
    // SAFETY: forwarded.
    unsafe {
        ineighbor_allgatherv(
            rt, sendbuf, sendcount, sendtype, recvbuf, &counts, &displs, recvtype, comm,
        )
    }
}

/// `MPI_Ineighbor_allgatherv`.
///
/// # Safety
/// As [`neighbor_allgatherv`], buffers reserved until completion.
pub unsafe fn ineighbor_allgatherv(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let call = "MPI_Ineighbor_allgatherv";
    let (t, ins, outs) = neighbor_lists(rt, call, comm)?;
    let sc = check_count(call, sendcount)?;
    check_type(call, sendtype)?;
    check_type(call, recvtype)?;
    let rcs = check_counts(call, "recvcounts", recvcounts, ins.len())?;
    check_displs(call, "displs", displs, ins.len())?;
    let ext = recvtype.extent();
    let recvs = ins
        .iter()
        .enumerate()
        .filter(|(_, &s)| s != PROC_NULL)
        .map(|(k, &s)| Xfer {
            ptr: recvbuf.wrapping_offset(displs[k] as isize * ext),
            count: rcs[k],
            dtype: recvtype.clone(),
            peer: s as usize,
            sub: nb_sub(&t, k).0,
        })
        .collect();
    let sends = outs
        .iter()
        .enumerate()
        .filter(|(_, &d)| d != PROC_NULL)
        .map(|(k, &d)| Xfer {
            ptr: sendbuf as *mut u8,
            count: sc,
            dtype: sendtype.clone(),
            peer: d as usize,
            sub: nb_sub(&t, k).1,
        })
        .collect();
    one_round(rt, comm, recvs, sends)
}

/// `MPI_Ineighbor_alltoall`.
///
/// # Safety
/// As [`neighbor_alltoall`], buffers reserved until completion.
pub unsafe fn ineighbor_alltoall(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let call = "MPI_Ineighbor_alltoall";
    let (_, ins, outs) = neighbor_lists(rt, call, comm)?;
    let sc = check_count(call, sendcount)? as i64;
    let rc = check_count(call, recvcount)? as i64;
    let se = sendtype.extent() as i64;
    let re = recvtype.extent() as i64;
    let scs = vec![sc; outs.len()];
    let sds: Vec<i64> = (0..outs.len() as i64).map(|i| i * sc * se).collect();
    let rcs = vec![rc; ins.len()];
    let rds: Vec<i64> = (0..ins.len() as i64).map(|i| i * rc * re).collect();
    // SAFETY: forwarded (byte displacements of the same blocks).
    unsafe {
        ineighbor_alltoallw(
            rt,
            sendbuf,
            &scs,
            &sds,
            &vec![sendtype.clone(); outs.len()],
            recvbuf,
            &rcs,
            &rds,
            &vec![recvtype.clone(); ins.len()],
            comm,
        )
    }
}

/// `MPI_Ineighbor_alltoallv` (displacements in elements).
///
/// # Safety
/// As [`neighbor_alltoallv`], buffers reserved until completion.
pub unsafe fn ineighbor_alltoallv(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcounts: &[i64],
    sdispls: &[i64],
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    recvcounts: &[i64],
    rdispls: &[i64],
    recvtype: &TypeRef,
    comm: CommId,
) -> MpiResult<CollRequest> {
    let call = "MPI_Ineighbor_alltoallv";
    let (_, ins, outs) = neighbor_lists(rt, call, comm)?;
    check_displs(call, "sdispls", sdispls, outs.len())?;
    check_displs(call, "rdispls", rdispls, ins.len())?;
    let se = sendtype.extent() as i64;
    let re = recvtype.extent() as i64;
    let sds: Vec<i64> = sdispls[..outs.len()].iter().map(|d| d * se).collect();
    let rds: Vec<i64> = rdispls[..ins.len()].iter().map(|d| d * re).collect();
    // SAFETY: forwarded.
    unsafe {
        ineighbor_alltoallw(
            rt,
            sendbuf,
            sendcounts,
            &sds,
            &vec![sendtype.clone(); outs.len()],
            recvbuf,
            recvcounts,
            &rds,
            &vec![recvtype.clone(); ins.len()],
            comm,
        )
    }
}

/// `MPI_Ineighbor_alltoallw` (byte displacements).
///
/// # Safety
/// As [`neighbor_alltoallw`], buffers reserved until completion.
pub unsafe fn ineighbor_alltoallw(
    rt: &Runtime,
    sendbuf: *const u8,
    sendcounts: &[i64],
    sdispls: &[i64],
    sendtypes: &[TypeRef],
    recvbuf: *mut u8,
    recvcounts: &[i64],
    rdispls: &[i64],
    recvtypes: &[TypeRef],
    comm: CommId,
) -> MpiResult<CollRequest> {
    let call = "MPI_Ineighbor_alltoallw";
    let (t, ins, outs) = neighbor_lists(rt, call, comm)?;
    let scs = check_counts(call, "sendcounts", sendcounts, outs.len())?;
    let rcs = check_counts(call, "recvcounts", recvcounts, ins.len())?;
    check_displs(call, "sdispls", sdispls, outs.len())?;
    check_displs(call, "rdispls", rdispls, ins.len())?;
    if sendtypes.len() < outs.len() || recvtypes.len() < ins.len() {
        return Err(bad(ErrorClass::Arg, call, "too few datatypes".into()));
    }
    for ty in sendtypes[..outs.len()]
        .iter()
        .chain(&recvtypes[..ins.len()])
    {
        check_type(call, ty)?;
    }
    let recvs = ins
        .iter()
        .enumerate()
        .filter(|(_, &s)| s != PROC_NULL)
        .map(|(k, &s)| Xfer {
            ptr: recvbuf.wrapping_offset(rdispls[k] as isize),
            count: rcs[k],
            dtype: recvtypes[k].clone(),
            peer: s as usize,
            sub: nb_sub(&t, k).0,
        })
        .collect();
    let sends = outs
        .iter()
        .enumerate()
        .filter(|(_, &d)| d != PROC_NULL)
        .map(|(k, &d)| Xfer {
            ptr: sendbuf.wrapping_offset(sdispls[k] as isize) as *mut u8,
            count: scs[k],
            dtype: sendtypes[k].clone(),
            peer: d as usize,
            sub: nb_sub(&t, k).1,
        })
        .collect();
    one_round(rt, comm, recvs, sends)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_create_balances() {
        let mut d = [0, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [4, 3]);
        let mut d = [0, 0, 0];
        dims_create(16, &mut d).unwrap();
        assert_eq!(d, [4, 2, 2]);
        let mut d = [0, 3, 0];
        dims_create(30, &mut d).unwrap();
        assert_eq!(d, [5, 3, 2]);
        let mut d = [0, 0];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7, 1]);
        let mut d = [0, 5];
        assert_eq!(dims_create(12, &mut d).unwrap_err().class, ErrorClass::Dims);
        let mut d = [2, 2];
        assert_eq!(dims_create(5, &mut d).unwrap_err().class, ErrorClass::Dims);
        let mut d = [0; 3];
        dims_create(1, &mut d).unwrap();
        assert_eq!(d, [1, 1, 1]);
    }

    #[test]
    fn cart_coords_rank_shift_sub() {
        let c = Cart::new("t", &[3, 4], &[false, true]).unwrap();
        assert_eq!(c.coords(7).unwrap(), vec![1, 3]);
        assert_eq!(c.rank(&[1, 3]).unwrap(), 7);
        assert_eq!(c.rank(&[1, 4]).unwrap(), 4); // periodic wrap
        assert_eq!(c.rank(&[3, 0]).unwrap_err().class, ErrorClass::Arg);
        for r in 0..12 {
            assert_eq!(c.rank(&c.coords(r).unwrap()).unwrap(), r);
        }
        assert_eq!(c.shift(0, 0, 1), (PROC_NULL, 4));
        assert_eq!(c.shift(8, 0, 1), (4, PROC_NULL));
        assert_eq!(c.shift(4, 1, 1), (7, 5));
        assert_eq!(c.shift(5, 1, -2), (7, 7));
        let (s, color, key) = c.sub(7, &[false, true]).unwrap();
        assert_eq!((s.dims.clone(), color, key), (vec![4], 1, 3));
        let (s, color, key) = c.sub(7, &[true, false]).unwrap();
        assert_eq!((s.dims.clone(), color, key), (vec![3], 3, 1));
        assert_eq!(cart_map(&[2, 2], 5), UNDEFINED);
    }

    #[test]
    fn neighbor_order() {
        let t = Topology::Cart(Cart::new("t", &[2, 3], &[true, false]).unwrap());
        let (i, o) = t.neighbors(0);
        assert_eq!(i, vec![3, 3, PROC_NULL, 1]);
        assert_eq!(i, o);
        let g = Topology::Graph {
            index: vec![2, 3, 4],
            edges: vec![1, 2, 0, 0],
        };
        assert_eq!(g.graph_neighbors(0).unwrap(), vec![1, 2]);
        assert_eq!(g.graph_neighbors(2).unwrap(), vec![0]);
    }
}
