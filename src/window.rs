//! One-sided communication: [`Window`]s of typed elements and scoped access epochs.
//!
//! ```no_run
//! use tsunagi::traits::*;
//! use tsunagi::window::{LockKind, Window};
//!
//! let universe = tsunagi::initialize().unwrap();
//! let world = universe.world();
//! let (rank, size) = (world.rank(), world.size());
//! let mut win = Window::<i64>::allocate(&world, size as usize).unwrap();
//! // Everyone writes its rank into slot `rank` of every window.
//! let mine = [rank as i64];
//! win.fence(|epoch| {
//!     for t in 0..size {
//!         epoch.put(&mine, t, rank as usize).unwrap();
//!     }
//! })
//! .unwrap();
//! win.with_local(|slots| assert_eq!(slots[0], 0)).unwrap();
//! // A shared counter on rank 0.
//! let one = 1i64;
//! let mut ticket = 0i64;
//! win.lock(0, LockKind::Exclusive, |epoch| {
//!     epoch.fetch_and_op(&one, &mut ticket, 0, 0, &tsunagi::collective::SystemOperation::sum())
//! })
//! .unwrap()
//! .unwrap();
//! ```
//!
//! An epoch is a closure: the buffers its operations use are borrowed for longer than the
//! epoch (`'env`), which ends (fence, unlock) before the call returns, so no operation
//! outlives its data. Local access ([`Window::with_local`]) holds an exclusive lock on
//! the own window, so no passive-target access of another process runs meanwhile, and no
//! active-target epoch is open then (they all close before their call returns).

use std::marker::PhantomData;
use std::sync::Arc;

use tsunagi_rma::{Access, Kind};

use crate::collective::Operation;
use crate::datatype::{Equivalence, PlainData};
use crate::error::{Error, ErrorClass, Result};
use crate::topology::{Communicator, Rank};

/// The kind of a passive-target lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// MPI_LOCK_EXCLUSIVE.
    Exclusive,
    /// MPI_LOCK_SHARED.
    Shared,
}

/// A window of `len` elements of `T` on every process of a communicator
/// (`MPI_Win_allocate`); freed (collectively) when dropped.
pub struct Window<T: Equivalence + PlainData> {
    raw: Arc<tsunagi_rma::Window>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Equivalence + PlainData> Window<T> {
    /// Allocate `len` zeroed elements on every process of `comm` (collective).
    pub fn allocate<C: Communicator + ?Sized>(comm: &C, len: usize) -> Result<Window<T>> {
        let rt = tsunagi_core::rt("MPI_Win_allocate")?;
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::new(ErrorClass::Size, "MPI_Win_allocate: window size overflows")
        })?;
        let raw = tsunagi_rma::Window::allocate(
            rt,
            comm.comm_id(),
            bytes,
            std::mem::size_of::<T>().max(1) as i64,
        )?;
        Ok(Window {
            raw,
            len,
            _t: PhantomData,
        })
    }

    /// Elements in this process's part of the window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether this process's part is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The core window (for interoperation with `tsunagi_rma`).
    pub fn as_raw(&self) -> &Arc<tsunagi_rma::Window> {
        &self.raw
    }

    /// Run `f` on this process's part of the window, under an exclusive lock of it.
    pub fn with_local<R>(&mut self, f: impl FnOnce(&mut [T]) -> R) -> Result<R> {
        let me = self.raw.rank() as Rank;
        self.raw.lock(tsunagi_rma::LOCK_EXCLUSIVE, me, 0)?;
        // SAFETY: the window owns `len` elements of T at its base, 64-byte aligned (T's
        // alignment is at most that for Equivalence types); the exclusive lock keeps other
        // processes' passive-target accesses out, and no active-target epoch is open (they
        // are scoped and close before their call returns), so nothing else touches the
        // memory while `f` runs. Every bit pattern is a valid T (PlainData).
        let out = {
            let s = unsafe { std::slice::from_raw_parts_mut(self.raw.base() as *mut T, self.len) };
            f(s)
        };
        self.raw.unlock(me)?;
        Ok(out)
    }

    /// An active-target epoch between two fences (collective): every process calls it.
    pub fn fence<'env, F, R>(&mut self, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        self.raw.fence(tsunagi_rma::MODE_NOPRECEDE)?;
        let out = f(&Epoch::new(&self.raw));
        self.raw.fence(tsunagi_rma::MODE_NOSUCCEED)?;
        Ok(out)
    }

    /// A passive-target epoch to `target`: locked, `f`, unlocked (every operation is
    /// complete at the target when this returns).
    pub fn lock<'env, F, R>(&mut self, target: Rank, kind: LockKind, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        let k = match kind {
            LockKind::Exclusive => tsunagi_rma::LOCK_EXCLUSIVE,
            LockKind::Shared => tsunagi_rma::LOCK_SHARED,
        };
        self.raw.lock(k, target, 0)?;
        let out = f(&Epoch::new(&self.raw));
        self.raw.unlock(target)?;
        Ok(out)
    }

    /// A passive-target epoch to every process (shared locks).
    pub fn lock_all<'env, F, R>(&mut self, f: F) -> Result<R>
    where
        F: for<'scope> FnOnce(&'scope Epoch<'scope, 'env, T>) -> R,
    {
        self.raw.lock_all(0)?;
        let out = f(&Epoch::new(&self.raw));
        self.raw.unlock_all()?;
        Ok(out)
    }
}

