//! The DPT head (Ranftl et al.) as DUSt3R configures it: four hooked token maps reassembled to
//! 1/4, 1/8, 1/16 and 1/32 of the image, projected to 256 channels, fused coarse to fine with
//! residual conv units, and a conv head producing 4 channels (x, y, z, confidence) per pixel.

use super::layers::{BranchHooks, Encoded, WeightsReader};
use super::Dust3rError;
use crate::cancel::Cancel;
use crate::tensor::{Conv1x1, Conv3x3, ConvTransposeBlock, FeatureMap, Precision};

/// Channel widths of the reassembled maps and of the fusion path (dust3r's `create_dpt_head`).
const LAYER_DIMS: [usize; 4] = [96, 192, 384, 768];
const FEATURES: usize = 256;
const LAST: usize = FEATURES / 2;
const OUT_CHANNELS: usize = 4;

fn conv3(l: &WeightsReader, prefix: &str, c_out: usize, c_in: usize, bias: bool) -> Result<Conv3x3, Dust3rError> {
    let w = l.tensor(&[&format!("{prefix}.weight")], &[c_out, c_in, 3, 3])?;
    let b = if bias { l.tensor(&[&format!("{prefix}.bias")], &[c_out])? } else { vec![0.0; c_out] };
    Ok(Conv3x3::from_torch_in(c_out, c_in, &w, &b, l.precision)?)
}

/// A 1x1 convolution in `precision` (the head's last layer stays float32).
fn conv1(
    l: &WeightsReader,
    prefix: &str,
    c_out: usize,
    c_in: usize,
    precision: Precision,
) -> Result<Conv1x1, Dust3rError> {
    let w = l.tensor(&[&format!("{prefix}.weight")], &[c_out, c_in, 1, 1])?;
    let b = l.tensor(&[&format!("{prefix}.bias")], &[c_out])?;
    Ok(Conv1x1::from_torch_in(c_out, c_in, &w, &b, precision)?)
}

/// `x + conv2(relu(conv1(relu(x))))`.
struct ResidualConvUnit {
    conv1: Conv3x3,
    conv2: Conv3x3,
}

impl ResidualConvUnit {
    fn load(l: &WeightsReader, prefix: &str) -> Result<Self, Dust3rError> {
        Ok(Self {
            conv1: conv3(l, &format!("{prefix}.conv1"), FEATURES, FEATURES, true)?,
            conv2: conv3(l, &format!("{prefix}.conv2"), FEATURES, FEATURES, true)?,
        })
    }

    fn forward(&self, x: &FeatureMap) -> Result<FeatureMap, Dust3rError> {
        let h = self.conv1.forward(&x.relu(), true)?;
        let mut out = self.conv2.forward(&h, false)?;
        out.add_assign(x)?;
        Ok(out)
    }
}

/// Fusion block: `a (+ rcu1(b))`, `rcu2`, bilinear x2 (align_corners), 1x1 conv.
struct FusionBlock {
    rcu1: ResidualConvUnit,
    rcu2: ResidualConvUnit,
    out_conv: Conv1x1,
}

impl FusionBlock {
    fn load(l: &WeightsReader, prefix: &str) -> Result<Self, Dust3rError> {
        Ok(Self {
            rcu1: ResidualConvUnit::load(l, &format!("{prefix}.resConfUnit1"))?,
            rcu2: ResidualConvUnit::load(l, &format!("{prefix}.resConfUnit2"))?,
            out_conv: conv1(l, &format!("{prefix}.out_conv"), FEATURES, FEATURES, l.precision)?,
        })
    }

    fn forward(&self, a: FeatureMap, b: Option<&FeatureMap>) -> Result<FeatureMap, Dust3rError> {
        let mut a = a;
        if let Some(b) = b {
            a.add_assign(&self.rcu1.forward(b)?)?;
        }
        let a = self.rcu2.forward(&a)?.upsample_bilinear_2x();
        Ok(self.out_conv.forward(&a, false)?)
    }
}

pub(super) struct DptHead {
    /// 1x1 projection of each hooked map.
    project: [Conv1x1; 4],
    up4: ConvTransposeBlock,
    up2: ConvTransposeBlock,
    down: Conv3x3,
    layer_rn: [Conv3x3; 4],
    /// refinenet1 .. refinenet4.
    fusion: [FusionBlock; 4],
    head0: Conv3x3,
    head2: Conv3x3,
    head4: Conv1x1,
}

