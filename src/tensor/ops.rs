use rayon::prelude::*;

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
        out.raw_mut()
            .par_chunks_mut(out_pw * c)
            .enumerate()
            .filter(|(y, _)| (1..=oh).contains(y))
            .for_each(|(y, row)| {
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
            });
        out
    }
}

/// Softmax over each row of `channels` consecutive values, in place (max-subtracted, no epsilon).
pub fn softmax_rows(data: &mut [f32], channels: usize) {
    if channels == 0 {
        return;
    }
    data.par_chunks_mut(channels * 64).for_each(|block| {
        for row in block.chunks_exact_mut(channels) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for v in row.iter_mut() {
                *v = (*v - max).exp();
                sum += *v;
            }
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|v| *v *= inv);
        }
    });
}

/// Divides each row of `channels` values by `max(||row||_2, eps)`, in place.
pub fn l2_normalize_rows(data: &mut [f32], channels: usize, eps: f32) {
    if channels == 0 {
        return;
    }
    for row in data.chunks_exact_mut(channels) {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(eps);
        row.iter_mut().for_each(|v| *v /= norm);
    }
}

/// Max over the `(2r+1) x (2r+1)` window around each pixel of a row-major `height x width`
/// plane; pixels outside the plane are ignored (PyTorch's max-pool with -inf padding).
///
/// Separable: a horizontal then a vertical pass, each `2r` shifted element-wise maxima in plain
/// loops the compiler vectorises (the vertical one over whole rows).
pub fn max_filter_2d(
    plane: &[f32],
    height: usize,
    width: usize,
    radius: usize,
) -> Result<Vec<f32>, TensorError> {
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
    for (src, dst) in plane.chunks_exact(width).zip(horizontal.chunks_exact_mut(width)) {
        shifted_max(src, dst, radius.min(width - 1), 1);
    }
    let mut out = horizontal.clone();
    shifted_max(&horizontal, &mut out, radius.min(height - 1), width);
    Ok(out)
}

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
