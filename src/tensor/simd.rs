//! Run-time CPU dispatch for the element-wise kernels. The crate is built for baseline x86-64
//! (a binary must not fault on older CPUs), so loops the compiler vectorises are compiled three
//! times, for AVX-512, AVX2+FMA and the baseline, and the best one the CPU has is picked.
//! No path enables floating-point contraction, so all three give bit-identical results.

/// Defines `fn name(args) -> ret { body }` compiled per CPU level and dispatched at run time.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
                unsafe fn v4($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn v3($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                if $crate::tensor::simd::has_avx512() {
                    // SAFETY: the CPU has every feature v4 was compiled for (checked at run time).
                    return unsafe { v4($($arg),*) };
                }
                if $crate::tensor::simd::has_avx2_fma() {
                    // SAFETY: as above, for v3's features.
                    return unsafe { v3($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use multiversion;

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512dq")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && has_avx2_fma()
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// `exp(x)` by range reduction and a degree-6 polynomial (the Cephes `expf` scheme, about 1 ulp
/// of the true value for x in [-87, 88]), written branch-free so loops over it vectorise.
/// Inputs below -87 return ~1e-38 rather than a denormal.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Sum with 16 independent partial sums, so the loop vectorises (a plain fold is a serial chain).
#[inline(always)]
pub fn sum_lanes(values: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let chunks = values.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::exp_approx;

    #[test]
    fn exp_approx_is_within_two_ulp_of_libm() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (exp_approx(x), x.exp());
            assert!(((a - b) / b).abs() < 2.5e-7, "exp({x}) = {a}, libm {b}");
            x += 0.0137;
        }
    }
}
