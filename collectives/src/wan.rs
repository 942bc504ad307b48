//! Latency-aware collectives across sites (MagPIe, Kielmann et al., PPoPP 1999): when a
//! communicator spans sites joined by a wide-area link and every site runs Tsunagi, each
//! operation crosses the wide-area link once, with all site pairs in parallel, and does the
//! rest inside the sites.
//!
//! - barrier: site barrier; every site's coordinator (its lowest rank) exchanges a zero-byte
//!   message with every other coordinator at once; site barrier (release).
//! - bcast: the root sends to every other site's coordinator at once, then each site
//!   broadcasts inside. Where the cost model ([`Model`]) says that several streams per site
//!   pair get more across than one, the root sends chunk c of `m` straight to rank c of
//!   every other site (each process pair has its own TCP connection), then each site
//!   allgathers its chunks.
//! - reduce (commutative ops): reduce inside each site, the coordinators send their
//!   partial results straight to the root, which combines them in site order.
//! - allreduce (commutative ops), a [`Plan`] chosen by the cost model: inside each site a
//!   reduce to the coordinator (1 pair) or a reduce-scatter into `m` chunks (m = the
//!   smallest site size; site rank c holds chunk c); across, site rank c of every site
//!   either exchanges its chunk with every other site and combines the sites' parts in site
//!   order (one wide-area round, so every site gets the same bits), or, for large
//!   messages over three sites or more, reduce-scatters it among the sites (site s
//!   combines part s) and allgathers the parts (two rounds, but `2n/ns` bytes per site
//!   pair instead of `n`); then a bcast (1 pair) or an allgather of the chunks inside.
//! - allgather: gather inside each site to the coordinator, coordinators exchange their
//!   sites' blocks all at once, bcast inside.
//! - gather, scatter, alltoall (and their v forms): the linear algorithms the IMPI path
//!   already uses: every pair directly, all posted at once, which is one wide-area round.
//!
//! **The cost model** ([`Model`]): latency and bandwidth per link class, given by the user
//! (`TSUNAGI_WAN_MODEL`) or measured on a communicator's first call whose choice depends on
//! it (calls of 8 KiB or more; see `comm_model`), about three wide-area round trips once.
//!
//! **Direct algorithms** for small calls (at most 4 KiB per message) on small
//! communicators (at most 16 ranks, `TSUNAGI_WAN_DIRECT`): barrier, bcast, reduce,
//! allreduce and allgather send from every rank to every rank that needs the data at once
//! and combine in rank order. One wide-area crossing as above, and no dependent steps
//! inside the sites before or after it; any op, commutative or not. Scan and exscan within
//! those bounds too (every rank's input to every higher rank, the prefix combined in rank
//! order); larger scans keep the IMPI chain. The non-blocking forms of barrier, bcast,
//! allreduce, scan and exscan have latency-aware schedules in `wan_nbc.rs`.
//!
//! Non-commutative reductions keep the IMPI algorithms (rank order) above those sizes. Inside a site the
//! phases run the site's own algorithms over packed bytes.
//!
//! **When.** The IMPI-conformant algorithms of [`crate::impi`] must stay on the wire when
//! a foreign IMPI client (LAM/MPI) is in the job: it runs them too. Tsunagi cannot see from
//! the IMPI start-up which clients are Tsunagi, so the launcher says so: `mpirun --sites`
//! starts every site itself, all Tsunagi, and sets `TSUNAGI_IMPI_PEERS=tsunagi` in every
//! site; sites started by hand (`mpirun --client K --server ...`) get the IMPI algorithms
//! unless every site sets it. `TSUNAGI_WAN_COLL` overrides: `auto` (the default, as
//! above), `wan` (these algorithms), `impi` (the IMPI ones), `flat` (neither: the
//! communicator is treated as one site and the ordinary algorithms run across the
//! wide-area link, choosing as for ranks on separate nodes; for comparisons). Every site
//! of a job must choose the same. Benchmarks switch at run time ([`set_mode`],
//! [`force_algorithm`]).
//!
//! Data crosses sites as packed native bytes, as the ordinary algorithms send them: all
//! sites must share one data representation (the IMPI algorithms send typed data and
//! convert; choose `impi` for sites of different byte order).

use std::sync::OnceLock;

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::MpiResult;

use crate::op::Op;
use crate::util::{err, tag, Ctx, Hier, Packed, SendBuf, Team};
use tsunagi_core::ErrorClass;

/// The cost model that chooses between the coordinator algorithms and the split ones:
/// latency and bandwidth per link class (inside a site, across sites), and the bandwidth one
/// process pair gets across (a TCP stream is limited by its window over a long round trip;
/// several pairs in parallel get up to the link's bandwidth). Given by the user in
/// `TSUNAGI_WAN_MODEL` (`wan_latency=5ms,wan_bandwidth=1GB,wan_stream=50MB,lan_latency=20us,
/// lan_bandwidth=2GB`; rates in bytes/s with k/M/G and an optional `B`, durations with `us`,
/// `ms` or `s`), every site the same, else measured per communicator (`comm_model`). The
/// defaults of unset keys (5 ms, 100 MB/s for the link and for a stream, 20 µs and 2 GB/s
/// inside) make splitting over process pairs pay only where one stream cannot fill the
/// link, which the user knows and says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    pub wan_latency: f64,
    pub wan_bandwidth: f64,
    pub wan_stream: f64,
    pub lan_latency: f64,
    pub lan_bandwidth: f64,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            wan_latency: 5e-3,
            wan_bandwidth: 100e6,
            wan_stream: 100e6,
            lan_latency: 20e-6,
            lan_bandwidth: 2e9,
        }
    }
}

fn parse_seconds(v: &str) -> Option<f64> {
    let v = v.trim();
    let (n, k) = if let Some(x) = v.strip_suffix("us") {
        (x, 1e-6)
    } else if let Some(x) = v.strip_suffix("ms") {
        (x, 1e-3)
    } else if let Some(x) = v.strip_suffix('s') {
        (x, 1.0)
    } else {
        (v, 1.0)
    };
    n.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| *x >= 0.0)
        .map(|x| x * k)
}

fn parse_rate(v: &str) -> Option<f64> {
    let v = v.trim();
    let v = v.strip_suffix('B').unwrap_or(v);
    let (n, k) = match v.chars().last() {
        Some('k') | Some('K') => (&v[..v.len() - 1], 1e3),
        Some('M') => (&v[..v.len() - 1], 1e6),
        Some('G') => (&v[..v.len() - 1], 1e9),
        _ => (v, 1.0),
    };
    n.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| *x > 0.0)
        .map(|x| x * k)
}

