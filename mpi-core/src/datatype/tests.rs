//! Datatype tests. Expected layouts, bounds and counts are computed by hand; the
//! bound/extent numbers for the tricky cases (negative strides, resized struct members,
//! subarrays of resized types, pair types) were checked against MPICH 4.

use super::*;

fn bt(b: Builtin) -> TypeRef {
    Datatype::builtin(b)
}

fn int() -> TypeRef {
    bt(Builtin::Int)
}

fn arc(t: MpiResult<Datatype>) -> TypeRef {
    Arc::new(t.expect("constructor failed"))
}

/// Byte offsets of 4-byte ints with the given indices.
fn ints(idx: &[isize]) -> Vec<isize> {
    idx.iter()
        .flat_map(|&i| (0..4).map(move |b| i * 4 + b))
        .collect()
}

/// Byte offsets `[start, start + len)`.
fn span(start: isize, len: isize) -> Vec<isize> {
    (start..start + len).collect()
}

/// Distinct for the first 256 bytes, so a misplaced byte shows.
fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(151).wrapping_add((i >> 8) as u8)
}

/// Pack `count` elements of `t` from a patterned buffer: the stream must be exactly the
/// bytes at `expected` (offsets from the buffer origin), in order, whole or chunked at
/// odd sizes. Unpacking into sentinel-filled buffers must write exactly those bytes and
/// leave every gap untouched.
fn check_layout(t: &Datatype, count: usize, expected: &[isize]) {
    assert_eq!(t.packed_size(count), expected.len(), "packed size");
    let lo = expected.iter().copied().min().unwrap_or(0).min(0) - 16;
    let hi = expected.iter().copied().max().unwrap_or(0).max(0) + 16;
    let n = (hi - lo) as usize;
    let origin = (-lo) as usize;
    let src: Vec<u8> = (0..n).map(pattern).collect();
    let at = |o: isize| (origin as isize + o) as usize;
    let want: Vec<u8> = expected.iter().map(|&o| src[at(o)]).collect();
    // SAFETY: the buffer spans every expected offset with a margin.
    let packed = unsafe { t.pack(src.as_ptr().add(origin), count) };
    assert_eq!(packed, want, "whole pack");
    for chunk in [1usize, 3, 7, 64] {
        let mut got = vec![0u8; want.len()];
        let mut off = 0;
        while off < got.len() {
            let end = (off + chunk).min(got.len());
            // SAFETY: as above.
            unsafe { t.pack_range(src.as_ptr().add(origin), count, off, &mut got[off..end]) };
            off = end;
        }
        assert_eq!(got, want, "pack in chunks of {chunk}");
    }
    let mine: std::collections::HashSet<isize> = expected.iter().copied().collect();
    for (sentinel, chunk) in [(0u8, usize::MAX), (0xff, 5), (0x5a, 2)] {
        let mut dst = vec![sentinel; n];
        let mut off = 0;
        while off < want.len() {
            let end = off.saturating_add(chunk).min(want.len());
            // SAFETY: as above, and `want` is a separate allocation.
            unsafe { t.unpack_range(dst.as_mut_ptr().add(origin), count, off, &want[off..end]) };
            off = end;
        }
        for o in lo..hi {
            if mine.contains(&o) {
                assert_eq!(dst[at(o)], src[at(o)], "unpacked byte at {o}");
            } else {
                assert_eq!(dst[at(o)], sentinel, "gap byte at {o} was written");
            }
        }
    }
}

fn bounds(t: &Datatype) -> (Aint, Aint, Aint, Aint) {
    (t.lb(), t.extent(), t.true_lb(), t.true_extent())
}

#[test]
fn builtin_table_is_consistent() {
    for (i, &b) in Builtin::ALL.iter().enumerate() {
        assert_eq!(b as usize, i, "{b:?} out of order in ALL");
        let t = bt(b);
        assert!(Arc::ptr_eq(&t, &bt(b)), "builtins are cached");
        assert_eq!(t.size(), b.size());
        assert_eq!(t.extent() as usize, b.extent());
        assert_eq!(t.is_builtin(), Some(b));
        assert_eq!(t.name(), b.name());
        assert_eq!(Builtin::from_name(b.name()), Some(b));
        assert!(t.is_committed());
        assert_eq!(t.homogeneous_primitive(), Some(b.primitive()));
        assert_eq!(b.primitive().size(), b.size());
        assert_eq!(t.envelope(), (0, 0, 0, Combiner::Named));
        assert_eq!(t.combiner().as_mpich(), 1);
    }
    assert_eq!(Builtin::ALL.len(), 62);
    assert_eq!(int().name(), "MPI_INT");
    assert_eq!(Builtin::from_name("MPI_LONG_LONG"), Some(Builtin::LongLong));
    assert_eq!(Builtin::LongDouble.size(), 16);
    assert_eq!(Builtin::CLongDoubleComplex.size(), 32);
    assert_eq!(int().contiguous_offset(), Some(0));
}

