//! Non-blocking requests, confined to a scope.
//!
//! A request started by e.g. [`Destination::immediate_send`](crate::point_to_point::Destination::immediate_send)
//! borrows its buffer for the lifetime `'a` of a [`Scope`], so the buffer can be neither
//! touched (for receives: nor read) nor freed while the operation may still use it:
//!
//! ```no_run
//! use tsunagi::traits::*;
//! let universe = tsunagi::initialize().unwrap();
//! let world = universe.world();
//! let data = vec![1u64, 2, 3];
//! let mut got = vec![0u64; 3];
//! let peer = world.process_at_rank((world.rank() + 1) % world.size());
//! let from = world.process_at_rank((world.rank() + world.size() - 1) % world.size());
//! tsunagi::request::scope(|scope| {
//!     let r = from.immediate_receive_into(scope, &mut got[..]).unwrap();
//!     let s = peer.immediate_send(scope, &data[..]).unwrap();
//!     s.wait().unwrap();
//!     r.wait().unwrap();
//! });
//! assert_eq!(got, [1, 2, 3]);
//! ```
//!
//! **What happens to requests that are not completed.** Dropping a [`Request`] without
//! [`Request::wait`] (or a successful [`Request::test`]) does not panic: the request stays
//! registered with its scope, and when the scope ends, [`scope`] waits for every request
//! still outstanding (also when the closure panics). So the buffer is never left in use
//! after the scope, at the price that a scope whose receive never matches blocks at its
//! end; use [`Request::cancel`] for such receives. Requests of the [`StaticScope`] (buffers
//! of `'static` lifetime) are released to complete on their own when dropped.

use std::marker::PhantomData;
use std::sync::Mutex;

use tsunagi_core::{rt, ErrorClass, ReqId};

use crate::error::{Error, Result};
use crate::point_to_point::Status;

mod sealed {
    pub trait Sealed {}
}

/// Where requests live: a [`LocalScope`] made by [`scope`], or [`StaticScope`].
///
/// # Safety
/// Implementations must guarantee that a request registered and then abandoned does not
/// outlive `'a` while active. The trait is sealed.
pub unsafe trait Scope<'a>: Copy + sealed::Sealed {
    #[doc(hidden)]
    fn register(&self, id: ReqId);
    #[doc(hidden)]
    fn unregister(&self, id: ReqId);
    #[doc(hidden)]
    fn abandon(&self, id: ReqId);
}

/// A scope made by [`scope`]: waits at its end for the requests still outstanding.
pub struct LocalScope<'a> {
    outstanding: Mutex<Vec<ReqId>>,
    // Invariant in 'a, like std::thread::Scope's 'env.
    _lt: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl std::fmt::Debug for LocalScope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.outstanding.lock().map(|v| v.len()).unwrap_or(0);
        f.debug_struct("LocalScope")
            .field("outstanding", &n)
            .finish()
    }
}

impl sealed::Sealed for &LocalScope<'_> {}

// SAFETY: registered requests are waited for when the LocalScope is dropped, which happens
// inside `scope` before it returns, i.e. within 'a.
unsafe impl<'a> Scope<'a> for &LocalScope<'a> {
    fn register(&self, id: ReqId) {
        self.outstanding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
    }
    fn unregister(&self, id: ReqId) {
        let mut v = self.outstanding.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = v.iter().position(|&x| x == id) {
            v.swap_remove(i);
        }
    }
    fn abandon(&self, _id: ReqId) {
        // Stays registered: the scope waits for it at its end.
    }
}

impl Drop for LocalScope<'_> {
    fn drop(&mut self) {
        let ids = std::mem::take(
            self.outstanding
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if ids.is_empty() {
            return;
        }
        let Ok(r) = rt("scope end") else {
            // MPI is finalized: the core no longer touches any buffer.
            return;
        };
        for id in ids {
            let persistent = r.is_persistent(id);
            if r.wait_raw("request scope end", id).is_err() {
                if !r.is_active(id) {
                    // Gone or inactive: the core holds no pointer to the buffer.
                    continue;
                }
                let _ = r.cancel(id);
                if let Err(e) = r.wait_raw("request scope end", id) {
                    // The buffer may still be in use by the core and is about to be
                    // released: the only safe way out is to stop the process.
                    eprintln!(
                        "tsunagi: a request could not be completed at the end of its scope: {e}"
                    );
                    std::process::abort();
                }
            }
            if persistent {
                let _ = r.request_free(id);
            }
        }
    }
}

/// Run `f` with a scope for non-blocking requests; every request still outstanding when
/// `f` returns (or panics) is waited for before `scope` returns.
pub fn scope<'a, F, R>(f: F) -> R
where
    F: FnOnce(&LocalScope<'a>) -> R,
{
    let s = LocalScope {
        outstanding: Mutex::new(Vec::new()),
        _lt: PhantomData,
    };
    f(&s)
    // `s` is dropped here (or during unwinding), waiting for its requests.
}

/// The scope of requests on `'static` buffers: a dropped request is released to complete
/// on its own (MPI_Request_free).
#[derive(Clone, Copy, Debug)]
pub struct StaticScope;

impl sealed::Sealed for StaticScope {}

// SAFETY: the buffers live for 'static, so an abandoned request can run to completion.
unsafe impl Scope<'static> for StaticScope {
    fn register(&self, _id: ReqId) {}
    fn unregister(&self, _id: ReqId) {}
    fn abandon(&self, id: ReqId) {
        if let Ok(r) = rt("MPI_Request_free") {
            let _ = r.request_free(id);
        }
    }
}

