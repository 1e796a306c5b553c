//! `vo`: frame-rate tracking on a TUM RGB-D sequence, judged alone: DUSt3R replaced by the
//! sequence's own depth and motion capture (each pair at an arbitrary scale of its own, so only
//! the chain and tracking are measured), the frames replayed through the pipeline as a bag with
//! the trained SuperPoint, the odometry scored against the motion capture; beside it, in the same
//! run, a classic frame-to-frame RGB-D odometry (OpenCV ORB + solvePnPRansac) on the same frames.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use sp_dust3r_core::bag::replay::{replay, replay_topics, Models};
use sp_dust3r_core::bag::{BagWriter, McapFile};
use sp_dust3r_core::diagnostics::Counter;
use sp_dust3r_core::eval::bag::odometry_estimates;
use sp_dust3r_core::eval::hat::{paired_motions, shared_error_of, span_agreement, MotionErrors, PairedMotion};
use sp_dust3r_core::eval::trajectory::{evaluate_trajectory, RpeDelta, TrajectoryReport};
use sp_dust3r_core::eval::tum::{
    camera_from_json, orb_peer_poses, published_camera, write_bag, DepthOracle, TumSequence,
};
use sp_dust3r_core::eval::StampedPose;
use sp_dust3r_core::geometry::lens::Camera;
use sp_dust3r_core::params::args::{split_ros_args, RosArgs};
use sp_dust3r_core::params::NodeParams;
use sp_dust3r_core::quantile::median;
use sp_dust3r_core::superpoint::{SuperPoint, HUB_MODEL};

const ORB_PEER: &str = include_str!("../../../tools/peers/vo_orb_opencv.py");

#[derive(clap::Args)]
pub struct VoArgs {
    /// A TUM RGB-D sequence's folder (associations.txt, groundtruth.txt, rgb/, depth/).
    #[arg(long)]
    tum: PathBuf,
    /// Its colour camera as TUM published it (fr1, fr2, fr3); default: the folder's
    /// intrinsics.json, else fr1.
    #[arg(long)]
    camera: Option<String>,
    /// The first frame (of associations.txt's).
    #[arg(long, default_value_t = 0)]
    first: usize,
    /// How many frames.
    #[arg(long, default_value_t = usize::MAX)]
    frames: usize,
    /// Every n-th frame only (both odometries): the spacing a live node that cannot keep up with
    /// the camera sees.
    #[arg(long, default_value_t = 1)]
    every: usize,
    /// Of those, only the frames whose colour stamps (seconds, whitespace-separated) this file
    /// lists: the frames a live node took (the live fr1/rpy test prints them), for both odometries.
    #[arg(long)]
    stamps: Option<PathBuf>,
    /// Frames each DUSt3R pair takes to join (one at a time, the newest waiting wins): the
    /// latency a live node's pairs have; 0, right after their keyframe.
    #[arg(long, default_value_t = 0)]
    pair_lag: usize,
    /// SuperPoint's folder (resolved as for `superpoint`): trained weights.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Seed of the pairs' arbitrary scales.
    #[arg(long, default_value_t = 0x5eed)]
    scale_seed: u64,
    /// Python with numpy and opencv-python-headless (default as for the other benchmarks).
    #[arg(long)]
    pub python: Option<PathBuf>,
    #[arg(long)]
    no_peer: bool,
    /// The baseline's features: ORB (the classic odometry), or this pipeline's SuperPoint
    /// keypoints and descriptors in the baseline's own code (cross-checked L2 matches, the
    /// previous frame's depth image, solvePnPRansac): what the features alone change.
    #[arg(long, value_enum, default_value_t = PeerFeatures::Orb)]
    peer_features: PeerFeatures,
    /// Write both odometries here in TUM's format (`sp_dust3r.txt`, `orb.txt` or
    /// `peer_superpoint.txt`), for evo.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Instead: where a tracked frame's error comes from (each frame against the frame d before
    /// it, one thing changed per row).
    #[arg(long)]
    study: bool,
    /// Node parameters, as after `--ros-args`: `-p name:=value` ... With `-p
    /// scale_source:=depth` the sequence's depth images go in as the registered depth topic.
    #[arg(last = true)]
    ros_args: Vec<String>,
}

