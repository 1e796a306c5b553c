//! What bf16's error does to PairViewer's pose. Deterministic weights predict no geometry a pose
//! could be read from, so the error bf16 makes against fp32 at each pixel (of both passes) is
//! carried onto the exact pointmaps of [`crate::synthetic_pair`], whose pose is known, and the
//! pose is recovered with and without it. With trained weights (`--weights`) the two precisions'
//! own poses are compared as well.

use anyhow::Context;
use sp_dust3r_core::dust3r::{Dust3r, PairPrediction, Pointmap};
use sp_dust3r_core::geometry::{relative_pose, PairPose, PoseOptions};

use crate::PairTimes;

/// Both passes of the pair `times` last ran: its forward outputs, and the swapped pass's (run
/// here on the same encodings when the timing did not run it).
fn both_passes(model: &Dust3r, times: &PairTimes) -> anyhow::Result<[PairPrediction; 2]> {
    let (view1, view2_in_1) = times.last.clone();
    let swapped = match &times.last_swapped {
        Some(p) => p.clone(),
        None => {
            let [e1, e2] = times.encoded.as_ref().context("no pair was run")?;
            model.predict(e2, e1)?
        }
    };
    Ok([PairPrediction { view1, view2_in_1 }, swapped])
}

/// `exact` with, at each pixel, the error `lower` makes against `base` at pixel `source(i)` of
/// their grid: the point moved by the relative error vector times its own distance, the
/// confidence scaled by the same ratio.
fn carry_error(
    exact: &Pointmap,
    base: &Pointmap,
    lower: &Pointmap,
    source: &dyn Fn(usize) -> usize,
    unbiased: bool,
) -> Pointmap {
    let bias = if unbiased { mean_error(base, lower) } else { [0.0; 3] };
    let mut out = exact.clone();
    for i in 0..exact.height * exact.width {
        let j = source(i);
        let (b, l) = (&base.points[3 * j..3 * j + 3], &lower.points[3 * j..3 * j + 3]);
        let (nb, ne) = (norm(b).max(1e-12), norm(&exact.points[3 * i..3 * i + 3]));
        for c in 0..3 {
            out.points[3 * i + c] += ((l[c] - b[c]) / nb - bias[c]) * ne;
        }
        out.confidence[i] *= lower.confidence[j] / base.confidence[j].max(1e-12);
    }
    out
}

