//! Start-up: which [`Bootstrap`] this process has, where every rank runs, and bringing up
//! the transports of a [`Registry`] into a [`Router`].
//!
//! The core names no transport. It picks one transport per reach from the registry
//! (`TSUNAGI_INTRANODE` for the other ranks of this node, default the first registered
//! node transport; `TSUNAGI_INTERNODE` for ranks on other nodes, default the first remote
//! one) and runs each through the phases of [`tsunagi_p2p::boot`] around two fences.

use std::collections::HashMap;

use tsunagi_p2p::boot::{Bootstrap, Placement, Reach, Registry, StartInfo};
use tsunagi_p2p::device::Device;
use tsunagi_p2p::{P2pError, Rank, Router, SelfTransport};

use crate::error::{ErrorClass, MpiError, MpiResult};
use crate::pmi::PmiClient;

pub(crate) fn init_err(e: impl std::fmt::Display) -> MpiError {
    MpiError::new(ErrorClass::Other, format!("MPI_Init: {e}"))
}

fn p2p_err(e: MpiError) -> P2pError {
    P2pError::Other(e.message)
}

pub use tsunagi_p2p::boot::hostname;
use tsunagi_p2p::boot::{host_id, nodes_of};

/// Parse TSUNAGI_NODE_MAP: either "K" (K consecutive ranks per node) or a comma list of a
/// node id per rank.
pub fn parse_node_map(spec: &str, size: usize) -> Result<Vec<u32>, String> {
    let spec = spec.trim();
    if let Ok(k) = spec.parse::<usize>() {
        if k == 0 {
            return Err("TSUNAGI_NODE_MAP: ranks per node must be at least 1".into());
        }
        return Ok((0..size).map(|r| (r / k) as u32).collect());
    }
    let ids: Result<Vec<u32>, _> = spec.split(',').map(|s| s.trim().parse::<u32>()).collect();
    match ids {
        Ok(v) if v.len() == size => Ok(v),
        Ok(v) => Err(format!(
            "TSUNAGI_NODE_MAP lists {} ranks but the job has {size}",
            v.len()
        )),
        Err(_) => Err(format!(
            "TSUNAGI_NODE_MAP={spec}: expected ranks per node (\"2\") or a node id per rank (\"0,0,1,1\")"
        )),
    }
}

/// A name made safe for file and socket names.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The PMI-1 client as a bootstrap (our mpirun, MPICH's Hydra, Slurm's pmi2 plugin).
struct PmiBootstrap {
    client: PmiClient,
    job_id: String,
}

impl Bootstrap for PmiBootstrap {
    fn name(&self) -> &'static str {
        "pmi"
    }
    fn rank(&self) -> Rank {
        self.client.rank()
    }
    fn size(&self) -> usize {
        self.client.size() as usize
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn placement(&mut self) -> Result<Option<Placement>, P2pError> {
        let size = self.size();
        Ok(self
            .client
            .process_mapping()
            .map_err(p2p_err)?
            .filter(|m| m.len() == size)
            .map(Placement::one_site))
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), P2pError> {
        self.client.put(key, value).map_err(p2p_err)
    }
    fn get(&mut self, key: &str) -> Result<Option<String>, P2pError> {
        self.client.get(key).map_err(p2p_err)
    }
    fn fence(&mut self) -> Result<(), P2pError> {
        self.client.barrier().map_err(p2p_err)
    }
    fn abort(&mut self, code: i32, msg: &str) {
        let _ = self.client.abort(code, msg);
    }
    fn finalize(&mut self) -> Result<(), P2pError> {
        self.client.finalize().map_err(p2p_err)
    }
    fn appnum(&self) -> i32 {
        self.client.appnum()
    }
    fn spawn(
        &mut self,
        apps: &[tsunagi_p2p::boot::SpawnApp],
        preput: &[(String, String)],
    ) -> Option<Result<(), P2pError>> {
        Some(self.client.spawn(apps, preput).map_err(p2p_err))
    }
    fn name_service(
        &mut self,
        req: tsunagi_p2p::boot::NameRequest<'_>,
    ) -> Option<Result<tsunagi_p2p::boot::NameAnswer, P2pError>> {
        Some(self.client.name_service(req).map_err(p2p_err))
    }
}

