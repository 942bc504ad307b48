//! external32 tests. Expected bytes are written from MPI-3.1 §13.5.2 (big-endian, IEEE,
//! the sizes of its table), not from the implementation.

use super::*;
use crate::datatype::{Aint, Builtin, Count, Datatype, Order, TypeRef};
use std::sync::Arc;

fn bt(b: Builtin) -> TypeRef {
    Datatype::builtin(b)
}

fn arc(t: MpiResult<Datatype>) -> TypeRef {
    Arc::new(t.expect("constructor failed"))
}

/// The native bytes of `vals`, concatenated.
fn bytes_of<T: Copy>(vals: &[T]) -> Vec<u8> {
    let n = std::mem::size_of_val(vals);
    // SAFETY: reading the bytes of plain values we own (the test types have no padding).
    unsafe { std::slice::from_raw_parts(vals.as_ptr() as *const u8, n) }.to_vec()
}

fn pack(t: &Datatype, buf: &[u8], count: usize) -> MpiResult<Vec<u8>> {
    let mut out = Vec::new();
    // SAFETY: every test buffer holds `count` elements of `t` (checked by the callers'
    // construction; the type maps lie within the buffer).
    unsafe { pack_external32(t, buf.as_ptr(), count, &mut out) }?;
    Ok(out)
}

/// Unpack into a buffer of `len` bytes prefilled with 0xEE; returns the buffer.
fn unpack(t: &Datatype, data: &[u8], count: usize, len: usize) -> Vec<u8> {
    let mut buf = vec![0xEEu8; len];
    // SAFETY: `buf` holds `count` elements of `t`.
    let used = unsafe { unpack_external32(t, data, buf.as_mut_ptr(), count) }.unwrap();
    assert_eq!(used, external32_size(t, count).unwrap());
    buf
}

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// Pack `native` (one or more elements of `b`), compare with `want`, unpack back.
fn check_builtin(b: Builtin, native: &[u8], want: &str) {
    let t = bt(b);
    let count = native.len() / t.extent() as usize;
    let got = pack(&t, native, count).unwrap();
    assert_eq!(got, hex(want), "{}", b.name());
    assert_eq!(
        unpack(&t, &got, count, native.len()),
        native,
        "{}",
        b.name()
    );
}

#[test]
fn sizes_follow_the_standard_table() {
    use Builtin::*;
    let table: &[(Builtin, usize)] = &[
        (Char, 1),
        (SignedChar, 1),
        (UnsignedChar, 1),
        (Byte, 1),
        (WChar, 2),
        (Short, 2),
        (UnsignedShort, 2),
        (Int, 4),
        (Unsigned, 4),
        (Long, 4),
        (UnsignedLong, 4),
        (LongLong, 8),
        (UnsignedLongLong, 8),
        (Float, 4),
        (Double, 8),
        (LongDouble, 16),
        (Int8, 1),
        (Int16, 2),
        (Int32, 4),
        (Int64, 8),
        (Uint8, 1),
        (Uint16, 2),
        (Uint32, 4),
        (Uint64, 8),
        (CBool, 1),
        (CFloatComplex, 8),
        (CDoubleComplex, 16),
        (CLongDoubleComplex, 32),
        (Aint, 8),
        (Offset, 8),
        (Count, 8),
        (Packed, 1),
        (FloatInt, 8),
        (DoubleInt, 12),
        (LongInt, 8),
        (TwoInt, 8),
        (ShortInt, 6),
        (LongDoubleInt, 20),
        (Character, 1),
        (Logical, 4),
        (Integer, 4),
        (Real, 4),
        (DoublePrecision, 8),
        (Complex, 8),
        (DoubleComplex, 16),
        (TwoReal, 8),
        (TwoDoublePrecision, 16),
        (TwoInteger, 8),
        (Integer1, 1),
        (Integer2, 2),
        (Integer4, 4),
        (Integer8, 8),
        (Real4, 4),
        (Real8, 8),
        (Real16, 16),
        (Complex8, 8),
        (Complex16, 16),
        (Complex32, 32),
        (CxxBool, 1),
        (CxxFloatComplex, 8),
        (CxxDoubleComplex, 16),
        (CxxLongDoubleComplex, 32),
    ];
    assert_eq!(
        table.len(),
        Builtin::ALL.len(),
        "every builtin is in the table"
    );
    for &(b, ext) in table {
        let t = bt(b);
        assert_eq!(external32_size(&t, 1).unwrap(), ext, "{}", b.name());
        assert_eq!(external32_size(&t, 3).unwrap(), 3 * ext, "{}", b.name());
        // The sequence accounts for exactly the native packed bytes.
        let native: usize = builtin_convs(b)
            .iter()
            .map(|&(c, n)| c.native_size() * n)
            .sum();
        assert_eq!(native, b.size(), "{}", b.name());
    }
}

