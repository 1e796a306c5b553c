//! DUSt3R input preparation: the tt-model server's pad (or crop) to a square + PIL BICUBIC to
//! 512x512, and upstream's long side 512 (LANCZOS when shrinking) + crop to multiples of 16;
//! normalised to [-1, 1]; checked against the filters' definitions.

use sp_dust3r_core::dust3r::{prepare, PrepMode};
use sp_dust3r_core::image::Frame;

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

/// PIL's LANCZOS kernel: sinc(x) sinc(x / 3) on |x| < 3.
fn lanczos3(x: f64) -> f64 {
    let sinc = |t: f64| if t == 0.0 { 1.0 } else { (std::f64::consts::PI * t).sin() / (std::f64::consts::PI * t) };
    if x.abs() < 3.0 {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// PIL's resampling weights: taps within `support * max(scale, 1)` of the output centre
/// `(x + 0.5) * scale`, kernel stretched by `max(scale, 1)`, clipped and renormalised.
fn weights_with(out_len: usize, in_len: usize, kernel: fn(f64) -> f64, support: f64) -> Vec<Vec<(usize, f64)>> {
    let scale = in_len as f64 / out_len as f64;
    let fs = scale.max(1.0);
    (0..out_len)
        .map(|x| {
            let centre = (x as f64 + 0.5) * scale;
            let lo = (centre - support * fs).floor().max(0.0) as usize;
            let hi = ((centre + support * fs).ceil() as usize).min(in_len);
            let taps: Vec<(usize, f64)> = (lo..hi).map(|j| (j, kernel((j as f64 + 0.5 - centre) / fs))).collect();
            let sum: f64 = taps.iter().map(|t| t.1).sum();
            taps.into_iter().map(|(j, w)| (j, w / sum)).collect()
        })
        .collect()
}

/// PIL's separable resize of 8-bit RGB: horizontal pass (rounded to 8 bits), then vertical.
fn resize_ref(
    img: &[u8],
    (w, h): (usize, usize),
    (ow, oh): (usize, usize),
    kernel: fn(f64) -> f64,
    support: f64,
) -> Vec<u8> {
    let (wx, wy) = (weights_with(ow, w, kernel, support), weights_with(oh, h, kernel, support));
    let mut horizontal = vec![0u8; h * ow * 3];
    for y in 0..h {
        for x in 0..ow {
            for c in 0..3 {
                let v: f64 = wx[x].iter().map(|&(j, k)| k * img[(y * w + j) * 3 + c] as f64).sum();
                horizontal[(y * ow + x) * 3 + c] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    let mut out = vec![0u8; oh * ow * 3];
    for y in 0..oh {
        for x in 0..ow {
            for c in 0..3 {
                let v: f64 = wy[y].iter().map(|&(j, k)| k * horizontal[(j * ow + x) * 3 + c] as f64).sum();
                out[(y * ow + x) * 3 + c] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

/// The reference square canvas resized to `size` with PIL's BICUBIC.
fn reference(square: &[u8], side: usize, size: usize) -> Vec<u8> {
    resize_ref(square, (side, side), (size, size), keys, 2.0)
}

fn max_level_difference(a: &[u8], b: &[u8]) -> i32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (*x as i32 - *y as i32).abs()).max().unwrap_or(0)
}

#[test]
fn pad_mode_matches_pil_bicubic_on_a_gray_padded_square() {
    let frame = random_rgb(640, 480, 7);
    let view = prepare(&frame, PrepMode::Pad, 512).unwrap();
    let m = view.mapping;
    assert_eq!((view.width, view.height, m.scale_x, m.offset_x, m.offset_y), (512, 512, 0.8, 0.0, 64.0));
    let rgb = frame.to_rgb8();
    let mut square = vec![128u8; 640 * 640 * 3];
    square[80 * 640 * 3..560 * 640 * 3].copy_from_slice(&rgb);
    let want = reference(&square, 640, 512);
    let worst = max_level_difference(&view.rgb, &want);
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
    let view = prepare(&frame, PrepMode::CropSquare, 512).unwrap();
    let m = view.mapping;
    let s = 512.0 / 600.0;
    assert_eq!((m.scale_x, m.offset_x, m.offset_y), (s, -100.0 * s, 0.0));
    let rgb = frame.to_rgb8();
    let mut square = vec![0u8; 600 * 600 * 3];
    for y in 0..600 {
        square[y * 1800..(y + 1) * 1800].copy_from_slice(&rgb[(y * 800 + 100) * 3..(y * 800 + 700) * 3]);
    }
    let want = reference(&square, 600, 512);
    let worst = max_level_difference(&view.rgb, &want);
    assert!(worst <= 1, "max difference {worst}");
}

#[test]
fn square_512_input_is_not_resampled_and_gray_frames_replicate() {
    let frame = random_rgb(512, 512, 3);
    let view = prepare(&frame, PrepMode::Pad, 512).unwrap();
    assert_eq!(view.rgb, frame.to_rgb8());
    let gray = Frame::from_raw("mono8", 2, 1, 2, false, vec![10, 200]).unwrap();
    assert_eq!(gray.to_rgb8(), vec![10, 10, 10, 200, 200, 200]);
    let bgr = Frame::from_raw("bgra8", 1, 1, 4, false, vec![1, 2, 3, 4]).unwrap();
    assert_eq!(bgr.to_rgb8(), vec![3, 2, 1]);
}

/// Input size, resized size, crop box (x0, y0, w, h), and whether upstream shrinks with LANCZOS.
type UpstreamCase = ((u32, u32), (usize, usize), (usize, usize, usize, usize), bool);

#[test]
fn upstream_mode_resizes_the_long_side_and_crops_to_multiples_of_16() {
    // From upstream's rules: long side 512 (round half to even), centre crop to multiples of 16,
    // 4:3 for squares.
    check_upstream(
        512,
        &[
            ((640, 480), (512, 384), (0, 0, 512, 384), true),
            ((1920, 1080), (512, 288), (0, 0, 512, 288), true),
            ((600, 600), (512, 512), (0, 64, 512, 384), true),
            ((300, 200), (512, 341), (0, 2, 512, 336), false),
        ],
    );
}

#[test]
fn upstream_mode_at_224_resizes_the_short_side_and_crops_the_centre_square() {
    // From upstream's rules for size 224: long side round(224 * long / short), so the short
    // side comes out at 224, then the centre square of half min(W // 2, H // 2).
    check_upstream(
        224,
        &[
            ((640, 480), (299, 224), (37, 0, 224, 224), true),
            ((480, 640), (224, 299), (0, 37, 224, 224), true),
            ((1920, 1080), (398, 224), (87, 0, 224, 224), true),
            ((200, 150), (299, 224), (37, 0, 224, 224), false),
        ],
    );
}

fn check_upstream(size: u32, cases: &[UpstreamCase]) {
    for &((w, h), (rw, rh), (x0, y0, cw, ch), lanczos) in cases {
        let frame = random_rgb(w, h, w as u64 + h as u64);
        let view = prepare(&frame, PrepMode::Upstream, size).unwrap();
        assert_eq!((view.width as usize, view.height as usize), (cw, ch), "{w}x{h}");
        let full = if lanczos {
            resize_ref(&frame.to_rgb8(), (w as usize, h as usize), (rw, rh), lanczos3, 3.0)
        } else {
            resize_ref(&frame.to_rgb8(), (w as usize, h as usize), (rw, rh), keys, 2.0)
        };
        let mut want = Vec::with_capacity(cw * ch * 3);
        for y in y0..y0 + ch {
            want.extend_from_slice(&full[(y * rw + x0) * 3..(y * rw + x0 + cw) * 3]);
        }
        // Lanczos' large lobes on noise: the 8-bit intermediate and fixed-point weights may
        // round a rare pixel by 2 levels.
        let worst = max_level_difference(&view.rgb, &want);
        let mean =
            view.rgb.iter().zip(&want).map(|(a, b)| (*a as f64 - *b as f64).abs()).sum::<f64>() / want.len() as f64;
        assert!(worst <= 2 && mean < 0.1, "{w}x{h}: max difference {worst} levels (mean {mean}) from PIL's definition");
        let m = view.mapping;
        let (u, v) = m.to_network(w as f64 / 2.0, h as f64 / 2.0);
        assert!((u - (rw as f64 / 2.0 - x0 as f64)).abs() < 1e-9 && (v - (rh as f64 / 2.0 - y0 as f64)).abs() < 1e-9);
    }
}
