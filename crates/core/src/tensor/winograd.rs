//! Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, 2016) for the 3x3 convolutions:
//! each 2x2 block of output pixels (a tile) comes from its 4x4 input patch with 16 products per
//! channel pair instead of 36. Over a block of tiles the 16 positions of the transformed patch
//! are 16 independent GEMMs with K = C_in, so the convolution does 2.25x fewer multiply-adds than
//! the direct one, paid for by two element-wise transforms that only add and subtract.
//!
//! The transforms: `V = B^T d B` of each 4x4 input patch `d`, `U = G g G^T` of each 3x3 kernel
//! `g` (once, at load), `M = V U` position by position, and the tile `Y = A^T M A`, with
//! `B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]`, `G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1]` and
//! `A^T = [1 1 1 0; 0 1 -1 -1]`. Rounding stays at the direct convolution's level: the input
//! transform adds at most four values, and `U` is computed in f64.

use super::bf16::{Packed, Precision};
use super::simd::multiversion;
use super::{matmul, FeatureMap, TensorError, Threads};

/// Positions of the transformed 4x4 patch.
const POS: usize = 16;

/// Floats of one block's transformed inputs and products together: 1 MB, a core's L2 on the
/// smaller of our CPUs, so the block's 16 GEMMs read and write cache.
const BLOCK_FLOATS: usize = 256 * 1024;

/// Channels per step of the transforms: one AVX2 vector; AVX-512 runs two steps as one.
const LANES: usize = 8;

/// The transformed kernels of one 3x3 convolution.
#[derive(Clone, Debug)]
pub(super) struct Winograd {
    c_in: usize,
    c_out: usize,
    u: Kernels,
}

/// `U` for the 16 positions, each a `c_in x c_out` matrix.
#[derive(Clone, Debug)]
enum Kernels {
    /// Row-major, one after another, for the general GEMM.
    Plain(Vec<f32>),
    /// Packed (in bf16, or in float32 for the micro-kernel), where short products run packed.
    Packed(Vec<Packed>),
}

/// A worker's buffers for one block of tiles.
#[derive(Default)]
pub(super) struct Scratch {
    v: Vec<f32>,
    m: Vec<f32>,
    y: Vec<f32>,
    /// A pixel of zeros, for the patch pixels beyond the map's border (never written).
    zeros: Vec<f32>,
}