#[test]
fn integers_are_big_endian_at_their_external_sizes() {
    check_builtin(Builtin::Int, &bytes_of(&[1i32]), "00 00 00 01");
    check_builtin(
        Builtin::Int,
        &bytes_of(&[-2i32, 0x0102_0304]),
        "ff ff ff fe 01 02 03 04",
    );
    check_builtin(
        Builtin::Unsigned,
        &bytes_of(&[0xdead_beefu32]),
        "de ad be ef",
    );
    check_builtin(Builtin::Short, &bytes_of(&[-3i16]), "ff fd");
    check_builtin(Builtin::UnsignedShort, &bytes_of(&[0x1234u16]), "12 34");
    check_builtin(Builtin::Char, b"A", "41");
    check_builtin(Builtin::SignedChar, &bytes_of(&[-1i8]), "ff");
    check_builtin(Builtin::UnsignedChar, &[0x80], "80");
    check_builtin(Builtin::Byte, &[0x5a], "5a");
    check_builtin(Builtin::Packed, &[0x5b], "5b");
    check_builtin(Builtin::CBool, &[1], "01");
    check_builtin(Builtin::CxxBool, &[0], "00");
    check_builtin(Builtin::Int8, &bytes_of(&[-128i8]), "80");
    check_builtin(Builtin::Uint8, &[200], "c8");
    check_builtin(Builtin::Int16, &bytes_of(&[-2i16]), "ff fe");
    check_builtin(Builtin::Uint16, &bytes_of(&[0xabcdu16]), "ab cd");
    check_builtin(Builtin::Int32, &bytes_of(&[i32::MIN]), "80 00 00 00");
    check_builtin(Builtin::Uint32, &bytes_of(&[u32::MAX]), "ff ff ff ff");
    check_builtin(
        Builtin::Int64,
        &bytes_of(&[-2i64]),
        "ff ff ff ff ff ff ff fe",
    );
    check_builtin(
        Builtin::Uint64,
        &bytes_of(&[0x0102_0304_0506_0708u64]),
        "01 02 03 04 05 06 07 08",
    );
    check_builtin(
        Builtin::LongLong,
        &bytes_of(&[-3i64]),
        "ff ff ff ff ff ff ff fd",
    );
    check_builtin(
        Builtin::UnsignedLongLong,
        &bytes_of(&[u64::MAX]),
        "ff ff ff ff ff ff ff ff",
    );
    for b in [Builtin::Aint, Builtin::Offset, Builtin::Count] {
        check_builtin(b, &bytes_of(&[5i64]), "00 00 00 00 00 00 00 05");
    }
    // C long and unsigned long are 4 bytes in external32; they come back sign- or
    // zero-extended.
    check_builtin(Builtin::Long, &bytes_of(&[-2i64]), "ff ff ff fe");
    check_builtin(
        Builtin::Long,
        &bytes_of(&[i32::MAX as i64, i32::MIN as i64]),
        "7f ff ff ff 80 00 00 00",
    );
    check_builtin(Builtin::UnsignedLong, &bytes_of(&[3u64]), "00 00 00 03");
    check_builtin(
        Builtin::UnsignedLong,
        &bytes_of(&[u32::MAX as u64]),
        "ff ff ff ff",
    );
    // wchar_t is 4 bytes here, 2 in external32.
    check_builtin(Builtin::WChar, &bytes_of(&[0x41i32, 0xffff]), "00 41 ff ff");
    // Fortran.
    check_builtin(Builtin::Character, b"z", "7a");
    check_builtin(Builtin::Logical, &bytes_of(&[1i32]), "00 00 00 01");
    check_builtin(Builtin::Integer, &bytes_of(&[-1i32]), "ff ff ff ff");
    check_builtin(Builtin::Integer1, &bytes_of(&[-2i8]), "fe");
    check_builtin(Builtin::Integer2, &bytes_of(&[258i16]), "01 02");
    check_builtin(Builtin::Integer4, &bytes_of(&[258i32]), "00 00 01 02");
    check_builtin(
        Builtin::Integer8,
        &bytes_of(&[258i64]),
        "00 00 00 00 00 00 01 02",
    );
}

#[test]
fn reals_and_complexes_are_ieee_big_endian() {
    check_builtin(
        Builtin::Double,
        &bytes_of(&[1.0f64]),
        "3f f0 00 00 00 00 00 00",
    );
    check_builtin(
        Builtin::Double,
        &bytes_of(&[-2.0f64]),
        "c0 00 00 00 00 00 00 00",
    );
    check_builtin(Builtin::Float, &bytes_of(&[1.0f32]), "3f 80 00 00");
    check_builtin(Builtin::Float, &bytes_of(&[-0.0f32]), "80 00 00 00");
    check_builtin(Builtin::Real, &bytes_of(&[0.5f32]), "3f 00 00 00");
    check_builtin(Builtin::Real4, &bytes_of(&[2.0f32]), "40 00 00 00");
    check_builtin(
        Builtin::DoublePrecision,
        &bytes_of(&[0.1f64]),
        "3f b9 99 99 99 99 99 9a",
    );
    check_builtin(
        Builtin::Real8,
        &bytes_of(&[f64::INFINITY]),
        "7f f0 00 00 00 00 00 00",
    );
    for b in [
        Builtin::CFloatComplex,
        Builtin::Complex,
        Builtin::Complex8,
        Builtin::CxxFloatComplex,
    ] {
        check_builtin(b, &bytes_of(&[1.0f32, 2.0]), "3f 80 00 00 40 00 00 00");
    }
    for b in [
        Builtin::CDoubleComplex,
        Builtin::DoubleComplex,
        Builtin::Complex16,
        Builtin::CxxDoubleComplex,
    ] {
        check_builtin(
            b,
            &bytes_of(&[1.0f64, -1.0]),
            "3f f0 00 00 00 00 00 00 bf f0 00 00 00 00 00 00",
        );
    }
    // REAL*16 is binary128 already: byte order only. 1.0 = 0x3fff << 112.
    let one_q: u128 = 0x3fff << 112;
    let one = "3f ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    check_builtin(Builtin::Real16, &bytes_of(&[one_q]), one);
    check_builtin(
        Builtin::Complex32,
        &bytes_of(&[one_q, one_q | 1 << 127]),
        &format!("{one} bf ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00"),
    );
}

