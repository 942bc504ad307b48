//! Two-phase I/O through shared memory, for a file whose ranks all run on one node.
//!
//! The message rounds of [`crate::twophase`] move every byte of the other ranks twice
//! through the kernel: once to the aggregator (a cross-memory copy) and once to or from
//! the page cache. On one node the aggregator's round buffers can be memory every rank
//! maps: each rank copies its own pieces into (writing) or out of (reading) the window's
//! image in plain user space, all ranks at once, and only the aggregator enters the
//! kernel, with one `pwrite` / `pread` per contiguous run of the window. Against
//! independent access (data sieving reads every rank's whole span, and writes it back
//! under a lock) the page cache sees each byte once instead of two to four times.
//!
//! Protocol, per round `r` (buffer `r % depth` of each aggregator's region):
//! - writing: every rank copies its pieces of round `r` into the buffers; all agree (an
//!   all-gather of error codes, which is also the synchronisation); each aggregator then
//!   writes its window's covered runs from the buffer. The agreement of round `r + 1`
//!   comes after the aggregator's write of round `r - 1`, so the buffer that round
//!   `r + 1` fills again is free; a last agreement after the last writes reports their
//!   errors to every rank (and no rank returns before the data is in the file);
//! - reading: each aggregator reads its window's extent into the buffer; all agree (the
//!   read's error reaches every rank); every rank copies its pieces out. The aggregator
//!   reads round `r + 1` only after the agreement of round `r`, which every rank reaches
//!   after copying round `r - 1` out of the same buffer.
//!
//! A collective access starts with the setup all-gather, which every rank reaches after
//! its previous access is done with the buffers, so accesses do not overlap in them.
//!
//! The memory is an anonymous `memfd` the first aggregator makes at the file's first
//! access that needs it (collectively: the others map it through `/proc/PID/fd/FD`, and
//! all agree that every rank mapped it, or no rank uses it), kept for the file's later
//! accesses, grown when one needs more.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use tsunagi_collectives::SendBuf;
use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{ErrorClass, MpiError, MpiResult};

use crate::posix::{os_err, pread_full, pwrite_full};
use crate::twophase::Plan;
use crate::File;

/// Shared memory of the ranks of one node, mapped at `base` in this process.
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
}

// SAFETY: plain shared memory; which rank touches which bytes when is ordered by the
// protocol's agreements (see the module doc).
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range, and the file that owns the segment is done
        // with it.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

fn last_os(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn map(fd: &OwnedFd, len: usize) -> Result<Segment, String> {
    // SAFETY: mapping a descriptor we hold, for a length its object has (checked by the
    // callers); MAP_POPULATE maps every page now, so that the rounds take no faults.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(last_os("mmap"));
    }
    Ok(Segment {
        base: p as *mut u8,
        len,
    })
}

fn create(len: usize) -> Result<(Segment, OwnedFd), String> {
    // SAFETY: a static C string and plain flags.
    let fd = unsafe { libc::memfd_create(c"tsunagi-io".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(last_os("memfd_create"));
    }
    // SAFETY: a descriptor we just got and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain system calls on our descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(last_os("ftruncate"));
    }
    // Reserve the pages now: running out of memory is an error here, not a SIGBUS later.
    // SAFETY: as above.
    let rc = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, len as libc::off_t) };
    if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
        return Err(format!("posix_fallocate: error {rc}"));
    }
    let m = map(&fd, len)?;
    Ok((m, fd))
}

fn attach(pid: u32, fd: i32, len: usize) -> Result<Segment, String> {
    let path = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}")).expect("no NUL");
    // SAFETY: a valid C string and plain flags.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(last_os("open"));
    }
    // SAFETY: a descriptor we just got and own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: fstat into a zeroed struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || st.st_size as usize != len {
        return Err("the segment has the wrong size".into());
    }
    map(&fd, len)
}

