//! The collectors, one module per kernel source, listed in dependency order.

mod interrupts;
mod irq_affinity;
mod irqbalance;
mod pci;
mod softirqs;
mod softnet;
mod topology;

use std::path::Path;

use nodemedic_kernel::CpuSet;

pub use interrupts::InterruptsCollector;
pub use irq_affinity::IrqAffinityCollector;
pub use irqbalance::IrqbalanceConfigCollector;
pub use pci::PciDevicesCollector;
pub use softirqs::SoftirqsCollector;
pub use softnet::SoftnetCollector;
pub use topology::TopologyCollector;

use crate::{Collector, ReadError, Reader};

/// Every collector, in dependency order: later ones use what earlier ones put in the
/// snapshot (softnet places its rows on the online CPUs, PCI devices follow the IRQs).
pub fn all() -> Vec<Box<dyn Collector>> {
    vec![
        Box::new(TopologyCollector),
        Box::new(InterruptsCollector),
        Box::new(IrqAffinityCollector::default()),
        Box::new(PciDevicesCollector),
        Box::new(SoftirqsCollector),
        Box::new(SoftnetCollector),
        Box::new(IrqbalanceConfigCollector),
    ]
}

/// A CPU set file (`mask`: hex mask such as `smp_affinity`; else a list such as `0-3,8`).
/// `Ok(None)` when the file does not exist.
fn cpuset_file(reader: &Reader, path: &Path, mask: bool) -> Result<Option<CpuSet>, ReadError> {
    let Some(text) = reader.read_optional(path)? else {
        return Ok(None);
    };
    let parsed = if mask {
        CpuSet::parse_mask(&text)
    } else {
        CpuSet::parse_list(&text)
    };
    parsed.map(Some).map_err(|e| ReadError::parse(path, e))
}

fn skipped_warnings(path: &Path, skipped: &[nodemedic_kernel::SkippedLine]) -> Vec<String> {
    skipped
        .iter()
        .map(|s| format!("{}:{}: skipped: {}", path.display(), s.line, s.reason))
        .collect()
}
