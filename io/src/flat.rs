//! Every rank's view, flattened once at `MPI_File_set_view` and all-gathered there, so
//! that a collective access needs to learn only each rank's stream position and length
//! (a fixed-size all-gather) to know every rank's file ranges: the aggregators compute
//! what each rank accesses in their domains themselves, and the all-to-all of range
//! lists (two more synchronisations of every rank per access) is gone.
//!
//! A flattened view is one filetype tile as `(offset, len)` runs in stream order (what
//! [`View::runs`] walks over the first tile); tile `k` is the same runs moved by
//! `k * extent`. Views whose tile is larger than [`MAX_TILE_BYTES`] or has more than
//! [`MAX_RUNS`] runs are not flattened (the access exchanges its ranges as before).

use crate::view::View;

/// Largest filetype (bytes of data per tile) flattened.
pub const MAX_TILE_BYTES: usize = 16 << 20;
/// Most runs per tile flattened (16 bytes each in the all-gather of `set_view`).
pub const MAX_RUNS: usize = 1 << 16;

/// One rank's view as runs of one filetype tile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlatView {
    disp: u64,
    extent: u64,
    /// Stream bytes per tile (the filetype's size; > 0).
    size: u64,
    /// `(offset in the tile, len)` in stream order.
    runs: Vec<(u64, u64)>,
    /// The stream position (within a tile) where each run starts.
    starts: Vec<u64>,
}

fn u64_at(b: &[u8], k: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(8 * k..8 * k + 8)?.try_into().ok()?,
    ))
}

impl FlatView {
    /// The view flattened, or None when it is too large (or its filetype holds no data).
    pub fn of(view: &View) -> Option<FlatView> {
        let size = view.filetype.size();
        let extent = view.filetype.extent();
        if size == 0 || size > MAX_TILE_BYTES || extent <= 0 {
            return None;
        }
        let mut runs = Vec::new();
        let mut too_many = false;
        view.filetype.walk_stream(0, size, |mem, n| {
            if runs.len() == MAX_RUNS || mem < 0 {
                too_many = true;
            } else {
                runs.push((mem as u64, n as u64));
            }
        });
        if too_many {
            return None;
        }
        FlatView::new(view.disp, extent as u64, runs)
    }

    fn new(disp: u64, extent: u64, runs: Vec<(u64, u64)>) -> Option<FlatView> {
        let mut starts = Vec::with_capacity(runs.len());
        let mut size = 0u64;
        for &(_, l) in &runs {
            if l == 0 {
                return None;
            }
            starts.push(size);
            size = size.checked_add(l)?;
        }
        (size > 0 && extent > 0).then_some(FlatView {
            disp,
            extent,
            size,
            runs,
            starts,
        })
    }

    /// The wire form: disp, extent, run count, then the runs (little-endian u64s).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.disp, self.extent, self.runs.len() as u64] {
            out.extend(v.to_le_bytes());
        }
        for &(o, l) in &self.runs {
            out.extend(o.to_le_bytes());
            out.extend(l.to_le_bytes());
        }
    }

    /// Decode the wire form (None when malformed: wrong length, empty runs, a tile that
    /// does not fit).
    pub fn decode(b: &[u8]) -> Option<FlatView> {
        let (disp, extent, n) = (u64_at(b, 0)?, u64_at(b, 1)?, u64_at(b, 2)?);
        if n as usize > MAX_RUNS || b.len() != 24 + 16 * n as usize {
            return None;
        }
        let runs: Vec<(u64, u64)> = (0..n as usize)
            .map(|i| Some((u64_at(b, 3 + 2 * i)?, u64_at(b, 4 + 2 * i)?)))
            .collect::<Option<_>>()?;
        if runs.iter().any(|&(o, l)| o.checked_add(l).is_none()) {
            return None;
        }
        FlatView::new(disp, extent, runs)
    }

    /// The file ranges of stream bytes `[pos, pos + len)`, in stream order, adjacent
    /// ranges merged: what [`View::runs`] gives for the same view.
    pub fn runs(&self, pos: u64, len: usize) -> Vec<(u64, usize)> {
        let mut out: Vec<(u64, usize)> = Vec::new();
        let mut push = |off: u64, n: u64| {
            if let Some(last) = out.last_mut() {
                if last.0 + last.1 as u64 == off {
                    last.1 += n as usize;
                    return;
                }
            }
            out.push((off, n as usize));
        };
        let end = pos + len as u64;
        let mut at = pos;
        let mut tile = pos / self.size;
        // The run holding `at` within its tile.
        let within = pos % self.size;
        let mut i = self.starts.partition_point(|&s| s <= within) - 1;
        while at < end {
            let base = self.disp + tile * self.extent;
            let in_tile = at - tile * self.size;
            let (o, l) = self.runs[i];
            let skip = in_tile - self.starts[i];
            let n = (l - skip).min(end - at);
            push(base + o + skip, n);
            at += n;
            i += 1;
            if i == self.runs.len() {
                i = 0;
                tile += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Datarep;
    use std::sync::Arc;
    use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};

    fn view(disp: u64, ft: TypeRef) -> View {
        ft.commit();
        View {
            disp,
            etype: Datatype::builtin(Builtin::Double),
            filetype: ft,
            datarep: Datarep::Native,
        }
    }

    /// Flattened runs equal the view's own walk for every start and length tried.
    fn same_as_walk(v: &View) {
        let f = FlatView::of(v).expect("flattened");
        let mut wire = Vec::new();
        f.encode(&mut wire);
        assert_eq!(FlatView::decode(&wire).as_ref(), Some(&f));
        let size = v.filetype.size() as u64;
        for pos in (0..3 * size).step_by(8) {
            for len in [8usize, 24, size as usize, 2 * size as usize + 16] {
                assert_eq!(f.runs(pos, len), v.runs(pos, len), "pos {pos} len {len}");
            }
        }
    }

    #[test]
    fn flattened_views_give_the_walks_runs() {
        let d = Datatype::builtin(Builtin::Double);
        // A 3-D BT-IO block: 4x6x8 array of 5-double points, the block 4x3x4 at (0,3,4).
        let sub = Datatype::subarray(
            &[4, 6, 8, 5],
            &[4, 3, 4, 5],
            &[0, 3, 4, 0],
            tsunagi_core::datatype::Order::C,
            &d,
        )
        .unwrap();
        same_as_walk(&view(40, Arc::new(sub)));
        // A strided vector with a resized extent (holes between tiles).
        let vec = Arc::new(Datatype::vector(3, 2, 5, &d).unwrap());
        vec.commit();
        same_as_walk(&view(
            0,
            Arc::new(Datatype::resized(&vec, 16, 160).unwrap()),
        ));
        // Contiguous: one run, tiles merge.
        same_as_walk(&view(8, Arc::new(Datatype::contiguous(4, &d).unwrap())));
    }

    #[test]
    fn malformed_wire_forms_are_refused() {
        let f = FlatView::new(0, 64, vec![(0, 8), (32, 8)]).unwrap();
        let mut wire = Vec::new();
        f.encode(&mut wire);
        assert!(FlatView::decode(&wire[..wire.len() - 1]).is_none(), "short");
        let mut zero = wire.clone();
        zero[48..56].copy_from_slice(&0u64.to_le_bytes());
        assert!(FlatView::decode(&zero).is_none(), "an empty run");
        let mut huge = wire.clone();
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(FlatView::decode(&huge).is_none(), "a count past the bytes");
        assert!(FlatView::decode(&[]).is_none());
        assert_eq!(FlatView::decode(&wire), Some(f));
    }
}
