//! Relative pose of a DUSt3R pair from its pointmaps (shared/spec/pairviewer.md): focal
//! estimation per view, then PnP of one view's pixels against its points expressed in the other
//! camera's frame.

use crate::quantile::{quantile_in_place, Method};
use nalgebra::{Vector2, Vector3};

use super::focal::{centre, focal_median_vote, focal_weiszfeld};
use super::lens::Camera;
use super::pnp::{solve_pnp_ransac, Intrinsics, PnpError, RansacParams};
use super::{Cam1, Cam2, TCam1Cam2, Transform};
use crate::dust3r::{InputMapping, PairPrediction, Pointmap};

/// Which recipe to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PoseMode {
    /// Upstream DUSt3R's PairViewer: Weiszfeld focals, confidence masks (> 3), the reference
    /// edge chosen by mean confidence, 100 RANSAC iterations at 0.99.
    #[default]
    PairViewer,
    /// The mast3r-blackhole server's: view 1 is the reference, median-vote focals with a clamp,
    /// the top `conf_pct` % of view 2's cross-view confidences, 500 iterations at 0.9999.
    Server,
}

impl PoseMode {
    /// The mode's name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            PoseMode::PairViewer => "pairviewer",
            PoseMode::Server => "server",
        }
    }
}

/// How to recover a pair's pose.
#[derive(Clone, Debug, PartialEq)]
pub struct PoseOptions {
    /// Which recipe.
    pub mode: PoseMode,
    /// Intrinsics shared by both views, already in the pointmap grid's pixels (see
    /// `InputMapping`); used instead of the estimated focals.
    pub known_intrinsics: Option<Intrinsics>,
    /// Server mode: percentage of view 2's pixels, by confidence, that enter PnP.
    pub conf_pct: f64,
    /// PairViewer mode: pixels whose confidence is at most this are masked out.
    pub min_confidence: f32,
    /// Pointmap-grid pixels per original image pixel of view 1 and view 2, to report focals in
    /// the original images' pixels.
    pub grid_per_original_px: [f64; 2],
    /// Seed of RANSAC's generator (runs repeat).
    pub seed: u64,
    /// The lens of a known camera, to undo on the pixels PnP sees (with `known_intrinsics`).
    pub undistort: Option<Undistort>,
}

/// A known camera's lens on the pointmaps' grids: a grid pixel is taken back to the view's
/// pixels, undistorted there, and brought to the grid again, so PnP sees the ideal pinhole that
/// `known_intrinsics` describes.
#[derive(Clone, Debug, PartialEq)]
pub struct Undistort {
    /// The camera in the views' own pixels.
    pub camera: Camera,
    /// Each view's grid in its pixels (view 1, view 2).
    pub mappings: [InputMapping; 2],
}

impl Undistort {
    /// `pixels` of view `view` (0 or 1) undistorted; a pair whose pixel lies outside the lens's
    /// valid field is dropped with its point.
    fn apply(
        &self,
        view: usize,
        world: Vec<Vector3<f64>>,
        pixels: Vec<Vector2<f64>>,
    ) -> (Vec<Vector3<f64>>, Vec<Vector2<f64>>) {
        let m = &self.mappings[view];
        world
            .into_iter()
            .zip(pixels)
            .filter_map(|(w, p)| {
                let (x, y) = m.to_original(p.x, p.y);
                let (ux, uy) = self.camera.undistort_pixel(x, y)?;
                let (u, v) = m.to_network(ux, uy);
                Some((w, Vector2::new(u, v)))
            })
            .unzip()
    }
}

/// `undistort`'s correction of view `view`'s correspondences, when there is one.
fn undistorted(
    undistort: &Option<Undistort>,
    view: usize,
    (world, pixels): (Vec<Vector3<f64>>, Vec<Vector2<f64>>),
) -> (Vec<Vector3<f64>>, Vec<Vector2<f64>>) {
    match undistort {
        Some(u) => u.apply(view, world, pixels),
        None => (world, pixels),
    }
}

impl Default for PoseOptions {
    fn default() -> Self {
        Self {
            mode: PoseMode::PairViewer,
            known_intrinsics: None,
            conf_pct: 50.0,
            min_confidence: 3.0,
            grid_per_original_px: [1.0, 1.0],
            seed: 0x5eed,
            undistort: None,
        }
    }
}

