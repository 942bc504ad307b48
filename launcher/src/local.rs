//! Running a job's ranks on this host: spawn them with their PMI sockets, serve PMI, watch
//! them exit, and take the whole job down when one fails.
//!
//! Everything happens in one thread around one poll(2): the signal pipe (SIGCHLD, SIGINT,
//! SIGTERM, SIGHUP) and every rank's PMI socket. Nothing spins: with more ranks than cores
//! the launcher must not compete with them for the CPU.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tsunagi_core::pmi::wire::LineBuffer;

use crate::agent::Msg;
use crate::server::{printable, Event, PmiServer, MESSAGE_MAX};
use crate::signals::{self, SignalPipe};

mod spawned;

/// How long ranks get to exit after SIGTERM (or a forwarded signal) before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(1);
/// How long an abort that blames a failed peer ("peer rank N failed: ...") waits for that
/// peer's own exit, which is the first cause and what mpirun reports. Across hosts the
/// survivor's abort often arrives first: its TCP link broke at once, while the dead rank's
/// exit travels through its agent.
pub const BLAME_WAIT: Duration = Duration::from_secs(2);

/// The rank an abort message blames: `N` of "peer rank N failed" (the text of
/// `P2pError::PeerFailed`, which the MPI library passes to PMI abort when a peer's
/// connection broke).
pub fn blamed_peer(message: &str) -> Option<usize> {
    let rest = &message[message.find("peer rank ")? + "peer rank ".len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || !rest[digits..].starts_with(" failed") {
        return None;
    }
    rest[..digits].parse().ok()
}

/// How the library's fatal error handlers (MPI_ERRORS_ARE_FATAL, MPI_ERRORS_ABORT) start
/// their abort message ("fatal error in MPI_Send: ..."), so that the job's last line says
/// that an error, not the program's own MPI_Abort, ended it.
pub const FATAL_PREFIX: &str = "fatal error in ";

/// What to run on this host.
#[derive(Clone, Debug)]
pub struct LocalJob {
    /// The resolved path of the program.
    pub program: PathBuf,
    /// `argv[0]` as the user typed it.
    pub argv0: OsString,
    pub args: Vec<OsString>,
    /// Ranks on this host, as global rank numbers (all of them, for now: one host).
    pub ranks: Vec<usize>,
    /// The job's size.
    pub size: usize,
    /// Extra environment for the ranks, applied in order after the PMI variables.
    pub env: Vec<(OsString, OsString)>,
    pub kvsname: String,
    /// The job key (hex) for the ranks' TCP connections, handed over in a sealed memfd
    /// named by `TSUNAGI_JOB_KEY_FD`, so it is in no command line or environment.
    pub job_key: Option<String>,
    /// The PMI server's slot of rank 0 (0 for the job mpirun started; spawned groups
    /// follow it, see [`PmiServer::add_group`]).
    pub slot_base: usize,
    /// The ranks' working directory (MPI_Comm_spawn's `wdir` info); None: mpirun's.
    pub wdir: Option<PathBuf>,
}

/// The end of a job: mpirun's exit status and, for a failed job, the one line to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub exit_code: i32,
    pub message: Option<String>,
}

struct Rank {
    rank: usize,
    child: Option<Child>,
    pid: i32,
    /// Our end of the rank's PMI socket (non-blocking); None once closed.
    conn: Option<OwnedFd>,
    lines: LineBuffer,
    /// Replies not yet written (the rank may be slow to read).
    out: Vec<u8>,
    exited: bool,
}

impl Rank {
    /// A rank just started on this host, with our end of its PMI socket.
    fn started(rank: usize, child: Child, conn: OwnedFd) -> Rank {
        Rank {
            rank,
            pid: child.id() as i32,
            child: Some(child),
            conn: Some(conn),
            lines: LineBuffer::new(),
            out: Vec::new(),
            exited: false,
        }
    }
}

struct Runner {
    server: PmiServer,
    ranks: Vec<Rank>,
    /// Agents on other hosts and the listener they connect back to (multi-host jobs).
    remote: Option<RemoteState>,
    /// The first failure: the line to print and the exit code. Later ones are consequences.
    failure: Option<Outcome>,
    /// When survivors of a failure get SIGKILL.
    kill_at: Option<Instant>,
    /// An abort that blames a failed peer, held back until that peer's exit is known or
    /// [`BLAME_WAIT`] passed (then it is the failure after all).
    held: Option<Held>,
    /// The first rank that exited with status 0 without ever calling MPI_Init (PMI
    /// `init`), with where it ran: fatal once any rank waits in MPI_Init.
    early_exit: Option<(usize, String)>,
    /// What spawned processes inherit from the job (its environment, key, kvsname).
    template: LocalJob,
    /// Names this job published (service, port): unpublished when mpirun ends.
    published: Vec<(String, String)>,
}

