//! The lean receive path (`Engine::post_recv`, `Engine::collect`): a receive posted before
//! its message, one posted after it, wildcards, truncation, cancel, synchronous and
//! rendezvous senders, and MPI's order across receives of the lean and the general path.

use super::*;
use crate::engine::{RecvArgs, ANY_WORLD};

/// Post a receive through the lean path at rank `at` (WORLD, so the world rank of a
/// named source is the source itself).
fn post(job: &mut Job, at: Rank, src: i32, tag: i32, buf: &mut [u8]) -> ReqId {
    let args = RecvArgs {
        buf: Buf(buf.as_mut_ptr()),
        count: buf.len(),
        comm: CommId::WORLD,
        peer: src,
        src_world: if src == ANY_SOURCE {
            ANY_WORLD
        } else {
            src as Rank
        },
        tag,
        context: 0,
    };
    job.e[at as usize]
        .post_recv(args, &byte())
        .expect("post receive")
}

/// Step until `collect` hands out the status of `id` (bounded).
fn collect_wait(job: &mut Job, at: Rank, id: ReqId) -> Status {
    for _ in 0..STEP_LIMIT {
        if let Some(st) = job.e[at as usize].collect(id).expect("a live request") {
            return st;
        }
        job.step();
    }
    panic!("lean receive {} of rank {at} did not complete", id.0);
}

#[test]
fn a_receive_posted_before_its_message_completes_on_arrival() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let mut buf = [0u8; 8];
    let r = post(&mut job, 1, 0, 7, &mut buf);
    assert_eq!(job.e[1].collect(r), Ok(None), "nothing arrived yet");
    assert!(job.e[0]
        .send_eager_now(1, 7, 0, b"abcdefgh")
        .unwrap()
        .is_some());
    let st = collect_wait(&mut job, 1, r);
    assert_eq!((st.source, st.tag, st.bytes, st.error), (0, 7, 8, 0));
    assert_eq!(&buf, b"abcdefgh");
    assert_eq!(job.e[1].live_requests(), 0, "collected: the slot is free");
    assert_eq!(job.e[1].collect(r), Err(()), "a collected id names nothing");
}

#[test]
fn a_receive_posted_after_its_message_completes_at_once() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    assert!(job.e[0]
        .send_eager_now(1, 3, 0, b"early")
        .unwrap()
        .is_some());
    job.settle();
    let mut buf = [0u8; 16];
    let r = post(&mut job, 1, 0, 3, &mut buf);
    let st = job.e[1]
        .collect(r)
        .unwrap()
        .expect("matched in the unexpected queue, complete without a step");
    assert_eq!((st.source, st.tag, st.bytes), (0, 3, 5));
    assert_eq!(&buf[..5], b"early");
}

#[test]
fn wildcard_receives_report_the_sender_and_keep_posted_order() {
    let mut job = one_transport(3, 64, 100, SingleCopy::Off);
    let (mut a, mut b, mut c) = ([0u8; 4], [0u8; 4], [0u8; 4]);
    // Posted in this order: any source and tag, then rank 2 tag 1, then any source tag 1.
    let any = post(&mut job, 0, ANY_SOURCE, ANY_TAG, &mut a);
    let from2 = post(&mut job, 0, 2, 1, &mut b);
    let any_tag1 = post(&mut job, 0, ANY_SOURCE, 1, &mut c);
    job.e[2].send_eager_now(0, 1, 0, b"2one").unwrap().unwrap();
    job.settle();
    // The first posted receive that accepts it is the full wildcard.
    let st = collect_wait(&mut job, 0, any);
    assert_eq!((st.source, st.tag, st.bytes), (2, 1, 4));
    assert_eq!(&a, b"2one");
    assert_eq!(job.e[0].collect(from2), Ok(None));
    job.e[1].send_eager_now(0, 1, 0, b"1one").unwrap().unwrap();
    job.e[2].send_eager_now(0, 1, 0, b"2two").unwrap().unwrap();
    job.settle();
    let st = collect_wait(&mut job, 0, from2);
    assert_eq!((st.source, &b), (2, b"2two"));
    let st = collect_wait(&mut job, 0, any_tag1);
    assert_eq!((st.source, st.tag, &c), (1, 1, b"1one"));
    // A wildcard posted after unexpected messages takes the earliest.
    job.e[1].send_eager_now(0, 9, 0, b"1nin").unwrap().unwrap();
    job.settle();
    job.e[2].send_eager_now(0, 9, 0, b"2nin").unwrap().unwrap();
    job.settle();
    let mut d = [0u8; 4];
    let r = post(&mut job, 0, ANY_SOURCE, 9, &mut d);
    let st = job.e[0].collect(r).unwrap().expect("complete at once");
    assert_eq!((st.source, &d), (1, b"1nin"));
}

