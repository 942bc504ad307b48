//! The TCP transport's start-up, in the phases of [`tsunagi_p2p::boot`]: bind and publish
//! the card `tcp:<ip>:<port>` under `tsunagi-tcp-<rank>` before the first fence, read the
//! remote ranks' cards after it. Connections are made later, on first use.

use tsunagi_p2p::boot::{Bootstrap, Reach, StartInfo, Starting, TransportFactory};
use tsunagi_p2p::{P2pError, Rank, Transport};

use crate::{parse_card, TcpConfig, TcpTransport, CARD_PREFIX};

/// The TCP transport's registration (`TSUNAGI_INTERNODE=tcp`, the default between nodes).
pub struct TcpFactory;

/// The one instance to list in a registry.
pub static FACTORY: TcpFactory = TcpFactory;

fn card_key(rank: Rank) -> String {
    format!("tsunagi-tcp-{rank}")
}

fn other(e: impl std::fmt::Display) -> P2pError {
    P2pError::Other(format!("tcp: {e}"))
}

impl TransportFactory for TcpFactory {
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn reach(&self) -> Reach {
        Reach::Remote
    }
    fn card_format(&self) -> &'static str {
        "tcp:<ip>:<port>"
    }
    fn start(
        &self,
        info: &StartInfo<'_>,
        boot: &mut dyn Bootstrap,
    ) -> Result<Box<dyn Starting>, P2pError> {
        // The job key: TSUNAGI_JOB_KEY from our mpirun, else derived from the job id
        // (foreign launchers give every rank the same one).
        let cfg = TcpConfig::from_env(|k| std::env::var(k).ok(), info.job_id).map_err(other)?;
        let t = TcpTransport::bind(info.rank, &cfg)?;
        debug_assert!(t.card().starts_with(CARD_PREFIX));
        boot.put(&card_key(info.rank), &t.card())?;
        Ok(Box::new(StartingTcp(Box::new(t))))
    }
}

// Boxed: a transport is large and this only lives through start-up.
struct StartingTcp(Box<TcpTransport>);

impl Starting for StartingTcp {
    fn connect(&mut self, info: &StartInfo<'_>, boot: &mut dyn Bootstrap) -> Result<(), P2pError> {
        let mut peers = Vec::with_capacity(info.peers.len());
        for &r in info.peers {
            let card = boot
                .get(&card_key(r))?
                .ok_or_else(|| other(format!("rank {r} published no TCP address")))?;
            peers.push((r, parse_card(&card).map_err(other)?));
        }
        self.0.set_peers(&peers);
        Ok(())
    }
    fn finish(self: Box<Self>, _: &StartInfo<'_>) -> Result<Box<dyn Transport>, P2pError> {
        Ok(self.0)
    }
}
