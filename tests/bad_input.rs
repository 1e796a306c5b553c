//! Every bad input gets its own clear error (the variant and what it names), never a panic.

mod common;

use std::path::Path;
use std::process::Command;

use common::fixture_dir;
use sp_dust3r_core::image::{Frame, ImageError};
use sp_dust3r_core::superpoint::{PostParams, SuperPoint, SuperPointError};
use sp_dust3r_core::weights::WeightsError;

/// A copy of the fixture weights folder whose model.safetensors is `bytes`.
fn weights_with(dir: &Path, bytes: &[u8]) {
    std::fs::copy(fixture_dir("superpoint").join("config.json"), dir.join("config.json")).unwrap();
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

fn fixture_bytes() -> Vec<u8> {
    std::fs::read(fixture_dir("superpoint").join("model.safetensors")).unwrap()
}

/// Rewrites the fixture file with `edit` applied to its tensors (name -> (shape, f32 data)).
fn edited_weights(edit: impl FnOnce(&mut Vec<(String, Vec<usize>, Vec<u8>)>)) -> Vec<u8> {
    let bytes = fixture_bytes();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> =
        st.tensors().into_iter().map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut tensors);
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, s, d)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).unwrap())
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn load_err(bytes: &[u8]) -> SuperPointError {
    let dir = tempfile::tempdir().unwrap();
    weights_with(dir.path(), bytes);
    match SuperPoint::load(dir.path()) {
        Ok(_) => panic!("loading should fail"),
        Err(e) => e,
    }
}

#[test]
fn truncated_weight_file_is_reported_as_truncated() {
    let bytes = fixture_bytes();
    let err = load_err(&bytes[..bytes.len() / 2]);
    assert!(matches!(err, SuperPointError::Weights(WeightsError::Corrupt { .. })), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("model.safetensors") && msg.contains("truncated"), "{msg}");
    // Cut inside the header too.
    let err = load_err(&bytes[..20]);
    assert!(matches!(err, SuperPointError::Weights(WeightsError::Corrupt { .. })), "{err:?}");
}

