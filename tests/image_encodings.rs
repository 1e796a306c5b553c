//! The camera encodings beyond plain RGB/mono: YUV 4:2:2 (BT.601, as OpenCV/cv_bridge) and the
//! four 8-bit Bayer patterns (bilinear demosaicing), against values from their definitions.

use sp_dust3r_core::image::{Frame, ImageError};

#[test]
fn yuv422_converts_with_bt601_studio_range() {
    // UYVY: U Y0 V Y1. White (Y 235) and black (Y 16) at neutral chroma; BT.601 red is
    // (Y, Cb, Cr) = (81, 90, 240).
    let f = Frame::from_raw("yuv422", 4, 1, 8, false, vec![128, 235, 128, 16, 90, 81, 240, 81]).unwrap();
    let rgb = f.to_rgb8();
    assert_eq!(&rgb[..6], &[255, 255, 255, 0, 0, 0]);
    for (got, want) in rgb[6..9].iter().zip([255u8, 0, 0]) {
        assert!((*got as i32 - want as i32).abs() <= 2, "red: {:?}", &rgb[6..9]);
    }
    // YUYV: Y0 U Y1 V, same pixels.
    let g = Frame::from_raw("yuv422_yuy2", 4, 1, 8, false, vec![235, 128, 16, 128, 81, 90, 81, 240]).unwrap();
    assert_eq!(g.to_rgb8(), rgb);
    let luma = f.to_luma();
    assert!((luma.data[0] - 1.0).abs() < 1e-6 && luma.data[1] == 0.0);
    assert_eq!(
        Frame::from_raw("yuv422", 3, 1, 6, false, vec![0; 6]).err(),
        Some(ImageError::OddWidth { encoding: "yuv422", width: 3 })
    );
}

/// Mosaics an RGB function through a pattern ("RGGB" = colours of the 2x2 cell, row by row).
fn mosaic(pattern: &str, w: usize, h: usize, rgb: impl Fn(usize, usize) -> [u8; 3]) -> Vec<u8> {
    let cell: Vec<usize> = pattern.chars().map(|c| "RGB".find(c).unwrap()).collect();
    (0..h).flat_map(|y| (0..w).map(move |x| (x, y))).map(|(x, y)| rgb(x, y)[cell[(y % 2) * 2 + x % 2]]).collect()
}

#[test]
fn bayer_patterns_demosaic_to_the_scene() {
    let (w, h) = (8usize, 6usize);
    for (encoding, pattern) in
        [("bayer_rggb8", "RGGB"), ("bayer_bggr8", "BGGR"), ("bayer_gbrg8", "GBRG"), ("bayer_grbg8", "GRBG")]
    {
        // A flat colour comes back exactly, borders included.
        let flat =
            Frame::from_raw(encoding, w as u32, h as u32, w, false, mosaic(pattern, w, h, |_, _| [200, 100, 50]))
                .unwrap();
        assert!(flat.to_rgb8().chunks(3).all(|p| p == [200, 100, 50]), "{encoding}: flat colour");
        // Linear ramps come back exactly inside (bilinear interpolation of a linear function).
        let ramp = |x: usize, y: usize| [(10 * x + 3 * y) as u8, (20 + 8 * x) as u8, (100 + 5 * y) as u8];
        let frame = Frame::from_raw(encoding, w as u32, h as u32, w, false, mosaic(pattern, w, h, ramp)).unwrap();
        let rgb = frame.to_rgb8();
        for y in 1..h - 1 {
            for x in 1..w - 1 {
                let got = &rgb[(y * w + x) * 3..(y * w + x) * 3 + 3];
                for (g, e) in got.iter().zip(ramp(x, y)) {
                    assert!((*g as i32 - e as i32).abs() <= 1, "{encoding} ({x},{y}): {got:?} vs {:?}", ramp(x, y));
                }
            }
        }
        assert_eq!(frame.to_luma().data.len(), w * h);
    }
}
