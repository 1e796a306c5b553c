//! The compute core against straightforward reference loops (written here from the operators'
//! definitions), on odd sizes and channel counts the networks do not exercise.

use sp_dust3r_core::tensor::{
    bf16_available, l2_normalize_rows, matmul, max_filter_2d, softmax_rows, Conv1x1, Conv3x3, ConvTransposeBlock,
    FeatureMap, Precision,
};

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// PyTorch-semantics 3x3 conv, stride 1, zero padding 1, on dense HWC data; weight (co, ci, 3, 3).
fn conv3x3_ref(x: &[f32], h: usize, w: usize, ci: usize, wt: &[f32], b: &[f32], relu: bool) -> Vec<f32> {
    let co = b.len();
    let mut out = vec![0.0; h * w * co];
    for y in 0..h {
        for xx in 0..w {
            for o in 0..co {
                let mut acc = b[o] as f64;
                for dy in 0..3 {
                    for dx in 0..3 {
                        let (sy, sx) = (y as i64 + dy as i64 - 1, xx as i64 + dx as i64 - 1);
                        if sy < 0 || sx < 0 || sy >= h as i64 || sx >= w as i64 {
                            continue;
                        }
                        for c in 0..ci {
                            acc += x[(sy as usize * w + sx as usize) * ci + c] as f64
                                * wt[((o * ci + c) * 3 + dy) * 3 + dx] as f64;
                        }
                    }
                }
                out[(y * w + xx) * co + o] = if relu { acc.max(0.0) as f32 } else { acc as f32 };
            }
        }
    }
    out
}

fn pool_ref(x: &[f32], h: usize, w: usize, c: usize) -> Vec<f32> {
    let (oh, ow) = (h / 2, w / 2);
    let mut out = vec![0.0; oh * ow * c];
    for y in 0..oh {
        for xx in 0..ow {
            for ch in 0..c {
                let at = |dy: usize, dx: usize| x[((2 * y + dy) * w + 2 * xx + dx) * c + ch];
                out[(y * ow + xx) * c + ch] = at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1));
            }
        }
    }
    out
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    assert!(worst <= tol, "{what}: max difference {worst}");
}

#[test]
fn conv3x3_matches_reference_for_gemm_and_direct_kernels() {
    // Direct kernel (<= 4 input channels) and Winograd's: odd sizes leave half tiles at the edges,
    // channel counts off the 8-lane steps leave tails in both transforms.
    for &(h, w, ci, co) in
        &[(7, 9, 1, 5), (5, 13, 3, 64), (6, 6, 16, 24), (9, 11, 64, 70), (1, 1, 8, 8), (7, 10, 13, 19), (2, 3, 5, 9)]
    {
        let x = values(h * w * ci, 1);
        let wt = values(co * ci * 9, 2);
        let b = values(co, 3);
        let conv = Conv3x3::from_torch(co, ci, &wt, &b).unwrap();
        let map = FeatureMap::from_dense(h, w, ci, &x).unwrap();
        for relu in [false, true] {
            let ours = conv.forward(&map, relu).unwrap();
            assert_close(
                &ours.to_dense(),
                &conv3x3_ref(&x, h, w, ci, &wt, &b, relu),
                1e-4,
                &format!("conv {h}x{w} {ci}->{co}"),
            );
        }
    }
}