impl Model {
    /// Parse a model spec (keys as in the type's doc; unknown keys and bad values are
    /// errors naming them).
    pub fn parse(spec: &str) -> Result<Model, String> {
        let mut m = Model::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected KEY=VALUE"))?;
            let bad = || format!("{item:?}: bad value");
            match k.trim() {
                "wan_latency" => m.wan_latency = parse_seconds(v).ok_or_else(bad)?,
                "lan_latency" => m.lan_latency = parse_seconds(v).ok_or_else(bad)?,
                "wan_bandwidth" => m.wan_bandwidth = parse_rate(v).ok_or_else(bad)?,
                "wan_stream" => m.wan_stream = parse_rate(v).ok_or_else(bad)?,
                "lan_bandwidth" => m.lan_bandwidth = parse_rate(v).ok_or_else(bad)?,
                other => return Err(format!("{other:?}: unknown key")),
            }
        }
        Ok(m)
    }

    /// Throughput of one process pair's stream across when every site sends to every other
    /// over `streams` streams per site pair at once: a stream gets at most `wan_stream`, and
    /// a site's `wan_bandwidth` is shared by all its streams.
    fn stream_rate(&self, streams: usize, sites: usize) -> f64 {
        let total = (streams.max(1) * (sites.max(2) - 1)) as f64;
        self.wan_stream.min(self.wan_bandwidth / total)
    }

    fn lan(&self, bytes: f64) -> f64 {
        self.lan_latency + bytes / self.lan_bandwidth
    }

    /// Bcast of `n` bytes to `sites` sites whose smallest non-root site has `m` ranks (sites
    /// of at most `b` ranks): whether the root sending chunk c of `m` straight to rank c of
    /// every other site (`m` streams per site pair) and an allgather inside the sites beats
    /// sending everything to each coordinator and a bcast inside.
    pub fn split_bcast(&self, n: usize, m: usize, b: usize, sites: usize) -> bool {
        if m < 2 {
            return false;
        }
        let n = n as f64;
        let steps = (b.max(2) as f64).log2().ceil();
        let one = self.wan_latency + n / self.stream_rate(1, sites) + steps * self.lan(n);
        let chunk = n / m as f64;
        // The allgather: every chunk to the site's other ranks, all at once.
        let split = self.wan_latency
            + chunk / self.stream_rate(m, sites)
            + self.lan_latency * m as f64
            + n / self.lan_bandwidth;
        split < one
    }

    /// The cheapest allreduce plan for `n` bytes (`count` elements) over `sites` sites whose
    /// smallest has `m` ranks (at most `b`): by the coordinators or by `m` process pairs
    /// per site pair (each carrying a chunk), in one wide-area round (exchange) or two
    /// (reduce-scatter + allgather among the sites: 2/sites of the bytes).
    pub fn allreduce_plan(&self, n: usize, count: usize, m: usize, b: usize, sites: usize) -> Plan {
        let nf = n as f64;
        let steps = (b.max(2) as f64).log2().ceil();
        let sf = sites as f64;
        let mut best = (f64::MAX, Plan::COORD);
        for pairs in [1, m] {
            if pairs == 0 || (pairs > 1 && count < pairs) {
                continue;
            }
            let local = if pairs == 1 {
                2.0 * steps * self.lan(nf)
            } else {
                // Reduce-scatter and allgather of `pairs` chunks inside the site.
                2.0 * (pairs as f64 * steps * self.lan_latency + steps * nf / self.lan_bandwidth)
            };
            let chunk = nf / pairs as f64;
            let rate = self.stream_rate(pairs, sites);
            for rounds in [1usize, 2] {
                if rounds == 2 && (sites < 3 || count < pairs * sites) {
                    continue; // two sites: the same bytes in twice the rounds
                }
                let wan = if rounds == 1 {
                    self.wan_latency + chunk / rate
                } else {
                    2.0 * self.wan_latency + 2.0 * (chunk / sf) / rate
                };
                let t = local + wan;
                if t < best.0 {
                    best = (t, Plan { pairs, rounds });
                }
            }
        }
        best.1
    }
}

/// How an allreduce crosses the sites: through `pairs` process pairs per site pair (1: the
/// coordinators), in `rounds` wide-area rounds (1: every site sends its partial to every
/// other; 2: reduce-scatter + allgather among the sites).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub pairs: usize,
    pub rounds: usize,
}

impl Plan {
    pub const COORD: Plan = Plan {
        pairs: 1,
        rounds: 1,
    };
}

/// The user's model (`TSUNAGI_WAN_MODEL`, read once), or None when it is unset or
/// `measure`: then each communicator measures its own (`comm_model`).
pub fn user_model() -> Option<Model> {
    static MODEL: OnceLock<Option<Model>> = OnceLock::new();
    *MODEL.get_or_init(|| match std::env::var("TSUNAGI_WAN_MODEL") {
        Ok(spec) if spec.trim().is_empty() || spec.trim() == "measure" => None,
        Ok(spec) => match Model::parse(&spec) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("tsunagi: warning: TSUNAGI_WAN_MODEL: {e}; measuring instead");
                None
            }
        },
        Err(_) => None,
    })
}

/// Below this many bytes no choice depends on the model (the coordinator algorithms
/// always win), so no measurement is made for small calls.
const MODEL_MIN_BYTES: usize = 8 << 10;

/// Bytes of the bandwidth probe: long enough that its transfer time stands out of the
/// jitter of a loaded machine, short enough to cost a few milliseconds on a slow link.
const PROBE_BYTES: usize = 256 << 10;

/// Models measured per communicator; the communicator's attribute holds the index + 1.
static MEASURED: std::sync::Mutex<Vec<Model>> = std::sync::Mutex::new(Vec::new());

fn model_keyval(rt: &tsunagi_core::Runtime) -> i32 {
    static KV: OnceLock<i32> = OnceLock::new();
    *KV.get_or_init(|| {
        rt.create_keyval(tsunagi_core::comm::Keyval {
            // A duplicate has the same members and links: it keeps the model.
            copy: Some(std::sync::Arc::new(|_, _, _, v| Ok(Some(v)))),
            delete: None,
            extra: 0,
        })
    })
}

/// The cost model for a call on this communicator: the user's, else the one measured on
/// the communicator's first call that needed it. Every member calls this in the same
/// collective call and gets the same model (site 0's coordinator measures and sends it
/// around), so every member makes the same choice.
pub(crate) fn comm_model(ctx: &Ctx, h: &Hier) -> MpiResult<Model> {
    if let Some(m) = user_model() {
        return Ok(m);
    }
    let kv = model_keyval(ctx.rt);
    if let Some(i) = ctx.rt.get_attr(ctx.comm, kv)? {
        let models = MEASURED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = i.checked_sub(1).and_then(|i| models.get(i)) {
            return Ok(*m);
        }
    }
    let m = measure(ctx, h)?;
    if ctx.rank == 0 && std::env::var_os("TSUNAGI_WAN_TRACE").is_some() {
        eprintln!(
            "tsunagi: wan model measured: wan_latency={:.0}us,wan_bandwidth={:.1}MB,\
             wan_stream={:.1}MB,lan_latency={:.0}us,lan_bandwidth={:.1}MB",
            m.wan_latency * 1e6,
            m.wan_bandwidth / 1e6,
            m.wan_stream / 1e6,
            m.lan_latency * 1e6,
            m.lan_bandwidth / 1e6
        );
    }
    let i = {
        let mut models = MEASURED.lock().unwrap_or_else(|p| p.into_inner());
        models.push(m);
        models.len()
    };
    ctx.rt.set_attr(ctx.comm, kv, i)?;
    Ok(m)
}

const T_MEASURE: i32 = tag::BARRIER + 210;
const T_MEASURE_LAN: i32 = tag::BARRIER + 211;
const T_MEASURE_MODEL: i32 = tag::BARRIER + 212;
const T_MEASURE_SITE: i32 = tag::BARRIER + 213;
const T_MEASURE_MULTI: i32 = tag::BARRIER + 214;

