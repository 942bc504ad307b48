//! Tsunagi's shared-memory transport: the ranks of one node exchange messages through
//! lock-free rings in a POSIX shared-memory segment, sleep on futex doorbells when idle, and
//! copy large payloads directly out of each other's memory with CMA (`process_vm_readv`).
//!
//! Boundary: this crate implements [`tsunagi_p2p::Transport`] for the peers on this node and
//! nothing else. It moves a 32-byte [`Header`] plus payload per message, in order per peer,
//! never blocks, and offers `read_remote` for single-copy rendezvous; the protocols on top
//! (eager vs. rendezvous, matching, the streamed fallback when CMA is off) belong to
//! `tsunagi-core`. Start-up (who creates, fences, cards) is [`FACTORY`], this transport's
//! [`tsunagi_p2p::boot::TransportFactory`]: the node leader calls
//! [`ShmTransport::create_private`] (an anonymous memfd) and publishes its card, the others
//! [`ShmTransport::attach_card`] after a fence, and the leader [`ShmTransport::unlink`]s
//! (closes the way in) after a second fence. Named segments in /dev/shm
//! ([`ShmTransport::create`], [`ShmTransport::attach`]) serve the tests and benchmarks.
//!
//! Layout and memory ordering are documented in `layout.rs` (what lives where) and
//! `ring.rs` (the single-producer/single-consumer protocol). In short: one segment per node,
//! a slot per local rank (pid, CMA probe address, doorbell), one ring per ordered pair of
//! local ranks, an area of `cells_per_ring` cells in which each message takes the 64-byte
//! lines it needs (an 8-byte message one line, the largest one cell); each record's first
//! cache line carries a stamp (position tag, live bit, length), the header and the first
//! payload bytes, published with one Release store. The producer clears the word the
//! consumer looks at next only when it could pass for a stamp (payload, or a wrapped tag),
//! so once a lap of small messages has gone by a message moves one cache line each way.
//!
//! Sleeping: [`Transport::event_source`] is this rank's doorbell in the segment. A sender
//! rings it only when the receiver announced that it sleeps (otherwise one load, and no
//! fence when both registered for `membarrier`: `barrier.rs`). A sender whose ring is full is woken by the receiver once half the ring has
//! been drained, so a caller with a blocked send should, like the final poll, retry that
//! send between [`EventSource::prepare`] and [`EventSource::sleep`]: a wake-up that came
//! before `prepare` is otherwise only noticed at the sleep's timeout.

use std::cell::Cell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tsunagi_p2p::futex::DoorbellWords;
use tsunagi_p2p::{EventSource, Header, P2pError, Rank, Transport, TransportCounters};

/// Where a transport counts before (or without) [`Transport::count_into`]: nobody reads
/// it, and counting unconditionally keeps a branch off the message path.
static UNCOUNTED: TransportCounters = TransportCounters::new();

use tsunagi_p2p::membarrier as barrier;
mod factory;
mod layout;
mod ring;
mod segment;

pub use factory::{ShmFactory, FACTORY};
use layout::{round_up, InfoLine, Layout, SegHeader, Slot, LINE, MAGIC, PAYLOAD_OFFSET, VERSION};
use ring::{Consumer, Producer, RingRef};
use segment::Mapping;

/// The ring and the segment layout, public only so that `benches/ring.rs` times the real
/// ring code over a layout shaped like the transport's; not part of the API.
#[doc(hidden)]
pub mod internals {
    pub use crate::layout::{Layout, PAYLOAD_OFFSET};
    pub use crate::ring::{Consumer, Popped, Producer, RingRef};
}

/// Tunables of the shared-memory transport.
///
/// The leader's values of `eager_limit`, `cell_bytes` and `cells_per_ring` are stored in the
/// segment and adopted by every attaching rank, so ranks with different environments still
/// agree on the layout; the remaining fields are per process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Largest payload sent eagerly (bytes). Cells grow to hold at least this much.
    pub eager_limit: usize,
    /// Bytes per ring cell including its 40-byte stamp+header (rounded up to 64).
    pub cell_bytes: usize,
    /// Cells per ring (at least 2); reduced automatically when the segment would exceed
    /// `max_segment_bytes`.
    pub cells_per_ring: usize,
    /// Pause iterations an [`EventSource::sleep`] spins watching the doorbell before it
    /// enters the futex (a short spin saves a wake-up system call when the event is near).
    pub spin_iters: u32,
    /// Use CMA (`process_vm_readv`) for single-copy reads when the kernel permits it.
    pub cma: bool,
    /// Messages taken from one peer's ring per `poll` call before moving to the next peer.
    pub poll_batch: usize,
    /// Upper bound for the segment size; `cells_per_ring` shrinks (down to 4) to respect it.
    pub max_segment_bytes: usize,
    /// How long `attach` waits for the leader's segment to appear and be initialised.
    pub attach_timeout: Duration,
}

