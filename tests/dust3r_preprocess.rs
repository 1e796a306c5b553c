//! DUSt3R input preparation (tt-model server convention): pad (or crop) to a square, PIL
//! BICUBIC to 512x512, normalise to [-1, 1]; checked against the filter's definition.

use sp_dust3r::dust3r::{prepare, SquareMode};
use sp_dust3r::image::Frame;

fn random_rgb(w: u32, h: u32, seed: u64) -> Frame {
    let mut s = seed;
    let data: Vec<u8> = (0..w * h * 3)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect();
    Frame::from_raw("rgb8", w, h, (w * 3) as usize, false, data).unwrap()
}

/// Keys' cubic convolution kernel with a = -0.5 (PIL's BICUBIC).
fn keys(x: f64) -> f64 {
    let (a, x) = (-0.5, x.abs());
    if x < 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        a * (((x - 5.0) * x + 8.0) * x - 4.0)
    } else {
        0.0
    }
}

/// PIL's resampling weights: taps within `2 * max(scale, 1)` of the output centre
/// `(x + 0.5) * scale`, kernel stretched by `max(scale, 1)`, clipped and renormalised.
fn weights(out_len: usize, in_len: usize) -> Vec<Vec<(usize, f64)>> {
    let scale = in_len as f64 / out_len as f64;
    let fs = scale.max(1.0);
    (0..out_len)
        .map(|x| {
            let centre = (x as f64 + 0.5) * scale;
            let lo = (centre - 2.0 * fs).floor().max(0.0) as usize;
            let hi = ((centre + 2.0 * fs).ceil() as usize).min(in_len);
            let taps: Vec<(usize, f64)> = (lo..hi).map(|j| (j, keys((j as f64 + 0.5 - centre) / fs))).collect();
            let sum: f64 = taps.iter().map(|t| t.1).sum();
            taps.into_iter().map(|(j, w)| (j, w / sum)).collect()
        })
        .collect()
}

/// The reference square canvas and its resize, channel `c` of output pixel (x, y).
fn reference(square: &[u8], side: usize, size: usize) -> Vec<u8> {
    let wx = weights(size, side);
    // Separable like PIL: horizontal pass (rounded to 8 bits), then vertical.
    let mut horizontal = vec![0u8; side * size * 3];
    for y in 0..side {
        for x in 0..size {
            for c in 0..3 {
                let v: f64 = wx[x].iter().map(|&(j, w)| w * square[(y * side + j) * 3 + c] as f64).sum();
                horizontal[(y * size + x) * 3 + c] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    let mut out = vec![0u8; size * size * 3];
    for y in 0..size {
        for x in 0..size {
            for c in 0..3 {
                let v: f64 = wx[y].iter().map(|&(j, w)| w * horizontal[(j * size + x) * 3 + c] as f64).sum();
                out[(y * size + x) * 3 + c] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

#[test]
fn pad_mode_matches_pil_bicubic_on_a_gray_padded_square() {
    let frame = random_rgb(640, 480, 7);
    let view = prepare(&frame, SquareMode::Pad).unwrap();
    let m = view.mapping;
    assert_eq!((m.side, m.offset_x, m.offset_y, m.size), (640, 0, 80, 512));
    let rgb = frame.to_rgb8();
    let mut square = vec![128u8; 640 * 640 * 3];
    square[80 * 640 * 3..560 * 640 * 3].copy_from_slice(&rgb);
    let want = reference(&square, 640, 512);
    let worst = view.rgb.iter().zip(&want).map(|(a, b)| (*a as i32 - *b as i32).abs()).max().unwrap();
    assert!(worst <= 1, "max difference {worst} levels from PIL's bicubic");
    // Normalisation: (v / 255 - 0.5) / 0.5, planar; the top rows are all padding.
    let pad = (128.0 / 255.0 - 0.5) / 0.5;
    assert!((0..3).all(|c| (0..512 * 20).all(|i| (view.image[c * 512 * 512 + i] - pad).abs() < 1e-6)));
    let i = 300 * 512 + 17;
    assert!((view.image[2 * 512 * 512 + i] - (view.rgb[i * 3 + 2] as f32 / 127.5 - 1.0)).abs() < 1e-6);
    // Mapping: original (x, y) -> ((x + 0) * 0.8, (y + 80) * 0.8), and back.
    assert_eq!(m.to_network(100.0, 50.0), (80.0, 104.0));
    let (x, y) = m.to_original(80.0, 104.0);
    assert!((x - 100.0).abs() < 1e-9 && (y - 50.0).abs() < 1e-9);
}

#[test]
fn crop_mode_keeps_the_centre_square() {
    let frame = random_rgb(800, 600, 9);
    let view = prepare(&frame, SquareMode::Crop).unwrap();
    let m = view.mapping;
    assert_eq!((m.side, m.offset_x, m.offset_y), (600, -100, 0));
    let rgb = frame.to_rgb8();
    let mut square = vec![0u8; 600 * 600 * 3];
    for y in 0..600 {
        square[y * 1800..(y + 1) * 1800].copy_from_slice(&rgb[(y * 800 + 100) * 3..(y * 800 + 700) * 3]);
    }
    let want = reference(&square, 600, 512);
    let worst = view.rgb.iter().zip(&want).map(|(a, b)| (*a as i32 - *b as i32).abs()).max().unwrap();
    assert!(worst <= 1, "max difference {worst}");
}

#[test]
fn square_512_input_is_not_resampled_and_gray_frames_replicate() {
    let frame = random_rgb(512, 512, 3);
    let view = prepare(&frame, SquareMode::Pad).unwrap();
    assert_eq!(view.rgb, frame.to_rgb8());
    let gray = Frame::from_raw("mono8", 2, 1, 2, false, vec![10, 200]).unwrap();
    assert_eq!(gray.to_rgb8(), vec![10, 10, 10, 200, 200, 200]);
    let bgr = Frame::from_raw("bgra8", 1, 1, 4, false, vec![1, 2, 3, 4]).unwrap();
    assert_eq!(bgr.to_rgb8(), vec![3, 2, 1]);
}
