//! Point-to-point communication: [`Destination`]s to send to, [`Source`]s to receive
//! from, [`Status`], matched probes ([`Message`]) and [`send_receive_into`].

use std::mem::MaybeUninit;

use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{rt, CommId, MsgId, SendMode, ANY_SOURCE, ANY_TAG, PROC_NULL};

use crate::datatype::{AsDatatype, Buffer, BufferMut, Count, DatatypeRef, Equivalence};
use crate::error::{Error, ErrorClass, Result};
use crate::request::{PersistentRequest, Request, Scope};
use crate::topology::{same_comm, Communicator, Rank};

/// A message tag.
pub type Tag = i32;

/// The outcome of a receive or a probe (MPI_Status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(tsunagi_core::Status);

impl Status {
    pub(crate) fn from_raw(s: tsunagi_core::Status) -> Status {
        Status(s)
    }
    /// Rank of the sender (MPI_SOURCE).
    pub fn source_rank(&self) -> Rank {
        self.0.source
    }
    /// Tag of the message (MPI_TAG).
    pub fn tag(&self) -> Tag {
        self.0.tag
    }
    /// Bytes received.
    pub fn bytes(&self) -> usize {
        self.0.bytes
    }
    /// Number of whole elements of `datatype` received (MPI_Get_count); `None` if the
    /// data is not a whole number of elements (MPI_UNDEFINED).
    pub fn count(&self, datatype: &impl AsDatatype) -> Option<Count> {
        count_of_bytes(self.0.bytes, &datatype.as_datatype()).map(|n| n as Count)
    }
    /// Number of whole `T`s received.
    pub fn count_of<T: Equivalence>(&self) -> Option<Count> {
        self.count(&T::equivalent_datatype())
    }
    /// True if the operation was cancelled (MPI_Test_cancelled).
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled
    }
    /// The core's status.
    pub fn as_raw(&self) -> &tsunagi_core::Status {
        &self.0
    }
}

fn count_of_bytes(bytes: usize, dt: &DatatypeRef) -> Option<usize> {
    let size = dt.size();
    if size == 0 {
        return if bytes == 0 { Some(0) } else { None };
    }
    let n = bytes / size;
    (n * size == bytes).then_some(n)
}

/// A process to send to or receive from: a rank in a communicator.
#[derive(Debug)]
pub struct Process<'a, C: Communicator + ?Sized> {
    comm: &'a C,
    rank: Rank,
}

impl<'a, C: Communicator + ?Sized> Clone for Process<'a, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<'a, C: Communicator + ?Sized> Copy for Process<'a, C> {}

impl<'a, C: Communicator + ?Sized> Process<'a, C> {
    pub(crate) fn new(comm: &'a C, rank: Rank) -> Process<'a, C> {
        Process { comm, rank }
    }
    /// The process's rank in its communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// The communicator.
    pub fn communicator(&self) -> &'a C {
        self.comm
    }
}

/// Any process of a communicator, as a source (MPI_ANY_SOURCE).
#[derive(Debug)]
pub struct AnyProcess<'a, C: Communicator + ?Sized> {
    comm: &'a C,
}

impl<'a, C: Communicator + ?Sized> Clone for AnyProcess<'a, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<'a, C: Communicator + ?Sized> Copy for AnyProcess<'a, C> {}

impl<'a, C: Communicator + ?Sized> AnyProcess<'a, C> {
    pub(crate) fn new(comm: &'a C) -> AnyProcess<'a, C> {
        AnyProcess { comm }
    }
    /// The communicator.
    pub fn communicator(&self) -> &'a C {
        self.comm
    }
}

fn mode_call(mode: SendMode, blocking: bool) -> &'static str {
    match (mode, blocking) {
        (SendMode::Standard, true) => "MPI_Send",
        (SendMode::Synchronous, true) => "MPI_Ssend",
        (SendMode::Ready, true) => "MPI_Rsend",
        (SendMode::Buffered, true) => "MPI_Bsend",
        (SendMode::Standard, false) => "MPI_Isend",
        (SendMode::Synchronous, false) => "MPI_Issend",
        (SendMode::Ready, false) => "MPI_Irsend",
        (SendMode::Buffered, false) => "MPI_Ibsend",
    }
}

/// Something to send to: a [`Process`].
pub trait Destination {
    /// Rank of the destination in its communicator.
    fn destination_rank(&self) -> Rank;
    /// The core's handle of the communicator.
    fn destination_comm(&self) -> CommId;

