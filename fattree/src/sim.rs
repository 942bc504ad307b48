//! A flow-level simulator of an all-to-all's phases on a [`FatTree`].
//!
//! A phase is a set of flows (source node, destination node, bytes) that start together;
//! the next phase starts when the last flow of this one ends (the algorithms simulated
//! here wait for a phase's transfers before starting the next). Every flow follows its
//! route (the root chosen by a routing function), and the flows of a phase share links by
//! max-min fairness (progressive filling): a flow gets the fair share of its most loaded
//! link, capacity left over by flows bottlenecked elsewhere going to the others.
//!
//! [`Sharing::Static`] keeps the rates of the phase's start until the phase ends (the
//! issue's rule: phase time = the largest `bytes / rate`). [`Sharing::Fluid`] recomputes
//! the shares whenever a flow ends. When all flows of a phase have the same size (the
//! 2-level ring with the same number of processes per node) the two agree exactly: the
//! slowest flows' bottleneck link is saturated by flows that all have that slowest rate,
//! so they all end together and nothing is freed on that link before. They differ for the
//! plain ring, whose phases mix flow sizes.
//!
//! Traffic inside a node (a node's ranks exchanging with each other) uses no link; it
//! costs `bytes / intra` when an intra-node rate is given, else nothing (the paper counts
//! only inter-node bytes and calls the intra-node time small).

use crate::topology::FatTree;

/// Link rates, in bytes per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// Node ↔ leaf links (what a node's adapter can inject or absorb).
    pub nic: f64,
    /// Leaf ↔ root links.
    pub link: f64,
    /// Copy rate inside a node; `None`: free.
    pub intra: Option<f64>,
}

impl Rates {
    /// Every link at `bytes_per_s`, intra-node traffic free.
    pub fn uniform(bytes_per_s: f64) -> Self {
        Rates {
            nic: bytes_per_s,
            link: bytes_per_s,
            intra: None,
        }
    }
}

/// How the flows of a phase share links over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Max-min rates fixed at the phase's start.
    Static,
    /// Max-min rates recomputed each time a flow ends.
    Fluid,
}

/// One flow of a phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Flow {
    pub src: usize,
    pub dst: usize,
    pub bytes: f64,
}

/// Max-min fair rates of flows over links of capacity `caps` (`links[f]`: the link
/// indices flow `f` crosses). A flow that crosses no link gets `f64::INFINITY`.
pub fn max_min_rates(caps: &[f64], links: &[Vec<usize>]) -> Vec<f64> {
    let mut rate = vec![f64::INFINITY; links.len()];
    let mut fixed: Vec<bool> = links.iter().map(|l| l.is_empty()).collect();
    let mut left = caps.to_vec();
    let mut count = vec![0usize; caps.len()];
    for l in links.iter().flatten() {
        count[*l] += 1;
    }
    loop {
        // The most constrained link among those still carrying unfixed flows.
        let mut best: Option<(f64, usize)> = None;
        for (l, &c) in count.iter().enumerate() {
            if c > 0 {
                let share = left[l].max(0.0) / c as f64;
                if best.is_none_or(|(b, _)| share < b) {
                    best = Some((share, l));
                }
            }
        }
        let Some((share, l)) = best else {
            break;
        };
        for f in 0..links.len() {
            if !fixed[f] && links[f].contains(&l) {
                fixed[f] = true;
                rate[f] = share;
                for &m in &links[f] {
                    left[m] -= share;
                    count[m] -= 1;
                }
            }
        }
    }
    rate
}

/// Simulates phases on one fabric with one routing.
pub struct Simulator<'a> {
    tree: FatTree,
    rates: Rates,
    sharing: Sharing,
    caps: Vec<f64>,
    /// (source node, destination node) → root.
    route: &'a dyn Fn(usize, usize) -> usize,
}

impl<'a> Simulator<'a> {
    /// `route(src, dst)` is the root a packet from node `src` to node `dst` crosses (asked
    /// only for nodes on different leaves).
    pub fn new(
        tree: FatTree,
        rates: Rates,
        sharing: Sharing,
        route: &'a dyn Fn(usize, usize) -> usize,
    ) -> Self {
        let caps = (0..tree.link_count())
            .map(|i| {
                if tree.is_node_link(i) {
                    rates.nic
                } else {
                    rates.link
                }
            })
            .collect();
        Simulator {
            tree,
            rates,
            sharing,
            caps,
            route,
        }
    }

