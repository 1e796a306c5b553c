//! `sp_dust3r eval`: the pair poses and the odometry of a replay's output bag against ground
//! truth.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use sp_dust3r_core::eval::bag::{bag_estimates, load_ground_truth, GroundTruth, OdometryEstimates};
use sp_dust3r_core::eval::trajectory::RpeDelta;
use sp_dust3r_core::eval::{evaluate_bag_with, Report};

/// Seconds a pair's time may lie beyond the ends of the ground truth, by default.
pub const DEFAULT_TOLERANCE_S: f64 = 0.05;

#[derive(clap::Args)]
pub struct Args {
    /// The replay's output bag (or any bag with sp_dust3r/msg/PairPose and the clouds).
    #[arg(long)]
    bag: PathBuf,
    /// Ground truth of the camera's optical frame in a fixed frame: a TUM trajectory file
    /// (`t tx ty tz qx qy qz qw`), or a bag with a geometry_msgs/PoseStamped topic
    /// (`--gt-topic`, default: the bag's only one) or TF (`--gt-frames WORLD CAMERA`, topic
    /// /tf unless `--gt-topic` says otherwise).
    #[arg(long)]
    ground_truth: PathBuf,
    #[arg(long)]
    gt_topic: Option<String>,
    #[arg(long, num_args = 2, value_names = ["PARENT", "CHILD"])]
    gt_frames: Option<Vec<String>>,
    /// Seconds a pair's time may lie beyond the ends of the ground truth.
    #[arg(long, default_value_t = DEFAULT_TOLERANCE_S)]
    tolerance: f64,
    /// Write the metrics here as JSON (they are printed either way).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the picture here (PNG; default: beside --out with .png, else nothing).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The odometry's RPE between tracked frames this many frames apart.
    #[arg(long, default_value_t = 1, conflicts_with = "rpe_seconds")]
    rpe_frames: usize,
    /// The odometry's RPE between each tracked frame and the first at least this many seconds later.
    #[arg(long)]
    rpe_seconds: Option<f64>,
    /// Write the bag's trajectories here as TUM files (for evo and the like): the odometry
    /// (`odom.tum`), the same frames on the map as published and after the fact (`map.tum`,
    /// `map_after_the_fact.tum`, with /tf in the bag) and the keyframes (`keyframes.tum`).
    #[arg(long, value_name = "DIR")]
    trajectories: Option<PathBuf>,
}

/// `--trajectories DIR`: the bag's trajectories (`found`) as TUM files, those it has.
fn write_trajectories(bag: &Path, found: &OdometryEstimates, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = [
        ("odom.tum", &found.odom),
        ("map.tum", &found.map),
        ("map_after_the_fact.tum", &found.refined),
        ("keyframes.tum", &found.keyframes),
    ];
    for (name, poses) in files {
        if poses.is_empty() {
            tracing::warn!("{}: no poses for {name}", bag.display());
            continue;
        }
        let path = dir.join(name);
        std::fs::write(&path, sp_dust3r_core::eval::format_tum(poses))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `--gt-frames PARENT CHILD` as a pair.
pub fn gt_frames(arg: &Option<Vec<String>>) -> anyhow::Result<Option<(String, String)>> {
    match arg.as_deref() {
        None => Ok(None),
        Some([parent, child]) => Ok(Some((parent.clone(), child.clone()))),
        Some(_) => bail!("--gt-frames takes PARENT CHILD"),
    }
}

/// Writes the metrics as JSON to `json` and the pictures where `png` says: the pairs' there,
/// the trajectory's (when there is one) beside it as `<stem>_trajectory.png`, which it returns.
pub fn save(report: &Report, title: &str, json: Option<&Path>, png: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    if let Some(out) = json {
        std::fs::write(out, serde_json::to_string_pretty(report)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    let Some(png) = png else { return Ok(None) };
    sp_dust3r_core::eval::plot::render(report, &format!("{title}: pair poses"))
        .save(png)
        .with_context(|| format!("writing {}", png.display()))?;
    let Some(t) = &report.trajectory else { return Ok(None) };
    let stem = png.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let path = png.with_file_name(format!("{stem}_trajectory.png"));
    sp_dust3r_core::eval::plot::render_trajectory(t, &format!("{title}: trajectory"))
        .save(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(Some(path))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let gt = load_ground_truth(&GroundTruth::from_path(
        &args.ground_truth,
        args.gt_topic.clone(),
        gt_frames(&args.gt_frames)?,
    ))?;
    let delta = match args.rpe_seconds {
        Some(s) if s > 0.0 && s.is_finite() => RpeDelta::Seconds(s),
        Some(s) => bail!("--rpe-seconds {s}: a positive number of seconds"),
        None if args.rpe_frames > 0 => RpeDelta::Frames(args.rpe_frames),
        None => bail!("--rpe-frames 0: at least 1"),
    };
    let found = bag_estimates(&args.bag)?;
    let report = evaluate_bag_with(&args.bag, &found, &gt, args.tolerance, delta)?;
    if let Some(dir) = &args.trajectories {
        write_trajectories(&args.bag, &found.odometry, dir)?;
    }
    let png = args.plot.clone().or_else(|| args.out.as_ref().map(|o| o.with_extension("png")));
    let title = format!("{} against {}", file_name(&args.bag), file_name(&args.ground_truth));
    let trajectory_png = save(&report, &title, args.out.as_deref(), png.as_deref())?;
    if let Some(png) = png {
        tracing::info!("plot written to {}", png.display());
    }
    if let Some(png) = trajectory_png {
        tracing::info!("trajectory plot written to {}", png.display());
    }
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// A path's last component, for titles (the whole path when it has none).
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}
