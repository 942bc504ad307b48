//! Collective buffering (two-phase I/O, as ROMIO does it). The ranks' accessed ranges are
//! all-gathered; when they interleave (or `romio_cb_*` says enable), the span they cover
//! is cut into one contiguous file domain per aggregator (`cb_nodes`, default one rank
//! per node), each handled in rounds of at most `cb_buffer_size` bytes. Each rank tells
//! each aggregator once which file ranges of its domain it accesses; then per round one
//! all-to-all-v moves the data between the ranks and the aggregators, which do one large
//! contiguous write (read-modify-write when the pieces leave holes) or read per round.
//! Otherwise every rank accesses the file independently (with sieving).

use tsunagi_collectives::SendBuf;
use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::MpiResult;

use crate::access;
use crate::hints::{Hints, Switch};
use crate::posix::{os_err, pread_full, pwrite_full, RangeLock};
use crate::view::View;
use crate::File;

/// The file domains of one collective access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Aggregators, as ranks of the file's communicator.
    pub aggs: Vec<usize>,
    pub lo: u64,
    pub hi: u64,
    /// Bytes per domain (the last may be shorter).
    pub domain: u64,
    /// Bytes per round.
    pub cb: u64,
}

impl Plan {
    /// Domains for the span `[lo, hi)`, `aggs` aggregators, rounds of `cb` bytes.
    pub fn new(aggs: Vec<usize>, lo: u64, hi: u64, cb: usize) -> Plan {
        let n = aggs.len().max(1) as u64;
        let domain = (hi - lo).div_ceil(n).max(1);
        Plan {
            aggs,
            lo,
            hi,
            domain,
            cb: cb.max(1) as u64,
        }
    }

    /// `[start, end)` of aggregator `a`'s domain (empty past the span).
    pub fn domain_of(&self, a: usize) -> (u64, u64) {
        let s = (self.lo + a as u64 * self.domain).min(self.hi);
        (s, (s + self.domain).min(self.hi))
    }

    pub fn rounds(&self) -> u64 {
        self.domain.div_ceil(self.cb)
    }

