//! The request layer over a native device (`tsunagi_p2p::sim_device`): ranks 0 and 1 share
//! a simulated transport, rank 2 sits "on another site" behind a device. Short, long and
//! synchronous messages, truncation, probe, cancel of sends (matched or not) and of
//! receives, non-contiguous data, and wildcard receives that mix the two paths in MPI's
//! order.

use tsunagi_p2p::sim_device::DeviceFabric;

use super::*;

/// Device messages longer than this are "long" (first part, then the rest on accept).
const FIRST: usize = 100;

struct Grid {
    job: Job,
    dev: DeviceFabric,
}

/// Three ranks: 0 and 1 over a sim transport, 2 reached by the device from both.
fn grid() -> Grid {
    let f = Fabric::new(3, 1, vec![TransportConfig::new("sim").limits(64, 128)]);
    let dev = DeviceFabric::new(3, FIRST);
    let d = dev.clone();
    let job = Job::with_routers(f.clone(), |me| {
        let mut r = Router::new(3);
        r.add(Box::new(SelfTransport::new(me)), &[me]);
        let site: Vec<Rank> = (0..2).filter(|&p| p != me && me < 2).collect();
        if !site.is_empty() {
            r.add(Box::new(f.transport(me, 0)), &site);
        }
        let remote: Vec<Rank> = if me == 2 { vec![0, 1] } else { vec![2] };
        r.add_device(Box::new(d.device(me)), &remote);
        r
    });
    Grid { job, dev }
}

impl Grid {
    fn settle(&mut self) {
        for _ in 0..STEP_LIMIT {
            self.job.step();
            if self.dev.in_flight() == 0
                && self.job.fabric.in_flight() == 0
                && self.job.e.iter().all(|e| !e.core.has_outgoing())
            {
                return;
            }
        }
        panic!("the grid did not settle");
    }
}

#[test]
fn short_long_and_synchronous_messages_cross_the_device() {
    let mut g = grid();
    for (i, len) in [0usize, 1, 99, 100, 101, 350, 1000].into_iter().enumerate() {
        for mode in [SendMode::Standard, SendMode::Synchronous] {
            let data = fill(i as u64 + 10, len);
            let s = g.job.isend_on(CommId::WORLD, 0, 2, i as i32, &data, mode);
            let long = len > FIRST;
            if long || mode == SendMode::Synchronous {
                g.job.steps(5);
                assert!(
                    g.job.test(0, s).is_none(),
                    "{len} bytes {mode:?}: the send completed before the receiver matched"
                );
            }
            let mut buf = vec![0u8; len];
            let r = g.job.irecv(2, 0, i as i32, &mut buf);
            let st = g.job.wait(2, r);
            assert_eq!(
                (st.source, st.tag, st.bytes, st.error),
                (0, i as i32, len, 0)
            );
            assert_eq!(buf, data, "{len} bytes {mode:?}");
            g.job.wait(0, s);
        }
    }
    // And the other way, a receive posted before the message.
    let data = fill(99, 777);
    let mut buf = vec![0u8; 777];
    let r = g.job.irecv(1, 2, 3, &mut buf);
    let s = g.job.isend(2, 1, 3, &data);
    assert_eq!(g.job.wait(1, r).bytes, 777);
    g.job.wait(2, s);
    assert_eq!(buf, data);
    g.settle();
}

#[test]
fn truncation_over_the_device() {
    let mut g = grid();
    for len in [50usize, 500] {
        let data = fill(len as u64, len);
        let s = g.job.isend(0, 2, 1, &data);
        let mut buf = vec![0u8; 40];
        let r = g.job.irecv(2, 0, 1, &mut buf);
        let st = g.job.wait(2, r);
        assert_eq!((st.bytes, st.error), (40, TRUNCATE), "{len} bytes into 40");
        assert_eq!(buf[..], data[..40]);
        g.job.wait(0, s);
    }
    g.settle();
}

#[test]
fn probe_sees_a_device_message_once_its_first_part_is_in() {
    let mut g = grid();
    let data = fill(5, 400);
    let s = g.job.isend(2, 0, 77, &data);
    let mut found = None;
    for _ in 0..50 {
        g.job.step();
        found = g.job.e[0]
            .probe(CommId::WORLD, ANY_SOURCE, ANY_TAG, false)
            .unwrap();
        if found.is_some() {
            break;
        }
    }
    let (st, _) = found.expect("probe never saw the message");
    assert_eq!((st.source, st.tag, st.bytes), (2, 77, 400));
    assert!(
        g.job.test(2, s).is_none(),
        "a long send waits for the match"
    );
    let mut buf = vec![0u8; 400];
    let r = g.job.irecv(0, ANY_SOURCE, 77, &mut buf);
    g.job.wait(0, r);
    g.job.wait(2, s);
    assert_eq!(buf, data);
}