/// A process started without a launcher: rank 0 of 1 (autoconf's test programs, `./prog`).
struct Singleton {
    job_id: String,
    store: HashMap<String, String>,
}

impl Bootstrap for Singleton {
    fn name(&self) -> &'static str {
        "singleton"
    }
    fn rank(&self) -> Rank {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn placement(&mut self) -> Result<Option<Placement>, P2pError> {
        Ok(Some(Placement::one_site(vec![0])))
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), P2pError> {
        self.store.insert(key.to_string(), value.to_string());
        Ok(())
    }
    fn get(&mut self, key: &str) -> Result<Option<String>, P2pError> {
        Ok(self.store.get(key).cloned())
    }
    fn fence(&mut self) -> Result<(), P2pError> {
        Ok(())
    }
    fn abort(&mut self, _code: i32, _msg: &str) {}
    fn finalize(&mut self) -> Result<(), P2pError> {
        Ok(())
    }
}

/// The bootstrap of this process: the registry's first that recognises its launcher, else
/// the PMI client (PMI_FD / PMI_PORT), else a singleton.
pub(crate) fn bootstrap(registry: &Registry) -> MpiResult<Box<dyn Bootstrap>> {
    for f in registry.bootstraps {
        if let Some(b) = f
            .detect()
            .map_err(|e| init_err(format!("{}: {e}", f.name())))?
        {
            return Ok(b);
        }
    }
    Ok(match PmiClient::from_env()? {
        Some(client) => {
            let job_id = sanitize(client.kvsname());
            Box::new(PmiBootstrap { client, job_id })
        }
        None => Box::new(Singleton {
            job_id: format!("singleton_{}", std::process::id()),
            store: HashMap::new(),
        }),
    })
}

/// The native devices a grid join brought, with the world ranks each serves.
pub(crate) type Devices = Vec<(Box<dyn Device>, Vec<Rank>)>;

/// Join other sites when the environment asks for it (the registry's first wanted
/// [`GridJoin`](tsunagi_p2p::boot::GridJoin)): the job-wide bootstrap and its devices.
/// Otherwise the site's bootstrap is the job's and there are no devices.
pub(crate) fn join_grid(
    registry: &Registry,
    site: Box<dyn Bootstrap>,
) -> MpiResult<(Box<dyn Bootstrap>, Devices)> {
    match registry.grids.iter().find(|g| g.wanted()) {
        None => Ok((site, Vec::new())),
        Some(g) => {
            let joined = g
                .join(site)
                .map_err(|e| init_err(format!("{}: {e}", g.name())))?;
            Ok((joined.boot, joined.devices))
        }
    }
}

/// Where every rank runs: what a grid's bootstrap says (several sites), else
/// `TSUNAGI_NODE_MAP` (pretend nodes), else what the bootstrap knows, else an exchange of
/// host ids (one fence). Also how many ranks of the job share this rank's real host (with
/// pretend nodes, all of a host's pretend nodes together): the waiting policy needs it,
/// since ranks that outnumber the host's cores must give their core away quickly.
pub(crate) fn placement(boot: &mut dyn Bootstrap) -> MpiResult<(Placement, usize)> {
    let size = boot.size();
    let rank = boot.rank() as usize;
    let known = boot.placement().map_err(init_err)?;
    let on_my_host = |node: &[u32]| node.iter().filter(|&&n| n == node[rank]).count();
    if let Some(p) = known
        .as_ref()
        .filter(|p| p.site.iter().any(|&s| s != p.site[0]))
    {
        return Ok((p.clone(), on_my_host(&p.node)));
    }
    if let Ok(spec) = std::env::var("TSUNAGI_NODE_MAP") {
        let pretend = parse_node_map(&spec, size).map_err(init_err)?;
        // Pretend nodes say nothing about the hosts: a 2-rank pretend node among eight
        // ranks on a 2-core host is oversubscribed, not a node with a core per rank.
        let hosts = match known {
            Some(p) => p.node,
            None => host_nodes(boot)?,
        };
        return Ok((Placement::one_site(pretend), on_my_host(&hosts)));
    }
    let p = match known {
        Some(p) => p,
        None => Placement::one_site(host_nodes(boot)?),
    };
    let local = on_my_host(&p.node);
    Ok((p, local))
}

