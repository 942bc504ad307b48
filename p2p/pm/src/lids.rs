//! Several addresses per host standing for InfiniBand LIDs, and the fat-tree planner's
//! choice among them (issue 19 item 5, docs/fattree.md "Wiring").
//!
//! On a fat tree with destination routing, a node with K LIDs is reached through root
//! switch `j` when addressed by its LID `j`; the planner of `tsunagi-fattree` picks, per
//! (source node, destination node), the LID that keeps the all-to-all's shift phases free
//! of shared switch links. Here a "LID" is one of the K UDP ports a PM endpoint binds
//! (`TSUNAGI_PM_LIDS=K`), all published in its card; a sender addresses a peer at the
//! peer's port number [`LidWiring::destination_index`].
//!
//! The planner needs the fabric (`TSUNAGI_FATTREE=k=<roots>[,leaves=<leaves>]`) and the
//! fabric node of each of the job's hosts (`TSUNAGI_FATTREE_NODES=<g0>,<g1>,...`, entry `i`
//! for Tsunagi's node id `i`, i.e. the hosts in the order the launcher numbers them). The
//! list is the same for every rank (mpirun's `-x` passes one environment to all hosts), so
//! every rank computes the same plan without communicating. Ranks on one host share its
//! fabric node; traffic between them uses index 0.

use tsunagi_fattree::{connection_lid_indices, FatTree};

/// What the environment says about LIDs.
#[derive(Clone, Debug, PartialEq)]
pub struct LidConfig {
    /// UDP ports (LIDs) per endpoint, at least 1.
    pub lids: usize,
    /// The fabric and the fabric node of each of the job's nodes (by Tsunagi node id).
    pub fattree: Option<(FatTree, Vec<usize>)>,
}

impl Default for LidConfig {
    fn default() -> Self {
        LidConfig {
            lids: 1,
            fattree: None,
        }
    }
}

/// Most ports one endpoint binds (InfiniBand's LMC allows 128 LIDs per port).
pub const MAX_LIDS: usize = 128;

impl LidConfig {
    /// From `TSUNAGI_PM_LIDS`, `TSUNAGI_FATTREE` and `TSUNAGI_FATTREE_NODES`. With a fabric
    /// and no `TSUNAGI_PM_LIDS`, K is the fabric's root count; with both, they must agree
    /// (the planner's index is a root number).
    pub fn from_env(getenv: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let get = |k: &str| getenv(k).filter(|v| !v.trim().is_empty());
        let lids = match get("TSUNAGI_PM_LIDS") {
            None => None,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=MAX_LIDS).contains(&n) => Some(n),
                _ => {
                    return Err(format!(
                        "TSUNAGI_PM_LIDS={v}: expected a whole number in 1..={MAX_LIDS}"
                    ))
                }
            },
        };
        let tree = get("TSUNAGI_FATTREE")
            .map(|v| parse_fattree(&v).map_err(|e| format!("TSUNAGI_FATTREE={v}: {e}")))
            .transpose()?;
        let nodes = get("TSUNAGI_FATTREE_NODES")
            .map(|v| parse_nodes(&v).map_err(|e| format!("TSUNAGI_FATTREE_NODES={v}: {e}")))
            .transpose()?;
        let fattree = match (tree, nodes) {
            (None, None) => None,
            (Some(_), None) => {
                return Err("TSUNAGI_FATTREE is set but TSUNAGI_FATTREE_NODES is not: \
                     give the fabric node of each of the job's hosts"
                    .into())
            }
            (None, Some(_)) => {
                return Err("TSUNAGI_FATTREE_NODES is set but TSUNAGI_FATTREE is not: \
                     give the fabric as k=<roots>,leaves=<leaves>"
                    .into())
            }
            (Some(t), Some(n)) => {
                t.check_allocation(&n)
                    .map_err(|e| format!("TSUNAGI_FATTREE_NODES: {e}"))?;
                Some((t, n))
            }
        };
        let lids = match (&fattree, lids) {
            (Some((t, _)), Some(k)) if k != t.roots() => {
                return Err(format!(
                    "TSUNAGI_PM_LIDS={k}: the fabric TSUNAGI_FATTREE has {} roots, one LID \
                     per root",
                    t.roots()
                ))
            }
            (Some((t, _)), _) => t.roots(),
            (None, k) => k.unwrap_or(1),
        };
        Ok(LidConfig { lids, fattree })
    }
}

/// `k=<roots>[,leaves=<leaves>]` (leaves default to the full tree's 2k), as the CLI's
/// `--k`/`--leaves`.
fn parse_fattree(v: &str) -> Result<FatTree, String> {
    let (mut k, mut leaves) = (None, None);
    for part in v.split(',') {
        let (name, val) = part
            .trim()
            .split_once('=')
            .ok_or("expected k=<roots>[,leaves=<leaves>]")?;
        let n: usize = val
            .trim()
            .parse()
            .map_err(|_| format!("{name}={val}: expected a whole number"))?;
        match name.trim() {
            "k" => k = Some(n),
            "leaves" => leaves = Some(n),
            other => return Err(format!("unknown field {other:?} (k, leaves)")),
        }
    }
    let k = k.ok_or("k=<roots> is missing")?;
    FatTree::new(k, leaves.unwrap_or(2 * k)).map_err(|e| e.0)
}

fn parse_nodes(v: &str) -> Result<Vec<usize>, String> {
    v.split(',')
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{s:?} is not a fabric node number"))
        })
        .collect()
}

