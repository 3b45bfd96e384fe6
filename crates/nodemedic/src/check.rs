//! `nodemedic check`: a one-shot diagnosis for an SRE at a terminal.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use nodemedic_kernel::counter;
use nodemedic_kernel::interrupts::Interrupts;

use nodemedic_collect::{CollectorState, CollectorStatus};
use nodemedic_detect::pressure::{CgroupRates, PsiRatios};
use nodemedic_detect::{Finding, Severity};
use serde::Serialize;

use crate::cli::{CheckArgs, OutputFormat};
use crate::config::Config;
use crate::report::{shown_groups, GroupReport};
use nodemedic_engine::{Engine, EngineConfig, Sample};

pub const EXIT_HEALTHY: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
pub const EXIT_COULD_NOT_RUN: u8 = 2;

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
    pub perf: Option<nodemedic_kernel::perf::PerfProbes>,
    pub pressure: PressureReport,
}

/// Where work waited over the interval: node PSI and every watched cgroup.
#[derive(Debug, Serialize)]
pub struct PressureReport {
    /// Share of the interval stalled, by resource (`cpu`, `memory`, `io`, `irq`); absent
    /// without PSI (see `node_unavailable`).
    pub node: Option<BTreeMap<String, PsiRatios>>,
    /// Why there is no node PSI (kernel without PSI, or PSI switched off).
    pub node_unavailable: Option<String>,
    /// Where the cgroup hierarchies are, and whether `/proc/self/mountinfo` confirmed them.
    pub cgroup_mounts: Option<nodemedic_kernel::mounts::CgroupMounts>,
    pub cgroup_mounts_from_mountinfo: Option<bool>,
    /// Watched cgroups, most CPU-pressured first.
    pub cgroups: Vec<CgroupRates>,
    /// Rows per list in the text output.
    #[serde(skip)]
    pub top: usize,
}

fn pressure_report(second: &Sample) -> PressureReport {
    let node_unavailable = second
        .collectors
        .iter()
        .find(|c| c.name == "pressure")
        .and_then(|c| match &c.state {
            CollectorState::Unavailable { reason } | CollectorState::Failed { reason } => {
                Some(reason.clone())
            }
            CollectorState::Disabled { reason } => Some(reason.clone()),
            _ => None,
        });
    let cg = second.snapshot.cgroups.as_ref();
    let cgroup_mounts = cg.map(|c| c.mounts.clone());
    let cgroup_mounts_from_mountinfo = cg.map(|c| c.from_mountinfo);
    let Some(v) = &second.pressure else {
        return PressureReport {
            node: None,
            node_unavailable,
            cgroup_mounts,
            cgroup_mounts_from_mountinfo,
            cgroups: Vec::new(),
            top: 5,
        };
    };
    let mut cgroups = (*v.cgroups).clone();
    cgroups.sort_by(|a, b| {
        b.cpu_some_ratio
            .unwrap_or(0.0)
            .total_cmp(&a.cpu_some_ratio.unwrap_or(0.0))
            .then_with(|| a.path.cmp(&b.path))
    });
    PressureReport {
        node: (!v.node.is_empty()).then(|| v.node.clone()),
        node_unavailable,
        cgroup_mounts,
        cgroup_mounts_from_mountinfo,
        cgroups,
        top: 5,
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

/// Runs the check; returns the exit status.
pub fn run(config: &Config, args: &CheckArgs) -> anyhow::Result<u8> {
    let mut collapse = config.detector.collapse.clone();
    let mut hurting = config.detector.hurting.clone();
    // Two samples: collapsed means "in both", hurting is judged on the rate between them.
    (collapse.raise_after, collapse.clear_after) = (2, 1);
    (hurting.raise_after, hurting.clear_after) = (1, 1);
    let mut wakeup_storm = config.detector.wakeup_storm.clone();
    (wakeup_storm.raise_after, wakeup_storm.clear_after) = (1, 1);
    // One interval: pressure verdicts are judged on the rates between the two samples.
    let mut pressure = config.detector.pressure.clone();
    (pressure.raise_after, pressure.clear_after) = (1, 1);
    let mut engine = Engine::with_extra(
        EngineConfig {
            collapse,
            hurting,
            wakeup_storm,
            pressure,
            // Both samples read the cgroups, however far apart they are.
            cgroups_interval: std::time::Duration::ZERO,
            ..config.engine_config()
        },
        extra_sources(config),
    );
    let first = engine.sample();
    if let Some(reason) = fatal(&first) {
        eprintln!("nodemedic check: cannot run: {reason}");
        return Ok(EXIT_COULD_NOT_RUN);
    }
    std::thread::sleep(args.interval);
    let second = engine.sample();
    if let Some(reason) = fatal(&second) {
        eprintln!("nodemedic check: cannot run: {reason}");
        return Ok(EXIT_COULD_NOT_RUN);
    }
    let mut report = build_report(&first, &second);
    report.pressure.top = args.top;
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        OutputFormat::Text => print!("{}", render_text(&report)),
    }
    Ok(
        if report
            .findings
            .iter()
            .any(|f| f.severity >= Severity::Warning)
        {
            EXIT_FINDINGS
        } else {
            EXIT_HEALTHY
        },
    )
}

/// The probes, and in a pod this node's pod names from one list of the API (check cannot
/// wait for a watch): `kubectl exec … nodemedic check` names pods as `/metrics` does.
fn extra_sources(config: &Config) -> Vec<Box<dyn nodemedic_collect::Collector>> {
    let mut extra = crate::probes::sources(config, false);
    let Ok(Some(node)) = config.kubernetes.resolve() else {
        return extra;
    };
    if !config.kubernetes.pod_names {
        return extra;
    }
    let dir = nodemedic_kube::PodDirectory::new();
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(nodemedic_kube::list_pods(&node, &dir)),
        Err(e) => tracing::warn!(error = %e, "no runtime for the pod list"),
    }
    extra.push(Box::new(nodemedic_kube::PodNamesCollector::new(dir)));
    extra
}

