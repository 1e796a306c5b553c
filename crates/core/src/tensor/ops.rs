use rayon::prelude::*;

use super::simd::{exp_approx, max_lanes, multiversion};
use super::{FeatureMap, TensorError};

impl FeatureMap {
    /// 2x2 max-pool, stride 2, no padding (odd trailing rows/columns are dropped, as in PyTorch).
    pub fn max_pool_2x2(&self) -> FeatureMap {
        let (oh, ow, c) = (self.height() / 2, self.width() / 2, self.channels());
        let mut out = FeatureMap::zeros(oh, ow, c);
        let in_pw = self.padded_width();
        let out_pw = ow + 2;
        let src = self.raw();
        // One output row (interior part) per task; borders stay zero.
        out.raw_mut().par_chunks_mut(out_pw * c).enumerate().filter(|(y, _)| (1..=oh).contains(y)).for_each(
            |(y, row)| {
                let oy = y - 1;
                for ox in 0..ow {
                    let dst = &mut row[(ox + 1) * c..(ox + 2) * c];
                    let at = |dy: usize, dx: usize| {
                        let i = ((2 * oy + dy + 1) * in_pw + 2 * ox + dx + 1) * c;
                        &src[i..i + c]
                    };
                    let (a, b, p, q) = (at(0, 0), at(0, 1), at(1, 0), at(1, 1));
                    for ch in 0..c {
                        dst[ch] = a[ch].max(b[ch]).max(p[ch].max(q[ch]));
                    }
                }
            },
        );
        out
    }
}

/// Softmax over each row of `channels` consecutive values, in place (max-subtracted, no epsilon).
pub fn softmax_rows(data: &mut [f32], channels: usize) {
    if channels == 0 {
        return;
    }
    data.par_chunks_mut(channels * 64).for_each(|block| softmax_block(block, channels));
}

