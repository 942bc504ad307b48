//! Datatypes: constructors, queries, decoding, names, addresses, pack/unpack.

use std::ffi::{c_char, c_int, c_void};

use tsunagi_core::datatype::{
    external32_size, pack_external32, unpack_external32, Combiner, Count, DarrayArgs, Datatype,
    Order, TypeRef,
};
use tsunagi_core::{CommId, ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err};

fn ints(name: &str, p: *const c_int, n: c_int) -> MpiResult<Vec<Count>> {
    // SAFETY: MPI requires an array of `n` ints.
    Ok(unsafe { h::slice(name, p, n as usize)? }
        .iter()
        .map(|&v| v as Count)
        .collect())
}

fn aints(name: &str, p: *const MPI_Aint, n: c_int) -> MpiResult<Vec<isize>> {
    // SAFETY: MPI requires an array of `n` addresses.
    Ok(unsafe { h::slice(name, p, n as usize)? }
        .iter()
        .map(|&v| v as isize)
        .collect())
}

fn made(t: MpiResult<Datatype>, out: &mut MPI_Datatype) -> MpiResult<()> {
    *out = h::new_dtype(t?);
    Ok(())
}

pub(crate) fn type_contiguous(
    count: c_int,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    made(Datatype::contiguous(count as Count, old), new)
}

pub(crate) fn type_vector(
    count: c_int,
    bl: c_int,
    stride: c_int,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    made(
        Datatype::vector(count as Count, bl as Count, stride as Count, old),
        new,
    )
}

pub(crate) fn type_create_hvector(
    count: c_int,
    bl: c_int,
    stride: MPI_Aint,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    made(
        Datatype::hvector(count as Count, bl as Count, stride as isize, old),
        new,
    )
}

pub(crate) fn type_hvector(
    count: c_int,
    bl: c_int,
    stride: MPI_Aint,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    type_create_hvector(count, bl, stride, old, new)
}

pub(crate) fn type_indexed(
    count: c_int,
    bls: *const c_int,
    displs: *const c_int,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    let b = ints("array_of_blocklengths", bls, count)?;
    let d = ints("array_of_displacements", displs, count)?;
    made(Datatype::indexed(&b, &d, old), new)
}

pub(crate) fn type_create_hindexed(
    count: c_int,
    bls: *const c_int,
    displs: *const MPI_Aint,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    let b = ints("array_of_blocklengths", bls, count)?;
    let d = aints("array_of_displacements", displs, count)?;
    made(Datatype::hindexed(&b, &d, old), new)
}

pub(crate) fn type_hindexed(
    count: c_int,
    bls: *const c_int,
    displs: *const MPI_Aint,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    type_create_hindexed(count, bls, displs, old, new)
}

pub(crate) fn type_create_indexed_block(
    count: c_int,
    bl: c_int,
    displs: *const c_int,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    let d = ints("array_of_displacements", displs, count)?;
    made(Datatype::indexed_block(bl as Count, &d, old), new)
}

pub(crate) fn type_create_hindexed_block(
    count: c_int,
    bl: c_int,
    displs: *const MPI_Aint,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    let d = aints("array_of_displacements", displs, count)?;
    made(Datatype::hindexed_block(bl as Count, &d, old), new)
}

/// MPI-1's bound markers, still in MPICH's header: accepted in struct types only.
const MPI_LB: MPI_Datatype = 0x4c00_0010;
const MPI_UB: MPI_Datatype = 0x4c00_0011;