    /// Blocking send in `mode` with `tag`.
    fn send_with_mode<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag, mode: SendMode) -> Result<()> {
        let dt = buf.buffer_datatype();
        // SAFETY: the Buffer contract makes pointer/count/datatype describe memory
        // borrowed by `buf`, which outlives this blocking call.
        unsafe {
            rt("MPI_Send")?.send(
                mode_call(mode, true),
                buf.buffer_pointer(),
                buf.buffer_count(),
                dt.as_raw(),
                self.destination_rank(),
                tag,
                self.destination_comm(),
                mode,
            )?;
        }
        Ok(())
    }
    /// Send with tag 0 (MPI_Send).
    fn send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.send_with_mode(buf, 0, SendMode::Standard)
    }
    /// Send with `tag` (MPI_Send).
    fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        self.send_with_mode(buf, tag, SendMode::Standard)
    }
    /// Send that completes once the receive has started (MPI_Ssend).
    fn synchronous_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.send_with_mode(buf, 0, SendMode::Synchronous)
    }
    /// [`Destination::synchronous_send`] with `tag`.
    fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        self.send_with_mode(buf, tag, SendMode::Synchronous)
    }
    /// Send that requires the matching receive to be posted already (MPI_Rsend).
    fn ready_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.send_with_mode(buf, 0, SendMode::Ready)
    }
    /// [`Destination::ready_send`] with `tag`.
    fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        self.send_with_mode(buf, tag, SendMode::Ready)
    }
    /// Send through the attached buffer (MPI_Bsend); see
    /// [`attach_buffer`](crate::environment::attach_buffer).
    fn buffered_send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.send_with_mode(buf, 0, SendMode::Buffered)
    }
    /// [`Destination::buffered_send`] with `tag`.
    fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: Tag) -> Result<()> {
        self.send_with_mode(buf, tag, SendMode::Buffered)
    }

    /// Start a send in `mode` with `tag`; `buf` stays borrowed for the scope's `'a`.
    fn immediate_send_with_mode<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
        mode: SendMode,
    ) -> Result<Request<'a, S>> {
        let dt = buf.buffer_datatype();
        let call = mode_call(mode, false);
        // SAFETY: `buf` is borrowed (shared, so unmodified) for 'a, and the request is
        // completed within 'a (by the scope at the latest).
        unsafe {
            let id = rt(call)?.isend(
                call,
                buf.buffer_pointer(),
                buf.buffer_count(),
                dt.as_raw(),
                self.destination_rank(),
                tag,
                self.destination_comm(),
                mode,
            )?;
            Ok(Request::from_raw(id, scope))
        }
    }
    /// A persistent standard-mode send of `buf` with `tag` (MPI_Send_init); `buf` stays
    /// borrowed for the scope's `'a`.
    fn send_init<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Result<PersistentRequest<'a, S>> {
        let call = "MPI_Send_init";
        let dt = buf.buffer_datatype();
        // SAFETY: `buf` is borrowed (shared) for 'a, and the scope completes and frees the
        // request within 'a.
        unsafe {
            let id = rt(call)?.persistent(
                call,
                Some(SendMode::Standard),
                buf.buffer_pointer() as *mut u8,
                buf.buffer_count(),
                dt.as_raw(),
                self.destination_rank(),
                tag,
                self.destination_comm(),
            )?;
            Ok(PersistentRequest::from_raw(id, scope))
        }
    }
    /// Start a send with tag 0 (MPI_Isend).
    fn immediate_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Result<Request<'a, S>> {
        self.immediate_send_with_mode(scope, buf, 0, SendMode::Standard)
    }
    /// Start a send with `tag` (MPI_Isend).
    fn immediate_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a, S>> {
        self.immediate_send_with_mode(scope, buf, tag, SendMode::Standard)
    }
    /// Start a synchronous send (MPI_Issend).
    fn immediate_synchronous_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Result<Request<'a, S>> {
        self.immediate_send_with_mode(scope, buf, 0, SendMode::Synchronous)
    }
    /// Start a synchronous send with `tag` (MPI_Issend).
    fn immediate_synchronous_send_with_tag<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
        tag: Tag,
    ) -> Result<Request<'a, S>> {
        self.immediate_send_with_mode(scope, buf, tag, SendMode::Synchronous)
    }
    /// Start a ready send (MPI_Irsend).
    fn immediate_ready_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Result<Request<'a, S>> {
        self.immediate_send_with_mode(scope, buf, 0, SendMode::Ready)
    }
    /// Start a buffered send (MPI_Ibsend).
    fn immediate_buffered_send<'a, S: Scope<'a>, B: Buffer + ?Sized>(
        &self,
        scope: S,
        buf: &'a B,
    ) -> Result<Request<'a, S>> {
        self.immediate_send_with_mode(scope, buf, 0, SendMode::Buffered)
    }
}

