//! Independent access: the memory side (packing the program's buffer into the view's data
//! stream in the file's representation, and back), and the file side (the stream's file
//! ranges read or written one by one, or by data sieving: one large read of the span
//! that holds several small pieces, and for writes a read-modify-write of that span under
//! a record lock, so that concurrent sieving writers do not undo each other).

use std::borrow::Cow;

use tsunagi_core::datatype::{pack_external32, unpack_external32, TypeRef};
use tsunagi_core::{ErrorClass, MpiError, MpiResult};

use crate::hints::{Hints, Switch};
use crate::posix::{os_err, pread_full, pwrite_full, RangeLock};
use crate::view::{Datarep, View};
use crate::File;

/// The data stream bytes of `count` elements of `dtype` at `buf`, in the view's
/// representation: the program's own bytes when they are contiguous and native (no copy),
/// else packed.
///
/// # Safety
/// `buf` holds `count` elements of `dtype`, unmodified while the result lives.
pub(crate) unsafe fn from_memory<'a>(
    call: &str,
    view: &View,
    buf: *const u8,
    count: usize,
    dtype: &TypeRef,
) -> MpiResult<Cow<'a, [u8]>> {
    match &view.datarep {
        Datarep::Native => match dtype.contiguous_offset() {
            Some(off) if count > 0 && dtype.size() > 0 => {
                // SAFETY: the `count` elements are exactly these bytes (contiguous_offset)
                // and the caller keeps them valid and unmodified while the slice lives.
                Ok(Cow::Borrowed(unsafe {
                    std::slice::from_raw_parts(buf.offset(off), count * dtype.size())
                }))
            }
            // SAFETY: forwarded contract.
            _ => Ok(Cow::Owned(unsafe { dtype.pack(buf, count) })),
        },
        Datarep::External32 => {
            let mut out = Vec::with_capacity(dtype.size() * count);
            // SAFETY: forwarded contract.
            unsafe { pack_external32(dtype, buf, count, &mut out)? };
            same_size(call, &out, dtype.size() * count)?;
            Ok(Cow::Owned(out))
        }
        Datarep::User(u) => {
            let mut out = vec![0u8; dtype.size() * count];
            // SAFETY: forwarded contract.
            match unsafe { u.write(buf, dtype, count, &mut out) } {
                Some(r) => r?,
                // SAFETY: forwarded contract.
                None => out = unsafe { dtype.pack(buf, count) },
            }
            Ok(Cow::Owned(out))
        }
    }
}

fn same_size(call: &str, data: &[u8], native: usize) -> MpiResult<()> {
    if data.len() != native {
        return Err(MpiError::new(
            ErrorClass::UnsupportedDatarep,
            format!(
                "{call}: the data takes {} bytes in external32 but {native} in memory (only \
                 types of equal size are supported)",
                data.len()
            ),
        ));
    }
    Ok(())
}

/// Store the stream bytes `data` (whole etypes, possibly fewer than `count` elements) into
/// `count` elements of `dtype` at `buf`.
///
/// # Safety
/// `buf` has room for `count` elements of `dtype`.
pub(crate) unsafe fn to_memory(
    call: &str,
    view: &View,
    data: &[u8],
    buf: *mut u8,
    count: usize,
    dtype: &TypeRef,
) -> MpiResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    match &view.datarep {
        // SAFETY: forwarded contract; `data` is at most count * size bytes.
        Datarep::Native => unsafe { dtype.unpack_range(buf, count, 0, data) },
        Datarep::External32 => {
            let whole = data.len() / dtype.size().max(1);
            // SAFETY: forwarded contract; whole <= count.
            let used = unsafe { unpack_external32(dtype, data, buf, whole)? };
            let _ = (call, used);
        }
        Datarep::User(u) => {
            let whole = data.len() / dtype.size().max(1);
            // SAFETY: forwarded contract.
            match unsafe { u.read(buf, dtype, whole, data) } {
                Some(r) => r?,
                // SAFETY: forwarded contract.
                None => unsafe { dtype.unpack_range(buf, count, 0, data) },
            }
        }
    }
    Ok(())
}

/// Pieces at least this large (on average) are accessed one by one in automatic mode: one
/// request each costs less than moving the holes between them.
const SIEVE_PIECE_LIMIT: u64 = 32 << 10;

/// Whether to sieve an access of `pieces` file ranges spanning `span` bytes holding
/// `bytes` of data: automatic sieves when there are several small pieces and the holes are
/// no larger than the data (reading them costs less than the extra requests).
fn sieve(sw: Switch, pieces: usize, span: u64, bytes: u64) -> bool {
    match sw {
        Switch::Disable => false,
        Switch::Enable => pieces > 1,
        Switch::Automatic => {
            pieces > 1 && bytes / (pieces as u64) < SIEVE_PIECE_LIMIT && span <= 2 * bytes.max(1)
        }
    }
}

/// Group consecutive runs whose span stays within `limit` bytes (stream order; the runs
/// of a monotonic filetype ascend). Returns index ranges.
fn windows(runs: &[(u64, usize)], limit: u64) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < runs.len() {
        let start = runs[i].0;
        let mut j = i + 1;
        while j < runs.len() {
            let (o, l) = runs[j];
            if o < runs[j - 1].0 || o + l as u64 - start > limit {
                break;
            }
            j += 1;
        }
        out.push(i..j);
        i = j;
    }
    out
}