    fn links_of(&self, f: &Flow) -> Vec<usize> {
        let root = if self.tree.leaf_of(f.src) != self.tree.leaf_of(f.dst) {
            (self.route)(f.src, f.dst)
        } else {
            0
        };
        self.tree
            .route(f.src, f.dst, root)
            .into_iter()
            .map(|l| self.tree.link_index(l))
            .collect()
    }

    /// Time of a flow that crosses no link (inside a node).
    fn intra_time(&self, bytes: f64) -> f64 {
        self.rates.intra.map_or(0.0, |r| bytes / r)
    }

    /// The max-min rate of every flow of a phase at its start.
    pub fn rates_of(&self, flows: &[Flow]) -> Vec<f64> {
        let links: Vec<Vec<usize>> = flows.iter().map(|f| self.links_of(f)).collect();
        max_min_rates(&self.caps, &links)
    }

    /// Seconds from the start of a phase to the end of its last flow.
    pub fn phase_time(&self, flows: &[Flow]) -> f64 {
        let links: Vec<Vec<usize>> = flows.iter().map(|f| self.links_of(f)).collect();
        let intra = flows
            .iter()
            .zip(&links)
            .filter(|(_, l)| l.is_empty())
            .map(|(f, _)| self.intra_time(f.bytes))
            .fold(0.0, f64::max);
        let net: Vec<usize> = (0..flows.len())
            .filter(|&i| !links[i].is_empty() && flows[i].bytes > 0.0)
            .collect();
        // Equal sizes (the 2-level ring): the slowest max-min rate is the first share of
        // progressive filling, min over links of capacity / flows, and those flows end
        // last and together under both sharings. O(links) instead of O(flows · links).
        if let Some(&first) = net.first() {
            let b = flows[first].bytes;
            if net.iter().all(|&i| flows[i].bytes == b) {
                let mut count = vec![0usize; self.caps.len()];
                for &i in &net {
                    for &l in &links[i] {
                        count[l] += 1;
                    }
                }
                let slowest = count
                    .iter()
                    .zip(&self.caps)
                    .filter(|(&c, _)| c > 0)
                    .map(|(&c, &cap)| cap / c as f64)
                    .fold(f64::INFINITY, f64::min);
                return intra.max(b / slowest);
            }
        }
        self.general_phase_time(flows, &links, &net, intra)
    }

    /// Progressive filling (static) or its repetition at every flow's end (fluid).
    fn general_phase_time(
        &self,
        flows: &[Flow],
        links: &[Vec<usize>],
        net: &[usize],
        intra: f64,
    ) -> f64 {
        let mut left: Vec<f64> = net.iter().map(|&i| flows[i].bytes).collect();
        let mut active: Vec<usize> = (0..net.len()).collect();
        let mut now = 0.0;
        while !active.is_empty() {
            let l: Vec<Vec<usize>> = active.iter().map(|&a| links[net[a]].clone()).collect();
            let rate = max_min_rates(&self.caps, &l);
            if self.sharing == Sharing::Static {
                let end = active
                    .iter()
                    .zip(&rate)
                    .map(|(&a, &r)| left[a] / r)
                    .fold(0.0, f64::max);
                return intra.max(now + end);
            }
            let step = active
                .iter()
                .zip(&rate)
                .map(|(&a, &r)| left[a] / r)
                .fold(f64::INFINITY, f64::min);
            now += step;
            let mut still = Vec::with_capacity(active.len());
            for (&a, &r) in active.iter().zip(&rate) {
                left[a] -= r * step;
                // A flow whose remainder is a rounding error of its size has ended.
                if left[a] > flows[net[a]].bytes * 1e-9 {
                    still.push(a);
                }
            }
            active = still;
        }
        intra.max(now)
    }

    /// Total seconds of a sequence of phases.
    pub fn time(&self, phases: &[Vec<Flow>]) -> f64 {
        phases.iter().map(|p| self.phase_time(p)).sum()
    }

