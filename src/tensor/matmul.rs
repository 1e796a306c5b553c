use super::TensorError;

/// `dst = (accumulate ? dst : 0) + lhs x rhs` for row-major operands with explicit row strides
/// (`m x k` times `k x n`, unit column stride everywhere).
///
/// Rows of `lhs` may overlap (row stride smaller than `k`): the 3x3 convolution uses this to read
/// three neighbouring pixels as one row. Runs on the calling thread; callers parallelise over
/// independent output blocks, which keeps both cores busy without nested thread pools.
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
    if m == 0 || n == 0 {
        return Ok(());
    }
    let need = |rows: usize, rs: usize, cols: usize| (rows - 1) * rs + cols;
    if dst.len() < need(m, dst_rs, n) || dst_rs < n {
        return Err(TensorError::TooSmall { op: "matmul", what: "destination", len: dst.len() });
    }
    if k > 0 && lhs.len() < need(m, lhs_rs, k) {
        return Err(TensorError::TooSmall { op: "matmul", what: "left operand", len: lhs.len() });
    }
    if k > 0 && rhs.len() < need(k, rhs_rs, n) {
        return Err(TensorError::TooSmall { op: "matmul", what: "right operand", len: rhs.len() });
    }
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
            lhs.as_ptr(),
            1,
            lhs_rs as isize,
            rhs.as_ptr(),
            1,
            rhs_rs as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    Ok(())
}
