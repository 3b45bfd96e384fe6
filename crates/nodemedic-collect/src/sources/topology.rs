//! The CPU topology from sysfs: online, possible, isolated and `nohz_full` CPUs, NUMA nodes.

use std::collections::BTreeMap;

use nodemedic_exposition::{Encoder, Kind};
use nodemedic_kernel::CpuSet;
use nodemedic_sample::Snapshot;
use serde::Serialize;

use super::irqbalance::IrqbalanceConfig;
use super::{complete, cpuset_file, RescanCache};
use crate::registry::Render;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// The CPUs and NUMA nodes: which CPUs are online, possible, isolated and `nohz_full`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Topology {
    pub online: CpuSet,
    pub possible: Option<CpuSet>,
    pub isolated: CpuSet,
    pub nohz_full: CpuSet,
    /// NUMA node → its CPUs. Empty when the kernel has no NUMA support.
    pub numa_nodes: BTreeMap<u32, CpuSet>,
}

impl Topology {
    pub fn node_of(&self, cpu: u32) -> Option<u32> {
        self.numa_nodes
            .iter()
            .find_map(|(node, cpus)| cpus.contains(cpu).then_some(*node))
    }
}

/// /sys/devices/system/cpu: online, possible, isolated and nohz_full CPUs, and the NUMA nodes.
pub const NAME: crate::CollectorName = crate::CollectorName::new("topology");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 10,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&[
            "8cpu-collapsed",
            "8cpu-offline",
            "isolated",
            "aarch64"
        ]),
        golden: crate::registry::Golden::Series(&[(
            "8cpu-offline",
            "nodemedic_cpus{state=\"online\"} 6"
        )]),
        fuzz: crate::registry::Fuzz::Targets(&["cpuset"]),
    },
    faults: &[
        crate::registry::FileKind {
            name: "cpu online",
            tree: "8cpu-collapsed",
            pattern: "sys/devices/system/cpu/online",
            table: false,
            optional: false,
            empty_ok: false,
            impact: crate::registry::Impact::AllGroups,
            may_change: &[
                "collector/topology",
                "count/topology",
                "collector/softnet",
                "count/softnet",
                "series/softnet",
                "series/topology"
            ],
        },
        crate::registry::FileKind {
            name: "cpu possible",
            tree: "8cpu-collapsed",
            pattern: "sys/devices/system/cpu/possible",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::NoGroup,
            may_change: &["collector/topology", "count/topology"],
        },
        crate::registry::FileKind {
            name: "cpu isolated",
            tree: "8cpu-collapsed",
            pattern: "sys/devices/system/cpu/isolated",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::AllGroups,
            may_change: &["collector/topology", "count/topology"],
        },
        crate::registry::FileKind {
            name: "numa node cpulist",
            tree: "8cpu-collapsed",
            pattern: "sys/devices/system/node/*/cpulist",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::AllGroups,
            may_change: &["collector/topology", "count/topology"],
        },
    ],
    render: Some(render),
    build: crate::registry::Build::Here(|_| { Some(Box::new(TopologyCollector::default())) }),
});

/// Online, isolated and `nohz_full` CPUs and NUMA nodes, from sysfs.
///
/// Only `online` is read every sample (CPU hotplug must show at once); the rest is read on
/// rescans and when the online set changes.
#[derive(Default)]
pub struct TopologyCollector {
    cache: RescanCache<Topology>,
}

impl Collector for TopologyCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let cpu = ctx.paths.sysfs.join("devices/system/cpu");
        let online_path = cpu.join("online");
        let online = ctx.reader.read_with(&online_path, |text| {
            CpuSet::parse_list(complete(&online_path, text)?)
                .map_err(|e| ReadError::parse(&online_path, e))
        })??;
        let hotplugged = self.cache.peek(|t| t.online != online).unwrap_or(true);
        let (topology, warnings) = self.cache.get(ctx.rescan || hotplugged, || {
            Ok(read_rest(ctx, &cpu, online))
        })?;
        snap.put(topology);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}

/// Everything but `online`, which the caller read.
fn read_rest(ctx: &Ctx<'_>, cpu: &std::path::Path, online: CpuSet) -> (Topology, Vec<String>) {
    let mut out = Collected::default();
    let mut optional = |name: &str| match cpuset_file(ctx.reader, &cpu.join(name), false) {
        Ok(set) => set,
        Err(e) => {
            out.warnings.push(e.to_string());
            None
        }
    };
    let possible = optional("possible");
    let isolated = optional("isolated").unwrap_or_default();
    let nohz_full = optional("nohz_full").unwrap_or_default();
    let mut numa_nodes = BTreeMap::new();
    let node_dir = ctx.paths.sysfs.join("devices/system/node");
    if let Ok(entries) = std::fs::read_dir(&node_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            match cpuset_file(ctx.reader, &entry.path().join("cpulist"), false) {
                Ok(Some(cpus)) => {
                    numa_nodes.insert(id, cpus);
                }
                Ok(None) => {}
                Err(e) => out.warnings.push(e.to_string()),
            }
        }
    }
    let topology = Topology {
        online,
        possible,
        isolated,
        nohz_full,
        numa_nodes,
    };
    (topology, out.warnings)
}
/// CPUs by state, with irqbalance's banned CPUs (from its collector).
fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let snap = ctx.snapshot;
    let Some(t) = snap.get::<Topology>() else {
        return;
    };
    e.family(
        "nodemedic_cpus",
        Kind::Gauge,
        "CPUs by state: online, isolated, nohz_full, irqbalance_banned (from irqbalance's config file).",
    );
    e.sample(&[("state", "online")], t.online.len() as f64);
    e.sample(&[("state", "isolated")], t.isolated.len() as f64);
    e.sample(&[("state", "nohz_full")], t.nohz_full.len() as f64);
    if let Some(irqb) = snap.get::<IrqbalanceConfig>() {
        e.sample(
            &[("state", "irqbalance_banned")],
            irqb.banned_cpus.len() as f64,
        );
    }
}
