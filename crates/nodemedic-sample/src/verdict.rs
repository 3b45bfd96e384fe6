//! What the detectors concluded from one sample: one verdict type per detector (the IRQ
//! collapse detector's per device group, disk commit latency, the perf wakeup storm,
//! pressure, the tuning audit). The detectors in nodemedic-detect produce them; the outputs
//! read them. Data only: how a verdict is reached lives with its detector.

use std::collections::BTreeMap;
use std::sync::Arc;

use nodemedic_kernel::psi::PsiResource;
use nodemedic_kernel::workload::{Qos, Workload};
use nodemedic_kernel::CpuSet;
use serde::{Deserialize, Serialize};

use crate::finding::{Finding, FindingKind, Severity};

// The IRQ collapse detector.

/// A device and its interrupts, with where they are delivered and where they could be.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceGroup {
    /// Stable identity across samples (`pci:0000:3b:00.0`, `dev:timer`).
    pub key: String,
    /// Readable name: the device instance (`virtio3`, `nvme0`, `eth0`) or `driver address`
    /// (`mlx5_core 0000:3b:00.0`).
    pub name: String,
    pub driver: Option<String>,
    pub pci: Option<String>,
    /// Network interface backed by this device, if any.
    pub netdev: Option<String>,
    pub numa_node: Option<u32>,
    /// The IRQs the collapse verdict considers: the data-queue IRQs when the device has any
    /// (control vectors sit on one CPU by design); else its IRQs that are neither control
    /// vectors nor event lines, once one of them has fired since boot; else none.
    pub irqs: Vec<u32>,
    /// The device's other IRQs (control, admin, config, event lines, and those of a device
    /// with no data queue that has never taken an interrupt).
    pub other_irqs: Vec<u32>,
    /// Union of the CPUs the considered IRQs are delivered to.
    pub effective_cpus: CpuSet,
    /// CPUs the IRQs could be placed on: online, not isolated, not `nohz_full`, not banned
    /// for irqbalance, and on the device's NUMA node when that is known and non-empty.
    pub eligible_cpus: CpuSet,
    /// Considered IRQs with no affinity data (vanished, unreadable).
    pub unknown_affinity: Vec<u32>,
}

/// What the detector measured for a group in one sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evidence {
    pub distinct_cpus: usize,
    pub cpu_limit: usize,
    /// Interrupts per second of the considered IRQs since the previous sample.
    pub irq_rate: Option<f64>,
    pub hottest_cpu: Option<u32>,
    /// Share of the group's interrupts on the hottest CPU: by rate when the group had
    /// interrupts since the previous sample, else by cumulative counts.
    pub hottest_share: Option<f64>,
    pub share_basis: Option<ShareBasis>,
    /// The busiest single IRQ's share of the group's interrupts since the previous sample
    /// (none when the group had none): no placement can take the hottest CPU's share below
    /// it, since one IRQ is delivered to one CPU at a time.
    pub busiest_irq_share: Option<f64>,
    /// The group's interrupts per second on each CPU that had any.
    pub per_cpu_rate: BTreeMap<u32, f64>,
    /// NET_RX softirqs per second on the hottest CPU.
    pub hottest_net_rx_rate: Option<f64>,
    /// softnet drops and time squeezes since the previous sample, summed over the CPUs the
    /// group is delivered to.
    pub softnet_dropped: Option<u64>,
    pub softnet_squeezed: Option<u64>,
}

/// What the hottest CPU's share is a share of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareBasis {
    /// The group's interrupts since the previous sample.
    Rate,
    /// The group's interrupts since boot (nothing grew since the previous sample).
    Cumulative,
}

impl ShareBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Cumulative => "cumulative",
        }
    }
}

impl Evidence {
    /// The hottest CPU's share of the group's interrupt *rate*, when there was one.
    pub fn rate_share(&self) -> Option<f64> {
        self.hottest_share
            .filter(|_| self.share_basis == Some(ShareBasis::Rate))
    }

