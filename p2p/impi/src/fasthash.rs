//! A fast hasher for the per-message maps of links and devices (request ids, rank pairs,
//! proc ids): the keys are small, chosen by this process or checked against its proc
//! table, so the denial-of-service resistance of std's SipHash buys nothing here, while
//! SipHash was about 30 % of the instructions of an 8-byte message through the device
//! (callgrind, `examples/impi-pingpong.rs`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hashing of the key's words (the rustc "Fx" scheme).
#[derive(Default, Clone, Copy)]
pub struct FastHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.add(i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_small_keys_spread() {
        let mut m: FastMap<(u32, u64), u64> = FastMap::default();
        for c in 0..4u32 {
            for id in 0..1000u64 {
                m.insert((c, id), u64::from(c) * 1000 + id);
            }
        }
        assert_eq!(m.len(), 4000);
        assert_eq!(m.get(&(3, 999)), Some(&3999));
        assert_eq!(m.remove(&(0, 0)), Some(0));
        assert_eq!(m.get(&(0, 0)), None);
    }
}
