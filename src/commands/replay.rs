//! `sp_dust3r replay`: a recorded bag through the pipeline, every frame, into an output bag.

use sp_dust3r_core::quantile::{quantile, Method};
use std::path::PathBuf;

use anyhow::{bail, Context};
use serde_json::json;

use sp_dust3r_core::backend::build::{build_backends, BackendConfig, BackendKind, Backends};
use sp_dust3r_core::bag::export::export_ply;
use sp_dust3r_core::bag::replay::{output_topic, replay, replay_topics, CameraTopics, Models, ReplaySummary};
use sp_dust3r_core::bag::{open_bag, BagWriter, McapFile};
use sp_dust3r_core::cancel::Cancel;
use sp_dust3r_core::diagnostics::Counter;
use sp_dust3r_core::eval::bag::{load_ground_truth, GroundTruth};
use sp_dust3r_core::eval::evaluate_bag;
use sp_dust3r_core::outputs::OutputKind;
use sp_dust3r_core::params::args::{ParamValue, RosArgs};
use sp_dust3r_core::params::{name, NodeParams};
use sp_dust3r_core::vo::scale::ScaleSource;

#[derive(clap::Args)]
pub struct Args {
    /// Input: a rosbag2 MCAP file, or a rosbag2 folder (metadata.yaml + .mcap files).
    #[arg(long)]
    bag: PathBuf,
    /// Output: an .mcap file, or a rosbag2 folder (metadata.yaml + `<folder>_0.mcap`, as
    /// `ros2 bag record` writes) for any other path (default: beside the input,
    /// `<name>_sp_dust3r.mcap`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The node's parameters file (config/params.yaml format); thresholds, keyframe intervals,
    /// backends and weights as in the node.
    #[arg(long)]
    params_file: Option<PathBuf>,
    /// A node parameter, as `-p` sets it after `--ros-args` (`-p scale_source:=depth`); after the
    /// parameters file.
    #[arg(short = 'p', long = "param", value_name = "NAME:=VALUE")]
    param: Vec<String>,
    #[arg(long)]
    superpoint_weights: Option<PathBuf>,
    #[arg(long)]
    dust3r_weights: Option<PathBuf>,
    /// Where both models run (the params file can set them one by one).
    #[arg(long, value_parser = super::backend_kind())]
    backend: Option<BackendKind>,
    /// The image topic (default: the bag's only sensor_msgs/Image or CompressedImage topic).
    #[arg(long)]
    image_topic: Option<String>,
    /// The CameraInfo topic (default: the one beside the image topic).
    #[arg(long)]
    camera_info_topic: Option<String>,
    /// With scale_source depth: the registered depth topic (default: the bag's only Image topic
    /// ending in depth/image_raw, aligned_depth_to_color/image_raw, depth_registered/image_raw
    /// or depth/image).
    #[arg(long)]
    depth_topic: Option<String>,
    /// After the replay, evaluate its pair poses (as `sp_dust3r eval`) against the input bag's
    /// ground truth (its only geometry_msgs/PoseStamped topic, or `--gt-topic`), writing
    /// `<out>_eval.json` and `<out>_eval.png` beside the output bag.
    #[arg(long)]
    eval: bool,
    /// Ground truth for `--eval` from elsewhere: a TUM file or another bag (implies --eval).
    #[arg(long)]
    ground_truth: Option<PathBuf>,
    /// The ground-truth topic (PoseStamped, or TF with --gt-frames).
    #[arg(long)]
    gt_topic: Option<String>,
    #[arg(long, num_args = 2, value_names = ["PARENT", "CHILD"])]
    gt_frames: Option<Vec<String>>,
    /// After the replay, write every pair's cloud (`pair_<sec>.<nanosec>.ply`, view 1's stamp)
    /// and the last map (`map.ply`) from the output bag into this folder, as binary PLY for
    /// MeshLab, CloudCompare and Open3D.
    #[arg(long, value_name = "DIR")]
    export_ply: Option<PathBuf>,
}

/// The node's parameters as the arguments set them.
fn node_params(args: &Args) -> anyhow::Result<NodeParams> {
    let mut ros = RosArgs::default();
    ros.params_files.extend(args.params_file.clone());
    let path = |p: &PathBuf| ParamValue::String(p.display().to_string());
    if let Some(w) = &args.superpoint_weights {
        ros.params.push((name::superpoint_weights.into(), path(w)));
    }
    if let Some(w) = &args.dust3r_weights {
        ros.params.push((name::dust3r_weights.into(), path(w)));
    }
    if let Some(b) = args.backend {
        let v = ParamValue::String(b.name().into());
        ros.params.push((name::superpoint_backend.into(), v.clone()));
        ros.params.push((name::dust3r_backend.into(), v));
    }
    for p in &args.param {
        let parsed = p.split_once(":=").and_then(|(n, v)| Some((n.to_string(), ParamValue::parse(v)?)));
        let Some(param) = parsed else { bail!("-p {p:?}: expected NAME:=VALUE") };
        ros.params.push(param);
    }
    let (params, warnings) = NodeParams::resolve(&ros, "/sp_dust3r")?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    Ok(params)
}

