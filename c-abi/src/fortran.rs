//! The Fortran binding's conventions at run time, for the generated `mpi_x_` entry points
//! (`build/fortran.rs` writes them; none is written by hand): the sentinels a Fortran
//! program passes by address (MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS(ES)_IGNORE,
//! MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY), blank-padded strings with hidden lengths, 1-based
//! indices, the predefined attribute keys of Fortran, and the `ierror` argument.
//!
//! The sentinels live in MPICH's common blocks (`/MPIPRIV1/ MPI_BOTTOM, MPI_IN_PLACE,
//! MPI_STATUS_IGNORE`, `/MPIPRIV2/ MPI_STATUSES_IGNORE, MPI_ERRCODES_IGNORE`, `/MPIFCMB5/
//! MPI_UNWEIGHTED`, `/MPIFCMB9/ MPI_WEIGHTS_EMPTY`), which our `mpif.h` and modules declare
//! too, so that programs built with MPICH's headers pass the same addresses. A Fortran
//! program defines the blocks itself; the library defines them as well (so that the
//! linker exports the program's copy) and asks the dynamic linker for the copy that wins
//! (`dlsym(RTLD_DEFAULT)`): the program's.
//!
//! Handles need no conversion: Fortran INTEGER handles are MPICH's C handle values. A
//! LOGICAL needs none either with gfortran (`.TRUE.` is 1, `.FALSE.` 0, as the C side
//! writes them).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use crate::ffi::{
    MPI_Aint, MPI_Fint, MPI_Grequest_cancel_function, MPI_Grequest_free_function,
    MPI_Grequest_query_function, MPI_Status, MPI_SUCCESS,
};

/// `/MPIPRIV1/`: MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE(MPI_STATUS_SIZE).
#[repr(C)]
pub struct Priv1 {
    bottom: MPI_Fint,
    in_place: MPI_Fint,
    status_ignore: [MPI_Fint; 5],
}
/// `/MPIPRIV2/`: MPI_STATUSES_IGNORE(MPI_STATUS_SIZE, 1), MPI_ERRCODES_IGNORE(1).
#[repr(C)]
pub struct Priv2 {
    statuses_ignore: [MPI_Fint; 5],
    errcodes_ignore: [MPI_Fint; 1],
}
/// `/MPIPRIVC/`: MPI_ARGVS_NULL(1,1), MPI_ARGV_NULL(1) (CHARACTER*1).
#[repr(C)]
pub struct PrivC {
    argvs_null: [u8; 1],
    argv_null: [u8; 1],
}

// The library's definitions of the common blocks (the program's copy takes precedence;
// see the module doc). Written only by Fortran code, never by the library.
#[no_mangle]
pub static mut mpipriv1_: Priv1 = Priv1 {
    bottom: 0,
    in_place: 0,
    status_ignore: [0; 5],
};
#[no_mangle]
pub static mut mpipriv2_: Priv2 = Priv2 {
    statuses_ignore: [0; 5],
    errcodes_ignore: [0],
};
#[no_mangle]
pub static mut mpiprivc_: PrivC = PrivC {
    argvs_null: [0],
    argv_null: [0],
};
/// `/MPIPRIVBA/`: MPI_BUFFER_AUTOMATIC (MPI 4.1; a block of Tsunagi's own).
#[no_mangle]
pub static mut mpiprivba_: MPI_Fint = 0;
#[no_mangle]
pub static mut mpifcmb5_: MPI_Fint = 0;
#[no_mangle]
pub static mut mpifcmb9_: MPI_Fint = 0;

/// The addresses of the program's sentinels (0 when it has none).
struct Sentinels {
    bottom: usize,
    in_place: usize,
    status_ignore: usize,
    statuses_ignore: usize,
    unweighted: usize,
    weights_empty: usize,
    buffer_automatic: usize,
    /// MPICH's mpi_f08 sentinels (bind(C) variables; a program's copy-relocated copy).
    f08_bottom: usize,
    f08_in_place: usize,
    f08_status_ignore: usize,
    f08_statuses_ignore: usize,
}

fn lookup(name: &CStr) -> usize {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

fn sentinels() -> &'static Sentinels {
    static S: OnceLock<Sentinels> = OnceLock::new();
    S.get_or_init(|| {
        let p1 = lookup(c"mpipriv1_");
        let p2 = lookup(c"mpipriv2_");
        let at = |base: usize, off: usize| if base == 0 { 0 } else { base + off };
        let s = Sentinels {
            bottom: at(p1, 0),
            in_place: at(p1, 4),
            status_ignore: at(p1, 8),
            statuses_ignore: at(p2, 0),
            unweighted: lookup(c"mpifcmb5_"),
            weights_empty: lookup(c"mpifcmb9_"),
            buffer_automatic: lookup(c"mpiprivba_"),
            f08_bottom: lookup(c"MPIR_F08_MPI_BOTTOM"),
            f08_in_place: lookup(c"MPIR_F08_MPI_IN_PLACE"),
            f08_status_ignore: lookup(c"MPIR_F08_MPI_STATUS_IGNORE_OBJ"),
            f08_statuses_ignore: lookup(c"MPIR_F08_MPI_STATUSES_IGNORE_OBJ"),
        };
        // MPICH's mpi.h declares these writable and MPICH's Fortran layer points them at
        // its common block; do the same, for C code that converts Fortran statuses.
        // SAFETY: written once, here, under the OnceLock, before any Fortran call reads it.
        unsafe {
            if s.status_ignore != 0 {
                crate::data::MPI_F_STATUS_IGNORE = s.status_ignore as *mut c_int;
            }
            if s.statuses_ignore != 0 {
                crate::data::MPI_F_STATUSES_IGNORE = s.statuses_ignore as *mut c_int;
            }
        }
        s
    })
}

