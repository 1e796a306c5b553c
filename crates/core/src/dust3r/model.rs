use std::path::Path;
use std::sync::Arc;

use super::config::HeadKind;
use super::dpt::DptHead;
use super::layers::{BranchHooks, Encoded, Norm, WeightsReader};
use super::linear_head::LinearHead;
use super::post::Pointmap;
use super::{Dust3rConfig, Dust3rError};
use crate::cancel::Cancel;
use crate::tensor::{attention, gelu, Heads, Linear, Precision, Rope2d};
use crate::weights::{WeightFile, WeightsError};

/// Geometry shared by the attention layers of one stack, and the precision of their products.
#[derive(Clone, Copy)]
struct AttnShape {
    width: usize,
    heads: usize,
    precision: Precision,
}

impl AttnShape {
    fn head_dim(&self) -> usize {
        self.width / self.heads
    }
}

struct SelfAttention {
    qkv: Linear,
    proj: Linear,
}

impl SelfAttention {
    fn load(l: &WeightsReader, prefix: &str, width: usize) -> Result<Self, Dust3rError> {
        Ok(Self {
            qkv: l.linear(&format!("{prefix}.qkv"), width, 3 * width)?,
            proj: l.linear(&format!("{prefix}.proj"), width, width)?,
        })
    }

    /// `x += proj(attention(norm(x)))`, RoPE on q and k with the tokens' positions.
    fn residual(
        &self,
        x: &mut [f32],
        normed: &[f32],
        pos: &[(usize, usize)],
        s: AttnShape,
        rope: &Rope2d,
    ) -> Result<(), Dust3rError> {
        let n = pos.len();
        let w = s.width;
        let mut qkv = self.qkv.forward(normed, n, w)?;
        rope.apply(&mut qkv, 3 * w, 0, s.heads, pos)?;
        rope.apply(&mut qkv, 3 * w, w, s.heads, pos)?;
        let at = |offset| Heads { data: &qkv, tokens: n, row_stride: 3 * w, offset };
        let scale = 1.0 / (s.head_dim() as f32).sqrt();
        let a = attention(at(0), at(w), at(2 * w), s.heads, s.head_dim(), scale, s.precision)?;
        self.proj.forward_into(&a, n, w, x, true)?;
        Ok(())
    }
}

struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    fn load(l: &WeightsReader, prefix: &str, width: usize, hidden: usize) -> Result<Self, Dust3rError> {
        Ok(Self {
            fc1: l.linear(&format!("{prefix}.fc1"), width, hidden)?,
            fc2: l.linear(&format!("{prefix}.fc2"), hidden, width)?,
        })
    }

    /// `x += fc2(gelu(fc1(normed)))`.
    fn residual(&self, x: &mut [f32], normed: &[f32], n: usize) -> Result<(), Dust3rError> {
        let mut h = self.fc1.forward(normed, n, self.fc1.in_dim())?;
        gelu(&mut h);
        self.fc2.forward_into(&h, n, self.fc2.in_dim(), x, true)?;
        Ok(())
    }
}

/// Pre-norm ViT block: self-attention and MLP, each with a residual.
struct EncoderBlock {
    norm1: Norm,
    attn: SelfAttention,
    norm2: Norm,
    mlp: Mlp,
}

impl EncoderBlock {
    fn forward(&self, x: &mut [f32], pos: &[(usize, usize)], s: AttnShape, rope: &Rope2d) -> Result<(), Dust3rError> {
        let h = self.norm1.apply(x)?;
        self.attn.residual(x, &h, pos, s, rope)?;
        let h = self.norm2.apply(x)?;
        self.mlp.residual(x, &h, pos.len())
    }
}

/// CroCo decoder block: self-attention, cross-attention to the other view, MLP.
struct DecoderBlock {
    norm1: Norm,
    attn: SelfAttention,
    norm2: Norm,
    norm_y: Norm,
    projq: Linear,
    projk: Linear,
    projv: Linear,
    cross_proj: Linear,
    norm3: Norm,
    mlp: Mlp,
}

