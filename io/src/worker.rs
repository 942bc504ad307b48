//! Background progress of non-blocking and split collective accesses: each file has an
//! I/O thread (started with its first non-blocking access) that runs the accesses in
//! call order. A started access is a generalized request of the core's one request
//! table; the thread completes it (`Runtime::grequest_complete`) when the access is done,
//! so MPI_Wait / MPI_Test / MPI_Waitall see it like any other request, and the call
//! returns before the data moves.
//!
//! Collective accesses in the background use the file's private communicator from the
//! I/O thread (the runtime serves any thread). A collective call made by the program's
//! thread on the same file first waits for the background ones ([`crate::File::quiesce`]),
//! so the file's collectives never run two at a time and keep the order every rank called
//! them in.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use tsunagi_core::runtime::GrequestHooks;
use tsunagi_core::{MpiResult, Status};

use crate::File;

/// A pointer into the program's buffer handed to the I/O thread.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut u8);

// SAFETY: the pointer is only dereferenced by the job of the request it belongs to, while
// MPI forbids the program to touch the buffer (from the start of a non-blocking access
// until its request completes); nothing else uses it.
unsafe impl Send for SendPtr {}

/// The data of a non-blocking write.
pub(crate) enum Bytes {
    /// The program's contiguous buffer, written in place.
    Program(SendPtr, usize),
    /// Packed (non-contiguous or converted) at the call.
    Packed(Vec<u8>),
}

impl Bytes {
    /// # Safety
    /// A `Program` buffer is valid and unmodified for the returned slice's life.
    pub(crate) unsafe fn as_slice(&self) -> &[u8] {
        match self {
            // SAFETY: forwarded contract.
            Bytes::Program(p, n) => unsafe { std::slice::from_raw_parts(p.0, *n) },
            Bytes::Packed(v) => v,
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The I/O thread of one file.
pub(crate) struct Worker {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// Accesses submitted and not finished (the program's collective calls wait for zero).
#[derive(Default)]
pub(crate) struct Pending {
    count: Mutex<usize>,
    zero: Condvar,
}

impl Pending {
    fn add(&self) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }

    fn done(&self) {
        let mut c = self.count.lock().unwrap_or_else(|p| p.into_inner());
        *c -= 1;
        if *c == 0 {
            self.zero.notify_all();
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) == 0
    }
}

impl Worker {
    fn spawn() -> std::io::Result<Worker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("tsunagi-io".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })?;
        Ok(Worker {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// Let the thread finish what it has and end.
    pub(crate) fn stop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The outcome of an access, kept for the request's query hook.
type Slot = Arc<Mutex<Option<MpiResult<Status>>>>;

struct Hooks(Slot);

impl GrequestHooks for Hooks {
    fn query(&mut self) -> MpiResult<Status> {
        // Not taken: MPI_Request_get_status queries too, before the Wait or Test that
        // collects the request queries again.
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or(Ok(Status::EMPTY))
    }
    fn free(&mut self) -> MpiResult<()> {
        Ok(())
    }
    fn cancel(&mut self, _complete: bool) -> MpiResult<()> {
        // A started access runs to its end (MPI_Test_cancelled then says false).
        Ok(())
    }
}

impl File {
    /// Run `job` on the file's I/O thread; the request that completes when it is done.
    pub(crate) fn submit(
        self: &Arc<Self>,
        job: impl FnOnce(&File) -> MpiResult<Status> + Send + 'static,
    ) -> MpiResult<tsunagi_core::ReqId> {
        let slot: Slot = Arc::new(Mutex::new(None));
        let mut w = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_none() {
            // The thread calls into the runtime (it completes requests and runs the
            // file's collectives): from now on the engine needs its mutex.
            self.rt.share_engine();
            *w = Some(
                Worker::spawn()
                    .map_err(|e| crate::posix::os_err("starting the file's I/O thread", e))?,
            );
        }
        let id = self.rt.grequest_start(Box::new(Hooks(slot.clone())))?;
        self.pending.add();
        let me = self.clone();
        let run: Job = Box::new(move || {
            // A panic must not leave the request (and every later collective call on the
            // file) waiting forever: it becomes the request's error.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&me)))
                .unwrap_or_else(|_| {
                    Err(tsunagi_core::MpiError::new(
                        tsunagi_core::ErrorClass::Intern,
                        "internal error in a background file access",
                    ))
                });
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            me.pending.done();
            // Completing cannot fail for a live generalized request of ours.
            let _ = me.rt.grequest_complete(id);
        });
        let sent = w
            .as_ref()
            .and_then(|w| w.jobs.as_ref())
            .map(|tx| tx.send(run).is_ok())
            .unwrap_or(false);
        assert!(sent, "the file's I/O thread runs while the file is open");
        Ok(id)
    }

    /// Wait until every background access of this file is done (making progress
    /// meanwhile: they may need messages this process has to move).
    pub(crate) fn quiesce(&self) -> MpiResult<()> {
        if self.pending.is_zero() {
            return Ok(());
        }
        self.rt.wait_until(|_| Ok(self.pending.is_zero()))
    }

    /// End the I/O thread (the file is closing; nothing is pending).
    pub(crate) fn stop_worker(&self) {
        if let Some(mut w) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            w.stop();
        }
    }
}