/// Which features the baseline peer tracks.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerFeatures {
    /// OpenCV's ORB (1000 a frame), Hamming distance.
    Orb,
    /// This pipeline's SuperPoint, L2 distance.
    Superpoint,
}

/// The baseline peer as run: ORB, or SuperPoint's features written to a folder.
#[derive(Clone, Copy)]
enum Peer<'a> {
    Orb,
    Superpoint(&'a Path),
}

impl Peer<'_> {
    /// Its name, its saved trajectory's file, and what its time per frame covers.
    fn labels(self) -> [&'static str; 3] {
        match self {
            Self::Orb => ["ORB + solvePnPRansac", "orb.txt", "ORB, matching and PnP"],
            Self::Superpoint(_) => {
                ["SuperPoint + the baseline's solvePnPRansac", "peer_superpoint.txt", "matching and PnP"]
            }
        }
    }

    /// Its name in the printed ratios.
    fn short(self) -> &'static str {
        match self {
            Self::Orb => "ORB",
            Self::Superpoint(_) => "SP baseline",
        }
    }
}

fn camera_of(args: &VoArgs) -> anyhow::Result<Camera> {
    let json = args.tum.join("intrinsics.json");
    match &args.camera {
        Some(name) => {
            published_camera(name).with_context(|| format!("no published TUM camera {name:?} (fr1, fr2, fr3)"))
        }
        None if json.exists() => Ok(camera_from_json(&json)?),
        None => published_camera("fr1").context("TUM's fr1 camera"),
    }
}

/// Poses as a TUM trajectory file (`t tx ty tz qx qy qz qw`).
fn write_tum(path: &Path, poses: &[StampedPose]) -> anyhow::Result<()> {
    let text = sp_dust3r_core::eval::format_tum(poses);
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Seconds, whitespace-separated.
fn read_stamps(path: &Path) -> anyhow::Result<Vec<f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let stamps = text.split_whitespace().map(str::parse).collect::<Result<Vec<f64>, _>>();
    stamps.with_context(|| format!("{}: stamps in seconds expected", path.display()))
}

/// What one odometry gave on the sequence.
struct Scored {
    /// Its continuous trajectory (ours: in odom).
    report: TrajectoryReport,
    /// Ours: the same frames on the map (`map -> odom` from TF applied).
    map: Option<TrajectoryReport>,
    /// Ours: the same frames on the map after the fact (`eval::refined`).
    refined: Option<TrajectoryReport>,
    /// Frames tracked.
    tracked: u64,
    /// Frames that could have been tracked (after the first pair for ours, after the first frame
    /// for the baseline).
    trackable: u64,
    /// Why frames were not tracked, by kind.
    lost: Vec<(String, u64)>,
    /// Ours: frames that only the second try at matching placed, those placed only described
    /// again turned, those placed only on points drawn from the keyframes' pointmaps, and those
    /// whose keypoints a depth image measured.
    recovered: Option<[u64; 4]>,
    /// The poses `report` scored.
    poses: Vec<StampedPose>,
    /// Ours: the stamps of the chain's keyframes.
    keyframes: Vec<f64>,
}

