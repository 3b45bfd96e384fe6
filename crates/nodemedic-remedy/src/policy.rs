//! The remediation policy: a pure state machine over latched verdicts.
//!
//! Per collapsed group it keeps an *episode* that climbs a ladder and never loops:
//! ask irqbalance to re-place IRQs → (if that is impossible or did not help, and enabled)
//! spread the IRQs natively → escalate once. Every action is followed by a cooldown and a
//! verification; actions are capped per hour and per day; while verifying nothing new is
//! decided. Every decision is returned as an audit [`Decision`].

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use nodemedic_detect::{Finding, GroupVerdict, Severity};
use nodemedic_kernel::CpuSet;
use serde::Serialize;

use crate::config::RemediationConfig;
use crate::dpkg::has_rebalance_bug;
use crate::{
    ActionKind, Decision, DecisionAction, DecisionResult, FailureClass, IrqbalanceState, Mode,
};

/// A group an action is aimed at, with what the native step needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    pub key: String,
    pub name: String,
    pub irqs: Vec<u32>,
    pub effective_cpus: CpuSet,
    pub eligible_cpus: CpuSet,
}

/// An action for the actuators to carry out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub id: u64,
    pub kind: ActionKind,
    pub targets: Vec<Target>,
}

/// A failed step: its class and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    pub class: FailureClass,
    pub detail: String,
}

/// How an action went, reported back by the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done(String),
    Failed(StepFailure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Fresh,
    IrqbalanceFailed,
    NativeFailed,
    /// An action worked; wait for the verdict to clear before anything else.
    Resolved,
    Escalated,
}

#[derive(Debug, Clone)]
struct Episode {
    stage: Stage,
    /// What the last step said when it failed outright (not when it ran and did not help):
    /// the escalation names it (a refusal by the bus or an LSM, say).
    failed: Option<String>,
}

#[derive(Debug, Clone)]
struct Baseline {
    key: String,
    distinct: usize,
    rate_share: Option<f64>,
}

#[derive(Debug, Clone)]
struct Verification {
    due: Duration,
    kind: ActionKind,
    baselines: Vec<Baseline>,
}

pub struct Policy {
    cfg: RemediationConfig,
    episodes: BTreeMap<String, Episode>,
    actions: VecDeque<Duration>,
    last_action: Option<Duration>,
    in_flight: Option<(Step, Vec<Baseline>)>,
    verifying: Option<Verification>,
    next_id: u64,
    was_paused: bool,
}

impl Policy {
    pub fn new(cfg: RemediationConfig) -> Self {
        Self {
            cfg,
            episodes: BTreeMap::new(),
            actions: VecDeque::new(),
            last_action: None,
            in_flight: None,
            verifying: None,
            next_id: 1,
            was_paused: false,
        }
    }

    pub fn config(&self) -> &RemediationConfig {
        &self.cfg
    }

    pub fn is_verifying(&self) -> bool {
        self.verifying.is_some()
    }

    /// Actions taken (or, in dry-run, decided) within `window` before `now`.
    pub fn actions_within(&self, now: Duration, window: Duration) -> usize {
        self.actions
            .iter()
            .filter(|t| now.saturating_sub(**t) < window)
            .count()
    }

    /// Feeds one sample's latched verdicts. Returns audit entries and at most one step to
    /// carry out; the caller must report the step's outcome with [`Policy::completed`].
    /// `pause` is what pauses remediation, if anything: it becomes the evidence of the
    /// audited pause.
    pub fn on_sample(
        &mut self,
        now: Duration,
        timestamp: f64,
        verdicts: &[GroupVerdict],
        irqbalance: &IrqbalanceState,
        pause: Option<&str>,
    ) -> (Vec<Decision>, Option<Step>) {
        let mut log = Vec::new();
        if self.cfg.mode == Mode::Off || self.in_flight.is_some() {
            return (log, None);
        }
        // Episodes end when their verdict clears (or the device goes away).
        self.episodes
            .retain(|key, _| verdicts.iter().any(|v| v.group.key == *key && v.collapsed));
        if let Some(v) = &self.verifying {
            if now < v.due {
                return (log, None);
            }
            log.extend(self.verify(timestamp, verdicts));
        }
        log.extend(self.pause_change(timestamp, pause));
        if pause.is_some() {
            return (log, None);
        }
        let collapsed: Vec<&GroupVerdict> = verdicts.iter().filter(|v| v.collapsed).collect();
        for v in &collapsed {
            self.episodes.entry(v.group.key.clone()).or_insert(Episode {
                failed: None,
                stage: Stage::Fresh,
            });
        }
        if collapsed.is_empty() {
            return (log, None);
        }
        if let Some(last) = self.last_action {
            if now.saturating_sub(last) < self.cfg.cooldown {
                return (log, None);
            }
        }
        let Some((kind, chosen)) = self.choose(timestamp, &collapsed, irqbalance, &mut log) else {
            return (log, None);
        };
        if let Some(reason) = self.cap_reached(now) {
            for v in chosen {
                log.push(self.escalate(timestamp, v, reason.clone()));
            }
            return (log, None);
        }
        self.record_action(now);
        let (decision, step) = self.act(timestamp, kind, &chosen, irqbalance);
        log.push(decision);
        (log, step)
    }