impl<C: Communicator + ?Sized> Destination for Process<'_, C> {
    fn destination_rank(&self) -> Rank {
        self.rank
    }
    fn destination_comm(&self) -> CommId {
        self.comm.comm_id()
    }
}

/// Receive one `T` into uninitialized memory; an error unless exactly one whole element
/// arrived.
fn finish_single<T: Equivalence>(
    call: &str,
    slot: MaybeUninit<T>,
    st: tsunagi_core::Status,
) -> Result<(T, Status)> {
    let dt = T::equivalent_datatype();
    if st.source == PROC_NULL {
        return Err(Error::new(
            ErrorClass::Rank,
            format!("{call}: cannot receive a value from the null process"),
        ));
    }
    if st.bytes != dt.size() {
        return Err(Error::new(
            ErrorClass::Count,
            format!(
                "{call}: received {} bytes, but one {} takes {} bytes",
                st.bytes,
                std::any::type_name::<T>(),
                dt.size()
            ),
        ));
    }
    // SAFETY: exactly one element of T's datatype was written, which covers every
    // non-padding byte of T with data of T's type signature (Equivalence contract).
    Ok((unsafe { slot.assume_init() }, Status(st)))
}

/// Something to receive from: a [`Process`] or [`AnyProcess`].
pub trait Source {
    /// Rank of the source (or MPI_ANY_SOURCE).
    fn source_rank(&self) -> Rank;
    /// The core's handle of the communicator.
    fn source_comm(&self) -> CommId;