impl Default for ShmConfig {
    /// 16 KiB eager limit, cells of 16 KiB payload + one header line, 32 cells per ring
    /// (≈ 514 KiB per ring, ≈ 29 MiB for 8 local ranks), CMA on.
    fn default() -> ShmConfig {
        ShmConfig {
            eager_limit: 16 * 1024,
            cell_bytes: 16 * 1024 + LINE,
            cells_per_ring: 32,
            spin_iters: 64,
            cma: true,
            poll_batch: 16,
            max_segment_bytes: 512 << 20,
            attach_timeout: Duration::from_secs(10),
        }
    }
}

fn env_usize(var: &str) -> Option<usize> {
    let v = std::env::var(var).ok()?;
    match v.trim().parse::<usize>() {
        Ok(x) => Some(x),
        Err(_) => {
            eprintln!("tsunagi-shm: ignoring {var}={v:?} (not a number of bytes/count)");
            None
        }
    }
}

impl ShmConfig {
    /// The defaults, overridden by `TSUNAGI_SHM_EAGER` (bytes), `TSUNAGI_SHM_CELL` (bytes per
    /// cell), `TSUNAGI_SHM_CELLS` (cells per ring), `TSUNAGI_SHM_SPIN` (pause iterations)
    /// and `TSUNAGI_SHM_CMA=0` (disable CMA, forcing the streamed rendezvous fallback).
    pub fn from_env() -> ShmConfig {
        let mut c = ShmConfig::default();
        if let Some(e) = env_usize("TSUNAGI_SHM_EAGER") {
            c.eager_limit = e;
        }
        if let Some(b) = env_usize("TSUNAGI_SHM_CELL") {
            c.cell_bytes = b;
        }
        if let Some(n) = env_usize("TSUNAGI_SHM_CELLS") {
            c.cells_per_ring = n;
        }
        if let Some(s) = env_usize("TSUNAGI_SHM_SPIN") {
            c.spin_iters = s.min(u32::MAX as usize) as u32;
        }
        if let Ok(v) = std::env::var("TSUNAGI_SHM_CMA") {
            c.cma = !matches!(v.trim(), "0" | "no" | "off" | "false");
        }
        c
    }

    /// The layout the leader creates for `nlocal` ranks and the eager limit it records.
    #[doc(hidden)]
    pub fn resolve(&self, nlocal: usize) -> (Layout, usize) {
        // Cells are limited to 256 MiB so the length fits the stamp with room to spare.
        let eager = self.eager_limit.min(256 << 20);
        let cell = round_up(
            self.cell_bytes
                .max(eager + PAYLOAD_OFFSET)
                .clamp(2 * LINE, (256 << 20) + LINE),
            LINE,
        );
        let mut cells = self.cells_per_ring.max(2);
        let nrings = nlocal * nlocal.saturating_sub(1);
        if let Some(per_ring) = self.max_segment_bytes.checked_div(nrings) {
            let fit = per_ring.saturating_sub(layout::PAD) / cell;
            if fit < cells {
                cells = fit.max(4).min(cells);
            }
        }
        let l = Layout::new(nlocal, cell, cells);
        (l, eager.min(cell - PAYLOAD_OFFSET))
    }
}

/// True unless the kernel says no such process.
fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Read `dst.len()` bytes at `addr` in process `pid`, looping over partial reads.
fn vm_read(pid: i32, addr: u64, dst: &mut [u8]) -> Result<(), P2pError> {
    let mut done = 0usize;
    while done < dst.len() {
        let rest = dst.len() - done;
        let local = libc::iovec {
            // SAFETY: done < dst.len(), so the pointer stays inside dst.
            iov_base: unsafe { dst.as_mut_ptr().add(done) } as *mut libc::c_void,
            iov_len: rest,
        };
        let remote = libc::iovec {
            iov_base: (addr + done as u64) as *mut libc::c_void,
            iov_len: rest,
        };
        // SAFETY: the local iovec describes memory we exclusively borrow; the kernel checks
        // the remote one against the other process's mappings (and our permission).
        let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if e == libc::EINTR {
                continue;
            }
            return Err(P2pError::Os {
                call: "process_vm_readv",
                errno: e,
            });
        }
        if r == 0 {
            // No progress: the remote range ended in an unmapped page.
            return Err(P2pError::Os {
                call: "process_vm_readv",
                errno: libc::EFAULT,
            });
        }
        done += r as usize;
    }
    Ok(())
}

/// Sending side of one peer.
struct Tx {
    prod: Producer,
    /// The receiver's doorbell.
    bell: NonNull<DoorbellWords>,
    /// The receiver's identity line (pid for failure checks, its wake-up socket).
    info: NonNull<InfoLine>,
    /// The receiver's local index.
    idx: usize,
    peer: Rank,
    /// Consecutive `try_send` calls that found this ring full.
    full_tries: u32,
    /// How this sender orders its stamp store before its look at the receiver's
    /// doorbell: [`FENCE_UNKNOWN`] until the receiver attached, then [`FENCE_NONE`] if both
    /// sides registered for `membarrier` (`barrier.rs`), else [`FENCE_SEQCST`].
    fence: u8,
}

/// [`Tx::fence`]: the receiver has not attached yet; fence, and ask again next time.
const FENCE_UNKNOWN: u8 = 0;
/// [`Tx::fence`]: the receiver's membarrier before it sleeps orders both sides.
const FENCE_NONE: u8 = 1;
/// [`Tx::fence`]: a SeqCst fence on every send.
const FENCE_SEQCST: u8 = 2;

