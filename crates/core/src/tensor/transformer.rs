//! Token-matrix operators for vision transformers: linear layers, layer norm, GELU, 2-D rotary
//! position embedding and multi-head attention. Tokens are row-major `n x width` matrices.

use rayon::prelude::*;

use super::bf16::{round_scaled_row, Packed, Precision};
use super::kept::Kept;
use super::matmul::{gemm, MatRef, Threads};
use super::ops::{softmax_block, softmax_unscaled};
use super::simd::{multiversion, sum_lanes};
use super::TensorError;
use crate::weights::Param;

/// `y = x W^T + b` with PyTorch's `(out, in)` weight: packed for the micro-kernels when built
/// (then the file's pages of it are released; in bf16 when asked and the CPU has a bf16 kernel),
/// or used in place from the weight file where the CPU level has no packed kernel.
#[derive(Clone)]
pub struct Linear {
    in_dim: usize,
    out_dim: usize,
    weight: LinearWeight,
    bias: Param,
}

#[derive(Clone)]
enum LinearWeight {
    Packed(Packed),
    InPlace(Param),
}

impl Linear {
    /// `y = x W^T + b` with PyTorch's `out x in` weight, in float32.
    pub fn new(in_dim: usize, out_dim: usize, weight: Param, bias: Param) -> Result<Self, TensorError> {
        Self::with_precision(in_dim, out_dim, weight, bias, Precision::Fp32)
    }

    /// As [`Linear::new`], the product in `precision` where the CPU runs it (float32 else).
    pub fn with_precision(
        in_dim: usize,
        out_dim: usize,
        weight: Param,
        bias: Param,
        precision: Precision,
    ) -> Result<Self, TensorError> {
        if weight.as_slice().len() != in_dim * out_dim || bias.as_slice().len() != out_dim {
            return Err(TensorError::Shape {
                op: "Linear::new",
                what: format!(
                    "weight {} / bias {} values for {in_dim} -> {out_dim}",
                    weight.as_slice().len(),
                    bias.as_slice().len()
                ),
            });
        }
        let weight = match Packed::from_weight(weight.as_slice(), out_dim, in_dim, precision) {
            Some(packed) => {
                weight.release();
                LinearWeight::Packed(packed)
            }
            None => LinearWeight::InPlace(weight),
        };
        Ok(Self { in_dim, out_dim, weight, bias })
    }

    /// Input width.
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }
    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// `x` is `n x in_dim` (rows `x_rs` apart); returns `n x out_dim`.
    pub fn forward(&self, x: &[f32], n: usize, x_rs: usize) -> Result<Vec<f32>, TensorError> {
        let mut out = vec![0.0; n * self.out_dim];
        self.forward_into(x, n, x_rs, &mut out, false)?;
        Ok(out)
    }

    /// `out (+)= x W^T + b`: with `accumulate` the result is added to `out` (a residual).
    pub fn forward_into(
        &self,
        x: &[f32],
        n: usize,
        x_rs: usize,
        out: &mut [f32],
        accumulate: bool,
    ) -> Result<(), TensorError> {
        let bias = self.bias.as_slice();
        if out.len() < n * self.out_dim {
            return Err(TensorError::TooSmall { op: "linear", what: "output", len: out.len() });
        }
        for row in out.chunks_exact_mut(self.out_dim).take(n) {
            if accumulate {
                row.iter_mut().zip(bias).for_each(|(o, b)| *o += b);
            } else {
                row.copy_from_slice(bias);
            }
        }
        match &self.weight {
            LinearWeight::Packed(packed) => packed.gemm(out, self.out_dim, x, x_rs, n, Threads::All),
            LinearWeight::InPlace(weight) => gemm(
                out,
                self.out_dim,
                MatRef::rows(x, n, self.in_dim, x_rs),
                MatRef::transposed(weight.as_slice(), self.in_dim, self.out_dim, self.in_dim),
                1.0,
                true,
                Threads::All,
            ),
        }
    }
}