impl DecoderBlock {
    fn load(l: &WeightsReader, prefix: &str, width: usize, hidden: usize) -> Result<Self, Dust3rError> {
        let p = |s: &str| format!("{prefix}.{s}");
        Ok(Self {
            norm1: l.norm(&p("norm1"), width)?,
            attn: SelfAttention::load(l, &p("attn"), width)?,
            norm2: l.norm(&p("norm2"), width)?,
            norm_y: l.norm(&p("norm_y"), width)?,
            projq: l.linear(&p("cross_attn.projq"), width, width)?,
            projk: l.linear(&p("cross_attn.projk"), width, width)?,
            projv: l.linear(&p("cross_attn.projv"), width, width)?,
            cross_proj: l.linear(&p("cross_attn.proj"), width, width)?,
            norm3: l.norm(&p("norm3"), width)?,
            mlp: Mlp::load(l, &p("mlp"), width, hidden)?,
        })
    }

    /// Updates `x` (this branch) reading `y` (the other branch's previous output).
    fn forward(
        &self,
        x: &mut [f32],
        y: &[f32],
        xpos: &[(usize, usize)],
        ypos: &[(usize, usize)],
        s: AttnShape,
        rope: &Rope2d,
    ) -> Result<(), Dust3rError> {
        let (n, m, w) = (xpos.len(), ypos.len(), s.width);
        let h = self.norm1.apply(x)?;
        self.attn.residual(x, &h, xpos, s, rope)?;

        let y_normed = self.norm_y.apply(y)?;
        let h = self.norm2.apply(x)?;
        let mut q = self.projq.forward(&h, n, w)?;
        let mut k = self.projk.forward(&y_normed, m, w)?;
        let v = self.projv.forward(&y_normed, m, w)?;
        rope.apply(&mut q, w, 0, s.heads, xpos)?;
        rope.apply(&mut k, w, 0, s.heads, ypos)?;
        let a = attention(
            Heads { data: &q, tokens: n, row_stride: w, offset: 0 },
            Heads { data: &k, tokens: m, row_stride: w, offset: 0 },
            Heads { data: &v, tokens: m, row_stride: w, offset: 0 },
            s.heads,
            s.head_dim(),
            1.0 / (s.head_dim() as f32).sqrt(),
            s.precision,
        )?;
        self.cross_proj.forward_into(&a, n, w, x, true)?;

        let h = self.norm3.apply(x)?;
        self.mlp.residual(x, &h, n)
    }
}

/// A branch's head, as the checkpoint has it.
enum Head {
    Dpt(Box<DptHead>),
    Linear(LinearHead),
}

impl Head {
    /// The head `config` names, checked against the tensors the file holds: a config that says
    /// one head over weights of the other is refused with both named.
    fn load(l: &WeightsReader, config: &Dust3rConfig, name: &str) -> Result<Self, Dust3rError> {
        let (e, d, p) = (config.enc_embed_dim, config.dec_embed_dim, config.patch_size);
        let (dpt, linear) = (format!("{name}.dpt.head.4.weight"), format!("{name}.proj.weight"));
        let held = match (l.file.find_name(&[&dpt]), l.file.find_name(&[&linear])) {
            (Some(_), None) => Some(HeadKind::Dpt),
            (None, Some(_)) => Some(HeadKind::Linear),
            _ => None,
        };
        match (config.head(), held) {
            (Some(HeadKind::Dpt), Some(HeadKind::Dpt) | None) => {
                Ok(Head::Dpt(Box::new(DptHead::load(l, name, e, d, p)?)))
            }
            (Some(HeadKind::Linear), Some(HeadKind::Linear) | None) => {
                Ok(Head::Linear(LinearHead::load(l, name, d, p)?))
            }
            (_, held) => Err(WeightsError::Config {
                path: l.file.path().to_path_buf(),
                reason: format!(
                    "config.json says head_type {:?} but the weights hold a {} head ({}): the two files \
                     are from different checkpoints",
                    config.head_type,
                    if held == Some(HeadKind::Dpt) { "dpt" } else { "linear" },
                    if held == Some(HeadKind::Dpt) { &dpt } else { &linear },
                ),
            }
            .into()),
        }
    }
}