multiversion! {
    /// Softmax of each row of `channels` values, on the calling thread.
    pub(crate) fn softmax_block(block: &mut [f32], channels: usize) {
        for row in block.chunks_exact_mut(channels) {
            let inv = 1.0 / exp_and_sum(row);
            row.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

multiversion! {
    /// Softmax of each row of `channels` values but for the last step: each row holds
    /// `exp(v - max)`, and `inverses` (a value a row) takes `1 / sum` of the row, by which the
    /// caller scales it where it reads it.
    pub(crate) fn softmax_unscaled(block: &mut [f32], channels: usize, inverses: &mut [f32]) {
        for (row, inv) in block.chunks_exact_mut(channels).zip(inverses) {
            *inv = 1.0 / exp_and_sum(row);
        }
    }
}

/// `exp(v - max)` of each value of `row`, in place, and their sum: in one pass, with the partial
/// sums of [`super::simd::sum_lanes`] (the same sum to the bit as summing after).
#[inline(always)]
fn exp_and_sum(row: &mut [f32]) -> f32 {
    let max = max_lanes(row);
    let mut acc = [0.0f32; 16];
    let mut chunks = row.chunks_exact_mut(16);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *v = exp_approx(*v - max);
            *a += *v;
        }
    }
    let tail: f32 = chunks
        .into_remainder()
        .iter_mut()
        .map(|v| {
            *v = exp_approx(*v - max);
            *v
        })
        .sum();
    acc.iter().sum::<f32>() + tail
}

multiversion! {
    /// Euclidean norm of each row of `channels` values, `max(||row||, eps)`.
    pub fn row_norms(data: &[f32], channels: usize, eps: f32) -> Vec<f32> {
        data.chunks_exact(channels.max(1))
            .map(|row| {
                let mut acc = [0.0f32; 16];
                let chunks = row.chunks_exact(16);
                let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
                for c in chunks {
                    for (a, v) in acc.iter_mut().zip(c) {
                        *a += v * v;
                    }
                }
                (acc.iter().sum::<f32>() + tail).sqrt().max(eps)
            })
            .collect()
    }
}

/// Divides each row of `channels` values by `max(||row||_2, eps)`, in place.
pub fn l2_normalize_rows(data: &mut [f32], channels: usize, eps: f32) {
    if channels == 0 {
        return;
    }
    let norms = row_norms(data, channels, eps);
    for (row, n) in data.chunks_exact_mut(channels).zip(norms) {
        row.iter_mut().for_each(|v| *v /= n);
    }
}

/// Max over the `(2r+1) x (2r+1)` window around each pixel of a row-major `height x width`
/// plane; pixels outside the plane are ignored (PyTorch's max-pool with -inf padding).
///
/// Separable: a horizontal then a vertical pass, each `2r` shifted element-wise maxima in plain
/// loops the compiler vectorises (the vertical one over whole rows).
pub fn max_filter_2d(plane: &[f32], height: usize, width: usize, radius: usize) -> Result<Vec<f32>, TensorError> {
    if plane.len() != height * width {
        return Err(TensorError::Shape {
            op: "max_filter_2d",
            what: format!("{} values for a {height}x{width} plane", plane.len()),
        });
    }
    if radius == 0 || plane.is_empty() {
        return Ok(plane.to_vec());
    }
    let mut horizontal = plane.to_vec();
    horizontal.par_chunks_mut(width * 32).zip(plane.par_chunks(width * 32)).for_each(|(dst, src)| {
        for (d, s) in dst.chunks_exact_mut(width).zip(src.chunks_exact(width)) {
            shifted_max(s, d, radius.min(width - 1), 1);
        }
    });
    // Vertical pass in bands of rows; each band reads `radius` rows above and below it.
    let mut out = horizontal.clone();
    let band = 32;
    out.par_chunks_mut(width * band).enumerate().for_each(|(i, dst)| {
        let y0 = i * band;
        let y1 = y0 + dst.len() / width;
        for d in 1..=radius.min(height - 1) {
            let s = d * width;
            // Rows below: out[y] = max(out[y], h[y + d]) for y + d < height.
            let below_end = y1.min(height - d);
            if below_end > y0 {
                let n = (below_end - y0) * width;
                max_into(&mut dst[..n], &horizontal[y0 * width + s..y0 * width + s + n]);
            }
            // Rows above: out[y] = max(out[y], h[y - d]) for y >= d.
            let above_start = y0.max(d);
            if y1 > above_start {
                let off = (above_start - y0) * width;
                let n = (y1 - above_start) * width;
                max_into(&mut dst[off..off + n], &horizontal[above_start * width - s..above_start * width - s + n]);
            }
        }
    });
    Ok(out)
}

multiversion! {
/// `dst[i] = max(dst[i], src[i ± d*stride])` for `d` in `1..=radius`, within the slice.
/// With `dst` starting as a copy of `src`, that is the clipped 1-D window maximum.
fn shifted_max(src: &[f32], dst: &mut [f32], radius: usize, stride: usize) {
    let n = src.len();
    for d in 1..=radius {
        let s = d * stride;
        if s >= n {
            break;
        }
        for (o, v) in dst[..n - s].iter_mut().zip(&src[s..]) {
            *o = o.max(*v);
        }
        for (o, v) in dst[s..].iter_mut().zip(&src[..n - s]) {
            *o = o.max(*v);
        }
    }
}
}

multiversion! {
    /// `dst[i] = max(dst[i], src[i])`.
    fn max_into(dst: &mut [f32], src: &[f32]) {
        for (o, v) in dst.iter_mut().zip(src) {
            *o = o.max(*v);
        }
    }
}

impl FeatureMap {
    /// Every other pixel in both directions, starting at (0, 0).
    pub fn subsample_2(&self) -> FeatureMap {
        let (oh, ow, c) = (self.height().div_ceil(2), self.width().div_ceil(2), self.channels());
        let mut out = FeatureMap::zeros(oh, ow, c);
        for y in 0..oh {
            for x in 0..ow {
                let src = self.pixel(2 * y, 2 * x).to_vec();
                out.pixel_mut(y, x).copy_from_slice(&src);
            }
        }
        out
    }

    /// `max(0, x)`, as a new map.
    pub fn relu(&self) -> FeatureMap {
        let mut out = self.clone();
        out.raw_mut().par_chunks_mut(1 << 14).for_each(|c| c.iter_mut().for_each(|v| *v = v.max(0.0)));
        out
    }

    /// `self += other` (same shape).
    pub fn add_assign(&mut self, other: &FeatureMap) -> Result<(), TensorError> {
        if (self.height(), self.width(), self.channels()) != (other.height(), other.width(), other.channels()) {
            return Err(TensorError::Shape { op: "add", what: "maps of different shapes".to_string() });
        }
        self.raw_mut()
            .par_chunks_mut(1 << 14)
            .zip(other.raw().par_chunks(1 << 14))
            .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(x, y)| *x += y));
        Ok(())
    }

    /// The top-left `height x width` part.
    pub fn crop(&self, height: usize, width: usize) -> FeatureMap {
        let (h, w, c) = (height.min(self.height()), width.min(self.width()), self.channels());
        if (h, w) == (self.height(), self.width()) {
            return self.clone();
        }
        let mut out = FeatureMap::zeros(h, w, c);
        for y in 0..h {
            let row: Vec<f32> = (0..w).flat_map(|x| self.pixel(y, x).to_vec()).collect();
            out.row_mut(y).copy_from_slice(&row);
        }
        out
    }

    /// Bilinear resize to twice the size with `align_corners=True` (PyTorch's arithmetic: source
    /// position `dst * (n - 1) / (2n - 1)` in float32).
    pub fn upsample_bilinear_2x(&self) -> FeatureMap {
        let (h, w, c) = (self.height(), self.width(), self.channels());
        let (oh, ow) = (2 * h, 2 * w);
        let mut out = FeatureMap::zeros(oh, ow, c);
        let scale = |n: usize, m: usize| if m > 1 { (n as f32 - 1.0) / (m as f32 - 1.0) } else { 0.0 };
        let (rh, rw) = (scale(h, oh), scale(w, ow));
        let taps = |dst: usize, r: f32, n: usize| {
            let src = r * dst as f32;
            let i0 = (src as usize).min(n - 1);
            let i1 = if i0 < n - 1 { i0 + 1 } else { i0 };
            let l1 = src - i0 as f32;
            (i0, i1, 1.0 - l1, l1)
        };
        let xs: Vec<_> = (0..ow).map(|x| taps(x, rw, w)).collect();
        let out_pw = ow + 2;
        out.raw_mut()[out_pw * c..(oh + 1) * out_pw * c].par_chunks_mut(out_pw * c).enumerate().for_each(|(y, row)| {
            let (y0, y1, ly0, ly1) = taps(y, rh, h);
            for (x, &(x0, x1, lx0, lx1)) in xs.iter().enumerate() {
                let dst = &mut row[(x + 1) * c..(x + 2) * c];
                let (a, b, p, q) = (self.pixel(y0, x0), self.pixel(y0, x1), self.pixel(y1, x0), self.pixel(y1, x1));
                for ch in 0..c {
                    dst[ch] = ly0 * (lx0 * a[ch] + lx1 * b[ch]) + ly1 * (lx0 * p[ch] + lx1 * q[ch]);
                }
            }
        });
        out
    }
}

