//! The collectors' registry: each collector declares itself where it is written, with one
//! [`register!`](crate::register) beside its code, and nothing else lists it.
//!
//! A declaration says what the rest of nodemedic needs to know of a collector without
//! knowing its code: its name, its place in the run, what switches it, whether its failure
//! says something about the node, and how it is built from the configuration. Every list of
//! collectors (the engine's run, the `[collectors]` switches, `/status`, the checks of
//! `crates/nodemedic-engine/tests/checklist.rs`) is read from here.
//!
//! The registrations are gathered at start by [`inventory`] (a constructor per declaration,
//! no unsafe code of ours), from every crate linked into the binary: nodemedic-collect's own
//! collectors, and those of nodemedic-probe and nodemedic-kube, whose builds the binary gives
//! ([`Build::ByBinary`]).

use std::time::Duration;

use nodemedic_sample::CollectorName;

use crate::commit_timer::CommitTimerConfig;
use crate::sources::CgroupSelection;
use crate::{Collector, Paths};

pub use inventory;

/// One collector, as it declares itself.
#[derive(Debug)]
pub struct Declaration {
    pub name: CollectorName,
    /// Its place in the run and in every list of collectors (`/status`,
    /// `nodemedic_scrape_collector_*`): after every collector whose data it reads in the
    /// snapshot, which has a lower number. Unique.
    pub order: u16,
    pub switch: Switch,
    /// Whether its failure says something about the kernel or the daemon's privileges rather
    /// than the node's health (the eBPF probes): it is then an `info` finding, and `nodemedic
    /// check` does not fail a healthy node for it.
    pub optional: bool,
    /// What the tests check of it (`crates/nodemedic-engine/tests/checklist.rs`).
    pub checks: Checks,
    /// The files it reads, for the fault injection (`crates/nodemedic-engine/tests/faults.rs`):
    /// each broken in every way, at every position, must name itself and change nothing
    /// else. A collector that reads fixture files declares at least one (the checklist test).
    pub faults: &'static [FileKind],
    /// Writes its series from the snapshot, in `/metrics` (`None`: another output renders
    /// what it read, with a detector's verdicts).
    pub render: Option<RenderFn>,
    pub build: Build,
}

/// Writes a collector's series from what it put in the snapshot.
pub type RenderFn = fn(&mut nodemedic_exposition::Encoder, &mut Render<'_>);

/// What a collector's rendering reads: the snapshot, the `[metrics]` options, the verdicts of
/// the detectors whose labels its series carry, and lists kept from one rendering to the next.
pub struct Render<'a> {
    pub snapshot: &'a nodemedic_sample::Snapshot,
    pub options: &'a MetricsOptions,
    /// The collapse detector's device groups: IRQ series carry their group.
    pub groups: &'a [nodemedic_sample::GroupVerdict],
    /// The pressure detector's verdicts, rendered with the cgroups they are about.
    pub pressure: Option<&'a nodemedic_sample::PressureVerdict>,
    pub scratch: &'a mut Scratch,
}

/// Lists a rendering builds besides its text, kept by whoever renders again (the endpoint,
/// between scrapes) so that a rendering allocates them once: on a 256-CPU node the IRQ
/// labels are 50 KiB, which musl's allocator mapped and unmapped every scrape. One value per
/// type, each collector's own; `Default` for a one-off.
#[derive(Default)]
pub struct Scratch(Vec<(std::any::TypeId, Box<dyn std::any::Any + Send>)>);

impl Scratch {
    /// The kept value of type `T`, made with `T::default()` the first time.
    pub fn get<T: std::any::Any + Send + Default>(&mut self) -> &mut T {
        let id = std::any::TypeId::of::<T>();
        let at = match self.0.iter().position(|(t, _)| *t == id) {
            Some(at) => at,
            None => {
                self.0.push((id, Box::new(T::default())));
                self.0.len() - 1
            }
        };
        let value = self.0[at].1.downcast_mut::<T>();
        // The slot of `T`'s id holds a `T`: it was made as one just above.
        value.unwrap_or_else(|| unreachable!("the scratch value of a type is of that type"))
    }
}

/// Which series the exposition includes beyond the defaults (`[metrics]`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsOptions {
    /// `nodemedic_irq_cpu_interrupts_total{irq,cpu}`: one series per IRQ per CPU.
    pub per_irq_per_cpu: bool,
    /// Architecture interrupts (`LOC`, `RES`, `CAL`, `TLB`, …) per CPU instead of node-wide.
    pub per_cpu_arch_interrupts: bool,
    /// Softirq types exported per CPU.
    pub softirq_types: Vec<String>,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self {
            per_irq_per_cpu: false,
            per_cpu_arch_interrupts: false,
            softirq_types: vec!["NET_RX".into(), "NET_TX".into()],
        }
    }
}

