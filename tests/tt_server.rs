//! The tt-server backends against a server double that follows the tt-model contract
//! (tools/peers/tt_model_server.py, HTTP on 127.0.0.1): answers map to the same keypoints and
//! pair results as the CPU backend's, and every failure the contract allows — starting (503),
//! 400, 500, garbage, wrong shapes, dropped connections, slow answers, a server that dies and
//! comes back — is a classified error, never a panic, and the link recovers.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{fixture_dir, peer_python};
use sp_dust3r_core::backend::cpu::CpuFeatures;
use sp_dust3r_core::backend::tt_server::{ServerOptions, TtDust3r, TtSuperPoint};
use sp_dust3r_core::backend::{BackendError, CameraK, FeatureExtractor, PairReconstructor, PairRequest, WithFallback};
use sp_dust3r_core::geometry::lens::Lens;
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::superpoint::{PostParams, SuperPoint};

/// A running double; killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, model: &str, extra: &[&str]) -> Server {
    // The child is wrapped in a Server at once, whose Drop kills and reaps it, on every path.
    let port_file = dir.join(format!("port-{model}-{}", extra.join("_").replace(['/', ':', ','], "-")));
    let _ = std::fs::remove_file(&port_file);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/tt_model_server.py");
    let child = Command::new(peer_python())
        .arg(&script)
        .args(["--model", model, "--port-file"])
        .arg(&port_file)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server double (tools/test.sh installs its Python)");
    let mut server = Server { child, port: 0 };
    let t = Instant::now();
    loop {
        if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|s| s.trim().parse().ok()) {
            server.port = port;
            return server;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "server double did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn options(port: u16, timeout_s: f64) -> ServerOptions {
    ServerOptions {
        url: format!("http://127.0.0.1:{port}"),
        timeout: Duration::from_secs_f64(timeout_s),
        jpeg_quality: 90,
        cancel: sp_dust3r_core::cancel::Cancel::new(),
    }
}

fn sample_frame() -> Frame {
    Frame::open(&fixture_dir("superpoint").join("image.png")).unwrap()
}

fn pairs(kp: &sp_dust3r_core::superpoint::Keypoints) -> Vec<([f32; 2], Vec<f32>)> {
    (0..kp.len()).map(|i| (kp.xy[i], kp.descriptor(i).to_vec())).collect()
}

/// Keypoints at least 4 px from every side of the 640x480 image: the reference (HF) removes
/// its border on two sides only, our CPU post-processing on all four.
fn inside(v: Vec<([f32; 2], Vec<f32>)>) -> Vec<([f32; 2], Vec<f32>)> {
    v.into_iter().filter(|(p, _)| p[0] >= 4.0 && p[0] < 636.0 && p[1] >= 4.0 && p[1] < 476.0).collect()
}

fn all_keypoints() -> PostParams {
    PostParams::new(0.005, 4, 4, -1).unwrap()
}

