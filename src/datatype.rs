//! Datatypes: the [`Equivalence`] trait that maps Rust types to MPI datatypes, user-built
//! derived datatypes ([`UserDatatype`]), and the buffer traits ([`Buffer`], [`BufferMut`])
//! with their explicit-datatype views ([`View`], [`MutView`]).
//!
//! ```
//! use tsunagi::datatype::{UserDatatype, View};
//! use tsunagi::traits::*;
//!
//! #[derive(tsunagi::Equivalence, Clone, Copy)]
//! #[repr(C)]
//! struct Particle { id: u32, pos: [f64; 3], charge: f32 }
//!
//! // The derived datatype carries the fields' bytes (no padding) and has the Rust size
//! // as its extent, so slices of particles can be sent as they are.
//! let dt = Particle::equivalent_datatype();
//! assert_eq!(dt.size(), 4 + 24 + 4);
//! assert_eq!(dt.extent() as usize, std::mem::size_of::<Particle>());
//!
//! // Column 2 of a 4 x 3 row-major matrix: 4 blocks of 1 element, 3 elements apart.
//! let m: Vec<f64> = (0..12).map(f64::from).collect();
//! let column = UserDatatype::vector(4, 1, 3, &f64::equivalent_datatype()).unwrap();
//! let view = View::new(&m[2..], 1, &column).unwrap(); // sendable like any buffer
//! assert_eq!(view.buffer_count(), 1);
//! // A view reaching past the end of its slice is refused.
//! assert!(View::new(&m[3..], 1, &column).is_err());
//! ```
//!
//! Enums and unions cannot derive `Equivalence`:
//! ```compile_fail
//! #[derive(tsunagi::Equivalence)]
//! enum E { A(u32), B(f64) }
//! ```
//! nor can structs with a field that has no datatype:
//! ```compile_fail
//! #[derive(tsunagi::Equivalence)]
//! struct S { name: String }
//! ```

use std::any::TypeId;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock, RwLock};

use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};

use crate::error::{Error, ErrorClass, Result};

/// Element counts and block lengths (MPI_Count).
pub type Count = i64;
/// Byte displacements and extents (MPI_Aint).
pub type Address = isize;

/// A shared handle to a committed MPI datatype.
#[derive(Clone)]
pub struct DatatypeRef(TypeRef);

impl DatatypeRef {
    /// The datatype of a predefined (builtin) MPI type.
    pub fn builtin(b: Builtin) -> DatatypeRef {
        DatatypeRef(Datatype::builtin(b))
    }
    /// Bytes of data one element carries (MPI_Type_size).
    pub fn size(&self) -> usize {
        self.0.size()
    }
    /// Extent of one element in bytes (MPI_Type_get_extent).
    pub fn extent(&self) -> Address {
        self.0.extent()
    }
    /// Lower bound in bytes.
    pub fn lower_bound(&self) -> Address {
        self.0.lb()
    }
    /// The datatype's name.
    pub fn name(&self) -> String {
        self.0.name()
    }
    /// The core's datatype (for interoperation with `tsunagi_core`).
    pub fn as_raw(&self) -> &TypeRef {
        &self.0
    }
    /// Wrap a core datatype; it must be committed to be used in communication.
    pub fn from_raw(t: TypeRef) -> DatatypeRef {
        DatatypeRef(t)
    }
}

impl std::fmt::Debug for DatatypeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatatypeRef")
            .field("name", &self.name())
            .field("size", &self.size())
            .field("extent", &self.extent())
            .finish()
    }
}

/// Anything that names a datatype: [`DatatypeRef`] and [`UserDatatype`].
pub trait AsDatatype {
    /// The datatype.
    fn as_datatype(&self) -> DatatypeRef;
}

impl AsDatatype for DatatypeRef {
    fn as_datatype(&self) -> DatatypeRef {
        self.clone()
    }
}

