//! Start-up and shut-down ([`initialize`], [`Universe`]), threading levels, timers and
//! information about the library and the host.

use std::sync::OnceLock;
use std::time::Instant;

use tsunagi_core::{runtime, ThreadLevel};

use crate::error::{Error, ErrorClass, Result};
use crate::topology::SimpleCommunicator;

/// MPI's thread support levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Threading {
    /// Only one thread will run (MPI_THREAD_SINGLE).
    Single,
    /// Only the main thread makes MPI calls (MPI_THREAD_FUNNELED).
    Funneled,
    /// Any thread makes MPI calls, one at a time (MPI_THREAD_SERIALIZED).
    Serialized,
    /// Any thread makes MPI calls at any time (MPI_THREAD_MULTIPLE).
    Multiple,
}

impl From<Threading> for ThreadLevel {
    fn from(t: Threading) -> ThreadLevel {
        match t {
            Threading::Single => ThreadLevel::Single,
            Threading::Funneled => ThreadLevel::Funneled,
            Threading::Serialized => ThreadLevel::Serialized,
            Threading::Multiple => ThreadLevel::Multiple,
        }
    }
}

impl From<ThreadLevel> for Threading {
    fn from(t: ThreadLevel) -> Threading {
        match t {
            ThreadLevel::Single => Threading::Single,
            ThreadLevel::Funneled => Threading::Funneled,
            ThreadLevel::Serialized => Threading::Serialized,
            ThreadLevel::Multiple => Threading::Multiple,
        }
    }
}

/// The MPI environment. MPI is finalized when the universe is dropped (collective over
/// all processes: every rank must drop its universe). Communicators and requests used
/// after that return errors.
#[derive(Debug)]
pub struct Universe {
    threading: Threading,
    buffer: Option<Vec<u8>>,
}

/// Initialize MPI (thread level [`Threading::Single`]). `None` if MPI was already
/// initialized (or start-up failed; see [`try_initialize`] for the reason).
pub fn initialize() -> Option<Universe> {
    initialize_with_threading(Threading::Single).map(|(u, _)| u)
}

/// Initialize MPI asking for `threading`; returns the universe and the level provided.
/// `None` if MPI was already initialized or start-up failed.
pub fn initialize_with_threading(threading: Threading) -> Option<(Universe, Threading)> {
    match try_initialize_with_threading(threading) {
        Ok(r) => Some(r),
        Err(e) => {
            if !runtime::initialized() {
                eprintln!("tsunagi: initialization failed: {e}");
            }
            None
        }
    }
}

/// Initialize MPI, reporting why it failed.
pub fn try_initialize() -> Result<Universe> {
    try_initialize_with_threading(Threading::Single).map(|(u, _)| u)
}

/// Initialize MPI asking for `threading`, reporting why it failed.
pub fn try_initialize_with_threading(threading: Threading) -> Result<(Universe, Threading)> {
    let provided: Threading =
        tsunagi_core::init(threading.into(), &tsunagi_transports::REGISTRY)?.into();
    Ok((
        Universe {
            threading: provided,
            buffer: None,
        },
        provided,
    ))
}

/// True once MPI was initialized (even if it was finalized since).
pub fn is_initialized() -> bool {
    runtime::initialized()
}

/// True once MPI was finalized.
pub fn is_finalized() -> bool {
    runtime::finalized()
}