/// Site 0's coordinator measures, with every other site at once (the links as a collective
/// loads them):
/// - the latency: half the faster of two zero-byte round trips with every coordinator;
/// - one stream's rate: `m` times [`PROBE_BYTES`] to every coordinator (the bytes the
///   `m`-stream probe moves per site pair), answered by a zero-byte message, the faster of
///   two (the first opens the TCP window of a connection that has
///   carried only small messages; timing it alone measured slow start, 2-5 MB/s on a
///   10 ms round trip, and chose two wide-area rounds for 32 KiB allreduces);
/// - what `m` streams per site pair get (m = the smallest site): the probe sent to each of
///   ranks `0..m` of every other site at once (one process pair's TCP connection each), the
///   faster of two; `m` streams get more across than one where a stream is limited by its
///   window rather than by the link (or the hosts), which is where the split algorithms
///   pay (on the loaded 2-core test machine they do not: m streams got about what one did).
///   Both probes move the same bytes per site pair: a probe that is short for the link is
///   dominated by round trips and window growth, which m streams divide by m without any
///   gain in bandwidth (session 7: 256 KiB per stream both ways made 2 streams look 1.9
///   times one, and the split plans chosen on that were 1.1-1.6 times slower than the
///   coordinators');
/// - the same two figures inside site 0 with its next rank.
///
/// It sends the five figures to the other coordinators, and every site broadcasts them
/// inside. About six wide-area round trips plus the probes, once per communicator.
fn measure(ctx: &Ctx, h: &Hier) -> MpiResult<Model> {
    let me = ctx.rank;
    let c0 = h.leaders[0];
    let ns = h.members.len();
    let m = h.members.iter().map(Vec::len).min().unwrap_or(1);
    let mut z = [0u8; 2];
    let zs = z.as_ptr();
    let zr = z.as_mut_ptr().wrapping_add(1);
    let big = PROBE_BYTES * m.max(1);
    let mut probe = vec![0u8; big];
    let mut figures = [0f64; 5];
    // The prober side: send `bytes` to each of `to` at once and wait for every zero-byte
    // answer; the faster of two such rounds.
    let timed = |to: &[usize], bytes: usize, t: i32, probe: &[u8]| -> MpiResult<f64> {
        let mut best = f64::MAX;
        let mut reqs = Vec::new();
        for _ in 0..2 {
            let t0 = ctx.rt.wtime();
            for &p in to {
                // SAFETY: `probe` (read only, at least `bytes` long) and `z` live until the
                // waitall.
                unsafe {
                    reqs.push(ctx.irecv(zr, 0, p, t)?);
                    reqs.push(ctx.isend(probe.as_ptr(), bytes, p, t)?);
                }
            }
            ctx.waitall(&mut reqs)?;
            best = best.min(ctx.rt.wtime() - t0);
        }
        Ok(best)
    };
    // The answering side of `timed`.
    let answer = |from: usize, bytes: usize, t: i32, probe: &mut [u8]| -> MpiResult<()> {
        for _ in 0..2 {
            // SAFETY: `probe` has room for `bytes` bytes; `zs` is a zero-byte send.
            unsafe {
                ctx.recv(probe.as_mut_ptr(), bytes, from, t)?;
                ctx.send(zs, 0, from, t)?;
            }
        }
        Ok(())
    };
    // The transfer time is the probe's time beyond a round trip; but under load a round
    // trip measured apart may be as long as the probe itself (one measured 29 ms against a
    // 36 ms probe and made 76 MB/s of it), so at least a quarter of the probe's time.
    let rate = |bytes: usize, time: f64, rtt: f64| bytes as f64 / (time - rtt).max(time / 4.0);
    let leaders: Vec<usize> = h.leaders[1..].to_vec();
    // Ranks 0..m of every other site, for the `m`-stream probe.
    let columns: Vec<usize> = (1..ns).flat_map(|s| h.members[s][..m].to_vec()).collect();
    let site0 = &h.members[0];
    let lan_peer = site0.iter().copied().find(|&r| r != c0);
    let d = Model::default();
    if me == c0 {
        let rtt = timed(&leaders, 0, T_MEASURE, &probe)?;
        let one = rate(big, timed(&leaders, big, T_MEASURE, &probe)?, rtt);
        let multi = if m >= 2 {
            let t = timed(&columns, PROBE_BYTES, T_MEASURE_MULTI, &probe)?;
            rate(PROBE_BYTES * m, t, rtt)
        } else {
            one
        };
        let (ll, lb) = match lan_peer {
            Some(p) => {
                let lrtt = timed(&[p], 0, T_MEASURE_LAN, &probe)?;
                let lt = timed(&[p], PROBE_BYTES, T_MEASURE_LAN, &probe)?;
                (lrtt / 2.0, rate(PROBE_BYTES, lt, lrtt))
            }
            None => (d.lan_latency, d.lan_bandwidth),
        };
        // A stream gets `one`; a site pair gets what `m` streams got when they carry the
        // same bytes clearly faster (at least 0.75 m times one stream: streams limited by
        // their windows), else one stream's. On the loaded test machine CPU, not windows,
        // limits them, and split plans were 1.1-3x slower than the coordinators'. A site
        // sends to ns - 1 others.
        let pair = if multi >= 0.75 * m as f64 * one {
            multi
        } else {
            one
        };
        figures = [rtt / 2.0, pair * (ns - 1) as f64, one, ll, lb];
        for &p in &leaders {
            // SAFETY: `figures` is 40 readable bytes.
            unsafe { ctx.send(figures.as_ptr() as *const u8, 40, p, T_MEASURE_MODEL)? };
        }
    } else {
        if h.is_leader() {
            answer(c0, 0, T_MEASURE, &mut probe)?;
            answer(c0, big, T_MEASURE, &mut probe)?;
        }
        if m >= 2 && h.my_node != 0 && h.my_local < m {
            answer(c0, PROBE_BYTES, T_MEASURE_MULTI, &mut probe)?;
        }
        if h.is_leader() {
            // SAFETY: `figures` has room for 40 bytes.
            unsafe { ctx.recv(figures.as_mut_ptr() as *mut u8, 40, c0, T_MEASURE_MODEL)? };
        } else if Some(me) == lan_peer {
            answer(c0, 0, T_MEASURE_LAN, &mut probe)?;
            answer(c0, PROBE_BYTES, T_MEASURE_LAN, &mut probe)?;
        }
    }
    let local = h.local_team();
    crate::bcast::binomial(
        ctx,
        &local,
        figures.as_mut_ptr() as *mut u8,
        40,
        0,
        T_MEASURE_SITE,
    )?;
    let [wan_latency, wan_bandwidth, wan_stream, lan_latency, lan_bandwidth] = figures;
    Ok(Model {
        wan_latency,
        wan_bandwidth,
        wan_stream,
        lan_latency,
        lan_bandwidth,
    })
}

/// Tags of the latency-aware phases (Tsunagi's own range: never an IMPI tag, never the
/// IMPI module's local tags at +96).
const T_BARRIER_IN: i32 = tag::BARRIER + 200;
const T_BARRIER_WAN: i32 = tag::BARRIER + 201;
const T_BARRIER_OUT: i32 = tag::BARRIER + 202;
const T_BCAST_LOCAL: i32 = tag::BCAST + 200;
const T_BCAST_WAN: i32 = tag::BCAST + 201;
const T_BCAST_SCATTER: i32 = tag::BCAST + 202;
const T_BCAST_GATHER: i32 = tag::BCAST + 203;
const T_REDUCE_LOCAL: i32 = tag::REDUCE + 200;
const T_REDUCE_WAN: i32 = tag::REDUCE + 201;
const T_ALLRED_LOCAL: i32 = tag::ALLREDUCE + 200;
const T_ALLRED_WAN: i32 = tag::ALLREDUCE + 201;
const T_ALLRED_BCAST: i32 = tag::ALLREDUCE + 202;
const T_ALLRED_RS: i32 = tag::ALLREDUCE + 203;
const T_ALLRED_AG: i32 = tag::ALLREDUCE + 204;
const T_ALLGATHER_IN: i32 = tag::ALLGATHER + 200;
const T_ALLGATHER_WAN: i32 = tag::ALLGATHER + 201;
const T_ALLGATHER_OUT: i32 = tag::ALLGATHER + 202;

/// Which algorithms run on communicators that span sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The latency-aware algorithms of this module.
    Wan,
    /// The IMPI-conformant algorithms.
    Impi,
    /// The ordinary algorithms, as if the job were one site.
    Flat,
}

/// A mode set by [`set_mode`] (0: none, else 1 + the mode's index).
static MODE_SET: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Replace the mode for the calls that follow (None: back to the environment's), for
/// benchmarks that compare the algorithms in one job (`wan_bench`): every rank must set the
/// same mode between the same two collective calls, with no collective in flight.
pub fn set_mode(m: Option<Mode>) {
    let v = match m {
        None => 0,
        Some(Mode::Wan) => 1,
        Some(Mode::Impi) => 2,
        Some(Mode::Flat) => 3,
    };
    MODE_SET.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// The mode of this process: [`set_mode`]'s, else read once from `TSUNAGI_WAN_COLL` and
/// `TSUNAGI_IMPI_PEERS`.
pub fn mode() -> Mode {
    match MODE_SET.load(std::sync::atomic::Ordering::Relaxed) {
        1 => return Mode::Wan,
        2 => return Mode::Impi,
        3 => return Mode::Flat,
        _ => {}
    }
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let all_tsunagi = std::env::var("TSUNAGI_IMPI_PEERS").is_ok_and(|v| v.trim() == "tsunagi");
        match std::env::var("TSUNAGI_WAN_COLL").as_deref().map(str::trim) {
            Ok("wan") | Ok("on") => Mode::Wan,
            Ok("impi") | Ok("off") => Mode::Impi,
            Ok("flat") => Mode::Flat,
            Ok("auto") | Ok("") | Err(_) => {
                if all_tsunagi {
                    Mode::Wan
                } else {
                    Mode::Impi
                }
            }
            Ok(other) => {
                eprintln!(
                    "tsunagi: warning: TSUNAGI_WAN_COLL={other}: expected auto, wan, impi or \
                     flat; using auto"
                );
                if all_tsunagi {
                    Mode::Wan
                } else {
                    Mode::Impi
                }
            }
        }
    })
}

