use fast_image_resize as fr;

use super::SuperPointError;
use crate::image::LumaImage;

/// The network input size the checkpoint was trained and is served at (HF processor: 480x640).
pub const INPUT_WIDTH: u32 = 640;
/// Network input height.
pub const INPUT_HEIGHT: u32 = 480;

/// The network input plane and the scale back to the original image.
#[derive(Clone, Debug)]
pub struct Preprocessed {
    /// The network input, row-major, values in [0, 1].
    pub plane: Vec<f32>,
    /// Network input width.
    pub width: u32,
    /// Network input height.
    pub height: u32,
    /// Original width / network width, and the same for heights.
    pub scale_x: f32,
    /// Original height / network height.
    pub scale_y: f32,
}

impl Preprocessed {
    /// Maps a network-pixel position to the original image's pixels. Pixel centres sit at
    /// integers in both frames, so the centre-aligned mapping `(x + 0.5) * s - 0.5` is the exact
    /// inverse of the resize (identity when no resize happened).
    pub fn to_input_pixels(&self, [x, y]: [f32; 2]) -> [f32; 2] {
        [(x + 0.5) * self.scale_x - 0.5, (y + 0.5) * self.scale_y - 0.5]
    }
}

/// Resizes a luminance image to 640x480 (aspect ratio not kept, as HF's processor does) with an
/// antialiased bilinear filter: a triangle kernel whose support widens by the downscale factor,
/// the filter of PIL's `BILINEAR` and torchvision's `antialias=True`. Values stay in [0, 1].
pub fn preprocess(luma: &LumaImage) -> Result<Preprocessed, SuperPointError> {
    let (w, h) = (INPUT_WIDTH, INPUT_HEIGHT);
    let scale_x = luma.width as f32 / w as f32;
    let scale_y = luma.height as f32 / h as f32;
    if luma.width == w && luma.height == h {
        return Ok(Preprocessed { plane: luma.data.clone(), width: w, height: h, scale_x, scale_y });
    }
    let mut src_bytes: Vec<u8> = bytemuck::cast_slice(&luma.data).to_vec();
    let src = fr::images::Image::from_slice_u8(luma.width, luma.height, &mut src_bytes, fr::PixelType::F32)
        .map_err(|e| SuperPointError::Resize(e.to_string()))?;
    let mut dst = fr::images::Image::new(w, h, fr::PixelType::F32);
    let options = fr::ResizeOptions::new().resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear));
    fr::Resizer::new().resize(&src, &mut dst, &options).map_err(|e| SuperPointError::Resize(e.to_string()))?;
    let plane = dst.buffer().chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect();
    Ok(Preprocessed { plane, width: w, height: h, scale_x, scale_y })
}
