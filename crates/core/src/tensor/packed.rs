//! GEMM against a constant right operand packed once, when the layer is built: a linear layer's
//! weight is read in the same order at every call, so it is laid out for the micro-kernel at load
//! time instead of being packed again on every product (the way ONNX Runtime keeps a MatMul's
//! constant weight). The micro-kernels broadcast the left operand straight from its rows (no
//! packing) and keep a tile of the result in registers: 6 x 16 with AVX2 + FMA, 12 x 32 with
//! AVX-512; the baseline keeps the general GEMM.
//!
//! Linear layers use them at both levels. The short products (Winograd's per-block GEMMs,
//! attention's per-head ones) use them at AVX2 only ([`packs_short_products`]): at AVX-512 the
//! gemm crate's kernels measured faster there (docs/benchmarks.md).

use rayon::prelude::*;

use super::matmul::Threads;
use super::simd::Level;
use super::TensorError;

/// `W^T` of a PyTorch `n x k` weight, in panels of `NR` columns: panel `p` holds, for each
/// `kk`, the values `W[p * NR + j][kk]` for `j < NR` (zero past column `n`).
#[derive(Debug, Clone)]
pub struct PackedRhs {
    k: usize,
    n: usize,
    kernel: Kernel,
    data: Vec<f32>,
}

/// A micro-kernel family, fixed when the operand is packed (the level is fixed for the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// AVX2 + FMA: a 6 x 16 tile in 12 registers.
    Avx2,
    /// AVX-512: a 12 x 32 tile in 24 registers.
    Avx512,
}

impl Kernel {
    fn for_level(level: Level) -> Option<Kernel> {
        match level {
            Level::Avx512 => Some(Kernel::Avx512),
            Level::Avx2 => Some(Kernel::Avx2),
            Level::Baseline => None,
        }
    }

    /// Rows of the register tile.
    const fn mr(self) -> usize {
        match self {
            Kernel::Avx2 => 6,
            Kernel::Avx512 => 12,
        }
    }

    /// Columns of the register tile: the panel width, two vectors.
    const fn nr(self) -> usize {
        match self {
            Kernel::Avx2 => 16,
            Kernel::Avx512 => 32,
        }
    }
}

/// The largest register tile, for the scratch tile of partial panels.
const MAX_TILE: usize = 12 * 32;

/// Depth of one pass over a panel (the result tile is loaded and stored once per pass), the best
/// measured on the encoder's and decoder's shapes (docs/benchmarks.md).
pub(super) const KC: usize = 1024;

/// Rows of the left operand one task works through (its `mc x kc` block stays in L2), the best
/// measured on the same shapes.
pub(super) const MC: usize = 384;

/// Whether products with few rows per packed operand (or a short depth) run packed at `level`.
pub(crate) fn packs_short_products(level: Level) -> bool {
    level == Level::Avx2
}

impl PackedRhs {
    /// Packs `W^T` for the kernels of the level the process runs at ([`Level::best`]); `None`
    /// at the baseline (the caller keeps the general GEMM).
    pub fn from_weight(weight: &[f32], n: usize, k: usize) -> Option<PackedRhs> {
        Self::for_level(Level::best(), weight, n, k)
    }

    pub(crate) fn for_level(level: Level, weight: &[f32], n: usize, k: usize) -> Option<PackedRhs> {
        (weight.len() == n * k).then(|| Self::from_transposed_at(level, weight, k, n, k))?
    }

    /// Packs a `k x n` row-major right operand (a convolution's weight matrix), as
    /// [`PackedRhs::from_weight`] does its transpose.
    pub fn from_rows(rhs: &[f32], k: usize, n: usize) -> Option<PackedRhs> {
        Self::from_rows_at(Level::best(), rhs, k, n)
    }

    pub(crate) fn from_rows_at(level: Level, rhs: &[f32], k: usize, n: usize) -> Option<PackedRhs> {
        (rhs.len() == k * n).then(|| Self::from_strided_rows_at(level, rhs, k, n, n))?
    }

