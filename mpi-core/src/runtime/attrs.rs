//! Attributes: keyvals, set/get/delete with their callbacks, the predefined attributes.

use super::*;

use std::collections::BTreeSet;

/// Keyvals the program freed while attributes still used them (MPI: "freeing a keyval
/// that is in use marks it; it is deallocated once no object holds an attribute of it").
/// The program can no longer name them, but copy and delete callbacks of the attributes
/// still run. One runtime per process, so process-wide state.
static FREED_KEYVALS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// The attributes set on MPI_COMM_SELF, oldest first: MPI_Finalize deletes them in the
/// reverse order of setting.
static SELF_ORDER: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn lock_static<T>(m: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    /// MPI_Comm_create_keyval.
    pub fn create_keyval(&self, kv: Keyval) -> i32 {
        let i = self.keyvals.lock().expect("keyvals").insert(kv);
        FIRST_USER_KEYVAL + i as i32
    }

    /// MPI_Comm_free_keyval: a keyval no attribute uses goes at once; one still in use is
    /// marked, and goes when the last attribute of it is deleted.
    pub fn free_keyval(&self, keyval: i32) -> MpiResult<()> {
        self.check_keyval("MPI_Comm_free_keyval", keyval)?;
        if self.keyval_in_use(keyval) {
            lock_static(&FREED_KEYVALS).insert(keyval);
        } else {
            self.keyvals
                .lock()
                .expect("keyvals")
                .remove(kv_index(keyval));
        }
        Ok(())
    }

    /// Whether any communicator holds an attribute of `keyval`.
    fn keyval_in_use(&self, keyval: i32) -> bool {
        let e = self.lock();
        let in_use = e.comms().iter().any(|c| c.attrs.contains_key(&keyval));
        in_use
    }

    /// After an attribute of `keyval` went: deallocate the keyval if the program freed it
    /// and nothing uses it any more.
    fn release_keyval_if_unused(&self, keyval: i32) {
        if !lock_static(&FREED_KEYVALS).contains(&keyval) || self.keyval_in_use(keyval) {
            return;
        }
        lock_static(&FREED_KEYVALS).remove(&keyval);
        self.keyvals
            .lock()
            .expect("keyvals")
            .remove(kv_index(keyval));
    }

    /// A keyval the program may name: made by it and not freed.
    pub(super) fn check_keyval(&self, call: &str, keyval: i32) -> MpiResult<()> {
        if keyval < FIRST_USER_KEYVAL
            || self
                .keyvals
                .lock()
                .expect("keyvals")
                .get(kv_index(keyval))
                .is_none()
            || lock_static(&FREED_KEYVALS).contains(&keyval)
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
        e.comms_mut()
            .get_mut(comm)
            .expect("checked")
            .attrs
            .insert(keyval, val);
        drop(e);
        if comm == CommId::SELF {
            let mut order = lock_static(&SELF_ORDER);
            order.retain(|&k| k != keyval);
            order.push(keyval);
        }
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
        self.forget_attr(comm, keyval);
        Ok(())
    }

    /// Drop the attribute `keyval` of `comm` (its delete callback ran).
    fn forget_attr(&self, comm: CommId, keyval: i32) {
        if let Some(c) = self.lock().comms_mut().get_mut(comm) {
            c.attrs.remove(&keyval);
        }
        if comm == CommId::SELF {
            lock_static(&SELF_ORDER).retain(|&k| k != keyval);
        }
        self.release_keyval_if_unused(keyval);
    }

    /// The first step of MPI_Finalize (MPI 4.1 §11.2.5): MPI_COMM_SELF's attributes are
    /// deleted, their callbacks run in the reverse order of setting, before anything else
    /// is torn down. Attributes set without going through `set_attr`'s order (none today)
    /// follow in keyval order.
    pub fn delete_self_attrs(&self) -> MpiResult<()> {
        let mut order: Vec<i32> = lock_static(&SELF_ORDER).clone();
        order.reverse();
        let rest: Vec<i32> = self
            .with_comm("MPI_Finalize", CommId::SELF, |c| {
                c.attrs.keys().copied().collect::<Vec<i32>>()
            })?
            .into_iter()
            .filter(|k| !order.contains(k))
            .collect();
        for k in order.into_iter().chain(rest) {
            let v = self.with_comm("MPI_Finalize", CommId::SELF, |c| c.attrs.get(&k).copied())?;
            if let Some(v) = v {
                self.run_delete(CommId::SELF, k, v)
                    .map_err(|e| with_call("MPI_Finalize", e))?;
                self.forget_attr(CommId::SELF, k);
            }
        }
        Ok(())
    }

    /// After MPI_Comm_free ran the delete callbacks of a communicator's attributes:
    /// deallocate the freed keyvals nothing uses any more.
    pub(super) fn attrs_dropped(&self, keyvals: impl IntoIterator<Item = i32>) {
        for k in keyvals {
            self.release_keyval_if_unused(k);
        }
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