/// Receiving side of one peer.
struct Rx {
    cons: Consumer,
    /// The sender's doorbell (rung when it waits for room).
    bell: NonNull<DoorbellWords>,
    /// The sender's identity line (where its wake-up socket is).
    info: NonNull<InfoLine>,
    /// The sender's local index.
    idx: usize,
    peer: Rank,
}

/// CMA probe states.
const CMA_UNKNOWN: u8 = 0;
const CMA_YES: u8 = 1;
const CMA_NO: u8 = 2;

/// Full-ring attempts between two checks whether the receiver still exists.
const FAILURE_CHECK_EVERY: u32 = 1 << 16;

/// The shared-memory transport of one rank. See the crate documentation.
pub struct ShmTransport {
    map: Arc<Mapping>,
    layout: Layout,
    me: Rank,
    my_idx: usize,
    ranks: Vec<Rank>,
    /// `ranks` is `ranks[0]..=ranks[0]+n-1`: peer lookup is a subtraction.
    contiguous: bool,
    leader: bool,
    /// Per peer (local index with `my_idx` removed).
    tx: Vec<Tx>,
    rx: Vec<Rx>,
    /// Peer the next `poll` starts with (round robin).
    rr: usize,
    eager_limit: usize,
    max_payload: usize,
    poll_batch: usize,
    spin_iters: u32,
    cma_enabled: bool,
    cma: Vec<Cell<u8>>,
    /// An unbound datagram socket for waking peers that wait through their wake-up socket
    /// (made on first need).
    waker: Waker,
    /// MPI_T's counters of this transport kind (see [`Transport::count_into`]).
    counters: &'static TransportCounters,
}

// SAFETY: the raw pointers point into `map`, which the transport keeps alive; the shared
// structures they reach are atomics or protected by the ring protocol, and no state is tied
// to a thread. (Not Sync: `cma` uses Cell, and the rings are single-producer/consumer.)
unsafe impl Send for ShmTransport {}

impl ShmTransport {
    /// Node leader (lowest world rank on the node) creates the segment `/dev/shm/<name>`
    /// (O_CREAT|O_EXCL, mode 0600), sizes and initialises it.
    pub fn create(
        name: &str,
        local_ranks: &[Rank],
        me: Rank,
        cfg: &ShmConfig,
    ) -> Result<ShmTransport, P2pError> {
        ShmTransport::create_with(|len| Mapping::create(name, len), local_ranks, me, cfg)
    }

    /// Like [`ShmTransport::create`], but the segment is an anonymous memfd with no name in
    /// /dev/shm: the others attach with [`ShmTransport::attach_card`] given
    /// [`ShmTransport::card`], and [`ShmTransport::unlink`] closes that way in. Nothing is
    /// left behind however the job dies.
    pub fn create_private(
        label: &str,
        local_ranks: &[Rank],
        me: Rank,
        cfg: &ShmConfig,
    ) -> Result<ShmTransport, P2pError> {
        ShmTransport::create_with(
            |len| Mapping::create_memfd(label, len),
            local_ranks,
            me,
            cfg,
        )
    }

    /// How the other local ranks attach to a segment made by
    /// [`ShmTransport::create_private`] (until [`ShmTransport::unlink`]).
    pub fn card(&self) -> Option<String> {
        self.map.card()
    }

    fn create_with(
        make: impl FnOnce(usize) -> Result<Mapping, P2pError>,
        local_ranks: &[Rank],
        me: Rank,
        cfg: &ShmConfig,
    ) -> Result<ShmTransport, P2pError> {
        let my_idx = check_ranks(local_ranks, me)?;
        let (layout, eager) = cfg.resolve(local_ranks.len());
        let map = make(layout.total_bytes)?;
        let base = map.base();
        // SAFETY: the mapping is at least `total_bytes` long, page aligned, zero filled and
        // not yet visible to anyone else as initialised (magic is still 0), so writing the
        // plain header fields and slot ranks is race free.
        unsafe {
            let h = &mut *(base as *mut SegHeader);
            h.version = VERSION;
            h.nlocal = local_ranks.len() as u32;
            h.cell_bytes = layout.cell_bytes as u64;
            h.cells_per_ring = layout.cells_per_ring as u64;
            h.eager_limit = eager as u64;
            h.slots_offset = layout.slots_offset as u64;
            h.rings_offset = layout.rings_offset as u64;
            h.ring_stride = layout.ring_stride as u64;
            h.total_bytes = layout.total_bytes as u64;
            for (i, &r) in local_ranks.iter().enumerate() {
                let slot = &mut *(base.add(layout.slot_offset(i)) as *mut Slot);
                slot.info.world_rank = r;
            }
            // Release: everything above is visible to whoever Acquire-loads the magic.
            (*(base as *const SegHeader))
                .magic
                .store(MAGIC, Ordering::Release);
        }
        ShmTransport::finish(
            Arc::new(map),
            layout,
            eager,
            local_ranks,
            me,
            my_idx,
            true,
            cfg,
        )
    }

