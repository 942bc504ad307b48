//! The hand-written implementation of each MPI function, one small function each, called by
//! the generated entry points with decoded arguments (see `build.rs` for the mapping of C
//! types to parameters: handles arrive as core objects, pointers to scalars as references,
//! `MPI_Status *` as `Option<&mut MPI_Status>`, arrays and buffers as raw pointers).

#![allow(clippy::too_many_arguments)]

mod attr;
mod buffer;
pub(crate) mod coll;
mod coll_init;
mod comm;
mod datarep_c;
mod dtype;
mod dynproc;
mod env;
mod errclass;
mod file;
mod grequest;
mod info;
mod large;
mod misc;
mod mpi41;
mod mpi4_more;
mod p2p;
mod request;
mod rma;
mod session;
mod tattr;
mod tools;
mod topo;

pub(crate) use attr::*;
pub(crate) use buffer::*;
pub(crate) use coll::*;
pub(crate) use coll_init::*;
pub(crate) use comm::*;
pub(crate) use datarep_c::*;
pub(crate) use dtype::*;
pub(crate) use dynproc::*;
pub(crate) use env::*;
pub(crate) use errclass::*;
pub(crate) use file::*;
pub(crate) use grequest::*;
pub(crate) use info::*;
pub(crate) use large::*;
pub(crate) use misc::*;
pub(crate) use mpi41::*;
pub(crate) use mpi4_more::*;
pub(crate) use p2p::*;
pub(crate) use request::*;
pub(crate) use rma::*;
pub(crate) use session::*;
pub(crate) use tattr::*;
pub(crate) use tools::*;
pub(crate) use topo::*;

use std::ffi::c_int;

/// C's boolean.
pub(crate) fn flag(b: bool) -> c_int {
    c_int::from(b)
}
