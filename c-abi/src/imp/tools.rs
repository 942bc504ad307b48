//! The tools interface (MPI_T): control variables for Tsunagi's settings, performance
//! variables for its counters, categories and enumerations; no event sources or events.
//!
//! Control variables read the live value: the progress engine and waiting policy the
//! runtime runs with, the collective algorithm each family is forced to (writable: the
//! next collective of the family uses it, every rank must write the same value, hence
//! `MPI_T_SCOPE_ALL_EQ`), the eager limit of each transport, and every other `TSUNAGI_*`
//! setting as the environment gives it (read at MPI_Init; writing them gives
//! MPI_T_ERR_CVAR_SET_NEVER). Performance variables: messages and bytes per transport kind
//! (counters with start/stop/reset per handle), the lengths of the matching queues (levels)
//! and the matching-queue searches (counters), from `tsunagi_core::tools`.
//!
//! Handles are table indices plus one, stored in MPICH's opaque pointer types; all state is
//! behind one mutex (MPI_T_init_thread provides MPI_THREAD_MULTIPLE).

use std::ffi::{c_char, c_double, c_int, c_uint, c_ulong, c_ulonglong, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

use tsunagi_collectives::select::{self, Coll};
use tsunagi_core::tools as counters;
use tsunagi_core::{ErrorClass, MpiError, MpiResult};

use crate::ffi::{
    MPI_Count, MPI_Datatype, MPI_Info, MPI_T_cvar_handle, MPI_T_enum, MPI_T_event_instance,
    MPI_T_event_registration, MPI_T_pvar_handle, MPI_T_pvar_session, MPI_T_source_order,
};

// MPICH's values of the tools interface's constants (mpi.h).
const VERBOSITY_USER_BASIC: c_int = 221;
const VERBOSITY_TUNER_BASIC: c_int = 224;
const VERBOSITY_TUNER_DETAIL: c_int = 225;
const VERBOSITY_MPIDEV_DETAIL: c_int = 228;
const BIND_NO_OBJECT: c_int = 9700;
const SCOPE_CONSTANT: c_int = 60438;
const SCOPE_READONLY: c_int = 60439;
const SCOPE_ALL_EQ: c_int = 60444;
const CLASS_LEVEL: c_int = 241;
const CLASS_COUNTER: c_int = 246;
const THREAD_MULTIPLE: c_int = 3;
const MPI_CHAR: MPI_Datatype = 0x4c00_0101;
const MPI_INT: MPI_Datatype = 0x4c00_0405;
const MPI_UNSIGNED: MPI_Datatype = 0x4c00_0406;
const MPI_UNSIGNED_LONG: MPI_Datatype = 0x4c00_0808;
const MPI_UNSIGNED_LONG_LONG: MPI_Datatype = 0x4c00_0819;
const MPI_DOUBLE: MPI_Datatype = 0x4c00_080b;

/// `MPI_T_PVAR_ALL_HANDLES`'s value (the exported object is in `data.rs`): no handle of
/// ours equals it.
const ALL_HANDLES: usize = usize::MAX;

fn terr(class: ErrorClass, msg: String) -> MpiError {
    MpiError::new(class, msg)
}

// ----- variables -----

#[derive(Clone, Debug, PartialEq)]
enum Value {
    Int(i64),
    Double(f64),
    Str(String),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Int,
    Unsigned,
    UnsignedLong,
    Double,
    /// A string of at most this many bytes with the NUL.
    Char(usize),
}

impl Ty {
    fn datatype(self) -> MPI_Datatype {
        match self {
            Ty::Int => MPI_INT,
            Ty::Unsigned => MPI_UNSIGNED,
            Ty::UnsignedLong => MPI_UNSIGNED_LONG,
            Ty::Double => MPI_DOUBLE,
            Ty::Char(_) => MPI_CHAR,
        }
    }
    fn count(self) -> c_int {
        match self {
            Ty::Char(n) => n as c_int,
            _ => 1,
        }
    }
}

type Reader = Box<dyn Fn() -> Value + Send + Sync>;
type Writer = Box<dyn Fn(&Value) -> MpiResult<()> + Send + Sync>;

struct Cvar {
    name: String,
    desc: String,
    verbosity: c_int,
    ty: Ty,
    enumtype: Option<usize>,
    scope: c_int,
    category: usize,
    read: Reader,
    write: Option<Writer>,
}

struct TEnum {
    name: String,
    items: Vec<(String, c_int)>,
}

struct Pvar {
    name: String,
    desc: String,
    class: c_int,
    readonly: bool,
    continuous: bool,
    category: usize,
    read: fn() -> u64,
}

struct Category {
    name: &'static str,
    desc: &'static str,
}

const CATEGORIES: [Category; 5] = [
    Category {
        name: "tsunagi_progress",
        desc: "progress engine, waiting policy and the matching queues",
    },
    Category {
        name: "tsunagi_collectives",
        desc: "collective algorithm selection (TSUNAGI_COLL_<NAME>)",
    },
    Category {
        name: "tsunagi_transports",
        desc: "transports: eager limits and the traffic of each transport kind",
    },
    Category {
        name: "tsunagi_environment",
        desc: "the other TSUNAGI_* settings, as the environment gives them",
    },
    Category {
        name: "tsunagi_io",
        desc: "MPI-IO: the routes collective accesses took (two-phase, independent; mapped: two-phase through the file's pages)",
    },
];

struct Tables {
    cvars: Vec<Cvar>,
    enums: Vec<TEnum>,
    pvars: Vec<Pvar>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn running() -> Option<&'static tsunagi_core::Runtime> {
    tsunagi_core::initialized()
        .then(|| tsunagi_core::rt("MPI_T"))
        .and_then(|r| r.ok())
}

/// The settings shown as strings: read at start-up by the transports and the launcher's
/// agents, so what the environment says is what runs.
const ENV_SETTINGS: &[(&str, &str)] = &[
    (
        "TSUNAGI_NODE_MAP",
        "pretend placement: K ranks per node, or a node id per rank",
    ),
    ("TSUNAGI_INTRANODE", "transport within a node (default shm)"),
    ("TSUNAGI_INTERNODE", "transport between nodes (default tcp)"),
    (
        "TSUNAGI_SHM_CMA",
        "0 disables single-copy CMA for large shared-memory messages",
    ),
    (
        "TSUNAGI_SHM_MEMBARRIER",
        "0 keeps a fence per shared-memory send and collective-area store",
    ),
    (
        "TSUNAGI_ENGINE_LOCK",
        "1 keeps the engine mutex below MPI_THREAD_MULTIPLE too",
    ),
    (
        "TSUNAGI_PROGRESS_RT",
        "threaded engine under chrt: progress threads below the application or same level",
    ),
    (
        "TSUNAGI_NAP_YIELD",
        "us a polling waiter yields before napping on a transport",
    ),
    ("TSUNAGI_SHM_CELL", "bytes per shared-memory ring cell"),
    ("TSUNAGI_SHM_CELLS", "cells per shared-memory ring"),
    (
        "TSUNAGI_SHM_SPIN",
        "shared-memory polls before sleeping on the doorbell",
    ),
    (
        "TSUNAGI_TCP_IF",
        "interface or IPv4 address TCP listens on and publishes",
    ),
    ("TSUNAGI_TCP_PORTS", "TCP listening port range lo-hi"),
    (
        "TSUNAGI_TCP_SNDBUF",
        "TCP socket send buffer in bytes (default: kernel autotuning)",
    ),
    (
        "TSUNAGI_TCP_RCVBUF",
        "TCP socket receive buffer in bytes (default: kernel autotuning)",
    ),
    (
        "TSUNAGI_TCP_CONNECT_TIMEOUT",
        "seconds before an unreachable TCP peer counts as failed",
    ),
    (
        "TSUNAGI_RMA_DIRECT",
        "0: MPI_Win_allocate keeps private memory (message path)",
    ),
    (
        "TSUNAGI_RMA_DEBUG",
        "set: a window target prints why it refused a request",
    ),
    (
        "TSUNAGI_VENDOR",
        "vendor MPI that provides rank, size and cards (mpich, openmpi, path)",
    ),
    (
        "TSUNAGI_VENDOR_SHORT",
        "payload bytes sent with the header in one vendor message",
    ),
    (
        "TSUNAGI_VENDOR_EAGER",
        "Tsunagi's eager limit over the vendor MPI",
    ),
    (
        "TSUNAGI_IMPI_SERVER",
        "IMPI server to join other sites through",
    ),
    ("TSUNAGI_IMPI_CLIENT", "this site's IMPI client number"),
    (
        "TSUNAGI_IMPI_ADDR",
        "IPv4 address this process's IMPI host listens on",
    ),
    (
        "TSUNAGI_IMPI_DATAREP",
        "how data crosses IMPI sites: external32 or native",
    ),
];

const STR_LEN: usize = 256;

fn mode_value() -> Value {
    let threaded = match running() {
        Some(r) => r.threaded_progress(),
        None => std::env::var("TSUNAGI_PROGRESS").is_ok_and(|v| v.trim() == "threaded"),
    };
    Value::Int(i64::from(threaded))
}

fn build_tables() -> Tables {
    let mut cvars = Vec::new();
    let mut enums = vec![TEnum {
        name: "tsunagi_progress_engine".into(),
        items: vec![("polling".into(), 0), ("threaded".into(), 1)],
    }];
    cvars.push(Cvar {
        name: "TSUNAGI_PROGRESS".into(),
        desc: "progress engine: polling or threaded (chosen at MPI_Init)".into(),
        verbosity: VERBOSITY_USER_BASIC,
        ty: Ty::Int,
        enumtype: Some(0),
        scope: SCOPE_READONLY,
        category: 0,
        read: Box::new(mode_value),
        write: None,
    });
    type Pick = fn(tsunagi_core::runtime::WaitPolicy) -> u32;
    let waits: [(&str, &str, Pick, u32); 4] = [
        (
            "TSUNAGI_SPIN",
            "polls of a waiting call before it yields",
            |w| w.spin,
            20_000,
        ),
        (
            "TSUNAGI_YIELDS",
            "yields of a waiting call before it sleeps",
            |w| w.yields,
            20_000,
        ),
        (
            "TSUNAGI_THREAD_SPIN",
            "polls of an idle progress thread before it yields",
            |w| w.thread_spin,
            200,
        ),
        (
            "TSUNAGI_THREAD_YIELDS",
            "yields of an idle progress thread before it sleeps",
            |w| w.thread_yields,
            20_000,
        ),
    ];
    for (name, desc, pick, default) in waits {
        cvars.push(Cvar {
            name: name.into(),
            desc: format!(
                "{desc} (fixed at MPI_Init; before it, the environment's value or the default \
                 of a rank with a core of its own)"
            ),
            verbosity: VERBOSITY_TUNER_DETAIL,
            ty: Ty::Unsigned,
            enumtype: None,
            scope: SCOPE_READONLY,
            category: 0,
            read: Box::new(move || {
                Value::Int(i64::from(match running() {
                    Some(r) => pick(r.wait_policy()),
                    None => env_or(name, default),
                }))
            }),
            write: None,
        });
    }
    cvars.push(Cvar {
        name: "TSUNAGI_STALL_REPORT".into(),
        desc: "seconds after which a stalled wait prints what it waits for (0: never)".into(),
        verbosity: VERBOSITY_MPIDEV_DETAIL,
        ty: Ty::Double,
        enumtype: None,
        scope: SCOPE_READONLY,
        category: 0,
        read: Box::new(|| {
            Value::Double(match running() {
                Some(r) => r.stall_report_after().map_or(0.0, |d| d.as_secs_f64()),
                None => env_or("TSUNAGI_STALL_REPORT", 0.0f64).max(0.0),
            })
        }),
        write: None,
    });
    for c in Coll::ALL {
        let e = enums.len();
        let mut items = vec![("auto".to_string(), 0)];
        items.extend(
            c.algorithms()
                .iter()
                .enumerate()
                .map(|(i, a)| (a.to_string(), i as c_int + 1)),
        );
        let var = c.env_var();
        enums.push(TEnum {
            name: var.to_lowercase(),
            items,
        });
        cvars.push(Cvar {
            name: var.into(),
            desc: format!(
                "algorithm of {} collectives: auto or one of {} (every rank must set the same \
                 before the family's next collective)",
                var.trim_start_matches("TSUNAGI_COLL_").to_lowercase(),
                c.algorithms().join(", ")
            ),
            verbosity: VERBOSITY_TUNER_BASIC,
            ty: Ty::Int,
            enumtype: Some(e),
            scope: SCOPE_ALL_EQ,
            category: 1,
            read: Box::new(move || Value::Int(select::forced(c).map_or(0, |i| i as i64 + 1))),
            write: Some(Box::new(move |v| {
                let Value::Int(i) = *v else {
                    unreachable!("an int variable")
                };
                let name = match i {
                    0 => "auto",
                    i if i > 0 && (i as usize) <= c.algorithms().len() => {
                        c.algorithms()[i as usize - 1]
                    }
                    _ => {
                        return Err(terr(
                            ErrorClass::Arg,
                            format!("MPI_T_cvar_write: {var}: no algorithm has value {i}"),
                        ))
                    }
                };
                select::set_algorithm(c, Some(name))
                    .map_err(|e| terr(ErrorClass::Arg, format!("MPI_T_cvar_write: {e}")))
            })),
        });
    }
    for (transport, var) in [("shm", Some("TSUNAGI_SHM_EAGER")), ("tcp", None)] {
        let name = var.map_or(format!("tsunagi_{transport}_eager_limit"), String::from);
        cvars.push(Cvar {
            desc: format!(
                "eager limit of the {transport} transport in bytes (larger messages use \
                 rendezvous; 0 when this process has no {transport} transport)"
            ),
            name,
            verbosity: VERBOSITY_TUNER_BASIC,
            ty: Ty::UnsignedLong,
            enumtype: None,
            scope: if var.is_some() {
                SCOPE_READONLY
            } else {
                SCOPE_CONSTANT
            },
            category: 2,
            read: Box::new(move || {
                let live = running().and_then(|r| {
                    r.eager_limits()
                        .into_iter()
                        .find(|(n, _)| *n == transport)
                        .map(|(_, e)| e)
                });
                Value::Int(live.unwrap_or(0) as i64)
            }),
            write: None,
        });
    }
    for (var, desc) in ENV_SETTINGS {
        cvars.push(Cvar {
            name: (*var).into(),
            desc: format!("{desc} (the environment's value, read at start-up; empty: default)"),
            verbosity: VERBOSITY_MPIDEV_DETAIL,
            ty: Ty::Char(STR_LEN),
            enumtype: None,
            scope: SCOPE_READONLY,
            category: 3,
            read: Box::new(move || Value::Str(std::env::var(var).unwrap_or_default())),
            write: None,
        });
    }

    let mut pvars = vec![
        Pvar {
            name: "posted_recvq_length".into(),
            desc: "receives posted and not yet matched, over all communicators".into(),
            class: CLASS_LEVEL,
            readonly: true,
            continuous: true,
            category: 0,
            read: || running().map_or(0, |r| r.queue_lengths().0 as u64),
        },
        Pvar {
            name: "unexpected_recvq_length".into(),
            desc: "messages arrived and not yet received, over all communicators".into(),
            class: CLASS_LEVEL,
            readonly: true,
            continuous: true,
            category: 0,
            read: || running().map_or(0, |r| r.queue_lengths().1 as u64),
        },
        Pvar {
            name: "posted_recvq_match_attempts".into(),
            desc: "searches of the posted-receive queue (one per arriving message)".into(),
            class: CLASS_COUNTER,
            readonly: false,
            continuous: false,
            category: 0,
            read: || counters::POSTED_MATCH_ATTEMPTS.load(Ordering::Relaxed),
        },
        Pvar {
            name: "unexpected_recvq_match_attempts".into(),
            desc: "searches of the unexpected-message queue (one per receive or probe)".into(),
            class: CLASS_COUNTER,
            readonly: false,
            continuous: false,
            category: 0,
            read: || counters::UNEXPECTED_MATCH_ATTEMPTS.load(Ordering::Relaxed),
        },
    ];
    macro_rules! traffic {
        ($kind:literal) => {
            [
                (
                    "msgs_sent",
                    "messages sent",
                    (|| counters::counters($kind).msgs_sent.load(Ordering::Relaxed)) as fn() -> u64,
                ),
                ("bytes_sent", "bytes sent (headers included)", || {
                    counters::counters($kind).bytes_sent.load(Ordering::Relaxed)
                }),
                ("msgs_recvd", "messages received", || {
                    counters::counters($kind).msgs_recvd.load(Ordering::Relaxed)
                }),
                (
                    "bytes_recvd",
                    "bytes received (headers and single-copy reads included)",
                    || {
                        counters::counters($kind)
                            .bytes_recvd
                            .load(Ordering::Relaxed)
                    },
                ),
            ]
        };
    }
    let kinds = [
        ("self", traffic!("self")),
        ("shm", traffic!("shm")),
        ("tcp", traffic!("tcp")),
        ("other", traffic!("other")),
    ];
    for (kind, vars) in kinds {
        for (what, desc, read) in vars {
            pvars.push(Pvar {
                name: format!("tsunagi_{kind}_{what}"),
                desc: format!("{desc} by the {kind} transport, protocol messages included"),
                class: CLASS_COUNTER,
                readonly: false,
                continuous: false,
                category: 2,
                read,
            });
        }
    }
    // MPI-IO's route counters, in tsunagi_io::stats::snapshot's order.
    let io_reads: [fn() -> u64; 6] = [
        || tsunagi_io::stats::snapshot()[0].2,
        || tsunagi_io::stats::snapshot()[1].2,
        || tsunagi_io::stats::snapshot()[2].2,
        || tsunagi_io::stats::snapshot()[3].2,
        || tsunagi_io::stats::snapshot()[4].2,
        || tsunagi_io::stats::snapshot()[5].2,
    ];
    for ((name, desc, _), read) in tsunagi_io::stats::snapshot().into_iter().zip(io_reads) {
        pvars.push(Pvar {
            name: name.into(),
            desc: desc.into(),
            class: CLASS_COUNTER,
            readonly: false,
            continuous: false,
            category: 4,
            read,
        });
    }
    Tables {
        cvars,
        enums,
        pvars,
    }
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(build_tables)
}

// ----- state: initialisation count, handles, sessions -----

struct PvarHandle {
    session: usize,
    pvar: usize,
    started: bool,
    /// Value accumulated while started, before the last start (or the written value).
    accum: u64,
    /// The variable's value at the last start or reset.
    mark: u64,
}

struct State {
    refs: usize,
    cvar_handles: Vec<Option<usize>>,
    sessions: Vec<bool>,
    pvar_handles: Vec<Option<PvarHandle>>,
}

static STATE: Mutex<State> = Mutex::new(State {
    refs: 0,
    cvar_handles: Vec::new(),
    sessions: Vec::new(),
    pvar_handles: Vec::new(),
});

fn lock() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `f` on the state if the interface is initialised.
fn with<T>(call: &str, f: impl FnOnce(&mut State) -> MpiResult<T>) -> MpiResult<T> {
    let mut s = lock();
    if s.refs == 0 {
        return Err(terr(
            ErrorClass::TNotInitialized,
            format!("{call}: call MPI_T_init_thread first"),
        ));
    }
    f(&mut s)
}

fn to_handle(i: usize) -> *mut c_void {
    (i + 1) as *mut c_void
}

fn from_handle(h: *mut c_void) -> Option<usize> {
    (h as usize).checked_sub(1)
}

fn index<T>(call: &str, what: &str, v: &[T], i: c_int) -> MpiResult<usize> {
    if i < 0 || i as usize >= v.len() {
        return Err(terr(
            ErrorClass::TInvalidIndex,
            format!("{call}: {what} index {i} is not in 0..{}", v.len()),
        ));
    }
    Ok(i as usize)
}

/// MPI_T's string convention: `len` holds the buffer size; nothing is returned for a NULL
/// buffer or length; a size of 0 returns the size needed (with the NUL); otherwise the
/// string is cut to fit and `len` becomes the length written with the NUL.
fn put_str(s: &str, buf: *mut c_char, len: Option<&mut c_int>) {
    let Some(len) = len else { return };
    if buf.is_null() || *len <= 0 {
        *len = s.len() as c_int + 1;
        return;
    }
    let n = s.len().min(*len as usize - 1);
    // SAFETY: the caller gives a buffer of `*len` bytes (MPI_T's contract) and n < *len.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, n);
        *buf.add(n) = 0;
    }
    *len = n as c_int + 1;
}

