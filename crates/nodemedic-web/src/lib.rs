//! nodemedic's HTTP endpoint, in the way the Prometheus exporter-toolkit is its own module:
//!
//! - [`listen`]: where it listens (`host:port`, `unix:/path`);
//! - [`server`]: the hardened server (header and request timeouts, connection and request
//!   caps, eviction of idle connections, TLS handshakes);
//! - [`security`]: the exporter-toolkit web configuration file (TLS, client certificates,
//!   bcrypt basic auth, headers), reloaded when it changes;
//! - [`endpoint`]: nodemedic's routes (`/metrics`, `/status`, `/healthz`, `/readyz`) over the
//!   latest sample.

pub mod endpoint;
pub mod listen;
pub mod security;
pub mod server;

pub use endpoint::{Endpoint, EndpointConfig};
pub use listen::{ListenAddr, ListenAddrError, ListenAddrs};
pub use security::{WebConfigError, WebConfigStatus, WebConfigWatch};
pub use server::{
    connection_cap, harden, raise_nofile, secured, serve, Limits, Listener, SharedWebStats,
    WebStats,
};
