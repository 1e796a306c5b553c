//! Camera frames as they arrive (ROS raw encodings, or PNG/JPEG bytes), typed by pixel format,
//! and their conversion to a luminance plane.

pub mod depth;
pub mod draw;
pub mod text;
pub mod turn;

use std::path::Path;

/// Why a frame could not be used. Each variant names what was wrong with the input.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ImageError {
    /// An encoding this pipeline does not read.
    #[error("unsupported image encoding `{0}` (supported: mono8, mono16, rgb8, bgr8, rgba8, bgra8, yuv422, yuv422_yuy2, bayer_rggb8, bayer_bggr8, bayer_gbrg8, bayer_grbg8)")]
    UnknownEncoding(String),
    /// A 4:2:2 encoding with an odd width.
    #[error("{encoding} needs an even width, got {width}")]
    OddWidth {
        /// The encoding.
        encoding: &'static str,
        /// Width, pixels.
        width: u32,
    },
    /// Width or height is zero.
    #[error("image has zero size ({width}x{height})")]
    ZeroSize {
        /// Width, pixels.
        width: u32,
        /// Height, pixels.
        height: u32,
    },
    /// Row step shorter than a row.
    #[error("row step {step} is smaller than width x bytes per pixel = {min}")]
    StepTooSmall {
        /// The given step, bytes.
        step: usize,
        /// The row's length, bytes.
        min: usize,
    },
    /// Fewer data bytes than height x step.
    #[error("image data has {got} bytes, {expected} expected for {height} rows of step {step}")]
    Truncated {
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
        /// Height, pixels.
        height: u32,
        /// Row step, bytes.
        step: usize,
    },
    /// A compressed image does not decode.
    #[error("cannot decode image: {0}")]
    Decode(String),
    /// An image file could not be read.
    #[error("cannot read {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The image is larger than the decoder accepts.
    #[error("image {width}x{height} is too large (limit {limit} pixels)")]
    TooLarge {
        /// Width, pixels.
        width: u32,
        /// Height, pixels.
        height: u32,
        /// The pixel limit.
        limit: u64,
    },
    /// A depth image in an encoding that is not depth.
    #[error("unsupported depth encoding `{0}` (supported: 16UC1 and mono16 in millimetres, 32FC1 in metres)")]
    NotDepth(String),
}

/// Pixel layouts of `sensor_msgs/Image` that the pipeline understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    /// 8-bit grey.
    Mono8,
    /// 16-bit grey.
    Mono16,
    /// 8-bit RGB.
    Rgb8,
    /// 8-bit BGR.
    Bgr8,
    /// 8-bit RGBA.
    Rgba8,
    /// 8-bit BGRA.
    Bgra8,
    /// YUV 4:2:2, bytes U Y0 V Y1 (ROS `yuv422`, UYVY).
    Uyvy,
    /// YUV 4:2:2, bytes Y0 U Y1 V (ROS `yuv422_yuy2`, YUYV).
    Yuyv,
    /// 8-bit Bayer mosaic; the pattern names the colours of the top-left 2x2 cell, row by row.
    Bayer(BayerPattern),
}

/// Colour filter arrangement of a Bayer sensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BayerPattern {
    /// Red, green / green, blue.
    Rggb,
    /// Blue, green / green, red.
    Bggr,
    /// Green, blue / red, green.
    Gbrg,
    /// Green, red / blue, green.
    Grbg,
}

impl BayerPattern {
    /// Colour channel (0 R, 1 G, 2 B) of pixel (x, y).
    fn channel(self, x: usize, y: usize) -> usize {
        let cell = match self {
            Self::Rggb => [0, 1, 1, 2],
            Self::Bggr => [2, 1, 1, 0],
            Self::Gbrg => [1, 2, 0, 1],
            Self::Grbg => [1, 0, 2, 1],
        };
        cell[(y % 2) * 2 + x % 2]
    }
}

impl PixelFormat {
    /// From a `sensor_msgs/Image.encoding` string (REP-104 names, as in sensor_msgs/image_encodings.h).
    pub fn from_ros_encoding(encoding: &str) -> Result<Self, ImageError> {
        Ok(match encoding {
            "mono8" | "8UC1" => Self::Mono8,
            "mono16" | "16UC1" => Self::Mono16,
            "rgb8" => Self::Rgb8,
            "bgr8" | "8UC3" => Self::Bgr8,
            "rgba8" => Self::Rgba8,
            "bgra8" | "8UC4" => Self::Bgra8,
            "yuv422" | "uyvy" => Self::Uyvy,
            "yuv422_yuy2" | "yuyv" => Self::Yuyv,
            "bayer_rggb8" => Self::Bayer(BayerPattern::Rggb),
            "bayer_bggr8" => Self::Bayer(BayerPattern::Bggr),
            "bayer_gbrg8" => Self::Bayer(BayerPattern::Gbrg),
            "bayer_grbg8" => Self::Bayer(BayerPattern::Grbg),
            other => return Err(ImageError::UnknownEncoding(other.to_string())),
        })
    }