fn set<T>(p: Option<&mut T>, v: T) {
    if let Some(p) = p {
        *p = v;
    }
}

fn find_name<T>(call: &str, items: &[T], name: &str, of: impl Fn(&T) -> &str) -> MpiResult<c_int> {
    items
        .iter()
        .position(|x| of(x) == name)
        .map(|i| i as c_int)
        .ok_or_else(|| {
            terr(
                ErrorClass::TInvalidName,
                format!("{call}: no variable named {name}"),
            )
        })
}

// ----- init / finalize -----

pub(crate) fn t_init_thread(required: c_int, provided: &mut c_int) -> MpiResult<()> {
    if !(0..=THREAD_MULTIPLE).contains(&required) {
        return Err(terr(
            ErrorClass::Arg,
            format!("MPI_T_init_thread: required = {required} is no thread level"),
        ));
    }
    let _ = tables();
    lock().refs += 1;
    // MPI_THREAD_MULTIPLE lets a tool's thread read the queue lengths (under the engine
    // lock) while the program calls MPI: the engine keeps its mutex from now on, and a
    // runtime started later never drops it (`env::start_runtime`).
    TOOLS_USED.store(true, Ordering::Release);
    if let Some(r) = running() {
        r.share_engine();
    }
    *provided = THREAD_MULTIPLE;
    Ok(())
}

