//! Many random messages among 3-4 engines over two simulated transports with random
//! delays, jitter, capacities, poll bounds and single-copy modes; receives with random
//! wildcards (and some too small), posted in random order interleaved with the sends.
//! Checked: every message is received exactly once with the right envelope, length,
//! truncation class and content, and at each receiver the messages of one (sender, tag,
//! communicator) are matched in the order they were sent (MPI's non-overtaking rule
//! stated over posting order: a receive posted earlier never gets a later message of a
//! triple it accepts while an earlier one is matched by a later receive).
//!
//! Seeds 1..=200 run by default (well under a second); `TSUNAGI_SIM_SEEDS=N` runs 1..=N.
//! Every assertion names its seed, and a seed replays exactly.

use super::*;

#[derive(Clone, Copy)]
struct Spec {
    src: i32,
    tag: i32,
    comm: CommId,
    cap: usize,
}

struct Msg {
    src: Rank,
    dst: Rank,
    comm: CommId,
    tag: i32,
    /// Position among the messages of (src, dst, comm, tag), in send order.
    seq: usize,
    data: Vec<u8>,
}

struct Recv {
    at: Rank,
    req: ReqId,
    spec: Spec,
    buf: Vec<u8>,
    status: Option<Status>,
}

struct Send {
    at: Rank,
    req: ReqId,
    status: Option<Status>,
}

fn random_link(rng: &mut SplitMix64) -> LinkConfig {
    LinkConfig {
        delay: rng.below(4),
        jitter: rng.below(6),
        capacity: 1 + rng.below(6) as usize,
    }
}

fn random_single_copy(rng: &mut SplitMix64) -> SingleCopy {
    [SingleCopy::Off, SingleCopy::Read, SingleCopy::Refuse][rng.below(3) as usize]
}

/// What the runs exercised, summed over seeds, so that the test fails if a change of the
/// generator stops provoking any of it.
#[derive(Default, Debug)]
struct Coverage {
    truncated: usize,
    cancelled: usize,
    mprobed: usize,
    wildcard_source: usize,
    wildcard_tag: usize,
    to_self: usize,
    synchronous: usize,
    buffered: usize,
    full: u64,
    reads: u64,
    reads_refused: u64,
}