    /// The `sensor_msgs/Image` encoding name.
    pub fn ros_encoding(self) -> &'static str {
        match self {
            Self::Mono8 => "mono8",
            Self::Mono16 => "mono16",
            Self::Rgb8 => "rgb8",
            Self::Bgr8 => "bgr8",
            Self::Rgba8 => "rgba8",
            Self::Bgra8 => "bgra8",
            Self::Uyvy => "yuv422",
            Self::Yuyv => "yuv422_yuy2",
            Self::Bayer(BayerPattern::Rggb) => "bayer_rggb8",
            Self::Bayer(BayerPattern::Bggr) => "bayer_bggr8",
            Self::Bayer(BayerPattern::Gbrg) => "bayer_gbrg8",
            Self::Bayer(BayerPattern::Grbg) => "bayer_grbg8",
        }
    }

    /// Bytes per pixel (4:2:2 and Bayer: 2 and 1).
    pub fn bytes_per_pixel(self) -> usize {
        match self {
            Self::Mono8 | Self::Bayer(_) => 1,
            Self::Mono16 | Self::Uyvy | Self::Yuyv => 2,
            Self::Rgb8 | Self::Bgr8 => 3,
            Self::Rgba8 | Self::Bgra8 => 4,
        }
    }
}

/// Frames larger than this are refused before any allocation (a 64 Mpx frame is far beyond any
/// camera the node serves, and a corrupt header must not make it allocate gigabytes).
pub const MAX_PIXELS: u64 = 64 * 1024 * 1024;

/// One camera frame in its own pixel format, rows `step` bytes apart.
#[derive(Clone, Debug)]
pub struct Frame {
    width: u32,
    height: u32,
    format: PixelFormat,
    step: usize,
    big_endian: bool,
    data: Vec<u8>,
}

/// A luminance plane, row-major, values in [0, 1].
#[derive(Clone, Debug, PartialEq)]
pub struct LumaImage {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// Values, row-major.
    pub data: Vec<f32>,
}

/// ITU-R BT.601 luma weights, the ones OpenCV's RGB->gray and the original SuperPoint demo use.
pub const LUMA_WEIGHTS: [f32; 3] = [0.299, 0.587, 0.114];

impl Frame {
    /// Validates a raw `sensor_msgs/Image` buffer: known encoding, non-zero size, a step that
    /// holds a row, and enough bytes for every row (extra trailing bytes are ignored).
    pub fn from_raw(
        encoding: &str,
        width: u32,
        height: u32,
        step: usize,
        big_endian: bool,
        data: Vec<u8>,
    ) -> Result<Self, ImageError> {
        let format = PixelFormat::from_ros_encoding(encoding)?;
        check_size(width, height)?;
        if matches!(format, PixelFormat::Uyvy | PixelFormat::Yuyv) && width % 2 == 1 {
            return Err(ImageError::OddWidth { encoding: format.ros_encoding(), width });
        }
        check_rows(width, height, step, format.bytes_per_pixel(), data.len())?;
        Ok(Self { width, height, format, step, big_endian, data })
    }

