//! The protocol core: how the request layer answers what arrives. Each message a transport
//! hands up (EAGER, RTS, CTS, DATA, FIN, SYNC_ACK) is matched, delivered or queued here,
//! and what must be *sent* or *read* in response (CTS, FIN, SYNC_ACK, single-copy reads,
//! streamed chunks) is not done here but queued as actions in [`Core`] (`ctrl`, `cma`,
//! `streams`), which a driver takes out (`actions.rs`: `Engine::flush` over the router,
//! or `fabric_tests.rs` over an in-memory fabric). So nothing in this file touches a
//! transport, and its tests feed arrivals in and read actions and completions out, with
//! no process or socket.

use super::*;

impl Core {
    /// MPI_SOURCE of a message from world rank `world` on communicator `comm`.
    #[inline]
    pub(super) fn comm_rank_of(&self, comm: CommId, world: Rank) -> i32 {
        self.comms.comm_rank(comm, world)
    }

    /// True when `flush` has anything to do.
    #[inline]
    pub(super) fn has_deferred(&self) -> bool {
        self.self_dirty || self.fault.is_some() || self.has_outgoing()
    }

    /// True while anything waits to be sent or read.
    pub(crate) fn has_outgoing(&self) -> bool {
        self.pending_peers > 0
            || !self.streams.is_empty()
            || !self.ctrl.is_empty()
            || !self.cma.is_empty()
            || !self.reads_in_flight.is_empty()
            || !self.dev_accepts.is_empty()
    }

    pub(super) fn set_fault(&mut self, e: MpiError) -> MpiError {
        if self.fault.is_none() {
            self.fault = Some(e.clone());
        }
        e
    }

    pub(super) fn queue(&mut self, context: u32) -> &mut Queues {
        let i = context as usize;
        if i >= self.queues.len() {
            self.queues.resize_with(i + 1, Queues::default);
        }
        &mut self.queues[i]
    }

    pub(super) fn complete(&mut self, id: ReqId) {
        let Some(req) = self.reqs.get_mut(id.0) else {
            return;
        };
        req.phase = Phase::Done;
        req.packed = None;
        if req.bsend_bytes > 0 {
            match req.bsend_scope {
                BufferScope::Process => self.bsend_used -= req.bsend_bytes,
                scope => self.bsend_scoped.give_back(scope, req.bsend_bytes),
            }
            req.bsend_bytes = 0;
        }
        if req.detached {
            self.reqs.remove(id.0);
        }
        self.completions = self.completions.wrapping_add(1);
    }

