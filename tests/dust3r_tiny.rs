//! DUSt3R against the upstream PyTorch code (naver/dust3r + croco) on the tiny-geometry fixtures
//! with the deterministic weights of spec §10: encoder, decoder hooks, pointmaps and confidences,
//! for the forward and the swapped forward.

// Reference values are written as the upstream code printed them.
#![allow(clippy::excessive_precision)]

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::detweights::{fnv1a64, tensor_values, uniform, write_checkpoint};
use common::fixture_dir;
use ndarray_npy::NpzReader;
use sp_dust3r_core::dust3r::{Dust3r, Pointmap};

/// A fixture's folder: ours in tests/fixtures, else the shared one beside the checkout
/// (`dust3r_tiny_linear_64`, upstream's outputs for the linear head).
fn fixture_path(name: &str) -> PathBuf {
    let ours = fixture_dir(name);
    if ours.exists() {
        return ours;
    }
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures").join(name);
    assert!(shared.exists(), "fixture {name} is neither in tests/fixtures nor at {}", shared.display());
    shared
}

/// The fixture's config: meta.json's "config" object, written with Python's `-Infinity` tokens
/// as the Hub's config.json has them.
fn config_json(fixture: &str) -> String {
    let meta = std::fs::read_to_string(fixture_path(fixture).join("meta.json")).unwrap();
    let start = meta.find("\"config\"").unwrap();
    let open = start + meta[start..].find('{').unwrap();
    let mut depth = 0;
    let close = open
        + meta[open..]
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .unwrap()
            .0;
    meta[open..=close].to_string()
}

/// One checkpoint for the whole test binary (the 64 and 512 fixtures share the weights).
fn checkpoint() -> &'static PathBuf {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| checkpoint_of("dust3r_tiny_64")).1
}

/// The deterministic-weight checkpoint of a fixture's key list and config.
fn checkpoint_of(fixture: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let keys = fixture_path(fixture).join("state_dict_keys_tiny.json");
    write_checkpoint(dir.path(), &keys, &config_json(fixture), false);
    let path = dir.path().to_path_buf();
    (dir, path)
}

struct Fixture(NpzReader<std::fs::File>);

impl Fixture {
    fn open(name: &str) -> Self {
        Self(
            NpzReader::new(std::fs::File::open(fixture_path(name).join("dust3r_tiny_detweights.npz")).unwrap())
                .unwrap(),
        )
    }
    fn get(&mut self, key: &str) -> (Vec<f32>, Vec<usize>) {
        let a: ndarray::ArrayD<f32> = self.0.by_name(&format!("{key}.npy")).unwrap();
        (a.iter().copied().collect(), a.shape().to_vec())
    }
}

/// max |a - b| / max |b|: error relative to the reference's scale.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max) / scale
}

fn check(what: &str, ours: &[f32], reference: &[f32], tol: f32) {
    let e = rel_err(ours, reference);
    eprintln!("{what}: relative error {e:.2e}");
    assert!(e <= tol, "{what}: relative error {e} > {tol}");
}

fn check_pointmap(what: &str, ours: &Pointmap, fx: &mut Fixture, pts: &str, conf: &str) {
    check(&format!("{what} points"), &ours.points, &fx.get(pts).0, 1e-3);
    check(&format!("{what} confidence"), &ours.confidence, &fx.get(conf).0, 1e-3);
}

#[test]
fn deterministic_weights_match_the_spec_test_vectors() {
    assert_eq!(fnv1a64("patch_embed.proj.weight"), 0xb757c5cb8f90eec2);
    let seed = fnv1a64("patch_embed.proj.weight");
    for (i, want) in [0.6485455921966938, 0.16137300645099428, 0.06295592834385655].iter().enumerate() {
        assert!((uniform(seed, i as u64 + 1) - want).abs() < 1e-15);
    }
    let w = tensor_values("patch_embed.proj.weight", &[128, 3, 16, 16]);
    for (got, want) in w.iter().zip([0.018568199f32, -0.042328373, -0.054630511]) {
        assert!((got - want).abs() < 1e-8, "{got} vs {want}");
    }
    let nw = tensor_values("enc_norm.weight", &[128]);
    let nb = tensor_values("enc_norm.bias", &[128]);
    assert!((nw[0] - 0.96629119).abs() < 1e-7 && (nw[1] - 1.00947821).abs() < 1e-7);
    assert!((nb[0] + 0.016372893).abs() < 1e-8 && (nb[1] - 0.011776355).abs() < 1e-8);
}