#[test]
fn superpoint_answers_map_to_our_keypoints() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "superpoint", &[]);
    let sp = TtSuperPoint::new(options(server.port, 10.0));
    sp.link().wait_ready(Duration::from_secs(10)).unwrap();
    let frame = sample_frame();
    let (kp, timing) = sp.detect_timed(&frame, &all_keypoints()).unwrap();
    // The double answers with the upstream reference (HF SuperPoint on this image).
    let mut fixture = common::SuperPointFixture::open();
    let (ref_xy, ref_desc) = (fixture.array("keypoints_xy"), fixture.array("descriptors"));
    let reference: Vec<([f32; 2], Vec<f32>)> = (0..ref_xy.shape()[0])
        .map(|i| ([ref_xy[[i, 0]], ref_xy[[i, 1]]], (0..256).map(|j| ref_desc[[i, j]]).collect()))
        .collect();
    assert_eq!((kp.len(), kp.descriptor_dim), (reference.len(), 256));
    let (f1, min_cos) = common::f1_and_min_cosine(&pairs(&kp), &reference);
    assert!(f1 == 1.0 && min_cos > 0.9995, "F1 {f1}, min cosine {min_cos} (float16 descriptors)");
    for i in 0..kp.len() {
        let norm: f32 = kp.descriptor(i).iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "unit rows after float16");
    }
    assert!(kp.scores.windows(2).all(|w| w[0] >= w[1]));
    // And they agree with our CPU backend on the same image (the fixture weights are the
    // reference's) to the CPU end-to-end test's bar: the PNG is 8-bit, the reference's input
    // was not.
    let cpu =
        CpuFeatures(SuperPoint::load(&fixture_dir("superpoint")).unwrap()).detect(&frame, &all_keypoints()).unwrap();
    let (f1, min_cos) = common::f1_and_min_cosine(&inside(pairs(&cpu)), &inside(pairs(&kp)));
    assert!(f1 >= 0.99 && min_cos > 0.999, "F1 {f1}, min cosine {min_cos}");
    assert!(timing.server_total_ms.is_some() && timing.overhead_ms().is_some());
    // max_keypoints reaches the server: the best 100, in order.
    let top = sp.detect(&frame, &PostParams::new(0.005, 4, 4, 100).unwrap()).unwrap();
    assert_eq!(top.xy, kp.xy[..100].to_vec());
}

#[test]
fn contract_failures_are_classified_and_the_link_recovers() {
    let dir = tempfile::tempdir().unwrap();
    // Starting for 1.5 s; then the faults in order; then normal answers.
    let server = start(
        dir.path(),
        "superpoint",
        &["--starting", "1.5", "--faults", "400,500,garbage,badshape,drop,drop,slow:3"],
    );
    let sp = TtSuperPoint::new(options(server.port, 1.0));
    let frame = sample_frame();
    let p = all_keypoints();
    let err = |r: Result<_, BackendError>| r.expect_err("an error");

    assert!(matches!(err(sp.detect(&frame, &p)), BackendError::Starting { .. }));
    sp.link().wait_ready(Duration::from_secs(10)).unwrap();
    let e = err(sp.detect(&frame, &p));
    assert!(matches!(&e, BackendError::Rejected { message, .. } if message.contains("keypoint_threshold")), "{e}");
    let e = err(sp.detect(&frame, &p));
    assert!(matches!(&e, BackendError::ServerFailure { message, .. } if message.contains("RuntimeError")), "{e}");
    let e = err(sp.detect(&frame, &p));
    assert!(matches!(&e, BackendError::Malformed { reason, .. } if reason.contains("not JSON")), "{e}");
    let e = err(sp.detect(&frame, &p));
    assert!(matches!(&e, BackendError::Malformed { reason, .. } if reason.contains("scores")), "{e}");
    // A dropped connection is retried once; dropped again, the server counts as down and the
    // next call answers at once without a request.
    let e = err(sp.detect(&frame, &p));
    assert!(e.is_unavailable(), "{e}");
    let t = Instant::now();
    assert!(err(sp.detect(&frame, &p)).is_unavailable());
    assert!(t.elapsed() < Duration::from_millis(100), "no request while backing off");
    // After the backoff: health is ok again; a slow answer times out (no retry of a timeout).
    sp.link().wait_ready(Duration::from_secs(10)).unwrap();
    let t = Instant::now();
    let e = err(sp.detect(&frame, &p));
    assert!(e.is_unavailable() && t.elapsed() < Duration::from_millis(1900), "{e} after {:?}", t.elapsed());
    // The double finishes the slow answer, then serves normally: picked up again.
    std::thread::sleep(Duration::from_secs(2));
    sp.link().wait_ready(Duration::from_secs(10)).unwrap();
    assert!(!sp.detect(&frame, &p).unwrap().is_empty());
}

