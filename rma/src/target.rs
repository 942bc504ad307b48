//! The target side: a service the core runs on every progress step. It keeps one receive
//! posted for requests on the window's private communicator, applies each request to the
//! window memory in arrival order (so accumulates are atomic per element and ordered per
//! origin, and an acknowledgement answers only after everything before it), grants locks
//! and counts the messages of active-target synchronisation.

use std::sync::atomic::Ordering;

use tsunagi_collectives::op::Op;
use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::runtime::Service;
use tsunagi_core::{MpiResult, Runtime, SendMode, ANY_SOURCE};

use crate::window::*;
use crate::wire::{self, AckKind, Kind, Request};

/// Largest request (header and runs) a `BIG` stub may announce.
const MAX_BIG_REQUEST: u64 = 1 << 30;

thread_local! {
    /// An address unique to this thread while it lives: who holds a window's target state
    /// ([`Window::advancer`]).
    static THIS_THREAD: u8 = const { 0 };
}

fn this_thread() -> usize {
    THIS_THREAD.with(|b| b as *const u8 as usize)
}

impl Service for Window {
    /// Serve the window's peers. Several threads may call this at once (an application
    /// thread on its way through a wait or test, a progress thread after a completion);
    /// one serves, and a call that finds it busy must not be lost: the one serving may
    /// have tested the request this call comes for just before it completed, and be about
    /// to leave. So the busy caller asks it for another pass (`again`), then tries once
    /// more in case it left before seeing the request. The one serving clears `again`
    /// before each pass and looks at it after releasing the state: a request that both
    /// missed would need the flag set after that look, but it is set before the second
    /// try, which fails only while the state is still held (SeqCst throughout).
    fn advance(&self, rt: &Runtime) -> bool {
        let me = this_thread();
        let mut did = false;
        loop {
            let mut t = match self.target.try_lock() {
                Ok(t) => t,
                // This thread, re-entering through a progressing call: its pass goes on.
                Err(_) if self.advancer.load(Ordering::SeqCst) == me => return did,
                Err(_) => {
                    self.again.store(true, Ordering::SeqCst);
                    match self.target.try_lock() {
                        Ok(t) => t,
                        Err(_) => return did,
                    }
                }
            };
            self.again.store(false, Ordering::SeqCst);
            self.advancer.store(me, Ordering::SeqCst);
            did |= self.serve(&mut t, rt);
            self.advancer.store(0, Ordering::SeqCst);
            drop(t);
            if !self.again.load(Ordering::SeqCst) {
                return did;
            }
        }
    }
}

impl Window {
    /// One pass of [`Window::advance`], the target state held.
    fn serve(&self, t: &mut TargetState, rt: &Runtime) -> bool {
        let mut did = false;
        if !t.locks.queue.is_empty() && self.lock_word(self.rank).is_some() {
            // A process of this node may have released the word since.
            self.grant(t);
        }
        loop {
            t.replies
                .retain(|(id, _)| !matches!(rt.test_quiet(*id), Ok(Some(_)) | Err(_)));
            if let Some(aw) = &t.awaiting {
                let id = match aw {
                    Awaiting::Request { req, .. } | Awaiting::Data { req, .. } => *req,
                };
                match rt.test_quiet(id) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => {
                        t.awaiting = None;
                        continue;
                    }
                }
                did = true;
                match t.awaiting.take().expect("checked") {
                    Awaiting::Request { src, buf, .. } => self.handle(t, src, &buf),
                    Awaiting::Data {
                        src,
                        head,
                        buf,
                        direct,
                        ..
                    } => {
                        if !direct {
                            self.apply(t, src, &head, &buf);
                        }
                    }
                }
                continue;
            }
            let Some(id) = t.posted else { break };
            match rt.test_quiet(id) {
                Ok(Some(st)) => {
                    did = true;
                    t.posted = None;
                    let buf = std::mem::take(&mut t.buf);
                    let n = st.bytes.min(buf.len());
                    if st.error == 0 && st.source >= 0 {
                        self.handle(t, st.source as usize, &buf[..n]);
                    } else {
                        self.refuse(t, st.source.max(0) as usize, "a truncated request");
                    }
                    t.buf = buf;
                    if self.post_into(t).is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    t.posted = None;
                    break;
                }
            }
        }
        did
    }
}