#[test]
fn a_short_buffer_gets_what_fits_and_a_truncation_error() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let mut buf = [0u8; 4];
    let r = post(&mut job, 1, 0, 0, &mut buf);
    job.e[0]
        .send_eager_now(1, 0, 0, b"12345678")
        .unwrap()
        .unwrap();
    let st = collect_wait(&mut job, 1, r);
    assert_eq!((st.error, st.bytes), (TRUNCATE, 4));
    assert_eq!(&buf, b"1234");
    // The same for a message already there, and for a rendezvous message.
    job.e[0]
        .send_eager_now(1, 1, 0, b"abcdefgh")
        .unwrap()
        .unwrap();
    let big = fill(1, 300);
    let s = job.isend(0, 1, 2, &big);
    job.settle();
    let r = post(&mut job, 1, 0, 1, &mut buf);
    let st = job.e[1].collect(r).unwrap().expect("complete at once");
    assert_eq!((st.error, st.bytes, &buf), (TRUNCATE, 4, b"abcd"));
    let mut mid = vec![0u8; 200];
    let r = post(&mut job, 1, 0, 2, &mut mid);
    let st = collect_wait(&mut job, 1, r);
    assert_eq!((st.error, st.bytes), (TRUNCATE, 200));
    assert_eq!(&mid[..], &big[..200]);
    job.wait(0, s);
}

#[test]
fn a_cancelled_receive_leaves_its_message_to_the_next() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let mut first = [0u8; 4];
    let r = post(&mut job, 1, 0, 5, &mut first);
    job.e[1].cancel(r).expect("cancel");
    let st = job.e[1]
        .collect(r)
        .unwrap()
        .expect("a cancelled receive is complete");
    assert!(st.cancelled);
    job.e[0].send_eager_now(1, 5, 0, b"late").unwrap().unwrap();
    job.settle();
    assert_eq!(first, [0; 4], "the cancelled buffer is untouched");
    let mut second = [0u8; 4];
    let r2 = post(&mut job, 1, 0, 5, &mut second);
    let st = job.e[1]
        .collect(r2)
        .unwrap()
        .expect("the message waited for it");
    assert!(!st.cancelled);
    assert_eq!(&second, b"late");
}

/// Receives of the lean and of the general path, posted alternately for the same source
/// and tag, and messages sent alternately through the lean send and the general send, both
/// before and after the receives: message i lands in receive i.
#[test]
fn order_holds_across_the_lean_and_the_general_path() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let msgs: Vec<Vec<u8>> = (0..12u8).map(|i| vec![i; 1 + i as usize % 5]).collect();
    // The first half arrives before any receive is posted.
    let mut sends = Vec::new();
    for (i, m) in msgs.iter().enumerate().take(6) {
        if i % 2 == 0 {
            job.e[0].send_eager_now(1, 4, 0, m).unwrap().unwrap();
        } else {
            sends.push(job.isend(0, 1, 4, m));
        }
    }
    job.settle();
    let mut bufs = vec![[0xffu8; 8]; msgs.len()];
    let mut recvs = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate() {
        recvs.push(if i % 3 == 0 {
            (true, job.irecv(1, 0, 4, b))
        } else {
            (false, post(&mut job, 1, 0, 4, b))
        });
    }
    for (i, m) in msgs.iter().enumerate().skip(6) {
        if i % 2 == 1 {
            job.e[0].send_eager_now(1, 4, 0, m).unwrap().unwrap();
        } else {
            sends.push(job.isend(0, 1, 4, m));
        }
    }
    for (i, (general, r)) in recvs.into_iter().enumerate() {
        let st = if general {
            job.wait(1, r)
        } else {
            collect_wait(&mut job, 1, r)
        };
        assert_eq!(st.bytes, msgs[i].len(), "receive {i}");
        assert_eq!(
            &bufs[i][..st.bytes],
            &msgs[i][..],
            "receive {i} got another message"
        );
    }
    for s in sends {
        job.wait(0, s);
    }
    assert_eq!(job.e[1].live_requests(), 0);
}

/// A synchronous sender completes only once its message met a receive, also when that
/// receive is a lean one posted later; a rendezvous message reaches a lean receive posted
/// before or after its announcement.
#[test]
fn synchronous_and_rendezvous_senders_meet_lean_receives() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let s = job.isend_on(CommId::WORLD, 0, 1, 6, b"sync", SendMode::Synchronous);
    job.settle();
    assert_eq!(job.test(0, s), None, "no receive yet");
    let mut buf = [0u8; 4];
    let r = post(&mut job, 1, 0, 6, &mut buf);
    assert_eq!(&buf, b"sync");
    job.e[1].collect(r).unwrap().expect("complete");
    let st = job.wait(0, s);
    assert_eq!(st.bytes, 4);
    for posted_first in [true, false] {
        let big = fill(posted_first as u64, 1000);
        let mut into = vec![0u8; 1000];
        let (r, s) = if posted_first {
            let r = post(&mut job, 1, 0, 8, &mut into);
            (r, job.isend(0, 1, 8, &big))
        } else {
            let s = job.isend(0, 1, 8, &big);
            job.settle();
            (post(&mut job, 1, 0, 8, &mut into), s)
        };
        let st = collect_wait(&mut job, 1, r);
        assert_eq!((st.bytes, st.error), (1000, 0));
        assert_eq!(into, big, "posted first: {posted_first}");
        job.wait(0, s);
    }
}