#[test]
fn a_server_that_dies_and_comes_back_is_picked_up_and_the_cpu_covers_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let first = start(dir.path(), "superpoint", &["--die-after", "1"]);
    let port = first.port;
    let cpu = CpuFeatures(SuperPoint::load(&fixture_dir("superpoint")).unwrap());
    let backend = WithFallback { primary: TtSuperPoint::new(options(port, 5.0)), fallback: Some(cpu) };
    let frame = sample_frame();
    let p = all_keypoints();
    let via_server = backend.detect(&frame, &p).unwrap();
    drop(first);
    // Down: the CPU answers, with the CPU's keypoints.
    let via_cpu = backend.detect(&frame, &p).unwrap();
    assert!(backend.describe().contains("fallback: cpu"));
    let (f1, _) = common::f1_and_min_cosine(&inside(pairs(&via_server)), &inside(pairs(&via_cpu)));
    assert!(f1 >= 0.99, "F1 {f1}");
    // Back on the same port: used again once its backoff has passed.
    let _second = start(dir.path(), "superpoint", &["--port", &port.to_string()]);
    let only_server = TtSuperPoint::new(options(port, 5.0));
    only_server.link().wait_ready(Duration::from_secs(10)).unwrap();
    let t = Instant::now();
    loop {
        if backend.detect(&frame, &p).is_ok() && backend.describe().contains("ready") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "server not picked up again: {}", backend.describe());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn dust3r_answers_map_to_pointmaps_and_the_known_pose() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "dust3r", &["--faults", "badshape"]);
    let d = TtDust3r::new(options(server.port, 30.0));
    d.link().wait_ready(Duration::from_secs(10)).unwrap();
    let frame = sample_frame();
    let k = CameraK { fx: 500.0, fy: 500.0, cx: 320.0, cy: 240.0 };
    let request = PairRequest {
        first: &frame,
        second: &frame,
        known: Some(k),
        min_confidence: 3.0,
        conf_pct: 50.0,
        lens: Lens::Pinhole,
    };
    let e = d.reconstruct(&request).err().expect("wrong shapes are refused");
    assert!(matches!(&e, BackendError::Malformed { reason, .. } if reason.contains("pts3d2")), "{e}");
    let out = d.reconstruct(&request).unwrap();
    assert_eq!((out.view1.height, out.view1.width, out.view2_in_1.points.len()), (512, 512, 512 * 512 * 3));
    assert!(out.view1.confidence.iter().all(|&c| c == 5.0));
    // Colours: 640x480 padded to 640x640 -> rows 0..64 of the 512 grid are the grey padding.
    assert_eq!(&out.rgb1[..3], &[128, 128, 128]);
    let mid = (256 * 512 + 256) * 3;
    assert_ne!(&out.rgb1[mid..mid + 3], &[128, 128, 128]);
    // The pose: X_cam2 = R X_cam1 + t on the wire; camera 2 in camera 1's frame here.
    let pose = out.pose.unwrap();
    let r = nalgebra::Rotation3::new(nalgebra::Vector3::new(0.05, -0.2, 0.03));
    let t = nalgebra::Vector3::new(0.3, -0.05, 0.1);
    assert!((pose.t_cam1_cam2.rotation.matrix() - r.inverse().matrix()).norm() < 1e-9);
    assert!((pose.t_cam1_cam2.translation - (-(r.inverse() * t))).norm() < 1e-9);
    assert!(pose.used_known_intrinsics && (pose.focal2 - 500.0).abs() < 1e-9);
    // The pointmaps are the scene's: view 1's points project to their own pixels at the
    // double's focal (600 at 512) - a check that the arrays were read in the right order.
    let (u, v) = (100usize, 300usize);
    let p = &out.view1.points[(v * 512 + u) * 3..(v * 512 + u) * 3 + 3];
    assert!(
        (p[0] / p[2] * 600.0 + 256.0 - u as f32).abs() < 1e-3 && (p[1] / p[2] * 600.0 + 256.0 - v as f32).abs() < 1e-3
    );
    // The server's preprocess blocks say where each grid lies in its frame: the same as our
    // own padding to the square (what tracking looks a keypoint's point up through).
    let ours = sp_dust3r_core::dust3r::prepare(&frame, sp_dust3r_core::dust3r::PrepMode::Pad, 512).unwrap().mapping;
    for m in out.mappings {
        let (a, b) = (m.to_network(17.0, 401.0), ours.to_network(17.0, 401.0));
        assert!((a.0 - b.0).abs() < 1e-6 && (a.1 - b.1).abs() < 1e-6, "{m:?} vs {ours:?}");
    }
    // View 2 in its own frame: its points in camera 1's frame moved by the pose.
    let own = out.view2.unwrap();
    let i = (v * 512 + u) * 3;
    let q = pose.t_cam1_cam2.inverse().apply(&nalgebra::Vector3::from_fn(|k, _| out.view2_in_1.points[i + k] as f64));
    assert!((0..3).all(|k| (own.points[i + k] as f64 - q[k]).abs() < 1e-4));
}