fn norm(p: &[f32]) -> f32 {
    p.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// The mean of `lower`'s relative error vectors against `base`.
fn mean_error(base: &Pointmap, lower: &Pointmap) -> [f32; 3] {
    let mut sum = [0.0f64; 3];
    for (b, l) in base.points.chunks_exact(3).zip(lower.points.chunks_exact(3)) {
        let nb = norm(b).max(1e-12);
        for c in 0..3 {
            sum[c] += ((l[c] - b[c]) / nb) as f64;
        }
    }
    let n = (base.points.len() / 3).max(1) as f64;
    sum.map(|s| (s / n) as f32)
}

/// [`carry_error`] for both maps of each pass.
fn carry(
    exact: &[PairPrediction; 2],
    base: &[PairPrediction; 2],
    lower: &[PairPrediction; 2],
    source: &dyn Fn(usize) -> usize,
    unbiased: bool,
) -> [PairPrediction; 2] {
    [0, 1].map(|k| PairPrediction {
        view1: carry_error(&exact[k].view1, &base[k].view1, &lower[k].view1, source, unbiased),
        view2_in_1: carry_error(&exact[k].view2_in_1, &base[k].view2_in_1, &lower[k].view2_in_1, source, unbiased),
    })
}

fn pose_of(passes: &[PairPrediction; 2]) -> anyhow::Result<PairPose> {
    seeded_pose(passes, PoseOptions::default().seed)
}

fn seeded_pose(passes: &[PairPrediction; 2], seed: u64) -> anyhow::Result<PairPose> {
    let opts = PoseOptions { seed, ..PoseOptions::default() };
    relative_pose(&passes[0], &passes[1], &opts).map_err(|e| anyhow::anyhow!("no pose: {e}"))
}

/// The yardstick: how far PairViewer's pose moves on the same pointmaps when only RANSAC's seed
/// changes (rotation, translation direction; degrees, median and largest over 8 seeds).
fn seed_spread(passes: &[PairPrediction; 2]) -> anyhow::Result<String> {
    let reference = pose_of(passes)?;
    let (mut rot, mut dir) = (Vec::new(), Vec::new());
    for seed in 1..=8 {
        let p = seeded_pose(passes, seed)?;
        rot.push(reference.t_cam1_cam2.rotation_error_deg(&p.t_cam1_cam2));
        dir.push(reference.t_cam1_cam2.translation_direction_error_deg(&p.t_cam1_cam2));
    }
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    Ok(format!(
        "rotation {:.4} (max {:.4}) deg, translation direction {:.4} (max {:.4}) deg",
        sp_dust3r_core::quantile::median(&rot),
        max(&rot),
        sp_dust3r_core::quantile::median(&dir),
        max(&dir)
    ))
}

/// How far pose `b` is from `a`: rotation, translation direction (degrees), focals (relative).
fn difference(a: &PairPose, b: &PairPose) -> String {
    format!(
        "rotation {:.4} deg, translation direction {:.4} deg, focals {:.2e} / {:.2e} relative ({:?} / {:?}, {} / {} inliers)",
        a.t_cam1_cam2.rotation_error_deg(&b.t_cam1_cam2),
        a.t_cam1_cam2.translation_direction_error_deg(&b.t_cam1_cam2),
        (b.focal1 / a.focal1 - 1.0).abs(),
        (b.focal2 / a.focal2 - 1.0).abs(),
        a.world, b.world, a.num_inliers, b.num_inliers
    )
}

/// Prints PairViewer's pose under bf16's error against fp32 (see the module's comment);
/// `trained`: the weights are a real checkpoint, so the two precisions' own poses mean something.
pub fn report(fp32: (&Dust3r, &PairTimes), bf16: (&Dust3r, &PairTimes), trained: bool) -> anyhow::Result<()> {
    let base = both_passes(fp32.0, fp32.1)?;
    let lower = both_passes(bf16.0, bf16.1)?;
    if trained {
        let (a, b) = (pose_of(&base).context("fp32")?, pose_of(&lower).context("bf16")?);
        println!("PairViewer's pose, bf16 against fp32 (these weights, these images): {}", difference(&a, &b));
    }
    let (forward, swapped, truth) = crate::synthetic_pair();
    let exact = [forward, swapped];
    let (grid, model) = ((exact[0].view1.width, exact[0].view1.height), (base[0].view1.width, base[0].view1.height));
    let same_place = |i: usize| (i / grid.0 * model.1 / grid.1) * model.0 + (i % grid.0) * model.0 / grid.0;
    let shuffled: Vec<usize> = {
        let mut rng = sp_dust3r_core::rng::SplitMix64::new(7);
        let mut order: Vec<usize> = (0..model.0 * model.1).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, rng.below(k + 1));
        }
        (0..grid.0 * grid.1).map(|i| order[same_place(i)]).collect()
    };
    let clean = pose_of(&exact)?;
    println!(
        "PairViewer's pose on a pair of known geometry (`bench pose`'s; {:.4} deg from the truth) carrying this run's bf16 error against fp32 at each pixel, against the pose without it:",
        clean.t_cam1_cam2.rotation_error_deg(&truth)
    );
    println!("  without bf16's error, RANSAC's seed alone moves the pose by {}", seed_spread(&exact)?);
    for (k, pass) in ["forward", "swapped"].iter().enumerate() {
        for (name, b, l) in
            [("view 1", &base[k].view1, &lower[k].view1), ("view 2 in 1", &base[k].view2_in_1, &lower[k].view2_in_1)]
        {
            let e = mean_error(b, l);
            println!("  {pass} pass, {name}: mean relative error vector ({:.2e}, {:.2e}, {:.2e})", e[0], e[1], e[2]);
        }
    }
    let shuffled_at = |i: usize| shuffled[i];
    for (name, source) in
        [("where bf16 made it", &same_place as &dyn Fn(usize) -> usize), ("pixels shuffled", &shuffled_at)]
    {
        for unbiased in [false, true] {
            let carried = carry(&exact, &base, &lower, source, unbiased);
            let moved = pose_of(&carried)?;
            println!("  {name}{}: {}", if unbiased { ", mean removed" } else { "" }, difference(&clean, &moved));
            println!("    RANSAC's seed alone moves that pose by {}", seed_spread(&carried)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(points: Vec<f32>, confidence: Vec<f32>) -> Pointmap {
        Pointmap { height: 1, width: confidence.len(), points, confidence }
    }

    #[test]
    fn an_error_is_carried_relative_to_each_points_own_distance() {
        let exact = map(vec![0.0, 0.0, 2.0, 3.0, 0.0, 4.0], vec![5.0, 5.0]);
        let base = map(vec![1.0, 0.0, 0.0, 0.0, 10.0, 0.0], vec![2.0, 4.0]);
        // 1 % longer at pixel 0; 2 % sideways (along x) at pixel 1; confidences x1.5, x0.5.
        let lower = map(vec![1.01, 0.0, 0.0, 0.2, 10.0, 0.0], vec![3.0, 2.0]);
        let same = |i: usize| i;
        let out = carry_error(&exact, &base, &lower, &same, false);
        let want = [0.02, 0.0, 2.0, 3.1, 0.0, 4.0];
        for (got, want) in out.points.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{:?}", out.points);
        }
        assert_eq!(out.confidence, vec![7.5, 2.5]);
        // No error where the two precisions agree; the mean error removed leaves the rest.
        assert_eq!(carry_error(&exact, &base, &base, &same, false).points, exact.points);
        let unbiased = carry_error(&exact, &base, &lower, &same, true);
        let bias = mean_error(&base, &lower);
        assert!((bias[0] - 0.015).abs() < 1e-7 && bias[1] == 0.0 && bias[2] == 0.0, "{bias:?}");
        assert!((unbiased.points[0] - (0.01 - 0.015) * 2.0).abs() < 1e-6, "{:?}", unbiased.points);
    }
}
