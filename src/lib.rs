//! Tsunagi's safe Rust API: MPI for Rust programs, in the spirit of
//! [rsmpi](https://github.com/rsmpi/rsmpi).
//!
//! ```no_run
//! use tsunagi::traits::*;
//!
//! #[derive(tsunagi::Equivalence, Clone, Copy, Debug, PartialEq)]
//! #[repr(C)]
//! struct Point { x: f64, y: f64, id: u32 }
//!
//! fn main() -> Result<(), tsunagi::Error> {
//!     let universe = tsunagi::initialize().expect("MPI already initialized");
//!     let world = universe.world();
//!     let (rank, size) = (world.rank(), world.size());
//!     if size >= 2 {
//!         if rank == 0 {
//!             world.process_at_rank(1).send(&Point { x: 1.0, y: 2.0, id: 7 })?;
//!             world.process_at_rank(1).send(&[1i32, 2, 3][..])?;
//!         } else if rank == 1 {
//!             let (p, status) = world.process_at_rank(0).receive::<Point>()?;
//!             assert_eq!((p.id, status.source_rank()), (7, 0));
//!             let (v, _) = world.any_process().receive_vec::<i32>()?;
//!             assert_eq!(v, [1, 2, 3]);
//!         }
//!     }
//!     world.barrier()?;
//!     Ok(())
//!     // `universe` is dropped here: MPI_Finalize.
//! }
//! ```
//!
//! Overview:
//! - [`initialize`] / [`initialize_with_threading`] return a [`Universe`] that finalizes
//!   MPI when dropped; [`Universe::world`] gives MPI_COMM_WORLD.
//! - [`topology`]: the [`Communicator`](topology::Communicator) trait (rank, size,
//!   processes, duplicate, split, group, barrier, abort, names) and
//!   [`SimpleCommunicator`](topology::SimpleCommunicator), freed when dropped.
//! - [`point_to_point`]: [`Destination`](point_to_point::Destination) (blocking and
//!   immediate sends in all modes) and [`Source`](point_to_point::Source) (receives,
//!   probes, matched probes), [`Status`](point_to_point::Status), send-receive.
//! - [`collective`][]: [`CommunicatorCollectives`](collective::CommunicatorCollectives)
//!   (all-gather, all-to-all, all-reduce, scans, reduce-scatter) and
//!   [`Root`](collective::Root) (broadcast, gather, scatter, reduce on a root process),
//!   with [`SystemOperation`](collective::SystemOperation)s and user closures; non-blocking
//!   ones on owned buffers.
//! - [`request`]: scoped non-blocking requests: a request borrows its buffer for the
//!   scope, and the scope waits for unfinished requests at its end.
//! - [`intercomm`]: [`InterCommunicator`](intercomm::InterCommunicator): two groups,
//!   point-to-point ranks naming the other group, every collective with MPI's
//!   intercommunicator meaning ([`intercomm::ROOT`] and the null process as roots), merge,
//!   dup, split.
//! - [`datatype`]: [`Equivalence`](datatype::Equivalence) (primitives, `bool`, arrays,
//!   `#[derive(Equivalence)]` structs), [`UserDatatype`](datatype::UserDatatype) for
//!   derived datatypes, and the buffer traits with [`View`](datatype::View) /
//!   [`MutView`](datatype::MutView) to use a derived datatype over a slice.
//!
//! - [`window`]: one-sided communication: [`Window`](window::Window) with scoped fence
//!   and lock epochs (put, get, accumulate, fetch-and-op, compare-and-swap).
//!
//! Every call returns [`Result`]`<T, `[`Error`]`>`: errors carry the MPI error class and
//! a message; bad arguments never panic.

#![warn(missing_docs)]

extern crate self as tsunagi;

pub mod collective;
pub mod datatype;
pub mod environment;
pub mod error;
pub mod intercomm;
pub mod point_to_point;
pub mod request;
pub mod topology;
pub mod window;

pub use environment::{
    attach_buffer, initialize, initialize_with_threading, is_finalized, is_initialized,
    library_version, processor_name, time, time_resolution, try_initialize,
    try_initialize_with_threading, version, AttachedBuffer, Threading, Universe,
};
pub use error::{Error, ErrorClass, Result};
pub use tsunagi_derive::Equivalence;

/// Count of elements (MPI_Count).
pub use datatype::Count;
/// A message tag.
pub use point_to_point::Tag;
/// A rank in a communicator.
pub use topology::Rank;

/// MPI_Wtime under its MPI name.
#[allow(non_snake_case)]
pub fn Wtime() -> f64 {
    time()
}

/// The traits to import for method syntax: `use tsunagi::traits::*;`.
pub mod traits {
    pub use crate::collective::{CommunicatorCollectives, CommunicatorImmediateCollectives, Root};
    pub use crate::datatype::{AsDatatype, Buffer, BufferMut, Equivalence, PlainData};
    pub use crate::point_to_point::{Destination, Source};
    pub use crate::request::Scope;
    pub use crate::topology::Communicator;
}

/// The core crate, for interoperation (raw handles).
pub use tsunagi_core as raw;

#[cfg(test)]
mod tests {
    use crate::datatype::*;
    use crate::Equivalence;

    #[derive(Equivalence, Clone, Copy)]
    #[repr(C)]
    struct Particle {
        id: u32,
        pos: [f64; 3],
        charge: f32,
    }

    #[derive(Equivalence, Clone, Copy)]
    struct Pair(u8, u64);

    #[derive(Equivalence, Clone, Copy)]
    struct Wrap<T: Equivalence + Copy> {
        a: T,
        b: bool,
    }

    #[test]
    fn derived_datatypes_have_rust_extent_and_data_size() {
        let d = Particle::equivalent_datatype();
        assert_eq!(d.size(), 4 + 24 + 4);
        assert_eq!(d.extent() as usize, std::mem::size_of::<Particle>());
        let d = Pair::equivalent_datatype();
        assert_eq!(d.size(), 9);
        assert_eq!(d.extent() as usize, 16);
        let d = <Wrap<i16>>::equivalent_datatype();
        assert_eq!(d.size(), 3);
        assert_eq!(d.extent() as usize, std::mem::size_of::<Wrap<i16>>());
        let d2 = <Wrap<f64>>::equivalent_datatype();
        assert_eq!(d2.size(), 9);
        // Cached: the same handle both times.
        assert!(std::sync::Arc::ptr_eq(
            Particle::equivalent_datatype().as_raw(),
            Particle::equivalent_datatype().as_raw()
        ));
    }

    #[test]
    fn views_check_bounds() {
        let m = [0f64; 12]; // 3 x 4
        let col = UserDatatype::vector(3, 1, 4, &f64::equivalent_datatype()).unwrap();
        assert!(View::new(&m[..], 1, &col).is_ok());
        assert!(View::new(&m[3..], 1, &col).is_ok());
        assert!(View::new(&m[4..], 1, &col).is_err());
        assert!(View::new(&m[..], -1, &col).is_err());
        let mut r = [0f64; 3];
        let c3 = UserDatatype::contiguous(3, &f64::equivalent_datatype()).unwrap();
        assert!(MutView::new(&mut r[..], 1, &c3).is_ok());
        assert!(MutView::new(&mut r[..], 2, &c3).is_err());
    }

    #[test]
    fn bad_datatype_arguments_are_errors() {
        let f = f64::equivalent_datatype();
        assert!(UserDatatype::contiguous(-1, &f).is_err());
        assert!(UserDatatype::indexed(&[1, 2], &[0], &f).is_err());
    }
}
