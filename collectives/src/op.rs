//! Reduction operations: the predefined `MPI_Op`s (with MPICH's handle values), user ops
//! made by `MPI_Op_create`, the op/type validity rules of MPI §5.9.2, and the kernels that
//! apply an op to the packed stream of a datatype or to user memory (`MPI_Reduce_local`).
//!
//! Kernels work on the packed stream (see `tsunagi_core::datatype`): basic elements back
//! to back in native representation, MINLOC/MAXLOC pairs as value then index without
//! padding. Every access is unaligned-safe. `long double` uses the x87 unit through inline
//! assembly; `REAL*16` (IEEE binary128) uses libgcc's soft-float routines.

use std::cmp::Ordering;
use std::sync::Arc;

use tsunagi_core::datatype::{Primitive, TypeRef};
use tsunagi_core::{ErrorClass, MpiError, MpiResult};

/// The function of a user-defined op: `inout[i] = in[i] op inout[i]` for `count` elements
/// of `dtype`, both buffers in the datatype's memory layout (the C signature of
/// `MPI_User_function` minus the pointer indirections).
pub type UserFn = dyn Fn(*const u8, *mut u8, usize, &TypeRef) + Send + Sync;

/// An op made by `MPI_Op_create`.
pub struct UserOp {
    /// The combining function (see [`UserFn`]).
    pub func: Box<UserFn>,
    /// Whether the op is commutative (non-commutative ops combine in rank order).
    pub commutative: bool,
}

impl std::fmt::Debug for UserOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserOp {{ commutative: {} }}", self.commutative)
    }
}

/// A reduction operation.
#[derive(Clone, Debug)]
pub enum Op {
    Max,
    Min,
    Sum,
    Prod,
    Land,
    Band,
    Lor,
    Bor,
    Lxor,
    Bxor,
    Maxloc,
    Minloc,
    Replace,
    NoOp,
    User(Arc<UserOp>),
}

/// MPICH's handle value of `MPI_OP_NULL`.
pub const MPICH_OP_NULL: i32 = 0x1800_0000;

const PREDEFINED: [(Op, i32, &str); 14] = [
    (Op::Max, 0x5800_0001, "MPI_MAX"),
    (Op::Min, 0x5800_0002, "MPI_MIN"),
    (Op::Sum, 0x5800_0003, "MPI_SUM"),
    (Op::Prod, 0x5800_0004, "MPI_PROD"),
    (Op::Land, 0x5800_0005, "MPI_LAND"),
    (Op::Band, 0x5800_0006, "MPI_BAND"),
    (Op::Lor, 0x5800_0007, "MPI_LOR"),
    (Op::Bor, 0x5800_0008, "MPI_BOR"),
    (Op::Lxor, 0x5800_0009, "MPI_LXOR"),
    (Op::Bxor, 0x5800_000a, "MPI_BXOR"),
    (Op::Minloc, 0x5800_000b, "MPI_MINLOC"),
    (Op::Maxloc, 0x5800_000c, "MPI_MAXLOC"),
    (Op::Replace, 0x5800_000d, "MPI_REPLACE"),
    (Op::NoOp, 0x5800_000e, "MPI_NO_OP"),
];

impl Op {
    /// Position in [`PREDEFINED`] (None for user ops).
    fn index(&self) -> Option<usize> {
        Some(match self {
            Op::Max => 0,
            Op::Min => 1,
            Op::Sum => 2,
            Op::Prod => 3,
            Op::Land => 4,
            Op::Band => 5,
            Op::Lor => 6,
            Op::Bor => 7,
            Op::Lxor => 8,
            Op::Bxor => 9,
            Op::Minloc => 10,
            Op::Maxloc => 11,
            Op::Replace => 12,
            Op::NoOp => 13,
            Op::User(_) => return None,
        })
    }

    /// The predefined op with MPICH handle value `code` (e.g. `0x58000003` → `Sum`).
    pub fn from_mpich(code: i32) -> Option<Op> {
        PREDEFINED
            .iter()
            .find(|(_, c, _)| *c == code)
            .map(|(o, _, _)| o.clone())
    }

    /// The predefined op with MPICH's index `i` (the low byte of the handle: 1 = MPI_MAX
    /// ... 14 = MPI_NO_OP).
    pub fn from_mpich_index(i: u32) -> Option<Op> {
        Op::from_mpich(0x5800_0000 | (i as i32 & 0xff)).filter(|_| (1..=14).contains(&i))
    }

    /// MPICH's handle value of a predefined op; None for user ops.
    pub fn mpich_code(&self) -> Option<i32> {
        self.index().map(|i| PREDEFINED[i].1)
    }

