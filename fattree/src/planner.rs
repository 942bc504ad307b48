//! The LID planner of seed 003 (Naruse et al., §4.2): which of a destination's K LIDs,
//! that is which root switch, each (source node, destination node) connection uses, so
//! that in every phase of a shift-pattern all-to-all no two inter-leaf flows share a
//! leaf→root or a root→leaf link.
//!
//! The six steps of the paper, as implemented here:
//! 1. *Local node ids.* The job's nodes are numbered leaf by leaf, leaves holding more of
//!    the job's nodes first (ties: lower leaf id first; inside a leaf: the order given).
//!    [`Numbering::AsGiven`] skips this step and keeps the caller's order.
//! 2. *Initial table* `rs(s, d) = s mod K`: the nodes of one leaf have consecutive ids, so
//!    their flows start on distinct roots and no leaf→root link is shared.
//! 3. *By shift distance*: `conv(s, sd) = rs(s, (s + sd) mod N)`; in phase `sd` of the
//!    all-to-all every node `s` sends to `s + sd`, so one column of `conv` is one phase.
//! 4. *Per shift, greedily*: the flows of the column are taken in order of `s`; each keeps
//!    its initial root if that root's links are still free in this phase, else takes the
//!    next root (cyclically) whose leaf→root link from the source leaf and root→leaf link
//!    to the destination leaf are both free. No search, no backtracking: O(N·N·K).
//!    The paper gives no proof that the greedy never gets stuck (it checked 18 nodes on a
//!    3-ary-2-tree). Here, when no root is free for a flow, one Kempe-chain exchange makes
//!    one free (König's edge-colouring argument: each phase is a bipartite multigraph of
//!    source leaves and destination leaves with degree ≤ K, which is always K-colourable).
//!    The exchange flips two roots along one alternating path, touching no earlier choice
//!    otherwise; [`PlanStats::greedy_stuck`] counts how often it was needed (never on
//!    the paper's 16-of-30 allocations, a few times on other sizes: docs/fattree.md).
//! 5. *Back to* `rs(s, d)`. 6. *Roots to LIDs*: root j is the destination's LID j (its
//!    base LID + j with an LMC of [`crate::topology::lmc_for`]`(K)`).
//!
//! Pairs on one leaf never cross a root; their entry stays the initial `s mod K` (any LID
//! of the destination reaches it the same way).
//!
//! Every process of a job computes the same plan from the same inputs, without
//! communication: the plan is a pure function of K and the leaf of each job node.

use crate::topology::{FabricError, FatTree};

/// How the job's nodes are numbered before planning (step 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numbering {
    /// The paper's step 1: leaf by leaf, fuller leaves first.
    LeafByLeaf,
    /// The order given (the job's own rank order); the up-links are then not free by
    /// construction and the greedy has more to do.
    AsGiven,
}

/// What the greedy did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Inter-leaf flows planned (one per source node and shift whose ends are on two
    /// leaves).
    pub flows: usize,
    /// Flows whose root differs from the initial `s mod K`.
    pub changed: usize,
    /// Flows for which no root was free and a Kempe-chain exchange was needed.
    pub greedy_stuck: usize,
}

/// The planned root (= LID index) of every connection of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    k: usize,
    /// Local id → job index.
    order: Vec<usize>,
    /// Job index → local id.
    local: Vec<usize>,
    /// Local id → compact leaf number.
    leaf: Vec<usize>,
    /// `root[s * n + d]` by local ids.
    root: Vec<u16>,
    stats: PlanStats,
}

impl Plan {
    /// The paper's plan for a job whose node `i` (job index, e.g. in hostfile order) sits
    /// on leaf `leaf_of[i]` of a fabric with `roots` root switches.
    pub fn new(roots: usize, leaf_of: &[usize]) -> Result<Plan, FabricError> {
        Self::with_numbering(roots, leaf_of, Numbering::LeafByLeaf)
    }

    /// The plan for a job on nodes `alloc` (fabric node ids, in the job's order) of
    /// `tree`: [`Plan::new`] with the leaves looked up, after checking that every node is
    /// in the fabric and listed once. Job index `i` of the plan is `alloc[i]`.
    pub fn for_allocation(tree: &FatTree, alloc: &[usize]) -> Result<Plan, FabricError> {
        tree.check_allocation(alloc)?;
        let leaf_of: Vec<usize> = alloc.iter().map(|&g| tree.leaf_of(g)).collect();
        Self::new(tree.roots(), &leaf_of)
    }