#[cfg(test)]
mod level_tests {
    use crate::tensor::simd::{bits, check_levels, test_values};

    #[test]
    fn softmax_row_norms_and_maxima_are_identical_at_every_level() {
        let data = test_values(65 * 37, 11, 20.0);
        check_levels("softmax_block", |level| {
            let mut block = data.clone();
            super::softmax_block::at(level, &mut block, 65);
            bits(&block)
        });
        check_levels("softmax_unscaled", |level| {
            let mut block = data.clone();
            let mut inverses = vec![0.0; 37];
            super::softmax_unscaled::at(level, &mut block, 65, &mut inverses);
            (bits(&block), bits(&inverses))
        });
        check_levels("row_norms", |level| bits(&super::row_norms::at(level, &data, 65, 1e-12)));
        let other = test_values(data.len(), 12, 20.0);
        check_levels("max_into", |level| {
            let mut dst = data.clone();
            super::max_into::at(level, &mut dst, &other);
            bits(&dst)
        });
        check_levels("shifted_max", |level| {
            let mut dst = data.clone();
            super::shifted_max::at(level, &data, &mut dst, 4, 37);
            bits(&dst)
        });
    }

    /// The one-pass exponentials and sums give what exponentiating, then summing, then scaling
    /// gave, to the bit; the unscaled rows scaled by their inverses too.
    #[test]
    fn softmax_in_one_pass_equals_softmax_in_three() {
        use crate::tensor::simd::{exp_approx, max_lanes, sum_lanes};
        let data = test_values(67 * 9, 13, 30.0);
        let mut want = data.clone();
        for row in want.chunks_exact_mut(67) {
            let max = max_lanes(row);
            row.iter_mut().for_each(|v| *v = exp_approx(*v - max));
            let inv = 1.0 / sum_lanes(row);
            row.iter_mut().for_each(|v| *v *= inv);
        }
        let mut got = data.clone();
        super::softmax_block(&mut got, 67);
        assert_eq!(bits(&got), bits(&want));
        let (mut unscaled, mut inverses) = (data, vec![0.0; 9]);
        super::softmax_unscaled(&mut unscaled, 67, &mut inverses);
        let scaled: Vec<f32> =
            unscaled.chunks_exact(67).zip(&inverses).flat_map(|(r, i)| r.iter().map(move |v| v * i)).collect();
        assert_eq!(bits(&scaled), bits(&want));
    }
}
