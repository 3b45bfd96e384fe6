//! The HTTP toolkit under nodemedic's endpoint, apart from every nodemedic crate as the
//! Prometheus exporter-toolkit is apart from node_exporter's collectors:
//!
//! - [`file_limit`]: the process's open-file limit, raised once and shared out;
//! - [`listen`]: where it listens (`host:port`, `unix:/path`);
//! - [`server`]: the hardened server (header and request timeouts, connection and request
//!   caps, eviction of idle connections, TLS handshakes, basic auth and response headers);
//! - [`security`]: the exporter-toolkit web configuration file (TLS, client certificates,
//!   bcrypt basic auth, headers), reloaded when it changes.

pub mod file_limit;
pub mod listen;
pub mod security;
pub mod server;

pub use file_limit::FileLimit;
pub use listen::{ListenAddr, ListenAddrError, ListenAddrs};
pub use security::{WebConfigError, WebConfigStatus, WebConfigWatch};
pub use server::{connection_cap, serve, Limits, Listener, SharedWebStats, WebStats};