#[test]
fn pair_types_have_mpich_layouts() {
    let di = bt(Builtin::DoubleInt);
    assert_eq!((di.size(), di.extent(), di.true_extent()), (12, 16, 12));
    assert_eq!(di.contiguous_offset(), None);
    check_layout(&di, 2, &[span(0, 12), span(16, 12)].concat());
    let si = bt(Builtin::ShortInt);
    assert_eq!((si.size(), si.extent(), si.true_extent()), (6, 8, 8));
    check_layout(
        &si,
        2,
        &[span(0, 2), span(4, 4), span(8, 2), span(12, 4)].concat(),
    );
    let ldi = bt(Builtin::LongDoubleInt);
    assert_eq!((ldi.size(), ldi.extent(), ldi.true_extent()), (20, 32, 20));
    assert_eq!(bt(Builtin::TwoInt).contiguous_offset(), Some(0));
    assert_eq!(di.basic_elements(), 2);
    assert_eq!(Primitive::DoubleInt.value_offsets(), Some((0, 8)));
    // MPICH: 12 bytes of DOUBLE_INT = 1 element (2 basic); 20 = 3 basic; 8 = 1; 7 = 0.
    assert_eq!(di.count_for_bytes(12), (Some(1), 2));
    assert_eq!(di.count_for_bytes(20), (None, 3));
    assert_eq!(di.count_for_bytes(8), (None, 1));
    assert_eq!(di.count_for_bytes(7), (None, 0));
    assert_eq!(di.count_for_bytes(0), (Some(0), 0));
}

