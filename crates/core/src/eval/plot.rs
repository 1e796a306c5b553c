//! The metrics as a picture: per-pair errors on the left, the recall curve with the AUC values
//! on the right; the trajectory from above and its error over time. Drawn with the `image` crate,
//! the text in DejaVu Sans (`crate::image::text`, embedded: no font file or system font needed on
//! a robot or CI machine), each plot with a title naming the run, axis labels with units and a
//! legend.

use image::{Rgb, RgbImage};

use nalgebra::{Matrix3, Vector3};

use super::trajectory::TrajectoryReport;
use super::Report;
use crate::image::text::{draw_text, text_width};

/// The pictures' size.
pub const SIZE: (u32, u32) = (1000, 600);
/// Text sizes in pixels: the title, labels and legends, tick numbers.
const TITLE: f32 = 20.0;
const LABEL: f32 = 15.0;
const TICK: f32 = 13.0;

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

/// `text` with the top of its line at (`x`, `y`); returns the x after it.
fn text(img: &mut RgbImage, x: f64, y: f64, text: &str, size: f32, c: Rgb<u8>) -> f64 {
    f64::from(draw_text(img, x as f32, y as f32, text, size, c.0))
}

/// `text` ending at `right`.
fn text_right(img: &mut RgbImage, right: f64, y: f64, s: &str, size: f32, c: Rgb<u8>) {
    text(img, right - f64::from(text_width(s, size)), y, s, size, c);
}

/// `text` centred on `x`.
fn text_centred(img: &mut RgbImage, x: f64, y: f64, s: &str, size: f32, c: Rgb<u8>) {
    text(img, x - f64::from(text_width(s, size)) / 2.0, y, s, size, c);
}

/// A legend entry at (`x`, `y`): a swatch of `c`, then `label`; returns the x where the next
/// entry goes.
fn legend(img: &mut RgbImage, x: f64, y: f64, c: Rgb<u8>, label: &str) -> f64 {
    let side = (LABEL * 0.75) as i64;
    let top = (y + f64::from(LABEL) * 0.3) as i64;
    for dy in 0..side {
        for dx in 0..side {
            put(img, x as i64 + dx, top + dy, c);
        }
    }
    text(img, x + side as f64 + 6.0, y, label, LABEL, BLACK) + 24.0
}

/// The title and, under it, one line of what the numbers are.
fn heading(img: &mut RgbImage, title: &str, summary: &str) {
    text(img, 20.0, 12.0, title, TITLE, BLACK);
    text(img, 20.0, 42.0, summary, LABEL, BLACK);
}

fn line(img: &mut RgbImage, from: (f64, f64), to: (f64, f64), c: Rgb<u8>) {
    crate::image::draw::draw_line(img, from, to, c.0);
}

fn marker(img: &mut RgbImage, x: f64, y: f64, c: Rgb<u8>) {
    for dy in -2..=2 {
        for dx in -2..=2 {
            put(img, x.round() as i64 + dx, y.round() as i64 + dy, c);
        }
    }
}

