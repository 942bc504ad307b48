//! Collective operations, in the spirit of rsmpi: [`CommunicatorCollectives`] for the
//! operations every process calls alike (all-gather, all-to-all, all-reduce, scans,
//! reduce-scatter) and [`Root`] for those with a root process (broadcast, gather,
//! scatter, reduce), called on the root's [`Process`]; reductions take a
//! [`SystemOperation`] (`SystemOperation::sum()`, ...) or a [`UserOperation`] made from a
//! closure; [`CommunicatorImmediateCollectives`] starts non-blocking ones on owned
//! buffers ([`CollectiveRequest`]). The algorithms are those of the `tsunagi-collectives`
//! crate.
//!
//! ```no_run
//! use tsunagi::collective::SystemOperation;
//! use tsunagi::traits::*;
//!
//! let universe = tsunagi::initialize().unwrap();
//! let world = universe.world();
//! let root = world.process_at_rank(0);
//! let mut x = if world.rank() == 0 { 42 } else { 0 };
//! root.broadcast_into(&mut x).unwrap();
//! let mut sum = 0;
//! world.all_reduce_into(&world.rank(), &mut sum, &SystemOperation::sum()).unwrap();
//! ```
//!
//! Buffer sizes follow rsmpi: the gathering side's buffer holds one block per process
//! (its count divided by the communicator size is the block count), the scattering
//! side's likewise; reductions need send and receive buffers of the same count and
//! datatype size.

use std::marker::PhantomData;

use tsunagi_collectives::{self as coll, Op, RecvBuf, SendBuf};
use tsunagi_core::{rt, CommId, Runtime};

use crate::datatype::{Buffer, BufferMut, Count, DatatypeRef, PlainData};
use crate::error::{Error, ErrorClass, Result};
use crate::point_to_point::Process;
use crate::topology::{Communicator, Rank};

/// A reduction operation: predefined or user-defined.
pub trait Operation {
    /// The collectives crate's op.
    fn as_op(&self) -> &Op;
    /// Check that the op may combine elements of `datatype` (called before reducing).
    fn check_datatype(&self, call: &str, datatype: &DatatypeRef) -> Result<()> {
        Ok(self.as_op().check(call, datatype.as_raw())?)
    }
}

/// A predefined reduction operation (MPI_SUM, MPI_MAX, ...).
#[derive(Clone, Debug)]
pub struct SystemOperation(Op);

impl SystemOperation {
    /// MPI_SUM.
    pub fn sum() -> SystemOperation {
        SystemOperation(Op::Sum)
    }
    /// MPI_PROD.
    pub fn product() -> SystemOperation {
        SystemOperation(Op::Prod)
    }
    /// MPI_MAX.
    pub fn max() -> SystemOperation {
        SystemOperation(Op::Max)
    }
    /// MPI_MIN.
    pub fn min() -> SystemOperation {
        SystemOperation(Op::Min)
    }
    /// MPI_LAND.
    pub fn logical_and() -> SystemOperation {
        SystemOperation(Op::Land)
    }
    /// MPI_LOR.
    pub fn logical_or() -> SystemOperation {
        SystemOperation(Op::Lor)
    }
    /// MPI_LXOR.
    pub fn logical_xor() -> SystemOperation {
        SystemOperation(Op::Lxor)
    }
    /// MPI_BAND.
    pub fn bitwise_and() -> SystemOperation {
        SystemOperation(Op::Band)
    }
    /// MPI_BOR.
    pub fn bitwise_or() -> SystemOperation {
        SystemOperation(Op::Bor)
    }
    /// MPI_BXOR.
    pub fn bitwise_xor() -> SystemOperation {
        SystemOperation(Op::Bxor)
    }
}

impl Operation for SystemOperation {
    fn as_op(&self) -> &Op {
        &self.0
    }
}

/// A user-defined reduction on elements of type `T`, made from a closure
/// `f(input, inout)` that must leave `inout[i] = input[i] ∘ inout[i]`, where `input`
/// holds the contribution of lower ranks. Non-commutative operations combine in rank
/// order. It may only be used with buffers whose datatype has the size and extent of
/// `T` (checked).
pub struct UserOperation<T> {
    op: Op,
    _t: PhantomData<fn(&T)>,
}

