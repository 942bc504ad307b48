//! The shared-memory transport's start-up, in the three phases of
//! [`tsunagi_p2p::boot`]: the node leader (lowest rank of the node) creates the segment
//! before the first fence, the others attach after it, and the leader unlinks the name
//! after the second fence, when every local rank has attached, so that no name is left in
//! /dev/shm even if the job dies later. The segment's name comes from the job id and the
//! node id, so there is no card to publish.

use tsunagi_p2p::boot::{Bootstrap, Reach, StartInfo, Starting, TransportFactory};
use tsunagi_p2p::{P2pError, Rank, Transport};

use crate::{ShmConfig, ShmTransport};

/// The shared-memory transport's registration (`TSUNAGI_INTRANODE=shm`, the default).
pub struct ShmFactory;

/// The one instance to list in a registry.
pub static FACTORY: ShmFactory = ShmFactory;

fn segment_name(info: &StartInfo<'_>) -> String {
    format!("tsunagi-{}-n{}", info.job_id, info.my_node())
}

/// The node's ranks, this one included, ascending.
fn local_ranks(info: &StartInfo<'_>) -> Vec<Rank> {
    let mut local = info.peers.to_vec();
    local.push(info.rank);
    local.sort_unstable();
    local
}

impl TransportFactory for ShmFactory {
    fn name(&self) -> &'static str {
        "shm"
    }
    fn reach(&self) -> Reach {
        Reach::Node
    }
    fn card_format(&self) -> &'static str {
        ""
    }
    fn start(
        &self,
        info: &StartInfo<'_>,
        _boot: &mut dyn Bootstrap,
    ) -> Result<Box<dyn Starting>, P2pError> {
        let local = local_ranks(info);
        let cfg = ShmConfig::from_env();
        let leader = local[0] == info.rank;
        let transport = if leader {
            Some(ShmTransport::create(
                &segment_name(info),
                &local,
                info.rank,
                &cfg,
            )?)
        } else {
            None
        };
        Ok(Box::new(StartingShm {
            local,
            cfg,
            leader,
            transport,
        }))
    }
}

struct StartingShm {
    local: Vec<Rank>,
    cfg: ShmConfig,
    leader: bool,
    transport: Option<ShmTransport>,
}

impl Starting for StartingShm {
    fn connect(&mut self, info: &StartInfo<'_>, _: &mut dyn Bootstrap) -> Result<(), P2pError> {
        if !self.leader {
            self.transport = Some(ShmTransport::attach(
                &segment_name(info),
                &self.local,
                info.rank,
                &self.cfg,
            )?);
        }
        Ok(())
    }
    fn finish(self: Box<Self>, _: &StartInfo<'_>) -> Result<Box<dyn Transport>, P2pError> {
        let t = self
            .transport
            .ok_or_else(|| P2pError::Other("shm: finish before connect".into()))?;
        if self.leader {
            t.unlink()?;
        }
        Ok(Box::new(t))
    }
}