#[test]
fn contiguous_of_int() {
    let t = arc(Datatype::contiguous(3, &int()));
    assert_eq!((t.size(), t.lb(), t.extent()), (12, 0, 12));
    assert_eq!(t.contiguous_offset(), Some(0));
    assert_eq!(t.block_count(), 1);
    check_layout(&t, 2, &ints(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(t.envelope(), (1, 0, 1, Combiner::Contiguous));
    let (i, a, d) = t.contents();
    assert_eq!((i, a), (vec![3], vec![]));
    assert!(Arc::ptr_eq(&d[0], &int()));
    // Contiguous of a padded type keeps the padding.
    let c = arc(Datatype::contiguous(3, &bt(Builtin::DoubleInt)));
    assert_eq!((c.size(), c.extent(), c.true_extent()), (36, 48, 44));
}

#[test]
fn vector_packs_the_right_ints() {
    let t = arc(Datatype::vector(3, 2, 4, &int()));
    assert_eq!((t.size(), t.lb(), t.extent()), (24, 0, 40));
    assert_eq!(t.contiguous_offset(), None);
    assert_eq!(t.block_count(), 1, "a vector is one regular block");
    check_layout(&t, 1, &ints(&[0, 1, 4, 5, 8, 9]));
    // The second element starts one extent (10 ints) later.
    check_layout(&t, 2, &ints(&[0, 1, 4, 5, 8, 9, 10, 11, 14, 15, 18, 19]));
    assert_eq!(t.envelope(), (3, 0, 1, Combiner::Vector));
    assert_eq!(t.contents().0, vec![3, 2, 4]);
    // Stride == blocklen is contiguous.
    let c = arc(Datatype::vector(4, 2, 2, &int()));
    assert_eq!(c.contiguous_offset(), Some(0));
}

#[test]
fn vector_with_negative_stride() {
    let t = arc(Datatype::vector(3, 2, -4, &int()));
    // MPICH: size 24 lb -32 extent 40 true_lb -32 true_extent 40.
    assert_eq!(t.size(), 24);
    assert_eq!(bounds(&t), (-32, 40, -32, 40));
    check_layout(&t, 1, &ints(&[0, 1, -4, -3, -8, -7]));
}

#[test]
fn hvector_bounds_and_layout() {
    let t = arc(Datatype::hvector(2, 1, -3, &bt(Builtin::DoubleInt)));
    // MPICH: lb -3 extent 19 true_lb -3 true_extent 15.
    assert_eq!(bounds(&t), (-3, 19, -3, 15));
    check_layout(&t, 1, &[span(0, 12), span(-3, 12)].concat());
    let h = arc(Datatype::hvector(3, 2, 20, &int()));
    check_layout(&h, 1, &[span(0, 8), span(20, 8), span(40, 8)].concat());
    assert_eq!(h.envelope(), (2, 1, 1, Combiner::Hvector));
    assert_eq!((h.contents().0, h.contents().1), (vec![3, 2], vec![20]));
}

#[test]
fn indexed_family() {
    let t = arc(Datatype::indexed(&[1, 1], &[-2, 3], &int()));
    // MPICH: lb -8 extent 24.
    assert_eq!(bounds(&t), (-8, 24, -8, 24));
    check_layout(&t, 1, &ints(&[-2, 3]));
    assert_eq!(t.envelope(), (5, 0, 1, Combiner::Indexed));
    assert_eq!(t.contents().0, vec![2, 1, 1, -2, 3]);

    // Inner bounds propagate: two of them one extent apart, or placed at byte 100.
    let inner = t.clone();
    let c = arc(Datatype::contiguous(2, &inner));
    assert_eq!(bounds(&c), (-8, 48, -8, 48));
    check_layout(&c, 1, &ints(&[-2, 3, 4, 9]));
    let r = arc(Datatype::resized(&inner, 0, 100));
    let s = arc(Datatype::structure(&[2], &[100], &[r]));
    assert_eq!(bounds(&s), (100, 200, 92, 124));

    let t = arc(Datatype::indexed(&[2, 0, 1], &[5, 100, 0], &int()));
    // Type-map order, not address order; the empty block does not count for bounds.
    assert_eq!(bounds(&t), (0, 28, 0, 28));
    check_layout(&t, 1, &ints(&[5, 6, 0]));

    let t = arc(Datatype::hindexed(&[1, 2], &[2, 12], &int()));
    assert_eq!(bounds(&t), (2, 18, 2, 18));
    check_layout(&t, 1, &[span(2, 4), span(12, 8)].concat());
    assert_eq!(t.envelope(), (3, 2, 1, Combiner::Hindexed));
    assert_eq!(t.contents().0, vec![2, 1, 2]);
    assert_eq!(t.contents().1, vec![2, 12]);

    let t = arc(Datatype::indexed_block(2, &[4, 0], &int()));
    check_layout(&t, 1, &ints(&[4, 5, 0, 1]));
    assert_eq!(t.envelope(), (4, 0, 1, Combiner::IndexedBlock));
    assert_eq!(t.contents().0, vec![2, 2, 4, 0]);

    let t = arc(Datatype::hindexed_block(1, &[-4, 6], &int()));
    assert_eq!(bounds(&t), (-4, 14, -4, 14));
    check_layout(
        &t,
        2,
        &[span(-4, 4), span(6, 4), span(10, 4), span(20, 4)].concat(),
    );
    assert_eq!(t.envelope(), (2, 2, 1, Combiner::HindexedBlock));
    assert_eq!((t.contents().0, t.contents().1), (vec![2, 1], vec![-4, 6]));
}

fn char_double(disp: Aint) -> TypeRef {
    arc(Datatype::structure(
        &[1, 1],
        &[0, disp],
        &[bt(Builtin::Char), bt(Builtin::Double)],
    ))
}

#[test]
fn struct_extent_is_aligned() {
    let t = char_double(8);
    assert_eq!(
        (t.size(), t.lb(), t.extent(), t.true_extent()),
        (9, 0, 16, 16)
    );
    check_layout(
        &t,
        2,
        &[span(0, 1), span(8, 8), span(16, 1), span(24, 8)].concat(),
    );
    assert_eq!(t.homogeneous_primitive(), None);
    assert_eq!(t.envelope(), (3, 2, 2, Combiner::Struct));
    let (i, a, d) = t.contents();
    assert_eq!((i, a), (vec![2, 1, 1], vec![0, 8]));
    assert_eq!(d[1].is_builtin(), Some(Builtin::Double));

    // Packed C struct: data ends at 9, extent still rounded to 16 (MPICH).
    let t = char_double(1);
    assert_eq!(bounds(&t), (0, 16, 0, 9));
    check_layout(&t, 2, &[span(0, 9), span(16, 9)].concat());

    // A resized member's markers count for the bounds, alignment still applies.
    let r = arc(Datatype::resized(&bt(Builtin::Double), -4, 12));
    assert_eq!(bounds(&r), (-4, 12, 0, 8));
    let t = arc(Datatype::structure(
        &[1, 1],
        &[0, 1],
        &[bt(Builtin::Char), r],
    ));
    assert_eq!(bounds(&t), (-3, 16, 0, 9));

    // Nested struct: alignment of the inner struct is that of its int.
    let s1 = arc(Datatype::structure(
        &[1, 1],
        &[0, 4],
        &[int(), bt(Builtin::Char)],
    ));
    assert_eq!((s1.size(), s1.extent(), s1.true_extent()), (5, 8, 5));
    let t = arc(Datatype::structure(
        &[1, 1],
        &[0, 1],
        &[bt(Builtin::Char), s1],
    ));
    assert_eq!((t.size(), t.extent(), t.true_extent()), (6, 12, 6));

    // Zero-length members count for nothing, alignment included.
    let t = arc(Datatype::structure(
        &[1, 0],
        &[0, 1],
        &[bt(Builtin::Char), bt(Builtin::Double)],
    ));
    assert_eq!((t.size(), t.extent()), (1, 1));
    assert_eq!(t.homogeneous_primitive(), Some(Primitive::I8));
    let t = arc(Datatype::structure(&[], &[], &[]));
    assert_eq!((t.size(), t.extent(), t.true_extent()), (0, 0, 0));

    // long double aligns to 16.
    let t = arc(Datatype::structure(
        &[1, 1],
        &[0, 1],
        &[bt(Builtin::Char), bt(Builtin::LongDouble)],
    ));
    assert_eq!((t.size(), t.extent()), (17, 32));

    // Two ints at 0 and 4: memory-contiguous.
    let t = arc(Datatype::structure(&[1, 1], &[0, 4], &[int(), int()]));
    assert_eq!(t.contiguous_offset(), Some(0));
    assert_eq!(t.homogeneous_primitive(), Some(Primitive::I32));
    // One int at 4: lb 4, extent 4, so n elements are the bytes [buf+4, buf+4+4n).
    let t = arc(Datatype::structure(&[1], &[4], &[int()]));
    assert_eq!((t.lb(), t.extent()), (4, 4));
    assert_eq!(t.contiguous_offset(), Some(4));
    check_layout(&t, 3, &span(4, 12));
}

#[test]
fn resized_changes_only_bounds() {
    let t = arc(Datatype::resized(&int(), -4, 12));
    assert_eq!(bounds(&t), (-4, 12, 0, 4));
    assert_eq!(t.ub(), 8);
    assert_eq!(t.contiguous_offset(), None);
    check_layout(&t, 3, &[span(0, 4), span(12, 4), span(24, 4)].concat());
    assert_eq!(t.envelope(), (0, 2, 1, Combiner::Resized));
    assert_eq!(t.contents().1, vec![-4, 12]);
    let same = arc(Datatype::resized(&int(), 0, 4));
    assert_eq!(same.contiguous_offset(), Some(0));
    // A vector of resized ints uses the new extent.
    let v = arc(Datatype::vector(2, 2, 3, &t));
    check_layout(
        &v,
        1,
        &[span(0, 4), span(12, 4), span(36, 4), span(48, 4)].concat(),
    );
}

/// Element indices of a subarray in type-map (memory) order, by a plain loop.
fn subarray_elems(sizes: &[i64], sub: &[i64], starts: &[i64], order: Order) -> Vec<isize> {
    let nd = sizes.len();
    let mut out = vec![];
    let total: i64 = sub.iter().product();
    for k in 0..total {
        // Decompose k with the memory-fastest dimension varying fastest.
        let mut idx = vec![0i64; nd];
        let mut r = k;
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).rev().collect(),
            Order::Fortran => (0..nd).collect(),
        };
        for &d in &dims {
            idx[d] = r % sub[d] + starts[d];
            r /= sub[d];
        }
        let mut lin = 0i64;
        match order {
            Order::C => {
                for d in 0..nd {
                    lin = lin * sizes[d] + idx[d];
                }
            }
            Order::Fortran => {
                for d in (0..nd).rev() {
                    lin = lin * sizes[d] + idx[d];
                }
            }
        }
        out.push(lin as isize);
    }
    out
}

