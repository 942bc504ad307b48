//! Handle tables: MPICH-valued integer handles ↔ core objects, and the argument decoders
//! the generated entry points call (`h::comm`, `h::dtype`, `h::out_mut`, ...).
//!
//! Encoding (MPICH's): bits 31-30 kind (1 builtin, 2 direct, 3 indirect), bits 29-26 the
//! object type, the rest an index. Predefined objects keep MPICH's values; objects made by
//! the program are `kind 2 | type | index` (derived datatypes use kind 3, because MPICH's
//! pair types already occupy the first direct datatype indices).
//!
//! Decoders return errors without the call name; `entry` prefixes it.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::group::Group;
use tsunagi_core::{rt, CommId, ErrHandler, ErrorClass, MpiError, MpiResult, MsgId, ReqId};

use crate::ffi::*;

const KIND_MASK: u32 = 0xfc00_0000;
const INDEX_MASK: u32 = 0x03ff_ffff;
const COMM_DIRECT: u32 = 0x8400_0000;
const GROUP_DIRECT: u32 = 0x8800_0000;
const DTYPE_DERIVED: u32 = 0xcc00_0000;
const ERRH_DIRECT: u32 = 0x9400_0000;
const OP_DIRECT: u32 = 0x9800_0000;
const INFO_DIRECT: u32 = 0x9c00_0000;
const REQ_DIRECT: u32 = 0xac00_0000;
/// Set in a request handle for persistent requests (which stay allocated when complete).
const REQ_PERSISTENT: u32 = 0x0200_0000;
const MSG_INDIRECT: u32 = 0xec00_0000;
const OP_BUILTIN: u32 = 0x5800_0000;

pub(crate) fn err(class: ErrorClass, msg: impl Into<String>) -> MpiError {
    MpiError::new(class, msg)
}

pub(crate) use tsunagi_core::slab::Slab as Table;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn index(h: c_int) -> u32 {
    h as u32 & INDEX_MASK
}

fn kind(h: c_int) -> u32 {
    h as u32 & KIND_MASK
}

/// The error of an exported stub: `what` is the family (the api.in section title).
/// (No `stub` line is left in api.in today; the generator still supports them.)
#[cold]
#[allow(dead_code)]
pub(crate) fn unsupported(what: &str) -> MpiError {
    let what = what.strip_prefix("Not supported: ").unwrap_or(what);
    err(
        ErrorClass::UnsupportedOperation,
        format!("not supported by Tsunagi yet ({what})"),
    )
}

// ----- counts -----

pub(crate) fn check_count(name: &str, v: impl Into<i64>) -> MpiResult<()> {
    let v = v.into();
    if v < 0 {
        return Err(err(ErrorClass::Count, format!("{name} = {v} is negative")));
    }
    Ok(())
}

pub(crate) fn check_nonneg(name: &str, v: impl Into<i64>) -> MpiResult<()> {
    let v = v.into();
    if v < 0 {
        return Err(err(ErrorClass::Arg, format!("{name} = {v} is negative")));
    }
    Ok(())
}

// ----- pointers -----

/// `&mut *p`, or MPI_ERR_ARG if `p` is NULL.
///
/// # Safety
/// `p` is NULL or valid for reads and writes for the call.
pub(crate) unsafe fn out_mut<'a, T>(name: &str, p: *mut T) -> MpiResult<&'a mut T> {
    // SAFETY: non-NULL pointers are valid per the caller's contract.
    unsafe { p.as_mut() }.ok_or_else(|| err(ErrorClass::Arg, format!("argument {name} is NULL")))
}

/// `Some(&mut *p)` unless `p` is NULL.
///
/// # Safety
/// As [`out_mut`].
pub(crate) unsafe fn opt_mut<'a, T>(_name: &str, p: *mut T) -> Option<&'a mut T> {
    // SAFETY: as in out_mut.
    unsafe { p.as_mut() }
}

/// `&*p`, or MPI_ERR_ARG if `p` is NULL.
///
/// # Safety
/// `p` is NULL or valid for reads for the call.
pub(crate) unsafe fn in_ref<'a, T>(name: &str, p: *const T) -> MpiResult<&'a T> {
    // SAFETY: non-NULL pointers are valid per the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| err(ErrorClass::Arg, format!("argument {name} is NULL")))
}

/// `Some(&*p)` unless `p` is NULL.
///
/// # Safety
/// As [`in_ref`].
#[allow(dead_code)]
pub(crate) unsafe fn opt_ref<'a, T>(_name: &str, p: *const T) -> Option<&'a T> {
    // SAFETY: as in in_ref.
    unsafe { p.as_ref() }
}

/// A status to fill in: None for MPI_STATUS_IGNORE (and NULL).
///
/// # Safety
/// `p` is NULL, MPI_STATUS_IGNORE, or valid for writes.
pub(crate) unsafe fn status_out<'a>(p: *mut MPI_Status) -> Option<&'a mut MPI_Status> {
    if p as usize == 1 {
        return None;
    }
    // SAFETY: per the contract, any other non-NULL value is a valid status.
    unsafe { p.as_mut() }
}