    /// The MPI name ("MPI_SUM"), or "user-defined op".
    pub fn name(&self) -> &'static str {
        match self.index() {
            Some(i) => PREDEFINED[i].2,
            None => "user-defined op",
        }
    }

    /// A user op from a function and its commutativity (`MPI_Op_create`).
    pub fn user(
        func: impl Fn(*const u8, *mut u8, usize, &TypeRef) + Send + Sync + 'static,
        commutative: bool,
    ) -> Op {
        Op::User(Arc::new(UserOp {
            func: Box::new(func),
            commutative,
        }))
    }

    /// `MPI_Op_commutative`: all predefined ops are commutative.
    pub fn is_commutative(&self) -> bool {
        match self {
            Op::User(u) => u.commutative,
            _ => true,
        }
    }

    /// Whether MPI defines this predefined op on elements of kind `p`.
    pub fn allows(&self, p: Primitive) -> bool {
        use Primitive::*;
        match self {
            Op::Max | Op::Min => p.is_integer() || p.is_float(),
            Op::Sum | Op::Prod => p.is_integer() || p.is_float() || p.is_complex(),
            Op::Land | Op::Lor | Op::Lxor => p.is_integer() || p.is_logical(),
            Op::Band | Op::Bor | Op::Bxor => p.is_integer() || p == Byte,
            Op::Maxloc | Op::Minloc => p.is_pair(),
            Op::Replace | Op::NoOp | Op::User(_) => true,
        }
    }

    /// Check that the op may be used in a collective reduction (or `MPI_Reduce_local`,
    /// named by `call`) on `dtype`: an error of class `MPI_ERR_OP` otherwise.
    pub fn check(&self, call: &str, dtype: &TypeRef) -> MpiResult<()> {
        match self {
            Op::User(_) => Ok(()),
            Op::Replace | Op::NoOp => Err(MpiError::new(
                ErrorClass::Op,
                format!(
                    "{call}: {} may only be used in one-sided accumulate operations",
                    self.name()
                ),
            )),
            _ => self.check_type(call, dtype),
        }
    }

    /// The op/type check alone (also for MPI_REPLACE / MPI_NO_OP, which allow any
    /// homogeneous type), for callers such as one-sided accumulate.
    pub fn check_type(&self, call: &str, dtype: &TypeRef) -> MpiResult<()> {
        if matches!(self, Op::User(_)) {
            return Ok(());
        }
        let bad = |why: String| Err(MpiError::new(ErrorClass::Op, format!("{call}: {why}")));
        match dtype.homogeneous_primitive() {
            None if matches!(self, Op::Replace | Op::NoOp) => Ok(()),
            None => bad(format!(
                "{} is not defined for datatype {} (its basic elements are not all of one kind)",
                self.name(),
                type_name(dtype)
            )),
            Some(p) if self.allows(p) => Ok(()),
            Some(_) => bad(format!(
                "{} is not defined for datatype {}",
                self.name(),
                type_name(dtype)
            )),
        }
    }

    /// Apply the op to packed streams: `inout = input op inout` elementwise, for `count`
    /// elements of `dtype` (`count * dtype.size()` bytes each). The op must have passed
    /// [`Op::check_type`] for `dtype`.
    ///
    /// # Safety
    /// `input` must be readable and `inout` readable and writable for
    /// `count * dtype.size()` bytes; the two ranges must not overlap.
    pub unsafe fn apply_packed(
        &self,
        input: *const u8,
        inout: *mut u8,
        count: usize,
        dtype: &TypeRef,
    ) {
        let bytes = count * dtype.size();
        if bytes == 0 {
            return;
        }
        match self {
            Op::User(u) => {
                if let Some(off) = dtype.contiguous_offset() {
                    // The packed stream is the user layout shifted by `off`.
                    (u.func)(
                        input.wrapping_offset(-off),
                        inout.wrapping_offset(-off),
                        count,
                        dtype,
                    );
                } else {
                    let mut a = Scratch::new(count, dtype);
                    let mut b = Scratch::new(count, dtype);
                    // SAFETY: the caller guarantees `bytes` readable bytes at each pointer;
                    // the scratch buffers span the type map of `count` elements.
                    unsafe {
                        let sin = std::slice::from_raw_parts(input, bytes);
                        let sio = std::slice::from_raw_parts(inout as *const u8, bytes);
                        dtype.unpack_range(a.base(), count, 0, sin);
                        dtype.unpack_range(b.base(), count, 0, sio);
                        (u.func)(a.base(), b.base(), count, dtype);
                        let out = std::slice::from_raw_parts_mut(inout, bytes);
                        dtype.pack_range(b.base(), count, 0, out);
                    }
                }
            }
            Op::Replace => {
                // SAFETY: caller contract: both ranges valid for `bytes`, disjoint.
                unsafe { std::ptr::copy_nonoverlapping(input, inout, bytes) }
            }
            Op::NoOp => {}
            _ => {
                let p = dtype
                    .homogeneous_primitive()
                    .expect("apply_packed: op/type pair not checked");
                // SAFETY: forwarded caller contract; `bytes` is a whole number of elements.
                unsafe { kernel(self, p, input, inout, bytes / p.size()) }
            }
        }
    }

    /// Apply the op to buffers in the datatype's memory layout (what `MPI_Reduce_local`
    /// does): `inout = input op inout`. The op must have passed [`Op::check_type`].
    ///
    /// # Safety
    /// The type map of `count` elements of `dtype` at `input` must be readable and at
    /// `inout` readable and writable, and the two must not overlap.
    pub unsafe fn apply_user_layout(
        &self,
        input: *const u8,
        inout: *mut u8,
        count: usize,
        dtype: &TypeRef,
    ) {
        if count == 0 || dtype.size() == 0 {
            return;
        }
        if let Op::User(u) = self {
            (u.func)(input, inout, count, dtype);
            return;
        }
        if let Some(off) = dtype.contiguous_offset() {
            // SAFETY: a contiguous type's data is the stream at `off`.
            unsafe {
                self.apply_packed(
                    input.wrapping_offset(off),
                    inout.wrapping_offset(off),
                    count,
                    dtype,
                )
            };
            return;
        }
        // SAFETY: caller contract: the type maps are readable (and writable for inout).
        unsafe {
            let a = dtype.pack(input, count);
            let mut b = dtype.pack(inout, count);
            self.apply_packed(a.as_ptr(), b.as_mut_ptr(), count, dtype);
            dtype.unpack_range(inout, count, 0, &b);
        }
    }

    /// Combine two packed partial results in rank order, keeping the result in `left`:
    /// `left = left op right`, where `left` holds the contribution of the lower ranks.
    ///
    /// # Safety
    /// As [`Op::apply_packed`], for `left` (read/write) and `right` (read).
    pub(crate) unsafe fn combine_left(
        &self,
        left: *mut u8,
        right: *const u8,
        count: usize,
        dtype: &TypeRef,
    ) {
        if count * dtype.size() == 0 {
            return;
        }
        if self.is_commutative() {
            // SAFETY: forwarded; commutative, so right op left == left op right.
            unsafe { self.apply_packed(right, left, count, dtype) };
        } else {
            let bytes = count * dtype.size();
            // SAFETY: forwarded; `tmp` is our own copy of `right`.
            unsafe {
                let mut tmp = std::slice::from_raw_parts(right, bytes).to_vec();
                self.apply_packed(left, tmp.as_mut_ptr(), count, dtype);
                std::ptr::copy_nonoverlapping(tmp.as_ptr(), left, bytes);
            }
        }
    }
}

