//! Ping-pong through the C entry points (PMPI_Send/PMPI_Recv) linked statically from the
//! rlib, to separate the cost of the C ABI layer from that of a shared library:
//! `mpirun -n 2 abi_pingpong [bytes...]` prints `lat <bytes> <usec>` like
//! mpi-core/examples/core_pingpong.rs.

use std::ffi::{c_int, c_void};

use mpi as _;
use mpi::ffi::{MPI_Comm, MPI_Datatype, MPI_Status, MPI_COMM_WORLD};

const MPI_BYTE: MPI_Datatype = 0x4c00_010d;

extern "C" {
    fn PMPI_Init(argc: *mut c_int, argv: *mut *mut *mut i8) -> c_int;
    fn PMPI_Finalize() -> c_int;
    fn PMPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) -> c_int;
    fn PMPI_Wtime() -> f64;
    fn PMPI_Send(
        buf: *const c_void,
        n: c_int,
        t: MPI_Datatype,
        dest: c_int,
        tag: c_int,
        c: MPI_Comm,
    ) -> c_int;
    fn PMPI_Recv(
        buf: *mut c_void,
        n: c_int,
        t: MPI_Datatype,
        src: c_int,
        tag: c_int,
        c: MPI_Comm,
        st: *mut MPI_Status,
    ) -> c_int;
}

fn main() {
    // MPI_STATUS_IGNORE is the address 1.
    let ignore = std::ptr::null_mut::<MPI_Status>().wrapping_byte_add(1);
    let mut me: c_int = 0;
    // SAFETY: the C entry points with valid arguments; `buf` outlives every call.
    unsafe {
        PMPI_Init(std::ptr::null_mut(), std::ptr::null_mut());
        PMPI_Comm_rank(MPI_COMM_WORLD, &mut me);
    }
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if args.is_empty() {
        vec![0, 8, 1024, 65536, 1 << 20, 4 << 20]
    } else {
        args
    };
    for sz in sizes {
        let mut buf = vec![0u8; sz.max(1)];
        let iters = (200_000_000 / (sz + 2000)).clamp(20, 100_000);
        let mut best = f64::MAX;
        let (p, n) = (buf.as_mut_ptr() as *mut c_void, sz as c_int);
        for _round in 0..5 {
            // SAFETY: as above.
            let t0 = unsafe { PMPI_Wtime() };
            for _ in 0..iters {
                // SAFETY: as above.
                unsafe {
                    if me == 0 {
                        PMPI_Send(p, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                        PMPI_Recv(p, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, ignore);
                    } else if me == 1 {
                        PMPI_Recv(p, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, ignore);
                        PMPI_Send(p, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
                    }
                }
            }
            // SAFETY: as above.
            let dt = (unsafe { PMPI_Wtime() } - t0) / iters as f64 / 2.0 * 1e6;
            best = best.min(dt);
        }
        if me == 0 {
            println!("lat {sz} {best:.3}");
        }
    }
    // SAFETY: as above.
    unsafe { PMPI_Finalize() };
}
