//! A simulated datagram network with impairments, for tests: loss, duplication, reordering
//! (random extra delay), corruption (one flipped bit) and a fixed one-way delay. Time is
//! the caller's; randomness is a seeded xorshift, so every run of a test is the same.

use std::time::{Duration, Instant};

/// A small deterministic random generator (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// What the simulated network does to datagrams.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impairments {
    pub loss: f64,
    pub duplicate: f64,
    pub corrupt: f64,
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Extra random delay in `0..jitter`: datagrams overtake each other.
    pub jitter: Duration,
}

/// Datagrams in flight, each with its destination and arrival time.
pub struct LossyNet {
    pub imp: Impairments,
    rng: Rng,
    in_flight: Vec<(Instant, u64, usize, Vec<u8>)>,
    /// Counters: sent, dropped, duplicated, corrupted.
    pub sent: u64,
    pub dropped: u64,
    /// Bytes of the dropped datagrams.
    pub dropped_bytes: u64,
    pub duplicated: u64,
    pub corrupted: u64,
}

impl LossyNet {
    pub fn new(imp: Impairments, seed: u64) -> LossyNet {
        LossyNet {
            imp,
            rng: Rng::new(seed),
            in_flight: Vec::new(),
            sent: 0,
            dropped: 0,
            dropped_bytes: 0,
            duplicated: 0,
            corrupted: 0,
        }
    }

    fn delay(&mut self) -> Duration {
        let j = self.imp.jitter.as_nanos() as u64;
        self.imp.delay + Duration::from_nanos(if j > 0 { self.rng.below(j) } else { 0 })
    }

    /// Send a datagram to endpoint `to`.
    pub fn send(&mut self, now: Instant, to: usize, mut d: Vec<u8>) {
        self.sent += 1;
        if self.rng.chance(self.imp.loss) {
            self.dropped += 1;
            self.dropped_bytes += d.len() as u64;
            return;
        }
        if self.rng.chance(self.imp.corrupt) && !d.is_empty() {
            let bit = self.rng.below(d.len() as u64 * 8);
            d[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.corrupted += 1;
        }
        if self.rng.chance(self.imp.duplicate) {
            self.duplicated += 1;
            let at = now + self.delay();
            self.in_flight.push((at, self.sent, to, d.clone()));
        }
        let at = now + self.delay();
        self.in_flight.push((at, self.sent, to, d));
    }

    /// Take every datagram that has arrived by `now`, in arrival order.
    pub fn arrived(&mut self, now: Instant) -> Vec<(usize, Vec<u8>)> {
        let mut due: Vec<(Instant, u64, usize, Vec<u8>)> = Vec::new();
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].0 <= now {
                due.push(self.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        // By arrival time, then by send order (equal delays keep their order).
        due.sort_by_key(|d| (d.0, d.1));
        due.into_iter().map(|(_, _, to, d)| (to, d)).collect()
    }

    /// Datagrams still travelling.
    pub fn pending(&self) -> usize {
        self.in_flight.len()
    }
}
