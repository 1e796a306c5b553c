//! SuperPoint (Magic Leap; the `magic-leap-community/superpoint` checkpoint): the network on the
//! compute core, its input preprocessing, and the keypoint/descriptor post-processing.

mod config;
mod net;
mod post;
mod preprocess;

pub use config::SuperPointConfig;
pub use net::{NetOutput, SuperPointNet};
pub use post::{
    depth_to_space_heatmap, extract_keypoints, nms, Keypoints, PostParams, BORDER, DEFAULT_MAX_KEYPOINTS,
    DEFAULT_NMS_RADIUS, DEFAULT_THRESHOLD,
};
pub use preprocess::{preprocess, Preprocessed, INPUT_HEIGHT, INPUT_WIDTH};

use crate::weights::HubModel;

/// The checkpoint the superpoint-p150 tt-model server pins; the CPU backend resolves the same.
pub const HUB_MODEL: HubModel = HubModel {
    name: "SuperPoint",
    repo: "magic-leap-community/superpoint",
    revision: "734450e9ffe229074f5998494ddc615475cdb20a",
    env_var: "SP_DUST3R_SUPERPOINT_WEIGHTS",
    files: &["model.safetensors", "config.json"],
};

/// Descriptor length of the released network.
pub const DESCRIPTOR_DIM: usize = 256;

/// Why SuperPoint could not load or run.
#[derive(Debug, thiserror::Error)]
pub enum SuperPointError {
    /// The weights could not be loaded.
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightsError),
    /// The frame could not be read.
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    /// A tensor operation was given inconsistent shapes (a bug).
    #[error("internal shape error: {0}")]
    Tensor(#[from] crate::tensor::TensorError),
    /// The network input is not a positive multiple of 8.
    #[error("network input must be a non-empty multiple of 8 in both sides, got {width}x{height}")]
    InputSize {
        /// Width given.
        width: u32,
        /// Height given.
        height: u32,
    },
    /// A post-processing parameter or input is invalid.
    #[error("invalid parameter: {0}")]
    Parameter(String),
    /// The frame could not be resized to the network input.
    #[error("cannot resize the image: {0}")]
    Resize(String),
}

/// The whole CPU path for one frame: preprocess, network, post-processing, and the mapping of
/// keypoints back to the input image's pixels.
pub struct SuperPoint {
    net: SuperPointNet,
    config: SuperPointConfig,
}

/// Wall time of each stage of [`SuperPoint::detect`], in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Preprocessing time, ms.
    pub preprocess_ms: f64,
    /// Network time, ms.
    pub forward_ms: f64,
    /// Post-processing time, ms.
    pub postprocess_ms: f64,
}

impl SuperPoint {
    /// Loads the network from a folder holding `model.safetensors` and `config.json`.
    pub fn load(dir: &std::path::Path) -> Result<Self, SuperPointError> {
        Self::load_in(dir, crate::tensor::Precision::Fp32)
    }

    /// As [`SuperPoint::load`], its 3x3 convolutions in `precision` where the CPU runs it (see
    /// [`SuperPointNet::from_weights_in`]).
    pub fn load_in(dir: &std::path::Path, precision: crate::tensor::Precision) -> Result<Self, SuperPointError> {
        let (net, config) = SuperPointNet::load_in(dir, precision)?;
        Ok(Self { net, config })
    }

    /// The checkpoint's config.
    pub fn config(&self) -> &SuperPointConfig {
        &self.config
    }

    /// The network.
    pub fn net(&self) -> &SuperPointNet {
        &self.net
    }

    /// Keypoints of one luminance image, in its own pixels, scores descending.
    pub fn detect(
        &self,
        luma: &crate::image::LumaImage,
        params: &PostParams,
    ) -> Result<(Keypoints, StageTimes), SuperPointError> {
        let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e3;
        let t = std::time::Instant::now();
        let input = preprocess(luma)?;
        let preprocess_ms = ms(t);

        let t = std::time::Instant::now();
        let out = self.net.forward(&input.plane, input.height as usize, input.width as usize)?;
        let forward_ms = ms(t);

        let t = std::time::Instant::now();
        let mut keypoints = self.postprocess(&out, params)?;
        for xy in &mut keypoints.xy {
            *xy = input.to_input_pixels(*xy);
        }
        let postprocess_ms = ms(t);
        Ok((keypoints, StageTimes { preprocess_ms, forward_ms, postprocess_ms }))
    }

    /// Post-processing of raw network outputs; positions in network pixels.
    pub fn postprocess(&self, out: &NetOutput, params: &PostParams) -> Result<Keypoints, SuperPointError> {
        let heat = depth_to_space_heatmap(&out.logits, out.cells_h, out.cells_w)?;
        let kept = nms(&heat, out.cells_h * 8, out.cells_w * 8, params.nms_radius, params.threshold)?;
        extract_keypoints(&heat, &kept, &out.descriptors, out.cells_h, out.cells_w, out.descriptor_dim, params)
    }
}
