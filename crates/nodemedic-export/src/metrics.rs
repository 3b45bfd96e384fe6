//! Which series nodemedic exposes, and their names.
//!
//! Cardinality is budgeted: by default everything is per IRQ, per CPU or per device group,
//! never per IRQ × CPU (a 256-CPU node with 400 IRQs would otherwise expose 100,000 series).
//! The full matrix is opt-in.

use std::fmt::Write;

use nodemedic_kernel::interrupts::Interrupts;
use nodemedic_kernel::irqbalance::IrqbalancePackage;
use nodemedic_sample::remedy::{Mode, RemedyState};
use nodemedic_sample::Snapshot;
use nodemedic_sample::{CollectorState, CollectorStatus};
use nodemedic_sample::{GroupVerdict, TuningVerdict};
use serde::{Deserialize, Serialize};

use crate::encoder::{Encoder, Format, Kind};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsOptions {
    /// `nodemedic_irq_cpu_interrupts_total{irq,cpu}`: one series per IRQ per CPU.
    pub per_irq_per_cpu: bool,
    /// Architecture interrupts (`LOC`, `RES`, `CAL`, `TLB`, …) per CPU instead of node-wide.
    pub per_cpu_arch_interrupts: bool,
    /// Softirq types exported per CPU.
    pub softirq_types: Vec<String>,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self {
            per_irq_per_cpu: false,
            per_cpu_arch_interrupts: false,
            softirq_types: vec!["NET_RX".into(), "NET_TX".into()],
        }
    }
}

pub use nodemedic_sample::snapshot::ProcessStats;

/// Everything one exposition is made of.
pub struct ExportInput<'a> {
    pub snapshot: Option<&'a Snapshot>,
    pub verdicts: &'a [GroupVerdict],
    pub collectors: &'a [CollectorStatus],
    pub samples_total: u64,
    pub process: Option<ProcessStats>,
    /// The remediator's state after its latest sample (`None`: no remediator in this process).
    pub remediation: Option<&'a RemedyState>,
    /// The pressure detector's verdicts (quota-bound, starved, node saturated).
    pub pressure: Option<&'a nodemedic_sample::PressureVerdict>,
    /// What the daemon found at start about its access to the host.
    pub host: Option<&'a nodemedic_sample::host::HostAccess>,
}

pub fn render(input: &ExportInput<'_>, opts: &MetricsOptions, format: Format) -> (String, usize) {
    render_with_tuning(input, None, opts, format)
}

/// [`render`] plus the tuning audit's findings (`nodemedic_tuning_finding`), which come from
/// its detector's verdict rather than from the snapshot. The verdict is an argument of its own
/// rather than a field of [`ExportInput`] so that code building an `ExportInput` without an
/// audit (tests, benches) does not have to change; the tuning settings in the snapshot are
/// rendered either way.
pub fn render_with_tuning(
    input: &ExportInput<'_>,
    tuning: Option<&TuningVerdict>,
    opts: &MetricsOptions,
    format: Format,
) -> (String, usize) {
    render_with_tuning_into(
        input,
        tuning,
        opts,
        format,
        Vec::new(),
        &mut RenderScratch::default(),
    )
}

/// [`render_with_tuning`] written into `buf` (emptied first), a buffer of a past rendering,
/// with the lists of a past rendering in `scratch`.
pub fn render_with_tuning_into(
    input: &ExportInput<'_>,
    tuning: Option<&TuningVerdict>,
    opts: &MetricsOptions,
    format: Format,
    buf: Vec<u8>,
    scratch: &mut RenderScratch,
) -> (String, usize) {
    let mut e = Encoder::with_buffer(format, buf, expected_bytes(input.snapshot, opts));
    self_metrics(&mut e, input);
    if let Some(h) = input.host {
        host_access(&mut e, h);
    }
    if let Some(snap) = input.snapshot {
        node_facts(&mut e, snap, input.remediation);
        topology(&mut e, snap);
        interrupts(&mut e, snap, input.verdicts, opts, scratch);
        softirqs(&mut e, snap, opts);
        // Every collector that renders its own series, in the order they run.
        for render in nodemedic_collect::registry::declarations()
            .into_iter()
            .filter_map(|d| d.render)
        {
            render(&mut e, snap);
        }
        crate::pressure::verdicts(&mut e, snap, input.pressure);
        crate::tuning::settings(&mut e, snap);
    }
    crate::tuning::findings(&mut e, tuning);
    groups(&mut e, input.verdicts);
    if let Some(r) = input.remediation {
        remediation(&mut e, r);
    }
    let series = e.series();
    (e.finish(), series)
}