#[test]
fn subarrays_match_a_hand_loop() {
    let cases: &[(&[i64], &[i64], &[i64])] = &[
        (&[4, 5], &[2, 3], &[1, 1]),
        (&[6, 7], &[6, 2], &[0, 5]),
        (&[3, 4, 5], &[2, 2, 3], &[1, 1, 2]),
        (&[4, 3, 2, 5], &[2, 3, 1, 2], &[1, 0, 1, 3]),
        (&[9], &[4], &[3]),
    ];
    for &(sizes, sub, starts) in cases {
        for order in [Order::C, Order::Fortran] {
            let t = arc(Datatype::subarray(sizes, sub, starts, order, &int()));
            let elems = subarray_elems(sizes, sub, starts, order);
            check_layout(&t, 1, &ints(&elems));
            let full: i64 = sizes.iter().product();
            assert_eq!((t.lb(), t.extent()), (0, full as isize * 4));
            let first = *elems.iter().min().unwrap();
            let last = *elems.iter().max().unwrap();
            assert_eq!(
                (t.true_lb(), t.true_extent()),
                (first * 4, (last - first + 1) * 4)
            );
            // Two elements: the second is one whole array later.
            let two: Vec<isize> = elems
                .iter()
                .copied()
                .chain(elems.iter().map(|e| e + full as isize))
                .collect();
            check_layout(&t, 2, &ints(&two));
        }
    }
    let t = arc(Datatype::subarray(
        &[4, 5],
        &[2, 3],
        &[1, 1],
        Order::C,
        &int(),
    ));
    // MPICH: lb 0 extent 80 true_lb 24 true_extent 32.
    assert_eq!(bounds(&t), (0, 80, 24, 32));
    assert_eq!(t.envelope(), (8, 0, 1, Combiner::Subarray));
    assert_eq!(t.contents().0, vec![2, 4, 5, 2, 3, 1, 1, 56]);
    let r = arc(Datatype::resized(&int(), -4, 8));
    let t = arc(Datatype::subarray(&[4, 5], &[2, 3], &[1, 1], Order::C, &r));
    assert_eq!(bounds(&t), (0, 160, 48, 60));
    // Zero-size subarray is valid and empty.
    let t = arc(Datatype::subarray(
        &[4, 5],
        &[0, 3],
        &[0, 1],
        Order::C,
        &int(),
    ));
    assert_eq!((t.size(), t.extent()), (0, 80));
}

