//! Products in bfloat16 with float32 accumulation: the right operand is rounded to bf16 and
//! packed once (a linear layer's weight, at load), the left operand is rounded row by row at each
//! product, and every sum is kept in float32. Rounding is to nearest, ties to even, as PyTorch's
//! `.to(torch.bfloat16)` does. Two kernels read the same packing: AMX (`tdpbf16ps` on 16 x 16
//! tiles; Sapphire Rapids and later, where Linux grants the tile state) and AVX512_BF16
//! (`vdpbf16ps`, two bf16 multiply-adds per float32 lane; Zen 4, Cooper Lake and later).

use rayon::prelude::*;

use super::kept::Kept;
use super::matmul::Threads;
use super::packed::{for_each_block, whole_tile, SendPtr, KC};
use super::simd::{multiversion, Level};
use super::TensorError;

/// How a network's products are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// Float32 throughout.
    #[default]
    Fp32,
    /// The products of the layers built in it (linear layers, attention, convolutions) in bf16
    /// with float32 sums (see the module's comment); the rest in float32.
    Bf16,
}

impl Precision {
    /// Every precision, by name.
    pub const NAMES: [&'static str; 2] = ["fp32", "bf16"];

    /// Its name in parameters, logs and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }

    /// The precision a name stands for.
    pub fn from_name(name: &str) -> Option<Precision> {
        match name {
            "fp32" => Some(Precision::Fp32),
            "bf16" => Some(Precision::Bf16),
            _ => None,
        }
    }

    /// What this CPU runs when asked for `self`: bf16 needs a bf16 kernel (see
    /// [`Bf16Kernel::best`]); else float32.
    pub fn supported(self) -> Precision {
        match self {
            Precision::Bf16 if bf16_available() => Precision::Bf16,
            _ => Precision::Fp32,
        }
    }

    /// What runs when `self` is asked, for logs and /diagnostics: `fp32`, or bf16 with its
    /// kernel (`bf16 on amx_bf16`).
    pub fn running(self) -> String {
        match (self.supported(), Bf16Kernel::best()) {
            (Precision::Bf16, Some(kernel)) => format!("bf16 on {}", kernel.name()),
            (ran, _) => ran.name().to_string(),
        }
    }

    /// When this CPU runs something other than `self`: why, and what runs, for a warning.
    pub fn not_run_here(self) -> Option<String> {
        let ran = self.supported();
        (ran != self).then(|| {
            format!(
                "{} asked, but this CPU has no bf16 kernel (AMX-BF16 or AVX512_BF16 at the avx512 level): {} runs",
                self.name(),
                ran.name()
            )
        })
    }

    /// What a user asking for `self` should be warned of here, if anything: that something else
    /// runs ([`Precision::not_run_here`]) or that bf16 is likely slower than float32.
    pub fn warning(self) -> Option<String> {
        self.not_run_here().or_else(|| self.slower_here())
    }

    /// When bf16 runs here but is likely slower than float32, why: Intel's `vdpbf16ps` does no
    /// more multiply-adds a cycle than its two FMA ports do in float32, so on an Intel CPU
    /// without AMX the AVX512_BF16 kernel loses to fp32 (docs/speed.md).
    fn slower_here(self) -> Option<String> {
        let kernel = Bf16Kernel::best().filter(|_| self.supported() == Precision::Bf16)?;
        kernel.slower_than_fp32(cpu_is_intel()).then(|| {
            format!(
                "bf16 runs on {} here, which on Intel CPUs without AMX is slower than fp32 (docs/speed.md): fp32 is \
                 the faster choice on this CPU",
                kernel.name()
            )
        })
    }
}

/// Whether the CPU's vendor is Intel (CPUID leaf 0).
fn cpu_is_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // The vendor string is EBX, EDX, ECX in that order.
        let leaf0 = std::arch::x86_64::__cpuid(0);
        [leaf0.ebx, leaf0.edx, leaf0.ecx].map(u32::to_le_bytes) == [*b"Genu", *b"ineI", *b"ntel"]
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A bf16 kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Kernel {
    /// AVX512_BF16's `vdpbf16ps` on a 12 x 32 register tile.
    Avx512Bf16,
    /// AMX's `tdpbf16ps` on a 32 x 32 tile of four 16 x 16 tiles.
    Amx,
}

/// Set to `0` to keep AMX off (the AVX512_BF16 kernel then runs where the CPU has it).
pub const AMX_ENV: &str = "SP_DUST3R_AMX";

impl Bf16Kernel {
    /// Its name in logs and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Bf16Kernel::Avx512Bf16 => "avx512_bf16",
            Bf16Kernel::Amx => "amx_bf16",
        }
    }

    /// The kernel bf16 products run on here, if any: AMX where the CPU has it and Linux grants
    /// the tile state (unless [`AMX_ENV`] is `0`), else AVX512_BF16; both need the AVX-512
    /// level (a capped level runs float32). Decided once.
    pub fn best() -> Option<Bf16Kernel> {
        static CHOSEN: std::sync::OnceLock<Option<Bf16Kernel>> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let amx_off = std::env::var(AMX_ENV).is_ok_and(|v| v.trim() == "0");
            let amx = Bf16Kernel::supported().contains(&Bf16Kernel::Amx) && !amx_off;
            amx.then_some(Bf16Kernel::Amx).or_else(|| Bf16Kernel::supported().first().copied())
        })
    }

    /// [`Bf16Kernel::best`], or the error of a bf16 product asked where none runs.
    fn required() -> Result<Bf16Kernel, TensorError> {
        Bf16Kernel::best().ok_or(TensorError::Shape { op: "gemm_bf16", what: "no bf16 kernel".into() })
    }

    /// Whether this kernel is expected to be slower than float32 on a CPU of this vendor: the
    /// AVX512_BF16 kernel on Intel (measured on a Xeon without AMX, docs/speed.md). AMX, and
    /// AVX512_BF16 on AMD's Zen 4, are faster than float32.
    fn slower_than_fp32(self, intel: bool) -> bool {
        self == Bf16Kernel::Avx512Bf16 && intel
    }

    /// Every bf16 kernel this CPU runs (the tests compare them all). Decided once.
    pub fn supported() -> &'static [Bf16Kernel] {
        static KERNELS: std::sync::OnceLock<Vec<Bf16Kernel>> = std::sync::OnceLock::new();
        KERNELS.get_or_init(|| {
            let mut kernels = Vec::new();
            #[cfg(target_arch = "x86_64")]
            if Level::best() == Level::Avx512 {
                if std::arch::is_x86_feature_detected!("avx512bf16") {
                    kernels.push(Bf16Kernel::Avx512Bf16);
                }
                if amx::granted() {
                    kernels.push(Bf16Kernel::Amx);
                }
            }
            kernels
        })
    }
}

