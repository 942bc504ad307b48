//! Tsunagi's PM transport: SCore's PM (seeds 000 and 001) between hosts over UDP, selected
//! with `TSUNAGI_INTERNODE=pm` (or `mpirun --internode pm`).
//!
//! Layers, bottom up; all but the driver are state machines without I/O:
//!
//! * [`wire`]: the packet codec (36-byte header, optional CRC-32), rejecting malformed
//!   datagrams;
//! * [`reliable`]: one [`reliable::Link`] per peer: sequence numbers, a send window,
//!   batched cumulative + selective ACKs, NACKs, retransmission with back-off, duplicate
//!   suppression, in-order delivery; quiesce and context save/restore;
//! * [`nic`]: the software RDMA NIC: PUSH, PULL and SEND work requests on registered
//!   regions;
//! * [`pm`]: PM's API on the NIC — get a send buffer, send, receive, release; rings
//!   written by PUSH with lazily pulled tails, or a shared receive queue; remote
//!   write/read with a pin-down cache; checkpoint quiesce/save/restore/resume;
//! * [`transport`]: the driver: one UDP socket, a [`tsunagi_p2p::Transport`], fault
//!   injection for tests; [`FACTORY`] plugs it into the registry;
//! * [`lossy`]: the simulated lossy network the tests drive the state machines through.
//!
//! Boundary: this crate moves messages (the request layer's 32-byte header plus payload)
//! between world ranks; MPI matching, rendezvous and collectives are the request layer's
//! (`tsunagi-core`). Large messages are streamed by the request layer in chunks of
//! [`tsunagi_p2p::Transport::max_payload`]; the transport does not offer its PUSH/PULL to
//! the core (the core's single-copy read takes raw addresses, not registered regions).
//!
//! Dependencies: **socket2** to size the UDP socket's buffers before use; the interface
//! choice is the TCP transport's (`tsunagi_tcp::config`), so `TSUNAGI_TCP_IF` applies too.

mod factory;
pub mod fuzzing;
pub mod lossy;
pub mod nic;
pub mod pm;
pub mod reliable;
pub mod transport;
pub mod wire;

pub use factory::{PmFactory, FACTORY};
pub use transport::PmTransport;

/// The prefix of a PM card: `pm:<ip>:<port>:<epoch, 8 hex digits>`.
pub const CARD_PREFIX: &str = "pm:";

/// Parse a card made by [`PmTransport::card`] into the address and the epoch.
pub fn parse_card(card: &str) -> Result<(std::net::SocketAddr, u32), String> {
    let bad = || format!("malformed PM card {card:?} (expected pm:<ip>:<port>:<epoch>)");
    let rest = card.strip_prefix(CARD_PREFIX).ok_or_else(bad)?;
    let (addr, epoch) = rest.rsplit_once(':').ok_or_else(bad)?;
    let addr = addr.parse().map_err(|_| bad())?;
    if epoch.len() != 8 {
        return Err(bad());
    }
    let epoch = u32::from_str_radix(epoch, 16).map_err(|_| bad())?;
    Ok((addr, epoch))
}

#[cfg(test)]
mod tests {
    #[test]
    fn cards() {
        let (a, e) = super::parse_card("pm:10.0.0.1:5000:0000beef").unwrap();
        assert_eq!(a.to_string(), "10.0.0.1:5000");
        assert_eq!(e, 0xbeef);
        for bad in [
            "tcp:1.2.3.4:5",
            "pm:1.2.3.4:5",
            "pm:1.2.3.4:5:xyzxyzxy",
            "pm:nope:1:00000000",
        ] {
            assert!(super::parse_card(bad).is_err(), "{bad}");
        }
    }
}