/// In bf16 each product's operands carry a relative error of at most 2^-9, so an output differs
/// from the exact one by at most about 2^-8 of the sum of its terms' magnitudes (the f64
/// reference on |x| and |w|); Winograd's transformed operands are what is rounded, which may add
/// as much again. Where the CPU has no bf16 kernel the layers are float32 and meet the float32 bound.
#[test]
fn convolutions_in_bf16_stay_within_bf16s_rounding() {
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    let bf16 = bf16_available();
    for &(h, w, ci, co) in &[(9, 11, 64, 70), (7, 10, 13, 19), (16, 16, 256, 32)] {
        let (x, wt, b) = (values(h * w * ci, 4), values(co * ci * 9, 5), values(co, 6));
        let map = FeatureMap::from_dense(h, w, ci, &x).unwrap();
        let exact = conv3x3_ref(&x, h, w, ci, &wt, &b, false);
        let magnitude = conv3x3_ref(&abs(&x), h, w, ci, &abs(&wt), &vec![0.0; co], false);
        let ours = Conv3x3::from_torch_in(co, ci, &wt, &b, Precision::Bf16).unwrap().forward(&map, false).unwrap();
        let worst = ours
            .to_dense()
            .iter()
            .zip(&exact)
            .zip(&magnitude)
            .map(|((o, e), m)| (o - e).abs() / (m + 1e-6))
            .fold(0.0f32, f32::max);
        let bound = if bf16 { 2.0 * 2f32.powi(-8) } else { 1e-5 };
        eprintln!(
            "conv3x3 {ci}->{co} in {}: worst error {worst:.2e} of the terms' magnitude",
            if bf16 { "bf16" } else { "fp32" }
        );
        assert!(worst <= bound, "conv3x3 {ci}->{co}: error {worst} of the terms' magnitude, bound {bound}");
        if bf16 {
            assert!(worst > 1e-5, "conv3x3 {ci}->{co}: no rounding seen ({worst}): did it run in bf16?");
        }
    }
    let (h, w, ci, co) = (5, 7, 48, 40);
    let (x, wt, b) = (values(h * w * ci, 7), values(co * ci, 8), values(co, 9));
    let map = FeatureMap::from_dense(h, w, ci, &x).unwrap();
    let fp32 = Conv1x1::from_torch(co, ci, &wt, &b).unwrap().forward(&map, false).unwrap().to_dense();
    let low =
        Conv1x1::from_torch_in(co, ci, &wt, &b, Precision::Bf16).unwrap().forward(&map, false).unwrap().to_dense();
    assert_close(&low, &fp32, if bf16 { 2f32.powi(-8) * ci as f32 } else { 0.0 }, "conv1x1 in bf16");
    let wt = values(ci * co * 4, 10);
    let fp32 = ConvTransposeBlock::from_torch(ci, co, 2, &wt, &b).unwrap().forward(&map).unwrap().to_dense();
    let low = ConvTransposeBlock::from_torch_in(ci, co, 2, &wt, &b, Precision::Bf16).unwrap();
    assert_close(
        &low.forward(&map).unwrap().to_dense(),
        &fp32,
        if bf16 { 2f32.powi(-8) * ci as f32 } else { 0.0 },
        "transposed in bf16",
    );
}

#[test]
fn fused_conv_pool_kernels_match_unfused_reference() {
    // Odd heights and widths exercise the dropped trailing row/column and partial bands; the
    // kernels: direct then Winograd (SuperPoint's), direct then direct, Winograd then Winograd.
    for &(h, w, ci, c1, c2) in
        &[(10, 14, 1, 8, 16), (13, 9, 2, 64, 32), (16, 20, 1, 64, 64), (3, 5, 8, 16, 16), (11, 8, 3, 4, 6)]
    {
        let x = values(h * w * ci, 4);
        let (w1, b1) = (values(c1 * ci * 9, 5), values(c1, 6));
        let (w2, b2) = (values(c2 * c1 * 9, 7), values(c2, 8));
        let a = Conv3x3::from_torch(c1, ci, &w1, &b1).unwrap();
        let b = Conv3x3::from_torch(c2, c1, &w2, &b2).unwrap();
        let map = FeatureMap::from_dense(h, w, ci, &x).unwrap();

        let first = conv3x3_ref(&x, h, w, ci, &w1, &b1, true);
        let second = conv3x3_ref(&first, h, w, c1, &w2, &b2, true);
        let want = pool_ref(&second, h, w, c2);

        let pair = a.forward_pair_relu_pooled(&b, &map).unwrap();
        assert_eq!((pair.height(), pair.width(), pair.channels()), (h / 2, w / 2, c2));
        assert_close(&pair.to_dense(), &want, 1e-4, &format!("pair {h}x{w}"));

        let a_map = FeatureMap::from_dense(h, w, c1, &first).unwrap();
        let single = b.forward_relu_pooled(&a_map).unwrap();
        assert_close(&single.to_dense(), &want, 1e-4, &format!("conv+pool {h}x{w}"));

        let unfused = b.forward(&a_map, true).unwrap().max_pool_2x2();
        assert_close(&unfused.to_dense(), &want, 1e-4, &format!("max_pool_2x2 {h}x{w}"));
    }
}

