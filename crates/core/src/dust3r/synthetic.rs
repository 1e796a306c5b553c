//! Deterministic DUSt3R weights (shared/spec/dust3r.md §10): every tensor derived from its key
//! by a hash-seeded stream, so tests and benchmarks get the real checkpoint's layout at any
//! geometry without shipping a weight file. Not a trained model.

use std::path::Path;

use super::{ConfigError, Dust3rConfig, HeadKind};

/// A small geometry (512x512 input, 4 encoder blocks of 256, 12 decoder blocks of 256) whose pair
/// takes a few seconds on two cores: enough to keep a pair in flight while a camera streams, for
/// `bench priority` and the node's load test.
pub const SMALL_CONFIG: &str = r#"{"output_mode": "pts3d", "head_type": "dpt", "depth_mode": ["exp", -Infinity, Infinity], "conf_mode": ["exp", 1, Infinity], "patch_size": 16, "enc_embed_dim": 256, "enc_depth": 4, "enc_num_heads": 4, "dec_embed_dim": 256, "dec_depth": 12, "dec_num_heads": 4, "pos_embed": "RoPE100"}"#;

/// FNV-1a, 64 bit.
pub fn fnv1a64(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// The i-th (1-based) uniform value in [0, 1) of the stream seeded by `seed`.
pub fn uniform(seed: u64, i: u64) -> f64 {
    crate::rng::SplitMix64::nth_f64(seed, i)
}

/// Values of tensor `key` with `shape`: uniform in ±sqrt(3 / fan_in) for matrices and kernels
/// (fan_in = dim 0 for the two transposed convolutions), 1 ± 0.1 for LayerNorm scales, ±0.05
/// for other vectors; the final DPT conv scaled by 1/4.
pub fn tensor_values(key: &str, shape: &[usize]) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let seed = fnv1a64(key);
    let transposed_conv = key.contains("act_postprocess.0.1.weight") || key.contains("act_postprocess.1.1.weight");
    let scale = (shape.len() >= 2).then(|| {
        let fan_in: usize = if transposed_conv { shape[0] } else { shape[1..].iter().product() };
        (3.0 / fan_in as f64).sqrt()
    });
    let layer_norm_weight = key.contains("norm") && !key.starts_with("downstream_head") && key.ends_with(".weight");
    let head_out = key.starts_with("downstream_head") && key.ends_with("dpt.head.4.weight");
    (1..=n as u64)
        .map(|i| {
            let r = 2.0 * uniform(seed, i) - 1.0;
            let v = match scale {
                Some(s) => r * s,
                None if layer_norm_weight => 1.0 + 0.1 * r,
                None => 0.05 * r,
            } as f32;
            if head_out {
                v * 0.25
            } else {
                v
            }
        })
        .collect()
}

/// Every tensor of a DUSt3R DPT checkpoint with this geometry, as the Hub's model.safetensors
/// names them (spec §8; `layerN_rn`, not the `layer_rn.N` aliases).
pub fn checkpoint_layout(c: &Dust3rConfig) -> Vec<(String, Vec<usize>)> {
    let (e, d, p) = (c.enc_embed_dim, c.dec_embed_dim, c.patch_size);
    let (me, md) = (c.mlp_dim(e), c.mlp_dim(d));
    let mut t: Vec<(String, Vec<usize>)> = Vec::new();
    let mut add = |name: String, shape: &[usize]| t.push((name, shape.to_vec()));
    let lin = |add: &mut dyn FnMut(String, &[usize]), name: String, i: usize, o: usize| {
        add(format!("{name}.weight"), &[o, i]);
        add(format!("{name}.bias"), &[o]);
    };
    let norm = |add: &mut dyn FnMut(String, &[usize]), name: String, dim: usize| {
        add(format!("{name}.weight"), &[dim]);
        add(format!("{name}.bias"), &[dim]);
    };
    add("mask_token".into(), &[1, 1, d]);
    add("patch_embed.proj.weight".into(), &[e, 3, p, p]);
    add("patch_embed.proj.bias".into(), &[e]);
    for i in 0..c.enc_depth {
        let b = format!("enc_blocks.{i}");
        for n in ["norm1", "norm2"] {
            norm(&mut add, format!("{b}.{n}"), e);
        }
        lin(&mut add, format!("{b}.attn.qkv"), e, 3 * e);
        lin(&mut add, format!("{b}.attn.proj"), e, e);
        lin(&mut add, format!("{b}.mlp.fc1"), e, me);
        lin(&mut add, format!("{b}.mlp.fc2"), me, e);
    }
    norm(&mut add, "enc_norm".into(), e);
    lin(&mut add, "decoder_embed".into(), e, d);
    for branch in ["dec_blocks", "dec_blocks2"] {
        for i in 0..c.dec_depth {
            let b = format!("{branch}.{i}");
            for n in ["norm1", "norm2", "norm3", "norm_y"] {
                norm(&mut add, format!("{b}.{n}"), d);
            }
            lin(&mut add, format!("{b}.attn.qkv"), d, 3 * d);
            lin(&mut add, format!("{b}.attn.proj"), d, d);
            for n in ["projq", "projk", "projv", "proj"] {
                lin(&mut add, format!("{b}.cross_attn.{n}"), d, d);
            }
            lin(&mut add, format!("{b}.mlp.fc1"), d, md);
            lin(&mut add, format!("{b}.mlp.fc2"), md, d);
        }
    }
    norm(&mut add, "dec_norm".into(), d);
    for head in ["downstream_head1", "downstream_head2"] {
        match c.head() {
            Some(HeadKind::Linear) => lin(&mut add, format!("{head}.proj"), d, 4 * p * p),
            _ => dpt_layout(&mut add, head, [e, d, d, d]),
        }
    }
    t
}

