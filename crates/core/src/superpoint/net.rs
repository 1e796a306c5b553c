use std::path::Path;

use super::{SuperPointConfig, SuperPointError};
use crate::tensor::{Conv1x1, Conv3x3, FeatureMap, Precision};
use crate::weights::{WeightFile, WeightsError};

/// The SuperPoint network: a VGG-style encoder (four blocks of two 3x3 convolutions, 2x2 max-pool
/// after the first three) and two heads on the 1/8-resolution encoder output.
pub struct SuperPointNet {
    blocks: Vec<[Conv3x3; 2]>,
    /// The first convolution of both heads, stacked: score channels first, then descriptor ones.
    heads_a: Conv3x3,
    score_b: Conv1x1,
    descriptor_b: Conv1x1,
    score_hidden: usize,
}

/// Raw network outputs at cell resolution (`cells_h x cells_w`), NHWC.
#[derive(Clone, Debug)]
pub struct NetOutput {
    /// Cell rows (input height / 8).
    pub cells_h: usize,
    /// Cell columns (input width / 8).
    pub cells_w: usize,
    /// `cells_h x cells_w x 65` score logits (64 cell positions + dustbin).
    pub logits: Vec<f32>,
    /// `cells_h x cells_w x D` raw (not yet normalised) descriptors.
    pub descriptors: Vec<f32>,
    /// Descriptor width.
    pub descriptor_dim: usize,
}

/// Tensor names in the HF checkpoint, with the original Magic Leap (`superpoint_v1.pth`) and
/// early HF-draft spellings accepted as alternatives.
fn conv_names(hf: &str, original: &str, draft: &str, suffix: &str) -> [String; 3] {
    [format!("{hf}.{suffix}"), format!("{original}.{suffix}"), format!("{draft}.{suffix}")]
}

fn load_conv(
    file: &WeightFile,
    (hf, original, draft): (&str, &str, &str),
    c_out: usize,
    c_in: usize,
    k: usize,
) -> Result<(Vec<f32>, Vec<f32>), WeightsError> {
    let w = conv_names(hf, original, draft, "weight");
    let b = conv_names(hf, original, draft, "bias");
    let wr: Vec<&str> = w.iter().map(String::as_str).collect();
    let br: Vec<&str> = b.iter().map(String::as_str).collect();
    let weight = file.f32_tensor(&wr, &[c_out, c_in, k, k])?.into_owned();
    let bias = file.f32_tensor(&br, &[c_out])?.into_owned();
    Ok((weight, bias))
}

impl SuperPointNet {
    /// Loads `model.safetensors` + `config.json` from a folder.
    pub fn load(dir: &Path) -> Result<(Self, SuperPointConfig), SuperPointError> {
        Self::load_in(dir, Precision::Fp32)
    }

    /// As [`SuperPointNet::load`], in `precision` (see [`SuperPointNet::from_weights_in`]).
    pub fn load_in(dir: &Path, precision: Precision) -> Result<(Self, SuperPointConfig), SuperPointError> {
        let config = SuperPointConfig::from_file(&dir.join("config.json"))?;
        let file = WeightFile::open(&dir.join("model.safetensors"))?;
        Ok((Self::from_weights_in(&file, &config, precision)?, config))
    }

    /// The network from a weight file and its config, in float32.
    pub fn from_weights(file: &WeightFile, config: &SuperPointConfig) -> Result<Self, SuperPointError> {
        Self::from_weights_in(file, config, Precision::Fp32)
    }

