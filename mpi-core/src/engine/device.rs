//! The request layer over native devices (`tsunagi_p2p::device`): peers on other sites.
//!
//! Matching stays here, in the same queues as the transports' arrivals, so that a wildcard
//! receive sees every peer in arrival order. What differs from the transports' path: the
//! device runs the long-message, synchronous and cancel protocols itself, so a send is one
//! call and completes on [`DeviceEvent::SendComplete`]; a receive matches an announced
//! arrival, tells the device ([`Device::accept`], after the poll), and takes the data as it
//! comes. Data crosses in the device's representation: native bytes go straight into the
//! receive buffer; external32 is converted into it part by part as the parts come
//! ([`X32Recv`]).

use tsunagi_p2p::device::{DataRep, DeviceCancel, DeviceEvent, Envelope};
use tsunagi_p2p::Rank;

use super::*;

/// An unexpected (or mprobe'd) message announced by a device.
pub(super) struct DeviceArrival {
    pub dev: u8,
    pub id: u64,
    /// The first part of the data (the whole message when `complete`).
    pub data: Vec<u8>,
    pub complete: bool,
}

/// A matched receive whose data streams in from a device.
pub(super) struct DeviceRecv {
    pub req: ReqId,
    /// The wire representation needs conversion: its state.
    pub staging: Option<X32Recv>,
}

/// An external32 receive converted as its parts arrive: every whole element goes straight
/// from the device's buffer into the receive buffer (no staging copy of the message);
/// only the bytes of an element split between two parts wait in `carry`.
pub(super) struct X32Recv {
    plan: crate::datatype::External32Plan,
    /// external32 bytes of one element.
    elem: usize,
    /// The start of a partial element.
    carry: Vec<u8>,
    /// Whole elements converted so far.
    elems: usize,
    /// Wire bytes taken so far (converted or carried): the next part's expected offset.
    taken: usize,
    /// Bytes arrived beyond the receive's `count` elements.
    truncated: bool,
}

impl X32Recv {
    fn new(dtype: &TypeRef) -> X32Recv {
        let plan = crate::datatype::External32Plan::new(dtype);
        let elem = plan.size(1).unwrap_or(0);
        X32Recv {
            plan,
            elem,
            carry: Vec::new(),
            elems: 0,
            taken: 0,
            truncated: false,
        }
    }

    /// Convert the next part (`data`, in order) into the `count` elements at `buf`.
    fn feed(&mut self, dtype: &TypeRef, buf: Buf, count: usize, mut data: &[u8]) {
        self.taken += data.len();
        if self.elem == 0 || self.elems >= count {
            self.truncated |= !data.is_empty();
            return;
        }
        if !self.carry.is_empty() {
            let t = (self.elem - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..t]);
            data = &data[t..];
            if self.carry.len() < self.elem {
                return;
            }
            let whole = std::mem::take(&mut self.carry);
            self.convert(dtype, buf, &whole, 1);
        }
        let k = (data.len() / self.elem).min(count - self.elems);
        self.convert(dtype, buf, &data[..k * self.elem], k);
        let rest = &data[k * self.elem..];
        if self.elems == count {
            self.truncated |= !rest.is_empty();
        } else {
            self.carry.extend_from_slice(rest);
        }
    }

    /// `k` whole elements from `wire` into elements `elems..elems + k` at `buf`.
    fn convert(&mut self, dtype: &TypeRef, buf: Buf, wire: &[u8], k: usize) {
        if k == 0 {
            return;
        }
        let at = buf.0.wrapping_offset(self.elems as isize * dtype.extent());
        // SAFETY: the receive buffer holds `count` elements of `dtype` (MPI contract), of
        // which elements `elems..elems + k < count` start at `at` (element i lies at
        // `buf + i * extent`); `wire` is the device's buffer, disjoint from it.
        unsafe { self.plan.unpack_partial(dtype, wire, at, k) };
        self.elems += k;
    }

    /// The message is whole: convert the whole basic elements of a last partial element;
    /// returns the native bytes written and whether the message was longer than the
    /// buffer.
    fn finish(mut self, dtype: &TypeRef, buf: Buf, count: usize) -> (usize, bool) {
        let mut native = self.elems * dtype.size();
        if !self.carry.is_empty() && self.elems < count {
            let at = buf.0.wrapping_offset(self.elems as isize * dtype.extent());
            // SAFETY: as in `convert`, for the partial element `elems < count`.
            let d = unsafe { self.plan.unpack_partial(dtype, &self.carry, at, 1) };
            native += d.native_bytes;
            self.carry.clear();
        }
        (native, self.truncated)
    }
}