/// One DPT head's tensors; `tokens` are the widths of the four entries it reads.
fn dpt_layout(add: &mut dyn FnMut(String, &[usize]), head: &str, tokens: [usize; 4]) {
    let dims = [96, 192, 384, 768];
    let h = format!("{head}.dpt");
    for i in 0..4 {
        add(format!("{h}.act_postprocess.{i}.0.weight"), &[dims[i], tokens[i], 1, 1]);
        add(format!("{h}.act_postprocess.{i}.0.bias"), &[dims[i]]);
    }
    for (i, k) in [(0usize, 4usize), (1, 2)] {
        add(format!("{h}.act_postprocess.{i}.1.weight"), &[dims[i], dims[i], k, k]);
        add(format!("{h}.act_postprocess.{i}.1.bias"), &[dims[i]]);
    }
    add(format!("{h}.act_postprocess.3.1.weight"), &[dims[3], dims[3], 3, 3]);
    add(format!("{h}.act_postprocess.3.1.bias"), &[dims[3]]);
    for (i, dim) in dims.iter().enumerate() {
        add(format!("{h}.scratch.layer{}_rn.weight", i + 1), &[256, *dim, 3, 3]);
    }
    for r in 1..=4 {
        for u in 1..=2 {
            for cv in 1..=2 {
                add(format!("{h}.scratch.refinenet{r}.resConfUnit{u}.conv{cv}.weight"), &[256, 256, 3, 3]);
                add(format!("{h}.scratch.refinenet{r}.resConfUnit{u}.conv{cv}.bias"), &[256]);
            }
        }
        add(format!("{h}.scratch.refinenet{r}.out_conv.weight"), &[256, 256, 1, 1]);
        add(format!("{h}.scratch.refinenet{r}.out_conv.bias"), &[256]);
    }
    for (n, o, i, k) in [(0, 128, 256, 3), (2, 128, 128, 3), (4, 4, 128, 1)] {
        add(format!("{h}.head.{n}.weight"), &[o, i, k, k]);
        add(format!("{h}.head.{n}.bias"), &[o]);
    }
}

/// Writes a deterministic checkpoint (`model.safetensors` + `config.json`) for `config_json`.
pub fn write_checkpoint(dir: &Path, config_json: &str) -> Result<(), CheckpointError> {
    let config = Dust3rConfig::from_json(config_json)?;
    let layout = checkpoint_layout(&config);
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = layout
        .into_iter()
        .map(|(k, s)| {
            let bytes = tensor_values(&k, &s).iter().flat_map(|v| v.to_le_bytes()).collect();
            (k, s, bytes)
        })
        .collect();
    let views = data
        .iter()
        .map(|(k, s, d)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d).map(|v| (k.clone(), v))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors"))?;
    Ok(std::fs::write(dir.join("config.json"), config_json)?)
}

/// Why a synthetic checkpoint could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The config is not one the model runs.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// safetensors refused a tensor or the file.
    #[error(transparent)]
    Safetensors(#[from] safetensors::SafeTensorError),
    /// config.json could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