/// About how long the exposition of `snap` is, so that the output is allocated once: per IRQ
/// its four series (~310 bytes with their labels), per CPU six (~340 bytes), and the rest. An
/// estimate: a longer text grows the buffer once more, as it would have anyway.
fn expected_bytes(snap: Option<&Snapshot>, opts: &MetricsOptions) -> usize {
    let Some(ints) = snap.and_then(|s| s.interrupts.as_deref()) else {
        return 64 * 1024;
    };
    let (irqs, cpus) = (ints.irqs.len(), ints.cpus.len());
    let matrix = if opts.per_irq_per_cpu {
        irqs * cpus * 48
    } else {
        0
    };
    32 * 1024 + irqs * 320 + cpus * 340 + matrix
}

/// Label values written back to back into one buffer: a value per CPU or per IRQ without a
/// `String` apiece (a 256-CPU render made ~1,300 of them).
#[derive(Default)]
struct Values {
    text: String,
    ends: Vec<usize>,
}

impl Values {
    /// Empties the list for `values` values of about `bytes` bytes in all, keeping its memory.
    fn refill(&mut self, values: usize, bytes: usize) {
        self.text.clear();
        self.ends.clear();
        self.text.reserve(bytes);
        self.ends.reserve(values);
    }

    /// Appends the value `write` writes.
    fn push(&mut self, write: impl FnOnce(&mut String)) {
        write(&mut self.text);
        self.ends.push(self.text.len());
    }

    fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| self.text.get(start..end).unwrap_or(""))
    }
}

/// The host mounts the daemon's container can write, when they were checked (a container
/// reading the host's tree; on the node itself, or without mountinfo, there is no series).
fn host_access(e: &mut Encoder, h: &nodemedic_sample::host::HostAccess) {
    if !h.mounts_checked() {
        return;
    }
    e.family(
        "nodemedic_host_writable_mounts",
        Kind::Gauge,
        "Mounts of the host's tree under the paths nodemedic reads, expected read-only, that its container can write (0 on a safe install): the runtime did not make them read-only all the way down. /status names them (host_access.writable_mounts).",
    );
    e.sample(&[], h.writable_mounts.len() as f64);
}

fn self_metrics(e: &mut Encoder, input: &ExportInput<'_>) {
    e.family(
        "nodemedic_build",
        Kind::Info,
        "A metric with a constant '1' value labeled by nodemedic's version, the commit it was built from, the Rust compiler and the target it was built for.",
    );
    e.sample(&crate::build_info::BUILD_INFO.labels(), 1.0);
    // A collector switched off in the configuration is not failing: like node_exporter's
    // disabled collectors it has no series (its state is on /status).
    let running: Vec<&CollectorStatus> = input
        .collectors
        .iter()
        .filter(|c| !matches!(c.state, CollectorState::Disabled { .. }))
        .collect();
    e.family(
        "nodemedic_scrape_collector_success",
        Kind::Gauge,
        "Whether the collector succeeded in the last sample (1) or failed (0); see /status for the reason.",
    );
    for c in &running {
        e.sample(
            &[("collector", c.name.as_str())],
            f64::from(u8::from(c.is_success())),
        );
    }
    e.family(
        "nodemedic_scrape_collector_duration_seconds",
        Kind::Gauge,
        "How long the collector took in the last sample.",
    );
    for c in &running {
        e.sample(&[("collector", c.name.as_str())], c.last_duration_seconds);
    }
    e.family(
        "nodemedic_scrape_collector_warnings",
        Kind::Gauge,
        "Problems the collector worked around in the last sample (skipped lines, vanished IRQs); see /status.",
    );
    for c in &running {
        e.sample(&[("collector", c.name.as_str())], c.warnings.len() as f64);
    }
    e.family(
        "nodemedic_samples",
        Kind::Counter,
        "Samples taken since the daemon started.",
    );
    e.sample(&[], input.samples_total as f64);
    if let Some(snap) = input.snapshot {
        e.family(
            "nodemedic_last_sample_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the sample these metrics come from.",
        );
        e.sample(&[], snap.timestamp);
    }
    if let Some(p) = input.process {
        e.family(
            "process_cpu_seconds",
            Kind::Counter,
            "Total user and system CPU time spent in seconds.",
        );
        e.sample(&[], p.cpu_seconds);
        e.family(
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory size in bytes.",
        );
        e.sample(&[], p.resident_memory_bytes);
        e.family(
            "process_virtual_memory_bytes",
            Kind::Gauge,
            "Virtual memory size in bytes.",
        );
        e.sample(&[], p.virtual_memory_bytes);
        e.family(
            "process_start_time_seconds",
            Kind::Gauge,
            "Start time of the process since unix epoch in seconds.",
        );
        e.sample(&[], p.start_time_seconds);
        e.family(
            "process_open_fds",
            Kind::Gauge,
            "Number of open file descriptors.",
        );
        e.sample(&[], p.open_fds);
    }
}