    /// Whether a control message (CTS, DATA, FIN, SYNC_ACK) from world rank `src` may act
    /// on request `id`: the request exists, is a send (`send`) or a receive, and talks to
    /// `src`: a send's destination, a receive's matched source. A transport delivers from
    /// `src` only what came over that rank's own connection, so a frame naming another
    /// peer's request is forged (or a bug) and is dropped; it must not complete a request
    /// of someone else (issue 14, item 4).
    pub(super) fn control_from_peer(&self, id: ReqId, src: Rank, send: bool) -> bool {
        let Some(req) = self.reqs.get(id.0) else {
            return false;
        };
        let counterpart = match req.op {
            Op::Send(_) if send => req.peer,
            Op::Recv if !send => req.status.source,
            _ => return false,
        };
        let ok =
            counterpart >= 0 && self.comms.world_rank(req.comm, counterpart as usize) == Some(src);
        if !ok && !FORGED_REPORTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "tsunagi: rank {} ignored a control message from rank {src} for a request it \
                 does not belong to (further ones are not reported)",
                self.me
            );
        }
        ok
    }

    /// What a stalled rank is waiting for (`TSUNAGI_STALL_REPORT`): a diagnostic, one line
    /// per item.
    pub(crate) fn stall_report(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let mut active = 0;
        let mut done = Vec::new();
        for (i, r) in self.reqs.iter() {
            if r.phase != Phase::Active {
                if r.phase == Phase::Done {
                    done.push(i);
                }
                continue;
            }
            active += 1;
            let _ = writeln!(
                out,
                "  req {i}: {:?} peer {} tag {} ctx {} bytes {} expected {} received {} source {}",
                r.op,
                r.peer,
                r.tag,
                r.context,
                r.bytes(),
                r.expected,
                r.received,
                r.status.source
            );
        }
        for (ctx, q) in self.queues.iter().enumerate() {
            if q.posted.is_empty() && q.unexpected.is_empty() {
                continue;
            }
            let unexpected: Vec<String> = q
                .unexpected
                .iter()
                .map(|a| {
                    let kind = match a.body {
                        Body::Eager { .. } => "eager",
                        Body::Rts { .. } => "rts",
                        Body::Device(_) => "device",
                    };
                    format!("{}:{}:{}:{kind}", a.src, a.tag, a.len)
                })
                .collect();
            let _ = writeln!(
                out,
                "  ctx {ctx}: {} posted, unexpected [{}]",
                q.posted.len(),
                unexpected.join(" ")
            );
        }
        let pending: usize = self.pending.iter().map(|q| q.len()).sum();
        let _ = writeln!(
            out,
            "  {active} active requests, {} complete and not collected {done:?}, {} completions, {pending} sends waiting for room ({} peers), {} control, {} single-copy reads, {} streams",
            done.len(),
            self.completions,
            self.pending_peers,
            self.ctrl.len(),
            self.cma.len(),
            self.streams.len()
        );
        out
    }

    /// Handle one message from a transport (inside its poll).
    pub(super) fn on_arrival(&mut self, src: Rank, h: &Header, p: &[u8]) {
        let id = ReqId(h.cookie as u32);
        match h.kind {
            EAGER | RTS => self.arrive_matchable(src, h, p),
            CTS if self.control_from_peer(id, src, true) => self.streams.push(Stream {
                send: id,
                recv_cookie: h.len,
                peer: src,
                offset: 0,
            }),
            DATA if self.control_from_peer(id, src, false) => self.arrive_data(h, p),
            FIN | SYNC_ACK if self.control_from_peer(id, src, true) => self.complete(id),
            CTS | DATA | FIN | SYNC_ACK => {}
            k => {
                self.set_fault(mpi_err(
                    ErrorClass::Intern,
                    format!("protocol error: message kind {k} from rank {src}"),
                ));
            }
        }
    }

    pub(super) fn arrive_matchable(&mut self, src: Rank, h: &Header, p: &[u8]) {
        if let Some(posted) = self.queue(h.context).take_posted(src, h.tag) {
            if h.kind == EAGER {
                self.deliver_eager(posted.id, src, h.tag, p);
                if h.flags & FLAG_SYNC != 0 {
                    self.ctrl.push_back((src, sync_ack(self.me, h.cookie)));
                }
            } else {
                let a = Arrived {
                    src,
                    tag: h.tag,
                    len: h.len as usize,
                    body: Body::Rts {
                        cookie: h.cookie,
                        addr: rts_addr(h, p),
                    },
                };
                self.consume(posted.id, a);
            }
            return;
        }
        let body = if h.kind == EAGER {
            let mut data = self.pool.pop().unwrap_or_default();
            data.clear();
            data.extend_from_slice(p);
            Body::Eager {
                data,
                sync: (h.flags & FLAG_SYNC != 0).then_some(h.cookie),
            }
        } else {
            Body::Rts {
                cookie: h.cookie,
                addr: rts_addr(h, p),
            }
        };
        let a = Arrived {
            src,
            tag: h.tag,
            len: h.len as usize,
            body,
        };
        self.queue(h.context).push_unexpected(a);
    }

    /// Copy eager data into a matched receive and complete it.
    pub(super) fn deliver_eager(&mut self, id: ReqId, src: Rank, tag: i32, data: &[u8]) {
        let req = self.reqs.get_mut(id.0).expect("matched a live request");
        // A receive that named its source matched only that rank; a wildcard one needs the
        // sender's rank in the communicator (looked up below, off the common path).
        let source = req.peer;
        let capacity = req.bytes();
        let take = data.len().min(capacity);
        if take > 0 {
            match req.dtype().contiguous_offset() {
                // SAFETY: the receive buffer holds `bytes()` bytes from `buf + off`, and
                // `take <= bytes()`; `data` is the transport's (for shm, the ring cell's)
                // or the unexpected queue's copy, which does not overlap it.
                Some(off) => unsafe {
                    copy_small(data.as_ptr(), req.buf.0.wrapping_offset(off), take)
                },
                // SAFETY: the receive buffer holds `count` elements of `dtype`.
                None => unsafe {
                    req.dtype()
                        .unpack_range(req.buf.0, req.count, 0, &data[..take])
                },
            }
        }
        req.status = Status {
            source,
            tag,
            error: if data.len() > capacity {
                ErrorClass::Truncate as i32
            } else {
                0
            },
            bytes: take,
            cancelled: false,
        };
        // The common case of `complete`: a plain receive, nothing to give back.
        if !req.detached {
            req.phase = Phase::Done;
            self.completions = self.completions.wrapping_add(1);
        } else {
            self.complete(id);
        }
        if source < 0 {
            let comm = self.reqs.get(id.0).map(|r| r.comm);
            let rank = comm.map_or(-1, |c| self.comm_rank_of(c, src));
            if let Some(r) = self.reqs.get_mut(id.0) {
                r.status.source = rank;
            }
        }
    }

    /// A matched message (from the unexpected queue, an mprobe, or an RTS) meets its
    /// receive request.
    pub(super) fn consume(&mut self, id: ReqId, a: Arrived) {
        match a.body {
            Body::Eager { data, sync } => {
                self.deliver_eager(id, a.src, a.tag, &data);
                if let Some(cookie) = sync {
                    self.ctrl.push_back((a.src, sync_ack(self.me, cookie)));
                }
                self.pool.push(data);
            }
            Body::Device(d) => self.consume_device(id, a.src, a.tag, d),
            Body::Rts { cookie, addr } => {
                let source = {
                    let comm = self.reqs.get(id.0).expect("live").comm;
                    self.comm_rank_of(comm, a.src)
                };
                let req = self.reqs.get_mut(id.0).expect("live");
                req.status = Status {
                    source,
                    tag: a.tag,
                    error: if a.len > req.bytes() {
                        ErrorClass::Truncate as i32
                    } else {
                        0
                    },
                    bytes: a.len.min(req.bytes()),
                    cancelled: false,
                };
                req.expected = a.len;
                req.received = 0;
                match addr {
                    Some(addr) => self.cma.push(CmaRead {
                        recv: id,
                        peer: a.src,
                        addr,
                        len: a.len,
                        sender_cookie: cookie,
                    }),
                    None => self.ctrl.push_back((
                        a.src,
                        Header {
                            kind: CTS,
                            src: self.me,
                            cookie,
                            len: id.0 as u64,
                            ..Header::default()
                        },
                    )),
                }
            }
        }
    }

    pub(super) fn arrive_data(&mut self, h: &Header, p: &[u8]) {
        let id = ReqId(h.cookie as u32);
        let offset = h.len as usize;
        let Some(req) = self.reqs.get_mut(id.0) else {
            self.set_fault(mpi_err(
                ErrorClass::Intern,
                format!("protocol error: data for unknown request {}", id.0),
            ));
            return;
        };
        let capacity = req.bytes();
        if offset < capacity && !p.is_empty() {
            let take = p.len().min(capacity - offset);
            match req.dtype().contiguous_offset() {
                // SAFETY: the receive buffer holds `bytes()` bytes from `buf + off`, and
                // `offset + take <= bytes()`.
                Some(off) => unsafe {
                    std::ptr::copy_nonoverlapping(
                        p.as_ptr(),
                        req.buf.0.wrapping_offset(off).wrapping_add(offset),
                        take,
                    )
                },
                // SAFETY: the receive buffer holds `count` elements of `dtype`.
                None => unsafe {
                    req.dtype()
                        .unpack_range(req.buf.0, req.count, offset, &p[..take])
                },
            }
        }
        req.received += p.len();
        if req.received >= req.expected {
            self.complete(id);
        }
    }
}