pub(crate) fn type_create_struct(
    count: c_int,
    bls: *const c_int,
    displs: *const MPI_Aint,
    types: *const MPI_Datatype,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    let b = ints("array_of_blocklengths", bls, count)?;
    let d = aints("array_of_displacements", displs, count)?;
    // SAFETY: MPI requires an array of `count` datatypes.
    let hs = unsafe { h::slice("array_of_types", types, count as usize)? };
    let (mut lb, mut ub) = (None::<isize>, None::<isize>);
    let (mut bl2, mut d2, mut ts) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &t) in hs.iter().enumerate() {
        match t {
            MPI_LB => lb = Some(lb.map_or(d[i], |v| v.min(d[i]))),
            MPI_UB => ub = Some(ub.map_or(d[i], |v| v.max(d[i]))),
            _ => {
                ts.push((*h::element("array_of_types", i, |n| h::dtype(n, t))?).clone());
                bl2.push(b[i]);
                d2.push(d[i]);
            }
        }
    }
    let t = Datatype::structure(&bl2, &d2, &ts)?;
    if lb.is_none() && ub.is_none() {
        return made(Ok(t), new);
    }
    // Explicit markers set the bounds (MPI-1 semantics, as a resized type).
    let t = std::sync::Arc::new(t);
    let l = lb.unwrap_or(t.lb());
    let u = ub.unwrap_or(t.ub());
    made(Datatype::resized(&t, l, u - l), new)
}

pub(crate) fn type_struct(
    count: c_int,
    bls: *const c_int,
    displs: *const MPI_Aint,
    types: *const MPI_Datatype,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    type_create_struct(count, bls, displs, types, new)
}

pub(crate) fn type_create_subarray(
    ndims: c_int,
    sizes: *const c_int,
    subsizes: *const c_int,
    starts: *const c_int,
    order: c_int,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    let order = Order::from_mpich(order).ok_or_else(|| {
        err(
            ErrorClass::Arg,
            format!("order = {order} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"),
        )
    })?;
    let s = ints("array_of_sizes", sizes, ndims)?;
    let ss = ints("array_of_subsizes", subsizes, ndims)?;
    let st = ints("array_of_starts", starts, ndims)?;
    made(Datatype::subarray(&s, &ss, &st, order, old), new)
}

/// The global indices of one dimension that process coordinate `coord` of `psize` owns.
fn darray_dim(
    dim: usize,
    gsize: Count,
    distrib: c_int,
    darg: c_int,
    psize: Count,
    coord: Count,
) -> MpiResult<Vec<Count>> {
    const BLOCK: c_int = 121;
    const CYCLIC: c_int = 122;
    const NONE: c_int = 123;
    const DFLT: c_int = -49767;
    let bad = |what: String| err(ErrorClass::Arg, format!("dimension {dim}: {what}"));
    match distrib {
        NONE => {
            if psize != 1 {
                return Err(bad(format!(
                    "MPI_DISTRIBUTE_NONE needs array_of_psizes = 1, not {psize}"
                )));
            }
            Ok((0..gsize).collect())
        }
        BLOCK => {
            let b = if darg == DFLT {
                (gsize + psize - 1) / psize
            } else {
                darg as Count
            };
            if b <= 0 || b * psize < gsize {
                return Err(bad(format!(
                    "block size {b} times {psize} processes does not cover {gsize} elements"
                )));
            }
            Ok((coord * b..((coord + 1) * b).min(gsize)).collect())
        }
        CYCLIC => {
            let k = if darg == DFLT { 1 } else { darg as Count };
            if k <= 0 {
                return Err(bad(format!("cyclic block size {k} is not positive")));
            }
            let mut out = Vec::new();
            let mut start = coord * k;
            while start < gsize {
                out.extend(start..(start + k).min(gsize));
                start += k * psize;
            }
            Ok(out)
        }
        other => Err(bad(format!(
            "distribution {other} is not an MPI_DISTRIBUTE_*"
        ))),
    }
}

