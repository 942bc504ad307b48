//! Persistent collectives (MPI-4 `MPI_Bcast_init` ...): a persistent request of the core's
//! request table that, on each MPI_Start, gets a fresh schedule from the factory given at
//! initialization. Each start takes the communicator's next collective sequence number
//! like any non-blocking collective, so starts must come in the same order everywhere, as
//! MPI requires.

use super::*;

/// Builds the schedule of one run of a persistent collective (called at each start, with
/// no runtime lock held).
pub type ScheduleFactory = Box<dyn FnMut(&Runtime) -> MpiResult<Box<dyn Schedule>> + Send>;

pub(super) type SharedFactory = Arc<Mutex<ScheduleFactory>>;

impl Runtime {
    /// A new inactive persistent request whose starts run `factory`'s schedules.
    pub fn persistent_schedule(&self, factory: ScheduleFactory) -> MpiResult<ReqId> {
        let id = self.lock().new_persistent_scheduled();
        let mut table = self
            .persistent_colls
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        table.retain(|(i, _)| *i != id);
        table.push((id, Arc::new(Mutex::new(factory))));
        Ok(id)
    }

    fn persistent_factory(&self, id: ReqId) -> Option<SharedFactory> {
        let table = self
            .persistent_colls
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        table.iter().find(|(i, _)| *i == id).map(|(_, f)| f.clone())
    }

    /// MPI_Start on a persistent collective: Some(result) if `id` is one.
    pub(super) fn start_persistent(&self, id: ReqId) -> Option<MpiResult<()>> {
        let factory = self.persistent_factory(id)?;
        Some((|| {
            if self.lock().is_active(id) {
                return Err(MpiError::new(
                    ErrorClass::Request,
                    "MPI_Start: the persistent collective is already active",
                ));
            }
            let schedule = (factory.lock().unwrap_or_else(|p| p.into_inner()))(self)?;
            self.lock().start(id)?;
            self.run_schedule(id, schedule);
            Ok(())
        })())
    }

    /// MPI_Request_free on a persistent collective: Some(result) if `id` is one.
    pub(super) fn free_persistent(&self, id: ReqId) -> Option<MpiResult<()>> {
        self.persistent_factory(id)?;
        let mut e = self.lock();
        if e.is_active(id) {
            return Some(Err(MpiError::new(
                ErrorClass::Request,
                "MPI_Request_free: the persistent collective is active (wait for it first)",
            )));
        }
        let r = e.free_request(id);
        drop(e);
        self.persistent_colls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| *i != id);
        self.forget_partitioned(id);
        Some(r)
    }
}
