//! `/proc/interrupts`: its parser (`parse.rs`), the device each IRQ belongs to (`device.rs`), the
//! collector and its series.

pub mod device;
mod parse;

pub use parse::*;

use std::sync::{Arc, Mutex};

use nodemedic_exposition::{Encoder, Kind};
use nodemedic_sample::{GroupVerdict, Snapshot};

use self::parse as interrupts;
use super::skipped_warnings;
use crate::registry::Render;
use crate::sources::irq_affinity::IrqAffinities;
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
    faults: &[crate::registry::FileKind {
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
            "series/interrupts"
        ],
    },],
    render: Some(render),
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
        snap.put(parsed);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }

    fn recycle(&self, snap: &mut Snapshot) {
        if let Some(table) = snap.take::<Interrupts>() {
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            known.spare = Some(table);
        }
    }
}

// ---- its series ----

/// Label values written back to back into one buffer: a value per CPU or per IRQ without a
/// `String` apiece (a 256-CPU render made ~1,300 of them).
#[derive(Default)]
struct Values {
    text: String,
    ends: Vec<usize>,
}

impl Values {
    /// Empties the list for `values` values of about `bytes` bytes in all, keeping its memory.
    fn refill(&mut self, values: usize, bytes: usize) {
        self.text.clear();
        self.ends.clear();
        self.text.reserve(bytes);
        self.ends.reserve(values);
    }

    /// Appends the value `write` writes.
    fn push(&mut self, write: impl FnOnce(&mut String)) {
        write(&mut self.text);
        self.ends.push(self.text.len());
    }

    fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| self.text.get(start..end).unwrap_or(""))
    }
}

/// Per IRQ: its count, its group (the collapse detector's), its handlers, where it may go
/// and goes (from the affinity and PCI collectors); per CPU: device interrupts; the
/// architecture interrupts; the IRQ × CPU matrix only when `[metrics]` asks for it.
/// Cardinality: per IRQ, per CPU or per group by default, never per IRQ × CPU (a 256-CPU
/// node with 400 IRQs would otherwise expose 100,000 series).
fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let (snap, verdicts, opts) = (ctx.snapshot, ctx.groups, ctx.options);
    let Some(ints) = snap.get::<Interrupts>() else {
        return;
    };
    let labels = irq_labels(ints, verdicts, ctx.scratch.get());
    e.family(
        "nodemedic_irq_interrupts",
        Kind::Counter,
        "Interrupts handled per IRQ, summed over CPUs (from /proc/interrupts).",
    );
    // Numbers are written as labels from a buffer on the stack: a value list of every CPU's
    // number was two allocations per family, mapped and unmapped per render by musl's
    // allocator on a big node (BENCHMARKS.md, "Fewer files, fewer calls, faster zeros").
    let mut num = itoa::Buffer::new();
    for (line, (group, name)) in ints.irqs.iter().zip(labels.iter()) {
        e.sample(
            &[
                ("irq", num.format(line.irq)),
                ("group", group),
                ("name", name),
            ],
            ints.counts(line).total() as f64,
        );
    }
    irq_placement(e, snap, ints, &labels);
    let per_cpu = device_interrupts_per_cpu(ints);
    e.family(
        "nodemedic_cpu_device_interrupts",
        Kind::Counter,
        "Device (numbered) interrupts handled per CPU, summed over IRQs.",
    );
    for (cpu, total) in ints.cpus.iter().zip(&per_cpu) {
        e.sample(&[("cpu", num.format(*cpu))], *total as f64);
    }
    e.family(
        "nodemedic_arch_interrupts",
        Kind::Counter,
        "Architecture interrupts by type (LOC, RES, CAL, TLB, NMI, IPI…) from /proc/interrupts.",
    );
    for arch in &ints.arch {
        if opts.per_cpu_arch_interrupts && arch.counts.len() > 1 {
            for (cpu, count) in ints.cpus.iter().zip(&arch.counts) {
                e.sample(
                    &[("type", &arch.name), ("cpu", num.format(*cpu))],
                    *count as f64,
                );
            }
        } else {
            let total = arch.counts.iter().fold(0u64, |a, c| a.saturating_add(*c));
            e.sample(&[("type", &arch.name)], total as f64);
        }
    }
    if opts.per_irq_per_cpu {
        e.family(
            "nodemedic_irq_cpu_interrupts",
            Kind::Counter,
            "Interrupts per IRQ per CPU (enabled by metrics.per_irq_per_cpu).",
        );
        let mut cpu_num = itoa::Buffer::new();
        for line in &ints.irqs {
            let irq = num.format(line.irq);
            for (cpu, count) in ints.cpus.iter().zip(ints.counts(line).dense()) {
                e.sample(&[("irq", irq), ("cpu", cpu_num.format(*cpu))], count as f64);
            }
        }
    }
}

