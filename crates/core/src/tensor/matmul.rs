use super::simd::Level;
use super::TensorError;

/// A read-only matrix view: element (i, j) is `data[i * row_stride + j * col_stride]`.
/// Transposed views (PyTorch's `(out, in)` linear weights read as `in x out`) cost nothing.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    /// The values.
    pub data: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Distance between rows.
    pub row_stride: usize,
    /// Distance between columns.
    pub col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A row-major `rows x cols` matrix whose rows are `row_stride` apart.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        Self { data, rows, cols, row_stride, col_stride: 1 }
    }

    /// The transpose of a row-major `cols x rows` matrix stored with rows `stride` apart.
    pub fn transposed(data: &'a [f32], rows: usize, cols: usize, stride: usize) -> Self {
        Self { data, rows, cols, row_stride: 1, col_stride: stride }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride < self.data.len()
    }
}

/// How the GEMM may use threads: `Single` when the caller already runs blocks in parallel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// On the calling thread.
    Single,
    /// On rayon's pool.
    All,
}

/// `dst = (accumulate ? dst : 0) + scale * lhs x rhs`, with `dst` row-major (rows `dst_rs`
/// apart). All operand extents are checked, so this is safe to call with any views.
pub fn gemm(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f32,
    accumulate: bool,
    threads: Threads,
) -> Result<(), TensorError> {
    gemm_at(Level::best(), dst, dst_rs, lhs, rhs, scale, accumulate, threads)
}