/// `MPI_Type_create_darray`: the elements of the global array (`gsizes`, in `order`) that
/// process `rank` of a `psizes` grid (row-major) owns, in the array's memory order: the map
/// of an hindexed type over runs of the fastest dimension resized to the whole array's
/// extent, under combiner MPI_COMBINER_DARRAY with the arguments (MPI_Type_get_contents).
pub(crate) fn type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: *const c_int,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    old: &TypeRef,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    let order = Order::from_mpich(order).ok_or_else(|| {
        err(
            ErrorClass::Arg,
            format!("order = {order} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"),
        )
    })?;
    let g = ints("array_of_gsizes", gsizes, ndims)?;
    let p = ints("array_of_psizes", psizes, ndims)?;
    // SAFETY: MPI requires arrays of `ndims` ints.
    let d = unsafe { h::slice("array_of_distribs", distribs, ndims as usize)? }.to_vec();
    // SAFETY: as above.
    let a = unsafe { h::slice("array_of_dargs", dargs, ndims as usize)? }.to_vec();
    if g.iter().any(|&x| x <= 0) || p.iter().any(|&x| x <= 0) {
        return Err(err(
            ErrorClass::Arg,
            "array_of_gsizes and array_of_psizes must be positive",
        ));
    }
    if p.iter().product::<Count>() != size as Count {
        return Err(err(
            ErrorClass::Arg,
            format!("the process grid {p:?} does not have size = {size} processes"),
        ));
    }
    if rank < 0 || rank >= size {
        return Err(err(
            ErrorClass::Rank,
            format!("rank = {rank} is not in 0..{size}"),
        ));
    }
    // The process grid is row-major whatever the array order.
    let n = ndims as usize;
    let mut coords = vec![0; n];
    let mut rest = rank as Count;
    for i in (0..n).rev() {
        coords[i] = rest % p[i];
        rest /= p[i];
    }
    let owned: Vec<Vec<Count>> = (0..n)
        .map(|i| darray_dim(i, g[i], d[i], a[i], p[i], coords[i]))
        .collect::<MpiResult<_>>()?;
    // Dimensions from the slowest to the fastest in memory, with their strides (elements).
    let dims: Vec<usize> = match order {
        Order::C => (0..n).collect(),
        Order::Fortran => (0..n).rev().collect(),
    };
    let mut stride = vec![1 as Count; n];
    for w in (0..n.saturating_sub(1)).rev() {
        stride[dims[w]] = stride[dims[w + 1]] * g[dims[w + 1]];
    }
    let ext = old.extent() as Count;
    let (mut lens, mut displs): (Vec<Count>, Vec<isize>) = (Vec::new(), Vec::new());
    if n > 0 && owned.iter().all(|o| !o.is_empty()) {
        let fast = dims[n - 1];
        // Runs of consecutive indices in the fastest dimension.
        let mut runs: Vec<(Count, Count)> = Vec::new();
        for &x in &owned[fast] {
            match runs.last_mut() {
                Some((s, l)) if *s + *l == x => *l += 1,
                _ => runs.push((x, 1)),
            }
        }
        // Odometer over the slower dimensions, in memory order.
        let mut idx = vec![0usize; n - 1];
        loop {
            let base: Count = (0..n - 1)
                .map(|w| owned[dims[w]][idx[w]] * stride[dims[w]])
                .sum();
            for &(s, l) in &runs {
                lens.push(l);
                displs.push(((base + s) * ext) as isize);
            }
            let mut w = n - 1;
            loop {
                if w == 0 {
                    break;
                }
                w -= 1;
                idx[w] += 1;
                if idx[w] < owned[dims[w]].len() {
                    break;
                }
                idx[w] = 0;
                if w == 0 {
                    w = usize::MAX;
                    break;
                }
            }
            if w == usize::MAX || n == 1 {
                break;
            }
        }
    }
    let total = g.iter().product::<Count>() * ext;
    let inner: TypeRef = std::sync::Arc::new(Datatype::hindexed(&lens, &displs, old)?);
    let map: TypeRef = std::sync::Arc::new(Datatype::resized(&inner, 0, total as isize)?);
    let args = DarrayArgs {
        size: size as Count,
        rank: rank as Count,
        gsizes: g,
        distribs: d.iter().map(|&v| v as Count).collect(),
        dargs: a.iter().map(|&v| v as Count).collect(),
        psizes: p,
        order,
    };
    made(Datatype::darray(args, old, &map), new)
}