/// The lists the IRQ labels are built in, kept between renderings ([`crate::registry::Scratch`]).
#[derive(Default)]
struct IrqScratch {
    /// Each IRQ row's device group, as an index into the verdicts ([`NO_GROUP`]: none).
    groups: Vec<u32>,
    /// Each IRQ row's handlers, comma-separated.
    names: Values,
}

const NO_GROUP: u32 = u32::MAX;

/// Each IRQ's labels besides its number, aligned with `ints.irqs`: its device group (empty
/// when in none) and its handlers.
struct IrqLabels<'a> {
    groups: &'a [u32],
    names: &'a Values,
    verdicts: &'a [GroupVerdict],
}

impl IrqLabels<'_> {
    fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let group = |g: &u32| {
            self.verdicts
                .get(*g as usize)
                .map_or("", |v| v.group.name.as_str())
        };
        self.groups.iter().map(group).zip(self.names.iter())
    }
}

fn irq_labels<'a>(
    ints: &Interrupts,
    verdicts: &'a [GroupVerdict],
    scratch: &'a mut IrqScratch,
) -> IrqLabels<'a> {
    // Each row's group, placed by the row's IRQ: the kernel prints IRQs in order, so a
    // binary search finds the rows, where a hash map of every IRQ was built each render.
    // Every row with that IRQ gets the group (a damaged table can repeat one), and a later
    // group of the same IRQ wins, as with the map.
    let groups = &mut scratch.groups;
    groups.clear();
    groups.resize(ints.irqs.len(), NO_GROUP);
    let ordered = ints.irqs.is_sorted_by_key(|l| l.irq);
    for (index, v) in verdicts.iter().enumerate() {
        let index = u32::try_from(index).unwrap_or(NO_GROUP);
        for &irq in v.group.irqs.iter().chain(&v.group.other_irqs) {
            let rows = if ordered {
                let from = ints.irqs.partition_point(|l| l.irq < irq);
                from..from + ints.irqs[from..].partition_point(|l| l.irq == irq)
            } else {
                0..ints.irqs.len()
            };
            for r in rows {
                if ints.irqs.get(r).is_some_and(|l| l.irq == irq) {
                    if let Some(group) = groups.get_mut(r) {
                        *group = index;
                    }
                }
            }
        }
    }
    let names = &mut scratch.names;
    names.refill(ints.irqs.len(), ints.irqs.len() * 24);
    for line in &ints.irqs {
        names.push(|t| {
            for (i, action) in line.desc.actions.iter().enumerate() {
                if i > 0 {
                    t.push(',');
                }
                t.push_str(action);
            }
        });
    }
    IrqLabels {
        groups,
        names,
        verdicts,
    }
}

