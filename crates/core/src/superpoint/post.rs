//! SuperPoint post-processing with the semantics of transformers 5.24
//! (`SuperPointForKeypointDetection` + `simple_nms`), minus HF's two-sided border bug:
//! softmax over the 65 channels, dustbin dropped, 8x8 depth-to-space, max-pool NMS with two
//! recovery rounds, strict threshold, a border on all four sides, scores sorted descending,
//! top-k, and bilinear descriptor sampling with HF's (SuperGlue's) coordinate convention.

use super::SuperPointError;
use crate::tensor::simd::multiversion;
use rayon::prelude::*;

use crate::tensor::simd::{exp_approx, sum_lanes};
use crate::tensor::{max_filter_2d, row_norms};

/// Cell size of the network: one cell of the 1/8 map covers 8x8 pixels.
const CELL: usize = 8;

/// Post-processing settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PostParams {
    /// Keep pixels whose NMS'd score is strictly above this.
    pub threshold: f32,
    /// NMS window radius in pixels (window `2r+1`); 0 disables NMS.
    pub nms_radius: usize,
    /// Pixels closer than this to any image side are dropped.
    pub border: usize,
    /// Keep the best `k` keypoints; `None` keeps all.
    pub max_keypoints: Option<usize>,
}

/// Default keypoint score threshold (the reference implementation's).
pub const DEFAULT_THRESHOLD: f64 = 0.005;
/// Default NMS radius in network pixels.
pub const DEFAULT_NMS_RADIUS: usize = 4;
/// Default number of keypoints kept per frame.
pub const DEFAULT_MAX_KEYPOINTS: usize = 1024;
/// Pixels this close to a side are dropped (the reference implementation's border).
pub const BORDER: usize = 4;

impl Default for PostParams {
    fn default() -> Self {
        Self {
            threshold: DEFAULT_THRESHOLD as f32,
            nms_radius: DEFAULT_NMS_RADIUS,
            border: BORDER,
            max_keypoints: Some(DEFAULT_MAX_KEYPOINTS),
        }
    }
}

impl PostParams {
    /// A caption for `n` keypoints found with these settings: "568 keypoints (score > 0.005,
    /// NMS 4 px, best 1024)".
    pub fn caption(&self, n: usize) -> String {
        let nms = match self.nms_radius {
            0 => "no NMS".to_string(),
            r => format!("NMS {r} px"),
        };
        let best = self.max_keypoints.map_or("all kept".to_string(), |k| format!("best {k}"));
        format!("{n} keypoints (score > {}, {nms}, {best})", self.threshold)
    }

    /// From the CLI/ROS parameter conventions: `max_keypoints < 0` means all.
    pub fn new(threshold: f32, nms_radius: i64, border: i64, max_keypoints: i64) -> Result<Self, SuperPointError> {
        if !threshold.is_finite() || threshold < 0.0 {
            return Err(SuperPointError::Parameter(format!(
                "keypoint threshold must be finite and >= 0, got {threshold}"
            )));
        }
        if !(0..=64).contains(&nms_radius) {
            return Err(SuperPointError::Parameter(format!("nms radius must be in 0..=64, got {nms_radius}")));
        }
        if !(0..=1024).contains(&border) {
            return Err(SuperPointError::Parameter(format!("border must be in 0..=1024, got {border}")));
        }
        Ok(Self {
            threshold,
            nms_radius: nms_radius as usize,
            border: border as usize,
            max_keypoints: usize::try_from(max_keypoints).ok(),
        })
    }
}

/// Keypoints of one image: positions, scores (descending) and unit-length descriptors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Keypoints {
    /// `[x, y]` pixel positions (pixel centres at integers) in the frame they were mapped to.
    pub xy: Vec<[f32; 2]>,
    /// Scores, descending.
    pub scores: Vec<f32>,
    /// `len x descriptor_dim`, row-major.
    pub descriptors: Vec<f32>,
    /// Descriptor width.
    pub descriptor_dim: usize,
}

impl Keypoints {
    /// How many keypoints.
    pub fn len(&self) -> usize {
        self.scores.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }
    /// Descriptor `i`.
    pub fn descriptor(&self, i: usize) -> &[f32] {
        &self.descriptors[i * self.descriptor_dim..(i + 1) * self.descriptor_dim]
    }
}

