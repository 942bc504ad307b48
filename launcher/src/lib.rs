//! Tsunagi's launcher: `mpirun`/`mpiexec` and the PMI-1 server.
//!
//! The job of this crate is to start the ranks of one MPI job, give each the PMI-1 service
//! the MPI library uses to learn its rank and its peers' business cards, and make the job
//! end as one: exit 0 only if every rank exited 0 after finalizing, and take every rank
//! down (SIGTERM, then SIGKILL after a second) as soon as one fails, aborts or is killed,
//! or mpirun itself is interrupted. In every case it removes the shared-memory files the
//! MPI core names `/dev/shm/tsunagi-<kvsname>-*`.
//!
//! The boundary: the launcher never touches the ranks' stdout or stderr (they inherit
//! mpirun's, so output arrives byte for byte and mpirun prints nothing of its own on
//! success); the MPI library side of PMI is `tsunagi_core::pmi`, whose wire codec the
//! server here reuses.
//!
//! Layout:
//! - [`cli`]: option parsing;
//! - [`server`]: the PMI-1 server as a sans-IO state machine (lines in, replies and events
//!   out), independent of how lines arrive;
//! - [`local`]: spawning ranks on this host and the poll(2) loop that serves their PMI
//!   sockets and reaps them; also the processes a job asks for with PMI-1 `spawn`
//!   (MPI_Comm_spawn: a new group of the server, started and reaped by the same loop) and
//!   the name service (MPI_Publish_name ...);
//! - [`pmi_spawn`]: the decoder of PMI-1's multi-line `spawn` command;
//! - [`signals`]: signals delivered into that loop through a pipe.
//!
//! - [`hosts`]: `--host`/`--hostfile` parsing, placement by slot or node, the
//!   `PMI_process_mapping` of a placement;
//! - [`agent`]: the per-host agent (`mpirun --agent ...`) and its control protocol;
//! - `fuzzing`: fuzz targets for every decoder of outside bytes (used by `fuzz/` and
//!   `tests/fuzz_corpus.rs`).
//!
//! Several hosts: ranks on hosts named `localhost` (or this host's name) start here as
//! above; every other host gets an agent, started through the launch command (default
//! `ssh -o BatchMode=yes -o ConnectTimeout=10 {host}`, e.g. `ip netns exec {host}`), which
//! connects back to mpirun over TCP, spawns and reaps its ranks there and relays their PMI
//! lines and exits to the one [`server::PmiServer`] here. Ranks' output travels through the
//! launch command's own stdout/stderr (inherited), and stdin goes to the launch command of
//! rank 0's host. A lost agent, a launch command that fails or an agent that does not
//! connect back within [`local::AGENT_CONNECT_TIMEOUT`] ends the whole job; agents kill
//! their ranks when their connection to mpirun ends, so no host keeps orphans.

pub mod agent;
pub mod cli;
#[doc(hidden)]
pub mod fuzzing;
pub mod grid;
pub mod hosts;
pub mod local;
pub mod pmi_spawn;
pub mod server;
pub mod signals;
pub mod vendor;

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Exit status for bad usage.
pub const EXIT_USAGE: i32 = 2;

/// Write one line to stderr, ignoring failure (a closed stderr must not make us panic
/// while ranks still need to be cleaned up).
fn say(prog: &str, msg: &str) {
    let _ = writeln!(std::io::stderr(), "{prog}: {msg}");
}

/// Find the program the way execvp would: a name with a slash as is, otherwise along PATH.
/// Errors are the line to print and the exit status (127 not found, 126 not executable, as
/// shells use).
pub fn resolve_program(
    program: &OsStr,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, (String, i32)> {
    let shown = Path::new(program).display().to_string();
    let executable = |p: &Path| -> bool {
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: access only reads the NUL-terminated path we pass.
        p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
    };
    if program.is_empty() {
        return Err(("empty program name".to_string(), 127));
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        if !p.exists() {
            return Err((format!("program '{shown}' not found"), 127));
        }
        if !executable(&p) {
            return Err((
                format!("cannot execute '{shown}': not an executable file"),
                126,
            ));
        }
        return Ok(p);
    }
    let mut found_non_exec = false;
    let path_var = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    for dir in path_var.as_bytes().split(|&b| b == b':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(dir))
        };
        let p = dir.join(program);
        if executable(&p) {
            return Ok(p);
        }
        found_non_exec |= p.is_file();
    }
    if found_non_exec {
        Err((
            format!("cannot execute '{shown}': not an executable file"),
            126,
        ))
    } else {
        Err((format!("program '{shown}' not found in PATH"), 127))
    }
}

/// A kvsname unique per job: mpirun's pid plus 32 random bits (time-based if the kernel
/// will not give randomness), so two jobs never share shared-memory segment names.
pub fn new_kvsname() -> String {
    let mut r = 0u32;
    // SAFETY: getrandom writes at most the 4 bytes of `r`.
    let got = unsafe { libc::getrandom((&mut r as *mut u32).cast(), 4, libc::GRND_NONBLOCK) };
    if got != 4 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        r = t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(16);
    }
    format!("tsunagi_{}_{r:08x}", std::process::id())
}

