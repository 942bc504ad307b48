//! The slot protocol of the shared-memory small collectives among the ranks of one
//! communicator that all live on one node, through one memory area they all map (see
//! `shmcoll.rs` for how the area is made and found). Every collective of the fast path is
//! one [`Area::exchange`]: a rank optionally *posts* a slot of data, then reads the slots
//! some set of other ranks posted for the same call ([`Peers`]): bcast and scatter read
//! the root's slot, reduce and gather let the root read everyone's, allreduce, allgather,
//! alltoall, reduce_scatter_block and the barrier read all, scan and exscan read the
//! slots of the lower ranks.
//!
//! Layout (every part on its own 128-byte line pair, so that adjacent-line prefetching does
//! not make two writers share a line):
//! - a header line: magic, rank count, depth, slot size, and a nonce that attaching
//!   ranks check (they must have mapped the leader's area, not some other memory);
//! - per rank `i` a *done* line holding one `u64` that only rank `i` writes;
//! - per rank `i` a *sleepers* line: how many ranks sleep in the kernel (futex) on one of
//!   rank `i`'s words, so that `i` knows it must wake them;
//! - per rank `i`, `DEPTH` slots, which only rank `i` writes: a *stamp* (`u64`) and, from
//!   byte 16 on (so that small messages share the stamp's cache line), up to
//!   `SLOT_BYTES` of data.
//!
//! Every call of a collective on the area takes the next sequence number `s` (1, 2, ...:
//! all ranks call the communicator's collectives in the same order, so they agree on `s`).
//! Its data goes into slot `s % DEPTH` of the writing rank. A rank stores the slot's
//! `stamp = s` (Release) once its contribution to call `s` is in the slot (or, in a
//! barrier, once it has arrived), and publishes `done >= s` when it has finished call `s`
//! and reads nobody's slots any more. So:
//! - a reader waits for rank `j`'s stamp of slot `s % DEPTH` to reach `s` (Acquire)
//!   before reading the slot; rank `j` cannot reuse the slot (stamp `s + DEPTH`) before
//!   the reader said `done >= s` (below), so what it reads is call `s`'s data;
//! - a writer about to fill its slot for call `s` waits until every other rank has
//!   `done >= s - DEPTH` (the previous user of the slot was call `s - DEPTH`). A rank that
//!   need not wait for others (a bcast root, a reduce non-root) therefore runs ahead of
//!   the slowest reader, whatever the roots of the calls;
//! - `done` is published lazily, at every [`DONE_STRIDE`]-th call only: a rank that reads
//!   another's done line (a writer running ahead) then costs the line's owner a cache-line
//!   transfer once per stride instead of once per call. The published value is at most
//!   `DONE_STRIDE - 1` calls behind the truth, so the protocol behaves like the eager one
//!   with depth `DEPTH - DONE_STRIDE + 1` (>= 1: no deadlock; safe, since it is never
//!   ahead of the truth);
//! - seeing rank `j`'s stamp `s` also proves that `j` finished call `s - 1` (a rank
//!   finishes a call before it starts the next), which the all-to-all calls (barrier,
//!   allreduce, ...) use to learn that slots are free without reading the done lines.
//!
//! Reductions fold the contributions in rank order (`d0 op (d1 op (... op dn-1))`, see
//! `shmcoll.rs`), so non-commutative ops are right and every rank of an allreduce computes
//! bit-identical results.
//!
//! **Waiting** spins a little, then asks an [`Idle`] what to do: the runtime driver makes
//! progress on the engine and yields for a while, then has the rank sleep in the kernel on
//! the word it waits for (`FUTEX_WAIT` on its low half, with a timeout so that the engine
//! still makes progress now and then). A sleeper counts itself in the word owner's
//! sleepers line first; the owner, after each store a sleeper may wait for, checks that
//! count and wakes the word's sleepers. Ranks that share a core therefore hand the core
//! over at once instead of after a nap. The two sides are Dekker's pattern (store, then
//! load the other's word): each needs a store-load barrier, or both could miss the
//! other's store. When every rank of the area registered for
//! `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` (agreed when the area is made; see
//! `tsunagi_p2p::membarrier`), the sleeper pays for both: it issues the membarrier between
//! its increment and its last check of the word, and the owner's store needs no fence —
//! a fence there waited, on every call, for the slot's line to come back from the readers
//! polling it. Otherwise both sides fence (`SeqCst` fence after the owner's store, the
//! count's `SeqCst` increment before the sleeper's last check).

