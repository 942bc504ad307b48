//! The link model, sans IO: bytes and the current time go in, each chunk's due time comes
//! out, and a [`Pipe`] hands chunks back when they are due.
//!
//! A direction of a link serialises chunks one after another at `rate` bytes per second
//! (`None`: no limit), then each chunk travels for `delay` plus a jitter drawn uniformly from
//! `[-jitter, +jitter]`. A chunk is never due before the chunk offered before it on the same
//! pipe (jitter delays, never reorders), so a pipe per connection direction (TCP relay) or per
//! site-pair direction (TUN router) keeps byte order. Time is a `Duration` since any epoch the
//! driver chooses, so the tests run on simulated clocks.

use std::collections::VecDeque;
use std::time::Duration;

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkParams {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Each chunk's delay varies uniformly within `delay ± jitter` (never below zero).
    pub jitter: Duration,
    /// Bytes per second, or no limit.
    pub rate: Option<u64>,
    /// Bytes that may wait for serialisation before the link refuses more (a router's queue:
    /// the TUN router drops, the TCP relay stops reading).
    pub queue: usize,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate: None,
            queue: 4 << 20,
        }
    }
}

/// Parse a duration: `5ms`, `250us`, `1.5s`, `0`; a plain number is milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(v) = s.strip_suffix("us") {
        (v, 1e-6)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1.0)
    } else {
        (s, 1e-3)
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: not a duration (e.g. 5ms, 250us, 1s)"))?;
    if !(x >= 0.0 && x.is_finite()) {
        return Err(format!("{s:?}: a duration must be zero or positive"));
    }
    Ok(Duration::from_secs_f64(x * scale))
}

/// Parse a rate into bytes per second: `100Mbit`, `1Gbit`, `500kbit` (bits per second) or
/// `10MB`, `64kB` (bytes per second, decimal), or a plain number of bytes per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult): (&str, f64) = if let Some(v) = lower.strip_suffix("bit") {
        let (v, m) = si_prefix(v);
        (v, m / 8.0)
    } else if let Some(v) = lower.strip_suffix('b') {
        let (v, m) = si_prefix(v);
        (v, m)
    } else {
        (lower.as_str(), 1.0)
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{t:?}: not a rate (e.g. 100Mbit, 10MB)"))?;
    let r = x * mult;
    if !(r >= 1.0 && r.is_finite()) {
        return Err(format!("{t:?}: a rate must be at least 1 byte per second"));
    }
    Ok(r as u64)
}

fn si_prefix(v: &str) -> (&str, f64) {
    if let Some(x) = v.strip_suffix('k') {
        (x, 1e3)
    } else if let Some(x) = v.strip_suffix('m') {
        (x, 1e6)
    } else if let Some(x) = v.strip_suffix('g') {
        (x, 1e9)
    } else {
        (v, 1.0)
    }
}

/// Parse a byte count: `4MiB`, `64KiB`, `1000`.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mult) = if let Some(v) = t.strip_suffix("GiB") {
        (v, 1usize << 30)
    } else if let Some(v) = t.strip_suffix("MiB") {
        (v, 1 << 20)
    } else if let Some(v) = t.strip_suffix("KiB") {
        (v, 1 << 10)
    } else {
        (t, 1)
    };
    num.trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{t:?}: not a byte count (e.g. 4MiB, 65536)"))
}

impl LinkParams {
    /// Parse `delay=5ms,jitter=1ms,rate=100Mbit,queue=4MiB` (every key optional).
    pub fn parse(spec: &str) -> Result<LinkParams, String> {
        let mut p = LinkParams::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected KEY=VALUE"))?;
            match k.trim() {
                "delay" => p.delay = parse_duration(v)?,
                "jitter" => p.jitter = parse_duration(v)?,
                "rate" => p.rate = Some(parse_rate(v)?),
                "queue" => p.queue = parse_bytes(v)?,
                other => {
                    return Err(format!(
                        "{other:?}: unknown link key (delay, jitter, rate, queue)"
                    ))
                }
            }
        }
        Ok(p)
    }

    /// Time to serialise `len` bytes.
    pub fn tx_time(&self, len: usize) -> Duration {
        match self.rate {
            None => Duration::ZERO,
            Some(r) => Duration::from_secs_f64(len as f64 / r as f64),
        }
    }

    /// A chunk size whose serialisation takes about a millisecond (between one Ethernet
    /// payload and 64 KiB), so that a rate-limited stream arrives smoothly.
    pub fn chunk(&self) -> usize {
        match self.rate {
            None => 64 << 10,
            Some(r) => ((r / 1000) as usize).clamp(1460, 64 << 10),
        }
    }
}

