//! The deterministic DUSt3R test weights of shared/spec/dust3r.md §10, regenerated here from the
//! formula (no weight file is shipped) and written as a safetensors file that the production
//! loader reads like the real checkpoint.

use std::collections::HashMap;
use std::path::Path;

/// FNV-1a, 64 bit.
pub fn fnv1a64(text: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The i-th (1-based) uniform value in [0, 1) of the stream seeded by `seed` (splitmix64).
pub fn uniform(seed: u64, i: u64) -> f64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^= z >> 31;
    (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Values of tensor `key` with `shape`, by the §10 rules.
pub fn tensor_values(key: &str, shape: &[usize]) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let seed = fnv1a64(key);
    let transposed_conv = key.contains("act_postprocess.0.1.weight") || key.contains("act_postprocess.1.1.weight");
    let scale = if shape.len() >= 2 {
        let fan_in: usize = if transposed_conv { shape[0] } else { shape[1..].iter().product() };
        Some((3.0 / fan_in as f64).sqrt())
    } else {
        None
    };
    let layer_norm_weight = key.contains("norm") && !key.starts_with("downstream_head") && key.ends_with(".weight");
    let mut values: Vec<f32> = (1..=n as u64)
        .map(|i| {
            let r = 2.0 * uniform(seed, i) - 1.0;
            (match scale {
                Some(s) => r * s,
                None if layer_norm_weight => 1.0 + 0.1 * r,
                None => 0.05 * r,
            }) as f32
        })
        .collect();
    if key.starts_with("downstream_head") && key.ends_with("dpt.head.4.weight") {
        values.iter_mut().for_each(|v| *v *= 0.25);
    }
    values
}

/// Writes `model.safetensors` (every key of `keys_json` except the `scratch.layer_rn.N`
/// aliases, or with `alias_names` only those aliases instead of `layerN_rn`) and `config.json`.
pub fn write_checkpoint(dir: &Path, keys_json: &Path, config_json: &str, alias_names: bool) {
    let keys: HashMap<String, Vec<usize>> =
        serde_json::from_str(&std::fs::read_to_string(keys_json).expect("keys json")).expect("keys json parse");
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (key, shape) in &keys {
        let is_alias = key.contains("scratch.layer_rn.");
        let is_named = key.contains("_rn.weight") && !is_alias;
        if (is_alias && !alias_names) || (is_named && alias_names) {
            continue;
        }
        // An alias holds the same tensor as layer{i+1}_rn: generate it from that name.
        let source = if is_alias {
            let i: usize = key.rsplit('.').nth(1).and_then(|s| s.parse().ok()).expect("alias index");
            key.replace(&format!("layer_rn.{i}.weight"), &format!("layer{}_rn.weight", i + 1))
        } else {
            key.clone()
        };
        let values = tensor_values(&source, shape);
        tensors.push((key.clone(), shape.clone(), values.iter().flat_map(|v| v.to_le_bytes()).collect()));
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(k, s, d)| (k.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).expect("view")))
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).expect("write safetensors");
    std::fs::write(dir.join("config.json"), config_json).expect("write config");
}
