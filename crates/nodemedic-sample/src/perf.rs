//! What nodemedic's eBPF probes count (crate `nodemedic-probe`): perf-event records written
//! (`perf_event_output*`) and the wakeups of their readers (`perf_event_wakeup`), node-wide,
//! per CPU (opt-in) and per owning process.

use serde::Serialize;

/// The probes' part of a snapshot. Present whenever the probes are configured, also when they
/// are down (then `hooks` say why and the counters are empty).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PerfProbes {
    /// `fentry` or `kprobe` when attached.
    pub method: Option<String>,
    pub hooks: Vec<PerfHook>,
    /// Why the probes are not running; `None` when they are.
    pub down_reason: Option<String>,
    /// Cumulative since the probes were loaded.
    pub totals: PerfCounters,
    /// Per CPU, only when per-CPU series are switched on.
    pub per_cpu: Vec<(u32, PerfCounters)>,
    /// The busiest owners (by wakeups in the last interval, then outputs), at most the
    /// configured top N, cumulative counters.
    pub owners: Vec<PerfOwner>,
    /// Owners the bounded in-kernel map had no room for: their calls are only in `totals`.
    pub owners_tracked: usize,
    /// Rates over the interval since the previous sample (absent on the first).
    pub rates: Option<PerfRates>,
    /// Kernel-measured cost of each probe program (only while BPF stats are on).
    pub programs: Vec<PerfProgramStats>,
    pub ring: PerfRing,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerfHook {
    /// The kernel function hooked (`perf_event_output`, …).
    pub function: String,
    pub up: bool,
    /// Why it is down.
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PerfCounters {
    /// `perf_event_output()`: records from BPF programs (`bpf_perf_event_output`).
    pub bpf_outputs: u64,
    /// `perf_event_output_forward/_backward()`: records from sampling perf events.
    pub sample_outputs: u64,
    pub wakeups: u64,
    /// Calls whose owner found the in-kernel owner map full.
    pub untracked: u64,
}

impl PerfCounters {
    pub fn outputs(&self) -> u64 {
        self.bpf_outputs.saturating_add(self.sample_outputs)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PerfOwner {
    /// The owning process's tgid in the initial PID namespace; 0 = perf events the kernel
    /// itself created.
    pub pid: u32,
    pub comm: String,
    pub bpf_outputs: u64,
    pub sample_outputs: u64,
    pub wakeups: u64,
}

impl PerfOwner {
    pub fn outputs(&self) -> u64 {
        self.bpf_outputs.saturating_add(self.sample_outputs)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PerfRates {
    pub interval_seconds: f64,
    pub outputs_per_second: f64,
    pub wakeups_per_second: f64,
    /// Wakeups per output in the interval (0 when there were no outputs).
    pub wakeup_ratio: f64,
    /// Per owner in `owners`, same order.
    pub owners: Vec<PerfOwnerRate>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerfOwnerRate {
    pub pid: u32,
    pub comm: String,
    pub outputs_per_second: f64,
    pub wakeups_per_second: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerfProgramStats {
    pub function: String,
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// The probes' own ring buffer (rare events: new owners, storm starts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerfRing {
    /// Records the kernel tried to write.
    pub emitted: u64,
    /// Records it had no room for.
    pub dropped: u64,
    /// Records the daemon has read (emitted = read + dropped + those still queued).
    pub read: u64,
    /// Storm-start records read.
    pub storms: u64,
}