/// Both views' pointmaps in camera 1's frame.
#[derive(Clone, Debug)]
pub struct PairPrediction {
    /// View 1 in its own (camera 1) frame.
    pub view1: Pointmap,
    /// View 2 expressed in camera 1's frame.
    pub view2_in_1: Pointmap,
}

/// Every decoder block's output per branch (`[branch][block]`) and `dec_norm` of the last.
pub type DecoderOutputs = ([Vec<Vec<f32>>; 2], [Vec<f32>; 2]);

/// The DUSt3R network.
pub struct Dust3r {
    config: Dust3rConfig,
    patch_embed: Linear,
    enc_blocks: Vec<EncoderBlock>,
    enc_norm: Norm,
    decoder_embed: Linear,
    dec_blocks: [Vec<DecoderBlock>; 2],
    dec_norm: Norm,
    heads: [Head; 2],
    enc_rope: Rope2d,
    dec_rope: Rope2d,
    /// Checked between blocks and head stages: a set flag abandons the pair.
    cancel: Option<Cancel>,
    /// What the encoder's and decoder's products run in (what the CPU runs of what was asked).
    precision: Precision,
}

/// Largest token grid side the RoPE tables cover (a 4096-pixel image side at patch 16).
const MAX_GRID: usize = 256;

impl Dust3r {
    /// Loads `model.safetensors` + `config.json` from a folder (weights stay memory-mapped), in
    /// float32.
    pub fn load(dir: &Path) -> Result<Self, Dust3rError> {
        Self::load_in(dir, Precision::Fp32)
    }

    /// As [`Dust3r::load`], the encoder's and decoder's linear layers, attention products and the
    /// DPT heads' convolutions in `precision` where the CPU runs it (see [`Dust3r::precision`]);
    /// patch embedding, layer norms, softmax, GELU, the heads' last layer (to x, y, z and
    /// confidence) and their few-channel direct convolutions stay float32.
    pub fn load_in(dir: &Path, precision: Precision) -> Result<Self, Dust3rError> {
        let config = Dust3rConfig::from_file(&dir.join("config.json"))?;
        let file = Arc::new(WeightFile::open(&dir.join("model.safetensors"))?);
        Self::from_weights_in(file, config, precision)
    }

    /// The network from an opened weight file and its config, in float32.
    pub fn from_weights(file: Arc<WeightFile>, config: Dust3rConfig) -> Result<Self, Dust3rError> {
        Self::from_weights_in(file, config, Precision::Fp32)
    }

    /// The network from an opened weight file and its config, in `precision` (see
    /// [`Dust3r::load_in`]).
    pub fn from_weights_in(
        file: Arc<WeightFile>,
        config: Dust3rConfig,
        precision: Precision,
    ) -> Result<Self, Dust3rError> {
        let precision = precision.supported();
        let l = WeightsReader { file, precision };
        let (e, d, p) = (config.enc_embed_dim, config.dec_embed_dim, config.patch_size);
        let patch_w = l.param("patch_embed.proj.weight", &[e, 3, p, p])?;
        let patch_b = l.param("patch_embed.proj.bias", &[e])?;
        let enc_blocks = (0..config.enc_depth)
            .map(|i| {
                let pre = format!("enc_blocks.{i}");
                Ok(EncoderBlock {
                    norm1: l.norm(&format!("{pre}.norm1"), e)?,
                    attn: SelfAttention::load(&l, &format!("{pre}.attn"), e)?,
                    norm2: l.norm(&format!("{pre}.norm2"), e)?,
                    mlp: Mlp::load(&l, &format!("{pre}.mlp"), e, config.mlp_dim(e))?,
                })
            })
            .collect::<Result<Vec<_>, Dust3rError>>()?;
        let branch = |name: &str| {
            (0..config.dec_depth)
                .map(|i| DecoderBlock::load(&l, &format!("{name}.{i}"), d, config.mlp_dim(d)))
                .collect::<Result<Vec<_>, Dust3rError>>()
        };
        let base = config.rope_base().unwrap_or(100.0);
        Ok(Self {
            patch_embed: Linear::new(3 * p * p, e, patch_w, patch_b)?,
            enc_blocks,
            enc_norm: l.norm("enc_norm", e)?,
            decoder_embed: l.linear("decoder_embed", e, d)?,
            dec_blocks: [branch("dec_blocks")?, branch("dec_blocks2")?],
            dec_norm: l.norm("dec_norm", d)?,
            heads: [Head::load(&l, &config, "downstream_head1")?, Head::load(&l, &config, "downstream_head2")?],
            enc_rope: Rope2d::new(base, e / config.enc_num_heads, MAX_GRID)?,
            dec_rope: Rope2d::new(base, d / config.dec_num_heads, MAX_GRID)?,
            config,
            cancel: None,
            precision,
        })
    }