/// A choice buffer: MPI_BOTTOM becomes NULL, MPI_IN_PLACE `(void *)-1` and
/// MPI_BUFFER_AUTOMATIC `(void *)2`, as in C.
#[inline]
pub(crate) fn buf(p: *mut c_void) -> *mut c_void {
    let s = sentinels();
    let a = p as usize;
    if a != 0 && (a == s.in_place || a == s.f08_in_place) {
        usize::MAX as *mut c_void
    } else if a != 0 && (a == s.bottom || a == s.f08_bottom) {
        std::ptr::null_mut()
    } else if a != 0 && a == s.buffer_automatic {
        std::ptr::without_provenance_mut(crate::imp::BUFFER_AUTOMATIC)
    } else {
        p
    }
}

/// A status: MPI_STATUS_IGNORE becomes C's. The layout is the same (MPI_STATUS_SIZE 5,
/// MPI_SOURCE, MPI_TAG, MPI_ERROR at 3, 4, 5), so the array is the C struct.
#[inline]
pub(crate) fn status(p: *mut MPI_Status) -> *mut MPI_Status {
    let a = p as usize;
    let s = sentinels();
    if a != 0
        && (a == s.status_ignore
            || a == s.statuses_ignore
            || a == s.f08_status_ignore
            || a == s.f08_statuses_ignore)
    {
        // C's MPI_STATUS_IGNORE is `(MPI_Status *)1`.
        std::ptr::without_provenance_mut(1)
    } else {
        p
    }
}

/// One dimension of a gfortran array descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
struct GfcDim {
    stride: isize,
    lower_bound: isize,
    upper_bound: isize,
}

/// The head of gfortran's array descriptor (libgfortran's GFC_ARRAY_DESCRIPTOR, gfortran
/// 8 and later), as gfortran passes an assumed-rank dummy of a non-bind(C) procedure:
/// MPICH's mpi_f08 module hands its choice buffers to `mpi_x_f08ts_` this way. `rank`
/// dimensions follow it.
#[repr(C)]
pub(crate) struct GfcDescriptor {
    base_addr: *mut c_void,
    offset: usize,
    elem_len: usize,
    version: c_int,
    rank: i8,
    type_: i8,
    attribute: i16,
    span: isize,
}

/// The address of the data a descriptor describes, if it is contiguous (MPI then sees
/// the same bytes as through `mpi_x_`); `None` for a strided section.
///
/// # Safety
/// `d` is NULL or a gfortran descriptor followed by its `rank` dimensions.
pub(crate) unsafe fn desc_buf(d: *const GfcDescriptor) -> Option<*mut c_void> {
    if d.is_null() {
        return Some(std::ptr::null_mut());
    }
    // SAFETY: a valid descriptor per the contract.
    let head = unsafe { &*d };
    let rank = head.rank.max(0) as usize;
    if rank > 0 && head.span != head.elem_len as isize {
        return None;
    }
    // SAFETY: the dimensions follow the head.
    let dims = unsafe { d.add(1) as *const GfcDim };
    let mut expected = 1isize;
    for i in 0..rank {
        // SAFETY: `rank` dimensions follow the head.
        let dim = unsafe { dims.add(i).read() };
        let extent = (dim.upper_bound - dim.lower_bound + 1).max(0);
        if extent > 1 && dim.stride != expected {
            return None;
        }
        expected = expected.saturating_mul(extent);
    }
    Some(head.base_addr)
}

/// The error for a strided array section passed to an mpi_f08 call built with MPICH's
/// module (MPICH makes a datatype for it; Tsunagi does not yet).
#[cold]
pub(crate) fn noncontiguous(call: &str, arg: &str) -> c_int {
    let e = tsunagi_core::MpiError::new(
        tsunagi_core::ErrorClass::Buffer,
        format!("{call}: argument {arg} is a non-contiguous array section (not supported by Tsunagi with MPICH's mpi_f08 module; pass a contiguous array)"),
    );
    crate::entry::raise(call, None, e)
}

/// An array of statuses: MPI_STATUSES_IGNORE becomes C's.
#[inline]
pub(crate) fn statuses(p: *mut MPI_Status) -> *mut MPI_Status {
    status(p)
}