impl Engine {
    /// Start a send to world rank `dest`, reached by device `dev`.
    pub(super) fn start_device_send(
        &mut self,
        id: ReqId,
        mode: SendMode,
        dev: usize,
        dest: Rank,
    ) -> MpiResult<()> {
        let rep = self.core.device_rep(dev as u8);
        let me = self.core.me;
        let req = self.core.reqs.get_mut(id.0).expect("live request");
        let (tag, context, bytes) = (req.tag, req.context, req.bytes());
        // One pass from the user's buffer to the wire representation; a buffered send's
        // copy (already packed) is converted or handed over as it is.
        let data = match (rep, req.packed.take()) {
            (DataRep::Native, Some(packed)) => packed,
            (DataRep::External32, Some(packed)) => to_external32(req.dtype(), &packed)?,
            (DataRep::Native, None) if req.dtype().contiguous_offset().is_some() => {
                let off = req.dtype().contiguous_offset().expect("contiguous");
                // SAFETY: a contiguous type's `count` elements are the `bytes` bytes from
                // `buf + off`, readable per the MPI contract; one copy, no zero-fill.
                // `wrapping_offset`, as in pack_range: buf may be MPI_BOTTOM.
                unsafe { std::slice::from_raw_parts(req.buf.0.wrapping_offset(off), bytes) }
                    .to_vec()
            }
            (DataRep::Native, None) => {
                let mut native = vec![0u8; bytes];
                // SAFETY: the send buffer holds `count` elements of `dtype` (MPI
                // contract); `native` has exactly their packed size.
                unsafe { req.dtype().pack_range(req.buf.0, req.count, 0, &mut native) };
                native
            }
            (DataRep::External32, None) => {
                let mut wire = Vec::new();
                // SAFETY: the send buffer holds `count` elements of `dtype` (MPI contract).
                unsafe {
                    crate::datatype::pack_external32(req.dtype(), req.buf.0, req.count, &mut wire)
                }?;
                wire
            }
        };
        req.status.bytes = bytes;
        let env = Envelope {
            src: me,
            dst: dest,
            tag,
            context,
            len: data.len() as u64,
        };
        let sync = mode == SendMode::Synchronous;
        self.router.devices()[dev]
            .send(env, sync, data, id.0 as u64)
            .map_err(p2p_fault)
    }

    /// MPI_Cancel of a send to a device's peer.
    pub(super) fn cancel_device_send(&mut self, id: ReqId, dev: usize) -> MpiResult<()> {
        match self.router.devices()[dev]
            .cancel_send(id.0 as u64)
            .map_err(p2p_fault)?
        {
            DeviceCancel::Cancelled => self.core.cancelled(id),
            DeviceCancel::NotCancelled | DeviceCancel::Pending => {}
        }
        Ok(())
    }

    /// Poll every device (polling engine), handling their events.
    pub(super) fn poll_devices(&mut self) -> MpiResult<usize> {
        let Engine { router, core } = self;
        let mut n = 0;
        for (i, d) in router.devices().iter_mut().enumerate() {
            n += d
                .poll(&mut |ev| core.on_device_event(i as u8, ev))
                .map_err(p2p_fault)?;
        }
        Ok(n)
    }

    /// Poll device `dev` only (a threaded-engine progress thread).
    pub(super) fn poll_device(&mut self, dev: usize) -> MpiResult<usize> {
        let Engine { router, core } = self;
        router.devices()[dev]
            .poll(&mut |ev| core.on_device_event(dev as u8, ev))
            .map_err(p2p_fault)
    }

    /// Tell the devices which arrivals matched (queued by the event handler, which cannot
    /// call the device it is called from).
    pub(super) fn flush_device_accepts(&mut self) -> MpiResult<()> {
        let accepts = std::mem::take(&mut self.core.dev_accepts);
        for (dev, id) in accepts {
            self.router.devices()[dev as usize]
                .accept(id)
                .map_err(p2p_fault)?;
        }
        Ok(())
    }
}

impl Core {
    pub(super) fn device_rep(&self, dev: u8) -> DataRep {
        self.dev_reps
            .get(dev as usize)
            .copied()
            .unwrap_or(DataRep::Native)
    }

    /// Mark a send cancelled and complete it.
    pub(super) fn cancelled(&mut self, id: ReqId) {
        if let Some(req) = self.reqs.get_mut(id.0) {
            req.status.cancelled = true;
            req.status.bytes = 0;
            if req.phase == Phase::Active {
                self.complete(id);
            }
        }
    }

