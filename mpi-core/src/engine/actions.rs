//! The protocol core's interface to its driver, in the style of quinn-proto: the driver
//! feeds events in (a message arrived: `Core::on_arrival`; the program posted, started or
//! cancelled a request; a read finished: [`Core::read_finished`]; a transport was full:
//! [`Core::park`]) and takes actions out ([`Core::poll_action`]: send this message to
//! that rank, start this single-copy read; [`Core::stream_chunk`]: the next DATA chunk
//! of a streaming send). Completions are the requests' state, which the driver reads
//! with `test`.
//!
//! The core keeps every protocol decision (eager or rendezvous, single copy or CTS/DATA,
//! FIN or CTS after a read, when a request completes, what waits behind a full transport
//! so that order per peer holds) and touches no transport: `Engine` (`mod.rs`) is the
//! driver over the router, and `fabric_tests.rs` drives cores alone on an in-memory
//! fabric. Payloads are not copied into actions: the driver borrows them from the core
//! ([`Core::send_bytes`], [`Core::stream_chunk`]) and hands them to the transport, which
//! for a contiguous buffer is the user's memory itself.

use super::send::SendAction;
use super::*;

/// What the core asks its driver to do next.
pub(crate) enum Action {
    /// Send the first message of a send the core started (EAGER or RTS): its body says
    /// where the bytes come from. Once carried out (sent or parked), tell the core with
    /// [`Core::send_carried`].
    Send(SendAction),
    /// Send a control message (CTS, FIN, SYNC_ACK): a header without payload.
    Control { peer: Rank, hdr: Header },
    /// Read a rendezvous message's data from the sender's memory (single copy), into
    /// [`Core::read_target`]; report the outcome with [`Core::read_finished`].
    Read(CmaRead),
}

/// Where a single-copy read's bytes go.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadInto {
    /// Straight into the receive buffer, at this address (a contiguous receive).
    Direct(*mut u8),
    /// Into a staging buffer of the driver's, which [`Core::read_finished`] unpacks.
    Staged,
}

/// How a single-copy read ended.
pub(crate) enum ReadOutcome<'a> {
    /// The bytes are in the receive buffer ([`ReadInto::Direct`]).
    Done,
    /// The bytes are in this staging buffer ([`ReadInto::Staged`]).
    Staged(&'a [u8]),
    /// The transport could not read (e.g. ptrace restrictions): the sender must stream.
    Refused,
}

impl CmaRead {
    /// The rank whose memory is read.
    pub(crate) fn peer(&self) -> Rank {
        self.peer
    }

    /// The address the sender announced.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }
}

impl Core {
    /// A core for world rank `me` of `size`, with native devices of these representations.
    pub(crate) fn new(me: Rank, size: usize, dev_reps: Vec<DataRep>) -> Core {
        Core {
            me,
            reqs: Slab::default(),
            queues: Vec::new(),
            msgs: Slab::default(),
            pending: (0..size).map(|_| VecDeque::new()).collect(),
            pending_peers: 0,
            outbox: VecDeque::new(),
            ctrl: VecDeque::new(),
            cma: Vec::new(),
            reads_in_flight: Vec::new(),
            streams: Vec::new(),
            scratch: Vec::new(),
            pool: Vec::new(),
            comms: CommTable::default(),
            fault: None,
            completions: 0,
            self_dirty: false,
            bsend_buffer: None,
            bsend_used: 0,
            bsend_scoped: ScopedBuffers::default(),
            byte_type: Datatype::builtin(Builtin::Byte),
            dev_accepts: Vec::new(),
            dev_recvs: HashMap::new(),
            dev_reps,
        }
    }

    /// Whether [`Core::poll_action`] has anything.
    #[inline]
    pub(crate) fn has_actions(&self) -> bool {
        !self.outbox.is_empty() || !self.ctrl.is_empty() || !self.cma.is_empty()
    }