    /// The `k x n` right operand whose rows are `row_stride` apart in `rhs` (attention's values,
    /// one head of a wider matrix). `None` also where `rhs` is too short.
    pub(crate) fn from_strided_rows_at(
        level: Level,
        rhs: &[f32],
        k: usize,
        n: usize,
        row_stride: usize,
    ) -> Option<PackedRhs> {
        let fits = k == 0 || n == 0 || rhs.len() >= (k - 1) * row_stride + n;
        fits.then(|| Self::pack(level, k, n, |j, kk| rhs[kk * row_stride + j]))?
    }

    /// The `k x n` right operand whose transpose has rows `row_stride` apart in `t` (attention's
    /// keys, one head of a wider matrix). `None` also where `t` is too short.
    pub(crate) fn from_transposed_at(
        level: Level,
        t: &[f32],
        k: usize,
        n: usize,
        row_stride: usize,
    ) -> Option<PackedRhs> {
        let fits = k == 0 || n == 0 || t.len() >= (n - 1) * row_stride + k;
        fits.then(|| Self::pack(level, k, n, |j, kk| t[j * row_stride + kk]))?
    }

    /// The panels of the `k x n` right operand whose element (`kk`, `j`) is `value(j, kk)`, at
    /// a level with a packed kernel.
    fn pack(level: Level, k: usize, n: usize, value: impl Fn(usize, usize) -> f32 + Sync) -> Option<PackedRhs> {
        let kernel = Kernel::for_level(level)?;
        if n == 0 || k == 0 {
            return None;
        }
        let nr = kernel.nr();
        let mut data = vec![0.0f32; n.div_ceil(nr) * k * nr];
        data.par_chunks_mut(k * nr).enumerate().for_each(|(p, panel)| {
            for j in 0..nr.min(n - p * nr) {
                for kk in 0..k {
                    panel[kk * nr + j] = value(p * nr + j, kk);
                }
            }
        });
        Some(PackedRhs { k, n, kernel, data })
    }
}

/// `c += a x B` for `m` rows: `a` is `m x k` (rows `lda` apart; they may overlap, as the 3x3
/// convolution reads three neighbouring pixels as one row), `c` is `m x n` (rows `ldc` apart),
/// on rayon's pool or on the calling thread. Extents are checked.
pub fn gemm_packed(
    c: &mut [f32],
    ldc: usize,
    a: &[f32],
    lda: usize,
    m: usize,
    b: &PackedRhs,
    threads: Threads,
) -> Result<(), TensorError> {
    let (k, n) = (b.k, b.n);
    if m == 0 {
        return Ok(());
    }
    if ldc < n || c.len() < (m - 1) * ldc + n {
        return Err(TensorError::TooSmall { op: "gemm_packed", what: "destination", len: c.len() });
    }
    if a.len() < (m - 1) * lda + k {
        return Err(TensorError::TooSmall { op: "gemm_packed", what: "left operand", len: a.len() });
    }
    let c_ptr = SendPtr(c.as_mut_ptr());
    // SAFETY: each block's rows and panels lie inside the extents checked above, and no two
    // blocks share a tile of c.
    for_each_block(m, n.div_ceil(b.kernel.nr()), threads, |rows, panels| unsafe {
        block(c_ptr.get(), ldc, a, lda, b, rows, panels)
    });
    Ok(())
}