/// A Rust type with an equivalent MPI datatype.
///
/// # Safety
/// `equivalent_datatype()` must return a committed datatype whose extent equals
/// `size_of::<Self>()`, whose type map lies within `[0, size_of::<Self>())`, and which
/// covers every byte of `Self` that is not padding; and every value the datatype's type
/// signature can carry (as sent from a value of a type with the same signature) must be a
/// valid `Self`. Use `#[derive(Equivalence)]` for structs rather than implementing it by
/// hand.
pub unsafe trait Equivalence: Sized {
    /// The datatype describing one `Self`.
    fn equivalent_datatype() -> DatatypeRef;
}

/// Types for which every bit pattern is a valid value (integers, floats, arrays of them).
/// Buffers of these can be received into through any datatype with [`MutView::new`].
///
/// # Safety
/// Every byte pattern of `size_of::<Self>()` bytes must be a valid `Self`, and `Self` must
/// have no padding.
pub unsafe trait PlainData: Copy + 'static {}

macro_rules! builtin_equivalence {
    ($($t:ty => $b:ident),* $(,)?) => {$(
        // SAFETY: the builtin has the size and extent of the Rust type and, the type being a
        // primitive integer, float or bool, covers all its bytes.
        unsafe impl Equivalence for $t {
            fn equivalent_datatype() -> DatatypeRef {
                DatatypeRef(Datatype::builtin(Builtin::$b))
            }
        }
    )*};
}

builtin_equivalence! {
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    f32 => Float, f64 => Double, bool => CBool,
}
#[cfg(target_pointer_width = "64")]
builtin_equivalence! { usize => Uint64, isize => Int64 }
#[cfg(target_pointer_width = "32")]
builtin_equivalence! { usize => Uint32, isize => Int32 }

macro_rules! plain_data {
    ($($t:ty),*) => {$(
        // SAFETY: primitive integers and floats accept every bit pattern and have no padding.
        unsafe impl PlainData for $t {}
    )*};
}
plain_data!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);
// SAFETY: an array of padding-free types accepting every bit pattern is the same.
unsafe impl<T: PlainData, const N: usize> PlainData for [T; N] {}

// SAFETY: a contiguous run of N elements of T's datatype; T's extent is size_of::<T>(), so
// the extent is N * size_of::<T>() = size_of::<[T; N]>() and the map covers every element.
unsafe impl<T: Equivalence + 'static, const N: usize> Equivalence for [T; N] {
    fn equivalent_datatype() -> DatatypeRef {
        __private::cached::<Self>(|| {
            let old = T::equivalent_datatype();
            let dt = Datatype::contiguous(N as i64, &old.0)
                .expect("contiguous datatype of an array type");
            commit(dt)
        })
    }
}

fn commit(dt: Datatype) -> DatatypeRef {
    dt.commit();
    DatatypeRef(Arc::new(dt))
}

/// A derived datatype built by the user, committed on construction.
#[derive(Clone, Debug)]
pub struct UserDatatype(DatatypeRef);

/// Storage order of a multi-dimensional array (for [`UserDatatype::subarray`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// C order: the last index varies fastest.
    RowMajor,
    /// Fortran order: the first index varies fastest.
    ColumnMajor,
}

fn built(r: tsunagi_core::MpiResult<Datatype>) -> Result<UserDatatype> {
    Ok(UserDatatype(commit(r?)))
}