    /// Whether the hottest CPU carries only one IRQ's worth of the group's rate: its share is
    /// no more than the busiest IRQ's, so it is that IRQ's load, which no placement spreads
    /// (a NIC whose traffic is one flow hashes it to one queue).
    pub fn hottest_is_one_irq(&self) -> bool {
        matches!((self.rate_share(), self.busiest_irq_share),
            (Some(hottest), Some(busiest)) if hottest <= busiest + 1e-9)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GroupVerdict {
    #[serde(flatten)]
    pub group: DeviceGroup,
    /// Verdicts after hysteresis.
    pub collapsed: bool,
    pub hurting: bool,
    /// Whether `collapsed` or `hurting` differs from what the previous sample reported.
    pub changed: bool,
    /// What this sample alone says.
    pub collapsed_now: bool,
    pub hurting_now: bool,
    pub collapsed_since: Option<f64>,
    pub hurting_since: Option<f64>,
    pub evidence: Evidence,
}

// The disk commit latency detector.

/// What the detector concluded from one sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommitVerdict {
    pub directory: String,
    /// Commits in the window.
    pub commits: u64,
    /// The window's p99, interpolated within its bucket as PromQL's `histogram_quantile`
    /// does; `None` with fewer than `min_commits`.
    pub p99_seconds: Option<f64>,
    pub slow: bool,
    pub changed: bool,
}

// The perf wakeup storm detector.

/// The detector's view after one sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StormVerdict {
    pub storming: bool,
    /// The verdict changed with this sample.
    pub changed: bool,
    /// Whether this sample's rates passed both thresholds.
    pub observed: bool,
    pub wakeups_per_second: f64,
    pub wakeup_ratio: f64,
    /// The owner with the most wakeups in the interval: (pid, comm, wakeups/s, outputs/s).
    pub top_owner: Option<(u32, String, f64, f64)>,
}

// The pressure detector.

/// Share of the interval stalled, from a PSI file's `total=` counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PsiRatios {
    pub some: Option<f64>,
    pub full: Option<f64>,
}

/// One cgroup over the last interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CgroupRates {
    /// Path relative to the hierarchy root.
    pub path: String,
    /// What the cgroup holds, shown as its kind (`pod`, `container`, `service`).
    #[serde(rename = "kind", serialize_with = "workload_kind")]
    pub workload: Workload,
    pub pod_uid: Option<String>,
    pub qos: Option<Qos>,
    /// `namespace/pod` (plus `/container`) when the pod is known, the unit for a service,
    /// else `pod <uid>`.
    pub name: String,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub quota_cores: Option<f64>,
    /// CPUs used on average over the interval.
    pub cpu_usage_cores: Option<f64>,
    /// Throttled periods / periods over the interval (`None` without periods in it).
    pub throttled_ratio: Option<f64>,
    pub cpu_some_ratio: Option<f64>,
    pub memory_some_ratio: Option<f64>,
    pub io_some_ratio: Option<f64>,
    pub quota_bound: bool,
    pub starved: bool,
}

/// The detector's view after one sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PressureVerdict {
    pub interval_seconds: f64,
    /// Node PSI by resource over the interval (empty without node PSI).
    pub node: BTreeMap<PsiResource, PsiRatios>,
    pub node_saturated: bool,
    /// Which node thresholds this sample passed (`cpu some`, `memory some`, `io full`).
    pub node_over: Vec<String>,
    /// Share of the online CPUs' time spent running tasks between the last two cgroup
    /// readings; `None` before two readings or without the root cgroup's usage.
    pub node_cpu_busy: Option<f64>,
    /// Every watched cgroup with rates, by path. Shared with the detector: samples between
    /// two cgroup readings repeat the same rates without copying 500 pods' worth of them.
    pub cgroups: Arc<Vec<CgroupRates>>,
    /// Verdicts that changed with this sample.
    pub changes: Vec<Change>,
}

fn workload_kind<S: serde::Serializer>(w: &Workload, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(w.kind())
}

/// A verdict that changed with a sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub scope: Scope,
    pub verdict: PressureVerdictKind,
    /// Whether the verdict now holds.
    pub active: bool,
}

/// Whom a pressure verdict is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Node,
    /// A cgroup, by its path relative to the hierarchy root.
    Cgroup(String),
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Node => f.write_str("node"),
            Self::Cgroup(path) => f.write_str(path),
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One of the three pressure verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureVerdictKind {
    NodeSaturated,
    QuotaBound,
    Starved,
}

impl PressureVerdictKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeSaturated => "node_saturated",
            Self::QuotaBound => "quota_bound",
            Self::Starved => "starved",
        }
    }
}

impl Serialize for PressureVerdictKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

// The tuning audit.

