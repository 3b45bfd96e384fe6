//! A collector's name: what `nodemedic_scrape_collector_success{collector}`, `/status` and
//! the `[collectors]` switches call it.
//!
//! This crate knows no collector. Each one declares its name where it is written, in its
//! registration (`nodemedic_collect::registry`), and exports it as a constant (`NAME`) that
//! the code naming it uses; the lists of names (every collector, the switchable ones) come
//! from the registry.

/// A collector of nodemedic, built into nodemedic-collect or fed by another crate (the eBPF
/// probes, the Kubernetes pod watch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CollectorName(&'static str);

impl CollectorName {
    /// The name `name`: to be called once per collector, in its declaration.
    pub const fn new(name: &'static str) -> Self {
        Self(name)
    }

    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for CollectorName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl serde::Serialize for CollectorName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}
