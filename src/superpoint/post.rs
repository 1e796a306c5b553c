//! SuperPoint post-processing with the semantics of transformers 5.24
//! (`SuperPointForKeypointDetection` + `simple_nms`), minus HF's two-sided border bug:
//! softmax over the 65 channels, dustbin dropped, 8x8 depth-to-space, max-pool NMS with two
//! recovery rounds, strict threshold, a border on all four sides, scores sorted descending,
//! top-k, and bilinear descriptor sampling with HF's (SuperGlue's) coordinate convention.

use super::SuperPointError;
use crate::tensor::{l2_normalize_rows, max_filter_2d, softmax_rows};

/// Cell size of the network: one cell of the 1/8 map covers 8x8 pixels.
const CELL: usize = 8;

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

impl Default for PostParams {
    fn default() -> Self {
        Self { threshold: 0.005, nms_radius: 4, border: 4, max_keypoints: Some(1024) }
    }
}

impl PostParams {
    /// From the CLI/ROS parameter conventions: `max_keypoints < 0` means all.
    pub fn new(threshold: f32, nms_radius: i64, border: i64, max_keypoints: i64) -> Result<Self, SuperPointError> {
        if !threshold.is_finite() || threshold < 0.0 {
            return Err(SuperPointError::Parameter(format!("keypoint threshold must be finite and >= 0, got {threshold}")));
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
    pub scores: Vec<f32>,
    /// `len x descriptor_dim`, row-major.
    pub descriptors: Vec<f32>,
    pub descriptor_dim: usize,
}

impl Keypoints {
    pub fn len(&self) -> usize {
        self.scores.len()
    }
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }
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
    let mut prob = logits.to_vec();
    softmax_rows(&mut prob, ch);
    let (h, w) = (cells_h * CELL, cells_w * CELL);
    let mut heat = vec![0.0; h * w];
    for (cell, p) in prob.chunks_exact(ch).enumerate() {
        let (i, j) = (cell / cells_w, cell % cells_w);
        for r in 0..CELL {
            let row = (i * CELL + r) * w + j * CELL;
            heat[row..row + CELL].copy_from_slice(&p[r * CELL..(r + 1) * CELL]);
        }
    }
    Ok(heat)
}

/// HF's `simple_nms`: keep local maxima of the `(2r+1)^2` window, then twice recover maxima that
/// were only suppressed by suppressed neighbours. Returns the heatmap with non-maxima zeroed.
pub fn nms(heat: &[f32], h: usize, w: usize, radius: usize) -> Result<Vec<f32>, SuperPointError> {
    if radius == 0 {
        return Ok(heat.to_vec());
    }
    let pooled = max_filter_2d(heat, h, w, radius)?;
    let mut keep: Vec<bool> = heat.iter().zip(&pooled).map(|(s, m)| s == m).collect();
    for _ in 0..2 {
        let mask: Vec<f32> = keep.iter().map(|&k| k as u8 as f32).collect();
        let suppressed: Vec<bool> = max_filter_2d(&mask, h, w, radius)?.iter().map(|&m| m > 0.0).collect();
        let rest: Vec<f32> = heat.iter().zip(&suppressed).map(|(&s, &sup)| if sup { 0.0 } else { s }).collect();
        let rest_max = max_filter_2d(&rest, h, w, radius)?;
        for i in 0..keep.len() {
            keep[i] |= rest[i] == rest_max[i] && !suppressed[i];
        }
    }
    Ok(heat.iter().zip(&keep).map(|(&s, &k)| if k { s } else { 0.0 }).collect())
}

/// Keypoints from an NMS'd heatmap and the raw descriptor map (`cells_h x cells_w x dim`,
/// normalised here): threshold, four-sided border, sort by score (ties in row-major order),
/// top-k, then descriptor sampling. Positions are in heatmap pixels.
pub fn extract_keypoints(
    heat_nms: &[f32],
    raw_descriptors: &[f32],
    cells_h: usize,
    cells_w: usize,
    dim: usize,
    params: &PostParams,
) -> Result<Keypoints, SuperPointError> {
    let (h, w) = (cells_h * CELL, cells_w * CELL);
    if heat_nms.len() != h * w || raw_descriptors.len() != cells_h * cells_w * dim {
        return Err(SuperPointError::Parameter(format!(
            "heatmap of {} / descriptors of {} values do not fit {cells_h}x{cells_w} cells of dim {dim}",
            heat_nms.len(),
            raw_descriptors.len()
        )));
    }
    let b = params.border;
    let mut found: Vec<(f32, usize, usize)> = Vec::new();
    if h > 2 * b && w > 2 * b {
        for y in b..h - b {
            let row = &heat_nms[y * w..(y + 1) * w];
            for x in b..w - b {
                if row[x] > params.threshold {
                    found.push((row[x], y, x));
                }
            }
        }
    }
    // Stable: equal scores keep row-major order.
    found.sort_by(|a, c| c.0.total_cmp(&a.0));
    if let Some(k) = params.max_keypoints {
        found.truncate(k);
    }
    let mut desc_map = raw_descriptors.to_vec();
    l2_normalize_rows(&mut desc_map, dim, 1e-12);
    let mut kp = Keypoints { descriptor_dim: dim, ..Default::default() };
    kp.descriptors = vec![0.0; found.len() * dim];
    for (n, &(score, y, x)) in found.iter().enumerate() {
        kp.xy.push([x as f32, y as f32]);
        kp.scores.push(score);
        sample_descriptor(&desc_map, cells_h, cells_w, dim, x as f32, y as f32, &mut kp.descriptors[n * dim..(n + 1) * dim]);
    }
    Ok(kp)
}

/// Bilinear sample of the normalised descriptor map at pixel (x, y), renormalised. Same float
/// operations as HF: shift by s/2 - 0.5, divide by (8 W - 4.5), map to [-1, 1], then
/// `grid_sample(align_corners=True)` with zero padding.
fn sample_descriptor(map: &[f32], ch: usize, cw: usize, dim: usize, x: f32, y: f32, out: &mut [f32]) {
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
            let cell = &map[(cv as usize * cw + cu as usize) * dim..][..dim];
            let weight = wu * wv;
            for (o, &d) in out.iter_mut().zip(cell) {
                *o += weight * d;
            }
        }
    }
    let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
    out.iter_mut().for_each(|v| *v /= norm);
}