    /// How many of a phase's flows cross each directed link, by
    /// [`FatTree::link_index`]. Flows of no bytes and flows inside a node count nowhere.
    pub fn link_loads(&self, flows: &[Flow]) -> Vec<usize> {
        let mut load = vec![0usize; self.caps.len()];
        for f in flows.iter().filter(|f| f.bytes > 0.0) {
            for l in self.links_of(f) {
                load[l] += 1;
            }
        }
        load
    }

    /// The most flows of one phase on one switch link (leaf→root or root→leaf): 0 when no
    /// flow leaves its leaf, 1 when no switch link is shared, more on a hot spot. Node
    /// links are left out: routing cannot change what they carry (in a 2-level ring phase
    /// each node sends one flow and receives one).
    pub fn max_switch_link_load(&self, flows: &[Flow]) -> usize {
        self.link_loads(flows)
            .iter()
            .enumerate()
            .filter(|&(i, _)| !self.tree.is_node_link(i))
            .map(|(_, &c)| c)
            .max()
            .unwrap_or(0)
    }
}

impl Simulator<'_> {
    /// The 2-level ring *out of step*: no lock-step phases. Node `ring[i]` enters phase 1
    /// at `start[i]` seconds and phase t + 1 as soon as its phase-t send (to `i + t`) and
    /// receive (from `i - t`) are both done; a send flows once its receiver has entered
    /// the same phase (it posts its receives then; 1 MiB blocks go by rendezvous). Flows of
    /// different phases overlap and share links max-min fairly, re-shared at every flow's
    /// end. Returns when the last node finishes. With equal starts and no shared link this
    /// is the lock-step time; with skewed starts it shows what the per-shift plan is
    /// worth when the nodes are not in the same shift.
    pub fn two_level_ring_out_of_step(
        &self,
        ring: &[usize],
        ppn: usize,
        msg: f64,
        start: &[f64],
    ) -> f64 {
        let n = ring.len();
        assert_eq!(start.len(), n, "one start time per node");
        if n < 2 {
            return start.iter().copied().fold(0.0, f64::max);
        }
        let bytes = (ppn * ppn) as f64 * msg;
        // phase[i]: 0 = not started, 1..n-1 = in that phase, n = done.
        let mut phase = vec![0usize; n];
        let mut sent = vec![false; n];
        let mut got = vec![false; n];
        // Active flows: (source position, bytes left, links).
        let mut active: Vec<(usize, f64, Vec<usize>)> = Vec::new();
        let mut started = vec![false; n];
        let mut now = 0.0f64;
        let mut finish = 0.0f64;
        loop {
            // Nodes whose start time has come.
            for i in 0..n {
                if phase[i] == 0 && start[i] <= now {
                    phase[i] = 1;
                }
            }
            // Start every send whose two ends are in its phase.
            for i in 0..n {
                let t = phase[i];
                if (1..n).contains(&t) && !sent[i] && !started[i] && phase[(i + t) % n] == t {
                    started[i] = true;
                    let f = Flow {
                        src: ring[i],
                        dst: ring[(i + t) % n],
                        bytes,
                    };
                    active.push((i, bytes, self.links_of(&f)));
                }
            }
            if phase.iter().all(|&p| p == n) {
                return finish;
            }
            let links: Vec<Vec<usize>> = active.iter().map(|a| a.2.clone()).collect();
            let rate = max_min_rates(&self.caps, &links);
            let mut step = active
                .iter()
                .zip(&rate)
                .map(|(a, &r)| a.1 / r)
                .fold(f64::INFINITY, f64::min);
            if let Some(next) = start.iter().copied().filter(|&s| s > now).reduce(f64::min) {
                step = step.min(next - now);
            }
            assert!(step.is_finite(), "out-of-step ring stalled");
            now += step;
            let mut still = Vec::with_capacity(active.len());
            for ((i, left, l), r) in active.drain(..).zip(&rate) {
                let left = left - r * step;
                if left > bytes * 1e-9 {
                    still.push((i, left, l));
                } else {
                    let t = phase[i];
                    sent[i] = true;
                    started[i] = false;
                    got[(i + t) % n] = true;
                }
            }
            active = still;
            // Nodes done with their phase move on.
            for i in 0..n {
                if (1..n).contains(&phase[i]) && sent[i] && got[i] {
                    phase[i] += 1;
                    sent[i] = false;
                    got[i] = false;
                    if phase[i] == n {
                        finish = finish.max(now);
                    }
                }
            }
        }
    }
}

