//! Data access: every read and write family through [`File::read`] / [`File::write`]
//! (blocking) and [`File::iread`] / [`File::iwrite`] (non-blocking and split collective,
//! run by the file's I/O thread): the checks and positions fixed at the call, the memory
//! side (in place when contiguous and native), and the choice between two-phase I/O and
//! independent access.

use std::sync::Arc;

use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::{ErrorClass, MpiResult, ReqId, Status};

use crate::{access, err, twophase, worker, Datarep, File, Hints, Position, View};

impl File {
    /// Read `count` elements of `dtype` into `buf` from `at`; `collective` for the `_all`
    /// forms (every rank of the file calls it) and required for [`Position::Ordered`].
    ///
    /// # Safety
    /// `buf` has room for `count` elements of `dtype` (the contract of
    /// [`Datatype::unpack_range`]).
    pub unsafe fn read(
        &self,
        call: &str,
        at: Position,
        collective: bool,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
    ) -> MpiResult<Status> {
        if collective {
            // Collective accesses run in call order: the background ones first.
            self.quiesce()?;
        }
        self.check_readable(call)?;
        let acc = self.start_access(call, at, count, dtype)?;
        let pos = self.resolve(call, &acc, collective)?;
        // SAFETY: forwarded contract.
        let got = unsafe { self.read_into(call, &acc, collective, pos, buf, count, dtype)? };
        if at == Position::Individual {
            self.state().pos += got as u64 / acc.view.esize();
        }
        Ok(Status {
            bytes: got,
            ..Status::EMPTY
        })
    }

    /// Write `count` elements of `dtype` from `buf` at `at` (see [`File::read`]).
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype` (the contract of [`Datatype::pack_range`]).
    pub unsafe fn write(
        &self,
        call: &str,
        at: Position,
        collective: bool,
        buf: *const u8,
        count: usize,
        dtype: &TypeRef,
    ) -> MpiResult<Status> {
        if collective {
            self.quiesce()?;
        }
        self.check_writable(call)?;
        let acc = self.start_access(call, at, count, dtype)?;
        let pos = self.resolve(call, &acc, collective)?;
        // SAFETY: forwarded contract.
        let data = unsafe { access::from_memory(call, &acc.view, buf, count, dtype)? };
        debug_assert_eq!(data.len(), acc.nbytes);
        self.write_from(call, &acc, collective, pos, &data)?;
        if at == Position::Individual {
            self.state().pos += acc.n_etypes;
        }
        Ok(Status {
            bytes: acc.nbytes,
            ..Status::EMPTY
        })
    }

    /// Start a non-blocking read (MPI_File_iread*, and the split collectives' begin): the
    /// positions are taken now (the individual pointer moves past the whole request, as
    /// MPI says), the access itself runs on the file's I/O thread, and the request
    /// completes when it is done.
    ///
    /// # Safety
    /// `buf` has room for `count` elements of `dtype` and is neither read nor written by
    /// the program until the request completes (MPI's rule for non-blocking accesses).
    pub unsafe fn iread(
        self: &Arc<Self>,
        call: &'static str,
        at: Position,
        collective: bool,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
    ) -> MpiResult<ReqId> {
        self.check_readable(call)?;
        let acc = self.start_access(call, at, count, dtype)?;
        if at == Position::Individual {
            self.state().pos += acc.n_etypes;
        }
        let target = worker::SendPtr(buf);
        let dtype = dtype.clone();
        self.submit(move |f| {
            let buf = target;
            let pos = f.resolve(call, &acc, collective)?;
            // SAFETY: the caller's contract holds until the request completes, which is
            // after this job.
            let got = unsafe { f.read_into(call, &acc, collective, pos, buf.0, count, &dtype)? };
            Ok(Status {
                bytes: got,
                ..Status::EMPTY
            })
        })
    }

    /// Start a non-blocking write (see [`File::iread`]). Data that is not contiguous in
    /// memory (or is converted) is packed now; contiguous native data is written from the
    /// program's buffer.
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype` and is not modified by the program until
    /// the request completes.
    pub unsafe fn iwrite(
        self: &Arc<Self>,
        call: &'static str,
        at: Position,
        collective: bool,
        buf: *const u8,
        count: usize,
        dtype: &TypeRef,
    ) -> MpiResult<ReqId> {
        self.check_writable(call)?;
        let acc = self.start_access(call, at, count, dtype)?;
        if at == Position::Individual {
            self.state().pos += acc.n_etypes;
        }
        // SAFETY: forwarded contract.
        let data = match unsafe { access::from_memory(call, &acc.view, buf, count, dtype)? } {
            std::borrow::Cow::Borrowed(s) => {
                worker::Bytes::Program(worker::SendPtr(s.as_ptr() as *mut u8), s.len())
            }
            std::borrow::Cow::Owned(v) => worker::Bytes::Packed(v),
        };
        self.submit(move |f| {
            let data = data;
            let pos = f.resolve(call, &acc, collective)?;
            // SAFETY: the program's buffer stays valid and unmodified until the request
            // completes (the caller's contract), which is after this job.
            let bytes = unsafe { data.as_slice() };
            f.write_from(call, &acc, collective, pos, bytes)?;
            Ok(Status {
                bytes: acc.nbytes,
                ..Status::EMPTY
            })
        })
    }

