//! The web toolkit nodemedic's endpoint is served with, apart from what it serves, as the
//! Prometheus exporter-toolkit is apart from every exporter. It needs no nodemedic crate:
//!
//! - [`listen`]: where it listens (`host:port`, `unix:/path`);
//! - [`server`]: the hardened server (header and request timeouts, connection and request
//!   caps, eviction of idle connections, TLS handshakes);
//! - [`security`]: the exporter-toolkit web configuration file (TLS, client certificates,
//!   bcrypt basic auth, headers), reloaded when it changes;
//!
//! nodemedic's routes (`/metrics`, `/status`, `/healthz`, `/readyz`) are in
//! `nodemedic-export`'s `endpoint`.

pub mod listen;
pub mod security;
pub mod server;

pub use listen::{ListenAddr, ListenAddrError, ListenAddrs};
pub use security::{WebConfigError, WebConfigStatus, WebConfigWatch};
pub use server::{
    connection_cap, harden, raise_nofile, secured, serve, web_stats, Limits, Listener,
    SharedWebStats, WebStats,
};
