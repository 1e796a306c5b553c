//! Run-time CPU dispatch for the element-wise kernels. The crate is built for baseline x86-64
//! (a binary must not fault on older CPUs), so loops the compiler vectorises are compiled three
//! times, for AVX-512, AVX2+FMA and the baseline, and the best one the CPU has is picked.
//! No path enables floating-point contraction, so all three give bit-identical results; the
//! tests below run every kernel at every level the CPU has and compare the bits.
//!
//! [`LEVEL_ENV`] caps the level (kernels and GEMM alike), so one machine can measure the AVX2
//! path of a CPU that also has AVX-512.

/// An instruction-set level a multiversioned kernel is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Baseline x86-64 (SSE2), or any other architecture.
    Baseline,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 (F, BW, DQ, VL) with AVX2 and FMA.
    Avx512,
}

/// The environment variable that caps the level the kernels use: `avx512`, `avx2` or
/// `baseline`. A level above what the CPU has changes nothing.
pub const LEVEL_ENV: &str = "SP_DUST3R_CPU_LEVEL";

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 3] = [Level::Baseline, Level::Avx2, Level::Avx512];

    /// The level the kernels run at: the best this CPU has, capped by [`LEVEL_ENV`]. Read once.
    #[inline]
    pub fn best() -> Level {
        static CHOSEN: std::sync::OnceLock<Level> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let detected = Level::detected();
            match std::env::var(LEVEL_ENV) {
                Ok(v) => match Level::parse(&v) {
                    Some(cap) => cap.min(detected),
                    None => {
                        tracing::warn!("{LEVEL_ENV}={v:?} is not avx512, avx2 or baseline; using {}", detected.name());
                        detected
                    }
                },
                Err(_) => detected,
            }
        })
    }

    /// The best level this CPU has, whatever [`LEVEL_ENV`] says.
    pub fn detected() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if has_avx512() {
                return Level::Avx512;
            }
            if has_avx2_fma() {
                return Level::Avx2;
            }
        }
        Level::Baseline
    }

    /// The level a name (as [`Level::name`] gives it, any case) stands for.
    pub fn parse(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Its name in logs and /diagnostics.
    pub fn name(self) -> &'static str {
        match self {
            Level::Baseline => "baseline",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    /// Every level this CPU runs, baseline first (the tests compare them all, whatever the cap).
    pub fn supported() -> Vec<Level> {
        Level::ALL.into_iter().filter(|&l| l <= Level::detected()).collect()
    }
}

impl PartialOrd for Level {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Level {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (*self as u8).cmp(&(*other as u8))
    }
}

/// Defines `fn name(args) -> ret { body }` compiled per CPU level and dispatched at run time to
/// the best one, and beside it `mod name` with `name::at(level, args)`, which runs a chosen
/// level (a level the CPU lacks runs the baseline), so tests can compare the levels.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            $name::at($crate::tensor::simd::Level::best(), $($arg),*)
        }

        #[doc(hidden)]
        #[allow(clippy::too_many_arguments, dead_code)]
        pub(crate) mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::tensor::simd::Level;

            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
            unsafe fn v4($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn v3($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }

            /// The kernel compiled for `level` (the baseline where the CPU lacks `level`).
            #[inline]
            pub fn at(level: Level, $($arg: $ty),*) $(-> $ret)? {
                #[cfg(target_arch = "x86_64")]
                {
                    if level == Level::Avx512 && $crate::tensor::simd::has_avx512() {
                        // SAFETY: the CPU has every feature v4 was compiled for (checked above).
                        return unsafe { v4($($arg),*) };
                    }
                    if level >= Level::Avx2 && $crate::tensor::simd::has_avx2_fma() {
                        // SAFETY: as above, for v3's features.
                        return unsafe { v3($($arg),*) };
                    }
                }
                let _ = level;
                body($($arg),*)
            }
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
    p = p * r + 5e-1;
    let y = p * r * r + r + 1.0;
    // 2^n: n + 127 is an integer in [1, 254]; added to 2^23 it lands in the low mantissa bits,
    // whence one shift moves it to the exponent. (`n as i32` would be a saturating conversion,
    // which the compiler cannot vectorise: it made every exp of softmax scalar.)
    const MAGIC: f32 = 8_388_608.0;
    y * f32::from_bits((n + (127.0 + MAGIC)).to_bits() << 23)
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

/// Maximum with 16 independent partial maxima, so the loop vectorises (a plain fold is a
/// serial chain of dependent `max`es: it was a quarter of attention's time). NaNs are ignored,
/// as by `f32::max`; an empty slice gives negative infinity.
#[inline(always)]
pub fn max_lanes(values: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = values.chunks_exact(16);
    let tail = chunks.remainder().iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = a.max(v);
        }
    }
    acc.iter().copied().fold(tail, f32::max)
}

