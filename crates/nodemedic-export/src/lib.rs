//! The HTTP output: nodemedic's endpoint (`/metrics`, `/status`, `/healthz`, `/readyz`) over
//! the latest sample and what the remediator and the Kubernetes reporter publish, and the
//! renderings it and `nodemedic check` share:
//!
//! - the `metrics` modules: the Prometheus exposition of a sample, written with
//!   [`encoder`] (`nodemedic-exposition`, a toolkit below every nodemedic crate);
//! - [`report`]: the report shapes of `/status` and `check --format json`;
//! - [`text`]: `check`'s text report;
//! - [`endpoint`]: the routes, served by the toolkit in `nodemedic-webkit`;
//! - [`build_info`]: what this binary is (version, revision, compiler, target).

pub mod build_info;
/// The Prometheus text and OpenMetrics writer, a toolkit crate of its own.
pub use nodemedic_exposition as encoder;
pub mod endpoint;
mod metrics;
pub mod report;
pub mod text;
mod tuning;

pub use build_info::{BuildInfo, BUILD_INFO};
pub use encoder::{Encoder, Format, Kind};
pub use endpoint::{Endpoint, EndpointConfig};
pub use metrics::{
    render, render_with_tuning, ExportInput, MetricsOptions, ProcessStats, RenderScratch,
};
