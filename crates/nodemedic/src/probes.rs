//! Wiring of the eBPF probes (crate `nodemedic-probe`) into `run` and `check`.

use nodemedic_probe::PerfProbeCollector;

use crate::config::Config;

/// The probe collector, loaded and attached now (a failure is kept as its reason, never
/// fatal); the engine does not build it when the probes are switched off. With
/// `spawn_reader`, its ring buffer reader starts on the current tokio runtime.
pub fn collector(config: &Config, spawn_reader: bool) -> PerfProbeCollector {
    let opts = config.probes.collector_options();
    raise_memlock();
    // The load parses the kernel's BTF and drops it, attached or not: in a heap of its own,
    // whose pages go back to the kernel when it ends, but for the few the probes keep.
    let (collector, heap) = crate::HEAP.run(|| PerfProbeCollector::load(opts));
    tracing::debug!(
        own = heap.own,
        allocated_kib = heap.allocated >> 10,
        spanned_kib = heap.spanned >> 10,
        kept_kib = heap.kept >> 10,
        overflowed = heap.overflowed,
        "own heap of the probes' load"
    );
    // The load's large buffers (the BTF file, its type table) were the C library's.
    nodemedic_heap::release_free_memory();
    if spawn_reader {
        if let Some(reader) = collector.take_ring_reader() {
            tokio::spawn(reader.run());
        }
    }
    collector
}

/// Kernels before 5.11 charge BPF maps to `RLIMIT_MEMLOCK` (64 KiB by default): lift it, which
/// needs `CAP_SYS_RESOURCE` (the Helm chart's `features.probesMemlock`, or root outside a
/// hardened unit). Without it the probes report the limit as their reason.
fn raise_memlock() {
    let old_kernel = nodemedic_probe::host::kernel_version().is_some_and(|v| v < (5, 11));
    if !old_kernel {
        return;
    }
    match rlimit::Resource::MEMLOCK.set(rlimit::INFINITY, rlimit::INFINITY) {
        Ok(()) => tracing::info!("RLIMIT_MEMLOCK lifted for the eBPF probes (kernel < 5.11)"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot lift RLIMIT_MEMLOCK for the eBPF probes (needs CAP_SYS_RESOURCE)")
        }
    }
}