/// A kind of file a collector reads, as the fault injection breaks it.
#[derive(Debug)]
pub struct FileKind {
    /// Unique among every collector's kinds.
    pub name: &'static str,
    /// The fixture tree under `tests/fixtures` it is broken on.
    pub tree: &'static str,
    /// Path pattern under the tree; `*` matches one component.
    pub pattern: &'static str,
    /// A table (one entry per line): garbage and truncation hit a line at the position.
    pub table: bool,
    /// Missing is a normal kernel state (no such feature): no data, no warning.
    pub optional: bool,
    /// Empty is a valid value (an empty configuration file; an empty kernel CPU list is a
    /// lone newline, not zero bytes).
    pub empty_ok: bool,
    pub impact: Impact,
    /// What may change besides the IRQ groups: the fault test's summary keys, by prefix
    /// (`collector/<name>`: a collector's state; `series/<name>`: the series it renders;
    /// the test's own counts, `count/…`).
    pub may_change: &'static [&'static str],
}

/// Which IRQ groups' verdicts may change when a file of a kind breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impact {
    /// Any group (the file feeds every verdict: `/proc/interrupts`, online CPUs).
    AllGroups,
    /// Groups holding the IRQ named in the path (`proc/irq/N/...`).
    Irq,
    /// Groups of the PCI device named in the path.
    Pci,
    /// No group: only this collector's own data.
    NoGroup,
}

/// What the checklist test checks of a collector: the fixture trees it reads (where it must
/// be active), the series it puts in the golden expositions and the fuzz targets of its
/// parsers; or, for each, why not and the test that covers it instead.
#[derive(Debug)]
pub struct Checks {
    pub fixtures: Fixtures,
    pub golden: Golden,
    pub fuzz: Fuzz,
}

/// An opt-out of one of the checklist's claims: why, and the test that covers the collector
/// instead, `fn test` under `#[test]` in `file` (from the workspace root).
#[derive(Debug)]
pub struct Instead {
    pub why: &'static str,
    pub file: &'static str,
    pub test: &'static str,
}

impl Instead {
    pub const fn new(why: &'static str, file: &'static str, test: &'static str) -> Self {
        Self { why, file, test }
    }
}

/// Where a collector's input comes from in the tests.
#[derive(Debug)]
pub enum Fixtures {
    /// Fixture trees under `tests/fixtures` on which it must be active.
    Trees(&'static [&'static str]),
    /// It reads no kernel file a tree could hold.
    NotFiles(Instead),
}

/// What a collector puts in the golden expositions.
#[derive(Debug)]
pub enum Golden {
    /// `(golden file under tests/golden without .prom, the start of a series line)`.
    Series(&'static [(&'static str, &'static str)]),
    /// No golden file holds its series.
    None(Instead),
}

/// The fuzz targets of the parsers a collector runs.
#[derive(Debug)]
pub enum Fuzz {
    /// Names in `nodemedic_fuzz_logic::TARGETS`.
    Targets(&'static [&'static str]),
    /// It parses nothing from outside.
    NoParser(Instead),
}

/// What switches a collector on and off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Its key in `[collectors]` (its name).
    Collectors,
    /// Another setting, named here (`[probes]`, `[disk_probe] enabled`).
    Elsewhere(&'static str),
}

/// How a collector is built: `None` when the configuration leaves it out altogether (no disk
/// probe configured), so that it is not listed at all.
pub type BuildFn = fn(&Settings<'_>) -> Option<Box<dyn Collector>>;

#[derive(Clone, Copy)]
pub enum Build {
    /// From the configuration's settings alone.
    Here(BuildFn),
    /// By the binary, which holds what it needs (the eBPF probes' loader, the Kubernetes
    /// client): left out until the binary gives its build.
    ByBinary,
}

impl std::fmt::Debug for Build {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Here(_) => "Here",
            Self::ByBinary => "ByBinary",
        })
    }
}

/// What the configuration says to the collectors that are built from it.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub paths: &'a Paths,
    /// Every IRQ's affinity files are re-read within this (`IrqAffinityCollector`).
    pub affinity_refresh: Duration,
    /// Which cgroups the cgroups collector watches, and how often it reads them.
    pub cgroups: &'a CgroupSelection,
    pub cgroups_interval: Duration,
    /// The disk commit latency timer, when it is on.
    pub commit_timer: Option<&'a CommitTimerConfig>,
    /// How often the tuning collector re-reads its settings, and where it gets each NIC's
    /// channels and rings.
    pub tuning_settings_interval: Duration,
    pub nic_limits: NicLimitsFrom,
}

