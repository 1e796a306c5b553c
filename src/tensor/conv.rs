use rayon::prelude::*;

use super::{matmul, FeatureMap, TensorError};

/// A 3x3 convolution, stride 1, zero padding 1, with bias.
///
/// Weights are kept as three `(3 * c_in) x c_out` matrices, one per kernel row, whose rows run
/// over (kernel column, input channel): exactly the order in which a padded NHWC map stores three
/// horizontally neighbouring pixels.
#[derive(Clone, Debug)]
pub struct Conv3x3 {
    c_in: usize,
    c_out: usize,
    rows: [Vec<f32>; 3],
    bias: Vec<f32>,
}

/// A 1x1 convolution with bias: a `c_in x c_out` matrix.
#[derive(Clone, Debug)]
pub struct Conv1x1 {
    c_in: usize,
    c_out: usize,
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Conv3x3 {
    /// From PyTorch's layout: weight `(c_out, c_in, 3, 3)` row-major, bias `(c_out,)`.
    pub fn from_torch(
        c_out: usize,
        c_in: usize,
        weight: &[f32],
        bias: &[f32],
    ) -> Result<Self, TensorError> {
        if weight.len() != c_out * c_in * 9 || bias.len() != c_out {
            return Err(TensorError::Shape {
                op: "Conv3x3::from_torch",
                what: format!(
                    "weight has {} values and bias {} for {c_out}x{c_in}x3x3",
                    weight.len(),
                    bias.len()
                ),
            });
        }
        let rows = std::array::from_fn(|dy| {
            let mut m = vec![0.0; 3 * c_in * c_out];
            for co in 0..c_out {
                for ci in 0..c_in {
                    for dx in 0..3 {
                        m[(dx * c_in + ci) * c_out + co] = weight[((co * c_in + ci) * 3 + dy) * 3 + dx];
                    }
                }
            }
            m
        });
        Ok(Self { c_in, c_out, rows, bias: bias.to_vec() })
    }

    /// Stacks the output channels of several convolutions over the same input into one, so
    /// sibling heads run as one wider GEMM.
    pub fn concat_outputs(parts: &[&Conv3x3]) -> Result<Self, TensorError> {
        let Some(first) = parts.first() else {
            return Err(TensorError::Shape { op: "Conv3x3::concat_outputs", what: "no parts".into() });
        };
        let c_in = first.c_in;
        if let Some(p) = parts.iter().find(|p| p.c_in != c_in) {
            return Err(TensorError::Channels { op: "Conv3x3::concat_outputs", expected: c_in, got: p.c_in });
        }
        let c_out: usize = parts.iter().map(|p| p.c_out).sum();
        let rows = std::array::from_fn(|dy| {
            let mut m = Vec::with_capacity(3 * c_in * c_out);
            for r in 0..3 * c_in {
                for p in parts {
                    m.extend_from_slice(&p.rows[dy][r * p.c_out..(r + 1) * p.c_out]);
                }
            }
            m
        });
        let bias = parts.iter().flat_map(|p| p.bias.iter().copied()).collect();
        Ok(Self { c_in, c_out, rows, bias })
    }

    pub fn in_channels(&self) -> usize {
        self.c_in
    }
    pub fn out_channels(&self) -> usize {
        self.c_out
    }

    /// Applies the convolution (and a fused ReLU when `relu`).
    pub fn forward(&self, input: &FeatureMap, relu: bool) -> Result<FeatureMap, TensorError> {
        if input.channels() != self.c_in {
            return Err(TensorError::Channels { op: "conv3x3", expected: self.c_in, got: input.channels() });
        }
        let pw = input.padded_width();
        // Kernel row dy of output pixel o (padded index) starts at padded pixel o - pw - 1 + dy*pw.
        let taps: Vec<(usize, &[f32])> =
            (0..3).map(|dy| (dy * pw, self.rows[dy].as_slice())).collect();
        shifted_gemm(input, 0, self.c_in, 3 * self.c_in, &taps, &self.bias, relu, pw + 1)
    }
}

impl Conv1x1 {
    /// From PyTorch's layout: weight `(c_out, c_in, 1, 1)` row-major, bias `(c_out,)`.
    pub fn from_torch(
        c_out: usize,
        c_in: usize,
        weight: &[f32],
        bias: &[f32],
    ) -> Result<Self, TensorError> {
        if weight.len() != c_out * c_in || bias.len() != c_out {
            return Err(TensorError::Shape {
                op: "Conv1x1::from_torch",
                what: format!(
                    "weight has {} values and bias {} for {c_out}x{c_in}x1x1",
                    weight.len(),
                    bias.len()
                ),
            });
        }
        let mut m = vec![0.0; c_in * c_out];
        for co in 0..c_out {
            for ci in 0..c_in {
                m[ci * c_out + co] = weight[co * c_in + ci];
            }
        }
        Ok(Self { c_in, c_out, weight: m, bias: bias.to_vec() })
    }