/// `cur = data op cur` for packed elements of builtin `elem`; false if the op is not a
/// predefined one defined on the element type or the lengths are not whole elements.
pub(crate) fn combine(op: &Op, elem: u8, data: &[u8], cur: &mut [u8]) -> bool {
    let Some(ty) = Window::elem_type(elem) else {
        return false;
    };
    let esz = ty.size().max(1);
    let ok = op.mpich_code().is_some()
        && op.check_type("MPI_Accumulate", &ty).is_ok()
        && data.len() == cur.len()
        && cur.len().is_multiple_of(esz);
    if !ok {
        return false;
    }
    match op {
        Op::NoOp => {}
        Op::Replace => cur.copy_from_slice(data),
        _ => {
            // SAFETY: both buffers hold the same whole number of elements of `ty`.
            unsafe { op.apply_packed(data.as_ptr(), cur.as_mut_ptr(), cur.len() / esz, &ty) }
        }
    }
    true
}

impl Window {
    /// Post the receive for the next request (at creation).
    pub(crate) fn post_request_receive(&self) -> MpiResult<()> {
        let mut t = lock(&self.target);
        self.post_into(&mut t)
    }

    fn post_into(&self, t: &mut TargetState) -> MpiResult<()> {
        let p = t.buf.as_mut_ptr();
        // SAFETY: the buffer is a boxed slice of REQ_BUF bytes owned by the window's target
        // state; it is not touched until the receive completes (only `advance` looks at it,
        // after the test says so) and is freed only after the receive is cancelled.
        let id = unsafe {
            self.rt.irecv(
                "MPI_Win (target)",
                p,
                REQ_BUF as i64,
                &self.byte,
                ANY_SOURCE,
                TAG_REQ,
                self.wcomm,
            )?
        };
        t.posted = Some(id);
        Ok(())
    }

    fn refuse(&self, t: &mut TargetState, src: usize, why: &str) {
        if let Some(e) = t.errors.get_mut(src) {
            *e += 1;
        }
        if !t.warned && std::env::var_os("TSUNAGI_RMA_DEBUG").is_some() {
            eprintln!(
                "tsunagi: window target {} refused a request of rank {src}: {why}",
                self.rank
            );
        }
        t.warned = true;
    }

    /// Send `data` back to `src` (owned until the send completes).
    fn reply(&self, t: &mut TargetState, src: usize, tag: i32, data: Vec<u8>) {
        // SAFETY: the vector's heap buffer does not move when the vector moves into
        // `replies`, where it stays until the send completes.
        let sent = unsafe {
            self.rt.isend(
                "MPI_Win (target)",
                data.as_ptr(),
                data.len() as i64,
                &self.byte,
                src as i32,
                tag,
                self.wcomm,
                SendMode::Standard,
            )
        };
        if let Ok(id) = sent {
            t.replies.push((id, data));
        }
    }

    fn ack(&self, t: &mut TargetState, src: usize, kind: AckKind) {
        let errors = std::mem::take(&mut t.errors[src]);
        self.reply(t, src, TAG_ACK, wire::encode_ack(kind, errors).to_vec());
    }

    /// The window memory a request's runs name, as (address, length) pieces, or None if
    /// any byte lies outside the window (or outside attached memory).
    fn resolve(&self, head: &Request) -> Option<Vec<(*mut u8, usize)>> {
        let mut out = Vec::with_capacity(head.runs.len());
        let regions = (self.flavor == Flavor::Dynamic).then(|| lock(&self.regions).clone());
        for &(off, len) in &head.runs {
            let start = head.base as i128 + off as i128;
            let end = start + len as i128;
            let ok = match &regions {
                None => start >= 0 && end <= self.size as i128,
                Some(rs) => rs
                    .iter()
                    .any(|&(b, n)| start >= b as i128 && end <= b as i128 + n as i128),
            };
            if !ok {
                return None;
            }
            let addr = if regions.is_some() {
                start as usize
            } else {
                self.base + start as usize
            };
            out.push((addr as *mut u8, len as usize));
        }
        Some(out)
    }