    /// The audit entry of a pause starting or ending, if it did since the last sample.
    fn pause_change(&mut self, timestamp: f64, pause: Option<&str>) -> Option<Decision> {
        let paused = pause.is_some();
        if paused == self.was_paused {
            return None;
        }
        self.was_paused = paused;
        Some(self.entry(
            timestamp,
            DecisionAction::Pause,
            Vec::new(),
            if paused {
                "remediation paused"
            } else {
                "remediation resumed"
            },
            pause.unwrap_or_default().to_string(),
            if paused {
                DecisionResult::Paused
            } else {
                DecisionResult::Resumed
            },
        ))
    }

    /// Which step each collapsed group wants, and the groups of the one to take: restarting
    /// irqbalance goes first. Groups that want to escalate are escalated into `log` here.
    fn choose<'v>(
        &mut self,
        timestamp: f64,
        collapsed: &[&'v GroupVerdict],
        irqbalance: &IrqbalanceState,
        log: &mut Vec<Decision>,
    ) -> Option<(ActionKind, Vec<&'v GroupVerdict>)> {
        let mut irqbalance_groups = Vec::new();
        let mut native_groups = Vec::new();
        for v in collapsed {
            let (stage, failed) = self
                .episodes
                .get(&v.group.key)
                .map(|e| (e.stage, e.failed.clone()))
                .unwrap_or((Stage::Fresh, None));
            match self.next_step(stage, failed.as_deref(), v, irqbalance) {
                Want::Irqbalance => irqbalance_groups.push(*v),
                Want::Native => native_groups.push(*v),
                Want::Escalate(reason) => log.push(self.escalate(timestamp, v, reason)),
                Want::Nothing => {}
            }
        }
        if !irqbalance_groups.is_empty() {
            Some((ActionKind::IrqbalanceRestart, irqbalance_groups))
        } else if !native_groups.is_empty() {
            Some((ActionKind::NativeRebalance, native_groups))
        } else {
            None
        }
    }

    /// Why no action may be taken at `now`, if the hourly or daily cap is reached.
    fn cap_reached(&self, now: Duration) -> Option<String> {
        let hour = self.actions_within(now, Duration::from_secs(3600));
        let day = self.actions_within(now, Duration::from_secs(86_400));
        if hour >= self.cfg.max_actions_per_hour as usize
            || day >= self.cfg.max_actions_per_day as usize
        {
            return Some(format!(
                "action cap reached ({hour}/{} this hour, {day}/{} today)",
                self.cfg.max_actions_per_hour, self.cfg.max_actions_per_day
            ));
        }
        None
    }

    /// Counts an action at `now` against the caps and the cooldown.
    fn record_action(&mut self, now: Duration) {
        self.actions.push_back(now);
        while self.actions.len() > 1000 {
            self.actions.pop_front();
        }
        self.last_action = Some(now);
    }