#[test]
fn nested_vector_of_struct() {
    let s1 = arc(Datatype::structure(
        &[1, 1],
        &[0, 4],
        &[int(), bt(Builtin::Char)],
    ));
    let v = arc(Datatype::vector(3, 1, 1, &s1));
    // MPICH: size 15 extent 24 true_extent 21.
    assert_eq!((v.size(), v.extent(), v.true_extent()), (15, 24, 21));
    check_layout(&v, 1, &[span(0, 5), span(8, 5), span(16, 5)].concat());
    // vector(2, 2, 3) of {char@0, double@8} (extent 16): elements at 0, 16, 48, 64.
    let cd = char_double(8);
    let v = arc(Datatype::vector(2, 2, 3, &cd));
    let mut want = vec![];
    for e in [0, 16, 48, 64] {
        want.extend(span(e, 1));
        want.extend(span(e + 8, 8));
    }
    check_layout(&v, 1, &want);
    // ... and two of those, one extent (80) apart, streamed at odd offsets.
    let second: Vec<isize> = want.iter().map(|o| o + 80).collect();
    check_layout(&v, 2, &[want.clone(), second].concat());
    assert_eq!(v.count_for_bytes(9 * 4 + 3), (None, 4 * 2 + 1));
    // Struct of vectors and a subarray, three levels deep.
    let sub = arc(Datatype::subarray(
        &[3, 3],
        &[2, 2],
        &[1, 0],
        Order::Fortran,
        &bt(Builtin::Short),
    ));
    let st = arc(Datatype::structure(
        &[1, 2],
        &[-20, 4],
        &[sub.clone(), arc(Datatype::vector(2, 1, 2, &int()))],
    ));
    let sub_elems: Vec<isize> = subarray_elems(&[3, 3], &[2, 2], &[1, 0], Order::Fortran);
    let mut want: Vec<isize> = sub_elems
        .iter()
        .flat_map(|&e| span(-20 + e * 2, 2))
        .collect();
    // vector(2,1,2,int) has extent 12: copies at 4 and 16.
    for base in [4, 16] {
        want.extend(span(base, 4));
        want.extend(span(base + 8, 4));
    }
    check_layout(&st, 1, &want);
    assert_eq!(st.homogeneous_primitive(), None);
}

#[test]
fn chunked_streaming_matches_whole_pack_at_any_offset() {
    let cd = char_double(8);
    let v = arc(Datatype::vector(5, 3, 4, &cd));
    let count = 4;
    let ext = v.extent() as usize;
    let src: Vec<u8> = (0..ext * count + 64).map(pattern).collect();
    // SAFETY: the buffer covers all elements (lb 0, extent ext).
    let whole = unsafe { v.pack(src.as_ptr(), count) };
    for offset in [0, 1, 8, 9, 10, 17, 100, whole.len() - 1] {
        for len in [0, 1, 2, 13, whole.len() - offset] {
            let len = len.min(whole.len() - offset);
            let mut got = vec![0u8; len];
            // SAFETY: as above.
            unsafe { v.pack_range(src.as_ptr(), count, offset, &mut got) };
            assert_eq!(
                got,
                whole[offset..offset + len],
                "offset {offset} len {len}"
            );
        }
    }
}

