//! Collective buffering (two-phase I/O, as ROMIO does it). The ranks' accessed ranges are
//! all-gathered; when they interleave (or `romio_cb_*` says enable), the span they cover
//! is cut into one contiguous file domain per aggregator, each handled in rounds of at
//! most `cb_buffer_size` bytes. Each rank tells each aggregator once which file ranges of
//! its domain it accesses; then per round every rank sends each aggregator its pieces of
//! that round's window (one message, straight from its data) and the aggregator receives
//! them straight into its buffer at their file positions (one derived datatype per
//! sender), then does one large contiguous write (read-modify-write when the pieces leave
//! holes) or read per round.
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
//! Otherwise every rank accesses the file independently (with sieving).

use std::sync::mpsc;
use std::sync::Arc;

use tsunagi_collectives::SendBuf;
use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::{MpiResult, ReqId, SendMode};

use crate::access;
use crate::hints::{Hints, Switch};
use crate::posix::{os_err, pread_full, pwrite_full, RangeLock};
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

/// What every rank learns before a collective access: each rank's span.
struct Setup {
    plan: Option<Plan>,
    /// Whether the accesses interleave.
    interleaved: bool,
}

fn setup(f: &File, call: &str, hints: &Hints, runs: &[(u64, usize)]) -> MpiResult<Setup> {
    let rt = f.runtime();
    let comm = f.comm();
    let (lo, hi) = if runs.is_empty() {
        (u64::MAX, 0)
    } else {
        let lo = runs.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = runs.iter().map(|r| r.0 + r.1 as u64).max().unwrap_or(0);
        (lo, hi)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut mine = lo.to_le_bytes().to_vec();
    mine.extend(hi.to_le_bytes());
    mine.extend(cores.to_le_bytes());
    let all = rt.allgather_bytes(call, comm, &mine)?;
    // Every rank decides alike: on the fewest cores any rank sees.
    let cores = all
        .iter()
        .map(|b| u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")))
        .min()
        .unwrap_or(1) as usize;
    let mut spans: Vec<(u64, u64)> = all
        .iter()
        .map(|b| {
            (
                u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            )
        })
        .filter(|(l, h)| l < h)
        .collect();
    if spans.is_empty() {
        return Ok(Setup {
            plan: None,
            interleaved: false,
        });
    }
    spans.sort_unstable();
    let interleaved = spans.windows(2).any(|w| w[1].0 < w[0].1);
    let glo = spans.iter().map(|s| s.0).min().expect("non-empty");
    let ghi = spans.iter().map(|s| s.1).max().expect("non-empty");
    let nodes = rt.comm_nodes(comm)?;
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
    })
}

fn use_cb(sw: Switch, s: &Setup) -> bool {
    match sw {
        Switch::Enable => s.plan.is_some(),
        Switch::Disable => false,
        Switch::Automatic => s.plan.is_some() && s.interleaved,
    }
}

/// My pieces per aggregator: `(file offset, len, position in my data)`.
type Pieces = Vec<Vec<(u64, usize, usize)>>;
/// At an aggregator, every rank's file ranges in its domain (empty elsewhere).
type Ranges = Vec<Vec<(u64, usize)>>;

