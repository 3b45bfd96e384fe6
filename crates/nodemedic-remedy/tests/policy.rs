//! The remediation policy driven by the real detector over real fixture trees, on a virtual
//! clock: flapping input, sustained collapse, cooldown, caps, verification and escalation.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_detect::{CollapseConfig, CollapseDetector, GroupVerdict, HurtingConfig};
use nodemedic_remedy::config::{ConfigError, NativeStep};
use nodemedic_remedy::{
    ActionKind, Decision, IrqbalanceState, Mode, Outcome, Policy, RemediationConfig,
};
use nodemedic_sample::{CollectorName, Snapshot};
use nodemedic_testkit::fixture_snapshot;

/// What the collapse detector reads from a fixture tree: its IRQ side's collectors, asserted
/// active.
const IRQ_SIDE: &[CollectorName] = &[
    nodemedic_collect::sources::topology::NAME,
    nodemedic_collect::sources::interrupts::NAME,
    nodemedic_collect::sources::irq_affinity::NAME,
    nodemedic_collect::sources::pci::NAME,
];

const INTERVAL: u64 = 5;

struct Sim {
    detector: CollapseDetector,
    policy: Policy,
    collapsed: Snapshot,
    balanced: Snapshot,
    t: u64,
    log: Vec<Decision>,
    steps: Vec<(u64, ActionKind)>,
}

