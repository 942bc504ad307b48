//! Soak test (issue 14; not in CI, see `scripts/soak`): random traffic between all ranks,
//! every message checked. `mpirun -n 4 soak [MESSAGES] [MAX_BYTES]`.
//!
//! In each round every rank sends 16 messages to random peers with random sizes (mostly
//! small, some eager-sized, some rendezvous up to MAX_BYTES), all receives are wildcards
//! (`ANY_SOURCE`) on the round's tag, and each message carries its per-pair sequence
//! number and its length;
//! its bytes are a function of (sender, receiver, sequence number). The receiver checks the
//! sequence (MPI's per-pair order), the length and every byte. Destinations and sizes come
//! from a generator seeded by (sender, round), so every rank knows how many messages to
//! expect without telling. Rank 0 prints one line:
//! `SOAK messages=M bytes=B errors=E rounds=R slowest_round_ms=T` and the job exits 1 on
//! any error.

use std::time::{Duration, Instant};

use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, ReqId, SendMode, ThreadLevel, ANY_SOURCE};

const PER_ROUND: usize = 16;
const HEAD: usize = 16;

struct Rng(u64);

impl Rng {
    fn new(a: u64, b: u64) -> Rng {
        Rng((a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The messages `src` sends in `round`: (destination, payload bytes).
fn plan(src: usize, round: u64, size: usize, max: usize) -> Vec<(usize, usize)> {
    let mut r = Rng::new(src as u64 + 1, round + 1);
    (0..PER_ROUND)
        .map(|_| {
            let dst = if size == 1 {
                0
            } else {
                (src + 1 + r.below(size as u64 - 1) as usize) % size
            };
            let len = match r.below(10) {
                0..=6 => r.below(257) as usize,
                7 | 8 => r.below(64 * 1024) as usize,
                _ => r.below(max as u64 + 1) as usize,
            };
            (dst, len)
        })
        .collect()
}

fn fill(buf: &mut [u8], src: usize, dst: usize, seq: u64) {
    let mut x = Rng::new((src * 131 + dst) as u64 + 7, seq + 3);
    for chunk in buf.chunks_mut(8) {
        let v = x.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let max: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    init(ThreadLevel::Single, &tsunagi_transports::REGISTRY).expect("MPI_Init");
    let rt = tsunagi_core::rt("soak").expect("runtime");
    let (me, size) = (rt.world_rank() as usize, rt.world_size() as usize);
    let byte = Datatype::builtin(Builtin::Byte);
    let rounds = target.div_ceil((size * PER_ROUND) as u64).max(1);
    let mut send_seq = vec![0u64; size];
    let mut recv_seq = vec![0u64; size];
    let (mut messages, mut bytes, mut errors) = (0u64, 0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let mut first_error = None::<String>;
    for round in 0..rounds {
        let t = Instant::now();
        // The round's tag: a receive of this round must not take a faster rank's message
        // of the next round. With one tag for all rounds, two ranks can each use up their
        // receives on early arrivals and then wait forever for their own rendezvous sends
        // to each other (the program would rely on buffering that MPI does not promise).
        let tag = (round % 30_000) as i32 + 1;
        // What arrives here this round (order among senders is free: wildcard receives).
        let mut incoming = Vec::new();
        for src in 0..size {
            for (dst, len) in plan(src, round, size, max) {
                if dst == me {
                    incoming.push(len);
                }
            }
        }
        // Room for the largest message `plan` makes (eager-sized ones reach 64 KiB even
        // when MAX_BYTES is smaller).
        let cap = HEAD + max.max(64 * 1024);
        let mut recv_bufs: Vec<Vec<u8>> = incoming.iter().map(|_| vec![0u8; cap]).collect();
        let mut reqs: Vec<Option<ReqId>> = Vec::new();
        for b in recv_bufs.iter_mut() {
            // SAFETY: each buffer lives, untouched, until waitall below returns.
            let id = unsafe {
                rt.irecv(
                    "MPI_Irecv",
                    b.as_mut_ptr(),
                    b.len() as i64,
                    &byte,
                    ANY_SOURCE,
                    tag,
                    CommId::WORLD,
                )
            }
            .expect("irecv");
            reqs.push(Some(id));
        }
        let mut send_bufs = Vec::new();
        for (dst, len) in plan(me, round, size, max) {
            let seq = send_seq[dst];
            send_seq[dst] += 1;
            let mut b = vec![0u8; HEAD + len];
            b[..8].copy_from_slice(&seq.to_le_bytes());
            b[8..16].copy_from_slice(&(len as u64).to_le_bytes());
            fill(&mut b[HEAD..], me, dst, seq);
            send_bufs.push((dst, b));
        }
        for (dst, b) in &send_bufs {
            // SAFETY: `b` lives, untouched, until waitall below returns.
            let id = unsafe {
                rt.isend(
                    "MPI_Isend",
                    b.as_ptr(),
                    b.len() as i64,
                    &byte,
                    *dst as i32,
                    tag,
                    CommId::WORLD,
                    SendMode::Standard,
                )
            }
            .expect("isend");
            reqs.push(Some(id));
        }
        let statuses = rt.waitall("MPI_Waitall", &reqs).expect("waitall");
        for (i, b) in recv_bufs.iter().enumerate() {
            let st = &statuses[i];
            let src = st.source as usize;
            let mut bad = |what: String| {
                errors += 1;
                first_error.get_or_insert(format!("rank {me} round {round} from {src}: {what}"));
            };
            if st.bytes < HEAD {
                bad(format!("{} bytes, shorter than the header", st.bytes));
                continue;
            }
            let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
            let len = u64::from_le_bytes(b[8..16].try_into().unwrap()) as usize;
            if seq != recv_seq[src] {
                bad(format!("sequence {seq}, expected {}", recv_seq[src]));
            }
            recv_seq[src] = seq + 1;
            if len + HEAD != st.bytes {
                bad(format!("length {len} but {} bytes arrived", st.bytes));
                continue;
            }
            let mut want = vec![0u8; len];
            fill(&mut want, src, me, seq);
            if b[HEAD..HEAD + len] != want[..] {
                bad(format!("payload of message {seq} ({len} bytes) differs"));
            }
            messages += 1;
            bytes += st.bytes as u64;
        }
        slowest = slowest.max(t.elapsed());
    }
    // Totals over the job, and the slowest round anywhere.
    let mine = [messages, bytes, errors, slowest.as_micros() as u64];
    let mine: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    let all = rt
        .allgather_bytes("soak", CommId::WORLD, &mine)
        .expect("allgather");
    if let Some(e) = &first_error {
        eprintln!("SOAK ERROR {e}");
    }
    if me == 0 {
        let field =
            |b: &Vec<u8>, i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        let sum = |i: usize| all.iter().map(|b| field(b, i)).sum::<u64>();
        let slow = all.iter().map(|b| field(b, 3)).max().unwrap_or(0);
        println!(
            "SOAK messages={} bytes={} errors={} rounds={rounds} slowest_round_ms={:.1}",
            sum(0),
            sum(1),
            sum(2),
            slow as f64 / 1000.0
        );
    }
    let failed = all
        .iter()
        .any(|b| u64::from_le_bytes(b[16..24].try_into().unwrap()) != 0);
    finalize().expect("MPI_Finalize");
    if failed {
        std::process::exit(1);
    }
}
