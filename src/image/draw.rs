//! Markers on an 8-bit RGB buffer, for the debug image. A ring of radius 3 around each point
//! reads well at 640x480 in RViz and costs a few microseconds per keypoint; pulling in
//! `imageproc` (and its dependency tree) for one circle was not worth it.

/// Offsets of a ring of radius 3 (a midpoint circle).
const RING: [(i32, i32); 16] = [
    (3, 0),
    (3, 1),
    (2, 2),
    (1, 3),
    (0, 3),
    (-1, 3),
    (-2, 2),
    (-3, 1),
    (-3, 0),
    (-3, -1),
    (-2, -2),
    (-1, -3),
    (0, -3),
    (1, -3),
    (2, -2),
    (3, -1),
];

/// Draws a ring and its centre pixel in `colour` at every `[x, y]` (pixel centres at integers)
/// on `rgb` (`width x height`, interleaved, tightly packed). Parts outside the image are clipped;
/// non-finite positions are skipped.
pub fn draw_markers(rgb: &mut [u8], width: u32, height: u32, points: &[[f32; 2]], colour: [u8; 3]) {
    let (w, h) = (width as i64, height as i64);
    if rgb.len() < (w * h * 3) as usize {
        return;
    }
    for p in points {
        if !(p[0].is_finite() && p[1].is_finite()) {
            continue;
        }
        let (cx, cy) = (p[0].round() as i64, p[1].round() as i64);
        for (dx, dy) in RING.iter().copied().chain(std::iter::once((0, 0))) {
            let (x, y) = (cx + dx as i64, cy + dy as i64);
            if (0..w).contains(&x) && (0..h).contains(&y) {
                let i = ((y * w + x) * 3) as usize;
                rgb[i..i + 3].copy_from_slice(&colour);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_drawn_and_clipped() {
        let (w, h) = (10u32, 8u32);
        let mut rgb = vec![0u8; (w * h * 3) as usize];
        draw_markers(&mut rgb, w, h, &[[4.2, 3.8], [0.0, 0.0], [f32::NAN, 1.0]], [0, 255, 0]);
        let green = |x: u32, y: u32| rgb[((y * w + x) * 3 + 1) as usize] == 255;
        // centre and the four extreme ring points of the first marker
        for (x, y) in [(4, 4), (7, 4), (1, 4), (4, 7), (4, 1)] {
            assert!(green(x, y), "({x},{y})");
        }
        // inside the ring, off the centre: untouched
        assert!(!green(5, 4) && !green(4, 5));
        // the corner marker is clipped, not wrapped onto the other side
        assert!(green(0, 0) && green(3, 0) && green(0, 3));
        assert!(!green(9, 7) && !green(9, 0));
        // only green was written
        assert!(rgb.chunks_exact(3).all(|p| p[0] == 0 && p[2] == 0));
    }
}
