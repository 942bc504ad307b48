//! The `external32` data representation (MPI-3.1 §13.5.2): the portable format user data
//! takes between heterogeneous ends (`MPI_Pack_external`, and the IMPI device for every
//! message that crosses sites).
//!
//! external32 is big-endian, two's complement, IEEE 754, with the sizes of the standard's
//! table, which differ from x86_64 native ones in three places: `MPI_LONG` and
//! `MPI_UNSIGNED_LONG` take 4 bytes (a value beyond 32 bits is `MPI_ERR_CONVERSION`),
//! `MPI_WCHAR` takes 2 (a code point beyond U+FFFF is `MPI_ERR_CONVERSION`), and
//! `MPI_LONG_DOUBLE` is IEEE binary128 (the x87 80-bit value converts exactly; the other
//! way rounds to nearest-even, so x87 -> external32 -> x87 is the identity). Complex types
//! are two reals, the MINLOC/MAXLOC pair types their two members, with no padding.
//!
//! How: the external stream of a type depends only on the sequence of basic elements in
//! type-map order, not on where they sit in memory, so a type is reduced to that sequence
//! (run-length encoded, repeats kept as repeats: a vector of a struct stays a few nodes);
//! memory is gathered into (or scattered from) the native packed stream by the type's own
//! `pack_range`/`unpack_range`, in chunks of whole elements, and the conversion runs over
//! the stream. Contiguous types convert straight from (to) user memory.

use super::{Builtin, Datatype, Kind};
use crate::error::{ErrorClass, MpiError, MpiResult};

/// How one basic element converts. Native sizes are x86_64 Linux (LP64, 4-byte
/// `wchar_t`, x87 `long double` in 16 bytes of storage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conv {
    /// One byte as it is (chars, bytes, `MPI_PACKED`, C/C++ bool, 1-byte integers).
    Copy1,
    /// A 2, 4, 8 or 16-byte integer or IEEE value: byte order only.
    Swap2,
    Swap4,
    Swap8,
    Swap16,
    /// C `long` (8 bytes) as a 4-byte signed integer.
    NarrowLong,
    /// C `unsigned long` (8 bytes) as a 4-byte unsigned integer.
    NarrowULong,
    /// `wchar_t` (4 bytes) as a 2-byte unsigned integer.
    NarrowWChar,
    /// x87 80-bit extended (16 bytes of storage) as IEEE binary128.
    X87,
}

impl Conv {
    fn native_size(self) -> usize {
        match self {
            Conv::Copy1 => 1,
            Conv::Swap2 => 2,
            Conv::Swap4 | Conv::NarrowWChar => 4,
            Conv::Swap8 | Conv::NarrowLong | Conv::NarrowULong => 8,
            Conv::Swap16 | Conv::X87 => 16,
        }
    }

    fn external_size(self) -> usize {
        match self {
            Conv::Copy1 => 1,
            Conv::Swap2 | Conv::NarrowWChar => 2,
            Conv::Swap4 | Conv::NarrowLong | Conv::NarrowULong => 4,
            Conv::Swap8 => 8,
            Conv::Swap16 | Conv::X87 => 16,
        }
    }
}

/// The basic elements of one element of a predefined type, in packed-stream order.
fn builtin_convs(b: Builtin) -> &'static [(Conv, usize)] {
    use Builtin::*;
    use Conv::*;
    match b {
        Char | SignedChar | UnsignedChar | Byte | Packed | Int8 | Uint8 | CBool | Character
        | Integer1 | CxxBool => &[(Copy1, 1)],
        WChar => &[(Conv::NarrowWChar, 1)],
        Short | UnsignedShort | Int16 | Uint16 | Integer2 => &[(Swap2, 1)],
        Int | Unsigned | Int32 | Uint32 | Float | Logical | Integer | Real | Integer4 | Real4 => {
            &[(Swap4, 1)]
        }
        Long => &[(Conv::NarrowLong, 1)],
        UnsignedLong => &[(NarrowULong, 1)],
        LongLong | UnsignedLongLong | Int64 | Uint64 | Double | Aint | Offset | Count
        | DoublePrecision | Integer8 | Real8 => &[(Swap8, 1)],
        LongDouble => &[(X87, 1)],
        Real16 => &[(Swap16, 1)],
        CFloatComplex | Complex | Complex8 | CxxFloatComplex => &[(Swap4, 2)],
        CDoubleComplex | DoubleComplex | Complex16 | CxxDoubleComplex => &[(Swap8, 2)],
        CLongDoubleComplex | CxxLongDoubleComplex => &[(X87, 2)],
        Complex32 => &[(Swap16, 2)],
        // Pair types: value then index, as in the native packed stream.
        FloatInt | TwoInt | TwoReal | TwoInteger => &[(Swap4, 2)],
        DoubleInt => &[(Swap8, 1), (Swap4, 1)],
        LongInt => &[(Conv::NarrowLong, 1), (Swap4, 1)],
        ShortInt => &[(Swap2, 1), (Swap4, 1)],
        LongDoubleInt => &[(X87, 1), (Swap4, 1)],
        TwoDoublePrecision => &[(Swap8, 2)],
    }
}

