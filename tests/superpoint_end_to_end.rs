//! From an image file to keypoints, through the library and through the CLI, against the
//! upstream HF implementation's keypoints on the same image.

mod common;

use std::process::Command;

use common::{f1_and_min_cosine, fixture_dir, fixture_png, reference_keypoints};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::superpoint::{PostParams, SuperPoint};

#[test]
fn library_end_to_end_matches_reference() {
    let dir = tempfile::tempdir().unwrap();
    let png = fixture_png(dir.path());
    let model = SuperPoint::load(&fixture_dir("superpoint")).unwrap();
    let luma = Frame::open(&png).unwrap().to_luma();
    let params = PostParams { max_keypoints: None, ..PostParams::default() };
    let (kp, _) = model.detect(&luma, &params).unwrap();
    let ours: Vec<([f32; 2], Vec<f32>)> = (0..kp.len()).map(|i| (kp.xy[i], kp.descriptor(i).to_vec())).collect();
    let reference = reference_keypoints();
    let (f1, min_cos) = f1_and_min_cosine(&ours, &reference);
    eprintln!("{} ours, {} reference, F1 {f1:.5}, min cosine {min_cos:.6}", ours.len(), reference.len());
    assert!(f1 >= 0.99, "F1 {f1}");
    assert!(min_cos >= 0.9999, "min descriptor cosine {min_cos}");
    for (i, d) in (0..kp.len()).map(|i| (i, kp.descriptor(i))) {
        let norm: f32 = d.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "descriptor {i} has norm {norm}");
    }
}

#[test]
fn cli_writes_npz_and_timing_json() {
    let dir = tempfile::tempdir().unwrap();
    let png = fixture_png(dir.path());
    let out = dir.path().join("out.npz");
    let run = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .arg("superpoint")
        .args(["--weights".as_ref(), fixture_dir("superpoint").as_os_str()])
        .args(["--image".as_ref(), png.as_os_str()])
        .args(["--max-keypoints", "-1", "--repeat", "3"])
        .args(["--out".as_ref(), out.as_os_str()])
        .env_remove("SP_DUST3R_SUPERPOINT_WEIGHTS")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));

    let stdout = String::from_utf8(run.stdout).unwrap();
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    for stage in ["decode", "preprocess", "forward", "postprocess"] {
        let ms = last["timing_ms"][stage].as_f64().unwrap_or(-1.0);
        assert!(ms >= 0.0, "timing_ms.{stage} = {ms}");
    }

    let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let kp: ndarray::Array2<f32> = npz.by_name("keypoints").unwrap();
    let scores: ndarray::Array1<f32> = npz.by_name("scores").unwrap();
    let desc: ndarray::Array2<f32> = npz.by_name("descriptors").unwrap();
    let n = kp.nrows();
    assert_eq!(last["num_keypoints"].as_u64(), Some(n as u64));
    assert_eq!((kp.ncols(), scores.len(), desc.dim()), (2, n, (n, 256)));
    assert!(scores.windows(2).into_iter().all(|w| w[0] >= w[1]));
    let ours: Vec<([f32; 2], Vec<f32>)> =
        kp.outer_iter().zip(desc.outer_iter()).map(|(p, d)| ([p[0], p[1]], d.to_vec())).collect();
    let (f1, min_cos) = f1_and_min_cosine(&ours, &reference_keypoints());
    assert!(f1 >= 0.99 && min_cos >= 0.9999, "F1 {f1}, min cosine {min_cos}");

    // Default top-k is 1024.
    let run = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .arg("superpoint")
        .args(["--weights".as_ref(), fixture_dir("superpoint").as_os_str()])
        .args(["--image".as_ref(), png.as_os_str(), "--out".as_ref(), out.as_os_str()])
        .output()
        .unwrap();
    let stdout = String::from_utf8(run.stdout).unwrap();
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["num_keypoints"].as_u64(), Some(1024));
}

#[test]
fn committed_sample_image_is_the_fixture_input() {
    // README's SuperPoint command runs on tests/fixtures/superpoint/image.png: it must be exactly the
    // plane the reference outputs were computed from.
    let dir = tempfile::tempdir().unwrap();
    let generated = Frame::open(&fixture_png(dir.path())).unwrap().to_luma();
    let committed = Frame::open(&fixture_dir("superpoint").join("image.png")).unwrap().to_luma();
    assert_eq!(generated, committed);
}