    /// As [`Plan::new`], with a choice of step 1.
    pub fn with_numbering(
        roots: usize,
        leaf_of: &[usize],
        numbering: Numbering,
    ) -> Result<Plan, FabricError> {
        let k = roots;
        if k == 0 || k > crate::topology::FatTree::MAX_K {
            return Err(FabricError(format!(
                "roots = {k}: between 1 and {} root switches",
                crate::topology::FatTree::MAX_K
            )));
        }
        let n = leaf_of.len();
        // Compact leaf numbers, and the job's node count per leaf.
        let mut leaves: Vec<usize> = leaf_of.to_vec();
        leaves.sort_unstable();
        leaves.dedup();
        let compact = |l: usize| leaves.binary_search(&l).expect("leaf listed");
        let mut count = vec![0usize; leaves.len()];
        for &l in leaf_of {
            count[compact(l)] += 1;
        }
        if let Some(c) = count.iter().position(|&c| c > k) {
            return Err(FabricError(format!(
                "leaf {} holds {} of the job's nodes, but a leaf has only {k} node ports",
                leaves[c], count[c]
            )));
        }
        // Step 1.
        let mut order: Vec<usize> = (0..n).collect();
        if numbering == Numbering::LeafByLeaf {
            // Stable: inside a leaf, the given order.
            order.sort_by_key(|&i| {
                let c = compact(leaf_of[i]);
                (std::cmp::Reverse(count[c]), c)
            });
        }
        let mut local = vec![0; n];
        for (s, &i) in order.iter().enumerate() {
            local[i] = s;
        }
        let leaf: Vec<usize> = order.iter().map(|&i| compact(leaf_of[i])).collect();
        // Step 2 (and the entries step 4 leaves alone).
        let mut root: Vec<u16> = (0..n * n).map(|x| ((x / n.max(1)) % k) as u16).collect();
        // Steps 3-5, one shift at a time.
        let mut stats = PlanStats::default();
        let mut phase = Phase::new(leaves.len(), k);
        for sd in 1..n {
            phase.clear();
            for s in 0..n {
                let d = (s + sd) % n;
                if leaf[s] == leaf[d] {
                    continue;
                }
                stats.flows += 1;
                let (u, v) = (leaf[s], leaf[d]);
                let first = s % k;
                let r = (0..k)
                    .map(|j| (first + j) % k)
                    .find(|&r| phase.free(u, v, r))
                    .unwrap_or_else(|| {
                        stats.greedy_stuck += 1;
                        phase.kempe_exchange(u, v, |f| leaf[(f + sd) % n], |f| leaf[f])
                    });
                phase.assign(s, u, v, r);
            }
            for s in 0..n {
                let d = (s + sd) % n;
                if leaf[s] != leaf[d] {
                    let r = phase.root_of[s].expect("planned");
                    if r as usize != s % k {
                        stats.changed += 1;
                    }
                    root[s * n + d] = r;
                }
            }
        }
        Ok(Plan {
            k,
            order,
            local,
            leaf,
            root,
            stats,
        })
    }

    /// Number of root switches (LIDs per node).
    pub fn roots(&self) -> usize {
        self.k
    }

    /// Number of the job's nodes.
    pub fn nodes(&self) -> usize {
        self.order.len()
    }

    /// The job's nodes (job indices) in local-id order. The plan avoids conflicts for the
    /// shift pattern *in this order*: an all-to-all must run its ring over the nodes in
    /// this order (rank the nodes this way, or run the collective on a communicator whose
    /// node order is this).
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The local id of job node `i`.
    pub fn local_id(&self, i: usize) -> usize {
        self.local[i]
    }

    /// The root (LID index) for local ids `s` → `d`.
    pub fn root_by_local(&self, s: usize, d: usize) -> usize {
        self.root[s * self.order.len() + d] as usize
    }

    /// Whether local ids `s` and `d` share a leaf.
    pub fn same_leaf_by_local(&self, s: usize, d: usize) -> bool {
        self.leaf[s] == self.leaf[d]
    }