pub(crate) fn type_create_resized(
    old: &TypeRef,
    lb: MPI_Aint,
    extent: MPI_Aint,
    new: &mut MPI_Datatype,
) -> MpiResult<()> {
    made(Datatype::resized(old, lb as isize, extent as isize), new)
}

pub(crate) fn type_dup(oldtype: MPI_Datatype, new: &mut MPI_Datatype) -> MpiResult<()> {
    let old = h::dtype("oldtype", oldtype)?;
    let mut out = MPI_DATATYPE_NULL;
    made(Ok(Datatype::dup(&old)), &mut out)?;
    if let Err(e) = super::tattr::copy_all(oldtype, out) {
        let _ = h::free_dtype(&mut out);
        return Err(e);
    }
    *new = out;
    Ok(())
}

/// MPI_TYPECLASS_REAL / INTEGER / COMPLEX.
const TYPECLASSES: [(c_int, &[MPI_Datatype]); 3] = [
    // MPI_REAL4, MPI_REAL8, MPI_REAL16
    (1, &[0x4c00_0427, 0x4c00_0829, 0x4c00_102b]),
    // MPI_INTEGER1, MPI_INTEGER2, MPI_INTEGER4, MPI_INTEGER8
    (2, &[0x4c00_012d, 0x4c00_022f, 0x4c00_0430, 0x4c00_0831]),
    // MPI_COMPLEX8, MPI_COMPLEX16, MPI_COMPLEX32
    (3, &[0x4c00_0828, 0x4c00_102a, 0x4c00_202c]),
];

pub(crate) fn type_match_size(class: c_int, size: c_int, out: &mut MPI_Datatype) -> MpiResult<()> {
    let (_, types) = TYPECLASSES
        .iter()
        .find(|(c, _)| *c == class)
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                format!("typeclass = {class} is not an MPI_TYPECLASS_*"),
            )
        })?;
    // MPICH's builtin handles carry their size in bits 8-15.
    *out = *types
        .iter()
        .find(|&&t| (t >> 8) & 0xff == size)
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                format!("no type of class {class} has size {size}"),
            )
        })?;
    Ok(())
}

/// The Fortran kinds gfortran offers as (decimal precision, decimal exponent range) for
/// REAL and COMPLEX (kinds 4, 8, 16), and the exponent range for INTEGER (kinds 1 to 8),
/// with the MPI type of each (MPI_REAL4..., MPI_COMPLEX8..., MPI_INTEGER1...).
const F90_REALS: [(c_int, c_int, MPI_Datatype, MPI_Datatype); 3] = [
    (6, 37, 0x4c00_0427, 0x4c00_0828),
    (15, 307, 0x4c00_0829, 0x4c00_102a),
    (33, 4931, 0x4c00_102b, 0x4c00_202c),
];
const F90_INTEGERS: [(c_int, MPI_Datatype); 4] = [
    (2, 0x4c00_012d),
    (4, 0x4c00_022f),
    (9, 0x4c00_0430),
    (18, 0x4c00_0831),
];

/// The handles MPI_Type_create_f90_* returned, one per combiner and arguments. MPI makes
/// the results predefined types (MPI 4.1 §19.3.5: the program does not free them, and
/// MPI_Type_free refuses them), so a repeated call gives the same handle rather than a new
/// one each time that would never be released.
static F90_TYPES: std::sync::Mutex<Vec<(Combiner, Vec<Count>, MPI_Datatype)>> =
    std::sync::Mutex::new(Vec::new());

