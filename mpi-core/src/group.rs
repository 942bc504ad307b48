//! MPI process groups: ordered sets of world ranks, and the group algebra
//! (`MPI_Group_incl`/`excl`/`range_incl`/`range_excl`/`union`/`intersection`/
//! `difference`/`translate_ranks`/`compare`).
//!
//! A group stores its members' world ranks in group order plus a sorted
//! (world rank, group rank) index, so `rank_of` is a binary search and the set
//! operations are O(n log n) whatever the group sizes. Error classes follow MPICH:
//! bad ranks in `incl`/`excl`/`translate_ranks` are `MPI_ERR_RANK`, any problem with a
//! range triple (zero stride, out of range, not terminating, overlapping) `MPI_ERR_ARG`.

use crate::error::{ErrorClass, MpiError, MpiResult};

/// `MPI_UNDEFINED` (MPICH's value).
pub const UNDEFINED: i32 = -32766;
/// `MPI_PROC_NULL` (MPICH's value).
pub const PROC_NULL: i32 = -1;

/// Result of `MPI_Group_compare` / `MPI_Comm_compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comparison {
    Ident,
    Congruent,
    Similar,
    Unequal,
}

impl Comparison {
    /// MPICH's `MPI_IDENT` (0), `MPI_CONGRUENT` (1), `MPI_SIMILAR` (2), `MPI_UNEQUAL` (3).
    pub fn as_mpich(self) -> i32 {
        match self {
            Comparison::Ident => 0,
            Comparison::Congruent => 1,
            Comparison::Similar => 2,
            Comparison::Unequal => 3,
        }
    }
}

/// An ordered set of distinct world ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    ranks: Vec<u32>,
    /// (world rank, group rank), sorted by world rank: derived from `ranks`, so the
    /// derived equality is equality of `ranks`.
    index: Vec<(u32, u32)>,
}

impl Group {
    /// The group of `world_ranks` in that order. Panics on duplicates (a caller bug: every
    /// public constructor of groups from user input validates first).
    pub fn new(world_ranks: Vec<u32>) -> Group {
        let mut index: Vec<(u32, u32)> = world_ranks
            .iter()
            .enumerate()
            .map(|(g, &w)| (w, g as u32))
            .collect();
        index.sort_unstable();
        assert!(
            index.windows(2).all(|p| p[0].0 != p[1].0),
            "Group::new: duplicate world rank"
        );
        Group {
            ranks: world_ranks,
            index,
        }
    }