    /// The audit entry of taking `kind` on `chosen`, and the step for the actuators: none in
    /// dry-run. A step is in flight until [`Policy::completed`] reports it.
    fn act(
        &mut self,
        timestamp: f64,
        kind: ActionKind,
        chosen: &[&GroupVerdict],
        irqbalance: &IrqbalanceState,
    ) -> (Decision, Option<Step>) {
        let targets: Vec<Target> = chosen
            .iter()
            .map(|v| Target {
                key: v.group.key.clone(),
                name: v.group.name.clone(),
                irqs: v.group.irqs.clone(),
                effective_cpus: v.group.effective_cpus.clone(),
                eligible_cpus: v.group.eligible_cpus.clone(),
            })
            .collect();
        let evidence = chosen
            .iter()
            .map(|v| evidence(v))
            .collect::<Vec<_>>()
            .join("; ");
        let reason = action_reason(kind, irqbalance);
        let groups: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
        if self.cfg.mode == Mode::DryRun {
            let decision = self.entry(
                timestamp,
                DecisionAction::Act(kind),
                groups,
                &reason,
                evidence,
                DecisionResult::DryRun,
            );
            return (decision, None);
        }
        let baselines = chosen
            .iter()
            .map(|v| Baseline {
                key: v.group.key.clone(),
                distinct: v.group.effective_cpus.len(),
                rate_share: v.evidence.rate_share(),
            })
            .collect();
        let step = Step {
            id: self.next_id,
            kind,
            targets,
        };
        self.next_id += 1;
        let decision = self.entry(
            timestamp,
            DecisionAction::Act(kind),
            groups,
            &reason,
            evidence,
            DecisionResult::Pending,
        );
        self.in_flight = Some((step.clone(), baselines));
        (decision, Some(step))
    }

    /// Reports how a step went. A step that ran starts verification; one that failed moves
    /// its groups up the ladder.
    pub fn completed(
        &mut self,
        id: u64,
        now: Duration,
        timestamp: f64,
        outcome: Outcome,
    ) -> Decision {
        let Some((step, baselines)) = self.in_flight.take().filter(|(s, _)| s.id == id) else {
            return self.entry(
                timestamp,
                DecisionAction::Unknown,
                Vec::new(),
                "completion for an unknown step",
                String::new(),
                DecisionResult::Ignored,
            );
        };
        let groups: Vec<String> = step.targets.iter().map(|t| t.name.clone()).collect();
        match outcome {
            Outcome::Done(detail) => {
                self.verifying = Some(Verification {
                    due: now + self.cfg.verify_after,
                    kind: step.kind,
                    baselines,
                });
                self.entry(
                    timestamp,
                    DecisionAction::Act(step.kind),
                    groups,
                    "action carried out",
                    detail,
                    DecisionResult::Done,
                )
            }
            Outcome::Failed(failure) => {
                for t in &step.targets {
                    self.fail_stage(&t.key, step.kind);
                    if let Some(e) = self.episodes.get_mut(&t.key) {
                        e.failed = Some(failure.detail.clone());
                    }
                }
                self.entry(
                    timestamp,
                    DecisionAction::Act(step.kind),
                    groups,
                    "action failed",
                    failure.detail,
                    DecisionResult::Failed(failure.class),
                )
            }
        }
    }

    fn fail_stage(&mut self, key: &str, kind: ActionKind) {
        if let Some(e) = self.episodes.get_mut(key) {
            e.stage = match kind {
                ActionKind::IrqbalanceRestart => Stage::IrqbalanceFailed,
                ActionKind::NativeRebalance => Stage::NativeFailed,
            };
        }
    }

    fn verify(&mut self, timestamp: f64, verdicts: &[GroupVerdict]) -> Vec<Decision> {
        let Some(v) = self.verifying.take() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for b in &v.baselines {
            let now = verdicts.iter().find(|x| x.group.key == b.key);
            let (ok, evidence) = match now {
                None => (true, "device gone".to_string()),
                Some(g) => {
                    let distinct = g.group.effective_cpus.len();
                    let share_now = g.evidence.rate_share();
                    // The hottest CPU's share fell, or it is one IRQ's load now.
                    let share_fell = match (b.rate_share, share_now) {
                        (Some(before), Some(after)) => {
                            after < before || g.evidence.hottest_is_one_irq()
                        }
                        _ => true,
                    };
                    // Fixed when the detector no longer calls the placement collapsed: the
                    // action changes where IRQs go, not which queues the traffic hashes to
                    // (one flow keeps a queue pair, and the CPU irqbalance gives both its
                    // IRQs, at 100% however well the queues are spread). Still collapsed,
                    // it counts only if the IRQs reached more CPUs and took load off the
                    // hottest.
                    let fixed = !g.collapsed_now || (distinct > b.distinct && share_fell);
                    (
                        fixed,
                        format!(
                            "effective CPUs {} -> {distinct} ({}), hottest share {} -> {}{}",
                            b.distinct,
                            g.group.effective_cpus,
                            fmt_share(b.rate_share),
                            fmt_share(share_now),
                            if g.evidence.hottest_is_one_irq() {
                                " (one IRQ's load)"
                            } else {
                                ""
                            }
                        ),
                    )
                }
            };
            let name = now
                .map(|g| g.group.name.clone())
                .unwrap_or_else(|| b.key.clone());
            if ok {
                if let Some(e) = self.episodes.get_mut(&b.key) {
                    e.stage = Stage::Resolved;
                }
            } else {
                self.fail_stage(&b.key, v.kind);
                if let Some(e) = self.episodes.get_mut(&b.key) {
                    e.failed = None;
                }
            }
            out.push(self.entry(
                timestamp,
                DecisionAction::Verify,
                vec![name],
                &format!("checking the effect of {}", v.kind.as_str()),
                evidence,
                if ok {
                    DecisionResult::Verified
                } else {
                    DecisionResult::NotVerified
                },
            ));
        }
        out
    }

