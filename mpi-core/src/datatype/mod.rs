//! MPI datatypes: the predefined types, the derived-type constructors, bounds and
//! extents per the MPI rules, decoding (envelope/contents), and pack/unpack of the
//! packed stream that point-to-point and collectives move.
//!
//! Representation: every type, builtin or derived, carries its flattened type map for
//! one element (a `Layout`: regular blocks of byte runs, merged, in type-map
//! order; computed when the type is constructed, so commit is only a flag) plus the
//! basic-element segments needed by `MPI_Get_elements`. `count` elements of a type are
//! that map replicated at multiples of the extent. Our pack format is the data bytes in
//! type-map order, native representation, no header, so `packed_size(n) == n * size()`.
//!
//! Bounds follow MPI §4.1 as MPICH computes them (checked against MPICH 4): `lb`/`ub`
//! are the min/max over the placed elements of their own lb/ub (so resized markers
//! propagate), true bounds likewise over the true bounds, members with a zero block
//! length don't count, and only `MPI_Type_create_struct` rounds its extent up to the
//! largest alignment of its members.

mod builtin;
mod external32;
mod layout;

pub use builtin::{Builtin, Primitive};
pub use external32::{
    external32_size, pack_external32, packed_to_external32, unpack_external32,
    unpack_external32_partial, External32Plan, External32Unpacked,
};

use crate::error::{ErrorClass, MpiError, MpiResult};
use crate::mpi_bail;
use layout::{Block, Layout, LayoutBuilder, Seg, SegBuilder};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// MPI counts.
pub type Count = i64;
/// Byte displacements (`MPI_Aint`).
pub type Aint = isize;
/// A shared, immutable datatype.
pub type TypeRef = Arc<Datatype>;

/// `MPI_COMBINER_*`, with MPICH's values.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    Named = 1,
    Dup = 2,
    Contiguous = 3,
    Vector = 4,
    HvectorInteger = 5,
    Hvector = 6,
    Indexed = 7,
    HindexedInteger = 8,
    Hindexed = 9,
    IndexedBlock = 10,
    StructInteger = 11,
    Struct = 12,
    Subarray = 13,
    Darray = 14,
    F90Real = 15,
    F90Complex = 16,
    F90Integer = 17,
    Resized = 18,
    HindexedBlock = 19,
}

impl Combiner {
    /// The MPICH `MPI_COMBINER_*` value.
    pub fn as_mpich(self) -> i32 {
        self as i32
    }
}

/// Array storage order for subarrays (`MPI_ORDER_C` / `MPI_ORDER_FORTRAN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    C,
    Fortran,
}

impl Order {
    /// MPICH's `MPI_ORDER_C` (56) / `MPI_ORDER_FORTRAN` (57).
    pub fn as_mpich(self) -> i32 {
        match self {
            Order::C => 56,
            Order::Fortran => 57,
        }
    }

    /// The order with MPICH value `v`.
    pub fn from_mpich(v: i32) -> Option<Order> {
        match v {
            56 => Some(Order::C),
            57 => Some(Order::Fortran),
            _ => None,
        }
    }
}

/// How a type was made: the constructor arguments, kept for get_envelope/get_contents.
#[derive(Debug)]
enum Kind {
    Named(Builtin),
    Dup(TypeRef),
    Contiguous(Count, TypeRef),
    Vector(Count, Count, Count, TypeRef),
    Hvector(Count, Count, Aint, TypeRef),
    Indexed(Vec<Count>, Vec<Count>, TypeRef),
    Hindexed(Vec<Count>, Vec<Aint>, TypeRef),
    IndexedBlock(Count, Vec<Count>, TypeRef),
    HindexedBlock(Count, Vec<Aint>, TypeRef),
    Struct(Vec<Count>, Vec<Aint>, Vec<TypeRef>),
    Subarray(Vec<Count>, Vec<Count>, Vec<Count>, Order, TypeRef),
    Resized(Aint, Aint, TypeRef),
    /// `MPI_Type_create_darray`'s arguments, its old type, and the type whose map it has
    /// (built by the caller; decoding and external32 go through it).
    Darray(Box<DarrayArgs>, TypeRef, TypeRef),
    /// `MPI_Type_create_f90_real/complex/integer`: the combiner, its integer arguments
    /// ((p, r) or (r)) and the predefined type of the kind chosen, whose map it has.
    F90(Combiner, Vec<Count>, TypeRef),
}

/// The arguments of `MPI_Type_create_darray`, kept for `MPI_Type_get_contents` (the
/// distribution constants are MPICH's values, stored as given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DarrayArgs {
    pub size: Count,
    pub rank: Count,
    pub gsizes: Vec<Count>,
    pub distribs: Vec<Count>,
    pub dargs: Vec<Count>,
    pub psizes: Vec<Count>,
    pub order: Order,
}

/// An MPI datatype. Immutable once built except for its name and committed flag.
pub struct Datatype {
    kind: Kind,
    size: usize,
    lb: Aint,
    ub: Aint,
    true_lb: Aint,
    true_ub: Aint,
    /// Largest alignment of the builtins inside (for struct extent rounding).
    align: usize,
    /// Shared between a type and its dups/resizes, which have the same map.
    layout: Arc<Layout>,
    segs: Arc<Vec<Seg>>,
    /// Basic elements in one element.
    elements: usize,
    prim: Option<Primitive>,
    contig: Option<Aint>,
    name: Mutex<String>,
    committed: AtomicBool,
}

