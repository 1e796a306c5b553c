//! Subcommand implementations (the binary's side: anyhow errors, printing, files).

use sp_dust3r_core::backend::build::BackendKind;

pub mod dust3r;
pub mod eval;
pub mod pose;
pub mod replay;
pub mod sample;
pub mod superpoint;

pub use sp_dust3r_core::quantile::median;

/// `--backend`'s parser: the names parameters use, listed in `--help`.
pub fn backend_kind() -> impl clap::builder::TypedValueParser<Value = BackendKind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(BackendKind::NAMES)
        .map(|name| BackendKind::from_name(&name).unwrap_or(BackendKind::Cpu))
}

/// Running a subcommand on a tt-model server instead of the CPU.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// Where the model runs: in process, or on a tt-model server (`tt-model serve ...`).
    #[arg(long, default_value = "cpu", value_parser = backend_kind())]
    pub backend: BackendKind,
    /// The server's base URL (default: http://127.0.0.1:20000 for SuperPoint, :20001 for DUSt3R).
    #[arg(long)]
    pub server_url: Option<String>,
    /// Seconds each request may take.
    #[arg(long, default_value_t = 30.0)]
    pub server_timeout: f64,
    /// Seconds to wait for the server to become ready (/health "ok").
    #[arg(long, default_value_t = 120.0)]
    pub wait: f64,
    /// JPEG quality for colour images (grey ones go as PNG); 0 sends colour as PNG.
    #[arg(long, default_value_t = 90)]
    pub jpeg_quality: u8,
}

impl ServerArgs {
    pub fn options(&self, url: &str) -> sp_dust3r_core::backend::tt_server::ServerOptions {
        sp_dust3r_core::backend::tt_server::ServerOptions {
            url: url.to_string(),
            timeout: std::time::Duration::from_secs_f64(self.server_timeout),
            jpeg_quality: self.jpeg_quality,
            cancel: sp_dust3r_core::cancel::Cancel::new(),
        }
    }
}

/// Median host-side timings of server requests: encode, request (which contains the server's
/// own total), parse, and what this side added on top of the server.
pub fn host_timing_json(t: &[sp_dust3r_core::backend::tt_server::HostTiming]) -> serde_json::Value {
    let m = |f: &dyn Fn(&sp_dust3r_core::backend::tt_server::HostTiming) -> Option<f64>| {
        let v: Vec<f64> = t.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| median(&v))
    };
    serde_json::json!({
        "encode": m(&|x| Some(x.encode_ms)),
        "request": m(&|x| Some(x.request_ms)),
        "parse": m(&|x| Some(x.parse_ms)),
        "server_total": m(&|x| x.server_total_ms),
        "host_overhead": m(&|x| x.overhead_ms()),
    })
}