fn topology(e: &mut Encoder, snap: &Snapshot) {
    let Some(t) = &snap.topology else {
        return;
    };
    e.family(
        "nodemedic_cpus",
        Kind::Gauge,
        "CPUs by state: online, isolated, nohz_full, irqbalance_banned (from irqbalance's config file).",
    );
    e.sample(&[("state", "online")], t.online.len() as f64);
    e.sample(&[("state", "isolated")], t.isolated.len() as f64);
    e.sample(&[("state", "nohz_full")], t.nohz_full.len() as f64);
    if let Some(irqb) = &snap.irqbalance {
        e.sample(
            &[("state", "irqbalance_banned")],
            irqb.banned_cpus.len() as f64,
        );
    }
}

fn interrupts(
    e: &mut Encoder,
    snap: &Snapshot,
    verdicts: &[GroupVerdict],
    opts: &MetricsOptions,
    scratch: &mut RenderScratch,
) {
    let Some(ints) = &snap.interrupts else {
        return;
    };
    let labels = irq_labels(ints, verdicts, scratch);
    e.family(
        "nodemedic_irq_interrupts",
        Kind::Counter,
        "Interrupts handled per IRQ, summed over CPUs (from /proc/interrupts).",
    );
    // Numbers are written as labels from a buffer on the stack: a value list of every CPU's
    // number was two allocations per family, mapped and unmapped per render by musl's
    // allocator on a big node (BENCHMARKS.md, "Fewer files, fewer calls, faster zeros").
    let mut num = itoa::Buffer::new();
    for (line, (group, name)) in ints.irqs.iter().zip(labels.iter()) {
        e.sample(
            &[
                ("irq", num.format(line.irq)),
                ("group", group),
                ("name", name),
            ],
            ints.counts(line).total() as f64,
        );
    }
    irq_placement(e, snap, ints, &labels);
    let per_cpu = device_interrupts_per_cpu(ints);
    e.family(
        "nodemedic_cpu_device_interrupts",
        Kind::Counter,
        "Device (numbered) interrupts handled per CPU, summed over IRQs.",
    );
    for (cpu, total) in ints.cpus.iter().zip(&per_cpu) {
        e.sample(&[("cpu", num.format(*cpu))], *total as f64);
    }
    e.family(
        "nodemedic_arch_interrupts",
        Kind::Counter,
        "Architecture interrupts by type (LOC, RES, CAL, TLB, NMI, IPI…) from /proc/interrupts.",
    );
    for arch in &ints.arch {
        if opts.per_cpu_arch_interrupts && arch.counts.len() > 1 {
            for (cpu, count) in ints.cpus.iter().zip(&arch.counts) {
                e.sample(
                    &[("type", &arch.name), ("cpu", num.format(*cpu))],
                    *count as f64,
                );
            }
        } else {
            let total = arch.counts.iter().fold(0u64, |a, c| a.saturating_add(*c));
            e.sample(&[("type", &arch.name)], total as f64);
        }
    }
    if opts.per_irq_per_cpu {
        e.family(
            "nodemedic_irq_cpu_interrupts",
            Kind::Counter,
            "Interrupts per IRQ per CPU (enabled by metrics.per_irq_per_cpu).",
        );
        let mut cpu_num = itoa::Buffer::new();
        for line in &ints.irqs {
            let irq = num.format(line.irq);
            for (cpu, count) in ints.cpus.iter().zip(ints.counts(line).dense()) {
                e.sample(&[("irq", irq), ("cpu", cpu_num.format(*cpu))], count as f64);
            }
        }
    }
}

