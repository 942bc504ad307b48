//! The fuzz targets' checks on stable Rust: every committed corpus file, then
//! pseudo-random inputs and mutations of the corpus from a fixed-seed PRNG (so a failure
//! reproduces). `cargo +nightly fuzz run` (scripts/fuzz-impi) explores further.

use std::path::PathBuf;

use tsunagi_impi::fuzzing::{packet_decoder, startup_decoder};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let v: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(
        v.len() >= 5,
        "{}: the committed seeds are missing",
        dir.display()
    );
    v
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random bytes, and corpus entries with bytes flipped, fields set to extremes, pieces cut
/// or repeated.
fn inputs(seeds: &[Vec<u8>], n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if i % 4 == 0 {
            let len = rng.below(400);
            out.push((0..len).map(|_| rng.next() as u8).collect());
            continue;
        }
        let mut v = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            match rng.below(5) {
                0 if !v.is_empty() => {
                    let at = rng.below(v.len());
                    v[at] ^= 1 << rng.below(8);
                }
                1 if v.len() >= 4 => {
                    let at = rng.below(v.len() - 3) & !3;
                    let x = [
                        [0xff; 4],
                        [0x7f, 0xff, 0xff, 0xff],
                        [0, 0, 0, 0],
                        [0x80, 0, 0, 0],
                    ][rng.below(4)];
                    v[at..at + 4].copy_from_slice(&x);
                }
                2 if !v.is_empty() => v.truncate(rng.below(v.len())),
                3 => {
                    let other = seeds[rng.below(seeds.len())].clone();
                    v.extend_from_slice(&other);
                }
                _ => v.push(rng.next() as u8),
            }
        }
        out.push(v);
    }
    out
}

#[test]
fn packet_decoder_corpus_and_random_inputs() {
    let seeds = corpus("packet_decoder");
    for s in &seeds {
        packet_decoder(s);
    }
    for v in inputs(&seeds, 20_000, 0x1234_5678) {
        packet_decoder(&v);
    }
}

#[test]
fn startup_decoder_corpus_and_random_inputs() {
    let seeds = corpus("startup_decoder");
    for s in &seeds {
        startup_decoder(s);
    }
    for v in inputs(&seeds, 20_000, 0x8765_4321) {
        startup_decoder(&v);
    }
}
