//! Collective buffering (two-phase I/O, as ROMIO does it). The ranks' accessed ranges,
//! piece counts and byte counts are all-gathered, and every rank picks the same [`Route`]:
//! with `romio_cb_*` = `automatic`, two-phase I/O runs only when the ranks' ranges
//! interleave *and* their pieces are on average smaller than `tsunagi_cb_piece_limit`
//! (16 KiB). Large pieces (a slab decomposition) and disjoint ranges go straight to the
//! file from each rank (the independent path), with no exchange: an aggregator could not
//! make them more contiguous, only copy them once more. Reads of views whose tiles are
//! small (`tsunagi_cb_read_small`, agreed at `MPI_File_set_view`) go straight to the file
//! too, with no synchronisation at all. With every rank's view flattened at `set_view`
//! (module `flat`), the setup all-gathers only each rank's stream position and length, and
//! the aggregators compute the ranks' ranges themselves (no all-to-all of range lists).
//!
//! Two-phase: the span is cut into one contiguous file domain per aggregator, each handled
//! in rounds of at most `cb_buffer_size` bytes. Each rank tells each aggregator once which
//! file ranges of its domain it accesses; then per round every rank sends each aggregator
//! its pieces of that round's window as one message straight from its data, and the
//! aggregator receives each sender's pieces back to back (contiguous, so the transport
//! copies them once, straight from the sender's memory) and writes the round with
//! `pwritev` over all of them in file order, its own pieces straight from its data (no
//! staging copy, no lock; a read-modify-write under a lock only when the pieces leave more
//! than a few holes). Reading mirrors it: `preadv` scatters each round into per-receiver
//! slices (and the aggregator's own pieces straight into its buffer), each sent as one
//! contiguous message.
//!
//! On one node (every rank of the file on one host) the data takes no messages. When every
//! rank can map the file (module `mapped`: a regular file on a local file system, opened
//! for reading and writing to write, a dense access (a write of at most 128 MiB), no rank's
//! `tsunagi_cb_mmap` says `disable`), every rank copies its pieces straight into or out
//! of the file's pages, with no aggregator and no `pwrite`/`pread`. Otherwise, unless a
//! rank's `tsunagi_cb_shm` says `disable`, the rounds go through memory the ranks share
//! (module `shm`): the ranks copy their own pieces into or out of the aggregator's round
//! buffers, and only the aggregator enters the kernel. The message rounds below serve
//! files across nodes.
//!
//! Pipelining: an aggregator has two buffers and a helper thread for the file. While the
//! helper writes round r's buffer, the ranks exchange round r + 1 into the other one;
//! reading, the helper reads round r + 1 while round r's data goes out.
//!
//! Layout: domains start on `striping_unit` boundaries (default 1 MiB) when they are at
//! least that large, so no two aggregators share a file system block. Without a
//! `cb_nodes` hint the aggregator count grows with the data: one per 4 MiB of span, at
//! least one per node, at most one per two cores of a node (an aggregator and its file
//! thread keep two busy; the fewest cores of any rank's host count) and one per rank.
//!

use std::sync::mpsc;
use std::sync::Arc;

use tsunagi_collectives::SendBuf;
use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::{MpiResult, ReqId, SendMode};

use crate::access;
use crate::flat::FlatView;
use crate::hints::{Hints, Switch};
use crate::posix::{os_err, pread_full, preadv_full, pwrite_full, pwritev_full, RangeLock};
use crate::stats::{self, Dir};
use crate::view::View;
use crate::File;

/// The tag of the data messages on the file's private communicator: one collective access
/// runs on it at a time, and messages between two ranks arrive in round order.
const DATA_TAG: i32 = 21;

/// Span bytes per aggregator when the program gives no `cb_nodes`.
const BYTES_PER_AGGREGATOR: u64 = 4 << 20;

/// The file domains of one collective access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Aggregators, as ranks of the file's communicator.
    pub aggs: Vec<usize>,
    pub lo: u64,
    pub hi: u64,
    /// Where domain 0 starts (`lo`, or `lo` rounded down to the alignment).
    pub base: u64,
    /// Bytes per domain (the last may be shorter).
    pub domain: u64,
    /// Bytes per round.
    pub cb: u64,
}

impl Plan {
    /// Domains for the span `[lo, hi)`, `aggs` aggregators, rounds of `cb` bytes; domains
    /// and rounds on multiples of `align` when a domain is at least that large.
    pub fn new(aggs: Vec<usize>, lo: u64, hi: u64, cb: usize, align: u64) -> Plan {
        let n = aggs.len().max(1) as u64;
        let raw = (hi - lo).div_ceil(n).max(1);
        let align = align.max(1);
        let mut cb = cb.max(1) as u64;
        let (base, domain) = if raw >= align && align > 1 {
            let base = lo - lo % align;
            if cb >= align {
                cb -= cb % align;
            }
            (base, (hi - base).div_ceil(n).next_multiple_of(align))
        } else {
            (lo, raw)
        };
        Plan {
            aggs,
            lo,
            hi,
            base,
            domain,
            cb,
        }
    }

    /// `[start, end)` of aggregator `a`'s domain (empty past the span).
    pub fn domain_of(&self, a: usize) -> (u64, u64) {
        let s = (self.base + a as u64 * self.domain).clamp(self.lo, self.hi);
        let e = (self.base + (a as u64 + 1) * self.domain).clamp(self.lo, self.hi);
        (s, e.max(s))
    }

    /// The aggregator (index) whose domain holds file offset `o` (`o` within the span).
    fn domain_index(&self, o: u64) -> usize {
        ((o.saturating_sub(self.base)) / self.domain) as usize
    }

    pub fn rounds(&self) -> u64 {
        // Round windows count from the aligned domain start, so a first domain that starts
        // late (at `lo`) needs no more rounds than the others.
        self.domain.div_ceil(self.cb)
    }

    /// `[start, end)` aggregator `a` handles in round `r`.
    pub fn window(&self, a: usize, r: u64) -> (u64, u64) {
        let (s, e) = self.domain_of(a);
        let nominal = self.base + a as u64 * self.domain;
        let ws = (nominal + r * self.cb).clamp(s, e);
        (ws, (nominal + (r + 1) * self.cb).clamp(s, e))
    }
}

/// Aggregators: up to `n` ranks, the first rank of each node first, then the second of
/// each node, and so on (spreading them over nodes, as ROMIO's default does).
pub fn choose_aggregators(nodes: &[u32], n: usize) -> Vec<usize> {
    let mut order: Vec<(usize, u32, usize)> = Vec::with_capacity(nodes.len());
    let mut seen: std::collections::HashMap<u32, usize> = Default::default();
    let mut node_order: Vec<u32> = Vec::new();
    for (rank, &node) in nodes.iter().enumerate() {
        let k = seen.entry(node).or_insert(0);
        if *k == 0 && !node_order.contains(&node) {
            node_order.push(node);
        }
        order.push((*k, node, rank));
        *k += 1;
    }
    order.sort_by_key(|&(k, node, rank)| {
        (
            k,
            node_order.iter().position(|&x| x == node).unwrap_or(0),
            rank,
        )
    });
    let mut aggs: Vec<usize> = order.into_iter().take(n.max(1)).map(|t| t.2).collect();
    aggs.sort_unstable();
    aggs
}