/// Every rank's `code` (an all-gather of one u32 each: the protocol's synchronisation,
/// carrying the error classes of the file accesses since the last one).
pub(crate) fn agree(f: &File, code: u32) -> MpiResult<Vec<u32>> {
    let (_, size) = f.rank_and_size();
    let mut all = vec![0u32; size];
    let t = Datatype::builtin(Builtin::Uint32);
    let mine = [code];
    // SAFETY: one u32 is sent from `mine` and one received from each rank into `all`.
    unsafe {
        tsunagi_collectives::allgather(
            f.runtime(),
            SendBuf::Ptr(mine.as_ptr() as *const u8),
            1,
            &t,
            all.as_mut_ptr() as *mut u8,
            1,
            &t,
            f.comm(),
        )?
    };
    Ok(all)
}

/// The first error any rank reported in an agreement, as every rank's error.
fn first_failure(call: &str, codes: &[u32], mine: &Option<MpiError>) -> MpiResult<()> {
    if let Some(e) = mine {
        return Err(e.clone());
    }
    match codes.iter().enumerate().find(|(_, &c)| c != 0) {
        None => Ok(()),
        Some((rank, &c)) => Err(MpiError::new(
            ErrorClass::from_code(c as i32).unwrap_or(ErrorClass::Io),
            format!("{call}: the aggregator (rank {rank}) failed to access the file"),
        )),
    }
}

/// The file's segment with room for `len` bytes, made (collectively) if it has none that
/// large; None when some rank could not map it (then every rank goes the message way).
fn segment(f: &File, call: &str, len: usize, maker: usize) -> MpiResult<Option<Arc<Segment>>> {
    let have = f.shm_segment();
    if let Some(s) = &have {
        // Every rank holds a segment of the same length (made together), so all decide
        // alike here without talking.
        if s.len >= len {
            return Ok(have);
        }
    }
    // Drop the old one first (it was mapped by everyone; the access before this one is
    // over on every rank: see the module doc).
    f.set_shm_segment(None);
    let (rank, _) = f.rank_and_size();
    let rt = f.runtime();
    let mut made = None;
    let mut info = Vec::new();
    if rank == maker {
        if let Ok((m, fd)) = create(len) {
            info.extend_from_slice(&std::process::id().to_le_bytes());
            info.extend_from_slice(&fd.as_raw_fd().to_le_bytes());
            made = Some((m, fd));
        }
    }
    let all = rt.allgather_bytes(call, f.comm(), &info)?;
    let mut attached = None;
    if rank != maker && all[maker].len() == 8 {
        let pid = u32::from_le_bytes(all[maker][0..4].try_into().expect("4 bytes"));
        let fd = i32::from_le_bytes(all[maker][4..8].try_into().expect("4 bytes"));
        attached = attach(pid, fd, len).ok();
    }
    let mine = made.is_some() || attached.is_some();
    let ok = agree(f, u32::from(mine))?;
    // Everyone has mapped it or given up: the maker closes the way in.
    let seg = made.map(|(m, _fd)| m).or(attached);
    if ok.iter().any(|&c| c != 1) {
        return Ok(None);
    }
    let seg = Arc::new(seg.expect("mapped"));
    f.set_shm_segment(Some(seg.clone()));
    Ok(Some(seg))
}

/// The covered runs of every rank's ranges (`theirs`, at an aggregator: each rank's file
/// ranges in its domain), merged and sorted: what the aggregator writes.
fn covered(theirs: &[Vec<(u64, usize)>]) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = theirs
        .iter()
        .flatten()
        .map(|&(o, l)| (o, o + l as u64))
        .collect();
    all.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len().min(1024));
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The runs of `cov` inside `[ws, we)`, clipped.
fn runs_in(cov: &[(u64, u64)], ws: u64, we: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    let first = cov.partition_point(|r| r.1 <= ws);
    cov[first..]
        .iter()
        .take_while(move |r| r.0 < we)
        .map(move |&(s, e)| (s.max(ws), e.min(we)))
}

/// Holes up to this size inside a round's read are read with it (one `pread` costs less
/// than another call); larger ones split the read.
const READ_HOLE: u64 = 64 << 10;

/// How the segment is cut: per aggregator `depth` buffers of `buf` bytes.
struct Layout {
    buf: usize,
    depth: usize,
}

impl Layout {
    fn of(plan: &Plan) -> Layout {
        let buf = plan.cb.min(plan.domain) as usize;
        let depth = if plan.rounds() > 1 { 2 } else { 1 };
        Layout { buf, depth }
    }

    fn len(&self, aggs: usize) -> usize {
        self.buf * self.depth * aggs
    }