impl UserDatatype {
    /// `count` consecutive elements of `old` (MPI_Type_contiguous).
    pub fn contiguous(count: Count, old: &impl AsDatatype) -> Result<UserDatatype> {
        built(Datatype::contiguous(count, &old.as_datatype().0))
    }
    /// `count` blocks of `blocklength` elements, `stride` elements apart (MPI_Type_vector).
    pub fn vector(
        count: Count,
        blocklength: Count,
        stride: Count,
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        built(Datatype::vector(
            count,
            blocklength,
            stride,
            &old.as_datatype().0,
        ))
    }
    /// Like [`UserDatatype::vector`] with the stride in bytes (MPI_Type_create_hvector).
    pub fn heterogeneous_vector(
        count: Count,
        blocklength: Count,
        stride: Address,
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        built(Datatype::hvector(
            count,
            blocklength,
            stride,
            &old.as_datatype().0,
        ))
    }
    /// Blocks of `blocklengths[i]` elements at `displacements[i]` elements
    /// (MPI_Type_indexed).
    pub fn indexed(
        blocklengths: &[Count],
        displacements: &[Count],
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        check_same_len("indexed", blocklengths.len(), displacements.len())?;
        built(Datatype::indexed(
            blocklengths,
            displacements,
            &old.as_datatype().0,
        ))
    }
    /// Like [`UserDatatype::indexed`] with byte displacements (MPI_Type_create_hindexed).
    pub fn heterogeneous_indexed(
        blocklengths: &[Count],
        displacements: &[Address],
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        check_same_len(
            "heterogeneous_indexed",
            blocklengths.len(),
            displacements.len(),
        )?;
        built(Datatype::hindexed(
            blocklengths,
            displacements,
            &old.as_datatype().0,
        ))
    }
    /// Blocks of `blocklength` elements at `displacements[i]` elements
    /// (MPI_Type_create_indexed_block).
    pub fn indexed_block(
        blocklength: Count,
        displacements: &[Count],
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        built(Datatype::indexed_block(
            blocklength,
            displacements,
            &old.as_datatype().0,
        ))
    }
    /// Blocks of `blocklengths[i]` elements of `types[i]` at byte `displacements[i]`
    /// (MPI_Type_create_struct).
    pub fn structured(
        blocklengths: &[Count],
        displacements: &[Address],
        types: &[DatatypeRef],
    ) -> Result<UserDatatype> {
        check_same_len("structured", blocklengths.len(), displacements.len())?;
        check_same_len("structured", blocklengths.len(), types.len())?;
        let types: Vec<TypeRef> = types.iter().map(|t| t.0.clone()).collect();
        built(Datatype::structure(blocklengths, displacements, &types))
    }
    /// `old` with a new lower bound and extent (MPI_Type_create_resized).
    pub fn resized(
        old: &impl AsDatatype,
        lower_bound: Address,
        extent: Address,
    ) -> Result<UserDatatype> {
        built(Datatype::resized(&old.as_datatype().0, lower_bound, extent))
    }
    /// A sub-block of a multi-dimensional array (MPI_Type_create_subarray).
    pub fn subarray(
        sizes: &[Count],
        subsizes: &[Count],
        starts: &[Count],
        order: Order,
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        check_same_len("subarray", sizes.len(), subsizes.len())?;
        check_same_len("subarray", sizes.len(), starts.len())?;
        let order = match order {
            Order::RowMajor => tsunagi_core::datatype::Order::C,
            Order::ColumnMajor => tsunagi_core::datatype::Order::Fortran,
        };
        built(Datatype::subarray(
            sizes,
            subsizes,
            starts,
            order,
            &old.as_datatype().0,
        ))
    }
    /// A copy of `old` (MPI_Type_dup).
    pub fn duplicate(old: &impl AsDatatype) -> UserDatatype {
        UserDatatype(commit(Datatype::dup(&old.as_datatype().0)))
    }
    /// The datatype as a shared handle.
    pub fn datatype_ref(&self) -> &DatatypeRef {
        &self.0
    }
    /// Bytes of data one element carries.
    pub fn size(&self) -> usize {
        self.0.size()
    }
    /// Extent of one element in bytes.
    pub fn extent(&self) -> Address {
        self.0.extent()
    }
}

impl AsDatatype for UserDatatype {
    fn as_datatype(&self) -> DatatypeRef {
        self.0.clone()
    }
}

fn check_same_len(what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(Error::new(
            ErrorClass::Arg,
            format!("UserDatatype::{what}: argument slices differ in length ({a} and {b})"),
        ));
    }
    Ok(())
}