/// Layer normalisation over each row of `width` values, with affine `gamma`, `beta`.
pub fn layer_norm(x: &[f32], width: usize, gamma: &[f32], beta: &[f32], eps: f32) -> Result<Vec<f32>, TensorError> {
    if gamma.len() != width || beta.len() != width || width == 0 || !x.len().is_multiple_of(width) {
        return Err(TensorError::Shape {
            op: "layer_norm",
            what: format!("{} values, width {width}, affine {}", x.len(), gamma.len()),
        });
    }
    let mut out = vec![0.0; x.len()];
    out.par_chunks_mut(width * 16)
        .zip(x.par_chunks(width * 16))
        .for_each(|(o, i)| layer_norm_rows(i, o, gamma, beta, eps));
    Ok(out)
}

multiversion! {
    fn layer_norm_rows(x: &[f32], out: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
        let width = gamma.len();
        for (row, o) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
            let mean = sum_lanes(row) / width as f32;
            for (d, &v) in o.iter_mut().zip(row) {
                *d = v - mean;
            }
            let mut acc = [0.0f32; 16];
            let chunks = o.chunks_exact(16);
            let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
            for c in chunks {
                for (a, v) in acc.iter_mut().zip(c) {
                    *a += v * v;
                }
            }
            let var = (acc.iter().sum::<f32>() + tail) / width as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((d, &g), &b) in o.iter_mut().zip(gamma).zip(beta) {
                *d = *d * inv * g + b;
            }
        }
    }
}

/// `erf(x)` as a rational approximation (the one XLA and Eigen use for float32: odd polynomial
/// over even polynomial on x clamped to [-4, 4]), about 1e-7 absolute; branch-free so it
/// vectorises.
#[inline(always)]
pub fn erf_approx(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 + -2.101_024e-6;
    p = p * x2 + -5.692_506_4e-5;
    p = p * x2 + -7.349_906_3e-4;
    p = p * x2 + -2.954_600_2e-3;
    p = p * x2 + -1.609_603_3e-2;
    let mut q = -1.456_607_2e-5_f32;
    q = q * x2 + -2.133_740_6e-4;
    q = q * x2 + -1.682_827e-3;
    q = q * x2 + -7.373_329_2e-3;
    q = q * x2 + -1.426_474e-2;
    x * p / q
}