/// Whether the bf16 kernels run here (see [`Bf16Kernel::best`]).
pub fn bf16_available() -> bool {
    Bf16Kernel::best().is_some()
}

/// `x` rounded to bf16 (nearest, ties to even; a NaN stays a quiet NaN).
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// The float32 a bf16 stands for.
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Two bf16 values as one lane of `vdpbf16ps`: the even depth index in the low half.
fn pair(even: f32, odd: f32) -> u32 {
    to_bf16(even) as u32 | (to_bf16(odd) as u32) << 16
}

/// Columns of a panel: two AVX-512 vectors of float32 results, or two AMX tiles.
const NR: usize = 32;
/// Depth pairs are padded to a multiple of this: one AMX tile's 16 rows of pairs.
const PAIR_BLOCK: usize = 16;
/// Rows of the left operand are padded to a multiple of this: two AMX tiles of 16 rows.
const AMX_ROWS: usize = 32;
/// Rows of the register tile: 24 accumulators of 32 registers.
const MR: usize = 12;

/// The `k x n` right operand in bf16, in panels of `NR` columns: panel `p` holds, for each
/// pair of depth indices `q`, the lanes `pair(B[2q][j], B[2q + 1][j])` of its columns `j`
/// (zero past column `n` and past depth `k`, the pairs padded to `PAIR_BLOCK`): an AMX tile
/// of B is 16 such rows of 16 lanes.
#[derive(Debug, Clone)]
pub struct PackedBf16 {
    k: usize,
    n: usize,
    data: Vec<u32>,
}

impl PackedBf16 {
    /// From PyTorch's `n x k` weight (the product is `x W^T`). `None` when the CPU has no bf16
    /// kernel or the sizes do not match.
    pub fn from_weight(weight: &[f32], n: usize, k: usize) -> Option<PackedBf16> {
        (weight.len() == n * k).then(|| Self::pack_columns(k, n, |j| &weight[j * k..][..k]))?
    }

    /// The `k x n` operand whose transpose has rows `row_stride` apart in `t` (attention's keys).
    pub(crate) fn from_transposed(t: &[f32], k: usize, n: usize, row_stride: usize) -> Option<PackedBf16> {
        let fits = k == 0 || n == 0 || t.len() >= (n - 1) * row_stride + k;
        fits.then(|| Self::pack_columns(k, n, |j| &t[j * row_stride..][..k]))?
    }

    /// The `k x n` operand whose rows are `row_stride` apart in `rhs` (attention's values).
    pub(crate) fn from_strided_rows(rhs: &[f32], k: usize, n: usize, row_stride: usize) -> Option<PackedBf16> {
        let fits = k == 0 || n == 0 || rhs.len() >= (k - 1) * row_stride + n;
        fits.then(|| Self::pack_rows(k, n, |kk| &rhs[kk * row_stride..][..n]))?
    }

    /// Zeroed panels for a `k x n` operand, or `None` where nothing is to be packed here.
    fn empty(k: usize, n: usize) -> Option<PackedBf16> {
        let packs = bf16_available() && n > 0 && k > 0;
        packs.then(|| PackedBf16 { k, n, data: vec![0u32; n.div_ceil(NR) * padded_pairs(k) * NR] })
    }

