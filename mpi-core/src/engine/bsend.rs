//! The buffers of buffered sends below the process's (MPI 4.1 §3.6): one attached to a
//! communicator, one attached to a session. A buffered send takes its space from the
//! communicator's buffer if it has one, else from its session's, else from the process's
//! (`Core::bsend_buffer`/`bsend_used`, MPI_Buffer_attach). The space is only accounted:
//! the data itself travels in a packed copy owned by the internal send (engine/mod.rs),
//! so a buffer attached with MPI_BUFFER_AUTOMATIC is one without a limit.

use std::collections::HashMap;

use crate::comm::CommId;

/// Where a buffered send's space comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum BufferScope {
    /// The process's buffer (MPI_Buffer_attach).
    #[default]
    Process,
    /// A communicator's buffer (MPI_Comm_attach_buffer).
    Comm(CommId),
    /// A session's buffer (MPI_Session_attach_buffer), by the session's index.
    Session(u32),
}

/// One attached buffer: its address (kept to give back at detach), size (None: automatic,
/// no limit) and bytes in use.
#[derive(Clone, Copy, Debug)]
pub struct ScopedBuffer {
    pub addr: usize,
    pub size: Option<usize>,
    pub used: usize,
}

/// The communicators' and sessions' buffers, and which session each communicator derives
/// from.
#[derive(Default)]
pub struct ScopedBuffers {
    comms: HashMap<CommId, ScopedBuffer>,
    sessions: HashMap<u32, ScopedBuffer>,
    session_of: HashMap<CommId, u32>,
}

impl ScopedBuffers {
    /// The buffer of a scope other than the process's.
    pub fn get(&self, scope: BufferScope) -> Option<&ScopedBuffer> {
        match scope {
            BufferScope::Process => None,
            BufferScope::Comm(c) => self.comms.get(&c),
            BufferScope::Session(s) => self.sessions.get(&s),
        }
    }

    fn get_mut(&mut self, scope: BufferScope) -> Option<&mut ScopedBuffer> {
        match scope {
            BufferScope::Process => None,
            BufferScope::Comm(c) => self.comms.get_mut(&c),
            BufferScope::Session(s) => self.sessions.get_mut(&s),
        }
    }

    /// Attach a buffer to a communicator or session: false if it already has one.
    pub fn attach(&mut self, scope: BufferScope, addr: usize, size: Option<usize>) -> bool {
        let b = ScopedBuffer {
            addr,
            size,
            used: 0,
        };
        fn insert_new<K: std::hash::Hash + Eq>(
            map: &mut HashMap<K, ScopedBuffer>,
            k: K,
            b: ScopedBuffer,
        ) -> bool {
            if map.contains_key(&k) {
                return false;
            }
            map.insert(k, b);
            true
        }
        match scope {
            BufferScope::Process => false,
            BufferScope::Comm(c) => insert_new(&mut self.comms, c, b),
            BufferScope::Session(s) => insert_new(&mut self.sessions, s, b),
        }
    }

    /// Remove a communicator's or session's buffer, giving back (address, size).
    pub fn detach(&mut self, scope: BufferScope) -> Option<ScopedBuffer> {
        match scope {
            BufferScope::Process => None,
            BufferScope::Comm(c) => self.comms.remove(&c),
            BufferScope::Session(s) => self.sessions.remove(&s),
        }
    }

    /// Bytes in use in a scope's buffer (0 if none is attached).
    pub fn used(&self, scope: BufferScope) -> usize {
        self.get(scope).map_or(0, |b| b.used)
    }

    /// Record that `comm` derives from session `session` (made from one of its groups, or
    /// from a communicator that does).
    pub fn set_session(&mut self, comm: CommId, session: u32) {
        self.session_of.insert(comm, session);
    }

    /// The session `comm` derives from.
    pub fn session_of(&self, comm: CommId) -> Option<u32> {
        self.session_of.get(&comm).copied()
    }

    /// Forget a freed communicator (its slot is reused).
    pub fn comm_freed(&mut self, comm: CommId) {
        self.comms.remove(&comm);
        self.session_of.remove(&comm);
    }

