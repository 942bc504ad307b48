//! A window: its memory, what every rank knows of the others, creation (every flavor),
//! attributes, dynamic attach/detach, shared queries and freeing. The target side is in
//! `target.rs`, operations and synchronisation in `origin.rs`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};

use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::group::Group;
use tsunagi_core::{CommId, ErrorClass, MpiError, MpiResult, ReqId, Runtime};

use crate::origin::OriginState;
use crate::shm::Segment;

/// `MPI_LOCK_EXCLUSIVE` / `MPI_LOCK_SHARED` (MPICH's values).
pub const LOCK_EXCLUSIVE: i32 = 234;
pub const LOCK_SHARED: i32 = 235;
/// The assertions (MPICH's values).
pub const MODE_NOCHECK: i32 = 1024;
pub const MODE_NOSTORE: i32 = 2048;
pub const MODE_NOPUT: i32 = 4096;
pub const MODE_NOPRECEDE: i32 = 8192;
pub const MODE_NOSUCCEED: i32 = 16384;
const ALL_MODES: i32 = MODE_NOCHECK | MODE_NOSTORE | MODE_NOPUT | MODE_NOPRECEDE | MODE_NOSUCCEED;

/// Tags on the window's private communicator.
pub(crate) const TAG_REQ: i32 = 1;
pub(crate) const TAG_DATA: i32 = 2;
pub(crate) const TAG_REPLY: i32 = 3;
pub(crate) const TAG_ACK: i32 = 4;
/// The target's receive buffer for requests: a request (header, runs, inline data) up to
/// this size is one message; larger data, or a larger request, follows on `TAG_DATA`.
pub(crate) const REQ_BUF: usize = 64 * 1024;

/// How the window's memory was made (`MPI_WIN_CREATE_FLAVOR`, MPICH's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Create = 1,
    Allocate = 2,
    Dynamic = 3,
    Shared = 4,
}

/// `MPI_WIN_UNIFIED`: public and private copies are the same memory (the only model here).
pub const MODEL_UNIFIED: i32 = 2;

/// What a rank knows of a peer's window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    pub size: u64,
    pub disp_unit: u64,
}

enum Memory {
    /// The program's memory (MPI_Win_create) or none (dynamic).
    User,
    /// MPI_Win_allocate: ours, 64-byte aligned.
    Owned(*mut u8, std::alloc::Layout),
    /// MPI_Win_allocate_shared, and MPI_Win_allocate: the node's segment, with the offset
    /// of each rank's memory and accumulate lock word in it (None: another node).
    Shared(Segment, NodeLayout),
}

/// Where each rank's memory and lock word are in a node segment.
pub(crate) struct NodeLayout {
    data: Vec<Option<usize>>,
    locks: Vec<Option<usize>>,
}

/// Map one segment per node holding the memory of the node's ranks (collective over
/// `wcomm`): the node's first rank creates it, the others attach. Returns the segment, the
/// layout and this rank's base. Parts are `align`-byte aligned: 1 lays them out
/// contiguously, as MPI_Win_allocate_shared does by default.
fn node_segment(
    rt: &Runtime,
    call: &str,
    wcomm: CommId,
    peers: &[Peer],
    align: usize,
) -> MpiResult<(*mut u8, Memory)> {
    let nodes = rt.comm_nodes(wcomm)?;
    let me = rt.comm_rank(wcomm)?;
    let local: Vec<usize> = (0..peers.len())
        .filter(|&r| nodes[r] == nodes[me])
        .collect();
    let mut data = vec![None; peers.len()];
    let mut total = 0usize;
    for &r in &local {
        data[r] = Some(total);
        total += (peers[r].size as usize).div_ceil(align) * align;
    }
    // After the data: one accumulate lock word per local rank, 64 bytes apart.
    let total = total.div_ceil(64) * 64;
    let mut locks = vec![None; peers.len()];
    for (i, &r) in local.iter().enumerate() {
        locks[r] = Some(total + 64 * i);
    }
    let total = total + 64 * local.len();
    let leader = local[0];
    let mut seg = if me == leader {
        Some(Segment::create(call, total)?)
    } else {
        None
    };
    let card = seg.as_ref().map(|s| s.card()).unwrap_or_default();
    let cards = rt.allgather_bytes(call, wcomm, card.as_bytes())?;
    if seg.is_none() {
        let card = String::from_utf8_lossy(&cards[leader]).into_owned();
        seg = Some(Segment::attach(call, &card, total)?);
    }
    // Everyone has mapped it: the creator's descriptor can go.
    rt.barrier_internal(wcomm)?;
    let mut seg = seg.expect("made or attached");
    seg.seal();
    // SAFETY: offsets lie within the `total` bytes mapped.
    let base = unsafe { seg.base().add(data[me].expect("a local rank")) };
    Ok((base, Memory::Shared(seg, NodeLayout { data, locks })))
}