/// A readable communication buffer: an address, a count and a datatype.
///
/// # Safety
/// `buffer_count()` elements of `buffer_datatype()` starting at `buffer_pointer()` must
/// lie within memory owned (or borrowed) by `self`, readable for as long as `self` is
/// borrowed.
pub unsafe trait Buffer {
    /// Address of the buffer.
    fn buffer_pointer(&self) -> *const u8;
    /// Number of elements of [`Buffer::buffer_datatype`].
    fn buffer_count(&self) -> Count;
    /// The element datatype.
    fn buffer_datatype(&self) -> DatatypeRef;
}

/// A writable communication buffer.
///
/// # Safety
/// As [`Buffer`], and the memory must be writable through `buffer_pointer_mut()` with
/// any data of the datatype's type signature without making `self` invalid.
pub unsafe trait BufferMut: Buffer {
    /// Address of the buffer, for writing.
    fn buffer_pointer_mut(&mut self) -> *mut u8;
}

// SAFETY: one T at its own address; T's datatype covers exactly its bytes (Equivalence).
unsafe impl<T: Equivalence> Buffer for T {
    fn buffer_pointer(&self) -> *const u8 {
        self as *const T as *const u8
    }
    fn buffer_count(&self) -> Count {
        1
    }
    fn buffer_datatype(&self) -> DatatypeRef {
        T::equivalent_datatype()
    }
}
// SAFETY: as above; received data of T's signature is a valid T (Equivalence).
unsafe impl<T: Equivalence> BufferMut for T {
    fn buffer_pointer_mut(&mut self) -> *mut u8 {
        self as *mut T as *mut u8
    }
}

// SAFETY: len elements of T at the slice's address; T's extent is size_of::<T>().
unsafe impl<T: Equivalence> Buffer for [T] {
    fn buffer_pointer(&self) -> *const u8 {
        self.as_ptr() as *const u8
    }
    fn buffer_count(&self) -> Count {
        self.len() as Count
    }
    fn buffer_datatype(&self) -> DatatypeRef {
        T::equivalent_datatype()
    }
}
// SAFETY: as above, writable through the unique borrow.
unsafe impl<T: Equivalence> BufferMut for [T] {
    fn buffer_pointer_mut(&mut self) -> *mut u8 {
        self.as_mut_ptr() as *mut u8
    }
}

// SAFETY: the vector's initialized elements, as for [T].
unsafe impl<T: Equivalence> Buffer for Vec<T> {
    fn buffer_pointer(&self) -> *const u8 {
        self.as_ptr() as *const u8
    }
    fn buffer_count(&self) -> Count {
        self.len() as Count
    }
    fn buffer_datatype(&self) -> DatatypeRef {
        T::equivalent_datatype()
    }
}
// SAFETY: as above, writable through the unique borrow.
unsafe impl<T: Equivalence> BufferMut for Vec<T> {
    fn buffer_pointer_mut(&mut self) -> *mut u8 {
        self.as_mut_ptr() as *mut u8
    }
}

/// The buffer's data in the portable `external32` representation (`MPI_Pack_external`
/// with datarep "external32": big-endian, IEEE 754, the standard's sizes, so e.g. a C
/// `long` takes 4 bytes).
///
/// ```
/// use tsunagi::datatype::{external32_size, pack_external32, unpack_external32};
/// use tsunagi::traits::*;
///
/// let v = [1i32, -2];
/// let bytes = pack_external32(&v[..]).unwrap();
/// assert_eq!(bytes, [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe]);
/// assert_eq!(external32_size(&i32::equivalent_datatype(), 2).unwrap(), 8);
/// let mut back = [0i32; 2];
/// assert_eq!(unpack_external32(&bytes, &mut back[..]).unwrap(), 8);
/// assert_eq!(back, v);
/// ```
///
/// A value that does not fit its external32 size is an [`ErrorClass::Conversion`] error.
pub fn pack_external32<B: Buffer + ?Sized>(buf: &B) -> Result<Vec<u8>> {
    let dt = buf.buffer_datatype();
    let count = non_negative("pack_external32", buf.buffer_count())?;
    let mut out = Vec::new();
    // SAFETY: `Buffer` guarantees `count` elements of the datatype at the pointer are
    // readable while `buf` is borrowed.
    unsafe {
        tsunagi_core::datatype::pack_external32(&dt.0, buf.buffer_pointer(), count, &mut out)
    }?;
    Ok(out)
}