/// The aggregator count without a `cb_nodes` hint: one per 4 MiB of
/// the span, at least one per node, at most one per two `cores` per node and one per rank.
pub fn default_aggregators(span: u64, nodes: usize, ranks: usize, cores: usize) -> usize {
    let want = span.div_ceil(BYTES_PER_AGGREGATOR) as usize;
    let nodes = nodes.max(1);
    let cap = (nodes * (cores / 2).max(1))
        .min(ranks.max(1))
        .max(nodes.min(ranks.max(1)));
    want.clamp(nodes.min(cap), cap)
}

/// Clip `(off, len)` to `[s, e)`: the offset and length inside, if any.
fn clip(off: u64, len: usize, s: u64, e: u64) -> Option<(u64, usize)> {
    let a = off.max(s);
    let b = (off + len as u64).min(e);
    (a < b).then(|| (a, (b - a) as usize))
}

/// Which way a collective access goes (`TSUNAGI_IO_TRACE` prints it with the reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Two-phase I/O through the aggregators.
    TwoPhase,
    /// No rank accesses anything.
    Nothing,
    /// `romio_cb_read` / `romio_cb_write` = `disable`.
    Disabled,
    /// Automatic: the ranks' file ranges do not interleave, so every rank's accesses are
    /// already as contiguous as an aggregator would make them.
    Disjoint,
    /// Automatic: the ranks' pieces are on average at least `tsunagi_cb_piece_limit`
    /// bytes. Each is one request to the file straight from the rank's memory; moving
    /// its bytes through an aggregator first costs more than the request it saves.
    LargePieces,
    /// Atomic mode: every access, collective or not, goes to the file under a lock.
    Atomic,
    /// Automatic, reads: every rank's filetype tile holds at most `tsunagi_cb_read_small`
    /// bytes in pieces of at least [`SMALL_READ_MIN_PIECE`] on average (agreed at
    /// `MPI_File_set_view`, so the access does not synchronise at all). A read has no
    /// locks or read-modify-writes to save, and each rank's pieces are one request
    /// each: cheaper than the two synchronisations and the extra copy of two-phase I/O.
    SmallReads,
}

/// The mean piece below which the small-read route does not apply: so many requests per
/// byte cost more than moving the bytes through an aggregator.
pub const SMALL_READ_MIN_PIECE: u64 = 1 << 10;

impl Route {
    fn why(self) -> &'static str {
        match self {
            Route::TwoPhase => "two-phase",
            Route::Nothing => "independent (nothing to access)",
            Route::Disabled => "independent (collective buffering disabled)",
            Route::Disjoint => "independent (the ranks' ranges do not interleave)",
            Route::LargePieces => "independent (large pieces)",
            Route::Atomic => "independent (atomic mode)",
            Route::SmallReads => "independent (small reads)",
        }
    }
}

/// The route of a collective access (the same on every rank: every input is all-gathered).
/// `mean_piece` is the mean length of the ranks' file pieces.
pub fn route(sw: Switch, planned: bool, interleaved: bool, mean_piece: u64, limit: usize) -> Route {
    match sw {
        _ if !planned => Route::Nothing,
        Switch::Disable => Route::Disabled,
        Switch::Enable => Route::TwoPhase,
        Switch::Automatic if !interleaved => Route::Disjoint,
        Switch::Automatic if mean_piece >= limit as u64 => Route::LargePieces,
        Switch::Automatic => Route::TwoPhase,
    }
}

/// What every rank learns before a collective access: the span every rank accesses, and
/// how many pieces of how many bytes.
struct Setup {
    plan: Option<Plan>,
    /// Whether the accesses interleave.
    interleaved: bool,
    /// Mean length of the ranks' pieces (file ranges).
    mean_piece: u64,
    /// Every rank's stream position and length of this access (with the views flattened
    /// at `set_view`, every rank's file ranges follow from these).
    streams: Vec<(u64, usize)>,
    /// Every rank's view flattened at `set_view`, when all were (module `flat`).
    views: Option<Arc<Vec<FlatView>>>,
    /// Every rank runs on one node and allows shared memory: two-phase I/O goes through
    /// it (module `shm`).
    one_node: bool,
    /// Every rank runs on one node and can map the file: two-phase I/O goes through the
    /// file's pages (module `mapped`).
    mapped: bool,
}

fn setup(
    f: &File,
    hints: &Hints,
    dir: Dir,
    pos: u64,
    len: usize,
    runs: &[(u64, usize)],
) -> MpiResult<Setup> {
    let comm = f.comm();
    let (lo, hi) = if runs.is_empty() {
        (u64::MAX, 0)
    } else {
        let lo = runs.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = runs.iter().map(|r| r.0 + r.1 as u64).max().unwrap_or(0);
        (lo, hi)
    };
    let bytes: u64 = runs.iter().map(|r| r.1 as u64).sum();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    // Fixed-size, so one all-gather (no lengths first). The last field: bit 0, the hints
    // allow shared memory; above it, whether this rank can map the file.
    let shm_ok = u64::from(hints.cb_shm != Switch::Disable)
        | crate::mapped::setup_bits(f, hints.cb_mmap, dir) << 1;
    let mine = [
        lo,
        hi,
        cores,
        runs.len() as u64,
        bytes,
        pos,
        len as u64,
        shm_ok,
    ];
    let (_, size) = f.rank_and_size();
    let mut flat = vec![0u64; SETUP_FIELDS * size];
    let t = Datatype::builtin(Builtin::Uint64);
    // SAFETY: SETUP_FIELDS u64 are sent from `mine` and received from each rank into `flat`.
    unsafe {
        tsunagi_collectives::allgather(
            f.runtime(),
            SendBuf::Ptr(mine.as_ptr() as *const u8),
            SETUP_FIELDS as i64,
            &t,
            flat.as_mut_ptr() as *mut u8,
            SETUP_FIELDS as i64,
            &t,
            comm,
        )?
    };
    let all: Vec<&[u64]> = flat.chunks_exact(SETUP_FIELDS).collect();
    // Every rank decides alike: on the fewest cores any rank sees.
    let cores = all.iter().map(|b| b[2]).min().unwrap_or(1) as usize;
    let pieces: u64 = all.iter().map(|b| b[3]).sum();
    let total: u64 = all.iter().map(|b| b[4]).sum();
    let mean_piece = total / pieces.max(1);
    let streams = all.iter().map(|b| (b[5], b[6] as usize)).collect();
    let mut spans: Vec<(u64, u64)> = all
        .iter()
        .map(|b| (b[0], b[1]))
        .filter(|(l, h)| l < h)
        .collect();
    if spans.is_empty() {
        return Ok(Setup {
            plan: None,
            interleaved: false,
            mean_piece,
            streams,
            views: None,
            one_node: false,
            mapped: false,
        });
    }
    spans.sort_unstable();
    let interleaved = spans.windows(2).any(|w| w[1].0 < w[0].1);
    let glo = spans.iter().map(|s| s.0).min().expect("non-empty");
    let ghi = spans.iter().map(|s| s.1).max().expect("non-empty");
    let nodes = f.runtime().comm_nodes(comm)?;
    // Shared memory only when every rank allows it (a hint set on some ranks only must
    // not split them between two protocols).
    let same = nodes.iter().all(|&x| x == nodes[0]);
    let one_node = same && all.iter().all(|b| b[7] & 1 == 1);
    let bits: Vec<u64> = all.iter().map(|b| b[7] >> 1).collect();
    let mapped = same && crate::mapped::usable(&bits, total, ghi - glo, dir);
    let n = if hints.cb_nodes_set {
        hints.cb_nodes
    } else {
        let mut distinct = nodes.as_ref().clone();
        distinct.sort_unstable();
        distinct.dedup();
        default_aggregators(ghi - glo, distinct.len(), nodes.len(), cores)
    };
    let aggs = choose_aggregators(&nodes, n);
    Ok(Setup {
        plan: Some(Plan::new(
            aggs,
            glo,
            ghi,
            hints.cb_buffer_size,
            hints.striping_unit as u64,
        )),
        interleaved,
        mean_piece,
        streams,
        views: f.peer_views(),
        one_node,
        mapped,
    })
}

