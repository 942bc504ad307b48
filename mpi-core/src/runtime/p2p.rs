//! Point-to-point calls: send and receive in every mode, persistent requests, the wait and
//! test families, cancel, probes and matched probes, sendrecv, buffered-send buffers.

use std::mem::MaybeUninit;

use super::*;

impl Runtime {
    /// Make (but do not start) a send or receive request after checking its arguments.
    ///
    /// # Safety
    /// `buf` must stay valid for the whole life of the request (MPI's buffer rules).
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn make_request(
        &self,
        e: &mut Engine,
        call: &str,
        send: Option<SendMode>,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        peer: i32,
        tag: i32,
        comm: CommId,
        persistent: bool,
    ) -> MpiResult<ReqId> {
        let c = self.check_comm(e, call, comm)?;
        let (context, peer_size) = (c.context, c.peer_size());
        let count = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, count, dtype)?;
        let is_recv = send.is_none();
        Self::check_tag(call, tag, is_recv)?;
        Self::check_rank(
            call,
            if is_recv { "source" } else { "destination" },
            peer,
            peer_size,
            is_recv,
        )?;
        Ok(e.new_request_on(
            send,
            Buf(buf),
            count,
            dtype.clone(),
            comm,
            peer,
            tag,
            context,
            persistent,
        ))
    }

    /// Make and start a non-persistent request; on failure nothing stays posted.
    ///
    /// # Safety
    /// As [`Runtime::make_request`].
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn start_new(
        &self,
        e: &mut Engine,
        call: &str,
        send: Option<SendMode>,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        peer: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let id = self.make_request(e, call, send, buf, count, dtype, peer, tag, comm, false)?;
        if let Err(err) = e.start(id) {
            e.detach(id);
            return Err(with_call(call, err));
        }
        Ok(id)
    }

    /// The lean path of a small standard or ready send of contiguous data: the checks of
    /// [`Runtime::make_request`] that such a send needs, one communicator lookup, and the
    /// message straight into the transport (`Engine::send_eager_now`), with no request.
    /// `None`: the send is not of that kind, or found the peer busy; nothing happened and
    /// the general path (which also reports any argument error) takes it.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn send_lean(
        e: &mut Engine,
        buf: *const u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        tag: i32,
        comm: CommId,
        mode: SendMode,
    ) -> MpiResult<Option<ReqId>> {
        if !matches!(mode, SendMode::Standard | SendMode::Ready)
            || count < 0
            || dest < 0
            || tag < 0
            || tag > tag_ub()
            || !dtype.is_committed()
        {
            return Ok(None);
        }
        let Some(off) = dtype.contiguous_offset() else {
            return Ok(None);
        };
        let Some(c) = e.comms().get(comm) else {
            return Ok(None);
        };
        if dest as usize >= c.peer_size() {
            return Ok(None);
        }
        let bytes = (count as usize).saturating_mul(dtype.size());
        let data: &[u8] = if bytes == 0 {
            // A zero-byte message may come from a NULL buffer: no slice from it.
            &[]
        } else if buf.is_null() {
            return Ok(None);
        } else {
            // SAFETY: the send buffer holds `count` elements of the contiguous `dtype`,
            // `bytes` bytes from `buf + off` (MPI contract); the slice lives only for
            // this call, which copies it into the transport.
            unsafe { std::slice::from_raw_parts(buf.wrapping_offset(off), bytes) }
        };
        let world = c.peer_group().world_rank(dest as usize);
        let context = c.context;
        e.send_eager_now(world, tag, context, data)
    }

    /// MPI_Isend / MPI_Issend / MPI_Irsend / MPI_Ibsend.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `dtype` and stay valid and unmodified until the
    /// request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn isend(
        &self,
        call: &str,
        buf: *const u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        tag: i32,
        comm: CommId,
        mode: SendMode,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        if let Some(id) = Self::send_lean(&mut e, buf, count, dtype, dest, tag, comm, mode)? {
            return Ok(id);
        }
        self.start_new(
            &mut e,
            call,
            Some(mode),
            buf as *mut u8,
            count,
            dtype,
            dest,
            tag,
            comm,
        )
    }

    /// MPI_Irecv.
    ///
    /// # Safety
    /// `buf` must have room for `count` elements of `dtype` and stay valid, and not be
    /// read or written by the program, until the request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn irecv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        source: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        if let Some(id) = Self::recv_lean(&mut e, buf, count, dtype, source, tag, comm)? {
            return Ok(id);
        }
        self.start_new(&mut e, call, None, buf, count, dtype, source, tag, comm)
    }

    /// The lean path of a receive: the checks of [`Runtime::make_request`] in their cheap
    /// form, one communicator lookup, and the receive posted (or matched) at once by
    /// `Engine::post_recv`. `None`: an argument the general path must look at (it also
    /// reports any error) or a source of MPI_PROC_NULL; nothing happened.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn recv_lean(
        e: &mut Engine,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        source: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<Option<ReqId>> {
        if count < 0
            || (source < 0 && source != ANY_SOURCE)
            || (tag < 0 && tag != ANY_TAG)
            || tag > tag_ub()
            || !dtype.is_committed()
            || (buf.is_null() && count > 0)
        {
            return Ok(None);
        }
        let Some(c) = e.comms().get(comm) else {
            return Ok(None);
        };
        let src_world = if source == ANY_SOURCE {
            crate::engine::ANY_WORLD
        } else if (source as usize) < c.peer_size() {
            c.peer_group().world_rank(source as usize)
        } else {
            return Ok(None);
        };
        let args = crate::engine::RecvArgs {
            buf: Buf(buf),
            count: count as usize,
            comm,
            peer: source,
            src_world,
            tag,
            context: c.context,
        };
        e.post_recv(args, dtype).map(Some)
    }

    /// MPI_Send / MPI_Ssend / MPI_Rsend / MPI_Bsend.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send(
        &self,
        call: &str,
        buf: *const u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        tag: i32,
        comm: CommId,
        mode: SendMode,
    ) -> MpiResult<()> {
        let id = {
            let mut e = self.lock();
            if Self::send_lean(&mut e, buf, count, dtype, dest, tag, comm, mode)?.is_some() {
                return Ok(());
            }
            let id = self.start_new(
                &mut e,
                call,
                Some(mode),
                buf as *mut u8,
                count,
                dtype,
                dest,
                tag,
                comm,
            )?;
            // Eager sends are complete once handed to the transport: collect them under
            // the same lock, without another progress pass.
            if e.is_done(id) {
                e.test(id)?;
                return Ok(());
            }
            id
        };
        self.wait(call, id).map(|_| ())
    }

    /// MPI_Recv.
    ///
    /// # Safety
    /// `buf` must have room for `count` elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn recv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        source: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<Status> {
        let st = self.recv_raw(call, buf, count, dtype, source, tag, comm)?;
        Self::complete_status(call, st)
    }

    /// MPI_Recv with a truncation reported in the status, not as an error (the C
    /// interface fills the status either way). The common case, a polling engine with no
    /// non-blocking collective running and the message already arrived or waiting in the
    /// transport, posts, polls and collects under one lock.
    ///
    /// # Safety
    /// As [`Runtime::recv`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn recv_raw(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        source: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<Status> {
        let id = {
            let mut e = self.lock();
            let id = match Self::recv_lean(&mut e, buf, count, dtype, source, tag, comm)? {
                Some(id) => id,
                None => self.start_new(&mut e, call, None, buf, count, dtype, source, tag, comm)?,
            };
            if self.polls_inline() {
                if let Some(st) = self.finish_now(&mut e, call, id)? {
                    return Ok(st);
                }
            }
            id
        };
        self.wait_blocking(call, id)
    }

    /// MPI_Send_init and friends / MPI_Recv_init: a persistent request, inactive.
    ///
    /// # Safety
    /// As [`Runtime::isend`] / [`Runtime::irecv`], for every start of the request until it
    /// is freed.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn persistent(
        &self,
        call: &str,
        send: Option<SendMode>,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        peer: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        self.make_request(&mut e, call, send, buf, count, dtype, peer, tag, comm, true)
    }

    /// MPI_Start.
    pub fn start(&self, id: ReqId) -> MpiResult<()> {
        if let Some(r) = self.start_persistent(id) {
            return r;
        }
        let mut e = self.lock();
        if !e.is_persistent(id) {
            return Err(MpiError::new(
                ErrorClass::Request,
                "MPI_Start: request is not a persistent request",
            ));
        }
        e.start(id)
    }

    /// MPI_Startall.
    pub fn startall(&self, ids: &[ReqId]) -> MpiResult<()> {
        for &id in ids {
            self.start(id)?;
        }
        Ok(())
    }

    pub(super) fn complete_status(call: &str, st: Status) -> MpiResult<Status> {
        if st.error == ErrorClass::Truncate as i32 {
            return Err(MpiError::new(
                ErrorClass::Truncate,
                format!(
                    "{call}: message truncated: the receive buffer holds {} bytes, a longer message arrived",
                    st.bytes
                ),
            ));
        }
        Ok(st)
    }

    /// MPI_Wait. A truncated receive returns MPI_ERR_TRUNCATE (the data that fits was
    /// stored).
    pub fn wait(&self, call: &str, id: ReqId) -> MpiResult<Status> {
        let st = self.wait_raw(call, id)?;
        self.collected_status(call, id, st)
    }

    /// The status of collected request `id` as MPI_Wait/MPI_Test return it: a truncation
    /// or a failed schedule (non-blocking collective) is an error.
    fn collected_status(&self, call: &str, id: ReqId, st: Status) -> MpiResult<Status> {
        if st.error != 0 && st.error != ErrorClass::Truncate as i32 {
            return Err(self.schedule_error(id).unwrap_or_else(|| {
                let class = ErrorClass::from_code(st.error).unwrap_or(ErrorClass::Other);
                MpiError::new(class, format!("{call}: the operation failed"))
            }));
        }
        Self::complete_status(call, st)
    }

    /// Like [`Runtime::wait`], but a truncation is reported in the status, not as an
    /// error (for MPI_Waitall's MPI_ERR_IN_STATUS handling).
    pub fn wait_raw(&self, call: &str, id: ReqId) -> MpiResult<Status> {
        if self.polls_inline() {
            if let Some(st) = self.finish_now(&mut self.lock(), call, id)? {
                return Ok(self.settle(id, st));
            }
        }
        let st = self.wait_blocking(call, id)?;
        Ok(self.settle(id, st))
    }

    /// Whether a wait may make progress inline under one lock ([`Runtime::finish_now`]):
    /// with no schedules running (otherwise progress belongs to the schedules' loop in
    /// [`Runtime::wait_blocking`]). Under the threaded engine too: a waiting application
    /// thread polls for itself before it hands over to the progress threads.
    #[inline]
    fn polls_inline(&self) -> bool {
        self.nschedules.load(Ordering::Acquire) == 0
    }

    /// The common end of a blocking receive or of a wait on a small message, under the
    /// lock the caller holds: request `id` is done already, or after one progress pass.
    #[inline]
    fn finish_now(&self, e: &mut Engine, call: &str, id: ReqId) -> MpiResult<Option<Status>> {
        let invalid = || invalid_request(call);
        if let Some(st) = e.collect(id).map_err(|()| invalid())? {
            return Ok(Some(st));
        }
        self.poll_here(e)?;
        e.collect(id).map_err(|()| invalid())
    }

    /// The general part of [`Runtime::wait_raw`]: progress (or watch the progress
    /// threads) until request `id` completes, then collect it.
    fn wait_blocking(&self, call: &str, id: ReqId) -> MpiResult<Status> {
        let invalid = || invalid_request(call);
        let mut out = None;
        self.block_until(|e| {
            out = e.collect(id).map_err(|()| invalid())?;
            Ok(out.is_some())
        })?;
        Ok(out.unwrap_or(Status::EMPTY))
    }

    /// MPI_Test: Some(status) when complete.
    pub fn test(&self, call: &str, id: ReqId) -> MpiResult<Option<Status>> {
        let mut e = self.step()?;
        match e.collect(id) {
            Err(()) => Err(MpiError::new(
                ErrorClass::Request,
                format!("{call}: invalid request"),
            )),
            Ok(Some(st)) => {
                drop(e);
                let st = self.settle(id, st);
                self.collected_status(call, id, st).map(Some)
            }
            Ok(None) => Ok(None),
        }
    }

    /// MPI_Request_get_status: like test, but the request stays.
    pub fn request_get_status(&self, id: ReqId) -> MpiResult<Option<Status>> {
        let e = self.step()?;
        let st = e.peek(id)?;
        drop(e);
        st.map(|st| self.grequest_peek(st)).transpose()
    }

    /// MPI_Request_get_status_any/all/some (MPI 4.1): after one progress step, for each of
    /// `ids`, None when it is MPI_REQUEST_NULL or inactive, Some(None) while it is pending,
    /// Some(Some(status)) when it is complete; the requests stay. A completed generalized
    /// request's status comes from its query function (a failing one gives its class in
    /// the status' error).
    pub fn request_get_statuses(
        &self,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Vec<Option<Option<Status>>>> {
        let e = self.step()?;
        let mut out = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = id else {
                out.push(None);
                continue;
            };
            if !e.request_exists(*id) {
                return Err(MpiError::new(
                    ErrorClass::Request,
                    format!("{call}: invalid request at index {i}"),
                ));
            }
            if !e.is_active(*id) {
                out.push(None);
                continue;
            }
            out.push(Some(e.peek(*id)?));
        }
        drop(e);
        for st in out.iter_mut().flatten().flatten() {
            *st = self.grequest_peek(*st).unwrap_or_else(|err| Status {
                error: err.class as i32,
                ..Status::EMPTY
            });
        }
        Ok(out)
    }

    /// True when the request is persistent (a completed one stays allocated).
    pub fn is_persistent(&self, id: ReqId) -> bool {
        self.lock().is_persistent(id)
    }

    /// True when the request is active (started and not completed-and-collected).
    pub fn is_active(&self, id: ReqId) -> bool {
        self.lock().is_active(id)
    }

    /// MPI_Waitall: statuses in order; entries that are None (MPI_REQUEST_NULL) give the
    /// empty status. Truncation shows in the statuses' `error` fields.
    pub fn waitall(&self, call: &str, ids: &[Option<ReqId>]) -> MpiResult<Vec<Status>> {
        let mut out = vec![Status::EMPTY; ids.len()];
        self.waitall_with(call, ids.len(), |i| ids[i], |i, st| out[i] = st)?;
        Ok(out)
    }

    /// MPI_Waitall over `n` requests given by `id_of(i)` (None: MPI_REQUEST_NULL, whose
    /// status is the empty one); `put(i, status)` receives each status once, as its request
    /// is collected. No allocation for up to 64 requests: the C interface calls this with
    /// its handle array and the caller's status array directly.
    pub fn waitall_with(
        &self,
        call: &str,
        n: usize,
        id_of: impl Fn(usize) -> Option<ReqId>,
        mut put: impl FnMut(usize, Status),
    ) -> MpiResult<()> {
        // Generalized requests are collected under the lock but settled (their query and
        // free functions run) after it, here.
        let mut unsettled: Vec<(usize, Status)> = Vec::new();
        let res = self.waitall_collect(call, n, &id_of, |i, st| {
            if Self::needs_settling(&st) {
                unsettled.push((i, st));
            } else {
                put(i, st);
            }
        });
        for (i, st) in unsettled {
            let id = id_of(i).expect("a collected request");
            put(i, self.settle(id, st));
        }
        res
    }

    /// The collecting part of [`Runtime::waitall_with`].
    fn waitall_collect(
        &self,
        call: &str,
        n: usize,
        id_of: impl Fn(usize) -> Option<ReqId>,
        mut put: impl FnMut(usize, Status),
    ) -> MpiResult<()> {
        let invalid = |i: usize| {
            MpiError::new(
                ErrorClass::Request,
                format!("{call}: invalid request at index {i}"),
            )
        };
        // Requests still to collect, with their index: on the stack for a window of up
        // to 64. Each handle is decoded once (`id_of` checks a C handle: ~27 instructions).
        // Left uninitialised (zeroing 512 bytes per call cost a window of sends ~10
        // instructions per message); entries below `nleft` are always written first.
        let mut small = [MaybeUninit::<(u32, ReqId)>::uninit(); 64];
        let mut big = Vec::new();
        let left: &mut [MaybeUninit<(u32, ReqId)>] = if n <= small.len() {
            &mut small[..n]
        } else {
            big.resize(n, MaybeUninit::uninit());
            &mut big
        };
        let mut nleft = 0;
        {
            // What is already complete (a window of eager sends) is collected under one
            // lock. At the first request that is not, one progress pass under the same
            // lock (the messages of a window of receives are usually waiting in the
            // transport) and a second look at it, then on with the rest: a window of
            // receives costs one failed look, not one per request.
            let mut e = self.lock();
            let mut polled = false;
            for i in 0..n {
                match id_of(i) {
                    None => put(i, Status::EMPTY),
                    Some(id) => {
                        let mut got = e.collect(id).map_err(|()| invalid(i))?;
                        if got.is_none() && !polled {
                            polled = true;
                            if self.polls_inline() {
                                self.poll_here(&mut e)?;
                                got = e.collect(id).map_err(|()| invalid(i))?;
                            }
                        }
                        match got {
                            Some(st) => put(i, st),
                            None => {
                                left[nleft].write((i as u32, id));
                                nleft += 1;
                            }
                        }
                    }
                }
            }
            if nleft == 0 {
                return Ok(());
            }
        }
        // Every completion bumps the engine's counter: while it stands still, nothing in
        // `left` can have finished, so a spinning wait skips the O(n) rescan.
        let mut scanned_at: Option<u64> = None;
        self.block_until(|e| {
            if scanned_at == Some(e.core.completions) {
                return Ok(nleft == 0);
            }
            scanned_at = Some(e.core.completions);
            let mut k = 0;
            while k < nleft {
                // SAFETY: every entry below `nleft` was written (the first pass writes
                // entries 0..nleft; removal moves the last written entry into slot k).
                let (i, id) = unsafe { left[k].assume_init() };
                match e.collect(id).map_err(|()| invalid(i as usize))? {
                    Some(st) => {
                        put(i as usize, st);
                        nleft -= 1;
                        left[k] = left[nleft];
                    }
                    None => k += 1,
                }
            }
            Ok(nleft == 0)
        })
    }

    /// MPI_Testall: Some(statuses) if all are complete (then all are collected), else None
    /// (and none is collected).
    pub fn testall(&self, call: &str, ids: &[Option<ReqId>]) -> MpiResult<Option<Vec<Status>>> {
        let mut e = self.step()?;
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                if !e.request_exists(*id) {
                    return Err(MpiError::new(
                        ErrorClass::Request,
                        format!("{call}: invalid request at index {i}"),
                    ));
                }
                if !e.is_done(*id) {
                    return Ok(None);
                }
            }
        }
        let mut out = vec![Status::EMPTY; ids.len()];
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                out[i] = e.test(*id)?.unwrap_or(Status::EMPTY);
            }
        }
        drop(e);
        for (st, id) in out.iter_mut().zip(ids) {
            if let Some(id) = id {
                *st = self.settle(*id, *st);
            }
        }
        Ok(Some(out))
    }

    /// Index and status of one completed active request among `ids`, if any (collected).
    pub(super) fn any_done(
        e: &mut Engine,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Option<(usize, Status)>> {
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                if !e.request_exists(*id) {
                    return Err(MpiError::new(
                        ErrorClass::Request,
                        format!("{call}: invalid request at index {i}"),
                    ));
                }
                if e.is_active(*id) && e.is_done(*id) {
                    return Ok(e.test(*id)?.map(|s| (i, s)));
                }
            }
        }
        Ok(None)
    }

    pub(super) fn has_active(e: &Engine, ids: &[Option<ReqId>]) -> bool {
        ids.iter().flatten().any(|id| e.is_active(*id))
    }

    /// MPI_Waitany: None when no request is active (MPI_UNDEFINED).
    pub fn waitany(&self, call: &str, ids: &[Option<ReqId>]) -> MpiResult<Option<(usize, Status)>> {
        let mut out = None;
        self.block_until(|e| {
            if let Some(r) = Self::any_done(e, call, ids)? {
                out = Some(r);
                return Ok(true);
            }
            Ok(!Self::has_active(e, ids))
        })?;
        Ok(out.map(|(i, st)| (i, self.settle(ids[i].expect("collected"), st))))
    }

    /// MPI_Testany: Ok(Err(())) when no request is active; Ok(Ok(None)) when none is done.
    #[allow(clippy::type_complexity)]
    pub fn testany(
        &self,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Result<Option<(usize, Status)>, ()>> {
        let mut e = self.step()?;
        if let Some((i, st)) = Self::any_done(&mut e, call, ids)? {
            drop(e);
            let st = self.settle(ids[i].expect("collected"), st);
            return Ok(Ok(Some((i, st))));
        }
        if !Self::has_active(&e, ids) {
            return Ok(Err(()));
        }
        Ok(Ok(None))
    }

    pub(super) fn all_done_now(
        e: &mut Engine,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Vec<(usize, Status)>> {
        let mut done = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id {
                if !e.request_exists(*id) {
                    return Err(MpiError::new(
                        ErrorClass::Request,
                        format!("{call}: invalid request at index {i}"),
                    ));
                }
                if e.is_active(*id) && e.is_done(*id) {
                    if let Some(s) = e.test(*id)? {
                        done.push((i, s));
                    }
                }
            }
        }
        Ok(done)
    }

    /// MPI_Waitsome: None when no request is active (outcount MPI_UNDEFINED).
    pub fn waitsome(
        &self,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Option<Vec<(usize, Status)>>> {
        let mut out = None;
        self.block_until(|e| {
            if !Self::has_active(e, ids) {
                return Ok(true);
            }
            let d = Self::all_done_now(e, call, ids)?;
            if !d.is_empty() {
                out = Some(d);
                return Ok(true);
            }
            Ok(false)
        })?;
        Ok(out.map(|d| self.settle_all(ids, d)))
    }

    /// MPI_Testsome: None when no request is active.
    pub fn testsome(
        &self,
        call: &str,
        ids: &[Option<ReqId>],
    ) -> MpiResult<Option<Vec<(usize, Status)>>> {
        let mut e = self.step()?;
        if !Self::has_active(&e, ids) {
            return Ok(None);
        }
        let done = Self::all_done_now(&mut e, call, ids)?;
        drop(e);
        Ok(Some(self.settle_all(ids, done)))
    }

    /// [`Runtime::settle`] for each (index into `ids`, status) collected.
    fn settle_all(
        &self,
        ids: &[Option<ReqId>],
        done: Vec<(usize, Status)>,
    ) -> Vec<(usize, Status)> {
        done.into_iter()
            .map(|(i, st)| (i, self.settle(ids[i].expect("collected"), st)))
            .collect()
    }

    /// MPI_Request_free.
    pub fn request_free(&self, id: ReqId) -> MpiResult<()> {
        if let Some(r) = self.grequest_free(id) {
            return r;
        }
        if let Some(r) = self.free_persistent(id) {
            return r;
        }
        self.lock().free_request(id)
    }

    /// MPI_Cancel.
    pub fn cancel(&self, id: ReqId) -> MpiResult<()> {
        if let Some(r) = self.grequest_cancel(id) {
            return r;
        }
        self.lock().cancel(id)
    }

    /// MPI_Iprobe (with `take`: MPI_Improbe).
    pub fn iprobe(
        &self,
        call: &str,
        source: i32,
        tag: i32,
        comm: CommId,
        take: bool,
    ) -> MpiResult<Option<(Status, Option<MsgId>)>> {
        // A program that polls with MPI_Iprobe keeps schedules and services (RMA targets)
        // moving too.
        self.advance_schedules();
        let mut e = self.lock();
        let c = self.check_comm(&e, call, comm)?;
        Self::check_rank(call, "source", source, c.peer_size(), true)?;
        Self::check_tag(call, tag, true)?;
        if source == PROC_NULL {
            return Ok(Some((Status::PROC_NULL, None)));
        }
        if self.steps_poll() {
            self.poll_here(&mut e)?;
        }
        e.probe(comm, source, tag, take)
    }

    /// MPI_Probe (with `take`: MPI_Mprobe).
    pub fn probe(
        &self,
        call: &str,
        source: i32,
        tag: i32,
        comm: CommId,
        take: bool,
    ) -> MpiResult<(Status, Option<MsgId>)> {
        {
            let e = self.lock();
            let c = self.check_comm(&e, call, comm)?;
            Self::check_rank(call, "source", source, c.peer_size(), true)?;
            Self::check_tag(call, tag, true)?;
        }
        if source == PROC_NULL {
            return Ok((Status::PROC_NULL, None));
        }
        let mut out = None;
        self.block_until(|e| {
            out = e.probe(comm, source, tag, take)?;
            Ok(out.is_some())
        })?;
        Ok(out.expect("loop ends with a message"))
    }

    /// MPI_Imrecv: receive the message `msg` (from mprobe). `msg == None` is
    /// MPI_MESSAGE_NO_PROC (a probe of MPI_PROC_NULL).
    ///
    /// # Safety
    /// As [`Runtime::irecv`].
    pub unsafe fn imrecv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        msg: Option<MsgId>,
    ) -> MpiResult<ReqId> {
        let mut e = self.lock();
        let count = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, count, dtype)?;
        let Some(msg) = msg else {
            let id = e.new_request(
                None,
                Buf(buf),
                count,
                dtype.clone(),
                CommId::SELF,
                PROC_NULL,
                0,
                false,
            );
            e.start(id)?;
            return Ok(id);
        };
        let comm = e.msg_comm(msg).ok_or_else(|| {
            MpiError::new(
                ErrorClass::Request,
                format!("{call}: invalid message handle"),
            )
        })?;
        let id = e.new_request(
            None,
            Buf(buf),
            count,
            dtype.clone(),
            CommId::WORLD,
            ANY_SOURCE,
            ANY_TAG,
            false,
        );
        e.set_request_comm(id, comm);
        e.start_mrecv(id, msg)?;
        Ok(id)
    }

    /// MPI_Mrecv.
    ///
    /// # Safety
    /// As [`Runtime::recv`].
    pub unsafe fn mrecv(
        &self,
        call: &str,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        msg: Option<MsgId>,
    ) -> MpiResult<Status> {
        let id = self.imrecv(call, buf, count, dtype, msg)?;
        self.wait(call, id)
    }

    /// MPI_Sendrecv.
    ///
    /// # Safety
    /// As [`Runtime::isend`] and [`Runtime::irecv`]; the buffers must not overlap.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn sendrecv(
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
    ) -> MpiResult<Status> {
        let call = "MPI_Sendrecv";
        let r = self.irecv(call, rbuf, rcount, rtype, source, rtag, comm)?;
        let s = match self.isend(
            call,
            sbuf,
            scount,
            stype,
            dest,
            stag,
            comm,
            SendMode::Standard,
        ) {
            Ok(s) => s,
            Err(err) => {
                let _ = self.cancel(r);
                let _ = self.wait_raw(call, r);
                return Err(err);
            }
        };
        let st = self.waitall(call, &[Some(s), Some(r)])?;
        Self::complete_status(call, st[1])
    }

    /// MPI_Sendrecv_replace: the buffer is sent, then overwritten by the received data.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn sendrecv_replace(
        &self,
        buf: *mut u8,
        count: i64,
        dtype: &TypeRef,
        dest: i32,
        stag: i32,
        source: i32,
        rtag: i32,
        comm: CommId,
    ) -> MpiResult<Status> {
        let call = "MPI_Sendrecv_replace";
        let n = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, n, dtype)?;
        // The message leaves from a copy of the memory the `n` elements span and keeps its
        // datatype, so that a device that converts data (external32 between sites) sees
        // the type the receiver expects, not bytes.
        // SAFETY: `buf` holds `n` elements of `dtype` (checked above, MPI contract).
        let (copy, at) = unsafe { dtype.copy_span(buf, n) };
        let send_base = copy.as_ptr().wrapping_add(at);
        let r = self.irecv(call, buf, count, dtype, source, rtag, comm)?;
        let sent = self.isend(
            call,
            send_base,
            count,
            dtype,
            dest,
            stag,
            comm,
            SendMode::Standard,
        );
        let s = match sent {
            Ok(s) => s,
            Err(err) => {
                // The receive must not stay posted on the caller's buffer.
                let _ = self.cancel(r);
                let _ = self.wait_raw(call, r);
                return Err(err);
            }
        };
        let st = self.waitall(call, &[Some(s), Some(r)])?;
        drop(copy);
        Self::complete_status(call, st[1])
    }

    /// MPI_Buffer_attach.
    pub fn buffer_attach(&self, addr: *mut u8, size: usize) -> MpiResult<()> {
        let mut e = self.lock();
        if e.core.bsend_buffer.is_some() {
            return Err(MpiError::new(
                ErrorClass::Buffer,
                "MPI_Buffer_attach: a buffer is already attached (detach it first)",
            ));
        }
        e.core.bsend_buffer = Some((addr as usize, size));
        Ok(())
    }

    /// MPI_Buffer_detach: waits until every buffered message has left, then returns the
    /// buffer's address and size.
    pub fn buffer_detach(&self) -> MpiResult<(*mut u8, usize)> {
        self.block_until(|e| Ok(e.core.bsend_used == 0))?;
        let mut e = self.lock();
        // Nothing attached: MPICH returns success with a NULL buffer and size 0 (the
        // standard names no error for it); we do the same, so programs ported from MPICH
        // that detach unconditionally keep working.
        Ok(e.core
            .bsend_buffer
            .take()
            .map_or((std::ptr::null_mut(), 0), |(a, s)| (a as *mut u8, s)))
    }

    /// Live requests (a leak check for tests).
    pub fn live_requests(&self) -> usize {
        self.lock().live_requests()
    }
}

#[cold]
fn invalid_request(call: &str) -> MpiError {
    MpiError::new(ErrorClass::Request, format!("{call}: invalid request"))
}
