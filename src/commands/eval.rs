//! `sp_dust3r eval`: the pair poses of a replay's output bag against ground truth.

use std::path::PathBuf;

use anyhow::{bail, Context};

use sp_dust3r::bag::{mcap_files, McapFile};
use sp_dust3r::eval::{evaluate, parse_tum, PairEstimate, StampedPose};
use sp_dust3r::geometry::{TCam1Cam2, Transform};
use sp_dust3r::ros::msg::{from_cdr, geometry_msgs, sp_dust3r_msgs, tf2_msgs};

#[derive(clap::Args)]
pub struct Args {
    /// The replay's output bag (or any bag with sp_dust3r_msgs/PairPose and the clouds).
    #[arg(long)]
    bag: PathBuf,
    /// Ground truth of the camera's optical frame in a fixed frame: a TUM trajectory file
    /// (`t tx ty tz qx qy qz qw`), or a bag with a geometry_msgs/PoseStamped topic
    /// (`--gt-topic`) or TF (`--gt-topic /tf --gt-frames WORLD CAMERA`).
    #[arg(long)]
    ground_truth: PathBuf,
    #[arg(long)]
    gt_topic: Option<String>,
    #[arg(long, num_args = 2, value_names = ["PARENT", "CHILD"])]
    gt_frames: Option<Vec<String>>,
    /// Seconds a pair's time may lie beyond the ends of the ground truth.
    #[arg(long, default_value_t = 0.05)]
    tolerance: f64,
    /// Write the metrics here as JSON (they are printed either way).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the picture here (PNG; default: beside --out with .png, else nothing).
    #[arg(long)]
    plot: Option<PathBuf>,
}

fn pose_of(p: &geometry_msgs::Pose) -> (nalgebra::Rotation3<f64>, nalgebra::Vector3<f64>) {
    let q = nalgebra::UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(p.orientation.w, p.orientation.x, p.orientation.y, p.orientation.z));
    (q.to_rotation_matrix(), nalgebra::Vector3::new(p.position.x, p.position.y, p.position.z))
}

fn files(path: &std::path::Path) -> anyhow::Result<Vec<McapFile>> {
    Ok(mcap_files(path)?.iter().map(|p| McapFile::open(p)).collect::<Result<_, _>>()?)
}

/// Pairs with a pose (PairPose) and pairs without one (a cloud whose view-1 stamp has no
/// PairPose).
fn estimates(bag: &std::path::Path) -> anyhow::Result<Vec<PairEstimate>> {
    let mut with_pose = Vec::new();
    let mut clouds = Vec::new();
    for f in files(bag)? {
        for m in f.messages()? {
            let m = m?;
            match m.ros_type.as_str() {
                "sp_dust3r_msgs/msg/PairPose" => {
                    let p: sp_dust3r_msgs::PairPose = from_cdr(&m.data).with_context(|| format!("PairPose on {}", m.topic))?;
                    let (r, t) = pose_of(&p.pose);
                    with_pose.push(PairEstimate { t1: p.reference_stamp.seconds(), t2: p.header.stamp.seconds(), t_cam1_cam2: Some(TCam1Cam2::new(r, t)) });
                }
                "sensor_msgs/msg/PointCloud2" => {
                    let c: sp_dust3r::ros::msg::sensor_msgs::PointCloud2 = from_cdr(&m.data).with_context(|| format!("PointCloud2 on {}", m.topic))?;
                    clouds.push(c.header.stamp.seconds());
                }
                _ => {}
            }
        }
    }
    // A pair's cloud carries view 1's stamp; a cloud without a PairPose of that reference is a
    // pair the pipeline found no pose for (view 2's time is not in the cloud).
    let without: Vec<PairEstimate> = clouds
        .iter()
        .filter(|&&t1| !with_pose.iter().any(|p| (p.t1 - t1).abs() < 1e-9))
        .map(|&t1| PairEstimate { t1, t2: f64::NAN, t_cam1_cam2: None })
        .collect();
    if with_pose.is_empty() && without.is_empty() {
        bail!("{} has no pairs (no sp_dust3r_msgs/msg/PairPose or sensor_msgs/msg/PointCloud2 messages)", bag.display());
    }
    with_pose.extend(without);
    Ok(with_pose)
}

fn ground_truth(args: &Args) -> anyhow::Result<Vec<StampedPose>> {
    let is_bag = args.ground_truth.is_dir() || args.ground_truth.extension().is_some_and(|e| e == "mcap" || e == "db3");
    if !is_bag {
        let text = std::fs::read_to_string(&args.ground_truth).with_context(|| format!("reading {}", args.ground_truth.display()))?;
        return Ok(parse_tum(&text)?);
    }
    let topic = args.gt_topic.clone().context("a ground-truth bag needs --gt-topic (PoseStamped, or /tf with --gt-frames)")?;
    let mut poses = Vec::new();
    for f in files(&args.ground_truth)? {
        for m in f.messages()? {
            let m = m?;
            if m.topic != topic {
                continue;
            }
            match m.ros_type.as_str() {
                "geometry_msgs/msg/PoseStamped" => {
                    let p: geometry_msgs::PoseStamped = from_cdr(&m.data)?;
                    let (r, t) = pose_of(&p.pose);
                    poses.push(StampedPose { t: p.header.stamp.seconds(), pose: Transform::new(r, t) });
                }
                "tf2_msgs/msg/TFMessage" => {
                    let [parent, child] = args.gt_frames.as_deref().context("TF ground truth needs --gt-frames PARENT CHILD")? else {
                        bail!("--gt-frames takes PARENT CHILD");
                    };
                    let tf: tf2_msgs::TFMessage = from_cdr(&m.data)?;
                    for t in tf.transforms.iter().filter(|t| &t.header.frame_id == parent && &t.child_frame_id == child) {
                        let pose = geometry_msgs::Pose {
                            position: geometry_msgs::Point { x: t.transform.translation.x, y: t.transform.translation.y, z: t.transform.translation.z },
                            orientation: t.transform.rotation.clone(),
                        };
                        let (r, tr) = pose_of(&pose);
                        poses.push(StampedPose { t: t.header.stamp.seconds(), pose: Transform::new(r, tr) });
                    }
                }
                other => bail!("ground-truth topic {topic} is {other}, not geometry_msgs/msg/PoseStamped or tf2_msgs/msg/TFMessage"),
            }
        }
    }
    poses.sort_by(|a, b| a.t.total_cmp(&b.t));
    Ok(poses)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let pairs = estimates(&args.bag)?;
    let gt = ground_truth(&args)?;
    let report = evaluate(&pairs, &gt, args.tolerance)?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(out) = &args.out {
        std::fs::write(out, &json).with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(png) = args.plot.clone().or_else(|| args.out.as_ref().map(|o| o.with_extension("png"))) {
        sp_dust3r::eval::plot::render(&report).save(&png).with_context(|| format!("writing {}", png.display()))?;
        tracing::info!("plot written to {}", png.display());
    }
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