/// Node ids from an exchange of host ids through the bootstrap (one fence).
fn host_nodes(boot: &mut dyn Bootstrap) -> MpiResult<Vec<u32>> {
    let (rank, size) = (boot.rank(), boot.size());
    boot.put(&format!("tsunagi-host-{rank}"), &host_id())
        .map_err(init_err)?;
    boot.fence().map_err(init_err)?;
    let ids = (0..size)
        .map(|r| {
            boot.get(&format!("tsunagi-host-{r}"))
                .map_err(init_err)?
                .ok_or_else(|| init_err(format!("rank {r} published no host id")))
        })
        .collect::<MpiResult<Vec<String>>>()?;
    Ok(nodes_of(&ids))
}

/// Bring up the self path and one registered transport per reach that has peers, and
/// route every rank to its transport. Transports serve this rank's site only: other sites
/// are the grid's devices'.
pub(crate) fn start_transports(
    registry: &Registry,
    boot: &mut dyn Bootstrap,
    placement: &Placement,
) -> MpiResult<Router> {
    let rank = boot.rank();
    let size = boot.size();
    let job_id = boot.job_id().to_string();
    let my_node = placement.node[rank as usize];
    let my_site = placement.site[rank as usize];
    let peers_of = |reach: Reach| -> Vec<Rank> {
        (0..size as Rank)
            .filter(|&r| {
                r != rank
                    && placement.site[r as usize] == my_site
                    && (placement.node[r as usize] == my_node) == (reach == Reach::Node)
            })
            .collect()
    };
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let wanted = [
        (Reach::Node, "TSUNAGI_INTRANODE", env("TSUNAGI_INTRANODE")),
        (Reach::Remote, "TSUNAGI_INTERNODE", env("TSUNAGI_INTERNODE")),
    ];

    // Phase 1: start what has peers (the choice is made even without peers, so that a
    // misspelt name fails every job, not only multi-node ones).
    let mut starting = Vec::new();
    for (reach, var, name) in &wanted {
        let name = name.trim();
        let factory = registry.choose(*reach, name).map_err(|e| {
            if name.is_empty() {
                init_err(e)
            } else {
                init_err(format!("{var}={name}: {e}"))
            }
        })?;
        let peers = peers_of(*reach);
        if peers.is_empty() {
            continue;
        }
        let info = StartInfo {
            rank,
            size,
            job_id: &job_id,
            placement,
            peers: &peers,
        };
        let s = factory
            .start(&info, boot)
            .map_err(|e| init_err(format!("{}: {e}", factory.name())))?;
        starting.push((factory.name(), peers, s));
    }
    boot.fence().map_err(init_err)?;
    // Phase 2: attach, read cards.
    for (name, peers, s) in starting.iter_mut() {
        let info = StartInfo {
            rank,
            size,
            job_id: &job_id,
            placement,
            peers,
        };
        s.connect(&info, boot)
            .map_err(|e| init_err(format!("{name}: {e}")))?;
    }
    boot.fence().map_err(init_err)?;
    // Phase 3: ready.
    let mut router = Router::new(size);
    router.add(
        crate::tools::counting(Box::new(SelfTransport::new(rank))),
        &[rank],
    );
    for (name, peers, s) in starting {
        let info = StartInfo {
            rank,
            size,
            job_id: &job_id,
            placement,
            peers: &peers,
        };
        let t = s
            .finish(&info)
            .map_err(|e| init_err(format!("{name}: {e}")))?;
        router.add(crate::tools::counting(t), &peers);
    }
    Ok(router)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_map_forms() {
        assert_eq!(parse_node_map("2", 5).unwrap(), vec![0, 0, 1, 1, 2]);
        assert_eq!(parse_node_map("0,1,0", 3).unwrap(), vec![0, 1, 0]);
        assert!(parse_node_map("0", 2).is_err());
        assert!(parse_node_map("0,1", 3).is_err());
        assert!(parse_node_map("x", 3).is_err());
        assert!(parse_node_map(" 0 ", 2).is_err());
    }

    #[test]
    fn sanitized_names() {
        assert_eq!(sanitize("kvs_12-a"), "kvs_12-a");
        assert_eq!(sanitize("a/b c:d"), "a_b_c_d");
    }
}
