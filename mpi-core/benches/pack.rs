//! Datatype pack/unpack throughput for non-contiguous layouts:
//!
//! * `vector_1024x1_stride2`: 1024 blocks of one double, stride 2 (every other element of
//!   an array: a matrix column of a 2-wide row, the classic worst case of 8-byte pieces);
//! * `vector_64x64_stride128`: 64 blocks of 64 doubles, stride 128 (a 64×64 tile of a
//!   128-wide matrix: 512-byte pieces);
//! * `struct_int_double_char3_x1000`: 1000 elements of `{int, double, char[3]}` laid out
//!   with C's natural padding (offsets 0, 8, 16; extent 24), three pieces per element.
//!
//! Why this path matters: every send or receive of a non-contiguous type goes through
//! `Datatype::pack_range` / `Datatype::unpack_range` (eager sends pack once, streamed
//! rendezvous packs chunk by chunk, receives unpack), and collectives on derived types do
//! the same, so their cost per byte adds directly to message time. The benchmark calls
//! those public methods on the real types. Throughput is in packed (data) bytes.

use std::hint::black_box;
use std::mem::{align_of, offset_of, size_of};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tsunagi_core::datatype::{Aint, Builtin, Datatype};

/// The struct case's element, as C lays out `struct { int i; double d; char c[3]; }`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Rec {
    i: i32,
    d: f64,
    c: [u8; 3],
}

/// A committed type, `count` of its elements, and a zeroed user buffer of `u64` words
/// (8-byte aligned, as doubles need) that holds them.
struct Case {
    name: &'static str,
    ty: Datatype,
    count: usize,
    buf: Vec<u64>,
}

impl Case {
    fn new(name: &'static str, ty: Datatype, count: usize) -> Case {
        ty.commit();
        // Elements start at multiples of the extent; lb is 0 for these types.
        assert_eq!(ty.lb(), 0);
        let bytes = ty.extent() as usize * count;
        assert!(ty.alignment() <= align_of::<u64>());
        Case {
            name,
            ty,
            count,
            buf: vec![0u64; bytes.div_ceil(8)],
        }
    }
}

fn cases() -> Vec<Case> {
    let double = Datatype::builtin(Builtin::Double);
    let int = Datatype::builtin(Builtin::Int);
    let char_ = Datatype::builtin(Builtin::Char);
    let rec = Datatype::structure(
        &[1, 1, 3],
        &[
            offset_of!(Rec, i) as Aint,
            offset_of!(Rec, d) as Aint,
            offset_of!(Rec, c) as Aint,
        ],
        &[int, double.clone(), char_],
    )
    .expect("struct type");
    // The type's extent (rounded to the double's alignment) must be the C struct's size.
    assert_eq!(rec.extent() as usize, size_of::<Rec>());
    vec![
        Case::new(
            "vector_1024x1_stride2",
            Datatype::vector(1024, 1, 2, &double).expect("vector type"),
            1,
        ),
        Case::new(
            "vector_64x64_stride128",
            Datatype::vector(64, 64, 128, &double).expect("vector type"),
            1,
        ),
        Case::new("struct_int_double_char3_x1000", rec, 1000),
    ]
}

fn bench_pack_unpack(c: &mut Criterion) {
    for mut case in cases() {
        let bytes = case.ty.packed_size(case.count);
        let mut packed = vec![0u8; bytes];
        let mut g = c.benchmark_group(case.name);
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function("pack", |b| {
            b.iter(|| {
                // SAFETY: `buf` holds `count * extent` initialised bytes from offset 0 and lb
                // is 0 (checked in Case::new), so every byte of the type map of elements
                // 0..count is inside it; nothing else touches it meanwhile.
                unsafe {
                    case.ty
                        .pack_range(case.buf.as_ptr().cast(), case.count, 0, &mut packed)
                };
                black_box(&mut packed);
            })
        });
        g.bench_function("unpack", |b| {
            b.iter(|| {
                // SAFETY: as for pack: the type map of elements 0..count lies inside `buf`,
                // which we own exclusively and which does not overlap `packed`.
                unsafe {
                    case.ty
                        .unpack_range(case.buf.as_mut_ptr().cast(), case.count, 0, &packed)
                };
                black_box(&mut case.buf);
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_pack_unpack
}
criterion_main!(benches);
