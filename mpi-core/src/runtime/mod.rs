//! The runtime: start-up through PMI, the transports and router, the progress engines, and
//! every MPI call of the core as a method of [`Runtime`].
//!
//! All request-layer state sits in one `Engine` behind one mutex. API calls take the lock
//! for short, non-blocking steps; blocking calls loop over such steps and, between them,
//! spin, yield, and finally sleep on the transports' event sources (polling engine) or on a
//! completion doorbell rung by the progress threads (threaded engine). The lock is never
//! held while sleeping or while running user callbacks.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use tsunagi_p2p::boot::{Bootstrap, Registry};
use tsunagi_p2p::futex::LocalDoorbell;
use tsunagi_p2p::{EventSource, ProgressMode, Rank, Router};

use crate::boot::init_err;

mod attrs;
mod buffer;
mod checks;
mod comms;
mod dynamic;
mod engine_lock;
mod errors;
mod grequest;
mod inter;
mod isendrecv;
mod newcomm;
mod p2p;
mod partitioned;
mod persistent;
mod progress;
mod schedules;
mod tools;

use crate::comm::{self, CommData, CommId, ErrHandler, Keyval};
use crate::datatype::TypeRef;
use crate::engine::{
    Buf, Engine, MsgId, ReqId, SendMode, Slab, Status, ANY_SOURCE, ANY_TAG, PROC_NULL,
};
use crate::error::{ErrorClass, MpiError, MpiResult};
use crate::group::Group;
pub use grequest::GrequestHooks;
pub use newcomm::NewCommDone;
pub use persistent::ScheduleFactory;
pub use schedules::{Requests, Schedule, Service};
pub use tools::WaitPolicy;

/// Largest tag a user may use (MPI_TAG_UB) when no device lowers it.
pub const TAG_UB: i32 = i32::MAX;

/// This job's MPI_TAG_UB: [`TAG_UB`], or less when a device (IMPI) negotiated less.
static JOB_TAG_UB: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(TAG_UB);

/// This job's MPI_TAG_UB.
pub fn tag_ub() -> i32 {
    JOB_TAG_UB.load(Ordering::Relaxed)
}

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
    engine: engine_lock::EngineLock,
    rank: Rank,
    size: usize,
    mode: ProgressMode,
    /// Event sources of the transports that can wake us (all but the self path).
    sources: Vec<(usize, Arc<dyn EventSource>)>,
    /// All of `sources` behind one wait, when there are several and each has a descriptor
    /// (`tsunagi_p2p::registry`); `None`: one source, or waiters take turns.
    registry: Option<tsunagi_p2p::registry::EventRegistry>,
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
    /// Ranks of the job on this process's real host (pretend nodes of `TSUNAGI_NODE_MAP`
    /// together): whether waiting ranks outnumber the cores.
    on_host: usize,
    spin: u32,
    yields: u32,
    /// Polling engine: how long a waiter goes on yielding after `spin` and `yields` before
    /// it sleeps, when a transport cannot wake it ([`EventSource::nap`]: the vendor's naps
    /// of 100 µs); zero when every transport wakes its sleepers.
    nap_yield: Duration,
    /// Threaded engine under a real-time policy: the progress threads run one level below
    /// the application thread (`progress_below_app`).
    progress_below_app: bool,
    /// Threaded engine: polls and yields of an idle progress thread before it sleeps.
    thread_spin: u32,
    thread_yields: u32,
    /// Completions seen by the progress threads (mirrors the engine's counter so that
    /// waiting application threads can watch it without the lock).
    completed: std::sync::atomic::AtomicU64,
    /// Threaded engine: requests completed since the progress threads last ran the
    /// background services (RMA targets). Set by whichever thread polled; the progress
    /// threads run the services when it is set, so a completion that an application thread
    /// made on its way out of a wait is served while the program computes.
    services_due: AtomicBool,
    /// Threaded engine: application threads that wait by polling, and the progress
    /// threads' back-off while they do.
    handoff: progress::Handoff,
    /// Outstanding schedules (non-blocking collectives), see `schedules.rs`.
    schedules: Mutex<Vec<(ReqId, Box<dyn Schedule>)>>,
    /// How many schedules are outstanding (a lock-free check on every progress step).
    nschedules: std::sync::atomic::AtomicUsize,
    /// Errors of failed schedules, until a wait or test collects them.
    schedule_errors: Mutex<Vec<(ReqId, MpiError)>>,
    /// Live generalized requests, see `grequest.rs`.
    grequests: Mutex<Vec<grequest::GrequestEntry>>,
    /// Persistent collectives and their schedule factories, see `persistent.rs`.
    persistent_colls: Mutex<Vec<(ReqId, persistent::SharedFactory)>>,
    /// Partitioned requests' states, see `partitioned.rs`.
    partitioned: Mutex<Vec<(ReqId, Arc<Mutex<partitioned::Partitioned>>)>>,
    /// `TSUNAGI_STALL_REPORT=SECONDS`: a wait that lasts longer prints what it waits for.
    stall_report: Option<Duration>,
    /// Free context pairs and the allocations in flight.
    contexts: Mutex<comm::ContextAllocator>,
    keyvals: Mutex<Slab<Keyval>>,
    /// Node id of every world rank.
    nodes: Arc<Vec<u32>>,
    /// Site (IMPI client) of every world rank: all 0 unless the job spans sites.
    sites: Arc<Vec<u32>>,
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