/// The u64 fields every rank contributes to a collective access's setup: its span (lo,
/// hi), cores, piece count, bytes, its stream position and length, and whether its hints
/// allow shared memory (`tsunagi_cb_shm`) and it can map the file (`tsunagi_cb_mmap`,
/// [`crate::mapped::setup_bits`]).
const SETUP_FIELDS: usize = 8;

/// With `automatic`, when the view agreed at `MPI_File_set_view` already says the ranks'
/// pieces are large, the access goes to the file with no communication at all (every
/// rank holds the same agreed value, so all decide alike): the Setup to report.
fn large_view_pieces(f: &File, sw: Switch, hints: &Hints) -> Option<Setup> {
    let mean = f.view_mean_piece()?;
    (sw == Switch::Automatic && mean >= hints.cb_piece_limit as u64).then_some(Setup {
        plan: None,
        interleaved: false,
        mean_piece: mean,
        streams: Vec::new(),
        views: None,
        one_node: false,
        mapped: false,
    })
}

/// With `automatic`, a read whose view (agreed at `MPI_File_set_view`) has small tiles
/// of not-tiny pieces goes to the file with no communication: the Setup to report.
fn small_view_reads(f: &File, hints: &Hints) -> Option<Setup> {
    let (max_tile, mean) = f.view_tiles()?;
    (hints.cb_read == Switch::Automatic
        && max_tile <= hints.cb_read_small as u64
        && mean >= SMALL_READ_MIN_PIECE)
        .then_some(Setup {
            plan: None,
            interleaved: false,
            mean_piece: mean,
            streams: Vec::new(),
            views: None,
            one_node: false,
            mapped: false,
        })
}

impl Setup {
    fn route(&self, sw: Switch, hints: &Hints) -> Route {
        route(
            sw,
            self.plan.is_some(),
            self.interleaved,
            self.mean_piece,
            hints.cb_piece_limit,
        )
    }
}

/// My pieces per aggregator: `(file offset, len, position in my data)`.
type Pieces = Vec<Vec<(u64, usize, usize)>>;
/// At an aggregator, every rank's file ranges in its domain (empty elsewhere).
type Ranges = Vec<Vec<(u64, usize)>>;

/// Split my runs over the aggregators' domains, and give each aggregator every rank's
/// ranges in its domain; returns mine and, at an aggregator, every rank's ranges in its
/// domain. With every rank's view flattened at `set_view`, an aggregator computes the
/// others' ranges from their stream positions (no communication); else each rank sends
/// each aggregator its ranges (an all-to-all of counts, then of the ranges).
fn exchange_ranges(
    f: &File,
    plan: &Plan,
    setup: &Setup,
    runs: &[(u64, usize)],
) -> MpiResult<(Pieces, Ranges)> {
    let (rank, size) = f.rank_and_size();
    let mut mine: Pieces = vec![Vec::new(); plan.aggs.len()];
    let mut dpos = 0usize;
    for &(o, l) in runs {
        // Domains are contiguous and ascending: the first is found by division.
        let mut a = plan.domain_index(o);
        while a < plan.aggs.len() {
            let (s, e) = plan.domain_of(a);
            if s >= o + l as u64 {
                break;
            }
            if let Some((co, cl)) = clip(o, l, s, e) {
                mine[a].push((co, cl, dpos + (co - o) as usize));
            }
            a += 1;
        }
        dpos += l;
    }
    if let Some(views) = &setup.views {
        let mut theirs = vec![Vec::new(); size];
        if let Some(a) = plan.aggs.iter().position(|&g| g == rank) {
            let (ds, de) = plan.domain_of(a);
            for (i, t) in theirs.iter_mut().enumerate() {
                let (p, l) = setup.streams[i];
                if l == 0 {
                    continue;
                }
                *t = if i == rank {
                    mine[a].iter().map(|&(o, l, _)| (o, l)).collect()
                } else {
                    views[i]
                        .runs(p, l)
                        .into_iter()
                        .filter_map(|(o, l)| clip(o, l, ds, de))
                        .collect()
                };
            }
        }
        return Ok((mine, theirs));
    }
    // The ranges as u64 pairs, one block per aggregator.
    let mut send: Vec<u8> = Vec::new();
    let mut scounts = vec![0i64; size];
    let mut sdispls = vec![0i64; size];
    for (a, &agg) in plan.aggs.iter().enumerate() {
        sdispls[agg] = send.len() as i64;
        for &(o, l, _) in &mine[a] {
            send.extend(o.to_le_bytes());
            send.extend((l as u64).to_le_bytes());
        }
        scounts[agg] = send.len() as i64 - sdispls[agg];
    }
    let rcounts = alltoall_counts(f, &scounts)?;
    let (recv, rdispls) = alltoallv(f, &send, &scounts, &sdispls, &rcounts)?;
    let mut theirs = vec![Vec::new(); size];
    if plan.aggs.contains(&rank) {
        for (i, t) in theirs.iter_mut().enumerate() {
            let b = &recv[rdispls[i] as usize..(rdispls[i] + rcounts[i]) as usize];
            for c in b.chunks_exact(16) {
                t.push((
                    u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                    u64::from_le_bytes(c[8..].try_into().expect("8 bytes")) as usize,
                ));
            }
        }
    }
    Ok((mine, theirs))
}

/// Every rank's count for me, given my counts for every rank.
fn alltoall_counts(f: &File, scounts: &[i64]) -> MpiResult<Vec<i64>> {
    let size = scounts.len();
    let mut r = vec![0i64; size];
    let t = Datatype::builtin(Builtin::Int64);
    // SAFETY: `size` i64 in each buffer.
    unsafe {
        tsunagi_collectives::alltoall(
            f.runtime(),
            SendBuf::Ptr(scounts.as_ptr() as *const u8),
            1,
            &t,
            r.as_mut_ptr() as *mut u8,
            1,
            &t,
            f.comm(),
        )?
    };
    Ok(r)
}

/// All-to-all-v of bytes; the receive buffer and its displacements.
fn alltoallv(
    f: &File,
    send: &[u8],
    scounts: &[i64],
    sdispls: &[i64],
    rcounts: &[i64],
) -> MpiResult<(Vec<u8>, Vec<i64>)> {
    let mut rdispls = vec![0i64; rcounts.len()];
    let mut total = 0i64;
    for (d, &c) in rdispls.iter_mut().zip(rcounts) {
        *d = total;
        total += c;
    }
    let mut recv = vec![0u8; total as usize];
    let byte = Datatype::builtin(Builtin::Byte);
    // SAFETY: the counts and displacements lie within `send` and `recv`.
    unsafe {
        tsunagi_collectives::alltoallv(
            f.runtime(),
            SendBuf::Ptr(send.as_ptr()),
            scounts,
            sdispls,
            &byte,
            recv.as_mut_ptr(),
            rcounts,
            &rdispls,
            &byte,
            f.comm(),
        )?
    };
    Ok((recv, rdispls))
}