fn span(runs: &[(u64, usize)]) -> (u64, u64) {
    let lo = runs.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = runs.iter().map(|r| r.0 + r.1 as u64).max().unwrap_or(0);
    (lo, hi)
}

/// Independent read of stream bytes `[pos, pos + out.len())`: the bytes read (fewer at
/// the end of the file: up to the first piece the file does not hold entirely).
pub(crate) fn read(
    f: &File,
    view: &View,
    hints: &Hints,
    atomic: bool,
    pos: u64,
    out: &mut [u8],
) -> MpiResult<usize> {
    let runs = view.runs(pos, out.len());
    read_runs(f, hints, atomic, &runs, out)
}

pub(crate) fn read_runs(
    f: &File,
    hints: &Hints,
    atomic: bool,
    runs: &[(u64, usize)],
    out: &mut [u8],
) -> MpiResult<usize> {
    let file = f.os_file();
    let call = "reading the file";
    let _lock = if atomic && !runs.is_empty() {
        let (lo, hi) = span(runs);
        Some(RangeLock::new(file, lo, hi - lo, false).map_err(|e| os_err(call, e))?)
    } else {
        None
    };
    let mut done = 0usize;
    for w in windows(runs, hints.ind_rd_buffer_size as u64) {
        let rs = &runs[w];
        let (lo, hi) = span(rs);
        let bytes: u64 = rs.iter().map(|r| r.1 as u64).sum();
        if sieve(hints.ds_read, rs.len(), hi - lo, bytes) {
            let mut stage = vec![0u8; (hi - lo) as usize];
            let got = pread_full(file, &mut stage, lo).map_err(|e| os_err(call, e))? as u64;
            for &(o, l) in rs {
                let have = (lo + got).saturating_sub(o).min(l as u64) as usize;
                let s = (o - lo) as usize;
                out[done..done + have].copy_from_slice(&stage[s..s + have]);
                done += have;
                if have < l {
                    return Ok(done);
                }
            }
        } else {
            for &(o, l) in rs {
                let got =
                    pread_full(file, &mut out[done..done + l], o).map_err(|e| os_err(call, e))?;
                done += got;
                if got < l {
                    return Ok(done);
                }
            }
        }
    }
    Ok(done)
}

/// Independent write of `data` at stream position `pos`.
pub(crate) fn write(
    f: &File,
    view: &View,
    hints: &Hints,
    atomic: bool,
    pos: u64,
    data: &[u8],
) -> MpiResult<()> {
    let runs = view.runs(pos, data.len());
    write_runs(f, hints, atomic, &runs, data)
}

pub(crate) fn write_runs(
    f: &File,
    hints: &Hints,
    atomic: bool,
    runs: &[(u64, usize)],
    data: &[u8],
) -> MpiResult<()> {
    let file = f.os_file();
    let call = "writing the file";
    let lock =
        |lo: u64, hi: u64| RangeLock::new(file, lo, hi - lo, true).map_err(|e| os_err(call, e));
    // Atomic mode: the whole access under one exclusive lock.
    let _whole = if atomic && !runs.is_empty() {
        let (lo, hi) = span(runs);
        Some(lock(lo, hi)?)
    } else {
        None
    };
    let mut done = 0usize;
    for w in windows(runs, hints.ind_wr_buffer_size as u64) {
        let rs = &runs[w];
        let (lo, hi) = span(rs);
        let bytes: u64 = rs.iter().map(|r| r.1 as u64).sum();
        if sieve(hints.ds_write, rs.len(), hi - lo, bytes) {
            // Read-modify-write of the span; the holes keep what others wrote, provided
            // they write under the same lock (every sieving writer does; atomic mode too).
            let _l = if atomic { None } else { Some(lock(lo, hi)?) };
            let mut stage = vec![0u8; (hi - lo) as usize];
            pread_full(file, &mut stage, lo).map_err(|e| os_err(call, e))?;
            for &(o, l) in rs {
                let s = (o - lo) as usize;
                stage[s..s + l].copy_from_slice(&data[done..done + l]);
                done += l;
            }
            pwrite_full(file, &stage, lo).map_err(|e| os_err(call, e))?;
        } else {
            for &(o, l) in rs {
                // Under a lock when others may sieve over these bytes.
                let _l = if !atomic && hints.ds_write != Switch::Disable {
                    Some(lock(o, o + l as u64)?)
                } else {
                    None
                };
                pwrite_full(file, &data[done..done + l], o).map_err(|e| os_err(call, e))?;
                done += l;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_split_on_span_and_descending_offsets() {
        let runs = [(0, 4), (8, 4), (100, 4), (104, 4), (50, 2)];
        assert_eq!(windows(&runs, 16), vec![0..2, 2..4, 4..5]);
        assert_eq!(windows(&runs, 1000), vec![0..4, 4..5]);
    }

    #[test]
    fn automatic_sieving_wants_small_holes() {
        assert!(sieve(Switch::Automatic, 4, 64, 32));
        assert!(!sieve(Switch::Automatic, 4, 640, 32));
        assert!(
            !sieve(Switch::Automatic, 2, 3 << 20, 2 << 20),
            "large pieces go one by one"
        );
        assert!(!sieve(Switch::Automatic, 1, 32, 32));
        assert!(sieve(Switch::Enable, 2, 6400, 32));
        assert!(!sieve(Switch::Disable, 4, 64, 32));
    }
}
