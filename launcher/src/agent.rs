//! The per-host agent: `mpirun --agent ADDR:PORT ID`, started on a remote host through
//! the launch command (`ssh {host}`, `ip netns exec {host}`, ...).
//!
//! The agent reads the agent key (32 hex digits and a newline) from its standard input,
//! which mpirun feeds through the launch command, so the key is on no command line and in
//! no environment. It connects back to mpirun over TCP, and the two prove to each other
//! that they know the key without sending it (see *Authentication* below); then it
//! receives the job description (program, arguments, environment, the job key, its ranks), starts
//! its ranks with PMI_FD socketpairs exactly as mpirun does for local ranks, relays their
//! PMI lines to mpirun's one PMI server and the replies back, forwards signals, and reports
//! every exit. Its ranks' stdout/stderr are inherited from the agent, whose own output the
//! launch command carries back to mpirun's (ssh forwards it; `ip netns exec` inherits it), so
//! output needs no relaying of ours; stdin reaches rank 0 the same way.
//!
//! No orphans: ranks die with the agent (PR_SET_PDEATHSIG), and the agent kills its ranks
//! and exits as soon as its connection to mpirun ends for any reason.
//!
//! # Control protocol
//!
//! Lines of space-separated words; arbitrary bytes travel hex-encoded ([`Msg::encode`]).
//!
//! # Authentication
//!
//! ```text
//! mpirun → agent   challenge Cm                 (16 random bytes, on accept)
//! agent  → mpirun  hello ID Ca HMAC(k, hello, ID, Cm, Ca)
//! mpirun → agent   proof HMAC(k, proof, ID, Ca, Cm)   then the job spec
//! ```
//!
//! HMAC-SHA256 under the agent key `k` ([`tsunagi_tcp::auth`]). mpirun sends nothing of
//! the job before the agent's MAC checked out, and the agent runs nothing before mpirun's
//! did: a local user who connects first, or who listens where an agent connects, learns
//! nothing and can start nothing. The spec itself (with the job key) then travels in clear
//! over the connection, as everything else between mpirun and agents does.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use tsunagi_core::pmi::wire::LineBuffer;

use tsunagi_tcp::auth::{self, MAC_BYTES, NONCE_BYTES};
use tsunagi_tcp::JobKey;

use crate::local::{self, LocalJob};

const HELLO_LABEL: &str = "tsunagi agent hello v1";
const PROOF_LABEL: &str = "tsunagi mpirun proof v1";

/// The agent's answer to mpirun's challenge `challenge`, sent with its own `nonce`.
pub fn hello_mac(
    key: &JobKey,
    id: usize,
    challenge: &[u8; NONCE_BYTES],
    nonce: &[u8; NONCE_BYTES],
) -> [u8; MAC_BYTES] {
    auth::mac(
        &key.0,
        HELLO_LABEL,
        &[&(id as u64).to_le_bytes(), challenge, nonce],
    )
}

/// mpirun's check of an agent's hello to its challenge.
pub fn check_hello(
    key: &JobKey,
    challenge: &[u8; NONCE_BYTES],
    id: usize,
    nonce: &[u8; NONCE_BYTES],
    mac: &[u8; MAC_BYTES],
) -> bool {
    auth::verify(
        &key.0,
        HELLO_LABEL,
        &[&(id as u64).to_le_bytes(), challenge, nonce],
        mac,
    )
}

/// mpirun's answer to the agent's `nonce` (its own `challenge` bound in too).
pub fn proof_mac(
    key: &JobKey,
    id: usize,
    challenge: &[u8; NONCE_BYTES],
    nonce: &[u8; NONCE_BYTES],
) -> [u8; MAC_BYTES] {
    auth::mac(
        &key.0,
        PROOF_LABEL,
        &[&(id as u64).to_le_bytes(), nonce, challenge],
    )
}
use crate::signals::SignalPipe;