/// Fill the buffer from the `external32` bytes at the start of `data`
/// (`MPI_Unpack_external`); returns the bytes consumed. [`ErrorClass::Truncate`] if `data`
/// is shorter than the buffer's external32 size (then nothing is written).
pub fn unpack_external32<B: BufferMut + ?Sized>(data: &[u8], buf: &mut B) -> Result<usize> {
    let dt = buf.buffer_datatype();
    let count = non_negative("unpack_external32", buf.buffer_count())?;
    let ptr = buf.buffer_pointer_mut();
    // SAFETY: `BufferMut` guarantees the elements are writable with data of the type's
    // signature through the unique borrow, so they cannot overlap `data`.
    Ok(unsafe { tsunagi_core::datatype::unpack_external32(&dt.0, data, ptr, count) }?)
}

/// Bytes of `count` elements of `datatype` in `external32` (`MPI_Pack_external_size`).
pub fn external32_size(datatype: &impl AsDatatype, count: Count) -> Result<usize> {
    let count = non_negative("external32_size", count)?;
    Ok(tsunagi_core::datatype::external32_size(
        &datatype.as_datatype().0,
        count,
    )?)
}

fn non_negative(call: &str, count: Count) -> Result<usize> {
    usize::try_from(count).map_err(|_| {
        Error::new(
            ErrorClass::Count,
            format!("{call}: count {count} is negative"),
        )
    })
}

/// Check that `count` elements of `dt` starting at offset 0 lie within `bytes` bytes.
fn check_fits(call: &str, dt: &DatatypeRef, count: Count, bytes: usize) -> Result<()> {
    if count < 0 {
        return Err(Error::new(
            ErrorClass::Count,
            format!("{call}: count {count} is negative"),
        ));
    }
    if count == 0 || dt.size() == 0 {
        return Ok(());
    }
    let t = &dt.0;
    let true_lb = t.true_lb() as i128;
    let true_ub = true_lb + t.true_extent() as i128;
    let last = (count as i128 - 1) * t.extent() as i128;
    let lo = true_lb.min(true_lb + last);
    let hi = true_ub.max(true_ub + last);
    if lo < 0 || hi > bytes as i128 {
        return Err(Error::new(
            ErrorClass::Buffer,
            format!(
                "{call}: {count} elements of datatype {} span bytes {lo}..{hi}, outside the buffer of {bytes} bytes",
                dt.name()
            ),
        ));
    }
    Ok(())
}

/// A read-only buffer seen through an explicit datatype and count, e.g. a strided column
/// of a matrix through a vector datatype. The type map is checked to lie inside the slice.
pub struct View<'b> {
    ptr: *const u8,
    count: Count,
    dt: DatatypeRef,
    _buf: PhantomData<&'b [u8]>,
}

impl<'b> View<'b> {
    /// View `count` elements of `datatype` laid over `buf` (offsets relative to its start).
    pub fn new<T: Equivalence>(
        buf: &'b [T],
        count: Count,
        datatype: &impl AsDatatype,
    ) -> Result<View<'b>> {
        let dt = datatype.as_datatype();
        check_fits("View::new", &dt, count, std::mem::size_of_val(buf))?;
        Ok(View {
            ptr: buf.as_ptr() as *const u8,
            count,
            dt,
            _buf: PhantomData,
        })
    }
}

