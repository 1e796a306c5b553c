use std::path::Path;

use serde::Deserialize;

use crate::weights::WeightsError;

/// The fields of the checkpoint's `config.json` that shape the network and the default
/// post-processing (transformers' `SuperPointConfig`; missing fields take its defaults).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default)]
pub struct SuperPointConfig {
    /// Widths of the encoder's four stages.
    pub encoder_hidden_sizes: Vec<usize>,
    /// Width of the heads' hidden layer.
    pub decoder_hidden_size: usize,
    /// Keypoint head outputs (65: 64 cell positions and a dustbin).
    pub keypoint_decoder_dim: usize,
    /// Descriptor width.
    pub descriptor_decoder_dim: usize,
    /// Default keypoint threshold.
    pub keypoint_threshold: f32,
    /// Default keypoint count (-1: all).
    pub max_keypoints: i64,
    /// Default NMS radius.
    pub nms_radius: i64,
    /// Default border, pixels.
    pub border_removal_distance: i64,
}

impl Default for SuperPointConfig {
    fn default() -> Self {
        Self {
            encoder_hidden_sizes: vec![64, 64, 128, 128],
            decoder_hidden_size: 256,
            keypoint_decoder_dim: 65,
            descriptor_decoder_dim: 256,
            keypoint_threshold: 0.005,
            max_keypoints: -1,
            nms_radius: 4,
            border_removal_distance: 4,
        }
    }
}

impl SuperPointConfig {
    /// Reads config.json.
    pub fn from_file(path: &Path) -> Result<Self, WeightsError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| WeightsError::Io { path: path.to_path_buf(), source })?;
        let cfg: Self = serde_json::from_str(&text)
            .map_err(|e| WeightsError::Config { path: path.to_path_buf(), reason: e.to_string() })?;
        let bad = |reason: String| WeightsError::Config { path: path.to_path_buf(), reason };
        if cfg.encoder_hidden_sizes.len() != 4 || cfg.encoder_hidden_sizes.contains(&0) {
            return Err(bad(format!(
                "encoder_hidden_sizes must be 4 positive sizes, got {:?}",
                cfg.encoder_hidden_sizes
            )));
        }
        if cfg.keypoint_decoder_dim != 65 {
            return Err(bad(format!(
                "keypoint_decoder_dim must be 65 (64 cell positions + dustbin), got {}",
                cfg.keypoint_decoder_dim
            )));
        }
        if cfg.decoder_hidden_size == 0 || cfg.descriptor_decoder_dim == 0 {
            return Err(bad("decoder sizes must be positive".to_string()));
        }
        Ok(cfg)
    }
}
