//! The HTTP endpoint, hardened against clients that misbehave. nodemedic runs as root on
//! every node and its detection must not go blind because someone can reach the port:
//!
//! - every connection must send its request headers within `header_read_timeout`, and a whole
//!   request is answered within `request_timeout` (503 otherwise);
//! - open connections are capped well below the fd limit (raised to the hard limit at start),
//!   with a reserve the collectors always keep; when the cap is reached, the connection that
//!   has waited longest without sending a request is closed to make room, so a flood of
//!   half-sent requests cannot lock a real scraper out;
//! - at most `max_requests` requests are served at once (node_exporter's
//!   `--web.max-requests`, default 40); the excess gets 503 at once;
//! - `/metrics` is gzip-compressed when the client asks for it (Prometheus does), once per
//!   sample like its rendering (crates/nodemedic/src/daemon.rs).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What the endpoint allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub max_requests: usize,
}

/// File descriptors kept free for everything that is not a client connection: the read
/// layer's kept-open files are bounded separately (they stay under the limit minus this).
pub const FD_RESERVE: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns (soft, hard) after.
pub fn raise_nofile() -> (u64, u64) {
    let before = rlimit::Resource::NOFILE.get().unwrap_or((1024, 1024));
    match rlimit::increase_nofile_limit(before.1) {
        Ok(soft) => (soft, before.1),
        Err(e) => {
            tracing::warn!(error = %e, soft = before.0, hard = before.1, "cannot raise RLIMIT_NOFILE");
            before
        }
    }
}

/// The connection cap for an fd limit: the configured cap, but never more than a quarter of
/// what is left after the reserve, so connections can never take the collectors' fds.
pub fn connection_cap(configured: usize, nofile_soft: u64) -> usize {
    let room = nofile_soft.saturating_sub(FD_RESERVE) / 4;
    configured
        .min(usize::try_from(room).unwrap_or(usize::MAX))
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

#[derive(Default)]
struct Slots {
    conns: VecDeque<Conn>,
    stats: WebStats,
}

impl Slots {
    fn prune(&mut self) {
        self.conns.retain(|c| !c.task.is_finished());
    }
}

pub type SharedWebStats = Arc<Mutex<WebStats>>;

#[derive(Clone)]
struct RequestLimits {
    inflight: Arc<Semaphore>,
    timeout: Duration,
}

async fn limit_requests(State(l): State<RequestLimits>, req: Request, next: Next) -> Response {
    let Ok(_permit) = l.inflight.try_acquire() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many concurrent requests (web.max_requests); retry\n",
        )
            .into_response();
    };
    match tokio::time::timeout(l.timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "request timed out (web.request_timeout)\n",
        )
            .into_response(),
    }
}

/// Wraps the routes with the request limits.
pub fn harden(app: Router, limits: &Limits) -> Router {
    let l = RequestLimits {
        inflight: Arc::new(Semaphore::new(limits.max_requests.max(1))),
        timeout: limits.request_timeout,
    };
    app.layer(axum::middleware::from_fn_with_state(l, limit_requests))
}

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stats: SharedWebStats,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Mutex::new(Slots::default()));
    if let Ok(mut s) = stats.lock() {
        s.max_connections = limits.max_connections;
    }
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; the reserve keeps
                    // the collectors' fds.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if !make_room(&slots, &limits, &stats) {
            drop(stream);
            continue;
        }
        let started = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(connection(
            stream,
            peer,
            app.clone(),
            limits,
            started.clone(),
        ));
        let mut s = slots.lock().unwrap_or_else(|p| p.into_inner());
        s.conns.push_back(Conn {
            started,
            task: task.abort_handle(),
        });
        s.stats.open_connections = s.conns.len();
        if let Ok(mut out) = stats.lock() {
            out.open_connections = s.conns.len();
            out.evicted_idle_total = s.stats.evicted_idle_total;
            out.refused_total = s.stats.refused_total;
        }
    }
    let s = slots.lock().unwrap_or_else(|p| p.into_inner());
    for c in &s.conns {
        c.task.abort();
    }
}

/// Whether a new connection may be served: below the cap, or after closing the connection
/// that has waited longest without sending a request.
fn make_room(slots: &Mutex<Slots>, limits: &Limits, stats: &SharedWebStats) -> bool {
    let mut s = slots.lock().unwrap_or_else(|p| p.into_inner());
    s.prune();
    if s.conns.len() < limits.max_connections {
        return true;
    }
    let idle = s
        .conns
        .iter()
        .position(|c| !c.started.load(Ordering::Relaxed));
    let ok = match idle {
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
    };
    if let Ok(mut out) = stats.lock() {
        out.evicted_idle_total = s.stats.evicted_idle_total;
        out.refused_total = s.stats.refused_total;
    }
    ok
}

async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    started: Arc<AtomicBool>,
) {
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        started.store(true, Ordering::Relaxed);
        let app = app.clone();
        async move {
            use tower::ServiceExt;
            app.oneshot(req.map(axum::body::Body::new)).await
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

    #[test]
    fn connections_never_take_the_collectors_fds() {
        assert_eq!(connection_cap(512, 1024), 192);
        assert_eq!(connection_cap(512, 1_048_576), 512);
        assert_eq!(
            connection_cap(512, 100),
            8,
            "a floor, however low the limit"
        );
    }
}