impl<T: Equivalence + PlainData> Drop for Window<T> {
    fn drop(&mut self) {
        if let Err(e) = self.raw.free() {
            eprintln!("tsunagi: freeing a window failed: {e}");
        }
    }
}

/// An open access epoch of a [`Window`]. Operations borrow their buffers for `'env`,
/// which outlives the epoch.
pub struct Epoch<'scope, 'env: 'scope, T> {
    raw: &'scope Arc<tsunagi_rma::Window>,
    _env: PhantomData<&'env mut &'env ()>,
    _t: PhantomData<T>,
}

impl<'scope, 'env, T: Equivalence + PlainData> Epoch<'scope, 'env, T> {
    fn new(raw: &'scope Arc<tsunagi_rma::Window>) -> Self {
        Epoch {
            raw,
            _env: PhantomData,
            _t: PhantomData,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn op(
        &self,
        call: &str,
        kind: Kind,
        origin: Option<(*const T, usize)>,
        compare: Option<*const T>,
        result: Option<(*mut T, usize)>,
        target: Rank,
        disp: usize,
        count: usize,
        op: Option<&tsunagi_collectives::Op>,
    ) -> Result<()> {
        let dt = T::equivalent_datatype();
        let t = dt.as_raw();
        let acc = |p: *const T, n: usize| Access {
            addr: p as *mut u8,
            count: n as i64,
            dtype: t,
        };
        // SAFETY: the buffers are borrowed for 'env, which outlives this epoch, and every
        // operation completes before the epoch ends (fence or unlock in the `Window` call
        // that made it). Counts are the slices' lengths.
        unsafe {
            self.raw.operate(
                call,
                kind,
                origin.map(|(p, n)| acc(p, n)),
                compare.map(|p| p as *const u8),
                result.map(|(p, n)| acc(p, n)),
                target,
                disp as isize,
                count as i64,
                t,
                op,
                false,
            )?;
        }
        Ok(())
    }

    /// `MPI_Put`: `data` into elements `disp..` of `target`'s window.
    pub fn put(&self, data: &'env [T], target: Rank, disp: usize) -> Result<()> {
        let n = data.len();
        self.op(
            "MPI_Put",
            Kind::Put,
            Some((data.as_ptr(), n)),
            None,
            None,
            target,
            disp,
            n,
            None,
        )
    }

    /// `MPI_Get`: elements `disp..` of `target`'s window into `buf` (valid after the epoch).
    pub fn get(&self, buf: &'env mut [T], target: Rank, disp: usize) -> Result<()> {
        let n = buf.len();
        self.op(
            "MPI_Get",
            Kind::Get,
            None,
            None,
            Some((buf.as_mut_ptr(), n)),
            target,
            disp,
            n,
            None,
        )
    }

    /// `MPI_Accumulate` with a predefined operation.
    pub fn accumulate(
        &self,
        data: &'env [T],
        target: Rank,
        disp: usize,
        op: &impl Operation,
    ) -> Result<()> {
        let n = data.len();
        self.op(
            "MPI_Accumulate",
            Kind::Acc,
            Some((data.as_ptr(), n)),
            None,
            None,
            target,
            disp,
            n,
            Some(op.as_op()),
        )
    }

    /// `MPI_Get_accumulate`: `result` receives the old values.
    pub fn get_accumulate(
        &self,
        data: &'env [T],
        result: &'env mut [T],
        target: Rank,
        disp: usize,
        op: &impl Operation,
    ) -> Result<()> {
        let n = data.len();
        self.op(
            "MPI_Get_accumulate",
            Kind::GetAcc,
            Some((data.as_ptr(), n)),
            None,
            Some((result.as_mut_ptr(), result.len())),
            target,
            disp,
            n,
            Some(op.as_op()),
        )
    }

    /// `MPI_Fetch_and_op` on one element.
    pub fn fetch_and_op(
        &self,
        value: &'env T,
        result: &'env mut T,
        target: Rank,
        disp: usize,
        op: &impl Operation,
    ) -> Result<()> {
        self.op(
            "MPI_Fetch_and_op",
            Kind::GetAcc,
            Some((value as *const T, 1)),
            None,
            Some((result as *mut T, 1)),
            target,
            disp,
            1,
            Some(op.as_op()),
        )
    }

    /// `MPI_Compare_and_swap` on one element: `new` replaces it if it equals `compare`;
    /// `result` receives the old value.
    pub fn compare_and_swap(
        &self,
        new: &'env T,
        compare: &'env T,
        result: &'env mut T,
        target: Rank,
        disp: usize,
    ) -> Result<()> {
        self.op(
            "MPI_Compare_and_swap",
            Kind::Cas,
            Some((new as *const T, 1)),
            Some(compare as *const T),
            Some((result as *mut T, 1)),
            target,
            disp,
            1,
            None,
        )
    }
}