/// Graph weights: MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY become C's.
pub(crate) fn weights<T>(p: *mut T) -> *mut T {
    let s = sentinels();
    let a = p as usize;
    if a != 0 && a == s.unweighted {
        crate::data::MPI_UNWEIGHTED.0 as *mut T
    } else if a != 0 && a == s.weights_empty {
        crate::data::MPI_WEIGHTS_EMPTY.0 as *mut T
    } else {
        p
    }
}

/// Store the return code into `ierror` (mpi_f08 passes its own when absent).
#[inline]
pub(crate) unsafe fn set_ierror(ierror: *mut MPI_Fint, rc: c_int) {
    if !ierror.is_null() {
        // SAFETY: non-NULL `ierror` is the caller's INTEGER.
        unsafe { *ierror = rc };
    }
}

/// A Fortran string (blank padded, `len` bytes) as a C string: trailing blanks dropped,
/// cut at a NUL if the program put one.
pub(crate) unsafe fn str_in(p: *const c_char, len: usize) -> CString {
    let bytes: &[u8] = if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: Fortran passes `len` valid bytes.
        unsafe { std::slice::from_raw_parts(p as *const u8, len) }
    };
    let bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
    let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    CString::new(&bytes[..end]).expect("no NUL inside")
}

/// The addresses of the program's MPI_ARGV_NULL, MPI_ARGVS_NULL and MPI_ERRCODES_IGNORE
/// (`/MPIPRIVC/`, `/MPIPRIV2/`; 0 when it has none).
fn spawn_sentinels() -> (usize, usize, usize) {
    static S: OnceLock<(usize, usize, usize)> = OnceLock::new();
    *S.get_or_init(|| {
        let c = lookup(c"mpiprivc_");
        let p2 = lookup(c"mpipriv2_");
        let at = |base: usize, off: usize| if base == 0 { 0 } else { base + off };
        (at(c, 1), at(c, 0), at(p2, 20))
    })
}

/// MPI_ERRCODES_IGNORE becomes C's (NULL).
pub(crate) fn errcodes(p: *mut c_int) -> *mut c_int {
    let a = p as usize;
    if a != 0 && a == spawn_sentinels().2 {
        std::ptr::null_mut()
    } else {
        p
    }
}

/// Fortran's string arrays (MPI_Comm_spawn's argv, MPI_Comm_spawn_multiple's commands
/// and argvs) as C's NULL-terminated `char *` arrays: the strings and the pointers into
/// them, kept alive for the call.
pub(crate) struct CStrings {
    strings: Vec<CString>,
    ptrs: Vec<*mut c_char>,
    /// MPI_ARGV_NULL: C's NULL.
    null: bool,
}

impl CStrings {
    fn new(strings: Vec<CString>, null: bool) -> CStrings {
        let mut ptrs: Vec<*mut c_char> =
            strings.iter().map(|s| s.as_ptr() as *mut c_char).collect();
        ptrs.push(std::ptr::null_mut());
        CStrings {
            strings,
            ptrs,
            null,
        }
    }

    pub(crate) fn as_ptr(&mut self) -> *mut *mut c_char {
        if self.null {
            return std::ptr::null_mut();
        }
        debug_assert_eq!(self.ptrs.len(), self.strings.len() + 1);
        self.ptrs.as_mut_ptr()
    }
}

/// Whether a Fortran string of `len` bytes at `p` is blank (argv's end).
///
/// # Safety
/// `p` has `len` readable bytes.
unsafe fn blank(p: *const c_char, len: usize) -> bool {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const u8, len) }
        .iter()
        .all(|&b| b == b' ' || b == 0)
}

/// Entries of `len` bytes from `p` every `step` entries, up to the first blank one: one
/// argv (MPI 4.1 §11.8.2: "terminated by a blank string").
///
/// # Safety
/// The entries up to the blank one are readable.
unsafe fn argv_entries(p: *const c_char, len: usize, step: usize) -> Vec<CString> {
    let mut v = Vec::new();
    if len == 0 {
        return v;
    }
    loop {
        // SAFETY: entry k lies before the terminating blank one (contract).
        let e = unsafe { p.add(v.len() * step * len) };
        // SAFETY: as above.
        if unsafe { blank(e, len) } {
            return v;
        }
        // SAFETY: as above.
        v.push(unsafe { str_in(e, len) });
    }
}

/// MPI_Comm_spawn's argv: CHARACTER*(*) argv(*), ended by a blank entry, or
/// MPI_ARGV_NULL.
///
/// # Safety
/// `p` is MPI_ARGV_NULL or such an array of `len`-byte entries.
pub(crate) unsafe fn argv_in(p: *const c_char, len: usize) -> CStrings {
    let a = p as usize;
    if p.is_null() || a == spawn_sentinels().0 {
        return CStrings::new(Vec::new(), true);
    }
    // SAFETY: the caller's contract.
    CStrings::new(unsafe { argv_entries(p, len, 1) }, false)
}

/// MPI_Comm_spawn_multiple's commands: CHARACTER*(*) array_of_commands(count).
///
/// # Safety
/// `p` has `count` entries of `len` bytes.
pub(crate) unsafe fn strs_in(p: *const c_char, count: c_int, len: usize) -> CStrings {
    let v = (0..count.max(0) as usize)
        // SAFETY: entry i of `count` (the caller's contract).
        .map(|i| unsafe { str_in(p.add(i * len), len) })
        .collect();
    CStrings::new(v, false)
}

