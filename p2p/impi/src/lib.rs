//! IMPI, the Interoperable MPI protocol (NIST, 2000), for Tsunagi: the wire formats and
//! the protocols as state machines without I/O, plus the IMPI server.
//!
//! IMPI lets several MPI implementations ("clients", one per site) form one
//! MPI_COMM_WORLD: each client registers with an IMPI server, which collects and hands
//! back everyone's start-up data; then every pair of IMPI hosts talks over one TCP
//! connection with 128-byte packets.
//!
//! * [`packet`]: the packet header codec and a stream splitter ([`packet::PacketDecoder`]).
//! * [`startup`]: the client ↔ server commands (AUTH, IMPI, COLL, DONE, FINI) and labels.
//! * [`link`]: one host-to-host connection's protocol ([`link::Link`]): short and long
//!   messages, synchronous sends, PROTOACK flow control, cancel, FINI; events for a device.
//! * [`client`]: a client's side of start-up ([`client::ClientStartup`]).
//! * [`params`]: the job's parameters from the server's COLL answers (minimum DATALEN, tag
//!   bound, ackmark/hiwater; agreed collective thresholds; hosts and procs in global order).
//! * [`server`]: the IMPI server's state machine; `tsunagi-impi-server` drives it over TCP.
//! * [`device`]: the IMPI device, Tsunagi's native-tier device for the other sites' ranks
//!   (links over non-blocking sockets).
//! * [`join`]: joining sites at start-up ([`join::GRID`], a `GridJoin` in the registry).
//!
//! Boundary: the protocol modules (packet, startup, link, client, params, server) do no
//! I/O; sockets live in the server binary, [`device`] and [`join`]. No MPI semantics
//! (matching, datatypes, external32 conversion, collectives): the MPI core matches device
//! arrivals in its own queues and converts data. Facts come from
//! the IMPI report and LAM/MPI 7.1.4's implementation; where they differ, the module docs
//! say which is followed.

pub mod client;
pub mod device;
mod fasthash;
pub mod join;
pub mod link;
pub mod packet;
pub mod params;
pub mod server;
pub mod startup;

#[doc(hidden)]
pub mod fuzzing;

pub use link::{
    Arrival, ArrivalId, CancelStatus, Event, Link, LinkConfig, LinkError, ProcTable, SendId,
    SendRequest,
};
pub use packet::{Header, PacketDecoder, PacketError, PacketType, ProcId, HEADER_LEN};