fn type_name(dtype: &TypeRef) -> String {
    let n = dtype.name();
    if n.is_empty() {
        "(derived datatype)".into()
    } else {
        n
    }
}

/// `MPI_Reduce_local`: `inoutbuf = inbuf op inoutbuf` for `count` elements of `dtype`
/// in user layout.
///
/// # Safety
/// As [`Op::apply_user_layout`].
pub unsafe fn reduce_local(
    inbuf: *const u8,
    inoutbuf: *mut u8,
    count: i64,
    dtype: &TypeRef,
    op: &Op,
) -> MpiResult<()> {
    let call = "MPI_Reduce_local";
    let count = crate::util::check_count(call, count)?;
    crate::util::check_type(call, dtype)?;
    op.check(call, dtype)?;
    // SAFETY: forwarded caller contract.
    unsafe { op.apply_user_layout(inbuf, inoutbuf, count, dtype) };
    Ok(())
}

/// Scratch memory in the user layout of `count` elements of a datatype (for user ops on
/// non-contiguous types), 16-byte aligned.
pub(crate) struct Scratch {
    mem: Vec<u128>,
    /// Offset of the buffer origin (element 0's address) inside `mem`.
    origin: isize,
}

impl Scratch {
    pub(crate) fn new(count: usize, dtype: &TypeRef) -> Scratch {
        let ext = dtype.extent();
        let last = (count.max(1) as isize - 1) * ext;
        let lo = last.min(0) + dtype.true_lb();
        let hi = last.max(0) + dtype.true_lb() + dtype.true_extent();
        let span = (hi - lo).max(0) as usize;
        // Round the origin shift so element 0 keeps 16-byte alignment where the type is.
        let pad = lo.rem_euclid(16);
        let words = (span + pad as usize).div_ceil(16) + 1;
        Scratch {
            mem: vec![0u128; words],
            origin: pad - lo,
        }
    }

    pub(crate) fn base(&mut self) -> *mut u8 {
        (self.mem.as_mut_ptr() as *mut u8).wrapping_offset(self.origin)
    }
}

