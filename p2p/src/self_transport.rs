//! The self path: messages a rank sends to itself, kept in a process-local queue.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::futex::LocalDoorbell;
use crate::{EventSource, Header, P2pError, Rank, Sink, Transport, TransportCounters};

/// Where an uncounted self transport counts (nobody reads it).
static UNCOUNTED: TransportCounters = TransportCounters::new();

/// Loopback to the calling rank. Unbounded (a rank that sends to itself without receiving
/// holds the data in its own memory, as in every MPI); large messages still use rendezvous,
/// with `read_remote` a plain copy inside the address space.
pub struct SelfTransport {
    me: Rank,
    queue: VecDeque<(Header, Vec<u8>)>,
    bell: Arc<LocalDoorbell>,
    counters: &'static TransportCounters,
}

impl SelfTransport {
    /// The self path of rank `me`.
    pub fn new(me: Rank) -> SelfTransport {
        SelfTransport {
            me,
            queue: VecDeque::new(),
            bell: LocalDoorbell::new(),
            counters: &UNCOUNTED,
        }
    }
}

impl Transport for SelfTransport {
    fn name(&self) -> &'static str {
        "self"
    }
    fn eager_limit(&self) -> usize {
        64 * 1024
    }
    fn max_payload(&self) -> usize {
        1 << 20
    }
    fn single_copy(&self, peer: Rank) -> bool {
        peer == self.me
    }
    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        if peer != self.me {
            return Err(P2pError::Unsupported(format!(
                "self transport of rank {} asked to reach rank {peer}",
                self.me
            )));
        }
        self.queue.push_back((*hdr, payload.to_vec()));
        self.bell.ring();
        self.counters.sent(payload.len());
        Ok(true)
    }
    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        // Deliver only what was queued before this call: a handler may send to self again.
        let n = self.queue.len();
        for _ in 0..n {
            let (h, p) = self.queue.pop_front().expect("counted");
            self.counters.recvd(p.len());
            sink(self.me, &h, &p);
        }
        Ok(n)
    }
    fn read_remote(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        if peer != self.me {
            return Err(P2pError::Unsupported("self read of another rank".into()));
        }
        // SAFETY: the request layer hands out `remote_addr` as the address of a live send
        // buffer of at least `dst.len()` bytes in this same process, kept alive until the
        // rendezvous completes; it cannot overlap `dst` (a receive buffer). `copy` tolerates
        // overlap anyway.
        unsafe { std::ptr::copy(remote_addr as *const u8, dst.as_mut_ptr(), dst.len()) };
        self.counters.read(dst.len());
        Ok(())
    }
    fn event_source(&self) -> Arc<dyn EventSource> {
        self.bell.clone()
    }
    fn count_into(&mut self, c: &'static TransportCounters) -> bool {
        self.counters = c;
        true
    }
}
