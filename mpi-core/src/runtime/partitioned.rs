//! Partitioned point-to-point communication (MPI-4: MPI_Psend_init, MPI_Precv_init,
//! MPI_Pready*, MPI_Parrived): persistent requests of the core's request table
//! (`Runtime::persistent_schedule`) whose runs send each partition when the program marks
//! it ready and report each partition's arrival.
//!
//! Each partition travels as its own message on the communicator's collective context
//! (invisible to the program's point-to-point traffic), with an internal tag derived from
//! the program's tag, carrying a 16-byte header (partition index, partition count) before
//! the packed data: partitions may leave in any order, and the receiver, which posts one
//! receive per partition into staging buffers, unpacks each where its header says. Both
//! sides must use the same partitioning (a different partition count is MPI_ERR_TRUNCATE
//! on the receiver).

use super::*;

/// Base of the internal tags (program tag `t` uses `PART_TAG - (t mod 2^20)`).
const PART_TAG: i32 = -(1 << 29);
const HEADER: usize = 16;

/// One partitioned request: its fixed arguments and the current run's progress.
pub(super) struct Partitioned {
    send: bool,
    buf: Buf,
    partitions: usize,
    /// Elements per partition.
    count: usize,
    dtype: TypeRef,
    peer: i32,
    tag: i32,
    comm: CommId,
    active: bool,
    ready: Vec<bool>,
    arrived: Vec<bool>,
    staging: Vec<Vec<u8>>,
    /// Receive side: the staging buffer each request fills.
    reqs: Vec<(ReqId, usize)>,
}

// SAFETY: `buf` is the program's buffer, which MPI reserves for the request until it is
// freed; the state moves between threads only under its mutex.
unsafe impl Send for Partitioned {}

type Shared = Arc<Mutex<Partitioned>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Partitioned> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

impl Partitioned {
    fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }

    /// Begin a run (MPI_Start): clear the flags; the receiver posts its receives.
    fn begin(&mut self, rt: &Runtime) -> MpiResult<()> {
        self.active = true;
        self.ready = vec![false; self.partitions];
        self.arrived = vec![false; self.partitions];
        self.reqs.clear();
        let len = HEADER + self.bytes();
        self.staging = vec![vec![0u8; len]; self.partitions];
        if self.peer == PROC_NULL {
            self.arrived = vec![true; self.partitions];
            self.ready = vec![true; self.partitions];
            return Ok(());
        }
        if !self.send {
            let byte = rt.lock().byte_type();
            for k in 0..self.partitions {
                // SAFETY: the staging buffer lives in this state until the run ends and is
                // never resized meanwhile.
                let id = unsafe {
                    rt.coll_irecv(
                        self.staging[k].as_mut_ptr(),
                        len,
                        &byte,
                        self.peer as usize,
                        PART_TAG - (self.tag & 0xfffff),
                        self.comm,
                    )?
                };
                self.reqs.push((id, k));
            }
        }
        Ok(())
    }

    /// MPI_Pready for partition `i`: pack it behind its header and send it.
    fn ready(&mut self, rt: &Runtime, call: &str, i: usize) -> MpiResult<()> {
        if !self.send {
            return Err(MpiError::new(
                ErrorClass::Request,
                format!("{call}: the request is a partitioned receive"),
            ));
        }
        if !self.active {
            return Err(MpiError::new(
                ErrorClass::Request,
                format!("{call}: the partitioned send is not started"),
            ));
        }
        if i >= self.partitions {
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!(
                    "{call}: partition {i} out of range (0..{})",
                    self.partitions
                ),
            ));
        }
        if std::mem::replace(&mut self.ready[i], true) {
            if self.peer == PROC_NULL {
                return Ok(());
            }
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!("{call}: partition {i} was already marked ready"),
            ));
        }
        let bytes = self.bytes();
        let out = &mut self.staging[i];
        out[..8].copy_from_slice(&(i as u64).to_le_bytes());
        out[8..16].copy_from_slice(&(self.partitions as u64).to_le_bytes());
        // SAFETY: the program's buffer holds `partitions * count` elements (MPI's rule for
        // MPI_Psend_init); partition `i` is the byte range packed here.
        unsafe {
            self.dtype.pack_range(
                self.buf.0,
                self.partitions * self.count,
                i * bytes,
                &mut out[HEADER..],
            )
        };
        let byte = rt.lock().byte_type();
        // SAFETY: the staging buffer stays in this state, unmodified, until the run ends.
        let id = unsafe {
            rt.coll_isend(
                out.as_ptr(),
                out.len(),
                &byte,
                self.peer as usize,
                PART_TAG - (self.tag & 0xfffff),
                self.comm,
            )?
        };
        self.reqs.push((id, i));
        Ok(())
    }

    /// Collect finished transfers; true when the run is complete.
    fn progress(&mut self, rt: &Runtime) -> MpiResult<bool> {
        let mut k = 0;
        while k < self.reqs.len() {
            let (id, slot) = self.reqs[k];
            match rt.test("partitioned communication", id)? {
                None => k += 1,
                Some(_) => {
                    self.reqs.swap_remove(k);
                    if !self.send {
                        self.unpack(slot)?;
                    }
                }
            }
        }
        let done = if self.send {
            self.ready.iter().all(|&r| r) && self.reqs.is_empty()
        } else {
            self.arrived.iter().all(|&a| a)
        };
        if done {
            self.active = false;
            self.staging = Vec::new();
        }
        Ok(done)
    }

    fn unpack(&mut self, slot: usize) -> MpiResult<()> {
        let s = &self.staging[slot];
        let i = u64::from_le_bytes(s[..8].try_into().expect("8 bytes")) as usize;
        let n = u64::from_le_bytes(s[8..16].try_into().expect("8 bytes")) as usize;
        if n != self.partitions || i >= self.partitions || self.arrived[i] {
            return Err(MpiError::new(
                ErrorClass::Truncate,
                format!(
                    "partitioned receive: the sender uses {n} partitions, the receiver {} (the partitionings must match)",
                    self.partitions
                ),
            ));
        }
        let bytes = self.bytes();
        // SAFETY: the program's buffer holds `partitions * count` elements (MPI's rule for
        // MPI_Precv_init), reserved for the request; partition `i` is the range written.
        unsafe {
            self.dtype.unpack_range(
                self.buf.0,
                self.partitions * self.count,
                i * bytes,
                &s[HEADER..HEADER + bytes],
            )
        };
        self.arrived[i] = true;
        Ok(())
    }
}