/// The predefined type of combiner `combiner` with arguments `ints` on the map of `base`.
fn f90_type(combiner: Combiner, ints: Vec<Count>, base: MPI_Datatype) -> MpiResult<MPI_Datatype> {
    let mut cache = F90_TYPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, _, t)) = cache.iter().find(|(c, i, _)| *c == combiner && *i == ints) {
        return Ok(t);
    }
    let base = h::dtype("base", base)?;
    let t = h::new_dtype(Datatype::f90(combiner, ints.clone(), &base)?);
    cache.push((combiner, ints, t));
    Ok(t)
}

/// SELECTED_REAL_KIND(p, r): the MPI type of the smallest kind with at least `p` digits
/// and range `r` (MPI_UNDEFINED: either).
fn f90_real(call: &str, p: c_int, r: c_int, complex: bool) -> MpiResult<MPI_Datatype> {
    if p == MPI_UNDEFINED && r == MPI_UNDEFINED {
        return Err(err(
            ErrorClass::Arg,
            format!("{call}: p and r are both MPI_UNDEFINED"),
        ));
    }
    let base = F90_REALS
        .iter()
        .find(|(kp, kr, _, _)| (p == MPI_UNDEFINED || p <= *kp) && (r == MPI_UNDEFINED || r <= *kr))
        .map(|&(_, _, real, cplx)| if complex { cplx } else { real })
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                format!("{call}: no Fortran kind has precision p = {p} and range r = {r}"),
            )
        })?;
    let combiner = if complex {
        Combiner::F90Complex
    } else {
        Combiner::F90Real
    };
    f90_type(combiner, vec![p as Count, r as Count], base)
}

pub(crate) fn type_create_f90_real(p: c_int, r: c_int, new: &mut MPI_Datatype) -> MpiResult<()> {
    *new = f90_real("MPI_Type_create_f90_real", p, r, false)?;
    Ok(())
}

pub(crate) fn type_create_f90_complex(p: c_int, r: c_int, new: &mut MPI_Datatype) -> MpiResult<()> {
    *new = f90_real("MPI_Type_create_f90_complex", p, r, true)?;
    Ok(())
}

pub(crate) fn type_create_f90_integer(r: c_int, new: &mut MPI_Datatype) -> MpiResult<()> {
    let base = F90_INTEGERS
        .iter()
        .find(|(kr, _)| r <= *kr)
        .map(|&(_, t)| t)
        .ok_or_else(|| {
            err(
                ErrorClass::Arg,
                format!("MPI_Type_create_f90_integer: no integer kind has range r = {r}"),
            )
        })?;
    *new = f90_type(Combiner::F90Integer, vec![r as Count], base)?;
    Ok(())
}

pub(crate) fn type_commit(d: &mut MPI_Datatype) -> MpiResult<()> {
    h::dtype("datatype", *d)?.commit();
    Ok(())
}

/// MPI_Type_free: drops the program's reference; with the last one the attributes' delete
/// callbacks run and the handle goes. Types built on this one and pending operations hold
/// the type itself, so they go on working.
pub(crate) fn type_free(d: &mut MPI_Datatype) -> MpiResult<()> {
    h::release_dtype(d, super::tattr::delete_all)
}

fn narrow(v: usize) -> c_int {
    if v > c_int::MAX as usize {
        MPI_UNDEFINED
    } else {
        v as c_int
    }
}

pub(crate) fn type_size(t: &TypeRef, size: &mut c_int) -> MpiResult<()> {
    *size = narrow(t.size());
    Ok(())
}

pub(crate) fn type_size_x(t: &TypeRef, size: &mut MPI_Count) -> MpiResult<()> {
    *size = t.size() as MPI_Count;
    Ok(())
}

pub(crate) fn type_get_extent(
    t: &TypeRef,
    lb: &mut MPI_Aint,
    extent: &mut MPI_Aint,
) -> MpiResult<()> {
    *lb = t.lb() as MPI_Aint;
    *extent = t.extent() as MPI_Aint;
    Ok(())
}

pub(crate) fn type_get_extent_x(
    t: &TypeRef,
    lb: &mut MPI_Count,
    extent: &mut MPI_Count,
) -> MpiResult<()> {
    *lb = t.lb() as MPI_Count;
    *extent = t.extent() as MPI_Count;
    Ok(())
}

