//! The sample sequence: a camera moving through a textured room, rendered here so that the
//! repository carries a real input with exact ground truth (camera path and intrinsics) and no
//! licence question. Ray casting against the room's six walls, 2x2 supersampling; the texture is
//! a grid of tiles with hashed grey levels and a disc per tile, which gives SuperPoint corners
//! and DUSt3R parallax. Deterministic: the same call gives the same frames.

use nalgebra::{Rotation3, Vector3};

use crate::geometry::lens::{Camera, Lens};
use crate::geometry::Transform;

/// The room's fixed frame (z up is not assumed: walls are axis-aligned planes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room;
/// The camera's optical frame (x right, y down, z forward).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CameraOptical;

/// Frame width, pixels.
pub const WIDTH: u32 = 640;
/// Frame height, pixels.
pub const HEIGHT: u32 = 480;
/// Focal length, pixels.
pub const FOCAL: f64 = 500.0;
/// Frames per second of input time.
pub const RATE: f64 = 5.0;
/// Frames in the stored sample (`data/sample/sequence.mcap`): 8 s at `RATE`. The path is spread
/// over however many frames are rendered, so a frame is the stored one only at this count.
pub const FRAMES: usize = 40;

/// Half extents of the room box, metres: x in [-3, 3], y in [-1.5, 1.5], z in [-2, 6].
const ROOM_MIN: [f64; 3] = [-3.0, -1.5, -2.0];
const ROOM_MAX: [f64; 3] = [3.0, 1.5, 6.0];

/// The camera's pose at frame `i` of `n`: a sideways arc with a slow turn, looking into the room.
pub fn camera_pose(i: usize, n: usize) -> Transform<Room, CameraOptical> {
    let s = i as f64 / (n.max(2) - 1) as f64;
    let yaw = (-12.0 + 24.0 * s).to_radians();
    let pitch = (3.0 * (s * std::f64::consts::PI).sin()).to_radians();
    // Optical axes: yaw about the room's y (down) axis, pitch about x.
    let r = Rotation3::from_axis_angle(&Vector3::y_axis(), yaw) * Rotation3::from_axis_angle(&Vector3::x_axis(), pitch);
    let t = Vector3::new(-1.0 + 2.0 * s, 0.1 * (s * 2.0 * std::f64::consts::PI).sin(), -0.5 + 0.6 * s);
    Transform::new(r, t)
}

