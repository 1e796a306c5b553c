//! DUSt3R against the upstream PyTorch code (naver/dust3r + croco) on the tiny-geometry fixtures
//! with the deterministic weights of spec §10: encoder, decoder hooks, pointmaps and confidences,
//! for the forward and the swapped forward.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::detweights::{fnv1a64, tensor_values, uniform, write_checkpoint};
use common::fixture_dir;
use ndarray_npy::NpzReader;
use sp_dust3r::dust3r::{Dust3r, Pointmap};

/// The fixture's config: meta.json's "config" object, written with Python's `-Infinity` tokens
/// as the Hub's config.json has them.
fn config_json(fixture: &str) -> String {
    let meta = std::fs::read_to_string(fixture_dir(fixture).join("meta.json")).unwrap();
    let start = meta.find("\"config\"").unwrap();
    let open = start + meta[start..].find('{').unwrap();
    let mut depth = 0;
    let close = open + meta[open..].char_indices().find(|&(_, c)| {
        depth += match c { '{' => 1, '}' => -1, _ => 0 };
        depth == 0
    }).unwrap().0;
    meta[open..=close].to_string()
}

/// One checkpoint for the whole test binary (the 64 and 512 fixtures share the weights).
fn checkpoint() -> &'static PathBuf {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let keys = fixture_dir("dust3r_tiny_64").join("state_dict_keys_tiny.json");
        write_checkpoint(dir.path(), &keys, &config_json("dust3r_tiny_64"), false);
        let path = dir.path().to_path_buf();
        (dir, path)
    })
    .1
}

struct Fixture(NpzReader<std::fs::File>);

impl Fixture {
    fn open(name: &str) -> Self {
        Self(NpzReader::new(std::fs::File::open(fixture_dir(name).join("dust3r_tiny_detweights.npz")).unwrap()).unwrap())
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
    let model = Dust3r::load(checkpoint()).expect("load generated checkpoint");
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