pub fn vo(args: VoArgs, python: &Path) -> anyhow::Result<()> {
    let seq = TumSequence {
        dir: args.tum.clone(),
        camera: camera_of(&args)?,
        first: args.first,
        len: args.frames,
        step: args.every,
        stamps: args.stamps.as_deref().map(read_stamps).transpose()?,
    };
    let gt = seq.ground_truth()?;
    let frames = seq.frames()?.len();
    if let Some(dir) = &args.save {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    println!("vo: {} ({frames} frames), lens {:?}", args.tum.display(), seq.camera.lens);
    if args.study {
        let params = node_params(&args)?;
        let chained = crate::vo_study::study(&seq, &features(&args)?, &params.post_params())?;
        return study_against_orb(chained, &seq, &gt, python, frames, args.no_peer);
    }
    let replay_dir = tempfile::tempdir()?;
    let ours = run_ours(&args, &seq, &gt, replay_dir.path())?;
    print_scored("sp_dust3r (true pointmaps)", &ours);
    if args.no_peer {
        return Ok(());
    }
    let features_dir = tempfile::tempdir()?;
    let peer = match args.peer_features {
        PeerFeatures::Orb => Peer::Orb,
        PeerFeatures::Superpoint => {
            Peer::Superpoint(write_features(&seq, &replay_dir.path().join(OUT_BAG), features_dir.path())?)
        }
    };
    let orb = run_baseline(&seq, &gt, python, frames, args.save.as_deref(), peer)?;
    let ratio = |a: f64, b: f64| a / b;
    let ate_of = |r: Option<&TrajectoryReport>| r.unwrap_or(&ours.report).ate.rmse;
    println!(
        "ours / {}: RPE median translation {:.2}, rotation {:.2} (odom); ATE {:.2} (map), {:.2} (map after the fact)",
        peer.short(),
        ratio(ours.report.rpe_translation.median, orb.report.rpe_translation.median),
        ratio(ours.report.rpe_rotation_deg.median, orb.report.rpe_rotation_deg.median),
        ratio(ate_of(ours.map.as_ref()), orb.report.ate.rmse),
        ratio(ate_of(ours.refined.as_ref()), orb.report.ate.rmse)
    );
    print_shared(&ours, &orb, &gt, peer.short());
    Ok(())
}

/// The study's frame-to-frame odometry on each frame's own depth scored as `vo` scores, and
/// split against the ORB baseline's (both frame to frame on fresh depth: what differs is the
/// features and the solver).
fn study_against_orb(
    poses: Vec<StampedPose>,
    seq: &TumSequence,
    gt: &[StampedPose],
    python: &Path,
    frames: usize,
    no_peer: bool,
) -> anyhow::Result<()> {
    let report = evaluate_trajectory(&poses, frames, gt, 0.02, RpeDelta::Frames(1))?;
    let tracked = report.num_tracked as u64;
    let trackable = frames as u64 - 1;
    let ours = Scored {
        report,
        map: None,
        refined: None,
        tracked,
        trackable,
        lost: Vec::new(),
        recovered: None,
        poses,
        keyframes: Vec::new(),
    };
    print_scored("SuperPoint frame to frame on each frame's own depth (study)", &ours);
    if !no_peer {
        let orb = run_baseline(seq, gt, python, frames, None, Peer::Orb)?;
        print_shared(&ours, &orb, gt, Peer::Orb.short());
    }
    Ok(())
}

/// The node's parameters with the command line's `-p name:=value`.
fn node_params(args: &VoArgs) -> anyhow::Result<NodeParams> {
    let (_, ros) = if args.ros_args.is_empty() {
        (Vec::new(), RosArgs::default())
    } else {
        split_ros_args(std::iter::once("--ros-args".to_string()).chain(args.ros_args.iter().cloned()))?
    };
    let (params, warnings) = NodeParams::resolve(&ros, "/sp_dust3r")?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    Ok(params)
}

/// The SuperPoint keypoints and descriptors the replay published for `seq`'s frames (`out_bag`'s
/// sp_dust3r/msg/Keypoints), one npz per frame in `dir` named for its colour image (the layout
/// `sp_dust3r superpoint` writes), for the peer.
fn write_features<'a>(seq: &TumSequence, out_bag: &Path, dir: &'a Path) -> anyhow::Result<&'a Path> {
    use sp_dust3r_core::msg::{from_cdr, node_msgs, RosMessage};
    let frames = seq.frames()?;
    let mut written = 0;
    for file in sp_dust3r_core::bag::open_bag(out_bag)? {
        for m in file.messages() {
            let m = m?;
            if m.ros_type != node_msgs::Keypoints::ROS_TYPE {
                continue;
            }
            let kp: node_msgs::Keypoints = from_cdr(&m.data)?;
            let t = kp.header.stamp.seconds();
            let frame = frames
                .iter()
                .find(|f| (f.t - t).abs() < 1e-6)
                .with_context(|| format!("keypoints at {t}: no such frame"))?;
            let xy: Vec<f32> = kp.x.iter().zip(&kp.y).flat_map(|(&x, &y)| [x, y]).collect();
            let xy = ndarray::Array2::from_shape_vec((kp.x.len(), 2), xy)?;
            let desc = ndarray::Array2::from_shape_vec((kp.x.len(), kp.descriptor_dim as usize), kp.descriptors)?;
            let stem = frame.rgb.file_stem().with_context(|| format!("{}: no file name", frame.rgb.display()))?;
            let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(
                dir.join(format!("{}.npz", stem.to_string_lossy())),
            )?);
            npz.add_array("keypoints", &xy)?;
            npz.add_array("descriptors", &desc)?;
            npz.finish()?;
            written += 1;
        }
    }
    if written != frames.len() {
        bail!("the replay published keypoints for {written} of {} frames", frames.len());
    }
    Ok(dir)
}