/// One control message, either direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// mpirun → agent, first: the challenge.
    Challenge([u8; NONCE_BYTES]),
    /// agent → mpirun: which agent, its own challenge, and its answer to mpirun's.
    Hello {
        id: usize,
        nonce: [u8; NONCE_BYTES],
        mac: [u8; MAC_BYTES],
    },
    /// mpirun → agent: mpirun's answer to the agent's challenge.
    Proof([u8; MAC_BYTES]),
    /// mpirun → agent, in the spec: the job key (hex) for the ranks' TCP connections.
    JobKey(String),
    /// mpirun → agent: the job description, ended by `Start`.
    Prog(OsString),
    Argv0(OsString),
    Arg(OsString),
    Env(OsString, OsString),
    Rank(usize),
    Size(usize),
    Kvs(String),
    /// In a spec: the PMI slot of its rank 0 (processes spawned by MPI_Comm_spawn; the
    /// job's own spec has none, i.e. 0).
    Base(usize),
    /// In a spec: the ranks' working directory.
    Wdir(OsString),
    Start,
    /// mpirun → agent: every process of the job has ended; the agent may exit once its
    /// own have (until then more may come: specs of spawned processes after `Start`).
    Finish,
    /// Either way: a PMI line from (to) a rank.
    Pmi(usize, String),
    /// mpirun → agent: send this signal to every rank.
    Signal(i32),
    /// agent → mpirun: a rank exited (`code`) or was killed (`signal`).
    Exit {
        rank: usize,
        code: i32,
        signal: i32,
    },
    /// agent → mpirun: the agent cannot go on (e.g. a rank did not start).
    Failed(String),
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s == "-" {
        return Some(Vec::new());
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Msg {
    /// The line, with its newline.
    pub fn encode(&self) -> String {
        let os = |s: &OsString| hex(s.as_bytes());
        let body = match self {
            Msg::Challenge(n) => format!("challenge {}", auth::to_hex(n)),
            Msg::Hello { id, nonce, mac } => {
                format!("hello {id} {} {}", auth::to_hex(nonce), auth::to_hex(mac))
            }
            Msg::Proof(m) => format!("proof {}", auth::to_hex(m)),
            Msg::JobKey(k) => format!("jobkey {}", hex(k.as_bytes())),
            Msg::Prog(p) => format!("prog {}", os(p)),
            Msg::Argv0(p) => format!("argv0 {}", os(p)),
            Msg::Arg(p) => format!("arg {}", os(p)),
            Msg::Env(k, v) => format!("env {} {}", os(k), os(v)),
            Msg::Rank(r) => format!("rank {r}"),
            Msg::Size(n) => format!("size {n}"),
            Msg::Kvs(k) => format!("kvs {}", hex(k.as_bytes())),
            Msg::Base(b) => format!("base {b}"),
            Msg::Wdir(d) => format!("wdir {}", os(d)),
            Msg::Start => "start".into(),
            Msg::Finish => "finish".into(),
            Msg::Pmi(r, l) => format!("pmi {r} {}", hex(l.as_bytes())),
            Msg::Signal(s) => format!("signal {s}"),
            Msg::Exit { rank, code, signal } => format!("exit {rank} {code} {signal}"),
            Msg::Failed(m) => format!("failed {}", hex(m.as_bytes())),
        };
        body + "\n"
    }

    /// Parse one line (without its newline).
    pub fn decode(line: &str) -> Result<Msg, String> {
        let w: Vec<&str> = line.split(' ').collect();
        let bad = || {
            format!(
                "bad control line {:?}",
                line.chars().take(80).collect::<String>()
            )
        };
        let os = |s: &str| unhex(s).map(OsString::from_vec).ok_or_else(bad);
        let text = |s: &str| {
            unhex(s)
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(bad)
        };
        let num = |s: &str| s.parse::<usize>().map_err(|_| bad());
        let int = |s: &str| s.parse::<i32>().map_err(|_| bad());
        Ok(match w[..] {
            ["challenge", n] => Msg::Challenge(auth::from_hex(n).ok_or_else(bad)?),
            ["hello", id, n, m] => Msg::Hello {
                id: num(id)?,
                nonce: auth::from_hex(n).ok_or_else(bad)?,
                mac: auth::from_hex(m).ok_or_else(bad)?,
            },
            ["proof", m] => Msg::Proof(auth::from_hex(m).ok_or_else(bad)?),
            ["jobkey", k] => Msg::JobKey(text(k)?),
            ["prog", p] => Msg::Prog(os(p)?),
            ["argv0", p] => Msg::Argv0(os(p)?),
            ["arg", p] => Msg::Arg(os(p)?),
            ["env", k, v] => Msg::Env(os(k)?, os(v)?),
            ["rank", r] => Msg::Rank(num(r)?),
            ["size", n] => Msg::Size(num(n)?),
            ["kvs", k] => Msg::Kvs(text(k)?),
            ["base", b] => Msg::Base(num(b)?),
            ["wdir", d] => Msg::Wdir(os(d)?),
            ["start"] => Msg::Start,
            ["finish"] => Msg::Finish,
            ["pmi", r, l] => Msg::Pmi(num(r)?, text(l)?),
            ["signal", s] => Msg::Signal(int(s)?),
            ["exit", r, c, s] => Msg::Exit {
                rank: num(r)?,
                code: int(c)?,
                signal: int(s)?,
            },
            ["failed", m] => Msg::Failed(text(m)?),
            _ => return Err(bad()),
        })
    }

    /// The job description for an agent, as messages (without the Hello).
    pub fn job_spec(job: &LocalJob) -> Vec<Msg> {
        let mut v = vec![
            Msg::Prog(job.program.clone().into_os_string()),
            Msg::Argv0(job.argv0.clone()),
        ];
        v.extend(job.args.iter().cloned().map(Msg::Arg));
        v.extend(job.env.iter().cloned().map(|(k, val)| Msg::Env(k, val)));
        v.extend(job.ranks.iter().map(|&r| Msg::Rank(r)));
        v.push(Msg::Size(job.size));
        v.push(Msg::Kvs(job.kvsname.clone()));
        if let Some(k) = &job.job_key {
            v.push(Msg::JobKey(k.clone()));
        }
        if job.slot_base != 0 {
            v.push(Msg::Base(job.slot_base));
        }
        if let Some(d) = &job.wdir {
            v.push(Msg::Wdir(d.clone().into_os_string()));
        }
        v.push(Msg::Start);
        v
    }
}

/// The job an agent would run from these spec messages (up to `Start`); for fuzzing.
pub fn build_spec(msgs: Vec<Msg>) -> Result<LocalJob, String> {
    let mut b = SpecBuilder::default();
    for m in msgs {
        if b.take(m)? {
            break;
        }
    }
    b.build()
}

/// Builds a [`LocalJob`] from spec messages.
#[derive(Default)]
struct SpecBuilder {
    program: Option<OsString>,
    argv0: Option<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    ranks: Vec<usize>,
    size: usize,
    kvs: String,
    job_key: Option<String>,
    slot_base: usize,
    wdir: Option<OsString>,
}

impl SpecBuilder {
    fn take(&mut self, m: Msg) -> Result<bool, String> {
        match m {
            Msg::Prog(p) => self.program = Some(p),
            Msg::Argv0(p) => self.argv0 = Some(p),
            Msg::Arg(a) => self.args.push(a),
            Msg::Env(k, v) => self.env.push((k, v)),
            Msg::Rank(r) => self.ranks.push(r),
            Msg::Size(n) => self.size = n,
            Msg::Kvs(k) => self.kvs = k,
            Msg::JobKey(k) => self.job_key = Some(k),
            Msg::Base(b) => self.slot_base = b,
            Msg::Wdir(d) => self.wdir = Some(d),
            Msg::Start => return Ok(true),
            other => return Err(format!("unexpected {other:?} before start")),
        }
        Ok(false)
    }

    fn build(self) -> Result<LocalJob, String> {
        let program = PathBuf::from(self.program.ok_or("no program in the job spec")?);
        Ok(LocalJob {
            argv0: self
                .argv0
                .unwrap_or_else(|| program.clone().into_os_string()),
            program,
            args: self.args,
            ranks: self.ranks,
            size: self.size,
            env: self.env,
            kvsname: self.kvs,
            job_key: self.job_key,
            slot_base: self.slot_base,
            wdir: self.wdir.map(PathBuf::from),
        })
    }
}

/// How long an agent tries to reach mpirun.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

struct AgentRank {
    rank: usize,
    child: Option<Child>,
    pid: i32,
    conn: Option<std::os::fd::OwnedFd>,
    lines: LineBuffer,
    out: Vec<u8>,
}

fn say(msg: &str) {
    let _ = writeln!(io::stderr(), "mpirun agent: {msg}");
}

/// `mpirun --agent ADDR:PORT ID` (the agent key on stdin): returns the exit status.
pub fn agent_main(args: &[OsString]) -> i32 {
    let [addr, id] = args else {
        say("usage: mpirun --agent ADDR:PORT ID  (the agent key on standard input)");
        return 2;
    };
    let (Some(addr), Some(id)) = (
        addr.to_str().and_then(|a| a.parse::<SocketAddr>().ok()),
        id.to_str().and_then(|i| i.parse::<usize>().ok()),
    ) else {
        say("bad --agent arguments");
        return 2;
    };
    let key = match read_key_line(0, STDIN_KEY_TIMEOUT) {
        Ok(k) => k,
        Err(e) => {
            say(&format!("no agent key on standard input: {e}"));
            return 2;
        }
    };
    match run_agent(addr, id, &key) {
        Ok(code) => code,
        Err(e) => {
            say(&e);
            1
        }
    }
}

/// How long the agent waits for its key on stdin.
const STDIN_KEY_TIMEOUT: Duration = Duration::from_secs(30);

/// Read one line, `32 hex digits\n`, from `fd` a byte at a time: what follows belongs to
/// rank 0, which inherits the descriptor (mpirun relays its own stdin behind the key).
fn read_key_line(fd: i32, timeout: Duration) -> Result<JobKey, String> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timed out".into());
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready =
            unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if ready <= 0 {
            continue; // timed out or interrupted: the deadline check decides
        }
        let mut b = 0u8;
        // SAFETY: reading at most one byte into `b`.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        match n {
            1 if b == b'\n' => break,
            1 if line.len() < 64 => line.push(b),
            1 => return Err("line too long".into()),
            0 => return Err("end of input".into()),
            _ => {
                let e = io::Error::last_os_error();
                if !matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) {
                    return Err(e.to_string());
                }
            }
        }
    }
    JobKey::from_hex(std::str::from_utf8(&line).unwrap_or(""))
        .map_err(|_| "expected 32 hex digits".into())
}