    /// Where aggregator `a`'s buffer of round `r` starts in the segment.
    fn at(&self, a: usize, r: u64) -> usize {
        (a * self.depth + (r as usize % self.depth)) * self.buf
    }
}

/// Which aggregator makes the segment (the first: every rank knows the plan).
fn maker(plan: &Plan) -> usize {
    plan.aggs[0]
}

/// Collective write through the segment; Ok(false) when no segment could be had (the
/// caller takes the message way). `mine[a]`: my pieces in aggregator `a`'s domain
/// `(offset, len, position in data)`; `theirs`, at an aggregator: every rank's ranges in
/// its domain.
pub(crate) fn write_all(
    f: &File,
    call: &str,
    plan: &Plan,
    mine: &[Vec<(u64, usize, usize)>],
    theirs: &[Vec<(u64, usize)>],
    data: &[u8],
) -> MpiResult<bool> {
    let lay = Layout::of(plan);
    let Some(seg) = segment(f, call, lay.len(plan.aggs.len()), maker(plan))? else {
        return Ok(false);
    };
    let (rank, _) = f.rank_and_size();
    let me = plan.aggs.iter().position(|&a| a == rank);
    let cov = me.map(|_| covered(theirs)).unwrap_or_default();
    let file = f.os_file();
    // The error of my last file access, reported at the next agreement.
    let mut failed: Option<MpiError> = None;
    for r in 0..plan.rounds() {
        for (a, pieces) in mine.iter().enumerate() {
            let (ws, we) = plan.window(a, r);
            let base = lay.at(a, r);
            for (o, l, d) in clip_all(pieces, ws, we) {
                let at = base + (o - ws) as usize;
                assert!(
                    at + l <= seg.len && d + l <= data.len(),
                    "a piece lies in both"
                );
                // SAFETY: within the segment and `data` (asserted). Ranks write disjoint
                // bytes unless their ranges overlap, where MPI leaves the file's content
                // undefined; the copy stays within the mapping either way.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(d), seg.base.add(at), l) };
            }
        }
        let codes = agree(f, failed.as_ref().map_or(0, |e| e.class as u32))?;
        first_failure(call, &codes, &failed)?;
        if let Some(a) = me {
            let (ws, we) = plan.window(a, r);
            let base = lay.at(a, r);
            for (s, e) in runs_in(&cov, ws, we) {
                let at = base + (s - ws) as usize;
                let n = (e - s) as usize;
                assert!(at + n <= seg.len, "a run lies in the segment");
                // SAFETY: within the segment (asserted); no rank writes these bytes until
                // the next agreement (see the module doc).
                let src = unsafe { std::slice::from_raw_parts(seg.base.add(at), n) };
                if let Err(e) = pwrite_full(file, src, s) {
                    failed = Some(os_err(call, e));
                    break;
                }
            }
        }
    }
    let codes = agree(f, failed.as_ref().map_or(0, |e| e.class as u32))?;
    first_failure(call, &codes, &failed)?;
    Ok(true)
}