/// Remove `/dev/shm/tsunagi-<kvsname>-*`: what the job's ranks left behind if they died
/// before unlinking their segments.
pub fn remove_job_shm(kvsname: &str) {
    remove_job_shm_in(Path::new("/dev/shm"), kvsname);
}

fn remove_job_shm_in(dir: &Path, kvsname: &str) {
    let prefix = format!("tsunagi-{kvsname}-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().as_bytes().starts_with(prefix.as_bytes()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Removes the job's shared-memory files when dropped, so every way out of [`main_with`]
/// (including a panic) cleans up.
struct ShmCleanup(String);

impl Drop for ShmCleanup {
    fn drop(&mut self) {
        remove_job_shm(&self.0);
    }
}

/// mpirun's main: `args` is the whole argv. Returns the exit status.
pub fn main_with(args: Vec<OsString>) -> i32 {
    let prog = args
        .first()
        .map(|a| {
            Path::new(a)
                .file_name()
                .unwrap_or(a)
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_else(|| "mpirun".to_string());
    let rest = args.get(1..).unwrap_or(&[]);
    // Started by a launch command on another host: be that host's agent.
    if rest.first().is_some_and(|a| a == "--agent") {
        return agent::agent_main(&rest[1..]);
    }
    let opts = match cli::parse(rest, |k| std::env::var_os(k)) {
        Ok(cli::Action::Help) => {
            print!("{}", cli::usage(&prog));
            return 0;
        }
        Ok(cli::Action::Version) => {
            println!("Tsunagi {prog} {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Ok(cli::Action::Run(o)) => *o,
        Err(e) => {
            say(&prog, &format!("{e} (see {prog} --help)"));
            return EXIT_USAGE;
        }
    };
    if let Some(file) = &opts.sites {
        return match grid::run(&prog, Path::new(file), &opts.env, &opts.program, &opts.args) {
            Ok(code) => code,
            Err(msg) => {
                say(&prog, &msg);
                EXIT_USAGE
            }
        };
    }
    let program = match resolve_program(&opts.program, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err((msg, code)) => {
            say(&prog, &msg);
            return code;
        }
    };
    let sigs = match signals::SignalPipe::install() {
        Ok(s) => s,
        Err(e) => {
            say(&prog, &format!("cannot set up signal handling: {e}"));
            return 1;
        }
    };
    if let Some(v) = &opts.vendor {
        return vendor::run(&opts, v, &program, &sigs, &prog);
    }
    let kvsname = new_kvsname();
    let _cleanup = ShmCleanup(kvsname.clone());
    // The per-job secret every TCP connection between ranks must present. Ranks get it
    // through an inherited descriptor (`TSUNAGI_JOB_KEY_FD`), never in their environment.
    let key = tsunagi_tcp::JobKey::random().to_hex();
    let env: Vec<(OsString, OsString)> = opts.env.clone();
    let outcome = if opts.host.is_some() || opts.hostfile.is_some() {
        match multi_host(&opts, program, kvsname, key, env, &sigs) {
            Ok(o) => o,
            Err(msg) => {
                say(&prog, &msg);
                return EXIT_USAGE;
            }
        }
    } else {
        let np = opts.np as usize;
        let job = local::LocalJob {
            program,
            argv0: opts.program,
            args: opts.args,
            ranks: (0..np).collect(),
            size: np,
            env,
            kvsname,
            job_key: Some(key),
            slot_base: 0,
            wdir: None,
        };
        local::run(&job, &sigs)
    };
    if let Some(msg) = &outcome.message {
        say(&prog, msg);
    }
    outcome.exit_code
}

/// The default launch command: ssh that never prompts (a prompt would hang the job).
pub const DEFAULT_LAUNCH: &str = "ssh -o BatchMode=yes -o ConnectTimeout=10 {host}";

/// A job over `--host`/`--hostfile`: place ranks, start agents for remote hosts, run.
/// Errors are bad input (one line, exit status 2).
fn multi_host(
    opts: &cli::Options,
    program: PathBuf,
    kvsname: String,
    key: String,
    env: Vec<(OsString, OsString)>,
    sigs: &signals::SignalPipe,
) -> Result<local::Outcome, String> {
    let hosts = match (&opts.host, &opts.hostfile) {
        (Some(h), _) => hosts::parse_host_list(h)?,
        (None, Some(f)) => {
            let shown = Path::new(f).display().to_string();
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read hostfile {shown}: {e}"))?;
            hosts::parse_hostfile(&text, &shown)?
        }
        (None, None) => unreachable!("multi_host without hosts"),
    };
    let np = if opts.np_given {
        opts.np as usize
    } else {
        hosts.iter().map(|h| h.slots).sum()
    };
    let placement = hosts::place(&hosts, np, opts.map_by, opts.oversubscribe)?;
    let mapping = hosts::process_mapping(&placement);
    let me = tsunagi_core::boot::hostname();
    let local_ranks: Vec<usize> = (0..np)
        .filter(|&r| hosts::is_local(&hosts[placement[r]].name, &me))
        .collect();
    let job = local::LocalJob {
        program: program.clone(),
        argv0: opts.program.clone(),
        args: opts.args.clone(),
        ranks: local_ranks,
        size: np,
        env: env.clone(),
        kvsname: kvsname.clone(),
        job_key: Some(key.clone()),
        slot_base: 0,
        wdir: None,
    };
    let remote_hosts: Vec<usize> = (0..hosts.len())
        .filter(|&h| !hosts::is_local(&hosts[h].name, &me) && placement.contains(&h))
        .collect();
    if remote_hosts.is_empty() {
        return Ok(local::run_with(&job, &mapping, None, sigs));
    }
    let addr_spec = opts
        .launch_addr
        .clone()
        .or_else(|| std::env::var("TSUNAGI_LAUNCH_ADDR").ok())
        .filter(|s| !s.is_empty());
    let ip: std::net::IpAddr = match addr_spec {
        Some(a) => a
            .parse()
            .map_err(|_| format!("--launch-addr {a}: not an IP address"))?,
        None => tsunagi_tcp::config::choose_address(None, &tsunagi_tcp::config::interfaces())?.1,
    };
    // Listen only on the address agents are told to use (a NAT'd --launch-addr that is not
    // ours falls back to every address).
    let listener = std::net::TcpListener::bind((ip, 0))
        .or_else(|_| std::net::TcpListener::bind("0.0.0.0:0"))
        .map_err(|e| format!("cannot listen for agents: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot listen for agents: {e}"))?
        .port();
    let advertise = std::net::SocketAddr::new(ip, port);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find mpirun itself: {e}"))?;
    // Agents and mpirun prove to each other that they belong to the job with a key of the
    // agents' own (a challenge-response, see `agent`), which reaches each agent on its
    // standard input: nothing secret is on any command line or in any environment.
    let agent_key = tsunagi_tcp::JobKey::random();
    let template = opts.launch_agent.as_deref().unwrap_or(DEFAULT_LAUNCH);
    let agents = remote_hosts
        .iter()
        .enumerate()
        .map(|(id, &h)| {
            let name = &hosts[h].name;
            let mut argv: Vec<OsString> = template
                .split_whitespace()
                .map(|w| OsString::from(w.replace("{host}", name)))
                .collect();
            argv.push(exe.clone().into_os_string());
            argv.push("--agent".into());
            argv.push(advertise.to_string().into());
            argv.push(id.to_string().into());
            let ranks: Vec<usize> = (0..np).filter(|&r| placement[r] == h).collect();
            local::AgentPlan {
                host: name.clone(),
                stdin: ranks.contains(&0),
                ranks,
                argv,
            }
        })
        .collect();
    // Remote ranks get mpirun's TSUNAGI_* settings (ssh starts them with a fresh
    // environment) and the user's -x/--env variables, in that order; the job key travels
    // apart (`key` in the job spec) and reaches them through a descriptor, as here.
    let mut spec_env: Vec<(OsString, OsString)> = Vec::new();
    for (k, v) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| {
            k.starts_with("TSUNAGI_") && k != "TSUNAGI_JOB_KEY" && k != "TSUNAGI_JOB_KEY_FD"
        }) {
            spec_env.push((k, v));
        }
    }
    spec_env.extend(opts.env.iter().cloned());
    let spec = local::LocalJob {
        program,
        argv0: opts.program.clone(),
        args: opts.args.clone(),
        ranks: Vec::new(),
        size: np,
        env: spec_env,
        kvsname,
        job_key: Some(key),
        slot_base: 0,
        wdir: None,
    };
    let remote = local::Remote {
        agents,
        listener,
        key: agent_key,
        spec,
    };
    Ok(local::run_with(&job, &mapping, Some(remote), sigs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kvsnames_are_unique_and_well_formed() {
        let a = new_kvsname();
        let b = new_kvsname();
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("tsunagi_{}_", std::process::id())));
        assert!(a.len() < server::KVSNAME_MAX);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }

    #[test]
    fn shm_cleanup_removes_only_this_jobs_files() {
        let dir = std::env::temp_dir().join(format!("tsunagi-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "tsunagi-job_1-a",
            "tsunagi-job_1-b",
            "tsunagi-job_10-a",
            "other",
        ] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        remove_job_shm_in(&dir, "job_1");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["other", "tsunagi-job_10-a"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn resolves_programs() {
        assert!(resolve_program(OsStr::new("sh"), Some(OsStr::new("/nonexistent:/bin"))).is_ok());
        assert_eq!(
            resolve_program(OsStr::new("no-such-prog-xyz"), Some(OsStr::new("/bin")))
                .unwrap_err()
                .1,
            127
        );
        assert_eq!(
            resolve_program(OsStr::new("/no/such/file"), None)
                .unwrap_err()
                .1,
            127
        );
        assert_eq!(
            resolve_program(OsStr::new("/etc/passwd"), None)
                .unwrap_err()
                .1,
            126
        );
        assert_eq!(resolve_program(OsStr::new("/"), None).unwrap_err().1, 126);
    }
}