/// Softmax over the 65 logits of each cell, dustbin dropped, cells unfolded to a full-resolution
/// `(8 cells_h) x (8 cells_w)` heatmap (channel c of a cell is pixel (c / 8, c % 8) in it).
pub fn depth_to_space_heatmap(logits: &[f32], cells_h: usize, cells_w: usize) -> Result<Vec<f32>, SuperPointError> {
    let ch = CELL * CELL + 1;
    if logits.len() != cells_h * cells_w * ch {
        return Err(SuperPointError::Parameter(format!(
            "logits have {} values, expected {cells_h}x{cells_w}x{ch}",
            logits.len()
        )));
    }
    let (h, w) = (cells_h * CELL, cells_w * CELL);
    let mut heat = vec![0.0; h * w];
    if w == 0 {
        return Ok(heat);
    }
    // One task per row of cells: its softmaxes land in 8 consecutive heatmap rows.
    heat.par_chunks_mut(CELL * w)
        .zip(logits.par_chunks(cells_w * ch))
        .for_each(|(rows, cells)| unfold_cell_row(cells, rows, w));
    Ok(heat)
}

multiversion! {
    /// Softmax of each cell's 65 logits, the first 64 written as the cell's 8x8 pixels.
    fn unfold_cell_row(cells: &[f32], rows: &mut [f32], w: usize) {
        let ch = CELL * CELL + 1;
        let mut p = [0.0f32; CELL * CELL + 1];
        for (j, cell) in cells.chunks_exact(ch).enumerate() {
            let max = cell.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for (e, &v) in p.iter_mut().zip(cell) {
                *e = exp_approx(v - max);
            }
            let inv = 1.0 / sum_lanes(&p);
            for r in 0..CELL {
                let dst = &mut rows[r * w + j * CELL..r * w + (j + 1) * CELL];
                for (d, &e) in dst.iter_mut().zip(&p[r * CELL..(r + 1) * CELL]) {
                    *d = e * inv;
                }
            }
        }
    }
}

/// HF's `simple_nms`: keep local maxima of the `(2r+1)^2` window, then twice recover maxima that
/// were only suppressed by suppressed neighbours. Returns the heatmap with non-kept pixels zeroed.
///
/// Exact for every pixel above `threshold`, which is all that post-processing reads; pixels at or
/// below it are zeroed. That restriction is what makes it fast: a kept pixel at or below the
/// threshold is the maximum of its own window (or of its unsuppressed part), so the pixels it
/// suppresses are at or below the threshold too or were suppressed already, and dropping such
/// pixels from the kept set cannot change the fate of any pixel above the threshold. So one dense
/// max filter finds the first maxima, the suppression masks are painted around the (sparse) kept
/// pixels, and the recovery rounds test only the unsuppressed candidates.
///
/// Returns the row-major indices of the kept pixels above `threshold`, ascending.
pub fn nms(heat: &[f32], h: usize, w: usize, radius: usize, threshold: f32) -> Result<Vec<usize>, SuperPointError> {
    if heat.len() != h * w {
        return Err(SuperPointError::Parameter(format!("heatmap has {} values, expected {h}x{w}", heat.len())));
    }
    if radius == 0 {
        return Ok((0..heat.len()).filter(|&i| heat[i] > threshold).collect());
    }
    let pooled = max_filter_2d(heat, h, w, radius)?;
    let mut kept: Vec<usize> = (0..heat.len()).filter(|&i| heat[i] > threshold && heat[i] == pooled[i]).collect();
    let mut suppressed = vec![false; heat.len()];
    let mut candidates: Option<Vec<usize>> = None;
    let mut painted = 0;
    let window = |i: usize| {
        let (y, x) = (i / w, i % w);
        let rows = y.saturating_sub(radius)..(y + radius + 1).min(h);
        let cols = x.saturating_sub(radius)..(x + radius + 1).min(w);
        rows.map(move |yy| yy * w + cols.start..yy * w + cols.end)
    };
    for _ in 0..2 {
        // Suppression mask of this round: every pixel within `radius` of a kept pixel.
        for &i in &kept[painted..] {
            for span in window(i) {
                suppressed[span].fill(true);
            }
        }
        painted = kept.len();
        // Candidates: unsuppressed pixels above the threshold (few, once the maxima are painted).
        let list = candidates
            .get_or_insert_with(|| (0..heat.len()).filter(|&i| !suppressed[i] && heat[i] > threshold).collect());
        list.retain(|&i| !suppressed[i]);
        // Recovered: candidates that are the maximum of the unsuppressed part of their window
        // (suppressed pixels count as 0 in HF; here they are skipped, being below any candidate).
        let recovered: Vec<usize> = list
            .iter()
            .copied()
            .filter(|&i| {
                window(i)
                    .all(|span| suppressed[span.clone()].iter().zip(&heat[span]).all(|(&sup, &v)| sup || v <= heat[i]))
            })
            .collect();
        kept.extend(recovered);
    }
    kept.sort_unstable();
    Ok(kept)
}