/// A status to read: MPI_ERR_ARG for NULL or MPI_STATUS_IGNORE.
///
/// # Safety
/// `p` is NULL, MPI_STATUS_IGNORE, or valid for reads.
pub(crate) unsafe fn status_in<'a>(name: &str, p: *const MPI_Status) -> MpiResult<&'a MPI_Status> {
    if p.is_null() || p as usize == 1 {
        return Err(err(
            ErrorClass::Arg,
            format!("argument {name} is NULL or MPI_STATUS_IGNORE"),
        ));
    }
    // SAFETY: any other value is a valid status per the contract.
    Ok(unsafe { &*p })
}

/// [`cstr`] where NULL is allowed (None).
///
/// # Safety
/// As [`cstr`].
pub(crate) unsafe fn cstr_or_null<'a>(name: &str, p: *const c_char) -> MpiResult<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    unsafe { cstr(name, p) }.map(Some)
}

/// The C string at `p`, as UTF-8 (lossy).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn cstr<'a>(name: &str, p: *const c_char) -> MpiResult<&'a str> {
    if p.is_null() {
        return Err(err(ErrorClass::Arg, format!("argument {name} is NULL")));
    }
    // SAFETY: a NUL-terminated string per the contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| err(ErrorClass::Arg, format!("argument {name} is not UTF-8")))
}

/// The slice of `n` elements at `p` (empty when `n` is 0, whatever `p` is).
///
/// # Safety
/// When `n > 0`, `p` is NULL or valid for reads of `n` elements.
pub(crate) unsafe fn slice<'a, T>(name: &str, p: *const T, n: usize) -> MpiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(ErrorClass::Arg, format!("array {name} is NULL")));
    }
    // SAFETY: valid for n elements per the contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The mutable slice of `n` elements at `p`.
///
/// # Safety
/// When `n > 0`, `p` is NULL or valid for reads and writes of `n` elements.
pub(crate) unsafe fn slice_mut<'a, T>(name: &str, p: *mut T, n: usize) -> MpiResult<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(err(ErrorClass::Arg, format!("array {name} is NULL")));
    }
    // SAFETY: valid for n elements per the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Copy `s` into the C buffer `p` of `cap` bytes, NUL-terminated; returns the length
/// written (without the NUL).
///
/// # Safety
/// `p` is NULL or valid for writes of `cap` bytes.
pub(crate) unsafe fn write_cstr(
    name: &str,
    p: *mut c_char,
    cap: usize,
    s: &str,
) -> MpiResult<usize> {
    if p.is_null() {
        return Err(err(ErrorClass::Arg, format!("argument {name} is NULL")));
    }
    let n = s.len().min(cap.saturating_sub(1));
    // SAFETY: p has room for cap >= n + 1 bytes per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p as *mut u8, n);
        *p.add(n) = 0;
    }
    Ok(n)
}

// ----- communicators -----

/// The communicator a handle names, if it is a communicator handle (fast path).
#[inline]
fn comm_id(c: MPI_Comm) -> Option<CommId> {
    match c {
        MPI_COMM_WORLD => Some(CommId::WORLD),
        MPI_COMM_SELF => Some(CommId::SELF),
        _ if kind(c) == COMM_DIRECT && index(c) >= 2 => Some(CommId(index(c))),
        _ => None,
    }
}

#[cold]
fn bad_comm(name: &str, c: MPI_Comm) -> MpiError {
    if c == MPI_COMM_NULL {
        return err(ErrorClass::Comm, format!("{name} is MPI_COMM_NULL"));
    }
    err(
        ErrorClass::Comm,
        format!("{name} = {c:#x} is not a communicator handle"),
    )
}

#[inline]
pub(crate) fn comm(name: &str, c: MPI_Comm) -> MpiResult<CommId> {
    comm_id(c).ok_or_else(|| bad_comm(name, c))
}

#[allow(dead_code)]
pub(crate) fn comm_or_null(name: &str, c: MPI_Comm) -> MpiResult<Option<CommId>> {
    if c == MPI_COMM_NULL {
        return Ok(None);
    }
    comm(name, c).map(Some)
}

/// The communicator whose error handler takes an error of a call with this argument.
#[inline]
pub(crate) fn err_comm(c: MPI_Comm) -> Option<CommId> {
    comm_id(c)
}

pub(crate) fn comm_handle(id: CommId) -> MPI_Comm {
    match id {
        CommId::WORLD => MPI_COMM_WORLD,
        CommId::SELF => MPI_COMM_SELF,
        CommId(i) => (COMM_DIRECT | i) as c_int,
    }
}

// ----- datatypes -----

