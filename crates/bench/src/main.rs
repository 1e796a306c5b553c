//! `sp_dust3r_bench`: our implementation and a peer (ONNX Runtime, PyTorch, numpy + OpenCV) on the
//! same input, in the same run; each prints both times and their ratio. A binary of its own, so
//! the product binary carries no benchmark or peer.
//!
//! ```sh
//! tools/setup-peers.sh && cargo run --release -p sp_dust3r_bench -- superpoint --weights DIR
//! ```

mod bf16_pose;
mod vo;
mod vo_study;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ndarray::Array2;

use sp_dust3r_core::dust3r::{Checkpoint, Dust3rConfig, HeadKind, Pointmap};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::quantile::median;
use sp_dust3r_core::superpoint::{preprocess, PostParams, SuperPoint, HUB_MODEL};
use sp_dust3r_core::tensor::Precision;
use sp_dust3r_core::weights;

/// Multiply-adds x 2 of SuperPoint at 480x640 (torch FlopCounterMode, shared/spec/superpoint.md).
const SUPERPOINT_GFLOP_480X640: f64 = 52.1;

const ORT_PEER: &str = include_str!("../../../tools/peers/superpoint_ort.py");
const TORCH_PEER: &str = include_str!("../../../tools/peers/dust3r_torch.py");
const OPENCV_PEER: &str = include_str!("../../../tools/peers/pose_opencv.py");
const TRACKING_PEER: &str = include_str!("../../../tools/peers/tracking_opencv.py");
const MATMUL_PEER: &str = include_str!("../../../tools/peers/matmul_ort.py");

#[derive(clap::Parser)]
#[command(name = "sp_dust3r_bench", version, about = "Benchmarks of sp_dust3r against its peers, in the same run")]
enum Bench {
    /// SuperPoint forward at 480x640 vs ONNX Runtime CPU (PyPI onnxruntime + onnx), plus our
    /// post-processing time at 1024 keypoints.
    Superpoint(SuperPointArgs),
    /// DUSt3R, one 512x512 pair at the full ViT-L geometry (deterministic weights unless
    /// --weights), forward and swapped forward.
    Dust3r(Dust3rArgs),
    /// Relative pose of a 512x512 pair (synthetic pointmaps with known pose, noise and 20 %
    /// outliers) in both modes, and upstream's recipe in numpy + OpenCV on the same pointmaps.
    Pose(PoseArgs),
    /// Tracking one frame against a keyframe at up to 1024 keypoints (the rendered sample: frame
    /// 3 against keyframe 0 with its exact 512x512 pointmap), by stage, and the same steps in
    /// numpy + OpenCV (BFMatcher, solvePnPRansac) on the same inputs.
    Tracking(TrackingArgs),
    /// The GEMM rate on the encoder MLP's shape (1024 x 1024 x 4096): the general GEMM, the
    /// packed-weight GEMM the linear layers use, and ONNX Runtime's MatMul.
    Gemm(GemmArgs),
    /// SuperPoint's keypoint rate and latency on a camera stream (newest frame wins, as in the
    /// node) alone, then with DUSt3R pairs running back to back on the same cores: sharing
    /// SuperPoint's threads, then on the node's background pool (`dust3r_nice`).
    Priority(PriorityArgs),
    /// Frame-rate tracking on a TUM RGB-D sequence with DUSt3R replaced by the sequence's depth
    /// and motion capture (pairs at arbitrary scales), scored against the motion capture, beside
    /// a classic frame-to-frame RGB-D odometry (OpenCV ORB + solvePnPRansac) on the same frames.
    Vo(vo::VoArgs),
}

#[derive(clap::Args)]
struct PriorityArgs {
    /// SuperPoint's folder (resolved as for `superpoint`).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// DUSt3R checkpoint; default: deterministic weights of a small geometry (512x512 input,
    /// 4 encoder blocks of 256, 12 decoder blocks of 256) generated into a temporary folder.
    #[arg(long)]
    dust3r_weights: Option<PathBuf>,
    /// Camera frames per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Seconds of each phase.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// The background pool's nice value (the node's dust3r_nice).
    #[arg(long, default_value_t = 19)]
    nice: i32,
    /// The pairs' guaranteed share of the time in the last phase (the node's dust3r_cpu_share).
    #[arg(long, default_value_t = sp_dust3r_core::workers::priority::DEFAULT_BACKGROUND_SHARE)]
    share: f64,
}

#[derive(clap::Args)]
struct GemmArgs {
    /// Python with numpy, onnx and onnxruntime (default as for the other benchmarks).
    #[arg(long)]
    python: Option<PathBuf>,
    #[arg(long)]
    no_peer: bool,
}

#[derive(clap::Args)]
struct TrackingArgs {
    /// SuperPoint's folder (resolved as for `superpoint`); trained weights give real matches.
    #[arg(long)]
    weights: Option<PathBuf>,
    #[arg(long, default_value_t = 50)]
    repeat: usize,
    /// Python with numpy and opencv-python-headless (default as for the other benchmarks).
    #[arg(long)]
    python: Option<PathBuf>,
    #[arg(long)]
    no_peer: bool,
}

#[derive(clap::Args)]
struct PoseArgs {
    #[arg(long, default_value_t = 10)]
    repeat: usize,
    /// Python with numpy and opencv-python-headless (default as for the other benchmarks).
    #[arg(long)]
    python: Option<PathBuf>,
    #[arg(long)]
    no_peer: bool,
}

#[derive(clap::Args)]
struct Dust3rArgs {
    /// Checkpoint folder; default: deterministic weights of the real geometry, generated into a
    /// temporary folder (2.3 GB).
    #[arg(long)]
    weights: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Also time the swapped pass (view 2, view 1) on the same encoder outputs.
    #[arg(long)]
    swapped: bool,
    /// Python with numpy, onnx and onnxruntime for the MatMul peer, and torch and safetensors for
    /// the PyTorch CPU peer (default: $SP_DUST3R_PYTHON, ./.venv/bin/python, then python3); the
    /// PyTorch peer is skipped, with a note, where torch is absent.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Skip the peers (ONNX Runtime's MatMul and PyTorch).
    #[arg(long)]
    no_peer: bool,
    /// fp32, or bf16 (then fp32 is timed too, in the same run, and the outputs compared).
    #[arg(long, default_value = "fp32", value_parser = clap::builder::PossibleValuesParser::new(Precision::NAMES))]
    precision: String,
    /// The checkpoint's geometry (head and input size) the generated weights have; with
    /// --weights, the checkpoint they must be.
    #[arg(long, default_value = "512_dpt", value_parser = clap::builder::PossibleValuesParser::new(Checkpoint::NAMES))]
    model: String,
}