struct Held {
    outcome: Outcome,
    /// The rank it blames.
    peer: usize,
    until: Instant,
    /// Ranks that aborted meanwhile: their own exits are consequences too.
    aborted: Vec<usize>,
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the array we pass. Both are
    // close-on-exec; the child clears the flag on its own end only (see spawn_rank).
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors from a successful socketpair, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl flag query and update on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The ranks' LD_LIBRARY_PATH when mpirun is installed beside Tsunagi's library
/// (`PREFIX/bin/mpirun`, `PREFIX/lib/libmpi.so.12`): the user's path, then that directory,
/// so that programs linked without an rpath (cargo builds through rsmpi, plain `cc -lmpi`)
/// find the library, as they would one that ldconfig knows. None when there is no such
/// library (a build tree), leaving the environment as it is.
fn library_path_for_ranks() -> Option<OsString> {
    let exe = std::env::current_exe().ok()?;
    let lib = exe.parent()?.parent()?.join("lib");
    if !lib.join("libmpi.so.12").exists() {
        return None;
    }
    let mut path = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    if !path.is_empty() {
        path.push(":");
    }
    path.push(lib.as_os_str());
    Some(path)
}

/// Start one rank with the client end of a fresh socketpair as its PMI_FD.
pub(crate) fn spawn_rank(job: &LocalJob, rank: usize) -> io::Result<(Child, OwnedFd)> {
    let (server_end, client_end) = socketpair()?;
    set_nonblocking(server_end.as_raw_fd())?;
    let client_fd = client_end.as_raw_fd();
    let key_fd = match &job.job_key {
        Some(k) => {
            let key = tsunagi_tcp::JobKey::from_hex(k)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            Some(tsunagi_tcp::config::key_memfd(&key)?)
        }
        None => None,
    };
    let key_raw = key_fd.as_ref().map_or(-1, |f| f.as_raw_fd());

    let mut cmd = Command::new(&job.program);
    cmd.arg0(&job.argv0).args(&job.args);
    if let Some(d) = &job.wdir {
        cmd.current_dir(d);
    }
    // A launcher's variables inherited from our own environment (mpirun started under
    // Hydra or Slurm) would point the ranks at the wrong server.
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("PMI_")) {
            cmd.env_remove(k);
        }
    }
    cmd.env("PMI_FD", client_fd.to_string())
        .env("PMI_RANK", rank.to_string())
        .env("PMI_SIZE", job.size.to_string())
        .env("PMI_JOBID", &job.kvsname)
        .env("TSUNAGI_JOBID", &job.kvsname);
    // MPI_Comm_spawn starts the children with the mpirun that started their parents.
    if let Ok(me) = std::env::current_exe() {
        cmd.env("TSUNAGI_MPIRUN", me);
    }
    if let Some(path) = library_path_for_ranks() {
        cmd.env("LD_LIBRARY_PATH", path);
    }
    for (k, v) in &job.env {
        cmd.env(k, v);
    }
    if key_raw >= 0 {
        // A key in mpirun's own environment must not reach the ranks either.
        cmd.env_remove("TSUNAGI_JOB_KEY")
            .env("TSUNAGI_JOB_KEY_FD", key_raw.to_string());
    }
    // Only rank 0 reads the user's stdin (as with every mpirun; spawned ranks never do);
    // output is inherited so it reaches the user byte for byte with no copying through us.
    cmd.stdin(if rank + job.slot_base == 0 {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());

    // SAFETY: getpid is always safe.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe calls (sigaction via signal, prctl, getppid, fcntl); it allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            // exec resets caught signals anyway; resetting now closes the window in which
            // our handler could run in the child and write to the parent's signal pipe.
            for &sig in &signals::CAUGHT {
                libc::signal(sig, libc::SIG_DFL);
            }
            // A forwarded SIGUSR2 (PM's checkpoint request) must not kill a rank that has
            // not installed its handler yet: ignored until then (the disposition survives
            // exec; a handler installed later replaces it).
            libc::signal(libc::SIGUSR2, libc::SIG_IGN);
            // Die with mpirun, however it dies: no orphaned ranks.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // mpirun may have died before prctl took effect. (A raw OS error, because
            // building a message would allocate, which is not safe after fork.)
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Keep this rank's PMI socket open across exec (all other PMI fds stay
            // close-on-exec, so each rank holds exactly its own).
            if libc::fcntl(client_fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The same for its job key's memfd.
            if key_raw >= 0 && libc::fcntl(key_raw, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(client_end);
    drop(key_fd);
    Ok((child, server_end))
}

/// Run `job` to the end. Returns how it ended; prints nothing itself.
pub fn run(job: &LocalJob, sigs: &SignalPipe) -> Outcome {
    let mapping = format!("(vector,(0,1,{}))", job.size);
    run_with(job, &mapping, None, sigs)
}

/// Run a job whose ranks are `job.ranks` here and `remote`'s on other hosts, with the given
/// `PMI_process_mapping`.
pub fn run_with(
    job: &LocalJob,
    mapping: &str,
    remote: Option<Remote>,
    sigs: &SignalPipe,
) -> Outcome {
    let mut r = Runner {
        server: PmiServer::new(&job.kvsname, job.size, mapping),
        ranks: Vec::with_capacity(job.ranks.len()),
        remote: None,
        failure: None,
        kill_at: None,
        held: None,
        early_exit: None,
        template: job.clone(),
        published: Vec::new(),
    };
    if let Some(rem) = remote {
        r.start_agents(rem);
    }
    for &rank in &job.ranks {
        // A signal during start-up: start no more ranks.
        if r.failure.is_some() {
            break;
        }
        for sig in sigs.drain() {
            r.on_signal(sig);
        }
        match spawn_rank(job, rank) {
            Ok((child, conn)) => r
                .ranks
                .push(Rank::started(job.slot_base + rank, child, conn)),
            Err(e) => {
                r.fail(
                    format!(
                        "cannot start rank {rank} ({}): {e}; job aborted",
                        job.program.display()
                    ),
                    if e.kind() == io::ErrorKind::NotFound {
                        127
                    } else {
                        126
                    },
                    libc::SIGTERM,
                );
                break;
            }
        }
    }
    r.event_loop(sigs);
    r.clean_up_after_spawns();
    r.failure.unwrap_or(Outcome {
        exit_code: 0,
        message: None,
    })
}

impl Runner {
    /// Record the first failure and start taking the job down: `sig` to every live rank
    /// now, SIGKILL after [`GRACE`].
    fn fail(&mut self, message: String, exit_code: i32, sig: libc::c_int) {
        if self.failure.is_some() {
            return;
        }
        self.held = None;
        self.failure = Some(Outcome {
            exit_code,
            message: Some(message),
        });
        self.signal_all(sig);
        self.kill_at = Some(Instant::now() + GRACE);
    }

    fn signal_all(&mut self, sig: libc::c_int) {
        for rk in self.ranks.iter().filter(|rk| !rk.exited) {
            // SAFETY: kill on a pid we spawned and have not reaped, so it cannot have
            // been reused by another process.
            unsafe { libc::kill(rk.pid, sig) };
        }
        self.signal_agents(sig);
    }

    fn on_signal(&mut self, sig: libc::c_int) {
        match sig {
            libc::SIGINT | libc::SIGTERM | libc::SIGHUP => {
                if self.failure.is_some() {
                    // Asked twice: stop waiting.
                    self.signal_all(libc::SIGKILL);
                    self.kill_at = None;
                } else {
                    self.fail(
                        format!("interrupted by {}; job aborted", signals::name(sig)),
                        128 + sig,
                        sig,
                    );
                }
            }
            // Forwarded to every rank, here and on the other hosts (PM's checkpoint).
            libc::SIGUSR2 => self.signal_all(sig),
            _ => {} // SIGCHLD: reaping happens on every turn of the loop.
        }
    }

    fn event_loop(&mut self, sigs: &SignalPipe) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // Signals first: after a Ctrl-C the ranks die of the same SIGINT, and the job
            // should be reported as interrupted, not as a rank killed by a signal.
            for sig in sigs.drain() {
                self.on_signal(sig);
            }
            self.reap(&mut buf);
            self.reap_agents();
            self.check_early_exit();
            if let Some(h) = self.held.take_if(|h| Instant::now() >= h.until) {
                let Outcome { exit_code, message } = h.outcome;
                self.fail(message.unwrap_or_default(), exit_code, libc::SIGTERM);
            }
            if self.ranks.iter().all(|rk| rk.exited) && self.agents_done() {
                self.kill_agents();
                return;
            }
            self.finish_agents_when_all_ended();
            if let Some(t) = self.kill_at {
                if Instant::now() >= t {
                    self.signal_all(libc::SIGKILL);
                    self.kill_at = None;
                }
            }
            let mut pfds = vec![libc::pollfd {
                fd: sigs.fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let mut polled = Vec::new();
            for (i, rk) in self.ranks.iter().enumerate() {
                if let Some(conn) = &rk.conn {
                    let mut events = libc::POLLIN;
                    if !rk.out.is_empty() {
                        events |= libc::POLLOUT;
                    }
                    pfds.push(libc::pollfd {
                        fd: conn.as_raw_fd(),
                        events,
                        revents: 0,
                    });
                    polled.push(i);
                }
            }
            let remote_from = pfds.len();
            let remote_polled = self.remote_pollfds(&mut pfds);
            let timeout = match self.kill_at.or(self.held.as_ref().map(|h| h.until)) {
                Some(t) => {
                    t.saturating_duration_since(Instant::now())
                        .as_millis()
                        .min(i32::MAX as u128) as i32
                        + 1
                }
                None => -1,
            };
            // Agents are watched for connect deadlines and launch processes by the clock.
            let timeout = if self.remote.is_some() && !(0..=200).contains(&timeout) {
                200
            } else {
                timeout
            };
            // SAFETY: pfds is a valid array of pollfd of the length we pass.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // poll cannot fail here short of a bug; do not spin on it.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            if pfds[0].revents != 0 {
                for sig in sigs.drain() {
                    self.on_signal(sig);
                }
            }
            for (p, &i) in pfds[1..remote_from].iter().zip(&polled) {
                if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                    self.read_rank(i, &mut buf);
                }
            }
            self.service_remote(&pfds[remote_from..], &remote_polled, &mut buf);
            self.flush_all();
            self.flush_agents();
        }
    }

    /// Read what rank `i` sent and act on each complete line.
    fn read_rank(&mut self, i: usize, buf: &mut [u8]) {
        loop {
            let Some(conn) = &self.ranks[i].conn else {
                return;
            };
            // SAFETY: reading into a buffer of the stated length from a descriptor we own.
            let n = unsafe { libc::read(conn.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                self.ranks[i].lines.push(&buf[..n as usize]);
                self.handle_lines(i);
                continue;
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return,
                    io::ErrorKind::Interrupted => continue,
                    _ => {}
                }
            }
            // End of file or a broken socket: the rank is gone or done with PMI.
            self.ranks[i].conn = None;
            self.ranks[i].out.clear();
            return;
        }
    }

    fn handle_lines(&mut self, i: usize) {
        let mut replies = Vec::new();
        loop {
            let rank = self.ranks[i].rank;
            let event = match self.ranks[i].lines.next_line() {
                Ok(Some(line)) => self.server.handle_line(rank, &line, &mut replies),
                Ok(None) => break,
                Err(e) => Some(Event::ProtocolError {
                    rank,
                    detail: e.to_string(),
                }),
            };
            let pid = self.ranks[i].pid;
            if self.on_event(event, &format!("pid {pid}")) {
                self.ranks[i].conn = None;
                break;
            }
        }
        self.route_replies(replies);
    }

    /// Act on a PMI server event of a rank (`who` says where it runs, for messages).
    /// Returns true when the rank's PMI connection must be dropped.
    fn on_event(&mut self, event: Option<Event>, who: &str) -> bool {
        {
            match event {
                Some(Event::Abort {
                    rank,
                    code,
                    message,
                }) => {
                    // The blamed rank is one of the aborting rank's own world, or (numbered
                    // past it) a process of another world it connected to, such as a
                    // spawned child: then no slot is known, and the first other failure
                    // within BLAME_WAIT is the first cause.
                    let blamed = message
                        .as_deref()
                        .and_then(blamed_peer)
                        .map(|p| self.server.peer_slot(rank, p).unwrap_or(usize::MAX));
                    let name = self.server.describe(rank);
                    let msg = match message {
                        // The library's default error handler, not the program, ended the job.
                        Some(m) if m.starts_with(FATAL_PREFIX) => format!(
                            "{name}: {} (exit code {code}); job aborted",
                            printable(&m, MESSAGE_MAX)
                        ),
                        Some(m) => format!(
                            "{name} called MPI_Abort with error code {code}: {}; job aborted",
                            printable(&m, MESSAGE_MAX)
                        ),
                        None => {
                            format!("{name} called MPI_Abort with error code {code}; job aborted")
                        }
                    };
                    // An exit status is 8 bits, and an aborted job must not look successful.
                    let status = match code & 0xff {
                        0 => 1,
                        c => c,
                    };
                    if let Some(h) = self.held.as_mut() {
                        // Another survivor of the same failure.
                        h.aborted.push(rank);
                    } else if let (Some(peer), None) = (blamed, &self.failure) {
                        if peer != rank {
                            self.held = Some(Held {
                                outcome: Outcome {
                                    exit_code: status,
                                    message: Some(msg),
                                },
                                peer,
                                until: Instant::now() + BLAME_WAIT,
                                aborted: vec![rank],
                            });
                            return false;
                        }
                        self.fail(msg, status, libc::SIGTERM);
                    } else {
                        self.fail(msg, status, libc::SIGTERM);
                    }
                }
                Some(Event::Spawn { rank, request }) => {
                    let r = self.spawn_group(&request);
                    self.route_replies(vec![(rank, crate::server::spawn_result(r))]);
                }
                Some(Event::Name { rank, op }) => {
                    let reply = self.name_service(op);
                    self.route_replies(vec![(rank, reply.to_line())]);
                }
                Some(Event::ProtocolError { rank, detail }) => {
                    self.fail(
                        format!(
                            "{} ({who}) broke the PMI protocol ({}); job aborted",
                            self.server.describe(rank),
                            printable(&detail, MESSAGE_MAX)
                        ),
                        1,
                        libc::SIGTERM,
                    );
                    return true;
                }
                None => {}
            }
        }
        false
    }

    /// Send PMI replies to local ranks' sockets or through their host's agent.
    fn route_replies(&mut self, replies: Vec<(usize, String)>) {
        for (rank, line) in replies {
            if let Some(rk) = self.ranks.iter_mut().find(|rk| rk.rank == rank) {
                if rk.conn.is_some() {
                    rk.out.extend_from_slice(line.as_bytes());
                }
            } else {
                self.send_to_agent_of(rank, &line);
            }
        }
    }

    fn flush_all(&mut self) {
        for rk in &mut self.ranks {
            while !rk.out.is_empty() {
                let Some(conn) = &rk.conn else {
                    rk.out.clear();
                    break;
                };
                // SAFETY: writing from a live buffer of the stated length to our descriptor.
                let n =
                    unsafe { libc::write(conn.as_raw_fd(), rk.out.as_ptr().cast(), rk.out.len()) };
                if n > 0 {
                    rk.out.drain(..n as usize);
                    continue;
                }
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        // EPIPE and friends (SIGPIPE is ignored in Rust programs): the rank
                        // closed its end; its exit will be noticed by reaping.
                        rk.conn = None;
                        rk.out.clear();
                    }
                }
            }
        }
    }

    /// Collect every rank that has exited and judge how it ended.
    fn reap(&mut self, buf: &mut [u8]) {
        for i in 0..self.ranks.len() {
            if self.ranks[i].exited {
                continue;
            }
            let status = match self.ranks[i].child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => status,
                Some(Ok(None)) => continue,
                // ECHILD cannot happen for our own child; treat it as gone.
                Some(Err(_)) | None => ExitStatus::from_raw(0),
            };
            // The rank is dead, so everything it wrote (an abort, a finalize) is already in
            // the socket: read it before judging the exit.
            self.read_rank(i, buf);
            self.flush_all();
            let rk = &mut self.ranks[i];
            rk.exited = true;
            rk.child = None;
            rk.conn = None;
            let (rank, pid) = (rk.rank, rk.pid);
            self.judge_exit(rank, &format!("pid {pid}"), status.code(), status.signal());
        }
    }

    /// A rank that exited before MPI_Init while others wait in MPI_Init (whose PMI
    /// barrier needs every rank) would leave them waiting forever: end the job. A job in
    /// which no rank ever calls MPI_Init (`mpirun -n 4 hostname`) is not affected.
    fn check_early_exit(&mut self) {
        let Some((rank, who)) = &self.early_exit else {
            return;
        };
        if self.failure.is_some() || self.held.is_some() {
            return;
        }
        // Only its own world waits for it in MPI_Init.
        if let Some(waiting) = self
            .server
            .group_slots(*rank)
            .find(|&r| self.server.initialized(r))
        {
            let msg = format!(
                "{} ({who}) exited with code 0 before calling MPI_Init, while {} (and any \
                 others) wait for it in MPI_Init; job aborted",
                self.server.describe(*rank),
                self.server.describe(waiting)
            );
            self.fail(msg, 1, libc::SIGTERM);
        }
    }

    /// Decide what a rank's exit means for the job (`who`: where it ran, for messages).
    fn judge_exit(&mut self, rank: usize, who: &str, code: Option<i32>, signal: Option<i32>) {
        let name = self.server.describe(rank);
        if let Some(h) = &self.held {
            // While an abort that blames a peer waits for that peer's exit, the aborting
            // ranks' own exits are consequences; the peer's exit (or any other rank's
            // failure) is the first cause and replaces the held abort.
            if h.aborted.contains(&rank) && rank != h.peer {
                return;
            }
            if rank == h.peer && signal.is_none() && code == Some(0) && self.server.finalized(rank)
            {
                // It exited cleanly: the blame stands.
                let h = self.held.take().expect("held");
                let Outcome { exit_code, message } = h.outcome;
                self.fail(message.unwrap_or_default(), exit_code, libc::SIGTERM);
                return;
            }
        }
        {
            if let Some(sig) = signal {
                self.fail(
                    format!(
                        "{name} ({who}) killed by signal {sig} ({}); job aborted",
                        signals::name(sig)
                    ),
                    128 + sig,
                    libc::SIGTERM,
                );
            } else {
                let code = code.unwrap_or(1);
                if code != 0 {
                    self.fail(
                        format!("{name} ({who}) exited with code {code}; job aborted"),
                        code,
                        libc::SIGTERM,
                    );
                } else if self.server.initialized(rank) && !self.server.finalized(rank) {
                    self.fail(
                        format!("{name} ({who}) exited without calling MPI_Finalize; job aborted"),
                        1,
                        libc::SIGTERM,
                    );
                } else if !self.server.initialized(rank) && self.server.group_rank(rank).0 > 0 {
                    // Its parents wait for it in MPI_Comm_spawn until it connects back,
                    // which happens in MPI_Init.
                    self.fail(
                        format!(
                            "{name} ({who}) exited with code 0 without calling MPI_Init, while \
                             the processes that spawned it wait for it; job aborted"
                        ),
                        1,
                        libc::SIGTERM,
                    );
                } else if !self.server.initialized(rank) && self.early_exit.is_none() {
                    self.early_exit = Some((rank, who.to_string()));
                    self.check_early_exit();
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Ranks on other hosts, through agents
// ---------------------------------------------------------------------------------------

/// How long an agent may take to connect back after its launch command started.
pub const AGENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// After SIGKILL was requested from the agents, how long they get before their launch
/// commands are killed outright.
const AGENT_GRACE: Duration = Duration::from_secs(2);
/// How long a connection to the agent port may take to answer the challenge; an agent
/// answers within a round trip.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);
/// Connections that have not answered the challenge yet, at most: past this the oldest is
/// closed, so a flood of half-open connections costs a bounded number of descriptors.
pub const FRESH_MAX: usize = 32;
/// A connection younger than this is not closed to make room for a new one.
const EVICT_AFTER: Duration = Duration::from_millis(200);
/// After accept failed for want of descriptors, how long the listener is left alone
/// (instead of poll reporting it readable again at once, a busy loop).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// One host's agent to start.
#[derive(Clone, Debug)]
pub struct AgentPlan {
    pub host: String,
    /// Global ranks the agent starts.
    pub ranks: Vec<usize>,
    /// The launch command's argv, the agent's own command line included.
    pub argv: Vec<OsString>,
    /// The launch command gets mpirun's stdin (its host runs rank 0).
    pub stdin: bool,
}

/// The remote part of a job.
pub struct Remote {
    pub agents: Vec<AgentPlan>,
    /// Where agents connect back (already listening).
    pub listener: std::net::TcpListener,
    /// The agent key: agents prove they know it (challenge-response) and get it on stdin.
    pub key: tsunagi_tcp::JobKey,
    /// The job description sent to the agents (their ranks are filled in per agent).
    pub spec: LocalJob,
}

struct Agent {
    plan: AgentPlan,
    child: Option<Child>,
    pid: i32,
    conn: Option<std::net::TcpStream>,
    lines: LineBuffer,
    out: Vec<u8>,
    /// Ranks whose exit was not reported yet.
    left: usize,
    started: Instant,
    /// Gave up on it (connection lost, did not connect): its ranks count as gone.
    lost: bool,
}

/// An accepted connection that has not answered its challenge yet.
struct Fresh {
    sock: std::net::TcpStream,
    lines: LineBuffer,
    challenge: [u8; tsunagi_tcp::auth::NONCE_BYTES],
    since: Instant,
}

pub(crate) struct RemoteState {
    agents: Vec<Agent>,
    listener: std::net::TcpListener,
    key: tsunagi_tcp::JobKey,
    spec: LocalJob,
    /// Accepted connections that have not said hello yet (at most [`FRESH_MAX`]).
    fresh: Vec<Fresh>,
    /// The listener is not polled until then (accept ran out of descriptors).
    accept_paused: Option<Instant>,
    /// Connections refused or dropped unanswered; only the first is reported.
    refused: usize,
    /// When the launch commands of agents still running get SIGKILL.
    hard_kill_at: Option<Instant>,
    /// The agents were told that every process has ended.
    finished: bool,
}

/// What a pollfd past the local ranks' belongs to.
#[derive(Clone, Copy)]
enum Polled {
    Listener,
    Fresh(usize),
    Agent(usize),
}

/// Start an agent's launch command. The agent key goes to its stdin as the first line;
/// for the host of rank 0, mpirun's own stdin follows (copied by a thread), so rank 0 still
/// reads the user's input.
fn spawn_launch(plan: &AgentPlan, key: &tsunagi_tcp::JobKey) -> io::Result<Child> {
    let mut cmd = Command::new(&plan.argv[0]);
    cmd.args(&plan.argv[1..]);
    cmd.stdin(Stdio::piped());
    // The agent's (and so its ranks') output reaches the user through the launch command.
    cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe calls (signal, prctl); it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            for &sig in &signals::CAUGHT {
                libc::signal(sig, libc::SIG_DFL);
            }
            // The launch command dies with mpirun; the agent then loses its connection
            // and takes its ranks down.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    // 33 bytes into an empty pipe: never blocks. A launch command that already exited
    // (EPIPE) is judged by its exit status, as without a key.
    let _ = stdin.write_all(format!("{}\n", key.to_hex()).as_bytes());
    if plan.stdin {
        std::thread::spawn(move || {
            // Ends at mpirun's end of input, or when the agent is gone (EPIPE).
            let _ = io::copy(&mut io::stdin().lock(), &mut stdin);
        });
    }
    Ok(child)
}

impl Runner {
    fn start_agents(&mut self, rem: Remote) {
        let _ = rem.listener.set_nonblocking(true);
        let mut st = RemoteState {
            agents: Vec::new(),
            listener: rem.listener,
            key: rem.key,
            spec: rem.spec,
            fresh: Vec::new(),
            accept_paused: None,
            refused: 0,
            hard_kill_at: None,
            finished: false,
        };
        let mut failed = None;
        for plan in rem.agents {
            if failed.is_some() {
                break;
            }
            match spawn_launch(&plan, &st.key) {
                Ok(child) => st.agents.push(Agent {
                    pid: child.id() as i32,
                    child: Some(child),
                    conn: None,
                    lines: LineBuffer::new(),
                    out: Vec::new(),
                    left: plan.ranks.len(),
                    started: Instant::now(),
                    lost: false,
                    plan,
                }),
                Err(e) => {
                    failed = Some(format!(
                        "cannot start the agent for host {} ({}): {e}; job aborted",
                        plan.host,
                        plan.argv[0].to_string_lossy()
                    ))
                }
            }
        }
        self.remote = Some(st);
        if let Some(msg) = failed {
            self.fail(msg, 1, libc::SIGTERM);
        }
    }

    /// Once every process of the job (spawned ones included) has ended, tell the agents,
    /// which until then wait for more (see [`Msg::Finish`]).
    fn finish_agents_when_all_ended(&mut self) {
        if !self.ranks.iter().all(|rk| rk.exited) {
            return;
        }
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        if st.finished || !st.agents.iter().all(|a| a.left == 0 || a.lost) {
            return;
        }
        st.finished = true;
        for a in st.agents.iter_mut().filter(|a| a.conn.is_some()) {
            a.out.extend_from_slice(Msg::Finish.encode().as_bytes());
        }
    }

    fn agents_done(&self) -> bool {
        self.remote.as_ref().is_none_or(|st| {
            st.agents
                .iter()
                .all(|a| (a.left == 0 || a.lost) && a.child.is_none())
        })
    }

    /// Forward a signal to every agent's ranks (through the agent when connected).
    fn signal_agents(&mut self, sig: libc::c_int) {
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        for a in st.agents.iter_mut() {
            match (&a.conn, a.child.is_some()) {
                (Some(_), _) => a
                    .out
                    .extend_from_slice(Msg::Signal(sig).encode().as_bytes()),
                // Not connected (yet): stop the launch command itself — but a checkpoint
                // request (SIGUSR2) is for ranks, and this host has none running yet.
                (None, true) if sig == libc::SIGUSR2 => {}
                (None, true) => {
                    // SAFETY: a pid we spawned and have not reaped.
                    unsafe { libc::kill(a.pid, sig) };
                }
                (None, false) => {}
            }
        }
        if sig == libc::SIGKILL && st.hard_kill_at.is_none() {
            st.hard_kill_at = Some(Instant::now() + AGENT_GRACE);
        }
    }

    /// Kill and reap every launch command still running (end of the job).
    fn kill_agents(&mut self) {
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        for a in st.agents.iter_mut() {
            if let Some(mut c) = a.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    fn reap_agents(&mut self) {
        let mut failures = Vec::new();
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        let now = Instant::now();
        // Connections that did not answer the challenge in time.
        st.fresh.retain(|f| now - f.since < HELLO_DEADLINE);
        if st.accept_paused.is_some_and(|t| now >= t) {
            st.accept_paused = None;
        }
        let hard = st.hard_kill_at.is_some_and(|t| now >= t);
        for a in st.agents.iter_mut() {
            if hard {
                if let Some(c) = a.child.as_mut() {
                    let _ = c.kill();
                }
                a.lost = true;
            }
            if a.conn.is_none() && !a.lost && a.left > 0 && now - a.started > AGENT_CONNECT_TIMEOUT
            {
                a.lost = true;
                if let Some(c) = a.child.as_mut() {
                    let _ = c.kill();
                }
                failures.push(format!(
                    "the agent for host {} did not connect back within {}s (unreachable host?); job aborted",
                    a.plan.host,
                    AGENT_CONNECT_TIMEOUT.as_secs()
                ));
            }
            let Some(status) = a.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) else {
                continue;
            };
            a.child = None;
            // Its last messages (exits) may still be in the socket: the connection's EOF
            // decides. Only an agent that never connected fails here.
            if a.conn.is_none() && a.left > 0 && !a.lost {
                a.lost = true;
                let how = match (status.code(), status.signal()) {
                    (Some(c), _) => format!("exited with code {c}"),
                    (None, Some(s)) => format!("was killed by {}", signals::name(s)),
                    _ => "ended".to_string(),
                };
                failures.push(format!(
                    "the launch command for host {} ({}) {how} before its agent connected; job aborted",
                    a.plan.host,
                    a.plan.argv[0].to_string_lossy()
                ));
            }
        }
        for f in failures {
            self.fail(f, 1, libc::SIGTERM);
        }
    }

    fn remote_pollfds(&self, pfds: &mut Vec<libc::pollfd>) -> Vec<Polled> {
        let mut polled = Vec::new();
        let Some(st) = self.remote.as_ref() else {
            return polled;
        };
        let mut add = |fd: RawFd, out: bool, what: Polled| {
            pfds.push(libc::pollfd {
                fd,
                events: libc::POLLIN | if out { libc::POLLOUT } else { 0 },
                revents: 0,
            });
            polled.push(what);
        };
        if st.accept_paused.is_none() {
            add(st.listener.as_raw_fd(), false, Polled::Listener);
        }
        for (i, f) in st.fresh.iter().enumerate() {
            add(f.sock.as_raw_fd(), false, Polled::Fresh(i));
        }
        for (i, a) in st.agents.iter().enumerate() {
            if let Some(c) = &a.conn {
                add(c.as_raw_fd(), !a.out.is_empty(), Polled::Agent(i));
            }
        }
        polled
    }

    fn service_remote(&mut self, pfds: &[libc::pollfd], polled: &[Polled], buf: &mut [u8]) {
        let mut fresh_ready = Vec::new();
        let mut agents_ready = Vec::new();
        for (p, w) in pfds.iter().zip(polled) {
            if p.revents == 0 {
                continue;
            }
            match *w {
                Polled::Listener => self.accept_agents(),
                Polled::Fresh(i) => fresh_ready.push(i),
                Polled::Agent(i) => agents_ready.push(i),
            }
        }
        // Highest index first, so removals keep the other indices valid.
        fresh_ready.sort_unstable_by(|a, b| b.cmp(a));
        for i in fresh_ready {
            self.read_fresh(i, buf);
        }
        for i in agents_ready {
            self.read_agent(i, buf);
        }
    }

    fn accept_agents(&mut self) {
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        // Closes the connection that has waited longest (the fresh list is in accept order).
        let drop_oldest = |st: &mut RemoteState| {
            if !st.fresh.is_empty() {
                st.fresh.remove(0);
                st.refused += 1;
            }
        };
        loop {
            let s = match st.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO)
                    ) =>
                {
                    continue
                }
                Err(_) => {
                    // EMFILE, ENFILE, ENOBUFS...: the pending connection stays queued and the
                    // listener readable. Close the older half of the unanswered connections
                    // and go on accepting; with none to close, leave the listener alone
                    // for a moment instead of polling it again at once (a busy loop).
                    if st.fresh.is_empty() {
                        st.accept_paused = Some(Instant::now() + ACCEPT_PAUSE);
                        return;
                    }
                    for _ in 0..st.fresh.len().div_ceil(2) {
                        drop_oldest(st);
                    }
                    continue;
                }
            };
            let _ = s.set_nonblocking(true);
            let _ = s.set_nodelay(true);
            let Ok(challenge) = tsunagi_tcp::auth::nonce() else {
                continue;
            };
            // A few dozen bytes into a fresh socket's empty buffer: written whole.
            let mut s2: &std::net::TcpStream = &s;
            if std::io::Write::write_all(&mut s2, Msg::Challenge(challenge).encode().as_bytes())
                .is_err()
            {
                continue;
            }
            if st.fresh.len() >= FRESH_MAX {
                // Full: close the one that waited longest, unless it is younger than any
                // answer could take (a burst): then the new one goes, and a real agent
                // that loses out connects again.
                if st.fresh[0].since.elapsed() >= EVICT_AFTER {
                    drop_oldest(st);
                } else {
                    st.refused += 1;
                    continue;
                }
            }
            st.fresh.push(Fresh {
                sock: s,
                lines: LineBuffer::new(),
                challenge,
                since: Instant::now(),
            });
        }
    }

    /// A connection that has not identified itself yet: wait for its hello.
    fn read_fresh(&mut self, i: usize, buf: &mut [u8]) {
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        let f = &mut st.fresh[i];
        let mut s2: &std::net::TcpStream = &f.sock;
        let drop_it = match std::io::Read::read(&mut s2, buf) {
            Ok(0) => true,
            Ok(n) => {
                f.lines.push(&buf[..n]);
                false
            }
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        };
        // A hello is one short line: a longer one is not an agent's.
        if drop_it || f.lines.pending() > 512 {
            st.fresh.remove(i);
            return;
        }
        let line = match f.lines.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(_) => {
                st.fresh.remove(i);
                return;
            }
        };
        let Fresh {
            sock: s,
            lines: rest,
            challenge,
            ..
        } = st.fresh.remove(i);
        let key = st.key;
        let agent = match Msg::decode(&line) {
            Ok(Msg::Hello { id, nonce, mac })
                if crate::agent::check_hello(&key, &challenge, id, &nonce, &mac) =>
            {
                st.agents
                    .get_mut(id)
                    .filter(|a| a.conn.is_none() && !a.lost)
                    .map(|a| (a, id, nonce))
            }
            _ => None,
        };
        let Some((a, id, nonce)) = agent else {
            // Not one of our agents (or a duplicate): close it, and say so once.
            st.refused += 1;
            if st.refused == 1 {
                let _ = writeln!(
                    io::stderr(),
                    "mpirun: refused a control connection from {} (not an agent of this job; further refusals are not reported)",
                    s.peer_addr().map_or("?".into(), |a| a.to_string())
                );
            }
            return;
        };
        a.out.extend_from_slice(
            Msg::Proof(crate::agent::proof_mac(&key, id, &challenge, &nonce))
                .encode()
                .as_bytes(),
        );
        let mut spec = st.spec.clone();
        spec.ranks = a.plan.ranks.clone();
        for m in Msg::job_spec(&spec) {
            a.out.extend_from_slice(m.encode().as_bytes());
        }
        a.lines = rest;
        a.conn = Some(s);
    }

    fn read_agent(&mut self, i: usize, buf: &mut [u8]) {
        loop {
            let Some(st) = self.remote.as_mut() else {
                return;
            };
            let a = &mut st.agents[i];
            let Some(c) = a.conn.as_ref() else {
                return;
            };
            let mut c2: &std::net::TcpStream = c;
            let eof = match std::io::Read::read(&mut c2, buf) {
                Ok(0) => true,
                Ok(n) => {
                    a.lines.push(&buf[..n]);
                    false
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.agent_lines(i);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
                Err(_) => true,
            };
            self.agent_lines(i);
            if eof {
                let st = self.remote.as_mut().expect("remote");
                let a = &mut st.agents[i];
                a.conn = None;
                a.out.clear();
                if a.left > 0 && !a.lost {
                    a.lost = true;
                    let host = a.plan.host.clone();
                    self.fail(
                        format!("lost the agent on host {host} (its ranks are gone); job aborted"),
                        1,
                        libc::SIGTERM,
                    );
                }
                return;
            }
        }
    }

    /// Act on complete lines from agent `i`.
    fn agent_lines(&mut self, i: usize) {
        loop {
            let Some(st) = self.remote.as_mut() else {
                return;
            };
            let a = &mut st.agents[i];
            let host = a.plan.host.clone();
            let line = match a.lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => return,
                Err(e) => {
                    a.conn = None;
                    a.lost = true;
                    self.fail(
                        format!("the agent on host {host} broke the protocol ({e}); job aborted"),
                        1,
                        libc::SIGTERM,
                    );
                    return;
                }
            };
            let msg = Msg::decode(&line);
            match msg {
                Ok(Msg::Pmi(rank, l)) if a.plan.ranks.contains(&rank) => {
                    let mut replies = Vec::new();
                    let ev = self.server.handle_line(rank, &l, &mut replies);
                    self.on_event(ev, &format!("on host {host}"));
                    self.route_replies(replies);
                }
                Ok(Msg::Exit { rank, code, signal }) if a.plan.ranks.contains(&rank) => {
                    a.left = a.left.saturating_sub(1);
                    let (code, sig) = if signal != 0 {
                        (None, Some(signal))
                    } else {
                        (Some(code), None)
                    };
                    self.judge_exit(rank, &format!("on host {host}"), code, sig);
                }
                Ok(Msg::Failed(m)) => {
                    self.fail(
                        format!("host {host}: {}; job aborted", printable(&m, MESSAGE_MAX)),
                        126,
                        libc::SIGTERM,
                    );
                }
                _ => {
                    a.conn = None;
                    a.lost = true;
                    self.fail(
                        format!("the agent on host {host} sent an unexpected message; job aborted"),
                        1,
                        libc::SIGTERM,
                    );
                    return;
                }
            }
        }
    }

    fn send_to_agent_of(&mut self, rank: usize, line: &str) {
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        if let Some(a) = st
            .agents
            .iter_mut()
            .find(|a| a.conn.is_some() && a.plan.ranks.contains(&rank))
        {
            a.out
                .extend_from_slice(Msg::Pmi(rank, line.to_string()).encode().as_bytes());
        }
    }

    fn flush_agents(&mut self) {
        let Some(st) = self.remote.as_mut() else {
            return;
        };
        for a in st.agents.iter_mut() {
            while !a.out.is_empty() {
                let Some(c) = a.conn.as_ref() else {
                    a.out.clear();
                    break;
                };
                let mut c2: &std::net::TcpStream = c;
                match std::io::Write::write(&mut c2, &a.out) {
                    Ok(n) if n > 0 => {
                        a.out.drain(..n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // A broken connection shows up as EOF on the read side.
                    _ => break,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blamed_peer_is_read_from_peer_failed_messages() {
        assert_eq!(
            blamed_peer("MPI_Recv: peer rank 3 failed: connection closed without goodbye"),
            Some(3)
        );
        assert_eq!(blamed_peer("peer rank 12 failed"), Some(12));
        assert_eq!(blamed_peer("peer rank x failed"), None);
        assert_eq!(blamed_peer("peer rank 3 is slow"), None);
        assert_eq!(blamed_peer("user abort"), None);
        assert_eq!(
            blamed_peer("peer rank 99999999999999999999999 failed"),
            None
        );
    }
}
