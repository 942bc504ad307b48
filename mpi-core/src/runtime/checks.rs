//! Argument checks shared by the MPI calls: each error names the call and the argument.

use super::*;

impl Runtime {
    pub(super) fn check_comm<'e>(
        &self,
        e: &'e Engine,
        call: &str,
        comm: CommId,
    ) -> MpiResult<&'e CommData> {
        e.comms().get(comm).ok_or_else(|| {
            MpiError::new(
                ErrorClass::Comm,
                format!(
                    "{call}: invalid communicator (handle {} is not a live communicator)",
                    comm.0
                ),
            )
        })
    }

    pub(super) fn check_type(call: &str, dtype: &TypeRef) -> MpiResult<()> {
        if !dtype.is_committed() {
            return Err(MpiError::new(
                ErrorClass::Type,
                format!("{call}: datatype {} is not committed", dtype.describe()),
            ));
        }
        Ok(())
    }

    pub(super) fn check_count(call: &str, count: i64) -> MpiResult<usize> {
        if count < 0 {
            return Err(MpiError::new(
                ErrorClass::Count,
                format!("{call}: count {count} is negative"),
            ));
        }
        Ok(count as usize)
    }

    pub(super) fn check_buf(
        call: &str,
        buf: *const u8,
        count: usize,
        dtype: &TypeRef,
    ) -> MpiResult<()> {
        if buf.is_null() && count > 0 && dtype.size() > 0 && dtype.true_lb() == 0 {
            return Err(MpiError::new(
                ErrorClass::Buffer,
                format!("{call}: buffer is NULL but count is {count}"),
            ));
        }
        Ok(())
    }

    pub(super) fn check_tag(call: &str, tag: i32, allow_any: bool) -> MpiResult<()> {
        let ub = tag_ub();
        if (allow_any && tag == ANY_TAG) || (0..=ub).contains(&tag) {
            return Ok(());
        }
        Err(MpiError::new(
            ErrorClass::Tag,
            format!("{call}: invalid tag {tag} (tags run from 0 to {ub})"),
        ))
    }

    pub(super) fn check_rank(
        call: &str,
        what: &str,
        rank: i32,
        size: usize,
        allow_any: bool,
    ) -> MpiResult<()> {
        if rank == PROC_NULL
            || (allow_any && rank == ANY_SOURCE)
            || (rank >= 0 && (rank as usize) < size)
        {
            return Ok(());
        }
        Err(MpiError::new(
            ErrorClass::Rank,
            format!("{call}: invalid {what} rank {rank} (communicator size {size})"),
        ))
    }
}