fn run_fixture(name: &str) {
    run_fixture_on(name, &Dust3r::load(checkpoint()).expect("load generated checkpoint"));
}

/// Encoder, decoder hooks, both heads and the swapped pass of `model` against fixture `name`.
fn run_fixture_on(name: &str, model: &Dust3r) {
    let mut fx = Fixture::open(name);
    let (img1, shape) = fx.get("img1");
    let (img2, _) = fx.get("img2");
    let (h, w) = (shape[1], shape[2]);

    let e1 = model.encode(&img1, h, w).unwrap();
    let e2 = model.encode(&img2, h, w).unwrap();
    check("enc1", &e1.tokens, &fx.get("enc1").0, 1e-4);
    check("enc2", &e2.tokens, &fx.get("enc2").0, 1e-4);

    let [b1, b2] = model.decode(&e1, &e2).unwrap();
    let (r1, s1) = fx.get("dec1_hooks");
    let (r2, _) = fx.get("dec2_hooks");
    let per = s1[1] * s1[2];
    for (i, hook) in ["6", "9", "12"].iter().enumerate() {
        check(&format!("branch 1 hook {hook}"), &b1.hooks[i], &r1[i * per..(i + 1) * per], 1e-4);
        check(&format!("branch 2 hook {hook}"), &b2.hooks[i], &r2[i * per..(i + 1) * per], 1e-4);
    }

    let pred = model.predict(&e1, &e2).unwrap();
    check_pointmap("view 1", &pred.view1, &mut fx, "pts3d_1", "conf_1");
    check_pointmap("view 2 in 1", &pred.view2_in_1, &mut fx, "pts3d_2_in_1", "conf_2");

    // The swapped pass reuses both encoder outputs.
    let sym = model.predict(&e2, &e1).unwrap();
    check_pointmap("swapped view 2", &sym.view1, &mut fx, "sym_pts3d_2", "sym_conf_2");
    check_pointmap("swapped view 1 in 2", &sym.view2_in_1, &mut fx, "sym_pts3d_1_in_2", "sym_conf_1");
}

#[test]
fn tiny_64_matches_upstream() {
    run_fixture("dust3r_tiny_64");
}

#[test]
fn tiny_512_matches_upstream() {
    run_fixture("dust3r_tiny_512");
}

/// The linear head (the 224 and 512 linear checkpoints' head) as upstream computes it.
#[test]
fn tiny_linear_64_matches_upstream() {
    let (_dir, weights) = checkpoint_of("dust3r_tiny_linear_64");
    let model = Dust3r::load(&weights).unwrap();
    assert_eq!(model.config().head(), Some(sp_dust3r_core::dust3r::HeadKind::Linear));
    run_fixture_on("dust3r_tiny_linear_64", &model);
}

/// Non-square inputs (3 x 5 tokens), written with upstream's code by
/// tools/peers/dust3r_upstream_fixture.py: a square fixture cannot tell rows from columns in the
/// patch grid, RoPE positions or the heads' layouts.
#[test]
fn tiny_non_square_matches_upstream_with_either_head() {
    for fixture in ["dust3r_tiny_linear_48x80", "dust3r_tiny_dpt_48x80"] {
        let (_dir, weights) = checkpoint_of(fixture);
        let model = Dust3r::load(&weights).unwrap();
        let mut fx = Fixture::open(fixture);
        assert_eq!(fx.get("pts3d_1").1, [48, 80, 3], "{fixture}");
        eprintln!("{fixture}:");
        run_fixture_on(fixture, &model);
    }
}

