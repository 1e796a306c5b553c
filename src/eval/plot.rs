//! The metrics as a picture: per-pair errors on the left, the recall curve with the AUC values
//! on the right. Drawn with the `image` crate and a built-in 5x7 pixel font (upper case, digits
//! and a few signs): a plotting crate would need a font file or the system's fonts, neither of
//! which a robot or CI machine reliably has.

use image::{Rgb, RgbImage};

use nalgebra::{Matrix3, Vector3};

use super::trajectory::TrajectoryReport;
use super::Report;

const GLYPHS: &[(char, [&str; 7])] = &[
    ('0', ["01110", "10001", "10011", "10101", "11001", "10001", "01110"]),
    ('1', ["00100", "01100", "00100", "00100", "00100", "00100", "01110"]),
    ('2', ["01110", "10001", "00001", "00010", "00100", "01000", "11111"]),
    ('3', ["11110", "00001", "00001", "01110", "00001", "00001", "11110"]),
    ('4', ["00010", "00110", "01010", "10010", "11111", "00010", "00010"]),
    ('5', ["11111", "10000", "11110", "00001", "00001", "10001", "01110"]),
    ('6', ["00110", "01000", "10000", "11110", "10001", "10001", "01110"]),
    ('7', ["11111", "00001", "00010", "00100", "01000", "01000", "01000"]),
    ('8', ["01110", "10001", "10001", "01110", "10001", "10001", "01110"]),
    ('9', ["01110", "10001", "10001", "01111", "00001", "00010", "01100"]),
    ('.', ["00000", "00000", "00000", "00000", "00000", "01100", "01100"]),
    ('@', ["01110", "10001", "10111", "10101", "10111", "10000", "01110"]),
    ('/', ["00001", "00010", "00010", "00100", "01000", "01000", "10000"]),
    (':', ["00000", "01100", "01100", "00000", "01100", "01100", "00000"]),
    ('-', ["00000", "00000", "00000", "11111", "00000", "00000", "00000"]),
    ('=', ["00000", "00000", "11111", "00000", "11111", "00000", "00000"]),
    ('(', ["00010", "00100", "01000", "01000", "01000", "00100", "00010"]),
    (')', ["01000", "00100", "00010", "00010", "00010", "00100", "01000"]),
    ('%', ["11001", "11010", "00010", "00100", "01000", "01011", "10011"]),
    ('+', ["00000", "00100", "00100", "11111", "00100", "00100", "00000"]),
    (',', ["00000", "00000", "00000", "00000", "01100", "00100", "01000"]),
    ('A', ["01110", "10001", "10001", "11111", "10001", "10001", "10001"]),
    ('B', ["11110", "10001", "10001", "11110", "10001", "10001", "11110"]),
    ('C', ["01110", "10001", "10000", "10000", "10000", "10001", "01110"]),
    ('D', ["11110", "10001", "10001", "10001", "10001", "10001", "11110"]),
    ('E', ["11111", "10000", "10000", "11110", "10000", "10000", "11111"]),
    ('F', ["11111", "10000", "10000", "11110", "10000", "10000", "10000"]),
    ('G', ["01110", "10001", "10000", "10111", "10001", "10001", "01111"]),
    ('H', ["10001", "10001", "10001", "11111", "10001", "10001", "10001"]),
    ('I', ["01110", "00100", "00100", "00100", "00100", "00100", "01110"]),
    ('K', ["10001", "10010", "10100", "11000", "10100", "10010", "10001"]),
    ('L', ["10000", "10000", "10000", "10000", "10000", "10000", "11111"]),
    ('M', ["10001", "11011", "10101", "10101", "10001", "10001", "10001"]),
    ('N', ["10001", "11001", "10101", "10011", "10001", "10001", "10001"]),
    ('O', ["01110", "10001", "10001", "10001", "10001", "10001", "01110"]),
    ('P', ["11110", "10001", "10001", "11110", "10000", "10000", "10000"]),
    ('R', ["11110", "10001", "10001", "11110", "10100", "10010", "10001"]),
    ('S', ["01111", "10000", "10000", "01110", "00001", "00001", "11110"]),
    ('T', ["11111", "00100", "00100", "00100", "00100", "00100", "00100"]),
    ('U', ["10001", "10001", "10001", "10001", "10001", "10001", "01110"]),
    ('V', ["10001", "10001", "10001", "10001", "10001", "01010", "00100"]),
    ('W', ["10001", "10001", "10001", "10101", "10101", "10101", "01010"]),
    ('X', ["10001", "10001", "01010", "00100", "01010", "10001", "10001"]),
    ('Y', ["10001", "10001", "01010", "00100", "00100", "00100", "00100"]),
];