    /// Receive one `T` with any tag (MPI_Recv).
    fn receive<T: Equivalence>(&self) -> Result<(T, Status)> {
        self.receive_with_tag(ANY_TAG)
    }
    /// Receive one `T` with `tag`.
    fn receive_with_tag<T: Equivalence>(&self, tag: Tag) -> Result<(T, Status)> {
        let call = "MPI_Recv";
        let dt = T::equivalent_datatype();
        let mut slot = MaybeUninit::<T>::uninit();
        // SAFETY: the slot has room for one T, which is what one element of its datatype
        // spans; it lives across the blocking call.
        let st = unsafe {
            rt(call)?.recv(
                call,
                slot.as_mut_ptr() as *mut u8,
                1,
                dt.as_raw(),
                self.source_rank(),
                tag,
                self.source_comm(),
            )?
        };
        finish_single(call, slot, st)
    }
    /// Receive into `buf` with any tag (MPI_Recv).
    fn receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<Status> {
        self.receive_into_with_tag(buf, ANY_TAG)
    }
    /// Receive into `buf` with `tag`.
    fn receive_into_with_tag<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        tag: Tag,
    ) -> Result<Status> {
        let call = "MPI_Recv";
        let dt = buf.buffer_datatype();
        let count = buf.buffer_count();
        // SAFETY: BufferMut describes writable memory borrowed by `buf` for this call.
        let st = unsafe {
            rt(call)?.recv(
                call,
                buf.buffer_pointer_mut(),
                count,
                dt.as_raw(),
                self.source_rank(),
                tag,
                self.source_comm(),
            )?
        };
        Ok(Status(st))
    }
    /// Receive a message of any length as a vector of `T` (MPI_Mprobe + MPI_Mrecv).
    fn receive_vec<T: Equivalence>(&self) -> Result<(Vec<T>, Status)> {
        self.receive_vec_with_tag(ANY_TAG)
    }
    /// [`Source::receive_vec`] with `tag`.
    fn receive_vec_with_tag<T: Equivalence>(&self, tag: Tag) -> Result<(Vec<T>, Status)> {
        let (msg, _) = self.matched_probe_with_tag(tag)?;
        msg.matched_receive_vec()
    }
    /// Start a receive into `buf` with any tag (MPI_Irecv); `buf` stays borrowed for `'a`.
    fn immediate_receive_into<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
    ) -> Result<Request<'a, S>> {
        self.immediate_receive_into_with_tag(scope, buf, ANY_TAG)
    }
    /// [`Source::immediate_receive_into`] with `tag`.
    fn immediate_receive_into_with_tag<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
        tag: Tag,
    ) -> Result<Request<'a, S>> {
        let call = "MPI_Irecv";
        let dt = buf.buffer_datatype();
        let count = buf.buffer_count();
        // SAFETY: `buf` is borrowed mutably for 'a and the request completes within 'a.
        unsafe {
            let id = rt(call)?.irecv(
                call,
                buf.buffer_pointer_mut(),
                count,
                dt.as_raw(),
                self.source_rank(),
                tag,
                self.source_comm(),
            )?;
            Ok(Request::from_raw(id, scope))
        }
    }
    /// A persistent receive into `buf` with `tag` (MPI_Recv_init); `buf` stays borrowed
    /// for the scope's `'a`.
    fn receive_init<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        &self,
        scope: S,
        buf: &'a mut B,
        tag: Tag,
    ) -> Result<PersistentRequest<'a, S>> {
        let call = "MPI_Recv_init";
        let dt = buf.buffer_datatype();
        let count = buf.buffer_count();
        // SAFETY: `buf` is borrowed mutably for 'a, and the scope completes and frees the
        // request within 'a.
        unsafe {
            let id = rt(call)?.persistent(
                call,
                None,
                buf.buffer_pointer_mut(),
                count,
                dt.as_raw(),
                self.source_rank(),
                tag,
                self.source_comm(),
            )?;
            Ok(PersistentRequest::from_raw(id, scope))
        }
    }
    /// Block until a message is available and return its status (MPI_Probe).
    fn probe(&self) -> Result<Status> {
        self.probe_with_tag(ANY_TAG)
    }
    /// [`Source::probe`] with `tag`.
    fn probe_with_tag(&self, tag: Tag) -> Result<Status> {
        let call = "MPI_Probe";
        let (st, _) = rt(call)?.probe(call, self.source_rank(), tag, self.source_comm(), false)?;
        Ok(Status(st))
    }
    /// The status of an available message, if any (MPI_Iprobe).
    fn immediate_probe(&self) -> Result<Option<Status>> {
        self.immediate_probe_with_tag(ANY_TAG)
    }
    /// [`Source::immediate_probe`] with `tag`.
    fn immediate_probe_with_tag(&self, tag: Tag) -> Result<Option<Status>> {
        let call = "MPI_Iprobe";
        let r = rt(call)?.iprobe(call, self.source_rank(), tag, self.source_comm(), false)?;
        Ok(r.map(|(st, _)| Status(st)))
    }
    /// Take a message off the queue for a later [`Message::matched_receive_into`]
    /// (MPI_Mprobe): no other receive can match it in between.
    fn matched_probe(&self) -> Result<(Message, Status)> {
        self.matched_probe_with_tag(ANY_TAG)
    }
    /// [`Source::matched_probe`] with `tag`.
    fn matched_probe_with_tag(&self, tag: Tag) -> Result<(Message, Status)> {
        let call = "MPI_Mprobe";
        let (st, msg) = rt(call)?.probe(call, self.source_rank(), tag, self.source_comm(), true)?;
        Ok((Message::new(msg, st), Status(st)))
    }
    /// Like [`Source::matched_probe`] without blocking (MPI_Improbe).
    fn immediate_matched_probe(&self) -> Result<Option<(Message, Status)>> {
        self.immediate_matched_probe_with_tag(ANY_TAG)
    }
    /// [`Source::immediate_matched_probe`] with `tag`.
    fn immediate_matched_probe_with_tag(&self, tag: Tag) -> Result<Option<(Message, Status)>> {
        let call = "MPI_Improbe";
        let r = rt(call)?.iprobe(call, self.source_rank(), tag, self.source_comm(), true)?;
        Ok(r.map(|(st, msg)| (Message::new(msg, st), Status(st))))
    }
}

impl<C: Communicator + ?Sized> Source for Process<'_, C> {
    fn source_rank(&self) -> Rank {
        self.rank
    }
    fn source_comm(&self) -> CommId {
        self.comm.comm_id()
    }
}

impl<C: Communicator + ?Sized> Source for AnyProcess<'_, C> {
    fn source_rank(&self) -> Rank {
        ANY_SOURCE
    }
    fn source_comm(&self) -> CommId {
        self.comm.comm_id()
    }
}