/// Lock state at the target.
#[derive(Default)]
pub(crate) struct Locks {
    pub exclusive: Option<usize>,
    pub shared: usize,
    pub queue: VecDeque<(usize, bool)>,
}

/// A message the target is waiting for the rest of.
pub(crate) enum Awaiting {
    /// The request itself (after a `BIG` stub).
    Request {
        src: usize,
        req: ReqId,
        buf: Vec<u8>,
    },
    /// The data of a request; `direct` when it was received straight into the window.
    Data {
        src: usize,
        req: ReqId,
        head: crate::wire::Request,
        buf: Vec<u8>,
        direct: bool,
    },
}

/// The target side's state (the service owns it while it runs).
pub(crate) struct TargetState {
    pub buf: Box<[u8]>,
    pub posted: Option<ReqId>,
    pub awaiting: Option<Awaiting>,
    /// Answers in flight and the buffers they send from.
    pub replies: Vec<(ReqId, Vec<u8>)>,
    pub locks: Locks,
    /// Refused operations per origin since its last acknowledgement.
    pub errors: Vec<u32>,
    /// First refusal's description per origin (for the origin's error message we only
    /// send a count; this goes to our stderr once).
    pub warned: bool,
}

/// One MPI window.
pub struct Window {
    pub(crate) rt: &'static Runtime,
    /// The private duplicate of the window's communicator all RMA traffic uses.
    pub(crate) wcomm: CommId,
    pub(crate) group: Arc<Group>,
    pub(crate) rank: usize,
    pub(crate) nranks: usize,
    pub(crate) flavor: Flavor,
    pub(crate) base: usize,
    pub(crate) size: usize,
    pub(crate) disp_unit: usize,
    pub(crate) peers: Vec<Peer>,
    memory: Memory,
    /// Dynamic windows: attached regions (address, length).
    pub(crate) regions: Mutex<Vec<(usize, usize)>>,
    pub(crate) target: Mutex<TargetState>,
    /// A call of the service found `target` busy: the one serving makes another pass.
    pub(crate) again: AtomicBool,
    /// The thread serving now (its `target::this_thread`), 0 if none: tells a re-entering
    /// call from another thread's.
    pub(crate) advancer: AtomicUsize,
    /// POST messages received from each rank and not yet consumed by MPI_Win_start.
    pub(crate) posts: Vec<AtomicU32>,
    /// COMPLETE messages received in total.
    pub(crate) completes: AtomicU64,
    /// FENCE messages received from each rank.
    pub(crate) fences: Vec<AtomicU64>,
    pub(crate) origin: Mutex<OriginState>,
    /// Held while an operation is issued, so that requests and their posted replies are
    /// in the same order on the wire as in the posted-receive queue.
    pub(crate) issuing: Mutex<()>,
    service: Mutex<Option<u64>>,
    name: Mutex<String>,
    pub(crate) byte: TypeRef,
}

