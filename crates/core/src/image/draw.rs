//! Keypoints drawn for a person to look at: the debug image `keypoints/image` and
//! `sp_dust3r superpoint --draw`. A ring around each keypoint (radius 3 at 640x480, growing with
//! the image) coloured by its score on a perceptual scale (plasma: blue-purple for the weakest
//! kept, yellow for the strongest), and a caption band along the bottom with the count, the
//! settings and the scale's legend. Rings are a few lines here; `imageproc` was not worth its
//! dependency tree for them.

use image::RgbImage;

use super::text::{draw_text, text_width};

/// The offsets of a one-pixel ring of `radius` (a midpoint circle), each once.
fn ring(radius: i32) -> Vec<(i32, i32)> {
    let mut octant = Vec::new();
    let (mut x, mut y, mut d) = (radius, 0, 1 - radius);
    while x >= y {
        octant.push((x, y));
        y += 1;
        if d < 0 {
            d += 2 * y + 1;
        } else {
            x -= 1;
            d += 2 * (y - x) + 1;
        }
    }
    let mut all: Vec<(i32, i32)> = octant
        .iter()
        .flat_map(|&(x, y)| [(x, y), (y, x), (-y, x), (-x, y), (-x, -y), (-y, -x), (y, -x), (x, -y)])
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The colour of `t` in 0..=1 on the plasma scale, from its blue-purple end (the darkest end is
/// skipped: it vanishes on dark images).
pub fn score_colour(t: f32) -> [u8; 3] {
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 1.0 };
    let c = colorous::PLASMA.eval_continuous(0.15 + 0.85 * f64::from(t));
    [c.r, c.g, c.b]
}

/// Where `score` lies between the weakest (`lo`, 0) and the strongest (`hi`, 1) on a log scale:
/// SuperPoint's scores crowd near the threshold, and on a linear scale nearly every ring would
/// be the same colour. (Scores at or below 0 count as a thousandth of the strongest.)
pub fn score_position(score: f32, lo: f32, hi: f32) -> f32 {
    let floor = hi * 1e-3;
    let (s, lo) = (score.max(floor), lo.max(floor));
    if hi > lo && score.is_finite() {
        ((s / lo).ln() / (hi / lo).ln()).clamp(0.0, 1.0)
    } else {
        1.0
    }
}

/// The ring radius for an image: 3 pixels at 640x480, more on larger images.
pub fn ring_radius(width: u32, height: u32) -> i32 {
    (width.min(height) / 160).max(3) as i32
}

/// The caption's text height for an image: 15 pixels at 640x480.
pub fn caption_size(width: u32, height: u32) -> f32 {
    (width.min(height) as f32 / 32.0).max(11.0)
}

/// Draws a ring and its centre pixel in `colour` around `centre` (pixel centres at integers);
/// clipped at the edges; a non-finite centre draws nothing.
pub fn draw_ring(img: &mut RgbImage, centre: [f32; 2], radius: i32, colour: [u8; 3]) {
    let (w, h) = (img.width() as i64, img.height() as i64);
    if !(centre[0].is_finite() && centre[1].is_finite()) {
        return;
    }
    let (cx, cy) = (centre[0].round() as i64, centre[1].round() as i64);
    for (dx, dy) in ring(radius).into_iter().chain(std::iter::once((0, 0))) {
        let (x, y) = (cx + dx as i64, cy + dy as i64);
        if (0..w).contains(&x) && (0..h).contains(&y) {
            img.put_pixel(x as u32, y as u32, image::Rgb(colour));
        }
    }
}

/// A one-pixel line from `from` to `to` (pixel centres at integers), clipped at the edges.
pub fn draw_line(img: &mut RgbImage, from: (f64, f64), to: (f64, f64), colour: [u8; 3]) {
    let ((x0, y0), (x1, y1)) = (from, to);
    if ![x0, y0, x1, y1].iter().all(|v| v.is_finite()) {
        return;
    }
    let n = ((x1 - x0).abs().max((y1 - y0).abs()).ceil().min(1e5) as usize).max(1);
    for i in 0..=n {
        let t = i as f64 / n as f64;
        let (x, y) = ((x0 + (x1 - x0) * t).round(), (y0 + (y1 - y0) * t).round());
        if x >= 0.0 && y >= 0.0 && x < f64::from(img.width()) && y < f64::from(img.height()) {
            img.put_pixel(x as u32, y as u32, image::Rgb(colour));
        }
    }
}

/// The keypoints at `xy` with `scores` drawn on `img`: a ring each, coloured by
/// where its score lies between the weakest and the strongest of them ([`score_position`]); then (on images at least
/// eight bands tall) a caption band with `caption` on the left and the colour scale with those two
/// scores on the right (where there is room).
pub fn draw_keypoints(img: &mut RgbImage, xy: &[[f32; 2]], scores: &[f32], caption: &str) {
    let (width, height) = img.dimensions();
    let finite = scores.iter().copied().filter(|s| s.is_finite());
    let (lo, hi) = finite.fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), s| (l.min(s), h.max(s)));
    let t = |s: f32| score_position(s, lo, hi);
    let radius = ring_radius(width, height);
    // The weakest first, so the strongest stay on top where rings overlap.
    let mut order: Vec<usize> = (0..xy.len()).collect();
    order.sort_by(|&a, &b| scores.get(a).unwrap_or(&0.0).total_cmp(scores.get(b).unwrap_or(&0.0)));
    for i in order {
        let colour = score_colour(scores.get(i).map_or(1.0, |&s| t(s)));
        draw_ring(img, xy[i], radius, colour);
    }
    let size = caption_size(width, height);
    let band = (size * 1.6).ceil() as u32;
    // No caption on thumbnails: it would hide most of the picture.
    if band * 8 > height {
        return;
    }
    let top = height - band;
    // The band: the image darkened to a third, so the text reads on any picture.
    for y in top..height {
        for x in 0..width {
            img.get_pixel_mut(x, y).0.iter_mut().for_each(|c| *c /= 3);
        }
    }
    let text_y = top as f32 + (band as f32 - size * 1.17) / 2.0;
    let pad = size * 0.5;
    let caption_end = draw_text(img, pad, text_y, caption, size, [255, 255, 255]);
    if !(lo.is_finite() && hi.is_finite()) {
        return;
    }
    let (low, high) = (format!("score {lo:.3}"), format!("{hi:.3}"));
    let bar = (size * 6.0).round();
    let legend = text_width(&low, size) + bar + text_width(&high, size) + 2.0 * pad;
    let x0 = width as f32 - pad - legend;
    if x0 < caption_end + 2.0 * pad {
        return;
    }
    let bar_x = draw_text(img, x0, text_y, &low, size, [255, 255, 255]) + pad;
    let (bar_top, bar_bottom) = ((top as f32 + band as f32 * 0.3) as u32, (top as f32 + band as f32 * 0.7) as u32);
    for x in 0..bar as u32 {
        let colour = score_colour(x as f32 / (bar - 1.0).max(1.0));
        let px = bar_x as u32 + x;
        for y in bar_top..bar_bottom {
            if px < width && y < height {
                img.put_pixel(px, y, image::Rgb(colour));
            }
        }
    }
    draw_text(img, bar_x + bar + pad, text_y, &high, size, [255, 255, 255]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_round_and_clipped() {
        // Radius 3: the 16 pixels of the midpoint circle.
        let r3 = ring(3);
        assert_eq!(r3.len(), 16);
        assert!(r3.iter().all(|&(x, y)| (x * x + y * y - 9).abs() <= 3), "{r3:?}");
        for radius in [3, 5, 8] {
            let r = ring(radius);
            let d = |&(x, y): &(i32, i32)| ((x * x + y * y) as f64).sqrt();
            assert!(r.iter().all(|p| (d(p) - radius as f64).abs() < 0.75), "radius {radius}: {r:?}");
        }
        let mut img = RgbImage::new(10, 8);
        for c in [[4.2, 3.8], [0.0, 0.0], [f32::NAN, 1.0]] {
            draw_ring(&mut img, c, 3, [0, 255, 0]);
        }
        let green = |x: u32, y: u32| img.get_pixel(x, y).0[1] == 255;
        for (x, y) in [(4, 4), (7, 4), (1, 4), (4, 7), (4, 1)] {
            assert!(green(x, y), "({x},{y})");
        }
        assert!(!green(5, 4) && !green(4, 5), "inside the ring, off the centre");
        assert!(green(0, 0) && green(3, 0) && green(0, 3));
        assert!(!green(9, 7) && !green(9, 0), "clipped, not wrapped");
    }

    #[test]
    fn score_colours_run_from_blue_to_yellow() {
        let (weak, strong) = (score_colour(0.0), score_colour(1.0));
        assert!(weak[2] > weak[1] && weak[2] > 100, "{weak:?}");
        assert!(strong[0] > 200 && strong[1] > 200 && strong[2] < 100, "{strong:?}");
        assert_eq!(score_colour(f32::NAN), strong);
    }

    #[test]
    fn score_positions_are_logarithmic_between_the_ends() {
        assert_eq!((score_position(0.005, 0.005, 0.5), score_position(0.5, 0.005, 0.5)), (0.0, 1.0));
        assert!((score_position(0.05, 0.005, 0.5) - 0.5).abs() < 1e-6, "a decade of two");
        assert_eq!(score_position(0.3, 0.3, 0.3), 1.0, "one score: the top colour");
        assert_eq!(score_position(0.0, 0.0, 1.0), 0.0, "zero floors at a thousandth of the top");
        assert_eq!(score_position(f32::NAN, 0.1, 1.0), 1.0);
    }
}