/// MPI_T_init_thread was called: the engine must keep its mutex.
pub(crate) static TOOLS_USED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

pub(crate) fn t_finalize() -> MpiResult<()> {
    with("MPI_T_finalize", |s| {
        s.refs -= 1;
        if s.refs == 0 {
            s.cvar_handles.clear();
            s.sessions.clear();
            s.pvar_handles.clear();
        }
        Ok(())
    })
}

// ----- enumerations -----

fn enum_of(call: &str, e: MPI_T_enum) -> MpiResult<&'static TEnum> {
    from_handle(e)
        .and_then(|i| tables().enums.get(i))
        .ok_or_else(|| {
            terr(
                ErrorClass::TInvalidHandle,
                format!("{call}: enumtype is not an enumeration"),
            )
        })
}

pub(crate) fn t_enum_get_info(
    enumtype: MPI_T_enum,
    num: Option<&mut c_int>,
    name: *mut c_char,
    name_len: Option<&mut c_int>,
) -> MpiResult<()> {
    with("MPI_T_enum_get_info", |_| {
        let e = enum_of("MPI_T_enum_get_info", enumtype)?;
        set(num, e.items.len() as c_int);
        put_str(&e.name, name, name_len);
        Ok(())
    })
}

pub(crate) fn t_enum_get_item(
    enumtype: MPI_T_enum,
    indx: c_int,
    value: Option<&mut c_int>,
    name: *mut c_char,
    name_len: Option<&mut c_int>,
) -> MpiResult<()> {
    with("MPI_T_enum_get_item", |_| {
        let e = enum_of("MPI_T_enum_get_item", enumtype)?;
        let i = index("MPI_T_enum_get_item", "item", &e.items, indx)?;
        set(value, e.items[i].1);
        put_str(&e.items[i].0, name, name_len);
        Ok(())
    })
}