pub(crate) fn type_get_true_extent(
    t: &TypeRef,
    lb: &mut MPI_Aint,
    extent: &mut MPI_Aint,
) -> MpiResult<()> {
    *lb = t.true_lb() as MPI_Aint;
    *extent = t.true_extent() as MPI_Aint;
    Ok(())
}

pub(crate) fn type_get_true_extent_x(
    t: &TypeRef,
    lb: &mut MPI_Count,
    extent: &mut MPI_Count,
) -> MpiResult<()> {
    *lb = t.true_lb() as MPI_Count;
    *extent = t.true_extent() as MPI_Count;
    Ok(())
}

pub(crate) fn type_extent(t: &TypeRef, extent: &mut MPI_Aint) -> MpiResult<()> {
    *extent = t.extent() as MPI_Aint;
    Ok(())
}

pub(crate) fn type_lb(t: &TypeRef, d: &mut MPI_Aint) -> MpiResult<()> {
    *d = t.lb() as MPI_Aint;
    Ok(())
}

pub(crate) fn type_ub(t: &TypeRef, d: &mut MPI_Aint) -> MpiResult<()> {
    *d = t.ub() as MPI_Aint;
    Ok(())
}

pub(crate) fn type_get_envelope(
    t: &TypeRef,
    ni: &mut c_int,
    na: &mut c_int,
    nd: &mut c_int,
    combiner: &mut c_int,
) -> MpiResult<()> {
    let (i, a, d, c) = t.envelope();
    *ni = i as c_int;
    *na = a as c_int;
    *nd = d as c_int;
    *combiner = c.as_mpich();
    Ok(())
}

pub(crate) fn type_get_contents(
    t: &TypeRef,
    max_i: c_int,
    max_a: c_int,
    max_d: c_int,
    ints_out: *mut c_int,
    addrs_out: *mut MPI_Aint,
    types_out: *mut MPI_Datatype,
) -> MpiResult<()> {
    if t.combiner() == Combiner::Named {
        return Err(err(
            ErrorClass::Type,
            "a predefined datatype has no contents (combiner MPI_COMBINER_NAMED)",
        ));
    }
    let (is, as_, ds) = t.contents();
    if is.len() > max_i as usize || as_.len() > max_a as usize || ds.len() > max_d as usize {
        return Err(err(
            ErrorClass::Arg,
            "the output arrays are smaller than MPI_Type_get_envelope says",
        ));
    }
    // SAFETY: MPI requires arrays of max_integers, max_addresses, max_datatypes elements.
    let (io, ao, dout) = unsafe {
        (
            h::slice_mut("array_of_integers", ints_out, is.len())?,
            h::slice_mut("array_of_addresses", addrs_out, as_.len())?,
            h::slice_mut("array_of_datatypes", types_out, ds.len())?,
        )
    };
    for (o, v) in io.iter_mut().zip(&is) {
        *o = *v as c_int;
    }
    for (o, v) in ao.iter_mut().zip(&as_) {
        *o = *v as MPI_Aint;
    }
    // Handles the caller owns and frees (MPI 4.1 §5.1.13): existing handles gain a
    // reference, so freeing them leaves the original's handle valid.
    for (o, v) in dout.iter_mut().zip(&ds) {
        *o = h::dtype_handle_ref(v);
    }
    Ok(())
}

pub(crate) fn type_get_name(
    t: &Option<h::DtRef>,
    name: *mut c_char,
    len: &mut c_int,
) -> MpiResult<()> {
    // MPI 4.1: the null datatype is named too.
    let n = t
        .as_ref()
        .map_or_else(|| "MPI_DATATYPE_NULL".to_string(), |t| t.name());
    // SAFETY: MPI requires room for MPI_MAX_OBJECT_NAME bytes.
    *len = unsafe { h::write_cstr("type_name", name, MPI_MAX_OBJECT_NAME, &n)? } as c_int;
    Ok(())
}

