//! A frame turned in its own plane about its centre: what the camera would have seen rolled
//! about its optical axis. SuperPoint's descriptors are not rotation-invariant, so a frame
//! rolled far from the views it is matched against is described again turned back.

use super::{Frame, PixelFormat};

/// A turn by an angle about the image centre, in a frame's pixels (centres at integers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Turn {
    cos: f64,
    sin: f64,
    centre: [f64; 2],
}

impl Turn {
    /// A turn by `angle` (radians; positive turns the picture's content clockwise on the
    /// screen, x right and y down) about the centre of a `width` x `height` frame.
    pub fn about_centre(angle: f64, width: u32, height: u32) -> Self {
        let centre = [(width as f64 - 1.0) / 2.0, (height as f64 - 1.0) / 2.0];
        Self { cos: angle.cos(), sin: angle.sin(), centre }
    }

    /// The original frame's pixel that the turned frame shows at `q`.
    pub fn to_original(&self, q: [f64; 2]) -> [f64; 2] {
        let [cx, cy] = self.centre;
        let (dx, dy) = (q[0] - cx, q[1] - cy);
        [cx + self.cos * dx + self.sin * dy, cy - self.sin * dx + self.cos * dy]
    }

    /// `frame` turned, as an 8-bit grey frame of the same size: each pixel the original's
    /// luminance there, bilinear; black where the turn brings in what the camera did not see.
    pub fn apply(&self, frame: &Frame) -> Frame {
        let luma = frame.to_luma();
        let (w, h) = (luma.width as usize, luma.height as usize);
        let at = |x: usize, y: usize| luma.data[y * w + x];
        let mut data = Vec::with_capacity(w * h);
        for y in 0..h {
            for x in 0..w {
                let [sx, sy] = self.to_original([x as f64, y as f64]);
                // Within half a pixel of the frame counts as on its edge pixels.
                let inside = sx >= -0.5 && sy >= -0.5 && sx < w as f64 - 0.5 && sy < h as f64 - 0.5;
                let (sx, sy) = (sx.clamp(0.0, (w - 1) as f64), sy.clamp(0.0, (h - 1) as f64));
                let v = if inside {
                    let (x0, y0) = (sx.floor() as usize, sy.floor() as usize);
                    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
                    let (fx, fy) = ((sx - x0 as f64) as f32, (sy - y0 as f64) as f32);
                    let top = at(x0, y0) + (at(x1, y0) - at(x0, y0)) * fx;
                    let bottom = at(x0, y1) + (at(x1, y1) - at(x0, y1)) * fx;
                    top + (bottom - top) * fy
                } else {
                    0.0
                };
                data.push((v * 255.0).round().clamp(0.0, 255.0) as u8);
            }
        }
        Frame { width: luma.width, height: luma.height, format: PixelFormat::Mono8, step: w, big_endian: false, data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 7 x 5 grey frame whose pixel (x, y) holds 10 * y + x + 1.
    fn numbered() -> Frame {
        let data = (0..5u8).flat_map(|y| (0..7u8).map(move |x| 10 * y + x + 1)).collect();
        Frame::from_raw("mono8", 7, 5, 7, false, data).unwrap()
    }

    fn pixel(frame: &Frame, x: usize, y: usize) -> u8 {
        frame.data[y * frame.step + x]
    }

    #[test]
    fn a_quarter_turn_moves_what_was_above_the_centre_to_its_right() {
        let frame = numbered();
        let turn = Turn::about_centre(std::f64::consts::FRAC_PI_2, 7, 5);
        // Centre (3, 2); one pixel right of it the turned frame shows the pixel one above.
        let q = turn.to_original([4.0, 2.0]);
        assert!((q[0] - 3.0).abs() < 1e-12 && (q[1] - 1.0).abs() < 1e-12, "{q:?}");
        let turned = turn.apply(&frame);
        assert_eq!((turned.width(), turned.height(), turned.format()), (7, 5, PixelFormat::Mono8));
        assert_eq!(pixel(&turned, 4, 2), pixel(&frame, 3, 1));
        assert_eq!(pixel(&turned, 3, 2), pixel(&frame, 3, 2));
        // Every pixel shows the original's at to_original, or black where that lies outside.
        for y in 0..5 {
            for x in 0..7 {
                let [sx, sy] = turn.to_original([x as f64, y as f64]);
                let want = match (sx.round(), sy.round()) {
                    (sx, sy) if (0.0..7.0).contains(&sx) && (0.0..5.0).contains(&sy) => {
                        pixel(&frame, sx as usize, sy as usize)
                    }
                    _ => 0,
                };
                assert_eq!(pixel(&turned, x, y), want, "turned pixel ({x}, {y})");
            }
        }
    }

    #[test]
    fn a_turn_and_its_opposite_bring_a_pixel_back() {
        let (there, back) = (Turn::about_centre(0.7, 640, 480), Turn::about_centre(-0.7, 640, 480));
        let p = back.to_original(there.to_original([100.0, 400.0]));
        assert!((p[0] - 100.0).abs() < 1e-9 && (p[1] - 400.0).abs() < 1e-9, "{p:?}");
        // Between pixels the value is bilinear: half a turn of a ramp reads the ramp reversed.
        let ramp: Vec<u8> = (0..4).flat_map(|_| [0u8, 40, 80, 120]).collect();
        let frame = Frame::from_raw("mono8", 4, 4, 4, false, ramp).unwrap();
        let turned = Turn::about_centre(std::f64::consts::PI, 4, 4).apply(&frame);
        assert_eq!(&turned.data[0..4], &[120, 80, 40, 0]);
    }
}
