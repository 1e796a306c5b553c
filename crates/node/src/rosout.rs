//! The node's log records on `/rosout` (rcl_interfaces/Log), as `ros2 topic echo /rosout`,
//! rqt_console and rosbag2 expect from any ROS node.
//!
//! A `tracing` layer copies the records of this crate into a bounded queue; the node drains it
//! and publishes. The layer never blocks and never publishes itself, so logging from the DDS
//! stack cannot loop back into it, and a full queue drops records rather than stall a worker.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use sp_dust3r_core::msg::{builtin_interfaces, rcl_interfaces};

/// One record, before it has a node name and a stamp.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// rcl_interfaces/Log level (10 debug .. 50 fatal).
    pub level: u8,
    /// The message.
    pub message: String,
    /// Source file.
    pub file: String,
    /// Module path.
    pub function: String,
    /// Source line.
    pub line: u32,
}

impl Record {
    /// The `/rosout` message under logger `name` (rcl style: `ns.node`), stamped `stamp`.
    pub fn to_log(&self, name: &str, stamp: builtin_interfaces::Time) -> rcl_interfaces::Log {
        rcl_interfaces::Log {
            stamp,
            level: self.level,
            name: name.to_string(),
            msg: self.message.clone(),
            file: self.file.clone(),
            function: self.function.clone(),
            line: self.line,
        }
    }
}

static SINK: OnceLock<SyncSender<Record>> = OnceLock::new();

/// Starts collecting records; the first caller gets the receiver, later callers `None`.
pub fn collect(capacity: usize) -> Option<Receiver<Record>> {
    let (tx, rx) = sync_channel(capacity);
    SINK.set(tx).ok().map(|_| rx)
}

/// rcl's logger name for a node: the namespace and name joined by dots, no leading slash.
pub fn logger_name(node_fqn: &str) -> String {
    node_fqn.trim_start_matches('/').replace('/', ".")
}

fn level_of(level: &Level) -> u8 {
    match *level {
        Level::ERROR => rcl_interfaces::Log::ERROR,
        Level::WARN => rcl_interfaces::Log::WARN,
        Level::INFO => rcl_interfaces::Log::INFO,
        _ => rcl_interfaces::Log::DEBUG,
    }
}

/// The layer `main` installs: records of this crate (target `sp_dust3r…`) that pass the global
/// filter go to the queue once the node has called [`collect`].
pub struct RosoutLayer;

struct MessageVisitor(String);

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            self.0.push_str(&format!(" {}={value}", field.name()));
        }
    }
}

impl<S: Subscriber> Layer<S> for RosoutLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let Some(sink) = SINK.get() else { return };
        let meta = event.metadata();
        if !meta.target().starts_with("sp_dust3r") {
            return;
        }
        let mut visitor = MessageVisitor(String::new());
        event.record(&mut visitor);
        let record = Record {
            level: level_of(meta.level()),
            message: visitor.0,
            file: meta.file().unwrap_or_default().to_string(),
            function: meta.module_path().unwrap_or_default().to_string(),
            line: meta.line().unwrap_or(0),
        };
        match sink.try_send(record) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logger_names_follow_rcl() {
        assert_eq!(logger_name("/sp_dust3r"), "sp_dust3r");
        assert_eq!(logger_name("/camera/front/sp_dust3r"), "camera.front.sp_dust3r");
    }
}
