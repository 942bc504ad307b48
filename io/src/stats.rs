//! Counts of the routes collective accesses took in this process, for the MPI tool
//! interface (the C layer exposes them as MPI_T performance variables in the category
//! `tsunagi_io`): a tool or the program can see whether its `MPI_File_*_all` calls went
//! through the aggregators or straight to the file, without `TSUNAGI_IO_TRACE`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::twophase::Route;

/// A collective access's direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// One counter per direction and route family.
pub struct RouteCounts {
    /// Two-phase I/O through the aggregators.
    pub two_phase: AtomicU64,
    /// Each rank straight to the file (large pieces, disjoint ranges, collective buffering
    /// disabled, nothing to access): no data exchanged.
    pub independent: AtomicU64,
    /// Of the two-phase ones: every rank through the file's pages on one node (module
    /// `mapped`), with no aggregator.
    pub mapped: AtomicU64,
}

impl RouteCounts {
    const fn new() -> RouteCounts {
        RouteCounts {
            two_phase: AtomicU64::new(0),
            independent: AtomicU64::new(0),
            mapped: AtomicU64::new(0),
        }
    }
}

/// Collective reads, by route.
pub static READS: RouteCounts = RouteCounts::new();
/// Collective writes, by route.
pub static WRITES: RouteCounts = RouteCounts::new();

/// Count one collective access of this rank (`mapped`: a two-phase one went through the
/// file's pages).
pub(crate) fn count(dir: Dir, route: Route, mapped: bool) {
    let c = match dir {
        Dir::Read => &READS,
        Dir::Write => &WRITES,
    };
    let which = if route == Route::TwoPhase {
        &c.two_phase
    } else {
        &c.independent
    };
    which.fetch_add(1, Ordering::Relaxed);
    if mapped && route == Route::TwoPhase {
        c.mapped.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters as `(name, description, value)`, in a fixed order: what the tool
/// interface lists.
pub fn snapshot() -> [(&'static str, &'static str, u64); 6] {
    let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
    [
        (
            "tsunagi_io_coll_read_two_phase",
            "collective reads of this process done by two-phase I/O (aggregators)",
            v(&READS.two_phase),
        ),
        (
            "tsunagi_io_coll_read_independent",
            "collective reads of this process done independently (no data exchanged)",
            v(&READS.independent),
        ),
        (
            "tsunagi_io_coll_write_two_phase",
            "collective writes of this process done by two-phase I/O (aggregators)",
            v(&WRITES.two_phase),
        ),
        (
            "tsunagi_io_coll_write_independent",
            "collective writes of this process done independently (no data exchanged)",
            v(&WRITES.independent),
        ),
        (
            "tsunagi_io_coll_read_mapped",
            "collective reads of this process done by two-phase I/O through the file's pages \
             (one node, mmap; also counted as two-phase)",
            v(&READS.mapped),
        ),
        (
            "tsunagi_io_coll_write_mapped",
            "collective writes of this process done by two-phase I/O through the file's pages \
             (one node, mmap; also counted as two-phase)",
            v(&WRITES.mapped),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_count_by_direction_and_family() {
        let before = snapshot();
        count(Dir::Read, Route::TwoPhase, false);
        count(Dir::Write, Route::LargePieces, false);
        count(Dir::Write, Route::Disjoint, false);
        count(Dir::Write, Route::TwoPhase, true);
        // An independent access is never counted as mapped.
        count(Dir::Read, Route::SmallReads, true);
        let after = snapshot();
        let d: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a.2 - b.2).collect();
        // No other unit test runs a collective access.
        assert_eq!(d, [1, 1, 1, 2, 0, 1]);
    }
}
