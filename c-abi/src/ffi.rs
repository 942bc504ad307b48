//! The C types and predefined handle values of MPICH's ABI (the values match
//! `include/mpi.h`; `tests` check both against each other through a C program).

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_int, c_long, c_void};

pub type MPI_Aint = c_long;
pub type MPI_Count = c_long;
pub type MPI_Offset = c_long;
pub type MPI_Fint = c_int;
pub type MPI_Comm = c_int;
pub type MPI_Group = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Op = c_int;
pub type MPI_Request = c_int;
pub type MPI_Errhandler = c_int;
pub type MPI_Info = c_int;
pub type MPI_Win = c_int;
pub type MPI_Message = c_int;
/// ROMIO's file handle (a pointer); Tsunagi has no MPI-IO yet.
pub type MPI_File = *mut c_void;
/// The tools interface's handles: opaque pointers in MPICH's ABI (Tsunagi stores a
/// table index plus one in them, see `imp::tools`).
pub type MPI_T_enum = *mut c_void;
pub type MPI_T_cvar_handle = *mut c_void;
pub type MPI_T_pvar_handle = *mut c_void;
pub type MPI_T_pvar_session = *mut c_void;
pub type MPI_T_event_registration = *mut c_void;
pub type MPI_T_event_instance = *mut c_void;
/// A session (MPI 4.0): an `int` handle, as in MPICH.
pub type MPI_Session = c_int;
pub const MPI_SESSION_NULL: MPI_Session = 0x3800_0000;
/// C enums of the tools interface (an `int` in the ABI).
pub type MPI_T_cb_safety = c_int;
pub type MPI_T_source_order = c_int;

/// MPICH's `MPI_Status` (20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}

pub type MPI_User_function =
    Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype)>;
pub type MPI_Comm_errhandler_function =
    Option<unsafe extern "C" fn(*mut MPI_Comm, *mut c_int, ...)>;
pub type MPI_Comm_copy_attr_function = Option<
    unsafe extern "C" fn(
        MPI_Comm,
        c_int,
        *mut c_void,
        *mut c_void,
        *mut c_void,
        *mut c_int,
    ) -> c_int,
>;
pub type MPI_Comm_delete_attr_function =
    Option<unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int>;
pub type MPI_Copy_function = MPI_Comm_copy_attr_function;
pub type MPI_Type_copy_attr_function = Option<
    unsafe extern "C" fn(
        MPI_Datatype,
        c_int,
        *mut c_void,
        *mut c_void,
        *mut c_void,
        *mut c_int,
    ) -> c_int,
>;
pub type MPI_Type_delete_attr_function =
    Option<unsafe extern "C" fn(MPI_Datatype, c_int, *mut c_void, *mut c_void) -> c_int>;

/// Callback types only the stubs take (an opaque function pointer each).
pub type OpaqueFn = Option<unsafe extern "C" fn()>;
/// The window callbacks: MPI_Win is an `int` like MPI_Comm, so these are the
/// communicator types (one Fortran trampoline serves both).
pub type MPI_Win_copy_attr_function = MPI_Comm_copy_attr_function;
pub type MPI_Win_delete_attr_function = MPI_Comm_delete_attr_function;
pub type MPI_Win_errhandler_function = MPI_Comm_errhandler_function;
pub type MPI_File_errhandler_function =
    Option<unsafe extern "C" fn(*mut MPI_File, *mut c_int, ...)>;
pub type MPI_Datarep_conversion_function = Option<
    unsafe extern "C" fn(
        *mut c_void,
        MPI_Datatype,
        c_int,
        *mut c_void,
        MPI_Offset,
        *mut c_void,
    ) -> c_int,
>;
pub type MPI_Datarep_conversion_function_c = Option<
    unsafe extern "C" fn(
        *mut c_void,
        MPI_Datatype,
        MPI_Count,
        *mut c_void,
        MPI_Offset,
        *mut c_void,
    ) -> c_int,
>;
pub type MPI_User_function_c =
    Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype)>;
/// The Fortran 2008 `TYPE(MPI_Status)`: the C layout.
pub type MPI_F08_status = MPI_Status;
pub type MPI_Datarep_extent_function =
    Option<unsafe extern "C" fn(MPI_Datatype, *mut MPI_Aint, *mut c_void) -> c_int>;
pub type MPI_T_event_cb_function = OpaqueFn;
/// Same C shape as the communicator's: (handle *, int *, ...).
pub type MPI_Session_errhandler_function = MPI_Comm_errhandler_function;
pub type MPI_T_event_free_cb_function = OpaqueFn;
pub type MPI_T_event_dropped_cb_function = OpaqueFn;
pub type MPI_Delete_function = MPI_Comm_delete_attr_function;

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_MAX_PROCESSOR_NAME: usize = 128;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
/// MPI_MAX_PORT_NAME (mpi.h).
pub const MPI_MAX_PORT_NAME: usize = 256;
pub const MPI_MAX_INFO_KEY: usize = 255;
pub const MPI_MAX_INFO_VAL: usize = 1024;
pub const MPI_KEYVAL_INVALID: c_int = 0x2400_0000;
pub const MPI_COMM_TYPE_SHARED: c_int = 1;
pub const MPI_COMM_TYPE_HW_GUIDED: c_int = 2;
pub const MPI_COMM_TYPE_HW_UNGUIDED: c_int = 3;
pub const MPI_COMM_TYPE_RESOURCE_GUIDED: c_int = 4;