/// A small deterministic generator for the jitter (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Why a pipe refused a chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The serialisation queue is full until (at least) this time.
    Full { retry_at: Duration },
}

/// One direction of a link with its chunks in flight, in order.
#[derive(Debug)]
pub struct Pipe<T> {
    params: LinkParams,
    rng: Rng,
    /// When the link finishes serialising what it has accepted.
    link_free: Duration,
    /// Due time of the last chunk accepted (the no-reordering floor).
    last_due: Duration,
    in_flight: VecDeque<(Duration, T)>,
}

impl<T> Pipe<T> {
    pub fn new(params: LinkParams, seed: u64) -> Pipe<T> {
        Pipe {
            params,
            rng: Rng::new(seed),
            link_free: Duration::ZERO,
            last_due: Duration::ZERO,
            in_flight: VecDeque::new(),
        }
    }

    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    /// Bytes still waiting for serialisation at `now`.
    pub fn backlog(&self, now: Duration) -> usize {
        match self.params.rate {
            None => 0,
            Some(r) => (self.link_free.saturating_sub(now).as_secs_f64() * r as f64) as usize,
        }
    }

    /// Offer `item` of `len` bytes at `now`: accepted with its due time, or refused when the
    /// queue would overflow (the item comes back).
    pub fn offer(&mut self, now: Duration, item: T, len: usize) -> Result<Duration, (T, Refused)> {
        let backlog = self.backlog(now);
        if backlog > 0 && backlog + len > self.params.queue {
            // Retry when enough has drained for this chunk to fit.
            let excess = backlog + len - self.params.queue;
            let retry_at = now + self.params.tx_time(excess);
            return Err((item, Refused::Full { retry_at }));
        }
        let start = self.link_free.max(now);
        self.link_free = start + self.params.tx_time(len);
        let j = self.params.jitter.as_secs_f64();
        let base = self.link_free + self.params.delay;
        let due = if j > 0.0 {
            let off = (self.rng.unit() * 2.0 - 1.0) * j;
            if off >= 0.0 {
                base + Duration::from_secs_f64(off)
            } else {
                base.saturating_sub(Duration::from_secs_f64(-off))
                    .max(self.link_free)
            }
        } else {
            base
        };
        let due = due.max(self.last_due);
        self.last_due = due;
        self.in_flight.push_back((due, item));
        Ok(due)
    }

    /// When the next chunk is due, if any is in flight.
    pub fn next_due(&self) -> Option<Duration> {
        self.in_flight.front().map(|(d, _)| *d)
    }