/// The rules, by the name config and findings use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TuningRule {
    /// Fewer RX channels than the NIC has and than its local CPUs, with RPS off.
    NicChannels,
    /// RX ring below its maximum.
    NicRings,
    /// `net.core.netdev_budget` (and `_usecs`).
    NetdevBudget,
    /// `net.core.netdev_max_backlog`.
    NetdevMaxBacklog,
    /// Strict IOMMU (`DMA` domain) on a NIC's or NVMe drive's group.
    IommuStrict,
    /// The SRSO mitigation (`spec_rstack_overflow`).
    Srso,
    /// `mitigations=off` or `mitigations=auto,nosmt` on the command line.
    Mitigations,
    /// A cpufreq governor other than `performance`.
    CpufreqGovernor,
    /// No cpufreq policies: the frequency is the hypervisor's (or the firmware's).
    CpufreqAbsent,
    /// No IOMMU groups: DMA remapping is the hypervisor's (or off).
    IommuAbsent,
}

impl TuningRule {
    pub const ALL: [TuningRule; 10] = [
        TuningRule::NicChannels,
        TuningRule::NicRings,
        TuningRule::NetdevBudget,
        TuningRule::NetdevMaxBacklog,
        TuningRule::IommuStrict,
        TuningRule::Srso,
        TuningRule::Mitigations,
        TuningRule::CpufreqGovernor,
        TuningRule::CpufreqAbsent,
        TuningRule::IommuAbsent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TuningRule::NicChannels => "nic_channels",
            TuningRule::NicRings => "nic_rings",
            TuningRule::NetdevBudget => "netdev_budget",
            TuningRule::NetdevMaxBacklog => "netdev_max_backlog",
            TuningRule::IommuStrict => "iommu_strict",
            TuningRule::Srso => "srso",
            TuningRule::Mitigations => "mitigations",
            TuningRule::CpufreqGovernor => "cpufreq_governor",
            TuningRule::CpufreqAbsent => "cpufreq_absent",
            TuningRule::IommuAbsent => "iommu_absent",
        }
    }

    /// The kind of its findings: `tuning_` and the rule.
    pub fn finding_kind(self) -> &'static str {
        match self {
            TuningRule::NicChannels => "tuning_nic_channels",
            TuningRule::NicRings => "tuning_nic_rings",
            TuningRule::NetdevBudget => "tuning_netdev_budget",
            TuningRule::NetdevMaxBacklog => "tuning_netdev_max_backlog",
            TuningRule::IommuStrict => "tuning_iommu_strict",
            TuningRule::Srso => "tuning_srso",
            TuningRule::Mitigations => "tuning_mitigations",
            TuningRule::CpufreqGovernor => "tuning_cpufreq_governor",
            TuningRule::CpufreqAbsent => "tuning_cpufreq_absent",
            TuningRule::IommuAbsent => "tuning_iommu_absent",
        }
    }
}

/// One finding of the audit: what is set, what this node shows, what it costs and how to
/// change it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuningFinding {
    pub rule: TuningRule,
    /// `info` or `warning`.
    pub severity: Severity,
    /// What it is about: an interface, a device, a sysctl, `cpufreq`.
    pub subject: String,
    /// The setting and the symptom, as read on this node.
    pub evidence: String,
    /// What it costs, with the measured reference where there is one.
    pub cost: String,
    /// The command, sysctl or kernel argument that changes it.
    pub fix: String,
}

impl From<&TuningFinding> for Finding {
    fn from(t: &TuningFinding) -> Self {
        // `concat` allocates the message once at its length: `format!` grew it by doubling,
        // a reallocation (and under musl's allocator a map and an unmap of pages) per step,
        // for every finding in every sample.
        let message = [t.evidence.as_str(), " Cost: ", &t.cost, " Fix: ", &t.fix].concat();
        Finding {
            kind: FindingKind::Tuning(t.rule),
            severity: t.severity,
            subject: t.subject.clone(),
            message,
        }
    }
}

/// The audit after one sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TuningVerdict {
    /// Seconds since the previous sample; `None` on the first (no rates yet).
    pub interval_seconds: Option<f64>,
    /// Sorted by rule, then subject.
    pub findings: Vec<TuningFinding>,
}

impl TuningVerdict {
    pub fn warnings(&self) -> impl Iterator<Item = &TuningFinding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
    }
}
