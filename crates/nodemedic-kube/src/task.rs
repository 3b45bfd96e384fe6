//! Kubernetes reporting task: condition, label, Events, pause annotation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nodemedic_sample::kube::{KubeState, KubeStatus};
use nodemedic_sample::remedy::{Decision, Pause, PauseFlag};
use nodemedic_sample::Sample;
use tokio::sync::{mpsc, watch};

use crate::{KubeConfig, KubeError, Reporter, Retry};

const PAUSE_POLL: Duration = Duration::from_secs(10);

fn set(status: &watch::Sender<KubeStatus>, f: impl FnOnce(&mut KubeStatus)) {
    status.send_modify(f);
}

pub async fn run(
    cfg: KubeConfig,
    mut samples: watch::Receiver<Option<Arc<Sample>>>,
    mut decisions: mpsc::Receiver<Decision>,
    pause: PauseFlag,
    status: watch::Sender<KubeStatus>,
) {
    let node = match cfg.resolve() {
        Ok(Some(node)) => node,
        Ok(None) => {
            pause.set(Pause::Off);
            set(&status, |s| s.state = KubeState::Disabled);
            // Keep draining so the remediator never blocks on a full channel.
            while decisions.recv().await.is_some() {}
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "kubernetes reporting misconfigured");
            set(&status, |s| {
                s.state = KubeState::Failed;
                s.reason = Some(e.to_string());
            });
            while decisions.recv().await.is_some() {}
            return;
        }
    };
    set(&status, |s| s.node = Some(node.clone()));
    let mut reporter: Option<Reporter> = None;
    let mut last_pause_poll: Option<Instant> = None;
    let mut pending: Vec<Decision> = Vec::new();
    // Every call to the API waits for this after a failure: the connection, the pause
    // annotation and the report alike, so an outage is a handful of log lines.
    let mut retry = Retry::default();
    let mut next_attempt: Option<Instant> = None;
    while samples.changed().await.is_ok() {
        let Some(sample) = samples.borrow_and_update().clone() else {
            continue;
        };
        while let Ok(d) = decisions.try_recv() {
            pending.push(d);
        }
        // Decisions stay pending for the next attempt, but not without bound.
        if pending.len() > 100 {
            pending.drain(..pending.len() - 100);
        }
        if next_attempt.is_some_and(|t| Instant::now() < t) {
            continue;
        }
        let round = Round {
            cfg: &cfg,
            node: &node,
            pause: &pause,
            status: &status,
        };
        match round
            .run(&mut reporter, &mut last_pause_poll, &sample, &pending)
            .await
        {
            Ok(()) => {
                pending.clear();
                if next_attempt.take().is_some() {
                    tracing::info!("kubernetes reporting active again");
                }
                retry.reset();
                set(&status, |s| {
                    s.state = KubeState::Active;
                    s.reason = None;
                });
            }
            Err(e) => {
                let wait = retry.next_delay();
                next_attempt = Some(Instant::now() + wait);
                tracing::warn!(error = %e, retry_in = ?wait, "kubernetes reporting failed");
                set(&status, |s| {
                    s.state = KubeState::Failed;
                    s.reason = Some(e.to_string());
                });
            }
        }
    }
    // The samples stopped: nodemedic is shutting down.
    if let Some(r) = reporter.as_mut() {
        match r.stopped().await {
            Ok(()) => tracing::info!("node condition handed over: nodemedic stopped"),
            Err(e) => tracing::warn!(error = %e, "could not mark the node condition stopped"),
        }
    }
}

/// One round with the API: connect if not connected, read the pause annotation when due,
/// then bring the node's condition, label and Events in line with the sample.
struct Round<'a> {
    cfg: &'a KubeConfig,
    node: &'a str,
    pause: &'a PauseFlag,
    status: &'a watch::Sender<KubeStatus>,
}

impl Round<'_> {
    async fn run(
        &self,
        reporter: &mut Option<Reporter>,
        last_pause_poll: &mut Option<Instant>,
        sample: &Sample,
        pending: &[Decision],
    ) -> Result<(), KubeError> {
        let r = match reporter {
            Some(r) => r,
            None => {
                let r = Reporter::connect(self.cfg.clone(), self.node.to_string()).await?;
                tracing::info!(node = %self.node, "kubernetes reporting connected");
                reporter.insert(r)
            }
        };
        if last_pause_poll.is_none_or(|t| t.elapsed() >= PAUSE_POLL) {
            let p = r.paused().await?;
            *last_pause_poll = Some(Instant::now());
            self.pause.set(if p { Pause::On } else { Pause::Off });
            set(self.status, |s| s.paused_by_annotation = p);
        }
        r.report(&sample.verdicts, sample.pressure.as_ref(), pending)
            .await
    }
}
