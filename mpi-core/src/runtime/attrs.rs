//! Attributes: keyvals, set/get/delete with their callbacks, the predefined attributes.

use super::*;

impl Runtime {
    /// MPI_Comm_create_keyval.
    pub fn create_keyval(&self, kv: Keyval) -> i32 {
        let i = self.keyvals.lock().expect("keyvals").insert(kv);
        FIRST_USER_KEYVAL + i as i32
    }

    /// MPI_Comm_free_keyval.
    pub fn free_keyval(&self, keyval: i32) -> MpiResult<()> {
        let mut k = self.keyvals.lock().expect("keyvals");
        if keyval < FIRST_USER_KEYVAL || k.remove(kv_index(keyval)).is_none() {
            return Err(MpiError::new(
                ErrorClass::Keyval,
                format!("MPI_Comm_free_keyval: invalid keyval {keyval}"),
            ));
        }
        Ok(())
    }

    pub(super) fn check_keyval(&self, call: &str, keyval: i32) -> MpiResult<()> {
        if keyval < FIRST_USER_KEYVAL
            || self
                .keyvals
                .lock()
                .expect("keyvals")
                .get(kv_index(keyval))
                .is_none()
        {
            return Err(MpiError::new(
                ErrorClass::Keyval,
                format!("{call}: invalid keyval {keyval}"),
            ));
        }
        Ok(())
    }

    pub(super) fn run_delete(&self, comm: CommId, keyval: i32, val: usize) -> MpiResult<()> {
        let kv = self
            .keyvals
            .lock()
            .expect("keyvals")
            .get(kv_index(keyval))
            .cloned();
        if let Some(Keyval {
            delete: Some(f),
            extra,
            ..
        }) = kv
        {
            f(comm, keyval, val, extra)?;
        }
        Ok(())
    }

    /// MPI_Comm_set_attr (a previous value is deleted through the delete callback).
    pub fn set_attr(&self, comm: CommId, keyval: i32, val: usize) -> MpiResult<()> {
        let call = "MPI_Comm_set_attr";
        self.check_keyval(call, keyval)?;
        let old = self.with_comm(call, comm, |c| c.attrs.get(&keyval).copied())?;
        if let Some(v) = old {
            self.run_delete(comm, keyval, v)?;
        }
        let mut e = self.lock();
        self.check_comm(&e, call, comm)?;
        e.core
            .comm_mut(comm)
            .expect("checked")
            .attrs
            .insert(keyval, val);
        Ok(())
    }

    /// MPI_Comm_get_attr for user keyvals.
    pub fn get_attr(&self, comm: CommId, keyval: i32) -> MpiResult<Option<usize>> {
        let call = "MPI_Comm_get_attr";
        self.check_keyval(call, keyval)?;
        self.with_comm(call, comm, |c| c.attrs.get(&keyval).copied())
    }

    /// MPI_Comm_delete_attr.
    pub fn delete_attr(&self, comm: CommId, keyval: i32) -> MpiResult<()> {
        let call = "MPI_Comm_delete_attr";
        self.check_keyval(call, keyval)?;
        let old = self.with_comm(call, comm, |c| c.attrs.get(&keyval).copied())?;
        let Some(v) = old else {
            return Err(MpiError::new(
                ErrorClass::Keyval,
                format!("{call}: keyval {keyval} has no value on this communicator"),
            ));
        };
        self.run_delete(comm, keyval, v)?;
        let mut e = self.lock();
        if let Some(c) = e.core.comm_mut(comm) {
            c.attrs.remove(&keyval);
        }
        Ok(())
    }

    /// Value of a predefined attribute (MPI_TAG_UB and friends).
    pub fn predefined_attr(&self, which: PredefinedAttr) -> Option<i32> {
        match which {
            PredefinedAttr::TagUb => Some(tag_ub()),
            PredefinedAttr::Host => Some(PROC_NULL),
            PredefinedAttr::Io => Some(ANY_SOURCE),
            PredefinedAttr::WtimeIsGlobal => Some(0),
            PredefinedAttr::UniverseSize => Some(self.universe_size),
            PredefinedAttr::LastUsedCode => Some(ErrorClass::ValueTooLarge as i32),
            PredefinedAttr::AppNum => Some(self.appnum),
        }
    }
}