    /// Decodes PNG or JPEG bytes (the format is read from the data, not a file name).
    pub fn decode(bytes: &[u8]) -> Result<Self, ImageError> {
        let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| ImageError::Decode(e.to_string()))?;
        if reader.format().is_none() {
            return Err(ImageError::Decode("not a PNG or JPEG image".to_string()));
        }
        // The JPEG decoder fills a cut-off image with grey instead of failing: demand the
        // end-of-image marker (encoders may pad after it with zeros).
        let is_jpeg = reader.format() == Some(image::ImageFormat::Jpeg);
        if is_jpeg {
            let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            if end < 2 || bytes[end - 2..end] != [0xFF, 0xD9] {
                return Err(ImageError::Decode("truncated JPEG (no end-of-image marker)".to_string()));
            }
        }
        let (width, height) = reader.into_dimensions().map_err(|e| ImageError::Decode(e.to_string()))?;
        check_size(width, height)?;
        // Huffman-coded JPEG spends at least one bit on every 8x8 luma block (its DC code), but
        // the decoder fills what is missing: a 700-byte file declaring 16 Mpx cost 2 s.
        let blocks = u64::from(width.div_ceil(8)) * u64::from(height.div_ceil(8));
        if is_jpeg && (bytes.len() as u64) * 8 < blocks {
            return Err(ImageError::Decode(format!(
                "truncated JPEG ({} bytes cannot hold {width}x{height} pixels)",
                bytes.len()
            )));
        }
        // zune-jpeg 0.5.15 (the image crate's JPEG decoder) can panic on a corrupt file (an
        // unwrap in its AVX2 IDCT, found by the fuzzer); one bad frame must not end the node.
        let decoded = std::panic::catch_unwind(|| image::load_from_memory(bytes))
            .map_err(|_| ImageError::Decode("the image decoder failed on corrupt data (it panicked)".to_string()))?
            .map_err(|e| ImageError::Decode(e.to_string()))?;
        Ok(Self::from_dynamic(decoded))
    }

    /// Reads and decodes a PNG or JPEG file.
    pub fn open(path: &Path) -> Result<Self, ImageError> {
        let bytes = std::fs::read(path)
            .map_err(|e| ImageError::Io { path: path.display().to_string(), reason: e.to_string() })?;
        Self::decode(&bytes)
    }

    fn from_dynamic(img: image::DynamicImage) -> Self {
        use image::DynamicImage as D;
        let (width, height) = (img.width(), img.height());
        let (format, data) = match img {
            D::ImageLuma8(b) => (PixelFormat::Mono8, b.into_raw()),
            D::ImageLuma16(b) => (PixelFormat::Mono16, b.into_raw().iter().flat_map(|v| v.to_ne_bytes()).collect()),
            D::ImageRgb8(b) => (PixelFormat::Rgb8, b.into_raw()),
            D::ImageRgba8(b) => (PixelFormat::Rgba8, b.into_raw()),
            D::ImageLumaA8(b) => (PixelFormat::Mono8, b.into_raw().chunks_exact(2).map(|p| p[0]).collect()),
            other => (PixelFormat::Rgb8, other.to_rgb8().into_raw()),
        };
        let step = width as usize * format.bytes_per_pixel();
        Self { width, height, format, step, big_endian: cfg!(target_endian = "big"), data }
    }

    /// Width, pixels.
    pub fn width(&self) -> u32 {
        self.width
    }
    /// Height, pixels.
    pub fn height(&self) -> u32 {
        self.height
    }
    /// Its pixel layout.
    pub fn format(&self) -> PixelFormat {
        self.format
    }

    /// Luminance in [0, 1]: `Y = 0.299 R + 0.587 G + 0.114 B` on values scaled by 1/255
    /// (1/65535 for mono16); alpha is ignored.
    pub fn to_luma(&self) -> LumaImage {
        let (w, h) = (self.width as usize, self.height as usize);
        let mut data = Vec::with_capacity(w * h);
        let [wr, wg, wb] = LUMA_WEIGHTS.map(|c| c / 255.0);
        for y in 0..h {
            let row = &self.data[y * self.step..y * self.step + w * self.format.bytes_per_pixel()];
            match self.format {
                PixelFormat::Mono8 => data.extend(row.iter().map(|&v| v as f32 / 255.0)),
                PixelFormat::Mono16 => data.extend(row.chunks_exact(2).map(|b| {
                    let v = if self.big_endian {
                        u16::from_be_bytes([b[0], b[1]])
                    } else {
                        u16::from_le_bytes([b[0], b[1]])
                    };
                    v as f32 / 65535.0
                })),
                PixelFormat::Rgb8 | PixelFormat::Rgba8 => {
                    let n = self.format.bytes_per_pixel();
                    data.extend(row.chunks_exact(n).map(|p| wr * p[0] as f32 + wg * p[1] as f32 + wb * p[2] as f32))
                }
                PixelFormat::Bgr8 | PixelFormat::Bgra8 => {
                    let n = self.format.bytes_per_pixel();
                    data.extend(row.chunks_exact(n).map(|p| wr * p[2] as f32 + wg * p[1] as f32 + wb * p[0] as f32))
                }
                PixelFormat::Uyvy | PixelFormat::Yuyv | PixelFormat::Bayer(_) => {
                    // Through RGB: YUV by BT.601, Bayer by bilinear demosaicing.
                    let rgb = self.to_rgb8();
                    let luma = rgb.chunks_exact(3).map(|p| wr * p[0] as f32 + wg * p[1] as f32 + wb * p[2] as f32);
                    return LumaImage { width: self.width, height: self.height, data: luma.collect() };
                }
            }
        }
        LumaImage { width: self.width, height: self.height, data }
    }
}

impl Frame {
    /// [`Frame::to_rgb8`] as an image to draw on (its buffer is always width x height x 3, so
    /// the black fallback is never taken).
    pub fn to_rgb_image(&self) -> image::RgbImage {
        image::RgbImage::from_raw(self.width, self.height, self.to_rgb8())
            .unwrap_or_else(|| image::RgbImage::new(self.width, self.height))
    }