    pub(crate) fn elem_type(elem: u8) -> Option<TypeRef> {
        if elem == wire::ELEM_BYTES {
            return Some(Datatype::builtin(Builtin::Byte));
        }
        Builtin::ALL
            .get(elem as usize)
            .map(|b| Datatype::builtin(*b))
    }

    /// A request message arrived from `src`.
    fn handle(&self, t: &mut TargetState, src: usize, msg: &[u8]) {
        let (head, inline) = match Request::decode(msg) {
            Ok(v) => v,
            Err(e) => return self.refuse(t, src, &e.to_string()),
        };
        if head.flags & wire::BIG != 0 {
            if head.payload_len > MAX_BIG_REQUEST {
                return self.refuse(t, src, "an oversized request");
            }
            let mut buf = vec![0u8; head.payload_len as usize];
            if let Ok(req) = self.recv_data(src, buf.as_mut_ptr(), buf.len()) {
                t.awaiting = Some(Awaiting::Request { src, req, buf });
            }
            return;
        }
        if head.flags & wire::FOLLOWS != 0 {
            // The data is as long as the runs (checked by decode), so a window-sized
            // check bounds what we allocate.
            let Some(pieces) = self.resolve(&head) else {
                // Still take the data off the wire, then refuse.
                let mut buf = vec![0u8; head.payload_len.min(self.max_len()) as usize];
                if let Ok(req) = self.recv_data(src, buf.as_mut_ptr(), buf.len()) {
                    // Received and dropped: nothing is applied.
                    t.awaiting = Some(Awaiting::Data {
                        src,
                        req,
                        head: head.clone(),
                        buf,
                        direct: true,
                    });
                }
                if head.kind == Kind::GetAcc {
                    let n = head.payload_len.min(self.max_len()) as usize;
                    self.reply(t, src, TAG_REPLY, vec![0u8; n]);
                }
                return self.refuse(t, src, "a target range outside the window");
            };
            // A put into one contiguous piece lands straight in the window.
            if head.kind == Kind::Put && pieces.len() == 1 {
                if let Ok(req) = self.recv_data(src, pieces[0].0, pieces[0].1) {
                    t.awaiting = Some(Awaiting::Data {
                        src,
                        req,
                        head,
                        buf: Vec::new(),
                        direct: true,
                    });
                }
                return;
            }
            let mut buf = vec![0u8; head.payload_len as usize];
            if let Ok(req) = self.recv_data(src, buf.as_mut_ptr(), buf.len()) {
                t.awaiting = Some(Awaiting::Data {
                    src,
                    req,
                    head,
                    buf,
                    direct: false,
                });
            }
            return;
        }
        self.apply(t, src, &head, inline);
    }

    fn max_len(&self) -> u64 {
        if self.flavor == Flavor::Dynamic {
            lock(&self.regions).iter().map(|r| r.1 as u64).sum()
        } else {
            self.size as u64
        }
    }

    fn recv_data(&self, src: usize, p: *mut u8, len: usize) -> MpiResult<tsunagi_core::ReqId> {
        // SAFETY: `p..p+len` is a buffer kept in `awaiting` (or window memory) until the
        // receive completes.
        unsafe {
            self.rt.irecv(
                "MPI_Win (target)",
                p,
                len as i64,
                &self.byte,
                src as i32,
                TAG_DATA,
                self.wcomm,
            )
        }
    }

