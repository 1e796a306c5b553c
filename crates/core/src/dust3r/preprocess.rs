//! DUSt3R input preparation. The default copies the mast3r-blackhole tt-model server (spec §1 A):
//! the frame is padded to a square with gray 128, resized to the checkpoint's side (512x512, or
//! 224x224) with PIL's BICUBIC (Keys cubic, a = -0.5, antialiased when shrinking) and normalised
//! to [-1, 1]. Two alternatives: the port's centre-square crop, and upstream DUSt3R's
//! `load_images(size)`, the aspect ratios the checkpoints were trained on: for 512 (§1 B) long side
//! to 512, LANCZOS when shrinking, centre crop to multiples of 16, 4:3 for square inputs; for 224
//! short side to 224 and the centre 224x224 square.

use fast_image_resize as fr;

use crate::image::Frame;

/// Gray of the padding, before normalisation.
pub const PAD_VALUE: u8 = 128;

/// How a frame becomes the network input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PrepMode {
    /// Pad with gray to a square around the whole frame, resized to the checkpoint's side (the
    /// tt-model server's default; nothing is lost).
    #[default]
    Pad,
    /// Keep the centre square, resized to the checkpoint's side (the port's 'crop' mode).
    CropSquare,
    /// Upstream `load_images`: at 512 long side 512, centre crop to multiples of 16 (640x480 ->
    /// 512x384); at 224 the centre 224x224 square of the frame resized to a 224 short side.
    Upstream,
}

/// Where the network input came from: original pixel (x, y) is network pixel
/// `(x * scale_x + offset_x, y * scale_y + offset_y)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InputMapping {
    /// Width of the original frame.
    pub original_width: u32,
    /// Height of the original frame.
    pub original_height: u32,
    /// Network pixels per original pixel, horizontally.
    pub scale_x: f64,
    /// Network pixels per original pixel, vertically.
    pub scale_y: f64,
    /// In network pixels (negative where the original was cropped).
    pub offset_x: f64,
    /// Vertical offset in network pixels.
    pub offset_y: f64,
}

impl InputMapping {
    /// Network pixels per original pixel (horizontal; the two differ only by size rounding).
    pub fn scale(&self) -> f64 {
        self.scale_x
    }
    /// Original pixel (x, y) in network pixels.
    pub fn to_network(&self, x: f64, y: f64) -> (f64, f64) {
        (x * self.scale_x + self.offset_x, y * self.scale_y + self.offset_y)
    }
    /// Network pixel (u, v) in original pixels.
    pub fn to_original(&self, u: f64, v: f64) -> (f64, f64) {
        ((u - self.offset_x) / self.scale_x, (v - self.offset_y) / self.scale_y)
    }
}

/// A prepared view: planar RGB `3 x height x width`, values `(v / 255 - 0.5) / 0.5`.
#[derive(Clone, Debug)]
pub struct PreparedView {
    /// Planar RGB, `3 x height x width`, normalised to [-1, 1].
    pub image: Vec<f32>,
    /// Network input width.
    pub width: u32,
    /// Network input height.
    pub height: u32,
    /// Where it came from in the original frame.
    pub mapping: InputMapping,
    /// The resized 8-bit RGB input (interleaved), e.g. to colour a point cloud.
    pub rgb: Vec<u8>,
}

/// The frame could not be resized (the resizer's words).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("cannot resize the image: {0}")]
pub struct ResizeError(String);

/// One separable pass of PIL-style resampling of 8-bit RGB with `filter`.
fn resize_u8x3(
    data: Vec<u8>,
    (w, h): (u32, u32),
    (ow, oh): (u32, u32),
    filter: fr::FilterType,
) -> Result<Vec<u8>, ResizeError> {
    let src =
        fr::images::Image::from_vec_u8(w, h, data, fr::PixelType::U8x3).map_err(|e| ResizeError(e.to_string()))?;
    let mut dst = fr::images::Image::new(ow, oh, fr::PixelType::U8x3);
    let options = fr::ResizeOptions::new().resize_alg(fr::ResizeAlg::Convolution(filter));
    fr::Resizer::new().resize(&src, &mut dst, &options).map_err(|e| ResizeError(e.to_string()))?;
    Ok(dst.into_vec())
}

/// Resize as PIL does: horizontal pass, then vertical, each rounded to 8 bits. (fast_image_resize
/// alone runs the vertical pass first on 8-bit images, which clips overshoot elsewhere.)
fn resize_pil(
    data: Vec<u8>,
    (w, h): (u32, u32),
    (ow, oh): (u32, u32),
    filter: fr::FilterType,
) -> Result<Vec<u8>, ResizeError> {
    if (w, h) == (ow, oh) {
        return Ok(data);
    }
    let wide = resize_u8x3(data, (w, h), (ow, h), filter)?;
    resize_u8x3(wide, (ow, h), (ow, oh), filter)
}