    /// 8-bit RGB, interleaved (gray replicated; mono16 keeps its high byte; alpha dropped).
    pub fn to_rgb8(&self) -> Vec<u8> {
        let (w, h) = (self.width as usize, self.height as usize);
        let mut out = Vec::with_capacity(w * h * 3);
        for y in 0..h {
            let row = &self.data[y * self.step..y * self.step + w * self.format.bytes_per_pixel()];
            match self.format {
                PixelFormat::Mono8 => row.iter().for_each(|&v| out.extend_from_slice(&[v, v, v])),
                PixelFormat::Mono16 => row.chunks_exact(2).for_each(|b| {
                    let v = if self.big_endian { b[0] } else { b[1] };
                    out.extend_from_slice(&[v, v, v])
                }),
                PixelFormat::Rgb8 => out.extend_from_slice(row),
                PixelFormat::Rgba8 => row.chunks_exact(4).for_each(|p| out.extend_from_slice(&p[..3])),
                PixelFormat::Bgr8 => row.chunks_exact(3).for_each(|p| out.extend_from_slice(&[p[2], p[1], p[0]])),
                PixelFormat::Bgra8 => row.chunks_exact(4).for_each(|p| out.extend_from_slice(&[p[2], p[1], p[0]])),
                PixelFormat::Uyvy => row.chunks_exact(4).for_each(|q| {
                    out.extend_from_slice(&yuv_to_rgb(q[1], q[0], q[2]));
                    out.extend_from_slice(&yuv_to_rgb(q[3], q[0], q[2]));
                }),
                PixelFormat::Yuyv => row.chunks_exact(4).for_each(|q| {
                    out.extend_from_slice(&yuv_to_rgb(q[0], q[1], q[3]));
                    out.extend_from_slice(&yuv_to_rgb(q[2], q[1], q[3]));
                }),
                PixelFormat::Bayer(pattern) => out.extend(self.demosaic_row(pattern, y)),
            }
        }
        out
    }

    /// Bilinear demosaicing of row `y`: each missing colour is the mean of the pixels of that
    /// colour in the 3x3 neighbourhood (the 2 or 4 nearest; fewer at the border).
    fn demosaic_row(&self, pattern: BayerPattern, y: usize) -> Vec<u8> {
        let (w, h) = (self.width as usize, self.height as usize);
        let at = |x: usize, y: usize| self.data[y * self.step + x] as u32;
        let mut out = Vec::with_capacity(w * 3);
        for x in 0..w {
            let own = pattern.channel(x, y);
            let mut sum = [0u32; 3];
            let mut count = [0u32; 3];
            for yy in y.saturating_sub(1)..(y + 2).min(h) {
                for xx in x.saturating_sub(1)..(x + 2).min(w) {
                    let c = pattern.channel(xx, yy);
                    sum[c] += at(xx, yy);
                    count[c] += 1;
                }
            }
            for c in 0..3 {
                let v = if c == own { at(x, y) } else { (sum[c] + count[c] / 2) / count[c].max(1) };
                out.push(v.min(255) as u8);
            }
        }
        out
    }
}

/// ITU-R BT.601 studio-range YUV to RGB (what OpenCV, and so cv_bridge, use for YUV 4:2:2).
fn yuv_to_rgb(y: u8, u: u8, v: u8) -> [u8; 3] {
    let (c, d, e) = (1.164 * (y as f32 - 16.0), u as f32 - 128.0, v as f32 - 128.0);
    let q = |x: f32| x.round().clamp(0.0, 255.0) as u8;
    [q(c + 1.596 * e), q(c - 0.391 * d - 0.813 * e), q(c + 2.018 * d)]
}

/// That rows of `step` bytes hold `width` pixels of `bytes` each and `len` bytes hold `height`
/// rows; returns the bytes of pixels in a row.
pub(crate) fn check_rows(width: u32, height: u32, step: usize, bytes: usize, len: usize) -> Result<usize, ImageError> {
    let min = width as usize * bytes;
    if step < min {
        return Err(ImageError::StepTooSmall { step, min });
    }
    let expected = step * height as usize;
    if len < expected {
        return Err(ImageError::Truncated { expected, got: len, height, step });
    }
    Ok(min)
}

pub(crate) fn check_size(width: u32, height: u32) -> Result<(), ImageError> {
    if width == 0 || height == 0 {
        return Err(ImageError::ZeroSize { width, height });
    }
    if width as u64 * height as u64 > MAX_PIXELS {
        return Err(ImageError::TooLarge { width, height, limit: MAX_PIXELS });
    }
    Ok(())
}
