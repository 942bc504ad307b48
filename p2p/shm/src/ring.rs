//! The single-producer/single-consumer ring of one ordered pair of local ranks.
//!
//! The ring is an area of `ncells * cell_bytes` bytes cut into 64-byte lines, and each
//! message takes only the lines it needs: a record of stamp, header and payload
//! (`PAYLOAD_OFFSET + len` bytes rounded up to whole lines), so an 8-byte message is one
//! line and thousands of small messages fit where `ncells` large ones do (a window of 64
//! small sends never finds the ring full, and consecutive small messages sit in
//! consecutive lines for the prefetcher). The largest record is one cell. A record that
//! would run past the end of the area is preceded by a skip record that fills the rest of
//! the lap, and starts at line 0.
//!
//! Both ends keep their position (in lines, monotonic) privately (`head` in the producer,
//! `tail` in the consumer), so the hot path touches only the record itself:
//!
//! * The producer writes header and payload, then Release-stores the record's stamp
//!   (position, a live bit and the length in one word). It reads the consumer's published
//!   tail only when its cached copy says the ring has no room (lazy tail refresh, as in PM
//!   on the Martini NIC), so the tail line stays in the consumer's cache.
//! * The consumer Acquire-loads the stamp at its tail; a stamp carrying the expected
//!   position means header, length and payload are visible. After handing the message out
//!   it Release-stores its new tail, which lets the producer reuse the lines.
//!
//! Stale words: the line where the next record will start held something else in an
//! earlier lap, possibly a message's payload, whose bytes could read as any stamp. Before
//! the producer publishes a record it makes sure that the first word of the line after it
//! (where the consumer looks next) cannot read as the stamp expected there: it keeps, in
//! private memory, what each line's first word holds (the position tag of a stamp it
//! stored there, zero, or bytes it does not know: payload, or anything from before this
//! producer), and clears the word only when it holds unknown bytes or a stamp whose 32-bit
//! tag equals the expected one (a wrap of the tag). A consumer that saw the current record
//! therefore sees at its next position either something that is not the expected stamp or
//! the real stamp of the next record, never old bytes that pass for it. The producer
//! always keeps one spare line of room for that clearing. Once a lap of small records has
//! gone by, every line holds an older stamp and nothing is cleared: a consumer spinning on
//! its next line keeps that line until the real record replaces it, so a message costs one
//! transfer of the line each way instead of two (the clearing used to take the line from
//! the spinning consumer, which then fetched the cleared word, and the record took it once
//! more). A zero word is never a stamp (the live bit), so a cleared line is always safe,
//! also at the position whose 32-bit tag is zero.
//!
//! Waking a producer that sleeps on a full ring: the producer sets `producer_waiting`,
//! issues a SeqCst fence and re-reads the tail; the consumer, whenever its tail crosses a
//! multiple of half the ring, stores the tail, issues a SeqCst fence and reads the flag.
//! This is Dekker's pattern: either the producer's re-read sees room, or the consumer sees
//! the flag (and rings the producer's doorbell). A producer finds no room only when more
//! than the area less two cells is in use (a record and its skip need at most two cells),
//! which with four cells or more is over half the area, so the consumer crosses a
//! half-ring mark while it drains that; smaller rings also check whenever the consumer
//! drains the ring empty. Checking only there keeps the fence off the per-message path.

use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use tsunagi_p2p::Header;

use crate::layout::{CellHead, RingCtl, LINE, PAYLOAD_OFFSET};

/// The length a skip record carries in its stamp (no payload is ever this long: cells are
/// at most 256 MiB).
const SKIP: u64 = 0x7fff_ffff;
/// The bit of a stamp's low half that every stamp has and a cleared (zero) word lacks.
const LIVE: u64 = 1 << 31;
/// The length field of a stamp (below [`LIVE`]).
const LEN_MASK: u64 = LIVE - 1;

