//! Dynamic processes: ports, connect/accept, join, spawn, name publishing, disconnect.
//!
//! Two worlds meet through `tsunagi-dynconn`: the roots meet over a port (or the socket
//! given to MPI_Comm_join), tell their groups what the other root said, every pair of
//! processes across the two groups gets a TCP stream (the mesh), the streams go to the
//! process's connection device under virtual ranks the core hands out, and the core
//! agrees the intercommunicator's context pair over the roots' connection
//! (`Runtime::intercomm_to_remote`).
//!
//! MPI_Comm_spawn starts the children as a job of their own through the launcher that
//! started this process: the root opens a port and sends PMI-1 `spawn` (one block per
//! application) with the port as the preput key `PARENT_ROOT_PORT_NAME`, as MPICH does;
//! our mpirun (or MPICH's Hydra) starts the children in a key-value space of their own
//! with `PMI_SPAWNED=1`, and their MPI_Init reads the key and connects back (collective
//! over their world): that intercommunicator is MPI_Comm_get_parent. The launcher tracks
//! the children like its other processes.
//!
//! Only a process with no PMI server to ask (a singleton; also one started through a
//! bootstrap other than PMI, such as a vendor MPI's launcher or a grid join) runs our
//! `mpirun` itself (`TSUNAGI_MPIRUN`, else the one installed beside this library, else
//! the PATH's) with `TSUNAGI_PARENT_PORT` naming the port, reaps that mpirun, and
//! MPI_Finalize waits for children that were not disconnected (MPI_Finalize is collective
//! over connected processes). MPI_Comm_spawn_multiple then starts one job whose ranks pick
//! their program by rank.
//!
//! Names are published through the launcher's name service (PMI-1 `publish_name`,
//! `lookup_name`, `unpublish_name`), which our mpirun keeps in the directory of files of
//! `tsunagi_dynconn::setup` that separately started jobs share; a singleton uses that
//! directory itself.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tsunagi_core::{CommId, ErrorClass, MpiError, MpiResult, Runtime};
use tsunagi_dynconn::setup::{self, MeshListener, NameError, Port, PortName, Token};
use tsunagi_dynconn::{ConnDevice, PeerInbox};
use tsunagi_p2p::boot::{NameAnswer, NameRequest, SpawnApp};

use crate::ffi::*;
use crate::handles::{self as h, err, InfoId};

/// Environment variable naming the port a spawned job connects back to (children of a
/// singleton's nested mpirun).
const PARENT_PORT: &str = "TSUNAGI_PARENT_PORT";
/// The preput key that carries the parents' port to children spawned through the
/// launcher (MPICH's name for it).
const PARENT_PORT_KEY: &str = "PARENT_ROOT_PORT_NAME";
/// Set to 1 by the launcher (ours, Hydra) in the environment of spawned processes.
const PMI_SPAWNED: &str = "PMI_SPAWNED";
/// Environment variable giving a child of MPI_Comm_spawn_multiple its app's index
/// (MPI_APPNUM; the runtime reads it, mpi-core/src/runtime/mod.rs).
const APPNUM: &str = "TSUNAGI_APPNUM";

/// Ports opened by MPI_Open_port (or a spawn), by name.
static PORTS: Mutex<Option<HashMap<String, Arc<Port>>>> = Mutex::new(None);

/// The connection device's inbox, and the device itself until the core takes it.
static DEVICE: Mutex<Option<(PeerInbox, Option<ConnDevice>)>> = Mutex::new(None);

/// MPI_Comm_get_parent's answer (MPI_COMM_NULL when not spawned, or once freed).
static PARENT: Mutex<MPI_Comm> = Mutex::new(MPI_COMM_NULL);

/// Child mpiruns started by this process: (intercommunicator, process); `None` once the
/// intercommunicator was disconnected (finalize no longer waits for them).
static CHILDREN: Mutex<Vec<(Option<CommId>, Child)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn inbox() -> MpiResult<PeerInbox> {
    let mut d = lock(&DEVICE);
    if d.is_none() {
        let (dev, inbox) = ConnDevice::new()
            .map_err(|e| err(ErrorClass::Other, format!("connection device: {e}")))?;
        *d = Some((inbox, Some(dev)));
    }
    Ok(d.as_ref().expect("set").0.clone())
}