/// SuperPoint on the CPU with the trained weights.
fn features(args: &VoArgs) -> anyhow::Result<sp_dust3r_core::backend::cpu::CpuFeatures> {
    let resolved = sp_dust3r_core::weights::resolve(&HUB_MODEL, args.weights.as_deref())?;
    Ok(sp_dust3r_core::backend::cpu::CpuFeatures(SuperPoint::load(&resolved.dir)?))
}

/// The replay's output bag in the folder `run_ours` is given.
const OUT_BAG: &str = "out.mcap";

/// Replays `seq` with the true-pointmap double in `dir` (its output bag: [`OUT_BAG`]) and scores
/// the odometry.
fn run_ours(args: &VoArgs, seq: &TumSequence, gt: &[StampedPose], dir: &Path) -> anyhow::Result<Scored> {
    let (bag, out_path) = (dir.join("in.mcap"), dir.join(OUT_BAG));
    let mut params = node_params(args)?;
    let metric_depth = params.scale_source == sp_dust3r_core::vo::scale::ScaleSource::Depth;
    write_bag(seq, &bag, metric_depth.then_some(sp_dust3r_core::eval::tum::DepthEncoding::Metres))?;
    // TF carries map -> odom, which places the frames on the map.
    params.publish_tf = true;
    let features = features(args)?;
    let mut oracle = DepthOracle::new(seq)?;
    oracle.scales = DepthOracle::arbitrary_scales(1000, args.scale_seed);
    let input = vec![McapFile::open(&bag)?];
    let topics: Vec<(String, String)> = input[0].topics()?.into_iter().collect();
    let cameras = replay_topics(&topics, (None, None, None), &params)?;
    let mut writer = BagWriter::create(&out_path)?;
    let models = Models { features: &features, pairs: Some(&oracle), pair_lag: args.pair_lag };
    let cancel = sp_dust3r_core::cancel::Cancel::new();
    let (summary, stopped) = replay(&input, &cameras, &mut writer, models, &params, &cancel, |_| {})?;
    writer.finish()?;
    if let Some(e) = stopped {
        bail!("the replay stopped: {e}");
    }
    let found = odometry_estimates(&out_path)?;
    if let Some(dir) = &args.save {
        write_tum(&dir.join("sp_dust3r.txt"), &found.odom)?;
        write_tum(&dir.join("sp_dust3r_map.txt"), &found.map)?;
        write_tum(&dir.join("sp_dust3r_map_refined.txt"), &found.refined)?;
        write_tum(&dir.join("sp_dust3r_keyframes.txt"), &found.keyframes)?;
    }
    let score = |poses: &[StampedPose], frames| evaluate_trajectory(poses, frames, gt, 0.02, RpeDelta::Frames(1));
    let (report, map) = (score(&found.odom, found.frames)?, score(&found.map, found.frames)?);
    let refined = score(&found.refined, found.frames)?;
    let keyframes = &found.keyframes;
    let chain = score(keyframes, keyframes.len())?;
    println!(
        "  the chain's {} keyframes alone: ATE (Sim(3)) {:.1} mm = {:.2} % of their {:.3} m path",
        keyframes.len(),
        chain.ate.rmse * 1e3,
        chain.ate_percent_of_path,
        chain.path_length
    );
    let gaps: Vec<f64> = summary.keyframe_gaps.iter().map(|g| g.0).collect();
    println!("  pairs {}, keyframe_gap median {:.2} deg over {} keyframes", summary.poses(), median(&gaps), gaps.len());
    let counters = summary.counters();
    let why: Vec<String> =
        counters.iter().filter_map(|(k, v)| Some(format!("{} {v}", k.strip_prefix("keyframes_for_")?))).collect();
    println!("  keyframes: {}", why.join(", "));
    let lost = counters.into_iter().filter(|(k, v)| k.starts_with("errors_tracking_") && *v > 0).collect();
    let trackable = summary.get(Counter::FramesIn) - summary.get(Counter::FramesBeforeMap);
    let tracked = summary.get(Counter::FramesTracked);
    let keyframes = found.keyframes.iter().map(|k| k.t).collect();
    Ok(Scored {
        report,
        map: Some(map),
        refined: Some(refined),
        tracked,
        trackable,
        lost,
        recovered: Some(
            [Counter::FramesSecondTry, Counter::FramesTurned, Counter::FramesDrawn, Counter::FramesMeasured]
                .map(|c| summary.get(c)),
        ),
        poses: found.odom,
        keyframes,
    })
}