pub(crate) fn type_set_name(t: &TypeRef, name: &str) -> MpiResult<()> {
    t.set_name(name);
    Ok(())
}

pub(crate) fn get_address(location: *const c_void, address: &mut MPI_Aint) -> MpiResult<()> {
    *address = location as MPI_Aint;
    Ok(())
}

pub(crate) fn address(location: *mut c_void, address: &mut MPI_Aint) -> MpiResult<()> {
    get_address(location, address)
}

pub(crate) fn aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}

pub(crate) fn aint_diff(a: MPI_Aint, b: MPI_Aint) -> MPI_Aint {
    a.wrapping_sub(b)
}

/// Bytes `count` elements take packed, or MPI_ERR_COUNT when that overflows.
fn packed_bytes(t: &TypeRef, count: c_int) -> MpiResult<usize> {
    t.size()
        .checked_mul(count as usize)
        .map(|_| t.packed_size(count as usize))
        .ok_or_else(|| {
            err(
                ErrorClass::Count,
                format!("{count} elements of {} overflow", t.name()),
            )
        })
}

fn committed(t: &TypeRef) -> MpiResult<()> {
    if !t.is_committed() {
        return Err(err(
            ErrorClass::Type,
            format!("datatype {} is not committed", t.describe()),
        ));
    }
    Ok(())
}