/// A node of the basic-element sequence.
#[derive(Clone, Debug, PartialEq)]
enum Item {
    /// `n` consecutive basic elements converting the same way.
    Run(Conv, usize),
    /// `repeat` copies of a sequence.
    Group(Box<Group>),
}

#[derive(Clone, Debug, PartialEq)]
struct Group {
    items: Vec<Item>,
    repeat: usize,
    /// Native and external bytes of one copy of `items`.
    native: usize,
    external: usize,
}

impl Item {
    fn native_size(&self) -> usize {
        match self {
            Item::Run(c, n) => c.native_size() * n,
            Item::Group(g) => g.native * g.repeat,
        }
    }

    fn external_size(&self) -> usize {
        match self {
            Item::Run(c, n) => c.external_size() * n,
            Item::Group(g) => g.external * g.repeat,
        }
    }
}

fn push_run(items: &mut Vec<Item>, conv: Conv, n: usize) {
    if n == 0 {
        return;
    }
    if let Some(Item::Run(c, k)) = items.last_mut() {
        if *c == conv {
            *k += n;
            return;
        }
    }
    items.push(Item::Run(conv, n));
}

/// Append `n` copies of the sequence `sub`.
fn push_repeated(items: &mut Vec<Item>, sub: &[Item], n: usize) {
    match sub {
        _ if n == 0 => {}
        [] => {}
        [Item::Run(c, k)] => push_run(items, *c, k * n),
        _ if n == 1 => {
            for it in sub {
                match it {
                    Item::Run(c, k) => push_run(items, *c, *k),
                    g => items.push(g.clone()),
                }
            }
        }
        _ => items.push(Item::Group(Box::new(Group {
            native: sub.iter().map(Item::native_size).sum(),
            external: sub.iter().map(Item::external_size).sum(),
            items: sub.to_vec(),
            repeat: n,
        }))),
    }
}

/// The basic-element sequence of one element of `t`.
fn sequence(t: &Datatype) -> Vec<Item> {
    let mut items = Vec::new();
    if t.size == 0 {
        return items;
    }
    let count = |v: i64| usize::try_from(v).unwrap_or(0);
    let total = |vs: &[i64]| vs.iter().map(|&v| count(v)).sum::<usize>();
    match &t.kind {
        Kind::Named(b) => {
            for &(c, n) in builtin_convs(*b) {
                push_run(&mut items, c, n);
            }
        }
        Kind::Dup(old)
        | Kind::Resized(_, _, old)
        | Kind::Darray(_, _, old)
        | Kind::F90(_, _, old) => items = sequence(old),
        Kind::Contiguous(n, old) => push_repeated(&mut items, &sequence(old), count(*n)),
        Kind::Vector(n, bl, _, old) | Kind::Hvector(n, bl, _, old) => {
            push_repeated(&mut items, &sequence(old), count(*n) * count(*bl))
        }
        Kind::Indexed(bls, _, old) | Kind::Hindexed(bls, _, old) => {
            push_repeated(&mut items, &sequence(old), total(bls))
        }
        Kind::IndexedBlock(bl, ds, old) => {
            push_repeated(&mut items, &sequence(old), count(*bl) * ds.len())
        }
        Kind::HindexedBlock(bl, ds, old) => {
            push_repeated(&mut items, &sequence(old), count(*bl) * ds.len())
        }
        Kind::Struct(bls, _, olds) => {
            for (bl, old) in bls.iter().zip(olds) {
                push_repeated(&mut items, &sequence(old), count(*bl));
            }
        }
        Kind::Subarray(_, subsizes, _, _, old) => {
            let n = subsizes.iter().map(|&v| count(v)).product();
            push_repeated(&mut items, &sequence(old), n)
        }
    }
    items
}