// SAFETY: the raw pointers in `Memory` are addresses of memory the window owns (or the
// program lent it for the window's life); all access goes through the window's locks or
// MPI's synchronisation rules.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

/// `TSUNAGI_RMA_DIRECT=0`: MPI_Win_allocate keeps private memory, so every operation takes
/// the message path (tests use it to cover both paths).
fn direct_access() -> bool {
    std::env::var("TSUNAGI_RMA_DIRECT").map_or(true, |v| v != "0")
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn err(class: ErrorClass, msg: String) -> MpiError {
    MpiError::new(class, msg)
}

fn check_assert(call: &str, assert: i32) -> MpiResult<()> {
    if assert & !ALL_MODES != 0 {
        return Err(err(
            ErrorClass::Assert,
            format!("{call}: assert {assert:#x} has bits that are not MPI_MODE_* values"),
        ));
    }
    Ok(())
}

impl Window {
    /// `MPI_Win_create`: expose `size` bytes at `base` (collective over `comm`).
    ///
    /// # Safety
    /// `base..base+size` must stay valid memory until the window is freed; the target
    /// side writes it when peers put and accumulate.
    pub unsafe fn create(
        rt: &'static Runtime,
        comm: CommId,
        base: *mut u8,
        size: usize,
        disp_unit: i64,
    ) -> MpiResult<Arc<Window>> {
        Self::build(
            rt,
            "MPI_Win_create",
            comm,
            Flavor::Create,
            size,
            disp_unit,
            |_, _| Ok((base, Memory::User)),
        )
    }

    /// `MPI_Win_allocate`: a window of `size` new bytes (zeroed, 64-byte aligned).
    pub fn allocate(
        rt: &'static Runtime,
        comm: CommId,
        size: usize,
        disp_unit: i64,
    ) -> MpiResult<Arc<Window>> {
        Self::build(
            rt,
            "MPI_Win_allocate",
            comm,
            Flavor::Allocate,
            size,
            disp_unit,
            |wcomm, peers| {
                if direct_access() {
                    return node_segment(rt, "MPI_Win_allocate", wcomm, peers, 64);
                }
                let layout =
                    std::alloc::Layout::from_size_align(size.max(1), 64).map_err(|_| {
                        err(
                            ErrorClass::Size,
                            format!("MPI_Win_allocate: size {size} is too large"),
                        )
                    })?;
                // SAFETY: a non-zero size.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                if p.is_null() {
                    return Err(err(
                        ErrorClass::NoMem,
                        format!("MPI_Win_allocate: cannot allocate {size} bytes"),
                    ));
                }
                Ok((p, Memory::Owned(p, layout)))
            },
        )
    }

    /// `MPI_Win_allocate_shared`: every rank's memory in one segment of the node, which
    /// all of `comm`'s ranks must share.
    pub fn allocate_shared(
        rt: &'static Runtime,
        comm: CommId,
        size: usize,
        disp_unit: i64,
    ) -> MpiResult<Arc<Window>> {
        let call = "MPI_Win_allocate_shared";
        let nodes = rt.comm_nodes(comm)?;
        if nodes.iter().any(|n| *n != nodes[0]) {
            return Err(err(
                ErrorClass::RmaShared,
                format!("{call}: the communicator's processes are not all on one node"),
            ));
        }
        Self::build(
            rt,
            call,
            comm,
            Flavor::Shared,
            size,
            disp_unit,
            |wcomm, peers| node_segment(rt, call, wcomm, peers, 1),
        )
    }

    /// `MPI_Win_create_dynamic`: a window with no memory until `attach`.
    pub fn create_dynamic(rt: &'static Runtime, comm: CommId) -> MpiResult<Arc<Window>> {
        Self::build(
            rt,
            "MPI_Win_create_dynamic",
            comm,
            Flavor::Dynamic,
            0,
            1,
            |_, _| Ok((std::ptr::null_mut(), Memory::User)),
        )
    }

    fn build(
        rt: &'static Runtime,
        call: &str,
        comm: CommId,
        flavor: Flavor,
        size: usize,
        disp_unit: i64,
        memory: impl FnOnce(CommId, &[Peer]) -> MpiResult<(*mut u8, Memory)>,
    ) -> MpiResult<Arc<Window>> {
        if disp_unit <= 0 {
            return Err(err(
                ErrorClass::Disp,
                format!("{call}: disp_unit = {disp_unit} must be positive"),
            ));
        }
        let wcomm = rt.comm_dup(comm)?;
        let built = (|| {
            let rank = rt.comm_rank(wcomm)?;
            let nranks = rt.comm_size(wcomm)?;
            let group = rt.comm_group(wcomm)?;
            let mut mine = (size as u64).to_le_bytes().to_vec();
            mine.extend_from_slice(&(disp_unit as u64).to_le_bytes());
            let all = rt.allgather_bytes(call, wcomm, &mine)?;
            let peers: Vec<Peer> = all
                .iter()
                .map(|b| Peer {
                    size: u64::from_le_bytes(b[0..8].try_into().expect("16 bytes")),
                    disp_unit: u64::from_le_bytes(b[8..16].try_into().expect("16 bytes")),
                })
                .collect();
            let (base, memory) = memory(wcomm, &peers)?;
            Ok((rank, nranks, group, peers, base, memory))
        })();
        let (rank, nranks, group, peers, base, memory) = match built {
            Ok(v) => v,
            Err(e) => {
                let _ = rt.comm_free(wcomm);
                return Err(e);
            }
        };
        let win = Arc::new(Window {
            rt,
            wcomm,
            group,
            rank,
            nranks,
            flavor,
            base: base as usize,
            size,
            disp_unit: disp_unit as usize,
            peers,
            memory,
            regions: Mutex::new(Vec::new()),
            target: Mutex::new(TargetState {
                buf: vec![0u8; REQ_BUF].into_boxed_slice(),
                posted: None,
                awaiting: None,
                replies: Vec::new(),
                locks: Locks::default(),
                errors: vec![0; nranks],
                warned: false,
            }),
            again: AtomicBool::new(false),
            advancer: AtomicUsize::new(0),
            posts: (0..nranks).map(|_| AtomicU32::new(0)).collect(),
            completes: AtomicU64::new(0),
            fences: (0..nranks).map(|_| AtomicU64::new(0)).collect(),
            origin: Mutex::new(OriginState::new(nranks)),
            issuing: Mutex::new(()),
            service: Mutex::new(None),
            name: Mutex::new(String::new()),
            byte: Datatype::builtin(Builtin::Byte),
        });
        win.post_request_receive()?;
        let id = rt.add_service(win.clone());
        *lock(&win.service) = Some(id);
        Ok(win)
    }

    /// `MPI_Win_free` (collective): every epoch must be closed; waits until every rank is
    /// done with the window, then releases it.
    pub fn free(&self) -> MpiResult<()> {
        let call = "MPI_Win_free";
        self.check_no_epoch(call)?;
        self.wait_pending(call, |_| true)?;
        self.rt.barrier_internal(self.wcomm)?;
        if let Some(id) = lock(&self.service).take() {
            self.rt.remove_service(id);
        }
        let (posted, awaiting, replies) = {
            let mut t = lock(&self.target);
            (
                t.posted.take(),
                t.awaiting.take(),
                std::mem::take(&mut t.replies),
            )
        };
        if let Some(id) = posted {
            self.rt.cancel(id)?;
            let _ = self.rt.wait_raw(call, id);
        }
        if let Some(Awaiting::Request { req, .. } | Awaiting::Data { req, .. }) = awaiting {
            self.rt.cancel(req)?;
            let _ = self.rt.wait_raw(call, req);
        }
        for (id, _) in replies {
            let _ = self.rt.wait_raw(call, id);
        }
        self.rt.comm_free(self.wcomm)
    }

    /// The window's flavor.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }
    /// `MPI_WIN_BASE` (NULL for a dynamic window).
    pub fn base(&self) -> *mut u8 {
        self.base as *mut u8
    }
    /// `MPI_WIN_SIZE` in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
    /// `MPI_WIN_DISP_UNIT`.
    pub fn disp_unit(&self) -> usize {
        self.disp_unit
    }
    /// This process's rank in the window's group.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Number of processes of the window.
    pub fn nranks(&self) -> usize {
        self.nranks
    }
    /// `MPI_Win_get_group`: the group of the window's communicator.
    pub fn group(&self) -> Arc<Group> {
        self.group.clone()
    }
    /// `MPI_Win_get_name`.
    pub fn name(&self) -> String {
        lock(&self.name).clone()
    }
    /// `MPI_Win_set_name`.
    pub fn set_name(&self, name: &str) {
        *lock(&self.name) = name.to_string();
    }

    /// `MPI_Win_shared_query`: size, displacement unit and this process's address of
    /// `rank`'s memory (`None`: MPI_PROC_NULL, the first rank with a non-empty part).
    pub fn shared_query(&self, rank: Option<usize>) -> MpiResult<(usize, usize, *mut u8)> {
        let call = "MPI_Win_shared_query";
        let (Flavor::Shared, Memory::Shared(seg, layout)) = (self.flavor, &self.memory) else {
            return Err(err(
                ErrorClass::RmaFlavor,
                format!("{call}: the window was not made by MPI_Win_allocate_shared"),
            ));
        };
        let r = match rank {
            Some(r) if r < self.nranks => r,
            Some(r) => {
                return Err(err(
                    ErrorClass::Rank,
                    format!(
                        "{call}: rank {r} is not in the window (size {})",
                        self.nranks
                    ),
                ))
            }
            None => (0..self.nranks)
                .find(|&r| self.peers[r].size > 0)
                .unwrap_or(0),
        };
        // SAFETY: offsets lie within the mapping (a shared window's ranks are all local).
        let p = unsafe { seg.base().add(layout.data[r].unwrap_or(0)) };
        Ok((
            self.peers[r].size as usize,
            self.peers[r].disp_unit as usize,
            p,
        ))
    }

    /// `MPI_Win_attach`: expose `size` bytes at `base` in a dynamic window.
    ///
    /// # Safety
    /// The memory must stay valid until it is detached or the window freed.
    pub unsafe fn attach(&self, base: *mut u8, size: usize) -> MpiResult<()> {
        let call = "MPI_Win_attach";
        if self.flavor != Flavor::Dynamic {
            return Err(err(
                ErrorClass::RmaFlavor,
                format!("{call}: the window was not made by MPI_Win_create_dynamic"),
            ));
        }
        if size == 0 {
            return Ok(());
        }
        let (a, end) = (base as usize, base as usize + size);
        let mut regions = lock(&self.regions);
        if regions.iter().any(|&(b, n)| a < b + n && b < end) {
            return Err(err(
                ErrorClass::RmaAttach,
                format!("{call}: [{base:p}, +{size}) overlaps memory already attached"),
            ));
        }
        regions.push((a, size));
        Ok(())
    }

    /// `MPI_Win_detach`.
    pub fn detach(&self, base: *const u8) -> MpiResult<()> {
        let call = "MPI_Win_detach";
        if self.flavor != Flavor::Dynamic {
            return Err(err(
                ErrorClass::RmaFlavor,
                format!("{call}: the window was not made by MPI_Win_create_dynamic"),
            ));
        }
        let mut regions = lock(&self.regions);
        match regions.iter().position(|&(b, _)| b == base as usize) {
            Some(i) => {
                regions.swap_remove(i);
                Ok(())
            }
            None => Err(err(
                ErrorClass::RmaAttach,
                format!("{call}: {base:p} is not the start of attached memory"),
            )),
        }
    }

    /// A group's processes as ranks of this window (MPI_ERR_GROUP for outsiders).
    pub(crate) fn ranks_of(&self, call: &str, g: &Group) -> MpiResult<Vec<usize>> {
        g.world_ranks()
            .iter()
            .map(|&w| {
                self.group.rank_of(w).ok_or_else(|| {
                    err(
                        ErrorClass::Group,
                        format!("{call}: world rank {w} of the group is not in the window"),
                    )
                })
            })
            .collect()
    }

    pub(crate) fn check_assert(call: &str, assert: i32) -> MpiResult<()> {
        check_assert(call, assert)
    }
}