/// The schedule of one run.
struct PartitionedRun(Shared);

impl Schedule for PartitionedRun {
    fn advance(&mut self, rt: &Runtime) -> MpiResult<bool> {
        let mut st = lock(&self.0);
        let r = st.progress(rt);
        if r.is_err() {
            st.active = false;
        }
        r
    }
}

impl Runtime {
    /// MPI_Psend_init (`send`) / MPI_Precv_init: an inactive persistent request.
    ///
    /// # Safety
    /// `buf` holds `partitions * count` elements of `dtype` and stays valid and reserved
    /// until the request is freed.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn partitioned_init(
        &self,
        call: &str,
        send: bool,
        buf: *mut u8,
        partitions: i32,
        count: i64,
        dtype: &TypeRef,
        peer: i32,
        tag: i32,
        comm: CommId,
    ) -> MpiResult<ReqId> {
        if partitions < 1 {
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!("{call}: partitions = {partitions} (must be at least 1)"),
            ));
        }
        let count = Self::check_count(call, count)?;
        Self::check_type(call, dtype)?;
        Self::check_buf(call, buf, count * partitions as usize, dtype)?;
        Self::check_tag(call, tag, false)?;
        let n = self.comm_peer_size(comm)?;
        Self::check_rank(
            call,
            if send { "destination" } else { "source" },
            peer,
            n,
            false,
        )?;
        let state: Shared = Arc::new(Mutex::new(Partitioned {
            send,
            buf: Buf(buf),
            partitions: partitions as usize,
            count,
            dtype: dtype.clone(),
            peer,
            tag,
            comm,
            active: false,
            ready: Vec::new(),
            arrived: Vec::new(),
            staging: Vec::new(),
            reqs: Vec::new(),
        }));
        let run = state.clone();
        let id = self.persistent_schedule(Box::new(move |rt| {
            lock(&run).begin(rt)?;
            Ok(Box::new(PartitionedRun(run.clone())) as Box<dyn Schedule>)
        }))?;
        let mut table = self.partitioned.lock().unwrap_or_else(|p| p.into_inner());
        table.retain(|(i, _)| *i != id);
        table.push((id, state));
        Ok(id)
    }

    fn partitioned_state(&self, call: &str, id: ReqId) -> MpiResult<Shared> {
        let table = self.partitioned.lock().unwrap_or_else(|p| p.into_inner());
        table
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| s.clone())
            .ok_or_else(|| {
                MpiError::new(
                    ErrorClass::Request,
                    format!("{call}: the request is not a partitioned request"),
                )
            })
    }

    /// MPI_Pready / MPI_Pready_range / MPI_Pready_list: mark `partitions` ready.
    pub fn pready(&self, call: &str, id: ReqId, partitions: &[i32]) -> MpiResult<()> {
        let state = self.partitioned_state(call, id)?;
        let mut st = lock(&state);
        for &p in partitions {
            if p < 0 {
                return Err(MpiError::new(
                    ErrorClass::Arg,
                    format!("{call}: partition {p} is negative"),
                ));
            }
            st.ready(self, call, p as usize)?;
        }
        Ok(())
    }

    /// MPI_Parrived: whether partition `partition` of a partitioned receive has arrived
    /// (true for an inactive request).
    pub fn parrived(&self, id: ReqId, partition: i32) -> MpiResult<bool> {
        let call = "MPI_Parrived";
        let state = self.partitioned_state(call, id)?;
        {
            let st = lock(&state);
            if st.send {
                return Err(MpiError::new(
                    ErrorClass::Request,
                    format!("{call}: the request is a partitioned send"),
                ));
            }
            if partition < 0 || partition as usize >= st.partitions {
                return Err(MpiError::new(
                    ErrorClass::Arg,
                    format!(
                        "{call}: partition {partition} out of range (0..{})",
                        st.partitions
                    ),
                ));
            }
            if !st.active {
                return Ok(true);
            }
        }
        // One progress step: transfers move and finished partitions are unpacked.
        drop(self.step()?);
        self.advance_schedules();
        let st = lock(&state);
        Ok(!st.active || st.arrived[partition as usize])
    }

    /// Forget a freed partitioned request's state.
    pub(super) fn forget_partitioned(&self, id: ReqId) {
        self.partitioned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| *i != id);
    }
}
