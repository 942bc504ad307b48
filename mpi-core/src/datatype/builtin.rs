//! The predefined (named) MPI datatypes and the machine-level element kinds they map to.
//!
//! Sizes, extents and alignments are those of x86_64 Linux (LP64, x87 `long double` in
//! 16-byte storage), checked against MPICH 4: the MINLOC/MAXLOC pair types have padding
//! (e.g. `MPI_DOUBLE_INT` has size 12 and extent 16), `MPI_SHORT_INT` even has a hole
//! between its members, which is why a builtin is described by a list of byte runs.

/// Every predefined MPI datatype (C, Fortran and C++), in a fixed order: `ALL[i] as usize == i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Char,
    SignedChar,
    UnsignedChar,
    Byte,
    WChar,
    Short,
    UnsignedShort,
    Int,
    Unsigned,
    Long,
    UnsignedLong,
    LongLong,
    UnsignedLongLong,
    Float,
    Double,
    LongDouble,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    CBool,
    CFloatComplex,
    CDoubleComplex,
    CLongDoubleComplex,
    Aint,
    Offset,
    Count,
    Packed,
    FloatInt,
    DoubleInt,
    LongInt,
    TwoInt,
    ShortInt,
    LongDoubleInt,
    // Fortran
    Character,
    Logical,
    Integer,
    Real,
    DoublePrecision,
    Complex,
    DoubleComplex,
    TwoReal,
    TwoDoublePrecision,
    TwoInteger,
    Integer1,
    Integer2,
    Integer4,
    Integer8,
    Real4,
    Real8,
    Real16,
    Complex8,
    Complex16,
    Complex32,
    // C++
    CxxBool,
    CxxFloatComplex,
    CxxDoubleComplex,
    CxxLongDoubleComplex,
}

/// The machine-level kind of one basic element, as reductions see it.
///
/// Pair kinds (for MINLOC/MAXLOC) are one element each here; in the packed stream they
/// take [`Primitive::size`] bytes (value then index, no padding: `DoubleInt` is an `f64`
/// at 0 and an `i32` at 8, `ShortInt` an `i16` at 0 and an `i32` at 2), while in user
/// memory they keep their C layout (see [`Primitive::value_offsets`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    /// C `long double`: x87 80-bit extended in 16 bytes of storage.
    LongDouble,
    /// IEEE binary128 (gfortran `REAL*16`), 16 bytes.
    F128,
    ComplexF32,
    ComplexF64,
    ComplexLongDouble,
    ComplexF128,
    /// C `_Bool` / C++ `bool`: one byte, 0 or 1.
    Bool,
    /// Fortran `LOGICAL`: a 4-byte integer, nonzero is true.
    Logical,
    /// `MPI_BYTE`: uninterpreted.
    Byte,
    /// `MPI_PACKED`: uninterpreted.
    Packed,
    /// (f32, i32): `MPI_FLOAT_INT`.
    FloatInt,
    /// (f64, i32): `MPI_DOUBLE_INT`.
    DoubleInt,
    /// (i64, i32): `MPI_LONG_INT`.
    LongInt,
    /// (i32, i32): `MPI_2INT`, `MPI_2INTEGER`.
    IntInt,
    /// (i16, i32): `MPI_SHORT_INT`.
    ShortInt,
    /// (long double, i32): `MPI_LONG_DOUBLE_INT`.
    LongDoubleInt,
    /// (f32, f32): `MPI_2REAL`.
    FloatFloat,
    /// (f64, f64): `MPI_2DOUBLE_PRECISION`.
    DoubleDouble,
}

impl Primitive {
    /// Bytes one element takes in the packed stream (the MPI size of its type).
    pub fn size(self) -> usize {
        use Primitive::*;
        match self {
            I8 | U8 | Bool | Byte | Packed => 1,
            I16 | U16 => 2,
            I32 | U32 | F32 | Logical => 4,
            I64 | U64 | F64 | ComplexF32 | FloatInt | IntInt | FloatFloat => 8,
            ShortInt => 6,
            DoubleInt | LongInt => 12,
            LongDouble | F128 | ComplexF64 | DoubleDouble => 16,
            LongDoubleInt => 20,
            ComplexLongDouble | ComplexF128 => 32,
        }
    }