    /// The next chunk if it is due at `now`.
    pub fn pop_due(&mut self, now: Duration) -> Option<T> {
        match self.in_flight.front() {
            Some((d, _)) if *d <= now => self.in_flight.pop_front().map(|(_, t)| t),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn parses_specs() {
        let p = LinkParams::parse("delay=5ms,jitter=500us,rate=80Mbit,queue=1MiB").unwrap();
        assert_eq!(p.delay, ms(5));
        assert_eq!(p.jitter, Duration::from_micros(500));
        assert_eq!(p.rate, Some(10_000_000));
        assert_eq!(p.queue, 1 << 20);
        assert_eq!(parse_rate("1MB").unwrap(), 1_000_000);
        assert_eq!(parse_rate("2500").unwrap(), 2500);
        assert_eq!(parse_duration("1.5s").unwrap(), ms(1500));
        assert_eq!(parse_duration("7").unwrap(), ms(7));
        assert!(LinkParams::parse("delay=-1ms").is_err());
        assert!(LinkParams::parse("speed=1").is_err());
        assert!(LinkParams::parse("delay").is_err());
        assert!(parse_rate("0bit").is_err());
        assert!(parse_bytes("4XB").is_err());
    }

    #[test]
    fn pure_delay_delivers_each_chunk_after_the_delay() {
        let mut p = Pipe::new(LinkParams::parse("delay=10ms").unwrap(), 1);
        assert_eq!(p.offer(ms(0), "a", 100).unwrap(), ms(10));
        assert_eq!(p.offer(ms(3), "b", 100).unwrap(), ms(13));
        assert_eq!(p.pop_due(ms(9)), None);
        assert_eq!(p.pop_due(ms(10)), Some("a"));
        assert_eq!(p.pop_due(ms(12)), None);
        assert_eq!(p.next_due(), Some(ms(13)));
        assert_eq!(p.pop_due(ms(20)), Some("b"));
        assert!(p.is_empty());
    }

    #[test]
    fn rate_serialises_chunks_back_to_back() {
        // 1 MB/s: 1000 bytes take 1 ms on the wire.
        let mut p = Pipe::new(LinkParams::parse("delay=5ms,rate=1MB").unwrap(), 1);
        assert_eq!(p.offer(ms(0), 0, 1000).unwrap(), ms(6));
        assert_eq!(p.offer(ms(0), 1, 1000).unwrap(), ms(7));
        assert_eq!(p.offer(ms(0), 2, 2000).unwrap(), ms(9));
        // An idle link starts again from `now`.
        assert_eq!(p.offer(ms(100), 3, 1000).unwrap(), ms(106));
        // Throughput of a long stream: 1 MB arrives 1 s + delay after it starts.
        let mut q = Pipe::new(
            LinkParams::parse("delay=5ms,rate=1MB,queue=2MiB").unwrap(),
            1,
        );
        let mut last = Duration::ZERO;
        for i in 0..1000 {
            last = q.offer(ms(0), i, 1000).unwrap();
        }
        assert_eq!(last, ms(1005));
    }

    #[test]
    fn a_full_queue_refuses_and_says_when_to_retry() {
        let mut p = Pipe::new(LinkParams::parse("rate=1MB,queue=3000").unwrap(), 1);
        p.offer(ms(0), 0, 1000).unwrap();
        p.offer(ms(0), 1, 1000).unwrap();
        p.offer(ms(0), 2, 1000).unwrap();
        let Err((item, Refused::Full { retry_at })) = p.offer(ms(0), 3, 1000) else {
            panic!("accepted beyond the queue")
        };
        assert_eq!(item, 3);
        assert_eq!(retry_at, ms(1));
        assert!(p.offer(retry_at, 3, 1000).is_ok());
    }

    #[test]
    fn jitter_varies_the_delay_but_never_reorders() {
        let params = LinkParams::parse("delay=10ms,jitter=4ms").unwrap();
        let mut p = Pipe::new(params, 42);
        let mut dues = Vec::new();
        // Dense traffic: a chunk every 100 µs against ±4 ms of jitter.
        for i in 0..2000u64 {
            let now = Duration::from_micros(i * 100);
            let due = p.offer(now, i, 100).unwrap();
            let delay = due - now;
            assert!(
                delay >= ms(6) && delay <= ms(14) + Duration::from_micros(100),
                "{delay:?}"
            );
            dues.push(due);
        }
        assert!(dues.windows(2).all(|w| w[0] <= w[1]), "reordered");
        // Delivered strictly in offer order.
        let mut got = Vec::new();
        let mut t = Duration::ZERO;
        while !p.is_empty() {
            t = p.next_due().unwrap();
            while let Some(i) = p.pop_due(t) {
                got.push(i);
            }
        }
        assert!(t > ms(200));
        assert_eq!(got, (0..2000).collect::<Vec<_>>());
        // With chunks spaced wider than the jitter range the delays vary and average near
        // the setting (dense traffic piles up at the upper end: that is the price of order).
        let mut p = Pipe::new(params, 7);
        let delays: Vec<f64> = (0..1000u64)
            .map(|i| {
                let now = ms(i * 10);
                (p.offer(now, i, 100).unwrap() - now).as_secs_f64()
            })
            .collect();
        let mean = delays.iter().sum::<f64>() / delays.len() as f64;
        let min = delays.iter().cloned().fold(1.0, f64::min);
        let max = delays.iter().cloned().fold(0.0, f64::max);
        assert!(max - min > 0.006, "jitter range {min}..{max}");
        assert!((mean - 0.010).abs() < 0.0005, "mean {mean}");
    }
}