/// The phases of Tsunagi's 2-level ring all-to-all (`collectives/src/alltoall.rs`,
/// `two_level_phases`) for nodes `ring` (in the order of the ring: the order in which the
/// job's ranks first appear on each node), `ppn` processes per node, `msg` bytes per
/// process pair. Phase t: every node i sends to node i + t all of its ranks' blocks for
/// that node's ranks at once (ppn² blocks; the rotation over core pairs only orders the
/// posts). Phase 0 is the intra-node exchange.
pub fn two_level_ring_phases(ring: &[usize], ppn: usize, msg: f64) -> Vec<Vec<Flow>> {
    let n = ring.len();
    (0..n)
        .map(|t| {
            (0..n)
                .map(|i| Flow {
                    src: ring[i],
                    dst: ring[(i + t) % n],
                    bytes: (ppn * ppn) as f64 * msg,
                })
                .collect()
        })
        .collect()
}

/// The phases of the plain ring (pairwise shift over ranks: in phase s rank r sends to
/// rank r + s), ranks placed `ppn` per node in ring order (ranks i·ppn .. (i+1)·ppn − 1 on
/// `ring[i]`). A node's ranks may talk to two nodes in one phase; the flows of one node
/// pair are merged.
pub fn plain_ring_phases(ring: &[usize], ppn: usize, msg: f64) -> Vec<Vec<Flow>> {
    let p = ring.len() * ppn;
    (0..p)
        .map(|s| {
            let mut flows: Vec<Flow> = Vec::new();
            for r in 0..p {
                let (src, dst) = (ring[r / ppn], ring[((r + s) % p) / ppn]);
                match flows.iter_mut().find(|f| f.src == src && f.dst == dst) {
                    Some(f) => f.bytes += msg,
                    None => flows.push(Flow {
                        src,
                        dst,
                        bytes: msg,
                    }),
                }
            }
            flows
        })
        .collect()
}

