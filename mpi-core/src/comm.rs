//! Communicator state: group, context id, name, error handler, attributes.
//!
//! Context ids: each communicator owns a pair, `2k` for point-to-point and `2k+1` for
//! collective and internal traffic, so the two can never match each other. Pair `k` is
//! chosen when the communicator is made: every member contributes its bitmask of free
//! pairs, the masks are ANDed, and the lowest pair free everywhere is taken (MPICH's
//! scheme). Disjoint communicators made by one split may share a pair: no message can
//! cross between them because no process is in both.
//!
//! Under MPI_THREAD_MULTIPLE two threads may make communicators from different parents at
//! once, and two exchanges offering the same free pairs could both pick one pair in one
//! process. [`ContextAllocator`] prevents that as MPICH does: in each process only one
//! allocation at a time (the one on the lowest parent context among those waiting) offers
//! the real mask; the others offer nothing, get no pair, and try again. The allocation on
//! the lowest parent context waiting anywhere eventually owns the mask in all its members
//! at once, so every allocation ends.

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
    /// MPI_ERRORS_ABORT (MPI 4.0): abort the processes of the communicator, as
    /// MPI_Abort on it would (here: the job, as MPI_Abort does).
    Abort,
    /// A handler made with MPI_Comm_create_errhandler; the id is the handler's handle.
    User(u32, Arc<ErrHandlerFn>),
}

impl std::fmt::Debug for ErrHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrHandler::Fatal => f.write_str("Fatal"),
            ErrHandler::Return => f.write_str("Return"),
            ErrHandler::Abort => f.write_str("Abort"),
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
    /// For an intercommunicator: the remote group and the hidden local intracommunicator.
    pub inter: Option<InterData>,
}

/// What an intercommunicator has beyond an intracommunicator. Point-to-point ranks on an
/// intercommunicator name the remote group; its collectives move data between the groups
/// on its collective context and within the local group on `local_comm` (a hidden
/// intracommunicator over the local group, freed with the intercommunicator).
#[derive(Clone, Debug)]
pub struct InterData {
    pub remote: Arc<Group>,
    pub local_comm: CommId,
}

impl CommData {
    /// Size of the communicator.
    pub fn size(&self) -> usize {
        self.group.size()
    }
    /// The group that point-to-point ranks name: the remote group of an
    /// intercommunicator, the communicator's own group otherwise.
    pub fn peer_group(&self) -> &Group {
        match &self.inter {
            Some(i) => &i.remote,
            None => &self.group,
        }
    }
    /// Size of [`CommData::peer_group`] (the valid destination and source ranks).
    pub fn peer_size(&self) -> usize {
        self.peer_group().size()
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

/// The highest pair marked in use in `mask` (a clear bit), if any.
pub fn highest_used(mask: &[u64; MASK_WORDS]) -> Option<usize> {
    mask.iter()
        .enumerate()
        .rev()
        .find(|(_, w)| **w != u64::MAX)
        .map(|(i, w)| i * 64 + 63 - (!*w).leading_zeros() as usize)
}

/// A process's free context pairs and the allocations in flight (see the module doc).
/// Sans IO: the caller exchanges [`Offer`]s over the parent communicator.
pub struct ContextAllocator {
    free: [u64; MASK_WORDS],
    /// Parent contexts of the allocations in flight in this process.
    waiting: Vec<u32>,
    /// The allocation whose round offers the real mask.
    owner: Option<u32>,
}

/// What one member contributes to a round of agreement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The free pairs offered (all zero when this member's mask is busy).
    pub mask: [u64; MASK_WORDS],
    /// True when `mask` is the member's real free mask.
    pub real: bool,
}

/// One group's offers as one: the AND of the masks, real only if all were (what an
/// intercommunicator's group hands the other group, see `runtime/inter.rs`).
pub fn combine(offers: &[Offer]) -> Offer {
    let mut all = Offer {
        mask: full_mask(),
        real: true,
    };
    for o in offers {
        for (a, w) in all.mask.iter_mut().zip(o.mask.iter()) {
            *a &= *w;
        }
        all.real &= o.real;
    }
    all
}

/// Bytes of an [`Offer`] on the wire.
pub const OFFER_BYTES: usize = 1 + MASK_WORDS * 8;

impl Offer {
    /// The offer as bytes (native order: only this job's processes read it).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(OFFER_BYTES);
        b.push(self.real as u8);
        for w in &self.mask {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b
    }

    /// Read an offer from the front of `b` (`None` if too short).
    pub fn from_bytes(b: &[u8]) -> Option<Offer> {
        let b = b.get(..OFFER_BYTES)?;
        let mut mask = [0u64; MASK_WORDS];
        for (i, w) in mask.iter_mut().enumerate() {
            *w = u64::from_ne_bytes(b[1 + i * 8..9 + i * 8].try_into().ok()?);
        }
        Some(Offer {
            mask,
            real: b[0] == 1,
        })
    }
}

/// How a round of agreement ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreed {
    /// Pair `k` is this communicator's (contexts `2k`, `2k+1`).
    Pair(usize),
    /// Some member's mask was busy: exchange again.
    Retry,
    /// Every member offered its real mask and no pair is free everywhere.
    Exhausted,
}