const WHITE: Rgb<u8> = Rgb([255, 255, 255]);
const BLACK: Rgb<u8> = Rgb([0, 0, 0]);
const GREY: Rgb<u8> = Rgb([200, 200, 200]);
/// Colour of the rotation errors.
pub const ROTATION: Rgb<u8> = Rgb([214, 39, 40]);
/// Colour of the translation-direction errors.
pub const TRANSLATION: Rgb<u8> = Rgb([31, 119, 180]);
const CURVE: Rgb<u8> = Rgb([44, 160, 44]);

fn put(img: &mut RgbImage, x: i64, y: i64, c: Rgb<u8>) {
    if x >= 0 && y >= 0 && (x as u32) < img.width() && (y as u32) < img.height() {
        img.put_pixel(x as u32, y as u32, c);
    }
}

/// `text` (upper-cased; characters without a glyph leave a gap) with its top-left at (x, y),
/// each font pixel `scale` x `scale`.
pub fn draw_text(img: &mut RgbImage, x: i64, y: i64, text: &str, scale: i64, c: Rgb<u8>) {
    for (i, ch) in text.to_uppercase().chars().enumerate() {
        let Some((_, rows)) = GLYPHS.iter().find(|(g, _)| *g == ch) else { continue };
        for (r, row) in rows.iter().enumerate() {
            for (col, bit) in row.bytes().enumerate() {
                if bit == b'1' {
                    for dy in 0..scale {
                        for dx in 0..scale {
                            put(img, x + (i as i64 * 6 + col as i64) * scale + dx, y + r as i64 * scale + dy, c);
                        }
                    }
                }
            }
        }
    }
}

fn line(img: &mut RgbImage, (x0, y0): (f64, f64), (x1, y1): (f64, f64), c: Rgb<u8>) {
    let n = ((x1 - x0).abs().max((y1 - y0).abs()).ceil() as usize).max(1);
    for i in 0..=n {
        let t = i as f64 / n as f64;
        put(img, (x0 + (x1 - x0) * t).round() as i64, (y0 + (y1 - y0) * t).round() as i64, c);
    }
}

fn marker(img: &mut RgbImage, x: f64, y: f64, c: Rgb<u8>) {
    for dy in -2..=2 {
        for dx in -2..=2 {
            put(img, x.round() as i64 + dx, y.round() as i64 + dy, c);
        }
    }
}

fn cross(img: &mut RgbImage, x: f64, y: f64, c: Rgb<u8>) {
    for d in -4..=4 {
        put(img, x.round() as i64 + d, y.round() as i64 + d, c);
        put(img, x.round() as i64 + d, y.round() as i64 - d, c);
    }
}

