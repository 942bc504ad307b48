//! A token goes around the ring of all ranks LAPS times; every rank adds rank + 1 to it.
//! Rank 0 checks the final value.
use tsunagi::traits::*;

const LAPS: u64 = 10;

fn main() {
    let universe = tsunagi::initialize().expect("MPI was already initialized");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);

    let mut token: u64 = 0;
    for lap in 0..LAPS {
        if rank == 0 {
            // Post the receive first so that a one-rank ring (sending to itself) works.
            let out = token + 1;
            let mut incoming = 0u64;
            tsunagi::request::scope(|scope| {
                let r = prev
                    .immediate_receive_into_with_tag(scope, &mut incoming, lap as i32)
                    .expect("irecv");
                next.send_with_tag(&out, lap as i32).expect("send");
                let st = r.wait().expect("wait");
                assert_eq!(st.source_rank(), (size - 1) % size);
                assert_eq!(st.tag(), lap as i32);
            });
            token = incoming;
        } else {
            let (t, st) = prev.receive_with_tag::<u64>(lap as i32).expect("receive");
            assert_eq!(st.source_rank(), rank - 1);
            next.send_with_tag(&(t + rank as u64 + 1), lap as i32)
                .expect("send");
        }
    }
    if rank == 0 {
        let n = size as u64;
        let want = LAPS * n * (n + 1) / 2;
        if token != want {
            eprintln!("ring: FAILED: token {token}, expected {want}");
            std::process::exit(1);
        }
        println!("ring: {size} ranks, {LAPS} laps, token {token} OK");
    }
}
