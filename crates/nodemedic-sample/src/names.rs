//! The built-in collectors' names: what `nodemedic_scrape_collector_success{collector}`,
//! `/status` and the `[collectors]` switches call them. One list, so a name is spelled once.

/// A collector built into nodemedic-collect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CollectorName {
    Topology,
    Interrupts,
    IrqAffinity,
    PciDevices,
    Softirqs,
    Softnet,
    IrqbalanceConfig,
    Pressure,
    Cgroups,
    Tuning,
    DiskCommit,
}

impl CollectorName {
    /// Those that `[collectors]` in the configuration switches on and off.
    pub const SWITCHABLE: [Self; 10] = [
        Self::Topology,
        Self::Interrupts,
        Self::IrqAffinity,
        Self::PciDevices,
        Self::Softirqs,
        Self::Softnet,
        Self::IrqbalanceConfig,
        Self::Pressure,
        Self::Cgroups,
        Self::Tuning,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Topology => "topology",
            Self::Interrupts => "interrupts",
            Self::IrqAffinity => "irq_affinity",
            Self::PciDevices => "pci_devices",
            Self::Softirqs => "softirqs",
            Self::Softnet => "softnet",
            Self::IrqbalanceConfig => "irqbalance_config",
            Self::Pressure => "pressure",
            Self::Cgroups => "cgroups",
            Self::Tuning => "tuning",
            Self::DiskCommit => "disk_commit",
        }
    }
}

impl PartialEq<CollectorName> for String {
    fn eq(&self, other: &CollectorName) -> bool {
        self == other.as_str()
    }
}