#[test]
#[should_panic(expected = "outside a stream")]
fn pack_range_refuses_out_of_range() {
    let t = arc(Datatype::vector(2, 1, 2, &int()));
    let src = [0u8; 64];
    let mut out = [0u8; 4];
    // SAFETY: the range check fires before any access.
    unsafe { t.pack_range(src.as_ptr(), 1, 6, &mut out) };
}

#[test]
fn count_for_bytes_counts_partial_elements() {
    let t = char_double(8);
    // MPICH: 9 bytes = 1 element/2 basic; 10 = 3 basic; 17 = 3; 1 = 1.
    assert_eq!(t.count_for_bytes(9), (Some(1), 2));
    assert_eq!(t.count_for_bytes(10), (None, 3));
    assert_eq!(t.count_for_bytes(17), (None, 3));
    assert_eq!(t.count_for_bytes(18), (Some(2), 4));
    assert_eq!(t.count_for_bytes(1), (None, 1));
    assert_eq!(t.count_for_bytes(0), (Some(0), 0));
    let v = arc(Datatype::vector(3, 2, 4, &int()));
    assert_eq!(v.count_for_bytes(24), (Some(1), 6));
    assert_eq!(v.count_for_bytes(30), (None, 7));
    let z = arc(Datatype::contiguous(0, &int()));
    assert_eq!(z.count_for_bytes(0), (Some(0), 0));
    assert_eq!(z.packed_size(10), 0);
    assert_eq!(bt(Builtin::CDoubleComplex).count_for_bytes(24), (None, 1));
}

#[test]
fn zero_count_types_are_valid() {
    let z = arc(Datatype::contiguous(0, &int()));
    assert_eq!((z.size(), z.extent(), z.true_extent()), (0, 0, 0));
    assert_eq!(z.homogeneous_primitive(), Some(Primitive::I32));
    check_layout(&z, 5, &[]);
    let v = arc(Datatype::vector(0, 3, 2, &int()));
    assert_eq!((v.size(), v.extent()), (0, 0));
    let v = arc(Datatype::vector(4, 0, 2, &int()));
    assert_eq!((v.size(), v.extent()), (0, 0));
    let i = arc(Datatype::indexed(&[], &[], &int()));
    assert_eq!(
        (i.size(), i.extent(), i.envelope()),
        (0, 0, (1, 0, 1, Combiner::Indexed))
    );
    // A huge count of an empty type costs nothing.
    let big = arc(Datatype::vector(i64::MAX / 4, 1, 1, &z));
    assert_eq!(big.size(), 0);
}

#[test]
fn large_vectors_stay_compact() {
    let n = 1_000_000usize;
    let v = arc(Datatype::vector(n as i64, 1, 2, &int()));
    assert_eq!(v.block_count(), 1);
    assert_eq!(v.size(), 4 * n);
    let mut buf = vec![0u32; 2 * n];
    for (i, x) in buf.iter_mut().enumerate() {
        *x = i as u32;
    }
    let mut out = [0u8; 8];
    // SAFETY: buf covers the vector's 2n ints.
    unsafe { v.pack_range(buf.as_ptr().cast(), 1, 4 * 777_777, &mut out) };
    assert_eq!(
        u32::from_ne_bytes(out[..4].try_into().unwrap()),
        2 * 777_777
    );
    assert_eq!(
        u32::from_ne_bytes(out[4..].try_into().unwrap()),
        2 * 777_778
    );
    // A billion-byte strided vector is built in O(1).
    let b = arc(Datatype::vector(1_000_000_000, 1, 3, &bt(Builtin::Byte)));
    assert_eq!((b.block_count(), b.size()), (1, 1_000_000_000));
    // Irregular element types flatten to one block per run, still fine at 10^5.
    let cd = char_double(8);
    let c = arc(Datatype::contiguous(100_000, &cd));
    // {char, double} repeated merges into: first char, a regular pattern of
    // (double + next char) runs, last double.
    assert_eq!(c.block_count(), 3);
    assert_eq!(c.size(), 900_000);
}

#[test]
fn homogeneous_primitives() {
    let v = arc(Datatype::vector(3, 2, 4, &int()));
    assert_eq!(v.homogeneous_primitive(), Some(Primitive::I32));
    let c = arc(Datatype::contiguous(2, &bt(Builtin::DoubleInt)));
    assert_eq!(c.homogeneous_primitive(), Some(Primitive::DoubleInt));
    let s = arc(Datatype::structure(
        &[1, 1],
        &[0, 8],
        &[int(), bt(Builtin::Integer)],
    ));
    assert_eq!(s.homogeneous_primitive(), Some(Primitive::I32));
    let s = arc(Datatype::structure(
        &[1, 1],
        &[0, 8],
        &[int(), bt(Builtin::Float)],
    ));
    assert_eq!(s.homogeneous_primitive(), None);
    assert!(Primitive::I64.is_integer() && Primitive::F128.is_float());
    assert!(Primitive::ComplexF64.is_complex() && Primitive::Logical.is_logical());
    assert!(Primitive::ShortInt.is_pair() && !Primitive::I8.is_pair());
}

