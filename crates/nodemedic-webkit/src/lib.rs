//! The HTTP toolkit under nodemedic's endpoint, apart from every nodemedic crate as the
//! Prometheus exporter-toolkit is apart from node_exporter's collectors:
//!
//! - [`listen`]: where it listens (`host:port`, `unix:/path`);
//! - [`server`]: the hardened server (header and request timeouts, connection and request
//!   caps, eviction of idle connections, TLS handshakes);
//! - [`security`]: the exporter-toolkit web configuration file (TLS, client certificates,
//!   bcrypt basic auth, headers), reloaded when it changes.

pub mod listen;
pub mod security;
pub mod server;

pub use listen::{ListenAddr, ListenAddrError, ListenAddrs};
pub use security::{WebConfigError, WebConfigStatus, WebConfigWatch};
pub use server::{
    connection_cap, harden, raise_nofile, secured, serve, Limits, Listener, SharedWebStats,
    WebStats,
};