/// Keypoints from the heatmap, the pixels [`nms`] kept (row-major indices) and the raw descriptor
/// map (`cells_h x cells_w x dim`, normalised here): four-sided border, sort by score (ties in
/// row-major order), top-k, then descriptor sampling. Positions are in heatmap pixels.
pub fn extract_keypoints(
    heat: &[f32],
    kept: &[usize],
    raw_descriptors: &[f32],
    cells_h: usize,
    cells_w: usize,
    dim: usize,
    params: &PostParams,
) -> Result<Keypoints, SuperPointError> {
    let (h, w) = (cells_h * CELL, cells_w * CELL);
    if heat.len() != h * w || raw_descriptors.len() != cells_h * cells_w * dim {
        return Err(SuperPointError::Parameter(format!(
            "heatmap of {} / descriptors of {} values do not fit {cells_h}x{cells_w} cells of dim {dim}",
            heat.len(),
            raw_descriptors.len()
        )));
    }
    let b = params.border;
    let mut found: Vec<(f32, usize, usize)> = kept
        .iter()
        .filter(|&&i| i < heat.len() && heat[i] > params.threshold)
        .map(|&i| (heat[i], i / w, i % w))
        .filter(|&(_, y, x)| y >= b && x >= b && y + b < h && x + b < w)
        .collect();
    // Stable: equal scores keep row-major order.
    found.sort_by(|a, c| c.0.total_cmp(&a.0));
    if let Some(k) = params.max_keypoints {
        found.truncate(k);
    }
    // HF normalises the whole map, then samples; scaling each sampled cell by its norm is the
    // same arithmetic without writing a normalised copy of the map.
    let norms = row_norms(raw_descriptors, dim, 1e-12);
    let mut kp = Keypoints { descriptor_dim: dim, ..Default::default() };
    kp.descriptors = vec![0.0; found.len() * dim];
    for (n, &(score, y, x)) in found.iter().enumerate() {
        kp.xy.push([x as f32, y as f32]);
        kp.scores.push(score);
        let out = &mut kp.descriptors[n * dim..(n + 1) * dim];
        sample_descriptor(raw_descriptors, &norms, cells_h, cells_w, x as f32, y as f32, out);
    }
    Ok(kp)
}

/// Bilinear sample of the normalised descriptor map at pixel (x, y), renormalised. Same float
/// operations as HF: shift by s/2 - 0.5, divide by (8 W - 4.5), map to [-1, 1], then
/// `grid_sample(align_corners=True)` with zero padding.
fn sample_descriptor(map: &[f32], norms: &[f32], ch: usize, cw: usize, x: f32, y: f32, out: &mut [f32]) {
    let dim = out.len();
    let s = CELL as f32;
    let grid = |v: f32, cells: usize| {
        let g = (v - s / 2.0 + 0.5) / (cells as f32 * s - s / 2.0 - 0.5) * 2.0 - 1.0;
        (g + 1.0) / 2.0 * (cells as f32 - 1.0)
    };
    let (u, v) = (grid(x, cw), grid(y, ch));
    let (u0, v0) = (u.floor(), v.floor());
    let (fu, fv) = (u - u0, v - v0);
    out.fill(0.0);
    for (dv, wv) in [(0, 1.0 - fv), (1, fv)] {
        for (du, wu) in [(0, 1.0 - fu), (1, fu)] {
            let (cu, cv) = (u0 as i64 + du, v0 as i64 + dv);
            if cu < 0 || cv < 0 || cu >= cw as i64 || cv >= ch as i64 {
                continue;
            }
            let c = cv as usize * cw + cu as usize;
            accumulate_scaled(out, &map[c * dim..][..dim], wu * wv / norms[c]);
        }
    }
    let norm = row_norms(out, dim, 1e-12)[0];
    out.iter_mut().for_each(|v| *v /= norm);
}

multiversion! {
    /// `out += scale * cell`, vectorised.
    fn accumulate_scaled(out: &mut [f32], cell: &[f32], scale: f32) {
        for (o, &d) in out.iter_mut().zip(cell) {
            *o += scale * d;
        }
    }
}

#[cfg(test)]
mod level_tests {
    use crate::tensor::simd::{bits, check_levels, test_values};

    #[test]
    fn cell_softmax_and_descriptor_sampling_are_identical_at_every_level() {
        let w = 5;
        let cells = test_values(w * (super::CELL * super::CELL + 1), 41, 8.0);
        check_levels("unfold_cell_row", |level| {
            let mut rows = vec![0.0; super::CELL * w * super::CELL];
            super::unfold_cell_row::at(level, &cells, &mut rows, w * super::CELL);
            bits(&rows)
        });
        let cell = test_values(256, 42, 1.0);
        let start = test_values(256, 43, 1.0);
        check_levels("accumulate_scaled", |level| {
            let mut out = start.clone();
            super::accumulate_scaled::at(level, &mut out, &cell, 0.37);
            bits(&out)
        });
    }
}
