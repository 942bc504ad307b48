//! Fuzz targets for every decoder that reads bytes from outside the process: the TCP
//! transport's frames and hello, the PMI-1 line codec (what a client parses, and the
//! server's handling of whatever a rank sends), and the mpirun ↔ agent control protocol.
//!
//! Each target takes arbitrary bytes and must neither panic nor hang; where a decoder has
//! an encoder, what decodes must encode back to something that decodes the same. The same
//! functions run under `cargo fuzz` (`fuzz/`, libFuzzer, nightly) and as ordinary tests
//! over the corpus in `fuzz/corpus/` plus deterministic random and mutated inputs
//! (`tests/fuzz_corpus.rs`), so CI exercises them on stable Rust too. See
//! `scripts/fuzz` for the short and long runs.

use tsunagi_core::pmi::wire::{self, LineBuffer};
use tsunagi_p2p::framing::{encode_frame_head, Frame, FrameDecoder};
use tsunagi_tcp::handshake::{self, CHALLENGE_BYTES, HELLO_BYTES, VERDICT_BYTES};
use tsunagi_tcp::JobKey;

use crate::agent::{self, Msg};
use crate::server::{Event, PmiServer};

/// A fuzz target: arbitrary bytes in, a panic on a defect.
pub type Target = fn(&[u8]);

/// The targets by name (the names of `fuzz/fuzz_targets/*.rs` and `fuzz/corpus/*`).
pub const TARGETS: &[(&str, Target)] = &[
    ("tcp_frame", tcp_frame),
    ("tcp_hello", tcp_hello),
    ("pmi_client", pmi_client),
    ("pmi_server", pmi_server),
    ("agent_protocol", agent_protocol),
];

/// Split `data` into chunks whose sizes come from its first byte, as reads from a socket
/// would cut it.
fn chunks(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((&b, rest)) => (1 + b as usize % 64, rest),
        None => (1, data),
    }
}

/// The TCP (and stream) transport's framing after the handshake.
pub fn tcp_frame(data: &[u8]) {
    const MAX: usize = 4096;
    let (step, bytes) = chunks(data);
    let mut dec = FrameDecoder::with_chunk(MAX, 256);
    let mut consumed = 0usize;
    'feed: for piece in bytes.chunks(step) {
        // Through the zero-copy path a socket uses.
        let mut piece = piece;
        while !piece.is_empty() {
            let space = dec.read_buf();
            let n = space.len().min(piece.len());
            space[..n].copy_from_slice(&piece[..n]);
            dec.commit(n);
            piece = &piece[n..];
        }
        loop {
            match dec.next_frame() {
                Ok(None) => break,
                Ok(Some(Frame::Goodbye)) => consumed += 4,
                Ok(Some(Frame::Message(h, payload))) => {
                    assert!(payload.len() <= MAX);
                    // What decodes re-encodes to the bytes it came from.
                    let head = encode_frame_head(&h, payload.len());
                    assert_eq!(&bytes[consumed..consumed + head.len()], &head[..]);
                    consumed += head.len() + payload.len();
                    assert_eq!(&bytes[consumed - payload.len()..consumed], payload);
                }
                Err(_) => break 'feed, // the stream is unusable: the link fails
            }
        }
    }
    assert!(dec.buffered() <= MAX + 4096, "decoder memory is bounded");
}

/// The TCP connection handshake: challenge (24 bytes), hello (48) and verdict (8).
pub fn tcp_hello(data: &[u8]) {
    let key = JobKey::derive("fuzz");
    let nonce = [7u8; 16];
    if let Some(b) = data.get(..HELLO_BYTES) {
        let b: [u8; HELLO_BYTES] = b.try_into().expect("48 bytes");
        let me = data.get(HELLO_BYTES).copied().unwrap_or(0) as u32;
        if let Ok(h) = handshake::check_hello(&b, &key, &nonce, me) {
            // Only a hello made with the key passes: this input carries a valid MAC.
            assert_eq!(h.to, me);
            assert_eq!(b, handshake::encode_hello(&key, &nonce, h.from, h.to));
        }
        // A well-formed hello with the key always passes.
        let from = u32::from(data[0]);
        let good = handshake::encode_hello(&key, &nonce, from, me);
        assert!(handshake::check_hello(&good, &key, &nonce, me).is_ok());
    }
    if let Some(b) = data.get(..CHALLENGE_BYTES) {
        let b: [u8; CHALLENGE_BYTES] = b.try_into().expect("24 bytes");
        if let Ok(n) = handshake::decode_challenge(&b) {
            // Bytes 6 and 7 are reserved (ignored): the rest round-trips.
            let again = handshake::encode_challenge(&n);
            assert_eq!((&again[..6], &again[8..]), (&b[..6], &b[8..]));
        }
    }
    if let Some(b) = data.get(..VERDICT_BYTES) {
        let b: [u8; VERDICT_BYTES] = b.try_into().expect("8 bytes");
        if let Some(v) = handshake::decode_verdict(&b) {
            assert_eq!(
                handshake::decode_verdict(&handshake::encode_verdict(v)),
                Some(v)
            );
        }
    }
}

