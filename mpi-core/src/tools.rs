//! What the tools interface (MPI_T) reads: counters of the messages and bytes every kind of
//! transport moved, and of the searches of the matching queues.
//!
//! The counters are process-wide statics, so that MPI_T can read them before MPI_Init and
//! after MPI_Finalize (they then hold what was counted so far). Each has one writer at a
//! time (transports and queues are used under the runtime's lock, or by the one progress
//! thread that owns a transport), so a bump is a relaxed load and store, not a locked
//! read-modify-write: counting costs a plain add on the message path.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use tsunagi_p2p::{EventSource, Header, P2pError, Rank, ReadId, Sink, Transport, TransportCaps};

/// The transport kinds counted separately; every other transport counts as `other`.
pub const TRANSPORT_KINDS: [&str; 4] = ["self", "shm", "tcp", "other"];

pub use tsunagi_p2p::TransportCounters;

static COUNTERS: [TransportCounters; 4] = [const { TransportCounters::new() }; 4];

/// Searches of the posted-receive queues (one per arriving message).
pub static POSTED_MATCH_ATTEMPTS: AtomicU64 = AtomicU64::new(0);
/// Searches of the unexpected-message queues (one per receive or probe posted).
pub static UNEXPECTED_MATCH_ATTEMPTS: AtomicU64 = AtomicU64::new(0);

pub use tsunagi_p2p::bump;

/// The counters of the transport kind `name` ("shm", ...; unknown names give `other`).
pub fn counters(name: &str) -> &'static TransportCounters {
    let i = TRANSPORT_KINDS[..3]
        .iter()
        .position(|k| *k == name)
        .unwrap_or(3);
    &COUNTERS[i]
}

/// A transport that counts what `inner` moves; everything else is delegated.
struct Counting {
    inner: Box<dyn Transport>,
    c: &'static TransportCounters,
}

/// Have a transport count its traffic for MPI_T: itself where it can
/// ([`Transport::count_into`]), else through a counting wrapper.
pub(crate) fn counting(mut inner: Box<dyn Transport>) -> Box<dyn Transport> {
    let c = counters(inner.name());
    if inner.count_into(c) {
        return inner;
    }
    Box::new(Counting { inner, c })
}

const HEADER: u64 = tsunagi_p2p::HEADER_BYTES as u64;

impl Transport for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn eager_limit(&self) -> usize {
        self.inner.eager_limit()
    }
    fn max_payload(&self) -> usize {
        self.inner.max_payload()
    }
    fn single_copy(&self, peer: Rank) -> bool {
        self.inner.single_copy(peer)
    }
    #[inline]
    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        let sent = self.inner.try_send(peer, hdr, payload)?;
        if sent {
            bump(&self.c.msgs_sent, 1);
            bump(&self.c.bytes_sent, HEADER + payload.len() as u64);
        }
        Ok(sent)
    }
    #[inline]
    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        let c = self.c;
        self.inner.poll(&mut |peer, hdr, payload| {
            bump(&c.msgs_recvd, 1);
            bump(&c.bytes_recvd, HEADER + payload.len() as u64);
            sink(peer, hdr, payload)
        })
    }
    unsafe fn expose(&mut self, peer: Rank, addr: *const u8, len: usize) -> Result<u64, P2pError> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.expose(peer, addr, len) }
    }
    fn read_remote(&mut self, peer: Rank, addr: u64, dst: &mut [u8]) -> Result<(), P2pError> {
        self.inner.read_remote(peer, addr, dst)?;
        // A single-copy read moves a message's data without a message: count its bytes.
        bump(&self.c.bytes_recvd, dst.len() as u64);
        Ok(())
    }
    unsafe fn start_read(
        &mut self,
        peer: Rank,
        addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<ReadId, P2pError> {
        // SAFETY: the caller's contract, passed on unchanged.
        let id = unsafe { self.inner.start_read(peer, addr, dst, len)? };
        // Counted when started: the bytes come in unless the job fails.
        bump(&self.c.bytes_recvd, len as u64);
        Ok(id)
    }
    fn test_read(&mut self, id: ReadId) -> Result<bool, P2pError> {
        self.inner.test_read(id)
    }
    fn event_source(&self) -> Arc<dyn EventSource> {
        self.inner.event_source()
    }
    fn caps(&self) -> TransportCaps {
        self.inner.caps()
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.inner.next_deadline()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use tsunagi_p2p::self_transport::SelfTransport;

    #[test]
    fn counting_transport_counts_what_it_moves_and_delegates_the_rest() {
        let before_sent = counters("self").msgs_sent.load(Ordering::Relaxed);
        let before_bytes = counters("self").bytes_recvd.load(Ordering::Relaxed);
        let mut t = counting(Box::new(SelfTransport::new(0)));
        assert_eq!(t.name(), "self");
        let hdr = Header::default();
        assert!(t.try_send(0, &hdr, &[1, 2, 3]).unwrap());
        let mut got = Vec::new();
        let n = t
            .poll(&mut |_, _, p: &[u8]| got.extend_from_slice(p))
            .unwrap();
        assert_eq!((n, got.as_slice()), (1, &[1u8, 2, 3][..]));
        // Other tests in this binary may use the self transport at the same time: the
        // counters grew by at least this test's message.
        assert!(counters("self").msgs_sent.load(Ordering::Relaxed) > before_sent);
        assert!(counters("self").bytes_recvd.load(Ordering::Relaxed) >= before_bytes + HEADER + 3);
        assert!(std::ptr::eq(counters("nosuch"), counters("other")));
    }
}
