//! Two-phase I/O through the file's own pages, for a file whose ranks all run on one node.
//!
//! The shared-memory rounds of [`crate::shm`] still move every byte through the kernel
//! once: the aggregator `pwrite`s the round buffers into the page cache (or `pread`s
//! them out), and buffered writes to one file serialise on its inode lock, so that one
//! copy by one process is the floor of every round-based variant. On one node the page
//! cache itself can be the shared round buffer: every rank maps the file (its own
//! descriptor, `MAP_SHARED`) window by window and copies its pieces straight into (or out
//! of) the file's pages, all ranks at once, in user space; no rank calls `pwrite` or
//! `pread`, and there is no aggregator.
//!
//! Protocol of one collective access (after the setup all-gather, which chose this route
//! on every rank alike, see [`usable`]):
//! - writing: every rank first reserves its own span with `fallocate` (mode 0: the file
//!   grows to `max(size, end)` and never shrinks, whatever order the ranks' calls take;
//!   the blocks are allocated, so a full file system is `ENOSPC` here and never a SIGBUS
//!   on a mapped hole later), then maps and fills its pieces. A rank whose reservation
//!   fails stores nothing through a mapping: `ENOSPC`, `EFBIG` and the like become its
//!   error, a file system without `fallocate` makes it write its pieces with `pwrite`.
//!   A last agreement (an all-gather of one error class per rank) makes any rank's error
//!   every rank's, and no rank returns before every rank's data is in the file (in the
//!   page cache, which is the file for every process of the machine; `MPI_File_sync`'s
//!   `fsync` writes pages dirtied through a mapping like any other);
//! - reading: every rank maps and copies its pieces out, up to the end of the file
//!   (bytes past it read as zeros, as the other routes deliver them). A span with a hole
//!   (`SEEK_HOLE`) is read with `pread` instead: faulting a hole in would allocate a page,
//!   which on a full `tmpfs` is a SIGBUS. The same last agreement reports errors.
//!
//! Windows: a rank maps at most `cb_buffer_size` bytes (rounded up to pages) at a time,
//! on multiples of that size, so a huge span costs no more address space than a round
//! buffer. The pages of a window that the rank's pieces touch are populated in one call
//! per run of pages (`MADV_POPULATE_WRITE` / `_READ`, Linux 5.14) instead of one fault per
//! page; a kernel without it takes the faults. A window that cannot be mapped is copied with
//! `pwrite`/`pread`, piece by piece: slower, never wrong.
//!
//! What a mapping cannot protect against: another process truncating the file during the
//! access (its pages then SIGBUS, as for any program that maps files), which MPI leaves
//! undefined as well (the file is the job's during a collective access).

use std::os::fd::AsRawFd;

use tsunagi_core::{ErrorClass, MpiError, MpiResult};

use crate::hints::Switch;
use crate::posix::{os_err, pread_full, pwrite_full};
use crate::stats::Dir;
use crate::File;

/// `madvise` advice that faults a range in (Linux 5.14); older kernels answer EINVAL and
/// the copies take the faults.
const MADV_POPULATE_READ: libc::c_int = 22;
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// File systems on which automatic mode maps files: local ones whose `fallocate` reserves
/// blocks that a store through a mapping then uses as they are (ext4, xfs, tmpfs). On
/// network and FUSE file systems every fault may be a round trip, and shared writable
/// mappings may be refused or not coherent; copy-on-write ones (btrfs, zfs) allocate anew
/// at the store, so a full file system would be a SIGBUS there. `tsunagi_cb_mmap=enable`
/// maps on any file system that allows it.
const LOCAL_FS: [i64; 3] = [
    0xEF53,      // ext2/3/4
    0x5846_5342, // xfs
    0x0102_1994, // tmpfs
];

/// What a rank contributes to the setup all-gather about this route: bit 0, it can map
/// the file for this access (hint not `disable`, a regular file, opened for reading and
/// writing when writing: a `MAP_SHARED` writable mapping needs both); bit 1, the file
/// system is local; bit 2, the hint is `enable`.
pub(crate) fn setup_bits(f: &File, hint: Switch, dir: Dir) -> u64 {
    if hint == Switch::Disable {
        return 0;
    }
    let fd = f.os_file().as_raw_fd();
    // SAFETY: fstat into a zeroed struct we own, on a descriptor open for the File's life.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return 0;
    }
    // SAFETY: F_GETFL on our descriptor only reads its flags.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    let acc = fl & libc::O_ACCMODE;
    let can = match dir {
        Dir::Write => fl >= 0 && acc == libc::O_RDWR,
        Dir::Read => fl >= 0 && (acc == libc::O_RDWR || acc == libc::O_RDONLY),
    };
    if !can {
        return 0;
    }
    // SAFETY: fstatfs into a zeroed struct we own.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let local =
        unsafe { libc::fstatfs(fd, &mut fs) } == 0 && LOCAL_FS.contains(&(fs.f_type as i64));
    1 | u64::from(local) << 1 | u64::from(hint == Switch::Enable) << 2
}

