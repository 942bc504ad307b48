//! The transport to ranks on other nodes, chosen by `TSUNAGI_INTERNODE`:
//!
//! * `tcp` (default): [`TcpTransport`]. Each rank listens (interface and ports from
//!   `TSUNAGI_TCP_IF` / `TSUNAGI_TCP_PORTS`) and publishes its card `tcp:<ip>:<port>` under
//!   the PMI key `tsunagi-tcp-<rank>` before start-up's first PMI barrier; after it, the cards
//!   of the remote ranks are read. The job key is `TSUNAGI_JOB_KEY` (set by our mpirun),
//!   else derived from the kvsname (foreign launchers).
//! * `stream`: Unix-domain sockets, which only reach ranks on this host: for "pretend node"
//!   runs (`TSUNAGI_NODE_MAP`) that want the old second transport.
//!
//! Kept apart from `runtime.rs` so that start-up only calls [`listen`] before the barrier
//! and [`Internode::connect`] after it.

use tsunagi_p2p::stream::StreamTransport;
use tsunagi_p2p::{Rank, Transport};
use tsunagi_tcp::{parse_card, TcpConfig, TcpTransport};

use crate::error::{ErrorClass, MpiError, MpiResult};
use crate::pmi::PmiClient;

fn err(e: impl std::fmt::Display) -> MpiError {
    MpiError::new(ErrorClass::Other, format!("MPI_Init: {e}"))
}

/// A listening inter-node transport whose peers are not known yet.
pub(crate) enum Internode {
    Stream(StreamTransport),
    // Boxed: a transport is large, and this enum only lives through start-up.
    Tcp(Box<TcpTransport>),
}

/// Listen for `remote` ranks and publish what they need (before the PMI barrier).
/// `kvs` is the job's (sanitized) kvsname.
pub(crate) fn listen(
    pmi: Option<&mut PmiClient>,
    rank: Rank,
    kvs: &str,
    remote: &[Rank],
) -> MpiResult<Option<Internode>> {
    if remote.is_empty() {
        return Ok(None);
    }
    let kind = std::env::var("TSUNAGI_INTERNODE").unwrap_or_default();
    match kind.trim() {
        "stream" => {
            let s = StreamTransport::listen(&format!("tsunagi-{kvs}"), rank).map_err(err)?;
            Ok(Some(Internode::Stream(s)))
        }
        "" | "tcp" => {
            let cfg = TcpConfig::from_env(|k| std::env::var(k).ok(), kvs).map_err(err)?;
            let t = TcpTransport::bind(rank, &cfg).map_err(|e| err(format!("tcp: {e}")))?;
            let p = pmi.ok_or_else(|| err("ranks on other nodes but no PMI"))?;
            p.put(&format!("tsunagi-tcp-{rank}"), &t.card())?;
            Ok(Some(Internode::Tcp(Box::new(t))))
        }
        other => Err(err(format!(
            "TSUNAGI_INTERNODE={other}: expected 'tcp' or 'stream'"
        ))),
    }
}

impl Internode {
    /// Learn the remote ranks' addresses (after the PMI barrier) and hand out the transport.
    pub(crate) fn connect(
        self,
        pmi: Option<&mut PmiClient>,
        remote: &[Rank],
    ) -> MpiResult<Box<dyn Transport>> {
        match self {
            Internode::Stream(mut s) => {
                s.set_peers(remote);
                Ok(Box::new(s))
            }
            Internode::Tcp(mut t) => {
                let p = pmi.ok_or_else(|| err("ranks on other nodes but no PMI"))?;
                let mut peers = Vec::with_capacity(remote.len());
                for &r in remote {
                    let card = p
                        .get(&format!("tsunagi-tcp-{r}"))?
                        .ok_or_else(|| err(format!("rank {r} published no TCP address")))?;
                    peers.push((r, parse_card(&card).map_err(err)?));
                }
                t.set_peers(&peers);
                Ok(t)
            }
        }
    }
}
