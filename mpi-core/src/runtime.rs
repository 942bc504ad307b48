//! The runtime: start-up through PMI, the transports and router, the progress engines, and
//! every MPI call of the core as a method of [`Runtime`].
//!
//! All request-layer state sits in one [`Engine`] behind one mutex. API calls take the lock
//! for short, non-blocking steps; blocking calls loop over such steps and, between them,
//! spin, yield, and finally sleep on the transports' event sources (polling engine) or on a
//! completion doorbell rung by the progress threads (threaded engine). The lock is never
//! held while sleeping or while running user callbacks.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use tsunagi_p2p::boot::{Bootstrap, Registry};
use tsunagi_p2p::futex::LocalDoorbell;
use tsunagi_p2p::{EventSource, ProgressMode, Rank, Router};

use crate::boot::init_err;
use crate::comm::{self, CommData, CommId, ErrHandler, Keyval, MASK_WORDS};
use crate::datatype::TypeRef;
use crate::engine::{
    Buf, Engine, MsgId, ReqId, SendMode, Slab, Status, ANY_SOURCE, ANY_TAG, PROC_NULL,
};
use crate::error::{ErrorClass, MpiError, MpiResult};
use crate::group::Group;

/// Largest tag a user may use (MPI_TAG_UB).
pub const TAG_UB: i32 = i32::MAX;

/// MPI's thread support levels.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThreadLevel {
    Single = 0,
    Funneled = 1,
    Serialized = 2,
    Multiple = 3,
}

/// Predefined attributes of every communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredefinedAttr {
    TagUb,
    Host,
    Io,
    WtimeIsGlobal,
    UniverseSize,
    LastUsedCode,
    AppNum,
}

/// First id handed out by [`Runtime::create_keyval`].
pub const FIRST_USER_KEYVAL: i32 = 1000;

const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const FINALIZED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The process's MPI runtime (one per process, made by [`init`]).
pub struct Runtime {
    engine: Mutex<Engine>,
    rank: Rank,
    size: usize,
    mode: ProgressMode,
    /// Event sources of the transports that can wake us (all but the self path).
    sources: Vec<(usize, Arc<dyn EventSource>)>,
    /// Which event source the polling engine sleeps on next (several transports).
    sleep_turn: std::sync::atomic::AtomicUsize,
    /// Rung by progress threads when requests complete (threaded engine).
    completion_bell: Arc<LocalDoorbell>,
    stop_threads: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// How this process was started; asked again to abort and at finalize.
    boot: Mutex<Box<dyn Bootstrap>>,
    thread_level: ThreadLevel,
    main_thread: ThreadId,
    processor_name: String,
    epoch: Instant,
    spin: u32,
    yields: u32,
    /// Threaded engine: polls and yields of an idle progress thread before it sleeps.
    thread_spin: u32,
    thread_yields: u32,
    /// Completions seen by the progress threads (mirrors the engine's counter so that
    /// waiting application threads can watch it without the lock).
    completed: std::sync::atomic::AtomicU64,
    context_mask: Mutex<[u64; MASK_WORDS]>,
    keyvals: Mutex<Slab<Keyval>>,
    /// Node id of every world rank.
    nodes: Arc<Vec<u32>>,
    universe_size: i32,
    appnum: i32,
}

/// The running runtime, or an error naming `call` if MPI is not initialized or finalized.
pub fn rt(call: &str) -> MpiResult<&'static Runtime> {
    match STATE.load(Ordering::Acquire) {
        RUNNING => Ok(RUNTIME.get().expect("state RUNNING implies a runtime")),
        UNINIT => Err(MpiError::new(
            ErrorClass::Other,
            format!("{call}: MPI is not initialized (call MPI_Init first)"),
        )),
        _ => Err(MpiError::new(
            ErrorClass::Other,
            format!("{call}: MPI was already finalized"),
        )),
    }
}

/// MPI_Initialized.
pub fn initialized() -> bool {
    STATE.load(Ordering::Acquire) != UNINIT
}

/// MPI_Finalized.
pub fn finalized() -> bool {
    STATE.load(Ordering::Acquire) == FINALIZED
}