/// A tick's number, without float noise or trailing zeros.
fn tick_label(t: f64) -> String {
    let s = format!("{t:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A plot area: pixel box and data ranges.
struct Axes {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    x_max: f64,
    y_max: f64,
}

impl Axes {
    fn at(&self, x: f64, y: f64) -> (f64, f64) {
        (self.left + x / self.x_max * self.width, self.top + self.height - y.min(self.y_max) / self.y_max * self.height)
    }
    fn frame(&self, img: &mut RgbImage, y_ticks: &[f64], x_ticks: &[f64], y_label: &str, x_label: &str) {
        for &t in y_ticks {
            let (_, y) = self.at(0.0, t);
            line(img, (self.left, y), (self.left + self.width, y), GREY);
            draw_text(img, self.left as i64 - 44, y as i64 - 7, &format!("{:>4}", tick_label(t)), 2, BLACK);
        }
        for &t in x_ticks {
            let (x, _) = self.at(t, 0.0);
            line(img, (x, self.top), (x, self.top + self.height), GREY);
            draw_text(img, x as i64 - 6, (self.top + self.height) as i64 + 8, &tick_label(t), 2, BLACK);
        }
        line(img, (self.left, self.top + self.height), (self.left + self.width, self.top + self.height), BLACK);
        line(img, (self.left, self.top), (self.left, self.top + self.height), BLACK);
        draw_text(img, self.left as i64 - 40, self.top as i64 - 24, y_label, 2, BLACK);
        draw_text(
            img,
            (self.left + self.width) as i64 - x_label.len() as i64 * 12,
            (self.top + self.height) as i64 + 28,
            x_label,
            2,
            BLACK,
        );
    }
}

/// The picture of a report: left, each pair's rotation (red) and translation-direction (blue)
/// error in degrees (clipped at the top; an X at the top for pairs without a pose); right, the
/// share of pairs with max(rotation, translation) error up to each angle, with the AUC values.
pub fn render(report: &Report) -> RgbImage {
    let mut img = RgbImage::from_pixel(1000, 540, WHITE);
    let errors_max = report
        .pairs
        .iter()
        .flat_map(|p| [p.rotation_error_deg, p.translation_error_deg])
        .flatten()
        .fold(0.0f64, f64::max);
    let y_max = if errors_max > 30.0 { 90.0 } else { 30.0 };
    let n = report.pairs.len().max(1) as f64;
    let left = Axes { left: 70.0, top: 90.0, width: 380.0, height: 360.0, x_max: n + 1.0, y_max };
    let ticks: Vec<f64> = (0..=3).map(|i| y_max * i as f64 / 3.0).collect();
    let x_ticks: Vec<f64> = if n <= 10.0 {
        (1..=n as usize).map(|i| i as f64).collect()
    } else {
        (1..=5).map(|i| (n * i as f64 / 5.0).round()).collect()
    };
    left.frame(&mut img, &ticks, &x_ticks, "ERROR (DEG)", "PAIR");
    for (i, p) in report.pairs.iter().enumerate() {
        let x = i as f64 + 1.0;
        match (p.rotation_error_deg, p.translation_error_deg) {
            (None, _) => {
                let (px, py) = left.at(x, y_max);
                cross(&mut img, px, py, BLACK);
            }
            (Some(r), t) => {
                let (px, py) = left.at(x, r);
                marker(&mut img, px, py, ROTATION);
                if let Some(t) = t {
                    let (px, py) = left.at(x, t);
                    marker(&mut img, px + 3.0, py, TRANSLATION);
                }
            }
        }
    }
    draw_text(&mut img, 70, 10, "ROTATION", 2, ROTATION);
    draw_text(&mut img, 190, 10, "TRANSLATION DIRECTION", 2, TRANSLATION);
    draw_text(
        &mut img,
        70,
        34,
        &format!("{} PAIRS  {} NO POSE (X)", report.num_pairs, report.num_without_pose),
        2,
        BLACK,
    );

    // The recall curve over 0..30 degrees.
    let right = Axes { left: 580.0, top: 90.0, width: 380.0, height: 360.0, x_max: 30.0, y_max: 1.0 };
    right.frame(&mut img, &[0.0, 0.5, 1.0], &[0.0, 5.0, 10.0, 30.0], "RECALL", "MAX ERROR (DEG)");
    let mut sorted: Vec<f64> = report.pairs.iter().map(super::PairMetric::max_error).collect();
    sorted.sort_by(f64::total_cmp);
    let total = sorted.len().max(1) as f64;
    let mut prev = right.at(0.0, 0.0);
    for (i, &e) in sorted.iter().enumerate().filter(|(_, e)| e.is_finite() && **e <= 30.0) {
        let p = right.at(e, (i + 1) as f64 / total);
        line(&mut img, prev, p, CURVE);
        prev = p;
    }
    line(&mut img, prev, (right.left + right.width, prev.1), CURVE);
    for (k, (th, auc)) in report.auc_thresholds_deg.iter().zip(&report.auc).enumerate() {
        draw_text(&mut img, 540 + 150 * k as i64, 10, &format!("AUC@{th}={auc:.2}"), 2, BLACK);
    }
    img
}

/// Colour of the ground truth.
pub const GROUND_TRUTH: Rgb<u8> = Rgb([90, 90, 90]);
/// Colour of the aligned estimate.
pub const ESTIMATE: Rgb<u8> = Rgb([214, 39, 40]);

/// Two unit axes spanning the plane in which `points` spread most (their covariance's two
/// largest eigenvectors): a top view whatever the ground truth's up axis.
fn view_plane(points: &[[f64; 3]]) -> (Vector3<f64>, Vector3<f64>, Vector3<f64>) {
    let n = points.len().max(1) as f64;
    let mean = points.iter().map(|p| Vector3::from(*p)).sum::<Vector3<f64>>() / n;
    let cov = points
        .iter()
        .map(|p| (Vector3::from(*p) - mean) * (Vector3::from(*p) - mean).transpose())
        .sum::<Matrix3<f64>>()
        / n;
    let eig = cov.symmetric_eigen();
    let mut order = [0usize, 1, 2];
    order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
    (mean, eig.eigenvectors.column(order[0]).into(), eig.eigenvectors.column(order[1]).into())
}

/// Round tick spacing for a span.
fn tick_step(span: f64) -> f64 {
    let raw = (span / 4.0).max(1e-9);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// The picture of a trajectory report: left, the ground truth (grey) and the aligned estimate
/// (red) seen from above (the plane of the ground truth's two widest directions, metres from
/// its middle); right, each scored frame's absolute error over time.
pub fn render_trajectory(r: &TrajectoryReport) -> RgbImage {
    let mut img = RgbImage::from_pixel(1000, 540, WHITE);
    let gt: Vec<[f64; 3]> = r.points.iter().map(|p| p.ground_truth).collect();
    let (mid, a, b) = view_plane(&gt);
    let flat = |p: &[f64; 3]| {
        let d = Vector3::from(*p) - mid;
        (d.dot(&a), d.dot(&b))
    };
    let all: Vec<(f64, f64)> = r.points.iter().flat_map(|p| [flat(&p.ground_truth), flat(&p.estimate)]).collect();
    let half = all.iter().fold(1e-6f64, |m, (x, y)| m.max(x.abs()).max(y.abs())) * 1.1;
    let top = Axes { left: 70.0, top: 90.0, width: 380.0, height: 360.0, x_max: 2.0 * half, y_max: 2.0 * half };
    let step = tick_step(2.0 * half);
    let ticks: Vec<f64> = (0..).map(|i| i as f64 * step).take_while(|t| *t <= 2.0 * half + 1e-12).collect();
    top.frame(&mut img, &ticks, &ticks, "TOP VIEW (M)", "M");
    for (colour, pick) in [(GROUND_TRUTH, 0usize), (ESTIMATE, 1)] {
        let mut prev: Option<(f64, f64)> = None;
        for p in &r.points {
            let (x, y) = flat(if pick == 0 { &p.ground_truth } else { &p.estimate });
            let at = top.at(x + half, y + half);
            if let Some(q) = prev {
                line(&mut img, q, at, colour);
            }
            marker(&mut img, at.0, at.1, colour);
            prev = Some(at);
        }
    }
    draw_text(&mut img, 70, 10, "GROUND TRUTH", 2, GROUND_TRUTH);
    draw_text(&mut img, 240, 10, "ESTIMATE (SIM3 ALIGNED)", 2, ESTIMATE);
    draw_text(
        &mut img,
        70,
        34,
        &format!("TRACKED {}/{} FRAMES  SCALE {:.3}", r.num_tracked, r.num_frames, r.scale),
        2,
        BLACK,
    );

    // The error over time.
    let t0 = r.points.first().map_or(0.0, |p| p.t);
    let t_max = r.points.last().map_or(1.0, |p| p.t - t0).max(1e-3);
    let e_max = (r.ate.max * 1.2).max(1e-6);
    let right = Axes { left: 580.0, top: 90.0, width: 380.0, height: 360.0, x_max: t_max, y_max: e_max };
    let (ts, es) = (tick_step(t_max), tick_step(e_max));
    let x_ticks: Vec<f64> = (0..).map(|i| i as f64 * ts).take_while(|t| *t <= t_max + 1e-12).collect();
    let y_ticks: Vec<f64> = (0..).map(|i| i as f64 * es).take_while(|e| *e <= e_max + 1e-12).collect();
    right.frame(&mut img, &y_ticks, &x_ticks, "ATE (M)", "TIME (S)");
    let mut prev = None;
    for p in &r.points {
        let at = right.at(p.t - t0, p.error);
        if let Some(q) = prev {
            line(&mut img, q, at, ESTIMATE);
        }
        prev = Some(at);
    }
    draw_text(
        &mut img,
        540,
        10,
        &format!("ATE RMSE {:.4} M ({:.2} % OF PATH)", r.ate.rmse, r.ate_percent_of_path),
        2,
        BLACK,
    );
    draw_text(
        &mut img,
        540,
        34,
        &format!("RPE {:.4} M, {:.3} DEG", r.rpe_translation.rmse, r.rpe_rotation_deg.rmse),
        2,
        BLACK,
    );
    img
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_drawn_from_the_glyphs() {
        let mut img = RgbImage::from_pixel(100, 30, WHITE);
        draw_text(&mut img, 2, 2, "AUC@5", 2, BLACK);
        let lit = img.pixels().filter(|p| **p == BLACK).count();
        let bits: usize = "AUC@5"
            .chars()
            .map(|c| {
                GLYPHS.iter().find(|(g, _)| *g == c).unwrap().1.iter().map(|r| r.matches('1').count()).sum::<usize>()
            })
            .sum();
        assert_eq!(lit, bits * 4);
        // Every glyph is 7 rows of 5.
        assert!(GLYPHS
            .iter()
            .all(|(_, rows)| rows.iter().all(|r| r.len() == 5 && r.bytes().all(|b| b == b'0' || b == b'1'))));
    }
}
