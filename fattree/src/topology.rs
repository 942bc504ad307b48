//! The fabric: a two-level fat tree (k-ary-2-tree) and InfiniBand's static,
//! destination-based routing on it.
//!
//! `leaves` leaf switches each have `k` node ports and one up-link to each of the `k` root
//! switches. The paper's trees use all 2k ports of a root: 2k leaves, 2k² nodes (its
//! 3-ary-2-tree has 18 nodes); its 30-node cluster is a 6-ary-2-tree with 5 leaves built. Node `g` sits on leaf `g / k`, port
//! `g % k`. Every link is full duplex and modelled as two directed links.
//!
//! Routing is by destination address only: a packet to LID j of a node with K LIDs (LMC)
//! climbs to root j and descends to the destination's leaf; a packet between two nodes of
//! one leaf turns at that leaf and meets no root. With one LID per node, the fat-tree
//! routing of OpenSM (and of the paper, §3) sends traffic for node `g` through root
//! `g mod k`.

use std::fmt;

/// Why a fabric or an allocation was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricError(pub String);

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FabricError {}

/// A two-level fat tree: `k` roots and `leaves` leaf switches; every leaf has `k` node
/// ports and one link to each root. The full tree has 2k leaves (roots of 2k ports);
/// fewer model a partly built one (the paper's 30 nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatTree {
    k: usize,
    leaves: usize,
}

/// One directed link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// Node → its leaf (the node's injection link).
    NodeUp(usize),
    /// Leaf → node.
    NodeDown(usize),
    /// Leaf → root.
    Up { leaf: usize, root: usize },
    /// Root → leaf.
    Down { root: usize, leaf: usize },
}

impl FatTree {
    /// Largest radix accepted (root indices are stored in a `u16`; InfiniBand's LMC caps
    /// the LIDs of one port at 128 anyway).
    pub const MAX_K: usize = 128;

    /// `k` roots, `leaves` leaf switches of `k` node ports each.
    pub fn new(k: usize, leaves: usize) -> Result<Self, FabricError> {
        if k == 0 || k > Self::MAX_K {
            return Err(FabricError(format!(
                "k = {k}: the radix must be between 1 and {}",
                Self::MAX_K
            )));
        }
        if leaves == 0 {
            return Err(FabricError(
                "leaves = 0: a fabric needs a leaf switch".into(),
            ));
        }
        Ok(FatTree { k, leaves })
    }

    /// The full k-ary-2-tree of switches with 2k ports: 2k leaves, 2k² nodes.
    pub fn full(k: usize) -> Result<Self, FabricError> {
        Self::new(k, 2 * k)
    }

    /// The radix: node ports per leaf, number of roots, LIDs per node.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of root switches (= k).
    pub fn roots(&self) -> usize {
        self.k
    }

    /// Number of leaf switches.
    pub fn leaves(&self) -> usize {
        self.leaves
    }

    /// Number of node ports (= nodes of the cluster).
    pub fn nodes(&self) -> usize {
        self.k * self.leaves
    }

    /// The leaf switch of node `g`.
    pub fn leaf_of(&self, g: usize) -> usize {
        g / self.k
    }

    /// Checks that `g` is a node of this fabric.
    pub fn check_node(&self, g: usize) -> Result<(), FabricError> {
        if g < self.nodes() {
            Ok(())
        } else {
            Err(FabricError(format!(
                "node {g} is not in a fabric of {} nodes ({} leaves of {})",
                self.nodes(),
                self.leaves,
                self.k
            )))
        }
    }

    /// Checks a job's allocation: every node in this fabric, none listed twice.
    pub fn check_allocation(&self, alloc: &[usize]) -> Result<(), FabricError> {
        let mut seen = vec![false; self.nodes()];
        for &g in alloc {
            self.check_node(g)?;
            if std::mem::replace(&mut seen[g], true) {
                return Err(FabricError(format!(
                    "node {g} is listed twice in the allocation"
                )));
            }
        }
        Ok(())
    }

    /// The root that carries traffic *to* node `g` when every node has a single LID.
    pub fn single_lid_root(&self, g: usize) -> usize {
        g % self.k
    }