    /// Packs an operand whose column `j` is the `k` values `column(j)`: each column is rounded
    /// at once, then its pairs are spread over the panel's rows.
    fn pack_columns<'a>(k: usize, n: usize, column: impl Fn(usize) -> &'a [f32]) -> Option<PackedBf16> {
        let mut packed = Self::empty(k, n)?;
        let pairs = padded_pairs(k);
        // An odd depth's last pair takes a zero as its odd half.
        let mut halves = vec![0u16; 2 * k.div_ceil(2)];
        for (p, panel) in packed.data.chunks_mut(pairs * NR).enumerate() {
            for j in 0..NR.min(n - p * NR) {
                round_halves(column(p * NR + j), &mut halves[..k]);
                for (q, h) in halves.chunks_exact(2).enumerate() {
                    panel[q * NR + j] = h[0] as u32 | (h[1] as u32) << 16;
                }
            }
        }
        Some(packed)
    }

    /// Packs an operand whose row `kk` is the `n` values `row(kk)`: two rows make a row of
    /// pairs.
    fn pack_rows<'a>(k: usize, n: usize, row: impl Fn(usize) -> &'a [f32]) -> Option<PackedBf16> {
        let mut packed = Self::empty(k, n)?;
        let pairs = padded_pairs(k);
        for (p, panel) in packed.data.chunks_mut(pairs * NR).enumerate() {
            let cols = p * NR..(p * NR + NR).min(n);
            for q in 0..k.div_ceil(2) {
                let odd = if 2 * q + 1 < k { &row(2 * q + 1)[cols.clone()] } else { &[] };
                pair_rows(&row(2 * q)[cols.clone()], odd, &mut panel[q * NR..][..cols.len()]);
            }
        }
        Some(packed)
    }
}

/// [`to_bf16`] without a branch, so that loops over it vectorize.
#[inline(always)]
fn half(x: f32) -> u32 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let quiet_nan = (bits >> 16) | 0x40;
    if x.is_nan() {
        quiet_nan
    } else {
        rounded
    }
}

multiversion! {
    /// `x` rounded to bf16 into `out` (as long as `x`).
    fn round_halves(x: &[f32], out: &mut [u16]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = half(v) as u16;
        }
    }
}

multiversion! {
    /// Lanes `pair(even[j], odd[j])`, or `pair(even[j], 0)` where `odd` is empty.
    fn pair_rows(even: &[f32], odd: &[f32], out: &mut [u32]) {
        if odd.len() == even.len() {
            for ((o, &e), &d) in out.iter_mut().zip(even).zip(odd) {
                *o = half(e) | half(d) << 16;
            }
        } else {
            for (o, &e) in out.iter_mut().zip(even) {
                *o = half(e);
            }
        }
    }
}

/// A constant right operand packed once, in float32 for the packed micro-kernels or in bf16:
/// what a layer built in a [`Precision`] multiplies by.
#[derive(Debug, Clone)]
pub(crate) enum Packed {
    F32(super::packed::PackedRhs),
    Bf16(PackedBf16),
}

impl Packed {
    /// From PyTorch's `n x k` weight: bf16 when asked and the CPU runs it, else float32 where
    /// the level has a packed kernel; `None`: neither (the caller keeps the general GEMM).
    pub(crate) fn from_weight(weight: &[f32], n: usize, k: usize, precision: Precision) -> Option<Packed> {
        match precision.supported() {
            Precision::Bf16 => PackedBf16::from_weight(weight, n, k).map(Packed::Bf16),
            Precision::Fp32 => super::packed::PackedRhs::from_weight(weight, n, k).map(Packed::F32),
        }
    }

    /// The `k x n` operand whose transpose has rows `row_stride` apart in `t` (attention's
    /// keys), as [`Packed::from_weight`] chooses.
    pub(crate) fn from_transposed(
        t: &[f32],
        k: usize,
        n: usize,
        row_stride: usize,
        precision: Precision,
    ) -> Option<Packed> {
        match precision.supported() {
            Precision::Bf16 => PackedBf16::from_transposed(t, k, n, row_stride).map(Packed::Bf16),
            Precision::Fp32 => {
                super::packed::PackedRhs::from_transposed_at(Level::best(), t, k, n, row_stride).map(Packed::F32)
            }
        }
    }

    /// The `k x n` operand whose rows are `row_stride` apart in `rhs` (attention's values), as
    /// [`Packed::from_weight`] chooses.
    pub(crate) fn from_strided_rows(
        rhs: &[f32],
        k: usize,
        n: usize,
        row_stride: usize,
        precision: Precision,
    ) -> Option<Packed> {
        match precision.supported() {
            Precision::Bf16 => PackedBf16::from_strided_rows(rhs, k, n, row_stride).map(Packed::Bf16),
            Precision::Fp32 => {
                super::packed::PackedRhs::from_strided_rows_at(Level::best(), rhs, k, n, row_stride).map(Packed::F32)
            }
        }
    }

    /// Whether the short products (Winograd's per-block ones, attention's per-head ones) run
    /// packed in `precision`: in bf16 always, in float32 where
    /// [`super::packed::packs_short_products`] says so.
    pub(crate) fn packs_short(precision: Precision) -> bool {
        precision.supported() == Precision::Bf16 || super::packed::packs_short_products(Level::best())
    }

    /// From a `k x n` row-major operand, as [`Packed::from_weight`] chooses.
    pub(crate) fn from_rows(rhs: &[f32], k: usize, n: usize, precision: Precision) -> Option<Packed> {
        match precision.supported() {
            Precision::Bf16 => PackedBf16::from_strided_rows(rhs, k, n, n).map(Packed::Bf16),
            Precision::Fp32 => super::packed::PackedRhs::from_rows(rhs, k, n).map(Packed::F32),
        }
    }

