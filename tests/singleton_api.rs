//! In-process checks of the API on a singleton job (no launcher): derived datatypes of
//! nested, tuple and generic structs round-trip through messages to self, user datatypes
//! select the right elements, and every call after finalization is an error, not a panic.
//! One test function, because MPI can be initialized once per process.

use tsunagi::datatype::{MutView, Order, UserDatatype, View};
use tsunagi::request;
use tsunagi::traits::*;
use tsunagi::{Equivalence, ErrorClass};

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Inner {
    flag: bool,
    v: i16,
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Outer {
    a: u8,
    inner: [Inner; 2],
    b: f64,
    tail: Pair,
}

#[derive(Equivalence, Clone, Copy, Debug, PartialEq, Default)]
struct Pair(u32, i64);

#[derive(Equivalence, Clone, Copy, Debug, PartialEq)]
struct Gen<T: Copy + Equivalence, const N: usize> {
    x: [T; N],
    n: usize,
}

fn outer(k: u8) -> Outer {
    Outer {
        a: k,
        inner: [
            Inner {
                flag: k % 2 == 1,
                v: -(k as i16),
            },
            Inner {
                flag: true,
                v: 300 + k as i16,
            },
        ],
        b: k as f64 * 0.5,
        tail: Pair(k as u32 * 7, -(k as i64) * 1_000_000_007),
    }
}

#[test]
fn singleton_api() {
    let universe = tsunagi::initialize().expect("initialize");
    assert!(tsunagi::initialize().is_none());
    let world = universe.world();
    assert_eq!((world.rank(), world.size()), (0, 1));
    let me = world.this_process();
    let slf = universe.self_comm();
    assert_eq!(slf.size(), 1);

    // Derived datatypes: sizes carry no padding, extents are the Rust sizes.
    let dt = Outer::equivalent_datatype();
    assert_eq!(dt.size(), 1 + 2 * 3 + 8 + 12);
    assert_eq!(dt.extent() as usize, std::mem::size_of::<Outer>());
    assert_eq!(
        <Gen<f32, 3>>::equivalent_datatype().size(),
        12 + std::mem::size_of::<usize>()
    );

    // Round trips to self.
    let data: Vec<Outer> = (0..5).map(outer).collect();
    let mut back = vec![Outer::default(); 5];
    request::scope(|scope| {
        let r = me.immediate_receive_into(scope, &mut back[..]).unwrap();
        me.send(&data[..]).unwrap();
        let st = r.wait().unwrap();
        assert_eq!(st.count_of::<Outer>(), Some(5));
        assert_eq!(st.count(&u8::equivalent_datatype()), Some(5 * 27));
    });
    assert_eq!(back, data);

    let g = Gen::<f32, 3> {
        x: [1.0, 2.5, -3.0],
        n: 42,
    };
    request::scope(|scope| {
        let s = me.immediate_synchronous_send(scope, &g).unwrap();
        let (got, _) = me.receive::<Gen<f32, 3>>().unwrap();
        assert_eq!(got, g);
        s.wait().unwrap();
    });

    // A subarray: the 2x2 block at (1,1) of a 4x3 row-major matrix.
    let m: Vec<i32> = (0..12).collect();
    let sub = UserDatatype::subarray(
        &[4, 3],
        &[2, 2],
        &[1, 1],
        Order::RowMajor,
        &i32::equivalent_datatype(),
    )
    .unwrap();
    let view = View::new(&m[..], 1, &sub).unwrap();
    let mut block = [0i32; 4];
    tsunagi::point_to_point::send_receive_into(&view, &me, &mut block[..], &me).unwrap();
    assert_eq!(block, [4, 5, 7, 8]);

    // Indexed datatype receiving into a scattered target.
    let idx = UserDatatype::indexed(&[1, 2], &[5, 0], &i32::equivalent_datatype()).unwrap();
    let mut target = [0i32; 6];
    {
        let mut mv = MutView::new(&mut target[..], 1, &idx).unwrap();
        tsunagi::point_to_point::send_receive_into(&[10, 20, 30][..], &me, &mut mv, &me).unwrap();
    }
    assert_eq!(target, [20, 30, 0, 0, 0, 10]);

    // Structured + resized user datatypes.
    let st = UserDatatype::structured(
        &[1, 1],
        &[0, 8],
        &[u8::equivalent_datatype(), f64::equivalent_datatype()],
    )
    .unwrap();
    assert_eq!(st.size(), 9);
    let rs = UserDatatype::resized(&st, 0, 32).unwrap();
    assert_eq!(rs.extent(), 32);
    assert!(UserDatatype::heterogeneous_vector(2, 1, 16, &rs).is_ok());

    // Sendrecv-replace and send_receive.
    let mut vals = [1u16, 2, 3];
    tsunagi::point_to_point::send_receive_replace_into(&mut vals[..], &me, &me).unwrap();
    assert_eq!(vals, [1, 2, 3]);
    let (x, _) = tsunagi::point_to_point::send_receive::<u64, _, _, _>(&9u64, &me, &me).unwrap();
    assert_eq!(x, 9);

    // Errors, not panics.
    assert_eq!(
        world.process_at_rank(1).send(&1u8).unwrap_err().class(),
        ErrorClass::Rank
    );
    assert_eq!(
        world
            .process_at_rank(-7)
            .receive::<u8>()
            .unwrap_err()
            .class(),
        ErrorClass::Rank
    );
    assert!(world.null_process().receive::<u8>().is_err());
    // A refused send-receive-replace leaves no receive posted into the buffer.
    let mut victim = [0u64; 2];
    let e = tsunagi::point_to_point::send_receive_replace_into(
        &mut victim[..],
        &world.process_at_rank(5),
        &me,
    )
    .unwrap_err();
    assert_eq!(e.class(), ErrorClass::Rank);
    me.send(&[7u64, 8][..]).unwrap();
    let (v, _) = me.receive_vec::<u64>().unwrap();
    assert_eq!((v, victim), (vec![7, 8], [0, 0]));
    assert!(UserDatatype::vector(-1, 1, 1, &u8::equivalent_datatype()).is_err());

    // After finalization every call reports an error.
    drop(universe);
    assert!(tsunagi::is_finalized());
    let e = me.send(&1u8).unwrap_err();
    assert!(e.message().contains("finalized"), "{e}");
    assert!(world.barrier().is_err());
    assert!(world.duplicate().is_err());
    assert!(tsunagi::processor_name().is_err());
    assert!(me.receive::<u8>().is_err());
    assert!(tsunagi::initialize().is_none());
    let _ = tsunagi::time();
}
