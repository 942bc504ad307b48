//! Issue 14 regressions, as a hostile local user would try them: half-open connection
//! floods against a rank's TCP port and against mpirun's agent port, secrets looked for in
//! every process's command line and environment. (Forged control frames, item 4, are
//! tested sans IO in `tsunagi-core`'s engine: a job links every pair of ranks during
//! MPI_Init, so an outside connection can no longer pose as a rank.) Real processes throughout; the "remote" host of the agent tests is this
//! host, reached through a launch command that is a shell script (no root needed).

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One job at a time: they share two cores, and the floods need the descriptors.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn mpirun() -> &'static str {
    env!("CARGO_BIN_EXE_mpirun")
}

fn example(pkg: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let p = dir.join("examples").join(name);
    if !p.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", pkg, "--example", name])
            .status()
            .unwrap();
        assert!(st.success(), "building {name} failed");
    }
    p
}

fn p2p_check() -> PathBuf {
    example("tsunagi-core", "p2p_check")
}

fn pmi_rank() -> PathBuf {
    example("tsunagi-launcher", "pmi_rank")
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tsunagi-harden-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Give mpirun (and so its ranks) a descriptor limit of `n`, as a default account has.
fn limit_nofile(c: &mut Command, n: u64) {
    // SAFETY: setrlimit is async-signal-safe and only touches the child.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Room for the test's own flood sockets.
fn raise_own_nofile(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_cur.max(n.min(lim.rlim_max.max(n)));
        lim.rlim_max = lim.rlim_max.max(lim.rlim_cur);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun")
}

/// Wait for `child` with a watchdog (a hang fails the test instead of blocking CI).
fn finish(child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        while start.elapsed() < limit {
            if d2.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: our own child, not reaped yet (`done` is false).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, Ordering::SeqCst);
    (out, start.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn proc_file(pid: &str, what: &str) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default()
}

fn all_pids() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        .collect()
}

/// NUL-separated entries of /proc/PID/environ or cmdline.
fn entries(b: &[u8]) -> Vec<String> {
    b.split(|&c| c == 0)
        .filter(|e| !e.is_empty())
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect()
}

/// Pid of the rank with `PMI_RANK=rank` whose environment holds `mark`.
fn find_rank(mark: &str, rank: u32, deadline: Duration) -> Option<String> {
    let t = Instant::now();
    while t.elapsed() < deadline {
        for pid in all_pids() {
            let env = entries(&proc_file(&pid, "environ"));
            if env.iter().any(|e| e == mark) && env.iter().any(|e| *e == format!("PMI_RANK={rank}"))
            {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The job key a rank got, read through its TSUNAGI_JOB_KEY_FD descriptor (as root may).
fn rank_key(pid: &str) -> String {
    let env = entries(&proc_file(pid, "environ"));
    let fd = env
        .iter()
        .find_map(|e| e.strip_prefix("TSUNAGI_JOB_KEY_FD="))
        .unwrap_or_else(|| panic!("rank {pid} has no TSUNAGI_JOB_KEY_FD: {env:?}"));
    let key = std::fs::read_to_string(format!("/proc/{pid}/fd/{fd}")).unwrap();
    assert_eq!(key.len(), 32, "{key:?}");
    key
}

fn has_hex_token(s: &str, len: usize) -> bool {
    s.split(|c: char| !c.is_ascii_hexdigit())
        .any(|w| w.len() >= len)
}

/// A launch command that runs the agent on this host: it records the agent's address
/// (`$3` of `mpirun --agent ADDR ID`) in DIR/addr and waits for DIR/go before starting it.
fn launch_script(dir: &Path) -> String {
    let script = dir.join("launch.sh");
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nshift\nprintf '%s\\n' \"$3\" > {d}/addr.tmp && mv {d}/addr.tmp {d}/addr\n\
             while [ ! -e {d}/go ]; do sleep 0.05; done\nexec \"$@\"\n"
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    format!("{} {{host}}", script.display())
}

fn wait_for_file(p: &Path, limit: Duration) -> String {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Ok(s) = std::fs::read_to_string(p) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} never appeared", p.display());
}

/// mpirun with rank 0 here and rank 1 behind an agent started by [`launch_script`].
fn agent_job(dir: &Path, program_args: &[&str], program: &Path) -> Command {
    let mut c = Command::new(mpirun());
    c.args(["--host", "localhost:1,tsunagi-test-remote:1"])
        .arg("--launch-agent")
        .arg(launch_script(dir))
        .args(["--launch-addr", "127.0.0.1"])
        .arg(program)
        .args(program_args);
    c
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = String::from_utf8_lossy(&proc_file(&pid.to_string(), "stat")).into_owned();
    // Fields after the command name, which is in parentheses: utime is the 12th, stime 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Issue 14, item 2: 1,100 connections to each rank's TCP port that never send a hello,
/// with ranks limited to 1,024 descriptors. The job must finish normally: waiting
/// connections are bounded and time out.
#[test]
fn half_open_flood_against_a_rank() {
    let _s = serial();
    raise_own_nofile(4096);
    // Below the kernel's ephemeral range (32768-60999 by default), so that no outgoing
    // connection of another test holds one of these ports.
    let base = 21000 + (std::process::id() % 500) as u16 * 4;
    let mut c = Command::new(mpirun());
    c.args(["-n", "2"])
        .env("TSUNAGI_NODE_MAP", "1")
        .env("TSUNAGI_INTERNODE", "tcp")
        .env("TSUNAGI_TCP_IF", "127.0.0.1")
        .env("TSUNAGI_TCP_PORTS", format!("{base}-{}", base + 3))
        .env("TSUNAGI_SPIN", "50")
        .env("TSUNAGI_YIELDS", "20")
        .arg(p2p_check())
        .args(["pause", "order", "sizes"]);
    limit_nofile(&mut c, 1024);
    let child = spawn(c);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let flood = std::thread::spawn(move || {
        let mut held = Vec::new();
        let t = Instant::now();
        for port in [base, base + 1] {
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            while t.elapsed() < Duration::from_secs(20) && TcpStream::connect(addr).is_err() {
                std::thread::sleep(Duration::from_millis(10));
            }
            for _ in 0..1100 {
                if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                    held.push(s);
                }
                if t.elapsed() > Duration::from_secs(25) {
                    break;
                }
            }
        }
        let opened = held.len();
        while !stop2.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        opened
    });
    let (out, took) = finish(child, Duration::from_secs(90));
    stop.store(true, Ordering::SeqCst);
    let opened = flood.join().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{:?} after {took:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for t in ["pause", "order", "sizes"] {
        assert!(stdout.contains(&format!("OK {t}")), "{stdout}");
    }
    assert!(opened >= 1100, "only {opened} flood connections were made");
    assert!(stderr.contains("no complete hello"), "{stderr}");
}

/// Issue 14, item 2: the same against mpirun's agent port, with mpirun limited to 32
/// descriptors: it must neither spin at the limit nor lose its real agent.
#[test]
fn half_open_flood_against_mpirun() {
    let _s = serial();
    raise_own_nofile(4096);
    let dir = temp_dir("flood-mpirun");
    let mut c = agent_job(&dir, &["barrier", "barrier"], &pmi_rank());
    limit_nofile(&mut c, 32);
    let child = spawn(c);
    let mpirun_pid = child.id();
    let addr: SocketAddr = wait_for_file(&dir.join("addr"), Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let mut held = Vec::new();
    let t = Instant::now();
    while held.len() < 1100 && t.elapsed() < Duration::from_secs(8) {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            held.push(s);
        }
    }
    // mpirun sits at its descriptor limit with connections still queued: it must sleep.
    let before = cpu_ticks(mpirun_pid);
    std::thread::sleep(Duration::from_millis(1500));
    let spent = cpu_ticks(mpirun_pid) - before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    std::fs::write(dir.join("go"), b"").unwrap();
    let (out, took) = finish(child, Duration::from_secs(60));
    drop(held);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{:?} after {took:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        spent * 1000 / hz < 300,
        "mpirun used {} ms of CPU in 1.5 s under the flood (busy loop?)",
        spent * 1000 / hz
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 14, item 3: neither the agent key nor the job key is on any process's command
/// line or in any process's environment; ranks hold the job key only in a descriptor.
#[test]
fn secrets_are_in_no_command_line_or_environment() {
    let _s = serial();
    let dir = temp_dir("secrets");
    std::fs::write(dir.join("go"), b"").unwrap();
    let mark = format!("TSUNAGI_TEST_MARK=secrets{}", std::process::id());
    let mut c = Command::new(mpirun());
    c.args(["--host", "localhost:1,tsunagi-test-remote:1"])
        .arg("--launch-agent")
        .arg(launch_script(&dir))
        .args(["--launch-addr", "127.0.0.1", "--env", &mark])
        .arg(pmi_rank())
        .args(["barrier", "sleep=3", "barrier"]);
    let child = spawn(c);
    let mpirun_pid = child.id().to_string();
    let r0 = find_rank(&mark, 0, Duration::from_secs(20)).expect("rank 0 never ran");
    let r1 = find_rank(&mark, 1, Duration::from_secs(20)).expect("rank 1 never ran");
    let key = rank_key(&r0);
    assert_eq!(rank_key(&r1), key, "both ranks hold the same job key");
    // The agent is rank 1's parent.
    let stat = text(&proc_file(&r1, "stat"));
    let ppid = stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(1)
        .unwrap()
        .to_string();
    let agent_argv = entries(&proc_file(&ppid, "cmdline"));
    let at = agent_argv
        .iter()
        .position(|a| a == "--agent")
        .unwrap_or_else(|| panic!("rank 1's parent is not an agent: {agent_argv:?}"));
    assert_eq!(agent_argv.len(), at + 3, "agent argv: {agent_argv:?}");
    let mut checked = 0;
    for pid in all_pids() {
        let cmdline = text(&proc_file(&pid, "cmdline")).replace('\0', " ");
        let environ = text(&proc_file(&pid, "environ")).replace('\0', " ");
        assert!(
            !cmdline.contains(&key) && !environ.contains(&key),
            "the job key is visible in /proc/{pid} ({cmdline})"
        );
        if [&mpirun_pid, &ppid, &r0, &r1].contains(&&pid) {
            checked += 1;
            assert!(
                !environ.contains("TSUNAGI_JOB_KEY="),
                "/proc/{pid}/environ: {environ}"
            );
            // No 32-hex-digit token (an agent key) on these command lines or environments.
            assert!(
                !has_hex_token(&cmdline, 32),
                "/proc/{pid}/cmdline: {cmdline}"
            );
            assert!(
                !has_hex_token(&environ, 32),
                "/proc/{pid}/environ: {environ}"
            );
        }
    }
    assert_eq!(checked, 4, "mpirun, agent and both ranks were inspected");
    let (out, _) = finish(child, Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
