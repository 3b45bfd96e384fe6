//! Wiring of the eBPF probes (crate `nodemedic-probe`) into `run` and `check`.

use nodemedic_collect::Collector;
use nodemedic_probe::PerfProbeCollector;

use crate::config::Config;

/// The probe collector: loaded and attached now when enabled (a failure is kept as its
/// reason, never fatal), a never-run placeholder when disabled (listed as disabled). With
/// `spawn_reader`, its ring buffer reader starts on the current tokio runtime.
pub fn sources(config: &Config, spawn_reader: bool) -> Vec<Box<dyn Collector>> {
    let opts = config.probes.collector_options();
    if !config.probes.enabled {
        return vec![Box::new(PerfProbeCollector::not_loaded(opts))];
    }
    let collector = PerfProbeCollector::load(opts);
    if spawn_reader {
        if let Some(reader) = collector.take_ring_reader() {
            tokio::spawn(reader.run());
        }
    }
    vec![Box::new(collector)]
}