// SAFETY: the type map was checked to lie within the borrowed slice, which stays borrowed
// (shared) for 'b.
unsafe impl Buffer for View<'_> {
    fn buffer_pointer(&self) -> *const u8 {
        self.ptr
    }
    fn buffer_count(&self) -> Count {
        self.count
    }
    fn buffer_datatype(&self) -> DatatypeRef {
        self.dt.clone()
    }
}

/// A writable buffer seen through an explicit datatype and count.
pub struct MutView<'b> {
    ptr: *mut u8,
    count: Count,
    dt: DatatypeRef,
    _buf: PhantomData<&'b mut [u8]>,
}

impl<'b> MutView<'b> {
    /// View `count` elements of `datatype` laid over `buf`, for receiving. The elements
    /// accept any bit pattern, so any datatype may write them.
    pub fn new<T: PlainData>(
        buf: &'b mut [T],
        count: Count,
        datatype: &impl AsDatatype,
    ) -> Result<MutView<'b>> {
        // SAFETY: T accepts every bit pattern, so whatever the datatype writes is valid.
        unsafe { Self::new_any(buf, count, datatype) }
    }

    /// Like [`MutView::new`] for any element type.
    ///
    /// # Safety
    /// Data received through `datatype` must leave every element of `buf` a valid `T`
    /// (e.g. the datatype's blocks cover whole fields with matching types).
    pub unsafe fn new_any<T>(
        buf: &'b mut [T],
        count: Count,
        datatype: &impl AsDatatype,
    ) -> Result<MutView<'b>> {
        let dt = datatype.as_datatype();
        check_fits("MutView::new", &dt, count, std::mem::size_of_val(buf))?;
        Ok(MutView {
            ptr: buf.as_mut_ptr() as *mut u8,
            count,
            dt,
            _buf: PhantomData,
        })
    }
}

// SAFETY: the type map was checked to lie within the uniquely borrowed slice.
unsafe impl Buffer for MutView<'_> {
    fn buffer_pointer(&self) -> *const u8 {
        self.ptr
    }
    fn buffer_count(&self) -> Count {
        self.count
    }
    fn buffer_datatype(&self) -> DatatypeRef {
        self.dt.clone()
    }
}
// SAFETY: as above; the constructor's contract covers the validity of written values.
unsafe impl BufferMut for MutView<'_> {
    fn buffer_pointer_mut(&mut self) -> *mut u8 {
        self.ptr
    }
}

/// Support for `#[derive(Equivalence)]`; not a public API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    /// Build, commit and return the struct datatype of a derived type: one block of one
    /// element per field at its offset, resized to `size` bytes.
    pub fn build_struct(name: &str, size: usize, fields: &[(usize, DatatypeRef)]) -> DatatypeRef {
        let blocklens = vec![1 as Count; fields.len()];
        let displs: Vec<Address> = fields.iter().map(|(o, _)| *o as Address).collect();
        let types: Vec<TypeRef> = fields.iter().map(|(_, t)| t.0.clone()).collect();
        let s = Datatype::structure(&blocklens, &displs, &types)
            .unwrap_or_else(|e| panic!("derive(Equivalence) for {name}: {e}"));
        let s = Arc::new(s);
        let r = Datatype::resized(&s, 0, size as Address)
            .unwrap_or_else(|e| panic!("derive(Equivalence) for {name}: {e}"));
        commit(r)
    }

    /// The datatype of `T`, built once by `make` and cached by `TypeId`.
    pub fn cached<T: 'static>(make: impl FnOnce() -> DatatypeRef) -> DatatypeRef {
        static CACHE: OnceLock<RwLock<HashMap<TypeId, DatatypeRef>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        let id = TypeId::of::<T>();
        if let Some(d) = cache.read().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return d.clone();
        }
        // Built outside the lock: `make` may ask for the datatypes of field types.
        let d = make();
        cache
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_insert(d)
            .clone()
    }
}