/// Without `/proc/interrupts` there is nothing to diagnose.
fn fatal(sample: &Sample) -> Option<String> {
    sample
        .collectors
        .iter()
        .find(|c| c.name == "interrupts" && !c.is_success())
        .map(|c| match &c.state {
            nodemedic_collect::CollectorState::Failed { reason } => reason.clone(),
            other => format!("{other:?}"),
        })
}

pub fn build_report(first: &Sample, second: &Sample) -> CheckReport {
    let dt = second
        .snapshot
        .at
        .saturating_sub(first.snapshot.at)
        .as_secs_f64()
        .max(1e-9);
    let snap = &second.snapshot;
    let topo = snap.topology.clone().unwrap_or_default();
    let mut per_cpu = Vec::new();
    if let Some(ints) = &snap.interrupts {
        // The detector's rate maths (nodemedic_detect::rates): IRQs present in both samples,
        // wrap-aware, a reset IRQ adding nothing, CPUs matched through the headers.
        let growth = first
            .snapshot
            .interrupts
            .as_deref()
            .map(|before| nodemedic_detect::rates::per_cpu_growth(before, ints));
        let totals = cpu_sums(ints);
        for (col, cpu) in ints.cpus.iter().enumerate() {
            let now = totals.get(cpu).copied().unwrap_or(0);
            let rate = growth
                .as_ref()
                .and_then(|g| g.get(col))
                .map_or(0.0, |d| *d as f64 / dt);
            let net_rx = match (&first.snapshot.softirqs, &snap.softirqs) {
                (Some(a), Some(b)) => match (a.count("NET_RX", *cpu), b.count("NET_RX", *cpu)) {
                    (Some(x), Some(y)) => counter::delta(x, y).map(|d| d as f64 / dt),
                    _ => None,
                },
                _ => None,
            };
            let softnet = |f: fn(&nodemedic_kernel::softnet::SoftnetRow) -> u32| -> Option<u64> {
                let a = first
                    .snapshot
                    .softnet
                    .as_ref()?
                    .iter()
                    .find(|(c, _)| c == cpu)?;
                let b = snap.softnet.as_ref()?.iter().find(|(c, _)| c == cpu)?;
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
                .irqbalance
                .as_ref()
                .map(|i| i.banned_cpus.to_list_string())
                .unwrap_or_default(),
        },
        irq: IrqReport {
            groups: shown_groups(&second.verdicts),
            per_cpu,
        },
        findings,
        collectors: second.collectors.clone(),
        perf: snap.perf.clone(),
        pressure: pressure_report(second),
    }
}

/// Device interrupts per CPU, summed over the IRQs in `keep` (all when `None`).
/// Per CPU, the interrupts of every device IRQ so far.
fn cpu_sums(i: &Interrupts) -> HashMap<u32, u64> {
    let mut sums: HashMap<u32, u64> = HashMap::with_capacity(i.cpus.len());
    for line in &i.irqs {
        for (cpu, count) in i.per_cpu(&line.counts) {
            let sum = sums.entry(cpu).or_default();
            *sum = sum.saturating_add(count);
        }
    }
    sums
}

const BAR_WIDTH: usize = 40;
/// Above this many CPUs the distribution shows the busiest ones only.
const MAX_CPU_ROWS: usize = 64;

pub fn render_text(r: &CheckReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "nodemedic check: {} — 2 samples {:.1}s apart",
        r.status.to_uppercase(),
        r.interval_seconds
    );
    let _ = writeln!(
        o,
        "CPUs online {} | isolated {} | nohz_full {} | irqbalance-banned {}",
        or_none(&r.cpus.online),
        or_none(&r.cpus.isolated),
        or_none(&r.cpus.nohz_full),
        or_none(&r.cpus.irqbalance_banned)
    );
    let by_rate = r
        .irq
        .per_cpu
        .iter()
        .any(|c| c.device_interrupts_per_second > 0.0);
    let value = |c: &CpuInterrupts| {
        if by_rate {
            c.device_interrupts_per_second
        } else {
            c.device_interrupts as f64
        }
    };
    let _ = writeln!(
        o,
        "\nDevice interrupts per CPU ({}):",
        if by_rate {
            "per second over the interval"
        } else {
            "since boot; none during the interval"
        }
    );
    let mut rows: Vec<&CpuInterrupts> = r.irq.per_cpu.iter().collect();
    let hidden = rows.len().saturating_sub(MAX_CPU_ROWS);
    if hidden > 0 {
        rows.sort_by(|a, b| value(b).total_cmp(&value(a)));
        rows.truncate(MAX_CPU_ROWS);
        rows.sort_by_key(|c| c.cpu);
    }
    let max = r.irq.per_cpu.iter().map(value).fold(0.0, f64::max);
    let total: f64 = r.irq.per_cpu.iter().map(value).sum();
    for c in rows {
        let v = value(c);
        let len = if max > 0.0 {
            (v / max * BAR_WIDTH as f64).round() as usize
        } else {
            0
        };
        let share = if total > 0.0 { v / total * 100.0 } else { 0.0 };
        let mut extra = String::new();
        if let Some(d) = c.softnet_dropped.filter(|d| *d > 0) {
            let _ = write!(extra, "  dropped +{d}");
        }
        if let Some(s) = c.softnet_squeezed.filter(|s| *s > 0) {
            let _ = write!(extra, "  squeezed +{s}");
        }
        let _ = writeln!(
            o,
            "  CPU{:<4} {:<w$} {:>12} {:>5.1}%{extra}",
            c.cpu,
            "█".repeat(len),
            human(v),
            share,
            w = BAR_WIDTH
        );
    }
    if hidden > 0 {
        let _ = writeln!(o, "  … {hidden} quieter CPUs not shown");
    }
    let _ = writeln!(o, "\nDevice groups:");
    for g in &r.irq.groups {
        let verdict = match (g.collapsed, g.hurting) {
            (true, true) => "COLLAPSED, HURTING",
            (true, false) => "COLLAPSED",
            _ => "ok",
        };
        let mut ident = Vec::new();
        if let Some(n) = g.netdev.as_ref().filter(|n| **n != g.name) {
            ident.push(n.clone());
        }
        if let Some(d) = &g.driver {
            ident.push(d.clone());
        }
        if let Some(p) = g.pci.as_ref().filter(|p| !g.name.contains(p.as_str())) {
            ident.push(p.clone());
        }
        if let Some(n) = g.numa_node {
            ident.push(format!("node {n}"));
        }
        let _ = writeln!(o, "  {} [{}]  {verdict}", g.name, ident.join(", "));
        let cpus = nodemedic_kernel::CpuSet::from_cpus(g.effective_cpus.iter().copied());
        let _ = writeln!(
            o,
            "      {} IRQs ({}) on CPUs {} — {} of {} eligible ({})",
            g.irqs.len(),
            list(&g.irqs),
            or_none(&cpus.to_list_string()),
            g.effective_cpus.len(),
            g.eligible_cpus,
            or_none(&g.eligible_cpu_list)
        );
        if let (Some(cpu), Some(share)) = (g.evidence.hottest_cpu, g.evidence.hottest_share) {
            let rate = match (g.evidence.share_basis, g.evidence.irq_rate) {
                (Some("rate"), Some(r)) => format!(" of {}/s", human(r)),
                _ => " of its interrupts since boot".to_string(),
            };
            let _ = writeln!(o, "      hottest CPU {cpu}: {:.0}%{rate}", share * 100.0);
        }
    }
    if let Some(p) = &r.perf {
        perf_text(&mut o, p);
    }
    pressure_text(&mut o, &r.pressure);
    if r.findings.is_empty() {
        let _ = writeln!(o, "\nNo findings.");
    } else {
        let _ = writeln!(o, "\nFindings:");
        for f in &r.findings {
            let _ = writeln!(
                o,
                "  [{}] {}: {}",
                f.severity.as_str(),
                f.subject,
                f.message
            );
        }
    }
    o
}

