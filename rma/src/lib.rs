//! Tsunagi's one-sided communication: MPI windows (`MPI_Win_create`, `_allocate`,
//! `_allocate_shared`, `_create_dynamic`), every synchronisation mode (fence,
//! post/start/complete/wait/test, lock/unlock, lock_all, flush, sync) and every operation
//! (put, get, accumulate, get_accumulate, fetch_and_op, compare_and_swap and the
//! request-based forms), with derived datatypes on both sides.
//!
//! **How.** Operations are active messages on the core's point-to-point, on a private
//! duplicate of the window's communicator: the origin describes the target memory as byte
//! runs (the flattened target datatype, so the target needs no copy of the origin's
//! types) and sends it with the data ([`wire`]); the target's handler, a core
//! [`tsunagi_core::runtime::Service`] that runs on every progress step of that process,
//! applies requests in arrival order (one at a time, so accumulates are atomic per element
//! and ordered per origin), answers gets and grants locks. Passive-target operations
//! therefore progress whenever the target process is inside any MPI call. Large
//! contiguous data is sent and received in place (the core's rendezvous, single copy
//! through CMA on one node). Shared windows put every rank's memory in one memfd segment
//! of the node (`MPI_Win_shared_query` gives direct load/store); RMA calls on them take
//! the same message path, so accumulate atomicity holds between all of them.
//!
//! **Boundary.** Below: `tsunagi-core` (point-to-point, the request table, services,
//! `wait_until`), and the collectives' op kernels ([`tsunagi_collectives::op::Op`]).
//! Above: the C ABI (handle tables, error handlers, attributes and info of windows) and
//! the Rust API.

mod origin;
mod shm;
mod target;
mod window;
pub mod wire;

pub use origin::Access;
pub use window::{
    Flavor, Window, LOCK_EXCLUSIVE, LOCK_SHARED, MODEL_UNIFIED, MODE_NOCHECK, MODE_NOPRECEDE,
    MODE_NOPUT, MODE_NOSTORE, MODE_NOSUCCEED,
};
pub use wire::Kind;
