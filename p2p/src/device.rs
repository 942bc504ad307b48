//! The native tier: devices that speak MPI themselves.
//!
//! A [`Transport`](crate::Transport) moves opaque messages; the request layer runs its own
//! envelope, eager/rendezvous, synchronous and cancel protocols over it. A [`Device`]
//! instead carries MPI's envelope (source, destination, tag, context) and its protocols on
//! its own wire — IMPI between sites is one: its packets name the source rank, the tag and
//! a 64-bit context id, it runs its own long-message and synchronous handshakes, and a
//! cancel must reach the receiver's unexpected queue. Matching stays in the MPI core, so
//! that a wildcard receive sees messages from every device and transport in MPI's order;
//! the device tells the core when a message is announced and the core tells the device
//! when it matched ([`Device::accept`]).
//!
//! The exchange, both ways, is the one IMPI defines (and MPICH's ch4 netmods and Open
//! MPI's MTLs resemble):
//!
//! * send: [`Device::send`] with an [`Envelope`] and the data in the device's
//!   representation ([`DataRep`]); [`DeviceEvent::SendComplete`] when the buffer semantics
//!   are met (a synchronous or long send: once the receiver matched);
//! * receive: [`DeviceEvent::Arrived`] as soon as the first part is in (probe sees it);
//!   the core matches it now or later and calls [`Device::accept`]; the rest comes as
//!   [`DeviceEvent::Data`] and ends with [`DeviceEvent::Received`];
//! * cancel: [`Device::cancel_send`] answers at once or with
//!   [`DeviceEvent::CancelResult`]; [`DeviceEvent::ArrivalCancelled`] withdraws an
//!   unmatched arrival whose sender cancelled it.
//!
//! Devices join the job through a [`GridJoin`](crate::boot::GridJoin) at start-up: they
//! serve the ranks of other sites.

use std::sync::Arc;
use std::time::Duration;

use crate::{EventSource, P2pError, Rank};

/// MPI's envelope as a device carries it. Ranks are world ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Sending world rank.
    pub src: Rank,
    /// Receiving world rank.
    pub dst: Rank,
    /// Tag.
    pub tag: i32,
    /// Context id of the communicator (point-to-point or collective context).
    pub context: u32,
    /// Whole message length in the device's representation.
    pub len: u64,
}

/// How user data crosses a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataRep {
    /// The sender's memory layout, packed (same architecture on both ends).
    Native,
    /// MPI's external32 (big-endian, fixed sizes): heterogeneous ends agree bit for bit.
    External32,
}

/// What a device offers and requires; read once after start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Data representation on the wire.
    pub data_rep: DataRep,
    /// Largest tag the device carries (MPI_TAG_UB of the job is at most this).
    pub tag_ub: i32,
    /// It has timers: [`Device::next_deadline`] matters.
    pub timers: bool,
}

/// What happened on a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// A message's first part arrived. `data` is the whole message when `complete`.
    Arrived {
        /// Id for [`Device::accept`] and the events that follow.
        id: u64,
        /// The envelope (`len` is the whole length).
        env: Envelope,
        /// The sender waits for the match (synchronous, or a long message).
        sync: bool,
        /// The first part of the data.
        data: Vec<u8>,
        /// `data` is the whole message.
        complete: bool,
    },
    /// More data of an accepted message, belonging at byte `offset`.
    Data { id: u64, offset: u64, data: Vec<u8> },
    /// The last byte of an accepted message arrived.
    Received { id: u64 },
    /// The sender cancelled this arrival before it matched: forget it.
    ArrivalCancelled { id: u64 },
    /// The send with this token is complete.
    SendComplete { token: u64 },
    /// The answer to a [`Device::cancel_send`] that returned [`DeviceCancel::Pending`].
    CancelResult { token: u64, cancelled: bool },
}

/// The immediate answer of [`Device::cancel_send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceCancel {
    /// Cancelled; no event follows for this send.
    Cancelled,
    /// Too late; the send completes normally.
    NotCancelled,
    /// Asked the receiver; [`DeviceEvent::CancelResult`] follows.
    Pending,
}

/// The contract of a native device. No method blocks except [`Device::finish`].
pub trait Device: Send {
    /// A short name for logs and errors ("impi").
    fn name(&self) -> &'static str;
    /// What the device offers.
    fn caps(&self) -> DeviceCaps;
    /// Send `data` (already in [`DeviceCaps::data_rep`]); `token` names the send in the
    /// events (unique among this device's sends in flight).
    fn send(
        &mut self,
        env: Envelope,
        sync: bool,
        data: Vec<u8>,
        token: u64,
    ) -> Result<(), P2pError>;
    /// The core matched arrival `id` to a receive: acknowledge it (synchronous and long
    /// messages) and let the rest come.
    fn accept(&mut self, id: u64) -> Result<(), P2pError>;
    /// Try to cancel the send `token`.
    fn cancel_send(&mut self, token: u64) -> Result<DeviceCancel, P2pError>;
    /// Move bytes without blocking and hand what happened to `sink`. Returns how many
    /// events were delivered.
    fn poll(&mut self, sink: &mut dyn FnMut(DeviceEvent)) -> Result<usize, P2pError>;
    /// What to block on when idle (see [`EventSource`]).
    fn event_source(&self) -> Arc<dyn EventSource>;
    /// A communicator with context pair `context` was created over `members` (world
    /// ranks); devices with per-communicator state or collectives keep it here.
    fn comm_created(&mut self, _context: u32, _members: &[Rank]) {}
    /// The communicator with context pair `context` was freed.
    fn comm_freed(&mut self, _context: u32) {}
    /// The next moment [`Device::poll`] must run even if nothing arrives, if any.
    fn next_deadline(&self) -> Option<std::time::Instant> {
        None
    }
    /// MPI_Finalize: finish what is queued, say goodbye to the peers and wait (at most
    /// `timeout`) until they said goodbye too.
    fn finish(&mut self, timeout: Duration) -> Result<(), P2pError>;
}

/// Collective thresholds a grid join agreed for the whole job (IMPI's C_COLL_XSIZE and
/// C_COLL_MAXLINEAR), for the collective algorithms across sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridCollParams {
    /// Bytes per block from which collectives across sites take their "long" protocols.
    pub xsize: usize,
    /// Number of sites up to which the algorithms among site masters are linear.
    pub maxlinear: usize,
}

static GRID_COLL: std::sync::OnceLock<GridCollParams> = std::sync::OnceLock::new();

/// Record the job's agreed collective thresholds (once, at start-up; later calls are
/// ignored: every process of a job agrees on one value).
pub fn set_grid_coll_params(p: GridCollParams) {
    let _ = GRID_COLL.set(p);
}

/// The job's agreed collective thresholds, if a grid join set them.
pub fn grid_coll_params() -> Option<GridCollParams> {
    GRID_COLL.get().copied()
}