/// A non-blocking operation in progress, borrowing its buffer for `'a`.
#[must_use = "a request should be waited for (else the scope waits for it at its end)"]
pub struct Request<'a, S: Scope<'a>> {
    id: ReqId,
    scope: S,
    done: bool,
    _lt: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl<'a, S: Scope<'a>> std::fmt::Debug for Request<'a, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id.0).finish()
    }
}

fn truncation(call: &str, st: &tsunagi_core::Status) -> Result<()> {
    if st.error == ErrorClass::Truncate as i32 {
        return Err(Error::new(
            ErrorClass::Truncate,
            format!("{call}: message truncated: the receive buffer was too small for the message"),
        ));
    }
    Ok(())
}

impl<'a, S: Scope<'a>> Request<'a, S> {
    /// Wrap a started core request; it is registered with `scope`.
    ///
    /// # Safety
    /// The request's buffer must be borrowed (mutably for receives) for `'a`.
    pub(crate) unsafe fn from_raw(id: ReqId, scope: S) -> Request<'a, S> {
        scope.register(id);
        Request {
            id,
            scope,
            done: false,
            _lt: PhantomData,
        }
    }

    /// The core's handle of the request.
    pub fn as_raw(&self) -> ReqId {
        self.id
    }

    fn finish(&mut self) {
        self.done = true;
        self.scope.unregister(self.id);
    }

    /// Block until the operation completes (MPI_Wait). A receive whose message was longer
    /// than the buffer returns an error of class `Truncate` (the part that fits is stored).
    pub fn wait(mut self) -> Result<Status> {
        let st = rt("MPI_Wait")?.wait_raw("MPI_Wait", self.id)?;
        self.finish();
        truncation("MPI_Wait", &st)?;
        Ok(Status::from_raw(st))
    }

    /// Complete the operation if it is done (MPI_Test): `Ok(result)` when complete,
    /// `Err(self)` (the request, still in progress) otherwise.
    pub fn test(self) -> std::result::Result<Result<Status>, Self> {
        let r = match rt("MPI_Test") {
            Ok(r) => r,
            Err(e) => return Ok(Err(e.into())),
        };
        match r.request_get_status(self.id) {
            Ok(Some(_)) => Ok(self.wait()),
            Ok(None) => Err(self),
            Err(e) => Ok(Err(e.into())),
        }
    }

    /// Ask for the operation to be cancelled (MPI_Cancel); wait for the request afterwards
    /// and check [`Status::is_cancelled`].
    pub fn cancel(&self) -> Result<()> {
        Ok(rt("MPI_Cancel")?.cancel(self.id)?)
    }
}

impl<'a, S: Scope<'a>> Drop for Request<'a, S> {
    fn drop(&mut self) {
        if !self.done {
            self.scope.abandon(self.id);
        }
    }
}

/// A persistent request (MPI_Send_init / MPI_Recv_init): the same operation started
/// again and again with [`PersistentRequest::start`], borrowing its buffer for `'a`.
/// Dropping it frees it once it is inactive; an active one is completed by its scope.
#[must_use = "a persistent request does nothing until started"]
pub struct PersistentRequest<'a, S: Scope<'a>> {
    id: ReqId,
    scope: S,
    active: bool,
    _lt: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl<'a, S: Scope<'a>> std::fmt::Debug for PersistentRequest<'a, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentRequest")
            .field("id", &self.id.0)
            .field("active", &self.active)
            .finish()
    }
}

impl<'a, S: Scope<'a>> PersistentRequest<'a, S> {
    /// Wrap an inactive persistent core request; it is registered with `scope`.
    ///
    /// # Safety
    /// The request's buffer must be borrowed (mutably for receives) for `'a`.
    pub(crate) unsafe fn from_raw(id: ReqId, scope: S) -> PersistentRequest<'a, S> {
        scope.register(id);
        PersistentRequest {
            id,
            scope,
            active: false,
            _lt: PhantomData,
        }
    }

    /// Start the operation (MPI_Start). An error if it is already active.
    pub fn start(&mut self) -> Result<()> {
        if self.active {
            return Err(Error::new(
                ErrorClass::Request,
                "MPI_Start: the persistent request is already active (wait for it first)",
            ));
        }
        rt("MPI_Start")?.start(self.id)?;
        self.active = true;
        Ok(())
    }

    /// Wait for the current operation (MPI_Wait); the request becomes inactive and can
    /// be started again. An inactive request gives the empty status at once.
    pub fn wait(&mut self) -> Result<Status> {
        let st = rt("MPI_Wait")?.wait_raw("MPI_Wait", self.id)?;
        self.active = false;
        truncation("MPI_Wait", &st)?;
        Ok(Status::from_raw(st))
    }

    /// Complete the current operation if it is done (MPI_Test): `Some(status)` then.
    pub fn test(&mut self) -> Result<Option<Status>> {
        match rt("MPI_Test")?.request_get_status(self.id)? {
            Some(_) => self.wait().map(Some),
            None => Ok(None),
        }
    }

    /// True while started and not yet waited for.
    pub fn is_active(&self) -> bool {
        self.active
    }
}