struct Builtins {
    /// By the low byte of 0x4c00xxyy handles: the full handle and its type, so that
    /// decoding a builtin is one indexed load and one comparison (every send and receive
    /// decodes one).
    plain: Box<[(MPI_Datatype, Option<TypeRef>); 256]>,
    /// MPICH's pair types 0x8c00000x.
    pairs: Vec<TypeRef>,
    /// Handle of each core builtin, by `Builtin as usize`.
    handle: Vec<MPI_Datatype>,
}

fn builtins() -> &'static Builtins {
    static B: OnceLock<Builtins> = OnceLock::new();
    B.get_or_init(|| {
        let mut plain: Box<[(MPI_Datatype, Option<TypeRef>); 256]> =
            Box::new(std::array::from_fn(|_| (MPI_DATATYPE_NULL, None)));
        let mut pairs = vec![Datatype::builtin(Builtin::Byte); 5];
        let mut handle = vec![MPI_DATATYPE_NULL; Builtin::ALL.len()];
        for &(name, h) in BUILTIN_TYPES {
            let b = Builtin::from_name(name).unwrap_or_else(|| panic!("core lacks {name}"));
            let t = Datatype::builtin(b);
            if (h as u32) & 0xff00_0000 == 0x8c00_0000 {
                pairs[index(h) as usize] = t;
            } else {
                plain[h as usize & 0xff] = (h, Some(t));
            }
            handle[b as usize] = h;
        }
        Builtins {
            plain,
            pairs,
            handle,
        }
    })
}

/// A derived datatype's handle: the type, and how many references the program holds to
/// the handle. MPI_Type_get_contents hands out the same handle again (as MPICH does) and
/// counts one more reference; every MPI_Type_free drops one, and the handle goes away
/// with the last. The type itself lives on while anything uses it (types built on it,
/// pending operations), since those hold the `TypeRef`.
struct DtypeEntry {
    t: TypeRef,
    refs: u32,
}

static DTYPES: Mutex<Table<DtypeEntry>> = Mutex::new(Table::new());

