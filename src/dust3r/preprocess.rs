//! DUSt3R input preparation as the mast3r-blackhole tt-model server does it (spec §1 A): the
//! frame is padded to a square with gray 128 (or centre-cropped to one), resized to 512x512 with
//! PIL's BICUBIC (Keys cubic, a = -0.5, antialiased when shrinking), and normalised to [-1, 1].

use fast_image_resize as fr;

use crate::image::Frame;

/// Network input side.
pub const INPUT_SIZE: u32 = 512;
/// Gray of the padding, before normalisation.
pub const PAD_VALUE: u8 = 128;

/// How a non-square frame becomes square.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SquareMode {
    /// Pad with gray around the whole frame (the tt-model server's default; nothing is lost).
    #[default]
    Pad,
    /// Keep the centre square (the port's 'crop' mode).
    Crop,
}

/// Where the square came from: original pixel (x, y) is network pixel
/// `((x + offset_x) * size / side, (y + offset_y) * size / side)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SquareMapping {
    pub original_width: u32,
    pub original_height: u32,
    /// Offsets of the original frame inside the square (negative when cropping).
    pub offset_x: i64,
    pub offset_y: i64,
    /// Side of the square in original pixels.
    pub side: u32,
    /// Side of the network input.
    pub size: u32,
}

impl SquareMapping {
    pub fn scale(&self) -> f64 {
        self.size as f64 / self.side as f64
    }
    pub fn to_network(&self, x: f64, y: f64) -> (f64, f64) {
        ((x + self.offset_x as f64) * self.scale(), (y + self.offset_y as f64) * self.scale())
    }
    pub fn to_original(&self, u: f64, v: f64) -> (f64, f64) {
        (u / self.scale() - self.offset_x as f64, v / self.scale() - self.offset_y as f64)
    }
}

/// A prepared view: planar RGB `3 x size x size`, values `(v / 255 - 0.5) / 0.5`.
#[derive(Clone, Debug)]
pub struct PreparedView {
    pub image: Vec<f32>,
    pub size: u32,
    pub mapping: SquareMapping,
    /// The resized 8-bit RGB square (interleaved), e.g. to colour a point cloud.
    pub rgb: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("cannot resize the image: {0}")]
pub struct ResizeError(String);

/// Cubic resampling (Catmull-Rom = Keys with a = -0.5, PIL's BICUBIC) of 8-bit RGB.
fn resize_u8x3(data: Vec<u8>, (w, h): (u32, u32), (ow, oh): (u32, u32)) -> Result<Vec<u8>, ResizeError> {
    let src = fr::images::Image::from_vec_u8(w, h, data, fr::PixelType::U8x3).map_err(|e| ResizeError(e.to_string()))?;
    let mut dst = fr::images::Image::new(ow, oh, fr::PixelType::U8x3);
    let options = fr::ResizeOptions::new().resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::CatmullRom));
    fr::Resizer::new().resize(&src, &mut dst, &options).map_err(|e| ResizeError(e.to_string()))?;
    Ok(dst.into_vec())
}

pub fn prepare(frame: &Frame, mode: SquareMode) -> Result<PreparedView, ResizeError> {
    let (w, h) = (frame.width(), frame.height());
    let rgb = frame.to_rgb8();
    let side = match mode {
        SquareMode::Pad => w.max(h),
        SquareMode::Crop => w.min(h),
    };
    let offset_x = (side as i64 - w as i64) / 2;
    let offset_y = (side as i64 - h as i64) / 2;
    // Build the square canvas: pixel (X, Y) of the square is original (X - off_x, Y - off_y).
    let mut square = vec![PAD_VALUE; side as usize * side as usize * 3];
    for y in 0..side as i64 {
        let oy = y - offset_y;
        if oy < 0 || oy >= h as i64 {
            continue;
        }
        let x0 = offset_x.max(0);
        let x1 = (offset_x + w as i64).min(side as i64);
        if x1 <= x0 {
            continue;
        }
        let (sx0, n) = ((x0 - offset_x) as usize, (x1 - x0) as usize);
        let src = &rgb[(oy as usize * w as usize + sx0) * 3..(oy as usize * w as usize + sx0 + n) * 3];
        let dst = (y as usize * side as usize + x0 as usize) * 3;
        square[dst..dst + n * 3].copy_from_slice(src);
    }
    let size = INPUT_SIZE;
    let resized = if side == size {
        square
    } else {
        // Horizontal pass, then vertical, each rounded to 8 bits: PIL's order. (fast_image_resize
        // alone runs the vertical pass first on 8-bit images, which clips overshoot elsewhere.)
        let wide = resize_u8x3(square, (side, side), (size, side))?;
        resize_u8x3(wide, (size, side), (size, size))?
    };
    let n = (size * size) as usize;
    let mut image = vec![0.0; 3 * n];
    for (i, px) in resized.chunks_exact(3).enumerate() {
        for c in 0..3 {
            image[c * n + i] = (px[c] as f32 / 255.0 - 0.5) / 0.5;
        }
    }
    let mapping = SquareMapping { original_width: w, original_height: h, offset_x, offset_y, side, size };
    Ok(PreparedView { image, size, mapping, rgb: resized })
}
