//! SuperPoint input preprocessing: resize to 640x480 with an antialiased bilinear filter.
//! Expectations come from properties any correct filter of that kind has, not from our code.

use sp_dust3r_core::image::LumaImage;
use sp_dust3r_core::superpoint::preprocess;

fn image(w: u32, h: u32, f: impl Fn(u32, u32) -> f32) -> LumaImage {
    let data = (0..h).flat_map(|y| (0..w).map(move |x| (x, y))).map(|(x, y)| f(x, y)).collect();
    LumaImage { width: w, height: h, data }
}

/// PIL's `BILINEAR` resampling (the filter torchvision's `antialias=True` also follows), written
/// out from its definition in f64: output pixel x has its centre at source position
/// (x + 0.5) * scale; taps are the source pixels whose centres lie within `support = max(scale, 1)`
/// of it, weighted by the triangle 1 - |d| / support, clipped to the image and renormalised.
fn pil_bilinear_weights(out_len: usize, in_len: usize) -> Vec<Vec<(usize, f64)>> {
    let scale = in_len as f64 / out_len as f64;
    let support = scale.max(1.0);
    (0..out_len)
        .map(|x| {
            let centre = (x as f64 + 0.5) * scale;
            let lo = ((centre - support).floor().max(0.0)) as usize;
            let hi = ((centre + support).ceil() as usize).min(in_len);
            let taps: Vec<(usize, f64)> = (lo..hi)
                .map(|j| (j, (1.0 - ((j as f64 + 0.5 - centre) / support).abs()).max(0.0)))
                .filter(|&(_, w)| w > 0.0)
                .collect();
            let sum: f64 = taps.iter().map(|t| t.1).sum();
            taps.into_iter().map(|(j, w)| (j, w / sum)).collect()
        })
        .collect()
}

#[test]
fn resize_matches_the_antialiased_bilinear_definition() {
    for (w, h) in [(1280u32, 960u32), (1000, 700), (320, 240), (641, 479)] {
        let img = image(w, h, |x, y| ((x * 7919 + y * 104729) % 1021) as f32 / 1020.0);
        let out = preprocess(&img).unwrap();
        assert_eq!((out.width, out.height), (640, 480));
        let wx = pil_bilinear_weights(640, w as usize);
        let wy = pil_bilinear_weights(480, h as usize);
        let mut worst = 0.0f64;
        for (y, wy) in wy.iter().enumerate() {
            for (x, wx) in wx.iter().enumerate() {
                let mut want = 0.0;
                for &(sy, ky) in wy {
                    for &(sx, kx) in wx {
                        want += ky * kx * img.data[sy * w as usize + sx] as f64;
                    }
                }
                worst = worst.max((out.plane[y * 640 + x] as f64 - want).abs());
            }
        }
        eprintln!("{w}x{h}: max deviation from the definition {worst:.2e}");
        assert!(worst < 1e-6, "{w}x{h}: max deviation {worst}");
        // Network pixels map back to input pixels through the same centre alignment.
        let (sx, sy) = (w as f32 / 640.0, h as f32 / 480.0);
        let back = out.to_input_pixels([100.0, 50.0]);
        assert!((back[0] - (100.5 * sx - 0.5)).abs() < 1e-4 && (back[1] - (50.5 * sy - 0.5)).abs() < 1e-4);
    }
}

#[test]
fn downscaling_is_antialiased() {
    // Alternating 0/1 columns at 2x the output width: a plain bilinear sample at the source
    // position x*2+0.5 would average two columns exactly, but at 3x (1920 wide) it would alias
    // into stripes; an antialiased filter returns the mean, 0.5, everywhere inside.
    let stripes = image(1920, 1440, |x, _| (x % 2) as f32);
    let out = preprocess(&stripes).unwrap();
    for y in 4..476usize {
        for x in 4..636usize {
            let v = out.plane[y * 640 + x];
            assert!((v - 0.5).abs() < 0.06, "({x},{y}) = {v}");
        }
    }
}

#[test]
fn constant_images_stay_constant_and_640x480_is_untouched() {
    let grey = image(800, 600, |_, _| 0.25);
    let out = preprocess(&grey).unwrap();
    assert!(out.plane.iter().all(|v| (v - 0.25).abs() < 1e-6));
    let noise = image(640, 480, |x, y| ((x * 7919 + y * 104729) % 256) as f32 / 255.0);
    assert_eq!(preprocess(&noise).unwrap().plane, noise.data);
}
