//! A pair as a picture for a person (`sp_dust3r dust3r --preview`): on top, both views' confident
//! points rendered from beside camera 1 with the two cameras drawn as small frusta, so the 3-D
//! shape shows without MeshLab; below, each view's network input, depth and confidence as colour
//! maps, which show where DUSt3R is sure and where it is not. The renderer is a few lines on
//! `image`: the point-cloud renderers on crates.io (polyscope-rs, pointblitz) need a GPU context,
//! which a headless robot or CI machine may not have.

use crate::quantile::{quantile_in_place, Method};
use image::{Rgb, RgbImage};
use nalgebra::{Rotation3, Vector3};

use crate::dust3r::cloud::{cloud_points, CloudPoint, ColouredPoints};
use crate::dust3r::Pointmap;
use crate::geometry::TCam1Cam2;
use crate::image::draw::draw_line;
use crate::image::text::{draw_text, text_width};

/// Side of each view tile in the bottom row (six of them: input, depth, confidence per view).
pub const TILE: u32 = 170;
/// The picture's width: the six tiles.
pub const WIDTH: u32 = 6 * TILE;
/// Height of the caption band on top.
const CAPTION: u32 = 28;
/// Height of the cloud render.
const CLOUD: u32 = 540;
/// Height of the labels under the tiles.
pub const LABELS: u32 = 22;
/// The picture's size.
pub const SIZE: (u32, u32) = (WIDTH, CAPTION + CLOUD + TILE + LABELS);
/// Background, RViz's default grey: the points' colours read against it.
pub const BACKGROUND: [u8; 3] = [48, 48, 48];
/// Camera 1's frustum.
pub const CAMERA1: [u8; 3] = [255, 90, 90];
/// Camera 2's frustum.
pub const CAMERA2: [u8; 3] = [90, 200, 255];
const TEXT: [u8; 3] = [235, 235, 235];
const TEXT_SIZE: f32 = 14.0;

/// Where the cloud is looked at from: camera 1 turned about the cloud's middle by `yaw_deg` to
/// the right and `pitch_deg` up, `backoff` times as far from it as camera 1 is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Viewpoint {
    /// Degrees to the right of camera 1 (negative: left).
    pub yaw_deg: f64,
    /// Degrees above camera 1 (negative: below).
    pub pitch_deg: f64,
    /// Distance to the cloud's middle relative to camera 1's.
    pub backoff: f64,
}

impl Default for Viewpoint {
    /// Far enough to the side and above that depth shows as shape, near enough that the scene is
    /// still recognisable from camera 1's view.
    fn default() -> Self {
        Self { yaw_deg: 35.0, pitch_deg: 20.0, backoff: 1.3 }
    }
}

/// A camera to draw: its pose in camera 1's frame, colour and label.
#[derive(Clone, Copy, Debug)]
pub struct CameraMark {
    /// Orientation (columns: the camera's axes in camera 1's frame).
    pub rotation: Rotation3<f64>,
    /// Optical centre in camera 1's frame.
    pub centre: Vector3<f64>,
    /// Frustum colour.
    pub colour: [u8; 3],
    /// Label at the optical centre.
    pub label: &'static str,
}

impl CameraMark {
    /// Camera 1 itself.
    pub fn camera1() -> Self {
        Self { rotation: Rotation3::identity(), centre: Vector3::zeros(), colour: CAMERA1, label: "1" }
    }

    /// Camera 2 where the pair's pose puts it.
    pub fn camera2(t_cam1_cam2: &TCam1Cam2) -> Self {
        Self { rotation: t_cam1_cam2.rotation, centre: t_cam1_cam2.translation, colour: CAMERA2, label: "2" }
    }
}

/// The virtual pinhole camera of a render, in camera 1's frame.
struct VirtualCamera {
    rotation: Rotation3<f64>,
    centre: Vector3<f64>,
    near: f64,
    /// Depth of the cameras' frusta: a fraction of the distance to the cloud's middle.
    frustum: f64,
    focal: f64,
    principal: (f64, f64),
}

impl VirtualCamera {
    /// `x` (camera 1's frame) in the virtual camera's frame.
    fn local(&self, x: &Vector3<f64>) -> Vector3<f64> {
        self.rotation.inverse() * (x - self.centre)
    }

