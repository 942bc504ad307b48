//! The protocol core's send side: starting a send over a byte mover. The core decides
//! between eager and rendezvous (and whether a rendezvous offers single copy) and queues
//! the message as a [`SendAction`] in `Core::outbox`; the driver (`Engine::carry_actions`)
//! carries it out over the router at once, behind anything already queued for that peer
//! (so the outbox is empty whenever the engine lock is free, and no progress step needs
//! to look at it). The core learns what it needs of the transport (its eager limit, whether it
//! offers single copy) from the driver and touches none.
//!
//! Not through here: the lean path of a small standard send (`Engine::send_eager_now`),
//! which writes into the transport at once and keeps no request, and sends to peers behind
//! a native device (`engine/device.rs`), which runs its own protocols.

use super::*;

/// A message the core decided to send: to `peer`, this header, with this body.
pub(crate) struct SendAction {
    pub peer: Rank,
    /// Its `cookie` is the send request's id.
    pub hdr: Header,
    pub body: SendBody,
}

/// What follows a [`SendAction`]'s header on the wire.
pub(crate) enum SendBody {
    /// The send request's data (EAGER); with `complete`, the request completes once the
    /// message is sent or queued (a standard or ready send; a synchronous one waits for
    /// the SYNC_ACK).
    Data { complete: bool },
    /// Nothing (an RTS whose receiver answers CTS).
    Empty,
    /// An RTS offering single copy of the request's bytes at `addr` in this process: the
    /// driver asks the transport what to announce for them (`Transport::expose`) and
    /// sends a plain RTS (CTS/DATA follow) when it refuses.
    Expose { addr: u64 },
}

impl SendAction {
    /// The RTS of an [`SendBody::Expose`] action once the transport announced `announced`
    /// for the buffer: flagged single copy, the announcement as its payload.
    pub(crate) fn offer(&self, announced: u64) -> (Header, [u8; 8]) {
        let mut hdr = self.hdr;
        hdr.flags |= FLAG_CMA;
        (hdr, announced.to_ne_bytes())
    }
}

impl Core {
    /// Start send request `id` to world rank `dest` over a transport whose eager limit is
    /// `eager_limit`; `single_copy` says whether that transport offers single copy to
    /// `dest` (asked only for a rendezvous). Queues the first message in the outbox.
    pub(super) fn start_send(
        &mut self,
        id: ReqId,
        mode: SendMode,
        dest: Rank,
        eager_limit: usize,
        single_copy: impl FnOnce() -> bool,
    ) {
        let me = self.me;
        let req = self.reqs.get_mut(id.0).expect("live request");
        let bytes = req.bytes();
        req.status.bytes = bytes;
        let sync = mode == SendMode::Synchronous;
        let mut hdr = Header {
            kind: EAGER,
            flags: if sync { FLAG_SYNC } else { 0 },
            src: me,
            tag: req.tag,
            context: req.context,
            len: bytes as u64,
            cookie: id.0 as u64,
            ..Header::default()
        };
        if bytes <= eager_limit {
            self.outbox.push_back(SendAction {
                peer: dest,
                hdr,
                body: SendBody::Data { complete: !sync },
            });
            return;
        }
        // Rendezvous: a synchronous send needs no flag, the receiver's answer (FIN or the
        // last DATA's request) comes only after the match.
        hdr.kind = RTS;
        hdr.flags = 0;
        let body = if single_copy() {
            let addr = if let Some(p) = &req.packed {
                p.as_ptr() as u64
            } else if let Some(off) = req.dtype().contiguous_offset() {
                // Wrapping: the buffer may be MPI_BOTTOM (NULL) with an absolute offset.
                req.buf.0.wrapping_offset(off) as u64
            } else {
                let mut packed = vec![0u8; bytes];
                // SAFETY: the send buffer holds `count` elements of `dtype`.
                unsafe { req.dtype().pack_range(req.buf.0, req.count, 0, &mut packed) };
                let a = packed.as_ptr() as u64;
                req.packed = Some(packed);
                a
            };
            SendBody::Expose { addr }
        } else {
            SendBody::Empty
        };
        self.outbox.push_back(SendAction {
            peer: dest,
            hdr,
            body,
        });
    }

