//! The project's one pseudo-random generator: splitmix64 (Steele, Lea and Flood, 2014). Small,
//! seedable and reproducible on every machine, which is all RANSAC sampling, synthetic weights,
//! benchmarks and tests need (nothing here is for security).

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's output function: a well-mixed 64-bit value of a counter state.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The top 53 bits of `z` as a uniform value in [0, 1).
fn unit(z: u64) -> f64 {
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A splitmix64 stream.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The stream seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix(self.state)
    }

    /// The next uniform value in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        unit(self.next_u64())
    }

    /// The next index below `n` (`n > 0`; the modulo bias is below 2^-40 for the sizes used).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// The next standard normal variate (Box-Muller on two uniforms).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.next_f64().max(1e-300), self.next_f64());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// The `i`-th (1-based) uniform value of the stream seeded by `seed`, without stepping
    /// through the ones before it.
    pub fn nth_f64(seed: u64, i: u64) -> f64 {
        unit(mix(seed.wrapping_add(i.wrapping_mul(GOLDEN))))
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn matches_the_reference_sequence() {
        // splitmix64 seeded with 1234567: the first outputs of the reference C implementation.
        let mut r = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(got, [6457827717110365317, 3203168211198807973, 9817491932198370423]);
    }

    #[test]
    fn nth_is_the_stream_without_stepping() {
        let mut r = SplitMix64::new(42);
        for i in 1..=5 {
            assert_eq!(r.next_f64().to_bits(), SplitMix64::nth_f64(42, i).to_bits());
        }
    }
}
