//! Persistent collectives (MPI-4 `MPI_Bcast_init` ... and the neighbourhood ones): the
//! arguments are kept as given, and each MPI_Start decodes them again and builds the
//! schedule of the matching non-blocking collective (`coll::i*`), which the core runs
//! as the work of the persistent request (`Runtime::persistent_schedule`). MPI forbids
//! changing the buffers, count arrays and datatypes of a persistent collective until it is
//! freed, so decoding again gives what initialization would have.
//!
//! The non-blocking functions hand their schedule to `started`; while a start builds one,
//! `divert` takes it instead of starting it as a request of its own.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};

use tsunagi_collectives::CollRequest;
use tsunagi_core::runtime::Schedule;
use tsunagi_core::{CommId, ErrorClass, MpiResult};

use super::coll::*;
use crate::ffi::*;
use crate::handles::{self as h, err, InfoId};

thread_local! {
    /// Some while a persistent collective's start builds its schedule: where it goes.
    static CAPTURE: RefCell<Option<Option<CollRequest>>> = const { RefCell::new(None) };
}

/// The schedule of a non-blocking collective: None if a persistent start took it, else
/// given back to be started as a request of its own.
pub(crate) fn divert(req: CollRequest) -> Option<CollRequest> {
    CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some(slot) => {
            *slot = Some(req);
            None
        }
        None => Some(req),
    })
}

/// A persistent collective's arguments as the program gave them.
struct Captured<T>(T);

// SAFETY: the addresses are the program's buffers and arrays, which MPI keeps valid and
// unchanged until the persistent request is freed, whichever thread starts it.
unsafe impl<T> Send for Captured<T> {}

impl<T: Copy> Captured<T> {
    /// The arguments (taken through a method so that a closure captures the wrapper, not
    /// the raw pointers inside it).
    fn get(&self) -> T {
        self.0
    }
}

/// Make the persistent request whose starts build their schedule with `build` (a call of
/// a non-blocking collective's implementation).
fn persistent(
    call: &'static str,
    request: &mut MPI_Request,
    mut build: impl FnMut(&mut MPI_Request) -> MpiResult<()> + Send + 'static,
) -> MpiResult<()> {
    let r = h::runtime(call)?;
    let id = r.persistent_schedule(Box::new(move |_rt| {
        CAPTURE.with(|c| *c.borrow_mut() = Some(None));
        let mut unused = MPI_REQUEST_NULL;
        let built = build(&mut unused);
        let schedule = CAPTURE.with(|c| c.borrow_mut().take()).flatten();
        built?;
        let schedule = schedule.ok_or_else(|| {
            err(
                ErrorClass::Intern,
                format!("{call}: the collective made no schedule"),
            )
        })?;
        Ok(Box::new(schedule) as Box<dyn Schedule>)
    }))?;
    *request = h::request_handle(id, true);
    Ok(())
}

pub(crate) fn barrier_init(
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((comm,));
    persistent("MPI_Barrier_init", request, move |out| {
        let (comm,) = args.get();
        ibarrier(comm, out)
    })
}

pub(crate) fn bcast_init(
    buf: *mut c_void,
    count: c_int,
    dtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((buf, count, dtype, root, comm));
    persistent("MPI_Bcast_init", request, move |out| {
        let (buf, count, dtype, root, comm) = args.get();
        ibcast(buf, count, &h::dtype("dtype", dtype)?, root, comm, out)
    })
}

pub(crate) fn gather_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
    ));
    persistent("MPI_Gather_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) = args.get();
        igather(
            sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, out,
        )
    })
}

pub(crate) fn gatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm,
    ));
    persistent("MPI_Gatherv_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm) =
            args.get();
        igatherv(
            sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, out,
        )
    })
}

pub(crate) fn scatter_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
    ));
    persistent("MPI_Scatter_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) = args.get();
        iscatter(
            sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, out,
        )
    })
}

pub(crate) fn scatterv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm,
    ));
    persistent("MPI_Scatterv_init", request, move |out| {
        let (sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm) =
            args.get();
        iscatterv(
            sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, out,
        )
    })
}

pub(crate) fn allgather_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
    ));
    persistent("MPI_Allgather_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) = args.get();
        iallgather(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcount,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn allgatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
    ));
    persistent("MPI_Allgatherv_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm) =
            args.get();
        iallgatherv(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcounts,
            displs,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn alltoall_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
    ));
    persistent("MPI_Alltoall_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) = args.get();
        ialltoall(
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcount,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn alltoallv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
    ));
    persistent("MPI_Alltoallv_init", request, move |out| {
        let (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm) =
            args.get();
        ialltoallv(
            sendbuf,
            sendcounts,
            sdispls,
            sendtype,
            recvbuf,
            recvcounts,
            rdispls,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn alltoallw_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
    ));
    persistent("MPI_Alltoallw_init", request, move |out| {
        let (
            sendbuf,
            sendcounts,
            sdispls,
            sendtypes,
            recvbuf,
            recvcounts,
            rdispls,
            recvtypes,
            comm,
        ) = args.get();
        ialltoallw(
            sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
            out,
        )
    })
}