/// MPI_Comm_spawn_multiple's argvs: CHARACTER*(*) array_of_argv(count, *), column i the
/// arguments of command i ended by a blank entry, or MPI_ARGVS_NULL.
pub(crate) struct CArgvs {
    argvs: Vec<CStrings>,
    ptrs: Vec<*mut *mut c_char>,
}

impl CArgvs {
    pub(crate) fn as_ptr(&mut self) -> *mut *mut *mut c_char {
        if self.argvs.is_empty() {
            return std::ptr::null_mut();
        }
        self.ptrs = self.argvs.iter_mut().map(CStrings::as_ptr).collect();
        self.ptrs.as_mut_ptr()
    }
}

/// # Safety
/// `p` is MPI_ARGVS_NULL or a `count` x n array of `len`-byte entries, each row ended by
/// a blank entry.
pub(crate) unsafe fn argvs_in(p: *const c_char, count: c_int, len: usize) -> CArgvs {
    let a = p as usize;
    if p.is_null() || a == spawn_sentinels().1 || count <= 0 {
        return CArgvs {
            argvs: Vec::new(),
            ptrs: Vec::new(),
        };
    }
    let n = count as usize;
    let argvs = (0..n)
        // SAFETY: element (i, j) is at ((j - 1) * count + (i - 1)) * len (column major).
        .map(|i| CStrings::new(unsafe { argv_entries(p.add(i * len), len, n) }, false))
        .collect();
    CArgvs {
        argvs,
        ptrs: Vec::new(),
    }
}

/// A C output string buffer large enough for any MPI string, copied back blank padded.
pub(crate) struct StrOut(Vec<u8>);

impl StrOut {
    pub(crate) fn new(len: usize) -> StrOut {
        StrOut(vec![
            0;
            len.max(crate::ffi::MPI_MAX_LIBRARY_VERSION_STRING) + 1
        ])
    }
    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr() as *mut c_char
    }
    /// Copy into the Fortran string (`len` bytes), padded with blanks.
    pub(crate) unsafe fn copy_to(&self, p: *mut c_char, len: usize) {
        if p.is_null() {
            return;
        }
        let n = self
            .0
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.0.len())
            .min(len);
        // SAFETY: Fortran passes `len` writable bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) };
        dst[..n].copy_from_slice(&self.0[..n]);
        dst[n..].fill(b' ');
    }
}

/// Indices returned by the completion calls are 1-based in Fortran.
pub(crate) unsafe fn one_based(p: *mut c_int, n: usize) {
    for i in 0..n {
        // SAFETY: the caller's array has `n` elements (the C call filled them).
        unsafe {
            let v = p.add(i);
            if *v >= 0 {
                *v += 1;
            }
        }
    }
}

/// An address-sized value stored into a default INTEGER (MPI-1 calls): truncated as
/// MPICH does.
pub(crate) fn narrow(v: MPI_Aint) -> MPI_Fint {
    v as MPI_Fint
}

/// An INTEGER array widened to addresses (MPI-1 calls).
pub(crate) unsafe fn widen(p: *const MPI_Fint, n: usize) -> Vec<MPI_Aint> {
    if p.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's array has `n` elements.
    unsafe { std::slice::from_raw_parts(p, n) }
        .iter()
        .map(|&v| MPI_Aint::from(v))
        .collect()
}

/// Fortran's predefined attribute keys are C's plus one (MPICH: MPI_TAG_UB is
/// 0x64400001 in C and 0x64400002 in Fortran).
fn is_fortran_predefined(k: c_int) -> bool {
    let u = k as u32;
    (u & 0xffff_ff00 == 0x6440_0000 || u & 0xffff_ff00 == 0x6600_0000)
        && u & 1 == 0
        && u & 0xff != 0
}

/// The C key of a Fortran attribute key.
pub(crate) fn attr_key(k: c_int) -> c_int {
    if is_fortran_predefined(k) {
        k - 1
    } else {
        k
    }
}

/// The attribute value a Fortran program sets: the integer itself (`W` is its width).
pub(crate) unsafe fn attr_in<W: Copy + Into<i64>>(p: *mut c_void) -> *mut c_void {
    // SAFETY: Fortran passes its INTEGER of this width.
    let v: i64 = unsafe { *(p as *const W) }.into();
    v as isize as *mut c_void
}

/// Store an attribute value into the program's INTEGER of width `W`: the stored value,
/// or for predefined keys the integer the C side points to.
pub(crate) unsafe fn attr_out<W: TryFrom<i64> + Default>(
    key: c_int,
    v: *mut c_void,
    p: *mut c_void,
) {
    let v: i64 = if is_fortran_predefined(key) {
        // SAFETY: predefined attributes are pointers to the library's ints.
        unsafe { i64::from(*(v as *const c_int)) }
    } else {
        v as isize as i64
    };
    // SAFETY: Fortran passes its INTEGER of this width.
    unsafe { *(p as *mut W) = W::try_from(v).unwrap_or_default() };
}