fn take_device() -> MpiResult<Box<dyn tsunagi_p2p::device::Device>> {
    lock(&DEVICE)
        .as_mut()
        .and_then(|(_, d)| d.take())
        .map(|d| Box::new(d) as Box<dyn tsunagi_p2p::device::Device>)
        .ok_or_else(|| err(ErrorClass::Intern, "connection device made twice"))
}

fn io_err(class: ErrorClass, what: &str, e: std::io::Error) -> MpiError {
    err(class, format!("{what}: {e}"))
}

/// Which side of a connection a group is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Listens: MPI_Comm_accept, the spawning parents, the lower nonce of a join.
    Accept,
    Connect,
}

/// What a group's root answers its group: `[1] ++ payload` or `[0] ++ error message`.
fn outcome(r: MpiResult<Vec<u8>>) -> Vec<u8> {
    match r {
        Ok(mut v) => {
            v.insert(0, 1);
            v
        }
        Err(e) => {
            let mut v = vec![0u8];
            v.extend_from_slice(&(e.class as i32).to_le_bytes());
            v.extend_from_slice(e.message.as_bytes());
            v
        }
    }
}

fn from_outcome(call: &str, b: &[u8]) -> MpiResult<Vec<u8>> {
    match b.split_first() {
        Some((1, rest)) => Ok(rest.to_vec()),
        Some((0, rest)) if rest.len() >= 4 => {
            let class = i32::from_le_bytes(rest[..4].try_into().expect("4"));
            let class = ErrorClass::from_code(class).unwrap_or(ErrorClass::Other);
            Err(err(class, String::from_utf8_lossy(&rest[4..]).into_owned()))
        }
        _ => Err(err(
            ErrorClass::Intern,
            format!("{call}: malformed answer from the root"),
        )),
    }
}