    /// `c += a x B` (see [`super::packed::gemm_packed`] and [`gemm_bf16`]).
    pub(crate) fn gemm(
        &self,
        c: &mut [f32],
        ldc: usize,
        a: &[f32],
        lda: usize,
        m: usize,
        threads: Threads,
    ) -> Result<(), TensorError> {
        match self {
            Packed::F32(b) => super::packed::gemm_packed(c, ldc, a, lda, m, b, threads),
            Packed::Bf16(b) => gemm_bf16(c, ldc, a, lda, m, b, threads),
        }
    }
}

/// Depth pairs of a `k`-deep product, padded to [`PAIR_BLOCK`].
fn padded_pairs(k: usize) -> usize {
    k.div_ceil(2).div_ceil(PAIR_BLOCK) * PAIR_BLOCK
}

/// `c += a x B` for `m` rows of `a` (`m x k`, rows `lda` apart), `c` `m x n` (rows `ldc` apart),
/// `a` rounded to bf16 first, on the best kernel; on rayon's pool or the calling thread.
/// Extents are checked.
pub fn gemm_bf16(
    c: &mut [f32],
    ldc: usize,
    a: &[f32],
    lda: usize,
    m: usize,
    b: &PackedBf16,
    threads: Threads,
) -> Result<(), TensorError> {
    let kernel = Bf16Kernel::required()?;
    gemm_bf16_on(kernel, c, ldc, a, lda, m, b, threads)
}

/// [`gemm_bf16`] on `kernel`, which must be one of [`Bf16Kernel::supported`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_bf16_on(
    kernel: Bf16Kernel,
    c: &mut [f32],
    ldc: usize,
    a: &[f32],
    lda: usize,
    m: usize,
    b: &PackedBf16,
    threads: Threads,
) -> Result<(), TensorError> {
    if m > 0 && a.len() < (m - 1) * lda + b.k {
        return Err(TensorError::TooSmall { op: "gemm_bf16", what: "left operand", len: a.len() });
    }
    let k = b.k;
    product(kernel, c, ldc, m, b, threads, |row, out| round_row(&a[row * lda..][..k], out))
}

impl PackedBf16 {
    /// `c += a x self` for `m` rows of `a` that `row(i, lanes)` writes, rounded to bf16, into the
    /// first `k / 2` (rounded up) `lanes` (as [`gemm_bf16`] rounds them): for a left operand
    /// computed row by row, which then need not be written in float32 first.
    pub(crate) fn gemm_rows(
        &self,
        c: &mut [f32],
        ldc: usize,
        m: usize,
        threads: Threads,
        row: impl Fn(usize, &mut [u32]) + Sync,
    ) -> Result<(), TensorError> {
        let kernel = Bf16Kernel::required()?;
        product(kernel, c, ldc, m, self, threads, row)
    }
}

/// `c += a x b` on `kernel`, the rows of `a` written by `row` (see [`PackedBf16::gemm_rows`]).
#[allow(clippy::too_many_arguments)]
fn product(
    kernel: Bf16Kernel,
    c: &mut [f32],
    ldc: usize,
    m: usize,
    b: &PackedBf16,
    threads: Threads,
    row: impl Fn(usize, &mut [u32]) + Sync,
) -> Result<(), TensorError> {
    if !Bf16Kernel::supported().contains(&kernel) {
        return Err(TensorError::Shape { op: "gemm_bf16", what: format!("{} does not run here", kernel.name()) });
    }
    let (k, n) = (b.k, b.n);
    if m == 0 {
        return Ok(());
    }
    if ldc < n || c.len() < (m - 1) * ldc + n {
        return Err(TensorError::TooSmall { op: "gemm_bf16", what: "destination", len: c.len() });
    }
    let pairs = padded_pairs(k);
    let mut rounded = Rounded::take(m.div_ceil(AMX_ROWS) * AMX_ROWS * pairs);
    // Every lane is written: the pairs past k's and the rows past m (AMX's tiles of 32 rows
    // read them) are zero.
    let written = k.div_ceil(2);
    let round = |(i, out): (usize, &mut [u32])| match i < m {
        true => {
            row(i, &mut out[..written]);
            out[written..].fill(0);
        }
        false => out.fill(0),
    };
    match threads {
        Threads::Single => rounded.lanes().chunks_exact_mut(pairs).enumerate().for_each(round),
        Threads::All => rounded.lanes().par_chunks_exact_mut(pairs).enumerate().for_each(round),
    }
    let rounded = rounded.lanes();
    let c_ptr = SendPtr(c.as_mut_ptr());
    for_each_block(m, n.div_ceil(NR), threads, |rows, panels| {
        // SAFETY: the blocks' rows and panels lie inside the extents checked above and no two
        // blocks share a tile of c; `rounded` holds whole tiles of 32 rows of `pairs` lanes
        // (blocks start at multiples of MC, a multiple of 32); the CPU runs `kernel`.
        unsafe {
            match kernel {
                Bf16Kernel::Avx512Bf16 => block(c_ptr.get(), ldc, rounded, pairs, b, rows, panels),
                Bf16Kernel::Amx => amx::block(c_ptr.get(), ldc, rounded, pairs, b, rows, panels),
            }
        }
    });
    Ok(())
}