    /// The LID index that job node `me` uses to reach job node `peer` (the LID to put in
    /// the connection is the peer's base LID plus this index).
    pub fn lid_index(&self, me: usize, peer: usize) -> Result<usize, FabricError> {
        let n = self.order.len();
        for (what, i) in [("me", me), ("peer", peer)] {
            if i >= n {
                return Err(FabricError(format!(
                    "lid_index: {what} = {i} is not a node of this job of {n} nodes"
                )));
            }
        }
        Ok(self.root_by_local(self.local[me], self.local[peer]))
    }

    /// What the greedy did.
    pub fn stats(&self) -> PlanStats {
        self.stats
    }

    /// Every connection of job node `me` at once: entry `peer` is the LID index `me` uses
    /// to reach job node `peer` ([`Plan::lid_index`]), `None` for `me` itself (a node
    /// does not reach itself over the fabric).
    pub fn lid_indices_from(&self, me: usize) -> Result<Vec<Option<usize>>, FabricError> {
        let n = self.order.len();
        if me >= n {
            return Err(FabricError(format!(
                "lid_indices_from: me = {me} is not a node of this job of {n} nodes"
            )));
        }
        let s = self.local[me];
        Ok((0..n)
            .map(|peer| (peer != me).then(|| self.root_by_local(s, self.local[peer])))
            .collect())
    }
}

/// What a transport calls at start-up, from what it knows: the fabric, the job's nodes
/// (`alloc[i]` = fabric node id of job node `i`, in the job's order) and which of them it
/// is (`me`, a job index). Entry `peer` of the result is the index of the LID of job node
/// `peer` to address (the peer's base LID + index, [`crate::topology::lid`]; for a
/// transport whose "LIDs" are UDP ports or IP aliases, the peer's address number `index`),
/// `None` for `me`. Every node computes the same plan with no communication, so the two
/// ends of a connection agree on the route of each direction.
///
/// The all-to-all is conflict-free when its ring runs over the nodes in
/// [`Plan::order`]; a transport that must keep the job's order plans with
/// [`Numbering::AsGiven`] instead (also conflict-free, [`Plan::with_numbering`]).
pub fn connection_lid_indices(
    tree: &FatTree,
    alloc: &[usize],
    me: usize,
) -> Result<Vec<Option<usize>>, FabricError> {
    Plan::for_allocation(tree, alloc)?.lid_indices_from(me)
}

/// The transport's one-call entry: in a job whose node `i` sits on leaf `leaf_of[i]` of a
/// fabric with `roots` root switches, the index of the LID of `peer` that node `me`
/// addresses (the peer's base LID + this index). Builds the whole plan, O(N²·K); a
/// transport making many connections builds one [`Plan`] at start-up and asks it.
pub fn destination_lid_index(
    roots: usize,
    leaf_of: &[usize],
    me: usize,
    peer: usize,
) -> Result<usize, FabricError> {
    Plan::new(roots, leaf_of)?.lid_index(me, peer)
}

/// Link occupancy of one phase: which flow (by source local id) holds each leaf→root and
/// root→leaf link.
struct Phase {
    k: usize,
    /// `up[leaf * k + root]`.
    up: Vec<Option<usize>>,
    /// `down[leaf * k + root]` (root → leaf).
    down: Vec<Option<usize>>,
    /// Source local id → its root in this phase.
    root_of: Vec<Option<u16>>,
}

