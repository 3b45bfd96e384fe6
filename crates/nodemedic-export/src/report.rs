//! The report shapes shared by `check` (text and `--format json`) and `/status`, and the
//! per-CPU rate maths of `check`'s two samples.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use nodemedic_collect::sources::cgroups::Cgroups;
use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::sources::irqbalance::IrqbalanceConfig;
use nodemedic_collect::sources::pressure::PsiResource;
use nodemedic_collect::sources::softirqs::Softirqs;
use nodemedic_collect::sources::softnet::{Softnet, SoftnetRow};
use nodemedic_collect::sources::topology::Topology;
use nodemedic_collect::sources::tuning::{Tuning, TuningSettings};
use nodemedic_kernel::counter;
use nodemedic_kernel::mounts::CgroupMounts;
use nodemedic_sample::perf::PerfProbes;
use nodemedic_sample::verdict::{CgroupRates, PsiRatios, TuningFinding};
use nodemedic_sample::{
    CollectorName, CollectorState, CollectorStatus, Finding, GroupVerdict, Sample, Severity,
};
use serde::Serialize;

/// A device group's verdict as `/status` and `check --format json` show it: the group and
/// its verdict as they are, but the CPUs the IRQs are delivered to as a list, the eligible
/// CPUs as a count and a kernel list (`0-3,8`), and without the per-sample fields
/// (`changed`, `collapsed_now`, `hurting_now`, `unknown_affinity`).
#[derive(Debug, Clone)]
pub struct GroupReport(pub GroupVerdict);

impl Serialize for GroupReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (v, g) = (&self.0, &self.0.group);
        let mut out = s.serialize_struct("GroupReport", 16)?;
        out.serialize_field("name", &g.name)?;
        out.serialize_field("key", &g.key)?;
        out.serialize_field("driver", &g.driver)?;
        out.serialize_field("pci", &g.pci)?;
        out.serialize_field("netdev", &g.netdev)?;
        out.serialize_field("numa_node", &g.numa_node)?;
        // IRQs judged for collapse (the device's data queues when it has them), and the
        // device's other IRQs (control, admin, config vectors).
        out.serialize_field("irqs", &g.irqs)?;
        out.serialize_field("other_irqs", &g.other_irqs)?;
        let effective: Vec<u32> = g.effective_cpus.iter().collect();
        out.serialize_field("effective_cpus", &effective)?;
        out.serialize_field("eligible_cpus", &g.eligible_cpus.len())?;
        out.serialize_field("eligible_cpu_list", &g.eligible_cpus.to_list_string())?;
        out.serialize_field("collapsed", &v.collapsed)?;
        out.serialize_field("hurting", &v.hurting)?;
        out.serialize_field("collapsed_since", &v.collapsed_since)?;
        out.serialize_field("hurting_since", &v.hurting_since)?;
        out.serialize_field("evidence", &v.evidence)?;
        out.end()
    }
}

/// Device groups worth showing: those that could ever collapse, or that are PCI devices.
/// Single-IRQ legacy lines (timer, serial, ACPI) are left out.
pub fn shown_groups(verdicts: &[GroupVerdict]) -> Vec<GroupReport> {
    verdicts
        .iter()
        .filter(|v| v.group.irqs.len() >= 2 || v.group.pci.is_some())
        .map(|v| GroupReport(v.clone()))
        .collect()
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub version: &'static str,
    pub interval_seconds: f64,
    pub status: &'static str,
    pub cpus: CpuSummary,
    pub irq: IrqReport,
    pub findings: Vec<Finding>,
    pub collectors: Vec<CollectorStatus>,
    /// perf-event outputs and wakeups from the eBPF probes, with rates over the interval and
    /// the busiest owners (absent when the probes are switched off).
    pub perf: Option<nodemedic_sample::perf::PerfProbes>,
    pub pressure: PressureReport,
    pub tuning: TuningReport,
    /// The LSM labels nodemedic runs under and the host mounts its container can write.
    pub host_access: Arc<nodemedic_sample::host::HostAccess>,
}