// ----- control variables -----

pub(crate) fn t_cvar_get_num(num_cvar: &mut c_int) -> MpiResult<()> {
    with("MPI_T_cvar_get_num", |_| {
        *num_cvar = tables().cvars.len() as c_int;
        Ok(())
    })
}

pub(crate) fn t_cvar_get_info(
    cvar_index: c_int,
    name: *mut c_char,
    name_len: Option<&mut c_int>,
    verbosity: Option<&mut c_int>,
    datatype: Option<&mut MPI_Datatype>,
    enumtype: *mut MPI_T_enum,
    desc: *mut c_char,
    desc_len: Option<&mut c_int>,
    bind: Option<&mut c_int>,
    scope: Option<&mut c_int>,
) -> MpiResult<()> {
    with("MPI_T_cvar_get_info", |_| {
        let t = tables();
        let v = &t.cvars[index("MPI_T_cvar_get_info", "cvar", &t.cvars, cvar_index)?];
        put_str(&v.name, name, name_len);
        set(verbosity, v.verbosity);
        set(datatype, v.ty.datatype());
        // SAFETY: NULL or a valid pointer to one MPI_T_enum (the caller's contract).
        set(
            unsafe { enumtype.as_mut() },
            v.enumtype.map_or(std::ptr::null_mut(), to_handle),
        );
        put_str(&v.desc, desc, desc_len);
        set(bind, BIND_NO_OBJECT);
        set(scope, v.scope);
        Ok(())
    })
}