impl Default for ContextAllocator {
    fn default() -> Self {
        ContextAllocator::new()
    }
}

impl ContextAllocator {
    /// Pairs 0 (MPI_COMM_WORLD) and 1 (MPI_COMM_SELF) in use, the rest free.
    pub fn new() -> ContextAllocator {
        let mut free = full_mask();
        mark(&mut free, 0, true);
        mark(&mut free, 1, true);
        ContextAllocator {
            free,
            waiting: Vec::new(),
            owner: None,
        }
    }

    /// Begin a round of the allocation on `parent` (the parent communicator's collective
    /// context, unique among the allocations of one process).
    pub fn offer(&mut self, parent: u32) -> Offer {
        if !self.waiting.contains(&parent) {
            self.waiting.push(parent);
        }
        if self.owner.is_none() && self.waiting.iter().min() == Some(&parent) {
            self.owner = Some(parent);
        }
        if self.owner == Some(parent) {
            Offer {
                mask: self.free,
                real: true,
            }
        } else {
            Offer {
                mask: [0; MASK_WORDS],
                real: false,
            }
        }
    }

    /// End the round of the allocation on `parent`, given every member's offer.
    pub fn conclude(&mut self, parent: u32, offers: &[Offer]) -> Agreed {
        let mut and = full_mask();
        for o in offers {
            for (a, w) in and.iter_mut().zip(o.mask.iter()) {
                *a &= *w;
            }
        }
        if self.owner == Some(parent) {
            self.owner = None;
        }
        match lowest_free(&and) {
            Some(k) => {
                mark(&mut self.free, k, true);
                self.waiting.retain(|&p| p != parent);
                Agreed::Pair(k)
            }
            None if offers.iter().all(|o| o.real) => {
                self.waiting.retain(|&p| p != parent);
                Agreed::Exhausted
            }
            None => Agreed::Retry,
        }
    }

    /// End the round of the allocation on `parent` by IMPI's rule for communicators that
    /// span sites: one more than the highest pair in use in any member ("max + 1"; the
    /// IMPI report: a new context id is the maximum of every proc's highest context id,
    /// plus one). Every member computes the same pair from the same offers, and it is free
    /// in all of them. When the highest pair is the last one, the lowest pair free
    /// everywhere is taken instead (as [`ContextAllocator::conclude`]), so that a program
    /// that makes and frees communicators in a loop does not run out.
    pub fn conclude_above_max(&mut self, parent: u32, offers: &[Offer]) -> Agreed {
        if offers.iter().all(|o| o.real) {
            let highest_used = offers
                .iter()
                .filter_map(|o| highest_used(&o.mask))
                .max()
                .unwrap_or(1);
            if highest_used + 1 < CONTEXT_PAIRS {
                let k = highest_used + 1;
                if self.owner == Some(parent) {
                    self.owner = None;
                }
                mark(&mut self.free, k, true);
                self.waiting.retain(|&p| p != parent);
                return Agreed::Pair(k);
            }
        }
        self.conclude(parent, offers)
    }

    /// Forget the allocation on `parent` (its exchange failed).
    pub fn abandon(&mut self, parent: u32) {
        if self.owner == Some(parent) {
            self.owner = None;
        }
        self.waiting.retain(|&p| p != parent);
    }

