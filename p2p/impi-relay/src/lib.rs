//! `tsunagi-impi-relay`: an IMPI relay for private networks (after GridMPI's IMPI relay).
//!
//! **Job.** Sites whose hosts have private addresses cannot reach each other's IMPI hosts.
//! The relay runs on a host every site can reach (a gateway with an interface on each
//! private network, or a public address they all route to). Sites use it as their IMPI
//! server (`--server RELAY:PORT`); it passes their start-up to the real server, rewriting
//! only the two host labels so that each relayed host appears at the relay's public address
//! on a port of its own ([`rewrite`]), and forwards every connection to such a port to the
//! host's private endpoint, one byte stream per host pair ([`driver`]). The IMPI protocol is
//! the same for the endpoints and the server: they see ordinary hosts.
//!
//! **Boundary.** Start-up rewriting and byte forwarding, sans-IO ([`rewrite`], [`pump`]),
//! with a thin mio driver. Routes and namespaces are the deployment's; IMPI itself is
//! `tsunagi-impi`'s. A relayed host's peers see connections coming from the relay, so a
//! client that identifies hosts by their source address (LAM/MPI) cannot be relayed;
//! Tsunagi's hosts introduce themselves by index.

pub mod driver;
pub mod pump;
pub mod rewrite;

pub use driver::{Config, Relay};
pub use rewrite::{Expose, RelayError, StartupSession};