    /// The other local ranks attach after the leader created it (the core puts a PMI
    /// barrier in between; this also tolerates launch skew by waiting up to
    /// `cfg.attach_timeout` for the segment to appear).
    pub fn attach(
        name: &str,
        local_ranks: &[Rank],
        me: Rank,
        cfg: &ShmConfig,
    ) -> Result<ShmTransport, P2pError> {
        let map = Mapping::open(name, cfg.attach_timeout, std::mem::size_of::<SegHeader>())?;
        ShmTransport::attach_to(map, local_ranks, me, cfg)
    }

    /// Attach to a segment made by [`ShmTransport::create_private`], given its
    /// [`ShmTransport::card`].
    pub fn attach_card(
        card: &str,
        local_ranks: &[Rank],
        me: Rank,
        cfg: &ShmConfig,
    ) -> Result<ShmTransport, P2pError> {
        let map = Mapping::open_card(card, std::mem::size_of::<SegHeader>())?;
        ShmTransport::attach_to(map, local_ranks, me, cfg)
    }

    fn attach_to(
        map: Mapping,
        local_ranks: &[Rank],
        me: Rank,
        cfg: &ShmConfig,
    ) -> Result<ShmTransport, P2pError> {
        let name = map.name().to_string();
        let my_idx = check_ranks(local_ranks, me)?;
        let deadline = std::time::Instant::now() + cfg.attach_timeout;
        let base = map.base();
        // SAFETY: the mapping holds at least a SegHeader (checked by open); magic is atomic.
        let hdr = unsafe { &*(base as *const SegHeader) };
        // Acquire pairs with the leader's Release store of the magic.
        while hdr.magic.load(Ordering::Acquire) != MAGIC {
            if std::time::Instant::now() >= deadline {
                return Err(P2pError::Other(format!(
                    "shm segment {name}: not initialised by the leader in time (bad magic)"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if hdr.version != VERSION {
            return Err(P2pError::Other(format!(
                "shm segment {name}: layout version {} but this library speaks {VERSION}",
                hdr.version
            )));
        }
        if hdr.nlocal as usize != local_ranks.len() {
            return Err(P2pError::Other(format!(
                "shm segment {name}: created for {} local ranks, attaching with {}",
                hdr.nlocal,
                local_ranks.len()
            )));
        }
        let cell = hdr.cell_bytes as usize;
        let cells = hdr.cells_per_ring as usize;
        if cell & (LINE - 1) != 0 || cell <= PAYLOAD_OFFSET || cells < 2 {
            return Err(P2pError::Other(format!(
                "shm segment {name}: bad geometry ({cells} cells of {cell} bytes)"
            )));
        }
        let layout = Layout::new(local_ranks.len(), cell, cells);
        if layout.total_bytes as u64 != hdr.total_bytes
            || layout.rings_offset as u64 != hdr.rings_offset
            || layout.total_bytes > map.len()
        {
            return Err(P2pError::Other(format!(
                "shm segment {name}: layout mismatch (size {} vs {})",
                hdr.total_bytes, layout.total_bytes
            )));
        }
        for (i, &r) in local_ranks.iter().enumerate() {
            // SAFETY: slot i is inside the mapping (layout checked against its length);
            // world_rank was written before the magic we acquired.
            let wr = unsafe {
                (*(base.add(layout.slot_offset(i)) as *const Slot))
                    .info
                    .world_rank
            };
            if wr != r {
                return Err(P2pError::Other(format!(
                    "shm segment {name}: local rank {i} is world rank {wr}, expected {r}"
                )));
            }
        }
        let eager = (hdr.eager_limit as usize).min(cell - PAYLOAD_OFFSET);
        ShmTransport::finish(
            Arc::new(map),
            layout,
            eager,
            local_ranks,
            me,
            my_idx,
            false,
            cfg,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        map: Arc<Mapping>,
        layout: Layout,
        eager: usize,
        local_ranks: &[Rank],
        me: Rank,
        my_idx: usize,
        leader: bool,
        cfg: &ShmConfig,
    ) -> Result<ShmTransport, P2pError> {
        let base = map.base();
        let n = local_ranks.len();
        let slot = |i: usize| -> NonNull<Slot> {
            // SAFETY: i < n and the layout fits the mapping.
            NonNull::new(unsafe { base.add(layout.slot_offset(i)) } as *mut Slot).unwrap()
        };
        let ring = |s: usize, r: usize| -> RingRef {
            // SAFETY: the ring (s, r) lies inside the mapping, is 128-aligned (page-aligned
            // base + multiples of 128), zero-initialised by tmpfs, and in this process only
            // this transport's single Producer or Consumer for it will use it.
            unsafe {
                RingRef::new(
                    base.add(layout.ring_offset(s, r)),
                    layout.cells_per_ring,
                    layout.cell_bytes,
                )
            }
        };
        let mut tx = Vec::with_capacity(n.saturating_sub(1));
        let mut rx = Vec::with_capacity(n.saturating_sub(1));
        for (i, &peer) in local_ranks.iter().enumerate() {
            if i == my_idx {
                continue;
            }
            let s = slot(i);
            // SAFETY: s points to a Slot in the live mapping; we only form field pointers.
            let (bell, info) = unsafe {
                (
                    NonNull::from(&(*s.as_ptr()).bell.words),
                    NonNull::from(&(*s.as_ptr()).info),
                )
            };
            tx.push(Tx {
                prod: Producer::new(ring(my_idx, i)),
                bell,
                info,
                idx: i,
                peer,
                full_tries: 0,
                fence: FENCE_UNKNOWN,
            });
            rx.push(Rx {
                cons: Consumer::new(ring(i, my_idx)),
                bell,
                info,
                idx: i,
                peer,
            });
        }
        // Publish who we are: base address and how we sleep first, pid last with Release,
        // so a peer that sees our pid also sees them.
        // SAFETY: our own slot, inside the mapping; fields are atomics.
        unsafe {
            let info = &(*slot(my_idx).as_ptr()).info;
            info.base_addr.store(base as u64, Ordering::Relaxed);
            info.heavy_sleeper
                .store(barrier::registered() as u32, Ordering::Relaxed);
            info.pid.store(libc::getpid(), Ordering::Release);
        }
        let contiguous = local_ranks[n - 1] - local_ranks[0] == (n - 1) as Rank;
        Ok(ShmTransport {
            map,
            layout,
            me,
            my_idx,
            ranks: local_ranks.to_vec(),
            contiguous,
            leader,
            tx,
            rx,
            rr: 0,
            eager_limit: eager,
            max_payload: layout.cell_bytes - PAYLOAD_OFFSET,
            poll_batch: cfg.poll_batch.max(1),
            spin_iters: cfg.spin_iters,
            cma_enabled: cfg.cma,
            cma: (0..n).map(|_| Cell::new(CMA_UNKNOWN)).collect(),
            waker: Waker::default(),
            counters: &UNCOUNTED,
        })
    }

    /// Remove the name from /dev/shm, or close a private segment's way in (the start-up
    /// calls it on the leader after a second fence, once every local rank attached;
    /// mappings stay valid). Idempotent.
    pub fn unlink(&self) -> Result<(), P2pError> {
        self.map.unlink()
    }

    /// Remove `/dev/shm/<name>` ignoring errors (for cleanup paths such as abort).
    pub fn unlink_name(name: &str) {
        segment::unlink_name(name)
    }

    /// The segment name (without the leading '/').
    pub fn segment_name(&self) -> &str {
        self.map.name()
    }

    /// Size of the mapped segment in bytes.
    pub fn segment_bytes(&self) -> usize {
        self.map.len()
    }

    /// The world ranks on this node, ascending.
    pub fn local_ranks(&self) -> &[Rank] {
        &self.ranks
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// Bytes per ring cell and cells per ring, as laid out by the leader.
    pub fn geometry(&self) -> (usize, usize) {
        (self.layout.cell_bytes, self.layout.cells_per_ring)
    }

    /// True once every local rank has attached (published its pid).
    pub fn all_attached(&self) -> bool {
        (0..self.ranks.len()).all(|i| self.slot_info(i).pid.load(Ordering::Acquire) != 0)
    }

    /// The pid `peer` published when it attached, if it has.
    pub fn peer_pid(&self, peer: Rank) -> Option<i32> {
        let i = self.ranks.binary_search(&peer).ok()?;
        match self.slot_info(i).pid.load(Ordering::Acquire) {
            0 => None,
            p => Some(p),
        }
    }

    fn slot_info(&self, i: usize) -> &InfoLine {
        // SAFETY: i < nlocal; the slot lies inside the mapping we hold; pid/base_addr are
        // atomics and world_rank is immutable after creation.
        unsafe { &(*(self.map.base().add(self.layout.slot_offset(i)) as *const Slot)).info }
    }

    /// Local index of `peer` (not `me`), as an index into `tx`/`rx`.
    #[inline]
    fn peer_index(&self, peer: Rank) -> Option<usize> {
        let idx = if self.contiguous {
            let i = peer.wrapping_sub(self.ranks[0]) as usize;
            if i >= self.ranks.len() {
                return None;
            }
            i
        } else {
            self.ranks.binary_search(&peer).ok()?
        };
        if idx == self.my_idx {
            return None;
        }
        Some(idx - (idx > self.my_idx) as usize)
    }

    fn no_route(&self, peer: Rank) -> P2pError {
        if peer == self.me {
            P2pError::Unsupported("shm does not send to self".into())
        } else {
            P2pError::Unsupported(format!("rank {peer} is not on this node"))
        }
    }

    /// Probe CMA towards local index `i`: read the magic at the peer's mapping address.
    fn probe_cma(&self, i: usize) -> u8 {
        let info = self.slot_info(i);
        let pid = info.pid.load(Ordering::Acquire);
        if pid == 0 {
            return CMA_UNKNOWN; // not attached yet; ask again later
        }
        let addr = info.base_addr.load(Ordering::Relaxed);
        let mut buf = [0u8; 8];
        match vm_read(pid, addr, &mut buf) {
            Ok(()) if u64::from_ne_bytes(buf) == MAGIC => CMA_YES,
            _ => CMA_NO,
        }
    }

    #[cold]
    fn on_full(&mut self, pi: usize) -> Result<bool, P2pError> {
        let tx = &mut self.tx[pi];
        tx.full_tries = tx.full_tries.wrapping_add(1);
        if tx.full_tries & (FAILURE_CHECK_EVERY - 1) == 0 {
            // SAFETY: info points into our live mapping; pid is atomic.
            let pid = unsafe { tx.info.as_ref() }.pid.load(Ordering::Acquire);
            if pid != 0 && !pid_alive(pid) {
                return Err(P2pError::PeerFailed {
                    peer: tx.peer,
                    why: format!("process {pid} is gone and its shm ring stays full"),
                });
            }
        }
        Ok(false)
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        // A leader that goes away (also on error paths before the core's unlink) must not
        // leave its name behind; after unlink() this is a no-op.
        if self.leader {
            let _ = self.map.unlink();
        }
    }
}

fn check_ranks(local_ranks: &[Rank], me: Rank) -> Result<usize, P2pError> {
    if local_ranks.is_empty() || local_ranks.len() > u16::MAX as usize {
        return Err(P2pError::Other(format!(
            "shm: {} local ranks (need 1..=65535)",
            local_ranks.len()
        )));
    }
    if local_ranks.windows(2).any(|w| w[0] >= w[1]) {
        return Err(P2pError::Other(
            "shm: local ranks must be strictly ascending".into(),
        ));
    }
    local_ranks
        .binary_search(&me)
        .map_err(|_| P2pError::Other(format!("shm: rank {me} is not among the local ranks")))
}

/// How a sender orders its sends towards the receiver `tx` ([`Tx::fence`]), once the
/// receiver has attached.
#[cold]
fn fence_towards(tx: &Tx) -> u8 {
    // SAFETY: the receiver's identity line inside our live mapping; fields are atomics.
    let info = unsafe { tx.info.as_ref() };
    // Acquire pairs with the receiver's Release of its pid: `heavy_sleeper` was written
    // before.
    if info.pid.load(Ordering::Acquire) == 0 {
        return FENCE_UNKNOWN;
    }
    if barrier::registered() && info.heavy_sleeper.load(Ordering::Relaxed) == 1 {
        FENCE_NONE
    } else {
        FENCE_SEQCST
    }
}

/// Ring `bell` if its owner announced that it sleeps (or is about to).
///
/// The caller has ordered its Release of the stamp before this load of `sleeping`: with a
/// SeqCst fence, or, when both sides registered for it, by the sleeper's `membarrier`
/// (`barrier.rs`). The sleeper has SeqCst on `sleeping.fetch_add`, then that membarrier
/// or a SeqCst fence, before its final poll (see [`ShmEvents::prepare`] and
/// [`ShmEvents::prepare_wait`]). Either we see `sleeping != 0` and ring (bumping `count`,
/// which makes a futex wait return, and sending a datagram to the wake-up socket of a
/// sleeper that waits through it), or its final poll sees our message. Skipping the atomic
/// add when nobody sleeps keeps the doorbell line shared-clean among many senders.
#[inline]
fn notify(bell: &DoorbellWords, info: &InfoLine, idx: usize, waker: &Waker) {
    if bell.sleeping.load(Ordering::Relaxed) != 0 {
        ring(bell, info, idx, waker);
    }
}

/// Sleepers that wait through the wake-up socket ([`EventSource::wait_fd`], one wait over
/// several transports) count in the upper half of the doorbell's `sleeping` word, futex
/// sleepers in the lower half.
const FD_SLEEPER: u32 = 1 << 16;

/// Ring a doorbell: wake its futex sleepers and, if its owner waits through its wake-up
/// socket, send that a datagram.
#[cold]
fn ring(bell: &DoorbellWords, info: &InfoLine, idx: usize, waker: &Waker) {
    bell.count.fetch_add(1, Ordering::SeqCst);
    let sleeping = bell.sleeping.load(Ordering::SeqCst);
    if !sleeping.is_multiple_of(FD_SLEEPER) {
        tsunagi_p2p::futex::futex_wake(&bell.count, i32::MAX);
    }
    if sleeping >= FD_SLEEPER {
        waker.wake(info, idx);
    }
}

/// The abstract Unix socket name of a rank's wake-up socket: its pid, where it mapped the
/// segment (two segments in one process differ) and its slot. Abstract names vanish with
/// their socket: nothing is left behind.
fn wake_addr(pid: i32, base: u64, idx: usize) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name = format!("tsunagi-shm-wake-{pid}-{base:x}-{idx}");
    // sun_path[0] stays 0: the abstract namespace.
    for (d, b) in addr.sun_path[1..].iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    (addr, len as libc::socklen_t)
}

fn dgram_socket() -> Option<OwnedFd> {
    // SAFETY: plain system call, checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    // SAFETY: a fresh descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The sending half of wake-up sockets: one unbound datagram socket per transport.
#[derive(Default)]
struct Waker {
    sock: std::sync::OnceLock<Option<OwnedFd>>,
}

impl Waker {
    /// Send one byte to the wake-up socket of the rank in slot `idx` (described by `info`).
    /// A full socket buffer or a socket not there (yet, or any more) is fine: a full one is
    /// readable already, and a rank without one does not wait through it.
    fn wake(&self, info: &InfoLine, idx: usize) {
        let Some(sock) = self.sock.get_or_init(dgram_socket) else {
            return;
        };
        let pid = info.pid.load(Ordering::Acquire);
        let base = info.base_addr.load(Ordering::Relaxed);
        let (addr, len) = wake_addr(pid, base, idx);
        // SAFETY: a one-byte buffer on our stack and a valid address of `len` bytes.
        unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                [1u8].as_ptr().cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
    }
}

impl Transport for ShmTransport {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn eager_limit(&self) -> usize {
        self.eager_limit
    }

    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn caps(&self) -> tsunagi_p2p::TransportCaps {
        tsunagi_p2p::TransportCaps {
            eager_limit: self.eager_limit,
            max_payload: self.max_payload,
            // Single copy by process_vm_readv: no registration, reads only.
            rdma_read: self.cma_enabled,
            rdma_write: false,
            needs_registration: false,
            ordered: true,
            timers: false,
        }
    }

    fn single_copy(&self, peer: Rank) -> bool {
        if !self.cma_enabled {
            return false;
        }
        let Ok(i) = self.ranks.binary_search(&peer) else {
            return false;
        };
        if i == self.my_idx {
            return false;
        }
        let c = &self.cma[i];
        if c.get() == CMA_UNKNOWN {
            c.set(self.probe_cma(i));
        }
        c.get() == CMA_YES
    }

    #[inline]
    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        if payload.len() > self.max_payload {
            return Err(P2pError::Other(format!(
                "shm: payload of {} bytes exceeds max_payload {}",
                payload.len(),
                self.max_payload
            )));
        }
        let Some(pi) = self.peer_index(peer) else {
            return Err(self.no_route(peer));
        };
        let tx = &mut self.tx[pi];
        if !tx.prod.try_push(hdr, payload) {
            return self.on_full(pi);
        }
        tx.full_tries = 0;
        self.counters.sent(payload.len());
        if tx.fence == FENCE_NONE {
            // The receiver's membarrier orders us (barrier.rs); the compiler must not move
            // the doorbell load above the stamp store either.
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
            if tx.fence == FENCE_UNKNOWN {
                tx.fence = fence_towards(tx);
            }
        }
        // SAFETY: bell and info point into the receiver's slot inside our live mapping.
        notify(
            unsafe { tx.bell.as_ref() },
            unsafe { tx.info.as_ref() },
            tx.idx,
            &self.waker,
        );
        Ok(true)
    }

    #[inline]
    fn poll(&mut self, sink: &mut tsunagi_p2p::Sink<'_>) -> Result<usize, P2pError> {
        let n = self.rx.len();
        if n == 0 {
            return Ok(0);
        }
        let start = self.rr;
        self.rr = if start + 1 == n { 0 } else { start + 1 };
        let mut total = 0;
        for k in 0..n {
            let i = if start + k >= n {
                start + k - n
            } else {
                start + k
            };
            let rx = &mut self.rx[i];
            let peer = rx.peer;
            let counters = self.counters;
            let got = rx.cons.pop(self.poll_batch, |h, p| {
                counters.recvd(p.len());
                sink(peer, h, p)
            });
            if got.wake_producer {
                // SAFETY: the sender's slot inside our live mapping.
                let (bell, info) = unsafe { (rx.bell.as_ref(), rx.info.as_ref()) };
                ring(bell, info, rx.idx, &self.waker);
            }
            total += got.count;
        }
        Ok(total)
    }

    fn read_remote(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        if !self.cma_enabled {
            return Err(P2pError::Unsupported(
                "shm: CMA disabled (TSUNAGI_SHM_CMA=0)".into(),
            ));
        }
        let i = match self.ranks.binary_search(&peer) {
            Ok(i) if i != self.my_idx => i,
            _ => return Err(self.no_route(peer)),
        };
        let pid = self.slot_info(i).pid.load(Ordering::Acquire);
        if pid == 0 {
            return Err(P2pError::Other(format!(
                "shm: rank {peer} has not attached; its pid is unknown"
            )));
        }
        vm_read(pid, remote_addr, dst)?;
        self.counters.read(dst.len());
        Ok(())
    }

    fn count_into(&mut self, c: &'static TransportCounters) -> bool {
        self.counters = c;
        true
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        // SAFETY: our slot lies in the mapping the event source keeps alive via its Arc.
        let words = unsafe {
            NonNull::from(
                &(*(self.map.base().add(self.layout.slot_offset(self.my_idx)) as *const Slot))
                    .bell
                    .words,
            )
        };
        // SAFETY: as above.
        let info = unsafe {
            NonNull::from(
                &(*(self.map.base().add(self.layout.slot_offset(self.my_idx)) as *const Slot)).info,
            )
        };
        Arc::new(ShmEvents {
            _map: self.map.clone(),
            words,
            info,
            idx: self.my_idx,
            spin_iters: self.spin_iters,
            wake_sock: std::sync::OnceLock::new(),
            waker: Waker::default(),
            heavy: barrier::registered(),
            degraded: AtomicBool::new(false),
        })
    }
}

/// This rank's doorbell in the segment, as an [`EventSource`]. Holds the mapping alive.
pub struct ShmEvents {
    _map: Arc<Mapping>,
    words: NonNull<DoorbellWords>,
    /// Our identity line (its pid and base address name the wake-up socket).
    info: NonNull<InfoLine>,
    idx: usize,
    spin_iters: u32,
    /// Our wake-up socket, bound on the first [`EventSource::wait_fd`]; `None` if that
    /// failed (then this source cannot join a registry).
    wake_sock: std::sync::OnceLock<Option<OwnedFd>>,
    /// For `notify` of a sleeper that waits through the socket.
    waker: Waker,
    /// We published `heavy_sleeper`: registered senders do not fence, and every sleep is
    /// preceded by the heavy barrier (`barrier.rs`).
    heavy: bool,
    /// A heavy barrier failed: a sender's message may have gone unnoticed by the final
    /// poll, so sleeps last at most [`DEGRADED_NAP`].
    degraded: AtomicBool,
}

/// The longest sleep once a heavy barrier failed (see [`ShmEvents::degraded`]).
const DEGRADED_NAP: Duration = Duration::from_millis(1);

// SAFETY: `words` points into the mapping `_map` keeps alive; DoorbellWords is all atomics.
unsafe impl Send for ShmEvents {}
// SAFETY: as above.
unsafe impl Sync for ShmEvents {}

impl ShmEvents {
    #[inline]
    fn words(&self) -> &DoorbellWords {
        // SAFETY: see the Send/Sync justification.
        unsafe { self.words.as_ref() }
    }

    /// After announcing a sleep and before the final poll: order the senders that skip
    /// their fence (the heavy half of the asymmetric fence, `barrier.rs`).
    fn order_senders(&self) {
        if self.heavy && !barrier::heavy() && !self.degraded.swap(true, Ordering::Relaxed) {
            eprintln!("tsunagi-shm: membarrier failed; waits poll every millisecond");
        }
    }

    /// The longest sleep allowed now.
    fn cap(&self, timeout: Duration) -> Duration {
        if self.degraded.load(Ordering::Relaxed) {
            timeout.min(DEGRADED_NAP)
        } else {
            timeout
        }
    }
}

impl EventSource for ShmEvents {
    fn prepare(&self) -> u64 {
        let t = self.words().prepare();
        // Pairs with the sender's fence or compiler fence before `notify`: orders our
        // `sleeping` increment before the caller's final poll of the rings.
        fence(Ordering::SeqCst);
        self.order_senders();
        t
    }

    fn sleep(&self, token: u64, timeout: Duration) {
        let w = self.words();
        // A short spin catches a message that is about to arrive without a futex round trip.
        for _ in 0..self.spin_iters {
            if w.count.load(Ordering::Acquire) as u64 != token {
                break;
            }
            std::hint::spin_loop();
        }
        w.sleep(token, self.cap(timeout));
    }

    fn cancel(&self) {
        self.words().cancel()
    }

    fn notify(&self) {
        // SAFETY: our slot inside the mapping `_map` keeps alive.
        ring(
            self.words(),
            unsafe { self.info.as_ref() },
            self.idx,
            &self.waker,
        )
    }

    /// A datagram socket in the abstract namespace, named after our slot: senders that see
    /// a sleeper counted in the upper half of `sleeping` send it a byte.
    fn wait_fd(&self) -> Option<RawFd> {
        self.wake_sock
            .get_or_init(|| {
                // SAFETY: our slot inside the mapping `_map` keeps alive.
                let info = unsafe { self.info.as_ref() };
                let pid = info.pid.load(Ordering::Acquire);
                if pid == 0 {
                    return None;
                }
                let sock = dgram_socket()?;
                let (addr, len) = wake_addr(pid, info.base_addr.load(Ordering::Relaxed), self.idx);
                // SAFETY: a valid socket and an address of `len` bytes.
                let r = unsafe {
                    libc::bind(
                        sock.as_raw_fd(),
                        (&addr as *const libc::sockaddr_un).cast(),
                        len,
                    )
                };
                (r == 0).then_some(sock)
            })
            .as_ref()
            .map(|s| s.as_raw_fd())
    }

    fn prepare_wait(&self) -> Duration {
        self.words()
            .sleeping
            .fetch_add(FD_SLEEPER, Ordering::SeqCst);
        // Pairs with the sender's side of `notify`, as in `prepare`.
        fence(Ordering::SeqCst);
        self.order_senders();
        self.cap(Duration::MAX)
    }

    fn end_wait(&self) {
        self.words()
            .sleeping
            .fetch_sub(FD_SLEEPER, Ordering::SeqCst);
        let Some(Some(sock)) = self.wake_sock.get() else {
            return;
        };
        // Consume the wake-ups, so that the next wait blocks again.
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reads at most 64 bytes into `buf`; non-blocking.
            let n = unsafe {
                libc::recv(
                    sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                break;
            }
        }
    }
}