/// The baseline (the peer script, on ORB's features or `peer`'s) on `seq`'s frames, scored
/// against `gt` and printed.
fn run_baseline(
    seq: &TumSequence,
    gt: &[StampedPose],
    python: &Path,
    frames: usize,
    save: Option<&Path>,
    peer: Peer<'_>,
) -> anyhow::Result<Scored> {
    let scratch = tempfile::tempdir()?;
    let mut a = seq.orb_peer_args(scratch.path())?;
    if let Peer::Superpoint(dir) = peer {
        a.extend(["--features".into(), dir.display().to_string()]);
    }
    let [name, file, timed] = peer.labels();
    let os: Vec<&std::ffi::OsStr> = a.iter().map(std::ffi::OsStr::new).collect();
    let out = crate::run_peer(ORB_PEER, "vo_orb_opencv.py", python, &os)?;
    let poses = orb_peer_poses(&out)?;
    if let Some(dir) = save {
        write_tum(&dir.join(file), &poses)?;
    }
    let lost = out["lost"].as_array().map_or(0, Vec::len) as u64;
    println!("  peer: {timed} {:.1} ms per frame (median)", out["ms_per_frame"].as_f64().unwrap_or(f64::NAN));
    let report = evaluate_trajectory(&poses, frames, gt, 0.02, RpeDelta::Frames(1))?;
    let tracked = report.num_tracked.saturating_sub(1) as u64;
    let scored = Scored {
        report,
        map: None,
        refined: None,
        tracked,
        trackable: frames.saturating_sub(1) as u64,
        lost: vec![("lost".into(), lost)],
        recovered: None,
        poses,
        keyframes: Vec::new(),
    };
    print_scored(&format!("{name}, frame to frame"), &scored);
    Ok(scored)
}