/// The planner's choice for one rank: the index of the port each peer rank is addressed
/// at.
#[derive(Clone, Debug, PartialEq)]
pub struct LidWiring {
    /// `index[rank]`: which of `rank`'s ports to send to.
    index: Vec<usize>,
}

impl LidWiring {
    /// Everyone at port 0 (no planner).
    pub fn single(size: usize) -> Self {
        LidWiring {
            index: vec![0; size],
        }
    }

    /// The plan for rank `me` given the node id of every rank (`node_of[rank]`, the
    /// launcher's placement): [`connection_lid_indices`] for `me`'s host over the job's
    /// hosts, applied to each rank by its host.
    pub fn plan(cfg: &LidConfig, node_of: &[u32], me: usize) -> Result<Self, String> {
        let Some((tree, fabric_node)) = &cfg.fattree else {
            return Ok(Self::single(node_of.len()));
        };
        let hosts = node_of.iter().map(|&n| n as usize + 1).max().unwrap_or(0);
        if fabric_node.len() < hosts {
            return Err(format!(
                "TSUNAGI_FATTREE_NODES lists {} fabric nodes; the job runs on {hosts} hosts",
                fabric_node.len()
            ));
        }
        // The plan over the job's hosts only (job order = Tsunagi's node ids), so that a
        // longer list does not change it.
        let alloc = &fabric_node[..hosts];
        let by_host = connection_lid_indices(tree, alloc, node_of[me] as usize)
            .map_err(|e| format!("fat-tree planner: {e}"))?;
        Ok(LidWiring {
            index: node_of
                .iter()
                .map(|&n| by_host[n as usize].unwrap_or(0))
                .collect(),
        })
    }

    /// Which of `peer`'s ports to address.
    pub fn destination_index(&self, peer: usize) -> usize {
        self.index[peer]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn config() {
        assert_eq!(LidConfig::from_env(env(&[])).unwrap(), LidConfig::default());
        let c = LidConfig::from_env(env(&[("TSUNAGI_PM_LIDS", "3")])).unwrap();
        assert_eq!((c.lids, c.fattree), (3, None));
        let c = LidConfig::from_env(env(&[
            ("TSUNAGI_FATTREE", "k=2"),
            ("TSUNAGI_FATTREE_NODES", "0,2,5"),
        ]))
        .unwrap();
        assert_eq!(c.lids, 2);
        let (t, n) = c.fattree.unwrap();
        assert_eq!((t.roots(), t.leaves(), n), (2, 4, vec![0, 2, 5]));
        for (bad, expect) in [
            (&[("TSUNAGI_PM_LIDS", "0")][..], "TSUNAGI_PM_LIDS=0"),
            (&[("TSUNAGI_PM_LIDS", "x")], "TSUNAGI_PM_LIDS=x"),
            (
                &[("TSUNAGI_FATTREE", "k=2")],
                "TSUNAGI_FATTREE_NODES is not",
            ),
            (&[("TSUNAGI_FATTREE_NODES", "1")], "TSUNAGI_FATTREE is not"),
            (
                &[("TSUNAGI_FATTREE", "q=2"), ("TSUNAGI_FATTREE_NODES", "1")],
                "TSUNAGI_FATTREE=q=2",
            ),
            (
                &[("TSUNAGI_FATTREE", "k=2"), ("TSUNAGI_FATTREE_NODES", "1,x")],
                "TSUNAGI_FATTREE_NODES=1,x",
            ),
            (
                &[("TSUNAGI_FATTREE", "k=2"), ("TSUNAGI_FATTREE_NODES", "1,1")],
                "TSUNAGI_FATTREE_NODES",
            ),
            (
                &[
                    ("TSUNAGI_FATTREE", "k=2"),
                    ("TSUNAGI_FATTREE_NODES", "1,99"),
                ],
                "TSUNAGI_FATTREE_NODES",
            ),
            (
                &[
                    ("TSUNAGI_FATTREE", "k=2"),
                    ("TSUNAGI_FATTREE_NODES", "1"),
                    ("TSUNAGI_PM_LIDS", "3"),
                ],
                "TSUNAGI_PM_LIDS=3",
            ),
        ] {
            let e = LidConfig::from_env(env(bad)).unwrap_err();
            assert!(e.contains(expect), "{e}");
        }
    }

    #[test]
    fn plan_follows_the_planner_per_host() {
        let tree = FatTree::new(2, 4).unwrap();
        let alloc = vec![0, 2, 4, 6, 1];
        let cfg = LidConfig {
            lids: 2,
            fattree: Some((tree, alloc.clone())),
        };
        // Two ranks per host except the last; rank order interleaves hosts.
        let node_of = [0u32, 1, 2, 3, 4, 0, 1, 2, 3];
        let mut nonzero = 0;
        for me in 0..node_of.len() {
            let w = LidWiring::plan(&cfg, &node_of, me).unwrap();
            let want = connection_lid_indices(&tree, &alloc, node_of[me] as usize).unwrap();
            for (peer, &n) in node_of.iter().enumerate() {
                let got = w.destination_index(peer);
                assert_eq!(got, want[n as usize].unwrap_or(0), "{me} -> {peer}");
                nonzero += usize::from(got != 0);
            }
        }
        // The planner does use the second LID here (otherwise this proves little).
        assert!(nonzero > 0);
        assert!(LidWiring::plan(&cfg, &[0, 5], 0).is_err());
        assert_eq!(
            LidWiring::plan(&LidConfig::default(), &node_of, 3).unwrap(),
            LidWiring::single(node_of.len())
        );
    }
}
