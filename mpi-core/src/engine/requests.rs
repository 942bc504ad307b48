//! The life of a request as the API sees it: test, wait (through test), status, cancel,
//! free, and the requests of work advanced outside the engine (schedules).

use super::*;

impl Engine {
    /// Has the request completed? Returns its status if so (and releases non-persistent
    /// requests).
    #[inline]
    pub(crate) fn test(&mut self, id: ReqId) -> MpiResult<Option<Status>> {
        self.core.test(id)
    }

    /// True when the request is done (or inactive) without collecting it.
    pub(crate) fn is_done(&self, id: ReqId) -> bool {
        if id.sent_bytes().is_some() {
            return true;
        }
        self.core
            .reqs
            .get(id.0)
            .map(|r| r.phase != Phase::Active)
            .unwrap_or(true)
    }

    /// Status of a done request without collecting it (MPI_Request_get_status).
    pub(crate) fn peek(&self, id: ReqId) -> MpiResult<Option<Status>> {
        if let Some(bytes) = id.sent_bytes() {
            return Ok(Some(sent_status(bytes)));
        }
        let req = self
            .core
            .reqs
            .get(id.0)
            .ok_or_else(|| bad_request("MPI_Request_get_status", id))?;
        Ok(match req.phase {
            Phase::Done => Some(req.status),
            Phase::Inactive => Some(Status::EMPTY),
            Phase::Active => None,
        })
    }

    pub(crate) fn request_exists(&self, id: ReqId) -> bool {
        id.sent_bytes().is_some() || self.core.reqs.get(id.0).is_some()
    }

    pub(crate) fn is_persistent(&self, id: ReqId) -> bool {
        self.core
            .reqs
            .get(id.0)
            .map(|r| r.persistent)
            .unwrap_or(false)
    }

    /// Active in MPI's sense: started and not yet collected by a wait or test (it may
    /// already be complete).
    pub(crate) fn is_active(&self, id: ReqId) -> bool {
        if id.sent_bytes().is_some() {
            return true;
        }
        self.core
            .reqs
            .get(id.0)
            .map(|r| r.phase != Phase::Inactive)
            .unwrap_or(false)
    }

    /// MPI_Request_free: forget the request; an active one completes in the background.
    pub(crate) fn free_request(&mut self, id: ReqId) -> MpiResult<()> {
        if id.sent_bytes().is_some() {
            return Ok(());
        }
        let req = self
            .core
            .reqs
            .get_mut(id.0)
            .ok_or_else(|| bad_request("MPI_Request_free", id))?;
        if req.op == Op::Scheduled && !(req.persistent && req.phase == Phase::Inactive) {
            // MPI-3.1 §5.12: freeing a non-blocking collective's request is erroneous
            // (an active schedule would go on writing the user's buffers).
            return Err(mpi_err(
                ErrorClass::Request,
                "MPI_Request_free: the request of an active non-blocking collective cannot be freed".into(),
            ));
        }
        if req.phase == Phase::Active {
            req.detached = true;
        } else {
            self.core.reqs.remove(id.0);
        }
        Ok(())
    }

    /// A request for work advanced outside the engine, active from the start; it completes
    /// when [`Engine::finish_scheduled`] is called.
    pub(crate) fn new_scheduled(&mut self) -> ReqId {
        let byte = self.byte_type();
        let id = self.new_request(
            None,
            Buf(std::ptr::null_mut()),
            0,
            byte,
            CommId::WORLD,
            PROC_NULL,
            0,
            false,
        );
        let req = self.core.reqs.get_mut(id.0).expect("just made");
        req.op = Op::Scheduled;
        req.phase = Phase::Active;
        id
    }

    /// A persistent request for work advanced outside the engine, inactive until started
    /// (a persistent collective); each start is completed by
    /// [`Engine::finish_scheduled_with`].
    pub(crate) fn new_persistent_scheduled(&mut self) -> ReqId {
        let byte = self.byte_type();
        let id = self.new_request(
            None,
            Buf(std::ptr::null_mut()),
            0,
            byte,
            CommId::WORLD,
            PROC_NULL,
            0,
            true,
        );
        self.core.reqs.get_mut(id.0).expect("just made").op = Op::Scheduled;
        id
    }

    /// Complete a request of [`Engine::new_scheduled`] with `status` (its error field an
    /// MPI error code, 0 for success; a generalized request's status comes from its query
    /// function).
    pub(crate) fn finish_scheduled_with(&mut self, id: ReqId, status: Status) {
        if let Some(req) = self.core.reqs.get_mut(id.0) {
            debug_assert!(req.op == Op::Scheduled);
            req.status = status;
            self.core.complete(id);
        }
    }

    /// MPI_Cancel. A receive still in the posted queue is cancelled; a send is cancelled
    /// if its first message has not left this process yet; otherwise the operation
    /// completes normally and MPI_Test_cancelled reports false.
    pub(crate) fn cancel(&mut self, id: ReqId) -> MpiResult<()> {
        // A send to a peer behind a native device is the device's to cancel.
        if let Some(dev) = self
            .core
            .send_dest(id)
            .and_then(|dest| self.router.device_of(dest))
        {
            return self.cancel_device_send(id, dev);
        }
        self.core.cancel(id)
    }

    /// Whether any request (pending, or persistent and inactive) uses communicator `comm`.
    pub(crate) fn requests_on_comm(&self, comm: CommId) -> bool {
        self.core.reqs.iter().any(|(_, r)| r.comm == comm)
    }

    /// Number of live requests (for leak checks in tests).
    pub(crate) fn live_requests(&self) -> usize {
        self.core.reqs.len()
    }

    /// Make the request an internal one that vanishes at completion.
    pub(crate) fn detach(&mut self, id: ReqId) {
        if let Some(r) = self.core.reqs.get_mut(id.0) {
            if r.phase == Phase::Active {
                r.detached = true;
            } else {
                self.core.reqs.remove(id.0);
            }
        }
    }
}