/// A decoded datatype: builtins are borrowed from a static table (no reference counting
/// on the hot path), derived types are held for the duration of the call.
#[derive(Debug)]
pub(crate) enum DtRef {
    Static(&'static TypeRef),
    Owned(TypeRef),
}

impl std::ops::Deref for DtRef {
    type Target = TypeRef;
    fn deref(&self) -> &TypeRef {
        match self {
            DtRef::Static(t) => t,
            DtRef::Owned(t) => t,
        }
    }
}

/// The datatype of handle `d`: a builtin inline (every send and receive decodes one),
/// anything else in [`dtype_other`].
#[inline]
pub(crate) fn dtype(name: &str, d: MPI_Datatype) -> MpiResult<DtRef> {
    let u = d as u32;
    if u & 0xffff_0000 == 0x4c00_0000 {
        if let (h, Some(t)) = &builtins().plain[u as usize & 0xff] {
            if *h == d {
                return Ok(DtRef::Static(t));
            }
        }
    }
    dtype_other(name, d)
}

/// [`dtype`], or None for MPI_DATATYPE_NULL (MPI 4.1 names the null handles).
pub(crate) fn dtype_or_null(name: &str, d: MPI_Datatype) -> MpiResult<Option<DtRef>> {
    if d == MPI_DATATYPE_NULL {
        return Ok(None);
    }
    dtype(name, d).map(Some)
}

/// [`dtype`] for the handles that are not plain builtins (derived types, pair types,
/// errors), out of line so that the builtin path needs no stack frame.
#[inline(never)]
fn dtype_other(name: &str, d: MPI_Datatype) -> MpiResult<DtRef> {
    let u = d as u32;
    if u & 0xffff_0000 == 0x4c00_0000 {
        if d == 0x4c00_0010 || d == 0x4c00_0011 {
            return Err(err(
                ErrorClass::Type,
                format!("{name}: MPI_LB and MPI_UB are only bound markers in MPI_Type_struct"),
            ));
        }
    } else if u & 0xffff_fff8 == 0x8c00_0000 && index(d) < 5 {
        return Ok(DtRef::Static(&builtins().pairs[index(d) as usize]));
    } else if kind(d) == DTYPE_DERIVED {
        return lock(&DTYPES)
            .get(index(d))
            .map(|e| DtRef::Owned(e.t.clone()))
            .ok_or_else(|| {
                err(
                    ErrorClass::Type,
                    format!("{name} = {d:#x} is a freed datatype"),
                )
            });
    } else if d == MPI_DATATYPE_NULL {
        return Err(err(
            ErrorClass::Type,
            format!("{name} is MPI_DATATYPE_NULL"),
        ));
    }
    Err(err(
        ErrorClass::Type,
        format!("{name} = {d:#x} is not a datatype handle"),
    ))
}

/// A new handle for a derived type.
pub(crate) fn new_dtype(t: Datatype) -> MPI_Datatype {
    let i = lock(&DTYPES).insert(DtypeEntry {
        t: Arc::new(t),
        refs: 1,
    });
    (DTYPE_DERIVED | i) as c_int
}

/// The handle of a type (builtins: their value; derived: the existing handle, else a new
/// one), for the library's own use during a call (a user operation's datatype argument):
/// no reference is added to an existing handle.
pub(crate) fn dtype_handle(t: &TypeRef) -> MPI_Datatype {
    dtype_handle_with(t, false)
}

/// The handle of a type for the program to keep and free (MPI_Type_get_contents): an
/// existing handle gains a reference; a type without one gets a new handle.
pub(crate) fn dtype_handle_ref(t: &TypeRef) -> MPI_Datatype {
    dtype_handle_with(t, true)
}

fn dtype_handle_with(t: &TypeRef, add_ref: bool) -> MPI_Datatype {
    if let Some(b) = t.is_builtin() {
        return builtins().handle[b as usize];
    }
    let mut tab = lock(&DTYPES);
    let i = match tab.find(|x| Arc::ptr_eq(&x.t, t)) {
        Some(i) => {
            if add_ref {
                tab.get_mut(i).expect("found").refs += 1;
            }
            i
        }
        None => tab.insert(DtypeEntry {
            t: t.clone(),
            refs: 1,
        }),
    };
    (DTYPE_DERIVED | i) as c_int
}

/// The references the program holds to a derived type's handle (0: not a live handle).
#[cfg(test)]
pub(crate) fn dtype_refs(d: MPI_Datatype) -> u32 {
    if kind(d) != DTYPE_DERIVED {
        return 0;
    }
    lock(&DTYPES).get(index(d)).map_or(0, |e| e.refs)
}

/// MPI_Type_free: drops one reference (under one lock, so that of two threads freeing
/// the last two references exactly one sees the last); with the last, `on_last` runs
/// (the attribute delete callbacks, which may still use the handle) and the handle goes.
pub(crate) fn release_dtype(
    d: &mut MPI_Datatype,
    on_last: impl FnOnce(MPI_Datatype) -> MpiResult<()>,
) -> MpiResult<()> {
    // Predefined types (MPI_Type_create_f90_*'s too, which have a derived handle): free_dtype
    // gives the error, before any reference is dropped.
    if dtype("datatype", *d)?.is_predefined() {
        return free_dtype(d).map(|_| ());
    }
    let last = {
        let mut tab = lock(&DTYPES);
        match tab.get_mut(index(*d)) {
            Some(e) if kind(*d) == DTYPE_DERIVED && e.refs > 0 => {
                e.refs -= 1;
                Some(e.refs == 0)
            }
            _ => None,
        }
    };
    // Predefined types and handles being freed: free_dtype says which error.
    let Some(last) = last else {
        return free_dtype(d).map(|_| ());
    };
    if last {
        let r = on_last(*d);
        lock(&DTYPES).remove(index(*d));
        r?;
    }
    *d = MPI_DATATYPE_NULL;
    Ok(())
}

/// Drop one reference to a derived type's handle; returns true when it was the last (the
/// handle is gone). Predefined types are an error.
pub(crate) fn free_dtype(d: &mut MPI_Datatype) -> MpiResult<bool> {
    let t = dtype("datatype", *d)?;
    if t.is_predefined() || kind(*d) != DTYPE_DERIVED {
        return Err(err(
            ErrorClass::Type,
            "a predefined datatype cannot be freed",
        ));
    }
    let mut tab = lock(&DTYPES);
    let e = tab.get_mut(index(*d)).ok_or_else(|| {
        err(
            ErrorClass::Type,
            format!("datatype = {:#x} is a freed datatype", *d),
        )
    })?;
    if e.refs == 0 {
        return Err(err(
            ErrorClass::Type,
            format!("datatype = {:#x} is being freed", *d),
        ));
    }
    e.refs -= 1;
    let last = e.refs == 0;
    if last {
        tab.remove(index(*d));
    }
    *d = MPI_DATATYPE_NULL;
    Ok(last)
}

// ----- groups -----

static GROUPS: Mutex<Table<Arc<Group>>> = Mutex::new(Table::new());

fn empty_group() -> Arc<Group> {
    static E: OnceLock<Arc<Group>> = OnceLock::new();
    E.get_or_init(|| Arc::new(Group::empty())).clone()
}

pub(crate) fn group(name: &str, g: MPI_Group) -> MpiResult<Arc<Group>> {
    if g == MPI_GROUP_EMPTY {
        return Ok(empty_group());
    }
    if g == MPI_GROUP_NULL {
        return Err(err(ErrorClass::Group, format!("{name} is MPI_GROUP_NULL")));
    }
    if kind(g) == GROUP_DIRECT {
        return lock(&GROUPS).get(index(g)).cloned().ok_or_else(|| {
            err(
                ErrorClass::Group,
                format!("{name} = {g:#x} is a freed group"),
            )
        });
    }
    Err(err(
        ErrorClass::Group,
        format!("{name} = {g:#x} is not a group handle"),
    ))
}

/// A handle for a group (MPI_GROUP_EMPTY for an empty one).
pub(crate) fn new_group(g: Arc<Group>) -> MPI_Group {
    if g.size() == 0 {
        return MPI_GROUP_EMPTY;
    }
    (GROUP_DIRECT | lock(&GROUPS).insert(g)) as c_int
}

pub(crate) fn free_group(g: &mut MPI_Group) -> MpiResult<()> {
    group("group", *g)?;
    if kind(*g) == GROUP_DIRECT {
        lock(&GROUPS).remove(index(*g));
    }
    *g = MPI_GROUP_NULL;
    Ok(())
}

// ----- requests and messages -----

/// Check element `i` of the array argument `array` with `check`, which is given the name
/// to use in its error message. The success path runs `check` once with the bare array
/// name; only a failure formats `array[i]` and runs it again for the message, so decoding
/// the arrays of MPI_Waitall, MPI_Alltoallw and friends allocates nothing per element.
/// `check` must be a pure validation (no side effects).
pub(crate) fn element<T>(
    array: &str,
    i: usize,
    check: impl Fn(&str) -> MpiResult<T>,
) -> MpiResult<T> {
    check(array).or_else(|_| check(&format!("{array}[{i}]")))
}

/// True when `r` is MPI_REQUEST_NULL or decodes as a request (the cheap check of a whole
/// array before [`request`] is asked for the error of a bad element).
#[inline]
pub(crate) fn is_request(r: MPI_Request) -> bool {
    r == MPI_REQUEST_NULL || r as u32 & KIND_MASK == REQ_DIRECT
}

/// A decoded request handle: None for MPI_REQUEST_NULL.
pub(crate) fn request(name: &str, r: MPI_Request) -> MpiResult<Option<ReqId>> {
    if r == MPI_REQUEST_NULL {
        return Ok(None);
    }
    if r as u32 & KIND_MASK == REQ_DIRECT {
        return Ok(Some(ReqId(r as u32 & (INDEX_MASK & !REQ_PERSISTENT))));
    }
    Err(err(
        ErrorClass::Request,
        format!("{name} = {r:#x} is not a request handle"),
    ))
}

pub(crate) fn is_persistent(r: MPI_Request) -> bool {
    r != MPI_REQUEST_NULL && r as u32 & REQ_PERSISTENT != 0
}

pub(crate) fn request_handle(id: ReqId, persistent: bool) -> MPI_Request {
    assert!(id.0 < REQ_PERSISTENT, "request index out of handle range");
    (REQ_DIRECT | id.0 | if persistent { REQ_PERSISTENT } else { 0 }) as c_int
}

/// A decoded message handle: None for MPI_MESSAGE_NO_PROC.
pub(crate) fn message(name: &str, m: MPI_Message) -> MpiResult<Option<MsgId>> {
    match m {
        MPI_MESSAGE_NO_PROC => Ok(None),
        MPI_MESSAGE_NULL => Err(err(
            ErrorClass::Request,
            format!("{name} is MPI_MESSAGE_NULL"),
        )),
        _ if kind(m) == MSG_INDIRECT => Ok(Some(MsgId(index(m)))),
        _ => Err(err(
            ErrorClass::Request,
            format!("{name} = {m:#x} is not a message handle"),
        )),
    }
}

pub(crate) fn message_handle(m: Option<MsgId>) -> MPI_Message {
    match m {
        None => MPI_MESSAGE_NO_PROC,
        Some(MsgId(i)) => (MSG_INDIRECT | i) as c_int,
    }
}

// ----- operations -----

/// A reduction operation as the C ABI knows it.
#[derive(Clone, Copy, Debug)]
pub enum OpDef {
    /// A predefined operation: MPI_MAX (1) .. MPI_NO_OP (14), MPICH's index.
    Builtin(u32),
    /// A user function from MPI_Op_create.
    User {
        func: MPI_User_function,
        commute: bool,
    },
    /// A user function from MPI_Op_create_c (its count is an MPI_Count).
    UserC {
        func: MPI_User_function_c,
        commute: bool,
    },
}

static OPS: Mutex<Table<OpDef>> = Mutex::new(Table::new());

/// The operation behind an `MPI_Op` handle (for the collectives layer too): a predefined
/// one inline, anything else in [`op_other`]. As a call (through the GOT, the result
/// returned through memory) it cost a loop of 8-byte `MPI_Reduce` on 2 ranks 0.126-0.128
/// µs per call; inline, 0.107-0.120 (docs/performance.md, session 14).
#[inline]
pub fn op(name: &str, o: MPI_Op) -> MpiResult<OpDef> {
    match op_builtin(o) {
        Some(d) => Ok(d),
        None => op_other(name, o),
    }
}

/// A predefined operation's definition, or None for any other handle. The generated
/// entry points decode `MPI_Op` arguments with this and [`op_other`], not with [`op`]:
/// merged through `op`'s result, the predefined case was stored as a tag byte and a
/// 4-byte index and read back with one 16-byte load, a store-forwarding stall (8-byte
/// `MPI_Scan` on 2 ranks: 0.113 µs per call with it, 0.106 without; session 15).
#[inline(always)]
pub fn op_builtin(o: MPI_Op) -> Option<OpDef> {
    (o as u32 & 0xffff_ff00 == OP_BUILTIN && (1..=14).contains(&index(o)))
        .then(|| OpDef::Builtin(index(o)))
}

/// [`op`] for handles that are not predefined operations.
#[inline(never)]
pub fn op_other(name: &str, o: MPI_Op) -> MpiResult<OpDef> {
    if o == MPI_OP_NULL {
        return Err(err(ErrorClass::Op, format!("{name} is MPI_OP_NULL")));
    }
    if kind(o) == OP_DIRECT {
        return lock(&OPS).get(index(o)).copied().ok_or_else(|| {
            err(
                ErrorClass::Op,
                format!("{name} = {o:#x} is a freed operation"),
            )
        });
    }
    Err(err(
        ErrorClass::Op,
        format!("{name} = {o:#x} is not an operation handle"),
    ))
}

pub(crate) fn new_op(d: OpDef) -> MPI_Op {
    (OP_DIRECT | lock(&OPS).insert(d)) as c_int
}

pub(crate) fn free_op(o: &mut MPI_Op) -> MpiResult<()> {
    match op("op", *o)? {
        OpDef::Builtin(_) => Err(err(
            ErrorClass::Op,
            "a predefined operation cannot be freed",
        )),
        OpDef::User { .. } | OpDef::UserC { .. } => {
            lock(&OPS).remove(index(*o));
            *o = MPI_OP_NULL;
            Ok(())
        }
    }
}

// ----- error handlers -----

/// A user error handler's handle: the function and the references the program holds
/// (MPI_Comm_create_errhandler gives one, every MPI_Comm_get_errhandler one more, every
/// MPI_Errhandler_free drops one). Entries are never reused: a communicator that still
/// uses a handler after the program freed every handle to it reports the same value from
/// MPI_Comm_get_errhandler, which then becomes valid again (one new reference).
struct ErrhEntry {
    f: MPI_Comm_errhandler_function,
    refs: u32,
}

static ERRHS: Mutex<Vec<ErrhEntry>> = Mutex::new(Vec::new());

pub(crate) fn errhandler(name: &str, e: MPI_Errhandler) -> MpiResult<ErrHandler> {
    match e {
        MPI_ERRORS_ARE_FATAL => Ok(ErrHandler::Fatal),
        MPI_ERRORS_ABORT => Ok(ErrHandler::Abort),
        MPI_ERRORS_RETURN => Ok(ErrHandler::Return),
        MPI_ERRHANDLER_NULL => Err(err(
            ErrorClass::Arg,
            format!("{name} is MPI_ERRHANDLER_NULL"),
        )),
        _ if kind(e) == ERRH_DIRECT => {
            let f = lock(&ERRHS)
                .get(index(e) as usize)
                .filter(|h| h.refs > 0)
                .map(|h| h.f)
                .ok_or_else(|| {
                    err(
                        ErrorClass::Arg,
                        format!("{name} = {e:#x} is a freed error handler"),
                    )
                })?;
            let f = f.ok_or_else(|| err(ErrorClass::Arg, "error handler without a function"))?;
            Ok(ErrHandler::User(
                e as u32,
                Arc::new(move |comm: CommId, code: i32| {
                    let mut c = comm_handle(comm);
                    let mut code = code;
                    // SAFETY: a C function of the MPI_Comm_errhandler_function type, given
                    // pointers to locals that live for the call.
                    unsafe { f(&mut c, &mut code) };
                }),
            ))
        }
        _ => Err(err(
            ErrorClass::Arg,
            format!("{name} = {e:#x} is not an error handler handle"),
        )),
    }
}

/// The C function of a user error handler handle (windows call it with their handle).
pub(crate) fn errhandler_fn(e: MPI_Errhandler) -> Option<MPI_Comm_errhandler_function> {
    (kind(e) == ERRH_DIRECT)
        .then(|| lock(&ERRHS).get(index(e) as usize).map(|h| h.f))
        .flatten()
}

pub(crate) fn new_errhandler(f: MPI_Comm_errhandler_function) -> MPI_Errhandler {
    let mut tab = lock(&ERRHS);
    tab.push(ErrhEntry { f, refs: 1 });
    assert!(tab.len() <= INDEX_MASK as usize, "error handler table full");
    (ERRH_DIRECT | (tab.len() - 1) as u32) as c_int
}

/// The handle of a communicator's error handler, as MPI_Comm_get_errhandler returns it:
/// a user handler's handle gains a reference (the program frees what it gets).
pub(crate) fn errhandler_handle(h: &ErrHandler) -> MPI_Errhandler {
    match h {
        ErrHandler::Fatal => MPI_ERRORS_ARE_FATAL,
        ErrHandler::Return => MPI_ERRORS_RETURN,
        ErrHandler::Abort => MPI_ERRORS_ABORT,
        ErrHandler::User(id, _) => {
            if let Some(e) = lock(&ERRHS).get_mut(index(*id as c_int) as usize) {
                e.refs += 1;
            }
            *id as c_int
        }
    }
}

/// MPI_Errhandler_free: drops one reference (predefined handlers: nothing to do, as in
/// MPICH). Communicators that use the handler keep it.
pub(crate) fn free_errhandler(e: &mut MPI_Errhandler) -> MpiResult<()> {
    errhandler("errhandler", *e)?;
    if kind(*e) == ERRH_DIRECT {
        if let Some(h) = lock(&ERRHS).get_mut(index(*e) as usize) {
            h.refs -= 1;
        }
    }
    *e = MPI_ERRHANDLER_NULL;
    Ok(())
}

// ----- info objects -----

/// An info object: ordered (key, value) pairs.
pub(crate) type InfoData = Vec<(String, String)>;

pub(crate) static INFOS: Mutex<Table<InfoData>> = Mutex::new(Table::new());

/// An info handle: an index in [`INFOS`], or None for MPI_INFO_ENV (read-only, empty).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InfoId(pub Option<u32>);

pub(crate) fn info(name: &str, i: MPI_Info) -> MpiResult<InfoId> {
    match i {
        MPI_INFO_ENV => Ok(InfoId(None)),
        MPI_INFO_NULL => Err(err(ErrorClass::Info, format!("{name} is MPI_INFO_NULL"))),
        _ if kind(i) == INFO_DIRECT => {
            if lock(&INFOS).get(index(i)).is_none() {
                return Err(err(
                    ErrorClass::Info,
                    format!("{name} = {i:#x} is a freed info object"),
                ));
            }
            Ok(InfoId(Some(index(i))))
        }
        _ => Err(err(
            ErrorClass::Info,
            format!("{name} = {i:#x} is not an info handle"),
        )),
    }
}

pub(crate) fn info_or_null(name: &str, i: MPI_Info) -> MpiResult<Option<InfoId>> {
    if i == MPI_INFO_NULL {
        return Ok(None);
    }
    info(name, i).map(Some)
}

pub(crate) fn new_info(d: InfoData) -> MPI_Info {
    (INFO_DIRECT | lock(&INFOS).insert(d)) as c_int
}

// ----- windows and files (their calls are stubs: only MPI_*_NULL can be told invalid) -----

/// MPI_ERR_WIN for MPI_WIN_NULL.
#[allow(dead_code)]
pub(crate) fn win_not_null(name: &str, w: MPI_Win) -> MpiResult<()> {
    const WIN_NULL: MPI_Win = 0x2000_0000;
    if w == WIN_NULL {
        return Err(err(ErrorClass::Win, format!("{name} is MPI_WIN_NULL")));
    }
    Ok(())
}

/// MPI_ERR_FILE for MPI_FILE_NULL.
#[allow(dead_code)]
pub(crate) fn file_not_null(name: &str, f: MPI_File) -> MpiResult<()> {
    if f.is_null() {
        return Err(err(ErrorClass::File, format!("{name} is MPI_FILE_NULL")));
    }
    Ok(())
}

// ----- the runtime -----

/// The runtime while MPI runs (set by MPI_Init, cleared by MPI_Finalize): one load on the
/// hot path instead of the core's state check.
static RUNNING: AtomicPtr<tsunagi_core::Runtime> = AtomicPtr::new(std::ptr::null_mut());

/// The running runtime (MPI_ERR_OTHER if MPI is not initialized or already finalized).
#[inline]
pub(crate) fn runtime(call: &str) -> MpiResult<&'static tsunagi_core::Runtime> {
    let p = RUNNING.load(Ordering::Acquire);
    if p.is_null() {
        return rt(call);
    }
    // SAFETY: the pointer is the core's `&'static Runtime`, stored by `set_running`.
    Ok(unsafe { &*p })
}