/// A config.json of one head over the other head's weights is refused with both named.
#[test]
fn a_config_of_the_other_head_is_refused() {
    let (_dir, weights) = checkpoint_of("dust3r_tiny_linear_64");
    std::fs::write(weights.join("config.json"), config_json("dust3r_tiny_64")).unwrap();
    let err = Dust3r::load(&weights).err().expect("must fail").to_string();
    assert!(err.contains("\"dpt\"") && err.contains("downstream_head1.proj.weight"), "{err}");
}

/// The heads must read decoder entries 6, 9 and dec_norm(12). The fixture can tell these apart
/// from their neighbours (so a mis-wired model fails the comparisons above), and our hooks are
/// exactly those entries.
#[test]
fn dpt_hooks_are_wired_to_blocks_6_9_and_normed_12() {
    let model = Dust3r::load(checkpoint()).unwrap();
    let mut fx = Fixture::open("dust3r_tiny_64");
    let (img1, shape) = fx.get("img1");
    let (img2, _) = fx.get("img2");
    let (h, w) = (shape[1], shape[2]);
    let (e1, e2) = (model.encode(&img1, h, w).unwrap(), model.encode(&img2, h, w).unwrap());
    let (all, normed) = model.decoder_outputs(&e1, &e2).unwrap();
    let hooks = model.decode(&e1, &e2).unwrap();
    for (branch, key) in [(0usize, "dec1_hooks"), (1, "dec2_hooks")] {
        let (r, s) = fx.get(key);
        let per = s[1] * s[2];
        let reference = |i: usize| &r[i * per..(i + 1) * per];
        let blocks = &all[branch];
        assert_eq!(blocks.len(), 12);
        // Entry k is the output of block k (1-based): blocks[k - 1].
        for (i, k) in [(0usize, 6usize), (1, 9)] {
            assert!(rel_err(&blocks[k - 1], reference(i)) < 1e-4, "branch {branch} entry {k}");
            for wrong in [k - 1, k + 1] {
                assert!(rel_err(&blocks[wrong - 1], reference(i)) > 1e-2, "fixture cannot tell entry {k} from {wrong}");
            }
            assert_eq!(hooks[branch].hooks[i], blocks[k - 1]);
        }
        assert!(rel_err(&normed[branch], reference(2)) < 1e-4, "branch {branch} entry 12 is dec_norm(block 12)");
        assert!(rel_err(&blocks[11], reference(2)) > 1e-2, "fixture cannot tell normed from raw block 12");
        assert!(rel_err(&blocks[10], reference(2)) > 1e-2);
        assert_eq!(hooks[branch].hooks[2], normed[branch]);
    }
}

/// Our description of the checkpoint layout (used to build full-size benchmark weights) names
/// exactly the tensors the upstream class has, minus the `layer_rn.N` aliases safetensors drops.
#[test]
fn checkpoint_layout_matches_the_upstream_key_list() {
    use std::collections::HashMap;
    let keys: HashMap<String, Vec<usize>> = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir("dust3r_tiny_64").join("state_dict_keys_tiny.json")).unwrap(),
    )
    .unwrap();
    let upstream: HashMap<String, Vec<usize>> =
        keys.into_iter().filter(|(k, _)| !k.contains("scratch.layer_rn.")).collect();
    let config = sp_dust3r_core::dust3r::Dust3rConfig::from_json(&config_json("dust3r_tiny_64")).unwrap();
    let ours: HashMap<String, Vec<usize>> =
        sp_dust3r_core::dust3r::synthetic::checkpoint_layout(&config).into_iter().collect();
    let mut differ: Vec<String> = upstream
        .iter()
        .filter(|(k, s)| ours.get(*k) != Some(s))
        .map(|(k, s)| format!("{k}: upstream {s:?}, ours {:?}", ours.get(k)))
        .chain(ours.keys().filter(|k| !upstream.contains_key(*k)).map(|k| format!("{k}: only ours")))
        .collect();
    differ.sort();
    assert!(differ.is_empty(), "{} differences: {:?}", differ.len(), &differ[..differ.len().min(10)]);
}