impl Phase {
    fn new(leaves: usize, k: usize) -> Self {
        Phase {
            k,
            up: vec![None; leaves * k],
            down: vec![None; leaves * k],
            root_of: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.up.iter_mut().for_each(|x| *x = None);
        self.down.iter_mut().for_each(|x| *x = None);
        self.root_of.clear();
    }

    fn free(&self, u: usize, v: usize, r: usize) -> bool {
        self.up[u * self.k + r].is_none() && self.down[v * self.k + r].is_none()
    }

    fn assign(&mut self, s: usize, u: usize, v: usize, r: usize) {
        self.up[u * self.k + r] = Some(s);
        self.down[v * self.k + r] = Some(s);
        if self.root_of.len() <= s {
            self.root_of.resize(s + 1, None);
        }
        self.root_of[s] = Some(r as u16);
    }

    /// A root for a new flow from source leaf `u` to destination leaf `v` when none is
    /// free at both ends: take `a` free on `u`'s up-links and `b` free on `v`'s
    /// down-links (both exist: a leaf has at most K of the job's nodes, so at most K
    /// flows leave or enter it per phase, this one included). Flip a and b along the
    /// path that starts at `v` with its a-flow and alternates a, b; the path never
    /// reaches `u` (left vertices are entered by a-flows, and `u` has none), so
    /// afterwards `a` is free at both ends.
    fn kempe_exchange(
        &mut self,
        u: usize,
        v: usize,
        dst_leaf: impl Fn(usize) -> usize,
        src_leaf: impl Fn(usize) -> usize,
    ) -> usize {
        let k = self.k;
        let a = (0..k)
            .find(|&r| self.up[u * k + r].is_none())
            .expect("a leaf sends at most K flows per phase");
        let b = (0..k)
            .find(|&r| self.down[v * k + r].is_none())
            .expect("a leaf receives at most K flows per phase");
        // Both free at `v`'s end already: nothing to flip (the caller found no root free
        // at both ends, so this does not happen, but it costs nothing to be exact).
        if self.down[v * k + a].is_none() {
            return a;
        }
        let mut path = Vec::new();
        let mut right = v;
        while let Some(f) = self.down[right * k + a] {
            path.push(f);
            let Some(g) = self.up[src_leaf(f) * k + b] else {
                break;
            };
            path.push(g);
            right = dst_leaf(g);
        }
        for &f in &path {
            let r = self.root_of[f].expect("assigned") as usize;
            self.up[src_leaf(f) * k + r] = None;
            self.down[dst_leaf(f) * k + r] = None;
        }
        for &f in &path {
            let r = self.root_of[f].expect("assigned") as usize;
            let flipped = if r == a { b } else { a };
            self.assign(f, src_leaf(f), dst_leaf(f), flipped);
        }
        debug_assert!(self.free(u, v, a));
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_puts_fuller_leaves_first() {
        // Leaves 3 (one node), 1 (three nodes), 4 (three nodes), 1 again.
        let leaf_of = [3, 1, 4, 1, 4, 4, 1];
        let p = Plan::new(6, &leaf_of).unwrap();
        assert_eq!(p.order(), &[1, 3, 6, 2, 4, 5, 0]);
        assert_eq!(p.local_id(0), 6);
        let given = Plan::with_numbering(6, &leaf_of, Numbering::AsGiven).unwrap();
        assert_eq!(given.order(), &[0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn rejects_overfull_leaves_and_bad_indices() {
        let e = Plan::new(2, &[0, 0, 0]).unwrap_err();
        assert!(e.0.contains("leaf 0 holds 3"), "{e}");
        assert!(Plan::new(0, &[0]).is_err());
        let p = Plan::new(2, &[0, 1]).unwrap();
        assert!(p.lid_index(0, 2).unwrap_err().0.contains("peer = 2"));
        assert!(destination_lid_index(2, &[0, 1], 0, 1).is_ok());
        assert_eq!(Plan::new(3, &[]).unwrap().nodes(), 0);
    }

    #[test]
    fn paper_figure_2_conflict_is_planned_away() {
        // 3-ary-2-tree, nodes 3, 5, 6, 9 (leaves 1, 1, 2, 3). Single LID: in shift 2,
        // 3 -> 6 and 5 -> 9 both climb leaf 1 -> root 0.
        let k = 3;
        let leaf_of = [1, 1, 2, 3];
        let p = Plan::new(k, &leaf_of).unwrap();
        assert_eq!(p.stats().greedy_stuck, 0);
        for sd in 1..4 {
            let mut up = std::collections::HashSet::new();
            let mut down = std::collections::HashSet::new();
            for s in 0..4 {
                let d = (s + sd) % 4;
                if p.same_leaf_by_local(s, d) {
                    continue;
                }
                let r = p.root_by_local(s, d);
                let (ls, ld) = (leaf_of[p.order()[s]], leaf_of[p.order()[d]]);
                assert!(up.insert((ls, r)), "shift {sd}: up-link {ls}->{r} shared");
                assert!(
                    down.insert((r, ld)),
                    "shift {sd}: down-link {r}->{ld} shared"
                );
            }
        }
    }
}