    /// Forget a finalized session.
    pub fn session_freed(&mut self, session: u32) {
        self.sessions.remove(&session);
        self.session_of.retain(|_, s| *s != session);
    }

    /// The scope a buffered send on `comm` takes its space from.
    pub fn scope_for(&self, comm: CommId) -> BufferScope {
        if self.comms.contains_key(&comm) {
            return BufferScope::Comm(comm);
        }
        match self.session_of(comm) {
            Some(s) if self.sessions.contains_key(&s) => BufferScope::Session(s),
            _ => BufferScope::Process,
        }
    }

    /// Take `need` bytes of a scope's buffer: Err((free, size)) when they do not fit.
    pub fn take(&mut self, scope: BufferScope, need: usize) -> Result<(), (usize, usize)> {
        let b = self
            .get_mut(scope)
            .expect("scope_for names an attached buffer");
        match b.size {
            Some(size) if b.used.saturating_add(need) > size => {
                Err((size.saturating_sub(b.used), size))
            }
            _ => {
                b.used += need;
                Ok(())
            }
        }
    }

    /// Give back `bytes` of a scope's buffer (a buffered send's copy has left).
    pub fn give_back(&mut self, scope: BufferScope, bytes: usize) {
        if let Some(b) = self.get_mut(scope) {
            b.used = b.used.saturating_sub(bytes);
        }
    }
}

impl super::Core {
    /// Take a buffered send's `need` bytes from `scope`'s buffer; Err((free, size, whose))
    /// when they do not fit.
    pub(super) fn take_bsend(
        &mut self,
        scope: BufferScope,
        need: usize,
    ) -> Result<(), (usize, usize, String)> {
        if scope == BufferScope::Process {
            let (_, size) = self.bsend_buffer.unwrap_or((0, 0));
            if self.bsend_used.saturating_add(need) > size {
                let free = size.saturating_sub(self.bsend_used);
                return Err((free, size, "the process (MPI_Buffer_attach)".into()));
            }
            self.bsend_used += need;
            return Ok(());
        }
        self.bsend_scoped.take(scope, need).map_err(|(free, size)| {
            let whose = match scope {
                BufferScope::Comm(c) => format!("the communicator ({})", c.0),
                _ => "the session".into(),
            };
            (free, size, whose)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_communicator_buffer_comes_before_the_session_and_the_process() {
        let mut s = ScopedBuffers::default();
        let c = CommId(5);
        assert_eq!(s.scope_for(c), BufferScope::Process);
        s.set_session(c, 1);
        assert_eq!(
            s.scope_for(c),
            BufferScope::Process,
            "the session has no buffer"
        );
        assert!(s.attach(BufferScope::Session(1), 0x1000, Some(100)));
        assert_eq!(s.scope_for(c), BufferScope::Session(1));
        assert!(s.attach(BufferScope::Comm(c), 0x2000, Some(10)));
        assert_eq!(s.scope_for(c), BufferScope::Comm(c));
        assert!(
            !s.attach(BufferScope::Comm(c), 0x3000, Some(10)),
            "already attached"
        );
        assert_eq!(s.take(BufferScope::Comm(c), 11), Err((10, 10)));
        assert_eq!(s.take(BufferScope::Comm(c), 6), Ok(()));
        assert_eq!(s.take(BufferScope::Comm(c), 6), Err((4, 10)));
        s.give_back(BufferScope::Comm(c), 6);
        assert_eq!(s.used(BufferScope::Comm(c)), 0);
        let b = s.detach(BufferScope::Comm(c)).expect("attached");
        assert_eq!((b.addr, b.size), (0x2000, Some(10)));
        assert_eq!(s.scope_for(c), BufferScope::Session(1));
        s.session_freed(1);
        assert_eq!(s.scope_for(c), BufferScope::Process);
    }

    #[test]
    fn an_automatic_buffer_has_no_limit() {
        let mut s = ScopedBuffers::default();
        assert!(s.attach(BufferScope::Session(0), 2, None));
        assert_eq!(s.take(BufferScope::Session(0), usize::MAX / 2), Ok(()));
        assert_eq!(s.used(BufferScope::Session(0)), usize::MAX / 2);
    }
}