/// How a connection attempt to mpirun ended before the job spec was complete.
enum Attempt {
    /// mpirun (or whoever listens there) closed or broke the connection before proving
    /// itself: under a flood of half-open connections mpirun closes new ones, so try again.
    Retry(String),
    /// A definite failure (a bad proof, a protocol violation).
    Fatal(String),
}

/// Connect, authenticate both ways and read the job spec; retried while mpirun closes the
/// connection before its proof, until [`CONNECT_TIMEOUT`].
fn connect_for_spec(
    addr: SocketAddr,
    id: usize,
    key: &JobKey,
) -> Result<(TcpStream, LineBuffer, LocalJob), String> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match try_connect_for_spec(addr, id, key, deadline) {
            Ok(x) => return Ok(x),
            Err(Attempt::Fatal(e)) => return Err(e),
            Err(Attempt::Retry(e)) => {
                if Instant::now() >= deadline {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn try_connect_for_spec(
    addr: SocketAddr,
    id: usize,
    key: &JobKey,
    deadline: Instant,
) -> Result<(TcpStream, LineBuffer, LocalJob), Attempt> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let mut ctl = TcpStream::connect_timeout(&addr, left)
        .map_err(|e| Attempt::Retry(format!("cannot reach mpirun at {addr}: {e}")))?;
    let _ = ctl.set_nodelay(true);
    let mut lines = LineBuffer::new();
    let mut spec = SpecBuilder::default();
    let mut buf = vec![0u8; 64 * 1024];
    let fatal = |e: String| Attempt::Fatal(e);
    ctl.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| fatal(e.to_string()))?;
    // Challenge and answer both ways, then the job description, read blocking (mpirun
    // sends it at once after its proof).
    let nonce = auth::nonce().map_err(fatal)?;
    let mut challenge = None;
    let mut proven = false;
    loop {
        while let Some(line) = lines.next_line().map_err(|e| fatal(e.to_string()))? {
            let msg = Msg::decode(&line).map_err(fatal)?;
            match (msg, challenge, proven) {
                (Msg::Challenge(c), None, _) => {
                    challenge = Some(c);
                    let mac = hello_mac(key, id, &c, &nonce);
                    ctl.write_all(Msg::Hello { id, nonce, mac }.encode().as_bytes())
                        .map_err(|e| Attempt::Retry(format!("lost mpirun: {e}")))?;
                }
                (Msg::Proof(m), Some(c), false) => {
                    if !auth::verify(
                        &key.0,
                        PROOF_LABEL,
                        &[&(id as u64).to_le_bytes(), &nonce, &c],
                        &m,
                    ) {
                        return Err(fatal(format!(
                            "{addr} is not this job's mpirun (bad proof)"
                        )));
                    }
                    proven = true;
                }
                (m, _, true) => {
                    if spec.take(m).map_err(fatal)? {
                        let job = std::mem::take(&mut spec).build().map_err(fatal)?;
                        return Ok((ctl, lines, job));
                    }
                }
                (m, _, false) => {
                    return Err(fatal(format!(
                        "mpirun at {addr} sent {} before proving itself",
                        m.encode().split(' ').next().unwrap_or("?").trim()
                    )))
                }
            }
        }
        let lost = |e: String| {
            if proven {
                fatal(e)
            } else {
                Attempt::Retry(e)
            }
        };
        let n = ctl
            .read(&mut buf)
            .map_err(|e| lost(format!("lost mpirun: {e}")))?;
        if n == 0 {
            return Err(lost(
                "mpirun closed the connection before sending the job".into(),
            ));
        }
        lines.push(&buf[..n]);
    }
}

fn run_agent(addr: SocketAddr, id: usize, key: &JobKey) -> Result<i32, String> {
    let (ctl, mut lines, job) = connect_for_spec(addr, id, key)?;
    let mut buf = vec![0u8; 64 * 1024];
    ctl.set_read_timeout(None).map_err(|e| e.to_string())?;
    ctl.set_nonblocking(true).map_err(|e| e.to_string())?;
    let sigs = SignalPipe::install().map_err(|e| format!("signal setup: {e}"))?;

    let mut ranks: Vec<AgentRank> = Vec::new();
    let mut out: Vec<u8> = Vec::new(); // to mpirun
    start_ranks(&job, &mut ranks, &mut out);
    // A spec of spawned processes being received, and whether mpirun said the job ended.
    let mut more: Option<SpecBuilder> = None;
    let mut finished = false;
    let kill_all = |ranks: &[AgentRank], sig: i32| {
        for r in ranks.iter().filter(|r| r.child.is_some()) {
            // SAFETY: a pid we spawned and have not reaped yet.
            unsafe { libc::kill(r.pid, sig) };
        }
    };
    let mut ctl_open = true;
    let mut kill_at: Option<Instant> = None;
    loop {
        // Reap: report exits after reading what the rank still had in its PMI socket.
        for r in ranks.iter_mut() {
            let Some(status) = r.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) else {
                continue;
            };
            read_rank(r, &mut buf, &mut out);
            r.child = None;
            r.conn = None;
            out.extend_from_slice(
                Msg::Exit {
                    rank: r.rank,
                    code: status.code().unwrap_or(0),
                    signal: status.signal().unwrap_or(0),
                }
                .encode()
                .as_bytes(),
            );
        }
        let all_done = ranks.iter().all(|r| r.child.is_none());
        // Write to mpirun (blocking briefly is fine: mpirun always reads).
        if ctl_open && !out.is_empty() {
            match write_some(&ctl, &out) {
                Ok(n) => {
                    out.drain(..n);
                }
                Err(_) => ctl_open = false,
            }
        }
        // Spawned processes may still come until mpirun says the job has ended.
        if all_done && (!ctl_open || (finished && out.is_empty())) {
            return Ok(0);
        }
        if !ctl_open && kill_at.is_none() {
            // mpirun is gone: take the ranks down, no orphans.
            kill_all(&ranks, libc::SIGTERM);
            kill_at = Some(Instant::now() + local::GRACE);
        }
        if let Some(t) = kill_at {
            if Instant::now() >= t {
                kill_all(&ranks, libc::SIGKILL);
            }
        }
        for s in sigs.drain() {
            if s == libc::SIGUSR2 {
                // Forwarded to the ranks (PM's checkpoint request), not a reason to stop.
                kill_all(&ranks, s);
            } else if s != libc::SIGCHLD {
                // The agent itself is told to stop (ssh hang-up, Ctrl-C): stop the ranks.
                kill_all(&ranks, libc::SIGKILL);
                ctl_open = false;
            }
        }
        let mut pfds = vec![libc::pollfd {
            fd: sigs.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if ctl_open {
            pfds.push(libc::pollfd {
                fd: ctl.as_raw_fd(),
                events: libc::POLLIN | if out.is_empty() { 0 } else { libc::POLLOUT },
                revents: 0,
            });
        }
        let first_rank = pfds.len();
        let mut polled = Vec::new();
        for (i, r) in ranks.iter().enumerate() {
            if let Some(c) = &r.conn {
                pfds.push(libc::pollfd {
                    fd: c.as_raw_fd(),
                    events: libc::POLLIN | if r.out.is_empty() { 0 } else { libc::POLLOUT },
                    revents: 0,
                });
                polled.push(i);
            }
        }
        let timeout = if kill_at.is_some() { 100 } else { 1000 };
        // SAFETY: pfds is a valid array of pollfd of the length we pass.
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
        if ctl_open {
            // Lines from mpirun.
            loop {
                match (&ctl).read(&mut buf) {
                    Ok(0) => {
                        ctl_open = false;
                        break;
                    }
                    Ok(n) => lines.push(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        ctl_open = false;
                        break;
                    }
                }
            }
            loop {
                let line = match lines.next_line() {
                    Ok(Some(l)) => l,
                    Ok(None) => break,
                    Err(_) => {
                        ctl_open = false;
                        break;
                    }
                };
                match Msg::decode(&line) {
                    Ok(Msg::Pmi(rank, l)) => {
                        if let Some(r) = ranks.iter_mut().find(|r| r.rank == rank) {
                            if r.conn.is_some() {
                                r.out.extend_from_slice(l.as_bytes());
                            }
                        }
                    }
                    Ok(Msg::Signal(s)) => {
                        kill_all(&ranks, s);
                        if s == libc::SIGTERM && kill_at.is_none() {
                            kill_at = Some(Instant::now() + local::GRACE);
                        }
                    }
                    Ok(Msg::Finish) => finished = true,
                    // A spec of processes MPI_Comm_spawn asked for, ended by Start.
                    Ok(
                        m @ (Msg::Prog(_)
                        | Msg::Argv0(_)
                        | Msg::Arg(_)
                        | Msg::Env(..)
                        | Msg::Rank(_)
                        | Msg::Size(_)
                        | Msg::Kvs(_)
                        | Msg::JobKey(_)
                        | Msg::Base(_)
                        | Msg::Wdir(_)
                        | Msg::Start),
                    ) => {
                        let b = more.get_or_insert_with(SpecBuilder::default);
                        match b.take(m) {
                            Ok(false) => {}
                            Ok(true) => match more.take().expect("spec").build() {
                                Ok(job) if kill_at.is_none() => {
                                    start_ranks(&job, &mut ranks, &mut out)
                                }
                                Ok(_) => {}
                                Err(e) => out.extend_from_slice(Msg::Failed(e).encode().as_bytes()),
                            },
                            Err(_) => {
                                ctl_open = false;
                                break;
                            }
                        }
                    }
                    _ => {
                        ctl_open = false;
                        break;
                    }
                }
            }
        }
        for (p, &i) in pfds[first_rank..].iter().zip(&polled) {
            if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                read_rank(&mut ranks[i], &mut buf, &mut out);
            }
        }
        for r in ranks.iter_mut() {
            if let (Some(c), false) = (&r.conn, r.out.is_empty()) {
                // SAFETY: writing from a live buffer of the stated length to our socket.
                let n = unsafe { libc::write(c.as_raw_fd(), r.out.as_ptr().cast(), r.out.len()) };
                if n > 0 {
                    r.out.drain(..n as usize);
                } else if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                    r.out.clear();
                }
            }
        }
    }
}