    /// Apply a complete request (data in hand).
    fn apply(&self, t: &mut TargetState, src: usize, head: &Request, data: &[u8]) {
        match head.kind {
            Kind::Flush => self.ack(t, src, AckKind::Flushed),
            Kind::Lock => {
                let excl = head.flags & wire::EXCLUSIVE != 0;
                t.locks.queue.push_back((src, excl));
                self.grant(t);
            }
            Kind::Unlock => {
                let excl = t.locks.exclusive == Some(src);
                if excl {
                    t.locks.exclusive = None;
                } else {
                    t.locks.shared = t.locks.shared.saturating_sub(1);
                }
                if let Some(w) = self.lock_word(self.rank) {
                    RwWord::release(w, excl);
                }
                self.ack(t, src, AckKind::Unlocked);
                self.grant(t);
            }
            Kind::Post => {
                self.posts[src].fetch_add(1, Ordering::AcqRel);
            }
            Kind::Fence => {
                self.fences[src].fetch_add(1, Ordering::AcqRel);
            }
            Kind::Complete => {
                self.completes.fetch_add(1, Ordering::AcqRel);
            }
            Kind::Put | Kind::Get | Kind::Acc | Kind::GetAcc | Kind::Cas => {
                self.access(t, src, head, data)
            }
        }
    }

    /// Grant queued locks in order while they are compatible.
    pub(crate) fn grant(&self, t: &mut TargetState) {
        let word = self.lock_word(self.rank);
        while let Some(&(who, excl)) = t.locks.queue.front() {
            let free = match word {
                // Processes of this node lock the word directly: it is the authority.
                Some(w) => RwWord::try_acquire(w, excl),
                None => t.locks.exclusive.is_none() && (!excl || t.locks.shared == 0),
            };
            if !free {
                break;
            }
            t.locks.queue.pop_front();
            if excl {
                t.locks.exclusive = Some(who);
            } else {
                t.locks.shared += 1;
            }
            self.ack(t, who, AckKind::Granted);
        }
    }

    fn access(&self, t: &mut TargetState, src: usize, head: &Request, data: &[u8]) {
        let total = head.run_bytes() as usize;
        let pieces = self.resolve(head);
        let answers = matches!(head.kind, Kind::Get | Kind::GetAcc | Kind::Cas);
        let Some(pieces) = pieces else {
            self.refuse(t, src, "a target range outside the window");
            if answers {
                // The origin waits for an answer of this length.
                self.reply(
                    t,
                    src,
                    TAG_REPLY,
                    vec![0u8; total.min(self.max_len() as usize)],
                );
            }
            return;
        };
        // SAFETY (for the gathers and scatters below): `resolve` checked that every piece
        // lies within the window's memory (or attached memory), which stays valid while the
        // window lives; `data` and the scratch vectors are ours.
        let gather = || {
            let mut v = Vec::with_capacity(total);
            for &(p, n) in &pieces {
                v.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
            }
            v
        };
        let scatter = |src_bytes: &[u8]| {
            let mut at = 0;
            for &(p, n) in &pieces {
                unsafe { std::ptr::copy(src_bytes.as_ptr().add(at), p, n) };
                at += n;
            }
        };
        match head.kind {
            Kind::Put => scatter(data),
            Kind::Get => self.reply(t, src, TAG_REPLY, gather()),
            Kind::Acc | Kind::GetAcc => {
                // Processes of this node accumulate into a node segment directly, under
                // its lock word: take it too.
                let _held = self
                    .shared_target(self.rank)
                    .map(|(_, w)| SegmentLock::acquire(w));
                let old = gather();
                if head.kind == Kind::GetAcc {
                    self.reply(t, src, TAG_REPLY, old.clone());
                }
                let Some(op) = Op::from_mpich_index(head.op as u32) else {
                    return self.refuse(t, src, "an unknown op");
                };
                let mut cur = old;
                if !combine(&op, head.elem, data, &mut cur) {
                    return self.refuse(t, src, "an op not defined on the element type");
                }
                if !matches!(op, Op::NoOp) {
                    scatter(&cur);
                }
            }
            Kind::Cas => {
                let _held = self
                    .shared_target(self.rank)
                    .map(|(_, w)| SegmentLock::acquire(w));
                let old = gather();
                let (newv, cmp) = data.split_at(total);
                if old == cmp {
                    scatter(newv);
                }
                self.reply(t, src, TAG_REPLY, old);
            }
            _ => unreachable!("only accesses come here"),
        }
    }
}
