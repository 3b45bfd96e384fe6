//! One sampling pipeline, shared by `run` and `check`: collectors → snapshot → detector →
//! findings.

use std::time::{Duration, Instant};

use nodemedic_collect::{monotonic_now, CollectorSet, CollectorState, CollectorStatus, Paths};
use nodemedic_detect::collapse::findings as collapse_findings;
use nodemedic_detect::{
    CollapseConfig, CollapseDetector, Finding, GroupVerdict, HurtingConfig, Severity,
};
use nodemedic_kernel::Snapshot;

use crate::config::Config;

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
    pub fn new(config: &Config) -> Self {
        Self::with_detector(
            config,
            config.detector.collapse.clone(),
            config.detector.hurting.clone(),
        )
    }

    pub fn with_detector(
        config: &Config,
        collapse: CollapseConfig,
        hurting: HurtingConfig,
    ) -> Self {
        let all = CollectorSet::all();
        let disabled = all
            .names()
            .into_iter()
            .filter(|n| !config.collectors.enabled(n))
            .map(|n| CollectorStatus::disabled(n, "disabled in configuration"))
            .collect();
        Self {
            collectors: all.filtered(|n| config.collectors.enabled(n)),
            disabled,
            paths: config.resolved_paths(),
            detector: CollapseDetector::new(collapse, hurting),
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