use std::sync::atomic::{compiler_fence, fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tsunagi_core::MpiResult;

/// Cache line pair.
pub(crate) const LINE: usize = 128;
/// Slots per rank: how many calls a rank may run ahead of the slowest other rank. With
/// 8 (run-ahead 5, see [`DONE_STRIDE`]) a bcast root back to back still waited for the
/// reader's done line now and then: 8-byte bcast on 2 ranks took 0.068-0.080 µs per call
/// against 0.055-0.064 with 16 (Open MPI 0.068-0.072; 32 gave no more). The area grows by
/// `8 * STRIDE` (66 KB) per rank; a slot's pages are touched only when used.
pub(crate) const DEPTH: usize = 16;
/// `done` is published at every call whose number is a multiple of this (see the module
/// doc); at most `DEPTH`.
pub(crate) const DONE_STRIDE: u64 = 4;
/// Data bytes per slot: the largest message of the fast path.
pub(crate) const SLOT_BYTES: usize = 8192;
/// Where a slot's data starts (after the stamp; 16 keeps 16-byte alignment).
const DATA_OFFSET: usize = 16;
/// Distance between slots.
const STRIDE: usize = (DATA_OFFSET + SLOT_BYTES).div_ceil(LINE) * LINE;
/// Largest communicator the area is made for.
pub(crate) const MAX_RANKS: usize = 16;
/// "TSUNAGIc" (version 2: with the sleepers lines).
pub(crate) const MAGIC: u64 = 0x5453_554e_4147_4963 + 2;
/// Pause iterations before the first call of [`Idle::idle`].
const SPIN: u32 = 64;

const _: () = assert!(DONE_STRIDE >= 1 && DONE_STRIDE as usize <= DEPTH);

/// What a waiting rank does next, once the short spin is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pause {
    /// Check again (the idle has yielded or made progress).
    Again,
    /// Sleep on the awaited word until its owner wakes us or the time is up.
    Sleep(Duration),
}

/// What a waiting rank does between checks, once the short spin is over.
pub(crate) trait Idle {
    /// Called with 0, 1, 2, ... while the condition stays false; an error ends the wait
    /// (a fault of the runtime, a dead peer).
    fn idle(&mut self, round: u32) -> MpiResult<Pause>;
}

/// Yield the processor (threads over an in-memory area).
#[cfg(test)]
pub(crate) struct YieldIdle;
#[cfg(test)]
impl Idle for YieldIdle {
    fn idle(&mut self, _round: u32) -> MpiResult<Pause> {
        std::thread::yield_now();
        Ok(Pause::Again)
    }
}

/// Sleep on the word at once, with a long timeout: a wait then only ends in time if the
/// owner's wake-up works (threads over an in-memory area).
#[cfg(test)]
pub(crate) struct SleepIdle(pub Duration);
#[cfg(test)]
impl Idle for SleepIdle {
    fn idle(&mut self, _round: u32) -> MpiResult<Pause> {
        Ok(Pause::Sleep(self.0))
    }
}

/// Which other ranks' slots a call reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peers {
    Nobody,
    One(usize),
    /// Ranks `0..k` (scan: the lower ranks).
    Below(usize),
    All,
}

/// Bytes of the area for `n` ranks.
pub(crate) fn area_len(n: usize) -> usize {
    LINE * (1 + 2 * n) + n * DEPTH * STRIDE
}