    pub fn in_channels(&self) -> usize {
        self.c_in
    }
    pub fn out_channels(&self) -> usize {
        self.c_out
    }

    /// Applies the convolution to input channels `first_channel .. first_channel + c_in`.
    pub fn forward_channels(
        &self,
        input: &FeatureMap,
        first_channel: usize,
        relu: bool,
    ) -> Result<FeatureMap, TensorError> {
        if input.channels() < first_channel + self.c_in {
            return Err(TensorError::Channels {
                op: "conv1x1",
                expected: first_channel + self.c_in,
                got: input.channels(),
            });
        }
        let taps = [(0usize, self.weight.as_slice())];
        shifted_gemm(input, first_channel, input.channels(), self.c_in, &taps, &self.bias, relu, 0)
    }

    pub fn forward(&self, input: &FeatureMap, relu: bool) -> Result<FeatureMap, TensorError> {
        self.forward_channels(input, 0, relu)
    }
}

/// Output pixels per GEMM block: enough rows for the GEMM to run near peak, few enough that a
/// block's input rows and output stay in the 2 MB L2 cache, and several blocks per core.
fn block_rows(count: usize, c_in: usize, c_out: usize) -> usize {
    let by_cache = (96 * 1024 / (c_in + c_out)).max(64);
    let by_balance = count.div_ceil(4 * rayon::current_num_threads()).max(32);
    by_cache.min(by_balance)
}

/// The shared body of both convolutions: for each block of output pixels (padded indices over
/// the interior rows), `out = bias + sum_taps A_tap x W_tap`, where `A_tap` is the input viewed
/// as rows of `k` values with row stride `row_stride`, starting `tap_offset` pixels after the
/// block's first output pixel minus `back` pixels.
#[allow(clippy::too_many_arguments)]
fn shifted_gemm(
    input: &FeatureMap,
    first_channel: usize,
    row_stride: usize,
    k: usize,
    taps: &[(usize, &[f32])],
    bias: &[f32],
    relu: bool,
    back: usize,
) -> Result<FeatureMap, TensorError> {
    let (h, w) = (input.height(), input.width());
    let pw = input.padded_width();
    let c_out = bias.len();
    let mut out = FeatureMap::zeros(h, w, c_out);
    if h == 0 || w == 0 {
        return Ok(out);
    }
    // Output pixels from interior (0, 0) to interior (h-1, w-1), junk border columns included.
    let first = pw + 1;
    let count = h * pw - 2;
    let rows = block_rows(count, k, c_out);
    let src = input.raw();
    let dst = &mut out.raw_mut()[first * c_out..(first + count) * c_out];
    dst.par_chunks_mut(rows * c_out).enumerate().try_for_each(|(i, block)| {
        let o0 = first + i * rows;
        let m = block.len() / c_out;
        for r in block.chunks_exact_mut(c_out) {
            r.copy_from_slice(bias);
        }
        for &(offset, weight) in taps {
            let a = (o0 - back + offset) * row_stride + first_channel;
            matmul(block, c_out, &src[a..], row_stride, weight, c_out, (m, c_out, k), true)?;
        }
        if relu {
            block.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        Ok::<_, TensorError>(())
    })?;
    out.clear_side_borders();
    Ok(out)
}