/// Test support: runs `run` at every level this CPU has and asserts each result equals the
/// baseline's bit for bit. `kernel` names the kernel (the census below looks for the name).
#[cfg(test)]
pub(crate) fn check_levels<T: PartialEq + std::fmt::Debug>(kernel: &str, run: impl Fn(Level) -> T) {
    let baseline = run(Level::Baseline);
    for level in Level::supported() {
        assert_eq!(run(level), baseline, "{kernel} at {level:?} differs from the baseline");
    }
    eprintln!("{kernel}: identical at {:?}", Level::supported());
}

/// The bits of floats, so that comparisons are exact (and NaN equals itself).
#[cfg(test)]
pub(crate) fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// Deterministic test values in [-scale, scale): a splitmix64 stream.
#[cfg(test)]
pub(crate) fn test_values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = crate::rng::SplitMix64::new(seed);
    (0..n).map(|_| (rng.next_f64() as f32 * 2.0 - 1.0) * scale).collect()
}

#[cfg(test)]
mod tests {
    use super::{check_levels, exp_approx, max_lanes, sum_lanes, test_values, Level};

    #[test]
    fn level_names_parse_back() {
        for level in Level::ALL {
            assert_eq!(Level::parse(level.name()), Some(level));
            assert_eq!(Level::parse(&format!(" {} ", level.name().to_uppercase())), Some(level));
        }
        assert_eq!(Level::parse("sse4"), None);
    }

    /// Every multiversioned kernel in the source has a level check (`check_levels("name", ..)`).
    #[test]
    fn every_multiversioned_kernel_is_checked_at_every_level() {
        fn sources(dir: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    sources(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut texts = Vec::new();
        sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut texts);
        let all = texts.concat();
        let mut kernels = Vec::new();
        for block in all.split(concat!("multiversion", "! {")).skip(1) {
            let after_fn = block.split_once("fn ").unwrap().1;
            kernels.push(after_fn.split('(').next().unwrap().trim().to_string());
        }
        // The macro's own definition is not a kernel.
        kernels.retain(|k| k != "$name");
        assert!(kernels.len() >= 10, "{kernels:?}");
        for k in &kernels {
            assert!(all.contains(&format!("check_levels(\"{k}\"")), "kernel {k} has no level check");
        }
    }

    #[test]
    fn sum_lanes_and_exp_approx_inlined_into_kernels_agree_across_levels() {
        // Both are `inline(always)` helpers: they take the level of the kernel they sit in.
        multiversion! {
            #[allow(dead_code)] // only its levels are called
            fn sum_then_exp(values: &[f32]) -> u32 {
                exp_approx(sum_lanes(values) * 1e-3).to_bits()
            }
        }
        let values = test_values(1000, 7, 10.0);
        check_levels("sum_then_exp", |level| sum_then_exp::at(level, &values));
    }

    #[test]
    fn max_lanes_is_the_maximum_at_every_level() {
        multiversion! {
            #[allow(dead_code)] // only its levels are called
            fn lanes_max(values: &[f32]) -> u32 {
                max_lanes(values).to_bits()
            }
        }
        for n in [0, 1, 15, 16, 17, 1000] {
            let mut values = test_values(n, 8, 10.0);
            if n > 3 {
                values[3] = f32::NAN;
            }
            let want = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_lanes(&values), want, "{n} values");
            check_levels("lanes_max", |level| lanes_max::at(level, &values));
        }
    }

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