/// Phase times of one collective access, printed to stderr when `TSUNAGI_IO_TRACE` is
/// set (where the time of a collective access goes: agreeing, exchanging, file access).
struct Trace {
    on: bool,
    dir: Dir,
    call: String,
    last: std::time::Instant,
    phases: Vec<(&'static str, f64)>,
    /// How two-phase I/O moved the data.
    via: Via,
}

/// How a two-phase access moved the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// Rounds by messages to and from the aggregators.
    Messages,
    /// Rounds through the aggregators' buffers in shared memory (module `shm`).
    Shm,
    /// Every rank through the file's own pages (module `mapped`).
    Mapped,
}

impl Trace {
    fn new(call: &str, dir: Dir) -> Trace {
        Trace {
            on: std::env::var_os("TSUNAGI_IO_TRACE").is_some(),
            dir,
            call: call.to_string(),
            last: std::time::Instant::now(),
            phases: Vec::new(),
            via: Via::Messages,
        }
    }

    fn mark(&mut self, phase: &'static str) {
        if !self.on {
            return;
        }
        let now = std::time::Instant::now();
        let ms = (now - self.last).as_secs_f64() * 1e3;
        self.last = now;
        match self.phases.iter_mut().find(|p| p.0 == phase) {
            Some(p) => p.1 += ms,
            None => self.phases.push((phase, ms)),
        }
    }

    /// Counts the route (the MPI_T counters of [`crate::stats`]) and, when tracing, prints
    /// one line per rank and access: the route, why, and for two-phase I/O the
    /// aggregators, rounds and phase times.
    fn report(&self, f: &File, route: Route, s: &Setup) {
        stats::count(self.dir, route, self.via == Via::Mapped);
        if !self.on {
            return;
        }
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(p, ms)| format!("{p} {ms:.2} ms"))
            .collect();
        let plan = match (&s.plan, route) {
            (Some(_), Route::TwoPhase) if self.via == Via::Mapped => {
                ", every rank through the file's pages (mmap)".to_string()
            }
            (Some(p), Route::TwoPhase) => format!(
                ", {} aggregators, {} rounds, ranges {}, {}",
                p.aggs.len(),
                p.rounds(),
                if s.views.is_some() {
                    "from the views"
                } else {
                    "exchanged"
                },
                if self.via == Via::Shm {
                    "through shared memory"
                } else {
                    "by messages"
                }
            ),
            _ => String::new(),
        };
        let line = format!(
            "tsunagi-io: rank {} {}: {}, mean piece {} B{plan}: {}\n",
            f.rank_and_size().0,
            self.call,
            route.why(),
            s.mean_piece,
            phases.join(", ")
        );
        // One write, so that the ranks' lines do not interleave on a shared stderr.
        use std::io::Write;
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

/// How one message's bytes lie in a buffer: pieces `(position, len)` in message order.
/// One contiguous range goes as bytes; anything else through an hindexed datatype, so
/// the data moves between the ranks' buffers with no staging copy.
struct Layout {
    first: usize,
    total: usize,
    dtype: Option<TypeRef>,
}

fn layout(pieces: impl Iterator<Item = (usize, usize)>) -> MpiResult<Layout> {
    // Adjacent pieces merge first.
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (p, l) in pieces {
        match merged.last_mut() {
            Some(last) if last.0 + last.1 == p => last.1 += l,
            _ => merged.push((p, l)),
        }
    }
    let total = merged.iter().map(|m| m.1).sum();
    if merged.len() <= 1 {
        return Ok(Layout {
            first: merged.first().map_or(0, |m| m.0),
            total,
            dtype: None,
        });
    }
    let lens: Vec<i64> = merged.iter().map(|m| m.1 as i64).collect();
    let displs: Vec<isize> = merged.iter().map(|m| m.0 as isize).collect();
    let t = Arc::new(Datatype::hindexed(
        &lens,
        &displs,
        &Datatype::builtin(Builtin::Byte),
    )?);
    t.commit();
    Ok(Layout {
        first: 0,
        total,
        dtype: Some(t),
    })
}

/// Start sending the bytes `lay` describes in `base`.
///
/// # Safety
/// The layout lies within the buffer at `base`, which stays valid and unmodified until
/// the request completes.
unsafe fn isend(
    f: &File,
    call: &str,
    base: *const u8,
    lay: &Layout,
    dest: usize,
) -> MpiResult<ReqId> {
    let byte = Datatype::builtin(Builtin::Byte);
    let (ptr, count, t) = match &lay.dtype {
        // SAFETY: `first` lies within the buffer (caller contract).
        None => (unsafe { base.add(lay.first) }, lay.total as i64, &byte),
        Some(t) => (base, 1, t),
    };
    // SAFETY: forwarded contract.
    unsafe {
        f.runtime().isend(
            call,
            ptr,
            count,
            t,
            dest as i32,
            DATA_TAG,
            f.comm(),
            SendMode::Standard,
        )
    }
}

/// Start receiving into the bytes `lay` describes in `base`.
///
/// # Safety
/// The layout lies within the buffer at `base`, which stays valid and untouched until the
/// request completes.
unsafe fn irecv(f: &File, call: &str, base: *mut u8, lay: &Layout, src: usize) -> MpiResult<ReqId> {
    let byte = Datatype::builtin(Builtin::Byte);
    let (ptr, count, t) = match &lay.dtype {
        // SAFETY: `first` lies within the buffer (caller contract).
        None => (unsafe { base.add(lay.first) }, lay.total as i64, &byte),
        Some(t) => (base, 1, t),
    };
    // SAFETY: forwarded contract.
    unsafe {
        f.runtime()
            .irecv(call, ptr, count, t, src as i32, DATA_TAG, f.comm())
    }
}

/// Wait for every request started; the first error of the posting or of the wait.
fn finish(f: &File, call: &str, reqs: Vec<ReqId>, posted: MpiResult<()>) -> MpiResult<()> {
    let ids: Vec<Option<ReqId>> = reqs.into_iter().map(Some).collect();
    let waited = if ids.is_empty() {
        Ok(())
    } else {
        f.runtime().waitall(call, &ids).map(|_| ())
    };
    posted.and(waited)
}

/// Every rank's pieces clipped to `[ws, we)`.
fn clip_ranges(theirs: &Ranges, ws: u64, we: u64) -> Ranges {
    theirs
        .iter()
        .map(|t| t.iter().filter_map(|&(o, l)| clip(o, l, ws, we)).collect())
        .collect()
}

/// My pieces for aggregator `a` clipped to `[ws, we)`: `(offset, len, data position)`.
fn clip_mine(mine: &[(u64, usize, usize)], ws: u64, we: u64) -> Vec<(u64, usize, usize)> {
    mine.iter()
        .filter_map(|&(o, l, d)| clip(o, l, ws, we).map(|(co, cl)| (co, cl, d + (co - o) as usize)))
        .collect()
}

/// Where a segment's bytes are in memory: in the round buffer (sent by another rank), or
/// in the program's own data (an aggregator's own pieces, never copied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mem {
    Round(usize),
    User(usize),
}

