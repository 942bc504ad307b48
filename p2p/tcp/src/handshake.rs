//! The connection handshake, sans IO: the acceptor's challenge, the hello a connector
//! answers with, the acceptor's verdict, and the rule that resolves simultaneous connects.
//!
//! ```text
//! acceptor  → connector  challenge (24 bytes): "TSGC" version byte-order 0 0 | nonce (16)
//! connector → acceptor   hello (48 bytes):     "TSGT" version byte-order 0 0 |
//!                                              from rank (u32 LE) | to rank (u32 LE) |
//!                                              HMAC-SHA256(job key, nonce, from, to) (32)
//! acceptor  → connector  verdict (8 bytes):    "TSGA" verdict 0 0 0
//! ```
//!
//! The hello proves knowledge of the job key without carrying it: someone who watches a
//! connection learns a MAC that is worthless for the next one (a fresh nonce each time).
//!
//! After an *accept* verdict both directions carry the shared stream frames
//! (`tsunagi_p2p::framing`). The connector sends nothing but the hello until the verdict
//! came, so a rejected connection never carried a message and nothing has to be replayed.
//!
//! # Simultaneous connects
//!
//! One connection per pair of ranks. When both ranks connect at once, the connection made
//! by the **lower** rank wins, decided independently by both sides from state they have
//! (see [`resolve`]):
//!
//! * an acceptor with no link to the connector accepts;
//! * an acceptor whose own connect to the connector is still waiting for its verdict
//!   accepts if the connector has the lower rank (and abandons its own connection, whose
//!   queued messages then go over the accepted one), else rejects;
//! * an acceptor with an established link rejects (a stale or duplicate connection).
//!
//! Both sides apply the same total order, so exactly one connection survives: the higher
//! rank's attempt is rejected at the lower rank, and the lower rank's is accepted at the
//! higher rank whichever of the two hellos each side sees first.

use std::fmt;

use tsunagi_p2p::Rank;

use crate::auth::{self, NONCE_BYTES};
use crate::config::JobKey;

/// Bytes of a challenge.
pub const CHALLENGE_BYTES: usize = 24;
/// Bytes of a hello.
pub const HELLO_BYTES: usize = 48;
const CHALLENGE_MAGIC: [u8; 4] = *b"TSGC";
const HELLO_LABEL: &str = "tsunagi tcp hello v2";
/// Bytes of a verdict.
pub const VERDICT_BYTES: usize = 8;
const HELLO_MAGIC: [u8; 4] = *b"TSGT";
const VERDICT_MAGIC: [u8; 4] = *b"TSGA";
/// Wire version; bumped on incompatible changes (2: challenge and HMAC instead of the key).
pub const VERSION: u8 = 2;
/// 1 on little-endian hosts, 2 on big-endian ones: the message header travels in native byte
/// order (`Header::to_bytes`), so both ends must share it; a mismatch is refused clearly
/// rather than corrupting messages.
const BYTE_ORDER: u8 = if cfg!(target_endian = "little") { 1 } else { 2 };

/// A decoded hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub from: Rank,
    pub to: Rank,
}

/// Why a connection was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a Tsunagi TCP connection at all.
    BadMagic,
    /// Another wire version.
    Version(u8),
    /// A host of the other byte order.
    ByteOrder,
    /// The job key does not match: another job, or not a rank at all.
    WrongKey,
    /// The hello names another destination rank.
    WrongRank { to: Rank },
    /// The sender is not a peer this transport reaches.
    UnknownPeer(Rank),
    /// The connection closed or failed before its hello was complete.
    Incomplete,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::BadMagic => f.write_str("not a Tsunagi connection (bad magic)"),
            Refusal::Version(v) => write!(f, "wire version {v}, expected {VERSION}"),
            Refusal::ByteOrder => f.write_str("peer has the other byte order"),
            Refusal::WrongKey => f.write_str("wrong job key"),
            Refusal::WrongRank { to } => write!(f, "hello addressed to rank {to}"),
            Refusal::UnknownPeer(r) => write!(f, "rank {r} is not a peer of this transport"),
            Refusal::Incomplete => {
                f.write_str("no complete hello (closed, too slow, or too many waiting)")
            }
        }
    }
}