impl DptHead {
    pub fn load(
        l: &WeightsReader,
        name: &str,
        enc_dim: usize,
        dec_dim: usize,
        _patch: usize,
    ) -> Result<Self, Dust3rError> {
        let pre = format!("{name}.dpt");
        let token_dims = [enc_dim, dec_dim, dec_dim, dec_dim];
        let project = [0, 1, 2, 3]
            .map(|i| conv1(l, &format!("{pre}.act_postprocess.{i}.0"), LAYER_DIMS[i], token_dims[i], l.precision));
        let [p0, p1, p2, p3] = project;
        let convt = |i: usize, k: usize| -> Result<ConvTransposeBlock, Dust3rError> {
            let c = LAYER_DIMS[i];
            let w = l.tensor(&[&format!("{pre}.act_postprocess.{i}.1.weight")], &[c, c, k, k])?;
            let b = l.tensor(&[&format!("{pre}.act_postprocess.{i}.1.bias")], &[c])?;
            Ok(ConvTransposeBlock::from_torch_in(c, c, k, &w, &b, l.precision)?)
        };
        // Both spellings of the shared layer projections: `layerN_rn` (what safetensors keeps)
        // and `layer_rn.{N-1}` (the module alias in .pth checkpoints).
        let layer_rn = |i: usize| -> Result<Conv3x3, Dust3rError> {
            let (a, b) =
                (format!("{pre}.scratch.layer{}_rn.weight", i + 1), format!("{pre}.scratch.layer_rn.{i}.weight"));
            let w = l.tensor(&[&a, &b], &[FEATURES, LAYER_DIMS[i], 3, 3])?;
            Ok(Conv3x3::from_torch_in(FEATURES, LAYER_DIMS[i], &w, &vec![0.0; FEATURES], l.precision)?)
        };
        let fusion = |i: usize| FusionBlock::load(l, &format!("{pre}.scratch.refinenet{}", i + 1));
        Ok(Self {
            project: [p0?, p1?, p2?, p3?],
            up4: convt(0, 4)?,
            up2: convt(1, 2)?,
            down: conv3(l, &format!("{pre}.act_postprocess.3.1"), LAYER_DIMS[3], LAYER_DIMS[3], true)?,
            layer_rn: [layer_rn(0)?, layer_rn(1)?, layer_rn(2)?, layer_rn(3)?],
            fusion: [fusion(0)?, fusion(1)?, fusion(2)?, fusion(3)?],
            head0: conv3(l, &format!("{pre}.head.0"), LAST, FEATURES, true)?,
            head2: conv3(l, &format!("{pre}.head.2"), LAST, LAST, true)?,
            head4: conv1(l, &format!("{pre}.head.4"), OUT_CHANNELS, LAST, Precision::Fp32)?,
        })
    }

    /// The 4-channel output map at image resolution (16x the token grid).
    pub fn forward(
        &self,
        encoded: &Encoded,
        branch: &BranchHooks,
        dec_dim: usize,
        cancel: Option<&Cancel>,
    ) -> Result<FeatureMap, Dust3rError> {
        // A head is a fifth of a pair's time: checked between its stages, not only before it.
        let step = || cancel.map_or(Ok(()), Cancel::check);
        let (h, w) = (encoded.rows, encoded.cols);
        let map = |tokens: &[f32], c: usize| FeatureMap::from_dense(h, w, c, tokens);
        let m0 = self.project[0].forward(&map(&encoded.tokens, encoded.width)?, false)?;
        let l0 = self.up4.forward(&m0)?;
        let m1 = self.project[1].forward(&map(&branch.hooks[0], dec_dim)?, false)?;
        let l1 = self.up2.forward(&m1)?;
        let l2 = self.project[2].forward(&map(&branch.hooks[1], dec_dim)?, false)?;
        let m3 = self.project[3].forward(&map(&branch.hooks[2], dec_dim)?, false)?;
        let l3 = self.down.forward_stride2(&m3, false)?;
        step()?;

        let [r0, r1, r2, r3] = &self.layer_rn;
        let (l0, l1, l2, l3) =
            (r0.forward(&l0, false)?, r1.forward(&l1, false)?, r2.forward(&l2, false)?, r3.forward(&l3, false)?);
        step()?;
        let p4 = self.fusion[3].forward(l3, None)?.crop(l2.height(), l2.width());
        step()?;
        let p3 = self.fusion[2].forward(p4, Some(&l2))?;
        step()?;
        let p2 = self.fusion[1].forward(p3, Some(&l1))?;
        step()?;
        let p1 = self.fusion[0].forward(p2, Some(&l0))?;
        step()?;

        let x = self.head0.forward(&p1, false)?.upsample_bilinear_2x();
        let x = self.head2.forward(&x, true)?;
        Ok(self.head4.forward(&x, false)?)
    }
}
