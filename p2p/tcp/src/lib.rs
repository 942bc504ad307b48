//! Tsunagi's TCP transport: messages between ranks on different hosts over TCP sockets
//! (the socket P2P of GridMPI).
//!
//! The job of this crate is one [`tsunagi_p2p::Transport`], [`TcpTransport`]: reliable,
//! in-order message delivery per peer over one TCP connection per pair of ranks, made
//! lazily on the first send, authenticated by a per-job key, with bounded queues.
//!
//! Boundary: it moves a 32-byte header plus payload and knows nothing of MPI. Rendezvous
//! for large messages is the request layer's (`tsunagi-core` sends RTS, waits for CTS and
//! streams DATA chunks of at most [`tsunagi_p2p::Transport::max_payload`] bytes); this transport makes the
//! chunks flow through bounded per-peer queues so a slow peer costs bounded memory. Finding
//! the peers (their "host:port" cards through the bootstrap) is [`FACTORY`]'s, this
//! transport's [`tsunagi_p2p::boot::TransportFactory`], through [`TcpTransport::card`] and
//! [`TcpTransport::set_peers`].
//!
//! Dependencies: **mio** gives non-blocking TCP sockets and one readiness registry (epoll on
//! Linux) for the listener, every connection and a waker, which is what the progress
//! engines sleep on; **socket2** sets what std and mio cannot before a socket connects or
//! listens (buffer sizes, which must be set before the handshake to affect window scaling;
//! `SO_REUSEADDR`; binding a port out of a range); **hmac** and **sha2** (RustCrypto) give
//! the HMAC-SHA256 of [`auth`].
//!
//! * [`auth`]: HMAC-SHA256 challenge-response proofs (mpirun and its agents).
//! * [`config`]: job key (also read from an inherited descriptor, `TSUNAGI_JOB_KEY_FD`), interface and port selection (`TSUNAGI_TCP_IF`,
//!   `TSUNAGI_TCP_PORTS`), buffer sizes; pure, unit-tested.
//! * [`handshake`]: the hello, the verdict and the simultaneous-connect rule; pure,
//!   unit-tested.
//! * the wire framing after the handshake is the shared one
//!   ([`tsunagi_p2p::framing::FrameDecoder`], [`tsunagi_p2p::framing::OutQueue`]): a length
//!   prefix, the header, the payload; `GOODBYE` on a graceful close.
//! * [`transport`]: the sockets.

pub mod auth;
pub mod config;
mod factory;
pub mod handshake;
pub mod transport;

pub use config::{JobKey, TcpConfig};
pub use factory::{TcpFactory, FACTORY};
pub use transport::TcpTransport;

/// The prefix of a TCP business card published through PMI: `tcp:<ip>:<port>`.
pub const CARD_PREFIX: &str = "tcp:";

/// Parse a card made by [`TcpTransport::card`].
pub fn parse_card(card: &str) -> Result<std::net::SocketAddr, String> {
    card.strip_prefix(CARD_PREFIX)
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("malformed TCP card {card:?} (expected tcp:<ip>:<port>)"))
}
