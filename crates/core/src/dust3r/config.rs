use std::path::Path;

use serde::Deserialize;

use crate::weights::WeightsError;

/// The constructor arguments saved in the checkpoint's `config.json` (PyTorchModelHubMixin) that
/// shape the network. Any encoder/decoder width, depth and head count works as long as the head
/// dimension is a multiple of 4 (RoPE2D splits it in halves of pairs).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Dust3rConfig {
    /// Patch side in pixels.
    #[serde(default = "default_patch")]
    pub patch_size: usize,
    /// Encoder width.
    pub enc_embed_dim: usize,
    /// Encoder blocks.
    pub enc_depth: usize,
    /// Encoder attention heads.
    pub enc_num_heads: usize,
    /// Decoder width.
    pub dec_embed_dim: usize,
    /// Decoder blocks (per branch).
    pub dec_depth: usize,
    /// Decoder attention heads.
    pub dec_num_heads: usize,
    /// MLP width over model width.
    #[serde(default = "default_mlp_ratio")]
    pub mlp_ratio: f64,
    /// Position embedding, `RoPE<base>`.
    #[serde(default = "default_pos_embed")]
    pub pos_embed: String,
    /// Head type: `dpt` or `linear`.
    #[serde(default = "default_head")]
    pub head_type: String,
    /// The training resolution `[height, width]` (`[512, 512]` or `[224, 224]` on the Hub).
    #[serde(default)]
    pub img_size: Option<Vec<usize>>,
    /// Output mode (`pts3d`).
    #[serde(default = "default_output")]
    pub output_mode: String,
    /// `["exp", min, max]`; the bounds are ±Infinity in the released file.
    #[serde(default)]
    pub depth_mode: Option<(String, Option<f64>, Option<f64>)>,
    /// `["exp", min, max]` for the confidence.
    #[serde(default)]
    pub conf_mode: Option<(String, Option<f64>, Option<f64>)>,
}

fn default_patch() -> usize {
    16
}
fn default_mlp_ratio() -> f64 {
    4.0
}
fn default_pos_embed() -> String {
    "RoPE100".into()
}
fn default_head() -> String {
    "dpt".into()
}
fn default_output() -> String {
    "pts3d".into()
}

impl Dust3rConfig {
    /// Reads and checks a config.json.
    pub fn from_file(path: &Path) -> Result<Self, WeightsError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| WeightsError::Io { path: path.to_path_buf(), source })?;
        Self::from_json(&text).map_err(|e| WeightsError::Config { path: path.to_path_buf(), reason: e.to_string() })
    }

    /// Parses the config, accepting the non-standard `Infinity`, `-Infinity` and `NaN` tokens
    /// Python's json module writes (they become absent bounds).
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = serde_json::from_str(&python_json_to_standard(text))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Refuses what this implementation cannot run.
    fn validate(&self) -> Result<(), ConfigError> {
        self.unsupported().map_or(Ok(()), |why| Err(ConfigError::Unsupported(why)))
    }

    /// What this implementation cannot run, in words, if anything.
    fn unsupported(&self) -> Option<String> {
        let check_heads = |what: &str, dim: usize, heads: usize| {
            (heads == 0 || !dim.is_multiple_of(heads) || !(dim / heads).is_multiple_of(4)).then(|| {
                format!("{what}: width {dim} with {heads} heads needs a head dimension that is a multiple of 4")
            })
        };
        if let Some(why) = check_heads("encoder", self.enc_embed_dim, self.enc_num_heads)
            .or_else(|| check_heads("decoder", self.dec_embed_dim, self.dec_num_heads))
        {
            return Some(why);
        }
        if self.patch_size == 0 || self.enc_depth == 0 || self.dec_depth < 4 {
            return Some(format!(
                "patch size {}, encoder depth {}, decoder depth {} (needs >= 4 for the decoder hooks)",
                self.patch_size, self.enc_depth, self.dec_depth
            ));
        }
        if let Some(size) = self.img_size.as_ref().filter(|s| s.len() != 2 || s.contains(&0)) {
            return Some(format!("img_size {size:?} is not [height, width]"));
        }
        if self.rope_base().is_none() {
            return Some(format!("pos_embed {:?} is not RoPE<base>", self.pos_embed));
        }
        if self.head().is_none() || self.output_mode != "pts3d" {
            return Some(format!(
                "head {:?} / output {:?}: only the DPT and linear pts3d heads are supported",
                self.head_type, self.output_mode
            ));
        }
        for (what, mode) in [("depth_mode", &self.depth_mode), ("conf_mode", &self.conf_mode)] {
            if let Some((kind, _, _)) = mode {
                if kind != "exp" {
                    return Some(format!("{what} {kind:?}: only \"exp\" is supported"));
                }
            }
        }
        None
    }

    /// The head `head_type` names.
    pub fn head(&self) -> Option<HeadKind> {
        match self.head_type.as_str() {
            "dpt" => Some(HeadKind::Dpt),
            "linear" => Some(HeadKind::Linear),
            _ => None,
        }
    }

    /// The network input's side (its long side in upstream's mode): 224 for a checkpoint
    /// trained at 224 (`img_size` [224, 224]), else 512, the side of upstream's 512 models and of
    /// the tt-model server (a test model's `img_size` says nothing about what it is fed).
    pub fn input_size(&self) -> u32 {
        match self.img_size.as_deref() {
            Some([224, 224]) => 224,
            _ => 512,
        }
    }

    /// RoPE frequency base from `RoPE<base>`.
    pub fn rope_base(&self) -> Option<f64> {
        self.pos_embed.strip_prefix("RoPE").and_then(|b| b.parse().ok())
    }

    /// The MLP's hidden width for a block of `width`.
    pub fn mlp_dim(&self, width: usize) -> usize {
        (width as f64 * self.mlp_ratio).round() as usize
    }

    /// Decoder list entries the DPT heads read: encoder output, 2/4 and 3/4 of the decoder, last.
    pub fn hooks(&self) -> [usize; 4] {
        let d = self.dec_depth;
        [0, d * 2 / 4, d * 3 / 4, d]
    }

    /// Lower confidence bound of `conf_mode` (1 in the released model).
    pub fn conf_min(&self) -> f32 {
        self.conf_mode.as_ref().and_then(|m| m.1).unwrap_or(1.0) as f32
    }
}

/// The head that turns decoder tokens into pointmaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadKind {
    /// DPT (`downstream_head*.dpt.*`): reads the encoder and three decoder entries.
    Dpt,
    /// One linear layer per token to its patch of pixels (`downstream_head*.proj`).
    Linear,
}

/// Replaces bare `Infinity`, `-Infinity` and `NaN` (outside strings) by `null`.
fn python_json_to_standard(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        if let Some(token) = ["-Infinity", "Infinity", "NaN"].iter().find(|t| rest.starts_with(**t)) {
            out.push_str("null");
            rest = &rest[token.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Why a config.json is not one this implementation runs.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON of the config's shape.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A geometry or head this implementation does not support.
    #[error("{0}")]
    Unsupported(String),
}
