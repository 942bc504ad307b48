//! Tsunagi's PM transport: SCore's PM (seeds 000 and 001) between hosts over UDP.
//!
//! Layers, bottom up; all but the driver are state machines without I/O:
//!
//! * [`wire`]: the packet codec (36-byte header, optional CRC-32), rejecting malformed
//!   datagrams;
//! * [`reliable`]: one [`reliable::Link`] per peer: sequence numbers, a send window,
//!   batched cumulative + selective ACKs, NACKs, retransmission with back-off, duplicate
//!   suppression, in-order delivery; quiesce and context save/restore;
//! * [`lossy`]: the simulated lossy network the tests drive the links through.
//!
//! Boundary: this crate moves frames and PM messages between world ranks; MPI matching,
//! rendezvous and collectives are the request layer's (`tsunagi-core`).

pub mod lossy;
pub mod nic;
pub mod pm;
pub mod reliable;
pub mod wire;
