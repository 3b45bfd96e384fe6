//! Findings: what an operator should know, from any detector, the collectors or the
//! remediation, in one shape (`/status`, `check`, Kubernetes Events, metrics).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// What a finding is about, as a stable machine-readable word (JSON, `/status`, Events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingKind {
    IrqCollapsed,
    IrqHurting,
    NodeSaturated,
    QuotaBound,
    Starved,
    PerfWakeupStorm,
    DiskCommitSlow,
    CollectorFailed,
    DetectorFailed,
    RemediationEscalated,
    IrqbalanceRebalanceBug,
    /// A mount of the host's tree that nodemedic reads, expected read-only, is writable.
    HostMountWritable,
    /// A tuning audit rule (`tuning_<rule>`).
    Tuning(crate::verdict::TuningRule),
}

impl Serialize for FindingKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IrqCollapsed => "irq_collapsed",
            Self::IrqHurting => "irq_hurting",
            Self::NodeSaturated => "node_saturated",
            Self::QuotaBound => "quota_bound",
            Self::Starved => "starved",
            Self::PerfWakeupStorm => "perf_wakeup_storm",
            Self::DiskCommitSlow => "disk_commit_slow",
            Self::CollectorFailed => "collector_failed",
            Self::DetectorFailed => "detector_failed",
            Self::RemediationEscalated => "remediation_escalated",
            Self::IrqbalanceRebalanceBug => "irqbalance_rebalance_bug",
            Self::HostMountWritable => "host_mount_writable",
            Self::Tuning(rule) => rule.finding_kind(),
        }
    }
}

/// Something an operator should know, with what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    /// What the finding is about (a device group, a collector).
    pub subject: String,
    pub message: String,
}
