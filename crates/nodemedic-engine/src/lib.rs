//! One sampling pipeline, shared by the daemon and `check`: collectors → snapshot →
//! detectors → findings. It does no output and takes no action; the daemon exports and
//! remediates from its [`Sample`]s, `check` prints them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nodemedic_collect::{
    monotonic_now, Collector, CollectorSet, CollectorState, CollectorStatus, Paths,
    DEFAULT_RESCAN_INTERVAL,
};
use nodemedic_detect::collapse::findings as collapse_findings;
use nodemedic_detect::{
    CollapseConfig, CollapseDetector, Finding, GroupVerdict, HurtingConfig, Severity,
};
use nodemedic_kernel::Snapshot;

/// What the pipeline needs to know, independent of how the binary's configuration is shaped.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub paths: Paths,
    /// Collectors switched off by configuration; they are reported as disabled.
    pub disabled_collectors: BTreeSet<String>,
    /// How often rarely-changing sources (topology, PCI devices) are re-read.
    pub rescan_interval: Duration,
    pub collapse: CollapseConfig,
    pub hurting: HurtingConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            paths: Paths::default(),
            disabled_collectors: BTreeSet::new(),
            rescan_interval: DEFAULT_RESCAN_INTERVAL,
            collapse: CollapseConfig::default(),
            hurting: HurtingConfig::default(),
        }
    }
}

pub struct Engine {
    collectors: CollectorSet,
    disabled: Vec<CollectorStatus>,
    paths: Paths,
    detector: CollapseDetector,
    samples: u64,
}

/// Everything one sample produced.
#[derive(Debug, Clone)]
pub struct Sample {
    pub snapshot: Snapshot,
    pub collectors: Vec<CollectorStatus>,
    pub verdicts: Vec<GroupVerdict>,
    pub findings: Vec<Finding>,
    pub duration: Duration,
    pub samples_total: u64,
}

impl Engine {
    /// An engine over every collector of `nodemedic-collect`.
    pub fn new(config: EngineConfig) -> Self {
        Self::with_collectors(config, CollectorSet::all())
    }

    /// An engine over `nodemedic-collect`'s collectors plus `extra` (sources that live in
    /// other crates), run after them.
    pub fn with_extra(config: EngineConfig, extra: Vec<Box<dyn Collector>>) -> Self {
        let set = extra
            .into_iter()
            .fold(CollectorSet::all(), |set, c| set.with(c));
        Self::with_collectors(config, set)
    }

    fn with_collectors(config: EngineConfig, all: CollectorSet) -> Self {
        let disabled = all
            .names()
            .into_iter()
            .filter(|n| config.disabled_collectors.contains(*n))
            .map(|n| CollectorStatus::disabled(n, "disabled in configuration"))
            .collect();
        let off = config.disabled_collectors;
        Self {
            collectors: all
                .filtered(|n| !off.contains(n))
                .with_rescan_interval(config.rescan_interval),
            disabled,
            paths: config.paths,
            detector: CollapseDetector::new(config.collapse, config.hurting),
            samples: 0,
        }
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    pub fn sample(&mut self) -> Sample {
        let start = Instant::now();
        let (snapshot, runs) = self.collectors.sample(&self.paths, monotonic_now());
        let mut collectors: Vec<CollectorStatus> =
            runs.iter().map(CollectorStatus::from_run).collect();
        for run in &runs {
            if let Err(e) = &run.outcome {
                tracing::warn!(collector = run.name, error = %e, "collector failed");
            }
        }
        collectors.extend(self.disabled.iter().cloned());
        let verdicts = self.detector.observe(&snapshot);
        let mut findings = collapse_findings(&verdicts);
        for c in &collectors {
            if let CollectorState::Failed { reason } = &c.state {
                findings.push(Finding {
                    kind: "collector_failed".into(),
                    severity: Severity::Warning,
                    subject: c.name.clone(),
                    message: format!("collector {} failed: {reason}", c.name),
                });
            }
        }
        self.samples += 1;
        Sample {
            snapshot,
            collectors,
            verdicts,
            findings,
            duration: start.elapsed(),
            samples_total: self.samples,
        }
    }
}