fn perf_text(o: &mut String, p: &nodemedic_kernel::perf::PerfProbes) {
    let _ = writeln!(o, "\nperf-event outputs and wakeups (eBPF probes):");
    if p.down_reason.is_some() {
        // The reason is in the findings below: said once.
        let _ = writeln!(o, "  probes down (the reason is under Findings)");
        return;
    }
    let Some(r) = &p.rates else {
        let _ = writeln!(o, "  no rates yet");
        return;
    };
    let _ = writeln!(
        o,
        "  {} outputs/s, {} wakeups/s ({:.0}% of outputs wake a reader), probes attached as {}",
        human(r.outputs_per_second),
        human(r.wakeups_per_second),
        r.wakeup_ratio * 100.0,
        p.method.as_deref().unwrap_or("?")
    );
    let busy: Vec<_> = r
        .owners
        .iter()
        .filter(|w| w.outputs_per_second > 0.0 || w.wakeups_per_second > 0.0)
        .collect();
    if busy.is_empty() {
        let _ = writeln!(o, "  no perf-event activity during the interval");
    }
    for w in busy {
        let _ = writeln!(
            o,
            "  {:>8} {:<16} {:>10} outputs/s {:>10} wakeups/s",
            w.pid,
            w.comm,
            human(w.outputs_per_second),
            human(w.wakeups_per_second)
        );
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.1}%", v * 100.0))
}

