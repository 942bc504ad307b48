//! The large-count (`_c`) queries of MPI 4.0 (MPI_Get_count_c, MPI_Type_size_c, extents),
//! which give the full MPI_Count range, and [`small`]. The communication calls are
//! `narrow` lines in api.in: the generator checks that their counts fit the `int`
//! counterpart (MPI_ERR_COUNT otherwise; the core's requests take such counts, but the
//! calls have not been widened yet) and calls it.

use std::ffi::{c_int, c_void};

use tsunagi_core::{ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err, DtRef};

/// `v` as an `int` count, or MPI_ERR_COUNT.
pub(crate) fn small(name: &str, v: MPI_Count) -> MpiResult<c_int> {
    c_int::try_from(v).map_err(|_| {
        err(
            ErrorClass::Count,
            format!(
                "{name} = {v} is above INT_MAX, which Tsunagi's large-count calls do not take yet"
            ),
        )
    })
}

/// MPI_Get_count_c: MPI_Get_count with an MPI_Count count.
pub(crate) fn get_count_c(
    status: &MPI_Status,
    datatype: &DtRef,
    count: &mut MPI_Count,
) -> MpiResult<()> {
    let (n, _) = datatype.count_for_bytes(super::status_bytes(status) as usize);
    *count = n.map_or(MPI_UNDEFINED as MPI_Count, |n| n as MPI_Count);
    Ok(())
}

/// MPI_Get_elements_c: MPI_Get_elements with an MPI_Count count.
pub(crate) fn get_elements_c(
    status: &MPI_Status,
    datatype: &DtRef,
    count: &mut MPI_Count,
) -> MpiResult<()> {
    super::get_elements_x(status, datatype, count)
}

/// MPI_Type_size_c: MPI_Type_size with an MPI_Count count.
pub(crate) fn type_size_c(datatype: &DtRef, size: &mut MPI_Count) -> MpiResult<()> {
    super::type_size_x(datatype, size)
}

/// MPI_Type_get_extent_c: MPI_Type_get_extent with an MPI_Count count.
pub(crate) fn type_get_extent_c(
    datatype: &DtRef,
    lb: &mut MPI_Count,
    extent: &mut MPI_Count,
) -> MpiResult<()> {
    super::type_get_extent_x(datatype, lb, extent)
}

/// MPI_Type_get_true_extent_c: MPI_Type_get_true_extent with an MPI_Count count.
pub(crate) fn type_get_true_extent_c(
    datatype: &DtRef,
    true_lb: &mut MPI_Count,
    true_extent: &mut MPI_Count,
) -> MpiResult<()> {
    super::type_get_true_extent_x(datatype, true_lb, true_extent)
}

/// The `len` elements of a large-count array as `int`s (each must fit), or None when the
/// pointer is NULL or nothing is significant here (`len` 0).
///
/// # Safety
/// `p` is NULL or points to `len` readable elements.
pub(crate) unsafe fn small_array<T: Copy + TryInto<i64>>(
    name: &str,
    p: *const T,
    len: usize,
) -> MpiResult<Option<Vec<c_int>>> {
    if p.is_null() || len == 0 {
        return Ok(None);
    }
    // SAFETY: `len` readable elements (caller's contract).
    let v = unsafe { std::slice::from_raw_parts(p, len) };
    v.iter()
        .enumerate()
        .map(|(i, &x)| small(&format!("{name}[{i}]"), x.try_into().unwrap_or(i64::MAX)))
        .collect::<MpiResult<Vec<c_int>>>()
        .map(Some)
}

/// The length of a per-peer array of a collective on `comm`: the remote group's size on
/// an intercommunicator, else the communicator's.
pub(crate) fn peer_count(comm: MPI_Comm) -> MpiResult<usize> {
    let id = h::comm("comm", comm)?;
    h::runtime("large-count collective")?.comm_peer_size(id)
}