/// Calls `f(rows, panels)` on blocks that cover `m` rows times `panels` panels once each: one
/// block on the calling thread, or blocks of [`MC`] rows times runs of panels on rayon's pool,
/// at least four per thread where the shape allows, so that both cores stay busy to the end.
pub(super) fn for_each_block(
    m: usize,
    panels: usize,
    threads: Threads,
    f: impl Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Sync,
) {
    match threads {
        Threads::Single => f(0..m, 0..panels),
        Threads::All => {
            let row_blocks = m.div_ceil(MC);
            let want = 4 * rayon::current_num_threads();
            let panel_runs = want.div_ceil(row_blocks).clamp(1, panels.max(1));
            let run = panels.div_ceil(panel_runs).max(1);
            let tasks: Vec<(usize, usize)> =
                (0..row_blocks).flat_map(|rb| (0..panels.div_ceil(run)).map(move |pr| (rb, pr))).collect();
            tasks.into_par_iter().for_each(|(rb, pr)| {
                f(rb * MC..(rb * MC + MC).min(m), pr * run..(pr * run + run).min(panels));
            });
        }
    }
}

/// Rows `rows` of c against panels `panels` of b, depth in passes of [`KC`].
///
/// # Safety
/// `c` addresses the rows and the panels' columns (rows `ldc` apart) and nothing else writes
/// them meanwhile; `a` holds `rows.end` rows of `b.k` values `lda` apart (checked by the caller);
/// b was packed for a level the CPU has (Level::best).
unsafe fn block(
    c: *mut f32,
    ldc: usize,
    a: &[f32],
    lda: usize,
    b: &PackedRhs,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
) {
    let (k, n, kernel) = (b.k, b.n, b.kernel);
    let nr = kernel.nr();
    for k0 in (0..k).step_by(KC) {
        let depth = KC.min(k - k0);
        for p in panels.clone() {
            let cols = p * nr..(p * nr + nr).min(n);
            let panel = &b.data[p * k * nr + k0 * nr..][..depth * nr];
            let mut r = rows.start;
            while r < rows.end {
                let tile_rows = kernel.mr().min(rows.end - r);
                // SAFETY: the caller's contract, for rows r..r + tile_rows and columns `cols`.
                unsafe {
                    tile(
                        kernel,
                        tile_rows,
                        depth,
                        a.as_ptr().add(r * lda + k0),
                        lda,
                        panel.as_ptr(),
                        c.add(r * ldc + cols.start),
                        ldc,
                        cols.len(),
                    );
                }
                r += tile_rows;
            }
        }
    }
}

/// A raw pointer the tasks share; each writes its own tile.
#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut f32);
// SAFETY: tasks write disjoint regions (see gemm_packed).
unsafe impl Send for SendPtr {}
// SAFETY: as above; the pointer itself is only copied.
unsafe impl Sync for SendPtr {}
impl SendPtr {
    pub(super) fn get(self) -> *mut f32 {
        self.0
    }
}

/// One register tile: `c[rows x cols] += a[rows x depth] x panel[depth x nr]`.
///
/// # Safety
/// `a` addresses `rows` rows of `depth` values `lda` apart, `panel` `depth * nr` values, `c`
/// `rows` rows of `cols` values `ldc` apart; the CPU has the kernel's instruction set.
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    kernel: Kernel,
    rows: usize,
    depth: usize,
    a: *const f32,
    lda: usize,
    panel: *const f32,
    c: *mut f32,
    ldc: usize,
    cols: usize,
) {
    // SAFETY: forwarded; the kernel writes `rows` rows of `nr` values, as whole_tile asks.
    unsafe { whole_tile(rows, cols, kernel.nr(), c, ldc, |c, ldc| micro(kernel, rows, depth, a, lda, panel, c, ldc)) }
}

/// Runs `kernel(c, ldc)`, which adds to a whole `rows x nr` tile, on `rows x cols` of `c`: in
/// place when `cols == nr`, else through a scratch tile, so a kernel always works whole.
///
/// # Safety
/// `c` addresses `rows` rows of `cols` values `ldc` apart; `rows * nr` is at most
/// [`MAX_TILE`]; `kernel` writes only the `rows` rows of `nr` values it is given.
pub(super) unsafe fn whole_tile(
    rows: usize,
    cols: usize,
    nr: usize,
    c: *mut f32,
    ldc: usize,
    kernel: impl FnOnce(*mut f32, usize),
) {
    if cols == nr {
        kernel(c, ldc);
        return;
    }
    let mut scratch = [0.0f32; MAX_TILE];
    for i in 0..rows {
        // SAFETY: row i of c has `cols` values.
        unsafe { std::ptr::copy_nonoverlapping(c.add(i * ldc), scratch.as_mut_ptr().add(i * nr), cols) };
    }
    kernel(scratch.as_mut_ptr(), nr);
    for i in 0..rows {
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(scratch.as_ptr().add(i * nr), c.add(i * ldc), cols) };
    }
}

