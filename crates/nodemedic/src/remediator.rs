//! The remediation task: feeds each sample's latched verdicts to the policy, carries out its
//! steps, and keeps the audit trail. It runs beside the sampler, never inside the `/metrics`
//! handler.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use nodemedic_collect::{monotonic_now, Paths};
use nodemedic_detect::Finding;
use nodemedic_remedy::actuator::{execute, AffinityWriter, Systemd};
use nodemedic_remedy::policy::IrqbalanceState;
use nodemedic_remedy::{Decision, Mode, Policy, RemediationConfig};
use serde::Serialize;
use tokio::sync::watch;

use crate::engine::Sample;

/// What the rest of the daemon can see of the remediator.
#[derive(Debug, Default, Serialize)]
pub struct RemedyState {
    pub mode: Option<Mode>,
    pub paused: bool,
    pub verifying: bool,
    pub irqbalance: Option<IrqbalanceState>,
    /// The most recent decisions, oldest first.
    pub audit: VecDeque<Decision>,
    #[serde(skip)]
    pub counts: BTreeMap<(String, String), u64>,
    pub last_action_timestamp: Option<f64>,
    pub findings: Vec<Finding>,
}

pub type SharedRemedy = Arc<Mutex<RemedyState>>;

/// The node annotation `nodemedic.io/pause`, as last read by the Kubernetes reporter:
/// [`PAUSE_UNKNOWN`] until it has been read (remediation waits: it must not act on a node an
/// operator paused just because the API was slow), [`PAUSE_OFF`] or [`PAUSE_ON`]. Without
/// Kubernetes it is set to [`PAUSE_OFF`] at start.
pub type PauseFlag = Arc<AtomicU8>;
pub const PAUSE_UNKNOWN: u8 = 0;
pub const PAUSE_OFF: u8 = 1;
pub const PAUSE_ON: u8 = 2;

pub async fn run(
    cfg: RemediationConfig,
    paths: Paths,
    mut samples: watch::Receiver<Option<Arc<Sample>>>,
    state: SharedRemedy,
    external_pause: PauseFlag,
    events: tokio::sync::mpsc::Sender<Decision>,
) {
    let systemd = Systemd::new(cfg.irqbalance.clone(), paths.rootfs.clone());
    let writer = AffinityWriter::new(paths.procfs.clone());
    let keep = cfg.audit_entries.max(1);
    let mut policy = Policy::new(cfg.clone());
    let mut irqbalance: Option<IrqbalanceState> = None;
    if let Ok(mut s) = state.lock() {
        s.mode = Some(cfg.mode);
    }
    while samples.changed().await.is_ok() {
        let Some(sample) = samples.borrow_and_update().clone() else {
            continue;
        };
        if cfg.mode == Mode::Off {
            continue;
        }
        let paused = cfg.paused || external_pause.load(Ordering::Relaxed) != PAUSE_OFF;
        // Ask systemd only when there is something to fix (or to report on).
        if sample.verdicts.iter().any(|v| v.collapsed) || irqbalance.is_none() {
            irqbalance = Some(systemd.irqbalance_state().await);
        }
        let irqb = irqbalance.clone().unwrap_or(IrqbalanceState::Unknown {
            detail: "not checked".into(),
        });
        let ts = sample.snapshot.timestamp;
        let (mut decisions, step) =
            policy.on_sample(monotonic_now(), ts, &sample.verdicts, &irqb, paused);
        if let Some(step) = step {
            record(&state, &decisions, keep);
            forward(&events, &decisions);
            decisions.clear();
            let outcome = execute(&step, &systemd, &writer).await;
            let now_ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(ts);
            decisions.push(policy.completed(step.id, monotonic_now(), now_ts, outcome));
        }
        record(&state, &decisions, keep);
        forward(&events, &decisions);
        if let Ok(mut s) = state.lock() {
            s.paused = paused;
            s.verifying = policy.is_verifying();
            s.findings = policy.findings(&sample.verdicts, &irqb);
            s.irqbalance = Some(irqb);
        }
    }
}

/// Hands decisions to the Kubernetes reporter; drops them if it is not keeping up (the audit
/// trail and the log still have them).
fn forward(events: &tokio::sync::mpsc::Sender<Decision>, decisions: &[Decision]) {
    for d in decisions {
        let _ = events.try_send(d.clone());
    }
}

fn record(state: &SharedRemedy, decisions: &[Decision], keep: usize) {
    for d in decisions {
        tracing::warn!(
            target: "nodemedic::audit",
            action = %d.action,
            groups = ?d.groups,
            mode = ?d.mode,
            reason = %d.reason,
            evidence = %d.evidence,
            result = %d.result,
            "remediation decision"
        );
    }
    let Ok(mut s) = state.lock() else {
        return;
    };
    for d in decisions {
        if d.result != "pending" {
            *s.counts
                .entry((d.action.clone(), d.result.clone()))
                .or_default() += 1;
        }
        if matches!(d.result.as_str(), "done" | "dry_run") || d.result.starts_with("failed") {
            s.last_action_timestamp = Some(d.timestamp);
        }
        s.audit.push_back(d.clone());
        while s.audit.len() > keep {
            s.audit.pop_front();
        }
    }
}
