//! The collectors' names: what `nodemedic_scrape_collector_success{collector}`, `/status` and
//! the `[collectors]` switches call them.
//!
//! Each collector is declared once, in the one list below: its variant, its name and whether
//! `[collectors]` can switch it off, side by side. Every other list ([`CollectorName::ALL`],
//! [`CollectorName::SWITCHABLE`], [`CollectorName::SWITCHABLE_KEYS`]) and every array length is
//! derived from it at compile time, so none can miss an entry; an entry that leaves out its
//! name or its switch does not compile.

/// Declares [`CollectorName`] and derives its lists from one list of
/// `Variant => "name", switchable | fixed;` entries, in the order `/status` lists them.
macro_rules! collector_names {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, $switch:ident; )+) => {
        /// A collector of nodemedic, built into nodemedic-collect or fed by another crate (the
        /// eBPF probes, the Kubernetes pod watch).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum CollectorName {
            $( $(#[$doc])* $variant, )+
        }

        impl CollectorName {
            /// Every collector, in the order of the declaration.
            pub const ALL: [Self; [$(Self::$variant),+].len()] = [$(Self::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $name, )+
                }
            }

            /// Whether `[collectors]` in the configuration switches it on and off.
            pub const fn is_switchable(self) -> bool {
                match self {
                    $( Self::$variant => collector_names!(@switch $switch), )+
                }
            }
        }
    };
    (@switch switchable) => { true };
    (@switch fixed) => { false };
}

collector_names! {
    Topology => "topology", switchable;
    Interrupts => "interrupts", switchable;
    IrqAffinity => "irq_affinity", switchable;
    PciDevices => "pci_devices", switchable;
    Softirqs => "softirqs", switchable;
    Softnet => "softnet", switchable;
    IrqbalanceConfig => "irqbalance_config", switchable;
    Pressure => "pressure", switchable;
    Cgroups => "cgroups", switchable;
    Tuning => "tuning", switchable;
    /// Switched by `[disk_probe] enabled`, not by `[collectors]`.
    DiskCommit => "disk_commit", fixed;
    /// Switched by `[probes]`, not by `[collectors]`.
    PerfProbes => "perf_probes", fixed;
    /// Switched by `[kubernetes] pod_names`, not by `[collectors]`.
    KubePods => "kube_pods", fixed;
}

/// How many collectors [`CollectorName::is_switchable`].
const SWITCHABLE_COUNT: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < CollectorName::ALL.len() {
        if CollectorName::ALL[i].is_switchable() {
            n += 1;
        }
        i += 1;
    }
    n
};

impl CollectorName {
    /// Those that `[collectors]` in the configuration switches on and off, in the order of
    /// [`Self::ALL`].
    pub const SWITCHABLE: [Self; SWITCHABLE_COUNT] = {
        let mut out = [Self::ALL[0]; SWITCHABLE_COUNT];
        let (mut i, mut j) = (0, 0);
        while i < Self::ALL.len() {
            if Self::ALL[i].is_switchable() {
                out[j] = Self::ALL[i];
                j += 1;
            }
            i += 1;
        }
        out
    };

    /// [`Self::SWITCHABLE`]'s names: the keys of `[collectors]`.
    pub const SWITCHABLE_KEYS: [&'static str; SWITCHABLE_COUNT] = {
        let mut keys = [""; SWITCHABLE_COUNT];
        let mut i = 0;
        while i < keys.len() {
            keys[i] = Self::SWITCHABLE[i].as_str();
            i += 1;
        }
        keys
    };

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

    /// Names are unique and every derived list holds exactly the collectors its rule picks,
    /// in the declaration's order.
    #[test]
    fn the_derived_lists_follow_the_declaration() {
        let names: std::collections::BTreeSet<&str> =
            CollectorName::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), CollectorName::ALL.len(), "a name used twice");
        let all: std::collections::BTreeSet<_> = CollectorName::ALL.into_iter().collect();
        assert_eq!(all.len(), CollectorName::ALL.len());
        let switchable: Vec<CollectorName> = CollectorName::ALL
            .into_iter()
            .filter(|c| c.is_switchable())
            .collect();
        assert_eq!(CollectorName::SWITCHABLE.to_vec(), switchable);
        let keys: Vec<&str> = switchable.iter().map(|c| c.as_str()).collect();
        assert_eq!(CollectorName::SWITCHABLE_KEYS.to_vec(), keys);
        // What the configuration's users rely on: the probes, the disk probe and the pod
        // names have switches of their own.
        for fixed in [
            CollectorName::DiskCommit,
            CollectorName::PerfProbes,
            CollectorName::KubePods,
        ] {
            assert!(!fixed.is_switchable(), "{fixed}");
        }
        assert!(CollectorName::Tuning.is_switchable());
    }
}
