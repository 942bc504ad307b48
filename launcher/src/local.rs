//! Running a job's ranks on this host: spawn them with their PMI sockets, serve PMI, watch
//! them exit, and take the whole job down when one fails.
//!
//! Everything happens in one thread around one poll(2): the signal pipe (SIGCHLD, SIGINT,
//! SIGTERM, SIGHUP) and every rank's PMI socket. Nothing spins: with more ranks than cores
//! the launcher must not compete with them for the CPU.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tsunagi_core::pmi::wire::LineBuffer;

use crate::server::{Event, PmiServer};
use crate::signals::{self, SignalPipe};

/// How long ranks get to exit after SIGTERM (or a forwarded signal) before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(1);

/// What to run on this host.
#[derive(Clone, Debug)]
pub struct LocalJob {
    /// The resolved path of the program.
    pub program: PathBuf,
    /// argv[0] as the user typed it.
    pub argv0: OsString,
    pub args: Vec<OsString>,
    /// Ranks on this host, as global rank numbers (all of them, for now: one host).
    pub ranks: Vec<usize>,
    /// The job's size.
    pub size: usize,
    /// Extra environment for the ranks, applied in order after the PMI variables.
    pub env: Vec<(OsString, OsString)>,
    pub kvsname: String,
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

struct Runner {
    server: PmiServer,
    ranks: Vec<Rank>,
    /// The first failure: the line to print and the exit code. Later ones are consequences.
    failure: Option<Outcome>,
    /// When survivors of a failure get SIGKILL.
    kill_at: Option<Instant>,
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

/// Start one rank with the client end of a fresh socketpair as its PMI_FD.
fn spawn_rank(job: &LocalJob, rank: usize) -> io::Result<(Child, OwnedFd)> {
    let (server_end, client_end) = socketpair()?;
    set_nonblocking(server_end.as_raw_fd())?;
    let client_fd = client_end.as_raw_fd();

    let mut cmd = Command::new(&job.program);
    cmd.arg0(&job.argv0).args(&job.args);
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
    for (k, v) in &job.env {
        cmd.env(k, v);
    }
    // Only rank 0 reads the user's stdin (as with every mpirun); output is inherited so it
    // reaches the user byte for byte with no copying through us.
    cmd.stdin(if rank == 0 {
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
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(client_end);
    Ok((child, server_end))
}

/// Run `job` to the end. Returns how it ended; prints nothing itself.
pub fn run(job: &LocalJob, sigs: &SignalPipe) -> Outcome {
    let mapping = format!("(vector,(0,1,{}))", job.size);
    let mut r = Runner {
        server: PmiServer::new(&job.kvsname, job.size, &mapping),
        ranks: Vec::with_capacity(job.ranks.len()),
        failure: None,
        kill_at: None,
    };
    for &rank in &job.ranks {
        // A signal during start-up: start no more ranks.
        if r.failure.is_some() {
            break;
        }
        for sig in sigs.drain() {
            r.on_signal(sig);
        }
        match spawn_rank(job, rank) {
            Ok((child, conn)) => r.ranks.push(Rank {
                rank,
                pid: child.id() as i32,
                child: Some(child),
                conn: Some(conn),
                lines: LineBuffer::new(),
                out: Vec::new(),
                exited: false,
            }),
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
        self.failure = Some(Outcome {
            exit_code,
            message: Some(message),
        });
        self.signal_all(sig);
        self.kill_at = Some(Instant::now() + GRACE);
    }

    fn signal_all(&self, sig: libc::c_int) {
        for rk in self.ranks.iter().filter(|rk| !rk.exited) {
            // SAFETY: kill on a pid we spawned and have not reaped, so it cannot have
            // been reused by another process.
            unsafe { libc::kill(rk.pid, sig) };
        }
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
            if self.ranks.iter().all(|rk| rk.exited) {
                return;
            }
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
            let timeout = match self.kill_at {
                Some(t) => {
                    t.saturating_duration_since(Instant::now())
                        .as_millis()
                        .min(i32::MAX as u128) as i32
                        + 1
                }
                None => -1,
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
            for (p, &i) in pfds[1..].iter().zip(&polled) {
                if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                    self.read_rank(i, &mut buf);
                }
            }
            self.flush_all();
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
            match event {
                Some(Event::Abort {
                    rank,
                    code,
                    message,
                }) => {
                    let msg = match message {
                        Some(m) => format!(
                            "rank {rank} called MPI_Abort with error code {code}: {m}; job aborted"
                        ),
                        None => format!(
                            "rank {rank} called MPI_Abort with error code {code}; job aborted"
                        ),
                    };
                    // An exit status is 8 bits, and an aborted job must not look successful.
                    let status = match code & 0xff {
                        0 => 1,
                        c => c,
                    };
                    self.fail(msg, status, libc::SIGTERM);
                }
                Some(Event::ProtocolError { rank, detail }) => {
                    let pid = self.ranks[i].pid;
                    self.fail(
                        format!("rank {rank} (pid {pid}) broke the PMI protocol ({detail}); job aborted"),
                        1,
                        libc::SIGTERM,
                    );
                    self.ranks[i].conn = None;
                    break;
                }
                None => {}
            }
        }
        for (rank, line) in replies {
            if let Some(rk) = self.ranks.iter_mut().find(|rk| rk.rank == rank) {
                if rk.conn.is_some() {
                    rk.out.extend_from_slice(line.as_bytes());
                }
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
            if let Some(sig) = status.signal() {
                self.fail(
                    format!(
                        "rank {rank} (pid {pid}) killed by signal {sig} ({}); job aborted",
                        signals::name(sig)
                    ),
                    128 + sig,
                    libc::SIGTERM,
                );
            } else {
                let code = status.code().unwrap_or(1);
                if code != 0 {
                    self.fail(
                        format!("rank {rank} (pid {pid}) exited with code {code}; job aborted"),
                        code,
                        libc::SIGTERM,
                    );
                } else if self.server.initialized(rank) && !self.server.finalized(rank) {
                    self.fail(
                        format!(
                            "rank {rank} (pid {pid}) exited without calling MPI_Finalize; job aborted"
                        ),
                        1,
                        libc::SIGTERM,
                    );
                }
            }
        }
    }
}