/// Split my runs over the aggregators' domains, and send each aggregator the ranges in
/// its domain; returns mine and, at an aggregator, every rank's ranges in its domain.
fn exchange_ranges(f: &File, plan: &Plan, runs: &[(u64, usize)]) -> MpiResult<(Pieces, Ranges)> {
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
    call: String,
    last: std::time::Instant,
    phases: Vec<(&'static str, f64)>,
}

impl Trace {
    fn new(call: &str) -> Trace {
        Trace {
            on: std::env::var_os("TSUNAGI_IO_TRACE").is_some(),
            call: call.to_string(),
            last: std::time::Instant::now(),
            phases: Vec::new(),
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

    fn report(&self, f: &File, plan: &Plan) {
        if !self.on {
            return;
        }
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(p, ms)| format!("{p} {ms:.2} ms"))
            .collect();
        eprintln!(
            "tsunagi-io: rank {} {}: {} aggregators, {} rounds: {}",
            f.rank_and_size().0,
            self.call,
            plan.aggs.len(),
            plan.rounds(),
            phases.join(", ")
        );
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

/// `[lo, hi)` of `pieces` (None when empty).
fn extent_of(pieces: impl Iterator<Item = (u64, usize)>) -> Option<(u64, u64)> {
    pieces.fold(None, |acc, (o, l)| {
        let e = o + l as u64;
        Some(match acc {
            None => (o, e),
            Some((lo, hi)) => (lo.min(o), hi.max(e)),
        })
    })
}

/// Whether `pieces` leave a hole in `[lo, hi)`.
fn has_holes(pieces: &[Vec<(u64, usize)>], lo: u64, hi: u64) -> bool {
    let mut sorted: Vec<(u64, u64)> = pieces
        .iter()
        .flatten()
        .map(|&(o, l)| (o, o + l as u64))
        .collect();
    sorted.sort_unstable();
    let mut covered = lo;
    for &(s, e) in &sorted {
        if s > covered {
            break;
        }
        covered = covered.max(e);
    }
    covered < hi
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

/// A full buffer for the writer thread.
struct WriteJob {
    buf: Vec<u8>,
    off: u64,
    len: usize,
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
    let mut trace = Trace::new(call);
    let runs = view.runs(pos, data.len());
    let s = setup(f, call, hints, &runs)?;
    trace.mark("setup");
    if !use_cb(hints.cb_write, &s) {
        return access::write_runs(f, hints, false, &runs, data);
    }
    let plan = s.plan.expect("use_cb");
    let (mine, theirs) = exchange_ranges(f, &plan, &runs)?;
    trace.mark("ranges");
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
                    let r = pwrite_full(file, &job.buf[..job.len], job.off);
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
                // The aggregator's window: every sender's pieces land in place in `stage`.
                let mut stage: Option<(Vec<u8>, u64, usize, Option<RangeLock<'_>>)> = None;
                if let Some(a) = me {
                    let (ws, we) = plan.window(a, r);
                    let per = clip_ranges(&theirs, ws, we);
                    if let Some((lo, hi)) = extent_of(per.iter().flatten().copied()) {
                        let len = (hi - lo) as usize;
                        let mut buf = match free.pop() {
                            Some(b) => b,
                            None if allocated < 2 => {
                                allocated += 1;
                                f.take_buffer(bufsize.max(len))
                            }
                            None => {
                                let (b, res) = from_writer.recv().expect("the writer answers");
                                in_flight -= 1;
                                res.map_err(|e| os_err(call, e))?;
                                b
                            }
                        };
                        if buf.len() < len {
                            buf.resize(len, 0);
                        }
                        // Holes keep the file's bytes: read-modify-write under a lock.
                        let lock = if has_holes(&per, lo, hi) {
                            let l = RangeLock::new(file, lo, hi - lo, true)
                                .map_err(|e| os_err(call, e))?;
                            pread_full(file, &mut buf[..len], lo).map_err(|e| os_err(call, e))?;
                            Some(l)
                        } else {
                            None
                        };
                        for (i, p) in per.iter().enumerate() {
                            if p.is_empty() || i == rank || posted.is_err() {
                                continue;
                            }
                            posted = layout(p.iter().map(|&(o, l)| ((o - lo) as usize, l)))
                                .and_then(|lay| {
                                    // SAFETY: the layout lies within buf[..len]; `buf` is
                                    // neither touched nor moved out of `stage` (its heap
                                    // block stays put) before `finish` waited.
                                    unsafe { irecv(f, call, buf.as_mut_ptr(), &lay, i) }
                                })
                                .map(|id| reqs.push(id));
                        }
                        stage = Some((buf, lo, len, lock));
                    }
                }
                // My pieces of every aggregator's window, straight from `data`.
                for (a, &agg) in plan.aggs.iter().enumerate() {
                    let (ws, we) = plan.window(a, r);
                    let p = clip_mine(&mine[a], ws, we);
                    if p.is_empty() || posted.is_err() {
                        continue;
                    }
                    if agg == rank {
                        let (buf, lo, _, _) = stage.as_mut().expect("my window holds my pieces");
                        for (co, cl, d) in p {
                            let s = (co - *lo) as usize;
                            buf[s..s + cl].copy_from_slice(&data[d..d + cl]);
                        }
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
                if let Some((buf, lo, len, lock)) = stage {
                    if pipelined && lock.is_none() {
                        to_writer
                            .send(WriteJob { buf, off: lo, len })
                            .expect("the writer runs");
                        in_flight += 1;
                    } else {
                        let w = pwrite_full(file, &buf[..len], lo);
                        drop(lock);
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
        trace.report(f, &plan);
        result.and(written)
    })
}

/// Collective read into `out` from stream position `pos`: the bytes read.
pub(crate) fn read_all(
    f: &File,
    call: &str,
    view: &View,
    hints: &Hints,
    pos: u64,
    out: &mut [u8],
) -> MpiResult<usize> {
    let mut trace = Trace::new(call);
    let runs = view.runs(pos, out.len());
    let s = setup(f, call, hints, &runs)?;
    trace.mark("setup");
    if !use_cb(hints.cb_read, &s) {
        return access::read_runs(f, hints, false, &runs, out);
    }
    let plan = s.plan.expect("use_cb");
    let (mine, theirs) = exchange_ranges(f, &plan, &runs)?;
    trace.mark("ranges");
    let (rank, size) = f.rank_and_size();
    let me = plan.aggs.iter().position(|&a| a == rank);
    let file = f.os_file();
    let bufsize = plan.cb.min(plan.domain) as usize;
    // What I read per round, as an aggregator: the span of the pieces asked for.
    let regions: Vec<Option<(u64, u64)>> = (0..plan.rounds())
        .map(|r| {
            me.and_then(|a| {
                let (ws, we) = plan.window(a, r);
                extent_of(
                    theirs
                        .iter()
                        .flatten()
                        .filter_map(|&(o, l)| clip(o, l, ws, we)),
                )
            })
        })
        .collect();
    let pipelined = me.is_some() && plan.rounds() > 1;
    let read_region = |buf: &mut Vec<u8>, lo: u64, hi: u64| -> std::io::Result<()> {
        let len = (hi - lo) as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let got = pread_full(file, &mut buf[..len], lo)?;
        buf[got..len].fill(0);
        Ok(())
    };
    let out_base = out.as_mut_ptr();
    let out_len = out.len();
    std::thread::scope(|scope| -> MpiResult<()> {
        let (to_main, from_reader) = mpsc::channel::<(Vec<u8>, std::io::Result<()>)>();
        let (to_reader, returned) = mpsc::channel::<Vec<u8>>();
        if pipelined {
            let regions = &regions;
            let read_region = &read_region;
            scope.spawn(move || {
                // Reads one round ahead of the exchange: two buffers.
                let mut allocated = 0;
                for &(lo, hi) in regions.iter().flatten() {
                    let mut buf = if allocated < 2 {
                        allocated += 1;
                        f.take_buffer(bufsize.max((hi - lo) as usize))
                    } else {
                        match returned.recv() {
                            Ok(b) => b,
                            Err(_) => return,
                        }
                    };
                    let r = read_region(&mut buf, lo, hi);
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
            let mut stage: Option<(Vec<u8>, u64)> = None;
            if let Some((lo, hi)) = regions[r as usize] {
                let buf = if pipelined {
                    let (b, res) = from_reader.recv().expect("the reader answers");
                    res.map_err(|e| os_err(call, e))?;
                    b
                } else {
                    let mut b = f.take_buffer(bufsize.max((hi - lo) as usize));
                    read_region(&mut b, lo, hi).map_err(|e| os_err(call, e))?;
                    b
                };
                stage = Some((buf, lo));
                trace.mark("read");
            }
            let mut reqs = Vec::new();
            let mut posted = Ok(());
            // My pieces from every aggregator, straight into `out`.
            for (a, &agg) in plan.aggs.iter().enumerate() {
                let (ws, we) = plan.window(a, r);
                let p = clip_mine(&mine[a], ws, we);
                if p.is_empty() || posted.is_err() {
                    continue;
                }
                if agg == rank {
                    let (buf, lo) = stage.as_ref().expect("my window holds my pieces");
                    for (co, cl, d) in p {
                        let s = (co - lo) as usize;
                        debug_assert!(d + cl <= out_len);
                        // SAFETY: d + cl <= out.len() (the pieces cover the stream of
                        // `out`); no request touches these bytes (they are mine, local).
                        unsafe {
                            std::ptr::copy_nonoverlapping(buf[s..].as_ptr(), out_base.add(d), cl)
                        };
                    }
                    continue;
                }
                posted = layout(p.iter().map(|&(_, l, d)| (d, l)))
                    .and_then(|lay| {
                        // SAFETY: the layout lies within `out`, borrowed mutably for the call
                        // and waited for by `finish` below.
                        unsafe { irecv(f, call, out_base, &lay, agg) }
                    })
                    .map(|id| reqs.push(id));
            }
            // As an aggregator, every rank's pieces straight from `stage`.
            if let (Some(a), Some((buf, lo))) = (me, stage.as_ref()) {
                let (ws, we) = plan.window(a, r);
                let per = clip_ranges(&theirs, ws, we);
                for (i, p) in per.iter().enumerate().take(size) {
                    if p.is_empty() || i == rank || posted.is_err() {
                        continue;
                    }
                    posted = layout(p.iter().map(|&(o, l)| ((o - lo) as usize, l)))
                        .and_then(|lay| {
                            // SAFETY: the layout lies within the region read into `buf`,
                            // which is not touched or dropped before `finish` waited.
                            unsafe { isend(f, call, buf.as_ptr(), &lay, i) }
                        })
                        .map(|id| reqs.push(id));
                }
            }
            finish(f, call, reqs, posted)?;
            trace.mark("exchange");
            if let Some((buf, _)) = stage {
                if pipelined {
                    let _ = to_reader.send(buf);
                } else {
                    f.give_buffer(buf);
                }
            }
        }
        Ok(())
    })?;
    trace.report(f, &plan);
    // Bytes before the end of the file, in stream order, up to the first piece the file
    // does not hold entirely.
    let eof = f.size()?;
    let mut got = 0usize;
    for &(o, l) in &runs {
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
    fn holes_are_found() {
        let p = vec![vec![(0u64, 4usize)], vec![(4, 4)]];
        assert!(!has_holes(&p, 0, 8));
        let q = vec![vec![(0u64, 4usize)], vec![(6, 2)]];
        assert!(has_holes(&q, 0, 8));
    }

    #[test]
    fn clip_keeps_the_inside() {
        assert_eq!(clip(10, 10, 0, 15), Some((10, 5)));
        assert_eq!(clip(10, 10, 15, 30), Some((15, 5)));
        assert_eq!(clip(10, 10, 20, 30), None);
    }
}
