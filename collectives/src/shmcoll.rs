//! The shared-memory fast path of small collectives on communicators whose ranks are all
//! on one node: the driver of the slot protocol of `node_area.rs`. It serves barrier,
//! bcast, reduce and allreduce of up to [`SLOT_BYTES`] per rank, gather and allgather
//! with blocks of up to [`SLOT_BYTES`], and scatter, alltoall and reduce_scatter_block
//! when all the blocks one rank posts fit [`SLOT_BYTES`], and scan/exscan (whose vectors
//! fit); allgatherv and reduce_scatter when every rank's slot data fits (all ranks know
//! all counts, so they decide alike); gatherv and scatterv always (only the root knows the
//! counts, so the choice cannot depend on them: a block that does not fit its slot is
//! announced there as [`BY_P2P`] and moves by point-to-point inside the call). Data goes
//! through the slots packed (derived datatypes are packed into and unpacked out of them);
//! reductions fold in rank order.
//!
//! **The area.** Made collectively at the first call that would use it (every rank takes
//! the same decision: it depends on the communicator, the message size and the
//! process-wide algorithm setting only): rank 0 creates an anonymous memfd, all ranks learn
//! its `/proc/<pid>/fd/<fd>` from an internal all-gather, map it and check the header's
//! nonce, and a second all-gather agrees on the outcome; then rank 0 closes the memfd. No
//! name ever exists, so nothing is left in /dev/shm however the job ends. If any rank
//! cannot map it (or the communicator spans nodes, pretend nodes of `TSUNAGI_NODE_MAP`
//! included, or sites, or is an intercommunicator, or has more than [`MAX_RANKS`] ranks),
//! the communicator is marked and the point-to-point algorithms serve it.
//!
//! **Finding it.** A process-wide table indexed by communicator id, read under a read
//! lock: no engine lock. Each thread keeps the last entry it found (communicator, the
//! table's generation, a reference to the area), so that a run of calls on one
//! communicator finds it with no lock and no reference count changed: the fast path of a
//! collective makes no atomic read-modify-write before its own protocol's. Such a call
//! also takes the communicator's rank and size from the area ([`lean`]) instead of from
//! the engine's communicator table, whose lookups take the engine lock (an area exists
//! only for a live intracommunicator, so the intercommunicator test is not needed either). An attribute
//! with a delete callback (run by `MPI_Comm_free`) clears the entry (which bumps the
//! generation) and the area is unmapped once the last call using it is over and every
//! thread that kept it has moved on (or ended).
//!
//! **Choosing it.** `shm` is an algorithm of every family (alltoallv/w do not use it;
//! the other v forms follow their family's setting: `TSUNAGI_COLL_<NAME>=shm` forces it
//! wherever it can run; forcing any other algorithm turns it off for that family). Automatically it serves communicators of up to
//! [`AUTO_MAX_RANKS`] ranks and calls whose slot data is 1 to [`SLOT_BYTES`] bytes. The
//! fast path of each collective is entered after the ordinary argument checks (bcast,
//! reduce and allreduce repeat the few they need, to stay lean), so errors are reported
//! as before.
//!
//! **Waiting** spins briefly (longer, if `TSUNAGI_SHM_SPIN_US` says so, when the job has
//! no more ranks on this node than processors), then makes
//! progress on the engine (so that one-sided targets and queued sends move while a rank
//! waits here) and yields for a while
//! (`TSUNAGI_SHM_YIELD_US`, 1 ms), then sleeps in the kernel on the awaited word until
//! its writer wakes it (timeouts growing to 1 ms keep the engine progressing): with more
//! ranks than cores, the rank we wait for gets our core at once, and 8 ranks on 2 cores
//! do not spin.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use tsunagi_core::comm::Keyval;
use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{CommId, MpiResult, Runtime};

use crate::node_area::{area_len, Area, Idle, Pause, Peers, LINE, MAX_RANKS, SLOT_BYTES};
use crate::op::Op;
use crate::select::{forced, Coll};
use crate::util::{copy_typed, Ctx, Packed, SendBuf};

/// Largest communicator the automatic choice sends through the area.
pub(crate) const AUTO_MAX_RANKS: usize = 8;

/// The algorithm name of the fast path in every family that has it.
pub(crate) const NAME: &str = "shm";

/// A mapped area and this rank's view of it.
pub(crate) struct Node {
    area: Area,
    /// The communicator (for the point-to-point part of the v forms' large blocks).
    comm: CommId,
    _mem: Memory,
    /// More ranks of the job on this node than processors to run them: waiting ranks
    /// hand their core over soon instead of spinning.
    crowded: bool,
    /// The job spans nodes (pretend ones included), so a progress pass polls sockets: a
    /// system call, where shared memory alone is a few loads.
    sockets: bool,
}

enum Entry {
    /// Not decided yet.
    Unknown,
    /// The point-to-point algorithms serve this communicator.
    Off,
    On(Arc<Node>),
}

static TABLE: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

/// Bumped (under the table's write lock) whenever an entry changes: a thread's cached
/// entry is current while the generation it was read at is.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's last entry found on: (communicator, generation, area).
    static CACHE: RefCell<Option<(u32, u64, Arc<Node>)>> = const { RefCell::new(None) };
    /// [`NodeRef::Cached`]s alive in this thread: the cache keeps its area while any is.
    static LENT: Cell<u32> = const { Cell::new(0) };
}

/// Calls this process served through an area (for tests and tools). Counted with a
/// load and a store, not an atomic add: a count lost to a race of two threads does not
/// matter, a locked instruction on every call does.
static SERVED: AtomicU64 = AtomicU64::new(0);