impl<T: PlainData + Send + Sync> UserOperation<T> {
    fn new(f: impl Fn(&[T], &mut [T]) + Send + Sync + 'static, commutative: bool) -> Self {
        let size = std::mem::size_of::<T>();
        let op = Op::user(
            move |inp: *const u8,
                  inout: *mut u8,
                  count: usize,
                  _dt: &tsunagi_core::datatype::TypeRef| {
                // The buffers may be unaligned (packed scratch space): copy in and out.
                let load = |p: *const u8| -> Vec<T> {
                    (0..count)
                        // SAFETY: the collectives crate passes `count` elements of a
                        // datatype whose extent is size_of::<T>() (checked before the
                        // call); T accepts every bit pattern (PlainData).
                        .map(|i| unsafe { std::ptr::read_unaligned(p.add(i * size) as *const T) })
                        .collect()
                };
                let a = load(inp);
                let mut b = load(inout);
                f(&a, &mut b);
                for (i, v) in b.into_iter().enumerate() {
                    // SAFETY: as above, `inout` is writable for `count` elements.
                    unsafe { std::ptr::write_unaligned(inout.add(i * size) as *mut T, v) };
                }
            },
            commutative,
        );
        UserOperation {
            op,
            _t: PhantomData,
        }
    }
    /// A commutative operation.
    pub fn commutative(f: impl Fn(&[T], &mut [T]) + Send + Sync + 'static) -> Self {
        Self::new(f, true)
    }
    /// A non-commutative operation (combined in rank order).
    pub fn non_commutative(f: impl Fn(&[T], &mut [T]) + Send + Sync + 'static) -> Self {
        Self::new(f, false)
    }
}

impl<T> Operation for UserOperation<T> {
    fn as_op(&self) -> &Op {
        &self.op
    }
    fn check_datatype(&self, call: &str, datatype: &DatatypeRef) -> Result<()> {
        let size = std::mem::size_of::<T>();
        if datatype.size() != size || datatype.extent() != size as isize {
            return Err(Error::new(
                ErrorClass::Op,
                format!(
                    "{call}: a UserOperation on elements of {size} bytes used with datatype {} \
                     (size {}, extent {})",
                    datatype.name(),
                    datatype.size(),
                    datatype.extent()
                ),
            ));
        }
        Ok(())
    }
}

fn runtime(call: &str) -> Result<&'static Runtime> {
    Ok(rt(call)?)
}

fn same_layout(call: &str, a: &DatatypeRef, b: &DatatypeRef) -> Result<()> {
    if a.size() != b.size() || a.extent() != b.extent() {
        return Err(Error::new(
            ErrorClass::Type,
            format!(
                "{call}: the send and receive buffers have different datatypes ({} and {})",
                a.name(),
                b.name()
            ),
        ));
    }
    Ok(())
}

/// Count of a receive buffer holding one block per process.
fn per_process(call: &str, total: Count, size: Rank) -> Result<Count> {
    let n = size.max(1) as Count;
    if total % n != 0 {
        return Err(Error::new(
            ErrorClass::Count,
            format!("{call}: a buffer of {total} elements does not split into {n} equal blocks"),
        ));
    }
    Ok(total / n)
}

/// Check a reduction's buffers: same count, same layout, op allowed on the type.
fn reduction_args<S: Buffer + ?Sized, R: Buffer + ?Sized>(
    call: &str,
    send: &S,
    recv: &R,
    op: &impl Operation,
) -> Result<()> {
    if send.buffer_count() != recv.buffer_count() {
        return Err(Error::new(
            ErrorClass::Count,
            format!(
                "{call}: send count {} differs from receive count {}",
                send.buffer_count(),
                recv.buffer_count()
            ),
        ));
    }
    same_layout(call, &send.buffer_datatype(), &recv.buffer_datatype())?;
    op.check_datatype(call, &send.buffer_datatype())
}