impl fmt::Debug for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Datatype")
            .field("name", &self.name())
            .field("combiner", &self.combiner())
            .field("size", &self.size)
            .field("lb", &self.lb)
            .field("extent", &self.extent())
            .field("blocks", &self.layout.blocks.len())
            .finish()
    }
}

/// Running state of a constructor: placed elements so far.
struct Build {
    func: &'static str,
    layout: LayoutBuilder,
    segs: SegBuilder,
    /// (lb, ub, true_lb, true_ub) over everything placed, if anything was.
    bounds: Option<[i128; 4]>,
    size: usize,
    align: usize,
    /// `None`: nothing placed yet; `Some(None)`: mixed.
    prim: Option<Option<Primitive>>,
}

impl Build {
    fn new(func: &'static str) -> Build {
        Build {
            func,
            layout: LayoutBuilder::default(),
            segs: SegBuilder::default(),
            bounds: None,
            size: 0,
            align: 1,
            prim: None,
        }
    }

    /// Place `old` at `base + i*outer_stride + j*inner_stride` bytes, i < outer, j < inner
    /// (j fastest, which is type-map order for every constructor).
    fn place(
        &mut self,
        old: &Datatype,
        base: i128,
        outer: i128,
        outer_stride: i128,
        inner: i128,
        inner_stride: i128,
    ) -> MpiResult<()> {
        if outer <= 0 || inner <= 0 {
            return Ok(());
        }
        let span = |n: i128, s: i128| ((n - 1) * s).min(0)..=((n - 1) * s).max(0);
        let (o, i) = (span(outer, outer_stride), span(inner, inner_stride));
        let lo = base + o.start() + i.start();
        let hi = base + o.end() + i.end();
        let b = [
            lo + old.lb as i128,
            hi + old.ub as i128,
            lo + old.true_lb as i128,
            hi + old.true_ub as i128,
        ];
        // Every run offset lies within these bounds, so once they fit in isize the
        // isize arithmetic below cannot overflow.
        let limit = (isize::MAX / 2) as i128;
        if b.iter().any(|v| v.abs() > limit) {
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!("{}: displacements overflow the address range", self.func),
            ));
        }
        self.bounds = Some(match self.bounds {
            None => b,
            Some(c) => [
                c[0].min(b[0]),
                c[1].max(b[1]),
                c[2].min(b[2]),
                c[3].max(b[3]),
            ],
        });
        let n = usize::try_from(outer * inner).ok();
        let bytes = n.and_then(|n| n.checked_mul(old.size));
        self.size = match bytes.and_then(|b| b.checked_add(self.size)) {
            Some(s) if s <= isize::MAX as usize => s,
            _ => {
                return Err(MpiError::new(
                    ErrorClass::Count,
                    format!("{}: type size overflows", self.func),
                ))
            }
        };
        self.align = self.align.max(old.align);
        if old.size > 0 {
            self.prim = Some(match self.prim {
                None => old.prim,
                Some(p) if p == old.prim => p,
                Some(_) => None,
            });
            self.layout.append(
                &old.layout.blocks,
                base as isize,
                outer as usize,
                outer_stride as isize,
                inner as usize,
                inner_stride as isize,
            );
            self.segs.append(&old.segs, (outer * inner) as usize);
        }
        Ok(())
    }

    /// The finished type. `fallback_prim` is used when no data was placed; `bounds`
    /// overrides (lb, ub) for resized/subarray; `round` applies the struct alignment rule.
    fn finish(
        self,
        kind: Kind,
        fallback_prim: Option<Primitive>,
        bounds: Option<(Aint, Aint)>,
        round: bool,
        fixed_align: Option<usize>,
    ) -> Datatype {
        let [mut lb, mut ub, tlb, tub] = self.bounds.unwrap_or([0; 4]);
        if let Some((l, u)) = bounds {
            (lb, ub) = (l as i128, u as i128);
        }
        let align = fixed_align.unwrap_or(self.align);
        if round && self.bounds.is_some() {
            let rem = (ub - lb).rem_euclid(align as i128);
            if rem != 0 {
                ub += align as i128 - rem;
            }
        }
        let layout = self.layout.finish();
        debug_assert_eq!(layout.size, self.size);
        let (segs, elements) = self.segs.finish();
        let prim = self.prim.unwrap_or(fallback_prim);
        Datatype::assemble(
            kind,
            [lb as Aint, ub as Aint, tlb as Aint, tub as Aint],
            align,
            Arc::new(layout),
            Arc::new(segs),
            elements,
            prim,
        )
    }
}

fn check_count(func: &str, what: &str, v: Count) -> MpiResult<()> {
    if v < 0 {
        return Err(MpiError::new(
            ErrorClass::Count,
            format!("{func}: {what} {v} is negative"),
        ));
    }
    Ok(())
}

fn check_blocklen(func: &str, what: &str, v: Count) -> MpiResult<()> {
    if v < 0 {
        return Err(MpiError::new(
            ErrorClass::Arg,
            format!("{func}: {what} {v} is negative"),
        ));
    }
    Ok(())
}

fn check_len(func: &str, what: &str, got: usize, want: usize) -> MpiResult<()> {
    if got != want {
        return Err(MpiError::new(
            ErrorClass::Arg,
            format!("{func}: {what} has {got} entries, expected {want}"),
        ));
    }
    Ok(())
}