/// The ground truth `--eval` asks for, read before the replay: a missing or ambiguous one is
/// known before minutes of inference.
fn ground_truth(args: &Args) -> anyhow::Result<Option<Vec<sp_dust3r_core::eval::StampedPose>>> {
    if !(args.eval || args.ground_truth.is_some() || args.gt_topic.is_some() || args.gt_frames.is_some()) {
        return Ok(None);
    }
    let frames = super::eval::gt_frames(&args.gt_frames)?;
    let source = args.ground_truth.as_ref().unwrap_or(&args.bag);
    let gt = load_ground_truth(&GroundTruth::from_path(source, args.gt_topic.clone(), frames))
        .with_context(|| format!("ground truth for --eval from {}", source.display()))?;
    Ok(Some(gt))
}

/// A bar with the time left when the bags' summaries count the frames (`total`), else a
/// spinner.
fn progress_bar(total: u64) -> indicatif::ProgressBar {
    let (bar, template) = if total > 0 {
        (indicatif::ProgressBar::new(total), "{bar:30} {pos}/{len} frames, {elapsed_precise} ({eta} left), {msg}")
    } else {
        (indicatif::ProgressBar::new_spinner(), "{spinner} {pos} frames, {elapsed_precise}, {msg}")
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// `--eval`: the replay's poses against the ground truth, the metrics and plots beside the
/// output bag, and what they say in `report`.
fn evaluate(
    out_path: &std::path::Path,
    bag: &std::path::Path,
    gt: &[sp_dust3r_core::eval::StampedPose],
    report: &mut serde_json::Value,
) -> anyhow::Result<()> {
    let stem = out_path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "replay".into());
    let (json_path, png_path) =
        (out_path.with_file_name(format!("{stem}_eval.json")), out_path.with_file_name(format!("{stem}_eval.png")));
    let delta = sp_dust3r_core::eval::trajectory::RpeDelta::Frames(1);
    let metrics = evaluate_bag(out_path, gt, super::eval::DEFAULT_TOLERANCE_S, delta)?;
    let title = format!("replay of {}", super::eval::file_name(bag));
    let trajectory_png = super::eval::save(&metrics, &title, Some(&json_path), Some(&png_path))?;
    report["eval"] = json!({
        "metrics": json_path.display().to_string(), "plot": png_path.display().to_string(),
        "num_pairs": metrics.num_pairs, "num_without_pose": metrics.num_without_pose,
        "auc_thresholds_deg": metrics.auc_thresholds_deg, "auc": metrics.auc,
    });
    if let (Some(t), Some(png)) = (&metrics.trajectory, &trajectory_png) {
        report["eval"]["trajectory"] = json!({
            "plot": png.display().to_string(), "tracked_fraction": t.tracked_fraction, "num_scored": t.num_scored,
            "ate_rmse": t.ate.rmse, "ate_percent_of_path": t.ate_percent_of_path, "path_length": t.path_length,
            "rpe_translation_rmse": t.rpe_translation.rmse, "rpe_rotation_rmse_deg": t.rpe_rotation_deg.rmse,
            "scale": t.scale, "ate_se3_rmse": t.ate_se3.rmse, "ate_se3_percent_of_path": t.ate_se3_percent_of_path,
            "scale_error": t.scale_error,
        });
        tracing::info!("trajectory: {t}; plot {}", png.display());
    }
    let on_map =
        [("map_trajectory", &metrics.map_trajectory), ("refined_map_trajectory", &metrics.refined_map_trajectory)];
    for (key, t) in on_map.into_iter().filter_map(|(k, t)| Some((k, t.as_ref()?))) {
        report["eval"][key] = json!({
            "num_scored": t.num_scored, "ate_rmse": t.ate.rmse, "ate_percent_of_path": t.ate_percent_of_path,
            "ate_se3_rmse": t.ate_se3.rmse, "ate_se3_percent_of_path": t.ate_se3_percent_of_path,
        });
        tracing::info!("{}: {t}", key.replace('_', " "));
    }
    tracing::info!(
        "outputs: {} (bag), {} (metrics), {} (plot)",
        out_path.display(),
        json_path.display(),
        png_path.display()
    );
    Ok(())
}

fn p95(v: &[f64]) -> f64 {
    quantile(v, 0.95, Method::NearestRank).unwrap_or(0.0)
}

/// The bag's camera topics as the arguments and parameters choose them (the depth topic with
/// `scale_source: depth`).
fn camera_topics(args: &Args, params: &NodeParams, files: &[McapFile]) -> anyhow::Result<CameraTopics> {
    let mut topics = Vec::new();
    for f in files {
        for (t, ty) in f.topics()? {
            if !topics.iter().any(|(x, _): &(String, String)| *x == t) {
                topics.push((t, ty));
            }
        }
    }
    let names = (args.image_topic.as_deref(), args.camera_info_topic.as_deref(), args.depth_topic.as_deref());
    let cameras = replay_topics(&topics, names, params)?;
    if params.scale_source != ScaleSource::Depth && args.depth_topic.is_some() {
        bail!("--depth-topic is read with scale_source depth (-p scale_source:=depth or a parameter file)");
    }
    tracing::info!(
        "replaying {} (camera_info: {}, depth: {})",
        cameras.image,
        cameras.camera_info.as_deref().unwrap_or("none"),
        cameras.depth.as_deref().unwrap_or("none")
    );
    Ok(cameras)
}

/// `sp_dust3r replay`: the bag through the pipeline into the output bag, a JSON summary on
/// stdout, then the PLY export and the evaluation when asked.
pub fn run(args: Args) -> anyhow::Result<()> {
    let params = node_params(&args)?;
    let ground_truth = ground_truth(&args)?;
    let files = open_bag(&args.bag)?;
    let cameras = camera_topics(&args, &params, &files)?;
    // SIGINT/SIGTERM stop the replay between two frames or two DUSt3R blocks; the output is
    // finished either way.
    let cancel = Cancel::new();
    cancel.set_on_termination_signals()?;
    let Backends { features, dust3r } =
        build_backends(&BackendConfig { cancel: cancel.clone(), ..params.backend_config() })?;
    let dust3r = match dust3r {
        Ok(d) => Some(d),
        Err(e) if ground_truth.is_some() => {
            bail!("--eval needs DUSt3R for the pair poses, and it cannot be loaded: {e}")
        }
        Err(e) => {
            tracing::warn!("DUSt3R disabled (keypoints only): {e}");
            None
        }
    };
    let out_path = args.out.clone().unwrap_or_else(|| {
        let stem = args.bag.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "bag".into());
        args.bag.with_file_name(format!("{stem}_sp_dust3r.mcap"))
    });
    if let Some(dir) = out_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut out = BagWriter::create(&out_path)?;
    let total: u64 = files.iter().map(|f| f.message_counts().get(&cameras.image).copied().unwrap_or(0)).sum();
    let bar = progress_bar(total);
    let show = |s: &ReplaySummary| {
        bar.set_position(s.get(Counter::FramesIn));
        bar.set_message(format!(
            "{} keyframes, {} pairs, {} poses",
            s.get(Counter::Keyframes),
            s.get(Counter::PairsDone),
            s.poses()
        ));
    };
    let models = Models { features: features.as_ref(), pairs: dust3r.as_deref(), pair_lag: 0 };
    let result = replay(&files, &cameras, &mut out, models, &params, &cancel, show);
    bar.finish_and_clear();
    // The output is finished in every case, so what was written is a readable bag.
    out.finish().with_context(|| format!("finishing {}", out_path.display()))?;
    let (summary, stopped) = result?;
    let stats = |v: &[f64]| json!({"median": super::median(v), "p95": p95(v), "count": v.len()});
    let mut report = json!({
        "out": out_path.display().to_string(), "image_topic": cameras.image,
        "counters": summary.counters(), "poses": summary.poses(),
        "keyframe_gap": {
            "median_deg": super::median(&summary.keyframe_gaps.iter().map(|g| g.0).collect::<Vec<_>>()),
            "median_units": super::median(&summary.keyframe_gaps.iter().map(|g| g.1).collect::<Vec<_>>()),
            "count": summary.keyframe_gaps.len(),
        },
        "latency_ms": {"superpoint": stats(&summary.superpoint_ms), "dust3r": stats(&summary.dust3r_ms)},
    });
    if let Some(dir) = &args.export_ply {
        // From the bag as written (also after an interruption: what it holds).
        let written = open_bag(&out_path)?;
        let (cloud, map) = (OutputKind::Cloud.topic(), OutputKind::Map.topic());
        let source = format!("sp_dust3r replay of {}", args.bag.display());
        let exported = export_ply(
            &written,
            &output_topic(&cameras.image, cloud),
            &output_topic(&cameras.image, map),
            dir,
            &source,
        )
        .with_context(|| format!("exporting the clouds of {} to {}", out_path.display(), dir.display()))?;
        report["ply"] = json!({
            "dir": dir.display().to_string(), "pairs": exported.pairs.len(),
            "map": exported.map.map(|m| m.display().to_string()),
        });
    }
    if let Some(e) = stopped {
        println!("{report}");
        bail!("{e}; the {} frames before it are in {}", summary.get(Counter::FramesIn), out_path.display());
    }
    if summary.interrupted {
        report["interrupted"] = json!(true);
        println!("{report}");
        bail!(
            "interrupted; the {} frames before it are in {} (finished, readable)",
            summary.get(Counter::FramesIn),
            out_path.display()
        );
    }
    match ground_truth {
        Some(gt) => evaluate(&out_path, &args.bag, &gt, &mut report)?,
        None => tracing::info!("output: {}", out_path.display()),
    }
    println!("{report}");
    Ok(())
}
