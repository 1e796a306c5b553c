//! Judging a stated pose covariance against the truth.

use nalgebra::{Matrix6, Quaternion, UnitQuaternion, Vector3, Vector6};
use sp_dust3r_core::geometry::Transform;
use sp_dust3r_core::msg::nav_msgs::Odometry;

/// chi-square with 6 degrees of freedom at 99.73 % (3 sigma of a normal).
pub const CHI2_6_3SIGMA: f64 = 20.06;

/// The squared Mahalanobis distance of `o`'s pose from `truth` (the same frames) under `o`'s
/// stated covariance: the error is the left perturbation (translation, rotation vector) that
/// takes the truth to the estimate, in the parent frame, ROS's order.
pub fn mahalanobis2<A, B>(o: &Odometry, truth: &Transform<A, B>) -> f64 {
    let (p, q) = (&o.pose.pose.position, &o.pose.pose.orientation);
    let r = UnitQuaternion::from_quaternion(Quaternion::new(q.w, q.x, q.y, q.z));
    let d = r.to_rotation_matrix() * truth.rotation.inverse();
    let (phi, rho) = (d.scaled_axis(), Vector3::new(p.x, p.y, p.z) - d * truth.translation);
    let e = Vector6::new(rho.x, rho.y, rho.z, phi.x, phi.y, phi.z);
    let cov = Matrix6::from_row_slice(&o.pose.covariance);
    cov.try_inverse().map_or(f64::INFINITY, |inv| (e.transpose() * inv * e)[0])
}
