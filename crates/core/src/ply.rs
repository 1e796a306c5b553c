//! Point clouds as PLY files, what MeshLab, CloudCompare and Open3D open: binary little endian,
//! one `vertex` element of float x, y, z, uchar red, green, blue and float confidence (the ply-rs
//! fork `ply-rs-bw` writes the format; the cloud's points are ours).

use std::io::Write;
use std::path::Path;

use ply_rs_bw::ply::{Addable, ElementDef, Encoding, Ply, PropertyAccess, PropertyDef, PropertyType, ScalarType};
use ply_rs_bw::writer::Writer;

use crate::dust3r::cloud::CloudPoint;

/// Why a PLY file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlyError {
    /// The file could not be created or written.
    #[error("writing {path}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// The vertex properties, in file order: (name, type).
const PROPERTIES: [(&str, ScalarType); 7] = [
    ("x", ScalarType::Float),
    ("y", ScalarType::Float),
    ("z", ScalarType::Float),
    ("red", ScalarType::UChar),
    ("green", ScalarType::UChar),
    ("blue", ScalarType::UChar),
    ("confidence", ScalarType::Float),
];

impl PropertyAccess for CloudPoint {
    fn new() -> Self {
        CloudPoint { xyz: [0.0; 3], rgb: [0; 3], confidence: 0.0 }
    }
    fn get_float(&self, name: &str) -> Option<f32> {
        match name {
            "x" => Some(self.xyz[0]),
            "y" => Some(self.xyz[1]),
            "z" => Some(self.xyz[2]),
            "confidence" => Some(self.confidence),
            _ => None,
        }
    }
    fn get_uchar(&self, name: &str) -> Option<u8> {
        match name {
            "red" => Some(self.rgb[0]),
            "green" => Some(self.rgb[1]),
            "blue" => Some(self.rgb[2]),
            _ => None,
        }
    }
}

/// Writes `points` as a binary little-endian PLY to `out`, each of `comments` as a header
/// comment line (what the cloud is: its frame, its source). Returns the bytes written.
pub fn write_ply(out: &mut impl Write, points: Vec<CloudPoint>, comments: &[String]) -> std::io::Result<usize> {
    let mut ply = Ply::<CloudPoint>::new();
    ply.header.encoding = Encoding::BinaryLittleEndian;
    // Header comments are one line each.
    ply.header.comments = comments.iter().map(|c| c.replace(['\n', '\r'], " ")).collect();
    let mut vertex = ElementDef::new("vertex".to_string());
    for (name, scalar) in PROPERTIES {
        vertex.properties.add(PropertyDef::new(name.to_string(), PropertyType::Scalar(scalar)));
    }
    ply.header.elements.add(vertex);
    ply.payload.insert("vertex".to_string(), points);
    Writer::new().write_ply(out, &mut ply)
}

/// [`write_ply`] to the file at `path` (created or replaced).
pub fn save_ply(path: &Path, points: Vec<CloudPoint>, comments: &[String]) -> Result<usize, PlyError> {
    let io = |source| PlyError::Io { path: path.display().to_string(), source };
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let written = write_ply(&mut file, points, comments).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(written)
}