/// What a PMI client reads from its launcher: lines cut anywhere, each parsed; whatever
/// parses formats back to a line that parses the same.
pub fn pmi_client(data: &[u8]) {
    let (step, bytes) = chunks(data);
    let mut lines = LineBuffer::new();
    for piece in bytes.chunks(step) {
        lines.push(piece);
        loop {
            match lines.next_line() {
                Ok(Some(line)) => {
                    if let Ok(c) = wire::parse(&line) {
                        // Formatting maps a CR or LF inside a value to a space (the wire
                        // cannot carry them), so compare after one round trip: from then
                        // on formatting and parsing are exact inverses.
                        let again = c.to_line();
                        assert!(again.ends_with('\n') && again.matches('\n').count() == 1);
                        let c2 = wire::parse(&again).expect("a formatted line parses");
                        assert_eq!(c2.cmd, c.cmd);
                        assert_eq!(c2.args.len(), c.args.len(), "{line:?}");
                        assert_eq!(wire::parse(&c2.to_line()), Ok(c2));
                    }
                }
                Ok(None) => break,
                Err(_) => return, // an over-long line: the client gives up
            }
        }
        assert!(lines.pending() <= wire::MAX_LINE + 64);
    }
}

/// The launcher's PMI server fed any lines from any of 4 ranks (the first byte of each
/// line picks the rank): no panic, every reply is a well-formed line to a real rank.
pub fn pmi_server(data: &[u8]) {
    let mut s = PmiServer::new("kvs_fuzz", 4, "(vector,(0,2,2))");
    let mut out = Vec::new();
    let mut lines = LineBuffer::new();
    lines.push(data);
    while let Ok(Some(line)) = lines.next_line() {
        let (rank, line) = match line.as_bytes().first() {
            Some(&b) => ((b % 4) as usize, line.get(1..).unwrap_or("")),
            None => (0, ""),
        };
        out.clear();
        match s.handle_line(rank, line, &mut out) {
            Some(Event::Abort { rank: r, .. })
            | Some(Event::ProtocolError { rank: r, .. })
            | Some(Event::Name { rank: r, .. }) => assert_eq!(r, rank),
            Some(Event::Spawn { rank: r, request }) => {
                assert_eq!(r, rank);
                assert!(request.total_procs() <= crate::pmi_spawn::MAX_SPAWN_PROCS);
                // A spawned group joins the server (its processes are never fed here).
                let appnums = vec![0; request.total_procs()];
                let _ = s.add_group("kvs_fuzz_s", &appnums, "", &request.preput);
            }
            None => {}
        }
        for (to, reply) in &out {
            assert!(*to < s.slots());
            assert!(
                wire::parse(reply.trim_end_matches('\n')).is_ok(),
                "{reply:?}"
            );
        }
    }
}

/// The mpirun ↔ agent control lines, both directions, and the job spec an agent builds
/// from them; the challenge-response check on arbitrary hellos.
pub fn agent_protocol(data: &[u8]) {
    let key = JobKey::derive("fuzz-agent");
    let mut lines = LineBuffer::new();
    lines.push(data);
    let mut spec = Vec::new();
    while let Ok(Some(line)) = lines.next_line() {
        if let Ok(m) = Msg::decode(&line) {
            let again = m.encode();
            assert_eq!(Msg::decode(again.trim_end_matches('\n')).as_ref(), Ok(&m));
            if let Msg::Hello { id, nonce, mac } = &m {
                let challenge = [0u8; 16];
                let good = agent::hello_mac(&key, *id, &challenge, nonce);
                assert_eq!(
                    agent::check_hello(&key, &challenge, *id, nonce, mac),
                    *mac == good
                );
            }
            spec.push(m);
        }
    }
    let _ = agent::build_spec(spec);
}