/// A spin lock in the shared segment guarding one rank's memory against concurrent
/// accumulates (of every process of the node).
pub(crate) struct SegmentLock<'a>(&'a std::sync::atomic::AtomicU32);

impl SegmentLock<'_> {
    pub fn acquire(word: &std::sync::atomic::AtomicU32) -> SegmentLock<'_> {
        use std::sync::atomic::Ordering;
        let mut spins = 0u32;
        while word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // The holder may be descheduled (ranks outnumber cores).
                std::thread::yield_now();
            }
        }
        SegmentLock(word)
    }
}

impl Drop for SegmentLock<'_> {
    fn drop(&mut self) {
        self.0.store(0, std::sync::atomic::Ordering::Release);
    }
}

/// A reader-writer lock word in the segment (MPI_Win_lock of a rank whose memory is in
/// this node's segment): the top bit for an exclusive holder, the rest counts shared ones.
pub(crate) struct RwWord;

const EXCL_BIT: u32 = 1 << 31;

impl RwWord {
    /// Take the lock if it is free for `exclusive` now.
    pub fn try_acquire(w: &std::sync::atomic::AtomicU32, exclusive: bool) -> bool {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        if exclusive {
            return w.compare_exchange(0, EXCL_BIT, Acquire, Relaxed).is_ok();
        }
        let v = w.load(Relaxed);
        v & EXCL_BIT == 0 && w.compare_exchange(v, v + 1, Acquire, Relaxed).is_ok()
    }