/// How much of the two odometries' per-frame error they share (the motion capture's, and what
/// both see alike) and how much is each one's own (see `eval::hat`); with our keyframes known,
/// the same motions by the keyframe's age too.
fn print_shared(ours: &Scored, orb: &Scored, gt: &[StampedPose], peer: &str) {
    let motions = paired_motions((&ours.poses, ours.report.scale), (&orb.poses, orb.report.scale), gt, 0.02);
    let s = shared_error_of(&motions);
    let (r, t) = (s.rotation_deg, s.translation);
    println!(
        "per-frame error (rms over {} motions both tracked): rotation shared {:.3} deg, ours {:.3}, {peer} {:.3}; \
         translation shared {:.2} mm, ours {:.2}, {peer} {:.2}; rotation errors' correlation {:.2}",
        s.motions,
        r.shared,
        r.own_a,
        r.own_b,
        t.shared * 1e3,
        t.own_a * 1e3,
        t.own_b * 1e3,
        s.rotation_correlation
    );
    let (rr, tr) = (s.rotation_ratio, s.translation_ratio);
    println!(
        "ours / {peer} over those motions: RPE median rotation {:.2} (95 % interval {:.2}-{:.2}), translation {:.2} \
         ({:.2}-{:.2}); paired bootstrap",
        rr.ratio, rr.low, rr.high, tr.ratio, tr.low, tr.high
    );
    let spans: Vec<String> = [1, 5, 15, 30]
        .into_iter()
        .map(|n| span_agreement(&ours.poses, &orb.poses, gt, n, 0.02))
        .map(|a| format!("{}: {:.2} / {:.2} / {:.2}", a.span, a.a_gt, a.b_gt, a.a_b))
        .collect();
    println!(
        "the camera's turn over n frames, median disagreement in degrees (ours-mocap / {peer}-mocap / ours-{peer}): {}",
        spans.join("; ")
    );
    if !ours.keyframes.is_empty() {
        print_by_keyframe_age(ours, &motions, peer);
    }
}

/// Our error against the peer's on the same motions, by how many of our frames came since our
/// newest keyframe when the motion ended (0: it ends on the keyframe): where the carried
/// points' drift between keyframes shows.
fn print_by_keyframe_age(ours: &Scored, motions: &[PairedMotion], name: &str) {
    let age = |t: f64| {
        let keyframe = ours.keyframes.iter().copied().filter(|&k| k <= t + 1e-6).reduce(f64::max)?;
        Some(ours.poses.iter().filter(|p| p.t > keyframe + 1e-6 && p.t <= t + 1e-6).count())
    };
    let aged: Vec<(usize, &PairedMotion)> = motions.iter().filter_map(|m| Some((age(m.t)?, m))).collect();
    let buckets: Vec<String> = [("0", 0, 0), ("1-2", 1, 2), ("3-5", 3, 5), ("6-9", 6, 9), ("10+", 10, usize::MAX)]
        .into_iter()
        .map(|(label, lo, hi)| {
            let part: Vec<&PairedMotion> = aged.iter().filter(|(a, _)| (lo..=hi).contains(a)).map(|p| p.1).collect();
            let ratio = |f: &dyn Fn(&MotionErrors) -> f64| {
                median(&part.iter().map(|m| f(&m.a)).collect::<Vec<_>>())
                    / median(&part.iter().map(|m| f(&m.b)).collect::<Vec<_>>())
            };
            format!("{label}: {:.2} / {:.2} (n {})", ratio(&|e| e.1.norm()), ratio(&|e| e.0.norm()), part.len())
        })
        .collect();
    println!(
        "ours / {name} by frames since our newest keyframe, RPE median translation / rotation: {}",
        buckets.join("; ")
    );
}

fn print_scored(name: &str, s: &Scored) {
    println!("{name}:");
    println!("  tracked {} of {} trackable frames; not tracked: {:?}", s.tracked, s.trackable, s.lost);
    if let Some([second_try, turned, drawn, measured]) = s.recovered {
        println!(
            "  placed by the second try at matching: {second_try}; described again turned: {turned}; on points drawn from the pointmaps: {drawn}; keypoints measured by depth: {measured}"
        );
    }
    let frames = [
        (if s.map.is_some() { "odom" } else { "" }, Some(&s.report)),
        ("map", s.map.as_ref()),
        ("map after the fact", s.refined.as_ref()),
    ];
    for (frame, r) in frames.into_iter().filter_map(|(f, r)| Some((f, r?))) {
        let on = if frame.is_empty() { String::new() } else { format!(" {frame}:") };
        println!(
            "  {on} RPE per frame: translation median {:.2} mm (max {:.1}), rotation median {:.3} deg (max {:.2}); \
             ATE (Sim(3)) {:.1} mm = {:.2} % of the {:.3} m path",
            r.rpe_translation.median * 1e3,
            r.rpe_translation.max * 1e3,
            r.rpe_rotation_deg.median,
            r.rpe_rotation_deg.max,
            r.ate.rmse * 1e3,
            r.ate_percent_of_path,
            r.path_length
        );
    }
}