/// The 16 bytes of an x87 `long double` from its significand and sign+exponent.
fn x87(mant: u64, se: u16) -> Vec<u8> {
    let mut v = mant.to_le_bytes().to_vec();
    v.extend_from_slice(&se.to_le_bytes());
    v.extend_from_slice(&[0; 6]);
    v
}

#[test]
fn long_double_becomes_binary128() {
    // 1.0: x87 significand 1.000 (explicit integer bit), exponent 0x3fff.
    check_builtin(
        Builtin::LongDouble,
        &x87(1 << 63, 0x3fff),
        "3f ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    );
    // -1.5
    check_builtin(
        Builtin::LongDouble,
        &x87(0xc000_0000_0000_0000, 0xbfff),
        "bf ff 80 00 00 00 00 00 00 00 00 00 00 00 00 00",
    );
    // All 63 fraction bits set: they land in the top 63 of the 112.
    check_builtin(
        Builtin::LongDouble,
        &x87(u64::MAX, 0x4000),
        "40 00 ff ff ff ff ff ff ff fe 00 00 00 00 00 00",
    );
    // The smallest subnormal: significand 1, exponent 0 -> fraction 1 << 49.
    check_builtin(
        Builtin::LongDouble,
        &x87(1, 0),
        "00 00 00 00 00 00 00 00 00 02 00 00 00 00 00 00",
    );
    // Zeros, infinities, a quiet NaN with payload.
    check_builtin(
        Builtin::LongDouble,
        &x87(0, 0x8000),
        "80 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    );
    check_builtin(
        Builtin::LongDouble,
        &x87(1 << 63, 0xffff),
        "ff ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    );
    check_builtin(
        Builtin::LongDouble,
        &x87(0xc000_0000_0000_0001, 0x7fff),
        "7f ff 80 00 00 00 00 00 00 02 00 00 00 00 00 00",
    );
    // Complex long double: two of them.
    let mut z = x87(1 << 63, 0x3fff);
    z.extend(x87(1 << 63, 0x4000));
    check_builtin(
        Builtin::CLongDoubleComplex,
        &z,
        "3f ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         40 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    );
}

#[test]
fn binary128_rounds_to_nearest_even_into_x87() {
    let x = |q: u128| binary128_to_x87(q).to_vec();
    let one: u128 = 0x3fff << 112;
    let half_ulp: u128 = 1 << 48;
    // Below half an x87 ulp: down; above: up; exactly half: to even.
    assert_eq!(x(one | (half_ulp - 1)), x87(1 << 63, 0x3fff));
    assert_eq!(x(one | (half_ulp + 1)), x87((1 << 63) + 1, 0x3fff));
    assert_eq!(x(one | half_ulp), x87(1 << 63, 0x3fff));
    let odd = one | 1 << 49;
    assert_eq!(x(odd | half_ulp), x87((1 << 63) + 2, 0x3fff));
    // All-ones fraction rounds up into the next binade.
    let all = one | ((1u128 << 112) - 1);
    assert_eq!(x(all), x87(1 << 63, 0x4000));
    // The largest binary128 overflows x87's range: infinity.
    let max = (0x7ffeu128 << 112) | ((1u128 << 112) - 1);
    assert_eq!(x(max), x87(1 << 63, 0x7fff));
    // A subnormal that rounds up to the smallest normal gets exponent 1.
    let sub = (1u128 << 112) - 1;
    assert_eq!(x(sub), x87(1 << 63, 1));
    // A signalling NaN whose payload lives only in the low bits stays a NaN.
    let nan = (0x7fffu128 << 112) | 1;
    let got = x(nan);
    assert_eq!(u16::from_le_bytes([got[8], got[9]]), 0x7fff);
    assert_ne!(u64::from_le_bytes(got[..8].try_into().unwrap()) << 1, 0);
}

#[test]
fn x87_round_trips_exactly() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut cases = vec![
        x87(0, 0),
        x87(0, 0x8000),
        x87(1, 0),
        x87((1 << 63) - 1, 0x8000),
        x87(1 << 63, 0x7fff),
        x87(1 << 63, 0xffff),
        x87(0xc000_0000_0000_0000, 0x7fff),
        x87(0xa000_0000_0000_1234, 0xffff),
        x87(u64::MAX, 0x7ffe),
        x87(1 << 63, 1),
    ];
    for _ in 0..2000 {
        let mant = next() | 1 << 63;
        let se = (next() % 0xffff) as u16;
        if se & 0x7fff != 0 {
            cases.push(x87(mant, se));
        }
    }
    let t = bt(Builtin::LongDouble);
    let native: Vec<u8> = cases.concat();
    let ext = pack(&t, &native, cases.len()).unwrap();
    assert_eq!(unpack(&t, &ext, cases.len(), native.len()), native);
}

#[test]
fn doubles_round_trip_bit_for_bit() {
    let mut bits: Vec<u64> = vec![
        0,
        1 << 63,               // -0.0
        0x7ff0_0000_0000_0000, // +inf
        0xfff0_0000_0000_0000, // -inf
        0x7ff8_0000_0000_0000, // quiet NaN
        0x7ff0_0000_0000_0001, // signalling NaN
        0xfff8_dead_beef_0001, // negative NaN with payload
        1,                     // smallest subnormal
        0x000f_ffff_ffff_ffff, // largest subnormal
        0x8000_0000_0000_0001, // negative subnormal
        0x0010_0000_0000_0000, // smallest normal
        0x7fef_ffff_ffff_ffff, // largest finite
        (1.0f64 / 3.0).to_bits(),
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..10_000 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        bits.push(x);
    }
    let vals: Vec<f64> = bits.iter().map(|&b| f64::from_bits(b)).collect();
    let t = bt(Builtin::Double);
    let native = bytes_of(&vals);
    let ext = pack(&t, &native, vals.len()).unwrap();
    let want: Vec<u8> = bits.iter().flat_map(|b| b.to_be_bytes()).collect();
    assert_eq!(ext, want);
    assert_eq!(unpack(&t, &ext, vals.len(), native.len()), native);
    // The same through floats.
    let fbits: Vec<u32> = bits.iter().map(|&b| (b >> 32) as u32).collect();
    let t = bt(Builtin::Float);
    let native = bytes_of(&fbits);
    let ext = pack(&t, &native, fbits.len()).unwrap();
    let want: Vec<u8> = fbits.iter().flat_map(|b| b.to_be_bytes()).collect();
    assert_eq!(ext, want);
    assert_eq!(unpack(&t, &ext, fbits.len(), native.len()), native);
}

#[test]
fn pair_types_are_their_members_without_padding() {
    // struct { double; int; } with 4 bytes of tail padding in memory.
    let mut di = bytes_of(&[1.0f64]);
    di.extend(bytes_of(&[7i32]));
    di.extend([0xEE; 4]);
    let t = bt(Builtin::DoubleInt);
    let ext = pack(&t, &di, 1).unwrap();
    assert_eq!(ext, hex("3f f0 00 00 00 00 00 00 00 00 00 07"));
    assert_eq!(unpack(&t, &ext, 1, 16), di, "padding untouched");
    // struct { short; int; }: a 2-byte hole between the members.
    let mut si = bytes_of(&[3i16]);
    si.extend([0xEE; 2]);
    si.extend(bytes_of(&[-1i32]));
    let t = bt(Builtin::ShortInt);
    let ext = pack(&t, &si, 1).unwrap();
    assert_eq!(ext, hex("00 03 ff ff ff ff"));
    assert_eq!(unpack(&t, &ext, 1, 8), si);
    // struct { long; int; }: the long narrows to 4 bytes.
    let mut li = bytes_of(&[-5i64]);
    li.extend(bytes_of(&[9i32]));
    li.extend([0xEE; 4]);
    let t = bt(Builtin::LongInt);
    let ext = pack(&t, &li, 1).unwrap();
    assert_eq!(ext, hex("ff ff ff fb 00 00 00 09"));
    assert_eq!(unpack(&t, &ext, 1, 16), li);
    // struct { long double; int; }
    let mut ldi = x87(1 << 63, 0x3fff);
    ldi.extend(bytes_of(&[2i32]));
    ldi.extend([0xEE; 12]);
    let t = bt(Builtin::LongDoubleInt);
    let ext = pack(&t, &ldi, 1).unwrap();
    assert_eq!(
        ext,
        hex("3f ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02")
    );
    assert_eq!(unpack(&t, &ext, 1, 32), ldi);
    check_builtin(
        Builtin::FloatInt,
        &[bytes_of(&[1.0f32]), bytes_of(&[4i32])].concat(),
        "3f 80 00 00 00 00 00 04",
    );
    check_builtin(
        Builtin::TwoInt,
        &bytes_of(&[1i32, 2]),
        "00 00 00 01 00 00 00 02",
    );
    check_builtin(
        Builtin::TwoInteger,
        &bytes_of(&[-1i32, 2]),
        "ff ff ff ff 00 00 00 02",
    );
    check_builtin(
        Builtin::TwoReal,
        &bytes_of(&[1.0f32, 2.0]),
        "3f 80 00 00 40 00 00 00",
    );
    check_builtin(
        Builtin::TwoDoublePrecision,
        &bytes_of(&[1.0f64, 2.0]),
        "3f f0 00 00 00 00 00 00 40 00 00 00 00 00 00 00",
    );
}

#[test]
fn vector_with_gaps_packs_only_its_elements() {
    let t = arc(Datatype::vector(3, 1, 2, &bt(Builtin::Int)));
    let native = bytes_of(&[1i32, -1, 2, -1, 3]);
    let ext = pack(&t, &native, 1).unwrap();
    assert_eq!(ext, hex("00 00 00 01 00 00 00 02 00 00 00 03"));
    let back = unpack(&t, &ext, 1, 20);
    let mut want = native.clone();
    for gap in [4..8, 12..16] {
        want[gap].fill(0xEE);
    }
    assert_eq!(back, want, "gaps untouched");
    // Two elements: the second starts one extent (5 ints) on.
    let native2 = bytes_of(&[1i32, 0, 2, 0, 3, 4, 0, 5, 0, 6]);
    // extent of the vector is 5 ints, so element 1 starts at int 5.
    let ext = pack(&t, &native2, 2).unwrap();
    assert_eq!(
        ext,
        hex("00 00 00 01 00 00 00 02 00 00 00 03 00 00 00 04 00 00 00 05 00 00 00 06")
    );
}

#[test]
fn struct_with_padding_and_mixed_members() {
    // struct { char c; double d; long l; } at offsets 0, 8, 16; extent 24.
    let t = arc(Datatype::structure(
        &[1, 1, 1],
        &[0, 8, 16],
        &[bt(Builtin::Char), bt(Builtin::Double), bt(Builtin::Long)],
    ));
    let mut native = vec![b'A'];
    native.extend([0xEE; 7]);
    native.extend(bytes_of(&[1.0f64]));
    native.extend(bytes_of(&[-2i64]));
    native.extend(native.clone());
    native[24] = b'B';
    assert_eq!(external32_size(&t, 2).unwrap(), 2 * (1 + 8 + 4));
    let ext = pack(&t, &native, 2).unwrap();
    let one = |c: &str| format!("{c} 3f f0 00 00 00 00 00 00 ff ff ff fe");
    assert_eq!(ext, hex(&format!("{} {}", one("41"), one("42"))));
    let back = unpack(&t, &ext, 2, 48);
    let mut want = native.clone();
    want[1..8].fill(0xEE);
    want[25..32].fill(0xEE);
    assert_eq!(back, want);
}

#[test]
fn indexed_hindexed_subarray_resized_and_nesting() {
    let long = bt(Builtin::Long);
    // indexed longs: blocks [2 at 0], [1 at 3] (gap of one long).
    let t = arc(Datatype::indexed(&[2, 1], &[0, 3], &long));
    let native = bytes_of(&[1i64, 2, 99, 3]);
    let ext = pack(&t, &native, 1).unwrap();
    assert_eq!(ext, hex("00 00 00 01 00 00 00 02 00 00 00 03"));
    let back = unpack(&t, &ext, 1, 32);
    assert_eq!(&back[..16], &native[..16]);
    assert_eq!(&back[16..24], &[0xEE; 8]);
    assert_eq!(&back[24..], &native[24..]);

    // hindexed with a negative displacement: the order is the type map's, not memory's.
    let short = bt(Builtin::Short);
    let t = arc(Datatype::hindexed(&[1, 1], &[2, -2], &short));
    let native = bytes_of(&[0x0a0bi16, 0, 0x0c0d]);
    // SAFETY: the map covers bytes -2..0 and 2..4 around the middle short.
    let mut out = Vec::new();
    unsafe { pack_external32(&t, native.as_ptr().add(2), 1, &mut out) }.unwrap();
    assert_eq!(out, hex("0c 0d 0a 0b"));

    // A 2x2 subarray of a 3x3 int array, starting at (1,1).
    let int = bt(Builtin::Int);
    let t = arc(Datatype::subarray(
        &[3, 3],
        &[2, 2],
        &[1, 1],
        Order::C,
        &int,
    ));
    let native = bytes_of(&(0..9i32).collect::<Vec<_>>());
    let ext = pack(&t, &native, 1).unwrap();
    assert_eq!(ext, hex("00 00 00 04 00 00 00 05 00 00 00 07 00 00 00 08"));

    // resized(struct{int; double}) then contiguous(3) then a vector of those: repeats of
    // a mixed group nested two deep.
    let s = arc(Datatype::structure(
        &[1, 1],
        &[0, 8],
        &[int.clone(), bt(Builtin::Double)],
    ));
    let r = arc(Datatype::resized(&s, 0, 24));
    let c = arc(Datatype::contiguous(3, &r));
    let v = arc(Datatype::vector(2, 1, 2, &c));
    let elems = 2 * 3;
    assert_eq!(external32_size(&v, 1).unwrap(), elems * 12);
    let mut native = vec![0u8; 4 * 3 * 24];
    for k in 0..12 {
        native[k * 24..k * 24 + 4].copy_from_slice(&(k as i32).to_ne_bytes());
        native[k * 24 + 8..k * 24 + 16].copy_from_slice(&(k as f64).to_ne_bytes());
    }
    let ext = pack(&v, &native, 1).unwrap();
    let want: Vec<u8> = [0usize, 1, 2, 6, 7, 8]
        .iter()
        .flat_map(|&k| {
            let mut e = (k as i32).to_be_bytes().to_vec();
            e.extend((k as f64).to_be_bytes());
            e
        })
        .collect();
    assert_eq!(ext, want);
    let mut back = vec![0u8; native.len()];
    // SAFETY: `back` is as large as `native`, which holds the element.
    unsafe { unpack_external32(&v, &ext, back.as_mut_ptr(), 1) }.unwrap();
    for k in [0usize, 1, 2, 6, 7, 8] {
        assert_eq!(back[k * 24..k * 24 + 4], native[k * 24..k * 24 + 4]);
        assert_eq!(
            back[k * 24 + 8..k * 24 + 16],
            native[k * 24 + 8..k * 24 + 16]
        );
    }
    assert!(
        back[3 * 24..6 * 24].iter().all(|&b| b == 0),
        "skipped rows untouched"
    );

    // A type with no data packs to nothing.
    let empty = arc(Datatype::contiguous(0, &int));
    assert_eq!(external32_size(&empty, 5).unwrap(), 0);
    assert!(pack(&empty, &[], 5).unwrap().is_empty());
}

#[test]
fn values_that_do_not_fit_are_conversion_errors() {
    let long = bt(Builtin::Long);
    let native = bytes_of(&[1i64, 5_000_000_000]);
    let mut out = vec![0xAA];
    // SAFETY: two longs.
    let e = unsafe { pack_external32(&long, native.as_ptr(), 2, &mut out) }.unwrap_err();
    assert_eq!(e.class, ErrorClass::Conversion);
    assert!(
        e.message.contains("MPI_LONG value 5000000000"),
        "{}",
        e.message
    );
    assert!(e.message.contains("element 1"), "{}", e.message);
    assert_eq!(out, vec![0xAA], "output unchanged on error");
    for v in [i32::MIN as i64 - 1, i32::MAX as i64 + 1, i64::MIN] {
        let e = pack(&long, &bytes_of(&[v]), 1).unwrap_err();
        assert_eq!(e.class, ErrorClass::Conversion, "{v}");
    }
    let e = pack(&bt(Builtin::UnsignedLong), &bytes_of(&[1u64 << 32]), 1).unwrap_err();
    assert_eq!(e.class, ErrorClass::Conversion);
    assert!(e.message.contains("MPI_UNSIGNED_LONG value 4294967296"));
    let e = pack(&bt(Builtin::WChar), &bytes_of(&[0x1f600i32]), 1).unwrap_err();
    assert_eq!(e.class, ErrorClass::Conversion);
    assert!(e.message.contains("2 bytes"), "{}", e.message);
    assert!(pack(&bt(Builtin::WChar), &bytes_of(&[-1i32]), 1).is_err());
    // Inside a derived type, through the staging path, in a later chunk.
    let t = arc(Datatype::vector(20_000, 1, 2, &long));
    let mut vals = vec![0i64; 40_000];
    vals[2 * 15_000] = -1 << 40;
    let e = pack(&t, &bytes_of(&vals), 1).unwrap_err();
    assert_eq!(e.class, ErrorClass::Conversion);
    // The pair type's long member too.
    let mut li = bytes_of(&[1i64 << 33]);
    li.extend([0; 8]);
    assert!(pack(&bt(Builtin::LongInt), &li, 1).is_err());
}

#[test]
fn large_strided_buffers_convert_across_chunks() {
    // 100k doubles, every other one: the staging path goes through several chunks.
    let n = 100_000;
    let t = arc(Datatype::vector(n as Count, 1, 2, &bt(Builtin::Double)));
    let vals: Vec<f64> = (0..2 * n).map(|i| i as f64 * 0.25 - 7.0).collect();
    let native = bytes_of(&vals);
    let ext = pack(&t, &native, 1).unwrap();
    let want: Vec<u8> = vals
        .iter()
        .step_by(2)
        .flat_map(|v| v.to_be_bytes())
        .collect();
    assert_eq!(ext, want);
    let mut back = vec![0f64; 2 * n];
    // SAFETY: `back` has room for the vector.
    unsafe { unpack_external32(&t, &ext, back.as_mut_ptr() as *mut u8, 1) }.unwrap();
    for i in 0..2 * n {
        let want = if i % 2 == 0 { vals[i] } else { 0.0 };
        assert_eq!(back[i].to_bits(), want.to_bits(), "{i}");
    }
    // Many small elements (count > chunk) of a non-contiguous type.
    let s = arc(Datatype::structure(
        &[1, 1],
        &[0, 4],
        &[bt(Builtin::Short), bt(Builtin::Int)],
    ));
    let count = 30_000;
    let mut native = Vec::new();
    for k in 0..count {
        native.extend(bytes_of(&[k as i16]));
        native.extend([0xEE; 2]);
        native.extend(bytes_of(&[-(k as i32)]));
    }
    let ext = pack(&s, &native, count).unwrap();
    assert_eq!(ext.len(), 6 * count);
    assert_eq!(&ext[6 * 7..6 * 8], &hex("00 07 ff ff ff f9")[..]);
    assert_eq!(unpack(&s, &ext, count, native.len()), native);
}

#[test]
fn short_data_truncates_and_partial_unpack_stops_at_whole_basic_elements() {
    let s = arc(Datatype::structure(
        &[1, 1],
        &[0, 8],
        &[bt(Builtin::Int), bt(Builtin::Double)],
    ));
    let mut native = Vec::new();
    for k in 0..3i32 {
        native.extend(bytes_of(&[k + 1]));
        native.extend([0xEE; 4]);
        native.extend(bytes_of(&[k as f64 + 0.5]));
    }
    let ext = pack(&s, &native, 3).unwrap();
    assert_eq!(ext.len(), 36);
    let mut buf = vec![0u8; 48];
    // SAFETY: `buf` holds 2 elements (extent 16).
    let e = unsafe { unpack_external32(&s, &ext[..20], buf.as_mut_ptr(), 2) }.unwrap_err();
    assert_eq!(e.class, ErrorClass::Truncate);
    assert!(buf.iter().all(|&b| b == 0), "nothing written on truncation");

    // One element, then the int of the next and 3 bytes of its double.
    let data = &ext[..12 + 4 + 3];
    // SAFETY: `buf` holds 3 elements.
    let done = unsafe { unpack_external32_partial(&s, data, buf.as_mut_ptr(), 3) };
    assert_eq!(
        done,
        External32Unpacked {
            external_bytes: 16,
            native_bytes: 16,
            truncated: false,
        }
    );
    assert_eq!(s.count_for_bytes(done.native_bytes), (None, 3));
    let plan = External32Plan::new(&s);
    assert_eq!(plan.native_bytes_for(data.len()), 16);
    assert_eq!(plan.native_bytes_for(36), 36);
    assert_eq!(plan.native_bytes_for(12 + 3), 12);
    // Inside a repeated group: vector of 4 of the struct; 2 whole structs and an int.
    let v = arc(Datatype::vector(4, 1, 2, &s));
    let vplan = External32Plan::new(&v);
    assert_eq!(vplan.native_bytes_for(2 * 12 + 4 + 7), 2 * 12 + 4);
    assert_eq!(vplan.native_bytes_for(48 + 12), 48 + 12);
    // Longs are 8 native bytes for 4 external ones.
    let lp = External32Plan::new(&bt(Builtin::Long));
    assert_eq!(lp.native_bytes_for(10), 16);
    assert_eq!(&buf[..4], &native[..4]);
    assert_eq!(&buf[8..20], &native[8..20]);
    assert!(
        buf[24..].iter().all(|&b| b == 0),
        "the partial double is not written"
    );
    // More data than count elements: only count elements are read.
    let mut buf = vec![0u8; 16];
    // SAFETY: `buf` holds 1 element.
    let done = unsafe { unpack_external32_partial(&s, &ext, buf.as_mut_ptr(), 1) };
    assert_eq!(done.external_bytes, 12);
    assert!(done.truncated);
    // Exactly count elements: not truncated; a size-0 type with data: truncated.
    // SAFETY: `buf` holds 1 element.
    let done = unsafe { unpack_external32_partial(&s, &ext[..12], buf.as_mut_ptr(), 1) };
    assert!(!done.truncated);
    let empty = arc(Datatype::contiguous(0, &bt(Builtin::Int)));
    // SAFETY: a size-0 type touches no memory.
    let done = unsafe { unpack_external32_partial(&empty, &ext[..1], buf.as_mut_ptr(), 1) };
    assert!(done.truncated && done.external_bytes == 0);
    // The contiguous path stops the same way.
    let d = bt(Builtin::Double);
    let ext = pack(&d, &bytes_of(&[1.0f64, 2.0]), 2).unwrap();
    let mut out = [0f64; 2];
    // SAFETY: room for two doubles.
    let done = unsafe { unpack_external32_partial(&d, &ext[..13], out.as_mut_ptr() as *mut u8, 2) };
    assert_eq!((done.external_bytes, done.native_bytes), (8, 8));
    assert_eq!(out, [1.0, 0.0]);
}

#[test]
fn sizes_that_overflow_are_count_errors() {
    let t = arc(Datatype::contiguous(1 << 20, &bt(Builtin::Double)));
    let e = external32_size(&t, usize::MAX / 4).unwrap_err();
    assert_eq!(e.class, ErrorClass::Count);
}

#[test]
fn plans_of_repeated_structs_stay_small() {
    let s = arc(Datatype::structure(
        &[1, 1],
        &[0, 8],
        &[bt(Builtin::Int), bt(Builtin::Double)],
    ));
    let v = arc(Datatype::vector(1_000_000, 1, 3, &s));
    let plan = External32Plan::new(&v);
    assert_eq!(plan.items.len(), 1, "{:?}", plan.items);
    assert_eq!(plan.element_size(), 12_000_000);
    let _: Aint = v.extent();
}

/// Valid native bytes for `n` basic elements converting as `conv` (values that fit their
/// external32 size; canonical x87 numbers with zero padding).
fn native_values(conv: Conv, n: usize, next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..n {
        let r = next();
        match conv {
            Conv::NarrowLong => v.extend(i64::from(r as i32).to_ne_bytes()),
            Conv::NarrowULong => v.extend(u64::from(r as u32).to_ne_bytes()),
            Conv::NarrowWChar => v.extend(i32::from(r as u16).to_ne_bytes()),
            Conv::X87 => {
                let exp = 1 + (r >> 48) as u16 % 0x7ffe;
                let sign = (r & 1) as u16;
                v.extend(x87(next() | 1 << 63, sign << 15 | exp));
            }
            c => v.extend((0..c.native_size()).map(|k| (r >> (8 * (k % 8))) as u8)),
        }
    }
    v
}

#[test]
fn every_predefined_type_round_trips_and_leaves_its_gaps() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let count = 5;
    for &b in Builtin::ALL {
        let t = bt(b);
        let mut stream = Vec::new();
        for _ in 0..count {
            for &(c, n) in builtin_convs(b) {
                stream.extend(native_values(c, n, &mut next));
            }
        }
        assert_eq!(stream.len(), count * t.size(), "{}", b.name());
        let len = count * t.extent() as usize;
        // The user-memory image of those values; the pair types' holes stay 0xEE.
        let mut mem = vec![0xEEu8; len];
        // SAFETY: `mem` holds `count` elements.
        unsafe { t.unpack_range(mem.as_mut_ptr(), count, 0, &stream) };
        let ext = pack(&t, &mem, count).unwrap();
        assert_eq!(
            ext.len(),
            external32_size(&t, count).unwrap(),
            "{}",
            b.name()
        );
        assert_eq!(unpack(&t, &ext, count, len), mem, "{}", b.name());
        // Through a derived type (a vector with gaps of each) as well.
        let v = arc(Datatype::vector(2, 1, 2, &t));
        let mut big = vec![0xEEu8; 4 * t.extent() as usize];
        big[..2 * t.extent() as usize].copy_from_slice(&mem[..2 * t.extent() as usize]);
        big.copy_within(
            t.extent() as usize..2 * t.extent() as usize,
            2 * t.extent() as usize,
        );
        let ext_v = pack(&v, &big, 1).unwrap();
        let e = t.extent() as usize;
        let ext_pair = pack(&t, &[&big[..e], &big[2 * e..3 * e]].concat(), 2).unwrap();
        assert_eq!(ext_v, ext_pair, "{}", b.name());
    }
}

#[test]
fn packed_streams_convert_like_user_buffers() {
    let s = arc(Datatype::structure(
        &[1, 1],
        &[0, 8],
        &[bt(Builtin::Long), bt(Builtin::Double)],
    ));
    let mut native = Vec::new();
    for k in 0..4i64 {
        native.extend(bytes_of(&[k - 2]));
        native.extend(bytes_of(&[k as f64]));
    }
    // SAFETY: `native` holds 4 elements.
    let packed = unsafe { s.pack(native.as_ptr(), 4) };
    assert_eq!(packed.len(), 4 * 16);
    let mut out = vec![7u8];
    packed_to_external32(&s, &packed, &mut out).unwrap();
    assert_eq!(out[0], 7, "appended");
    assert_eq!(out[1..], pack(&s, &native, 4).unwrap()[..]);
    // Not a whole number of elements: an internal error, nothing appended.
    let e = packed_to_external32(&s, &packed[..20], &mut out).unwrap_err();
    assert_eq!(e.class, ErrorClass::Intern);
    assert_eq!(out.len(), 1 + 4 * 12);
    // A long that does not fit: MPI_ERR_CONVERSION, nothing appended.
    let mut bad = packed.clone();
    bad[16..24].copy_from_slice(&(1i64 << 40).to_ne_bytes());
    let e = packed_to_external32(&s, &bad, &mut out).unwrap_err();
    assert_eq!(e.class, ErrorClass::Conversion);
    assert!(e.message.contains("element 1"), "{}", e.message);
    assert_eq!(out.len(), 1 + 4 * 12);
}

#[test]
fn arbitrary_wire_bytes_never_crash_the_decoder() {
    // Every external32 bit pattern has a native form, so any bytes of any length decode:
    // whole basic elements are written, a ragged tail is ignored, nothing panics.
    let s = arc(Datatype::structure(
        &[1, 2, 1, 1],
        &[0, 16, 48, 64],
        &[
            bt(Builtin::Long),
            bt(Builtin::LongDouble),
            bt(Builtin::WChar),
            bt(Builtin::ShortInt),
        ],
    ));
    let v = arc(Datatype::vector(3, 1, 2, &s));
    let mut x = 0x0123_4567_89ab_cdefu64;
    for round in 0..300 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1442695040888963407);
        let len = (x >> 40) as usize % 400;
        let data: Vec<u8> = (0..len).map(|k| (x >> (k % 56)) as u8 ^ k as u8).collect();
        let t = if round % 2 == 0 { &s } else { &v };
        let count = 1 + round % 3;
        let mut buf = vec![0u8; count * t.extent() as usize + 64];
        // SAFETY: `buf` holds `count` elements.
        let done = unsafe { unpack_external32_partial(t, &data, buf.as_mut_ptr(), count) };
        assert!(done.external_bytes <= data.len());
        assert!(done.native_bytes <= count * t.size());
        let plan = External32Plan::new(t);
        assert_eq!(
            plan.native_bytes_for(done.external_bytes),
            done.native_bytes
        );
        assert_eq!(done.truncated, len > count * plan.element_size());
    }
}
