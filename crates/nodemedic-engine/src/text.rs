//! `check`'s text report: per-CPU bars, device groups, probes, pressure, findings.

use std::fmt::Write;

use nodemedic_detect::collapse::ShareBasis;
use nodemedic_detect::pressure::CgroupRates;
use nodemedic_detect::FindingKind;
use nodemedic_kernel::psi::PsiResource;
use nodemedic_kernel::tuning::{Queried, TuningSettings};

use crate::report::{CheckReport, CpuInterrupts, PressureReport, TuningReport};

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
                (Some(ShareBasis::Rate), Some(r)) => format!(" of {}/s", human(r)),
                _ => " of its interrupts since boot".to_string(),
            };
            let _ = writeln!(o, "      hottest CPU {cpu}: {:.0}%{rate}", share * 100.0);
        }
    }
    if let Some(p) = &r.perf {
        perf_text(&mut o, p);
    }
    pressure_text(&mut o, &r.pressure);
    tuning_text(&mut o, &r.tuning);
    if r.findings.is_empty() {
        let _ = writeln!(o, "\nNo findings.");
    } else {
        let _ = writeln!(o, "\nFindings:");
        for f in &r.findings {
            // Said in full under Tuning above: here one line each.
            if let FindingKind::Tuning(rule) = f.kind {
                let _ = writeln!(
                    o,
                    "  [{}] {}: {} (see Tuning)",
                    f.severity.as_str(),
                    f.subject,
                    rule.as_str()
                );
                continue;
            }
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
            let parts: Vec<String> = PsiResource::ALL
                .iter()
                .filter_map(|r| {
                    let n = node.get(r)?;
                    let mut s = format!("{r} some {}", pct(n.some));
                    if *r != PsiResource::Cpu {
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
        if !m.writable.is_empty() {
            let list: Vec<String> = m.writable.iter().map(|p| p.display().to_string()).collect();
            let _ = writeln!(
                o,
                "  WARNING: the host's cgroup tree is writable from this container at {}: \
                 mount each hierarchy read-only (the chart's cgroupV1Hierarchies)",
                list.join(", ")
            );
        }
    }
    let cgroups = p.cgroups.as_deref().unwrap_or(&[]);
    if cgroups.is_empty() {
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
    for c in cgroups.iter().take(p.top) {
        row(o, c);
    }
    let mut throttled: Vec<&CgroupRates> = cgroups
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

fn tuning_text(o: &mut String, t: &TuningReport) {
    let _ = writeln!(
        o,
        "\nTuning (settings that cost I/O throughput, and what this node shows of them):"
    );
    if let Some(reason) = &t.unavailable {
        let _ = writeln!(o, "  not audited: {reason}");
        return;
    }
    if let Some(s) = &t.settings {
        settings_text(o, s);
    }
    if t.findings.is_empty() {
        let _ = writeln!(o, "  nothing to report");
    }
    for f in &t.findings {
        let _ = writeln!(
            o,
            "  [{}] {} ({}): {}",
            f.severity.as_str(),
            f.subject,
            f.rule.as_str(),
            f.evidence
        );
        let _ = writeln!(o, "      cost: {}", f.cost);
        let _ = writeln!(o, "      fix:  {}", f.fix);
    }
}

/// One line per source of what the tuning collector read.
fn settings_text(o: &mut String, s: &TuningSettings) {
    for (name, nic) in &s.nics {
        let channels = match &nic.channels {
            Queried::Read(c) => format!(
                "channels rx {}/{} tx {}/{} combined {}/{}",
                c.rx, c.rx_max, c.tx, c.tx_max, c.combined, c.combined_max
            ),
            Queried::Absent(why) => format!("channels unknown ({why})"),
        };
        let rings = match &nic.rings {
            Queried::Read(r) => format!("rings rx {}/{} tx {}/{}", r.rx, r.rx_max, r.tx, r.tx_max),
            Queried::Absent(_) => "rings unknown".into(),
        };
        let _ = writeln!(
            o,
            "  {name}: {} RX / {} TX queues, {channels}, {rings}, RPS {}",
            nic.rx_queues,
            nic.tx_queues,
            if nic.rps_enabled() { "on" } else { "off" }
        );
    }
    let governors: Vec<String> = s
        .cpufreq_policies_by_governor()
        .into_iter()
        .map(|((governor, driver), n)| format!("{n}× {governor} ({driver})"))
        .collect();
    let _ = writeln!(o, "  cpufreq: {}", joined_or(&governors, "no policies"));
    let iommu: Vec<String> = s
        .iommu_groups_by_type()
        .into_iter()
        .map(|(kind, n)| format!("{n}× {kind}"))
        .collect();
    let _ = writeln!(o, "  IOMMU groups: {}", joined_or(&iommu, "none"));
    if let Some((_, text)) = s.srso() {
        let _ = writeln!(o, "  SRSO: {text}");
    }
    let n = &s.net_core;
    let num = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
    let _ = writeln!(
        o,
        "  net.core: netdev_budget {}, netdev_budget_usecs {}, netdev_max_backlog {}",
        num(n.netdev_budget),
        num(n.netdev_budget_usecs),
        num(n.netdev_max_backlog)
    );
    if let Some(thp) = &s.thp {
        let _ = writeln!(o, "  transparent hugepages: {}", thp.selected);
    }
}

fn joined_or(parts: &[String], none: &str) -> String {
    if parts.is_empty() {
        none.to_string()
    } else {
        parts.join(", ")
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