#[test]
fn cancel_of_device_sends_before_and_after_the_match() {
    let mut g = grid();
    // Not matched: the receiver forgets it, the send reports cancelled.
    let data = fill(6, 300);
    let s = g
        .job
        .isend_on(CommId::WORLD, 0, 2, 4, &data, SendMode::Synchronous);
    g.job.steps(3);
    g.job.e[0].cancel(s).unwrap();
    let st = g.job.wait(0, s);
    assert!(st.cancelled, "an unmatched device send is cancelled");
    assert!(
        g.job.e[2]
            .probe(CommId::WORLD, 0, 4, false)
            .unwrap()
            .is_none(),
        "the cancelled message left the receiver's unexpected queue"
    );
    // Matched: too late, it completes normally.
    let data2 = fill(7, 300);
    let mut buf = vec![0u8; 300];
    let r = g.job.irecv(2, 0, 4, &mut buf);
    let s2 = g.job.isend(0, 2, 4, &data2);
    g.job.wait(2, r);
    g.job.e[0].cancel(s2).unwrap();
    let st2 = g.job.wait(0, s2);
    assert!(!st2.cancelled);
    assert_eq!(buf, data2);
    // A short standard send is complete at once: nothing to cancel.
    let s3 = g.job.isend(0, 2, 5, &[3; 8]);
    g.job.e[0].cancel(s3).unwrap();
    assert!(!g.job.wait(0, s3).cancelled);
    let mut b3 = [0u8; 8];
    let r3 = g.job.irecv(2, 0, 5, &mut b3);
    g.job.wait(2, r3);
    assert_eq!(b3, [3; 8]);
    // Receives from a device peer cancel as any other.
    let mut b4 = [0u8; 8];
    let r4 = g.job.irecv(2, 1, 6, &mut b4);
    g.job.e[2].cancel(r4).unwrap();
    assert!(g.job.wait(2, r4).cancelled);
    g.settle();
}

#[test]
fn non_contiguous_data_over_the_device() {
    let mut g = grid();
    // Every other int of 300 (1200 bytes of payload: long).
    let ints: Vec<i32> = (0..600).collect();
    let int = Datatype::builtin(Builtin::Int);
    let vec_t: TypeRef = Arc::new(Datatype::vector(300, 1, 2, &int).unwrap());
    vec_t.commit();
    let e0 = &mut g.job.e[0];
    let s = e0.new_request(
        Some(SendMode::Standard),
        Buf(ints.as_ptr() as *mut u8),
        1,
        vec_t.clone(),
        CommId::WORLD,
        2,
        9,
        false,
    );
    e0.start(s).unwrap();
    let mut out = vec![-1i32; 600];
    let e2 = &mut g.job.e[2];
    let r = e2.new_request(
        None,
        Buf(out.as_mut_ptr() as *mut u8),
        1,
        vec_t,
        CommId::WORLD,
        0,
        9,
        false,
    );
    e2.start(r).unwrap();
    assert_eq!(g.job.wait(2, r).bytes, 1200);
    g.job.wait(0, s);
    for (i, v) in out.iter().enumerate() {
        let want = if i % 2 == 0 { i as i32 } else { -1 };
        assert_eq!(*v, want, "element {i}");
    }
}

#[test]
fn wildcard_receives_mix_transport_and_device_in_order() {
    let mut g = grid();
    // Rank 1 (transport) and rank 2 (device) each send 20 messages to rank 0, numbered;
    // rank 0 receives 40 with MPI_ANY_SOURCE: per sender, order must be kept.
    let msgs: Vec<Vec<u8>> = (0..40)
        .map(|i| fill(i, 8 + (i as usize % 3) * 200))
        .collect();
    let mut sends = Vec::new();
    for i in 0..20 {
        sends.push((1, g.job.isend(1, 0, 3, &msgs[i])));
        sends.push((2, g.job.isend(2, 0, 3, &msgs[20 + i])));
    }
    let mut next = [0usize; 3];
    for _ in 0..40 {
        let mut buf = vec![0u8; 1000];
        let r = g.job.irecv(0, ANY_SOURCE, 3, &mut buf);
        let st = g.job.wait(0, r);
        let src = st.source as usize;
        let k = next[src] + if src == 2 { 20 } else { 0 };
        next[src] += 1;
        assert_eq!(
            &buf[..st.bytes],
            &msgs[k][..],
            "message {} from rank {src} out of order",
            next[src] - 1
        );
    }
    for (at, s) in sends {
        g.job.wait(at, s);
    }
    assert_eq!(next, [0, 20, 20]);
    g.settle();
}