// ----- kernels -----

/// `b[i] = f(a[i], b[i])` over `n` values of `T`, unaligned.
///
/// # Safety
/// `a` readable and `b` readable/writable for `n * size_of::<T>()` bytes.
#[inline(always)]
unsafe fn zip<T: Copy>(a: *const u8, b: *mut u8, n: usize, f: impl Fn(T, T) -> T) {
    let a = a as *const T;
    let b = b as *mut T;
    for i in 0..n {
        // SAFETY: i < n, within the ranges the caller vouches for.
        unsafe {
            let x = a.add(i).read_unaligned();
            let y = b.add(i).read_unaligned();
            b.add(i).write_unaligned(f(x, y));
        }
    }
}

macro_rules! int_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr, $n:expr) => {{
        let (a, b, n) = ($a, $b, $n);
        // SAFETY (all arms): the caller of `kernel` vouches for `n` elements at a and b.
        unsafe {
            match $op {
                Op::Max => zip::<$t>(a, b, n, |x, y| if x > y { x } else { y }),
                Op::Min => zip::<$t>(a, b, n, |x, y| if x < y { x } else { y }),
                Op::Sum => zip::<$t>(a, b, n, |x, y| x.wrapping_add(y)),
                Op::Prod => zip::<$t>(a, b, n, |x, y| x.wrapping_mul(y)),
                Op::Land => zip::<$t>(a, b, n, |x, y| (x != 0 && y != 0) as $t),
                Op::Lor => zip::<$t>(a, b, n, |x, y| (x != 0 || y != 0) as $t),
                Op::Lxor => zip::<$t>(a, b, n, |x, y| ((x != 0) != (y != 0)) as $t),
                Op::Band => zip::<$t>(a, b, n, |x, y| x & y),
                Op::Bor => zip::<$t>(a, b, n, |x, y| x | y),
                Op::Bxor => zip::<$t>(a, b, n, |x, y| x ^ y),
                _ => unreachable!("checked op"),
            }
        }
    }};
}

macro_rules! float_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr, $n:expr) => {{
        let (a, b, n) = ($a, $b, $n);
        // SAFETY (all arms): the caller of `kernel` vouches for `n` elements at a and b.
        unsafe {
            match $op {
                Op::Max => zip::<$t>(a, b, n, |x, y| if x > y { x } else { y }),
                Op::Min => zip::<$t>(a, b, n, |x, y| if x < y { x } else { y }),
                Op::Sum => zip::<$t>(a, b, n, |x, y| x + y),
                Op::Prod => zip::<$t>(a, b, n, |x, y| x * y),
                _ => unreachable!("checked op"),
            }
        }
    }};
}

macro_rules! complex_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr, $n:expr) => {{
        let (a, b, n) = ($a, $b, $n);
        // SAFETY (all arms): the caller of `kernel` vouches for `n` elements at a and b.
        unsafe {
            match $op {
                Op::Sum => zip::<[$t; 2]>(a, b, n, |x, y| [x[0] + y[0], x[1] + y[1]]),
                Op::Prod => zip::<[$t; 2]>(a, b, n, |x, y| {
                    [x[0] * y[0] - x[1] * y[1], x[0] * y[1] + x[1] * y[0]]
                }),
                _ => unreachable!("checked op"),
            }
        }
    }};
}

/// Apply predefined `op` to `n` packed elements of kind `p`.
///
/// # Safety
/// `a` readable and `b` readable/writable for `n * p.size()` bytes.
unsafe fn kernel(op: &Op, p: Primitive, a: *const u8, b: *mut u8, n: usize) {
    use Primitive::*;
    match p {
        I8 => int_kernel!(i8, op, a, b, n),
        U8 => int_kernel!(u8, op, a, b, n),
        I16 => int_kernel!(i16, op, a, b, n),
        U16 => int_kernel!(u16, op, a, b, n),
        I32 => int_kernel!(i32, op, a, b, n),
        U32 => int_kernel!(u32, op, a, b, n),
        I64 => int_kernel!(i64, op, a, b, n),
        U64 => int_kernel!(u64, op, a, b, n),
        Byte => int_kernel!(u8, op, a, b, n),
        Bool => int_kernel!(u8, op, a, b, n),
        Logical => int_kernel!(i32, op, a, b, n),
        F32 => float_kernel!(f32, op, a, b, n),
        F64 => float_kernel!(f64, op, a, b, n),
        ComplexF32 => complex_kernel!(f32, op, a, b, n),
        ComplexF64 => complex_kernel!(f64, op, a, b, n),
        LongDouble => float_kernel!(F80, op, a, b, n),
        F128 => float_kernel!(Q128, op, a, b, n),
        ComplexLongDouble => complex_kernel!(F80, op, a, b, n),
        ComplexF128 => complex_kernel!(Q128, op, a, b, n),
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        FloatInt => unsafe { loc::<f32, i32>(op, a, b, n, 4, 8) },
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        DoubleInt => unsafe { loc::<f64, i32>(op, a, b, n, 8, 12) },
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        LongInt => unsafe { loc::<i64, i32>(op, a, b, n, 8, 12) },
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        IntInt => unsafe { loc::<i32, i32>(op, a, b, n, 4, 8) },
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        ShortInt => unsafe { loc::<i16, i32>(op, a, b, n, 2, 6) },
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        LongDoubleInt => unsafe { loc::<F80, i32>(op, a, b, n, 16, 20) },
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        FloatFloat => unsafe { loc::<f32, f32>(op, a, b, n, 4, 8) },
        // SAFETY: forwarded caller contract (n packed pairs at a and b).
        DoubleDouble => unsafe { loc::<f64, f64>(op, a, b, n, 8, 16) },
        Packed => unreachable!("checked op"),
    }
}

