//! `mpirun --vendor mpich|openmpi|PATH`: the job is started by the vendor MPI's own
//! launcher (Hydra's `mpiexec.hydra`, Open MPI's `mpirun.openmpi`), which starts exactly
//! the application's processes; Tsunagi in each rank takes its rank, placement and cards
//! from the vendor MPI (`tsunagi-vendor`'s bootstrap, chosen by `TSUNAGI_VENDOR`) and moves
//! its messages over the vendor (`TSUNAGI_INTRANODE=vendor`, `TSUNAGI_INTERNODE=vendor`;
//! `--env` may choose other transports, e.g. TCP between pretend nodes).
//!
//! mpirun here only builds the vendor launcher's command line, runs it in a process group
//! of its own, forwards SIGINT/SIGTERM/SIGHUP to it (and SIGKILLs the group if it has not
//! ended [`KILL_AFTER`] later), and exits with its status. Ending the job when a rank
//! fails is the vendor launcher's work, as it is for any of its jobs; but vendor launchers
//! may return while the ranks they killed are still dying (Hydra after MPI_Abort, Open MPI
//! after a rank's death), so mpirun makes itself the child subreaper of the whole job and,
//! once the launcher has exited, kills and reaps every descendant left: when mpirun
//! returns, no process of the job is left.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cli::Options;
use crate::signals::SignalPipe;

/// After forwarding a signal, how long the vendor launcher gets before its process group
/// is killed.
pub const KILL_AFTER: Duration = Duration::from_secs(3);

/// The variables every rank gets, before the user's `--env`/`-x` (which may override).
pub fn rank_env(vendor: &str) -> Vec<(OsString, OsString)> {
    vec![
        ("TSUNAGI_VENDOR".into(), vendor.into()),
        ("TSUNAGI_INTRANODE".into(), "vendor".into()),
        ("TSUNAGI_INTERNODE".into(), "vendor".into()),
    ]
}

/// The vendor launcher and its arguments for `opts` (`program` resolved). `launcher_env`
/// is `TSUNAGI_VENDOR_LAUNCHER` (the launcher to use for a vendor given by path, or to
/// override the default one); `root`: mpirun runs as root (Open MPI refuses that unless
/// told).
pub fn command_line(
    opts: &Options,
    vendor: &str,
    program: &Path,
    launcher_env: Option<&str>,
    root: bool,
) -> Result<(OsString, Vec<OsString>), String> {
    let openmpi = match vendor {
        "mpich" => false,
        "openmpi" => true,
        path => {
            // A library path: the launcher must be named; its kind is guessed from its name.
            let l = launcher_env.ok_or_else(|| {
                format!("--vendor {path}: set TSUNAGI_VENDOR_LAUNCHER to the vendor's launcher (its mpiexec)")
            })?;
            l.contains("openmpi") || l.contains("orterun") || l.contains("prterun")
        }
    };
    if opts.launch_agent.is_some() || opts.launch_addr.is_some() {
        return Err("--vendor: the vendor's launcher starts the ranks; --launch-agent and --launch-addr do not apply".into());
    }
    let launcher: OsString = match launcher_env {
        Some(l) => l.into(),
        None if openmpi => "mpirun.openmpi".into(),
        None => "mpiexec.hydra".into(),
    };
    let mut env = rank_env(vendor);
    env.extend(opts.env.iter().cloned());
    let mut a: Vec<OsString> = Vec::new();
    let np = opts.np.to_string();
    if openmpi {
        if root {
            a.push("--allow-run-as-root".into());
        }
        // Tsunagi's ranks may run progress threads, and several jobs may share the cores:
        // no binding, and more ranks than cores is allowed as with our own mpirun.
        a.extend(["--oversubscribe", "--bind-to", "none"].map(OsString::from));
        if opts.np_given || (opts.host.is_none() && opts.hostfile.is_none()) {
            a.extend(["-np".into(), np.into()]);
        }
        if let Some(h) = &opts.host {
            a.extend(["--host".into(), h.into()]);
        }
        if let Some(f) = &opts.hostfile {
            a.extend(["--hostfile".into(), f.clone()]);
        }
        if opts.map_by == crate::hosts::MapBy::Node {
            a.extend(["--map-by", "node"].map(OsString::from));
        }
        for (k, v) in &env {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            a.extend(["-x".into(), kv]);
        }
    } else {
        if opts.np_given || (opts.host.is_none() && opts.hostfile.is_none()) {
            a.extend(["-n".into(), np.into()]);
        }
        if let Some(h) = &opts.host {
            a.extend(["-hosts".into(), h.into()]);
        }
        if let Some(f) = &opts.hostfile {
            a.extend(["-f".into(), f.clone()]);
        }
        if opts.map_by == crate::hosts::MapBy::Node {
            a.extend(["-rr".into()]);
        }
        for (k, v) in &env {
            a.extend(["-genv".into(), k.clone(), v.clone()]);
        }
    }
    a.push(program.into());
    a.extend(opts.args.iter().cloned());
    Ok((launcher, a))
}