impl<'a, S: Scope<'a>> Drop for PersistentRequest<'a, S> {
    fn drop(&mut self) {
        if self.active {
            // The scope completes and frees it.
            self.scope.abandon(self.id);
        } else if let Ok(r) = rt("MPI_Request_free") {
            self.scope.unregister(self.id);
            let _ = r.request_free(self.id);
        }
    }
}

/// Wait for all `requests` (MPI_Waitall); statuses in order. If a receive was truncated,
/// all requests are still completed and the error is returned.
pub fn wait_all<'a, S: Scope<'a>>(
    requests: impl IntoIterator<Item = Request<'a, S>>,
) -> Result<Vec<Status>> {
    let mut reqs: Vec<Request<'a, S>> = requests.into_iter().collect();
    if reqs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Option<ReqId>> = reqs.iter().map(|r| Some(r.id)).collect();
    let sts = rt("MPI_Waitall")?.waitall("MPI_Waitall", &ids)?;
    for r in &mut reqs {
        r.finish();
    }
    for st in &sts {
        truncation("MPI_Waitall", st)?;
    }
    Ok(sts.into_iter().map(Status::from_raw).collect())
}

/// Wait for any one of `requests` (MPI_Waitany): removes the completed request from the
/// vector and returns its index (before removal) and status; `None` if the vector is empty.
pub fn wait_any<'a, S: Scope<'a>>(
    requests: &mut Vec<Request<'a, S>>,
) -> Result<Option<(usize, Status)>> {
    if requests.is_empty() {
        return Ok(None);
    }
    let ids: Vec<Option<ReqId>> = requests.iter().map(|r| Some(r.id)).collect();
    match rt("MPI_Waitany")?.waitany("MPI_Waitany", &ids)? {
        Some((i, st)) => {
            let mut r = requests.remove(i);
            r.finish();
            truncation("MPI_Waitany", &st)?;
            Ok(Some((i, Status::from_raw(st))))
        }
        None => Ok(None),
    }
}

/// Complete all `requests` if all are done (MPI_Testall): `Ok(statuses)`, or the requests
/// back when some are still in progress.
#[allow(clippy::type_complexity)]
pub fn test_all<'a, S: Scope<'a>>(
    requests: Vec<Request<'a, S>>,
) -> std::result::Result<Result<Vec<Status>>, Vec<Request<'a, S>>> {
    let r = match rt("MPI_Testall") {
        Ok(r) => r,
        Err(e) => return Ok(Err(e.into())),
    };
    for q in &requests {
        match r.request_get_status(q.id) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(requests),
            Err(e) => return Ok(Err(e.into())),
        }
    }
    Ok(wait_all(requests))
}

/// The borrow rules at work (these do not compile).
///
/// A buffer declared inside the scope cannot be used by a request of the scope:
/// ```compile_fail
/// use tsunagi::traits::*;
/// let u = tsunagi::initialize().unwrap();
/// let w = u.world();
/// let p = w.process_at_rank(0);
/// tsunagi::request::scope(|scope| {
///     let local = [1u8; 4];
///     let _r = p.immediate_send(scope, &local[..]).unwrap();
/// });
/// ```
///
/// A receive buffer cannot be read while its request may be writing it:
/// ```compile_fail
/// use tsunagi::traits::*;
/// let u = tsunagi::initialize().unwrap();
/// let w = u.world();
/// let p = w.process_at_rank(0);
/// let mut buf = [0u8; 4];
/// tsunagi::request::scope(|scope| {
///     let r = p.immediate_receive_into(scope, &mut buf[..]).unwrap();
///     let peek = buf[0];
///     r.wait().unwrap();
/// });
/// ```
///
/// Nor can a send buffer be modified or freed while it is being sent:
/// ```compile_fail
/// use tsunagi::traits::*;
/// let u = tsunagi::initialize().unwrap();
/// let w = u.world();
/// let p = w.process_at_rank(0);
/// let mut buf = vec![0u8; 4];
/// tsunagi::request::scope(|scope| {
///     let _r = p.immediate_send(scope, &buf[..]).unwrap();
///     drop(buf);
/// });
/// ```
///
/// A request cannot escape its scope:
/// ```compile_fail
/// use tsunagi::traits::*;
/// let u = tsunagi::initialize().unwrap();
/// let w = u.world();
/// let p = w.process_at_rank(0);
/// let buf = [0u8; 4];
/// let r = tsunagi::request::scope(|scope| p.immediate_send(scope, &buf[..]).unwrap());
/// ```
pub mod borrow_rules {}