    /// Read stream bytes `[pos, pos + nbytes)` of the access into `count` elements of
    /// `dtype` at `buf`: the bytes read. Native data contiguous in memory is read in
    /// place; anything else through a staging buffer.
    ///
    /// # Safety
    /// `buf` has room for `count` elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn read_into(
        &self,
        call: &str,
        acc: &Access,
        collective: bool,
        pos: u64,
        buf: *mut u8,
        count: usize,
        dtype: &TypeRef,
    ) -> MpiResult<usize> {
        let in_place = matches!(acc.view.datarep, Datarep::Native)
            .then(|| dtype.contiguous_offset())
            .flatten();
        let mut staged;
        let data: &mut [u8] = match in_place {
            // SAFETY: the `count` elements are exactly these bytes (contiguous_offset), and
            // `buf` has room for them (caller contract).
            Some(off) if acc.nbytes > 0 => unsafe {
                std::slice::from_raw_parts_mut(buf.offset(off), acc.nbytes)
            },
            _ => {
                staged = vec![0u8; acc.nbytes];
                &mut staged
            }
        };
        let got = if collective && !acc.atomic {
            twophase::read_all(self, call, &acc.view, &acc.hints, pos, data)?
        } else {
            if collective {
                crate::stats::count(crate::stats::Dir::Read, twophase::Route::Atomic, false);
            }
            access::read(self, &acc.view, &acc.hints, acc.atomic, pos, data)?
        };
        // A short read (end of file) delivers whole etypes only.
        let got = got - got % acc.view.esize() as usize;
        if in_place.is_none() || acc.nbytes == 0 {
            // SAFETY: forwarded contract.
            unsafe { access::to_memory(call, &acc.view, &data[..got], buf, count, dtype)? };
        }
        Ok(got)
    }

    fn write_from(
        &self,
        call: &str,
        acc: &Access,
        collective: bool,
        pos: u64,
        data: &[u8],
    ) -> MpiResult<()> {
        if collective && !acc.atomic {
            twophase::write_all(self, call, &acc.view, &acc.hints, pos, data)
        } else {
            if collective {
                crate::stats::count(crate::stats::Dir::Write, twophase::Route::Atomic, false);
            }
            access::write(self, &acc.view, &acc.hints, acc.atomic, pos, data)
        }
    }

    /// Common checks of an access and its position, taken now: an explicit offset, the
    /// individual pointer, or the shared one (moved now: its update must be atomic).
    /// Ordered positions need every rank, so [`File::resolve`] takes them when the
    /// access runs.
    fn start_access(
        &self,
        call: &str,
        at: Position,
        count: usize,
        dtype: &TypeRef,
    ) -> MpiResult<Access> {
        if !dtype.is_committed() {
            return Err(err(
                ErrorClass::Type,
                format!("{call}: the datatype is not committed"),
            ));
        }
        if matches!(at, Position::At(_) | Position::Individual) {
            self.check_not_sequential(call)?;
        }
        let (view, atomic, hints, cur) = {
            let s = self.state();
            (s.view.clone(), s.atomic, s.hints.clone(), s.pos)
        };
        let nbytes = count.checked_mul(dtype.size()).ok_or_else(|| {
            err(
                ErrorClass::Count,
                format!("{call}: count {count} is too large"),
            )
        })?;
        let esize = view.esize();
        if !(nbytes as u64).is_multiple_of(esize) {
            return Err(err(
                ErrorClass::Arg,
                format!(
                    "{call}: {nbytes} bytes is not a whole number of etypes ({esize} bytes each)"
                ),
            ));
        }
        let n_etypes = nbytes as u64 / esize;
        let offset = match at {
            Position::At(o) => Some(o),
            Position::Individual => Some(cur),
            Position::Shared => Some(self.shared.fetch_add(n_etypes)?),
            Position::Ordered => None,
        };
        if let Some(o) = offset {
            o.checked_mul(esize)
                .ok_or_else(|| err(ErrorClass::Arg, format!("{call}: offset {o} is too large")))?;
        }
        Ok(Access {
            view,
            atomic,
            hints,
            nbytes,
            n_etypes,
            offset,
        })
    }

    /// The stream position (bytes) of an access; ordered ones agree on theirs here
    /// (collective).
    fn resolve(&self, call: &str, acc: &Access, collective: bool) -> MpiResult<u64> {
        let offset = match acc.offset {
            Some(o) => o,
            None => {
                debug_assert!(collective);
                self.ordered_offset(call, acc.n_etypes)?
            }
        };
        offset.checked_mul(acc.view.esize()).ok_or_else(|| {
            err(
                ErrorClass::Arg,
                format!("{call}: offset {offset} is too large"),
            )
        })
    }

    /// Ordered access: the ranks' pieces follow each other in rank order from the shared
    /// pointer, which moves past all of them; rank 0 updates it, then says where it was.
    fn ordered_offset(&self, call: &str, n: u64) -> MpiResult<u64> {
        let counts = self.rt.allgather_bytes(call, self.comm, &n.to_le_bytes())?;
        let counts: Vec<u64> = counts
            .iter()
            .map(|c| u64::from_le_bytes(c[..8].try_into().expect("8 bytes")))
            .collect();
        let total: u64 = counts.iter().sum();
        let before: u64 = counts[..self.rank].iter().sum();
        let mut base = [0u8; 9];
        if self.rank == 0 {
            match self.shared.fetch_add(total) {
                Ok(b) => base[..8].copy_from_slice(&b.to_le_bytes()),
                Err(e) => base[8] = e.class as u8,
            }
        }
        let byte = Datatype::builtin(Builtin::Byte);
        // SAFETY: `base` is 9 bytes, the count given.
        unsafe { tsunagi_collectives::bcast(self.rt, base.as_mut_ptr(), 9, &byte, 0, self.comm)? };
        if base[8] != 0 {
            let class = ErrorClass::from_code(base[8] as i32).unwrap_or(ErrorClass::Io);
            return Err(err(
                class,
                format!("{call}: updating the shared file pointer failed"),
            ));
        }
        Ok(u64::from_le_bytes(base[..8].try_into().expect("8 bytes")) + before)
    }
}

/// An access as its call fixed it.
struct Access {
    view: View,
    atomic: bool,
    hints: Hints,
    nbytes: usize,
    n_etypes: u64,
    /// Etypes from the view's start; None for an ordered access (taken when it runs).
    offset: Option<u64>,
}
