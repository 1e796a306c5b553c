//! How far tracking's stated covariance can be trusted. PnP's covariance sees only the pixel
//! noise of the frame's keypoints; it takes the keyframe's points as exact, and they are not
//! (DUSt3R's pointmap errors, a depth sensor's, spread over whole surfaces, do not average out).
//! Every pair gives a check: its second view tracked against its first view's pointmap, as a
//! frame would be, next to the pose the pair itself gives. The squared Mahalanobis distance of
//! that gap under tracking's covariance would follow chi-square with 6 degrees of freedom were
//! the covariance right. The factor tracking's covariance is scaled by is the upper 95 %
//! confidence bound on the ratio of the true to the stated covariance, from the recent checks
//! (each clipped at 10 times their median, so one failed pair does not rule): wide while
//! checks are few, near the ratio itself once they are many; never below 1.

use std::collections::VecDeque;

use nalgebra::Vector6;

use crate::geometry::pnp::Covariance6;
use crate::geometry::Transform;

/// A check above this many times the median is clipped to it.
const CLIP: f64 = 10.0;

/// The 5 % quantile of chi-square with `k` degrees of freedom (Wilson and Hilferty's
/// approximation, within 1 % from k = 6 on).
fn chi2_lower_5(k: f64) -> f64 {
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a - 1.644_854 * a.sqrt()).powi(3)
}

/// Checks kept: the recent pairs speak for the scene the camera is in now.
const KEEP: usize = 32;

/// The running calibration of tracking's covariance.
#[derive(Clone, Debug, Default)]
pub struct Inflation {
    checks: VecDeque<f64>,
}

impl Inflation {
    /// Adds a pair's check: the squared Mahalanobis distance of its gap.
    pub fn observe(&mut self, mahalanobis2: f64) {
        if mahalanobis2.is_finite() {
            self.checks.push_back(mahalanobis2);
            while self.checks.len() > KEEP {
                self.checks.pop_front();
            }
        }
    }

    /// The factor tracking's covariance is multiplied by: 1 until a check came.
    pub fn factor(&self) -> f64 {
        let mut v: Vec<f64> = self.checks.iter().copied().collect();
        if v.is_empty() {
            return 1.0;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        let sum: f64 = v.iter().map(|m| m.min(CLIP * median)).sum();
        (sum / chi2_lower_5(6.0 * n as f64)).max(1.0)
    }

    /// How many checks it rests on.
    pub fn checks(&self) -> usize {
        self.checks.len()
    }
}

/// The squared Mahalanobis distance between two estimates of one pose under `covariance` (a
/// left perturbation in frame `A`, ROS's order: translation, then rotation).
pub fn mahalanobis2<A, B>(estimate: &Transform<A, B>, reference: &Transform<A, B>, covariance: &Covariance6) -> f64 {
    let d = estimate.rotation * reference.rotation.inverse();
    let (phi, rho) = (d.scaled_axis(), estimate.translation - d * reference.translation);
    let e = Vector6::new(rho.x, rho.y, rho.z, phi.x, phi.y, phi.z);
    covariance.try_inverse().map_or(f64::INFINITY, |inv| (e.transpose() * inv * e)[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use nalgebra::{Matrix6, Rotation3, Vector3};

    /// Gaps drawn from a covariance 50 times the stated one give a factor near 50 (a little
    /// above: an upper bound); gaps drawn from the stated one leave it at about 1; one check
    /// alone gives a factor several times its own ratio.
    #[test]
    fn the_factor_is_the_ratio_of_the_true_to_the_stated_covariance() {
        let stated = Matrix6::from_diagonal(&Vector6::new(1e-6, 2e-6, 4e-6, 1e-6, 1e-6, 3e-6));
        let reference =
            Transform::<(), ()>::new(Rotation3::new(Vector3::new(0.1, 0.2, 0.0)), Vector3::new(0.3, 0.0, 1.0));
        let mut rng = SplitMix64::new(7);
        for (truth, expected) in [(50.0f64, 50.0), (1.0, 1.0)] {
            let mut inflation = Inflation::default();
            for _ in 0..KEEP {
                let e = Vector6::from_fn(|i, _| rng.normal() * (stated[(i, i)] * truth).sqrt());
                let r = Rotation3::new(Vector3::new(e[3], e[4], e[5]));
                let estimate = Transform::new(r * reference.rotation, r * reference.translation + e.xyz());
                inflation.observe(mahalanobis2(&estimate, &reference, &stated));
            }
            let f = inflation.factor();
            assert!(f >= expected * 0.9 && f <= expected * 1.6, "factor {f} for {truth}");
        }
        assert_eq!(Inflation::default().factor(), 1.0);
        let mut one = Inflation::default();
        one.observe(60.0);
        assert!((one.factor() - 60.0 / 1.635).abs() < 0.5, "{}", one.factor());
        assert!((chi2_lower_5(60.0) - 43.19).abs() < 0.1 && (chi2_lower_5(192.0) - 160.9).abs() < 0.3);
    }
}
