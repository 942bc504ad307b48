//! Algorithm selection: every collective family has a list of algorithms; by default one
//! is chosen per call from the message size, the communicator size and the placement of
//! ranks on nodes, and `TSUNAGI_COLL_<NAME>=<algorithm>` (read once) or
//! [`set_algorithm`] / [`with_algorithm`] (programmatic, process-wide) forces one.
//! `auto` restores the automatic choice. A forced algorithm that cannot run a particular
//! call (e.g. `ring` with a non-commutative op) falls back to one that can.

use std::sync::atomic::{AtomicU8, Ordering};

/// A family of collectives that share an algorithm setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coll {
    Barrier,
    Bcast,
    /// gather (gatherv is always linear).
    Gather,
    /// scatter (scatterv is always linear).
    Scatter,
    /// allgather and allgatherv.
    Allgather,
    /// alltoall, alltoallv and alltoallw (`bruck` and `hierarchical` only apply to
    /// alltoall).
    Alltoall,
    Reduce,
    Allreduce,
    /// reduce_scatter and reduce_scatter_block.
    ReduceScatter,
    /// scan and exscan.
    Scan,
}

impl Coll {
    /// Every family.
    pub const ALL: [Coll; 10] = [
        Coll::Barrier,
        Coll::Bcast,
        Coll::Gather,
        Coll::Scatter,
        Coll::Allgather,
        Coll::Alltoall,
        Coll::Reduce,
        Coll::Allreduce,
        Coll::ReduceScatter,
        Coll::Scan,
    ];

    /// The environment variable that forces an algorithm.
    pub fn env_var(self) -> &'static str {
        match self {
            Coll::Barrier => "TSUNAGI_COLL_BARRIER",
            Coll::Bcast => "TSUNAGI_COLL_BCAST",
            Coll::Gather => "TSUNAGI_COLL_GATHER",
            Coll::Scatter => "TSUNAGI_COLL_SCATTER",
            Coll::Allgather => "TSUNAGI_COLL_ALLGATHER",
            Coll::Alltoall => "TSUNAGI_COLL_ALLTOALL",
            Coll::Reduce => "TSUNAGI_COLL_REDUCE",
            Coll::Allreduce => "TSUNAGI_COLL_ALLREDUCE",
            Coll::ReduceScatter => "TSUNAGI_COLL_REDUCE_SCATTER",
            Coll::Scan => "TSUNAGI_COLL_SCAN",
        }
    }

    /// The algorithm names of the family (what the environment variable accepts).
    pub fn algorithms(self) -> &'static [&'static str] {
        match self {
            Coll::Barrier => &["dissemination", "hierarchical", "shm"],
            Coll::Bcast => &[
                "binomial",
                "scatter_allgather",
                "chain",
                "hierarchical",
                "shm",
            ],
            Coll::Gather => &["binomial", "linear", "shm"],
            Coll::Scatter => &["binomial", "linear", "shm"],
            Coll::Allgather => &["recursive_doubling", "bruck", "ring", "hierarchical", "shm"],
            Coll::Alltoall => &[
                "bruck",
                "pairwise",
                "two_level_ring",
                "linear",
                "sites",
                "shm",
                "hierarchical",
            ],
            Coll::Reduce => &["binomial", "rabenseifner", "hierarchical", "shm"],
            Coll::Allreduce => &[
                "recursive_doubling",
                "rabenseifner",
                "ring",
                "binomial",
                "hierarchical",
                "shm",
            ],
            Coll::ReduceScatter => &["ring", "reduce_scatterv", "shm"],
            Coll::Scan => &["recursive_doubling", "linear", "shm"],
        }
    }

    fn slot(self) -> &'static AtomicU8 {
        &SLOTS[self as usize]
    }
}

/// Per family: 0 = not yet read from the environment, 1 = automatic, 2 + i = algorithm i.
static SLOTS: [AtomicU8; 10] = [const { AtomicU8::new(0) }; 10];

fn index_of(c: Coll, name: &str) -> Option<usize> {
    c.algorithms().iter().position(|a| *a == name)
}

fn parse(c: Coll, name: &str) -> Result<u8, String> {
    if name.is_empty() || name == "auto" {
        return Ok(1);
    }
    match index_of(c, name) {
        Some(i) => Ok(2 + i as u8),
        None => Err(format!(
            "{}={name}: unknown algorithm (one of auto, {})",
            c.env_var(),
            c.algorithms().join(", ")
        )),
    }
}

/// The forced algorithm of a family (index into [`Coll::algorithms`]), or None for the
/// automatic choice.
pub fn forced(c: Coll) -> Option<usize> {
    let mut v = c.slot().load(Ordering::Relaxed);
    if v == 0 {
        v = match std::env::var(c.env_var()) {
            Ok(s) => parse(c, s.trim()).unwrap_or_else(|e| {
                eprintln!("tsunagi: warning: {e}; using the automatic choice");
                1
            }),
            Err(_) => 1,
        };
        c.slot().store(v, Ordering::Relaxed);
    }
    (v >= 2).then(|| (v - 2) as usize)
}

/// Force an algorithm for a family (`None` or `"auto"`: automatic). Every rank must make
/// the same setting before the next collective of the family.
pub fn set_algorithm(c: Coll, name: Option<&str>) -> Result<(), String> {
    let v = parse(c, name.unwrap_or("auto"))?;
    c.slot().store(v, Ordering::Relaxed);
    Ok(())
}

/// Run `f` with an algorithm forced for a family, then restore the previous setting.
pub fn with_algorithm<T>(c: Coll, name: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    let _ = forced(c);
    let old = c.slot().load(Ordering::Relaxed);
    set_algorithm(c, Some(name))?;
    let out = f();
    c.slot().store(old, Ordering::Relaxed);
    Ok(out)
}

/// The chosen algorithm name: the forced one if any, else `auto()`.
pub(crate) fn choose(c: Coll, auto: impl FnOnce() -> &'static str) -> &'static str {
    match forced(c) {
        Some(i) => c.algorithms()[i],
        None => auto(),
    }
}
