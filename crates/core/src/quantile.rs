//! Quantiles of samples, with the convention each caller needs named: numpy's `linear`
//! (its default, and its `median`), the nearest rank (`ceil(q n)`-th smallest, the usual p95 of
//! latencies), and the nearest index `round(q (n - 1))`.

/// How a quantile falls between two samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// numpy's default: linear interpolation between the samples at `floor` and `ceil` of
    /// `q (n - 1)`.
    Linear,
    /// The `ceil(q n)`-th smallest sample (the smallest for `q = 0`): always a sample, never
    /// below the share `q` of them.
    NearestRank,
    /// The sample at index `round(q (n - 1))`, halves rounded up (numpy's `nearest` rounds them
    /// to even).
    NearestIndex,
}

/// The `q`-quantile (`q` in 0..=1, clamped) of `values`, which it reorders; NaNs order last
/// (`f64::total_cmp`), so filter them first where they can occur. `None` when empty.
pub fn quantile_in_place(values: &mut [f64], q: f64, method: Method) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    let rank = q * (n - 1) as f64;
    let k = match method {
        Method::Linear => rank.floor() as usize,
        Method::NearestRank => ((q * n as f64).ceil() as usize).saturating_sub(1),
        Method::NearestIndex => rank.round() as usize,
    }
    .min(n - 1);
    let (_, &mut at, above) = values.select_nth_unstable_by(k, f64::total_cmp);
    let next = above.iter().copied().min_by(f64::total_cmp);
    Some(match (method, next) {
        (Method::Linear, Some(next)) => at + (next - at) * (rank - k as f64),
        _ => at,
    })
}

/// [`quantile_in_place`] on a copy.
pub fn quantile(values: &[f64], q: f64, method: Method) -> Option<f64> {
    quantile_in_place(&mut values.to_vec(), q, method)
}

/// numpy's `median` (the mean of the two middle samples of an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5, Method::Linear).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// numpy 2.4: `np.percentile([7, 1, 3, 9, 5, 2], [0, 25, 50, 90, 100])` with `linear` and
    /// `inverted_cdf`; the nearest index rounds halves up where numpy's `nearest` goes to even.
    #[test]
    fn each_method_matches_numpy() {
        let v = [7.0, 1.0, 3.0, 9.0, 5.0, 2.0];
        let at = |q, m| quantile(&v, q, m).unwrap();
        let linear = [1.0, 2.25, 4.0, 8.0, 9.0];
        let inverted_cdf = [1.0, 2.0, 3.0, 9.0, 9.0];
        for (i, q) in [0.0, 0.25, 0.5, 0.9, 1.0].into_iter().enumerate() {
            assert!((at(q, Method::Linear) - linear[i]).abs() < 1e-12, "linear q {q}");
            assert_eq!(at(q, Method::NearestRank), inverted_cdf[i], "nearest rank q {q}");
        }
        assert_eq!(at(0.5, Method::NearestIndex), 5.0); // index round(2.5) = 3
        assert_eq!(at(0.25, Method::NearestIndex), 2.0); // index round(1.25) = 1
        assert_eq!(median(&v), 4.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(quantile(&[], 0.5, Method::Linear), None);
        assert_eq!(quantile(&[4.0], 0.95, Method::NearestRank), Some(4.0));
    }
}
