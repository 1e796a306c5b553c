//! Arrays out of the servers' base64 NPZ payloads. ndarray-npy reads NPZ but has no float16,
//! and the servers send descriptors and confidences as float16; this reads .npy entries of
//! little-endian float16/float32/float64 from the zip container into f32.

use std::io::Read;

/// One array: its shape and values (row-major, as f32).
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub data: Vec<f32>,
}

/// Why an array could not be read from a server's NPZ payload.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NpzError {
    /// The payload is not base64.
    #[error("not valid base64: {0}")]
    Base64(String),
    /// The payload is not a zip archive.
    #[error("not a zip (NPZ) archive: {0}")]
    Zip(String),
    /// The archive lacks the array.
    #[error("NPZ has no array `{0}`")]
    Missing(String),
    /// An entry inflates past [`MAX_ENTRY_BYTES`] (a corrupt size or a decompression bomb).
    #[error("NPZ entry `{0}` is larger than {MAX_ENTRY_BYTES} bytes")]
    TooLarge(String),
    /// An array's .npy bytes are not usable.
    #[error("array `{name}`: {source}")]
    Npy {
        /// The array.
        name: String,
        /// What is wrong with it.
        source: NpyError,
    },
}

/// Why bytes are not a .npy array this reader takes.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NpyError {
    /// No .npy magic.
    #[error("not a .npy array")]
    NotNpy,
    /// A format version other than 1, 2 or 3.
    #[error("unsupported .npy version {0}")]
    Version(u8),
    /// The header dictionary is cut short or lacks a key.
    #[error("{0}")]
    Header(&'static str),
    /// Column-major data.
    #[error("Fortran-ordered arrays are not supported")]
    FortranOrder,
    /// The shape tuple does not parse.
    #[error("bad shape ({0})")]
    Shape(String),
    /// Not little-endian float16/32/64.
    #[error("dtype {0} (float16/32/64 little endian expected)")]
    Dtype(String),
    /// The data is not as long as the shape and dtype say.
    #[error("{got} data bytes for shape {shape:?} of {descr}, {expected} expected")]
    Length {
        /// Data bytes present.
        got: usize,
        /// The declared shape.
        shape: Vec<usize>,
        /// The declared dtype.
        descr: String,
        /// Data bytes the shape and dtype need.
        expected: usize,
    },
}

/// The archive behind a base64 string, for [`read_array`].
pub fn decode_base64(text: &str) -> Result<Vec<u8>, NpzError> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text.trim()).map_err(|e| NpzError::Base64(e.to_string()))
}

/// The most one array entry may inflate to: 16x DUSt3R's largest answer (a 512x512x3 float64
/// pointmap is 6 MiB). The zip's declared sizes are the sender's word, so neither they nor the
/// inflated stream may decide how much the node allocates.
pub const MAX_ENTRY_BYTES: u64 = 96 << 20;

/// Array `name` (with or without `.npy`) from NPZ bytes.
pub fn read_array(npz: &[u8], name: &str) -> Result<Array, NpzError> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(npz)).map_err(|e| NpzError::Zip(e.to_string()))?;
    let entry = if name.ends_with(".npy") { name.to_string() } else { format!("{name}.npy") };
    let file = zip.by_name(&entry).map_err(|_| NpzError::Missing(name.to_string()))?;
    if file.size() > MAX_ENTRY_BYTES {
        return Err(NpzError::TooLarge(entry));
    }
    let mut bytes = Vec::with_capacity(file.size() as usize);
    file.take(MAX_ENTRY_BYTES + 1).read_to_end(&mut bytes).map_err(|e| NpzError::Zip(e.to_string()))?;
    if bytes.len() as u64 > MAX_ENTRY_BYTES {
        return Err(NpzError::TooLarge(entry));
    }
    parse_npy(&bytes).map_err(|source| NpzError::Npy { name: name.to_string(), source })
}