#[test]
fn dup_name_and_commit() {
    let v = arc(Datatype::vector(3, 2, 4, &int()));
    assert!(!v.is_committed());
    assert_eq!(v.name(), "");
    v.set_name("my vector");
    assert_eq!(v.name(), "my vector");
    let d = Datatype::dup(&v);
    assert!(!d.is_committed());
    v.commit();
    assert!(v.is_committed());
    let d2 = Datatype::dup(&v);
    assert!(d2.is_committed(), "dup keeps the committed state");
    assert_eq!(d2.name(), "");
    assert_eq!(bounds(&d2), bounds(&v));
    assert_eq!(d2.envelope(), (0, 0, 1, Combiner::Dup));
    assert!(Arc::ptr_eq(&d2.contents().2[0], &v));
    check_layout(&d2, 1, &ints(&[0, 1, 4, 5, 8, 9]));
    let di = Datatype::dup(&int());
    assert_eq!(di.is_builtin(), None);
    assert_eq!(di.contiguous_offset(), Some(0));
}

#[test]
fn combiner_values_match_mpich() {
    let all = [
        (Combiner::Named, 1),
        (Combiner::Dup, 2),
        (Combiner::Contiguous, 3),
        (Combiner::Vector, 4),
        (Combiner::HvectorInteger, 5),
        (Combiner::Hvector, 6),
        (Combiner::Indexed, 7),
        (Combiner::HindexedInteger, 8),
        (Combiner::Hindexed, 9),
        (Combiner::IndexedBlock, 10),
        (Combiner::StructInteger, 11),
        (Combiner::Struct, 12),
        (Combiner::Subarray, 13),
        (Combiner::Darray, 14),
        (Combiner::F90Real, 15),
        (Combiner::F90Complex, 16),
        (Combiner::F90Integer, 17),
        (Combiner::Resized, 18),
        (Combiner::HindexedBlock, 19),
    ];
    for (c, v) in all {
        assert_eq!(c.as_mpich(), v);
    }
    assert_eq!(Order::from_mpich(57), Some(Order::Fortran));
    assert_eq!(Order::C.as_mpich(), 56);
}

#[test]
fn constructor_errors_name_the_call() {
    let e = Datatype::vector(-1, 1, 1, &int()).unwrap_err();
    assert_eq!(e.class, ErrorClass::Count);
    assert_eq!(e.message, "MPI_Type_vector: count -1 is negative");
    let e = Datatype::contiguous(-5, &int()).unwrap_err();
    assert_eq!(
        (e.class, e.message.as_str()),
        (
            ErrorClass::Count,
            "MPI_Type_contiguous: count -5 is negative"
        )
    );
    let e = Datatype::hvector(1, -2, 8, &int()).unwrap_err();
    assert_eq!(e.class, ErrorClass::Arg);
    assert!(e
        .message
        .starts_with("MPI_Type_create_hvector: blocklength -2"));
    let e = Datatype::indexed(&[1, -1], &[0, 1], &int()).unwrap_err();
    assert_eq!(e.class, ErrorClass::Arg);
    assert!(e.message.contains("MPI_Type_indexed: blocklength[1] -1"));
    let e = Datatype::hindexed(&[1, 1], &[0], &int()).unwrap_err();
    assert_eq!(e.class, ErrorClass::Arg);
    assert!(e.message.starts_with("MPI_Type_create_hindexed:"));
    let e = Datatype::indexed_block(-1, &[0], &int()).unwrap_err();
    assert!(e.message.starts_with("MPI_Type_create_indexed_block:"));
    let e = Datatype::hindexed_block(-1, &[0], &int()).unwrap_err();
    assert!(e.message.starts_with("MPI_Type_create_hindexed_block:"));
    let e = Datatype::structure(&[1], &[0, 1], &[int()]).unwrap_err();
    assert_eq!(e.class, ErrorClass::Arg);
    assert!(e.message.starts_with("MPI_Type_create_struct:"));
    let e = Datatype::structure(&[1, 1], &[0, 1], &[int()]).unwrap_err();
    assert!(e.message.contains("array_of_types"));
    for (sizes, sub, starts) in [
        (&[4, 5][..], &[2, 3][..], &[3, 1][..]),
        (&[4, 5], &[5, 3], &[0, 0]),
        (&[0, 5], &[0, 3], &[0, 0]),
        (&[4, 5], &[2, 3], &[0]),
        (&[], &[], &[]),
    ] {
        let e = Datatype::subarray(sizes, sub, starts, Order::C, &int()).unwrap_err();
        assert_eq!(e.class, ErrorClass::Arg, "{sizes:?} {sub:?} {starts:?}");
        assert!(e.message.starts_with("MPI_Type_create_subarray:"));
    }
    let e = Datatype::resized(&int(), isize::MAX, 10).unwrap_err();
    assert!(e.message.starts_with("MPI_Type_create_resized:"));
    let e = Datatype::hvector(2, 1, isize::MAX / 2, &int()).unwrap_err();
    assert!(e.message.contains("overflow"));
    let e = Datatype::contiguous(i64::MAX / 2, &int()).unwrap_err();
    assert!(e.message.contains("overflow"));
}

