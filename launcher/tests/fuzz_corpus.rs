//! The fuzz targets (`tsunagi_launcher::fuzzing`) as ordinary tests, so CI runs them on
//! stable Rust: every input of the corpus in `fuzz/corpus/<target>/`, each with a series of
//! deterministic mutations (bit flips, truncations, splices, duplications), and random
//! inputs from a fixed seed. `cargo fuzz` (nightly, `scripts/fuzz`) explores further and
//! adds what it finds to the same corpus.

use std::path::PathBuf;

use tsunagi_launcher::fuzzing::TARGETS;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn mutate(rng: &mut Rng, seed: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => v.truncate(rng.below(v.len() + 1)),
            3 => {
                let other = &pool[rng.below(pool.len())];
                let cut = rng.below(other.len() + 1);
                let at = rng.below(v.len() + 1);
                v.splice(at..at, other[cut..].iter().copied());
            }
            4 if !v.is_empty() => {
                let a = rng.below(v.len());
                let b = a + rng.below(v.len() - a);
                let piece = v[a..=b.min(v.len() - 1)].to_vec();
                v.extend_from_slice(&piece);
            }
            _ => {
                let at = rng.below(v.len() + 1);
                let special: &[u8] = match rng.below(5) {
                    0 => b"\n",
                    1 => b" ",
                    2 => b"=",
                    3 => &[0xff, 0xff, 0xff, 0xff],
                    _ => b"\\",
                };
                v.splice(at..at, special.iter().copied());
            }
        }
    }
    v
}

#[test]
fn fuzz_targets_over_corpus_and_random_inputs() {
    let runs: usize = std::env::var("TSUNAGI_FUZZ_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    for (name, target) in TARGETS {
        let dir = corpus_dir(name);
        let mut corpus: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| std::fs::read(e.path()).unwrap())
            .collect();
        assert!(
            corpus.len() >= 3,
            "{name}: the corpus needs seeds ({})",
            dir.display()
        );
        corpus.sort();
        for input in &corpus {
            target(input);
        }
        let mut rng = Rng(0x7473_756e_6167_6921 ^ name.len() as u64);
        for i in 0..runs {
            let input = if i % 4 == 3 {
                (0..rng.below(300)).map(|_| rng.next() as u8).collect()
            } else {
                let seed = &corpus[rng.below(corpus.len())];
                mutate(&mut rng, seed, &corpus)
            };
            // A panic here names the target; the input is in the message for reproducing.
            let r = std::panic::catch_unwind(|| target(&input));
            if r.is_err() {
                panic!("fuzz target {name} failed on input {input:?}");
            }
        }
    }
}
