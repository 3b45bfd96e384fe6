//! One sampling pipeline, shared by the daemon and `check`: collectors → snapshot →
//! detectors → findings. It does no output and takes no action; the daemon exports and
//! remediates from its [`Sample`]s, `check` prints them.

mod registry;

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::sources::softirqs::Softirqs;
use nodemedic_collect::sources::tuning::Tuning;
use nodemedic_collect::sources::CgroupSelection;
use nodemedic_collect::widen::Widener;
use nodemedic_collect::CommitTimerConfig;
use nodemedic_collect::{
    monotonic_now, panic_message, CollectorName, CollectorRun, CollectorSet, CollectorState,
    CollectorStatus, Paths, Reader, ReaderConfig, DEFAULT_RESCAN_INTERVAL,
};
use nodemedic_detect::collapse::findings as collapse_findings;
use nodemedic_detect::commit_latency::findings as commit_findings;
use nodemedic_detect::pressure::findings as pressure_findings;
use nodemedic_detect::tuning::findings as tuning_findings;
use nodemedic_detect::wakeup_storm::finding as storm_finding;
use nodemedic_detect::{
    CollapseConfig, CollapseDetector, Finding, HurtingConfig, Severity, WakeupStormConfig,
    WakeupStormDetector,
};
use nodemedic_detect::{
    CommitLatencyConfig, CommitLatencyDetector, PressureConfig, PressureDetector, TuningConfig,
    TuningDetector,
};
use nodemedic_sample::host::HostAccess;
use nodemedic_sample::Sample;
pub use registry::{Build, Registry};

/// What the pipeline needs to know, independent of how the binary's configuration is shaped.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub paths: Paths,
    /// Collectors switched off by configuration; they are reported as disabled.
    pub disabled_collectors: BTreeSet<CollectorName>,
    /// How often rarely-changing sources (topology, PCI devices) are re-read.
    pub rescan_interval: Duration,
    /// Every IRQ's affinity files are re-read within this even when its counts say it did not
    /// move (zero: every sample; see `IrqAffinityCollector`).
    pub affinity_refresh: Duration,
    /// The read layer's backend and fd bound.
    pub reader: ReaderConfig,
    pub collapse: CollapseConfig,
    pub hurting: HurtingConfig,
    /// The disk commit latency timer (off when `None`) and its detector.
    pub commit_timer: Option<CommitTimerConfig>,
    pub commit_latency: CommitLatencyConfig,
    pub wakeup_storm: WakeupStormConfig,
    /// Which cgroups the cgroups collector watches.
    pub cgroups: CgroupSelection,
    /// How often the cgroups are walked and read; zero reads them on every sample (the
    /// daemon's configuration defaults to 15 s, see `CgroupsCollector`).
    pub cgroups_interval: Duration,
    pub pressure: PressureConfig,
    /// The tuning collector and audit (docs/tuning.md).
    pub tuning: TuningSetup,
    /// What the process found at start about its access to the host
    /// (`nodemedic_collect::host_access`): its LSM labels, which name a refused read, and the
    /// host mounts it could write, a finding in every sample.
    pub host: Arc<HostAccess>,
}

pub use nodemedic_collect::registry::NicLimitsFrom;

/// The tuning collector's and audit's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TuningSetup {
    /// The settings (cpufreq, IOMMU groups, queues, sysctls, channels and rings) are re-read
    /// at the first rescan after this; the NIC drop counters every sample.
    pub settings_interval: Duration,
    pub nic_limits: NicLimitsFrom,
    pub audit: TuningConfig,
}

/// A 256-CPU host has about 2,000 setting files: read at every 60 s rescan they would add
/// 15% to the average sample, every 5 minutes 3.7% (docs/tuning.md, "Cost").
pub const DEFAULT_TUNING_SETTINGS_INTERVAL: Duration = Duration::from_secs(300);

impl Default for TuningSetup {
    fn default() -> Self {
        Self {
            settings_interval: DEFAULT_TUNING_SETTINGS_INTERVAL,
            nic_limits: NicLimitsFrom::default(),
            audit: TuningConfig::default(),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            paths: Paths::default(),
            disabled_collectors: BTreeSet::new(),
            rescan_interval: DEFAULT_RESCAN_INTERVAL,
            affinity_refresh: nodemedic_collect::sources::DEFAULT_AFFINITY_REFRESH,
            reader: ReaderConfig::default(),
            collapse: CollapseConfig::default(),
            hurting: HurtingConfig::default(),
            commit_timer: None,
            commit_latency: CommitLatencyConfig::default(),
            wakeup_storm: WakeupStormConfig::default(),
            cgroups: CgroupSelection::default(),
            cgroups_interval: Duration::ZERO,
            pressure: PressureConfig::default(),
            tuning: TuningSetup::default(),
            host: Arc::default(),
        }
    }
}