    /// Pixel and depth of `x`, if in front of the camera.
    fn project(&self, x: &Vector3<f64>) -> Option<(f64, f64, f64)> {
        let p = self.local(x);
        (p.z > self.near)
            .then(|| (self.focal * p.x / p.z + self.principal.0, self.focal * p.y / p.z + self.principal.1, p.z))
    }
}

/// The `q`-quantile (0..=1) of `values` (reordered) at the nearest index; 0 when empty.
fn quantile(values: &mut [f64], q: f64) -> f64 {
    quantile_in_place(values, q, Method::NearestIndex).unwrap_or(0.0)
}

/// A cloud point's position in double precision, for projecting.
fn position_of(p: &CloudPoint) -> Vector3<f64> {
    Vector3::new(f64::from(p.xyz[0]), f64::from(p.xyz[1]), f64::from(p.xyz[2]))
}

/// Every `n`-th of `points` for statistics, at most about 20,000 of them.
fn sample_of(points: &[CloudPoint]) -> impl Iterator<Item = Vector3<f64>> + '_ {
    let step = (points.len() / 20_000).max(1);
    points.iter().step_by(step).map(position_of)
}

/// The frustum of `cam`, `scale` deep: its centre and the four corners of its image plane.
fn frustum(cam: &CameraMark, scale: f64) -> [Vector3<f64>; 5] {
    let corner = |x: f64, y: f64| cam.centre + cam.rotation * (Vector3::new(x * 0.6, y * 0.45, 1.0) * scale);
    [cam.centre, corner(-1.0, -1.0), corner(1.0, -1.0), corner(1.0, 1.0), corner(-1.0, 1.0)]
}

/// Places the virtual camera for `view` and fits its focal length so that the middle 98 % of
/// the points and the cameras fill a `width x height` picture.
fn place(points: &[CloudPoint], cameras: &[CameraMark], view: &Viewpoint, width: u32, height: u32) -> VirtualCamera {
    let sample: Vec<Vector3<f64>> = sample_of(points).collect();
    let mut axis: Vec<f64> = Vec::with_capacity(sample.len());
    let mut middle = Vector3::zeros();
    for k in 0..3 {
        axis.clear();
        axis.extend(sample.iter().map(|p| p[k]));
        middle[k] = quantile(&mut axis, 0.5);
    }
    let distance = middle.norm().max(1e-6);
    // Image y points down and z forward: a turn to the right is about -y, up is about -x.
    let rotation = Rotation3::from_axis_angle(&Vector3::y_axis(), -view.yaw_deg.to_radians())
        * Rotation3::from_axis_angle(&Vector3::x_axis(), -view.pitch_deg.to_radians());
    let centre = middle - rotation * middle * view.backoff;
    let mut cam = VirtualCamera {
        rotation,
        centre,
        near: 0.02 * distance,
        frustum: 0.12 * distance,
        focal: 1.0,
        principal: (0.0, 0.0),
    };
    let marks = cameras.iter().flat_map(|c| frustum(c, cam.frustum));
    let (mut us, mut vs): (Vec<f64>, Vec<f64>) =
        sample.iter().filter_map(|p| cam.project(p)).map(|(u, v, _)| (u, v)).unzip();
    let (mut lo_u, mut hi_u, mut lo_v, mut hi_v) =
        (quantile(&mut us, 0.01), quantile(&mut us, 0.99), quantile(&mut vs, 0.01), quantile(&mut vs, 0.99));
    for (u, v, _) in marks.filter_map(|p| cam.project(&p)) {
        (lo_u, hi_u, lo_v, hi_v) = (lo_u.min(u), hi_u.max(u), lo_v.min(v), hi_v.max(v));
    }
    let (w, h) = (f64::from(width), f64::from(height));
    let focal = (0.9 * w / (hi_u - lo_u).max(1e-9)).min(0.9 * h / (hi_v - lo_v).max(1e-9));
    cam.focal = if focal.is_finite() { focal } else { w };
    cam.principal = (w / 2.0 - cam.focal * (lo_u + hi_u) / 2.0, h / 2.0 - cam.focal * (lo_v + hi_v) / 2.0);
    cam
}

