//! Ping-pong on the core API directly (no Rust-API or C-ABI layer), to measure the cost
//! of the layers above: `mpirun -n 2 core_pingpong [bytes...]` prints `lat <bytes> <usec>`.

use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, SendMode, ThreadLevel};

fn main() {
    init(ThreadLevel::Single).expect("init");
    let rt = tsunagi_core::rt("main").expect("runtime");
    let me = rt.world_rank();
    let byte = Datatype::builtin(Builtin::Byte);
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
        let iters = (200_000_000 / (sz + 2000)).clamp(20, 100_000);
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