/// Join `comm`'s group (collective; `root` meets the other group's root over the stream
/// `link` makes) with the other group: the intercommunicator.
fn establish(
    call: &str,
    rt: &'static Runtime,
    comm: CommId,
    root: c_int,
    side: Side,
    link: &mut dyn FnMut() -> MpiResult<(TcpStream, Token)>,
) -> MpiResult<CommId> {
    if rt.comm_is_inter(call, comm)? {
        return Err(err(
            ErrorClass::Comm,
            format!("{call}: comm must be an intracommunicator"),
        ));
    }
    let size = rt.comm_size(comm)?;
    let me = rt.comm_rank(comm)?;
    if root < 0 || root as usize >= size {
        return Err(err(
            ErrorClass::Root,
            format!("{call}: invalid root {root} (communicator size {size})"),
        ));
    }
    let is_root = me == root as usize;
    // The accepting group listens for the mesh, one listener per process.
    let listener = match side {
        Side::Accept => Some(MeshListener::open().map_err(|e| io_err(ErrorClass::Other, call, e))?),
        Side::Connect => None,
    };
    let mine = listener
        .as_ref()
        .map(|l| l.addr.clone())
        .unwrap_or_default();
    let addrs: Vec<String> = rt
        .allgather_bytes(call, comm, mine.as_bytes())?
        .into_iter()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect();
    // The roots meet; each tells its group what the other said (or why it failed).
    let stream: Mutex<Option<TcpStream>> = Mutex::new(None);
    let meet = |_: &[u8]| -> MpiResult<Vec<u8>> {
        let r = (|| {
            let (mut s, token) = link()?;
            let said = match side {
                Side::Accept => {
                    let mut m = token.to_vec();
                    m.extend_from_slice(&setup::encode_strings(&addrs));
                    m
                }
                Side::Connect => (size as u32).to_le_bytes().to_vec(),
            };
            setup::send_msg(&mut s, &said).map_err(|e| io_err(ErrorClass::Port, call, e))?;
            let heard = setup::recv_msg(&mut s).map_err(|e| io_err(ErrorClass::Port, call, e))?;
            *lock(&stream) = Some(s);
            // The accepting group learns its root's token with the answer.
            Ok(match side {
                Side::Accept => [&token[..], &heard].concat(),
                Side::Connect => heard,
            })
        })();
        Ok(outcome(r))
    };
    let link_cell = std::cell::RefCell::new(meet);
    let exchange = |m: &[u8]| (link_cell.borrow_mut())(m);
    let heard = rt.leader_exchange(call, comm, is_root, &[], &exchange)?;
    let heard = from_outcome(call, &heard)?;
    let malformed = || {
        err(
            ErrorClass::Port,
            format!("{call}: malformed answer from the other root"),
        )
    };
    // The mesh: the connecting group connects to every process of the accepting group.
    let streams = match side {
        Side::Accept => {
            let t = setup::TOKEN_BYTES;
            let n = heard.get(t..t + 4).ok_or_else(malformed)?;
            let n = u32::from_le_bytes(n.try_into().expect("4 bytes"));
            let token: Token = heard[..t].try_into().expect("16 bytes");
            listener
                .expect("accepting side listens")
                .accept_all(n as usize, &token)
                .map_err(|e| io_err(ErrorClass::Other, call, e))?
        }
        Side::Connect => {
            let token: Token = heard
                .get(..setup::TOKEN_BYTES)
                .ok_or_else(malformed)?
                .try_into()
                .expect("16 bytes");
            let remote =
                setup::decode_strings(&heard[setup::TOKEN_BYTES..]).ok_or_else(malformed)?;
            if remote.is_empty() {
                return Err(malformed());
            }
            setup::connect_all(&remote, me as u32, &token)
                .map_err(|e| io_err(ErrorClass::Other, call, e))?
        }
    };
    let inbox = inbox()?;
    let ranks = rt.add_dynamic_peers("dynconn", &mut take_device, streams.len())?;
    for (&r, s) in ranks.iter().zip(streams) {
        inbox.add(r, s);
    }
    // The context pair, agreed through the roots' stream.
    let agree = |m: &[u8]| -> MpiResult<Vec<u8>> {
        let mut g = lock(&stream);
        let s = g.as_mut().ok_or_else(|| {
            err(
                ErrorClass::Intern,
                format!("{call}: no link to the other root"),
            )
        })?;
        setup::send_msg(s, m).map_err(|e| io_err(ErrorClass::Port, call, e))?;
        setup::recv_msg(s).map_err(|e| io_err(ErrorClass::Port, call, e))
    };
    rt.intercomm_to_remote(call, comm, is_root, &agree, ranks)
}

fn port_of(call: &str, name: &str) -> MpiResult<Arc<Port>> {
    lock(&PORTS)
        .as_ref()
        .and_then(|m| m.get(name).cloned())
        .ok_or_else(|| {
            err(
                ErrorClass::Port,
                format!("{call}: {name:?} is not a port opened by this process"),
            )
        })
}