    /// The directed links of a packet from node `src` to node `dst` through `root`
    /// (ignored when both are on one leaf). Empty for `src == dst` (no network).
    pub fn route(&self, src: usize, dst: usize, root: usize) -> Vec<Link> {
        if src == dst {
            return Vec::new();
        }
        let (ls, ld) = (self.leaf_of(src), self.leaf_of(dst));
        if ls == ld {
            vec![Link::NodeUp(src), Link::NodeDown(dst)]
        } else {
            vec![
                Link::NodeUp(src),
                Link::Up { leaf: ls, root },
                Link::Down { root, leaf: ld },
                Link::NodeDown(dst),
            ]
        }
    }

    /// Number of directed links: two per node port, two per leaf–root pair.
    pub fn link_count(&self) -> usize {
        2 * self.nodes() + 2 * self.leaves * self.k
    }

    /// A dense index of a directed link, `0..link_count()`.
    pub fn link_index(&self, l: Link) -> usize {
        let n = self.nodes();
        let lk = self.leaves * self.k;
        match l {
            Link::NodeUp(g) => g,
            Link::NodeDown(g) => n + g,
            Link::Up { leaf, root } => 2 * n + leaf * self.k + root,
            Link::Down { root, leaf } => 2 * n + lk + leaf * self.k + root,
        }
    }

    /// Whether a link index is a node's injection or ejection link (else a switch link).
    pub fn is_node_link(&self, index: usize) -> bool {
        index < 2 * self.nodes()
    }
}

/// The LMC (LID mask control) value that gives a port at least `k` LIDs: LIDs
/// `base .. base + 2^lmc`, with `base` a multiple of `2^lmc`.
pub fn lmc_for(k: usize) -> u8 {
    let mut lmc = 0u8;
    while (1usize << lmc) < k {
        lmc += 1;
    }
    lmc
}

/// The LID to address when the planner chose `index` for a destination whose base LID
/// (the LID of its LMC block) is `base_lid`: the subnet manager routes `base_lid + j`
/// through root j.
pub fn lid(base_lid: u16, index: usize) -> u16 {
    base_lid + index as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_dense_and_distinct() {
        let t = FatTree::new(3, 4).unwrap();
        assert_eq!(FatTree::full(3).unwrap().nodes(), 18);
        let mut seen = vec![false; t.link_count()];
        let mut all = Vec::new();
        for g in 0..t.nodes() {
            all.push(Link::NodeUp(g));
            all.push(Link::NodeDown(g));
        }
        for leaf in 0..t.leaves() {
            for root in 0..t.roots() {
                all.push(Link::Up { leaf, root });
                all.push(Link::Down { root, leaf });
            }
        }
        for l in all {
            let i = t.link_index(l);
            assert!(!seen[i], "{l:?} collides");
            seen[i] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn routes_turn_at_the_leaf_or_cross_the_chosen_root() {
        let t = FatTree::full(3).unwrap();
        assert_eq!(t.route(0, 2, 1), vec![Link::NodeUp(0), Link::NodeDown(2)]);
        assert_eq!(
            t.route(0, 7, 1),
            vec![
                Link::NodeUp(0),
                Link::Up { leaf: 0, root: 1 },
                Link::Down { root: 1, leaf: 2 },
                Link::NodeDown(7)
            ]
        );
        assert!(t.route(4, 4, 0).is_empty());
        // The paper's figure 2: nodes 6 and 9 are both reached through root 0.
        assert_eq!(t.single_lid_root(6), 0);
        assert_eq!(t.single_lid_root(9), 0);
    }

    #[test]
    fn lmc_covers_k_lids() {
        assert_eq!(lmc_for(1), 0);
        assert_eq!(lmc_for(3), 2);
        assert_eq!(lmc_for(6), 3);
        assert_eq!(lmc_for(8), 3);
        assert_eq!(lmc_for(18), 5);
        assert_eq!(lid(0x40, 5), 0x45);
        assert!(FatTree::new(0, 1).is_err());
        assert!(FatTree::new(3, 0).is_err());
        assert!(FatTree::new(3, 2).unwrap().check_node(6).is_err());
        assert!(FatTree::new(3, 2).unwrap().check_node(5).is_ok());
        let t = FatTree::new(3, 2).unwrap();
        assert!(t.check_allocation(&[5, 0, 3]).is_ok());
        assert!(t.check_allocation(&[]).is_ok());
        let e = t.check_allocation(&[1, 4, 1]).unwrap_err();
        assert!(e.0.contains("node 1 is listed twice"), "{e}");
        assert!(t
            .check_allocation(&[1, 6])
            .unwrap_err()
            .0
            .contains("node 6"));
    }
}
