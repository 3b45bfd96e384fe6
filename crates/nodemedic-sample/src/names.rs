//! The collectors' names: what `nodemedic_scrape_collector_success{collector}`, `/status` and
//! the `[collectors]` switches call them. One list, so a name is spelled once.

/// A collector of nodemedic, built into nodemedic-collect or fed by another crate (the eBPF
/// probes, the Kubernetes pod watch).
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
    PerfProbes,
    KubePods,
}

impl CollectorName {
    pub const ALL: [Self; 13] = [
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
        Self::DiskCommit,
        Self::PerfProbes,
        Self::KubePods,
    ];

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

    /// [`Self::SWITCHABLE`]'s names: the keys of `[collectors]`.
    pub const SWITCHABLE_KEYS: [&'static str; 10] = {
        let mut keys = [""; 10];
        let mut i = 0;
        while i < keys.len() {
            keys[i] = Self::SWITCHABLE[i].as_str();
            i += 1;
        }
        keys
    };

    pub const fn as_str(self) -> &'static str {
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
            Self::PerfProbes => "perf_probes",
            Self::KubePods => "kube_pods",
        }
    }

    /// The collector named `name` ([`Self::as_str`]), if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for CollectorName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for CollectorName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_collector() {
        for c in CollectorName::ALL {
            assert_eq!(CollectorName::from_name(c.as_str()), Some(c), "{c}");
            assert_eq!(c.to_string(), c.as_str());
        }
        assert_eq!(CollectorName::from_name("perf_probe"), None);
        assert_eq!(CollectorName::from_name(""), None);
    }

    #[test]
    fn the_lists_hold_each_collector_once() {
        let all: std::collections::BTreeSet<_> = CollectorName::ALL.into_iter().collect();
        assert_eq!(all.len(), CollectorName::ALL.len());
        assert!(CollectorName::SWITCHABLE.iter().all(|c| all.contains(c)));
        for (c, key) in CollectorName::SWITCHABLE
            .iter()
            .zip(CollectorName::SWITCHABLE_KEYS)
        {
            assert_eq!(c.as_str(), key);
        }
    }
}
