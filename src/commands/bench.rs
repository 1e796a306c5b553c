//! `sp_dust3r bench superpoint`: our forward and ONNX Runtime's on the same input, same run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use ndarray::Array2;

use sp_dust3r::image::Frame;
use sp_dust3r::superpoint::{preprocess, PostParams, SuperPoint, HUB_MODEL};
use sp_dust3r::weights;

/// Multiply-adds x 2 of SuperPoint at 480x640 (torch FlopCounterMode, shared/spec/superpoint.md).
const SUPERPOINT_GFLOP_480X640: f64 = 52.1;

const ORT_PEER: &str = include_str!("../../tools/peers/superpoint_ort.py");

#[derive(clap::Subcommand)]
pub enum Bench {
    /// SuperPoint forward at 480x640 vs ONNX Runtime CPU (PyPI onnxruntime + onnx), plus our
    /// post-processing time at 1024 keypoints.
    Superpoint(SuperPointArgs),
}

#[derive(clap::Args)]
pub struct SuperPointArgs {
    /// Folder with model.safetensors + config.json (resolved as for `superpoint`).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Input image (PNG/JPEG); default: a synthetic 640x480 pattern.
    #[arg(long)]
    image: Option<PathBuf>,
    #[arg(long, default_value_t = 10)]
    repeat: usize,
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Python with numpy, onnx and onnxruntime (default: $SP_DUST3R_PYTHON, ./.venv/bin/python,
    /// then python3). `tools/setup-peers.sh` makes ./.venv.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Skip the peer and time only our implementation.
    #[arg(long)]
    no_peer: bool,
}

pub fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Superpoint(args) => superpoint(args),
    }
}

fn superpoint(args: SuperPointArgs) -> anyhow::Result<()> {
    let resolved = weights::resolve(&HUB_MODEL, args.weights.as_deref())?;
    let model = SuperPoint::load(&resolved.dir)?;
    let luma = match &args.image {
        Some(path) => Frame::open(path)?.to_luma(),
        None => synthetic_scene(),
    };
    let input = preprocess(&luma)?;
    let (h, w) = (input.height as usize, input.width as usize);

    let mut forward = Vec::new();
    let mut post = Vec::new();
    let params = PostParams { max_keypoints: Some(1024), ..PostParams::default() };
    let mut out = None;
    let mut n_kp = 0;
    for i in 0..args.warmup + args.repeat {
        let t = Instant::now();
        let o = model.net().forward(&input.plane, h, w)?;
        let f = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        n_kp = model.postprocess(&o, &params)?.len();
        let p = t.elapsed().as_secs_f64() * 1e3;
        if i >= args.warmup {
            forward.push(f);
            post.push(p);
        }
        out = Some(o);
    }
    let ours = super::median(&forward);
    let gflops = SUPERPOINT_GFLOP_480X640 * (h * w) as f64 / (480.0 * 640.0) / (ours / 1e3);
    println!("sp_dust3r forward ({w}x{h}): median {ours:.1} ms over {} runs, {gflops:.0} GFLOP/s effective, {} threads", args.repeat, rayon::current_num_threads());
    println!("sp_dust3r post-processing ({n_kp} keypoints): median {:.2} ms", super::median(&post));
    println!("peak resident memory: {:.0} MB", peak_rss_mb());

    if args.no_peer {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let plane_path = dir.path().join("plane.npy");
    ndarray_npy::write_npy(&plane_path, &Array2::from_shape_vec((h, w), input.plane.clone())?)?;
    let script = dir.path().join("superpoint_ort.py");
    std::fs::write(&script, ORT_PEER)?;
    let python = find_python(args.python.as_deref());
    let output = Command::new(&python)
        .arg(&script)
        .args(["--weights".as_ref(), resolved.dir.as_os_str()])
        .args(["--input".as_ref(), plane_path.as_os_str()])
        .args(["--repeat", &args.repeat.to_string(), "--warmup", &args.warmup.to_string()])
        .args(["--threads", &rayon::current_num_threads().to_string()])
        .args(["--out-dir".as_ref(), dir.path().as_os_str()])
        .output()
        .with_context(|| format!("running the ONNX Runtime peer with {}", python.display()))?;
    if !output.status.success() {
        bail!(
            "the ONNX Runtime peer failed (needs numpy, onnx, onnxruntime: run tools/setup-peers.sh \
             or pass --python):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("unexpected peer output: {stdout}"))?;
    let peer = report["median_ms"].as_f64().context("peer reported no median_ms")?;

    // The peer must have computed the same function, or the comparison means nothing.
    let out = out.context("no runs")?;
    let ort_logits: ndarray::Array3<f32> = ndarray_npy::read_npy(dir.path().join("ort_logits.npy"))?;
    let ours_chw = ndarray::Array3::from_shape_vec((out.cells_h, out.cells_w, 65), out.logits)?
        .permuted_axes([2, 0, 1]);
    let diff = (&ours_chw - &ort_logits).iter().fold(0f32, |m, d| m.max(d.abs()));

    println!(
        "onnxruntime {} forward: median {peer:.1} ms over {} runs, {} threads (max |logit diff| vs ours {diff:.2e})",
        report["onnxruntime"].as_str().unwrap_or("?"),
        args.repeat,
        report["threads"]
    );
    println!("ratio sp_dust3r / onnxruntime: {:.2}x", ours / peer);
    Ok(())
}

fn find_python(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("SP_DUST3R_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// A 640x480 scene with edges and corners at many scales, so post-processing has real work.
fn synthetic_scene() -> sp_dust3r::image::LumaImage {
    let (w, h) = (640u32, 480u32);
    let mut data = Vec::with_capacity((w * h) as usize);
    for y in 0..h {
        for x in 0..w {
            let (xf, yf) = (x as f32, y as f32);
            let checker = (((x / 40) + (y / 30)) % 2) as f32;
            let rings = (((xf - 320.0).hypot(yf - 240.0) / 17.0).sin() > 0.0) as u8 as f32;
            let v = 0.15 + 0.5 * checker + 0.3 * rings * ((x / 97 + y / 53) % 2) as f32;
            data.push((v.min(1.0) * 255.0).round() / 255.0);
        }
    }
    sp_dust3r::image::LumaImage { width: w, height: h, data }
}

/// Peak resident set size of this process (VmHWM), in MB.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}
