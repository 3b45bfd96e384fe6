//! The remediation task: feeds each sample's latched verdicts to the policy, carries out its
//! steps, and keeps the audit trail. It runs beside the sampler, never inside the `/metrics`
//! handler.

use std::sync::Arc;

use nodemedic_collect::sources::irqbalance::IrqbalanceConfig;
use nodemedic_collect::Paths;
use nodemedic_kernel::lsm::LsmContext;
use nodemedic_sample::Sample;
use tokio::sync::watch;

use crate::actuator::{execute, AffinityWriter, Systemd};
use crate::policy::{Outcome, Step};
use crate::{
    Decision, DecisionResult, IrqbalanceState, Mode, Pause, PauseFlag, Policy, RemediationConfig,
    RemedyState,
};

/// How long irqbalance's state, once asked, is taken as current without a collapse.
const IRQBALANCE_REFRESH: std::time::Duration = std::time::Duration::from_secs(300);

/// The side effects the remediator needs, so the task can be driven on a paused clock.
pub trait Actuate: Send + Sync {
    fn irqbalance_state(&self) -> impl std::future::Future<Output = IrqbalanceState> + Send;
    fn execute(&self, step: &Step) -> impl std::future::Future<Output = Outcome> + Send;
}

/// The real actuators: systemd over D-Bus, and smp_affinity writes under procfs.
pub struct RealActuators {
    systemd: Systemd,
    writer: AffinityWriter,
}

impl RealActuators {
    /// `lsm`: this process's LSM labels (read once at start), which name a call or a write
    /// a security policy refuses.
    pub fn new(cfg: &RemediationConfig, paths: &Paths, lsm: &LsmContext) -> Self {
        Self {
            systemd: Systemd::under(cfg.irqbalance.clone(), lsm.clone()),
            writer: AffinityWriter::under(paths.procfs.clone(), lsm.clone()),
        }
    }
}

impl Actuate for RealActuators {
    async fn irqbalance_state(&self) -> IrqbalanceState {
        self.systemd.irqbalance_state().await
    }

    async fn execute(&self, step: &Step) -> Outcome {
        execute(step, &self.systemd, &self.writer).await
    }
}

pub async fn run(
    cfg: RemediationConfig,
    actuators: impl Actuate,
    mut samples: watch::Receiver<Option<Arc<Sample>>>,
    state: watch::Sender<RemedyState>,
    external_pause: PauseFlag,
    events: tokio::sync::mpsc::Sender<Decision>,
) {
    // tokio's clock, so that tests can run hours of cooldowns on a paused clock.
    let epoch = tokio::time::Instant::now();
    let monotonic_now = || epoch.elapsed();
    let keep = cfg.audit_entries.max(1);
    let mut policy = Policy::new(cfg.clone());
    let mut irqbalance: Option<IrqbalanceState> = None;
    let mut asked: Option<tokio::time::Instant> = None;
    state.send_modify(|s| s.mode = Some(cfg.mode));
    while samples.changed().await.is_ok() {
        let Some(sample) = samples.borrow_and_update().clone() else {
            continue;
        };
        if cfg.mode == Mode::Off {
            continue;
        }
        let pause = if cfg.paused {
            Some(Pause::On)
        } else {
            match external_pause.get() {
                Pause::Unknown => None,
                p => Some(p),
            }
        };
        // Ask systemd when there is something to fix, and now and then for the fleet's info
        // series (an irqbalance stopped since start must not read "running" for days).
        let stale = !matches!(asked, Some(at) if at.elapsed() < IRQBALANCE_REFRESH);
        if sample.verdicts.iter().any(|v| v.collapsed) || stale {
            irqbalance = Some(actuators.irqbalance_state().await);
            asked = Some(tokio::time::Instant::now());
        }
        let package_version = sample
            .snapshot
            .get::<IrqbalanceConfig>()
            .and_then(|c| c.package.version());
        let irqb = irqbalance
            .clone()
            .unwrap_or(IrqbalanceState::Unknown {
                detail: "not checked".into(),
                version: None,
            })
            .with_version(package_version);
        let Some(pause) = pause else {
            // The pause annotation is not read yet: no decision, and no audited pause.
            state.send_modify(|s| {
                s.paused = true;
                s.findings = policy.findings(&sample.verdicts, &irqb);
                s.irqbalance = Some(irqb);
            });
            continue;
        };
        let paused = pause == Pause::On;
        let why = if cfg.paused {
            "paused = true in [remediation]"
        } else {
            "node annotation nodemedic.io/pause=true"
        };
        let ts = sample.snapshot.timestamp;
        let (mut decisions, step) = policy.on_sample(
            monotonic_now(),
            ts,
            &sample.verdicts,
            &irqb,
            paused.then_some(why),
        );
        if let Some(step) = step {
            record(&state, &decisions, keep);
            forward(&events, &decisions);
            decisions.clear();
            let outcome = actuators.execute(&step).await;
            let now_ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(ts);
            decisions.push(policy.completed(step.id, monotonic_now(), now_ts, outcome));
        }
        record(&state, &decisions, keep);
        forward(&events, &decisions);
        state.send_modify(|s| {
            s.paused = paused;
            s.verifying = policy.is_verifying();
            s.findings = policy.findings(&sample.verdicts, &irqb);
            s.irqbalance = Some(irqb);
        });
    }
}

