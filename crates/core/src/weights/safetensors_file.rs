use std::borrow::Cow;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata};
use safetensors::SafeTensors;

use super::WeightsError;

/// A safetensors file, memory-mapped: tensors are read in place (a 2 GB checkpoint costs page
/// cache, not heap) and only the header is parsed up front, which also validates that every
/// tensor lies inside the file, so a truncated download is caught here.
pub struct WeightFile {
    path: PathBuf,
    mmap: Mmap,
    data_start: usize,
    metadata: Metadata,
}

impl WeightFile {
    /// Memory-maps a safetensors file and reads its header.
    pub fn open(path: &Path) -> Result<Self, WeightsError> {
        let io = |source| WeightsError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; a file truncated underneath us by another process is the
        // one hazard, the same one every mmap-based loader (PyTorch, safetensors) accepts.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (header_len, metadata) = SafeTensors::read_metadata(&mmap).map_err(|e| WeightsError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("{e}; the file has {} bytes", mmap.len()),
        })?;
        Ok(Self { path: path.to_path_buf(), mmap, data_start: 8 + header_len, metadata })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The first of `names` that the file holds (checkpoints spell some keys in two ways).
    pub fn find_name<'n>(&self, names: &[&'n str]) -> Option<&'n str> {
        names.iter().copied().find(|n| self.metadata.info(n).is_some())
    }

    /// A float32 tensor by name (or the first present alternative), checked against `shape`.
    /// Borrowed from the map when aligned, copied otherwise.
    pub fn f32_tensor(&self, names: &[&str], shape: &[usize]) -> Result<Cow<'_, [f32]>, WeightsError> {
        let range = self.f32_range(names, shape)?;
        let bytes = &self.mmap[range];
        Ok(match bytemuck::try_cast_slice::<u8, f32>(bytes) {
            Ok(values) if cfg!(target_endian = "little") => Cow::Borrowed(values),
            _ => Cow::Owned(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()),
        })
    }

    /// Shape of a tensor, if present under any of `names`.
    pub fn shape(&self, names: &[&str]) -> Option<Vec<usize>> {
        self.find_name(names).and_then(|n| self.metadata.info(n)).map(|i| i.shape.clone())
    }

    /// A float32 tensor that stays in the map (zero-copy) when aligned: for weights used as they
    /// are stored, such as the transformer's linear layers.
    pub fn f32_param(self: &Arc<Self>, names: &[&str], shape: &[usize]) -> Result<Param, WeightsError> {
        let range = self.f32_range(names, shape)?;
        if bytemuck::try_cast_slice::<u8, f32>(&self.mmap[range.clone()]).is_ok() && cfg!(target_endian = "little") {
            Ok(Param::Mapped { file: Arc::clone(self), range })
        } else {
            Ok(Param::Owned(self.f32_tensor(names, shape)?.into_owned()))
        }
    }

    /// Byte range of a validated float32 tensor in the map.
    fn f32_range(&self, names: &[&str], shape: &[usize]) -> Result<Range<usize>, WeightsError> {
        let Some(name) = self.find_name(names) else {
            let alternatives =
                if names.len() > 1 { format!(" (also looked for {})", names[1..].join(", ")) } else { String::new() };
            return Err(WeightsError::MissingTensor {
                path: self.path.clone(),
                name: names.first().copied().unwrap_or_default().to_string(),
                alternatives,
            });
        };
        let info = self.metadata.info(name).ok_or_else(|| WeightsError::MissingTensor {
            path: self.path.clone(),
            name: name.to_string(),
            alternatives: String::new(),
        })?;
        if info.shape != shape {
            return Err(WeightsError::WrongShape {
                path: self.path.clone(),
                name: name.to_string(),
                got: info.shape.clone(),
                expected: shape.to_vec(),
            });
        }
        if info.dtype != Dtype::F32 {
            return Err(WeightsError::WrongDtype {
                path: self.path.clone(),
                name: name.to_string(),
                got: format!("{:?}", info.dtype),
            });
        }
        let (begin, end) = info.data_offsets;
        // read_metadata validated the offsets against the file length.
        Ok(self.data_start + begin..self.data_start + end)
    }
}

/// A weight tensor: a view into the memory-mapped file, or an owned copy where the file's layout
/// did not allow a view (misaligned data).
#[derive(Clone)]
pub enum Param {
    /// A view into the mapped file.
    Mapped {
        /// The file.
        file: Arc<WeightFile>,
        /// Byte range of the values.
        range: Range<usize>,
    },
    /// A copy.
    Owned(Vec<f32>),
}

impl Param {
    /// Done with these values (a copy of them was made): a view into the map tells the kernel
    /// its pages may go, so that they leave the resident set (they are read from the file again
    /// if anything touches them).
    pub fn release(self) {
        if let Param::Mapped { file, range } = self {
            // SAFETY: the map is read-only and backed by the file, so dropping its pages loses
            // nothing: a later access reads the same bytes back from the file.
            let _ = unsafe {
                file.mmap.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len())
            };
        }
    }

    /// The values.
    pub fn as_slice(&self) -> &[f32] {
        match self {
            // Alignment and length were checked when the view was made, and the map is immutable.
            Param::Mapped { file, range } => bytemuck::cast_slice(&file.mmap[range.clone()]),
            Param::Owned(v) => v,
        }
    }
}