/// Where a ring lives: its control block and `ncells` cells of `cell_bytes` right after it.
#[derive(Clone, Copy, Debug)]
pub struct RingRef {
    ctl: NonNull<RingCtl>,
    area: NonNull<u8>,
    /// Lines in the area.
    lines: u64,
    cell_bytes: usize,
    /// Fewer than four cells: the consumer also checks the wait flag when it drains the
    /// ring (see the module doc).
    small: bool,
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
            area: NonNull::new(unsafe { base.add(std::mem::size_of::<RingCtl>()) }).unwrap(),
            lines: (ncells * cell_bytes / LINE) as u64,
            cell_bytes,
            small: ncells < 4,
        }
    }

    /// Payload capacity of one record (one cell).
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

    /// The line at index `i` (< lines).
    #[inline]
    fn line(&self, i: u64) -> *mut u8 {
        debug_assert!(i < self.lines);
        // SAFETY: i < lines, so the line lies inside the region RingRef::new vouches for.
        unsafe { self.area.as_ptr().add(i as usize * LINE) }
    }

    /// The stamp word at the start of line `i` (< lines).
    #[inline]
    fn stamp_at(&self, i: u64) -> &AtomicU64 {
        // SAFETY: the line is inside the area, 64-byte aligned; the stamp is an atomic
        // (CellHead's first field) shared by both ends.
        unsafe { &(*(self.line(i) as *const CellHead)).stamp }
    }
}

/// Lines a record with `len` payload bytes takes.
#[inline]
fn record_lines(len: usize) -> u64 {
    (PAYLOAD_OFFSET + len).div_ceil(LINE) as u64
}

/// The stamp that marks the record at line position `pos` with `len` payload bytes (or
/// [`SKIP`]): the position's [`tag`] in the upper half, [`LIVE`] and the length in the
/// lower. A zero word is never a stamp (no live bit). 32 bits of position suffice because
/// the producer clears a next word whose tag could match (module doc).
#[inline]
fn stamp(pos: u64, len: u64) -> u64 {
    ((tag(pos) as u64) << 32) | LIVE | len
}

/// The 32-bit position tag a stamp for line position `pos` carries.
#[inline]
fn tag(pos: u64) -> u32 {
    pos.wrapping_add(1) as u32
}

/// What a stamp read from a line must show, shifted right by 31 (tag and live bit), to be
/// the record at position `pos`.
#[inline]
fn expect(pos: u64) -> u64 {
    ((tag(pos) as u64) << 1) | 1
}

/// [`Producer::marks`]: the line's first word holds bytes the producer does not know (payload,
/// or anything from before it), which might read as any stamp.
const MARK_UNKNOWN: u64 = u64::MAX;
/// [`Producer::marks`]: the line's first word is zero (never a stamp).
const MARK_CLEAR: u64 = 1 << 32;

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
    /// `head % lines`, kept so that the hot path needs no division.
    at: u64,
    cached_tail: u64,
    /// Per line, what its first word holds as far as this producer wrote it: the [`tag`] of
    /// a stamp it stored there, [`MARK_CLEAR`] or [`MARK_UNKNOWN`] (module doc: which next
    /// words must be cleared before a record is published).
    marks: Box<[u64]>,
}

impl Producer {
    /// The producer of `ring`, starting at the consumer's published tail (0 in a fresh ring).
    pub fn new(ring: RingRef) -> Producer {
        let t = ring.ctl().tail.load(Ordering::Acquire);
        Producer {
            ring,
            head: t,
            at: t % ring.lines,
            cached_tail: t,
            // Nothing known of a ring someone may have used: the first lap clears every
            // next word.
            marks: vec![MARK_UNKNOWN; ring.lines as usize].into_boxed_slice(),
        }
    }

    /// Make sure that the first word of line `i` cannot read as the stamp of position
    /// `pos` (the consumer's next look there, module doc): clear it if it holds unknown
    /// bytes or a stamp whose tag is that position's. A Relaxed store; the caller's Release
    /// of the stamp before `pos` publishes it.
    #[inline(always)]
    fn disarm(&mut self, i: u64, pos: u64) {
        debug_assert!(i < self.ring.lines);
        // SAFETY: i < lines (the callers' line indices), and `marks` has `lines` entries.
        let m = unsafe { self.marks.get_unchecked_mut(i as usize) };
        if *m == MARK_UNKNOWN || *m == tag(pos) as u64 {
            self.ring.stamp_at(i).store(0, Ordering::Relaxed);
            *m = MARK_CLEAR;
        }
    }