    /// What the group wants next at `stage`; `failed`: what its last step said when it
    /// failed outright, which an escalation names.
    fn next_step(
        &self,
        stage: Stage,
        failed: Option<&str>,
        v: &GroupVerdict,
        irqb: &IrqbalanceState,
    ) -> Want {
        let native_ok = self.cfg.native.enabled && (v.hurting || !self.cfg.native.require_hurting);
        let native_or = |why: String| {
            if native_ok {
                Want::Native
            } else if self.cfg.native.enabled {
                // Native rebalance waits for the collapse to hurt; nothing to escalate yet.
                Want::Nothing
            } else {
                Want::Escalate(why)
            }
        };
        match stage {
            Stage::Resolved | Stage::Escalated => Want::Nothing,
            Stage::NativeFailed => Want::Escalate(match failed {
                Some(detail) => format!("native rebalance failed: {detail}"),
                None => "native rebalance did not spread the IRQs".into(),
            }),
            Stage::IrqbalanceFailed => native_or(match failed {
                Some(detail) => format!(
                    "asking irqbalance to re-place the IRQs failed ({detail}) and native \
                     rebalance is disabled"
                ),
                None => {
                    "irqbalance did not spread the IRQs and native rebalance is disabled".into()
                }
            }),
            Stage::Fresh => match irqb {
                IrqbalanceState::Running { .. } if self.cfg.irqbalance.enabled => Want::Irqbalance,
                other => native_or(format!(
                    "irqbalance cannot fix it ({}) and native rebalance is disabled",
                    describe(other)
                )),
            },
        }
    }

    fn escalate(&mut self, timestamp: f64, v: &GroupVerdict, reason: String) -> Decision {
        if let Some(e) = self.episodes.get_mut(&v.group.key) {
            e.stage = Stage::Escalated;
        }
        self.entry(
            timestamp,
            DecisionAction::Escalate,
            vec![v.group.name.clone()],
            &reason,
            evidence(v),
            DecisionResult::Escalated,
        )
    }

    fn entry(
        &self,
        timestamp: f64,
        action: DecisionAction,
        groups: Vec<String>,
        reason: &str,
        evidence: String,
        result: DecisionResult,
    ) -> Decision {
        Decision {
            timestamp,
            action,
            groups,
            mode: self.cfg.mode,
            reason: reason.to_string(),
            evidence,
            result,
        }
    }

    /// Findings the remediator adds: escalated groups, and a buggy irqbalance.
    pub fn findings(&self, verdicts: &[GroupVerdict], irqb: &IrqbalanceState) -> Vec<Finding> {
        let mut out = Vec::new();
        for (key, e) in &self.episodes {
            if e.stage == Stage::Escalated {
                let name = verdicts
                    .iter()
                    .find(|v| v.group.key == *key)
                    .map(|v| v.group.name.clone())
                    .unwrap_or_else(|| key.clone());
                out.push(Finding {
                    kind: nodemedic_detect::FindingKind::RemediationEscalated,
                    severity: Severity::Critical,
                    subject: name.clone(),
                    message: format!(
                        "nodemedic could not fix the IRQ collapse of {name} and will not retry until it clears; \
                         spread the IRQs by hand (/proc/irq/N/smp_affinity) or restart irqbalance. See /status for the audit trail."
                    ),
                });
            }
        }
        if let Some(version) = irqb.version().filter(|v| has_rebalance_bug(v)) {
            if verdicts.iter().any(|v| v.collapsed) {
                out.push(Finding {
                    kind: nodemedic_detect::FindingKind::IrqbalanceRebalanceBug,
                    severity: Severity::Warning,
                    subject: "irqbalance".into(),
                    message: format!(
                        "irqbalance {version} has the known bug that its load rebalancing never runs (1.7.0 and 1.8.0; fixed in 1.9.0); \
                         IRQs will collapse again after the next CPU saturation. Upgrade irqbalance."
                    ),
                });
            }
        }
        out
    }

