//! Tsunagi's collective operations.
//!
//! **Job.** Every blocking MPI collective on intracommunicators and intercommunicators
//! ([`inter`]: MPI's rooted and all-to-all intercommunicator meaning) (barrier, bcast,
//! gather(v), scatter(v), allgather(v), alltoall(v,w), reduce, allreduce,
//! reduce_scatter(_block), scan, exscan), their non-blocking forms as schedules
//! ([`nbc`], [`CollRequest`]), the reduction ops ([`Op`]: every predefined op on every
//! type MPI allows, user ops, `MPI_Reduce_local`), several algorithms per collective
//! chosen from message size, communicator size and rank placement ([`select`]; each
//! forceable with `TSUNAGI_COLL_<NAME>=<algorithm>` or [`with_algorithm`]), the 2-level
//! ring all-to-all of seed 003 and its per-phase node schedule
//! ([`two_level_ring_schedule`]; [`last_alltoall_algorithm`] says which all-to-all ran), the hierarchical barrier of seed 004, and process
//! topologies with the neighbourhood collectives ([`topo`]). Communicators whose ranks
//! are on several sites (IMPI clients) use the IMPI algorithms of [`impi`] instead, or the
//! latency-aware ones of [`wan`] when every site is Tsunagi.
//!
//! **Boundary.** Below is `tsunagi-core`: collectives move bytes with
//! [`tsunagi_core::Runtime::coll_isend`] / `coll_irecv` on a communicator's collective
//! context (invisible to point-to-point traffic) and complete them with `waitall` /
//! `testall`; placement comes from `Runtime::comm_nodes` (`TSUNAGI_NODE_MAP` makes pretend
//! nodes); new communicators come from `comm_split` / `comm_dup`; per-communicator state
//! (the non-blocking sequence number, the topology) is cached as attributes. Above are
//! the C ABI and the safe Rust API: they map `MPI_IN_PLACE` (`(void *)-1`) to
//! [`SendBuf::InPlace`] / [`RecvBuf::InPlace`] (see `from_c`), MPICH op handles to
//! [`Op::from_mpich`], `int` counts and displacements to `i64`, and keep
//! [`CollRequest`]s in their request table (completing them with `test` / `wait`).
//! Functions take raw buffer addresses, counts, [`tsunagi_core::datatype::TypeRef`]s and
//! a [`tsunagi_core::CommId`], check their arguments (error messages name the MPI call),
//! and return `MpiResult`; error handlers are the caller's business.
//!
//! **Data path.** Contiguous datatypes are used in place; non-contiguous ones are packed
//! into scratch buffers or sent typed (the core packs). Reductions run on the packed
//! stream with the kernels of [`op`]; non-commutative ops always combine in rank order.
//! Blocking collectives use fixed tags per collective (MPI orders collective calls the
//! same everywhere and the core does not overtake); non-blocking ones use tags derived
//! from a per-communicator sequence number, in a separate range.

#![allow(clippy::too_many_arguments)]

pub mod allgather;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod impi;
mod impi_v;
pub mod inter;
pub mod nbc;
mod node_area;
mod nodesplit;
pub mod op;
pub mod reduce;
pub mod select;
mod shmcoll;
pub mod topo;
mod util;
pub mod wan;
mod wan_nbc;

pub use allgather::{allgather, allgatherv};
pub use alltoall::{
    alltoall, alltoallv, alltoallw, last_alltoall_algorithm, plain_ring_schedule,
    two_level_ring_schedule,
};
pub use barrier::barrier;
pub use bcast::bcast;
pub use gather::{gather, gatherv, scatter, scatterv};
pub use nbc::{
    iallgather, iallgatherv, iallreduce, ialltoall, ialltoallv, ialltoallw, ibarrier, ibcast,
    iexscan, igather, igatherv, ireduce, ireduce_scatter, ireduce_scatter_block, iscan, iscatter,
    iscatterv, CollRequest,
};
pub use op::{reduce_local, Op, UserFn, UserOp};
pub use reduce::{allreduce, exscan, reduce, reduce_scatter, reduce_scatter_block, scan};
pub use select::{set_algorithm, with_algorithm, Coll};
pub use shmcoll::{lean_rank_size, shared_memory_calls};
pub use util::{RecvBuf, SendBuf};