    /// Copy `hdr` and `payload` into the next record and publish it. Returns false, without
    /// side effects other than setting the waiting flag, when the ring has no room.
    /// `payload.len()` must be at most `max_payload()` (checked by the caller).
    #[inline]
    pub fn try_push(&mut self, hdr: &Header, payload: &[u8]) -> bool {
        debug_assert!(payload.len() <= self.ring.max_payload());
        let lines = self.ring.lines;
        let k = record_lines(payload.len());
        let mut at = self.at;
        debug_assert_eq!(at, self.head % lines);
        // Lines to skip at the end of the lap when the record does not fit before it.
        let skip = if at + k > lines { lines - at } else { 0 };
        // The record, the skip, and the spare line whose stamp is cleared.
        let need = skip + k + 1;
        if self.head + need - self.cached_tail > lines && !self.refresh_tail(need) {
            return false;
        }
        let ring = self.ring;
        if skip > 0 {
            // Line 0 is where the record goes: the consumer looks there after the skip,
            // for position `head + skip`; disarm its word before the skip is seen.
            self.disarm(0, self.head + skip);
            ring.stamp_at(at)
                .store(stamp(self.head, SKIP), Ordering::Release);
            // Lines after `at` keep what they hold (the skip covers them unwritten).
            self.marks[at as usize] = tag(self.head) as u64;
            self.head += skip;
            at = 0;
        }
        let next = if at + k == lines { 0 } else { at + k };
        // The consumer's next look after this record: line `next`, position `head + k`.
        // `next` lies outside `at .. at + k` (a record is at most one cell, at most half
        // the area).
        self.disarm(next, self.head + k);
        let cell = ring.line(at);
        // SAFETY: lines `at .. at + k` and line `next` are ours: the consumer released
        // them (its tail, loaded with Acquire, is at least `head + need - lines`, so its
        // reads of the previous contents happened before), and it will not read them again
        // before our Release store of the new stamp. `at + k <= lines`, and the header and
        // payload regions lie within those k lines.
        unsafe {
            let head = cell as *mut CellHead;
            ptr::write(ptr::addr_of_mut!((*head).hdr), *hdr);
            copy_payload(payload, cell.add(PAYLOAD_OFFSET));
            // Release: the next word's clearing (if `disarm` did one), header and payload
            // become visible with it.
            (*head)
                .stamp
                .store(stamp(self.head, payload.len() as u64), Ordering::Release);
        }
        // Our own record of what the lines' first words now hold: the stamp at `at`,
        // payload bytes at the start of every further line of the record.
        debug_assert!(at + k <= lines && self.marks.len() == lines as usize);
        // SAFETY: `at + k <= lines` (above) and `marks` has `lines` entries, so every index
        // written lies inside it.
        unsafe {
            let marks = self.marks.as_mut_ptr().add(at as usize);
            *marks = tag(self.head) as u64;
            for j in 1..k as usize {
                *marks.add(j) = MARK_UNKNOWN;
            }
        }
        self.head += k;
        self.at = next;
        true
    }

    /// Slow path: the cached tail says there is no room for `need` lines. Re-read the real
    /// tail; if still short, announce that we wait (Dekker half, see module doc) and read
    /// once more.
    #[cold]
    fn refresh_tail(&mut self, need: u64) -> bool {
        let lines = self.ring.lines;
        let ctl = self.ring.ctl();
        // Acquire pairs with the consumer's Release of tail: its reads of the lines we are
        // about to overwrite are done.
        self.cached_tail = ctl.tail.load(Ordering::Acquire);
        if self.head + need - self.cached_tail <= lines {
            return true;
        }
        if ctl.producer_waiting.load(Ordering::Relaxed) == 0 {
            ctl.producer_waiting.store(1, Ordering::Relaxed);
        }
        // SeqCst fence between the flag store and the tail re-read (pairs with the fence
        // in Consumer::pop after its tail store).
        fence(Ordering::SeqCst);
        self.cached_tail = ctl.tail.load(Ordering::Acquire);
        self.head + need - self.cached_tail <= lines
    }

    /// True if a record of `len` bytes found no room at the last look (cheap, private).
    #[cfg(test)]
    pub fn looks_full(&self, len: usize) -> bool {
        let lines = self.ring.lines;
        let k = record_lines(len);
        let at = self.head % lines;
        let skip = if at + k > lines { lines - at } else { 0 };
        self.head + skip + k + 1 - self.cached_tail > lines
    }
}