/// MINLOC/MAXLOC over packed (value, index) pairs: value at 0, index at `ioff`, `stride`
/// bytes per pair. Ties keep the smaller index.
///
/// # Safety
/// `a` readable and `b` readable/writable for `n * stride` bytes.
unsafe fn loc<V: Copy + PartialOrd, I: Copy + PartialOrd>(
    op: &Op,
    a: *const u8,
    b: *mut u8,
    n: usize,
    ioff: usize,
    stride: usize,
) {
    let max = matches!(op, Op::Maxloc);
    for k in 0..n {
        // SAFETY: k < n, so every access is inside the caller's ranges.
        unsafe {
            let pa = a.add(k * stride);
            let pb = b.add(k * stride);
            let va = (pa as *const V).read_unaligned();
            let vb = (pb as *const V).read_unaligned();
            let ia = (pa.add(ioff) as *const I).read_unaligned();
            let ib = (pb.add(ioff) as *const I).read_unaligned();
            let take_a = match va.partial_cmp(&vb) {
                Some(Ordering::Greater) => max,
                Some(Ordering::Less) => !max,
                _ => ia < ib,
            };
            if take_a {
                (pb as *mut V).write_unaligned(va);
                (pb.add(ioff) as *mut I).write_unaligned(ia);
            }
        }
    }
}

// ----- x87 long double -----

/// C `long double` on x86_64: 80-bit extended in 16 bytes of storage.
#[derive(Clone, Copy)]
#[repr(C, align(1))]
struct F80([u8; 16]);

#[cfg(target_arch = "x86_64")]
impl F80 {
    fn binop(self, other: F80, mul: bool) -> F80 {
        let mut out = F80([0; 16]);
        let a = self.0.as_ptr();
        let b = other.0.as_ptr();
        let o = out.0.as_mut_ptr();
        // SAFETY: loads 10 bytes from each 16-byte input and stores 10 bytes into `out`;
        // the x87 stack is empty on entry (Rust never leaves values on it) and we leave
        // it empty (two loads, one popping op, one popping store).
        unsafe {
            if mul {
                std::arch::asm!(
                    "fld tbyte ptr [{a}]",
                    "fld tbyte ptr [{b}]",
                    "fmulp st(1), st",
                    "fstp tbyte ptr [{o}]",
                    a = in(reg) a, b = in(reg) b, o = in(reg) o,
                    out("st(0)") _, out("st(1)") _,
                    options(nostack),
                );
            } else {
                std::arch::asm!(
                    "fld tbyte ptr [{a}]",
                    "fld tbyte ptr [{b}]",
                    "faddp st(1), st",
                    "fstp tbyte ptr [{o}]",
                    a = in(reg) a, b = in(reg) b, o = in(reg) o,
                    out("st(0)") _, out("st(1)") _,
                    options(nostack),
                );
            }
        }
        out
    }

    fn neg(mut self) -> F80 {
        self.0[9] ^= 0x80;
        self
    }

    fn cmp(self, other: F80) -> Option<Ordering> {
        let a = self.0.as_ptr();
        let b = other.0.as_ptr();
        let (lt, gt, un): (u8, u8, u8);
        // SAFETY: loads 10 bytes from each input, compares, pops both: the x87 stack is
        // left as found; only flags and the three output registers change.
        unsafe {
            std::arch::asm!(
                "fld tbyte ptr [{b}]",
                "fld tbyte ptr [{a}]",
                "fucomip st, st(1)",
                "fstp st(0)",
                "setb {lt}",
                "seta {gt}",
                "setp {un}",
                a = in(reg) a, b = in(reg) b,
                lt = out(reg_byte) lt, gt = out(reg_byte) gt, un = out(reg_byte) un,
                out("st(0)") _, out("st(1)") _,
                options(nostack),
            );
        }
        if un != 0 {
            None
        } else if lt != 0 {
            Some(Ordering::Less)
        } else if gt != 0 {
            Some(Ordering::Greater)
        } else {
            Some(Ordering::Equal)
        }
    }
}

