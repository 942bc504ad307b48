//! The shared segment's layout: every structure other processes see, `#[repr(C)]`, with
//! explicit atomics where two processes touch the same word.
//!
//! ```text
//! offset 0                 SegHeader            (128 B; written by the leader before `magic`)
//! slots_offset             Slot × nlocal        (256 B each: doorbell line, info line)
//! rings_offset             Ring × nlocal·(nlocal-1), each `ring_stride` bytes:
//!                            RingCtl            (128 B; consumer-written tail, wait flag)
//!                            area of cell × cells_per_ring (cell_bytes each) in 64-B lines,
//!                            holding records of whole lines (at most one cell each):
//!                              CellHead (stamp u64, Header 32 B) | payload …
//! ```
//!
//! Independently written fields sit 128 bytes apart, not just 64: Intel's adjacent-line
//! prefetcher fetches lines in pairs, so 64-byte separation still ping-pongs.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

use tsunagi_p2p::futex::DoorbellWords;
use tsunagi_p2p::{Header, HEADER_BYTES};

/// "TSUNAGI1" in ASCII: marks a segment whose header is complete.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TSUNAGI1");
/// Bumped whenever the layout below changes.
pub const VERSION: u32 = 3;
/// Cache line size the layout is built around.
pub const LINE: usize = 64;
/// Distance between fields written by different processes (two lines, see module doc).
pub const PAD: usize = 128;

/// Start of the segment. All plain fields are written by the leader before it stores
/// `magic` (Release); attachers load `magic` (Acquire) before reading them.
#[repr(C, align(128))]
pub struct SegHeader {
    /// [`MAGIC`] once the segment is initialised; zero before (fresh tmpfs pages are zero).
    pub magic: AtomicU64,
    pub version: u32,
    pub nlocal: u32,
    pub cell_bytes: u64,
    pub cells_per_ring: u64,
    pub eager_limit: u64,
    pub slots_offset: u64,
    pub rings_offset: u64,
    pub ring_stride: u64,
    pub total_bytes: u64,
}

/// A rank's doorbell, on its own pair of lines: every sender to this rank reads
/// `sleeping` (and increments `count` when the owner sleeps).
#[repr(C, align(128))]
pub struct BellLine {
    pub words: DoorbellWords,
}

/// A rank's identity, written once by its owner at create/attach (Release on `pid`).
#[repr(C, align(128))]
pub struct InfoLine {
    /// The owner's pid; 0 until it attached.
    pub pid: AtomicI32,
    /// The owner's world rank (written by the leader at create).
    pub world_rank: u32,
    /// Address of the segment in the owner's address space: a CMA probe reads
    /// [`MAGIC`] from there through `process_vm_readv`.
    pub base_addr: AtomicU64,
    /// 1 if the owner registered for `membarrier` and issues the heavy barrier before it
    /// sleeps, so that registered senders may skip their fence (`barrier.rs`). Written
    /// before `pid`.
    pub heavy_sleeper: AtomicU32,
}

/// Per-local-rank slot.
#[repr(C)]
pub struct Slot {
    pub bell: BellLine,
    pub info: InfoLine,
}

/// Control block in front of each ring's cells; written by the consumer except for
/// `producer_waiting`, which the producer sets only when it finds the ring full (rare), so
/// the line normally stays in the consumer's cache.
#[repr(C, align(128))]
pub struct RingCtl {
    /// Number of 64-byte lines the consumer has released (monotonic). Release-stored by
    /// the consumer after it finished reading them; Acquire-loaded by the producer before it
    /// overwrites them.
    pub tail: AtomicU64,
    /// Set by a producer that found the ring full and may go to sleep; the consumer clears it
    /// and rings the producer's doorbell (see `ring.rs` for the fence protocol).
    pub producer_waiting: AtomicU32,
}

