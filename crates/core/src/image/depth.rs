//! Registered depth images (`sensor_msgs/Image` beside the colour image, as RealSense's
//! `aligned_depth_to_color` or Orbbec's registered depth): decoded once to metres, with
//! "no measurement" as `None`.

use super::{check_rows, check_size, ImageError};

/// A depth image in metres, row-major; 0 where the sensor measured nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct DepthImage {
    width: u32,
    height: u32,
    metres: Vec<f32>,
}

impl DepthImage {
    /// Decodes a ROS depth image: `16UC1` (or `mono16`) in millimetres, `32FC1` in metres (REP
    /// 118). Zero, non-finite and negative values are "no measurement".
    pub fn from_raw(
        encoding: &str,
        width: u32,
        height: u32,
        step: usize,
        big_endian: bool,
        data: &[u8],
    ) -> Result<Self, ImageError> {
        let bytes = match encoding {
            "16UC1" | "mono16" => 2,
            "32FC1" => 4,
            other => return Err(ImageError::NotDepth(other.to_string())),
        };
        check_size(width, height)?;
        let min = check_rows(width, height, step, bytes, data.len())?;
        let rows = data.chunks_exact(step).take(height as usize).map(|row| &row[..min]);
        let n = width as usize * height as usize;
        // One loop per encoding and byte order, so each compiles to a loop over the pixels
        // without a call per pixel (a live node decodes every depth image it receives).
        let metres = match (bytes, big_endian) {
            (2, false) => decoded(rows, n, |b: [u8; 2]| f32::from(u16::from_le_bytes(b)) * 1e-3),
            (2, true) => decoded(rows, n, |b: [u8; 2]| f32::from(u16::from_be_bytes(b)) * 1e-3),
            (_, false) => decoded(rows, n, f32::from_le_bytes),
            (_, true) => decoded(rows, n, f32::from_be_bytes),
        };
        Ok(Self { width, height, metres })
    }

    /// A depth image from metres per pixel (0: none), row-major.
    pub fn from_metres(width: u32, height: u32, metres: Vec<f32>) -> Result<Self, ImageError> {
        check_size(width, height)?;
        let expected = width as usize * height as usize;
        if metres.len() != expected {
            let step = width as usize * 4;
            return Err(ImageError::Truncated { expected: expected * 4, got: metres.len() * 4, height, step });
        }
        let metres = metres.into_iter().map(|z| if z.is_finite() && z > 0.0 { z } else { 0.0 }).collect();
        Ok(Self { width, height, metres })
    }

    /// Width, pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height, pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The depth at the pixel nearest to (x, y) of a colour image `colour` pixels large (the
    /// depth image registered to it, at its size or scaled uniformly); `None` outside the image
    /// or where the sensor measured nothing.
    pub fn at(&self, x: f64, y: f64, colour: (u32, u32)) -> Option<f64> {
        let sx = self.width as f64 / colour.0 as f64;
        let sy = self.height as f64 / colour.1 as f64;
        // Pixel centres: colour pixel x covers [x - 0.5, x + 0.5).
        let (u, v) = (((x + 0.5) * sx - 0.5).round(), ((y + 0.5) * sy - 0.5).round());
        if !(u >= 0.0 && v >= 0.0 && u < self.width as f64 && v < self.height as f64) {
            return None;
        }
        let z = self.metres[v as usize * self.width as usize + u as usize];
        (z > 0.0).then_some(z as f64)
    }
}

