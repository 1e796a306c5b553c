use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use ndarray::{Array3, Array4, Axis};
use serde_json::{json, Value};

use sp_dust3r_core::dust3r::{PairPrediction, Pointmap};
use sp_dust3r_core::geometry::{relative_pose, Intrinsics, NoPose, PairPose, PoseMode, PoseOptions};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Mode {
    Pairviewer,
    Server,
}

impl From<Mode> for PoseMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Pairviewer => PoseMode::PairViewer,
            Mode::Server => PoseMode::Server,
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// NPZ with pred1_pts3d (2,H,W,3), pred1_conf (2,H,W), pred2_pts3d_in_other_view, pred2_conf;
    /// batch index 0 = edge (view 1, view 2), 1 = edge (view 2, view 1).
    #[arg(long)]
    pointmaps: PathBuf,
    #[arg(long, value_enum, default_value = "pairviewer")]
    mode: Mode,
    /// Known intrinsics "fx,fy,cx,cy" in the pointmap grid's pixels (shared by both views).
    #[arg(long, value_parser = parse_intrinsics)]
    intrinsics: Option<[f64; 4]>,
    /// Server mode: percentage of view 2's pixels, by confidence, used for PnP.
    #[arg(long, default_value_t = 50.0)]
    conf_pct: f64,
    /// Output JSON: {"R", "t", "focal1", "focal2", "num_inliers", "mode"} with
    /// X_cam2 = R X_cam1 + t, or {"pose": null, "reason"}.
    #[arg(long)]
    out: PathBuf,
}

pub fn parse_intrinsics(s: &str) -> Result<[f64; 4], String> {
    let v: Vec<f64> =
        s.split(',').map(|p| p.trim().parse::<f64>().map_err(|e| format!("{p:?}: {e}"))).collect::<Result<_, _>>()?;
    match v.as_slice() {
        [fx, fy, cx, cy] if v.iter().all(|x| x.is_finite()) && *fx > 0.0 && *fy > 0.0 => Ok([*fx, *fy, *cx, *cy]),
        _ => Err(format!("expected fx,fy,cx,cy with positive focals, got {s:?}")),
    }
}

pub fn intrinsics(k: [f64; 4]) -> Intrinsics {
    Intrinsics { fx: k[0], fy: k[1], cx: k[2], cy: k[3] }
}

/// The pose as JSON: `R`, `t` with X_cam2 = R X_cam1 + t (camera 1's pose in camera 2), or null
/// with the reason.
pub fn pose_json(result: &Result<PairPose, NoPose>) -> Value {
    match result {
        Ok(p) => {
            let t21 = p.t_cam1_cam2.inverse();
            let r = t21.rotation.matrix();
            json!({
                "R": (0..3).map(|i| (0..3).map(|j| r[(i, j)]).collect::<Vec<_>>()).collect::<Vec<_>>(),
                "t": [t21.translation.x, t21.translation.y, t21.translation.z],
                "focal1": p.focal1,
                "focal2": p.focal2,
                "num_inliers": p.num_inliers,
                "used_known_intrinsics": p.used_known_intrinsics,
                "mode": p.mode.name(),
            })
        }
        Err(reason) => json!({"pose": null, "reason": reason.to_string()}),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (forward, swapped) =
        read_pointmaps(&args.pointmaps).with_context(|| format!("reading {}", args.pointmaps.display()))?;
    let opts = PoseOptions {
        mode: args.mode.into(),
        known_intrinsics: args.intrinsics.map(intrinsics),
        conf_pct: args.conf_pct,
        ..PoseOptions::default()
    };
    let t = Instant::now();
    let result = relative_pose(&forward, &swapped, &opts);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if let Err(reason) = &result {
        tracing::warn!("no pose: {reason}");
    }
    let out = pose_json(&result);
    std::fs::write(&args.out, serde_json::to_string_pretty(&out)?)
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!("{}", json!({"pose": result.is_ok(), "timing_ms": {"pose": ms}}));
    Ok(())
}

fn read_pointmaps(path: &Path) -> anyhow::Result<(PairPrediction, PairPrediction)> {
    let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(path)?)?;
    let mut pts = |k: &str| -> anyhow::Result<Array4<f32>> {
        npz.by_name(&format!("{k}.npy"))
            .or_else(|_| npz.by_name(k))
            .with_context(|| format!("array {k} (float32, (2,H,W,3))"))
    };
    let (p1, p2) = (pts("pred1_pts3d")?, pts("pred2_pts3d_in_other_view")?);
    let mut conf = |k: &str| -> anyhow::Result<Array3<f32>> {
        npz.by_name(&format!("{k}.npy"))
            .or_else(|_| npz.by_name(k))
            .with_context(|| format!("array {k} (float32, (2,H,W))"))
    };
    let (c1, c2) = (conf("pred1_conf")?, conf("pred2_conf")?);
    let (b, h, w) = (p1.shape()[0], p1.shape()[1], p1.shape()[2]);
    if b != 2 || p1.shape()[3] != 3 || p2.shape() != p1.shape() || c1.shape() != [2, h, w] || c2.shape() != [2, h, w] {
        bail!(
            "expected pred*_pts3d* of shape (2,H,W,3) and pred*_conf of (2,H,W), got {:?} {:?} {:?} {:?}",
            p1.shape(),
            p2.shape(),
            c1.shape(),
            c2.shape()
        );
    }
    let map = |p: &Array4<f32>, c: &Array3<f32>, i: usize| Pointmap {
        height: h,
        width: w,
        points: p.index_axis(Axis(0), i).iter().copied().collect(),
        confidence: c.index_axis(Axis(0), i).iter().copied().collect(),
    };
    Ok((
        PairPrediction { view1: map(&p1, &c1, 0), view2_in_1: map(&p2, &c2, 0) },
        PairPrediction { view1: map(&p1, &c1, 1), view2_in_1: map(&p2, &c2, 1) },
    ))
}
