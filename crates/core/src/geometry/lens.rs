//! Lens distortion as CameraInfo describes it (the models of image_geometry and OpenCV):
//! `plumb_bob` (k1, k2, p1, p2, k3), `rational_polynomial` (k1, k2, p1, p2, k3, k4, k5, k6) and
//! `equidistant` (the fisheye model: k1..k4 on the angle). Points are undone onto the ideal
//! pinhole of the same K, so PnP and everything after it sees a pinhole camera.

use super::Intrinsics;

/// A lens model with its coefficients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lens {
    /// No distortion (or all coefficients zero).
    Pinhole,
    /// Radial (k1, k2, k3) and tangential (p1, p2): `plumb_bob`.
    PlumbBob([f64; 5]),
    /// Rational radial (k1..k6) and tangential: `rational_polynomial`, D = k1, k2, p1, p2, k3, k4,
    /// k5, k6.
    Rational([f64; 8]),
    /// Fisheye on the ray's angle θ: θ (1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸): `equidistant`.
    Equidistant([f64; 4]),
}

/// Why CameraInfo's distortion cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LensError {
    /// A model this node does not know.
    #[error("unknown distortion model {0:?} (known: plumb_bob, rational_polynomial, equidistant)")]
    UnknownModel(String),
    /// Too few coefficients for the model, or non-finite ones.
    #[error("{model} needs {need} finite coefficients in D, got {got:?}")]
    Coefficients {
        /// The model.
        model: &'static str,
        /// How many it needs.
        need: usize,
        /// What D held.
        got: Vec<f64>,
    },
}

/// Newton steps when undoing the distortion (each converges quadratically from the distorted
/// point; lenses that fold back are rejected).
const MAX_STEPS: usize = 30;

impl Lens {
    /// The lens CameraInfo's `distortion_model` and `D` describe; all-zero or empty D is a pinhole.
    pub fn from_camera_info(model: &str, d: &[f64]) -> Result<Self, LensError> {
        if d.iter().all(|&c| c == 0.0) {
            return Ok(Lens::Pinhole);
        }
        fn take<const N: usize>(model: &'static str, d: &[f64]) -> Result<[f64; N], LensError> {
            let bad = || LensError::Coefficients { model, need: N, got: d.to_vec() };
            let c: [f64; N] = d.get(..N).ok_or_else(bad)?.try_into().map_err(|_| bad())?;
            // Extra coefficients must be zero (image_geometry ignores a plumb_bob's sixth and up).
            if c.iter().chain(&d[N..]).any(|v| !v.is_finite()) || d[N..].iter().any(|&v| v != 0.0) {
                return Err(bad());
            }
            Ok(c)
        }
        match model {
            "plumb_bob" => Ok(Lens::PlumbBob(take("plumb_bob", d)?)),
            "rational_polynomial" => Ok(Lens::Rational(take("rational_polynomial", d)?)),
            "equidistant" | "fisheye" => Ok(Lens::Equidistant(take("equidistant", d)?)),
            other => Err(LensError::UnknownModel(other.to_string())),
        }
    }

    /// Where the lens puts the ideal normalised point (x, y) (z = 1).
    pub fn distort(&self, x: f64, y: f64) -> (f64, f64) {
        let r2 = x * x + y * y;
        let tangential =
            |p1: f64, p2: f64| (2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x), p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y);
        match *self {
            Lens::Pinhole => (x, y),
            Lens::PlumbBob([k1, k2, p1, p2, k3]) => {
                let radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3));
                let (tx, ty) = tangential(p1, p2);
                (x * radial + tx, y * radial + ty)
            }
            Lens::Rational([k1, k2, p1, p2, k3, k4, k5, k6]) => {
                let radial = (1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6)));
                let (tx, ty) = tangential(p1, p2);
                (x * radial + tx, y * radial + ty)
            }
            Lens::Equidistant([k1, k2, k3, k4]) => {
                let r = r2.sqrt();
                if r < 1e-12 {
                    return (x, y);
                }
                let t = r.atan();
                let t2 = t * t;
                let td = t * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))));
                (x * td / r, y * td / r)
            }
        }
    }

    /// The ideal normalised point the lens put at (xd, yd), by Newton's method on `distort`
    /// (numerical Jacobian); `None` where it does not converge (outside the lens's valid field).
    pub fn undistort(&self, xd: f64, yd: f64) -> Option<(f64, f64)> {
        if *self == Lens::Pinhole {
            return Some((xd, yd));
        }
        let (mut x, mut y) = (xd, yd);
        for _ in 0..MAX_STEPS {
            let (fx, fy) = self.distort(x, y);
            let (ex, ey) = (fx - xd, fy - yd);
            if ex * ex + ey * ey < 1e-24 {
                return Some((x, y));
            }
            let h = 1e-7 * (1.0 + x.abs().max(y.abs()));
            let (ax, ay) = self.distort(x + h, y);
            let (bx, by) = self.distort(x, y + h);
            let (j11, j21, j12, j22) = ((ax - fx) / h, (ay - fy) / h, (bx - fx) / h, (by - fy) / h);
            let det = j11 * j22 - j12 * j21;
            if !(det.abs() > 1e-12) {
                return None;
            }
            x -= (j22 * ex - j12 * ey) / det;
            y -= (-j21 * ex + j11 * ey) / det;
        }
        let (fx, fy) = self.distort(x, y);
        ((fx - xd).powi(2) + (fy - yd).powi(2) < 1e-18).then_some((x, y))
    }
}