impl EngineConfig {
    /// What the collectors built from the configuration read of it
    /// (`nodemedic_collect::registry`).
    pub fn settings(&self) -> nodemedic_collect::registry::Settings<'_> {
        nodemedic_collect::registry::Settings {
            paths: &self.paths,
            affinity_refresh: self.affinity_refresh,
            cgroups: &self.cgroups,
            cgroups_interval: self.cgroups_interval,
            commit_timer: self.commit_timer.as_ref(),
            tuning_settings_interval: self.tuning.settings_interval,
            nic_limits: self.tuning.nic_limits,
        }
    }
}

pub struct Engine {
    collectors: CollectorSet,
    disabled: Vec<CollectorStatus>,
    /// The collectors whose failure is an `info` finding (see [`Registry`]).
    optional: Vec<CollectorName>,
    paths: Paths,
    detector: CollapseDetector,
    commit_detector: CommitLatencyDetector,
    storm: WakeupStormDetector,
    pressure: PressureDetector,
    tuning: TuningDetector,
    samples: u64,
    /// The kernel's 32-bit counts, accumulated into 64-bit ones (see `counter`).
    widener: Widener,
    /// Each collector's failure reason in the previous sample, so that a collector that keeps
    /// failing is logged when its state changes, not every sample.
    failing: HashMap<CollectorName, String>,
    /// Lists of a past sample given back by its holder ([`Engine::recycle`]), emptied, for the
    /// next sample to fill: its collectors' states and its findings.
    spare: (Vec<CollectorStatus>, Vec<Finding>),
    /// What the process found at start about its access to the host, in every sample.
    host: Arc<HostAccess>,
    /// The finding of the host mounts it could write, when there are any.
    host_finding: Option<Finding>,
}

impl Engine {
    /// An engine over the collectors of the [`Registry`] that need no other crate.
    pub fn new(config: EngineConfig) -> Self {
        Self::with_registry(config, Registry::new())
    }

    /// An engine over `registry`'s collectors that `config` does not switch off.
    pub fn with_registry(config: EngineConfig, registry: Registry<'_>) -> Self {
        let built = registry.build(&config);
        let host_finding = config.host.writable_message().map(|message| Finding {
            kind: nodemedic_detect::FindingKind::HostMountWritable,
            // A warning, not a failed collector: every source still reads what it should; the
            // daemon's container can change the host it only meant to watch, which its
            // operator must fix in the deployment.
            severity: Severity::Warning,
            subject: "host mounts".into(),
            message,
        });
        if let Some(f) = &host_finding {
            tracing::warn!("{}", f.message);
        }
        Self {
            commit_detector: CommitLatencyDetector::new(config.commit_latency),
            collectors: CollectorSet::new(built.collectors)
                .with_rescan_interval(config.rescan_interval)
                .with_reader(Reader::with_config(config.reader).with_lsm(config.host.lsm.clone())),
            disabled: built
                .disabled
                .into_iter()
                .map(|n| CollectorStatus::disabled(n, "disabled in configuration"))
                .collect(),
            optional: built.optional,
            paths: config.paths,
            detector: CollapseDetector::new(config.collapse, config.hurting),
            storm: WakeupStormDetector::new(config.wakeup_storm),
            pressure: PressureDetector::new(config.pressure),
            tuning: TuningDetector::new(config.tuning.audit),
            samples: 0,
            widener: Widener::default(),
            failing: HashMap::new(),
            spare: Default::default(),
            host: config.host,
            host_finding,
        }
    }