fn connect_timeout() -> Duration {
    std::env::var("TSUNAGI_CONNECT_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(60))
}

pub(crate) fn open_port(_info: Option<InfoId>, port_name: *mut c_char) -> MpiResult<()> {
    h::runtime("MPI_Open_port")?;
    let port = Port::open().map_err(|e| io_err(ErrorClass::Other, "MPI_Open_port", e))?;
    let name = port.name.to_string();
    // SAFETY: MPI requires room for MPI_MAX_PORT_NAME bytes.
    unsafe { h::write_cstr("port_name", port_name, MPI_MAX_PORT_NAME, &name)? };
    lock(&PORTS)
        .get_or_insert_with(HashMap::new)
        .insert(name, Arc::new(port));
    Ok(())
}

pub(crate) fn close_port(port_name: &str) -> MpiResult<()> {
    h::runtime("MPI_Close_port")?;
    match lock(&PORTS).as_mut().and_then(|m| m.remove(port_name)) {
        Some(_) => Ok(()),
        None => Err(err(
            ErrorClass::Port,
            format!("MPI_Close_port: {port_name:?} is not an open port of this process"),
        )),
    }
}

pub(crate) fn comm_accept(
    port_name: &str,
    _info: Option<InfoId>,
    root: c_int,
    comm: CommId,
    newcomm: &mut MPI_Comm,
) -> MpiResult<()> {
    let call = "MPI_Comm_accept";
    let rt = h::runtime(call)?;
    let name = port_name.to_string();
    let id = establish(call, rt, comm, root, Side::Accept, &mut || {
        let port = port_of(call, &name)?;
        let s = port
            .accept_root(&mut || None)
            .map_err(|e| io_err(ErrorClass::Port, call, e))?;
        Ok((s, port.name.token))
    })?;
    *newcomm = h::comm_handle(id);
    Ok(())
}

pub(crate) fn comm_connect(
    port_name: &str,
    _info: Option<InfoId>,
    root: c_int,
    comm: CommId,
    newcomm: &mut MPI_Comm,
) -> MpiResult<()> {
    let call = "MPI_Comm_connect";
    let rt = h::runtime(call)?;
    let name = port_name.to_string();
    let id = establish(call, rt, comm, root, Side::Connect, &mut || {
        connect_to(call, &name)
    })?;
    *newcomm = h::comm_handle(id);
    Ok(())
}

fn connect_to(call: &str, name: &str) -> MpiResult<(TcpStream, Token)> {
    let p = PortName::parse(name).ok_or_else(|| {
        err(
            ErrorClass::Port,
            format!("{call}: {name:?} is not a port name (tsunagi:HOST:PORT:TOKEN)"),
        )
    })?;
    let s = setup::connect_root(&p, connect_timeout()).map_err(|e| {
        err(
            ErrorClass::Port,
            format!("{call}: nobody accepts on {name:?}: {e}"),
        )
    })?;
    Ok((s, p.token))
}

pub(crate) fn comm_join(fd: c_int, intercomm: &mut MPI_Comm) -> MpiResult<()> {
    let call = "MPI_Comm_join";
    let rt = h::runtime(call)?;
    if fd < 0 {
        return Err(err(ErrorClass::Arg, format!("{call}: invalid socket {fd}")));
    }
    // SAFETY: the program passes a connected socket it owns; ManuallyDrop leaves it open
    // (it stays the program's), and `try_clone` gives us a descriptor of our own.
    let theirs = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
    let mut s = theirs
        .try_clone()
        .map_err(|e| io_err(ErrorClass::Arg, &format!("{call}: socket {fd}"), e))?;
    // Roles by a nonce each (equal nonces: draw again); the lower one accepts.
    let side = loop {
        let mine = setup::random_token().map_err(|e| io_err(ErrorClass::Other, call, e))?;
        setup::send_msg(&mut s, &mine).map_err(|e| io_err(ErrorClass::Arg, call, e))?;
        let other = setup::recv_msg(&mut s).map_err(|e| io_err(ErrorClass::Arg, call, e))?;
        if other.as_slice() != mine.as_slice() {
            break if mine.as_slice() < other.as_slice() {
                Side::Accept
            } else {
                Side::Connect
            };
        }
    };
    let token = if side == Side::Accept {
        setup::random_token().map_err(|e| io_err(ErrorClass::Other, call, e))?
    } else {
        [0u8; setup::TOKEN_BYTES]
    };
    let mut link = Some(s);
    let id = establish(call, rt, CommId::SELF, 0, side, &mut || {
        let s = link
            .take()
            .ok_or_else(|| err(ErrorClass::Intern, format!("{call}: joined twice")))?;
        Ok((s, token))
    })?;
    *intercomm = h::comm_handle(id);
    Ok(())
}

fn name_err(call: &str, e: NameError) -> MpiError {
    match e {
        NameError::Service(m) => err(ErrorClass::Service, format!("{call}: {m}")),
        NameError::Name(m) => err(ErrorClass::Name, format!("{call}: {m}")),
        NameError::Io(m) => err(ErrorClass::Other, format!("{call}: name service: {m}")),
    }
}

/// The launcher's name-service answer as this call's result (the port for a lookup).
fn name_answer(call: &str, a: MpiResult<NameAnswer>) -> MpiResult<Option<String>> {
    match a? {
        NameAnswer::Done => Ok(None),
        NameAnswer::Port(p) => Ok(Some(p)),
        NameAnswer::ServiceRefused(m) => Err(err(ErrorClass::Service, format!("{call}: {m}"))),
        NameAnswer::NotFound(m) => Err(err(ErrorClass::Name, format!("{call}: {m}"))),
        NameAnswer::Failed(m) => Err(err(ErrorClass::Other, format!("{call}: name service: {m}"))),
    }
}

/// Whether names go to the launcher: ours serves them; other PMI-1 servers (Hydra without
/// its name server, Slurm) may not answer, so they get the directory of files.
fn ask_launcher(rt: &Runtime, req: NameRequest<'_>) -> Option<MpiResult<NameAnswer>> {
    std::env::var_os("TSUNAGI_JOBID")?;
    rt.launcher_names(req)
}

pub(crate) fn publish_name(service: &str, _info: Option<InfoId>, port: &str) -> MpiResult<()> {
    let call = "MPI_Publish_name";
    let rt = h::runtime(call)?;
    let req = NameRequest::Publish { service, port };
    match ask_launcher(rt, req) {
        Some(a) => name_answer(call, a).map(drop),
        None => setup::publish(service, port).map_err(|e| name_err(call, e)),
    }
}

pub(crate) fn unpublish_name(service: &str, _info: Option<InfoId>, port: &str) -> MpiResult<()> {
    let call = "MPI_Unpublish_name";
    let rt = h::runtime(call)?;
    let req = NameRequest::Unpublish { service, port };
    match ask_launcher(rt, req) {
        Some(a) => name_answer(call, a).map(drop),
        None => setup::unpublish(service, port).map_err(|e| name_err(call, e)),
    }
}

pub(crate) fn lookup_name(
    service: &str,
    _info: Option<InfoId>,
    port_name: *mut c_char,
) -> MpiResult<()> {
    let call = "MPI_Lookup_name";
    let rt = h::runtime(call)?;
    let port = match ask_launcher(rt, NameRequest::Lookup { service }) {
        Some(a) => name_answer(call, a)?.unwrap_or_default(),
        None => setup::lookup(service).map_err(|e| name_err(call, e))?,
    };
    // SAFETY: MPI requires room for MPI_MAX_PORT_NAME bytes.
    unsafe { h::write_cstr("port_name", port_name, MPI_MAX_PORT_NAME, &port)? };
    Ok(())
}

pub(crate) fn comm_get_parent(parent: &mut MPI_Comm) -> MpiResult<()> {
    h::runtime("MPI_Comm_get_parent")?;
    *parent = *lock(&PARENT);
    Ok(())
}

/// MPI_Init's part: a process started by MPI_Comm_spawn connects back to its parents
/// (collective over the new world).
pub(crate) fn connect_to_parent() -> MpiResult<()> {
    let call = "MPI_Init (connecting to the spawning parents)";
    let name = if let Some(name) = std::env::var_os(PARENT_PORT) {
        // Our own children get a port of their own, not ours.
        std::env::remove_var(PARENT_PORT);
        name.to_string_lossy().into_owned()
    } else if std::env::var_os(PMI_SPAWNED).is_some_and(|v| v == "1") {
        // Started by the launcher for MPI_Comm_spawn: the parents' port is in our
        // key-value space.
        std::env::remove_var(PMI_SPAWNED);
        h::runtime(call)?
            .launcher_get(PARENT_PORT_KEY)?
            .ok_or_else(|| {
                err(
                    ErrorClass::Spawn,
                    format!(
                        "{call}: PMI_SPAWNED is set but the launcher holds no {PARENT_PORT_KEY}"
                    ),
                )
            })?
    } else {
        return Ok(());
    };
    let rt = h::runtime(call)?;
    let id = establish(call, rt, CommId::WORLD, 0, Side::Connect, &mut || {
        connect_to(call, &name)
    })?;
    rt.comm_set_name(id, "MPI_COMM_PARENT")?;
    *lock(&PARENT) = h::comm_handle(id);
    Ok(())
}

/// MPI_Comm_disconnect: complete what is pending on `comm` (a barrier over it: every
/// member has sent and received what it will), then free it.
pub(crate) fn comm_disconnect(comm: &mut MPI_Comm) -> MpiResult<()> {
    let id = h::comm("comm", *comm)?;
    super::barrier(id)?;
    {
        let mut p = lock(&PARENT);
        if *p == *comm {
            *p = MPI_COMM_NULL;
        }
    }
    for (c, _) in lock(&CHILDREN).iter_mut() {
        if *c == Some(id) {
            *c = None;
        }
    }
    super::comm_free(comm)
}

/// MPI_Finalize's part: wait for the spawned jobs still connected to end (MPI_Finalize
/// is collective over connected processes); reap the others that have ended.
pub(crate) fn at_finalize() {
    let children = std::mem::take(&mut *lock(&CHILDREN));
    for (connected, mut child) in children {
        if connected.is_some() {
            let _ = child.wait();
        } else if !matches!(child.try_wait(), Ok(Some(_))) {
            // Disconnected and still running: an independent job now; a thread reaps it
            // if this process lives long enough, init does otherwise.
            std::thread::spawn(move || child.wait());
        }
    }
}

/// One application of a spawn: program, arguments, process count, info.
struct App {
    command: String,
    args: Vec<String>,
    procs: usize,
    info: Option<InfoId>,
}

/// A NULL-terminated C string array (MPI_ARGV_NULL: none).
///
/// # Safety
/// `argv` is NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn c_strings(call: &str, argv: *mut *mut c_char) -> MpiResult<Vec<String>> {
    let mut out = Vec::new();
    if argv.is_null() {
        return Ok(out);
    }
    for i in 0.. {
        // SAFETY: the array is NULL-terminated (caller's contract).
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated string (caller's contract).
        let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| {
            err(
                ErrorClass::Arg,
                format!("{call}: argument {i} of argv is not UTF-8"),
            )
        })?;
        out.push(s.to_string());
    }
    Ok(out)
}

