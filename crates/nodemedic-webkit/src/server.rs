//! The HTTP endpoint, hardened against clients that misbehave. nodemedic runs as root on
//! every node and its detection must not go blind because someone can reach the port:
//!
//! - every connection must send its request headers within `header_read_timeout`, and a whole
//!   request is answered within `request_timeout` (503 otherwise);
//! - open connections are capped at their share of the fd limit ([`crate::FileLimit`]), so
//!   the collectors always keep theirs; when the cap is reached, the connection that
//!   has waited longest without sending a request is closed to make room, so a flood of
//!   half-sent requests cannot lock a real scraper out;
//! - at most `max_requests` requests are served at once (node_exporter's
//!   `--web.max-requests`, default 40); the excess gets 503 at once.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::file_limit::FileLimit;
use crate::listen::ListenAddr;
use crate::security::WebConfigWatch;

/// What the endpoint allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub max_requests: usize,
}

/// The connection cap for the process's file limit: the configured cap, but never more
/// than the connections' share of the limit ([`FileLimit::connections`]).
pub fn connection_cap(configured: usize, files: &FileLimit) -> usize {
    configured
        .min(usize::try_from(files.connections()).unwrap_or(usize::MAX))
        .max(8)
}

/// Connection counters for `/status`.
#[derive(Debug, Default, Clone, Serialize)]
pub struct WebStats {
    pub open_connections: usize,
    pub max_connections: usize,
    /// Connections closed because they had sent no request when room was needed.
    pub evicted_idle_total: u64,
    /// Connections refused because every slot was busy with a request.
    pub refused_total: u64,
}

struct Conn {
    /// Set once the connection has sent a complete request head.
    started: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

/// The open connections and the endpoint's counters, in one place: `/status` reads the
/// counters from here.
#[derive(Default)]
pub struct Slots {
    conns: VecDeque<Conn>,
    stats: WebStats,
}

impl Slots {
    fn prune(&mut self) {
        self.conns.retain(|c| !c.task.is_finished());
    }
}

pub type SharedWebStats = Arc<Mutex<Slots>>;

/// The counters, for `/status`.
pub fn web_stats(shared: &SharedWebStats) -> WebStats {
    let s = shared.lock().unwrap_or_else(|p| p.into_inner());
    WebStats {
        open_connections: s.conns.iter().filter(|c| !c.task.is_finished()).count(),
        ..s.stats.clone()
    }
}

/// What every request passes before its route, in this order: the cap on requests served at
/// once (the excess gets 503 at once, so a flood of bad credentials is bounded like any other
/// request), the request timeout (503), then basic auth and the configured response headers.
///
/// It runs inside each connection's service future, which hyper keeps in one allocation per
/// connection. As two `axum::middleware::from_fn` layers it cost two boxed futures per
/// request (1,144 and 1,024 bytes), and with musl's allocator a `mmap` and a `munmap` per
/// request (BENCHMARKS.md, "The guard in the connection").
struct Guard {
    app: Router,
    security: Arc<WebConfigWatch>,
    inflight: Semaphore,
    timeout: Duration,
}

impl Guard {
    async fn serve(&self, req: Request) -> Response {
        let Ok(_permit) = self.inflight.try_acquire() else {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "too many concurrent requests (web.max_requests); retry\n",
            )
                .into_response();
        };
        match tokio::time::timeout(self.timeout, self.secure(req)).await {
            Ok(r) => r,
            Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "request timed out (web.request_timeout)\n",
            )
                .into_response(),
        }
    }

    /// Basic auth (when the web configuration has users) and the configured response
    /// headers, on every route as exporter-toolkit does. bcrypt runs on the blocking pool,
    /// never on the runtime thread that serves every request.
    async fn secure(&self, req: Request) -> Response {
        let sec = self.security.current();
        let allowed = if sec.needs_auth() {
            match basic_credentials(&req) {
                Some((user, password)) => {
                    let sec = sec.clone();
                    tokio::task::spawn_blocking(move || sec.check_password(&user, &password))
                        .await
                        .unwrap_or(false)
                }
                None => false,
            }
        } else {
            true
        };
        let mut resp = if allowed {
            use tower::ServiceExt;
            match self.app.clone().oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        } else {
            (
                StatusCode::UNAUTHORIZED,
                [(axum::http::header::WWW_AUTHENTICATE, "Basic")],
                "Unauthorized\n",
            )
                .into_response()
        };
        for (name, value) in &sec.headers {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
        resp
    }
}