pub(crate) fn t_cvar_get_index(name: &str, cvar_index: &mut c_int) -> MpiResult<()> {
    with("MPI_T_cvar_get_index", |_| {
        *cvar_index = find_name("MPI_T_cvar_get_index", &tables().cvars, name, |v| &v.name)?;
        Ok(())
    })
}

pub(crate) fn t_cvar_handle_alloc(
    cvar_index: c_int,
    _obj_handle: *mut c_void,
    handle: &mut MPI_T_cvar_handle,
    count: &mut c_int,
) -> MpiResult<()> {
    with("MPI_T_cvar_handle_alloc", |s| {
        let t = tables();
        let i = index("MPI_T_cvar_handle_alloc", "cvar", &t.cvars, cvar_index)?;
        let slot = match s.cvar_handles.iter().position(Option::is_none) {
            Some(k) => k,
            None => {
                s.cvar_handles.push(None);
                s.cvar_handles.len() - 1
            }
        };
        s.cvar_handles[slot] = Some(i);
        *handle = to_handle(slot);
        *count = t.cvars[i].ty.count();
        Ok(())
    })
}

fn cvar_of(call: &str, s: &State, h: MPI_T_cvar_handle) -> MpiResult<usize> {
    from_handle(h)
        .and_then(|k| s.cvar_handles.get(k).copied().flatten())
        .ok_or_else(|| {
            terr(
                ErrorClass::TInvalidHandle,
                format!("{call}: handle is not a control variable handle"),
            )
        })
}

pub(crate) fn t_cvar_handle_free(handle: &mut MPI_T_cvar_handle) -> MpiResult<()> {
    with("MPI_T_cvar_handle_free", |s| {
        cvar_of("MPI_T_cvar_handle_free", s, *handle)?;
        s.cvar_handles[from_handle(*handle).expect("checked")] = None;
        *handle = std::ptr::null_mut();
        Ok(())
    })
}

pub(crate) fn t_cvar_read(handle: MPI_T_cvar_handle, buf: *mut c_void) -> MpiResult<()> {
    let i = with("MPI_T_cvar_read", |s| cvar_of("MPI_T_cvar_read", s, handle))?;
    if buf.is_null() {
        return Err(terr(
            ErrorClass::Arg,
            "MPI_T_cvar_read: argument buf is NULL".into(),
        ));
    }
    let v = &tables().cvars[i];
    // SAFETY: `buf` holds `count` elements of the variable's datatype (MPI_T's contract:
    // the caller sized it from MPI_T_cvar_handle_alloc's count and get_info's datatype).
    unsafe {
        match ((v.read)(), v.ty) {
            (Value::Int(x), Ty::Int) => *buf.cast::<c_int>() = x as c_int,
            (Value::Int(x), Ty::Unsigned) => *buf.cast::<c_uint>() = x as c_uint,
            (Value::Int(x), Ty::UnsignedLong) => *buf.cast::<c_ulong>() = x as c_ulong,
            (Value::Double(x), Ty::Double) => *buf.cast::<c_double>() = x,
            (Value::Str(x), Ty::Char(n)) => {
                let mut len = n as c_int;
                put_str(&x, buf.cast::<c_char>(), Some(&mut len));
            }
            (val, ty) => unreachable!("{} reads {val:?} as {ty:?}", v.name),
        }
    }
    Ok(())
}

pub(crate) fn t_cvar_write(handle: MPI_T_cvar_handle, buf: *const c_void) -> MpiResult<()> {
    let i = with("MPI_T_cvar_write", |s| {
        cvar_of("MPI_T_cvar_write", s, handle)
    })?;
    let v = &tables().cvars[i];
    let Some(write) = &v.write else {
        return Err(terr(
            ErrorClass::TCvarSetNever,
            format!(
                "MPI_T_cvar_write: {} is fixed for the life of the process",
                v.name
            ),
        ));
    };
    if buf.is_null() {
        return Err(terr(
            ErrorClass::Arg,
            "MPI_T_cvar_write: argument buf is NULL".into(),
        ));
    }
    // SAFETY: writable variables are MPI_INT; `buf` points to one (MPI_T's contract).
    let value = Value::Int(i64::from(unsafe { *buf.cast::<c_int>() }));
    write(&value)
}

// ----- performance variables -----

pub(crate) fn t_pvar_get_num(num_pvar: &mut c_int) -> MpiResult<()> {
    with("MPI_T_pvar_get_num", |_| {
        *num_pvar = tables().pvars.len() as c_int;
        Ok(())
    })
}

pub(crate) fn t_pvar_get_info(
    pvar_index: c_int,
    name: *mut c_char,
    name_len: Option<&mut c_int>,
    verbosity: Option<&mut c_int>,
    var_class: Option<&mut c_int>,
    datatype: Option<&mut MPI_Datatype>,
    enumtype: *mut MPI_T_enum,
    desc: *mut c_char,
    desc_len: Option<&mut c_int>,
    bind: Option<&mut c_int>,
    readonly: Option<&mut c_int>,
    continuous: Option<&mut c_int>,
    atomic: Option<&mut c_int>,
) -> MpiResult<()> {
    with("MPI_T_pvar_get_info", |_| {
        let t = tables();
        let v = &t.pvars[index("MPI_T_pvar_get_info", "pvar", &t.pvars, pvar_index)?];
        put_str(&v.name, name, name_len);
        set(verbosity, VERBOSITY_USER_BASIC);
        set(var_class, v.class);
        set(datatype, MPI_UNSIGNED_LONG_LONG);
        // SAFETY: NULL or a valid pointer to one MPI_T_enum (the caller's contract).
        set(unsafe { enumtype.as_mut() }, std::ptr::null_mut());
        put_str(&v.desc, desc, desc_len);
        set(bind, BIND_NO_OBJECT);
        set(readonly, c_int::from(v.readonly));
        set(continuous, c_int::from(v.continuous));
        set(atomic, 0);
        Ok(())
    })
}