/// A message taken off the queues by a matched probe (MPI_Message). If dropped without
/// being received, it is received into a scratch buffer and discarded.
#[derive(Debug)]
pub struct Message {
    /// None: the null process's "no message" (MPI_MESSAGE_NO_PROC), or already received.
    msg: Option<MsgId>,
    bytes: usize,
}

impl Message {
    fn new(msg: Option<MsgId>, st: tsunagi_core::Status) -> Message {
        Message {
            msg,
            bytes: st.bytes,
        }
    }
    /// Bytes the message carries.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// True for the "no message" of a probe of the null process.
    pub fn is_no_proc(&self) -> bool {
        self.msg.is_none()
    }

    /// Receive the message into `buf` (MPI_Mrecv).
    pub fn matched_receive_into<B: BufferMut + ?Sized>(mut self, buf: &mut B) -> Result<Status> {
        let call = "MPI_Mrecv";
        let dt = buf.buffer_datatype();
        let count = buf.buffer_count();
        let msg = self.msg.take();
        // SAFETY: BufferMut describes writable memory borrowed by `buf` for this call.
        let st =
            unsafe { rt(call)?.mrecv(call, buf.buffer_pointer_mut(), count, dt.as_raw(), msg)? };
        Ok(Status(st))
    }

    /// Receive the message as one `T`.
    pub fn matched_receive<T: Equivalence>(mut self) -> Result<(T, Status)> {
        let call = "MPI_Mrecv";
        let dt = T::equivalent_datatype();
        let mut slot = MaybeUninit::<T>::uninit();
        let msg = self.msg.take();
        // SAFETY: the slot has room for one element of T's datatype.
        let st =
            unsafe { rt(call)?.mrecv(call, slot.as_mut_ptr() as *mut u8, 1, dt.as_raw(), msg)? };
        finish_single(call, slot, st)
    }

    /// Receive the message as a vector of `T` sized to fit it.
    pub fn matched_receive_vec<T: Equivalence>(mut self) -> Result<(Vec<T>, Status)> {
        let call = "MPI_Mrecv";
        let dt = T::equivalent_datatype();
        let n = count_of_bytes(self.bytes, &dt).ok_or_else(|| {
            Error::new(
                ErrorClass::Count,
                format!(
                    "{call}: the message has {} bytes, not a whole number of {} ({} bytes each)",
                    self.bytes,
                    std::any::type_name::<T>(),
                    dt.size()
                ),
            )
        })?;
        let mut v: Vec<T> = Vec::new();
        v.try_reserve_exact(n).map_err(|_| {
            Error::new(
                ErrorClass::NoMem,
                format!("{call}: cannot allocate {n} elements"),
            )
        })?;
        let msg = self.msg.take();
        // SAFETY: the vector's spare capacity holds n elements of T (extent size_of::<T>()).
        let st = unsafe {
            rt(call)?.mrecv(call, v.as_mut_ptr() as *mut u8, n as i64, dt.as_raw(), msg)?
        };
        if st.bytes != n * dt.size() {
            return Err(Error::new(
                ErrorClass::Intern,
                format!(
                    "{call}: expected {} bytes, received {}",
                    n * dt.size(),
                    st.bytes
                ),
            ));
        }
        // SAFETY: all n elements were written with data of T's type signature.
        unsafe { v.set_len(n) };
        Ok((v, Status(st)))
    }

    /// Start receiving the message into `buf` (MPI_Imrecv).
    pub fn immediate_matched_receive_into<'a, S: Scope<'a>, B: BufferMut + ?Sized>(
        mut self,
        scope: S,
        buf: &'a mut B,
    ) -> Result<Request<'a, S>> {
        let call = "MPI_Imrecv";
        let dt = buf.buffer_datatype();
        let count = buf.buffer_count();
        let msg = self.msg.take();
        // SAFETY: `buf` is borrowed mutably for 'a and the request completes within 'a.
        unsafe {
            let id = rt(call)?.imrecv(call, buf.buffer_pointer_mut(), count, dt.as_raw(), msg)?;
            Ok(Request::from_raw(id, scope))
        }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Some(msg) = self.msg.take() {
            if let Ok(r) = rt("MPI_Mrecv") {
                let byte = Datatype::builtin(Builtin::Byte);
                let mut scratch = vec![0u8; self.bytes];
                // SAFETY: the scratch buffer holds all of the message's bytes.
                let _ = unsafe {
                    r.mrecv(
                        "MPI_Mrecv",
                        scratch.as_mut_ptr(),
                        scratch.len() as i64,
                        &byte,
                        Some(msg),
                    )
                };
            }
        }
    }
}