/// The real model's layout has the tensor count the spec derives from the official class.
#[test]
fn full_size_layout_has_1001_tensors() {
    let config = sp_dust3r_core::dust3r::Dust3rConfig::from_json(FULL_CONFIG).unwrap();
    let layout = sp_dust3r_core::dust3r::synthetic::checkpoint_layout(&config);
    assert_eq!(layout.len(), 1001);
    let params: usize = layout.iter().map(|(_, s)| s.iter().product::<usize>()).sum();
    assert!((571_000_000..571_400_000).contains(&params), "{params} parameters");
}

/// config.json of naver/DUSt3R_ViTLarge_BaseDecoder_512_dpt as spec §0 gives its arguments.
const FULL_CONFIG: &str = r#"{"output_mode": "pts3d", "head_type": "dpt", "depth_mode": ["exp", -Infinity, Infinity],
 "conf_mode": ["exp", 1, Infinity], "landscape_only": false, "patch_embed_cls": "PatchEmbedDust3R",
 "img_size": [512, 512], "patch_size": 16, "enc_embed_dim": 1024, "enc_depth": 24, "enc_num_heads": 16,
 "dec_embed_dim": 768, "dec_depth": 12, "dec_num_heads": 12, "pos_embed": "RoPE100"}"#;

#[test]
fn config_parsing_accepts_python_infinities_and_refuses_bad_geometry() {
    let c = sp_dust3r_core::dust3r::Dust3rConfig::from_json(FULL_CONFIG).unwrap();
    assert_eq!((c.enc_embed_dim, c.enc_depth, c.dec_depth, c.hooks()), (1024, 24, 12, [0, 6, 9, 12]));
    assert_eq!(c.conf_min(), 1.0);
    assert_eq!(c.depth_mode, Some(("exp".to_string(), None, None)));
    // A string containing the word Infinity is left alone.
    let named = FULL_CONFIG.replace("PatchEmbedDust3R", "Infinity");
    assert!(sp_dust3r_core::dust3r::Dust3rConfig::from_json(&named).is_ok());
    let bad = FULL_CONFIG.replace("\"enc_num_heads\": 16", "\"enc_num_heads\": 12");
    let err = sp_dust3r_core::dust3r::Dust3rConfig::from_json(&bad).unwrap_err().to_string();
    assert!(err.contains("multiple of 4"), "{err}");
    let bad = FULL_CONFIG.replace("RoPE100", "cosine");
    assert!(sp_dust3r_core::dust3r::Dust3rConfig::from_json(&bad).unwrap_err().to_string().contains("RoPE"));
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    use sp_dust3r_core::dust3r::Dust3rError;
    use sp_dust3r_core::weights::WeightsError;
    let src = std::fs::read(checkpoint().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&src).unwrap();
    type Tensors = Vec<(String, Vec<usize>, Vec<u8>)>;
    let rewrite = |edit: &dyn Fn(&mut Tensors)| {
        let mut t: Tensors =
            st.tensors().into_iter().map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec())).collect();
        edit(&mut t);
        let dir = tempfile::tempdir().unwrap();
        let views: Vec<_> = t
            .iter()
            .map(|(n, s, d)| {
                (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).unwrap())
            })
            .collect();
        safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
        std::fs::copy(checkpoint().join("config.json"), dir.path().join("config.json")).unwrap();
        Dust3r::load(dir.path()).err().expect("must fail")
    };
    match rewrite(&|t| t.retain(|(n, _, _)| n != "dec_blocks2.7.cross_attn.projk.weight")) {
        Dust3rError::Weights(WeightsError::MissingTensor { name, .. }) => {
            assert_eq!(name, "dec_blocks2.7.cross_attn.projk.weight")
        }
        other => panic!("{other:?}"),
    }
    match rewrite(&|t| {
        if let Some(e) = t.iter_mut().find(|(n, _, _)| n == "enc_blocks.1.mlp.fc1.weight") {
            e.1 = vec![128, 512];
        }
    }) {
        Dust3rError::Weights(WeightsError::WrongShape { name, got, expected, .. }) => {
            assert_eq!((name.as_str(), got, expected), ("enc_blocks.1.mlp.fc1.weight", vec![128, 512], vec![512, 128]))
        }
        other => panic!("{other:?}"),
    }
    // The `layer_rn.N` alias spelling loads too.
    let dir = tempfile::tempdir().unwrap();
    let keys = fixture_dir("dust3r_tiny_64").join("state_dict_keys_tiny.json");
    common::detweights::write_checkpoint(dir.path(), &keys, &config_json("dust3r_tiny_64"), true);
    assert!(Dust3r::load(dir.path()).is_ok());
}