/// Run the job through the vendor's launcher; returns mpirun's exit status.
pub fn run(opts: &Options, vendor: &str, program: &Path, sigs: &SignalPipe, prog: &str) -> i32 {
    let launcher_env = std::env::var("TSUNAGI_VENDOR_LAUNCHER").ok();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (launcher, args) = match command_line(opts, vendor, program, launcher_env.as_deref(), root)
    {
        Ok(c) => c,
        Err(e) => {
            crate::say(prog, &e);
            return crate::EXIT_USAGE;
        }
    };
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag; it only changes
    // who reaps our orphaned descendants.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let mut child = match Command::new(&launcher).args(&args).process_group(0).spawn() {
        Ok(c) => c,
        Err(e) => {
            crate::say(
                prog,
                &format!(
                    "cannot start the vendor launcher {}: {e}",
                    Path::new(&launcher).display()
                ),
            );
            return 127;
        }
    };
    let pgid = child.id() as libc::pid_t;
    let mut kill_at: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                // Whatever the launcher left in its group (it should have left nothing).
                // SAFETY: signalling our own child's process group.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                reap_descendants(Duration::from_secs(2));
                return match (status.code(), status.signal()) {
                    (Some(c), _) => c,
                    (None, Some(s)) => 128 + s,
                    _ => 1,
                };
            }
            Ok(None) => {}
            Err(e) => {
                crate::say(prog, &format!("waiting for the vendor launcher: {e}"));
                // SAFETY: as above.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                reap_descendants(Duration::from_secs(2));
                return 1;
            }
        }
        for sig in sigs.drain() {
            if sig != libc::SIGCHLD {
                // SAFETY: forwarding the signal to our child (the vendor launcher), which
                // passes it on to its ranks.
                unsafe { libc::kill(pgid, sig) };
                kill_at.get_or_insert(Instant::now() + KILL_AFTER);
            }
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            // SAFETY: our child's own process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        let mut pfd = libc::pollfd {
            fd: sigs.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a short timeout bounds the wait for the child's exit
        // even if SIGCHLD was consumed before try_wait.
        unsafe { libc::poll(&mut pfd, 1, 50) };
    }
}

/// The pids whose parent is this process (from /proc/*/stat).
fn children() -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                // The command name may hold spaces and parentheses: fields after the
                // last ')' are "state ppid ...".
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<libc::pid_t>().ok()
                })
                == Some(me)
        })
        .collect()
}

/// Kill and reap every descendant still there (as subreaper, orphans of the job become
/// our children), for at most `limit`.
fn reap_descendants(limit: Duration) {
    let until = Instant::now() + limit;
    loop {
        let kids = children();
        for &k in &kids {
            // SAFETY: k is our own child (a process of the job whose launcher has ended).
            unsafe { libc::kill(k, libc::SIGKILL) };
        }
        loop {
            let mut st = 0;
            // SAFETY: reaping our own children without blocking.
            if unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) } <= 0 {
                break;
            }
        }
        if kids.is_empty() || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Options {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        match crate::cli::parse(&args, |_| None).unwrap() {
            crate::cli::Action::Run(o) => *o,
            _ => panic!(),
        }
    }

    fn strs(v: &[OsString]) -> Vec<String> {
        v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn mpich_command() {
        let o = opts(&[
            "--vendor",
            "mpich",
            "-n",
            "4",
            "--env",
            "TSUNAGI_INTERNODE=tcp",
            "prog",
            "a",
        ]);
        let (l, a) = command_line(&o, "mpich", Path::new("/bin/prog"), None, true).unwrap();
        assert_eq!(l, "mpiexec.hydra");
        let a = strs(&a);
        assert_eq!(&a[..2], ["-n", "4"]);
        assert!(a
            .windows(3)
            .any(|w| w == ["-genv", "TSUNAGI_VENDOR", "mpich"]));
        let intern: Vec<usize> = (0..a.len())
            .filter(|&i| a[i] == "TSUNAGI_INTERNODE")
            .collect();
        // Ours first, the user's later (Hydra: the last -genv of a name wins).
        assert_eq!(intern.len(), 2);
        assert_eq!(a[intern[1] + 1], "tcp");
        assert_eq!(&a[a.len() - 2..], ["/bin/prog", "a"]);
    }

    #[test]
    fn openmpi_command() {
        let o = opts(&["--vendor", "openmpi", "-n", "2", "--host", "a:2", "prog"]);
        let (l, a) = command_line(&o, "openmpi", Path::new("/bin/prog"), None, true).unwrap();
        assert_eq!(l, "mpirun.openmpi");
        let a = strs(&a);
        assert_eq!(a[0], "--allow-run-as-root");
        assert!(a.windows(2).any(|w| w == ["-np", "2"]));
        assert!(a.windows(2).any(|w| w == ["--host", "a:2"]));
        assert!(a.windows(2).any(|w| w == ["-x", "TSUNAGI_VENDOR=openmpi"]));
        assert!(a
            .windows(2)
            .any(|w| w == ["-x", "TSUNAGI_INTRANODE=vendor"]));
        let (_, a) = command_line(&o, "openmpi", Path::new("/bin/prog"), None, false).unwrap();
        assert!(!strs(&a).contains(&"--allow-run-as-root".to_string()));
    }

    #[test]
    fn vendor_by_path_needs_a_launcher() {
        let o = opts(&["--vendor", "/opt/v/lib/libmpi.so", "prog"]);
        let e = command_line(&o, "/opt/v/lib/libmpi.so", Path::new("p"), None, false).unwrap_err();
        assert!(e.contains("TSUNAGI_VENDOR_LAUNCHER"), "{e}");
        let (l, a) = command_line(
            &o,
            "/opt/v/lib/libmpi.so",
            Path::new("p"),
            Some("/opt/v/bin/mpiexec"),
            false,
        )
        .unwrap();
        assert_eq!(l, "/opt/v/bin/mpiexec");
        assert!(strs(&a).contains(&"-genv".to_string()));
        let o = opts(&["--vendor", "mpich", "--launch-agent", "ssh {host}", "prog"]);
        assert!(command_line(&o, "mpich", Path::new("p"), None, false).is_err());
    }
}
