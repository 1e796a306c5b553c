//! The `sp_dust3r` command line: one binary, one subcommand per job.
//!
//!     sp_dust3r superpoint --weights DIR --image FILE --out OUT.npz
//!     sp_dust3r bench superpoint --weights DIR

mod commands;

use clap::{Parser, Subcommand};

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
    /// Benchmarks: our implementation and a peer on the same input, in the same run.
    #[command(subcommand)]
    Bench(commands::bench::Bench),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Superpoint(args) => commands::superpoint::run(args),
        Command::Bench(bench) => commands::bench::run(bench),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
