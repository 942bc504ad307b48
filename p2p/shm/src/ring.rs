//! The single-producer/single-consumer ring of one ordered pair of local ranks.
//!
//! Both ends keep their position privately (`head` in the producer, `tail` in the
//! consumer), so the hot path touches only the cell itself:
//!
//! * The producer writes header and payload into cell `head % n`, then Release-stores the
//!   cell's stamp (sequence and length in one word). It reads the consumer's published tail
//!   only when its cached copy says the ring is full (lazy tail refresh, as in PM on the
//!   Martini NIC), so the tail line stays in the consumer's cache.
//! * The consumer Acquire-loads the stamp of cell `tail % n`; a stamp carrying the expected
//!   sequence means header, length and payload are visible. After handing the message out it
//!   Release-stores its new tail, which lets the producer reuse the cell.
//!
//! Waking a producer that sleeps on a full ring: the producer sets `producer_waiting`,
//! issues a SeqCst fence and re-reads the tail; the consumer, whenever its tail crosses a
//! multiple of half the ring, stores the tail, issues a SeqCst fence and reads the flag.
//! This is Dekker's pattern: either the producer's re-read sees room, or the consumer sees
//! the flag (and rings the producer's doorbell). A full ring holds `n` messages, so the
//! consumer crosses a half-ring mark within `n/2` messages; checking only there keeps the
//! fence off the consumer's per-message path.

use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, Ordering};

use tsunagi_p2p::Header;

use crate::layout::{CellHead, RingCtl, PAYLOAD_OFFSET};

/// Where a ring lives: its control block and `ncells` cells of `cell_bytes` right after it.
#[derive(Clone, Copy, Debug)]
pub struct RingRef {
    ctl: NonNull<RingCtl>,
    cells: NonNull<u8>,
    ncells: u64,
    cell_bytes: usize,
}

// SAFETY: the pointers refer to shared memory that the owner keeps mapped while rings are
// used (RingRef::new's contract); nothing in it is tied to the creating thread.
unsafe impl Send for RingRef {}

impl RingRef {
    /// # Safety
    /// `base` must point to a zero-initialised (or previously used as such) region of at
    /// least `PAD + ncells * cell_bytes` bytes, 128-byte aligned, that stays mapped while any
    /// `Producer`/`Consumer` built on it is used; `cell_bytes` a multiple of 64 and larger than
    /// `PAYLOAD_OFFSET`; `ncells >= 2`. At most one producer and one consumer use it at a time.
    pub unsafe fn new(base: *mut u8, ncells: usize, cell_bytes: usize) -> RingRef {
        debug_assert!(ncells >= 2 && cell_bytes & 63 == 0 && cell_bytes > PAYLOAD_OFFSET);
        debug_assert!(base as usize & 127 == 0);
        RingRef {
            ctl: NonNull::new(base as *mut RingCtl).expect("null ring"),
            // SAFETY: the caller guarantees the region extends past the control block.
            cells: NonNull::new(unsafe { base.add(std::mem::size_of::<RingCtl>()) }).unwrap(),
            ncells: ncells as u64,
            cell_bytes,
        }
    }

    /// Payload capacity of one cell.
    #[inline]
    pub fn max_payload(&self) -> usize {
        self.cell_bytes - PAYLOAD_OFFSET
    }

    #[inline]
    fn ctl(&self) -> &RingCtl {
        // SAFETY: RingRef::new's contract: the control block is mapped and aligned; all its
        // fields are atomics, so shared references are fine across processes.
        unsafe { self.ctl.as_ref() }
    }

    #[inline]
    fn cell(&self, seq: u64) -> *mut u8 {
        let i = (seq % self.ncells) as usize;
        // SAFETY: i < ncells, so the cell lies inside the region RingRef::new vouches for.
        unsafe { self.cells.as_ptr().add(i * self.cell_bytes) }
    }
}

/// The stamp that marks cell contents for message number `seq` with `len` payload bytes.
/// `seq + 1` so that a zero-filled ring never looks full; 32 bits suffice because the
/// previous occupant of a cell is `ncells` (< 2^32) messages older.
#[inline]
fn stamp(seq: u64, len: usize) -> u64 {
    ((seq.wrapping_add(1) as u32 as u64) << 32) | len as u64
}