    /// `MPI_GROUP_EMPTY`.
    pub fn empty() -> Group {
        Group::new(Vec::new())
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// World rank of group rank `r` (panics if out of range).
    pub fn world_rank(&self, r: usize) -> u32 {
        self.ranks[r]
    }

    /// World ranks in group order.
    pub fn world_ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// Group rank of world rank `world`, if a member.
    pub fn rank_of(&self, world: u32) -> Option<usize> {
        self.index
            .binary_search_by_key(&world, |&(w, _)| w)
            .ok()
            .map(|i| self.index[i].1 as usize)
    }

    fn contains(&self, world: u32) -> bool {
        self.rank_of(world).is_some()
    }

    /// Validate `ranks` as distinct ranks of this group; returns a membership mask.
    fn check_ranks(&self, func: &str, ranks: &[i32]) -> MpiResult<Vec<bool>> {
        let mut seen = vec![false; self.size()];
        for (i, &r) in ranks.iter().enumerate() {
            if r < 0 || r as usize >= self.size() {
                return Err(MpiError::new(
                    ErrorClass::Rank,
                    format!(
                        "{func}: ranks[{i}] = {r} is not a rank of the group (size {})",
                        self.size()
                    ),
                ));
            }
            if std::mem::replace(&mut seen[r as usize], true) {
                return Err(MpiError::new(
                    ErrorClass::Rank,
                    format!("{func}: ranks[{i}] = {r} appears more than once"),
                ));
            }
        }
        Ok(seen)
    }

    /// `MPI_Group_incl`: members `ranks[0]`, `ranks[1]`, ... in that order.
    pub fn incl(&self, ranks: &[i32]) -> MpiResult<Group> {
        self.check_ranks("MPI_Group_incl", ranks)?;
        Ok(Group::new(
            ranks.iter().map(|&r| self.ranks[r as usize]).collect(),
        ))
    }

    /// `MPI_Group_excl`: the members not in `ranks`, in group order.
    pub fn excl(&self, ranks: &[i32]) -> MpiResult<Group> {
        let gone = self.check_ranks("MPI_Group_excl", ranks)?;
        Ok(self.keep(|g| !gone[g]))
    }

    fn keep(&self, mut f: impl FnMut(usize) -> bool) -> Group {
        Group::new(
            self.ranks
                .iter()
                .enumerate()
                .filter(|&(g, _)| f(g))
                .map(|(_, &w)| w)
                .collect(),
        )
    }

    /// Expand range triples (first, last, stride) into ranks, checking each triple and
    /// that no rank is named twice (MPI: the computed ranks must be distinct).
    fn expand_ranges(&self, func: &str, ranges: &[[i32; 3]]) -> MpiResult<Vec<i32>> {
        let n = self.size() as i64;
        let mut out = Vec::new();
        let mut seen = vec![false; self.size()];
        for (i, &[first, last, stride]) in ranges.iter().enumerate() {
            let bad = |why: String| {
                Err(MpiError::new(
                    ErrorClass::Arg,
                    format!("{func}: range {i} ({first}, {last}, {stride}) {why}"),
                ))
            };
            if stride == 0 {
                return bad("has stride 0".into());
            }
            for (what, v) in [("first", first), ("last", last)] {
                if v < 0 || v as i64 >= n {
                    return bad(format!("has {what} rank outside [0, {n})"));
                }
            }
            if (last as i64 - first as i64) / (stride as i64) < 0 {
                return bad("does not terminate".into());
            }
            let mut r = first as i64;
            while (stride > 0 && r <= last as i64) || (stride < 0 && r >= last as i64) {
                if std::mem::replace(&mut seen[r as usize], true) {
                    return bad(format!("names rank {r} again"));
                }
                out.push(r as i32);
                r += stride as i64;
            }
        }
        Ok(out)
    }

    /// `MPI_Group_range_incl`.
    pub fn range_incl(&self, ranges: &[[i32; 3]]) -> MpiResult<Group> {
        let ranks = self.expand_ranges("MPI_Group_range_incl", ranges)?;
        Ok(Group::new(
            ranks.iter().map(|&r| self.ranks[r as usize]).collect(),
        ))
    }

    /// `MPI_Group_range_excl`.
    pub fn range_excl(&self, ranges: &[[i32; 3]]) -> MpiResult<Group> {
        let ranks = self.expand_ranges("MPI_Group_range_excl", ranges)?;
        let mut gone = vec![false; self.size()];
        for r in ranks {
            gone[r as usize] = true;
        }
        Ok(self.keep(|g| !gone[g]))
    }

    /// `MPI_Group_union`: this group's members, then the other's that are not in it.
    pub fn union(&self, other: &Group) -> Group {
        let mut ranks = self.ranks.clone();
        ranks.extend(other.ranks.iter().copied().filter(|&w| !self.contains(w)));
        Group::new(ranks)
    }

    /// `MPI_Group_intersection`: members of both, in this group's order.
    pub fn intersection(&self, other: &Group) -> Group {
        self.keep(|g| other.contains(self.ranks[g]))
    }

    /// `MPI_Group_difference`: members of this group not in `other`, in this group's order.
    pub fn difference(&self, other: &Group) -> Group {
        self.keep(|g| !other.contains(self.ranks[g]))
    }

    /// `MPI_Group_translate_ranks`: for each rank of this group, its rank in `other`,
    /// `UNDEFINED` if not a member there; `PROC_NULL` maps to `PROC_NULL`.
    pub fn translate_ranks(&self, ranks: &[i32], other: &Group) -> MpiResult<Vec<i32>> {
        ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                if r == PROC_NULL {
                    return Ok(PROC_NULL);
                }
                if r < 0 || r as usize >= self.size() {
                    return Err(MpiError::new(
                        ErrorClass::Rank,
                        format!(
                            "MPI_Group_translate_ranks: ranks1[{i}] = {r} is not a rank of \
                             group1 (size {})",
                            self.size()
                        ),
                    ));
                }
                Ok(other
                    .rank_of(self.ranks[r as usize])
                    .map_or(UNDEFINED, |g| g as i32))
            })
            .collect()
    }

    /// `MPI_Group_compare`: `Ident` (same members, same order), `Similar` (same members),
    /// else `Unequal`.
    pub fn compare(&self, other: &Group) -> Comparison {
        if self.ranks == other.ranks {
            Comparison::Ident
        } else if self.size() == other.size()
            && self.index.iter().zip(&other.index).all(|(a, b)| a.0 == b.0)
        {
            Comparison::Similar
        } else {
            Comparison::Unequal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group of world ranks 10, 11, ..., 10+n-1, so group and world ranks differ.
    fn g(n: u32) -> Group {
        Group::new((10..10 + n).collect())
    }

    fn err_class<T: std::fmt::Debug>(r: MpiResult<T>) -> (ErrorClass, String) {
        let e = r.unwrap_err();
        (e.class, e.message)
    }

    #[test]
    fn basics_and_index() {
        let x = Group::new(vec![7, 3, 9]);
        assert_eq!(x.size(), 3);
        assert_eq!(x.world_rank(1), 3);
        assert_eq!(x.world_ranks(), &[7, 3, 9]);
        assert_eq!(x.rank_of(9), Some(2));
        assert_eq!(x.rank_of(7), Some(0));
        assert_eq!(x.rank_of(4), None);
        assert_eq!(Group::empty().size(), 0);
        assert_eq!(Group::empty().rank_of(0), None);
        let big = Group::new((0..100_000).rev().collect());
        assert_eq!(big.rank_of(0), Some(99_999));
    }

    #[test]
    #[should_panic(expected = "duplicate")]
    fn new_refuses_duplicates() {
        Group::new(vec![1, 2, 1]);
    }

    #[test]
    fn incl_and_excl() {
        let w = g(6);
        assert_eq!(w.incl(&[4, 0, 2]).unwrap().world_ranks(), &[14, 10, 12]);
        assert_eq!(w.incl(&[]).unwrap(), Group::empty());
        assert_eq!(w.excl(&[4, 0, 2]).unwrap().world_ranks(), &[11, 13, 15]);
        assert_eq!(w.excl(&[]).unwrap(), w);
        let (c, m) = err_class(w.incl(&[1, 6]));
        assert_eq!(c, ErrorClass::Rank);
        assert!(m.starts_with("MPI_Group_incl: ranks[1] = 6"), "{m}");
        let (c, m) = err_class(w.incl(&[2, -1]));
        assert_eq!(c, ErrorClass::Rank, "{m}");
        let (c, m) = err_class(w.incl(&[2, 3, 2]));
        assert_eq!(c, ErrorClass::Rank);
        assert!(m.contains("more than once"), "{m}");
        let (c, m) = err_class(w.excl(&[0, 0]));
        assert_eq!(c, ErrorClass::Rank);
        assert!(m.starts_with("MPI_Group_excl:"), "{m}");
        assert_eq!(err_class(w.excl(&[9])).0, ErrorClass::Rank);
    }

    #[test]
    fn ranges() {
        let w = g(10);
        let r = w.range_incl(&[[0, 6, 3], [9, 7, -1]]).unwrap();
        assert_eq!(r.world_ranks(), &[10, 13, 16, 19, 18, 17]);
        // MPICH: (0,3,2) -> 2 members, (3,0,-2) -> 2, (0,0,5) -> 1.
        assert_eq!(w.range_incl(&[[0, 3, 2]]).unwrap().world_ranks(), &[10, 12]);
        assert_eq!(
            w.range_incl(&[[3, 0, -2]]).unwrap().world_ranks(),
            &[13, 11]
        );
        assert_eq!(w.range_incl(&[[0, 0, 5]]).unwrap().size(), 1);
        let e = w.range_excl(&[[0, 6, 3], [9, 7, -1]]).unwrap();
        assert_eq!(e.world_ranks(), &[11, 12, 14, 15]);
        assert_eq!(w.range_incl(&[]).unwrap(), Group::empty());
        for bad in [[0, 3, 0], [3, 1, 1], [1, 3, -1], [0, 10, 1], [-1, 2, 1]] {
            let (c, m) = err_class(w.range_incl(&[bad]));
            assert_eq!(c, ErrorClass::Arg, "{bad:?}: {m}");
            assert!(m.starts_with("MPI_Group_range_incl: range 0"), "{m}");
            let (c, m) = err_class(w.range_excl(&[bad]));
            assert_eq!(c, ErrorClass::Arg, "{bad:?}: {m}");
            assert!(m.starts_with("MPI_Group_range_excl:"), "{m}");
        }
        // Overlapping ranges name a rank twice.
        let (c, m) = err_class(w.range_incl(&[[0, 2, 1], [2, 3, 1]]));
        assert_eq!(c, ErrorClass::Arg);
        assert!(m.contains("range 1") && m.contains("rank 2 again"), "{m}");
    }

    #[test]
    fn set_operations_keep_mpi_order() {
        let a = Group::new(vec![5, 1, 3, 7]);
        let b = Group::new(vec![7, 2, 5, 8]);
        assert_eq!(a.union(&b).world_ranks(), &[5, 1, 3, 7, 2, 8]);
        assert_eq!(a.intersection(&b).world_ranks(), &[5, 7]);
        assert_eq!(b.intersection(&a).world_ranks(), &[7, 5]);
        assert_eq!(a.difference(&b).world_ranks(), &[1, 3]);
        assert_eq!(a.union(&Group::empty()), a);
        assert_eq!(a.intersection(&Group::empty()), Group::empty());
        assert_eq!(a.difference(&a), Group::empty());
    }

    #[test]
    fn translate() {
        let a = Group::new(vec![5, 1, 3, 7]);
        let b = Group::new(vec![7, 2, 5]);
        assert_eq!(
            a.translate_ranks(&[0, 1, 3, PROC_NULL], &b).unwrap(),
            vec![2, UNDEFINED, 0, PROC_NULL]
        );
        assert_eq!(a.translate_ranks(&[], &b).unwrap(), Vec::<i32>::new());
        let (c, m) = err_class(a.translate_ranks(&[0, 4], &b));
        assert_eq!(c, ErrorClass::Rank);
        assert!(
            m.starts_with("MPI_Group_translate_ranks: ranks1[1] = 4"),
            "{m}"
        );
        assert_eq!(err_class(a.translate_ranks(&[-2], &b)).0, ErrorClass::Rank);
    }

    #[test]
    fn compare() {
        let a = Group::new(vec![5, 1, 3]);
        assert_eq!(a.compare(&a.clone()), Comparison::Ident);
        assert_eq!(a.compare(&Group::new(vec![3, 5, 1])), Comparison::Similar);
        assert_eq!(a.compare(&Group::new(vec![3, 5])), Comparison::Unequal);
        assert_eq!(a.compare(&Group::new(vec![3, 5, 2])), Comparison::Unequal);
        assert_eq!(Group::empty().compare(&Group::empty()), Comparison::Ident);
        let vals: Vec<i32> = [
            Comparison::Ident,
            Comparison::Congruent,
            Comparison::Similar,
            Comparison::Unequal,
        ]
        .iter()
        .map(|c| c.as_mpich())
        .collect();
        assert_eq!(vals, vec![0, 1, 2, 3]);
    }
}
