//! Ping-pong on the core API directly (no Rust-API or C-ABI layer), to measure the cost
//! of the layers above: `mpirun -n 2 core_pingpong [bytes...]` prints `lat <bytes> <usec>`.

use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, SendMode, ThreadLevel};

fn main() {
    init(ThreadLevel::Single, &tsunagi_transports::REGISTRY).expect("init");
    let rt = tsunagi_core::rt("main").expect("runtime");
    let me = rt.world_rank();
    let byte = Datatype::builtin(Builtin::Byte);
    if std::env::args().nth(1).as_deref() == Some("stream8") {
        stream8(rt, me);
        finalize().expect("finalize");
        return;
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if args.is_empty() {
        vec![0, 8, 1024, 65536, 1 << 20, 4 << 20]
    } else {
        args
    };
    let w = CommId::WORLD;
    for sz in sizes {
        let mut buf = vec![0u8; sz.max(1)];
        // `CORE_PINGPONG_ITERS` caps the iterations (quick checks on a loaded machine).
        let cap = std::env::var("CORE_PINGPONG_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000usize);
        let iters = (200_000_000 / (sz + 2000))
            .clamp(20, 100_000)
            .min(cap.max(1));
        let mut best = f64::MAX;
        for _round in 0..5 {
            let t0 = rt.wtime();
            for _ in 0..iters {
                // SAFETY: `buf` outlives every blocking call.
                unsafe {
                    if me == 0 {
                        rt.send(
                            "MPI_Send",
                            buf.as_ptr(),
                            sz as i64,
                            &byte,
                            1,
                            0,
                            w,
                            SendMode::Standard,
                        )
                        .unwrap();
                        rt.recv("MPI_Recv", buf.as_mut_ptr(), sz as i64, &byte, 1, 0, w)
                            .unwrap();
                    } else if me == 1 {
                        rt.recv("MPI_Recv", buf.as_mut_ptr(), sz as i64, &byte, 0, 0, w)
                            .unwrap();
                        rt.send(
                            "MPI_Send",
                            buf.as_ptr(),
                            sz as i64,
                            &byte,
                            0,
                            0,
                            w,
                            SendMode::Standard,
                        )
                        .unwrap();
                    }
                }
            }
            let dt = (rt.wtime() - t0) / iters as f64 / 2.0 * 1e6;
            best = best.min(dt);
        }
        if me == 0 {
            println!("lat {sz} {best:.3}");
        }
    }
    finalize().expect("finalize");
}

/// `core_pingpong stream8`: windows of 64 eight-byte messages (message rate), as the
/// bandwidth benchmark's smallest point, for profiling the per-message path.
fn stream8(rt: &tsunagi_core::Runtime, me: usize) {
    let byte = Datatype::builtin(Builtin::Byte);
    let w = CommId::WORLD;
    let sbuf = [7u8; 8];
    let mut rbuf = vec![0u8; 8 * 64];
    let rounds = 20_000;
    let t0 = rt.wtime();
    for _ in 0..rounds {
        let mut ids = Vec::with_capacity(64);
        // SAFETY: the buffers outlive the waitall in this iteration.
        unsafe {
            for k in 0..64 {
                ids.push(Some(if me == 0 {
                    rt.isend(
                        "MPI_Isend",
                        sbuf.as_ptr(),
                        8,
                        &byte,
                        1,
                        2,
                        w,
                        SendMode::Standard,
                    )
                    .unwrap()
                } else {
                    rt.irecv("MPI_Irecv", rbuf.as_mut_ptr().add(8 * k), 8, &byte, 0, 2, w)
                        .unwrap()
                }));
            }
        }
        rt.waitall("MPI_Waitall", &ids).unwrap();
        let mut ack = [0u8; 1];
        // SAFETY: `ack` is live for the blocking calls.
        unsafe {
            if me == 0 {
                rt.recv("MPI_Recv", ack.as_mut_ptr(), 0, &byte, 1, 3, w)
                    .unwrap();
            } else {
                rt.send(
                    "MPI_Send",
                    ack.as_ptr(),
                    0,
                    &byte,
                    0,
                    3,
                    w,
                    SendMode::Standard,
                )
                .unwrap();
            }
        }
    }
    let dt = rt.wtime() - t0;
    if me == 0 {
        println!(
            "stream8 {:.1} MB/s {:.0} ns/msg",
            (rounds * 64 * 8) as f64 / dt / 1e6,
            dt / (rounds * 64) as f64 * 1e9
        );
    }
}