/// MPI_BOTTOM: a NULL base with absolute addresses as displacements (as Fortran's
/// MPI_GET_ADDRESS + MPI_TYPE_CREATE_STRUCT programs do) packs and unpacks the variables.
#[test]
fn absolute_addresses_from_a_null_base() {
    let src: [i32; 3] = [7, 8, 9];
    let mut dst: [i32; 3] = [0; 3];
    let a0 = std::ptr::addr_of!(src[0]) as Aint;
    let a2 = std::ptr::addr_of!(src[2]) as Aint;
    let t = arc(Datatype::hindexed(&[1, 1], &[a0, a2], &int()));
    let mut packed = [0u8; 8];
    // SAFETY: the displacements are the addresses of live elements of `src`.
    unsafe { t.pack_range(std::ptr::null(), 1, 0, &mut packed) };
    assert_eq!(packed[..4], 7i32.to_ne_bytes());
    assert_eq!(packed[4..], 9i32.to_ne_bytes());
    let b0 = std::ptr::addr_of_mut!(dst[0]) as Aint;
    let b1 = std::ptr::addr_of_mut!(dst[1]) as Aint;
    let u = arc(Datatype::hindexed(&[1, 1], &[b1, b0], &int()));
    // SAFETY: the displacements are the addresses of live elements of `dst`.
    unsafe { u.unpack_range(std::ptr::null_mut(), 1, 0, &packed) };
    assert_eq!(dst, [9, 7, 0]);
}

#[test]
fn darray_and_f90_types_decode_as_built() {
    // A darray over a map the caller computed: the map's bounds and layout, the combiner
    // and arguments of MPI_Type_create_darray (MPICH's constants, stored as given).
    let map = arc(Datatype::resized(
        &arc(Datatype::contiguous(2, &int())),
        0,
        16,
    ));
    let args = DarrayArgs {
        size: 2,
        rank: 1,
        gsizes: vec![4],
        distribs: vec![121],
        dargs: vec![-49767],
        psizes: vec![2],
        order: Order::Fortran,
    };
    let d = Datatype::darray(args.clone(), &int(), &map).expect("darray");
    assert_eq!(bounds(&d), bounds(&map));
    assert_eq!(d.envelope(), (8, 0, 1, Combiner::Darray));
    let (is, as_, ds) = d.contents();
    assert_eq!(is, vec![2, 1, 1, 4, 121, -49767, 2, 57]);
    assert!(as_.is_empty() && Arc::ptr_eq(&ds[0], &int()));
    assert!(!d.is_predefined());
    let bad = DarrayArgs {
        psizes: vec![],
        ..args
    };
    assert_eq!(
        Datatype::darray(bad, &int(), &map).unwrap_err().class,
        ErrorClass::Arg
    );

    // f90: the kind's map, committed, predefined, integer contents only.
    let r8 = bt(Builtin::Double);
    let f = Datatype::f90(Combiner::F90Real, vec![15, 300], &r8).expect("f90");
    assert!(f.is_committed() && f.is_predefined() && f.is_builtin().is_none());
    assert_eq!(bounds(&f), bounds(&r8));
    assert_eq!(f.size(), 8);
    assert_eq!(f.envelope(), (2, 0, 0, Combiner::F90Real));
    let (is, as_, ds) = f.contents();
    assert!(is == vec![15, 300] && as_.is_empty() && ds.is_empty());
    assert_eq!(f.homogeneous_primitive(), r8.homogeneous_primitive());
    let i = Datatype::f90(Combiner::F90Integer, vec![9], &int()).expect("f90 integer");
    assert_eq!(i.envelope(), (1, 0, 0, Combiner::F90Integer));
    assert!(Datatype::f90(Combiner::F90Integer, vec![9, 1], &int()).is_err());
    assert!(Datatype::f90(Combiner::Dup, vec![9], &int()).is_err());
}