impl Datatype {
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        kind: Kind,
        [lb, ub, true_lb, true_ub]: [Aint; 4],
        align: usize,
        layout: Arc<Layout>,
        segs: Arc<Vec<Seg>>,
        elements: usize,
        prim: Option<Primitive>,
    ) -> Datatype {
        let size = layout.size;
        let extent = ub - lb;
        // Memory-contiguous: one run covering the whole size, and elements packed
        // back to back (extent == size), so n elements are one byte range.
        let contig = if size == 0 {
            Some(0)
        } else {
            match layout.blocks.as_slice() {
                [b] if b.count == 1 && b.len == size && extent == size as Aint => Some(b.off),
                _ => None,
            }
        };
        let committed = matches!(kind, Kind::Named(_));
        let name = match kind {
            Kind::Named(b) => b.name().to_string(),
            _ => String::new(),
        };
        Datatype {
            kind,
            size,
            lb,
            ub,
            true_lb,
            true_ub,
            align,
            layout,
            segs,
            elements,
            prim,
            contig,
            name: Mutex::new(name),
            committed: AtomicBool::new(committed),
        }
    }

    fn new_builtin(b: Builtin) -> Datatype {
        let info = b.info();
        let mut lbuild = LayoutBuilder::default();
        for &(off, len) in info.runs {
            lbuild.push(Block {
                off: off as isize,
                len,
                count: 1,
                stride: 0,
            });
        }
        let mut sbuild = SegBuilder::default();
        for &(esz, n) in info.elems {
            sbuild.push(esz, n);
        }
        let (segs, elements) = sbuild.finish();
        let true_ub = info.runs.iter().map(|&(o, l)| o + l).max().unwrap_or(0);
        Datatype::assemble(
            Kind::Named(b),
            [0, info.extent as Aint, 0, true_ub as Aint],
            info.align,
            Arc::new(lbuild.finish()),
            Arc::new(segs),
            elements,
            Some(info.prim),
        )
    }

    /// The shared instance of a predefined type (named, committed).
    pub fn builtin(b: Builtin) -> TypeRef {
        Datatype::builtin_ref(b).clone()
    }

    /// The shared instance of a predefined type, borrowed: the table lives as long as the
    /// process, so holding it needs no reference count.
    #[inline]
    pub fn builtin_ref(b: Builtin) -> &'static TypeRef {
        static CACHE: OnceLock<Vec<TypeRef>> = OnceLock::new();
        let all = CACHE.get_or_init(|| {
            Builtin::ALL
                .iter()
                .map(|&b| Arc::new(Datatype::new_builtin(b)))
                .collect()
        });
        &all[b as usize]
    }

    /// `MPI_Type_contiguous`.
    pub fn contiguous(count: Count, old: &TypeRef) -> MpiResult<Datatype> {
        let func = "MPI_Type_contiguous";
        check_count(func, "count", count)?;
        let mut b = Build::new(func);
        b.place(old, 0, 1, 0, count as i128, old.extent() as i128)?;
        Ok(b.finish(
            Kind::Contiguous(count, old.clone()),
            old.prim,
            None,
            false,
            None,
        ))
    }

    /// `MPI_Type_vector`: `stride` in elements of `old`.
    pub fn vector(
        count: Count,
        blocklen: Count,
        stride: Count,
        old: &TypeRef,
    ) -> MpiResult<Datatype> {
        let func = "MPI_Type_vector";
        check_count(func, "count", count)?;
        check_blocklen(func, "blocklength", blocklen)?;
        let ext = old.extent() as i128;
        let mut b = Build::new(func);
        b.place(
            old,
            0,
            count as i128,
            stride as i128 * ext,
            blocklen as i128,
            ext,
        )?;
        Ok(b.finish(
            Kind::Vector(count, blocklen, stride, old.clone()),
            old.prim,
            None,
            false,
            None,
        ))
    }

    /// `MPI_Type_create_hvector`: `stride_bytes` in bytes.
    pub fn hvector(
        count: Count,
        blocklen: Count,
        stride_bytes: Aint,
        old: &TypeRef,
    ) -> MpiResult<Datatype> {
        let func = "MPI_Type_create_hvector";
        check_count(func, "count", count)?;
        check_blocklen(func, "blocklength", blocklen)?;
        let mut b = Build::new(func);
        b.place(
            old,
            0,
            count as i128,
            stride_bytes as i128,
            blocklen as i128,
            old.extent() as i128,
        )?;
        Ok(b.finish(
            Kind::Hvector(count, blocklen, stride_bytes, old.clone()),
            old.prim,
            None,
            false,
            None,
        ))
    }

    /// Shared body of the four indexed constructors: block k is `blocklens[k]`
    /// elements starting `displs[k] * unit` bytes in.
    fn indexed_common(
        b: &mut Build,
        blocklens: &[Count],
        displs: &[i128],
        unit: i128,
        old: &Datatype,
    ) -> MpiResult<()> {
        for (k, (&bl, &d)) in blocklens.iter().zip(displs).enumerate() {
            if bl < 0 {
                check_blocklen(b.func, &format!("blocklength[{k}]"), bl)?;
            }
            b.place(old, d * unit, 1, 0, bl as i128, old.extent() as i128)?;
        }
        Ok(())
    }

    /// `MPI_Type_indexed`: displacements in elements of `old`.
    pub fn indexed(blocklens: &[Count], displs: &[Count], old: &TypeRef) -> MpiResult<Datatype> {
        let func = "MPI_Type_indexed";
        check_len(
            func,
            "array_of_displacements",
            displs.len(),
            blocklens.len(),
        )?;
        let mut b = Build::new(func);
        let d: Vec<i128> = displs.iter().map(|&d| d as i128).collect();
        Self::indexed_common(&mut b, blocklens, &d, old.extent() as i128, old)?;
        Ok(b.finish(
            Kind::Indexed(blocklens.to_vec(), displs.to_vec(), old.clone()),
            old.prim,
            None,
            false,
            None,
        ))
    }

    /// `MPI_Type_create_hindexed`: displacements in bytes.
    pub fn hindexed(blocklens: &[Count], displs: &[Aint], old: &TypeRef) -> MpiResult<Datatype> {
        let func = "MPI_Type_create_hindexed";
        check_len(
            func,
            "array_of_displacements",
            displs.len(),
            blocklens.len(),
        )?;
        let mut b = Build::new(func);
        let d: Vec<i128> = displs.iter().map(|&d| d as i128).collect();
        Self::indexed_common(&mut b, blocklens, &d, 1, old)?;
        Ok(b.finish(
            Kind::Hindexed(blocklens.to_vec(), displs.to_vec(), old.clone()),
            old.prim,
            None,
            false,
            None,
        ))
    }

    /// `MPI_Type_create_indexed_block`: displacements in elements of `old`.
    pub fn indexed_block(blocklen: Count, displs: &[Count], old: &TypeRef) -> MpiResult<Datatype> {
        let func = "MPI_Type_create_indexed_block";
        check_blocklen(func, "blocklength", blocklen)?;
        let mut b = Build::new(func);
        let d: Vec<i128> = displs.iter().map(|&d| d as i128).collect();
        let bls = vec![blocklen; displs.len()];
        Self::indexed_common(&mut b, &bls, &d, old.extent() as i128, old)?;
        Ok(b.finish(
            Kind::IndexedBlock(blocklen, displs.to_vec(), old.clone()),
            old.prim,
            None,
            false,
            None,
        ))
    }

    /// `MPI_Type_create_hindexed_block`: displacements in bytes.
    pub fn hindexed_block(blocklen: Count, displs: &[Aint], old: &TypeRef) -> MpiResult<Datatype> {
        let func = "MPI_Type_create_hindexed_block";
        check_blocklen(func, "blocklength", blocklen)?;
        let mut b = Build::new(func);
        let d: Vec<i128> = displs.iter().map(|&d| d as i128).collect();
        let bls = vec![blocklen; displs.len()];
        Self::indexed_common(&mut b, &bls, &d, 1, old)?;
        Ok(b.finish(
            Kind::HindexedBlock(blocklen, displs.to_vec(), old.clone()),
            old.prim,
            None,
            false,
            None,
        ))
    }

    /// `MPI_Type_create_struct`. The extent is rounded up to the largest alignment of
    /// the member types that have a nonzero block length (MPI §4.1.6, as MPICH does).
    pub fn structure(
        blocklens: &[Count],
        displs: &[Aint],
        types: &[TypeRef],
    ) -> MpiResult<Datatype> {
        let func = "MPI_Type_create_struct";
        check_len(
            func,
            "array_of_displacements",
            displs.len(),
            blocklens.len(),
        )?;
        check_len(func, "array_of_types", types.len(), blocklens.len())?;
        let mut b = Build::new(func);
        for (k, ((&bl, &d), t)) in blocklens.iter().zip(displs).zip(types).enumerate() {
            if bl < 0 {
                check_blocklen(func, &format!("blocklength[{k}]"), bl)?;
            }
            b.place(t, d as i128, 1, 0, bl as i128, t.extent() as i128)?;
        }
        Ok(b.finish(
            Kind::Struct(blocklens.to_vec(), displs.to_vec(), types.to_vec()),
            None,
            None,
            true,
            None,
        ))
    }

    /// `MPI_Type_create_resized`: same type map, lower bound `lb`, extent `extent`.
    pub fn resized(old: &TypeRef, lb: Aint, extent: Aint) -> MpiResult<Datatype> {
        let func = "MPI_Type_create_resized";
        let Some(ub) = lb.checked_add(extent) else {
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!("{func}: lb {lb} + extent {extent} overflows"),
            ));
        };
        Ok(Datatype::assemble(
            Kind::Resized(lb, extent, old.clone()),
            [lb, ub, old.true_lb, old.true_ub],
            old.align,
            old.layout.clone(),
            old.segs.clone(),
            old.elements,
            old.prim,
        ))
    }

    /// `MPI_Type_create_subarray`. The result has lb 0 and the extent of the whole
    /// array (`prod(sizes) * extent(old)`), as MPI specifies.
    pub fn subarray(
        sizes: &[Count],
        subsizes: &[Count],
        starts: &[Count],
        order: Order,
        old: &TypeRef,
    ) -> MpiResult<Datatype> {
        let func = "MPI_Type_create_subarray";
        let nd = sizes.len();
        if nd == 0 {
            mpi_bail!(Arg, "{func}: ndims must be positive");
        }
        check_len(func, "array_of_subsizes", subsizes.len(), nd)?;
        check_len(func, "array_of_starts", starts.len(), nd)?;
        for d in 0..nd {
            if sizes[d] < 1 {
                mpi_bail!(
                    Arg,
                    "{func}: array_of_sizes[{d}] = {} must be positive",
                    sizes[d]
                );
            }
            if subsizes[d] < 0 || subsizes[d] > sizes[d] {
                mpi_bail!(
                    Arg,
                    "{func}: array_of_subsizes[{d}] = {} is not in [0, {}]",
                    subsizes[d],
                    sizes[d]
                );
            }
            if starts[d] < 0 || starts[d] > sizes[d] - subsizes[d] {
                mpi_bail!(
                    Arg,
                    "{func}: array_of_starts[{d}] = {} is not in [0, {}]",
                    starts[d],
                    sizes[d] - subsizes[d]
                );
            }
        }
        // Dimensions from slowest- to fastest-varying in memory.
        let dims: Vec<usize> = match order {
            Order::C => (0..nd).collect(),
            Order::Fortran => (0..nd).rev().collect(),
        };
        // Memory stride of each dimension, in elements of `old`.
        let mut stride = vec![0i128; nd];
        let mut total: i128 = 1;
        for &d in dims.iter().rev() {
            stride[d] = total;
            total = total.saturating_mul(sizes[d] as i128);
        }
        let ext = old.extent() as i128;
        let full = total.saturating_mul(ext);
        if full.abs() > (isize::MAX / 2) as i128 {
            mpi_bail!(Count, "{func}: array extent overflows");
        }
        let mut b = Build::new(func);
        let fast = dims[nd - 1];
        // The two fastest dimensions go to one `place` (a regular 2-D pattern); the
        // slower ones are enumerated, in type-map (memory) order.
        let (outer_n, outer_stride, outer_dims) = if nd >= 2 {
            let d = dims[nd - 2];
            (subsizes[d] as i128, stride[d] * ext, &dims[..nd - 2])
        } else {
            (1, 0, &dims[..0])
        };
        let mut idx = vec![0i128; outer_dims.len()];
        if outer_dims.iter().all(|&d| subsizes[d] > 0) {
            'rows: loop {
                let mut elem: i128 = dims.iter().map(|&d| starts[d] as i128 * stride[d]).sum();
                for (i, &d) in outer_dims.iter().enumerate() {
                    elem += idx[i] * stride[d];
                }
                b.place(
                    old,
                    elem * ext,
                    outer_n,
                    outer_stride,
                    subsizes[fast] as i128,
                    ext,
                )?;
                // Odometer increment, last enumerated dimension fastest.
                let mut i = outer_dims.len();
                loop {
                    if i == 0 {
                        break 'rows;
                    }
                    i -= 1;
                    idx[i] += 1;
                    if idx[i] < subsizes[outer_dims[i]] as i128 {
                        continue 'rows;
                    }
                    idx[i] = 0;
                }
            }
        }
        Ok(b.finish(
            Kind::Subarray(
                sizes.to_vec(),
                subsizes.to_vec(),
                starts.to_vec(),
                order,
                old.clone(),
            ),
            old.prim,
            Some((0, full as Aint)),
            false,
            Some(old.align),
        ))
    }

    /// `MPI_Type_create_darray`'s result: `map` (the type map the caller computed from
    /// `args` and `old`: the owned elements, bounds of the whole array) described by its
    /// constructor, so that the envelope says `MPI_COMBINER_DARRAY` with `args`, as MPI
    /// requires, not how the map happens to be built.
    pub fn darray(args: DarrayArgs, old: &TypeRef, map: &TypeRef) -> MpiResult<Datatype> {
        let n = args.gsizes.len();
        if [&args.distribs, &args.dargs, &args.psizes]
            .iter()
            .any(|v| v.len() != n)
        {
            mpi_bail!(
                Arg,
                "MPI_Type_create_darray: the argument arrays differ in length"
            );
        }
        Ok(Datatype::assemble(
            Kind::Darray(Box::new(args), old.clone(), map.clone()),
            [map.lb, map.ub, map.true_lb, map.true_ub],
            map.align,
            map.layout.clone(),
            map.segs.clone(),
            map.elements,
            map.prim,
        ))
    }

    /// `MPI_Type_create_f90_real/complex/integer`'s result: the map of `base` (the
    /// predefined type of the kind chosen), combiner `combiner` with integer arguments
    /// `ints` ((p, r) or (r)). MPI counts it as predefined: committed, never freed
    /// ([`Datatype::is_predefined`]).
    pub fn f90(combiner: Combiner, ints: Vec<Count>, base: &TypeRef) -> MpiResult<Datatype> {
        let want = match combiner {
            Combiner::F90Real | Combiner::F90Complex => 2,
            Combiner::F90Integer => 1,
            other => mpi_bail!(Intern, "Datatype::f90: {other:?} is no MPI_COMBINER_F90_*"),
        };
        if ints.len() != want {
            mpi_bail!(Intern, "Datatype::f90: {combiner:?} takes {want} integers");
        }
        let t = Datatype::assemble(
            Kind::F90(combiner, ints, base.clone()),
            [base.lb, base.ub, base.true_lb, base.true_ub],
            base.align,
            base.layout.clone(),
            base.segs.clone(),
            base.elements,
            base.prim,
        );
        t.commit();
        Ok(t)
    }

    /// `MPI_Type_dup`: same map and bounds, combiner `Dup`, same committed state.
    pub fn dup(old: &TypeRef) -> Datatype {
        let t = Datatype::assemble(
            Kind::Dup(old.clone()),
            [old.lb, old.ub, old.true_lb, old.true_ub],
            old.align,
            old.layout.clone(),
            old.segs.clone(),
            old.elements,
            old.prim,
        );
        t.committed.store(old.is_committed(), Ordering::Release);
        t
    }

    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.size
    }

    /// Lower bound.
    pub fn lb(&self) -> Aint {
        self.lb
    }

    /// Extent (`ub - lb`): the stride between consecutive elements.
    pub fn extent(&self) -> Aint {
        self.ub - self.lb
    }

    /// Upper bound.
    pub fn ub(&self) -> Aint {
        self.ub
    }

    /// Lower bound of the actual data (ignoring resize markers).
    pub fn true_lb(&self) -> Aint {
        self.true_lb
    }

    /// Span of the actual data.
    pub fn true_extent(&self) -> Aint {
        self.true_ub - self.true_lb
    }

    /// The byte range `[lo, hi)`, relative to the buffer address, that `count` elements
    /// touch (empty when there is no data).
    pub fn span(&self, count: usize) -> (Aint, Aint) {
        if count == 0 || self.size() == 0 {
            return (0, 0);
        }
        let last = (count as Aint - 1) * self.extent();
        (self.true_lb + last.min(0), self.true_ub + last.max(0))
    }

    /// A copy of the memory `count` elements at `ptr` span, and the offset into it at which
    /// the elements' address falls (wrapping: it may lie before the copy). Sending `count`
    /// elements of this type from `copy.as_ptr().wrapping_add(offset)` sends what the
    /// original held with its datatype, so that a device that converts data (external32
    /// between sites) sees the type the receiver expects, not bytes.
    ///
    /// # Safety
    /// `ptr` holds `count` readable elements of this type.
    pub unsafe fn copy_span(&self, ptr: *const u8, count: usize) -> (Vec<u8>, usize) {
        let (lo, hi) = self.span(count);
        if hi <= lo {
            return (Vec::new(), 0);
        }
        // SAFETY: the elements lie within [ptr + lo, ptr + hi) (caller contract).
        let copy =
            unsafe { std::slice::from_raw_parts(ptr.wrapping_offset(lo), (hi - lo) as usize) };
        (copy.to_vec(), 0usize.wrapping_sub(lo as usize))
    }

    /// Largest alignment of the builtins inside (used for struct extent rounding).
    pub fn alignment(&self) -> usize {
        self.align
    }

    /// `Some(offset)` when `count` elements at `buf` are exactly the bytes
    /// `[buf + offset, buf + offset + count * size)` in stream order, so they can be
    /// sent or received in place. Always `Some(0)` for size-0 types.
    pub fn contiguous_offset(&self) -> Option<Aint> {
        self.contig
    }

    /// The builtin this is, if it is a predefined type (a dup of one is not).
    pub fn is_builtin(&self) -> Option<Builtin> {
        match self.kind {
            Kind::Named(b) => Some(b),
            _ => None,
        }
    }

    /// Whether MPI counts the type as predefined (it cannot be freed): the named types and
    /// the results of `MPI_Type_create_f90_*` (combiners `MPI_COMBINER_F90_*`).
    pub fn is_predefined(&self) -> bool {
        matches!(self.kind, Kind::Named(_) | Kind::F90(..))
    }

    /// `Some(p)` if every basic element of the type has kind `p` (reductions need that).
    /// A type with no data reports the kind of the type it was built from.
    pub fn homogeneous_primitive(&self) -> Option<Primitive> {
        self.prim
    }

    /// Number of basic elements in one element (a pair type counts two).
    pub fn basic_elements(&self) -> usize {
        self.elements
    }

    /// Number of (regular) blocks in the flattened map: a measure of pack cost.
    pub fn block_count(&self) -> usize {
        self.layout.blocks.len()
    }

    /// The `MPI_COMBINER_*` this type was made with.
    pub fn combiner(&self) -> Combiner {
        match self.kind {
            Kind::Named(_) => Combiner::Named,
            Kind::Dup(_) => Combiner::Dup,
            Kind::Contiguous(..) => Combiner::Contiguous,
            Kind::Vector(..) => Combiner::Vector,
            Kind::Hvector(..) => Combiner::Hvector,
            Kind::Indexed(..) => Combiner::Indexed,
            Kind::Hindexed(..) => Combiner::Hindexed,
            Kind::IndexedBlock(..) => Combiner::IndexedBlock,
            Kind::HindexedBlock(..) => Combiner::HindexedBlock,
            Kind::Struct(..) => Combiner::Struct,
            Kind::Subarray(..) => Combiner::Subarray,
            Kind::Resized(..) => Combiner::Resized,
            Kind::Darray(..) => Combiner::Darray,
            Kind::F90(c, ..) => c,
        }
    }

    /// `MPI_Type_get_envelope`: (num_integers, num_addresses, num_datatypes, combiner).
    pub fn envelope(&self) -> (usize, usize, usize, Combiner) {
        let (i, a, d) = match &self.kind {
            Kind::Named(_) => (0, 0, 0),
            Kind::Dup(_) => (0, 0, 1),
            Kind::Contiguous(..) => (1, 0, 1),
            Kind::Vector(..) => (3, 0, 1),
            Kind::Hvector(..) => (2, 1, 1),
            Kind::Indexed(bl, ..) => (2 * bl.len() + 1, 0, 1),
            Kind::Hindexed(bl, ..) => (bl.len() + 1, bl.len(), 1),
            Kind::IndexedBlock(_, d, _) => (d.len() + 2, 0, 1),
            Kind::HindexedBlock(_, d, _) => (2, d.len(), 1),
            Kind::Struct(bl, ..) => (bl.len() + 1, bl.len(), bl.len()),
            Kind::Subarray(s, ..) => (3 * s.len() + 2, 0, 1),
            Kind::Resized(..) => (0, 2, 1),
            Kind::Darray(a, ..) => (4 * a.gsizes.len() + 4, 0, 1),
            Kind::F90(_, ints, _) => (ints.len(), 0, 0),
        };
        (i, a, d, self.combiner())
    }

    /// `MPI_Type_get_contents`: (integers, addresses, datatypes) in MPI's order for the
    /// combiner (counts widened to i64). Empty for named types.
    pub fn contents(&self) -> (Vec<Count>, Vec<Aint>, Vec<TypeRef>) {
        let n = |v: usize| v as Count;
        match &self.kind {
            Kind::Named(_) => (vec![], vec![], vec![]),
            Kind::Dup(t) => (vec![], vec![], vec![t.clone()]),
            Kind::Contiguous(c, t) => (vec![*c], vec![], vec![t.clone()]),
            Kind::Vector(c, bl, s, t) => (vec![*c, *bl, *s], vec![], vec![t.clone()]),
            Kind::Hvector(c, bl, s, t) => (vec![*c, *bl], vec![*s], vec![t.clone()]),
            Kind::Indexed(bl, d, t) => {
                let mut ints = vec![n(bl.len())];
                ints.extend_from_slice(bl);
                ints.extend_from_slice(d);
                (ints, vec![], vec![t.clone()])
            }
            Kind::Hindexed(bl, d, t) => {
                let mut ints = vec![n(bl.len())];
                ints.extend_from_slice(bl);
                (ints, d.clone(), vec![t.clone()])
            }
            Kind::IndexedBlock(bl, d, t) => {
                let mut ints = vec![n(d.len()), *bl];
                ints.extend_from_slice(d);
                (ints, vec![], vec![t.clone()])
            }
            Kind::HindexedBlock(bl, d, t) => (vec![n(d.len()), *bl], d.clone(), vec![t.clone()]),
            Kind::Struct(bl, d, ts) => {
                let mut ints = vec![n(bl.len())];
                ints.extend_from_slice(bl);
                (ints, d.clone(), ts.clone())
            }
            Kind::Subarray(sz, sub, st, order, t) => {
                let mut ints = vec![n(sz.len())];
                ints.extend_from_slice(sz);
                ints.extend_from_slice(sub);
                ints.extend_from_slice(st);
                ints.push(order.as_mpich() as Count);
                (ints, vec![], vec![t.clone()])
            }
            Kind::Resized(lb, ext, t) => (vec![], vec![*lb, *ext], vec![t.clone()]),
            Kind::Darray(a, t, _) => {
                let mut ints = vec![a.size, a.rank, n(a.gsizes.len())];
                for v in [&a.gsizes, &a.distribs, &a.dargs, &a.psizes] {
                    ints.extend_from_slice(v);
                }
                ints.push(a.order.as_mpich() as Count);
                (ints, vec![], vec![t.clone()])
            }
            Kind::F90(_, ints, _) => (ints.clone(), vec![], vec![]),
        }
    }

    /// The type's name (`MPI_Type_get_name`): "MPI_INT" etc. for builtins, "" until set.
    pub fn name(&self) -> String {
        self.name.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How messages name the type: its name, or for an unnamed derived type what it was
    /// made by ("(an unnamed derived datatype, combiner Vector)").
    pub fn describe(&self) -> String {
        let n = self.name();
        if n.is_empty() {
            format!(
                "(an unnamed derived datatype, combiner {:?})",
                self.combiner()
            )
        } else {
            n
        }
    }

    /// `MPI_Type_set_name`.
    pub fn set_name(&self, name: &str) {
        *self.name.lock().unwrap_or_else(|e| e.into_inner()) = name.to_string();
    }

    /// Whether `MPI_Type_commit` has been called (builtins always are).
    pub fn is_committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }

    /// `MPI_Type_commit`. The map is already flattened at construction, so this only
    /// records the fact (uncommitted types are refused for communication by callers).
    pub fn commit(&self) {
        self.committed.store(true, Ordering::Release);
    }

    fn check_range(&self, count: usize, offset: usize, len: usize) {
        let total = count.checked_mul(self.size).expect("stream size overflows");
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= total),
            "pack range [{offset}, {offset}+{len}) outside a stream of {total} bytes"
        );
    }

    /// Copy bytes `[offset, offset + out.len())` of the packed stream of `count`
    /// elements at `buf` into `out`. Seeking costs O(log blocks), so chunked streaming
    /// is linear overall.
    ///
    /// # Safety
    /// Every byte of the type map of elements `0..count` at `buf` (element i starts at
    /// `buf + i * extent`; displacements may be negative) that falls within the requested
    /// range must be readable, and must not be written concurrently. Panics (without
    /// touching memory) if the range exceeds `count * size()` bytes.
    pub unsafe fn pack_range(&self, buf: *const u8, count: usize, offset: usize, out: &mut [u8]) {
        // Addresses are formed with `wrapping_offset`: `buf` may be MPI_BOTTOM (NULL) with
        // absolute displacements, where `offset`'s in-bounds rule does not hold (and the
        // optimiser made NULL + displacement NULL again).
        self.check_range(count, offset, out.len());
        if out.is_empty() {
            return;
        }
        let dst = out.as_mut_ptr();
        if let Some(off) = self.contig {
            // SAFETY: contiguous types occupy exactly [buf+off, buf+off+count*size) in
            // stream order; the caller guarantees it is readable, and `out` is ours.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    buf.wrapping_offset(off + offset as isize),
                    dst,
                    out.len(),
                )
            };
            return;
        }
        self.layout
            .walk(self.extent(), offset, out.len(), |mem, pos, n| {
                // SAFETY: `mem..mem+n` is part of the type map of an element < count (walk
                // stays within the checked range), readable per the caller's contract;
                // `pos + n <= out.len()`.
                unsafe { std::ptr::copy_nonoverlapping(buf.wrapping_offset(mem), dst.add(pos), n) }
            });
    }

    /// Inverse of [`Datatype::pack_range`]: write the packed bytes `input` (stream
    /// positions `[offset, offset + input.len())`) into `count` elements at `buf`.
    /// Bytes outside the type map (gaps) are left untouched.
    ///
    /// # Safety
    /// Every byte of the type map of elements `0..count` at `buf` that falls within the
    /// range must be writable and not accessed concurrently, and must not overlap
    /// `input`. Panics (without touching memory) if the range exceeds `count * size()`.
    pub unsafe fn unpack_range(&self, buf: *mut u8, count: usize, offset: usize, input: &[u8]) {
        self.check_range(count, offset, input.len());
        if input.is_empty() {
            return;
        }
        let src = input.as_ptr();
        if let Some(off) = self.contig {
            // SAFETY: as in pack_range, with the destination writable per the contract.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src,
                    buf.wrapping_offset(off + offset as isize),
                    input.len(),
                )
            };
            return;
        }
        self.layout
            .walk(self.extent(), offset, input.len(), |mem, pos, n| {
                // SAFETY: `mem..mem+n` is in the type map of an element < count, writable per
                // the contract; `pos + n <= input.len()`.
                unsafe { std::ptr::copy_nonoverlapping(src.add(pos), buf.wrapping_offset(mem), n) }
            });
    }

    /// The whole packed stream of `count` elements at `buf`.
    ///
    /// # Safety
    /// As for [`Datatype::pack_range`] over the whole stream.
    pub unsafe fn pack(&self, buf: *const u8, count: usize) -> Vec<u8> {
        let mut out = vec![0u8; self.packed_size(count)];
        // SAFETY: forwarded contract.
        unsafe { self.pack_range(buf, count, 0, &mut out) };
        out
    }

    /// `MPI_Get_count` / `MPI_Get_elements` for `bytes` received: (whole elements, or
    /// `None` (MPI_UNDEFINED) when `bytes` is not a multiple of the size; basic elements
    /// in those bytes, counting complete basic elements of a trailing partial element).
    /// A size-0 type gives `(Some(0), 0)`.
    pub fn count_for_bytes(&self, bytes: usize) -> (Option<usize>, usize) {
        if self.size == 0 {
            return (Some(0), 0);
        }
        let whole = bytes / self.size;
        let rem = bytes % self.size;
        let elements = whole * self.elements + layout::elements_in_prefix(&self.segs, rem);
        ((rem == 0).then_some(whole), elements)
    }

    /// Packed size of `count` elements (`MPI_Pack_size`; our format has no header).
    pub fn packed_size(&self, count: usize) -> usize {
        count * self.size
    }

    /// The type map of `count` elements as byte runs `(offset, len)` relative to the
    /// buffer, in packed-stream order, adjacent runs merged (one run for a contiguous
    /// type). One-sided operations send this to the target, which knows no derived types
    /// of the origin.
    pub fn runs(&self, count: usize) -> Vec<(isize, usize)> {
        let total = count * self.size;
        if total == 0 {
            return Vec::new();
        }
        if let Some(off) = self.contig {
            return vec![(off, total)];
        }
        let mut out: Vec<(isize, usize)> = Vec::new();
        self.layout.walk(self.extent(), 0, total, |mem, _, n| {
            if let Some(last) = out.last_mut() {
                if last.0 + last.1 as isize == mem {
                    last.1 += n;
                    return;
                }
            }
            out.push((mem, n));
        });
        out
    }

    /// Walk the packed-stream range `[offset, offset + len)` of an unbounded tiling of this
    /// type (element i at `i * extent`), calling `f(memory_offset, len)` for each maximal
    /// piece in stream order (adjacent pieces merged). MPI-IO maps a file view's data
    /// stream to file offsets this way: only the range accessed is walked, the file's type
    /// map is never materialised. Nothing is called for a size-0 type.
    pub fn walk_stream(&self, offset: usize, len: usize, mut f: impl FnMut(isize, usize)) {
        if len == 0 || self.size == 0 {
            return;
        }
        if let Some(off) = self.contig {
            f(off + offset as isize, len);
            return;
        }
        let mut pending: Option<(isize, usize)> = None;
        self.layout.walk(self.extent(), offset, len, |mem, _, n| {
            if let Some(p) = pending.as_mut() {
                if p.0 + p.1 as isize == mem {
                    p.1 += n;
                    return;
                }
                f(p.0, p.1);
            }
            pending = Some((mem, n));
        });
        if let Some((m, n)) = pending {
            f(m, n);
        }
    }
}

#[cfg(test)]
mod tests;
