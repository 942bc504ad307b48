//! The paper's experiment (§5) on the simulator: all-to-all bandwidth of a job under a
//! routing method, over random or consecutive node allocations.

use crate::planner::{Numbering, Plan};
use crate::sim::{
    alltoall_bandwidth, plain_ring_phases, two_level_ring_phases, Rates, Sharing, Simulator,
};
use crate::topology::{FabricError, FatTree};

/// Which all-to-all runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Algorithm {
    /// Tsunagi's 2-level ring (the paper's choice), phases in lock-step.
    TwoLevelRing,
    /// Pairwise shift over ranks.
    PlainRing,
    /// The 2-level ring with every node moving on as soon as its own phase is done
    /// ([`crate::sim::Simulator::two_level_ring_out_of_step`]), the nodes starting at
    /// random times up to `skew` uncongested phase times apart (the same times for a
    /// given allocation under every method).
    TwoLevelRingOutOfStep { skew: f64 },
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TwoLevelRing => "2-level ring",
            Algorithm::PlainRing => "plain ring",
            Algorithm::TwoLevelRingOutOfStep { .. } => "2-level ring, out of step",
        }
    }
}

/// Which addresses and which node order the job uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// One LID per node (traffic to node g through root g mod k); the ring runs over the
    /// nodes in allocation (hostfile) order. The paper's baseline.
    SingleLid,
    /// The paper's method: nodes renumbered leaf by leaf (the ring runs in that order),
    /// LIDs from the planner.
    Planned,
    /// Planner LIDs, but the ring keeps the allocation order (step 1 skipped: what a
    /// transport gets if the ranks cannot be reordered).
    PlannedGivenOrder,
    /// One LID per node, ring in the planner's leaf-by-leaf order: how much the renumbering
    /// alone does.
    SingleLidLeafOrder,
}

impl Method {
    pub const ALL: [Method; 4] = [
        Method::SingleLid,
        Method::Planned,
        Method::PlannedGivenOrder,
        Method::SingleLidLeafOrder,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Method::SingleLid => "single LID",
            Method::Planned => "planned",
            Method::PlannedGivenOrder => "planned, hostfile order",
            Method::SingleLidLeafOrder => "single LID, leaf order",
        }
    }
}

/// Everything but the allocation.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub tree: FatTree,
    pub rates: Rates,
    pub sharing: Sharing,
    pub algorithm: Algorithm,
    pub ppn: usize,
    /// Bytes per process pair.
    pub msg: f64,
}

impl Config {
    /// The paper's set-up: 30 nodes on a 6-ary-2-tree (5 leaves), 8 processes per node,
    /// 1 MiB, 2-level ring; every link at `link_bytes_per_s`.
    pub fn paper(link_bytes_per_s: f64) -> Self {
        Config {
            tree: FatTree::new(6, 5).expect("valid"),
            rates: Rates::uniform(link_bytes_per_s),
            sharing: Sharing::Static,
            algorithm: Algorithm::TwoLevelRing,
            ppn: 8,
            msg: (1 << 20) as f64,
        }
    }
}

/// One simulated run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// The paper's all-to-all bandwidth, bytes per second.
    pub bandwidth: f64,
    /// Simulated seconds of the whole all-to-all.
    pub seconds: f64,
    /// Times the planner's greedy needed an exchange (0 without a planner).
    pub greedy_stuck: usize,
    /// The most flows one switch link carries in any phase
    /// ([`Simulator::max_switch_link_load`]): 1 (or 0) = no hot spot. For the out-of-step
    /// ring, of the same ring's lock-step phases.
    pub max_switch_link_load: usize,
    /// Phases in which some switch link carries more than one flow.
    pub hot_phases: usize,
}