    /// What its products run in: what was asked, or float32 where the CPU has no bf16 kernel.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The same network, abandoning its work with [`Dust3rError::Cancelled`] between two blocks
    /// (or head stages) once `cancel` is set.
    pub fn with_cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// `Err(Cancelled)` once the work was asked to stop.
    fn check(&self) -> Result<(), Dust3rError> {
        Ok(self.cancel.as_ref().map_or(Ok(()), Cancel::check)?)
    }

    /// The config it was built with.
    pub fn config(&self) -> &Dust3rConfig {
        &self.config
    }

    /// Patch embedding, encoder blocks and `enc_norm` for one normalised image, planar RGB
    /// (`3 x height x width`, values in [-1, 1]).
    pub fn encode(&self, image: &[f32], height: usize, width: usize) -> Result<Encoded, Dust3rError> {
        let p = self.config.patch_size;
        if height == 0
            || width == 0
            || !height.is_multiple_of(p)
            || !width.is_multiple_of(p)
            || image.len() != 3 * height * width
            || height / p > MAX_GRID
            || width / p > MAX_GRID
        {
            return Err(Dust3rError::InputSize {
                channels: image.len() / (height * width).max(1),
                height,
                width,
                patch: p,
            });
        }
        let (rows, cols) = (height / p, width / p);
        // Patches as rows of (channel, ky, kx), the order of the conv weight's input dims.
        let k = 3 * p * p;
        let mut patches = vec![0.0; rows * cols * k];
        for (t, patch) in patches.chunks_exact_mut(k).enumerate() {
            let (r, c) = (t / cols, t % cols);
            for ch in 0..3 {
                for ky in 0..p {
                    let src = ch * height * width + (r * p + ky) * width + c * p;
                    patch[(ch * p + ky) * p..(ch * p + ky + 1) * p].copy_from_slice(&image[src..src + p]);
                }
            }
        }
        let mut x = self.patch_embed.forward(&patches, rows * cols, k)?;
        let enc = Encoded { tokens: Vec::new(), rows, cols, width: self.config.enc_embed_dim };
        let pos = enc.positions();
        let shape =
            AttnShape { width: self.config.enc_embed_dim, heads: self.config.enc_num_heads, precision: self.precision };
        for block in &self.enc_blocks {
            self.check()?;
            block.forward(&mut x, &pos, shape, &self.enc_rope)?;
        }
        Ok(Encoded { tokens: self.enc_norm.apply(&x)?, ..enc })
    }

    /// The two decoder branches: branch 1 (`dec_blocks`) on `first`, branch 2 (`dec_blocks2`)
    /// on `second`, each block reading the other branch's previous output. Returns what the DPT
    /// heads read: the list entries at the middle hooks and the `dec_norm`-ed last one.
    pub fn decode(&self, first: &Encoded, second: &Encoded) -> Result<[BranchHooks; 2], Dust3rError> {
        let hooks = self.config.hooks();
        let mut saved: [Vec<Vec<f32>>; 2] = [Vec::new(), Vec::new()];
        self.run_decoder(first, second, |entry, f1, f2| {
            if entry == hooks[3] {
                saved[0].push(self.dec_norm.apply(f1)?);
                saved[1].push(self.dec_norm.apply(f2)?);
            } else if entry == hooks[1] || entry == hooks[2] {
                saved[0].push(f1.to_vec());
                saved[1].push(f2.to_vec());
            }
            Ok(())
        })?;
        let take = |v: Vec<Vec<f32>>| -> Result<BranchHooks, Dust3rError> {
            let hooks: [Vec<f32>; 3] = v.try_into().map_err(|_| crate::tensor::TensorError::Shape {
                op: "decode",
                what: "decoder depth does not give three hooks".into(),
            })?;
            Ok(BranchHooks { hooks })
        };
        let [s1, s2] = saved;
        Ok([take(s1)?, take(s2)?])
    }