#[test]
fn external32_devices_convert_at_both_ends() {
    use tsunagi_p2p::device::DataRep;
    let f = Fabric::new(2, 1, vec![TransportConfig::new("sim").limits(64, 128)]);
    let dev = DeviceFabric::new(2, FIRST).with_rep(DataRep::External32);
    let d = dev.clone();
    let mut job = Job::with_routers(f, |me| {
        let mut r = Router::new(2);
        r.add(Box::new(SelfTransport::new(me)), &[me]);
        r.add_device(Box::new(d.device(me)), &[1 - me]);
        r
    });
    // C longs are 8 bytes here and 4 in external32: 40 longs are 160 bytes on the wire
    // (long: more than FIRST), 320 in memory. Doubles keep every bit.
    let long_t = Datatype::builtin(Builtin::Long);
    let longs: Vec<i64> = (0..40).map(|i| i * 1_000_003 - 20_000_000).collect();
    let doubles: Vec<f64> = vec![1.0, -0.0, f64::INFINITY, f64::MIN_POSITIVE / 8.0, 0.1];
    let double_t = Datatype::builtin(Builtin::Double);
    let s1 = job.e[0].new_request(
        Some(SendMode::Standard),
        Buf(longs.as_ptr() as *mut u8),
        40,
        long_t.clone(),
        CommId::WORLD,
        1,
        1,
        false,
    );
    job.e[0].start(s1).unwrap();
    let s2 = job.e[0].new_request(
        Some(SendMode::Standard),
        Buf(doubles.as_ptr() as *mut u8),
        5,
        double_t.clone(),
        CommId::WORLD,
        1,
        2,
        false,
    );
    job.e[0].start(s2).unwrap();
    let mut got_l = vec![0i64; 40];
    let r1 = job.e[1].new_request(
        None,
        Buf(got_l.as_mut_ptr() as *mut u8),
        40,
        long_t.clone(),
        CommId::WORLD,
        0,
        1,
        false,
    );
    job.e[1].start(r1).unwrap();
    let mut got_d = vec![0f64; 5];
    let r2 = job.e[1].new_request(
        None,
        Buf(got_d.as_mut_ptr() as *mut u8),
        5,
        double_t,
        CommId::WORLD,
        0,
        2,
        false,
    );
    job.e[1].start(r2).unwrap();
    assert_eq!(job.wait(1, r1).bytes, 320, "the status counts native bytes");
    assert_eq!(job.wait(1, r2).bytes, 40);
    job.wait(0, s1);
    job.wait(0, s2);
    assert_eq!(got_l, longs);
    for (a, b) in got_d.iter().zip(&doubles) {
        assert_eq!(a.to_bits(), b.to_bits());
    }
    // A long beyond 32 bits cannot cross: the send fails with MPI_ERR_CONVERSION.
    let big = [5_000_000_000i64];
    let s3 = job.e[0].new_request(
        Some(SendMode::Standard),
        Buf(big.as_ptr() as *mut u8),
        1,
        long_t,
        CommId::WORLD,
        1,
        3,
        false,
    );
    let e = job.e[0].start(s3).unwrap_err();
    assert_eq!(e.class, ErrorClass::Conversion, "{e}");
}

/// external32 receives convert part by part: elements of a strided type (12 bytes in
/// external32, 24 packed natively) split between the device's 100-byte parts, into an
/// exact receive (gaps untouched) and a short one (truncated after whole elements, the
/// status counting the native bytes written).
#[test]
fn external32_receives_convert_elements_split_between_parts() {
    use tsunagi_p2p::device::DataRep;
    let f = Fabric::new(2, 1, vec![TransportConfig::new("sim").limits(64, 128)]);
    let dev = DeviceFabric::new(2, FIRST).with_rep(DataRep::External32);
    let d = dev.clone();
    let mut job = Job::with_routers(f, |me| {
        let mut r = Router::new(2);
        r.add(Box::new(SelfTransport::new(me)), &[me]);
        r.add_device(Box::new(d.device(me)), &[1 - me]);
        r
    });
    let long_t = Datatype::builtin(Builtin::Long);
    // Three longs, every other one: extent 5 longs (40 bytes).
    let v: TypeRef = Arc::new(Datatype::vector(3, 1, 2, &long_t).unwrap());
    v.commit();
    let longs: Vec<i64> = (0..100).map(|i| i * 7 - 300).collect();
    for (count, want_bytes, truncated) in [(20usize, 480usize, false), (13, 312, true)] {
        let s = job.e[0].new_request(
            Some(SendMode::Standard),
            Buf(longs.as_ptr() as *mut u8),
            20,
            v.clone(),
            CommId::WORLD,
            1,
            5,
            false,
        );
        job.e[0].start(s).unwrap();
        let mut got = vec![-1i64; 100];
        let r = job.e[1].new_request(
            None,
            Buf(got.as_mut_ptr() as *mut u8),
            count,
            v.clone(),
            CommId::WORLD,
            0,
            5,
            false,
        );
        job.e[1].start(r).unwrap();
        let st = job.wait(1, r);
        job.wait(0, s);
        assert_eq!(st.bytes, want_bytes, "{count} elements");
        assert_eq!(
            st.error == ErrorClass::Truncate as i32,
            truncated,
            "{count}"
        );
        for (i, x) in got.iter().enumerate() {
            let elem = i / 5;
            let want = if elem < count && (i % 5) % 2 == 0 {
                longs[i]
            } else {
                -1
            };
            assert_eq!(*x, want, "long {i} of a {count}-element receive");
        }
    }
}