/// The `w x h` window of an RGB image whose top-left corner is at (x0, y0) (possibly outside),
/// with `fill` where the window leaves the image.
fn window(rgb: &[u8], (iw, ih): (u32, u32), (x0, y0): (i64, i64), (w, h): (u32, u32), fill: u8) -> Vec<u8> {
    let mut out = vec![fill; w as usize * h as usize * 3];
    for y in 0..h as i64 {
        let sy = y + y0;
        if sy < 0 || sy >= ih as i64 {
            continue;
        }
        let (xa, xb) = ((-x0).max(0), (iw as i64 - x0).min(w as i64));
        if xb <= xa {
            continue;
        }
        let n = (xb - xa) as usize * 3;
        let src = (sy as usize * iw as usize + (xa + x0) as usize) * 3;
        let dst = (y as usize * w as usize + xa as usize) * 3;
        out[dst..dst + n].copy_from_slice(&rgb[src..src + n]);
    }
    out
}

/// Upstream `load_images(size)`: the frame resized with PIL's filters (LANCZOS when shrinking) so
/// that its long side is 512 (or its short side 224), then the centre crop.
fn upstream(rgb: Vec<u8>, (w, h): (u32, u32), size: u32) -> Result<(Vec<u8>, u32, u32, InputMapping), ResizeError> {
    let (long, short) = (w.max(h) as f64, w.min(h) as f64);
    // At 224 the long side is sized so that the short one comes out at 224.
    let target = if size == 224 { (size as f64 * long / short).round_ties_even() } else { size as f64 };
    let (rw, rh) =
        (((w as f64 * target / long).round_ties_even()) as u32, ((h as f64 * target / long).round_ties_even()) as u32);
    let filter = if long > target { fr::FilterType::Lanczos3 } else { fr::FilterType::CatmullRom };
    let full = resize_pil(rgb, (w, h), (rw, rh), filter)?;
    let (cx, cy) = (rw / 2, rh / 2);
    let (half_w, half_h) = if size == 224 {
        (cx.min(cy), cx.min(cy))
    } else {
        let half_w = (2 * cx / 16) * 8;
        (half_w, if rw == rh { 3 * half_w / 4 } else { (2 * cy / 16) * 8 })
    };
    let (x0, y0) = (cx as i64 - half_w as i64, cy as i64 - half_h as i64);
    let (cw, ch) = (2 * half_w, 2 * half_h);
    if cw == 0 || ch == 0 {
        return Err(ResizeError(format!("a {w}x{h} image is too small for a 16-pixel patch grid")));
    }
    let out = window(&full, (rw, rh), (x0, y0), (cw, ch), 0);
    let mapping = InputMapping {
        original_width: w,
        original_height: h,
        scale_x: rw as f64 / w as f64,
        scale_y: rh as f64 / h as f64,
        offset_x: -x0 as f64,
        offset_y: -y0 as f64,
    };
    Ok((out, cw, ch, mapping))
}

/// A frame as the network's input of side `size` (the checkpoint's: 512 or 224), resized (and
/// padded or cropped) as `mode` says.
pub fn prepare(frame: &Frame, mode: PrepMode, size: u32) -> Result<PreparedView, ResizeError> {
    let (w, h) = (frame.width(), frame.height());
    let rgb = frame.to_rgb8();
    let (resized, width, height, mapping) = match mode {
        PrepMode::Pad | PrepMode::CropSquare => {
            let side = if mode == PrepMode::Pad { w.max(h) } else { w.min(h) };
            let (off_x, off_y) = ((side as i64 - w as i64) / 2, (side as i64 - h as i64) / 2);
            let square = window(&rgb, (w, h), (-off_x, -off_y), (side, side), PAD_VALUE);
            let out = resize_pil(square, (side, side), (size, size), fr::FilterType::CatmullRom)?;
            let s = size as f64 / side as f64;
            let mapping = InputMapping {
                original_width: w,
                original_height: h,
                scale_x: s,
                scale_y: s,
                offset_x: off_x as f64 * s,
                offset_y: off_y as f64 * s,
            };
            (out, size, size, mapping)
        }
        PrepMode::Upstream => upstream(rgb, (w, h), size)?,
    };
    let n = (width * height) as usize;
    let mut image = vec![0.0; 3 * n];
    for (i, px) in resized.chunks_exact(3).enumerate() {
        for c in 0..3 {
            image[c * n + i] = (px[c] as f32 / 255.0 - 0.5) / 0.5;
        }
    }
    Ok(PreparedView { image, width, height, mapping, rgb: resized })
}