impl Sim {
    fn new(cfg: RemediationConfig) -> Self {
        Self {
            detector: CollapseDetector::new(CollapseConfig::default(), HurtingConfig::default()),
            policy: Policy::new(cfg),
            collapsed: fixture_snapshot("8cpu-collapsed", Duration::ZERO).needing(IRQ_SIDE),
            balanced: fixture_snapshot("8cpu-balanced", Duration::ZERO).needing(IRQ_SIDE),
            t: 0,
            log: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// One sample; `act` decides what the actuator reports for a step.
    fn tick(
        &mut self,
        collapsed: bool,
        irqb: &IrqbalanceState,
        act: &dyn Fn(ActionKind) -> Outcome,
    ) -> Vec<GroupVerdict> {
        self.t += INTERVAL;
        let mut s = if collapsed {
            self.collapsed.clone()
        } else {
            self.balanced.clone()
        };
        s.at = Duration::from_secs(self.t);
        s.timestamp = self.t as f64;
        let verdicts = self.detector.observe(&s);
        let now = Duration::from_secs(self.t);
        let (log, step) = self
            .policy
            .on_sample(now, self.t as f64, &verdicts, irqb, None);
        self.log.extend(log);
        if let Some(step) = step {
            self.steps.push((self.t, step.kind));
            let d = self
                .policy
                .completed(step.id, now, self.t as f64, act(step.kind));
            self.log.push(d);
        }
        verdicts
    }

    fn results(&self, action: &str) -> Vec<&str> {
        self.log
            .iter()
            .filter(|d| d.action.as_str() == action)
            .map(|d| d.result.as_str())
            .collect()
    }

    /// The reasons of the decisions about `action`, in order.
    fn reasons(&self, action: &str) -> Vec<&str> {
        self.log
            .iter()
            .filter(|d| d.action.as_str() == action)
            .map(|d| d.reason.as_str())
            .collect()
    }
}

fn running() -> IrqbalanceState {
    IrqbalanceState::Running {
        version: Some("1.8.0-1".into()),
    }
}

fn done(_: ActionKind) -> Outcome {
    Outcome::Done("ok".into())
}

#[test]
fn flapping_collapse_never_acts() {
    let mut sim = Sim::new(RemediationConfig::default());
    for i in 0..2000 {
        sim.tick(i % 2 == 0, &running(), &done);
    }
    assert!(sim.steps.is_empty());
    assert!(sim.log.is_empty(), "{:?}", sim.log);
    // Two on, one off: never three in a row, so still nothing.
    for i in 0..2000 {
        sim.tick(i % 3 != 2, &running(), &done);
    }
    assert!(sim.steps.is_empty());
}

#[test]
fn sustained_collapse_acts_once_then_escalates_once() {
    let cfg = RemediationConfig::default();
    let mut sim = Sim::new(cfg.clone());
    // irqbalance "restarts" fine but the IRQs stay collapsed, for two hours.
    for _ in 0..(2 * 3600 / INTERVAL) {
        sim.tick(true, &running(), &done);
    }
    assert_eq!(sim.steps.len(), 1, "{:?}", sim.steps);
    assert_eq!(
        sim.steps[0],
        (15, ActionKind::IrqbalanceRestart),
        "acts on the 3rd collapsed sample"
    );
    assert_eq!(sim.results("irqbalance_restart"), vec!["pending", "done"]);
    assert_eq!(sim.results("verify"), vec!["not_verified"]);
    assert_eq!(sim.results("escalate"), vec!["escalated"]);
    let verify = sim
        .log
        .iter()
        .find(|d| d.action.as_str() == "verify")
        .unwrap();
    assert!(verify.timestamp >= 15.0 + cfg.verify_after.as_secs_f64());
    let verdicts = sim.tick(true, &running(), &done);
    let f = sim.policy.findings(&verdicts, &running());
    let kinds: Vec<&str> = f.iter().map(|f| f.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec!["remediation_escalated", "irqbalance_rebalance_bug"]
    );
}

/// A step that failed outright (a refusal by the bus or a security module) is named by the
/// escalation, which went on saying "did not spread the IRQs" as if the step had run; a step
/// that ran and did not help still says so. Results and counts are as before.
#[test]
fn an_escalation_names_the_failure_of_the_step() {
    let denied = "D-Bus: TryRestartUnit(irqbalance.service) denied by AppArmor (profile \
                  cri-containerd.apparmor.d, enforce mode): org.freedesktop.DBus.Error.AccessDenied: \
                  An AppArmor policy prevents this sender from sending this message to this \
                  recipient";
    let refused = |_: ActionKind| {
        Outcome::Failed(nodemedic_remedy::StepFailure {
            class: nodemedic_remedy::FailureClass::Permission,
            detail: denied.into(),
        })
    };
    let mut sim = Sim::new(RemediationConfig::default());
    for _ in 0..(3600 / INTERVAL) {
        sim.tick(true, &running(), &refused);
    }
    assert_eq!(
        sim.results("irqbalance_restart"),
        vec!["pending", "failed_permission"]
    );
    assert_eq!(
        sim.reasons("escalate"),
        vec![format!(
            "asking irqbalance to re-place the IRQs failed ({denied}) and native rebalance is \
             disabled"
        )]
    );
    // Native rebalancing's refused writes, the same.
    let cfg = RemediationConfig {
        native: NativeStep {
            enabled: true,
            require_hurting: false,
        },
        ..Default::default()
    };
    let writes = "wrote smp_affinity ; skipped 24, 25 (writes of /host/proc/irq/N/smp_affinity \
                  denied by SELinux (label system_u:system_r:container_t:s0:c12,c34))";
    let mut sim = Sim::new(cfg);
    for _ in 0..(3600 / INTERVAL) {
        sim.tick(true, &IrqbalanceState::NotInstalled, &|_| {
            Outcome::Failed(nodemedic_remedy::StepFailure {
                class: nodemedic_remedy::FailureClass::Permission,
                detail: writes.into(),
            })
        });
    }
    assert_eq!(
        sim.reasons("escalate").first().copied(),
        Some(format!("native rebalance failed: {writes}").as_str())
    );
    // A step that ran and did not help: as before.
    let mut sim = Sim::new(RemediationConfig::default());
    for _ in 0..(3600 / INTERVAL) {
        sim.tick(true, &running(), &done);
    }
    assert_eq!(
        sim.reasons("escalate").first().copied(),
        Some("irqbalance did not spread the IRQs and native rebalance is disabled")
    );
}

#[test]
fn ladder_goes_to_native_then_escalates() {
    let cfg = RemediationConfig {
        native: NativeStep {
            enabled: true,
            require_hurting: false,
        },
        ..Default::default()
    };
    let mut sim = Sim::new(cfg.clone());
    for _ in 0..(3600 / INTERVAL) {
        sim.tick(true, &running(), &done);
    }
    let kinds: Vec<ActionKind> = sim.steps.iter().map(|s| s.1).collect();
    assert_eq!(
        kinds,
        vec![ActionKind::IrqbalanceRestart, ActionKind::NativeRebalance]
    );
    assert!(
        sim.steps[1].0 - sim.steps[0].0 >= cfg.cooldown.as_secs(),
        "cooldown between actions"
    );
    assert_eq!(sim.results("verify"), vec!["not_verified", "not_verified"]);
    assert_eq!(sim.results("escalate"), vec!["escalated"]);

    // Without irqbalance, native is the first step; a failed write escalates.
    let mut sim = Sim::new(cfg);
    for _ in 0..(3600 / INTERVAL) {
        sim.tick(true, &IrqbalanceState::NotInstalled, &|_| {
            Outcome::Failed(nodemedic_remedy::StepFailure {
                class: nodemedic_remedy::FailureClass::Other,
                detail: "EIO".into(),
            })
        });
    }
    assert_eq!(
        sim.steps.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![ActionKind::NativeRebalance]
    );
    assert_eq!(sim.results("escalate"), vec!["escalated"]);
    // The failure's text is evidence, not the (label) result.
    let failed: Vec<&Decision> = sim
        .log
        .iter()
        .filter(|d| {
            d.action.as_str() == ActionKind::NativeRebalance.as_str()
                && d.result.as_str() != "pending"
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].result.as_str(), "failed");
    assert_eq!(failed[0].evidence, "EIO");
}

/// A failed step's result label comes from its error's kind, never its text: a bounded set.
#[test]
fn failure_results_are_a_bounded_set_of_classes() {
    use std::io::{Error, ErrorKind};

    use nodemedic_remedy::FailureClass;
    let kinds = [
        (ErrorKind::TimedOut, "failed_timeout"),
        (ErrorKind::PermissionDenied, "failed_permission"),
        (ErrorKind::NotFound, "failed_unavailable"),
        (ErrorKind::ConnectionRefused, "failed_unavailable"),
        (ErrorKind::Other, "failed"),
    ];
    for (kind, want) in kinds {
        assert_eq!(
            FailureClass::of_io(&Error::from(kind)).as_str(),
            want,
            "{kind:?}"
        );
    }
    // EIO (a kernel-managed IRQ refusing smp_affinity) is not a permission problem.
    assert_eq!(
        FailureClass::of_io(&Error::from_raw_os_error(5)).as_str(),
        "failed"
    );
}

#[test]
fn repeated_episodes_respect_cooldown_and_caps() {
    let cfg = RemediationConfig {
        cooldown: Duration::from_secs(60),
        verify_after: Duration::from_secs(20),
        max_actions_per_hour: 3,
        max_actions_per_day: 5,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg.clone());
    // Each action "fixes" it: the IRQs spread, stay healthy 60 s, then collapse again. When
    // the cap is hit the group is escalated and stays collapsed until a human (here: the
    // 30-minute healthy phase) fixes it; then episodes start again.
    let mut fixed_at: Option<u64> = None;
    let mut run = |sim: &mut Sim, secs: u64, healthy: bool| {
        let end = sim.t + secs;
        while sim.t < end {
            let collapsed = !healthy && !matches!(fixed_at, Some(t) if sim.t < t + 60);
            let before = sim.steps.len();
            sim.tick(collapsed, &running(), &done);
            if sim.steps.len() > before {
                fixed_at = Some(sim.t);
            }
        }
    };
    run(&mut sim, 3600, false);
    let first_hour: Vec<u64> = sim.steps.iter().map(|s| s.0).collect();
    assert_eq!(first_hour.len(), 3, "hour cap: {first_hour:?}");
    assert_eq!(
        sim.results("escalate"),
        vec!["escalated"],
        "escalated once, not every sample"
    );
    run(&mut sim, 1800, true);
    run(&mut sim, 2 * 3600, false);
    let times: Vec<u64> = sim.steps.iter().map(|s| s.0).collect();
    for w in times.windows(2) {
        assert!(w[1] - w[0] >= cfg.cooldown.as_secs(), "{times:?}");
    }
    for (i, t) in times.iter().enumerate() {
        let in_hour = times[..=i].iter().filter(|x| t - **x < 3600).count();
        assert!(in_hour <= 3, "{times:?}");
    }
    assert_eq!(times.len(), 5, "day cap: {times:?}");
    assert_eq!(sim.results("escalate"), vec!["escalated", "escalated"]);
    assert!(sim.results("verify").iter().all(|r| *r == "verified"));
}

#[test]
fn dry_run_and_off_change_nothing() {
    let cfg = RemediationConfig {
        mode: Mode::DryRun,
        ..Default::default()
    };
    let mut sim = Sim::new(cfg.clone());
    for _ in 0..(3600 / INTERVAL) {
        sim.tick(true, &running(), &|_| panic!("dry-run must not act"));
    }
    assert!(sim.steps.is_empty());
    let dry = sim.results("irqbalance_restart");
    assert_eq!(
        dry.len(),
        3,
        "one decision per cooldown, capped at 3/hour: {dry:?}"
    );
    assert!(dry.iter().all(|r| *r == "dry_run"));

    let mut sim = Sim::new(RemediationConfig {
        mode: Mode::Off,
        ..Default::default()
    });
    for _ in 0..100 {
        sim.tick(true, &running(), &|_| panic!("off must not act"));
    }
    assert!(sim.log.is_empty());
}

#[test]
fn pause_stops_actions_and_is_audited() {
    let mut sim = Sim::new(RemediationConfig::default());
    let mut paused_log = Vec::new();
    for i in 0..100u64 {
        sim.t += INTERVAL;
        let mut s = sim.collapsed.clone();
        s.at = Duration::from_secs(sim.t);
        let v = sim.detector.observe(&s);
        let (log, step) = sim.policy.on_sample(
            Duration::from_secs(sim.t),
            sim.t as f64,
            &v,
            &running(),
            (i < 50).then_some("node annotation nodemedic.io/pause=true"),
        );
        assert!(step.is_none() || i >= 50);
        paused_log.extend(log);
        if let Some(step) = step {
            assert!(i >= 50);
            sim.policy.completed(
                step.id,
                Duration::from_secs(sim.t),
                sim.t as f64,
                Outcome::Done("ok".into()),
            );
            break;
        }
    }
    let pauses: Vec<&str> = paused_log
        .iter()
        .filter(|d| d.action.as_str() == "pause")
        .map(|d| d.result.as_str())
        .collect();
    assert_eq!(pauses, vec!["paused", "resumed"]);
    let paused = paused_log
        .iter()
        .find(|d| d.result.as_str() == "paused")
        .unwrap();
    assert_eq!(
        paused.evidence, "node annotation nodemedic.io/pause=true",
        "a pause says what paused it"
    );
}

#[test]
fn config_validation() {
    assert!(RemediationConfig::default().validate().is_ok());
    let bad = RemediationConfig {
        cooldown: Duration::from_secs(5),
        ..Default::default()
    };
    assert_eq!(bad.validate(), Err(ConfigError::CooldownTooShort));
    let bad = RemediationConfig {
        verify_after: Duration::from_secs(400),
        ..Default::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("verify_after"));
    let bad = RemediationConfig {
        max_actions_per_hour: 0,
        ..Default::default()
    };
    assert!(bad.validate().is_err());
}

/// `snap` with `by` more interrupts on each of `irqs`, on the CPU column `col(header)` picks,
/// `secs` seconds later.
fn grown(
    snap: &Snapshot,
    secs: u64,
    irqs: &[u32],
    by: u64,
    col: &dyn Fn(&[u32]) -> usize,
) -> Snapshot {
    let mut s = snap.clone();
    s.at = Duration::from_secs(secs);
    s.timestamp = secs as f64;
    let mut table = s.get::<Interrupts>().unwrap().clone();
    let c = col(&table.cpus);
    for row in 0..table.irqs.len() {
        let line = &table.irqs[row];
        if irqs.contains(&line.irq) {
            let count = table.counts(line).get(c).unwrap();
            table.set_count(row, c, count + by);
        }
    }
    s.put(table);
    s
}

#[test]
fn a_spread_nic_carrying_one_flow_is_verified() {
    // The guest node's incident: every queue on one CPU, hot; irqbalance restarted spreads
    // them, but the NIC's traffic is one flow (the kubelet's connection to the API): one
    // queue pair takes all of it, irqbalance puts its two IRQs on one CPU, and the hottest
    // CPU's share goes from 83% to 100%. The placement is no longer collapsed: that is what
    // the action could do, and it did it.
    let cfg = RemediationConfig::default();
    let mut detector = CollapseDetector::new(CollapseConfig::default(), HurtingConfig::default());
    let mut policy = Policy::new(cfg.clone());
    let collapsed = fixture_snapshot("8cpu-collapsed", Duration::ZERO).needing(IRQ_SIDE);
    let balanced = fixture_snapshot("8cpu-balanced", Duration::ZERO).needing(IRQ_SIDE);
    let nic = |v: &[GroupVerdict]| {
        v.iter()
            .find(|g| g.group.name == "virtio2")
            .cloned()
            .unwrap()
    };
    let irqs = nic(&detector.observe(&collapsed)).group.irqs.clone();
    let on_cpu = |cpu: u32| move |cpus: &[u32]| cpus.iter().position(|c| *c == cpu).unwrap();
    let mut log = Vec::new();
    let mut t = 0;
    let mut acted = None;
    let mut total = 0;
    while t < 600 {
        t += INTERVAL;
        total += 10_000;
        let now = Duration::from_secs(t);
        let s = if acted.is_none() {
            grown(&collapsed, t, &irqs, total, &on_cpu(4))
        } else {
            grown(&balanced, t, &irqs[..2], total, &on_cpu(0))
        };
        let verdicts = detector.observe(&s);
        let (l, step) = policy.on_sample(now, t as f64, &verdicts, &running(), None);
        log.extend(l);
        if let Some(step) = step {
            acted = Some(t);
            log.push(policy.completed(step.id, now, t as f64, done(step.kind)));
        }
    }
    assert!(acted.is_some(), "{log:?}");
    let verify: Vec<&Decision> = log
        .iter()
        .filter(|d| d.action.as_str() == "verify")
        .collect();
    assert_eq!(verify.len(), 1, "{log:?}");
    assert_eq!(verify[0].result.as_str(), "verified", "{:?}", verify[0]);
    assert!(
        verify[0].evidence.contains("hottest share 100% -> 100%")
            && !verify[0].evidence.contains("one IRQ"),
        "{}",
        verify[0].evidence
    );
}
