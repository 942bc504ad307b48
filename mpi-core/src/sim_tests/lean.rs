//! The lean send path (`Engine::send_eager_now`): a small send that the transport takes at
//! once completes with no request; anything else is left to the general path, and order
//! per peer holds across both.

use super::*;
use crate::engine::SENT_BASE;

#[test]
fn a_small_send_leaves_at_once_and_keeps_no_request() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let data = b"hello".to_vec();
    let id = job.e[0]
        .send_eager_now(1, 5, 0, &data)
        .expect("no fault")
        .expect("the lean path takes a small send to a free peer");
    assert_eq!(id.sent_bytes(), Some(5));
    assert!(id.0 >= SENT_BASE);
    assert_eq!(job.e[0].live_requests(), 0, "no request was made");
    let e = &mut job.e[0];
    assert!(e.request_exists(id) && e.is_active(id) && e.is_done(id));
    assert!(!e.is_persistent(id));
    e.cancel(id).expect("cancel of a sent message does nothing");
    let st = e.test(id).expect("test").expect("complete");
    assert_eq!((st.bytes, st.cancelled, st.error), (5, false, 0));
    e.free_request(id).expect("free does nothing");
    let mut buf = [0u8; 8];
    let r = job.irecv(1, 0, 5, &mut buf);
    let st = job.wait(1, r);
    assert_eq!((st.source, st.tag, st.bytes), (0, 5, 5));
    assert_eq!(&buf[..5], b"hello");
}

#[test]
fn the_lean_path_declines_what_it_cannot_finish_now() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let big = vec![7u8; 65];
    assert!(
        job.e[0].send_eager_now(1, 0, 0, &big).unwrap().is_none(),
        "above eager"
    );
    assert!(
        job.e[0].send_eager_now(0, 0, 0, b"x").unwrap().is_none(),
        "to self"
    );
    assert!(
        job.e[0].send_eager_now(9, 0, 0, b"x").unwrap().is_none(),
        "no route"
    );
    assert_eq!(job.e[0].live_requests(), 0);
}

/// A link with room for 2 messages: the third send finds it full and is queued by the
/// general path; later sends must queue behind it (not overtake through the lean path),
/// and the receiver sees them all in order.
#[test]
fn sends_behind_a_full_link_keep_their_order() {
    let f = Fabric::new(
        2,
        1,
        vec![TransportConfig::new("sim").limits(64, 100).link(1, 0, 2)],
    );
    let mut job = Job::new(f, |_, _| 0);
    let msgs: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 4]).collect();
    let mut lean = 0;
    let mut ids = Vec::new();
    for m in &msgs {
        match job.e[0].send_eager_now(1, 3, 0, m).unwrap() {
            Some(id) => {
                lean += 1;
                ids.push(id);
            }
            None => ids.push(job.isend(0, 1, 3, m)),
        }
    }
    assert_eq!(lean, 2, "the link holds two; the rest wait in order");
    let mut bufs = vec![[0u8; 4]; msgs.len()];
    let recvs: Vec<ReqId> = bufs
        .iter_mut()
        .map(|b| {
            let e = &mut job.e[1];
            let id = e.new_request(
                None,
                Buf(b.as_mut_ptr()),
                4,
                byte(),
                CommId::WORLD,
                0,
                3,
                false,
            );
            e.start(id).expect("start receive");
            id
        })
        .collect();
    for r in recvs {
        job.wait(1, r);
    }
    for id in ids {
        job.wait(0, id);
    }
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(b, &[i as u8; 4], "message {i} out of order");
    }
}