/// Quote `s` for /bin/sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The mpirun that starts children: `TSUNAGI_MPIRUN` (our mpirun sets it for its ranks),
/// else the `mpirun` installed beside this library (`PREFIX/bin` for `PREFIX/lib`; a
/// singleton has no mpirun of its own), else the PATH's.
fn mpirun() -> std::ffi::OsString {
    if let Some(p) = std::env::var_os("TSUNAGI_MPIRUN").filter(|p| !p.is_empty()) {
        return p;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the address (a function of this library) and fills `info`;
    // dli_fname, when set, is a NUL-terminated path owned by the dynamic loader.
    let found = unsafe { libc::dladdr(mpirun as *const libc::c_void, &mut info) } != 0
        && !info.dli_fname.is_null();
    if found {
        // SAFETY: checked non-NULL above; valid while the library is loaded.
        let lib = unsafe { CStr::from_ptr(info.dli_fname) };
        let lib = std::path::Path::new(std::ffi::OsStr::from_bytes(lib.to_bytes()));
        if let Some(prefix) = lib.parent().and_then(|d| d.parent()) {
            let candidate = prefix.join("bin/mpirun");
            if candidate.is_file() {
                return candidate.into_os_string();
            }
        }
    }
    "mpirun".into()
}

/// Start the children (at the root): one mpirun job of all apps, connecting back to
/// `port`.
fn launch(call: &str, apps: &[App], port: &Port) -> MpiResult<Child> {
    let total: usize = apps.iter().map(|a| a.procs).sum();
    let mut cmd = Command::new(mpirun());
    cmd.arg("-n").arg(total.to_string());
    let first = &apps[0];
    if let Some(info) = first.info {
        if let Some(host) = super::info_lookup(info, "host") {
            cmd.arg("--host").arg(host);
        }
        if let Some(wdir) = super::info_lookup(info, "wdir") {
            cmd.current_dir(wdir);
        }
        if let Some(path) = super::info_lookup(info, "path") {
            let old = std::env::var("PATH").unwrap_or_default();
            cmd.env("PATH", format!("{path}:{old}"));
        }
    }
    if apps.len() == 1 {
        cmd.arg(&first.command).args(&first.args);
    } else {
        // One job whose ranks pick their program by rank (mpirun runs one program).
        let mut script = String::from("case \"$PMI_RANK\" in\n");
        // Each rank learns its app's index (MPI_APPNUM) from TSUNAGI_APPNUM.
        let mut base = 0;
        for (i, a) in apps.iter().enumerate() {
            let ranks: Vec<String> = (base..base + a.procs).map(|r| r.to_string()).collect();
            base += a.procs;
            let mut line = format!(
                "{}) export {APPNUM}={i}; exec {}",
                ranks.join("|"),
                sh_quote(&a.command)
            );
            for x in &a.args {
                line.push(' ');
                line.push_str(&sh_quote(x));
            }
            script.push_str(&line);
            script.push_str(" ;;\n");
        }
        script.push_str("esac\nexit 127\n");
        cmd.arg("/bin/sh").arg("-c").arg(script);
    }
    // The children are a job of their own: none of this job's start-up reaches them.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("PMI_")
            || k == "TSUNAGI_JOBID"
            || k.starts_with("TSUNAGI_JOB_KEY")
            || k == APPNUM
        {
            cmd.env_remove(&*k);
        }
    }
    cmd.env(PARENT_PORT, port.name.to_string());
    cmd.spawn().map_err(|e| {
        err(
            ErrorClass::Spawn,
            format!("{call}: cannot start {:?}: {e}", mpirun()),
        )
    })
}

