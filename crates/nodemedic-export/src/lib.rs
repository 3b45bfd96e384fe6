//! Outputs: the Prometheus exposition of a sample.

pub mod encoder;
mod metrics;
mod perf;
mod pressure;
mod tuning;

pub use encoder::{Encoder, Format, Kind};
pub use metrics::{
    render, render_with_tuning, ExportInput, MetricsOptions, ProcessStats, RemediationExport,
};