multiversion! {
    fn gelu_block(x: &mut [f32]) {
        for v in x.iter_mut() {
            *v = 0.5 * *v * (1.0 + erf_approx(*v * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

/// Exact (erf) GELU, in place.
pub fn gelu(x: &mut [f32]) {
    x.par_chunks_mut(1 << 14).for_each(gelu_block);
}

/// 2-D rotary position embedding (CroCo's RoPE2D): the first half of each head vector is rotated
/// by the token's row, the second half by its column; inside a half of `D` values, element `i`
/// pairs with `i + D/2` ("rotate half") at angle `p / base^(2i / D)`.
pub struct Rope2d {
    half: usize,
    /// cos and sin per position and frequency: `[p][i]` for p < positions, i < half/2.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope2d {
    /// Rotation tables for `head_dim` and positions up to `max_position`.
    pub fn new(base: f64, head_dim: usize, max_position: usize) -> Result<Self, TensorError> {
        if !head_dim.is_multiple_of(4) || head_dim == 0 {
            return Err(TensorError::Shape {
                op: "Rope2d",
                what: format!("head dim {head_dim} is not a multiple of 4"),
            });
        }
        let half = head_dim / 2;
        let quarter = half / 2;
        let mut cos = Vec::with_capacity(max_position * quarter);
        let mut sin = Vec::with_capacity(max_position * quarter);
        for p in 0..max_position {
            for i in 0..quarter {
                // Same float32 steps as PyTorch: inv_freq in f32, then p * inv_freq in f32.
                let inv_freq = (1.0 / base.powf((2 * i) as f64 / half as f64)) as f32;
                let angle = p as f32 * inv_freq;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Ok(Self { half, cos, sin })
    }

    /// Rotates heads of `x` (rows `row_stride` apart, head `h` at columns
    /// `offset + h*head_dim ..`) in place; `positions[n] = (row, column)` of token n.
    pub fn apply(
        &self,
        x: &mut [f32],
        row_stride: usize,
        offset: usize,
        heads: usize,
        positions: &[(usize, usize)],
    ) -> Result<(), TensorError> {
        let head_dim = 2 * self.half;
        let quarter = self.half / 2;
        let max = self.cos.len() / quarter.max(1);
        if positions.iter().any(|&(r, c)| r >= max || c >= max) {
            return Err(TensorError::Shape {
                op: "Rope2d::apply",
                what: format!("position beyond the table of {max}"),
            });
        }
        if offset + heads * head_dim > row_stride || x.len() < positions.len() * row_stride {
            return Err(TensorError::TooSmall { op: "Rope2d::apply", what: "token matrix", len: x.len() });
        }
        x.par_chunks_mut(row_stride).zip(positions.par_iter()).for_each(|(row, &(pr, pc))| {
            for h in 0..heads {
                let head = &mut row[offset + h * head_dim..offset + (h + 1) * head_dim];
                let (first, second) = head.split_at_mut(self.half);
                for (part, p) in [(first, pr), (second, pc)] {
                    let (cos, sin) =
                        (&self.cos[p * quarter..(p + 1) * quarter], &self.sin[p * quarter..(p + 1) * quarter]);
                    let (a, b) = part.split_at_mut(quarter);
                    for i in 0..quarter {
                        let (u, v) = (a[i], b[i]);
                        a[i] = u * cos[i] - v * sin[i];
                        b[i] = v * cos[i] + u * sin[i];
                    }
                }
            }
        });
        Ok(())
    }
}

/// One operand of attention: token rows `row_stride` apart, head `h` at columns
/// `offset + h * head_dim ..`.
#[derive(Clone, Copy)]
pub struct Heads<'a> {
    /// The values.
    pub data: &'a [f32],
    /// Token rows.
    pub tokens: usize,
    /// Distance between token rows.
    pub row_stride: usize,
    /// Column of head 0.
    pub offset: usize,
}

impl<'a> Heads<'a> {
    fn head(&self, h: usize, head_dim: usize) -> Result<&'a [f32], TensorError> {
        self.data.get(self.offset + h * head_dim..).ok_or(TensorError::TooSmall {
            op: "attention",
            what: "head",
            len: self.data.len(),
        })
    }
}

/// Query rows per block: the block's scores (rows x keys) stay in L2.
const ATTENTION_BLOCK: usize = 256;

/// What attention works in on a thread: a block's scores, its queries scaled and its rows'
/// inverse sums (bf16).
#[derive(Default)]
struct Buffers {
    scores: Vec<f32>,
    q_scaled: Vec<f32>,
    inverses: Vec<f32>,
}

/// The thread's [`Buffers`] (see [`Kept`]), with room for a block's scores against `keys` keys
/// (of any value: every product writes its block's scores before they are read). Rayon starts
/// the work of a call's heads afresh many times, and each start allocated and cleared a megabyte
/// of scores; scores up to 16 MiB are kept.
fn workspace(keys: usize) -> Kept<Buffers> {
    thread_local! {
        static SPARE: std::cell::Cell<Buffers> = std::cell::Cell::new(Buffers::default());
    }
    let mut buffers = Kept::take(&SPARE, |b| b.scores.capacity() <= 4 << 20);
    if buffers.scores.len() < ATTENTION_BLOCK * keys {
        buffers.scores.resize(ATTENTION_BLOCK * keys, 0.0);
    }
    buffers.inverses.resize(ATTENTION_BLOCK, 0.0);
    buffers
}

/// `softmax(q k^T * scale) v` per head; returns `q.tokens x (heads * head_dim)`, heads in order.
/// In bf16 both products round their operands (the scaled queries, the keys, the softmax's
/// probabilities, the values) and sum in float32; the softmax is float32.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: Heads<'_>,
    k: Heads<'_>,
    v: Heads<'_>,
    heads: usize,
    head_dim: usize,
    scale: f32,
    precision: Precision,
) -> Result<Vec<f32>, TensorError> {
    if k.tokens != v.tokens {
        return Err(TensorError::Shape { op: "attention", what: format!("{} keys, {} values", k.tokens, v.tokens) });
    }
    let (nq, nk) = (q.tokens, k.tokens);
    // Head-major result, so each head is one contiguous task.
    let mut per_head = vec![0.0; heads * nq * head_dim];
    per_head.par_chunks_mut((nq * head_dim).max(1)).enumerate().try_for_each_init(
        || workspace(nk),
        |ws, (h, out)| {
            let Buffers { scores, q_scaled, inverses } = &mut **ws;
            let (qh, kh, vh) = (q.head(h, head_dim)?, k.head(h, head_dim)?, v.head(h, head_dim)?);
            // Where short products run packed, the head's keys and values are packed once for
            // all its query blocks.
            let packed =
                Packed::packs_short(precision)
                    .then(|| {
                        Packed::from_transposed(kh, head_dim, nk, k.row_stride, precision)
                            .zip(Packed::from_strided_rows(vh, nk, head_dim, v.row_stride, precision))
                    })
                    .flatten();
            for r0 in (0..nq).step_by(ATTENTION_BLOCK) {
                let rows = ATTENTION_BLOCK.min(nq - r0);
                let s = &mut scores[..rows * nk];
                let q_blk = qh.get(r0 * q.row_stride..).unwrap_or(&[]);
                let dst = &mut out[r0 * head_dim..];
                match &packed {
                    Some((keys, values)) => {
                        // The scale goes on the queries (a copy of the block), not on the scores.
                        q_scaled.clear();
                        for row in q_blk.chunks(q.row_stride).take(rows) {
                            q_scaled.extend(row.iter().take(head_dim).map(|x| x * scale));
                        }
                        s.fill(0.0);
                        keys.gemm(s, nk, q_scaled, head_dim, rows, Threads::Single)?;
                        // `dst` is still zero: each block of the result is written once.
                        match values {
                            // The softmax's last step, the scaling, is done as its rows are
                            // rounded for the product.
                            Packed::Bf16(values) => {
                                softmax_unscaled(s, nk, inverses);
                                let s = &*s;
                                let row = |i: usize, lanes: &mut [u32]| {
                                    round_scaled_row(&s[i * nk..][..nk], inverses[i], lanes)
                                };
                                values.gemm_rows(dst, head_dim, rows, Threads::Single, row)?;
                            }
                            Packed::F32(_) => {
                                softmax_block(s, nk);
                                values.gemm(dst, head_dim, s, nk, rows, Threads::Single)?;
                            }
                        }
                    }
                    None => {
                        gemm(
                            s,
                            nk,
                            MatRef::rows(q_blk, rows, head_dim, q.row_stride),
                            MatRef::transposed(kh, head_dim, nk, k.row_stride),
                            scale,
                            false,
                            Threads::Single,
                        )?;
                        softmax_block(s, nk);
                        let probabilities = MatRef::rows(s, rows, nk, nk);
                        let values = MatRef::rows(vh, nk, head_dim, v.row_stride);
                        gemm(dst, head_dim, probabilities, values, 1.0, false, Threads::Single)?;
                    }
                }
            }
            Ok::<_, TensorError>(())
        },
    )?;
    let width = heads * head_dim;
    let mut out = vec![0.0; nq * width];
    for (h, src) in per_head.chunks_exact((nq * head_dim).max(1)).enumerate().take(heads) {
        for (n, row) in src.chunks_exact(head_dim).enumerate() {
            out[n * width + h * head_dim..n * width + (h + 1) * head_dim].copy_from_slice(row);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod level_tests {
    use crate::tensor::simd::{bits, check_levels, test_values};

    #[test]
    fn layer_norm_and_gelu_are_identical_at_every_level() {
        let (rows, width) = (7, 1030);
        let x = test_values(rows * width, 31, 3.0);
        let gamma = test_values(width, 32, 1.0);
        let beta = test_values(width, 33, 0.1);
        check_levels("layer_norm_rows", |level| {
            let mut out = vec![0.0; x.len()];
            super::layer_norm_rows::at(level, &x, &mut out, &gamma, &beta, 1e-6);
            bits(&out)
        });
        check_levels("gelu_block", |level| {
            let mut v = x.clone();
            super::gelu_block::at(level, &mut v);
            bits(&v)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::erf_approx;

    /// erf by its Maclaurin series in f64 (accurate to ~1e-9 on [-4, 4]).
    fn erf_series(x: f64) -> f64 {
        let (mut term, mut sum) = (x, x);
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_approx_is_within_1e6_of_the_series() {
        let mut x = -5.0f64;
        while x <= 5.0 {
            let want = if x.abs() > 4.0 { x.signum() * erf_series(4.0) } else { erf_series(x) };
            let got = erf_approx(x as f32) as f64;
            assert!((got - want).abs() < 1e-6, "erf({x}) = {got}, series {want}");
            x += 0.001;
        }
    }
}