/// The number of runnable tasks on the machine now (`/proc/loadavg`'s fourth field,
/// "running/total"), None where there is none. Not the 1-minute load average: after a job
/// that kept every core busy, the average still says the cores are full for a minute, and
/// the next job of a back-to-back series on a dedicated node would give its cores away.
fn runnable_now() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().nth(3)?.split('/').next()?.parse().ok()
}

/// Whether this host's `local` ranks cannot each count on a core of the `ncpu` they may
/// run on: they outnumber them, or other work (`runnable` tasks at start-up less this
/// job's own ranks, which may be among them) already fills them. A waiter that polls
/// without yielding then holds the core its peer needs to answer: with 2 ranks on 2
/// cores beside 20-30 other runnable tasks, every round trip of passive-target RMA (lock,
/// flush, unlock, each answered by the target's service) cost up to a scheduler time
/// slice: 360 rounds of lock, put, flush, get_accumulate, flush, get, flush, unlock took 6
/// to 9 s polling 20,000 times before yielding, 0.2 s polling 50 times, and mpi4py's
/// test_rma outran its 300 s.
fn oversubscribed(local: usize, ncpu: usize, runnable: Option<usize>) -> bool {
    local > ncpu || runnable.is_some_and(|r| r.saturating_sub(local) >= ncpu)
}

/// Samples of the runnable count [`oversubscribed_settled`] takes at most.
const RUNNABLE_SAMPLES: u32 = 5;

/// [`oversubscribed`], judged on up to [`RUNNABLE_SAMPLES`] samples of the runnable count
/// (`sample`), with `pause` between them: oversubscribed only if every sample says so.
/// One sample was a coin toss at start-up. The launcher's processes and the ranks still
/// in their vendor's `MPI_Init` run for a moment then (MPICH's ranks poll there, Hydra's
/// proxy answers them), and 2 ranks over MPICH on an idle 2-core machine counted 4
/// runnable tasks in one start of two: that start spun 2 passes and parked its waiters,
/// and the threaded engine's 8-byte latency over MPICH rose from ~0.6 to ~0.78 µs. Work
/// that fills the cores for real is there at every sample. The first sample that leaves
/// a core free ends the look, so an idle machine costs one sample.
fn oversubscribed_settled(
    local: usize,
    ncpu: usize,
    mut sample: impl FnMut() -> Option<usize>,
    mut pause: impl FnMut(),
) -> bool {
    if local > ncpu {
        return true;
    }
    for i in 0..RUNNABLE_SAMPLES {
        if i > 0 {
            pause();
        }
        if !oversubscribed(local, ncpu, sample()) {
            return false;
        }
    }
    true
}

/// How long a polling waiter yields on before it sleeps: `setting` (`TSUNAGI_NAP_YIELD`,
/// µs) when it parses, else the longest nap among the transports' event sources that no
/// arrival wakes ([`EventSource::nap`]), else zero (every sleep ends at an arrival).
fn nap_yield(setting: Option<&str>, naps: impl IntoIterator<Item = Option<Duration>>) -> Duration {
    setting
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_micros)
        .unwrap_or_else(|| naps.into_iter().flatten().max().unwrap_or(Duration::ZERO))
}