/// A datatype's conversion plan: its basic-element sequence and per-element sizes.
/// Computing it walks the type's constructor tree once; keep it when converting the
/// same type many times.
#[derive(Clone, Debug)]
pub struct External32Plan {
    items: Vec<Item>,
    /// Bytes of one element in the native packed stream (`Datatype::size`).
    native: usize,
    /// Bytes of one element in external32.
    external: usize,
}

/// What a partial unpack did (see [`unpack_external32_partial`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct External32Unpacked {
    /// external32 bytes consumed.
    pub external_bytes: usize,
    /// Native packed-stream bytes written: what a native receive of the same data would
    /// have reported, so `Datatype::count_for_bytes(native_bytes)` gives the status counts.
    pub native_bytes: usize,
    /// `data` held more than `count` elements (`MPI_ERR_TRUNCATE` for a receive).
    pub truncated: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    ToExternal,
    FromExternal,
}

/// The conversion state over one chunk: source and destination positions, and the
/// native stream offset of the chunk start (for error messages).
struct Cursor<'a> {
    src: &'a [u8],
    dst: &'a mut [u8],
    si: usize,
    di: usize,
    /// External bytes that may still be read (partial unpack), else `usize::MAX`.
    budget: usize,
    native_base: usize,
}

/// A basic element that external32 cannot hold.
struct Unfit {
    native_offset: usize,
    what: &'static str,
    value: i128,
}

enum Flow {
    Go,
    /// The budget ran out before the next basic element.
    Stop,
}

impl Cursor<'_> {
    fn run(&mut self, dir: Dir, conv: Conv, n: usize) -> Result<Flow, Unfit> {
        let n_fit = n.min(self.budget / conv.external_size());
        let (ns, es) = (conv.native_size() * n_fit, conv.external_size() * n_fit);
        let (sl, dl) = match dir {
            Dir::ToExternal => (ns, es),
            Dir::FromExternal => (es, ns),
        };
        let src = &self.src[self.si..self.si + sl];
        let dst = &mut self.dst[self.di..self.di + dl];
        let r = match dir {
            Dir::ToExternal => to_external(conv, src, dst),
            Dir::FromExternal => {
                from_external(conv, src, dst);
                Ok(())
            }
        };
        if let Err((k, what, value)) = r {
            return Err(Unfit {
                native_offset: self.native_base + self.si + k * conv.native_size(),
                what,
                value,
            });
        }
        self.si += sl;
        self.di += dl;
        if self.budget != usize::MAX {
            self.budget -= es;
        }
        Ok(if n_fit < n { Flow::Stop } else { Flow::Go })
    }

    fn items(&mut self, dir: Dir, items: &[Item]) -> Result<Flow, Unfit> {
        for it in items {
            let flow = match it {
                Item::Run(c, n) => self.run(dir, *c, *n)?,
                Item::Group(g) => {
                    let mut flow = Flow::Go;
                    for _ in 0..g.repeat {
                        flow = self.items(dir, &g.items)?;
                        if let Flow::Stop = flow {
                            break;
                        }
                    }
                    flow
                }
            };
            if let Flow::Stop = flow {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Go)
    }
}

/// `src` as arrays of `N` bytes (a trailing remainder is left out): `slice::as_chunks`,
/// which is stable only from Rust 1.88 (the workspace supports 1.87). Array elements
/// rather than `chunks_exact` + `try_into` keep the conversion loops tight even at the
/// dev profile's opt-level 1 (8x faster measured).
fn arrays<const N: usize>(src: &[u8]) -> &[[u8; N]] {
    // SAFETY: `[u8; N]` has size N and alignment 1, so the first `len / N * N` bytes of
    // `src` are exactly `len / N` such arrays, valid and borrowed as long as `src`.
    unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<[u8; N]>(), src.len() / N) }
}

/// [`arrays`] for writing.
fn arrays_mut<const N: usize>(dst: &mut [u8]) -> &mut [[u8; N]] {
    // SAFETY: as in `arrays`; the unique borrow of `dst` moves to the result.
    unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<[u8; N]>(), dst.len() / N) }
}

