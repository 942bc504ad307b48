//! Derived datatypes: an array of `#[derive(Equivalence)]` particles is passed around the
//! ring, and a strided matrix column is sent through a vector datatype and received
//! contiguous (and the other way round). Every rank checks what it got.
use tsunagi::datatype::{MutView, UserDatatype, View};
use tsunagi::traits::*;
use tsunagi::Equivalence;

#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Particle {
    id: u32,
    pos: [f64; 3],
    charge: f32,
}

fn particle(owner: i32, i: usize) -> Particle {
    let k = owner as f64 * 100.0 + i as f64;
    Particle {
        id: (owner as u32) << 16 | i as u32,
        pos: [k, k + 0.25, -k],
        charge: if i & 1 == 0 { 1.5 } else { -0.5 },
    }
}

const ROWS: usize = 6;
const COLS: usize = 5;

fn matrix(owner: i32) -> Vec<f64> {
    (0..ROWS * COLS)
        .map(|k| owner as f64 * 1000.0 + k as f64)
        .collect()
}

fn fail(msg: String) -> ! {
    eprintln!("datatype_exchange: FAILED: {msg}");
    std::process::exit(1);
}

fn main() {
    let universe = tsunagi::initialize().expect("MPI was already initialized");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev_rank = (rank + size - 1) % size;
    let prev = world.process_at_rank(prev_rank);

    // 1. Particles around the ring (send-receive, so one rank works too).
    let n = 7;
    let mine: Vec<Particle> = (0..n).map(|i| particle(rank, i)).collect();
    let mut got = vec![
        Particle {
            id: 0,
            pos: [0.0; 3],
            charge: 0.0
        };
        n
    ];
    let st = tsunagi::point_to_point::send_receive_into(&mine[..], &next, &mut got[..], &prev)
        .expect("sendrecv particles");
    assert_eq!(st.count_of::<Particle>(), Some(n as i64));
    for (i, p) in got.iter().enumerate() {
        if *p != particle(prev_rank, i) {
            fail(format!("rank {rank}: particle {i} is {p:?}"));
        }
    }
    // And one particle as a value, and a vector of unknown length.
    let single = particle(rank, 99);
    tsunagi::request::scope(|scope| {
        let s = next
            .immediate_send_with_tag(scope, &single, 1)
            .expect("isend");
        let (p, _) = prev
            .receive_with_tag::<Particle>(1)
            .expect("receive particle");
        if p != particle(prev_rank, 99) {
            fail(format!("rank {rank}: single particle is {p:?}"));
        }
        let s2 = next
            .immediate_send_with_tag(scope, &mine[..3], 2)
            .expect("isend");
        let (v, _) = prev
            .receive_vec_with_tag::<Particle>(2)
            .expect("receive_vec");
        if v.len() != 3
            || v.iter()
                .enumerate()
                .any(|(i, p)| *p != particle(prev_rank, i))
        {
            fail(format!("rank {rank}: receive_vec gave {v:?}"));
        }
        tsunagi::request::wait_all([s, s2]).expect("wait_all");
    });

    // 2. Column (rank % COLS) of my matrix, strided, to the next rank, received
    //    contiguous; then a contiguous row received into a strided column.
    let m = matrix(rank);
    let column = UserDatatype::vector(ROWS as i64, 1, COLS as i64, &f64::equivalent_datatype())
        .expect("vector datatype");
    assert_eq!(column.size(), ROWS * 8);
    let c = rank as usize % COLS;
    let view = View::new(&m[c..], 1, &column).expect("column view");
    let mut col = vec![0f64; ROWS];
    tsunagi::point_to_point::send_receive_into(&view, &next, &mut col[..], &prev)
        .expect("sendrecv column");
    let pc = prev_rank as usize % COLS;
    let want: Vec<f64> = (0..ROWS)
        .map(|r| matrix(prev_rank)[r * COLS + pc])
        .collect();
    if col != want {
        fail(format!("rank {rank}: column {col:?}, expected {want:?}"));
    }

    let row: Vec<f64> = (0..ROWS).map(|r| rank as f64 + r as f64 / 10.0).collect();
    let mut target = vec![-1f64; ROWS * COLS];
    {
        let mut into = MutView::new(&mut target[1..], 1, &column).expect("strided target");
        tsunagi::point_to_point::send_receive_into(&row[..], &next, &mut into, &prev)
            .expect("sendrecv row");
    }
    for r in 0..ROWS {
        for k in 0..COLS {
            let v = target[r * COLS + k];
            let want = if k == 1 {
                prev_rank as f64 + r as f64 / 10.0
            } else {
                -1.0
            };
            if v != want {
                fail(format!(
                    "rank {rank}: target[{r}][{k}] = {v}, expected {want}"
                ));
            }
        }
    }

    // 3. A view that does not fit its slice is an error, not a crash.
    if View::new(&m[COLS..], 1, &column).is_ok() {
        fail("an out-of-bounds view was accepted".into());
    }
    world.barrier().expect("barrier");
    println!("datatype_exchange: rank {rank} of {size}: particles, column and row OK");
}
