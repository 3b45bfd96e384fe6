use std::sync::{Arc, Mutex};

use nodemedic_kernel::interrupts::{self, IrqDescription};
use nodemedic_sample::Snapshot;

use super::skipped_warnings;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// /proc/interrupts.
pub const NAME: crate::CollectorName = crate::CollectorName::new("interrupts");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 20,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&[
            "8cpu-collapsed",
            "96cpu-collapsed",
            "256cpu-healthy",
            "aarch64",
            "aarch64-128cpu",
            "8cpu-legacy-softnet",
        ]),
        golden: crate::registry::Golden::Series(&[
            ("8cpu-collapsed", "nodemedic_irq_interrupts_total{"),
            ("aarch64", "nodemedic_arch_interrupts_total{type=\"IPI0\"}"),
        ]),
        fuzz: crate::registry::Fuzz::Targets(&["interrupts"]),
    },
    faults: crate::registry::Faults::Kinds(&[crate::registry::FileKind {
        name: "interrupts",
        tree: "8cpu-collapsed",
        pattern: "proc/interrupts",
        table: true,
        optional: false,
        empty_ok: false,
        impact: crate::registry::Impact::AllGroups,
        may_change: &[
            "collector/interrupts",
            "collector/irq_affinity",
            "collector/pci_devices",
            "count/irqs",
            "count/pci",
        ],
    },]),
    render: None,
    build: crate::registry::Build::Here(|_| { Some(Box::new(InterruptsCollector::default())) }),
});

/// `/proc/interrupts`, streamed a line at a time into the parser: on 1024 CPUs the file is
/// 7 MB, which would otherwise sit in memory whole next to the counts parsed from it.
///
/// The rows' descriptions (chip, handlers) of one sample are handed to the next sample's
/// parse, which shares those that read the same instead of allocating them again, and sizes
/// the table for as many rows and non-zero counts as the last one had.
#[derive(Default)]
pub struct InterruptsCollector {
    known: Mutex<Known>,
}

/// What the last table leaves for the next parse.
#[derive(Default)]
struct Known {
    descriptions: Vec<(u32, Arc<IrqDescription>)>,
    cells: usize,
    /// A past table given back ([`Collector::recycle`]), whose storage the next parse fills.
    spare: Option<interrupts::Interrupts>,
}

impl Collector for InterruptsCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("interrupts");
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let known = &mut *known;
        let spare = known.spare.take().unwrap_or_default();
        let mut parser = interrupts::Parser::reusing_in(&known.descriptions, spare);
        parser.reserve_cells(known.cells);
        ctx.reader
            .read_lines(&path, |line, complete| parser.line(line, complete))?;
        let parsed = parser.finish().map_err(|e| ReadError::parse(&path, e))?;
        parsed.descriptions(&mut known.descriptions);
        known.cells = parsed.cells();
        let warnings = skipped_warnings(&path, &parsed.skipped);
        snap.interrupts = Some(Arc::new(parsed));
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }

    fn recycle(&self, snap: &mut Snapshot) {
        if let Some(table) = snap.interrupts.take().and_then(|t| Arc::try_unwrap(t).ok()) {
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            known.spare = Some(table);
        }
    }
}
