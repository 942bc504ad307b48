//! The large-count (`_c`) queries of MPI 4.0 (MPI_Get_count_c, MPI_Type_size_c, extents),
//! which give the full MPI_Count range, and [`small`]. The communication calls are
//! `narrow` lines in api.in: the generator checks that their counts fit the `int`
//! counterpart (MPI_ERR_COUNT otherwise; the core's requests take such counts, but the
//! calls have not been widened yet) and calls it.

use std::ffi::c_int;

use tsunagi_core::{ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{err, DtRef};

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