// ----- predefined callbacks (Fortran passes the address of these EXTERNALs) -----
// The library calls them with the C convention, which they implement.

macro_rules! null_copy {
    ($($name:ident),*) => {$(
        /// A predefined Fortran copy callback: the attribute is not copied.
        ///
        /// # Safety
        /// Called by the library with a valid `flag`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            _old: c_int, _key: c_int, _extra: *mut c_void, _vin: *mut c_void,
            _vout: *mut c_void, flag: *mut c_int,
        ) -> c_int {
            // SAFETY: the library passes a valid flag.
            unsafe { *flag = 0 };
            0
        }
    )*};
}
null_copy!(
    mpi_null_copy_fn_,
    mpi_comm_null_copy_fn_,
    mpi_type_null_copy_fn_,
    mpi_win_null_copy_fn_
);

macro_rules! null_delete {
    ($($name:ident),*) => {$(
        /// A predefined Fortran delete callback: nothing to do.
        #[no_mangle]
        pub extern "C" fn $name(_h: c_int, _key: c_int, _v: *mut c_void, _extra: *mut c_void) -> c_int {
            0
        }
    )*};
}
null_delete!(
    mpi_null_delete_fn_,
    mpi_comm_null_delete_fn_,
    mpi_type_null_delete_fn_,
    mpi_win_null_delete_fn_
);

macro_rules! dup_fn {
    ($($name:ident),*) => {$(
        /// A predefined Fortran copy callback: the attribute value is copied.
        ///
        /// # Safety
        /// Called by the library with valid `vout` and `flag`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            old: c_int, key: c_int, extra: *mut c_void, vin: *mut c_void,
            vout: *mut c_void, flag: *mut c_int,
        ) -> c_int {
            // SAFETY: forwarded with the library's own arguments.
            unsafe { crate::imp::MPIR_Dup_fn(old, key, extra, vin, vout, flag) }
        }
    )*};
}
dup_fn!(
    mpi_dup_fn_,
    mpi_comm_dup_fn_,
    mpi_type_dup_fn_,
    mpi_win_dup_fn_
);

/// The generated entry points.
#[allow(clippy::missing_safety_doc, clippy::too_many_arguments, unused_unsafe)]
mod generated {
    use super as f;
    use crate::ffi::*;
    #[allow(unused_imports)]
    use std::ffi::{c_char, c_int, c_void};

    include!(concat!(env!("OUT_DIR"), "/fortran_points.rs"));
}

pub use generated::FORTRAN_NAMES;

// ----- attribute callbacks written in Fortran -----
//
// The library calls copy and delete callbacks with the C convention (values, a pointer
// for the new value, the return code as result). A Fortran callback takes everything by
// reference, attribute values and extra state as INTEGERs, and returns its code in a
// last `ierror`. The Fortran entry points of the keyval constructors hand the library a
// trampoline instead and record the Fortran procedures under the new keyval; the
// trampoline, given the keyval, calls them.

/// The INTEGER kind of attribute values: MPI-1's MPI_KEYVAL_CREATE uses default
/// INTEGERs, the MPI-2 calls INTEGER(KIND=MPI_ADDRESS_KIND).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum AttrWidth {
    Narrow,
    Wide,
}

type CopyFn = crate::ffi::MPI_Comm_copy_attr_function;
type DeleteFn = crate::ffi::MPI_Comm_delete_attr_function;

#[derive(Clone, Copy)]
struct FortranCallbacks {
    copy: usize,
    delete: usize,
}

fn fortran_keyvals() -> &'static std::sync::Mutex<std::collections::HashMap<c_int, FortranCallbacks>>
{
    static K: OnceLock<std::sync::Mutex<std::collections::HashMap<c_int, FortranCallbacks>>> =
        OnceLock::new();
    K.get_or_init(Default::default)
}

/// Whether `f` is NULL or one of the predefined callbacks above (C convention already).
fn predefined(f: usize) -> bool {
    let ours: [usize; 12] = [
        mpi_null_copy_fn_ as *const () as usize,
        mpi_comm_null_copy_fn_ as *const () as usize,
        mpi_type_null_copy_fn_ as *const () as usize,
        mpi_win_null_copy_fn_ as *const () as usize,
        mpi_null_delete_fn_ as *const () as usize,
        mpi_comm_null_delete_fn_ as *const () as usize,
        mpi_type_null_delete_fn_ as *const () as usize,
        mpi_win_null_delete_fn_ as *const () as usize,
        mpi_dup_fn_ as *const () as usize,
        mpi_comm_dup_fn_ as *const () as usize,
        mpi_type_dup_fn_ as *const () as usize,
        mpi_win_dup_fn_ as *const () as usize,
    ];
    f == 0 || ours.contains(&f)
}

/// The copy callback to give the library for a Fortran `f`.
pub(crate) fn copy_trampoline(f: CopyFn, width: AttrWidth) -> CopyFn {
    let addr = f.map_or(0, |f| f as usize);
    if predefined(addr) {
        return f;
    }
    Some(match width {
        AttrWidth::Wide => copy_wide,
        AttrWidth::Narrow => copy_narrow,
    })
}