fn pressure_text(o: &mut String, p: &PressureReport) {
    let _ = writeln!(
        o,
        "\nPressure (share of the interval in which work waited):"
    );
    match (&p.node, &p.node_unavailable) {
        (Some(node), _) => {
            let parts: Vec<String> = ["cpu", "memory", "io", "irq"]
                .iter()
                .filter_map(|r| {
                    let n = node.get(*r)?;
                    let mut s = format!("{r} some {}", pct(n.some));
                    if *r != "cpu" {
                        let _ = write!(s, " full {}", pct(n.full));
                    }
                    Some(s)
                })
                .collect();
            let _ = writeln!(o, "  node: {}", parts.join(" | "));
        }
        (None, Some(reason)) => {
            let _ = writeln!(o, "  node: no PSI: {reason}");
        }
        (None, None) => {
            let _ = writeln!(o, "  node: no PSI data");
        }
    }
    if let Some(m) = &p.cgroup_mounts {
        let mut parts = Vec::new();
        if let Some(c) = &m.cpu {
            parts.push(format!("cgroup v1 cpu at {}", c.display()));
        }
        if let Some(u) = &m.unified {
            parts.push(format!("cgroup v2 at {}", u.display()));
        }
        let how = if p.cgroup_mounts_from_mountinfo == Some(true) {
            "from mountinfo"
        } else {
            "by the directory layout"
        };
        let _ = writeln!(o, "  cgroups: {} ({how})", parts.join(", "));
    }
    if p.cgroups.is_empty() {
        let _ = writeln!(o, "  no pods or services found in the cgroup hierarchy");
        return;
    }
    let row = |o: &mut String, c: &CgroupRates| {
        let quota = c
            .quota_cores
            .map_or_else(|| "none".into(), |q| format!("{q:.2}"));
        let used = c
            .cpu_usage_cores
            .map_or_else(|| "-".into(), |u| format!("{u:.2}"));
        let _ = writeln!(
            o,
            "    {:<48} cpu wait {:>6} mem wait {:>6} throttled {:>6} quota {:>6} used {:>5}{}{}",
            c.name,
            pct(c.cpu_some_ratio),
            pct(c.memory_some_ratio),
            pct(c.throttled_ratio),
            quota,
            used,
            if c.quota_bound { "  QUOTA-BOUND" } else { "" },
            if c.starved { "  STARVED" } else { "" },
        );
    };
    let _ = writeln!(o, "  most pressured cgroups (CPU wait):");
    for c in p.cgroups.iter().take(p.top) {
        row(o, c);
    }
    let mut throttled: Vec<&CgroupRates> = p
        .cgroups
        .iter()
        .filter(|c| c.throttled_ratio.is_some_and(|t| t > 0.0))
        .collect();
    throttled.sort_by(|a, b| {
        b.throttled_ratio
            .unwrap_or(0.0)
            .total_cmp(&a.throttled_ratio.unwrap_or(0.0))
    });
    if throttled.is_empty() {
        let _ = writeln!(
            o,
            "  no cgroup was throttled by its CPU quota during the interval"
        );
    } else {
        let _ = writeln!(o, "  most throttled cgroups (share of CFS periods):");
        for c in throttled.into_iter().take(p.top) {
            row(o, c);
        }
    }
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}

/// IRQ numbers as a compact list (`30-38,41`).
fn list(irqs: &[u32]) -> String {
    let mut sorted = irqs.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    nodemedic_kernel::cpuset::ranges_string(sorted)
}

fn human(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
