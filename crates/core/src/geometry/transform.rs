//! Rigid transforms that say which frames they connect.

use std::marker::PhantomData;

use nalgebra::{Matrix3, Matrix4, Rotation3, Vector3};

/// Camera 1: the reference view of a pair (`frame_id` of the pair's outputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cam1;
/// Camera 2: the other view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cam2;

/// `T_a_b`: maps a point expressed in frame `B` into frame `A` (`X_a = R X_b + t`); equally,
/// the pose of frame `B` in frame `A`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform<A, B> {
    /// `R`.
    pub rotation: Rotation3<f64>,
    /// `t`.
    pub translation: Vector3<f64>,
    frames: PhantomData<(A, B)>,
}

/// Camera 2's pose in camera 1's frame.
pub type TCam1Cam2 = Transform<Cam1, Cam2>;
/// Camera 1's pose in camera 2's frame (`X_cam2 = R X_cam1 + t`).
pub type TCam2Cam1 = Transform<Cam2, Cam1>;

impl<A, B> Transform<A, B> {
    /// `X_a = rotation * X_b + translation`.
    pub fn new(rotation: Rotation3<f64>, translation: Vector3<f64>) -> Self {
        Self { rotation, translation, frames: PhantomData }
    }

    /// From a rotation matrix that may carry rounding; re-orthonormalised.
    pub fn from_matrix(r: &Matrix3<f64>, t: Vector3<f64>) -> Self {
        Self::new(Rotation3::from_matrix(r), t)
    }

    /// The identity.
    pub fn identity() -> Self {
        Self::new(Rotation3::identity(), Vector3::zeros())
    }

    /// `T_b_a`.
    pub fn inverse(&self) -> Transform<B, A> {
        let r = self.rotation.inverse();
        Transform::new(r, -(r * self.translation))
    }

    /// A point of frame `B` in frame `A`.
    pub fn apply(&self, x: &Vector3<f64>) -> Vector3<f64> {
        self.rotation * x + self.translation
    }

    /// `T_a_c = T_a_b * T_b_c`.
    pub fn compose<C>(&self, other: &Transform<B, C>) -> Transform<A, C> {
        Transform::new(self.rotation * other.rotation, self.rotation * other.translation + self.translation)
    }

    /// The transform a fraction `w` of the way from `self` to `other`: spherical in the rotation,
    /// linear in the translation (`w` 0 gives `self`, 1 gives `other`).
    pub fn interpolate(&self, other: &Self, w: f64) -> Self {
        let qa = nalgebra::UnitQuaternion::from_rotation_matrix(&self.rotation);
        let qb = nalgebra::UnitQuaternion::from_rotation_matrix(&other.rotation);
        // Quaternions of one rotation are never antipodal here (slerp takes the shorter way), so
        // the fallback only guards the arithmetic.
        let q = qa.try_slerp(&qb, w, 1e-12).unwrap_or(if w < 0.5 { qa } else { qb });
        Self::new(q.to_rotation_matrix(), self.translation * (1.0 - w) + other.translation * w)
    }

    /// The 4x4 homogeneous matrix.
    pub fn matrix(&self) -> Matrix4<f64> {
        let mut m = Matrix4::identity();
        m.fixed_view_mut::<3, 3>(0, 0).copy_from(self.rotation.matrix());
        m.fixed_view_mut::<3, 1>(0, 3).copy_from(&self.translation);
        m
    }

    /// Angle of the rotation between two transforms, in degrees (through a quaternion, which
    /// stays exact near zero where the trace's arccosine loses it or leaves its domain).
    pub fn rotation_error_deg(&self, other: &Self) -> f64 {
        nalgebra::UnitQuaternion::from_rotation_matrix(&(self.rotation.inverse() * other.rotation)).angle().to_degrees()
    }

    /// Angle between the translation directions, in degrees (scale-free).
    pub fn translation_direction_error_deg(&self, other: &Self) -> f64 {
        let (a, b) = (self.translation.normalize(), other.translation.normalize());
        a.dot(&b).clamp(-1.0, 1.0).acos().to_degrees()
    }
}