    pub fn release(w: &std::sync::atomic::AtomicU32, exclusive: bool) {
        use std::sync::atomic::Ordering::Release;
        if exclusive {
            w.store(0, Release);
        } else {
            w.fetch_sub(1, Release);
        }
    }
}

impl Window {
    /// The MPI_Win_lock word of `rank` when its memory is in this node's segment (then
    /// origins of this node lock it directly, and the target's service takes it for
    /// origins elsewhere).
    pub(crate) fn lock_word(&self, rank: usize) -> Option<&std::sync::atomic::AtomicU32> {
        let (_, acc) = self.shared_target(rank)?;
        // SAFETY: the lock slot is 64 bytes; the word 4 bytes after the accumulate word is
        // the rank's MPI_Win_lock word, aligned, used only atomically.
        Some(unsafe { &*(acc as *const std::sync::atomic::AtomicU32).add(1) })
    }

    /// For a shared window: the address of byte 0 of `rank`'s memory in this process and
    /// that rank's accumulate lock word.
    pub(crate) fn shared_target(
        &self,
        rank: usize,
    ) -> Option<(*mut u8, &std::sync::atomic::AtomicU32)> {
        let Memory::Shared(seg, layout) = &self.memory else {
            return None;
        };
        let (data, lock) = (layout.data[rank]?, layout.locks[rank]?);
        // SAFETY: offsets lie within the mapping; the lock words are 64-byte aligned
        // within it (the mapping is page aligned) and only ever used atomically.
        unsafe {
            let word = &*(seg.base().add(lock) as *const std::sync::atomic::AtomicU32);
            Some((seg.base().add(data), word))
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if let Memory::Owned(p, layout) = self.memory {
            // SAFETY: allocated in `allocate` with this layout, freed once.
            unsafe { std::alloc::dealloc(p, layout) };
        }
    }
}
