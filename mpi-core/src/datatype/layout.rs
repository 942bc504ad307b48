//! The flattened type map of one datatype element, and the walk over a packed stream.
//!
//! A type map is kept as a list of [`Block`]s in type-map order. A block is a regular
//! pattern of equal byte runs (`count` runs of `len` bytes, `stride` apart), so strided
//! types (vectors, subarray rows, contiguous repeats) stay a handful of blocks however
//! many elements they have; irregular maps degrade gracefully to one block per run.
//! Adjacent runs are merged on insertion. Each block knows where its bytes start in the
//! packed stream, so seeking to a stream offset is a binary search (O(log blocks)).

/// `count` byte runs of `len` bytes at `off + i*stride` (i in 0..count), relative to
/// the start of an element. Invariants: `len > 0`, `count > 0`; `count == 1` implies
/// `stride == 0`; `count > 1` implies `stride != len` (that case is one longer run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub off: isize,
    pub len: usize,
    pub count: usize,
    pub stride: isize,
}

impl Block {
    /// A block with the invariants restored (contiguous repeats become one run).
    fn normalized(mut self) -> Block {
        if self.count == 1 {
            self.stride = 0;
        } else if self.stride == self.len as isize {
            self.len *= self.count;
            self.count = 1;
            self.stride = 0;
        }
        self
    }

    /// Offset just past the last run.
    fn end(&self) -> isize {
        self.off + (self.count as isize - 1) * self.stride + self.len as isize
    }

    /// One block equivalent to `n` copies of `self`, `stride` apart, if there is one.
    fn replicate(self, n: usize, stride: isize) -> Option<Block> {
        if n == 1 {
            Some(self)
        } else if self.count == 1 {
            Some(
                Block {
                    off: self.off,
                    len: self.len,
                    count: n,
                    stride,
                }
                .normalized(),
            )
        } else if self.stride * self.count as isize == stride {
            Some(Block {
                count: self.count * n,
                ..self
            })
        } else {
            None
        }
    }

    fn shifted(self, by: isize) -> Block {
        Block {
            off: self.off + by,
            ..self
        }
    }
}

/// Collects blocks, merging each new one into the previous where the result is still
/// one regular pattern.
#[derive(Default)]
pub(crate) struct LayoutBuilder {
    blocks: Vec<Block>,
}

impl LayoutBuilder {
    pub fn push(&mut self, b: Block) {
        if b.len == 0 || b.count == 0 {
            return;
        }
        let mut b = b.normalized();
        // A contiguous merge produces a longer run that may now continue the pattern of
        // the block before it, so it is pushed again (each round removes a block, so
        // this terminates; in practice it runs once or twice).
        loop {
            let Some(last) = self.blocks.last_mut() else {
                self.blocks.push(b);
                return;
            };
            let last_end = last.end();
            if b.count == 1 {
                if last.count == 1 {
                    if last_end == b.off {
                        b = Block {
                            off: last.off,
                            len: last.len + b.len,
                            count: 1,
                            stride: 0,
                        };
                        self.blocks.pop();
                        continue;
                    }
                    if last.len == b.len {
                        last.count = 2;
                        last.stride = b.off - last.off;
                        return;
                    }
                } else {
                    if b.len == last.len && b.off == last.off + last.count as isize * last.stride {
                        last.count += 1;
                        return;
                    }
                    if last_end == b.off {
                        // The new run continues the pattern's final run: split that run
                        // off and grow it, so contiguous bytes stay one run.
                        last.count -= 1;
                        b = Block {
                            off: last.off + last.count as isize * last.stride,
                            len: last.len + b.len,
                            count: 1,
                            stride: 0,
                        };
                        *last = last.normalized();
                        continue;
                    }
                }
            } else if last.len == b.len
                && (last.count == 1 || last.stride == b.stride)
                && b.off == last.off + last.count as isize * b.stride
            {
                last.count += b.count;
                last.stride = b.stride;
                return;
            }
            self.blocks.push(b);
            return;
        }
    }

    /// Append the map `blocks` (one element of some type) placed at
    /// `base + i*outer_stride + j*inner_stride` for i < `outer`, j < `inner`, j fastest.
    pub fn append(
        &mut self,
        blocks: &[Block],
        base: isize,
        outer: usize,
        outer_stride: isize,
        inner: usize,
        inner_stride: isize,
    ) {
        if blocks.is_empty() || outer == 0 || inner == 0 {
            return;
        }
        if let [blk] = blocks {
            // Fast path: a single pattern usually replicates into a single pattern, which
            // keeps e.g. a 10^9-element vector of bytes at O(1) blocks and O(1) time.
            if let Some(row) = blk.replicate(inner, inner_stride) {
                match row.replicate(outer, outer_stride) {
                    Some(all) => self.push(all.shifted(base)),
                    None => {
                        for i in 0..outer {
                            self.push(row.shifted(base + i as isize * outer_stride));
                        }
                    }
                }
                return;
            }
        }
        for i in 0..outer {
            for j in 0..inner {
                let at = base + i as isize * outer_stride + j as isize * inner_stride;
                for blk in blocks {
                    self.push(blk.shifted(at));
                }
            }
        }
    }

    pub fn finish(self) -> Layout {
        let mut starts = Vec::with_capacity(self.blocks.len());
        let mut pos = 0usize;
        for b in &self.blocks {
            starts.push(pos);
            pos += b.len * b.count;
        }
        Layout {
            blocks: self.blocks,
            starts,
            size: pos,
        }
    }
}

/// One element's type map, ready for packing.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    pub blocks: Vec<Block>,
    /// Packed-stream offset where each block's bytes start (strictly increasing).
    pub starts: Vec<usize>,
    /// Total bytes (the type's size).
    pub size: usize,
}