pub(crate) fn t_pvar_get_index(
    name: &str,
    var_class: c_int,
    pvar_index: &mut c_int,
) -> MpiResult<()> {
    with("MPI_T_pvar_get_index", |_| {
        let t = tables();
        *pvar_index = t
            .pvars
            .iter()
            .position(|v| v.name == name && v.class == var_class)
            .map(|i| i as c_int)
            .ok_or_else(|| {
                terr(
                    ErrorClass::TInvalidName,
                    format!("MPI_T_pvar_get_index: no variable named {name} of class {var_class}"),
                )
            })?;
        Ok(())
    })
}

pub(crate) fn t_pvar_session_create(session: &mut MPI_T_pvar_session) -> MpiResult<()> {
    with("MPI_T_pvar_session_create", |s| {
        let k = match s.sessions.iter().position(|live| !live) {
            Some(k) => k,
            None => {
                s.sessions.push(false);
                s.sessions.len() - 1
            }
        };
        s.sessions[k] = true;
        *session = to_handle(k);
        Ok(())
    })
}

fn session_of(call: &str, s: &State, h: MPI_T_pvar_session) -> MpiResult<usize> {
    from_handle(h)
        .filter(|&k| s.sessions.get(k).copied().unwrap_or(false))
        .ok_or_else(|| {
            terr(
                ErrorClass::TInvalidSession,
                format!("{call}: session is not a live session"),
            )
        })
}

pub(crate) fn t_pvar_session_free(session: &mut MPI_T_pvar_session) -> MpiResult<()> {
    with("MPI_T_pvar_session_free", |s| {
        let k = session_of("MPI_T_pvar_session_free", s, *session)?;
        s.sessions[k] = false;
        for h in s.pvar_handles.iter_mut() {
            if h.as_ref().is_some_and(|h| h.session == k) {
                *h = None;
            }
        }
        *session = std::ptr::null_mut();
        Ok(())
    })
}

pub(crate) fn t_pvar_handle_alloc(
    session: MPI_T_pvar_session,
    pvar_index: c_int,
    _obj_handle: *mut c_void,
    handle: &mut MPI_T_pvar_handle,
    count: &mut c_int,
) -> MpiResult<()> {
    with("MPI_T_pvar_handle_alloc", |s| {
        let k = session_of("MPI_T_pvar_handle_alloc", s, session)?;
        let t = tables();
        let i = index("MPI_T_pvar_handle_alloc", "pvar", &t.pvars, pvar_index)?;
        let v = &t.pvars[i];
        let h = PvarHandle {
            session: k,
            pvar: i,
            // Continuous variables are always running.
            started: v.continuous,
            accum: 0,
            mark: (v.read)(),
        };
        let slot = match s.pvar_handles.iter().position(Option::is_none) {
            Some(k) => k,
            None => {
                s.pvar_handles.push(None);
                s.pvar_handles.len() - 1
            }
        };
        s.pvar_handles[slot] = Some(h);
        *handle = to_handle(slot);
        *count = 1;
        Ok(())
    })
}

/// The handles a call on (`session`, `handle`) acts on: one, or with
/// MPI_T_PVAR_ALL_HANDLES every handle of the session.
fn handles_of(
    call: &str,
    s: &State,
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
    all_ok: bool,
) -> MpiResult<Vec<usize>> {
    let k = session_of(call, s, session)?;
    if handle as usize == ALL_HANDLES {
        if !all_ok {
            return Err(terr(
                ErrorClass::TInvalidHandle,
                format!("{call}: MPI_T_PVAR_ALL_HANDLES is not allowed here"),
            ));
        }
        return Ok((0..s.pvar_handles.len())
            .filter(|&j| s.pvar_handles[j].as_ref().is_some_and(|h| h.session == k))
            .collect());
    }
    let j = from_handle(handle)
        .filter(|&j| s.pvar_handles.get(j).and_then(Option::as_ref).is_some())
        .ok_or_else(|| {
            terr(
                ErrorClass::TInvalidHandle,
                format!("{call}: handle is not a performance variable handle"),
            )
        })?;
    if s.pvar_handles[j].as_ref().expect("checked").session != k {
        return Err(terr(
            ErrorClass::TInvalidHandle,
            format!("{call}: handle belongs to another session"),
        ));
    }
    Ok(vec![j])
}

pub(crate) fn t_pvar_handle_free(
    session: MPI_T_pvar_session,
    handle: &mut MPI_T_pvar_handle,
) -> MpiResult<()> {
    with("MPI_T_pvar_handle_free", |s| {
        let j = handles_of("MPI_T_pvar_handle_free", s, session, *handle, false)?[0];
        s.pvar_handles[j] = None;
        *handle = std::ptr::null_mut();
        Ok(())
    })
}

fn start_stop(
    call: &str,
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
    start: bool,
) -> MpiResult<()> {
    with(call, |s| {
        let one = handle as usize != ALL_HANDLES;
        let t = tables();
        for j in handles_of(call, s, session, handle, true)? {
            let h = s.pvar_handles[j].as_mut().expect("live");
            let v = &t.pvars[h.pvar];
            if v.continuous {
                if one {
                    return Err(terr(
                        ErrorClass::TPvarNoStartstop,
                        format!("{call}: {} is continuous", v.name),
                    ));
                }
                continue;
            }
            let now = (v.read)();
            if start && !h.started {
                h.mark = now;
                h.started = true;
            } else if !start && h.started {
                h.accum = h.accum.wrapping_add(now.wrapping_sub(h.mark));
                h.started = false;
            }
        }
        Ok(())
    })
}

pub(crate) fn t_pvar_start(
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
) -> MpiResult<()> {
    start_stop("MPI_T_pvar_start", session, handle, true)
}

pub(crate) fn t_pvar_stop(session: MPI_T_pvar_session, handle: MPI_T_pvar_handle) -> MpiResult<()> {
    start_stop("MPI_T_pvar_stop", session, handle, false)
}

/// The value a handle shows: a level reads the variable; a counter what it counted while
/// started since its allocation or last reset (plus what was written).
fn value_of(h: &PvarHandle) -> u64 {
    let v = &tables().pvars[h.pvar];
    let now = (v.read)();
    if v.class == CLASS_LEVEL {
        return now;
    }
    if h.started {
        h.accum.wrapping_add(now.wrapping_sub(h.mark))
    } else {
        h.accum
    }
}