/// Writes a fixture view (planar, [-1, 1]) as an 8-bit PNG; returns the path and the
/// normalised planar image the PNG decodes to.
fn view_png(fx: &mut Fixture, key: &str, dir: &std::path::Path) -> (PathBuf, Vec<f32>) {
    let (img, shape) = fx.get(key);
    let (h, w) = (shape[1], shape[2]);
    let mut rgb = vec![0u8; h * w * 3];
    for c in 0..3 {
        for i in 0..h * w {
            rgb[i * 3 + c] = (((img[c * h * w + i] + 1.0) / 2.0 * 255.0).round()).clamp(0.0, 255.0) as u8;
        }
    }
    let path = dir.join(format!("{key}.png"));
    image::RgbImage::from_raw(w as u32, h as u32, rgb.clone()).unwrap().save(&path).unwrap();
    let mut planar = vec![0.0; 3 * h * w];
    for c in 0..3 {
        for i in 0..h * w {
            planar[c * h * w + i] = (rgb[i * 3 + c] as f32 / 255.0 - 0.5) / 0.5;
        }
    }
    (path, planar)
}

#[test]
fn cli_writes_both_pointmaps_and_timing() {
    let dir = tempfile::tempdir().unwrap();
    let mut fx = Fixture::open("dust3r_tiny_512");
    let (png1, img1) = view_png(&mut fx, "img1", dir.path());
    let (png2, img2) = view_png(&mut fx, "img2", dir.path());
    let out = dir.path().join("pair.npz");
    let dust3r_cli = |extra: &[&str]| -> serde_json::Value {
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
            .arg("dust3r")
            .args(["--weights".as_ref(), checkpoint().as_os_str()])
            .args(["--image1".as_ref(), png1.as_os_str(), "--image2".as_ref(), png2.as_os_str()])
            .args(["--out".as_ref(), out.as_os_str()])
            .args(extra)
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let stdout = String::from_utf8(run.stdout).unwrap();
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
    };
    let last = dust3r_cli(&[]);
    for k in ["decode", "preprocess", "encoder", "decoder", "heads", "pose", "total"] {
        assert!(last["timing_ms"][k].as_f64().is_some(), "timing_ms.{k} missing: {last}");
    }

    // The CLI's pointmaps are the library's on the same (8-bit) images, and close to the
    // upstream reference computed from the unquantised ones.
    let model = Dust3r::load(checkpoint()).unwrap();
    let (e1, e2) = (model.encode(&img1, 512, 512).unwrap(), model.encode(&img2, 512, 512).unwrap());
    let pred = model.predict(&e1, &e2).unwrap();
    let mut npz = NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let pts1: ndarray::Array3<f32> = npz.by_name("pts3d1").unwrap();
    let pts2: ndarray::Array3<f32> = npz.by_name("pts3d2").unwrap();
    let conf1: ndarray::Array2<f32> = npz.by_name("conf1").unwrap();
    let conf2: ndarray::Array2<f32> = npz.by_name("conf2").unwrap();
    assert_eq!((pts1.dim(), conf2.dim()), ((512, 512, 3), (512, 512)));
    assert!(rel_err(pts1.as_slice().unwrap(), &pred.view1.points) < 1e-6);
    assert!(rel_err(pts2.as_slice().unwrap(), &pred.view2_in_1.points) < 1e-6);
    assert!(rel_err(conf1.as_slice().unwrap(), &pred.view1.confidence) < 1e-6);
    assert!(rel_err(pts1.as_slice().unwrap(), &fx.get("pts3d_1").0) < 0.05);

    // Upstream preparation: a square input becomes a 4:3 crop, 512x384.
    dust3r_cli(&["--preprocess", "upstream"]);
    let mut npz = NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let pts: ndarray::Array3<f32> = npz.by_name("pts3d2").unwrap();
    assert_eq!(pts.dim(), (384, 512, 3));

    // With --pose: the swapped pass and PairViewer, the same as the library computes them.
    let last = dust3r_cli(&["--pose"]);
    let swapped = model.predict(&e2, &e1).unwrap();
    let want =
        sp_dust3r_core::geometry::relative_pose(&pred, &swapped, &sp_dust3r_core::geometry::PoseOptions::default());
    let mut npz = NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    match want {
        Ok(p) => {
            let t21 = p.t_cam1_cam2.inverse();
            let r: ndarray::Array2<f64> = npz.by_name("R").unwrap();
            let t: ndarray::Array1<f64> = npz.by_name("t").unwrap();
            let f1: ndarray::Array0<f64> = npz.by_name("focal1").unwrap();
            for i in 0..3 {
                assert!((t[i] - t21.translation[i]).abs() < 1e-9);
                for j in 0..3 {
                    assert!((r[[i, j]] - t21.rotation.matrix()[(i, j)]).abs() < 1e-9);
                }
            }
            assert!((f1.into_scalar() - p.focal1).abs() < 1e-9);
            assert_eq!(last["pose"]["num_inliers"].as_u64(), Some(p.num_inliers as u64));
        }
        Err(reason) => {
            assert!(last["pose"]["pose"].is_null(), "{last}");
            assert_eq!(last["pose"]["reason"].as_str(), Some(reason.to_string().as_str()));
            assert!(npz.by_name::<ndarray::OwnedRepr<f64>, ndarray::Ix2>("R").is_err());
        }
    }

    // --precision bf16: what the CPU runs is in the line; in bf16 the pointmaps correlate with
    // the library's fp32 ones, else they are the same.
    let last = dust3r_cli(&["--precision", "bf16"]);
    let ran = if sp_dust3r_core::tensor::bf16_available() { "bf16" } else { "fp32" };
    assert_eq!(last["precision"].as_str(), Some(ran), "{last}");
    let mut npz = NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let pts1: ndarray::Array3<f32> = npz.by_name("pts3d1").unwrap();
    let conf2: ndarray::Array2<f32> = npz.by_name("conf2").unwrap();
    let (p, c) = (
        pcc(pts1.as_slice().unwrap(), &pred.view1.points),
        pcc(conf2.as_slice().unwrap(), &pred.view2_in_1.confidence),
    );
    assert!(p >= 0.999 && c >= 0.999, "{p} {c}");
}

