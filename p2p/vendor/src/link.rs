//! What the transport needs of a vendor MPI, as a trait: the loaded vendor implements it
//! through the shim, and the tests implement it with an in-memory world
//! (`sim::SimWorld`, test builds only) so the transport's logic runs without any MPI.

use std::ffi::c_int;

use tsunagi_p2p::P2pError;

use crate::frame;
use crate::vendor::{check, Vendor};

/// A vendor request's id.
pub type Req = c_int;

/// Non-blocking point-to-point calls on the transport's own communicator.
pub trait Link: Send {
    /// This process's rank in the vendor's world.
    fn rank(&self) -> u32;
    /// The vendor world's size.
    fn size(&self) -> usize;
    /// Start sending `len` bytes at `buf` to `dest` under `tag`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unchanged until [`Link::test`] reports the
    /// request complete.
    unsafe fn isend(
        &mut self,
        buf: *const u8,
        len: usize,
        dest: u32,
        tag: i32,
    ) -> Result<Req, P2pError>;
    /// Start receiving exactly `len` bytes from `src` under `tag` into `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid, and not be read or written by anyone else, until
    /// [`Link::test`] reports the request complete.
    unsafe fn irecv(
        &mut self,
        buf: *mut u8,
        len: usize,
        src: u32,
        tag: i32,
    ) -> Result<Req, P2pError>;
    /// Post a receive of at most `len` bytes into `buf` from any source under any tag,
    /// ahead of the message; it never takes a message whose tag is [`frame::on_bulk`].
    /// Receives posted ahead take messages in the order they were posted. The request is
    /// persistent: once [`Link::test_any`] reported it complete, [`Link::restart_any`]
    /// posts it again into the same buffer (its id stays taken for good).
    ///
    /// # Safety
    /// As [`Link::irecv`], until [`Link::test_any`] reports the request complete, and
    /// again from each [`Link::restart_any`] of it to its completion.
    unsafe fn irecv_any(&mut self, buf: *mut u8, len: usize) -> Result<Req, P2pError>;
    /// Post the receive `req` of [`Link::irecv_any`], which completed, again into its
    /// buffer.
    ///
    /// # Safety
    /// The buffer given to [`Link::irecv_any`] must be valid, and not read or written by
    /// anyone else, until [`Link::test_any`] reports the request complete.
    unsafe fn restart_any(&mut self, req: Req) -> Result<(), P2pError>;
    /// Whether `req` completed (a completed request's id is free for reuse).
    fn test(&mut self, req: Req) -> Result<bool, P2pError>;
    /// Test the plain requests `reqs` (not those of [`Link::irecv_any`]) at once: the
    /// positions in `reqs` of those complete, into `done` (cleared first), whose ids are
    /// free for reuse. The vendor's `MPI_Testsome`: its progress runs once, not per request.
    fn test_some(&mut self, reqs: &[Req], done: &mut Vec<usize>) -> Result<(), P2pError> {
        done.clear();
        for (i, &r) in reqs.iter().enumerate() {
            if self.test(r)? {
                done.push(i);
            }
        }
        Ok(())
    }
    /// Whether the receive `req` posted by [`Link::irecv_any`] (or restarted) completed:
    /// its (source, tag, bytes). A message longer than the buffer is an error.
    fn test_any(&mut self, req: Req) -> Result<Option<(u32, i32, usize)>, P2pError>;
    /// The first message waiting from any source: (source, tag, bytes).
    fn iprobe(&mut self) -> Result<Option<(u32, i32, usize)>, P2pError>;
    /// The first message waiting under `tag` from any source: (source, bytes).
    fn iprobe_tag(&mut self, tag: i32) -> Result<Option<(u32, usize)>, P2pError>;
    /// Receive the message [`Link::iprobe`] just reported (`src`, `tag`) into `buf`, whose
    /// length is that message's.
    fn recv_probed(&mut self, buf: &mut [u8], src: u32, tag: i32) -> Result<(), P2pError>;
    /// Whether a message from `src` with `tag` (a bulk tag) waits on the bulk
    /// communicator, matched by no posted receive.
    fn iprobe_bulk(&mut self, src: u32, tag: i32) -> Result<bool, P2pError>;
}