/// Convert each `$n`-byte element of `$src` into `$dst` through `$t` (`$from` bytes,
/// `$to` bytes).
macro_rules! swap {
    ($src:expr, $dst:expr, $t:ty, $n:expr, $from:ident, $to:ident) => {
        for (s, d) in arrays::<$n>($src).iter().zip(arrays_mut::<$n>($dst)) {
            *d = <$t>::$from(*s).$to();
        }
    };
}

/// Native -> external32 for a run of `conv` elements; on a value that does not fit, the
/// index of the element within the run, the type's name and the value.
fn to_external(conv: Conv, src: &[u8], dst: &mut [u8]) -> Result<(), (usize, &'static str, i128)> {
    match conv {
        Conv::Copy1 => dst.copy_from_slice(src),
        Conv::Swap2 => swap!(src, dst, u16, 2, from_ne_bytes, to_be_bytes),
        Conv::Swap4 => swap!(src, dst, u32, 4, from_ne_bytes, to_be_bytes),
        Conv::Swap8 => swap!(src, dst, u64, 8, from_ne_bytes, to_be_bytes),
        Conv::Swap16 => swap!(src, dst, u128, 16, from_ne_bytes, to_be_bytes),
        Conv::NarrowLong => {
            for (k, (s, d)) in arrays::<8>(src)
                .iter()
                .zip(arrays_mut::<4>(dst))
                .enumerate()
            {
                let v = i64::from_ne_bytes(*s);
                let narrow = i32::try_from(v).map_err(|_| (k, "MPI_LONG", v as i128))?;
                *d = narrow.to_be_bytes();
            }
        }
        Conv::NarrowULong => {
            for (k, (s, d)) in arrays::<8>(src)
                .iter()
                .zip(arrays_mut::<4>(dst))
                .enumerate()
            {
                let v = u64::from_ne_bytes(*s);
                let narrow = u32::try_from(v).map_err(|_| (k, "MPI_UNSIGNED_LONG", v as i128))?;
                *d = narrow.to_be_bytes();
            }
        }
        Conv::NarrowWChar => {
            for (k, (s, d)) in arrays::<4>(src)
                .iter()
                .zip(arrays_mut::<2>(dst))
                .enumerate()
            {
                let v = i32::from_ne_bytes(*s);
                let narrow = u16::try_from(v).map_err(|_| (k, "MPI_WCHAR", v as i128))?;
                *d = narrow.to_be_bytes();
            }
        }
        Conv::X87 => {
            for (s, d) in arrays::<16>(src).iter().zip(arrays_mut::<16>(dst)) {
                *d = x87_to_binary128(*s).to_be_bytes();
            }
        }
    }
    Ok(())
}

/// external32 -> native for a run of `conv` elements (always representable).
fn from_external(conv: Conv, src: &[u8], dst: &mut [u8]) {
    match conv {
        Conv::Copy1 => dst.copy_from_slice(src),
        Conv::Swap2 => swap!(src, dst, u16, 2, from_be_bytes, to_ne_bytes),
        Conv::Swap4 => swap!(src, dst, u32, 4, from_be_bytes, to_ne_bytes),
        Conv::Swap8 => swap!(src, dst, u64, 8, from_be_bytes, to_ne_bytes),
        Conv::Swap16 => swap!(src, dst, u128, 16, from_be_bytes, to_ne_bytes),
        Conv::NarrowLong => {
            for (s, d) in arrays::<4>(src).iter().zip(arrays_mut::<8>(dst)) {
                *d = i64::from(i32::from_be_bytes(*s)).to_ne_bytes();
            }
        }
        Conv::NarrowULong => {
            for (s, d) in arrays::<4>(src).iter().zip(arrays_mut::<8>(dst)) {
                *d = u64::from(u32::from_be_bytes(*s)).to_ne_bytes();
            }
        }
        Conv::NarrowWChar => {
            for (s, d) in arrays::<2>(src).iter().zip(arrays_mut::<4>(dst)) {
                *d = i32::from(u16::from_be_bytes(*s)).to_ne_bytes();
            }
        }
        Conv::X87 => {
            for (s, d) in arrays::<16>(src).iter().zip(arrays_mut::<16>(dst)) {
                *d = binary128_to_x87(u128::from_be_bytes(*s));
            }
        }
    }
}