/// `FUTEX_WAIT` (shared: the area is mapped by several processes) on the low half of
/// `word` while it holds `seen`, for at most `timeout`.
fn futex_wait(word: &AtomicU64, seen: u64, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the address is an aligned, mapped word (its low half on little-endian
    // machines, where the futex compares the low 32 bits); the kernel only reads it and
    // the timespec. Spurious returns (EAGAIN, EINTR, ETIMEDOUT) are fine: callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAIT,
            seen as u32,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// `FUTEX_WAKE` every sleeper on `word`.
fn futex_wake(word: &AtomicU64) {
    // SAFETY: as in futex_wait; waking has no memory effects.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_half(word),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn low_half(word: &AtomicU64) -> *const AtomicU32 {
    const { assert!(cfg!(target_endian = "little")) };
    word as *const AtomicU64 as *const AtomicU32
}

/// One rank's view of an area. Not `Sync` in spirit: one collective at a time per
/// communicator (MPI's rule), so the local counters are plain relaxed atomics.
pub(crate) struct Area {
    base: *mut u8,
    n: usize,
    me: usize,
    /// Sequence number of the last call started here.
    seq: AtomicU64,
    /// Every other rank is known to have finished call `free`.
    free: AtomicU64,
    /// Every rank of the area registered for the heavy membarrier: stores skip their
    /// fence and sleepers issue the membarrier (module doc).
    light: bool,
}

// SAFETY: the area is memory shared with other ranks; everything written concurrently is
// an atomic, and slots are handed between writer and readers by the Release/Acquire
// protocol above. The pointer itself never changes.
unsafe impl Send for Area {}
// SAFETY: as above; the local counters are atomics.
unsafe impl Sync for Area {}

impl Area {
    /// Write the header of a fresh (zeroed) area of `area_len(n)` bytes.
    ///
    /// # Safety
    /// `base` points to `area_len(n)` zeroed, writable bytes aligned to `LINE`, not yet
    /// used by anyone else.
    pub(crate) unsafe fn init(base: *mut u8, n: usize, nonce: u64) {
        // SAFETY: caller contract (the header line is ours alone yet).
        unsafe {
            let h = base as *mut u64;
            h.add(1).write(n as u64);
            h.add(2).write(DEPTH as u64);
            h.add(3).write(SLOT_BYTES as u64);
            h.add(4).write(nonce);
            (*(h as *const AtomicU64)).store(MAGIC, Ordering::Release);
        }
    }

    /// Check that an area carries the expected header.
    ///
    /// # Safety
    /// `base` points to at least `LINE` readable bytes.
    pub(crate) unsafe fn header_ok(base: *const u8, n: usize, nonce: u64) -> bool {
        // SAFETY: caller contract; the magic is read with Acquire, the rest after it.
        unsafe {
            let h = base as *const u64;
            (*(h as *const AtomicU64)).load(Ordering::Acquire) == MAGIC
                && h.add(1).read() == n as u64
                && h.add(2).read() == DEPTH as u64
                && h.add(3).read() == SLOT_BYTES as u64
                && h.add(4).read() == nonce
        }
    }

    /// Rank `me`'s view of an initialised area of `n` ranks.
    ///
    /// # Safety
    /// `base` points to `area_len(n)` bytes aligned to `LINE`, initialised by
    /// [`Area::init`], that stay mapped for the life of the view, and every user of the
    /// area follows this protocol with a distinct `me` and the same `light`, which may be
    /// true only if every user's process is registered for the heavy membarrier
    /// (`tsunagi_p2p::membarrier::registered`).
    pub(crate) unsafe fn new(base: *mut u8, n: usize, me: usize, light: bool) -> Area {
        assert!((2..=MAX_RANKS).contains(&n) && me < n);
        Area {
            base,
            n,
            me,
            seq: AtomicU64::new(0),
            free: AtomicU64::new(0),
            light,
        }
    }

    pub(crate) fn size(&self) -> usize {
        self.n
    }

    pub(crate) fn rank(&self) -> usize {
        self.me
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is a line inside the area (callers below), aligned to LINE; the
        // word is only ever accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn done(&self, r: usize) -> &AtomicU64 {
        self.word(LINE * (1 + r))
    }

    fn sleepers(&self, r: usize) -> &AtomicU64 {
        self.word(LINE * (1 + self.n + r))
    }

    fn slot_offset(&self, r: usize, s: u64) -> usize {
        let k = (s % DEPTH as u64) as usize;
        LINE * (1 + 2 * self.n) + (r * DEPTH + k) * STRIDE
    }

    /// Rank `r`'s stamp of the slot of call `s`.
    fn stamp(&self, r: usize, s: u64) -> &AtomicU64 {
        self.word(self.slot_offset(r, s))
    }

    /// Rank `r`'s data of the slot of call `s`.
    fn slot(&self, r: usize, s: u64) -> *mut u8 {
        // SAFETY: inside the area: r < n, the slot index < DEPTH, DATA_OFFSET + SLOT_BYTES
        // <= STRIDE.
        unsafe { self.base.add(self.slot_offset(r, s) + DATA_OFFSET) }
    }

    /// Store one of this rank's words, then wake whoever sleeps on this rank's words.
    fn publish(&self, word: &AtomicU64, v: u64) {
        word.store(v, Ordering::Release);
        if self.light {
            // The sleeper's membarrier orders this store before our load below (module
            // doc); only the compiler must keep them in program order.
            compiler_fence(Ordering::SeqCst);
        } else {
            // Pairs with the sleeper's SeqCst increment (see the module doc).
            fence(Ordering::SeqCst);
        }
        if self.sleepers(self.me).load(Ordering::Relaxed) != 0 {
            futex_wake(word);
        }
    }

    fn next_seq(&self) -> u64 {
        let s = self.seq.load(Ordering::Relaxed) + 1;
        self.seq.store(s, Ordering::Relaxed);
        s
    }

    /// Wait until `word` (owned by rank `owner`) reaches `at_least`.
    fn wait(
        &self,
        idle: &mut dyn Idle,
        owner: usize,
        word: &AtomicU64,
        at_least: u64,
    ) -> MpiResult<()> {
        let mut i = 0u32;
        loop {
            let v = word.load(Ordering::Acquire);
            if v >= at_least {
                return Ok(());
            }
            if i < SPIN {
                std::hint::spin_loop();
            } else if let Pause::Sleep(t) = idle.idle(i - SPIN)? {
                let count = self.sleepers(owner);
                count.fetch_add(1, Ordering::SeqCst);
                // The owner stored without a fence: the membarrier makes either its store
                // visible to the load below or our count visible to its check. Should the
                // call fail (it cannot once registered, short of a kernel change), a lost
                // wake-up is possible, so the sleep is kept short.
                let t = if self.light && !tsunagi_p2p::membarrier::heavy() {
                    t.min(Duration::from_millis(1))
                } else {
                    t
                };
                let v = word.load(Ordering::SeqCst);
                if v < at_least {
                    futex_wait(word, v, t);
                }
                count.fetch_sub(1, Ordering::Relaxed);
            }
            i = i.saturating_add(1);
        }
    }

    /// Wait until rank `r` has arrived at call `s` (posted its slot).
    fn wait_arrive(&self, idle: &mut dyn Idle, r: usize, s: u64) -> MpiResult<()> {
        self.wait(idle, r, self.stamp(r, s), s)
    }

    /// Wait until this rank's slot for call `s` is free (every other rank is done with
    /// call `s - DEPTH`).
    fn wait_slot_free(&self, idle: &mut dyn Idle, s: u64) -> MpiResult<()> {
        let need = s.saturating_sub(DEPTH as u64);
        if self.free.load(Ordering::Relaxed) >= need {
            return Ok(());
        }
        let mut low = u64::MAX;
        for r in 0..self.n {
            if r != self.me {
                let d = self.done(r);
                self.wait(idle, r, d, need)?;
                low = low.min(d.load(Ordering::Acquire));
            }
        }
        self.free.store(low, Ordering::Relaxed);
        Ok(())
    }

    /// One call: if `post` is `Some(len)`, `fill` writes this rank's `len` bytes into its
    /// slot (once the slot is free) and the slot is posted; then `take` gets, per rank,
    /// the slot of this call if it was read (the ranks of `from`, and this rank if it
    /// posted) or null.
    pub(crate) fn exchange(
        &self,
        idle: &mut dyn Idle,
        post: Option<usize>,
        fill: impl FnOnce(*mut u8),
        from: Peers,
        take: impl FnOnce(&[*const u8]),
    ) -> MpiResult<()> {
        let s = self.next_seq();
        let mut parts = [std::ptr::null::<u8>(); MAX_RANKS];
        if let Some(len) = post {
            assert!(len <= SLOT_BYTES);
            self.wait_slot_free(idle, s)?;
            let mine = self.slot(self.me, s);
            fill(mine);
            self.publish(self.stamp(self.me, s), s);
            parts[self.me] = mine;
        }
        let upto = match from {
            Peers::Nobody => 0,
            Peers::One(r) => {
                debug_assert!(r < self.n);
                if r != self.me {
                    self.wait_arrive(idle, r, s)?;
                    parts[r] = self.slot(r, s);
                }
                0
            }
            Peers::Below(k) => k.min(self.n),
            Peers::All => self.n,
        };
        for (r, p) in parts.iter_mut().enumerate().take(upto) {
            if r != self.me {
                self.wait_arrive(idle, r, s)?;
                *p = self.slot(r, s);
            }
        }
        if from == Peers::All && self.free.load(Ordering::Relaxed) < s - 1 {
            // Everyone's stamp `s` proves they all finished `s - 1`.
            self.free.store(s - 1, Ordering::Relaxed);
        }
        take(&parts[..self.n]);
        if s.is_multiple_of(DONE_STRIDE) {
            self.publish(self.done(self.me), s);
        }
        Ok(())
    }

    /// Barrier: everyone arrives, everyone waits for everyone.
    pub(crate) fn barrier(&self, idle: &mut dyn Idle) -> MpiResult<()> {
        self.exchange(idle, Some(0), |_| {}, Peers::All, |_| {})
    }

    /// Broadcast from this rank: `fill` writes the `len` bytes into the slot. Returns
    /// without waiting for the readers.
    pub(crate) fn bcast_root(
        &self,
        idle: &mut dyn Idle,
        len: usize,
        fill: impl FnOnce(*mut u8),
    ) -> MpiResult<()> {
        self.exchange(idle, Some(len), fill, Peers::Nobody, |_| {})
    }

    /// Receive a broadcast from `root`: `take` reads the bytes from the root's slot.
    pub(crate) fn bcast_recv(
        &self,
        idle: &mut dyn Idle,
        root: usize,
        take: impl FnOnce(*const u8),
    ) -> MpiResult<()> {
        self.exchange(
            idle,
            None,
            |_| {},
            Peers::One(root),
            |parts| take(parts[root]),
        )
    }

    /// Allreduce: `fill` writes this rank's packed contribution into its slot, then
    /// `fold` gets every rank's contribution in rank order.
    pub(crate) fn allreduce(
        &self,
        idle: &mut dyn Idle,
        len: usize,
        fill: impl FnOnce(*mut u8),
        fold: impl FnOnce(&[*const u8]),
    ) -> MpiResult<()> {
        self.exchange(idle, Some(len), fill, Peers::All, fold)
    }

    /// Reduce (or gather) to `root`: every non-root's `fill` writes its contribution; the
    /// root's `fold` gets them all in rank order, its own slot only if `root_posts` (else
    /// null: the root uses its input where it is). Non-roots return without waiting.
    pub(crate) fn reduce(
        &self,
        idle: &mut dyn Idle,
        root: usize,
        len: usize,
        root_posts: bool,
        fill: impl FnOnce(*mut u8),
        fold: impl FnOnce(&[*const u8]),
    ) -> MpiResult<()> {
        if self.me == root {
            self.exchange(idle, root_posts.then_some(len), fill, Peers::All, fold)
        } else {
            self.exchange(idle, Some(len), fill, Peers::Nobody, |_| {})
        }
    }
}

#[cfg(test)]
mod tests_support {
    use super::*;
    use std::sync::Arc;

    /// A zeroed, line-aligned heap area shared by threads.
    pub(super) struct Mem(Vec<u128>);
    impl Mem {
        pub(super) fn new(n: usize) -> Arc<Mem> {
            let words = area_len(n).div_ceil(16) + LINE / 16;
            let mut m = Mem(vec![0u128; words]);
            let base = m.base();
            // SAFETY: fresh zeroed memory of the right size.
            unsafe { Area::init(base, n, 42) };
            Arc::new(m)
        }
        pub(super) fn base(&mut self) -> *mut u8 {
            let p = self.0.as_mut_ptr() as *mut u8;
            p.wrapping_add(p.align_offset(LINE))
        }
    }
    struct Base(*mut u8);
    // SAFETY: the memory outlives the threads (joined before the Arc goes).
    unsafe impl Send for Base {}

    /// Run `f(area)` on `n` threads over one in-memory area, as a job runs it here (the
    /// owners' stores without fences where this kernel offers the heavy membarrier).
    pub(super) fn on_threads(n: usize, f: impl Fn(&Area) + Send + Sync + Clone + 'static) {
        on_threads_in(n, tsunagi_p2p::membarrier::registered(), f)
    }

    /// Both ways the area can run here: fences on both sides (`false`), and, where the
    /// kernel offers the heavy membarrier, the owners' stores without fences (`true`).
    pub(super) fn modes() -> Vec<bool> {
        if tsunagi_p2p::membarrier::registered() {
            vec![false, true]
        } else {
            vec![false]
        }
    }

    /// [`on_threads`] with `light` chosen (see [`Area::new`]).
    pub(super) fn on_threads_in(
        n: usize,
        light: bool,
        f: impl Fn(&Area) + Send + Sync + Clone + 'static,
    ) {
        let mut mem = Mem::new(n);
        let base = Arc::get_mut(&mut mem).expect("sole owner").base();
        let hs: Vec<_> = (0..n)
            .map(|me| {
                let b = Base(base);
                let f = f.clone();
                let keep = mem.clone();
                std::thread::spawn(move || {
                    let b = b;
                    // SAFETY: initialised area of n ranks, alive while `keep` is.
                    let a = unsafe { Area::new(b.0, n, me, light) };
                    f(&a);
                    drop(keep);
                })
            })
            .collect();
        for h in hs {
            h.join().expect("thread");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{modes, on_threads, on_threads_in, Mem};
    use super::*;
    use std::sync::Arc;

    #[test]
    fn header_is_checked() {
        let mut mem = Mem::new(3);
        let base = Arc::get_mut(&mut mem).unwrap().base();
        // SAFETY: the area is alive and initialised.
        unsafe {
            assert!(Area::header_ok(base, 3, 42));
            assert!(!Area::header_ok(base, 3, 43));
            assert!(!Area::header_ok(base, 4, 42));
        }
    }

    #[test]
    fn barrier_lets_nobody_out_before_everyone_is_in() {
        for (light, n) in modes()
            .into_iter()
            .flat_map(|l| [2, 3, 4, 7].map(|n| (l, n)))
        {
            let entered = Arc::new(AtomicU64::new(0));
            let e = entered.clone();
            on_threads_in(n, light, move |a| {
                for round in 1..=200u64 {
                    e.fetch_add(1, Ordering::SeqCst);
                    a.barrier(&mut YieldIdle).unwrap();
                    // Everyone has entered this round; nobody can have entered round + 2.
                    let seen = e.load(Ordering::SeqCst);
                    assert!(seen >= round * n as u64, "n={n} round {round}: {seen}");
                    assert!(
                        seen <= (round + 1) * n as u64,
                        "n={n} round {round}: {seen}"
                    );
                }
            });
        }
    }

    /// Back-to-back broadcasts with rotating roots, the roots running ahead: every rank
    /// sees every call's own data, across many wraps of the slot ring.
    #[test]
    fn bcasts_with_changing_roots_run_ahead_safely() {
        for n in [2, 3, 4, 8] {
            on_threads(n, move |a| {
                let me = a.rank();
                for s in 0..2000u64 {
                    // Roots change in runs so that one root runs many calls ahead.
                    let root = ((s / 13) % n as u64) as usize;
                    let len = 1 + (s as usize * 7) % 300;
                    let val = |i: usize| (s as usize * 31 + i) as u8;
                    if me == root {
                        a.bcast_root(&mut YieldIdle, len, |p| {
                            for i in 0..len {
                                // SAFETY: the slot has SLOT_BYTES >= len bytes.
                                unsafe { p.add(i).write(val(i)) };
                            }
                        })
                        .unwrap();
                    } else {
                        a.bcast_recv(&mut YieldIdle, root, |p| {
                            for i in 0..len {
                                // SAFETY: the slot has len bytes of this call.
                                let got = unsafe { p.add(i).read() };
                                assert_eq!(got, val(i), "n={n} call {s} byte {i}");
                            }
                        })
                        .unwrap();
                    }
                }
            });
        }
    }

    /// Allreduce and reduce (non-commutative: string concatenation of rank ids in rank
    /// order) mixed with bcasts and barriers.
    #[test]
    fn mixed_calls_fold_in_rank_order() {
        for n in [2, 3, 4, 5] {
            on_threads(n, move |a| {
                let me = a.rank();
                for s in 0..1500u64 {
                    match s % 4 {
                        0 | 1 => {
                            // Contribution: [me, s as u8]; fold: the list of them in order.
                            let root = (s as usize / 4) % n;
                            let fill = |p: *mut u8| {
                                // SAFETY: 2 bytes of our slot.
                                unsafe {
                                    p.write(me as u8);
                                    p.add(1).write(s as u8);
                                }
                            };
                            let mut got = Vec::new();
                            let fold = |parts: &[*const u8]| {
                                for &q in parts {
                                    if q.is_null() {
                                        // The root's own input (it did not post).
                                        got.extend([me as u8, s as u8]);
                                    } else {
                                        // SAFETY: every posted slot holds this call's 2 bytes.
                                        unsafe { got.extend([q.read(), q.add(1).read()]) };
                                    }
                                }
                            };
                            let want: Vec<u8> = (0..n).flat_map(|r| [r as u8, s as u8]).collect();
                            if s % 4 == 0 {
                                a.allreduce(&mut YieldIdle, 2, fill, fold).unwrap();
                                assert_eq!(got, want);
                            } else {
                                let root_posts = (s / 8) % 2 == 0;
                                a.reduce(&mut YieldIdle, root, 2, root_posts, fill, fold)
                                    .unwrap();
                                if me == root {
                                    assert_eq!(got, want);
                                } else {
                                    assert!(got.is_empty());
                                }
                            }
                        }
                        2 => a.barrier(&mut YieldIdle).unwrap(),
                        _ => {
                            let root = (s as usize) % n;
                            if me == root {
                                a.bcast_root(&mut YieldIdle, 8, |p| {
                                    // SAFETY: 8 bytes of our slot.
                                    unsafe { (p as *mut [u8; 8]).write_unaligned(s.to_le_bytes()) }
                                })
                                .unwrap();
                            } else {
                                a.bcast_recv(&mut YieldIdle, root, |p| {
                                    // SAFETY: 8 bytes of this call.
                                    let v = unsafe { (p as *const [u8; 8]).read_unaligned() };
                                    assert_eq!(u64::from_le_bytes(v), s);
                                })
                                .unwrap();
                            }
                        }
                    }
                }
            });
        }
    }

    /// A reader slower than the root: the root may run at most DEPTH - 1 calls ahead.
    #[test]
    fn root_runs_ahead_at_most_depth_minus_one() {
        for light in modes() {
            let progress = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            let pr = progress.clone();
            on_threads_in(2, light, move |a| {
                for s in 1..=100u64 {
                    if a.rank() == 0 {
                        a.bcast_root(&mut YieldIdle, 1, |p| {
                            // SAFETY: one byte of our slot.
                            unsafe { p.write(s as u8) }
                        })
                        .unwrap();
                        // The reader's counter follows its `done` store, so it may trail
                        // by one more call.
                        let lag = s - pr[1].load(Ordering::SeqCst);
                        assert!(
                            lag <= DEPTH as u64 + 1,
                            "root {s} calls in, reader lags {lag}"
                        );
                        pr[0].fetch_max(lag, Ordering::SeqCst);
                    } else {
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        a.bcast_recv(&mut YieldIdle, 0, |p| {
                            // SAFETY: one byte of this call.
                            assert_eq!(unsafe { p.read() }, s as u8)
                        })
                        .unwrap();
                        pr[1].store(s, Ordering::SeqCst);
                    }
                }
            });
            // The root did not wait for the slow reader call by call.
            let max_lag = progress[0].load(Ordering::SeqCst);
            assert!(
                max_lag >= DEPTH as u64 - 1,
                "the root never ran ahead (max lag {max_lag})"
            );
        }
    }

    /// Value of byte `i` of the block rank `src` sends to `dst` in call `s`.
    fn val(s: u64, src: usize, dst: usize, i: usize) -> u8 {
        (s as usize * 131 + src * 17 + dst * 7 + i) as u8
    }

    /// The patterns of the other collectives, mixed, with changing roots and lengths,
    /// across many wraps of the ring: scatter (the root posts every rank's block, each
    /// reads its own), gather (the root does not post), alltoall (everyone posts a block
    /// per rank), scan and exscan (each reads the lower ranks only).
    #[test]
    fn scatter_gather_alltoall_scan_patterns() {
        for n in [2, 3, 5, 8] {
            on_threads(n, move |a| {
                let me = a.rank();
                for s in 0..1200u64 {
                    let root = ((s / 5) % n as u64) as usize;
                    let blk = 1 + (s as usize * 13) % (SLOT_BYTES / n).min(200);
                    let fill_blocks = |src: usize| {
                        move |p: *mut u8| {
                            for d in 0..n {
                                for i in 0..blk {
                                    // SAFETY: n * blk <= SLOT_BYTES bytes of our slot.
                                    unsafe { p.add(d * blk + i).write(val(s, src, d, i)) };
                                }
                            }
                        }
                    };
                    let check = |p: *const u8, src: usize, at: usize| {
                        for i in 0..blk {
                            // SAFETY: the slot holds this call's n * blk bytes.
                            let got = unsafe { p.add(at * blk + i).read() };
                            assert_eq!(got, val(s, src, me, i), "n={n} call {s} from {src}");
                        }
                    };
                    match s % 5 {
                        0 => {
                            // scatter
                            let post = (me == root).then_some(n * blk);
                            let from = if me == root {
                                Peers::Nobody
                            } else {
                                Peers::One(root)
                            };
                            a.exchange(&mut YieldIdle, post, fill_blocks(me), from, |parts| {
                                assert!(!parts[root].is_null());
                                check(parts[root], root, me);
                            })
                            .unwrap();
                        }
                        1 => {
                            // gather: rank r posts its block for the root (at offset 0).
                            let mut seen = 0;
                            a.reduce(
                                &mut YieldIdle,
                                root,
                                blk,
                                false,
                                |p| {
                                    for i in 0..blk {
                                        // SAFETY: blk bytes of our slot.
                                        unsafe { p.add(i).write(val(s, me, root, i)) };
                                    }
                                },
                                |parts| {
                                    for (r, &q) in parts.iter().enumerate() {
                                        if r == root {
                                            assert!(q.is_null(), "the root did not post");
                                            continue;
                                        }
                                        for i in 0..blk {
                                            // SAFETY: rank r's blk bytes of this call.
                                            assert_eq!(
                                                unsafe { q.add(i).read() },
                                                val(s, r, me, i)
                                            );
                                        }
                                        seen += 1;
                                    }
                                },
                            )
                            .unwrap();
                            assert_eq!(seen, if me == root { n - 1 } else { 0 });
                        }
                        2 => {
                            // alltoall
                            let len = n * blk;
                            a.exchange(
                                &mut YieldIdle,
                                Some(len),
                                fill_blocks(me),
                                Peers::All,
                                |parts| {
                                    for (r, &q) in parts.iter().enumerate() {
                                        check(q, r, me);
                                    }
                                },
                            )
                            .unwrap();
                        }
                        k => {
                            // scan (3) reads ranks 0..=me, exscan (4) ranks 0..me; both post.
                            let below = if k == 3 { me + 1 } else { me };
                            let mut seen = 0;
                            a.exchange(
                                &mut YieldIdle,
                                Some(2),
                                |p| {
                                    // SAFETY: 2 bytes of our slot.
                                    unsafe {
                                        p.write(me as u8);
                                        p.add(1).write(s as u8);
                                    }
                                },
                                Peers::Below(below),
                                |parts| {
                                    for (r, &q) in parts.iter().enumerate() {
                                        if r <= me {
                                            // Own slot: posted; lower ranks: read.
                                            assert!(!q.is_null());
                                            // SAFETY: rank r's 2 bytes of this call.
                                            let got = unsafe { [q.read(), q.add(1).read()] };
                                            assert_eq!(got, [r as u8, s as u8]);
                                            seen += usize::from(r < below);
                                        } else {
                                            assert!(q.is_null(), "rank {r} was not waited for");
                                        }
                                    }
                                },
                            )
                            .unwrap();
                            assert_eq!(seen, below);
                        }
                    }
                }
            });
        }
    }

    /// Ranks that sleep in the kernel at once (with a long timeout) are woken by the
    /// owners of the words they wait on: a missed wake-up would cost the whole timeout.
    #[test]
    fn sleeping_waiters_are_woken() {
        for n in [2, 4] {
            let t = std::time::Instant::now();
            on_threads(n, move |a| {
                let me = a.rank();
                let mut idle = SleepIdle(std::time::Duration::from_secs(10));
                for s in 0..300u64 {
                    let root = (s as usize / 3) % n;
                    match s % 3 {
                        0 => a.barrier(&mut idle).unwrap(),
                        1 if me == root => a
                            .bcast_root(&mut idle, 1, |p| {
                                // SAFETY: one byte of our slot.
                                unsafe { p.write(s as u8) }
                            })
                            .unwrap(),
                        1 => a
                            .bcast_recv(&mut idle, root, |p| {
                                // SAFETY: one byte of this call.
                                assert_eq!(unsafe { p.read() }, s as u8)
                            })
                            .unwrap(),
                        _ => a
                            .reduce(
                                &mut idle,
                                root,
                                1,
                                false,
                                |p| unsafe { p.write(1) },
                                |parts| {
                                    let posted = parts.iter().filter(|q| !q.is_null()).count();
                                    assert_eq!(posted, n - 1);
                                },
                            )
                            .unwrap(),
                    }
                }
            });
            let took = t.elapsed();
            assert!(
                took < std::time::Duration::from_secs(8),
                "n={n}: 300 calls took {took:?}: a sleeper was not woken"
            );
        }
    }
}

/// Protocol cost on this machine, without MPI around it:
/// `cargo test --release -p tsunagi-collectives --lib node_area::timing -- --ignored --nocapture`.
#[cfg(test)]
mod timing {
    use super::tests_support::on_threads;
    use super::*;

    #[test]
    #[ignore = "a measurement, not a check"]
    fn per_call_times() {
        const N: u64 = 200_000;
        for what in ["barrier", "bcast8", "allreduce8", "reduce8"] {
            let t = std::time::Instant::now();
            on_threads(2, move |a| {
                let mut buf = [0u8; 8];
                let mut out = [0u8; 8];
                for _ in 0..N {
                    match what {
                        "barrier" => a.barrier(&mut YieldIdle).unwrap(),
                        "bcast8" if a.rank() == 0 => a
                            .bcast_root(&mut YieldIdle, 8, |p| unsafe {
                                std::ptr::copy_nonoverlapping(buf.as_ptr(), p, 8)
                            })
                            .unwrap(),
                        "bcast8" => a
                            .bcast_recv(&mut YieldIdle, 0, |p| unsafe {
                                std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), 8)
                            })
                            .unwrap(),
                        "reduce8" => a
                            .reduce(
                                &mut YieldIdle,
                                0,
                                8,
                                false,
                                |p| unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), p, 8) },
                                |parts| unsafe {
                                    std::ptr::copy_nonoverlapping(parts[1], out.as_mut_ptr(), 8)
                                },
                            )
                            .unwrap(),
                        _ => a
                            .allreduce(
                                &mut YieldIdle,
                                8,
                                |p| unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), p, 8) },
                                |parts| unsafe {
                                    std::ptr::copy_nonoverlapping(parts[1], out.as_mut_ptr(), 8)
                                },
                            )
                            .unwrap(),
                    }
                }
            });
            eprintln!(
                "{what}: {:.1} ns/call",
                t.elapsed().as_nanos() as f64 / N as f64
            );
        }
    }
}
