//! `/proc/net/softnet_stat`: its parser (`parse.rs`), the rows placed on their CPUs, the collector
//! and its series.

mod parse;

pub use parse::*;

use std::sync::Mutex;

use nodemedic_exposition::{Encoder, Kind};
use nodemedic_sample::Snapshot;

use self::parse as softnet;
use super::skipped_warnings;
use crate::registry::Render;
use crate::sources::topology::Topology;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// `softnet_stat` rows placed on their CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Softnet(pub Vec<(u32, SoftnetRow)>);

nodemedic_sample::deref! { Softnet => Vec<(u32, SoftnetRow)> }

/// /proc/net/softnet_stat; after topology, whose online CPUs place its rows.
pub const NAME: crate::CollectorName = crate::CollectorName::new("softnet");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 60,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&[
            "8cpu-collapsed",
            "8cpu-legacy-softnet",
            "8cpu-offline"
        ]),
        golden: crate::registry::Golden::Series(&[(
            "8cpu-collapsed",
            "nodemedic_softnet_processed_total{"
        )]),
        fuzz: crate::registry::Fuzz::Targets(&["softnet"]),
    },
    faults: &[crate::registry::FileKind {
        name: "softnet_stat",
        tree: "8cpu-collapsed",
        pattern: "proc/net/softnet_stat",
        table: true,
        optional: false,
        empty_ok: false,
        impact: crate::registry::Impact::NoGroup,
        may_change: &["collector/softnet", "count/softnet", "series/softnet"],
    },],
    render: Some(render),
    build: crate::registry::Build::Here(|_| { Some(Box::new(SoftnetCollector::default())) }),
});

/// `/proc/net/softnet_stat`.
#[derive(Default)]
pub struct SoftnetCollector {
    kept: Mutex<Kept>,
}

/// Lists kept from one sample to the next, each a row per CPU: the parsed file, and the rows
/// placed on their CPUs that a past snapshot gave back ([`Collector::recycle`]).
#[derive(Default)]
struct Kept {
    parsed: softnet::SoftnetTable,
    placed: Vec<(u32, softnet::SoftnetRow)>,
}

impl Collector for SoftnetCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("net/softnet_stat");
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let Kept { parsed, placed } = &mut *kept;
        let blank = ctx.reader.read_with(&path, |text| {
            softnet::parse_into(text, parsed);
            text.trim().is_empty()
        })?;
        let mut warnings = skipped_warnings(&path, &parsed.skipped);
        // The kernel writes one row per possible CPU: no rows at all is a broken read.
        if parsed.rows.is_empty() {
            let why = if blank {
                "empty (the kernel writes one row per CPU)"
            } else {
                "no usable rows"
            };
            return Err(ReadError::parse(&path, why).into());
        }
        let online: Vec<u32> = match snap.get::<Topology>() {
            Some(t) => t.online.iter().collect(),
            None => {
                if parsed.rows.iter().any(|r| r.cpu.is_none()) {
                    warnings.push(
                        "topology unknown: softnet rows without a CPU column mapped to CPUs 0..n"
                            .into(),
                    );
                }
                (0..parsed.rows.len() as u32).collect()
            }
        };
        let mut placed = std::mem::take(placed);
        let unplaced = softnet::assign_cpus_into(&parsed.rows, &online, &mut placed);
        if unplaced > 0 {
            warnings.push(format!(
                "{}: {unplaced} row(s) more than online CPUs, not attributed",
                path.display()
            ));
        }
        snap.put(Softnet(placed));
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }

    /// Listed in every network namespace, with every CPU's counters: a pod's is the node's.
    fn network_namespace(&self) -> crate::netns::NetnsUse {
        crate::netns::NetnsUse::NodeWide("/proc/net/softnet_stat")
    }

    fn recycle(&self, snap: &mut Snapshot) {
        if let Some(Softnet(placed)) = snap.take::<Softnet>() {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            if placed.capacity() > kept.placed.capacity() {
                kept.placed = placed;
            }
        }
    }
}
/// Per CPU: packets processed, dropped (backlog full) and squeezed (budget or time out).
fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let snap = ctx.snapshot;
    let Some(rows) = snap.get::<Softnet>() else {
        return;
    };
    let mut num = itoa::Buffer::new();
    type Field = fn(&SoftnetRow) -> u32;
    let fields: [(&str, &str, Field); 3] = [
        ("nodemedic_softnet_processed", "Packets processed by the CPU's NET_RX softirq (softnet_stat).", |r| r.processed),
        ("nodemedic_softnet_dropped", "Packets dropped because the CPU's backlog queue was full (softnet_stat).", |r| r.dropped),
        ("nodemedic_softnet_times_squeezed", "Times the CPU's NET_RX softirq ran out of budget or time with work left (softnet_stat).", |r| r.time_squeeze),
    ];
    for (name, help, field) in fields {
        e.family(name, Kind::Counter, help);
        for (cpu, row) in rows.iter() {
            e.sample(&[("cpu", num.format(*cpu))], f64::from(field(row)));
        }
    }
}