    /// The next thing to carry out: sends in the order the core started them, then
    /// control messages in the order they were decided, then reads.
    #[inline]
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        if let Some(a) = self.outbox.pop_front() {
            return Some(Action::Send(a));
        }
        if let Some((peer, hdr)) = self.ctrl.pop_front() {
            return Some(Action::Control { peer, hdr });
        }
        self.cma.pop().map(Action::Read)
    }

    /// `n` bytes from `offset` of send request `id`'s data as they go on the wire: its
    /// packed copy, the user's contiguous buffer itself, or packed into the core's scratch
    /// buffer (valid until the next call).
    pub(crate) fn send_bytes(&mut self, id: ReqId, offset: usize, n: usize) -> &[u8] {
        let Core { reqs, scratch, .. } = self;
        let req = reqs.get(id.0).expect("bytes of a live send");
        if n == 0 {
            // A zero-byte message may come from a NULL buffer: no slice from it.
            return &[];
        }
        if let Some(p) = &req.packed {
            return &p[offset..offset + n];
        }
        if let Some(off) = req.dtype().contiguous_offset() {
            // SAFETY: the send buffer holds `bytes()` bytes from `buf + off` (MPI contract
            // for a contiguous type) and `offset + n <= bytes()`; the request is active,
            // so the buffer stays valid until it completes.
            return unsafe {
                std::slice::from_raw_parts(req.buf.0.wrapping_offset(off).wrapping_add(offset), n)
            };
        }
        scratch.resize(n, 0);
        // SAFETY: the send buffer holds `count` elements of `dtype` (MPI contract).
        unsafe {
            req.dtype()
                .pack_range(req.buf.0, req.count, offset, &mut scratch[..n])
        };
        &scratch[..n]
    }

    /// The driver carried out [`Action::Send`] `a` (sent or parked it): a standard or
    /// ready eager send is complete now.
    #[inline]
    pub(crate) fn send_carried(&mut self, a: &SendAction) {
        if let send::SendBody::Data { complete: true } = a.body {
            self.complete(ReqId(a.hdr.cookie as u32));
        }
    }

    // ----- back-pressure: messages waiting for room in a transport -----

    /// Whether messages to `peer` wait for room already: a new one must go behind them
    /// (per-peer order), not to the transport.
    #[inline]
    pub(crate) fn is_blocked(&self, peer: Rank) -> bool {
        self.pending
            .get(peer as usize)
            .is_some_and(|q| !q.is_empty())
    }

    /// Peers with messages waiting for room.
    #[inline]
    pub(crate) fn blocked_peers(&self) -> usize {
        self.pending_peers
    }

    /// The transport to `peer` was full (or messages to it wait already): keep a copy of
    /// this message, to send when there is room ([`Core::parked`]).
    pub(crate) fn park(&mut self, peer: Rank, hdr: Header, payload: &[u8]) {
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        self.park_owned(peer, hdr, buf);
    }

    /// [`Core::park`] for the first message of send `id`, whose bytes the core takes from
    /// the request ([`Core::send_bytes`]).
    pub(crate) fn park_send(&mut self, peer: Rank, hdr: Header) {
        let id = ReqId(hdr.cookie as u32);
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        let n = hdr.len as usize;
        buf.extend_from_slice(self.send_bytes(id, 0, n));
        self.park_owned(peer, hdr, buf);
    }

    fn park_owned(&mut self, peer: Rank, hdr: Header, payload: Vec<u8>) {
        let q = &mut self.pending[peer as usize];
        if q.is_empty() {
            self.pending_peers += 1;
        }
        q.push_back(Outgoing { hdr, payload });
    }

    /// The oldest message waiting for room to `peer`.
    #[inline]
    pub(crate) fn parked(&self, peer: Rank) -> Option<(&Header, &[u8])> {
        self.pending
            .get(peer as usize)?
            .front()
            .map(|o| (&o.hdr, &o.payload[..]))
    }

    /// The message [`Core::parked`] gave went out.
    pub(crate) fn unpark(&mut self, peer: Rank) {
        let q = &mut self.pending[peer as usize];
        let o = q.pop_front().expect("a parked message went out");
        if q.is_empty() {
            self.pending_peers -= 1;
        }
        self.pool.push(o.payload);
    }

    // ----- single-copy reads -----

    /// Where the bytes of read `r` go, and how many to read (the receive may be shorter:
    /// truncation).
    pub(crate) fn read_target(&self, r: &CmaRead) -> (ReadInto, usize) {
        let req = self.reqs.get(r.recv.0).expect("read for a live request");
        let take = r.len.min(req.bytes());
        match req.dtype().contiguous_offset() {
            // SAFETY (of the pointer's later use, not of this arithmetic): the receive
            // buffer holds `bytes() >= take` bytes from `buf + off` (MPI contract for a
            // contiguous type); the request stays incomplete, its buffer untouched by
            // anyone else, until `read_finished`.
            Some(off) => (ReadInto::Direct(req.buf.0.wrapping_offset(off)), take),
            None => (ReadInto::Staged, take),
        }
    }

    /// Read `r` ended: done (the receive completes, FIN to the sender) or refused (CTS:
    /// the sender streams the data instead).
    pub(crate) fn read_finished(&mut self, r: CmaRead, outcome: ReadOutcome<'_>) {
        let kind = match outcome {
            ReadOutcome::Refused => CTS,
            ReadOutcome::Done | ReadOutcome::Staged(_) => {
                let req = self
                    .reqs
                    .get_mut(r.recv.0)
                    .expect("read for a live request");
                if let ReadOutcome::Staged(data) = outcome {
                    let take = data.len().min(req.bytes());
                    // SAFETY: the buffer holds `count` elements of `dtype` (MPI contract);
                    // `take <= count * size` bytes of packed data.
                    unsafe {
                        req.dtype()
                            .unpack_range(req.buf.0, req.count, 0, &data[..take])
                    };
                }
                req.received = r.len;
                self.complete(r.recv);
                FIN
            }
        };
        let hdr = Header {
            kind,
            src: self.me,
            cookie: r.sender_cookie,
            // A CTS names the receive the DATA chunks are for.
            len: if kind == CTS { r.recv.0 as u64 } else { 0 },
            ..Header::default()
        };
        self.ctrl.push_back((r.peer, hdr));
    }

    // ----- streaming sends (CTS answered, DATA chunks follow) -----

    /// Sends streaming their data.
    #[inline]
    pub(crate) fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// The rank stream `i` sends to.
    pub(crate) fn stream_peer(&self, i: usize) -> Rank {
        self.streams[i].peer
    }

    /// The next DATA chunk of stream `i`, at most `max` bytes: its header and bytes. None
    /// when everything is sent: then [`Core::end_stream`].
    pub(crate) fn stream_chunk(&mut self, i: usize, max: usize) -> Option<(Header, &[u8])> {
        let s = &self.streams[i];
        let (send, offset, recv_cookie) = (s.send, s.offset, s.recv_cookie);
        let total = self
            .reqs
            .get(send.0)
            .expect("streaming a live send")
            .bytes();
        if offset >= total {
            return None;
        }
        let n = max.min(total - offset);
        let hdr = Header {
            kind: DATA,
            src: self.me,
            len: offset as u64,
            cookie: recv_cookie,
            ..Header::default()
        };
        Some((hdr, self.send_bytes(send, offset, n)))
    }

    /// The chunk of `n` bytes that [`Core::stream_chunk`] gave for stream `i` went out.
    pub(crate) fn chunk_sent(&mut self, i: usize, n: usize) {
        self.streams[i].offset += n;
    }

    /// Stream `i` sent everything: its send completes. The last stream takes index `i`.
    pub(crate) fn end_stream(&mut self, i: usize) {
        let s = self.streams.swap_remove(i);
        self.complete(s.send);
    }
}
