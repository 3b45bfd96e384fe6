//! Kubernetes reporting task: condition, label, Events, pause annotation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodemedic_kube::{KubeConfig, Reporter};
use nodemedic_remedy::Decision;
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::remediator::{Pause, PauseFlag};
use nodemedic_engine::Sample;

#[derive(Debug, Default, Clone, Serialize)]
pub struct KubeStatus {
    /// `disabled`, `active` or `failed`.
    pub state: String,
    pub node: Option<String>,
    pub reason: Option<String>,
    pub paused_by_annotation: bool,
}

pub type SharedKube = Arc<Mutex<KubeStatus>>;

const PAUSE_POLL: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(30);

fn set(status: &SharedKube, f: impl FnOnce(&mut KubeStatus)) {
    if let Ok(mut s) = status.lock() {
        f(&mut s);
    }
}

pub async fn run(
    cfg: KubeConfig,
    mut samples: watch::Receiver<Option<Arc<Sample>>>,
    mut decisions: mpsc::Receiver<Decision>,
    pause: PauseFlag,
    status: SharedKube,
) {
    let node = match cfg.resolve() {
        Ok(Some(node)) => node,
        Ok(None) => {
            pause.set(Pause::Off);
            set(&status, |s| s.state = "disabled".into());
            // Keep draining so the remediator never blocks on a full channel.
            while decisions.recv().await.is_some() {}
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "kubernetes reporting misconfigured");
            set(&status, |s| {
                s.state = "failed".into();
                s.reason = Some(e.to_string());
            });
            while decisions.recv().await.is_some() {}
            return;
        }
    };
    set(&status, |s| s.node = Some(node.clone()));
    let mut reporter: Option<Reporter> = None;
    let mut last_attempt: Option<Instant> = None;
    let mut last_pause_poll: Option<Instant> = None;
    let mut pending: Vec<Decision> = Vec::new();
    while samples.changed().await.is_ok() {
        let Some(sample) = samples.borrow_and_update().clone() else {
            continue;
        };
        while let Ok(d) = decisions.try_recv() {
            pending.push(d);
        }
        if reporter.is_none() && last_attempt.is_none_or(|t| t.elapsed() >= RETRY) {
            last_attempt = Some(Instant::now());
            match Reporter::connect(cfg.clone(), node.clone()).await {
                Ok(r) => {
                    tracing::info!(node = %node, "kubernetes reporting active");
                    reporter = Some(r);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "kubernetes reporting unavailable; retrying in 30s");
                    set(&status, |s| {
                        s.state = "failed".into();
                        s.reason = Some(e.to_string());
                    });
                }
            }
        }
        let Some(r) = reporter.as_mut() else {
            continue;
        };
        if last_pause_poll.is_none_or(|t| t.elapsed() >= PAUSE_POLL) {
            last_pause_poll = Some(Instant::now());
            match r.paused().await {
                Ok(p) => {
                    pause.set(if p { Pause::On } else { Pause::Off });
                    set(&status, |s| s.paused_by_annotation = p);
                }
                Err(e) => tracing::warn!(error = %e, "reading the pause annotation"),
            }
        }
        match r.report(&sample.verdicts, &pending).await {
            Ok(()) => {
                pending.clear();
                set(&status, |s| {
                    s.state = "active".into();
                    s.reason = None;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "kubernetes report failed");
                // Decisions stay pending for the next attempt, but not without bound.
                if pending.len() > 100 {
                    pending.drain(..pending.len() - 100);
                }
                set(&status, |s| {
                    s.state = "failed".into();
                    s.reason = Some(e.to_string());
                });
            }
        }
    }
}