/// Whether this call runs the flat algorithms (`TSUNAGI_WAN_COLL=flat`) on a communicator
/// that spans sites. Those then choose as for ranks on separate nodes, not by the node map:
/// a site of one node (as in the emulated sites of the tests and benchmarks) would make the
/// node-aware algorithms site-aware by accident, while real sites have many nodes, across
/// which a site-unaware MPI's node-aware algorithms cross the wide-area link as often as
/// any other.
pub(crate) fn flat_across_sites(ctx: &Ctx) -> MpiResult<bool> {
    if mode() != Mode::Flat || ctx.size < 2 {
        return Ok(false);
    }
    let map = ctx.rt.site_map();
    if map.iter().all(|&s| s == map[0]) {
        return Ok(false);
    }
    let group = ctx.rt.comm_group(ctx.comm)?;
    let w = group.world_ranks();
    Ok(w.iter().any(|&r| map[r as usize] != map[w[0] as usize]))
}

/// The site structure when the latency-aware algorithms apply to this call.
pub(crate) fn sites(ctx: &Ctx) -> MpiResult<Option<Hier>> {
    if ctx.size < 2 || mode() != Mode::Wan {
        return Ok(None);
    }
    crate::impi::sites(ctx)
}

/// Member index of comm rank `r` in `team`.
fn index_in(team: &Team, r: usize) -> usize {
    team.ranks.iter().position(|&x| x == r).expect("member")
}

/// Elements `[start, start + len)` of chunk `c` when `n` elements are cut into `m` chunks.
fn chunk(n: usize, m: usize, c: usize) -> (usize, usize) {
    let base = n / m;
    let extra = n % m;
    let start = c * base + c.min(extra);
    (start, base + usize::from(c < extra))
}

/// The direct algorithms: on a small communicator, small calls go from every rank to every
/// rank that needs the data at once. One wide-area crossing, like the coordinator
/// algorithms, but no dependent steps inside the sites before or after it (each of which
/// costs a wake-up, and on a loaded machine a time slice). Used when the communicator has
/// at most this many ranks (`TSUNAGI_WAN_DIRECT`, default 16; 0: never) and the message
/// at most [`DIRECT_MAX_BYTES`].
fn direct_max_ranks() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("TSUNAGI_WAN_DIRECT")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(16)
    })
}

/// The largest message of a direct call (per rank pair).
const DIRECT_MAX_BYTES: usize = 4096;

pub(crate) fn direct(ctx: &Ctx, bytes: usize) -> bool {
    ctx.size <= direct_max_ranks() && bytes <= DIRECT_MAX_BYTES
}

/// Algorithms forced by [`force_algorithm`]: (variable name, value).
static FORCED_SET: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Force an algorithm as the environment variable `name` (`TSUNAGI_WAN_BCAST`,
/// `TSUNAGI_WAN_ALLREDUCE`) would, for the calls that follow (None: back to the
/// environment's), for benchmarks that compare them in one job: every rank the same,
/// between collective calls.
pub fn force_algorithm(name: &str, value: Option<&str>) {
    let mut set = FORCED_SET.lock().unwrap_or_else(|p| p.into_inner());
    set.retain(|(k, _)| k != name);
    if let Some(v) = value {
        set.push((name.to_string(), v.to_string()));
    }
}

/// An algorithm forced by [`force_algorithm`] or the environment variable `name` (for tests and measurements;
/// every site must set the same): `TSUNAGI_WAN_BCAST=split|coord`,
/// `TSUNAGI_WAN_ALLREDUCE=coord|coord_rsag|split|split_rsag`. Unset: the cost model chooses.
fn forced(name: &str) -> Option<String> {
    let set = FORCED_SET.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, v)) = set.iter().find(|(k, _)| k == name) {
        return Some(v.clone());
    }
    drop(set);
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

const T_DIRECT: i32 = tag::BARRIER + 220;
const T_BCAST_DIRECT: i32 = tag::BCAST + 220;
const T_REDUCE_DIRECT: i32 = tag::REDUCE + 220;
const T_ALLRED_DIRECT: i32 = tag::ALLREDUCE + 220;
const T_ALLGATHER_DIRECT: i32 = tag::ALLGATHER + 220;

/// Combine the `n` packed contributions in `parts` (rank order, `bytes` each) into `w` in
/// rank order, `x0 op (x1 op (... op x(n-1)))`, the same bits at every rank.
///
/// # Safety
/// `parts` holds `n * bytes` bytes; `w` has `bytes` writable bytes, disjoint from it.
unsafe fn combine_in_rank_order(
    parts: &[u8],
    n: usize,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
) {
    let bytes = count * dtype.size();
    // SAFETY: caller contract.
    unsafe {
        crate::util::copy_bytes(parts.as_ptr().add((n - 1) * bytes), w, bytes);
        for r in (0..n - 1).rev() {
            op.apply_packed(parts.as_ptr().add(r * bytes), w, count, dtype);
        }
    }
}

/// Barrier: site barrier, one zero-byte exchange among all coordinators at once, site
/// barrier.
pub(crate) fn barrier(ctx: &Ctx, h: &Hier) -> MpiResult<()> {
    if direct(ctx, 0) {
        // Every rank tells every other that it arrived.
        let mut z = [0u8; 2];
        let zs = z.as_ptr();
        let zr = z.as_mut_ptr().wrapping_add(1);
        let mut reqs = Vec::new();
        for r in (0..ctx.size).filter(|&r| r != ctx.rank) {
            // SAFETY: zero-byte transfers at addresses inside `z`, alive until waitall.
            unsafe {
                reqs.push(ctx.irecv(zr, 0, r, T_DIRECT)?);
                reqs.push(ctx.isend(zs, 0, r, T_DIRECT)?);
            }
        }
        return ctx.waitall(&mut reqs);
    }
    let local = h.local_team();
    crate::barrier::dissemination(ctx, &local, T_BARRIER_IN)?;
    if h.is_leader() {
        let mut z = [0u8; 2];
        let zs = z.as_ptr();
        let zr = z.as_mut_ptr().wrapping_add(1);
        let mut reqs = Vec::new();
        for (s, &l) in h.leaders.iter().enumerate() {
            if s != h.my_node {
                // SAFETY: zero-byte transfers at addresses inside `z`, alive until waitall.
                unsafe {
                    reqs.push(ctx.irecv(zr, 0, l, T_BARRIER_WAN)?);
                    reqs.push(ctx.isend(zs, 0, l, T_BARRIER_WAN)?);
                }
            }
        }
        ctx.waitall(&mut reqs)?;
    }
    crate::barrier::dissemination(ctx, &local, T_BARRIER_OUT)
}