/// The rounded left operand of a product, in a buffer the thread keeps (see [`Kept`]) up to
/// [`Rounded::KEPT`] lanes: attention's many short products per head and block neither allocate
/// nor clear their operand afresh.
struct Rounded(Kept<Vec<u32>>, usize);

thread_local! {
    static SPARE_LANES: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Rounded {
    /// The largest buffer a thread keeps, in lanes (8 MiB).
    const KEPT: usize = 2 << 20;

    /// A buffer of at least `len` lanes of any value.
    fn take(len: usize) -> Rounded {
        let mut lanes = Kept::take(&SPARE_LANES, |lanes| lanes.capacity() <= Self::KEPT);
        // Grown, never shortened: a short product between two long ones clears nothing.
        if lanes.len() < len {
            lanes.resize(len, 0);
        }
        Rounded(lanes, len)
    }

    /// Its `len` lanes.
    fn lanes(&mut self) -> &mut [u32] {
        &mut self.0[..self.1]
    }
}

/// `x` rounded to bf16 into `out`'s first `x.len() / 2` lanes (rounded up; an odd last value
/// pairs with zero).
fn round_row(x: &[f32], out: &mut [u32]) {
    round_scaled_row(x, 1.0, out)
}

/// `x * scale` rounded to bf16 as [`round_row`] rounds `x` (times 1 it is `x` to the bit): by
/// `vcvtne2ps2bf16` where the CPU has it, which rounds as [`to_bf16`] does (the tests compare
/// the two) but may take denormal inputs as zero.
pub(crate) fn round_scaled_row(x: &[f32], scale: f32, out: &mut [u32]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512bf16") {
        // SAFETY: the CPU has the instructions.
        done = unsafe { x86::round_pairs(x, scale, out) };
    }
    for (q, lane) in out.iter_mut().enumerate().take(x.len().div_ceil(2)).skip(done) {
        *lane = pair(x[2 * q] * scale, x.get(2 * q + 1).map_or(0.0, |v| v * scale));
    }
}

/// Rows `rows` of c against panels `panels` of b, depth in passes of [`KC`] values.
///
/// # Safety
/// As for [`gemm_bf16`]'s blocks: `c` addresses the rows and the panels' columns and nothing
/// else writes them meanwhile; the CPU has AVX512_BF16.
unsafe fn block(
    c: *mut f32,
    ldc: usize,
    a: &[u32],
    pairs: usize,
    b: &PackedBf16,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
) {
    let n = b.n;
    for q0 in (0..pairs).step_by(KC / 2) {
        let depth = (KC / 2).min(pairs - q0);
        for p in panels.clone() {
            let cols = p * NR..(p * NR + NR).min(n);
            let panel = &b.data[p * pairs * NR + q0 * NR..][..depth * NR];
            let mut r = rows.start;
            while r < rows.end {
                let tile_rows = MR.min(rows.end - r);
                let a_tile = a[r * pairs + q0..].as_ptr();
                // SAFETY: the caller's contract, for rows r..r + tile_rows and columns `cols`.
                unsafe {
                    tile(tile_rows, depth, a_tile, pairs, panel.as_ptr(), c.add(r * ldc + cols.start), ldc, cols.len())
                };
                r += tile_rows;
            }
        }
    }
}

/// One register tile (see [`whole_tile`]).
///
/// # Safety
/// `a` addresses `rows` rows of `depth` lanes `lda` apart, `panel` `depth * NR` lanes, `c`
/// `rows` rows of `cols` values `ldc` apart; the CPU has AVX512_BF16.
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    rows: usize,
    depth: usize,
    a: *const u32,
    lda: usize,
    panel: *const u32,
    c: *mut f32,
    ldc: usize,
    cols: usize,
) {
    // SAFETY: forwarded; the kernel writes `rows` rows of NR values, rows <= MR, MR x NR fits.
    unsafe { whole_tile(rows, cols, NR, c, ldc, |c, ldc| micro(rows, depth, a, lda, panel, c, ldc)) }
}

/// Dispatches to the kernel compiled for exactly `rows` rows.
unsafe fn micro(rows: usize, depth: usize, a: *const u32, lda: usize, b: *const u32, c: *mut f32, ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; `rows` is 1..=MR.
    unsafe {
        macro_rules! by_rows {
            ($($r:literal),*) => {
                match rows {
                    $($r => x86::dpbf16::<$r>(depth, a, lda, b, c, ldc),)*
                    _ => unreachable!("a tile has 1..=MR rows"),
                }
            };
        }
        by_rows!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (rows, depth, a, lda, b, c, ldc);
        unreachable!("the bf16 kernels exist only on x86-64");
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Rounds whole runs of 32 values of `x`, times `scale`, to bf16 pairs in `out`; returns the
    /// lanes written.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX512_BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn round_pairs(x: &[f32], scale: f32, out: &mut [u32]) -> usize {
        let runs = (x.len() / 32).min(out.len() / 16);
        let factor = _mm512_set1_ps(scale);
        for (i, dst) in out.chunks_exact_mut(16).take(runs).enumerate() {
            let src = &x[i * 32..][..32];
            // SAFETY: 32 values read, 16 lanes written, both inside the slices.
            unsafe {
                let lo = _mm512_mul_ps(_mm512_loadu_ps(src.as_ptr()), factor);
                let hi = _mm512_mul_ps(_mm512_loadu_ps(src.as_ptr().add(16)), factor);
                let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                _mm512_storeu_si512(dst.as_mut_ptr().cast(), packed);
            }
        }
        runs * 16
    }

    /// `c[R x 32] += a[R x 2 depth] x b[2 depth x 32]` by `vdpbf16ps`.
    ///
    /// # Safety
    /// See `tile`; the CPU has AVX-512F and AVX512_BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn dpbf16<const R: usize>(
        depth: usize,
        a: *const u32,
        lda: usize,
        b: *const u32,
        c: *mut f32,
        ldc: usize,
    ) {
        // SAFETY: every address stays within the extents the caller vouches for; a vector of
        // 16 u32 lanes is a vector of 32 bf16 (the same 64 bytes).
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 2]; R];
            let mut bp = b;
            for q in 0..depth {
                let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.cast()));
                let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(16).cast()));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r * lda + q) as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
                }
                bp = bp.add(32);
            }
            for (r, acc) in acc.iter().enumerate() {
                let row = c.add(r * ldc);
                _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), acc[0]));
                _mm512_storeu_ps(row.add(16), _mm512_add_ps(_mm512_loadu_ps(row.add(16)), acc[1]));
            }
        }
    }
}

