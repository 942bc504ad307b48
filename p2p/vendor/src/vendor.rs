//! The loaded vendor MPI: which library (`TSUNAGI_VENDOR`), its shim, and the one
//! process-wide instance after the vendor's MPI_Init.

use std::ffi::{c_int, CString};
use std::sync::OnceLock;

use tsunagi_p2p::P2pError;

use crate::ffi::Api;

/// The vendor ABI families this crate knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// MPICH and its ABI (integer handles).
    Mpich,
    /// Open MPI (handles are addresses of library globals).
    OpenMpi,
}

impl Flavor {
    /// The name used in `TSUNAGI_VENDOR` and messages.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Mpich => "mpich",
            Flavor::OpenMpi => "openmpi",
        }
    }

    pub(crate) fn api(self) -> Result<&'static Api, P2pError> {
        match self {
            #[cfg(tsunagi_vendor_mpich)]
            Flavor::Mpich => Ok(&crate::ffi::mpich::API),
            #[cfg(tsunagi_vendor_openmpi)]
            Flavor::OpenMpi => Ok(&crate::ffi::openmpi::API),
            #[allow(unreachable_patterns)]
            other => Err(P2pError::Unsupported(format!(
                "this build of Tsunagi has no {} support (its mpi.h was not found when tsunagi-vendor was built)",
                other.name()
            ))),
        }
    }
}

/// What `TSUNAGI_VENDOR` asks for: a flavor and the library to load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub flavor: Flavor,
    pub path: String,
}

/// Debian's MPICH 4 library.
pub const MPICH_LIB: &str = "libmpich.so.12";
/// Debian's Open MPI 4 library.
pub const OPENMPI_LIB: &str = "libmpi.so.40";

/// Parse a `TSUNAGI_VENDOR` value: `mpich`, `openmpi`, or a path to a vendor library (its
/// flavor is found by looking for Open MPI's `ompi_mpi_comm_world` in it).
pub fn choose(value: &str) -> Result<Choice, P2pError> {
    let v = value.trim();
    match v {
        "mpich" => Ok(Choice {
            flavor: Flavor::Mpich,
            path: system_lib(MPICH_LIB),
        }),
        "openmpi" | "ompi" | "open-mpi" => Ok(Choice {
            flavor: Flavor::OpenMpi,
            path: system_lib(OPENMPI_LIB),
        }),
        p if p.contains('/') => Ok(Choice {
            flavor: flavor_of_library(p)?,
            path: p.into(),
        }),
        other => Err(P2pError::Other(format!(
            "TSUNAGI_VENDOR={other}: expected 'mpich', 'openmpi' or a path to the vendor's libmpi"
        ))),
    }
}

/// The library in Debian's multiarch directory when it is there: a bare name could find
/// Tsunagi's own library first (it answers to `libmpich.so.12` for drop-in use).
fn system_lib(name: &str) -> String {
    let p = format!("/usr/lib/x86_64-linux-gnu/{name}");
    if std::path::Path::new(&p).exists() {
        p
    } else {
        name.to_string()
    }
}

fn flavor_of_library(path: &str) -> Result<Flavor, P2pError> {
    let c = CString::new(path)
        .map_err(|_| P2pError::Other(format!("TSUNAGI_VENDOR={path}: NUL in the path")))?;
    // SAFETY: c is a valid C string; the flags load the library privately (never into the
    // global namespace, so none of its MPI_* symbols can bind Tsunagi's callers).
    let h = unsafe {
        libc::dlopen(
            c.as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND,
        )
    };
    if h.is_null() {
        // SAFETY: dlerror returns a NUL-terminated message or null, valid until the next
        // dl* call on this thread.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(P2pError::Other(format!(
            "TSUNAGI_VENDOR={path}: cannot load it: {why}"
        )));
    }
    // SAFETY: h is a live handle; the name is a NUL-terminated literal. The handle stays
    // open: the shim opens the same library again and gets the same copy.
    let ompi = unsafe { libc::dlsym(h, c"ompi_mpi_comm_world".as_ptr()) };
    Ok(if ompi.is_null() {
        Flavor::Mpich
    } else {
        Flavor::OpenMpi
    })
}