/// One piece of an aggregator's round: `len` bytes at file offset `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seg {
    off: u64,
    len: usize,
    mem: Mem,
}

/// An aggregator's round: each other rank's pieces lie back to back in the round buffer
/// (`counts[i]` bytes from `slots[i]`, in that rank's stream order, so that they travel as
/// one contiguous message), and `segs` lists every piece by file offset.
#[derive(Debug)]
struct Round {
    slots: Vec<usize>,
    counts: Vec<usize>,
    segs: Vec<Seg>,
    total: usize,
}

/// The round of an aggregator (`rank`) given every rank's pieces in its window (`per`)
/// and its own (`own`: offset, len, position in its data).
fn round_of(per: &Ranges, rank: usize, own: &[(u64, usize, usize)]) -> Round {
    let mut slots = vec![0; per.len()];
    let mut counts = vec![0; per.len()];
    let mut segs = Vec::new();
    let mut total = 0;
    for (i, p) in per.iter().enumerate() {
        if i == rank {
            continue;
        }
        slots[i] = total;
        for &(off, len) in p {
            segs.push(Seg {
                off,
                len,
                mem: Mem::Round(total),
            });
            total += len;
        }
        counts[i] = total - slots[i];
    }
    segs.extend(own.iter().map(|&(off, len, d)| Seg {
        off,
        len,
        mem: Mem::User(d),
    }));
    // Stable: pieces at one offset keep their rank order.
    segs.sort_by_key(|s| s.off);
    Round {
        slots,
        counts,
        segs,
        total,
    }
}

