//! The node's own services: `~/reset` (a new keyframe chain, the map cleared) and `~/save_map`
//! (the map as PLY at `map_save_path`), both std_srvs/srv/Trigger as RTAB-Map's and
//! slam_toolbox's are called from a terminal (`ros2 service call /cam/sp_dust3r/reset
//! std_srvs/srv/Trigger`), in the framing of the parameter services.

use ros2_client::Node;
use serde::{Deserialize, Serialize};

use crate::param_services::{server, service_mapping, ParamServiceError};
use crate::replies::{DiscoveredReaders, Service};

/// std_srvs/srv/Trigger's request: empty, which ROS's IDL gives one placeholder byte.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TriggerRequest {
    structure_needs_at_least_one_member: u8,
}

impl ros2_client::Message for TriggerRequest {}

/// std_srvs/srv/Trigger's response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TriggerResponse {
    /// Whether it was done.
    pub success: bool,
    /// What was done, or why not.
    pub message: String,
}

impl ros2_client::Message for TriggerResponse {}

/// The reset and save_map servers.
pub struct NodeServices {
    reset: Service<TriggerRequest, TriggerResponse>,
    save_map: Service<TriggerRequest, TriggerResponse>,
}

/// What the services do: answered from the node's DDS loop.
pub trait ServiceHandler {
    /// `~/reset`.
    fn reset(&mut self) -> TriggerResponse;
    /// `~/save_map`.
    fn save_map(&mut self) -> TriggerResponse;
}

impl NodeServices {
    /// Creates the services under the node's name.
    pub fn new(node: &mut Node, node_fqn: &str) -> Result<Self, ParamServiceError> {
        let mapping = service_mapping();
        let trigger = ("std_srvs", "Trigger");
        Ok(Self {
            reset: server(node, mapping, node_fqn, "reset", trigger)?,
            save_map: server(node, mapping, node_fqn, "save_map", trigger)?,
        })
    }

    /// Answers every pending request with `handler` and writes the held replies that are due,
    /// their clients' readers looked up in `readers`; returns how many requests were answered. A
    /// request that cannot be read is logged and skipped.
    pub fn poll(&self, handler: &mut impl ServiceHandler, readers: &DiscoveredReaders<'_>) -> usize {
        let mut n = 0;
        for (server, name) in [(&self.reset, "reset"), (&self.save_map, "save_map")] {
            server.release(readers);
            loop {
                match server.take() {
                    Ok(Some((id, _))) => {
                        n += 1;
                        let answer = if name == "reset" { handler.reset() } else { handler.save_map() };
                        server.answer(id, answer, readers);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!("unreadable ~/{name} request: {e:?}");
                        break;
                    }
                }
            }
        }
        n
    }
}
