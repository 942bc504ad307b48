//! The C shim's functions (`shim.c`), one set per vendor compiled into this build, gathered
//! into an [`Api`] table so the rest of the crate picks a vendor at run time.
//!
//! Every function returns the vendor's MPI error code (0 = MPI_SUCCESS) or a negative shim
//! code; [`Api::error_string`] turns either into text.

use std::ffi::{c_char, c_int, CStr};

/// The shim's entry points for one vendor.
#[derive(Clone, Copy)]
pub(crate) struct Api {
    pub load: unsafe extern "C" fn(*const c_char, *mut c_char, c_int) -> c_int,
    pub thread_levels: unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int, *mut c_int),
    pub init: unsafe extern "C" fn(c_int, *mut c_int) -> c_int,
    pub rank: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub size: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub isend: unsafe extern "C" fn(*const u8, c_int, c_int, c_int, c_int, *mut c_int) -> c_int,
    pub irecv: unsafe extern "C" fn(*mut u8, c_int, c_int, c_int, c_int, *mut c_int) -> c_int,
    pub irecv_any: unsafe extern "C" fn(*mut u8, c_int, *mut c_int) -> c_int,
    pub restart_any: unsafe extern "C" fn(c_int) -> c_int,
    pub test: unsafe extern "C" fn(c_int, *mut c_int) -> c_int,
    pub test_some: unsafe extern "C" fn(*const c_int, c_int, *mut c_int, *mut c_int) -> c_int,
    pub test_any:
        unsafe extern "C" fn(c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int,
    pub iprobe: unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int,
    pub recv: unsafe extern "C" fn(*mut u8, c_int, c_int, c_int) -> c_int,
    pub iprobe_tag: unsafe extern "C" fn(c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int,
    pub iprobe_bulk: unsafe extern "C" fn(c_int, c_int, *mut c_int) -> c_int,
    pub probe: unsafe extern "C" fn() -> c_int,
    pub wake: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub allgather: unsafe extern "C" fn(*const u8, c_int, *mut u8) -> c_int,
    pub allgatherv:
        unsafe extern "C" fn(*const u8, c_int, *mut u8, *const c_int, *const c_int) -> c_int,
    pub abort: unsafe extern "C" fn(c_int) -> c_int,
    pub finalize: unsafe extern "C" fn() -> c_int,
    pub error_string: unsafe extern "C" fn(c_int, *mut c_char, c_int),
    pub library_version: unsafe extern "C" fn(*mut c_char, c_int),
    pub abi_is_openmpi: unsafe extern "C" fn() -> c_int,
}

impl Api {
    /// The text of a vendor or shim error code.
    pub fn error_string(&self, code: c_int) -> String {
        let mut buf = [0 as c_char; 512];
        // SAFETY: the shim writes at most buf.len() bytes, NUL-terminated (snprintf).
        unsafe { (self.error_string)(code, buf.as_mut_ptr(), buf.len() as c_int) };
        // SAFETY: snprintf terminated the string inside buf.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// The vendor's MPI_Get_library_version text (after loading).
    pub fn library_version(&self) -> String {
        let mut buf = [0 as c_char; 8192];
        // SAFETY: as in error_string.
        unsafe { (self.library_version)(buf.as_mut_ptr(), buf.len() as c_int) };
        // SAFETY: snprintf terminated the string inside buf.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Declares the shim functions of one vendor (prefix `tsunagi_vshim_<vendor>_`) and an
/// [`Api`] table of them.
macro_rules! api_table {
    ($modname:ident, $prefix:literal) => {
        pub(crate) mod $modname {
            use std::ffi::{c_char, c_int};
            extern "C" {
                #[link_name = concat!($prefix, "load")]
                fn load(path: *const c_char, err: *mut c_char, errlen: c_int) -> c_int;
                #[link_name = concat!($prefix, "thread_levels")]
                fn thread_levels(a: *mut c_int, b: *mut c_int, c: *mut c_int, d: *mut c_int);
                #[link_name = concat!($prefix, "init")]
                fn init(required: c_int, provided: *mut c_int) -> c_int;
                #[link_name = concat!($prefix, "rank")]
                fn rank(r: *mut c_int) -> c_int;
                #[link_name = concat!($prefix, "size")]
                fn size(s: *mut c_int) -> c_int;
                #[link_name = concat!($prefix, "isend")]
                fn isend(
                    buf: *const u8,
                    len: c_int,
                    dest: c_int,
                    tag: c_int,
                    on_bulk: c_int,
                    idx: *mut c_int,
                ) -> c_int;
                #[link_name = concat!($prefix, "irecv")]
                fn irecv(
                    buf: *mut u8,
                    len: c_int,
                    src: c_int,
                    tag: c_int,
                    on_bulk: c_int,
                    idx: *mut c_int,
                ) -> c_int;
                #[link_name = concat!($prefix, "irecv_any")]
                fn irecv_any(buf: *mut u8, len: c_int, idx: *mut c_int) -> c_int;
                #[link_name = concat!($prefix, "restart_any")]
                fn restart_any(idx: c_int) -> c_int;
                #[link_name = concat!($prefix, "test")]
                fn test(idx: c_int, done: *mut c_int) -> c_int;
                #[link_name = concat!($prefix, "test_some")]
                fn test_some(
                    idx: *const c_int,
                    n: c_int,
                    done: *mut c_int,
                    ndone: *mut c_int,
                ) -> c_int;
                #[link_name = concat!($prefix, "test_any")]
                fn test_any(
                    idx: c_int,
                    done: *mut c_int,
                    src: *mut c_int,
                    tag: *mut c_int,
                    count: *mut c_int,
                ) -> c_int;
                #[link_name = concat!($prefix, "iprobe")]
                fn iprobe(
                    found: *mut c_int,
                    src: *mut c_int,
                    tag: *mut c_int,
                    count: *mut c_int,
                ) -> c_int;
                #[link_name = concat!($prefix, "recv")]
                fn recv(buf: *mut u8, len: c_int, src: c_int, tag: c_int) -> c_int;
                #[link_name = concat!($prefix, "iprobe_tag")]
                fn iprobe_tag(
                    tag: c_int,
                    found: *mut c_int,
                    src: *mut c_int,
                    count: *mut c_int,
                ) -> c_int;
                #[link_name = concat!($prefix, "iprobe_bulk")]
                fn iprobe_bulk(src: c_int, tag: c_int, found: *mut c_int) -> c_int;
                #[link_name = concat!($prefix, "probe")]
                fn probe() -> c_int;
                #[link_name = concat!($prefix, "wake")]
                fn wake(me: c_int, tag: c_int) -> c_int;
                #[link_name = concat!($prefix, "allgather")]
                fn allgather(send: *const u8, len: c_int, recv: *mut u8) -> c_int;
                #[link_name = concat!($prefix, "allgatherv")]
                fn allgatherv(
                    send: *const u8,
                    len: c_int,
                    recv: *mut u8,
                    counts: *const c_int,
                    displs: *const c_int,
                ) -> c_int;
                #[link_name = concat!($prefix, "abort")]
                fn abort(code: c_int) -> c_int;
                #[link_name = concat!($prefix, "finalize")]
                fn finalize() -> c_int;
                #[link_name = concat!($prefix, "error_string")]
                fn error_string(code: c_int, buf: *mut c_char, len: c_int);
                #[link_name = concat!($prefix, "library_version")]
                fn library_version(buf: *mut c_char, len: c_int);
                #[link_name = concat!($prefix, "abi_is_openmpi")]
                fn abi_is_openmpi() -> c_int;
            }
            pub(crate) static API: super::Api = super::Api {
                load,
                thread_levels,
                init,
                rank,
                size,
                isend,
                irecv,
                irecv_any,
                restart_any,
                test,
                test_some,
                test_any,
                iprobe,
                recv,
                iprobe_tag,
                iprobe_bulk,
                probe,
                wake,
                allgather,
                allgatherv,
                abort,
                finalize,
                error_string,
                library_version,
                abi_is_openmpi,
            };
        }
    };
}

#[cfg(tsunagi_vendor_mpich)]
api_table!(mpich, "tsunagi_vshim_mpich_");
#[cfg(tsunagi_vendor_openmpi)]
api_table!(openmpi, "tsunagi_vshim_openmpi_");
