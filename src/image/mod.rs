//! Camera frames as they arrive (ROS raw encodings, or PNG/JPEG bytes), typed by pixel format,
//! and their conversion to a luminance plane.

use std::path::Path;

/// Why a frame could not be used. Each variant names what was wrong with the input.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ImageError {
    #[error("unsupported image encoding `{0}` (supported: mono8, mono16, rgb8, bgr8, rgba8, bgra8)")]
    UnknownEncoding(String),
    #[error("image has zero size ({width}x{height})")]
    ZeroSize { width: u32, height: u32 },
    #[error("row step {step} is smaller than width x bytes per pixel = {min}")]
    StepTooSmall { step: usize, min: usize },
    #[error("image data has {got} bytes, {expected} expected for {height} rows of step {step}")]
    Truncated { expected: usize, got: usize, height: u32, step: usize },
    #[error("cannot decode image: {0}")]
    Decode(String),
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("image {width}x{height} is too large (limit {limit} pixels)")]
    TooLarge { width: u32, height: u32, limit: u64 },
}

/// Pixel layouts of `sensor_msgs/Image` that the pipeline understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    Mono8,
    Mono16,
    Rgb8,
    Bgr8,
    Rgba8,
    Bgra8,
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
            other => return Err(ImageError::UnknownEncoding(other.to_string())),
        })
    }

    pub fn ros_encoding(self) -> &'static str {
        match self {
            Self::Mono8 => "mono8",
            Self::Mono16 => "mono16",
            Self::Rgb8 => "rgb8",
            Self::Bgr8 => "bgr8",
            Self::Rgba8 => "rgba8",
            Self::Bgra8 => "bgra8",
        }
    }

    pub fn bytes_per_pixel(self) -> usize {
        match self {
            Self::Mono8 => 1,
            Self::Mono16 => 2,
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
    pub width: u32,
    pub height: u32,
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
        let min = width as usize * format.bytes_per_pixel();
        if step < min {
            return Err(ImageError::StepTooSmall { step, min });
        }
        let expected = step * height as usize;
        if data.len() < expected {
            return Err(ImageError::Truncated { expected, got: data.len(), height, step });
        }
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
        let (width, height) = reader.into_dimensions().map_err(|e| ImageError::Decode(e.to_string()))?;
        check_size(width, height)?;
        let decoded = image::load_from_memory(bytes).map_err(|e| ImageError::Decode(e.to_string()))?;
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
            D::ImageLuma16(b) => {
                (PixelFormat::Mono16, b.into_raw().iter().flat_map(|v| v.to_ne_bytes()).collect())
            }
            D::ImageRgb8(b) => (PixelFormat::Rgb8, b.into_raw()),
            D::ImageRgba8(b) => (PixelFormat::Rgba8, b.into_raw()),
            D::ImageLumaA8(b) => {
                (PixelFormat::Mono8, b.into_raw().chunks_exact(2).map(|p| p[0]).collect())
            }
            other => (PixelFormat::Rgb8, other.to_rgb8().into_raw()),
        };
        let step = width as usize * format.bytes_per_pixel();
        Self { width, height, format, step, big_endian: cfg!(target_endian = "big"), data }
    }

    pub fn width(&self) -> u32 {
        self.width
    }
    pub fn height(&self) -> u32 {
        self.height
    }
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
                    let v = if self.big_endian { u16::from_be_bytes([b[0], b[1]]) } else { u16::from_le_bytes([b[0], b[1]]) };
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
            }
        }
        LumaImage { width: self.width, height: self.height, data }
    }
}

impl Frame {
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
            }
        }
        out
    }
}

fn check_size(width: u32, height: u32) -> Result<(), ImageError> {
    if width == 0 || height == 0 {
        return Err(ImageError::ZeroSize { width, height });
    }
    if width as u64 * height as u64 > MAX_PIXELS {
        return Err(ImageError::TooLarge { width, height, limit: MAX_PIXELS });
    }
    Ok(())
}
