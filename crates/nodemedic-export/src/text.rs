//! `check`'s text report: per-CPU bars, device groups, probes, pressure, findings.

use std::fmt::Write;

use nodemedic_collect::sources::pressure::PsiResource;
use nodemedic_collect::sources::tuning::{Queried, TuningSettings};
use nodemedic_kernel::mounts::CgroupMounts;
use nodemedic_sample::verdict::{CgroupRates, ShareBasis};
use nodemedic_sample::{Finding, FindingKind};

use crate::report::{CheckReport, CpuInterrupts, GroupReport, PressureReport, TuningReport};

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
    cpu_bars_text(&mut o, &r.irq.per_cpu);
    groups_text(&mut o, &r.irq.groups);
    if let Some(p) = &r.perf {
        perf_text(&mut o, p);
    }
    pressure_text(&mut o, &r.pressure);
    tuning_text(&mut o, &r.tuning);
    host_access_text(&mut o, &r.host_access);
    findings_text(&mut o, &r.findings);
    o
}

/// The labels nodemedic runs under, and whether the host mounts it reads are read-only (a
/// writable one is a finding, said in full under Findings).
fn host_access_text(o: &mut String, h: &nodemedic_sample::host::HostAccess) {
    let _ = writeln!(o, "\nHost access:");
    let active = h
        .lsm
        .active
        .as_ref()
        .map(|a| format!(" (active LSMs: {})", a.join(",")))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "  runs under: {}{active}",
        h.lsm.labels_text().as_deref().unwrap_or("no LSM label")
    );
    let roots: Vec<String> = h
        .read_only
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    match (&h.mounts_unchecked, h.writable_mounts.len()) {
        (Some(why), _) => {
            let _ = writeln!(o, "  host mounts: not checked: {why}");
        }
        (None, 0) => {
            let _ = writeln!(o, "  host mounts: read-only under {}", roots.join(", "));
        }
        (None, n) => {
            let _ = writeln!(
                o,
                "  host mounts: {n} WRITABLE under {} (see Findings)",
                roots.join(", ")
            );
        }
    }
}

/// A bar per CPU of its device interrupts, by rate when there were any during the interval.
fn cpu_bars_text(o: &mut String, per_cpu: &[CpuInterrupts]) {
    let by_rate = per_cpu.iter().any(|c| c.device_interrupts_per_second > 0.0);
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
    let mut rows: Vec<&CpuInterrupts> = per_cpu.iter().collect();
    let hidden = rows.len().saturating_sub(MAX_CPU_ROWS);
    if hidden > 0 {
        rows.sort_by(|a, b| value(b).total_cmp(&value(a)));
        rows.truncate(MAX_CPU_ROWS);
        rows.sort_by_key(|c| c.cpu);
    }
    let max = per_cpu.iter().map(value).fold(0.0, f64::max);
    let total: f64 = per_cpu.iter().map(value).sum();
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
}