impl Winograd {
    /// From the convolution's three `(3 * c_in) x c_out` kernel-row matrices, whose rows run over
    /// (kernel column, input channel).
    pub(super) fn new(c_in: usize, c_out: usize, rows: &[Vec<f32>; 3], precision: Precision) -> Self {
        const G: [[f64; 3]; 4] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];
        let mut u = vec![0.0f32; POS * c_in * c_out];
        for ci in 0..c_in {
            for co in 0..c_out {
                let g = |dy: usize, dx: usize| f64::from(rows[dy][(dx * c_in + ci) * c_out + co]);
                for (i, gi) in G.iter().enumerate() {
                    for (j, gj) in G.iter().enumerate() {
                        let mut s = 0.0;
                        for (dy, a) in gi.iter().enumerate() {
                            for (dx, b) in gj.iter().enumerate() {
                                s += a * b * g(dy, dx);
                            }
                        }
                        u[((i * 4 + j) * c_in + ci) * c_out + co] = s as f32;
                    }
                }
            }
        }
        let packed = Packed::packs_short(precision)
            .then(|| {
                u.chunks_exact(c_in * c_out)
                    .map(|up| Packed::from_rows(up, c_in, c_out, precision))
                    .collect::<Option<Vec<_>>>()
            })
            .flatten();
        let u = match packed {
            Some(packed) => Kernels::Packed(packed),
            None => Kernels::Plain(u),
        };
        Self { c_in, c_out, u }
    }

    /// Tiles per block: as many as keep the block's transformed inputs and products in
    /// [`BLOCK_FLOATS`], a whole number of micro-kernel rows.
    fn block_tiles(&self) -> usize {
        (BLOCK_FLOATS / (POS * (self.c_in + self.c_out))).clamp(6, 240) / 6 * 6
    }

    /// The outputs of tiles `(ty, tx)` for `tx < tiles`, block by block, handed to
    /// `emit(tx, values)` as [`Winograd::tiles`] does.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tile_row(
        &self,
        input: &FeatureMap,
        ty: usize,
        tiles: usize,
        bias: &[f32],
        relu: bool,
        scratch: &mut Scratch,
        mut emit: impl FnMut(usize, &[f32]),
    ) -> Result<(), TensorError> {
        let per_block = self.block_tiles();
        for tx0 in (0..tiles).step_by(per_block) {
            let count = per_block.min(tiles - tx0);
            self.tiles(input, ty, tx0, count, bias, relu, scratch, |t, y| emit(tx0 + t, y))?;
        }
        Ok(())
    }

    /// The outputs of tiles `(ty, tx0 + t)` for `t < count` of the convolution of `input`: each
    /// tile's `2 x 2 x c_out` values (bias added, ReLU when `relu`), rows then columns, handed to
    /// `emit(t, values)`. Input pixels beyond the map's border read as zero, so the last tile row
    /// and column of an odd-sized map are computed too.
    #[allow(clippy::too_many_arguments)]
    fn tiles(
        &self,
        input: &FeatureMap,
        ty: usize,
        tx0: usize,
        count: usize,
        bias: &[f32],
        relu: bool,
        scratch: &mut Scratch,
        mut emit: impl FnMut(usize, &[f32]),
    ) -> Result<(), TensorError> {
        let (c_in, c_out) = (self.c_in, self.c_out);
        if input.channels() != c_in {
            return Err(TensorError::Channels { op: "winograd", expected: c_in, got: input.channels() });
        }
        let Scratch { v, m, y, zeros } = scratch;
        v.resize(POS * count * c_in, 0.0);
        m.resize(POS * count * c_out, 0.0);
        y.resize(4 * c_out, 0.0);
        zeros.resize(c_in, 0.0);
        let zeros = zeros.as_slice();

        let (src, pw, padded_rows) = (input.raw(), input.padded_width(), input.height() + 2);
        for t in 0..count {
            let tx = tx0 + t;
            let patch: [&[f32]; POS] = std::array::from_fn(|p| {
                let (py, px) = (2 * ty + p / 4, 2 * tx + p % 4);
                if py < padded_rows && px < pw {
                    let at = (py * pw + px) * c_in;
                    src.get(at..at + c_in).unwrap_or(zeros)
                } else {
                    zeros
                }
            });
            input_transform(&patch, v, count * c_in, t * c_in);
        }

        for p in 0..POS {
            let (vp, mp) = (&v[p * count * c_in..][..count * c_in], &mut m[p * count * c_out..][..count * c_out]);
            match &self.u {
                Kernels::Packed(packed) => {
                    mp.fill(0.0);
                    packed[p].gemm(mp, c_out, vp, c_in, count, Threads::Single)?;
                }
                Kernels::Plain(u) => {
                    let up = &u[p * c_in * c_out..][..c_in * c_out];
                    matmul(mp, c_out, vp, c_in, up, c_out, (count, c_out, c_in), false)?;
                }
            }
        }

        for t in 0..count {
            output_transform(m, count * c_out, t * c_out, bias, relu, y);
            emit(t, y);
        }
        Ok(())
    }
}

multiversion! {
/// `B^T d B` of one patch, every channel: position `p` goes to `v[p * stride + at ..]`.
fn input_transform(patch: &[&[f32]; 16], v: &mut [f32], stride: usize, at: usize) {
    let c = patch[0].len();
    let whole = c / LANES * LANES;
    for c0 in (0..whole).step_by(LANES) {
        input_lanes::<LANES>(patch, v, stride, at, c0);
    }
    for c0 in whole..c {
        input_lanes::<1>(patch, v, stride, at, c0);
    }
}
}