/// Every pixel of `rows` (each exactly a row's pixels, `pixels` in all) decoded by `decode`, "no
/// measurement" as 0.
fn decoded<'a, const N: usize>(
    rows: impl Iterator<Item = &'a [u8]>,
    pixels: usize,
    decode: impl Fn([u8; N]) -> f32,
) -> Vec<f32> {
    let mut metres = Vec::with_capacity(pixels);
    for row in rows {
        metres.extend(row.chunks_exact(N).map(|px| {
            let z = px.try_into().map_or(0.0, &decode);
            if z.is_finite() && z > 0.0 {
                z
            } else {
                0.0
            }
        }));
    }
    metres
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millimetres_and_metres_decode_to_the_same_depths() {
        let mm: [u16; 4] = [0, 1000, 2500, 65535];
        let data16: Vec<u8> = mm.iter().flat_map(|v| v.to_le_bytes()).chain([9, 9]).collect();
        let a = DepthImage::from_raw("16UC1", 2, 2, 4, false, &data16[..8]).unwrap();
        let m: [f32; 4] = [f32::NAN, 1.0, 2.5, 65.535];
        let data32: Vec<u8> = m.iter().flat_map(|v| v.to_be_bytes()).collect();
        let b = DepthImage::from_raw("32FC1", 2, 2, 8, true, &data32).unwrap();
        for (x, y) in [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)] {
            let (za, zb) = (a.at(x, y, (2, 2)), b.at(x, y, (2, 2)));
            assert_eq!(za.is_some(), zb.is_some());
            assert!(za.zip(zb).is_none_or(|(a, b)| (a - b).abs() < 1e-6), "{za:?} {zb:?}");
        }
        assert_eq!(a.at(0.0, 0.0, (2, 2)), None, "0 is no measurement");
        assert_eq!(b.at(0.0, 0.0, (2, 2)), None, "NaN is no measurement");
        assert_eq!(a.at(2.0, 0.0, (2, 2)), None, "outside");
        // Row padding (step 6 for 4 bytes of pixels) is skipped.
        let padded: Vec<u8> = [mm[0], mm[1]]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .chain([7, 7])
            .chain([mm[2], mm[3]].iter().flat_map(|v| v.to_le_bytes()))
            .chain([7, 7])
            .collect();
        assert_eq!(DepthImage::from_raw("16UC1", 2, 2, 6, false, &padded).unwrap(), a);
        // The other byte orders, and mono16, decode to the same.
        let be16: Vec<u8> = mm.iter().flat_map(|v| v.to_be_bytes()).collect();
        assert_eq!(DepthImage::from_raw("mono16", 2, 2, 4, true, &be16).unwrap(), a);
        let le32: Vec<u8> = m.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(DepthImage::from_raw("32FC1", 2, 2, 8, false, &le32).unwrap(), b);
        let negative: Vec<u8> = [-1.0f32, 1.0, f32::INFINITY, 0.5].iter().flat_map(|v| v.to_le_bytes()).collect();
        let c = DepthImage::from_raw("32FC1", 2, 2, 8, false, &negative).unwrap();
        assert_eq!([(0.0, 0.0), (1.0, 1.0)].map(|(x, y)| c.at(x, y, (2, 2))), [None, Some(0.5)]);
        assert_eq!(c.at(0.0, 1.0, (2, 2)), None, "infinite is no measurement");
    }

    #[test]
    fn a_depth_image_at_half_the_colour_size_is_read_where_the_colour_pixel_lies() {
        let d = DepthImage::from_metres(2, 1, vec![1.0, 2.0]).unwrap();
        assert_eq!(d.at(0.0, 0.0, (4, 2)), Some(1.0));
        assert_eq!(d.at(1.0, 1.0, (4, 2)), Some(1.0));
        assert_eq!(d.at(2.0, 0.0, (4, 2)), Some(2.0));
        assert_eq!(d.at(3.0, 1.0, (4, 2)), Some(2.0));
    }

    #[test]
    fn what_is_not_depth_is_refused_with_its_reason() {
        assert_eq!(DepthImage::from_raw("rgb8", 2, 2, 6, false, &[0; 12]), Err(ImageError::NotDepth("rgb8".into())));
        assert!(matches!(
            DepthImage::from_raw("16UC1", 2, 2, 4, false, &[0; 7]),
            Err(ImageError::Truncated { expected: 8, got: 7, .. })
        ));
        assert!(matches!(
            DepthImage::from_raw("32FC1", 2, 2, 4, false, &[0; 16]),
            Err(ImageError::StepTooSmall { .. })
        ));
        assert!(matches!(DepthImage::from_raw("32FC1", 0, 2, 0, false, &[]), Err(ImageError::ZeroSize { .. })));
    }
}