#[test]
fn offline_without_dust3r_weights_names_the_three_ways() {
    let home = tempfile::tempdir().unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .args(["dust3r", "--image1", "a.png", "--image2", "b.png", "--out", "o.npz"])
        .env_remove("SP_DUST3R_DUST3R_WEIGHTS")
        .env_remove("HF_HUB_CACHE")
        .env("HF_HOME", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    for needle in [
        "--weights",
        "SP_DUST3R_DUST3R_WEIGHTS",
        "naver/DUSt3R_ViTLarge_BaseDecoder_512_dpt",
        "61c57447d7b0adc8a1a30b2b0adec7a8935aa2a3",
    ] {
        assert!(err.contains(needle), "missing {needle:?}: {err}");
    }
}

/// `--ply`: both views' confident points in camera 1's frame with their pixels' colours, as a
/// binary PLY that PyPI plyfile (an independent reader) reads back with the right fields, the
/// count and every value of the same run's NPZ and input PNGs, at a threshold that keeps about
/// half the points.
#[test]
fn cli_writes_the_pair_as_a_ply_that_plyfile_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut fx = Fixture::open("dust3r_tiny_512");
    let (png1, _) = view_png(&mut fx, "img1", dir.path());
    let (png2, _) = view_png(&mut fx, "img2", dir.path());
    let (npz, ply, png) = (dir.path().join("pair.npz"), dir.path().join("pair.ply"), dir.path().join("pair.png"));
    let dust3r_cli = |min_confidence: &str| -> serde_json::Value {
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
            .arg("dust3r")
            .args(["--weights".as_ref(), checkpoint().as_os_str()])
            .args(["--image1".as_ref(), png1.as_os_str(), "--image2".as_ref(), png2.as_os_str()])
            .args(["--out".as_ref(), npz.as_os_str(), "--ply".as_ref(), ply.as_os_str()])
            .args(["--preview".as_ref(), png.as_os_str()])
            .args(["--min-confidence", min_confidence])
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let stdout = String::from_utf8(run.stdout).unwrap();
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
    };
    // The median confidence of the pair as the threshold (printed exactly, an f32's value).
    dust3r_cli("1");
    let mut reader = NpzReader::new(std::fs::File::open(&npz).unwrap()).unwrap();
    let mut conf: Vec<f32> = ["conf1", "conf2"]
        .iter()
        .flat_map(|k| reader.by_name::<ndarray::OwnedRepr<f32>, ndarray::Ix2>(k).unwrap().into_iter())
        .collect();
    conf.sort_by(f32::total_cmp);
    let threshold = format!("{}", conf[conf.len() / 2] as f64);
    let last = dust3r_cli(&threshold);

    let peer = std::process::Command::new(common::peer_python())
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/peers/ply_check.py"))
        .arg("pair")
        .args(["--ply".as_ref(), ply.as_os_str(), "--npz".as_ref(), npz.as_os_str()])
        .args(["--png".as_ref(), png1.as_os_str(), png2.as_os_str()])
        .args(["--min-confidence", &threshold])
        .output()
        .unwrap();
    assert!(peer.status.success(), "{}", String::from_utf8_lossy(&peer.stderr));
    let report: serde_json::Value = serde_json::from_slice(&peer.stdout).unwrap();
    assert_eq!(report["format"], "little", "{report}");
    assert_eq!(report["fields"], common::ply_fields(), "{report}");
    let (count, pixels) = (report["count"].as_u64().unwrap(), report["of_pixels"].as_u64().unwrap());
    assert_eq!(report["expected"].as_u64(), Some(count), "{report}");
    assert_eq!(last["ply_points"].as_u64(), Some(count), "{last}");
    assert!(count > pixels / 3 && count < pixels * 2 / 3, "the median keeps about half: {report}");
    assert_eq!(report["xyz_max_diff"].as_f64(), Some(0.0), "{report}");
    assert_eq!(report["conf_max_diff"].as_f64(), Some(0.0), "{report}");
    assert_eq!(report["rgb_mismatches"].as_u64(), Some(0), "{report}");
    let comments = report["comments"].to_string();
    assert!(comments.contains("camera 1's frame") && comments.contains(&threshold), "{comments}");

    // The preview beside it (on the CPU path): its size, camera 1 drawn (no pose: no camera 2),
    // and view 1's input tile showing the input PNG (512x512 into 170x170, nearest pixel).
    use sp_dust3r_core::preview::{CAMERA1, CAMERA2, LABELS, SIZE, TILE};
    let picture = image::open(&png).unwrap().into_rgb8();
    assert_eq!(picture.dimensions(), SIZE);
    let count = |c: [u8; 3]| picture.pixels().filter(|p| p.0 == c).count();
    assert!(count(CAMERA1) > 50 && count(CAMERA2) == 0, "{} {}", count(CAMERA1), count(CAMERA2));
    let input = image::open(&png1).unwrap().into_rgb8();
    let tile_top = SIZE.1 - TILE - LABELS;
    for (tx, ty) in [(10u32, 20u32), (85, 85), (160, 150)] {
        let at = |t: u32| ((f64::from(t) + 0.5) * 512.0 / f64::from(TILE)) as u32;
        let (gx, gy) = (at(tx), at(ty));
        assert_eq!(picture.get_pixel(tx, tile_top + ty), input.get_pixel(gx, gy), "tile pixel ({tx}, {ty})");
    }
}