/// Whether the threaded engine's progress threads run one real-time priority level below
/// the application thread, where the process runs under a real-time policy (`chrt`):
/// `setting` is `TSUNAGI_PROGRESS_RT`, `below` or `same`; by default below unless the
/// ranks outnumber the cores.
///
/// At the same level a progress thread that wakes to poll takes turns with the
/// application (round-robin) on cores the application needs: CG.A/2 over Open MPI at
/// `chrt -r 20` ran at 1.075–1.093 of Open MPI alone threaded, against 1.015–1.017
/// polling and 1.025–1.034 with the progress threads one level below (docs/vendor-mpi.md,
/// session 13). One level
/// below they run on cores the application leaves idle, which is where asynchronous
/// progress is free. Every wait then polls for itself too (`Runtime::steps_poll`, and a
/// parked waiter after each sleep without news), since a thread spinning at the higher
/// level keeps them off its core. Not by default when oversubscribed: the ranks' waiters
/// then spin and yield on every core, and the progress threads would only run when all
/// of them sleep.
fn progress_below_app(oversubscribed: bool, setting: Option<&str>) -> Result<bool, String> {
    match setting.map(str::trim) {
        None | Some("") => Ok(!oversubscribed),
        Some("below") => Ok(true),
        Some("same") => Ok(false),
        Some(other) => Err(format!(
            "TSUNAGI_PROGRESS_RT={other}: expected below (progress threads one real-time priority level below the application) or same"
        )),
    }
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Runtime {
    pub(super) fn boot(required: ThreadLevel, registry: &Registry) -> MpiResult<Runtime> {
        let mode = ProgressMode::from_env().map_err(init_err)?;
        let boot = crate::boot::bootstrap(registry)?;
        let (mut boot, devices) = crate::boot::join_grid(registry, boot)?;
        let (rank, size) = (boot.rank(), boot.size());
        let (placement, on_host) = crate::boot::placement(boot.as_mut())?;
        let mut router = crate::boot::start_transports(registry, boot.as_mut(), &placement)?;
        let mut tag_ub = TAG_UB;
        for (device, peers) in devices {
            tag_ub = tag_ub.min(device.caps().tag_ub);
            router.add_device(device, &peers);
        }
        JOB_TAG_UB.store(tag_ub, Ordering::Relaxed);
        if router.has_devices() {
            let world: Vec<Rank> = (0..size as Rank).collect();
            for d in router.devices() {
                d.comm_created(0, &world);
                d.comm_created(2, &[rank]);
            }
        }
        let sites = Arc::new(placement.site);
        let nodes = placement.node;
        let my_node = nodes[rank as usize];
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
        // the cores of their host (the real host: pretend nodes share one) give their core
        // away quickly instead, and so do ranks on a machine whose cores other work already
        // keeps busy (see `oversubscribed`). Counting the pretend node's ranks here made
        // every rank of a `--node-map 2` job on 2 cores spin 20,000 passes and yield 20,000
        // times while the rank it waited for could not run (4 ms per barrier under
        // round-robin, 150 ms under CFS: issue 15).
        let oversubscribed = oversubscribed_settled(on_host, ncpu, runnable_now, || {
            std::thread::sleep(Duration::from_millis(2))
        });
        // A pass over a socket transport costs a system call (~1 µs, an epoll_wait), one
        // over shared memory a few loads: oversubscribed, spin a few passes only when a
        // socket is polled too (2 passes: 64 µs per 8-rank allreduce on 4 pretend nodes
        // under round-robin, against 122 µs with 50).
        let spin_default = match (oversubscribed, sources.len() > 1) {
            (false, _) => 20_000,
            (true, false) => 50,
            (true, true) => 2,
        };
        let spin = env_u32("TSUNAGI_SPIN", spin_default);
        let yields = env_u32("TSUNAGI_YIELDS", if oversubscribed { 20 } else { 20_000 });
        // Read (and a bad value refused) whatever the engine and the policy, as every
        // other setting is: a typo shows at once, not only under `chrt`.
        let below_if_realtime = progress_below_app(
            oversubscribed,
            std::env::var("TSUNAGI_PROGRESS_RT").ok().as_deref(),
        )
        .map_err(init_err)?;
        // A sleep on a transport that no arrival wakes (the vendor's nap) overruns the
        // arrival by up to the whole nap; 20 yields last ~10 µs when the core has nothing
        // else to run, so a wait a little longer than that (a 56 KB exchange over MPICH,
        // ~18 µs) slept 100 µs: back-to-back MPI_Allgatherv of 2 x 56 KB took 125 µs
        // instead of 18 (docs/vendor-mpi.md, session 10). Yielding as long as the nap
        // would cost bounds the loss to twice the best choice, and still gives the core to
        // anything else runnable (`TSUNAGI_NAP_YIELD`, µs, overrides it; 0: sleep at once).
        let nap_yield = nap_yield(
            std::env::var("TSUNAGI_NAP_YIELD").ok().as_deref(),
            sources.iter().map(|(_, s)| s.nap()),
        );

        let mut engine = Engine::new(rank, size, router);
        let nodes = Arc::new(nodes);
        let world_group = Arc::new(Group::new((0..size as u32).collect()));
        engine.comms_mut().insert(CommData {
            group: world_group,
            rank: rank as usize,
            context: 0,
            name: "MPI_COMM_WORLD".into(),
            errhandler: ErrHandler::Fatal,
            attrs: Default::default(),
            nodes: nodes.clone(),
            inter: None,
        });
        engine.comms_mut().insert(CommData {
            group: Arc::new(Group::new(vec![rank])),
            rank: 0,
            context: 2,
            name: "MPI_COMM_SELF".into(),
            errhandler: ErrHandler::Fatal,
            attrs: Default::default(),
            nodes: Arc::new(vec![my_node]),
            inter: None,
        });

        let universe_size = size as i32;
        Ok(Runtime {
            engine: engine_lock::EngineLock::new(engine),
            rank,
            size,
            mode,
            registry: event_registry(&sources),
            sources,
            sleep_turn: std::sync::atomic::AtomicUsize::new(0),
            completion_bell: LocalDoorbell::new(),
            stop_threads: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
            // A child of MPI_Comm_spawn_multiple is told its app's index (c-abi dynproc).
            // Slurm's PMI answers -1 to the children of a spawn: MPI_APPNUM is 0 for those of
            // MPI_Comm_spawn (MPI 4.1 §11.10.3).
            appnum: std::env::var("TSUNAGI_APPNUM")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| match boot.appnum() {
                    n if n < 0 && std::env::var_os("PMI_SPAWNED").is_some() => 0,
                    n => n,
                }),
            boot: Mutex::new(boot),
            thread_level: required.clamp(ThreadLevel::Single, ThreadLevel::Multiple),
            main_thread: std::thread::current().id(),
            processor_name: crate::boot::hostname(),
            epoch: Instant::now(),
            on_host,
            spin,
            yields,
            nap_yield,
            progress_below_app: mode == ProgressMode::Threaded
                && progress::realtime_priority().is_some_and(|(_, level)| level > 1)
                && below_if_realtime,
            thread_spin: env_u32("TSUNAGI_THREAD_SPIN", if oversubscribed { 20 } else { 200 }),
            thread_yields: env_u32(
                "TSUNAGI_THREAD_YIELDS",
                if oversubscribed { 50 } else { 20_000 },
            ),
            completed: std::sync::atomic::AtomicU64::new(0),
            services_due: AtomicBool::new(false),
            handoff: Default::default(),
            stall_report: std::env::var("TSUNAGI_STALL_REPORT")
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| *s > 0.0)
                .map(Duration::from_secs_f64),
            contexts: Mutex::new(comm::ContextAllocator::new()),
            schedules: Mutex::new(Vec::new()),
            nschedules: std::sync::atomic::AtomicUsize::new(0),
            schedule_errors: Mutex::new(Vec::new()),
            grequests: Mutex::new(Vec::new()),
            persistent_colls: Mutex::new(Vec::new()),
            partitioned: Mutex::new(Vec::new()),
            keyvals: Mutex::new(Slab::default()),
            nodes,
            sites,
            universe_size,
        })
    }

    #[inline]
    pub(super) fn lock(&self) -> engine_lock::EngineGuard<'_> {
        self.engine.lock()
    }

    /// Let the engine be taken without a mutex (`engine_lock.rs`): when this runtime runs
    /// the polling engine below MPI_THREAD_MULTIPLE, and `TSUNAGI_ENGINE_LOCK` is not `1`.
    /// Returns whether it now does.
    ///
    /// # Safety
    /// Every call into this runtime from now on comes from threads of the program that
    /// the program serialises as MPI_THREAD_SERIALIZED requires (no two at once, each call
    /// ordered before the next of another thread by the program's own synchronisation),
    /// until [`Runtime::share_engine`]; the caller is not inside a call of this runtime.
    /// Anything of Tsunagi's that uses the runtime from a thread of its own calls
    /// `share_engine` before that thread starts.
    pub unsafe fn assume_serial_calls(&self) -> bool {
        if self.mode != ProgressMode::Polling
            || self.thread_level == ThreadLevel::Multiple
            || std::env::var("TSUNAGI_ENGINE_LOCK").is_ok_and(|v| v == "1")
        {
            return false;
        }
        // SAFETY: the caller's promise is the one `assume_serial` needs.
        unsafe { self.engine.assume_serial() };
        true
    }

    /// Take the engine's mutex on every call from now on: before a thread of Tsunagi's own
    /// starts to use the runtime (a file's I/O thread, tools reading the queues). Call it
    /// from a thread that may call MPI now, outside any call of this runtime.
    pub fn share_engine(&self) {
        self.engine.share();
    }

    /// Whether the engine is taken without a mutex ([`Runtime::assume_serial_calls`]).
    pub fn engine_is_serial(&self) -> bool {
        self.engine.is_serial()
    }

    /// This process's world rank.
    pub fn world_rank(&self) -> usize {
        self.rank as usize
    }
    /// Size of MPI_COMM_WORLD.
    pub fn world_size(&self) -> usize {
        self.size
    }
    /// How many ranks of the job run on this process's host: the real host, so the
    /// pretend nodes of `TSUNAGI_NODE_MAP` on one machine count together (waiting code
    /// compares it with the cores to decide how long to spin).
    pub fn ranks_on_host(&self) -> usize {
        self.on_host
    }
    /// The progress engine in use.
    pub fn progress_mode(&self) -> ProgressMode {
        self.mode
    }
    /// Node id of each world rank.
    pub fn node_map(&self) -> Arc<Vec<u32>> {
        self.nodes.clone()
    }
    /// Site (IMPI client) of each world rank, in client order; all 0 on a one-site job.
    pub fn site_map(&self) -> Arc<Vec<u32>> {
        self.sites.clone()
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

    // ----- the end -----

    pub(super) fn shutdown(&self) -> MpiResult<()> {
        // MPI_Finalize is collective: nobody leaves while a peer may still read its memory
        // (single-copy rendezvous) or wait for its messages. Across sites it is IMPI's
        // finalize barrier, in the IMPI algorithm that other clients (LAM) run there.
        if self.sites.iter().all(|&s| s == self.sites[0]) {
            self.barrier_internal(CommId::WORLD)?;
        } else {
            self.impi_finalize_barrier()?;
        }
        self.block_until(|e| Ok(!e.core_has_outgoing()))?;
        self.stop_threads.store(true, Ordering::Release);
        for (_, s) in &self.sources {
            s.notify();
        }
        self.handoff.stop();
        for h in self.threads.lock().expect("threads").drain(..) {
            let _ = h.join();
        }
        {
            // Devices say goodbye to the other sites (IMPI: FINI both ways) before the
            // site's own start-up is told this rank is done.
            let mut e = self.lock();
            for d in e.router.devices() {
                d.finish(Duration::from_secs(30)).map_err(|err| {
                    MpiError::new(
                        ErrorClass::Other,
                        format!("MPI_Finalize: {}: {err}", d.name()),
                    )
                })?;
            }
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
pub const VERSION: (i32, i32) = (4, 1);

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

/// One wait over several event sources (shared memory and TCP, say), unless
/// `TSUNAGI_EVENT_REGISTRY=0` asks for the turn-taking sleeps (for comparisons) or a
/// source cannot join. A single source is slept on directly: its own wait (a futex for
/// shared memory) is the cheapest.
fn event_registry(
    sources: &[(usize, Arc<dyn EventSource>)],
) -> Option<tsunagi_p2p::registry::EventRegistry> {
    if sources.len() < 2 || std::env::var("TSUNAGI_EVENT_REGISTRY").is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    tsunagi_p2p::registry::EventRegistry::new(sources.iter().map(|(_, s)| s.clone()).collect())
}

#[cfg(test)]
mod waiting_policy_tests {
    use super::{
        nap_yield, oversubscribed, oversubscribed_settled, progress_below_app, RUNNABLE_SAMPLES,
    };
    use std::time::Duration;

    #[test]
    fn a_transport_that_only_naps_makes_waiters_yield_as_long_as_its_nap() {
        let us = Duration::from_micros;
        // Shared memory (woken by a futex) alone: sleep once the yields ran out.
        assert_eq!(nap_yield(None, [None]), Duration::ZERO);
        assert_eq!(nap_yield(None, []), Duration::ZERO);
        // Beside the vendor (100 µs naps): yield that long; the longest nap counts.
        assert_eq!(nap_yield(None, [None, Some(us(100))]), us(100));
        assert_eq!(nap_yield(None, [Some(us(40)), Some(us(100))]), us(100));
        // TSUNAGI_NAP_YIELD wins, 0 included; a value that does not parse is ignored.
        assert_eq!(nap_yield(Some("0"), [Some(us(100))]), Duration::ZERO);
        assert_eq!(nap_yield(Some(" 250 "), [None]), us(250));
        assert_eq!(nap_yield(Some("lots"), [Some(us(100))]), us(100));
    }

    #[test]
    fn progress_threads_go_below_the_application_unless_oversubscribed() {
        assert_eq!(progress_below_app(false, None), Ok(true));
        assert_eq!(progress_below_app(true, None), Ok(false));
        assert_eq!(progress_below_app(true, Some("below")), Ok(true));
        assert_eq!(progress_below_app(false, Some(" same ")), Ok(false));
        assert_eq!(progress_below_app(false, Some("")), Ok(true));
        assert!(progress_below_app(false, Some("low"))
            .unwrap_err()
            .contains("TSUNAGI_PROGRESS_RT=low"));
    }

    #[test]
    fn a_busy_machine_counts_as_oversubscribed() {
        // Ranks outnumbering the cores, whatever else runs.
        assert!(oversubscribed(3, 2, None));
        assert!(oversubscribed(3, 2, Some(0)));
        // A core each on an idle machine, or where nothing is known: spin. This job's own
        // ranks may be among the runnable tasks (a previous job's are not: they are gone).
        assert!(!oversubscribed(2, 2, Some(1)));
        assert!(!oversubscribed(2, 2, Some(3)));
        assert!(!oversubscribed(2, 2, None));
        assert!(!oversubscribed(1, 4, Some(4)));
        // Other work already fills the cores (a shared machine): yield early.
        assert!(oversubscribed(2, 2, Some(4)));
        assert!(oversubscribed(1, 4, Some(30)));
    }

    #[test]
    fn a_moment_of_start_up_work_does_not_count_as_a_busy_machine() {
        let judge = |local, samples: &[Option<usize>]| {
            let mut taken = 0;
            let mut it = samples.iter().copied();
            let over = oversubscribed_settled(
                local,
                2,
                || {
                    taken += 1;
                    it.next().flatten()
                },
                || {},
            );
            (over, taken)
        };
        // Idle: one sample.
        assert_eq!(judge(2, &[Some(2)]), (false, 1));
        // The launcher busy for two samples, then quiet.
        assert_eq!(judge(2, &[Some(4), Some(5), Some(3)]), (false, 3));
        // Busy at every sample: a shared machine.
        let busy = [Some(4); RUNNABLE_SAMPLES as usize];
        assert_eq!(judge(2, &busy), (true, RUNNABLE_SAMPLES));
        // More ranks than cores: no sample needed.
        assert_eq!(judge(3, &[]), (true, 0));
        // Nothing known: not oversubscribed.
        assert_eq!(judge(2, &[None]), (false, 1));
    }
}
