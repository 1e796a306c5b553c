use rayon::prelude::*;

use super::bf16::{Packed, Precision};
use super::simd::multiversion;
use super::winograd::{Scratch, Winograd};
use super::{matmul, FeatureMap, TensorError, Threads};

/// A 3x3 convolution, stride 1, zero padding 1, with bias.
///
/// Weights are kept as three `(3 * c_in) x c_out` matrices, one per kernel row, whose rows run
/// over (kernel column, input channel): exactly the order in which a padded NHWC map stores three
/// horizontally neighbouring pixels. Convolutions with more than `DIRECT_MAX_C_IN` input
/// channels run by Winograd's F(2x2, 3x3) on kernels transformed at load; the few-channel ones
/// (SuperPoint's first layer) by a direct kernel.
#[derive(Clone, Debug)]
pub struct Conv3x3 {
    c_in: usize,
    c_out: usize,
    rows: [Vec<f32>; 3],
    /// The transformed kernels, where the convolution runs by Winograd's algorithm.
    winograd: Option<Winograd>,
    bias: Vec<f32>,
    /// What Winograd's products compute in (the direct kernel is float32).
    precision: Precision,
}

/// A 1x1 convolution with bias: a `c_in x c_out` matrix.
#[derive(Clone, Debug)]
pub struct Conv1x1 {
    c_in: usize,
    c_out: usize,
    weight: Vec<f32>,
    /// The same packed for the micro-kernel, at a level that has one (or in bf16).
    packed: Option<Packed>,
    bias: Vec<f32>,
}

impl Conv3x3 {
    /// From PyTorch's layout: weight `(c_out, c_in, 3, 3)` row-major, bias `(c_out,)`.
    pub fn from_torch(c_out: usize, c_in: usize, weight: &[f32], bias: &[f32]) -> Result<Self, TensorError> {
        Self::from_torch_in(c_out, c_in, weight, bias, Precision::Fp32)
    }