/// Start `job`'s ranks (known to mpirun by their slots); a rank that cannot start is
/// reported to mpirun, which ends the job.
fn start_ranks(job: &LocalJob, ranks: &mut Vec<AgentRank>, out: &mut Vec<u8>) {
    for &rank in &job.ranks {
        match local::spawn_rank(job, rank) {
            Ok((child, conn)) => ranks.push(AgentRank {
                rank: job.slot_base + rank,
                pid: child.id() as i32,
                child: Some(child),
                conn: Some(conn),
                lines: LineBuffer::new(),
                out: Vec::new(),
            }),
            Err(e) => {
                out.extend_from_slice(
                    Msg::Failed(format!(
                        "cannot start rank {rank} ({}): {e}",
                        job.program.display()
                    ))
                    .encode()
                    .as_bytes(),
                );
                break;
            }
        }
    }
}

fn write_some(mut ctl: &TcpStream, out: &[u8]) -> io::Result<usize> {
    match ctl.write(out) {
        Ok(n) => Ok(n),
        Err(e)
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted =>
        {
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

/// Relay complete PMI lines of one rank to mpirun.
fn read_rank(r: &mut AgentRank, buf: &mut [u8], out: &mut Vec<u8>) {
    while let Some(c) = &r.conn {
        // SAFETY: reading into a buffer of the stated length from a descriptor we own.
        let n = unsafe { libc::read(c.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            r.lines.push(&buf[..n as usize]);
            while let Ok(Some(line)) = r.lines.next_line() {
                // The server wants the line without its newline, as LineBuffer gives it.
                out.extend_from_slice(Msg::Pmi(r.rank, line).encode().as_bytes());
            }
            continue;
        }
        if n < 0 {
            match io::Error::last_os_error().kind() {
                io::ErrorKind::WouldBlock => return,
                io::ErrorKind::Interrupted => continue,
                _ => {}
            }
        }
        r.conn = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let msgs = vec![
            Msg::Challenge([7; NONCE_BYTES]),
            Msg::Hello {
                id: 3,
                nonce: [1; NONCE_BYTES],
                mac: [0xfe; MAC_BYTES],
            },
            Msg::Proof([9; MAC_BYTES]),
            Msg::JobKey("00ff".into()),
            Msg::Prog("/bin/prog with space".into()),
            Msg::Argv0("p".into()),
            Msg::Arg("".into()),
            Msg::Arg("a\nb c".into()),
            Msg::Env("K".into(), "v=1 2".into()),
            Msg::Rank(7),
            Msg::Size(8),
            Msg::Kvs("kvs_1".into()),
            Msg::Base(5),
            Msg::Wdir("/tmp/a b".into()),
            Msg::Start,
            Msg::Finish,
            Msg::Pmi(2, "cmd=put key=a value=b c\n".into()),
            Msg::Signal(15),
            Msg::Exit {
                rank: 1,
                code: 0,
                signal: 9,
            },
            Msg::Failed("no such file".into()),
        ];
        for m in msgs {
            let line = m.encode();
            assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
            assert_eq!(Msg::decode(line.trim_end_matches('\n')), Ok(m));
        }
        assert!(Msg::decode("pmi x 00").is_err());
        assert!(Msg::decode("pmi 1 0").is_err());
        assert!(Msg::decode("bogus").is_err());
        assert!(
            Msg::decode("hello 3 00ff").is_err(),
            "the old key-in-clear hello"
        );
        assert!(Msg::decode("challenge 0102").is_err());
    }

    /// Each side's answer checks out only with the key, the agent id and both nonces of
    /// this very connection; mpirun's proof is not an agent's hello (labels differ).
    #[test]
    fn challenge_response_binds_key_id_and_nonces() {
        let k = JobKey::random();
        let (cm, ca) = (auth::nonce().unwrap(), auth::nonce().unwrap());
        let mac = hello_mac(&k, 2, &cm, &ca);
        assert!(check_hello(&k, &cm, 2, &ca, &mac));
        assert!(!check_hello(&JobKey::random(), &cm, 2, &ca, &mac));
        assert!(!check_hello(&k, &cm, 1, &ca, &mac));
        assert!(!check_hello(&k, &ca, 2, &cm, &mac));
        assert!(!check_hello(&k, &auth::nonce().unwrap(), 2, &ca, &mac));
        let proof = proof_mac(&k, 2, &cm, &ca);
        assert!(!check_hello(&k, &cm, 2, &ca, &proof));
        assert_ne!(proof, mac);
    }

    #[test]
    fn key_line_is_read_without_consuming_what_follows() {
        let k = JobKey::random();
        let (r, w) = std::io::pipe().unwrap();
        let mut w = w;
        w.write_all(format!("{}\nuser input\n", k.to_hex()).as_bytes())
            .unwrap();
        drop(w);
        let fd = r.as_raw_fd();
        assert_eq!(read_key_line(fd, Duration::from_secs(5)), Ok(k));
        let mut rest = String::new();
        let mut r = r;
        r.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "user input\n");
        let (r, mut w) = std::io::pipe().unwrap();
        w.write_all(b"not a key\n").unwrap();
        assert!(read_key_line(r.as_raw_fd(), Duration::from_secs(5)).is_err());
        drop(w);
        let (r, _w) = std::io::pipe().unwrap();
        assert!(read_key_line(r.as_raw_fd(), Duration::from_millis(100)).is_err());
    }

    #[test]
    fn spec_round_trip() {
        let job = LocalJob {
            program: "/bin/true".into(),
            argv0: "true".into(),
            args: vec!["-x".into(), "".into()],
            ranks: vec![2, 3],
            size: 4,
            env: vec![("A".into(), "1".into())],
            kvsname: "k".into(),
            job_key: Some("ab".repeat(16)),
            slot_base: 9,
            wdir: Some("/tmp".into()),
        };
        let mut b = SpecBuilder::default();
        let mut started = false;
        for m in Msg::job_spec(&job) {
            let m = Msg::decode(m.encode().trim_end()).unwrap();
            started = b.take(m).unwrap();
        }
        assert!(started);
        let j = b.build().unwrap();
        assert_eq!(
            (j.slot_base, j.wdir.as_deref()),
            (9, Some(std::path::Path::new("/tmp")))
        );
        assert_eq!(
            (j.program, j.argv0, j.args, j.ranks, j.size, j.env, j.kvsname, j.job_key),
            (
                job.program,
                job.argv0,
                job.args,
                job.ranks,
                job.size,
                job.env,
                job.kvsname,
                job.job_key
            )
        );
    }
}