/// Lists a rendering builds besides its text, kept by whoever renders again (the endpoint,
/// between scrapes) so that a rendering allocates them once: on a 256-CPU node they are 50
/// KiB, which musl's allocator mapped and unmapped every scrape. `Default` for a one-off.
#[derive(Default)]
pub struct RenderScratch {
    /// Each IRQ row's device group, as an index into the verdicts ([`NO_GROUP`]: none).
    groups: Vec<u32>,
    /// Each IRQ row's handlers, comma-separated.
    names: Values,
}

const NO_GROUP: u32 = u32::MAX;

/// Each IRQ's labels besides its number, aligned with `ints.irqs`: its device group (empty
/// when in none) and its handlers.
struct IrqLabels<'a> {
    groups: &'a [u32],
    names: &'a Values,
    verdicts: &'a [GroupVerdict],
}

impl IrqLabels<'_> {
    fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let group = |g: &u32| {
            self.verdicts
                .get(*g as usize)
                .map_or("", |v| v.group.name.as_str())
        };
        self.groups.iter().map(group).zip(self.names.iter())
    }
}

fn irq_labels<'a>(
    ints: &Interrupts,
    verdicts: &'a [GroupVerdict],
    scratch: &'a mut RenderScratch,
) -> IrqLabels<'a> {
    // Each row's group, placed by the row's IRQ: the kernel prints IRQs in order, so a
    // binary search finds the rows, where a hash map of every IRQ was built each render.
    // Every row with that IRQ gets the group (a damaged table can repeat one), and a later
    // group of the same IRQ wins, as with the map.
    let groups = &mut scratch.groups;
    groups.clear();
    groups.resize(ints.irqs.len(), NO_GROUP);
    let ordered = ints.irqs.is_sorted_by_key(|l| l.irq);
    for (index, v) in verdicts.iter().enumerate() {
        let index = u32::try_from(index).unwrap_or(NO_GROUP);
        for &irq in v.group.irqs.iter().chain(&v.group.other_irqs) {
            let rows = if ordered {
                let from = ints.irqs.partition_point(|l| l.irq < irq);
                from..from + ints.irqs[from..].partition_point(|l| l.irq == irq)
            } else {
                0..ints.irqs.len()
            };
            for r in rows {
                if ints.irqs.get(r).is_some_and(|l| l.irq == irq) {
                    if let Some(group) = groups.get_mut(r) {
                        *group = index;
                    }
                }
            }
        }
    }
    let names = &mut scratch.names;
    names.refill(ints.irqs.len(), ints.irqs.len() * 24);
    for line in &ints.irqs {
        names.push(|t| {
            for (i, action) in line.desc.actions.iter().enumerate() {
                if i > 0 {
                    t.push(',');
                }
                t.push_str(action);
            }
        });
    }
    IrqLabels {
        groups,
        names,
        verdicts,
    }
}