/// Pearson's correlation of two outputs, value by value.
fn pcc(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    sp_dust3r_core::eval::hat::correlation(a.iter().zip(b).map(|(&x, &y)| (x as f64, y as f64)))
}

/// In bf16 (where the CPU has a bf16 kernel) every output keeps a PCC of at least 0.999 with
/// upstream's float32 outputs (the p150 port's bar is 0.9962). Without a bf16 kernel the model
/// says it runs fp32. (The deterministic weights give no geometry a pose could be read from.)
#[test]
fn bf16_outputs_correlate_with_upstream() {
    use sp_dust3r_core::tensor::Precision;
    let model = Dust3r::load_in(checkpoint(), Precision::Bf16).unwrap();
    if model.precision() != Precision::Bf16 {
        eprintln!("no bf16 kernel on this CPU: the model runs {}", model.precision().name());
        assert_eq!((model.precision(), sp_dust3r_core::tensor::bf16_available()), (Precision::Fp32, false));
        return;
    }
    let (_linear_dir, linear_weights) = checkpoint_of("dust3r_tiny_linear_48x80");
    let linear = Dust3r::load_in(&linear_weights, Precision::Bf16).unwrap();
    for (name, model) in
        [("dust3r_tiny_64", &model), ("dust3r_tiny_512", &model), ("dust3r_tiny_linear_48x80", &linear)]
    {
        let mut fx = Fixture::open(name);
        let (img1, shape) = fx.get("img1");
        let (img2, _) = fx.get("img2");
        let (h, w) = (shape[1], shape[2]);
        let passes = |m: &Dust3r| {
            let (e1, e2) = (m.encode(&img1, h, w).unwrap(), m.encode(&img2, h, w).unwrap());
            (m.predict(&e1, &e2).unwrap(), m.predict(&e2, &e1).unwrap())
        };
        let (forward, swapped) = passes(model);
        let outputs = [
            (&forward.view1, "pts3d_1", "conf_1"),
            (&forward.view2_in_1, "pts3d_2_in_1", "conf_2"),
            (&swapped.view1, "sym_pts3d_2", "sym_conf_2"),
            (&swapped.view2_in_1, "sym_pts3d_1_in_2", "sym_conf_1"),
        ];
        for (ours, pts, conf) in outputs {
            let (p, c) = (pcc(&ours.points, &fx.get(pts).0), pcc(&ours.confidence, &fx.get(conf).0));
            eprintln!("{name} bf16 {pts}: PCC {p:.6}, {conf}: PCC {c:.6}");
            assert!(p >= 0.999 && c >= 0.999, "{name} {pts} {p} / {conf} {c}");
        }
    }
}