/// Runs of segments: each a range of `segs` whose file bytes follow one another, allowing
/// holes of at most `hole` bytes between them.
fn seg_runs(segs: &[Seg], hole: u64) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < segs.len() {
        let mut end = start + 1;
        let mut next = segs[start].off + segs[start].len as u64;
        while end < segs.len() && segs[end].off >= next && segs[end].off - next <= hole {
            next = segs[end].off + segs[end].len as u64;
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// Holes a round may leave before it is written as one read-modify-write of its extent
/// instead of one `pwritev` per contiguous run.
const MAX_WRITE_HOLES: usize = 8;

/// Holes up to this size inside a round's read are read into a scratch buffer (one
/// `preadv` over them costs less than another call).
const READ_HOLE: u64 = 64 << 10;

/// Append an iovec of `len` bytes at `p`, merged into the last one when it continues it.
fn push_iov(iov: &mut Vec<libc::iovec>, p: *mut u8, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(last) = iov.last_mut() {
        if (last.iov_base as *mut u8).wrapping_add(last.iov_len) == p {
            last.iov_len += len;
            return;
        }
    }
    iov.push(libc::iovec {
        iov_base: p as *mut libc::c_void,
        iov_len: len,
    });
}

/// Write a round's segments: one `pwritev` (gathering from the round buffer and the
/// program's data, no staging copy) per run of file-contiguous segments; when the pieces
/// leave many holes, a read-modify-write of their extent under a lock (the holes keep what
/// others wrote).
fn write_round(
    file: &std::fs::File,
    segs: &[Seg],
    round: &[u8],
    user: &[u8],
) -> std::io::Result<()> {
    let src = |s: &Seg| -> &[u8] {
        match s.mem {
            Mem::Round(p) => &round[p..p + s.len],
            Mem::User(p) => &user[p..p + s.len],
        }
    };
    let runs = seg_runs(segs, 0);
    if runs.len() > MAX_WRITE_HOLES + 1 {
        let lo = segs[0].off;
        let hi = segs
            .iter()
            .map(|s| s.off + s.len as u64)
            .max()
            .unwrap_or(lo);
        let _lock = RangeLock::new(file, lo, hi - lo, true)?;
        let mut stage = vec![0u8; (hi - lo) as usize];
        pread_full(file, &mut stage, lo)?;
        for s in segs {
            let at = (s.off - lo) as usize;
            stage[at..at + s.len].copy_from_slice(src(s));
        }
        return pwrite_full(file, &stage, lo);
    }
    let mut iov = Vec::new();
    for run in runs {
        iov.clear();
        for s in &segs[run.clone()] {
            push_iov(&mut iov, src(s).as_ptr() as *mut u8, s.len);
        }
        // SAFETY: every iovec points into `round` or `user`, borrowed (so alive and not
        // written) for the whole call; pwritev only reads them.
        unsafe { pwritev_full(file, &mut iov, segs[run.start].off)? };
    }
    Ok(())
}

/// Read a round's segments: one `preadv` per run (small holes go to a scratch buffer),
/// scattering into the round buffer and, for the aggregator's own pieces, straight into
/// the program's buffer at `user` (`user_len` bytes).
///
/// # Safety
/// `user` is valid for writes of `user_len` bytes, and nothing else accesses the bytes of
/// its `Mem::User` segments during the call.
unsafe fn read_round(
    file: &std::fs::File,
    segs: &[Seg],
    round: &mut [u8],
    user: *mut u8,
    user_len: usize,
) -> std::io::Result<()> {
    let mut scratch: Vec<u8> = Vec::new();
    let runs = seg_runs(segs, READ_HOLE);
    let widest = segs
        .windows(2)
        .map(|w| w[1].off.saturating_sub(w[0].off + w[0].len as u64))
        .filter(|&h| h <= READ_HOLE)
        .max()
        .unwrap_or(0);
    scratch.resize(widest as usize, 0);
    let round_base = round.as_mut_ptr();
    let mut iov = Vec::new();
    for run in runs {
        iov.clear();
        let mut at = segs[run.start].off;
        for s in &segs[run.clone()] {
            if s.off > at {
                // A hole: read and dropped.
                iov.push(libc::iovec {
                    iov_base: scratch.as_mut_ptr() as *mut libc::c_void,
                    iov_len: (s.off - at) as usize,
                });
            }
            let p = match s.mem {
                Mem::Round(p) => {
                    assert!(p + s.len <= round.len(), "a round piece lies in the buffer");
                    // SAFETY: within `round` (asserted).
                    unsafe { round_base.add(p) }
                }
                Mem::User(p) => {
                    assert!(p + s.len <= user_len, "an own piece lies in the data");
                    // SAFETY: within the program's buffer (asserted; caller contract).
                    unsafe { user.add(p) }
                }
            };
            push_iov(&mut iov, p, s.len);
            at = s.off + s.len as u64;
        }
        // SAFETY: the iovecs point into `round` (borrowed mutably), `scratch` (ours) and
        // the program's buffer (caller contract); preadv writes only these.
        unsafe { preadv_full(file, &mut iov, segs[run.start].off)? };
    }
    Ok(())
}

/// A full round for the writer thread.
struct WriteJob {
    buf: Vec<u8>,
    segs: Vec<Seg>,
}

/// Collective write of `data` at stream position `pos`.
pub(crate) fn write_all(
    f: &File,
    call: &str,
    view: &View,
    hints: &Hints,
    pos: u64,
    data: &[u8],
) -> MpiResult<()> {
    let mut trace = Trace::new(call, Dir::Write);
    let runs = view.runs(pos, data.len());
    if let Some(s) = large_view_pieces(f, hints.cb_write, hints) {
        let r = access::write_runs(f, hints, false, &runs, data);
        trace.mark("independent write");
        trace.report(f, Route::LargePieces, &s);
        return r;
    }
    let s = setup(f, hints, Dir::Write, pos, data.len(), &runs)?;
    trace.mark("setup");
    let route = s.route(hints.cb_write, hints);
    if route != Route::TwoPhase {
        let r = access::write_runs(f, hints, false, &runs, data);
        trace.mark("independent write");
        trace.report(f, route, &s);
        return r;
    }
    let plan = s.plan.as_ref().expect("two-phase has a plan");
    if s.mapped {
        // No aggregator and no ranges to exchange: every rank stores its own pieces.
        let r = crate::mapped::write_all(f, call, &runs, data, plan.cb, &mut |p| trace.mark(p));
        trace.via = Via::Mapped;
        trace.report(f, route, &s);
        return r;
    }
    let (mine, theirs) = exchange_ranges(f, plan, &s, &runs)?;
    trace.mark("ranges");
    if s.one_node && crate::shm::write_all(f, call, plan, &mine, &theirs, data)? {
        trace.mark("shared-memory rounds");
        trace.via = Via::Shm;
        trace.report(f, route, &s);
        return Ok(());
    }
    let (rank, _) = f.rank_and_size();
    let me = plan.aggs.iter().position(|&a| a == rank);
    let file = f.os_file();
    let bufsize = plan.cb.min(plan.domain) as usize;
    let pipelined = me.is_some() && plan.rounds() > 1;
    std::thread::scope(|scope| -> MpiResult<()> {
        let (to_writer, jobs) = mpsc::channel::<WriteJob>();
        let (done_tx, from_writer) = mpsc::channel::<(Vec<u8>, std::io::Result<()>)>();
        if pipelined {
            scope.spawn(move || {
                for job in jobs {
                    let r = write_round(file, &job.segs, &job.buf, data);
                    if done_tx.send((job.buf, r)).is_err() {
                        break;
                    }
                }
            });
        } else {
            drop((jobs, done_tx));
        }
        let mut free: Vec<Vec<u8>> = Vec::new();
        let mut allocated = 0usize;
        let mut in_flight = 0usize;
        let result = (|| -> MpiResult<()> {
            for r in 0..plan.rounds() {
                let mut reqs = Vec::new();
                let mut posted = Ok(());
                // The aggregator's round: every other rank's pieces arrive as one
                // contiguous message into the round buffer; its own stay in `data`.
                let mut stage: Option<(Vec<u8>, Vec<Seg>)> = None;
                if let Some(a) = me {
                    let (ws, we) = plan.window(a, r);
                    let per = clip_ranges(&theirs, ws, we);
                    let own = clip_mine(&mine[a], ws, we);
                    let round = round_of(&per, rank, &own);
                    if !round.segs.is_empty() {
                        let mut buf = match free.pop() {
                            Some(b) => b,
                            None if allocated < 2 => {
                                allocated += 1;
                                f.take_buffer(bufsize.max(round.total))
                            }
                            None => {
                                let (b, res) = from_writer.recv().expect("the writer answers");
                                in_flight -= 1;
                                res.map_err(|e| os_err(call, e))?;
                                b
                            }
                        };
                        if buf.len() < round.total {
                            buf.resize(round.total, 0);
                        }
                        for (i, &n) in round.counts.iter().enumerate() {
                            if n == 0 || posted.is_err() {
                                continue;
                            }
                            let lay = Layout {
                                first: round.slots[i],
                                total: n,
                                dtype: None,
                            };
                            // SAFETY: slots[i] + n <= total <= buf.len(); `buf` is neither
                            // touched nor moved out of `stage` (its heap block stays put)
                            // before `finish` waited.
                            posted = unsafe { irecv(f, call, buf.as_mut_ptr(), &lay, i) }
                                .map(|id| reqs.push(id));
                        }
                        stage = Some((buf, round.segs));
                    }
                }
                // My pieces of every other aggregator's window, straight from `data`.
                for (a, &agg) in plan.aggs.iter().enumerate() {
                    if agg == rank {
                        continue;
                    }
                    let (ws, we) = plan.window(a, r);
                    let p = clip_mine(&mine[a], ws, we);
                    if p.is_empty() || posted.is_err() {
                        continue;
                    }
                    posted = layout(p.iter().map(|&(_, l, d)| (d, l)))
                        .and_then(|lay| {
                            // SAFETY: the layout lies within `data`, borrowed for the call
                            // and waited for by `finish` below.
                            unsafe { isend(f, call, data.as_ptr(), &lay, agg) }
                        })
                        .map(|id| reqs.push(id));
                }
                finish(f, call, reqs, posted)?;
                trace.mark("exchange");
                if let Some((buf, segs)) = stage {
                    if pipelined {
                        to_writer
                            .send(WriteJob { buf, segs })
                            .expect("the writer runs");
                        in_flight += 1;
                    } else {
                        let w = write_round(file, &segs, &buf, data);
                        free.push(buf);
                        w.map_err(|e| os_err(call, e))?;
                        trace.mark("write");
                    }
                }
            }
            Ok(())
        })();
        drop(to_writer);
        let mut written = Ok(());
        while in_flight > 0 {
            let (b, res) = from_writer.recv().expect("the writer answers");
            in_flight -= 1;
            if written.is_ok() {
                written = res.map_err(|e| os_err(call, e));
            }
            free.push(b);
        }
        for b in free {
            f.give_buffer(b);
        }
        trace.mark("drain");
        result.and(written)
    })?;
    trace.report(f, route, &s);
    Ok(())
}

/// The program's receive buffer as an address the reader thread may use.
#[derive(Clone, Copy)]
struct UserOut {
    base: *mut u8,
    len: usize,
}

// SAFETY: the address is used only for the bytes of the aggregator's own pieces, which
// nothing else touches during the call (see read_all), and the buffer outlives the scope
// of the thread.
unsafe impl Send for UserOut {}
// SAFETY: as for Send: the reader thread and the main thread use disjoint bytes of it.
unsafe impl Sync for UserOut {}

/// Collective read into `out` from stream position `pos`: the bytes read.
pub(crate) fn read_all(
    f: &File,
    call: &str,
    view: &View,
    hints: &Hints,
    pos: u64,
    out: &mut [u8],
) -> MpiResult<usize> {
    let mut trace = Trace::new(call, Dir::Read);
    let runs = view.runs(pos, out.len());
    if let Some(s) = large_view_pieces(f, hints.cb_read, hints) {
        let r = access::read_runs(f, hints, false, &runs, out);
        trace.mark("independent read");
        trace.report(f, Route::LargePieces, &s);
        return r;
    }
    if let Some(s) = small_view_reads(f, hints) {
        let r = access::read_runs(f, hints, false, &runs, out);
        trace.mark("independent read");
        trace.report(f, Route::SmallReads, &s);
        return r;
    }
    let s = setup(f, hints, Dir::Read, pos, out.len(), &runs)?;
    trace.mark("setup");
    let route = s.route(hints.cb_read, hints);
    if route != Route::TwoPhase {
        let r = access::read_runs(f, hints, false, &runs, out);
        trace.mark("independent read");
        trace.report(f, route, &s);
        return r;
    }
    let plan = s.plan.as_ref().expect("two-phase has a plan");
    if s.mapped {
        let r = crate::mapped::read_all(f, call, &runs, out, plan.cb, &mut |p| trace.mark(p));
        trace.via = Via::Mapped;
        trace.report(f, route, &s);
        r?;
        return bytes_before_eof(f, &runs);
    }
    let (mine, theirs) = exchange_ranges(f, plan, &s, &runs)?;
    trace.mark("ranges");
    let shared = s.one_node && crate::shm::read_all(f, call, plan, &mine, &theirs, out)?;
    if shared {
        trace.mark("shared-memory rounds");
        trace.via = Via::Shm;
        trace.report(f, route, &s);
        return bytes_before_eof(f, &runs);
    }
    let (rank, _) = f.rank_and_size();
    let me = plan.aggs.iter().position(|&a| a == rank);
    let file = f.os_file();
    let bufsize = plan.cb.min(plan.domain) as usize;
    // As an aggregator, the layout of every round (None: nothing in its window).
    let rounds: Vec<Option<Round>> = (0..plan.rounds())
        .map(|r| {
            me.and_then(|a| {
                let (ws, we) = plan.window(a, r);
                let per = clip_ranges(&theirs, ws, we);
                let own = clip_mine(&mine[a], ws, we);
                let round = round_of(&per, rank, &own);
                (!round.segs.is_empty()).then_some(round)
            })
        })
        .collect();
    let pipelined = rounds.iter().flatten().count() > 1;
    let user = UserOut {
        base: out.as_mut_ptr(),
        len: out.len(),
    };
    // SAFETY (for both calls below): the aggregator's own pieces are written only by its
    // round's read: no request receives into them (they come from no other rank) and
    // `out` is not otherwise used until the scope ends.
    let read_one = |buf: &mut Vec<u8>, round: &Round| -> std::io::Result<()> {
        if buf.len() < round.total {
            buf.resize(round.total, 0);
        }
        let u = user;
        // SAFETY: see above.
        unsafe { read_round(file, &round.segs, &mut buf[..round.total], u.base, u.len) }
    };
    std::thread::scope(|scope| -> MpiResult<()> {
        let (to_main, from_reader) = mpsc::channel::<(Vec<u8>, std::io::Result<()>)>();
        let (to_reader, returned) = mpsc::channel::<Vec<u8>>();
        if pipelined {
            let rounds = &rounds;
            let read_one = &read_one;
            scope.spawn(move || {
                // Reads one round ahead of the exchange: two buffers.
                let mut allocated = 0;
                for round in rounds.iter().flatten() {
                    let mut buf = if allocated < 2 {
                        allocated += 1;
                        f.take_buffer(bufsize.max(round.total))
                    } else {
                        match returned.recv() {
                            Ok(b) => b,
                            Err(_) => return,
                        }
                    };
                    let r = read_one(&mut buf, round);
                    if to_main.send((buf, r)).is_err() {
                        return;
                    }
                }
                drop(to_main);
                for b in returned {
                    f.give_buffer(b);
                }
            });
        } else {
            drop((to_main, returned));
        }
        for r in 0..plan.rounds() {
            let mut stage: Option<Vec<u8>> = None;
            let round = rounds[r as usize].as_ref();
            if let Some(round) = round {
                let buf = if pipelined {
                    let (b, res) = from_reader.recv().expect("the reader answers");
                    res.map_err(|e| os_err(call, e))?;
                    b
                } else {
                    let mut b = f.take_buffer(bufsize.max(round.total));
                    read_one(&mut b, round).map_err(|e| os_err(call, e))?;
                    b
                };
                stage = Some(buf);
                trace.mark("read");
            }
            let mut reqs = Vec::new();
            let mut posted = Ok(());
            // My pieces from every other aggregator, straight into `out`.
            for (a, &agg) in plan.aggs.iter().enumerate() {
                if agg == rank {
                    continue;
                }
                let (ws, we) = plan.window(a, r);
                let p = clip_mine(&mine[a], ws, we);
                if p.is_empty() || posted.is_err() {
                    continue;
                }
                posted = layout(p.iter().map(|&(_, l, d)| (d, l)))
                    .and_then(|lay| {
                        // SAFETY: the layout lies within `out`, borrowed mutably for the call
                        // and waited for by `finish` below; no other request or the reader
                        // thread writes these bytes (they are not my own domain's).
                        unsafe { irecv(f, call, user.base, &lay, agg) }
                    })
                    .map(|id| reqs.push(id));
            }
            // As an aggregator, every other rank's pieces as one contiguous message.
            if let (Some(round), Some(buf)) = (round, stage.as_ref()) {
                for (i, &n) in round.counts.iter().enumerate() {
                    if n == 0 || posted.is_err() {
                        continue;
                    }
                    let lay = Layout {
                        first: round.slots[i],
                        total: n,
                        dtype: None,
                    };
                    // SAFETY: slots[i] + n <= total <= buf.len(); `buf` is not touched or
                    // dropped before `finish` waited.
                    posted =
                        unsafe { isend(f, call, buf.as_ptr(), &lay, i) }.map(|id| reqs.push(id));
                }
            }
            finish(f, call, reqs, posted)?;
            trace.mark("exchange");
            if let Some(buf) = stage {
                if pipelined {
                    let _ = to_reader.send(buf);
                } else {
                    f.give_buffer(buf);
                }
            }
        }
        Ok(())
    })?;
    trace.report(f, route, &s);
    bytes_before_eof(f, &runs)
}

/// Bytes of an access's `runs` before the end of the file, in stream order, up to the
/// first piece the file does not hold entirely (what a collective read delivers).
fn bytes_before_eof(f: &File, runs: &[(u64, usize)]) -> MpiResult<usize> {
    let eof = f.size()?;
    let mut got = 0usize;
    for &(o, l) in runs {
        let have = eof.saturating_sub(o).min(l as u64) as usize;
        got += have;
        if have < l {
            break;
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_cover_the_span_in_rounds() {
        let p = Plan::new(vec![0, 2], 100, 1100, 300, 1);
        assert_eq!(p.domain, 500);
        assert_eq!(p.domain_of(0), (100, 600));
        assert_eq!(p.domain_of(1), (600, 1100));
        assert_eq!(p.rounds(), 2);
        assert_eq!(p.window(0, 0), (100, 400));
        assert_eq!(p.window(0, 1), (400, 600));
        assert_eq!(p.window(1, 1), (900, 1100));
        // A span smaller than the aggregators: later domains are empty.
        let q = Plan::new(vec![0, 1, 2, 3], 0, 2, 10, 1);
        assert_eq!(q.domain_of(3), (2, 2));
    }

    #[test]
    fn large_domains_start_on_aligned_boundaries() {
        // 10 MiB from 100 bytes in over 3 aggregators, 1 MiB alignment, 1.5 MiB rounds.
        let mib = 1u64 << 20;
        let p = Plan::new(
            vec![0, 1, 2],
            100,
            100 + 10 * mib,
            3 * (mib as usize) / 2,
            mib,
        );
        assert_eq!(p.base, 0);
        assert_eq!(p.domain % mib, 0);
        assert_eq!(p.cb, mib, "rounds are aligned too");
        assert_eq!(p.domain_of(0), (100, p.domain));
        assert_eq!(p.domain_of(1).0, p.domain);
        assert_eq!(p.domain_of(2).1, 100 + 10 * mib);
        assert_eq!(p.window(0, 0), (100, mib));
        assert_eq!(p.window(1, 1), (p.domain + mib, p.domain + 2 * mib));
        // Every byte of the span is in exactly one window.
        let mut covered = 0;
        for a in 0..3 {
            for r in 0..p.rounds() {
                let (s, e) = p.window(a, r);
                covered += e - s;
            }
        }
        assert_eq!(covered, 10 * mib);
        // Small domains are not aligned (the small tests keep several aggregators).
        let q = Plan::new(vec![0, 1], 10, 1010, 100, mib);
        assert_eq!((q.base, q.domain), (10, 500));
    }

    #[test]
    fn aggregators_spread_over_nodes() {
        assert_eq!(choose_aggregators(&[0, 0, 1, 1], 2), vec![0, 2]);
        assert_eq!(choose_aggregators(&[0, 0, 1, 1], 3), vec![0, 1, 2]);
        assert_eq!(choose_aggregators(&[0, 0, 0, 0], 1), vec![0]);
        assert_eq!(choose_aggregators(&[5, 3, 5, 3], 2), vec![0, 1]);
    }

    #[test]
    fn the_default_aggregator_count_grows_with_the_data() {
        assert_eq!(default_aggregators(1 << 20, 1, 4, 16), 1);
        assert_eq!(default_aggregators(9 << 20, 1, 4, 16), 3);
        assert_eq!(default_aggregators(1 << 30, 1, 4, 16), 4);
        assert_eq!(default_aggregators(1 << 30, 1, 16, 8), 4, "two cores each");
        assert_eq!(
            default_aggregators(1 << 30, 1, 4, 2),
            1,
            "a two-core host: one"
        );
        assert_eq!(
            default_aggregators(1 << 20, 2, 8, 2),
            2,
            "one per node at least"
        );
        assert_eq!(
            default_aggregators(1 << 30, 3, 2, 2),
            2,
            "never more than the ranks"
        );
    }

    #[test]
    fn layouts_merge_adjacent_pieces() {
        let l = layout([(8, 4), (12, 4), (16, 8)].into_iter()).unwrap();
        assert_eq!((l.first, l.total), (8, 16));
        assert!(l.dtype.is_none());
        let h = layout([(0, 4), (8, 4)].into_iter()).unwrap();
        assert_eq!(h.total, 8);
        assert_eq!(h.dtype.unwrap().size(), 8);
    }

    #[test]
    fn the_route_follows_the_switch_interleaving_and_piece_size() {
        use Route::*;
        let r = |sw, planned, inter, mean| route(sw, planned, inter, mean, 16 << 10);
        assert_eq!(
            r(Switch::Automatic, true, true, 1280),
            TwoPhase,
            "BT-IO pieces"
        );
        assert_eq!(
            r(Switch::Automatic, true, true, 64 << 10),
            LargePieces,
            "slabs"
        );
        assert_eq!(r(Switch::Automatic, true, false, 8), Disjoint);
        assert_eq!(r(Switch::Automatic, false, true, 8), Nothing);
        assert_eq!(r(Switch::Enable, true, false, 1 << 20), TwoPhase);
        assert_eq!(r(Switch::Enable, false, false, 0), Nothing);
        assert_eq!(r(Switch::Disable, true, true, 8), Disabled);
    }

    #[test]
    fn a_round_puts_each_sender_back_to_back_and_the_pieces_in_file_order() {
        // Rank 1 (the aggregator) owns [4, 8) and [12, 16); rank 0 [0, 4) and [8, 12);
        // rank 2 [16, 20).
        let per: Ranges = vec![vec![(0, 4), (8, 4)], vec![(4, 4), (12, 4)], vec![(16, 4)]];
        let own = [(4u64, 4usize, 0usize), (12, 4, 4)];
        let r = round_of(&per, 1, &own);
        assert_eq!(r.slots, vec![0, 0, 8]);
        assert_eq!(r.counts, vec![8, 0, 4]);
        assert_eq!(r.total, 12);
        let mems: Vec<(u64, Mem)> = r.segs.iter().map(|s| (s.off, s.mem)).collect();
        assert_eq!(
            mems,
            vec![
                (0, Mem::Round(0)),
                (4, Mem::User(0)),
                (8, Mem::Round(4)),
                (12, Mem::User(4)),
                (16, Mem::Round(8)),
            ]
        );
        assert_eq!(seg_runs(&r.segs, 0), vec![0..5]);
    }

    #[test]
    fn runs_break_at_holes_wider_than_allowed() {
        let seg = |off, len| Seg {
            off,
            len,
            mem: Mem::Round(0),
        };
        let segs = [seg(0, 4), seg(4, 4), seg(10, 2), seg(100, 1)];
        assert_eq!(seg_runs(&segs, 0), vec![0..2, 2..3, 3..4]);
        assert_eq!(seg_runs(&segs, 2), vec![0..3, 3..4]);
        assert_eq!(seg_runs(&segs, 1000), vec![0..4]);
    }

    #[test]
    fn rounds_write_around_holes_and_read_back() {
        let path = std::env::temp_dir().join(format!("tsunagi-io-round-{}", std::process::id()));
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        pwrite_full(&file, &[7u8; 64], 0).unwrap();
        let round: Vec<u8> = (0u8..16).collect();
        let user: Vec<u8> = (100u8..116).collect();
        let seg = |off, len, mem| Seg { off, len, mem };
        // Few holes: pwritev per run; the holes keep the file's 7s.
        let few = [
            seg(0, 4, Mem::Round(0)),
            seg(4, 4, Mem::User(0)),
            seg(10, 4, Mem::Round(4)),
        ];
        write_round(&file, &few, &round, &user).unwrap();
        let mut back = vec![0u8; 16];
        pread_full(&file, &mut back, 0).unwrap();
        assert_eq!(
            back,
            [0, 1, 2, 3, 100, 101, 102, 103, 7, 7, 4, 5, 6, 7, 7, 7]
        );
        // Many holes: read-modify-write of the extent, same result for the holes.
        let many: Vec<Seg> = (0..12)
            .map(|k| seg(20 + 3 * k as u64, 1, Mem::Round(k)))
            .collect();
        write_round(&file, &many, &round, &user).unwrap();
        let mut back = vec![0u8; 36];
        pread_full(&file, &mut back, 20).unwrap();
        for (k, b) in back.iter().enumerate() {
            let want = if k % 3 == 0 { (k / 3) as u8 } else { 7 };
            assert_eq!(*b, want, "byte {k}");
        }
        // Reading scatters into the round buffer and the program's buffer, skipping holes;
        // past the end of the file reads zeros.
        let mut rbuf = vec![0u8; 8];
        let mut out = vec![0u8; 6];
        let segs = [
            seg(0, 2, Mem::Round(0)),
            seg(4, 4, Mem::User(2)),
            seg(10, 2, Mem::Round(2)),
            seg(62, 4, Mem::Round(4)),
        ];
        // SAFETY: `out` is ours and not otherwise used during the call.
        unsafe { read_round(&file, &segs, &mut rbuf, out.as_mut_ptr(), out.len()).unwrap() };
        assert_eq!(rbuf, [0, 1, 4, 5, 7, 7, 0, 0]);
        assert_eq!(out, [0, 0, 100, 101, 102, 103]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn clip_keeps_the_inside() {
        assert_eq!(clip(10, 10, 0, 15), Some((10, 5)));
        assert_eq!(clip(10, 10, 15, 30), Some((15, 5)));
        assert_eq!(clip(10, 10, 20, 30), None);
    }
}
