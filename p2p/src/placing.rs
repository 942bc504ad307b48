//! Receiving into the posted buffer (optional part of the [`Transport`](crate::Transport)
//! contract; seed 002's vendor-MPI layer): a transport that learns of a message before its
//! payload has come in (the head of a long message whose rest is still on its way) asks
//! the request layer whether a receive is posted for it; if one is, the transport has the
//! rest land straight in that receive's buffer instead of in a buffer of its own that the
//! request layer then copies out.
//!
//! The request layer keeps matching: the transport shows it the message's [`Header`] (opaque
//! to the transport) through [`Arrivals::claim`] and gets back a [`Placement`] or nothing.
//! A transport that never claims (the default [`Transport::poll_placing`](crate::Transport::poll_placing))
//! behaves exactly as with [`Transport::poll`](crate::Transport::poll).

use crate::{Header, Rank};

/// Where the payload of a claimed message goes: the buffer of the receive it matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The payload's first byte goes here.
    pub dst: *mut u8,
    /// Bytes writable from `dst`: the whole payload (`hdr.len`), never less.
    pub len: usize,
    /// Names the receive in [`Arrivals::placed`].
    pub token: u64,
}

/// The request layer's side of [`Transport::poll_placing`](crate::Transport::poll_placing).
///
/// Per peer, `deliver` and `claim` calls come in the order the peer sent the messages
/// (the transport's ordering contract); `placed` may come later, in any order, once the
/// claimed payload is in.
pub trait Arrivals {
    /// A message arrived whole (what [`Sink`](crate::Sink) is called with by `poll`).
    fn deliver(&mut self, src: Rank, hdr: &Header, payload: &[u8]);

    /// A message from `src` with `hdr` is arriving and its payload is not in yet: if a
    /// posted receive takes it and can hold the whole payload in one contiguous buffer, the
    /// message is matched now (as `deliver` would have matched it) and its buffer is
    /// returned; else `None`, and the transport delivers the message later as usual.
    ///
    /// After `Some(p)`, the request layer keeps `p.dst..p.dst + p.len` valid and touches
    /// it not until `placed(src, p.token)`; the transport must write all `hdr.len` payload
    /// bytes there and then call `placed` exactly once (a transport error instead ends the
    /// job). The transport must not write beyond `p.len` bytes.
    fn claim(&mut self, src: Rank, hdr: &Header) -> Option<Placement>;

    /// The payload of the message claimed with `token` is all in its buffer.
    fn placed(&mut self, src: Rank, token: u64);
}

/// [`Arrivals`] over a [`Sink`](crate::Sink): never claims (the default poll).
pub struct SinkArrivals<'a, 'b>(pub &'a mut crate::Sink<'b>);

impl Arrivals for SinkArrivals<'_, '_> {
    #[inline]
    fn deliver(&mut self, src: Rank, hdr: &Header, payload: &[u8]) {
        (self.0)(src, hdr, payload)
    }
    #[inline]
    fn claim(&mut self, _: Rank, _: &Header) -> Option<Placement> {
        None
    }
    fn placed(&mut self, _: Rank, _: u64) {
        unreachable!("SinkArrivals never claims")
    }
}
