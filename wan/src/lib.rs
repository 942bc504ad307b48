//! `tsunagi-wan`: a wide-area link emulator in user space, for trying MPI jobs across sites
//! against a WAN before running them on one (this kernel, like many containers, has no
//! `netem` qdisc).
//!
//! **Job.** Add a one-way delay, jitter and a bandwidth limit to each direction of a link,
//! never reordering the bytes of a connection. The link model is a sans-IO state machine
//! ([`shaper::Pipe`]: bytes and time in, each chunk's due time out) with two thin drivers:
//! a TCP relay ([`relay`]: listen on an address, forward to a target; per connection
//! direction) and a TUN router ([`router`]: network namespaces route their wide-area traffic
//! through a TUN device; per site-pair direction, shared by every connection, which is how
//! IMPI sites are put behind it — see `docs/wan.md` and `scripts/wan-netns`). [`probe`]
//! measures what a path costs (TCP echo and ping).
//!
//! **Boundary.** No MPI here: the tool knows bytes, packets and addresses. The setup of
//! namespaces and routes is `scripts/wan-netns`' (iproute2); the MPI side only learns which
//! address to use (`TSUNAGI_IMPI_ADDR`).

pub mod probe;
pub mod relay;
pub mod router;
pub mod shaper;

pub use shaper::{LinkParams, Pipe};
