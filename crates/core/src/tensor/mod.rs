//! The compute core: NHWC feature maps and the few kernels the networks need, built on
//! micro-kernels for constant (packed) right operands, the `gemm` crate for the rest, and a rayon
//! worker pool.
//!
//! Activations are NHWC with a one-pixel zero border ([`FeatureMap`]), so convolutions need no
//! im2col copy and no bounds checks at the edges. 3x3 convolutions run by Winograd's F(2x2, 3x3)
//! (16 GEMMs with K = C_in per block of 2x2 output tiles, 2.25x fewer multiply-adds than the
//! direct form), whose tiles are also the 2x2 max-pool windows; 1x1 convolutions are one GEMM over
//! the padded grid's pixels, reading the input in place.

mod bf16;
mod conv;
mod kept;
mod map;
mod matmul;
mod ops;
mod packed;
pub mod simd;
mod transformer;
mod winograd;

pub use bf16::{bf16_available, from_bf16, gemm_bf16, to_bf16, Bf16Kernel, PackedBf16, Precision, AMX_ENV};
pub use conv::{Conv1x1, Conv3x3, ConvTransposeBlock};
pub use map::FeatureMap;
pub use matmul::{gemm, matmul, MatRef, Threads};
pub use ops::{l2_normalize_rows, max_filter_2d, row_norms, softmax_rows};
pub use packed::{gemm_packed, PackedRhs};
pub use simd::exp_approx;
pub use transformer::{attention, erf_approx, gelu, layer_norm, Heads, Linear, Rope2d};

/// Errors of the compute core: shape mismatches between operands.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TensorError {
    /// A channel count differs from what the operation was built for.
    #[error("{op}: expected {expected} input channels, got {got}")]
    Channels {
        /// The operation.
        op: &'static str,
        /// Channels expected.
        expected: usize,
        /// Channels given.
        got: usize,
    },
    /// A buffer is too small.
    #[error("{op}: operand of {len} elements is too small for the requested {what}")]
    TooSmall {
        /// The operation.
        op: &'static str,
        /// Which buffer.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// Shapes that do not fit together.
    #[error("{op}: {what}")]
    Shape {
        /// The operation.
        op: &'static str,
        /// Which shapes.
        what: String,
    },
}
