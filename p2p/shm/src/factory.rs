//! The shared-memory transport's start-up, in the three phases of
//! [`tsunagi_p2p::boot`]: the node leader (lowest rank of the node) creates the segment
//! before the first fence and publishes its card `<pid>:<fd>` under `tsunagi-shm-n<node>`;
//! the others attach after the fence through `/proc/<pid>/fd/<fd>`; after the second fence,
//! when every local rank has attached, the leader closes that descriptor.
//!
//! The segment is an anonymous memfd, never a name in /dev/shm: however the job dies (even
//! with mpirun and every rank SIGKILLed in the middle of start-up) nothing is left behind;
//! the memory goes with the last process that maps it.

use tsunagi_p2p::boot::{Bootstrap, Reach, StartInfo, Starting, TransportFactory};
use tsunagi_p2p::{P2pError, Rank, Transport};

use crate::{ShmConfig, ShmTransport};

/// The shared-memory transport's registration (`TSUNAGI_INTRANODE=shm`, the default).
pub struct ShmFactory;

/// The one instance to list in a registry.
pub static FACTORY: ShmFactory = ShmFactory;

/// The segment's label (seen in /proc/<pid>/maps as `memfd:<label>`).
fn segment_label(info: &StartInfo<'_>) -> String {
    format!("tsunagi-{}-n{}", info.job_id, info.my_node())
}

fn card_key(info: &StartInfo<'_>) -> String {
    format!("tsunagi-shm-n{}", info.my_node())
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
        "<pid>:<fd> (the node leader's memfd)"
    }
    fn start(
        &self,
        info: &StartInfo<'_>,
        boot: &mut dyn Bootstrap,
    ) -> Result<Box<dyn Starting>, P2pError> {
        let local = local_ranks(info);
        let cfg = ShmConfig::from_env();
        let leader = local[0] == info.rank;
        let transport = if leader {
            let t = ShmTransport::create_private(&segment_label(info), &local, info.rank, &cfg)?;
            let card = t.card().expect("a new private segment has a card");
            boot.put(&card_key(info), &card)?;
            Some(t)
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
    fn connect(&mut self, info: &StartInfo<'_>, boot: &mut dyn Bootstrap) -> Result<(), P2pError> {
        if !self.leader {
            let card = boot.get(&card_key(info))?.ok_or_else(|| {
                P2pError::Other(format!(
                    "shm: the leader of node {} published no segment",
                    info.my_node()
                ))
            })?;
            self.transport = Some(ShmTransport::attach_card(
                &card,
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