    /// Make the internal copy of buffered send `id` (MPI_Bsend, MPI_Ibsend): its data is
    /// packed into space of the attached buffer, `id` completes now, and the copy (a
    /// standard send that gives the space back when it is done) is returned for the
    /// caller to start. MPI_ERR_BUFFER when the attached buffer has no room.
    pub(super) fn buffered_copy(&mut self, id: ReqId) -> MpiResult<ReqId> {
        let req = self.reqs.get_mut(id.0).expect("live request");
        let bytes = req.bytes();
        let need = bytes + BSEND_OVERHEAD;
        let scope = self.bsend_scoped.scope_for(req.comm);
        if let Err((free, size, whose)) = self.take_bsend(scope, need) {
            let req = self.reqs.get_mut(id.0).expect("live request");
            req.phase = Phase::Done;
            return Err(mpi_err(
                ErrorClass::Buffer,
                format!(
                    "MPI_Bsend: insufficient buffer space: the message needs {need} bytes \
                     (data + MPI_BSEND_OVERHEAD), {free} of {size} bytes attached to \
                     {whose} are free"
                ),
            ));
        }
        let req = self.reqs.get_mut(id.0).expect("live request");
        let mut packed = vec![0u8; bytes];
        // SAFETY: the send buffer holds `count` elements of `dtype` (MPI contract).
        unsafe { req.dtype().pack_range(req.buf.0, req.count, 0, &mut packed) };
        req.status.bytes = bytes;
        let copy = Request {
            op: Op::Send(SendMode::Standard),
            phase: Phase::Active,
            persistent: false,
            detached: true,
            status: Status::EMPTY,
            buf: Buf(packed.as_mut_ptr()),
            count: bytes,
            dtype: Some(self.byte_type.clone()),
            builtin: Builtin::Byte,
            comm: req.comm,
            peer: req.peer,
            tag: req.tag,
            context: req.context,
            packed: Some(packed),
            bsend_bytes: need,
            bsend_scope: scope,
            expected: 0,
            received: 0,
        };
        let copy = self.reqs.insert(copy);
        assert!(copy < SENT_BASE, "request table full");
        self.complete(id);
        Ok(ReqId(copy))
    }
}

impl Engine {
    /// Start send request `id` (made by `new_request`, checked by the API).
    pub(super) fn start_send(&mut self, id: ReqId, mode: SendMode) -> MpiResult<()> {
        let req = self.core.reqs.get_mut(id.0).expect("live request");
        if req.peer == PROC_NULL {
            req.status = Status::PROC_NULL;
            self.core.complete(id);
            return Ok(());
        }
        if mode == SendMode::Buffered {
            let copy = self.core.buffered_copy(id)?;
            return self.start_send(copy, SendMode::Standard);
        }
        let dest = self
            .core
            .comms
            .world_rank(req.comm, req.peer as usize)
            .expect("checked by the API");
        if let Some(dev) = self.router.device_of(dest) {
            return self.start_device_send(id, mode, dev, dest);
        }
        let Engine { router, core } = self;
        let t = router.to(dest).ok_or_else(|| no_route(dest))?;
        core.start_send(id, mode, dest, t.eager_limit(), || t.single_copy(dest));
        self.carry_actions()
    }

    /// Carry out [`Action::Send`] `a`: the first message of a send, from the request's
    /// bytes (EAGER), or an RTS offering single copy when the transport exposes the buffer.
    pub(super) fn send_action(&mut self, a: SendAction) -> MpiResult<()> {
        let peer = a.peer;
        match a.body {
            SendBody::Data { .. } => {
                let Engine { router, core } = self;
                if peer == core.me {
                    core.self_dirty = true;
                }
                let id = ReqId(a.hdr.cookie as u32);
                let sent = !core.is_blocked(peer) && {
                    let t = router.to(peer).ok_or_else(|| no_route(peer))?;
                    let data = core.send_bytes(id, 0, a.hdr.len as usize);
                    t.try_send(peer, &a.hdr, data).map_err(p2p_fault)?
                };
                if !sent {
                    core.park_send(peer, a.hdr);
                }
            }
            SendBody::Empty => self.send_or_queue(peer, a.hdr, &[])?,
            SendBody::Expose { addr } => {
                let t = self.router.to(peer).ok_or_else(|| no_route(peer))?;
                // SAFETY: the send buffer (or the request's packed copy) stays valid and
                // untouched until the receiver answers with FIN or CTS (MPI contract).
                match unsafe { t.expose(peer, addr as *const u8, a.hdr.len as usize) } {
                    // The transport may announce another address (PM: a registered region).
                    Ok(announced) => {
                        let (hdr, payload) = a.offer(announced);
                        self.send_or_queue(peer, hdr, &payload)?
                    }
                    Err(_) => self.send_or_queue(peer, a.hdr, &[])?,
                }
            }
        }
        self.core.send_carried(&a);
        Ok(())
    }
}