/// The paper's all-to-all bandwidth (figure 7), in bytes per second: the inter-node bytes
/// one node sends, `msg · (nodes − 1) · ppn²`, over the elapsed time.
pub fn alltoall_bandwidth(msg: f64, nodes: usize, ppn: usize, seconds: f64) -> f64 {
    msg * (nodes.saturating_sub(1) * ppn * ppn) as f64 / seconds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Link;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn max_min_by_hand() {
        // Links: 0 (cap 10), 1 (cap 4). Flow A on 0 and 1, B on 0, C on 1.
        // Link 1: 4 / 2 = 2 for A and C; link 0: 10 - 2 = 8 left for B.
        let r = max_min_rates(&[10.0, 4.0], &[vec![0, 1], vec![0], vec![1]]);
        assert!(
            close(r[0], 2.0) && close(r[1], 8.0) && close(r[2], 2.0),
            "{r:?}"
        );
        // Three flows on one link split it evenly; a flow on no link is unbounded.
        let r = max_min_rates(&[9.0], &[vec![0], vec![0], vec![0], vec![]]);
        assert!(r[..3].iter().all(|&x| close(x, 3.0)) && r[3].is_infinite());
    }

    #[test]
    fn shared_up_link_halves_the_phase() {
        // 3-ary-2-tree, paper figure 2: 3 -> 6 and 5 -> 9 through root 0 share the
        // up-link leaf 1 -> root 0.
        let t = FatTree::full(3).unwrap();
        let single = |_s: usize, d: usize| t.single_lid_root(d);
        let sim = Simulator::new(t, Rates::uniform(100.0), Sharing::Static, &single);
        let flows = [
            Flow {
                src: 3,
                dst: 6,
                bytes: 1000.0,
            },
            Flow {
                src: 5,
                dst: 9,
                bytes: 1000.0,
            },
        ];
        assert!(close(sim.phase_time(&flows), 20.0));
        // Through roots 0 and 2: no shared link, 10 s.
        let planned = |s: usize, _d: usize| if s == 3 { 0 } else { 2 };
        let sim = Simulator::new(t, Rates::uniform(100.0), Sharing::Static, &planned);
        assert!(close(sim.phase_time(&flows), 10.0));
    }

    #[test]
    fn switch_link_loads_by_hand() {
        // Figure 2 again: one LID puts 3 -> 6 and 5 -> 9 on leaf 1 -> root 0 (load 2) and
        // then on root 0 -> leaves 2 and 3 (load 1 each); node links never count.
        let t = FatTree::full(3).unwrap();
        let single = |_s: usize, d: usize| t.single_lid_root(d);
        let sim = Simulator::new(t, Rates::uniform(100.0), Sharing::Static, &single);
        let flow = |src, dst| Flow {
            src,
            dst,
            bytes: 1.0,
        };
        let flows = [flow(3, 6), flow(5, 9), flow(4, 4), flow(0, 1)];
        let load = sim.link_loads(&flows);
        assert_eq!(load[t.link_index(Link::Up { leaf: 1, root: 0 })], 2);
        assert_eq!(load[t.link_index(Link::Down { root: 0, leaf: 2 })], 1);
        assert_eq!(load[t.link_index(Link::Down { root: 0, leaf: 3 })], 1);
        assert_eq!(load[t.link_index(Link::NodeUp(0))], 1);
        assert_eq!(load[t.link_index(Link::NodeUp(4))], 0, "inside a node");
        assert_eq!(load.iter().sum::<usize>(), 4 + 4 + 2);
        assert_eq!(sim.max_switch_link_load(&flows), 2);
        // Same-leaf traffic and empty flows load no switch link.
        assert_eq!(sim.max_switch_link_load(&[flow(0, 1), flow(1, 2)]), 0);
        let empty = Flow {
            bytes: 0.0,
            ..flow(3, 6)
        };
        assert_eq!(sim.max_switch_link_load(&[empty, flow(5, 9)]), 1);
    }

    #[test]
    fn static_and_fluid_by_hand() {
        // Link rate 100. A: 0 -> 3 (1000 B) and B: 1 -> 4 (500 B) both through root 0
        // share leaf 0 -> root 0: 50 each. Static: A takes 1000 / 50 = 20 s. Fluid: B ends
        // at 10 s, A has 500 B left at the full 100: 15 s.
        let t = FatTree::full(3).unwrap();
        let root0 = |_: usize, _: usize| 0;
        let flows = [
            Flow {
                src: 0,
                dst: 3,
                bytes: 1000.0,
            },
            Flow {
                src: 1,
                dst: 4,
                bytes: 500.0,
            },
        ];
        let s = Simulator::new(t, Rates::uniform(100.0), Sharing::Static, &root0);
        assert!(close(s.phase_time(&flows), 20.0));
        let f = Simulator::new(t, Rates::uniform(100.0), Sharing::Fluid, &root0);
        assert!(close(f.phase_time(&flows), 15.0));
        // Intra-node traffic: free, or at the given rate, overlapping the network.
        let flows = [
            Flow {
                src: 0,
                dst: 0,
                bytes: 4000.0,
            },
            Flow {
                src: 0,
                dst: 3,
                bytes: 1000.0,
            },
        ];
        assert!(close(s.phase_time(&flows), 10.0));
        let rates = Rates {
            intra: Some(200.0),
            ..Rates::uniform(100.0)
        };
        let s = Simulator::new(t, rates, Sharing::Static, &root0);
        assert!(close(s.phase_time(&flows), 20.0));
    }

    #[test]
    fn nic_and_switch_links_have_their_own_rates() {
        // Two nodes of leaf 0 send to two nodes of leaf 1 through root 0: the switch link
        // (150) is shared, 75 each; each NIC (100) alone would allow 100.
        let t = FatTree::full(3).unwrap();
        let root0 = |_: usize, _: usize| 0;
        let rates = Rates {
            nic: 100.0,
            link: 150.0,
            intra: None,
        };
        let s = Simulator::new(t, rates, Sharing::Static, &root0);
        let flows = [
            Flow {
                src: 0,
                dst: 3,
                bytes: 750.0,
            },
            Flow {
                src: 1,
                dst: 4,
                bytes: 750.0,
            },
        ];
        assert!(close(s.phase_time(&flows), 10.0));
        assert_eq!(s.rates_of(&flows), vec![75.0, 75.0]);
    }

    #[test]
    fn equal_flows_shortcut_matches_progressive_filling() {
        // Every phase of the 2-level ring over scattered nodes, with roots that collide.
        let t = FatTree::new(4, 5).unwrap();
        let ring = [0, 1, 2, 5, 6, 9, 13, 14, 15, 19, 17];
        let root = |s: usize, d: usize| (s * 7 + d) % 3;
        for sharing in [Sharing::Static, Sharing::Fluid] {
            let sim = Simulator::new(t, Rates::uniform(1e9), sharing, &root);
            for phase in two_level_ring_phases(&ring, 3, 1e6) {
                let links: Vec<Vec<usize>> = phase.iter().map(|f| sim.links_of(f)).collect();
                let net: Vec<usize> = (0..phase.len()).filter(|&i| !links[i].is_empty()).collect();
                let general = sim.general_phase_time(&phase, &links, &net, 0.0);
                assert!(close(sim.phase_time(&phase), general));
            }
        }
    }

    #[test]
    fn out_of_step_by_hand() {
        // Ring of nodes 0, 3, 6 (three leaves), 1 process each, 1000 B, rate 100. Node 3
        // starts at 5 s. Phase 1: 0 -> 3 waits for node 3 (5..15); 3 -> 6 runs 5..15;
        // 6 -> 0 runs 0..10. Node 0 is done with phase 1 at 15 (its send), node 6 at 15
        // (its receive from 3), node 3 at 15. Phase 2 (0 -> 6, 3 -> 0, 6 -> 3): 15..25.
        let t = FatTree::full(3).unwrap();
        let root = |s: usize, _: usize| s % 3;
        let sim = Simulator::new(t, Rates::uniform(100.0), Sharing::Fluid, &root);
        let end = sim.two_level_ring_out_of_step(&[0, 3, 6], 1, 1000.0, &[0.0, 5.0, 0.0]);
        assert!(close(end, 25.0), "{end}");
        // Two flows of different phases meeting on one link share it: everything through
        // root 0 with 4 nodes on two leaves.
        let root0 = |_: usize, _: usize| 0;
        let sim = Simulator::new(t, Rates::uniform(100.0), Sharing::Fluid, &root0);
        let lock = sim.time(&two_level_ring_phases(&[0, 1, 3, 4], 1, 1000.0));
        let free = sim.two_level_ring_out_of_step(&[0, 1, 3, 4], 1, 1000.0, &[0.0; 4]);
        assert!(close(lock, free), "{lock} {free}");
    }

    #[test]
    fn ring_phases_by_hand() {
        let two = two_level_ring_phases(&[7, 2, 5], 2, 10.0);
        assert_eq!(two.len(), 3);
        assert_eq!(
            two[1],
            vec![
                Flow {
                    src: 7,
                    dst: 2,
                    bytes: 40.0
                },
                Flow {
                    src: 2,
                    dst: 5,
                    bytes: 40.0
                },
                Flow {
                    src: 5,
                    dst: 7,
                    bytes: 40.0
                }
            ]
        );
        // Plain ring, 2 nodes x 2 ranks, shift 1: ranks 0->1 (node 7 -> 7), 1->2
        // (7 -> 2), 2->3 (2 -> 2), 3->0 (2 -> 7).
        let plain = plain_ring_phases(&[7, 2], 2, 10.0);
        assert_eq!(plain.len(), 4);
        assert_eq!(
            plain[1],
            vec![
                Flow {
                    src: 7,
                    dst: 7,
                    bytes: 10.0
                },
                Flow {
                    src: 7,
                    dst: 2,
                    bytes: 10.0
                },
                Flow {
                    src: 2,
                    dst: 2,
                    bytes: 10.0
                },
                Flow {
                    src: 2,
                    dst: 7,
                    bytes: 10.0
                }
            ]
        );
        assert_eq!(alltoall_bandwidth(10.0, 3, 2, 2.0), 40.0);
    }
}