/// The largest span automatic mode maps for a write (bytes). Measured (docs/io.md, session
/// 9; BT-IO on 4 ranks, ext4, two interleaved A/Bs): at 84 MB (N=128) the mapped write beat
/// the shared-memory rounds (210 against 228 ms, 256 against 371 ms) with a quarter less
/// CPU; at 671 MB (N=256) it took 1.6-2x as long (same CPU time: the extra time is outside
/// the ranks, probably the write-back converting the `fallocate`d extents). Reads reserve
/// nothing and dirty nothing, so they map at any span (session 10: BT N=256 reads, mapped
/// against the shared-memory rounds and independent reads, docs/io.md).
pub const AUTO_MAX_SPAN: u64 = 128 << 20;

/// Whether the access maps the file, from every rank's [`setup_bits`] (so every rank
/// decides alike): every rank can, and some rank's hint says `enable`, or the file
/// system is local, the access dense (its bytes fill at least half of its span: a writing
/// rank reserves its whole span, so a sparse access would allocate its gaps; and mapping a
/// page to copy a few bytes costs more than a `pwrite`/`pread` of them) and, for a write,
/// the span at most [`AUTO_MAX_SPAN`].
pub(crate) fn usable(bits: &[u64], bytes: u64, span: u64, dir: Dir) -> bool {
    let all = |b: u64| bits.iter().all(|&x| x & b != 0);
    let small_enough = dir == Dir::Read || span <= AUTO_MAX_SPAN;
    let auto = all(2) && small_enough && bytes.saturating_mul(2) >= span;
    all(1) && (bits.iter().any(|&x| x & 4 != 0) || auto)
}

fn page() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// How windows are populated (`TSUNAGI_IO_MMAP_POPULATE`: `none` takes a fault per page,
/// for measuring; anything else populates).
fn populate() -> bool {
    !matches!(
        std::env::var("TSUNAGI_IO_MMAP_POPULATE").as_deref(),
        Ok("none")
    )
}

/// One mapped window of the file: `[start, start + len)`.
struct Window {
    base: *mut u8,
    start: u64,
    len: usize,
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap gave us, no longer used (the window is dropped).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Maps the windows an access walks through, one at a time.
struct Mapper<'a> {
    file: &'a std::fs::File,
    write: bool,
    /// Window size (a multiple of the page size); windows start on its multiples.
    win: u64,
    /// The pages this rank touches (page-aligned runs of its pieces, merged, sorted, below
    /// the end of the file), or None: no populating. Only these are populated: past the
    /// end of the file a populate fails, and the other ranks' pages would cost a fault
    /// each in this process for nothing (on ext4 a write fault is a `page_mkwrite` call).
    pages: Option<Vec<(u64, u64)>>,
    /// The current window's start and its mapping (None: it could not be mapped).
    cur: Option<(u64, Option<Window>)>,
    /// Never map (a read of a span with holes).
    off: bool,
}

impl Mapper<'_> {
    /// The window holding offset `o`, mapped if it can be, and where it ends.
    fn at(&mut self, o: u64) -> (Option<&Window>, u64) {
        let ws = o - o % self.win;
        let we = ws + self.win;
        if self.cur.as_ref().is_none_or(|c| c.0 != ws) {
            // Unmap the old window before mapping the next one.
            self.cur = None;
            let w = if self.off { None } else { self.map(ws) };
            self.cur = Some((ws, w));
        }
        (self.cur.as_ref().and_then(|c| c.1.as_ref()), we)
    }

    fn map(&self, ws: u64) -> Option<Window> {
        let prot = if self.write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let len = self.win as usize;
        // SAFETY: a fresh mapping of our descriptor at a page-aligned offset (`win` is a
        // multiple of the page size); it may reach past the end of the file, which mmap
        // allows: only the bytes below the end are ever touched (the callers clip to it).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                ws as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let w = Window {
            base: p as *mut u8,
            start: ws,
            len,
        };
        if let Some(pages) = &self.pages {
            let we = ws + self.win;
            let first = pages.partition_point(|r| r.1 <= ws);
            let advice = if self.write {
                MADV_POPULATE_WRITE
            } else {
                MADV_POPULATE_READ
            };
            for &(s, e) in pages[first..].iter().take_while(|r| r.0 < we) {
                let (s, e) = (s.max(ws), e.min(we));
                // SAFETY: a page-aligned range inside our mapping whose pages lie below the
                // end of the file (`pages` is clipped to it); populating only faults them
                // in (a failure, e.g. EINVAL before Linux 5.14, leaves the faults to the
                // copy, so it is ignored).
                unsafe {
                    libc::madvise(
                        w.base.add((s - ws) as usize) as *mut libc::c_void,
                        (e - s) as usize,
                        advice,
                    )
                };
            }
        }
        Some(w)
    }
}

