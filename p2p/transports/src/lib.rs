//! The registry of Tsunagi's transports: the one place that names them.
//!
//! The MPI core (`tsunagi-core`) knows transports only through
//! [`tsunagi_p2p::boot::TransportFactory`]; the C library and the Rust API pass
//! [`REGISTRY`] to `tsunagi_core::init`. Adding a transport is a new crate that implements
//! the factory plus one line below. Order matters per reach: the first transport of a reach
//! is the default (`TSUNAGI_INTRANODE` / `TSUNAGI_INTERNODE` pick another by name). Grid
//! joins bring native devices for other sites (`tsunagi_p2p::boot::GridJoin`).

use tsunagi_p2p::boot::Registry;

/// Every transport and extra bootstrap this build of Tsunagi has.
pub static REGISTRY: Registry = Registry {
    transports: &[
        // Within a node.
        &tsunagi_shm::FACTORY,
        &tsunagi_vendor::NODE_FACTORY,
        // Between nodes.
        &tsunagi_tcp::FACTORY,
        &tsunagi_stream::FACTORY,
        &tsunagi_pm::FACTORY,
        &tsunagi_vendor::REMOTE_FACTORY,
    ],
    // TSUNAGI_VENDOR: started by the vendor MPI's launcher.
    bootstraps: &[&tsunagi_vendor::BOOTSTRAP],
    // Other sites (IMPI), when the environment names an IMPI server.
    grids: &[&tsunagi_impi::join::GRID],
};