/// Bcast (see the module doc).
///
/// # Safety
/// `buf` holds (root) or has room for `count` elements of `dtype`.
pub(crate) unsafe fn bcast(
    ctx: &Ctx,
    h: &Hier,
    buf: *mut u8,
    count: usize,
    dtype: &TypeRef,
    root: usize,
) -> MpiResult<()> {
    let bytes = count * dtype.size();
    if bytes == 0 {
        return Ok(());
    }
    let me = ctx.rank;
    // SAFETY: caller contract.
    let view = unsafe { Packed::new(buf, count, dtype, me == root) };
    let rs = h.node_of[root];
    let biggest = h.members.iter().map(Vec::len).max().unwrap_or(1);
    // The smallest site other than the root's: how many streams per site pair a split
    // bcast can use.
    let m = (0..h.members.len())
        .filter(|&s| s != rs)
        .map(|s| h.members[s].len())
        .min()
        .unwrap_or(1);
    let split = !direct(ctx, bytes)
        && bytes >= m
        && match forced("TSUNAGI_WAN_BCAST") {
            Some(v) => v == "split",
            None => {
                bytes >= MODEL_MIN_BYTES
                    && comm_model(ctx, h)?.split_bcast(bytes, m, biggest, h.members.len())
            }
        };
    if direct(ctx, bytes) {
        // The root sends to every rank at once.
        let mut reqs = Vec::new();
        if me == root {
            for r in (0..ctx.size).filter(|&r| r != root) {
                // SAFETY: the view holds `bytes` bytes until the waitall.
                reqs.push(unsafe { ctx.isend(view.ptr, bytes, r, T_BCAST_DIRECT)? });
            }
        } else {
            // SAFETY: the view has room for `bytes` bytes.
            reqs.push(unsafe { ctx.irecv(view.ptr, bytes, root, T_BCAST_DIRECT)? });
        }
        ctx.waitall(&mut reqs)?;
    } else if split {
        split_bcast(ctx, h, view.ptr, bytes, root, m)?;
    } else {
        let mut reqs = Vec::new();
        if me == root {
            for (s, &l) in h.leaders.iter().enumerate() {
                if s != rs {
                    // SAFETY: the view holds `bytes` bytes until the waitall.
                    reqs.push(unsafe { ctx.isend(view.ptr, bytes, l, T_BCAST_WAN)? });
                }
            }
        } else if h.is_leader() && h.my_node != rs {
            // SAFETY: the view has room for `bytes` bytes.
            reqs.push(unsafe { ctx.irecv(view.ptr, bytes, root, T_BCAST_WAN)? });
        }
        ctx.waitall(&mut reqs)?;
        let local = h.local_team();
        let local_root = if h.my_node == rs {
            index_in(&local, root)
        } else {
            0
        };
        crate::bcast::binomial(ctx, &local, view.ptr, bytes, local_root, T_BCAST_LOCAL)?;
    }
    if me != root {
        // SAFETY: caller contract.
        unsafe { view.finish() };
    }
    Ok(())
}

/// The split bcast of `bytes` packed bytes at `w` (full at the root): the root sends chunk
/// `c` of `m` straight to rank `c` of every other site (its own TCP connection to each:
/// `m` streams per site pair, all at once, no step inside the root's site before), and
/// bcasts to its own site meanwhile; then every other site allgathers its chunks (rank `c`
/// sends chunk `c` to each other rank of its site, all at once).
fn split_bcast(
    ctx: &Ctx,
    h: &Hier,
    w: *mut u8,
    bytes: usize,
    root: usize,
    m: usize,
) -> MpiResult<()> {
    let me = ctx.rank;
    let rs = h.node_of[root];
    let ptr = |c: usize| w.wrapping_add(chunk(bytes, m, c).0);
    let len = |c: usize| chunk(bytes, m, c).1;
    let mut reqs = Vec::new();
    if me == root {
        // Remote sites first: they are the long path.
        for s in (0..h.members.len()).filter(|&s| s != rs) {
            for c in 0..m {
                // SAFETY: chunk c of the full buffer, alive until the waitall.
                reqs.push(unsafe { ctx.isend(ptr(c), len(c), h.members[s][c], T_BCAST_WAN)? });
            }
        }
        for &r in h.members[rs].iter().filter(|&&r| r != root) {
            // SAFETY: as above.
            reqs.push(unsafe { ctx.isend(w, bytes, r, T_BCAST_SCATTER)? });
        }
        return ctx.waitall(&mut reqs);
    }
    if h.my_node == rs {
        // SAFETY: the buffer has room for `bytes` bytes.
        reqs.push(unsafe { ctx.irecv(w, bytes, root, T_BCAST_SCATTER)? });
        return ctx.waitall(&mut reqs);
    }
    let site = &h.members[h.my_node];
    let mine = h.my_local;
    // Post every receive first: my chunk from the root, the others from their holders.
    for (c, &holder) in site.iter().enumerate().take(m) {
        if c == mine {
            // SAFETY: chunk c of the buffer, alive until the waitall.
            reqs.push(unsafe { ctx.irecv(ptr(c), len(c), root, T_BCAST_WAN)? });
        } else {
            // SAFETY: as above.
            reqs.push(unsafe { ctx.irecv(ptr(c), len(c), holder, T_BCAST_GATHER)? });
        }
    }
    if mine < m {
        // Wait for my chunk from the root, then pass it on inside the site.
        let mut first = vec![reqs.remove(mine)];
        ctx.waitall(&mut first)?;
        for (i, &r) in site.iter().enumerate() {
            if i != mine {
                // SAFETY: chunk `mine`, complete, alive until the waitall.
                reqs.push(unsafe { ctx.isend(ptr(mine), len(mine), r, T_BCAST_GATHER)? });
            }
        }
    }
    ctx.waitall(&mut reqs)
}

const T_SCAN_DIRECT: i32 = tag::SCAN + 220;

/// Scan or exscan by the direct algorithm when it applies (a small communicator and
/// message, [`direct`]): every rank sends its packed input `mine` to every higher rank at
/// once and combines the prefix in rank order, `((x0 op x1) op x2) ...` (the association of
/// the chain, so any op): one wide-area crossing instead of one per site boundary in a
/// chain. Returns None (nothing done) otherwise; the result is packed (None: exscan at
/// rank 0, whose receive buffer stays untouched).
pub(crate) fn scan(
    ctx: &Ctx,
    mine: &[u8],
    count: usize,
    dtype: &TypeRef,
    op: &Op,
    exclusive: bool,
) -> MpiResult<Option<Option<Vec<u8>>>> {
    let bytes = mine.len();
    if bytes == 0 || ctx.size < 2 || sites(ctx)?.is_none() || !direct(ctx, bytes) {
        return Ok(None);
    }
    let me = ctx.rank;
    let mut parts = vec![0u8; (me + 1) * bytes];
    parts[me * bytes..].copy_from_slice(mine);
    let base = parts.as_mut_ptr();
    let mut reqs = Vec::new();
    for p in 0..me {
        // SAFETY: slot p of `parts`, alive until the waitall.
        reqs.push(unsafe { ctx.irecv(base.wrapping_add(p * bytes), bytes, p, T_SCAN_DIRECT)? });
    }
    for p in me + 1..ctx.size {
        // SAFETY: `mine`, alive until the waitall.
        reqs.push(unsafe { ctx.isend(mine.as_ptr(), bytes, p, T_SCAN_DIRECT)? });
    }
    ctx.waitall(&mut reqs)?;
    let upto = if exclusive { me } else { me + 1 };
    if upto == 0 {
        return Ok(Some(None));
    }
    for i in 1..upto {
        // SAFETY: slot 0 and slot i are disjoint ranges of `parts`, `count` elements each.
        unsafe {
            op.combine_left(
                base,
                base.wrapping_add(i * bytes) as *const u8,
                count,
                dtype,
            )
        };
    }
    parts.truncate(bytes);
    Ok(Some(Some(parts)))
}

