//! MPI_Register_datarep_c (MPI 4.0): a data representation whose conversion functions
//! take an MPI_Count count; the same registration as MPI_Register_datarep (file.rs), with
//! the large-count form of the functions.

use std::ffi::c_void;

use tsunagi_core::MpiResult;

use super::file::{register_datarep_of, Conversion};
use crate::ffi::*;

pub(crate) fn register_datarep_c(
    name: &str,
    read: MPI_Datarep_conversion_function_c,
    write: MPI_Datarep_conversion_function_c,
    extent: MPI_Datarep_extent_function,
    extra: *mut c_void,
) -> MpiResult<()> {
    register_datarep_of(
        "MPI_Register_datarep_c",
        name,
        Conversion::Count(read),
        Conversion::Count(write),
        extent,
        extra,
    )
}