/// The receiving end. Lives in the consumer's private memory.
pub struct Consumer {
    ring: RingRef,
    tail: u64,
    /// `tail % lines`, kept so that the hot path needs no division.
    at: u64,
    half: u64,
    /// The next multiple of `half` above the tail (the Dekker check's marks; kept so that
    /// the hot path needs no division).
    next_mark: u64,
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
        let half = (ring.lines / 2).max(1);
        Consumer {
            ring,
            tail: t,
            at: t % ring.lines,
            half,
            next_mark: (t / half + 1) * half,
        }
    }

    /// True if a message is ready (one Acquire load of the next stamp; a skip counts).
    #[cfg(test)]
    pub fn ready(&self) -> bool {
        let st = self.ring.stamp_at(self.at).load(Ordering::Acquire);
        st >> 31 == expect(self.tail)
    }

    /// Hand up to `max` ready messages to `f` in order, then release their lines.
    #[inline]
    pub fn pop(&mut self, max: usize, mut f: impl FnMut(&Header, &[u8])) -> Popped {
        let mut count = 0;
        let ring = self.ring;
        let lines = ring.lines;
        let cap = ring.max_payload();
        let before = self.tail;
        let mut drained = false;
        while count < max {
            let at = self.at;
            debug_assert_eq!(at, self.tail % lines);
            let st = ring.stamp_at(at).load(Ordering::Acquire);
            // Tag and live bit: the producer made sure that nothing else at this line
            // reads as them (module doc).
            if st >> 31 != expect(self.tail) {
                drained = true;
                break;
            }
            let len = st & LEN_MASK;
            if len == SKIP {
                self.tail += lines - at;
                self.at = 0;
                continue;
            }
            // A well-behaved producer never exceeds the capacity nor the end of the area;
            // clamping keeps a corrupt length from reading past either.
            let room = ((lines - at) as usize * LINE).saturating_sub(PAYLOAD_OFFSET);
            let len = (len as usize).min(cap).min(room);
            let cell = ring.line(at);
            // SAFETY: the Acquire load above saw the producer's Release store for this
            // record, so header and payload are fully written, and the producer will not
            // touch its lines before we publish a tail past them (after `f` returns); the
            // payload lies within the area (clamped above).
            let (hdr, payload) = unsafe {
                let hdr = ptr::read(ptr::addr_of!((*(cell as *const CellHead)).hdr));
                (
                    hdr,
                    std::slice::from_raw_parts(cell.add(PAYLOAD_OFFSET), len),
                )
            };
            f(&hdr, payload);
            let k = record_lines(len);
            self.tail += k;
            // k <= lines - at (the clamp above).
            self.at = if at + k == lines { 0 } else { at + k };
            count += 1;
        }
        let mut wake_producer = false;
        if self.tail != before {
            let ctl = ring.ctl();
            // Release: our reads of the lines happen before the producer reuses them.
            ctl.tail.store(self.tail, Ordering::Release);
            let crossed = self.tail >= self.next_mark;
            if crossed {
                self.next_mark = (self.tail / self.half + 1) * self.half;
            }
            if crossed || (drained && ring.small) {
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
        // 4 cells of 2 lines: 8 lines; an 8-byte message is one line, and one line stays
        // spare, so an empty ring holds 7.
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
            assert_eq!(k, 7, "round {round}");
            assert!(p.looks_full(8));
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

    /// Small messages take one line each, not one cell: a ring of 4 cells of 16 KiB holds
    /// over a thousand 8-byte messages (a window of 64 streams without stalling).
    #[test]
    fn small_messages_take_a_line_each() {
        let (_m, r) = Mem::new(4, 16448);
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        let mut n = 0u64;
        while p.try_push(&hdr(n, 0), &n.to_ne_bytes()) {
            n += 1;
        }
        assert_eq!(n, 4 * 16448 / 64 - 1);
        let mut got = 0u64;
        c.pop(usize::MAX, |h, pl| {
            assert_eq!((h.len, pl), (got, &got.to_ne_bytes()[..]));
            got += 1;
        });
        assert_eq!(got, n);
    }

    /// Payload bytes left in the ring from an earlier lap that read exactly like the stamp
    /// the consumer expects next must not pass for a message: the producer clears the next
    /// record's stamp word before it publishes (module doc).
    #[test]
    fn old_payload_never_looks_like_a_record() {
        let (_m, r) = Mem::new(4, 256);
        let lines = r.lines;
        let max = r.max_payload();
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut buf = vec![0u8; max];
        for i in 0..5000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let len = (rng >> 16) as usize % (max + 1);
            // The record starts at line position `p.head` (or 0 of the next lap after a
            // skip); every line inside it gets, at its start, the stamp the consumer will
            // expect there one lap later.
            let k = record_lines(len);
            let at = p.head % lines;
            let start = if at + k > lines {
                p.head + lines - at
            } else {
                p.head
            };
            for j in 1..k {
                let off = j as usize * LINE - PAYLOAD_OFFSET;
                if off + 8 <= len {
                    let fake = stamp(start + j + lines, 8);
                    buf[off..off + 8].copy_from_slice(&fake.to_ne_bytes());
                }
            }
            assert!(p.try_push(&hdr(i, 0), &buf[..len]), "empty ring has room");
            let got = c.pop(usize::MAX, |h, pl| {
                assert_eq!((h.len, pl.len()), (i, len));
            });
            assert_eq!(got.count, 1);
            assert!(!c.ready(), "message {i}: stale bytes read as a record");
        }
    }

    /// Every line of a ring someone used before holds, at its start, the stamp the
    /// consumer will expect there on its first visit: a new producer knows nothing of those
    /// words and clears each before the consumer looks at it.
    #[test]
    fn used_ring_stale_stamps_never_pass() {
        let (_m, r) = Mem::new(4, 256);
        let lines = r.lines;
        for i in 0..lines {
            r.stamp_at(i).store(stamp(i, 8), Ordering::Relaxed);
        }
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        let mut rng = 0x853c_49e6_748f_ea9bu64;
        let max = r.max_payload();
        let buf = vec![0x5au8; max];
        for i in 0..3000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let len = if rng & 3 == 0 {
                (rng >> 16) as usize % (max + 1)
            } else {
                (rng >> 16) as usize % 24
            };
            assert!(p.try_push(&hdr(i, 0), &buf[..len]));
            let got = c.pop(usize::MAX, |h, pl| {
                assert_eq!((h.len, pl.len()), (i, len));
            });
            assert_eq!(got.count, 1, "message {i}");
            assert!(!c.ready(), "message {i}: a stale stamp read as a record");
        }
    }

    /// The 32-bit position tag wraps: at the position whose tag is zero, a cleared word
    /// must not read as a record (the live bit), and a line holding an older stamp with the
    /// expected tag (what an older lap leaves when the tag wraps) is cleared.
    #[test]
    fn tag_wrap_never_passes() {
        let (_m, r) = Mem::new(4, 128);
        let lines = r.lines;
        // Start a few lines before the position whose tag is zero.
        let start = (1u64 << 32) - 5;
        r.ctl().tail.store(start, Ordering::Relaxed);
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        for i in 0..40u64 {
            assert!(p.try_push(&hdr(i, 0), &i.to_ne_bytes()));
            let got = c.pop(usize::MAX, |h, pl| {
                assert_eq!((h.len, pl), (i, &i.to_ne_bytes()[..]));
            });
            assert_eq!(got.count, 1, "message {i}");
            assert!(!c.ready(), "message {i}: a phantom record");
        }
        // Forge what a wrapped tag leaves: the line after the next record holds a stamp
        // with exactly the tag expected there, and the producer's marks say so.
        let pos = p.head + 1;
        let line = pos % lines;
        r.stamp_at(line).store(stamp(pos, 8), Ordering::Relaxed);
        p.marks[line as usize] = tag(pos) as u64;
        assert!(p.try_push(&hdr(1000, 0), b"wrap"));
        let got = c.pop(usize::MAX, |h, _| assert_eq!(h.len, 1000));
        assert_eq!(got.count, 1);
        assert!(
            !c.ready(),
            "a stamp of an older lap with the same tag read as a record"
        );
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
        // 8 cells of 2 lines: 16 lines, half-ring marks every 8; empty messages take one
        // line, 15 fit.
        let (_m, r) = Mem::new(8, 128);
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        let mut n = 0;
        while p.try_push(&hdr(0, 0), b"") {
            n += 1;
        }
        assert_eq!(n, 15);
        // Producer found it full: flag is set. Consumer drains a half ring → told to wake.
        let got = c.pop(3, |_, _| {});
        assert_eq!(got.count, 3);
        assert!(!got.wake_producer, "no half-ring mark crossed yet");
        let got = c.pop(5, |_, _| {});
        assert!(
            got.wake_producer,
            "crossing the half-ring mark reports the waiter"
        );
        // Flag cleared: the next mark does not report again.
        let got = c.pop(usize::MAX, |_, _| {});
        assert_eq!(got.count, 7);
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