/// Each device group: what it is, its verdict, where its IRQs go.
fn groups_text(o: &mut String, groups: &[GroupReport]) {
    let _ = writeln!(o, "\nDevice groups:");
    for GroupReport(v) in groups {
        let g = &v.group;
        let verdict = match (v.collapsed, v.hurting) {
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
        let _ = writeln!(
            o,
            "      {} IRQs ({}) on CPUs {} — {} of {} eligible ({})",
            g.irqs.len(),
            list(&g.irqs),
            or_none(&g.effective_cpus.to_list_string()),
            g.effective_cpus.len(),
            g.eligible_cpus.len(),
            or_none(&g.eligible_cpus.to_list_string())
        );
        if let (Some(cpu), Some(share)) = (v.evidence.hottest_cpu, v.evidence.hottest_share) {
            let rate = match (v.evidence.share_basis, v.evidence.irq_rate) {
                (Some(ShareBasis::Rate), Some(r)) => format!(" of {}/s", human(r)),
                _ => " of its interrupts since boot".to_string(),
            };
            let _ = writeln!(o, "      hottest CPU {cpu}: {:.0}%{rate}", share * 100.0);
        }
    }
}

/// Findings, one line each.
fn findings_text(o: &mut String, findings: &[Finding]) {
    if findings.is_empty() {
        let _ = writeln!(o, "\nNo findings.");
    } else {
        let _ = writeln!(o, "\nFindings:");
        for f in findings {
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
}

fn perf_text(o: &mut String, p: &nodemedic_sample::perf::PerfProbes) {
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
        cgroup_mounts_text(o, m, p.cgroup_mounts_from_mountinfo == Some(true));
    }
    let cgroups = p.cgroups.as_deref().unwrap_or(&[]);
    if cgroups.is_empty() {
        let _ = writeln!(o, "  no pods or services found in the cgroup hierarchy");
        return;
    }
    let _ = writeln!(o, "  most pressured cgroups (CPU wait):");
    for c in cgroups.iter().take(p.top) {
        cgroup_row(o, c);
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
            cgroup_row(o, c);
        }
    }
}

/// Where the cgroup hierarchies are, how that was found, and a warning when the container
/// can write to them.
fn cgroup_mounts_text(o: &mut String, m: &CgroupMounts, from_mountinfo: bool) {
    let mut parts = Vec::new();
    if let Some(c) = &m.cpu {
        parts.push(format!("cgroup v1 cpu at {}", c.display()));
    }
    if let Some(u) = &m.unified {
        parts.push(format!("cgroup v2 at {}", u.display()));
    }
    let how = if from_mountinfo {
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
             mount it read-only with every mount below it (the chart's cgroupMount: \
             recursiveReadOnly) or each hierarchy on its own (cgroupV1Hierarchies)",
            list.join(", ")
        );
    }
}

/// One cgroup's line: its waits, throttling, quota and use.
fn cgroup_row(o: &mut String, c: &CgroupRates) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(cpu: u32, since_boot: u64, per_second: f64) -> CpuInterrupts {
        CpuInterrupts {
            cpu,
            device_interrupts: since_boot,
            device_interrupts_per_second: per_second,
            net_rx_per_second: None,
            softnet_dropped: None,
            softnet_squeezed: None,
        }
    }

    fn rows(text: &str) -> Vec<&str> {
        text.lines()
            .filter(|l| l.trim_start().starts_with("CPU"))
            .collect()
    }

    #[test]
    fn a_large_node_shows_its_busiest_cpus_in_cpu_order() {
        // CPU n takes n interrupts a second: the 6 quietest are left out.
        let per_cpu: Vec<CpuInterrupts> = (0..70).map(|n| cpu(n, 1, n as f64)).collect();
        let mut o = String::new();
        cpu_bars_text(&mut o, &per_cpu);
        let shown = rows(&o);
        assert_eq!(shown.len(), MAX_CPU_ROWS, "{o}");
        assert!(shown[0].trim_start().starts_with("CPU6 "), "{o}");
        assert!(shown[63].trim_start().starts_with("CPU69 "), "{o}");
        assert_eq!(shown[63].matches('█').count(), BAR_WIDTH, "{o}");
        assert!(o.contains("per second over the interval"), "{o}");
        assert!(o.ends_with("  … 6 quieter CPUs not shown\n"), "{o}");
    }

    #[test]
    fn a_quiet_interval_shows_counts_since_boot() {
        let per_cpu = [cpu(0, 300, 0.0), cpu(1, 100, 0.0)];
        let mut o = String::new();
        cpu_bars_text(&mut o, &per_cpu);
        assert!(o.contains("since boot; none during the interval"), "{o}");
        let shown = rows(&o);
        assert_eq!(shown.len(), 2, "{o}");
        assert_eq!(shown[0].matches('█').count(), BAR_WIDTH, "{o}");
        assert!(shown[0].ends_with(" 75.0%"), "{o}");
        assert_eq!(shown[1].matches('█').count(), 13, "{o}");
        assert!(!o.contains("quieter CPUs"), "{o}");
    }

    /// The labels nodemedic runs under, and the host mounts: read-only, writable (said in full
    /// under Findings) or not checked, with why.
    #[test]
    fn host_access_names_the_labels_and_the_mounts() {
        use nodemedic_kernel::lsm::{LsmContext, LsmFiles};
        use nodemedic_kernel::mounts::WritableMount;
        use nodemedic_sample::host::HostAccess;
        let mut h = HostAccess {
            lsm: LsmContext::from_files(&LsmFiles {
                apparmor_current: Some("cri-containerd.apparmor.d (enforce)\n"),
                lsm: Some("lockdown,capability,yama,apparmor\n"),
                ..Default::default()
            }),
            read_only: vec!["/host".into()],
            ..HostAccess::default()
        };
        let mut o = String::new();
        host_access_text(&mut o, &h);
        assert_eq!(
            o,
            "\nHost access:\n  runs under: AppArmor cri-containerd.apparmor.d (enforce) \
             (active LSMs: lockdown,capability,yama,apparmor)\n  host mounts: read-only under \
             /host\n"
        );
        h.writable_mounts = vec![WritableMount {
            mount_point: "/host/sys/kernel/security".into(),
            fs_type: "securityfs".into(),
        }];
        let mut o = String::new();
        host_access_text(&mut o, &h);
        assert!(
            o.ends_with("  host mounts: 1 WRITABLE under /host (see Findings)\n"),
            "{o}"
        );
        let own = HostAccess {
            mounts_unchecked: Some("the node's own tree is read".into()),
            ..HostAccess::default()
        };
        let mut o = String::new();
        host_access_text(&mut o, &own);
        assert_eq!(
            o,
            "\nHost access:\n  runs under: no LSM label\n  host mounts: not checked: the \
             node's own tree is read\n"
        );
    }

    #[test]
    fn the_cgroup_mounts_say_how_they_were_found_and_warn_when_writable() {
        let mut m = CgroupMounts {
            cpu: Some("/host/sys/fs/cgroup/cpu,cpuacct".into()),
            unified: Some("/host/sys/fs/cgroup/unified".into()),
            ..CgroupMounts::default()
        };
        let mut o = String::new();
        cgroup_mounts_text(&mut o, &m, true);
        assert_eq!(
            o,
            "  cgroups: cgroup v1 cpu at /host/sys/fs/cgroup/cpu,cpuacct, \
             cgroup v2 at /host/sys/fs/cgroup/unified (from mountinfo)\n"
        );
        m.writable = vec!["/host/sys/fs/cgroup/cpu,cpuacct".into()];
        let mut o = String::new();
        cgroup_mounts_text(&mut o, &m, false);
        let lines: Vec<&str> = o.lines().collect();
        assert_eq!(lines.len(), 2, "{o}");
        assert!(lines[0].ends_with("(by the directory layout)"), "{o}");
        assert!(
            lines[1].starts_with(
                "  WARNING: the host's cgroup tree is writable from this container at \
                 /host/sys/fs/cgroup/cpu,cpuacct: mount it read-only with every mount below it"
            ),
            "{o}"
        );
    }
}