/// Send `msg` to `destination` and receive into `buf` from `source` (MPI_Sendrecv); both
/// must belong to the same communicator.
pub fn send_receive_into_with_tags<S, D, B, R>(
    msg: &S,
    destination: &D,
    send_tag: Tag,
    buf: &mut B,
    source: &R,
    receive_tag: Tag,
) -> Result<Status>
where
    S: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    R: Source,
{
    let call = "MPI_Sendrecv";
    same_comm(call, destination.destination_comm(), source.source_comm())?;
    let sdt = msg.buffer_datatype();
    let rdt = buf.buffer_datatype();
    let rcount = buf.buffer_count();
    // SAFETY: both buffers are borrowed across the blocking call; `buf` uniquely, so the
    // two cannot overlap.
    let st = unsafe {
        rt(call)?.sendrecv(
            msg.buffer_pointer(),
            msg.buffer_count(),
            sdt.as_raw(),
            destination.destination_rank(),
            send_tag,
            buf.buffer_pointer_mut(),
            rcount,
            rdt.as_raw(),
            source.source_rank(),
            receive_tag,
            destination.destination_comm(),
        )?
    };
    Ok(Status(st))
}

/// [`send_receive_into_with_tags`] with send tag 0 and any receive tag.
pub fn send_receive_into<S, D, B, R>(
    msg: &S,
    destination: &D,
    buf: &mut B,
    source: &R,
) -> Result<Status>
where
    S: Buffer + ?Sized,
    D: Destination,
    B: BufferMut + ?Sized,
    R: Source,
{
    send_receive_into_with_tags(msg, destination, 0, buf, source, ANY_TAG)
}

/// Send `msg` to `destination` and receive one `T` from `source` (MPI_Sendrecv).
pub fn send_receive<T, S, D, R>(msg: &S, destination: &D, source: &R) -> Result<(T, Status)>
where
    T: Equivalence,
    S: Buffer + ?Sized,
    D: Destination,
    R: Source,
{
    let call = "MPI_Sendrecv";
    same_comm(call, destination.destination_comm(), source.source_comm())?;
    let sdt = msg.buffer_datatype();
    let rdt = T::equivalent_datatype();
    let mut slot = MaybeUninit::<T>::uninit();
    // SAFETY: `msg` is borrowed across the call; the slot has room for one T.
    let st = unsafe {
        rt(call)?.sendrecv(
            msg.buffer_pointer(),
            msg.buffer_count(),
            sdt.as_raw(),
            destination.destination_rank(),
            0,
            slot.as_mut_ptr() as *mut u8,
            1,
            rdt.as_raw(),
            source.source_rank(),
            ANY_TAG,
            destination.destination_comm(),
        )?
    };
    finish_single(call, slot, st)
}

/// Send `buf` to `destination`, then replace its contents with the message received from
/// `source` (MPI_Sendrecv_replace).
pub fn send_receive_replace_into<B, D, R>(
    buf: &mut B,
    destination: &D,
    source: &R,
) -> Result<Status>
where
    B: BufferMut + ?Sized,
    D: Destination,
    R: Source,
{
    let call = "MPI_Sendrecv_replace";
    same_comm(call, destination.destination_comm(), source.source_comm())?;
    let dt = buf.buffer_datatype();
    let count = buf.buffer_count();
    let r = rt(call)?;
    // The core posts the receive before it starts the send and does not withdraw the
    // receive if the send is refused, which would leave `buf` in use after we return:
    // check the destination here first.
    let size = r.comm_size(destination.destination_comm())? as Rank;
    let dest = destination.destination_rank();
    if dest != PROC_NULL && !(0..size).contains(&dest) {
        return Err(Error::new(
            ErrorClass::Rank,
            format!("{call}: invalid destination rank {dest} (communicator size {size})"),
        ));
    }
    // SAFETY: `buf` is uniquely borrowed across the blocking call.
    let st = unsafe {
        r.sendrecv_replace(
            buf.buffer_pointer_mut(),
            count,
            dt.as_raw(),
            destination.destination_rank(),
            0,
            source.source_rank(),
            ANY_TAG,
            destination.destination_comm(),
        )?
    };
    Ok(Status(st))
}