    /// `[start, end)` aggregator `a` handles in round `r`.
    pub fn window(&self, a: usize, r: u64) -> (u64, u64) {
        let (s, e) = self.domain_of(a);
        let ws = (s + r * self.cb).min(e);
        (ws, (ws + self.cb).min(e))
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

fn setup(f: &File, hints: &Hints, runs: &[(u64, usize)]) -> MpiResult<Setup> {
    let rt = f.runtime();
    let comm = f.comm();
    let (lo, hi) = if runs.is_empty() {
        (u64::MAX, 0)
    } else {
        let lo = runs.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = runs.iter().map(|r| r.0 + r.1 as u64).max().unwrap_or(0);
        (lo, hi)
    };
    let mut mine = lo.to_le_bytes().to_vec();
    mine.extend(hi.to_le_bytes());
    let all = rt.allgather_bytes("MPI_File_write_all", comm, &mine)?;
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
    let aggs = choose_aggregators(&nodes, hints.cb_nodes);
    Ok(Setup {
        plan: Some(Plan::new(aggs, glo, ghi, hints.cb_buffer_size)),
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
        let mut a = (o.saturating_sub(plan.lo) / plan.domain) as usize;
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

/// Collective write of `data` at stream position `pos`.
pub(crate) fn write_all(
    f: &File,
    view: &View,
    hints: &Hints,
    pos: u64,
    data: &[u8],
) -> MpiResult<()> {
    let runs = view.runs(pos, data.len());
    let s = setup(f, hints, &runs)?;
    if !use_cb(hints.cb_write, &s) {
        return access::write_runs(f, hints, false, &runs, data);
    }
    let plan = s.plan.expect("use_cb");
    let (mine, theirs) = exchange_ranges(f, &plan, &runs)?;
    let (rank, size) = f.rank_and_size();
    let me = plan.aggs.iter().position(|&a| a == rank);
    let file = f.os_file();
    for r in 0..plan.rounds() {
        // My data for each aggregator's window of this round.
        let mut send = Vec::new();
        let mut scounts = vec![0i64; size];
        let mut sdispls = vec![0i64; size];
        for (a, &agg) in plan.aggs.iter().enumerate() {
            let (ws, we) = plan.window(a, r);
            sdispls[agg] = send.len() as i64;
            for &(o, l, d) in &mine[a] {
                if let Some((co, cl)) = clip(o, l, ws, we) {
                    let s = d + (co - o) as usize;
                    send.extend_from_slice(&data[s..s + cl]);
                }
            }
            scounts[agg] = send.len() as i64 - sdispls[agg];
        }
        // What each rank sends me, known from its ranges.
        let mut rcounts = vec![0i64; size];
        let mut pieces: Vec<(u64, usize, usize)> = Vec::new(); // (offset, len, recv position)
        let window = me.map(|a| plan.window(a, r));
        if let Some((ws, we)) = window {
            let mut at = 0usize;
            for (i, t) in theirs.iter().enumerate() {
                for &(o, l) in t {
                    if let Some((co, cl)) = clip(o, l, ws, we) {
                        pieces.push((co, cl, at));
                        at += cl;
                        rcounts[i] += cl as i64;
                    }
                }
            }
        }
        let (recv, _) = alltoallv(f, &send, &scounts, &sdispls, &rcounts)?;
        if pieces.is_empty() {
            continue;
        }
        let lo = pieces.iter().map(|p| p.0).min().expect("non-empty");
        let hi = pieces
            .iter()
            .map(|p| p.0 + p.1 as u64)
            .max()
            .expect("non-empty");
        let mut sorted: Vec<(u64, u64)> = pieces.iter().map(|p| (p.0, p.0 + p.1 as u64)).collect();
        sorted.sort_unstable();
        let mut covered = lo;
        for &(s, e) in &sorted {
            if s > covered {
                break;
            }
            covered = covered.max(e);
        }
        let call = "MPI_File_write_all";
        let mut stage = vec![0u8; (hi - lo) as usize];
        // Holes keep the file's bytes: read-modify-write under a lock.
        let _lock = if covered < hi {
            let l = RangeLock::new(file, lo, hi - lo, true).map_err(|e| os_err(call, e))?;
            pread_full(file, &mut stage, lo).map_err(|e| os_err(call, e))?;
            Some(l)
        } else {
            None
        };
        for &(o, l, at) in &pieces {
            let s = (o - lo) as usize;
            stage[s..s + l].copy_from_slice(&recv[at..at + l]);
        }
        pwrite_full(file, &stage, lo).map_err(|e| os_err(call, e))?;
    }
    Ok(())
}

/// Collective read into `out` from stream position `pos`: the bytes read.
pub(crate) fn read_all(
    f: &File,
    view: &View,
    hints: &Hints,
    pos: u64,
    out: &mut [u8],
) -> MpiResult<usize> {
    let runs = view.runs(pos, out.len());
    let s = setup(f, hints, &runs)?;
    if !use_cb(hints.cb_read, &s) {
        return access::read_runs(f, hints, false, &runs, out);
    }
    let plan = s.plan.expect("use_cb");
    let (mine, theirs) = exchange_ranges(f, &plan, &runs)?;
    let (rank, size) = f.rank_and_size();
    let me = plan.aggs.iter().position(|&a| a == rank);
    let file = f.os_file();
    let call = "MPI_File_read_all";
    for r in 0..plan.rounds() {
        let mut send = Vec::new();
        let mut scounts = vec![0i64; size];
        let mut sdispls = vec![0i64; size];
        if let Some(a) = me {
            let (ws, we) = plan.window(a, r);
            let mut want: Vec<(usize, u64, usize)> = Vec::new();
            for (i, t) in theirs.iter().enumerate() {
                for &(o, l) in t {
                    if let Some((co, cl)) = clip(o, l, ws, we) {
                        want.push((i, co, cl));
                    }
                }
            }
            if !want.is_empty() {
                let lo = want.iter().map(|w| w.1).min().expect("non-empty");
                let hi = want
                    .iter()
                    .map(|w| w.1 + w.2 as u64)
                    .max()
                    .expect("non-empty");
                let mut stage = vec![0u8; (hi - lo) as usize];
                pread_full(file, &mut stage, lo).map_err(|e| os_err(call, e))?;
                // `want` is in rank order, each rank's pieces in its stream order.
                for i in 0..size {
                    sdispls[i] = send.len() as i64;
                    for &(_, o, l) in want.iter().filter(|w| w.0 == i) {
                        let s = (o - lo) as usize;
                        send.extend_from_slice(&stage[s..s + l]);
                    }
                    scounts[i] = send.len() as i64 - sdispls[i];
                }
            }
        }
        let mut rcounts = vec![0i64; size];
        for (a, &agg) in plan.aggs.iter().enumerate() {
            let (ws, we) = plan.window(a, r);
            for &(o, l, _) in &mine[a] {
                if let Some((_, cl)) = clip(o, l, ws, we) {
                    rcounts[agg] += cl as i64;
                }
            }
        }
        let (recv, rdispls) = alltoallv(f, &send, &scounts, &sdispls, &rcounts)?;
        for (a, &agg) in plan.aggs.iter().enumerate() {
            let (ws, we) = plan.window(a, r);
            let mut at = rdispls[agg] as usize;
            for &(o, l, d) in &mine[a] {
                if let Some((co, cl)) = clip(o, l, ws, we) {
                    let s = d + (co - o) as usize;
                    out[s..s + cl].copy_from_slice(&recv[at..at + cl]);
                    at += cl;
                }
            }
        }
    }
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
        let p = Plan::new(vec![0, 2], 100, 1100, 300);
        assert_eq!(p.domain, 500);
        assert_eq!(p.domain_of(0), (100, 600));
        assert_eq!(p.domain_of(1), (600, 1100));
        assert_eq!(p.rounds(), 2);
        assert_eq!(p.window(0, 0), (100, 400));
        assert_eq!(p.window(0, 1), (400, 600));
        assert_eq!(p.window(1, 1), (900, 1100));
        // A span smaller than the aggregators: later domains are empty.
        let q = Plan::new(vec![0, 1, 2, 3], 0, 2, 10);
        assert_eq!(q.domain_of(3), (2, 2));
    }

    #[test]
    fn aggregators_spread_over_nodes() {
        assert_eq!(choose_aggregators(&[0, 0, 1, 1], 2), vec![0, 2]);
        assert_eq!(choose_aggregators(&[0, 0, 1, 1], 3), vec![0, 1, 2]);
        assert_eq!(choose_aggregators(&[0, 0, 0, 0], 1), vec![0]);
        assert_eq!(choose_aggregators(&[5, 3, 5, 3], 2), vec![0, 1]);
    }

    #[test]
    fn clip_keeps_the_inside() {
        assert_eq!(clip(10, 10, 0, 15), Some((10, 5)));
        assert_eq!(clip(10, 10, 15, 30), Some((15, 5)));
        assert_eq!(clip(10, 10, 20, 30), None);
    }
}