#[derive(clap::Args)]
struct SuperPointArgs {
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
    /// Python with numpy, onnx, onnxruntime and safetensors (default: $SP_DUST3R_PYTHON, ./.venv/bin/python,
    /// then python3). `tools/setup-peers.sh` makes ./.venv.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Skip the peer and time only our implementation.
    #[arg(long)]
    no_peer: bool,
    /// fp32, or bf16 (then fp32 is timed too, in the same run, and the keypoints of each
    /// `--compare` image set against fp32's).
    #[arg(long, default_value = "fp32", value_parser = clap::builder::PossibleValuesParser::new(Precision::NAMES))]
    precision: String,
    /// Images (PNG/JPEG) on which bf16's keypoints and descriptors are compared with fp32's.
    #[arg(long, num_args = 1..)]
    compare: Vec<PathBuf>,
}

fn main() -> std::process::ExitCode {
    use clap::Parser;
    sp_dust3r_core::keep_freed_memory();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("sp_dust3r=info,error"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match run(Bench::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(bench: Bench) -> anyhow::Result<()> {
    // Figures compare only within one machine and one kernel level: say which.
    println!("cpu: {}", sp_dust3r_core::backend::cpu::cpu_id());
    match bench {
        Bench::Superpoint(args) => superpoint(args),
        Bench::Dust3r(args) => dust3r(args),
        Bench::Pose(args) => pose(args),
        Bench::Tracking(args) => tracking(args),
        Bench::Priority(args) => priority(args),
        Bench::Vo(args) => {
            let python = find_python(args.python.as_deref());
            vo::vo(args, &python)
        }
        Bench::Gemm(args) => gemm_peak(&find_python(args.python.as_deref()), args.no_peer).map(|_| ()),
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
    let ours = median(&forward);
    let gflops = SUPERPOINT_GFLOP_480X640 * (h * w) as f64 / (480.0 * 640.0) / (ours / 1e3);
    println!(
        "sp_dust3r forward ({w}x{h}): median {ours:.1} ms over {} runs, {gflops:.0} GFLOP/s effective, {} threads",
        args.repeat,
        rayon::current_num_threads()
    );
    println!("sp_dust3r post-processing ({n_kp} keypoints): median {:.2} ms", median(&post));
    let asked = Precision::from_name(&args.precision).context("unknown precision")?;
    let low = (asked == Precision::Bf16).then(|| SuperPoint::load_in(&resolved.dir, asked)).transpose()?;
    let bf16 = match &low {
        Some(low) => Some(superpoint_bf16(&model, low, &input, &args)?),
        None => None,
    };
    println!("peak resident memory: {:.0} MB", peak_rss_mb());

    if args.no_peer {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let plane_path = dir.path().join("plane.npy");
    ndarray_npy::write_npy(&plane_path, &Array2::from_shape_vec((h, w), input.plane.clone())?)?;
    let python = find_python(args.python.as_deref());
    let threads = rayon::current_num_threads().to_string();
    let (repeat, warmup) = (args.repeat.to_string(), args.warmup.to_string());
    let report = run_peer(
        ORT_PEER,
        "superpoint_ort.py",
        &python,
        &[
            "--weights".as_ref(),
            resolved.dir.as_os_str(),
            "--input".as_ref(),
            plane_path.as_os_str(),
            "--repeat".as_ref(),
            repeat.as_ref(),
            "--warmup".as_ref(),
            warmup.as_ref(),
            "--threads".as_ref(),
            threads.as_ref(),
            "--out-dir".as_ref(),
            dir.path().as_os_str(),
        ],
    )
    .context(
        "the ONNX Runtime peer needs numpy, onnx, onnxruntime, safetensors: run tools/setup-peers.sh or pass --python",
    )?;
    let peer = report["median_ms"].as_f64().context("peer reported no median_ms")?;

    // The peer must have computed the same function, or the comparison means nothing.
    let out = out.context("no runs")?;
    let ort_logits: ndarray::Array3<f32> = ndarray_npy::read_npy(dir.path().join("ort_logits.npy"))?;
    let ours_chw =
        ndarray::Array3::from_shape_vec((out.cells_h, out.cells_w, 65), out.logits)?.permuted_axes([2, 0, 1]);
    let diff = (&ours_chw - &ort_logits).iter().fold(0f32, |m, d| m.max(d.abs()));

    println!(
        "onnxruntime {} forward: median {peer:.1} ms over {} runs, {} threads (max |logit diff| vs ours {diff:.2e})",
        report["onnxruntime"].as_str().unwrap_or("?"),
        args.repeat,
        report["threads"]
    );
    println!("ratio sp_dust3r / onnxruntime: {:.2}x", ours / peer);
    if let Some(low) = bf16 {
        println!("ratio sp_dust3r bf16 / onnxruntime: {:.2}x", low / peer);
    }
    Ok(())
}

/// SuperPoint in bf16 (`low`) against fp32 (`model`): the forward's median time on `input`, in
/// the same run, and on each `--compare` image the keypoints' F1 (the same pixel) and the
/// descriptors' cosine at the shared keypoints. Returns bf16's median forward time, ms.
fn superpoint_bf16(
    model: &SuperPoint,
    low: &SuperPoint,
    input: &sp_dust3r_core::superpoint::Preprocessed,
    args: &SuperPointArgs,
) -> anyhow::Result<f64> {
    let (h, w) = (input.height as usize, input.width as usize);
    let time = |m: &SuperPoint| -> anyhow::Result<f64> {
        let mut t = Vec::new();
        for i in 0..args.warmup + args.repeat {
            let start = Instant::now();
            m.net().forward(&input.plane, h, w)?;
            if i >= args.warmup {
                t.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        Ok(median(&t))
    };
    let (fp32, bf16) = (time(model)?, time(low)?);
    let ran = Precision::Bf16.running();
    println!("sp_dust3r forward fp32 {fp32:.1} ms, bf16 asked ({ran}) {bf16:.1} ms: {:.2}x the fp32 time", bf16 / fp32);
    let params = PostParams { max_keypoints: Some(1024), ..PostParams::default() };
    for path in &args.compare {
        let luma = Frame::open(path)?.to_luma();
        let (a, _) = model.detect(&luma, &params)?;
        let (b, _) = low.detect(&luma, &params)?;
        let at: std::collections::HashMap<(i64, i64), usize> =
            a.xy.iter().enumerate().map(|(i, p)| ((p[0].round() as i64, p[1].round() as i64), i)).collect();
        let d = a.descriptor_dim;
        let cosines: Vec<f64> =
            b.xy.iter()
                .enumerate()
                .filter_map(|(j, p)| at.get(&(p[0].round() as i64, p[1].round() as i64)).map(|&i| (i, j)))
                .map(|(i, j)| {
                    let (u, v) = (&a.descriptors[i * d..][..d], &b.descriptors[j * d..][..d]);
                    u.iter().zip(v).map(|(x, y)| (x * y) as f64).sum::<f64>()
                })
                .collect();
        let shared = cosines.len() as f64;
        let f1 = 2.0 * shared / (a.len() + b.len()).max(1) as f64;
        let min = cosines.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "{}: keypoints fp32 {}, bf16 {}, F1 {f1:.4}; descriptor cosine mean {:.5}, min {min:.5}",
            path.display(),
            a.len(),
            b.len(),
            cosines.iter().sum::<f64>() / shared.max(1.0)
        );
    }
    Ok(bf16)
}

/// config.json of naver/DUSt3R_ViTLarge_BaseDecoder_512_dpt (shared/spec/dust3r.md).
pub const DUST3R_FULL_CONFIG: &str = r#"{"output_mode": "pts3d", "head_type": "dpt", "depth_mode": ["exp", -Infinity, Infinity], "conf_mode": ["exp", 1, Infinity], "landscape_only": false, "patch_embed_cls": "PatchEmbedDust3R", "img_size": [512, 512], "patch_size": 16, "enc_embed_dim": 1024, "enc_depth": 24, "enc_num_heads": 16, "dec_embed_dim": 768, "dec_depth": 12, "dec_num_heads": 12, "mlp_ratio": 4, "pos_embed": "RoPE100"}"#;

/// config.json of `checkpoint`: the 512_dpt one with its head and input size.
fn full_config(checkpoint: Checkpoint) -> String {
    let size = checkpoint.input_size();
    let head = match checkpoint.head() {
        HeadKind::Dpt => "dpt",
        HeadKind::Linear => "linear",
    };
    DUST3R_FULL_CONFIG
        .replace("\"head_type\": \"dpt\"", &format!("\"head_type\": \"{head}\""))
        .replace("\"img_size\": [512, 512]", &format!("\"img_size\": [{size}, {size}]"))
}

/// GFLOP (multiply-add = 2) of a pair's stages at `n` tokens a view: encoder x2 with the patch
/// embedding, decoder (both branches) with `decoder_embed`, and the two heads. At 512x512 this is
/// spec §9's count: 1446, 621 and 498 (DPT, whose every layer scales with the image area).
fn pair_gflop(c: &Dust3rConfig, n: usize) -> [(&'static str, f64); 3] {
    let (n, e, d, p) = (n as f64, c.enc_embed_dim as f64, c.dec_embed_dim as f64, c.patch_size as f64);
    let (enc_depth, dec_depth) = (c.enc_depth as f64, c.dec_depth as f64);
    // Per block: qkv, projection and the 4x MLP (12 E^2 a token), and QK^T with AV (4 N E).
    let encoder = 2.0 * (enc_depth * (2.0 * n * 12.0 * e * e + 4.0 * n * n * e) + 2.0 * n * 3.0 * p * p * e);
    // Per block: self and cross attention's eight projections and the MLP (32 D^2 a token),
    // and both attentions' products (8 N D).
    let decoder = 2.0 * (dec_depth * (2.0 * n * 16.0 * d * d + 8.0 * n * n * d) + 2.0 * n * e * d);
    let heads = match c.head() {
        Some(HeadKind::Linear) => 2.0 * 2.0 * n * d * 4.0 * p * p,
        _ => 498e9 * n / 1024.0,
    };
    [("encoder", encoder / 1e9), ("decoder", decoder / 1e9), ("heads", heads / 1e9)]
}

fn dust3r(args: Dust3rArgs) -> anyhow::Result<()> {
    use sp_dust3r_core::dust3r::{synthetic, Dust3r};
    let checkpoint: Checkpoint = args.model.parse()?;
    let tmp = tempfile::tempdir()?;
    let dir = match &args.weights {
        Some(d) => d.clone(),
        None => {
            let t = Instant::now();
            synthetic::write_checkpoint(tmp.path(), &full_config(checkpoint))?;
            println!("generated deterministic full-size {checkpoint} weights in {:.1} s", t.elapsed().as_secs_f64());
            tmp.path().to_path_buf()
        }
    };
    checkpoint.confirm(&dir)?;
    let asked = Precision::from_name(&args.precision).context("unknown precision")?;
    let t = Instant::now();
    let model = Dust3r::load(&dir)?;
    println!("{checkpoint} loaded in {:.2} s", t.elapsed().as_secs_f64());
    let lower = match asked {
        Precision::Fp32 => None,
        Precision::Bf16 => {
            println!("{}", asked.not_run_here().unwrap_or_else(|| asked.running()));
            Some(Dust3r::load_in(&dir, asked)?)
        }
    };
    let side = model.config().input_size() as usize;
    let (h, w) = (side, side);
    let gflop = pair_gflop(model.config(), (h / model.config().patch_size) * (w / model.config().patch_size));
    let (img1, img2) = (test_image(h, w, 0.0), test_image(h, w, 0.7));
    // The machine's GEMM rate on the encoder MLP's shape, ours and ONNX Runtime's, measured
    // before and after the network: this shared machine's speed drifts by a third from minute
    // to minute, so the stages are set against the mean of the two.
    let python = find_python(args.python.as_deref());
    let before = gemm_peak(&python, args.no_peer)?;
    // The precisions take turns, a pass each, so that the machine's drift falls on both alike.
    let mut fp32 = PairTimes::default();
    let mut bf16 = lower.as_ref().map(|_| PairTimes::default());
    for _ in 0..args.repeat.max(1) {
        time_pair(&model, [&img1, &img2], (h, w), args.swapped, &mut fp32)?;
        if let Some((m, times)) = lower.as_ref().zip(bf16.as_mut()) {
            time_pair(m, [&img1, &img2], (h, w), args.swapped, times)?;
        }
    }
    let after = gemm_peak(&python, args.no_peer)?;
    let peak = before.zip(after).map(|(b, a)| (b + a) / 2.0);
    if let Some(p) = peak {
        println!("onnxruntime's MatMul, mean of before and after the pair: {p:.0} GFLOP/s");
    }
    let total = print_stages(Stages { precision: "fp32", side, gflop }, &fp32, peak, None);
    if let Some(bf16) = &bf16 {
        print_stages(Stages { precision: "bf16", side, gflop }, bf16, peak, Some(&fp32));
        for (name, a, b) in [("view 1", &fp32.last.0, &bf16.last.0), ("view 2", &fp32.last.1, &bf16.last.1)] {
            println!("bf16 against fp32, {name}: {}", compare_pointmaps(a, b));
        }
    }
    if let Some((m, t)) = lower.as_ref().zip(bf16.as_ref()) {
        bf16_pose::report((&model, &fp32), (m, t), args.weights.is_some())?;
    }
    println!("peak resident memory: {:.0} MB", peak_rss_mb());
    if args.no_peer {
        return Ok(());
    }
    if checkpoint.head() != HeadKind::Dpt {
        println!("PyTorch peer skipped: tools/peers/dust3r_torch.py has the DPT head only");
        return Ok(());
    }
    let (p1, p2) = &fp32.last;
    let Some(peer) = dust3r_torch(&python, &dir, [&img1, &img2], (h, w), args.repeat, [&p1.points, &p2.points])? else {
        return Ok(());
    };
    println!("ratio sp_dust3r / pytorch: {:.2}x", total / peer);
    Ok(())
}

/// A pair's stage times (encoder, decoder, heads) over the repeats, the swapped pass's, and the
/// last outputs with the encodings they came from (and the swapped pass's, when it ran).
#[derive(Default)]
struct PairTimes {
    stages: Vec<[f64; 3]>,
    swapped: Vec<f64>,
    last: (Pointmap, Pointmap),
    encoded: Option<[sp_dust3r_core::dust3r::Encoded; 2]>,
    last_swapped: Option<sp_dust3r_core::dust3r::PairPrediction>,
}

fn time_pair(
    model: &sp_dust3r_core::dust3r::Dust3r,
    [img1, img2]: [&[f32]; 2],
    (h, w): (usize, usize),
    swapped: bool,
    times: &mut PairTimes,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let e1 = model.encode(img1, h, w)?;
    let e2 = model.encode(img2, h, w)?;
    let enc = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let [b1, b2] = model.decode(&e1, &e2)?;
    let dec = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let p1 = model.head(0, &e1, &b1)?;
    let p2 = model.head(1, &e2, &b2)?;
    let heads = t.elapsed().as_secs_f64();
    times.last = (p1, p2);
    times.stages.push([enc, dec, heads]);
    if swapped {
        let t = Instant::now();
        times.last_swapped = Some(model.predict(&e2, &e1)?);
        times.swapped.push(t.elapsed().as_secs_f64());
    }
    times.encoded = Some([e1, e2]);
    Ok(())
}

/// What a timing is of: the precision, the input side and the stages' GFLOP.
#[derive(Clone, Copy)]
struct Stages {
    precision: &'static str,
    side: usize,
    gflop: [(&'static str, f64); 3],
}

/// Prints each stage's median time and rate (against ONNX Runtime's MatMul rate `peak`, and
/// against `base`'s time when given); returns the pair's time.
fn print_stages(what: Stages, t: &PairTimes, peak: Option<f64>, base: Option<&PairTimes>) -> f64 {
    let Stages { precision, side, gflop: stages } = what;
    let of_peak = |rate: f64| match peak {
        Some(p) => format!(" ({:.2} of onnxruntime's MatMul)", rate / p),
        None => String::new(),
    };
    let stage = |times: &PairTimes, i: usize| median(&times.stages.iter().map(|s| s[i]).collect::<Vec<_>>());
    let against = |s: f64, base_s: f64| format!(", {:.2}x the fp32 time", s / base_s);
    let (mut total, mut base_total, mut gflop) = (0.0, 0.0, 0.0);
    for (i, (name, g)) in stages.iter().enumerate() {
        let s = stage(t, i);
        let vs = base.map(|b| against(s, stage(b, i))).unwrap_or_default();
        println!("sp_dust3r {precision} {name}: {s:.2} s, {:.0} GFLOP/s{}{vs}", g / s, of_peak(g / s));
        total += s;
        base_total += base.map_or(0.0, |b| stage(b, i));
        gflop += g;
    }
    let vs = base.map(|_| against(total, base_total)).unwrap_or_default();
    println!(
        "sp_dust3r {precision} pair forward ({side}x{side}): {total:.2} s, {:.0} GFLOP/s effective{}{vs}",
        gflop / total,
        of_peak(gflop / total)
    );
    if !t.swapped.is_empty() {
        let s = median(&t.swapped);
        let again = stages[1].1 + stages[2].1;
        println!("sp_dust3r {precision} swapped forward (encoder reused): {s:.2} s, {:.0} GFLOP/s", again / s);
    }
    total
}

/// Pearson's correlation of the points and of the confidences, and the points' median
/// relative error, of `b` against `a`.
fn compare_pointmaps(a: &Pointmap, b: &Pointmap) -> String {
    use sp_dust3r_core::eval::hat::correlation;
    let pairs = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(&p, &q)| (p as f64, q as f64)).collect::<Vec<_>>();
    let points = pairs(&a.points, &b.points);
    let conf = pairs(&a.confidence, &b.confidence);
    let rel: Vec<f64> = a
        .points
        .chunks_exact(3)
        .zip(b.points.chunks_exact(3))
        .map(|(p, q)| {
            let d = p.iter().zip(q).map(|(x, y)| (x - y) as f64 * (x - y) as f64).sum::<f64>().sqrt();
            d / p.iter().map(|x| *x as f64 * *x as f64).sum::<f64>().sqrt().max(1e-12)
        })
        .collect();
    let at = |q: f64| {
        use sp_dust3r_core::quantile::{quantile, Method};
        quantile(&rel, q, Method::Linear).unwrap_or(f64::NAN)
    };
    format!(
        "PCC pts3d {:.5}, conf {:.5}; median relative error of pts3d {:.2e} (90 % {:.2e}, 99 % {:.2e}, 99.9 % {:.2e})",
        correlation(points.iter().copied()),
        correlation(conf.iter().copied()),
        median(&rel),
        at(0.9),
        at(0.99),
        at(0.999)
    )
}

/// PyTorch on the CPU on the same weights (`dir`) and images, in this invocation: its pair
/// forward time (`None` when the peer cannot run), and how far its pointmaps are from `ours`.
fn dust3r_torch(
    python: &std::path::Path,
    dir: &std::path::Path,
    images: [&[f32]; 2],
    (h, w): (usize, usize),
    repeat: usize,
    ours: [&[f32]; 2],
) -> anyhow::Result<Option<f64>> {
    // PyTorch CPU on the same weights and images, in this invocation.
    let work = tempfile::tempdir()?;
    for (name, img) in [("img1.npy", images[0]), ("img2.npy", images[1])] {
        ndarray_npy::write_npy(work.path().join(name), &ndarray::Array3::from_shape_vec((3, h, w), img.to_vec())?)?;
    }
    let (repeat, threads) = (repeat.to_string(), rayon::current_num_threads().to_string());
    let (img1_path, img2_path) = (work.path().join("img1.npy"), work.path().join("img2.npy"));
    let report = match run_peer(
        TORCH_PEER,
        "dust3r_torch.py",
        python,
        &[
            "--weights".as_ref(),
            dir.as_os_str(),
            "--img1".as_ref(),
            img1_path.as_os_str(),
            "--img2".as_ref(),
            img2_path.as_os_str(),
            "--repeat".as_ref(),
            repeat.as_ref(),
            "--threads".as_ref(),
            threads.as_ref(),
            "--out-dir".as_ref(),
            work.path().as_os_str(),
        ],
    ) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("{e:#}");
            println!(
                "PyTorch peer skipped (needs numpy, torch and safetensors in {}): {}",
                python.display(),
                why.lines().last().unwrap_or("")
            );
            return Ok(None);
        }
    };
    let peer = report["median_s"].as_f64().context("peer reported no median_s")?;
    let theirs1: ndarray::Array3<f32> = ndarray_npy::read_npy(work.path().join("torch_pts1.npy"))?;
    let theirs2: ndarray::Array3<f32> = ndarray_npy::read_npy(work.path().join("torch_pts2.npy"))?;
    let rel = |ours: &[f32], theirs: &ndarray::Array3<f32>| {
        let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
        ours.iter().zip(theirs.iter()).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
    };
    println!(
        "pytorch {} pair forward: {peer:.2} s, {} threads (pointmap relative difference vs ours {:.1e} / {:.1e})",
        report["torch"].as_str().unwrap_or("?"),
        report["threads"],
        rel(ours[0], &theirs1),
        rel(ours[1], &theirs2)
    );
    Ok(Some(peer))
}

/// A smooth synthetic 3-channel image (CHW) for the timing runs; `phase` makes a second view.
fn test_image(h: usize, w: usize, phase: f32) -> Vec<f32> {
    let mut v = Vec::with_capacity(3 * h * w);
    for ch in 0..3 {
        for y in 0..h {
            for x in 0..w {
                let (xf, yf) = (x as f32 / w as f32, y as f32 / h as f32);
                v.push(match ch {
                    0 => (6.0 * xf + phase).sin() * (4.0 * yf - phase).cos(),
                    1 => (5.0 * (xf + yf) + 2.0 * phase).cos(),
                    _ => (9.0 * xf * yf + phase).sin(),
                });
            }
        }
    }
    v
}

/// What a camera stream got from SuperPoint in one phase.
struct StreamReport {
    sent: usize,
    answered: usize,
    latencies_ms: Vec<f64>,
    pairs: usize,
}

impl std::fmt::Display for StreamReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = self.latencies_ms.clone();
        l.sort_by(f64::total_cmp);
        let pct = |q: f64| l.get(((l.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
        write!(
            f,
            "{} of {} frames answered, latency median {:.0} ms, p95 {:.0} ms, max {:.0} ms; {} DUSt3R pairs",
            self.answered,
            self.sent,
            pct(0.5),
            pct(0.95),
            pct(1.0),
            self.pairs
        )
    }
}

/// A camera at `rate` for `seconds` into SuperPoint, newest frame wins (a frame that arrives
/// while one is being processed replaces any waiting one, as the node's slot does), while
/// `background` runs pairs back to back until the stream ends. Latency: arrival to keypoints.
fn camera_stream(
    sp: &SuperPoint,
    plane: &[f32],
    (h, w): (usize, usize),
    rate: f64,
    seconds: f64,
    background: Option<&(dyn Fn(&std::sync::atomic::AtomicBool) -> usize + Sync)>,
    rest_share: f64,
) -> anyhow::Result<StreamReport> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    let done = AtomicBool::new(false);
    let waiting: Mutex<Option<Instant>> = Mutex::new(None);
    let params = PostParams { max_keypoints: Some(1024), ..PostParams::default() };
    std::thread::scope(|s| -> anyhow::Result<StreamReport> {
        let pairs = background.map(|run| s.spawn(|| run(&done)));
        let camera = s.spawn(|| {
            let start = Instant::now();
            let mut sent = 0;
            while start.elapsed().as_secs_f64() < seconds {
                let due = start + Duration::from_secs_f64(sent as f64 / rate);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                if let Ok(mut slot) = waiting.lock() {
                    *slot = Some(Instant::now());
                }
                sent += 1;
            }
            done.store(true, Ordering::Relaxed);
            sent
        });
        let mut latencies_ms = Vec::new();
        let mut rest_until = None;
        while !done.load(Ordering::Relaxed) {
            // As the node's SuperPoint worker: the rest before the next frame (pairs are always
            // in flight here).
            if let Some(until) = rest_until.take() {
                std::thread::sleep(Instant::saturating_duration_since(&until, Instant::now()));
            }
            let Some(arrived) = waiting.lock().ok().and_then(|mut slot| slot.take()) else {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            let t = Instant::now();
            let out = sp.net().forward(plane, h, w)?;
            sp.postprocess(&out, &params)?;
            latencies_ms.push(arrived.elapsed().as_secs_f64() * 1e3);
            rest_until = Some(Instant::now() + sp_dust3r_core::workers::priority::rest_after(t.elapsed(), rest_share));
        }
        let sent = camera.join().map_err(|_| anyhow::anyhow!("the camera thread panicked"))?;
        let pairs = match pairs {
            Some(p) => p.join().map_err(|_| anyhow::anyhow!("the DUSt3R thread panicked"))?,
            None => 0,
        };
        Ok(StreamReport { sent, answered: latencies_ms.len(), latencies_ms, pairs })
    })
}

fn priority(args: PriorityArgs) -> anyhow::Result<()> {
    use sp_dust3r_core::dust3r::{synthetic, Dust3r};
    use sp_dust3r_core::workers::priority::BackgroundPool;
    use std::sync::atomic::{AtomicBool, Ordering};
    let resolved = weights::resolve(&HUB_MODEL, args.weights.as_deref())?;
    let sp = SuperPoint::load(&resolved.dir)?;
    let input = preprocess(&synthetic_scene())?;
    let (h, w) = (input.height as usize, input.width as usize);
    let tmp = tempfile::tempdir()?;
    let dir = match &args.dust3r_weights {
        Some(d) => d.clone(),
        None => {
            synthetic::write_checkpoint(tmp.path(), synthetic::SMALL_CONFIG)?;
            tmp.path().to_path_buf()
        }
    };
    let model = Dust3r::load(&dir)?;
    let image: Vec<f32> = (0..3 * 512 * 512).map(|i| ((i % 613) as f32 / 613.0 - 0.5) * 2.0).collect();
    let pair = || -> anyhow::Result<()> {
        let e1 = model.encode(&image, 512, 512)?;
        let e2 = model.encode(&image, 512, 512)?;
        model.predict(&e1, &e2)?;
        Ok(())
    };
    let t = Instant::now();
    pair()?;
    println!("one DUSt3R pair alone: {:.2} s (small geometry unless --dust3r-weights)", t.elapsed().as_secs_f64());
    let back_to_back = |done: &AtomicBool| {
        let mut n = 0;
        while !done.load(Ordering::Relaxed) && pair().is_ok() {
            n += 1;
        }
        n
    };
    let pool = BackgroundPool::new("dust3r", 0, args.nice)?;
    let pooled = |done: &AtomicBool| pool.install(|| back_to_back(done));
    println!("camera at {} fps, {} s each, 640x480, newest frame wins:", args.rate, args.seconds);
    let stream = |pairs, share| camera_stream(&sp, &input.plane, (h, w), args.rate, args.seconds, pairs, share);
    println!("  SuperPoint alone: {}", stream(None, 0.0)?);
    println!("  pairs on SuperPoint's threads: {}", stream(Some(&back_to_back), 0.0)?);
    println!("  pairs on the background pool (nice +{}): {}", pool.nice(), stream(Some(&pooled), 0.0)?);
    println!(
        "  the same, SuperPoint resting for the pairs' {} share: {}",
        args.share,
        stream(Some(&pooled), args.share)?
    );
    Ok(())
}

/// The encoder MLP's first product: 1024 tokens x 1024 channels times the 1024 -> 4096 weight.
const PEAK_SHAPE: (usize, usize, usize) = (1024, 1024, 4096);

/// GEMM GFLOP/s on [`PEAK_SHAPE`]: ours (as a linear layer runs it, weight read transposed in
/// place, both threads), printed, then ONNX Runtime's MatMul with a constant weight in this
/// invocation, printed and returned (`None` without the peer).
fn gemm_peak(python: &Path, no_peer: bool) -> anyhow::Result<Option<f64>> {
    use sp_dust3r_core::tensor::{gemm, gemm_packed, MatRef, PackedRhs, Threads};
    let (m, k, n) = PEAK_SHAPE;
    let lhs: Vec<f32> = (0..m * k).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3).collect();
    let weight: Vec<f32> = (0..n * k).map(|i| ((i * 104729 % 997) as f32 - 498.0) * 1e-4).collect();
    let mut out = vec![0.0f32; m * n];
    let flop = 2.0 * (m * n * k) as f64;
    // GFLOP/s of the median of 30 products, after 3 to warm up.
    let rate = |product: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let mut times = Vec::new();
        for i in 0..33 {
            let t = Instant::now();
            product()?;
            if i >= 3 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        Ok(flop / median(&times) / 1e9)
    };
    let general = rate(&mut || {
        let weight_t = MatRef::transposed(&weight, k, n, k);
        Ok(gemm(&mut out, n, MatRef::rows(&lhs, m, k, k), weight_t, 1.0, false, Threads::All)?)
    })?;
    println!("sp_dust3r GEMM {m}x{k}x{n}, general: {general:.0} GFLOP/s, {} threads", rayon::current_num_threads());
    let ours = match PackedRhs::from_weight(&weight, n, k) {
        Some(packed) => {
            let packed = rate(&mut || Ok(gemm_packed(&mut out, n, &lhs, k, m, &packed, Threads::All)?))?;
            println!("sp_dust3r GEMM {m}x{k}x{n}, packed weight: {packed:.0} GFLOP/s");
            packed
        }
        None => general,
    };
    if let Some(packed) = sp_dust3r_core::tensor::PackedBf16::from_weight(&weight, n, k) {
        use sp_dust3r_core::tensor::gemm_bf16;
        let bf16 = rate(&mut || Ok(gemm_bf16(&mut out, n, &lhs, k, m, &packed, Threads::All)?))?;
        println!("sp_dust3r GEMM {m}x{k}x{n}, bf16 packed weight: {bf16:.0} GFLOP/s ({:.2}x fp32)", bf16 / ours);
    }
    if no_peer {
        return Ok(None);
    }
    let (m, k, n, threads) = (m.to_string(), k.to_string(), n.to_string(), rayon::current_num_threads().to_string());
    let report = run_peer(
        MATMUL_PEER,
        "matmul_ort.py",
        python,
        &[
            "--m".as_ref(),
            m.as_ref(),
            "--k".as_ref(),
            k.as_ref(),
            "--n".as_ref(),
            n.as_ref(),
            "--threads".as_ref(),
            threads.as_ref(),
        ],
    )
    .context(
        "the ONNX Runtime MatMul peer needs numpy, onnx and onnxruntime: run tools/setup-peers.sh or pass --python",
    )?;
    let peer = report["gflops"].as_f64().context("peer reported no gflops")?;
    println!(
        "onnxruntime {} MatMul {m}x{k}x{n} (constant weight): {peer:.0} GFLOP/s, {} threads (max |diff| vs numpy {:.1e}); ratio ours / onnxruntime {:.2}",
        report["onnxruntime"].as_str().unwrap_or("?"),
        report["threads"],
        report["max_abs_diff"].as_f64().unwrap_or(f64::NAN),
        ours / peer
    );
    Ok(Some(peer))
}

/// A 512x512 pair with known geometry: smooth depth, focals 400 / 450, a 6-degree rotation and
/// a sideways baseline; 0.3 % depth noise and 20 % of the cross-view points replaced by junk.
fn synthetic_pair(
) -> (sp_dust3r_core::dust3r::PairPrediction, sp_dust3r_core::dust3r::PairPrediction, sp_dust3r_core::geometry::TCam1Cam2)
{
    use nalgebra::{Rotation3, Vector3};
    use sp_dust3r_core::dust3r::{PairPrediction, Pointmap};
    use sp_dust3r_core::geometry::{Cam1, Cam2, Transform};
    let (w, h) = (512usize, 512usize);
    let t21: Transform<Cam2, Cam1> =
        Transform::new(Rotation3::new(Vector3::new(0.05, -0.08, 0.03)), Vector3::new(0.5, -0.05, 0.1));
    let mut rng = sp_dust3r_core::rng::SplitMix64::new(12345);
    let mut uniform = move || rng.next_f64();
    let own = |f: f64, phase: f64| -> Vec<Vector3<f64>> {
        (0..w * h)
            .map(|i| {
                let (u, v) = ((i % w) as f64, (i / w) as f64);
                let z =
                    3.0 + 0.4 * (5.0 * u / w as f64 + phase).sin() * (3.0 * v / h as f64).cos() + 0.3 * u / w as f64;
                Vector3::new((u - 256.0) / f * z, (v - 256.0) / f * z, z)
            })
            .collect()
    };
    let (p1, p2) = (own(400.0, 0.0), own(450.0, 1.0));
    let mut map = |pts: &[Vector3<f64>], outliers: f64| {
        let mut points = Vec::with_capacity(pts.len() * 3);
        for p in pts {
            let q = if uniform() < outliers {
                Vector3::new(4.0 * uniform() - 2.0, 4.0 * uniform() - 2.0, 1.0 + 5.0 * uniform())
            } else {
                p * (1.0 + 0.003 * (uniform() - 0.5) * 3.46)
            };
            points.extend([q.x as f32, q.y as f32, q.z as f32]);
        }
        Pointmap { height: h, width: w, points, confidence: vec![5.0; pts.len()] }
    };
    let p2_in_1: Vec<_> = p2.iter().map(|p| t21.inverse().apply(p)).collect();
    let p1_in_2: Vec<_> = p1.iter().map(|p| t21.apply(p)).collect();
    let forward = PairPrediction { view1: map(&p1, 0.0), view2_in_1: map(&p2_in_1, 0.2) };
    let swapped = PairPrediction { view1: map(&p2, 0.0), view2_in_1: map(&p1_in_2, 0.2) };
    (forward, swapped, t21.inverse())
}

fn pose(args: PoseArgs) -> anyhow::Result<()> {
    use sp_dust3r_core::geometry::{relative_pose, PoseMode, PoseOptions};
    let (forward, swapped, truth) = synthetic_pair();
    let mut pairviewer_ms = 0.0;
    for mode in [PoseMode::PairViewer, PoseMode::Server] {
        let opts = PoseOptions { mode, ..PoseOptions::default() };
        let mut last = None;
        let ms = median_ms(args.repeat, &mut || last = Some(relative_pose(&forward, &swapped, &opts)));
        let p = last.context("no runs")?.map_err(|e| anyhow::anyhow!("no pose: {e}"))?;
        if mode == PoseMode::PairViewer {
            pairviewer_ms = ms;
        }
        println!(
            "sp_dust3r pose ({}, 512x512): median {:.1} ms; rotation error {:.3} deg, translation direction {:.3} deg, focals {:.1} / {:.1} (true 400 / 450), {} inliers",
            mode.name(),
            ms,
            p.t_cam1_cam2.rotation_error_deg(&truth),
            p.t_cam1_cam2.translation_direction_error_deg(&truth),
            p.focal1,
            p.focal2,
            p.num_inliers
        );
    }
    if args.no_peer {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let npz_path = dir.path().join("pair.npz");
    let stack =
        |a: &[f32], b: &[f32], shape: &[usize]| ndarray::ArrayD::from_shape_vec(shape.to_vec(), [a, b].concat());
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(&npz_path)?);
    npz.add_array("pred1_pts3d", &stack(&forward.view1.points, &swapped.view1.points, &[2, 512, 512, 3])?)?;
    npz.add_array("pred1_conf", &stack(&forward.view1.confidence, &swapped.view1.confidence, &[2, 512, 512])?)?;
    npz.add_array(
        "pred2_pts3d_in_other_view",
        &stack(&forward.view2_in_1.points, &swapped.view2_in_1.points, &[2, 512, 512, 3])?,
    )?;
    npz.add_array(
        "pred2_conf",
        &stack(&forward.view2_in_1.confidence, &swapped.view2_in_1.confidence, &[2, 512, 512])?,
    )?;
    npz.finish()?;
    let peer_args = ["--pointmaps".as_ref(), npz_path.as_os_str()];
    let (report, peer) = opencv_peer((OPENCV_PEER, "pose_opencv.py"), &peer_args, args.python.as_deref(), args.repeat)?;
    println!(
        "opencv {} upstream recipe (numpy Weiszfeld + solvePnPRansac SQPNP): median {peer:.1} ms",
        report["opencv"].as_str().unwrap_or("?")
    );
    println!("ratio sp_dust3r (pairviewer) / numpy+opencv: {:.2}x", pairviewer_ms / peer);
    Ok(())
}

fn tracking(args: TrackingArgs) -> anyhow::Result<()> {
    use sp_dust3r_core::dust3r::{prepare, PrepMode};
    use sp_dust3r_core::geometry::{pnp::solve_pnp_ransac, Intrinsics};
    use sp_dust3r_core::sample::{camera_pose, render, true_pointmap, FOCAL, HEIGHT, WIDTH};
    use sp_dust3r_core::vo::matching::match_descriptors;
    use sp_dust3r_core::vo::tracking::{point_at, track, FrameCam, KeyframeCam, TrackTarget, TrackingParams};

    let resolved = weights::resolve(&HUB_MODEL, args.weights.as_deref())?;
    let model = SuperPoint::load(&resolved.dir)?;
    let n = 40;
    let frame = |i: usize| Frame::from_raw("mono8", WIDTH, HEIGHT, WIDTH as usize, false, render(i, n));
    let (kf_frame, frame3) = (frame(0)?, frame(3)?);
    let params = PostParams { max_keypoints: Some(1024), ..PostParams::default() };
    let (kf_kp, _) = model.detect(&kf_frame.to_luma(), &params)?;
    let (kp, _) = model.detect(&frame3.to_luma(), &params)?;
    let mapping = prepare(&kf_frame, PrepMode::Pad, 512)?.mapping;
    let pointmap = true_pointmap(&mapping, (512, 512), &camera_pose(0, n), &camera_pose(0, n), 1.0);
    let k = Intrinsics { fx: FOCAL, fy: FOCAL, cx: WIDTH as f64 / 2.0 - 0.5, cy: HEIGHT as f64 / 2.0 - 0.5 };
    let p = TrackingParams::default();
    let target = TrackTarget { keypoints: &kf_kp, pointmap: &pointmap, mapping: &mapping };
    let time = |f: &mut dyn FnMut()| median_ms(args.repeat, f);
    let mut last = None;
    let camera = sp_dust3r_core::geometry::lens::Camera { k, lens: sp_dust3r_core::geometry::lens::Lens::Pinhole };
    let total = time(&mut || last = Some(track(&kp, &target, &camera, &p)));
    let tracked = last.context("no runs")?.map_err(|e| anyhow::anyhow!("not tracked: {e}"))?;
    let matches = match_descriptors(&kp, &kf_kp, &p.matching);
    let matching = time(&mut || {
        std::hint::black_box(match_descriptors(&kp, &kf_kp, &p.matching));
    });
    // For scale: the similarity GEMM alone, over the whole matrix on the pool (matching computes
    // it in row blocks, each scanned while in cache).
    let (nq, nt, d) = (kp.len(), kf_kp.len(), kp.descriptor_dim);
    let mut sim = vec![0.0f32; nq * nt];
    let gemm = time(&mut || {
        let a = sp_dust3r_core::tensor::MatRef::rows(&kp.descriptors, nq, d, d);
        let b = sp_dust3r_core::tensor::MatRef::transposed(&kf_kp.descriptors, d, nt, d);
        std::hint::black_box(
            sp_dust3r_core::tensor::gemm(&mut sim, nt, a, b, 1.0, false, sp_dust3r_core::tensor::Threads::All).ok(),
        );
    });
    let mut world = Vec::new();
    let mut pixels = Vec::new();
    let lift = time(&mut || {
        world.clear();
        pixels.clear();
        for m in &matches {
            let [x, y] = kf_kp.xy[m.train];
            if let Some(q) = point_at(&pointmap, &mapping, x as f64, y as f64, p.min_confidence) {
                world.push(q);
                pixels.push(nalgebra::Vector2::new(kp.xy[m.query][0] as f64, kp.xy[m.query][1] as f64));
            }
        }
    });
    let pnp = time(&mut || {
        std::hint::black_box(solve_pnp_ransac::<FrameCam, KeyframeCam>(&world, &pixels, &k, &p.ransac).ok());
    });
    let carried = carried_ms(&args, [&kf_kp, &kp], &pointmap, &mapping, &camera)?;
    let truth = camera_pose(0, n).inverse().compose(&camera_pose(3, n));
    let t = &tracked.t_kf_frame;
    println!(
        "sp_dust3r tracking ({} and {} keypoints, {} matches, {} with a point, {} inliers): median {total:.2} ms over {} runs (matching {matching:.2}, lifting {lift:.3}, PnP-RANSAC {pnp:.2}; the similarity GEMM alone {gemm:.2}); {} threads",
        kp.len(),
        kf_kp.len(),
        tracked.matches,
        tracked.points,
        tracked.inliers,
        args.repeat,
        rayon::current_num_threads(),
    );
    println!(
        "the frame side's tracker (the last frame's points, then the keyframe's; two matchings): median {carried:.2} ms"
    );
    println!(
        "pose error vs the renderer: {:.4} deg, {:.2} mm",
        (t.rotation.inverse() * truth.rotation).angle().to_degrees(),
        (t.translation - truth.translation).norm() * 1e3
    );
    if args.no_peer {
        return Ok(());
    }
    tracking_peer(&args, [&kp, &kf_kp], (&pointmap, &mapping), &k, &p, total)
}

/// The same tracking in numpy and OpenCV (`tracking_opencv.py`), and the ratio to ours (`ours_ms`).
fn tracking_peer(
    args: &TrackingArgs,
    [kp, kf_kp]: [&sp_dust3r_core::superpoint::Keypoints; 2],
    (pointmap, mapping): (&Pointmap, &sp_dust3r_core::dust3r::InputMapping),
    k: &sp_dust3r_core::geometry::Intrinsics,
    p: &sp_dust3r_core::vo::tracking::TrackingParams,
    ours_ms: f64,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let npz_path = dir.path().join("tracking.npz");
    write_tracking_inputs(&npz_path, [kp, kf_kp], pointmap, mapping, k, p)?;
    let peer_args = ["--inputs".as_ref(), npz_path.as_os_str()];
    let (report, peer) =
        opencv_peer((TRACKING_PEER, "tracking_opencv.py"), &peer_args, args.python.as_deref(), args.repeat)?;
    println!(
        "opencv {} (BFMatcher + numpy lookup + solvePnPRansac SQPNP, {} threads): median {peer:.2} ms, {} matches, {} inliers",
        report["opencv"].as_str().unwrap_or("?"),
        report["threads"],
        report["matches"],
        report["inliers"]
    );
    println!("ratio sp_dust3r / numpy+opencv: {:.2}x", ours_ms / peer);
    Ok(())
}

/// The frame side's per-frame cost (`CarriedTracker`: a frame matched to the last tracked frame
/// and to the keyframe `kf_kp`), each run after a tracked frame: median ms.
fn carried_ms(
    args: &TrackingArgs,
    [kf_kp, kp]: [&sp_dust3r_core::superpoint::Keypoints; 2],
    pointmap: &sp_dust3r_core::dust3r::Pointmap,
    mapping: &sp_dust3r_core::dust3r::InputMapping,
    camera: &sp_dust3r_core::geometry::lens::Camera,
) -> anyhow::Result<f64> {
    use sp_dust3r_core::vo::{carried::CarriedTracker, odometry::ChainKeyframe, tracking::TrackingParams};
    let kf = ChainKeyframe {
        stamp: 0,
        payload: (),
        keypoints: kf_kp.clone(),
        pointmap: pointmap.clone(),
        rgb: Vec::new(),
        mapping: *mapping,
        focal: camera.k.fx,
        t_origin_kf: sp_dust3r_core::geometry::Transform::identity(),
        t_odom_kf: sp_dust3r_core::geometry::Transform::identity(),
        tracking_inflation: 1.0,
    };
    let (frame, params) = (std::sync::Arc::new(kp.clone()), TrackingParams::default());
    let mut tracker = CarriedTracker::default();
    tracker.track(1, Some(&kf), &frame, Some(*camera), &params).map_err(|e| anyhow::anyhow!("not tracked: {e}"))?;
    Ok(median_ms(args.repeat, &mut || {
        std::hint::black_box(tracker.track(1, Some(&kf), &frame, Some(*camera), &params).ok());
    }))
}

/// The median time of `repeat` runs of `f` (one at least), ms.
fn median_ms(repeat: usize, f: &mut dyn FnMut()) -> f64 {
    let times: Vec<f64> = (0..repeat.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(&times)
}

/// What the OpenCV tracking peer reads: both keypoint sets, the keyframe's pointmap and its
/// mapping, K and the tracking settings.
fn write_tracking_inputs(
    npz_path: &std::path::Path,
    [kp, kf_kp]: [&sp_dust3r_core::superpoint::Keypoints; 2],
    pointmap: &sp_dust3r_core::dust3r::Pointmap,
    mapping: &sp_dust3r_core::dust3r::InputMapping,
    k: &sp_dust3r_core::geometry::Intrinsics,
    p: &sp_dust3r_core::vo::tracking::TrackingParams,
) -> anyhow::Result<()> {
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(npz_path)?);
    let rows = |v: &[f32], d: usize| ndarray::Array2::from_shape_vec((v.len() / d, d), v.to_vec());
    let xy = |k: &sp_dust3r_core::superpoint::Keypoints| k.xy.iter().flatten().copied().collect::<Vec<f32>>();
    npz.add_array("frame_xy", &rows(&xy(kp), 2)?)?;
    npz.add_array("frame_desc", &rows(&kp.descriptors, kp.descriptor_dim)?)?;
    npz.add_array("keyframe_xy", &rows(&xy(kf_kp), 2)?)?;
    npz.add_array("keyframe_desc", &rows(&kf_kp.descriptors, kf_kp.descriptor_dim)?)?;
    npz.add_array("points", &ndarray::Array3::from_shape_vec((512, 512, 3), pointmap.points.clone())?)?;
    npz.add_array("conf", &ndarray::Array2::from_shape_vec((512, 512), pointmap.confidence.clone())?)?;
    let m = [mapping.scale_x, mapping.scale_y, mapping.offset_x, mapping.offset_y];
    npz.add_array("mapping", &ndarray::arr1(&m))?;
    npz.add_array("K", &ndarray::arr2(&[[k.fx, 0.0, k.cx], [0.0, k.fy, k.cy], [0.0, 0.0, 1.0]]))?;
    for (name, v) in [
        ("ratio", p.matching.max_distance_ratio as f64),
        ("min_similarity", p.matching.min_similarity as f64),
        ("min_confidence", p.min_confidence as f64),
        ("threshold_px", p.ransac.threshold_px),
        ("iterations", p.ransac.max_iterations as f64),
    ] {
        npz.add_array(name, &ndarray::arr0(v))?;
    }
    npz.finish()?;
    Ok(())
}

/// An OpenCV peer (`source`, saved as `file_name`) run with `args` and `--repeat`: its report
/// and the median milliseconds it measured.
fn opencv_peer(
    (source, file_name): (&str, &str),
    args: &[&std::ffi::OsStr],
    python: Option<&Path>,
    repeat: usize,
) -> anyhow::Result<(serde_json::Value, f64)> {
    let repeat = repeat.max(1).to_string();
    let args: Vec<&std::ffi::OsStr> = args.iter().copied().chain(["--repeat".as_ref(), repeat.as_ref()]).collect();
    let report = run_peer(source, file_name, &find_python(python), &args)
        .context("the OpenCV peer needs numpy and opencv-python-headless: run tools/setup-peers.sh or pass --python")?;
    let median = report["median_ms"].as_f64().context("peer reported no median_ms")?;
    Ok((report, median))
}

/// Runs a peer script (embedded source) with Python and returns its last stdout line as JSON;
/// `Err` carries the peer's stderr.
fn run_peer(
    source: &str,
    file_name: &str,
    python: &Path,
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<serde_json::Value> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join(file_name);
    std::fs::write(&script, source)?;
    let output = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .with_context(|| format!("running {file_name} with {}", python.display()))?;
    if !output.status.success() {
        bail!("{file_name} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("unexpected output of {file_name}: {stdout}"))
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
fn synthetic_scene() -> sp_dust3r_core::image::LumaImage {
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
    sp_dust3r_core::image::LumaImage { width: w, height: h, data }
}

/// Peak resident set size of this process (VmHWM), in MB.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}
