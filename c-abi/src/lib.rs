//! Tsunagi's C ABI: the shared library `libmpi.so.12` (also installed as `libmpich.so.12`)
//! that C and C++ programs link through `mpicc`, with MPICH's binary interface so that
//! programs built against MPICH run on Tsunagi by swapping the library.
//!
//! Job: turn C calls with MPICH-valued integer handles into calls of the core
//! (`tsunagi_core::Runtime`), and back. Boundary: no MPI semantics live here beyond
//! handle tables, argument decoding and the C-visible conventions (MPI_Status layout,
//! MPI_STATUS_IGNORE, MPI_REQUEST_NULL after completion, info objects, C callbacks);
//! matching, protocols, datatypes and communicator creation are the core's; collective
//! algorithms, reduction ops and process topologies are the `tsunagi-collectives`
//! crate's (non-blocking collectives live in a request table of their own here, see
//! `handles::COLLS`, and every wait/test call advances all of them).
//!
//! Layout:
//! - `api.in`: the declarative table of the C API. `build.rs` generates from it the
//!   `extern "C" fn PMPI_*` entry points (argument decoding and checks, then a call of the
//!   hand-written `imp::*` function), the weak `MPI_*` aliases, the prototype section of
//!   `include/mpi.h` and `docs/coverage.md`.
//! - [`fortran`]: the Fortran binding's run-time conventions (sentinels in MPICH's
//!   common blocks, strings, indices); its `mpi_x_` entry points are generated from the
//!   same table by `build/fortran.rs`, which also writes `include/mpif.h` and the module
//!   sources in `fortran/`.
//! - [`ffi`]: C types and predefined handle values; `handles`: the handle tables and
//!   decoders; `entry`: panic catching and error routing; `imp`: one small function per
//!   MPI function.

pub mod ffi;

mod data;
mod entry;
pub mod fortran;
mod handles;
mod imp;

pub use handles::{op, OpDef};

/// The generated entry points (see `build.rs`).
#[allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
mod generated {
    use crate::entry::{entry, entry_file, entry_session, entry_tools, entry_value, entry_win};
    use crate::ffi::*;
    use crate::handles as h;
    use crate::imp;
    #[allow(unused_imports)]
    use std::ffi::{c_char, c_int, c_void};

    include!(concat!(env!("OUT_DIR"), "/entry_points.rs"));
}

pub use fortran::FORTRAN_NAMES;
pub use generated::{C_ONLY, IMPLEMENTED};