#[test]
fn missing_tensor_is_named() {
    let bytes = edited_weights(|t| t.retain(|(n, _, _)| n != "descriptor_decoder.conv_descriptor_b.weight"));
    let err = load_err(&bytes);
    match &err {
        SuperPointError::Weights(WeightsError::MissingTensor { name, .. }) => {
            assert_eq!(name, "descriptor_decoder.conv_descriptor_b.weight")
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("descriptor_decoder.conv_descriptor_b.weight"));
}

#[test]
fn wrong_shape_is_named_with_both_shapes() {
    let bytes = edited_weights(|t| {
        let e = t.iter_mut().find(|(n, _, _)| n == "encoder.conv_blocks.2.conv_a.weight").unwrap();
        e.1 = vec![64, 128, 3, 3]; // same element count, transposed channel dims
    });
    let err = load_err(&bytes);
    match &err {
        SuperPointError::Weights(WeightsError::WrongShape { name, got, expected, .. }) => {
            assert_eq!(name, "encoder.conv_blocks.2.conv_a.weight");
            assert_eq!((got.as_slice(), expected.as_slice()), (&[64, 128, 3, 3][..], &[128, 64, 3, 3][..]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn original_magic_leap_key_names_load_and_give_the_same_network() {
    let renames = [
        ("encoder.conv_blocks.0.conv_a", "conv1a"),
        ("encoder.conv_blocks.0.conv_b", "conv1b"),
        ("encoder.conv_blocks.1.conv_a", "conv2a"),
        ("encoder.conv_blocks.1.conv_b", "conv2b"),
        ("encoder.conv_blocks.2.conv_a", "conv3a"),
        ("encoder.conv_blocks.2.conv_b", "conv3b"),
        ("encoder.conv_blocks.3.conv_a", "conv4a"),
        ("encoder.conv_blocks.3.conv_b", "conv4b"),
        ("keypoint_decoder.conv_score_a", "convPa"),
        ("keypoint_decoder.conv_score_b", "convPb"),
        ("descriptor_decoder.conv_descriptor_a", "convDa"),
        ("descriptor_decoder.conv_descriptor_b", "convDb"),
    ];
    let bytes = edited_weights(|t| {
        for (name, _, _) in t.iter_mut() {
            let (prefix, suffix) = name.rsplit_once('.').unwrap();
            let new = renames.iter().find(|(hf, _)| *hf == prefix).unwrap().1;
            *name = format!("{new}.{suffix}");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    weights_with(dir.path(), &bytes);
    let original = SuperPoint::load(dir.path()).unwrap();
    let hf = SuperPoint::load(&fixture_dir("superpoint")).unwrap();
    let plane: Vec<f32> = (0..64 * 64).map(|i| (i % 251) as f32 / 251.0).collect();
    let a = original.net().forward(&plane, 64, 64).unwrap();
    let b = hf.net().forward(&plane, 64, 64).unwrap();
    assert_eq!(a.logits, b.logits);
}

#[test]
fn bad_config_and_incomplete_folder_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    weights_with(dir.path(), &fixture_bytes());
    std::fs::write(dir.path().join("config.json"), "{ not json").unwrap();
    let err = SuperPoint::load(dir.path()).err().expect("must fail");
    assert!(matches!(err, SuperPointError::Weights(WeightsError::Config { .. })), "{err:?}");

    std::fs::write(dir.path().join("config.json"), r#"{"keypoint_decoder_dim": 64}"#).unwrap();
    let err = SuperPoint::load(dir.path()).err().expect("must fail");
    assert!(err.to_string().contains("keypoint_decoder_dim"), "{err}");

    let empty = tempfile::tempdir().unwrap();
    let err = sp_dust3r_core::weights::resolve(&sp_dust3r_core::superpoint::HUB_MODEL, Some(empty.path())).unwrap_err();
    match err {
        WeightsError::IncompleteFolder { origin, missing, .. } => {
            assert_eq!(origin, "--weights");
            assert!(missing.contains("model.safetensors") && missing.contains("config.json"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn raw_frames_are_validated() {
    let err = |r: Result<Frame, ImageError>| r.expect_err("must fail");
    assert_eq!(
        err(Frame::from_raw("yuv444", 4, 2, 12, false, vec![0; 24])),
        ImageError::UnknownEncoding("yuv444".into())
    );
    assert_eq!(
        err(Frame::from_raw("rgb8", 4, 2, 10, false, vec![0; 24])),
        ImageError::StepTooSmall { step: 10, min: 12 }
    );
    assert_eq!(
        err(Frame::from_raw("mono16", 4, 2, 8, false, vec![0; 15])),
        ImageError::Truncated { expected: 16, got: 15, height: 2, step: 8 }
    );
    assert_eq!(err(Frame::from_raw("mono8", 0, 2, 0, false, vec![])), ImageError::ZeroSize { width: 0, height: 2 });
    assert!(matches!(
        err(Frame::from_raw("mono8", 1 << 20, 1 << 20, 1 << 20, false, vec![])),
        ImageError::TooLarge { .. }
    ));
    // Padding at row ends (step > width * bpp) is fine.
    assert!(Frame::from_raw("mono8", 3, 2, 4, false, vec![0; 8]).is_ok());
}

#[test]
fn luminance_of_each_encoding_uses_bt601_weights() {
    // One pixel of (R, G, B) = (200, 100, 50): Y = (0.299*200 + 0.587*100 + 0.114*50) / 255.
    let y = (0.299 * 200.0 + 0.587 * 100.0 + 0.114 * 50.0) / 255.0;
    for (enc, bytes) in [
        ("rgb8", vec![200, 100, 50]),
        ("bgr8", vec![50, 100, 200]),
        ("rgba8", vec![200, 100, 50, 7]),
        ("bgra8", vec![50, 100, 200, 7]),
    ] {
        let step = bytes.len();
        let l = Frame::from_raw(enc, 1, 1, step, false, bytes).unwrap().to_luma();
        assert!((l.data[0] - y).abs() < 1e-6, "{enc}: {} vs {y}", l.data[0]);
    }
    let l = Frame::from_raw("mono8", 1, 1, 1, false, vec![51]).unwrap().to_luma();
    assert!((l.data[0] - 0.2).abs() < 1e-6);
    let big = Frame::from_raw("mono16", 1, 1, 2, true, vec![0x80, 0x00]).unwrap().to_luma();
    let little = Frame::from_raw("mono16", 1, 1, 2, false, vec![0x00, 0x80]).unwrap().to_luma();
    assert_eq!(big.data, little.data);
    assert!((big.data[0] - 32768.0 / 65535.0).abs() < 1e-6);
}

/// Found by the fuzzer (image_jpeg, cdr_compressed): a JPEG of a few hundred bytes whose header
/// declares 16 Mpx took 2 s, the decoder filling in what the data could not hold. A real JPEG,
/// even of one flat grey (the least data a JPEG can have), is above the bound.
#[test]
fn a_small_jpeg_declaring_a_huge_image_is_refused_and_a_flat_one_decodes() {
    let encode = |w, h| {
        let mut jpeg = Vec::new();
        image::GrayImage::from_pixel(w, h, image::Luma([128]))
            .write_to(&mut std::io::Cursor::new(&mut jpeg), image::ImageFormat::Jpeg)
            .unwrap();
        jpeg
    };
    let flat = encode(2048, 2048);
    let frame = Frame::decode(&flat).unwrap();
    assert_eq!((frame.width(), frame.height()), (2048, 2048));
    // A 64x48 JPEG whose frame header (SOF0: FF C0, length, precision, height, width) says 4096x4096.
    let mut small = encode(64, 48);
    let sof = small.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    small[sof + 5..sof + 9].copy_from_slice(&[0x10, 0x00, 0x10, 0x00]);
    let started = std::time::Instant::now();
    let err = Frame::decode(&small).err();
    assert_eq!(
        err,
        Some(ImageError::Decode(format!("truncated JPEG ({} bytes cannot hold 4096x4096 pixels)", small.len())))
    );
    println!("refused in {:?}", started.elapsed());
}

/// Found by the fuzzer (image_jpeg): a 713-byte JPEG on which zune-jpeg's AVX2 IDCT unwraps a
/// None (a panic inside the image crate). It is a decode error now; kept as a fuzz seed.
#[test]
fn a_jpeg_that_makes_the_decoder_panic_is_a_decode_error() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/image_jpeg/panic-1");
    let bytes = std::fs::read(path).unwrap();
    match Frame::decode(&bytes) {
        Err(ImageError::Decode(_)) => {}
        // The panic is in the AVX2 code; the scalar IDCT may decode it.
        Ok(_) if !std::arch::is_x86_feature_detected!("avx2") => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_and_unknown_compressed_images_are_decode_errors() {
    let mut jpeg = Vec::new();
    image::GrayImage::from_fn(64, 48, |x, y| image::Luma([(x * 3 + y) as u8]))
        .write_to(&mut std::io::Cursor::new(&mut jpeg), image::ImageFormat::Jpeg)
        .unwrap();
    assert!(Frame::decode(&jpeg).is_ok());
    // Header intact, entropy-coded data replaced by garbage.
    let mut corrupt = jpeg[..jpeg.len() / 3].to_vec();
    corrupt.extend(std::iter::repeat_n(0xFFu8, 16));
    corrupt.extend((0..200u32).map(|i| (i * 37 % 251) as u8));
    match Frame::decode(&corrupt) {
        Err(ImageError::Decode(msg)) => assert!(!msg.is_empty()),
        other => panic!("corrupt JPEG: {other:?}"),
    }
    assert!(matches!(Frame::decode(&jpeg[..10]), Err(ImageError::Decode(_))));
    // Cut off (the decoder alone would fill the rest with grey), with or without junk after.
    let mut cut = jpeg[..jpeg.len() / 2].to_vec();
    assert_eq!(Frame::decode(&cut).err(), Some(ImageError::Decode("truncated JPEG (no end-of-image marker)".into())));
    cut.extend(0..200u8);
    assert!(matches!(Frame::decode(&cut), Err(ImageError::Decode(_))));
    let mut padded = jpeg.clone();
    padded.extend([0u8; 7]);
    assert!(Frame::decode(&padded).is_ok(), "zero padding after the end marker is fine");
    assert_eq!(
        Frame::decode(b"hello world, not an image").err(),
        Some(ImageError::Decode("not a PNG or JPEG image".into()))
    );
    match Frame::open(Path::new("/nonexistent/image.png")) {
        Err(ImageError::Io { path, .. }) => assert_eq!(path, "/nonexistent/image.png"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_post_processing_parameters_are_refused() {
    assert!(
        matches!(PostParams::new(0.005, -1, 4, 1024), Err(SuperPointError::Parameter(m)) if m.contains("nms radius"))
    );
    assert!(
        matches!(PostParams::new(f32::NAN, 4, 4, 1024), Err(SuperPointError::Parameter(m)) if m.contains("threshold"))
    );
    assert_eq!(PostParams::new(0.005, 4, 4, -1).unwrap().max_keypoints, None);
}

#[test]
fn network_refuses_sizes_that_are_not_multiples_of_eight() {
    let model = SuperPoint::load(&fixture_dir("superpoint")).unwrap();
    let err = model.net().forward(&vec![0.0; 30 * 40], 30, 40).expect_err("must fail");
    assert!(matches!(err, SuperPointError::InputSize { width: 40, height: 30 }), "{err:?}");
}

/// Runs the CLI with a controlled environment: no weights variable, HF_HOME at `hf_home`.
fn cli(hf_home: &Path, envs: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let png = common::fixture_png(dir.path());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"));
    cmd.arg("superpoint")
        .args(["--image".as_ref(), png.as_os_str(), "--out".as_ref(), dir.path().join("o.npz").as_os_str()])
        .args(args)
        .env_remove("SP_DUST3R_SUPERPOINT_WEIGHTS")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_ENDPOINT")
        .env("HF_HOME", hf_home);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn offline_without_weights_names_the_three_ways() {
    let home = tempfile::tempdir().unwrap();
    let out = cli(home.path(), &[("HF_HUB_OFFLINE", "1")], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "--weights",
        "SP_DUST3R_SUPERPOINT_WEIGHTS",
        "Hugging Face",
        "734450e9ffe229074f5998494ddc615475cdb20a",
        "HF_HUB_OFFLINE",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unreachable_hub_gives_the_same_error_with_the_download_failure() {
    let home = tempfile::tempdir().unwrap();
    // A loopback port nothing listens on: the download fails at once, nothing leaves the machine.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let out = cli(home.path(), &[("HF_ENDPOINT", &endpoint)], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("download failed") && err.contains("--weights"), "{err}");
}

#[test]
fn weights_are_found_by_variable_and_in_the_hugging_face_cache() {
    let home = tempfile::tempdir().unwrap();
    let fixture = fixture_dir("superpoint");
    let out =
        cli(home.path(), &[("HF_HUB_OFFLINE", "1"), ("SP_DUST3R_SUPERPOINT_WEIGHTS", fixture.to_str().unwrap())], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let snapshot = home
        .path()
        .join("hub/models--magic-leap-community--superpoint/snapshots/734450e9ffe229074f5998494ddc615475cdb20a");
    std::fs::create_dir_all(&snapshot).unwrap();
    for f in ["model.safetensors", "config.json"] {
        std::fs::copy(fixture.join(f), snapshot.join(f)).unwrap();
    }
    let out = cli(home.path(), &[("HF_HUB_OFFLINE", "1")], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HfCache"));

    // An explicit --weights that lacks files is an error, not a reason to look elsewhere.
    let empty = tempfile::tempdir().unwrap();
    let out = cli(home.path(), &[("HF_HUB_OFFLINE", "1")], &["--weights", empty.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lacks model.safetensors"));
}