/// Copy `n` bytes from `src` to `dst`; the sizes of small messages (up to 16 bytes) with two
/// possibly overlapping unaligned moves instead of a call into `memcpy`, whose dispatch
/// costs as much as the copy at that size.
///
/// # Safety
/// `src` valid for `n` bytes of reads, `dst` for `n` bytes of writes, not overlapping.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY (all arms): every access stays within [0, n) of both buffers (caller's
    // promise); unaligned accessors throughout.
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                *dst = *src;
                *dst.add(n / 2) = *src.add(n / 2);
                *dst.add(n - 1) = *src.add(n - 1);
            }
            4..=7 => {
                let (a, b) = (rd(src as *const u32), rd(src.add(n - 4) as *const u32));
                wr(dst as *mut u32, a);
                wr(dst.add(n - 4) as *mut u32, b);
            }
            8..=16 => {
                let (a, b) = (rd(src as *const u64), rd(src.add(n - 8) as *const u64));
                wr(dst as *mut u64, a);
                wr(dst.add(n - 8) as *mut u64, b);
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// A forged control message was reported (once per process).
static FORGED_REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(super) fn sync_ack(me: Rank, cookie: u64) -> Header {
    Header {
        kind: SYNC_ACK,
        src: me,
        cookie,
        ..Header::default()
    }
}

pub(super) fn rts_addr(h: &Header, p: &[u8]) -> Option<u64> {
    if h.flags & FLAG_CMA != 0 && p.len() >= 8 {
        Some(u64::from_ne_bytes(p[..8].try_into().expect("8 bytes")))
    } else {
        None
    }
}

#[cfg(test)]
mod forged_control_tests {
    use super::*;
    use crate::comm::{CommData, ErrHandler};
    use crate::group::Group;
    use std::sync::Arc;

    /// Rank 0 of 3 with WORLD and one active request to `peer`; no transports needed:
    /// arrivals are fed to `on_arrival` as a transport's poll would.
    fn engine_with(send: bool, peer: i32) -> (Engine, ReqId) {
        let mut e = Engine::new(0, 3, Router::new(3));
        e.comms_mut().insert(CommData {
            group: Arc::new(Group::new(vec![0, 1, 2])),
            rank: 0,
            context: 0,
            name: "WORLD".into(),
            errhandler: ErrHandler::Fatal,
            attrs: Default::default(),
            nodes: Arc::new(vec![0, 0, 1]),
            inter: None,
        });
        let mode = send.then_some(SendMode::Synchronous);
        let id = e.new_request(
            mode,
            Buf(std::ptr::null_mut()),
            0,
            Datatype::builtin(Builtin::Byte),
            CommId(0),
            peer,
            0,
            false,
        );
        let req = e.core.reqs.get_mut(id.0).unwrap();
        req.phase = Phase::Active;
        if !send {
            req.status.source = peer;
            req.expected = 1;
        }
        (e, id)
    }

    fn ctl(kind: u8, cookie: u32) -> Header {
        Header {
            kind,
            cookie: cookie as u64,
            ..Header::default()
        }
    }

    /// Issue 14, item 4: FIN / SYNC_ACK / CTS / DATA naming a request act only when they
    /// come from the peer that request talks to.
    #[test]
    fn control_messages_from_other_peers_are_ignored() {
        for kind in [FIN, SYNC_ACK] {
            let (mut e, id) = engine_with(true, 1);
            e.core.on_arrival(2, &ctl(kind, id.0), &[]);
            assert!(
                !e.is_done(id),
                "kind {kind} from rank 2 completed a send to rank 1"
            );
            e.core.on_arrival(1, &ctl(kind, id.0), &[]);
            assert!(e.is_done(id), "kind {kind} from rank 1 must complete it");
        }
        let (mut e, id) = engine_with(true, 1);
        e.core.on_arrival(2, &ctl(CTS, id.0), &[]);
        assert!(
            e.core.streams.is_empty(),
            "a CTS from rank 2 started a stream"
        );
        e.core.on_arrival(1, &ctl(CTS, id.0), &[]);
        assert_eq!(e.core.streams.len(), 1);
        // A FIN naming a receive, or no request at all, does nothing.
        let (mut e, id) = engine_with(false, 1);
        e.core.on_arrival(1, &ctl(FIN, id.0), &[]);
        e.core.on_arrival(1, &ctl(FIN, 999), &[]);
        assert!(!e.is_done(id));
        // DATA for a receive matched to rank 1 is taken only from rank 1.
        e.core.on_arrival(2, &ctl(DATA, id.0), &[1]);
        assert!(!e.is_done(id));
        e.core.on_arrival(1, &ctl(DATA, id.0), &[1]);
        assert!(e.is_done(id));
        assert!(e.core.fault.is_none());
    }
}