/// The local group's size of `comm` (MPI_Reduce_scatter's recvcounts).
pub(crate) fn local_count(comm: MPI_Comm) -> MpiResult<usize> {
    let id = h::comm("comm", comm)?;
    h::runtime("large-count collective")?.comm_size(id)
}

/// The per-peer arrays of a rooted collective matter at the root only: their length
/// there ([`peer_count`]), 0 elsewhere.
pub(crate) fn rooted_count(comm: MPI_Comm, root: c_int) -> MpiResult<usize> {
    let id = h::comm("comm", comm)?;
    let rt = h::runtime("large-count collective")?;
    let at_root = if rt.comm_is_inter("large-count collective", id)? {
        root == super::coll::MPI_ROOT
    } else {
        rt.comm_rank(id)? as c_int == root
    };
    if at_root {
        rt.comm_peer_size(id)
    } else {
        Ok(0)
    }
}

/// (in-degree, out-degree) of `comm`'s process topology (neighbourhood collectives).
pub(crate) fn degrees(comm: MPI_Comm) -> MpiResult<(usize, usize)> {
    let id = h::comm("comm", comm)?;
    let rt = h::runtime("large-count neighbourhood collective")?;
    let me = rt.comm_rank(id)? as i32;
    match tsunagi_collectives::topo::topology(rt, id)? {
        Some(t) => {
            let (sources, dests) = t.neighbors(me);
            Ok((sources.len(), dests.len()))
        }
        None => Err(err(
            ErrorClass::Topology,
            "the communicator has no process topology",
        )),
    }
}

/// MPI_Type_get_envelope_c: the counts as MPI_Count; no large-count arguments (Tsunagi's
/// constructors keep their arguments as `int`s and addresses).
pub(crate) fn type_get_envelope_c(
    datatype: &DtRef,
    ni: &mut MPI_Count,
    na: &mut MPI_Count,
    nl: &mut MPI_Count,
    nd: &mut MPI_Count,
    combiner: &mut c_int,
) -> MpiResult<()> {
    let (mut i, mut a, mut d) = (0, 0, 0);
    super::type_get_envelope(datatype, &mut i, &mut a, &mut d, combiner)?;
    (*ni, *na, *nl, *nd) = (i as MPI_Count, a as MPI_Count, 0, d as MPI_Count);
    Ok(())
}

/// MPI_Pack_external_c (an MPI_Count count; sizes and positions are MPI_Aint-wide).
pub(crate) fn pack_external_c(
    datarep: &str,
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: &DtRef,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: &mut MPI_Count,
) -> MpiResult<()> {
    let mut pos = *position as MPI_Aint;
    let n = small("incount", incount)?;
    super::pack_external(
        datarep,
        inbuf,
        n,
        datatype,
        outbuf,
        outsize as MPI_Aint,
        &mut pos,
    )?;
    *position = pos as MPI_Count;
    Ok(())
}

/// MPI_Unpack_external_c.
pub(crate) fn unpack_external_c(
    datarep: &str,
    inbuf: *const c_void,
    insize: MPI_Count,
    position: &mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: &DtRef,
) -> MpiResult<()> {
    let mut pos = *position as MPI_Aint;
    let n = small("outcount", outcount)?;
    super::unpack_external(
        datarep,
        inbuf,
        insize as MPI_Aint,
        &mut pos,
        outbuf,
        n,
        datatype,
    )?;
    *position = pos as MPI_Count;
    Ok(())
}

/// MPI_Pack_external_size_c.
pub(crate) fn pack_external_size_c(
    datarep: &str,
    incount: MPI_Count,
    datatype: &DtRef,
    size: &mut MPI_Count,
) -> MpiResult<()> {
    let mut s: MPI_Aint = 0;
    super::pack_external_size(datarep, small("incount", incount)?, datatype, &mut s)?;
    *size = s as MPI_Count;
    Ok(())
}