/// `points` seen from `view` on a `width x height` picture: a 2x2 splat per point in its colour,
/// the nearest winning; `cameras` as frusta with their labels, on top.
pub fn render_cloud(
    points: &[CloudPoint],
    cameras: &[CameraMark],
    view: &Viewpoint,
    width: u32,
    height: u32,
) -> RgbImage {
    let mut img = RgbImage::from_pixel(width, height, Rgb(BACKGROUND));
    if width == 0 || height == 0 {
        return img;
    }
    let cam = place(points, cameras, view, width, height);
    let mut depth = vec![f64::INFINITY; (width * height) as usize];
    for p in points {
        let Some((u, v, z)) = cam.project(&position_of(p)) else { continue };
        let (u0, v0) = (u.floor(), v.floor());
        for (du, dv) in [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)] {
            let (pu, pv) = (u0 + du, v0 + dv);
            if pu < 0.0 || pv < 0.0 || pu >= f64::from(width) || pv >= f64::from(height) {
                continue;
            }
            let i = pv as usize * width as usize + pu as usize;
            if z < depth[i] {
                depth[i] = z;
                img.put_pixel(pu as u32, pv as u32, Rgb(p.rgb));
            }
        }
    }
    for mark in cameras {
        let f = frustum(mark, cam.frustum);
        let at = |p: &Vector3<f64>| cam.project(p).map(|(u, v, _)| (u, v));
        for (a, b) in [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (2, 3), (3, 4), (4, 1)] {
            if let (Some(pa), Some(pb)) = (at(&f[a]), at(&f[b])) {
                draw_line(&mut img, pa, pb, mark.colour);
            }
        }
        // The label beside the optical centre, on the side away from the image plane.
        let base = f[1..].iter().sum::<Vector3<f64>>() / 4.0;
        if let (Some((u, v)), Some((bu, bv))) = (at(&f[0]), at(&base)) {
            let (du, dv) = (u - bu, v - bv);
            let n = du.hypot(dv).max(1e-9);
            let size = TEXT_SIZE * 1.2;
            let (lu, lv) = (u + du / n * size as f64, v + dv / n * size as f64);
            let half = f64::from(text_width(mark.label, size)) / 2.0;
            draw_text(&mut img, (lu - half) as f32, (lv - f64::from(size) / 2.0) as f32, mark.label, size, mark.colour);
        }
    }
    img
}

/// A value's place between `lo` (0) and `hi` (1), clamped; 0.5 for an empty range.
fn position(value: f64, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        ((value - lo) / (hi - lo)).clamp(0.0, 1.0)
    } else {
        0.5
    }
}

/// Depth colour: near bright (yellow), far dark (purple), viridis.
pub fn depth_colour(t: f64) -> [u8; 3] {
    let c = colorous::VIRIDIS.eval_continuous(1.0 - t.clamp(0.0, 1.0));
    [c.r, c.g, c.b]
}

/// Confidence colour: low dark, high bright, inferno.
pub fn confidence_colour(t: f64) -> [u8; 3] {
    let c = colorous::INFERNO.eval_continuous(t.clamp(0.0, 1.0));
    [c.r, c.g, c.b]
}

/// A `grid_w x grid_h` grid drawn into the `TILE x TILE` square at (`left`, `top`) of `img`,
/// aspect kept and centred, nearest pixel; `pixel(index)` colours a grid cell (None: background).
fn tile(
    img: &mut RgbImage,
    left: u32,
    top: u32,
    grid_w: usize,
    grid_h: usize,
    pixel: impl Fn(usize) -> Option<[u8; 3]>,
) {
    if grid_w == 0 || grid_h == 0 {
        return;
    }
    let scale = f64::from(TILE) / grid_w.max(grid_h) as f64;
    let (w, h) = ((grid_w as f64 * scale).round() as u32, (grid_h as f64 * scale).round() as u32);
    let (ox, oy) = (left + (TILE - w.min(TILE)) / 2, top + (TILE - h.min(TILE)) / 2);
    for ty in 0..h.min(TILE) {
        for tx in 0..w.min(TILE) {
            let gx = (((f64::from(tx) + 0.5) / scale) as usize).min(grid_w - 1);
            let gy = (((f64::from(ty) + 0.5) / scale) as usize).min(grid_h - 1);
            if let Some(c) = pixel(gy * grid_w + gx) {
                img.put_pixel(ox + tx, oy + ty, Rgb(c));
            }
        }
    }
}