/// Simulates the all-to-all of a job on nodes `alloc` (distinct node ids, in hostfile
/// order) under `method`.
pub fn run(cfg: &Config, alloc: &[usize], method: Method) -> Result<Outcome, FabricError> {
    let tree = cfg.tree;
    tree.check_allocation(alloc)?;
    let leaf_of: Vec<usize> = alloc.iter().map(|&g| tree.leaf_of(g)).collect();
    let numbering = match method {
        Method::PlannedGivenOrder => Numbering::AsGiven,
        _ => Numbering::LeafByLeaf,
    };
    // The single-LID baseline in hostfile order needs no plan (it is O(N²·K)).
    let plan = match method {
        Method::SingleLid => None,
        _ => Some(Plan::with_numbering(tree.roots(), &leaf_of, numbering)?),
    };
    let ring: Vec<usize> = match (&plan, method) {
        (Some(p), Method::Planned | Method::SingleLidLeafOrder) => {
            p.order().iter().map(|&i| alloc[i]).collect()
        }
        _ => alloc.to_vec(),
    };
    // Node id → job index, for the planned routes.
    let mut job = vec![usize::MAX; tree.nodes()];
    for (i, &g) in alloc.iter().enumerate() {
        job[g] = i;
    }
    let planned = |s: usize, d: usize| match &plan {
        Some(p) => p
            .lid_index(job[s], job[d])
            .expect("both ends are job nodes"),
        None => unreachable!("planned routes are asked only of planned methods"),
    };
    let single = |_s: usize, d: usize| tree.single_lid_root(d);
    let (route, stuck): (&dyn Fn(usize, usize) -> usize, usize) = match (&plan, method) {
        (Some(p), Method::Planned | Method::PlannedGivenOrder) => {
            (&planned, p.stats().greedy_stuck)
        }
        _ => (&single, 0),
    };
    let sim = Simulator::new(tree, cfg.rates, cfg.sharing, route);
    let phases = match cfg.algorithm {
        Algorithm::PlainRing => plain_ring_phases(&ring, cfg.ppn, cfg.msg),
        _ => two_level_ring_phases(&ring, cfg.ppn, cfg.msg),
    };
    let loads: Vec<usize> = phases.iter().map(|p| sim.max_switch_link_load(p)).collect();
    let t = match cfg.algorithm {
        Algorithm::TwoLevelRing | Algorithm::PlainRing => sim.time(&phases),
        Algorithm::TwoLevelRingOutOfStep { skew } => {
            // Start times per physical node, drawn from the allocation itself.
            let phase = (cfg.ppn * cfg.ppn) as f64 * cfg.msg / cfg.rates.nic;
            let seed = alloc.iter().fold(0x5eed_u64, |h, &g| {
                h.wrapping_mul(1_000_003).wrapping_add(g as u64 + 1)
            });
            let mut rng = SplitMix64::new(seed);
            let offsets: Vec<f64> = (0..tree.nodes())
                .map(|_| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * skew * phase)
                .collect();
            let start: Vec<f64> = ring.iter().map(|&g| offsets[g]).collect();
            sim.two_level_ring_out_of_step(&ring, cfg.ppn, cfg.msg, &start)
        }
    };
    Ok(Outcome {
        bandwidth: alltoall_bandwidth(cfg.msg, alloc.len(), cfg.ppn, t),
        seconds: t,
        greedy_stuck: stuck,
        max_switch_link_load: loads.iter().copied().max().unwrap_or(0),
        hot_phases: loads.iter().filter(|&&c| c > 1).count(),
    })
}

/// SplitMix64: a small, well-mixed, seedable generator, so that a run's allocations are
/// the same on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by rejection so that no value is favoured.
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return (x % n) as usize;
            }
        }
    }
}

/// `n` distinct nodes of `0..nodes`, uniformly, listed in increasing order (a hostfile
/// written by a scheduler).
pub fn random_allocation(rng: &mut SplitMix64, nodes: usize, n: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..nodes).collect();
    for i in 0..n.min(nodes) {
        let j = i + rng.below(nodes - i);
        all.swap(i, j);
    }
    let mut pick = all[..n.min(nodes)].to_vec();
    pick.sort_unstable();
    pick
}

/// Minimum, mean and maximum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(xs: &[f64]) -> Summary {
        Summary {
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            mean: xs.iter().sum::<f64>() / xs.len().max(1) as f64,
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// Bandwidths (bytes/s) of `count` random allocations of `n` nodes under each of
/// `methods`: `result[m][a]`. Also the total of greedy exchanges.
pub fn random_allocations(
    cfg: &Config,
    n: usize,
    count: usize,
    seed: u64,
    methods: &[Method],
) -> Result<(Vec<Vec<f64>>, usize), FabricError> {
    if n > cfg.tree.nodes() {
        return Err(FabricError(format!(
            "a job of {n} nodes does not fit in {} nodes",
            cfg.tree.nodes()
        )));
    }
    let mut rng = SplitMix64::new(seed);
    let mut out = vec![Vec::with_capacity(count); methods.len()];
    let mut stuck = 0;
    for _ in 0..count {
        let alloc = random_allocation(&mut rng, cfg.tree.nodes(), n);
        for (m, &method) in methods.iter().enumerate() {
            let o = run(cfg, &alloc, method)?;
            out[m].push(o.bandwidth);
            stuck += o.greedy_stuck;
        }
    }
    Ok((out, stuck))
}

/// How often and how badly switch links are shared under one method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Allocations run.
    pub allocations: usize,
    /// Allocations with a switch link carrying two flows or more in some phase.
    pub hot_allocations: usize,
    /// Phases (over all allocations) with such a link.
    pub hot_phases: usize,
    /// Phases run in all.
    pub phases: usize,
    /// The most flows one switch link carried in any phase of any allocation.
    pub worst_load: usize,
}