const QUAD_FRAC_BITS: u32 = 112;
const X87_FRAC_BITS: u32 = 63;
/// binary128 keeps 49 more fraction bits than x87.
const WIDEN: u32 = QUAD_FRAC_BITS - X87_FRAC_BITS;
const EXP_MAX: u128 = 0x7fff;
const QUAD_QUIET: u128 = 1 << (QUAD_FRAC_BITS - 1);

/// The x87 80-bit value in `b` (little-endian: 64-bit significand with explicit integer
/// bit, then sign and 15-bit exponent, then 6 bytes of padding) as binary128 bits. Both
/// formats have the same exponent range and bias, so this is exact. The encodings the
/// 387 rejects as operands (unnormals, pseudo-infinities and pseudo-NaNs) become a quiet
/// NaN; pseudo-denormals (exponent 0, integer bit set) are the normal numbers they denote.
fn x87_to_binary128(b: [u8; 16]) -> u128 {
    let mant = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let se = u16::from_le_bytes([b[8], b[9]]);
    let sign = u128::from(se >> 15) << 127;
    let exp = u128::from(se & 0x7fff);
    let int_bit = mant >> 63 == 1;
    let frac = u128::from(mant & !(1 << 63)) << WIDEN;
    let (e, f) = match (exp, int_bit) {
        (0, false) => (0, frac),
        (0, true) => (1, frac),
        (EXP_MAX, true) => (EXP_MAX, frac),
        (_, false) => (EXP_MAX, QUAD_QUIET),
        (_, true) => (exp, frac),
    };
    sign | e << QUAD_FRAC_BITS | f
}

/// binary128 bits `q` as the 16 bytes of an x87 `long double` (padding zeroed), rounding
/// the significand to nearest, ties to even. NaNs keep their sign and the top of their
/// payload (a quiet NaN stays quiet; one whose kept payload would be zero gets the quiet
/// bit so it stays a NaN).
fn binary128_to_x87(q: u128) -> [u8; 16] {
    let sign = (q >> 127) as u16;
    let exp = (q >> QUAD_FRAC_BITS) & EXP_MAX;
    let frac = q & ((1 << QUAD_FRAC_BITS) - 1);
    let (e, mant): (u128, u64) = if exp == EXP_MAX {
        if frac == 0 {
            (EXP_MAX, 1 << 63)
        } else {
            let mut payload = (frac >> WIDEN) as u64;
            if payload == 0 {
                payload = 1 << 62;
            }
            (EXP_MAX, 1 << 63 | payload)
        }
    } else {
        // The 113-bit significand (implicit bit explicit) rounded to 64 bits.
        let sig = if exp == 0 {
            frac
        } else {
            frac | 1 << QUAD_FRAC_BITS
        };
        let mut m = sig >> WIDEN;
        let rest = sig & ((1 << WIDEN) - 1);
        let half = 1 << (WIDEN - 1);
        if rest > half || (rest == half && m & 1 == 1) {
            m += 1;
        }
        let mut e = exp;
        if m >> 64 != 0 {
            // Rounded up past the top bit: 1.111.. -> 10.000..
            m >>= 1;
            e += 1;
        }
        if exp == 0 && m >> 63 != 0 {
            // A subnormal that rounded up to the smallest normal.
            e = 1;
        }
        if e >= EXP_MAX {
            (EXP_MAX, 1 << 63)
        } else {
            (e, m as u64)
        }
    };
    let mut out = [0u8; 16];
    out[0..8].copy_from_slice(&mant.to_le_bytes());
    out[8..10].copy_from_slice(&(sign << 15 | e as u16).to_le_bytes());
    out
}

/// Elements per chunk when going through a native staging buffer: about 64 KiB, at
/// least one element.
fn chunk_elements(native: usize) -> usize {
    (64 * 1024 / native.max(1)).max(1)
}

impl External32Plan {
    /// The plan for `dtype` (any type, committed or not: the caller checks that).
    pub fn new(dtype: &Datatype) -> External32Plan {
        let items = sequence(dtype);
        let external = items.iter().map(Item::external_size).sum();
        debug_assert_eq!(
            items.iter().map(Item::native_size).sum::<usize>(),
            dtype.size()
        );
        External32Plan {
            items,
            native: dtype.size(),
            external,
        }
    }

