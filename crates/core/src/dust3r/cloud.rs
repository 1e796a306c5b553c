//! A pair's points as every output takes them (the PointCloud2, PLY files): each view's finite,
//! confident points with the colour of the pixel they were seen at.

use super::Pointmap;

/// The confidence (>= 1) a point must exceed to be shown by default, the value PairViewer masks
/// its points at (`min_conf_thr`): below it DUSt3R's points are mostly sky, edges and reflections.
pub const DEFAULT_MIN_CONFIDENCE: f64 = 3.0;

/// One view's points for a cloud: its pointmap and its colours (interleaved 8-bit RGB of the
/// same size, the network input).
pub struct ColouredPoints<'a> {
    /// The view's points and confidences.
    pub points: &'a Pointmap,
    /// Its colours, interleaved 8-bit RGB on the same grid.
    pub rgb: &'a [u8],
}

/// One point of a cloud.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CloudPoint {
    /// Position (the pair's camera 1 frame, or the map's).
    pub xyz: [f32; 3],
    /// Colour, 8-bit RGB.
    pub rgb: [u8; 3],
    /// DUSt3R's confidence (>= 1).
    pub confidence: f32,
}

/// The points of `views` whose coordinates are finite and whose confidence exceeds
/// `min_confidence`, taking every `stride`-th pixel along rows and columns (1: all); view by view,
/// each in row order. A pixel without a colour (a short `rgb`) is black.
pub fn cloud_points<'a>(
    views: &'a [ColouredPoints<'a>],
    min_confidence: f32,
    stride: usize,
) -> impl Iterator<Item = CloudPoint> + 'a {
    let stride = stride.max(1);
    views.iter().flat_map(move |view| {
        let p = view.points;
        let width = p.width.max(1);
        p.points.chunks_exact(3).zip(&p.confidence).enumerate().filter_map(move |(i, (xyz, &confidence))| {
            let (row, col) = (i / width, i % width);
            let keep = row % stride == 0
                && col % stride == 0
                && confidence > min_confidence
                && xyz.iter().all(|v| v.is_finite());
            let c = view.rgb.get(i * 3..i * 3 + 3).unwrap_or(&[0, 0, 0]);
            keep.then(|| CloudPoint { xyz: [xyz[0], xyz[1], xyz[2]], rgb: [c[0], c[1], c[2]], confidence })
        })
    })
}