/// Where each IRQ may go and goes: its lowest delivery CPU and the sizes of its affinities.
fn irq_placement(e: &mut Encoder, snap: &Snapshot, ints: &Interrupts, labels: &IrqLabels<'_>) {
    let rows = || {
        ints.irqs
            .iter()
            .zip(labels.iter())
            .filter_map(|(line, (group, _))| Some((snap.affinity.get(&line.irq)?, line.irq, group)))
    };
    let mut num = itoa::Buffer::new();
    e.family(
        "nodemedic_irq_effective_cpu",
        Kind::Gauge,
        "Lowest CPU the IRQ is delivered to (effective_affinity, else smp_affinity).",
    );
    for (aff, irq, group) in rows() {
        if let Some(cpu) = aff.delivery_cpus().and_then(|c| c.first()) {
            e.sample(
                &[("irq", num.format(irq)), ("group", group)],
                f64::from(cpu),
            );
        }
    }
    e.family(
        "nodemedic_irq_affinity_cpus",
        Kind::Gauge,
        "Number of CPUs in the IRQ's smp_affinity (where it may be delivered).",
    );
    for (aff, irq, group) in rows() {
        if let Some(smp) = &aff.smp {
            e.sample(
                &[("irq", num.format(irq)), ("group", group)],
                smp.len() as f64,
            );
        }
    }
    e.family(
        "nodemedic_irq_effective_affinity_cpus",
        Kind::Gauge,
        "Number of CPUs in the IRQ's effective_affinity (where it is delivered).",
    );
    for (aff, irq, group) in rows() {
        if let Some(eff) = &aff.effective {
            e.sample(
                &[("irq", num.format(irq)), ("group", group)],
                eff.len() as f64,
            );
        }
    }
}

/// Device interrupts per CPU (aligned with `ints.cpus`), summed over IRQs, plus the IRQs
/// that went away while nodemedic watched, so a freed IRQ does not make the per-CPU counter
/// go backwards.
fn device_interrupts_per_cpu(ints: &Interrupts) -> Vec<u64> {
    let mut per_cpu = vec![0u64; ints.cpus.len()];
    for (i, r) in ints.retired.iter().enumerate().take(per_cpu.len()) {
        per_cpu[i] = *r;
    }
    for line in &ints.irqs {
        for (i, c) in ints.counts(line).nonzero() {
            if let Some(sum) = per_cpu.get_mut(i) {
                *sum = sum.saturating_add(c);
            }
        }
    }
    per_cpu
}

fn softirqs(e: &mut Encoder, snap: &Snapshot, opts: &MetricsOptions) {
    let Some(s) = &snap.softirqs else {
        return;
    };
    e.family(
        "nodemedic_softirqs",
        Kind::Counter,
        "Softirqs handled per CPU and type (from /proc/softirqs).",
    );
    let mut num = itoa::Buffer::new();
    for ty in &opts.softirq_types {
        if let Some(row) = s.row(ty) {
            for (cpu, count) in s.cpus.iter().zip(&row.counts) {
                e.sample(&[("cpu", num.format(*cpu)), ("type", ty)], *count as f64);
            }
        }
    }
}

fn groups(e: &mut Encoder, verdicts: &[GroupVerdict]) {
    // Single-IRQ devices without a PCI address (timer, serial, ACPI) cannot collapse and would
    // only add series.
    let shown: Vec<&GroupVerdict> = verdicts
        .iter()
        .filter(|v| v.group.irqs.len() >= 2 || v.group.pci.is_some())
        .collect();
    e.family(
        "nodemedic_irq_group",
        Kind::Info,
        "Device groups of IRQs, with driver, PCI address, network interface and NUMA node.",
    );
    let mut node = String::new();
    for v in &shown {
        let g = &v.group;
        node.clear();
        if let Some(n) = g.numa_node {
            let _ = write!(node, "{n}");
        }
        e.sample(
            &[
                ("group", &g.name),
                ("driver", g.driver.as_deref().unwrap_or("")),
                ("pci", g.pci.as_deref().unwrap_or("")),
                ("netdev", g.netdev.as_deref().unwrap_or("")),
                ("numa_node", &node),
            ],
            1.0,
        );
    }
    type Value = fn(&GroupVerdict) -> Option<f64>;
    let families: [(&str, &str, Value); 7] = [
        ("nodemedic_irq_group_irqs", "IRQs of the group judged for collapse (data queues when the device has them).", |v| Some(v.group.irqs.len() as f64)),
        ("nodemedic_irq_group_effective_cpus", "Distinct CPUs the group's IRQs are delivered to.", |v| Some(v.group.effective_cpus.len() as f64)),
        ("nodemedic_irq_group_eligible_cpus", "CPUs the group's IRQs could be delivered to (online, not isolated/nohz_full/banned, NUMA-local when known).", |v| Some(v.group.eligible_cpus.len() as f64)),
        ("nodemedic_irq_group_hottest_cpu", "The CPU that handled most of the group's interrupts.", |v| v.evidence.hottest_cpu.map(f64::from)),
        ("nodemedic_irq_group_hottest_cpu_share", "Share (0-1) of the group's interrupts on its hottest CPU: by rate since the previous sample, or by cumulative counts when it had none.", |v| v.evidence.hottest_share),
        ("nodemedic_irq_collapsed", "1 when the group's IRQs are collapsed onto too few CPUs (after hysteresis).", |v| Some(f64::from(u8::from(v.collapsed)))),
        ("nodemedic_irq_hurting", "1 when a collapsed group's hottest CPU is overloaded: most of the interrupt rate, or softnet drops/squeezes (after hysteresis).", |v| Some(f64::from(u8::from(v.hurting)))),
    ];
    for (name, help, value) in families {
        e.family(name, Kind::Gauge, help);
        for v in &shown {
            if let Some(x) = value(v) {
                e.sample(&[("group", &v.group.name)], x);
            }
        }
    }
}