pub(crate) fn pack(
    inbuf: *const c_void,
    incount: c_int,
    t: &TypeRef,
    outbuf: *mut c_void,
    outsize: c_int,
    position: &mut c_int,
    comm: CommId,
) -> MpiResult<()> {
    h::runtime("MPI_Pack")?.check_comm_id("MPI_Pack", comm)?;
    committed(t)?;
    let n = packed_bytes(t, incount)?;
    let pos = *position;
    if pos < 0 || n > (outsize as usize).saturating_sub(pos as usize) {
        return Err(err(
            ErrorClass::Truncate,
            format!("{n} bytes at position {pos} do not fit in outsize {outsize}"),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    if outbuf.is_null() {
        return Err(err(ErrorClass::Buffer, "outbuf is NULL"));
    }
    // SAFETY: outbuf holds outsize >= pos + n bytes (checked above, MPI's contract).
    let out = unsafe { std::slice::from_raw_parts_mut((outbuf as *mut u8).add(pos as usize), n) };
    // SAFETY: MPI requires inbuf to hold incount elements of the type.
    unsafe { t.pack_range(inbuf as *const u8, incount as usize, 0, out) };
    *position = pos + n as c_int;
    Ok(())
}

pub(crate) fn unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: &mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    t: &TypeRef,
    comm: CommId,
) -> MpiResult<()> {
    h::runtime("MPI_Unpack")?.check_comm_id("MPI_Unpack", comm)?;
    committed(t)?;
    let n = packed_bytes(t, outcount)?;
    let pos = *position;
    if pos < 0 || n > (insize as usize).saturating_sub(pos as usize) {
        return Err(err(
            ErrorClass::Truncate,
            format!("{n} bytes at position {pos} exceed insize {insize}"),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    if inbuf.is_null() {
        return Err(err(ErrorClass::Buffer, "inbuf is NULL"));
    }
    // SAFETY: inbuf holds insize >= pos + n bytes (checked above, MPI's contract).
    let input = unsafe { std::slice::from_raw_parts((inbuf as *const u8).add(pos as usize), n) };
    // SAFETY: MPI requires room for outcount elements of the type at outbuf.
    unsafe { t.unpack_range(outbuf as *mut u8, outcount as usize, 0, input) };
    *position = pos + n as c_int;
    Ok(())
}

/// The `datarep` of the `MPI_*_external` calls: MPI defines only "external32".
fn external32(datarep: &str) -> MpiResult<()> {
    if datarep != "external32" {
        return Err(err(
            ErrorClass::Arg,
            format!("datarep \"{datarep}\" is not a data representation for packing (only \"external32\" is)"),
        ));
    }
    Ok(())
}

fn external_bytes(t: &TypeRef, count: c_int) -> MpiResult<usize> {
    external32_size(t, count as usize)
}

/// Checks `position` and the buffer size for `n` bytes; the start offset.
fn external_window(
    n: usize,
    position: MPI_Aint,
    size: MPI_Aint,
    size_name: &str,
) -> MpiResult<usize> {
    if position < 0 {
        return Err(err(
            ErrorClass::Arg,
            format!("position {position} is negative"),
        ));
    }
    if size < 0 {
        return Err(err(
            ErrorClass::Arg,
            format!("{size_name} {size} is negative"),
        ));
    }
    if n > (size as usize).saturating_sub(position as usize) {
        return Err(err(
            ErrorClass::Truncate,
            format!("{n} bytes at position {position} do not fit in {size_name} {size}"),
        ));
    }
    Ok(position as usize)
}

pub(crate) fn pack_external(
    datarep: &str,
    inbuf: *const c_void,
    incount: c_int,
    t: &TypeRef,
    outbuf: *mut c_void,
    outsize: MPI_Aint,
    position: &mut MPI_Aint,
) -> MpiResult<()> {
    external32(datarep)?;
    committed(t)?;
    let n = external_bytes(t, incount)?;
    let pos = external_window(n, *position, outsize, "outsize")?;
    if n == 0 {
        return Ok(());
    }
    if outbuf.is_null() {
        return Err(err(ErrorClass::Buffer, "outbuf is NULL"));
    }
    let mut packed = Vec::with_capacity(n);
    // SAFETY: MPI requires inbuf to hold incount elements of the type.
    unsafe { pack_external32(t, inbuf as *const u8, incount as usize, &mut packed)? };
    // SAFETY: outbuf holds outsize >= pos + n bytes (checked above, MPI's contract), and
    // `packed` is ours.
    unsafe { std::ptr::copy_nonoverlapping(packed.as_ptr(), (outbuf as *mut u8).add(pos), n) };
    *position += n as MPI_Aint;
    Ok(())
}

pub(crate) fn unpack_external(
    datarep: &str,
    inbuf: *const c_void,
    insize: MPI_Aint,
    position: &mut MPI_Aint,
    outbuf: *mut c_void,
    outcount: c_int,
    t: &TypeRef,
) -> MpiResult<()> {
    external32(datarep)?;
    committed(t)?;
    let n = external_bytes(t, outcount)?;
    let pos = external_window(n, *position, insize, "insize")?;
    if n == 0 {
        return Ok(());
    }
    if inbuf.is_null() {
        return Err(err(ErrorClass::Buffer, "inbuf is NULL"));
    }
    // SAFETY: inbuf holds insize >= pos + n bytes (checked above, MPI's contract).
    let input = unsafe { std::slice::from_raw_parts((inbuf as *const u8).add(pos), n) };
    // SAFETY: MPI requires room for outcount elements of the type at outbuf, apart from
    // inbuf.
    unsafe { unpack_external32(t, input, outbuf as *mut u8, outcount as usize)? };
    *position += n as MPI_Aint;
    Ok(())
}

pub(crate) fn pack_external_size(
    datarep: &str,
    incount: c_int,
    t: &TypeRef,
    size: &mut MPI_Aint,
) -> MpiResult<()> {
    external32(datarep)?;
    *size = external_bytes(t, incount)? as MPI_Aint;
    Ok(())
}

pub(crate) fn pack_size(
    incount: c_int,
    t: &TypeRef,
    comm: CommId,
    size: &mut c_int,
) -> MpiResult<()> {
    h::runtime("MPI_Pack_size")?.check_comm_id("MPI_Pack_size", comm)?;
    *size = narrow(packed_bytes(t, incount)?);
    Ok(())
}