fn run(seed: u64, cov: &mut Coverage) {
    let mut rng = SplitMix64::new(seed);
    let n = 3 + rng.below(2) as usize;
    let near_eager = 16 + rng.below(200) as usize;
    let far_eager = 16 + rng.below(100) as usize;
    let l = random_link(&mut rng);
    let near = TransportConfig::new("near")
        .limits(near_eager, near_eager + rng.below(300) as usize)
        .single_copy(random_single_copy(&mut rng))
        .link(l.delay, l.jitter, l.capacity)
        .max_per_poll(1 + rng.below(8) as usize);
    let far = TransportConfig::new("far")
        .limits(far_eager, far_eager + 1 + rng.below(100) as usize)
        .single_copy(random_single_copy(&mut rng))
        .link(2 + rng.below(5), rng.below(10), 1 + rng.below(4) as usize);
    let fabric = Fabric::new(n, seed, vec![near, far]);
    for t in 0..2 {
        for src in 0..n as Rank {
            for dst in 0..n as Rank {
                if rng.chance(1, 3) {
                    fabric.set_link(t, src, dst, random_link(&mut rng));
                }
            }
        }
    }
    // One transport per unordered pair, as real transports are symmetric.
    let pair_route: Vec<usize> = (0..n * n).map(|_| rng.below(2) as usize).collect();
    let mut job = Job::new(fabric, move |a, b| {
        let (lo, hi) = (a.min(b) as usize, a.max(b) as usize);
        pair_route[lo * n + hi]
    });
    let max_len = 4 * (near_eager + 400).max(far_eager + 200);

    // The plan: messages in send order, and per receiver one receive per message to it.
    let nmsg = 100 + rng.below(100) as usize;
    let mut msgs = Vec::new();
    let mut seqs: HashMap<(Rank, Rank, CommId, i32), usize> = HashMap::new();
    let mut specs: Vec<Vec<Spec>> = vec![Vec::new(); n];
    let mut modes = Vec::new();
    for id in 0..nmsg as u64 {
        let src = rng.below(n as u64) as Rank;
        let dst = if rng.chance(1, 8) {
            src
        } else {
            (src + 1 + rng.below(n as u64 - 1) as Rank) % n as Rank
        };
        let comm = if rng.chance(1, 3) { DUP } else { CommId::WORLD };
        let tag = rng.below(3) as i32;
        let len = match rng.below(4) {
            0 => 8 + rng.below(16) as usize,
            1 => 8 + rng.below(300) as usize,
            2 => 8 + rng.below(max_len as u64 - 8) as usize,
            _ => [near_eager, near_eager + 1, far_eager, far_eager + 1][rng.below(4) as usize],
        }
        .max(8);
        let mut data = fill(seed ^ (id << 20), len);
        data[..8].copy_from_slice(&id.to_le_bytes());
        let seq = seqs.entry((src, dst, comm, tag)).or_default();
        msgs.push(Msg {
            src,
            dst,
            comm,
            tag,
            seq: *seq,
            data,
        });
        *seq += 1;
        modes.push(match rng.below(8) {
            0 | 1 => SendMode::Synchronous,
            2 => SendMode::Buffered,
            _ => SendMode::Standard,
        });
        let cap = if rng.chance(1, 10) {
            8 + rng.below(len as u64 - 7) as usize
        } else {
            max_len
        };
        specs[dst as usize].push(Spec {
            src: if rng.chance(1, 3) {
                ANY_SOURCE
            } else {
                src as i32
            },
            tag: if rng.chance(1, 3) { ANY_TAG } else { tag },
            comm,
            cap,
        });
    }
    for s in specs.iter_mut() {
        for i in (1..s.len()).rev() {
            s.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }
    let mut to_send: Vec<std::collections::VecDeque<usize>> = (0..n)
        .map(|r| (0..nmsg).filter(|&i| msgs[i].src == r as Rank).collect())
        .collect();

    // Interleave posting, progress, clock and tests at random.
    let mut sends: Vec<Send> = Vec::new();
    let mut recvs: Vec<Recv> = Vec::new();
    let mut guard = 0;
    while to_send.iter().any(|q| !q.is_empty()) || specs.iter().any(|s| !s.is_empty()) {
        guard += 1;
        assert!(guard < 1_000_000, "seed {seed}: posting loop runs away");
        let r = rng.below(n as u64) as usize;
        match rng.below(10) {
            0..=2 => {
                if let Some(i) = to_send[r].pop_front() {
                    let m = &msgs[i];
                    let req = job.isend_on(m.comm, m.src, m.dst as i32, m.tag, &m.data, modes[i]);
                    sends.push(Send {
                        at: m.src,
                        req,
                        status: None,
                    });
                }
            }
            3..=5 => {
                if let Some(spec) = specs[r].pop() {
                    let mut buf = vec![0u8; spec.cap];
                    // Sometimes MPI_Improbe + MPI_Imrecv: the same match, taken earlier.
                    let probed = if rng.chance(1, 4) {
                        job.e[r]
                            .probe(spec.comm, spec.src, spec.tag, true)
                            .unwrap()
                            .and_then(|(_, m)| m)
                    } else {
                        None
                    };
                    let req = match probed {
                        Some(msg) => {
                            cov.mprobed += 1;
                            let e = &mut job.e[r];
                            let b = Buf(buf.as_mut_ptr());
                            let id = e.new_request(
                                None,
                                b,
                                spec.cap,
                                byte(),
                                spec.comm,
                                ANY_SOURCE,
                                ANY_TAG,
                                false,
                            );
                            e.start_mrecv(id, msg).unwrap();
                            id
                        }
                        None => job.irecv_on(spec.comm, r as Rank, spec.src, spec.tag, &mut buf),
                    };
                    recvs.push(Recv {
                        at: r as Rank,
                        req,
                        spec,
                        buf,
                        status: None,
                    });
                }
            }
            6 | 7 => {
                job.e[r].progress().expect("progress");
            }
            8 => job.fabric.step(),
            _ => collect(&mut job, &mut sends, &mut recvs, &mut rng),
        }
    }

    // Everything posted: let it run, then cancel the receives nothing can match and
    // drain what is left in the unexpected queues with ANY_SOURCE/ANY_TAG receives.
    job.settle();
    for r in recvs.iter_mut().filter(|r| r.status.is_none()) {
        if let Some(st) = job.e[r.at as usize].test(r.req).unwrap() {
            r.status = Some(st);
            continue;
        }
        job.e[r.at as usize].cancel(r.req).unwrap();
        let st = job.e[r.at as usize].test(r.req).unwrap();
        let st = st.unwrap_or_else(|| panic!("seed {seed}: unmatched receive not cancelled"));
        assert!(st.cancelled, "seed {seed}: cancel of an idle receive");
        r.status = Some(st);
    }
    for at in 0..n as Rank {
        for comm in [CommId::WORLD, DUP] {
            while job.e[at as usize]
                .probe(comm, ANY_SOURCE, ANY_TAG, false)
                .unwrap()
                .is_some()
            {
                let spec = Spec {
                    src: ANY_SOURCE,
                    tag: ANY_TAG,
                    comm,
                    cap: max_len,
                };
                let mut buf = vec![0u8; max_len];
                let req = job.irecv_on(comm, at, ANY_SOURCE, ANY_TAG, &mut buf);
                recvs.push(Recv {
                    at,
                    req,
                    spec,
                    buf,
                    status: None,
                });
            }
        }
    }
    job.settle();
    for r in recvs.iter_mut().filter(|r| r.status.is_none()) {
        r.status = Some(job.wait(r.at, r.req));
    }
    for s in sends.iter_mut().filter(|s| s.status.is_none()) {
        s.status = Some(job.wait(s.at, s.req));
    }
    assert!(sends.iter().all(|s| !s.status.unwrap().cancelled));

    // Every message once, with its envelope and content.
    let mut seen = vec![false; nmsg];
    let mut last: HashMap<(Rank, Rank, CommId, i32), usize> = HashMap::new();
    for r in &recvs {
        let st = r.status.unwrap();
        if st.cancelled {
            cov.cancelled += 1;
            continue;
        }
        let id = u64::from_le_bytes(r.buf[..8].try_into().unwrap()) as usize;
        assert!(id < nmsg, "seed {seed}: garbage in a receive buffer");
        assert!(!seen[id], "seed {seed}: message {id} received twice");
        seen[id] = true;
        let m = &msgs[id];
        assert_eq!(m.dst, r.at, "seed {seed}: message {id} at the wrong rank");
        assert_eq!(
            m.comm, r.spec.comm,
            "seed {seed}: message {id} crossed communicators"
        );
        assert!(r.spec.src == ANY_SOURCE || r.spec.src == m.src as i32);
        assert!(r.spec.tag == ANY_TAG || r.spec.tag == m.tag);
        let take = m.data.len().min(r.spec.cap);
        let error = if m.data.len() > r.spec.cap {
            TRUNCATE
        } else {
            0
        };
        assert_eq!(
            (st.source, st.tag, st.bytes, st.error),
            (m.src as i32, m.tag, take, error),
            "seed {seed}: status of message {id}"
        );
        assert!(
            r.buf[..take] == m.data[..take],
            "seed {seed}: content of message {id}"
        );
        // Posting order at one receiver: later receives get later messages of a triple.
        let key = (m.src, m.dst, m.comm, m.tag);
        if let Some(&prev) = last.get(&key) {
            assert!(
                m.seq > prev,
                "seed {seed}: message {} of {key:?} matched after message {prev}",
                m.seq
            );
        }
        last.insert(key, m.seq);
        cov.truncated += (error != 0) as usize;
        cov.wildcard_source += (r.spec.src == ANY_SOURCE) as usize;
        cov.wildcard_tag += (r.spec.tag == ANY_TAG) as usize;
        cov.to_self += (m.src == m.dst) as usize;
    }
    cov.synchronous += modes
        .iter()
        .filter(|&&m| m == SendMode::Synchronous)
        .count();
    cov.buffered += modes.iter().filter(|&&m| m == SendMode::Buffered).count();
    for t in 0..2 {
        let st = job.fabric.stats(t);
        cov.full += st.full;
        cov.reads += st.reads;
        cov.reads_refused += st.reads_failed;
    }
    let missing: Vec<usize> = (0..nmsg).filter(|&i| !seen[i]).collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: never received: {missing:?}"
    );
    job.settle();
    for (i, e) in job.e.iter().enumerate() {
        assert_eq!(e.live_requests(), 0, "seed {seed}: rank {i} leaks requests");
        assert_eq!(
            e.core.bsend_used, 0,
            "seed {seed}: buffered-send space not returned"
        );
    }
}