    /// For pair kinds, the byte offsets of the value and of the index in user memory
    /// (C struct layout); `None` for the others.
    pub fn value_offsets(self) -> Option<(usize, usize)> {
        use Primitive::*;
        match self {
            FloatInt | IntInt | FloatFloat | ShortInt => Some((0, 4)),
            DoubleInt | LongInt | DoubleDouble => Some((0, 8)),
            LongDoubleInt => Some((0, 16)),
            _ => None,
        }
    }

    /// Signed or unsigned integers (C and Fortran), the kinds MPI's integer ops accept.
    pub fn is_integer(self) -> bool {
        use Primitive::*;
        matches!(self, I8 | U8 | I16 | U16 | I32 | U32 | I64 | U64)
    }

    /// Real floating point kinds.
    pub fn is_float(self) -> bool {
        use Primitive::*;
        matches!(self, F32 | F64 | LongDouble | F128)
    }

    /// Complex kinds.
    pub fn is_complex(self) -> bool {
        use Primitive::*;
        matches!(
            self,
            ComplexF32 | ComplexF64 | ComplexLongDouble | ComplexF128
        )
    }

    /// Logical kinds (C bool, Fortran LOGICAL).
    pub fn is_logical(self) -> bool {
        matches!(self, Primitive::Bool | Primitive::Logical)
    }

    /// The MINLOC/MAXLOC pair kinds.
    pub fn is_pair(self) -> bool {
        self.value_offsets().is_some()
    }
}

/// Static facts about one builtin.
pub(crate) struct BuiltinInfo {
    pub name: &'static str,
    pub size: usize,
    pub extent: usize,
    pub align: usize,
    pub prim: Primitive,
    /// Byte runs (offset, length) of one element, in type-map order.
    pub runs: &'static [(usize, usize)],
    /// Basic elements (element size, count) in packed order.
    pub elems: &'static [(usize, usize)],
}

