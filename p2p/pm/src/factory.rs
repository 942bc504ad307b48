//! The PM transport's start-up, in the phases of [`tsunagi_p2p::boot`]: bind the UDP
//! sockets (one per LID) and publish `pm:<ip>:<port>[,<port>...]:<epoch>` under
//! `tsunagi-pm-<rank>` before the first fence, read the remote ranks' cards after it and
//! address each at the port the fat-tree plan chooses ([`crate::lids`]; computed from the
//! environment and the placement, the same on every rank without communication). UDP has
//! no connections: the peers are known once their cards are read.

use tsunagi_p2p::boot::{Bootstrap, Reach, StartInfo, Starting, TransportFactory};
use tsunagi_p2p::{P2pError, Rank, Transport};

use crate::lids::LidWiring;
use crate::parse_card;
use crate::transport::{PmTransport, PmTransportConfig};

/// The PM transport's registration (`TSUNAGI_INTERNODE=pm`).
pub struct PmFactory;

/// The one instance to list in a registry.
pub static FACTORY: PmFactory = PmFactory;

fn card_key(rank: Rank) -> String {
    format!("tsunagi-pm-{rank}")
}

fn other(e: impl std::fmt::Display) -> P2pError {
    P2pError::Other(e.to_string())
}

impl TransportFactory for PmFactory {
    fn name(&self) -> &'static str {
        "pm"
    }
    fn reach(&self) -> Reach {
        Reach::Remote
    }
    fn card_format(&self) -> &'static str {
        "pm:<ip>:<port>[,<port>...]:<epoch>"
    }
    fn start(
        &self,
        info: &StartInfo<'_>,
        boot: &mut dyn Bootstrap,
    ) -> Result<Box<dyn Starting>, P2pError> {
        let mut cfg = PmTransportConfig::from_env(|k| std::env::var(k).ok()).map_err(other)?;
        // As the TCP transport: without a key from our mpirun, one derived from the job id
        // (foreign launchers give every rank the same one).
        cfg.job_key
            .get_or_insert_with(|| tsunagi_tcp::JobKey::derive(info.job_id));
        // Plan before binding: a bad TSUNAGI_FATTREE_NODES is refused at once.
        let wiring = LidWiring::plan(&cfg.lids, &info.placement.node, info.rank as usize)
            .map_err(|e| other(format!("pm: {e}")))?;
        let t = PmTransport::bind(info.rank, info.size, &cfg)?;
        boot.put(&card_key(info.rank), &t.card())?;
        Ok(Box::new(StartingPm(Box::new(t), wiring)))
    }
}

struct StartingPm(Box<PmTransport>, LidWiring);

impl Starting for StartingPm {
    fn connect(&mut self, info: &StartInfo<'_>, boot: &mut dyn Bootstrap) -> Result<(), P2pError> {
        let mut peers = Vec::with_capacity(info.peers.len());
        for &r in info.peers {
            let card = boot
                .get(&card_key(r))?
                .ok_or_else(|| other(format!("rank {r} published no PM address")))?;
            peers.push((r, parse_card(&card).map_err(other)?));
        }
        self.0.set_peers(&peers, &self.1)
    }
    fn finish(self: Box<Self>, _: &StartInfo<'_>) -> Result<Box<dyn Transport>, P2pError> {
        Ok(self.0)
    }
}
