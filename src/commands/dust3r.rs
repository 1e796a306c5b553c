use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use ndarray::{Array2, Array3};
use serde_json::json;

use sp_dust3r_core::backend::build::BackendKind;
use sp_dust3r_core::backend::tt_server::{TtDust3r, DEFAULT_DUST3R_URL};
use sp_dust3r_core::backend::{CameraK, PairRequest};
use sp_dust3r_core::dust3r::cloud::{cloud_points, ColouredPoints, DEFAULT_MIN_CONFIDENCE};
use sp_dust3r_core::dust3r::{prepare, Checkpoint, Dust3r, PairPrediction, Pointmap, PrepMode};
use sp_dust3r_core::geometry::lens::Lens;
use sp_dust3r_core::geometry::{relative_pose, NoPose, PairPose, PoseOptions};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::preview::preview;
use sp_dust3r_core::tensor::Precision;
use sp_dust3r_core::weights;

#[derive(clap::Args)]
pub struct Args {
    /// Folder with model.safetensors + config.json (else $SP_DUST3R_DUST3R_WEIGHTS, the Hugging
    /// Face cache, or a download); it must hold the --model checkpoint.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// The checkpoint: naver/DUSt3R_ViTLarge_BaseDecoder_<model> (224_linear takes 224x224 input).
    #[arg(long, default_value = "512_dpt", value_parser = clap::builder::PossibleValuesParser::new(Checkpoint::NAMES))]
    model: String,
    /// First view (reference camera), PNG or JPEG.
    #[arg(long)]
    image1: PathBuf,
    /// Second view.
    #[arg(long)]
    image2: PathBuf,
    /// Also run the swapped pass and recover the relative pose.
    #[arg(long)]
    pose: bool,
    /// Pose recipe: upstream PairViewer or the tt-model server's.
    #[arg(long, value_enum, default_value = "pairviewer")]
    mode: super::pose::Mode,
    /// Known intrinsics of the input images (one camera), "fx,fy,cx,cy" in input pixels.
    #[arg(long, value_parser = super::pose::parse_intrinsics)]
    intrinsics: Option<[f64; 4]>,
    /// Server mode: percentage of view 2's pixels, by confidence, used for PnP.
    #[arg(long, default_value_t = 50.0)]
    conf_pct: f64,
    /// Input preparation: pad to a gray square (the tt-model server's), crop the centre square
    /// (the port's), or upstream DUSt3R's (at 512 long side 512 + crop to multiples of 16, e.g.
    /// 512x384; at 224 the centre 224x224 square).
    #[arg(long, value_enum, default_value = "pad")]
    preprocess: Prep,
    /// Output NPZ: pts3d1, pts3d2 (H,W,3) in camera 1's frame; conf1, conf2 (H,W) (512x512, or
    /// 224x224 for 224_linear, unless --preprocess upstream); with
    /// --pose also R (3,3), t (3,) (X_cam2 = R X_cam1 + t), focal1, focal2 (input pixels).
    #[arg(long, required_unless_present_any = ["ply", "preview"])]
    out: Option<PathBuf>,
    /// Output point cloud: both views' points in camera 1's frame with their pixels' colours and
    /// confidences, above --min-confidence (binary PLY for MeshLab, CloudCompare, Open3D).
    #[arg(long)]
    ply: Option<PathBuf>,
    /// A picture of the pair (PNG): both views' points above --min-confidence rendered from
    /// beside camera 1, with the cameras (camera 2 with --pose); under it each view's input,
    /// depth and confidence maps.
    #[arg(long)]
    preview: Option<PathBuf>,
    /// The confidence (>= 1) a point needs to enter the PLY and the preview's cloud.
    #[arg(long, default_value_t = DEFAULT_MIN_CONFIDENCE)]
    min_confidence: f64,
    /// What the linear layers, attention and the heads' convolutions compute in: fp32, or bf16
    /// (float32 sums) where the CPU has AMX-BF16 or AVX512_BF16 (else it says so and runs fp32).
    #[arg(long, default_value = "fp32", value_parser = clap::builder::PossibleValuesParser::new(Precision::NAMES))]
    precision: String,
    #[command(flatten)]
    server: super::ServerArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Prep {
    Pad,
    Crop,
    Upstream,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.pose && args.intrinsics.is_some() {
        bail!("--intrinsics only matters with --pose");
    }
    let precision = Precision::from_name(&args.precision).context("unknown precision")?;
    let checkpoint: Checkpoint = args.model.parse()?;
    if args.server.backend == BackendKind::TtServer {
        if precision != Precision::Fp32 {
            bail!("--precision is the CPU's: the mast3r-blackhole server runs its own");
        }
        if checkpoint != Checkpoint::Dpt512 {
            bail!("--model is the CPU's: the mast3r-blackhole server runs 512_dpt");
        }
        return run_server(&args);
    }
    let total = Instant::now();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let resolved = weights::resolve(&checkpoint.hub_model(), args.weights.as_deref())?;
    tracing::info!("DUSt3R weights from {} ({:?})", resolved.dir.display(), resolved.source);
    checkpoint.confirm(&resolved.dir)?;
    let model = Dust3r::load_in(&resolved.dir, precision)?;
    match precision.warning() {
        Some(why) => tracing::warn!("--precision: {why}"),
        None if precision == Precision::Bf16 => tracing::info!("DUSt3R in {}", precision.running()),
        None => {}
    }

    let t = Instant::now();
    let f1 = Frame::open(&args.image1).with_context(|| format!("{}", args.image1.display()))?;
    let f2 = Frame::open(&args.image2).with_context(|| format!("{}", args.image2.display()))?;
    let decode = ms(t);

    let t = Instant::now();
    let mode = match args.preprocess {
        Prep::Pad => PrepMode::Pad,
        Prep::Crop => PrepMode::CropSquare,
        Prep::Upstream => PrepMode::Upstream,
    };
    let size = model.config().input_size();
    let (v1, v2) = (prepare(&f1, mode, size)?, prepare(&f2, mode, size)?);
    let preprocess = ms(t);

    let t = Instant::now();
    let e1 = model.encode(&v1.image, v1.height as usize, v1.width as usize)?;
    let e2 = model.encode(&v2.image, v2.height as usize, v2.width as usize)?;
    let encoder = ms(t);

    let t = Instant::now();
    let [b1, b2] = model.decode(&e1, &e2)?;
    let mut decoder = ms(t);

    let t = Instant::now();
    let forward = PairPrediction { view1: model.head(0, &e1, &b1)?, view2_in_1: model.head(1, &e2, &b2)? };
    let mut heads = ms(t);

    let mut pose = None;
    let mut pose_ms = 0.0;
    if args.pose {
        // The swapped pass (view 2, view 1) on the same encoder outputs.
        let t = Instant::now();
        let [s1, s2] = model.decode(&e2, &e1)?;
        decoder += ms(t);
        let t = Instant::now();
        let swapped = PairPrediction { view1: model.head(0, &e2, &s1)?, view2_in_1: model.head(1, &e1, &s2)? };
        heads += ms(t);

        let t = Instant::now();
        // One camera: its intrinsics, mapped into view 2's 512 grid through the preprocessing.
        let known = args.intrinsics.map(|[fx, fy, cx, cy]| CameraK { fx, fy, cx, cy }.in_network(&v2.mapping));
        let opts = PoseOptions {
            mode: args.mode.into(),
            known_intrinsics: known,
            conf_pct: args.conf_pct,
            grid_per_original_px: [v1.mapping.scale(), v2.mapping.scale()],
            ..PoseOptions::default()
        };
        let result = relative_pose(&forward, &swapped, &opts);
        pose_ms = ms(t);
        if let Err(reason) = &result {
            tracing::warn!("no pose: {reason}");
        }
        pose = Some(result);
    }

    let ply_points = write_outputs(&args, &forward, [&v1.rgb, &v2.rgb], pose.as_ref().and_then(|p| p.as_ref().ok()))?;
    let line = json!({"timing_ms": {"decode": decode, "preprocess": preprocess, "encoder": encoder, "decoder": decoder,
                                        "heads": heads, "pose": pose_ms, "total": ms(total)},
                         "precision": model.precision().name(), "model": args.model});
    print_line(line, pose.as_ref(), ply_points);
    Ok(())
}

/// The same job on a mast3r-blackhole server (which pads to a square and, with --pose, uses its
/// own recipe: the server's, see `--mode server`).
fn run_server(args: &Args) -> anyhow::Result<()> {
    if !matches!(args.preprocess, Prep::Pad) {
        bail!("the mast3r-blackhole server pads to a square; --preprocess crop/upstream are CPU-only");
    }
    let url = args.server.server_url.clone().unwrap_or_else(|| DEFAULT_DUST3R_URL.into());
    let mut backend = TtDust3r::new(args.server.options(&url));
    backend.return_pose = args.pose;
    backend.link().wait_ready(std::time::Duration::from_secs_f64(args.server.wait))?;
    let f1 = Frame::open(&args.image1).with_context(|| format!("{}", args.image1.display()))?;
    let f2 = Frame::open(&args.image2).with_context(|| format!("{}", args.image2.display()))?;
    let known = args.intrinsics.map(|[fx, fy, cx, cy]| CameraK { fx, fy, cx, cy });
    let request = PairRequest {
        first: &f1,
        second: &f2,
        known,
        min_confidence: 3.0,
        conf_pct: args.conf_pct,
        lens: Lens::Pinhole,
    };
    let (out, timing) = backend.reconstruct_timed(&request)?;
    let pair = PairPrediction { view1: out.view1, view2_in_1: out.view2_in_1 };
    let pose = args.pose.then_some(out.pose);
    if let Some(Err(reason)) = &pose {
        tracing::warn!("no pose: {reason}");
    }
    let ply_points = write_outputs(args, &pair, [&out.rgb1, &out.rgb2], pose.as_ref().and_then(|p| p.as_ref().ok()))?;
    let line = json!({"backend": backend.link().describe(), "timing_ms": super::host_timing_json(&[timing])});
    print_line(line, pose.as_ref(), ply_points);
    Ok(())
}

/// The run's JSON line on stdout, with the pose and the PLY's point count where there are.
fn print_line(mut line: serde_json::Value, pose: Option<&Result<PairPose, NoPose>>, ply_points: Option<usize>) {
    if let Some(p) = pose {
        line["pose"] = super::pose::pose_json(p);
    }
    if let Some(n) = ply_points {
        line["ply_points"] = json!(n);
    }
    println!("{line}");
}

/// The NPZ, the PLY and the preview the arguments ask for; returns how many points the PLY got.
fn write_outputs(
    args: &Args,
    pair: &PairPrediction,
    rgb: [&[u8]; 2],
    pose: Option<&PairPose>,
) -> anyhow::Result<Option<usize>> {
    if let Some(out) = &args.out {
        write_npz(out, pair, pose).with_context(|| format!("writing {}", out.display()))?;
    }
    let views =
        [ColouredPoints { points: &pair.view1, rgb: rgb[0] }, ColouredPoints { points: &pair.view2_in_1, rgb: rgb[1] }];
    if let Some(path) = &args.preview {
        let name =
            |p: &std::path::Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into());
        let caption = format!(
            "{} (view 1) + {} (view 2): points with confidence > {}",
            name(&args.image1),
            name(&args.image2),
            args.min_confidence
        );
        preview(&views, args.min_confidence as f32, pose.map(|p| &p.t_cam1_cam2), &caption)
            .save(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let Some(path) = &args.ply else { return Ok(None) };
    let points: Vec<_> = cloud_points(&views, args.min_confidence as f32, 1).collect();
    let n = points.len();
    let describe = |p: &Pointmap| format!("{}x{}", p.width, p.height);
    let comments = [
        format!("sp_dust3r dust3r: {} (view 1) and {} (view 2)", args.image1.display(), args.image2.display()),
        format!(
            "both views' points ({} and {} grids) in camera 1's frame (x right, y down, z forward; DUSt3R's scale)",
            describe(&pair.view1),
            describe(&pair.view2_in_1)
        ),
        format!("points with confidence above {}", args.min_confidence),
    ];
    sp_dust3r_core::ply::save_ply(path, points, &comments)?;
    Ok(Some(n))
}

fn write_npz(path: &std::path::Path, pair: &PairPrediction, pose: Option<&PairPose>) -> anyhow::Result<()> {
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(path)?);
    for (name, p) in [("1", &pair.view1), ("2", &pair.view2_in_1)] {
        npz.add_array(format!("pts3d{name}"), &Array3::from_shape_vec((p.height, p.width, 3), p.points.clone())?)?;
        npz.add_array(format!("conf{name}"), &Array2::from_shape_vec((p.height, p.width), p.confidence.clone())?)?;
    }
    if let Some(p) = pose {
        let t21 = p.t_cam1_cam2.inverse();
        let r = t21.rotation.matrix();
        npz.add_array("R", &Array2::from_shape_fn((3, 3), |(i, j)| r[(i, j)]))?;
        npz.add_array("t", &ndarray::arr1(&[t21.translation.x, t21.translation.y, t21.translation.z]))?;
        npz.add_array("focal1", &ndarray::arr0(p.focal1))?;
        npz.add_array("focal2", &ndarray::arr0(p.focal2))?;
    }
    npz.finish()?;
    Ok(())
}