/// A camera: its K and its lens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Camera {
    /// The pinhole part.
    pub k: Intrinsics,
    /// The distortion.
    pub lens: Lens,
}

impl Camera {
    /// Pixel (u, v) of the image as it arrives, moved to where an ideal pinhole of the same K
    /// would have seen its ray; `None` outside the lens's valid field.
    pub fn undistort_pixel(&self, u: f64, v: f64) -> Option<(f64, f64)> {
        if self.lens == Lens::Pinhole {
            return Some((u, v));
        }
        let k = &self.k;
        let (x, y) = self.lens.undistort((u - k.cx) / k.fx, (v - k.cy) / k.fy)?;
        Some((x * k.fx + k.cx, y * k.fy + k.cy))
    }

    /// Where the ray through the ideal pinhole pixel (u, v) lands in the image as it arrives.
    pub fn distort_pixel(&self, u: f64, v: f64) -> (f64, f64) {
        let k = &self.k;
        let (x, y) = self.lens.distort((u - k.cx) / k.fx, (v - k.cy) / k.fy);
        (x * k.fx + k.cx, y * k.fy + k.cy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lens of each model against OpenCV 5.1 (`cv2.projectPoints`, `cv2.fisheye.projectPoints`
    /// with K = I) at the normalised points (0.3, -0.2) and (-0.5, 0.4); and undone.
    #[test]
    fn each_model_distorts_as_opencv_and_undoes_itself() {
        let cases = [
            (
                Lens::PlumbBob([0.26, -0.95, 0.001, -0.002, 1.2]),
                [(0.30537442000000004, -0.20362628000000008), (-0.5170251, 0.4133740800000001)],
            ),
            (
                Lens::Rational([0.5, -0.1, 0.001, -0.002, 0.02, 0.3, 0.05, 0.01]),
                [(0.3060359542357616, -0.2040673028238411), (-0.5276040225894275, 0.421837218071542)],
            ),
            (
                Lens::Equidistant([0.1, -0.05, 0.01, -0.002]),
                [(0.291174735505835, -0.19411649033722336), (-0.45696001978094497, 0.365568015824756)],
            ),
        ];
        for (lens, opencv) in cases {
            for ((x, y), (ox, oy)) in [(0.3, -0.2), (-0.5, 0.4)].into_iter().zip(opencv) {
                let (xd, yd) = lens.distort(x, y);
                assert!((xd - ox).abs() < 1e-12 && (yd - oy).abs() < 1e-12, "{lens:?}: ({xd}, {yd}) vs ({ox}, {oy})");
                let (ux, uy) = lens.undistort(xd, yd).unwrap();
                assert!((ux - x).abs() < 1e-10 && (uy - y).abs() < 1e-10, "{lens:?}: ({x}, {y}) -> ({ux}, {uy})");
            }
        }
    }

    #[test]
    fn camera_info_names_the_model_and_zero_d_is_a_pinhole() {
        assert_eq!(Lens::from_camera_info("plumb_bob", &[0.0; 5]), Ok(Lens::Pinhole));
        assert_eq!(Lens::from_camera_info("", &[]), Ok(Lens::Pinhole));
        assert_eq!(
            Lens::from_camera_info("plumb_bob", &[0.1, 0.0, 0.0, 0.0, 0.0]),
            Ok(Lens::PlumbBob([0.1, 0.0, 0.0, 0.0, 0.0]))
        );
        assert!(matches!(Lens::from_camera_info("plumb_bob", &[0.1, 0.2]), Err(LensError::Coefficients { .. })));
        assert!(matches!(Lens::from_camera_info("kannala", &[0.1]), Err(LensError::UnknownModel(_))));
        assert!(matches!(
            Lens::from_camera_info("equidistant", &[0.1, f64::NAN, 0.0, 0.0]),
            Err(LensError::Coefficients { .. })
        ));
        assert!(matches!(
            Lens::from_camera_info("rational_polynomial", &[0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
            Ok(Lens::Rational(_))
        ));
    }
}