impl Universe {
    /// All processes of the job (MPI_COMM_WORLD).
    pub fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }
    /// This process alone (MPI_COMM_SELF).
    pub fn self_comm(&self) -> SimpleCommunicator {
        SimpleCommunicator::self_comm()
    }
    /// The thread level provided.
    pub fn threading_support(&self) -> Threading {
        self.threading
    }
    /// Attach `buffer` for buffered sends (MPI_Buffer_attach), replacing and returning the
    /// one attached before (after waiting for its messages to leave).
    pub fn set_buffer(&mut self, buffer: Vec<u8>) -> Result<Option<Vec<u8>>> {
        let old = self.detach_buffer()?;
        let mut buffer = buffer;
        runtime::rt("MPI_Buffer_attach")?.buffer_attach(buffer.as_mut_ptr(), buffer.len())?;
        self.buffer = Some(buffer);
        Ok(old)
    }
    /// Attach a fresh buffer of `size` bytes for buffered sends.
    pub fn set_buffer_size(&mut self, size: usize) -> Result<()> {
        self.set_buffer(vec![0u8; size]).map(|_| ())
    }
    /// Detach the buffer attached with [`Universe::set_buffer`], waiting until every
    /// buffered message has left (MPI_Buffer_detach).
    pub fn detach_buffer(&mut self) -> Result<Option<Vec<u8>>> {
        if self.buffer.is_none() {
            return Ok(None);
        }
        runtime::rt("MPI_Buffer_detach")?.buffer_detach()?;
        Ok(self.buffer.take())
    }
    /// Size of the attached buffer in bytes (0 if none).
    pub fn buffer_size(&self) -> usize {
        self.buffer.as_ref().map_or(0, |b| b.len())
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        // Dropped while unwinding from a panic: the other ranks may be waiting for a message
        // this rank will never send, so MPI_Finalize (a barrier) could hang the job. Take the
        // whole job down instead, as an uncaught error would (exit status 101, as a panic).
        if std::thread::panicking() && runtime::initialized() && !runtime::finalized() {
            if let Ok(rt) = runtime::rt("MPI_Abort") {
                rt.abort(101, "a rank panicked; aborting the job");
            }
        }
        if let Err(e) = self.detach_buffer() {
            eprintln!("tsunagi: detaching the buffered-send buffer failed: {e}");
        }
        if runtime::initialized() && !runtime::finalized() {
            if let Err(e) = tsunagi_core::finalize() {
                eprintln!("tsunagi: MPI_Finalize failed: {e}");
            }
        }
    }
}

/// A buffer for buffered sends attached without a [`Universe`] at hand; detached (after
/// its messages have left) when dropped. The buffer cannot be moved or freed while
/// attached, because this value owns it.
#[derive(Debug)]
pub struct AttachedBuffer {
    buf: Option<Vec<u8>>,
}

/// Attach `buffer` for buffered sends (MPI_Buffer_attach). Fails if a buffer is attached.
pub fn attach_buffer(mut buffer: Vec<u8>) -> Result<AttachedBuffer> {
    runtime::rt("MPI_Buffer_attach")?.buffer_attach(buffer.as_mut_ptr(), buffer.len())?;
    Ok(AttachedBuffer { buf: Some(buffer) })
}

impl AttachedBuffer {
    /// Size of the buffer in bytes.
    pub fn size(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }
    /// Detach and return the buffer, after every buffered message has left.
    pub fn detach(mut self) -> Result<Vec<u8>> {
        self.detach_inner()
    }
    fn detach_inner(&mut self) -> Result<Vec<u8>> {
        if self.buf.is_none() {
            return Err(Error::new(
                ErrorClass::Buffer,
                "MPI_Buffer_detach: already detached",
            ));
        }
        match runtime::rt("MPI_Buffer_detach") {
            Ok(rt) => {
                rt.buffer_detach()?;
            }
            // MPI is gone: nothing can be using the buffer any more.
            Err(_) if runtime::finalized() => {}
            Err(e) => return Err(e.into()),
        }
        Ok(self.buf.take().expect("checked"))
    }
}

impl Drop for AttachedBuffer {
    fn drop(&mut self) {
        if self.buf.is_some() {
            if let Err(e) = self.detach_inner() {
                // Cannot detach: leak the memory rather than free it under the core.
                eprintln!("tsunagi: detaching the buffered-send buffer failed: {e}");
                std::mem::forget(self.buf.take());
            }
        }
    }
}

/// Overhead in bytes that each buffered send takes from the attached buffer beyond its
/// data (MPI_BSEND_OVERHEAD).
pub const BSEND_OVERHEAD: usize = tsunagi_core::BSEND_OVERHEAD;

/// Seconds since an arbitrary point in the past (MPI_Wtime). Works before
/// initialization too (on a process-local clock).
pub fn time() -> f64 {
    match runtime::rt("MPI_Wtime") {
        Ok(rt) => rt.wtime(),
        Err(_) => {
            static EPOCH: OnceLock<Instant> = OnceLock::new();
            EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
        }
    }
}

/// Resolution of [`time`] in seconds (MPI_Wtick).
pub fn time_resolution() -> f64 {
    1e-9
}

/// The name of the host this process runs on (MPI_Get_processor_name).
pub fn processor_name() -> Result<String> {
    Ok(runtime::rt("MPI_Get_processor_name")?
        .processor_name()
        .to_string())
}

/// The version of the MPI standard implemented, (major, minor) (MPI_Get_version).
pub fn version() -> (i32, i32) {
    runtime::VERSION
}

/// A description of the library (MPI_Get_library_version).
pub fn library_version() -> String {
    runtime::library_version()
}
