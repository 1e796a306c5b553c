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
    // SAFETY: the checks above keep every element gemm addresses inside the three slices; dst is
    // borrowed mutably and cannot alias the shared operands.
    unsafe {
        gemm::gemm(
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
