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
//! * [`transport`]: the driver: UDP sockets, a [`tsunagi_p2p::Transport`], fault
//!   injection for tests; [`FACTORY`] plugs it into the registry;
//! * [`lids`]: several ports per endpoint standing for InfiniBand LIDs and the fat-tree
//!   planner's choice among them per connection;
//! * [`checkpoint`]: checkpoints of a running job (SIGUSR2 or a period), coordinated by
//!   markers on PM's links: quiesce, stable, save, restore, resume;
//! * [`restart`]: one rank's image taken for, and restored in, a **new process** (new
//!   socket, new epoch), which announces its address to the peers with a MOVE
//!   authenticated by the job key;
//! * [`lossy`]: the simulated lossy network the tests drive the state machines through.
//!
//! Boundary: this crate moves messages (the request layer's 32-byte header plus payload)
//! between world ranks; MPI matching, rendezvous and collectives are the request layer's
//! (`tsunagi-core`). Large messages go by the request layer's single-copy rendezvous, which
//! PM carries out as RDMA reads (PULL) of the sender's registered buffer into the
//! receiver's ([`transport`]); with `TSUNAGI_PM_RDMA=0` the request layer streams them in
//! chunks of [`tsunagi_p2p::Transport::max_payload`] through the rings.
//!
//! **Several LIDs per host** (issue 19 item 5): with `TSUNAGI_PM_LIDS=K` an endpoint binds K
//! UDP ports, receives on all of them and publishes all K in its card
//! (`pm:<ip>:<port0>,...,<portK-1>:<epoch>`; K = 1 is the single-port card). With
//! `TSUNAGI_FATTREE=k=<roots>[,leaves=<n>]` and `TSUNAGI_FATTREE_NODES=<g0>,<g1>,...` (the
//! fabric node of each of the job's hosts, by Tsunagi node id, the same list for every
//! rank) K defaults to the root count, and each rank sends to a peer at the port the
//! planner `tsunagi_fattree::connection_lid_indices` chose for the pair of hosts; without
//! them every peer is addressed at its first port, as before. Sending is always from the
//! first port: routing on a fat tree follows the destination LID only.
//!
//! Dependencies: **socket2** to size the UDP socket's buffers before use; the interface
//! choice is the TCP transport's (`tsunagi_tcp::config`), so `TSUNAGI_TCP_IF` applies too; **tsunagi-fattree** for the
//! LID planner.

pub mod checkpoint;
mod factory;
pub mod fuzzing;
pub mod lids;
pub mod lossy;
pub mod nic;
pub mod pm;
pub mod reliable;
pub mod restart;
pub mod transport;
pub mod wire;

pub use factory::{PmFactory, FACTORY};
pub use transport::PmTransport;

/// The prefix of a PM card: `pm:<ip>:<port>[,<port>...]:<epoch, 8 hex digits>[/<ack port>]`.
pub const CARD_PREFIX: &str = "pm:";

/// A PM endpoint's card: its address, its ports (one per LID, `TSUNAGI_PM_LIDS`; port 0
/// of the list is the one it sends from) and its epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    pub ip: std::net::IpAddr,
    pub ports: Vec<u16>,
    pub epoch: u32,
    /// The port of the endpoint's acknowledgement socket (see [`transport`]); `None` in
    /// a card without one: its ACKs then travel with its data.
    pub ack_port: Option<u16>,
}

impl Card {
    /// The address of LID `index`.
    pub fn addr(&self, index: usize) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.ip, self.ports[index])
    }
}

impl std::fmt::Display for Card {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            std::net::IpAddr::V4(ip) => write!(f, "{CARD_PREFIX}{ip}:")?,
            std::net::IpAddr::V6(ip) => write!(f, "{CARD_PREFIX}[{ip}]:")?,
        }
        for (i, p) in self.ports.iter().enumerate() {
            write!(f, "{}{p}", if i == 0 { "" } else { "," })?;
        }
        write!(f, ":{:08x}", self.epoch)?;
        match self.ack_port {
            Some(p) => write!(f, "/{p}"),
            None => Ok(()),
        }
    }
}

/// Parse a card made by [`PmTransport::card`]. With one port it is the single-LID card
/// `pm:<ip>:<port>:<epoch>`.
pub fn parse_card(card: &str) -> Result<Card, String> {
    let bad =
        || format!("malformed PM card {card:?} (expected pm:<ip>:<port>[,<port>...]:<epoch>)");
    let rest = card.strip_prefix(CARD_PREFIX).ok_or_else(bad)?;
    let (rest, ack_port) = match rest.rsplit_once('/') {
        Some((r, p)) => (
            r,
            Some(p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad)?),
        ),
        None => (rest, None),
    };
    let (addr, epoch) = rest.rsplit_once(':').ok_or_else(bad)?;
    let (ip, ports) = addr.rsplit_once(':').ok_or_else(bad)?;
    let ip = ip
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(ip);
    let ip = ip.parse().map_err(|_| bad())?;
    let ports = ports
        .split(',')
        .map(|p| p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad))
        .collect::<Result<Vec<_>, _>>()?;
    if ports.len() > lids::MAX_LIDS || epoch.len() != 8 {
        return Err(bad());
    }
    let epoch = u32::from_str_radix(epoch, 16).map_err(|_| bad())?;
    Ok(Card {
        ip,
        ports,
        epoch,
        ack_port,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn cards() {
        let c = super::parse_card("pm:10.0.0.1:5000:0000beef").unwrap();
        assert_eq!(c.addr(0).to_string(), "10.0.0.1:5000");
        assert_eq!((c.ports.len(), c.epoch), (1, 0xbeef));
        assert_eq!(c.to_string(), "pm:10.0.0.1:5000:0000beef");
        let c = super::parse_card("pm:[::1]:5000,5002,7:0000beef").unwrap();
        assert_eq!(c.ports, [5000, 5002, 7]);
        assert_eq!(c.addr(1).to_string(), "[::1]:5002");
        assert_eq!(c.to_string(), "pm:[::1]:5000,5002,7:0000beef");
        let c = super::parse_card("pm:10.0.0.1:5000:0000beef/5001").unwrap();
        assert_eq!((c.ports.as_slice(), c.ack_port), (&[5000][..], Some(5001)));
        assert_eq!(c.to_string(), "pm:10.0.0.1:5000:0000beef/5001");
        assert_eq!(
            super::parse_card("pm:10.0.0.1:5000:0000beef")
                .unwrap()
                .ack_port,
            None
        );
        for bad in [
            "pm:1.2.3.4:5,:00000001",
            "pm:1.2.3.4:0:00000001",
            "pm:1.2.3.4:70000:00000001",
            "pm:1.2.3.4::00000001",
            "pm:::00000001",
            "tcp:1.2.3.4:5",
            "pm:1.2.3.4:5",
            "pm:1.2.3.4:5:xyzxyzxy",
            "pm:nope:1:00000000",
            "pm:1.2.3.4:5:00000001/",
            "pm:1.2.3.4:5:00000001/0",
            "pm:1.2.3.4:5:00000001/x",
        ] {
            assert!(super::parse_card(bad).is_err(), "{bad}");
        }
    }
}