    /// As [`Conv3x3::from_torch`], Winograd's products in `precision` where the CPU runs it.
    pub fn from_torch_in(
        c_out: usize,
        c_in: usize,
        weight: &[f32],
        bias: &[f32],
        precision: Precision,
    ) -> Result<Self, TensorError> {
        if weight.len() != c_out * c_in * 9 || bias.len() != c_out {
            return Err(TensorError::Shape {
                op: "Conv3x3::from_torch",
                what: format!("weight has {} values and bias {} for {c_out}x{c_in}x3x3", weight.len(), bias.len()),
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
        Ok(Self::new(c_in, c_out, rows, bias.to_vec(), precision))
    }

    fn new(c_in: usize, c_out: usize, rows: [Vec<f32>; 3], bias: Vec<f32>, precision: Precision) -> Self {
        let winograd = (c_in > DIRECT_MAX_C_IN).then(|| Winograd::new(c_in, c_out, &rows, precision));
        Self { c_in, c_out, rows, winograd, bias, precision }
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
        Ok(Self::new(c_in, c_out, rows, bias, first.precision))
    }

    /// Input channels.
    pub fn in_channels(&self) -> usize {
        self.c_in
    }
    /// Output channels.
    pub fn out_channels(&self) -> usize {
        self.c_out
    }
}

impl Conv1x1 {
    /// From PyTorch's layout: weight `(c_out, c_in, 1, 1)` row-major, bias `(c_out,)`.
    pub fn from_torch(c_out: usize, c_in: usize, weight: &[f32], bias: &[f32]) -> Result<Self, TensorError> {
        Self::from_torch_in(c_out, c_in, weight, bias, Precision::Fp32)
    }

    /// As [`Conv1x1::from_torch`], the product in `precision` where the CPU runs it.
    pub fn from_torch_in(
        c_out: usize,
        c_in: usize,
        weight: &[f32],
        bias: &[f32],
        precision: Precision,
    ) -> Result<Self, TensorError> {
        if weight.len() != c_out * c_in || bias.len() != c_out {
            return Err(TensorError::Shape {
                op: "Conv1x1::from_torch",
                what: format!("weight has {} values and bias {} for {c_out}x{c_in}x1x1", weight.len(), bias.len()),
            });
        }
        let packed = Packed::from_weight(weight, c_out, c_in, precision);
        let mut m = vec![0.0; c_in * c_out];
        for co in 0..c_out {
            for ci in 0..c_in {
                m[ci * c_out + co] = weight[co * c_in + ci];
            }
        }
        Ok(Self { c_in, c_out, weight: m, packed, bias: bias.to_vec() })
    }

    /// Input channels.
    pub fn in_channels(&self) -> usize {
        self.c_in
    }
    /// Output channels.
    pub fn out_channels(&self) -> usize {
        self.c_out
    }

    /// Applies the convolution to input channels `first_channel .. first_channel + c_in`: one
    /// GEMM over the padded grid's pixels, in blocks (the border columns' junk is cleared after).
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
        let (h, w, c_out) = (input.height(), input.width(), self.c_out);
        let mut out = FeatureMap::zeros(h, w, c_out);
        if h == 0 || w == 0 {
            return Ok(out);
        }
        let (src, stride) = (input.raw(), input.channels());
        // Pixels from interior (0, 0) to interior (h-1, w-1), junk border columns included.
        let first = w + 3;
        let count = h * (w + 2) - 2;
        let rows = block_rows(count, self.c_in, c_out);
        let dst = &mut out.raw_mut()[first * c_out..(first + count) * c_out];
        dst.par_chunks_mut(rows * c_out).enumerate().try_for_each(|(i, block)| {
            let m = block.len() / c_out;
            for r in block.chunks_exact_mut(c_out) {
                r.copy_from_slice(&self.bias);
            }
            let lhs = &src[(first + i * rows) * stride + first_channel..];
            match &self.packed {
                Some(p) => p.gemm(block, c_out, lhs, stride, m, Threads::Single)?,
                None => matmul(block, c_out, lhs, stride, &self.weight, c_out, (m, c_out, self.c_in), true)?,
            }
            if relu {
                block.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            Ok::<_, TensorError>(())
        })?;
        out.clear_side_borders();
        Ok(out)
    }

    /// The convolution of `input`, with ReLU when asked.
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

/// Up to this many input channels a 3x3 convolution runs as a direct kernel: with so few, the
/// transforms of Winograd's algorithm would cost more than the products they save (SuperPoint's
/// first layer).
const DIRECT_MAX_C_IN: usize = 4;

/// Convolution rows per band of the fused conv + pool kernels: two pooled rows. Small enough
/// that a band's input, output and weights stay in L2.
const BAND_ROWS: usize = 4;

/// A worker's buffers in the fused conv + pool kernels.
#[derive(Default)]
struct BandState {
    winograd: Scratch,
    /// Unpooled convolution rows (direct kernel).
    rows: Vec<f32>,
    /// The first convolution's band with its halo rows (pair kernel).
    halo: Option<FeatureMap>,
}

impl Conv3x3 {
    /// Applies the convolution (and a fused ReLU when `relu`).
    pub fn forward(&self, input: &FeatureMap, relu: bool) -> Result<FeatureMap, TensorError> {
        self.check_input(input)?;
        let (h, w, c) = (input.height(), input.width(), self.c_out);
        let mut out = FeatureMap::zeros(h, w, c);
        let pw = w + 2;
        let interior = &mut out.raw_mut()[pw * c..(h + 1) * pw * c];
        match &self.winograd {
            // A row of tiles (two output rows) per task.
            Some(wino) => interior.par_chunks_mut(2 * pw * c).enumerate().try_for_each_init(
                Scratch::default,
                |scratch, (ty, rows)| {
                    let row_count = rows.len() / (pw * c);
                    wino.tile_row(input, ty, w.div_ceil(2), &self.bias, relu, scratch, |tx, y| {
                        for r in 0..row_count {
                            for s in 0..2 {
                                let x = 2 * tx + s;
                                if x < w {
                                    rows[(r * pw + x + 1) * c..][..c].copy_from_slice(&y[(2 * r + s) * c..][..c]);
                                }
                            }
                        }
                    })
                },
            )?,
            None => interior
                .par_chunks_mut(pw * c)
                .enumerate()
                .for_each(|(y, row)| self.direct_row(input, y, relu, &mut row[c..(w + 1) * c])),
        }
        Ok(out)
    }

    /// Output row `y` (interior pixels only, `width x c_out`) by the direct kernel.
    fn direct_row(&self, input: &FeatureMap, y: usize, relu: bool, dst: &mut [f32]) {
        direct_row(input.raw(), input.padded_width(), self.c_in, &self.rows, &self.bias, y, relu, dst);
    }

    fn check_input(&self, input: &FeatureMap) -> Result<(), TensorError> {
        if input.channels() != self.c_in {
            return Err(TensorError::Channels { op: "conv3x3", expected: self.c_in, got: input.channels() });
        }
        Ok(())
    }

    /// `max_pool_2x2(relu(conv(input)))` without materialising the full-resolution output:
    /// bands of rows are convolved and pooled while in cache.
    pub fn forward_relu_pooled(&self, input: &FeatureMap) -> Result<FeatureMap, TensorError> {
        self.check_input(input)?;
        pooled_bands(input.height(), input.width(), self.c_out, |pooled_row, dst, state| {
            self.pool_band(input, pooled_row, dst, state)
        })
    }

    /// Pooled rows `pooled_row ..` (as many as `dst` holds, in the pooled map's padded layout) of
    /// `relu(conv(input))`. Winograd's 2x2 tiles are exactly the pooling windows, so each tile's
    /// maximum is written straight out.
    fn pool_band(
        &self,
        input: &FeatureMap,
        pooled_row: usize,
        dst: &mut [f32],
        state: &mut BandState,
    ) -> Result<(), TensorError> {
        let (w, c) = (input.width(), self.c_out);
        let ow = w / 2;
        let Some(wino) = &self.winograd else {
            let (pw, rows) = (w + 2, 2 * dst.len() / ((ow + 2) * c));
            state.rows.resize(rows * pw * c, 0.0);
            for (r, row) in state.rows.chunks_exact_mut(pw * c).enumerate() {
                self.direct_row(input, 2 * pooled_row + r, true, &mut row[..w * c]);
            }
            pool_into(&state.rows, w, c, dst);
            return Ok(());
        };
        for (r, row) in dst.chunks_exact_mut((ow + 2) * c).enumerate() {
            wino.tile_row(input, pooled_row + r, ow, &self.bias, true, &mut state.winograd, |tx, y| {
                let (a, rest) = y.split_at(c);
                let (b, rest) = rest.split_at(c);
                let (p, q) = rest.split_at(c);
                max4_into(&mut row[(tx + 1) * c..][..c], [a, b, p, q]);
            })?;
        }
        Ok(())
    }

    /// `max_pool_2x2(relu(second(relu(self(input)))))`, band by band where this (first)
    /// convolution runs by the direct kernel: it is recomputed on the two halo rows each band
    /// needs, so neither full-resolution output is ever written. SuperPoint's 1->64 is that cheap;
    /// its 480x640x64 outputs would otherwise cost more in memory traffic than in arithmetic.
    pub fn forward_pair_relu_pooled(&self, second: &Conv3x3, input: &FeatureMap) -> Result<FeatureMap, TensorError> {
        self.check_input(input)?;
        if second.c_in != self.c_out {
            return Err(TensorError::Channels { op: "conv3x3 pair", expected: self.c_out, got: second.c_in });
        }
        if self.winograd.is_some() {
            return second.forward_relu_pooled(&self.forward(input, true)?);
        }
        let (h, w, c) = (input.height(), input.width(), self.c_out);
        let pw = w + 2;
        pooled_bands(h, w, second.c_out, |pooled_row, dst, state| {
            let (y0, band) = (2 * pooled_row, 2 * dst.len() / ((w / 2 + 2) * second.c_out));
            // First convolution's rows y0 - 1 .. y0 + band + 1, stored as a map whose border rows
            // are the halo (zero outside the image). Reused across bands of a thread.
            let mut first = match state.halo.take() {
                Some(map) if map.height() == band => map,
                _ => FeatureMap::zeros(band, w, c),
            };
            for r in 0..band + 2 {
                let row = &mut first.raw_mut()[(r * pw + 1) * c..(r * pw + 1 + w) * c];
                match (y0 + r).checked_sub(1).filter(|&y| y < h) {
                    Some(y) => self.direct_row(input, y, true, row),
                    None => row.fill(0.0),
                }
            }
            let pooled = second.pool_band(&first, 0, dst, state);
            state.halo = Some(first);
            pooled
        })
    }
}

/// Drives the fused conv + 2x2 max-pool kernels over the `h/2 x w/2` pooled map:
/// `pool_band(first pooled row, rows, state)` fills a band of pooled rows, given in the map's
/// padded layout with their border columns (to be left zero). Bands of [`BAND_ROWS`] convolution
/// rows run in parallel; `state` is per worker.
fn pooled_bands<F>(h: usize, w: usize, c: usize, pool_band: F) -> Result<FeatureMap, TensorError>
where
    F: Fn(usize, &mut [f32], &mut BandState) -> Result<(), TensorError> + Sync,
{
    let (oh, ow) = (h / 2, w / 2);
    let mut out = FeatureMap::zeros(oh, ow, c);
    if oh == 0 || ow == 0 {
        return Ok(out);
    }
    let out_pw = ow + 2;
    let pooled_per_band = BAND_ROWS / 2;
    let interior = &mut out.raw_mut()[out_pw * c..(oh + 1) * out_pw * c];
    interior
        .par_chunks_mut(pooled_per_band * out_pw * c)
        .enumerate()
        .try_for_each_init(BandState::default, |state, (i, dst)| pool_band(i * pooled_per_band, dst, state))?;
    Ok(out)
}

/// Pools convolution rows (`w + 2` pixels apart, each from interior column 0) into the pooled
/// rows `dst`.
fn pool_into(conv: &[f32], w: usize, c: usize, dst: &mut [f32]) {
    let (pw, ow) = (w + 2, w / 2);
    for (pr, row) in dst.chunks_exact_mut((ow + 2) * c).enumerate() {
        for px in 0..ow {
            let at = |dy: usize, dx: usize| {
                let j = ((2 * pr + dy) * pw + 2 * px + dx) * c;
                &conv[j..j + c]
            };
            max4_into(&mut row[(px + 1) * c..][..c], [at(0, 0), at(0, 1), at(1, 0), at(1, 1)]);
        }
    }
}

/// One pooled pixel: the channel-wise maximum of a 2x2 window's four pixels.
fn max4_into(out: &mut [f32], [a, b, p, q]: [&[f32]; 4]) {
    for (ch, o) in out.iter_mut().enumerate() {
        *o = a[ch].max(b[ch]).max(p[ch].max(q[ch]));
    }
}

multiversion! {
/// Direct 3x3 convolution of one output row: per pixel, `bias + sum over taps of input x weight`,
/// vectorised over output channels.
#[allow(clippy::too_many_arguments)]
fn direct_row(src: &[f32], pw: usize, c_in: usize, rows: &[Vec<f32>; 3], bias: &[f32], y: usize, relu: bool, dst: &mut [f32]) {
    direct_row_body(src, pw, c_in, rows, bias, y, relu, dst)
}
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn direct_row_body(
    src: &[f32],
    pw: usize,
    c_in: usize,
    rows: &[Vec<f32>; 3],
    bias: &[f32],
    y: usize,
    relu: bool,
    dst: &mut [f32],
) {
    const LANES: usize = 64;
    let c_out = bias.len();
    let k = 3 * c_in;
    for (x, out) in dst.chunks_exact_mut(c_out).enumerate() {
        for c0 in (0..c_out).step_by(LANES) {
            let n = LANES.min(c_out - c0);
            let mut acc = [0.0f32; LANES];
            acc[..n].copy_from_slice(&bias[c0..c0 + n]);
            for (dy, weights) in rows.iter().enumerate() {
                let start = ((y + dy) * pw + x) * c_in;
                for (kk, &v) in src[start..start + k].iter().enumerate() {
                    let wk = &weights[kk * c_out + c0..];
                    if n == LANES {
                        let wk: &[f32; LANES] = wk[..LANES].try_into().unwrap_or(&[0.0; LANES]);
                        for (a, w) in acc.iter_mut().zip(wk) {
                            *a += v * w;
                        }
                    } else {
                        for (a, w) in acc[..n].iter_mut().zip(&wk[..n]) {
                            *a += v * w;
                        }
                    }
                }
            }
            if relu {
                acc.iter_mut().for_each(|a| *a = a.max(0.0));
            }
            out[c0..c0 + n].copy_from_slice(&acc[..n]);
        }
    }
}

/// A transposed convolution whose kernel equals its stride (no padding): each input pixel writes
/// its own disjoint `k x k` output block, so it is one GEMM and a scatter.
#[derive(Clone, Debug)]
pub struct ConvTransposeBlock {
    c_in: usize,
    c_out: usize,
    k: usize,
    /// `c_in x (k * k * c_out)`, columns ordered (block row, block column, output channel): one
    /// block row of the result is then `k` adjacent NHWC output pixels.
    weight: Vec<f32>,
    /// The same packed for the micro-kernel, at a level that has one (or in bf16).
    packed: Option<Packed>,
    bias: Vec<f32>,
}

impl ConvTransposeBlock {
    /// From PyTorch's `ConvTranspose2d` layout: weight `(c_in, c_out, k, k)`, bias `(c_out,)`.
    pub fn from_torch(c_in: usize, c_out: usize, k: usize, weight: &[f32], bias: &[f32]) -> Result<Self, TensorError> {
        Self::from_torch_in(c_in, c_out, k, weight, bias, Precision::Fp32)
    }

    /// As [`ConvTransposeBlock::from_torch`], the product in `precision` where the CPU runs it.
    pub fn from_torch_in(
        c_in: usize,
        c_out: usize,
        k: usize,
        weight: &[f32],
        bias: &[f32],
        precision: Precision,
    ) -> Result<Self, TensorError> {
        if weight.len() != c_in * c_out * k * k || bias.len() != c_out || k == 0 {
            return Err(TensorError::Shape {
                op: "ConvTransposeBlock::from_torch",
                what: format!("weight {} / bias {} values for {c_in}x{c_out}x{k}x{k}", weight.len(), bias.len()),
            });
        }
        let mut w = vec![0.0; weight.len()];
        for ci in 0..c_in {
            for co in 0..c_out {
                for a in 0..k {
                    for b in 0..k {
                        w[ci * k * k * c_out + (a * k + b) * c_out + co] = weight[((ci * c_out + co) * k + a) * k + b];
                    }
                }
            }
        }
        let packed = Packed::from_rows(&w, c_in, k * k * c_out, precision);
        Ok(Self { c_in, c_out, k, weight: w, packed, bias: bias.to_vec() })
    }

    /// The transposed convolution of `input`.
    pub fn forward(&self, input: &FeatureMap) -> Result<FeatureMap, TensorError> {
        if input.channels() != self.c_in {
            return Err(TensorError::Channels { op: "conv transpose", expected: self.c_in, got: input.channels() });
        }
        let (h, w, k, co) = (input.height(), input.width(), self.k, self.c_out);
        let dense = input.to_dense();
        let cols = k * k * co;
        let mut blocks = vec![0.0; h * w * cols];
        match &self.packed {
            Some(p) => p.gemm(&mut blocks, cols, &dense, self.c_in, h * w, Threads::All)?,
            None => super::gemm(
                &mut blocks,
                cols,
                super::MatRef::rows(&dense, h * w, self.c_in, self.c_in),
                super::MatRef::rows(&self.weight, self.c_in, cols, cols),
                1.0,
                false,
                Threads::All,
            )?,
        }
        let mut out = FeatureMap::zeros(k * h, k * w, co);
        let out_pw = k * w + 2;
        let bias = &self.bias;
        // One input row fills k output rows.
        out.raw_mut()[out_pw * co..(k * h + 1) * out_pw * co]
            .par_chunks_mut(k * out_pw * co)
            .zip(blocks.par_chunks(w * cols))
            .for_each(|(rows, src)| {
                for (j, block) in src.chunks_exact(cols).enumerate() {
                    for a in 0..k {
                        let start = (a * out_pw + k * j + 1) * co;
                        let dst = &mut rows[start..start + k * co];
                        for ((d, &s), &b) in
                            dst.iter_mut().zip(&block[a * k * co..(a + 1) * k * co]).zip(bias.iter().cycle())
                        {
                            *d = s + b;
                        }
                    }
                }
            });
        Ok(out)
    }
}

impl Conv3x3 {
    /// Stride-2 version (padding 1): output `ceil(h/2) x ceil(w/2)`, the stride-1 result at even
    /// positions.
    pub fn forward_stride2(&self, input: &FeatureMap, relu: bool) -> Result<FeatureMap, TensorError> {
        let full = self.forward(input, relu)?;
        Ok(full.subsample_2())
    }
}

#[cfg(test)]
mod level_tests {
    use crate::tensor::simd::{bits, check_levels, test_values};

    #[test]
    fn direct_row_is_identical_at_every_level() {
        // 70 output channels: one full 64-lane block and a tail.
        let (c_in, c_out, pw) = (5, 70, 9);
        let src = test_values(3 * pw * c_in, 21, 1.0);
        let rows = [0, 1, 2].map(|i| test_values(3 * c_in * c_out, 22 + i, 0.5));
        let bias = test_values(c_out, 25, 0.1);
        for relu in [false, true] {
            check_levels("direct_row", |level| {
                let mut dst = vec![0.0; (pw - 2) * c_out];
                super::direct_row::at(level, &src, pw, c_in, &rows, &bias, 0, relu, &mut dst);
                bits(&dst)
            });
        }
    }
}