impl Builtin {
    /// All builtins, in declaration order.
    pub const ALL: &'static [Builtin] = &[
        Builtin::Char,
        Builtin::SignedChar,
        Builtin::UnsignedChar,
        Builtin::Byte,
        Builtin::WChar,
        Builtin::Short,
        Builtin::UnsignedShort,
        Builtin::Int,
        Builtin::Unsigned,
        Builtin::Long,
        Builtin::UnsignedLong,
        Builtin::LongLong,
        Builtin::UnsignedLongLong,
        Builtin::Float,
        Builtin::Double,
        Builtin::LongDouble,
        Builtin::Int8,
        Builtin::Int16,
        Builtin::Int32,
        Builtin::Int64,
        Builtin::Uint8,
        Builtin::Uint16,
        Builtin::Uint32,
        Builtin::Uint64,
        Builtin::CBool,
        Builtin::CFloatComplex,
        Builtin::CDoubleComplex,
        Builtin::CLongDoubleComplex,
        Builtin::Aint,
        Builtin::Offset,
        Builtin::Count,
        Builtin::Packed,
        Builtin::FloatInt,
        Builtin::DoubleInt,
        Builtin::LongInt,
        Builtin::TwoInt,
        Builtin::ShortInt,
        Builtin::LongDoubleInt,
        Builtin::Character,
        Builtin::Logical,
        Builtin::Integer,
        Builtin::Real,
        Builtin::DoublePrecision,
        Builtin::Complex,
        Builtin::DoubleComplex,
        Builtin::TwoReal,
        Builtin::TwoDoublePrecision,
        Builtin::TwoInteger,
        Builtin::Integer1,
        Builtin::Integer2,
        Builtin::Integer4,
        Builtin::Integer8,
        Builtin::Real4,
        Builtin::Real8,
        Builtin::Real16,
        Builtin::Complex8,
        Builtin::Complex16,
        Builtin::Complex32,
        Builtin::CxxBool,
        Builtin::CxxFloatComplex,
        Builtin::CxxDoubleComplex,
        Builtin::CxxLongDoubleComplex,
    ];

    pub(crate) fn info(self) -> BuiltinInfo {
        use Builtin::*;
        use Primitive as P;
        // (name, size, align, primitive) for the plain single-element types; the pair
        // types with padding are spelled out below.
        let plain = |name, size, align, prim| BuiltinInfo {
            name,
            size,
            extent: size,
            align,
            prim,
            runs: match size {
                1 => &[(0, 1)],
                2 => &[(0, 2)],
                4 => &[(0, 4)],
                8 => &[(0, 8)],
                16 => &[(0, 16)],
                _ => &[(0, 32)],
            },
            elems: match size {
                1 => &[(1, 1)],
                2 => &[(2, 1)],
                4 => &[(4, 1)],
                8 => &[(8, 1)],
                16 => &[(16, 1)],
                _ => &[(32, 1)],
            },
        };
        let pair = |name, size, extent, align, prim, runs, elems| BuiltinInfo {
            name,
            size,
            extent,
            align,
            prim,
            runs,
            elems,
        };
        match self {
            Char => plain("MPI_CHAR", 1, 1, P::I8),
            SignedChar => plain("MPI_SIGNED_CHAR", 1, 1, P::I8),
            UnsignedChar => plain("MPI_UNSIGNED_CHAR", 1, 1, P::U8),
            Byte => plain("MPI_BYTE", 1, 1, P::Byte),
            WChar => plain("MPI_WCHAR", 4, 4, P::I32),
            Short => plain("MPI_SHORT", 2, 2, P::I16),
            UnsignedShort => plain("MPI_UNSIGNED_SHORT", 2, 2, P::U16),
            Int => plain("MPI_INT", 4, 4, P::I32),
            Unsigned => plain("MPI_UNSIGNED", 4, 4, P::U32),
            Long => plain("MPI_LONG", 8, 8, P::I64),
            UnsignedLong => plain("MPI_UNSIGNED_LONG", 8, 8, P::U64),
            // MPICH reports MPI_LONG_LONG under its older name.
            LongLong => plain("MPI_LONG_LONG_INT", 8, 8, P::I64),
            UnsignedLongLong => plain("MPI_UNSIGNED_LONG_LONG", 8, 8, P::U64),
            Float => plain("MPI_FLOAT", 4, 4, P::F32),
            Double => plain("MPI_DOUBLE", 8, 8, P::F64),
            LongDouble => plain("MPI_LONG_DOUBLE", 16, 16, P::LongDouble),
            Int8 => plain("MPI_INT8_T", 1, 1, P::I8),
            Int16 => plain("MPI_INT16_T", 2, 2, P::I16),
            Int32 => plain("MPI_INT32_T", 4, 4, P::I32),
            Int64 => plain("MPI_INT64_T", 8, 8, P::I64),
            Uint8 => plain("MPI_UINT8_T", 1, 1, P::U8),
            Uint16 => plain("MPI_UINT16_T", 2, 2, P::U16),
            Uint32 => plain("MPI_UINT32_T", 4, 4, P::U32),
            Uint64 => plain("MPI_UINT64_T", 8, 8, P::U64),
            CBool => plain("MPI_C_BOOL", 1, 1, P::Bool),
            // MPICH names MPI_C_FLOAT_COMPLEX by its alias MPI_C_COMPLEX.
            CFloatComplex => plain("MPI_C_COMPLEX", 8, 4, P::ComplexF32),
            CDoubleComplex => plain("MPI_C_DOUBLE_COMPLEX", 16, 8, P::ComplexF64),
            CLongDoubleComplex => plain("MPI_C_LONG_DOUBLE_COMPLEX", 32, 16, P::ComplexLongDouble),
            Aint => plain("MPI_AINT", 8, 8, P::I64),
            Offset => plain("MPI_OFFSET", 8, 8, P::I64),
            Count => plain("MPI_COUNT", 8, 8, P::I64),
            Packed => plain("MPI_PACKED", 1, 1, P::Packed),
            FloatInt => pair("MPI_FLOAT_INT", 8, 8, 4, P::FloatInt, &[(0, 8)], &[(4, 2)]),
            DoubleInt => pair(
                "MPI_DOUBLE_INT",
                12,
                16,
                8,
                P::DoubleInt,
                &[(0, 12)],
                &[(8, 1), (4, 1)],
            ),
            LongInt => pair(
                "MPI_LONG_INT",
                12,
                16,
                8,
                P::LongInt,
                &[(0, 12)],
                &[(8, 1), (4, 1)],
            ),
            TwoInt => pair("MPI_2INT", 8, 8, 4, P::IntInt, &[(0, 8)], &[(4, 2)]),
            // struct { short; int; }: the int sits at 4, leaving a 2-byte hole.
            ShortInt => pair(
                "MPI_SHORT_INT",
                6,
                8,
                4,
                P::ShortInt,
                &[(0, 2), (4, 4)],
                &[(2, 1), (4, 1)],
            ),
            LongDoubleInt => pair(
                "MPI_LONG_DOUBLE_INT",
                20,
                32,
                16,
                P::LongDoubleInt,
                &[(0, 20)],
                &[(16, 1), (4, 1)],
            ),
            Character => plain("MPI_CHARACTER", 1, 1, P::U8),
            Logical => plain("MPI_LOGICAL", 4, 4, P::Logical),
            Integer => plain("MPI_INTEGER", 4, 4, P::I32),
            Real => plain("MPI_REAL", 4, 4, P::F32),
            DoublePrecision => plain("MPI_DOUBLE_PRECISION", 8, 8, P::F64),
            Complex => plain("MPI_COMPLEX", 8, 4, P::ComplexF32),
            DoubleComplex => plain("MPI_DOUBLE_COMPLEX", 16, 8, P::ComplexF64),
            TwoReal => pair("MPI_2REAL", 8, 8, 4, P::FloatFloat, &[(0, 8)], &[(4, 2)]),
            TwoDoublePrecision => pair(
                "MPI_2DOUBLE_PRECISION",
                16,
                16,
                8,
                P::DoubleDouble,
                &[(0, 16)],
                &[(8, 2)],
            ),
            TwoInteger => pair("MPI_2INTEGER", 8, 8, 4, P::IntInt, &[(0, 8)], &[(4, 2)]),
            Integer1 => plain("MPI_INTEGER1", 1, 1, P::I8),
            Integer2 => plain("MPI_INTEGER2", 2, 2, P::I16),
            Integer4 => plain("MPI_INTEGER4", 4, 4, P::I32),
            Integer8 => plain("MPI_INTEGER8", 8, 8, P::I64),
            Real4 => plain("MPI_REAL4", 4, 4, P::F32),
            Real8 => plain("MPI_REAL8", 8, 8, P::F64),
            // MPICH gives REAL16/COMPLEX32 alignment 1 when its Fortran compiler lacks
            // them; we use the natural 16 of binary128.
            Real16 => plain("MPI_REAL16", 16, 16, P::F128),
            Complex8 => plain("MPI_COMPLEX8", 8, 4, P::ComplexF32),
            Complex16 => plain("MPI_COMPLEX16", 16, 8, P::ComplexF64),
            Complex32 => plain("MPI_COMPLEX32", 32, 16, P::ComplexF128),
            CxxBool => plain("MPI_CXX_BOOL", 1, 1, P::Bool),
            CxxFloatComplex => plain("MPI_CXX_FLOAT_COMPLEX", 8, 4, P::ComplexF32),
            CxxDoubleComplex => plain("MPI_CXX_DOUBLE_COMPLEX", 16, 8, P::ComplexF64),
            CxxLongDoubleComplex => {
                plain("MPI_CXX_LONG_DOUBLE_COMPLEX", 32, 16, P::ComplexLongDouble)
            }
        }
    }

    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(self) -> usize {
        self.info().size
    }

    /// Extent of one element (differs from the size for the padded pair types).
    pub fn extent(self) -> usize {
        self.info().extent
    }

    /// Alignment used for the struct-extent rounding (MPI §4.1.6).
    pub fn alignment(self) -> usize {
        self.info().align
    }

    /// The MPI name, e.g. `"MPI_INT"`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The element kind reductions operate on.
    pub fn primitive(self) -> Primitive {
        self.info().prim
    }

    /// The builtin whose MPI name is `name` (aliases such as `MPI_LONG_LONG` included).
    pub fn from_name(name: &str) -> Option<Builtin> {
        match name {
            "MPI_LONG_LONG" => return Some(Builtin::LongLong),
            "MPI_C_FLOAT_COMPLEX" => return Some(Builtin::CFloatComplex),
            _ => {}
        }
        Self::ALL.iter().copied().find(|b| b.name() == name)
    }
}
