//! Outputs: the Prometheus exposition of a sample.

pub mod encoder;
mod metrics;
mod perf;
mod pressure;

pub use encoder::{Encoder, Format, Kind};
pub use metrics::{render, ExportInput, MetricsOptions, ProcessStats, RemediationExport};
