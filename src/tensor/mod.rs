//! The compute core: NHWC feature maps and the few kernels the networks need, built on the
//! `gemm` crate (AVX-512 kernels enabled, chosen at run time) and a rayon worker pool.
//!
//! Activations are NHWC with a one-pixel zero border ([`FeatureMap`]). With that layout a 3x3
//! convolution needs no im2col copy: over the padded grid the three horizontal taps of one kernel
//! row are contiguous in memory, so the whole convolution is three accumulating GEMMs per band
//! of output pixels (K = 3 x C_in), reading the input in place.

mod conv;
mod map;
mod matmul;
mod ops;
mod packed;
pub mod simd;
mod transformer;
mod winograd;

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