/// Test a few outstanding requests (collecting them frees their ids for reuse).
fn collect(job: &mut Job, sends: &mut [Send], recvs: &mut [Recv], rng: &mut SplitMix64) {
    for _ in 0..4 {
        if !sends.is_empty() {
            let s = &mut sends[rng.below(sends.len() as u64) as usize];
            if s.status.is_none() {
                s.status = job.e[s.at as usize].test(s.req).unwrap();
            }
        }
        if !recvs.is_empty() {
            let r = &mut recvs[rng.below(recvs.len() as u64) as usize];
            if r.status.is_none() {
                r.status = job.e[r.at as usize].test(r.req).unwrap();
            }
        }
    }
}

#[test]
fn random_traffic_keeps_order_and_content() {
    let seeds: u64 = std::env::var("TSUNAGI_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut cov = Coverage::default();
    for seed in 1..=seeds {
        run(seed, &mut cov);
    }
    let c = &cov;
    let counts = [
        c.truncated,
        c.cancelled,
        c.mprobed,
        c.wildcard_source,
        c.wildcard_tag,
        c.to_self,
        c.synchronous,
        c.buffered,
    ];
    assert!(
        counts.iter().all(|&k| k > 0) && c.full > 0 && c.reads > 0 && c.reads_refused > 0,
        "the random runs missed a case: {cov:?}"
    );
    eprintln!("random traffic over {seeds} seeds: {cov:?}");
}