/// The camera whose frame held the 3-D points PnP located the other camera against. The
/// translation has the scale of the prediction those points came from: the forward pass
/// (view 1 as reference) or the swapped one, which DUSt3R scales on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PnpWorld {
    /// Camera 2 located against view 2's points in camera 1's frame (the forward pass).
    Camera1,
    /// Camera 1 located against view 1's points in camera 2's frame (the swapped pass).
    Camera2,
}

/// The pose of a pair, with the evidence behind it.
#[derive(Clone, Debug)]
pub struct PairPose {
    /// Camera 2's pose in camera 1's frame (DUSt3R's arbitrary scale).
    pub t_cam1_cam2: TCam1Cam2,
    /// Focals of view 1 and view 2 in the original images' pixels.
    pub focal1: f64,
    /// View 2's focal in its original pixels.
    pub focal2: f64,
    /// PnP inliers.
    pub num_inliers: usize,
    /// Whether the known intrinsics were used instead of estimated focals.
    pub used_known_intrinsics: bool,
    /// The recipe used.
    pub mode: PoseMode,
    /// Whose frame PnP worked in, so whose scale the translation has.
    pub world: PnpWorld,
}

/// Why there is no pose (never an identity in its place).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NoPose {
    /// The four pointmaps differ in size or are empty.
    #[error("pointmaps have inconsistent sizes")]
    Shapes,
    /// A view's focal cannot be estimated (view 1 or 2).
    #[error("the focal of view {0} cannot be estimated (no finite points)")]
    Focal(u8),
    /// Too few usable points.
    #[error("only {got} usable points (finite, confident enough); {need} needed")]
    TooFewPoints {
        /// Usable points.
        got: usize,
        /// Points needed.
        need: usize,
    },
    /// PnP failed.
    #[error(transparent)]
    Pnp(#[from] PnpError),
    /// The options are invalid.
    #[error("invalid option: {0}")]
    Options(String),
    /// The forward and swapped passes share too few confident pixels to put them in one scale.
    #[error("the two passes share fewer than {0} confident pixels: their scales cannot be related")]
    Scale(usize),
    /// A tt-model server answered the pair without a pose.
    #[error("the server returned no pose (not asked, or its PnP failed)")]
    NotReturned,
}

/// Relative pose from the forward (view 1, view 2) and swapped (view 2, view 1) predictions.
pub fn relative_pose(
    forward: &PairPrediction,
    swapped: &PairPrediction,
    opts: &PoseOptions,
) -> Result<PairPose, NoPose> {
    let (w, h) = (forward.view1.width, forward.view1.height);
    let maps = [&forward.view1, &forward.view2_in_1, &swapped.view1, &swapped.view2_in_1];
    if maps.iter().any(|m| m.width != w || m.height != h || m.points.len() != w * h * 3 || m.confidence.len() != w * h)
        || w * h == 0
    {
        return Err(NoPose::Shapes);
    }
    if opts.grid_per_original_px.iter().any(|s| !(*s > 0.0 && s.is_finite())) || !(0.0..=100.0).contains(&opts.conf_pct)
    {
        return Err(NoPose::Options(format!("scales {:?} / conf_pct {}", opts.grid_per_original_px, opts.conf_pct)));
    }
    let pp = centre(w, h);
    let estimate = |m: &Pointmap, view: u8| -> Result<f64, NoPose> {
        let f = match opts.mode {
            PoseMode::PairViewer => focal_weiszfeld(&m.points, w, h, pp),
            PoseMode::Server => focal_median_vote(&m.points, w, h, pp),
        };
        f.ok_or(NoPose::Focal(view))
    };
    let (k1, k2) = match opts.known_intrinsics {
        Some(k) => (k, k),
        None => {
            let (f1, f2) = rayon::join(|| estimate(&forward.view1, 1), || estimate(&swapped.view1, 2));
            let (f1, f2) = (f1?, f2?);
            let k = |f| Intrinsics { fx: f, fy: f, cx: pp.0, cy: pp.1 };
            (k(f1), k(f2))
        }
    };
    let (t_cam2_cam1, inliers, world) = match opts.mode {
        PoseMode::Server => server_pnp(forward, &k2, opts).map(|(t, n)| (t, n, PnpWorld::Camera1))?,
        PoseMode::PairViewer => pairviewer_pnp(forward, swapped, &k1, &k2, opts)?,
    };
    let [s1, s2] = opts.grid_per_original_px;
    Ok(PairPose {
        t_cam1_cam2: t_cam2_cam1.inverse(),
        focal1: k1.fx / s1,
        focal2: k2.fx / s2,
        num_inliers: inliers,
        used_known_intrinsics: opts.known_intrinsics.is_some(),
        mode: opts.mode,
        world,
    })
}