/// Every rank's `code` (an all-gather of one u32 each), and the first error as every
/// rank's: the access's last synchronisation.
fn agree(f: &File, call: &str, mine: Option<MpiError>) -> MpiResult<()> {
    let all = crate::shm::agree(f, mine.as_ref().map_or(0, |e| e.class as u32))?;
    if let Some(e) = mine {
        return Err(e);
    }
    match all.iter().enumerate().find(|(_, &c)| c != 0) {
        None => Ok(()),
        Some((rank, &c)) => Err(MpiError::new(
            ErrorClass::from_code(c as i32).unwrap_or(ErrorClass::Io),
            format!("{call}: rank {rank} failed to access the file"),
        )),
    }
}

/// The span of `runs`: `[lo, hi)`, empty as (0, 0).
fn span(runs: &[(u64, usize)]) -> (u64, u64) {
    let lo = runs.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = runs.iter().map(|r| r.0 + r.1 as u64).max().unwrap_or(0);
    (lo, hi.max(lo))
}

/// The pages `runs` touch below `end`: page-aligned, merged, sorted; None when the windows
/// are not to be populated (`TSUNAGI_IO_MMAP_POPULATE=none`).
fn touched_pages(runs: &[(u64, usize)], end: u64) -> Option<Vec<(u64, u64)>> {
    if !populate() {
        return None;
    }
    let pg = page();
    let mut all: Vec<(u64, u64)> = runs
        .iter()
        .filter(|r| r.1 > 0 && r.0 < end)
        .map(|&(o, l)| {
            let e = (o + l as u64).min(end);
            (
                o - o % pg,
                e.next_multiple_of(pg).min(end.next_multiple_of(pg)),
            )
        })
        .collect();
    if !all.windows(2).all(|w| w[0].0 <= w[1].0) {
        all.sort_unstable();
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    Some(out)
}

/// The window size for rounds of `cb` bytes: at least a page, a multiple of pages.
fn window(cb: u64) -> u64 {
    let pg = page();
    cb.max(pg).next_multiple_of(pg)
}

/// Reserve `[lo, hi)` of the file (and grow the file to `hi` if shorter: never shrink).
/// Ok(false): the file system cannot (`EOPNOTSUPP` and kin).
fn reserve(file: &std::fs::File, lo: u64, hi: u64) -> std::io::Result<bool> {
    if lo >= hi {
        return Ok(true);
    }
    loop {
        // SAFETY: a plain system call on our descriptor; mode 0 allocates and extends.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                0,
                lo as libc::off_t,
                (hi - lo) as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::ENODEV) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Collective write of `data` (in stream order over `runs`, my file ranges) through the
/// file's pages. `cb`: the round size, which bounds the windows.
/// `mark(phase)` ends a phase of the trace (`TSUNAGI_IO_TRACE`).
pub(crate) fn write_all(
    f: &File,
    call: &str,
    runs: &[(u64, usize)],
    data: &[u8],
    cb: u64,
    mark: &mut dyn FnMut(&'static str),
) -> MpiResult<()> {
    let file = f.os_file();
    let (lo, hi) = span(runs);
    let failed = match reserve(file, lo, hi) {
        Err(e) => Some(os_err(call, e)),
        Ok(reserved) => {
            mark("reserve");
            copy_in(file, call, runs, data, cb, hi, reserved).err()
        }
    };
    mark("copy");
    let r = agree(f, call, failed);
    mark("agree");
    r
}

/// `hi`: the end of my span (the file reaches it: `reserve`).
fn copy_in(
    file: &std::fs::File,
    call: &str,
    runs: &[(u64, usize)],
    data: &[u8],
    cb: u64,
    hi: u64,
    reserved: bool,
) -> MpiResult<()> {
    let mut m = Mapper {
        file,
        write: true,
        win: window(cb),
        pages: touched_pages(runs, hi),
        cur: None,
        // Without a reservation a mapped store past the end of the file or into a hole
        // of a full file system is a SIGBUS: write with pwrite.
        off: !reserved,
    };
    let mut d = 0usize;
    for &(o, l) in runs {
        let mut done = 0usize;
        while done < l {
            let at = o + done as u64;
            let (w, we) = m.at(at);
            let n = (l - done).min((we - at) as usize);
            let src = &data[d + done..d + done + n];
            match w {
                Some(w) => {
                    let i = (at - w.start) as usize;
                    assert!(i + n <= w.len, "a piece lies in its window");
                    // SAFETY: within the mapping (asserted) and below the end of the file
                    // (`reserve` grew it to `hi`, past every piece), on reserved blocks.
                    // Ranks store disjoint bytes unless their ranges overlap, where MPI
                    // leaves the file's content undefined; a store stays in the mapping.
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), w.base.add(i), n) };
                }
                None => pwrite_full(file, src, at).map_err(|e| os_err(call, e))?,
            }
            done += n;
        }
        d += l;
    }
    Ok(())
}