    /// The native packed-stream bytes that the first `external_len` external32 bytes of a
    /// stream of this type stand for: whole elements, then the whole basic elements of a
    /// partial one (what a receive of that much data reports, through
    /// [`Datatype::count_for_bytes`], for `MPI_Get_count` and `MPI_Get_elements`).
    pub fn native_bytes_for(&self, external_len: usize) -> usize {
        fn walk(items: &[Item], budget: &mut usize, native: &mut usize) -> bool {
            for it in items {
                match it {
                    Item::Run(c, n) => {
                        let fit = (*n).min(*budget / c.external_size());
                        *budget -= fit * c.external_size();
                        *native += fit * c.native_size();
                        if fit < *n {
                            return false;
                        }
                    }
                    Item::Group(g) => {
                        let whole = (g.repeat).min(*budget / g.external.max(1));
                        *budget -= whole * g.external;
                        *native += whole * g.native;
                        if whole < g.repeat && !walk(&g.items, budget, native) {
                            return false;
                        }
                    }
                }
            }
            true
        }
        if self.external == 0 {
            return 0;
        }
        let whole = external_len / self.external;
        let mut budget = external_len % self.external;
        let mut native = whole * self.native;
        walk(&self.items, &mut budget, &mut native);
        native
    }

    /// external32 bytes of one element.
    pub fn element_size(&self) -> usize {
        self.external
    }

