//! Pressure Stall Information (node and per cgroup) and per-cgroup CPU quota and throttling.
//!
//! Names follow node_exporter and kubelet: PSI `some` is `_waiting_seconds_total` (at least
//! one task waited), `full` is `_stalled_seconds_total` (all non-idle tasks waited at once).
//! Per-cgroup series carry kubelet's label names (`namespace`, `pod`, `container`) plus
//! `pod_uid`, `qos` and `container_id`; systemd services carry `unit`. Cardinality: one set
//! per pod by default (containers are opt-in), and only the resources the kernel reports.

use nodemedic_kernel::cgroup::{CgroupStats, Workload};
use nodemedic_kernel::psi::{Psi, PsiResource};
use nodemedic_sample::verdict::CgroupRates;
use nodemedic_sample::PressureVerdict;
use nodemedic_sample::Snapshot;

use crate::encoder::{Encoder, Kind};

pub(crate) fn node(e: &mut Encoder, snap: &Snapshot) {
    let Some(p) = &snap.pressure else {
        return;
    };
    for resource in PsiResource::ALL {
        let Some(psi) = p.get(&resource) else {
            continue;
        };
        if let Some(some) = psi.some {
            e.family(
                &format!("nodemedic_pressure_{resource}_waiting_seconds"),
                Kind::Counter,
                &format!(
                    "Time in which at least one task on the node waited for {} (PSI some).",
                    what(resource)
                ),
            );
            e.sample(&[], some.total_seconds());
        }
        // The system-level cpu `full` line is always zero (some CPU is always running), so
        // it is not exported: a series that cannot move misleads.
        if let Some(full) = psi.full.filter(|_| resource != PsiResource::Cpu) {
            e.family(
                &format!("nodemedic_pressure_{resource}_stalled_seconds"),
                Kind::Counter,
                &format!("Time in which all non-idle tasks on the node waited for {} at once (PSI full).", what(resource)),
            );
            e.sample(&[], full.total_seconds());
        }
    }
    e.family(
        "nodemedic_pressure_avg_ratio",
        Kind::Gauge,
        "The kernel's running averages of PSI (share of wall time stalled) over 10 s, 60 s and 300 s, by resource and kind (some, full).",
    );
    for resource in PsiResource::ALL {
        let Some(psi) = p.get(&resource) else {
            continue;
        };
        for (kind, line) in [("some", psi.some), ("full", psi.full)] {
            let Some(l) = line else { continue };
            if resource == PsiResource::Cpu && kind == "full" {
                continue;
            }
            for (window, v) in [("10s", l.avg10), ("60s", l.avg60), ("300s", l.avg300)] {
                e.sample(
                    &[
                        ("resource", resource.as_str()),
                        ("kind", kind),
                        ("window", window),
                    ],
                    // The kernel prints percent with two decimals; keep exactly those digits.
                    (v * 100.0).round() / 10_000.0,
                );
            }
        }
    }
}

fn what(resource: PsiResource) -> &'static str {
    match resource {
        PsiResource::Cpu => "a CPU",
        PsiResource::Memory => "memory (reclaim, refaults, swap-in)",
        PsiResource::Io => "I/O",
        PsiResource::Irq => "IRQ/softirq processing",
    }
}

/// The labels of one cgroup's series, borrowed from the snapshot: nothing is copied per
/// cgroup, nor per series.
struct Labels<'s> {
    pairs: Vec<(&'static str, &'s str)>,
}

