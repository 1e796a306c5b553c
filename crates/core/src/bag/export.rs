//! A replay's clouds as PLY files: every pair's cloud (`pair_<sec>.<nanosec>.ply`, view 1's
//! stamp) and the last map (`map.ply`), read back from the output bag, so that what a viewer
//! opens is exactly what the bag holds.

use std::path::{Path, PathBuf};

use super::{BagError, McapFile};
use crate::msg::convert::{cloud_points_of, CloudLayoutError};
use crate::msg::{from_cdr, sensor_msgs, CdrError, RosMessage};
use crate::ply::{save_ply, PlyError};

/// Why the clouds could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The bag could not be read.
    #[error(transparent)]
    Bag(#[from] BagError),
    /// The folder could not be made.
    #[error("creating {path}")]
    Folder {
        /// The folder.
        path: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A cloud message does not decode.
    #[error("a cloud on {topic}")]
    Cdr {
        /// Its topic.
        topic: String,
        /// Why.
        #[source]
        source: CdrError,
    },
    /// A cloud's layout cannot be read as points.
    #[error("a cloud on {topic}")]
    Layout {
        /// Its topic.
        topic: String,
        /// Why.
        #[source]
        source: CloudLayoutError,
    },
    /// A PLY file could not be written.
    #[error(transparent)]
    Ply(#[from] PlyError),
}

/// What was exported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exported {
    /// The pairs' files, in the bag's order.
    pub pairs: Vec<PathBuf>,
    /// The map's file, when the bag has a map.
    pub map: Option<PathBuf>,
}

/// Writes every `sensor_msgs/PointCloud2` of `cloud_topic` in `files` as its own PLY file in
/// `dir`, and the last one of `map_topic` as `map.ply`; `source` names the run in the files'
/// comments.
pub fn export_ply(
    files: &[McapFile],
    cloud_topic: &str,
    map_topic: &str,
    dir: &Path,
    source: &str,
) -> Result<Exported, ExportError> {
    std::fs::create_dir_all(dir).map_err(|source| ExportError::Folder { path: dir.display().to_string(), source })?;
    let mut exported = Exported::default();
    let mut last_map = None;
    for file in files {
        for m in file.messages() {
            let m = m?;
            let is_cloud = m.ros_type == sensor_msgs::PointCloud2::ROS_TYPE;
            if !is_cloud || (m.topic != cloud_topic && m.topic != map_topic) {
                continue;
            }
            let msg: sensor_msgs::PointCloud2 =
                from_cdr(&m.data).map_err(|source| ExportError::Cdr { topic: m.topic.clone(), source })?;
            if m.topic == map_topic {
                last_map = Some(msg);
                continue;
            }
            let stamp = &msg.header.stamp;
            let path = dir.join(format!("pair_{}.{:09}.ply", stamp.sec, stamp.nanosec));
            let what = format!(
                "the pair cloud of view 1 stamped {}.{:09}: both views in frame {} (view 1's camera)",
                stamp.sec, stamp.nanosec, msg.header.frame_id
            );
            write(&path, &msg, &m.topic, source, &what)?;
            exported.pairs.push(path);
        }
    }
    if let Some(msg) = last_map {
        let path = dir.join("map.ply");
        let stamp = &msg.header.stamp;
        let what = format!(
            "the map in frame {} as of the keyframe stamped {}.{:09}",
            msg.header.frame_id, stamp.sec, stamp.nanosec
        );
        write(&path, &msg, map_topic, source, &what)?;
        exported.map = Some(path);
    }
    Ok(exported)
}

fn write(
    path: &Path,
    msg: &sensor_msgs::PointCloud2,
    topic: &str,
    source: &str,
    what: &str,
) -> Result<(), ExportError> {
    let points = cloud_points_of(msg).map_err(|source| ExportError::Layout { topic: topic.to_string(), source })?;
    let comments = [source.to_string(), format!("{topic}: {what}"), "DUSt3R's scale (not metres)".to_string()];
    save_ply(path, points, &comments)?;
    Ok(())
}