/// What a fleet groups nodes by, node_exporter's `node_uname_info` way: one series of value 1
/// per family, the facts as labels, `unknown` where a fact could not be read (`/status` says
/// why).
fn node_facts(e: &mut Encoder, snap: &Snapshot, remediation: Option<&RemedyState>) {
    let settings = snap.tuning.as_ref().map(|t| &t.settings);
    e.family(
        "nodemedic_node",
        Kind::Info,
        "The node's kernel release and whether it is a virtual machine (cpuinfo's hypervisor flag); unknown where not read.",
    );
    let release = settings
        .and_then(|s| s.kernel_release.as_deref())
        .unwrap_or("unknown");
    let vm = match settings.and_then(|s| s.hypervisor) {
        Some(true) => "true",
        Some(false) => "false",
        None => "unknown",
    };
    e.sample(&[("kernel_release", release), ("virtual_machine", vm)], 1.0);
    e.family(
        "nodemedic_irqbalance",
        Kind::Info,
        "irqbalance's state (systemd's, or not_installed per the package database) and its package version; unknown where not known (see /status).",
    );
    let package = snap.irqbalance.as_ref().map(|c| &c.package);
    let asked = remediation
        .and_then(|r| r.irqbalance.as_ref())
        .map(|s| s.as_str());
    let state = match (asked, package) {
        (Some(s), _) if s != "unknown" => s,
        (_, Some(IrqbalancePackage::NotInstalled { .. })) => "not_installed",
        _ => "unknown",
    };
    let version = package.and_then(|p| p.version()).unwrap_or("unknown");
    e.sample(&[("state", state), ("version", version)], 1.0);
}