impl<'s> Labels<'s> {
    fn of(snap: &'s Snapshot, path: &'s str, g: &'s CgroupStats) -> Labels<'s> {
        let mut pairs = Vec::with_capacity(6);
        match &g.workload {
            Workload::Pod { uid, qos } | Workload::Container { uid, qos, .. } => {
                if let Some(p) = snap.pod(uid) {
                    pairs.push(("namespace", p.namespace.as_str()));
                    pairs.push(("pod", p.name.as_str()));
                }
                pairs.push(("pod_uid", uid.as_str()));
                pairs.push(("qos", qos.as_str()));
                if let Workload::Container { id, .. } = &g.workload {
                    if let Some(name) = snap.pod(uid).and_then(|p| p.containers.get(id)) {
                        pairs.push(("container", name.as_str()));
                    }
                    pairs.push(("container_id", id.as_str()));
                }
            }
            Workload::Service { unit } => pairs.push(("unit", unit.as_str())),
            Workload::Other => pairs.push(("cgroup", path)),
        }
        Labels { pairs }
    }

    fn get(&self) -> &[(&str, &str)] {
        &self.pairs
    }
}

pub(crate) fn cgroups(e: &mut Encoder, snap: &Snapshot) {
    let Some(c) = &snap.cgroups else {
        return;
    };
    let groups: Vec<(Labels, &CgroupStats)> = c
        .groups
        .iter()
        .map(|(path, g)| (Labels::of(snap, path, g), g))
        .collect();
    e.family(
        "nodemedic_cgroups_watched",
        Kind::Gauge,
        "Cgroups nodemedic reads (pods, and containers and services when enabled).",
    );
    e.sample(&[], groups.len() as f64);
    e.family(
        "nodemedic_cgroup_host_writable_mounts",
        Kind::Gauge,
        "Mounts of the host's cgroup tree that nodemedic's container can write (0 on the node itself and on a safe install): through one a process in the pod could rewrite any pod's limits; mount each hierarchy read-only (the chart's cgroupV1Hierarchies).",
    );
    e.sample(&[], c.mounts.writable.len() as f64);

    cpu_families(e, &groups);
    pressure_families(e, &groups);
}

/// The cgroups' CFS quota, CPU use and throttling.
fn cpu_families(e: &mut Encoder, groups: &[(Labels, &CgroupStats)]) {
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_quota_cores",
        Kind::Gauge,
        "The cgroup's CFS CPU quota in CPUs (cpu.max or cpu.cfs_quota_us / period); absent when unlimited (max).",
        &|g| g.cpu_max.and_then(|m| m.cores()),
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_period_seconds",
        Kind::Gauge,
        "The cgroup's CFS period: the quota is enforced per period.",
        &|g| g.cpu_max.map(|m| m.period_us as f64 / 1e6),
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_usage_seconds",
        Kind::Counter,
        "CPU time used by the cgroup's tasks (cpu.stat usage_usec, or v1 cpuacct.usage).",
        &|g| g.cpu_stat.and_then(|s| s.usage_us).map(|u| u as f64 / 1e6),
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_periods",
        Kind::Counter,
        "CFS enforcement periods in which the cgroup had runnable tasks (cpu.stat nr_periods).",
        &|g| {
            g.cpu_stat
                .filter(|_| g.cpu_max.is_some_and(|m| m.quota_us.is_some()))
                .map(|s| s.nr_periods as f64)
        },
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_throttled_periods",
        Kind::Counter,
        "Periods in which the cgroup used up its quota and was throttled (cpu.stat nr_throttled).",
        &|g| {
            g.cpu_stat
                .filter(|_| g.cpu_max.is_some_and(|m| m.quota_us.is_some()))
                .map(|s| s.nr_throttled as f64)
        },
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_throttled_seconds",
        Kind::Counter,
        "Time the cgroup's tasks were held off the CPU by its quota (cpu.stat throttled_usec / throttled_time).",
        &|g| g.cpu_stat.filter(|_| g.cpu_max.is_some_and(|m| m.quota_us.is_some())).map(|s| s.throttled_us as f64 / 1e6),
    );
    if groups
        .iter()
        .any(|(_, g)| g.cpu_stat.is_some_and(|s| s.nr_bursts.is_some()))
    {
        cgroup_family(
            e,
            groups,
            "nodemedic_cgroup_cpu_bursts",
            Kind::Counter,
            "Periods in which the cgroup used burst capacity beyond its quota (cpu.stat nr_bursts, Linux 5.14+).",
            &|g| g.cpu_stat.and_then(|s| s.nr_bursts).map(|n| n as f64),
        );
        cgroup_family(
            e,
            groups,
            "nodemedic_cgroup_cpu_burst_seconds",
            Kind::Counter,
            "CPU time used beyond the quota from burst capacity (cpu.stat burst_usec).",
            &|g| g.cpu_stat.and_then(|s| s.burst_us).map(|n| n as f64 / 1e6),
        );
    }
}

