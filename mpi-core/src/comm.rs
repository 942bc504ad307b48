//! Communicator state: group, context id, name, error handler, attributes.
//!
//! Context ids: each communicator owns a pair, `2k` for point-to-point and `2k+1` for
//! collective and internal traffic, so the two can never match each other. Pair `k` is
//! chosen when the communicator is made: every member contributes its bitmask of free
//! pairs, the masks are ANDed, and the lowest pair free everywhere is taken (MPICH's
//! scheme). Disjoint communicators made by one split may share a pair: no message can
//! cross between them because no process is in both.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::MpiResult;
use crate::group::Group;

/// A handle to a communicator in the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommId(pub u32);

impl CommId {
    /// MPI_COMM_WORLD.
    pub const WORLD: CommId = CommId(0);
    /// MPI_COMM_SELF.
    pub const SELF: CommId = CommId(1);
}

/// Number of context-id pairs a process can have in use at once.
pub const CONTEXT_PAIRS: usize = 2048;
/// Words of the free-pair bitmask.
pub const MASK_WORDS: usize = CONTEXT_PAIRS / 64;

/// A user error handler: called with the communicator and the error code.
pub type ErrHandlerFn = dyn Fn(CommId, i32) + Send + Sync;

/// What happens when a call on a communicator fails.
#[derive(Clone)]
pub enum ErrHandler {
    /// MPI_ERRORS_ARE_FATAL: print one line and abort the job.
    Fatal,
    /// MPI_ERRORS_RETURN: return the error code.
    Return,
    /// A handler made with MPI_Comm_create_errhandler; the id is the handler's handle.
    User(u32, Arc<ErrHandlerFn>),
}

impl std::fmt::Debug for ErrHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrHandler::Fatal => f.write_str("Fatal"),
            ErrHandler::Return => f.write_str("Return"),
            ErrHandler::User(id, _) => write!(f, "User({id})"),
        }
    }
}

/// Attribute copy callback: (old communicator, keyval, extra_state, value) → the value for
/// the new communicator, or None not to copy.
pub type CopyAttrFn = dyn Fn(CommId, i32, usize, usize) -> MpiResult<Option<usize>> + Send + Sync;
/// Attribute delete callback: (communicator, keyval, value, extra_state).
pub type DeleteAttrFn = dyn Fn(CommId, i32, usize, usize) -> MpiResult<()> + Send + Sync;

/// A keyval made by MPI_Comm_create_keyval.
#[derive(Clone)]
pub struct Keyval {
    pub copy: Option<Arc<CopyAttrFn>>,
    pub delete: Option<Arc<DeleteAttrFn>>,
    pub extra: usize,
}

/// The core's record of one communicator.
pub struct CommData {
    pub group: Arc<Group>,
    /// This process's rank in the communicator.
    pub rank: usize,
    /// Point-to-point context id (even); collectives use `context + 1`.
    pub context: u32,
    pub name: String,
    pub errhandler: ErrHandler,
    /// Attribute values by keyval.
    pub attrs: BTreeMap<i32, usize>,
    /// Node id of each member (by communicator rank), for rank-aware algorithms.
    pub nodes: Arc<Vec<u32>>,
}

impl CommData {
    /// Size of the communicator.
    pub fn size(&self) -> usize {
        self.group.size()
    }
    /// The collective/internal context id.
    pub fn coll_context(&self) -> u32 {
        self.context + 1
    }
}

/// A free-pair bitmask with every pair free.
pub fn full_mask() -> [u64; MASK_WORDS] {
    [u64::MAX; MASK_WORDS]
}

/// Lowest pair set in `mask`.
pub fn lowest_free(mask: &[u64; MASK_WORDS]) -> Option<usize> {
    mask.iter()
        .enumerate()
        .find(|(_, w)| **w != 0)
        .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
}

/// Mark pair `k` used (`used = true`) or free.
pub fn mark(mask: &mut [u64; MASK_WORDS], k: usize, used: bool) {
    let bit = 1u64 << (k % 64);
    if used {
        mask[k / 64] &= !bit;
    } else {
        mask[k / 64] |= bit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_allocation() {
        let mut m = full_mask();
        assert_eq!(lowest_free(&m), Some(0));
        mark(&mut m, 0, true);
        mark(&mut m, 1, true);
        assert_eq!(lowest_free(&m), Some(2));
        let mut other = full_mask();
        mark(&mut other, 2, true);
        for (a, b) in m.iter_mut().zip(other.iter()) {
            *a &= *b;
        }
        assert_eq!(lowest_free(&m), Some(3));
        mark(&mut m, 0, false);
        assert_eq!(lowest_free(&m), Some(0));
        let empty = [0u64; MASK_WORDS];
        assert_eq!(lowest_free(&empty), None);
    }
}