/// Where work waited: node PSI over the interval, where the cgroup hierarchies were found,
/// and the cgroups judged quota-bound or starved. One shape for `/status` and `check`;
/// `check` adds every watched cgroup's rates.
#[derive(Debug, Clone, Serialize)]
pub struct PressureReport {
    /// Share of the interval stalled, by resource (`cpu`, `memory`, `io`, `irq`); absent
    /// without PSI (see `node_unavailable`).
    pub node: Option<BTreeMap<PsiResource, PsiRatios>>,
    /// Why there is no node PSI (kernel without PSI, or PSI switched off).
    pub node_unavailable: Option<String>,
    /// The node's CPUs are busy and work waits for them (absent before two samples).
    pub node_saturated: Option<bool>,
    /// Where the cgroup hierarchies are, and whether `/proc/self/mountinfo` confirmed them.
    pub cgroup_mounts: Option<CgroupMounts>,
    pub cgroup_mounts_from_mountinfo: Option<bool>,
    pub cgroups_watched: Option<usize>,
    /// Cgroups throttled by their CPU quota while their tasks waited.
    pub quota_bound: Vec<String>,
    /// Cgroups whose tasks waited for CPU without a quota holding them back.
    pub starved: Vec<String>,
    /// Every watched cgroup, most CPU-pressured first (`check`; `/status` names only the
    /// flagged ones above, a 500-pod list is too long for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<Vec<CgroupRates>>,
    /// Rows per list in the text output.
    #[serde(skip)]
    pub top: usize,
}

/// Why collector `name` gave no data in `sample`: switched off, failed, or the kernel has
/// none (with the reason it gave).
fn no_data(sample: &Sample, name: CollectorName) -> Option<String> {
    sample
        .collectors
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| match &c.state {
            CollectorState::Unavailable { reason }
            | CollectorState::Failed { reason }
            | CollectorState::Disabled { reason } => Some(reason.clone()),
            _ => None,
        })
}

impl PressureReport {
    /// The report of `sample`; `with_cgroups` adds every watched cgroup's rates.
    pub fn of(sample: &Sample, with_cgroups: bool) -> Self {
        let node_unavailable = no_data(sample, nodemedic_collect::sources::pressure::NAME);
        let cg = sample.snapshot.get::<Cgroups>();
        let v = sample.pressure.as_ref();
        let flagged = |pick: fn(&CgroupRates) -> bool| -> Vec<String> {
            v.map(|v| {
                v.cgroups
                    .iter()
                    .filter(|c| pick(c))
                    .map(|c| c.name.clone())
                    .collect()
            })
            .unwrap_or_default()
        };
        let cgroups = with_cgroups.then(|| {
            let mut cgroups = v.map(|v| (*v.cgroups).clone()).unwrap_or_default();
            cgroups.sort_by(|a, b| {
                b.cpu_some_ratio
                    .unwrap_or(0.0)
                    .total_cmp(&a.cpu_some_ratio.unwrap_or(0.0))
                    .then_with(|| a.path.cmp(&b.path))
            });
            cgroups
        });
        Self {
            node: v.filter(|v| !v.node.is_empty()).map(|v| v.node.clone()),
            node_unavailable,
            node_saturated: v.map(|v| v.node_saturated),
            cgroup_mounts: cg.map(|c| c.mounts.clone()),
            cgroup_mounts_from_mountinfo: cg.map(|c| c.from_mountinfo),
            cgroups_watched: cg.map(|c| c.groups.len()),
            quota_bound: flagged(|c| c.quota_bound),
            starved: flagged(|c| c.starved),
            cgroups,
            top: 5,
        }
    }
}

/// The tuning audit: each finding with its evidence, cost and fix, and (for `check`) the
/// settings it read. One shape for `/status` and `check`.
#[derive(Debug, Clone, Serialize)]
pub struct TuningReport {
    /// Why there is no audit: the collector is switched off or failed.
    pub unavailable: Option<String>,
    /// Warnings first, then info.
    pub findings: Vec<TuningFinding>,
    /// What was read (`check`; `/status` shows the findings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings: Option<Arc<TuningSettings>>,
}

