//! The sample sequence in the repository (data/sample/sequence.mcap) is what the renderer makes:
//! frames byte for byte, ground truth pose for pose, small enough to ship; and it replays.

mod common;

use std::process::Command;

use common::{fixture_dir, peer_python};
use sp_dust3r_core::bag::McapFile;
use sp_dust3r_core::msg::{from_cdr, geometry_msgs, sensor_msgs};
use sp_dust3r_core::sample::{camera_pose, render};

#[test]
fn stored_sample_matches_the_renderer_and_replays() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample/sequence.mcap");
    assert!(std::fs::metadata(&path).unwrap().len() <= 10 << 20, "<= 10 MB");
    let bag = McapFile::open(&path).unwrap();
    let (mut images, mut truth) = (Vec::new(), Vec::new());
    for m in bag.messages() {
        let m = m.unwrap();
        match m.topic.as_str() {
            "/cam/image_raw" => images.push(from_cdr::<sensor_msgs::Image>(&m.data).unwrap()),
            "/cam/ground_truth" => truth.push(from_cdr::<geometry_msgs::PoseStamped>(&m.data).unwrap()),
            _ => {}
        }
    }
    let n = images.len();
    assert_eq!((n, truth.len()), (40, 40));
    // The summary's counts (what the replay's progress bar runs to) agree with the messages.
    let counts = bag.message_counts();
    assert_eq!((counts.get("/cam/image_raw"), counts.get("/cam/ground_truth")), (Some(&40), Some(&40)), "{counts:?}");
    for i in [0, n / 2, n - 1] {
        assert!(images[i].data == render(i, n), "frame {i} differs from the renderer");
        let p = camera_pose(i, n);
        let g = &truth[i].pose;
        assert!((nalgebra::Vector3::new(g.position.x, g.position.y, g.position.z) - p.translation).norm() < 1e-12);
        assert_eq!(truth[i].header.stamp, images[i].header.stamp);
    }

    // Replay with the fixture SuperPoint (no DUSt3R weights here): a keypoints message per frame.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.mcap");
    let run = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .args([
            "replay",
            "--bag",
            path.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--superpoint-weights",
            fixture_dir("superpoint").to_str().unwrap(),
            "--dust3r-weights",
            "/nonexistent",
        ])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let read = Command::new(peer_python())
        .arg(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/rosbags_bag.py"))
        .args(["read", "--bag", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    let r: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(r["/cam/keypoints"]["count"].as_u64(), Some(40), "{r}");
    assert!(
        r["/cam/keypoints"]["n"].as_array().unwrap().iter().all(|k| k.as_u64().unwrap() > 100),
        "textured frames give keypoints: {r}"
    );
}

/// `sp_dust3r sample` with its defaults makes the stored sample (40 frames, not a shorter path),
/// and `--png` writes the same frames as images, for the commands that take files.
#[test]
fn the_sample_command_remakes_the_stored_frames_and_their_pngs() {
    let stored = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample/sequence.mcap");
    let frames_of = |path: &std::path::Path| -> Vec<Vec<u8>> {
        let bag = McapFile::open(path).unwrap();
        bag.messages()
            .map(Result::unwrap)
            .filter(|m| m.topic == "/cam/image_raw")
            .map(|m| from_cdr::<sensor_msgs::Image>(&m.data).unwrap().data)
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let (bag, png) = (dir.path().join("s.mcap"), dir.path().join("frames"));
    let run = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .args(["sample".as_ref(), "--out".as_ref(), bag.as_os_str(), "--png".as_ref(), png.as_os_str()])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let (made, expected) = (frames_of(&bag), frames_of(&stored));
    assert_eq!(made.len(), expected.len());
    assert!(made == expected, "the default sample differs from the stored one");
    let files = std::fs::read_dir(&png).unwrap().count();
    assert_eq!(files, expected.len());
    for i in [0, 17, expected.len() - 1] {
        let img = image::open(png.join(format!("frame_{i:04}.png"))).unwrap();
        assert!(matches!(img, image::DynamicImage::ImageLuma8(_)), "frame {i} is 8-bit grey");
        assert!(img.into_luma8().into_raw() == expected[i], "frame {i}'s PNG differs from the bag's");
    }
}