    /// Gives back a sample that nothing else holds any more (the daemon's last one, once it
    /// is replaced): the next sample fills its lists (the interrupts table, verdicts,
    /// collector states, findings) instead of allocating new ones. Optional; a sample not
    /// given back is simply dropped.
    pub fn recycle(&mut self, old: Sample) {
        let Sample {
            snapshot,
            mut collectors,
            verdicts,
            mut findings,
            ..
        } = old;
        self.detector.recycle(verdicts);
        self.collectors.recycle(snapshot);
        collectors.clear();
        findings.clear();
        self.spare = (collectors, findings);
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// What the process found at start about its access to the host.
    pub fn host(&self) -> &Arc<HostAccess> {
        &self.host
    }

    fn log_state_changes(&mut self, runs: &[CollectorRun]) {
        for run in runs {
            match &run.outcome {
                Err(e) => {
                    let reason = e.to_string();
                    if self.failing.get(&run.name) != Some(&reason) {
                        tracing::warn!(collector = run.name.as_str(), error = %reason, "collector failed");
                        self.failing.insert(run.name, reason);
                    }
                }
                Ok(_) => {
                    if self.failing.remove(&run.name).is_some() {
                        tracing::info!(collector = run.name.as_str(), "collector recovered");
                    }
                }
            }
        }
    }

    pub fn sample(&mut self) -> Sample {
        self.sample_at(monotonic_now())
    }

    /// One sample at monotonic time `at` (benchmarks and tests step time themselves).
    pub fn sample_at(&mut self, at: Duration) -> Sample {
        let start = Instant::now();
        let (mut snapshot, runs) = self.collectors.sample(&self.paths, at);
        // Before anything reads the counts: detectors, check and the exporter all see the
        // accumulated 64-bit values, so a wrap is neither a lost rate nor a counter reset.
        // Not shared yet: get_mut does not copy.
        if let Some(ints) = snapshot.get_mut::<Interrupts>() {
            self.widener.widen_interrupts(ints);
        }
        if let Some(s) = snapshot.get_mut::<Softirqs>() {
            self.widener.widen_softirqs(s);
        }
        let (mut collectors, mut findings) = std::mem::take(&mut self.spare);
        collectors.extend(runs.iter().map(CollectorRun::status));
        self.log_state_changes(&runs);
        collectors.extend(self.disabled.iter().cloned());
        let mut failed = Vec::new();
        let verdicts = guarded("irq_collapse", &mut failed, || {
            self.detector.observe(&snapshot)
        });
        findings.extend(collapse_findings(&verdicts));
        let commit = guarded("disk_commit", &mut failed, || {
            self.commit_detector.observe(&snapshot)
        });
        if let Some(v) = commit.as_ref().filter(|v| v.changed) {
            tracing::warn!(directory = %v.directory, slow = v.slow, p99_seconds = ?v.p99_seconds, commits = v.commits, "disk commit verdict changed");
        }
        findings.extend(commit_findings(
            commit.as_ref(),
            self.commit_detector.config(),
        ));
        let storm = guarded("perf_wakeup_storm", &mut failed, || {
            self.storm.observe(&snapshot)
        });
        if let Some(v) = storm.as_ref().filter(|v| v.changed) {
            tracing::warn!(
                storming = v.storming,
                wakeups_per_second = v.wakeups_per_second,
                wakeup_ratio = v.wakeup_ratio,
                top_owner = ?v.top_owner,
                "perf-event wakeup storm verdict changed"
            );
        }
        findings.extend(storm.as_ref().and_then(storm_finding));
        let pressure = guarded("pressure", &mut failed, || self.pressure.observe(&snapshot));
        if let Some(v) = &pressure {
            for c in &v.changes {
                tracing::warn!(subject = %c.scope, verdict = c.verdict.as_str(), active = c.active, "pressure verdict changed");
            }
            findings.extend(pressure_findings(v));
        }
        let tuning = match snapshot.get::<Tuning>() {
            Some(_) => guarded("tuning", &mut failed, || {
                Some(self.tuning.observe(&snapshot, &verdicts))
            }),
            None => None,
        };
        findings.extend(tuning.as_ref().map(tuning_findings).unwrap_or_default());
        findings.extend(failed);
        findings.extend(self.host_finding.iter().cloned());
        for c in &collectors {
            if let CollectorState::Failed { reason } = &c.state {
                findings.push(Finding {
                    kind: nodemedic_detect::FindingKind::CollectorFailed,
                    severity: if self.optional.contains(&c.name) {
                        Severity::Info
                    } else {
                        Severity::Warning
                    },
                    subject: c.name.to_string(),
                    message: format!("collector {} failed: {reason}", c.name),
                });
            }
        }
        self.samples += 1;
        Sample {
            snapshot,
            collectors,
            verdicts,
            commit,
            findings,
            storm,
            pressure,
            tuning,
            duration: start.elapsed(),
            samples_total: self.samples,
            reader: self.collectors.reader_status(),
            host: self.host.clone(),
        }
    }
}

/// Runs one detector. A detector bug must cost one sample's verdicts, not the daemon: the
/// panic is logged and becomes a `detector_failed` finding, the state machine is left as the
/// panic left it, and the next sample goes on from there.
fn guarded<T: Default>(name: &str, failed: &mut Vec<Finding>, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(panic) => {
            let msg = panic_message(panic.as_ref());
            tracing::error!(detector = name, panic = %msg, "detector panicked (bug)");
            failed.push(Finding {
                kind: nodemedic_detect::FindingKind::DetectorFailed,
                severity: Severity::Warning,
                subject: name.to_string(),
                message: format!("the {name} detector panicked (a bug): {msg}"),
            });
            T::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use nodemedic_collect::{CollectError, Collected, Collector, Ctx};
    use nodemedic_sample::Snapshot;

    use super::*;

    /// A collector with a bug, in the place of the pressure collector.
    struct Panics;

    impl Collector for Panics {
        fn name(&self) -> CollectorName {
            nodemedic_collect::sources::pressure::NAME
        }
        fn collect(&self, _: &Ctx<'_>, _: &mut Snapshot) -> Result<Collected, CollectError> {
            panic!("index out of bounds")
        }
    }

    #[test]
    fn a_panicking_detector_costs_its_verdicts_and_says_so() {
        let mut failed = Vec::new();
        let v: Vec<u32> = guarded("irq_collapse", &mut failed, || {
            panic!("index out of bounds")
        });
        assert!(v.is_empty());
        assert_eq!(failed.len(), 1);
        assert_eq!(
            failed[0].kind,
            nodemedic_detect::FindingKind::DetectorFailed
        );
        assert_eq!(failed[0].subject, "irq_collapse");
        assert!(
            failed[0].message.contains("index out of bounds"),
            "{:?}",
            failed[0]
        );
        assert_eq!(guarded("pressure", &mut failed, || Some(3)), Some(3));
        assert_eq!(failed.len(), 1, "a detector that works adds nothing");
    }

    /// Host mounts the container can write are one warning finding in every sample, naming
    /// them; nothing else of the sample changes, and every sample carries what was found.
    #[test]
    fn writable_host_mounts_are_a_warning_in_every_sample() {
        let paths = Paths::under(nodemedic_testkit::fixture("8cpu-collapsed"));
        let host = HostAccess {
            read_only: vec!["/host".into()],
            writable_mounts: vec![nodemedic_kernel::mounts::WritableMount {
                mount_point: "/host/sys/fs/cgroup/cpu".into(),
                fs_type: "cgroup".into(),
            }],
            ..Default::default()
        };
        let mut plain = Engine::new(EngineConfig {
            paths: paths.clone(),
            ..Default::default()
        });
        let mut warned = Engine::new(EngineConfig {
            paths,
            host: Arc::new(host.clone()),
            ..Default::default()
        });
        for _ in 0..2 {
            let (a, b) = (plain.sample(), warned.sample());
            let extra: Vec<&Finding> = b
                .findings
                .iter()
                .filter(|f| !a.findings.contains(f))
                .collect();
            assert_eq!(extra.len(), 1, "{:?}", b.findings);
            assert_eq!(
                extra[0].kind,
                nodemedic_detect::FindingKind::HostMountWritable
            );
            assert_eq!(extra[0].severity, Severity::Warning);
            assert!(
                extra[0]
                    .message
                    .starts_with("host mount /host/sys/fs/cgroup/cpu (cgroup) is writable"),
                "{}",
                extra[0].message
            );
            assert_eq!(a.findings.len() + 1, b.findings.len());
            assert_eq!(*b.host, host);
            let states = |s: &Sample| -> Vec<(String, bool, bool)> {
                s.verdicts
                    .iter()
                    .map(|v| (v.group.name.clone(), v.collapsed, v.hurting))
                    .collect()
            };
            assert_eq!(states(&a), states(&b));
        }
    }

    #[test]
    fn a_panicking_collector_costs_only_itself_sample_after_sample() {
        let config = EngineConfig {
            paths: Paths::under(nodemedic_testkit::fixture("8cpu-collapsed")),
            collapse: CollapseConfig {
                raise_after: 2,
                ..Default::default()
            },
            ..Default::default()
        };
        let registry = Registry::new()
            .build_with(nodemedic_collect::sources::pressure::NAME, |_| {
                Some(Box::new(Panics))
            });
        let mut engine = Engine::with_registry(config, registry);
        for n in 1..=2 {
            let s = engine.sample();
            let bad = s
                .collectors
                .iter()
                .find(|c| c.name == nodemedic_collect::sources::pressure::NAME)
                .unwrap();
            assert!(
                matches!(&bad.state, CollectorState::Failed { reason } if reason.contains("index out of bounds")),
                "{bad:?}"
            );
            assert!(s
                .collectors
                .iter()
                .filter(|c| c.name != nodemedic_collect::sources::pressure::NAME)
                .all(|c| c.is_success()));
            assert!(s
                .findings
                .iter()
                .any(|f| f.kind == nodemedic_detect::FindingKind::CollectorFailed
                    && f.subject == "pressure"));
            let nic = s
                .verdicts
                .iter()
                .find(|v| v.group.name == "virtio2")
                .unwrap();
            assert_eq!(nic.collapsed, n == 2, "hysteresis still counts samples");
            assert_eq!(s.samples_total, n);
        }
        assert!(
            engine
                .failing
                .contains_key(&nodemedic_collect::sources::pressure::NAME),
            "logged once, remembered"
        );
    }
}