/// [`gemm`] with the kernels of `level` (the baseline's where the CPU lacks it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_at(
    level: Level,
    dst: &mut [f32],
    dst_rs: usize,
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    scale: f32,
    accumulate: bool,
    threads: Threads,
) -> Result<(), TensorError> {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    if rhs.rows != k {
        return Err(TensorError::Shape { op: "gemm", what: format!("{m}x{k} times {}x{n}", rhs.rows) });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if dst_rs < n || dst.len() < (m - 1) * dst_rs + n {
        return Err(TensorError::TooSmall { op: "gemm", what: "destination", len: dst.len() });
    }
    if !lhs.fits() {
        return Err(TensorError::TooSmall { op: "gemm", what: "left operand", len: lhs.data.len() });
    }
    if !rhs.fits() {
        return Err(TensorError::TooSmall { op: "gemm", what: "right operand", len: rhs.data.len() });
    }
    let parallelism = match threads {
        Threads::Single => gemm::Parallelism::None,
        Threads::All => gemm::Parallelism::Rayon(rayon::current_num_threads()),
    };
    let gemm_at_level = capped_gemm(level).unwrap_or(gemm::gemm::<f32>);
    // SAFETY: the checks above keep every element gemm addresses inside the three slices; dst is
    // borrowed mutably and cannot alias the shared operands.
    unsafe {
        gemm_at_level(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            1.0f32,
            scale,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

/// `gemm::gemm`'s signature for f32.
type GemmFn = unsafe fn(
    usize,
    usize,
    usize,
    *mut f32,
    isize,
    isize,
    bool,
    *const f32,
    isize,
    isize,
    *const f32,
    isize,
    isize,
    f32,
    f32,
    bool,
    bool,
    bool,
    gemm::Parallelism,
) -> ();

/// The gemm crate's kernels for a level below the CPU's best, where the level is capped
/// ([`super::simd::LEVEL_ENV`]); `None` where `gemm::gemm`'s own choice (the CPU's best) is the
/// level. The crate has no switch for this, so the AVX2 (its `fma` module) and scalar
/// micro-kernels are driven through its public generic driver as the crate itself does.
fn capped_gemm(level: Level) -> Option<GemmFn> {
    if level >= Level::detected() {
        return None;
    }
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => {
            use gemm_common::simd::MixedSimd;
            <gemm_common::simd::V3 as MixedSimd<f32, f32, f32, f32>>::try_new().map(|_| fma_gemm as GemmFn)
        }
        // Only x86-64 has this level; elsewhere it is never detected, so never capped to.
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 => None,
        Level::Baseline => Some(scalar_gemm),
        Level::Avx512 => None,
    }
}

/// Defines a [`GemmFn`] running one of gemm-f32's micro-kernel sets with its SIMD type and lane
/// count.
macro_rules! gemm_with {
    ($name:ident, $kernels:path, $simd:ty, $lanes:expr) => {
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            m: usize,
            n: usize,
            k: usize,
            dst: *mut f32,
            dst_cs: isize,
            dst_rs: isize,
            read_dst: bool,
            lhs: *const f32,
            lhs_cs: isize,
            lhs_rs: isize,
            rhs: *const f32,
            rhs_cs: isize,
            rhs_rs: isize,
            alpha: f32,
            beta: f32,
            conj_dst: bool,
            conj_lhs: bool,
            conj_rhs: bool,
            parallelism: gemm::Parallelism,
        ) {
            use gemm_common::simd::MixedSimd;
            use $kernels as kernels;
            const N: usize = $lanes;
            let Some(simd) = <$simd as MixedSimd<f32, f32, f32, f32>>::try_new() else {
                unreachable!("capped_gemm hands out a kernel set only where its SIMD type exists");
            };
            // SAFETY: as for gemm::gemm, whose dispatch this repeats for one fixed kernel set.
            unsafe {
                gemm_common::gemm::gemm_basic_generic::<
                    _,
                    f32,
                    N,
                    { kernels::MR_DIV_N * N },
                    { kernels::NR },
                    { kernels::MR_DIV_N },
                    { kernels::H_M },
                    { kernels::H_N },
                >(
                    simd,
                    m,
                    n,
                    k,
                    dst,
                    dst_cs,
                    dst_rs,
                    read_dst,
                    lhs,
                    lhs_cs,
                    lhs_rs,
                    rhs,
                    rhs_cs,
                    rhs_rs,
                    alpha,
                    beta,
                    conj_dst,
                    conj_lhs,
                    conj_rhs,
                    |a, b, c| a * b + c,
                    &kernels::UKR,
                    &kernels::H_UKR,
                    false,
                    parallelism,
                )
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
gemm_with!(fma_gemm, gemm_f32::microkernel::fma::f32, gemm_common::simd::V3, 8);
gemm_with!(scalar_gemm, gemm_f32::microkernel::scalar::f32, gemm_common::simd::Scalar, 1);

/// `dst = (accumulate ? dst : 0) + lhs x rhs` for row-major operands with explicit row strides
/// (`m x k` times `k x n`), on the calling thread.
///
/// Rows of `lhs` may overlap (row stride smaller than `k`): the 3x3 convolution uses this to read
/// three neighbouring pixels as one row. Callers parallelise over independent output blocks,
/// which keeps both cores busy without nested thread pools.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    dst: &mut [f32],
    dst_rs: usize,
    lhs: &[f32],
    lhs_rs: usize,
    rhs: &[f32],
    rhs_rs: usize,
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
) -> Result<(), TensorError> {
    gemm(
        dst,
        dst_rs,
        MatRef::rows(lhs, m, k, lhs_rs),
        MatRef::rows(rhs, k, n, rhs_rs),
        1.0,
        accumulate,
        Threads::Single,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::simd::test_values;

    /// `scale * lhs x rhs (+ dst)` in f64 from the views' own indexing.
    fn reference(dst: &[f32], dst_rs: usize, lhs: MatRef<'_>, rhs: MatRef<'_>, scale: f32, acc: bool) -> Vec<f64> {
        let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|p| {
                        lhs.data[i * lhs.row_stride + p * lhs.col_stride] as f64
                            * rhs.data[p * rhs.row_stride + j * rhs.col_stride] as f64
                    })
                    .sum();
                out[i * n + j] = scale as f64 * dot + if acc { dst[i * dst_rs + j] as f64 } else { 0.0 };
            }
        }
        out
    }

    /// Every level's GEMM (the gemm crate's own choice at the CPU's best, its AVX2 and scalar
    /// kernel sets below it) computes the same product: transposed and overlapping views,
    /// accumulation, shapes off the micro-kernels' tiles, one thread and all.
    #[test]
    fn every_level_computes_the_product() {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (33, 64, 70), (100, 257, 129), (256, 96, 48)] {
            let lhs_data = test_values(m * k + 2 * k, 11, 1.0);
            let rhs_data = test_values(k * n, 12, 1.0);
            // lhs rows overlap (stride k/2 + 1, as the 3x3 convolution reads), rhs transposed.
            let lhs_rs = k / 2 + 1;
            let lhs = MatRef::rows(&lhs_data, m, k, lhs_rs);
            let rhs = MatRef::transposed(&rhs_data, k, n, k);
            let dst_rs = n + 3;
            let start = test_values(m * dst_rs, 13, 1.0);
            for acc in [false, true] {
                let want = reference(&start, dst_rs, lhs, rhs, 0.5, acc);
                for level in Level::supported() {
                    for threads in [Threads::Single, Threads::All] {
                        let mut dst = start.clone();
                        gemm_at(level, &mut dst, dst_rs, lhs, rhs, 0.5, acc, threads).unwrap();
                        for i in 0..m {
                            for j in 0..n {
                                let (got, w) = (dst[i * dst_rs + j] as f64, want[i * n + j]);
                                assert!(
                                    (got - w).abs() <= 1e-5 * (k as f64).sqrt() * (1.0 + w.abs()),
                                    "{level:?} {m}x{k}x{n} acc {acc} ({i}, {j}): {got} vs {w}"
                                );
                            }
                        }
                        // Padding between dst rows is left alone.
                        for i in 0..m {
                            assert_eq!(
                                dst[i * dst_rs + n..i * dst_rs + dst_rs],
                                start[i * dst_rs + n..i * dst_rs + dst_rs]
                            );
                        }
                    }
                }
            }
        }
        eprintln!("GEMM: every level computes the product, levels {:?}", Level::supported());
    }
}