/// Copy `src` to `dst`. Payloads of up to 16 bytes (the latency-critical small messages)
/// are moved with two possibly overlapping unaligned loads/stores instead of a call into
/// `memcpy`, whose dispatch costs as much as the copy at this size.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and not overlap `src`.
#[inline(always)]
unsafe fn copy_payload(src: &[u8], dst: *mut u8) {
    let n = src.len();
    let s = src.as_ptr();
    // SAFETY (all arms): every access stays within [0, n) of `src` and `dst`, which the
    // caller vouches for; unaligned accessors are used throughout.
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                *dst = *s;
                *dst.add(n / 2) = *s.add(n / 2);
                *dst.add(n - 1) = *s.add(n - 1);
            }
            4..=7 => {
                let a = ptr::read_unaligned(s as *const u32);
                let b = ptr::read_unaligned(s.add(n - 4) as *const u32);
                ptr::write_unaligned(dst as *mut u32, a);
                ptr::write_unaligned(dst.add(n - 4) as *mut u32, b);
            }
            8..=16 => {
                let a = ptr::read_unaligned(s as *const u64);
                let b = ptr::read_unaligned(s.add(n - 8) as *const u64);
                ptr::write_unaligned(dst as *mut u64, a);
                ptr::write_unaligned(dst.add(n - 8) as *mut u64, b);
            }
            _ => ptr::copy_nonoverlapping(s, dst, n),
        }
    }
}

/// The sending end. Lives in the producer's private memory.
pub struct Producer {
    ring: RingRef,
    head: u64,
    cached_tail: u64,
}

impl Producer {
    /// The producer of `ring`, starting at the consumer's published tail (0 in a fresh ring).
    pub fn new(ring: RingRef) -> Producer {
        let t = ring.ctl().tail.load(Ordering::Acquire);
        Producer {
            ring,
            head: t,
            cached_tail: t,
        }
    }

    /// Copy `hdr` and `payload` into the next cell and publish it. Returns false, without
    /// side effects other than setting the waiting flag, when the ring is full.
    /// `payload.len()` must be at most `max_payload()` (checked by the caller).
    #[inline]
    pub fn try_push(&mut self, hdr: &Header, payload: &[u8]) -> bool {
        debug_assert!(payload.len() <= self.ring.max_payload());
        let n = self.ring.ncells;
        if self.head - self.cached_tail >= n && !self.refresh_tail() {
            return false;
        }
        let cell = self.ring.cell(self.head);
        // SAFETY: the cell is ours: the consumer released it (its tail, loaded with Acquire,
        // is past `head - n`, so its reads of the previous contents happened before), and it
        // will not read it again before our Release store of the new stamp. Header and
        // payload regions are in bounds (payload.len() <= max_payload).
        unsafe {
            let head = cell as *mut CellHead;
            ptr::write(ptr::addr_of_mut!((*head).hdr), *hdr);
            copy_payload(payload, cell.add(PAYLOAD_OFFSET));
            // Release: header and payload become visible with the stamp.
            (*head)
                .stamp
                .store(stamp(self.head, payload.len()), Ordering::Release);
        }
        self.head += 1;
        true
    }

    /// Slow path: the cached tail says full. Re-read the real tail; if still full, announce
    /// that we wait (Dekker half, see module doc) and read once more.
    #[cold]
    fn refresh_tail(&mut self) -> bool {
        let n = self.ring.ncells;
        let ctl = self.ring.ctl();
        // Acquire pairs with the consumer's Release of tail: its reads of the cells we are
        // about to overwrite are done.
        self.cached_tail = ctl.tail.load(Ordering::Acquire);
        if self.head - self.cached_tail < n {
            return true;
        }
        if ctl.producer_waiting.load(Ordering::Relaxed) == 0 {
            ctl.producer_waiting.store(1, Ordering::Relaxed);
        }
        // SeqCst fence between the flag store and the tail re-read (pairs with the fence
        // in Consumer::pop after its tail store).
        fence(Ordering::SeqCst);
        self.cached_tail = ctl.tail.load(Ordering::Acquire);
        self.head - self.cached_tail < n
    }

    /// True if the ring was full at the last look (cheap, private).
    #[cfg(test)]
    pub fn looks_full(&self) -> bool {
        self.head - self.cached_tail >= self.ring.ncells
    }
}