#[test]
fn conv1x1_on_a_channel_range() {
    let (h, w, c_all, offset, ci, co) = (5, 7, 40, 12, 20, 9);
    let x = values(h * w * c_all, 9);
    let (wt, b) = (values(co * ci, 10), values(co, 11));
    let conv = Conv1x1::from_torch(co, ci, &wt, &b).unwrap();
    let map = FeatureMap::from_dense(h, w, c_all, &x).unwrap();
    let ours = conv.forward_channels(&map, offset, false).unwrap().to_dense();
    let mut want = vec![0.0; h * w * co];
    for p in 0..h * w {
        for o in 0..co {
            want[p * co + o] = b[o] + (0..ci).map(|c| x[p * c_all + offset + c] * wt[o * ci + c]).sum::<f32>();
        }
    }
    assert_close(&ours, &want, 1e-5, "conv1x1");
    assert!(conv.forward_channels(&map, 30, false).is_err(), "channel range past the end must be refused");
}

#[test]
fn matmul_with_strides_and_accumulation() {
    let (m, n, k) = (37, 19, 23);
    let (a, b) = (values(m * 30, 12), values(k * 25, 13)); // row strides 30 and 25
    let mut c = values(m * 20, 14); // row stride 20
    let c0 = c.clone();
    matmul(&mut c, 20, &a, 30, &b, 25, (m, n, k), true).unwrap();
    for i in 0..m {
        for j in 0..n {
            let want = c0[i * 20 + j] + (0..k).map(|p| a[i * 30 + p] * b[p * 25 + j]).sum::<f32>();
            assert!((c[i * 20 + j] - want).abs() < 1e-4);
        }
        assert_eq!(&c[i * 20 + n..i * 20 + 20], &c0[i * 20 + n..i * 20 + 20], "columns past n untouched");
    }
    let mut small = vec![0.0; 10];
    assert!(matmul(&mut small, 20, &a, 30, &b, 25, (m, n, k), false).is_err());
}

#[test]
fn softmax_norms_and_max_filter() {
    let mut x = values(65 * 31, 15).iter().map(|v| v * 30.0).collect::<Vec<_>>();
    let orig = x.clone();
    softmax_rows(&mut x, 65);
    for (row, o) in x.chunks(65).zip(orig.chunks(65)) {
        let max = o.iter().copied().fold(f32::MIN, f32::max) as f64;
        let sum: f64 = o.iter().map(|&v| (v as f64 - max).exp()).sum();
        for (p, &v) in row.iter().zip(o) {
            let want = ((v as f64 - max).exp() / sum) as f32;
            assert!((p - want).abs() <= 1e-6 + 1e-5 * want, "{p} vs {want}");
        }
    }

    let mut d = values(256 * 9, 16);
    d[256..512].fill(0.0); // a zero row stays zero (eps), no NaN
    l2_normalize_rows(&mut d, 256, 1e-12);
    for (i, row) in d.chunks(256).enumerate() {
        let n: f32 = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!(if i == 1 { n == 0.0 } else { (n - 1.0).abs() < 1e-5 }, "row {i} norm {n}");
    }

    let (h, w, r) = (23, 31, 4);
    let p = values(h * w, 17);
    let ours = max_filter_2d(&p, h, w, r).unwrap();
    for y in 0..h {
        for x in 0..w {
            let mut m = f32::MIN;
            for yy in y.saturating_sub(r)..(y + r + 1).min(h) {
                for xx in x.saturating_sub(r)..(x + r + 1).min(w) {
                    m = m.max(p[yy * w + xx]);
                }
            }
            assert_eq!(ours[y * w + x], m, "({x},{y})");
        }
    }
}