/// The range of the depths (z in camera 1's frame) of a pair's cloud (its confident, finite
/// points): their 2nd to 98th percentile, so a few wild points do not wash the maps out.
fn depth_range(points: &[CloudPoint]) -> (f64, f64) {
    let mut z: Vec<f64> = points.iter().map(|p| f64::from(p.xyz[2])).collect();
    (quantile(&mut z, 0.02), quantile(&mut z, 0.98))
}

/// Formats a value for a label with three significant digits.
fn short(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The whole preview (`SIZE`): `caption` on top; the points of `views` above `min_confidence`
/// rendered from the default viewpoint with camera 1 and, when the pose is known, camera 2;
/// under it, per view, its input, its depth (z in camera 1's frame, one range for both views)
/// and its confidence (log scale).
pub fn preview(
    views: &[ColouredPoints<'_>; 2],
    min_confidence: f32,
    t_cam1_cam2: Option<&TCam1Cam2>,
    caption: &str,
) -> RgbImage {
    let (width, height) = SIZE;
    let mut img = RgbImage::from_pixel(width, height, Rgb(BACKGROUND));
    let points: Vec<CloudPoint> = cloud_points(views, min_confidence, 1).collect();
    let mut cameras = vec![CameraMark::camera1()];
    cameras.extend(t_cam1_cam2.map(CameraMark::camera2));
    let viewpoint = Viewpoint::default();
    let cloud = render_cloud(&points, &cameras, &viewpoint, width, CLOUD);
    image::imageops::replace(&mut img, &cloud, 0, i64::from(CAPTION));
    draw_text(&mut img, 10.0, 6.0, caption, TEXT_SIZE, TEXT);
    // The cameras' legend under the caption.
    let mut x = 10.0;
    for mark in &cameras {
        let label = format!("camera {}", mark.label);
        x = draw_text(&mut img, x, CAPTION as f32 + 6.0, &label, TEXT_SIZE * 0.9, mark.colour) + 16.0;
    }
    let seen = format!("seen from {:.0}° right of and {:.0}° above camera 1", viewpoint.yaw_deg, viewpoint.pitch_deg);
    let right = width as f32 - 10.0 - text_width(&seen, TEXT_SIZE * 0.9);
    draw_text(&mut img, right, CAPTION as f32 + 6.0, &seen, TEXT_SIZE * 0.9, TEXT);

    let (z_lo, z_hi) = depth_range(&points);
    let top = CAPTION + CLOUD;
    for (k, view) in views.iter().enumerate() {
        let p: &Pointmap = view.points;
        let c_max = p.confidence.iter().copied().filter(|c| c.is_finite()).fold(1.0f32, f32::max);
        let left = k as u32 * 3 * TILE;
        tile(&mut img, left, top, p.width, p.height, |i| view.rgb.get(i * 3..i * 3 + 3).map(|c| [c[0], c[1], c[2]]));
        tile(&mut img, left + TILE, top, p.width, p.height, |i| {
            let z = f64::from(*p.points.get(i * 3 + 2)?);
            z.is_finite().then(|| depth_colour(position(z, z_lo, z_hi)))
        });
        tile(&mut img, left + 2 * TILE, top, p.width, p.height, |i| {
            let c = f64::from(*p.confidence.get(i)?).max(1.0);
            c.is_finite().then(|| confidence_colour(position(c.ln(), 0.0, f64::from(c_max).ln())))
        });
        let labels = [
            format!("view {} input", k + 1),
            format!("z in camera 1: {}–{}", short(z_lo), short(z_hi)),
            format!("confidence 1–{} (log)", short(f64::from(c_max))),
        ];
        for (j, label) in labels.iter().enumerate() {
            let size = TEXT_SIZE * 0.85;
            let x = (left + j as u32 * TILE) as f32 + (TILE as f32 - text_width(label, size)) / 2.0;
            draw_text(&mut img, x, (top + TILE + 3) as f32, label, size, TEXT);
        }
    }
    img
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(xyz: [f32; 3], rgb: [u8; 3]) -> CloudPoint {
        CloudPoint { xyz, rgb, confidence: 5.0 }
    }

    /// A square patch of points around `centre` (half size `r`, in x and y).
    fn patch(centre: [f32; 3], r: f32, rgb: [u8; 3]) -> Vec<CloudPoint> {
        let mut out = Vec::new();
        for i in -10..=10 {
            for j in -10..=10 {
                out.push(point([centre[0] + r * i as f32 / 10.0, centre[1] + r * j as f32 / 10.0, centre[2]], rgb));
            }
        }
        out
    }

    /// The mean pixel position of `colour`, and how many pixels have it.
    fn where_is(img: &RgbImage, colour: [u8; 3]) -> (f64, f64, usize) {
        let hits: Vec<(u32, u32)> =
            img.enumerate_pixels().filter(|(_, _, p)| p.0 == colour).map(|(x, y, _)| (x, y)).collect();
        let n = hits.len().max(1) as f64;
        let sx = hits.iter().map(|h| f64::from(h.0)).sum::<f64>() / n;
        let sy = hits.iter().map(|h| f64::from(h.1)).sum::<f64>() / n;
        (sx, sy, hits.len())
    }

    const RED: [u8; 3] = [255, 0, 0];
    const BLUE: [u8; 3] = [0, 0, 255];

    #[test]
    fn from_camera_1_the_render_is_camera_1s_picture_fitted_and_the_nearest_point_wins() {
        // A wall at z = 4, red on the left, blue on the right; a small green patch at z = 2 in
        // front of its middle.
        let mut points = patch([-1.0, 0.0, 4.0], 1.0, RED);
        points.extend(patch([1.0, 0.0, 4.0], 1.0, BLUE));
        points.extend(patch([0.0, 0.0, 2.0], 0.1, [0, 255, 0]));
        let view = Viewpoint { yaw_deg: 0.0, pitch_deg: 0.0, backoff: 1.0 };
        let img = render_cloud(&points, &[], &view, 400, 200);
        let (red, blue) = (where_is(&img, RED), where_is(&img, BLUE));
        assert!(red.0 < 200.0 && blue.0 > 200.0, "red left, blue right: {red:?} {blue:?}");
        // Fitted: the wall (its middle 98 %) spans about 90 % of the limiting side, the height.
        let rows: Vec<u32> = img.enumerate_pixels().filter(|(_, _, p)| p.0 == RED).map(|(_, y, _)| y).collect();
        let span = rows.iter().max().unwrap() - rows.iter().min().unwrap();
        assert!((170..=195).contains(&span), "the wall is {span} rows tall of 200");
        // The patch in front hides the wall at the picture's middle.
        assert_eq!(img.get_pixel(200, 100).0, [0, 255, 0]);
    }

    #[test]
    fn seen_from_the_right_and_above_near_points_move_left_and_down() {
        // Two patches on camera 1's optical axis: from camera 1 they cover each other; from the
        // right, the near one lies left of the far one; from above, below it.
        let mut points = patch([0.0, 0.0, 1.0], 0.05, RED);
        points.extend(patch([0.0, 0.0, 3.0], 0.05, BLUE));
        // (yaw, pitch) and the signs of the near patch's offset from the far one in the
        // picture (x right, y down; 0: the same column or row).
        for (yaw_deg, pitch_deg, sign) in
            [(35.0, 0.0, (-1.0, 0.0)), (-35.0, 0.0, (1.0, 0.0)), (0.0, 20.0, (0.0, 1.0)), (0.0, -20.0, (0.0, -1.0))]
        {
            let view = Viewpoint { yaw_deg, pitch_deg, backoff: 1.3 };
            let img = render_cloud(&points, &[], &view, 300, 300);
            let (near, far) = (where_is(&img, RED), where_is(&img, BLUE));
            assert!(near.2 > 0 && far.2 > 0, "{view:?}: both visible");
            let (dx, dy) = (near.0 - far.0, near.1 - far.1);
            for (d, s) in [(dx, sign.0), (dy, sign.1)] {
                let ok = if s == 0.0 { d.abs() < 3.0 } else { d * s > 20.0 };
                assert!(ok, "{view:?}: the near patch is ({dx}, {dy}) from the far one");
            }
        }
    }

    #[test]
    fn cameras_are_drawn_in_their_colours() {
        let points = patch([0.0, 0.0, 3.0], 1.0, RED);
        let t = TCam1Cam2::new(Rotation3::identity(), Vector3::new(0.5, 0.0, 0.0));
        let img =
            render_cloud(&points, &[CameraMark::camera1(), CameraMark::camera2(&t)], &Viewpoint::default(), 400, 300);
        let (one, two) = (where_is(&img, CAMERA1), where_is(&img, CAMERA2));
        assert!(one.2 > 30 && two.2 > 30, "{one:?} {two:?}");
        // Camera 2 is 0.5 to camera 1's right.
        assert!(two.0 > one.0, "{one:?} {two:?}");
    }

    #[test]
    fn a_pair_without_usable_points_still_draws() {
        // All points non-finite, or none confident, or an empty grid: a picture, no panic.
        let nan = Pointmap { height: 4, width: 4, points: vec![f32::NAN; 48], confidence: vec![5.0; 16] };
        let unsure = Pointmap { height: 4, width: 4, points: vec![1.0; 48], confidence: vec![1.0; 16] };
        let empty = Pointmap { height: 0, width: 0, points: Vec::new(), confidence: Vec::new() };
        let t = TCam1Cam2::identity();
        for pm in [&nan, &unsure, &empty] {
            let rgb = vec![0u8; pm.width * pm.height * 3];
            let views = [ColouredPoints { points: pm, rgb: &rgb }, ColouredPoints { points: pm, rgb: &[] }];
            assert_eq!(preview(&views, 3.0, Some(&t), "nothing").dimensions(), SIZE);
        }
    }

    #[test]
    fn the_preview_maps_depth_and_confidence() {
        // View 1: a slanted plane, z from 1 (left) to 3 (right); confidence growing downwards.
        let (w, h) = (64usize, 48usize);
        let mut pm = Pointmap { height: h, width: w, points: Vec::new(), confidence: Vec::new() };
        for y in 0..h {
            for x in 0..w {
                let z = 1.0 + 2.0 * x as f32 / (w - 1) as f32;
                pm.points.extend([(x as f32 - 32.0) / 32.0 * z, (y as f32 - 24.0) / 32.0 * z, z]);
                pm.confidence.push(1.0 + 9.0 * y as f32 / (h - 1) as f32);
            }
        }
        let rgb = vec![128u8; w * h * 3];
        let views = [ColouredPoints { points: &pm, rgb: &rgb }, ColouredPoints { points: &pm, rgb: &rgb }];
        let img = preview(&views, 0.5, None, "slanted plane");
        assert_eq!(img.dimensions(), SIZE);
        let top = CAPTION + CLOUD;
        let middle = top + TILE / 2;
        // The depth tile of view 1: near (left) bright, far (right) dark, the ends of viridis.
        let luma = |p: &Rgb<u8>| 0.299 * f64::from(p.0[0]) + 0.587 * f64::from(p.0[1]) + 0.114 * f64::from(p.0[2]);
        let (near, far) = (img.get_pixel(TILE + 2, middle), img.get_pixel(2 * TILE - 3, middle));
        assert_eq!(near.0, depth_colour(0.0));
        assert_eq!(far.0, depth_colour(1.0));
        assert!(luma(near) > luma(far) + 100.0);
        // The confidence tile: the top row at 1 (inferno's black end), the bottom at the maximum.
        let (first, last) = (TILE / 2 - (TILE * 48 / 64) / 2 + 1, TILE / 2 + (TILE * 48 / 64) / 2 - 2);
        assert_eq!(img.get_pixel(2 * TILE + TILE / 2, top + first).0, confidence_colour(0.0));
        assert_eq!(img.get_pixel(2 * TILE + TILE / 2, top + last).0, confidence_colour(1.0));
        // The input tile shows the colours; outside the 64x48 grid's fitted rectangle, background.
        assert_eq!(img.get_pixel(TILE / 2, middle).0, [128, 128, 128]);
        assert_eq!(img.get_pixel(TILE / 2, top + 2).0, BACKGROUND);
        // The cloud was drawn (grey points) between the caption and the tiles.
        let grey = (0..WIDTH)
            .flat_map(|x| (CAPTION..top).map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0 == [128, 128, 128])
            .count();
        assert!(grey > 5_000, "{grey} cloud pixels");
    }
}