/// The user and password of an `Authorization: Basic` header. The scheme is
/// case-insensitive (RFC 7617; Go's `Request.BasicAuth` agrees).
fn basic_credentials(req: &Request) -> Option<(String, String)> {
    use base64::Engine;
    let value = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, b) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// A bound endpoint address.
pub enum Listener {
    Tcp(TcpListener),
    /// A unix socket, and its path (removed at shutdown).
    Unix(tokio::net::UnixListener, PathBuf),
}

/// A connection from either kind of listener.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> Io for T {}

impl Listener {
    /// Binds `addr`. A stale unix socket left by an earlier run is replaced; the new one is
    /// readable and writable by its owner and group only (0660).
    pub async fn bind(addr: &ListenAddr) -> std::io::Result<Self> {
        match addr {
            ListenAddr::Tcp(a) => Ok(Self::Tcp(TcpListener::bind(a).await?)),
            ListenAddr::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                    std::fs::remove_file(path)?;
                }
                let l = tokio::net::UnixListener::bind(path)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
                Ok(Self::Unix(l, path.clone()))
            }
        }
    }

    /// The address, with the port the kernel picked for `:0`.
    pub fn local(&self) -> String {
        match self {
            Self::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|e| e.to_string()),
            Self::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }

    async fn accept(&self) -> std::io::Result<(Box<dyn Io>, String, bool)> {
        match self {
            Self::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                Ok((Box::new(s), peer.to_string(), true))
            }
            Self::Unix(l, p) => {
                let (s, _) = l.accept().await?;
                Ok((Box::new(s), format!("unix:{}", p.display()), false))
            }
        }
    }
}

/// Serves `app` on every listener until `shutdown` completes. All listeners share the
/// connection cap and the cap on requests served at once. TLS (when the web configuration has
/// it) applies to TCP listeners; a unix socket is guarded by its file permissions. Basic auth
/// and the configured headers apply to every request on either.
pub async fn serve(
    listeners: Vec<Listener>,
    app: Router,
    limits: Limits,
    stats: SharedWebStats,
    security: Arc<WebConfigWatch>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = stats;
    let guard = Arc::new(Guard {
        app,
        security,
        inflight: Semaphore::new(limits.max_requests.max(1)),
        timeout: limits.request_timeout,
    });
    if let Ok(mut s) = slots.lock() {
        s.stats.max_connections = limits.max_connections;
    }
    let mut unix_paths = Vec::new();
    let mut loops = tokio::task::JoinSet::new();
    for listener in listeners {
        if let Listener::Unix(_, p) = &listener {
            unix_paths.push(p.clone());
        }
        loops.spawn(accept_loop(listener, guard.clone(), limits, slots.clone()));
    }
    shutdown.await;
    loops.abort_all();
    let s = slots.lock().unwrap_or_else(|p| p.into_inner());
    for c in &s.conns {
        c.task.abort();
    }
    for p in unix_paths {
        let _ = std::fs::remove_file(p);
    }
}

async fn accept_loop(listener: Listener, guard: Arc<Guard>, limits: Limits, slots: SharedWebStats) {
    loop {
        let (stream, peer, tcp) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning; the reserve keeps
                // the collectors' fds.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if !make_room(&slots, &limits) {
            drop(stream);
            continue;
        }
        let started = Arc::new(AtomicBool::new(false));
        // The configuration as of this connection: a rotated certificate is served from the
        // next connection on.
        let tls = if tcp {
            guard.security.current().tls.clone()
        } else {
            None
        };
        let task = tokio::spawn(connection(
            stream,
            peer,
            tls,
            guard.clone(),
            limits,
            started.clone(),
        ));
        let mut s = slots.lock().unwrap_or_else(|p| p.into_inner());
        s.conns.push_back(Conn {
            started,
            task: task.abort_handle(),
        });
    }
}