/// MPI_Init_thread: start the runtime. Returns the thread level provided.
pub fn init(required: ThreadLevel, registry: &Registry) -> MpiResult<ThreadLevel> {
    if STATE.load(Ordering::Acquire) != UNINIT {
        return Err(MpiError::new(
            ErrorClass::Other,
            "MPI_Init: MPI was already initialized",
        ));
    }
    let rt = Runtime::boot(required, registry)?;
    let level = rt.thread_level;
    if RUNTIME.set(rt).is_err() {
        return Err(MpiError::new(ErrorClass::Other, "MPI_Init: called twice"));
    }
    STATE.store(RUNNING, Ordering::Release);
    let rt = RUNTIME.get().expect("just set");
    rt.start_progress_threads();
    Ok(level)
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Runtime {
    fn boot(required: ThreadLevel, registry: &Registry) -> MpiResult<Runtime> {
        let mode = ProgressMode::from_env().map_err(init_err)?;
        let mut boot = crate::boot::bootstrap(registry)?;
        let (rank, size) = (boot.rank(), boot.size());
        let placement = crate::boot::placement(boot.as_mut())?;
        let router = crate::boot::start_transports(registry, boot.as_mut(), &placement)?;
        let nodes = placement.node;
        let my_node = nodes[rank as usize];
        let local = nodes.iter().filter(|&&n| n == my_node).count();
        let sources: Vec<(usize, Arc<dyn EventSource>)> = router
            .event_sources()
            .into_iter()
            .enumerate()
            .skip(1)
            .collect();

        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        // Waiting policy: poll, then yield, then sleep on the transports. A futex wake-up
        // costs tens of microseconds (about 100 in a VM), so a rank that has a core of its
        // own stays runnable for a long while (~tens of ms of yields); ranks that outnumber
        // the cores give their core away quickly instead.
        let oversubscribed = local > ncpu;
        let spin = env_u32("TSUNAGI_SPIN", if oversubscribed { 50 } else { 20_000 });
        let yields = env_u32("TSUNAGI_YIELDS", if oversubscribed { 20 } else { 20_000 });

        let mut engine = Engine::new(rank, size, router);
        let nodes = Arc::new(nodes);
        let world_group = Arc::new(Group::new((0..size as u32).collect()));
        engine.core.comms.push(Some(CommData {
            group: world_group,
            rank: rank as usize,
            context: 0,
            name: "MPI_COMM_WORLD".into(),
            errhandler: ErrHandler::Fatal,
            attrs: Default::default(),
            nodes: nodes.clone(),
        }));
        engine.core.comms.push(Some(CommData {
            group: Arc::new(Group::new(vec![rank])),
            rank: 0,
            context: 2,
            name: "MPI_COMM_SELF".into(),
            errhandler: ErrHandler::Fatal,
            attrs: Default::default(),
            nodes: Arc::new(vec![my_node]),
        }));
        let mut mask = comm::full_mask();
        comm::mark(&mut mask, 0, true);
        comm::mark(&mut mask, 1, true);

        let universe_size = size as i32;
        Ok(Runtime {
            engine: Mutex::new(engine),
            rank,
            size,
            mode,
            sources,
            sleep_turn: std::sync::atomic::AtomicUsize::new(0),
            completion_bell: LocalDoorbell::new(),
            stop_threads: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
            appnum: boot.appnum(),
            boot: Mutex::new(boot),
            thread_level: required.clamp(ThreadLevel::Single, ThreadLevel::Multiple),
            main_thread: std::thread::current().id(),
            processor_name: crate::boot::hostname(),
            epoch: Instant::now(),
            spin,
            yields,
            thread_spin: env_u32("TSUNAGI_THREAD_SPIN", if oversubscribed { 20 } else { 200 }),
            thread_yields: env_u32(
                "TSUNAGI_THREAD_YIELDS",
                if oversubscribed { 50 } else { 20_000 },
            ),
            completed: std::sync::atomic::AtomicU64::new(0),
            context_mask: Mutex::new(mask),
            keyvals: Mutex::new(Slab::default()),
            nodes,
            universe_size,
        })
    }

    fn start_progress_threads(&'static self) {
        if self.mode != ProgressMode::Threaded {
            return;
        }
        let mut threads = self.threads.lock().expect("threads lock");
        for (idx, src) in self.sources.iter().cloned() {
            let stop = self.stop_threads.clone();
            let h = std::thread::Builder::new()
                .name(format!("tsunagi-progress-{idx}"))
                .spawn(move || self.progress_thread(idx, src, stop))
                .expect("spawn progress thread");
            threads.push(h);
        }
    }

    /// Threaded engine: block on this transport's event source, then handle its events
    /// under the engine lock.
    fn progress_thread(&self, idx: usize, src: Arc<dyn EventSource>, stop: Arc<AtomicBool>) {
        // Poll, then spin and yield for a while before sleeping: a futex wake-up costs tens
        // of microseconds (far more in a VM), which is the whole latency budget.
        let mut idle: u32 = 0;
        while !stop.load(Ordering::Acquire) {
            let sleeping = idle >= self.thread_spin.saturating_add(self.thread_yields);
            let token = if sleeping { src.prepare() } else { 0 };
            let (n, busy, completed) = {
                let mut e = self.lock();
                let before = e.core.completions;
                let n = e.progress_one(idx).unwrap_or(0);
                let completed = e.core.completions != before;
                if completed || e.core.fault.is_some() {
                    self.completed.store(e.core.completions, Ordering::Release);
                    self.completion_bell.ring();
                }
                (n, e.core_has_outgoing(), completed)
            };
            if n > 0 {
                idle = 0;
                if sleeping {
                    src.cancel();
                }
                if completed {
                    // An application thread may be waiting for this: let it run now
                    // rather than after this thread's next spins (they may share a core).
                    std::thread::yield_now();
                }
                continue;
            }
            idle = idle.saturating_add(1);
            if !sleeping {
                if idle < self.thread_spin {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            let t = if busy {
                Duration::from_micros(50)
            } else {
                Duration::from_millis(20)
            };
            src.sleep(token, t);
        }
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock leaves the engine in an unknown state; MPI has no
        // recovery, so keep going with what is there (the job will most likely abort).
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This process's world rank.
    pub fn world_rank(&self) -> usize {
        self.rank as usize
    }
    /// Size of MPI_COMM_WORLD.
    pub fn world_size(&self) -> usize {
        self.size
    }
    /// The progress engine in use.
    pub fn progress_mode(&self) -> ProgressMode {
        self.mode
    }
    /// Node id of each world rank.
    pub fn node_map(&self) -> Arc<Vec<u32>> {
        self.nodes.clone()
    }
    /// The thread level provided.
    pub fn thread_level(&self) -> ThreadLevel {
        self.thread_level
    }
    /// MPI_Is_thread_main.
    pub fn is_thread_main(&self) -> bool {
        std::thread::current().id() == self.main_thread
    }
    /// MPI_Get_processor_name.
    pub fn processor_name(&self) -> &str {
        &self.processor_name
    }
    /// MPI_Wtime: seconds since an arbitrary point in the past.
    pub fn wtime(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Run one non-blocking progress step (MPI_Test-style calls use it).
    pub fn progress(&self) -> MpiResult<()> {
        let mut e = self.lock();
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        } else if let Some(f) = &e.core.fault {
            return Err(f.clone());
        }
        Ok(())
    }

    /// Block until `done` is true, making progress meanwhile.
    fn block_until(&self, mut done: impl FnMut(&mut Engine) -> MpiResult<bool>) -> MpiResult<()> {
        let mut iter: u32 = 0;
        let threaded = self.mode == ProgressMode::Threaded;
        loop {
            let mut e = self.lock();
            if threaded {
                if let Some(f) = &e.core.fault {
                    return Err(f.clone());
                }
            } else {
                e.progress()?;
            }
            if done(&mut e)? {
                return Ok(());
            }
            iter = iter.saturating_add(1);
            let (spin, yields) = if threaded {
                (0, 0)
            } else {
                (self.spin, self.yields)
            };
            if iter < spin {
                drop(e);
                std::hint::spin_loop();
                continue;
            }
            if iter < spin.saturating_add(yields) {
                drop(e);
                std::thread::yield_now();
                continue;
            }
            if threaded {
                // Wait for a progress thread to complete something: watch the counter
                // without the lock, yielding, and sleep on the completion doorbell only
                // after a while.
                let seen = self.completed.load(Ordering::Acquire);
                let token = self.completion_bell.prepare();
                if done(&mut e)? {
                    self.completion_bell.cancel();
                    return Ok(());
                }
                drop(e);
                let mut waited: u32 = 0;
                while self.completed.load(Ordering::Acquire) == seen && waited < self.yields {
                    std::thread::yield_now();
                    waited += 1;
                }
                if self.completed.load(Ordering::Acquire) == seen {
                    self.completion_bell.sleep(token, Duration::from_millis(20));
                } else {
                    self.completion_bell.cancel();
                }
                continue;
            }
            // Polling engine, idle for a while: sleep on the transports.
            if self.sources.is_empty() {
                drop(e);
                std::thread::yield_now();
                continue;
            }
            let tokens: Vec<u64> = self.sources.iter().map(|(_, s)| s.prepare()).collect();
            let n = e.progress()?;
            if n > 0 || done(&mut e)? {
                for (_, s) in &self.sources {
                    s.cancel();
                }
                if done(&mut e)? {
                    return Ok(());
                }
                continue;
            }
            let busy = e.core_has_outgoing();
            drop(e);
            // One thread can block on one event source only. With several transports
            // (shared memory's futex, a socket's epoll) take turns, with short sleeps, so
            // that an arrival on any of them is seen within ~100 µs.
            let n = self.sources.len();
            let timeout = if busy {
                Duration::from_micros(50)
            } else if n > 1 {
                Duration::from_micros(100)
            } else {
                Duration::from_millis(20)
            };
            let turn = self.sleep_turn.fetch_add(1, Ordering::Relaxed) % n;
            self.sources[turn].1.sleep(tokens[turn], timeout);
            for (i, (_, s)) in self.sources.iter().enumerate() {
                if i != turn {
                    s.cancel();
                }
            }
        }
    }

    // ----- argument checks -----

    fn check_comm<'e>(&self, e: &'e Engine, call: &str, comm: CommId) -> MpiResult<&'e CommData> {
        e.core.comm(comm).ok_or_else(|| {
            MpiError::new(
                ErrorClass::Comm,
                format!(
                    "{call}: invalid communicator (handle {} is not a live communicator)",
                    comm.0
                ),
            )
        })
    }

    fn check_type(call: &str, dtype: &TypeRef) -> MpiResult<()> {
        if !dtype.is_committed() {
            return Err(MpiError::new(
                ErrorClass::Type,
                format!("{call}: datatype {} is not committed", dtype.name()),
            ));
        }
        Ok(())
    }

    fn check_count(call: &str, count: i64) -> MpiResult<usize> {
        if count < 0 {
            return Err(MpiError::new(
                ErrorClass::Count,
                format!("{call}: count {count} is negative"),
            ));
        }
        Ok(count as usize)
    }

    fn check_buf(call: &str, buf: *const u8, count: usize, dtype: &TypeRef) -> MpiResult<()> {
        if buf.is_null() && count > 0 && dtype.size() > 0 && dtype.true_lb() == 0 {
            return Err(MpiError::new(
                ErrorClass::Buffer,
                format!("{call}: buffer is NULL but count is {count}"),
            ));
        }
        Ok(())
    }

    fn check_tag(call: &str, tag: i32, allow_any: bool) -> MpiResult<()> {
        if (allow_any && tag == ANY_TAG) || (0..=TAG_UB).contains(&tag) {
            return Ok(());
        }
        Err(MpiError::new(
            ErrorClass::Tag,
            format!("{call}: invalid tag {tag} (tags run from 0 to {TAG_UB})"),
        ))
    }

    fn check_rank(
        call: &str,
        what: &str,
        rank: i32,
        size: usize,
        allow_any: bool,
    ) -> MpiResult<()> {
        if rank == PROC_NULL
            || (allow_any && rank == ANY_SOURCE)
            || (rank >= 0 && (rank as usize) < size)
        {
            return Ok(());
        }
        Err(MpiError::new(
            ErrorClass::Rank,
            format!("{call}: invalid {what} rank {rank} (communicator size {size})"),
        ))
    }

    // ----- point-to-point -----

    /// Make (but do not start) a send or receive request after checking its arguments.
    ///
    /// # Safety
    /// `buf` must stay valid for the whole life of the request (MPI's buffer rules).
    #[allow(clippy::too_many_arguments)]
    unsafe fn make_request(
        &self,
        e: &mut Engine,
        call: &str,
        send: Option<SendMode>,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        peer: i32,
        tag: i32,
        comm: CommId,
        persistent: bool,
    ) -> MpiResult<ReqId> {
        let c = self.check_comm(e, call, comm)?;
        let count = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, count, dtype)?;
        let is_recv = send.is_none();
        Self::check_tag(call, tag, is_recv)?;
        Self::check_rank(
            call,
            if is_recv { "source" } else { "destination" },
            peer,
            c.size(),
            is_recv,
        )?;
        Ok(e.new_request(
            send,
            Buf(buf),
            count,
            dtype.clone(),
            comm,
            peer,
            tag,
            persistent,
        ))
    }

    /// Make and start a non-persistent request; on failure nothing stays posted.
    ///
    /// # Safety
    /// As [`Runtime::make_request`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn start_new(
        &self,
        e: &mut Engine,
        call: &str,
        send: Option<SendMode>,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        peer: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let id = self.make_request(e, call, send, buf, count, dtype, peer, tag, comm, false)?;
        if let Err(err) = e.start(id) {
            e.detach(id);
            return Err(with_call(call, err));
        }
        Ok(id)
    }

    /// MPI_Isend / MPI_Issend / MPI_Irsend / MPI_Ibsend.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `dtype` and stay valid and unmodified until the
    /// request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn isend(
        &self,
        call: &str,
        buf: *const u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        tag: i32,
        comm: CommId,
        mode: SendMode,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        self.start_new(
            &mut e,
            call,
            Some(mode),
            buf as *mut u8,
            count,
            dtype,
            dest,
            tag,
            comm,
        )
    }

    /// MPI_Irecv.
    ///
    /// # Safety
    /// `buf` must have room for `count` elements of `dtype` and stay valid, and not be
    /// read or written by the program, until the request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn irecv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        source: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        self.start_new(&mut e, call, None, buf, count, dtype, source, tag, comm)
    }

    /// MPI_Send / MPI_Ssend / MPI_Rsend / MPI_Bsend.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send(
        &self,
        call: &str,
        buf: *const u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        tag: i32,
        comm: CommId,
        mode: SendMode,
    ) -> MpiResult<()> {
        let id = {
            let mut e = self.lock();
            let id = self.start_new(
                &mut e,
                call,
                Some(mode),
                buf as *mut u8,
                count,
                dtype,
                dest,
                tag,
                comm,
            )?;
            // Eager sends are complete once handed to the transport: collect them under
            // the same lock, without another progress pass.
            if e.is_done(id) {
                e.test(id)?;
                return Ok(());
            }
            id
        };
        self.wait(call, id).map(|_| ())
    }

    /// MPI_Recv.
    ///
    /// # Safety
    /// `buf` must have room for `count` elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn recv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        source: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<Status> {
        let id = self.irecv(call, buf, count, dtype, source, tag, comm)?;
        self.wait(call, id)
    }

    /// MPI_Send_init and friends / MPI_Recv_init: a persistent request, inactive.
    ///
    /// # Safety
    /// As [`Runtime::isend`] / [`Runtime::irecv`], for every start of the request until it
    /// is freed.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn persistent(
        &self,
        call: &str,
        send: Option<SendMode>,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        peer: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        self.make_request(&mut e, call, send, buf, count, dtype, peer, tag, comm, true)
    }

    /// MPI_Start.
    pub fn start(&self, id: ReqId) -> MpiResult<()> {
        let mut e = self.lock();
        if !e.is_persistent(id) {
            return Err(MpiError::new(
                ErrorClass::Request,
                "MPI_Start: request is not a persistent request",
            ));
        }
        e.start(id)
    }

    /// MPI_Startall.
    pub fn startall(&self, ids: &[ReqId]) -> MpiResult<()> {
        for &id in ids {
            self.start(id)?;
        }
        Ok(())
    }

    fn complete_status(call: &str, st: Status) -> MpiResult<Status> {
        if st.error == ErrorClass::Truncate as i32 {
            return Err(MpiError::new(
                ErrorClass::Truncate,
                format!(
                    "{call}: message truncated: the receive buffer holds {} bytes, a longer message arrived",
                    st.bytes
                ),
            ));
        }
        Ok(st)
    }

    /// MPI_Wait. A truncated receive returns MPI_ERR_TRUNCATE (the data that fits was
    /// stored).
    pub fn wait(&self, call: &str, id: ReqId) -> MpiResult<Status> {
        let mut out = None;
        self.block_until(|e| {
            if !e.request_exists(id) {
                return Err(MpiError::new(
                    ErrorClass::Request,
                    format!("{call}: invalid request"),
                ));
            }
            if e.is_done(id) {
                out = e.test(id)?;
                return Ok(true);
            }
            Ok(false)
        })?;
        Self::complete_status(call, out.unwrap_or(Status::EMPTY))
    }

    /// Like [`Runtime::wait`], but a truncation is reported in the status, not as an
    /// error (for MPI_Waitall's MPI_ERR_IN_STATUS handling).
    pub fn wait_raw(&self, call: &str, id: ReqId) -> MpiResult<Status> {
        let mut out = None;
        self.block_until(|e| {
            if !e.request_exists(id) {
                return Err(MpiError::new(
                    ErrorClass::Request,
                    format!("{call}: invalid request"),
                ));
            }
            if e.is_done(id) {
                out = e.test(id)?;
                return Ok(true);
            }
            Ok(false)
        })?;
        Ok(out.unwrap_or(Status::EMPTY))
    }

    /// MPI_Test: Some(status) when complete.
    pub fn test(&self, call: &str, id: ReqId) -> MpiResult<Option<Status>> {
        let mut e = self.lock();
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        }
        if !e.request_exists(id) {
            return Err(MpiError::new(
                ErrorClass::Request,
                format!("{call}: invalid request"),
            ));
        }
        match e.test(id)? {
            Some(st) => Self::complete_status(call, st).map(Some),
            None => Ok(None),
        }
    }

    /// MPI_Request_get_status: like test, but the request stays.
    pub fn request_get_status(&self, id: ReqId) -> MpiResult<Option<Status>> {
        let mut e = self.lock();
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        }
        e.peek(id)
    }

    /// True when the request is persistent (a completed one stays allocated).
    pub fn is_persistent(&self, id: ReqId) -> bool {
        self.lock().is_persistent(id)
    }

    /// True when the request is active (started and not completed-and-collected).
    pub fn is_active(&self, id: ReqId) -> bool {
        self.lock().is_active(id)
    }

    /// MPI_Waitall: statuses in order; entries that are None (MPI_REQUEST_NULL) give the
    /// empty status. Truncation shows in the statuses' `error` fields.
    pub fn waitall(&self, call: &str, ids: &[Option<ReqId>]) -> MpiResult<Vec<Status>> {
        let mut out = vec![Status::EMPTY; ids.len()];
        let mut left: Vec<usize> = (0..ids.len()).filter(|&i| ids[i].is_some()).collect();
        // Every completion bumps the engine's counter: while it stands still, nothing in
        // `left` can have finished, so a spinning wait skips the O(n) rescan.
        let mut scanned_at: Option<u64> = None;
        self.block_until(|e| {
            if scanned_at == Some(e.core.completions) {
                return Ok(false);
            }
            scanned_at = Some(e.core.completions);
            let mut k = 0;
            while k < left.len() {
                let i = left[k];
                let id = ids[i].expect("filtered");
                if !e.request_exists(id) {
                    return Err(MpiError::new(
                        ErrorClass::Request,
                        format!("{call}: invalid request at index {i}"),
                    ));
                }
                if e.is_done(id) {
                    out[i] = e.test(id)?.unwrap_or(Status::EMPTY);
                    left.swap_remove(k);
                } else {
                    k += 1;
                }
            }
            Ok(left.is_empty())
        })?;
        Ok(out)
    }

    /// MPI_Testall: Some(statuses) if all are complete (then all are collected), else None
    /// (and none is collected).
    pub fn testall(&self, call: &str, ids: &[Option<ReqId>]) -> MpiResult<Option<Vec<Status>>> {
        let mut e = self.lock();
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        }
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                if !e.request_exists(*id) {
                    return Err(MpiError::new(
                        ErrorClass::Request,
                        format!("{call}: invalid request at index {i}"),
                    ));
                }
                if !e.is_done(*id) {
                    return Ok(None);
                }
            }
        }
        let mut out = vec![Status::EMPTY; ids.len()];
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                out[i] = e.test(*id)?.unwrap_or(Status::EMPTY);
            }
        }
        Ok(Some(out))
    }

    /// Index and status of one completed active request among `ids`, if any (collected).
    fn any_done(
        e: &mut Engine,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Option<(usize, Status)>> {
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                if !e.request_exists(*id) {
                    return Err(MpiError::new(
                        ErrorClass::Request,
                        format!("{call}: invalid request at index {i}"),
                    ));
                }
                if e.is_active(*id) && e.is_done(*id) {
                    return Ok(e.test(*id)?.map(|s| (i, s)));
                }
            }
        }
        Ok(None)
    }

    fn has_active(e: &Engine, ids: &[Option<ReqId>]) -> bool {
        ids.iter().flatten().any(|id| e.is_active(*id))
    }

    /// MPI_Waitany: None when no request is active (MPI_UNDEFINED).
    pub fn waitany(&self, call: &str, ids: &[Option<ReqId>]) -> MpiResult<Option<(usize, Status)>> {
        let mut out = None;
        self.block_until(|e| {
            if let Some(r) = Self::any_done(e, call, ids)? {
                out = Some(r);
                return Ok(true);
            }
            Ok(!Self::has_active(e, ids))
        })?;
        Ok(out)
    }

    /// MPI_Testany: Ok(Err(())) when no request is active; Ok(Ok(None)) when none is done.
    #[allow(clippy::type_complexity)]
    pub fn testany(
        &self,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Result<Option<(usize, Status)>, ()>> {
        let mut e = self.lock();
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        }
        if let Some(r) = Self::any_done(&mut e, call, ids)? {
            return Ok(Ok(Some(r)));
        }
        if !Self::has_active(&e, ids) {
            return Ok(Err(()));
        }
        Ok(Ok(None))
    }

    fn all_done_now(
        e: &mut Engine,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Vec<(usize, Status)>> {
        let mut done = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                if !e.request_exists(*id) {
                    return Err(MpiError::new(
                        ErrorClass::Request,
                        format!("{call}: invalid request at index {i}"),
                    ));
                }
                if e.is_active(*id) && e.is_done(*id) {
                    if let Some(s) = e.test(*id)? {
                        done.push((i, s));
                    }
                }
            }
        }
        Ok(done)
    }

    /// MPI_Waitsome: None when no request is active (outcount MPI_UNDEFINED).
    pub fn waitsome(
        &self,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Option<Vec<(usize, Status)>>> {
        let mut out = None;
        self.block_until(|e| {
            if !Self::has_active(e, ids) {
                return Ok(true);
            }
            let d = Self::all_done_now(e, call, ids)?;
            if !d.is_empty() {
                out = Some(d);
                return Ok(true);
            }
            Ok(false)
        })?;
        Ok(out)
    }

    /// MPI_Testsome: None when no request is active.
    pub fn testsome(
        &self,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Option<Vec<(usize, Status)>>> {
        let mut e = self.lock();
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        }
        if !Self::has_active(&e, ids) {
            return Ok(None);
        }
        Ok(Some(Self::all_done_now(&mut e, call, ids)?))
    }

    /// MPI_Request_free.
    pub fn request_free(&self, id: ReqId) -> MpiResult<()> {
        self.lock().free_request(id)
    }

    /// MPI_Cancel.
    pub fn cancel(&self, id: ReqId) -> MpiResult<()> {
        self.lock().cancel(id)
    }

    /// MPI_Iprobe (with `take`: MPI_Improbe).
    pub fn iprobe(
        &self,
        call: &str,
        source: i32,
        tag: i32,
        comm: CommId,
        take: bool,
    ) -> MpiResult<Option<(Status, Option<MsgId>)>> {
        let mut e = self.lock();
        let c = self.check_comm(&e, call, comm)?;
        Self::check_rank(call, "source", source, c.size(), true)?;
        Self::check_tag(call, tag, true)?;
        if source == PROC_NULL {
            return Ok(Some((Status::PROC_NULL, None)));
        }
        if self.mode == ProgressMode::Polling {
            e.progress()?;
        }
        e.probe(comm, source, tag, take)
    }

    /// MPI_Probe (with `take`: MPI_Mprobe).
    pub fn probe(
        &self,
        call: &str,
        source: i32,
        tag: i32,
        comm: CommId,
        take: bool,
    ) -> MpiResult<(Status, Option<MsgId>)> {
        {
            let e = self.lock();
            let c = self.check_comm(&e, call, comm)?;
            Self::check_rank(call, "source", source, c.size(), true)?;
            Self::check_tag(call, tag, true)?;
        }
        if source == PROC_NULL {
            return Ok((Status::PROC_NULL, None));
        }
        let mut out = None;
        self.block_until(|e| {
            out = e.probe(comm, source, tag, take)?;
            Ok(out.is_some())
        })?;
        Ok(out.expect("loop ends with a message"))
    }

    /// MPI_Imrecv: receive the message `msg` (from mprobe). `msg == None` is
    /// MPI_MESSAGE_NO_PROC (a probe of MPI_PROC_NULL).
    ///
    /// # Safety
    /// As [`Runtime::irecv`].
    pub unsafe fn imrecv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        msg: Option<MsgId>,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        let count = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, count, dtype)?;
        let Some(msg) = msg else {
            let id = e.new_request(
                None,
                Buf(buf),
                count,
                dtype.clone(),
                CommId::SELF,
                PROC_NULL,
                0,
                false,
            );
            e.start(id)?;
            return Ok(id);
        };
        let comm = e.msg_comm(msg).ok_or_else(|| {
            MpiError::new(
                ErrorClass::Request,
                format!("{call}: invalid message handle"),
            )
        })?;
        let id = e.new_request(
            None,
            Buf(buf),
            count,
            dtype.clone(),
            CommId::WORLD,
            ANY_SOURCE,
            ANY_TAG,
            false,
        );
        e.set_request_comm(id, comm);
        e.start_mrecv(id, msg)?;
        Ok(id)
    }

    /// MPI_Mrecv.
    ///
    /// # Safety
    /// As [`Runtime::recv`].
    pub unsafe fn mrecv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        msg: Option<MsgId>,
    ) -> MpiResult<Status> {
        let id = self.imrecv(call, buf, count, dtype, msg)?;
        self.wait(call, id)
    }

    /// MPI_Sendrecv.
    ///
    /// # Safety
    /// As [`Runtime::isend`] and [`Runtime::irecv`]; the buffers must not overlap.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn sendrecv(
        &self,
        sbuf: *const u8,
        scount: i64,
        stype: &TypeRef,
        dest: i32,
        stag: i32,
        rbuf: *mut u8,
        rcount: i64,
        rtype: &TypeRef,
        source: i32,
        rtag: i32,
        comm: CommId,
    ) -> MpiResult<Status> {
        let call = "MPI_Sendrecv";
        let r = self.irecv(call, rbuf, rcount, rtype, source, rtag, comm)?;
        let s = match self.isend(
            call,
            sbuf,
            scount,
            stype,
            dest,
            stag,
            comm,
            SendMode::Standard,
        ) {
            Ok(s) => s,
            Err(err) => {
                let _ = self.cancel(r);
                let _ = self.wait_raw(call, r);
                return Err(err);
            }
        };
        let st = self.waitall(call, &[Some(s), Some(r)])?;
        Self::complete_status(call, st[1])
    }

    /// MPI_Sendrecv_replace: the buffer is sent, then overwritten by the received data.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn sendrecv_replace(
        &self,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        stag: i32,
        source: i32,
        rtag: i32,
        comm: CommId,
    ) -> MpiResult<Status> {
        let call = "MPI_Sendrecv_replace";
        let n = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, n, dtype)?;
        let bytes = dtype.packed_size(n);
        let mut packed = vec![0u8; bytes];
        dtype.pack_range(buf, n, 0, &mut packed);
        let byte = self.lock().byte_type();
        let r = self.irecv(call, buf, count, dtype, source, rtag, comm)?;
        let sent = self.isend(
            call,
            packed.as_ptr(),
            bytes as i64,
            &byte,
            dest,
            stag,
            comm,
            SendMode::Standard,
        );
        let s = match sent {
            Ok(s) => s,
            Err(err) => {
                // The receive must not stay posted on the caller's buffer.
                let _ = self.cancel(r);
                let _ = self.wait_raw(call, r);
                return Err(err);
            }
        };
        let st = self.waitall(call, &[Some(s), Some(r)])?;
        drop(packed);
        Self::complete_status(call, st[1])
    }

    /// MPI_Buffer_attach.
    pub fn buffer_attach(&self, addr: *mut u8, size: usize) -> MpiResult<()> {
        let mut e = self.lock();
        if e.core.bsend_buffer.is_some() {
            return Err(MpiError::new(
                ErrorClass::Buffer,
                "MPI_Buffer_attach: a buffer is already attached (detach it first)",
            ));
        }
        e.core.bsend_buffer = Some((addr as usize, size));
        Ok(())
    }

    /// MPI_Buffer_detach: waits until every buffered message has left, then returns the
    /// buffer's address and size.
    pub fn buffer_detach(&self) -> MpiResult<(*mut u8, usize)> {
        self.block_until(|e| Ok(e.core.bsend_used == 0))?;
        let mut e = self.lock();
        match e.core.bsend_buffer.take() {
            Some((a, s)) => Ok((a as *mut u8, s)),
            None => Err(MpiError::new(
                ErrorClass::Buffer,
                "MPI_Buffer_detach: no buffer is attached",
            )),
        }
    }

    /// Live requests (a leak check for tests).
    pub fn live_requests(&self) -> usize {
        self.lock().live_requests()
    }

    // ----- communicators -----

    fn with_comm<T>(
        &self,
        call: &str,
        comm: CommId,
        f: impl FnOnce(&CommData) -> T,
    ) -> MpiResult<T> {
        let e = self.lock();
        let c = self.check_comm(&e, call, comm)?;
        Ok(f(c))
    }

    /// MPI_Comm_size.
    pub fn comm_size(&self, comm: CommId) -> MpiResult<usize> {
        self.with_comm("MPI_Comm_size", comm, |c| c.size())
    }
    /// MPI_Comm_rank.
    pub fn comm_rank(&self, comm: CommId) -> MpiResult<usize> {
        self.with_comm("MPI_Comm_rank", comm, |c| c.rank)
    }
    /// MPI_Comm_group.
    pub fn comm_group(&self, comm: CommId) -> MpiResult<Arc<Group>> {
        self.with_comm("MPI_Comm_group", comm, |c| c.group.clone())
    }
    /// Node id of each rank of the communicator.
    pub fn comm_nodes(&self, comm: CommId) -> MpiResult<Arc<Vec<u32>>> {
        self.with_comm("MPI_Comm_split_type", comm, |c| c.nodes.clone())
    }
    /// The collective context of a communicator (for the collectives layer).
    pub fn comm_coll_context(&self, comm: CommId) -> MpiResult<u32> {
        self.with_comm("collective", comm, |c| c.coll_context())
    }
    /// Check that `comm` is a live communicator.
    pub fn check_comm_id(&self, call: &str, comm: CommId) -> MpiResult<()> {
        self.with_comm(call, comm, |_| ())
    }
    /// MPI_Comm_get_name.
    pub fn comm_get_name(&self, comm: CommId) -> MpiResult<String> {
        self.with_comm("MPI_Comm_get_name", comm, |c| c.name.clone())
    }
    /// MPI_Comm_set_name.
    pub fn comm_set_name(&self, comm: CommId, name: &str) -> MpiResult<()> {
        let mut e = self.lock();
        self.check_comm(&e, "MPI_Comm_set_name", comm)?;
        e.core.comm_mut(comm).expect("checked").name = name.to_string();
        Ok(())
    }

    /// Internal all-gather of byte blocks over `comm`'s collective context (used to make
    /// communicators; the collectives layer has the fast algorithms).
    pub fn allgather_bytes(
        &self,
        call: &str,
        comm: CommId,
        mine: &[u8],
    ) -> MpiResult<Vec<Vec<u8>>> {
        let (ctx_comm, size, rank, group) = {
            let e = self.lock();
            let c = self.check_comm(&e, call, comm)?;
            (comm, c.size(), c.rank, c.group.clone())
        };
        let _ = group;
        // Lengths first, then data, both as all-to-all of point-to-point messages on the
        // collective context (tag space below zero is reserved for internal traffic).
        let lens = self.exchange(
            ctx_comm,
            size,
            rank,
            -100,
            &(mine.len() as u64).to_ne_bytes(),
            |_| 8,
        )?;
        let lens: Vec<usize> = lens
            .iter()
            .map(|b| u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")) as usize)
            .collect();
        self.exchange(ctx_comm, size, rank, -101, mine, |r| lens[r])
    }

    /// Send `mine` to every other member and receive theirs, on the collective context.
    fn exchange(
        &self,
        comm: CommId,
        size: usize,
        rank: usize,
        tag: i32,
        mine: &[u8],
        len_of: impl Fn(usize) -> usize,
    ) -> MpiResult<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = (0..size).map(|r| vec![0u8; len_of(r)]).collect();
        out[rank] = mine.to_vec();
        let mut reqs = Vec::new();
        {
            let mut e = self.lock();
            let byte = e.byte_type();
            let ctx = e.core.comm(comm).expect("checked").coll_context();
            for (r, buf) in out.iter_mut().enumerate() {
                if r == rank {
                    continue;
                }
                let id = e.new_request(
                    None,
                    Buf(buf.as_mut_ptr()),
                    buf.len(),
                    byte.clone(),
                    comm,
                    r as i32,
                    tag,
                    false,
                );
                e.set_request_context(id, ctx);
                e.start(id)?;
                reqs.push(Some(id));
            }
            for r in 0..size {
                if r == rank {
                    continue;
                }
                let id = e.new_request(
                    Some(SendMode::Standard),
                    Buf(mine.as_ptr() as *mut u8),
                    mine.len(),
                    byte.clone(),
                    comm,
                    r as i32,
                    tag,
                    false,
                );
                e.set_request_context(id, ctx);
                e.start(id)?;
                reqs.push(Some(id));
            }
        }
        self.waitall("internal exchange", &reqs)?;
        Ok(out)
    }

    /// Non-blocking send on `comm`'s collective context, for the collectives layer and
    /// internal protocols: any tag (negative ones are reserved for internal use), no
    /// user-argument checks beyond the communicator and the rank.
    ///
    /// # Safety
    /// As [`Runtime::isend`].
    pub unsafe fn coll_isend(
        &self,
        buf: *const u8,
        count: usize,
        dtype: &TypeRef,
        dest: usize,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        self.coll_request(
            Some(SendMode::Standard),
            buf as *mut u8,
            count,
            dtype,
            dest,
            tag,
            comm,
        )
    }

    /// Non-blocking receive on `comm`'s collective context (see [`Runtime::coll_isend`]).
    ///
    /// # Safety
    /// As [`Runtime::irecv`].
    pub unsafe fn coll_irecv(
        &self,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        source: usize,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        self.coll_request(None, buf, count, dtype, source, tag, comm)
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn coll_request(
        &self,
        send: Option<SendMode>,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
        peer: usize,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        let c = self.check_comm(&e, "collective", comm)?;
        if peer >= c.size() {
            return Err(MpiError::new(
                ErrorClass::Rank,
                format!(
                    "collective: rank {peer} outside communicator of size {}",
                    c.size()
                ),
            ));
        }
        let ctx = c.coll_context();
        let id = e.new_request(
            send,
            Buf(buf),
            count,
            dtype.clone(),
            comm,
            peer as i32,
            tag,
            false,
        );
        e.set_request_context(id, ctx);
        e.start(id)?;
        Ok(id)
    }

    /// Internal barrier over `comm`.
    pub fn barrier_internal(&self, comm: CommId) -> MpiResult<()> {
        self.allgather_bytes("MPI_Barrier", comm, &[]).map(|_| ())
    }

    /// Agree with the members of `comm` on a context pair free everywhere, given every
    /// member's mask (already gathered).
    fn agree_context(&self, masks: &[Vec<u8>]) -> MpiResult<u32> {
        let mut and = comm::full_mask();
        for m in masks {
            for (i, w) in and.iter_mut().enumerate() {
                *w &= u64::from_ne_bytes(m[i * 8..i * 8 + 8].try_into().expect("mask words"));
            }
        }
        let k = comm::lowest_free(&and).ok_or_else(|| {
            MpiError::new(
                ErrorClass::Other,
                "out of communicator context ids (too many communicators)",
            )
        })?;
        comm::mark(&mut self.context_mask.lock().expect("mask lock"), k, true);
        Ok((2 * k) as u32)
    }

    fn mask_bytes(&self) -> Vec<u8> {
        let m = *self.context_mask.lock().expect("mask lock");
        m.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    fn insert_comm(
        &self,
        parent: CommId,
        group: Group,
        rank: usize,
        context: u32,
    ) -> MpiResult<CommId> {
        let mut e = self.lock();
        let (errhandler, world_nodes) = {
            let p = self.check_comm(&e, "communicator creation", parent)?;
            (p.errhandler.clone(), self.nodes.clone())
        };
        let nodes = Arc::new(
            group
                .world_ranks()
                .iter()
                .map(|&w| world_nodes[w as usize])
                .collect(),
        );
        let data = CommData {
            group: Arc::new(group),
            rank,
            context,
            name: String::new(),
            errhandler,
            attrs: Default::default(),
            nodes,
        };
        let slot = e.core.comms.iter().position(|c| c.is_none());
        let id = match slot {
            Some(i) if i >= 2 => {
                e.core.comms[i] = Some(data);
                i
            }
            _ => {
                e.core.comms.push(Some(data));
                e.core.comms.len() - 1
            }
        };
        Ok(CommId(id as u32))
    }

    /// MPI_Comm_dup (attributes copied through their keyvals' copy callbacks).
    pub fn comm_dup(&self, comm: CommId) -> MpiResult<CommId> {
        let call = "MPI_Comm_dup";
        let masks = self.allgather_bytes(call, comm, &self.mask_bytes())?;
        let context = self.agree_context(&masks)?;
        let (group, rank, attrs) = {
            let e = self.lock();
            let c = self.check_comm(&e, call, comm)?;
            ((*c.group).clone(), c.rank, c.attrs.clone())
        };
        let new = self.insert_comm(comm, group, rank, context)?;
        // Copy callbacks run without the engine lock: they may call MPI.
        for (kv, val) in attrs {
            let keyval = self
                .keyvals
                .lock()
                .expect("keyvals")
                .get(kv_index(kv))
                .cloned();
            if let Some(Keyval {
                copy: Some(f),
                extra,
                ..
            }) = keyval
            {
                if let Some(v) = f(comm, kv, extra, val)? {
                    let mut e = self.lock();
                    e.core.comm_mut(new).expect("just made").attrs.insert(kv, v);
                }
            }
        }
        Ok(new)
    }

    /// MPI_Comm_split: None for MPI_UNDEFINED colour (MPI_COMM_NULL).
    pub fn comm_split(&self, comm: CommId, color: i32, key: i32) -> MpiResult<Option<CommId>> {
        let call = "MPI_Comm_split";
        let mut mine = Vec::with_capacity(8 + MASK_WORDS * 8);
        mine.extend_from_slice(&color.to_ne_bytes());
        mine.extend_from_slice(&key.to_ne_bytes());
        mine.extend_from_slice(&self.mask_bytes());
        let all = self.allgather_bytes(call, comm, &mine)?;
        // The colours are checked after the exchange, so that every member sees the same
        // verdict and nobody is left waiting for a rank that gave up early.
        for (r, b) in all.iter().enumerate() {
            let c = i32::from_ne_bytes(b[0..4].try_into().expect("4 bytes"));
            if c < 0 && c != crate::group::UNDEFINED {
                return Err(MpiError::new(
                    ErrorClass::Arg,
                    format!("{call}: invalid color {c} (given by rank {r}; colors must be >= 0 or MPI_UNDEFINED)"),
                ));
            }
        }
        let masks: Vec<Vec<u8>> = all.iter().map(|b| b[8..].to_vec()).collect();
        let context = self.agree_context(&masks)?;
        if color == crate::group::UNDEFINED {
            self.release_context(context);
            return Ok(None);
        }
        let parent = self.comm_group(comm)?;
        let mut members: Vec<(i32, usize)> = all
            .iter()
            .enumerate()
            .filter_map(|(r, b)| {
                let c = i32::from_ne_bytes(b[0..4].try_into().expect("4 bytes"));
                let k = i32::from_ne_bytes(b[4..8].try_into().expect("4 bytes"));
                (c == color).then_some((k, r))
            })
            .collect();
        members.sort();
        let my_parent_rank = self.comm_rank(comm)?;
        let ranks: Vec<u32> = members.iter().map(|&(_, r)| parent.world_rank(r)).collect();
        let rank = members
            .iter()
            .position(|&(_, r)| r == my_parent_rank)
            .expect("a member with my colour is me");
        self.insert_comm(comm, Group::new(ranks), rank, context)
            .map(Some)
    }

    /// MPI_Comm_create: None for processes outside `group`.
    pub fn comm_create(&self, comm: CommId, group: &Group) -> MpiResult<Option<CommId>> {
        let call = "MPI_Comm_create";
        let parent = self.comm_group(comm)?;
        for &w in group.world_ranks() {
            if parent.rank_of(w).is_none() {
                return Err(MpiError::new(
                    ErrorClass::Group,
                    format!("{call}: the group contains world rank {w}, which is not in the communicator"),
                ));
            }
        }
        let masks = self.allgather_bytes(call, comm, &self.mask_bytes())?;
        let context = self.agree_context(&masks)?;
        match group.rank_of(self.rank) {
            Some(rank) => self
                .insert_comm(comm, group.clone(), rank, context)
                .map(Some),
            None => {
                self.release_context(context);
                Ok(None)
            }
        }
    }

    fn release_context(&self, context: u32) {
        comm::mark(
            &mut self.context_mask.lock().expect("mask lock"),
            (context / 2) as usize,
            false,
        );
    }

    /// MPI_Comm_free (attribute delete callbacks run first).
    pub fn comm_free(&self, comm: CommId) -> MpiResult<()> {
        let call = "MPI_Comm_free";
        if comm == CommId::WORLD || comm == CommId::SELF {
            return Err(MpiError::new(
                ErrorClass::Comm,
                format!("{call}: MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed"),
            ));
        }
        let attrs = self.with_comm(call, comm, |c| c.attrs.clone())?;
        for (kv, val) in attrs {
            self.run_delete(comm, kv, val)?;
        }
        let mut e = self.lock();
        let c = e.core.comms[comm.0 as usize].take().expect("checked");
        drop(e);
        self.release_context(c.context);
        Ok(())
    }

    /// MPI_Comm_compare.
    pub fn comm_compare(&self, a: CommId, b: CommId) -> MpiResult<crate::group::Comparison> {
        use crate::group::Comparison;
        let call = "MPI_Comm_compare";
        let e = self.lock();
        let ca = self.check_comm(&e, call, a)?;
        let cb = self.check_comm(&e, call, b)?;
        if a == b {
            return Ok(Comparison::Ident);
        }
        Ok(match ca.group.compare(&cb.group) {
            Comparison::Ident => Comparison::Congruent,
            other => other,
        })
    }

    // ----- errors -----

    /// The error handler of a communicator.
    pub fn get_errhandler(&self, comm: CommId) -> MpiResult<ErrHandler> {
        self.with_comm("MPI_Comm_get_errhandler", comm, |c| c.errhandler.clone())
    }

    /// MPI_Comm_set_errhandler.
    pub fn set_errhandler(&self, comm: CommId, h: ErrHandler) -> MpiResult<()> {
        let mut e = self.lock();
        self.check_comm(&e, "MPI_Comm_set_errhandler", comm)?;
        e.core.comm_mut(comm).expect("checked").errhandler = h;
        Ok(())
    }

    /// Route an error through the communicator's handler (MPI_COMM_WORLD's when the call
    /// has none): fatal prints one line and aborts the job; otherwise the error code is
    /// returned after a user handler ran.
    pub fn handle_error(&self, comm: Option<CommId>, err: &MpiError) -> i32 {
        let c = comm.unwrap_or(CommId::WORLD);
        let h = {
            let e = self.lock();
            e.core
                .comm(c)
                .or_else(|| e.core.comm(CommId::WORLD))
                .map(|c| c.errhandler.clone())
                .unwrap_or(ErrHandler::Fatal)
        };
        let code = err.class as i32;
        match h {
            ErrHandler::Return => code,
            ErrHandler::User(_, f) => {
                f(c, code);
                code
            }
            ErrHandler::Fatal => {
                eprintln!("Tsunagi: fatal error on rank {}: {err}", self.rank);
                self.abort(code.max(1), &err.message)
            }
        }
    }

    /// MPI_Abort: end the whole job. Never returns.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        if let Ok(mut b) = self.boot.lock() {
            b.abort(code, msg);
        }
        std::process::exit(if code == 0 { 1 } else { code & 0xff });
    }

    // ----- attributes -----

    /// MPI_Comm_create_keyval.
    pub fn create_keyval(&self, kv: Keyval) -> i32 {
        let i = self.keyvals.lock().expect("keyvals").insert(kv);
        FIRST_USER_KEYVAL + i as i32
    }

    /// MPI_Comm_free_keyval.
    pub fn free_keyval(&self, keyval: i32) -> MpiResult<()> {
        let mut k = self.keyvals.lock().expect("keyvals");
        if keyval < FIRST_USER_KEYVAL || k.remove(kv_index(keyval)).is_none() {
            return Err(MpiError::new(
                ErrorClass::Keyval,
                format!("MPI_Comm_free_keyval: invalid keyval {keyval}"),
            ));
        }
        Ok(())
    }

    fn check_keyval(&self, call: &str, keyval: i32) -> MpiResult<()> {
        if keyval < FIRST_USER_KEYVAL
            || self
                .keyvals
                .lock()
                .expect("keyvals")
                .get(kv_index(keyval))
                .is_none()
        {
            return Err(MpiError::new(
                ErrorClass::Keyval,
                format!("{call}: invalid keyval {keyval}"),
            ));
        }
        Ok(())
    }

    fn run_delete(&self, comm: CommId, keyval: i32, val: usize) -> MpiResult<()> {
        let kv = self
            .keyvals
            .lock()
            .expect("keyvals")
            .get(kv_index(keyval))
            .cloned();
        if let Some(Keyval {
            delete: Some(f),
            extra,
            ..
        }) = kv
        {
            f(comm, keyval, val, extra)?;
        }
        Ok(())
    }

    /// MPI_Comm_set_attr (a previous value is deleted through the delete callback).
    pub fn set_attr(&self, comm: CommId, keyval: i32, val: usize) -> MpiResult<()> {
        let call = "MPI_Comm_set_attr";
        self.check_keyval(call, keyval)?;
        let old = self.with_comm(call, comm, |c| c.attrs.get(&keyval).copied())?;
        if let Some(v) = old {
            self.run_delete(comm, keyval, v)?;
        }
        let mut e = self.lock();
        self.check_comm(&e, call, comm)?;
        e.core
            .comm_mut(comm)
            .expect("checked")
            .attrs
            .insert(keyval, val);
        Ok(())
    }

    /// MPI_Comm_get_attr for user keyvals.
    pub fn get_attr(&self, comm: CommId, keyval: i32) -> MpiResult<Option<usize>> {
        let call = "MPI_Comm_get_attr";
        self.check_keyval(call, keyval)?;
        self.with_comm(call, comm, |c| c.attrs.get(&keyval).copied())
    }

    /// MPI_Comm_delete_attr.
    pub fn delete_attr(&self, comm: CommId, keyval: i32) -> MpiResult<()> {
        let call = "MPI_Comm_delete_attr";
        self.check_keyval(call, keyval)?;
        let old = self.with_comm(call, comm, |c| c.attrs.get(&keyval).copied())?;
        let Some(v) = old else {
            return Err(MpiError::new(
                ErrorClass::Keyval,
                format!("{call}: keyval {keyval} has no value on this communicator"),
            ));
        };
        self.run_delete(comm, keyval, v)?;
        let mut e = self.lock();
        if let Some(c) = e.core.comm_mut(comm) {
            c.attrs.remove(&keyval);
        }
        Ok(())
    }

    /// Value of a predefined attribute (MPI_TAG_UB and friends).
    pub fn predefined_attr(&self, which: PredefinedAttr) -> Option<i32> {
        match which {
            PredefinedAttr::TagUb => Some(TAG_UB),
            PredefinedAttr::Host => Some(PROC_NULL),
            PredefinedAttr::Io => Some(ANY_SOURCE),
            PredefinedAttr::WtimeIsGlobal => Some(0),
            PredefinedAttr::UniverseSize => Some(self.universe_size),
            PredefinedAttr::LastUsedCode => Some(ErrorClass::ValueTooLarge as i32),
            PredefinedAttr::AppNum => Some(self.appnum),
        }
    }

    // ----- the end -----

    fn shutdown(&self) -> MpiResult<()> {
        // MPI_Finalize is collective: nobody leaves while a peer may still read its memory
        // (single-copy rendezvous) or wait for its messages.
        self.barrier_internal(CommId::WORLD)?;
        self.block_until(|e| Ok(!e.core_has_outgoing()))?;
        self.stop_threads.store(true, Ordering::Release);
        for (_, s) in &self.sources {
            s.notify();
        }
        for h in self.threads.lock().expect("threads").drain(..) {
            let _ = h.join();
        }
        self.boot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .finalize()
            .map_err(|e| MpiError::new(ErrorClass::Other, format!("MPI_Finalize: {e}")))?;
        // Unmap the shared memory and close sockets.
        let mut e = self.lock();
        e.router = Router::new(0);
        Ok(())
    }
}

/// MPI_Finalize.
pub fn finalize() -> MpiResult<()> {
    let rt = rt("MPI_Finalize")?;
    rt.shutdown()?;
    STATE.store(FINALIZED, Ordering::Release);
    Ok(())
}

fn kv_index(keyval: i32) -> u32 {
    (keyval - FIRST_USER_KEYVAL).max(0) as u32
}

fn with_call(call: &str, mut e: MpiError) -> MpiError {
    if !e.message.starts_with("MPI_") {
        e.message = format!("{call}: {}", e.message);
    }
    e
}

impl Engine {
    pub(crate) fn core_has_outgoing(&self) -> bool {
        self.core.has_outgoing()
    }
}

/// The version of the MPI standard implemented (MPI_Get_version).
pub const VERSION: (i32, i32) = (3, 1);

/// MPI_Get_library_version's text.
pub fn library_version() -> String {
    format!(
        "Tsunagi {} (MPI {}.{})",
        env!("CARGO_PKG_VERSION"),
        VERSION.0,
        VERSION.1
    )
}

/// A transport's name for each peer (diagnostics).
pub fn transport_names(router: &mut Router) -> Vec<&'static str> {
    router.transports().iter().map(|t| t.name()).collect()
}
