//! Node sub-communicators for the hierarchical small collectives: a communicator that
//! spans several nodes (pretend nodes of `TSUNAGI_NODE_MAP` included) with several ranks
//! on some gets, at the first call that wants them, a communicator of this rank's node
//! (ranks in the parent's order) and, on the node leaders (each node's lowest rank), a
//! communicator of the leaders (in the parent's order). The node communicator lies on one
//! node, so its collectives take the shared-memory area of `shmcoll.rs`: the node-local
//! steps of a hierarchical allreduce, barrier or all-to-all become one slot exchange
//! instead of point-to-point messages, and the ranks that are not leaders wait on the
//! area's words (yield, then futex) instead of polling the sockets of the engine.
//! Measured on 8 ranks as 4 pretend nodes of 2 on 2 cores (docs/performance.md,
//! session 11).
//!
//! **Made** collectively (two `comm_split`s of the parent, which exchange over the
//! point-to-point layer, not over a collective) by every rank at the same call: the
//! decision depends on the communicator, the collective's algorithm setting and the
//! message size only, which every rank shares. Kept in a process-wide table indexed by
//! communicator id (like the areas), cleared by an attribute's delete callback when the
//! parent is freed, which frees the sub-communicators with it (locally: `MPI_Comm_free`
//! sends nothing), so that their areas are unmapped at once.

use std::sync::{Arc, Mutex, OnceLock, RwLock};

use tsunagi_core::comm::Keyval;
use tsunagi_core::group::UNDEFINED;
use tsunagi_core::{CommId, MpiResult, Runtime};

use crate::util::{Ctx, Hier};

/// A communicator's node and leader sub-communicators.
pub(crate) struct Split {
    /// This rank's node (ranks in the parent's order; this rank's leader is rank 0).
    pub node: CommId,
    /// The node leaders (in the parent's order), on a leader only.
    pub leaders: Option<CommId>,
    /// The parent's node structure.
    pub hier: Hier,
}

impl Split {
    pub fn is_leader(&self) -> bool {
        self.leaders.is_some()
    }
    /// The largest node's rank count.
    pub fn max_local(&self) -> usize {
        self.hier.members.iter().map(Vec::len).max().unwrap_or(1)
    }
}

enum Entry {
    Unknown,
    /// Not a communicator the node split serves (one node, sites, intercommunicator).
    Off,
    On(Arc<Split>),
}

static TABLE: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

/// Sub-communicators whose parent was freed when the runtime no longer answered (during
/// finalize), freed at the next setup if there is one.
static ORPHANS: Mutex<Vec<CommId>> = Mutex::new(Vec::new());

fn set_entry(comm: CommId, e: Entry) {
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    let i = comm.0 as usize;
    if t.len() <= i {
        t.resize_with(i + 1, || Entry::Unknown);
    }
    t[i] = e;
}

fn keyval(rt: &Runtime) -> i32 {
    static KEYVAL: OnceLock<i32> = OnceLock::new();
    *KEYVAL.get_or_init(|| {
        rt.create_keyval(Keyval {
            copy: None,
            delete: Some(Arc::new(|comm: CommId, _kv, _val, _extra| {
                let old = {
                    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
                    t.get_mut(comm.0 as usize)
                        .map(|e| std::mem::replace(e, Entry::Unknown))
                };
                if let Some(Entry::On(s)) = old {
                    let subs = std::iter::once(s.node).chain(s.leaders);
                    // The parent's free frees its sub-communicators (and their areas) at
                    // once; past finalize's start they wait in the orphans (freed by
                    // finalize with everything else).
                    match tsunagi_core::rt("MPI_Comm_free") {
                        Ok(rt) => {
                            for c in subs {
                                rt.comm_free(c)?;
                            }
                        }
                        Err(_) => ORPHANS
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .extend(subs),
                    }
                }
                Ok(())
            })),
            extra: 0,
        })
    })
}

/// The node split of the call's communicator, made at the first call that asks (every
/// rank of the communicator must ask at the same call). `None` when the communicator is
/// not one the split serves.
pub(crate) fn split(ctx: &mut Ctx) -> MpiResult<Option<Arc<Split>>> {
    let comm = ctx.comm;
    {
        let t = TABLE.read().unwrap_or_else(|p| p.into_inner());
        match t.get(comm.0 as usize) {
            Some(Entry::Off) => return Ok(None),
            Some(Entry::On(s)) => return Ok(Some(s.clone())),
            _ => {}
        }
    }
    let rt = ctx.rt;
    let orphans = std::mem::take(&mut *ORPHANS.lock().unwrap_or_else(|p| p.into_inner()));
    for c in orphans {
        // A sub-communicator the program cannot name: nobody else frees it.
        let _ = rt.comm_free(c);
    }
    let entry = setup(ctx)?;
    let out = match &entry {
        Entry::On(s) => Some(s.clone()),
        _ => None,
    };
    set_entry(comm, entry);
    rt.set_attr(comm, keyval(rt), 1)?;
    Ok(out)
}

fn setup(ctx: &mut Ctx) -> MpiResult<Entry> {
    // `is_hierarchical`: several nodes, several ranks on one at least, and not the
    // latency-aware flat mode across sites; IMPI sites have their own algorithms.
    if ctx.size < 3 || !ctx.is_hierarchical()? || crate::impi::sites(ctx)?.is_some() {
        return Ok(Entry::Off);
    }
    let nodes = ctx.nodes()?;
    let hier = Hier::new(&nodes, ctx.rank);
    let rt = ctx.rt;
    let key = ctx.rank as i32;
    let node = rt
        .comm_split(ctx.comm, hier.my_node as i32, key)?
        .expect("a colour was given");
    let color = if hier.is_leader() { 0 } else { UNDEFINED };
    let leaders = rt.comm_split(ctx.comm, color, key)?;
    Ok(Entry::On(Arc::new(Split {
        node,
        leaders,
        hier,
    })))
}
