//! Dynamic processes, the core's part: processes of other worlds as virtual ranks behind a
//! device added at run time, and intercommunicators whose leaders talk over a connection
//! of their own.
//!
//! The layers above (the C library's `MPI_Comm_connect`/`accept`/`spawn`/`join`) make the
//! connections and the device (crate `tsunagi-dynconn`; the core names no transport); the
//! core hands out the ranks it will know those processes by (above the job's world
//! ranks: no transport reaches them, so the router sends them to the device), routes them,
//! and builds the intercommunicator with the same context-id agreement as
//! MPI_Intercomm_create, the leaders' swap going over the roots' connection.

use super::*;
use tsunagi_p2p::boot::{NameAnswer, NameRequest, SpawnApp};
use tsunagi_p2p::device::Device;

/// Virtual ranks handed out so far in this process (added to the world size).
static NEXT_VIRTUAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Runtime {
    /// Make `n` processes of another world reachable through the run-time device named
    /// `device_name`, made by `make` the first time: returns their virtual world ranks
    /// (all above this world's ranks, never handed out twice). The device must already
    /// know how to reach them (its streams are handed over before this call).
    pub fn add_dynamic_peers(
        &'static self,
        device_name: &str,
        make: &mut dyn FnMut() -> MpiResult<Box<dyn Device>>,
        n: usize,
    ) -> MpiResult<Vec<Rank>> {
        let first = NEXT_VIRTUAL.fetch_add(n as u32, Ordering::Relaxed);
        let base = self.size as u64 + first as u64;
        if base + n as u64 >= u32::MAX as u64 / 2 {
            return Err(MpiError::new(
                ErrorClass::Intern,
                "dynamic processes: out of process ranks",
            ));
        }
        let ranks: Vec<Rank> = (0..n as u32).map(|i| base as u32 + i).collect();
        let started = {
            let mut e = self.lock();
            let existing = e
                .router
                .devices()
                .iter()
                .position(|d| d.name() == device_name);
            match existing {
                Some(idx) => {
                    e.router.route_to_device(idx, &ranks);
                    None
                }
                None => {
                    let d = make()?;
                    let src = d.event_source();
                    let idx = e.router.add_device(d, &ranks);
                    Some((e.router.len() + idx, src))
                }
            }
        };
        if let Some((idx, src)) = started {
            self.start_device_thread(idx, src);
        }
        Ok(ranks)
    }

    /// The leader's `exchange` result, handed to every member of `local` (collective over
    /// `local`; `exchange` runs on the leader only).
    pub fn leader_exchange(
        &self,
        call: &str,
        local: CommId,
        is_leader: bool,
        mine: &[u8],
        exchange: &dyn Fn(&[u8]) -> MpiResult<Vec<u8>>,
    ) -> MpiResult<Vec<u8>> {
        self.leaders_swap(call, local, is_leader, mine, exchange)
    }

    /// An intercommunicator from the intracommunicator `local_comm` (collective over it)
    /// to the processes with virtual ranks `remote` (in their group's order): the context
    /// pair is agreed with the other group through the leaders' `exchange`, which both
    /// groups' leaders call equally often.
    pub fn intercomm_to_remote(
        &self,
        call: &str,
        local_comm: CommId,
        is_leader: bool,
        exchange: &dyn Fn(&[u8]) -> MpiResult<Vec<u8>>,
        remote: Vec<Rank>,
    ) -> MpiResult<CommId> {
        let context = self.inter_context(call, local_comm, is_leader, exchange)?;
        let local = self.hidden_local(call, local_comm)?;
        self.insert_inter(local_comm, local, Group::new(remote), context)
    }

    /// Start `apps` through the launcher that started this process (PMI-1 `spawn`), with
    /// `preput` in the children's key-value space. `None` when there is no such launcher
    /// (a singleton); errors are MPI_ERR_SPAWN with the launcher's reason.
    pub fn launcher_spawn(
        &self,
        call: &str,
        apps: &[SpawnApp],
        preput: &[(String, String)],
    ) -> Option<MpiResult<()>> {
        let r = self.boot_lock().spawn(apps, preput)?;
        Some(r.map_err(|e| MpiError::new(ErrorClass::Spawn, format!("{call}: {e}"))))
    }

    /// Ask the launcher's name service; `None` when it has none.
    pub fn launcher_names(&self, req: NameRequest<'_>) -> Option<MpiResult<NameAnswer>> {
        let r = self.boot_lock().name_service(req)?;
        Some(r.map_err(|e| MpiError::new(ErrorClass::Other, format!("name service: {e}"))))
    }

    /// A key from this job's key-value space at the launcher (what a spawning parent
    /// preput for its children), if present.
    pub fn launcher_get(&self, key: &str) -> MpiResult<Option<String>> {
        self.boot_lock()
            .get(key)
            .map_err(|e| MpiError::new(ErrorClass::Other, format!("launcher: {e}")))
    }

    fn boot_lock(&self) -> std::sync::MutexGuard<'_, Box<dyn tsunagi_p2p::boot::Bootstrap>> {
        self.boot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether world rank `w` is one of this world's (not a virtual rank of another's).
    pub fn is_own_world_rank(&self, w: Rank) -> bool {
        (w as usize) < self.size
    }
}

/// A random number drawn once per process: what orders two worlds' groups where world
/// ranks cannot (MPI_Intercomm_merge with equal `high`).
pub(super) fn process_nonce() -> u64 {
    static NONCE: OnceLock<u64> = OnceLock::new();
    *NONCE.get_or_init(|| {
        let mut b = [0u8; 8];
        let ok = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
            .is_ok();
        if ok {
            u64::from_le_bytes(b)
        } else {
            // No /dev/urandom: the time and pid still differ between processes.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            t ^ ((std::process::id() as u64) << 32)
        }
    })
}