/// A .npy file: magic, version, header dict (`descr`, `fortran_order`, `shape`), data.
pub fn parse_npy(bytes: &[u8]) -> Result<Array, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(NpyError::NotNpy);
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(NpyError::Version(v)),
    };
    let header = bytes.get(start..start + header_len).ok_or(NpyError::Header("truncated .npy header"))?;
    let header = std::str::from_utf8(header).map_err(|_| NpyError::Header("header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        Some(header[at..].trim_start().strip_prefix(':')?.trim_start())
    };
    let descr = field("descr")
        .and_then(|v| v.strip_prefix('\''))
        .and_then(|v| v.split('\'').next())
        .ok_or(NpyError::Header("no descr"))?;
    if field("fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(NpyError::FortranOrder);
    }
    let shape_text = field("shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or(NpyError::Header("no shape"))?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| NpyError::Shape(shape_text.to_string())))
        .collect::<Result<_, _>>()?;
    let count =
        shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or(NpyError::Shape(shape_text.to_string()))?;
    let body = &bytes[start + header_len..];
    let width = match descr {
        "<f2" => 2,
        "<f4" => 4,
        "<f8" => 8,
        other => return Err(NpyError::Dtype(other.to_string())),
    };
    let expected = count.checked_mul(width).ok_or(NpyError::Shape(shape_text.to_string()))?;
    if body.len() != expected {
        return Err(NpyError::Length { got: body.len(), shape, descr: descr.to_string(), expected });
    }
    let data = match width {
        2 => body.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        4 => body.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        _ => body
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32)
            .collect(),
    };
    Ok(Array { shape, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, body: &[u8]) -> Vec<u8> {
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn float16_and_float32_arrays_parse_and_bad_ones_say_why() {
        let h: Vec<u8> =
            [1.0f32, -2.5, 0.099975586].iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        let a = parse_npy(&npy("<f2", "(3,)", &h)).unwrap();
        assert_eq!((a.shape, a.data), (vec![3], vec![1.0, -2.5, 0.099975586]));
        let f: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        assert_eq!(parse_npy(&npy("<f4", "(2, 3)", &f)).unwrap().shape, vec![2, 3]);
        assert!(parse_npy(&npy("<f4", "(2, 4)", &f)).unwrap_err().to_string().contains("24 data bytes"));
        assert!(parse_npy(&npy("<i8", "(3,)", &f[..24])).unwrap_err().to_string().contains("dtype <i8"));
        assert!(parse_npy(b"garbage").is_err());
        assert!(matches!(decode_base64("@@@"), Err(NpzError::Base64(_))));
        assert!(matches!(read_array(b"PK not really", "x"), Err(NpzError::Zip(_))));
    }

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        use std::io::Write;
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        for (name, bytes) in entries {
            zip.start_file(*name, options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    /// Found by the fuzzer (tools/fuzz.sh, target npz): a few hundred bytes made the reader
    /// allocate what the entry's declared size said, up to 4 GB; a deflated run of zeros (a
    /// decompression bomb) inflates without bound. Both are refused now, before allocating.
    #[test]
    fn sizes_the_sender_declares_or_inflates_to_do_not_decide_allocation() {
        let h: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        let good = zip_of(&[("a.npy", &npy("<f2", "(2,)", &h))]);
        assert_eq!(read_array(&good, "a").unwrap().data, vec![1.0, 2.0]);
        // The central directory's uncompressed size (offset 24 of its header) says 3 GB.
        let mut lying = good.clone();
        let cd = lying.windows(4).rposition(|w| w == [0x50, 0x4b, 0x01, 0x02]).unwrap();
        lying[cd + 24..cd + 28].copy_from_slice(&3_000_000_000u32.to_le_bytes());
        assert_eq!(read_array(&lying, "a"), Err(NpzError::TooLarge("a.npy".into())));
        let zeros = vec![0u8; MAX_ENTRY_BYTES as usize + 1];
        let bomb = zip_of(&[("a.npy", &zeros)]);
        assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
        assert_eq!(read_array(&bomb, "a"), Err(NpzError::TooLarge("a.npy".into())));
        // A shape whose byte count overflows is a bad shape, not a wrapped length.
        let e = parse_npy(&npy("<f8", "(2305843009213693952,)", &[])).unwrap_err();
        assert_eq!(e, NpyError::Shape("2305843009213693952,".into()));
    }
}