/// The vendor MPI of this process, initialized (MPI_Init_thread done).
pub struct Vendor {
    pub(crate) api: &'static Api,
    pub flavor: Flavor,
    pub path: String,
    pub rank: u32,
    pub size: usize,
    /// The vendor's MPI_Get_library_version.
    pub version: String,
    /// The vendor runs at MPI_THREAD_MULTIPLE and the threaded engine's progress thread
    /// blocks in it when idle (see `transport::VendorEvents`).
    pub blocking: bool,
}

impl Vendor {
    /// Block in `MPI_Probe` (any source, any tag, the transport's communicator) until a
    /// message waits. Only with [`Vendor::blocking`]: other threads call the vendor
    /// meanwhile.
    pub(crate) fn probe_blocking(&self) -> Result<(), P2pError> {
        debug_assert!(self.blocking);
        // SAFETY: no arguments; the shim's probe touches no shim state, and the vendor
        // runs at MPI_THREAD_MULTIPLE (`blocking`), so other threads may call it at the
        // same time.
        check(self.api, "MPI_Probe", unsafe { (self.api.probe)() })
    }

    /// Send this process an empty message under `tag` (ends a blocked probe).
    pub(crate) fn wake_self(&self, tag: c_int) -> Result<(), P2pError> {
        // SAFETY: plain ints; as in probe_blocking, no shim state and MPI_THREAD_MULTIPLE.
        check(self.api, "MPI_Isend", unsafe {
            (self.api.wake)(self.rank as c_int, tag)
        })
    }
}

/// Whether the threaded engine's progress thread should block in the vendor
/// (`TSUNAGI_PROGRESS=threaded` and `TSUNAGI_VENDOR_BLOCK=1`); unset, it polls with naps.
///
/// Neither vendor's blocking `MPI_Probe` sleeps: Debian's MPICH is ch4:ucx, whose probe
/// spins in UCX's progress without yielding (NPB EP 1.97× MPICH alone when blocking,
/// bandwidth 0.15×), and Open MPI 4.1's probe at `MPI_THREAD_MULTIPLE` waits in
/// `ompi_sync_wait_mt`, which calls `opal_progress` in a loop (`mpi_yield_when_idle` is
/// off: `--oversubscribe` only allows oversubscription, it does not set it when the node
/// is not actually oversubscribed). Either way a blocked progress thread takes a core from
/// the computation: over Open MPI it was a quarter of all samples of a CG.A/2 rank, and at
/// real-time round-robin priority it shares the core with the application thread in
/// whole time slices (CG.A/2 2-7× Open MPI alone; 1.1× polling with naps;
/// docs/vendor-mpi.md, session 11). On a node with a core to spare per rank blocking
/// costs nothing, hence the setting.
fn wants_blocking() -> Result<bool, P2pError> {
    let threaded = tsunagi_p2p::ProgressMode::from_env().map_err(P2pError::Other)?
        == tsunagi_p2p::ProgressMode::Threaded;
    match std::env::var("TSUNAGI_VENDOR_BLOCK").as_deref() {
        Err(_) | Ok("") => Ok(false),
        Ok("1") | Ok("yes") => Ok(threaded),
        Ok("0") | Ok("no") => Ok(false),
        Ok(other) => Err(P2pError::Other(format!(
            "TSUNAGI_VENDOR_BLOCK={other}: expected 1 (block in the vendor when idle, threaded engine) or 0 (poll it)"
        ))),
    }
}

static VENDOR: OnceLock<Vendor> = OnceLock::new();

/// The vendor MPI initialized by the vendor bootstrap, if any.
pub fn current() -> Option<&'static Vendor> {
    VENDOR.get()
}

/// A vendor call's return code as a result. Inlined into every call (the success test is
/// one comparison); the error's text is built out of line.
#[inline]
pub(crate) fn check(api: &Api, what: &str, rc: c_int) -> Result<(), P2pError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(vendor_error(api, what, rc))
    }
}