    /// Whether the group's episode was escalated (for Kubernetes reporting).
    pub fn escalated(&self, key: &str) -> bool {
        self.episodes
            .get(key)
            .is_some_and(|e| e.stage == Stage::Escalated)
    }
}

enum Want {
    Irqbalance,
    Native,
    Escalate(String),
    Nothing,
}

/// The reason an action's audit entry gives.
fn action_reason(kind: ActionKind, irqbalance: &IrqbalanceState) -> String {
    match kind {
        ActionKind::IrqbalanceRestart => format!(
            "IRQs collapsed; asking irqbalance ({}) to re-place them",
            irqbalance.version().unwrap_or("version unknown")
        ),
        ActionKind::NativeRebalance => format!(
            "IRQs collapsed and irqbalance cannot fix it ({}); spreading them over the eligible CPUs",
            describe(irqbalance)
        ),
    }
}

fn describe(irqb: &IrqbalanceState) -> String {
    match irqb {
        IrqbalanceState::Running { .. } => "irqbalance is running".into(),
        IrqbalanceState::Stopped { detail, .. } => format!("irqbalance is stopped: {detail}"),
        IrqbalanceState::NotInstalled => "irqbalance is not installed".into(),
        IrqbalanceState::Unknown { detail, .. } => format!("irqbalance state unknown: {detail}"),
    }
}

fn evidence(v: &GroupVerdict) -> String {
    let e = &v.evidence;
    format!(
        "{}: {} IRQs on CPUs {} of {} eligible, hottest CPU {} share {} ({}), hurting={}",
        v.group.name,
        v.group.irqs.len(),
        v.group.effective_cpus,
        v.group.eligible_cpus.len(),
        e.hottest_cpu
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        fmt_share(e.hottest_share),
        e.share_basis.map_or("-", |b| b.as_str()),
        v.hurting
    )
}

fn fmt_share(s: Option<f64>) -> String {
    s.map(|s| format!("{:.0}%", s * 100.0))
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_gives_irqbalance_version_or_why_irqbalance_cannot_help() {
        let running = |version: Option<&str>| IrqbalanceState::Running {
            version: version.map(str::to_string),
        };
        assert_eq!(
            action_reason(ActionKind::IrqbalanceRestart, &running(Some("1.9.2"))),
            "IRQs collapsed; asking irqbalance (1.9.2) to re-place them"
        );
        assert_eq!(
            action_reason(ActionKind::IrqbalanceRestart, &running(None)),
            "IRQs collapsed; asking irqbalance (version unknown) to re-place them"
        );
        let stopped = IrqbalanceState::Stopped {
            detail: "masked".into(),
            version: None,
        };
        assert_eq!(
            action_reason(ActionKind::NativeRebalance, &stopped),
            "IRQs collapsed and irqbalance cannot fix it (irqbalance is stopped: masked); \
             spreading them over the eligible CPUs"
        );
    }

    #[test]
    fn the_cap_counts_actions_within_the_hour_and_the_day() {
        let mut policy = Policy::new(RemediationConfig {
            max_actions_per_hour: 2,
            max_actions_per_day: 3,
            ..Default::default()
        });
        let hours = |h: u64| Duration::from_secs(h * 3600);
        policy.record_action(hours(0));
        assert_eq!(policy.cap_reached(hours(0)), None);
        policy.record_action(hours(0));
        assert_eq!(
            policy.cap_reached(hours(0)).as_deref(),
            Some("action cap reached (2/2 this hour, 2/3 today)")
        );
        assert_eq!(policy.cap_reached(hours(1)), None);
        policy.record_action(hours(1));
        assert_eq!(
            policy.cap_reached(hours(2)).as_deref(),
            Some("action cap reached (0/2 this hour, 3/3 today)")
        );
        assert_eq!(policy.cap_reached(hours(24)), None);
    }
}