/// Reduce with a commutative op; `w` is this rank's packed input and at the root receives
/// the packed result. Returns false (nothing done) for a non-commutative op.
///
/// # Safety
/// `w` holds `count * dtype.size()` readable and writable bytes.
pub(crate) unsafe fn reduce(
    ctx: &Ctx,
    h: &Hier,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
    root: usize,
) -> MpiResult<bool> {
    let me = ctx.rank;
    let bytes = count * dtype.size();
    if bytes > 0 && direct(ctx, bytes) {
        // Everyone sends to the root, which combines in rank order (so any op).
        if me == root {
            let mut parts = vec![0u8; bytes * ctx.size];
            // SAFETY: `w` holds `bytes` bytes; slot `me` of `parts` too.
            unsafe { crate::util::copy_bytes(w, parts.as_mut_ptr().add(me * bytes), bytes) };
            let mut reqs = Vec::new();
            for r in (0..ctx.size).filter(|&r| r != me) {
                // SAFETY: slot r of `parts`, alive until the waitall.
                reqs.push(unsafe {
                    ctx.irecv(parts.as_mut_ptr().add(r * bytes), bytes, r, T_REDUCE_DIRECT)?
                });
            }
            ctx.waitall(&mut reqs)?;
            // SAFETY: `parts` has `size` slots, disjoint from `w`.
            unsafe { combine_in_rank_order(&parts, ctx.size, w, count, dtype, op) };
        } else {
            // SAFETY: `w` holds this rank's `bytes` bytes.
            unsafe { ctx.send(w, bytes, root, T_REDUCE_DIRECT)? };
        }
        return Ok(true);
    }
    if !op.is_commutative() {
        return Ok(false);
    }
    let bytes = count * dtype.size();
    let rs = h.node_of[root];
    let local = h.local_team();
    let local_root = if h.my_node == rs {
        index_in(&local, root)
    } else {
        0
    };
    crate::reduce::team_reduce(ctx, &local, w, count, dtype, op, local_root, T_REDUCE_LOCAL)?;
    if bytes == 0 {
        return Ok(true);
    }
    if me == root {
        let ns = h.members.len();
        let mut parts = vec![0u8; bytes * ns];
        let mut reqs = Vec::new();
        for (s, &l) in h.leaders.iter().enumerate() {
            if s != rs {
                // SAFETY: slot s of `parts`, alive until the waitall.
                reqs.push(unsafe {
                    ctx.irecv(parts.as_mut_ptr().add(s * bytes), bytes, l, T_REDUCE_WAN)?
                });
            }
        }
        ctx.waitall(&mut reqs)?;
        for s in 0..ns {
            if s != rs {
                // SAFETY: slot s and `w` hold `count` packed elements each, disjoint.
                unsafe { op.apply_packed(parts.as_ptr().add(s * bytes), w, count, dtype) };
            }
        }
    } else if h.is_leader() && h.my_node != rs {
        // SAFETY: `w` holds the site's partial result.
        unsafe { ctx.send(w, bytes, root, T_REDUCE_WAN)? };
    }
    Ok(true)
}