/// A nonce of a challenge.
pub type Nonce = [u8; NONCE_BYTES];

/// The challenge an acceptor sends as soon as it accepted a connection.
pub fn encode_challenge(nonce: &Nonce) -> [u8; CHALLENGE_BYTES] {
    let mut b = [0u8; CHALLENGE_BYTES];
    b[..4].copy_from_slice(&CHALLENGE_MAGIC);
    b[4] = VERSION;
    b[5] = BYTE_ORDER;
    b[8..].copy_from_slice(nonce);
    b
}

/// The nonce of a challenge, or why the acceptor is not a rank we can talk to.
pub fn decode_challenge(b: &[u8; CHALLENGE_BYTES]) -> Result<Nonce, Refusal> {
    if b[..4] != CHALLENGE_MAGIC {
        return Err(Refusal::BadMagic);
    }
    if b[4] != VERSION {
        return Err(Refusal::Version(b[4]));
    }
    if b[5] != BYTE_ORDER {
        return Err(Refusal::ByteOrder);
    }
    Ok(b[8..].try_into().expect("16 bytes"))
}

/// The hello rank `from` sends to rank `to` in answer to `nonce`.
pub fn encode_hello(key: &JobKey, nonce: &Nonce, from: Rank, to: Rank) -> [u8; HELLO_BYTES] {
    let mut b = [0u8; HELLO_BYTES];
    b[..4].copy_from_slice(&HELLO_MAGIC);
    b[4] = VERSION;
    b[5] = BYTE_ORDER;
    b[8..12].copy_from_slice(&from.to_le_bytes());
    b[12..16].copy_from_slice(&to.to_le_bytes());
    let (f, t) = (from.to_le_bytes(), to.to_le_bytes());
    b[16..48].copy_from_slice(&auth::mac(&key.0, HELLO_LABEL, &[nonce, &f, &t]));
    b
}

/// Decode a hello answering our challenge `nonce` and check it against our key and rank.
pub fn check_hello(
    b: &[u8; HELLO_BYTES],
    key: &JobKey,
    nonce: &Nonce,
    me: Rank,
) -> Result<Hello, Refusal> {
    if b[..4] != HELLO_MAGIC {
        return Err(Refusal::BadMagic);
    }
    if b[4] != VERSION {
        return Err(Refusal::Version(b[4]));
    }
    if b[5] != BYTE_ORDER {
        return Err(Refusal::ByteOrder);
    }
    let from = Rank::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    let to = Rank::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
    let (f, t) = (from.to_le_bytes(), to.to_le_bytes());
    // Constant-time comparison (hmac's verify).
    if !auth::verify(&key.0, HELLO_LABEL, &[nonce, &f, &t], &b[16..48]) {
        return Err(Refusal::WrongKey);
    }
    if to != me {
        return Err(Refusal::WrongRank { to });
    }
    Ok(Hello { from, to })
}

/// The acceptor's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// This connection is the pair's link.
    Accept,
    /// The pair's link is (or will be) the other connection.
    Reject,
}

pub fn encode_verdict(v: Verdict) -> [u8; VERDICT_BYTES] {
    let mut b = [0u8; VERDICT_BYTES];
    b[..4].copy_from_slice(&VERDICT_MAGIC);
    b[4] = match v {
        Verdict::Accept => 1,
        Verdict::Reject => 2,
    };
    b
}

pub fn decode_verdict(b: &[u8; VERDICT_BYTES]) -> Option<Verdict> {
    if b[..4] != VERDICT_MAGIC {
        return None;
    }
    match b[4] {
        1 => Some(Verdict::Accept),
        2 => Some(Verdict::Reject),
        _ => None,
    }
}

