//! Shared-memory ring enqueue + dequeue: one `Producer::try_push` followed by one
//! `Consumer::pop` of that message, in one thread, for payloads of 8 B (the latency case:
//! stamp, header and payload share one cache line), 256 B, and the largest payload the
//! transport sends eagerly with its default configuration (16 KiB).
//!
//! Why this path matters: every message between two ranks of one node (eager data, RTS,
//! CTS, FIN, streamed chunks) is one push into and one pop out of such a ring, so this is
//! the floor under the intra-node latency and message rate. Being single-threaded, the
//! benchmark measures the ring's own instructions and copies with the cells hot in this
//! core's cache; it leaves out the cross-core cache-line transfers a real pair of
//! processes adds (`examples/shm_pingpong.rs` measures those end to end). `pop` hands the
//! payload out in place, as the transport does; copying it to its destination belongs to
//! the request layer and is not timed.
//!
//! The ring is the real code (`tsunagi_shm::internals`) over a zeroed, page-aligned heap
//! block laid out as the transport's segment for two local ranks with the default
//! `ShmConfig` (same cell size, cells per ring and ring offset), so the ring wraps over all
//! its cells as in use.

use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tsunagi_p2p::Header;
use tsunagi_shm::internals::{Consumer, Layout, Producer, RingRef};
use tsunagi_shm::ShmConfig;

/// A zeroed, page-aligned heap block standing in for the shared segment.
struct Segment {
    ptr: *mut u8,
    alloc: AllocLayout,
}

impl Segment {
    fn new(bytes: usize) -> Segment {
        let alloc = AllocLayout::from_size_align(bytes, 4096).expect("segment layout");
        // SAFETY: `alloc` has a non-zero size (a segment always holds its header).
        let ptr = unsafe { alloc_zeroed(alloc) };
        assert!(!ptr.is_null(), "out of memory");
        Segment { ptr, alloc }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: allocated in Segment::new with this layout, freed once.
        unsafe { dealloc(self.ptr, self.alloc) }
    }
}

fn bench_ring(c: &mut Criterion) {
    let (layout, eager): (Layout, usize) = ShmConfig::default().resolve(2);
    let seg = Segment::new(layout.total_bytes);
    // SAFETY: the ring from local rank 0 to 1 starts at a 128-byte aligned offset inside
    // the zeroed block and spans `ring_stride >= PAD + cells_per_ring * cell_bytes` bytes
    // of it (Layout::new); the block outlives the producer and consumer below (both are
    // dropped at the end of this function, before `seg`); cell size and count come from
    // the transport's own sizing, which meets RingRef::new's requirements; one producer and
    // one consumer use it.
    let ring = unsafe {
        RingRef::new(
            seg.ptr.add(layout.ring_offset(0, 1)),
            layout.cells_per_ring,
            layout.cell_bytes,
        )
    };
    assert!(eager <= ring.max_payload());
    let mut prod = Producer::new(ring);
    let mut cons = Consumer::new(ring);

    let payload = vec![0x5au8; eager];
    let mut g = c.benchmark_group("shm_ring");
    for (name, len) in [("8B", 8), ("256B", 256), ("eager_max", eager)] {
        let hdr = Header {
            kind: 1,
            src: 0,
            tag: 7,
            len: len as u64,
            cookie: 42,
            ..Header::default()
        };
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("push_pop_{name}"), |b| {
            b.iter(|| {
                let pushed = prod.try_push(black_box(&hdr), black_box(&payload[..len]));
                let popped = cons.pop(1, |h, p| {
                    black_box((h, p));
                });
                assert!(pushed && popped.count == 1);
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_ring
}
criterion_main!(benches);