    /// Every decoder block's raw output for both branches (`[branch][block]`, before `dec_norm`),
    /// plus `dec_norm` of the last: for checking which entries the heads are wired to.
    pub fn decoder_outputs(&self, first: &Encoded, second: &Encoded) -> Result<DecoderOutputs, Dust3rError> {
        let mut all: [Vec<Vec<f32>>; 2] = [Vec::new(), Vec::new()];
        self.run_decoder(first, second, |_, f1, f2| {
            all[0].push(f1.to_vec());
            all[1].push(f2.to_vec());
            Ok(())
        })?;
        let last = |b: &Vec<Vec<f32>>| b.last().map(|f| self.dec_norm.apply(f)).unwrap_or(Ok(Vec::new()));
        let normed = [last(&all[0])?, last(&all[1])?];
        Ok((all, normed))
    }

    /// The decoder loop; `visit(entry, f1, f2)` sees list entry `entry` (1-based block count).
    fn run_decoder<F>(&self, first: &Encoded, second: &Encoded, mut visit: F) -> Result<(), Dust3rError>
    where
        F: FnMut(usize, &[f32], &[f32]) -> Result<(), Dust3rError>,
    {
        let (pos1, pos2) = (first.positions(), second.positions());
        let d = self.config.dec_embed_dim;
        let mut f1 = self.decoder_embed.forward(&first.tokens, pos1.len(), first.width)?;
        let mut f2 = self.decoder_embed.forward(&second.tokens, pos2.len(), second.width)?;
        let shape = AttnShape { width: d, heads: self.config.dec_num_heads, precision: self.precision };
        for (l, (b1, b2)) in self.dec_blocks[0].iter().zip(&self.dec_blocks[1]).enumerate() {
            self.check()?;
            let mut n1 = f1.clone();
            b1.forward(&mut n1, &f2, &pos1, &pos2, shape, &self.dec_rope)?;
            let mut n2 = f2.clone();
            b2.forward(&mut n2, &f1, &pos2, &pos1, shape, &self.dec_rope)?;
            f1 = n1;
            f2 = n2;
            visit(l + 1, &f1, &f2)?;
        }
        Ok(())
    }

    /// Head `index` (0 for branch 1, 1 for branch 2) and the pointmap post-processing.
    pub fn head(&self, index: usize, encoded: &Encoded, hooks: &BranchHooks) -> Result<Pointmap, Dust3rError> {
        self.check()?;
        let raw = match &self.heads[index.min(1)] {
            Head::Dpt(head) => head.forward(encoded, hooks, self.config.dec_embed_dim, self.cancel.as_ref())?,
            Head::Linear(head) => head.forward(encoded, hooks)?,
        };
        Ok(Pointmap::from_head_output(&raw, self.config.conf_min()))
    }

    /// The pair forward from two encoded views: pointmaps of `first` and of `second`, both in
    /// `first`'s camera frame. Called with the views swapped it gives the symmetric prediction
    /// without re-running the encoder.
    pub fn predict(&self, first: &Encoded, second: &Encoded) -> Result<PairPrediction, Dust3rError> {
        if (first.rows, first.cols) != (second.rows, second.cols) {
            return Err(Dust3rError::GridMismatch((first.rows, first.cols), (second.rows, second.cols)));
        }
        let [h1, h2] = self.decode(first, second)?;
        Ok(PairPrediction { view1: self.head(0, first, &h1)?, view2_in_1: self.head(1, second, &h2)? })
    }
}