    fn on_device_event(&mut self, dev: u8, ev: DeviceEvent) {
        match ev {
            DeviceEvent::Arrived {
                id,
                env,
                data,
                complete,
                ..
            } => {
                let a = Arrived {
                    src: env.src,
                    tag: env.tag,
                    len: env.len as usize,
                    body: Body::Device(DeviceArrival {
                        dev,
                        id,
                        data,
                        complete,
                    }),
                };
                match self.queue(env.context).take_posted(env.src, env.tag) {
                    Some(p) => self.consume(p.id, a),
                    None => self.queue(env.context).push_unexpected(a),
                }
            }
            DeviceEvent::Data { id, offset, data } => self.device_data(dev, id, offset, &data),
            DeviceEvent::Received { id } => {
                if let Some(r) = self.dev_recvs.remove(&(dev, id)) {
                    self.device_received(r);
                }
            }
            DeviceEvent::ArrivalCancelled { id } => {
                for q in self.queues.iter_mut() {
                    if let Some(pos) = q.unexpected.iter().position(
                        |a| matches!(&a.body, Body::Device(d) if d.dev == dev && d.id == id),
                    ) {
                        q.unexpected.remove(pos);
                        break;
                    }
                }
            }
            DeviceEvent::SendComplete { token } => {
                let id = ReqId(token as u32);
                if self
                    .reqs
                    .get(id.0)
                    .is_some_and(|r| r.phase == Phase::Active && matches!(r.op, Op::Send(_)))
                {
                    self.complete(id);
                }
            }
            DeviceEvent::CancelResult { token, cancelled } => {
                if cancelled {
                    self.cancelled(ReqId(token as u32));
                }
            }
        }
    }

    /// A device's arrival meets its receive (now, or from the unexpected queue or an
    /// mprobe).
    pub(super) fn consume_device(&mut self, id: ReqId, src: Rank, tag: i32, a: DeviceArrival) {
        self.dev_accepts.push((a.dev, a.id));
        let rep = self.device_rep(a.dev);
        if a.complete && rep == DataRep::Native {
            self.deliver_eager(id, src, tag, &a.data);
            return;
        }
        let source = {
            let comm = self.reqs.get(id.0).expect("live").comm;
            self.comm_rank_of(comm, src)
        };
        let req = self.reqs.get_mut(id.0).expect("live");
        req.status = Status {
            source,
            tag,
            error: 0,
            bytes: 0,
            cancelled: false,
        };
        req.received = 0;
        if rep != DataRep::Native {
            // Converted part by part, starting with the first.
            let mut x = X32Recv::new(req.dtype());
            x.feed(req.dtype(), req.buf, req.count, &a.data);
            let r = DeviceRecv {
                req: id,
                staging: Some(x),
            };
            if a.complete {
                self.device_received(r);
            } else {
                self.dev_recvs.insert((a.dev, a.id), r);
            }
            return;
        }
        let r = DeviceRecv {
            req: id,
            staging: None,
        };
        self.dev_recvs.insert((a.dev, a.id), r);
        self.device_data(a.dev, a.id, 0, &a.data);
    }

    fn device_data(&mut self, dev: u8, id: u64, offset: u64, data: &[u8]) {
        let Some(r) = self.dev_recvs.get_mut(&(dev, id)) else {
            self.set_fault(mpi_err(
                ErrorClass::Intern,
                format!("device protocol error: data for unknown arrival {id}"),
            ));
            return;
        };
        let offset = offset as usize;
        let req = self.reqs.get_mut(r.req.0).expect("live receive");
        if let Some(x) = r.staging.as_mut() {
            // Devices deliver a message's parts in order (the device contract); a
            // converting receive depends on it, as it converts each part as it comes.
            if offset != x.taken {
                let expected = x.taken;
                self.set_fault(mpi_err(
                    ErrorClass::Intern,
                    format!(
                        "device protocol error: data at offset {offset} of arrival {id}, \
                         expected {expected}"
                    ),
                ));
                return;
            }
            x.feed(req.dtype(), req.buf, req.count, data);
            return;
        }
        if offset < req.bytes() && !data.is_empty() {
            let take = data.len().min(req.bytes() - offset);
            match req.dtype().contiguous_offset() {
                // SAFETY: the receive buffer holds `bytes()` bytes from `buf + off`, and
                // `offset + take <= bytes()`.
                Some(off) => unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        req.buf.0.wrapping_offset(off).wrapping_add(offset),
                        take,
                    )
                },
                // SAFETY: the receive buffer holds `count` elements of `dtype`.
                None => unsafe {
                    req.dtype()
                        .unpack_range(req.buf.0, req.count, offset, &data[..take])
                },
            }
        }
        req.received = req.received.max(offset + data.len());
    }

    /// The whole message of a device receive is in: convert (external32), set the status,
    /// complete.
    fn device_received(&mut self, r: DeviceRecv) {
        let req = self.reqs.get_mut(r.req.0).expect("live receive");
        match r.staging {
            None => {
                let got = req.received;
                req.status.bytes = got.min(req.bytes());
                if got > req.bytes() {
                    req.status.error = ErrorClass::Truncate as i32;
                }
            }
            Some(x) => {
                let (native, truncated) = x.finish(req.dtype(), req.buf, req.count);
                req.status.bytes = native;
                if truncated {
                    req.status.error = ErrorClass::Truncate as i32;
                }
            }
        }
        self.complete(r.req);
    }
}

/// Convert elements of `dtype`, packed natively in `native`, to external32.
fn to_external32(dtype: &TypeRef, native: &[u8]) -> MpiResult<Vec<u8>> {
    let mut out = Vec::with_capacity(native.len());
    crate::datatype::packed_to_external32(dtype, native, &mut out)?;
    Ok(out)
}
