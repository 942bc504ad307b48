//! What happens when one rank panics: rank 0 panics while the other ranks wait for a
//! message from it. Dropping the `Universe` during the panic aborts the whole job (exit
//! status 101) instead of entering MPI_Finalize, which would wait for rank 0 forever.
//! `mpirun -n 2 panic_aborts_job` must end at once, non-zero, naming the panic.
use tsunagi::traits::*;

fn main() {
    let universe = tsunagi::initialize().expect("MPI was already initialized");
    let world = universe.world();
    if world.rank() == 0 {
        panic!("rank 0 gives up before sending");
    }
    // Never satisfied: rank 0 panicked instead of sending.
    let (_v, _status) = world.process_at_rank(0).receive::<i32>().expect("receive");
    unreachable!("rank 0 never sends");
}
