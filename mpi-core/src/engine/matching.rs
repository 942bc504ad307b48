//! The matching queues of one context id: posted receives and unexpected messages, both
//! searched front to back, which gives MPI's order (the first posted receive that accepts
//! an arrival; the earliest arrival a new receive accepts).

use super::*;

/// A message that arrived before its receive was posted (or was taken by mprobe).
/// `#[doc(hidden)] pub` (like [`Posted`] and [`Queues`]) only for the matching benchmark.
#[doc(hidden)]
pub struct Arrived {
    pub(super) src: Rank,
    pub(super) tag: i32,
    pub(super) len: usize,
    pub(super) body: Body,
}

pub(super) enum Body {
    Eager {
        data: Vec<u8>,
        sync: Option<u64>,
    },
    Rts {
        cookie: u64,
        addr: Option<u64>,
    },
    /// Announced by a native device, which carries the rest itself.
    Device(DeviceArrival),
}

impl Arrived {
    /// An announced rendezvous message without a single-copy address, as an RTS over a
    /// streaming transport leaves it in the unexpected queue (the matching benchmark
    /// fills queues with these; the engine builds its entries in `arrive_matchable`).
    #[doc(hidden)]
    pub fn rendezvous(src: Rank, tag: i32, len: usize, cookie: u64) -> Arrived {
        Arrived {
            src,
            tag,
            len,
            body: Body::Rts { cookie, addr: None },
        }
    }
}

/// A posted receive: its request and the world rank (or [`ANY_WORLD`]) and tag (or
/// [`ANY_TAG`]) it accepts.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Posted {
    pub id: ReqId,
    pub src: Rank,
    pub tag: i32,
}

/// The matching queues of one context id. Both are searched front to back, which gives
/// MPI's ordering: the first posted receive that accepts an arrival, the earliest arrival
/// that a new receive accepts.
#[doc(hidden)]
#[derive(Default)]
pub struct Queues {
    pub(super) posted: VecDeque<Posted>,
    pub(super) unexpected: VecDeque<Arrived>,
}

impl Queues {
    /// A message from world rank `src` with `tag` arrived: remove and return the first
    /// posted receive that accepts it.
    #[inline]
    pub fn take_posted(&mut self, src: Rank, tag: i32) -> Option<Posted> {
        crate::tools::bump(&crate::tools::POSTED_MATCH_ATTEMPTS, 1);
        // The common case: the oldest posted receive takes it (a window of receives
        // posted before their messages).
        if let Some(front) = self.posted.front() {
            if matches(front.src, front.tag, src, tag) {
                return self.posted.pop_front();
            }
        }
        let pos = self
            .posted
            .iter()
            .position(|r| matches(r.src, r.tag, src, tag))?;
        self.posted.remove(pos)
    }

    /// Queue a receive that no unexpected message matched.
    #[inline]
    pub fn post(&mut self, p: Posted) {
        self.posted.push_back(p);
    }

    /// Position of the earliest unexpected message that a receive for world rank `src`
    /// (or [`ANY_WORLD`]) and `tag` (or [`ANY_TAG`]) accepts.
    #[inline]
    pub fn find_unexpected(&self, src: Rank, tag: i32) -> Option<usize> {
        crate::tools::bump(&crate::tools::UNEXPECTED_MATCH_ATTEMPTS, 1);
        self.unexpected
            .iter()
            .position(|a| matches(src, tag, a.src, a.tag))
    }

    /// Remove the unexpected message at `pos` (from [`Queues::find_unexpected`]).
    #[inline]
    pub fn take_unexpected(&mut self, pos: usize) -> Option<Arrived> {
        self.unexpected.remove(pos)
    }

    /// Queue a message that no posted receive accepted.
    #[inline]
    pub fn push_unexpected(&mut self, a: Arrived) {
        self.unexpected.push_back(a);
    }
}

#[inline]
pub(super) fn matches(want_src: Rank, want_tag: i32, src: Rank, tag: i32) -> bool {
    (want_src == ANY_WORLD || want_src == src) && (want_tag == ANY_TAG || want_tag == tag)
}