/// The AMX kernel: four 16 x 16 float32 tiles (tmm0-3) hold a 32 x 32 block of c, two tiles of
/// a (tmm4-5: 16 rows x 16 pairs) and two of b (tmm6-7: 16 pairs x 16 columns) are loaded for
/// each 16 pairs of depth. Stable Rust has no AMX intrinsics: the instructions are written as
/// inline assembly, and Linux hands out the tile state only on request (`arch_prctl`).
#[cfg(target_arch = "x86_64")]
mod amx {
    use std::arch::asm;

    use super::{PackedBf16, AMX_ROWS, NR, PAIR_BLOCK};

    /// `arch_prctl` code that asks for an extended state component.
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    /// The AMX tile data state component.
    const XFEATURE_XTILEDATA: libc::c_long = 18;

    /// Whether the CPU has AMX-TILE and AMX-BF16 and Linux granted this process the tile state.
    /// Asked once.
    pub fn granted() -> bool {
        static GRANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *GRANTED.get_or_init(|| {
            // SAFETY: CPUID leaf 7 exists on every x86-64 CPU that has AVX-512 (checked by the
            // caller); the syscall takes two integers and changes only this process's permission.
            unsafe {
                let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
                let (amx_bf16, amx_tile) = (leaf7.edx >> 22 & 1 == 1, leaf7.edx >> 24 & 1 == 1);
                amx_bf16
                    && amx_tile
                    && libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
            }
        })
    }

    /// The tile configuration: palette 1, eight tiles of 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct TileConfig([u8; 64]);

    impl TileConfig {
        fn all_full() -> TileConfig {
            let mut cfg = [0u8; 64];
            cfg[0] = 1;
            for t in 0..8 {
                cfg[16 + 2 * t] = 64;
                cfg[48 + t] = 16;
            }
            TileConfig(cfg)
        }
    }