/// The hot spots of the same `count` random `n`-node allocations as
/// [`random_allocations`] with the same seed, under `method`.
pub fn hot_spot_census(
    cfg: &Config,
    n: usize,
    count: usize,
    seed: u64,
    method: Method,
) -> Result<Census, FabricError> {
    let mut rng = SplitMix64::new(seed);
    let mut c = Census::default();
    for _ in 0..count {
        let alloc = random_allocation(&mut rng, cfg.tree.nodes(), n);
        let o = run(cfg, &alloc, method)?;
        c.allocations += 1;
        c.hot_allocations += usize::from(o.max_switch_link_load > 1);
        c.hot_phases += o.hot_phases;
        c.phases += match cfg.algorithm {
            Algorithm::PlainRing => alloc.len() * cfg.ppn,
            _ => alloc.len(),
        };
        c.worst_load = c.worst_load.max(o.max_switch_link_load);
    }
    Ok(c)
}

/// Bandwidths of the consecutive allocations `0..n` for `n` in `sizes`, per method.
pub fn consecutive(
    cfg: &Config,
    sizes: &[usize],
    methods: &[Method],
) -> Result<Vec<Vec<f64>>, FabricError> {
    let mut out = vec![Vec::new(); methods.len()];
    for &n in sizes {
        let alloc: Vec<usize> = (0..n).collect();
        for (m, &method) in methods.iter().enumerate() {
            out[m].push(run(cfg, &alloc, method)?.bandwidth);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_distinct_sorted_and_reproducible() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..50 {
            let x = random_allocation(&mut a, 30, 16);
            assert_eq!(x, random_allocation(&mut b, 30, 16));
            assert_eq!(x.len(), 16);
            assert!(x.windows(2).all(|w| w[0] < w[1]) && x[15] < 30);
        }
    }

    #[test]
    fn out_of_step_without_skew_is_the_lock_step_time_when_nothing_collides() {
        let cfg = Config::paper(1e9);
        let mut rng = SplitMix64::new(3);
        for _ in 0..20 {
            let alloc = random_allocation(&mut rng, 30, 16);
            let lock = run(&cfg, &alloc, Method::Planned).unwrap().bandwidth;
            let free = Config {
                algorithm: Algorithm::TwoLevelRingOutOfStep { skew: 0.0 },
                ..cfg
            };
            let out = run(&free, &alloc, Method::Planned).unwrap().bandwidth;
            assert!((lock - out).abs() < 1e-6 * lock, "{lock} {out}");
            // Skewed starts can only lengthen the run (the makespan counts from time 0).
            let skewed = Config {
                algorithm: Algorithm::TwoLevelRingOutOfStep { skew: 1.0 },
                ..cfg
            };
            let s = run(&skewed, &alloc, Method::Planned).unwrap().bandwidth;
            assert!(s <= lock * (1.0 + 1e-9), "{s} {lock}");
        }
    }

    #[test]
    fn paper_figure_3_consecutive_eight_nodes() {
        // 3-ary-2-tree, nodes 0..8 (leaves hold 3, 3, 2), shift 3: 3 -> 6 and 5 -> 0 both
        // climb leaf 1 -> root 0, so one phase runs at half speed; the plan removes it.
        let cfg = Config {
            tree: FatTree::full(3).unwrap(),
            ppn: 1,
            ..Config::paper(1e9)
        };
        let alloc: Vec<usize> = (0..8).collect();
        let single = run(&cfg, &alloc, Method::SingleLid).unwrap().bandwidth;
        let planned = run(&cfg, &alloc, Method::Planned).unwrap().bandwidth;
        assert!((planned - 1e9).abs() < 1.0, "{planned}");
        assert!(single < 0.95e9, "{single}");
    }
}