fn count_served() {
    SERVED.store(SERVED.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// How many collective calls this process has run on the shared-memory fast path.
pub fn shared_memory_calls() -> u64 {
    SERVED.load(Ordering::Relaxed)
}

/// The area a call runs on: lent by this thread's cache, or a reference of its own.
pub(crate) enum NodeRef {
    /// The area in this thread's [`CACHE`], which keeps it (and does not drop or replace
    /// it) while this lives ([`LENT`]).
    Cached(*const Node),
    Shared(Arc<Node>),
}

impl NodeRef {
    fn lend(node: &Arc<Node>) -> NodeRef {
        LENT.with(|l| l.set(l.get() + 1));
        NodeRef::Cached(Arc::as_ptr(node))
    }
}

impl std::ops::Deref for NodeRef {
    type Target = Node;
    fn deref(&self) -> &Node {
        match self {
            // SAFETY: the pointer came from the Arc in this thread's CACHE, which is not
            // dropped or replaced while LENT counts this value (NodeRef is not Send, so
            // it stays in this thread; the cache lives until the thread ends, after it).
            NodeRef::Cached(p) => unsafe { &**p },
            NodeRef::Shared(n) => n,
        }
    }
}

impl Drop for NodeRef {
    fn drop(&mut self) {
        if let NodeRef::Cached(_) = self {
            LENT.with(|l| l.set(l.get() - 1));
        }
    }
}

/// `f` of this thread's cached area of `comm`, if current (under the cache's borrow).
#[inline]
fn peek<R>(comm: CommId, f: impl FnOnce(&Arc<Node>) -> R) -> Option<R> {
    CACHE.with(|c| {
        let c = c.borrow();
        let (id, generation, node) = c.as_ref()?;
        (*id == comm.0 && *generation == GENERATION.load(Ordering::Acquire)).then(|| f(node))
    })
}

/// This thread's cached area of `comm`, if current.
#[inline]
fn cached(comm: CommId) -> Option<NodeRef> {
    peek(comm, NodeRef::lend)
}

/// Remember `node` as this thread's area of `comm` (read at `generation`), unless an
/// area lent from the cache is in use; then the caller gets its own reference.
fn remember(comm: CommId, generation: u64, node: Arc<Node>) -> NodeRef {
    if LENT.with(|l| l.get()) > 0 {
        return NodeRef::Shared(node);
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let n = NodeRef::lend(&node);
        *c = Some((comm.0, generation, node));
        n
    })
}

/// Forget this thread's cached area of `comm` (its communicator is being freed), unless
/// it is lent out.
fn forget(comm: CommId) {
    if LENT.with(|l| l.get()) > 0 {
        return;
    }
    // An exiting thread's cache may be gone already.
    let _ = CACHE.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            if c.as_ref().is_some_and(|(id, _, _)| *id == comm.0) {
                *c = None;
            }
        }
    });
}

fn table_read() -> std::sync::RwLockReadGuard<'static, Vec<Entry>> {
    TABLE.read().unwrap_or_else(|p| p.into_inner())
}

fn table_write() -> std::sync::RwLockWriteGuard<'static, Vec<Entry>> {
    TABLE.write().unwrap_or_else(|p| p.into_inner())
}

fn set_entry(comm: CommId, e: Entry) {
    let mut t = table_write();
    let i = comm.0 as usize;
    if t.len() <= i {
        t.resize_with(i + 1, || Entry::Unknown);
    }
    t[i] = e;
    // Release: a thread that sees the new generation sees the new entry.
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The keyval whose delete callback forgets a communicator's entry.
fn keyval(rt: &Runtime) -> i32 {
    static KEYVAL: OnceLock<i32> = OnceLock::new();
    *KEYVAL.get_or_init(|| {
        rt.create_keyval(Keyval {
            copy: None,
            delete: Some(Arc::new(|comm: CommId, _kv, _val, _extra| {
                set_entry(comm, Entry::Unknown);
                forget(comm);
                Ok(())
            })),
            extra: 0,
        })
    })
}

/// Whether the family's setting allows the area, and whether that is the automatic choice.
fn allowed(family: Coll) -> Option<bool> {
    match forced(family) {
        None => Some(true),
        Some(i) if family.algorithms()[i] == NAME => Some(false),
        Some(_) => None,
    }
}

/// The area to run a call of `family` moving `bytes` bytes per rank on, if the fast path
/// serves it. Collective on a first use (see the module doc); `None` also for an invalid
/// communicator (the caller's ordinary path reports it).
pub(crate) fn area(
    rt: &Runtime,
    comm: CommId,
    family: Coll,
    bytes: usize,
) -> MpiResult<Option<NodeRef>> {
    let Some(auto) = allowed(family) else {
        return Ok(None);
    };
    if bytes > SLOT_BYTES {
        return Ok(None);
    }
    let fits = |n: &Node| !auto || n.area.size() <= AUTO_MAX_RANKS;
    if let Some(n) = cached(comm) {
        if !fits(&n) {
            return Ok(None);
        }
        count_served();
        return Ok(Some(n));
    }
    {
        // Acquire pairs with set_entry's Release: the entry read below is at least as new.
        let generation = GENERATION.load(Ordering::Acquire);
        let t = table_read();
        match t.get(comm.0 as usize) {
            Some(Entry::Off) => return Ok(None),
            Some(Entry::On(n)) => {
                let n = n.clone();
                drop(t);
                let n = remember(comm, generation, n);
                if !fits(&n) {
                    return Ok(None);
                }
                count_served();
                return Ok(Some(n));
            }
            _ => {}
        }
    }
    // Undecided: an invalid communicator is the ordinary path's to report; one too large
    // for the automatic choice is left undecided (no area is made for nothing).
    match rt.comm_size(comm) {
        Err(_) => return Ok(None),
        Ok(n) if auto && n > AUTO_MAX_RANKS => return Ok(None),
        Ok(_) => {}
    }
    let entry = setup(rt, comm)?;
    let out = match &entry {
        Entry::On(n) if fits(n) => Some(NodeRef::Shared(n.clone())),
        _ => None,
    };
    if out.is_some() {
        count_served();
    }
    set_entry(comm, entry);
    rt.set_attr(comm, keyval(rt), 1)?;
    Ok(out)
}

/// This thread's cached area of `comm` for a call of `family`, with no lock and no
/// collective step: `None` unless an earlier call on this thread found it (then `comm`
/// is a live intracommunicator on one node, so the caller may take its rank and size
/// from the area and skip the engine's communicator lookups). The caller checks the
/// call's bytes with [`Node::serves`] before it uses the area.
#[inline]
pub(crate) fn lean(comm: CommId, family: Coll) -> Option<NodeRef> {
    let auto = allowed(family)?;
    let n = cached(comm)?;
    (!auto || n.area.size() <= AUTO_MAX_RANKS).then_some(n)
}

/// This process's rank and the communicator's size, when this thread has an area of
/// `comm` at hand (see `lean`): the C interface's rooted collectives use it instead
/// of three communicator lookups under the engine lock. It reads them under the cache's borrow instead of lending the area (a lend and its
/// return are two more thread-local accesses, each a `__tls_get_addr` call in a shared
/// library).
#[inline]
pub fn lean_rank_size(comm: CommId) -> Option<(usize, usize)> {
    peek(comm, |n| (n.area.rank(), n.area.size()))
}

/// Decide (collectively where needed) whether `comm` gets an area, and make it.
fn setup(rt: &Runtime, comm: CommId) -> MpiResult<Entry> {
    if crate::inter::is_inter(rt, "collective", comm)? {
        return Ok(Entry::Off);
    }
    let mut ctx = Ctx::new(rt, comm, "collective")?;
    let n = ctx.size;
    if !(2..=MAX_RANKS).contains(&n) {
        return Ok(Entry::Off);
    }
    let nodes = ctx.nodes()?;
    if nodes.iter().any(|&x| x != nodes[0]) || crate::impi::sites(&ctx)?.is_some() {
        return Ok(Entry::Off);
    }
    let call = "collective (shared-memory area)";
    let len = area_len(n);
    // Rank 0 makes the area and tells the others where it is.
    let mut made = None;
    let mut info = Vec::new();
    if ctx.rank == 0 {
        let nonce = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        };
        if let Ok((mem, fd)) = Memory::create(len) {
            // SAFETY: fresh zeroed memory of `len` bytes, page-aligned, ours alone.
            unsafe { Area::init(mem.base, n, nonce) };
            info.extend_from_slice(&std::process::id().to_le_bytes());
            info.extend_from_slice(&fd.as_raw_fd().to_le_bytes());
            info.extend_from_slice(&nonce.to_le_bytes());
            made = Some((mem, fd));
        }
    }
    let all = rt.allgather_bytes(call, comm, &info)?;
    let mut attached: Option<Memory> = None;
    if ctx.rank != 0 && all[0].len() == 16 {
        let pid = u32::from_le_bytes(all[0][0..4].try_into().expect("4 bytes"));
        let fd = i32::from_le_bytes(all[0][4..8].try_into().expect("4 bytes"));
        let nonce = u64::from_le_bytes(all[0][8..16].try_into().expect("8 bytes"));
        if let Ok(m) = Memory::attach(pid, fd, len) {
            // SAFETY: `m` maps `len` >= LINE bytes.
            if unsafe { Area::header_ok(m.base, n, nonce) } {
                attached = Some(m);
            }
        }
    }
    let mapped = made.is_some() || attached.is_some();
    // With whether this process may skip the fence on the area's stores (the heavy
    // membarrier: `node_area`'s module doc): only if every rank may. Not when the ranks
    // outnumber the cores: they then sleep often, and the membarrier each sleep costs
    // outweighs the fences saved (session 10, 4 ranks on 2 cores: scan 0.94 -> 1.21 us,
    // bcast 0.66 -> 0.71; 2 ranks: bcast 0.093 -> 0.075, allreduce 0.314 -> 0.292).
    let light = tsunagi_p2p::membarrier::registered() && !crowded(rt);
    let ok = rt.allgather_bytes(call, comm, &[u8::from(mapped), u8::from(light)])?;
    let everyone = ok.iter().all(|v| v.first() == Some(&1));
    let light = ok.iter().all(|v| v.get(1) == Some(&1));
    // Every rank has mapped it (or given up): close the way in.
    let leader_mem = made.map(|(m, fd)| {
        drop(fd);
        m
    });
    if !everyone {
        return Ok(Entry::Off);
    }
    let mem = leader_mem.or(attached).expect("mapped");
    // SAFETY: `mem` maps the initialised area of `n` ranks for the life of the Node; every
    // rank uses its own comm rank.
    let area = unsafe { Area::new(mem.base, n, ctx.rank, light) };
    Ok(Entry::On(Arc::new(Node {
        area,
        comm,
        _mem: mem,
        crowded: crowded(rt),
        sockets: {
            let m = rt.node_map();
            m.iter().any(|&x| x != m[0])
        },
    })))
}

