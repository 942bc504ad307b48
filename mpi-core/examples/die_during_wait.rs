//! A rank that dies while the others wait for it: `mpirun ... die_during_wait [RANK]`.
//! Every rank passes a barrier; then world rank RANK (default: the last) exits with status 3
//! without finalizing, and every other rank waits for a message from it that never comes.
//! The launcher (or, across sites, every site's launcher) must end the job at once.

use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{init, CommId, ThreadLevel};

fn main() {
    init(ThreadLevel::Single, &tsunagi_transports::REGISTRY).expect("init");
    let rt = tsunagi_core::rt("main").expect("runtime");
    let (me, n) = (rt.world_rank() as i32, rt.world_size() as i32);
    let victim: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(n - 1);
    rt.barrier_internal(CommId::WORLD).expect("barrier");
    if me == victim {
        eprintln!("rank {me}: exiting without MPI_Finalize");
        std::process::exit(3);
    }
    let byte = Datatype::builtin(Builtin::Byte);
    let mut b = [0u8; 8];
    // SAFETY: `b` outlives the blocking receive.
    let r = unsafe {
        rt.recv(
            "MPI_Recv",
            b.as_mut_ptr(),
            8,
            &byte,
            victim,
            0,
            CommId::WORLD,
        )
    };
    eprintln!("rank {me}: the receive from rank {victim} ended: {r:?}");
    std::process::exit(4);
}