/// The loaded vendor MPI, through the shim.
pub struct VendorLink(pub &'static Vendor);

fn len_int(len: usize) -> Result<c_int, P2pError> {
    c_int::try_from(len)
        .map_err(|_| P2pError::Other(format!("vendor: a message of {len} bytes is too long")))
}

impl Link for VendorLink {
    fn rank(&self) -> u32 {
        self.0.rank
    }
    fn size(&self) -> usize {
        self.0.size
    }
    unsafe fn isend(
        &mut self,
        buf: *const u8,
        len: usize,
        dest: u32,
        tag: i32,
    ) -> Result<Req, P2pError> {
        let mut idx: c_int = -1;
        // SAFETY: the caller keeps the buffer valid until completion (this fn's contract).
        let bulk = frame::on_bulk(tag) as c_int;
        let rc =
            unsafe { (self.0.api.isend)(buf, len_int(len)?, dest as c_int, tag, bulk, &mut idx) };
        check(self.0.api, "MPI_Isend", rc)?;
        Ok(idx)
    }
    unsafe fn irecv(
        &mut self,
        buf: *mut u8,
        len: usize,
        src: u32,
        tag: i32,
    ) -> Result<Req, P2pError> {
        let mut idx: c_int = -1;
        // SAFETY: the caller keeps the buffer valid and untouched until completion.
        let bulk = frame::on_bulk(tag) as c_int;
        let rc =
            unsafe { (self.0.api.irecv)(buf, len_int(len)?, src as c_int, tag, bulk, &mut idx) };
        check(self.0.api, "MPI_Irecv", rc)?;
        Ok(idx)
    }
    unsafe fn irecv_any(&mut self, buf: *mut u8, len: usize) -> Result<Req, P2pError> {
        let mut idx: c_int = -1;
        // SAFETY: the caller keeps the buffer valid and untouched until completion.
        let rc = unsafe { (self.0.api.irecv_any)(buf, len_int(len)?, &mut idx) };
        check(self.0.api, "MPI_Irecv", rc)?;
        Ok(idx)
    }
    unsafe fn restart_any(&mut self, req: Req) -> Result<(), P2pError> {
        // SAFETY: a plain int; the shim checks that `req` names an inactive receive of
        // irecv_any's, whose buffer the caller keeps (this fn's contract).
        let rc = unsafe { (self.0.api.restart_any)(req) };
        check(self.0.api, "MPI_Start", rc)
    }
    fn test_any(&mut self, req: Req) -> Result<Option<(u32, i32, usize)>, P2pError> {
        let (mut done, mut src, mut tag, mut count): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
        // SAFETY: four writable ints; the shim checks that `req` names a live request.
        let rc = unsafe { (self.0.api.test_any)(req, &mut done, &mut src, &mut tag, &mut count) };
        if rc == 0 && done == 0 {
            // The idle poll: nothing more to look at.
            return Ok(None);
        }
        check(self.0.api, "MPI_Test", rc).map_err(|e| match e {
            P2pError::Other(s) if s.to_ascii_lowercase().contains("truncat") => P2pError::Other(format!(
                "{s} (a first message longer than this rank's receive buffer: TSUNAGI_VENDOR_SHORT must be the same on every rank)"
            )),
            e => e,
        })?;
        if done == 0 {
            return Ok(None);
        }
        if src < 0 || src as usize >= self.0.size || count < 0 {
            return Err(P2pError::Other(format!(
                "vendor: MPI_Test reported a message from rank {src} of {count} bytes"
            )));
        }
        Ok(Some((src as u32, tag, count as usize)))
    }
    fn test(&mut self, req: Req) -> Result<bool, P2pError> {
        let mut done: c_int = 0;
        // SAFETY: plain ints; the shim checks that `req` names a live request.
        let rc = unsafe { (self.0.api.test)(req, &mut done) };
        if rc != 0 {
            check(self.0.api, "MPI_Test", rc)?;
        }
        Ok(done != 0)
    }
    fn test_some(&mut self, reqs: &[Req], done: &mut Vec<usize>) -> Result<(), P2pError> {
        done.clear();
        let n = len_int(reqs.len())?;
        let mut at: Vec<c_int> = vec![0; reqs.len()];
        let mut ndone: c_int = 0;
        // SAFETY: `reqs` holds n ints and `at` room for n (at most n complete); the shim
        // checks that every id names a live plain request.
        let rc = unsafe { (self.0.api.test_some)(reqs.as_ptr(), n, at.as_mut_ptr(), &mut ndone) };
        check(self.0.api, "MPI_Testsome", rc)?;
        done.extend(at[..ndone.clamp(0, n) as usize].iter().map(|&i| i as usize));
        Ok(())
    }
    fn iprobe(&mut self) -> Result<Option<(u32, i32, usize)>, P2pError> {
        let (mut found, mut src, mut tag, mut count): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
        // SAFETY: four writable ints.
        let rc = unsafe { (self.0.api.iprobe)(&mut found, &mut src, &mut tag, &mut count) };
        check(self.0.api, "MPI_Iprobe", rc)?;
        if found == 0 {
            return Ok(None);
        }
        if src < 0 || src as usize >= self.0.size || count < 0 {
            return Err(P2pError::Other(format!(
                "vendor: MPI_Iprobe reported a message from rank {src} of {count} bytes"
            )));
        }
        Ok(Some((src as u32, tag, count as usize)))
    }
    fn iprobe_tag(&mut self, tag: i32) -> Result<Option<(u32, usize)>, P2pError> {
        let (mut found, mut src, mut count): (c_int, c_int, c_int) = (0, 0, 0);
        // SAFETY: three writable ints.
        let rc = unsafe { (self.0.api.iprobe_tag)(tag, &mut found, &mut src, &mut count) };
        check(self.0.api, "MPI_Iprobe", rc)?;
        if found == 0 {
            return Ok(None);
        }
        if src < 0 || src as usize >= self.0.size || count < 0 {
            return Err(P2pError::Other(format!(
                "vendor: MPI_Iprobe reported a message from rank {src} of {count} bytes"
            )));
        }
        Ok(Some((src as u32, count as usize)))
    }
    fn recv_probed(&mut self, buf: &mut [u8], src: u32, tag: i32) -> Result<(), P2pError> {
        // SAFETY: the receive writes at most buf.len() bytes into buf.
        let rc =
            unsafe { (self.0.api.recv)(buf.as_mut_ptr(), len_int(buf.len())?, src as c_int, tag) };
        check(self.0.api, "MPI_Recv", rc)
    }
    fn iprobe_bulk(&mut self, src: u32, tag: i32) -> Result<bool, P2pError> {
        let mut found: c_int = 0;
        // SAFETY: one writable int.
        let rc = unsafe { (self.0.api.iprobe_bulk)(src as c_int, tag, &mut found) };
        check(self.0.api, "MPI_Iprobe", rc)?;
        Ok(found != 0)
    }
}

#[cfg(test)]
pub mod sim {
    //! An in-memory vendor world: messages per (source, destination) in send order; a
    //! receive posted for a source and tag takes the first such message, a receive posted
    //! ahead ([`Link::irecv_any`]) the first message not on the bulk communicator; sends
    //! complete only once received, and the order in which receives of bulk messages
    //! complete is the test's to choose (`hold_rests`).

    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use super::*;

    struct Msg {
        src: u32,
        dest: u32,
        tag: i32,
        bytes: Vec<u8>,
        send_req: (u32, Req),
    }

    /// A posted receive: (rank, req, buf, len, Some((src, tag)), or None for any).
    type Posted = (u32, Req, usize, usize, Option<(u32, i32)>);
    /// A completed receive: (rank, req, (src, tag, bytes) or a truncation error).
    type Done = (u32, Req, Result<(u32, i32, usize), String>);

    #[derive(Default)]
    struct World {
        /// In flight, in global send order.
        flight: VecDeque<Msg>,
        /// Send requests completed, per rank.
        sent: Vec<(u32, Req)>,
        /// Posted receives, in posting order.
        posted: Vec<Posted>,
        /// Completed receives.
        done_recvs: Vec<Done>,
        next_req: Req,
        /// Receives posted ahead (persistent): (rank, req, buf, len).
        persistent: Vec<(u32, Req, usize, usize)>,
        /// While true, bulk messages (rests, read data) are not received.
        hold: bool,
    }

    /// A world shared by the simulated ranks.
    #[derive(Clone, Default)]
    pub struct SimWorld(Arc<Mutex<World>>);

    impl SimWorld {
        /// Hold (true) or release the bulk messages.
        pub fn hold_rests(&self, hold: bool) {
            self.0.lock().unwrap().hold = hold;
        }
        /// A rank's link.
        pub fn link(&self, rank: u32, size: usize) -> SimLink {
            SimLink {
                w: self.clone(),
                rank,
                size,
            }
        }
        /// Receives posted ahead by `rank` and not yet completed.
        pub fn posted_ahead(&self, rank: u32) -> usize {
            let w = self.0.lock().unwrap();
            w.posted
                .iter()
                .filter(|p| p.0 == rank && p.4.is_none())
                .count()
        }
    }

    /// One simulated rank.
    pub struct SimLink {
        w: SimWorld,
        rank: u32,
        size: usize,
    }

    impl SimLink {
        fn match_posted(w: &mut World) {
            let mut i = 0;
            while i < w.posted.len() {
                let (rank, req, buf, len, from) = w.posted[i];
                let hold = w.hold;
                let at = w.flight.iter().position(|m| {
                    m.dest == rank
                        && match from {
                            Some((src, tag)) => !hold && m.src == src && m.tag == tag,
                            None => !frame::on_bulk(m.tag),
                        }
                });
                let Some(at) = at else {
                    i += 1;
                    continue;
                };
                let m = w.flight.remove(at).unwrap();
                let result = if from.is_some() {
                    assert_eq!(m.bytes.len(), len, "receive of the wrong length");
                    Ok((m.src, m.tag, len))
                } else if m.bytes.len() > len {
                    Err(format!(
                        "message truncated ({} bytes into {len})",
                        m.bytes.len()
                    ))
                } else {
                    Ok((m.src, m.tag, m.bytes.len()))
                };
                if let Ok((_, _, n)) = result {
                    // SAFETY: the receiver promised (irecv's contract) that buf..buf+len
                    // stays valid and untouched until it sees this request complete;
                    // n <= len.
                    unsafe { std::ptr::copy_nonoverlapping(m.bytes.as_ptr(), buf as *mut u8, n) };
                }
                w.sent.push(m.send_req);
                w.done_recvs.push((rank, req, result));
                w.posted.remove(i);
            }
        }

        fn post(&mut self, buf: *mut u8, len: usize, from: Option<(u32, i32)>) -> Req {
            let mut w = self.w.0.lock().unwrap();
            w.next_req += 1;
            let req = w.next_req;
            w.posted.push((self.rank, req, buf as usize, len, from));
            if from.is_none() {
                w.persistent.push((self.rank, req, buf as usize, len));
            }
            Self::match_posted(&mut w);
            req
        }

        /// Take the completion of receive `req`, if it completed.
        fn take_done(&mut self, req: Req) -> Option<Result<(u32, i32, usize), String>> {
            let mut w = self.w.0.lock().unwrap();
            Self::match_posted(&mut w);
            let i = w
                .done_recvs
                .iter()
                .position(|d| d.0 == self.rank && d.1 == req)?;
            Some(w.done_recvs.remove(i).2)
        }
    }

    impl Link for SimLink {
        fn rank(&self) -> u32 {
            self.rank
        }
        fn size(&self) -> usize {
            self.size
        }
        unsafe fn isend(
            &mut self,
            buf: *const u8,
            len: usize,
            dest: u32,
            tag: i32,
        ) -> Result<Req, P2pError> {
            let mut w = self.w.0.lock().unwrap();
            w.next_req += 1;
            let req = w.next_req;
            // SAFETY: isend's contract: buf..buf+len is valid now.
            let bytes = unsafe { std::slice::from_raw_parts(buf, len) }.to_vec();
            w.flight.push_back(Msg {
                src: self.rank,
                dest,
                tag,
                bytes,
                send_req: (self.rank, req),
            });
            Self::match_posted(&mut w);
            Ok(req)
        }
        unsafe fn irecv(
            &mut self,
            buf: *mut u8,
            len: usize,
            src: u32,
            tag: i32,
        ) -> Result<Req, P2pError> {
            Ok(self.post(buf, len, Some((src, tag))))
        }
        unsafe fn irecv_any(&mut self, buf: *mut u8, len: usize) -> Result<Req, P2pError> {
            Ok(self.post(buf, len, None))
        }
        unsafe fn restart_any(&mut self, req: Req) -> Result<(), P2pError> {
            let mut w = self.w.0.lock().unwrap();
            let me = self.rank;
            let &(_, _, buf, len) = w
                .persistent
                .iter()
                .find(|p| p.0 == me && p.1 == req)
                .expect("restart of a receive posted ahead");
            assert!(
                !w.posted.iter().any(|p| p.0 == me && p.1 == req)
                    && !w.done_recvs.iter().any(|d| d.0 == me && d.1 == req),
                "restart of a receive not taken"
            );
            w.posted.push((me, req, buf, len, None));
            Self::match_posted(&mut w);
            Ok(())
        }
        fn test(&mut self, req: Req) -> Result<bool, P2pError> {
            let key = (self.rank, req);
            {
                let mut w = self.w.0.lock().unwrap();
                Self::match_posted(&mut w);
                if let Some(i) = w.sent.iter().position(|k| *k == key) {
                    w.sent.remove(i);
                    return Ok(true);
                }
            }
            match self.take_done(req) {
                None => Ok(false),
                Some(Ok(_)) => Ok(true),
                Some(Err(e)) => Err(P2pError::Other(e)),
            }
        }
        fn test_any(&mut self, req: Req) -> Result<Option<(u32, i32, usize)>, P2pError> {
            self.take_done(req)
                .transpose()
                .map_err(|e| P2pError::Other(format!("vendor MPI_Test: {e}")))
        }
        fn iprobe(&mut self) -> Result<Option<(u32, i32, usize)>, P2pError> {
            self.probe_where(|_, t| !frame::on_bulk(t))
        }
        fn iprobe_tag(&mut self, tag: i32) -> Result<Option<(u32, usize)>, P2pError> {
            Ok(self.probe_where(|_, t| t == tag)?.map(|(s, _, n)| (s, n)))
        }
        fn iprobe_bulk(&mut self, src: u32, tag: i32) -> Result<bool, P2pError> {
            Ok(self.probe_where(|s, t| s == src && t == tag)?.is_some())
        }
        fn recv_probed(&mut self, buf: &mut [u8], src: u32, tag: i32) -> Result<(), P2pError> {
            let mut w = self.w.0.lock().unwrap();
            let me = self.rank;
            let at = w
                .flight
                .iter()
                .position(|m| m.dest == me && m.src == src && m.tag == tag)
                .expect("probed message");
            let m = w.flight.remove(at).unwrap();
            buf.copy_from_slice(&m.bytes);
            w.sent.push(m.send_req);
            Ok(())
        }
    }

    impl SimLink {
        fn probe_where(
            &mut self,
            wanted: impl Fn(u32, i32) -> bool,
        ) -> Result<Option<(u32, i32, usize)>, P2pError> {
            let mut w = self.w.0.lock().unwrap();
            Self::match_posted(&mut w);
            // Posted receives match first (as in MPI): only what no receive waits for.
            Ok(w.flight
                .iter()
                .find(|m| {
                    m.dest == self.rank
                        && wanted(m.src, m.tag)
                        && !w.posted.iter().any(|p| {
                            p.0 == self.rank
                                && match p.4 {
                                    Some((src, tag)) => src == m.src && tag == m.tag,
                                    None => !frame::on_bulk(m.tag),
                                }
                        })
                })
                .map(|m| (m.src, m.tag, m.bytes.len())))
        }
    }
}
