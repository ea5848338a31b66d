//! What every fleethub process has in common: its operational flags and its build-info metric.

use std::net::SocketAddr;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::logging::LogFormat;

/// Flags shared by every fleethub process (flatten into its clap arguments).
#[derive(clap::Args, Debug, Clone)]
pub struct ProcessArgs {
    /// Address of the /healthz, /readyz and /metrics server.
    #[arg(long, env = "FLEETHUB_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Log line format.
    #[arg(long, env = "FLEETHUB_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
}

/// Registers `build_info` (value 1) with the process version and `labels` in `registry`.
pub fn register_build_info(registry: &mut Registry, help: &str, labels: &[(&str, &str)]) {
    let build_info = Family::<Vec<(String, String)>, Gauge>::default();
    registry.register("build_info", help, build_info.clone());
    let mut all = vec![("version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
    all.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    build_info.get_or_create(&all).set(1);
}
