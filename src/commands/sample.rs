//! `sp_dust3r sample`: renders the sample sequence (src/sample.rs) into a rosbag2 MCAP with
//! CameraInfo and ground truth — what `data/sample/sequence.mcap` was made with — and, on request,
//! its frames as PNG files, for the commands that take images.

use std::path::PathBuf;

use anyhow::Context;

use sp_dust3r_core::bag::BagWriter;
use sp_dust3r_core::msg::{builtin_interfaces, geometry_msgs, sensor_msgs, std_msgs, to_cdr};
use sp_dust3r_core::sample::{camera_pose, render, FOCAL, FRAMES, HEIGHT, RATE, WIDTH};

#[derive(clap::Args)]
pub struct Args {
    /// The bag to write.
    #[arg(long, default_value = "data/sample/sequence.mcap")]
    out: PathBuf,
    /// How many frames the camera path is spread over (the stored sample's by default).
    #[arg(long, default_value_t = FRAMES)]
    frames: usize,
    /// Also write each frame as DIR/frame_NNNN.png (8-bit grey), e.g. for `superpoint --draw` or
    /// `dust3r --ply`.
    #[arg(long, value_name = "DIR")]
    png: Option<PathBuf>,
}

/// Input time of frame `i`: 1000 s + i / RATE.
pub fn stamp(i: usize) -> builtin_interfaces::Time {
    let ns = 1_000_000_000_000u64 + (i as f64 / RATE * 1e9).round() as u64;
    builtin_interfaces::Time { sec: (ns / 1_000_000_000) as i32, nanosec: (ns % 1_000_000_000) as u32 }
}

/// The PNG file name of frame `i`.
pub fn frame_file(i: usize) -> String {
    format!("frame_{i:04}.png")
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    if let Some(dir) = &args.png {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut bag = BagWriter::create(&args.out)?;
    bag.add_typed_topic::<sensor_msgs::Image>("/cam/image_raw")?;
    bag.add_typed_topic::<sensor_msgs::CameraInfo>("/cam/camera_info")?;
    bag.add_typed_topic::<geometry_msgs::PoseStamped>("/cam/ground_truth")?;
    let (cx, cy) = (WIDTH as f64 / 2.0 - 0.5, HEIGHT as f64 / 2.0 - 0.5);
    for i in 0..args.frames {
        let t = stamp(i);
        let ns = t.sec as u64 * 1_000_000_000 + t.nanosec as u64;
        let header = std_msgs::Header { stamp: t, frame_id: "cam_optical".into() };
        let info = sensor_msgs::CameraInfo {
            header: header.clone(),
            height: HEIGHT,
            width: WIDTH,
            distortion_model: "plumb_bob".into(),
            d: vec![0.0; 5],
            k: [FOCAL, 0.0, cx, 0.0, FOCAL, cy, 0.0, 0.0, 1.0],
            r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            p: [FOCAL, 0.0, cx, 0.0, 0.0, FOCAL, cy, 0.0, 0.0, 0.0, 1.0, 0.0],
            ..Default::default()
        };
        bag.write("/cam/camera_info", ns, ns, &to_cdr(&info)?)?;
        let image = sensor_msgs::Image {
            header: header.clone(),
            height: HEIGHT,
            width: WIDTH,
            encoding: "mono8".into(),
            is_bigendian: 0,
            step: WIDTH,
            data: render(i, args.frames),
        };
        if let Some(dir) = &args.png {
            let path = dir.join(frame_file(i));
            image::save_buffer(&path, &image.data, WIDTH, HEIGHT, image::ExtendedColorType::L8)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        bag.write("/cam/image_raw", ns, ns, &to_cdr(&image)?)?;
        let pose = camera_pose(i, args.frames);
        let q = nalgebra::UnitQuaternion::from_rotation_matrix(&pose.rotation);
        let gt = geometry_msgs::PoseStamped {
            header: std_msgs::Header { stamp: header.stamp.clone(), frame_id: "room".into() },
            pose: geometry_msgs::Pose {
                position: geometry_msgs::Point { x: pose.translation.x, y: pose.translation.y, z: pose.translation.z },
                orientation: geometry_msgs::Quaternion { x: q.i, y: q.j, z: q.k, w: q.w },
            },
        };
        bag.write("/cam/ground_truth", ns, ns, &to_cdr(&gt)?)?;
    }
    bag.finish()?;
    println!(
        "{}",
        serde_json::json!({"out": args.out.display().to_string(), "frames": args.frames, "bytes": std::fs::metadata(&args.out)?.len(),
                           "png": args.png.as_ref().map(|d| d.display().to_string())})
    );
    Ok(())
}