#[test]
fn cli_runs_on_the_server_and_reports_host_cost() {
    let dir = tempfile::tempdir().unwrap();
    let sp = start(dir.path(), "superpoint", &["--starting", "1.0"]);
    let out = dir.path().join("kp.npz");
    let image = fixture_dir("superpoint").join("image.png");
    let (img, npz_out) = (image.to_str().unwrap(), out.to_str().unwrap());
    // The binary with these arguments; it must succeed.
    let cli = |args: &[&str]| {
        let run = Command::new(env!("CARGO_BIN_EXE_sp_dust3r")).args(args).output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        (
            serde_json::from_slice::<serde_json::Value>(&run.stdout).unwrap(),
            String::from_utf8_lossy(&run.stderr).into_owned(),
        )
    };
    let url = |port: u16| format!("http://127.0.0.1:{port}");
    let (line, stderr) = cli(&[
        "superpoint",
        "--backend",
        "tt-server",
        "--server-url",
        &url(sp.port),
        "--max-keypoints",
        "-1",
        "--repeat",
        "5",
        "--image",
        img,
        "--out",
        npz_out,
    ]);
    eprintln!("superpoint via the double: {line}");
    assert_eq!(line["num_keypoints"].as_u64(), Some(common::SuperPointFixture::open().array("scores").len() as u64));
    assert!(line["timing_ms"]["host_overhead"].as_f64().is_some());
    let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let kp: ndarray::Array2<f32> = npz.by_name("keypoints").unwrap();
    assert_eq!(kp.shape()[1], 2);
    assert!(!stderr.contains("weights revision"), "same revision: no warning");
    // A server with other weights than the CPU backend pins: a warning, the job still runs.
    let other = start(dir.path(), "superpoint", &["--info-revision", "0123abc"]);
    let (_, stderr) = cli(&[
        "superpoint",
        "--backend",
        "tt-server",
        "--server-url",
        &url(other.port),
        "--image",
        img,
        "--out",
        npz_out,
    ]);
    assert!(stderr.contains("weights revision 0123abc, the CPU backend pins 734450e9"), "{stderr}");

    let d = start(dir.path(), "dust3r", &[]);
    let out = dir.path().join("pair.npz");
    let (line, _) = cli(&[
        "dust3r",
        "--backend",
        "tt-server",
        "--server-url",
        &url(d.port),
        "--pose",
        "--image1",
        img,
        "--image2",
        img,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(line["pose"]["mode"], "server");
    let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let t: ndarray::Array1<f64> = npz.by_name("t").unwrap();
    assert!((t[0] - 0.3).abs() < 1e-9 && (t[1] + 0.05).abs() < 1e-9 && (t[2] - 0.1).abs() < 1e-9, "{t}");
    let pts: ndarray::Array3<f32> = npz.by_name("pts3d1").unwrap();
    assert_eq!(pts.shape(), &[512, 512, 3]);
}

/// What goes on the wire: grey frames as lossless PNG, colour as JPEG (or PNG), SuperPoint's
/// always as grey PNG of the BT.601 luminance.
#[test]
fn frames_are_encoded_for_the_wire_and_decode_back() {
    use base64::Engine;
    use sp_dust3r_core::backend::tt_server::encode_frame;
    let decode =
        |b64: String| image::load_from_memory(&base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap();
    let (w, h) = (64u32, 48u32);
    let grey: Vec<u8> = (0..w * h).map(|i| (i * 7 % 256) as u8).collect();
    let mono = Frame::from_raw("mono8", w, h, w as usize, false, grey.clone()).unwrap();
    let back = decode(encode_frame(&mono, 90, false).unwrap());
    assert_eq!(back.color(), image::ColorType::L8);
    assert_eq!(back.to_luma8().into_raw(), grey, "lossless");
    let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 13 % 256) as u8).collect();
    let colour = Frame::from_raw("rgb8", w, h, (w * 3) as usize, false, rgb.clone()).unwrap();
    let jpeg = decode(encode_frame(&colour, 95, false).unwrap());
    assert_eq!((jpeg.color(), jpeg.width(), jpeg.height()), (image::ColorType::Rgb8, w, h));
    assert_eq!(decode(encode_frame(&colour, 0, false).unwrap()).to_rgb8().into_raw(), rgb, "quality 0: PNG, lossless");
    let as_grey = decode(encode_frame(&colour, 90, true).unwrap()).to_luma8().into_raw();
    let luma: Vec<u8> = colour.to_luma().data.iter().map(|v| (v * 255.0).round() as u8).collect();
    assert_eq!(as_grey, luma);
}

/// The README's pair picture: two frames of the sample as PNG (`sample --png`) through
/// `dust3r --backend tt-server` on the double's perfect DUSt3R of the sample: the PLY holds
/// every pixel of the 640x480 frames padded into 512x512 (512x384 each, the double is sure of
/// all of them and of none of the pad), and the preview shows the grey room and both cameras.
#[test]
fn a_sample_pair_on_the_perfect_double_gives_its_ply_and_preview() {
    let dir = tempfile::tempdir().unwrap();
    let frames = dir.path().join("frames");
    let sample = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .args(["sample".as_ref(), "--out".as_ref(), dir.path().join("s.mcap").as_os_str()])
        .args(["--png".as_ref(), frames.as_os_str()])
        .output()
        .unwrap();
    assert!(sample.status.success(), "{}", String::from_utf8_lossy(&sample.stderr));
    let bag = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample/sequence.mcap");
    let d = start(dir.path(), "dust3r", &["--sample-bag", bag.to_str().unwrap()]);
    let (ply, png) = (dir.path().join("pair.ply"), dir.path().join("pair.png"));
    let run = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .args(["dust3r", "--backend", "tt-server", "--server-url", &format!("http://127.0.0.1:{}", d.port), "--pose"])
        .args(["--image1".as_ref(), frames.join("frame_0010.png").as_os_str()])
        .args(["--image2".as_ref(), frames.join("frame_0016.png").as_os_str()])
        .args(["--ply".as_ref(), ply.as_os_str(), "--preview".as_ref(), png.as_os_str()])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let line: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(line["ply_points"].as_u64(), Some(2 * 512 * 384), "{line}");

    use sp_dust3r_core::preview::{BACKGROUND, CAMERA1, CAMERA2, SIZE};
    let img = image::open(&png).unwrap().into_rgb8();
    assert_eq!(img.dimensions(), SIZE);
    let count = |c: [u8; 3]| img.pixels().filter(|p| p.0 == c).count();
    assert!(count(CAMERA1) > 50 && count(CAMERA2) > 50, "both cameras drawn: {} {}", count(CAMERA1), count(CAMERA2));
    // The cloud band (below the captions, above the tiles): much of it is the room, in grey.
    let (mut room, mut coloured) = (0usize, 0usize);
    for y in 60..560 {
        for x in 0..SIZE.0 {
            let p = img.get_pixel(x, y).0;
            if p != BACKGROUND && p != CAMERA1 && p != CAMERA2 {
                room += 1;
                coloured += usize::from(!(p[0] == p[1] && p[1] == p[2]));
            }
        }
    }
    assert!(room > SIZE.0 as usize * 500 / 4, "{room} room pixels");
    assert!(coloured < room / 50, "{coloured} of {room} are not grey (anti-aliased labels only)");
}