impl PartialEq for F80 {
    fn eq(&self, o: &F80) -> bool {
        self.cmp(*o) == Some(Ordering::Equal)
    }
}
impl PartialOrd for F80 {
    fn partial_cmp(&self, o: &F80) -> Option<Ordering> {
        self.cmp(*o)
    }
}
impl std::ops::Add for F80 {
    type Output = F80;
    fn add(self, o: F80) -> F80 {
        self.binop(o, false)
    }
}
impl std::ops::Sub for F80 {
    type Output = F80;
    fn sub(self, o: F80) -> F80 {
        self.binop(o.neg(), false)
    }
}
impl std::ops::Mul for F80 {
    type Output = F80;
    fn mul(self, o: F80) -> F80 {
        self.binop(o, true)
    }
}

// ----- binary128 through libgcc -----

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::__m128;

/// IEEE binary128 (`REAL*16`), passed to libgcc's soft-float routines in an SSE register
/// exactly as `__float128` is (both are class SSE+SSEUP in the x86_64 psABI).
#[derive(Clone, Copy)]
#[repr(C, align(1))]
struct Q128([u8; 16]);

extern "C" {
    // libgcc / compiler-builtins soft-float routines for `__float128`. Their real
    // signatures take and return `__float128` in SSE registers, which stable Rust cannot
    // declare; they are only ever called through `call_tf` below.
    fn __addtf3();
    fn __subtf3();
    fn __multf3();
    fn __lttf2();
    fn __gttf2();
    fn __unordtf2();
}

macro_rules! call_tf {
    ($f:path, $a:expr, $b:expr) => {{
        let a: __m128 = $a;
        let b: __m128 = $b;
        let r: __m128;
        // SAFETY: calls a soft-float routine with its real ABI: both __float128 arguments
        // in xmm0/xmm1, the __float128 result in xmm0; every register the C ABI lets the
        // callee clobber is declared clobbered, and asm! without `nostack` gives a
        // call-aligned stack.
        unsafe {
            std::arch::asm!("call {f}", f = sym $f, inout("xmm0") a => r, in("xmm1") b, clobber_abi("C"));
        }
        r
    }};
}

macro_rules! cmp_tf {
    ($f:path, $a:expr, $b:expr) => {{
        let a: __m128 = $a;
        let b: __m128 = $b;
        let r: i64;
        // SAFETY: as in call_tf, with the int result in eax (sign-extended below).
        unsafe {
            std::arch::asm!("call {f}", f = sym $f, in("xmm0") a, in("xmm1") b, out("rax") r, clobber_abi("C"));
        }
        r as i32
    }};
}

impl Q128 {
    fn m(self) -> __m128 {
        // SAFETY: 16 plain bytes to a 16-byte SSE value; read_unaligned needs no alignment.
        unsafe { (self.0.as_ptr() as *const __m128).read_unaligned() }
    }
    fn from_m(v: __m128) -> Q128 {
        let mut q = Q128([0; 16]);
        // SAFETY: writes 16 bytes into our own 16-byte array.
        unsafe { (q.0.as_mut_ptr() as *mut __m128).write_unaligned(v) };
        q
    }
}