/// The delete callback to give the library for a Fortran `f`.
pub(crate) fn delete_trampoline(f: DeleteFn, width: AttrWidth) -> DeleteFn {
    let addr = f.map_or(0, |f| f as usize);
    if predefined(addr) {
        return f;
    }
    Some(match width {
        AttrWidth::Wide => delete_wide,
        AttrWidth::Narrow => delete_narrow,
    })
}

/// Record the Fortran procedures of a new keyval (the trampoline given to the library
/// knows the INTEGER width).
pub(crate) fn register_keyval(key: c_int, copy: CopyFn, delete: DeleteFn) {
    let callbacks = FortranCallbacks {
        copy: copy.map_or(0, |f| f as usize),
        delete: delete.map_or(0, |f| f as usize),
    };
    crate::handles::lock(fortran_keyvals()).insert(key, callbacks);
}

fn callbacks(key: c_int) -> Option<FortranCallbacks> {
    crate::handles::lock(fortran_keyvals()).get(&key).copied()
}

/// A Fortran copy procedure: (OLDOBJ, KEYVAL, EXTRA_STATE, ATTRIBUTE_VAL_IN,
/// ATTRIBUTE_VAL_OUT, FLAG, IERROR), all by reference.
type FortranCopy<W> = unsafe extern "C" fn(
    *const c_int,
    *const c_int,
    *const W,
    *const W,
    *mut W,
    *mut c_int,
    *mut c_int,
);
/// A Fortran delete procedure: (OBJ, KEYVAL, ATTRIBUTE_VAL, EXTRA_STATE, IERROR).
type FortranDelete<W> =
    unsafe extern "C" fn(*const c_int, *const c_int, *const W, *const W, *mut c_int);

unsafe fn copy_with<W: Copy + Default + TryFrom<isize> + Into<i64>>(
    old: c_int,
    key: c_int,
    extra: *mut c_void,
    vin: *mut c_void,
    vout: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    let Some(cb) = callbacks(key).filter(|c| c.copy != 0) else {
        // SAFETY: the library passes a valid flag.
        unsafe { *flag = 0 };
        return 0;
    };
    // SAFETY: `cb.copy` is the address of the Fortran procedure registered for this
    // keyval with this signature (the MPI standard's Fortran copy callback).
    let f: FortranCopy<W> = unsafe { std::mem::transmute::<usize, FortranCopy<W>>(cb.copy) };
    let extra = W::try_from(extra as isize).unwrap_or_default();
    let vin = W::try_from(vin as isize).unwrap_or_default();
    let mut out = W::default();
    let mut ierr: c_int = 0;
    // SAFETY: every argument is a valid reference for the call; `flag` is the library's.
    unsafe { f(&old, &key, &extra, &vin, &mut out, flag, &mut ierr) };
    let out: i64 = out.into();
    // SAFETY: the library passes the address of a `void *` for the new value.
    unsafe { *(vout as *mut *mut c_void) = out as isize as *mut c_void };
    ierr
}

unsafe fn delete_with<W: Copy + Default + TryFrom<isize>>(
    obj: c_int,
    key: c_int,
    val: *mut c_void,
    extra: *mut c_void,
) -> c_int {
    let Some(cb) = callbacks(key).filter(|c| c.delete != 0) else {
        return 0;
    };
    // SAFETY: as in `copy_with`, for the delete procedure.
    let f: FortranDelete<W> = unsafe { std::mem::transmute::<usize, FortranDelete<W>>(cb.delete) };
    let val = W::try_from(val as isize).unwrap_or_default();
    let extra = W::try_from(extra as isize).unwrap_or_default();
    let mut ierr: c_int = 0;
    // SAFETY: every argument is a valid reference for the call.
    unsafe { f(&obj, &key, &val, &extra, &mut ierr) };
    ierr
}

unsafe extern "C" fn copy_wide(
    old: c_int,
    key: c_int,
    extra: *mut c_void,
    vin: *mut c_void,
    vout: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: forwarded from the library.
    unsafe { copy_with::<i64>(old, key, extra, vin, vout, flag) }
}

unsafe extern "C" fn copy_narrow(
    old: c_int,
    key: c_int,
    extra: *mut c_void,
    vin: *mut c_void,
    vout: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: forwarded from the library.
    unsafe { copy_with::<i32>(old, key, extra, vin, vout, flag) }
}

unsafe extern "C" fn delete_wide(
    obj: c_int,
    key: c_int,
    val: *mut c_void,
    extra: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from the library.
    unsafe { delete_with::<i64>(obj, key, val, extra) }
}

unsafe extern "C" fn delete_narrow(
    obj: c_int,
    key: c_int,
    val: *mut c_void,
    extra: *mut c_void,
) -> c_int {
    // SAFETY: forwarded from the library.
    unsafe { delete_with::<i32>(obj, key, val, extra) }
}