/// The receiving end. Lives in the consumer's private memory.
pub struct Consumer {
    ring: RingRef,
    tail: u64,
    half: u64,
}

/// What one `Consumer::pop` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Popped {
    /// Messages handed out.
    pub count: usize,
    /// The producer announced that it waits for room and should be woken.
    pub wake_producer: bool,
}

impl Consumer {
    /// The consumer of `ring`, starting at its published tail.
    pub fn new(ring: RingRef) -> Consumer {
        let t = ring.ctl().tail.load(Ordering::Acquire);
        Consumer {
            ring,
            tail: t,
            half: (ring.ncells / 2).max(1),
        }
    }

    /// True if a message is ready (one Acquire load of the next cell's stamp).
    #[cfg(test)]
    pub fn ready(&self) -> bool {
        // SAFETY: the cell is inside the ring; stamp is an atomic.
        let st = unsafe {
            (*(self.ring.cell(self.tail) as *const CellHead))
                .stamp
                .load(Ordering::Acquire)
        };
        (st >> 32) as u32 == self.tail.wrapping_add(1) as u32
    }

    /// Hand up to `max` ready messages to `f` in order, then release their cells.
    #[inline]
    pub fn pop(&mut self, max: usize, mut f: impl FnMut(&Header, &[u8])) -> Popped {
        let mut count = 0;
        let cap = self.ring.max_payload();
        while count < max {
            let cell = self.ring.cell(self.tail);
            // SAFETY: cell is in bounds; stamp is atomic.
            let st = unsafe { (*(cell as *const CellHead)).stamp.load(Ordering::Acquire) };
            if (st >> 32) as u32 != self.tail.wrapping_add(1) as u32 {
                break;
            }
            // A well-behaved producer never exceeds the capacity; clamping keeps a corrupt
            // length from reading past the cell.
            let len = ((st & 0xffff_ffff) as usize).min(cap);
            // SAFETY: the Acquire load above saw the producer's Release store for this
            // message, so header and payload are fully written, and the producer will not
            // touch the cell before we publish a tail past it (after `f` returns).
            let (hdr, payload) = unsafe {
                let hdr = ptr::read(ptr::addr_of!((*(cell as *const CellHead)).hdr));
                (
                    hdr,
                    std::slice::from_raw_parts(cell.add(PAYLOAD_OFFSET), len),
                )
            };
            f(&hdr, payload);
            self.tail += 1;
            count += 1;
        }
        let mut wake_producer = false;
        if count > 0 {
            let ctl = self.ring.ctl();
            // Release: our reads of the cells happen before the producer reuses them.
            ctl.tail.store(self.tail, Ordering::Release);
            let before = self.tail - count as u64;
            if before / self.half != self.tail / self.half {
                // Dekker half (see module doc): tail store, fence, flag load.
                fence(Ordering::SeqCst);
                if ctl.producer_waiting.load(Ordering::Relaxed) != 0 {
                    wake_producer = ctl.producer_waiting.swap(0, Ordering::Relaxed) != 0;
                }
            }
        }
        Popped {
            count,
            wake_producer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};

    /// A ring in ordinary process memory.
    struct Mem {
        ptr: *mut u8,
        layout: AllocLayout,
    }
    unsafe impl Send for Mem {}
    unsafe impl Sync for Mem {}
    impl Mem {
        fn new(ncells: usize, cell_bytes: usize) -> (Mem, RingRef) {
            let layout = AllocLayout::from_size_align(128 + ncells * cell_bytes, 128).unwrap();
            let ptr = unsafe { alloc_zeroed(layout) };
            assert!(!ptr.is_null());
            let r = unsafe { RingRef::new(ptr, ncells, cell_bytes) };
            (Mem { ptr, layout }, r)
        }
    }
    impl Drop for Mem {
        fn drop(&mut self) {
            unsafe { dealloc(self.ptr, self.layout) }
        }
    }

    fn hdr(i: u64, sum: u64) -> Header {
        Header {
            kind: 7,
            tag: i as i32,
            len: i,
            cookie: sum,
            ..Header::default()
        }
    }

    fn fill(seed: u64, buf: &mut [u8]) {
        let mut x = seed | 1;
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }

    fn checksum(b: &[u8]) -> u64 {
        b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
            (h ^ x as u64).wrapping_mul(0x100000001b3)
        })
    }

    #[test]
    fn full_ring_returns_false_and_wraps() {
        let (_m, r) = Mem::new(4, 128);
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        let mut next_expect = 0u64;
        let mut sent = 0u64;
        for round in 0..50 {
            // Fill to capacity.
            let mut k = 0;
            while p.try_push(&hdr(sent, 0), &sent.to_ne_bytes()) {
                sent += 1;
                k += 1;
            }
            assert_eq!(k, 4, "round {round}");
            assert!(p.looks_full());
            assert!(!p.try_push(&hdr(99, 0), b"x"));
            // Drain some (varying), FIFO.
            let take = 1 + round % 4;
            let got = c.pop(take, |h, pl| {
                assert_eq!(h.len, next_expect);
                assert_eq!(pl, &next_expect.to_ne_bytes());
                next_expect += 1;
            });
            assert_eq!(got.count, take);
            // Drain the rest so the next round starts empty.
            c.pop(usize::MAX, |h, _| {
                assert_eq!(h.len, next_expect);
                next_expect += 1;
            });
        }
        assert_eq!(next_expect, sent);
        assert!(!c.ready());
    }

    #[test]
    fn all_payload_sizes_with_checksums() {
        let cell = 512;
        let (_m, r) = Mem::new(3, cell);
        let max = r.max_payload();
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        let mut buf = vec![0u8; max];
        for len in 0..=max {
            fill(len as u64, &mut buf[..len]);
            let sum = checksum(&buf[..len]);
            assert!(p.try_push(&hdr(len as u64, sum), &buf[..len]));
            let got = c.pop(1, |h, pl| {
                assert_eq!(pl.len(), len);
                assert_eq!(h.len, len as u64);
                assert_eq!(checksum(pl), h.cookie);
                assert_eq!(h.kind, 7);
            });
            assert_eq!(got.count, 1);
        }
    }

    #[test]
    fn waiting_producer_gets_wake_flag() {
        let (_m, r) = Mem::new(8, 128);
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        while p.try_push(&hdr(0, 0), b"") {}
        // Producer found it full: flag is set. Consumer drains a half ring → told to wake.
        let got = c.pop(3, |_, _| {});
        assert_eq!(got.count, 3);
        assert!(!got.wake_producer, "no half-ring mark crossed yet");
        let got = c.pop(1, |_, _| {});
        assert!(
            got.wake_producer,
            "crossing the half-ring mark reports the waiter"
        );
        // Flag cleared: the next mark does not report again.
        let got = c.pop(usize::MAX, |_, _| {});
        assert_eq!(got.count, 4);
        assert!(!got.wake_producer);
    }

    #[test]
    fn two_threads_fifo_and_checksums() {
        let (m, r) = Mem::new(16, 1024);
        let max = r.max_payload();
        let n = 200_000u64;
        let m = std::sync::Arc::new(m);
        let m2 = m.clone();
        let prod = std::thread::spawn(move || {
            let _keep = m2;
            let mut p = Producer::new(r);
            let mut buf = vec![0u8; max];
            let mut rng = 0x9e3779b97f4a7c15u64;
            for i in 0..n {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let len = if rng & 7 == 0 {
                    (rng >> 8) as usize % (max + 1)
                } else {
                    (rng >> 8) as usize % 48
                };
                fill(i, &mut buf[..len]);
                let h = hdr(i, checksum(&buf[..len]));
                while !p.try_push(&h, &buf[..len]) {
                    std::thread::yield_now();
                }
            }
        });
        let mut c = Consumer::new(r);
        let mut expect = 0u64;
        let mut scratch = vec![0u8; max];
        while expect < n {
            let got = c.pop(7, |h, pl| {
                assert_eq!(h.len, expect, "FIFO");
                assert_eq!(checksum(pl), h.cookie);
                fill(expect, &mut scratch[..pl.len()]);
                assert_eq!(&scratch[..pl.len()], pl);
                expect += 1;
            });
            if got.count == 0 {
                std::thread::yield_now();
            }
        }
        prod.join().unwrap();
        drop(m);
    }
}