    /// Rows `rows` of c against panels `panels` of b, in blocks of 32 x 32.
    ///
    /// # Safety
    /// `a` holds whole 32-row tiles from `rows.start` (a multiple of 32) to past `rows.end`,
    /// `pairs` lanes a row (a multiple of 16, b's depth); `c` addresses the rows and the panels'
    /// columns and nothing else writes them meanwhile; [`granted`] is true.
    pub unsafe fn block(
        c: *mut f32,
        ldc: usize,
        a: &[u32],
        pairs: usize,
        b: &PackedBf16,
        rows: std::ops::Range<usize>,
        panels: std::ops::Range<usize>,
    ) {
        let cfg = TileConfig::all_full();
        let mut out = [0.0f32; AMX_ROWS * NR];
        let (a_stride, b_stride) = (pairs * 4, NR * 4);
        // SAFETY: the configuration is valid for palette 1; every tile load reads 16 rows of 64
        // bytes inside `a` or b's panel (whole tiles, by the caller's contract and the
        // packing's padding), and every store writes inside `out`.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
            for p in panels {
                let panel = b.data[p * pairs * NR..].as_ptr();
                for r in (rows.start..rows.end).step_by(AMX_ROWS) {
                    let a0 = a[r * pairs..].as_ptr();
                    let a1 = a0.add(16 * pairs);
                    asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
                    for q in (0..pairs).step_by(PAIR_BLOCK) {
                        asm!(
                            "tileloadd tmm4, [{a0} + {sa}*1]",
                            "tileloadd tmm5, [{a1} + {sa}*1]",
                            "tileloadd tmm6, [{b0} + {sb}*1]",
                            "tileloadd tmm7, [{b1} + {sb}*1]",
                            "tdpbf16ps tmm0, tmm4, tmm6",
                            "tdpbf16ps tmm1, tmm4, tmm7",
                            "tdpbf16ps tmm2, tmm5, tmm6",
                            "tdpbf16ps tmm3, tmm5, tmm7",
                            a0 = in(reg) a0.add(q),
                            a1 = in(reg) a1.add(q),
                            b0 = in(reg) panel.add(q * NR),
                            b1 = in(reg) panel.add(q * NR + 16),
                            sa = in(reg) a_stride,
                            sb = in(reg) b_stride,
                            options(nostack, readonly),
                        );
                    }
                    let o = out.as_mut_ptr();
                    asm!(
                        "tilestored [{o0} + {s}*1], tmm0",
                        "tilestored [{o1} + {s}*1], tmm1",
                        "tilestored [{o2} + {s}*1], tmm2",
                        "tilestored [{o3} + {s}*1], tmm3",
                        o0 = in(reg) o,
                        o1 = in(reg) o.add(16),
                        o2 = in(reg) o.add(16 * NR),
                        o3 = in(reg) o.add(16 * NR + 16),
                        s = in(reg) NR * 4,
                        options(nostack),
                    );
                    let cols = NR.min(b.n - p * NR);
                    for i in 0..AMX_ROWS.min(rows.end - r) {
                        let row = c.add((r + i) * ldc + p * NR);
                        for (j, v) in out[i * NR..][..cols].iter().enumerate() {
                            *row.add(j) += v;
                        }
                    }
                }
            }
            asm!("tilerelease", options(nostack, nomem));
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod amx {
    pub fn granted() -> bool {
        false
    }

    pub unsafe fn block(
        _: *mut f32,
        _: usize,
        _: &[u32],
        _: usize,
        _: &super::PackedBf16,
        _: std::ops::Range<usize>,
        _: std::ops::Range<usize>,
    ) {
        unreachable!("AMX exists only on x86-64");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::simd::{check_levels, test_values};

    #[test]
    fn only_the_avx512_bf16_kernel_on_intel_is_called_slower_than_fp32() {
        // As measured (docs/speed.md): AVX512_BF16 on an Intel Xeon without AMX slower than fp32;
        // AMX, and AVX512_BF16 on AMD Zen 4, faster.
        assert!(Bf16Kernel::Avx512Bf16.slower_than_fp32(true));
        assert!(!Bf16Kernel::Amx.slower_than_fp32(true));
        assert!(!Bf16Kernel::Avx512Bf16.slower_than_fp32(false));
        assert_eq!(Precision::Fp32.slower_here(), None);
    }

    #[test]
    fn rounding_is_to_nearest_with_ties_to_even() {
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even (1) wins; 1 + 3 * 2^-8 rounds up.
        assert_eq!(from_bf16(to_bf16(1.0 + 1.0 / 256.0)), 1.0);
        assert_eq!(from_bf16(to_bf16(1.0 + 3.0 / 256.0)), 1.0 + 4.0 / 256.0);
        assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
        assert_eq!(from_bf16(to_bf16(f32::INFINITY)), f32::INFINITY);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        // The largest finite float rounds to infinity, as PyTorch's conversion does.
        assert_eq!(from_bf16(to_bf16(f32::MAX)), f32::INFINITY);
    }

    #[test]
    fn rows_round_alike_with_and_without_the_conversion_instruction() {
        let x = test_values(101, 9, 3.0);
        let scalar: Vec<u32> = (0..51).map(|q| pair(x[2 * q], x.get(2 * q + 1).copied().unwrap_or(0.0))).collect();
        let mut out = vec![7u32; 52];
        round_row(&x, &mut out);
        assert_eq!(out[..51], scalar[..], "rounded lanes");
        assert_eq!(out[51], 7, "past the row");
    }

    /// The bf16 product equals an f64 sum over the bf16-rounded operands (every bf16 product is
    /// exact in float32, so only float32's sums differ) on shapes off every tile edge: odd
    /// depths, rows not a multiple of MR, columns not of NR, depth past KC; and it differs from
    /// the float32 product by bf16's rounding, not more.
    #[test]
    fn bf16_product_matches_the_rounded_reference() {
        if !bf16_available() {
            eprintln!("no AVX512_BF16 here: the bf16 kernels are not built");
            assert!(PackedBf16::from_weight(&[1.0; 6], 2, 3).is_none());
            return;
        }
        let round = |x: f32| from_bf16(to_bf16(x)) as f64;
        eprintln!("bf16 kernels here: {:?}", Bf16Kernel::supported());
        for (m, k, n) in
            [(1, 1, 1), (5, 7, 3), (13, 301, 40), (200, 1025, 33), (37, 64, 96), (9, 2100, 20), (400, 96, 70)]
        {
            let w = test_values(n * k, 2, 1.0);
            let b = PackedBf16::from_weight(&w, n, k).unwrap();
            let (lda, ldc) = (k + 3, n + 5);
            let a = test_values((m - 1) * lda + k, 3, 1.0);
            let start = test_values(m * ldc, 4, 1.0);
            for (kernel, threads) in
                Bf16Kernel::supported().iter().flat_map(|&k| [(k, Threads::All), (k, Threads::Single)])
            {
                let mut c = start.clone();
                gemm_bf16_on(kernel, &mut c, ldc, &a, lda, m, &b, threads).unwrap();
                for i in 0..m {
                    for j in 0..ldc {
                        let got = c[i * ldc + j] as f64;
                        if j >= n {
                            assert_eq!(got, start[i * ldc + j] as f64, "padding at ({i}, {j}) written");
                            continue;
                        }
                        let row = (0..k).map(|p| (a[i * lda + p], w[j * k + p]));
                        let want =
                            start[i * ldc + j] as f64 + row.clone().map(|(x, y)| round(x) * round(y)).sum::<f64>();
                        let magnitude: f64 = row.clone().map(|(x, y)| (x as f64 * y as f64).abs()).sum();
                        let tol = 1e-6 * (k as f64).sqrt() * (1.0 + magnitude);
                        assert!(
                            (got - want).abs() <= tol,
                            "{kernel:?} {m}x{k}x{n} {threads:?} ({i}, {j}): {got} vs {want}"
                        );
                        let exact = start[i * ldc + j] as f64 + row.map(|(x, y)| x as f64 * y as f64).sum::<f64>();
                        assert!((got - exact).abs() <= 2.0 * 2f64.powi(-8) * magnitude + tol, "({i}, {j})");
                    }
                }
            }
        }
    }

    /// Packing by definition: lane `pair(B[2q][j], B[2q + 1][j])` at row `q` of column `j`'s
    /// panel, zero elsewhere.
    fn packed_by_definition(k: usize, n: usize, b: impl Fn(usize, usize) -> f32) -> Vec<u32> {
        let pairs = padded_pairs(k);
        let mut data = vec![0u32; n.div_ceil(NR) * pairs * NR];
        for j in 0..n {
            for q in 0..k.div_ceil(2) {
                let odd = if 2 * q + 1 < k { b(2 * q + 1, j) } else { 0.0 };
                data[(j / NR) * pairs * NR + q * NR + j % NR] = pair(b(2 * q, j), odd);
            }
        }
        data
    }

    #[test]
    fn both_packings_round_every_value_as_to_bf16_does() {
        if !bf16_available() {
            return;
        }
        let (k, n) = (75, 41);
        let mut w = test_values(n * k, 6, 2.0);
        // Ties, both infinities, NaNs of both signs, a denormal and the largest float.
        let special = [1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN];
        for (i, v) in special.into_iter().chain([1e-40, f32::MAX, -0.0]).enumerate() {
            w[i * 37 % (n * k)] = v;
        }
        let want = packed_by_definition(k, n, |kk, j| w[j * k + kk]);
        assert_eq!(PackedBf16::from_weight(&w, n, k).map(|p| p.data), Some(want.clone()), "by columns");
        let rows: Vec<f32> = (0..k).flat_map(|kk| (0..n).map(move |j| (kk, j))).map(|(kk, j)| w[j * k + kk]).collect();
        assert_eq!(PackedBf16::from_strided_rows(&rows, k, n, n).map(|p| p.data), Some(want), "by rows");
    }

    #[test]
    fn rounding_for_packing_is_identical_at_every_level() {
        let mut x = test_values(203, 8, 4.0);
        x[5] = f32::NAN;
        x[77] = 1e-40;
        check_levels("round_halves", |level| {
            let mut out = vec![0u16; x.len()];
            round_halves::at(level, &x, &mut out);
            out
        });
        check_levels("pair_rows", |level| {
            let (mut both, mut even) = (vec![0u32; 101], vec![0u32; 101]);
            pair_rows::at(level, &x[..101], &x[101..202], &mut both);
            pair_rows::at(level, &x[..101], &[], &mut even);
            (both, even)
        });
    }

    #[test]
    fn strided_operands_pack_like_contiguous_ones() {
        if !bf16_available() {
            return;
        }
        let (k, n, stride) = (71, 37, 90);
        let wide = test_values(k.max(n) * stride, 5, 1.0);
        let transposed: Vec<f32> = (0..n).flat_map(|j| wide[j * stride..][..k].to_vec()).collect();
        let rows_t: Vec<f32> =
            (0..n).flat_map(|j| (0..k).map(move |kk| (j, kk))).map(|(j, kk)| wide[kk * stride + j]).collect();
        let keys = PackedBf16::from_transposed(&wide, k, n, stride).map(|p| p.data);
        assert_eq!(keys, PackedBf16::from_weight(&transposed, n, k).map(|p| p.data));
        let values = PackedBf16::from_strided_rows(&wide, k, n, stride).map(|p| p.data);
        assert_eq!(values, PackedBf16::from_weight(&rows_t, n, k).map(|p| p.data));
        assert!(PackedBf16::from_transposed(&wide[..(n - 1) * stride + k - 1], k, n, stride).is_none());
        assert!(PackedBf16::from_strided_rows(&wide[..(k - 1) * stride + n - 1], k, n, stride).is_none());
    }

    #[test]
    fn mismatched_operands_are_errors() {
        let Some(b) = PackedBf16::from_weight(&[1.0; 12], 3, 4) else { return };
        let mut c = [0.0; 6];
        let all = Threads::All;
        assert!(gemm_bf16(&mut c, 3, &[0.0; 7], 4, 2, &b, all).is_err(), "a too short");
        assert!(gemm_bf16(&mut c[..5], 3, &[0.0; 8], 4, 2, &b, all).is_err(), "c too short");
        assert!(gemm_bf16(&mut c, 2, &[0.0; 8], 4, 2, &b, all).is_err(), "ldc below n");
        assert!(gemm_bf16(&mut c, 3, &[0.0; 8], 4, 2, &b, all).is_ok());
        assert!(PackedBf16::from_weight(&[1.0; 11], 3, 4).is_none());
    }
}