/// Collectives in which every process plays the same part; provided for every
/// [`Communicator`].
pub trait CommunicatorCollectives: Communicator {
    /// Gather `send` from every process into `recv` on every process, in rank order
    /// (MPI_Allgather); `recv` holds size × the send count.
    fn all_gather_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let call = "MPI_Allgather";
        let r = runtime(call)?;
        let rc = per_process(call, recv.buffer_count(), self.peer_size())?;
        // SAFETY: both buffers are valid for their counts and datatypes (Buffer contract);
        // the crate receives at most `rc` elements per process into `recv`.
        unsafe {
            Ok(coll::allgather(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                recv.buffer_pointer_mut(),
                rc,
                recv.buffer_datatype().as_raw(),
                self.comm_id(),
            )?)
        }
    }

    /// All-gather in place: this process's block is already at its place in `buf`.
    fn all_gather_in_place<R: BufferMut + ?Sized>(&self, buf: &mut R) -> Result<()> {
        let call = "MPI_Allgather";
        let r = runtime(call)?;
        let rc = per_process(call, buf.buffer_count(), self.size())?;
        // SAFETY: as in all_gather_into.
        unsafe {
            Ok(coll::allgather(
                r,
                SendBuf::InPlace,
                0,
                buf.buffer_datatype().as_raw(),
                buf.buffer_pointer_mut(),
                rc,
                buf.buffer_datatype().as_raw(),
                self.comm_id(),
            )?)
        }
    }

    /// Gather blocks of varying sizes from every process (MPI_Allgatherv): process `i`'s
    /// block goes to `recv` at element `displs[i]`, `counts[i]` elements.
    fn all_gather_varcount_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        counts: &[Count],
        displs: &[Count],
    ) -> Result<()> {
        let call = "MPI_Allgatherv";
        let r = runtime(call)?;
        check_blocks(call, counts, displs, self.peer_size(), recv.buffer_count())?;
        // SAFETY: every block lies within `recv` (checked above).
        unsafe {
            Ok(coll::allgatherv(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                recv.buffer_pointer_mut(),
                counts,
                displs,
                recv.buffer_datatype().as_raw(),
                self.comm_id(),
            )?)
        }
    }

    /// Send block `i` of `send` to process `i` and receive its block for this process
    /// into block `i` of `recv` (MPI_Alltoall); both hold size equal blocks.
    fn all_to_all_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let call = "MPI_Alltoall";
        let r = runtime(call)?;
        let sc = per_process(call, send.buffer_count(), self.peer_size())?;
        let rc = per_process(call, recv.buffer_count(), self.peer_size())?;
        // SAFETY: both buffers hold size blocks of their counts.
        unsafe {
            Ok(coll::alltoall(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                sc,
                send.buffer_datatype().as_raw(),
                recv.buffer_pointer_mut(),
                rc,
                recv.buffer_datatype().as_raw(),
                self.comm_id(),
            )?)
        }
    }

    /// Combine `send` of every process with `op` into `recv` on every process
    /// (MPI_Allreduce).
    fn all_reduce_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: &impl Operation,
    ) -> Result<()> {
        let call = "MPI_Allreduce";
        reduction_args(call, send, recv, op)?;
        let r = runtime(call)?;
        // SAFETY: equal counts and layouts (checked); Buffer contracts.
        unsafe {
            Ok(coll::allreduce(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                recv.buffer_pointer_mut(),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                op.as_op(),
                self.comm_id(),
            )?)
        }
    }

    /// All-reduce in place: `buf` holds this process's contribution and gets the result.
    fn all_reduce_in_place<R: BufferMut + ?Sized>(
        &self,
        buf: &mut R,
        op: &impl Operation,
    ) -> Result<()> {
        let call = "MPI_Allreduce";
        op.check_datatype(call, &buf.buffer_datatype())?;
        let r = runtime(call)?;
        // SAFETY: Buffer contract.
        unsafe {
            Ok(coll::allreduce(
                r,
                SendBuf::InPlace,
                buf.buffer_pointer_mut(),
                buf.buffer_count(),
                buf.buffer_datatype().as_raw(),
                op.as_op(),
                self.comm_id(),
            )?)
        }
    }

    /// Reduce `send` (size equal blocks) and scatter the result: block `i` to process `i`
    /// (MPI_Reduce_scatter_block); `recv` holds one block.
    fn reduce_scatter_block_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: &impl Operation,
    ) -> Result<()> {
        let call = "MPI_Reduce_scatter_block";
        let n = self.size().max(1) as Count;
        if send.buffer_count() != recv.buffer_count() * n {
            return Err(Error::new(
                ErrorClass::Count,
                format!(
                    "{call}: the send buffer must hold {n} blocks of {} elements",
                    recv.buffer_count()
                ),
            ));
        }
        same_layout(call, &send.buffer_datatype(), &recv.buffer_datatype())?;
        op.check_datatype(call, &send.buffer_datatype())?;
        let r = runtime(call)?;
        // SAFETY: sizes checked above; Buffer contracts.
        unsafe {
            Ok(coll::reduce_scatter_block(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                recv.buffer_pointer_mut(),
                recv.buffer_count(),
                recv.buffer_datatype().as_raw(),
                op.as_op(),
                self.comm_id(),
            )?)
        }
    }

    /// Inclusive prefix reduction over ranks 0..=this (MPI_Scan).
    fn scan_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: &impl Operation,
    ) -> Result<()> {
        let call = "MPI_Scan";
        reduction_args(call, send, recv, op)?;
        let r = runtime(call)?;
        // SAFETY: equal counts and layouts (checked).
        unsafe {
            Ok(coll::scan(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                recv.buffer_pointer_mut(),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                op.as_op(),
                self.comm_id(),
            )?)
        }
    }

    /// Exclusive prefix reduction over ranks 0..this (MPI_Exscan); `recv` is unchanged on
    /// rank 0.
    fn exscan_into<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: &impl Operation,
    ) -> Result<()> {
        let call = "MPI_Exscan";
        reduction_args(call, send, recv, op)?;
        let r = runtime(call)?;
        // SAFETY: equal counts and layouts (checked).
        unsafe {
            Ok(coll::exscan(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                recv.buffer_pointer_mut(),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                op.as_op(),
                self.comm_id(),
            )?)
        }
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

fn check_blocks(
    call: &str,
    counts: &[Count],
    displs: &[Count],
    size: Rank,
    total: Count,
) -> Result<()> {
    let n = size.max(0) as usize;
    if counts.len() != n || displs.len() != n {
        return Err(Error::new(
            ErrorClass::Arg,
            format!("{call}: counts and displacements must have one entry per process ({n})"),
        ));
    }
    for (i, (&c, &d)) in counts.iter().zip(displs).enumerate() {
        if c < 0 || d < 0 || !matches!(c.checked_add(d), Some(end) if end <= total) {
            return Err(Error::new(
                ErrorClass::Buffer,
                format!("{call}: block {i} ({c} elements at {d}) is outside the buffer of {total}"),
            ));
        }
    }
    Ok(())
}

/// Collectives with a root process, called on the root's [`Process`] (from
/// `comm.process_at_rank(root)`) by every process of the communicator.
pub trait Root {
    /// The communicator.
    fn root_comm(&self) -> CommId;
    /// The root's rank.
    fn root_rank(&self) -> Rank;
    /// The communicator's size and this process's rank.
    fn size_and_rank(&self) -> Result<(Rank, Rank)>;

    /// Broadcast the root's `buf` into `buf` on every process (MPI_Bcast).
    fn broadcast_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<()> {
        let r = runtime("MPI_Bcast")?;
        // SAFETY: Buffer contract.
        unsafe {
            Ok(coll::bcast(
                r,
                buf.buffer_pointer_mut(),
                buf.buffer_count(),
                buf.buffer_datatype().as_raw(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Send `send` to the root's gather (MPI_Gather, non-root side).
    fn gather_into<S: Buffer + ?Sized>(&self, send: &S) -> Result<()> {
        if self.size_and_rank()?.1 == self.root_rank() {
            return Err(root_form("MPI_Gather", "gather_into_root"));
        }
        let r = runtime("MPI_Gather")?;
        let byte = DatatypeRef::builtin(tsunagi_core::datatype::Builtin::Byte);
        // SAFETY: Buffer contract; this process is not the root (checked), where the
        // receive arguments are not used.
        unsafe {
            Ok(coll::gather(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                std::ptr::null_mut(),
                0,
                byte.as_raw(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Gather `send` from every process into `recv` in rank order, at the root
    /// (MPI_Gather); `recv` holds size blocks.
    fn gather_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let call = "MPI_Gather";
        let (size, me) = self.size_and_rank()?;
        if me != self.root_rank() {
            return Err(not_root(call));
        }
        let rc = per_process(call, recv.buffer_count(), size)?;
        let r = runtime(call)?;
        // SAFETY: `recv` holds size blocks of `rc` elements.
        unsafe {
            Ok(coll::gather(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                recv.buffer_pointer_mut(),
                rc,
                recv.buffer_datatype().as_raw(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Gather in place at the root: the root's block is already at its place in `buf`
    /// (MPI_Gather with MPI_IN_PLACE); `buf` holds size blocks.
    fn gather_in_place_root<R: BufferMut + ?Sized>(&self, buf: &mut R) -> Result<()> {
        let call = "MPI_Gather";
        let (size, me) = self.size_and_rank()?;
        if me != self.root_rank() {
            return Err(not_root(call));
        }
        let rc = per_process(call, buf.buffer_count(), size)?;
        let r = runtime(call)?;
        // SAFETY: `buf` holds size blocks of `rc` elements.
        unsafe {
            Ok(coll::gather(
                r,
                SendBuf::InPlace,
                0,
                buf.buffer_datatype().as_raw(),
                buf.buffer_pointer_mut(),
                rc,
                buf.buffer_datatype().as_raw(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Scatter in place at the root: the root keeps its block where it is in `buf`
    /// (MPI_Scatter with MPI_IN_PLACE); `buf` holds size blocks.
    fn scatter_in_place_root<S: BufferMut + ?Sized>(&self, buf: &mut S) -> Result<()> {
        let call = "MPI_Scatter";
        let (size, me) = self.size_and_rank()?;
        if me != self.root_rank() {
            return Err(not_root(call));
        }
        let sc = per_process(call, buf.buffer_count(), size)?;
        let r = runtime(call)?;
        // SAFETY: `buf` holds size blocks of `sc` elements; nothing is received here.
        unsafe {
            Ok(coll::scatter(
                r,
                buf.buffer_pointer(),
                sc,
                buf.buffer_datatype().as_raw(),
                RecvBuf::InPlace,
                0,
                buf.buffer_datatype().as_raw(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Receive this process's block of the root's scatter (MPI_Scatter, non-root side).
    fn scatter_into<R: BufferMut + ?Sized>(&self, recv: &mut R) -> Result<()> {
        if self.size_and_rank()?.1 == self.root_rank() {
            return Err(root_form("MPI_Scatter", "scatter_into_root"));
        }
        let r = runtime("MPI_Scatter")?;
        let byte = DatatypeRef::builtin(tsunagi_core::datatype::Builtin::Byte);
        // SAFETY: Buffer contract; this process is not the root (checked), where the send
        // arguments are not used.
        unsafe {
            Ok(coll::scatter(
                r,
                std::ptr::null(),
                0,
                byte.as_raw(),
                RecvBuf::Ptr(recv.buffer_pointer_mut()),
                recv.buffer_count(),
                recv.buffer_datatype().as_raw(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Scatter `send` (size equal blocks) from the root: block `i` to process `i`, the
    /// root's own into `recv` (MPI_Scatter).
    fn scatter_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let call = "MPI_Scatter";
        let (size, me) = self.size_and_rank()?;
        if me != self.root_rank() {
            return Err(not_root(call));
        }
        let sc = per_process(call, send.buffer_count(), size)?;
        let r = runtime(call)?;
        // SAFETY: `send` holds size blocks of `sc` elements.
        unsafe {
            Ok(coll::scatter(
                r,
                send.buffer_pointer(),
                sc,
                send.buffer_datatype().as_raw(),
                RecvBuf::Ptr(recv.buffer_pointer_mut()),
                recv.buffer_count(),
                recv.buffer_datatype().as_raw(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Contribute `send` to the root's reduction (MPI_Reduce, non-root side).
    fn reduce_into<S: Buffer + ?Sized>(&self, send: &S, op: &impl Operation) -> Result<()> {
        let call = "MPI_Reduce";
        let (_, me) = self.size_and_rank()?;
        if me == self.root_rank() {
            return Err(root_form(call, "reduce_into_root"));
        }
        op.check_datatype(call, &send.buffer_datatype())?;
        let r = runtime(call)?;
        // SAFETY: Buffer contract; the receive buffer is not used off the root.
        unsafe {
            Ok(coll::reduce(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                std::ptr::null_mut(),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                op.as_op(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Combine `send` of every process with `op` into `recv` at the root (MPI_Reduce).
    fn reduce_into_root<S: Buffer + ?Sized, R: BufferMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        op: &impl Operation,
    ) -> Result<()> {
        let call = "MPI_Reduce";
        let (_, me) = self.size_and_rank()?;
        if me != self.root_rank() {
            return Err(not_root(call));
        }
        reduction_args(call, send, recv, op)?;
        let r = runtime(call)?;
        // SAFETY: equal counts and layouts (checked).
        unsafe {
            Ok(coll::reduce(
                r,
                SendBuf::Ptr(send.buffer_pointer()),
                recv.buffer_pointer_mut(),
                send.buffer_count(),
                send.buffer_datatype().as_raw(),
                op.as_op(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }

    /// Reduce in place at the root: `buf` holds the root's contribution and gets the
    /// result (MPI_Reduce with MPI_IN_PLACE).
    fn reduce_in_place_root<R: BufferMut + ?Sized>(
        &self,
        buf: &mut R,
        op: &impl Operation,
    ) -> Result<()> {
        let call = "MPI_Reduce";
        let (_, me) = self.size_and_rank()?;
        if me != self.root_rank() {
            return Err(not_root(call));
        }
        op.check_datatype(call, &buf.buffer_datatype())?;
        let r = runtime(call)?;
        // SAFETY: Buffer contract.
        unsafe {
            Ok(coll::reduce(
                r,
                SendBuf::InPlace,
                buf.buffer_pointer_mut(),
                buf.buffer_count(),
                buf.buffer_datatype().as_raw(),
                op.as_op(),
                self.root_rank(),
                self.root_comm(),
            )?)
        }
    }
}

fn root_form(call: &str, method: &str) -> Error {
    Error::new(
        ErrorClass::Root,
        format!("{call}: the root must call {method}"),
    )
}

fn not_root(call: &str) -> Error {
    Error::new(
        ErrorClass::Root,
        format!("{call}: only the root may call the _root form"),
    )
}

impl<C: Communicator + ?Sized> Root for Process<'_, C> {
    fn root_comm(&self) -> CommId {
        self.communicator().comm_id()
    }
    fn root_rank(&self) -> Rank {
        self.rank()
    }
    fn size_and_rank(&self) -> Result<(Rank, Rank)> {
        let c = self.communicator();
        if c.is_inter() {
            // On an intercommunicator the root passes MPI_ROOT (so it is "itself" exactly
            // then), and its buffers hold one block per process of the remote group.
            let me = if self.rank() == crate::intercomm::ROOT {
                crate::intercomm::ROOT
            } else {
                crate::intercomm::NOT_A_ROOT
            };
            return Ok((c.peer_size(), me));
        }
        let (rank, size) = c.try_rank_and_size()?;
        Ok((size, rank))
    }
}

/// A non-blocking collective in flight. It owns the buffers it works on (so nothing can
/// touch them meanwhile, and forgetting the request leaks them rather than leaving them
/// in use), and gives them back from [`CollectiveRequest::wait`]. Dropping an unfinished
/// request waits for it.
///
/// The schedule is a request of the core's one request table: every wait and test of the
/// process (point-to-point ones included) advances it, as in the C interface.
pub struct CollectiveRequest<B> {
    /// The core request, until completion is collected.
    req: Option<tsunagi_core::ReqId>,
    buffers: Option<B>,
}

impl<B> std::fmt::Debug for CollectiveRequest<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectiveRequest")
            .field("request", &self.req)
            .finish()
    }
}

impl<B> CollectiveRequest<B> {
    fn start(req: tsunagi_core::MpiResult<coll::CollRequest>, buffers: B) -> Result<Self> {
        let req = req?;
        // The core posts the first round now, so that it overlaps with what the caller
        // does next.
        let id = runtime("MPI_Start")?.start_schedule(Box::new(req))?;
        Ok(CollectiveRequest {
            req: Some(id),
            buffers: Some(buffers),
        })
    }

    /// Advance the operation without blocking; true when it has completed.
    pub fn test(&mut self) -> Result<bool> {
        let Some(id) = self.req else {
            return Ok(true);
        };
        match runtime("MPI_Test")?.test("MPI_Test", id)? {
            Some(_) => {
                self.req = None;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Block until the operation completes; returns the buffers (the result).
    pub fn wait(mut self) -> Result<B> {
        if let Some(id) = self.req.take() {
            runtime("MPI_Wait")?.wait("MPI_Wait", id)?;
        }
        Ok(self.buffers.take().expect("buffers are taken only here"))
    }
}

impl<B> Drop for CollectiveRequest<B> {
    fn drop(&mut self) {
        if let Some(id) = self.req.take() {
            if let Ok(r) = rt("MPI_Wait") {
                if let Err(e) = r.wait("MPI_Wait", id) {
                    eprintln!("tsunagi: a dropped non-blocking collective failed: {e}");
                }
            }
        }
    }
}

/// Non-blocking collectives on owned buffers; provided for every [`Communicator`].
pub trait CommunicatorImmediateCollectives: Communicator {
    /// Start a barrier (MPI_Ibarrier).
    fn immediate_barrier(&self) -> Result<CollectiveRequest<()>> {
        let r = runtime("MPI_Ibarrier")?;
        CollectiveRequest::start(coll::ibarrier(r, self.comm_id()), ())
    }

    /// Start an all-reduce of `buf` in place (MPI_Iallreduce with MPI_IN_PLACE); `wait`
    /// gives back the buffer holding the result.
    fn immediate_all_reduce<T: crate::datatype::Equivalence>(
        &self,
        mut buf: Vec<T>,
        op: &impl Operation,
    ) -> Result<CollectiveRequest<Vec<T>>> {
        let call = "MPI_Iallreduce";
        op.check_datatype(call, &buf.buffer_datatype())?;
        let r = runtime(call)?;
        let (ptr, count, dt) = (
            buf.buffer_pointer_mut(),
            buf.buffer_count(),
            buf.buffer_datatype(),
        );
        // SAFETY: the vector's heap memory does not move when the vector moves into the
        // request, which owns it until the operation completes.
        let q = unsafe {
            coll::iallreduce(
                r,
                SendBuf::InPlace,
                ptr,
                count,
                dt.as_raw(),
                op.as_op(),
                self.comm_id(),
            )
        };
        CollectiveRequest::start(q, buf)
    }

    /// Start a broadcast of `buf` from `root` (MPI_Ibcast); every process passes a vector
    /// of the same length and `wait` gives it back holding the root's data.
    fn immediate_broadcast<T: crate::datatype::Equivalence>(
        &self,
        root: Rank,
        mut buf: Vec<T>,
    ) -> Result<CollectiveRequest<Vec<T>>> {
        let r = runtime("MPI_Ibcast")?;
        let (ptr, count, dt) = (
            buf.buffer_pointer_mut(),
            buf.buffer_count(),
            buf.buffer_datatype(),
        );
        // SAFETY: as in immediate_all_reduce.
        let q = unsafe { coll::ibcast(r, ptr, count, dt.as_raw(), root, self.comm_id()) };
        CollectiveRequest::start(q, buf)
    }
}

impl<C: Communicator + ?Sized> CommunicatorImmediateCollectives for C {}