    /// Pair `k` is free again (its communicator was freed).
    pub fn release(&mut self, k: usize) {
        mark(&mut self.free, k, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two processes, two allocations on different parents running at once, with the
    /// rounds interleaved in the worst orders: never one pair for both, always an end.
    #[test]
    fn concurrent_allocations_never_share_a_pair() {
        // Every interleaving of the two allocations' offer/conclude steps in the two
        // processes, as a bit pattern choosing which allocation steps next per process.
        for pattern in 0u32..256 {
            let mut procs = [ContextAllocator::new(), ContextAllocator::new()];
            let parents = [11u32, 7u32];
            let mut got: [Option<usize>; 2] = [None, None];
            let mut rounds = 0;
            let mut bit = 0;
            while got.iter().any(|g| g.is_none()) {
                rounds += 1;
                assert!(rounds < 100, "no progress with pattern {pattern:#x}");
                // In each process, the allocations offer in an order the pattern picks.
                let mut offers = [[None; 2]; 2]; // [allocation][process]
                for (p, proc_) in procs.iter_mut().enumerate() {
                    let first = ((pattern >> (bit % 8)) & 1) as usize;
                    bit += 1;
                    for a in [first, 1 - first] {
                        if got[a].is_none() {
                            offers[a][p] = Some(proc_.offer(parents[a]));
                        }
                    }
                    let _ = p;
                }
                for a in 0..2 {
                    if got[a].is_some() {
                        continue;
                    }
                    let all: Vec<Offer> = offers[a].iter().map(|o| o.unwrap()).collect();
                    let mut verdicts = Vec::new();
                    for proc_ in procs.iter_mut() {
                        verdicts.push(proc_.conclude(parents[a], &all));
                    }
                    assert!(
                        verdicts.iter().all(|v| *v == verdicts[0]),
                        "members disagree"
                    );
                    match verdicts[0] {
                        Agreed::Pair(k) => got[a] = Some(k),
                        Agreed::Retry => {}
                        Agreed::Exhausted => panic!("exhausted with free pairs"),
                    }
                }
            }
            assert_ne!(got[0], got[1], "pattern {pattern:#x} gave one pair twice");
            assert!(got.iter().all(|g| g.unwrap() >= 2));
        }
    }

    /// An intercommunicator's agreement: each process concludes with its own group's
    /// offers plus the other group's combined offer. Every member of both groups reaches
    /// the verdict a flat agreement over all of them would, and a busy member anywhere
    /// makes everyone retry.
    #[test]
    fn two_groups_agree_through_combined_offers() {
        let mut a = [ContextAllocator::new(), ContextAllocator::new()];
        let mut b = [
            ContextAllocator::new(),
            ContextAllocator::new(),
            ContextAllocator::new(),
        ];
        // Different pairs in use in different processes.
        for (i, p) in a.iter_mut().chain(b.iter_mut()).enumerate() {
            for k in 2..2 + i {
                let o = p.offer(100 + k as u32);
                let _ = p.conclude(100 + k as u32, &[o]);
            }
        }
        // B's third process is busy with another allocation (lower parent): fake offer.
        let other = b[2].offer(1);
        let mut rounds = 0;
        let pair = loop {
            rounds += 1;
            let oa: Vec<Offer> = a.iter_mut().map(|p| p.offer(7)).collect();
            let ob: Vec<Offer> = b.iter_mut().map(|p| p.offer(9)).collect();
            let (ca, cb) = (combine(&oa), combine(&ob));
            let mut flat = oa.clone();
            flat.extend_from_slice(&ob);
            let want = lowest_free(&combine(&flat).mask);
            let mut verdicts = Vec::new();
            for p in a.iter_mut() {
                let mut mine = oa.clone();
                mine.push(cb);
                verdicts.push(p.conclude(7, &mine));
            }
            for p in b.iter_mut() {
                let mut mine = ob.clone();
                mine.push(ca);
                verdicts.push(p.conclude(9, &mine));
            }
            assert!(verdicts.iter().all(|v| *v == verdicts[0]), "{verdicts:?}");
            match verdicts[0] {
                Agreed::Pair(k) => {
                    assert_eq!(Some(k), want);
                    break k;
                }
                Agreed::Retry => {
                    assert_eq!(rounds, 1, "only the first round meets the busy member");
                    // The other allocation finishes; B's third process is free again.
                    let _ = b[2].conclude(1, &[other]);
                }
                Agreed::Exhausted => panic!("exhausted"),
            }
        };
        assert_eq!(rounds, 2);
        // Pairs 2..=5 were in use in process 4, whose other allocation then took 6.
        assert_eq!(pair, 7);
    }

    #[test]
    fn max_plus_one_across_sites() {
        // Member A used pairs 0..=5, member B 0, 1 and 9: max + 1 = 10 for both, although
        // pair 2 is free in both (the mask rule would take 2).
        let mut a = ContextAllocator::new();
        let mut b = ContextAllocator::new();
        for k in 2..=5 {
            mark(&mut a.free, k, true);
        }
        mark(&mut b.free, 9, true);
        assert_eq!(highest_used(&a.free), Some(5));
        assert_eq!(highest_used(&b.free), Some(9));
        let offers = [a.offer(3), b.offer(3)];
        assert_eq!(a.conclude_above_max(3, &offers), Agreed::Pair(10));
        assert_eq!(b.conclude_above_max(3, &offers), Agreed::Pair(10));
        assert_eq!(highest_used(&a.free), Some(10));
        // A busy member's empty offer: everyone retries.
        a.owner = Some(99);
        a.waiting.push(99);
        let offers = [a.offer(3), b.offer(3)];
        assert_eq!(b.conclude_above_max(3, &offers), Agreed::Retry);
        // The last pair in use somewhere: the lowest pair free everywhere instead.
        let mut c = ContextAllocator::new();
        mark(&mut c.free, CONTEXT_PAIRS - 1, true);
        let offers = [c.offer(1)];
        assert_eq!(c.conclude_above_max(1, &offers), Agreed::Pair(2));
    }

    #[test]
    fn exhaustion_is_reported_and_release_frees() {
        let mut a = ContextAllocator::new();
        let mut pairs = Vec::new();
        loop {
            let o = a.offer(1);
            match a.conclude(1, &[o]) {
                Agreed::Pair(k) => pairs.push(k),
                Agreed::Exhausted => break,
                Agreed::Retry => panic!("a lone allocation never retries"),
            }
        }
        assert_eq!(pairs.len(), CONTEXT_PAIRS - 2);
        a.release(pairs[5]);
        let o = a.offer(1);
        assert_eq!(a.conclude(1, &[o]), Agreed::Pair(pairs[5]));
        let o = Offer::from_bytes(&a.offer(3).to_bytes()).unwrap();
        assert!(o.real);
        assert_eq!(Offer::from_bytes(&[1, 2, 3]), None);
    }

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