pub(crate) fn reduce_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((sendbuf, recvbuf, count, dtype, op, root, comm));
    persistent("MPI_Reduce_init", request, move |out| {
        let (sendbuf, recvbuf, count, dtype, op, root, comm) = args.get();
        ireduce(
            sendbuf,
            recvbuf,
            count,
            &h::dtype("dtype", dtype)?,
            h::op("op", op)?,
            root,
            comm,
            out,
        )
    })
}

pub(crate) fn allreduce_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: MPI_Datatype,
    op: MPI_Op,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((sendbuf, recvbuf, count, dtype, op, comm));
    persistent("MPI_Allreduce_init", request, move |out| {
        let (sendbuf, recvbuf, count, dtype, op, comm) = args.get();
        iallreduce(
            sendbuf,
            recvbuf,
            count,
            &h::dtype("dtype", dtype)?,
            h::op("op", op)?,
            comm,
            out,
        )
    })
}

pub(crate) fn reduce_scatter_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dtype: MPI_Datatype,
    op: MPI_Op,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((sendbuf, recvbuf, recvcounts, dtype, op, comm));
    persistent("MPI_Reduce_scatter_init", request, move |out| {
        let (sendbuf, recvbuf, recvcounts, dtype, op, comm) = args.get();
        ireduce_scatter(
            sendbuf,
            recvbuf,
            recvcounts,
            &h::dtype("dtype", dtype)?,
            h::op("op", op)?,
            comm,
            out,
        )
    })
}

pub(crate) fn reduce_scatter_block_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dtype: MPI_Datatype,
    op: MPI_Op,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((sendbuf, recvbuf, recvcount, dtype, op, comm));
    persistent("MPI_Reduce_scatter_block_init", request, move |out| {
        let (sendbuf, recvbuf, recvcount, dtype, op, comm) = args.get();
        ireduce_scatter_block(
            sendbuf,
            recvbuf,
            recvcount,
            &h::dtype("dtype", dtype)?,
            h::op("op", op)?,
            comm,
            out,
        )
    })
}

pub(crate) fn scan_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: MPI_Datatype,
    op: MPI_Op,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((sendbuf, recvbuf, count, dtype, op, comm));
    persistent("MPI_Scan_init", request, move |out| {
        let (sendbuf, recvbuf, count, dtype, op, comm) = args.get();
        iscan(
            sendbuf,
            recvbuf,
            count,
            &h::dtype("dtype", dtype)?,
            h::op("op", op)?,
            comm,
            out,
        )
    })
}

pub(crate) fn exscan_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dtype: MPI_Datatype,
    op: MPI_Op,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((sendbuf, recvbuf, count, dtype, op, comm));
    persistent("MPI_Exscan_init", request, move |out| {
        let (sendbuf, recvbuf, count, dtype, op, comm) = args.get();
        iexscan(
            sendbuf,
            recvbuf,
            count,
            &h::dtype("dtype", dtype)?,
            h::op("op", op)?,
            comm,
            out,
        )
    })
}

pub(crate) fn neighbor_allgather_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
    ));
    persistent("MPI_Neighbor_allgather_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) = args.get();
        ineighbor_allgather(
            sendbuf,
            sendcount,
            &h::dtype("sendtype", sendtype)?,
            recvbuf,
            recvcount,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn neighbor_allgatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
    ));
    persistent("MPI_Neighbor_allgatherv_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm) =
            args.get();
        ineighbor_allgatherv(
            sendbuf,
            sendcount,
            &h::dtype("sendtype", sendtype)?,
            recvbuf,
            recvcounts,
            displs,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn neighbor_alltoall_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
    ));
    persistent("MPI_Neighbor_alltoall_init", request, move |out| {
        let (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) = args.get();
        ineighbor_alltoall(
            sendbuf,
            sendcount,
            &h::dtype("sendtype", sendtype)?,
            recvbuf,
            recvcount,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn neighbor_alltoallv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
    ));
    persistent("MPI_Neighbor_alltoallv_init", request, move |out| {
        let (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm) =
            args.get();
        ineighbor_alltoallv(
            sendbuf,
            sendcounts,
            sdispls,
            &h::dtype("sendtype", sendtype)?,
            recvbuf,
            recvcounts,
            rdispls,
            &h::dtype("recvtype", recvtype)?,
            comm,
            out,
        )
    })
}

pub(crate) fn neighbor_alltoallw_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: CommId,
    _info: Option<InfoId>,
    request: &mut MPI_Request,
) -> MpiResult<()> {
    let args = Captured((
        sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
    ));
    persistent("MPI_Neighbor_alltoallw_init", request, move |out| {
        let (
            sendbuf,
            sendcounts,
            sdispls,
            sendtypes,
            recvbuf,
            recvcounts,
            rdispls,
            recvtypes,
            comm,
        ) = args.get();
        ineighbor_alltoallw(
            sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm,
            out,
        )
    })
}
