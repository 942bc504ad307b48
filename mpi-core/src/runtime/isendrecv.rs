//! MPI_Isendrecv and MPI_Isendrecv_replace (MPI-4): a send and a receive completed as one
//! request, a [`Schedule`] of the core's request table whose status is the receive's.

use super::*;

/// The pair of requests; `packed` holds the outgoing copy of a replace's buffer.
struct SendRecv {
    reqs: [Option<ReqId>; 2],
    packed: Vec<u8>,
    status: Option<Status>,
}

impl Schedule for SendRecv {
    fn advance(&mut self, rt: &Runtime) -> MpiResult<bool> {
        match rt.testall("MPI_Isendrecv", &self.reqs)? {
            Some(sts) => {
                self.status = Some(sts[1]);
                self.packed = Vec::new();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn final_status(&mut self) -> Option<Status> {
        self.status.take()
    }
}

impl Runtime {
    /// Post the receive, then the send; if the send fails the receive is withdrawn.
    ///
    /// # Safety
    /// As [`Runtime::isend`] and [`Runtime::irecv`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_pair(
        &self,
        call: &str,
        sbuf: *const u8,
        scount: i64,
        stype: &TypeRef,
        dest: i32,
        stag: i32,
        rbuf: *mut u8,
        rcount: i64,
        rtype: &TypeRef,
        source: i32,
        rtag: i32,
        comm: CommId,
    ) -> MpiResult<[Option<ReqId>; 2]> {
        // SAFETY: forwarded caller contract.
        let r = unsafe { self.irecv(call, rbuf, rcount, rtype, source, rtag, comm)? };
        // SAFETY: forwarded caller contract.
        let sent = unsafe {
            self.isend(
                call,
                sbuf,
                scount,
                stype,
                dest,
                stag,
                comm,
                SendMode::Standard,
            )
        };
        match sent {
            Ok(s) => Ok([Some(s), Some(r)]),
            Err(err) => {
                let _ = self.cancel(r);
                let _ = self.wait_raw(call, r);
                Err(err)
            }
        }
    }

    /// MPI_Isendrecv.
    ///
    /// # Safety
    /// As [`Runtime::isend`] and [`Runtime::irecv`]: both buffers stay valid and reserved
    /// until the request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn isendrecv(
        &self,
        sbuf: *const u8,
        scount: i64,
        stype: &TypeRef,
        dest: i32,
        stag: i32,
        rbuf: *mut u8,
        rcount: i64,
        rtype: &TypeRef,
        source: i32,
        rtag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let call = "MPI_Isendrecv";
        // SAFETY: forwarded caller contract.
        let reqs = unsafe {
            self.post_pair(
                call, sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm,
            )?
        };
        self.start_schedule(Box::new(SendRecv {
            reqs,
            packed: Vec::new(),
            status: None,
        }))
    }

    /// MPI_Isendrecv_replace: the buffer's contents are copied out first, so the receive
    /// may overwrite it while the send is in flight.
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype` and stays valid and reserved until the
    /// request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn isendrecv_replace(
        &self,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        stag: i32,
        source: i32,
        rtag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let call = "MPI_Isendrecv_replace";
        let n = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, n, dtype)?;
        let mut packed = vec![0u8; dtype.packed_size(n)];
        // SAFETY: `buf` holds `n` elements (caller contract).
        unsafe { dtype.pack_range(buf, n, 0, &mut packed) };
        let byte = self.lock().byte_type();
        // SAFETY: `packed` moves into the schedule, which keeps it until both complete
        // (a Vec's heap buffer does not move with it).
        let reqs = unsafe {
            self.post_pair(
                call,
                packed.as_ptr(),
                packed.len() as i64,
                &byte,
                dest,
                stag,
                buf,
                count,
                dtype,
                source,
                rtag,
                comm,
            )?
        };
        self.start_schedule(Box::new(SendRecv {
            reqs,
            packed,
            status: None,
        }))
    }
}