impl Layout {
    /// Call `f(memory_offset, stream_index, len)` for each maximal piece of the packed
    /// stream range `[offset, offset + len)` of elements `extent` bytes apart, in order.
    /// `memory_offset` is relative to the buffer start, `stream_index` relative to `offset`.
    /// The caller has checked that the range lies within the stream (so `size > 0`).
    pub fn walk(
        &self,
        extent: isize,
        offset: usize,
        len: usize,
        mut f: impl FnMut(isize, usize, usize),
    ) {
        if len == 0 {
            return;
        }
        let mut elem = offset / self.size;
        let within = offset % self.size;
        // Seek: the last block starting at or before `within`.
        let mut k = self.starts.partition_point(|&s| s <= within) - 1;
        let r = within - self.starts[k];
        let mut idx = r / self.blocks[k].len;
        let mut roff = r % self.blocks[k].len;
        let mut done = 0;
        while done < len {
            let b = &self.blocks[k];
            let n = (b.len - roff).min(len - done);
            let mem = elem as isize * extent + b.off + idx as isize * b.stride + roff as isize;
            f(mem, done, n);
            done += n;
            roff += n;
            if roff == b.len {
                roff = 0;
                idx += 1;
                if idx == b.count {
                    idx = 0;
                    k += 1;
                    if k == self.blocks.len() {
                        k = 0;
                        elem += 1;
                    }
                }
            }
        }
    }
}

/// A run of basic elements of one size in the packed stream of an element, with its
/// starting positions (for `MPI_Get_elements` on a partial element).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Seg {
    pub esz: usize,
    pub count: usize,
    pub byte_start: usize,
    pub elem_start: usize,
}

/// Collects basic-element segments, merging neighbours of the same element size.
#[derive(Default)]
pub(crate) struct SegBuilder {
    segs: Vec<Seg>,
}

impl SegBuilder {
    pub fn push(&mut self, esz: usize, count: usize) {
        if count == 0 {
            return;
        }
        match self.segs.last_mut() {
            Some(last) if last.esz == esz => last.count += count,
            _ => self.segs.push(Seg {
                esz,
                count,
                byte_start: 0,
                elem_start: 0,
            }),
        }
    }

    /// Append `n` copies of `segs`.
    pub fn append(&mut self, segs: &[Seg], n: usize) {
        if let [s] = segs {
            self.push(s.esz, s.count * n);
            return;
        }
        for _ in 0..n {
            for s in segs {
                self.push(s.esz, s.count);
            }
        }
    }

    /// The segments with positions filled in, and the total number of basic elements.
    pub fn finish(mut self) -> (Vec<Seg>, usize) {
        let (mut bytes, mut elems) = (0, 0);
        for s in &mut self.segs {
            s.byte_start = bytes;
            s.elem_start = elems;
            bytes += s.esz * s.count;
            elems += s.count;
        }
        (self.segs, elems)
    }
}

/// Complete basic elements within the first `rem` packed bytes of one element.
pub(crate) fn elements_in_prefix(segs: &[Seg], rem: usize) -> usize {
    let k = segs.partition_point(|s| s.byte_start <= rem);
    if k == 0 {
        return 0;
    }
    let s = &segs[k - 1];
    s.elem_start + ((rem - s.byte_start) / s.esz).min(s.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(off: isize, len: usize) -> Block {
        Block {
            off,
            len,
            count: 1,
            stride: 0,
        }
    }

    #[test]
    fn merges_contiguous_and_regular_runs() {
        let mut lb = LayoutBuilder::default();
        lb.push(run(0, 4));
        lb.push(run(4, 4));
        assert_eq!(lb.blocks, vec![run(0, 8)]);
        lb.push(run(16, 8));
        lb.push(run(32, 8));
        assert_eq!(
            lb.blocks,
            vec![Block {
                off: 0,
                len: 8,
                count: 3,
                stride: 16
            }]
        );
        // Continues the last run contiguously: split it off and grow it.
        lb.push(run(40, 2));
        assert_eq!(
            lb.blocks,
            vec![
                Block {
                    off: 0,
                    len: 8,
                    count: 2,
                    stride: 16
                },
                run(32, 10)
            ]
        );
    }

    #[test]
    fn append_replicates_in_constant_space() {
        let mut lb = LayoutBuilder::default();
        lb.append(&[run(0, 1)], 0, 1_000_000_000, 2, 1, 1);
        let l = lb.finish();
        assert_eq!(l.blocks.len(), 1);
        assert_eq!(l.size, 1_000_000_000);
    }

    #[test]
    fn walk_seeks_into_the_middle() {
        let mut lb = LayoutBuilder::default();
        lb.push(run(0, 2));
        lb.push(run(10, 3));
        let l = lb.finish();
        let mut got = vec![];
        l.walk(20, 4, 6, |m, s, n| got.push((m, s, n)));
        // stream: elem0 [0,2)@0 [2,5)@10, elem1 [5,7)@20 [7,10)@30
        assert_eq!(got, vec![(12, 0, 1), (20, 1, 2), (30, 3, 3)]);
    }

    #[test]
    fn element_prefix_counts() {
        let mut sb = SegBuilder::default();
        sb.push(1, 1);
        sb.push(8, 2);
        let (segs, total) = sb.finish();
        assert_eq!(total, 3);
        assert_eq!(elements_in_prefix(&segs, 0), 0);
        assert_eq!(elements_in_prefix(&segs, 1), 1);
        assert_eq!(elements_in_prefix(&segs, 8), 1);
        assert_eq!(elements_in_prefix(&segs, 9), 2);
        assert_eq!(elements_in_prefix(&segs, 16), 2);
    }
}