/// Whether the job has more ranks on this host than this process may use processors. The
/// real host: pretend nodes (`TSUNAGI_NODE_MAP`) share its cores, so counting the ranks of
/// the communicator's node would call 8 ranks on 4 pretend nodes of a 2-core host
/// uncrowded and let them spin while the rank they wait for cannot run.
fn crowded(rt: &Runtime) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    rt.ranks_on_host() > cpus
}

/// A shared mapping, unmapped on drop.
struct Memory {
    base: *mut u8,
    len: usize,
}

// SAFETY: plain shared memory; concurrent access goes through the protocol's atomics.
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: we mapped exactly this range and nobody uses it any more (the Node
            // owning us is gone).
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        }
    }
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn map(fd: &OwnedFd, len: usize) -> Result<Memory, String> {
    // SAFETY: mapping a descriptor we hold with a length its object has; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err("mmap"));
    }
    debug_assert_eq!(p as usize % LINE, 0);
    Ok(Memory {
        base: p as *mut u8,
        len,
    })
}

impl Memory {
    /// An anonymous memfd of `len` zero bytes (reserved now: running out of memory is an
    /// error here rather than a SIGBUS later), mapped.
    fn create(len: usize) -> Result<(Memory, OwnedFd), String> {
        // SAFETY: a static C string and plain flags.
        let fd = unsafe { libc::memfd_create(c"tsunagi-coll".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_err("memfd_create"));
        }
        // SAFETY: a descriptor we just got and own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscalls on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os_err("ftruncate"));
        }
        // SAFETY: as above.
        let rc = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, len as libc::off_t) };
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            return Err(format!("posix_fallocate: error {rc}"));
        }
        let m = map(&fd, len)?;
        Ok((m, fd))
    }

    /// Map another process's memfd through /proc.
    fn attach(pid: u32, fd: i32, len: usize) -> Result<Memory, String> {
        let path = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}")).expect("no NUL");
        // SAFETY: a valid C string and plain flags.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(os_err("open"));
        }
        // SAFETY: a descriptor we just got and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fstat into a zeroed struct we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || st.st_size as usize != len {
            return Err("the area has the wrong size".into());
        }
        map(&fd, len)
    }
}

