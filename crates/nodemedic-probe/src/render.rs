//! Series from nodemedic's eBPF perf-event probes (the snapshot's `PerfProbes`).
//! Cardinality: node totals, one series per hooked function, the top-N owners (bounded by
//! configuration, default 10) and, only when switched on, one per CPU.

use nodemedic_collect::registry::Render;
use nodemedic_exposition::{Encoder, Kind};
use nodemedic_sample::perf::PerfProbes;

/// The probes' series, rendered in `/metrics` through the collector's registration.
pub(crate) fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let snap = ctx.snapshot;
    let Some(p) = snap.get::<PerfProbes>() else {
        return;
    };
    status(e, p);
    if p.down_reason.is_some() {
        return;
    }
    totals(e, p);
    owners(e, p);
    per_cpu(e, p);
    probes_own(e, p);
}

/// Node-wide outputs and wakeups.
fn totals(e: &mut Encoder, p: &PerfProbes) {
    e.family(
        "nodemedic_perf_event_outputs",
        Kind::Counter,
        "perf-event records written, by source: bpf = BPF programs' bpf_perf_event_output() (perf_event_output), sample = sampling perf events' overflow (perf_event_output_forward/_backward).",
    );
    e.sample(&[("source", "bpf")], p.totals.bpf_outputs as f64);
    e.sample(&[("source", "sample")], p.totals.sample_outputs as f64);
    e.family(
        "nodemedic_perf_event_wakeups",
        Kind::Counter,
        "perf_event_wakeup() calls: a perf ring buffer's readers woken (an irq_work interrupt and usually a context switch each).",
    );
    e.sample(&[], p.totals.wakeups as f64);
    e.family(
        "nodemedic_perf_event_wakeup_ratio",
        Kind::Gauge,
        "Wakeups per perf-event output over the last sample interval (near 1: every record wakes its reader).",
    );
    if let Some(r) = &p.rates {
        e.sample(&[], r.wakeup_ratio);
    }
    e.family(
        "nodemedic_perf_event_untracked_calls",
        Kind::Counter,
        "Outputs and wakeups whose owning process found the probes' bounded owner map full (counted in the node totals only).",
    );
    e.sample(&[], p.totals.untracked as f64);
}

/// The busiest owning processes, and how many the probes track.
fn owners(e: &mut Encoder, p: &PerfProbes) {
    let pids: Vec<String> = p.owners.iter().map(|o| o.pid.to_string()).collect();
    e.family(
        "nodemedic_perf_event_owner_outputs",
        Kind::Counter,
        "perf-event records written to events owned by the process (the perf_event_open caller), for the busiest owners; pid 0 = kernel-owned events.",
    );
    for (o, pid) in p.owners.iter().zip(&pids) {
        e.sample(&[("pid", pid), ("comm", &o.comm)], o.outputs() as f64);
    }
    e.family(
        "nodemedic_perf_event_owner_wakeups",
        Kind::Counter,
        "perf_event_wakeup() calls for events owned by the process, for the busiest owners.",
    );
    for (o, pid) in p.owners.iter().zip(&pids) {
        e.sample(&[("pid", pid), ("comm", &o.comm)], o.wakeups as f64);
    }
    e.family(
        "nodemedic_perf_event_owners_tracked",
        Kind::Gauge,
        "Owning processes in the probes' in-kernel owner map (exported: the busiest of them).",
    );
    e.sample(&[], p.owners_tracked as f64);
}

/// Per CPU, when switched on.
fn per_cpu(e: &mut Encoder, p: &PerfProbes) {
    if p.per_cpu.is_empty() {
        return;
    }
    let cpus: Vec<String> = p.per_cpu.iter().map(|(c, _)| c.to_string()).collect();
    e.family(
        "nodemedic_perf_event_cpu_outputs",
        Kind::Counter,
        "perf-event records written on the CPU (BPF and sampling).",
    );
    for (cpu, (_, c)) in cpus.iter().zip(&p.per_cpu) {
        e.sample(&[("cpu", cpu)], c.outputs() as f64);
    }
    e.family(
        "nodemedic_perf_event_cpu_wakeups",
        Kind::Counter,
        "perf_event_wakeup() calls on the CPU.",
    );
    for (cpu, (_, c)) in cpus.iter().zip(&p.per_cpu) {
        e.sample(&[("cpu", cpu)], c.wakeups as f64);
    }
}

/// The probes' own ring buffer, and what their programs cost when BPF stats are on.
fn probes_own(e: &mut Encoder, p: &PerfProbes) {
    e.family(
        "nodemedic_probe_ringbuf_records",
        Kind::Counter,
        "Records of the probes' own ring buffer (new owners, storm starts): emitted by the kernel, dropped for lack of room, read by the daemon.",
    );
    e.sample(&[("outcome", "emitted")], p.ring.emitted as f64);
    e.sample(&[("outcome", "dropped")], p.ring.dropped as f64);
    e.sample(&[("outcome", "read")], p.ring.read as f64);
    e.family(
        "nodemedic_probe_storm_starts",
        Kind::Counter,
        "Per-CPU wakeup storm starts the kernel side reported (threshold probes.storm_wakeups_per_cpu within one second).",
    );
    e.sample(&[], p.ring.storms as f64);

    if !p.programs.is_empty() {
        e.family(
            "nodemedic_probe_bpf_runs",
            Kind::Counter,
            "Runs of the probe program on the function (kernel BPF stats; only while they are enabled).",
        );
        for s in &p.programs {
            e.sample(&[("probe", &s.function)], s.run_count as f64);
        }
        e.family(
            "nodemedic_probe_bpf_run_seconds",
            Kind::Counter,
            "Time the probe program ran on the function (kernel BPF stats; only while they are enabled).",
        );
        for s in &p.programs {
            e.sample(&[("probe", &s.function)], s.run_time_ns as f64 / 1e9);
        }
    }
}

fn status(e: &mut Encoder, p: &PerfProbes) {
    e.family(
        "nodemedic_probe_up",
        Kind::Gauge,
        "Whether the eBPF probe on the kernel function is attached (1) or not (0); see /status for the reason.",
    );
    for h in &p.hooks {
        e.sample(&[("probe", &h.function)], f64::from(u8::from(h.up)));
    }
    if let Some(method) = &p.method {
        e.family(
            "nodemedic_probe_attach",
            Kind::Info,
            "How the eBPF probes are attached: fentry (BTF trampolines) or kprobe.",
        );
        e.sample(&[("method", method)], 1.0);
    }
}
