//! What the transport needs of a vendor MPI, as a trait: the loaded vendor implements it
//! through the shim, and the tests implement it with an in-memory world
//! (`sim::SimWorld`, test builds only) so the transport's logic runs without any MPI.

use std::ffi::c_int;

use tsunagi_p2p::P2pError;

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
    /// Whether `req` completed (a completed request's id is free for reuse).
    fn test(&mut self, req: Req) -> Result<bool, P2pError>;
    /// The first message waiting from any source: (source, tag, bytes).
    fn iprobe(&mut self) -> Result<Option<(u32, i32, usize)>, P2pError>;
    /// The first message waiting under `tag` from any source: (source, bytes).
    fn iprobe_tag(&mut self, tag: i32) -> Result<Option<(u32, usize)>, P2pError>;
    /// Receive the message [`Link::iprobe`] just reported (`src`, `tag`) into `buf`, whose
    /// length is that message's.
    fn recv_probed(&mut self, buf: &mut [u8], src: u32, tag: i32) -> Result<(), P2pError>;
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
        let rc = unsafe { (self.0.api.isend)(buf, len_int(len)?, dest as c_int, tag, &mut idx) };
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
        let rc = unsafe { (self.0.api.irecv)(buf, len_int(len)?, src as c_int, tag, &mut idx) };
        check(self.0.api, "MPI_Irecv", rc)?;
        Ok(idx)
    }
    fn test(&mut self, req: Req) -> Result<bool, P2pError> {
        let mut done: c_int = 0;
        // SAFETY: plain ints; the shim checks that `req` names a live request.
        let rc = unsafe { (self.0.api.test)(req, &mut done) };
        check(self.0.api, "MPI_Test", rc)?;
        Ok(done != 0)
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
}

#[cfg(test)]
pub mod sim {
    //! An in-memory vendor world: messages per (source, destination) in send order; a
    //! receive posted for a source and tag takes the first such message; sends complete
    //! only once received, and the order in which pending receives complete is the
    //! test's to choose (`hold_rests`).

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

    #[derive(Default)]
    struct World {
        /// In flight, in global send order.
        flight: VecDeque<Msg>,
        /// Send requests completed, per rank.
        sent: Vec<(u32, Req)>,
        /// Posted receives: (rank, req, buf, len, src, tag).
        posted: Vec<(u32, Req, usize, usize, u32, i32)>,
        done_recvs: Vec<(u32, Req)>,
        next_req: Req,
        /// While true, posted receives do not match (rests arrive late).
        hold: bool,
    }

    /// A world shared by the simulated ranks.
    #[derive(Clone, Default)]
    pub struct SimWorld(Arc<Mutex<World>>);

    impl SimWorld {
        /// Hold (true) or release posted receives.
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
    }

    /// One simulated rank.
    pub struct SimLink {
        w: SimWorld,
        rank: u32,
        size: usize,
    }

    impl SimLink {
        fn match_posted(w: &mut World) {
            if w.hold {
                return;
            }
            let mut i = 0;
            while i < w.posted.len() {
                let (rank, req, buf, len, src, tag) = w.posted[i];
                let at = w
                    .flight
                    .iter()
                    .position(|m| m.dest == rank && m.src == src && m.tag == tag);
                if let Some(at) = at {
                    let m = w.flight.remove(at).unwrap();
                    assert_eq!(m.bytes.len(), len, "receive of the wrong length");
                    // SAFETY: the receiver promised (irecv's contract) that buf..buf+len
                    // stays valid and untouched until it sees this request complete.
                    unsafe { std::ptr::copy_nonoverlapping(m.bytes.as_ptr(), buf as *mut u8, len) };
                    w.sent.push(m.send_req);
                    w.done_recvs.push((rank, req));
                    w.posted.remove(i);
                } else {
                    i += 1;
                }
            }
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
            let mut w = self.w.0.lock().unwrap();
            w.next_req += 1;
            let req = w.next_req;
            w.posted.push((self.rank, req, buf as usize, len, src, tag));
            Self::match_posted(&mut w);
            Ok(req)
        }
        fn test(&mut self, req: Req) -> Result<bool, P2pError> {
            let mut guard = self.w.0.lock().unwrap();
            let w = &mut *guard;
            Self::match_posted(w);
            let key = (self.rank, req);
            for list in [&mut w.sent, &mut w.done_recvs] {
                if let Some(i) = list.iter().position(|k| *k == key) {
                    list.remove(i);
                    return Ok(true);
                }
            }
            Ok(false)
        }
        fn iprobe(&mut self) -> Result<Option<(u32, i32, usize)>, P2pError> {
            self.probe_where(|_| true)
        }
        fn iprobe_tag(&mut self, tag: i32) -> Result<Option<(u32, usize)>, P2pError> {
            Ok(self.probe_where(|t| t == tag)?.map(|(s, _, n)| (s, n)))
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
            tag_ok: impl Fn(i32) -> bool,
        ) -> Result<Option<(u32, i32, usize)>, P2pError> {
            let mut w = self.w.0.lock().unwrap();
            Self::match_posted(&mut w);
            // Posted receives match first (as in MPI): only what no receive waits for.
            Ok(w.flight
                .iter()
                .find(|m| {
                    m.dest == self.rank
                        && tag_ok(m.tag)
                        && !w
                            .posted
                            .iter()
                            .any(|p| p.0 == self.rank && p.4 == m.src && p.5 == m.tag)
                })
                .map(|m| (m.src, m.tag, m.bytes.len())))
        }
    }
}