fn read_reset(
    call: &str,
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
    buf: *mut c_void,
    reset: bool,
) -> MpiResult<()> {
    with(call, |s| {
        let j = handles_of(call, s, session, handle, false)?[0];
        let h = s.pvar_handles[j].as_mut().expect("live");
        let v = &tables().pvars[h.pvar];
        if reset && v.readonly {
            return Err(terr(
                ErrorClass::TPvarNoWrite,
                format!("{call}: {} is read-only", v.name),
            ));
        }
        if !buf.is_null() {
            // SAFETY: `buf` holds one unsigned long long (the variable's datatype).
            unsafe { *buf.cast::<c_ulonglong>() = value_of(h) };
        } else if !reset {
            return Err(terr(
                ErrorClass::Arg,
                format!("{call}: argument buf is NULL"),
            ));
        }
        if reset {
            h.accum = 0;
            h.mark = (v.read)();
        }
        Ok(())
    })
}

pub(crate) fn t_pvar_read(
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
    buf: *mut c_void,
) -> MpiResult<()> {
    if buf.is_null() {
        return Err(terr(
            ErrorClass::Arg,
            "MPI_T_pvar_read: argument buf is NULL".into(),
        ));
    }
    read_reset("MPI_T_pvar_read", session, handle, buf, false)
}

pub(crate) fn t_pvar_readreset(
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
    buf: *mut c_void,
) -> MpiResult<()> {
    if buf.is_null() {
        return Err(terr(
            ErrorClass::Arg,
            "MPI_T_pvar_readreset: argument buf is NULL".into(),
        ));
    }
    read_reset("MPI_T_pvar_readreset", session, handle, buf, true)
}

pub(crate) fn t_pvar_reset(
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
) -> MpiResult<()> {
    let call = "MPI_T_pvar_reset";
    if handle as usize != ALL_HANDLES {
        return read_reset(call, session, handle, std::ptr::null_mut(), true);
    }
    with(call, |s| {
        for j in handles_of(call, s, session, handle, true)? {
            let h = s.pvar_handles[j].as_mut().expect("live");
            let v = &tables().pvars[h.pvar];
            if !v.readonly {
                h.accum = 0;
                h.mark = (v.read)();
            }
        }
        Ok(())
    })
}

pub(crate) fn t_pvar_write(
    session: MPI_T_pvar_session,
    handle: MPI_T_pvar_handle,
    buf: *const c_void,
) -> MpiResult<()> {
    let call = "MPI_T_pvar_write";
    with(call, |s| {
        let j = handles_of(call, s, session, handle, false)?[0];
        let h = s.pvar_handles[j].as_mut().expect("live");
        let v = &tables().pvars[h.pvar];
        if v.readonly {
            return Err(terr(
                ErrorClass::TPvarNoWrite,
                format!("{call}: {} is read-only", v.name),
            ));
        }
        if buf.is_null() {
            return Err(terr(
                ErrorClass::Arg,
                format!("{call}: argument buf is NULL"),
            ));
        }
        // SAFETY: `buf` holds one unsigned long long (the variable's datatype).
        h.accum = unsafe { *buf.cast::<c_ulonglong>() };
        h.mark = (v.read)();
        Ok(())
    })
}

// ----- categories -----

pub(crate) fn t_category_get_num(num_cat: &mut c_int) -> MpiResult<()> {
    with("MPI_T_category_get_num", |_| {
        *num_cat = CATEGORIES.len() as c_int;
        Ok(())
    })
}

fn members(cat: usize) -> (Vec<c_int>, Vec<c_int>) {
    let t = tables();
    let pick = |cats: Vec<usize>| {
        cats.into_iter()
            .enumerate()
            .filter(|&(_, c)| c == cat)
            .map(|(i, _)| i as c_int)
            .collect::<Vec<_>>()
    };
    (
        pick(t.cvars.iter().map(|v| v.category).collect()),
        pick(t.pvars.iter().map(|v| v.category).collect()),
    )
}

pub(crate) fn t_category_get_info(
    cat_index: c_int,
    name: *mut c_char,
    name_len: Option<&mut c_int>,
    desc: *mut c_char,
    desc_len: Option<&mut c_int>,
    num_cvars: Option<&mut c_int>,
    num_pvars: Option<&mut c_int>,
    num_categories: Option<&mut c_int>,
) -> MpiResult<()> {
    with("MPI_T_category_get_info", |_| {
        let c = index(
            "MPI_T_category_get_info",
            "category",
            &CATEGORIES,
            cat_index,
        )?;
        let (cv, pv) = members(c);
        put_str(CATEGORIES[c].name, name, name_len);
        put_str(CATEGORIES[c].desc, desc, desc_len);
        set(num_cvars, cv.len() as c_int);
        set(num_pvars, pv.len() as c_int);
        set(num_categories, 0);
        Ok(())
    })
}

pub(crate) fn t_category_get_index(name: &str, cat_index: &mut c_int) -> MpiResult<()> {
    with("MPI_T_category_get_index", |_| {
        *cat_index = find_name("MPI_T_category_get_index", &CATEGORIES, name, |c| c.name)?;
        Ok(())
    })
}

fn put_indices(
    call: &str,
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
    which: usize,
) -> MpiResult<()> {
    with(call, |_| {
        let c = index(call, "category", &CATEGORIES, cat_index)?;
        let (cv, pv) = members(c);
        let list = match which {
            0 => cv,
            1 => pv,
            _ => Vec::new(),
        };
        let n = list.len().min(len as usize);
        if n > 0 {
            if indices.is_null() {
                return Err(terr(
                    ErrorClass::Arg,
                    format!("{call}: argument indices is NULL"),
                ));
            }
            // SAFETY: `indices` holds `len` ints (the caller's contract) and n <= len.
            unsafe { std::ptr::copy_nonoverlapping(list.as_ptr(), indices, n) };
        }
        Ok(())
    })
}

