//! Data symbols that MPICH's header makes programs reference, exported under MPICH's names.

use std::ffi::c_int;
use std::ptr::addr_of_mut;

/// A pointer that is a constant of the library (shared read-only by all threads).
#[repr(transparent)]
pub struct ConstPtr<T>(pub *mut T);
// SAFETY: the pointers are fixed addresses of the library's own statics; C code compares
// them against arguments and never writes through them.
unsafe impl<T> Sync for ConstPtr<T> {}

/// MPICH's `MPI_F08_status`.
#[repr(C)]
pub struct F08Status([c_int; 5]);

static mut F_STATUS_IGNORE: [c_int; 5] = [0; 5];
static mut F_STATUSES_IGNORE: [c_int; 5] = [0; 5];
static mut UNWEIGHTED: c_int = 0;
static mut WEIGHTS_EMPTY: c_int = 0;

// Writable, as MPICH's mpi.h declares them (`extern MPI_Fint *MPI_F_STATUS_IGNORE`):
// MPICH's Fortran layer (libmpichfort) stores the address of its common block's
// MPI_STATUS_IGNORE here at start-up, and so does ours (`fortran::sentinels`). A
// read-only symbol made MPICH-built Fortran programs crash in MPI_Init.
#[no_mangle]
pub static mut MPI_F_STATUS_IGNORE: *mut c_int = addr_of_mut!(F_STATUS_IGNORE) as *mut c_int;
#[no_mangle]
pub static mut MPI_F_STATUSES_IGNORE: *mut c_int = addr_of_mut!(F_STATUSES_IGNORE) as *mut c_int;
#[no_mangle]
pub static MPI_UNWEIGHTED: ConstPtr<c_int> = ConstPtr(addr_of_mut!(UNWEIGHTED));
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: ConstPtr<c_int> = ConstPtr(addr_of_mut!(WEIGHTS_EMPTY));
#[no_mangle]
pub static mut MPIR_C_MPI_UNWEIGHTED: c_int = 0;
#[no_mangle]
pub static mut MPIR_C_MPI_WEIGHTS_EMPTY: c_int = 0;
#[no_mangle]
pub static mut MPIR_F08_MPI_STATUS_IGNORE_OBJ: F08Status = F08Status([0; 5]);
#[no_mangle]
pub static mut MPIR_F08_MPI_STATUSES_IGNORE_OBJ: [F08Status; 1] = [F08Status([0; 5])];
#[no_mangle]
pub static mut MPIR_F08_MPI_IN_PLACE: c_int = 0;
#[no_mangle]
pub static mut MPIR_F08_MPI_BOTTOM: c_int = 0;
#[no_mangle]
pub static MPI_F08_STATUS_IGNORE: ConstPtr<F08Status> =
    ConstPtr(addr_of_mut!(MPIR_F08_MPI_STATUS_IGNORE_OBJ));
#[no_mangle]
pub static MPI_F08_STATUSES_IGNORE: ConstPtr<F08Status> =
    ConstPtr(addr_of_mut!(MPIR_F08_MPI_STATUSES_IGNORE_OBJ) as *mut F08Status);
#[no_mangle]
pub static MPI_T_PVAR_ALL_HANDLES: ConstPtr<u8> = ConstPtr(usize::MAX as *mut u8);