/// Waiting inside the runtime. With a processor per rank (`crowded` false) the rank
/// spins for [`spin_for`] first, polling the engine now and then: a yield on a loaded
/// machine hands the core to unrelated work for a whole time slice, which is what makes a
/// collective slow there. Then (at once when crowded) it makes progress and yields for a
/// short while, then sleeps on the awaited word (the writer wakes it), with a timeout
/// that grows to [`MAX_SLEEP`] so that the engine still makes progress now and then.
///
/// A yield that comes back at once (under [`QUICK_YIELD`]) found nothing else to run on
/// this core: the rank we wait for runs elsewhere, and another yield would only add a
/// system call between the write we wait for and our noticing it. Unless crowded, the
/// next [`SPIN_ROUNDS`] rounds then spin (polling the engine now and then) and the rank
/// yields again after them, so a peer that comes to share the core waits at most that
/// long; a yield that took longer (the core was wanted) keeps yielding at once.
struct RtIdle<'a> {
    rt: &'a Runtime,
    crowded: bool,
    /// Crowded with sockets to poll: a progress pass every 16th round only.
    sparse: bool,
    since: Option<Instant>,
    /// Rounds left to spin since the last quick yield.
    spin_rounds: u32,
}

impl Node {
    fn idle<'a>(&self, rt: &'a Runtime) -> RtIdle<'a> {
        RtIdle {
            rt,
            crowded: self.crowded,
            sparse: self.crowded && self.sockets,
            since: None,
            spin_rounds: 0,
        }
    }
}

/// A yield shorter than this ran nothing else (see [`RtIdle`]).
const QUICK_YIELD: Duration = Duration::from_micros(4);
/// Rounds spun after a quick yield, each a look at the awaited word and two pause
/// instructions (~25 ns each on this machine's cores: 16 of them, as in the first spin,
/// would add ~0.2 µs to noticing the write on average): ~15 µs in all.
const SPIN_ROUNDS: u32 = 256;

/// Longest sleep between two progress calls of a waiting rank.
const MAX_SLEEP: Duration = Duration::from_millis(1);