pub(crate) fn t_category_get_cvars(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> MpiResult<()> {
    put_indices("MPI_T_category_get_cvars", cat_index, len, indices, 0)
}

pub(crate) fn t_category_get_pvars(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> MpiResult<()> {
    put_indices("MPI_T_category_get_pvars", cat_index, len, indices, 1)
}

pub(crate) fn t_category_get_categories(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> MpiResult<()> {
    put_indices("MPI_T_category_get_categories", cat_index, len, indices, 2)
}

pub(crate) fn t_category_changed(update_number: &mut c_int) -> MpiResult<()> {
    with("MPI_T_category_changed", |_| {
        // The variables and categories never change after the tables are built.
        *update_number = 0;
        Ok(())
    })
}

pub(crate) fn t_category_get_num_events(cat_index: c_int, num_events: &mut c_int) -> MpiResult<()> {
    with("MPI_T_category_get_num_events", |_| {
        index(
            "MPI_T_category_get_num_events",
            "category",
            &CATEGORIES,
            cat_index,
        )?;
        *num_events = 0;
        Ok(())
    })
}

pub(crate) fn t_category_get_events(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> MpiResult<()> {
    put_indices("MPI_T_category_get_events", cat_index, len, indices, 3)
}

// ----- event sources and events: Tsunagi has none -----

fn no_index(call: &str, what: &str, i: c_int) -> MpiResult<()> {
    with(call, |_| {
        Err(terr(
            ErrorClass::TInvalidIndex,
            format!("{call}: {what} index {i}: this MPI has no {what}s"),
        ))
    })
}

fn no_handle(call: &str) -> MpiResult<()> {
    with(call, |_| {
        Err(terr(
            ErrorClass::TInvalidHandle,
            format!("{call}: this MPI has no events, so no event handle is valid"),
        ))
    })
}

pub(crate) fn t_source_get_num(num_sources: &mut c_int) -> MpiResult<()> {
    with("MPI_T_source_get_num", |_| {
        *num_sources = 0;
        Ok(())
    })
}

pub(crate) fn t_source_get_info(
    source_index: c_int,
    _name: *mut c_char,
    _name_len: Option<&mut c_int>,
    _desc: *mut c_char,
    _desc_len: Option<&mut c_int>,
    _ordering: *mut MPI_T_source_order,
    _ticks_per_second: Option<&mut MPI_Count>,
    _max_ticks: Option<&mut MPI_Count>,
    _info: Option<&mut MPI_Info>,
) -> MpiResult<()> {
    no_index("MPI_T_source_get_info", "source", source_index)
}

pub(crate) fn t_source_get_timestamp(
    source_index: c_int,
    _timestamp: &mut MPI_Count,
) -> MpiResult<()> {
    no_index("MPI_T_source_get_timestamp", "source", source_index)
}

pub(crate) fn t_event_get_num(num_events: &mut c_int) -> MpiResult<()> {
    with("MPI_T_event_get_num", |_| {
        *num_events = 0;
        Ok(())
    })
}

pub(crate) fn t_event_get_info(
    event_index: c_int,
    _name: *mut c_char,
    _name_len: Option<&mut c_int>,
    _verbosity: Option<&mut c_int>,
    _array_of_datatypes: *mut MPI_Datatype,
    _array_of_displacements: *mut crate::ffi::MPI_Aint,
    _num_elements: Option<&mut c_int>,
    _enumtype: *mut MPI_T_enum,
    _info: Option<&mut MPI_Info>,
    _desc: *mut c_char,
    _desc_len: Option<&mut c_int>,
    _bind: Option<&mut c_int>,
) -> MpiResult<()> {
    no_index("MPI_T_event_get_info", "event", event_index)
}

pub(crate) fn t_event_get_index(name: &str, _event_index: &mut c_int) -> MpiResult<()> {
    with("MPI_T_event_get_index", |_| {
        Err(terr(
            ErrorClass::TInvalidName,
            format!("MPI_T_event_get_index: no event named {name}"),
        ))
    })
}

pub(crate) fn t_event_handle_alloc(
    event_index: c_int,
    _obj_handle: *mut c_void,
    _info: MPI_Info,
    _event_registration: *mut MPI_T_event_registration,
) -> MpiResult<()> {
    no_index("MPI_T_event_handle_alloc", "event", event_index)
}

pub(crate) fn t_event_handle_set_info(
    _r: MPI_T_event_registration,
    _info: MPI_Info,
) -> MpiResult<()> {
    no_handle("MPI_T_event_handle_set_info")
}

pub(crate) fn t_event_handle_get_info(
    _r: MPI_T_event_registration,
    _info_used: &mut MPI_Info,
) -> MpiResult<()> {
    no_handle("MPI_T_event_handle_get_info")
}

pub(crate) fn t_event_register_callback(
    _r: MPI_T_event_registration,
    _cb_safety: crate::ffi::MPI_T_cb_safety,
    _info: MPI_Info,
    _user_data: *mut c_void,
    _event_cb_function: crate::ffi::MPI_T_event_cb_function,
) -> MpiResult<()> {
    no_handle("MPI_T_event_register_callback")
}

pub(crate) fn t_event_callback_set_info(
    _r: MPI_T_event_registration,
    _cb_safety: crate::ffi::MPI_T_cb_safety,
    _info: MPI_Info,
) -> MpiResult<()> {
    no_handle("MPI_T_event_callback_set_info")
}

pub(crate) fn t_event_callback_get_info(
    _r: MPI_T_event_registration,
    _cb_safety: crate::ffi::MPI_T_cb_safety,
    _info_used: &mut MPI_Info,
) -> MpiResult<()> {
    no_handle("MPI_T_event_callback_get_info")
}

pub(crate) fn t_event_handle_free(
    _r: MPI_T_event_registration,
    _user_data: *mut c_void,
    _free_cb_function: crate::ffi::MPI_T_event_free_cb_function,
) -> MpiResult<()> {
    no_handle("MPI_T_event_handle_free")
}

pub(crate) fn t_event_set_dropped_handler(
    _r: MPI_T_event_registration,
    _cb: crate::ffi::MPI_T_event_dropped_cb_function,
) -> MpiResult<()> {
    no_handle("MPI_T_event_set_dropped_handler")
}

pub(crate) fn t_event_read(
    _e: MPI_T_event_instance,
    _element_index: c_int,
    _buffer: *mut c_void,
) -> MpiResult<()> {
    no_handle("MPI_T_event_read")
}

pub(crate) fn t_event_copy(_e: MPI_T_event_instance, _buffer: *mut c_void) -> MpiResult<()> {
    no_handle("MPI_T_event_copy")
}

pub(crate) fn t_event_get_timestamp(
    _e: MPI_T_event_instance,
    _ts: &mut MPI_Count,
) -> MpiResult<()> {
    no_handle("MPI_T_event_get_timestamp")
}

pub(crate) fn t_event_get_source(
    _e: MPI_T_event_instance,
    _source_index: &mut c_int,
) -> MpiResult<()> {
    no_handle("MPI_T_event_get_source")
}
