//! The Prometheus exposition of a sample: the daemon's own series (build, scrape, process,
//! host access), the node's facts, then every collector's series, which each collector
//! renders in its module through its registration (`nodemedic_collect::registry`), in the
//! order they run, and last the detectors' and the remediator's (the tuning audit's findings,
//! the IRQ groups' verdicts, remediation).
//!
//! Cardinality is budgeted: by default everything is per IRQ, per CPU or per device group,
//! never per IRQ × CPU (a 256-CPU node with 400 IRQs would otherwise expose 100,000 series).
//! The full matrix is opt-in.

use std::fmt::Write;

use nodemedic_collect::registry::{self, Render};
use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::sources::irqbalance::{IrqbalanceConfig, IrqbalancePackage};
use nodemedic_collect::sources::tuning::Tuning;
use nodemedic_sample::remedy::{Mode, RemedyState};
use nodemedic_sample::{CollectorState, CollectorStatus, GroupVerdict, Snapshot, TuningVerdict};

use crate::encoder::{Encoder, Format, Kind};
pub use nodemedic_collect::registry::{MetricsOptions, Scratch as RenderScratch};
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
        // Every collector renders its own series, in the order they run.
        let mut ctx = Render {
            snapshot: snap,
            options: opts,
            groups: input.verdicts,
            pressure: input.pressure,
            scratch,
        };
        for render in registry::declarations().iter().filter_map(|d| d.render) {
            render(&mut e, &mut ctx);
        }
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
    let Some(ints) = snap.and_then(|s| s.get::<Interrupts>()) else {
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
    let settings = snap.get::<Tuning>().map(|t| &t.settings);
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
    let package = snap.get::<IrqbalanceConfig>().map(|c| &c.package);
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
}
