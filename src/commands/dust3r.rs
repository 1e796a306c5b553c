use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use ndarray::{Array2, Array3};
use serde_json::json;

use sp_dust3r::dust3r::{prepare, Dust3r, Pointmap, SquareMode, HUB_MODEL};
use sp_dust3r::image::Frame;
use sp_dust3r::weights;

#[derive(clap::Args)]
pub struct Args {
    /// Folder with model.safetensors + config.json (else $SP_DUST3R_DUST3R_WEIGHTS, the Hugging
    /// Face cache, or a download).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// First view (reference camera), PNG or JPEG.
    #[arg(long)]
    image1: PathBuf,
    /// Second view.
    #[arg(long)]
    image2: PathBuf,
    /// Also run the swapped pass and recover the relative pose (PairViewer).
    #[arg(long)]
    pose: bool,
    /// Known intrinsics of the input images for the pose, "fx,fy,cx,cy" in input pixels.
    #[arg(long, value_parser = parse_intrinsics)]
    intrinsics: Option<[f64; 4]>,
    /// Confidence percentile for the pose's inlier set (server mode).
    #[arg(long)]
    conf_pct: Option<f64>,
    /// Centre-crop to a square instead of padding with gray.
    #[arg(long)]
    crop: bool,
    /// Output NPZ: pts3d1, pts3d2 (512,512,3) in camera 1's frame; conf1, conf2 (512,512).
    #[arg(long)]
    out: PathBuf,
}

fn parse_intrinsics(s: &str) -> Result<[f64; 4], String> {
    let v: Vec<f64> = s.split(',').map(|p| p.trim().parse::<f64>().map_err(|e| format!("{p:?}: {e}"))).collect::<Result<_, _>>()?;
    match v.as_slice() {
        [fx, fy, cx, cy] if v.iter().all(|x| x.is_finite()) && *fx > 0.0 && *fy > 0.0 => Ok([*fx, *fy, *cx, *cy]),
        _ => Err(format!("expected fx,fy,cx,cy with positive focals, got {s:?}")),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.pose || args.intrinsics.is_some() || args.conf_pct.is_some() {
        bail!("--pose (and --intrinsics, --conf-pct) need the PairViewer pose solver, which this build does not have yet");
    }
    let total = Instant::now();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let resolved = weights::resolve(&HUB_MODEL, args.weights.as_deref())?;
    tracing::info!("DUSt3R weights from {} ({:?})", resolved.dir.display(), resolved.source);
    let model = Dust3r::load(&resolved.dir)?;

    let t = Instant::now();
    let f1 = Frame::open(&args.image1).with_context(|| format!("{}", args.image1.display()))?;
    let f2 = Frame::open(&args.image2).with_context(|| format!("{}", args.image2.display()))?;
    let decode = ms(t);

    let t = Instant::now();
    let mode = if args.crop { SquareMode::Crop } else { SquareMode::Pad };
    let (v1, v2) = (prepare(&f1, mode)?, prepare(&f2, mode)?);
    let preprocess = ms(t);

    let t = Instant::now();
    let size = v1.size as usize;
    let e1 = model.encode(&v1.image, size, size)?;
    let e2 = model.encode(&v2.image, size, size)?;
    let encoder = ms(t);

    let t = Instant::now();
    let [b1, b2] = model.decode(&e1, &e2)?;
    let decoder = ms(t);

    let t = Instant::now();
    let p1 = model.head(0, &e1, &b1)?;
    let p2 = model.head(1, &e2, &b2)?;
    let heads = ms(t);

    write_npz(&args.out, &p1, &p2).with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "{}",
        json!({"timing_ms": {"decode": decode, "preprocess": preprocess, "encoder": encoder, "decoder": decoder,
                             "heads": heads, "pose": 0.0, "total": ms(total)}})
    );
    Ok(())
}

fn write_npz(path: &std::path::Path, p1: &Pointmap, p2: &Pointmap) -> anyhow::Result<()> {
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(path)?);
    for (name, p) in [("1", p1), ("2", p2)] {
        npz.add_array(format!("pts3d{name}"), &Array3::from_shape_vec((p.height, p.width, 3), p.points.clone())?)?;
        npz.add_array(format!("conf{name}"), &Array2::from_shape_vec((p.height, p.width), p.confidence.clone())?)?;
    }
    npz.finish()?;
    Ok(())
}