/// The send side's decisions as actions, without any transport: the router is empty and
/// nothing is carried out.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{CommData, ErrHandler};
    use crate::group::Group;
    use std::cell::Cell;
    use std::sync::Arc;

    fn engine() -> Engine {
        let mut e = Engine::new(0, 2, Router::new(2));
        e.comms_mut().insert(CommData {
            group: Arc::new(Group::new(vec![0, 1])),
            rank: 0,
            context: 0,
            name: "WORLD".into(),
            errhandler: ErrHandler::Return,
            attrs: Default::default(),
            nodes: Arc::new(vec![0, 0]),
            inter: None,
        });
        e
    }

    fn byte() -> TypeRef {
        Datatype::builtin(Builtin::Byte)
    }

    fn send(e: &mut Engine, mode: SendMode, data: &[u8], dtype: TypeRef, count: usize) -> ReqId {
        let id = e.new_request(
            Some(mode),
            Buf(data.as_ptr() as *mut u8),
            count,
            dtype,
            CommId::WORLD,
            1,
            7,
            false,
        );
        e.core.reqs.get_mut(id.0).unwrap().phase = Phase::Active;
        id
    }

    #[test]
    fn eager_up_to_the_limit_and_single_copy_asked_only_for_rendezvous() {
        let mut e = engine();
        let data = [5u8; 100];
        let asked = Cell::new(0);
        for (len, mode) in [(64, SendMode::Standard), (64, SendMode::Synchronous)] {
            let id = send(&mut e, mode, &data, byte(), len);
            e.core.start_send(id, mode, 1, 64, || {
                asked.set(asked.get() + 1);
                true
            });
            let a = e.core.outbox.pop_front().expect("one action");
            assert_eq!((a.peer, a.hdr.kind, a.hdr.len), (1, EAGER, 64));
            assert_eq!((a.hdr.tag, a.hdr.cookie), (7, id.0 as u64));
            let sync = mode == SendMode::Synchronous;
            assert_eq!(a.hdr.flags & FLAG_SYNC != 0, sync);
            assert!(matches!(a.body, SendBody::Data { complete } if complete != sync));
            assert!(!e.is_done(id), "completes only once the driver sent it");
        }
        assert_eq!(asked.get(), 0, "an eager send never asks for single copy");
        // One byte more: a rendezvous, with or without single copy.
        for offered in [true, false] {
            let id = send(&mut e, SendMode::Synchronous, &data, byte(), 65);
            e.core
                .start_send(id, SendMode::Synchronous, 1, 64, || offered);
            let a = e.core.outbox.pop_front().expect("one action");
            assert_eq!((a.hdr.kind, a.hdr.flags, a.hdr.len), (RTS, 0, 65));
            match a.body {
                SendBody::Expose { addr } => {
                    assert!(offered);
                    assert_eq!(addr, data.as_ptr() as u64, "the user's buffer, no copy");
                }
                SendBody::Empty => assert!(!offered),
                SendBody::Data { .. } => panic!("a rendezvous carries no data"),
            }
        }
        assert!(e.core.outbox.is_empty());
    }

    #[test]
    fn single_copy_of_non_contiguous_data_offers_a_packed_copy() {
        let mut e = engine();
        let int = Datatype::builtin(Builtin::Int);
        let strided: TypeRef = Arc::new(Datatype::vector(40, 1, 2, &int).unwrap());
        strided.commit();
        let src: Vec<i32> = (0..80).collect();
        // SAFETY: the 80 ints of `src` are 320 initialized bytes, alive to the end.
        let bytes: &[u8] = unsafe { std::slice::from_raw_parts(src.as_ptr().cast(), 320) };
        let id = send(&mut e, SendMode::Standard, bytes, strided, 1);
        e.core.start_send(id, SendMode::Standard, 1, 64, || true);
        let a = e.core.outbox.pop_front().expect("one action");
        let SendBody::Expose { addr } = a.body else {
            panic!("single copy offered")
        };
        let packed = e
            .core
            .reqs
            .get(id.0)
            .unwrap()
            .packed
            .as_ref()
            .expect("packed");
        assert_eq!(addr, packed.as_ptr() as u64);
        let even: Vec<u8> = (0..80)
            .step_by(2)
            .flat_map(|i: i32| i.to_ne_bytes())
            .collect();
        assert_eq!(packed, &even, "every other int, packed once");
    }

    #[test]
    fn buffered_sends_copy_into_the_attached_buffer_or_fail_with_err_buffer() {
        let mut e = engine();
        let data = [9u8; 40];
        let id = send(&mut e, SendMode::Buffered, &data, byte(), 40);
        let err = e.core.buffered_copy(id).expect_err("nothing attached");
        assert_eq!(err.class, ErrorClass::Buffer);
        assert!(err.message.starts_with("MPI_Bsend"), "{}", err.message);
        e.core.bsend_buffer = Some((0, 40 + BSEND_OVERHEAD));
        let id = send(&mut e, SendMode::Buffered, &data, byte(), 40);
        let copy = e.core.buffered_copy(id).expect("room for one");
        assert!(e.is_done(id), "the program's request completes at once");
        assert_eq!(e.core.bsend_used, 40 + BSEND_OVERHEAD);
        let c = e.core.reqs.get(copy.0).unwrap();
        assert_eq!(c.packed.as_deref(), Some(&data[..]));
        assert!(c.detached && c.phase == Phase::Active);
        let id = send(&mut e, SendMode::Buffered, &data, byte(), 1);
        assert_eq!(
            e.core.buffered_copy(id).unwrap_err().class,
            ErrorClass::Buffer,
            "the space is in use until the copy is sent"
        );
        // The copy is a standard send: sent, it gives the space back.
        e.core.start_send(copy, SendMode::Standard, 1, 64, || false);
        e.core.outbox.clear();
        e.core.complete(copy);
        assert_eq!(e.core.bsend_used, 0);
        assert!(e.core.reqs.get(copy.0).is_none(), "a detached copy is gone");
    }
}