/// How long a rank that has a processor of its own spins before it yields
/// (`TSUNAGI_SHM_SPIN_US`, microseconds, read once; 0 by default: the launcher does not
/// bind ranks to cores, so on a loaded machine two ranks may share one run queue, and
/// then a spin only delays the peer it waits for; measured on a loaded 2-core machine,
/// 1 ms made all-to-all patterns take milliseconds, 10 µs was 3-20x slower than none).
fn spin_for() -> Duration {
    static US: OnceLock<u64> = OnceLock::new();
    Duration::from_micros(*US.get_or_init(|| {
        std::env::var("TSUNAGI_SHM_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }))
}

/// How long a waiting rank yields before it sleeps in the kernel (`TSUNAGI_SHM_YIELD_US`,
/// microseconds, read once; 1000 by default). A yield hands the core to a peer that
/// shares it at once and keeps the rank runnable; a sleeper must be woken and scheduled
/// again, which on a loaded machine costs far more: with 4 ranks on 2 loaded cores,
/// sleeping after 20 µs made allreduce 8 B 40x slower than yielding on (medians).
/// Long waits still end asleep, woken by the writer instead of napping.
fn yield_for() -> Duration {
    static US: OnceLock<u64> = OnceLock::new();
    Duration::from_micros(*US.get_or_init(|| {
        std::env::var("TSUNAGI_SHM_YIELD_US")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1000)
    }))
}

impl Idle for RtIdle<'_> {
    fn idle(&mut self, round: u32) -> MpiResult<Pause> {
        let since = *self.since.get_or_insert_with(Instant::now);
        let waited = since.elapsed();
        let spin = if self.crowded {
            Duration::ZERO
        } else {
            spin_for()
        };
        if waited < spin {
            if round.is_multiple_of(32) {
                self.rt.progress()?;
            }
            for _ in 0..16 {
                std::hint::spin_loop();
            }
            return Ok(Pause::Again);
        }
        if self.spin_rounds > 0 {
            self.spin_rounds -= 1;
            if self.spin_rounds.is_multiple_of(32) {
                self.rt.progress()?;
            }
            std::hint::spin_loop();
            std::hint::spin_loop();
            return Ok(Pause::Again);
        }
        // Crowded, a round is a yield that lets the core's other ranks run (a rotation
        // through them), and a progress pass over a socket transport is a system call
        // (epoll_wait): then every 16th round only. What waits here is the area, which
        // needs no progress; the passes only move other traffic (one-sided targets,
        // queued sends), which may wait ~16 rotations. 8 ranks as 4 pretend nodes on 2
        // cores: the non-leaders of a hierarchical allreduce made 2 system calls per
        // round. On shared memory alone the pass is cheap and stays in every round.
        if !self.sparse || round.is_multiple_of(16) {
            self.rt.progress()?;
        }
        if waited < spin + yield_for() {
            let before = Instant::now();
            std::thread::yield_now();
            if !self.crowded && before.elapsed() < QUICK_YIELD {
                self.spin_rounds = SPIN_ROUNDS;
            }
            Ok(Pause::Again)
        } else {
            let k = (round / 16).min(5);
            Ok(Pause::Sleep(Duration::from_micros(32 << k).min(MAX_SLEEP)))
        }
    }
}

/// Copy `count` elements of `dtype` at `src` into `dst`, packed.
///
/// # Safety
/// The type map at `src` is readable; `dst` has `count * size` writable bytes.
unsafe fn pack(src: *const u8, count: usize, dtype: &TypeRef, dst: *mut u8) {
    let bytes = count * dtype.size();
    if bytes == 0 {
        return;
    }
    match dtype.contiguous_offset() {
        // SAFETY: caller contract; a contiguous type's data is `bytes` bytes at src + off.
        Some(off) => unsafe { std::ptr::copy_nonoverlapping(src.wrapping_offset(off), dst, bytes) },
        // SAFETY: caller contract.
        None => unsafe {
            dtype.pack_range(src, count, 0, std::slice::from_raw_parts_mut(dst, bytes))
        },
    }
}

/// Copy the packed stream at `src` into `count` elements of `dtype` at `dst`.
///
/// # Safety
/// `src` has `count * size` readable bytes; the type map at `dst` is writable.
unsafe fn unpack(src: *const u8, count: usize, dtype: &TypeRef, dst: *mut u8) {
    let bytes = count * dtype.size();
    if bytes == 0 {
        return;
    }
    match dtype.contiguous_offset() {
        // SAFETY: caller contract.
        Some(off) => unsafe { std::ptr::copy_nonoverlapping(src, dst.wrapping_offset(off), bytes) },
        // SAFETY: caller contract.
        None => unsafe {
            dtype.unpack_range(dst, count, 0, std::slice::from_raw_parts(src, bytes))
        },
    }
}

/// Block `i` of a buffer of blocks of `count` elements of `dtype`.
fn block_at(buf: *const u8, i: usize, count: usize, dtype: &TypeRef) -> *const u8 {
    buf.wrapping_offset(i as isize * count as isize * dtype.extent())
}

impl Node {
    pub(crate) fn size(&self) -> usize {
        self.area.size()
    }

    pub(crate) fn rank(&self) -> usize {
        self.area.rank()
    }

    /// Whether a call moving `bytes` through one slot runs here (1..=SLOT_BYTES); counts
    /// it as served if so.
    #[inline]
    pub(crate) fn serves(&self, bytes: usize) -> bool {
        let ok = (1..=SLOT_BYTES).contains(&bytes);
        if ok {
            count_served();
        }
        ok
    }

    pub(crate) fn barrier(&self, rt: &Runtime) -> MpiResult<()> {
        self.area.barrier(&mut self.idle(rt))
    }

    /// Bcast of `count` elements (`count * size` in 1..=SLOT_BYTES bytes).
    ///
    /// # Safety
    /// As `MPI_Bcast`'s buffer; `root` < size.
    pub(crate) unsafe fn bcast(
        &self,
        rt: &Runtime,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        root: usize,
    ) -> MpiResult<()> {
        let bytes = count * dtype.size();
        if self.area.rank() == root {
            self.area.bcast_root(&mut self.idle(rt), bytes, |slot| {
                // SAFETY: the root's buffer is readable; the slot holds `bytes`.
                unsafe { pack(buf, count, dtype, slot) }
            })
        } else {
            self.area.bcast_recv(&mut self.idle(rt), root, |slot| {
                // SAFETY: the slot holds this call's `bytes`; our buffer is writable.
                unsafe { unpack(slot, count, dtype, buf) }
            })
        }
    }

    /// Allreduce (`count * size` in 1..=SLOT_BYTES bytes); the op passed its type check.
    ///
    /// # Safety
    /// As `MPI_Allreduce`'s buffers.
    pub(crate) unsafe fn allreduce(
        &self,
        rt: &Runtime,
        sendbuf: SendBuf,
        recvbuf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        op: &Op,
    ) -> MpiResult<()> {
        let bytes = count * dtype.size();
        let input = match sendbuf {
            SendBuf::InPlace => recvbuf as *const u8,
            SendBuf::Ptr(p) => p,
        };
        self.area.allreduce(
            &mut self.idle(rt),
            bytes,
            // SAFETY: the input is readable; the slot holds `bytes`.
            |slot| unsafe { pack(input, count, dtype, slot) },
            // SAFETY: every part holds this call's packed contribution; recvbuf writable.
            |parts| unsafe { fold_into(parts, recvbuf, count, dtype, op) },
        )
    }

    /// Reduce to `root` (`count * size` in 1..=SLOT_BYTES bytes); the op passed its type
    /// check; `sendbuf` is `InPlace` only at the root. A root whose input is contiguous
    /// and not in place folds it where it is instead of posting it.
    ///
    /// # Safety
    /// As `MPI_Reduce`'s buffers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn reduce(
        &self,
        rt: &Runtime,
        sendbuf: SendBuf,
        recvbuf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        op: &Op,
        root: usize,
    ) -> MpiResult<()> {
        let bytes = count * dtype.size();
        let input = match sendbuf {
            SendBuf::InPlace => recvbuf as *const u8,
            SendBuf::Ptr(p) => p,
        };
        let at_root = self.area.rank() == root;
        let direct = match (at_root, sendbuf, dtype.contiguous_offset()) {
            (true, SendBuf::Ptr(p), Some(off)) => Some(p.wrapping_offset(off)),
            _ => None,
        };
        self.area.reduce(
            &mut self.idle(rt),
            root,
            bytes,
            direct.is_none(),
            // SAFETY: the input is readable; the slot holds `bytes`.
            |slot| unsafe { pack(input, count, dtype, slot) },
            // SAFETY: (root only) every posted part holds this call's contribution, the
            // root's own is its packed input where it did not post; recvbuf writable.
            |parts| unsafe {
                let mut all = [std::ptr::null::<u8>(); MAX_RANKS];
                all[..parts.len()].copy_from_slice(parts);
                if let Some(d) = direct {
                    all[root] = d;
                }
                fold_into(&all[..parts.len()], recvbuf, count, dtype, op)
            },
        )
    }

    /// Gather to `root`: every rank's block is `bytes` bytes (`sendcount` elements of
    /// `sendtype` elsewhere, `recvcount` of `recvtype` at the root; the caller checked
    /// them); the root copies its own block itself.
    ///
    /// # Safety
    /// As `MPI_Gather`'s buffers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gather(
        &self,
        rt: &Runtime,
        sendbuf: SendBuf,
        sendcount: usize,
        sendtype: &TypeRef,
        recvbuf: *mut u8,
        recvcount: usize,
        recvtype: &TypeRef,
        root: usize,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let bytes = if me == root {
            recvcount * recvtype.size()
        } else {
            sendcount * sendtype.size()
        };
        let send = match sendbuf {
            SendBuf::Ptr(p) => p,
            SendBuf::InPlace => std::ptr::null(),
        };
        self.area.reduce(
            &mut self.idle(rt),
            root,
            bytes,
            false,
            // SAFETY: (non-roots) the send buffer is readable; the slot holds `bytes`.
            |slot| unsafe { pack(send, sendcount, sendtype, slot) },
            |parts| {
                for (r, &q) in parts.iter().enumerate() {
                    if r != root {
                        let dst = block_at(recvbuf, r, recvcount, recvtype) as *mut u8;
                        // SAFETY: rank r's block of this call; the root's block r is
                        // writable.
                        unsafe { unpack(q, recvcount, recvtype, dst) };
                    }
                }
            },
        )?;
        if me == root && !send.is_null() {
            let dst = block_at(recvbuf, root, recvcount, recvtype) as *mut u8;
            // SAFETY: the root's send buffer is readable and its own block writable.
            unsafe {
                copy_typed(
                    "MPI_Gather",
                    send,
                    sendcount,
                    sendtype,
                    dst,
                    recvcount,
                    recvtype,
                )?
            };
        }
        Ok(())
    }

    /// Scatter from `root`: the root posts every other rank's block (`bytes` each, all of
    /// them fitting a slot), each rank copies its own out.
    ///
    /// # Safety
    /// As `MPI_Scatter`'s buffers (`recvbuf` null for the root's `MPI_IN_PLACE`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn scatter(
        &self,
        rt: &Runtime,
        sendbuf: *const u8,
        sendcount: usize,
        sendtype: &TypeRef,
        recvbuf: Option<*mut u8>,
        recvcount: usize,
        recvtype: &TypeRef,
        root: usize,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let n = self.area.size();
        let mut idle = self.idle(rt);
        if me == root {
            let block = sendcount * sendtype.size();
            self.area.bcast_root(&mut idle, n * block, |slot| {
                for r in (0..n).filter(|&r| r != root) {
                    let src = block_at(sendbuf, r, sendcount, sendtype);
                    // SAFETY: the root's send buffer holds n blocks; the slot n * block.
                    unsafe { pack(src, sendcount, sendtype, slot.add(r * block)) };
                }
            })?;
            if let Some(dst) = recvbuf {
                let src = block_at(sendbuf, root, sendcount, sendtype);
                // SAFETY: the root's own block is readable, its receive buffer writable.
                unsafe {
                    copy_typed(
                        "MPI_Scatter",
                        src,
                        sendcount,
                        sendtype,
                        dst,
                        recvcount,
                        recvtype,
                    )?
                };
            }
            Ok(())
        } else {
            let block = recvcount * recvtype.size();
            let dst = recvbuf.expect("checked: only the root may be in place");
            self.area.bcast_recv(&mut idle, root, |slot| {
                // SAFETY: the root's slot holds n blocks of this call; ours is writable.
                unsafe { unpack(slot.add(me * block), recvcount, recvtype, dst) }
            })
        }
    }

    /// Allgather: blocks of `recvcount` elements of `recvtype` (`sendbuf`'s block, or
    /// block `rank` of `recvbuf` in place, has the same size; the caller checked).
    ///
    /// # Safety
    /// As `MPI_Allgather`'s buffers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn allgather(
        &self,
        rt: &Runtime,
        sendbuf: SendBuf,
        sendcount: usize,
        sendtype: &TypeRef,
        recvbuf: *mut u8,
        recvcount: usize,
        recvtype: &TypeRef,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let bytes = recvcount * recvtype.size();
        self.area.exchange(
            &mut self.idle(rt),
            Some(bytes),
            |slot| match sendbuf {
                // SAFETY: the send buffer is readable; the slot holds `bytes`.
                SendBuf::Ptr(p) => unsafe { pack(p, sendcount, sendtype, slot) },
                // SAFETY: in place, our block of the receive buffer holds our data.
                SendBuf::InPlace => unsafe {
                    pack(
                        block_at(recvbuf, me, recvcount, recvtype),
                        recvcount,
                        recvtype,
                        slot,
                    )
                },
            },
            Peers::All,
            |parts| {
                for (r, &q) in parts.iter().enumerate() {
                    if r == me && sendbuf == SendBuf::InPlace {
                        continue;
                    }
                    let dst = block_at(recvbuf, r, recvcount, recvtype) as *mut u8;
                    // SAFETY: rank r's block of this call; block r of recvbuf is writable.
                    unsafe { unpack(q, recvcount, recvtype, dst) };
                }
            },
        )
    }

    /// Alltoall: every rank posts its `size` blocks (all of them fitting a slot) and takes
    /// its own block from every rank's slot (its own too, which makes `MPI_IN_PLACE`
    /// work: the data is in the slot before the receive buffer is written).
    ///
    /// # Safety
    /// As `MPI_Alltoall`'s buffers (in place: `sendbuf` = `recvbuf` with the receive
    /// count and type).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn alltoall(
        &self,
        rt: &Runtime,
        sendbuf: *const u8,
        sendcount: usize,
        sendtype: &TypeRef,
        recvbuf: *mut u8,
        recvcount: usize,
        recvtype: &TypeRef,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let n = self.area.size();
        let block = recvcount * recvtype.size();
        self.area.exchange(
            &mut self.idle(rt),
            Some(n * block),
            |slot| {
                for d in 0..n {
                    let src = block_at(sendbuf, d, sendcount, sendtype);
                    // SAFETY: the send buffer holds n blocks; the slot n * block bytes.
                    unsafe { pack(src, sendcount, sendtype, slot.add(d * block)) };
                }
            },
            Peers::All,
            |parts| {
                for (r, &q) in parts.iter().enumerate() {
                    let dst = block_at(recvbuf, r, recvcount, recvtype) as *mut u8;
                    // SAFETY: rank r's slot holds n blocks of this call; block r of
                    // recvbuf is writable.
                    unsafe { unpack(q.add(me * block), recvcount, recvtype, dst) };
                }
            },
        )
    }

    /// Reduce_scatter_block: every rank posts its whole input (`size * count` elements,
    /// fitting a slot); each folds block `rank` of all of them, in rank order.
    ///
    /// # Safety
    /// As `MPI_Reduce_scatter_block`'s buffers.
    pub(crate) unsafe fn reduce_scatter_block(
        &self,
        rt: &Runtime,
        input: *const u8,
        recvbuf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        op: &Op,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let n = self.area.size();
        let block = count * dtype.size();
        self.area.exchange(
            &mut self.idle(rt),
            Some(n * block),
            // SAFETY: the input holds n * count elements; the slot n * block bytes.
            |slot| unsafe { pack(input, n * count, dtype, slot) },
            Peers::All,
            |parts| {
                let mut mine = [std::ptr::null::<u8>(); MAX_RANKS];
                for (m, &q) in mine.iter_mut().zip(parts) {
                    *m = q.wrapping_add(me * block);
                }
                // SAFETY: block `me` of every slot holds this call's packed contribution;
                // recvbuf is writable.
                unsafe { fold_into(&mine[..n], recvbuf, count, dtype, op) }
            },
        )
    }

    /// Scan (`exclusive`: exscan, which leaves rank 0's receive buffer alone): each rank
    /// posts its packed input and folds those of ranks `0..=rank` (`0..rank`).
    ///
    /// # Safety
    /// As `MPI_Scan`'s buffers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn scan(
        &self,
        rt: &Runtime,
        sendbuf: SendBuf,
        recvbuf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        op: &Op,
        exclusive: bool,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let bytes = count * dtype.size();
        let input = match sendbuf {
            SendBuf::InPlace => recvbuf as *const u8,
            SendBuf::Ptr(p) => p,
        };
        let upto = if exclusive { me } else { me + 1 };
        self.area.exchange(
            &mut self.idle(rt),
            Some(bytes),
            // SAFETY: the input is readable; the slot holds `bytes`.
            |slot| unsafe { pack(input, count, dtype, slot) },
            Peers::Below(me),
            |parts| {
                if upto > 0 {
                    // SAFETY: the slots of ranks 0..upto hold this call's packed
                    // contributions (our own was posted); recvbuf is writable.
                    unsafe { fold_into(&parts[..upto], recvbuf, count, dtype, op) }
                }
            },
        )
    }
}

