//! A tour of the rest of the API, checking results: communicator management, probes,
//! matched probes, request handling (test, wait_any, cancel, dropped requests), send
//! modes, buffered sends, and errors for bad arguments.
use tsunagi::point_to_point::Status;
use tsunagi::request::{self, StaticScope};
use tsunagi::topology::{Color, Communicator, Comparison};
use tsunagi::traits::*;
use tsunagi::ErrorClass;

fn check(ok: bool, what: &str) {
    if !ok {
        eprintln!("api_tour: FAILED: {what}");
        std::process::exit(1);
    }
}

fn main() {
    let (mut universe, threading) =
        tsunagi::initialize_with_threading(tsunagi::Threading::Multiple).expect("init");
    check(
        tsunagi::initialize().is_none(),
        "second initialize gives None",
    );
    check(threading <= tsunagi::Threading::Multiple, "threading level");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev_rank = (rank + size - 1) % size;
    let prev = world.process_at_rank(prev_rank);
    let t0 = tsunagi::time();

    // Errors, not panics.
    let e = world.process_at_rank(size).send(&1u8).unwrap_err();
    check(e.class() == ErrorClass::Rank, "bad rank is a Rank error");
    let e = next.send_with_tag(&1u8, -5).unwrap_err();
    check(e.class() == ErrorClass::Tag, "bad tag is a Tag error");
    check(
        world.split_by_color(Color::with_value(-3)).is_err(),
        "negative colour is an error",
    );
    check(tsunagi::version() == (4, 1), "version");
    check(
        tsunagi::library_version().contains("Tsunagi"),
        "library version",
    );

    // Null process.
    world
        .null_process()
        .send(&5u32)
        .expect("send to null process");
    let st = world
        .null_process()
        .receive_into(&mut [0u32; 2][..])
        .expect("receive from null process");
    check(st.source_rank() == tsunagi::raw::PROC_NULL, "null status");

    // Duplicate, split, group, names.
    let dup = world.duplicate().expect("dup");
    check(dup.rank() == rank && dup.size() == size, "dup rank/size");
    dup.set_name("tour-dup").expect("set name");
    check(dup.get_name().unwrap() == "tour-dup", "name");
    let halves = world
        .split_by_color_with_key(Color::with_value(rank % 2), -rank)
        .expect("split")
        .expect("in a half");
    let half_size = (size + 1 - rank % 2) / 2;
    check(halves.size() == half_size, "half size");
    // Keys are -rank: reversed order.
    check(halves.rank() == half_size - 1 - rank / 2, "half rank order");
    let none = world
        .split_by_color(if rank == 0 {
            Color::undefined()
        } else {
            Color::with_value(0)
        })
        .expect("split undefined");
    check(none.is_none() == (rank == 0), "undefined colour gives None");
    let g = world.group().expect("group");
    check(g.size() == size && g.rank() == Some(rank), "group");
    let g0 = g.include(&[0]).expect("incl");
    check(
        g0.rank() == (if rank == 0 { Some(0) } else { None }),
        "subgroup rank",
    );
    let only0 = world
        .split_by_subgroup_collective(&g0)
        .expect("comm create");
    check(only0.is_some() == (rank == 0), "comm create membership");
    check(g.include(&[size + 3]).is_err(), "bad incl is an error");
    let evens = g.range_include(&[[0, size - 1, 2]]).expect("range incl");
    let odds = g.difference(&evens);
    check(evens.size() + odds.size() == size, "partition sizes");
    check(
        evens.union(&odds).compare(&g) == Comparison::Similar || size <= 2,
        "union of evens and odds is similar to world",
    );
    check(evens.intersection(&odds).size() == 0, "disjoint");
    check(g.exclude(&[0]).expect("excl").size() == size - 1, "exclude");
    let tr = g
        .translate_ranks(&[0, size - 1], &evens)
        .expect("translate");
    check(tr[0] == 0, "rank 0 is evens' 0");
    check(
        (tr[1] == tsunagi::topology::Group::UNDEFINED_RANK) == ((size - 1) % 2 == 1),
        "translate of the last rank",
    );
    check(
        dup.compare(&world).unwrap() == Comparison::Congruent,
        "dup congruent",
    );
    check(world.compare(&world).unwrap() == Comparison::Ident, "ident");
    let node = world.split_shared(0).expect("split shared");
    check(node.size() >= 1 && node.size() <= size, "node communicator");
    if std::env::var("TSUNAGI_NODE_MAP").as_deref() == Ok("2") && size % 2 == 0 {
        check(node.size() == 2, "two ranks per pretend node");
    }
    drop(node);
    drop(only0);
    drop(none);

    // Traffic on the halves is separate from traffic on world.
    let hn = halves.process_at_rank((halves.rank() + 1) % halves.size());
    let hp = halves.process_at_rank((halves.rank() + halves.size() - 1) % halves.size());
    let mut got = [0i64; 4];
    let mine = [rank as i64; 4];
    tsunagi::point_to_point::send_receive_into(&mine[..], &hn, &mut got[..], &hp)
        .expect("sendrecv on half");
    let hp_world = {
        // World rank of the half's previous member: halves hold ranks of one parity,
        // ordered by descending rank.
        let members: Vec<i32> = (0..size).filter(|r| r % 2 == rank % 2).rev().collect();
        members[hp.rank() as usize]
    };
    check(
        got == [hp_world as i64; 4],
        "sendrecv on split communicator",
    );
    let e = tsunagi::point_to_point::send_receive_into(&mine[..], &hn, &mut got[..], &prev);
    check(
        e.map_err(|e| e.class()) == Err(ErrorClass::Comm),
        "mixing communicators is an error",
    );

    // Probe, matched probe, immediate probe, any source.
    let payload: Vec<u16> = (0..(rank as u16 + 3)).collect();
    request::scope(|scope| {
        let s = next
            .immediate_send_with_tag(scope, &payload[..], 11)
            .expect("isend");
        let st = prev.probe_with_tag(11).expect("probe");
        check(
            st.count_of::<u16>() == Some(prev_rank as i64 + 3),
            "probe count",
        );
        let (msg, st2) = world
            .any_process()
            .matched_probe_with_tag(11)
            .expect("mprobe");
        check(st2.source_rank() == prev_rank, "mprobe source");
        let mut buf = vec![0u16; msg.bytes() / 2];
        let st3 = msg.matched_receive_into(&mut buf[..]).expect("mrecv");
        check(st3.tag() == 11, "mrecv tag");
        check(
            buf == (0..(prev_rank as u16 + 3)).collect::<Vec<_>>(),
            "mrecv data",
        );
        check(
            world
                .any_process()
                .immediate_probe_with_tag(12)
                .unwrap()
                .is_none(),
            "no message with tag 12",
        );
        s.wait().expect("wait");
    });

    // Requests: test loop, wait_any, a dropped request, cancel.
    let mut slots = vec![0u32; 3];
    let vals = [rank as u32, 100 + rank as u32, 200 + rank as u32];
    request::scope(|scope| {
        let mut recvs = Vec::new();
        for (i, slot) in slots.iter_mut().enumerate() {
            recvs.push(
                prev.immediate_receive_into_with_tag(scope, slot, 20 + i as i32)
                    .expect("irecv"),
            );
        }
        let mut sends = Vec::new();
        for (i, v) in vals.iter().enumerate().rev() {
            sends.push(
                next.immediate_send_with_tag(scope, v, 20 + i as i32)
                    .expect("isend"),
            );
        }
        let mut done = 0;
        while let Some((_, st)) = request::wait_any(&mut recvs).expect("wait_any") {
            check(st.source_rank() == prev_rank, "wait_any source");
            done += 1;
        }
        check(done == 3, "wait_any completed all");
        // Test until done.
        let mut r = sends.pop().unwrap();
        let st: Status = loop {
            match r.test() {
                Ok(res) => break res.expect("test"),
                Err(back) => r = back,
            }
        };
        check(!st.is_cancelled(), "send not cancelled");
        // The other two sends are dropped: the scope waits for them.
        drop(sends);
    });
    check(
        slots
            == [
                prev_rank as u32,
                100 + prev_rank as u32,
                200 + prev_rank as u32,
            ],
        "immediate receives",
    );
    let mut never = 0u8;
    request::scope(|scope| {
        let r = world
            .any_process()
            .immediate_receive_into_with_tag(scope, &mut never, 999)
            .expect("irecv");
        r.cancel().expect("cancel");
        let st = r.wait().expect("wait cancelled");
        check(st.is_cancelled(), "receive was cancelled");
    });

    // Truncation is an error.
    let big = [7u32; 8];
    request::scope(|scope| {
        let _s = next
            .immediate_send_with_tag(scope, &big[..], 30)
            .expect("isend");
        let mut small = [0u32; 2];
        let e = prev.receive_into_with_tag(&mut small[..], 30).unwrap_err();
        check(e.class() == ErrorClass::Truncate, "truncation error");
    });
    // A short message for receive::<T>() is an error too.
    request::scope(|scope| {
        let _s = next
            .immediate_send_with_tag(scope, &1u8, 31)
            .expect("isend");
        let e = prev.receive_with_tag::<u64>(31).unwrap_err();
        check(e.class() == ErrorClass::Count, "u8 into u64: short message");
    });

    // Send modes: synchronous, ready (after a barrier that follows the posted receive),
    // buffered through the universe's buffer and through an AttachedBuffer.
    let mut a = 0i32;
    request::scope(|scope| {
        let r = prev
            .immediate_receive_into_with_tag(scope, &mut a, 40)
            .expect("irecv");
        world.barrier().expect("barrier");
        next.ready_send_with_tag(&(rank * 2), 40).expect("rsend");
        r.wait().expect("wait");
    });
    check(a == prev_rank * 2, "ready send");
    let mut b = 0i32;
    request::scope(|scope| {
        let r = prev
            .immediate_receive_into_with_tag(scope, &mut b, 41)
            .expect("irecv");
        next.synchronous_send_with_tag(&(rank * 3), 41)
            .expect("ssend");
        r.wait().expect("wait");
    });
    check(b == prev_rank * 3, "synchronous send");
    universe
        .set_buffer_size(4096 + tsunagi::environment::BSEND_OVERHEAD * 4)
        .expect("attach");
    next.buffered_send_with_tag(&[rank as f64; 16][..], 42)
        .expect("bsend");
    let (v, _) = prev.receive_vec_with_tag::<f64>(42).expect("receive bsend");
    check(v == vec![prev_rank as f64; 16], "buffered send");
    universe
        .detach_buffer()
        .expect("detach")
        .expect("had a buffer");
    {
        let att = tsunagi::attach_buffer(vec![0u8; 1024]).expect("attach_buffer");
        check(
            tsunagi::attach_buffer(vec![0u8; 16]).is_err(),
            "second attach fails",
        );
        next.buffered_send_with_tag(&(rank as u64), 43)
            .expect("bsend");
        let (x, _) = prev.receive_with_tag::<u64>(43).expect("receive");
        check(x == prev_rank as u64, "attached-buffer send");
        drop(att);
    }

    // Static scope: 'static buffers, request released when dropped.
    static MSG: [u8; 5] = *b"hello";
    let r = next
        .immediate_send_with_tag(StaticScope, &MSG[..], 50)
        .expect("static isend");
    let (v, _) = prev.receive_vec_with_tag::<u8>(50).expect("receive");
    check(v == b"hello", "static scope send");
    drop(r);

    // A dropped unreceived matched message is discarded.
    request::scope(|scope| {
        let _s = next
            .immediate_send_with_tag(scope, &[1u8; 100][..], 60)
            .expect("isend");
        let (m, _) = prev.matched_probe_with_tag(60).expect("mprobe");
        drop(m);
    });
    check(
        world
            .any_process()
            .immediate_probe_with_tag(60)
            .unwrap()
            .is_none(),
        "discarded message",
    );

    // Several threads communicating at once (MPI_THREAD_MULTIPLE), each on its own tag.
    if threading == tsunagi::Threading::Multiple {
        std::thread::scope(|ts| {
            for t in 0..4i32 {
                let (dup, next, prev) = (
                    &dup,
                    dup.process_at_rank(next.rank()),
                    dup.process_at_rank(prev_rank),
                );
                ts.spawn(move || {
                    for i in 0..50i32 {
                        let mut got = [0i32; 2];
                        tsunagi::point_to_point::send_receive_into_with_tags(
                            &[rank, t * 1000 + i][..],
                            &next,
                            100 + t,
                            &mut got[..],
                            &prev,
                            100 + t,
                        )
                        .expect("threaded sendrecv");
                        check(got == [prev_rank, t * 1000 + i], "threaded exchange");
                    }
                    dup.rank()
                });
            }
        });
    }

    // Persistent requests: the same send and receive started several times.
    let out = [0u32; 4];
    let mut inbox = [0u32; 4];
    request::scope(|scope| {
        let mut s = next.send_init(scope, &out[..], 70).expect("send_init");
        let mut r = prev
            .receive_init(scope, &mut inbox[..], 70)
            .expect("recv_init");
        for _ in 0..5 {
            r.start().expect("start recv");
            s.start().expect("start send");
            check(s.start().is_err(), "starting an active request is an error");
            let st = r.wait().expect("wait recv");
            check(st.count_of::<u32>() == Some(4), "persistent count");
            s.wait().expect("wait send");
        }
        // Left active: the scope completes and frees it.
        r.start().expect("start recv");
        s.start().expect("start send");
    });

    drop(dup);
    drop(halves);
    world.barrier().expect("barrier");
    check(tsunagi::time() >= t0, "time goes forward");
    println!("api_tour: rank {rank} of {size} ({threading:?}) OK");
}
