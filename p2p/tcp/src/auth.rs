//! Proofs of knowing a shared secret without sending it: HMAC-SHA256 over a domain label
//! and fresh nonces (challenge-response).
//!
//! Used by mpirun and its per-host agents (`tsunagi-launcher`): each side sends a random
//! nonce, each answers with the MAC of both nonces under the agent key, so the key never
//! travels and a recorded answer is worthless for the next connection. HMAC and SHA-256
//! come from the RustCrypto `hmac` and `sha2` crates (widely used, audited, constant-time
//! tag comparison) rather than a hand-rolled hash.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 16;
/// Bytes of a MAC.
pub const MAC_BYTES: usize = 32;

/// A fresh random nonce from the kernel (getrandom). Errors when the kernel has no
/// randomness to give, rather than falling back to something guessable.
pub fn nonce() -> Result<[u8; NONCE_BYTES], String> {
    let mut n = [0u8; NONCE_BYTES];
    let mut got = 0;
    while got < n.len() {
        // SAFETY: getrandom writes at most `n.len() - got` bytes into the rest of `n`.
        let r = unsafe { libc::getrandom(n[got..].as_mut_ptr().cast(), n.len() - got, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("getrandom: {e}"));
        }
        got += r as usize;
    }
    Ok(n)
}

fn hmac_of(key: &[u8], label: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256>>::new_from_slice(key).expect("HMAC takes keys of any length");
    // Length-prefixed fields: no two different (label, parts) lists give the same input.
    for p in std::iter::once(label.as_bytes()).chain(parts.iter().copied()) {
        m.update(&(p.len() as u64).to_le_bytes());
        m.update(p);
    }
    m
}

/// HMAC-SHA256 under `key` of `label` and `parts`.
pub fn mac(key: &[u8], label: &str, parts: &[&[u8]]) -> [u8; MAC_BYTES] {
    hmac_of(key, label, parts).finalize().into_bytes().into()
}

/// Whether `tag` is the MAC of `label` and `parts` under `key` (compared in constant time).
pub fn verify(key: &[u8], label: &str, parts: &[&[u8]], tag: &[u8]) -> bool {
    hmac_of(key, label, parts).verify_slice(tag).is_ok()
}

/// Lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parse hex of exactly `N` bytes.
pub fn from_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2: HMAC-SHA256 with key "Jefe".
    #[test]
    fn hmac_sha256_known_answer() {
        let mut m = <Hmac<Sha256>>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            to_hex(&m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn macs_bind_key_label_and_every_part() {
        let (k, n1, n2) = (b"secret".as_slice(), [1u8; 16], [2u8; 16]);
        let t = mac(k, "hello", &[&n1, &n2]);
        assert!(verify(k, "hello", &[&n1, &n2], &t));
        assert!(!verify(b"secreT", "hello", &[&n1, &n2], &t));
        assert!(!verify(k, "proof", &[&n1, &n2], &t));
        assert!(!verify(k, "hello", &[&n2, &n1], &t));
        assert!(!verify(k, "hello", &[&n1, &n2], &t[..31]));
        // Moving a byte between parts changes the MAC (length prefixes).
        assert_ne!(mac(k, "x", &[b"ab", b"c"]), mac(k, "x", &[b"a", b"bc"]));
        let a = nonce().unwrap();
        assert_ne!(a, nonce().unwrap());
        assert_eq!(from_hex::<16>(&to_hex(&a)), Some(a));
        assert_eq!(from_hex::<16>("zz"), None);
        assert_eq!(from_hex::<2>("0g00"), None);
    }
}
