//! sp_dust3r's core: SuperPoint features and DUSt3R pair reconstruction, the geometry and the
//! keyframe pipeline that turn them into poses, clouds and a map, and the ROS 2 messages they go
//! out as, with no transport: the live node (DDS) and the bag replay both drive it.
//!
//! Data flows image -> preprocess -> backend -> post-processing -> geometry -> messages; one
//! module per stage. Neither the compute core nor the models know about ROS.

pub mod backend;
pub mod bag;
pub mod cancel;
pub mod diagnostics;
pub mod dust3r;
pub mod eval;
pub mod geometry;
pub mod image;
pub mod msg;
pub mod outputs;
pub mod params;
pub mod pipeline;
pub mod ply;
pub mod preview;
pub mod quantile;
pub mod rng;
pub mod sample;
pub mod superpoint;
pub mod tensor;
pub mod throttle;
pub mod vo;
pub mod weights;
pub mod workers;

/// Keeps freed memory in the process for reuse. Every frame allocates the same few-MB buffers;
/// with glibc's defaults each of them is a fresh mmap whose pages fault in on first touch, which
/// costs a good part of a SuperPoint forward (docs/benchmarks.md). Call it first in `main`.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds (glibc takes its own locks).
    unsafe {
        // 32 MiB is glibc's ceiling for the mmap threshold on 64-bit.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}
