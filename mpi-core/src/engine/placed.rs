//! Receiving into the posted buffer (`tsunagi_p2p::placing`): the request layer's answer
//! to a transport that asks, before a message's payload is in, whether a posted receive
//! takes it. The matching is the same as an arrival's (`Core::arrive_matchable`): the first
//! posted receive that accepts the message; only an eager message whose receive holds the
//! whole payload in one contiguous buffer is given out, everything else is left to the
//! ordinary delivery (which then matches the same receive, or queues the message).

use tsunagi_p2p::{Arrivals, Placement};

use super::core::sync_ack;
use super::matching::matches;
use super::*;

impl Arrivals for Core {
    #[inline]
    fn deliver(&mut self, src: Rank, hdr: &Header, payload: &[u8]) {
        self.on_arrival(src, hdr, payload)
    }

    fn claim(&mut self, src: Rank, hdr: &Header) -> Option<Placement> {
        if hdr.kind != EAGER {
            return None;
        }
        let len = usize::try_from(hdr.len).ok()?;
        let q = self.queue(hdr.context);
        let pos = q
            .posted
            .iter()
            .position(|r| matches(r.src, r.tag, src, hdr.tag))?;
        let id = q.posted[pos].id;
        let req = self.reqs.get(id.0)?;
        // A receive too small (truncation) or not contiguous: the ordinary delivery,
        // which reports the one and unpacks the other.
        let off = req.dtype().contiguous_offset()?;
        if len > req.bytes() || len == 0 {
            return None;
        }
        crate::tools::bump(&crate::tools::POSTED_MATCH_ATTEMPTS, 1);
        self.queue(hdr.context).posted.remove(pos);
        let req = self.reqs.get_mut(id.0).expect("looked up above");
        // SAFETY: the receive's buffer holds `req.bytes() >= len` bytes from `buf + off` (the
        // MPI contract of a posted receive, checked by the API); only the address is made.
        let dst = unsafe { req.buf.0.offset(off) };
        // MPI_SOURCE: a receive that named its source matched only that rank.
        let source = if req.peer >= 0 { req.peer } else { -1 };
        req.status = Status {
            source,
            tag: hdr.tag,
            error: 0,
            bytes: len,
            cancelled: false,
        };
        req.expected = len;
        if source < 0 {
            let comm = req.comm;
            let rank = self.comm_rank_of(comm, src);
            self.reqs.get_mut(id.0).expect("live").status.source = rank;
        }
        if hdr.flags & FLAG_SYNC != 0 {
            // The synchronous sender waits for its receive to be matched: it is, now.
            self.ctrl.push_back((src, sync_ack(self.me, hdr.cookie)));
        }
        Some(Placement {
            dst,
            len,
            token: id.0 as u64,
        })
    }

    fn placed(&mut self, _src: Rank, token: u64) {
        let id = ReqId(token as u32);
        let Some(req) = self.reqs.get_mut(id.0) else {
            return;
        };
        req.received = req.expected;
        if !req.detached {
            req.phase = Phase::Done;
            self.completions = self.completions.wrapping_add(1);
        } else {
            self.complete(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::comm::{CommData, ErrHandler};
    use crate::group::Group;

    /// Rank 1 of 2 with WORLD (context 0).
    fn core() -> Core {
        let mut c = Core::new(1, 2, Vec::new());
        c.comms.insert(CommData {
            group: Arc::new(Group::new(vec![0, 1])),
            rank: 1,
            context: 0,
            name: "WORLD".into(),
            errhandler: ErrHandler::Return,
            attrs: Default::default(),
            nodes: Arc::new(vec![0; 2]),
            inter: None,
        });
        c
    }

    fn irecv(c: &mut Core, src: i32, tag: i32, buf: &mut [u8]) -> ReqId {
        let byte = c.byte_type.clone();
        let id = c.new_request(
            None,
            Buf(buf.as_mut_ptr()),
            buf.len(),
            byte,
            CommId::WORLD,
            src,
            tag,
            0,
            false,
        );
        c.activate(id).unwrap();
        c.start_recv(id);
        id
    }

    fn eager(tag: i32, len: usize, flags: u8) -> Header {
        Header {
            kind: EAGER,
            flags,
            src: 0,
            tag,
            context: 0,
            len: len as u64,
            cookie: 77,
            ..Header::default()
        }
    }

    #[test]
    fn a_posted_receive_is_claimed_in_matching_order_and_completes_when_placed() {
        let mut c = core();
        let mut first = vec![0u8; 100];
        let mut second = vec![0u8; 100];
        let a = irecv(&mut c, ANY_SOURCE, 5, &mut first);
        let b = irecv(&mut c, 0, 5, &mut second);
        let p = c
            .claim(0, &eager(5, 60, 0))
            .expect("the first posted receive takes it");
        assert_eq!((p.dst, p.len), (first.as_mut_ptr(), 60));
        assert_eq!(
            c.test(a).unwrap(),
            None,
            "not complete before its bytes are in"
        );
        // The next message goes to the next receive, before the first is placed.
        let q = c
            .claim(0, &eager(5, 100, 0))
            .expect("the second receive takes the next");
        assert_eq!(q.dst, second.as_mut_ptr());
        c.placed(0, q.token);
        c.placed(0, p.token);
        let st = c.test(a).unwrap().expect("complete once placed");
        assert_eq!((st.source, st.tag, st.bytes, st.error), (0, 5, 60, 0));
        let st = c.test(b).unwrap().expect("complete once placed");
        assert_eq!((st.source, st.bytes), (0, 100));
        assert!(c.ctrl.is_empty(), "a standard send is owed nothing");
    }

    #[test]
    fn what_cannot_be_placed_is_left_to_the_ordinary_delivery() {
        let mut c = core();
        let mut small = vec![0u8; 10];
        let id = irecv(&mut c, 0, 5, &mut small);
        // Too long for the buffer: the ordinary delivery reports the truncation.
        assert!(c.claim(0, &eager(5, 11, 0)).is_none());
        // Another tag, an announced rendezvous, an empty message: not claimed.
        assert!(c.claim(0, &eager(6, 4, 0)).is_none());
        assert!(c
            .claim(
                0,
                &Header {
                    kind: RTS,
                    ..eager(5, 4, 0)
                }
            )
            .is_none());
        assert!(c.claim(0, &eager(5, 0, 0)).is_none());
        // The receive is still posted: the message, delivered whole, meets it.
        c.on_arrival(0, &eager(5, 11, 0), &[7u8; 11]);
        let st = c.test(id).unwrap().expect("delivered");
        assert_eq!((st.bytes, st.error), (10, ErrorClass::Truncate as i32));
        assert_eq!(small, vec![7u8; 10]);
    }

    #[test]
    fn a_synchronous_sender_is_acknowledged_when_its_message_is_claimed() {
        let mut c = core();
        let mut buf = vec![0u8; 8];
        irecv(&mut c, ANY_SOURCE, ANY_TAG, &mut buf);
        let p = c.claim(0, &eager(9, 8, FLAG_SYNC)).expect("claimed");
        assert_eq!(c.ctrl.len(), 1);
        let (peer, ack) = c.ctrl[0];
        assert_eq!((peer, ack.kind, ack.cookie), (0, SYNC_ACK, 77));
        c.placed(0, p.token);
        assert_eq!(c.completions, 1);
    }
}