    /// external32 bytes of `count` elements (`MPI_Pack_external_size`).
    pub fn size(&self, count: usize) -> MpiResult<usize> {
        self.external
            .checked_mul(count)
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                MpiError::new(
                    ErrorClass::Count,
                    format!(
                        "{count} elements of {} external32 bytes each overflow the address range",
                        self.external
                    ),
                )
            })
    }

    /// Convert a whole number of elements of native stream `src` into `dst`.
    fn native_to_external(
        &self,
        dtype: &Datatype,
        src: &[u8],
        dst: &mut [u8],
        native_base: usize,
    ) -> MpiResult<()> {
        let elems = src.len() / self.native.max(1);
        let mut cur = Cursor {
            src,
            dst,
            si: 0,
            di: 0,
            budget: usize::MAX,
            native_base,
        };
        let r = match self.items.as_slice() {
            // One run per element (a predefined type, a vector of one): one run in all.
            [Item::Run(c, n)] => cur.run(Dir::ToExternal, *c, n * elems).map(|_| ()),
            _ => (0..elems).try_for_each(|_| cur.items(Dir::ToExternal, &self.items).map(|_| ())),
        };
        r.map_err(|u| {
            MpiError::new(
                ErrorClass::Conversion,
                format!(
                    "the {} value {} in element {} of the buffer (datatype {}) does not \
                     fit its {} bytes in external32",
                    u.what,
                    u.value,
                    u.native_offset / self.native,
                    dtype.describe(),
                    if u.what == "MPI_WCHAR" { 2 } else { 4 },
                ),
            )
        })
    }

    /// Convert up to `elems` elements of external `src` into native `dst`, stopping
    /// before the first basic element `src` does not hold whole; returns (external bytes
    /// read, native bytes written).
    fn external_to_native(&self, src: &[u8], dst: &mut [u8], elems: usize) -> (usize, usize) {
        let mut cur = Cursor {
            src,
            dst,
            si: 0,
            di: 0,
            budget: src.len(),
            native_base: 0,
        };
        // Conversions from external32 cannot fail (every value has a native form), so
        // the `Err` arm is never taken; only the budget stops the walk.
        if let [Item::Run(c, n)] = self.items.as_slice() {
            let _ = cur.run(Dir::FromExternal, *c, n * elems);
        } else {
            for _ in 0..elems {
                if !matches!(cur.items(Dir::FromExternal, &self.items), Ok(Flow::Go)) {
                    break;
                }
            }
        }
        (cur.si, cur.di)
    }

    /// Append the external32 form of `count` elements at `buf` to `out`. On error `out`
    /// is left as it was.
    ///
    /// # Safety
    /// As for [`Datatype::pack_range`] over the whole stream of `count` elements: every
    /// byte of their type map at `buf` is readable and not written concurrently. `dtype`
    /// is the type this plan was made for.
    pub unsafe fn pack(
        &self,
        dtype: &Datatype,
        buf: *const u8,
        count: usize,
        out: &mut Vec<u8>,
    ) -> MpiResult<()> {
        let total = self.size(count)?;
        if total == 0 {
            return Ok(());
        }
        let start = out.len();
        out.reserve(total);
        let r = if let Some(off) = dtype.contiguous_offset() {
            // SAFETY: a contiguous type's `count` elements are exactly the bytes
            // [buf+off, buf+off+count*size) in stream order, readable per the contract.
            // `wrapping_offset`, as in pack_range: buf may be MPI_BOTTOM.
            let src = unsafe {
                std::slice::from_raw_parts(buf.wrapping_offset(off), count * self.native)
            };
            // Chunk by chunk, each zero-filled just before it is converted over: the
            // output is written once while it is in cache, not zeroed whole first and
            // then converted in a second pass over memory.
            let per = chunk_elements(self.native);
            let mut first = 0;
            let mut r = Ok(());
            while first < count && r.is_ok() {
                let k = per.min(count - first);
                let at = out.len();
                out.resize(at + k * self.external, 0);
                let native = &src[first * self.native..(first + k) * self.native];
                r = self.native_to_external(dtype, native, &mut out[at..], first * self.native);
                first += k;
            }
            r
        } else {
            // SAFETY: forwarded caller contract.
            unsafe { self.pack_staged(dtype, buf, count, out) }
        };
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// Append the external32 form of `packed`, a native packed stream of whole elements
    /// of `dtype` (what [`Datatype::pack_range`] produced), to `out`. On error `out` is
    /// left as it was; `MPI_ERR_INTERN` if `packed` is not a whole number of elements.
    pub fn convert_packed(
        &self,
        dtype: &Datatype,
        packed: &[u8],
        out: &mut Vec<u8>,
    ) -> MpiResult<()> {
        if self.native == 0 {
            return Ok(());
        }
        if !packed.len().is_multiple_of(self.native) {
            return Err(MpiError::new(
                ErrorClass::Intern,
                format!(
                    "external32: {} packed bytes are not a whole number of elements of {} \
                     ({} bytes each)",
                    packed.len(),
                    dtype.describe(),
                    self.native
                ),
            ));
        }
        let total = self.size(packed.len() / self.native)?;
        let start = out.len();
        out.resize(start + total, 0);
        let r = self.native_to_external(dtype, packed, &mut out[start..], 0);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// Pack through a native staging buffer, chunk by chunk of whole elements, appending
    /// to `out` (each output chunk zero-filled just before it is converted over).
    ///
    /// # Safety
    /// As for [`External32Plan::pack`].
    unsafe fn pack_staged(
        &self,
        dtype: &Datatype,
        buf: *const u8,
        count: usize,
        out: &mut Vec<u8>,
    ) -> MpiResult<()> {
        let per = chunk_elements(self.native);
        let mut stage = vec![0u8; per.min(count) * self.native];
        let mut first = 0;
        while first < count {
            let k = per.min(count - first);
            let native = &mut stage[..k * self.native];
            // SAFETY: elements first..first+k < count, readable per the contract.
            unsafe { dtype.pack_range(buf, count, first * self.native, native) };
            let at = out.len();
            out.resize(at + k * self.external, 0);
            self.native_to_external(dtype, native, &mut out[at..], first * self.native)?;
            first += k;
        }
        Ok(())
    }

    /// Write the elements held by the external32 bytes `data` into `count` elements at
    /// `buf`: all of them if `data` is long enough, else the whole elements and then the
    /// whole basic elements of the partial one that `data` holds (bytes past the last
    /// whole basic element are ignored).
    ///
    /// # Safety
    /// Every byte of the type map of elements `0..count` at `buf` is writable, not
    /// accessed concurrently and does not overlap `data`. `dtype` is the plan's type.
    pub unsafe fn unpack_partial(
        &self,
        dtype: &Datatype,
        data: &[u8],
        buf: *mut u8,
        count: usize,
    ) -> External32Unpacked {
        let capacity = count.saturating_mul(self.external);
        let mut done = External32Unpacked {
            external_bytes: 0,
            native_bytes: 0,
            truncated: data.len() > capacity,
        };
        if capacity == 0 {
            return done;
        }
        let data = &data[..data.len().min(capacity)];
        // Elements touched, the last one possibly partial.
        let touched = data.len().div_ceil(self.external);
        if let Some(off) = dtype.contiguous_offset() {
            // SAFETY: a contiguous type's elements 0..touched <= count are exactly these
            // bytes, writable per the contract and disjoint from `data`.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(buf.wrapping_offset(off), touched * self.native)
            };
            let (e, n) = self.external_to_native(data, dst, touched);
            return External32Unpacked {
                external_bytes: e,
                native_bytes: n,
                ..done
            };
        }
        let per = chunk_elements(self.native);
        let mut stage = vec![0u8; per.min(touched) * self.native];
        let mut first = 0;
        while first < touched {
            let k = per.min(touched - first);
            let src = &data[done.external_bytes..];
            let (e, n) = self.external_to_native(src, &mut stage[..k * self.native], k);
            // SAFETY: stream bytes [native_bytes, native_bytes+n) lie within elements
            // < touched <= count, writable per the contract; `stage` is ours.
            unsafe { dtype.unpack_range(buf, count, done.native_bytes, &stage[..n]) };
            done.external_bytes += e;
            done.native_bytes += n;
            first += k;
        }
        done
    }
}