/// Info keys the launcher is told about (others are ignored, as MPI allows; MPICH's Hydra
/// refuses keys it does not know).
const LAUNCHER_INFO_KEYS: [&str; 3] = ["host", "wdir", "path"];

/// `apps` as a PMI-1 spawn request's applications. PMI carries each value on a line of
/// its own, so none may hold a line break.
fn pmi_apps(call: &str, apps: &[App]) -> MpiResult<Vec<SpawnApp>> {
    let check = |what: &str, v: &str| -> MpiResult<String> {
        if v.contains(['\n', '\r']) {
            return Err(err(
                ErrorClass::Arg,
                format!("{call}: {what} holds a line break, which the launcher cannot be sent"),
            ));
        }
        Ok(v.to_string())
    };
    apps.iter()
        .map(|a| {
            let mut info = Vec::new();
            if let Some(i) = a.info {
                for k in LAUNCHER_INFO_KEYS {
                    if let Some(v) = super::info_lookup(i, k) {
                        info.push((k.to_string(), check(&format!("info key {k}"), &v)?));
                    }
                }
            }
            Ok(SpawnApp {
                command: check("command", &a.command)?,
                args: a
                    .args
                    .iter()
                    .map(|x| check("an argument", x))
                    .collect::<MpiResult<_>>()?,
                procs: a.procs,
                info,
            })
        })
        .collect()
}