fn remediation(e: &mut Encoder, r: &RemedyState) {
    e.family(
        "nodemedic_remediation_mode",
        Kind::Gauge,
        "The remediator's mode (1 for the active one): off, dry-run or on; paused is 1 while paused.",
    );
    for m in [Mode::Off, Mode::DryRun, Mode::On] {
        e.sample(
            &[("mode", m.as_str())],
            f64::from(u8::from(r.mode == Some(m))),
        );
    }
    e.family(
        "nodemedic_remediation_paused",
        Kind::Gauge,
        "1 while remediation is paused (config or node annotation).",
    );
    e.sample(&[], f64::from(u8::from(r.paused)));
    e.family(
        "nodemedic_remediation_actions",
        Kind::Counter,
        "Remediation decisions by action (irqbalance_restart, native_rebalance, verify, escalate) and result.",
    );
    for ((action, result), n) in &r.counts {
        e.sample(
            &[("action", action.as_str()), ("result", result.as_str())],
            *n as f64,
        );
    }
    if let Some(ts) = r.last_action_timestamp {
        e.family(
            "nodemedic_remediation_last_action_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the last remediation action carried out or decided in dry-run.",
        );
        e.sample(&[], ts);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The writable host mounts' gauge is there when they were checked, 0 when none is
    /// writable, and absent when they were not (the node's own tree, fixture trees).
    #[test]
    fn host_writable_mounts_only_when_checked() {
        use nodemedic_sample::host::HostAccess;
        let render_host = |h: &HostAccess| {
            let input = ExportInput {
                snapshot: None,
                verdicts: &[],
                collectors: &[],
                samples_total: 0,
                process: None,
                remediation: None,
                pressure: None,
                host: Some(h),
            };
            render(&input, &MetricsOptions::default(), Format::Text).0
        };
        let gauge = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("nodemedic_host_writable_mounts "))
                .map(str::to_owned)
        };
        let mut h = HostAccess {
            read_only: vec!["/host".into()],
            ..HostAccess::default()
        };
        assert_eq!(
            gauge(&render_host(&h)).as_deref(),
            Some("nodemedic_host_writable_mounts 0")
        );
        h.writable_mounts = vec![nodemedic_kernel::mounts::WritableMount {
            mount_point: "/host/sys/fs/bpf".into(),
            fs_type: "bpf".into(),
        }];
        assert_eq!(
            gauge(&render_host(&h)).as_deref(),
            Some("nodemedic_host_writable_mounts 1")
        );
        h.mounts_unchecked = Some("not in a container".into());
        let text = render_host(&h);
        assert!(!text.contains("nodemedic_host_writable_mounts"), "{text}");
    }

    /// Per CPU: every IRQ's count, a short row included, plus what IRQs that went away had.
    #[test]
    fn device_interrupts_per_cpu_keep_what_freed_irqs_had() {
        let mut ints = nodemedic_kernel::interrupts::parse(
            "           CPU0       CPU1       CPU2\n\
             \x20 24:         10          0          5   PCI-MSI 1-edge      virtio0-input.0\n\
             \x20 25:          1          2\n\
             NMI:          7          7          7   Non-maskable interrupts\n",
        )
        .unwrap();
        assert_eq!(device_interrupts_per_cpu(&ints), vec![11, 2, 5]);
        ints.retired = vec![100, 200, 300, 400];
        assert_eq!(device_interrupts_per_cpu(&ints), vec![111, 202, 305]);
    }

    /// Each row's group label, as the map it replaced gave it: every row of an IRQ (a
    /// damaged table can repeat one), the later group of an IRQ named twice, "" for none;
    /// in order or not.
    #[test]
    fn irq_labels_name_every_row_of_an_irq_and_the_later_group() {
        use nodemedic_kernel::interrupts::IrqDescription;
        use nodemedic_sample::verdict::{DeviceGroup, GroupVerdict};
        let verdict = |name: &str, irqs: Vec<u32>, other_irqs: Vec<u32>| GroupVerdict {
            group: DeviceGroup {
                key: format!("dev:{name}"),
                name: name.to_string(),
                irqs,
                other_irqs,
                ..Default::default()
            },
            ..Default::default()
        };
        let verdicts = [
            verdict("nic", vec![24, 25], vec![9]),
            verdict("nvme", vec![30], vec![25]),
        ];
        for order in [[9u32, 24, 25, 25, 30, 31], [31, 25, 9, 30, 25, 24]] {
            let mut ints = Interrupts::with_cpus(vec![0]);
            for irq in order {
                ints.push_irq(irq, std::sync::Arc::new(IrqDescription::default()), &[1]);
            }
            let mut scratch = RenderScratch::default();
            let labels = irq_labels(&ints, &verdicts, &mut scratch);
            let got: Vec<(u32, &str)> = ints
                .irqs
                .iter()
                .zip(labels.iter())
                .map(|(l, (group, _))| (l.irq, group))
                .collect();
            let want = |irq: u32| match irq {
                9 | 24 => "nic",
                25 | 30 => "nvme",
                _ => "",
            };
            for (irq, group) in got {
                assert_eq!(group, want(irq), "IRQ {irq}, rows {order:?}");
            }
        }
    }
}
