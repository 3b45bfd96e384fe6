//! The collectors the engine runs: every registered one (`nodemedic_collect::registry`), in
//! the order they declare, each built from the configuration unless it switches it off.
//! `run` and `check` build their engine from it.
//!
//! Two collectors live in crates the engine does not depend on (the eBPF probes, the
//! Kubernetes pod watch), and need what only the binary holds: they declare
//! [`Build::ByBinary`](nodemedic_collect::registry::Build::ByBinary), and the binary gives
//! their build with [`Registry::build_with`].

use nodemedic_collect::registry::{self as declared, Build as Declared};
use nodemedic_collect::{Collector, CollectorName};

use crate::EngineConfig;

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
    /// Every registered collector; those the binary builds are left out until it gives
    /// their build.
    pub fn new() -> Self {
        let entries = declared::declarations()
            .iter()
            .map(|d| Entry {
                name: d.name,
                optional: d.optional,
                build: match d.build {
                    Declared::Here(build) => {
                        Box::new(move |config: &EngineConfig| build(&config.settings()))
                            as Build<'a>
                    }
                    Declared::ByBinary => Box::new(|_: &EngineConfig| None),
                },
            })
            .collect();
        Self { entries }
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

#[cfg(test)]
mod tests {
    use nodemedic_collect::sources::{pressure, softnet};
    use nodemedic_collect::{commit_timer, registry};

    use super::*;

    /// Every registered collector has one entry, in the order they declare; a collector
    /// switched off is listed as disabled and never built, and a collector given a build by
    /// the binary is built from it.
    #[test]
    fn every_registered_collector_once_in_order() {
        let names: Vec<CollectorName> = Registry::new().entries.iter().map(|e| e.name).collect();
        assert_eq!(names, registry::names());

        let config = EngineConfig {
            disabled_collectors: [softnet::NAME, pressure::NAME].into(),
            ..Default::default()
        };
        let built = Registry::new()
            .build_with(pressure::NAME, |_| panic!("built while disabled"))
            .build(&config);
        assert_eq!(built.disabled, [softnet::NAME, pressure::NAME]);
        let running: Vec<CollectorName> = built.collectors.iter().map(|c| c.name()).collect();
        assert!(!running.contains(&softnet::NAME), "{running:?}");
        // Without a disk probe configured, its collector is left out.
        assert!(!running.contains(&commit_timer::NAME), "{running:?}");
        assert_eq!(running.len(), names.len() - 3, "{running:?}");
    }
}