/// Collective read through the segment (see [`write_all`]); Ok(false) when no segment
/// could be had.
pub(crate) fn read_all(
    f: &File,
    call: &str,
    plan: &Plan,
    mine: &[Vec<(u64, usize, usize)>],
    theirs: &[Vec<(u64, usize)>],
    out: &mut [u8],
) -> MpiResult<bool> {
    let lay = Layout::of(plan);
    let Some(seg) = segment(f, call, lay.len(plan.aggs.len()), maker(plan))? else {
        return Ok(false);
    };
    let (rank, _) = f.rank_and_size();
    let me = plan.aggs.iter().position(|&a| a == rank);
    let cov = me.map(|_| covered(theirs)).unwrap_or_default();
    let file = f.os_file();
    let read_round = |a: usize, r: u64| -> Result<(), MpiError> {
        let (ws, we) = plan.window(a, r);
        let base = lay.at(a, r);
        // Runs joined across holes of up to READ_HOLE: one pread each.
        let mut group: Option<(u64, u64)> = None;
        let flush = |g: (u64, u64)| -> Result<(), MpiError> {
            let at = base + (g.0 - ws) as usize;
            let n = (g.1 - g.0) as usize;
            assert!(at + n <= seg.len, "a run lies in the segment");
            // SAFETY: within the segment (asserted); no rank reads these bytes before the
            // next agreement (see the module doc).
            let dst = unsafe { std::slice::from_raw_parts_mut(seg.base.add(at), n) };
            let got = pread_full(file, dst, g.0).map_err(|e| os_err(call, e))?;
            // Past the end of the file reads as zeros.
            dst[got..].fill(0);
            Ok(())
        };
        for (s, e) in runs_in(&cov, ws, we) {
            group = match group {
                Some(g) if s - g.1 <= READ_HOLE => Some((g.0, e)),
                Some(g) => {
                    flush(g)?;
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some(g) = group {
            flush(g)?;
        }
        Ok(())
    };
    let mut failed: Option<MpiError> = None;
    for r in 0..plan.rounds() {
        if let Some(a) = me {
            if failed.is_none() {
                failed = read_round(a, r).err();
            }
        }
        let codes = agree(f, failed.as_ref().map_or(0, |e| e.class as u32))?;
        first_failure(call, &codes, &failed)?;
        for (a, pieces) in mine.iter().enumerate() {
            let (ws, we) = plan.window(a, r);
            let base = lay.at(a, r);
            for (o, l, d) in clip_all(pieces, ws, we) {
                let at = base + (o - ws) as usize;
                assert!(
                    at + l <= seg.len && d + l <= out.len(),
                    "a piece lies in both"
                );
                // SAFETY: within the segment and `out` (asserted); the aggregator does not
                // write this buffer again before every rank's next agreement.
                unsafe {
                    std::ptr::copy_nonoverlapping(seg.base.add(at), out.as_mut_ptr().add(d), l)
                };
            }
        }
    }
    Ok(true)
}

/// My pieces clipped to `[ws, we)`: `(offset, len, data position)`. Pieces in offset
/// order (a filetype's displacements never decrease, so an access's pieces are) are found
/// by bisection; any others by a scan.
fn clip_all(
    pieces: &[(u64, usize, usize)],
    ws: u64,
    we: u64,
) -> impl Iterator<Item = (u64, usize, usize)> + '_ {
    let sorted = pieces.windows(2).all(|w| w[0].0 + w[0].1 as u64 <= w[1].0);
    let first = if sorted {
        pieces.partition_point(|p| p.0 + p.1 as u64 <= ws)
    } else {
        0
    };
    pieces[first..]
        .iter()
        .take_while(move |p| !sorted || p.0 < we)
        .filter_map(move |&(o, l, d)| {
            let a = o.max(ws);
            let b = (o + l as u64).min(we);
            (a < b).then(|| (a, (b - a) as usize, d + (a - o) as usize))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covered_runs_merge_touching_and_overlapping_ranges() {
        let theirs = vec![vec![(0, 4), (8, 4)], vec![(4, 4), (20, 2)], vec![(10, 4)]];
        assert_eq!(covered(&theirs), vec![(0, 14), (20, 22)]);
        let cov = covered(&theirs);
        assert_eq!(
            runs_in(&cov, 2, 21).collect::<Vec<_>>(),
            vec![(2, 14), (20, 21)]
        );
        assert_eq!(runs_in(&cov, 14, 20).count(), 0);
    }

    #[test]
    fn pieces_clip_to_a_window_with_their_data_positions() {
        let p = [(0u64, 4usize, 0usize), (8, 4, 4), (16, 4, 8)];
        let got: Vec<_> = clip_all(&p, 2, 10).collect();
        assert_eq!(got, vec![(2, 2, 2), (8, 2, 4)]);
        assert_eq!(clip_all(&p, 20, 30).count(), 0);
    }

    #[test]
    fn the_layout_double_buffers_only_with_several_rounds() {
        let one = Plan::new(vec![0], 0, 100, 1000, 1);
        let l = Layout::of(&one);
        assert_eq!((l.buf, l.depth), (100, 1));
        let many = Plan::new(vec![0, 2], 0, 1000, 100, 1);
        let l = Layout::of(&many);
        assert_eq!((l.buf, l.depth), (100, 2));
        assert_eq!(l.len(2), 400);
        assert_eq!(l.at(1, 3), 300);
        assert_eq!(l.at(0, 2), 0);
    }
}