/// Collective read into `out` (in stream order over `runs`) through the file's pages
/// (see [`write_all`]). Bytes past the end of the file are zeros; the caller counts
/// what was read.
pub(crate) fn read_all(
    f: &File,
    call: &str,
    runs: &[(u64, usize)],
    out: &mut [u8],
    cb: u64,
    mark: &mut dyn FnMut(&'static str),
) -> MpiResult<()> {
    let failed = copy_out(f.os_file(), call, runs, out, cb).err();
    mark("copy");
    let r = agree(f, call, failed);
    mark("agree");
    r
}

fn copy_out(
    file: &std::fs::File,
    call: &str,
    runs: &[(u64, usize)],
    out: &mut [u8],
    cb: u64,
) -> MpiResult<()> {
    let eof = file.metadata().map_err(|e| os_err(call, e))?.len();
    let (lo, hi) = span(runs);
    let hi = hi.min(eof);
    let holes = lo < hi && has_hole(file, lo, hi);
    let mut m = Mapper {
        file,
        write: false,
        win: window(cb),
        pages: touched_pages(runs, hi),
        cur: None,
        off: holes,
    };
    let mut d = 0usize;
    for &(o, l) in runs {
        // The part of the piece before the end of the file; the rest reads as zeros.
        let have = eof.saturating_sub(o).min(l as u64) as usize;
        out[d + have..d + l].fill(0);
        let mut done = 0usize;
        while done < have {
            let at = o + done as u64;
            let (w, we) = m.at(at);
            let n = (have - done).min((we - at) as usize);
            let dst = &mut out[d + done..d + done + n];
            match w {
                Some(w) => {
                    let i = (at - w.start) as usize;
                    assert!(i + n <= w.len, "a piece lies in its window");
                    // SAFETY: within the mapping (asserted) and below the end of the file
                    // (`have`), in a span without holes: every page is in the file.
                    unsafe { std::ptr::copy_nonoverlapping(w.base.add(i), dst.as_mut_ptr(), n) };
                }
                None => {
                    let got = pread_full(file, dst, at).map_err(|e| os_err(call, e))?;
                    dst[got..].fill(0);
                }
            }
            done += n;
        }
        d += l;
    }
    Ok(())
}

/// Whether `[lo, hi)` (below the end of the file) has a hole: the first hole at or after
/// `lo` (`SEEK_HOLE`; the end of the file counts as one) lies before `hi`. A file system
/// without `SEEK_HOLE` reports none, which is what it means.
fn has_hole(file: &std::fs::File, lo: u64, hi: u64) -> bool {
    // SAFETY: lseek on our own descriptor; the File's position is never used (every
    // access is positioned), so moving it does not matter.
    let h = unsafe { libc::lseek(file.as_raw_fd(), lo as libc::off_t, libc::SEEK_HOLE) };
    h >= 0 && (h as u64) < hi
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> (std::path::PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!("tsunagi-io-{name}-{}", std::process::id()));
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        (path, file)
    }

    #[test]
    fn the_route_needs_every_rank_a_dense_access_and_a_small_write_span_unless_enabled() {
        // can | local
        let auto = [3, 3, 3];
        for dir in [Dir::Write, Dir::Read] {
            assert!(usable(&auto, 60, 100, dir));
            assert!(!usable(&auto, 40, 100, dir), "sparse");
            assert!(
                !usable(&[3, 1, 3], 100, 100, dir),
                "a non-local file system"
            );
            assert!(usable(&[3, 5, 3], 10, 100, dir), "enable on some rank");
            assert!(!usable(&[3, 0, 7], 100, 100, dir), "a rank cannot map it");
        }
        let big = AUTO_MAX_SPAN + 1;
        assert!(
            !usable(&auto, big, big, Dir::Write),
            "a large span, writing"
        );
        assert!(usable(&auto, big, big, Dir::Read), "a large span, reading");
        assert!(
            usable(&[7, 3, 3], big, big, Dir::Write),
            "a large span, enabled"
        );
    }

    #[test]
    fn pieces_go_into_the_file_through_windows_and_the_file_grows_never_shrinks() {
        let (path, file) = temp("mapped-write");
        let pg = page();
        // An existing longer file: its tail stays.
        pwrite_full(&file, &vec![9u8; 5 * pg as usize], 0).unwrap();
        // Pieces across window (page) boundaries, out of order, one past the old end.
        let runs = [
            (pg - 3, 6usize),
            (10, 4),
            (3 * pg + 1, 2 * pg as usize),
            (6 * pg - 2, 5),
        ];
        let total: usize = runs.iter().map(|r| r.1).sum();
        let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        let (lo, hi) = span(&runs);
        assert!(reserve(&file, lo, hi).unwrap());
        copy_in(&file, "t", &runs, &data, 1, hi, true).unwrap();
        assert_eq!(
            file.metadata().unwrap().len(),
            6 * pg + 3,
            "grown to the end"
        );
        let mut want = vec![9u8; 5 * pg as usize];
        want.resize((6 * pg + 3) as usize, 0);
        let mut d = 0;
        for &(o, l) in &runs {
            want[o as usize..o as usize + l].copy_from_slice(&data[d..d + l]);
            d += l;
        }
        let mut back = vec![0u8; want.len()];
        pread_full(&file, &mut back, 0).unwrap();
        assert!(back == want, "the file holds the pieces and keeps the rest");
        // Reserving a range below the end leaves the size alone.
        assert!(reserve(&file, 0, 10).unwrap());
        assert_eq!(file.metadata().unwrap().len(), 6 * pg + 3);
        // Reading back through the mapping, past the end as zeros.
        let rruns = [(6 * pg - 2, 8usize), (pg - 3, 6), (7 * pg, 3)];
        let mut out = vec![0xAAu8; 17];
        copy_out(&file, "t", &rruns, &mut out, 1).unwrap();
        let mut expect = want[(6 * pg - 2) as usize..].to_vec();
        expect.resize(8, 0);
        expect.extend_from_slice(&want[(pg - 3) as usize..(pg + 3) as usize]);
        expect.extend_from_slice(&[0, 0, 0]);
        assert_eq!(out, expect);
        // Without a reservation (a file system without fallocate) pwrite serves.
        let data2 = [1u8, 2, 3];
        copy_in(&file, "t", &[(8 * pg, 3)], &data2, 1, 8 * pg + 3, false).unwrap();
        let mut b = [0u8; 3];
        pread_full(&file, &mut b, 8 * pg).unwrap();
        assert_eq!(b, data2);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_pages_touched_are_merged_and_end_at_the_end_of_the_file() {
        let pg = page();
        let runs = [
            (pg + 1, 2usize),
            (10, 5),
            (pg - 1, 2),
            (5 * pg, 10),
            (9 * pg, 1),
        ];
        assert_eq!(
            touched_pages(&runs, 5 * pg + 4),
            Some(vec![(0, 2 * pg), (5 * pg, 6 * pg)])
        );
    }

    #[test]
    fn a_span_with_a_hole_is_read_with_pread() {
        let (path, file) = temp("mapped-hole");
        let pg = page();
        // Data, a hole of 64 pages, data: the hole reads as zeros either way.
        pwrite_full(&file, &[5u8; 10], 0).unwrap();
        pwrite_full(&file, &[6u8; 10], 64 * pg).unwrap();
        let hole = has_hole(&file, 0, 64 * pg + 10);
        // ext4, xfs, btrfs and tmpfs report it; a file system without SEEK_HOLE would not.
        if hole {
            assert!(!has_hole(&file, 64 * pg, 64 * pg + 10));
        }
        let runs = [(5u64, 10usize), (64 * pg + 5, 10)];
        let mut out = vec![0xAAu8; 20];
        copy_out(&file, "t", &runs, &mut out, 1 << 20).unwrap();
        let mut want = vec![5u8; 5];
        want.extend([0; 5]);
        want.extend([6; 5]);
        want.extend([0; 5]);
        assert_eq!(out, want);
        std::fs::remove_file(&path).unwrap();
    }
}