fn spawn_apps(
    call: &str,
    apps: &mut dyn FnMut() -> MpiResult<Vec<App>>,
    root: c_int,
    comm: CommId,
    intercomm: &mut MPI_Comm,
    errcodes: *mut c_int,
) -> MpiResult<()> {
    let rt = h::runtime(call)?;
    let mut started: Option<(Child, usize)> = None;
    let id = establish(call, rt, comm, root, Side::Accept, &mut || {
        let apps = apps()?;
        let port = Port::open().map_err(|e| io_err(ErrorClass::Spawn, call, e))?;
        // Through the launcher when there is one: it starts, watches and reaps them.
        let preput = [(PARENT_PORT_KEY.to_string(), port.name.to_string())];
        if let Some(r) = rt.launcher_spawn(call, &pmi_apps(call, &apps)?, &preput) {
            r?;
            let s = port
                .accept_root(&mut || None)
                .map_err(|e| io_err(ErrorClass::Spawn, call, e))?;
            return Ok((s, port.name.token));
        }
        let mut child = launch(call, &apps, &port)?;
        let s = port.accept_root(&mut || match child.try_wait() {
            Ok(Some(st)) => Some(format!(
                "the children's mpirun ended ({st}) before they connected"
            )),
            _ => None,
        });
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io_err(ErrorClass::Spawn, call, e));
            }
        };
        let total = apps.iter().map(|a| a.procs).sum();
        started = Some((child, total));
        Ok((s, port.name.token))
    });
    if let Some((child, _)) = started {
        lock(&CHILDREN).push((id.as_ref().ok().copied(), child));
    }
    let id = id?;
    let total = rt.comm_remote_size(id)?;
    if !errcodes.is_null() {
        for i in 0..total {
            // SAFETY: MPI requires room for maxprocs (sum of them) codes; the children
            // that connected are exactly those.
            unsafe { *errcodes.add(i) = MPI_SUCCESS };
        }
    }
    *intercomm = h::comm_handle(id);
    Ok(())
}

