//! ROS 2 message types, generated at build time from .msg files (see build.rs): `msg/` for our
//! own (`sp_dust3r/msg/*`, module `node_msgs`), `src/msg/interfaces/` for the standard ones. The
//! ROS layer converts between these and the pipeline's domain types; nothing else sees them.

pub mod convert;
pub mod tf_static;

/// What every generated message knows about itself.
pub trait RosMessage {
    /// `pkg/msg/Name`, as `ros2 topic` and rosbag2 name it.
    const ROS_TYPE: &'static str;
    /// `pkg::msg::dds_::Name_`, the DDS type name.
    const DDS_TYPE: &'static str;
    /// The .msg text followed by every nested definition (ros2msg schema format).
    const DEFINITION: &'static str;
}

#[allow(clippy::all, non_snake_case)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/ros_messages.rs"));
}
pub use generated::*;

impl builtin_interfaces::Time {
    /// Seconds since the epoch of this clock (sim or wall), as f64.
    pub fn seconds(&self) -> f64 {
        self.sec as f64 + self.nanosec as f64 * 1e-9
    }
}

impl geometry_msgs::TransformStamped {
    /// A static transform as /tf_static carries it (no stamp): `child`'s pose in `parent`,
    /// translation `xyz` and rotation quaternion `[x, y, z, w]` (the message's order).
    pub fn fixed(parent: &str, child: &str, xyz: [f64; 3], q: [f64; 4]) -> Self {
        Self {
            header: std_msgs::Header { frame_id: parent.into(), ..Default::default() },
            child_frame_id: child.into(),
            transform: geometry_msgs::Transform {
                translation: geometry_msgs::Vector3 { x: xyz[0], y: xyz[1], z: xyz[2] },
                rotation: geometry_msgs::Quaternion { x: q[0], y: q[1], z: q[2], w: q[3] },
            },
        }
    }
}

/// Errors of the CDR (de)serialisation of a message.
#[derive(Debug, thiserror::Error)]
pub enum CdrError {
    /// The message could not be (de)serialised.
    #[error("CDR: {0}")]
    Encoding(String),
    /// The bytes lack a known CDR encapsulation header.
    #[error("CDR: missing or unsupported encapsulation header {0:02x?}")]
    Header(Vec<u8>),
}

/// CDR bytes of a message as DDS and rosbag2 carry them: encapsulation header `00 01 00 00`
/// (plain CDR, little endian), then the XCDR1 body.
pub fn to_cdr<T: serde::Serialize>(msg: &T) -> Result<Vec<u8>, CdrError> {
    let mut out = vec![0x00, 0x01, 0x00, 0x00];
    cdr_encoding::to_writer::<T, byteorder::LittleEndian, _>(&mut out, msg)
        .map_err(|e| CdrError::Encoding(e.to_string()))?;
    Ok(out)
}

/// A message from CDR bytes with their encapsulation header (little or big endian).
pub fn from_cdr<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CdrError> {
    match bytes.get(..4) {
        Some([0x00, 0x01, _, _]) => cdr_encoding::from_bytes::<T, byteorder::LittleEndian>(&bytes[4..]),
        Some([0x00, 0x00, _, _]) => cdr_encoding::from_bytes::<T, byteorder::BigEndian>(&bytes[4..]),
        _ => return Err(CdrError::Header(bytes.iter().take(4).copied().collect())),
    }
    .map(|(msg, _)| msg)
    .map_err(|e| CdrError::Encoding(e.to_string()))
}