// ----- MPICH's mpi_f08 module procedures that programs call directly -----
//
// A program built with MPICH's `use mpi_f08` calls the handle comparison operators of
// MPICH's mpi_f08_types module as external symbols (`==` on TYPE(MPI_Comm) is
// `__mpi_f08_types_MOD_mpi_comm_eq`). Handles are one INTEGER, passed by reference; the
// result is a default LOGICAL.

macro_rules! f08_handle_ops {
    ($($eq:ident $neq:ident $f08_eq_f:ident $f08_neq_f:ident $f_eq_f08:ident $f_neq_f08:ident;)*) => {$(
        /// MPICH's mpi_f08 `==` on two handles.
        ///
        /// # Safety
        /// Called by Fortran with two valid references.
        #[no_mangle]
        pub unsafe extern "C" fn $eq(a: *const c_int, b: *const c_int) -> c_int {
            // SAFETY: Fortran passes valid references.
            c_int::from(unsafe { *a == *b })
        }
        /// MPICH's mpi_f08 `/=` on two handles.
        ///
        /// # Safety
        /// As above.
        #[no_mangle]
        pub unsafe extern "C" fn $neq(a: *const c_int, b: *const c_int) -> c_int {
            // SAFETY: Fortran passes valid references.
            c_int::from(unsafe { *a != *b })
        }
        /// MPICH's mpi_f08 `==` of a handle and an INTEGER handle.
        ///
        /// # Safety
        /// As above.
        #[no_mangle]
        pub unsafe extern "C" fn $f08_eq_f(a: *const c_int, b: *const c_int) -> c_int {
            // SAFETY: Fortran passes valid references.
            c_int::from(unsafe { *a == *b })
        }
        /// MPICH's mpi_f08 `/=` of a handle and an INTEGER handle.
        ///
        /// # Safety
        /// As above.
        #[no_mangle]
        pub unsafe extern "C" fn $f08_neq_f(a: *const c_int, b: *const c_int) -> c_int {
            // SAFETY: Fortran passes valid references.
            c_int::from(unsafe { *a != *b })
        }
        /// MPICH's mpi_f08 `==` of an INTEGER handle and a handle.
        ///
        /// # Safety
        /// As above.
        #[no_mangle]
        pub unsafe extern "C" fn $f_eq_f08(a: *const c_int, b: *const c_int) -> c_int {
            // SAFETY: Fortran passes valid references.
            c_int::from(unsafe { *a == *b })
        }
        /// MPICH's mpi_f08 `/=` of an INTEGER handle and a handle.
        ///
        /// # Safety
        /// As above.
        #[no_mangle]
        pub unsafe extern "C" fn $f_neq_f08(a: *const c_int, b: *const c_int) -> c_int {
            // SAFETY: Fortran passes valid references.
            c_int::from(unsafe { *a != *b })
        }
    )*};
}

f08_handle_ops! {
    __mpi_f08_types_MOD_mpi_comm_eq __mpi_f08_types_MOD_mpi_comm_neq __mpi_f08_types_MOD_mpi_comm_f08_eq_f __mpi_f08_types_MOD_mpi_comm_f08_neq_f __mpi_f08_types_MOD_mpi_comm_f_eq_f08 __mpi_f08_types_MOD_mpi_comm_f_neq_f08;
    __mpi_f08_types_MOD_mpi_datatype_eq __mpi_f08_types_MOD_mpi_datatype_neq __mpi_f08_types_MOD_mpi_datatype_f08_eq_f __mpi_f08_types_MOD_mpi_datatype_f08_neq_f __mpi_f08_types_MOD_mpi_datatype_f_eq_f08 __mpi_f08_types_MOD_mpi_datatype_f_neq_f08;
    __mpi_f08_types_MOD_mpi_errhandler_eq __mpi_f08_types_MOD_mpi_errhandler_neq __mpi_f08_types_MOD_mpi_errhandler_f08_eq_f __mpi_f08_types_MOD_mpi_errhandler_f08_neq_f __mpi_f08_types_MOD_mpi_errhandler_f_eq_f08 __mpi_f08_types_MOD_mpi_errhandler_f_neq_f08;
    __mpi_f08_types_MOD_mpi_file_eq __mpi_f08_types_MOD_mpi_file_neq __mpi_f08_types_MOD_mpi_file_f08_eq_f __mpi_f08_types_MOD_mpi_file_f08_neq_f __mpi_f08_types_MOD_mpi_file_f_eq_f08 __mpi_f08_types_MOD_mpi_file_f_neq_f08;
    __mpi_f08_types_MOD_mpi_group_eq __mpi_f08_types_MOD_mpi_group_neq __mpi_f08_types_MOD_mpi_group_f08_eq_f __mpi_f08_types_MOD_mpi_group_f08_neq_f __mpi_f08_types_MOD_mpi_group_f_eq_f08 __mpi_f08_types_MOD_mpi_group_f_neq_f08;
    __mpi_f08_types_MOD_mpi_info_eq __mpi_f08_types_MOD_mpi_info_neq __mpi_f08_types_MOD_mpi_info_f08_eq_f __mpi_f08_types_MOD_mpi_info_f08_neq_f __mpi_f08_types_MOD_mpi_info_f_eq_f08 __mpi_f08_types_MOD_mpi_info_f_neq_f08;
    __mpi_f08_types_MOD_mpi_message_eq __mpi_f08_types_MOD_mpi_message_neq __mpi_f08_types_MOD_mpi_message_f08_eq_f __mpi_f08_types_MOD_mpi_message_f08_neq_f __mpi_f08_types_MOD_mpi_message_f_eq_f08 __mpi_f08_types_MOD_mpi_message_f_neq_f08;
    __mpi_f08_types_MOD_mpi_op_eq __mpi_f08_types_MOD_mpi_op_neq __mpi_f08_types_MOD_mpi_op_f08_eq_f __mpi_f08_types_MOD_mpi_op_f08_neq_f __mpi_f08_types_MOD_mpi_op_f_eq_f08 __mpi_f08_types_MOD_mpi_op_f_neq_f08;
    __mpi_f08_types_MOD_mpi_request_eq __mpi_f08_types_MOD_mpi_request_neq __mpi_f08_types_MOD_mpi_request_f08_eq_f __mpi_f08_types_MOD_mpi_request_f08_neq_f __mpi_f08_types_MOD_mpi_request_f_eq_f08 __mpi_f08_types_MOD_mpi_request_f_neq_f08;
    __mpi_f08_types_MOD_mpi_win_eq __mpi_f08_types_MOD_mpi_win_neq __mpi_f08_types_MOD_mpi_win_f08_eq_f __mpi_f08_types_MOD_mpi_win_f08_neq_f __mpi_f08_types_MOD_mpi_win_f_eq_f08 __mpi_f08_types_MOD_mpi_win_f_neq_f08;
}