/// Whether a new connection may be served: below the cap, or after closing the connection
/// that has waited longest without sending a request.
fn make_room(slots: &Mutex<Slots>, limits: &Limits) -> bool {
    let mut s = slots.lock().unwrap_or_else(|p| p.into_inner());
    s.prune();
    if s.conns.len() < limits.max_connections {
        return true;
    }
    let idle = s
        .conns
        .iter()
        .position(|c| !c.started.load(Ordering::Relaxed));
    match idle {
        Some(i) => {
            if let Some(c) = s.conns.remove(i) {
                c.task.abort();
            }
            s.stats.evicted_idle_total += 1;
            true
        }
        None => {
            s.stats.refused_total += 1;
            false
        }
    }
}

async fn connection(
    stream: Box<dyn Io>,
    peer: String,
    tls: Option<Arc<rustls::ServerConfig>>,
    guard: Arc<Guard>,
    limits: Limits,
    started: Arc<AtomicBool>,
) {
    let stream: Box<dyn Io> = match tls {
        None => stream,
        Some(config) => {
            // The handshake is part of sending a request: bounded by the header timeout, so
            // a client that stalls in it holds its slot no longer than one that stalls in
            // its headers.
            let accept = tokio_rustls::TlsAcceptor::from(config).accept(stream);
            match tokio::time::timeout(limits.header_read_timeout, accept).await {
                Ok(Ok(tls)) => {
                    let allowed = &guard.security.current().allowed_sans;
                    let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
                    if !allowed.is_empty()
                        && !cert.is_some_and(|c| crate::security::san_allowed(c, allowed))
                    {
                        tracing::debug!(%peer, "client certificate names none of client_allowed_sans");
                        return;
                    }
                    Box::new(tls)
                }
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            }
        }
    };
    // The future of each request is kept in the connection's one allocation (hyper's
    // `in_flight`), so the guard costs no allocation per request.
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        started.store(true, Ordering::Relaxed);
        let guard = guard.clone();
        async move {
            Ok::<_, std::convert::Infallible>(guard.serve(req.map(axum::body::Body::new)).await)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = conn.await {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Authorization` yields: RFC 7617's scheme in any case, the password split at the
    /// first colon (a password may hold more), and nothing for another scheme, a value that is
    /// not base64 or not UTF-8, or credentials without a colon.
    #[test]
    fn basic_credentials_follow_rfc_7617() {
        let with = |value: &[u8]| {
            let mut req = Request::new(axum::body::Body::empty());
            req.headers_mut().insert(
                axum::http::header::AUTHORIZATION,
                axum::http::HeaderValue::from_bytes(value).unwrap_or_else(|e| panic!("{e}")),
            );
            basic_credentials(&req)
        };
        let pair = |u: &str, p: &str| Some((u.to_string(), p.to_string()));
        // "alice:s3cret", "alice:a:b", "alice", "alice:" and invalid UTF-8, in base64.
        assert_eq!(with(b"Basic YWxpY2U6czNjcmV0"), pair("alice", "s3cret"));
        assert_eq!(with(b"bAsIc YWxpY2U6czNjcmV0"), pair("alice", "s3cret"));
        assert_eq!(with(b"  Basic  YWxpY2U6czNjcmV0 "), pair("alice", "s3cret"));
        assert_eq!(with(b"Basic YWxpY2U6YTpi"), pair("alice", "a:b"));
        assert_eq!(with(b"Basic YWxpY2U6"), pair("alice", ""));
        assert_eq!(with(b"Basic YWxpY2U="), None);
        assert_eq!(with(b"Basic //79"), None);
        assert_eq!(with(b"Bearer YWxpY2U6czNjcmV0"), None);
        assert_eq!(with(b"Basic not-base64!"), None);
        assert_eq!(with(b"Basic"), None);
        let none = Request::new(axum::body::Body::empty());
        assert_eq!(basic_credentials(&none), None);
    }

    #[test]
    fn connections_never_take_the_collectors_fds() {
        let limit = |soft| FileLimit { soft, hard: soft };
        assert_eq!(connection_cap(512, &limit(1024)), 192);
        assert_eq!(connection_cap(512, &limit(1_048_576)), 512);
        assert_eq!(
            connection_cap(512, &limit(100)),
            8,
            "a floor, however low the limit"
        );
    }
}
