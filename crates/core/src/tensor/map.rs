use super::TensorError;

/// An NHWC activation (`height x width x channels`) stored with a one-pixel zero border.
///
/// The border is what lets [`super::Conv3x3`] read its taps as shifted, overlapping rows of one
/// matrix; every kernel that writes a map keeps the border at zero.
#[derive(Clone, Debug)]
pub struct FeatureMap {
    height: usize,
    width: usize,
    channels: usize,
    data: Vec<f32>,
}

impl FeatureMap {
    /// A map of zeros.
    pub fn zeros(height: usize, width: usize, channels: usize) -> Self {
        Self { height, width, channels, data: vec![0.0; (height + 2) * (width + 2) * channels] }
    }

    /// A one-channel map from a row-major `height x width` plane.
    pub fn from_plane(height: usize, width: usize, plane: &[f32]) -> Result<Self, TensorError> {
        Self::from_dense(height, width, 1, plane)
    }

    /// A map from dense row-major HWC data.
    pub fn from_dense(height: usize, width: usize, channels: usize, dense: &[f32]) -> Result<Self, TensorError> {
        if dense.len() != height * width * channels {
            return Err(TensorError::Shape {
                op: "FeatureMap::from_dense",
                what: format!("{} values for {height}x{width}x{channels}", dense.len()),
            });
        }
        let mut map = Self::zeros(height, width, channels);
        let row = width * channels;
        for y in 0..height {
            let start = map.index(y, 0);
            map.data[start..start + row].copy_from_slice(&dense[y * row..(y + 1) * row]);
        }
        Ok(map)
    }

    /// Rows.
    pub fn height(&self) -> usize {
        self.height
    }
    /// Columns.
    pub fn width(&self) -> usize {
        self.width
    }
    /// Channels.
    pub fn channels(&self) -> usize {
        self.channels
    }
    /// Width of the stored grid, border included.
    pub(crate) fn padded_width(&self) -> usize {
        self.width + 2
    }
    /// The stored values, border included (`(height+2) x (width+2) x channels`).
    pub(crate) fn raw(&self) -> &[f32] {
        &self.data
    }
    pub(crate) fn raw_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// Offset of pixel (y, x) of the interior in the stored data.
    fn index(&self, y: usize, x: usize) -> usize {
        ((y + 1) * self.padded_width() + x + 1) * self.channels
    }

    /// The channel vector of interior pixel (y, x).
    pub fn pixel(&self, y: usize, x: usize) -> &[f32] {
        let i = self.index(y, x);
        &self.data[i..i + self.channels]
    }

    /// Channels of pixel (y, x), writable.
    pub fn pixel_mut(&mut self, y: usize, x: usize) -> &mut [f32] {
        let i = self.index(y, x);
        let c = self.channels;
        &mut self.data[i..i + c]
    }

    /// The interior pixels of row `y`, `width x channels` values.
    pub fn row_mut(&mut self, y: usize) -> &mut [f32] {
        let i = self.index(y, 0);
        let n = self.width * self.channels;
        &mut self.data[i..i + n]
    }

    /// The interior as dense row-major HWC data.
    pub fn to_dense(&self) -> Vec<f32> {
        let row = self.width * self.channels;
        let mut out = Vec::with_capacity(self.height * row);
        for y in 0..self.height {
            let start = self.index(y, 0);
            out.extend_from_slice(&self.data[start..start + row]);
        }
        out
    }

    /// Zeroes the left and right border columns of every interior row: the shifted-GEMM kernels
    /// compute junk there (the wrapped-around neighbours of the row ends).
    pub(crate) fn clear_side_borders(&mut self) {
        let c = self.channels;
        let pw = self.padded_width();
        for y in 1..=self.height {
            let left = y * pw * c;
            self.data[left..left + c].fill(0.0);
            let right = (y * pw + pw - 1) * c;
            self.data[right..right + c].fill(0.0);
        }
    }
}