/// A generalized request started from Fortran: its procedures and the address of its
/// extra state (an INTEGER(KIND=MPI_ADDRESS_KIND) the procedures get by reference).
struct FortranGrequest {
    query: usize,
    free: usize,
    cancel: usize,
    extra: *mut c_void,
}

type FortranQuery = unsafe extern "C" fn(*mut c_void, *mut MPI_Status, *mut c_int);
type FortranFree = unsafe extern "C" fn(*mut c_void, *mut c_int);
type FortranCancel = unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int);

/// The extra state the library gets for a Fortran MPI_GREQUEST_START: the procedures
/// (called by `GREQ_QUERY`, `GREQ_FREE`, `GREQ_CANCEL`) and the program's extra state.
/// Released by the free trampoline, which the library calls once, last.
pub(crate) fn greq_state(
    query: MPI_Grequest_query_function,
    free: MPI_Grequest_free_function,
    cancel: MPI_Grequest_cancel_function,
    extra: *mut c_void,
) -> *mut c_void {
    Box::into_raw(Box::new(FortranGrequest {
        query: query.map_or(0, |f| f as usize),
        free: free.map_or(0, |f| f as usize),
        cancel: cancel.map_or(0, |f| f as usize),
        extra,
    })) as *mut c_void
}

pub(crate) const GREQ_QUERY: MPI_Grequest_query_function = Some(greq_query);
pub(crate) const GREQ_FREE: MPI_Grequest_free_function = Some(greq_free);
pub(crate) const GREQ_CANCEL: MPI_Grequest_cancel_function = Some(greq_cancel);

unsafe extern "C" fn greq_query(state: *mut c_void, status: *mut MPI_Status) -> c_int {
    // SAFETY: `state` is the record made by `greq_state`, alive until `greq_free`.
    let g = unsafe { &*(state as *const FortranGrequest) };
    let mut ierror: c_int = MPI_SUCCESS;
    if g.query != 0 {
        // SAFETY: the program's Fortran query procedure (extra_state, status, ierror by
        // reference; MPICH's Fortran status is the C status).
        unsafe {
            let f: FortranQuery = std::mem::transmute(g.query);
            f(g.extra, status, &mut ierror);
        }
    }
    ierror
}

unsafe extern "C" fn greq_free(state: *mut c_void) -> c_int {
    // SAFETY: the record made by `greq_state`; the library calls the free function once,
    // after every other callback of the request, so the record can go now.
    let g = unsafe { Box::from_raw(state as *mut FortranGrequest) };
    let mut ierror: c_int = MPI_SUCCESS;
    if g.free != 0 {
        // SAFETY: the program's Fortran free procedure (extra_state, ierror).
        unsafe {
            let f: FortranFree = std::mem::transmute(g.free);
            f(g.extra, &mut ierror);
        }
    }
    ierror
}

unsafe extern "C" fn greq_cancel(state: *mut c_void, complete: c_int) -> c_int {
    // SAFETY: the record made by `greq_state`, alive until `greq_free`.
    let g = unsafe { &*(state as *const FortranGrequest) };
    let mut ierror: c_int = MPI_SUCCESS;
    let mut complete = complete; // a gfortran LOGICAL: 1 true, 0 false
    if g.cancel != 0 {
        // SAFETY: the program's Fortran cancel procedure (extra_state, complete, ierror).
        unsafe {
            let f: FortranCancel = std::mem::transmute(g.cancel);
            f(g.extra, &mut complete, &mut ierror);
        }
    }
    ierror
}
