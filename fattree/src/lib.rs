//! Hot-spot-free all-to-all on two-level fat trees: the LID-selection planner of seed 003
//! (Naruse et al., "Proposal of hot-spot avoidance technique on all-to-all communication
//! in fat-tree based InfiniBand networks") and a flow-level fabric simulator that
//! reproduces its result.
//!
//! **Job.** [`topology`] models a k-ary-2-tree and InfiniBand's static destination routing
//! (one LID, one root); [`planner`] chooses, per (source node, destination node), which of
//! the destination's K LIDs a connection uses so that no two flows of one shift phase share
//! a switch link; [`sim`] runs an all-to-all's phases as max-min fair flows on the fabric;
//! [`experiment`] is the paper's experiment (random and consecutive allocations). The CLI
//! `tsunagi-fattree` prints plans and runs the reproduction (docs/fattree.md).
//!
//! **Boundary.** No MPI, no I/O in the library. A transport on a real fabric (a future
//! InfiniBand transport, or the PM transport with several addresses per host standing for
//! LIDs) calls [`Plan::new`] once at start-up with the number of roots and the leaf of
//! each of the job's nodes, then [`Plan::lid_index`]`(my_node, peer_node)` per connection,
//! and must run its all-to-all ring over the nodes in [`Plan::order`];
//! [`connection_lid_indices`]`(tree, allocation, me)` gives all of one node's connections
//! in one call: the PM transport (`tsunagi-pm`, `TSUNAGI_PM_LIDS` / `TSUNAGI_FATTREE`)
//! makes that call at start-up and sends to each peer on the port the plan names. The
//! schedules simulated here are those of `tsunagi-collectives` (checked by the tests against
//! `two_level_ring_schedule` and `plain_ring_schedule`).

pub mod experiment;
pub mod planner;
pub mod sim;
pub mod topology;

pub use planner::{connection_lid_indices, destination_lid_index, Numbering, Plan, PlanStats};
pub use topology::{FabricError, FatTree, Link};