fn check_procs(call: &str, n: c_int) -> MpiResult<usize> {
    if n <= 0 {
        return Err(err(
            ErrorClass::Arg,
            format!("{call}: maxprocs must be positive (got {n})"),
        ));
    }
    Ok(n as usize)
}

pub(crate) fn comm_spawn(
    command: Option<&str>,
    argv: *mut *mut c_char,
    maxprocs: c_int,
    info: Option<InfoId>,
    root: c_int,
    comm: CommId,
    intercomm: &mut MPI_Comm,
    errcodes: *mut c_int,
) -> MpiResult<()> {
    let call = "MPI_Comm_spawn";
    spawn_apps(
        call,
        &mut || {
            let command = command.ok_or_else(|| {
                err(
                    ErrorClass::Arg,
                    format!("{call}: command is NULL at the root"),
                )
            })?;
            Ok(vec![App {
                command: command.to_string(),
                // SAFETY: argv is MPI_ARGV_NULL or NULL-terminated (MPI contract).
                args: unsafe { c_strings(call, argv)? },
                procs: check_procs(call, maxprocs)?,
                info,
            }])
        },
        root,
        comm,
        intercomm,
        errcodes,
    )
}

pub(crate) fn comm_spawn_multiple(
    count: c_int,
    commands: *mut *mut c_char,
    argvs: *mut *mut *mut c_char,
    maxprocs: *const c_int,
    infos: *const MPI_Info,
    root: c_int,
    comm: CommId,
    intercomm: &mut MPI_Comm,
    errcodes: *mut c_int,
) -> MpiResult<()> {
    let call = "MPI_Comm_spawn_multiple";
    spawn_apps(
        call,
        &mut || {
            if count <= 0 || commands.is_null() || maxprocs.is_null() || infos.is_null() {
                return Err(err(
                    ErrorClass::Arg,
                    format!("{call}: count must be positive and the arrays given (count {count})"),
                ));
            }
            (0..count as usize)
                .map(|i| {
                    // SAFETY: the arrays have `count` entries (MPI contract).
                    let (c, a, n, inf) = unsafe {
                        (
                            *commands.add(i),
                            if argvs.is_null() {
                                std::ptr::null_mut()
                            } else {
                                *argvs.add(i)
                            },
                            *maxprocs.add(i),
                            *infos.add(i),
                        )
                    };
                    if c.is_null() {
                        return Err(err(ErrorClass::Arg, format!("{call}: command {i} is NULL")));
                    }
                    // SAFETY: a NUL-terminated string (MPI contract).
                    let command = unsafe { CStr::from_ptr(c) }.to_string_lossy().into_owned();
                    Ok(App {
                        command,
                        // SAFETY: MPI_ARGV_NULL or NULL-terminated (MPI contract).
                        args: unsafe { c_strings(call, a)? },
                        procs: check_procs(call, n)?,
                        info: h::info_or_null("array_of_info", inf)?,
                    })
                })
                .collect()
        },
        root,
        comm,
        intercomm,
        errcodes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_survive_the_shell_and_root_outcomes_round_trip() {
        for arg in ["plain", "a b", "it's", "'", "", "$HOME `x` \\ \"q\""] {
            let out = Command::new("/bin/sh")
                .arg("-c")
                .arg(format!("printf %s {}", sh_quote(arg)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), arg);
        }
        assert_eq!(
            from_outcome("x", &outcome(Ok(vec![1, 2]))).unwrap(),
            vec![1, 2]
        );
        let e =
            from_outcome("x", &outcome(Err(err(ErrorClass::Port, "nobody accepts")))).unwrap_err();
        assert_eq!(
            (e.class, e.message.as_str()),
            (ErrorClass::Port, "nobody accepts")
        );
        assert_eq!(
            from_outcome("x", &[]).unwrap_err().class,
            ErrorClass::Intern
        );
        assert_eq!(
            from_outcome("x", &[0, 1]).unwrap_err().class,
            ErrorClass::Intern
        );
    }
}