/// Bytes of a v-form slot's header: the length of the data that follows, or [`BY_P2P`].
const V_HEADER: usize = 8;
/// A v-form block that does not fit its slot: it goes by point-to-point instead.
const BY_P2P: u64 = u64::MAX;
/// Tags of those point-to-point blocks (apart from the ordinary algorithms' tags).
const GATHERV_TAG: i32 = crate::util::tag::GATHER + 3;
const SCATTERV_TAG: i32 = crate::util::tag::SCATTER + 3;

fn truncated(call: &str) -> tsunagi_core::MpiError {
    crate::util::err(
        tsunagi_core::ErrorClass::Truncate,
        format!("{call}: message truncated (counts or types differ between ranks)"),
    )
}

impl Node {
    /// Allgatherv: every block (`counts[r]` elements of `recvtype`, at `displs[r]`) fits
    /// a slot (the caller checked, and so decided alike on every rank); in place, block
    /// `rank` of `recvbuf` is the input.
    ///
    /// # Safety
    /// As `MPI_Allgatherv`'s buffers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn allgatherv(
        &self,
        rt: &Runtime,
        sendbuf: SendBuf,
        sendcount: usize,
        sendtype: &TypeRef,
        recvbuf: *mut u8,
        counts: &[usize],
        displs: &[i64],
        recvtype: &TypeRef,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let ext = recvtype.extent();
        let blk = |r: usize| recvbuf.wrapping_offset(displs[r] as isize * ext);
        let bytes = counts[me] * recvtype.size();
        self.area.exchange(
            &mut self.idle(rt),
            Some(bytes),
            |slot| match sendbuf {
                // SAFETY: the send buffer is readable; the slot holds `bytes`.
                SendBuf::Ptr(p) => unsafe { pack(p, sendcount, sendtype, slot) },
                // SAFETY: in place, our block of the receive buffer holds our data.
                SendBuf::InPlace => unsafe { pack(blk(me), counts[me], recvtype, slot) },
            },
            Peers::All,
            |parts| {
                for (r, &q) in parts.iter().enumerate() {
                    if r == me && sendbuf == SendBuf::InPlace {
                        continue;
                    }
                    // SAFETY: rank r's block of this call (counts[r] elements packed);
                    // block r of recvbuf is writable.
                    unsafe { unpack(q, counts[r], recvtype, blk(r)) };
                }
            },
        )
    }

    /// Gatherv to `root`: each non-root posts its packed block behind a length header,
    /// or [`BY_P2P`] and sends it by point-to-point when it does not fit; the root reads
    /// every slot (`counts`, `displs` significant there only), then receives those.
    ///
    /// # Safety
    /// As `MPI_Gatherv`'s buffers; arguments checked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gatherv(
        &self,
        rt: &Runtime,
        sendbuf: SendBuf,
        sendcount: usize,
        sendtype: &TypeRef,
        recvbuf: *mut u8,
        counts: &[usize],
        displs: &[i64],
        recvtype: &TypeRef,
        root: usize,
    ) -> MpiResult<()> {
        let call = "MPI_Gatherv";
        let me = self.area.rank();
        let send = match sendbuf {
            SendBuf::Ptr(p) => p,
            SendBuf::InPlace => std::ptr::null(),
        };
        if me != root {
            let bytes = sendcount * sendtype.size();
            let fits = bytes <= SLOT_BYTES - V_HEADER;
            self.area.reduce(
                &mut self.idle(rt),
                root,
                V_HEADER,
                false,
                |slot| {
                    let head = if fits { bytes as u64 } else { BY_P2P };
                    // SAFETY: the slot has SLOT_BYTES bytes, 16-aligned; the send buffer
                    // is readable and the packed block fits behind the header.
                    unsafe {
                        (slot as *mut u64).write(head);
                        if fits {
                            pack(send, sendcount, sendtype, slot.add(V_HEADER));
                        }
                    }
                },
                |_| {},
            )?;
            if !fits {
                let ctx = Ctx::new(rt, self.comm, call)?;
                // SAFETY: the send buffer stays readable until the wait below.
                let r = unsafe { ctx.isend_typed(send, sendcount, sendtype, root, GATHERV_TAG)? };
                ctx.waitall(&mut vec![r])?;
            }
            return Ok(());
        }
        let ext = recvtype.extent();
        let blk = |r: usize| recvbuf.wrapping_offset(displs[r] as isize * ext);
        let mut by_p2p = [false; MAX_RANKS];
        let mut bad = false;
        self.area.reduce(
            &mut self.idle(rt),
            root,
            V_HEADER,
            false,
            |_| {},
            |parts| {
                for (r, &q) in parts.iter().enumerate() {
                    if r == root {
                        continue;
                    }
                    // SAFETY: rank r's slot of this call: a header, then its block.
                    let head = unsafe { (q as *const u64).read() };
                    if head == BY_P2P {
                        by_p2p[r] = true;
                    } else if head as usize > counts[r] * recvtype.size() {
                        bad = true;
                    } else if head > 0 {
                        // As a receive: a shorter block fills the first elements.
                        let c = head as usize / recvtype.size();
                        // SAFETY: the block holds `c` packed elements (head bytes, at most
                        // counts[r] elements); block r of recvbuf is writable.
                        unsafe { unpack(q.add(V_HEADER), c, recvtype, blk(r)) };
                    }
                }
            },
        )?;
        if !send.is_null() {
            // SAFETY: the root's send buffer is readable and its own block writable.
            unsafe {
                copy_typed(
                    call,
                    send,
                    sendcount,
                    sendtype,
                    blk(root),
                    counts[root],
                    recvtype,
                )?
            };
        }
        if by_p2p.contains(&true) {
            let ctx = Ctx::new(rt, self.comm, call)?;
            let mut reqs = Vec::new();
            for r in (0..self.area.size()).filter(|&r| by_p2p[r]) {
                // SAFETY: block r of recvbuf stays writable until the wait below.
                reqs.push(unsafe { ctx.irecv_typed(blk(r), counts[r], recvtype, r, GATHERV_TAG)? });
            }
            ctx.waitall(&mut reqs)?;
        }
        if bad {
            return Err(truncated(call));
        }
        Ok(())
    }

    /// Scatterv from `root`: the root posts a table of every rank's offset in its slot
    /// ([`BY_P2P`]: the block comes by point-to-point) and the blocks that fit, packed;
    /// each rank copies its own out (`counts`, `displs` significant at the root only;
    /// `recvbuf` `None` for the root's `MPI_IN_PLACE`).
    ///
    /// # Safety
    /// As `MPI_Scatterv`'s buffers; arguments checked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn scatterv(
        &self,
        rt: &Runtime,
        sendbuf: *const u8,
        counts: &[usize],
        displs: &[i64],
        sendtype: &TypeRef,
        recvbuf: Option<*mut u8>,
        recvcount: usize,
        recvtype: &TypeRef,
        root: usize,
    ) -> MpiResult<()> {
        let call = "MPI_Scatterv";
        let me = self.area.rank();
        let n = self.area.size();
        let table = (n * 8).next_multiple_of(16);
        if me == root {
            let ext = sendtype.extent();
            let blk = |r: usize| sendbuf.wrapping_offset(displs[r] as isize * ext);
            let mut by_p2p = [false; MAX_RANKS];
            let mut end = table;
            let mut offs = [BY_P2P; MAX_RANKS];
            for r in (0..n).filter(|&r| r != root) {
                let b = counts[r] * sendtype.size();
                if end + b <= SLOT_BYTES {
                    offs[r] = end as u64;
                    end = (end + b).next_multiple_of(16);
                } else {
                    by_p2p[r] = true;
                }
            }
            self.area
                .bcast_root(&mut self.idle(rt), end.min(SLOT_BYTES), |slot| {
                    for r in 0..n {
                        // SAFETY: the table's n words and every placed block lie inside
                        // the slot (end <= SLOT_BYTES, rounding aside); the send buffer
                        // holds block r.
                        unsafe {
                            (slot as *mut u64).add(r).write(offs[r]);
                            if r != root && offs[r] != BY_P2P {
                                pack(blk(r), counts[r], sendtype, slot.add(offs[r] as usize));
                            }
                        }
                    }
                })?;
            if let Some(dst) = recvbuf {
                // SAFETY: the root's own block is readable, its receive buffer writable.
                unsafe {
                    copy_typed(
                        call,
                        blk(root),
                        counts[root],
                        sendtype,
                        dst,
                        recvcount,
                        recvtype,
                    )?
                };
            }
            if by_p2p.contains(&true) {
                let ctx = Ctx::new(rt, self.comm, call)?;
                let mut reqs = Vec::new();
                for r in (0..n).filter(|&r| by_p2p[r]) {
                    // SAFETY: block r stays readable until the wait below.
                    reqs.push(unsafe {
                        ctx.isend_typed(blk(r), counts[r], sendtype, r, SCATTERV_TAG)?
                    });
                }
                ctx.waitall(&mut reqs)?;
            }
            return Ok(());
        }
        let dst = recvbuf.expect("checked: only the root may be in place");
        let mut off = BY_P2P;
        self.area.bcast_recv(&mut self.idle(rt), root, |slot| {
            // SAFETY: the root's slot of this call starts with n offsets; ours, if
            // placed, holds our block packed (recvcount elements, MPI's matching rule).
            unsafe {
                off = (slot as *const u64).add(me).read();
                if off != BY_P2P {
                    unpack(slot.add(off as usize), recvcount, recvtype, dst);
                }
            }
        })?;
        if off == BY_P2P {
            let ctx = Ctx::new(rt, self.comm, call)?;
            // SAFETY: the receive buffer stays writable until the wait below.
            let r = unsafe { ctx.irecv_typed(dst, recvcount, recvtype, root, SCATTERV_TAG)? };
            ctx.waitall(&mut vec![r])?;
        }
        Ok(())
    }

    /// Reduce_scatter: every rank posts its whole packed input (`sum(counts)` elements,
    /// fitting a slot); each folds its own block (`counts[rank]` elements after those of
    /// the lower ranks) of all of them, in rank order.
    ///
    /// # Safety
    /// As `MPI_Reduce_scatter`'s buffers.
    pub(crate) unsafe fn reduce_scatter(
        &self,
        rt: &Runtime,
        input: *const u8,
        recvbuf: *mut u8,
        counts: &[usize],
        dtype: &TypeRef,
        op: &Op,
    ) -> MpiResult<()> {
        let me = self.area.rank();
        let total: usize = counts.iter().sum();
        let at = counts[..me].iter().sum::<usize>() * dtype.size();
        let mine = counts[me];
        self.area.exchange(
            &mut self.idle(rt),
            Some(total * dtype.size()),
            // SAFETY: the input holds `total` elements; the slot as many packed bytes.
            |slot| unsafe { pack(input, total, dtype, slot) },
            Peers::All,
            |parts| {
                if mine == 0 {
                    return;
                }
                let mut blocks = [std::ptr::null::<u8>(); MAX_RANKS];
                for (b, &q) in blocks.iter_mut().zip(parts) {
                    *b = q.wrapping_add(at);
                }
                // SAFETY: our block of every slot holds this call's packed contribution;
                // recvbuf is writable.
                unsafe { fold_into(&blocks[..parts.len()], recvbuf, mine, dtype, op) }
            },
        )
    }
}

