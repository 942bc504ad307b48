//! MPI_Register_datarep_c (MPI 4.0): a data representation whose conversion functions
//! take an MPI_Count count. Registered beside the `int` ones (file.rs), it converts whole
//! requests in one call.

use std::ffi::c_void;
use std::sync::Arc;

use tsunagi_core::datatype::TypeRef;
use tsunagi_core::{ErrorClass, MpiError, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err};

struct CDatarepC {
    name: String,
    read: MPI_Datarep_conversion_function_c,
    write: MPI_Datarep_conversion_function_c,
    extent: MPI_Datarep_extent_function,
    /// The program's `extra_state` pointer, handed back to every call.
    extra: usize,
}

fn conversion_error(what: &str, name: &str, rc: i32) -> MpiError {
    let class = ErrorClass::from_code(rc).unwrap_or(ErrorClass::Conversion);
    err(
        class,
        format!("the {what} function of datarep \"{name}\" returned {rc}"),
    )
}

impl tsunagi_io::UserDatarep for CDatarepC {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn file_extent(&self, dtype: &TypeRef) -> MpiResult<usize> {
        let Some(f) = self.extent else {
            return Ok(dtype.extent().max(0) as usize);
        };
        let mut ext: MPI_Aint = 0;
        // SAFETY: the program's MPI_Datarep_extent_function, given a valid datatype
        // handle, a pointer to a local and its own extra_state.
        let rc = unsafe { f(h::dtype_handle(dtype), &mut ext, self.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            return Err(conversion_error("extent", &self.name, rc));
        }
        usize::try_from(ext).map_err(|_| conversion_error("extent", &self.name, ext as i32))
    }

    unsafe fn read(
        &self,
        buf: *mut u8,
        dtype: &TypeRef,
        count: usize,
        file: &[u8],
    ) -> Option<MpiResult<()>> {
        let f = self.read?;
        // SAFETY: the program's read conversion: `buf` holds `count` elements of `dtype`
        // (the caller's contract), `file` their file bytes; the function only reads `file`.
        let rc = unsafe {
            f(
                buf as *mut c_void,
                h::dtype_handle(dtype),
                count as MPI_Count,
                file.as_ptr() as *mut c_void,
                0,
                self.extra as *mut c_void,
            )
        };
        Some(if rc == MPI_SUCCESS {
            Ok(())
        } else {
            Err(conversion_error("read conversion", &self.name, rc))
        })
    }

    unsafe fn write(
        &self,
        buf: *const u8,
        dtype: &TypeRef,
        count: usize,
        file: &mut [u8],
    ) -> Option<MpiResult<()>> {
        let f = self.write?;
        // SAFETY: the program's write conversion: `buf` holds `count` elements of `dtype`
        // (the caller's contract), `file` has room for their file bytes.
        let rc = unsafe {
            f(
                buf as *mut c_void,
                h::dtype_handle(dtype),
                count as MPI_Count,
                file.as_mut_ptr() as *mut c_void,
                0,
                self.extra as *mut c_void,
            )
        };
        Some(if rc == MPI_SUCCESS {
            Ok(())
        } else {
            Err(conversion_error("write conversion", &self.name, rc))
        })
    }
}

pub(crate) fn register_datarep_c(
    name: &str,
    read: MPI_Datarep_conversion_function_c,
    write: MPI_Datarep_conversion_function_c,
    extent: MPI_Datarep_extent_function,
    extra: *mut c_void,
) -> MpiResult<()> {
    super::register_user_datarep(
        "MPI_Register_datarep_c",
        name,
        Arc::new(CDatarepC {
            name: name.to_string(),
            read,
            write,
            extent,
            extra: extra as usize,
        }),
    )
}
