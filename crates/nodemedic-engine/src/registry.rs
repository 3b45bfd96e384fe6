//! Every collector nodemedic has, in the order they run, each with its name, whether its
//! failure is optional, and how it is built from the configuration. `run` and `check` build
//! their engine from it; `[collectors]`, `/status` and `nodemedic_scrape_collector_success`
//! name collectors by its [`CollectorName`]s.
//!
//! The list lives here, not in the binary, because most of its collectors are built from the
//! [`EngineConfig`] alone, and the engine's tests and benchmarks run on it. Two of them live
//! in crates the engine does not depend on (the eBPF probes, the Kubernetes pod watch): their
//! entries are here too, and the binary gives their build with [`Registry::build_with`].

use nodemedic_collect::sources::{
    self, netlink_sees_host, CgroupsCollector, IrqAffinityCollector, NicLimitsFiles,
    NicLimitsUnavailable, TuningCollector,
};
use nodemedic_collect::{Collector, CollectorName, CommitTimerCollector};

use crate::{EngineConfig, NicLimitsFrom};

/// How a collector is built: `None` when the configuration leaves it out altogether (no disk
/// probe, not in Kubernetes), so that it is not listed at all.
pub type Build<'a> = Box<dyn FnOnce(&EngineConfig) -> Option<Box<dyn Collector>> + 'a>;

struct Entry<'a> {
    name: CollectorName,
    optional: bool,
    build: Build<'a>,
}

/// The collectors, in order: later ones use what earlier ones put in the snapshot.
pub struct Registry<'a> {
    entries: Vec<Entry<'a>>,
}

impl Default for Registry<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Registry<'a> {
    /// Every collector; the probes and the pod names are left out until the binary gives their
    /// build.
    pub fn new() -> Self {
        // nodemedic-collect's own collectors need no configuration, and that crate knows the
        // order they depend on each other in.
        let mut entries: Vec<Entry<'a>> = sources::all()
            .into_iter()
            .map(|c| Entry {
                name: c.name(),
                optional: false,
                build: Box::new(move |_| Some(c)),
            })
            .collect();
        entries.extend([
            Entry {
                name: CollectorName::Cgroups,
                optional: false,
                build: Box::new(|config| {
                    Some(Box::new(CgroupsCollector::with_interval(
                        config.cgroups.clone(),
                        config.cgroups_interval,
                    )))
                }),
            },
            Entry {
                name: CollectorName::Tuning,
                optional: false,
                build: Box::new(|config| Some(Box::new(tuning(config)))),
            },
            Entry {
                name: CollectorName::KubePods,
                optional: false,
                build: Box::new(|_| None),
            },
            // Its failure says something about the kernel or the daemon's privileges, not
            // about the node's health: the eBPF probes need BTF, kprobes or fentry trampolines
            // and CAP_BPF/CAP_PERFMON.
            Entry {
                name: CollectorName::PerfProbes,
                optional: true,
                build: Box::new(|_| None),
            },
            Entry {
                name: CollectorName::DiskCommit,
                optional: false,
                build: Box::new(|config| {
                    let timer = config.commit_timer.as_ref()?;
                    Some(Box::new(CommitTimerCollector::start(timer)))
                }),
            },
        ]);
        // The one of nodemedic-collect's own that the configuration tunes.
        Self { entries }.build_with(CollectorName::IrqAffinity, |config| {
            Some(Box::new(IrqAffinityCollector::with_refresh(
                config.affinity_refresh,
            )))
        })
    }

    /// Gives `name`'s build: a collector that lives in a crate the engine does not depend on.
    pub fn build_with(
        mut self,
        name: CollectorName,
        build: impl FnOnce(&EngineConfig) -> Option<Box<dyn Collector>> + 'a,
    ) -> Self {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.name == name) {
            entry.build = Box::new(build);
        }
        self
    }

    /// Builds the collectors `config` does not switch off, in order, and lists them; then the
    /// ones it switches off, which are not built.
    pub(crate) fn build(self, config: &EngineConfig) -> Built {
        let mut built = Built::default();
        for entry in self.entries {
            if entry.optional {
                built.optional.push(entry.name);
            }
            if config.disabled_collectors.contains(&entry.name) {
                built.disabled.push(entry.name);
            } else if let Some(collector) = (entry.build)(config) {
                built.collectors.push(collector);
            }
        }
        built
    }
}

#[derive(Default)]
pub(crate) struct Built {
    pub collectors: Vec<Box<dyn Collector>>,
    pub disabled: Vec<CollectorName>,
    /// Those whose failure is an `info` finding, so that `nodemedic check` does not fail a
    /// healthy node for it.
    pub optional: Vec<CollectorName>,
}

fn tuning(config: &EngineConfig) -> TuningCollector {
    match config.tuning.nic_limits {
        NicLimitsFrom::Netlink => match netlink_sees_host(&config.paths.sysfs) {
            Ok(()) => TuningCollector::default(),
            Err(why) => TuningCollector::new(Box::new(NicLimitsUnavailable(why.to_string()))),
        },
        NicLimitsFrom::Files => TuningCollector::new(Box::new(NicLimitsFiles {
            dir: config.paths.rootfs.join("ethtool"),
        })),
    }
    .with_settings_interval(config.tuning.settings_interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every collector has one entry, the probes alone are optional, and a collector switched
    /// off is listed as disabled and never built.
    #[test]
    fn every_collector_once_and_only_the_probes_optional() {
        let names: Vec<CollectorName> = Registry::new().entries.iter().map(|e| e.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        let mut all = CollectorName::ALL.to_vec();
        all.sort();
        assert_eq!(sorted, all, "{names:?}");
        assert_eq!(sorted.len(), names.len(), "{names:?}");

        let config = EngineConfig {
            disabled_collectors: [CollectorName::Softnet, CollectorName::PerfProbes].into(),
            ..Default::default()
        };
        let built = Registry::new()
            .build_with(CollectorName::PerfProbes, |_| {
                panic!("built while disabled")
            })
            .build(&config);
        assert_eq!(built.optional, [CollectorName::PerfProbes]);
        assert_eq!(
            built.disabled,
            [CollectorName::Softnet, CollectorName::PerfProbes]
        );
        let running: Vec<CollectorName> = built.collectors.iter().map(|c| c.name()).collect();
        assert!(!running.contains(&CollectorName::Softnet), "{running:?}");
        // Without a build from the binary, the pod names are left out; without a disk probe
        // configured, so is its collector.
        assert!(!running.contains(&CollectorName::KubePods), "{running:?}");
        assert!(!running.contains(&CollectorName::DiskCommit), "{running:?}");
        assert_eq!(running.len(), CollectorName::ALL.len() - 4, "{running:?}");
    }
}
