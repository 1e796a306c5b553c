//! The `sp_dust3r` command line: one binary, one subcommand per job.
//!
//! ```sh
//! sp_dust3r superpoint --weights DIR --image FILE --out OUT.npz
//! sp_dust3r dust3r --weights DIR --image1 A --image2 B [--pose] --out OUT.npz
//! sp_dust3r pose --pointmaps IN.npz --out OUT.json
//! sp_dust3r replay --bag IN.mcap --out OUT.mcap --params-file config/params.yaml
//! sp_dust3r node --ros-args -r __ns:=/camera -p superpoint_weights:=DIR
//! sp_dust3r --ros-args -r __ns:=/camera    # the same: as `ros2 run` and the launch files start it
//! ```
//!
//! The node is the `node` feature (DDS: Cyclone DDS needs cmake and libclang to build); without
//! it every offline job still works.
//!
//! ```sh
//! cargo run --release -- replay --bag IN.mcap --out OUT.mcap
//! ```

mod commands;

use clap::{Parser, Subcommand};
use sp_dust3r_core::params::args::RosArgs;

#[derive(Parser)]
#[command(name = "sp_dust3r", version, about = "SuperPoint + DUSt3R perception for ROS 2 camera streams")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Detect SuperPoint keypoints and descriptors in one image (PNG/JPEG) and write them as NPZ.
    Superpoint(commands::superpoint::Args),
    /// DUSt3R pointmaps of an image pair (both in camera 1's frame), written as NPZ.
    Dust3r(commands::dust3r::Args),
    /// Relative pose of a pair from DUSt3R pointmaps (PairViewer or the tt-model server's recipe).
    Pose(commands::pose::Args),
    /// A recorded rosbag2 (MCAP) through the pipeline, every frame in order, into an output bag.
    Replay(commands::replay::Args),
    /// Pair poses of a replay's output bag against ground truth: errors per pair, AUC@5/10/30.
    Eval(commands::eval::Args),
    /// Render the sample sequence (a textured room, known camera path) into a bag.
    Sample(commands::sample::Args),
    /// The ROS 2 node: `sp_dust3r node --ros-args ...`, or `sp_dust3r --ros-args ...` (`ros2 run`,
    /// the launch files).
    Node {
        /// `--ros-args` and what follows, as ros2 launch passes them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn run_node(args: Vec<String>) -> anyhow::Result<()> {
    let (own, ros) = sp_dust3r_core::params::args::split_ros_args(args)?;
    if let Some(bad) = ros.bad_log_level() {
        anyhow::bail!("--log-level {bad}: expected debug, info, warn, error or fatal");
    }
    if !own.is_empty() {
        anyhow::bail!("unexpected arguments before --ros-args: {own:?}");
    }
    start_node(&ros)
}

#[cfg(feature = "node")]
fn start_node(ros: &RosArgs) -> anyhow::Result<()> {
    let stop = sp_dust3r_core::cancel::Cancel::new();
    stop.set_on_termination_signals()?;
    sp_dust3r_node::node::run(ros, stop)?;
    Ok(())
}

#[cfg(not(feature = "node"))]
fn start_node(_: &RosArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "this sp_dust3r was built without the ROS 2 node: build it with `cargo build --release --features node` \
         (needs cmake and libclang for Cyclone DDS), or with colcon, which turns the feature on"
    )
}

/// Logs to stderr at `RUST_LOG`, else as `--log-level` asks ([`RosArgs::log_filter`]: our
/// records at info, other crates' at error). The node's records also go to /rosout unless
/// `--disable-rosout-logs`.
fn init_logging(cli: &Cli) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let ros = match &cli.command {
        Command::Node { args } => sp_dust3r_core::params::args::split_ros_args(args.clone()).ok().map(|(_, r)| r),
        _ => None,
    };
    let wanted = ros.as_ref().map_or_else(|| RosArgs::default().log_filter(), RosArgs::log_filter);
    #[cfg(feature = "node")]
    let wanted = match &ros {
        Some(r) => sp_dust3r_node::transport::QUIET_LOG_TARGETS
            .iter()
            .filter(|t| !r.logger_levels.iter().any(|(name, _)| name == *t))
            .fold(wanted, |f, t| format!("{f},{t}=off")),
        None => wanted,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(wanted));
    #[cfg(feature = "node")]
    let rosout = ros.is_some_and(|r| !r.disable_rosout).then_some(sp_dust3r_node::rosout::RosoutLayer);
    #[cfg(not(feature = "node"))]
    let rosout: Option<tracing_subscriber::layer::Identity> = None;
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(rosout)
        .init();
}

/// The command line, where a leading `--ros-args` means `node`: that is how `ros2 run sp_dust3r
/// sp_dust3r --ros-args ...` and the launch files start it.
fn command_line() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "--ros-args") {
        args.insert(1, "node".into());
    }
    args
}

fn main() -> std::process::ExitCode {
    sp_dust3r_core::keep_freed_memory();
    let cli = Cli::parse_from(command_line());
    init_logging(&cli);
    let result = match cli.command {
        Command::Superpoint(args) => commands::superpoint::run(args),
        Command::Dust3r(args) => commands::dust3r::run(args),
        Command::Pose(args) => commands::pose::run(args),
        Command::Replay(args) => commands::replay::run(args),
        Command::Eval(args) => commands::eval::run(args),
        Command::Sample(args) => commands::sample::run(args),
        Command::Node { args } => run_node(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
