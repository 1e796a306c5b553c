use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use ndarray::{Array1, Array2};
use serde_json::json;

use sp_dust3r_core::backend::build::BackendKind;
use sp_dust3r_core::backend::tt_server::{TtSuperPoint, DEFAULT_SUPERPOINT_URL};
use sp_dust3r_core::image::draw::draw_keypoints;
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::superpoint::{Keypoints, PostParams, SuperPoint, HUB_MODEL};
use sp_dust3r_core::weights;

#[derive(clap::Args)]
pub struct Args {
    /// Folder with model.safetensors + config.json (else $SP_DUST3R_SUPERPOINT_WEIGHTS, the
    /// Hugging Face cache, or a download).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Input image, PNG or JPEG.
    #[arg(long)]
    image: PathBuf,
    /// Keep the N best keypoints; -1 keeps all.
    #[arg(long, default_value_t = sp_dust3r_core::superpoint::DEFAULT_MAX_KEYPOINTS as i64, allow_hyphen_values = true)]
    max_keypoints: i64,
    /// Keep keypoints whose score is strictly above T.
    #[arg(long, default_value_t = sp_dust3r_core::superpoint::DEFAULT_THRESHOLD as f32)]
    threshold: f32,
    /// Non-maximum suppression radius in pixels of the 640x480 network input; 0 disables it.
    #[arg(long, default_value_t = sp_dust3r_core::superpoint::DEFAULT_NMS_RADIUS as i64)]
    nms_radius: i64,
    /// Run the whole job K times and report median stage times.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Output NPZ: keypoints (N,2) [x, y] in input pixels, scores (N,), descriptors (N,256).
    #[arg(long, required_unless_present = "draw")]
    out: Option<PathBuf>,
    /// Output picture (PNG): the image with a ring at each keypoint coloured by its score, and a
    /// caption with the count, the settings and the colour scale.
    #[arg(long, value_name = "OUT.png")]
    draw: Option<PathBuf>,
    #[command(flatten)]
    server: super::ServerArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let params = PostParams::new(
        args.threshold,
        args.nms_radius,
        sp_dust3r_core::superpoint::BORDER as i64,
        args.max_keypoints,
    )?;
    if args.server.backend == BackendKind::TtServer {
        return run_server(&args, &params);
    }
    let resolved = weights::resolve(&HUB_MODEL, args.weights.as_deref())?;
    tracing::info!("SuperPoint weights from {} ({:?})", resolved.dir.display(), resolved.source);
    let model = SuperPoint::load(&resolved.dir)?;

    let mut times = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    let mut result = Keypoints::default();
    let mut frame = None;
    for _ in 0..args.repeat {
        let t = Instant::now();
        let opened = frame.insert(Frame::open(&args.image)?);
        times[0].push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let luma = opened.to_luma();
        let luma_ms = t.elapsed().as_secs_f64() * 1e3;
        let (keypoints, stages) = model.detect(&luma, &params)?;
        times[1].push(luma_ms + stages.preprocess_ms);
        times[2].push(stages.forward_ms);
        times[3].push(stages.postprocess_ms);
        result = keypoints;
    }
    if let Some(frame) = &frame {
        write_outputs(&args, frame, &result, &params)?;
    }
    let m = |i: usize| super::median(&times[i]);
    println!(
        "{}",
        json!({
            "num_keypoints": result.len(),
            "timing_ms": {"decode": m(0), "preprocess": m(1), "forward": m(2), "postprocess": m(3)},
        })
    );
    Ok(())
}

/// The same job on a superpoint-p150 server: the same NPZ, and where the time went on this side.
fn run_server(args: &Args, params: &PostParams) -> anyhow::Result<()> {
    let url = args.server.server_url.clone().unwrap_or_else(|| DEFAULT_SUPERPOINT_URL.into());
    let backend = TtSuperPoint::new(args.server.options(&url));
    backend.link().wait_ready(std::time::Duration::from_secs_f64(args.server.wait))?;
    let frame = Frame::open(&args.image)?;
    let mut timings = Vec::new();
    let mut result = Keypoints::default();
    for _ in 0..args.repeat {
        let (kp, timing) = backend.detect_timed(&frame, params)?;
        timings.push(timing);
        result = kp;
    }
    write_outputs(args, &frame, &result, params)?;
    println!(
        "{}",
        json!({"num_keypoints": result.len(), "backend": backend.link().describe(), "timing_ms": super::host_timing_json(&timings)})
    );
    Ok(())
}

/// The NPZ and the picture the arguments ask for.
fn write_outputs(args: &Args, frame: &Frame, kp: &Keypoints, params: &PostParams) -> anyhow::Result<()> {
    if let Some(out) = &args.out {
        write_npz(out, kp).with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(path) = &args.draw {
        let mut img = frame.to_rgb_image();
        draw_keypoints(&mut img, &kp.xy, &kp.scores, &params.caption(kp.len()));
        img.save(path).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn write_npz(path: &std::path::Path, kp: &Keypoints) -> anyhow::Result<()> {
    let n = kp.len();
    let xy = Array2::from_shape_vec((n, 2), kp.xy.iter().flatten().copied().collect())?;
    let scores = Array1::from_vec(kp.scores.clone());
    let desc = Array2::from_shape_vec((n, kp.descriptor_dim), kp.descriptors.clone())?;
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(path)?);
    npz.add_array("keypoints", &xy)?;
    npz.add_array("scores", &scores)?;
    npz.add_array("descriptors", &desc)?;
    npz.finish()?;
    Ok(())
}