#[inline(always)]
fn input_lanes<const L: usize>(patch: &[&[f32]; 16], v: &mut [f32], stride: usize, at: usize, c0: usize) {
    let d: [[f32; L]; 16] = std::array::from_fn(|p| {
        let mut lane = [0.0; L];
        lane.copy_from_slice(&patch[p][c0..c0 + L]);
        lane
    });
    // Rows: B^T d.
    let mut r = [[0.0f32; L]; 16];
    for j in 0..4 {
        for l in 0..L {
            let (d0, d1, d2, d3) = (d[j][l], d[4 + j][l], d[8 + j][l], d[12 + j][l]);
            r[j][l] = d0 - d2;
            r[4 + j][l] = d1 + d2;
            r[8 + j][l] = d2 - d1;
            r[12 + j][l] = d1 - d3;
        }
    }
    // Columns: (B^T d) B.
    for i in 0..4 {
        let mut out = [[0.0f32; L]; 4];
        for l in 0..L {
            let (a0, a1, a2, a3) = (r[4 * i][l], r[4 * i + 1][l], r[4 * i + 2][l], r[4 * i + 3][l]);
            out[0][l] = a0 - a2;
            out[1][l] = a1 + a2;
            out[2][l] = a2 - a1;
            out[3][l] = a1 - a3;
        }
        for (j, o) in out.iter().enumerate() {
            v[(4 * i + j) * stride + at + c0..][..L].copy_from_slice(o);
        }
    }
}

multiversion! {
/// `A^T M A` of one tile, every channel, plus bias (and ReLU): position `p` of the products is
/// read at `m[p * stride + at ..]`; the 2x2 outputs go to `y`, rows then columns.
fn output_transform(m: &[f32], stride: usize, at: usize, bias: &[f32], relu: bool, y: &mut [f32]) {
    let c = bias.len();
    let whole = c / LANES * LANES;
    for c0 in (0..whole).step_by(LANES) {
        output_lanes::<LANES>(m, stride, at, bias, relu, y, c0);
    }
    for c0 in whole..c {
        output_lanes::<1>(m, stride, at, bias, relu, y, c0);
    }
}
}

#[inline(always)]
fn output_lanes<const L: usize>(
    m: &[f32],
    stride: usize,
    at: usize,
    bias: &[f32],
    relu: bool,
    y: &mut [f32],
    c0: usize,
) {
    let c = bias.len();
    let mp: [[f32; L]; 16] = std::array::from_fn(|p| {
        let mut lane = [0.0; L];
        lane.copy_from_slice(&m[p * stride + at + c0..][..L]);
        lane
    });
    let mut b = [0.0f32; L];
    b.copy_from_slice(&bias[c0..c0 + L]);
    // Rows: A^T M (two rows of four).
    let mut r = [[0.0f32; L]; 8];
    for j in 0..4 {
        for l in 0..L {
            let (m0, m1, m2, m3) = (mp[j][l], mp[4 + j][l], mp[8 + j][l], mp[12 + j][l]);
            r[j][l] = m0 + m1 + m2;
            r[4 + j][l] = m1 - m2 - m3;
        }
    }
    // Columns: (A^T M) A.
    for i in 0..2 {
        let mut out = [[0.0f32; L]; 2];
        for l in 0..L {
            let (a0, a1, a2, a3) = (r[4 * i][l], r[4 * i + 1][l], r[4 * i + 2][l], r[4 * i + 3][l]);
            out[0][l] = a0 + a1 + a2 + b[l];
            out[1][l] = a1 - a2 - a3 + b[l];
            if relu {
                out[0][l] = out[0][l].max(0.0);
                out[1][l] = out[1][l].max(0.0);
            }
        }
        for (j, o) in out.iter().enumerate() {
            y[(2 * i + j) * c + c0..][..L].copy_from_slice(o);
        }
    }
}

#[cfg(test)]
mod level_tests {
    use crate::tensor::simd::{bits, check_levels, test_values};

    #[test]
    fn transforms_are_identical_at_every_level() {
        // 21 channels: two 8-lane steps and a tail.
        let (c, count) = (21, 3);
        let data = test_values(16 * c, 31, 1.0);
        let patch: [&[f32]; 16] = std::array::from_fn(|p| &data[p * c..(p + 1) * c]);
        check_levels("input_transform", |level| {
            let mut v = vec![0.0; 16 * count * c];
            super::input_transform::at(level, &patch, &mut v, count * c, c);
            bits(&v)
        });
        let m = test_values(16 * count * c, 32, 1.0);
        let bias = test_values(c, 33, 0.1);
        for relu in [false, true] {
            check_levels("output_transform", |level| {
                let mut y = vec![0.0; 4 * c];
                super::output_transform::at(level, &m, count * c, 2 * c, &bias, relu, &mut y);
                bits(&y)
            });
        }
    }
}