/// Allreduce with a commutative op on the packed stream `w` (input in, result out at every
/// rank). Returns false (nothing done) for a non-commutative op.
///
/// # Safety
/// `w` holds `count * dtype.size()` readable and writable bytes.
pub(crate) unsafe fn allreduce(
    ctx: &Ctx,
    h: &Hier,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<bool> {
    let esize = dtype.size();
    let bytes = count * esize;
    if bytes == 0 {
        return Ok(true);
    }
    if direct(ctx, bytes) {
        // Every rank sends its input to every other and combines all in rank order: the
        // same bits everywhere, for any op.
        let me = ctx.rank;
        let mut parts = vec![0u8; bytes * ctx.size];
        // SAFETY: `w` holds `bytes` bytes; slot `me` of `parts` too.
        unsafe { crate::util::copy_bytes(w, parts.as_mut_ptr().add(me * bytes), bytes) };
        let mut reqs = Vec::new();
        let base = parts.as_mut_ptr();
        for r in (0..ctx.size).filter(|&r| r != me) {
            // SAFETY: slot r (written) and slot `me` (read) of `parts`, disjoint, alive
            // until the waitall.
            unsafe {
                reqs.push(ctx.irecv(base.add(r * bytes), bytes, r, T_ALLRED_DIRECT)?);
                reqs.push(ctx.isend(base.add(me * bytes), bytes, r, T_ALLRED_DIRECT)?);
            }
        }
        ctx.waitall(&mut reqs)?;
        // SAFETY: `parts` has `size` slots, disjoint from `w`.
        unsafe { combine_in_rank_order(&parts, ctx.size, w, count, dtype, op) };
        return Ok(true);
    }
    if !op.is_commutative() {
        return Ok(false);
    }
    let m = h.members.iter().map(Vec::len).min().expect("sites");
    let ns = h.members.len();
    let local = h.local_team();
    let biggest = h.members.iter().map(Vec::len).max().unwrap_or(1);
    let plan = match forced("TSUNAGI_WAN_ALLREDUCE").as_deref() {
        Some("coord") => Some(Plan::COORD),
        Some("coord_rsag") => Some(Plan {
            pairs: 1,
            rounds: 2,
        }),
        Some("split") => Some(Plan {
            pairs: m,
            rounds: 1,
        }),
        Some("split_rsag") => Some(Plan {
            pairs: m,
            rounds: 2,
        }),
        _ => None,
    };
    let mut plan = match plan {
        Some(p) => p,
        None if bytes >= MODEL_MIN_BYTES => {
            comm_model(ctx, h)?.allreduce_plan(bytes, count, m, biggest, ns)
        }
        None => Plan::COORD,
    };
    // What the data allows: a chunk per pair (and per site for two rounds), two rounds only
    // over three sites or more.
    if plan.pairs > count.max(1) {
        plan.pairs = 1;
    }
    if plan.rounds == 2 && (ns < 3 || count < plan.pairs * ns) {
        plan.rounds = 1;
    }
    if ctx.rank == 0 && plan != Plan::COORD && std::env::var_os("TSUNAGI_WAN_TRACE").is_some() {
        eprintln!(
            "tsunagi: wan allreduce of {bytes} bytes: {} pair(s) per site pair, {} round(s)",
            plan.pairs, plan.rounds
        );
    }
    let p = plan.pairs;
    if p > 1 {
        // Reduce-scatter inside the site: chunk c to site rank c.
        for c in 0..p {
            let (start, n) = chunk(count, p, c);
            let at = w.wrapping_add(start * esize);
            crate::reduce::team_reduce(ctx, &local, at, n, dtype, op, c, T_ALLRED_LOCAL)?;
        }
    } else {
        crate::reduce::team_reduce(ctx, &local, w, count, dtype, op, 0, T_ALLRED_LOCAL)?;
    }
    if h.my_local < p {
        let c = h.my_local;
        let (start, n) = chunk(count, p, c);
        let at = w.wrapping_add(start * esize);
        // SAFETY: chunk c of `w` holds the site's partial result of that chunk.
        unsafe {
            if plan.rounds == 2 {
                reduce_scatter_allgather(ctx, h, c, at, n, dtype, op)?;
            } else {
                exchange_and_combine(ctx, h, c, at, n, dtype, op)?;
            }
        }
    }
    if p > 1 {
        // Allgather inside the site: chunk c from site rank c to every other, all at once.
        let mut reqs = Vec::new();
        for c in 0..p {
            let (start, n) = chunk(count, p, c);
            let at = w.wrapping_add(start * esize);
            for (i, &r) in local.ranks.iter().enumerate() {
                // SAFETY: chunk c of `w` (read by its holder, written by the others), alive
                // until the waitall; chunks are disjoint.
                unsafe {
                    if i == c && local.me != c {
                        reqs.push(ctx.irecv(at, n * esize, r, T_ALLRED_BCAST)?);
                    } else if local.me == c && i != c {
                        reqs.push(ctx.isend(at, n * esize, r, T_ALLRED_BCAST)?);
                    }
                }
            }
        }
        ctx.waitall(&mut reqs)?;
    } else {
        crate::bcast::binomial(ctx, &local, w, bytes, 0, T_ALLRED_BCAST)?;
    }
    Ok(true)
}

/// Site rank `c` of every site: exchange the `count` packed elements at `w` with site rank
/// `c` of every other site, all at once, and combine the sites' parts in site order (the
/// same order everywhere, so every site computes the same bits).
///
/// # Safety
/// `w` holds `count * dtype.size()` readable and writable bytes.
unsafe fn exchange_and_combine(
    ctx: &Ctx,
    h: &Hier,
    c: usize,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<()> {
    let bytes = count * dtype.size();
    let ns = h.members.len();
    let mine = h.my_node;
    let mut parts = vec![0u8; bytes * ns];
    // SAFETY: `w` has `bytes` bytes; slot `mine` of `parts` too.
    unsafe { crate::util::copy_bytes(w, parts.as_mut_ptr().add(mine * bytes), bytes) };
    let mut reqs = Vec::new();
    for s in 0..ns {
        if s == mine {
            continue;
        }
        let peer = h.members[s][c];
        // SAFETY: slot s of `parts` and slot `mine` (read only), alive until the waitall.
        unsafe {
            reqs.push(ctx.irecv(parts.as_mut_ptr().add(s * bytes), bytes, peer, T_ALLRED_WAN)?);
            reqs.push(ctx.isend(parts.as_ptr().add(mine * bytes), bytes, peer, T_ALLRED_WAN)?);
        }
    }
    ctx.waitall(&mut reqs)?;
    // result = part(ns-1); then result = part(s) op result for s descending.
    // SAFETY: slots are disjoint from `w`, each `bytes` long.
    unsafe {
        crate::util::copy_bytes(parts.as_ptr().add((ns - 1) * bytes), w, bytes);
        for s in (0..ns - 1).rev() {
            op.apply_packed(parts.as_ptr().add(s * bytes), w, count, dtype);
        }
    }
    Ok(())
}

/// Site rank `column` of every site (the coordinators when 0), for large messages: site
/// `s` reduces chunk `s` of the `ns` chunks of the `count` elements at `w` (every site
/// sends it its part of that chunk, all at once), then sends the reduced chunk to every
/// other site. Two wide-area rounds instead of
/// one, but each site pair carries `2n/ns` bytes each way instead of `n`. Chunk `s` is
/// combined in site order by site `s` alone, so every site gets the same bits.
///
/// # Safety
/// `w` holds `count * dtype.size()` readable and writable bytes; `count >= ns`.
unsafe fn reduce_scatter_allgather(
    ctx: &Ctx,
    h: &Hier,
    column: usize,
    w: *mut u8,
    count: usize,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<()> {
    let esize = dtype.size();
    let ns = h.members.len();
    let mine = h.my_node;
    let at = |c: usize| w.wrapping_add(chunk(count, ns, c).0 * esize);
    let len = |c: usize| chunk(count, ns, c).1 * esize;
    let (_, my_n) = chunk(count, ns, mine);
    let my_bytes = my_n * esize;
    let mut parts = vec![0u8; my_bytes * ns];
    // SAFETY: chunk `mine` of `w` and slot `mine` of `parts`, `my_bytes` each.
    unsafe { crate::util::copy_bytes(at(mine), parts.as_mut_ptr().add(mine * my_bytes), my_bytes) };
    let mut reqs = Vec::new();
    for s in 0..ns {
        if s == mine {
            continue;
        }
        let peer = h.members[s][column];
        // SAFETY: slot s of `parts`; chunk s of `w` (read only until the allgather below
        // overwrites it); both alive until the waitall.
        unsafe {
            reqs.push(ctx.irecv(
                parts.as_mut_ptr().add(s * my_bytes),
                my_bytes,
                peer,
                T_ALLRED_RS,
            )?);
            reqs.push(ctx.isend(at(s), len(s), peer, T_ALLRED_RS)?);
        }
    }
    ctx.waitall(&mut reqs)?;
    // SAFETY: the slots are disjoint from `w`; chunk `mine` of `w` has `my_bytes` bytes.
    unsafe {
        crate::util::copy_bytes(parts.as_ptr().add((ns - 1) * my_bytes), at(mine), my_bytes);
        for s in (0..ns - 1).rev() {
            op.apply_packed(parts.as_ptr().add(s * my_bytes), at(mine), my_n, dtype);
        }
    }
    for s in 0..ns {
        if s == mine {
            continue;
        }
        let peer = h.members[s][column];
        // SAFETY: chunk s of `w` (written by site s) and chunk `mine` (read only), disjoint.
        unsafe {
            reqs.push(ctx.irecv(at(s), len(s), peer, T_ALLRED_AG)?);
            reqs.push(ctx.isend(at(mine), my_bytes, peer, T_ALLRED_AG)?);
        }
    }
    ctx.waitall(&mut reqs)
}

/// Reduce_scatter totals up to this many bytes go through the latency-aware allreduce (one
/// wide-area round, every rank receives the whole vector) instead of a reduce to rank 0 and
/// a scatterv (two rounds).
const REDUCE_SCATTER_BY_ALLREDUCE_MAX: usize = 64 << 10;

/// `MPI_Reduce_scatter(_block)` across sites in the latency-aware mode, for small totals
/// and commutative ops: the allreduce of the whole vector, then this rank keeps its part.
/// Returns false (nothing done) where it does not apply; the caller's algorithm runs then.
///
/// # Safety
/// As `MPI_Reduce_scatter`: `sum(counts)` elements readable at the send buffer (in place:
/// at `recvbuf`), room for `counts[me]` elements at `recvbuf`; `me` is this rank in `comm`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce_scatter(
    rt: &tsunagi_core::Runtime,
    comm: tsunagi_core::CommId,
    me: usize,
    sendbuf: SendBuf,
    recvbuf: *mut u8,
    counts: &[usize],
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<bool> {
    let total: usize = counts.iter().sum();
    if mode() != Mode::Wan
        || !op.is_commutative()
        || total == 0
        || total * dtype.size() > REDUCE_SCATTER_BY_ALLREDUCE_MAX
    {
        return Ok(false);
    }
    let src = match sendbuf {
        SendBuf::InPlace => recvbuf as *const u8,
        SendBuf::Ptr(s) => s,
    };
    let mut whole = crate::op::Scratch::new(total, dtype);
    // SAFETY: the input holds `total` elements (caller contract); `whole` spans their type
    // map.
    unsafe {
        crate::reduce::allreduce(
            rt,
            SendBuf::Ptr(src),
            whole.base(),
            total as i64,
            dtype,
            op,
            comm,
        )?
    };
    let before: usize = counts[..me].iter().sum();
    let at = whole
        .base()
        .wrapping_offset(before as isize * dtype.extent());
    // SAFETY: element `before` of `whole` starts `counts[me]` elements of the result; the
    // receive buffer has room for them (caller contract) and is disjoint from `whole`.
    unsafe {
        crate::util::copy_typed(
            "MPI_Reduce_scatter",
            at,
            counts[me],
            dtype,
            recvbuf,
            counts[me],
            dtype,
        )?
    };
    Ok(true)
}

/// Allgather on the packed receive stream `w` of `size * blk` bytes, in which this rank's
/// block (at `rank * blk`) is filled in.
pub(crate) fn allgather(ctx: &Ctx, h: &Hier, w: *mut u8, blk: usize) -> MpiResult<()> {
    if blk == 0 {
        return Ok(());
    }
    let me = ctx.rank;
    let at = |r: usize| w.wrapping_add(r * blk);
    if direct(ctx, blk) {
        // Every rank sends its block to every other at once.
        let mut reqs = Vec::new();
        for r in (0..ctx.size).filter(|&r| r != me) {
            // SAFETY: block r (written) and block `me` (read) of the stream, disjoint,
            // alive until the waitall.
            unsafe {
                reqs.push(ctx.irecv(at(r), blk, r, T_ALLGATHER_DIRECT)?);
                reqs.push(ctx.isend(at(me), blk, r, T_ALLGATHER_DIRECT)?);
            }
        }
        return ctx.waitall(&mut reqs);
    }
    let local = h.local_team();
    let leader = h.leaders[h.my_node];
    let mut reqs = Vec::new();
    // 1. Gather the site's blocks at its coordinator.
    for &r in &local.ranks {
        if r == leader {
            continue;
        }
        // SAFETY: block r of the stream, alive until the waitall.
        unsafe {
            if me == leader {
                reqs.push(ctx.irecv(at(r), blk, r, T_ALLGATHER_IN)?);
            } else if me == r {
                reqs.push(ctx.isend(at(r), blk, leader, T_ALLGATHER_IN)?);
            }
        }
    }
    ctx.waitall(&mut reqs)?;
    // 2. Coordinators exchange their sites' blocks (one message per site pair each way).
    if me == leader {
        let ns = h.members.len();
        let pack = |s: usize| -> Vec<u8> {
            let mut v = vec![0u8; h.members[s].len() * blk];
            for (i, &r) in h.members[s].iter().enumerate() {
                // SAFETY: block r is readable; slot i of `v` is writable.
                unsafe { crate::util::copy_bytes(at(r), v.as_mut_ptr().add(i * blk), blk) };
            }
            v
        };
        let mine = pack(h.my_node);
        let mut theirs: Vec<Vec<u8>> = (0..ns)
            .map(|s| {
                if s == h.my_node {
                    Vec::new()
                } else {
                    vec![0u8; h.members[s].len() * blk]
                }
            })
            .collect();
        for (s, v) in theirs.iter_mut().enumerate() {
            if s == h.my_node {
                continue;
            }
            let l = h.leaders[s];
            // SAFETY: `v` and `mine` live until the waitall.
            unsafe {
                reqs.push(ctx.irecv(v.as_mut_ptr(), v.len(), l, T_ALLGATHER_WAN)?);
                reqs.push(ctx.isend(mine.as_ptr(), mine.len(), l, T_ALLGATHER_WAN)?);
            }
        }
        ctx.waitall(&mut reqs)?;
        for (s, v) in theirs.iter().enumerate() {
            for (i, &r) in h.members.get(s).into_iter().flatten().enumerate() {
                if s != h.my_node {
                    // SAFETY: slot i of `v`, block r of the stream.
                    unsafe { crate::util::copy_bytes(v.as_ptr().add(i * blk), at(r), blk) };
                }
            }
        }
    }
    // 3. Bcast the whole stream inside the site.
    crate::bcast::binomial(ctx, &local, w, ctx.size * blk, 0, T_ALLGATHER_OUT)
}

/// `MPI_Allgather` across sites: pack this rank's block into the packed receive stream, run
/// [`allgather`], unpack.
///
/// # Safety
/// As `MPI_Allgather`: `sendcount` elements of `sendtype` readable at the send buffer (or
/// this rank's block of the receive buffer in place), room for `size * rc` elements of
/// `recvtype` at `recvbuf`.
pub(crate) unsafe fn allgather_buffers(
    ctx: &Ctx,
    h: &Hier,
    sendbuf: SendBuf,
    sendcount: i64,
    sendtype: &TypeRef,
    recvbuf: *mut u8,
    rc: usize,
    recvtype: &TypeRef,
) -> MpiResult<()> {
    let blk = rc * recvtype.size();
    let total = ctx.size * rc;
    // SAFETY: caller contract; in place, this rank's block is read from the receive buffer.
    let view = unsafe { Packed::new(recvbuf, total, recvtype, sendbuf == SendBuf::InPlace) };
    if let SendBuf::Ptr(s) = sendbuf {
        let sc = crate::util::check_count(ctx.call, sendcount)?;
        crate::util::check_type(ctx.call, sendtype)?;
        if sc * sendtype.size() != blk {
            return Err(err(
                ErrorClass::Truncate,
                format!(
                    "{}: sendcount {sc} of the send type is {} bytes but recvcount {rc} of \
                     the receive type is {blk}",
                    ctx.call,
                    sc * sendtype.size()
                ),
            ));
        }
        if blk > 0 {
            // SAFETY: the send type map is readable; block `rank` of the view has `blk`
            // writable bytes.
            unsafe {
                sendtype.pack_range(
                    s,
                    sc,
                    0,
                    std::slice::from_raw_parts_mut(view.ptr.add(ctx.rank * blk), blk),
                )
            };
        }
    }
    allgather(ctx, h, view.ptr, blk)?;
    // SAFETY: caller contract.
    unsafe { view.finish() };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_splits_only_where_one_stream_cannot_fill_the_link() {
        let d = Model::default();
        let plan = |m: &Model, n: usize| m.allreduce_plan(n, n / 8, 2, 2, 3);
        assert!(!d.split_bcast(1 << 20, 2, 2, 3));
        assert_eq!(plan(&d, 1 << 20).pairs, 1);
        let m = Model::parse("wan_latency=5ms,wan_bandwidth=1GB,wan_stream=10MB").unwrap();
        assert_eq!(m.wan_stream, 10e6);
        assert_eq!(m.wan_latency, 5e-3);
        assert!(m.split_bcast(1 << 20, 2, 2, 3));
        assert_eq!(plan(&m, 1 << 20).pairs, 2);
        // Small messages never pay for the extra steps; one rank per site cannot split.
        assert!(!m.split_bcast(64, 2, 2, 3));
        assert_eq!(plan(&m, 64), Plan::COORD);
        assert!(!m.split_bcast(1 << 20, 1, 2, 3));
        assert!(Model::parse("wan_latency=fast").is_err());
        assert!(Model::parse("speed=1").is_err());
        assert_eq!(Model::parse("lan_bandwidth=2G").unwrap().lan_bandwidth, 2e9);
    }

    #[test]
    fn two_rounds_pay_for_large_messages_on_three_sites_or_more() {
        // 5 ms, 20 MB/s per site pair and per stream.
        let m = Model::parse("wan_latency=5ms,wan_bandwidth=40MB,wan_stream=20MB").unwrap();
        let plan = |n: usize, sites: usize| m.allreduce_plan(n, n / 8, 2, 2, sites);
        // One round: 5 ms + n / 20 MB/s; two: 10 ms + (2n/3) / 20 MB/s; n = 300 kB.
        assert_eq!(plan(256 << 10, 3).rounds, 1);
        assert_eq!(plan(1 << 20, 3).rounds, 2);
        assert_eq!(plan(8 << 10, 3), Plan::COORD);
        // Two sites: the same bytes per pair in two rounds; never.
        assert_eq!(plan(64 << 20, 2).rounds, 1);
        // Many sites: the bytes per pair fall to 2n/S.
        assert_eq!(plan(200 << 10, 8).rounds, 2);
        // Streams limited by their window (10 MB/s each, the link 1 GB/s): every pair
        // carries a chunk, and 32 KiB stays one round.
        let w = Model::parse("wan_latency=5ms,wan_bandwidth=1GB,wan_stream=10MB").unwrap();
        assert_eq!(
            w.allreduce_plan(1 << 20, 1 << 17, 2, 2, 3),
            Plan {
                pairs: 2,
                rounds: 2
            }
        );
        assert_eq!(w.allreduce_plan(32 << 10, 4096, 2, 2, 3).rounds, 1);
        // No more pairs than elements.
        assert_eq!(w.allreduce_plan(1 << 20, 1, 2, 2, 3).pairs, 1);
    }

    #[test]
    fn modes_and_forced_algorithms_switch_at_run_time_and_restore() {
        set_mode(Some(Mode::Flat));
        assert_eq!(mode(), Mode::Flat);
        set_mode(Some(Mode::Wan));
        assert_eq!(mode(), Mode::Wan);
        set_mode(None);
        // Back to the environment's choice (no TSUNAGI_IMPI_PEERS here: IMPI unless the
        // test's environment says otherwise).
        let env = std::env::var("TSUNAGI_WAN_COLL").ok();
        if env.is_none() && std::env::var_os("TSUNAGI_IMPI_PEERS").is_none() {
            assert_eq!(mode(), Mode::Impi);
        }
        let name = "TSUNAGI_WAN_TEST_FORCED";
        assert_eq!(forced(name), None);
        force_algorithm(name, Some("coord_rsag"));
        assert_eq!(forced(name).as_deref(), Some("coord_rsag"));
        force_algorithm(name, Some("split"));
        assert_eq!(forced(name).as_deref(), Some("split"));
        force_algorithm(name, None);
        assert_eq!(forced(name), None);
    }

    #[test]
    fn chunks_cover_the_range_in_order() {
        for n in [0usize, 1, 5, 64, 1001] {
            for m in 1..6 {
                let mut next = 0;
                for c in 0..m {
                    let (s, l) = chunk(n, m, c);
                    assert_eq!(s, next);
                    next += l;
                }
                assert_eq!(next, n);
            }
        }
    }
}
