//! Message matching with long queues: the time the request layer takes to find
//!
//! * the posted receive that an arriving EAGER/RTS message matches, in a posted-receive
//!   queue of N entries (`posted/exact/N`: every entry names a source and a tag;
//!   `posted/wildcard/N`: only the last entry, an `MPI_ANY_SOURCE`/`MPI_ANY_TAG` receive,
//!   accepts the message), and
//! * the unexpected message that a new receive matches, in an unexpected queue of N
//!   entries (`unexpected/exact/N`: the receive names source and tag;
//!   `unexpected/any_source/N`: `MPI_ANY_SOURCE` with a tag).
//!
//! Why this path matters: matching runs under the engine lock for every arriving message
//! and every receive that is started, and both searches are linear in the queue length
//! (MPI's ordering rules: the earliest posted receive, or the earliest arrival, wins).
//! Codes that pre-post many receives, or that let many messages arrive before their
//! receives, pay this per message. Each case is the worst one: the match is the last entry.
//!
//! The benchmark drives the engine's own queue type (`tsunagi_core::matching::Queues`, the
//! methods `Engine` calls), not a copy of its logic. One iteration takes the matching entry
//! out and appends it again (what the engine does when a receive finds nothing unexpected,
//! or an arrival finds no receive), so the queue keeps its length and the match stays last.
//! Throughput is in queue entries examined (N per iteration).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tsunagi_core::matching::{Arrived, Posted, Queues, ANY_WORLD};
use tsunagi_core::{ReqId, ANY_TAG};

/// Queue lengths: a lone entry, a busy rank, a pathological backlog.
const LENGTHS: [usize; 3] = [1, 64, 1024];

/// Senders the queued entries are spread over (world ranks 0..SOURCES).
const SOURCES: usize = 16;

/// Entry `i` of a queue: from (or for) world rank `i % SOURCES` with tag `i`, so only the
/// last entry matches the last entry's source and tag.
fn envelope(i: usize) -> (u32, i32) {
    ((i % SOURCES) as u32, i as i32)
}

/// N posted receives with specific sources and tags.
fn posted_exact(n: usize) -> Queues {
    let mut q = Queues::default();
    for i in 0..n {
        let (src, tag) = envelope(i);
        q.post(Posted {
            id: ReqId(i as u32),
            src,
            tag,
        });
    }
    q
}

/// N-1 specific posted receives, then one for any source and any tag.
fn posted_wildcard(n: usize) -> Queues {
    let mut q = posted_exact(n - 1);
    q.post(Posted {
        id: ReqId(n as u32 - 1),
        src: ANY_WORLD,
        tag: ANY_TAG,
    });
    q
}

/// N unexpected messages (announced rendezvous: no payload buffer to allocate).
fn unexpected(n: usize) -> Queues {
    let mut q = Queues::default();
    for i in 0..n {
        let (src, tag) = envelope(i);
        q.push_unexpected(Arrived::rendezvous(src, tag, 64, i as u64));
    }
    q
}

fn bench_posted(c: &mut Criterion) {
    let mut g = c.benchmark_group("posted");
    for &n in &LENGTHS {
        g.throughput(Throughput::Elements(n as u64));
        let cases = [
            ("exact", posted_exact(n), envelope(n - 1)),
            // From a sender none of the specific receives names, with a tag none wants.
            ("wildcard", posted_wildcard(n), (SOURCES as u32, i32::MAX)),
        ];
        for (name, mut q, (src, tag)) in cases {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    let p = q
                        .take_posted(black_box(src), black_box(tag))
                        .expect("matches");
                    q.post(p);
                })
            });
        }
    }
    g.finish();
}

fn bench_unexpected(c: &mut Criterion) {
    let mut g = c.benchmark_group("unexpected");
    for &n in &LENGTHS {
        g.throughput(Throughput::Elements(n as u64));
        let (src, tag) = envelope(n - 1);
        for (name, want_src) in [("exact", src), ("any_source", ANY_WORLD)] {
            let mut q = unexpected(n);
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| {
                    let pos = q
                        .find_unexpected(black_box(want_src), black_box(tag))
                        .expect("matches");
                    let a = q.take_unexpected(pos).expect("valid position");
                    q.push_unexpected(a);
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_posted, bench_unexpected
}
criterion_main!(benches);
