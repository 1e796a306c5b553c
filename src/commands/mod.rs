//! Subcommand implementations (the binary's side: anyhow errors, printing, files).

pub mod bench;
pub mod dust3r;
pub mod pose;
pub mod superpoint;

/// Median of a non-empty list of durations in milliseconds (0 for an empty list).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}