/// Dispatches to the kernel compiled for exactly `rows` rows.
#[allow(clippy::too_many_arguments)]
unsafe fn micro(
    kernel: Kernel,
    rows: usize,
    depth: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; `rows` is at most the kernel's MR.
    unsafe {
        macro_rules! by_rows {
            ($f:ident, $($r:literal),*) => {
                match rows {
                    $($r => x86::$f::<$r>(depth, a, lda, b, c, ldc),)*
                    _ => unreachable!("a tile has 1..=MR rows"),
                }
            };
        }
        match kernel {
            Kernel::Avx2 => by_rows!(avx2, 1, 2, 3, 4, 5, 6),
            Kernel::Avx512 => by_rows!(avx512, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, rows, depth, a, lda, b, c, ldc);
        unreachable!("the packed kernels exist only on x86-64");
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `c[R x 16] += a[R x depth] x b[depth x 16]`, AVX2 + FMA.
    ///
    /// # Safety
    /// See `tile`; the CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2<const R: usize>(
        depth: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
    ) {
        // SAFETY: every address stays within the extents the caller vouches for.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            let mut bp = b;
            for kk in 0..depth {
                let b0 = _mm256_loadu_ps(bp);
                let b1 = _mm256_loadu_ps(bp.add(8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*a.add(r * lda + kk));
                    acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
                }
                bp = bp.add(16);
            }
            for (r, acc) in acc.iter().enumerate() {
                let row = c.add(r * ldc);
                _mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), acc[0]));
                _mm256_storeu_ps(row.add(8), _mm256_add_ps(_mm256_loadu_ps(row.add(8)), acc[1]));
            }
        }
    }

    /// `c[R x 32] += a[R x depth] x b[depth x 32]`, AVX-512.
    ///
    /// # Safety
    /// See `tile`; the CPU has AVX-512F.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn avx512<const R: usize>(
        depth: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
    ) {
        // SAFETY: every address stays within the extents the caller vouches for.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            let mut bp = b;
            for kk in 0..depth {
                let b0 = _mm512_loadu_ps(bp);
                let b1 = _mm512_loadu_ps(bp.add(16));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*a.add(r * lda + kk));
                    acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
                }
                bp = bp.add(32);
            }
            for (r, acc) in acc.iter().enumerate() {
                let row = c.add(r * ldc);
                _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), acc[0]));
                _mm512_storeu_ps(row.add(16), _mm512_add_ps(_mm512_loadu_ps(row.add(16)), acc[1]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::simd::test_values;

    /// The packed product equals an f64 reference on shapes off every tile edge: rows not a
    /// multiple of MR, columns not of NR, depth not of KC, strided rows out, strided and
    /// overlapping rows in; packed from the transposed weight and from the plain rows alike; one
    /// thread and all.
    #[test]
    fn packed_product_matches_the_reference_at_every_level() {
        let mut checked = Vec::new();
        for level in Level::supported() {
            for (m, k, n) in [(1, 1, 1), (5, 7, 3), (13, 300, 40), (200, 513, 33), (37, 64, 96), (9, 1500, 20)] {
                let w = test_values(n * k, 2, 1.0);
                let rows: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
                let (Some(b), Some(b_rows)) =
                    (PackedRhs::for_level(level, &w, n, k), PackedRhs::from_rows_at(level, &rows, k, n))
                else {
                    continue;
                };
                let ldc = n + 5;
                let start = test_values(m * ldc, 4, 1.0);
                for lda in [k + 3, k / 3 + 1] {
                    let a = test_values((m - 1) * lda + k, 3, 1.0);
                    for (packed, threads) in [(&b, Threads::All), (&b_rows, Threads::Single), (&b, Threads::Single)] {
                        let mut c = start.clone();
                        gemm_packed(&mut c, ldc, &a, lda, m, packed, threads).unwrap();
                        for i in 0..m {
                            for j in 0..ldc {
                                let got = c[i * ldc + j] as f64;
                                if j >= n {
                                    assert_eq!(got, start[i * ldc + j] as f64, "padding at ({i}, {j}) written");
                                    continue;
                                }
                                let want = start[i * ldc + j] as f64
                                    + (0..k).map(|p| a[i * lda + p] as f64 * w[j * k + p] as f64).sum::<f64>();
                                assert!(
                                    (got - want).abs() <= 1e-5 * (k as f64).sqrt() * (1.0 + want.abs()),
                                    "{level:?} {m}x{k}x{n} lda {lda} {threads:?} ({i}, {j}): {got} vs {want}"
                                );
                            }
                        }
                    }
                }
                checked.push(level);
            }
        }
        checked.dedup();
        eprintln!("packed GEMM checked at {checked:?}");
        #[cfg(target_arch = "x86_64")]
        if crate::tensor::simd::has_avx2_fma() {
            assert_eq!(checked, Level::supported()[1..]);
        }
    }

    /// The strided constructors (attention's heads) pack what the contiguous ones pack.
    #[test]
    fn strided_operands_pack_like_contiguous_ones() {
        let (k, n, stride) = (70, 37, 90);
        let wide = test_values(k.max(n) * stride, 5, 1.0);
        for level in Level::supported() {
            let rows: Vec<f32> = (0..k).flat_map(|kk| wide[kk * stride..][..n].to_vec()).collect();
            let transposed: Vec<f32> = (0..n).flat_map(|j| wide[j * stride..][..k].to_vec()).collect();
            let pairs = [
                (
                    PackedRhs::from_strided_rows_at(level, &wide, k, n, stride),
                    PackedRhs::from_rows_at(level, &rows, k, n),
                ),
                (
                    PackedRhs::from_transposed_at(level, &wide, k, n, stride),
                    PackedRhs::for_level(level, &transposed, n, k),
                ),
            ];
            for (strided, contiguous) in pairs {
                assert_eq!(strided.map(|p| p.data), contiguous.map(|p| p.data), "{level:?}");
            }
            assert!(PackedRhs::from_strided_rows_at(level, &wide[..(k - 1) * stride + n - 1], k, n, stride).is_none());
            assert!(PackedRhs::from_transposed_at(level, &wide[..(n - 1) * stride + k - 1], k, n, stride).is_none());
        }
    }

    #[test]
    fn mismatched_operands_are_errors() {
        #[cfg(target_arch = "x86_64")]
        if !crate::tensor::simd::has_avx2_fma() {
            return;
        }
        let b = PackedRhs::for_level(Level::Avx2, &[1.0; 12], 3, 4).unwrap();
        let mut c = [0.0; 6];
        let all = Threads::All;
        assert!(gemm_packed(&mut c, 3, &[0.0; 7], 4, 2, &b, all).is_err(), "a too short");
        assert!(gemm_packed(&mut c[..5], 3, &[0.0; 8], 4, 2, &b, all).is_err(), "c too short");
        assert!(gemm_packed(&mut c, 2, &[0.0; 8], 4, 2, &b, all).is_err(), "ldc below n");
        assert!(gemm_packed(&mut c, 3, &[0.0; 8], 4, 2, &b, all).is_ok());
        assert!(PackedRhs::for_level(Level::Avx2, &[1.0; 11], 3, 4).is_none());
        assert!(PackedRhs::for_level(Level::Baseline, &[1.0; 12], 3, 4).is_none(), "the general GEMM");
    }
}