/// A hollow square around (`x`, `y`), two pixels thick, that a `marker` at the same place
/// leaves visible: where the estimate lies on the ground truth, both show.
fn outline(img: &mut RgbImage, x: f64, y: f64, c: Rgb<u8>) {
    let (cx, cy) = (x.round() as i64, y.round() as i64);
    for dy in -5i64..=5 {
        for dx in -5i64..=5 {
            if dx.abs().max(dy.abs()) >= 4 {
                put(img, cx + dx, cy + dy, c);
            }
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
    /// Grid lines with their numbers, the axes, the y label above the y axis and the x label
    /// centred under the x axis (both with their units).
    fn frame(&self, img: &mut RgbImage, y_ticks: &[f64], x_ticks: &[f64], y_label: &str, x_label: &str) {
        let bottom = self.top + self.height;
        for &t in y_ticks {
            let (_, y) = self.at(0.0, t);
            line(img, (self.left, y), (self.left + self.width, y), GREY);
            text_right(img, self.left - 8.0, y - f64::from(TICK) * 0.6, &tick_label(t), TICK, BLACK);
        }
        for &t in x_ticks {
            let (x, _) = self.at(t, 0.0);
            line(img, (x, self.top), (x, bottom), GREY);
            text_centred(img, x, bottom + 6.0, &tick_label(t), TICK, BLACK);
        }
        line(img, (self.left, bottom), (self.left + self.width, bottom), BLACK);
        line(img, (self.left, self.top), (self.left, bottom), BLACK);
        text(img, self.left - 40.0, self.top - 26.0, y_label, LABEL, BLACK);
        text_centred(img, self.left + self.width / 2.0, bottom + 26.0, x_label, LABEL, BLACK);
    }
}

/// The picture of a report: left, each pair's rotation (red) and translation-direction (blue)
/// error in degrees (clipped at the top; an X at the top for pairs without a pose); right, the
/// share of pairs with max(rotation, translation) error up to each angle, with the AUC values;
/// `title` names the run.
pub fn render(report: &Report, title: &str) -> RgbImage {
    let mut img = RgbImage::from_pixel(SIZE.0, SIZE.1, WHITE);
    let errors_max = report
        .pairs
        .iter()
        .flat_map(|p| [p.rotation_error_deg, p.translation_error_deg])
        .flatten()
        .fold(0.0f64, f64::max);
    let y_max = if errors_max > 30.0 { 90.0 } else { 30.0 };
    let n = report.pairs.len().max(1) as f64;
    let left = Axes { left: 80.0, top: 130.0, width: 370.0, height: 390.0, x_max: n + 1.0, y_max };
    let ticks: Vec<f64> = (0..=3).map(|i| y_max * i as f64 / 3.0).collect();
    let x_ticks: Vec<f64> = if n <= 10.0 {
        (1..=n as usize).map(|i| i as f64).collect()
    } else {
        (1..=5).map(|i| (n * i as f64 / 5.0).round()).collect()
    };
    left.frame(&mut img, &ticks, &x_ticks, "error (degrees)", "pair (in input order)");
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
    let auc: Vec<String> =
        report.auc_thresholds_deg.iter().zip(&report.auc).map(|(th, auc)| format!("{auc:.2} at {th}°")).collect();
    heading(
        &mut img,
        title,
        &format!("{} pairs, {} without a pose; pose AUC {}", report.num_pairs, report.num_without_pose, auc.join(", ")),
    );
    let x = legend(&mut img, 20.0, 70.0, ROTATION, "rotation error");
    let x = legend(&mut img, x, 70.0, TRANSLATION, "translation direction error");
    let x = legend(&mut img, x, 70.0, BLACK, "no pose (x, at the top)");
    legend(&mut img, x, 70.0, CURVE, "recall");

    // The recall curve over 0..30 degrees.
    let right = Axes { left: 590.0, top: 130.0, width: 370.0, height: 390.0, x_max: 30.0, y_max: 1.0 };
    right.frame(
        &mut img,
        &[0.0, 0.5, 1.0],
        &[0.0, 5.0, 10.0, 30.0],
        "recall (share of pairs)",
        "max(rotation, translation) error (degrees)",
    );
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

/// The trajectory picture's two plot areas, pixels (left, top, width, height): the top view and
/// the error over time.
const TRAJECTORY_PANELS: [(f64, f64, f64, f64); 2] = [(80.0, 130.0, 370.0, 390.0), (590.0, 130.0, 370.0, 390.0)];

/// The picture of a trajectory report: left, the ground truth (grey outlines) and the aligned estimate
/// (red) seen from above (the plane of the ground truth's two widest directions, metres from
/// its middle); right, each scored frame's absolute error over time; `title` names the run.
pub fn render_trajectory(r: &TrajectoryReport, title: &str) -> RgbImage {
    let mut img = RgbImage::from_pixel(SIZE.0, SIZE.1, WHITE);
    let gt: Vec<[f64; 3]> = r.points.iter().map(|p| p.ground_truth).collect();
    let (mid, a, b) = view_plane(&gt);
    let flat = |p: &[f64; 3]| {
        let d = Vector3::from(*p) - mid;
        (d.dot(&a), d.dot(&b))
    };
    let all: Vec<(f64, f64)> = r.points.iter().flat_map(|p| [flat(&p.ground_truth), flat(&p.estimate)]).collect();
    let half = all.iter().fold(1e-6f64, |m, (x, y)| m.max(x.abs()).max(y.abs())) * 1.1;
    let [(left, top, width, height), error_box] = TRAJECTORY_PANELS;
    let top = Axes { left, top, width, height, x_max: 2.0 * half, y_max: 2.0 * half };
    let step = tick_step(2.0 * half);
    let ticks: Vec<f64> = (0..).map(|i| i as f64 * step).take_while(|t| *t <= 2.0 * half + 1e-12).collect();
    top.frame(&mut img, &ticks, &ticks, "top view (m)", "m, along the widest direction");
    for (colour, pick) in [(GROUND_TRUTH, 0usize), (ESTIMATE, 1)] {
        let mut prev: Option<(f64, f64)> = None;
        for p in &r.points {
            let (x, y) = flat(if pick == 0 { &p.ground_truth } else { &p.estimate });
            let at = top.at(x + half, y + half);
            if let Some(q) = prev {
                line(&mut img, q, at, colour);
            }
            if pick == 0 {
                outline(&mut img, at.0, at.1, colour);
            } else {
                marker(&mut img, at.0, at.1, colour);
            }
            prev = Some(at);
        }
    }
    heading(
        &mut img,
        title,
        &format!(
            "tracked {} of {} frames; ATE RMSE {:.4} m ({:.2} % of the path); RPE {:.4} m, {:.3}°; scale {:.3}",
            r.num_tracked,
            r.num_frames,
            r.ate.rmse,
            r.ate_percent_of_path,
            r.rpe_translation.rmse,
            r.rpe_rotation_deg.rmse,
            r.scale
        ),
    );
    let x = legend(&mut img, 20.0, 70.0, GROUND_TRUTH, "ground truth");
    legend(&mut img, x, 70.0, ESTIMATE, "estimate (Sim(3)-aligned to it)");

    // The error over time.
    let t0 = r.points.first().map_or(0.0, |p| p.t);
    let t_max = r.points.last().map_or(1.0, |p| p.t - t0).max(1e-3);
    let e_max = (r.ate.max * 1.2).max(1e-6);
    let (left, top, width, height) = error_box;
    let right = Axes { left, top, width, height, x_max: t_max, y_max: e_max };
    let (ts, es) = (tick_step(t_max), tick_step(e_max));
    let x_ticks: Vec<f64> = (0..).map(|i| i as f64 * ts).take_while(|t| *t <= t_max + 1e-12).collect();
    let y_ticks: Vec<f64> = (0..).map(|i| i as f64 * es).take_while(|e| *e <= e_max + 1e-12).collect();
    right.frame(&mut img, &y_ticks, &x_ticks, "absolute trajectory error (m)", "time since the first frame (s)");
    let mut prev = None;
    for p in &r.points {
        let at = right.at(p.t - t0, p.error);
        if let Some(q) = prev {
            line(&mut img, q, at, ESTIMATE);
        }
        prev = Some(at);
    }
    img
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_in_a_real_typeface_and_aligned() {
        let mut img = RgbImage::from_pixel(200, 40, WHITE);
        text_right(&mut img, 190.0, 5.0, "AUC@5° 0.42", LABEL, BLACK);
        // Anti-aliased: grey levels between black and white, not just the two.
        let greys = img.pixels().filter(|p| p.0[0] > 0 && p.0[0] < 255).count();
        let inked: Vec<u32> = img.enumerate_pixels().filter(|(_, _, p)| p.0[0] < 128).map(|(x, _, _)| x).collect();
        assert!(greys > 20 && inked.len() > 40, "{greys} grey, {} dark pixels", inked.len());
        let right = *inked.iter().max().unwrap();
        assert!((186..=190).contains(&right), "right-aligned at 190: ends at {right}");
    }

    /// A circle of radius 2 m walked in 40 s, estimated at half its size (the alignment undoes
    /// that) with one frame 0.3 m off at t = 30 s: the top view shows both circles filling the
    /// panel, and the error curve peaks at 30 s.
    #[test]
    fn trajectory_plot_shows_both_paths_and_the_error_peak() {
        use super::super::trajectory::{evaluate_trajectory, RpeDelta};
        use super::super::StampedPose;
        use crate::geometry::Transform;
        use nalgebra::Rotation3;
        let pose = |t: f64, scale: f64, off: f64| {
            let a = t / 40.0 * std::f64::consts::TAU;
            let p = Vector3::new(2.0 * a.cos(), 0.1, 2.0 * a.sin()) * scale + Vector3::new(off, 0.0, 0.0);
            StampedPose { t, pose: Transform::new(Rotation3::identity(), p) }
        };
        let times: Vec<f64> = (0..40).map(f64::from).collect();
        let gt: Vec<_> = times.iter().map(|&t| pose(t, 1.0, 0.0)).collect();
        let est: Vec<_> = times.iter().map(|&t| pose(t, 0.5, if t == 30.0 { 0.15 } else { 0.0 })).collect();
        let report = evaluate_trajectory(&est, 40, &gt, 0.01, RpeDelta::Frames(1)).unwrap();
        let img = render_trajectory(&report, "circle");
        assert_eq!(img.dimensions(), SIZE);

        let [(l, t, w, h), (el, et, ew, eh)] = TRAJECTORY_PANELS;
        let inside = |x: u32, y: u32, (l, t, w, h): (f64, f64, f64, f64)| {
            (l..=l + w).contains(&f64::from(x)) && (t..=t + h).contains(&f64::from(y))
        };
        let span = |colour: Rgb<u8>, panel| {
            let xs: Vec<u32> = img
                .enumerate_pixels()
                .filter(|(x, y, p)| **p == colour && inside(*x, *y, panel))
                .map(|(x, _, _)| x)
                .collect();
            (xs.len(), xs.iter().max().unwrap_or(&0) - xs.iter().min().unwrap_or(&0))
        };
        // The widest direction spans 4 m of the panel's 2 x 1.1 x (2 m + a little): ~90 %.
        for colour in [GROUND_TRUTH, ESTIMATE] {
            let (n, width) = span(colour, (l, t, w, h));
            assert!(n > 200 && f64::from(width) > 0.8 * w, "{colour:?}: {n} pixels over {width} of {w}");
        }
        // The error over time: in the estimate's colour, its highest point at t = 30 s of 39.
        let peak = img
            .enumerate_pixels()
            .filter(|(x, y, p)| **p == ESTIMATE && inside(*x, *y, (el, et, ew, eh)))
            .min_by_key(|(_, y, _)| *y)
            .map(|(x, _, _)| f64::from(x));
        let expected = el + 30.0 / 39.0 * ew;
        assert!(peak.is_some_and(|x| (x - expected).abs() <= 3.0), "peak at {peak:?}, expected {expected}");
    }
}