/// external32 bytes of `count` elements of `dtype` (`MPI_Pack_external_size`);
/// `MPI_ERR_COUNT` if that overflows.
pub fn external32_size(dtype: &Datatype, count: usize) -> MpiResult<usize> {
    External32Plan::new(dtype).size(count)
}

/// Append the external32 form of `count` elements of `dtype` at `buf` to `out`
/// (`MPI_Pack_external`). `MPI_ERR_CONVERSION` if a value does not fit its external32
/// size (a C `long` beyond 32 bits, a `wchar_t` beyond U+FFFF), `out` then unchanged.
///
/// # Safety
/// Every byte of the type map of elements `0..count` at `buf` (element i at
/// `buf + i * extent`) is readable and not written concurrently (the contract of
/// [`Datatype::pack_range`]).
pub unsafe fn pack_external32(
    dtype: &Datatype,
    buf: *const u8,
    count: usize,
    out: &mut Vec<u8>,
) -> MpiResult<()> {
    // SAFETY: forwarded contract.
    unsafe { External32Plan::new(dtype).pack(dtype, buf, count, out) }
}

/// Append the external32 form of a native packed stream of `dtype` (whole elements, as
/// [`Datatype::pack_range`] produces) to `out`: for data that is already packed (a send
/// staged natively before its device was known). Errors as for [`pack_external32`].
pub fn packed_to_external32(dtype: &Datatype, packed: &[u8], out: &mut Vec<u8>) -> MpiResult<()> {
    External32Plan::new(dtype).convert_packed(dtype, packed, out)
}

/// Read `count` elements of `dtype` from the external32 bytes at the start of `data`
/// into `buf` (`MPI_Unpack_external`); returns the bytes consumed
/// (`external32_size(dtype, count)`). `MPI_ERR_TRUNCATE` (nothing written) if `data` is
/// shorter than that.
///
/// # Safety
/// Every byte of the type map of elements `0..count` at `buf` is writable, not accessed
/// concurrently, and does not overlap `data`.
pub unsafe fn unpack_external32(
    dtype: &Datatype,
    data: &[u8],
    buf: *mut u8,
    count: usize,
) -> MpiResult<usize> {
    let plan = External32Plan::new(dtype);
    let need = plan.size(count)?;
    if data.len() < need {
        return Err(MpiError::new(
            ErrorClass::Truncate,
            format!(
                "{count} elements of {} take {need} bytes in external32, but only {} remain",
                dtype.describe(),
                data.len()
            ),
        ));
    }
    // SAFETY: forwarded contract.
    let done = unsafe { plan.unpack_partial(dtype, &data[..need], buf, count) };
    debug_assert_eq!(done.external_bytes, need);
    Ok(need)
}

/// The receive side of a message: unpack what `data` holds, up to `count` elements of
/// `dtype` (whole elements, then the whole basic elements of a partial one). Bytes beyond
/// `count` elements are not read; `truncated` says there were some.
///
/// # Safety
/// As for [`unpack_external32`].
pub unsafe fn unpack_external32_partial(
    dtype: &Datatype,
    data: &[u8],
    buf: *mut u8,
    count: usize,
) -> External32Unpacked {
    // SAFETY: forwarded contract.
    unsafe { External32Plan::new(dtype).unpack_partial(dtype, data, buf, count) }
}

#[cfg(test)]
#[path = "external32_tests.rs"]
mod tests;
