//! Every rank prints its rank, the size of the job and its host.
use tsunagi::traits::*;

fn main() {
    let universe = tsunagi::initialize().expect("MPI was already initialized");
    let world = universe.world();
    let (rank, size) = world.try_rank_and_size().expect("rank and size");
    let host = tsunagi::processor_name().expect("processor name");
    assert!(
        size >= 1 && (0..size).contains(&rank),
        "rank {rank} of {size}"
    );
    assert_eq!(world.get_name().expect("name"), "MPI_COMM_WORLD");
    world.barrier().expect("barrier");
    println!("hello: rank {rank} of {size} on {host} OK");
}