/// First bytes of every record. `stamp` = `(line position + 1) as u32` << 32 | payload
/// length, Release-stored by the producer after header and payload are written: one store
/// publishes both "this record is there" and its length; the consumer's Acquire load makes the data visible.
#[repr(C)]
pub struct CellHead {
    pub stamp: AtomicU64,
    pub hdr: Header,
}

/// Where the payload starts in a cell: right after the stamp and the header, so an 8-byte
/// message (8 + 32 + 8 = 48 bytes) lies within the cell's first cache line.
pub const PAYLOAD_OFFSET: usize = std::mem::size_of::<CellHead>();
/// Payload bytes that share the first cache line with stamp and header.
pub const INLINE_BYTES: usize = LINE - PAYLOAD_OFFSET;

const _: () = assert!(PAYLOAD_OFFSET == 8 + HEADER_BYTES);
// An 8-byte message (and up to 24 bytes) lies entirely in the cell's first line.
const _: () = assert!(INLINE_BYTES >= 8);
const _: () = assert!(std::mem::size_of::<SegHeader>() == PAD);
const _: () = assert!(std::mem::size_of::<Slot>() == 2 * PAD);
const _: () = assert!(std::mem::size_of::<RingCtl>() == PAD);
const _: () = assert!(std::mem::align_of::<CellHead>() == 8);

/// Round `x` up to a multiple of `a` (a power of two).
pub const fn round_up(x: usize, a: usize) -> usize {
    (x + a - 1) & !(a - 1)
}

/// Sizes and offsets derived from (nlocal, cell_bytes, cells_per_ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub nlocal: usize,
    pub cell_bytes: usize,
    pub cells_per_ring: usize,
    pub slots_offset: usize,
    pub rings_offset: usize,
    pub ring_stride: usize,
    pub total_bytes: usize,
}

impl Layout {
    /// The layout for `nlocal` ranks; `cell_bytes` must be a multiple of [`LINE`].
    pub fn new(nlocal: usize, cell_bytes: usize, cells_per_ring: usize) -> Layout {
        debug_assert!(cell_bytes & (LINE - 1) == 0 && cell_bytes > PAYLOAD_OFFSET);
        let slots_offset = PAD;
        let rings_offset = round_up(slots_offset + nlocal * std::mem::size_of::<Slot>(), PAD);
        let ring_stride = round_up(PAD + cells_per_ring * cell_bytes, PAD);
        let nrings = nlocal * nlocal.saturating_sub(1);
        let total_bytes = rings_offset + nrings * ring_stride;
        Layout {
            nlocal,
            cell_bytes,
            cells_per_ring,
            slots_offset,
            rings_offset,
            ring_stride,
            total_bytes,
        }
    }

    /// Index of the ring carrying messages from local rank `s` to local rank `r` (`s != r`):
    /// the rings of one sender are adjacent, the diagonal is skipped.
    pub fn ring_index(&self, s: usize, r: usize) -> usize {
        debug_assert!(s != r && s < self.nlocal && r < self.nlocal);
        s * (self.nlocal - 1) + if r < s { r } else { r - 1 }
    }

    /// Byte offset of that ring's control block.
    pub fn ring_offset(&self, s: usize, r: usize) -> usize {
        self.rings_offset + self.ring_index(s, r) * self.ring_stride
    }

    /// Byte offset of local rank `i`'s slot.
    pub fn slot_offset(&self, i: usize) -> usize {
        self.slots_offset + i * std::mem::size_of::<Slot>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_do_not_overlap_and_fit() {
        for n in 1..=9 {
            let l = Layout::new(n, 1024, 4);
            let mut seen = std::collections::HashSet::new();
            for s in 0..n {
                for r in 0..n {
                    if s != r {
                        let off = l.ring_offset(s, r);
                        assert_eq!(off % PAD, 0);
                        assert!(off + l.ring_stride <= l.total_bytes);
                        assert!(seen.insert(l.ring_index(s, r)));
                    }
                }
            }
            assert_eq!(seen.len(), n * (n - 1));
            assert!(l.slot_offset(n) <= l.rings_offset);
        }
    }
}
