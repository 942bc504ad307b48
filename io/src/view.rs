//! A file view: displacement, etype, filetype and data representation. The view's data
//! stream (the bytes the filetype selects, tiled from the displacement) maps to file
//! offsets by walking the filetype's layout over just the range accessed
//! ([`tsunagi_core::datatype::Datatype::walk_stream`]); the file's type map is never built.

use std::sync::Arc;

use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::{ErrorClass, MpiError, MpiResult};

/// How data is laid out in the file.
#[derive(Clone)]
pub enum Datarep {
    /// Memory bytes as they are ("native"; "internal" is the same here).
    Native,
    /// MPI's portable big-endian representation.
    External32,
    /// A representation the program registered with MPI_Register_datarep.
    User(Arc<dyn UserDatarep>),
}

impl Datarep {
    pub fn name(&self) -> String {
        match self {
            Datarep::Native => "native".into(),
            Datarep::External32 => "external32".into(),
            Datarep::User(u) => u.name(),
        }
    }
}

/// A data representation registered by the program (MPI_Register_datarep): the C layer
/// wraps the program's conversion functions in this.
pub trait UserDatarep: Send + Sync {
    fn name(&self) -> String;
    /// Bytes one element of `dtype` (a predefined type) takes in the file.
    fn file_extent(&self, dtype: &TypeRef) -> MpiResult<usize>;
    /// Convert `count` elements of `dtype` from file bytes `file` into memory at `buf`
    /// (None: the program gave no read conversion, so the bytes are native).
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype`.
    unsafe fn read(
        &self,
        buf: *mut u8,
        dtype: &TypeRef,
        count: usize,
        file: &[u8],
    ) -> Option<MpiResult<()>>;
    /// Convert `count` elements of `dtype` at `buf` into file bytes `file`.
    ///
    /// # Safety
    /// `buf` holds `count` elements of `dtype`.
    unsafe fn write(
        &self,
        buf: *const u8,
        dtype: &TypeRef,
        count: usize,
        file: &mut [u8],
    ) -> Option<MpiResult<()>>;
}

/// A view as MPI_File_set_view gives it.
#[derive(Clone)]
pub struct View {
    /// Byte displacement of the first filetype tile.
    pub disp: u64,
    pub etype: TypeRef,
    pub filetype: TypeRef,
    pub datarep: Datarep,
}

impl View {
    /// The default view: bytes from offset 0, native.
    pub fn bytes() -> View {
        let b = Datatype::builtin(Builtin::Byte);
        View {
            disp: 0,
            etype: b.clone(),
            filetype: b,
            datarep: Datarep::Native,
        }
    }

    /// Check a view's types (MPI 4.0 §14.3): committed, a filetype made of whole etypes,
    /// non-negative displacements.
    pub fn check(call: &str, etype: &TypeRef, filetype: &TypeRef) -> MpiResult<()> {
        for (name, t) in [("etype", etype), ("filetype", filetype)] {
            if !t.is_committed() {
                return Err(MpiError::new(
                    ErrorClass::Type,
                    format!("{call}: {name} is not committed"),
                ));
            }
        }
        if etype.size() == 0 {
            return Err(MpiError::new(
                ErrorClass::Type,
                format!("{call}: etype has size 0"),
            ));
        }
        if !filetype.size().is_multiple_of(etype.size()) {
            return Err(MpiError::new(
                ErrorClass::Type,
                format!(
                    "{call}: the filetype's size ({}) is not a multiple of the etype's ({})",
                    filetype.size(),
                    etype.size()
                ),
            ));
        }
        if filetype.true_lb() < 0 || filetype.lb() < 0 || filetype.extent() <= 0 {
            return Err(MpiError::new(
                ErrorClass::Type,
                format!("{call}: the filetype has a negative displacement or no extent"),
            ));
        }
        Ok(())
    }

    /// Size of an etype in the data stream.
    pub fn esize(&self) -> u64 {
        self.etype.size() as u64
    }

    /// File byte ranges `(offset, len)` holding the stream bytes `[pos, pos + len)`, in
    /// stream order (adjacent ranges merged).
    pub fn runs(&self, pos: u64, len: usize) -> Vec<(u64, usize)> {
        let mut out: Vec<(u64, usize)> = Vec::new();
        self.filetype.walk_stream(pos as usize, len, |mem, n| {
            let off = self.disp + mem as u64;
            if let Some(last) = out.last_mut() {
                if last.0 + last.1 as u64 == off {
                    last.1 += n;
                    return;
                }
            }
            out.push((off, n));
        });
        out
    }

    /// The file offset of stream byte `pos` (MPI_File_get_byte_offset).
    pub fn byte_offset(&self, pos: u64) -> u64 {
        let mut at = None;
        self.filetype.walk_stream(pos as usize, 1, |mem, _| {
            at.get_or_insert(mem);
        });
        self.disp + at.unwrap_or(0) as u64
    }

    /// Stream bytes that lie before file offset `eof` (where MPI_SEEK_END counts from).
    pub fn stream_before(&self, eof: u64) -> u64 {
        if eof <= self.disp {
            return 0;
        }
        let rel = eof - self.disp;
        let ext = self.filetype.extent() as u64;
        let size = self.filetype.size() as u64;
        // Whole tiles end at `extent` at the latest (true extent within lb..ub).
        let tiles = rel / ext;
        let mut pos = tiles * size;
        let mut acc = 0u64;
        self.filetype
            .walk_stream(pos as usize, size as usize, |mem, n| {
                let off = self.disp + mem as u64;
                if off < eof {
                    acc += (eof - off).min(n as u64);
                }
            });
        pos += acc;
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> TypeRef {
        Datatype::builtin(Builtin::Int32)
    }

    #[test]
    fn a_vector_filetype_maps_to_strided_runs() {
        // Two ints out of every four, from byte 100.
        let ft = Arc::new(Datatype::vector(1, 2, 4, &int()).unwrap());
        let ft = Arc::new(Datatype::resized(&ft, 0, 16).unwrap());
        ft.commit();
        let v = View {
            disp: 100,
            etype: int(),
            filetype: ft,
            datarep: Datarep::Native,
        };
        // Stream bytes 4..28: the second int of tile 0, both of tiles 1 and 2, one of 3.
        assert_eq!(v.runs(4, 24), vec![(104, 4), (116, 8), (132, 8), (148, 4)]);
        assert_eq!(v.byte_offset(8), 116);
        assert_eq!(v.stream_before(100), 0);
        assert_eq!(v.stream_before(106), 6);
        assert_eq!(v.stream_before(120), 12);
        assert_eq!(v.stream_before(132), 16);
    }

    #[test]
    fn bad_filetypes_are_refused() {
        let d = Datatype::builtin(Builtin::Double);
        let c3 = Arc::new(Datatype::contiguous(3, &Datatype::builtin(Builtin::Byte)).unwrap());
        c3.commit();
        assert_eq!(
            View::check("t", &d, &c3).unwrap_err().class,
            ErrorClass::Type
        );
        let unc = Arc::new(Datatype::contiguous(2, &d).unwrap());
        assert_eq!(
            View::check("t", &d, &unc).unwrap_err().class,
            ErrorClass::Type
        );
        unc.commit();
        View::check("t", &d, &unc).unwrap();
    }
}
