//! The asymmetric fence of a wake-up protocol between processes sharing memory: writers
//! publish and check whether a reader sleeps with no fence of their own, and a reader
//! about to sleep pays for both sides with `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`.
//! Used by the shared-memory transport's doorbells (`tsunagi-shm`) and the collectives'
//! shared area (`tsunagi-collectives`, `node_area`): one registration per process.
//!
//! Why (in the transport's terms; the collective area's stamps are the same pattern): the
//! doorbell protocol (see `notify` in `tsunagi-shm`) is Dekker's pattern. The
//! sender stores the record's stamp, then loads the receiver's `sleeping` word; the
//! sleeper stores `sleeping`, then polls the rings once more. Each side needs a
//! store-load barrier between its store and its load, or both could miss the other's
//! store (lost wake-up). A `fence(SeqCst)` on every send (`mfence` on x86) waits until the
//! record's cache line has been taken from the polling receiver, a full cache-to-cache
//! round trip per message, while the sleeper's side runs only before a sleep.
//!
//! `membarrier` moves that cost to the rare side: after it returns, every thread of every
//! process registered with `MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED` has executed a full
//! memory barrier (an inter-processor interrupt on CPUs running one; a thread not running
//! passes one at its context switch) at some point between the call's entry and return.
//! So for a sender's program-ordered "store stamp; load sleeping" (kept in order by a
//! compiler fence) and the sleeper's "store sleeping; membarrier; poll": if the sender's
//! load came before its barrier, its store did too and is visible to the poll after the
//! membarrier returns; if it came after, the sleeper's store (ordered before the call)
//! was visible before the barrier and the load sees it. Either the poll finds the message
//! or the sender rings the bell.
//!
//! A sender skips its fence towards a receiver only if both registered (the sender must be
//! reachable by the barrier, the receiver must issue it): each rank publishes the outcome
//! of its registration in its info line at attach (`InfoLine::heavy_sleeper`). Kernels
//! without the command (before 4.16) or sandboxes that forbid the call keep the fence on
//! every send. `TSUNAGI_SHM_MEMBARRIER=0` keeps it too (for comparisons).

use std::sync::OnceLock;

// From <linux/membarrier.h>.
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes (cmd, flags, cpu_id) by value and touches no user memory.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    }
}

/// Register this process for the heavy barrier, once. True if the kernel offers
/// `MEMBARRIER_CMD_GLOBAL_EXPEDITED`, the registration worked and the environment does not
/// turn it off: this process may then skip the per-send fence towards receivers that
/// registered too, and must issue [`heavy`] before each of its own sleeps.
pub fn registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        if std::env::var("TSUNAGI_SHM_MEMBARRIER")
            .is_ok_and(|v| matches!(v.trim(), "0" | "no" | "off" | "false"))
        {
            return false;
        }
        let cmds = membarrier(MEMBARRIER_CMD_QUERY);
        cmds > 0
            && cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED != 0
            && cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED != 0
            && membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0
    })
}

/// The sleeper's side: a full barrier on every running thread of every registered
/// process. False if the call failed (it cannot once [`registered`] said yes, short of a
/// kernel change under a running job; the caller then bounds its sleep).
pub fn heavy() -> bool {
    membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_process_can_issue_the_heavy_barrier() {
        if registered() {
            assert!(
                heavy(),
                "membarrier(GLOBAL_EXPEDITED) failed after registration"
            );
        } else {
            // Old kernel or a sandbox: the fallback (fence per send) is what runs.
            eprintln!("membarrier GLOBAL_EXPEDITED not available here");
        }
    }
}