/// Correspondences of the pixel grid with `points`, where `keep(pixel)` and the point is finite.
fn correspondences(
    points: &[f32],
    width: usize,
    keep: impl Fn(usize) -> bool,
) -> (Vec<Vector3<f64>>, Vec<Vector2<f64>>) {
    let mut world = Vec::new();
    let mut pixels = Vec::new();
    for (i, p) in points.chunks_exact(3).enumerate() {
        if keep(i) && p.iter().all(|v| v.is_finite()) {
            world.push(Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64));
            pixels.push(Vector2::new((i % width) as f64, (i / width) as f64));
        }
    }
    (world, pixels)
}

fn mean(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64).sum::<f64>() / v.len().max(1) as f64
}

fn pairviewer_pnp(
    forward: &PairPrediction,
    swapped: &PairPrediction,
    k1: &Intrinsics,
    k2: &Intrinsics,
    opts: &PoseOptions,
) -> Result<(Transform<Cam2, Cam1>, usize, PnpWorld), NoPose> {
    let w = forward.view1.width;
    let params = RansacParams { max_iterations: 100, threshold_px: 5.0, confidence: 0.99, seed: opts.seed };
    // Per-image confidence: the better of the two predictions of that image.
    let im_conf =
        |a: &[f32], b: &[f32]| -> Vec<bool> { a.iter().zip(b).map(|(x, y)| x.max(*y) > opts.min_confidence).collect() };
    let score_fwd = mean(&forward.view1.confidence) * mean(&forward.view2_in_1.confidence);
    let score_swp = mean(&swapped.view1.confidence) * mean(&swapped.view2_in_1.confidence);
    if score_fwd > score_swp {
        // Camera 1 is the world: locate camera 2 from view 2's points in camera 1's frame.
        let mask = im_conf(&forward.view2_in_1.confidence, &swapped.view1.confidence);
        let (world, pixels) =
            undistorted(&opts.undistort, 1, correspondences(&forward.view2_in_1.points, w, |i| mask[i]));
        let sol = solve_pnp_ransac::<Cam2, Cam1>(&world, &pixels, k2, &params).map_err(|e| usable(e, world.len()))?;
        Ok((sol.pose, sol.inliers, PnpWorld::Camera1))
    } else {
        // Camera 2 is the world: locate camera 1 from view 1's points in camera 2's frame.
        let mask = im_conf(&forward.view1.confidence, &swapped.view2_in_1.confidence);
        let (world, pixels) =
            undistorted(&opts.undistort, 0, correspondences(&swapped.view2_in_1.points, w, |i| mask[i]));
        let sol = solve_pnp_ransac::<Cam1, Cam2>(&world, &pixels, k1, &params).map_err(|e| usable(e, world.len()))?;
        Ok((sol.pose.inverse(), sol.inliers, PnpWorld::Camera2))
    }
}

fn usable(e: PnpError, n: usize) -> NoPose {
    match e {
        PnpError::TooFewPoints(_) => NoPose::TooFewPoints { got: n, need: 4 },
        other => NoPose::Pnp(other),
    }
}

/// numpy's `percentile` (linear interpolation) of the values that are not NaN; NaN when none.
fn percentile(values: &[f32], pct: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().map(|&x| x as f64).filter(|x| !x.is_nan()).collect();
    quantile_in_place(&mut v, pct / 100.0, Method::Linear).unwrap_or(f64::NAN)
}

/// Fewest correspondences the server accepts.
const SERVER_MIN_POINTS: usize = 50;

fn server_pnp(
    forward: &PairPrediction,
    k2: &Intrinsics,
    opts: &PoseOptions,
) -> Result<(Transform<Cam2, Cam1>, usize), NoPose> {
    let map = &forward.view2_in_1;
    let threshold = percentile(&map.confidence, 100.0 - opts.conf_pct);
    let keep = |i: usize| map.confidence[i] as f64 >= threshold;
    let (world, pixels) = undistorted(&opts.undistort, 1, correspondences(&map.points, map.width, keep));
    if world.len() < SERVER_MIN_POINTS {
        return Err(NoPose::TooFewPoints { got: world.len(), need: SERVER_MIN_POINTS });
    }
    let params = RansacParams { max_iterations: 500, threshold_px: 5.0, confidence: 0.9999, seed: opts.seed };
    let sol = solve_pnp_ransac::<Cam2, Cam1>(&world, &pixels, k2, &params)?;
    Ok((sol.pose, sol.inliers))
}