/// `out = p0 op (p1 op (... op pn-1))` into the user's buffer.
///
/// # Safety
/// Every part holds `count` packed elements; the type map at `out` is writable.
unsafe fn fold_into(parts: &[*const u8], out: *mut u8, count: usize, dtype: &TypeRef, op: &Op) {
    let bytes = count * dtype.size();
    // A contiguous type's buffer is the packed stream, shifted: fold there. Only other
    // types get a `Packed` view, whose copy of the type reference costs two locked
    // instructions (an `Arc`'s count up and down) on every small reduction.
    let (view, dst) = match dtype.contiguous_offset() {
        Some(off) => (None, out.wrapping_offset(off)),
        None => {
            // SAFETY: caller contract; the view is written back by finish below.
            let v = unsafe { Packed::new(out, count, dtype, false) };
            let p = v.ptr;
            (Some(v), p)
        }
    };
    let (last, rest) = parts.split_last().expect("fold_into: at least one part");
    // SAFETY: caller contract: `bytes` readable at each part, writable at `dst`.
    unsafe {
        std::ptr::copy_nonoverlapping(*last, dst, bytes);
        for &p in rest.iter().rev() {
            op.apply_packed(p, dst, count, dtype);
        }
        if let Some(v) = view {
            v.finish();
        }
    }
}
