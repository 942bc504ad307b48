//! Tsunagi's MPI core: communicators, groups, datatypes, the request layer (matching,
//! eager and rendezvous protocols), errors, attributes and start-up (a bootstrap — PMI or a
//! singleton — and the transports of a registry, none of which the core names).
//!
//! Boundary: below it is the P2P layer (`tsunagi-p2p`, which moves header+payload messages
//! between world ranks over shared memory, sockets and other transports); above it are the
//! collectives, the C ABI and the safe Rust API, which call [`runtime::Runtime`]'s methods.
//! The core works on raw buffer addresses and typed handles ([`CommId`], [`ReqId`],
//! [`datatype::TypeRef`]); handle tables with MPICH's integer values belong to the C ABI.

pub mod boot;
pub mod comm;
mod comm_table;
pub mod datatype;
mod engine;
pub mod error;
pub mod group;
pub mod pmi;
pub mod protocol;
pub mod runtime;
#[cfg(test)]
mod sim_tests;
pub mod slab;
pub mod tools;

/// The matching queues of the request layer, public only so that `benches/matching.rs`
/// times the engine's own search; not part of the API.
#[doc(hidden)]
pub mod matching {
    pub use crate::engine::{Arrived, Posted, Queues, ANY_WORLD};
}

pub use comm::{CommId, ErrHandler, Keyval};
pub use engine::{
    Buf, BufferScope, MsgId, ReqId, SendMode, Status, ANY_SOURCE, ANY_TAG, BSEND_OVERHEAD,
    PROC_NULL,
};
pub use error::{ErrorClass, MpiError, MpiResult};
pub use runtime::{finalize, finalized, init, initialized, rt, Runtime, ThreadLevel};
