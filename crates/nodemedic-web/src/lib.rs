//! nodemedic's HTTP endpoint: the routes (`/metrics`, `/status`, `/healthz`, `/readyz`)
//! over the latest sample, served with `nodemedic-webkit` (listen addresses, the hardened
//! server, the web configuration file). `/metrics` is gzip-compressed when the client asks
//! for it (Prometheus does), once per sample like its rendering.

pub mod endpoint;

pub use endpoint::{Endpoint, EndpointConfig};