impl PartialEq for Q128 {
    fn eq(&self, o: &Q128) -> bool {
        self.partial_cmp(o) == Some(Ordering::Equal)
    }
}
impl PartialOrd for Q128 {
    fn partial_cmp(&self, o: &Q128) -> Option<Ordering> {
        if cmp_tf!(__unordtf2, self.m(), o.m()) != 0 {
            None
        } else if cmp_tf!(__lttf2, self.m(), o.m()) < 0 {
            Some(Ordering::Less)
        } else if cmp_tf!(__gttf2, self.m(), o.m()) > 0 {
            Some(Ordering::Greater)
        } else {
            Some(Ordering::Equal)
        }
    }
}
impl std::ops::Add for Q128 {
    type Output = Q128;
    fn add(self, o: Q128) -> Q128 {
        Q128::from_m(call_tf!(__addtf3, self.m(), o.m()))
    }
}
impl std::ops::Sub for Q128 {
    type Output = Q128;
    fn sub(self, o: Q128) -> Q128 {
        Q128::from_m(call_tf!(__subtf3, self.m(), o.m()))
    }
}
impl std::ops::Mul for Q128 {
    type Output = Q128;
    fn mul(self, o: Q128) -> Q128 {
        Q128::from_m(call_tf!(__multf3, self.m(), o.m()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsunagi_core::datatype::{Builtin, Datatype};

    fn ty(b: Builtin) -> TypeRef {
        Datatype::builtin(b)
    }

    fn red<T: Copy>(op: &Op, b: Builtin, a: &[T], inout: &mut [T]) {
        op.check("test", &ty(b)).unwrap();
        // SAFETY: both slices hold `a.len()` elements of the builtin's C type.
        unsafe {
            reduce_local(
                a.as_ptr() as *const u8,
                inout.as_mut_ptr() as *mut u8,
                a.len() as i64,
                &ty(b),
                op,
            )
            .unwrap()
        };
    }

    #[test]
    fn codes_round_trip() {
        for (o, c, n) in PREDEFINED.iter() {
            assert_eq!(Op::from_mpich(*c).unwrap().mpich_code(), Some(*c));
            assert_eq!(o.name(), *n);
        }
        assert_eq!(Op::Sum.mpich_code(), Some(0x58000003));
        assert_eq!(Op::from_mpich_index(12).unwrap().name(), "MPI_MAXLOC");
        assert!(Op::from_mpich_index(0).is_none() && Op::from_mpich_index(15).is_none());
        assert!(Op::from_mpich(MPICH_OP_NULL).is_none());
    }

    #[test]
    fn integer_and_float_ops() {
        let mut x = [1i32, -5, 7, 0];
        red(&Op::Sum, Builtin::Int, &[2, 3, -7, 0], &mut x);
        assert_eq!(x, [3, -2, 0, 0]);
        red(&Op::Max, Builtin::Int, &[5, -9, 1, 4], &mut x);
        assert_eq!(x, [5, -2, 1, 4]);
        red(&Op::Prod, Builtin::Int, &[2, 2, 2, 2], &mut x);
        assert_eq!(x, [10, -4, 2, 8]);
        let mut u = [0b1100u8, 0xff];
        red(&Op::Band, Builtin::Byte, &[0b1010, 0x0f], &mut u);
        assert_eq!(u, [0b1000, 0x0f]);
        red(&Op::Bxor, Builtin::UnsignedChar, &[0b0001, 0xff], &mut u);
        assert_eq!(u, [0b1001, 0xf0]);
        let mut l = [0u8, 1, 1, 0];
        red(&Op::Lxor, Builtin::CBool, &[0, 0, 1, 1], &mut l);
        assert_eq!(l, [0, 1, 0, 1]);
        red(&Op::Land, Builtin::CBool, &[1, 1, 1, 1], &mut l);
        assert_eq!(l, [0, 1, 0, 1]);
        let mut f = [1.5f64, -2.0];
        red(&Op::Min, Builtin::Double, &[0.5, 3.0], &mut f);
        assert_eq!(f, [0.5, -2.0]);
        let mut c = [1.0f32, 2.0]; // 1 + 2i
        red(&Op::Prod, Builtin::CFloatComplex, &[3.0, -1.0], &mut c); // (3 - i)(1 + 2i) = 5 + 5i
        assert_eq!(c, [5.0, 5.0]);
        let mut q = [u64::MAX];
        red(&Op::Sum, Builtin::UnsignedLong, &[2], &mut q);
        assert_eq!(q, [1]);
    }

    #[test]
    fn minloc_maxloc_pairs() {
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        struct DI(f64, i32);
        let a = [DI(1.0, 3), DI(5.0, 1), DI(2.0, 7)];
        let mut b = [DI(1.0, 2), DI(4.0, 0), DI(9.0, 8)];
        red(&Op::Maxloc, Builtin::DoubleInt, &a, &mut b);
        assert_eq!(b, [DI(1.0, 2), DI(5.0, 1), DI(9.0, 8)]);
        red(
            &Op::Minloc,
            Builtin::DoubleInt,
            &[DI(9.0, 0), DI(5.0, 0), DI(0.0, 9)],
            &mut b,
        );
        assert_eq!(b, [DI(1.0, 2), DI(5.0, 0), DI(0.0, 9)]);
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        struct SI(i16, i32);
        let mut s = [SI(3, 1), SI(-4, 2)];
        red(
            &Op::Minloc,
            Builtin::ShortInt,
            &[SI(3, 0), SI(-3, 0)],
            &mut s,
        );
        assert_eq!(s, [SI(3, 0), SI(-4, 2)]);
        let mut t = [[1i32, 5], [7, 2]];
        red(&Op::Maxloc, Builtin::TwoInt, &[[1, 4], [6, 0]], &mut t);
        assert_eq!(t, [[1, 4], [7, 2]]);
    }

    #[test]
    fn invalid_pairs_are_op_errors() {
        for (op, b) in [
            (Op::Sum, Builtin::Byte),
            (Op::Maxloc, Builtin::Int),
            (Op::Band, Builtin::Double),
            (Op::Max, Builtin::CDoubleComplex),
            (Op::Land, Builtin::Float),
            (Op::Sum, Builtin::Packed),
            (Op::Replace, Builtin::Int),
        ] {
            let e = op.check("MPI_Allreduce", &ty(b)).unwrap_err();
            assert_eq!(e.class, ErrorClass::Op, "{} on {:?}", op.name(), b);
            assert!(e.message.starts_with("MPI_Allreduce"), "{}", e.message);
        }
        for (op, b) in [
            (Op::Lor, Builtin::Logical),
            (Op::Bor, Builtin::Byte),
            (Op::Sum, Builtin::DoubleComplex),
            (Op::Minloc, Builtin::TwoDoublePrecision),
            (Op::Prod, Builtin::Integer8),
        ] {
            op.check("x", &ty(b)).unwrap();
        }
        // A struct of mixed kinds has no homogeneous primitive.
        let mixed = Datatype::structure(&[1, 1], &[0, 8], &[ty(Builtin::Int), ty(Builtin::Double)])
            .unwrap();
        let mixed: TypeRef = Arc::new(mixed);
        assert_eq!(
            Op::Sum.check("x", &mixed).unwrap_err().class,
            ErrorClass::Op
        );
    }

    #[test]
    fn derived_vector_reduction() {
        // Every other int of 6: elements 0, 2, 4.
        let v: TypeRef = Arc::new(Datatype::vector(3, 1, 2, &ty(Builtin::Int)).unwrap());
        v.commit();
        let a = [1i32, 100, 2, 100, 3, 100];
        let mut b = [10i32, -1, 20, -1, 30, -1];
        // SAFETY: both arrays cover the vector's type map.
        unsafe {
            reduce_local(
                a.as_ptr() as *const u8,
                b.as_mut_ptr() as *mut u8,
                1,
                &v,
                &Op::Sum,
            )
            .unwrap()
        };
        assert_eq!(b, [11, -1, 22, -1, 33, -1]);
        // A user op on the same non-contiguous type goes through scratch copies.
        let op = Op::user(
            |a, b, n, t| {
                assert_eq!(t.size(), 12);
                for k in 0..n * 3 {
                    // SAFETY: the vector's ints sit at 8-byte steps inside the buffers.
                    unsafe {
                        let pa = (a as *const i32).add(2 * k);
                        let pb = (b as *mut i32).add(2 * k);
                        *pb += *pa * 1000;
                    }
                }
            },
            false,
        );
        // SAFETY: as above.
        unsafe {
            reduce_local(
                a.as_ptr() as *const u8,
                b.as_mut_ptr() as *mut u8,
                1,
                &v,
                &op,
            )
            .unwrap()
        };
        assert_eq!(b, [1011, -1, 2022, -1, 3033, -1]);
    }

    fn f80(x: f64) -> F80 {
        let mut out = F80([0; 16]);
        let o = out.0.as_mut_ptr();
        // SAFETY: converts one f64 to x87 extended, storing 10 bytes into `out`.
        unsafe {
            std::arch::asm!(
                "fld qword ptr [{x}]",
                "fstp tbyte ptr [{o}]",
                x = in(reg) &x, o = in(reg) o,
                out("st(0)") _,
                options(nostack),
            )
        };
        out
    }

    #[test]
    fn long_double_and_binary128() {
        let a = [f80(1.5), f80(-2.0)];
        let mut b = [f80(2.25), f80(3.0)];
        // SAFETY: 2 long doubles each.
        unsafe {
            Op::Sum.apply_packed(
                a.as_ptr() as *const u8,
                b.as_mut_ptr() as *mut u8,
                2,
                &ty(Builtin::LongDouble),
            )
        };
        assert!(b[0] == f80(3.75) && b[1] == f80(1.0));
        // SAFETY: as above.
        unsafe {
            Op::Prod.apply_packed(
                a.as_ptr() as *const u8,
                b.as_mut_ptr() as *mut u8,
                2,
                &ty(Builtin::LongDouble),
            )
        };
        assert!(b[0] == f80(5.625) && b[1] == f80(-2.0));
        assert!(f80(1.0) < f80(2.0) && f80(-1.0).partial_cmp(&f80(-1.0)) == Some(Ordering::Equal));
        // binary128: 1.0 is 0x3fff << 112.
        let one = Q128(((0x3fffu128) << 112).to_le_bytes());
        let two = Q128(((0x4000u128) << 112).to_le_bytes());
        let s = one + one;
        assert_eq!(s.0, two.0);
        assert!(one < two && (two * two) > two);
        assert_eq!((two - one).0, one.0);
    }
}