pub const MPI_COMM_NULL: MPI_Comm = 0x0400_0000;
pub const MPI_COMM_WORLD: MPI_Comm = 0x4400_0000;
pub const MPI_COMM_SELF: MPI_Comm = 0x4400_0001;
pub const MPI_GROUP_NULL: MPI_Group = 0x0800_0000;
pub const MPI_GROUP_EMPTY: MPI_Group = 0x4800_0000;
pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x0c00_0000;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x1400_0000;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x5400_0000;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x5400_0001;
pub const MPI_ERRORS_ABORT: MPI_Errhandler = 0x5400_0003;
pub const MPI_OP_NULL: MPI_Op = 0x1800_0000;
pub const MPI_INFO_NULL: MPI_Info = 0x1c00_0000;
pub const MPI_INFO_ENV: MPI_Info = 0x5c00_0001;
pub const MPI_REQUEST_NULL: MPI_Request = 0x2c00_0000;
pub const MPI_MESSAGE_NULL: MPI_Message = 0x2c00_0000;
pub const MPI_MESSAGE_NO_PROC: MPI_Message = 0x6c00_0000;

/// Predefined attribute keys, in the order of [`tsunagi_core::runtime::PredefinedAttr`].
pub const MPI_TAG_UB: c_int = 0x6440_0001;
pub const MPI_HOST: c_int = 0x6440_0003;
pub const MPI_IO: c_int = 0x6440_0005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x6440_0007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x6440_0009;
pub const MPI_LASTUSEDCODE: c_int = 0x6440_000b;
pub const MPI_APPNUM: c_int = 0x6440_000d;

/// Every predefined datatype: its C name and MPICH's handle value.
pub const BUILTIN_TYPES: &[(&str, MPI_Datatype)] = &[
    ("MPI_CHAR", 0x4c000101),
    ("MPI_SIGNED_CHAR", 0x4c000118),
    ("MPI_UNSIGNED_CHAR", 0x4c000102),
    ("MPI_BYTE", 0x4c00010d),
    ("MPI_WCHAR", 0x4c00040e),
    ("MPI_SHORT", 0x4c000203),
    ("MPI_UNSIGNED_SHORT", 0x4c000204),
    ("MPI_INT", 0x4c000405),
    ("MPI_UNSIGNED", 0x4c000406),
    ("MPI_LONG", 0x4c000807),
    ("MPI_UNSIGNED_LONG", 0x4c000808),
    ("MPI_LONG_LONG_INT", 0x4c000809),
    ("MPI_UNSIGNED_LONG_LONG", 0x4c000819),
    ("MPI_FLOAT", 0x4c00040a),
    ("MPI_DOUBLE", 0x4c00080b),
    ("MPI_LONG_DOUBLE", 0x4c00100c),
    ("MPI_PACKED", 0x4c00010f),
    ("MPI_INT8_T", 0x4c000137),
    ("MPI_INT16_T", 0x4c000238),
    ("MPI_INT32_T", 0x4c000439),
    ("MPI_INT64_T", 0x4c00083a),
    ("MPI_UINT8_T", 0x4c00013b),
    ("MPI_UINT16_T", 0x4c00023c),
    ("MPI_UINT32_T", 0x4c00043d),
    ("MPI_UINT64_T", 0x4c00083e),
    ("MPI_C_BOOL", 0x4c00013f),
    ("MPI_C_FLOAT_COMPLEX", 0x4c000840),
    ("MPI_C_DOUBLE_COMPLEX", 0x4c001041),
    ("MPI_C_LONG_DOUBLE_COMPLEX", 0x4c002042),
    ("MPI_AINT", 0x4c000843),
    ("MPI_OFFSET", 0x4c000844),
    ("MPI_COUNT", 0x4c000845),
    ("MPI_FLOAT_INT", 0x8c000000u32 as i32),
    ("MPI_DOUBLE_INT", 0x8c000001u32 as i32),
    ("MPI_LONG_INT", 0x8c000002u32 as i32),
    ("MPI_SHORT_INT", 0x8c000003u32 as i32),
    ("MPI_LONG_DOUBLE_INT", 0x8c000004u32 as i32),
    ("MPI_2INT", 0x4c000816),
    ("MPI_CHARACTER", 0x4c00011a),
    ("MPI_LOGICAL", 0x4c00041d),
    ("MPI_INTEGER", 0x4c00041b),
    ("MPI_REAL", 0x4c00041c),
    ("MPI_DOUBLE_PRECISION", 0x4c00081f),
    ("MPI_COMPLEX", 0x4c00081e),
    ("MPI_DOUBLE_COMPLEX", 0x4c001022),
    ("MPI_2INTEGER", 0x4c000820),
    ("MPI_2REAL", 0x4c000821),
    ("MPI_2DOUBLE_PRECISION", 0x4c001023),
    ("MPI_INTEGER1", 0x4c00012d),
    ("MPI_INTEGER2", 0x4c00022f),
    ("MPI_INTEGER4", 0x4c000430),
    ("MPI_INTEGER8", 0x4c000831),
    ("MPI_REAL4", 0x4c000427),
    ("MPI_REAL8", 0x4c000829),
    ("MPI_REAL16", 0x4c00102b),
    ("MPI_COMPLEX8", 0x4c000828),
    ("MPI_COMPLEX16", 0x4c00102a),
    ("MPI_COMPLEX32", 0x4c00202c),
    ("MPI_CXX_BOOL", 0x4c000133),
    ("MPI_CXX_FLOAT_COMPLEX", 0x4c000834),
    ("MPI_CXX_DOUBLE_COMPLEX", 0x4c001035),
    ("MPI_CXX_LONG_DOUBLE_COMPLEX", 0x4c002036),
];

pub type MPI_Grequest_query_function =
    Option<unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int>;
pub type MPI_Grequest_free_function = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
pub type MPI_Grequest_cancel_function = Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>;