/// The cgroups' PSI, per resource.
fn pressure_families(e: &mut Encoder, groups: &[(Labels, &CgroupStats)]) {
    for resource in [PsiResource::Cpu, PsiResource::Memory, PsiResource::Io] {
        let psi = |g: &CgroupStats| -> Option<Psi> { g.pressure.get(resource).copied() };
        cgroup_family(
            e,
            groups,
            &format!("nodemedic_cgroup_pressure_{resource}_waiting_seconds"),
            Kind::Counter,
            &format!(
                "Time in which at least one of the cgroup's tasks waited for {} (PSI some).",
                what(resource)
            ),
            &|g| psi(g).and_then(|p| p.some).map(|l| l.total_seconds()),
        );
        cgroup_family(
            e,
            groups,
            &format!("nodemedic_cgroup_pressure_{resource}_stalled_seconds"),
            Kind::Counter,
            &format!("Time in which all of the cgroup's non-idle tasks waited for {} at once (PSI full).", what(resource)),
            &|g| psi(g).and_then(|p| p.full).map(|l| l.total_seconds()),
        );
    }
}

/// A family with a sample for each cgroup that has a `value`; none without any.
fn cgroup_family(
    e: &mut Encoder,
    groups: &[(Labels, &CgroupStats)],
    name: &str,
    kind: Kind,
    help: &str,
    value: &dyn Fn(&CgroupStats) -> Option<f64>,
) {
    let values: Vec<(&Labels, f64)> = groups
        .iter()
        .filter_map(|(l, g)| Some((l, value(g)?)))
        .collect();
    if values.is_empty() {
        return;
    }
    e.family(name, kind, help);
    for (l, v) in values {
        e.sample(l.get(), v);
    }
}

pub(crate) fn verdicts(e: &mut Encoder, snap: &Snapshot, verdict: Option<&PressureVerdict>) {
    let Some(v) = verdict else {
        return;
    };
    e.family(
        "nodemedic_node_pressure_saturated",
        Kind::Gauge,
        "Whether the node is judged saturated (node PSI above the thresholds, CPU pressure only with busy CPUs, with hysteresis).",
    );
    e.sample(&[], f64::from(u8::from(v.node_saturated)));
    if let Some(busy) = v.node_cpu_busy {
        e.family(
            "nodemedic_node_cpu_busy_ratio",
            Kind::Gauge,
            "Share of the online CPUs' time spent running tasks between the last two cgroup readings (the root cgroup's CPU usage): what CPU saturation needs besides CPU pressure.",
        );
        e.sample(&[], busy);
    }
    let labelled: Vec<(Labels, &CgroupRates)> = v
        .cgroups
        .iter()
        .filter_map(|r| {
            let g = snap.cgroups.as_ref()?.groups.get(&r.path)?;
            Some((Labels::of(snap, &r.path, g), r))
        })
        .collect();
    type Pick = fn(&CgroupRates) -> Option<bool>;
    let families: [(&str, &str, Pick); 2] = [
        (
            "nodemedic_cgroup_quota_bound",
            "Whether the cgroup is judged held back by its CPU quota: throttled in many periods while its tasks wait for CPU (with hysteresis).",
            |r| Some(r.quota_bound),
        ),
        (
            "nodemedic_cgroup_starved",
            "Whether the pod or service is judged starved: its tasks wait for CPU or memory above the thresholds (with hysteresis). Containers share their pod's verdict.",
            |r| (!matches!(r.workload, Workload::Container { .. })).then_some(r.starved),
        ),
    ];
    for (name, help, pick) in families {
        e.family(name, Kind::Gauge, help);
        for (l, r) in &labelled {
            if let Some(v) = pick(r) {
                e.sample(l.get(), f64::from(u8::from(v)));
            }
        }
    }
}