impl Settings<'static> {
    /// The defaults, on the node's own paths: every IRQ's affinity re-read within the
    /// default, the pods' cgroups read on every sample, no disk probe, the tuning settings
    /// read at every rescan, channels and rings through netlink.
    pub fn defaults() -> Self {
        static PATHS: std::sync::OnceLock<Paths> = std::sync::OnceLock::new();
        Self {
            paths: PATHS.get_or_init(Paths::default),
            affinity_refresh: crate::sources::DEFAULT_AFFINITY_REFRESH,
            cgroups: &CgroupSelection::PODS,
            cgroups_interval: Duration::ZERO,
            commit_timer: None,
            tuning_settings_interval: Duration::ZERO,
            nic_limits: NicLimitsFrom::Netlink,
        }
    }
}

/// Where the tuning collector gets each NIC's channels and rings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NicLimitsFrom {
    /// The driver, through ethtool netlink (in this process's network namespace: in a pod,
    /// the host's NICs need `hostNetwork`).
    #[default]
    Netlink,
    /// Files under `<rootfs>/ethtool/<interface>`, for fixture trees (`NicLimitsFiles`).
    Files,
}

inventory::collect!(Declaration);

/// Registers a collector's [`Declaration`], where the collector is written.
#[macro_export]
macro_rules! register {
    ($declaration:expr) => {
        $crate::registry::inventory::submit! { $declaration }
    };
}

/// Every registered collector, in the order they run. Gathered and sorted once: the
/// exporter walks it on every rendering.
pub fn declarations() -> &'static [&'static Declaration] {
    static SORTED: std::sync::OnceLock<Vec<&'static Declaration>> = std::sync::OnceLock::new();
    SORTED.get_or_init(|| {
        let mut all: Vec<&'static Declaration> =
            inventory::iter::<Declaration>.into_iter().collect();
        all.sort_by_key(|d| (d.order, d.name));
        all
    })
}

/// Every registered collector's name, in the order they run.
pub fn names() -> Vec<CollectorName> {
    declarations().iter().map(|d| d.name).collect()
}

/// Those that `[collectors]` switches on and off, in the order they run.
pub fn switchable() -> Vec<CollectorName> {
    declarations()
        .iter()
        .filter(|d| d.switch == Switch::Collectors)
        .map(|d| d.name)
        .collect()
}

/// [`switchable`]'s names: the keys of `[collectors]`.
pub fn switch_keys() -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| switchable().into_iter().map(|n| n.as_str()).collect())
}

/// The collector named `name`, if one is registered.
pub fn find(name: &str) -> Option<&'static Declaration> {
    declarations()
        .iter()
        .copied()
        .find(|d| d.name.as_str() == name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Names and places are unique, and every name reads back as its collector.
    #[test]
    fn names_and_orders_are_unique() {
        let all = declarations();
        let names: BTreeSet<&str> = all.iter().map(|d| d.name.as_str()).collect();
        let orders: BTreeSet<u16> = all.iter().map(|d| d.order).collect();
        assert_eq!(names.len(), all.len(), "a name used twice: {all:?}");
        assert_eq!(orders.len(), all.len(), "an order used twice: {all:?}");
        for d in all {
            assert_eq!(find(d.name.as_str()).map(|f| f.name), Some(d.name));
            assert!(
                d.name
                    .as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}: a name is a lowercase key of [collectors]",
                d.name
            );
        }
        assert!(find("").is_none());
    }

    /// Every module under `src/sources/` declares a collector and registers it, and every
    /// name this crate declares (`CollectorName::new`) is registered: a registration never
    /// written, or one the linker dropped, shows here.
    #[test]
    fn every_declared_collector_is_registered() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files: Vec<std::path::PathBuf> = vec![src.join("commit_timer.rs")];
        let sources = std::fs::read_dir(src.join("sources")).expect("src/sources");
        for entry in sources.flatten() {
            let path = entry.path();
            if path.is_dir() {
                // A collector of its own directory registers in its mod.rs.
                files.push(path.join("mod.rs"));
            } else if path.file_name().is_some_and(|n| n != "mod.rs") {
                files.push(path);
            }
        }
        let mut declared = BTreeSet::new();
        for path in &files {
            let text = std::fs::read_to_string(path).expect("a source file");
            assert!(
                text.contains("crate::register!"),
                "{}: no registration",
                path.display()
            );
            for part in text.split("CollectorName::new(\"").skip(1) {
                let name = part.split('"').next().unwrap_or_default();
                declared.insert(name.to_owned());
            }
        }
        assert!(declared.len() >= 11, "{declared:?}");
        for name in &declared {
            assert!(find(name).is_some(), "{name}: declared, not registered");
        }
    }
}