#[cold]
#[inline(never)]
fn vendor_error(api: &Api, what: &str, rc: c_int) -> P2pError {
    P2pError::Other(format!("vendor {what}: {}", api.error_string(rc)))
}

/// Load the chosen vendor library and run its MPI_Init_thread, asking for
/// MPI_THREAD_SERIALIZED: Tsunagi calls the vendor only under its transport lock (or from
/// the main thread during start-up and finalize), but from whichever thread holds that
/// lock. The threaded engine with `TSUNAGI_VENDOR_BLOCK=1` asks for MPI_THREAD_MULTIPLE
/// instead, because its progress thread then blocks in the vendor's `MPI_Probe` without
/// that lock; a vendor that does not provide it is an error naming the way out
/// (`TSUNAGI_VENDOR_BLOCK=0`, the default).
pub fn init(choice: &Choice) -> Result<&'static Vendor, P2pError> {
    if let Some(v) = VENDOR.get() {
        return Ok(v);
    }
    let api = choice.flavor.api()?;
    // SAFETY: plain function call into the shim linked into this crate.
    let openmpi_abi = unsafe { (api.abi_is_openmpi)() } != 0;
    debug_assert_eq!(openmpi_abi, choice.flavor == Flavor::OpenMpi);
    let path = CString::new(choice.path.as_str())
        .map_err(|_| P2pError::Other("TSUNAGI_VENDOR: NUL in the path".into()))?;
    let mut err = [0 as std::ffi::c_char; 512];
    // SAFETY: path is a valid C string and err a writable buffer of the length given.
    let rc = unsafe { (api.load)(path.as_ptr(), err.as_mut_ptr(), err.len() as c_int) };
    if rc != 0 {
        // SAFETY: the shim wrote a NUL-terminated message with snprintf.
        let why = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        return Err(P2pError::Other(format!(
            "TSUNAGI_VENDOR ({}): {why}",
            choice.path
        )));
    }
    // The vendor's own values of the thread levels.
    let (mut single, mut funneled, mut serialized, mut multiple) = (0, 0, 0, 0);
    // SAFETY: four writable ints.
    unsafe { (api.thread_levels)(&mut single, &mut funneled, &mut serialized, &mut multiple) };
    let mut provided: c_int = -1;
    // SAFETY: the library is loaded; provided is a writable int. Called once per process
    // (guarded by the OnceLock check above and the bootstrap's single call at MPI_Init).
    let blocking = wants_blocking()?;
    let required = if blocking { multiple } else { serialized };
    let rc = unsafe { (api.init)(required, &mut provided) };
    check(api, "MPI_Init_thread", rc)?;
    if blocking && provided < multiple {
        return Err(P2pError::Unsupported(format!(
            "the vendor MPI ({}) provides thread level {provided}, below MPI_THREAD_MULTIPLE ({multiple}), which the threaded engine needs to block in it from its progress thread; set TSUNAGI_VENDOR_BLOCK=0 to poll it instead, or use TSUNAGI_PROGRESS=polling",
            choice.path
        )));
    }
    if provided < serialized {
        return Err(P2pError::Unsupported(format!(
            "the vendor MPI ({}) provides thread level {provided}, below MPI_THREAD_SERIALIZED ({serialized}); Tsunagi calls it from its progress thread and from application threads (one at a time)",
            choice.path
        )));
    }
    let (mut rank, mut size) = (0, 0);
    // SAFETY: the vendor is initialized; writable ints.
    check(api, "MPI_Comm_rank", unsafe { (api.rank)(&mut rank) })?;
    // SAFETY: as above.
    check(api, "MPI_Comm_size", unsafe { (api.size)(&mut size) })?;
    let v = Vendor {
        api,
        flavor: choice.flavor,
        path: choice.path.clone(),
        rank: rank as u32,
        size: size as usize,
        version: api.library_version(),
        blocking,
    };
    Ok(VENDOR.get_or_init(|| v))
}