/// Record (after MPI_Init) or forget (after MPI_Finalize) the running runtime.
pub(crate) fn set_running(r: Option<&'static tsunagi_core::Runtime>) {
    let p = r.map_or(std::ptr::null_mut(), |r| r as *const _ as *mut _);
    RUNNING.store(p, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_builtin_has_its_mpich_handle_and_decodes_back() {
        assert_eq!(BUILTIN_TYPES.len(), Builtin::ALL.len());
        for &b in Builtin::ALL {
            let h = builtins().handle[b as usize];
            assert_ne!(h, MPI_DATATYPE_NULL, "{} has no handle", b.name());
            let t = dtype("t", h).expect("decodes");
            assert_eq!(t.is_builtin(), Some(b));
            // MPICH encodes the size in bits 8-15 of the plain builtins.
            if (h as u32) & 0xff00_0000 == 0x4c00_0000 {
                assert_eq!(((h >> 8) & 0xff) as usize, b.size(), "{}", b.name());
            }
            assert_eq!(dtype_handle(&t), h);
        }
        assert!(dtype("t", MPI_DATATYPE_NULL).is_err());
        assert!(dtype("t", 0x4c00_0010).is_err()); // MPI_LB
        assert!(dtype("t", 0x4c00_04ff).is_err());
    }

    #[test]
    fn array_elements_are_named_with_their_index_only_on_error() {
        let good = request_handle(ReqId(7), false);
        assert_eq!(
            element("array_of_requests", 3, |n| request(n, good)).unwrap(),
            Some(ReqId(7))
        );
        let e = element("array_of_requests", 3, |n| request(n, 0x1234)).unwrap_err();
        assert_eq!(e.class, ErrorClass::Request);
        assert!(
            e.message.starts_with("array_of_requests[3] = 0x1234"),
            "{}",
            e.message
        );
        let e = element("array_of_types", 1, |n| dtype(n, MPI_DATATYPE_NULL)).unwrap_err();
        assert!(e.message.contains("array_of_types[1]"), "{}", e.message);
    }

    #[test]
    fn derived_types_and_groups_round_trip_and_free() {
        let t = Datatype::contiguous(3, &Datatype::builtin(Builtin::Int)).expect("type");
        let mut h = new_dtype(t);
        let r = dtype("t", h).expect("live");
        assert_eq!(r.size(), 12);
        assert_eq!(dtype_handle(&r), h);
        assert_eq!(dtype_refs(h), 1, "dtype_handle adds no reference");
        // A second reference (MPI_Type_get_contents): two frees, in either order.
        let mut again = dtype_handle_ref(&r);
        assert_eq!(again, h);
        assert_eq!(dtype_refs(h), 2);
        let keep = h;
        assert!(!free_dtype(&mut again).expect("first free"));
        assert_eq!(again, MPI_DATATYPE_NULL);
        assert_eq!(dtype("t", keep).expect("still live").size(), 12);
        assert!(free_dtype(&mut h).expect("free"));
        assert_eq!(h, MPI_DATATYPE_NULL);
        assert_eq!(dtype("t", keep).unwrap_err().class, ErrorClass::Type);
        let mut int = MPI_INT_HANDLE;
        assert!(free_dtype(&mut int).is_err());

        let g = new_group(Arc::new(Group::new(vec![0, 1])));
        assert_eq!(group("g", g).expect("live").size(), 2);
        assert_eq!(new_group(Arc::new(Group::empty())), MPI_GROUP_EMPTY);
        let mut g2 = g;
        free_group(&mut g2).expect("free");
        assert_eq!(group("g", g).unwrap_err().class, ErrorClass::Group);
    }

    const MPI_INT_HANDLE: MPI_Datatype = 0x4c00_0405;

    #[test]
    fn handle_kinds_are_checked() {
        assert_eq!(comm("c", MPI_COMM_WORLD).unwrap(), CommId::WORLD);
        assert_eq!(comm_handle(CommId(7)), 0x8400_0007u32 as c_int);
        assert_eq!(comm("c", comm_handle(CommId(7))).unwrap(), CommId(7));
        assert_eq!(
            comm("c", MPI_COMM_NULL).unwrap_err().class,
            ErrorClass::Comm
        );
        assert_eq!(
            comm("c", MPI_INT_HANDLE).unwrap_err().class,
            ErrorClass::Comm
        );
        assert_eq!(request("r", MPI_REQUEST_NULL).unwrap(), None);
        let r = request_handle(ReqId(5), true);
        assert!(is_persistent(r));
        assert_eq!(request("r", r).unwrap(), Some(ReqId(5)));
        assert!(!is_persistent(request_handle(ReqId(5), false)));
        assert_eq!(
            request("r", MPI_COMM_WORLD).unwrap_err().class,
            ErrorClass::Request
        );
        assert_eq!(
            message("m", message_handle(Some(MsgId(3)))).unwrap(),
            Some(MsgId(3))
        );
        assert_eq!(message("m", MPI_MESSAGE_NO_PROC).unwrap(), None);
        assert!(matches!(op("o", 0x5800_0003).unwrap(), OpDef::Builtin(3)));
        assert_eq!(op("o", MPI_OP_NULL).unwrap_err().class, ErrorClass::Op);
        assert!(matches!(
            errhandler("e", MPI_ERRORS_RETURN).unwrap(),
            ErrHandler::Return
        ));
        assert_eq!(
            info("i", MPI_INFO_NULL).unwrap_err().class,
            ErrorClass::Info
        );
        assert!(info_or_null("i", MPI_INFO_NULL).unwrap().is_none());
    }
}