/// Where each IRQ may go and goes: its lowest delivery CPU and the sizes of its affinities.
fn irq_placement(e: &mut Encoder, snap: &Snapshot, ints: &Interrupts, labels: &IrqLabels<'_>) {
    let affinity = snap.get::<IrqAffinities>();
    let rows = || {
        ints.irqs
            .iter()
            .zip(labels.iter())
            .filter_map(|(line, (group, _))| Some((affinity?.get(&line.irq)?, line.irq, group)))
    };
    let mut num = itoa::Buffer::new();
    e.family(
        "nodemedic_irq_effective_cpu",
        Kind::Gauge,
        "Lowest CPU the IRQ is delivered to (effective_affinity, else smp_affinity).",
    );
    for (aff, irq, group) in rows() {
        if let Some(cpu) = aff.delivery_cpus().and_then(|c| c.first()) {
            e.sample(
                &[("irq", num.format(irq)), ("group", group)],
                f64::from(cpu),
            );
        }
    }
    e.family(
        "nodemedic_irq_affinity_cpus",
        Kind::Gauge,
        "Number of CPUs in the IRQ's smp_affinity (where it may be delivered).",
    );
    for (aff, irq, group) in rows() {
        if let Some(smp) = &aff.smp {
            e.sample(
                &[("irq", num.format(irq)), ("group", group)],
                smp.len() as f64,
            );
        }
    }
    e.family(
        "nodemedic_irq_effective_affinity_cpus",
        Kind::Gauge,
        "Number of CPUs in the IRQ's effective_affinity (where it is delivered).",
    );
    for (aff, irq, group) in rows() {
        if let Some(eff) = &aff.effective {
            e.sample(
                &[("irq", num.format(irq)), ("group", group)],
                eff.len() as f64,
            );
        }
    }
}

/// Device interrupts per CPU (aligned with `ints.cpus`), summed over IRQs, plus the IRQs
/// that went away while nodemedic watched, so a freed IRQ does not make the per-CPU counter
/// go backwards.
fn device_interrupts_per_cpu(ints: &Interrupts) -> Vec<u64> {
    let mut per_cpu = vec![0u64; ints.cpus.len()];
    for (i, r) in ints.retired.iter().enumerate().take(per_cpu.len()) {
        per_cpu[i] = *r;
    }
    for line in &ints.irqs {
        for (i, c) in ints.counts(line).nonzero() {
            if let Some(sum) = per_cpu.get_mut(i) {
                *sum = sum.saturating_add(c);
            }
        }
    }
    per_cpu
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Per CPU: every IRQ's count, a short row included, plus what IRQs that went away had.
    #[test]
    fn device_interrupts_per_cpu_keep_what_freed_irqs_had() {
        let mut ints = crate::sources::interrupts::parse(
            "           CPU0       CPU1       CPU2\n\
             \x20 24:         10          0          5   PCI-MSI 1-edge      virtio0-input.0\n\
             \x20 25:          1          2\n\
             NMI:          7          7          7   Non-maskable interrupts\n",
        )
        .unwrap();
        assert_eq!(device_interrupts_per_cpu(&ints), vec![11, 2, 5]);
        ints.retired = vec![100, 200, 300, 400];
        assert_eq!(device_interrupts_per_cpu(&ints), vec![111, 202, 305]);
    }

    /// Each row's group label, as the map it replaced gave it: every row of an IRQ (a
    /// damaged table can repeat one), the later group of an IRQ named twice, "" for none;
    /// in order or not.
    #[test]
    fn irq_labels_name_every_row_of_an_irq_and_the_later_group() {
        use nodemedic_sample::verdict::{DeviceGroup, GroupVerdict};
        let verdict = |name: &str, irqs: Vec<u32>, other_irqs: Vec<u32>| GroupVerdict {
            group: DeviceGroup {
                key: format!("dev:{name}"),
                name: name.to_string(),
                irqs,
                other_irqs,
                ..Default::default()
            },
            ..Default::default()
        };
        let verdicts = [
            verdict("nic", vec![24, 25], vec![9]),
            verdict("nvme", vec![30], vec![25]),
        ];
        for order in [[9u32, 24, 25, 25, 30, 31], [31, 25, 9, 30, 25, 24]] {
            let mut ints = Interrupts::with_cpus(vec![0]);
            for irq in order {
                ints.push_irq(irq, std::sync::Arc::new(IrqDescription::default()), &[1]);
            }
            let mut scratch = IrqScratch::default();
            let labels = irq_labels(&ints, &verdicts, &mut scratch);
            let got: Vec<(u32, &str)> = ints
                .irqs
                .iter()
                .zip(labels.iter())
                .map(|(l, (group, _))| (l.irq, group))
                .collect();
            let want = |irq: u32| match irq {
                9 | 24 => "nic",
                25 | 30 => "nvme",
                _ => "",
            };
            for (irq, group) in got {
                assert_eq!(group, want(irq), "IRQ {irq}, rows {order:?}");
            }
        }
    }
}