fn hash(a: i64, b: i64, c: i64) -> f64 {
    let mut h = (a as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (b as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ (c as u64).wrapping_mul(0x1656_67B1_9E37_79F9);
    h ^= h >> 29;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 32;
    (h % 1_000_000) as f64 / 1_000_000.0
}

/// Grey level of a wall point: tiles of 0.4 m with hashed levels, a darker or lighter disc in
/// each, fine stripes on some; `wall` makes each wall's pattern different.
fn texture(u: f64, v: f64, wall: i64) -> f64 {
    let (tu, tv) = ((u / 0.4).floor(), (v / 0.4).floor());
    let (fu, fv) = (u / 0.4 - tu, v / 0.4 - tv);
    let base = 0.2 + 0.6 * hash(tu as i64, tv as i64, wall);
    let (cx, cy, r) = (
        0.3 + 0.4 * hash(tv as i64, tu as i64, wall + 7),
        0.3 + 0.4 * hash(tu as i64 + 3, tv as i64, wall),
        0.12 + 0.15 * hash(tu as i64, tv as i64 + 5, wall),
    );
    let d = ((fu - cx).powi(2) + (fv - cy).powi(2)).sqrt();
    let mut g = if d < r { 1.0 - base } else { base };
    if hash(tu as i64 + 11, tv as i64, wall) > 0.7 && ((fu * 6.0).floor() as i64) % 2 == 0 {
        g = 0.5 * g + 0.25;
    }
    g
}

/// The first wall a ray from `o` in direction `d` (room frame) meets: distance along `d`,
/// the wall's axis and side (0 = min, 1 = max).
fn hit(o: &Vector3<f64>, d: &Vector3<f64>) -> Option<(f64, usize, usize)> {
    let mut best: Option<(f64, usize, usize)> = None;
    for axis in 0..3 {
        for (side, bound) in [(0, ROOM_MIN[axis]), (1, ROOM_MAX[axis])] {
            if d[axis].abs() < 1e-12 {
                continue;
            }
            let t = (bound - o[axis]) / d[axis];
            if t > 1e-9 && best.is_none_or(|b| t < b.0) {
                best = Some((t, axis, side));
            }
        }
    }
    best
}

/// Grey level seen along a ray from `o` in direction `d` (room frame).
fn trace(o: &Vector3<f64>, d: &Vector3<f64>) -> f64 {
    hit(o, d).map_or(0.0, |(t, axis, side)| {
        let p = o + d * t;
        let (a, b) = ((axis + 1) % 3, (axis + 2) % 3);
        texture(p[a], p[b], (axis * 2 + side) as i64)
    })
}

/// The direction (optical frame, z = 1) through pixel (x, y), pixel centres at integers.
pub fn pixel_ray(x: f64, y: f64) -> Vector3<f64> {
    let (cx, cy) = (WIDTH as f64 / 2.0 - 0.5, HEIGHT as f64 / 2.0 - 0.5);
    Vector3::new((x - cx) / FOCAL, (y - cy) / FOCAL, 1.0)
}

/// The wall point seen through pixel (x, y) (any real position, also outside the image) of a
/// camera at `pose`, in the room frame: the scene's exact geometry, e.g. for true pointmaps.
pub fn surface_point(pose: &Transform<Room, CameraOptical>, x: f64, y: f64) -> Option<Vector3<f64>> {
    let d = pose.rotation * pixel_ray(x, y);
    hit(&pose.translation, &d).map(|(t, _, _)| pose.translation + d * t)
}

/// The scene's exact pointmap of a view seen from `pose` on a network grid laid over the frame
/// by `mapping` (`width x height`), in the frame of the camera at `reference`, times `scale`:
/// what a perfect DUSt3R would predict. Grid pixels outside the frame (the padding) get
/// confidence 1, below every mask; the others 10.
pub fn true_pointmap(
    mapping: &crate::dust3r::InputMapping,
    size: (usize, usize),
    pose: &Transform<Room, CameraOptical>,
    reference: &Transform<Room, CameraOptical>,
    scale: f64,
) -> crate::dust3r::Pointmap {
    true_pointmap_through(Lens::Pinhole, mapping, size, pose, reference, scale)
}

/// The sample's camera (K of `FOCAL` and the image centre) with `lens`.
pub fn camera(lens: Lens) -> Camera {
    let (cx, cy) = (WIDTH as f64 / 2.0 - 0.5, HEIGHT as f64 / 2.0 - 0.5);
    Camera { k: crate::geometry::Intrinsics { fx: FOCAL, fy: FOCAL, cx, cy }, lens }
}

/// [`true_pointmap`] of a view seen through `lens`: each grid pixel's point is the wall point on
/// the ray the lens bends onto it (none where the lens has no ray).
pub fn true_pointmap_through(
    lens: Lens,
    mapping: &crate::dust3r::InputMapping,
    (width, height): (usize, usize),
    pose: &Transform<Room, CameraOptical>,
    reference: &Transform<Room, CameraOptical>,
    scale: f64,
) -> crate::dust3r::Pointmap {
    let camera = camera(lens);
    let to_reference = reference.inverse();
    let (mut points, mut confidence) = (Vec::with_capacity(width * height * 3), Vec::with_capacity(width * height));
    for v in 0..height {
        for u in 0..width {
            let (x, y) = mapping.to_original(u as f64, v as f64);
            let q = camera
                .undistort_pixel(x, y)
                .and_then(|(x, y)| surface_point(pose, x, y))
                .map_or(Vector3::repeat(f64::NAN), |p| to_reference.apply(&p) * scale);
            points.extend([q.x as f32, q.y as f32, q.z as f32]);
            let inside = (-0.5..WIDTH as f64 - 0.5).contains(&x) && (-0.5..HEIGHT as f64 - 0.5).contains(&y);
            confidence.push(if inside { 10.0 } else { 1.0 });
        }
    }
    crate::dust3r::Pointmap { height, width, points, confidence }
}

/// Frame `i` of `n` as 8-bit grey, `WIDTH x HEIGHT`, row-major.
pub fn render(i: usize, n: usize) -> Vec<u8> {
    render_through(Lens::Pinhole, i, n)
}

/// [`render`] through `lens`: each pixel sees the ray the lens bends onto it (black where none).
pub fn render_through(lens: Lens, i: usize, n: usize) -> Vec<u8> {
    let camera = camera(lens);
    let pose = camera_pose(i, n);
    let o = pose.translation;
    let mut out = Vec::with_capacity((WIDTH * HEIGHT) as usize);
    for y in 0..HEIGHT {
        for x in 0..WIDTH {
            let mut sum = 0.0;
            for (sx, sy) in [(-0.25, -0.25), (0.25, -0.25), (-0.25, 0.25), (0.25, 0.25)] {
                if let Some((u, v)) = camera.undistort_pixel(x as f64 + sx, y as f64 + sy) {
                    sum += trace(&o, &(pose.rotation * pixel_ray(u, v)));
                }
            }
            out.push((sum / 4.0 * 255.0).round().clamp(0.0, 255.0) as u8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_point_projects_where_it_was_rendered() {
        // The ray through a pixel hits the wall; projecting the hit point with the camera pose
        // and K gives the pixel back (the ground truth and the images agree).
        let pose = camera_pose(3, 10);
        let (x, y) = (100.0, 350.0);
        let (cx, cy) = (WIDTH as f64 / 2.0 - 0.5, HEIGHT as f64 / 2.0 - 0.5);
        let d = pose.rotation * Vector3::new((x - cx) / FOCAL, (y - cy) / FOCAL, 1.0);
        let o = pose.translation;
        let t = (0..3)
            .flat_map(|a| [(a, ROOM_MIN[a]), (a, ROOM_MAX[a])])
            .filter_map(|(a, b)| Some((b - o[a]) / d[a]).filter(|t| *t > 0.0))
            .fold(f64::INFINITY, f64::min);
        let p_cam = pose.inverse().apply(&(o + d * t));
        assert!((surface_point(&pose, x, y).unwrap() - (o + d * t)).norm() < 1e-12);
        assert!((p_cam.x / p_cam.z * FOCAL + cx - x).abs() < 1e-9 && (p_cam.y / p_cam.z * FOCAL + cy - y).abs() < 1e-9);
        let img = render(0, 10);
        assert_eq!(img.len(), (WIDTH * HEIGHT) as usize);
        assert_eq!(img, render(0, 10), "deterministic");
        let mean = img.iter().map(|&v| v as f64).sum::<f64>() / img.len() as f64;
        assert!(mean > 40.0 && mean < 215.0, "mean {mean}");
    }
}
