//! Tsunagi over the site's own MPI (GridMPI's vendor-MPI P2P layer, seed 002): the vendor
//! MPI (Debian's MPICH 4, Open MPI 4, or a library given by path) moves Tsunagi's messages
//! inside a site, and its launcher starts the job.
//!
//! Boundary: this crate loads the vendor library beside Tsunagi's own MPI
//! (`dlopen(RTLD_NOW|RTLD_LOCAL|RTLD_DEEPBIND)`, so neither binds the other's `MPI_*`),
//! reaches it only through a small C shim compiled against the vendor's own `mpi.h`
//! (`src/shim.c`, `build.rs`), and offers two components to the MPI core: a
//! [`boot::VendorBootstrap`] (ranks, placement and cards from the vendor's world) and the
//! [`transport::VendorTransport`] (messages as vendor messages, see [`frame`]). It knows
//! nothing of communicators or matching.

mod ffi;

pub mod boot;
pub mod frame;
pub mod link;
pub mod transport;
pub mod vendor;

pub use boot::BOOTSTRAP;
pub use transport::{NODE_FACTORY, REMOTE_FACTORY};