/// Hands decisions to the Kubernetes reporter; drops them if it is not keeping up (the audit
/// trail and the log still have them).
fn forward(events: &tokio::sync::mpsc::Sender<Decision>, decisions: &[Decision]) {
    for d in decisions {
        let _ = events.try_send(d.clone());
    }
}

fn record(state: &watch::Sender<RemedyState>, decisions: &[Decision], keep: usize) {
    for d in decisions {
        tracing::warn!(
            target: "nodemedic::audit",
            action = %d.action.as_str(),
            groups = ?d.groups,
            mode = ?d.mode,
            reason = %d.reason,
            evidence = %d.evidence,
            result = %d.result.as_str(),
            "remediation decision"
        );
    }
    if decisions.is_empty() {
        return;
    }
    state.send_modify(|s| {
        for d in decisions {
            if d.result != DecisionResult::Pending {
                *s.counts.entry((d.action, d.result)).or_default() += 1;
            }
            if d.result.is_action() {
                s.last_action_timestamp = Some(d.timestamp);
            }
            s.audit.push_back(d.clone());
            while s.audit.len() > keep {
                s.audit.pop_front();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    //! The remediation task on a paused tokio clock: hours of samples, cooldowns and
    //! verification windows run in milliseconds, with a recording actuator (systemd cannot be
    //! driven here; the real actuators are tested on this machine's IRQs and in a VM).

    use std::sync::Mutex;
    use std::time::Duration;

    use nodemedic_detect::{CollapseConfig, CollapseDetector, HurtingConfig};
    use nodemedic_sample::CollectorName;
    use nodemedic_testkit::fixture_snapshot;

    use super::*;
    use crate::config::NativeStep;
    use crate::{ActionKind, DecisionAction};

    /// What the collapse detector reads from a fixture tree: its IRQ side's collectors, asserted
    /// active.
    const IRQ_SIDE: &[CollectorName] = &[
        nodemedic_collect::sources::topology::NAME,
        nodemedic_collect::sources::interrupts::NAME,
        nodemedic_collect::sources::irq_affinity::NAME,
        nodemedic_collect::sources::pci::NAME,
    ];

    struct Recording {
        calls: Mutex<Vec<(Duration, ActionKind)>>,
        epoch: tokio::time::Instant,
    }

    impl Actuate for Arc<Recording> {
        async fn irqbalance_state(&self) -> IrqbalanceState {
            IrqbalanceState::Running {
                version: Some("1.9.2-1".into()),
            }
        }

        async fn execute(&self, step: &Step) -> Outcome {
            if let Ok(mut c) = self.calls.lock() {
                c.push((self.epoch.elapsed(), step.kind));
            }
            // The action "works" but the IRQs stay where they are.
            Outcome::Done("recorded".into())
        }
    }

    /// Feeds `samples` samples 5 s apart (collapsed when `pattern(i)`), returns the actuator
    /// calls and the audit trail.
    async fn drive(
        cfg: RemediationConfig,
        samples: u64,
        pattern: impl Fn(u64) -> bool,
    ) -> (Vec<(Duration, ActionKind)>, Vec<Decision>) {
        drive_paused(cfg, samples, pattern, |_| Pause::Off).await
    }

    /// [`drive`] with the pause annotation as `pause(i)` at sample `i`.
    async fn drive_paused(
        cfg: RemediationConfig,
        samples: u64,
        pattern: impl Fn(u64) -> bool,
        pause_at: impl Fn(u64) -> Pause,
    ) -> (Vec<(Duration, ActionKind)>, Vec<Decision>) {
        let collapsed = fixture_snapshot("8cpu-collapsed", Duration::ZERO).needing(IRQ_SIDE);
        let balanced = fixture_snapshot("8cpu-balanced", Duration::ZERO).needing(IRQ_SIDE);
        let rec = Arc::new(Recording {
            calls: Mutex::new(Vec::new()),
            epoch: tokio::time::Instant::now(),
        });
        let (tx, rx) = watch::channel(None);
        let (etx, mut erx) = tokio::sync::mpsc::channel(1024);
        let (state, state_rx) = watch::channel(RemedyState::default());
        let pause = PauseFlag::new(pause_at(0));
        let task = tokio::spawn(run(cfg, rec.clone(), rx, state, pause.clone(), etx));
        let mut detector =
            CollapseDetector::new(CollapseConfig::default(), HurtingConfig::default());
        for i in 0..samples {
            let mut snap = if pattern(i) {
                collapsed.clone()
            } else {
                balanced.clone()
            };
            snap.at = Duration::from_secs(i * 5);
            snap.timestamp = (i * 5) as f64;
            let verdicts = detector.observe(&snap);
            pause.set(pause_at(i));
            tx.send_replace(Some(Arc::new(Sample {
                snapshot: snap,
                collectors: Vec::new(),
                verdicts,
                commit: None,
                findings: Vec::new(),
                storm: None,
                pressure: None,
                tuning: None,
                duration: Duration::ZERO,
                samples_total: i + 1,
                reader: Default::default(),
                host: Default::default(),
            })));
            tokio::time::sleep(Duration::from_secs(5)).await;
            while erx.try_recv().is_ok() {}
        }
        task.abort();
        let calls = rec.calls.lock().map(|c| c.clone()).unwrap_or_default();
        let audit = state_rx.borrow().audit.iter().cloned().collect();
        (calls, audit)
    }

    #[tokio::test(start_paused = true)]
    async fn oscillating_input_produces_no_action() {
        let (calls, audit) = drive(RemediationConfig::default(), 2 * 720, |i| i % 2 == 0).await;
        assert!(calls.is_empty(), "{calls:?}");
        assert!(audit.is_empty(), "{audit:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn sustained_collapse_acts_once_per_cooldown_within_caps_and_escalates_once() {
        let cfg = RemediationConfig {
            native: NativeStep {
                enabled: true,
                require_hurting: false,
            },
            ..Default::default()
        };
        let cooldown = cfg.cooldown;
        // Two hours of a collapse that no action fixes.
        let (calls, audit) = drive(cfg, 2 * 720, |_| true).await;
        let kinds: Vec<ActionKind> = calls.iter().map(|c| c.1).collect();
        assert_eq!(
            kinds,
            vec![ActionKind::IrqbalanceRestart, ActionKind::NativeRebalance]
        );
        assert!(calls[1].0 - calls[0].0 >= cooldown, "{calls:?}");
        let verifications: Vec<&str> = audit
            .iter()
            .filter(|d| d.action == DecisionAction::Verify)
            .map(|d| d.result.as_str())
            .collect();
        assert_eq!(verifications, vec!["not_verified", "not_verified"]);
        let escalations = audit
            .iter()
            .filter(|d| d.action == DecisionAction::Escalate)
            .count();
        assert_eq!(
            escalations, 1,
            "failed verification escalates once, never loops"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn caps_bound_actions_when_collapses_keep_coming_back() {
        let cfg = RemediationConfig {
            cooldown: Duration::from_secs(60),
            verify_after: Duration::from_secs(20),
            max_actions_per_hour: 2,
            max_actions_per_day: 3,
            ..Default::default()
        };
        // Collapsed for 3 minutes, healthy for 1, for three hours: an episode every 4 minutes.
        let (calls, _) = drive(cfg, 3 * 720, |i| i % 48 < 36).await;
        let t: Vec<u64> = calls.iter().map(|c| c.0.as_secs()).collect();
        for (i, now) in t.iter().enumerate() {
            assert!(
                t[..=i].iter().filter(|x| now - **x < 3600).count() <= 2,
                "{t:?}"
            );
        }
        assert_eq!(t.len(), 3, "day cap: {t:?}");
    }

    /// Until the pause annotation is read, remediation waits without auditing a pause (no
    /// Warning Event at every start); an annotation that pauses it is audited with what
    /// paused it.
    #[tokio::test(start_paused = true)]
    async fn an_unread_pause_annotation_waits_silently() {
        let (calls, audit) = drive_paused(
            RemediationConfig::default(),
            60,
            |_| true,
            |i| if i < 10 { Pause::Unknown } else { Pause::Off },
        )
        .await;
        assert!(
            audit.iter().all(|d| d.action != DecisionAction::Pause),
            "{audit:?}"
        );
        assert_eq!(
            calls.len(),
            1,
            "acts once the annotation is read: {calls:?}"
        );
        assert!(calls[0].0 >= Duration::from_secs(50), "{calls:?}");

        let (calls, audit) = drive_paused(
            RemediationConfig::default(),
            60,
            |_| true,
            |i| if i < 5 { Pause::Unknown } else { Pause::On },
        )
        .await;
        assert!(calls.is_empty(), "{calls:?}");
        let pauses: Vec<(&str, &str)> = audit
            .iter()
            .filter(|d| d.action == DecisionAction::Pause)
            .map(|d| (d.result.as_str(), d.evidence.as_str()))
            .collect();
        assert_eq!(
            pauses,
            vec![("paused", "node annotation nodemedic.io/pause=true")]
        );
    }
}