/// `sp_dust3r dust3r --model 224_linear` runs the 224 checkpoint at its input size, names it in
/// its result line, and refuses weights of another checkpoint than the one asked for.
#[test]
fn cli_runs_the_224_linear_checkpoint_and_refuses_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let mut fx = Fixture::open("dust3r_tiny_512");
    let (png1, _) = view_png(&mut fx, "img1", dir.path());
    let (png2, _) = view_png(&mut fx, "img2", dir.path());
    let weights = common::tiny_checkpoint(dir.path(), "224_linear");
    let out = dir.path().join("pair.npz");
    let cli = |model: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
            .arg("dust3r")
            .args(["--weights".as_ref(), weights.as_os_str(), "--model".as_ref(), model.as_ref()])
            .args(["--image1".as_ref(), png1.as_os_str(), "--image2".as_ref(), png2.as_os_str()])
            .args(["--out".as_ref(), out.as_os_str(), "--pose".as_ref()])
            .output()
            .unwrap()
    };
    let run = cli("224_linear");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&run.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(line["model"], "224_linear", "{line}");
    let mut npz = NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let pts1: ndarray::Array3<f32> = npz.by_name("pts3d1").unwrap();
    let conf2: ndarray::Array2<f32> = npz.by_name("conf2").unwrap();
    assert_eq!((pts1.shape(), conf2.shape()), (&[224, 224, 3][..], &[224, 224][..]));
    let run = cli("512_dpt");
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("holds DUSt3R 224_linear, but 512_dpt is configured"), "{err}");
}
