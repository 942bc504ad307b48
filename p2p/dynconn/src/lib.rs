//! The connection device: what joins two MPI worlds that were started independently.
//!
//! Two jobs (two `mpirun`s, a parent and the children it spawned, two processes that share
//! a socket for `MPI_Comm_join`) have no transport between them: their world ranks, job
//! keys and start-up exchanges are their own. `MPI_Comm_connect`/`accept` make an
//! intercommunicator whose remote group sits behind this crate's [`ConnDevice`], a native
//! device (`tsunagi_p2p::device`) that carries MPI's envelope over one TCP stream per pair
//! of processes, plugged into the router beside the job's own transports as the IMPI
//! device is. The remote processes get *virtual* world ranks on this side (above the
//! job's own), handed out by the core.
//!
//! Boundary: this crate moves bytes and sets up connections; it knows nothing of
//! communicators. The orchestration (which process connects where, the context-id
//! agreement over the roots' connection, spawning) is the C library's
//! (`c-abi/src/imp/dynproc.rs`) on top of the core's run-time device hook.
//!
//! * [`wire`]: the frame format, sans-IO (encode, and a decoder fed bytes).
//! * [`device`]: the device over non-blocking streams.
//! * [`setup`]: blocking set-up: port names, the roots' handshake, the all-pairs mesh,
//!   the name service (files in a directory, so separately started jobs share it).

pub mod device;
pub mod setup;
pub mod wire;

pub use device::{ConnDevice, PeerInbox};
