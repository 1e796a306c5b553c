//! Text in a real typeface on 8-bit RGB images, for captions and plot labels: DejaVu Sans,
//! embedded in the binary by the `dejavu` crate and rasterised with anti-aliasing by `ab_glyph`,
//! so no font file or system font is needed on a robot or a CI machine.

use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, PxScale, ScaleFont};
use image::RgbImage;

/// The embedded typeface; `None` only if the embedded file did not parse (then no text is drawn
/// rather than a panic).
fn font() -> Option<&'static FontRef<'static>> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(dejavu::sans::regular()).ok()).as_ref()
}

/// The width in pixels `text` takes at `size_px` (the font's em height in pixels).
pub fn text_width(text: &str, size_px: f32) -> f32 {
    let Some(font) = font() else { return 0.0 };
    let scaled = font.as_scaled(PxScale::from(size_px));
    let mut width = 0.0;
    let mut previous = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = previous {
            width += scaled.kern(p, id);
        }
        width += scaled.h_advance(id);
        previous = Some(id);
    }
    width
}

/// Draws `text` in `colour` at `size_px` with the top of its line box at (`x`, `y`), blending each
/// pixel by the glyph's coverage; clipped to the image. Returns the x after the last glyph.
pub fn draw_text(img: &mut RgbImage, x: f32, y: f32, text: &str, size_px: f32, colour: [u8; 3]) -> f32 {
    let Some(font) = font() else { return x };
    let (width, height) = img.dimensions();
    let scaled = font.as_scaled(PxScale::from(size_px));
    let baseline = y + scaled.ascent();
    let mut caret = x;
    let mut previous = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = previous {
            caret += scaled.kern(p, id);
        }
        let glyph = id.with_scale_and_position(scaled.scale(), point(caret, baseline));
        caret += scaled.h_advance(id);
        previous = Some(id);
        let Some(outlined) = font.outline_glyph(glyph) else { continue };
        let bounds = outlined.px_bounds();
        outlined.draw(|gx, gy, coverage| {
            let (px, py) = (bounds.min.x as i64 + gx as i64, bounds.min.y as i64 + gy as i64);
            if px < 0 || py < 0 || px >= width as i64 || py >= height as i64 {
                return;
            }
            let a = coverage.clamp(0.0, 1.0);
            let pixel = img.get_pixel_mut(px as u32, py as u32);
            for (dst, &src) in pixel.0.iter_mut().zip(&colour) {
                *dst = (*dst as f32 * (1.0 - a) + src as f32 * a).round() as u8;
            }
        });
    }
    caret
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_drawn_inside_its_box_and_wider_text_is_wider() {
        let (w, h) = (120u32, 30u32);
        let mut img = RgbImage::new(w, h);
        let end = draw_text(&mut img, 4.0, 5.0, "Keypoints 42", 16.0, [255, 255, 255]);
        assert!((end - 4.0 - text_width("Keypoints 42", 16.0)).abs() < 1e-3);
        assert!(text_width("WWWW", 16.0) > text_width("iiii", 16.0));
        // Ink only between the box's top and the bottom of a 16 px line, and only grey levels.
        let lit: Vec<(u32, u32)> =
            img.enumerate_pixels().filter(|(_, _, p)| p.0[0] > 0).map(|(x, y, _)| (x, y)).collect();
        assert!(lit.len() > 60, "{} pixels lit", lit.len());
        assert!(lit.iter().all(|&(x, y)| (4..(end.ceil() as u32 + 1)).contains(&x) && (5..25).contains(&y)));
        assert!(img.pixels().all(|p| p.0[0] == p.0[1] && p.0[1] == p.0[2]));
        // Text past the edge is clipped, not wrapped.
        let mut small = RgbImage::new(10, 10);
        draw_text(&mut small, 5.0, 2.0, "MMMM", 14.0, [255, 0, 0]);
        assert!((0..10).all(|y| small.get_pixel(0, y).0[0] == 0), "nothing wrapped to column 0");
    }
}
