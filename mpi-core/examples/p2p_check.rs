//! Point-to-point checks of the core, run under a launcher with 1..8 ranks:
//! `mpirun -n 4 p2p_check <test>...` (no test names = all). Every check asserts; a failure
//! prints `FAIL ...` and exits 1. Rank 0 prints `OK <test>` per passed test.

use std::sync::Arc;

use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::group::Group;
use tsunagi_core::{
    finalize, init, CommId, ErrHandler, ErrorClass, Runtime, SendMode, ThreadLevel, ANY_SOURCE,
    ANY_TAG, PROC_NULL,
};

fn fail(msg: String) -> ! {
    eprintln!("FAIL: {msg}");
    std::process::exit(1);
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            fail(format!("{}:{}: {}", file!(), line!(), format!($($fmt)*)));
        }
    };
}

fn byte() -> TypeRef {
    Datatype::builtin(Builtin::Byte)
}
fn int() -> TypeRef {
    Datatype::builtin(Builtin::Int)
}

/// Deterministic payload for (src, dst, seq): every byte depends on all three.
fn fill(buf: &mut [u8], src: usize, dst: usize, seq: usize) {
    let mut x = (src as u64 * 1_000_003 + dst as u64 * 7919 + seq as u64 * 104_729) | 1;
    for b in buf.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn send_bytes(rt: &Runtime, buf: &[u8], dest: i32, tag: i32, comm: CommId) {
    // SAFETY: `buf` is a live slice of `buf.len()` bytes for the blocking call.
    unsafe {
        rt.send(
            "MPI_Send",
            buf.as_ptr(),
            buf.len() as i64,
            &byte(),
            dest,
            tag,
            comm,
            SendMode::Standard,
        )
    }
    .unwrap_or_else(|e| fail(format!("send: {e}")));
}

fn recv_bytes(
    rt: &Runtime,
    buf: &mut [u8],
    src: i32,
    tag: i32,
    comm: CommId,
) -> tsunagi_core::Status {
    // SAFETY: `buf` is a live, exclusively borrowed slice for the blocking call.
    unsafe {
        rt.recv(
            "MPI_Recv",
            buf.as_mut_ptr(),
            buf.len() as i64,
            &byte(),
            src,
            tag,
            comm,
        )
    }
    .unwrap_or_else(|e| fail(format!("recv: {e}")))
}

/// Sizes straddling every transport's eager limit, up to 64 MiB, with checksums, in a ring.
fn test_sizes(rt: &Runtime) {
    let (me, n) = (rt.world_rank(), rt.world_size());
    let mut sizes = vec![0usize, 1, 7, 8, 63, 64, 65, 1000, 4095, 4096, 4097];
    for edge in [16 * 1024usize, 32 * 1024, 64 * 1024, 256 * 1024] {
        sizes.extend([edge - 1, edge, edge + 1]);
    }
    sizes.extend([1 << 20, (4 << 20) + 3, 64 << 20]);
    let right = ((me + 1) % n) as i32;
    let left = ((me + n - 1) % n) as i32;
    for (seq, &sz) in sizes.iter().enumerate() {
        let mut out = vec![0u8; sz];
        fill(&mut out, me, right as usize, seq);
        let mut inb = vec![0u8; sz];
        // SAFETY: both buffers outlive the sendrecv.
        let st = unsafe {
            rt.sendrecv(
                out.as_ptr(),
                sz as i64,
                &byte(),
                right,
                seq as i32,
                inb.as_mut_ptr(),
                sz as i64,
                &byte(),
                left,
                seq as i32,
                CommId::WORLD,
            )
        }
        .unwrap_or_else(|e| fail(format!("sendrecv {sz}: {e}")));
        let mut want = vec![0u8; sz];
        fill(&mut want, left as usize, me, seq);
        check!(inb == want, "size {sz}: payload from rank {left} corrupted");
        check!(
            st.bytes == sz && st.source == left && st.tag == seq as i32,
            "size {sz}: status {st:?}"
        );
    }
}

/// Many messages, many tags, wildcards: MPI's non-overtaking order must hold per (source, tag)
/// and per source for ANY_TAG.
fn test_order(rt: &Runtime) {
    let (me, n) = (rt.world_rank(), rt.world_size());
    const PER_PEER: usize = 300;
    // Everyone sends to rank 0 (a hot spot), sizes cycling across the eager limit.
    if me != 0 {
        let mut reqs = Vec::new();
        let mut bufs = Vec::new();
        for i in 0..PER_PEER {
            let sz = [4usize, 100, 20_000, 70_000][i % 4];
            let mut b = vec![0u8; sz.max(8)];
            b[..8].copy_from_slice(&(i as u64).to_ne_bytes());
            bufs.push(b);
        }
        for (i, b) in bufs.iter().enumerate() {
            let tag = (i % 5) as i32;
            // SAFETY: `bufs` lives until the waitall below.
            let r = unsafe {
                rt.isend(
                    "MPI_Isend",
                    b.as_ptr(),
                    b.len() as i64,
                    &byte(),
                    0,
                    tag,
                    CommId::WORLD,
                    SendMode::Standard,
                )
            }
            .unwrap_or_else(|e| fail(format!("isend: {e}")));
            reqs.push(Some(r));
        }
        rt.waitall("MPI_Waitall", &reqs)
            .unwrap_or_else(|e| fail(format!("waitall: {e}")));
    } else {
        let mut last = vec![-1i64; n];
        let mut last_tag = vec![vec![-1i64; 5]; n];
        let mut buf = vec![0u8; 70_000];
        // Full wildcards: every message is taken in arrival order, and per-sender order
        // (non-overtaking) is checked below.
        for _ in 0..PER_PEER * (n - 1) {
            let (src, tag) = (ANY_SOURCE, ANY_TAG);
            let st = recv_bytes(rt, &mut buf, src, tag, CommId::WORLD);
            let s = st.source as usize;
            let seq = u64::from_ne_bytes(buf[..8].try_into().unwrap()) as i64;
            check!(seq > last[s], "from {s}: seq {seq} after {}", last[s]);
            check!(seq > last_tag[s][st.tag as usize], "tag order from {s}");
            check!(st.tag as i64 == seq % 5, "tag {} for seq {seq}", st.tag);
            last[s] = seq;
            last_tag[s][st.tag as usize] = seq;
        }
        for (s, l) in last.iter().enumerate().skip(1) {
            check!(*l == PER_PEER as i64 - 1, "rank {s}: last seq {l}");
        }
    }
    // Specific-tag receives posted in reverse tag order, before the sends (posted queue).
    if n >= 2 && me < 2 {
        let peer = (1 - me) as i32;
        let mut bufs = vec![vec![0u8; 16]; 4];
        let mut reqs = Vec::new();
        for (t, b) in bufs.iter_mut().enumerate().rev() {
            // SAFETY: `bufs` outlives the waitall.
            reqs.push(Some(
                unsafe {
                    rt.irecv(
                        "MPI_Irecv",
                        b.as_mut_ptr(),
                        16,
                        &byte(),
                        peer,
                        t as i32 + 10,
                        CommId::WORLD,
                    )
                }
                .unwrap(),
            ));
        }
        rt.barrier_internal(CommId::WORLD).unwrap();
        for t in 0..4 {
            let b = [t as u8 + 1; 16];
            send_bytes(rt, &b, peer, t + 10, CommId::WORLD);
        }
        rt.waitall("MPI_Waitall", &reqs).unwrap();
        for (t, b) in bufs.iter().enumerate() {
            check!(
                b.iter().all(|&x| x == t as u8 + 1),
                "tag {} got {:?}",
                t + 10,
                &b[..2]
            );
        }
    } else {
        rt.barrier_internal(CommId::WORLD).unwrap();
    }
}

/// Send modes, persistent requests, probes, cancel, PROC_NULL, completion calls.
fn test_modes(rt: &Runtime) {
    let (me, n) = (rt.world_rank(), rt.world_size());
    let right = ((me + 1) % n) as i32;
    let left = ((me + n - 1) % n) as i32;
    let w = CommId::WORLD;
    // Synchronous, ready (receive pre-posted + barrier), buffered.
    for (mode, sz) in [
        (SendMode::Synchronous, 10usize),
        (SendMode::Synchronous, 300_000),
        (SendMode::Ready, 40),
        (SendMode::Ready, 200_000),
    ] {
        let mut inb = vec![0u8; sz];
        // SAFETY: `inb` outlives the wait below.
        let r = unsafe {
            rt.irecv(
                "MPI_Irecv",
                inb.as_mut_ptr(),
                sz as i64,
                &byte(),
                left,
                7,
                w,
            )
        }
        .unwrap();
        rt.barrier_internal(w).unwrap();
        let mut out = vec![0u8; sz];
        fill(&mut out, me, right as usize, sz);
        // SAFETY: `out` outlives the blocking send.
        unsafe {
            rt.send(
                "MPI_Send",
                out.as_ptr(),
                sz as i64,
                &byte(),
                right,
                7,
                w,
                mode,
            )
        }
        .unwrap_or_else(|e| fail(format!("{mode:?}: {e}")));
        rt.wait("MPI_Wait", r).unwrap();
        let mut want = vec![0u8; sz];
        fill(&mut want, left as usize, me, sz);
        check!(inb == want, "{mode:?} {sz}: corrupted");
    }
    // Buffered: attach, several bsends outstanding, detach waits.
    let mut attached = vec![0u8; 3 * (1000 + tsunagi_core::BSEND_OVERHEAD)];
    rt.buffer_attach(attached.as_mut_ptr(), attached.len())
        .unwrap();
    for k in 0..3 {
        let out = vec![k as u8; 1000];
        // SAFETY: `out` is copied by the buffered send before it returns.
        unsafe {
            rt.send(
                "MPI_Bsend",
                out.as_ptr(),
                1000,
                &byte(),
                right,
                20 + k,
                w,
                SendMode::Buffered,
            )
        }
        .unwrap();
    }
    {
        let out = vec![0u8; 1000];
        // SAFETY: as above.
        let e = unsafe {
            rt.isend(
                "MPI_Ibsend",
                out.as_ptr(),
                1000,
                &byte(),
                right,
                99,
                w,
                SendMode::Buffered,
            )
        };
        // Either the first three already left (space is free again) or it must fail cleanly.
        match e {
            Ok(r) => {
                rt.wait("MPI_Wait", r).unwrap();
                let mut b = vec![0u8; 1000];
                // Consumed below with the others.
                let _ = &mut b;
            }
            Err(err) => check!(err.class == ErrorClass::Buffer, "overfull bsend: {err}"),
        }
    }
    for k in 0..3 {
        let mut b = vec![0u8; 1000];
        recv_bytes(rt, &mut b, left, 20 + k, w);
        check!(b.iter().all(|&x| x == k as u8), "bsend {k}");
    }
    // Drain the possible tag-99 message.
    rt.barrier_internal(w).unwrap();
    if let Some((_, _)) = rt.iprobe("MPI_Iprobe", left, 99, w, false).unwrap() {
        let mut b = vec![0u8; 1000];
        recv_bytes(rt, &mut b, left, 99, w);
    }
    let (addr, size) = rt.buffer_detach().unwrap();
    check!(
        addr == attached.as_mut_ptr() && size == attached.len(),
        "detach returned another buffer"
    );

    // Persistent requests, started three times.
    let mut pin = vec![0i32; 64];
    let pout: Vec<i32> = (0..64).map(|i| i * (me as i32 + 1)).collect();
    // SAFETY: both buffers live until the requests are freed below.
    let (ps, pr) = unsafe {
        (
            rt.persistent(
                "MPI_Send_init",
                Some(SendMode::Standard),
                pout.as_ptr() as *mut u8,
                64,
                &int(),
                right,
                3,
                w,
            )
            .unwrap(),
            rt.persistent(
                "MPI_Recv_init",
                None,
                pin.as_mut_ptr() as *mut u8,
                64,
                &int(),
                left,
                3,
                w,
            )
            .unwrap(),
        )
    };
    for _ in 0..3 {
        rt.startall(&[pr, ps]).unwrap();
        rt.waitall("MPI_Waitall", &[Some(ps), Some(pr)]).unwrap();
        check!(
            pin.iter()
                .enumerate()
                .all(|(i, &v)| v == i as i32 * (left + 1)),
            "persistent data"
        );
        pin.iter_mut().for_each(|v| *v = 0);
    }
    rt.request_free(ps).unwrap();
    rt.request_free(pr).unwrap();

    // Probe, then mprobe/mrecv.
    let out = vec![5u8; 333];
    // SAFETY: `out` outlives the wait.
    let s = unsafe {
        rt.isend(
            "MPI_Isend",
            out.as_ptr(),
            333,
            &byte(),
            right,
            11,
            w,
            SendMode::Standard,
        )
    }
    .unwrap();
    let (st, _) = rt.probe("MPI_Probe", left, 11, w, false).unwrap();
    check!(
        st.bytes == 333 && st.source == left && st.tag == 11,
        "probe status {st:?}"
    );
    let (st2, msg) = rt.probe("MPI_Mprobe", ANY_SOURCE, 11, w, true).unwrap();
    check!(st2.bytes == 333, "mprobe status");
    let mut inb = vec![0u8; 333];
    // SAFETY: `inb` is live for the blocking call.
    let st3 = unsafe { rt.mrecv("MPI_Mrecv", inb.as_mut_ptr(), 333, &byte(), msg) }.unwrap();
    check!(st3.source == left && inb.iter().all(|&b| b == 5), "mrecv");
    rt.wait("MPI_Wait", s).unwrap();

    // Cancel a receive that cannot match.
    let mut never = [0u8; 4];
    // SAFETY: `never` outlives the wait.
    let r =
        unsafe { rt.irecv("MPI_Irecv", never.as_mut_ptr(), 4, &byte(), left, 12345, w) }.unwrap();
    rt.cancel(r).unwrap();
    let st = rt.wait("MPI_Wait", r).unwrap();
    check!(st.cancelled, "receive not cancelled");

    // PROC_NULL: completes at once with the PROC_NULL status.
    let st = recv_bytes(rt, &mut never, PROC_NULL, 0, w);
    check!(
        st.source == PROC_NULL && st.tag == ANY_TAG && st.bytes == 0,
        "proc null status {st:?}"
    );
    send_bytes(rt, &never, PROC_NULL, 0, w);

    // Waitany / waitsome / testall over a mix with a null entry.
    let mut bufs = vec![vec![0u8; 8]; 3];
    let mut ids = vec![None];
    for (k, b) in bufs.iter_mut().enumerate() {
        // SAFETY: `bufs` outlives the waits.
        ids.push(Some(
            unsafe {
                rt.irecv(
                    "MPI_Irecv",
                    b.as_mut_ptr(),
                    8,
                    &byte(),
                    left,
                    40 + k as i32,
                    w,
                )
            }
            .unwrap(),
        ));
    }
    for k in 0..3 {
        send_bytes(rt, &[k as u8 + 1; 8], right, 40 + k, w);
    }
    let mut got = 0;
    while got < 3 {
        match rt.waitany("MPI_Waitany", &ids).unwrap() {
            Some((i, st)) => {
                check!(
                    st.tag == 40 + i as i32 - 1,
                    "waitany index {i} tag {}",
                    st.tag
                );
                ids[i] = None;
                got += 1;
            }
            None => fail("waitany: no active request".into()),
        }
    }
    check!(
        rt.waitany("MPI_Waitany", &ids).unwrap().is_none(),
        "waitany on nulls"
    );
    for (k, b) in bufs.iter().enumerate() {
        check!(b.iter().all(|&x| x == k as u8 + 1), "waitany data");
    }
    // Sendrecv_replace.
    let mut rep: Vec<i32> = vec![me as i32; 1000];
    // SAFETY: `rep` is live for the call.
    unsafe {
        rt.sendrecv_replace(
            rep.as_mut_ptr() as *mut u8,
            1000,
            &int(),
            right,
            50,
            left,
            50,
            w,
        )
    }
    .unwrap();
    check!(rep.iter().all(|&v| v == left), "sendrecv_replace");
    check!(
        rt.live_requests() == 0,
        "{} requests leaked",
        rt.live_requests()
    );
}

/// Non-contiguous datatypes on the wire, eager and rendezvous.
fn test_datatypes(rt: &Runtime) {
    let (me, n) = (rt.world_rank(), rt.world_size());
    let right = ((me + 1) % n) as i32;
    let left = ((me + n - 1) % n) as i32;
    for rows in [4usize, 300, 3000] {
        // A column of a rows x 8 matrix of ints, sent with a vector type, received contiguous.
        let col: TypeRef = Arc::new(Datatype::vector(rows as i64, 1, 8, &int()).unwrap());
        col.commit();
        let m: Vec<i32> = (0..rows * 8).map(|i| (i as i32) * 3 + me as i32).collect();
        let mut inb = vec![-1i32; rows];
        // SAFETY: buffers outlive the call; the vector type covers rows*8 ints of `m`.
        unsafe {
            rt.sendrecv(
                m.as_ptr().add(2) as *const u8,
                1,
                &col,
                right,
                60,
                inb.as_mut_ptr() as *mut u8,
                rows as i64,
                &int(),
                left,
                60,
                CommId::WORLD,
            )
        }
        .unwrap_or_else(|e| fail(format!("vector sendrecv: {e}")));
        for (r, v) in inb.iter().enumerate() {
            check!(*v == ((r * 8 + 2) as i32) * 3 + left, "column row {r}: {v}");
        }
        // And back: contiguous send, vector receive, gaps untouched.
        let vals: Vec<i32> = (0..rows as i32).map(|r| r + 1000 * me as i32).collect();
        let mut target = vec![-7i32; rows * 8];
        // SAFETY: as above.
        unsafe {
            rt.sendrecv(
                vals.as_ptr() as *const u8,
                rows as i64,
                &int(),
                right,
                61,
                target.as_mut_ptr().add(5) as *mut u8,
                1,
                &col,
                left,
                61,
                CommId::WORLD,
            )
        }
        .unwrap();
        for (i, v) in target.iter().enumerate() {
            if i % 8 == 5 {
                check!(*v == (i / 8) as i32 + 1000 * left, "vector recv at {i}");
            } else {
                check!(*v == -7, "gap {i} overwritten");
            }
        }
    }
}

/// Communicators, groups and attributes.
fn test_comms(rt: &Runtime) {
    let (me, n) = (rt.world_rank(), rt.world_size());
    let w = CommId::WORLD;
    let dup = rt.comm_dup(w).unwrap();
    check!(
        rt.comm_size(dup).unwrap() == n && rt.comm_rank(dup).unwrap() == me,
        "dup size/rank"
    );
    check!(
        rt.comm_compare(w, dup).unwrap() == tsunagi_core::group::Comparison::Congruent,
        "dup congruent"
    );
    // Messages on dup and world with the same tag do not mix.
    if n >= 2 {
        let peer = if me == 0 { 1 } else { 0 };
        if me < 2 {
            let a = [1u8; 4];
            let b = [2u8; 4];
            send_bytes(rt, &a, peer, 5, w);
            send_bytes(rt, &b, peer, 5, dup);
            let mut x = [0u8; 4];
            recv_bytes(rt, &mut x, peer, 5, dup);
            check!(x == [2u8; 4], "dup got world's message");
            recv_bytes(rt, &mut x, peer, 5, w);
            check!(x == [1u8; 4], "world got dup's message");
        }
    }
    // Split into evens and odds, reversed key order.
    let color = (me % 2) as i32;
    let sub = rt
        .comm_split(w, color, -(me as i32))
        .unwrap()
        .expect("member");
    let sub_size = rt.comm_size(sub).unwrap();
    let expect_size = (0..n).filter(|r| r % 2 == me % 2).count();
    check!(sub_size == expect_size, "split size {sub_size}");
    let members: Vec<usize> = (0..n).filter(|r| r % 2 == me % 2).rev().collect();
    check!(
        members[rt.comm_rank(sub).unwrap()] == me,
        "split order by key"
    );
    // A ring inside the sub-communicator.
    let sr = rt.comm_rank(sub).unwrap();
    let right = ((sr + 1) % sub_size) as i32;
    let left = ((sr + sub_size - 1) % sub_size) as i32;
    let out = [me as u8; 4];
    let mut inb = [0u8; 4];
    // SAFETY: buffers are live for the call.
    let st = unsafe {
        rt.sendrecv(
            out.as_ptr(),
            4,
            &byte(),
            right,
            1,
            inb.as_mut_ptr(),
            4,
            &byte(),
            left,
            1,
            sub,
        )
    }
    .unwrap();
    check!(
        st.source == left && inb[0] as usize == members[left as usize],
        "split ring got {}",
        inb[0]
    );
    // MPI_UNDEFINED colour gives no communicator.
    let none = rt
        .comm_split(
            w,
            if me == 0 {
                tsunagi_core::group::UNDEFINED
            } else {
                0
            },
            0,
        )
        .unwrap();
    check!(none.is_none() == (me == 0), "undefined colour");
    if let Some(c) = none {
        rt.comm_free(c).unwrap();
    }
    // Create from a group of the upper half.
    let g = rt.comm_group(w).unwrap();
    let upper: Vec<i32> = ((n / 2) as i32..n as i32).collect();
    let ug = g.incl(&upper).unwrap();
    let uc = rt.comm_create(w, &ug).unwrap();
    check!(uc.is_some() == (me >= n / 2), "create membership");
    if let Some(c) = uc {
        check!(rt.comm_rank(c).unwrap() == me - n / 2, "create rank");
        rt.barrier_internal(c).unwrap();
        rt.comm_free(c).unwrap();
    }
    let tr = g.translate_ranks(&[0, (n - 1) as i32], &ug).unwrap();
    check!(tr[1] == (n - 1 - n / 2) as i32, "translate {tr:?}");
    let _ = Group::empty();
    // Attributes with copy and delete callbacks.
    use std::sync::atomic::{AtomicUsize, Ordering};
    static DELETED: AtomicUsize = AtomicUsize::new(0);
    let kv = rt.create_keyval(tsunagi_core::Keyval {
        copy: Some(Arc::new(|_, _, _, v| Ok(Some(v + 1)))),
        delete: Some(Arc::new(|_, _, _, _| {
            DELETED.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })),
        extra: 0,
    });
    rt.set_attr(dup, kv, 41).unwrap();
    let dup2 = rt.comm_dup(dup).unwrap();
    check!(rt.get_attr(dup2, kv).unwrap() == Some(42), "attribute copy");
    rt.comm_free(dup2).unwrap();
    check!(
        DELETED.load(Ordering::SeqCst) == 1,
        "delete callback on free"
    );
    rt.delete_attr(dup, kv).unwrap();
    check!(rt.get_attr(dup, kv).unwrap().is_none(), "deleted attribute");
    rt.free_keyval(kv).unwrap();
    rt.comm_free(sub).unwrap();
    rt.comm_free(dup).unwrap();
    check!(
        rt.comm_size(dup).is_err(),
        "freed communicator still usable"
    );
    // Many dups and frees must recycle context ids.
    for _ in 0..100 {
        let c = rt.comm_dup(w).unwrap();
        rt.comm_free(c).unwrap();
    }
}

/// Bad arguments give the right error classes (with MPI_ERRORS_RETURN).
fn test_errors(rt: &Runtime) {
    let n = rt.world_size() as i32;
    let w = CommId::WORLD;
    rt.set_errhandler(w, ErrHandler::Return).unwrap();
    let b = [0u8; 8];
    let class = |r: tsunagi_core::MpiResult<()>| r.err().map(|e| e.class);
    // SAFETY (all sends below): `b` is live; invalid arguments are rejected before use.
    unsafe {
        check!(
            class(rt.send(
                "MPI_Send",
                b.as_ptr(),
                1,
                &byte(),
                n,
                0,
                w,
                SendMode::Standard
            )) == Some(ErrorClass::Rank),
            "bad rank"
        );
        check!(
            class(rt.send(
                "MPI_Send",
                b.as_ptr(),
                1,
                &byte(),
                0,
                -5,
                w,
                SendMode::Standard
            )) == Some(ErrorClass::Tag),
            "bad tag"
        );
        check!(
            class(rt.send(
                "MPI_Send",
                b.as_ptr(),
                -1,
                &byte(),
                0,
                0,
                w,
                SendMode::Standard
            )) == Some(ErrorClass::Count),
            "bad count"
        );
        check!(
            class(rt.send(
                "MPI_Send",
                b.as_ptr(),
                1,
                &byte(),
                0,
                0,
                CommId(999),
                SendMode::Standard
            )) == Some(ErrorClass::Comm),
            "bad comm"
        );
        check!(
            class(rt.send(
                "MPI_Send",
                std::ptr::null(),
                4,
                &byte(),
                0,
                0,
                w,
                SendMode::Standard
            )) == Some(ErrorClass::Buffer),
            "null buffer"
        );
        let unc: TypeRef = Arc::new(Datatype::contiguous(2, &int()).unwrap());
        check!(
            class(rt.send("MPI_Send", b.as_ptr(), 1, &unc, 0, 0, w, SendMode::Standard))
                == Some(ErrorClass::Type),
            "uncommitted type"
        );
    }
    let e = rt.send_err_message();
    check!(
        e.contains("MPI_Send") && e.contains("rank"),
        "message names call and argument: {e}"
    );
    // Truncation: 100 bytes into 10.
    let me = rt.world_rank() as i32;
    let big = [9u8; 100];
    let mut small = [0u8; 10];
    // SAFETY: buffers live through the calls.
    unsafe {
        let s = rt
            .isend(
                "MPI_Isend",
                big.as_ptr(),
                100,
                &byte(),
                me,
                77,
                w,
                SendMode::Standard,
            )
            .unwrap();
        let r = rt.recv("MPI_Recv", small.as_mut_ptr(), 10, &byte(), me, 77, w);
        check!(
            r.err().map(|e| e.class) == Some(ErrorClass::Truncate),
            "truncate class"
        );
        rt.wait("MPI_Wait", s).unwrap();
    }
    check!(small == [9u8; 10], "truncated data kept what fits");
    check!(
        rt.wait("MPI_Wait", tsunagi_core::ReqId(123_456))
            .err()
            .map(|e| e.class)
            == Some(ErrorClass::Request),
        "bad request"
    );
    rt.set_errhandler(w, ErrHandler::Fatal).unwrap();
}

trait LastMessage {
    fn send_err_message(&self) -> String;
}
impl LastMessage for Runtime {
    fn send_err_message(&self) -> String {
        let b = [0u8; 1];
        // SAFETY: the call is rejected before the buffer is used.
        unsafe {
            self.send(
                "MPI_Send",
                b.as_ptr(),
                1,
                &byte(),
                -7,
                0,
                CommId::WORLD,
                SendMode::Standard,
            )
        }
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    }
}

/// MPI_THREAD_MULTIPLE: two threads make communicators from two different parents at
/// once, many times. Every live communicator must have its own context in this process,
/// and traffic on same-tag messages of both threads' communicators must not mix.
fn test_mt_comms(rt: &'static Runtime) {
    const ROUNDS: usize = 40;
    let (me, n) = (rt.world_rank(), rt.world_size());
    let parents = [
        rt.comm_dup(CommId::WORLD).unwrap(),
        rt.comm_dup(CommId::WORLD).unwrap(),
    ];
    let made: Vec<Vec<CommId>> = std::thread::scope(|s| {
        let handles: Vec<_> = parents
            .iter()
            .enumerate()
            .map(|(t, &parent)| {
                s.spawn(move || {
                    let mut mine = Vec::with_capacity(ROUNDS);
                    for i in 0..ROUNDS {
                        let c = if i % 3 == 2 {
                            rt.comm_split(parent, 0, me as i32)
                                .unwrap()
                                .expect("member")
                        } else {
                            rt.comm_dup(parent).unwrap()
                        };
                        // A message around the ring on the new communicator, the same tag
                        // in both threads: a shared context would cross them.
                        if n > 1 {
                            let out = [t as u8, i as u8, me as u8];
                            let mut got = [0u8; 3];
                            let next = ((me + 1) % n) as i32;
                            let prev = ((me + n - 1) % n) as i32;
                            if me % 2 == 0 {
                                send_bytes(rt, &out, next, 77, c);
                                recv_bytes(rt, &mut got, prev, 77, c);
                            } else {
                                recv_bytes(rt, &mut got, prev, 77, c);
                                send_bytes(rt, &out, next, 77, c);
                            }
                            let want = [t as u8, i as u8, prev as u8];
                            check!(
                                got == want,
                                "thread {t} round {i}: got {got:?}, want {want:?}"
                            );
                        }
                        mine.push(c);
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut contexts: Vec<u32> = made
        .iter()
        .flatten()
        .chain(parents.iter())
        .map(|&c| rt.comm_coll_context(c).unwrap())
        .collect();
    contexts.push(rt.comm_coll_context(CommId::WORLD).unwrap());
    let total = contexts.len();
    contexts.sort_unstable();
    contexts.dedup();
    check!(
        contexts.len() == total,
        "two live communicators share a context"
    );
    for c in made.into_iter().flatten().chain(parents) {
        rt.comm_free(c).unwrap();
    }
}

fn main() {
    init(ThreadLevel::Multiple, &tsunagi_transports::REGISTRY)
        .unwrap_or_else(|e| fail(format!("init: {e}")));
    let rt = tsunagi_core::rt("main").unwrap();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all = ["sizes", "order", "modes", "datatypes", "comms", "errors"];
    let tests: Vec<&str> = if args.is_empty() {
        all.to_vec()
    } else {
        args.iter().map(|s| s.as_str()).collect()
    };
    for t in tests {
        match t {
            "sizes" => test_sizes(rt),
            "order" => test_order(rt),
            "modes" => test_modes(rt),
            "datatypes" => test_datatypes(rt),
            "comms" => test_comms(rt),
            "errors" => test_errors(rt),
            "mtcomms" => test_mt_comms(rt),
            "abort" => {
                if rt.world_rank() == rt.world_size() - 1 {
                    rt.abort(3, "p2p_check asked to abort");
                }
                // Others block in a receive that never completes.
                let mut b = [0u8; 1];
                recv_bytes(rt, &mut b, ANY_SOURCE, 999, CommId::WORLD);
            }
            "sigkill" => {
                if rt.world_rank() == rt.world_size() - 1 {
                    // SAFETY: raising a signal on ourselves.
                    unsafe { libc::raise(libc::SIGKILL) };
                }
                let mut b = [0u8; 1];
                recv_bytes(rt, &mut b, ANY_SOURCE, 999, CommId::WORLD);
            }
            "pause" => std::thread::sleep(std::time::Duration::from_secs(3)),
            "sigkill_after_traffic" => {
                // Every rank has a live link to the last one; then the last dies by SIGKILL
                // while the others wait for it, so their links break (issue 14, item 6:
                // mpirun must still name the dead rank and its signal, not a survivor).
                let last = rt.world_size() as i32 - 1;
                let mut b = [0u8; 1];
                if rt.world_rank() as i32 == last {
                    for src in 0..last {
                        recv_bytes(rt, &mut b, src, 5, CommId::WORLD);
                    }
                    for dst in 0..last {
                        send_bytes(rt, &b, dst, 6, CommId::WORLD);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    // SAFETY: raising a signal on ourselves.
                    unsafe { libc::raise(libc::SIGKILL) };
                }
                send_bytes(rt, &b, last, 5, CommId::WORLD);
                recv_bytes(rt, &mut b, last, 6, CommId::WORLD);
                // As an MPI program with the default error handler: the broken link ends
                // this rank through MPI_Abort, blaming the dead peer.
                // SAFETY: `b` is a live, exclusively borrowed slice for the blocking call.
                let r = unsafe {
                    rt.recv(
                        "MPI_Recv",
                        b.as_mut_ptr(),
                        1,
                        &byte(),
                        last,
                        7,
                        CommId::WORLD,
                    )
                };
                if let Err(e) = r {
                    rt.handle_error(Some(CommId::WORLD), &e);
                }
            }
            "fatal" => {
                // Default handler: an invalid rank ends the job with one line.
                let b = [0u8; 1];
                // SAFETY: rejected before use.
                let r = unsafe {
                    rt.send(
                        "MPI_Send",
                        b.as_ptr(),
                        1,
                        &byte(),
                        1_000_000,
                        0,
                        CommId::WORLD,
                        SendMode::Standard,
                    )
                };
                if let Err(e) = r {
                    rt.handle_error(Some(CommId::WORLD), &e);
                }
                fail("fatal error handler returned".into());
            }
            other => fail(format!("unknown test {other}")),
        }
        rt.barrier_internal(CommId::WORLD).unwrap();
        if rt.world_rank() == 0 {
            println!("OK {t}");
        }
    }
    finalize().unwrap_or_else(|e| fail(format!("finalize: {e}")));
}