/// What the acceptor knows about its own link to the connector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// No connection and no attempt (or an attempt that has not sent its hello yet, or one
    /// that failed).
    None,
    /// Our own connection's hello is out, its verdict not in.
    Connecting,
    /// A link is established.
    Established,
}

/// Accept or reject a hello from `from` at rank `me`, given our link to `from`. See the
/// module docs for why this rule leaves exactly one connection per pair.
pub fn resolve(me: Rank, from: Rank, ours: LinkState) -> Verdict {
    match ours {
        LinkState::None => Verdict::Accept,
        LinkState::Connecting if from < me => Verdict::Accept,
        LinkState::Connecting => Verdict::Reject,
        LinkState::Established => Verdict::Reject,
    }
}

/// Collects the fixed-size handshake bytes of one connection. Reads ask for exactly the
/// missing bytes, so nothing of the frames behind the handshake is consumed here.
#[derive(Clone, Debug)]
pub struct Fixed<const N: usize> {
    buf: [u8; N],
    got: usize,
}

impl<const N: usize> Default for Fixed<N> {
    fn default() -> Self {
        Fixed {
            buf: [0; N],
            got: 0,
        }
    }
}

impl<const N: usize> Fixed<N> {
    /// Space for the missing bytes.
    pub fn want(&mut self) -> &mut [u8] {
        &mut self.buf[self.got..]
    }
    /// `n` bytes were written into `want()`; the whole item once complete.
    pub fn commit(&mut self, n: usize) -> Option<&[u8; N]> {
        self.got += n;
        assert!(self.got <= N);
        (self.got == N).then_some(&self.buf)
    }
    pub fn is_empty(&self) -> bool {
        self.got == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_refusals() {
        let key = JobKey::derive("job");
        let n = auth::nonce().unwrap();
        assert_eq!(decode_challenge(&encode_challenge(&n)), Ok(n));
        let h = encode_hello(&key, &n, 3, 5);
        assert_eq!(check_hello(&h, &key, &n, 5), Ok(Hello { from: 3, to: 5 }));
        // The key is not on the wire.
        assert!(!h.windows(16).any(|w| w == key.0));
        assert_eq!(
            check_hello(&h, &JobKey::derive("other"), &n, 5),
            Err(Refusal::WrongKey)
        );
        // A hello recorded for one challenge is worthless for the next.
        let n2 = auth::nonce().unwrap();
        assert_eq!(check_hello(&h, &key, &n2, 5), Err(Refusal::WrongKey));
        // The ranks are bound by the MAC: a changed `from` is a wrong key, not a new rank.
        let mut bad = h;
        bad[8] = 4;
        assert_eq!(check_hello(&bad, &key, &n, 5), Err(Refusal::WrongKey));
        assert_eq!(
            check_hello(&h, &key, &n, 4),
            Err(Refusal::WrongRank { to: 5 })
        );
        let mut bad = h;
        bad[0] = b'G';
        assert_eq!(check_hello(&bad, &key, &n, 5), Err(Refusal::BadMagic));
        let mut bad = h;
        bad[4] = 9;
        assert_eq!(check_hello(&bad, &key, &n, 5), Err(Refusal::Version(9)));
        let mut bad = h;
        bad[5] ^= 3;
        assert_eq!(check_hello(&bad, &key, &n, 5), Err(Refusal::ByteOrder));
        let mut http = [b' '; HELLO_BYTES];
        http[..14].copy_from_slice(b"GET / HTTP/1.1");
        assert_eq!(check_hello(&http, &key, &n, 5), Err(Refusal::BadMagic));
        let mut c = encode_challenge(&n);
        c[4] = 1;
        assert_eq!(decode_challenge(&c), Err(Refusal::Version(1)));
        c[0] = b'X';
        assert_eq!(decode_challenge(&c), Err(Refusal::BadMagic));
    }

    #[test]
    fn verdicts() {
        for v in [Verdict::Accept, Verdict::Reject] {
            assert_eq!(decode_verdict(&encode_verdict(v)), Some(v));
        }
        assert_eq!(decode_verdict(&[0; 8]), None);
        let mut b = encode_verdict(Verdict::Accept);
        b[4] = 7;
        assert_eq!(decode_verdict(&b), None);
    }

    /// Simulate every interleaving of two ranks' hellos and verdicts: exactly one
    /// connection must end up accepted, and both sides must agree which.
    #[test]
    fn simultaneous_connect_leaves_exactly_one_link() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum Side {
            Idle,
            Connecting,
            WaitingForPeer,
            Established(Rank), // the connector of the link
        }
        // Events: 0 = a starts connecting, 1 = b starts connecting, 2 = a's hello arrives
        // at b, 3 = b's hello arrives at a (each only after the sender started).
        fn run(order: &[usize], both: bool) -> (Side, Side) {
            let (a, b): (Rank, Rank) = (1, 4);
            let mut sa = Side::Connecting; // a always connects
            let mut sb = Side::Idle;
            let mut b_started = false;
            let mut pending_verdicts: Vec<(Rank, Verdict)> = Vec::new(); // (connector, v)
            let st = |s: Side| match s {
                Side::Idle | Side::WaitingForPeer => LinkState::None,
                Side::Connecting => LinkState::Connecting,
                Side::Established(_) => LinkState::Established,
            };
            for &ev in order {
                match ev {
                    // b only connects if it has no link yet.
                    1 if both && sb == Side::Idle => {
                        sb = Side::Connecting;
                        b_started = true;
                    }
                    2 => {
                        let v = resolve(b, a, st(sb));
                        if v == Verdict::Accept {
                            sb = Side::Established(a);
                        }
                        pending_verdicts.push((a, v));
                    }
                    3 if b_started => {
                        let v = resolve(a, b, st(sa));
                        if v == Verdict::Accept {
                            sa = Side::Established(b);
                        }
                        pending_verdicts.push((b, v));
                    }
                    _ => {}
                }
            }
            // Deliver verdicts to connectors that still wait for them.
            for (connector, v) in pending_verdicts {
                let s = if connector == a { &mut sa } else { &mut sb };
                if *s == Side::Connecting {
                    *s = match v {
                        Verdict::Accept => Side::Established(connector),
                        Verdict::Reject => Side::WaitingForPeer,
                    };
                }
            }
            (sa, sb)
        }
        let perms: [[usize; 3]; 6] = [
            [1, 2, 3],
            [1, 3, 2],
            [2, 1, 3],
            [2, 3, 1],
            [3, 1, 2],
            [3, 2, 1],
        ];
        for both in [false, true] {
            for p in perms {
                let (sa, sb) = run(&p, both);
                assert_eq!(sa, sb, "order {p:?}: sides disagree");
                assert!(matches!(sa, Side::Established(_)), "order {p:?}: {sa:?}");
            }
        }
        // When both really race, the lower rank's connection is the one kept.
        assert_eq!(run(&[1, 2, 3], true).0, Side::Established(1));
        assert_eq!(resolve(4, 1, LinkState::Connecting), Verdict::Accept);
        assert_eq!(resolve(1, 4, LinkState::Connecting), Verdict::Reject);
        assert_eq!(resolve(1, 4, LinkState::Established), Verdict::Reject);
        assert_eq!(resolve(1, 4, LinkState::None), Verdict::Accept);
    }

    #[test]
    fn fixed_collects_exact_bytes() {
        let mut f = Fixed::<4>::default();
        assert!(f.is_empty());
        f.want()[..1].copy_from_slice(b"a");
        assert!(f.commit(1).is_none());
        assert_eq!(f.want().len(), 3);
        f.want().copy_from_slice(b"bcd");
        assert_eq!(f.commit(3), Some(b"abcd"));
    }
}
