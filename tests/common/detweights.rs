//! The deterministic DUSt3R test weights of shared/spec/dust3r.md §10 (the formula lives in
//! `sp_dust3r_core::dust3r::synthetic`; its test vectors are checked in tests/dust3r_tiny.rs), written
//! under the key list the upstream class produced (the fixture's state_dict_keys_tiny.json) as a
//! safetensors file that the production loader reads like the real checkpoint.

use std::collections::HashMap;
use std::path::Path;

#[allow(unused_imports)]
pub use sp_dust3r_core::dust3r::synthetic::{fnv1a64, tensor_values, uniform};

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
        .map(|(k, s, d)| {
            (k.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).expect("view"))
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).expect("write safetensors");
    std::fs::write(dir.join("config.json"), config_json).expect("write config");
}
