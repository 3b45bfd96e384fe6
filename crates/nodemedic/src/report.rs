//! The JSON shapes shared by `check --format json` and `/status`.

use nodemedic_detect::collapse::Evidence;
use nodemedic_detect::GroupVerdict;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub name: String,
    pub key: String,
    pub driver: Option<String>,
    pub pci: Option<String>,
    pub netdev: Option<String>,
    pub numa_node: Option<u32>,
    /// IRQs judged for collapse (the device's data queues when it has them).
    pub irqs: Vec<u32>,
    /// The device's other IRQs (control, admin, config vectors).
    pub other_irqs: Vec<u32>,
    /// CPUs the judged IRQs are delivered to.
    pub effective_cpus: Vec<u32>,
    /// How many CPUs could take them.
    pub eligible_cpus: usize,
    /// Which CPUs could take them, in kernel list form (`0-3,8`).
    pub eligible_cpu_list: String,
    pub collapsed: bool,
    pub hurting: bool,
    pub collapsed_since: Option<f64>,
    pub hurting_since: Option<f64>,
    pub evidence: Evidence,
}

impl From<&GroupVerdict> for GroupReport {
    fn from(v: &GroupVerdict) -> Self {
        let g = &v.group;
        Self {
            name: g.name.clone(),
            key: g.key.clone(),
            driver: g.driver.clone(),
            pci: g.pci.clone(),
            netdev: g.netdev.clone(),
            numa_node: g.numa_node,
            irqs: g.irqs.clone(),
            other_irqs: g.other_irqs.clone(),
            effective_cpus: g.effective_cpus.iter().collect(),
            eligible_cpus: g.eligible_cpus.len(),
            eligible_cpu_list: g.eligible_cpus.to_list_string(),
            collapsed: v.collapsed,
            hurting: v.hurting,
            collapsed_since: v.collapsed_since,
            hurting_since: v.hurting_since,
            evidence: v.evidence.clone(),
        }
    }
}

/// Device groups worth showing: those that could ever collapse, or that are PCI devices.
/// Single-IRQ legacy lines (timer, serial, ACPI) are left out.
pub fn shown_groups(verdicts: &[GroupVerdict]) -> Vec<GroupReport> {
    verdicts
        .iter()
        .filter(|v| v.group.irqs.len() >= 2 || v.group.pci.is_some())
        .map(GroupReport::from)
        .collect()
}