    /// The network from a weight file and its config, the encoder's and the heads' first 3x3
    /// convolutions in `precision` where the CPU runs it; the first convolution (one input
    /// channel, a direct kernel) and the heads' last 1x1 layers (logits, descriptors) in float32.
    pub fn from_weights_in(
        file: &WeightFile,
        config: &SuperPointConfig,
        precision: Precision,
    ) -> Result<Self, SuperPointError> {
        let conv3 = |c_out, c_in, w: &[f32], b: &[f32]| Conv3x3::from_torch_in(c_out, c_in, w, b, precision);
        let sizes = &config.encoder_hidden_sizes;
        let mut blocks = Vec::with_capacity(4);
        let mut c_in = 1;
        for (i, &c) in sizes.iter().enumerate() {
            let n = i + 1;
            let hf_a = format!("encoder.conv_blocks.{i}.conv_a");
            let hf_b = format!("encoder.conv_blocks.{i}.conv_b");
            let (orig_a, orig_b) = (format!("conv{n}a"), format!("conv{n}b"));
            let (draft_a, draft_b) = (format!("encoder.conv{n}a"), format!("encoder.conv{n}b"));
            let (wa, ba) = load_conv(file, (&hf_a, &orig_a, &draft_a), c, c_in, 3)?;
            let (wb, bb) = load_conv(file, (&hf_b, &orig_b, &draft_b), c, c, 3)?;
            blocks.push([conv3(c, c_in, &wa, &ba)?, conv3(c, c, &wb, &bb)?]);
            c_in = c;
        }
        let hidden = config.decoder_hidden_size;
        let (d, cells) = (config.descriptor_decoder_dim, config.keypoint_decoder_dim);
        let names = |hf: &'static str, orig: &'static str, draft: &'static str| (hf, orig, draft);
        let (wsa, bsa) = load_conv(
            file,
            names("keypoint_decoder.conv_score_a", "convPa", "keypoint_decoder.convSa"),
            hidden,
            c_in,
            3,
        )?;
        let (wsb, bsb) = load_conv(
            file,
            names("keypoint_decoder.conv_score_b", "convPb", "keypoint_decoder.convSb"),
            cells,
            hidden,
            1,
        )?;
        let (wda, bda) = load_conv(
            file,
            names("descriptor_decoder.conv_descriptor_a", "convDa", "descriptor_decoder.convDa"),
            hidden,
            c_in,
            3,
        )?;
        let (wdb, bdb) = load_conv(
            file,
            names("descriptor_decoder.conv_descriptor_b", "convDb", "descriptor_decoder.convDb"),
            d,
            hidden,
            1,
        )?;
        let score_a = conv3(hidden, c_in, &wsa, &bsa)?;
        let descriptor_a = conv3(hidden, c_in, &wda, &bda)?;
        Ok(Self {
            blocks,
            heads_a: Conv3x3::concat_outputs(&[&score_a, &descriptor_a])?,
            score_b: Conv1x1::from_torch(cells, hidden, &wsb, &bsb)?,
            descriptor_b: Conv1x1::from_torch(d, hidden, &wdb, &bdb)?,
            score_hidden: hidden,
        })
    }

    /// Descriptor width.
    pub fn descriptor_dim(&self) -> usize {
        self.descriptor_b.out_channels()
    }

    /// The encoder: `height x width` plane in, `height/8 x width/8 x 128` map out.
    pub fn encode(&self, plane: &[f32], height: usize, width: usize) -> Result<FeatureMap, SuperPointError> {
        if height == 0 || width == 0 || !height.is_multiple_of(8) || !width.is_multiple_of(8) {
            return Err(SuperPointError::InputSize { width: width as u32, height: height as u32 });
        }
        let mut x = FeatureMap::from_plane(height, width, plane)?;
        let last = self.blocks.len() - 1;
        for (i, [a, b]) in self.blocks.iter().enumerate() {
            x = match i {
                // 1 -> 64 channels at full resolution: fused, so its 480x640x64 outputs stay in cache.
                0 => a.forward_pair_relu_pooled(b, &x)?,
                i if i < last => b.forward_relu_pooled(&a.forward(&x, true)?)?,
                _ => b.forward(&a.forward(&x, true)?, true)?,
            };
        }
        Ok(x)
    }

    /// Both heads on an encoder output.
    pub fn heads(&self, encoded: &FeatureMap) -> Result<NetOutput, SuperPointError> {
        let hidden = self.heads_a.forward(encoded, true)?;
        let logits = self.score_b.forward_channels(&hidden, 0, false)?;
        let descriptors = self.descriptor_b.forward_channels(&hidden, self.score_hidden, false)?;
        Ok(NetOutput {
            cells_h: encoded.height(),
            cells_w: encoded.width(),
            logits: logits.to_dense(),
            descriptors: descriptors.to_dense(),
            descriptor_dim: self.descriptor_dim(),
        })
    }

    /// Runs the network on a `height x width` luminance plane.
    pub fn forward(&self, plane: &[f32], height: usize, width: usize) -> Result<NetOutput, SuperPointError> {
        self.heads(&self.encode(plane, height, width)?)
    }
}
