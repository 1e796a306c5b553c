use crate::tensor::FeatureMap;

/// A dense pointmap: one 3-D point and one confidence per pixel, row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pointmap {
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// `height x width x 3`.
    pub points: Vec<f32>,
    /// `height x width`, >= the model's minimum confidence (1).
    pub confidence: Vec<f32>,
}

impl Pointmap {
    /// DUSt3R's output activation: the xyz direction is kept and its norm `d` re-mapped to
    /// `expm1(d)` (depth_mode "exp"); confidence is `conf_min + exp(c)` (conf_mode "exp").
    pub fn from_head_output(raw: &FeatureMap, conf_min: f32) -> Self {
        let (height, width) = (raw.height(), raw.width());
        let mut points = Vec::with_capacity(height * width * 3);
        let mut confidence = Vec::with_capacity(height * width);
        for y in 0..height {
            for x in 0..width {
                let v = raw.pixel(y, x);
                let (px, py, pz) = (v[0], v[1], v[2]);
                let d = (px * px + py * py + pz * pz).sqrt();
                let s = (d as f64).exp_m1() as f32 / d.max(1e-8);
                points.extend_from_slice(&[px * s, py * s, pz * s]);
                confidence.push(conf_min + v[3].exp());
            }
        }
        Self { height, width, points, confidence }
    }
}
