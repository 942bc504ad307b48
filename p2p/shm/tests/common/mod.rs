//! Helpers shared by the integration tests: a multi-process harness that re-executes the
//! test binary once per rank, deterministic payloads and checksums.
#![allow(dead_code)]

use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tsunagi_p2p::{P2pError, Rank};
use tsunagi_shm::{ShmConfig, ShmTransport};

/// Set in the children: "<test>:<rank>:<nranks>:<segment name>".
pub const ROLE: &str = "TSUNAGI_SHM_TEST_ROLE";

/// What a child process knows about its job.
pub struct Job {
    pub rank: usize,
    pub n: usize,
    pub name: String,
}

impl Job {
    /// World ranks of the local ranks: `stride * i + offset`, so tests can use
    /// non-contiguous world ranks.
    pub fn world(&self, stride: Rank, offset: Rank) -> Vec<Rank> {
        (0..self.n as Rank).map(|i| stride * i + offset).collect()
    }

    /// Create (rank 0) or attach (others); the leader waits for everybody and unlinks,
    /// as the MPI core does.
    pub fn setup(&self, world: &[Rank], cfg: &ShmConfig) -> ShmTransport {
        let me = world[self.rank];
        if self.rank == 0 {
            let t = ShmTransport::create(&self.name, world, me, cfg).expect("create");
            let deadline = Instant::now() + Duration::from_secs(60);
            while !t.all_attached() {
                assert!(Instant::now() < deadline, "ranks did not attach");
                std::thread::sleep(Duration::from_millis(1));
            }
            t.unlink().expect("unlink");
            assert!(!std::path::Path::new(&format!("/dev/shm/{}", self.name)).exists());
            t
        } else {
            ShmTransport::attach(&self.name, world, me, cfg).expect("attach")
        }
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Run `body` in `n` child processes (ranks 0..n) and wait for all of them; panics if any
/// child fails or the job exceeds `timeout`. In a child, runs the body and exits.
pub fn run_job(test: &str, n: usize, env: &[(&str, &str)], timeout: Duration, body: fn(&Job)) {
    if let Ok(role) = std::env::var(ROLE) {
        let parts: Vec<&str> = role.splitn(4, ':').collect();
        if parts[0] != test {
            return;
        }
        let job = Job {
            rank: parts[1].parse().unwrap(),
            n: parts[2].parse().unwrap(),
            name: parts[3].to_string(),
        };
        body(&job);
        // Leave without running the rest of the harness (other tests, output capture).
        std::process::exit(0);
    }
    let name = format!(
        "tsunagi-test-{}-{}-{}",
        std::process::id(),
        test,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Option<Child>> = (0..n)
        .map(|r| {
            let mut c = Command::new(&exe);
            c.args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(ROLE, format!("{test}:{r}:{n}:{name}"))
                .stdout(std::process::Stdio::null());
            for (k, v) in env {
                c.env(k, v);
            }
            Some(c.spawn().expect("spawn child"))
        })
        .collect();
    let deadline = Instant::now() + timeout;
    let mut failure: Option<String> = None;
    // Reap children as they finish (a dead child must not stay a zombie: the peer-failure
    // test relies on kill(pid, 0) reporting ESRCH).
    while children.iter().any(|c| c.is_some()) {
        for (r, slot) in children.iter_mut().enumerate() {
            if let Some(c) = slot {
                if let Some(st) = c.try_wait().unwrap() {
                    if !st.success() && failure.is_none() {
                        failure = Some(format!("rank {r} failed: {st}"));
                    }
                    *slot = None;
                }
            }
        }
        if failure.is_some() || Instant::now() > deadline {
            if failure.is_none() {
                failure = Some(format!("job timed out after {timeout:?}"));
            }
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
                let _ = c.wait();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    ShmTransport::unlink_name(&name);
    if let Some(f) = failure {
        panic!("{test}: {f}");
    }
}

/// Deterministic bytes for message `i` from `src` to `dst`.
pub fn fill(src: Rank, dst: Rank, i: u64, buf: &mut [u8]) {
    let mut x = (src as u64) << 48 ^ (dst as u64) << 32 ^ i ^ 0x9e37_79b9_7f4a_7c15;
    x |= 1;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_ne_bytes());
    }
    let rest = chunks.into_remainder();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    let b = x.to_ne_bytes();
    let l = rest.len();
    rest.copy_from_slice(&b[..l]);
}

/// FNV-1a.
pub fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A small xorshift generator.
pub struct Rng(pub u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Mostly small messages, some medium, a few up to `max`.
    pub fn size(&mut self, max: usize) -> usize {
        let r = self.next();
        match r % 10 {
            0..=6 => (r >> 8) as usize % 65,
            7 | 8 => (r >> 8) as usize % 4097.min(max + 1),
            _ => (r >> 8) as usize % (max + 1),
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds (comparable across processes on one host).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Is this a PeerFailed error?
pub fn is_peer_failed(e: &P2pError) -> bool {
    matches!(e, P2pError::PeerFailed { .. })
}
