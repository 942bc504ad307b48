//! `tsunagi-bench`'s library: runs MPI workloads under Tsunagi, MPICH and Open MPI side by
//! side and reports what it measured.
//!
//! Boundary: this crate links no MPI. It writes the C workloads (the NPB kernels, Himeno and
//! the micro-benchmarks of `npb-tests/bench/`, embedded in the binary so an installed
//! harness is self-contained) into a work directory, builds them with each MPI's own
//! `mpicc`, starts them through each MPI's own launcher as child processes, and parses what
//! rank 0 prints. Everything about statistics, tables, CSV and plots lives here so that it
//! is unit-tested without running MPI.
//!
//! Modules, in the order data flows: [`workloads`] (sources and the run plan), [`mpis`]
//! (the contenders and how to build and launch with each), [`runner`] (one run as a child
//! process group with a timeout and log files), [`metric`] (what a run's output means),
//! [`stats`] (medians, ranges, ratios), [`report`] (Markdown and CSV), [`plot`] (PNG).

pub mod metric;
pub mod mpis;
pub mod plot;
pub mod report;
pub mod runner;
pub mod stats;
pub mod workloads;