impl TuningReport {
    /// The report of `sample`; `with_settings` adds what the collector read.
    pub fn of(sample: &Sample, with_settings: bool) -> Self {
        let unavailable = no_data(sample, nodemedic_collect::sources::tuning::NAME);
        let mut findings = sample
            .tuning
            .as_ref()
            .map(|v| v.findings.clone())
            .unwrap_or_default();
        findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
        Self {
            unavailable,
            findings,
            settings: sample
                .snapshot
                .get::<Tuning>()
                .filter(|_| with_settings)
                .map(|t| t.settings.clone()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CpuSummary {
    pub online: String,
    pub isolated: String,
    pub nohz_full: String,
    pub irqbalance_banned: String,
}

#[derive(Debug, Serialize)]
pub struct IrqReport {
    pub groups: Vec<GroupReport>,
    pub per_cpu: Vec<CpuInterrupts>,
}

#[derive(Debug, Serialize)]
pub struct CpuInterrupts {
    pub cpu: u32,
    /// Device interrupts handled since boot.
    pub device_interrupts: u64,
    /// Device interrupts per second between the two samples.
    pub device_interrupts_per_second: f64,
    pub net_rx_per_second: Option<f64>,
    pub softnet_dropped: Option<u64>,
    pub softnet_squeezed: Option<u64>,
}

/// The report of two samples of one engine, `first` before `second`.
pub fn build_report(first: &Sample, second: &Sample) -> CheckReport {
    let dt = second
        .snapshot
        .at
        .saturating_sub(first.snapshot.at)
        .as_secs_f64()
        .max(1e-9);
    let snap = &second.snapshot;
    let topo = snap.get::<Topology>().cloned().unwrap_or_default();
    let mut per_cpu = Vec::new();
    if let Some(ints) = snap.get::<Interrupts>() {
        // The detector's rate maths (nodemedic_detect::rates): IRQs present in both samples,
        // wrap-aware, a reset IRQ adding nothing, CPUs matched through the headers.
        let growth = first
            .snapshot
            .get::<Interrupts>()
            .map(|before| nodemedic_detect::rates::per_cpu_growth(before, ints));
        let totals = cpu_sums(ints);
        for (col, cpu) in ints.cpus.iter().enumerate() {
            let now = totals.get(cpu).copied().unwrap_or(0);
            let rate = growth
                .as_ref()
                .and_then(|g| g.get(col))
                .map_or(0.0, |d| *d as f64 / dt);
            let net_rx = match (first.snapshot.get::<Softirqs>(), snap.get::<Softirqs>()) {
                (Some(a), Some(b)) => match (a.count("NET_RX", *cpu), b.count("NET_RX", *cpu)) {
                    (Some(x), Some(y)) => counter::delta(x, y).map(|d| d as f64 / dt),
                    _ => None,
                },
                _ => None,
            };
            let softnet = |f: fn(&SoftnetRow) -> u32| -> Option<u64> {
                let a = first
                    .snapshot
                    .get::<Softnet>()?
                    .iter()
                    .find(|(c, _)| c == cpu)?;
                let b = snap.get::<Softnet>()?.iter().find(|(c, _)| c == cpu)?;
                counter::delta(u64::from(f(&a.1)), u64::from(f(&b.1)))
            };
            per_cpu.push(CpuInterrupts {
                cpu: *cpu,
                device_interrupts: now,
                device_interrupts_per_second: rate,
                net_rx_per_second: net_rx,
                softnet_dropped: softnet(|r| r.dropped),
                softnet_squeezed: softnet(|r| r.time_squeeze),
            });
        }
    }
    let findings = second.findings.clone();
    CheckReport {
        version: env!("CARGO_PKG_VERSION"),
        interval_seconds: dt,
        status: if findings.iter().any(|f| f.severity >= Severity::Warning) {
            "findings"
        } else {
            "healthy"
        },
        cpus: CpuSummary {
            online: topo.online.to_list_string(),
            isolated: topo.isolated.to_list_string(),
            nohz_full: topo.nohz_full.to_list_string(),
            irqbalance_banned: snap
                .get::<IrqbalanceConfig>()
                .map(|i| i.banned_cpus.to_list_string())
                .unwrap_or_default(),
        },
        irq: IrqReport {
            groups: shown_groups(&second.verdicts),
            per_cpu,
        },
        findings,
        collectors: second.collectors.clone(),
        perf: snap.get::<PerfProbes>().cloned(),
        pressure: PressureReport::of(second, true),
        tuning: TuningReport::of(second, true),
        host_access: second.host.clone(),
    }
}

/// Per CPU, the interrupts of every device IRQ so far.
fn cpu_sums(i: &Interrupts) -> HashMap<u32, u64> {
    let mut sums: HashMap<u32, u64> = HashMap::with_capacity(i.cpus.len());
    for line in &i.irqs {
        for (cpu, count) in i.per_cpu(line) {
            let sum = sums.entry(cpu).or_default();
            *sum = sum.saturating_add(count);
        }
    }
    sums
}
